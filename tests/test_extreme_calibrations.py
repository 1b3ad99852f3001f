"""Every calibrate command answers or refuses at extreme-but-legal and impossible values (issue 44).

Each protocol's ``privagg calibrate`` is run at epsilon 1e-300, 1e-9, 1e3, 1e300; delta 1e-300, 0.999; users 2,
3, 2^53 (the largest) and 2^53 + 1; domain (or dimension) 1, 2, 2^64. The outcome must be a report (exit 0) or a
one-line refusal (exit 2) naming an option given on the command line; never a traceback, and never a hang: an
timer of HANG_SECONDS of CPU stops a case that runs on (the cases take well under a second to a few seconds each; their
times are in benchmarks/extreme_calibrations.py, not asserted here). The default calibration of every protocol runs
by default; the others are marked slow.
"""

from __future__ import annotations

import re
import signal
import traceback
from contextlib import contextmanager

import pytest
from typer.testing import CliRunner

from privagg.cli import app
from privagg.protocols.kinds import ResultKind
from privagg.protocols.registry import IMPLEMENTED, get

HANG_SECONDS = 60  # of this process's CPU: blanket-vector at epsilon 1e-9 took 6 s alone and 20 s of wall time on the
# loaded 2 cores (its suggested design calibrates a hundred designs, ten of them by the blanket accountant); at a load
# of 40-60 three such commands passed 60 s of wall time, not of CPU
HANG_WALL_SECONDS = 900  # a command blocked, not computing
BASE = {"epsilon": "1", "delta": "1e-9", "users": "1000", "domain": "100"}
# what each protocol requires besides the four (a small beta: 100 categories of 1,000 users hold 5 each)
REQUIRED = {"fe-hh": ["--phi", "0.1"], **{name: ["--min-count-fraction", "0.005"] for name in ("dpcs", "dpcs-star",
                                                                                                 "dpds")},
            "tss": ["--min-count-fraction", "0.005", "--report-fraction", "0.5"],
            "tss-collusion": ["--min-count-fraction", "0.005", "--report-fraction", "0.5", "--colluders", "1"]}
VALUES = ([("epsilon", v) for v in ("1e-300", "1e-9", "1e3", "1e300")] + [("delta", v) for v in ("1e-300", "0.999")]
          + [("users", v) for v in ("2", "3", str(2**53), str(2**53 + 1))]
          + [("domain", v) for v in ("1", "2", str(2**64))])


def command(protocol: str, field: str, value: str, calibration: str | None) -> list[str]:
    entry = get(protocol)
    given = dict(BASE, **{field: value})
    args = ["calibrate", protocol, "--epsilon", given["epsilon"], "--users", given["users"]]
    if not entry.pure:
        args += ["--delta", given["delta"]]
    args += ["--dimension" if entry.result is ResultKind.VECTOR_SUM else "--domain", given["domain"]]
    args += REQUIRED.get(protocol, []) + ([] if calibration is None else ["--calibration", calibration])
    return args + ["--json"]


class Hang(Exception):
    pass


@contextmanager
def hang_detector(seconds: int, wall_seconds: int = HANG_WALL_SECONDS):
    """Hang raised after ``seconds`` of this process's CPU (the command's computing, whatever the load), or
    ``wall_seconds`` of wall time (a command that blocks)."""
    def alarm(signum, frame):
        raise Hang(f"still running after {seconds} s of CPU" if signum == signal.SIGPROF else
                   f"still running after {wall_seconds} s")

    previous = {sig: signal.signal(sig, alarm) for sig in (signal.SIGPROF, signal.SIGALRM)}
    signal.setitimer(signal.ITIMER_PROF, seconds)
    signal.alarm(wall_seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_PROF, 0)
        signal.alarm(0)
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def run_case(protocol: str, field: str, value: str, calibration: str | None) -> None:
    args = command(protocol, field, value, calibration)
    with hang_detector(HANG_SECONDS, HANG_WALL_SECONDS):
        result = CliRunner().invoke(app, args)
    if isinstance(result.exception, Hang):
        pytest.fail(f"{' '.join(args)}: hangs ({result.exception})")
    crashed = result.exception is not None and not isinstance(result.exception, SystemExit)
    assert not crashed, f"{' '.join(args)}:\n" + "".join(traceback.format_exception(result.exception))
    assert result.exit_code in (0, 2), (args, result.exit_code, result.output)
    if result.exit_code == 2:
        lines = [line for line in result.output.splitlines() if line.startswith("error: ")]
        assert len(lines) == 1, (args, result.output)
        named = re.match(r"error: ([a-z-]+) (?:must|is required)", lines[0])
        assert named, lines[0]
        given = {a[2:] for a in args if a.startswith("--")}
        assert named.group(1) in given, f"{' '.join(args)}: the refusal names {named.group(1)}, not an option given " \
                                        f"on the command line: {lines[0]}"


@pytest.mark.parametrize("field,value", VALUES)
@pytest.mark.parametrize("protocol", IMPLEMENTED)
def test_every_calibrate_command_answers_or_refuses(protocol, field, value):
    run_case(protocol, field, value, None)


@pytest.mark.slow
@pytest.mark.parametrize("field,value", VALUES)
@pytest.mark.parametrize("protocol,calibration", [(p, c) for p in IMPLEMENTED for c in get(p).calibrations[1:]])
def test_every_other_calibration_answers_or_refuses(protocol, calibration, field, value):
    run_case(protocol, field, value, calibration)
