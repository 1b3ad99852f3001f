"""What every ``privagg`` command shares for its output: the console, one-line errors, the exit statuses, the
report's JSON or human form, progress on stderr, and the lines and tables several commands print (an estimate's
table, a guarantee's summary)."""

from __future__ import annotations

import json
import os
import sys
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Callable, Iterator

import typer

from ..errors import ParameterError


# every privagg command's exit status; a crash is never 1, so a script can tell "violated" from "broken"
EXIT_VIOLATION, EXIT_BAD_INPUT, EXIT_START_FAILED, EXIT_INTERNAL, EXIT_INTERRUPTED = 1, 2, 3, 4, 130
EXIT_STATUS = ("Exit status: 0 done; 1 an audit found a violation; 2 bad input or usage (one line: error: ...); "
               "3 a service could not start (one line says why); 4 an internal error, a bug (a traceback follows: "
               "please report it with the command line); 130 interrupted.")
PIPE_WIDTH = 1_000  # a table's width when the output is a pipe or a file: its content's, not cut at 80 columns


# How a file of items is read (estimate, compare, loadgen): the options that io's errors name (--no-header,
# --item-type str, --missing drop, ...), so that every command reading such a file has each one they name
_FORMAT_OPTIONS = {
    "column": (None, "--column", "The column holding the items (a table with several); with --no-header, its 0-based "
                                 "index."),
    "item_type": ("auto", "--item-type", "int, str, or auto: integers only when every value is a canonical decimal "
                                         "integer; any mix is an error."),
    "delimiter": (None, "--delimiter", "Read the input as a table with this delimiter (default: by extension, .csv "
                                       "comma, .tsv tab)."),
    "header": (True, "--header/--no-header", "Whether the table's first line names its columns."),
    "missing": ("error", "--missing", "An empty cell or line: error (default) or drop (leave the user out)."),
}


def format_option(name: str):
    """The typer option ``name`` (:data:`_FORMAT_OPTIONS`) of a command that reads a file of items."""
    default, flag, text = _FORMAT_OPTIONS[name]
    return typer.Option(default, flag, help=text)


def _console(stderr: bool = False):
    """Rich's console, for what needs it (tables, progress bars, JSON coloured on a terminal): long lines stay whole;
    piped or written to a file, tables take their content's width (whatever COLUMNS says: a pipe has no width to
    fit)."""
    from rich.console import Console

    stream = sys.stderr if stderr else sys.stdout
    return Console(stderr=stderr, soft_wrap=True, width=None if stream.isatty() else PIPE_WIDTH)


def _table(title: str, columns: list[tuple[str, str]], rows: list[list[str]]) -> None:
    """A table on stdout, under ``title``: ``columns`` (header, "left" or "right"), a row of strings each, printed
    by rich as text (an item's "[/]" or ":smile:" is shown as it is: as markup, the first raised rich's
    MarkupError and the second became an emoji)."""
    from rich.table import Table
    from rich.text import Text

    table = Table(title=Text(title))
    for header, justify in columns:
        table.add_column(Text(header), justify=justify)
    for row in rows:
        table.add_row(*map(Text, row))
    _console().print(table)


def _say(text: str, stderr: bool = False) -> None:
    """One line (or several) as written, in plain text: never wrapped, no markup, no emoji codes (rich, which printed
    these lines, loaded 40 ms of modules for each command and turned a name's ":smile:" into an emoji); a control
    character other than a newline or a tab shown as its escape (:func:`_printable`), so that a name or a value a
    message quotes cannot rewrite the terminal. On stderr for errors and warnings."""
    stream = sys.stderr if stderr else sys.stdout
    stream.write(_printable(text, keep="\n\t") + "\n")
    stream.flush()


# paths an error names otherwise: standard input's temporary copy is "standard input" (inputs._input_file)
SHOWN_PATHS: dict[str, str] = {}


@contextmanager
def _clean_errors() -> Iterator[None]:
    try:
        yield
    except ParameterError as e:
        message = str(e)
        for path, name in SHOWN_PATHS.items():
            message = message.replace(path, name)
        _say(f"error: {message}", stderr=True)
        raise typer.Exit(EXIT_BAD_INPUT) from None


def _check_output(output: Path | None, *inputs: Path | None) -> None:
    """Before any work: --output must not be one of the inputs (its writability is checked as the command line is
    read, :func:`check_path`)."""
    if output is not None and any(i is not None and same_file(output, i) for i in inputs):
        raise ParameterError("output", "a file other than the inputs", str(output))


def same_file(a: Path, b: Path) -> bool:
    """Whether ``a`` and ``b`` are one file: by another path, through symbolic or hard links, /dev/stdin or
    /proc/self/fd (False when either does not exist)."""
    try:
        return os.path.samefile(a, b)
    except (OSError, ValueError):
        return False


# The kinds of path an option takes, and what each must be before any work (check_path)
PATH_KINDS = {"file": "an existing file", "folder": "an existing folder", "output": "a file to write",
              "new-folder": "a folder (created if missing)", "path": "a file in an existing folder"}


def check_path(field: str, path: Path, kind: str) -> Path:
    """``path`` as the option ``field`` takes it (a :data:`PATH_KINDS` kind), or one line saying why not, before
    the command does any work: a file or folder to read exists and is one; a file to write, or a folder to create
    (with its parents), can be: the folder that would hold it is written to and cleaned at once (a test of
    permission bits says yes to root, and to /proc)."""
    import stat
    import tempfile

    accepted = PATH_KINDS[kind]

    def refuse(why: str, what: str = accepted) -> ParameterError:
        return ParameterError(field, what, f"{path} ({why})")

    def status(p: Path) -> os.stat_result | OSError:
        try:
            return os.stat(p)
        except (OSError, ValueError) as err:  # ValueError: a NUL byte in the path
            return err if isinstance(err, OSError) else OSError(0, "not a path")

    found = status(path)
    exists = not isinstance(found, OSError)
    is_folder = exists and stat.S_ISDIR(found.st_mode)
    if kind in ("file", "folder"):
        if not exists:
            raise refuse(found.strerror or "not found")
        if is_folder != (kind == "folder"):
            raise refuse("a folder" if is_folder else "a file")
        if not os.access(path, os.R_OK):
            raise refuse("not readable")
        return path
    if kind == "new-folder":
        if exists and not is_folder:
            raise refuse("a file")
        holder, held = path, found
        while isinstance(held, OSError) and holder != holder.parent:
            holder = holder.parent  # the nearest folder that exists; the missing ones below it are created
            held = status(holder)
        if isinstance(held, OSError) or not stat.S_ISDIR(held.st_mode):
            raise refuse(f"{holder} is a file" if not isinstance(held, OSError) else held.strerror)
        try:
            os.rmdir(tempfile.mkdtemp(dir=holder, prefix=".privagg-check-"))
        except OSError as err:
            raise refuse(f"cannot create a folder in {holder}: {err.strerror}") from None
        return path
    if is_folder:  # output, path: a file
        raise refuse("a folder", f"{accepted}, not a folder")
    parent = path.parent
    holder = status(parent)
    if isinstance(holder, OSError) or not stat.S_ISDIR(holder.st_mode):
        raise refuse(f"{parent} is not a folder" if not isinstance(holder, OSError) else
                     f"no folder {parent}: {holder.strerror}", "a file in an existing folder")
    if kind == "output":
        try:
            if exists and stat.S_ISREG(found.st_mode):
                open(path, "ab").close()  # appends nothing: the file stays as it is until the report is written
            elif exists:  # a device such as /dev/stdout: opening a pipe to write could wait for a reader
                if not os.access(path, os.W_OK):
                    raise PermissionError(13, "not writable")
            else:
                fd, probe = tempfile.mkstemp(dir=parent, prefix=".privagg-check-")
                os.close(fd)
                os.unlink(probe)
        except OSError as err:
            raise refuse(f"cannot write there: {err.strerror}", "a writable file") from None
    return path


def write_whole(path: Path, text: str) -> None:
    """``text`` as the file ``path``, whole or not at all: written to a temporary file beside it, then renamed over
    it, so a full disk or an interrupt (Ctrl-C, SIGTERM) leaves the file as it was, never half a report. A path to
    a device or a pipe (/dev/stdout) is written as it is; the file keeps its mode (a new one: the umask's)."""
    import stat
    import tempfile

    try:
        found = os.stat(path)
    except FileNotFoundError:
        found = None
    if found is not None and not stat.S_ISREG(found.st_mode):
        path.write_text(text)
        return
    target = Path(os.path.realpath(path))  # through links: the file they point to is replaced, not the link
    mask = os.umask(0)
    os.umask(mask)
    mode = stat.S_IMODE(found.st_mode) if found is not None else 0o666 & ~mask
    fd, temporary = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".partial")
    try:
        with os.fdopen(fd, "w") as out:
            out.write(text)
        os.chmod(temporary, mode)
        os.replace(temporary, target)
    except BaseException:
        os.unlink(temporary)
        raise


def _emit(report_json: dict, as_json: bool, output: Path | None, human: Callable[[], None]) -> None:
    """The report: to --output as JSON, to stdout as JSON (--json) or as the human summary.

    Its warnings also go to stderr, one line each, whatever the format.
    """
    for warning in report_json.get("warnings", ()):
        _say(f"warning: {warning}", stderr=True)
    text = json.dumps(report_json, indent=2) + "\n"
    if output is not None:
        with _clean_errors():
            try:
                write_whole(output, text)
            except OSError as e:
                raise ParameterError("output", "a writable file path", f"{output} ({e.strerror})") from None
    if as_json:
        _print_json(report_json, text)
    else:
        human()


def _print_json(data: Any, text: str | None = None) -> None:
    """``data`` as JSON on stdout: coloured by rich for a person at a terminal; else plain, as ``text`` (default:
    indented, not ASCII-escaped, as rich writes it) and fast (rich takes seconds over thousands of estimates)."""
    if sys.stdout.isatty():
        _console().print_json(data=data)
    else:
        sys.stdout.write(json.dumps(data, indent=2, ensure_ascii=False) + "\n" if text is None else text)


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


def _item_cell(item: Any) -> str:
    """An item in a table (:func:`_printable`), quoted where it starts or ends with a space or is empty, which a
    table cell would hide ("maps " and "maps" read as two rows of one item)."""
    text = _printable(item)
    return repr(text) if text != text.strip() or not text else text


def _printable(item: Any, keep: str = "") -> str:
    """An item as the terminal shows it: control characters (a user's string may hold escape sequences that
    recolour or rewrite the analyst's terminal) as \\x.. escapes, but for those in ``keep``."""
    text = str(item)
    return text if text.isprintable() else "".join(
        c if c.isprintable() or c in keep else f"\\x{ord(c):02x}" if ord(c) < 256 else f"\\u{ord(c):04x}"
        for c in text)


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


def _titled(title: str, report) -> str:
    """A table's title, marked when the report's estimates carry no information at this size (its warning says
    why: protocols.parameters.no_information), or when the groups of a weighted aggregation contradict the
    weighted estimates' assumption."""
    from ..protocols.parameters import no_information

    uninformative = no_information(report.expected_error.standard_error, report.n_users)
    biased = getattr(report, "groups_disagree", None)
    return title + (" -- NO INFORMATION at this size: the standard error exceeds n (see the warning)" if uninformative
                    else "") + (" -- WEIGHTED ESTIMATES BIASED: the groups differ, use the unweighted column (see the "
                                "warning)" if biased else "")


def _estimate_table(title: str, estimates, item_key: str | None) -> None:
    simulated = any(row.true_count is not None for row in estimates)
    weighted = any(row.unweighted is not None for row in estimates)
    columns = [("rank", "right"), ("item", "left"), ("estimate ± stderr", "right"),
               *([("unweighted ± stderr", "right")] if weighted else []),
               *([("true count (--evaluate)", "right")] if simulated else [])]
    rows = []
    for rank, row in enumerate(estimates, 1):
        flag = " (hash collision)" if row.hash_collision else ""
        cells = [str(rank), f"{_item_cell(row.item)}{flag}", f"{row.estimate:.1f} ± {row.stderr:.1f}"]
        cells += [f"{row.unweighted:.1f} ± {row.unweighted_stderr:.1f}"] if weighted else []
        rows.append([*cells, *([str(row.true_count)] if simulated else [])])
    _table(title, columns, rows)
    hashed = sum(isinstance(row.item, str) and row.item.startswith("#") for row in estimates)
    if hashed:
        _say(f"{hashed} items are strings shown by their code (#code), since only public items are named: give "
             "--candidates FILE to name them (privagg estimate fe-hh discovers heavy strings without one); "
             f"--hash-key {item_key} keeps these codes in later runs")


def _profile_line(profile) -> str:
    return "  delta at other epsilons, same noise (hockey-stick bound): " + ", ".join(
        f"eps {p.epsilon:g}: {p.delta:.3g}" for p in profile)


def _say_privacy(privacy, profile, verbose: bool) -> None:
    """One short line, or (--verbose) the full statement and the privacy profile."""
    if verbose:
        _say(privacy.render())
        if profile:  # none where the guarantee composes a user's reports (the profile is of one report's noise)
            _say(_profile_line(profile))
    else:
        _say(privacy.summary() + " (--verbose: the full statement)")


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


def _label(privacy, report: dict) -> str:
    """A release's privacy in a title: computed from its guarantee (:func:`privagg.reports.document_privacy`), and
    "but weak" when its ``report`` warns of it (delta at least 1/n, epsilon above 10:
    :func:`privagg.privacy.description.privacy_warnings`), so that no such title reads plainly private."""
    from ..privacy.description import privacy_warnings

    if not privacy.private:
        return "NOT PRIVATE"
    weak = privacy_warnings(privacy.epsilon, privacy.delta, report["n_users"])
    return "private, but WEAK: see its warnings" if weak else "private"


def _say_release_privacy(privacy, report: dict, prefix: str = "", suffix: str = "") -> None:
    """A served release's guarantee as privagg estimate prints one (its summary), why it is not private, and the
    ``report``'s warnings."""
    _say(f"{prefix}{privacy.summary()}{suffix}")
    if not privacy.private:
        _say(f"  why: {privacy.not_private_reason}")
    for warning in report.get("warnings", ()):
        _say(f"warning: {warning}")
