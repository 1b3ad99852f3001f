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

``wang``
    Wang et al.'s variation-ratio reduction (VLDB 2024; shared/papers
    shuffle-vector-aggregation.md §5.3), with a simpler last step derived
    here. A randomizer with ratio bound p = e^eps0, total variation beta and
    ratio bound q to any other input decomposes, for the two inputs x0, x1 of
    the changed user, as R(x0) = p a P0 + a P1 + (1 - a - p a) M and R(x1) =
    a P0 + p a P1 + (1 - a - p a) M with a = beta / (p - 1); every other user's
    report is P0 with probability r = a p / q, P1 with probability r, and
    something independent of x0, x1 otherwise. The common part M weighs the
    same on both sides, so by joint convexity delta(eps) <= (1 + p) a times
    the divergence of the rest, which is the FMT pair above with clone
    probability 2 r instead of e^-eps0 (Wang et al. keep M in their final
    step, which is tighter still; not done here). For k-ary randomized
    response beta = (e^eps0 - 1)/(e^eps0 + k - 1); the default beta =
    (e^eps0 - 1)/(e^eps0 + 1) holds for every eps0-LDP randomizer, and gives
    clone probability 2 / (e^eps0 + 1) >= e^-eps0, so never a worse bound
    than FMT's.
"""

from __future__ import annotations

import importlib
import math
import sys
import threading

import numpy as np

from ..core.bisection import least_meeting
from ..errors import ParameterError, check_delta, check_epsilon, check_integer
from .description import REPLACE_ONE

METHODS = ("best", "fmt", "wang", "blanket", "closed-form")
_WINDOW_SD = 40  # Bin(n - 1, e^-eps0) is kept within its mean +- 40 sd (+ 50); the rest is counted as delta
# Binomial terms one evaluation of FMT's or Wang et al.'s bound may sum (its window over C). Measured: about 17 us
# a term (a binomial tail of C, C up to n), and an accountant takes about 27 evaluations (Brent's method for each
# of fmt and wang), so this budget keeps account shuffle, and any calibration that calls the bounds, to about a
# minute on a 2-core machine (n = 10^7 at eps0 = 1 is 122,095 terms, 52 s); memory is a few arrays of the window.
CLONE_WINDOW_MAX = 125_000
# e^eps is taken at eps <= 700 wherever a delta(eps) is computed: e^710 passes a float, and as delta falls with
# eps, treating a larger eps as 700 only overstates delta (an epsilon of 1e300 is legal, if meaningless)
EXP_CAP = 700.0


def closed_form_epsilon(local_epsilon: float, n_users: int, delta: float) -> float:
    """FMT's closed form; refused outside its condition eps0 <= ln(n / (16 ln(2/delta)))."""
    floor = 16 * math.log(2 / delta)
    if n_users <= floor:  # no local epsilon meets it (it said "at most ... = -inf")
        raise ParameterError("users", f"more than 16 ln(2/delta) = {floor:.4g} for the closed form (use --method fmt)",
                             n_users)
    limit = math.log(n_users / floor)
    if local_epsilon > limit:
        raise ParameterError("local-epsilon", f"at most ln(n / (16 ln(2/delta))) = {limit:.4g} for the closed form "
                             "(use --method fmt)", local_epsilon)
    e0 = math.exp(local_epsilon)
    return math.log1p((e0 - 1) / (e0 + 1) * (8 * math.sqrt(e0 * math.log(4 / delta) / n_users) + 8 * e0 / n_users))


def load_special_meanwhile() -> None:
    """Start importing scipy.special, which the numerical bounds here evaluate with, on another thread: a command about
    to calibrate through them (the privacy blanket's) overlaps the import, 0.2 to 0.3 s of numpy's and scipy's
    modules, with reading its input. The bounds import it as before, then waiting for the thread or finding it
    done."""
    if "scipy.special" not in sys.modules:
        threading.Thread(target=importlib.import_module, args=("scipy.special",), daemon=True).start()


_STIRLING = (1 / 12, 1 / 360, 1 / 1260, 1 / 1680, 1 / 1188)


def _stirling_error(k: np.ndarray) -> np.ndarray:
    """ln k! - ln(sqrt(2 pi k) (k / e)^k) for k >= 1: exact through gammaln up to 15, the series above. Each element
    is evaluated by its own formula alone (gammaln, the costly one, only where k <= 15: the blanket accountant's
    windows have none), the same bits as evaluating both everywhere and choosing."""
    k = np.asarray(k)
    small = k <= 15
    out = np.empty(np.shape(k))
    kk = k[~small]  # the series, where it converges
    k2 = kk * kk
    s0, s1, s2, s3, s4 = _STIRLING
    out[~small] = (s0 - (s1 - (s2 - (s3 - s4 / k2) / k2) / k2) / k2) / kk
    if small.any():
        from scipy.special import gammaln

        ks = k[small]
        out[small] = gammaln(ks + 1) - (ks + 0.5) * np.log(ks) + ks - 0.5 * math.log(2 * math.pi)
    return out


def _deviance(x: np.ndarray, mean: np.ndarray) -> np.ndarray:
    """x ln(x / mean) + mean - x without cancellation: a series in v = (x - mean)/(x + mean) when |v| < 0.1. Each
    element is evaluated by its own formula alone (the same bits as evaluating both everywhere and choosing)."""
    v = (x - mean) / (x + mean)
    near = np.abs(v) < 0.1
    x, mean = np.broadcast_to(x, v.shape), np.broadcast_to(mean, v.shape)
    out = np.empty(v.shape)
    xs, vs = x[near], v[near]
    term, total, v2 = 2 * xs * vs, (xs - mean[near]) * vs, vs * vs
    for j in range(1, 12):  # |v| < 0.1: the terms fall by 100 each step; 12 steps reach 1e-24 of the first
        term = term * v2
        total = total + term / (2 * j + 1)
    out[near] = total
    far = ~near
    xf, mf = x[far], mean[far]
    with np.errstate(divide="ignore", invalid="ignore"):
        out[far] = xf * np.log(xf / mf) + mf - xf
    return out


def _binomial_tail(k, trials, p: float, upper: bool, repeated: bool = False) -> np.ndarray:
    """Pr[Bin(trials, p) > k] (``upper``) = I_p(k + 1, trials - k), the regularised incomplete beta, or its
    complement Pr[<= k], each computed directly at x = p (1 - p would lose p's digits when p is tiny).

    ``repeated``: the request repeats most of its (k, trials) pairs (the blanket accountant's windows: one row per
    blanket size, nearly the same thresholds in each, about 5,000 distinct pairs among 100,000 at n = 5 x 10^6);
    each distinct pair is then evaluated once. The function is elementwise, so the values are the same bits;
    where the pairs are mostly distinct, finding them costs more than it saves."""
    from scipy.special import betainc, betaincc

    k, n = np.floor(np.asarray(k, dtype=np.float64)), np.asarray(trials, dtype=np.float64)
    inner = (k >= 0) & (k < n)
    a, b = np.where(inner, k + 1, 1.0), np.where(inner, n - k, 1.0)
    tail = betainc if upper else betaincc
    # (a, b) as one integer key a span + b: where both are whole numbers (k is; trials may not be) and it fits
    if repeated and a.size and a.max() * (b.max() + 1) < 2**62 and np.array_equal(b, np.floor(b)):
        span = int(b.max()) + 1
        key = a.astype(np.int64) * span + b.astype(np.int64)
        distinct = np.unique(key)  # then searchsorted: twice as fast as unique's return_inverse (an argsort)
        a_distinct, b_distinct = (part.astype(np.float64) for part in np.divmod(distinct, span))
        value = tail(a_distinct, b_distinct, p)[np.searchsorted(distinct, key)]
    else:
        value = tail(a, b, p)
    return np.where(inner, value, np.where(k < 0, float(upper), float(not upper)))


def binomial_cdf(k, trials, p: float) -> np.ndarray:
    """Pr[Bin(trials, p) <= k]: 0 for k < 0, 1 for k >= trials. Not scipy.special.bdtr, which names the same
    formula but loses accuracy as trials grow (scipy 1.17: 0.512 for Bin(10^8, 0.1) <= 10^7, truly 0.50008;
    0.699 at 10^9 trials); scipy.stats.binom is accurate but slow to import (tests/privacy compare the two)."""
    return _binomial_tail(k, trials, p, upper=False)


def binomial_sf(k, trials, p: float, repeated: bool = False) -> np.ndarray:
    """Pr[Bin(trials, p) > k]: 1 for k < 0, 0 for k >= trials (not scipy's bdtrc, for the reason
    :func:`binomial_cdf` gives: 0.159 for Bin(10^9, 1/2) > 5 x 10^8, truly 0.49999). ``repeated``: most (k,
    trials) pairs of the request recur, each distinct one is evaluated once (:func:`_binomial_tail`)."""
    return _binomial_tail(k, trials, p, upper=True, repeated=repeated)


def binomial_pmf(c: np.ndarray, trials, p: float) -> np.ndarray:
    """Pr[Bin(trials, p) = c], 0 < p < 1 (``trials`` a number or an array broadcast against ``c``), by Loader's
    saddle-point form (as R's dbinom and boost's are accurate to about 1e-15 relative): exp(-stirling errors -
    deviances) sqrt(n / (2 pi c (n - c))). Written out because scipy.stats, which has it, takes most of a
    second to import, and every blanket command calibrates with this (tests/privacy compare it with
    scipy.stats.binom.pmf)."""
    c = np.asarray(c, dtype=np.float64)
    n, q = np.asarray(trials, dtype=np.float64), 1.0 - p
    inner = (c > 0) & (c < n)
    ci = np.where(inner, c, 1.0)
    with np.errstate(divide="ignore", invalid="ignore"):  # at c = 0 or n (n = 1): replaced below
        log_pmf = (_stirling_error(n) - _stirling_error(ci) - _stirling_error(n - ci)
                   - _deviance(ci, n * p) - _deviance(n - ci, n * q)
                   + 0.5 * np.log(n / (2 * math.pi * ci * (n - ci))))
    ends = np.where(c == 0, n * math.log1p(-p), n * math.log(p))
    return np.where(inner, np.exp(log_pmf), np.where((c == 0) | (c == n), np.exp(ends), 0.0))


def _clone_window(n_users: int, clone: float) -> int:
    """Terms of the window over C ~ Bin(n - 1, clone) that one evaluation of the clone bound sums."""
    trials = n_users - 1
    sd = math.sqrt(trials * clone * (1 - clone))
    return min(trials + 1, 2 * math.ceil(_WINDOW_SD * sd + 50) + 1)


def check_clone_window(n_users: int, clone: float) -> None:
    """Refuse, before any work, a clone bound whose window would pass CLONE_WINDOW_MAX terms, naming the most
    users that would run (the window grows as sqrt(n))."""
    if (width := _clone_window(n_users, clone)) <= CLONE_WINDOW_MAX:
        return
    sd_max = ((CLONE_WINDOW_MAX - 1) / 2 - 51) / _WINDOW_SD
    most = int(sd_max * sd_max / (clone * (1 - clone))) + 1
    while most > 2 and _clone_window(most, clone) > CLONE_WINDOW_MAX:
        most -= max(1, most // 10**6)
    raise ParameterError("users", f"at most about {most:.4g} for the numerical shuffle bounds here (each evaluation "
                         f"would sum {width:.3g} binomial terms, above {CLONE_WINDOW_MAX:,}: about a minute in "
                         "all; the closed forms have no such limit: account shuffle --method closed-form, or "
                         "--calibration paper for the blanket protocols)", n_users)


_RATIO_EXACT = 2.0**26  # below it alpha = ratio / (ratio + 1) keeps 1 - alpha to 2^-26 relative: the first form


def _clone_divergence(epsilon: float, ratio: float, clone: float, n_users: int) -> float:
    """E_C[sum_a max(0, P_C(a) - e^eps Q_C(a))]: the victim is of type 0 with probability ratio / (ratio + 1)
    (type 1 otherwise) under P and the reverse under Q, and C ~ Bin(n - 1, clone) other users are clones,
    each of type 0 or 1 with probability 1/2 (module docstring)."""
    e = math.exp(epsilon)
    if ratio <= e:  # k1 = alpha - e (1 - alpha) <= 0, alpha = ratio / (ratio + 1)
        return 0.0
    if ratio < _RATIO_EXACT:
        alpha = ratio / (ratio + 1)
        k1, k2 = alpha - e * (1 - alpha), (1 - alpha) - e * alpha
        r = k1 / -k2
    else:  # alpha and 1 - alpha as 1 / (1 + 1 / ratio) and (1 / ratio) / (1 + 1 / ratio): alpha itself rounds to 1
        # once ratio passes 2^53 (eps0 above 36.7), which made k1 1 and k2 -e, and every delta 0 (a reviewer's run)
        inverse = 1.0 / ratio
        k1, k2 = (1.0 - e * inverse) / (1.0 + inverse), (inverse - e) / (1.0 + inverse)
        r = (1.0 - e * inverse) / (e - inverse)  # k1 / -k2
    trials, p = n_users - 1, clone
    check_clone_window(n_users, clone)
    mean, sd = trials * p, math.sqrt(trials * p * (1 - p))
    lo, hi = max(0, math.floor(mean - _WINDOW_SD * sd - 50)), min(trials, math.ceil(mean + _WINDOW_SD * sd + 50))
    c = np.arange(lo, hi + 1)
    weights = binomial_pmf(c, trials, p)
    outside = max(0.0, 1.0 - float(weights.sum()))
    m = np.floor((c + 1) / (1 + r)) + 1  # the least a with a > (C + 1) / (1 + r), i.e. a (1 + r) > C + 1:
    # where 1 + r rounds to 1 (r below 2^-53, eps above 36.7) the floor is one off; each side checked exactly
    m = np.where((m - 2 - c) + (m - 1) * r > 0, m - 1, m)
    m = np.where((m - 1 - c) + m * r <= 0, m + 1, m)
    # Pr[Bin(c, 1/2) > j] (0 where j >= c)
    divergence = k1 * binomial_sf(m - 2, c, 0.5) + k2 * binomial_sf(m - 1, c, 0.5)
    return float(np.dot(weights, np.clip(divergence, 0.0, 1.0))) + outside


LOCAL_EPSILON_VACUOUS = 700.0  # below ln(max float) = 709.78


def fmt_delta(epsilon: float, local_epsilon: float, n_users: int) -> float:
    """An upper bound on delta(eps) of n shuffled eps0-LDP reports (FMT's numerical bound, module docstring).

    Past eps0 = LOCAL_EPSILON_VACUOUS no user is a clone (probability e^-eps0 < 1e-304) and the bound is the
    trivial 1 (e^eps0 overflowed a float: blanket-vector's composed eps0 at 64 coordinates of 65,536 levels)."""
    if epsilon >= local_epsilon:  # the reports are eps0-DP on their own
        return 0.0
    if local_epsilon > LOCAL_EPSILON_VACUOUS:
        return 1.0
    return _clone_divergence(epsilon, math.exp(local_epsilon), math.exp(-local_epsilon), n_users)


def variation_ratio_delta(epsilon: float, local_epsilon: float, n_users: int, total_variation: float | None = None,
                          ratio_bound: float | None = None) -> float:
    """An upper bound on delta(eps) by Wang et al.'s variation-ratio reduction (module docstring, ``wang``).

    ``total_variation`` beta (default (e^eps0 - 1)/(e^eps0 + 1), the most any eps0-LDP randomizer has) and
    ``ratio_bound`` q (default e^eps0) describe the randomizer beside p = e^eps0.
    """
    if epsilon >= local_epsilon:  # the reports are eps0-DP on their own
        return 0.0
    if local_epsilon > LOCAL_EPSILON_VACUOUS:  # e^eps0 would overflow; no clone: the trivial bound
        return 1.0
    p = math.exp(local_epsilon)
    beta = math.tanh(local_epsilon / 2) if total_variation is None else total_variation
    q = p if ratio_bound is None else ratio_bound
    alpha = beta / math.expm1(local_epsilon)  # not p - 1: 0 at eps0 = 1e-300
    return min(1.0, (p + 1) * alpha) * _clone_divergence(epsilon, p, min(1.0, 2 * alpha * p / q), n_users)


def _least_epsilon(bound, local_epsilon: float, delta: float) -> float:
    """The least eps in [0, eps0] (to a relative 1e-12) with bound(eps) <= delta (shuffling never hurts: every
    bound meets any delta at eps0)."""
    # at eps0 every bound is 0 (the reports are eps0-DP on their own), though rounding may leave it a hair above
    return least_meeting(lambda e: 0.0 if e >= local_epsilon else bound(e), delta, 0.0, local_epsilon)


def randomized_response_total_variation(local_epsilon: float, values: int) -> float:
    """beta of k-ary randomized response: (e^eps0 - 1) / (e^eps0 + k - 1)."""
    shrink = math.exp(-local_epsilon)  # divided through by e^eps0, which overflows past eps0 = 709
    return -math.expm1(-local_epsilon) / (1 + (values - 1) * shrink)


def randomized_response_blanket(local_epsilon: float, values: int) -> float:
    """gamma of k-ary randomized response as a blanket: keeping the value with e^eps0 / (e^eps0 + k - 1) is
    sending it with 1 - gamma and a uniform value with gamma = k / (e^eps0 + k - 1)."""
    shrink = math.exp(-local_epsilon)  # divided through by e^eps0, which overflows past eps0 = 709
    return values * shrink / (1 + (values - 1) * shrink)


def shuffle_epsilons(local_epsilon: float, n_users: int, delta: float, method: str = "best",
                     total_variation: float | None = None, values: int | None = None) -> dict[str, float]:
    """eps such that shuffling n eps0-LDP reports is (eps, delta)-DP, by each method asked for: ``method`` one
    of METHODS, ``best`` every proven numerical one that applies (fmt, wang, and blanket for k-ary randomized
    response), of which the least is the answer (each certifies its own eps).

    ``total_variation``: beta of the randomizer, where known (wang). ``values`` k: the randomizer is k-ary
    randomized response, which sets beta = (e^eps0 - 1)/(e^eps0 + k - 1) and allows the blanket accountant
    (:func:`privagg.privacy.blanket.blanket_delta`, gamma = k / (e^eps0 + k - 1)) where its window is
    affordable (:func:`privagg.privacy.blanket.window_width`; past it ``best`` leaves it out, ``blanket`` is
    refused at once)."""
    local_epsilon = check_epsilon(local_epsilon, "local-epsilon")
    n_users = check_integer("users", n_users, 2, 2**53)
    delta = check_delta(delta)
    if method not in METHODS:
        raise ParameterError("method", f"one of {', '.join(METHODS)}", method)
    most = math.tanh(local_epsilon / 2)  # (e^eps0 - 1)/(e^eps0 + 1): no eps0-LDP randomizer varies more
    if total_variation is not None and values is not None:
        raise ParameterError("total-variation", "left out with --values (k-ary randomized response sets it)",
                             total_variation)
    if total_variation is not None and not 0 < total_variation <= most:
        raise ParameterError("total-variation", f"in (0, (e^eps0 - 1)/(e^eps0 + 1) = {most:.6g}]", total_variation)
    if total_variation is not None and method not in ("wang", "best"):
        raise ParameterError("total-variation", "given with --method wang or best only", total_variation)
    if values is not None:
        values = check_integer("values", values, 2, 2**53)
        total_variation = randomized_response_total_variation(local_epsilon, values)
    if method == "blanket" and values is None:
        raise ParameterError("values", "given with --method blanket (k: the randomizer is k-ary randomized "
                             "response)", None)
    if method == "closed-form":
        return {method: closed_form_epsilon(local_epsilon, n_users, delta)}
    # Wang et al.'s bound holds at the randomizer's own beta and at the default (any eps0-LDP randomizer), and is
    # not monotone in beta (for k-ary RR the default can be the smaller): the least of the two
    wang = (lambda e: variation_ratio_delta(e, local_epsilon, n_users)) if total_variation is None else \
        (lambda e: min(variation_ratio_delta(e, local_epsilon, n_users),
                       variation_ratio_delta(e, local_epsilon, n_users, total_variation)))
    bounds = {"fmt": lambda e: fmt_delta(e, local_epsilon, n_users), "wang": wang}
    if values is not None:
        from .blanket import WINDOW_MAX, blanket_delta, window_width

        gamma = randomized_response_blanket(local_epsilon, values)
        if gamma <= 0:  # e^-eps0 underflowed: no blanket at all, only the trivial eps = eps0
            if method == "blanket":
                raise ParameterError("local-epsilon", f"at most {LOCAL_EPSILON_VACUOUS:g} for --method blanket (the "
                                     "blanket probability k / (e^eps0 + k - 1) is below the smallest float)",
                                     local_epsilon)
        elif (width := window_width(gamma, n_users, values)) <= WINDOW_MAX:
            bounds["blanket"] = lambda e: blanket_delta(e, gamma, n_users, values, delta * 1e-4)
        elif method == "blanket":
            raise ParameterError("users", f"fewer for --method blanket at k = {values} and eps0 = {local_epsilon:g} "
                                 f"(each blanket size would cost {width} binomial tails, above {WINDOW_MAX}: seconds "
                                 "per evaluation; the default, best, uses FMT's and Wang et al.'s bounds here)",
                                 n_users)
    chosen = bounds if method == "best" else {method: bounds[method]}
    return {name: _least_epsilon(bound, local_epsilon, delta) for name, bound in chosen.items()}


def shuffle_epsilon(local_epsilon: float, n_users: int, delta: float, method: str = "best",
                    total_variation: float | None = None, values: int | None = None) -> float:
    """The least eps of :func:`shuffle_epsilons`: shuffling n eps0-LDP reports is (eps, delta)-DP."""
    return min(shuffle_epsilons(local_epsilon, n_users, delta, method, total_variation, values).values())


BINARY_SPLITS = 200  # the exact binary RR eps searches the splits within this many of either end
BINARY_STATES_MAX = 2 * 10**7  # values of the splits' two laws it may hold (8 bytes each: 160 MB)


BINARY_EPSILON_MAX = 36.0  # 1 / (1 + e^36) = 2.3e-16: p = 1 - that still differs from 1 in a float


def binary_randomized_response_epsilon(local_epsilon: float, n_users: int, delta: float) -> float:
    """The exact eps at ``delta`` of n shuffled binary randomized response reports (the released count of ones):
    the largest over the datasets where the other n - 1 users hold j ones, j within BINARY_SPLITS of either end
    (every dataset when n - 1 < 2 BINARY_SPLITS, so exact over all of them; on every instance searched in full
    the worst lay near an end: docs/privacy.md). The count is Bern(p or 1 - p) + Bin(j, p) + Bin(n - 1 - j,
    1 - p), each binomial kept within 20 sd + 30 of its mean (the mass left out is below 1e-80). Refused, before
    any work, where the laws would pass BINARY_STATES_MAX values (they grow as sqrt(n))."""
    if local_epsilon > BINARY_EPSILON_MAX:
        raise ParameterError("local-epsilon", f"at most {BINARY_EPSILON_MAX:g} for the exact binary randomized "
                             "response eps (past it the flip probability 1 / (1 + e^eps0) is lost beside 1 in a "
                             "float)", local_epsilon)
    p = math.exp(local_epsilon) / (1 + math.exp(local_epsilon))
    others = n_users - 1
    ends = range(min(BINARY_SPLITS, others + 1))
    states = 2 * len(ends) * 2 * (20 * math.sqrt(others * p * (1 - p)) + 31)
    if states > BINARY_STATES_MAX:
        raise ParameterError("users", f"fewer for the exact binary randomized response eps (its laws would hold "
                             f"{states:.3g} values, above {BINARY_STATES_MAX:.0e})", n_users)
    laws = [_windowed_sum(j, p, others - j, 1 - p) for j in sorted({*ends, *(others - j for j in ends)})]
    width = max(law.size for law in laws) + 1
    first, second = np.zeros((len(laws), width)), np.zeros((len(laws), width))
    for row, law in enumerate(laws):  # the changed user holds 1 (first) or 0 (second); others are aligned alike
        first[row, :law.size] += (1 - p) * law
        first[row, 1:law.size + 1] += p * law
        second[row, :law.size] += p * law
        second[row, 1:law.size + 1] += (1 - p) * law

    def exact(epsilon: float) -> float:
        e = math.exp(epsilon)
        return float(max(np.maximum(first - e * second, 0).sum(axis=1).max(),
                         np.maximum(second - e * first, 0).sum(axis=1).max()))

    return _least_epsilon(exact, local_epsilon, delta)


def _windowed_sum(n1: int, p1: float, n2: int, p2: float) -> np.ndarray:
    """The law of Bin(n1, p1) + Bin(n2, p2), each kept within 20 sd + 30 of its mean, from the window's start
    (the start is the same for both of the changed user's values, so the laws stay aligned)."""
    def window(trials: int, p: float) -> np.ndarray:
        if trials == 0:
            return np.ones(1)
        sd = math.sqrt(trials * p * (1 - p))
        lo = max(0, math.floor(trials * p - 20 * sd - 30))
        return binomial_pmf(np.arange(lo, min(trials, math.ceil(trials * p + 20 * sd + 30)) + 1), trials, p)

    return np.convolve(window(n1, p1), window(n2, p2))


REFERENCE = ("Feldman, McMillan, Talwar, Hiding among the clones (FOCS 2021); Wang et al., Privacy amplification "
             "via shuffling: unified, simplified, and tightened (VLDB 2024); derivations in "
             "src/privagg/privacy/shuffle.py and docs/privacy.md")
ASSUMPTIONS = (REPLACE_ONE, "each user sends one report from an eps0-LDP randomizer, drawn independently",
               "a trusted shuffler permutes the n reports uniformly", "all n users take part")
