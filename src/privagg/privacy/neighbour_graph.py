"""Neighbour graphs for DPDS and DPDG's masks and key backups (issue 47; docs/privacy.md, "Neighbour graphs").

Bell et al. (CCS 2020, "Secure single-server aggregation with (poly)logarithmic overhead", §3) replace Bonawitz et
al.'s complete graph by a graph of degree k = O(log n): each user masks with, and backs his two secrets up among,
his k neighbours, with a Shamir threshold t_k per neighbourhood. The construction here is theirs for the
semi-honest case: the Harary graph H(k, n) (k even; users on a cycle, each adjacent to the k / 2 before and after
him) with the users placed on the cycle in a uniformly random order drawn after the keys are committed. Two facts
make its failure probabilities exact or rigorously bounded rather than asymptotic:

* each user's neighbourhood is a uniform k-subset of the n - 1 others, so the colluders or the honest survivors
  among his neighbours are hypergeometric: conditions (a), (b) and (d) are exact tails, summed over the users (a
  union bound, equal to the expected number of users who fail);
* the honest survivors induce a connected graph iff at most one cyclic run of removed users (colluding or
  dropped) is k / 2 long or longer, and the runs of a uniform subset of a cycle are exchangeable: condition (c)'s
  probability is exactly computable (:func:`disconnection_exact`, inclusion-exclusion in integers) and bounded by
  the expected number of pairs of long runs (:func:`disconnection_bound`, Bonferroni's first term).

The holders of a user's secrets are his k neighbours and himself (k + 1 shares, as the complete graph's n), so the
complete graph k = n - 1 is today's rule: its colluding holders are exactly C and its threshold floor((n + C) / 2)
+ 1 (:func:`privagg.protocols.sharing_parties.threshold`).

Counts, not fractions, throughout: n users, C colluding with the server (fixed before the graph is drawn), D
honest users who drop out (independent of the graph), at most.
"""

from __future__ import annotations

import hashlib
import math
import struct
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from fractions import Fraction
from functools import lru_cache

import numpy as np

from ..errors import ParameterError, check_integer


def _log_comb(n, k):
    from scipy.special import gammaln

    return gammaln(np.asarray(n, dtype=float) + 1) - gammaln(np.asarray(k, dtype=float) + 1) - \
        gammaln(np.asarray(n, dtype=float) - k + 1)


def _pmf(others: int, marked: int, degree: int) -> np.ndarray:
    """Pr[X = x], x = 0..degree, X the marked users among a uniform ``degree``-subset of ``others`` users."""
    from scipy.stats import hypergeom

    return np.exp(hypergeom.logpmf(np.arange(degree + 1), others, marked, degree))


def _at_least(pmf: np.ndarray) -> np.ndarray:
    """Pr[X >= x] for x = 0..len(pmf) (the last 0), summed from the top: no cancellation in a far tail."""
    return np.append(np.cumsum(pmf[::-1])[::-1], 0.0)


def _below(pmf: np.ndarray) -> np.ndarray:
    """Pr[X < x] for x = 0..len(pmf)."""
    return np.concatenate([[0.0], np.cumsum(pmf)])


def _index(tails: np.ndarray, at) -> np.ndarray:
    """tails[x] with x clipped to the array (Pr[X >= x] is 1 below 0; Pr[X < x] is 1 above the support)."""
    return tails[np.clip(at, 0, len(tails) - 1)]


def check_degree(n_users: int, degree: int) -> int:
    """k: even in [2, n - 2] (a Harary graph), or n - 1 (the complete graph)."""
    check_integer("degree", degree, 1, n_users - 1)
    if degree != n_users - 1 and degree % 2:
        raise ParameterError("degree", f"even in [2, {n_users - 2}] (a Harary graph), or n - 1 = {n_users - 1} (the "
                             "complete graph)", degree)
    return degree


SEED_BYTES = 32  # the graph's seed: the organisation draws it when it signs the roster, after every key is enrolled


def cycle_order(seed: bytes, n_users: int) -> np.ndarray:
    """The users in their order on the cycle: sorted by BLAKE2b-128(person "privagg cycle"; seed || index as 4 bytes
    little-endian), ties by index. Portable and deterministic (no generator's algorithm is part of the contract), and
    uniform over the n! orders as far as BLAKE2b is a random function (ties have probability below n^2 / 2^129)."""
    keys = [hashlib.blake2b(seed + struct.pack("<I", u), digest_size=16, person=b"privagg cycle").digest()
            for u in range(n_users)]
    return np.array(sorted(range(n_users), key=lambda u: (keys[u], u)), dtype=np.int64)


class Graph:
    """The random Harary graph H(k, n) the users of a task mask and back up on (module docstring): user u's holders
    are his k neighbours (the k / 2 before and after him on the cycle, :func:`cycle_order`) and himself. The complete
    graph (k = n - 1, no seed) holds every user in every neighbourhood."""

    def __init__(self, n_users: int, degree: int, seed: bytes | None) -> None:
        self.n_users, self.degree = n_users, check_degree(n_users, degree)
        self.complete, self.seed = degree == n_users - 1, seed
        self.half = n_users if self.complete else degree // 2
        if self.complete:
            self.order = self.position = np.arange(n_users, dtype=np.int64)
        else:
            if not isinstance(seed, bytes) or len(seed) != SEED_BYTES:
                raise ParameterError("graph_seed", f"the {SEED_BYTES} bytes of the organisation's signed roster",
                                     f"{len(seed)} bytes" if isinstance(seed, bytes) else type(seed).__name__)
            self.order = cycle_order(seed, n_users)
            self.position = np.empty(n_users, dtype=np.int64)
            self.position[self.order] = np.arange(n_users)
        self._holders: dict[int, list[int]] = {}

    def distance(self, u: int, others) -> np.ndarray:
        """The cycle distance between user ``u`` and each of ``others`` (0 between any two on the complete graph)."""
        if self.complete:
            return np.zeros(np.shape(others), dtype=np.int64)
        gap = np.abs(self.position[np.asarray(others, dtype=np.int64)] - self.position[u])
        return np.minimum(gap, self.n_users - gap)

    def near(self, u: int, distance: int) -> Sequence[int]:
        """The users within ``distance`` places of ``u`` on the cycle, himself among them, ascending (every user on
        the complete graph)."""
        if self.complete or 2 * distance + 1 >= self.n_users:
            return range(self.n_users)
        offsets = np.arange(-distance, distance + 1)
        return sorted(self.order[(self.position[u] + offsets) % self.n_users].tolist())

    def holders(self, u: int) -> Sequence[int]:
        """The holders of ``u``'s secrets: his neighbours and himself, ascending (every user on the complete graph)."""
        if self.complete:
            return range(self.n_users)
        if u not in self._holders:
            self._holders[u] = self.near(u, self.half)
        return self._holders[u]

    def neighbours(self, u: int) -> list[int]:
        """His k neighbours, ascending."""
        return [v for v in self.holders(u) if v != u]

    def slot(self, u: int, holder: int) -> int:
        """The place of ``holder`` among ``u``'s holders (a dealer's commitments and shares are in that order)."""
        return self.holders(u).index(holder)


@lru_cache(maxsize=4)
def graph(n_users: int, degree: int, seed: bytes | None) -> Graph:
    """The task's graph, built once per process for a seed (a simulation's users share it)."""
    return Graph(n_users, degree, seed)


def collusion_terms(n_users: int, colluding: int, degree: int) -> tuple[np.ndarray, np.ndarray]:
    """For every threshold t = 1..k + 1: the union bounds over the n - C honest users of (a) Pr[t or more of his k
    neighbours collude] (the server and they hold t shares of both his secrets) and (d) Pr[2t - k - 1 or more
    collude], i.e. t <= (k + 1 + colluding holders) / 2 (a server showing two survivor lists can have both accepted
    by his holders: docs/privacy.md, "Dishonest parties", per neighbourhood). (d) implies (a) as t <= k + 1."""
    thresholds = np.arange(1, degree + 2)
    tail = _at_least(_pmf(n_users - 1, colluding, degree))
    honest = n_users - colluding
    return honest * _index(tail, thresholds), honest * _index(tail, 2 * thresholds - degree - 1)


def liveness_term(n_users: int, colluding: int, dropouts: int, degree: int) -> np.ndarray:
    """For every t = 1..k + 1, (b): the union bound over the users whose secret the release needs (every survivor's
    mask seed, every dropout's pair key; colluders counted too: they may withhold) of Pr[fewer than t of his k + 1
    holders are honest survivors, who reveal]. An honest survivor is one of his own holders; the others are not
    counted. Worst case: the colluders and the dropouts are disjoint."""
    thresholds = np.arange(1, degree + 2)
    survivors = n_users - colluding - dropouts
    own = survivors * _index(_below(_pmf(n_users - 1, survivors - 1, degree)), thresholds - 1)
    if colluding + dropouts == 0:
        return own
    return own + (colluding + dropouts) * _index(_below(_pmf(n_users - 1, survivors, degree)), thresholds)


def cut_term(n_users: int, colluding: int, degree: int) -> np.ndarray:
    """For every t = 1..k + 1, (e): the union bound over the n - C honest users and the two sides of each of Pr[t - k
    / 2 - 1 or more of his k / 2 neighbours on that side collude]; 0 on the complete graph, which no removal
    disconnects. A server that declares honest users dropped after seeing the graph (or colluders whose complaints
    exclude them) learns the sum of a part of the honest survivors cut off from the rest only if every member's mask
    seed is rebuilt. The part's last member a before a gap on the cycle has his k / 2 neighbours across the gap
    removed (dropped or colluding: an honest survivor there would be in the part), so at most 1 + k / 2 + c holders
    give shares of his seed (he, the k / 2 on the other side, the c colluders across the gap); t > k / 2 + 1 + c on
    both sides of every honest user leaves every such sum masked (docs/privacy.md, "Neighbour graphs", (e)). The
    event contains (d)'s: 2t - k - 1 colluding neighbours put at least t - k / 2 on one side."""
    if degree == n_users - 1:
        return np.zeros(degree + 1)
    thresholds = np.arange(1, degree + 2)
    tail = _at_least(_pmf(n_users - 1, colluding, degree // 2))
    return 2 * (n_users - colluding) * _index(tail, thresholds - degree // 2 - 1)


def disconnection_bound(n_users: int, removed: int, degree: int) -> float:
    """(c) bounded: Pr[the honest survivors' graph is not connected] <= E[pairs of cyclic runs of at least k / 2
    removed users] = C(m, 2) C(R - k + m - 1, m - 1) / C(n - 1, m - 1), m = n - R survivors (a run is the gap
    after a survivor; m gaps, exchangeable, add up to R; two given gaps are both >= k / 2 in C(R - k + m - 1,
    m - 1) of the C(n - 1, m - 1) compositions). 0 for the complete graph, or when R < k."""
    survivors, half = n_users - removed, degree // 2
    if degree == n_users - 1 or survivors < 2 or removed < 2 * half:
        return 0.0
    log = (_log_comb(survivors, 2) + _log_comb(removed - 2 * half + survivors - 1, survivors - 1)
           - _log_comb(n_users - 1, survivors - 1))
    return float(min(1.0, math.exp(log)))


def disconnection_exact(n_users: int, removed: int, degree: int) -> float:
    """(c) exactly, in integers (small n: the terms have n digits): 1 - Pr[at most one of the m cyclic gaps between
    survivors is >= k / 2], counting compositions of R into m parts all below h = k / 2 (inclusion-exclusion) and
    those with one given part >= h and the others below h (times m)."""
    survivors, half = n_users - removed, degree // 2
    if degree == n_users - 1 or survivors < 2:
        return 0.0

    def below(total: int, parts: int, slack: bool) -> int:  # compositions of total (or at most total) into parts < h
        size = parts + (1 if slack else 0)
        return sum((-1) ** j * math.comb(parts, j) * math.comb(total - j * half + size - 1, size - 1)
                   for j in range(min(parts, total // half) + 1))

    good = below(removed, survivors, False) + (
        survivors * below(removed - half, survivors - 1, True) if removed >= half else 0)
    return float(1 - Fraction(good, math.comb(n_users - 1, survivors - 1)))


@dataclass(frozen=True)
class GraphGuarantee:
    """A degree and threshold with each failure term (union bounds over users; (c) a Bonferroni bound), and the
    total: Pr[the release is not private, or not complete] <= max((d), (e)) + liveness + disconnection ((a) is
    inside (d), and (d) inside (e) on a Harary graph: :attr:`private`)."""

    n_users: int
    colluding: int
    dropouts: int
    degree: int
    threshold: int
    collusion: float  # (a)
    liveness: float  # (b): the release fails (nothing is released), never a privacy loss
    disconnection: float  # (c)
    equivocation: float  # (d)
    cut: float  # (e): 0 on the complete graph
    failure: float

    @property
    def complete(self) -> bool:
        return self.degree == self.n_users - 1

    @property
    def private(self) -> float:
        """The bound on the failures that cost privacy whatever the dropouts: (d), or (e) which contains it."""
        return max(self.equivocation, self.cut)

    def to_dict(self) -> dict:
        return {**asdict(self), "complete": self.complete}


def dropouts_of(n_users: int, fraction: float) -> int:
    """The users a dropout fraction names, floor(fraction n) (rounded to 9 places first, so that 0.1 of 60 is 6):
    the D a graph is planned for, and the users a demo drops."""
    return math.floor(round(fraction * n_users, 9))


def guarantee(n_users: int, colluding: int, dropouts: int, degree: int) -> GraphGuarantee:
    """The threshold t_k in [1, k + 1] that minimises the total failure bound at degree k (the least such t: the
    complete graph's is floor((n + C) / 2) + 1, today's), with its terms."""
    check_degree(n_users, degree)
    return complete_graph(n_users, colluding, dropouts) if degree == n_users - 1 else \
        _minimised(n_users, colluding, dropouts, degree)


def _minimised(n_users: int, colluding: int, dropouts: int, degree: int) -> GraphGuarantee:
    """:func:`guarantee`'s terms over every threshold in [1, k + 1], in arrays of k + 1 values."""
    collusion, equivocation = collusion_terms(n_users, colluding, degree)
    cut = cut_term(n_users, colluding, degree)
    liveness = liveness_term(n_users, colluding, dropouts, degree)
    disconnection = disconnection_bound(n_users, colluding + dropouts, degree)
    total = np.minimum(1.0, np.maximum(equivocation, cut) + liveness + disconnection)
    best = int(np.argmin(total))
    return GraphGuarantee(n_users, colluding, dropouts, degree, best + 1, float(min(1.0, collusion[best])),
                          float(min(1.0, liveness[best])), disconnection, float(min(1.0, equivocation[best])),
                          float(min(1.0, cut[best])), float(total[best]))


def complete_graph(n_users: int, colluding: int, dropouts: int) -> GraphGuarantee:
    """The complete graph (Bonawitz et al.; the paper's n-of-n sharing): every term 0 at t = floor((n + C) / 2) + 1
    when t <= n - C - D, else the release cannot be both private and complete for every placement (at t = 1, the
    least of the totals, all 1: equivocation 1, collusion 1 if anyone colludes). In closed form, what
    :func:`_minimised` computes at k = n - 1 (equal on every n < 60: tests/privacy/test_neighbour_graph.py) in arrays
    of n values: at n = 10^9 they took 24 GB before the process was killed."""
    threshold = (n_users + colluding) // 2 + 1
    if threshold <= n_users - colluding - dropouts:
        return GraphGuarantee(n_users, colluding, dropouts, n_users - 1, threshold, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0)
    return GraphGuarantee(n_users, colluding, dropouts, n_users - 1, 1, 1.0 if colluding else 0.0, 0.0, 0.0, 1.0, 0.0,
                          1.0)


SMALLEST_FAILURE = 1e-250  # below it a term computed as 0 (every pmf value under 2.2e-308) could still exceed it


def check_failure(failure: float) -> float:
    """A failure probability in [SMALLEST_FAILURE, 1): the terms are sums of at most n (k + 1) doubles, so one that
    underflows to 0 is below n (k + 1) 2.2e-308, far below any target allowed."""
    if not SMALLEST_FAILURE <= failure < 1:
        raise ParameterError("failure", f"a probability in [{SMALLEST_FAILURE:g}, 1) (smaller ones underflow)", failure)
    return failure


def least_degree(n_users: int, colluding: int, dropouts: int, failure: float) -> GraphGuarantee:
    """The least degree k (even, a random Harary graph; or n - 1) whose total failure bound is at most ``failure``,
    with its threshold and terms: by doubling, then bisection over the even degrees, so that k meets the target and
    k - 2 does not (the bisection takes the total as non-increasing in k, which holds on every case tested against a
    scan of all degrees: tests/privacy/test_neighbour_graph.py). A ParameterError when even the complete graph
    cannot: (n + C) / 2 < t <= n - C - D needs n > 3C + 2D."""
    check_integer("users", n_users, 2, None)
    check_integer("colluding", colluding, 0, n_users - 1)
    check_integer("dropouts", dropouts, 0, n_users - 1 - colluding)
    check_failure(failure)
    complete = complete_graph(n_users, colluding, dropouts)
    if complete.failure > 0:
        raise ParameterError("users", f"more than 3 C + 2 D users, C colluding and D dropping out (no threshold t has "
                             f"(n + C) / 2 < t <= n - C - D, even on the complete graph; C = {colluding}, "
                             f"D = {dropouts})", n_users)

    def meets(degree: int) -> GraphGuarantee | None:
        found = guarantee(n_users, colluding, dropouts, degree)
        return found if found.failure <= failure else None

    largest = (n_users - 2) // 2 * 2  # the largest even degree of a Harary graph
    low, high, best = 0, 2, None  # low: a degree known to fail (0: none), high: the next to try
    while high <= largest and (best := meets(high)) is None:
        low, high = high, 2 * high
    if best is None:
        if low == largest or (best := meets(largest)) is None:
            return complete
        high = largest
    while high - low > 2:  # invariant: high meets, low fails (or is 0)
        middle = (low + high) // 4 * 2
        found = meets(middle)
        low, high, best = (low, middle, found) if found is not None else (middle, high, best)
    return best
