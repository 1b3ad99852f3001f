"""The neighbour graph's failure terms (privacy/neighbour_graph.py; docs/privacy.md, "Neighbour graphs") against a
Monte Carlo of the random Harary graph itself, the least degree's monotonicity, and the complete graph as today's
threshold rule."""

from __future__ import annotations

import math
from types import SimpleNamespace

import numpy as np
import pytest

from privagg.errors import ParameterError
from privagg.privacy import neighbour_graph as graph


def _window(marked: np.ndarray, half: int) -> np.ndarray:
    """Each position's marked neighbours on the cycle: the half before and the half after it."""
    trials, n = marked.shape
    sums = np.concatenate([marked[:, n - half:], marked, marked[:, :half]], axis=1).cumsum(axis=1, dtype=np.int32)
    sums = np.concatenate([np.zeros((trials, 1), np.int32), sums], axis=1)
    return sums[:, 2 * half + 1:2 * half + 1 + n] - sums[:, :n] - marked


def _sides(marked: np.ndarray, half: int) -> tuple[np.ndarray, np.ndarray]:
    """Each position's marked neighbours on the cycle on each side: the half before it, the half after it."""
    trials, n = marked.shape
    sums = np.concatenate([marked[:, n - half:], marked, marked[:, :half]], axis=1).cumsum(axis=1, dtype=np.int32)
    sums = np.concatenate([np.zeros((trials, 1), np.int32), sums], axis=1)
    before = sums[:, half:half + n] - sums[:, :n]
    return before, sums[:, 2 * half + 1:2 * half + 1 + n] - sums[:, half + 1:half + 1 + n]


def _long_runs(removed: np.ndarray, half: int) -> np.ndarray:
    """The cyclic runs of at least ``half`` removed positions, per row (a run starts after a survivor)."""
    trials, n = removed.shape
    sums = np.concatenate([removed, removed[:, :half]], axis=1).cumsum(axis=1, dtype=np.int32)
    sums = np.concatenate([np.zeros((trials, 1), np.int32), sums], axis=1)
    return (((sums[:, half:half + n] - sums[:, :n]) == half) & ~np.roll(removed, 1, axis=1).astype(bool)).sum(axis=1)


def simulate(n, colluding, dropouts, degree, trials, rng):
    """The Harary graph H(k, n) with the users in a uniform random order: per trial, each position's colluding and
    honest surviving neighbours, and the long runs of removed users; the roles (0 honest survivor, 1 colluding,
    2 dropped) fixed in number, independent of the order, as the derivation assumes."""
    roles = np.zeros(n, np.int8)
    roles[:colluding], roles[colluding:colluding + dropouts] = 1, 2
    roles = rng.permuted(np.tile(roles, (trials, 1)), axis=1)
    colluders, survivors, half = (roles == 1).astype(np.int32), (roles == 0).astype(np.int32), degree // 2
    return (roles, _window(colluders, half), _window(survivors, half), _long_runs((roles != 0).astype(np.int32), half),
            _sides(colluders, half))


def _counts(roles, colluding_neighbours, surviving_neighbours, sides, degree, threshold):
    honest = roles != 1
    return {"collusion": (honest & (colluding_neighbours >= threshold)).sum(axis=1),
            "equivocation": (honest & (colluding_neighbours >= 2 * threshold - degree - 1)).sum(axis=1),
            "cut": sum((honest & (side >= threshold - degree // 2 - 1)).sum(axis=1) for side in sides),
            "liveness": np.where(roles == 0, 1 + surviving_neighbours < threshold,
                                 surviving_neighbours < threshold).sum(axis=1)}


@pytest.mark.parametrize("n, colluding, dropouts, degree, trials",
                         [(100, 10, 10, 8, 8000), (300, 30, 30, 12, 3000), (1000, 100, 100, 14, 1500)])
def test_the_union_bounds_are_the_expected_failures_and_bound_the_probability(n, colluding, dropouts, degree, trials):
    """Each term is the expected number of users who fail (a sum of exact hypergeometric tails): the Monte Carlo's
    mean count matches it within 5 sd, at every threshold; and Pr[some user fails] stays under it (+ 4 binomial
    sd at the bound)."""
    roles, colluding_nb, surviving_nb, _, sides = simulate(n, colluding, dropouts, degree, trials,
                                                           np.random.default_rng(47))
    collusion, equivocation = graph.collusion_terms(n, colluding, degree)
    terms = {"collusion": collusion, "equivocation": equivocation, "cut": graph.cut_term(n, colluding, degree),
             "liveness": graph.liveness_term(n, colluding, dropouts, degree)}
    checked = 0
    for threshold in range(1, degree + 2):
        for name, count in _counts(roles, colluding_nb, surviving_nb, sides, degree, threshold).items():
            term = terms[name][threshold - 1]
            sd = math.sqrt(max(count.var(), term) / trials)
            assert abs(count.mean() - term) <= 5 * sd + 1e-12, (name, threshold, count.mean(), term)
            if 1e-3 < term < 1:
                checked += 1
                assert (count > 0).mean() <= term + 4 * math.sqrt(term * (1 - term) / trials), (name, threshold)
    assert checked >= 3


def _components(survivors: set[int], g: graph.Graph) -> list[set[int]]:
    left, parts = set(survivors), []
    while left:
        part, stack = set(), [left.pop()]
        while stack:
            u = stack.pop()
            part.add(u)
            found = [v for v in g.neighbours(u) if v in left]
            left.difference_update(found)
            stack.extend(found)
        parts.append(part)
    return parts


def _a_part_opens(g: graph.Graph, removed: set[int], colluding: set[int], threshold: int) -> bool:
    """Whether some part of the honest survivors cut off from the others has every member's mask seed rebuilt: t of
    his holders give shares, the honest survivors among them (he too) and the colluders."""
    honest = set(range(g.n_users)) - removed - colluding
    parts = _components(honest, g)
    return len(parts) > 1 and any(
        all(sum(h in honest or h in colluding for h in g.holders(u)) >= threshold for u in part) for part in parts)


@pytest.mark.parametrize("n, degree, colluding", [(40, 6, 0), (60, 8, 0), (60, 8, 3), (101, 12, 5)])
def test_no_cut_a_server_chooses_opens_a_part_of_the_honest_survivors_under_e(n, degree, colluding):
    """(e) as a fact of the graph: whatever users the server declares dropped after seeing it (two runs of k / 2
    around an arc, as a reviewer's attack did at t_k = k / 2 + 1, or random sets), no part of the honest survivors
    cut off from the rest has t_k shares of each member's mask seed, at t = k / 2 + 2 + the most colluding
    neighbours of an honest user; at t = k / 2 + 1 (no colluders) two runs open the arc between them."""
    rng = np.random.default_rng(n + degree)
    g = graph.Graph(n, degree, bytes(range(32)))
    half, order = degree // 2, g.order.tolist()
    colluders = set(rng.choice(n, colluding, replace=False).tolist())
    most = max(sum(v in colluders for v in g.neighbours(u)) for u in range(n) if u not in colluders)
    threshold = half + 2 + most
    arcs = [set(order[start:start + half] + order[start + 2 * half + 1:start + 3 * half + 1])
            for start in range(0, n - 3 * half - 1, 3)]
    samples = [set(rng.choice(n, size, replace=False).tolist()) for size in rng.integers(half, n // 2, 300)]
    for removed in arcs + samples:
        assert not _a_part_opens(g, removed - colluders, colluders, threshold)
    if colluding == 0:
        assert all(_a_part_opens(g, removed, set(), half + 1) for removed in arcs)


@pytest.mark.parametrize("n, removed, degree, trials", [(100, 20, 6, 6000), (100, 30, 8, 6000), (300, 60, 8, 3000)])
def test_disconnection_exact_and_its_bound_against_the_monte_carlo(n, removed, degree, trials):
    """(c): the Monte Carlo's frequency of two or more long runs (a disconnected graph of honest survivors) matches
    the exact count within 5 binomial sd; the bound is the expected pairs of long runs (5 sd) and at least the
    exact probability."""
    runs = simulate(n, removed // 2, removed - removed // 2, degree, trials, np.random.default_rng(46))[3]
    exact, bound = graph.disconnection_exact(n, removed, degree), graph.disconnection_bound(n, removed, degree)
    assert 0 < exact <= bound
    assert abs((runs >= 2).mean() - exact) <= 5 * math.sqrt(exact * (1 - exact) / trials)
    pairs = runs * (runs - 1) / 2
    if bound < 1:
        assert abs(pairs.mean() - bound) <= 5 * math.sqrt(max(pairs.var(), bound) / trials)


def test_the_disconnection_bound_is_above_the_exact_probability_and_tight_when_small():
    for n, removed in ((40, 10), (100, 30), (200, 40)):
        for degree in range(2, 22, 2):
            exact, bound = graph.disconnection_exact(n, removed, degree), graph.disconnection_bound(n, removed, degree)
            assert exact <= bound + 1e-12
            if bound < 1e-3:
                assert bound <= 1.01 * exact, (n, removed, degree)


def test_the_complete_graphs_closed_form_is_the_terms_computed_at_k_n_minus_1():
    """complete_graph's closed form against the terms minimised over every threshold at k = n - 1 (what it replaced:
    arrays of n values, 24 GB at n = 10^9), on every (n, C, D) with n < 60, feasible or not; and at n = 10^9 at once."""
    for n in range(2, 60):
        for colluding in range(n):
            for dropouts in range(n - colluding):
                assert graph.complete_graph(n, colluding, dropouts) == graph._minimised(n, colluding, dropouts, n - 1)
    assert graph.guarantee(10**9, 10**7, 10**7, 10**9 - 1).failure == 0


@pytest.mark.parametrize("n, colluding", [(24, 6), (25, 6), (100, 0), (100, 33), (301, 30), (12, 0)])
def test_the_complete_graph_is_todays_threshold_rule(n, colluding):
    """k = n - 1: every neighbourhood holds all C colluders; t = floor((n + C) / 2) + 1 = sharing_parties.threshold
    with D = C, every term 0 while the survivors can reveal."""
    from privagg.protocols.parameters import honest_users
    from privagg.protocols.sharing_parties import threshold

    complete = graph.complete_graph(n, colluding, 0)
    assert complete.threshold == (n + colluding) // 2 + 1
    assert complete.failure == 0 and complete.complete
    honest = honest_users(n, (n - colluding) / n)  # what a task's honest fraction G counts
    assert honest == n - colluding
    assert threshold(SimpleNamespace(n_users=n, honest_users=honest)) == complete.threshold


def test_the_least_degree_meets_the_target_and_the_one_below_does_not():
    found = graph.least_degree(1000, 50, 50, 2.0 ** -40)
    assert found.failure <= 2.0 ** -40 and not found.complete
    assert graph.guarantee(1000, 50, 50, found.degree - 2).failure > 2.0 ** -40
    assert found.collusion <= found.equivocation  # (d) implies (a)


def test_the_least_degree_grows_with_users_colluders_and_dropouts():
    degrees = [graph.least_degree(n, n // 20, n // 20, 2.0 ** -40).degree for n in (300, 1000, 3000, 10000)]
    assert degrees == sorted(degrees) and degrees[-1] < 300
    assert [graph.least_degree(1000, c, 50, 2.0 ** -40).degree for c in (0, 20, 50, 100)] == \
        sorted(graph.least_degree(1000, c, 50, 2.0 ** -40).degree for c in (0, 20, 50, 100))
    by_dropouts = [graph.least_degree(1000, 50, d, 2.0 ** -40).degree for d in (0, 20, 50, 100)]
    assert by_dropouts == sorted(by_dropouts)
    by_failure = [graph.least_degree(1000, 50, 50, f).degree for f in (1e-3, 1e-6, 2.0 ** -40)]
    assert by_failure == sorted(by_failure)


def test_impossible_inputs_are_refused_naming_the_field():
    with pytest.raises(ParameterError, match="users"):
        graph.least_degree(10, 3, 2, 1e-6)  # 3 C + 2 D >= n: not even the complete graph
    with pytest.raises(ParameterError, match="failure"):
        graph.least_degree(100, 5, 5, 1.0)
    with pytest.raises(ParameterError, match="degree"):
        graph.guarantee(100, 5, 5, 7)
    with pytest.raises(ParameterError, match="dropouts"):
        graph.least_degree(100, 50, 50, 1e-6)


def test_the_bisection_finds_the_least_degree_a_scan_finds():
    """least_degree bisects over k, taking the total as non-increasing in k: on a grid, its k is the least a scan
    of every even degree finds (or the complete graph when none meets the target)."""
    for n in (12, 41, 100, 257):
        for colluding, dropouts in ((0, 0), (0, n // 10), (n // 20, n // 20), (n // 10, n // 10), (n // 5, n // 20)):
            for failure in (1e-2, 1e-6, 2.0 ** -40):
                scan = next((found for degree in range(2, n - 1, 2)
                             if (found := graph.guarantee(n, colluding, dropouts, degree)).failure <= failure),
                            graph.complete_graph(n, colluding, dropouts))
                assert graph.least_degree(n, colluding, dropouts, failure) == scan, (n, colluding, dropouts, failure)
