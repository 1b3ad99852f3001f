"""The exact laws of the sampling + secret sharing protocols for the exact auditor (:mod:`privagg.audit`): one user's
output law on tiny instances, the pairs of neighbouring datasets to audit, and what enumerating them costs
(docs/privacy.md; the fair DP paper, arXiv:2104.05974, §2-3).
"""

from __future__ import annotations

import itertools
import math

import numpy as np

from . import exact_laws
from .dpdg_parameters import DPDGParameters
from .sampling_sharing import SamplingParameters, SharingParameters
from .tss_parameters import TSSParameters


def law_size(parameters: SharingParameters, item: int) -> exact_laws.LawSize:
    """:func:`message_law`'s size before it is built. DPDG: (2T + 1)^N outcomes (T = 12 sd + 2 per coordinate;
    the sd grows with 2^k and as eps and delta shrink), each N counts up to 2T + 2^k. TSS's adaptive stage: the
    changed user's 2 C(N, s) outcomes (his report set of s = alpha N categories, sampled or not) over
    2N + C(N, s) types. The sampling protocols: 2 outcomes over N types."""
    p, N = parameters, parameters.domain_size
    if isinstance(p, DPDGParameters):
        cut = math.ceil(12 * math.sqrt(p.noise_variance)) + 2
        support = 2 * cut + 1

        def fits(budget: float) -> int | None:
            return exact_laws.largest_fitting(
                lambda b: exact_laws.power(support, b) * (b + exact_laws.UNITS_PER_STATE), budget, 2, N)

        states, detail = exact_laws.power(support, N), f"each coordinate's noise is truncated to {support} values"
        if fits(exact_laws.EXACT_LAW_MAX_WORK) is None:
            return exact_laws.LawSize(p.protocol, states, N, 2 * cut + p.scale, "fractional-bits", p.fractional_bits,
                                      others="a larger --epsilon or --delta", detail=detail)
        return exact_laws.LawSize(p.protocol, states, N, 2 * cut + p.scale, "domain", N,
                                  others="fewer --fractional-bits, or a larger --epsilon or --delta", detail=detail,
                                  limit=fits)
    if isinstance(p, TSSParameters) and p.second_stage == "adaptive":
        subsets = exact_laws.comb(N, p.report_size)
        types = 2 * N + subsets
        return exact_laws.LawSize(p.protocol, 2 * subsets if item >= N else 3.0,
                                  int(types) if math.isfinite(types) else 2**62, 1, "domain", N,
                                  others="a --report-fraction further from 1/2")
    return exact_laws.LawSize(p.protocol, 2.0, N, 1, "domain", N)


def message_law(parameters: SharingParameters, item: int) -> dict[tuple[int, ...], float]:
    """One user's part of what the aggregator reconstructs, as an exact law over count vectors.

    Sampling (DPCS, DPCS*, DPDS, TSS's uniform stage): e_item with probability p', else zeros -- the shares
    reconstruct exactly, so the server's view is the sampled counts (reference §2.2). DPDG: e_item 2^k plus
    N discrete Gaussians, each shifted by its truncation point T (the sum is shifted by n T alike in both
    datasets); T = 12 sd + 2 leaves out less than e^-70 of each coordinate's mass.
    """
    N = parameters.domain_size
    exact_laws.check_law(law_size(parameters, item))
    if isinstance(parameters, DPDGParameters):
        from ..privacy.discrete_gaussian import pmf

        cut = math.ceil(12 * math.sqrt(parameters.noise_variance)) + 2
        support = np.arange(-cut, cut + 1)
        one = pmf(parameters.noise_variance, support)
        law: dict[tuple[int, ...], float] = {}
        for values in np.ndindex(*(support.size,) * N):
            shifted = [int(v) + (parameters.scale if j == item else 0) for j, v in enumerate(values)]
            law[tuple(shifted)] = float(np.prod(one[list(values)]))
        return law
    if isinstance(parameters, TSSParameters) and parameters.second_stage == "adaptive":
        return _adaptive_law(parameters, item)
    counted = tuple(int(j == item) for j in range(N))
    return {counted: parameters.effective_probability, (0,) * N: 1 - parameters.effective_probability}


def _adaptive_law(parameters: TSSParameters, item: int) -> dict[tuple[int, ...], float]:
    """S2's view of one user in TSS's adaptive stage, given every report set (as the derivation gives it): types
    0..N-1 count the other users of each category whose set holds their item, N..2N-1 are the released counts,
    and 2N.. the changed user's own set, whole (item N + a: the changed user, holding a). An other user's set
    tells nothing beyond whether it holds his item (the rest is uniform); the changed user's does."""
    N, p, include = parameters.domain_size, parameters.sampling_probability, parameters.inclusion_probability
    subsets = list(itertools.combinations(range(N), parameters.report_size))
    size = 2 * N + len(subsets)
    law: dict[tuple[int, ...], float] = {}

    def add(ones: tuple[int, ...], probability: float) -> None:
        key = tuple(int(t in ones) for t in range(size))
        law[key] = law.get(key, 0.0) + probability

    if item < N:  # another user, holding item
        add((item, N + item), include * p)
        add((item,), include * (1 - p))
        add((), 1 - include)
        return law
    held = item - N
    with_item = math.comb(N - 1, parameters.report_size - 1)
    without = math.comb(N - 1, parameters.report_size)
    for s, subset in enumerate(subsets):
        if held in subset:
            add((2 * N + s, N + held), include / with_item * p)
            add((2 * N + s,), include / with_item * (1 - p))
        else:
            add((2 * N + s,), (1 - include) / without)
    return law


def audit_pairs(parameters: SamplingParameters, users: int):
    """Every neighbouring pair (one user moved from category a to b) whose first dataset holds every category at
    least ceil(beta n) times -- the datasets a run accepts -- as lists of items; the second may fall short. In
    TSS's adaptive stage the moved user is the item N + a (his report set is part of S2's view:
    :func:`_adaptive_law`)."""
    m, N = parameters.min_count, parameters.domain_size
    adaptive = isinstance(parameters, TSSParameters) and parameters.second_stage == "adaptive"
    for counts in _compositions(users, N, m):
        for a in range(N):
            for b in range(N):
                if a != b:
                    moved = list(counts)
                    moved[a] -= 1
                    moved[b] += 1
                    if adaptive:
                        others = np.repeat(np.arange(N), moved)
                        others = np.delete(others, np.flatnonzero(others == b)[0]).tolist()
                        yield [N + a, *others], [N + b, *others]
                    else:
                        yield (np.repeat(np.arange(N), counts).tolist(), np.repeat(np.arange(N), moved).tolist())


def _composition_count(total: int, parts: int, least: int) -> float:
    """How many count vectors :func:`_compositions` yields: C(total - least parts + parts - 1, parts - 1)."""
    free = total - least * parts
    return exact_laws.comb(free + parts - 1, parts - 1) if free >= 0 else 0.0


def audit_cost(parameters: SharingParameters, users: int, budget: float = math.inf) -> tuple[float, float, float]:
    """What the exact auditor (privagg.audit) would do for these parameters and ``users`` users, before it does any
    of it: (neighbouring pairs of datasets, joint states its convolutions form, states its caches hold).

    It mirrors audit.OutputLaws on count vectors: each dataset is its first user's law convolved with the law of
    the others' sorted items, built one user at a time with every prefix cached. A prefix holding q_j users of
    category j has at most prod_j (q_j + 1) outcomes for the sampling protocols (each user counted or not), its
    pairs (q_j + 1)(q_j + 2) / 2 in TSS's adaptive stage, and prod_t (2 T |q| + 2^k q_t + 1) for DPDG (capped by
    the product of the users' law sizes). The pairs are :func:`audit_pairs`' (DPDG: every neighbouring pair,
    parameters.neighbouring_pairs). Counting stops once the work passes ``budget``."""
    from .parameters import neighbouring_pair_count

    p, N = parameters, parameters.domain_size
    dpdg = isinstance(p, DPDGParameters)
    adaptive = isinstance(p, TSSParameters) and p.second_stage == "adaptive"
    if dpdg:
        cut = math.ceil(12 * math.sqrt(p.noise_variance)) + 2
        user_states = exact_laws.power(2 * cut + 1, N)
        pairs = float(neighbouring_pair_count(N, users)) if N <= 64 and users <= 10**6 else \
            exact_laws.comb(N + users - 2, users - 1) * N * (N - 1) / 2
        least = 0
    else:
        least = p.min_count
        pairs = _composition_count(users, N, least) * N * (N - 1)
        user_states = 3.0 if adaptive else 2.0
    if pairs > 10**6:  # the auditor refuses past its pairs anyway: the work is at least one user's law a pair
        return pairs, math.inf, math.inf

    def sizes(leading: tuple[int, ...], j: int, ks: np.ndarray) -> np.ndarray:
        """The outcomes of the prefix holding ``leading`` (categories before j) and ks users of category j."""
        counts = np.array(leading + (0,) * (N - len(leading)), dtype=np.float64)
        if dpdg:
            total = sum(leading) + ks
            grid = np.prod([2 * cut * total + p.scale * (counts[t] + (ks if t == j else 0)) + 1 for t in range(N)],
                           axis=0)
            return np.minimum(grid, np.exp(np.minimum(total * math.log(user_states), 709.0)))
        if adaptive:
            return np.prod((counts + 1) * (counts + 2) / 2) * (ks + 1) * (ks + 2) / 2
        return np.prod(counts + 1) * (ks + 1)

    work = cached = 0.0
    built: dict[tuple[tuple[int, ...], int], int] = {}
    datasets: set[tuple[int, tuple[int, ...]]] = set()

    def add(first_states: float, others: tuple[int, ...], key) -> None:
        nonlocal work, cached
        if key in datasets:
            return
        datasets.add(key)
        for j in range(N):
            if others[j]:
                leading = others[:j]
                while leading and not leading[-1]:
                    leading = leading[:-1]
                done = built.get((leading, j), 0)
                if others[j] > done:
                    ks = np.arange(done, others[j], dtype=np.float64)
                    step = sizes(leading, j, ks)
                    work += float(step.sum()) * user_states
                    cached += float(sizes(leading, j, ks + 1).sum())
                    built[(leading, j)] = others[j]
        whole = float(sizes(others[:N - 1], N - 1, np.array([float(others[N - 1])]))[0])
        work += whole * first_states
        cached += float(sizes(others[:N - 1], N - 1, np.array([others[N - 1] + 1.0]))[0]) if dpdg else \
            whole * first_states

    first_states = 2 * exact_laws.comb(N, p.report_size) if adaptive else user_states
    for counts in _compositions(users - 1 if dpdg else users, N, least):
        if work > budget:
            break
        if dpdg:  # user 0 holds any x, the others ``counts``
            for x in range(N):
                add(user_states, counts, (x, counts))
        elif adaptive:  # the moved user (his law is his report set's) held a or holds b; the others: counts - e_a
            for a in range(N):
                others = counts[:a] + (counts[a] - 1,) + counts[a + 1:]
                for first in range(N):
                    add(first_states, others, (first, others))
        else:
            for dataset in [counts] + [tuple(c - (j == a) + (j == b) for j, c in enumerate(counts))
                                       for a in range(N) for b in range(N) if a != b]:
                first = next(j for j, c in enumerate(dataset) if c)
                add(user_states, dataset[:first] + (dataset[first] - 1,) + dataset[first + 1:], dataset)
    return pairs, work, cached


def _compositions(total: int, parts: int, least: int):
    """Count vectors of ``parts`` entries, each at least ``least``, summing to ``total``."""
    if parts == 1:
        if total >= least:
            yield (total,)
        return
    for first in range(least, total - least * (parts - 1) + 1):
        for rest in _compositions(total - first, parts - 1, least):
            yield (first, *rest)
