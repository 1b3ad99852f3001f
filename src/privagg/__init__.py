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

import numpy as _np

from .errors import ParameterError
from .errors import kind_of as _kind_of

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


def _check_batch(batch: Any, rng: Any = None, /, *_: Any, **__: Any) -> None:
    from .core.messages import check_batch

    check_batch(batch, "batch")


def _check_parameters(parameters: Any = None, /, *_: Any, **__: Any) -> None:
    from .protocols.parameters import check_parameters

    check_parameters(parameters)


def _check_calibrate(protocol: Any = None, /, *_: Any, **named: Any) -> None:
    """The keywords' types: numbers where the protocol takes numbers, text where it takes text (None: the
    default); their ranges are the protocol's own checks."""
    from numbers import Real

    from .protocols.registry import REGISTRY

    if not isinstance(protocol, str):
        raise ParameterError("protocol", "a protocol's name, a string such as 'fe1' (privagg.REGISTRY lists them)",
                             _kind_of(protocol))
    entry = REGISTRY.get(protocol)
    kinds = {"epsilon": float, "delta": float, "n_users": int, "domain_size": int, "calibration": str,
             **({o.name: o.type for o in entry.options} if entry is not None else {})}
    for field, kind in kinds.items():
        value = named.get(field)
        if value is None:
            continue
        if kind is str and not isinstance(value, str):
            raise ParameterError(field, "a string", f"{value!r} ({_kind_of(value)})")
        if kind is not str and (isinstance(value, (bool, _np.bool_)) or not isinstance(value, Real)):
            raise ParameterError(field, "an integer" if kind is int else "a number",
                                 f"{value!r} ({_kind_of(value)})" if len(repr(value)) <= 60 else _kind_of(value))


def _check_json(data: Any = None, /, *_: Any, **__: Any) -> None:
    if not isinstance(data, (str, bytes, bytearray, dict)):
        hint = " (read the file first: load_parameters(path.read_text()))" if hasattr(data, "__fspath__") else ""
        raise ParameterError("data", f"the parameters' JSON text, bytes or dict{hint}", _kind_of(data))
    if isinstance(data, dict) and not isinstance(data.get("protocol", ""), str):
        raise ParameterError("parameters.protocol", "a protocol's name (a string)", _kind_of(data["protocol"]))


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
