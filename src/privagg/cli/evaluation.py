"""Simulations that evaluate protocols: ``privagg compare`` (protocols side by side on one dataset) and ``privagg
reproduce`` (a paper's evaluation re-run: tables and PNG plots in a folder)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable, Optional

import typer

from .inputs import _check_stdin_format, _input_file, _input_name
from .options import ItemTypeChoice, MissingChoice
from .output import _clean_errors, _console, _count, _emit, _progress, _say, _summary_value, format_option


reproduce_app = typer.Typer(no_args_is_help=True, rich_markup_mode=None,
                            help="Re-run a paper's evaluation: tables and PNG plots in a folder.")


@reproduce_app.command("sampling")
def reproduce_sampling(
    out: Path = typer.Option(..., "--out", help="Folder for the tables (CSV) and plots (PNG)."),
    quick: bool = typer.Option(False, "--quick", help="A small grid (seconds), for a first look."),
    seed: int = typer.Option(0, "--seed", help="Seed of the simulations (they are not private runs)."),
    progress: Optional[bool] = typer.Option(None, "--progress/--no-progress", help="Progress on stderr."),
) -> None:
    """The sampling + secret-sharing family: variance against n and eps (DPDS, DPDG, TSS) with the crossover n*,
    and costs per party against n and N (docs/results/sampling.md)."""
    from ..reproduce.sampling import run

    _reproduce(run, out, quick, seed, progress)


def _reproduce(run: Callable[..., dict], out: Path, quick: bool, seed: int, progress: Optional[bool]) -> None:
    with _clean_errors():
        out.mkdir(parents=True, exist_ok=True)
        if not quick and not progress:
            _say("the full grid takes minutes (--quick: seconds, for a first look; --progress: follow it)",
                 stderr=True)
        with _progress(progress) as advance:
            summary = run(out, quick=quick, seed=seed, progress=advance)
    _print_summary(summary, out)


@reproduce_app.command("vector-shuffle")
def reproduce_vector_shuffle(
    out: Path = typer.Option(..., "--out", help="Folder for the tables (CSV) and plots (PNG)."),
    quick: bool = typer.Option(False, "--quick", help="A small grid (seconds), for a first look."),
    seed: int = typer.Option(0, "--seed", help="Seed of the simulations (they are not private runs)."),
    progress: Optional[bool] = typer.Option(None, "--progress/--no-progress", help="Progress on stderr."),
) -> None:
    """The privacy-blanket vector sums (blanket-vector) on the bundled digits: MSE against t, k, d, eps and n under
    the paper's and the tight gamma, beside the theory and the paper's bound (docs/results/vector-shuffle.md)."""
    from ..reproduce.vector_shuffle import run

    _reproduce(run, out, quick, seed, progress)


@reproduce_app.command("fe-shuffle")
def reproduce_fe_shuffle(
    out: Path = typer.Option(..., "--out", help="Folder for the tables (CSV) and plots (PNG)."),
    quick: bool = typer.Option(False, "--quick", help="A small grid (seconds), for a first look."),
    seed: int = typer.Option(0, "--seed", help="Seed of the simulations (they are not private runs)."),
    progress: Optional[bool] = typer.Option(None, "--progress/--no-progress", help="Progress on stderr."),
) -> None:
    """Frequency estimation in the shuffle model on the bundled words: FE1's error and messages as c, n and B vary,
    against the single-message blanket histogram and the local and central baselines (docs/results/fe-shuffle.md)."""
    from ..reproduce.fe_shuffle import run

    _reproduce(run, out, quick, seed, progress)


def _print_summary(summary: dict[str, Any], out: Path) -> None:
    """A reproduction's summary: the files in one line, its scalars as lines, and its mappings as tables, one
    column each, those over the same keys side by side."""
    from rich.table import Table

    files = summary.get("files", [])
    _say(f"wrote {len(files)} files to {out}: {', '.join(files)}")
    tables: dict[tuple, list[str]] = {}  # the mappings' names, by their keys
    for key, value in summary.items():
        if isinstance(value, dict) and all(v is None for v in value.values()):
            _say(f"{key.replace('_', ' ')}: none on this grid")
        elif isinstance(value, dict):
            tables.setdefault(tuple(value), []).append(key)
        elif key != "files":
            _say(f"{key.replace('_', ' ')}: {_summary_value(value) if value != [] else 'none'}")
    for rows, names in tables.items():
        table = Table()
        table.add_column("")
        for name in names:
            table.add_column(name.replace("_", " "), justify="right")
        for row in rows:
            table.add_row(str(row), *(_summary_value(summary[name][row]) for name in names))
        _console().print(table)


def _plain_number(value: float) -> str:
    """A table's number: 4 significant digits, whole with thousands separators from 1,000 on (not 1.523e+04)."""
    return f"{value:,.0f}" if abs(value) >= 1000 else f"{value:.4g}"


def compare_command(
    protocols: str = typer.Option(..., "--protocols", help="Comma-separated protocols, e.g. fe1,olh,hadamard,laplace."),
    epsilon: str = typer.Option(..., "--epsilon", help="Comma-separated epsilons, e.g. 0.5,1,2,4."),
    delta: Optional[float] = typer.Option(None, "--delta", help="delta for the protocols that are not pure eps-DP "
                                                                 "(the pure ones run at 0)."),
    input: Optional[Path] = typer.Option(None, "--input", callback=_input_file,
                                         help="Items, one per user (as privagg estimate reads them; - reads standard "
                                              "input). Default: the bundled English words."),
    column: Optional[str] = format_option("column"),
    item_type: ItemTypeChoice = format_option("item_type"),  # type: ignore[valid-type]
    delimiter: Optional[str] = format_option("delimiter"),
    header: bool = format_option("header"),
    missing: MissingChoice = format_option("missing"),  # type: ignore[valid-type]
    domain: int = typer.Option(1024, "--domain", help="Domain size B: integer items in [0, B); text is hashed into "
                                                     "it (default 1,024: every baseline can run)."),
    trials: int = typer.Option(3, "--trials", help="Seeded runs per protocol and epsilon."),
    seed: int = typer.Option(0, "--seed", help="Seed of the first trial (the runs are simulations, not private)."),
    out: Optional[Path] = typer.Option(None, "--out", help="Folder for compare.csv and the PNG plots."),
    as_json: bool = typer.Option(False, "--json", help="Print the report as JSON."),
    progress: Optional[bool] = typer.Option(None, "--progress/--no-progress", help="Progress on stderr."),
) -> None:
    """Protocols side by side on one dataset: error percentiles, messages and bits per user, time, trust model."""
    from .. import datasets
    from ..compare import compare, parse_list, plot, write_csv
    from ..io import InputFormat, read_codes
    from ..reports import report_document
    from ..simulate.frequency import item_encoder

    with _clean_errors():
        _check_stdin_format(input, delimiter)
        names, epsilons = parse_list(protocols, "protocols", str), parse_list(epsilon, "epsilon")
        encoder = item_encoder(domain, None, seed)
        if input is None:
            codes, name = encoder.encode(datasets.english_words()), f"{datasets.DESCRIPTION}, hashed into {domain} codes"
        else:
            codes = read_codes(input, encoder, InputFormat(item_type.value, column, delimiter, header,
                                                          missing.value)).codes
            name = _input_name(input)
        with _progress(progress) as advance:
            report = compare(codes, encoder, names, epsilons, delta, trials, seed, name, advance)
        if out is not None:
            out.mkdir(parents=True, exist_ok=True)
            write_csv(report, out / "compare.csv")
            plot(report, out)

    def human() -> None:
        from rich.table import Table

        _say(f"input: {report.input} ({report.n_users} users, {report.domain_size} codes); {_count(report.trials, 'seeded trial')} "
             "a row: simulations, not private runs")
        table = Table(title="|estimate - true count| over the domain (mean over the trials)")
        for heading in ("protocol", "eps", "delta", "p50", "p90", "p99", "max", "msgs/user", "bits/user", "s",
                        "trust"):
            table.add_column(heading, justify="left" if heading in ("protocol", "trust") else "right")
        refusals, warned = [], {}  # a warning -> the rows it is of, printed once
        for r in report.rows:
            for w in r.warnings:
                warned.setdefault(w, []).append(f"{r.protocol} at eps {r.epsilon:g}")
            if r.refused is not None:
                refusals.append(f"refused [{len(refusals) + 1}] {r.protocol} at eps {r.epsilon:g}: {r.refused}")
                table.add_row(r.protocol, f"{r.epsilon:g}", f"{r.delta:g}", f"refused [{len(refusals)}]", "", "", "",
                              "", "", "", "")
                continue
            table.add_row(r.protocol, f"{r.epsilon:g}", f"{r.delta:g}", *map(_plain_number, (
                r.error_p50, r.error_p90, r.error_p99, r.error_max, r.messages_per_user, r.bits_per_user)),
                f"{r.seconds:.2f}", r.trust.split(" (")[0])
        _console().print(table)
        for refusal in refusals:
            _say(refusal)
        for w, rows in warned.items():
            _say(f"warning ({', '.join(rows)}): {w}", stderr=True)  # as estimate prints its warnings
        if out is not None:
            _say(f"wrote compare.csv, error_vs_epsilon.png and error_vs_messages.png to {out}")

    _emit(report_document(report), as_json, None, human)
