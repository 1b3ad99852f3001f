"""The central baselines: the exact discrete Laplace sampler's law (chi-square), the Laplace's delta(eps)
against a brute-force sum over the two moved counts, the discrete Gaussian's exact sd, no delta for laplace.
Unbiasedness, variance, merging and the exact audit come from the contract tests and the audit grid."""

import json
import math

import numpy as np
import pytest
from scipy.stats import chi2
from typer.testing import CliRunner

from privagg.cli import app
from privagg.privacy import discrete_gaussian
from privagg.protocols import registry


@pytest.mark.parametrize("t,s", [(1, 1), (7, 3), (2**24, 2**23)])
def test_discrete_laplace_sampler_has_the_exact_law(t, s):
    """Chi-square over |y| <= 8 plus the two tails at fixed seeds (the 0.999 quantile)."""
    a, n = s / t, 200_000
    draws = discrete_gaussian.discrete_laplace(n, t, s, np.random.default_rng(5))
    support = np.arange(-8, 9)
    pmf = math.tanh(a / 2) * np.exp(-a * np.abs(support))
    tail = math.exp(-a * 9) / (1 + math.exp(-a))
    expected = n * np.concatenate([[tail], pmf, [tail]])
    observed = np.concatenate([[np.sum(draws < -8)], [np.sum(draws == y) for y in support], [np.sum(draws > 8)]])
    assert np.sum((observed - expected) ** 2 / expected) < chi2.ppf(0.999, len(expected) - 1)


@pytest.mark.parametrize("eps", [0.5, 1.0, 3.0])
def test_laplace_delta_is_the_exact_divergence_of_the_two_moved_counts(eps):
    params = registry.calibrate("laplace", epsilon=eps, n_users=100, domain_size=4)
    assert 2 * params.a <= eps and eps - 2 * params.a < 2**-22
    y = np.arange(-400, 401)
    p = params.pmf(y)
    first = np.outer(np.roll(p, 1), p)  # (count x + 1, count y) under D: the noise shifted up on x
    second = np.outer(p, np.roll(p, 1))  # the same counts under D': shifted up on y
    for e in (eps / 4, eps / 2, eps, 2 * eps):
        brute = float(np.maximum(first - math.exp(e) * second, 0).sum())
        assert params.delta_at(e) == pytest.approx(brute, abs=1e-12)
    assert params.delta_at(eps) == 0.0


def test_gaussian_reports_the_exact_noise_sd():
    params = registry.calibrate("gaussian", epsilon=1.0, delta=1e-6, n_users=100, domain_size=4)
    assert params.noise_sd <= math.sqrt(params.noise_variance) * (1 + 1e-12)  # at most s2 (CKS), all but equal
    draws = discrete_gaussian.sample(params.noise_variance, 400_000, np.random.default_rng(2))
    assert draws.var() == pytest.approx(params.noise_sd**2, rel=4 * math.sqrt(2 / 400_000))
    assert params.delta_at(1.0) <= 1e-6


def test_the_curator_releases_each_count_once():
    params = registry.calibrate("laplace", epsilon=1.0, n_users=1000, domain_size=10)
    curator = registry.analyzer(params, rng=3)
    agg = curator.agg_init()
    first = curator.finalize(agg).estimates
    assert np.array_equal(curator.finalize(agg).estimates, first)  # the same release, not a second one


def test_laplace_takes_no_delta_and_estimates_the_bundled_words():
    runner = CliRunner()
    result = runner.invoke(app, ["estimate", "laplace", "--epsilon", "1", "--delta", "1e-6"])
    assert result.exit_code == 2 and "delta must be left out for laplace (pure eps-DP" in result.stderr, result.stderr
    result = runner.invoke(app, ["estimate", "laplace", "--epsilon", "1", "--seed", "1", "--top", "3", "--domain",
                                 str(2**16), "--json"])  # the words hashed into 2^16 codes: a smaller full domain
    assert result.exit_code == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["privacy"]["model"] == "central" and report["parameters"]["delta"] == 0
    top = report["estimates"][0]
    assert top["item"] == "the" and abs(top["estimate"] - top["true_count"]) <= 5 * top["stderr"]


@pytest.mark.parametrize("epsilon", [100.0, 128.0, 129.0, 1000.0, 1e200])
def test_laplace_at_a_huge_epsilon_caps_its_scale_and_answers(epsilon):
    """eps = 1000 failed scale_numerator's range (a field no one typed), then delta_at overflowed expm1: the scale
    is capped at a = 64 (noise that buys eps = 128, at most the claim), and delta(eps) is 0 past 2a."""
    params = registry.calibrate("laplace", epsilon=epsilon, n_users=100, domain_size=10)
    assert params.a == min(epsilon / 2, 64.0)
    assert params.delta_at(epsilon) == 0.0 and params.delta_at(2 * params.a) == 0.0
    assert params.delta_at(params.a) > 0.0
    params.verify()
