"""Typed results of the analyzers, with their queries.

Each result carries the frozen parameters it was computed under (so it
knows its privacy description and its error theory), how many messages
went into it and how many were dropped as malformed, and, where the analyzer
was told, how many users' reports it counted (``reporters``: its errors are
those of m users' noise; None: the calibrated n).

* :class:`FrequencyTable` -- frequency estimates over the whole domain or
  over a set of queried items (candidates): ``estimate(items)``,
  ``estimate_all()``, ``standard_error(items)``, ``top_k(k)``.
* :class:`HeavyHitterList` -- items reported as heavy with their estimates.
* :class:`VectorSum` -- a sum of users' vectors with per-coordinate errors.

``top_k`` uses partial selection (:mod:`privagg.core.selection`, O(B)), then
sorts only the k selected.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from ..core.selection import kth_largest
from ..errors import ParameterError, check_integer, checked_methods, kind_of
from .parameters import REPORTERS_MAX, check_parameters

MAX_ERROR_BETA = 0.05  # failure probability of the reported max-error bounds (every family's)


def top_k(codes: np.ndarray | None, estimates: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """The k (code, estimate) pairs with the largest estimates, largest first; ties: smaller code first.

    ``codes=None`` means the codes are the positions 0, 1, ... (a full domain,
    without materialising it). Partial selection (:func:`~privagg.core.selection.kth_largest`, O(len))
    finds the k-th largest value; the estimates above it are kept, and the
    places left are filled from the ties at it by smallest code (another
    partial selection), so only k items are ever sorted.
    """
    k = min(check_integer("top", k, 1), estimates.size)
    if k < estimates.size:
        kth = kth_largest(estimates, k)
        above, tied = np.flatnonzero(estimates > kth), np.flatnonzero(estimates == kth)
        room = k - above.size
        if codes is not None and room < tied.size:
            tied = tied[np.argpartition(codes[tied], room - 1)[:room]]
        chosen = np.concatenate([above, tied[:room]])  # flatnonzero is ascending: positions are codes
    else:
        chosen = np.arange(estimates.size)
    labels = chosen if codes is None else codes[chosen]
    order = np.lexsort((labels, -estimates[chosen]))
    return labels[order], estimates[chosen[order]]


COUNT_SLICE = 1 << 22  # values per step of count_among: its temporaries stay at a few tens of MB


def count_among(values: np.ndarray, pool: np.ndarray) -> np.ndarray:
    """How many of ``values`` equal each item of the sorted, distinct ``pool`` (no sort of ``values``).

    Slice by slice, so that counting a population needs no population-sized temporaries.
    """
    counts = np.zeros(pool.size, dtype=np.int64)
    for lo in range(0, values.size, COUNT_SLICE):
        part = values[lo:lo + COUNT_SLICE]
        slot = np.searchsorted(pool, part)
        np.minimum(slot, pool.size - 1, out=slot)
        counts += np.bincount(slot[pool[slot] == part], minlength=pool.size)
    return counts


def _check_values(field: str, values: Any, size: int | None = None, numbers: bool = True) -> None:
    """A result's column: a 1-D numpy array (of real numbers with ``numbers``), of ``size`` values if given."""
    accepted = f"a 1-D numpy array{' of numbers' if numbers else ''}{'' if size is None else f' of {size} values'}"
    if not isinstance(values, np.ndarray):
        raise ParameterError(field, accepted, kind_of(values))
    if values.ndim != 1 or (size is not None and values.size != size) or (
            numbers and values.dtype.kind not in "iuf"):
        raise ParameterError(field, accepted, f"dtype {values.dtype}, shape {values.shape}")


def _check_reporters(reporters: Any) -> None:
    if reporters is not None:
        check_integer("reporters", reporters, 1, REPORTERS_MAX)


def _label_of(labels: Any) -> Any:
    """code -> label: an ItemEncoder (``label(code)``), a mapping code -> label, a sequence indexed by code, or None."""
    if labels is None:
        return int
    if hasattr(labels, "label"):
        return lambda code: labels.label(int(code))
    if isinstance(labels, dict):
        return lambda code: labels.get(int(code), int(code))
    if isinstance(labels, (str, bytes)) or not (hasattr(labels, "__getitem__") and hasattr(labels, "__len__")) or (
            isinstance(labels, np.ndarray) and labels.ndim != 1):
        raise ParameterError("labels", "an ItemEncoder, a dict code -> label or a list of labels indexed by code",
                             type(labels).__name__ if not isinstance(labels, np.ndarray) else f"shape {labels.shape}")
    names = list(labels)
    return lambda code: names[int(code)] if 0 <= int(code) < len(names) else int(code)


def _rows(codes: np.ndarray, labels: Any, columns: dict[str, np.ndarray]) -> dict[Any, dict[str, float]]:
    """{label: {column: value}} over ``codes``; two codes under one label are refused (the dict would drop one)."""
    label = _label_of(labels)
    out: dict[Any, dict[str, float]] = {}
    values = {name: np.asarray(column, dtype=float).tolist() for name, column in columns.items()}
    for i, code in enumerate(codes.tolist()):
        key = label(code)
        try:
            hash(key)
        except TypeError:
            raise ParameterError("labels", "hashable labels (strings or numbers), one per item",
                                 f"{key!r} ({type(key).__name__}) for item {code}") from None
        if key in out:
            raise ParameterError("labels", "one label per item (distinct labels)", f"{key!r} given to two items")
        out[key] = {name: column[i] for name, column in values.items()}
    return out


def _optional(module: str, name: str, method: str, extra: str):
    """The optional library ``module`` (``name``), or an ImportError saying how ``method`` gets it."""
    import importlib

    try:
        return importlib.import_module(module)
    except ImportError:
        raise ImportError(f"{method}() needs {name}, which the light install leaves out: pip install {module} (or "
                          f"pip install 'privagg[{extra}]'; privagg[all] and make demo have it); to_dict() gives the "
                          "same table without it") from None


def data_frame(rows: dict[Any, dict[str, float]], index: str):
    """``rows`` as a pandas DataFrame indexed by ``index``; pandas is optional."""
    frame = _optional("pandas", "pandas", "to_pandas", "pandas").DataFrame.from_dict(rows, orient="index")
    frame.index.name = index
    return frame


def polars_frame(rows: dict[Any, dict[str, Any]], index: str):
    """``rows`` as a Polars DataFrame whose first column is ``index`` (Polars has no index); Polars is optional."""
    pl = _optional("polars", "Polars", "to_polars", "frames")
    names = list(dict.fromkeys(name for row in rows.values() for name in row))
    columns = {index: list(rows), **{name: [row.get(name) for row in rows.values()] for name in names}}
    return pl.DataFrame(columns, strict=False)


@checked_methods
@dataclass(frozen=True)
class FrequencyTable:
    """Unbiased frequency estimates, over all of [B] (``items=None``) or over sorted, distinct ``items``."""

    parameters: Any
    estimates: np.ndarray
    items: np.ndarray | None = None
    messages: int = 0
    malformed: int = 0
    reporters: int | None = None  # the users whose reports were counted (None: the calibrated n)

    def __post_init__(self) -> None:
        check_parameters(self.parameters)
        _check_values("estimates", self.estimates)
        if self.items is not None:
            _check_values("items", self.items, self.estimates.size)
        _check_reporters(self.reporters)

    @property
    def full_domain(self) -> bool:
        return self.items is None

    def estimate(self, items) -> np.ndarray:
        """Estimates of ``items`` (codes in [B]); a table over candidates answers only for them."""
        codes = self._codes(items)
        if self.items is None:
            return self.estimates[codes]
        slot = np.searchsorted(self.items, codes).clip(max=self.items.size - 1)
        missing = self.items[slot] != codes
        if missing.any():
            raise ParameterError("item", "one of the analyzed candidates (or analyze the full domain)",
                                 int(codes[missing][0]))
        return self.estimates[slot]

    def _codes(self, items) -> np.ndarray:
        """``items`` (one code, or a sequence of them) checked as codes of [B] by the parameters."""
        one = np.isscalar(items) or (isinstance(items, np.ndarray) and items.ndim == 0)
        return self.parameters.check_codes([items] if one else items)

    def estimate_all(self) -> np.ndarray:
        """Estimates for every item of [B]."""
        if self.items is not None:
            raise ParameterError("estimate_all", "asked of a full-domain table (this one covers candidates)",
                                 f"{self.items.size} candidates")
        return self.estimates

    def standard_error(self, items=None) -> np.ndarray:
        """Standard errors of the estimates of ``items`` (default: the whole table): the parameters'
        ``reported_standard_error`` at each estimate (never 0 where the estimator's variance is not), for the users
        whose reports were counted."""
        est = self.estimates if items is None else self.estimate(items)
        return np.broadcast_to(self.parameters.reported_standard_error(est, self.reporters), est.shape)

    def top_k(self, k: int) -> tuple[np.ndarray, np.ndarray]:
        """The k items with the largest estimates (codes, estimates), largest first."""
        return top_k(self.items, self.estimates, k)

    def restricted_to(self, items) -> "FrequencyTable":
        """The same estimates over the sorted, distinct ``items`` only (e.g. the public candidates)."""
        codes = np.unique(self._codes(items))
        return FrequencyTable(self.parameters, self.estimate(codes), codes, self.messages, self.malformed,
                              self.reporters)

    def to_dict(self, labels=None) -> dict[Any, dict[str, float]]:
        """``{item: {"estimate": ..., "stderr": ...}}`` for every item of the table, in code order.

        ``labels`` names the items: the :class:`privagg.ItemEncoder` that encoded them (text items by
        their text), a dict code -> label, or a list of labels indexed by code (e.g. the categories);
        without it, items are their integer codes. A full-domain table has one entry per code of [B].
        """
        codes = np.arange(self.estimates.size) if self.items is None else self.items
        return _rows(codes, labels, {"estimate": self.estimates, "stderr": self.standard_error()})

    def to_pandas(self, labels=None):
        """The table of :meth:`to_dict` as a pandas DataFrame (index ``item``; columns ``estimate``, ``stderr``).

        pandas is optional: ``pip install pandas``.
        """
        return data_frame(self.to_dict(labels), "item")

    def to_polars(self, labels=None):
        """The table of :meth:`to_pandas` as a Polars DataFrame, its first column ``item``. Polars is optional."""
        return polars_frame(self.to_dict(labels), "item")


@checked_methods
@dataclass(frozen=True)
class HeavyHitterList:
    """Items reported as held by at least ``threshold`` users (sorted, distinct), with their estimates.

    The result type of the heavy-hitter protocols (registry entry ``fe-hh``): ``items`` are integers or
    strings, ``standard_errors`` the estimates' (the estimate plugged in), ``survivors`` how many prefixes
    passed each level of the tree, ``capped_levels`` the levels where more passed than were followed.
    """

    parameters: Any
    items: np.ndarray
    estimates: np.ndarray
    threshold: float
    standard_errors: np.ndarray
    survivors: tuple[int, ...] = ()
    capped_levels: tuple[int, ...] = ()
    messages: int = 0
    malformed: int = 0
    reporters: int | None = None  # the users whose reports were counted (None: the calibrated n)

    def __post_init__(self) -> None:
        check_parameters(self.parameters)
        _check_values("items", self.items, numbers=False)
        _check_values("estimates", self.estimates, self.items.size)
        _check_values("standard_errors", self.standard_errors, self.items.size)
        for name in ("survivors", "capped_levels"):
            counts = getattr(self, name)
            if not isinstance(counts, tuple) or not all(isinstance(c, (int, np.integer)) for c in counts):
                raise ParameterError(name, "a tuple of integers, one a level", kind_of(counts))
        _check_reporters(self.reporters)

    def __contains__(self, item) -> bool:
        return item in self.items.tolist()  # a list: an unhashable item is not in it, not a TypeError

    def top_k(self, k: int) -> tuple[np.ndarray, np.ndarray]:
        k = min(check_integer("top", k, 1), self.items.size)
        order = np.argsort(-self.estimates, kind="stable")[:k]
        return self.items[order], self.estimates[order]

    def to_dict(self) -> dict[Any, dict[str, float]]:
        """``{item: {"estimate": ..., "stderr": ...}}`` for the reported items (integers or text, as found)."""
        items = self.items.tolist()
        est, err = (np.asarray(a, dtype=float).tolist() for a in (self.estimates, self.standard_errors))
        return {item: {"estimate": e, "stderr": s} for item, e, s in zip(items, est, err)}

    def to_pandas(self):
        """The items of :meth:`to_dict` as a pandas DataFrame (index ``item``). pandas is optional."""
        return data_frame(self.to_dict(), "item")

    def to_polars(self):
        """The table of :meth:`to_pandas` as a Polars DataFrame, its first column ``item``. Polars is optional."""
        return polars_frame(self.to_dict(), "item")


@checked_methods
@dataclass(frozen=True)
class VectorSum:
    """An estimate of the sum of the users' vectors, with each coordinate's standard error.

    The result type of the vector protocols (``blanket-vector``, ``sparse-vector``).
    """

    parameters: Any
    total: np.ndarray
    standard_errors: np.ndarray
    # the coordinates estimated (sorted; ``total`` follows them), the others estimated as 0; None: every one
    coordinates: np.ndarray | None = None
    messages: int = 0
    malformed: int = 0
    standard_error_bounds: np.ndarray | None = None  # where a protocol reports an upper bound beside its estimate
    reporters: int | None = None  # the users whose reports were counted (None: the calibrated n)

    def __post_init__(self) -> None:
        check_parameters(self.parameters)
        _check_values("total", self.total)
        _check_values("standard_errors", self.standard_errors, self.total.size)
        if self.coordinates is not None:
            _check_values("coordinates", self.coordinates, self.total.size)
        if self.standard_error_bounds is not None:
            _check_values("standard_error_bounds", self.standard_error_bounds, self.total.size)
        _check_reporters(self.reporters)

    def mean(self) -> np.ndarray:
        """The average vector over the m users counted: total / m, whose standard errors are standard_errors / m."""
        return self.total / self.parameters.counted(self.reporters)

    def to_dict(self, labels=None) -> dict[Any, dict[str, float]]:
        """``{coordinate: {"estimate": ..., "stderr": ...}}`` for the coordinates estimated, in order.

        ``labels`` names the coordinates (a list indexed by coordinate, or a dict coordinate -> name, e.g.
        feature names); without it, coordinates are their integer indices. Where the protocol reports an
        upper bound on the standard error beside it, each entry also has ``stderr_bound``.
        """
        codes = np.arange(self.total.size) if self.coordinates is None else np.asarray(self.coordinates)
        columns = {"estimate": self.total, "stderr": np.broadcast_to(self.standard_errors, self.total.shape)}
        if self.standard_error_bounds is not None:
            columns["stderr_bound"] = np.broadcast_to(self.standard_error_bounds, self.total.shape)
        return _rows(codes, labels, columns)

    def to_pandas(self, labels=None):
        """The sum of :meth:`to_dict` as a pandas DataFrame (index ``coordinate``). pandas is optional."""
        return data_frame(self.to_dict(labels), "coordinate")

    def to_polars(self, labels=None):
        """The table of :meth:`to_pandas` as a Polars DataFrame, its first column ``coordinate``. Polars is optional."""
        return polars_frame(self.to_dict(labels), "coordinate")
