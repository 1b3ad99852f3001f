"""Privacy of sampled counts (DPCS, DPCS*, DPDS; fair DP paper, Thm III.1 as reconstructed in
../shared/papers/fair-dp-distributed-frequency.md §3.1), computed exactly.

Each user takes part with probability p and the released counts are those
of the participants. Neighbours replace one user's item a by b (n public).
Only the counts of a and b differ in law. :func:`sampling_delta` takes m
and puts m - 1 other users on each of a and b: under D the released pair
is (X + B, Y), under D' it is (X, Y + B), with X, Y ~ Bin(m - 1, p) the
others and B ~ Bern(p) the changed user. When the dataset holds every
category at least m times, a replaced user's category keeps m - 1 other
holders and the new one has m, so the protocols call it with that m (less
the users whose coins an adversary may know: protocols/sampling_sharing.py).

Derived here: with f the Bin(m - 1, p) pmf and g(i) = p f(i - 1) + (1 - p)
f(i) the law of X + B, the privacy loss is l(i) - l(j) with l = ln(g / f),
which grows with i (f(i - 1) / f(i) = i (1 - p) / ((m - i) p)). So for each i
the j with loss above eps form a prefix, and delta(eps) = sum_i [g(i)
F(J_i) - e^eps f(i) G(J_i)] over the prefixes (F, G cumulative sums): one
pass, no m x m table. By symmetry both directions are equal. Larger counts
give smaller delta (checked numerically), so m = ceil(beta n) is the worst
case, and delta grows with p, so the largest p meeting a target is found by
bisection. Counts are kept to a window of the mean +- 40 sd (+ 50); the
mass outside it is added to delta in full, so the result stays an upper
bound.

The paper-consistent choice p = 1 - e^-eps and the loose Chernoff closed
form delta = exp(-p (1 - p)^2 m / 3) (derived in the reference, §3.1) are
given for comparison.
"""

from __future__ import annotations

import math

import numpy as np

from ..core.bisection import bisect
from ..errors import ParameterError, check_delta, check_epsilon, check_integer
from .shuffle import EXP_CAP

_BISECTION_STEPS = 60
_WINDOW_SD = 40  # counts beyond mean +- 40 sd (+ 50): at most 1e-200 of mass in the tests' cases, added to delta


# One evaluation of sampling_delta sums the binomial terms of its window, 80 sd + 102 of them (sd = sqrt(m p (1 - p)),
# largest at p = 1/2: 40 sqrt(m) + 102): measured at 0.65 to 0.8 us a term on 2 AMD EPYC cores (4e6 terms at
# m = 10^10: 2.6 s; 4e7 at m = 10^12: 33 s and 0.7 GB; at n = 10^15 users the window alone took 2.1 GiB and
# failed). An evaluation is refused past SAMPLING_WINDOW_MAX terms (about 3 s), and a calibration before its first
# evaluation when the largest window (p = 1/2) passes it: beta n up to about 10^10 holders. A calibration's
# bisection moves p away from 1/2 and its windows shrink (measured: beta n = 5 10^9, 3.7 s in all; TSS's adaptive
# stage, 12 candidate counts an evaluation, 8.8 s at 5 10^8).
SAMPLING_WINDOW_MAX = 4 * 10**6


def window_terms(min_count: int, p: float = 0.5) -> float:
    """The binomial terms one :func:`sampling_delta` sums at ``min_count`` holders and probability ``p``."""
    m = max(int(min_count), 1)
    return min(m + 1.0, 2 * _WINDOW_SD * math.sqrt((m - 1) * p * (1 - p)) + 102)


def check_sampling_cost(min_count: int, p: float = 0.5, field: str = "users", got=None) -> None:
    """Refuse an evaluation of the exact accountant at ``min_count`` holders and probability ``p`` (p = 1/2: the
    largest, before a calibration) whose window passes SAMPLING_WINDOW_MAX terms, naming ``field`` (its value
    ``got``) and the largest least count that fits."""
    terms = window_terms(min_count, p)
    if terms <= SAMPLING_WINDOW_MAX:
        return
    most = ((SAMPLING_WINDOW_MAX - 102) / (2 * _WINDOW_SD * math.sqrt(p * (1 - p)))) ** 2 + 1
    raise ParameterError(field, f"fewer, or a smaller --min-count-fraction (the exact sampling accountant takes a "
                         f"least count beta n of at most about {most:.3g} holders; here {min_count}: "
                         f"{terms:.3g} binomial terms an evaluation, above {SAMPLING_WINDOW_MAX:.0e})",
                         min_count if got is None else got)


def _check_probability(p: float) -> float:
    if not (0 < p <= 1):
        raise ParameterError("sampling-probability", "in (0, 1]", p)
    return float(p)


def sampling_delta(epsilon: float, p: float, min_count: int) -> float:
    """The exact delta(eps) of the sampled counts, every count at least ``min_count`` (module docstring)."""
    from scipy.stats import binom

    epsilon, p = min(check_epsilon(epsilon), EXP_CAP), _check_probability(p)  # delta falls with eps: a cap overstates
    m = check_integer("min count", min_count, 1)
    if p == 1:
        return 1.0  # every user is counted: the changed user moves a count with certainty
    check_sampling_cost(m, p, "min count")
    # counts 0..m of X + B, kept to a window around the mean; the mass of X + B outside it is added in full
    mean, sd = (m - 1) * p, math.sqrt((m - 1) * p * (1 - p))
    lo, hi = max(0, math.floor(mean - _WINDOW_SD * sd) - 50), min(m, math.ceil(mean + _WINDOW_SD * sd) + 51)
    i = np.arange(lo, hi + 1)
    log_f = binom.logpmf(i, m - 1, p)  # logs: the tails of large counts underflow as probabilities
    log_g = np.logaddexp(math.log(p) + binom.logpmf(i - 1, m - 1, p), math.log1p(-p) + log_f)
    with np.errstate(invalid="ignore"):
        loss = log_g - log_f  # +inf at i = m, where f is 0
    f, g = np.exp(log_f), np.exp(log_g)
    below_f = binom.cdf(lo - 1, m - 1, p)  # the mass of X, and of X + B, below the window
    below_g = p * binom.cdf(lo - 2, m - 1, p) + (1 - p) * below_f
    outside_g = below_g + p * binom.sf(hi - 1, m - 1, p) + (1 - p) * binom.sf(hi, m - 1, p)  # below and above
    # for each i, the j with loss[j] < loss[i] - eps: a prefix of the increasing loss (the window's and all below)
    prefix = np.searchsorted(loss, loss - epsilon, side="left")
    cum_f = below_f + np.concatenate([[0.0], np.cumsum(f)])
    cum_g = below_g + np.concatenate([[0.0], np.cumsum(g)])
    terms = g * cum_f[prefix] - math.exp(epsilon) * f * cum_g[prefix]
    return min(1.0, float(np.clip(terms, 0.0, None).sum()) + outside_g)


def loss_tail_bound(epsilon: float, p: float, min_count: int) -> float:
    """A Chernoff bound on Pr_D[loss > eps], which is at least delta(eps) (module docstring): the loss of (i, j)
    is ln((m - j) / (m - i)), so with U = m - i ~ Bin(m, 1 - p) and V = m - j ~ 1 + Bin(m - 1, 1 - p),
    independent, it passes eps when V > e^eps U, and Pr[V - e^eps U > 0] <= E[e^(s (V - e^eps U))] for every
    s > 0 (the least over a grid of s). It costs no pmf (docs/derivations.md, "A cheap bound on the sampled
    counts' delta")."""
    m, e = min_count, math.exp(min(epsilon, EXP_CAP))
    if p >= 1:
        return 1.0
    # log(p + q e^x) from the logs of p and q = 1 - p: exact where q rounds to 1 (p = 1e-300: never log(0))
    log_p, log_q = math.log(p) if p > 0 else -math.inf, math.log1p(-p)
    s = np.geomspace(1e-9, 50.0, 400)
    log_mgf = s + (m - 1) * np.logaddexp(log_p, log_q + s) + m * np.logaddexp(log_p, log_q - s * e)
    return float(math.exp(min(0.0, float(log_mgf.min()))))


def _window_leaves(p: float, min_count: int) -> float:
    """Bernstein's bound on the mass :func:`sampling_delta` adds for the counts outside its window (mean +- (40 sd
    + 50) of Bin(m - 1, p), X + B within one of X): 2 exp(-t^2 / (2 (sd^2 + t / 3))) at t = 40 sd + 49."""
    sd = math.sqrt((min_count - 1) * p * (1 - p))
    t = _WINDOW_SD * sd + 49
    return 2 * math.exp(-t * t / (2 * (sd * sd + t / 3)))


def meets_delta(epsilon: float, p: float, min_count: int, delta: float) -> bool:
    """Whether ``sampling_delta(epsilon, p, min_count) <= delta``, the same answer, decided without the pmfs where
    :func:`loss_tail_bound` and the window's leftover already put it below delta (the computed delta is at most the
    exact one plus that leftover and its rounding: a margin of 1e-6 covers it). At beta n = 5 x 10^9 holders the
    bisection's windows of millions of terms all fall to the bound (4 to 11 s before, issue 44)."""
    if p < 1 and loss_tail_bound(epsilon, p, min_count) + _window_leaves(p, min_count) <= delta * (1 - 1e-6):
        return True
    return sampling_delta(epsilon, p, min_count) <= delta


def largest_sampling_probability(epsilon: float, delta: float, min_count: int) -> float:
    """The largest p (to about 1e-15) whose exact delta(eps) is at most ``delta``."""
    delta = check_delta(delta)
    check_sampling_cost(min_count, field="min count")  # the first step's window, the largest
    # delta tends to 0 with p, so some p > 0 always qualifies: report the bracket's side that does
    return bisect(lambda p: not meets_delta(epsilon, p, min_count, delta), 0.0, 1.0, _BISECTION_STEPS)[0]


def paper_sampling_probability(epsilon: float) -> float:
    """p = 1 - e^-eps: the choice consistent with the paper's variance comparison (reference §3.1)."""
    return -math.expm1(-check_epsilon(epsilon))


def chernoff_delta(p: float, min_count: int) -> float:
    """The loose closed form exp(-p (1 - p)^2 m / 3) (reference §3.1, derived there; eps = ln(1/(1 - p)))."""
    p = _check_probability(p)
    return math.exp(-p * (1 - p) ** 2 * check_integer("min count", min_count, 1) / 3)
