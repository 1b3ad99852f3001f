"""DPDG's noise: the distributed discrete Gaussian (Kairouz, Liu & Steinke 2021), sampled exactly, and the privacy
of the released sum, computed numerically as an upper bound within about 1e-12 (fair DP paper's decentralized
Gaussian baseline; reference ../shared/papers/fair-dp-distributed-frequency.md §2.4).

Each of n users adds to every coordinate of its one-hot count vector, at the
fixed-point scale ``shift`` = 2^k, an independent discrete Gaussian N_Z(0, s2):
Pr[X = x] proportional to exp(-x^2 / (2 s2)) over the integers, s2 an integer.
The server sees only the sum. Replacing one user's item moves two coordinates
of the sum, one by +shift and one by -shift.

Sampling (``sample``)
    Canonne, Kamath & Steinke 2020 ("The discrete Gaussian for differential
    privacy"), Algorithm 3: propose Y from the discrete Laplace (their
    Algorithm 2), accept with probability exp(-(|Y| - s2/t)^2 / (2 s2)) by their
    Algorithm 1 for Bernoulli(exp(-gamma)), gamma rational. Only uniform
    integers from ``rng.integers`` are drawn and only integer arithmetic
    decides: privacy rests on the exact law, which floating-point randomness
    would not give. One change from the paper: the Laplace scale is t = s2 / c
    with c = floor(sqrt(s2)) (Algorithm 2 takes a rational scale), instead of
    floor(sqrt(s2)) + 1. The rejection step is exact for any scale (exp(-|y|/t)
    exp(-(|y| - s2/t)^2 / (2 s2)) is exp(-y^2 / (2 s2)) times a constant), and
    with this one s2/t = c is an integer, so gamma = (|Y| - c)^2 / (2 s2) has the
    small denominator 2 s2. Nothing overflows int64 up to s2 <= 2^48
    (``SIGMA_SQUARED_MAX``): Bernoulli(num / (den K)) is a uniform integer on
    [0, den K) below num, drawn as A K + B (A on [0, den), B on [0, K)) should
    den K pass 2^62; the Laplace Y = floor((U + s2 V) / c) is computed without
    forming s2 V, and overflowing it would take a geometric V above 2^38, i.e.
    that many rounds of its loop; a numerator (|Y| - c)^2 beyond int64 (|Y| >
    3e9, some 180 Laplace scales out at the cap) goes to the same algorithm in
    Python integers. Everything is vectorized over the samples: the loops run
    over rounds of rejection.

Law of the sum (``sum_law``)
    On the window [-W, W], W = ceil(40 sd) + 50, sd^2 = n s2. The
    characteristic function of N_Z(0, s2) is, by Poisson summation (Jacobi's
    theta identity), phi(theta) = sum_k exp(-s2 (theta - 2 pi k)^2 / 2) / sum_k
    exp(-2 pi^2 s2 k^2), positive and decreasing on [0, pi]; ln phi is computed
    as -s2 theta^2 / 2 + log1p(...) - log1p(...) (|k| <= 3; the rest is below
    e^-230 relative), so phi^n = exp(n ln phi) keeps its relative accuracy
    whatever n, and one inverse real FFT of length L, a power of two above 2 V
    with V = ceil(12 sd) + 50, gives sum_m P(z + m L), the law and its aliases,
    on [-V, V] (beyond, P is below e^-72 of its peak, far below the round-off
    bound, and reported as 0). Instead of estimates the returned probabilities
    are rigorous lower bounds: the FFT output minus a bound on its error,
    clipped at 0. The bound adds the spectrum's error (round-off of n ln phi,
    bounded term by term), the inverse FFT's round-off (componentwise, 10 u
    (log2 L + 4) times the spectrum's mean absolute value, u = 2^-53: the
    standard forward error of Cooley-Tukey FFTs, each output being a sum over
    unique butterfly paths of unit-modulus factors, with a factor of about two
    to spare) and the aliases, whose mass is below Pr[|S| > V] <= 2 exp(-(V +
    1)^2 / (2 n s2)): the discrete Gaussian is sub-Gaussian, E[e^(tX)] <=
    e^(t^2 s2 / 2) (Canonne, Kamath & Steinke 2020), so the sum S of n of them
    is too, with s2 summed. ``outside`` = 1 - sum of the lower bounds (plus its
    summation round-off) then bounds the mass outside the window plus all the
    mass the bounds give up (about 2e-13). Laws with n s2 above 10^10 (sd 10^5,
    ``TOTAL_VARIANCE_MAX``) are refused, to keep the FFT and the window fast.

Privacy (``delta_at``)
    Under D the released pair of the changed coordinates is (S_a + shift, S_b),
    under D' (S_a, S_b + shift), the other coordinates having the same law.
    Reflecting S_a (P is symmetric), delta(eps) = sum over (x, y) of (P(x) P(y) -
    e^eps P(x - shift) P(y - shift))_+: the loss is l(x) + l(y), l(x) = ln P(x) /
    P(x - shift), both coordinates' losses have the same law, and swapping the
    coordinates gives the other direction the same value. For each x the y
    with l(y) > eps - l(x) are, in the order of increasing l, a suffix: one
    sort, suffix sums and one searchsorted, no window x window table. (l
    decreases in x, P being log-concave as a sum of log-concave laws, but the
    lower bounds need not be, so they are sorted: timsort on the nearly
    reversed array costs little.) With lower bounds p <= P, delta <= delta
    computed from p + (1 - (sum p)^2): the D' terms only shrink with p, and the
    D terms lose at most the missing mass of the pair, 1 - (1 - outside)^2 =
    outside (2 - outside), doubled for two coordinates and with no e^eps
    factor, thanks to the lower bounds. Round-off of the sums and of the
    comparisons l(x) + l(y) > eps is bounded and added too, so the result is an
    upper bound on the true delta, within about 1e-12 of it. Adding
    independent noise is post-processing, so when n s2 exceeds
    ``TOTAL_VARIANCE_MAX`` the delta of the largest group of users that fits
    is reported (an upper bound for n users).

Calibration (``calibrate``): the least integer s2 with delta_at <= delta, by
bisection on integers from a bracket around the analytic Gaussian mechanism's
variance (Balle & Wang 2018). ``classic_sigma`` / ``classic_variance``: the
paper's sigma_G = sqrt(2 ln(1.25/delta)) / eps (its proof covers eps < 1).
"""

from __future__ import annotations

import math

import numpy as np

from ..core.bisection import bisect
from ..errors import ParameterError, check_delta, check_epsilon, check_integer

SIGMA_SQUARED_MAX = 2**48  # the sampler's cap on s2: int64 holds every step (module docstring)
TOTAL_VARIANCE_MAX = 10**10  # the exact law of the sum is held for n s2 up to this (sd 10^5)
_WINDOW_SD = 40  # the sum's law on +-(40 sd + 50): outside it at most 2 e^-800
_FFT_SD = 12  # ... computed on +-(12 sd + 50): beyond, P < e^-72 of the peak, far below the round-off bound
_U = 2.0**-53  # unit round-off of float64
_SQUARE_FITS = 3_037_000_499  # the largest m with m^2 < 2^63
_CHUNK = 2**20  # samples drawn at a time
_NEGLIGIBLE_LOG = -800.0  # phi^n below e^-800 is left at 0 (and bounded as such)


# --- sampling: Canonne, Kamath & Steinke 2020, Algorithms 1-3, integers only -----------------------------


def _bernoulli_exp_one(count: int, rng) -> np.ndarray:
    """``count`` draws of Bernoulli(exp(-1)): Algorithm 1 at gamma = 1 (K counts the successes of Bernoulli(1/K),
    started at K = 1, whose draw always succeeds; an odd K at the first failure is a 1)."""
    out = np.zeros(count, dtype=bool)  # a failure at K = 2 gives 0; the others are set below
    active = np.flatnonzero(rng.integers(0, 2, size=count, dtype=np.uint8) == 0)
    k = 3
    while active.size:
        go_on = rng.integers(0, k, size=active.size, dtype=np.uint8 if k < 256 else np.int64) == 0
        out[active[~go_on]] = k % 2 == 1
        active = active[go_on]
        k += 1
    return out


def _bernoulli_exp_fraction(num: np.ndarray, den: int, rng) -> np.ndarray:
    """Bernoulli(exp(-num/den)) per entry, 0 <= num < den <= 2^62: Algorithm 1, each Bernoulli(num / (den K)) a
    uniform integer on [0, den K) compared with num (drawn as A K + B, A on [0, den) and B on [0, K), should den K
    ever pass 2^62, which would take K - 1 successes in a row of probability <= 1/K each)."""
    out = rng.integers(0, den, size=num.size, dtype=np.int64) >= num  # a failure at K = 1 gives 1
    active = np.flatnonzero(~out)
    k = 2
    while active.size:
        part = num[active]
        if den <= 2**62 // k:
            go_on = rng.integers(0, den * k, size=active.size, dtype=np.int64) < part
        else:  # a k + b < part <=> a < part // k, or a == part // k and b < part % k: no product formed
            a = rng.integers(0, den, size=active.size, dtype=np.int64)
            b = rng.integers(0, k, size=active.size, dtype=np.int64)
            whole, rest = np.divmod(part, k)
            go_on = (a < whole) | ((a == whole) & (b < rest))
        out[active[~go_on]] = k % 2 == 1
        active = active[go_on]
        k += 1
    return out


def _bernoulli_exp(num: np.ndarray, den: int, rng) -> np.ndarray:
    """Bernoulli(exp(-num/den)) per entry, num >= 0 (int64, overwritten): floor(gamma) draws of Bernoulli(exp(-1)),
    all of which must succeed, and, independently, one of Bernoulli(exp(-frac(gamma))) (Algorithm 1, gamma > 1)."""
    out = np.ones(num.size, dtype=bool)
    pending = np.flatnonzero(num >= den)
    left, num[pending] = np.divmod(num[pending], den)
    while pending.size:
        ok = _bernoulli_exp_one(pending.size, rng)
        out[pending[~ok]] = False
        pending, left = pending[ok], left[ok] - 1
        more = left > 0
        pending, left = pending[more], left[more]
    return out & _bernoulli_exp_fraction(num, den, rng)


def _bernoulli_exp_exact(num: int, den: int, rng) -> bool:
    """Bernoulli(exp(-num/den)) with num a Python integer of any size (den < 2^62): the same algorithm, for a
    squared numerator beyond int64. Each of the floor(gamma) rounds ends the loop with probability 1 - 1/e."""
    whole, rest = divmod(num, den)
    while whole:
        if not _bernoulli_exp_one(1, rng)[0]:
            return False
        whole -= 1
    return bool(_bernoulli_exp_fraction(np.array([rest], dtype=np.int64), den, rng)[0])


def _geometric(count: int, rng) -> np.ndarray:
    """``count`` draws of V, the successes of Bernoulli(exp(-1)) before the first failure: Pr[V = v] = (1 - 1/e)
    e^-v. V counts the rounds of this loop, which bounds it."""
    v = np.zeros(count, dtype=np.int64)
    active = np.arange(count)
    while active.size:
        active = active[_bernoulli_exp_one(active.size, rng)]
        v[active] += 1
    return v


def _discrete_laplace(count: int, t: int, s: int, rng) -> np.ndarray:
    """``count`` draws of Lap_Z(t/s), Pr[Y = y] proportional to exp(-|y| s / t), by Algorithm 2 (integers t, s >=
    1). Accepted draws are kept in order: the accepted subsequence of iid proposals is iid."""
    steps, extra = divmod(t, s)
    found, needed = [], count
    while needed:
        u = rng.integers(0, t, size=needed, dtype=np.int64)
        u = u[_bernoulli_exp_fraction(u, t, rng)]  # X = U + t V has Pr[X = x] proportional to exp(-x / t)
        v = _geometric(u.size, rng)
        y = v * steps + (u + v * extra) // s  # floor((U + t V) / s), t V never formed
        negative = rng.integers(0, 2, size=u.size, dtype=np.uint8) == 1
        keep = ~(negative & (y == 0))  # -0 would count 0 twice
        found.append(np.where(negative, -y, y)[keep])
        needed -= found[-1].size
    return np.concatenate(found) if found else np.zeros(0, dtype=np.int64)


def _shape(size) -> tuple[int, ...]:
    if np.ndim(size) == 0:
        return (check_integer("size", size, 0),)
    return tuple(check_integer("size", d, 0) for d in size)


def sample(sigma_squared: int, size, rng: np.random.Generator) -> np.ndarray:
    """Exact draws of N_Z(0, s2), Pr[X = x] proportional to exp(-x^2 / (2 s2)), as int64 of shape ``size``.

    Canonne, Kamath & Steinke 2020, Algorithm 3 with the Laplace scale s2 / floor(sqrt(s2)) (module docstring):
    only ``rng.integers`` is called, and only integer arithmetic decides, so the law is exact. s2 must be an
    integer in [1, 2^48] (``SIGMA_SQUARED_MAX``), which keeps every step within int64. About 1.3 Laplace proposals
    per draw, whatever s2.
    """
    s2 = check_integer("noise variance", sigma_squared, 1, SIGMA_SQUARED_MAX)
    shape = _shape(size)
    drawn = np.empty(math.prod(shape), dtype=np.int64)
    for start in range(0, drawn.size, _CHUNK):  # chunks: the arrays stay small enough to be cheap to allocate
        drawn[start:start + _CHUNK] = _gaussian(min(_CHUNK, drawn.size - start), s2, rng)
    return drawn.reshape(shape)


def discrete_laplace(size: int, t: int, s: int, rng: np.random.Generator) -> np.ndarray:
    """``size`` exact draws of Lap_Z(t / s), Pr[Y = y] proportional to exp(-|y| s / t) (integers t, s >= 1; Canonne,
    Kamath & Steinke 2020, Algorithm 2), drawn a chunk at a time."""
    size, t, s = check_integer("size", size, 0), check_integer("t", t, 1, 2**40), check_integer("s", s, 1, 2**46)
    drawn = np.empty(size, dtype=np.int64)
    for start in range(0, size, _CHUNK):
        drawn[start:start + _CHUNK] = _discrete_laplace(min(_CHUNK, size - start), t, s, rng)
    return drawn


def _gaussian(count: int, s2: int, rng) -> np.ndarray:
    """``count`` draws of N_Z(0, s2) by Algorithm 3, accepted draws kept in order."""
    c = math.isqrt(s2)
    found, needed = [], count
    while needed:
        y = _discrete_laplace(needed, s2, c, rng)  # scale t = s2 / c, so s2 / t = c
        m = np.abs(np.abs(y) - c)  # accept with probability exp(-m^2 / (2 s2))
        slow = np.flatnonzero(m > _SQUARE_FITS)  # |Y| > 3e9: never seen in practice, exact all the same
        m[slow] = 0
        keep = _bernoulli_exp(m * m, 2 * s2, rng)
        for i in slow:
            keep[i] = _bernoulli_exp_exact(int(np.abs(np.abs(y[i]) - c)) ** 2, 2 * s2, rng)
        found.append(y[keep])
        needed -= found[-1].size
    return np.concatenate(found) if found else np.zeros(0, dtype=np.int64)


# --- the law of one user's noise and of the sum ---------------------------------------------------------


def _normaliser(s2: int) -> float:
    """sum_x exp(-x^2 / (2 s2)) = sqrt(2 pi s2) sum_k exp(-2 pi^2 s2 k^2) (Poisson summation; |k| > 3 adds less
    than e^-300 relative for s2 >= 1)."""
    return math.sqrt(2 * math.pi * s2) * (1 + 2 * sum(math.exp(-2 * math.pi**2 * s2 * k * k) for k in (1, 2, 3)))


def pmf(sigma_squared: int, support) -> np.ndarray:
    """Pr[X = x] for X ~ N_Z(0, s2) at the integers ``support`` (floats; tails underflow to 0).

    Normalised by the exact normaliser: the direct sum over the integers equals sqrt(2 pi s2) sum_k exp(-2 pi^2
    s2 k^2) (Poisson summation), which converges after three terms and stays cheap at any s2 (the tests check it
    against the direct sum over +-(40 sd + 50)).
    """
    s2 = check_integer("noise variance", sigma_squared, 1, SIGMA_SQUARED_MAX)
    x = np.asarray(support)
    if x.dtype.kind not in "iu":
        if x.size and not np.all(np.isfinite(x) & (x == np.round(x))):
            raise ParameterError("support", "integers", support)
    x = x.astype(np.float64)
    return np.exp(-x * x / (2 * s2)) / _normaliser(s2)


def _n_log_phi(theta: np.ndarray, s2: int, users: int) -> tuple[np.ndarray, np.ndarray]:
    """n ln phi(theta) on [0, pi] and a bound on its absolute round-off (module docstring).

    ln phi = -s2 theta^2 / 2 + log1p(X) - log1p(X0), X the k != 0 terms of the theta series over its k = 0 term,
    exp(-2 pi s2 k (pi k -+ theta)) for k = +-1, +-2, +-3, and X0 the same at theta = 0. An exponent g computed with
    relative error 8u moves its term by 8u g; log1p moves by at most its argument's error (slope <= 1).
    """
    theta = np.asarray(theta, dtype=np.float64)
    k = np.array([1.0, 2.0, 3.0])[:, None]
    up, down = 2 * math.pi * s2 * k * (math.pi * k - theta), 2 * math.pi * s2 * k * (math.pi * k + theta)
    t_up, t_down = np.exp(-up), np.exp(-down)
    x = (t_up + t_down).sum(axis=0)
    x_err = (t_up * (8 * _U * up + 2 * _U) + t_down * (8 * _U * down + 2 * _U)).sum(axis=0)
    g0 = 2 * math.pi**2 * s2 * np.array([1.0, 4.0, 9.0])
    x0 = 2 * float(np.exp(-g0).sum())
    x0_err = 2 * float((np.exp(-g0) * (8 * _U * g0 + 2 * _U)).sum())
    main = users * s2 * theta * theta / 2
    log_x, log_x0 = np.log1p(x), math.log1p(x0)
    value = -main + users * (log_x - log_x0)
    error = 8 * _U * main + users * (x_err + x0_err + 2 * _U * (log_x + log_x0)) + 4 * _U * np.abs(value) + _U
    return value, 2 * error


def _check_total(s2: int, users: int) -> None:
    if users * s2 > TOTAL_VARIANCE_MAX:
        raise ParameterError("users x noise variance", f"at most {TOTAL_VARIANCE_MAX:.0e} (the sum's law is held on "
                             "+-40 sd; use fewer fractional bits)", users * s2)


def sum_law(sigma_squared: int, users: int) -> tuple[int, np.ndarray, float]:
    """The law of the sum of ``users`` iid N_Z(0, s2): (offset, probabilities, outside) (module docstring).

    ``probabilities[i]`` is a rigorous lower bound on Pr[S = offset + i] on the window offset = -W, ..., W, W =
    ceil(40 sd) + 50, sd^2 = users s2 (the FFT's value minus its error bound, clipped at 0: below about 1e-14 of
    the peak a probability is reported as 0). ``outside`` >= 1 - sum(probabilities) bounds the mass outside the
    window plus all the bounds give up; the part outside is at most 2 exp(-(W + 1)^2 / (2 users s2)) by the
    sub-Gaussian tail. Needs users s2 <= 10^10 (``TOTAL_VARIANCE_MAX``).
    """
    s2 = check_integer("noise variance", sigma_squared, 1, SIGMA_SQUARED_MAX)
    n = check_integer("users", users, 1)
    _check_total(s2, n)
    variance = n * s2
    half = math.ceil(_WINDOW_SD * math.sqrt(variance)) + 50
    near = math.ceil(_FFT_SD * math.sqrt(variance)) + 50  # the part the FFT computes; 0 (a lower bound) beyond
    length = 1 << (2 * near).bit_length()  # a power of two > 2 near: the aliases lie beyond +-(near + 1)
    step = 2 * math.pi / length
    # phi^n decreases on [0, pi]: find the first frequency where it is surely below e^-800, and stop there
    surely_small = lambda j: bool(np.all(np.add(*_n_log_phi(j * step, s2, n)) < _NEGLIGIBLE_LOG))  # noqa: E731
    lo, hi = 0, length // 2 + 1  # lo is not surely small (phi(0) = 1); hi is past the end
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if surely_small(mid) else (mid, hi)
    spectrum = np.zeros(length // 2 + 1)
    log_values, log_errors = _n_log_phi(np.arange(hi) * step, s2, n)
    spectrum[:hi] = np.exp(log_values)
    errors = spectrum[:hi] * np.expm1(log_errors + _U)
    # over the full circle every frequency but 0 and L/2 appears twice
    twice = np.full(hi, 2.0)
    twice[0] = 1.0
    if hi == length // 2 + 1:
        twice[-1] = 1.0
    mean_abs = float(twice @ spectrum[:hi]) / length
    spectral = float(twice @ errors) / length + math.exp(_NEGLIGIBLE_LOG)  # the dropped tail of the spectrum
    fft = 10 * _U * (math.log2(length) + 4) * (mean_abs + spectral)
    aliases = 2 * math.exp(-(near + 1) ** 2 / (2 * variance))
    bound = spectral + fft + aliases + 1e-300
    aliased = np.fft.irfft(spectrum, n=length)
    low = np.zeros(2 * half + 1)
    low[half - near:half] = aliased[length - near:]
    low[half:half + near + 1] = aliased[:near + 1]
    low -= bound
    np.maximum(low, 0.0, out=low)
    total = float(low.sum())
    outside = max(0.0, 1.0 - total) + _U * (math.log2(low.size) + 4)  # pairwise summation's round-off
    return -half, low, min(1.0, outside)


# --- privacy ------------------------------------------------------------------------------------------


def delta_at(epsilon: float, sigma_squared: int, users: int, shift: int) -> float:
    """An upper bound (within about 1e-12) on delta(eps) of the released sum under replace-one neighbours, each of
    ``users`` users adding N_Z(0, s2) per coordinate and the changed item moving two coordinates by +-``shift``.

    One pass over the sorted one-dimensional losses (module docstring). When users s2 exceeds
    ``TOTAL_VARIANCE_MAX`` the noise of the largest group of users that fits is used (fewer users' noise is a
    weaker guarantee: the rest is independent noise, a post-processing). s2 itself must be at most 10^10.
    """
    epsilon = check_epsilon(epsilon)
    s2 = check_integer("noise variance", sigma_squared, 1, SIGMA_SQUARED_MAX)
    n = check_integer("users", users, 1)
    s = check_integer("shift", shift, 1)
    if s2 > TOTAL_VARIANCE_MAX:
        raise ParameterError("noise variance", f"at most {TOTAL_VARIANCE_MAX:.0e} for the exact accountant", s2)
    _, low, outside = sum_law(s2, min(n, TOTAL_VARIANCE_MAX // s2))
    nonzero = np.flatnonzero(low)
    low = low[nonzero[0]:nonzero[-1] + 1]
    if s >= low.size:
        return 1.0  # the two laws' windows do not overlap: nothing better than the trivial bound
    eps = min(epsilon, 700.0)  # delta decreases in eps: a smaller eps bounds it from above; e^eps stays finite
    a = np.concatenate([low, np.zeros(s)])  # P(x) on x = offset', ..., offset' + N + s - 1
    b = np.concatenate([np.zeros(s), low])  # P(x - shift)
    present = (a > 0) | (b > 0)  # points where both are 0 (round-off near the edges) weigh nothing either way
    a, b = a[present], b[present]
    with np.errstate(divide="ignore"):
        log_a, log_b = np.log(a), np.log(b)
    loss = log_a - log_b  # +inf where only P(x) > 0, -inf where only P(x - shift) > 0
    order = np.argsort(loss, kind="stable")  # nearly sorted (reversed) already: timsort's runs make it cheap
    sorted_loss = loss[order]
    tail_a = np.concatenate([np.cumsum(a[order][::-1])[::-1], [0.0]])  # suffix sums, small ones summed first
    tail_b = np.concatenate([np.cumsum(b[order][::-1])[::-1], [0.0]])
    first = np.searchsorted(sorted_loss, eps - loss, side="right")  # the y with l(y) > eps - l(x)
    gain = a * tail_a[first]
    cost = math.exp(eps) * (b * tail_b[first])
    found = float(np.clip(gain - cost, 0.0, None).sum())
    # round-off: the sums (relative (N + 8) u on each part, all terms positive), and the pairs that the error of
    # l(x) + l(y), at most tol, may put on the wrong side of eps: each such term is at most P(x) P(y) expm1(tol),
    # and they lie in the band |l(x) + l(y) - eps| <= 2 tol, whose mass is summed like the rest
    sums = 4 * (a.size + 8) * _U * float(gain.sum() + cost.sum())
    largest_log = max(float(np.abs(log_a[a > 0]).max()), float(np.abs(log_b[b > 0]).max()))
    tol = 16 * _U * (2 * largest_log + eps + 1)
    near = np.searchsorted(sorted_loss, eps - loss - 2 * tol, side="right")
    far = np.searchsorted(sorted_loss, eps - loss + 2 * tol, side="right")
    band = float(a @ (tail_a[near] - tail_a[far]))
    sides = math.expm1(tol) * band * (1 + 4 * (a.size + 8) * _U)
    return min(1.0, found + sums + sides + outside * (2 - outside))


def _gaussian_delta(epsilon: float, mu: float) -> float:
    """The analytic Gaussian mechanism's delta at sensitivity / sd = mu (Balle & Wang 2018)."""
    from scipy.special import log_ndtr, ndtr

    return float(ndtr(mu / 2 - epsilon / mu) - math.exp(epsilon + log_ndtr(-mu / 2 - epsilon / mu)))


def _continuous_variance(epsilon: float, delta: float, users: int, shift: int) -> float:
    """The per-user variance giving the sum the analytic Gaussian mechanism's sd for sensitivity sqrt(2) shift."""
    hi = 1.0
    while _gaussian_delta(epsilon, hi) <= delta:
        hi *= 2
    mu = bisect(lambda m: _gaussian_delta(epsilon, m) > delta, 0.0, hi, 60)[0]
    return 2 * shift**2 / mu**2 / users


def _too_fine(shift: int, excess: float, why: str, epsilon: float) -> ParameterError:
    """The error for a scale whose noise would need ``excess`` times more variance than allowed: noise scales with
    shift^2, so name the fractional bits that would fit (about) -- where some would: at scale 1 (the central
    gaussian has no --fractional-bits, DPDG at 0 bits) or when even 0 bits need too much, only a larger --epsilon
    or --delta helps, and the error names them."""
    k = math.log2(shift)
    fits = min(math.ceil(k) - 1, math.floor(k - 0.5 * math.log2(excess))) if math.isfinite(excess) else -1
    if fits < 0:
        return ParameterError("epsilon", f"larger here, or --delta larger ({why}; the noise shrinks as either "
                              "grows)", epsilon)
    got = int(k) if shift == 2 ** int(k) else f"a scale of {shift}"
    return ParameterError("fractional-bits", f"at most about {fits} here ({why}); or a larger --epsilon or --delta",
                          got)


def _delta_floor(delta: float) -> ParameterError:
    return ParameterError("delta", "at least about 1e-12: the exact accountant adds its round-off allowance, some "
                          "2e-13, to every delta", delta)


def check_delta_floor(delta: float) -> float:
    """delta in (0, 1), and not below what the exact accountant can certify (about 1e-12)."""
    if check_delta(delta) < 1e-12:
        raise _delta_floor(delta)
    return delta


def calibrate(epsilon: float, delta: float, users: int, shift: int) -> int:
    """The least integer per-user s2 whose ``delta_at`` is at most ``delta``.

    Bisection on integers, from a bracket around the analytic Gaussian mechanism's variance (widened until it
    holds): the result s satisfies delta_at(s) <= delta < delta_at(s - 1), or s = 1. The sum's variance users s2
    can be at most 10^10 (``TOTAL_VARIANCE_MAX``, the exact accountant's limit): a scale that needs more is
    refused, naming the fractional bits that would do; so is a delta below the accountant's round-off allowance
    (about 2e-13).
    """
    epsilon, delta = check_epsilon(epsilon), check_delta_floor(delta)
    n, s = check_integer("users", users, 1), check_integer("shift", shift, 1)
    largest = max(1, min(SIGMA_SQUARED_MAX, TOTAL_VARIANCE_MAX // n))  # more users: delta_at bounds with fewer
    guess = _continuous_variance(epsilon, delta, n, s)
    why = (f"the sum's noise variance needed, about {guess * n:.3g}, exceeds the exact accountant's limit "
           f"{TOTAL_VARIANCE_MAX:.0e}")
    if guess > 1.05 * largest:  # the discrete sum needs about what the continuous Gaussian needs
        raise _too_fine(s, guess / largest, why, epsilon)
    passes = lambda v: delta_at(epsilon, v, n, s) <= delta  # noqa: E731
    lo, hi = 0, max(1, min(largest, math.ceil(guess * 1.05)))  # lo = 0: no noise, never private
    while not passes(hi):
        if hi == largest:
            if delta_at(epsilon, hi, n, s) < 1e-11:
                raise _delta_floor(delta)
            raise _too_fine(s, 1.0, why, epsilon)
        lo, hi = hi, min(largest, 2 * hi)
    if lo == 0:
        candidate = min(hi - 1, math.floor(guess * 0.95))
        while candidate >= 1 and passes(candidate):
            hi, candidate = candidate, candidate // 2
        lo = max(candidate, 0)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if passes(mid) else (mid, hi)
    return hi


def classic_sigma(epsilon: float, delta: float) -> float:
    """sigma_G = sqrt(2 ln(1.25/delta)) / eps, the classic Gaussian mechanism's multiplier the paper uses (its
    proof covers eps < 1 only)."""
    return math.sqrt(2 * math.log(1.25 / check_delta(delta))) / check_epsilon(epsilon)


def classic_variance(epsilon: float, delta: float, users: int, shift: int) -> int:
    """The per-user s2 giving the sum the classic variance: sd sqrt(2) shift sigma_G (sensitivity sqrt(2) on the
    count scale), i.e. ceil(2 shift^2 sigma_G^2 / users). At most 2^48, the sampler's cap."""
    sigma = classic_sigma(epsilon, check_delta_floor(delta))
    n, s = check_integer("users", users, 1), check_integer("shift", shift, 1)
    needed = 2 * s**2 * sigma * sigma / n  # not sigma**2, which raises past a float's range (eps 1e-300)
    if needed > SIGMA_SQUARED_MAX:
        raise _too_fine(s, needed / SIGMA_SQUARED_MAX, f"the per-user noise variance needed, about {needed:.3g}, "
                        "exceeds the sampler's cap 2^48", epsilon)
    return max(1, math.ceil(needed))
