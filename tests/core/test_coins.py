"""Exact coins: the rational lower bound of e^x, the rounding of calibrated probabilities, the coins' law."""

import math
from fractions import Fraction

import numpy as np
import pytest

from privagg.core import coins


@pytest.mark.parametrize("x", [0.0, 1e-300, 1e-9, 0.1, 1.0, 2.5, 10.0, 37.7, 100.0])
def test_exp_lower_bound_is_below_e_x_and_close(x):
    low = coins.exp_lower_bound(x)
    # e^x >= 1 + x + x^2/2 exactly; the bound must also be within 2^-120 of e^x, which a float check at this
    # precision cannot see, so compare with a second, longer rational Taylor sum
    taylor, term, k = Fraction(0), Fraction(1), 0
    while term > Fraction(1, 2**200):  # the rest is below 2^-199 (x <= 100: the terms fall by half each step)
        taylor += term
        k += 1
        term = term * Fraction(x) / k
    assert low <= taylor
    assert taylor - low <= taylor * Fraction(1, 2**120)


def test_exp_lower_bound_above_the_cap_is_still_a_lower_bound():
    assert coins.exp_lower_bound(1e308) == coins.exp_lower_bound(128.0) < Fraction(math.exp(128.0)) * 2
    with pytest.raises(ValueError):
        coins.exp_lower_bound(-1.0)


def test_rounding_is_on_the_claims_side():
    for p in (0.1, 1 / 3, 0.5, 1 - 1e-12, 1e-17):
        assert Fraction(coins.at_least(p), coins.ONE) >= Fraction(p)
        assert Fraction(coins.at_most(p), coins.ONE) <= Fraction(p)
        assert coins.at_least(p) - coins.at_most(p) <= 1


def test_randomized_response_keep_survives_a_huge_epsilon():
    keep = coins.randomized_response_keep(1e308, 2**40)
    assert keep == coins.ONE - 1  # kept but for one 2^-53 chance: the ratio stays finite


def test_coins_have_their_numerators_probability():
    """2 million coins at K / 2^53 = 0.3 (4-sigma tolerance)."""
    n, k = 2_000_000, coins.at_most(0.3)
    hits = int(coins.coins(k, n, np.random.default_rng(1)).sum())
    assert abs(hits - 0.3 * n) <= 4 * math.sqrt(n * 0.3 * 0.7)
