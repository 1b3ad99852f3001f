# Set-up and everyday commands. Everything runs inside .venv, made from
# python3.11 (or python3 if that is what the machine calls it).
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
PY := $(VENV)/bin/python

.PHONY: demo test bench clean

$(VENV)/installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[test]'
	touch $@

demo: $(VENV)/installed
	$(VENV)/bin/privagg estimate fe1 --epsilon 1 --delta 1e-10 --top 15 --seed 0

# one test process per core (pytest-xdist): the service tests spend much of their time waiting on their servers
test: $(VENV)/installed
	$(PY) -m pytest -n auto

bench: $(VENV)/installed
	$(PY) benchmarks/run.py --write docs/benchmarks.md

clean:
	rm -rf $(VENV) build src/*.egg-info .pytest_cache
