"""Noise calibration for the balls-into-bins mechanism M^BIB (shuffle FE paper, §3.1).

M^BIB throws one real ball into one of s special bins and noisy balls
uniformly into all m bins. In FE0/FE1 the noisy balls are the n users'
dummies: n floor(rho) of them, plus one from each user with probability
rho - floor(rho); each lands in a given special set with probability
1/bins (bins = B for FE0 and M^BIB, b for FE1). mu = n rho / bins is the
expected number of noisy balls per special set. Three calibrations:

``numeric`` (default)
    The authors' code's criterion (SDPFE), not the paper's theorem: the
    smallest mu (to 1e-3) with Pr[X1 + 1 >= e^eps X2] <= delta, where X1
    and X2 are the noisy balls in the special sets of two neighbouring inputs
    and ln((1 + X1) / X2) is the privacy loss (docs/derivations.md, "Balls
    into bins"). The tail is computed under the protocol's own dummy law, not
    the authors' iid Bin(n, mu/n) model, which understates it by about 16 mu/n
    (docs/derivations.md, "Modelling caveats"): given X2, the conditional law
    of X1 is dominated by X1' = Bin(n floor(rho), 1/(bins-1)) +
    Bin(n, frac/(bins-frac)), independent of X2, so summing
    Pr[X2 = x2] Pr[X1' >= e^eps x2 - 1] with exact binomial pmfs bounds the
    tail from above.

``hockey_stick``
    The smallest mu whose hockey-stick divergence E[(1 - e^eps X2/(1+X1))_+]
    -- the exact delta(eps) of M^BIB for disjoint special sets -- is at most
    delta, bounded the same way. Tighter than the tail criterion (about 16%
    less noise at eps = 1, delta = 1e-10); derived here, not the paper's.

``closed_form``
    Theorem 3.1 as reconstructed in the reference (§2.1, RECON: the exact
    statement was not retrieved): mu >= 32 ln(2/delta) / eps^2. Proved here
    for eps <= 1 only; for large eps it is not private (the chance that no
    noise lands in S' exceeds delta), so eps > 1 is refused.

FE1's special sets S_x = {(u, v, w): h_{u,v}(x) = w} overlap: the changed
user's real message lies in both S_x and S_y with probability theta = p_col,
and then the two outputs have the same law. By joint convexity of the
hockey-stick divergence, delta_FE1(mu) <= (1 - theta) delta_disjoint(mu (1 -
theta)), where delta_disjoint is the disjoint-sets bound with per-set hit
probability (1 - theta) / bins (docs/derivations.md, "FE1's overlapping
special sets"). ``overlap=theta`` below computes exactly that; since the
tail bounds the divergence, the tail criterion gets the same treatment.
"""

from __future__ import annotations

import math

import numpy as np

from ..core.bisection import bisect
from ..errors import ParameterError, check_delta, check_epsilon, check_integer
from .shuffle import EXP_CAP, binomial_cdf, binomial_pmf, binomial_sf

METHODS = ("numeric", "hockey_stick", "closed_form")
CLOSED_FORM_MAX_EPSILON = 1.0
_MU_TOLERANCE = 1e-3  # absolute tolerance of the bisection on mu
_MU_MAX = 1e9  # beyond this many noisy balls per special set the search gives up


def closed_form_noise(epsilon: float, delta: float) -> float:
    """mu = 32 ln(2/delta) / eps^2 (Theorem 3.1, RECON), for 0 < eps <= 1."""
    epsilon = check_epsilon(epsilon)
    if epsilon > CLOSED_FORM_MAX_EPSILON:
        raise ParameterError("epsilon", f"in (0, {CLOSED_FORM_MAX_EPSILON:g}] for the closed-form calibration "
                             "(use calibration=numeric)", epsilon)
    return 32.0 * math.log(2.0 / check_delta(delta)) / epsilon / epsilon  # not eps^2: it underflows below 1e-162


def satisfies_closed_form(noise_balls: float, special_bins: int, bins: int, epsilon: float, delta: float) -> bool:
    """The balls-into-bins condition (k + n p) s / m >= 32 ln(2/delta) / eps^2."""
    return noise_balls * special_bins / bins >= closed_form_noise(epsilon, delta)


# pmfs are kept within mean +- (40 sd + 500): by Chernoff the mass outside is below 1e-300 for any mean,
# so counting it as failure costs nothing down to delta ~ 1e-298.
_WINDOW_SD, _WINDOW_PAD = 40, 500


def _binomial_sum(trials: tuple[int, int], probs: tuple[float, float]) -> tuple[int, np.ndarray, float]:
    """Bin(trials[0], probs[0]) + Bin(trials[1], probs[1]) on a window: (start, pmf, mass outside). The pmfs and
    tails are :mod:`privagg.privacy.shuffle`'s (more exact than scipy.stats, which agrees to 1e-11 relative, and
    the calibrations to the last bit over 576 settings; but it takes most of a second to import, and every FE
    calibration runs this: tests/privacy/test_balls_into_bins.py)."""
    start, pmf, outside = 0, np.ones(1), 0.0
    for t, p in zip(trials, probs):
        if t == 0 or p == 0 or p == 1:  # a point mass, at 0 or at t
            start += t if p == 1 else 0
            continue
        mean, sd = t * p, math.sqrt(t * p * (1 - p))
        lo = max(0, math.floor(mean - _WINDOW_SD * sd - _WINDOW_PAD))
        hi = min(t, math.ceil(mean + _WINDOW_SD * sd + _WINDOW_PAD))
        pmf = np.convolve(pmf, binomial_pmf(np.arange(lo, hi + 1), t, p))
        start += lo
        outside += float(binomial_cdf(lo - 1, t, p) + binomial_sf(hi, t, p))
    return start, pmf, outside


def _noise_laws(mu: float, n_users: int, bins: int, overlap: float):
    """Windowed laws of X2 and of the dominating X1' (module docstring) for noise level mu.

    rho = mu bins / n dummies per user, each landing in one special set's
    private part with probability hit = (1 - overlap) / bins. Each law is
    (start, pmf on start.., mass outside the window).
    """
    if not mu >= 0:
        raise ParameterError("mu", "a number >= 0", mu)
    rho = mu * bins / n_users
    whole, frac = math.floor(rho), rho - math.floor(rho)
    hit = (1.0 - overlap) / bins
    trials = (n_users * whole, n_users)
    return (_binomial_sum(trials, (hit, frac * hit)),
            _binomial_sum(trials, (hit / (1 - hit), frac * hit / (1 - frac * hit))))


def _reverse_cumsum(values: np.ndarray) -> np.ndarray:
    """out[i] = sum(values[i:]), with a trailing 0."""
    return np.concatenate([np.cumsum(values[::-1])[::-1], [0.0]])


def privacy_loss_tail(mu: float, n_users: int, bins: int, epsilon: float, overlap: float = 0.0) -> float:
    """An upper bound on Pr[X1 + 1 >= e^eps X2] for M^BIB fed by n users' dummies.

    X2 = Bin(n floor(rho), 1/bins) + Bin(n, frac/bins) with rho = mu bins / n;
    X1 is replaced by the dominating X1' of the module docstring. Both are
    computed exactly on a window of +-40 standard deviations; the mass outside
    the windows is bounded by binomial tails and counted as failure, so the
    result is an upper bound. ``overlap`` = theta > 0 (FE1): the bound
    (1 - theta) tail(mu (1 - theta)) of the module docstring.
    """
    (start2, pmf2, outside2), (start1, pmf1, outside1) = _noise_laws(mu, n_users, bins, overlap)
    sf1 = _reverse_cumsum(pmf1) + outside1  # sf1[i] bounds Pr[X1' >= start1 + i]
    x2 = start2 + np.arange(pmf2.size)
    threshold = np.ceil(math.exp(min(epsilon, EXP_CAP)) * x2 - 1)  # X1' >= threshold fails
    index = np.clip(threshold - start1, 0, pmf1.size).astype(np.int64)
    tail_x1 = np.where(threshold <= 0, 1.0, sf1[index])
    return (1.0 - overlap) * min(1.0, float(pmf2 @ np.minimum(tail_x1, 1.0)) + outside2)


def hockey_stick_divergence(mu: float, n_users: int, bins: int, epsilon: float, overlap: float = 0.0) -> float:
    """An upper bound on delta(eps) = E[(1 - e^eps X2 / (1 + X1))_+], M^BIB's exact privacy profile.

    The hockey-stick divergence between the outputs on neighbouring inputs
    (docs/derivations.md, "Privacy loss of M^BIB"); the integrand grows with
    X1, so the dominating X1' bounds it from above. It is never more than
    :func:`privacy_loss_tail`, so it needs less noise. ``overlap`` = theta
    > 0 (FE1): (1 - theta) delta_disjoint(mu (1 - theta)), by joint convexity.
    """
    (start2, pmf2, outside2), (start1, pmf1, outside1) = _noise_laws(mu, n_users, bins, overlap)
    x1 = start1 + np.arange(pmf1.size)
    mass = _reverse_cumsum(pmf1)  # Pr[X1' >= start1 + i]
    weighted = _reverse_cumsum(pmf1 / (1.0 + x1))  # E[1/(1+X1'); X1' >= start1 + i]
    x2 = start2 + np.arange(pmf2.size)
    ratio = math.exp(min(epsilon, EXP_CAP)) * x2
    # the integrand is positive exactly for X1' >= floor(e^eps x2 - 1) + 1
    index = np.clip(np.floor(ratio - 1) + 1 - start1, 0, pmf1.size).astype(np.int64)
    inner = np.clip(mass[index] - ratio * weighted[index], 0.0, None) + outside1
    return (1.0 - overlap) * min(1.0, float(pmf2 @ np.minimum(inner, 1.0)) + outside2)


def _too_much_noise(epsilon: float, delta: float) -> ParameterError:
    return ParameterError("epsilon", f"large enough that mu <= {_MU_MAX:g} noisy balls a bin give ({epsilon:g}, "
                          f"{delta:g})-DP (or raise delta)", epsilon)


def divergence_floor(mu: float, n_users: int, bins: int, epsilon: float, overlap: float = 0.0) -> float:
    """A closed-form lower bound on both :func:`privacy_loss_tail` and :func:`hockey_stick_divergence` at mu:
    the larger of (docs/derivations.md, "A closed-form floor under the bounds")

    * (1 - theta) (1 / sqrt(1 + 24 mu (1 - theta)) - (e^eps - 1)): the noise difference X1 - X2 (variance
      2 mu (1 - theta)) puts at least 1 / sqrt(1 + 12 Var) on one value, which a one-sided test turns into
      delta (too little noise for a tiny epsilon);
    * (1 - theta) (1 - e^eps E[X2] E[1 / (1 + X1')]) by Jensen, with E[1 / (1 + X1')] <= (1 - e^-s) / s at
      s = E[X1'] (the dominating X1' has the larger mean: an epsilon below about ln(bins / (bins - 1)) is
      refused at every mu).

    It costs no pmf, so the searches skip the bounds wherever it already exceeds delta."""
    hit = (1.0 - overlap) / bins
    e = math.exp(min(epsilon, EXP_CAP))
    spread = 1.0 / math.sqrt(1.0 + 24.0 * mu * (1.0 - overlap)) - math.expm1(min(epsilon, EXP_CAP))
    rho = mu * bins / n_users
    whole, frac = math.floor(rho), rho - math.floor(rho)
    mean_x2 = n_users * hit * (whole + frac)
    mean_x1 = n_users * (whole * hit / (1 - hit) + frac * hit / (1 - frac * hit))
    inverse = 1.0 if mean_x1 == 0 else -math.expm1(-mean_x1) / mean_x1  # bounds E[1 / (1 + X1')]
    return (1.0 - overlap) * max(spread, 1.0 - e * mean_x2 * inverse)


def _smallest_mu(bound, epsilon: float, delta: float, n_users: int, bins: int, overlap: float) -> float:
    """The smallest mu (to 1e-3) with bound(mu, n, bins, eps, overlap) <= delta; the bound is not computed
    where :func:`divergence_floor` already exceeds delta (a margin of 1e-9 for its rounding), so a refusal
    that the floor decides takes no pmf."""
    epsilon, delta = check_epsilon(epsilon), check_delta(delta)
    n = check_integer("n_users", n_users, 2)
    bins = check_integer("bins", bins, 2)

    def holds(mu: float) -> bool:
        return (divergence_floor(mu, n, bins, epsilon, overlap) * (1 - 1e-9) <= delta
                and bound(mu, n, bins, epsilon, overlap) <= delta)

    hi = -math.log(delta)  # Pr[X2 = 0] <= delta needs about this much noise
    while not holds(hi):
        hi *= 2
        if hi > _MU_MAX:
            raise _too_much_noise(epsilon, delta)
    steps = max(0, math.ceil(math.log2(hi / _MU_TOLERANCE)))  # halvings until the bracket is within tolerance
    return bisect(holds, 0.0, hi, steps)[1]


def numeric_noise(epsilon: float, delta: float, n_users: int, bins: int, overlap: float = 0.0) -> float:
    """The smallest mu (to 1e-3) whose privacy_loss_tail is at most delta."""
    return _smallest_mu(privacy_loss_tail, epsilon, delta, n_users, bins, overlap)


def hockey_stick_noise(epsilon: float, delta: float, n_users: int, bins: int, overlap: float = 0.0) -> float:
    """The smallest mu (to 1e-3) whose hockey_stick_divergence is at most delta."""
    return _smallest_mu(hockey_stick_divergence, epsilon, delta, n_users, bins, overlap)


DERIVATIONS = "docs/derivations.md"
METHOD_DETAIL = {
    "numeric": ("the authors' code's criterion (SDPFE), not the paper's theorem: privacy-loss tail "
                "Pr[X1+1 >= e^eps X2] <= delta, bounded with exact binomial pmfs under the protocol's dummy law"),
    "hockey_stick": ("M^BIB's privacy profile E[(1 - e^eps X2/(1+X1))_+] <= delta, bounded with exact binomial "
                     "pmfs under the protocol's dummy law (derived here, not the paper's)"),
    "closed_form": "mu >= 32 ln(2/delta)/eps^2 (shuffle FE paper Thm 3.1 as reconstructed; proof for eps <= 1 here)",
}


def calibrate(epsilon: float, delta: float, n_users: int, bins: int, method: str = "numeric",
              overlap: float = 0.0) -> float:
    """mu for (epsilon, delta)-DP of M^BIB by ``method``, one of METHODS (module docstring).

    ``overlap`` is FE1's theta = p_col; the closed form ignores it (it is
    not proven for overlapping sets, and :func:`delta_at` reports the
    delta its mu actually buys).
    """
    if not 0 <= overlap < 1:
        raise ParameterError("overlap", "in [0, 1)", overlap)
    if method == "numeric":
        return numeric_noise(epsilon, delta, n_users, bins, overlap)
    if method == "hockey_stick":
        return hockey_stick_noise(epsilon, delta, n_users, bins, overlap)
    if method == "closed_form":
        check_integer("n_users", n_users, 2)
        check_integer("bins", bins, 2)
        mu = closed_form_noise(epsilon, delta)
        if mu > _MU_MAX:  # as the searches: no more noise than that (mu = 6.7e20 at eps = 1e-9 made 15 TiB arrays)
            raise _too_much_noise(epsilon, delta)
        return mu
    raise ParameterError("calibration", f"one of {', '.join(METHODS)}", method)


def delta_at(epsilon: float, mu: float, n_users: int, bins: int, overlap: float = 0.0) -> float:
    """The delta that noise level mu buys at ``epsilon``: the hockey-stick bound, whatever the calibration."""
    return hockey_stick_divergence(mu, n_users, bins, check_epsilon(epsilon), overlap)
