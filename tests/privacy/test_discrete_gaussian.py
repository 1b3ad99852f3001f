"""The distributed discrete Gaussian (DPDG's noise): the exact sampler against the pmf, its integer-only randomness,
the sum's law against brute-force convolution, delta against the full 2-D hockey-stick table and against the
analytic Gaussian mechanism, the calibration's minimality, and bad input."""

import math

import numpy as np
import pytest
from scipy.stats import chisquare, norm

from privagg.errors import ParameterError
from privagg.privacy import discrete_gaussian as dg


def brute_pmf(s2, half):
    """N_Z(0, s2) on [-half, half], normalised by the direct sum over +-(40 sd + 50)."""
    wide = math.ceil(40 * math.sqrt(s2)) + 50
    x = np.arange(-wide, wide + 1)
    weights = np.exp(-x.astype(float) ** 2 / (2 * s2))
    return weights[wide - half:wide + half + 1] / math.fsum(weights)


def brute_sum_law(s2, users):
    """(offset, pmf) of the sum by repeated direct convolution (all terms positive: relative error ~1e-15)."""
    half = math.ceil(40 * math.sqrt(s2)) + 50
    one = brute_pmf(s2, half)
    law = one
    for _ in range(users - 1):
        law = np.convolve(law, one)
    return -half * users, law


def table_delta(eps, s2, users, shift):
    """The hockey-stick divergence over the whole table of the two changed coordinates, both directions: under D
    they are (S_a + shift, S_b), under D' (S_a, S_b + shift)."""
    _, law = brute_sum_law(s2, users)
    here, moved = np.concatenate([law, np.zeros(shift)]), np.concatenate([np.zeros(shift), law])
    d, d_prime = np.outer(moved, here), np.outer(here, moved)
    return max(np.maximum(d - math.exp(eps) * d_prime, 0).sum(), np.maximum(d_prime - math.exp(eps) * d, 0).sum())


def analytic_gaussian_delta(eps, sd, sensitivity):
    """Balle & Wang 2018: delta of N(0, sd^2) noise at L2 sensitivity Delta."""
    a, b = sensitivity / (2 * sd), eps * sd / sensitivity
    return norm.cdf(a - b) - math.exp(eps) * norm.cdf(-a - b)


class IntegersOnly:
    """A generator that offers ``integers`` only (delegated to a seeded Generator) and fails on anything else."""

    def __init__(self, seed):
        self._rng, self.calls = np.random.default_rng(seed), 0

    def integers(self, low, high=None, size=None, dtype=np.int64, endpoint=False):
        assert np.dtype(dtype).kind in "iu", dtype
        self.calls += 1
        return self._rng.integers(low, high, size=size, dtype=dtype, endpoint=endpoint)

    def __getattr__(self, name):
        raise AssertionError(f"the sampler used rng.{name}")


# --- the sampler ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("s2", [1, 10, 1000])
def test_the_sampler_follows_the_pmf(s2):
    n = 400_000
    x = dg.sample(s2, n, np.random.default_rng(20260))
    assert x.dtype == np.int64 and x.shape == (n,)
    half = math.ceil(10 * math.sqrt(s2)) + 5  # mass beyond below 1e-21: folded into the end bins anyway
    support = np.arange(-half, half + 1)
    p = dg.pmf(s2, support)
    expected = n * p
    expected[[0, -1]] += n * (1 - p.sum()) / 2
    observed = np.bincount(np.clip(x, -half, half) + half, minlength=support.size)
    # bins expected below 5 pooled into one: the chi-square approximation holds; p-value threshold fixed in advance
    small = expected < 5
    f_obs = np.append(observed[~small], observed[small].sum())
    f_exp = np.append(expected[~small], expected[small].sum())
    f_exp *= f_obs.sum() / f_exp.sum()
    assert chisquare(f_obs, f_exp).pvalue > 1e-4
    # mean 0 and the exact variance (slightly below s2 for small s2), each within 5 standard errors
    variance = float((support.astype(float) ** 2 * p).sum())
    fourth = float((support.astype(float) ** 4 * p).sum())
    assert variance <= s2
    assert abs(x.mean()) <= 5 * math.sqrt(variance / n)
    assert abs(x.var() - variance) <= 5 * math.sqrt((fourth - variance**2) / n)


@pytest.mark.parametrize("s2", [2**40, dg.SIGMA_SQUARED_MAX])
def test_the_sampler_near_its_cap(s2):
    """No overflow up to the cap: the first two moments match the continuous Gaussian's (exact to 1e-9 here)."""
    n = 100_000
    x = dg.sample(s2, n, np.random.default_rng(5))
    assert abs(x.mean()) <= 5 * math.sqrt(s2 / n)
    assert abs(x.astype(float).var() / s2 - 1) <= 5 * math.sqrt(2 / n)
    assert np.abs(x).max() < 10 * math.sqrt(s2)


def test_the_sampler_draws_only_uniform_integers():
    wrapped = IntegersOnly(7)
    x = dg.sample(50, (300, 7), wrapped)
    assert x.shape == (300, 7) and x.dtype == np.int64 and wrapped.calls > 0
    # the same seed gives the same draws, with the wrapper or the Generator itself
    assert np.array_equal(x, dg.sample(50, (300, 7), np.random.default_rng(7)))
    assert np.array_equal(dg.sample(50, 1000, np.random.default_rng(8)), dg.sample(50, 1000, np.random.default_rng(8)))
    assert dg.sample(3, 0, np.random.default_rng(1)).shape == (0,)
    assert dg.sample(3, (), np.random.default_rng(1)).shape == ()


@pytest.mark.parametrize("num,den", [(0, 5), (1, 3), (2, 2), (7, 2), (5, 1)])
def test_bernoulli_exp_has_probability_exp_minus_gamma(num, den):
    n = 200_000
    hits = dg._bernoulli_exp(np.full(n, num, dtype=np.int64), den, np.random.default_rng(num * 10 + den))
    p = math.exp(-num / den)
    assert abs(hits.mean() - p) <= 5 * math.sqrt(p * (1 - p) / n) + 1e-12


def test_the_rare_paths_keep_the_law():
    """Python integers for a numerator beyond int64, and the A K + B draw when den K would pass 2^62."""
    rng = np.random.default_rng(11)
    n = 4000
    p = math.exp(-1.5)
    hits = sum(dg._bernoulli_exp_exact(3, 2, rng) for _ in range(n))
    assert abs(hits / n - p) <= 5 * math.sqrt(p * (1 - p) / n)
    assert not any(dg._bernoulli_exp_exact(10**40, 2**49, rng) for _ in range(20))  # gamma ~ 1.8e25
    den = 2**62 - 1
    n = 200_000
    hits = dg._bernoulli_exp_fraction(np.full(n, den - 1, dtype=np.int64), den, rng)  # gamma = 1 - 2^-62
    p = math.exp(-1)
    assert abs(hits.mean() - p) <= 5 * math.sqrt(p * (1 - p) / n)


# --- the laws ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("s2", [1, 2, 7, 1000])
def test_the_pmf_is_normalised_exactly(s2):
    half = math.ceil(40 * math.sqrt(s2)) + 50
    ours = dg.pmf(s2, np.arange(-half, half + 1))
    assert np.allclose(ours, brute_pmf(s2, half), rtol=1e-13, atol=0)
    assert math.fsum(ours) == pytest.approx(1, abs=1e-14)


@pytest.mark.parametrize("s2", [1, 3, 10])
@pytest.mark.parametrize("users", [1, 2, 5])
def test_the_sum_law_equals_brute_force_convolution(s2, users):
    offset, low, outside = dg.sum_law(s2, users)
    half = math.ceil(40 * math.sqrt(users * s2)) + 50
    assert offset == -half and low.size == 2 * half + 1
    brute_offset, brute = brute_sum_law(s2, users)
    exact = brute[offset - brute_offset:offset - brute_offset + low.size]
    # lower bounds, within 1e-13 of the peak, whose deficit (with the mass outside the window) outside bounds
    assert np.all(low <= exact * (1 + 1e-12))
    assert np.abs(exact - low).max() <= 1e-13 * exact.max()
    deficit = (exact - low).sum() + (1 - exact.sum())
    assert deficit <= outside + 1e-15
    assert outside < 1e-12


def test_the_sum_law_for_many_users():
    """10^6 users: total mass and variance n Var(N_Z(0, s2)) to 1e-9, symmetry, and the local CLT at the centre."""
    s2, users = 10, 10**6
    offset, low, outside = dg.sum_law(s2, users)
    x = np.arange(low.size) + offset
    assert 1 - outside <= low.sum() <= 1
    support = np.arange(-200, 201)
    one_variance = float((support.astype(float) ** 2 * dg.pmf(s2, support)).sum())
    assert (x.astype(float) ** 2 * low).sum() == pytest.approx(users * one_variance, rel=1e-9)
    assert np.abs(low - low[::-1]).max() <= 1e-13 * low.max()  # round-off only
    centre = low[-offset]
    assert centre == pytest.approx(1 / math.sqrt(2 * math.pi * users * one_variance), rel=1e-6)


# --- privacy -------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("s2,users,shift", [(1, 1, 1), (2, 3, 1), (3, 2, 2), (10, 5, 4), (30, 2, 16), (5, 1, 7)])
def test_delta_equals_the_full_table(s2, users, shift):
    for eps in (0.1, 0.5, 1.0, 3.0):
        exact, ours = table_delta(eps, s2, users, shift), dg.delta_at(eps, s2, users, shift)
        # an upper bound, by the round-off allowance (a few 1e-13) at most
        assert exact <= ours <= exact * (1 + 1e-9) + 5e-12


def test_delta_shrinks_with_noise_and_grows_as_eps_shrinks():
    by_variance = [dg.delta_at(1.0, s2, 100, 64) for s2 in range(100, 1000, 60)]
    assert all(a > b for a, b in zip(by_variance, by_variance[1:]))
    by_eps = [dg.delta_at(eps, 300, 100, 64) for eps in (2.0, 1.0, 0.5, 0.25, 0.1)]
    assert all(a < b for a, b in zip(by_eps, by_eps[1:]))
    assert dg.delta_at(1.0, 10**6, 1, 1) < 1e-12  # the round-off allowance alone
    assert dg.delta_at(1.0, 1, 1, 2**20) == 1.0  # the shift dwarfs the noise


def test_more_users_than_the_accountant_holds_are_bounded_by_fewer(monkeypatch):
    monkeypatch.setattr(dg, "TOTAL_VARIANCE_MAX", 10**6)  # the same code path as at 10^10, faster
    assert dg.delta_at(1.0, 100, 10**5, 900) == dg.delta_at(1.0, 100, 10**4, 900) > dg.delta_at(1.0, 100, 10**4, 800)
    with pytest.raises(ParameterError, match="users x noise variance must be at most"):
        dg.sum_law(100, 10**4 + 1)


@pytest.mark.parametrize("eps,delta,users,shift", [(1.0, 1e-6, 10**4, 256), (0.5, 1e-5, 100, 16),
                                                   (2.0, 1e-9, 1000, 64)])
def test_calibrate_gives_the_least_variance(eps, delta, users, shift):
    s2 = dg.calibrate(eps, delta, users, shift)
    assert dg.delta_at(eps, s2, users, shift) <= delta < dg.delta_at(eps, s2 - 1, users, shift)
    if eps <= 1:  # the classic multiplier is valid, and looser, there
        assert s2 < dg.classic_variance(eps, delta, users, shift)
        assert dg.delta_at(eps, dg.classic_variance(eps, delta, users, shift), users, shift) <= delta


def test_calibrate_at_the_edges():
    assert dg.calibrate(5.0, 1e-6, 10, 1) == 1  # no noise beyond the minimum is needed


@pytest.mark.parametrize("eps,s2,users,shift", [(1.0, 234, 10**4, 256), (0.5, 1000, 100, 16), (1.0, 10**5, 1, 64),
                                                (2.0, 20, 1000, 8)])
def test_close_to_the_analytic_gaussian_mechanism(eps, s2, users, shift):
    """Large noise: the discrete sum's delta is the continuous Gaussian's (sd sqrt(n s2), sensitivity sqrt(2)
    shift) to within a few percent (here: to 1e-3)."""
    continuous = analytic_gaussian_delta(eps, math.sqrt(users * s2), math.sqrt(2) * shift)
    assert dg.delta_at(eps, s2, users, shift) == pytest.approx(continuous, rel=1e-3)


def test_classic_sigma_and_variance():
    assert dg.classic_sigma(0.5, 1e-5) == pytest.approx(math.sqrt(2 * math.log(1.25e5)) / 0.5)
    sigma = dg.classic_sigma(1.0, 1e-6)
    assert dg.classic_variance(1.0, 1e-6, 10**4, 256) == math.ceil(2 * 256**2 * sigma**2 / 10**4) == 369
    assert dg.classic_variance(1.0, 1e-6, 10**9, 1) == 1


@pytest.mark.parametrize("call,match", [
    (lambda: dg.sample(0, 5, np.random.default_rng(1)), r"noise variance must be an integer in \[1, 281474976710656\]"),
    (lambda: dg.sample(2**48 + 1, 5, np.random.default_rng(1)), "noise variance must be an integer in"),
    (lambda: dg.sample(2.5, 5, np.random.default_rng(1)), "noise variance must be an integer in"),
    (lambda: dg.sample(3, -1, np.random.default_rng(1)), "size must be an integer >= 0"),
    (lambda: dg.pmf(3, [0.5]), "support must be integers"),
    (lambda: dg.sum_law(10, 10**10), "users x noise variance must be at most"),
    (lambda: dg.sum_law(10, 0), "users must be an integer >= 1"),
    (lambda: dg.delta_at(0.0, 10, 5, 1), "epsilon must be"),
    (lambda: dg.delta_at(math.inf, 10, 5, 1), "epsilon must be"),
    (lambda: dg.delta_at(1.0, 10, 5, 0), "shift must be an integer >= 1"),
    (lambda: dg.delta_at(1.0, 2 * 10**10, 1, 1), "noise variance must be at most"),
    (lambda: dg.calibrate(1.0, 0.0, 10, 1), "delta must be in"),
    (lambda: dg.calibrate(1.0, 1.0, 10, 1), "delta must be in"),
    (lambda: dg.calibrate(1.0, 1e-6, 0, 1), "users must be"),
    (lambda: dg.calibrate(1.0, 1e-14, 100, 4), "delta must be at least"),
    (lambda: dg.calibrate(1.0, 1e-6, 1000, 2**20), "fractional-bits must be at most about 14"),
    (lambda: dg.classic_variance(1.0, 1e-6, 1, 2**30), "fractional-bits must be at most about 21"),
    (lambda: dg.classic_sigma(-1.0, 1e-6), "epsilon must be"),
])
def test_bad_input(call, match):
    with pytest.raises(ParameterError, match=match):
        call()


@pytest.mark.parametrize("call", [
    lambda: dg.calibrate(1e-9, 1e-9, 1, 1),  # the central gaussian: no --fractional-bits at all
    lambda: dg.calibrate(1e-9, 1e-9, 1000, 2**8),  # dpdg's default 8 bits: even 0 would need too much
    lambda: dg.calibrate(1e-5, 1e-6, 1, 1),
    lambda: dg.classic_variance(1e-9, 1e-9, 1000, 2**8),
    lambda: dg.classic_variance(1e-9, 1e-9, 1, 1),
])
def test_noise_too_large_at_any_scale_names_epsilon_and_delta_first(call):
    """'fractional-bits must be at most about 0 here ..., got 0' named an option gaussian has not and contradicted
    itself; when no number of bits helps, only a larger epsilon or delta does, and the error says so."""
    with pytest.raises(ParameterError) as err:
        call()
    assert err.value.field == "epsilon" and str(err.value).startswith("epsilon must be larger here, or --delta larger")
    assert "fractional-bits" not in str(err.value)


def test_fewer_fractional_bits_named_only_where_some_would_do():
    with pytest.raises(ParameterError) as err:
        dg.calibrate(0.01, 1e-9, 100, 2**20)
    accepted = int(str(err.value).split("at most about ")[1].split()[0])
    assert err.value.field == "fractional-bits" and 0 <= accepted < 20 and "--epsilon or --delta" in str(err.value)
    dg.calibrate(0.01, 1e-9, 100, 2 ** max(accepted - 1, 0))  # a little fewer than named fits
