"""Noise calibration for the balls-into-bins mechanism M^BIB (shuffle FE paper, §3.1).

M^BIB throws one real ball into one of s special bins and (expected) k + n p
noisy balls uniformly into all m bins. Writing mu = (k + n p) s / m for the
expected number of noisy balls in a set of s bins, two calibrations are offered:

``closed_form``
    Theorem 3.1 as reconstructed in the reference (§2.1, marked RECON: the
    exact statement was not retrieved): M^BIB is (eps, delta)-DP when
    mu >= 32 ln(2/delta) / eps^2.

``numeric`` (default)
    The smallest mu for which the privacy-loss tail is at most delta,

        Pr[X1 + 1 >= e^eps X2] <= delta,  X1, X2 iid Binomial(n, mu/n),

    computed exactly from binomial pmfs and tails (reference §2.1, the
    authors' calibration). X1 and X2 are the noisy balls in the special sets
    of two neighbouring inputs; the privacy loss of an output is
    ln((1 + X1) / X2) (docs/derivations.md, "Balls into bins"). The model is
    used only while mu <= n / 100, where its modelling error is negligible.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy import stats

from ..errors import ParameterError, check_delta, check_epsilon, check_integer
from .guarantee import PrivacyGuarantee

METHODS = ("numeric", "closed_form")
_MU_TOLERANCE = 1e-3  # absolute tolerance of the bisection on mu
# The iid-binomial model ignores that the two noise counts compete for the same
# dummies (a relative effect of order mu/n); keep it where that is negligible.
MAX_MU_FRACTION = 0.01


@dataclass(frozen=True)
class NoiseCalibration:
    """Expected noisy balls per special set (``mu``) and the guarantee it buys."""

    mu: float
    guarantee: PrivacyGuarantee


def closed_form_noise(epsilon: float, delta: float) -> float:
    """mu = 32 ln(2/delta) / eps^2 (Theorem 3.1, RECON)."""
    return 32.0 * math.log(2.0 / check_delta(delta)) / check_epsilon(epsilon) ** 2


def satisfies_closed_form(noise_balls: float, special_bins: int, bins: int, epsilon: float, delta: float) -> bool:
    """The balls-into-bins condition (k + n p) s / m >= 32 ln(2/delta) / eps^2."""
    return noise_balls * special_bins / bins >= closed_form_noise(epsilon, delta)


def privacy_loss_tail(mu: float, n_users: int, epsilon: float) -> float:
    """Pr[X1 + 1 >= e^eps X2] for X1, X2 iid Binomial(n_users, mu / n_users).

    Summed exactly over X2 up to 40 standard deviations above its mean; the
    probability mass beyond that is added whole, so the value is an upper
    bound that is exact to double precision.
    """
    n = n_users
    p = mu / n
    if not 0 <= p <= 1:
        raise ParameterError("mu", f"in [0, n_users={n}]", mu)
    top = int(min(n, math.ceil(mu + 40 * math.sqrt(mu) + 50)))
    x2 = np.arange(top + 1)
    threshold = np.ceil(math.exp(epsilon) * x2 - 1.0)  # X1 >= threshold
    tail_x1 = np.where(threshold <= 0, 1.0, stats.binom.sf(threshold - 1, n, p))
    total = float(np.sum(stats.binom.pmf(x2, n, p) * tail_x1))
    return min(1.0, total + float(stats.binom.sf(top, n, p)))


def numeric_noise(epsilon: float, delta: float, n_users: int) -> float:
    """The smallest mu (to 1e-3) with privacy_loss_tail(mu, n, eps) <= delta."""
    epsilon, delta = check_epsilon(epsilon), check_delta(delta)
    n = check_integer("n_users", n_users, 2)
    hi = min(MAX_MU_FRACTION * n, closed_form_noise(epsilon, delta))
    if privacy_loss_tail(hi, n, epsilon) > delta:
        raise ParameterError(
            "n_users", f"large enough that the numeric calibration's mu stays below n/{round(1 / MAX_MU_FRACTION)}"
            " (otherwise use calibration=closed_form)", n)
    lo = 0.0
    while hi - lo > _MU_TOLERANCE:
        mid = 0.5 * (lo + hi)
        if privacy_loss_tail(mid, n, epsilon) <= delta:
            hi = mid
        else:
            lo = mid
    return hi


def calibrate(epsilon: float, delta: float, n_users: int, method: str = "numeric",
              model: str = "shuffle") -> NoiseCalibration:
    """mu for (epsilon, delta)-DP of M^BIB by ``method`` ("numeric" or "closed_form")."""
    if method == "numeric":
        mu = numeric_noise(epsilon, delta, n_users)
        how = ("numeric: exact binomial privacy-loss tail Pr[X1+1 >= e^eps X2] <= delta, "
               "X1, X2 ~ Bin(n, mu/n) (shuffle FE reference §2.1, authors' calibration)")
    elif method == "closed_form":
        mu = closed_form_noise(epsilon, delta)
        how = "closed form: mu >= 32 ln(2/delta)/eps^2 (shuffle FE paper Thm 3.1, reconstructed)"
    else:
        raise ParameterError("calibration", f"one of {', '.join(METHODS)}", method)
    return NoiseCalibration(mu, PrivacyGuarantee(float(epsilon), float(delta), model, how))
