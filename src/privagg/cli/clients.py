"""The services' clients: ``privagg submit`` (one report), ``privagg loadgen`` (simulated clients) and ``privagg
result`` (a task's private result, as the analyzer serves it). httpx and the client SDK load inside them."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

import typer

from ..errors import ParameterError, check_integer
from .output import _clean_errors, _console, _emit, _label, _say, _say_release_privacy, format_option


def _takes_text(parameters) -> bool:
    """Whether a task's users may hold text: fe-hh's strings, or items hashed with the task's public item_key."""
    return getattr(parameters, "max_length", None) is not None or getattr(parameters, "item_key", None) is not None


def _value(text: str, parameters):
    """A user's value as given: JSON (an integer item, a list: a vector or a (coordinate, weight) pair, or a string),
    else the text itself, a string item; a string only for a task that takes text (:func:`_takes_text`), which the
    SDK hashes with the task's item_key as every device does."""
    from ..protocols.kinds import ResultKind
    from ..protocols.registry import get

    try:
        value = json.loads(text)
    except ValueError:
        value = text
    items = get(parameters.protocol).result is not ResultKind.VECTOR_SUM
    accepted = (f"an integer item in [0, {parameters.domain_size})" if items else "a JSON list (a vector, or a "
                "[coordinate, weight] pair)") + (", or text (an item)" if _takes_text(parameters) else
                                                 " (the task takes no text: its parameters have no item_key)")
    if isinstance(value, str):
        taken = value != "" and _takes_text(parameters)
    elif isinstance(value, int) and not isinstance(value, bool):
        taken = items and 0 <= value < parameters.domain_size
    else:
        taken = isinstance(value, list) and not items
    if not taken:
        raise ParameterError("value", accepted, repr(text) if text.strip() != text or not text else text)
    return value


_TASK_FROM = typer.Option(None, "--analyzer", help="Fetch the task (and the key messages are sealed to) from the "
                                                   "analyzer at this URL (default: through the collector, which is "
                                                   "then trusted with the key).")


_TASK_VIA_COLLECTOR = ("warning: the task and its key came through the collector: a collector that lied about the "
                       "key could read the messages; give --analyzer to fetch them from the analyzer")



def _collector_and_analyzer(collector: str, analyzer: str | None) -> tuple[str, str | None]:
    """submit's and loadgen's services, each checked to be the service it is named as; without --analyzer the
    task is fetched from the collector, and the command says so."""
    from ..service.calls import check_service

    collector = check_service("collector", collector, "collector")
    analyzer = None if analyzer is None else check_service("analyzer", analyzer, "analyzer")
    if analyzer is None:
        _say(_TASK_VIA_COLLECTOR, stderr=True)
    return collector, analyzer


def submit(collector: str = typer.Option(..., "--collector", help="The collector's URL."),
           task: str = typer.Option(..., "--task", help="The task id."),
           analyzer: Optional[str] = _TASK_FROM,
           token: str = typer.Option(..., "--token", help="A one-use token of the task."),
           value: str = typer.Option(..., "--value", help="Your value: an integer item, a JSON list (a vector, or a "
                                     "[coordinate, weight] pair), or for a task of text items the text itself (hashed "
                                     "with the task's item_key; '\"42\"' for the text 42).")) -> None:
    """Send one report: randomize the value with secure randomness, seal each message, submit."""
    from ..service.calls import SubmitError
    from ..service.shuffle.client import Client, submit as send

    with _clean_errors():
        collector, analyzer = _collector_and_analyzer(collector, analyzer)
        try:
            client = Client.fetch(analyzer or collector, task)
            status = send(collector, client.report(_value(value, client.task.parameters), token))
        except SubmitError as err:
            raise ParameterError("report", "accepted by the collector", str(err)) from None
    _say(f"report {status}")


def _load_values(parameters, path: Path, fmt=None):
    """The values of a load run, one per row (CSV/TSV/Parquet/text) read as ``fmt`` (an io.InputFormat) says: items,
    or vectors (.npy/CSV rows). A task of text items takes text as its SDK does: fe-hh's strings as they are, other
    items hashed with the task's public item_key (integers are item codes); a task without an item_key takes integer
    items only."""
    from dataclasses import replace

    from ..core.encoding import ItemEncoder
    from ..io import InputFormat, read_codes, read_items, read_vectors
    from ..protocols.kinds import ResultKind
    from ..protocols.registry import get

    fmt = InputFormat() if fmt is None else fmt
    if get(parameters.protocol).result is ResultKind.VECTOR_SUM:
        return [row for row in read_vectors(path, fmt)]
    if getattr(parameters, "max_length", None) is not None:
        items, _ = read_items(path, fmt)
        return list(items) if isinstance(items, list) else items.tolist()
    if _takes_text(parameters):
        return read_codes(path, ItemEncoder.for_parameters(parameters), fmt).codes.tolist()
    if fmt.item_type == "str":
        raise ParameterError("item-type", "auto or int for a task that takes no text (its parameters have no "
                             "item_key)", fmt.item_type)
    encoder = ItemEncoder(parameters.domain_size, kind="integer")
    return read_codes(path, encoder, replace(fmt, item_type="int")).codes.tolist()


def loadgen(collector: str = typer.Option(..., "--collector", help="The collector's URL."),
            task: str = typer.Option(..., "--task", help="The task id."),
            input: Path = typer.Option(..., "--input", help="One value per simulated client, one a row: integer "
                                       "items, text items for a task of text (as submit --value), or vectors."),
            column: Optional[str] = format_option("column"), item_type: str = format_option("item_type"),
            delimiter: Optional[str] = format_option("delimiter"), header: bool = format_option("header"),
            missing: str = format_option("missing"),
            tokens: Path = typer.Option(..., "--tokens", help="Tokens of the task, one a line (privagg tokens "
                                                              "issue)."),
            concurrency: int = typer.Option(100, "--concurrency", help="Reports in flight at once."),
            retry_for: float = typer.Option(120.0, "--retry-for", help="Seconds a client keeps retrying."),
            analyzer: Optional[str] = _TASK_FROM,
            as_json: bool = typer.Option(False, "--json", help="Print the JSON summary.")) -> None:
    """Simulated clients, each a real SDK client over HTTP: acknowledged, refused, throughput, latency."""
    from ..io import InputFormat
    from ..service.calls import SubmitError
    from ..service.shuffle.client import Client
    from ..service.shuffle.loadgen import run_load

    with _clean_errors():
        fmt = InputFormat(item_type, column, delimiter, header, missing)
        concurrency = check_integer("concurrency", concurrency, 1, 100_000)
        if not 0 <= retry_for <= 86_400:
            raise ParameterError("retry-for", "a number of seconds in [0, 86400]", retry_for)
        collector, analyzer = _collector_and_analyzer(collector, analyzer)
        try:
            client = Client.fetch(analyzer or collector, task)
        except SubmitError as err:
            raise ParameterError("task", "a task the service serves", str(err)) from None
        try:
            issued = tokens.read_text(encoding="ascii").split()
        except (OSError, UnicodeDecodeError) as e:  # tokens are ASCII: UTF-16 or binary data is not a tokens file
            raise ParameterError("tokens", "a readable file of tokens (ASCII, one a line)",
                                 f"{tokens} ({getattr(e, 'strerror', None) or e.reason})") from None
        result = run_load(collector, client, _load_values(client.task.parameters, input, fmt), issued, concurrency,
                          retry_for)
    if as_json:
        print(result.to_json())
        return
    lat = result.latency_ms
    reasons = ", ".join(f"{count} {reason}" for reason, count in sorted(result.refusals.items()))
    _say(f"{result.clients} clients: {result.acknowledged} acknowledged, {result.refused} refused"
         f"{f' ({reasons})' if reasons else ''}, {result.failed} failed; {result.messages_acknowledged} messages")
    latency = "no latency (none acknowledged)" if lat["p50"] is None else (
        f"latency p50 {lat['p50']:.0f} ms, p90 {lat['p90']:.0f} ms, p99 {lat['p99']:.0f} ms")
    _say(f"sent in {result.send_seconds:.1f} s at concurrency {result.concurrency}: {result.reports_per_second:.0f} "
         f"reports/s; {latency}; {result.retries} retries; reports made in {result.prepare_seconds:.1f} s")


def result(analyzer: str = typer.Option(..., "--analyzer", help="The analyzer's URL."),
           task: str = typer.Option(..., "--task", help="The task id."),
           top: int = typer.Option(10, "--top", help="How many top items (or coordinates) to list."),
           as_json: bool = typer.Option(False, "--json", help="Print the JSON report."),
           output: Optional[Path] = typer.Option(None, "--output", help="Write the JSON report to FILE.")) -> None:
    """The task's private result, as the analyzer serves it (the report privagg analyze prints). An analyzer that
    asks for its result token gets it from PRIVAGG_ANALYZER_RESULT_TOKEN."""
    import os

    import httpx

    from ..service.calls import check_service
    from ..service.tasks import is_hex_id

    with _clean_errors():
        if not is_hex_id(task):
            raise ParameterError("task", "a task id (32 lowercase hexadecimal characters, the whole id)", task)
        top = check_integer("top", top, 1, MAX_TOP)
        analyzer = check_service("analyzer", analyzer, "analyzer")
        token = os.environ.get("PRIVAGG_ANALYZER_RESULT_TOKEN")
        headers = {} if not token else {"authorization": f"Bearer {token}"}
        try:
            answer = httpx.get(f"{analyzer}/tasks/{task}/result", params={"top": top}, timeout=120, headers=headers)
        except httpx.TransportError as err:
            raise ParameterError("analyzer", "a reachable analyzer URL", f"{analyzer} ({err})") from None
        try:
            report = answer.json()
        except ValueError:
            report = None
        if answer.status_code != 200 or not isinstance(report, dict):
            _refused_result(analyzer, task, answer.status_code, report, answer.text, token)
        if not {"privacy", "collection", "messages"} <= report.keys() or not isinstance(
                report.get("estimates", report.get("heavy_hitters")), list):  # another service's document
            raise ParameterError("analyzer", "the analyzer's URL, answering a task's release (its estimates, "
                                 "privacy block and collection)", f"{analyzer} (it answered 200 with the fields "
                                 f"{', '.join(sorted(report)[:8]) or 'none'})")
    _emit(report, as_json, output, lambda: print_result(report, top))


MAX_TOP = 100_000  # the analyzer's result route takes top in 1..100,000


def _refused_result(analyzer: str, task: str, status: int, refusal, text: str, token: str | None) -> None:
    """The analyzer's refusal of a result as the ParameterError of whichever input it concerns: the task (unknown,
    or not released), the result token, or the URL (an answer that is not the analyzer's)."""
    reason, detail = (refusal.get("error"), refusal.get("detail")) if isinstance(refusal, dict) else (None, None)
    if reason in ("not_released", "nothing_discovered"):  # no result yet: not an error in the task id
        why = detail.removeprefix(f"task {task} ") if isinstance(detail, str) else reason
        raise ParameterError("task", "a task whose result was released", f"{task}, which {why}")
    if reason == "unknown_task":
        raise ParameterError("task", f"a task of the analyzer at {analyzer}", task)
    if reason == "unauthenticated":
        raise ParameterError("PRIVAGG_ANALYZER_RESULT_TOKEN", "the analyzer's result token",
                             "a token the analyzer refused" if token else "none")
    shown = detail if isinstance(detail, str) else " ".join(text.split())[:200]
    raise ParameterError("analyzer", "the analyzer's URL, answering the result", f"{analyzer} (it answered {status}: "
                         f"{shown})")


def print_result(report: dict, top: int) -> None:
    from rich.table import Table

    from ..reports import document_privacy

    privacy = document_privacy(report)
    unreliable = " -- NOT A RELIABLE LIST (more users or a larger phi)" if report.get("reliable") is False else ""
    table = Table(title=f"{report['protocol']}: the analyzer's result ({_label(privacy, report)}){unreliable}")
    for column in ("item", "estimate ± stderr"):
        table.add_column(column, justify="right")
    for row in report.get("estimates", report.get("heavy_hitters"))[:top]:  # fe-hh: the heavy hitters it found
        table.add_row(str(row["item"]), f"{row['estimate']:.1f} ± {row['stderr']:.1f}")
    _console().print(table)
    c = report["collection"]
    _say_release_privacy(privacy, report, suffix=f"; honest fraction {privacy.honest_fraction:g}")
    _say(f"collection: {c['reports']} reports in {c['batches']} batches; {report['messages']['total']} messages, "
         f"{c['unopened']} unopened and {c['malformed']} malformed dropped")
