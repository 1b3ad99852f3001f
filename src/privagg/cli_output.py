"""What every ``privagg`` command shares for its output: the console, one-line errors, the report's JSON or
human form. (Its own module so that the service commands, service_cli.py, use it without importing cli.py.)"""

from __future__ import annotations

import json
import os
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Iterator

import typer

from .errors import ParameterError


# every privagg command's exit status; a crash is never 1, so a script can tell "violated" from "broken"
EXIT_VIOLATION, EXIT_BAD_INPUT, EXIT_START_FAILED, EXIT_INTERNAL, EXIT_INTERRUPTED = 1, 2, 3, 4, 130
EXIT_STATUS = ("Exit status: 0 done; 1 an audit found a violation; 2 bad input or usage (one line: error: ...); "
               "3 a service could not start (one line says why); 4 an internal error, a bug (a traceback follows: "
               "please report it with the command line); 130 interrupted.")
PIPE_WIDTH = 1_000  # a table's width when the output is a pipe or a file: its content's, not cut at 80 columns


def _console(stderr: bool = False):
    """Rich's console: long lines stay whole; piped or written to a file, tables take their content's width
    (whatever COLUMNS says: a pipe has no width to fit)."""
    import sys

    from rich.console import Console

    stream = sys.stderr if stderr else sys.stdout
    return Console(stderr=stderr, soft_wrap=True, width=None if stream.isatty() else PIPE_WIDTH)


def _say(text: str, stderr: bool = False) -> None:
    """One line (or several) as written: no rich markup, no highlighting; on stderr for errors and warnings."""
    _console(stderr).print(text, markup=False, highlight=False)


@contextmanager
def _clean_errors() -> Iterator[None]:
    try:
        yield
    except ParameterError as e:
        _say(f"error: {e}", stderr=True)
        raise typer.Exit(EXIT_BAD_INPUT) from None


def _check_output(output: Path | None, *inputs: Path | None) -> None:
    """Before any work: --output must be a writable file that is not one of the inputs."""
    if output is None:
        return
    if any(i is not None and i.exists() and output.exists() and output.samefile(i) for i in inputs):
        raise ParameterError("output", "a file other than the inputs", str(output))
    parent = output.parent if str(output.parent) else Path(".")
    if output.is_dir() or not parent.is_dir() or not os.access(parent, os.W_OK) or (
            output.exists() and not os.access(output, os.W_OK)):
        raise ParameterError("output", "a writable file path", str(output))


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
                output.write_text(text)
            except OSError as e:
                raise ParameterError("output", "a writable file path", f"{output} ({e.strerror})") from None
    if as_json:
        import sys

        if sys.stdout.isatty():
            _console().print_json(data=report_json)  # coloured for a person
        else:  # for a program: plain, and fast (rich takes seconds over thousands of estimates)
            sys.stdout.write(text)
    else:
        human()
