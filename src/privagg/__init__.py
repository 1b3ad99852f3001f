"""privagg: private aggregate statistics (frequencies, heavy hitters, vector sums) without a trusted collector.

``import privagg`` loads numpy only; the names below load their modules on
first use (scipy when calibrating, numba when an FE1 analyzer counts,
pyarrow for files). Simulations: :func:`privagg.simulate.simulate`; the
analyzer over partitions, in-process or on Dask: :mod:`privagg.engine`.

    params = privagg.calibrate("fe1", epsilon=1, delta=1e-10, n_users=n, domain_size=2**24, c=1)
    messages = privagg.client(params).randomize(codes)        # on the devices
    analyzer = privagg.analyzer(params, queries=candidates)   # after the shuffler
    table = analyzer.finalize(analyzer.agg_update(analyzer.agg_init(), privagg.shuffle(messages)))
    table.to_dict()                                           # {item: {"estimate": ..., "stderr": ...}}

The API (``dir(privagg)`` lists it):

* ``calibrate(protocol, epsilon=..., delta=..., n_users=..., domain_size=..., ...)``:
  a protocol's frozen parameters; ``REGISTRY`` names the protocols.
* ``load_parameters(json_text)``: parameters saved as JSON (``json.dumps(parameters.to_dict())``).
* ``client(parameters)``: the users' side, ``.randomize(codes)`` -> ``MessageBatch``.
* ``shuffle(batch)``: the shuffler; ``analyzer(parameters, queries=None)``: the
  collector's side (``agg_init``, ``agg_update``, ``merge``, ``finalize``).
* ``ItemEncoder(domain_size)``: items (integers, text) to codes, and back to labels.
* Results: ``FrequencyTable``, ``HeavyHitterList``, ``VectorSum`` (``to_dict()``,
  ``to_pandas()``).
* ``ParameterError``: every refused argument, naming it and its accepted range.
* ``simulate``: whole populations through the protocols (``simulate.simulate``);
  ``engine``: the analyzer over partitions.
"""

from __future__ import annotations

import functools
import importlib
import inspect
from typing import Any, Callable

from .errors import ParameterError

__version__ = "0.2.0"

_LAZY = {
    "calibrate": "privagg.protocols.registry",
    "load_parameters": "privagg.protocols.registry",
    "client": "privagg.protocols.registry",
    "analyzer": "privagg.protocols.registry",
    "REGISTRY": "privagg.protocols.registry",
    "shuffle": "privagg.core.messages",
    "MessageBatch": "privagg.core.messages",
    "ItemEncoder": "privagg.core.encoding",
    "FrequencyTable": "privagg.protocols.results",
    "HeavyHitterList": "privagg.protocols.results",
    "VectorSum": "privagg.protocols.results",
}
_SUBMODULES = ("simulate", "engine")  # imported on first use, like the names above
__all__ = ["ParameterError", "__version__", *_LAZY, *_SUBMODULES]


def __dir__() -> list[str]:
    """The public API and the module's own dunders, not its helpers (no import is made to list it)."""
    return sorted({*__all__, *(name for name in globals() if name.startswith("__") and name.endswith("__"))})


def __getattr__(name: str) -> Any:
    if name in _SUBMODULES:
        return importlib.import_module(f"{__name__}.{name}")
    if name in _LAZY:
        value = getattr(importlib.import_module(_LAZY[name]), name)
        if name in _CHECKS:  # the top-level function checks its arguments' types, naming the one that is wrong
            value = _checked(value, _CHECKS[name])
        globals()[name] = value
        return value
    raise AttributeError(f"module 'privagg' has no attribute {name!r}")


def _kind(value: Any) -> str:
    name = f"{type(value).__module__}.{type(value).__qualname__}".replace("builtins.", "")
    return f"{'an' if name[0] in 'aeiou' else 'a'} {name}"


def _check_batch(batch: Any, rng: Any = None, /, *_: Any, **__: Any) -> None:
    from .core.messages import MessageBatch

    if not isinstance(batch, MessageBatch):
        raise ParameterError("batch", "a privagg.MessageBatch (the clients' messages: privagg.client(params)"
                             ".randomize(codes))", _kind(batch))


def _check_parameters(parameters: Any = None, /, *_: Any, **__: Any) -> None:
    from .protocols.parameters import FrozenParameters

    if not isinstance(parameters, FrozenParameters):
        raise ParameterError("parameters", "a protocol's frozen parameters (privagg.calibrate(...) or "
                             "privagg.load_parameters(json_text))", _kind(parameters))


def _check_calibrate(protocol: Any = None, /, *_: Any, **named: Any) -> None:
    from numbers import Real

    if not isinstance(protocol, str):
        raise ParameterError("protocol", "a protocol's name, a string such as 'fe1' (privagg.REGISTRY lists them)",
                             _kind(protocol))
    for field in ("epsilon", "delta"):
        value = named.get(field, 0.0)
        if isinstance(value, bool) or not isinstance(value, Real):
            raise ParameterError(field, "a number", f"{value!r} ({_kind(value)})")


def _check_json(data: Any = None, /, *_: Any, **__: Any) -> None:
    if not isinstance(data, (str, bytes, bytearray, dict)):
        hint = " (read the file first: load_parameters(path.read_text()))" if hasattr(data, "__fspath__") else ""
        raise ParameterError("data", f"the parameters' JSON text, bytes or dict{hint}", _kind(data))


_CHECKS = {"shuffle": _check_batch, "client": _check_parameters, "analyzer": _check_parameters,
           "calibrate": _check_calibrate, "load_parameters": _check_json}


def _checked(function: Callable[..., Any], check: Callable[..., None]) -> Callable[..., Any]:
    @functools.wraps(function)
    def checked(*args: Any, **kwargs: Any) -> Any:
        positional = list(args)
        first = next(iter(inspect.signature(function).parameters))
        if not positional and first in kwargs:  # the first argument given by name
            positional = [kwargs[first]]
        check(*positional[:1] or [None], **{k: v for k, v in kwargs.items() if k != first})
        return function(*args, **kwargs)

    return checked
