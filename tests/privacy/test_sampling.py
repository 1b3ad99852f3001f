"""Exact privacy of sampled counts (DPCS / DPDS): the one-pass prefix form against the plain 2-D table, the
reference's numbers, monotonicity, and the inverse."""

import math

import numpy as np
import pytest
from scipy.stats import binom

from privagg.errors import ParameterError
from privagg.privacy.sampling import (chernoff_delta, largest_sampling_probability, paper_sampling_probability,
                                      sampling_delta)


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
