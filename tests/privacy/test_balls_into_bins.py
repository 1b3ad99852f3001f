import math

import numpy as np
import pytest
from scipy import signal, stats

from privagg.errors import ParameterError
from privagg.privacy.balls_into_bins import (
    calibrate, closed_form_noise, hockey_stick_divergence, hockey_stick_noise, numeric_noise, privacy_loss_tail,
    satisfies_closed_form)


def test_known_values():
    # Reference §2.1: n = 1e5, eps = 1, delta = 1e-10 gives mu = 97.96 (authors' iid-binomial model,
    # bisection to 0.1); privagg's bound under the true dummy law needs 98.01. Closed form: 759.0.
    assert numeric_noise(1.0, 1e-10, 100_000, 8685) == pytest.approx(97.96, abs=0.1)
    assert closed_form_noise(1.0, 1e-10) == pytest.approx(759.0, abs=0.05)
    # The VS run: n = 9,854,640, eps = 0.5, delta = 0.5 n^-2, b = 2359 gives 504.8.
    n = 9_854_640
    assert numeric_noise(0.5, 0.5 / n**2, n, 2359) == pytest.approx(504.8, abs=0.1)


def bivariate_multinomial(trials, p, top):
    """Joint pmf of (X1, X2) ~ Multinomial(trials; p, p) on [0, top]^2."""
    x = np.arange(top + 1)
    x2_pmf = stats.binom.pmf(x, trials, p)
    remaining = np.maximum(trials - x[None, :], 0)  # X1 given X2 = x2: Bin(trials - x2, p / (1 - p))
    return x2_pmf[None, :] * stats.binom.pmf(x[:, None], remaining, p / (1 - p))


def exact_tail(mu, n, bins, eps):
    """Pr[X1 + 1 >= e^eps X2] under the exact joint law of the dummies (small n only)."""
    rho = mu * bins / n
    whole, frac = math.floor(rho), rho - math.floor(rho)
    top = n * (whole + 1)
    joint = signal.fftconvolve(bivariate_multinomial(n * whole, 1 / bins, top),
                               bivariate_multinomial(n, frac / bins, top))[:top + 1, :top + 1]
    x1, x2 = np.meshgrid(np.arange(top + 1), np.arange(top + 1), indexing="ij")
    return float(joint[x1 + 1 >= math.exp(eps) * x2].sum())


@pytest.mark.parametrize("mu,n,bins,eps", [(3.0, 40, 10, 1.0), (6.0, 30, 4, 0.5), (4.0, 60, 30, 2.0),
                                           (10.0, 25, 5, 1.0)])
def test_tail_bounds_the_exact_joint_tail(mu, n, bins, eps):
    # exact_tail is accurate to ~1e-15 (FFT); the bound must not fall below it.
    assert privacy_loss_tail(mu, n, bins, eps) >= exact_tail(mu, n, bins, eps) - 1e-12


def add_ball(counts, j):
    """The bin counts ``counts`` with one more ball in bin j."""
    return counts[:j] + (counts[j] + 1,) + counts[j + 1:]


def noise_histograms(n, bins, rho):
    """Exact law of the dummies' bin counts: each of n users throws floor(rho) balls and one more
    with probability frac, each uniform over the bins. {counts tuple: probability}."""
    whole, frac = math.floor(rho), rho - math.floor(rho)
    law = {(0,) * bins: 1.0}
    for ball_prob in [1.0] * (n * whole) + [frac] * n:
        new = {}
        for counts, p in law.items():
            new[counts] = new.get(counts, 0.0) + p * (1 - ball_prob)
            for j in range(bins):
                c = add_ball(counts, j)
                new[c] = new.get(c, 0.0) + p * ball_prob / bins
        law = new
    return law


def exact_delta(n, bins, rho, eps):
    """sup over outputs: sum_c (P[c | real ball in bin 0] - e^eps P[c | real ball in bin 1])_+ for M^BIB, s = 1."""
    law = noise_histograms(n, bins, rho)
    on_0 = {add_ball(c, 0): p for c, p in law.items()}
    on_1 = {add_ball(c, 1): p for c, p in law.items()}
    return sum(max(0.0, p - math.exp(eps) * on_1.get(c, 0.0)) for c, p in on_0.items())


@pytest.mark.parametrize("n,bins,rho,eps", [(4, 3, 0.5, 0.5), (4, 3, 1.5, 1.0), (6, 4, 0.8, 1.0), (3, 5, 2.4, 0.3)])
def test_hockey_stick_bounds_the_exact_delta_of_the_whole_output(n, bins, rho, eps):
    """Against every output of a tiny M^BIB (FE0 with B = bins), enumerated exactly."""
    mu = n * rho / bins
    exact = exact_delta(n, bins, rho, eps)
    assert hockey_stick_divergence(mu, n, bins, eps) >= exact - 1e-12
    assert privacy_loss_tail(mu, n, bins, eps) >= hockey_stick_divergence(mu, n, bins, eps) - 1e-12


def test_hockey_stick_needs_less_noise():
    # docs/derivations.md: about 82.13 under Poisson noise, against 98.0 for the tail criterion.
    mu = hockey_stick_noise(1.0, 1e-10, 100_000, 8685)
    assert mu == pytest.approx(82.13, abs=0.1)
    assert hockey_stick_divergence(mu, 100_000, 8685, 1.0) <= 1e-10 < hockey_stick_divergence(mu - 0.01, 100_000,
                                                                                               8685, 1.0)
    assert mu < numeric_noise(1.0, 1e-10, 100_000, 8685)


def test_numeric_noise_is_the_smallest_that_works():
    for eps, delta, n, bins in [(1.0, 1e-10, 100_000, 8685), (0.5, 1e-6, 5_000, 40), (2.0, 1e-8, 10**7, 2**20),
                                (8.0, 1e-10, 10**5, 100)]:
        mu = numeric_noise(eps, delta, n, bins)
        assert privacy_loss_tail(mu, n, bins, eps) <= delta
        assert privacy_loss_tail(mu - 0.01, n, bins, eps) > delta
        assert mu >= math.log(1 / delta) * 0.99  # Pr[X2 = 0] ~ e^-mu must be at most delta
        if eps <= 1:
            assert mu < closed_form_noise(eps, delta)


def test_closed_form_condition():
    bound = closed_form_noise(1.0, 1e-6)
    assert satisfies_closed_form(bound * 10 * 1.000001, 1, 10, 1.0, 1e-6)
    assert not satisfies_closed_form(bound * 10 * 0.99, 1, 10, 1.0, 1e-6)


def test_guarantee_says_how():
    cal = calibrate(1.0, 1e-10, 100_000, 8685, "closed_form")
    assert cal.guarantee.epsilon == 1.0 and cal.guarantee.delta == 1e-10
    assert cal.guarantee.model == "shuffle" and "closed form" in cal.guarantee.method
    assert "numeric" in calibrate(1.0, 1e-10, 100_000, 8685).guarantee.method
    assert "hockey stick" in calibrate(1.0, 1e-10, 100_000, 8685, "hockey_stick").guarantee.method


@pytest.mark.parametrize("kwargs,match", [
    (dict(epsilon=0, delta=1e-6, n_users=100, bins=10), "epsilon must be a finite number > 0"),
    (dict(epsilon=-1, delta=1e-6, n_users=100, bins=10), "epsilon must be a finite number > 0"),
    (dict(epsilon=float("nan"), delta=1e-6, n_users=100, bins=10), "epsilon must be a finite number > 0"),
    (dict(epsilon=float("inf"), delta=1e-6, n_users=100, bins=10), "epsilon must be a finite number > 0"),
    (dict(epsilon=1, delta=0, n_users=100, bins=10), r"delta must be in \(0, 1\)"),
    (dict(epsilon=1, delta=1, n_users=100, bins=10), r"delta must be in \(0, 1\)"),
    (dict(epsilon=1, delta=1e-6, n_users=1, bins=10), "n_users must be an integer >= 2"),
    (dict(epsilon=1, delta=1e-6, n_users=100, bins=1), "bins must be an integer >= 2"),
    (dict(epsilon=1, delta=1e-6, n_users=100, bins=10, method="magic"), "calibration must be one of"),
    # The closed form is not private for large eps (Pr[X2 = 0] > delta): refused.
    (dict(epsilon=6, delta=1e-10, n_users=10**5, bins=10, method="closed_form"), r"epsilon must be in \(0, 1\]"),
])
def test_bad_parameters(kwargs, match):
    with pytest.raises(ParameterError, match=match):
        calibrate(**kwargs)
