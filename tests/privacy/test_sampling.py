"""Exact privacy of sampled counts (DPCS / DPDS): the one-pass prefix form against the plain 2-D table, the
reference's numbers, monotonicity, and the inverse."""

import math

import numpy as np
import pytest
from scipy.stats import binom

from privagg.errors import ParameterError
from privagg.privacy import sampling
from privagg.privacy.sampling import (chernoff_delta, largest_sampling_probability, loss_tail_bound, meets_delta,
                                      paper_sampling_probability, sampling_delta)


def table_delta(eps, p, m):
    """The hockey-stick divergence over the whole table of (count of a, count of b), both directions."""
    k = np.arange(m + 1)
    others = binom.pmf(k, m - 1, p)
    with_user = p * np.concatenate([[0.0], others[:-1]]) + (1 - p) * others
    d, d_prime = np.outer(with_user, others), np.outer(others, with_user)
    return max(np.maximum(d - math.exp(eps) * d_prime, 0).sum(), np.maximum(d_prime - math.exp(eps) * d, 0).sum())


@pytest.mark.parametrize("m", [1, 2, 5, 20, 200])
def test_the_prefix_form_equals_the_table(m):
    for eps in (0.1, 0.5, 1.0, 3.0):
        for p in (0.05, 0.4, 0.9):
            exact, ours = table_delta(eps, p, m), sampling_delta(eps, p, m)
            # the window's outside mass is added in full: never below the table, above it by at most 1e-200
            assert exact * (1 - 1e-9) <= ours <= exact * (1 + 1e-9) + 1e-200


def test_reference_values():
    """shared/papers/fair-dp-distributed-frequency.md §3.1, replace-one at p = 1 - e^-eps. The reference's
    exact deltas sit between the conventions 'others at m - 1' (ours, the conservative one) and 'others at
    m'; ours are within 12% above them. Its Chernoff column is reproduced to two digits."""
    for eps, m, exact, chernoff in [(0.5, 50, 1.0e-4, 9.0e-2), (0.5, 100, 5.6e-7, 8.0e-3), (1.0, 50, 5.0e-5, 0.24),
                                    (1.0, 100, 6.7e-8, 5.8e-2), (2.0, 100, 7.8e-6, 0.59)]:
        p = paper_sampling_probability(eps)
        assert exact <= sampling_delta(eps, p, m) <= 1.12 * exact
        assert chernoff_delta(p, m) == pytest.approx(chernoff, rel=0.06)


def test_delta_grows_with_p_and_shrinks_with_the_count():
    ps = np.linspace(0.05, 0.95, 19)
    deltas = [sampling_delta(1.0, p, 50) for p in ps]
    assert all(a <= b for a, b in zip(deltas, deltas[1:]))
    counts = [10, 20, 50, 100, 200]
    by_count = [sampling_delta(1.0, 0.6, m) for m in counts]
    assert all(a >= b for a, b in zip(by_count, by_count[1:]))
    assert sampling_delta(1.0, 1.0, 50) == 1.0  # everyone counted: no privacy
    assert sampling_delta(1.0, 0.3, 1) == pytest.approx(0.3)  # a lone holder: delta = p (reference's edge case)


def test_largest_p_meets_the_target_and_no_more():
    for eps, m in [(1.0, 20), (1.0, 100), (0.5, 100)]:
        p = largest_sampling_probability(eps, 1e-5, m)
        assert sampling_delta(eps, p, m) <= 1e-5 < sampling_delta(eps, p * (1 + 1e-6), m)
    assert largest_sampling_probability(1.0, 1e-5, 1) == pytest.approx(1e-5)  # a lone holder: delta = p


@pytest.mark.parametrize("call,match", [
    (lambda: sampling_delta(1.0, 0.0, 10), "sampling-probability must be in"),
    (lambda: sampling_delta(1.0, 1.5, 10), "sampling-probability must be in"),
    (lambda: sampling_delta(0.0, 0.5, 10), "epsilon must be"),
    (lambda: sampling_delta(1.0, 0.5, 0), "min count must be"),
    (lambda: largest_sampling_probability(1.0, 1.0, 10), "delta must be"),
])
def test_bad_input(call, match):
    with pytest.raises(ParameterError, match=match):
        call()


def test_the_cheap_bound_lies_above_the_computed_delta():
    """loss_tail_bound (a Chernoff bound on Pr[loss > eps]) plus the window's leftover (Bernstein) is at least what
    sampling_delta computes, from 2 to 10^6 holders, p from 1e-3 to 0.9999, eps from 0.01 to 50; and close to it
    somewhere (p near 1: the loss passes eps when nobody of a category is left out)."""
    closest = 0.0
    for m in (1, 2, 5, 30, 300, 5000, 10**6):
        for p in (1e-300, 1e-12, 0.001, 0.01, 0.1, 0.5, 0.9, 0.99, 0.9999):
            for eps in (0.01, 0.5, 1.0, 5.0, 50.0):
                bound = loss_tail_bound(eps, p, m) + sampling._window_leaves(p, m)
                computed = sampling_delta(eps, p, m)
                assert bound >= computed * (1 - 1e-9)
                closest = max(closest, computed / bound if computed > 1e-300 else 0.0)
    assert closest > 0.5


def test_meets_delta_gives_the_computed_answer():
    for m in (3, 50, 4000, 10**6):
        for p in (0.2, 0.7, 0.99, 0.999999):
            for eps in (0.3, 1.0, 3.0):
                computed = sampling_delta(eps, p, m)
                for target in (computed, computed * (1 + 1e-12), computed * (1 - 1e-12), 1e-300, 1e-9, 0.5):
                    if 0 < target < 1:
                        assert meets_delta(eps, p, m, target) == (computed <= target)


@pytest.mark.parametrize("eps,delta,m", [(1.0, 1e-9, 500), (0.5, 1e-6, 40_000), (2.0, 1e-12, 3 * 10**6),
                                         (0.1, 1e-8, 10**7)])
def test_the_largest_probability_is_the_plain_bisections(eps, delta, m):
    """The cheap bound only skips evaluations whose answer it already knows: the same p to the last bit."""
    from privagg.core.bisection import bisect

    plain = bisect(lambda p: sampling_delta(eps, p, m) > delta, 0.0, 1.0, sampling._BISECTION_STEPS)[0]
    assert largest_sampling_probability(eps, delta, m) == plain


def test_billions_of_holders_are_calibrated_without_their_largest_windows(monkeypatch):
    """beta n = 5 x 10^9 (10^12 users, beta 0.005): the bisection's windows at p = 1/2, 3/4, ... held millions of
    binomial terms each, 4 to 11 s in all (issue 44); the bound decides them, and only windows near the answer,
    p' = 1 - 1.4e-8, of a few hundred terms, are summed."""
    from privagg.protocols.registry import calibrate

    windows = []
    computed = sampling.sampling_delta
    monkeypatch.setattr(sampling, "sampling_delta",
                        lambda eps, p, m: windows.append(sampling.window_terms(m, p)) or computed(eps, p, m))
    params = calibrate("dpcs", epsilon=1.0, delta=1e-9, n_users=10**12, domain_size=100, min_count_fraction=0.005)
    assert params.sampling_probability == pytest.approx(1 - 1.44e-8, abs=1e-9)
    assert max(windows) < 10_000
