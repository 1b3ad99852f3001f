"""What every benchmark part shares: number formatting, the Markdown report, progress notes on stderr."""

from __future__ import annotations

import os
import sys


def seconds(s: float) -> str:
    if s >= 1:
        return f"{s:.2f} s"
    if s >= 1e-3:
        return f"{s * 1e3:.1f} ms"
    return f"{s * 1e6:.1f} µs"


def ratio(r: float) -> str:
    return f"{r:.1f}x" if r >= 1 else f"{r:.2f}x"


def verdict(ok: bool) -> str:
    return "**met**" if ok else "**missed**"


class Report:
    """Markdown lines, echoed to stdout as they are added."""

    def __init__(self) -> None:
        self.lines: list[str] = []

    def add(self, *lines: str) -> None:
        for line in lines:
            print(line, flush=True)
            self.lines.append(line)

    def table(self, header: list[str], rows: list[list[str]]) -> None:
        self.add("| " + " | ".join(header) + " |", "|" + "---|" * len(header))
        self.add(*("| " + " | ".join(row) + " |" for row in rows))
        self.add("")


def note(text: str) -> None:
    print(f"[bench] {text}", file=sys.stderr, flush=True)


def load_average() -> str:
    return " / ".join(f"{x:.2f}" for x in os.getloadavg())


# The issue-48 rows each part measures as a ratio (filled by the parts, printed at the end by run.py with the host):
# (workload, peer and its figure, privagg's figure, ratio, target)
ROWS: list[list[str]] = []


def cpu_model() -> str:
    from pathlib import Path
    import platform

    return next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                 if line.startswith("model name")), platform.processor())
