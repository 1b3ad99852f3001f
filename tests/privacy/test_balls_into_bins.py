import math

import numpy as np
import pytest
from scipy import stats

from privagg.errors import ParameterError
from privagg.privacy.balls_into_bins import (
    calibrate, closed_form_noise, numeric_noise, privacy_loss_tail, satisfies_closed_form)


def test_known_values():
    # Reference §2.1: n = 1e5, eps = 1, delta = 1e-10 gives mu = 97.96 (authors' bisection,
    # tolerance 0.1) against 759.0 from the closed form.
    assert numeric_noise(1.0, 1e-10, 100_000) == pytest.approx(97.96, abs=0.1)
    assert closed_form_noise(1.0, 1e-10) == pytest.approx(759.0, abs=0.05)
    # The VS run: n = 9,854,640, eps = 0.5, delta = 0.5 n^-2 gives 504.8.
    n = 9_854_640
    assert numeric_noise(0.5, 0.5 / n**2, n) == pytest.approx(504.8, abs=0.1)


def brute_tail(mu, n, eps):
    x = np.arange(n + 1)
    pmf = stats.binom.pmf(x, n, mu / n)
    x1, x2 = np.meshgrid(x, x, indexing="ij")
    return float((np.outer(pmf, pmf) * (x1 + 1 >= math.exp(eps) * x2)).sum())


@pytest.mark.parametrize("mu,n,eps", [(3.0, 40, 1.0), (10.0, 60, 0.5), (25.0, 80, 2.0)])
def test_tail_is_the_exact_double_sum(mu, n, eps):
    assert privacy_loss_tail(mu, n, eps) == pytest.approx(brute_tail(mu, n, eps), rel=1e-9, abs=1e-300)


def test_numeric_noise_is_the_smallest_that_works():
    for eps, delta, n in [(1.0, 1e-10, 100_000), (0.5, 1e-6, 200_000), (2.0, 1e-8, 10**7)]:
        mu = numeric_noise(eps, delta, n)
        assert privacy_loss_tail(mu, n, eps) <= delta
        assert privacy_loss_tail(mu - 0.01, n, eps) > delta
        assert mu < closed_form_noise(eps, delta)


def test_closed_form_condition():
    bound = closed_form_noise(1.0, 1e-6)
    assert satisfies_closed_form(bound * 10 * 1.000001, 1, 10, 1.0, 1e-6)
    assert not satisfies_closed_form(bound * 10 * 0.99, 1, 10, 1.0, 1e-6)


def test_guarantee_says_how():
    cal = calibrate(1.0, 1e-10, 100_000, "closed_form")
    assert cal.guarantee.epsilon == 1.0 and cal.guarantee.delta == 1e-10
    assert cal.guarantee.model == "shuffle" and "closed form" in cal.guarantee.method
    assert "numeric" in calibrate(1.0, 1e-10, 100_000).guarantee.method


@pytest.mark.parametrize("kwargs,match", [
    (dict(epsilon=0, delta=1e-6, n_users=100), "epsilon must be a finite number > 0"),
    (dict(epsilon=-1, delta=1e-6, n_users=100), "epsilon must be a finite number > 0"),
    (dict(epsilon=float("nan"), delta=1e-6, n_users=100), "epsilon must be a finite number > 0"),
    (dict(epsilon=1, delta=0, n_users=100), r"delta must be in \(0, 1\)"),
    (dict(epsilon=1, delta=1, n_users=100), r"delta must be in \(0, 1\)"),
    (dict(epsilon=1, delta=1e-6, n_users=1), "n_users must be an integer >= 2"),
    (dict(epsilon=1, delta=1e-6, n_users=100, method="magic"), "calibration must be one of"),
    (dict(epsilon=1, delta=1e-6, n_users=1000), "n_users must be large enough"),
])
def test_bad_parameters(kwargs, match):
    with pytest.raises(ParameterError, match=match):
        calibrate(**kwargs)
