"""The one error type for bad input: it names the field and the accepted range; and a local party that did not
start (:class:`StartFailed`)."""

from __future__ import annotations

import re
from typing import Any

import numpy as np

# The one rule for a number a user types (an option, a keyword given as text, a value in a data file):
# ASCII digits with an optional sign, point and exponent. Python's float() and int() would also take
# "1_0" (as 10), " 1 ", "nan", "inf" and digits of other scripts; none of those is a number here.
DECIMAL = r"[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?"
INTEGER = r"[+-]?[0-9]+"
LARGEST = 1e300  # beyond it, doubling or squaring a value overflows to inf
_DECIMAL, _INTEGER = re.compile(DECIMAL), re.compile(INTEGER)
_MOST_DIGITS = 100  # an integer option longer than this is too large for any count, size or seed


class PrivaggWarning(UserWarning):
    """A result the library computed but doubts, said where it is made (Python's ``warnings``: shown once per place,
    ``warnings.simplefilter("error", PrivaggWarning)`` makes it an error): an analyzer's ``finalize`` over far more or
    fewer messages than the users counted on send (a batch given twice, messages lost)."""


class StartFailed(RuntimeError):
    """A party of a local run (``privagg demo-service``'s services) ended before it was ready, or never became
    ready: the command says so in one line, with the service's own last line, and exits 3; not a traceback."""


class ParameterError(ValueError):
    """A parameter or input value outside its accepted range.

    ``str(err)`` is one line, e.g. ``epsilon must be > 0, got -1``; the CLI
    prints it as is and exits with status 2. ``row``: the value's place in a
    sequence the function was given (counted from 0), which the CLI names as
    the place in its input file (:meth:`located`).
    """

    def __init__(self, field: str, accepted: str, got: Any, row: int | None = None) -> None:
        self.field, self.accepted, self.got, self.row = field, accepted, got, row
        shown = "nothing" if got is None else str(got)  # (an option not given: "got None" read as a bug's)
        if not isinstance(got, str) and len(shown) > 200:  # a 400-digit number or a huge list: one readable line
            shown = shown[:100] + f"... ({len(shown)} characters)"
        where = "" if row is None else f" on row {row} (counted from 0)"
        super().__init__(f"{field} must be {accepted}, got {shown}{where}")

    def located(self, where: str) -> "ParameterError":
        """The error of a value in ``row`` of what a function was given, naming instead where that value came from
        (``where``: "line 5 of data.csv", as the file readers name places)."""
        err = ParameterError(self.field, self.accepted, self.got)
        err.args = (f"{err.args[0]} on {where}",)
        return err

    @classmethod
    def required(cls, field: str, why: str) -> "ParameterError":
        """A value that was not given: ``FIELD is required WHY`` (``got`` is None)."""
        err = cls(field, f"given ({why})", None)
        err.args = (f"{field} is required {why}",)
        return err

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else super().__str__()

    def __reduce__(self):
        """Pickled whole, its message as it reads (:meth:`located`, :meth:`required`) and its fields: a demo's worker
        process raises it in the demo's (service/round_demo.py)."""
        return _unpickled, (type(self), self.args), self.__dict__


def _unpickled(cls: type, args: tuple) -> BaseException:
    error = cls.__new__(cls)
    error.args = args
    return error


def _too_large(field: str, shown: str) -> ParameterError:
    return ParameterError(field, f"a number of magnitude at most {LARGEST:g}", f"{shown}, which is too large")


def parse_number(field: str, value: Any, integer: bool = False) -> float | int:
    """A number given by a user, strictly: text must match :data:`DECIMAL` (:data:`INTEGER` with
    ``integer``); booleans are refused; NaN, infinities and magnitudes past :data:`LARGEST` are refused,
    a huge value as too large with what was typed. Numbers (int, float, numpy) are checked the same way."""
    kind = "an integer (ASCII digits, optional sign)" if integer else (
        "a decimal number (ASCII digits, optional sign, point and exponent)")
    if isinstance(value, (bool, np.bool_)) or value is None:
        raise ParameterError(field, kind, f"{value} (a {type(value).__name__})")
    if isinstance(value, str):
        shown = value if len(value) <= 60 else value[:40] + f"... ({len(value)} characters)"
        if not (_INTEGER if integer else _DECIMAL).fullmatch(value):
            raise ParameterError(field, kind, repr(shown) if value.strip() != value or not value else shown)
        if integer:
            if len(value.lstrip("+-")) > _MOST_DIGITS:
                raise ParameterError(field, f"an integer of at most {_MOST_DIGITS} digits",
                                     f"{shown}, which is too large")
            return int(value)
        number = float(value)
        if not np.isfinite(number) or abs(number) > LARGEST:
            raise _too_large(field, shown)
        if number == 0 and any(c in "123456789" for c in value.lower().split("e")[0]):  # 1e-400: below doubles
            raise ParameterError(field, "a number a double can hold (the smallest is about 5e-324)",
                                 f"{shown}, which reads as 0")
        return number
    if isinstance(value, (int, np.integer)):
        return int(value) if integer else _finite(field, value, str(value))
    if isinstance(value, (float, np.floating)) and not integer:
        return _finite(field, value, str(value))
    raise ParameterError(field, kind, f"{value!r} (a {type(value).__name__})")


def _finite(field: str, value: Any, shown: str) -> float:
    try:
        number = float(value)
    except OverflowError:  # an int past a float's range
        raise _too_large(field, shown if len(shown) <= 60 else shown[:40] + f"... ({len(shown)} digits)") from None
    if np.isnan(number):
        raise ParameterError(field, "a number", "nan")
    if np.isinf(number) or abs(number) > LARGEST:
        raise _too_large(field, shown)
    return number


def check_epsilon(epsilon: float, field: str = "epsilon") -> float:
    """epsilon must be a finite number > 0 (given as a number, or as text by the strict rule)."""
    if isinstance(epsilon, (float, np.floating)) and np.isnan(epsilon):
        raise ParameterError(field, "a finite number > 0", epsilon)
    e = parse_number(field, epsilon)
    if not e > 0:
        raise ParameterError(field, "a finite number > 0", epsilon)
    return float(e)


def check_delta(delta: float) -> float:
    """delta must be in the open interval (0, 1)."""
    if delta is None:
        raise ParameterError.required("delta", "for an (epsilon, delta)-DP protocol: a number in (0, 1)")
    d = delta if isinstance(delta, float) else parse_number("delta", delta)
    if not 0 < d < 1:
        raise ParameterError("delta", "in (0, 1)", delta)
    return d


def check_integer(field: str, value: Any, lowest: int, highest: int | None = None) -> int:
    """An integer in [lowest, highest] (no upper end when highest is None). Text is refused: a number typed
    by a user goes through :func:`parse_number` first."""
    accepted = f"an integer >= {lowest}" if highest is None else f"an integer in [{lowest}, {highest}]"
    if isinstance(value, (bool, np.bool_, str, bytes, bytearray)):
        raise ParameterError(field, accepted, f"{value!r} ({kind_of(value)})")
    if isinstance(value, (int, np.integer)):
        v = int(value)
    else:
        try:
            number = float(value)
        except (TypeError, ValueError, OverflowError):
            raise ParameterError(field, accepted, value) from None
        if not number.is_integer():
            raise ParameterError(field, accepted, value)
        v = int(number)
    if v < lowest or (highest is not None and v > highest):
        raise ParameterError(field, accepted, value)
    return v


def check_callable(field: str, value: Any, accepted: str) -> Any:
    """``value`` if it is None or callable (a progress callback); else a ParameterError naming ``field``."""
    if value is not None and not callable(value):
        raise ParameterError(field, accepted, kind_of(value))
    return value


def kind_of(value: Any) -> str:
    """'a str', 'an int', 'a numpy.ndarray': the type of a refused argument, for the ``got`` of an error."""
    name = f"{type(value).__module__}.{type(value).__qualname__}".replace("builtins.", "")
    return f"{'an' if name[0] in 'aeiou' else 'a'} {name}"


def check_instance(field: str, value: Any, types: type | tuple[type, ...], accepted: str) -> Any:
    """``value`` if it is an instance of ``types``; else a ParameterError naming ``field``, ``accepted`` and the
    type that was given (the API's arguments that must be one of privagg's objects, or a container)."""
    if not isinstance(value, types):
        raise ParameterError(field, accepted, kind_of(value))
    return value


def check_sequence(field: str, value: Any, accepted: str) -> Any:
    """``value`` if it is a collection of values (a list, tuple, array, generator...); a single string, bytes, a
    mapping or a scalar is refused, naming ``field`` (iterating it would make one item per character, byte or
    key, silently)."""
    from collections.abc import Iterable, Mapping

    if isinstance(value, (str, bytes, bytearray, Mapping)) or not isinstance(value, Iterable) or (
            isinstance(value, np.ndarray) and value.ndim == 0):
        raise ParameterError(field, accepted, f"{value!r} ({kind_of(value)})" if isinstance(value, (str, bytes))
                             and len(value) <= 40 else kind_of(value))
    return value


# --- the public API's calls: an argument a function does not take is a ParameterError naming it --------------

def checked_arguments(function: Any, types: bool = True) -> Any:
    """``function`` refusing, before it runs, what Python would raise a TypeError for or the function would
    misread: an unknown keyword, one positional argument too many, a required argument left out, one given twice,
    and (``types``) an argument whose annotation names plain classes (``int``, ``float``, ``str``, ``bool``,
    ``bytes``, a privagg class, or a union of them with None) given as something else. Each is a ParameterError
    naming the argument; other annotations (``Any``, arrays, sequences) are the function's own checks."""
    import functools
    import inspect

    signature = inspect.signature(function)
    kinds: dict[str, tuple[tuple[type, ...], str]] | None = None

    @functools.wraps(function)
    def checked(*args: Any, **kwargs: Any) -> Any:
        nonlocal kinds
        try:
            bound = signature.bind(*args, **kwargs)
        except TypeError:
            raise _call_error(function, signature, args, kwargs) from None
        if kinds is None:  # on the first call: the annotations may name classes defined after the function
            kinds = {name: kind for name, kind in (_annotated_kinds(function) if types else {}).items()
                     if signature.parameters[name].kind not in (inspect.Parameter.VAR_POSITIONAL,
                                                                inspect.Parameter.VAR_KEYWORD)}
        for name, value in bound.arguments.items():
            if name in kinds:
                accepted, described = kinds[name]
                if not isinstance(value, accepted) or (isinstance(value, (bool, np.bool_)) and bool not in accepted):
                    raise ParameterError(name, described, f"{_shown(value)} ({kind_of(value)})"
                                         if isinstance(value, (str, int, float)) else kind_of(value))
        return function(*args, **kwargs)

    return checked


def checked_methods(cls: type) -> type:
    """``cls`` with :func:`checked_arguments` on its constructor and public methods (class and static ones too)."""
    import inspect

    for name, member in list(vars(cls).items()):
        if name.startswith("_") and name != "__init__":
            continue
        if isinstance(member, (classmethod, staticmethod)):
            setattr(cls, name, type(member)(checked_arguments(member.__func__)))
        elif inspect.isfunction(member):
            setattr(cls, name, checked_arguments(member))
    return cls


# annotations as classes and words: a number's whole or fractional kind is the function's own check
_REAL = (int, float, np.integer, np.floating)
_PLAIN = {int: (_REAL, "an integer"), float: (_REAL, "a number"), bool: ((bool, np.bool_), "True or False"),
          str: ((str,), "a string"), bytes: ((bytes, bytearray, memoryview), "bytes"),
          type(None): ((type(None),), "None")}


def _annotated_kinds(function: Any) -> dict[str, tuple[tuple[type, ...], str]]:
    """(classes, words) each argument's annotation admits, for the arguments annotated with plain classes only."""
    import typing

    try:
        hints = typing.get_type_hints(function)
    except Exception:  # an annotation that does not resolve: the function checks for itself
        return {}
    kinds = {name: _classes(hint) for name, hint in hints.items() if name != "return"}
    return {name: kind for name, kind in kinds.items() if kind is not None}


def _classes(hint: Any) -> tuple[tuple[type, ...], str] | None:
    import types
    import typing

    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        parts = [_classes(part) for part in typing.get_args(hint)]
        if any(part is None for part in parts):
            return None
        return tuple(k for classes, _ in parts for k in classes), " or ".join(words for _, words in parts)
    if hint in _PLAIN:
        return _PLAIN[hint]
    if isinstance(hint, type) and hint not in (object, typing.Any) and typing.get_origin(hint) is None and \
            not hint.__module__.startswith("numpy"):
        return (hint,), f"a {hint.__name__}"
    return None


def _call_error(function: Any, signature: Any, args: tuple, kwargs: dict) -> ParameterError:
    """What is wrong with calling ``function`` with ``args`` and ``kwargs``, which its ``signature`` refused."""
    import inspect

    kind = inspect.Parameter
    parameters = signature.parameters
    own = [p for p in parameters if p not in ("self", "cls")]
    owner = (type(args[0]).__name__ if "self" in parameters else args[0].__name__) if len(own) < len(parameters) \
        and args else None  # the class the method was called on, not the base that defines it
    name = (f"{owner}.{function.__name__}" if owner else function.__qualname__).replace(".__init__", "") + "()"
    stars = {kind.VAR_POSITIONAL: "*", kind.VAR_KEYWORD: "**"}
    takes = f"{name} takes {', '.join(stars.get(parameters[p].kind, '') + p for p in own) or 'no arguments'}"
    by_position = [p for p, v in parameters.items() if v.kind in (kind.POSITIONAL_ONLY, kind.POSITIONAL_OR_KEYWORD)]
    named = any(v.kind is kind.VAR_KEYWORD for v in parameters.values())
    for key, value in kwargs.items():
        if key not in parameters or parameters[key].kind is kind.POSITIONAL_ONLY:
            if not named:
                return ParameterError(key, f"left out ({takes})", _shown(value))
        elif key in by_position[:len(args)]:
            return ParameterError(key, "given once", "a value by position and another by name")
    if len(args) > len(by_position) and not any(v.kind is kind.VAR_POSITIONAL for v in parameters.values()):
        skip = len(parameters) - len(own)  # self or cls
        return ParameterError("arguments", f"at most {len(by_position) - skip} given by position ({takes}; "
                              "the others by name)", f"{len(args) - skip}")
    given = set(by_position[:len(args)]) | set(kwargs)
    missing = next((p for p, v in parameters.items() if v.default is v.empty and p not in given
                    and v.kind not in (kind.VAR_POSITIONAL, kind.VAR_KEYWORD)), None)
    if missing is not None:
        return ParameterError.required(missing, f"by {name}")
    return ParameterError("arguments", f"those {takes}", "others")


def _shown(value: Any) -> str:
    shown = repr(value)
    return shown if len(shown) <= 60 else kind_of(value)
