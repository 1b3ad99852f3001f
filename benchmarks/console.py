"""Part 13 of ``make bench``: the analyzer's operator console as Debian's Chromium shows it, saved for the docs.

Not a measurement: the console's browser test (``tests/service/test_console.py``: a released fe1 task, its chart
and privacy statement read back from the page) runs with ``PRIVAGG_CONSOLE_SCREENSHOT`` naming where its
screenshot goes, ``docs/console.png``.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from benchfmt import Report, note  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent


def console(report: Report) -> None:
    shot = ROOT / "docs" / "console.png"
    note(f"the operator console in headless Chromium, screenshot to {shot}")
    out = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                          str(ROOT / "tests" / "service" / "test_console.py"), "-k", "shows"], cwd=ROOT,
                         env={**os.environ, "PRIVAGG_CONSOLE_SCREENSHOT": str(shot)}, capture_output=True, text=True)
    report.add("## 13. The operator console", "")
    if out.returncode == 0:
        report.add("A released fe1 task's page, as headless Chromium renders it (the console's browser test, which "
                   "also reads the bars, their 95% intervals and the privacy statement back from the page):", "",
                   "![the analyzer's console: a task's counts, its top estimates with 95% intervals, its guarantee]"
                   "(console.png)", "")
    else:
        report.add(f"Not run: the console's browser test failed ({out.stdout.strip().splitlines()[-1:]}).", "")
