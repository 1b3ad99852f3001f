"""Typed results of the analyzers, with their queries.

Each result carries the frozen parameters it was computed under (so it
knows its privacy description and its error theory) and how many messages
went into it and how many were dropped as malformed.

* :class:`FrequencyTable` -- frequency estimates over the whole domain or
  over a set of queried items (candidates): ``estimate(items)``,
  ``estimate_all()``, ``standard_error(items)``, ``top_k(k)``.
* :class:`HeavyHitterList` -- items reported as heavy with their estimates.
* :class:`VectorSum` -- a sum of users' vectors with per-coordinate errors.

``top_k`` uses partial selection (``numpy.argpartition``, O(B)), then sorts
only the k selected.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from ..errors import ParameterError, check_integer


def top_k(codes: np.ndarray | None, estimates: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """The k (code, estimate) pairs with the largest estimates, largest first; ties: smaller code first.

    ``codes=None`` means the codes are the positions 0, 1, ... (a full domain,
    without materialising it). Partial selection (``argpartition``, O(len))
    finds the k-th largest value; the estimates above it are kept, and the
    places left are filled from the ties at it by smallest code (another
    partial selection), so only k items are ever sorted.
    """
    k = min(check_integer("top", k, 1), estimates.size)
    if k < estimates.size:
        kth = estimates[np.argpartition(estimates, estimates.size - k)[estimates.size - k]]
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


@dataclass(frozen=True)
class FrequencyTable:
    """Unbiased frequency estimates, over all of [B] (``items=None``) or over sorted, distinct ``items``."""

    parameters: Any
    estimates: np.ndarray
    items: np.ndarray | None = None
    messages: int = 0
    malformed: int = 0

    @property
    def full_domain(self) -> bool:
        return self.items is None

    def estimate(self, items) -> np.ndarray:
        """Estimates of ``items`` (codes in [B]); a table over candidates answers only for them."""
        codes = self.parameters.check_codes(np.atleast_1d(items))
        if self.items is None:
            return self.estimates[codes]
        slot = np.searchsorted(self.items, codes).clip(max=self.items.size - 1)
        missing = self.items[slot] != codes
        if missing.any():
            raise ParameterError("item", "one of the analyzed candidates (or analyze the full domain)",
                                 int(codes[missing][0]))
        return self.estimates[slot]

    def estimate_all(self) -> np.ndarray:
        """Estimates for every item of [B]."""
        if self.items is not None:
            raise ParameterError("estimate_all", "asked of a full-domain table (this one covers candidates)",
                                 f"{self.items.size} candidates")
        return self.estimates

    def standard_error(self, items=None) -> np.ndarray:
        """Standard errors of the estimates of ``items`` (default: the whole table), the estimate plugged in."""
        est = self.estimates if items is None else self.estimate(items)
        return np.broadcast_to(self.parameters.standard_error(est), est.shape)

    def top_k(self, k: int) -> tuple[np.ndarray, np.ndarray]:
        """The k items with the largest estimates (codes, estimates), largest first."""
        return top_k(self.items, self.estimates, k)

    def restricted_to(self, items) -> "FrequencyTable":
        """The same estimates over the sorted, distinct ``items`` only (e.g. the public candidates)."""
        codes = np.unique(self.parameters.check_codes(np.atleast_1d(items)))
        return FrequencyTable(self.parameters, self.estimate(codes), codes, self.messages, self.malformed)


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

    def __contains__(self, item) -> bool:
        return item in set(self.items.tolist())

    def top_k(self, k: int) -> tuple[np.ndarray, np.ndarray]:
        k = min(check_integer("top", k, 1), self.items.size)
        order = np.argsort(-self.estimates, kind="stable")[:k]
        return self.items[order], self.estimates[order]


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

    def mean(self) -> np.ndarray:
        """The average vector: total / n, whose standard errors are standard_errors / n."""
        return self.total / self.parameters.n_users
