"""Time every calibrate command at the extreme values of tests/test_extreme_calibrations.py (issue 44): one line
per case, its seconds in-process (the interpreter's start-up, some 0.5 to 1 s, comes on top on the command line)
and its outcome, the slowest first. The test asserts outcomes only; the times are here.

    .venv/bin/python benchmarks/extreme_calibrations.py [--all-calibrations] [PROTOCOL ...]
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

from typer.testing import CliRunner

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from test_extreme_calibrations import VALUES, command  # noqa: E402

from privagg.cli import app  # noqa: E402
from privagg.protocols.registry import IMPLEMENTED, get  # noqa: E402


def main(argv: list[str]) -> None:
    every = "--all-calibrations" in argv
    protocols = [a for a in argv if not a.startswith("--")] or list(IMPLEMENTED)
    rows = []
    for protocol in protocols:
        for calibration in (get(protocol).calibrations if every else (None,)):
            for field, value in VALUES:
                args = command(protocol, field, value, calibration)
                start = time.perf_counter()
                result = CliRunner().invoke(app, args)
                seconds = time.perf_counter() - start
                lines = result.output.strip().splitlines()
                outcome = "report" if result.exit_code == 0 else (lines[-1][:110] if lines else repr(result.exception))
                rows.append((seconds, protocol, calibration or "default", f"{field} {value}", outcome))
                print(f"{seconds:6.2f} s  {protocol} {calibration or ''} {field}={value}", file=sys.stderr)
    print("| seconds | protocol | calibration | value | outcome |\n|---:|---|---|---|---|")
    for seconds, *rest in sorted(rows, reverse=True):
        print(f"| {seconds:.2f} | " + " | ".join(rest) + " |")


if __name__ == "__main__":
    main(sys.argv[1:])
