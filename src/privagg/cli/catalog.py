"""What privagg offers: ``privagg protocols`` (the registry), ``privagg schema`` (a report's JSON Schema) and
``privagg example-data`` (the small files the README's commands read)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer

from ..errors import ParameterError
from .output import _clean_errors, _console, _print_json, _say


def protocols(as_json: bool = typer.Option(False, "--json", help="Print the registry as JSON.")) -> None:
    """List the protocols: what each is, family, trust model, topology, messages per user, status."""
    from ..protocols.registry import ENTRIES

    def name(obj: Any) -> str | None:
        return None if obj is None else obj.__name__

    rows = [{"protocol": e.name, "title": e.title, "family": e.family, "trust": e.trust, "topology": e.topology,
             "messages_per_user": e.messages_per_user, "result": e.result, "status": e.status,
             "reference": e.reference, "options": [o.name for o in e.options],
             "calibrations": list(e.calibrations), "parameters": name(e.parameters),
             # the test suite fails unless every instance of the grid holds (tests/test_audit.py)
             "audit": "exact grid holds (docs/privacy.md)" if e.message_law else "not audited",
             "roles": {"client": name(e.client), "analyzer": name(e.analyzer)}} for e in ENTRIES]
    if as_json:
        _print_json(rows)
        return
    from rich.table import Table

    table = Table(title="privagg protocols")
    for column in ("protocol", "what it is", "family", "trust", "messages / user", "result", "status", "audit"):
        table.add_column(column)
    for r in rows:
        table.add_row(r["protocol"], r["title"], r["family"], r["trust"], r["messages_per_user"], r["result"],
                      r["status"], r["audit"], style=None if r["status"] == "implemented" else "dim")
    _console().print(table)


def example_data(folder: Path = typer.Argument(..., help="Folder to write into (created if missing)."),
                 force: bool = typer.Option(False, "--force", help="Replace files of these names in the folder "
                                            "(without it, an existing one is refused and nothing is written).")) \
        -> None:
    """Write the small synthetic files the README's commands read: items.csv, names.txt, survey.csv, answers.txt,
    vectors.csv, pairs.csv, coordinates.txt. A file of these names already there is never overwritten but with
    --force."""
    from ..datasets import EXAMPLE_FILES, write_examples

    with _clean_errors():
        if folder.exists() and not folder.is_dir():
            raise ParameterError("folder", "a folder (created if missing)", str(folder))
        there = [name for name in EXAMPLE_FILES if (folder / name).exists() or (folder / name).is_symlink()]
        if there and not force:
            raise ParameterError("folder", "a folder without files of the examples' names (--force replaces them)",
                                 f"{folder}, which holds {', '.join(there)}")
        try:
            written = write_examples(folder)
        except OSError as err:
            raise ParameterError("folder", "a writable folder", f"{folder} ({err.strerror or err})") from None
    _say(f"wrote {', '.join(path.name for path in written)} to {folder}")


def schema(report: str = typer.Argument(..., help="the report: calibrate, estimate (frequencies), estimate-vector, "
                                         "estimate-hh (heavy hitters), analyze, analyze-vector, analyze-hh, compare, "
                                         "audit, account or demo-sharing.")) -> None:
    """Print the JSON Schema of a command's report (generated from its types)."""
    from ..reports import REPORT_TYPES, json_schema

    with _clean_errors():
        if report not in REPORT_TYPES:
            raise ParameterError("report", f"one of {', '.join(REPORT_TYPES)}", report)
    _print_json(json_schema(REPORT_TYPES[report]))
