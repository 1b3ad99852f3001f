"""``privagg analyze PROTOCOL``: a protocol's analyzer over written messages (Parquet partitions), in-process or
on Dask."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Optional

import typer

from ..errors import ParameterError
from ..protocols.kinds import ResultKind
from . import options
from .inputs import KIND_TO_ITEM_TYPE, PUBLIC_CANDIDATES, _read_coordinates
from .options import _choice
from .output import _check_output, _clean_errors, _console, _count, _emit, _estimate_table, _say, _say_privacy, _titled


EngineName = _choice("EngineName", ("local", "dask"))


def analyze(
    protocol: options.Protocol = typer.Argument(..., help="Protocol name."),  # type: ignore[valid-type]
    params_file: Path = typer.Option(..., "--params", help="The frozen parameters (params.json or a calibrate "
                                                           "report)."),
    messages: Path = typer.Option(..., "--messages", help="Folder of part-*.parquet message partitions."),
    engine: EngineName = typer.Option("local", "--engine", help="local (in-process) or dask."),  # type: ignore
    scheduler: Optional[str] = typer.Option(None, "--scheduler", help="Address of an existing Dask scheduler "
                                                                      "(default: a local cluster)."),
    workers: Optional[int] = typer.Option(None, "--workers", help="Workers of the local Dask cluster (default 2)."),
    candidates: Optional[Path] = typer.Option(None, "--candidates", help=PUBLIC_CANDIDATES),
    top: int = typer.Option(10, "--top", help="How many top items to report."),
    full_domain: Optional[bool] = typer.Option(None, "--full-domain/--no-full-domain",
                                               help="Estimate every item of [B] (default without candidates)."),
    verbose: bool = typer.Option(False, "--verbose", help="The full privacy statement, not one line."),
    as_json: bool = typer.Option(False, "--json", help="Print the JSON report."),
    output: Optional[Path] = typer.Option(None, "--output", help="Write the JSON report to FILE."),
    strict: bool = typer.Option(False, "--strict", help="Refuse (exit 2) a message count far from the n (1 + rho) "
                                                        "the parameters count on, rather than warn."),
) -> None:
    """Run a protocol's analyzer over written messages, in-process or on Dask."""
    from .. import engine as engines
    from ..core.encoding import CategoryEncoder, ItemEncoder
    from ..io import InputFormat, read_codes
    from ..pipelines import Analysis
    from ..protocols import registry
    from ..protocols.registry import load_parameters
    from ..reports import report_document

    with _clean_errors():
        _check_output(output, params_file, candidates)
        from ..io import read_json_text

        params = load_parameters(read_json_text(params_file, "params"))
        if params.protocol != protocol.value:
            raise ParameterError("params", f"parameters of {protocol.value}", f"parameters of {params.protocol}")
        partitions = engines.message_partitions(messages)
        _check_partition_columns(partitions, params.layout)
        own = messages / engines.PARAMS_FILE  # only compared: --params was verified above
        if own.exists() and load_parameters(read_json_text(own, "messages"), verify=False) != params:
            raise ParameterError("params", f"the parameters the messages were made with ({own})", str(params_file))
        items = engines.read_items_info(messages, params.domain_size)
        digest = engines.params_digest(params)
        if items.get("params_digest", digest) != digest:
            raise ParameterError("params", f"the parameters the messages were made with (their digest in "
                                 f"{messages / engines.ITEMS_FILE})", f"{params_file}, another run's (another item key "
                                 "or setting): estimates read under it would be wrong")
        if registry.get(params.protocol).result is ResultKind.VECTOR_SUM:
            _analyze_vector(params, partitions, items, engine.value, scheduler, workers, candidates, top, verbose,
                            as_json, output, strict)
            return
        # categories are codes by their place in the public list; other text items were hashed with the
        # parameters' public key; integers need none
        if items.get("categories"):
            if not isinstance(items["categories"], list):
                raise ParameterError(engines.ITEMS_FILE, "categories as a JSON list of names",
                                     type(items["categories"]).__name__)
            encoder = CategoryEncoder(items["categories"])
            if encoder.domain_size != params.domain_size:
                raise ParameterError(engines.ITEMS_FILE, f"a list of {params.domain_size} categories (the domain)",
                                     f"{encoder.domain_size} categories")
        elif items.get("kind") == "text":
            encoder = ItemEncoder.for_parameters(params, "text")
        else:
            encoder = ItemEncoder(params.domain_size, kind=items.get("kind"))
        queries = None
        if candidates is not None:
            fmt = InputFormat(item_type=KIND_TO_ITEM_TYPE.get(encoder.kind, "auto"))
            try:
                queries = read_codes(candidates, encoder, fmt, field="candidates", public=True).codes
            except ParameterError as err:
                if (messages / engines.ITEMS_FILE).exists():
                    raise
                raise ParameterError(err.field, err.accepted, f"{err.got} (the folder holds no "
                                     f"{engines.ITEMS_FILE}, so its items are taken as integers: text items need "
                                     "the one the run wrote)") from None
        elif full_domain is None and params.domain_size <= registry.FULL_DOMAIN_DEFAULT_MAX:
            # the default whole domain is held to a run's budget, as estimate's is: 3 users' messages over 2^24
            # items took as long to analyze as to simulate (fe1's preimages, whatever n)
            full_domain = registry.choose_full_domain(params.domain_size, None, False,
                                                      seconds=registry.full_domain_seconds(params),
                                                      n_users=params.n_users,
                                                      protocol=params.protocol)
        analysis = Analysis.of(params, queries, full_domain)
        reporters, unknown = engines.folder_reporters(params, items)
        result, run = engines.analyze(analysis.analyzer(), partitions, engine.value, scheduler, workers, reporters)
        received = result.messages + result.malformed
        privacy = engines.folder_privacy(params, items, received, result.malformed)
        report = analysis.report(result, privacy, run, encoder=encoder, top=top)
        report.warnings += unknown
        report = _with_count_warning(report, params, received, messages, strict, reporters)

    def human() -> None:
        _estimate_table(_titled(f"{report.protocol}: top {_count(len(report.estimates), 'item')}", report),
                        report.estimates, params.item_key)
        _say_privacy(report.privacy, report.privacy_profile, verbose)
        m = report.messages
        _say(f"messages: {m.total} received from {len(partitions)} partitions, {m.malformed} of them malformed "
             "and dropped")
        _say(f"engine: {run.name}" + (f", {run.workers} workers" if run.workers else "") + "; " + ", ".join(
            f"{k} {v:.2f} s" for k, v in run.seconds.items()))

    _emit(report_document(report), as_json, output, human)


def _analyze_vector(params, partitions, items: dict[str, Any], engine: str, scheduler: Optional[str],
                    workers: Optional[int], candidates: Optional[Path], top: int, verbose: bool, as_json: bool,
                    output: Optional[Path], strict: bool = False) -> None:
    """``privagg analyze`` of a vector-sum protocol: the coordinates' sums (the candidates' with --candidates)."""
    from .. import engine as engines
    from ..pipelines import Analysis
    from ..reports import report_document
    from ..simulate.frequency import check_coordinates

    coordinates = None if candidates is None else _read_coordinates(candidates)
    # held to a run's budget, as estimate is
    check_coordinates(params, coordinates, simulated=False)
    analysis = Analysis.of(params, coordinates)
    reporters, unknown = engines.folder_reporters(params, items)
    result, run = engines.analyze(analysis.analyzer(), partitions, engine, scheduler, workers, reporters)
    received = result.messages + result.malformed
    report = analysis.report(result, engines.folder_privacy(params, items, received, result.malformed), run)
    report.warnings += unknown
    report = _with_count_warning(report, params, received, partitions[0].parent, strict, reporters)

    def human() -> None:
        from rich.table import Table

        table = Table(title=_titled(f"{report.protocol}: sums of the first {min(top, len(report.estimates))} "
                                    "coordinates", report))
        for column in ("coordinate", "sum ± stderr", "mean"):
            table.add_column(column, justify="right")
        for e, mean in list(zip(report.estimates, report.mean))[:top]:
            table.add_row(str(e.item), f"{e.estimate:.1f} ± {e.stderr:.1f}", f"{mean:.4f}")
        _console().print(table)
        _say_privacy(report.privacy, report.privacy_profile, verbose)
        _say(f"messages: {received} received from {len(partitions)} partitions, {result.malformed} of them "
             "malformed and dropped")
        _say(f"engine: {run.name}" + (f", {run.workers} workers" if run.workers else "") + "; " + ", ".join(
            f"{k} {v:.2f} s" for k, v in run.seconds.items()))

    _emit(report_document(report), as_json, output, human)


def _check_partition_columns(partitions: list[Path], layout) -> None:
    """Every partition's Parquet schema against the parameters' message layout, before any work: a partition of
    another protocol or layout is an error naming the file (unreadable files are left to the analysis)."""
    import pyarrow.parquet as pq

    for path in partitions:
        try:
            names = pq.read_schema(path).names
        except (OSError, ValueError):
            continue
        layout.check_columns(names, str(path))


def _with_count_warning(report, params, received: int, messages: Path, strict: bool, reporters: int | None = None):
    """A message count far from the m (1 + rho) the parameters count on from the folder's m users (items.json;
    unknown: the calibrated n; the 5 sd rule of the privacy caveat) is also a warning of the report, or with
    --strict an error: a duplicated or missing partition, copies of messages, or another run's parameters would
    otherwise give inflated or empty estimates with exit 0."""
    from dataclasses import replace

    from ..protocols.parameters import received_mismatch

    mismatch = received_mismatch(params, received, reporters)
    if mismatch is None:
        return report
    if strict:
        raise ParameterError("messages", "about as many as the parameters count on (within 5 sd; --strict)",
                             f"{mismatch} in {messages}")
    return replace(report, warnings=[*report.warnings, f"the analyzer received {mismatch} in {messages}: a "
                                     "duplicated or missing partition, copied messages or another run's parameters? "
                                     "The estimates are off and the guarantee does not hold as stated (--strict "
                                     "makes this an error)"])
