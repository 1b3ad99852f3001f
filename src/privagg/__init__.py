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

* ``estimate(frame, protocol, item="col", epsilon=..., delta=..., ...)``: a protocol simulated over a column
  of a pandas or Polars DataFrame (or a Parquet file or dataset), as ``privagg estimate`` over a file: the
  report, with ``to_pandas()``, ``to_polars()`` and ``plot()``.
* ``plan(protocol, epsilon=..., delta=..., n_users=..., max_items=L)``: before any data is read, the expected
  error an item and the guarantees (per report, and the user's composed over his L items) of an estimate with
  ``user=`` and ``max_items=L``.
* ``calibrate(protocol, epsilon=..., delta=..., n_users=..., domain_size=..., ...)``:
  a protocol's frozen parameters; ``REGISTRY`` names the protocols.
* ``load_parameters(json_text)``: parameters saved as JSON (``json.dumps(parameters.to_dict())``).
* ``client(parameters)``: the users' side, ``.randomize(codes)`` -> ``MessageBatch``.
* ``shuffle(batch)``: the shuffler; ``analyzer(parameters, queries=None)``: the
  collector's side (``agg_init``, ``agg_update``, ``merge``, ``finalize``).
* ``ItemEncoder(domain_size)``: items (integers, text) to codes, and back to labels.
* Results: ``FrequencyTable``, ``HeavyHitterList``, ``VectorSum`` (``to_dict()``,
  ``to_pandas()``).
* ``ParameterError``: every refused argument, naming it and its accepted range;
  ``PrivaggWarning``: a result computed but doubted (``finalize`` over far more or
  fewer messages than the users send).
* ``simulate``: whole populations through the protocols (``simulate.simulate``);
  ``engine``: the analyzer over partitions.
"""

from __future__ import annotations

import importlib
from typing import Any

from .errors import ParameterError, PrivaggWarning

__version__ = "0.2.0"

_LAZY = {
    "estimate": "privagg.simulate.frames",
    "plan": "privagg.simulate.users",
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
__all__ = ["ParameterError", "PrivaggWarning", "__version__", *_LAZY, *_SUBMODULES]


def __dir__() -> list[str]:
    """The public API and the module's own dunders, not its helpers (no import is made to list it)."""
    return sorted({*__all__, *(name for name in globals() if name.startswith("__") and name.endswith("__"))})


def __getattr__(name: str) -> Any:
    if name in _SUBMODULES:
        return importlib.import_module(f"{__name__}.{name}")
    if name in _LAZY:  # each checks its arguments where it is defined (errors.checked_arguments)
        value = getattr(importlib.import_module(_LAZY[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'privagg' has no attribute {name!r}")
