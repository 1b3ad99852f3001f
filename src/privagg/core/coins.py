"""Exact coins: every biased coin a randomizer flips has a dyadic probability K / 2^53, drawn as a 53-bit
uniform integer below K, so the law a privacy claim is about is the law the code samples.

Where the claim is a bound on a probability (a blanket at least gamma, a sampling probability at most p),
the numerator rounds the calibrated float the safe way (:func:`at_least`, :func:`at_most`). Where the claim
is a likelihood ratio (pure eps-LDP randomized response: keep / other <= e^eps), the numerator is derived in
exact rational arithmetic against a rigorous lower bound of e^eps (:func:`exp_lower_bound`), so no
floating-point cancellation (``1 - keep``) can put the ratio above e^eps (docs/privacy.md, "Pure eps-LDP,
exactly").
"""

from __future__ import annotations

import functools
import math
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from fractions import Fraction

COIN_BITS = 53
ONE = 1 << COIN_BITS  # the coins' denominator
_PRECISION_BITS = 128  # of the fixed-point Taylor sum in exp_lower_bound
_EXP_CAP = 128.0  # e^128 > 2^184: above it a lower bound of e^128 already decides every 53-bit coin


def coins(numerator: int, size: int, rng: np.random.Generator) -> np.ndarray:
    """``size`` coins, each 1 with probability exactly ``numerator`` / 2^53 (0 <= numerator <= 2^53)."""
    return rng.integers(0, ONE, size=size, dtype=np.int64) < numerator


def at_least(probability: float) -> int:
    """ceil(p 2^53): the least coin numerator whose probability is >= p (p 2^53 is exact in binary)."""
    return math.ceil(probability * ONE)


def at_most(probability: float) -> int:
    """floor(p 2^53): the largest coin numerator whose probability is <= p."""
    return math.floor(probability * ONE)


@functools.lru_cache(maxsize=256)
def exp_lower_bound(x: float) -> Fraction:
    """A rational L <= e^x for x >= 0, within a relative 2^-120 of it for x <= 128.

    The Taylor sum sum_k x^k / k! in fixed point at 2^-128, each term rounded down from the previous one, so
    every partial sum lies below e^x; x above 128 is capped there (e^128 is still a lower bound).
    """
    from fractions import Fraction  # here: the blanket's and sampling's coins (at_least, at_most) need none

    if not x >= 0:
        raise ValueError(f"x must be >= 0, got {x}")
    ratio = Fraction(min(x, _EXP_CAP))
    term, total, k = 1 << _PRECISION_BITS, 0, 0
    while term:
        total += term
        k += 1
        term = term * ratio.numerator // (ratio.denominator * k)
    return Fraction(total, 1 << _PRECISION_BITS)


@functools.lru_cache(maxsize=256)
def randomized_response_keep(epsilon: float, values: int) -> int:
    """K: randomized response over ``values`` values keeps the true one with probability K / 2^53 and sends
    each other with (2^53 - K) / (2^53 (values - 1)). K is the largest integer with K (values - 1) <=
    L (2^53 - K), L <= e^eps (:func:`exp_lower_bound`): the likelihood ratio K (values - 1) / (2^53 - K) never
    exceeds e^eps, and K / 2^53 is e^eps / (e^eps + values - 1) rounded down to 53 bits."""
    if values < 2:
        raise ValueError(f"values must be >= 2, got {values}")
    low = exp_lower_bound(epsilon)
    keep = math.floor(low * ONE / (values - 1 + low))
    return min(keep, ONE - 1)


@functools.lru_cache(maxsize=256)
def unary_flip(epsilon: float) -> int:
    """Q: optimized unary encoding sets a 0 bit with probability Q / 2^53 and keeps a 1 with 1/2. Q is the least
    integer with 2^53 - Q <= L Q, L <= e^eps: the ratio (1 - q) / q of a bit's two laws never exceeds e^eps,
    and Q / 2^53 is 1 / (e^eps + 1) rounded up to 53 bits."""
    low = exp_lower_bound(epsilon)
    return math.ceil(ONE / (1 + low))
