"""Amplification by shuffling (FMT's numerical bound): the reference value, the closed form, an independent
evaluation of the bound, and an exact mechanism it must bound."""

import json
import math

import numpy as np
import pytest
from scipy.stats import binom
from typer.testing import CliRunner

from privagg.cli import app
from privagg.errors import ParameterError
from privagg.privacy.shuffle import fmt_delta, shuffle_epsilon


def test_reference_values():
    """../shared/papers/shuffle-vector-aggregation.md §5: n = 10^5, eps0 = 4, delta = 1e-6 gives about 0.170
    numerically (FMT) and about 0.538 from the closed form."""
    assert shuffle_epsilon(4, 10**5, 1e-6) == pytest.approx(0.170, rel=0.02)
    assert shuffle_epsilon(4, 10**5, 1e-6, "closed-form") == pytest.approx(0.538, rel=0.02)


def direct_fmt_delta(eps, eps0, n):
    """The same bound summed term by term over every C and a (no cdf shortcut, no window)."""
    alpha = math.exp(eps0) / (1 + math.exp(eps0))
    total = 0.0
    for c in range(n):
        b = binom.pmf(np.arange(c + 2), c, 0.5)  # B_C(a), a = 0..C+1 (B_C(C+1) = 0)
        shifted = np.concatenate([[0.0], b[:-1]])  # B_C(a - 1)
        p = alpha * shifted + (1 - alpha) * b
        q = alpha * b + (1 - alpha) * shifted
        total += binom.pmf(c, n - 1, math.exp(-eps0)) * max(np.maximum(p - math.exp(eps) * q, 0).sum(),
                                                            np.maximum(q - math.exp(eps) * p, 0).sum())
    return total


@pytest.mark.parametrize("eps0,n", [(1.0, 40), (2.0, 60), (0.5, 25)])
def test_the_cdf_form_equals_the_direct_sum(eps0, n):
    for eps in (0.0, 0.1, 0.3, 0.7):
        assert fmt_delta(eps, eps0, n) == pytest.approx(direct_fmt_delta(eps, eps0, n), abs=1e-12)


@pytest.mark.parametrize("eps0,n", [(1.0, 50), (2.0, 200), (3.0, 1000)])
def test_bounds_shuffled_binary_randomized_response_exactly(eps0, n):
    """Shuffled binary RR releases the number of ones; neighbours (1, 0, ..., 0) and (0, ..., 0) give
    Bern(alpha) + Bin(n - 1, 1 - alpha) against Bin(n, 1 - alpha): its exact delta(eps) is below the bound."""
    alpha = math.exp(eps0) / (1 + math.exp(eps0))
    k = np.arange(n + 1)
    p = alpha * binom.pmf(k - 1, n - 1, 1 - alpha) + (1 - alpha) * binom.pmf(k, n - 1, 1 - alpha)
    q = binom.pmf(k, n, 1 - alpha)
    for eps in (0.05, 0.2, 0.5):
        exact = max(np.maximum(p - math.exp(eps) * q, 0).sum(), np.maximum(q - math.exp(eps) * p, 0).sum())
        assert exact <= fmt_delta(eps, eps0, n) + 1e-12


def test_shuffling_amplifies_and_more_users_amplify_more():
    values = [shuffle_epsilon(2.0, n, 1e-6) for n in (10**3, 10**4, 10**5)]
    assert 2.0 > values[0] > values[1] > values[2] > 0


def test_bad_input():
    with pytest.raises(ParameterError, match="local-epsilon must be at most"):
        shuffle_epsilon(8, 1000, 1e-6, "closed-form")
    for args, field in [((0, 100, 1e-6), "epsilon"), ((1, 1, 1e-6), "users"), ((1, 100, 1.0), "delta")]:
        with pytest.raises(ParameterError, match=f"{field} must be"):
            shuffle_epsilon(*args)
    with pytest.raises(ParameterError, match="method must be one of fmt, closed-form"):
        shuffle_epsilon(1, 100, 1e-6, "wang")


def test_account_cli():
    runner = CliRunner()
    result = runner.invoke(app, ["account", "shuffle", "--local-epsilon", "4", "--users", "100000", "--delta", "1e-6",
                                 "--json"])
    assert result.exit_code == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["epsilon"] == pytest.approx(0.170, rel=0.02)
    assert report["closed_form_epsilon"] == pytest.approx(0.538, rel=0.02) and report["method"] == "fmt"
    result = runner.invoke(app, ["account", "shuffle", "--local-epsilon", "8", "--users", "1000", "--delta", "1e-6",
                                 "--method", "closed-form"])
    assert result.exit_code == 2 and result.stderr.startswith("error: local-epsilon must be at most")
