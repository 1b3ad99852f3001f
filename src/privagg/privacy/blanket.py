"""The blanket probability gamma of randomized response in the shuffle model (Balle, Bell, Gascon, Nissim 2019;
Scott, Cormode, Maple 2021, as summarised in ../shared/papers/shuffle-vector-aggregation.md §2-3).

Each user reports his value with probability 1 - gamma and a value uniform over the B values otherwise
(R^PH). Two ways to set gamma for (eps, delta)-DP of the n shuffled reports:

``paper``
    The closed forms the authors' code evaluates (reference §3.1, t = 1, d = 1, k = B values):
    gamma = max(14 B ln(2/delta) / ((n - 1) eps^2), 27 B / ((n - 1) eps)) for eps < 1 (Balle et al.'s
    theorem), and max(80 B ln(2/delta) / ((n - 1) eps^2), 36 B / (11 (n - 1) eps)) for 1 <= eps < 6 (the
    vector paper's extension; its proof was not retrieved). Refused where gamma would exceed 1 or eps >= 6.
``tight``
    The least gamma whose reports are certified by the shuffle accountant (:mod:`privagg.privacy.shuffle`):
    R^PH is an eps0-LDP randomizer with e^eps0 = 1 + B (1 - gamma) / gamma and total variation 1 - gamma, so
    delta(eps) is at most the smaller of FMT's numerical bound and Wang et al.'s variation-ratio bound for the
    n (honest) reports; delta falls as gamma grows, so a root finder gives the least gamma (Brent's method on
    ln delta over ln gamma, about 12 evaluations, then nudged up until the bound holds: the gamma returned is
    always one the accountant certifies).
"""

from __future__ import annotations

import math
from collections.abc import Callable

from ..errors import ParameterError, check_delta, check_epsilon
from .shuffle import fmt_delta, variation_ratio_delta

METHODS = ("tight", "paper")
PAPER_EPSILON_MAX = 6.0
_GAMMA_MIN = 1e-15  # below it a blanket is no blanket: no accountant certifies one at any useful (eps, delta)
_GAMMA_MAX = 1 - 1e-12  # gamma = 1 sends no information; just below it the local epsilon is still finite


def local_epsilon(gamma: float, domain_size: int) -> float:
    """eps0 of R^PH: ln(1 + B (1 - gamma) / gamma)."""
    return math.log1p(domain_size * (1 - gamma) / gamma)


def paper_gamma(epsilon: float, delta: float, n_users: int, domain_size: int) -> float:
    """The reference's closed form (module docstring); a ParameterError where it exceeds 1 or eps >= 6."""
    epsilon, delta = check_epsilon(epsilon), check_delta(delta)
    if epsilon >= PAPER_EPSILON_MAX:
        raise ParameterError("epsilon", f"below {PAPER_EPSILON_MAX:g} for --calibration paper (its closed forms "
                             "cover eps < 1 and 1 <= eps < 6; use --calibration tight)", epsilon)
    log_term, users, B = math.log(2 / delta), n_users - 1, domain_size
    if epsilon < 1:  # divided by eps twice, not by eps^2, which underflows to 0 below about 1e-162
        gamma = max(14 * B * log_term / users / epsilon / epsilon, 27 * B / (users * epsilon))
    else:
        gamma = max(80 * B * log_term / users / epsilon / epsilon, 36 * B / (11 * users * epsilon))
    if gamma > 1:
        needed = f"about {math.ceil(gamma * users) + 1} users for B = {B}" if math.isfinite(gamma) else "no n will do"
        raise ParameterError("users", f"enough for the paper's gamma to be a probability (it is {gamma:.3g} here: "
                             f"{needed}; or use --calibration tight)", n_users)
    return gamma


def delta_at(epsilon: float, gamma: float, n_users: int, domain_size: int) -> float:
    """An upper bound on delta(eps) of n shuffled R^PH reports: the smaller of FMT's and Wang et al.'s bounds."""
    if gamma >= 1:
        return 0.0
    eps0 = local_epsilon(gamma, domain_size)
    return min(fmt_delta(epsilon, eps0, n_users), variation_ratio_delta(epsilon, eps0, n_users, 1 - gamma))


def _least_gamma(delta_of: Callable[[float], float], delta: float) -> float:
    """The least gamma in [_GAMMA_MIN, _GAMMA_MAX] with delta_of(gamma) <= delta, to a relative 1e-12, for a
    delta_of that falls as gamma grows and meets delta at _GAMMA_MAX (checked by the callers)."""
    from scipy.optimize import brentq

    if delta_of(_GAMMA_MIN) <= delta:
        return _GAMMA_MIN
    gap = lambda x: math.log(max(delta_of(math.exp(x)), 1e-300)) - math.log(delta)  # noqa: E731
    gamma = math.exp(brentq(gap, math.log(_GAMMA_MIN), math.log(_GAMMA_MAX), xtol=1e-13))
    step = 1e-13
    while delta_of(gamma) > delta:  # Brent may stop on either side of the root: take the side that holds
        gamma, step = min(gamma * (1 + step), _GAMMA_MAX), 2 * step
    return gamma


def tight_gamma(epsilon: float, delta: float, n_users: int, domain_size: int) -> float:
    """The least gamma (to a relative 1e-12) whose reports the accountant certifies for (eps, delta)."""
    epsilon, delta = check_epsilon(epsilon), check_delta(delta)
    if delta_at(epsilon, _GAMMA_MAX, n_users, domain_size) > delta:
        raise ParameterError("users", f"enough for a blanket to hide one report at ({epsilon:g}, {delta:g}) (not "
                             "even gamma = 1 - 1e-12 does here)", n_users)
    return _least_gamma(lambda g: delta_at(epsilon, g, n_users, domain_size), delta)


# --- vectors: R_{d,k,n,t} (reference Algorithm 2) ------------------------------------------------------------


def paper_vector_gamma(epsilon: float, delta: float, n_users: int, dimension: int, levels: int,
                       coordinates: int) -> float:
    """The reference's §3.1 gamma for vectors in [0,1]^d rounded to {0..k}, t coordinates a user, as the
    authors' code evaluates it (t = 1: the histogram's forms times d; t >= 2: advanced composition, 56 and
    2016 d k ln(1/delta) ln(2t/delta) / ((n - 1) eps^2)); refused where it exceeds 1 or for eps >= 6."""
    epsilon, delta = check_epsilon(epsilon), check_delta(delta)
    if coordinates == 1:
        return paper_gamma(epsilon, delta, n_users, dimension * levels)
    if epsilon >= PAPER_EPSILON_MAX:
        raise ParameterError("epsilon", f"below {PAPER_EPSILON_MAX:g} for --calibration paper", epsilon)
    constant = 56 if epsilon < 1 else 2016
    gamma = (constant * dimension * levels * math.log(1 / delta) * math.log(2 * coordinates / delta)
             / (n_users - 1) / epsilon / epsilon)
    if gamma > 1:
        needed = f"about {math.ceil(gamma * (n_users - 1)) + 1} users" if math.isfinite(gamma) else "no n will do"
        raise ParameterError("users", f"enough for the paper's gamma to be a probability (it is {gamma:.3g} here: "
                             f"{needed}; or use --calibration tight)", n_users)
    return gamma


def vector_local_epsilon(gamma: float, levels: int, coordinates: int) -> float:
    """eps0 of one user's t reports (derived, docs/derivations.md "Privacy blanket"): each report (l, y) has
    its coordinate uniform and independent of the input, and y randomized response over the k + 1 levels, so
    its ratio bound is 1 + (k + 1) (1 - gamma) / gamma whatever d; t reports on distinct coordinates compose."""
    return coordinates * local_epsilon(gamma, levels + 1)


def vector_delta_at(epsilon: float, gamma: float, n_users: int, levels: int, coordinates: int) -> float:
    """The accountant's delta(eps) for n users' reports: for t = 1 as the histogram over k + 1 values (total
    variation at most 1 - gamma), for t > 1 by FMT's bound at the composed eps0."""
    if gamma >= 1:
        return 0.0
    if coordinates == 1:
        return delta_at(epsilon, gamma, n_users, levels + 1)
    return fmt_delta(epsilon, vector_local_epsilon(gamma, levels, coordinates), n_users)


def tight_vector_gamma(epsilon: float, delta: float, n_users: int, levels: int, coordinates: int) -> float:
    """The least gamma (to a relative 1e-12) whose reports the accountant certifies for (eps, delta)."""
    epsilon, delta = check_epsilon(epsilon), check_delta(delta)
    if vector_delta_at(epsilon, _GAMMA_MAX, n_users, levels, coordinates) > delta:
        raise ParameterError("users", f"enough for a blanket to hide one user's {coordinates} reports at "
                             f"({epsilon:g}, {delta:g})", n_users)
    return _least_gamma(lambda g: vector_delta_at(epsilon, g, n_users, levels, coordinates), delta)
