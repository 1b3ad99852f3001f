# Set-up and everyday commands. Everything runs inside .venv, made from
# python3.11 (or python3 if that is what the machine calls it).
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
PY := $(VENV)/bin/python

.PHONY: demo test test-all bench clean chromium bytecode

$(VENV)/installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[test]'
	touch $@

# An editable install leaves src/ without compiled bytecode; where PYTHONDONTWRITEBYTECODE is set (it is on the
# machines this was developed on) every process then compiles privagg's modules from source, about 0.25 s a start.
# compileall writes them once, as pip does for a regular install, and afterwards only the sources that changed.
bytecode: $(VENV)/installed
	@$(PY) -m compileall -q src >/dev/null

demo: $(VENV)/installed bytecode
	$(VENV)/bin/privagg estimate fe1 --epsilon 1 --delta 1e-10 --top 15 --seed 0

# one test process per core (pytest-xdist): the service tests spend much of their time waiting on their servers.
# make test (and CI) leaves out the tests marked slow: each property they check has a fast version in the default
# run; make test-all runs them too. make test prints its 20 slowest tests (--durations), so that a test grown slow
# shows in every run. --dist worksteal: a worker that runs out of tests takes half of what is still queued on the
# other, where xdist's default (load) stops it and leaves the other its queue (one run: 97 service tests, 87 s alone
# on one core at the end)
test: $(VENV)/installed bytecode chromium
	$(PY) -m pytest -n auto --dist worksteal -m "not slow" --durations=20

test-all: $(VENV)/installed bytecode chromium
	$(PY) -m pytest -n auto

# the operator console's test runs in Debian's Chromium: installed here where apt-get can (as root), else the test
# fails saying how to install it
chromium:
	@command -v chromium >/dev/null || { [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null && \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; } || \
	  echo "warning: no Chromium (apt-get install chromium): the console's browser test will fail"

bench: $(VENV)/installed bytecode
	$(PY) benchmarks/run.py --write docs/benchmarks.md

clean:
	rm -rf $(VENV) .bench-peers build src/*.egg-info .pytest_cache
	find src -name __pycache__ -prune -exec rm -rf {} +
