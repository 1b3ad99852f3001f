"""privagg: private aggregate statistics (frequencies, heavy hitters, vector sums) without a trusted collector.

``import privagg`` loads numpy only; the names below load their modules on
first use (scipy when calibrating, numba when an FE1 analyzer counts,
pyarrow for files). Simulations: :func:`privagg.simulate.simulate`; the
analyzer over partitions, in-process or on Dask: :mod:`privagg.engine`.

    params = privagg.calibrate("fe1", epsilon=1, delta=1e-10, n_users=n, domain_size=2**24, c=1)
    messages = privagg.client(params).randomize(codes)        # on the devices
    analyzer = privagg.analyzer(params, queries=candidates)   # after the shuffler
    table = analyzer.finalize(analyzer.agg_update(analyzer.agg_init(), privagg.shuffle(messages)))
"""

from __future__ import annotations

import importlib
from typing import Any

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
}
__all__ = ["ParameterError", "__version__", *_LAZY]


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'privagg' has no attribute {name!r}")
