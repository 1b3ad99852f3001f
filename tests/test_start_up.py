"""The command line's start-up (issue 48): ``privagg --help`` and ``import privagg`` load none of the heavy
modules, nor the protocol registry, and the command line ``privagg`` runs (each command made only when named) is
the whole one that typer's runner sees (``privagg.cli.app``): the same commands, help, checks and messages."""

import subprocess
import sys

import pytest

from privagg import cli
from privagg.cli import app

# the modules neither may load: what a service or a calibration needs, and the registry (every protocol's module)
HEAVY = ("scipy", "pydantic", "sqlalchemy", "httpx", "fastapi", "uvicorn", "rich", "numba", "pyarrow",
         "privagg.protocols.registry")
LOADED = "sys.stderr.write(repr(sorted(m for m in {heavy!r} if m in sys.modules)))"


@pytest.mark.parametrize("code", [
    "import sys, privagg",
    "import sys\nsys.argv = ['privagg', '--help']\nfrom privagg.cli import main\ntry:\n    main()\nexcept SystemExit:\n"
    "    pass",
], ids=["import privagg", "privagg --help"])
def test_the_import_and_the_help_load_no_heavy_module(code):
    out = subprocess.run([sys.executable, "-c", f"{code}\n{LOADED.format(heavy=HEAVY)}"], capture_output=True,
                         text=True, check=True)
    assert out.stderr == "[]"


def _words(group=None, words=()):
    """Every command's words: the root, each group, each command."""
    from typer.main import get_command

    group = get_command(app) if group is None else group
    yield words
    for name, command in group.commands.items():
        if hasattr(command, "commands"):
            yield from _words(command, (*words, name))
        else:
            yield (*words, name)


WORDS = list(_words())


def _run(command, args, capfd):
    try:
        status = command.main(list(args), prog_name="privagg", standalone_mode=False)
    except SystemExit as stop:
        status = stop.code
    except Exception as err:  # what main() turns into one line: compared by its class and message
        status = f"{type(err).__name__}: {err}"
    captured = capfd.readouterr()
    return status, captured.out, captured.err


def test_every_command_is_enumerated():
    assert len(WORDS) > 80 and {("estimate", "fe1"), ("analyze",), ("demo-service",), ("task", "create")} <= set(WORDS)


@pytest.mark.parametrize("args", [
    *([*words, "--help"] for words in WORDS),
    ["estimat"], ["calibrate", "fe1", "--users", "1_000", "--domain", "8", "--epsilon", "1", "--delta", "1e-6"],
    ["calibrate", "grr", "--users", "100", "--domain", "8", "--epsilon", "nan"],
    ["analyze", "fe9", "--params", "p.json", "--messages", "m"], ["analyze", "fe1", "--params", "/proc/x/y"],
    ["demo-service", "nope"], ["estimate", "fe1", "--input", "/proc/x/y"], ["task"], ["--version"],
], ids=lambda args: " ".join(args))
def test_the_command_line_main_runs_is_the_whole_one(args, capfd, tmp_path, monkeypatch):
    """Each command of the command line :func:`privagg.cli.main` runs is made when the command line names it;
    its help, its refusals and its messages are those of the whole command line."""
    from typer.main import get_command

    monkeypatch.chdir(tmp_path)
    assert _run(cli._command_line(), args, capfd) == _run(get_command(app), args, capfd)
