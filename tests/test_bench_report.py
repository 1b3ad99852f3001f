"""benchmarks/benchfmt.py's report merge: `make bench` (benchmarks/run.py --write docs/benchmarks.md) replaces the
parts it measured and keeps every other part of the file it replaces (a part left out by --only, a part measured by
hand), where it used to write its own parts only."""

import importlib.util
from pathlib import Path

SPEC = importlib.util.spec_from_file_location("benchfmt",
                                              Path(__file__).resolve().parents[1] / "benchmarks" / "benchfmt.py")
benchfmt = importlib.util.module_from_spec(SPEC)
SPEC.loader.exec_module(benchfmt)

PREVIOUS = ["# Benchmarks", "old preamble", "## 1. FE1", "old one", "## 7. Vectors", "old seven, by hand",
            "## 16. By hand", "the 10^4 run", "## 17. The suite", "its durations", "## Issue 48's rows", "| 2026 old |"]


def test_a_run_replaces_its_parts_and_keeps_the_others_in_order_of_number():
    run = ["# Benchmarks", "new preamble", "## 7. Vectors", "new seven", "## Issue 48's rows", "| 2026 old |",
           "| 2026 new |"]
    merged = benchfmt.with_parts_kept(run, PREVIOUS)
    assert merged == ["# Benchmarks", "new preamble", "## 1. FE1", "old one", "## 7. Vectors", "new seven",
                      "## 16. By hand", "the 10^4 run", "## 17. The suite", "its durations", "## Issue 48's rows",
                      "| 2026 old |", "| 2026 new |"]


def test_a_first_run_writes_its_own_parts():
    run = ["# Benchmarks", "## 2. FE1 large", "two", "## 10. Services", "ten"]
    assert benchfmt.with_parts_kept(run, []) == run
    assert benchfmt.with_parts_kept(run, ["an unnumbered old file", "## Notes", "kept"]) == run + ["## Notes", "kept"]
