"""The ``privagg`` command line (typer + rich).

Every bad input ends with exit status 2 and one line on stderr naming the
parameter and its accepted range (``error: epsilon must be ...``).
"""

from __future__ import annotations

import json
import sys
from contextlib import contextmanager
from enum import Enum
from pathlib import Path
from typing import Iterator, Optional

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from . import datasets
from .errors import ParameterError
from .io import read_items
from .protocols import CATALOGUE
from .simulate.frequency import build_protocol, estimate_frequencies, theory

app = typer.Typer(add_completion=False, no_args_is_help=True, pretty_exceptions_enable=False,
                  help="Private aggregate statistics without a trusted collector.")


out = Console(soft_wrap=True)  # long report lines stay whole for pipes and files
err = Console(stderr=True)


class Protocol(str, Enum):
    bib = "bib"
    fe0 = "fe0"
    fe1 = "fe1"


class Calibration(str, Enum):
    numeric = "numeric"
    hockey_stick = "hockey_stick"
    closed_form = "closed_form"


class Mode(str, Enum):
    faithful = "faithful"
    fast = "fast"


@contextmanager
def _clean_errors() -> Iterator[None]:
    try:
        yield
    except ParameterError as e:
        err.print(f"error: {e}", markup=False, highlight=False, soft_wrap=True)
        raise typer.Exit(2) from None


EPSILON = typer.Option(..., "--epsilon", help="Privacy parameter epsilon > 0.")
DELTA = typer.Option(..., "--delta", help="Privacy parameter delta in (0, 1).")
C_OPTION = typer.Option(None, "--c", help="fe1: b = floor(n / ln^c n) (default c = 1).")
BINS_OPTION = typer.Option(None, "--bins", help="fe1: hash range b, instead of --c.")
CALIBRATION = typer.Option(Calibration.numeric, "--calibration",
                           help="How mu is calibrated: the paper's tail criterion computed numerically (default), "
                                "the tighter exact privacy profile (hockey_stick), or the closed form (eps <= 1).")


@app.command()
def protocols() -> None:
    """List the protocols with trust model, messages per user and status."""
    table = Table(title="privagg protocols")
    for column in ("protocol", "family", "trust model", "messages / user", "status"):
        table.add_column(column)
    for row in CATALOGUE:
        table.add_row(*row, style=None if row[-1] == "implemented" else "dim")
    out.print(table)


@app.command()
def calibrate(
    protocol: Protocol = typer.Argument(..., help="Protocol name."),
    epsilon: float = EPSILON,
    delta: float = DELTA,
    users: int = typer.Option(..., "--users", help="Number of users n >= 2."),
    domain: int = typer.Option(..., "--domain", help="Domain size B >= 2."),
    c: Optional[float] = C_OPTION,
    bins: Optional[int] = BINS_OPTION,
    calibration: Calibration = CALIBRATION,
    as_json: bool = typer.Option(False, "--json", help="Print a JSON object."),
) -> None:
    """Derived parameters, messages per user, bits per message and expected error."""
    with _clean_errors():
        proto = build_protocol(protocol.value, epsilon=epsilon, delta=delta, n_users=users, domain_size=domain,
                               bins=bins, c=c, calibration=calibration.value)
        expected = theory(proto)
    report = {"protocol": proto.name, "parameters": proto.parameters(), "privacy": proto.guarantee.to_dict(),
              **expected}
    if as_json:
        out.print_json(data=report)
        return
    table = Table(title=proto.title, show_header=False)
    for key, value in {**report["parameters"], **expected}.items():
        table.add_row(key, f"{value:.6g}" if isinstance(value, float) else str(value))
    out.print(table)
    _print_privacy(report["privacy"])


def _print_privacy(privacy: dict) -> None:
    out.print(f"privacy: ({privacy['epsilon']:g}, {privacy['delta']:g})-DP, {privacy['model']} model; "
              f"{privacy['method']}", highlight=False)


@contextmanager
def _progress_bars(enabled: bool) -> Iterator:
    if not enabled:
        yield None
        return
    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  console=err, transient=True) as bars:
        tasks: dict[str, int] = {}

        def advance(stage: str, done: int, total: int) -> None:
            if stage not in tasks:
                tasks[stage] = bars.add_task(stage, total=total)
            bars.advance(tasks[stage], done)

        yield advance


@app.command()
def estimate(
    protocol: Protocol = typer.Argument(..., help="Protocol name."),
    input: Optional[Path] = typer.Option(None, "--input", help="CSV, Parquet or text file (one item per line). "
                                         "Default: the bundled English-words dataset."),
    column: Optional[str] = typer.Option(None, "--column", help="Column holding the items (CSV/Parquet)."),
    epsilon: float = EPSILON,
    delta: float = DELTA,
    domain: int = typer.Option(2**24, "--domain", help="Domain size B: integer items must lie in [0, B)."),
    c: Optional[float] = C_OPTION,
    bins: Optional[int] = BINS_OPTION,
    calibration: Calibration = CALIBRATION,
    candidates: Optional[Path] = typer.Option(None, "--candidates", help="File of candidate items to estimate."),
    top: int = typer.Option(10, "--top", help="How many top items to report."),
    seed: Optional[int] = typer.Option(None, "--seed", help="Seed a reproducible simulation (not for real users)."),
    full_domain: Optional[bool] = typer.Option(None, "--full-domain/--no-full-domain",
                                               help="Estimate every item of [B] (default when B <= 2^24)."),
    mode: Mode = typer.Option(Mode.faithful, "--mode", help="faithful: through every role; fast: shortcuts."),
    as_json: bool = typer.Option(False, "--json", help="Print the JSON report."),
    output: Optional[Path] = typer.Option(None, "--output", help="Also write the JSON report to this file."),
    progress: Optional[bool] = typer.Option(None, "--progress/--no-progress",
                                            help="Progress bars (default: when stderr is a terminal)."),
) -> None:
    """Simulate private frequency estimation over a dataset and report the top items."""
    with _clean_errors():
        items = datasets.english_words() if input is None else read_items(input, column)
        if candidates is not None:
            candidate_items = read_items(candidates, None, field="candidates")
        else:  # the bundled dataset's public vocabulary names its words
            candidate_items = datasets.english_vocabulary() if input is None else None
        with _progress_bars(sys.stderr.isatty() if progress is None else progress) as advance:
            report = estimate_frequencies(
                protocol.value, items, epsilon=epsilon, delta=delta, domain_size=domain, bins=bins, c=c,
                calibration=calibration.value, candidates=candidate_items, top=top, full_domain=full_domain,
                mode=mode.value, seed=seed, progress=advance)
    report["input"] = datasets.DESCRIPTION if input is None else str(input)
    if output is not None:
        with _clean_errors():
            try:
                output.write_text(json.dumps(report, indent=2) + "\n")
            except OSError as e:
                raise ParameterError("output", "a writable file path", f"{output} ({e.strerror})") from None
    if as_json:
        out.print_json(data=report)
        return
    _print_report(report)


def _print_report(report: dict) -> None:
    out.print(f"input: {report['input']}", highlight=False)
    table = Table(title=f"{report['protocol']}: top {len(report['estimates'])} items")
    table.add_column("rank", justify="right")
    table.add_column("item")
    table.add_column("estimate ± stderr", justify="right")
    for rank, row in enumerate(report["estimates"], 1):
        flag = " (hash collision)" if row.get("hash_collision") else ""
        table.add_row(str(rank), f"{row['item']}{flag}", f"{row['estimate']:.1f} ± {row['stderr']:.1f}")
    out.print(table)
    _print_privacy(report["privacy"])
    m, e, expected = report["messages"], report["error"], report["expected_error"]
    out.print(f"cost: {m['total']} messages from {report['n_users']} users ({m['per_user']:.3f} per user), "
              f"{report['bits_per_message']} bits per message", highlight=False)
    out.print(f"error against the true counts (simulation only, not for release) over {e['items']} {e['over']}: "
              f"max {e['max_abs']:.1f}, mean {e['mean_abs']:.2f}, "
              f"p50 {e['p50']:.1f}, p90 {e['p90']:.1f}, p99 {e['p99']:.1f} "
              f"(theory: stderr {expected['standard_error']:.1f}, max-error bound {expected['max_error_bound']:.1f} "
              f"w.p. {1 - expected['max_error_beta']:.0%})", highlight=False)
    out.print(f"simulation: {report['simulation']['mode']} path, {report['simulation']['randomness']}",
              highlight=False)


def main() -> None:
    """The ``privagg`` entry point: command-line usage errors too end in one line and status 2."""
    try:
        sys.exit(app(standalone_mode=False))
    except typer.Abort:
        sys.exit(1)
    except Exception as e:
        # typer raises click's UsageError, from click or from the copy it vendors: match it by name.
        if not any(cls.__name__ == "UsageError" for cls in type(e).__mro__):
            raise
        if e.format_message():  # empty after the help that no arguments bring up
            err.print(f"error: {e.format_message()}", markup=False, highlight=False, soft_wrap=True)
        sys.exit(2)
