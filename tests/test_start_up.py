"""The command line's start-up (issue 48): ``privagg --help`` and ``import privagg`` load none of the heavy
modules, nor the protocol registry, and the command line ``privagg`` runs (each command made only when named) is
the whole one that typer's runner sees (``privagg.cli.app``): the same commands, help, checks and messages."""

import functools
import json
import os
import subprocess
import sys

import numpy as np
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


# what a protocol command may not load: the other protocols' modules, the services, and what neither of these two
# commands uses (pydantic: typer's conversions are made plain, cli.options._plain_conversions; rich: --json)
OTHERS = ("privagg.protocols.sampling_sharing", "privagg.protocols.sampling_calibration",
          "privagg.protocols.sampling_servers", "privagg.protocols.central_baselines",
          "privagg.protocols.heavy_hitters",
          "privagg.protocols.privacy_blanket", "privagg.protocols.sparse_vector", "privagg.protocols.sharing_parties",
          "privagg.protocols.two_server_parties", "privagg.simulate.secret_sharing", "privagg.service", "scipy",
          "pydantic", "rich", "numba", "sqlalchemy", "httpx", "fastapi",
          # message folders (--write-messages) and tables by user (--user-column) only where asked for
          "privagg.engine", "privagg.simulate.frames", "privagg.io.frames")
COMMAND = "import sys\nsys.argv = {argv!r}\nfrom privagg.cli import main\ntry:\n    main()\nexcept SystemExit:\n    pass"


# what a command's help uses none of: drawing (numpy.random and hashlib, which core.randomness loads on first use,
# not on import: 12 and 3 ms of the help's CPU), a copy of standard input (tempfile, cli.inputs': 2 ms)
HELP_UNUSED = ("numpy.random", "hashlib", "tempfile", "secrets")


@pytest.mark.parametrize("argv", [["privagg", "--help"], ["privagg", "estimate", "fe1", "--help"]], ids=" ".join)
def test_a_help_loads_nothing_it_does_not_use(argv):
    loaded = f"sys.stderr.write(repr(sorted(m for m in {HELP_UNUSED!r} if m in sys.modules)))"
    out = subprocess.run([sys.executable, "-c", COMMAND.format(argv=argv) + "\n" + loaded], capture_output=True,
                         text=True, check=True)
    assert out.stderr == "[]" and "Usage: privagg" in out.stdout


@pytest.mark.parametrize("args", [
    # 200,000 users over 1,024 items: OLH counts by key (numpy, hashing.by_key_cheaper), as at the benchmark's 10^6
    ["estimate", "olh", "--input", "items.txt", "--epsilon", "1", "--domain", "1024", "--seed", "1", "--json",
     "--output", "report.json"],
    ["calibrate", "grr", "--users", "1000", "--domain", "8", "--epsilon", "1", "--json"],
], ids=lambda args: " ".join(args[:2]))
def test_a_protocol_command_imports_its_own_protocol_only(args, tmp_path):
    """The registry imports a protocol's module when the command first uses it (registry._Reference): olh and grr
    load local_baselines (and balls_into_bins, its analyzers' base), not the other protocols, the services, numba,
    pydantic or scipy."""
    (tmp_path / "items.txt").write_text("".join(f"{i * 7 % 1024}\n" for i in range(200_000)))
    loaded = f"sys.stderr.write(repr(sorted(m for m in sys.modules if m.startswith({OTHERS!r}))))"
    out = subprocess.run([sys.executable, "-c", COMMAND.format(argv=["privagg", *args]) + "\n" + loaded + "\n"
                          "sys.stdout.write(repr('privagg.protocols.local_baselines' in sys.modules))"],
                         capture_output=True, text=True, cwd=tmp_path, check=True)
    assert (out.stderr, out.stdout[-4:]) == ("[]", "True")
    report = (tmp_path / "report.json").read_text() if "--output" in args else out.stdout
    assert f'"protocol": "{args[1]}"' in report


# what blanket-vector's estimate uses none of: the other protocols, the message folders (privagg.engine: only with
# --write-messages), the tables by user (simulate.frames, io.frames: only with --user-column), exact rationals
# (fractions: pure-LDP randomized response's coins), scipy once its calibration is kept (privacy/evaluation_cache.py)
VECTOR_UNUSED = (*(m for m in OTHERS if m != "privagg.protocols.privacy_blanket"), "privagg.protocols.local_baselines",
                 "fractions", "pyarrow")


def test_a_vector_estimate_imports_what_it_uses_only(tmp_path):
    """``estimate blanket-vector`` over a .npy (issue 48's vector row, whose whole process is timed against a numpy
    script) loads its own protocol and none of VECTOR_UNUSED; the first run computes and keeps the calibration
    (scipy's bounds), the second reads it. Before: simulate.frames for a one-line helper, privagg.engine (and
    logging) for --write-messages unasked, fractions and decimal through core.coins (29 + 12 + 8 M instructions
    of the process's 1,093 M at n = 2 x 10^5 under callgrind)."""
    np.save(tmp_path / "vectors.npy", np.random.default_rng(1).random((2000, 5), dtype=np.float32))
    args = ["privagg", "estimate", "blanket-vector", "--input", "vectors.npy", "--epsilon", "1", "--delta", "1e-9",
            "--seed", "1", "--json", "--output", "report.json"]
    loaded = (f"sys.stderr.write('\\n' + repr(sorted(m for m in sys.modules if m.startswith({VECTOR_UNUSED!r})))"
              " + repr('privagg.protocols.privacy_blanket' in sys.modules))")
    env = {**os.environ, "PRIVAGG_CACHE": str(tmp_path / "cache")}
    for _ in range(2):
        out = subprocess.run([sys.executable, "-c", COMMAND.format(argv=args) + "\n" + loaded], capture_output=True,
                             text=True, cwd=tmp_path, env=env)
        assert out.returncode == 0, out.stderr
        assert json.loads((tmp_path / "report.json").read_text())["n_users"] == 2000
    assert out.stderr.splitlines()[-1] == "[]True", out.stderr


# what a command loads only where it uses it (issue 48): scipy for the numerical privacy bounds, pydantic never (typer's
# conversions made plain), rich for tables, progress bars and JSON on a terminal; one-line messages are plain text
WHERE_USED = ("scipy", "pydantic", "rich")


@pytest.mark.parametrize("args", [
    ["--version"],
    ["calibrate", "grr", "--users", "1000", "--domain", "8", "--epsilon", "nan"],  # a number refused as it is read
    ["calibrate", "grr", "--users", "1", "--domain", "8", "--epsilon", "1"],  # refused by the protocol's checks
    ["estimate", "olh", "--input", "items.txt", "--epsilon", "-1", "--domain", "8", "--json"],  # refused as calibrated
    ["estimate", "olh", "--input", "missing.txt", "--epsilon", "1"],  # a path refused as it is read
    ["protocols", "--json"],
], ids=lambda args: " ".join(args))
def test_a_cheap_command_loads_no_scipy_pydantic_or_rich(args, tmp_path):
    """Errors, warnings and messages are printed as plain lines, JSON to a pipe as plain text: none of these commands
    loads rich (nor scipy or pydantic), which every message did (about 40 ms of modules)."""
    (tmp_path / "items.txt").write_text("1\n2\n7\n")
    loaded = f"sys.stderr.write('\\n' + repr(sorted(m for m in {WHERE_USED!r} if m in sys.modules)))"
    out = subprocess.run([sys.executable, "-c", COMMAND.format(argv=["privagg", *args]) + "\n" + loaded],
                         capture_output=True, text=True, cwd=tmp_path)
    assert out.returncode == 0 and out.stderr.splitlines()[-1] == "[]", out.stderr
    assert out.stdout or out.stderr.splitlines()[0].startswith("error: "), out.stderr


@pytest.mark.parametrize("protocol", ["fe1", "fe0", "olh"])
def test_a_small_estimate_loads_no_numba(protocol, tmp_path):
    """A hundred users over a domain of 100 are counted in numpy (core.hashing.PAIRS_MAX): no numba, nor the
    scipy.linalg its start-up imports (0.3-0.45 s with the kernels' cache, most of such an estimate's process)."""
    (tmp_path / "items.txt").write_text("".join(f"{i * i % 97}\n" for i in range(100)))
    args = ["privagg", "estimate", protocol, "--input", "items.txt", "--domain", "100", "--epsilon", "1",
            *(() if protocol == "olh" else ("--delta", "1e-6")), "--seed", "1", "--json", "--output", "report.json"]
    loaded = "sys.stderr.write('\\n' + repr(sorted(m for m in ('numba', 'scipy.linalg') if m in sys.modules)))"
    out = subprocess.run([sys.executable, "-c", COMMAND.format(argv=args) + "\n" + loaded], capture_output=True,
                         text=True, cwd=tmp_path)
    assert out.stderr.splitlines()[-1] == "[]", out.stderr
    assert json.loads((tmp_path / "report.json").read_text())["n_users"] == 100


def test_a_message_is_printed_as_written(capsys):
    """Plain lines: never wrapped, no rich markup or emoji codes, a control character shown as its escape (a name
    quoted in a message cannot rewrite the terminal), newlines and tabs kept."""
    from privagg.cli.output import _say

    text = "a :smile: [bold]x[/bold] " + "long " * 100 + "\x1b[31mred\rback\x07\tend\nnext line"
    _say(text)
    _say("error: " + text, stderr=True)
    expected = ("a :smile: [bold]x[/bold] " + "long " * 100 + "\\x1b[31mred\\x0dback\\x07\tend\nnext line\n")
    assert capsys.readouterr() == (expected, "error: " + expected)


def test_what_the_registry_repeats_of_the_modules_is_theirs():
    """The entries' metadata the command line reads without importing a protocol's module matches the module."""
    from privagg.protocols import heavy_hitters, local_baselines, registry, sampling_sharing

    assert registry.LOCAL_CALIBRATIONS == local_baselines.CALIBRATIONS
    assert registry.SAMPLING_CALIBRATIONS == sampling_sharing.SAMPLING_CALIBRATIONS
    assert registry.NOISE_CALIBRATIONS == sampling_sharing.NOISE_CALIBRATIONS
    assert (registry.MAX_LENGTH_MAX, registry.DEFAULT_MAX_LENGTH) == (heavy_hitters.MAX_LENGTH_MAX,
                                                                     heavy_hitters.DEFAULT_MAX_LENGTH)
    for entry in registry.ENTRIES:
        assert entry.one_sparse == getattr(entry.parameters, "one_sparse", False), entry.name
        assert entry.served == (entry.client is not None), entry.name


@functools.cache
def _whole_command_line():
    """The whole command tree typer makes of ``privagg.cli.app`` (about 45 ms of CPU): made once, as click runs a
    command any number of times (each run its own context)."""
    from typer.main import get_command

    return get_command(app)


def _words(group=None, words=()):
    """Every command's words: the root, each group, each command."""
    group = _whole_command_line() if group is None else group
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
    # typer's conversions made plain (options._plain_conversions): a choice, a refused one, a number refused, paths
    # in and out of their normal form, a flag, each against typer's own
    ["calibrate", "fe1", "--users", "1000", "--domain", "8", "--epsilon", "1", "--delta", "1e-6", "--calibration",
     "hockey_stick", "--hash-key", "ab" * 32, "--json"], ["calibrate", "fe1", "--users", "1000", "--domain", "8", "--calibration", "nope"],
    ["calibrate", "grr", "--users", "1e3x", "--domain", "8", "--epsilon", "1"],
    ["estimate", "grr", "--input", ".//missing/x.txt", "--epsilon", "1"], ["estimate", "grr", "--input", ".",
                                                                           "--epsilon", "1"],
    ["estimate", "grr", "--input", "", "--epsilon", "1"],
    ["estimate", "grr", "--epsilon", "1", "--delta", "0.5", "--seed", "1", "--domain", "8", "--evaluate", "--mode",
     "fast", "--output", "out.json"],
], ids=lambda args: " ".join(args))
def test_the_command_line_main_runs_is_the_whole_one(args, capfd, tmp_path, monkeypatch):
    """Each command of the command line :func:`privagg.cli.main` runs is made when the command line names it;
    its help, its refusals and its messages are those of the whole command line."""
    monkeypatch.chdir(tmp_path)
    assert _run(cli._command_line(), args, capfd) == _run(_whole_command_line(), args, capfd)
