"""The ``privagg`` command line (typer + rich), generated from the protocol registry.

``calibrate`` and ``estimate`` have one subcommand per implemented protocol,
with the protocol's own options (:attr:`ProtocolEntry.options`) and
calibrations; ``analyze`` runs any protocol's analyzer over written
messages; ``protocols`` lists the registry; ``schema`` prints a report's
JSON Schema. Every bad input ends with exit status 2 and one line on stderr
naming the parameter and its accepted range (``error: epsilon must be ...``).

Heavy modules (scipy, numba, pyarrow, dask, pydantic) load inside the
commands that use them, so ``privagg --help`` starts fast.
"""

from __future__ import annotations

import atexit
import errno
import gc
import inspect
import os
import shutil
import sys
import tempfile
import time
import traceback
from contextlib import contextmanager
from enum import Enum
from pathlib import Path
from typing import Any, Callable, Iterator, Optional

try:
    import typer
except ImportError:  # the light install has no command line
    raise SystemExit("privagg's command line needs the cli extra: pip install 'privagg[cli]'") from None

from . import __version__
from .cli_output import (EXIT_BAD_INPUT, EXIT_INTERNAL, EXIT_INTERRUPTED, EXIT_STATUS, EXIT_VIOLATION, _check_output,
                         SHOWN_PATHS, _clean_errors, _console, _emit, _say, format_option, same_file)
from .errors import ParameterError
from .protocols.kinds import Family, ResultKind
from .protocols.registry import ENTRIES, IMPLEMENTED, REGISTRY, ProtocolEntry

# Plain (click) help rather than rich's panels: rendering them would load about 70 ms of rich modules,
# a third of the time `privagg --help` takes.
app = typer.Typer(add_completion=False, no_args_is_help=True, pretty_exceptions_enable=False,
                  rich_markup_mode=None, help="Private aggregate statistics without a trusted collector.",
                  epilog=EXIT_STATUS)
calibrate_app = typer.Typer(no_args_is_help=True, rich_markup_mode=None,
                            help="Frozen parameters, cost and expected error of a protocol.")
estimate_app = typer.Typer(no_args_is_help=True, rich_markup_mode=None,
                           help="Simulate a protocol over a dataset and report the top items.")
audit_app = typer.Typer(no_args_is_help=True, rich_markup_mode=None,
                        help="Check a protocol's claimed guarantee against its exact or sampled output laws.")
app.add_typer(calibrate_app, name="calibrate")
app.add_typer(estimate_app, name="estimate")
app.add_typer(audit_app, name="audit")
account_app = typer.Typer(no_args_is_help=True, rich_markup_mode=None,
                          help="Privacy accountants: the guarantee a mechanism's parts add up to.")
app.add_typer(account_app, name="account")
reproduce_app = typer.Typer(no_args_is_help=True, rich_markup_mode=None,
                            help="Re-run a paper's evaluation: tables and PNG plots in a folder.")
app.add_typer(reproduce_app, name="reproduce")


# --- options shared by the generated commands -----------------------------------------------------------

def _param(name: str, annotation: Any, default: Any) -> inspect.Parameter:
    return inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=default, annotation=annotation)


def _choice(name: str, values: tuple[str, ...]) -> type[Enum]:
    return Enum(name, [(v, v) for v in values], type=str)


def _protocol_parameters(entry: ProtocolEntry) -> list[inspect.Parameter]:
    calibrations = _choice("Calibration", entry.calibrations)
    params = [
        _param("epsilon", float, typer.Option(..., "--epsilon", help="Privacy parameter epsilon > 0.")),
        # pure eps-DP: no delta to give (a hidden --delta is accepted only to say so, or as 0)
        _param("delta", Optional[float], typer.Option(None, "--delta", hidden=True)) if entry.pure else
        _param("delta", Optional[float], typer.Option(None, "--delta", callback=_delta_required(entry.name),
                                                      help="Privacy parameter delta in (0, 1) (required).")),
        _param("calibration", calibrations, typer.Option(
            entry.calibrations[0], "--calibration",
            help="How the noise is calibrated (docs/privacy.md): the authors' tail criterion computed numerically "
                 "(default), the tighter exact privacy profile (hockey_stick), or the closed form (eps <= 1)."
            if entry.family is Family.BALLS_INTO_BINS else
            f"How p or the noise is set (docs/privacy.md): {', '.join(entry.calibrations)} (default "
            f"{entry.calibrations[0]}).")),
    ]
    for option in entry.options:
        params.append(_param(option.name, Optional[option.type],
                             typer.Option(None, f"--{option.name.replace('_', '-')}", help=option.help)))
    return params


class _NumberError(typer.BadParameter):
    """A number option typed wrong: printed as its one line (``error: epsilon must be ...``), like every other
    bad input, not as click's "Invalid value for ..."."""

    def format_message(self) -> str:
        return self.message


def _number_parser(field: str, integer: bool) -> Callable[[Any], Any]:
    """The strict rule of :func:`privagg.errors.parse_number` for one option (no underscores, NaN, infinities
    or booleans; a huge value is too large, with what was typed)."""
    from .errors import parse_number

    def parse(value: Any) -> Any:
        try:
            return parse_number(field, value, integer=integer)
        except ParameterError as err:
            raise _NumberError(str(err)) from None

    return parse


def _options(typer_app: typer.Typer) -> Iterator[tuple[str, Any, Any]]:
    """(field, typer's ParameterInfo, type) of every option and argument of every command, sub-apps included; the
    field is the option's flag without its dashes (an argument's name), the type without its Optional."""
    import typing

    from typer.models import ParameterInfo

    for info in typer_app.registered_commands:
        callback = info.callback
        if callback is None:
            continue
        try:
            hints = typing.get_type_hints(callback)
        except Exception:  # an annotation that does not resolve: typer reports it itself
            continue
        for name, parameter in inspect.signature(callback).parameters.items():
            option = parameter.default
            kind = hints.get(name)
            if typing.get_origin(kind) is typing.Union:
                kinds = [k for k in typing.get_args(kind) if k is not type(None)]
                kind = kinds[0] if len(kinds) == 1 else None
            if not isinstance(option, ParameterInfo):
                continue
            flags = [d for d in (option.param_decls or ()) if d.startswith("--")]
            yield (flags[0][2:].split("/")[0] if flags else name.replace("_", "-")), option, kind
    for group in typer_app.registered_groups:
        if group.typer_instance is not None:
            yield from _options(group.typer_instance)


def _strict_numbers(typer_app: typer.Typer) -> None:
    """Give every int and float option of every command (sub-apps included) the strict number parser: once,
    here, rather than option by option."""
    for field, option, kind in _options(typer_app):
        if kind in (int, float) and option.parser is None:
            option.parser = _number_parser(field, kind is int)


# What each path option takes (cli_output.PATH_KINDS), by its field: a path option not listed here stops the
# import (_checked_paths), so that none is read unchecked
PATH_OPTIONS = {
    **dict.fromkeys(("input", "candidates", "params", "config", "tls-cert", "tls-key", "analyzer-ca", "second-ca",
                     "kek-file", "tokens", "second-task"), "file"),
    "messages": "folder", "output": "output", "relay-token-file": "path",
    **dict.fromkeys(("out", "workdir", "write-messages", "partition-root", "folder"), "new-folder"),
}


def _checked_paths(typer_app: typer.Typer) -> None:
    """Check every path option of every command as the command line is read, before any work
    (:func:`privagg.cli_output.check_path`): one line and exit status 2 where it cannot be what the option takes."""
    for field, option, kind in _options(typer_app):
        if kind is not Path or getattr(option.callback, "checks_path", False):
            continue
        if field not in PATH_OPTIONS:
            raise RuntimeError(f"--{field}: a path option without its kind in cli.PATH_OPTIONS")
        option.callback = _path_check(field, PATH_OPTIONS[field], option.callback)


def _path_check(field: str, kind: str, then: Callable[[Any], Any] | None) -> Callable[[Any], Any]:
    """An option's callback: :func:`privagg.cli_output.check_path`, then the option's own callback (``then``)."""
    from .cli_output import check_path

    def check(value: Any) -> Any:
        if value is not None and not (then is _input_file and str(value) == "-"):  # -: standard input
            with _clean_errors():
                check_path(field, Path(value), kind)
        return value if then is None else then(value)

    check.checks_path = True  # type: ignore[attr-defined]
    return check


def _delta_required(protocol: str) -> Callable[[Any], Any]:
    """--delta of an (epsilon, delta)-DP protocol: left out, it says so in one line."""
    def check(value: Any) -> Any:
        if value is None:
            raise _NumberError(str(ParameterError.required(
                "delta", f"for {protocol}, an (epsilon, delta)-DP protocol: give --delta, a number in (0, 1)")))
        return value

    return check


def _hash_key_option(help: str) -> inspect.Parameter:
    return _param("hash_key", Optional[str], typer.Option(None, "--hash-key", help=help))


def _verbose_option() -> inspect.Parameter:
    return _param("verbose", bool, typer.Option(False, "--verbose", help="The full privacy statement, not one line."))


# glibc's mallopt parameters (malloc.h): blocks below M_MMAP_THRESHOLD come from the heap, and M_TOP_PAD bytes
# stay at the heap's top when it shrinks
_M_MMAP_THRESHOLD, _M_TOP_PAD = -3, -2
_HEAP_BLOCKS_BELOW, _HEAP_KEPT = 32 << 20, 64 << 20


def _keep_freed_heap() -> None:
    """Let the heap serve blocks below 32 MiB and keep 64 MiB of freed memory for reuse (glibc only).

    A simulation randomizes its users batch after batch, and each batch allocates and frees about 20 MB of
    temporaries of 0.25-2 MB. By default glibc hands the freed top of the heap back to the kernel at once, so the
    next batch faults the same pages in again: at n = 5 x 10^6 (blanket-vector, d = 20) 658 brk calls and 93,000
    page faults, 0.3-0.4 s of system time; with these settings 99 brk calls and 24,000 faults, 0.1 s (``strace -c``,
    ``/usr/bin/time -v``). The threshold is set too, as setting the pad switches off glibc's dynamic one. The protocol commands
    (calibrate, estimate, audit: one job, then exit) set them; the services (``privagg serve``), whose threads
    each keep an arena, and the library, whose caller owns the allocator, keep glibc's defaults."""
    if not sys.platform.startswith("linux"):
        return
    import ctypes

    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):  # a libc without mallopt
        return
    mallopt(_M_MMAP_THRESHOLD, _HEAP_BLOCKS_BELOW)
    mallopt(_M_TOP_PAD, _HEAP_KEPT)


def _command(body: Callable[..., None], parameters: list[inspect.Parameter], doc: str) -> Callable[..., None]:
    """A function typer can read: ``body(**options)`` behind the generated signature."""
    def command(**kwargs: Any) -> None:
        _keep_freed_heap()
        # a pure eps-DP protocol's hidden --delta defaults to 0; any other value is refused by its calibration
        body(**{**kwargs, "delta": kwargs.get("delta") or 0.0})

    command.__signature__ = inspect.Signature(parameters)  # type: ignore[attr-defined]
    command.__annotations__ = {p.name: p.annotation for p in parameters}
    command.__doc__ = doc
    return command


# --- protocols and schema ---------------------------------------------------------------------------------

@app.command()
def protocols(as_json: bool = typer.Option(False, "--json", help="Print the registry as JSON.")) -> None:
    """List the protocols: what each is, family, trust model, topology, messages per user, status."""
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
        _console().print_json(data=rows)
        return
    from rich.table import Table

    table = Table(title="privagg protocols")
    for column in ("protocol", "what it is", "family", "trust", "messages / user", "result", "status", "audit"):
        table.add_column(column)
    for r in rows:
        table.add_row(r["protocol"], r["title"], r["family"], r["trust"], r["messages_per_user"], r["result"],
                      r["status"], r["audit"], style=None if r["status"] == "implemented" else "dim")
    _console().print(table)


@app.command("example-data")
def example_data(folder: Path = typer.Argument(..., help="Folder to write into (created if missing)."),
                 force: bool = typer.Option(False, "--force", help="Replace files of these names in the folder "
                                            "(without it, an existing one is refused and nothing is written).")) \
        -> None:
    """Write the small synthetic files the README's commands read: items.csv, names.txt, survey.csv, answers.txt,
    vectors.csv, pairs.csv, coordinates.txt. A file of these names already there is never overwritten but with
    --force."""
    from .datasets import EXAMPLE_FILES, write_examples

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


@app.command()
def schema(report: str = typer.Argument(..., help="calibrate, estimate or analyze.")) -> None:
    """Print the JSON Schema of a command's report (generated from its types)."""
    from .reports import REPORT_TYPES, json_schema

    with _clean_errors():
        if report not in REPORT_TYPES:
            raise ParameterError("report", f"one of {', '.join(REPORT_TYPES)}", report)
    _console().print_json(data=json_schema(REPORT_TYPES[report]))


# --- calibrate ----------------------------------------------------------------------------------------

def _calibrate(entry: ProtocolEntry, *, users: int, domain: int, epsilon: float, delta: float,
               calibration: Enum, hash_key: Optional[str], verbose: bool, as_json: bool, output: Optional[Path],
               **options: Any) -> None:
    import secrets

    from .core.encoding import KEY_BYTES, check_item_key
    from .errors import check_integer
    from .privacy.description import privacy_warnings
    from .protocols.balls_into_bins import N_USERS_MAX
    from .protocols.registry import calibrate
    from .reports import CalibrationReport, privacy_profile, report_document, report_parameters

    with _clean_errors():
        _check_output(output)
        check_integer("users", users, 2, N_USERS_MAX)  # named as typed (the library's keyword is n_users)
        if entry.categorical or entry.result is not ResultKind.FREQUENCY_TABLE:  # no items to hash
            if hash_key is not None:
                raise ParameterError("hash-key", f"left out for {entry.name} (its inputs are categories or vectors, "
                                     "no items to hash)", hash_key)
            key = None
        else:
            key = secrets.token_hex(KEY_BYTES) if hash_key is None else check_item_key(hash_key)
        params = calibrate(entry.name, epsilon=epsilon, delta=delta, n_users=users, domain_size=domain,
                           calibration=calibration.value, item_key=key, **options)
        profile, expected = privacy_profile(params), params.expected_error()
    report = CalibrationReport(protocol=entry.name, parameters=report_parameters(params), privacy=params.privacy,
                               privacy_profile=profile, **expected, costs=params.costs(), theory=params.theory(),
                               warnings=privacy_warnings(epsilon, delta, users) + params.warnings())

    def human() -> None:
        from rich.table import Table

        table = Table(title=entry.title, show_header=False)
        for name, value in {**report.parameters, **expected, **report.theory}.items():
            table.add_row(name, _summary_value(value, digits=6))
        for party, counts in report.costs.items():
            table.add_row(f"cost per {party}", ", ".join(f"{k} {v:.6g}" for k, v in counts.items()))
        _console().print(table)
        _say_privacy(params.privacy, profile, verbose)

    _emit(report_document(report), as_json, output, human)


def _profile_line(profile) -> str:
    return "  delta at other epsilons, same noise (hockey-stick bound): " + ", ".join(
        f"eps {p.epsilon:g}: {p.delta:.3g}" for p in profile)


def _say_privacy(privacy, profile, verbose: bool) -> None:
    """One short line, or (--verbose) the full statement and the privacy profile."""
    if verbose:
        _say(privacy.render())
        _say(_profile_line(profile))
    else:
        _say(privacy.summary() + " (--verbose: the full statement)")


def _register_calibrate(entry: ProtocolEntry) -> None:
    params = [
        _param("users", int, typer.Option(..., "--users", help="Number of users n >= 2.")),
        _param("domain", int, typer.Option(..., "--dimension", help="Dimension d of the users' vectors.")
               if entry.result is ResultKind.VECTOR_SUM else typer.Option(..., "--domain", help="Domain size B >= 2."))
        if entry.result is not ResultKind.HEAVY_HITTER_LIST else
        _param("domain", Optional[int], typer.Option(None, "--domain", help="Integer items in [0, B), B up to 2^64 "
                                                                            "(strings: --max-length instead).")),
        *_protocol_parameters(entry),
        _hash_key_option("The public item-hash key (hex) to record in the parameters (default: a random one)."),
        _verbose_option(),
        _param("as_json", bool, typer.Option(False, "--json", help="Print the report as JSON.")),
        _param("output", Optional[Path], typer.Option(
            None, "--output", help="Write the JSON report (loadable as parameters: analyze --params) to FILE.")),
    ]
    calibrate_app.command(entry.name, help=f"{entry.title}: frozen parameters, cost, expected error.")(
        _command(lambda **kw: _calibrate(entry, **kw), params, entry.title))


# --- estimate -----------------------------------------------------------------------------------------

@contextmanager
def _progress(enabled: bool | None) -> Iterator:
    """Progress of the long stages: bars on a terminal; plain lines every 10% when stderr is a file or pipe.

    Default (``enabled=None``): only on a terminal. Calls may come from several threads (the sharing runners):
    a lock keeps the counts whole.
    """
    import threading

    terminal, lock = sys.stderr.isatty(), threading.Lock()
    if not (terminal if enabled is None else enabled):
        yield None
    elif terminal:
        with _progress_bars() as bars:
            def advance(stage: str, step: int, total: int) -> None:
                with lock:
                    bars(stage, step, total)

            yield advance
    else:
        start, done, shown = time.perf_counter(), {}, {}

        def advance(stage: str, step: int, total: int) -> None:
            with lock:
                report(stage, step, total)

        def report(stage: str, step: int, total: int) -> None:
            done[stage] = done.get(stage, 0) + step
            tenth = 10 * done[stage] // max(total, 1)
            if tenth > shown.get(stage, 0):
                shown[stage] = tenth
                print(f"{stage}: {done[stage]}/{total} ({10 * tenth}%), {time.perf_counter() - start:.1f} s",
                      file=sys.stderr, flush=True)

        yield advance


@contextmanager
def _progress_bars() -> Iterator:
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  console=_console(stderr=True), transient=True) as bars:
        tasks: dict[str, int] = {}

        def advance(stage: str, done: int, total: int) -> None:
            if stage not in tasks:
                tasks[stage] = bars.add_task(stage, total=total)
            bars.advance(tasks[stage], done)

        yield advance


class Mode(str, Enum):
    faithful = "faithful"
    fast = "fast"


ItemTypeChoice = _choice("ItemTypeChoice", ("auto", "int", "str"))
MissingChoice = _choice("MissingChoice", ("error", "drop"))
KIND_TO_ITEM_TYPE = {"integer": "int", "text": "str"}  # an encoder's kind, as --item-type


def _seed_and_evaluate_options() -> list[inspect.Parameter]:
    """--seed and --evaluate, which every estimate command shares."""
    return [
        _param("seed", Optional[int], typer.Option(
            None, "--seed", help="Seed a reproducible simulation (not private: the report says so).")),
        _param("evaluate", Optional[bool], typer.Option(
            None, "--evaluate/--no-evaluate", help="Put the true counts (or sums) and the realised error, computed "
                                                   "from the raw data, beside the estimates: the report is then an "
                                                   "evaluation, marked not private. Default: on for the bundled "
                                                   "datasets and seeded runs, off for a --input file run with "
                                                   "secure randomness (a report to publish).")),
    ]


def _evaluating(evaluate: bool | None, input: Path | None, seed: int | None) -> bool:
    """--evaluate as given, else on for the bundled data (``input`` None) and seeded runs."""
    return (input is None or seed is not None) if evaluate is None else evaluate


def _with_left_out(report, dropped: int):
    """``report`` over the users who had a value, ``dropped`` others left out by --missing drop: n is then a count
    of the data, which the report carries un-noised, so it is not private and says how many were left out
    (docs/privacy.md, "Missing values")."""
    if dropped:
        report.warnings.insert(0, f"{dropped} users with a missing value were left out (--missing drop): n is a "
                                  "count of the data, and the report is not private")
        report.privacy = report.privacy.as_left_out(dropped)
    return report


def _messages_info(report, **info: Any) -> dict[str, Any]:
    """items.json of a message folder written by estimate: ``info`` and whether the run was private (and if not,
    why: analyze says so)."""
    privacy = report.privacy
    return {**info, "private": privacy.private,
            **({} if privacy.private else {"not_private": privacy.not_private_reason})}


PUBLIC_CANDIDATES = ("File of public candidate items to estimate, one per line: a list chosen without looking at the "
                     "users' data (a dictionary, a catalogue). Each is printed by name beside the guarantee, so a "
                     "list drawn from the data (its distinct values, sort -u) publishes them.")
STDIN_NAME = "standard input"
# the temporary copies of standard input (named so in reports), each with (device, inode) of what it was read from
_stdin_copies: dict[Path, tuple[int, int] | None] = {}


def _input_file(value: Path | None) -> Path | None:
    """``--input -``: standard input, copied first to a private temporary file (the readers take two passes,
    the size estimate then the items, and a pipe has one). Parquet and .npy are known by their first bytes;
    anything else is text, one item per line, or a table with --delimiter."""
    if value is None or str(value) != "-":
        return value
    if sys.stdin is None or sys.stdin.isatty():
        raise typer.BadParameter("'-' reads standard input: pipe or redirect the data into the command")
    try:
        source = os.fstat(sys.stdin.fileno())
        origin: tuple[int, int] | None = (source.st_dev, source.st_ino)
    except (OSError, ValueError, AttributeError):  # not a file descriptor (a test's stream)
        origin = None
    folder = Path(tempfile.mkdtemp(prefix="privagg-stdin-"))  # mode 0700: the users' raw data
    atexit.register(shutil.rmtree, folder, ignore_errors=True)
    copy = folder / "stdin"
    with copy.open("wb") as out:
        shutil.copyfileobj(sys.stdin.buffer, out, 1 << 20)
    with copy.open("rb") as f:
        head = f.read(6)
    suffix = ".parquet" if head.startswith(b"PAR1") else ".npy" if head.startswith(b"\x93NUMPY") else ""
    copy = copy.rename(copy.with_suffix(suffix)) if suffix else copy
    _stdin_copies[copy] = origin
    SHOWN_PATHS[str(copy)] = STDIN_NAME  # the readers' errors name the copy
    return copy


def _check_stdin_format(input: Path | None, delimiter: str | None,
                        accepted: str = "text, one item per line (a table needs --delimiter)") -> None:
    """Standard input read as text (no --delimiter; Parquet and .npy are known by their bytes) must not be a table
    or JSON (:func:`privagg.io.text_format`): read line by line, each whole line, header and delimiters included,
    would be one user's item."""
    from .io import text_format

    if input not in _stdin_copies or delimiter is not None or input.suffix:
        return
    found = text_format(input)
    if found == "json":
        raise ParameterError("input", accepted, f"{STDIN_NAME} holding JSON: write the items one per line "
                             "(jq -r '.[]' for an array of strings) or as a CSV table")
    if found is not None:
        option = "--delimiter $'\\t'" if found == "\t" else f"--delimiter '{found}'"
        raise ParameterError("input", accepted, f"{STDIN_NAME}, every line of which holds {found!r}, a table's "
                             f"delimiter: give {option} (and --column NAME) to read it as a table, or save it as a "
                             ".txt file to take each whole line as one item")


@contextmanager
def _located(input: Path | None, fmt, vectors: bool = False) -> Iterator[None]:
    """A protocol's error about the value in some row of what it was given names that value's place in ``input``
    instead, as the readers do ("line 5 of data.csv"; :func:`privagg.io.location`)."""
    try:
        yield
    except ParameterError as err:
        if err.row is None or input is None:
            raise
        from .io import location

        raise err.located(location(input, fmt, err.row, vectors, _input_name(input))) from None


def _check_public(candidates: Path | None, input: Path | None) -> None:
    """--candidates must be a public list, not the users' data: every candidate is printed by name beside the
    guarantee, so the input as candidates prints each user's raw value. Refused: the input file by any path (links,
    hard links, /dev/stdin), what standard input was read from, and a byte-for-byte copy of the input. A list
    made from the data otherwise (sort -u) cannot be told from a public one: --help and the README say so."""
    if candidates is None or input is None:
        return
    accepted = "a public list chosen without the users' data (each candidate is printed by name)"
    origin = _stdin_copies.get(input)
    try:
        found = os.stat(candidates)
    except OSError:
        return  # the reader says what is wrong with it
    if same_file(candidates, input) or (origin is not None and origin == (found.st_dev, found.st_ino)):
        raise ParameterError("candidates", accepted, f"{candidates}, which is the input")
    if _same_bytes(candidates, input):
        raise ParameterError("candidates", accepted, f"{candidates}, a copy of the input")


def _same_bytes(a: Path, b: Path, block: int = 1 << 20) -> bool:
    """Whether two regular files hold the same bytes (read only when their sizes agree, and only until they
    differ)."""
    try:
        if not (a.is_file() and b.is_file()) or a.stat().st_size != b.stat().st_size:
            return False
        with a.open("rb") as x, b.open("rb") as y:
            while True:
                left, right = x.read(block), y.read(block)
                if left != right:
                    return False
                if not left:
                    return True
    except OSError:
        return False


def _input_name(input: Path) -> str:
    """How a report names its input: the file, or standard input."""
    return STDIN_NAME if input in _stdin_copies else str(input)


def _input_parameters() -> list[inspect.Parameter]:
    """How to read the input file: --input, --column, --item-type, --delimiter, --no-header, --missing."""
    return [
        _param("input", Optional[Path], typer.Option(
            None, "--input", callback=_input_file,
            help="Text (one item per line), CSV, TSV, Parquet or .npy file; - reads standard input (text, or a table "
                 "with --delimiter). Default: the bundled English-words dataset.")),
        _param("column", Optional[str], format_option("column")),
        _param("item_type", ItemTypeChoice, format_option("item_type")),
        _param("delimiter", Optional[str], format_option("delimiter")),
        _param("header", bool, format_option("header")),
        _param("missing", MissingChoice, format_option("missing")),
    ]


def _read_input(entry: ProtocolEntry, input: Path | None, fmt, encoder, candidates: Path | None):
    """(codes, candidate codes or None, dropped users, input name): the users' items and the public candidates."""
    from . import datasets
    from .core.encoding import CategoryEncoder
    from .io import InputFormat, read_codes

    if input is None:
        if entry.categorical:
            bundled, name = datasets.english_categories()[0], datasets.CATEGORY_DESCRIPTION
        elif isinstance(encoder, CategoryEncoder):  # a small-domain protocol: the most common words
            bundled, name = datasets.english_words(vocabulary=datasets.SMALL_VOCABULARY), datasets.SMALL_DESCRIPTION
        else:
            bundled, name = datasets.english_words(), datasets.DESCRIPTION
        codes, dropped = encoder.encode(bundled), 0
    else:
        summary = read_codes(input, encoder, fmt)
        codes, dropped, name = summary.codes, summary.dropped, _input_name(input)
    candidate_codes = None
    if isinstance(encoder, CategoryEncoder):
        pass  # the categories are the domain, every one labelled
    elif candidates is not None:
        item_type = KIND_TO_ITEM_TYPE.get(encoder.kind, fmt.item_type)  # of the input's kind
        candidate_codes = read_codes(candidates, encoder, InputFormat(item_type=item_type), field="candidates",
                                     public=True).codes
    elif input is None:  # the bundled dataset's public vocabulary names its words
        candidate_codes = encoder.encode(datasets.english_vocabulary(), field="candidate", public=True)
    return codes, candidate_codes, dropped, name


def _category_encoder(input: Path | None, candidates: Path | None, domain: int | None, item_type: str):
    """The encoder of a categorical protocol: the public list of categories (--candidates, or the bundled
    data's), or integers in [0, N) with --domain N."""
    from . import datasets
    from .core.encoding import CategoryEncoder
    from .io import read_list

    if candidates is not None:
        encoder = CategoryEncoder(read_list(candidates))
    elif input is None:
        encoder = CategoryEncoder(datasets.english_categories()[1])
    elif domain is None or item_type == "str":
        raise ParameterError("candidates", "given for text items (the public list of the N categories, one per line)"
                             ", or --domain N for integer items in [0, N)", None)
    else:
        return CategoryEncoder(domain)
    if domain is not None and domain != encoder.domain_size:
        raise ParameterError("domain", f"left out, or the number of categories listed ({encoder.domain_size})",
                             domain)
    return encoder


DEFAULT_DOMAIN = 2**24


def _small_domain_encoder(entry: ProtocolEntry, input: Path | None, hash_key: str | None):
    """A small-domain protocol (grr, oue, fe0, bib, blanket-hist) run without --domain: on the bundled data, its
    most common words as the domain's categories; on a file, --domain is required."""
    from . import datasets
    from .core.encoding import CategoryEncoder

    if input is not None:
        raise ParameterError.required("domain", f"for {entry.name} with --input: B, the number of possible items "
                                      "(its messages or its error grow with B; text is hashed into [B])")
    if hash_key is not None:
        raise ParameterError("hash-key", f"left out for {entry.name} on the bundled words without --domain (they are "
                             "categories, no key)", hash_key)
    return CategoryEncoder(datasets.english_vocabulary(datasets.SMALL_VOCABULARY).to_pylist())


def _estimate(entry: ProtocolEntry, *, input: Optional[Path], column: Optional[str], item_type: Enum,
              delimiter: Optional[str], header: bool, missing: Enum, domain: int, epsilon: float,
              delta: float, calibration: Enum, candidates: Optional[Path], top: int, seed: Optional[int],
              evaluate: Optional[bool],
              hash_key: Optional[str], full_domain: Optional[bool], mode: Mode, verbose: bool, as_json: bool,
              output: Optional[Path], progress: Optional[bool], write_messages: Optional[Path], partitions: int,
              epsilon_column: Optional[str], **options: Any) -> None:
    from .io import InputFormat
    from .reports import report_document
    from .simulate.frequency import check_resources, estimate_frequencies, item_encoder

    with _clean_errors():
        _check_output(output, input, candidates)
        _check_public(candidates, input)
        _check_stdin_format(input, delimiter)
        fmt = InputFormat(item_type.value, column, delimiter, header, missing.value)
        if entry.categorical:
            if hash_key is not None:
                raise ParameterError("hash-key", f"left out for {entry.name} (categories are codes by their place in "
                                     "the public list, no key)", hash_key)
            encoder = _category_encoder(input, candidates, domain, item_type.value)
            domain = encoder.domain_size
        elif domain is None and entry.small_domain:
            encoder = _small_domain_encoder(entry, input, hash_key)
            domain = encoder.domain_size
        else:
            domain = DEFAULT_DOMAIN if domain is None else domain
            encoder = item_encoder(domain, hash_key, seed)
        if write_messages is not None:
            if mode is Mode.fast:
                raise ParameterError("write-messages", "left out with --mode fast (the fast path makes no messages; "
                                     "--mode faithful writes them)",
                                     str(write_messages))
            from .engine import prepare_message_folder

            prepare_message_folder(write_messages, partitions)
        if input is not None:  # refuse a run that cannot fit before reading a line
            check_resources(entry.name, input, fmt, epsilon=epsilon, delta=delta, domain_size=domain,
                            calibration=calibration.value, options=options, mode=mode.value,
                            full_domain=full_domain, candidates=candidates is not None)
        start = time.perf_counter()
        codes, candidate_codes, dropped, input_name = _read_input(entry, input, fmt, encoder, candidates)
        read_seconds = time.perf_counter() - start
        evaluate = _evaluating(evaluate, input, seed)
        if epsilon_column is not None:
            from .io import read_epsilons
            from .simulate.frequency import estimate_weighted

            if input is None:
                raise ParameterError("epsilon-column", "given with --input (a table with a column of epsilons)",
                                     epsilon_column)
            with _progress(progress) as advance:
                report, _ = estimate_weighted(
                    entry.name, codes, read_epsilons(input, fmt, epsilon_column), encoder, epsilon=epsilon, delta=delta,
                    calibration=calibration.value, options=options, top=top, mode=mode.value, seed=seed,
                    input_name=input_name, progress=advance, evaluate=evaluate)
            report.simulation.seconds["read"] = read_seconds
            _with_left_out(report, dropped)
            _emit(report_document(report), as_json, output, lambda: _print_estimate(report, verbose))
            return
        with _progress(progress) as advance:
            report, run = estimate_frequencies(
                entry.name, codes, encoder, epsilon=epsilon, delta=delta, calibration=calibration.value,
                options=options, candidate_codes=candidate_codes, top=top, full_domain=full_domain,
                mode=mode.value, seed=seed, keep_messages=write_messages is not None, input_name=input_name,
                progress=advance, evaluate=evaluate)
        report.simulation.seconds["read"] = read_seconds
        _with_left_out(report, dropped)
        if write_messages is not None:
            from .engine import capped_partitions_warning, write_messages as write

            report.warnings += filter(None, [capped_partitions_warning(partitions, len(run.messages))])
            start = time.perf_counter()
            categories = getattr(encoder, "categories", None)  # a public list: analyze names the codes by it
            write(write_messages, run.result.parameters, run.messages, partitions, _messages_info(
                report, kind=encoder.kind, domain_size=domain, randomness=run.randomness,
                users=run.result.parameters.n_users,  # all n users' messages
                **({"categories": categories} if categories else {})))
            report.simulation.seconds["write_messages"] = time.perf_counter() - start
            report.messages_written = str(write_messages)
    _emit(report_document(report), as_json, output, lambda: _print_estimate(report, verbose))


UNRELIABLE = 0.05  # fe-hh: a miss or false-report bound above this makes the list not one to act on


def _printable(item: Any) -> str:
    """An item as the terminal shows it: control characters (a user's string may hold escape sequences that
    recolour or rewrite the analyst's terminal) as \\x.. escapes."""
    text = str(item)
    return text if text.isprintable() else "".join(
        c if c.isprintable() else f"\\x{ord(c):02x}" if ord(c) < 256 else f"\\u{ord(c):04x}" for c in text)


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


def _titled(title: str, report) -> str:
    """A table's title, marked when the report's estimates carry no information at this size (its warning says
    why: protocols.parameters.no_information), or when the groups of a weighted aggregation contradict the
    weighted estimates' assumption."""
    from .protocols.parameters import no_information

    uninformative = no_information(report.expected_error.standard_error, report.n_users)
    biased = getattr(report, "groups_disagree", None)
    return title + (" -- NO INFORMATION at this size: the standard error exceeds n (see the warning)" if uninformative
                    else "") + (" -- WEIGHTED ESTIMATES BIASED: the groups differ, use the unweighted column (see the "
                                "warning)" if biased else "")


def _estimate_table(title: str, estimates, item_key: str | None) -> None:
    from rich.table import Table

    simulated = any(row.true_count is not None for row in estimates)
    weighted = any(row.unweighted is not None for row in estimates)
    table = Table(title=title)
    table.add_column("rank", justify="right")
    table.add_column("item")
    table.add_column("estimate ± stderr", justify="right")
    if weighted:
        table.add_column("unweighted ± stderr", justify="right")
    if simulated:
        table.add_column("true count (--evaluate)", justify="right")
    for rank, row in enumerate(estimates, 1):
        flag = " (hash collision)" if row.hash_collision else ""
        cells = [str(rank), f"{_printable(row.item)}{flag}", f"{row.estimate:.1f} ± {row.stderr:.1f}"]
        cells += [f"{row.unweighted:.1f} ± {row.unweighted_stderr:.1f}"] if weighted else []
        table.add_row(*cells, *([str(row.true_count)] if simulated else []))
    _console().print(table)
    hashed = sum(isinstance(row.item, str) and row.item.startswith("#") for row in estimates)
    if hashed:
        _say(f"{hashed} items are strings shown by their code (#code), since only public items are named: give "
             "--candidates FILE to name them (privagg estimate fe-hh discovers heavy strings without one); "
             f"--hash-key {item_key} keeps these codes in later runs")


def _print_estimate(report, verbose: bool) -> None:
    _say(f"input: {report.input}")
    _estimate_table(_titled(f"{report.protocol}: top {_count(len(report.estimates), 'item')}", report),
                    report.estimates, report.parameters.get("item_key"))
    _say_privacy(report.privacy, report.privacy_profile, verbose)
    m, e, expected = report.messages, report.error, report.expected_error
    _say(f"cost: {m.total} messages from {report.n_users} users ({m.per_user:.3f} per user), "
         f"{report.bits_per_message} bits per message")
    if e is not None:
        over = f"the {e.items} items of the domain" if e.over == "domain" else f"the {e.items} {e.over}"
        _say(f"error against the true counts (--evaluate: not for release) over {over}: "
             f"max {e.max_abs:.1f}, mean {e.mean_abs:.2f}, p50 {e.p50:.1f}, p90 {e.p90:.1f}, p99 {e.p99:.1f}")
    _say(f"{'  ' if e is not None else ''}theory: stderr {expected.standard_error:.1f}, max-error bound "
         f"{expected.max_error_bound:.1f} w.p. {1 - expected.max_error_beta:.0%}")
    for g in report.groups or ():
        _say(f"  group epsilon {g.epsilon:g}: {g.n_users} users, p = {g.sampling_probability:.4g}, weight "
             f"{g.weight:.3f}")
    if report.unweighted_error is not None:
        u = report.unweighted_error
        _say(f"  unweighted baseline (sum of tau_g / p_g): max {u.max_abs:.1f}, mean {u.mean_abs:.2f}, p90 "
             f"{u.p90:.1f}")
    _say(f"simulation: {report.simulation.mode} path, {report.simulation.randomness}")
    _say_written(report)


def _say_written(report) -> None:
    if report.messages_written:
        _say(f"messages written to {report.messages_written} (privagg analyze {report.protocol} --params "
             f"{Path(report.messages_written) / 'params.json'} --messages {report.messages_written})")


def _register_estimate(entry: ProtocolEntry) -> None:
    categorical = entry.categorical
    params = [
        *_input_parameters(),
        _param("domain", Optional[int], typer.Option(
            None, "--domain",
            help="Number of categories N: integer items must lie in [0, N)." if categorical else
                 "Domain size B: integer items must lie in [0, B), text is hashed into [B]. "
                 + ("Required with --input; default for the bundled words: their 100 most common, B = 100."
                    if entry.small_domain else "Default: 2^24."))),
        *_protocol_parameters(entry),
        _param("candidates", Optional[Path], typer.Option(
            None, "--candidates", help="The public list of the N categories, one per line (an item outside it is "
                                       "an error), fixed without looking at the users' data. Default: the bundled "
                                       "data's." if categorical else
                                       PUBLIC_CANDIDATES + " The input file itself, or a copy, is refused.")),
        _param("top", int, typer.Option(10, "--top", help="How many top items to report.")),
        *_seed_and_evaluate_options(),
        _hash_key_option("The public item-hash key (hex, e.g. parameters.item_key of an earlier run): the same "
                         "strings get the same codes. Default: derived from --seed, else random."),
        _param("full_domain", Optional[bool], typer.Option(
            None, "--full-domain/--no-full-domain", help="Estimate every item of [B] (default when B <= 2^24 and its "
            "cost fits about a second, or 10 ms a user).")),
        _param("mode", Mode, typer.Option(Mode.faithful, "--mode",
                                          help="faithful: through every role; fast: simulation shortcuts.")),
        _verbose_option(),
        _param("as_json", bool, typer.Option(False, "--json", help="Print the JSON report.")),
        _param("output", Optional[Path], typer.Option(
            None, "--output", help="Write the JSON report to FILE (stdout gets the human summary).")),
        _param("progress", Optional[bool], typer.Option(
            None, "--progress/--no-progress", help="Progress on stderr: bars on a terminal, else plain lines "
                                                   "(default: on a terminal only).")),
    ]
    if entry.client is not None:  # one-round protocols, whose messages privagg analyze reads
        params += [
            _param("write_messages", Optional[Path], typer.Option(
                None, "--write-messages", help="Also write the shuffled messages as Parquet partitions and "
                                               "params.json into DIR (for privagg analyze).")),
            _param("partitions", int, typer.Option(16, "--partitions", help="Partitions for --write-messages.")),
        ]

    if entry.categorical and "min_count_fraction" in {o.name for o in entry.options}:
        params.append(_param("epsilon_column", Optional[str], typer.Option(
            None, "--epsilon-column", help="Weighted aggregation: the table's column of each user's epsilon; users "
                                           "are grouped by it, each group sampled at its own p, and the groups "
                                           "combined by inverse-variance weights (--epsilon is then the largest a "
                                           "user may ask for).")))

    def body(**kw: Any) -> None:
        kw.setdefault("write_messages", None)
        kw.setdefault("partitions", 1)
        kw.setdefault("epsilon_column", None)
        _estimate(entry, **kw)

    estimate_app.command(entry.name, help=f"{entry.title}: simulate over a dataset, report the top items.")(
        _command(body, params, entry.title))


def _read_vector_input(entry: ProtocolEntry, input: Path | None, fmt, clip: bool, dimension: Optional[int],
                       candidates: Optional[Path], evaluate: bool):
    """(inputs, dimension, candidate coordinates, coordinate names, input name, warnings, rows left out for a
    missing value) of a vector protocol: the file's vectors or (coordinate, weight) rows, or the bundled data's
    (``evaluate``: the report is an evaluation, which may say how many values --clip clipped)."""
    from .io import read_vectors_counted
    from .protocols.privacy_blanket import clip_vectors

    sparse = getattr(entry.parameters, "one_sparse", False)
    names, dropped = None, 0
    if input is None:
        from . import datasets

        if sparse:
            inputs, names = datasets.sparse_vectors()
            if dimension not in (None, len(names)):
                raise ParameterError("dimension", f"left out, or {len(names)} (the bundled data's words)", dimension)
            dimension, name = len(names), datasets.SPARSE_DESCRIPTION
        else:
            inputs, name = datasets.digits_vectors(), datasets.DIGITS_DESCRIPTION
    else:
        inputs, dropped = read_vectors_counted(input, fmt)
        name = _input_name(input)
        if sparse and dimension is None:
            raise ParameterError("dimension", "given with --input: B, the public number of coordinates (the data's "
                                 "(coordinate, weight) rows must lie in [0, B))", None)
    warnings = []
    if clip:
        values = inputs[:, 1:] if sparse else inputs  # sparse: the weights only; a bad coordinate stays an error
        outside = int(((values < 0) | (values > 1)).sum())
        values[...] = clip_vectors(values)
        # how many were clipped is a count of the data: an evaluation shows it, a release says only what --clip does
        warnings.append(f"{outside} values outside [0, 1] were clipped (--clip)" if evaluate else
                        "values outside [0, 1] are clipped to it (--clip; how many is a count of the data, which a "
                        "release does not carry: --evaluate shows it)")
    coordinates = None if candidates is None else _read_coordinates(candidates)
    return inputs, dimension, coordinates, names, name, warnings, dropped


def _read_coordinates(path: Path):
    """A file of public candidate coordinates, integers one per line (estimate and analyze of vector sums)."""
    import numpy as np

    from .io import InputFormat, read_list

    listed = read_list(path, InputFormat(item_type="int"), field="candidates")
    try:
        return np.array([int(v) for v in listed], dtype=np.int64)
    except (ValueError, OverflowError):
        bad = next((v for v in listed if not v.lstrip("-").isdigit() or len(v) > 20), "")
        raise ParameterError("candidates", "integer coordinates of at most 19 digits, one per line",
                             bad if len(bad) <= 60 else f"{bad[:50]}... ({len(bad)} characters)") from None


def _estimate_vector(entry: ProtocolEntry, *, input: Optional[Path], delimiter: Optional[str], header: bool,
                     clip: bool, epsilon: float, delta: float, calibration: Enum, seed: Optional[int],
                     evaluate: Optional[bool], show: int,
                     verbose: bool, as_json: bool, output: Optional[Path], progress: Optional[bool],
                     write_messages: Optional[Path], partitions: int, dimension: Optional[int] = None,
                     candidates: Optional[Path] = None, mode: Mode = Mode.faithful, discover_phi: Optional[float] = None,
                     missing: Optional[Enum] = None, **options: Any) -> None:
    from . import engine
    from .io import InputFormat
    from .reports import report_document
    from .simulate.frequency import estimate_vector_sum

    with _clean_errors():
        _check_output(output, input, candidates)
        _check_public(candidates, input)
        _check_stdin_format(input, delimiter, "a .npy array, or a CSV, TSV or Parquet table of vectors (one row a "
                            "user; standard input as a table needs --delimiter)")
        if write_messages is not None:
            if mode is Mode.fast:
                raise ParameterError("write-messages", "left out with --mode fast (the fast path makes no messages; "
                                     "--mode faithful writes them)",
                                     str(write_messages))
            engine.prepare_message_folder(write_messages, partitions)
        fmt = InputFormat(delimiter=delimiter, header=header, missing="error" if missing is None else missing.value)
        with _located(input, fmt, vectors=True):
            inputs, dimension, coordinates, names, name, warnings, dropped = _read_vector_input(
                entry, input, fmt, clip, dimension, candidates, _evaluating(evaluate, input, seed))
        if discover_phi is not None and write_messages is not None:
            raise ParameterError("write-messages", "left out with --discover-phi (its two stages' messages are not "
                                 "written)", str(write_messages))
        with _progress(progress) as advance, _located(input, fmt, vectors=True):
            report, run = estimate_vector_sum(entry.name, inputs, epsilon=epsilon, delta=delta,
                                              calibration=calibration.value, options=options, dimension=dimension,
                                              candidates=coordinates, names=names, mode=mode.value, seed=seed,
                                              input_name=name, progress=advance, warnings=warnings,
                                              keep_messages=write_messages is not None, discover_phi=discover_phi,
                                              evaluate=_evaluating(evaluate, input, seed))
        _with_left_out(report, dropped)
        if write_messages is not None:
            report.warnings += filter(None, [engine.capped_partitions_warning(partitions, len(run.messages))])
            start = time.perf_counter()
            engine.write_messages(write_messages, run.result.parameters, run.messages, partitions, _messages_info(
                report, kind="vector", domain_size=run.result.parameters.domain_size, randomness=run.randomness,
                users=run.result.parameters.n_users))  # all n users' messages
            report.simulation.seconds["write_messages"] = time.perf_counter() - start
            report.messages_written = str(write_messages)

    def human() -> None:
        from rich.table import Table

        shown = sorted(report.estimates, key=lambda e: -e.estimate)[:show] if names else report.estimates[:show]
        _say(f"input: {report.input} ({report.n_users} users, d = {report.parameters.get('dimension', len(shown))}, "
             f"{len(report.estimates)} coordinates estimated)")
        table = Table(title=_titled(f"{report.protocol}: " + (
            f"no coordinate discovered at phi {report.discovery.phi:g}, none estimated (see the warning)"
            if report.discovery is not None and not report.estimates else f"the {len(shown)} largest sums" if names
            else f"sums of the first {len(shown)} coordinates"), report))
        evaluated = report.error is not None
        for column in ("coordinate", "sum ± stderr", "mean", *(("true sum (--evaluate)",) if evaluated else ())):
            table.add_column(column, justify="right")
        for e in shown:
            table.add_row(_printable(e.name or e.item), f"{e.estimate:.1f} ± {e.stderr:.1f}",
                          f"{e.estimate / report.n_users:.4f}", *((f"{e.true_sum:.1f}",) if evaluated else ()))
        _console().print(table)
        _say_privacy(report.privacy, report.privacy_profile, verbose)
        m, err = report.messages, report.error
        noise = (f"gamma = {report.parameters['gamma']:.4g}" if "gamma" in report.parameters else
                 f"mu = {report.parameters['mu']:.4g} dummies a cell")
        _say(f"cost: {m.total} messages from {report.n_users} users ({m.per_user:.3f} per user), "
             f"{report.bits_per_message} bits per message; {noise}")
        if report.discovery is not None:
            found = report.discovery
            _say(f"discovery ({found.parameters['protocol']}, phi {found.phi:g}): {found.coordinates} coordinates "
                 f"found with {found.messages.total} of the messages; {found.privacy}")
        if err is not None:
            normalised = "" if err.normalised_mse is None else f", normalised MSE {err.normalised_mse:.3g}"
            _say(f"error against the true sums (--evaluate: not for release): max {err.max_abs:.1f}, squared "
                 f"error {err.squared_error:.4g}, MSE of the mean {err.mse_of_mean:.3g}{normalised}")
        _say(f"theory: expected sd {report.expected_error.standard_error:.3g} a coordinate")
        _say(f"simulation: {report.simulation.mode} path, {report.simulation.randomness}")
        _say_written(report)

    _emit(report_document(report), as_json, output, human)


def _register_vector_estimate(entry: ProtocolEntry) -> None:
    sparse = getattr(entry.parameters, "one_sparse", False)
    params = [
        _param("input", Optional[Path], typer.Option(
            None, "--input", callback=_input_file, help=(
                                   "The users' (coordinate, weight) rows, weights in [0, 1]: an (n, 2) .npy array or "
                                   "a two-column CSV, TSV or Parquet table. Default: the bundled words with weights."
                                   if sparse else "The users' vectors in [0, 1]^d: an (n, d) .npy array, or a CSV, "
                                   "TSV or Parquet table (one row a user, every column a coordinate). Default: the "
                                   "bundled digits.") + " - reads standard input.")),
        _param("delimiter", Optional[str], typer.Option(None, "--delimiter", help="Read the input as a table with "
                                                                                  "this delimiter.")),
        _param("header", bool, typer.Option(True, "--header/--no-header", help="Whether the table's first line "
                                                                                "names its columns.")),
        _param("missing", MissingChoice, typer.Option(
            "error", "--missing", help="A blank line or an empty cell: error (default, naming the line) or drop "
                                       "(leave the user out); NaN is a value, not a missing one.")),
        _param("clip", bool, typer.Option(False, "--clip", help="Clip values to [0, 1] (otherwise a value outside "
                                                                "is an error naming its row and column).")),
        *_protocol_parameters(entry),
        *_seed_and_evaluate_options(),
        _param("show", int, typer.Option(20, "--show", help="How many coordinates to print (the JSON has all).")),
        _verbose_option(),
        _param("as_json", bool, typer.Option(False, "--json", help="Print the JSON report.")),
        _param("output", Optional[Path], typer.Option(None, "--output", help="Write the JSON report to FILE.")),
        _param("progress", Optional[bool], typer.Option(None, "--progress/--no-progress", help="Progress on stderr.")),
        _param("write_messages", Optional[Path], typer.Option(
            None, "--write-messages", help="Also write the shuffled messages as Parquet partitions and params.json "
                                           "into DIR (for privagg analyze).")),
        _param("partitions", int, typer.Option(16, "--partitions", help="Partitions for --write-messages.")),
    ]
    if sparse:
        params += [
            _param("dimension", Optional[int], typer.Option(
                None, "--dimension", help="B: the public number of coordinates (required with --input).")),
            _param("candidates", Optional[Path], typer.Option(
                None, "--candidates", help="File of public candidate coordinates (integers, one per line) to "
                                           "estimate, chosen without looking at the users' data; the others are "
                                           "estimated as 0. Default: every coordinate.")),
            _param("mode", Mode, typer.Option(Mode.faithful, "--mode", help="faithful: through every role; fast: "
                                                                             "simulation shortcuts.")),
        ]
    if entry.discovery is not None:
        params.append(_param("discover_phi", Optional[float], typer.Option(
            None, "--discover-phi", help=f"No candidate list: find the coordinates whose sums reach PHI n with "
                                         f"{entry.discovery.protocol} over {entry.discovery.what} first; each stage "
                                         "gets half of epsilon and delta (the paper's two stages).")))
    estimate_app.command(entry.name, help=f"{entry.title}: simulate over users' vectors, report the sums.")(
        _command(lambda **kw: _estimate_vector(entry, **kw), params, entry.title))


def _estimate_hh(entry: ProtocolEntry, *, input: Optional[Path], column: Optional[str], item_type: Enum,
                 delimiter: Optional[str], header: bool, missing: Enum, domain: Optional[int], epsilon: float,
                 delta: float, calibration: Enum, phi: Optional[float], max_length: Optional[int],
                 seed: Optional[int], evaluate: Optional[bool], verbose: bool, as_json: bool, output: Optional[Path],
                 progress: Optional[bool]) -> None:
    from . import datasets
    from .io import InputFormat, read_items
    from .reports import report_document
    from .simulate.heavy_hitters import estimate_heavy_hitters

    with _clean_errors():
        _check_output(output, input)
        _check_stdin_format(input, delimiter)
        evaluate, dropped = _evaluating(evaluate, input, seed), 0
        fmt = InputFormat(item_type.value, column, delimiter, header, missing.value)
        if input is None:
            values, name = datasets.english_words(datasets.HEAVY_HITTER_USERS).to_pylist(), datasets.HH_DESCRIPTION
            if domain is not None:
                raise ParameterError("domain", "left out for the bundled words (strings: --max-length)", domain)
            max_length = datasets.HH_MAX_LENGTH if max_length is None else max_length
        else:
            values, dropped = read_items(input, fmt)
            name = _input_name(input)
            strings = isinstance(values, list) and values and isinstance(values[0], str)
            if strings and max_length is None:
                from .protocols.heavy_hitters import DEFAULT_MAX_LENGTH

                max_length = DEFAULT_MAX_LENGTH
            if not strings and max_length is not None:
                raise ParameterError("max-length", "left out for integer items (--domain B sets their range)",
                                     max_length)
        with _progress(progress) as advance, _located(input, fmt):
            report, _ = estimate_heavy_hitters(values, epsilon=epsilon, delta=delta, phi=phi, domain_size=domain,
                                               max_length=max_length, calibration=calibration.value, seed=seed,
                                               input_name=name, progress=advance, evaluate=evaluate)
        _with_left_out(report, dropped)

    def human() -> None:
        from rich.table import Table

        _say(f"input: {report.input} ({report.n_users} users); heavy: held by at least phi n = "
             f"{report.threshold:.0f} users")
        t, found = report.theory, len(report.heavy_hitters)
        unreliable = t["miss_probability"] > UNRELIABLE or t["false_report_probability"] > UNRELIABLE
        table = Table(title=_titled(f"{report.protocol}: {_count(found, 'heavy hitter')} discovered" + (
            " -- NOT A RELIABLE LIST at this n and phi (see the guarantee below: more users or a larger phi)"
            if unreliable else ""), report))
        e = report.evaluation
        for column_name in ("rank", "item", "estimate ± stderr", *(("true count (--evaluate)",) if e else ())):
            table.add_column(column_name, justify="left" if column_name == "item" else "right")
        for rank, h in enumerate(report.heavy_hitters, 1):
            table.add_row(str(rank), _printable(h.item), f"{h.estimate:.0f} ± {h.stderr:.0f}",
                          *((str(h.true_count),) if e else ()))
        _console().print(table)
        _say_privacy(report.privacy, report.privacy_profile, verbose)
        m, p = report.messages, report.parameters
        _say(f"cost: {m.total} messages from {report.n_users} users ({m.per_user:.3f} per user), "
             f"{report.bits_per_message} bits per message; {p['levels']} levels, p_f = "
             f"{p['filter_probability']:.4g}, prefixes followed per level: "
             f"{' '.join(map(str, report.survivors))}")
        _say(f"guarantee (normal approximation): an item held by >= 1.5 phi n users is missed w.p. <= "
             f"{t['miss_probability']:.2g}, one held by <= phi n / 2 reported w.p. <= "
             f"{t['false_report_probability']:.2g}; items in between may go either way")
        if e is not None:
            recall = (f"recall {e.recall:.0%} (>= 1.5 phi n: {e.recall_strong:.0%})" if e.heavy_items else
                      "none to find")
            precision = (f"of the {e.reported} reported, precision {e.precision:.0%} (held by >= phi n / 2: "
                         f"{e.precision_loose:.0%})" if e.reported else "nothing reported")
            _say(f"against the true counts (--evaluate: not for release): {e.heavy_items} items held by >= phi n, "
                 f"{recall}; {precision}")
        _say(f"simulation: {report.simulation.randomness}; seconds "
             + ", ".join(f"{k} {v:.2f}" for k, v in report.simulation.seconds.items()))

    _emit(report_document(report), as_json, output, human)


def _register_hh_estimate(entry: ProtocolEntry) -> None:
    params = [
        *_input_parameters(),
        _param("domain", Optional[int], typer.Option(None, "--domain", help="Integer items: B, items in [0, B), "
                                                                            "up to 2^64.")),
        *_protocol_parameters(entry),
        *_seed_and_evaluate_options(),
        _verbose_option(),
        _param("as_json", bool, typer.Option(False, "--json", help="Print the JSON report.")),
        _param("output", Optional[Path], typer.Option(None, "--output", help="Write the JSON report to FILE.")),
        _param("progress", Optional[bool], typer.Option(None, "--progress/--no-progress", help="Progress on stderr.")),
    ]
    estimate_app.command(entry.name, help=f"{entry.title}: simulate over users' items, report the heavy hitters "
                                          "(discovered, no candidate list).")(
        _command(lambda **kw: _estimate_hh(entry, **kw), params, entry.title))


# --- audit --------------------------------------------------------------------------------------------

AuditMethod = _choice("AuditMethod", ("exact", "statistical"))


def _audit(entry: ProtocolEntry, *, users: int, domain: int, epsilon: float, delta: float, calibration: Enum,
           noise_scale: float, dropouts: int, method: Enum, runs: int, seed: int, as_json: bool,
           output: Optional[Path], progress: Optional[bool] = None, **options: Any) -> None:
    from .audit import exact_audit, statistical_audit
    from .protocols.registry import calibrate
    from .reports import report_document

    with _clean_errors():
        _check_output(output)
        params = calibrate(entry.name, epsilon=epsilon, delta=delta, n_users=users, domain_size=domain,
                           calibration=calibration.value, **options)
        if method.value == "exact":
            with _progress(progress) as advance:
                report = exact_audit(params, noise_scale, dropouts, progress=advance)
        elif dropouts:
            raise ParameterError("dropouts", "0 with --method statistical", dropouts)
        else:
            with _progress(progress) as advance:
                report = statistical_audit(params, runs=runs, noise_scale=noise_scale, seed=seed, progress=advance)

    def human() -> None:
        r = report
        _say(f"{r.protocol}, {r.calibration} calibration, noise x{r.noise_scale:g}: {r.method} audit"
             + (f" over {r.pairs} neighbouring pairs" if r.pairs else f", {r.runs} runs per dataset, "
                f"{r.confidence:.0%} confidence"))
        _say(f"claimed: ({r.claimed.epsilon:g}, {r.claimed.delta:g})-DP")
        eps = "no finite epsilon" if r.true_epsilon is None else f"{r.true_epsilon:.4g}"
        if r.method == "exact":
            _say(f"true: delta at epsilon {r.claimed.epsilon:g} = {r.true_delta:.4g}; epsilon at delta "
                 f"{r.claimed.delta:g} = {eps}" + ("" if r.slack is None else f" (slack {r.slack:.4g})"))
        else:
            _say(f"lower bound on the true epsilon: {eps}")
        for note in r.notes:
            _say(f"  {note}")
        _say("verdict: " + ("holds" if r.holds else "VIOLATED: the mechanism does not meet its claimed guarantee"))

    _emit(report_document(report), as_json, output, human)
    if not report.holds:
        raise typer.Exit(EXIT_VIOLATION)  # a violated guarantee fails a script, as a failed test would


def _register_audit(entry: ProtocolEntry) -> None:
    params = [
        _param("users", int, typer.Option(..., "--users", help="Number of users n (tiny for --method exact).")),
        _param("domain", int, typer.Option(..., "--dimension", help="Dimension d (tiny for --method exact).")
               if entry.result is ResultKind.VECTOR_SUM else
               typer.Option(..., "--domain", help="Domain size B (tiny for --method exact).")),
        *_protocol_parameters(entry),
        _param("noise_scale", float, typer.Option(1.0, "--noise-scale", help="Multiply the calibrated noise by F "
                                                                             "(below 1: watch the auditor catch it).")),
        _param("dropouts", int, typer.Option(0, "--dropouts", help="Users who send nothing (drop out, or collude "
                                                                    "and are subtracted); exact method.")),
        _param("method", AuditMethod, typer.Option("exact", "--method", help="exact (enumerates the output laws: "
                                                                            "tiny n and B) or statistical.")),
        _param("runs", int, typer.Option(4000, "--runs", help="Runs per dataset (statistical).")),
        _param("seed", int, typer.Option(0, "--seed", help="Seed of the statistical auditor's runs.")),
        _param("as_json", bool, typer.Option(False, "--json", help="Print the report as JSON.")),
        _param("output", Optional[Path], typer.Option(None, "--output", help="Write the JSON report to FILE.")),
        _param("progress", Optional[bool], typer.Option(
            None, "--progress/--no-progress", help="Progress on stderr: bars on a terminal, else plain lines "
                                                   "(default: on a terminal only).")),
    ]
    audit_app.command(entry.name, help=f"{entry.title}: audit the claimed (epsilon, delta); exit status 1 when "
                                       "it does not hold.")(
        _command(lambda **kw: _audit(entry, **kw), params, entry.title))


for _entry in ENTRIES:
    if _entry.implemented:
        _register_calibrate(_entry)
        _register_audit(_entry)
        if _entry.result is ResultKind.HEAVY_HITTER_LIST:
            _register_hh_estimate(_entry)
        elif _entry.result is ResultKind.FREQUENCY_TABLE:
            _register_estimate(_entry)
        else:  # vector sums: estimated over vectors or (coordinate, weight) rows
            _register_vector_estimate(_entry)


# --- reproduce ----------------------------------------------------------------------------------------

@reproduce_app.command("sampling")
def reproduce_sampling(
    out: Path = typer.Option(..., "--out", help="Folder for the tables (CSV) and plots (PNG)."),
    quick: bool = typer.Option(False, "--quick", help="A small grid (seconds), for a first look."),
    seed: int = typer.Option(0, "--seed", help="Seed of the simulations (they are not private runs)."),
    progress: Optional[bool] = typer.Option(None, "--progress/--no-progress", help="Progress on stderr."),
) -> None:
    """The sampling + secret-sharing family: variance against n and eps (DPDS, DPDG, TSS) with the crossover n*,
    and costs per party against n and N (docs/results/sampling.md)."""
    from .reproduce.sampling import run

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


def _summary_value(value: Any, digits: int = 4) -> str:
    """One value of a summary as a person reads it: ``digits`` significant digits, yes/no, '-' for none."""
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return f"{value:.{digits}g}"
    if isinstance(value, (list, tuple)):
        return " / ".join(_summary_value(v, digits) for v in value)
    return str(value)


def _plain_number(value: float) -> str:
    """A table's number: 4 significant digits, whole with thousands separators from 1,000 on (not 1.523e+04)."""
    return f"{value:,.0f}" if abs(value) >= 1000 else f"{value:.4g}"


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


@reproduce_app.command("vector-shuffle")
def reproduce_vector_shuffle(
    out: Path = typer.Option(..., "--out", help="Folder for the tables (CSV) and plots (PNG)."),
    quick: bool = typer.Option(False, "--quick", help="A small grid (seconds), for a first look."),
    seed: int = typer.Option(0, "--seed", help="Seed of the simulations (they are not private runs)."),
    progress: Optional[bool] = typer.Option(None, "--progress/--no-progress", help="Progress on stderr."),
) -> None:
    """The privacy-blanket vector sums (blanket-vector) on the bundled digits: MSE against t, k, d, eps and n under
    the paper's and the tight gamma, beside the theory and the paper's bound (docs/results/vector-shuffle.md)."""
    from .reproduce.vector_shuffle import run

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
    from .reproduce.fe_shuffle import run

    _reproduce(run, out, quick, seed, progress)


# --- compare ------------------------------------------------------------------------------------------

@app.command("compare")
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
    from . import datasets
    from .compare import compare, parse_list, plot, write_csv
    from .io import InputFormat, read_codes
    from .reports import report_document
    from .simulate.frequency import item_encoder

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
        refusals = []
        for r in report.rows:
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
        if out is not None:
            _say(f"wrote compare.csv, error_vs_epsilon.png and error_vs_messages.png to {out}")

    _emit(report_document(report), as_json, None, human)


# --- account ------------------------------------------------------------------------------------------

AccountMethod = _choice("AccountMethod", ("best", "fmt", "wang", "blanket", "closed-form"))


@account_app.command("shuffle")
def account_shuffle(
    local_epsilon: float = typer.Option(..., "--local-epsilon", help="eps0 of each user's local randomizer."),
    users: int = typer.Option(..., "--users", help="Number of users n (one report each)."),
    delta: float = typer.Option(..., "--delta", help="delta in (0, 1)."),
    method: AccountMethod = typer.Option("best", "--method", help="best (default: the least of every proven "  # type: ignore
                                         "numerical bound that applies), fmt (Feldman-McMillan-Talwar), wang "
                                         "(variation-ratio reduction), blanket (k-ary randomized response, "
                                         "--values: the blanket accountant) or closed-form (FMT's)."),
    values: Optional[int] = typer.Option(None, "--values", help="k: the randomizer is k-ary randomized response "
                                         "(sets --total-variation, allows the blanket accountant; k = 2 also "
                                         "reports the exact eps of shuffled binary randomized response)."),
    total_variation: Optional[float] = typer.Option(None, "--total-variation", help="beta of the randomizer, where "
                                                    "known (wang; k-ary RR: give --values instead)."),
    as_json: bool = typer.Option(False, "--json", help="Print the report as JSON."),
    output: Optional[Path] = typer.Option(None, "--output", help="Write the JSON report to FILE."),
) -> None:
    """(eps, delta) of n eps0-LDP reports after a uniform shuffle (amplification by shuffling)."""
    from .privacy import shuffle
    from .reports import AccountReport, report_document

    with _clean_errors():
        _check_output(output)
        start = time.perf_counter()
        epsilons = shuffle.shuffle_epsilons(local_epsilon, users, delta, method.value, total_variation, values)
        by = min(epsilons, key=epsilons.get)
        seconds = time.perf_counter() - start
        try:
            closed = shuffle.shuffle_epsilon(local_epsilon, users, delta, "closed-form")
        except ParameterError:  # outside the closed form's condition
            closed = None
        exact, exact_note = None, None
        if values == 2:
            searched = 2 * shuffle.BINARY_SPLITS
            try:
                exact = shuffle.binary_randomized_response_epsilon(local_epsilon, users, delta)
                exact_note = ("every dataset" if users - 1 < searched else f"the {searched} datasets whose other "
                              "users hold the fewest or the most ones, where the worst lies on every instance "
                              "searched in full")
            except ParameterError as err:  # too large to compute: the bounds stand, and the report says why
                exact_note = f"not computed: {err}"
        if values is not None:
            total_variation = shuffle.randomized_response_total_variation(local_epsilon, values)
    report = AccountReport("shuffle", local_epsilon, users, delta, method.value, epsilons[by], by, epsilons,
                           list(shuffle.ASSUMPTIONS), shuffle.REFERENCE, total_variation, values, closed, exact,
                           exact_note, seconds)

    def human() -> None:
        randomizer = f"{values}-ary randomized response" if values else "local randomizer"
        _say(f"{users} shuffled reports of an eps0 = {local_epsilon:g} {randomizer} are ({epsilons[by]:.4g}, "
             f"{delta:g})-DP ({by}, {seconds:.2f} s)")
        if len(epsilons) > 1:
            _say("  by method: " + ", ".join(f"{name} {value:.4g}" for name, value in epsilons.items()))
        if closed is not None and method.value != "closed-form":
            _say(f"  the closed form gives eps = {closed:.4g}")
        if method.value == "best" and values and values > 2 and "blanket" not in epsilons:
            _say("  the blanket accountant is not run at this size (each blanket size would cost more binomial tails "
                 "than its budget); FMT's and Wang et al.'s bounds stand")
        if exact is not None:
            gap = f"the bound is {epsilons[by] / exact - 1:.1%} above it" if exact > 0 else "the bound is above 0"
            _say(f"  exact eps of shuffled binary randomized response: {exact:.4g} (over {exact_note}); {gap}")
        elif exact_note is not None:
            _say(f"  exact eps of shuffled binary randomized response {exact_note}")
        _say("  assumes: " + "; ".join(shuffle.ASSUMPTIONS))

    _emit(report_document(report), as_json, output, human)


# --- analyze ------------------------------------------------------------------------------------------

Protocol = _choice("Protocol", tuple(n for n in IMPLEMENTED if REGISTRY[n].client is not None))
EngineName = _choice("EngineName", ("local", "dask"))


@app.command()
def analyze(
    protocol: Protocol = typer.Argument(..., help="Protocol name."),  # type: ignore[valid-type]
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
    from . import engine as engines
    from .core.encoding import CategoryEncoder, ItemEncoder
    from .io import InputFormat, read_codes
    from .pipelines import Analysis
    from .protocols import registry
    from .protocols.registry import load_parameters
    from .reports import report_document

    with _clean_errors():
        _check_output(output, params_file, candidates)
        from .io import read_json_text

        params = load_parameters(read_json_text(params_file, "params"))
        if params.protocol != protocol.value:
            raise ParameterError("params", f"parameters of {protocol.value}", f"parameters of {params.protocol}")
        partitions = engines.message_partitions(messages)
        _check_partition_columns(partitions, params.layout)
        own = messages / engines.PARAMS_FILE  # only compared: --params was verified above
        if own.exists() and load_parameters(read_json_text(own, "messages"), verify=False) != params:
            raise ParameterError("params", f"the parameters the messages were made with ({own})", str(params_file))
        items = engines.read_items_info(messages, params.domain_size)
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
            queries = read_codes(candidates, encoder, fmt, field="candidates", public=True).codes
        elif full_domain is None and params.domain_size <= registry.FULL_DOMAIN_DEFAULT_MAX:
            # the default whole domain is held to a run's budget, as estimate's is: 3 users' messages over 2^24
            # items took as long to analyze as to simulate (fe1's preimages, whatever n)
            from .simulate.frequency import full_domain_seconds

            full_domain = registry.choose_full_domain(params.domain_size, None, False,
                                                      seconds=full_domain_seconds(params), n_users=params.n_users,
                                                      protocol=params.protocol)
        analysis = Analysis.of(params, queries, full_domain)
        reporters, unknown = engines.folder_reporters(params, items)
        result, run = engines.analyze(analysis.analyzer(), partitions, engine.value, scheduler, workers, reporters)
        received = result.messages + result.malformed
        report = analysis.report(result, engines.folder_privacy(params, items, received), run, encoder=encoder, top=top)
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
    from . import engine as engines
    from .pipelines import Analysis
    from .reports import report_document
    from .simulate.frequency import check_coordinates

    coordinates = None if candidates is None else _read_coordinates(candidates)
    # held to a run's budget, as estimate is
    check_coordinates(params, coordinates, simulated=False)
    analysis = Analysis.of(params, coordinates)
    reporters, unknown = engines.folder_reporters(params, items)
    result, run = engines.analyze(analysis.analyzer(), partitions, engine, scheduler, workers, reporters)
    received = result.messages + result.malformed
    report = analysis.report(result, engines.folder_privacy(params, items, received), run)
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

    from .reports import received_mismatch

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


from .service_cli import add_service_commands  # noqa: E402 (it uses the helpers above)

add_service_commands(app)
_strict_numbers(app)  # after every command is registered
_checked_paths(app)


def _version(value: bool) -> None:
    if value:
        _say(f"privagg {__version__}")
        raise typer.Exit()


@app.callback()
def _main(version: bool = typer.Option(False, "--version", callback=_version, is_eager=True,
                                       help="Print the version and exit.")) -> None:
    """Private aggregate statistics without a trusted collector."""


WRITE_FAILURES = (errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EIO)  # what a write may meet that is no bug


def main() -> None:
    """The ``privagg`` entry point: command-line usage errors too end in one line and status 2."""
    try:
        status = app(standalone_mode=False)
        gc.freeze()  # exiting: the interpreter's last collections skip the heap (0.05 s with scipy loaded)
        sys.exit(status)
    except (typer.Abort, KeyboardInterrupt):
        sys.exit(EXIT_INTERRUPTED)
    except Exception as e:
        if isinstance(e, OSError) and e.errno in WRITE_FAILURES:
            # standard output on a full disk (> /dev/full), a quota, a device error: the environment's, not a bug
            _say(f"error: the output could not be written ({e.strerror})", stderr=True)
            sys.exit(EXIT_BAD_INPUT)
        # typer raises click's UsageError, from click or from the copy it vendors: match it by name.
        if not any(cls.__name__ == "UsageError" for cls in type(e).__mro__):
            traceback.print_exc()
            _say(f"internal error: {type(e).__name__} (a bug in privagg: please report it with the command line "
                 "and the traceback above)", stderr=True)
            sys.exit(EXIT_INTERNAL)
        if type(e).__name__ == "NoArgsIsHelpError":  # a command without its arguments: show its help
            _say(e.format_message())
        elif e.format_message():
            _say(f"error: {e.format_message()}", stderr=True)
        sys.exit(EXIT_BAD_INPUT)
