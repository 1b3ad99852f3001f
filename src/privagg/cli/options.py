"""What the commands' options share: the protocol options generated from a registry entry, the strict parsing of
numbers, the check of every path option before any work, the protocol commands' allocator settings, and the
command groups and choices made from the protocol registry only when a command line needs them."""

from __future__ import annotations

import inspect
import sys
from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterator, Optional

import typer

from ..errors import ParameterError
from ..protocols.kinds import Family, ResultKind
from .output import _clean_errors

if TYPE_CHECKING:
    from ..protocols.registry import ProtocolEntry


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
    from ..errors import parse_number

    def parse(value: Any) -> Any:
        try:
            return parse_number(field, value, integer=integer)
        except ParameterError as err:
            raise _NumberError(str(err)) from None

    return parse


def _plain_conversions(command: Any) -> Any:
    """``command`` (a click command or group, made by typer) with its options converted without pydantic where typer
    would convert them through it, to the same values and errors.

    typer 0.2x converts every option's value through a pydantic TypeAdapter made for it (typer._coercion): pydantic's
    imports and schemas, about 0.15 s of every command. privagg's options are of a few plain kinds that typer's own
    functions convert: a number read by the option's parser (:func:`_strict_numbers`), a string, a flag, a path, an
    Enum's choice. Each such option gets a conversion doing what typer's adapter does without it; any value it does not
    take (a path that is not its own normal form, a choice not listed, a number refused) goes to typer's own
    conversion, whose value or message stands. Other kinds, and a typer without this layer (one converting with
    click's types, which needs no pydantic), are left as typer made them."""
    try:
        from typer._coercion import RuntimeParam, build_runtime_param
        from typer._param_types import coerce_cli_choice, coerce_cli_path
    except ImportError:
        return command
    if not hasattr(RuntimeParam, "_coerce_value"):
        return command

    @dataclass(frozen=True)
    class Plain(RuntimeParam):  # type: ignore[misc, valid-type]
        convert: Callable[[Any, Any, Any], Any]

        def _coerce_value(self, value: Any, param: Any, ctx: Any) -> Any:
            try:
                return self.convert(value, param, ctx)
            except _NumberError:  # an option's parser refused it: typer's adapter passes the error on as it is
                raise
            except Exception:  # typer's own conversion: its value, or its message
                return build_runtime_param(param.type_descriptor)._coerce_value(value, param=param, ctx=ctx)

    def plain(descriptor: Any) -> Callable[[Any, Any, Any], Any] | None:
        kind, info = descriptor.annotation, descriptor.parameter_info
        if info.parser is not None:
            return lambda value, param, ctx: info.parser(value)
        if kind in (str, bool):  # a flag's value is a bool already (its default None stays None)
            return lambda value, param, ctx: value if isinstance(value, kind) else _not_plain()
        if isinstance(kind, type) and issubclass(kind, Path) and descriptor.is_path and info.path_type is None:
            def path(value: Any, param: Any, ctx: Any) -> Any:
                if not isinstance(value, str) or str(kind(value)) != value:
                    _not_plain()
                return coerce_cli_path(kind(value), info, path_type=kind, param=param, ctx=ctx)
            return path
        if isinstance(kind, type) and issubclass(kind, Enum):
            return lambda value, param, ctx: coerce_cli_choice(value, choices=list(kind),
                                                               case_sensitive=info.case_sensitive, ctx=ctx)
        return None

    def convert_plainly(param: Any) -> Any:
        descriptor = getattr(param, "type_descriptor", None)
        if descriptor is not None and getattr(param, "_runtime_param", False) is None:
            convert = plain(descriptor)
            if convert is not None:
                param._runtime_param = Plain(parameter_info=descriptor.parameter_info,
                                             annotation=descriptor.annotation, convert=convert)
        return param

    def each(command: Any) -> None:
        for param in command.params:
            convert_plainly(param)
        help_option = command.get_help_option  # made when a command line is read (--help)
        command.get_help_option = lambda ctx: convert_plainly(help_option(ctx))
        for sub in getattr(command, "commands", {}).values():
            each(sub)

    each(command)
    return command


def _not_plain() -> Any:
    raise ValueError("not a plain value")


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


# What each path option takes (output.PATH_KINDS), by its field: a path option not listed here stops the
# import (_checked_paths), so that none is read unchecked
PATH_OPTIONS = {
    **dict.fromkeys(("input", "candidates", "params", "config", "tls-cert", "tls-key", "analyzer-ca", "second-ca",
                     "kek-file", "tokens", "second-task", "organisation-key"), "file"),
    "messages": "folder", "output": "output", "relay-token-file": "path",
    **dict.fromkeys(("out", "workdir", "write-messages", "partition-root", "folder"), "new-folder"),
}


def _checked_paths(typer_app: typer.Typer) -> None:
    """Check every path option of every command as the command line is read, before any work
    (:func:`privagg.cli.output.check_path`): one line and exit status 2 where it cannot be what the option takes."""
    for field, option, kind in _options(typer_app):
        if kind is not Path or getattr(option.callback, "checks_path", False):
            continue
        if field not in PATH_OPTIONS:
            raise RuntimeError(f"--{field}: a path option without its kind in cli.options.PATH_OPTIONS")
        option.callback = _path_check(field, PATH_OPTIONS[field], option.callback)


def _path_check(field: str, kind: str, then: Callable[[Any], Any] | None) -> Callable[[Any], Any]:
    """An option's callback: :func:`privagg.cli.output.check_path`, then the option's own callback (``then``)."""
    from .output import check_path

    def check(value: Any) -> Any:
        if value is not None and not (getattr(then, "reads_stdin", False) and str(value) == "-"):  # -: standard input
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


def _hashes_items(entry) -> bool:
    """Whether the protocol's parameters carry an item-hash key (integer or string items counted in a table; not
    categories, vectors or fe-hh's prefixes), which ``--hash-key`` sets."""
    return not entry.categorical and entry.result is ResultKind.FREQUENCY_TABLE


def _hash_key_option(entry, help: str) -> list[inspect.Parameter]:
    """``--hash-key``, for the commands of a protocol that hashes items (:func:`_hashes_items`); none elsewhere."""
    return [_param("hash_key", Optional[str], typer.Option(None, "--hash-key", help=help))] if _hashes_items(
        entry) else []


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


class Mode(str, Enum):
    faithful = "faithful"
    fast = "fast"


ItemTypeChoice = _choice("ItemTypeChoice", ("auto", "int", "str"))


MissingChoice = _choice("MissingChoice", ("error", "drop"))


class ProtocolCommands(typer.Typer):
    """A command group with one command per implemented protocol (``register(entry)`` adds an entry's), made from
    the protocol registry when its commands are first read: by typer when the group runs or lists them, not when
    the command line loads, so that neither ``privagg --help`` nor the other commands import the registry. Their
    options get their strict numbers and path checks where a command is made (``privagg.cli._ready``): the one a
    command line names, or all of them in ``privagg.cli.app``."""

    def __init__(self, register: Callable[[ProtocolEntry], None], help: str) -> None:
        self._register, self._made = register, False
        super().__init__(no_args_is_help=True, rich_markup_mode=None, help=help)

    @property
    def registered_commands(self) -> list:
        if not self._made:
            from ..protocols.registry import ENTRIES

            self._made = True
            for entry in ENTRIES:
                if entry.implemented:
                    self._register(entry)
        return self._commands

    @registered_commands.setter
    def registered_commands(self, commands: list) -> None:
        self._commands = commands


# The protocol arguments' choices (``options.Protocol`` in a command's signature), by the registry entries they
# take: analyze reads the messages of the protocols with a client; demo-service runs those with a demo.
_REGISTRY_CHOICES: dict[str, Callable[[ProtocolEntry], bool]] = {
    "Protocol": lambda entry: entry.served,
    "DemoProtocol": lambda entry: bool(entry.demo),
}


def __getattr__(name: str) -> type[Enum]:
    """A protocol argument's choices, made from the registry when typer first reads the command's signature (the
    command line then runs that command): not when the command line loads."""
    if name not in _REGISTRY_CHOICES:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    from ..protocols.registry import names

    choices = globals()[name] = _choice(name, tuple(names(_REGISTRY_CHOICES[name])))
    return choices
