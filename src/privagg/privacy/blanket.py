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
    The least gamma whose reports the blanket accountant certifies (:func:`blanket_delta`, docs/privacy.md,
    "The blanket accountant"): given which other users sent noise (m ~ Bin(n - 1, gamma) of them), every other
    report is known, and the changed user's report hides among m uniform ones; the divergence D_m of that is
    computed exactly, and mixed over m with monotone buckets (D_m falls as m grows). Valid for every dataset
    and every B, and never looser than FMT's or Wang et al.'s bounds for R^PH (an eps0-LDP randomizer with
    e^eps0 = 1 + B (1 - gamma) / gamma and total variation 1 - gamma), of which it takes the least anyway.
    delta falls as gamma grows, so a root finder gives the least gamma (Brent's method on ln delta over ln
    gamma, then nudged up until the bound holds: the gamma returned is always one the accountant certifies).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable

import numpy as np

from ..core.bisection import least_meeting
from ..errors import ParameterError, check_delta, check_epsilon
from . import shuffle
from .evaluation_cache import holds, on_disk
from .shuffle import EXP_CAP, binomial_cdf, binomial_pmf, binomial_sf, fmt_delta, variation_ratio_delta

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


_BUCKET_GAP = 0.002  # split the blanket-size buckets until their upper and lower sums differ by at most this share
_OUTSIDE = 1e-30  # the binomial windows leave out at most this mass, counted in full


def _window(mean: float, sd: float) -> float:
    """Half-width of a binomial window whose outside mass is below 1e-30 (Bernstein's tail, 2 e^(-t^2 / (2 (sd^2 +
    t/3))), at t = (2 L / 3 + sqrt(4 L^2 / 9 + 8 L sd^2)) / 2 with L = ln(2 / 1e-30)): what lies outside is
    counted in full, so the window only decides how tight the bound is, never whether it holds."""
    log_term = math.log(2 / _OUTSIDE)
    return (2 * log_term / 3 + math.sqrt(4 * log_term**2 / 9 + 8 * log_term * sd * sd)) / 2 + 1


WINDOW_MAX = 2001  # binomial tails a blanket size may cost (its T window): above it the accountant is not run


def window_width(gamma: float, n_users: int, domain_size: int) -> int:
    """The T window of the typical blanket size m = (n - 1) gamma: the binomial tails one D_m costs (two each).
    It grows as sqrt(gamma n / B); past WINDOW_MAX an evaluation takes seconds, and FMT's and Wang et al.'s
    bounds, which cost no such window, are used alone (they differ little there: B is small for its n)."""
    if domain_size == 2:
        return 1
    size, p = (n_users - 1) * gamma + 1, 2 / domain_size
    return 2 * math.ceil(_window(size * p, math.sqrt(size * p * (1 - p)))) + 1


def _within_blanket(epsilon: float, gamma: float, blanket: np.ndarray, domain_size: int) -> np.ndarray:
    """D_m for each m in ``blanket``: the exact divergence of the changed user's report hidden among m uniform
    reports.

    Given which other users sent blanket noise (m of them), the rest is known and subtracted; the changed user
    sends x with probability 1 - gamma and a uniform value otherwise, so P_m(h) = Mult_{m+1}(h) [(1 - gamma) B
    h_x / (m + 1) + gamma] over histograms h of the m + 1 messages (Mult_{m+1}: m + 1 uniform messages), and Q_m
    the same with h_x'. Under Mult_{m+1}, T = h_x + h_x' ~ Bin(m + 1, 2/B) and h_x ~ Bin(T, 1/2) given T; the
    integrand c (a - e^eps (T - a)) + gamma (1 - e^eps), c = (1 - gamma) B / (m + 1), is linear in a = h_x, so
    each T costs two binomial tails (docs/privacy.md, "The blanket accountant"). T outside its window counts
    with its whole P-mass (:func:`_outside_tails`).

    What does not depend on gamma (the T windows, their binomial weights and outside tails: :func:`_windows`) and
    the Bin(T, 1/2) tails at the thresholds (:func:`_half_tails`, the same where gamma moves too little to change a
    threshold) are kept from one call to the next: a calibration evaluates the accountant a dozen times at nearly the
    same blanket sizes, the last ones at gammas within 1e-12 of each other. The same functions of the same
    integers, so the same bits."""
    e, B = math.exp(min(epsilon, EXP_CAP)), domain_size  # the divergence falls with eps: a cap overstates it
    blanket = np.ascontiguousarray(blanket, dtype=np.int64)
    size, t, tt, weights, noise_outside, held_outside = _windows(blanket.tobytes(), B)
    c = (1 - gamma) * B / size
    slope, offset = c * (1 + e), c * e * t + gamma * (e - 1)  # the integrand is slope a - offset
    first = np.floor(offset / slope).astype(np.int64) + 1  # the least a where it is positive
    above, above_less_one = _half_tails(blanket.tobytes(), B, first.tobytes())
    inside = np.maximum(slope * tt / 2 * above_less_one - offset * above, 0.0)  # E[(slope a - offset)_+ | T]
    outside = 0.0 if B == 2 else gamma * noise_outside + (1 - gamma) * held_outside  # :func:`_outside_tails`
    return np.minimum(1.0, (weights * inside).sum(axis=1) + outside)


@functools.lru_cache(maxsize=16)
def _windows(blanket: bytes, domain_size: int) -> tuple[np.ndarray, ...]:
    """For the blanket sizes m (int64 bytes), what :func:`_within_blanket` takes that gamma does not change: m + 1
    (a column), the T window of each row (padded with -1, which weighs nothing), T where valid (else 0), the
    windows' Bin(m + 1, 2/B) weights, and their outside tails (:func:`_outside_tails`)."""
    B = domain_size
    size = (np.frombuffer(blanket, dtype=np.int64) + 1)[:, None]  # one row per m
    if B == 2:
        t = size
    else:
        p = 2 / B
        half = _window(float(size.max()) * p, math.sqrt(float(size.max()) * p * (1 - p)))
        low = np.maximum(0, np.floor(size * p - half)).astype(np.int64)
        t = np.minimum(low + np.arange(2 * math.ceil(half) + 1), size)  # rows padded with repeats of m + 1
        t = np.where(np.diff(t, axis=1, prepend=-1) > 0, t, -1)  # ... which are marked -1 and weigh nothing
    valid = t >= 0
    tt = np.where(valid, t, 0)
    weights = np.where(valid, 1.0 if B == 2 else binomial_pmf(tt, size, 2 / B), 0.0)
    if B == 2:
        return _kept(size, t, tt, weights, None, None)
    return _kept(size, t, tt, weights, *_outside_tails(np.where(valid, t, size).min(axis=1), t.max(axis=1), size[:, 0],
                                                       B))


@functools.lru_cache(maxsize=16)
def _half_tails(blanket: bytes, domain_size: int, first: bytes) -> tuple[np.ndarray, np.ndarray]:
    """Pr[Bin(T, 1/2) >= first] and Pr[Bin(T - 1, 1/2) >= first - 1] over the windows of :func:`_windows`."""
    tt = _windows(blanket, domain_size)[2]
    first_ = np.frombuffer(first, dtype=np.int64).reshape(tt.shape)
    above = binomial_sf(first_ - 1, tt, 0.5, repeated=True)  # Pr[Bin(T, 1/2) >= first]; rows repeat (first, T)
    above_less_one = np.where(tt >= 1, binomial_sf(first_ - 2, np.maximum(tt - 1, 0), 0.5, repeated=True), 0.0)
    return _kept(above, above_less_one)


def _kept(*arrays: np.ndarray | None) -> tuple[np.ndarray | None, ...]:
    """Arrays a cache hands out again: read-only."""
    for array in arrays:
        if array is not None:
            array.setflags(write=False)
    return arrays


def _outside_tails(low: np.ndarray, high: np.ndarray, size: np.ndarray, domain_size: int) -> tuple[np.ndarray, ...]:
    """What the P-mass of T outside its window [low, high] is made of, from binomial tails (accurate where 1 - sum
    is not): P(T) = Bin(m + 1, p)(T) (c T / 2 + gamma), and Bin(m + 1, p)(T) c T / 2 = (1 - gamma) Bin(m, p)(T - 1),
    so the mass is gamma Pr[Bin(m + 1, p) outside] + (1 - gamma) Pr[1 + Bin(m, p) outside], p = 2 / B: those two
    probabilities."""
    p = 2 / domain_size

    def tails(trials: np.ndarray, shift: int) -> np.ndarray:  # Pr[shift + Bin(trials, p) < low or > high]
        below = binomial_cdf(low - shift - 1, trials, p)
        above = binomial_sf(high - shift, trials, p)
        return below + above

    return tails(size, 0), tails(size - 1, 1)


# D_m's sums cancel terms e^eps times their result: rounding of 2^-53 e^eps relative, below 1e-6 up to e^22 < 2^32.
# Past eps = 36.7, e / (1 + e) rounds to 1 and every D_m came out 0 (a reviewer's run certified (37, 1e-6) for
# blanket-hist where the exact delta was 0.63)
ACCOUNTANT_EPSILON_MAX = 22.0


def blanket_delta(epsilon: float, gamma: float, n_users: int, domain_size: int, resolution: float = 1e-20) -> float:
    """An upper bound on delta(eps) of n shuffled R^PH reports that conditions on the blanket exactly: the
    mixture over m ~ Bin(n - 1, gamma), the number of other users who sent noise, of the within-blanket
    divergence D_m (:func:`_within_blanket`). Valid for every dataset and every B: the view is a
    post-processing of (who sent noise, the m + 1 blanket and changed messages). D_m falls as m grows (one more
    uniform message is post-processing), so buckets of m, each at its least m, bound the mixture from above;
    the buckets whose upper and lower sums (each at its largest m) differ most are split until the two sums
    are within 0.2%, or ``resolution`` (the upper sum is a bound at every step; splitting only tightens it, and
    a finer ``resolution`` only splits further: the calibration's coarser one is checked by the default's).
    The binomial mass below the window counts as D = 1, above it as its top's D. Above :data:`ACCOUNTANT_EPSILON_MAX`
    the trivial bound 1: FMT's and Wang et al.'s bounds hold at every epsilon."""
    if gamma >= 1:
        return 0.0
    if epsilon > ACCOUNTANT_EPSILON_MAX:
        return 1.0
    trials = n_users - 1
    mean, sd = trials * gamma, math.sqrt(trials * gamma * (1 - gamma))
    half = _window(mean, sd)
    lo, hi = max(0, math.floor(mean - half)), min(trials, math.ceil(mean + half))
    cumulative = np.concatenate([[0.0], np.cumsum(binomial_pmf(np.arange(lo, hi + 1), trials, gamma))])
    edges = np.unique(np.linspace(lo, hi + 1, 65).round().astype(np.int64))  # buckets [edge_i, edge_i+1)
    at = dict(zip(edges.tolist(), _within_blanket(epsilon, gamma, np.minimum(edges, hi), domain_size).tolist()))
    while True:
        mass = cumulative[edges[1:] - lo] - cumulative[edges[:-1] - lo]
        value = np.array([at[e] for e in edges.tolist()])
        wide = np.diff(edges) > 1  # a bucket of one m is exact
        upper, gaps = float(np.dot(mass, value[:-1])), np.where(wide, mass * (value[:-1] - value[1:]), 0.0)
        if gaps.sum() <= max(_BUCKET_GAP * upper, resolution) or gaps.max() <= 0:
            break
        # the buckets above half their share of the 0.2% (or half the largest, if none is): a rule that does not
        # depend on ``resolution``, so a finer resolution only goes on splitting, to a bound at most as large
        share = _BUCKET_GAP * upper / gaps.size
        split = wide & (gaps >= min(share, gaps.max()) / 2)
        middles = (edges[:-1][split] + edges[1:][split]) // 2
        at.update(zip(middles.tolist(), _within_blanket(epsilon, gamma, middles, domain_size).tolist()))
        edges = np.union1d(edges, middles)
    below = float(binomial_cdf(lo - 1, trials, gamma))  # fewer blanket users than the window: D <= 1
    above = float(binomial_sf(hi, trials, gamma))  # more: D <= its value at hi
    return min(1.0, upper + below + above * at[int(edges[-1])])


_SOURCES = (__file__, shuffle.__file__)  # the code a kept value comes from (privacy.evaluation_cache)


@on_disk("blanket-accountant", _SOURCES)
def delta_at(epsilon: float, gamma: float, n_users: int, domain_size: int, resolution: float = 1e-20) -> float:
    """An upper bound on delta(eps) of n shuffled R^PH reports: the least of the blanket accountant's
    (:func:`blanket_delta`, to ``resolution``; where its window is affordable, :func:`window_width`), FMT's and
    Wang et al.'s bounds, each valid on its own. Its values are kept on disk (:mod:`.evaluation_cache`)."""
    if gamma >= 1:
        return 0.0
    eps0 = local_epsilon(gamma, domain_size)
    bounds = [fmt_delta(epsilon, eps0, n_users), variation_ratio_delta(epsilon, eps0, n_users, 1 - gamma)]
    if window_width(gamma, n_users, domain_size) <= WINDOW_MAX:
        bounds.append(blanket_delta(epsilon, gamma, n_users, domain_size, resolution))
    return min(bounds)


def _least_gamma(delta_of: Callable[[float], float], delta: float) -> float:
    """The least gamma in [_GAMMA_MIN, _GAMMA_MAX] with delta_of(gamma) <= delta, to a relative 1e-12, for a
    delta_of that falls as gamma grows and meets delta at _GAMMA_MAX (checked by the callers)."""
    return least_meeting(delta_of, delta, _GAMMA_MIN, _GAMMA_MAX, log_scale=True)


def tight_gamma(epsilon: float, delta: float, n_users: int, domain_size: int) -> float:
    """The least gamma (to a relative 1e-12) whose reports the accountant certifies for (eps, delta)."""
    epsilon, delta = check_epsilon(epsilon), check_delta(delta)
    if delta_at(epsilon, _GAMMA_MAX, n_users, domain_size) > delta:
        raise ParameterError("users", f"enough for a blanket to hide one report at ({epsilon:g}, {delta:g}) (not "
                             "even gamma = 1 - 1e-12 does here)", n_users)
    return _least_gamma(lambda g: delta_at(epsilon, g, n_users, domain_size, delta * 1e-4), delta)


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


def vector_delta_at(epsilon: float, gamma: float, n_users: int, levels: int, coordinates: int,
                    resolution: float = 1e-20) -> float:
    """The accountant's delta(eps) for n users' reports: for t = 1 as the histogram over k + 1 values (the
    coordinate is uniform and independent of the vector; docs/derivations.md, "Vector sums"), for t > 1 by FMT's
    bound at the composed eps0 (each kept on disk, :mod:`.evaluation_cache`)."""
    if gamma >= 1:
        return 0.0
    if coordinates == 1:
        return delta_at(epsilon, gamma, n_users, levels + 1, resolution)
    return _composed_delta(epsilon, vector_local_epsilon(gamma, levels, coordinates), n_users)


_composed_delta = on_disk("blanket-accountant", _SOURCES)(fmt_delta)


def values_kept() -> bool:
    """Whether the accountant's values of this code's version are kept on disk (:mod:`.evaluation_cache`): a
    calibration at sizes met before then imports no scipy."""
    return holds("blanket-accountant", _SOURCES)


def tight_vector_gamma(epsilon: float, delta: float, n_users: int, levels: int, coordinates: int) -> float:
    """The least gamma (to a relative 1e-12) whose reports the accountant certifies for (eps, delta)."""
    epsilon, delta = check_epsilon(epsilon), check_delta(delta)
    if vector_delta_at(epsilon, _GAMMA_MAX, n_users, levels, coordinates) > delta:
        raise ParameterError("users", f"enough for a blanket to hide one user's {coordinates} reports at "
                             f"({epsilon:g}, {delta:g})", n_users)
    return _least_gamma(lambda g: vector_delta_at(epsilon, g, n_users, levels, coordinates, delta * 1e-4), delta)
