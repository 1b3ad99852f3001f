"""Privacy amplification by shuffling: (eps, delta) of n shuffled eps0-LDP reports.

Feldman, McMillan and Talwar, "Hiding among the clones" (FOCS 2021), as
summarised in ../shared/papers/shuffle-vector-aggregation.md §5.2:

``fmt`` (numerical, the default)
    Shuffling n outputs of any eps0-LDP randomizer is a post-processing of
    the pair (A + D, C - A + 1 - D) against (A + 1 - D, C - A + D), where
    C ~ Bin(n - 1, e^-eps0), A ~ Bin(C, 1/2) and D ~ Bern(alpha), alpha =
    e^eps0 / (e^eps0 + 1). Given C the first coordinate decides the second, so
    delta(eps) <= E_C[sum_a max(0, P_C(a) - e^eps Q_C(a))] with
    P_C(a) = alpha B_C(a - 1) + (1 - alpha) B_C(a), Q_C(a) = alpha B_C(a) +
    (1 - alpha) B_C(a - 1), B_C = Bin(C, 1/2). Derived here (docs/privacy.md):
    P_C(a) - e^eps Q_C(a) = k1 B_C(a - 1) + k2 B_C(a) with k1 = alpha -
    e^eps (1 - alpha), k2 = (1 - alpha) - e^eps alpha < 0, and B_C(a - 1) /
    B_C(a) = a / (C - a + 1) grows with a, so the positive terms are those
    with a > (C + 1) / (1 + r), r = k1 / -k2: the sum is k1 (1 - F_C(m - 2)) +
    k2 (1 - F_C(m - 1)) with F_C the Bin(C, 1/2) cdf and m the least such a. By
    the symmetry a <-> C + 1 - a both directions give the same value. The
    expectation over C runs on a window of Bin(n - 1, e^-eps0) whose outside
    mass is added in full, so the result stays an upper bound. eps is found
    by bisection on [0, eps0] (shuffling never hurts).
``closed-form``
    eps <= ln(1 + (e^eps0 - 1)/(e^eps0 + 1) (8 sqrt(e^eps0 ln(4/delta) / n)
    + 8 e^eps0 / n)), valid when eps0 <= ln(n / (16 ln(2/delta))).

Wang et al.'s tighter numerical bound (VLDB 2024) is not implemented yet.
"""

from __future__ import annotations

import math

import numpy as np

from ..errors import ParameterError, check_delta, check_epsilon, check_integer
from .description import REPLACE_ONE

METHODS = ("fmt", "closed-form")
_WINDOW_SD = 40  # Bin(n - 1, e^-eps0) is kept within its mean +- 40 sd (+ 50); the rest is counted as delta
_BISECTION_STEPS = 50


def closed_form_epsilon(local_epsilon: float, n_users: int, delta: float) -> float:
    """FMT's closed form; refused outside its condition eps0 <= ln(n / (16 ln(2/delta)))."""
    limit = math.log(n_users / (16 * math.log(2 / delta))) if n_users > 16 * math.log(2 / delta) else -math.inf
    if local_epsilon > limit:
        raise ParameterError("local-epsilon", f"at most ln(n / (16 ln(2/delta))) = {limit:.4g} for the closed form "
                             "(use --method fmt)", local_epsilon)
    e0 = math.exp(local_epsilon)
    return math.log1p((e0 - 1) / (e0 + 1) * (8 * math.sqrt(e0 * math.log(4 / delta) / n_users) + 8 * e0 / n_users))


def fmt_delta(epsilon: float, local_epsilon: float, n_users: int) -> float:
    """An upper bound on delta(eps) of n shuffled eps0-LDP reports (FMT's numerical bound, module docstring)."""
    from scipy.stats import binom

    e0, e = math.exp(local_epsilon), math.exp(epsilon)
    alpha = e0 / (e0 + 1)
    k1, k2 = alpha - e * (1 - alpha), (1 - alpha) - e * alpha
    if k1 <= 0:
        return 0.0
    trials, p = n_users - 1, math.exp(-local_epsilon)
    mean, sd = trials * p, math.sqrt(trials * p * (1 - p))
    lo, hi = max(0, math.floor(mean - _WINDOW_SD * sd - 50)), min(trials, math.ceil(mean + _WINDOW_SD * sd + 50))
    c = np.arange(lo, hi + 1)
    weights = binom.pmf(c, trials, p)
    outside = max(0.0, 1.0 - float(weights.sum()))
    ratio = k1 / -k2
    m = np.floor((c + 1) / (1 + ratio)) + 1  # the least a with a > (C + 1) / (1 + r)
    divergence = k1 * binom.sf(m - 2, c, 0.5) + k2 * binom.sf(m - 1, c, 0.5)
    return float(np.dot(weights, np.clip(divergence, 0.0, 1.0))) + outside


def fmt_epsilon(local_epsilon: float, n_users: int, delta: float) -> float:
    """The least eps (to 1e-12 relative) whose FMT numerical bound on delta is at most ``delta``."""
    if fmt_delta(0.0, local_epsilon, n_users) <= delta:
        return 0.0
    lo, hi = 0.0, local_epsilon
    for _ in range(_BISECTION_STEPS):
        mid = (lo + hi) / 2
        lo, hi = (lo, mid) if fmt_delta(mid, local_epsilon, n_users) <= delta else (mid, hi)
    return hi


def shuffle_epsilon(local_epsilon: float, n_users: int, delta: float, method: str = "fmt") -> float:
    """eps such that shuffling n eps0-LDP reports is (eps, delta)-DP, by ``method`` (one of METHODS)."""
    local_epsilon = check_epsilon(local_epsilon)
    n_users = check_integer("users", n_users, 2, 2**53)
    delta = check_delta(delta)
    if method not in METHODS:
        raise ParameterError("method", f"one of {', '.join(METHODS)}", method)
    if method == "closed-form":
        return closed_form_epsilon(local_epsilon, n_users, delta)
    return fmt_epsilon(local_epsilon, n_users, delta)


REFERENCE = ("Feldman, McMillan, Talwar, Hiding among the clones (FOCS 2021), numerical analysis; "
             "src/privagg/privacy/shuffle.py")
ASSUMPTIONS = (REPLACE_ONE, "each user sends one report from an eps0-LDP randomizer, drawn independently",
               "a trusted shuffler permutes the n reports uniformly", "all n users take part")
