"""The ``privagg`` command line (typer), one module per command group; the commands of ``calibrate``,
``estimate`` and ``audit`` are generated from the protocol registry, one per implemented protocol with the
protocol's own options (:attr:`ProtocolEntry.options`) and calibrations.

* :mod:`.catalog`: protocols, schema, example-data; :mod:`.calibrate`: calibrate, audit, account;
  :mod:`.estimate`: estimate; :mod:`.evaluation`: compare, reproduce; :mod:`.analyze`: analyze.
* The services, by who runs the command: :mod:`.servers` (serve, db, keys), :mod:`.tasks` (task, tokens),
  :mod:`.clients` (submit, loadgen, result), :mod:`.demo` (demo-service).
* What they share: :mod:`.output` (the console, one-line errors, exit statuses, JSON or human reports),
  :mod:`.options` (generated and checked options), :mod:`.inputs` (reading the users' data).

Every bad input ends with exit status 2 and one line on stderr naming the parameter and its accepted range
(``error: epsilon must be ...``).

:func:`main` (the ``privagg`` entry point) makes only the command its command line names: ``privagg --help``
lists the commands by their help alone, the protocol registry loads only for a command whose options or choices
come from it, and heavy modules (scipy, numba, pyarrow, dask, rich, FastAPI, SQLAlchemy, httpx) load inside the
commands that use them. ``app`` (``from privagg.cli import app``: typer's test runner) is the whole command line,
every command made.
"""

from __future__ import annotations

import copy
import errno
import gc
import inspect
import sys
import traceback
import warnings
from typing import Any, Callable

try:
    import typer
except ImportError:  # the light install has no command line
    raise SystemExit("privagg's command line needs the cli extra: pip install 'privagg[cli]'") from None

from typer.core import TyperCommand, TyperGroup
from typer.main import get_command_from_info, get_command_name, get_group, get_group_from_info, \
    solve_typer_info_defaults

from .. import __version__
from ..errors import PrivaggWarning, StartFailed
from . import analyze, calibrate, catalog, clients, demo, estimate, evaluation, servers, tasks
from .options import _checked_paths, _plain_conversions, _strict_numbers
from .output import EXIT_BAD_INPUT, EXIT_INTERNAL, EXIT_INTERRUPTED, EXIT_START_FAILED, EXIT_STATUS, _say

# Plain (click) help rather than rich's panels: rendering them would load about 70 ms of rich modules,
# a third of the time `privagg --help` takes.
_app = typer.Typer(add_completion=False, no_args_is_help=True, pretty_exceptions_enable=False,
                   rich_markup_mode=None, help="Private aggregate statistics without a trusted collector.",
                   epilog=EXIT_STATUS)
for _name, _command in (("protocols", catalog.protocols), ("example-data", catalog.example_data),
                        ("schema", catalog.schema), ("compare", evaluation.compare_command),
                        ("analyze", analyze.analyze), ("serve", servers.serve), ("submit", clients.submit),
                        ("loadgen", clients.loadgen), ("result", clients.result),
                        ("demo-service", demo.demo_service)):
    _app.command(_name)(_command)
for _name, _group in (("calibrate", calibrate.calibrate_app), ("estimate", estimate.estimate_app),
                      ("audit", calibrate.audit_app), ("account", calibrate.account_app),
                      ("reproduce", evaluation.reproduce_app), ("task", tasks.task_app),
                      ("tokens", tasks.tokens_app), ("organisation", tasks.organisation_app),
                      ("roster", tasks.roster_app), ("budget", tasks.budget_app), ("keys", servers.keys_app),
                      ("db", servers.db_app)):
    _app.add_typer(_group, name=_name)


def _version(value: bool) -> None:
    if value:
        _say(f"privagg {__version__}")
        raise typer.Exit()


@_app.callback()
def _main(version: bool = typer.Option(False, "--version", callback=_version, is_eager=True,
                                       help="Print the version and exit.")) -> None:
    """Private aggregate statistics without a trusted collector."""


def _ready(commands: typer.Typer) -> typer.Typer:
    """``commands`` (a Typer, its groups included) with every int and float option parsed strictly and every path
    option checked as the command line is read (:mod:`.options`): before typer makes them. It reads the commands'
    types, which for the protocol commands and choices loads the registry."""
    _strict_numbers(commands)
    _checked_paths(commands)
    return commands


def __getattr__(name: str) -> Any:
    if name != "app":
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    globals()["app"] = _ready(_app)  # every command, once
    return _app


class _Deferred(TyperCommand):
    """A command of the root group as :func:`main` holds it until the command line names it: its name and help,
    which ``privagg --help`` lists, and ``make``, which makes the command itself."""

    def __init__(self, name: str, help: str | None, short_help: str | None, hidden: bool,
                 make: Callable[[], Any]) -> None:
        super().__init__(name, help=help, short_help=short_help, hidden=hidden)
        self._make = make

    def make_context(self, info_name: str | None, args: list[str], parent: Any = None, **extra: Any) -> Any:
        return self._make().make_context(info_name, args, parent=parent, **extra)


def _command_line() -> TyperGroup:
    """The root group :func:`main` runs: typer's, with each command deferred (:class:`_Deferred`), and each group's
    commands deferred in turn when the group is named: ``privagg estimate fe1`` makes fe1's command alone, not the
    twenty of ``estimate`` (each one's options read, checked and converted by typer: 0.05 to 0.1 s of every protocol
    command on a 2-core Xeon)."""
    settings = dict(pretty_exceptions_short=_app.pretty_exceptions_short, rich_markup_mode=_app.rich_markup_mode)

    def command(info) -> Any:
        alone = typer.Typer()
        alone.registered_commands.append(info)
        _ready(alone)
        return _plain_conversions(get_command_from_info(info, **settings))

    def group(info) -> Any:
        commands = info.typer_instance.registered_commands  # a protocol group's are made from the registry here
        named = copy.copy(info)
        named.typer_instance = _bare(info.typer_instance)
        made = get_group_from_info(named, suggest_commands=_app.suggest_commands, **settings)
        return deferred(_plain_conversions(made), commands, [])

    def deferred(made: TyperGroup, commands: list, groups: list) -> TyperGroup:
        for info in commands:
            name = info.name or get_command_name(info.callback.__name__)
            text = inspect.getdoc(info.callback) if info.help is None else inspect.cleandoc(info.help)
            made.commands[name] = _Deferred(name, text, info.short_help, info.hidden, lambda info=info: command(info))
        for info in groups:
            solved = solve_typer_info_defaults(info)
            made.commands[solved.name] = _Deferred(solved.name, solved.help, solved.short_help, solved.hidden,
                                                   lambda info=info: group(info))
        return made

    return deferred(_plain_conversions(get_group(_bare(_app))), _app.registered_commands, _app.registered_groups)


def _bare(commands: typer.Typer) -> typer.Typer:
    """A copy of ``commands`` without its commands and groups: the group alone (its name, help and settings)."""
    bare = copy.copy(commands)
    bare.registered_commands, bare.registered_groups = [], []
    return bare


WRITE_FAILURES = (errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EIO)  # what a write may meet that is no bug


def _refused_by_the_database(e: Exception) -> str:
    """The database's own refusal of this process's role (PostgreSQL's permission denied, SQLite's read-only file), in
    one line, when ``e`` is one; else "" (a reviewer's finding: a role without privileges made db upgrade, task create
    and budget set end in "a bug in privagg" with a traceback quoting the statement's parameters)."""
    cause = getattr(e, "orig", None)
    if not any(cls.__name__ == "SQLAlchemyError" for cls in type(e).__mro__) or cause is None:
        return ""
    first = (str(cause).strip().splitlines() or [""])[0]
    if type(cause).__name__ == "InsufficientPrivilege" or "readonly database" in first:
        return f"a refusal: {first}"
    return ""


def main() -> None:
    """The ``privagg`` entry point: command-line usage errors too end in one line and status 2."""
    try:
        # an analyzer's doubts about the messages it counted (a PrivaggWarning) are the reports' warnings and caveats
        warnings.filterwarnings("ignore", category=PrivaggWarning)
        command = _command_line()
        # what the command line imported lives until exit: the collections the command's own objects trigger (numba's
        # typing context is some 10^5 of them) skip it (a full collection 0.05 s of FE1's whole process)
        gc.freeze()
        status = command(standalone_mode=False)
        gc.freeze()  # exiting: the interpreter's last collections skip the heap (0.05 s with scipy loaded)
        sys.exit(status)
    except (typer.Abort, KeyboardInterrupt):
        import signal

        signal.signal(signal.SIGTERM, signal.SIG_IGN)  # exiting: a later SIGTERM must not end the exit itself
        sys.exit(EXIT_INTERRUPTED)
    except Exception as e:
        if isinstance(e, OSError) and e.errno in WRITE_FAILURES:
            # standard output on a full disk (> /dev/full), a quota, a device error: the environment's, not a bug
            _say(f"error: the output could not be written ({e.strerror})", stderr=True)
            sys.exit(EXIT_BAD_INPUT)
        if isinstance(e, StartFailed):
            _say(f"error: {e}", stderr=True)
            sys.exit(EXIT_START_FAILED)
        refused = _refused_by_the_database(e)
        if refused:
            _say(f"error: db must be a database this command's role may create tables in and write, got {refused}",
                 stderr=True)
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
