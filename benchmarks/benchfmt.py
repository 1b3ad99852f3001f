"""What every benchmark part shares: number formatting, the Markdown report, progress notes on stderr."""

from __future__ import annotations

import os
import platform
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

    return next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                 if line.startswith("model name")), platform.processor())


def parts(lines: list[str]) -> dict[str, list[str]]:
    """``lines`` of a report cut at each ``## `` heading, keyed by the heading's first word ("16." for part 16;
    "" for what comes before the first)."""
    cut: dict[str, list[str]] = {"": []}
    key = ""
    for line in lines:
        if line.startswith("## "):
            key = line.split()[1]
            cut[key] = []
        cut[key].append(line)
    return cut


def with_parts_kept(lines: list[str], previous: list[str]) -> list[str]:
    """A run's report ``lines`` with every part of ``previous`` (the file it replaces) that the run did not write
    (a part left out by ``--only``; a part measured by hand, such as the sharing services at 10^4 users or the
    suite): a run replaces the parts it measured, never another. The numbered parts in order of their numbers, then
    the rest (the hosts' rows) in the run's order."""
    new, old = parts(lines), parts(previous)
    merged = {**{k: v for k, v in old.items() if k not in new}, **new}
    merged.pop("")

    def order(key: str) -> tuple[float, int]:
        number = key.rstrip(".")
        if number.replace(".", "", 1).isdigit():
            return float(number), 0
        return float("inf"), list(new).index(key) if key in new else len(new)

    return new[""] + [line for key in sorted(merged, key=order) for line in merged[key]]
