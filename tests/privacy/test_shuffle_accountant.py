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
from privagg.privacy.blanket import blanket_delta
from privagg.privacy.shuffle import (binary_randomized_response_epsilon, fmt_delta, randomized_response_blanket,
                                     shuffle_epsilon, shuffle_epsilons)


def test_reference_values():
    """../shared/papers/shuffle-vector-aggregation.md §5: n = 10^5, eps0 = 4, delta = 1e-6 gives about 0.170
    numerically (FMT) and about 0.538 from the closed form."""
    assert shuffle_epsilon(4, 10**5, 1e-6, "fmt") == pytest.approx(0.170, rel=0.02)
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
    for args, field in [((0, 100, 1e-6), "local-epsilon"), ((1, 1, 1e-6), "users"), ((1, 100, 1.0), "delta")]:
        with pytest.raises(ParameterError, match=f"{field} must be"):
            shuffle_epsilon(*args)
    with pytest.raises(ParameterError, match="method must be one of best, fmt, wang, blanket, closed-form"):
        shuffle_epsilon(1, 100, 1e-6, "pld")
    with pytest.raises(ParameterError, match="total-variation must be in"):
        shuffle_epsilon(1, 100, 1e-6, "wang", total_variation=0.9)
    with pytest.raises(ParameterError, match="total-variation must be given with --method wang or best only"):
        shuffle_epsilon(1, 100, 1e-6, "fmt", total_variation=0.1)
    with pytest.raises(ParameterError, match="values must be given with --method blanket"):
        shuffle_epsilon(1, 100, 1e-6, "blanket")
    with pytest.raises(ParameterError, match="total-variation must be left out with --values"):
        shuffle_epsilon(1, 100, 1e-6, total_variation=0.1, values=3)
    with pytest.raises(ParameterError, match="values must be an integer"):
        shuffle_epsilon(1, 100, 1e-6, values=1)


def test_account_cli():
    runner = CliRunner()
    result = runner.invoke(app, ["account", "shuffle", "--local-epsilon", "4", "--users", "100000", "--delta", "1e-6",
                                 "--json"])
    assert result.exit_code == 0, result.stderr
    report = json.loads(result.stdout)  # the default: the least proven bound, here Wang et al.'s
    assert report["method"] == "best" and report["by"] == "wang" and report["epsilon"] == pytest.approx(0.1182, abs=5e-4)
    assert report["epsilons"]["fmt"] == pytest.approx(0.170, rel=0.02)
    assert report["closed_form_epsilon"] == pytest.approx(0.538, rel=0.02)
    result = runner.invoke(app, ["account", "shuffle", "--local-epsilon", "4", "--users", "100000", "--delta", "1e-6",
                                 "--method", "wang", "--total-variation", "0.9", "--json"])
    assert result.exit_code == 0 and json.loads(result.stdout)["epsilon"] < report["epsilon"]
    result = runner.invoke(app, ["account", "shuffle", "--local-epsilon", "4", "--users", "100000", "--delta", "1e-6",
                                 "--values", "100", "--json"])  # 100-ary randomized response: the blanket accountant
    report = json.loads(result.stdout)
    assert report["by"] == "blanket" and report["epsilon"] == pytest.approx(0.0684, abs=5e-4)
    assert report["epsilons"]["wang"] == pytest.approx(0.1182, abs=5e-4)
    result = runner.invoke(app, ["account", "shuffle", "--local-epsilon", "4", "--users", "100000", "--delta", "1e-6",
                                 "--values", "2"])  # binary randomized response: the gap to its exact eps
    assert result.exit_code == 0 and "exact eps of shuffled binary randomized response: 0.08472" in result.stdout
    assert "the bound is 39.5% above it" in result.stdout
    result = runner.invoke(app, ["account", "shuffle", "--local-epsilon", "8", "--users", "1000", "--delta", "1e-6",
                                 "--method", "closed-form"])
    assert result.exit_code == 2 and result.stderr.startswith("error: local-epsilon must be at most")


def shuffled_krr_laws(eps0, n, k):
    """Exact laws of the value counts released by n shuffled k-RR reports: user 0 holds value 0 (D) or 1 (D'),
    the others value 2 (k >= 3) or 0 (k = 2). Counts of values 0 and 1 are sufficient (a 2-D table)."""
    from scipy.signal import convolve

    stay = math.exp(eps0) / (math.exp(eps0) + k - 1)
    move = 1 / (math.exp(eps0) + k - 1)

    def report(value):  # P[report = 0], P[report = 1], else (another value), as a 2 x 2 table
        p0, p1 = (stay if value == 0 else move), (stay if value == 1 else move)
        return np.array([[1 - p0 - p1, p1], [p0, 0.0]])

    def law(first):
        total = report(first)
        for _ in range(n - 1):
            total = convolve(total, report(2 if k >= 3 else 0))
        return total

    return law(0), law(1)


@pytest.mark.parametrize("eps0,n,k", [(1.0, 30, 2), (2.0, 40, 3), (3.0, 60, 3), (2.0, 50, 5)])
def test_variation_ratio_bounds_shuffled_randomized_response_exactly(eps0, n, k):
    from privagg.privacy.shuffle import variation_ratio_delta

    p, q = shuffled_krr_laws(eps0, n, k)
    beta = (math.exp(eps0) - 1) / (math.exp(eps0) + k - 1)
    for eps in (0.05, 0.2, 0.5):
        exact = max(np.maximum(p - math.exp(eps) * q, 0).sum(), np.maximum(q - math.exp(eps) * p, 0).sum())
        assert exact <= variation_ratio_delta(eps, eps0, n, beta) + 1e-12
        assert exact <= variation_ratio_delta(eps, eps0, n) + 1e-12  # the default beta holds for any randomizer
        gamma = randomized_response_blanket(eps0, k)  # the blanket accountant, k-RR as R^PH
        assert exact <= blanket_delta(eps, gamma, n, k) + 1e-12


def test_variation_ratio_is_never_worse_than_fmt_at_the_largest_beta():
    for eps0, n in [(1.0, 10**4), (4.0, 10**5), (6.0, 10**6)]:
        assert shuffle_epsilon(eps0, n, 1e-6, "wang") <= shuffle_epsilon(eps0, n, 1e-6, "fmt")
    # binary randomized response (beta at its largest) at the reference setting: 0.118 against FMT's 0.170
    assert shuffle_epsilon(4, 10**5, 1e-6, "wang") == pytest.approx(0.1182, abs=5e-4)


@pytest.mark.parametrize("n,p", [(1, 0.5), (2, 0.1), (10, 0.3), (17, 0.4), (40, 0.9), (1000, 0.5), (100, 1e-6),
                                 (5_000_000, 0.0017), (4_999_999, 0.5), (10**9, 1e-3)])
def test_binomial_pmf_matches_scipy_stats(n, p):
    """The accountant's own pmf (no scipy.stats import at run time) against scipy.stats over the bulk and both
    tails: 1e-14 absolute (a few ulps of the largest), 1e-10 relative wherever the pmf is above 1e-290."""
    from privagg.privacy.shuffle import binomial_pmf

    sd = math.sqrt(n * p * (1 - p))
    c = np.arange(n + 1) if n <= 1000 else np.arange(int(n * p - 20 * sd), int(n * p + 20 * sd))
    ours, theirs = binomial_pmf(c, n, p), binom.pmf(c, n, p)
    assert np.max(np.abs(ours - theirs)) < 1e-14
    meaningful = theirs > 1e-290
    assert np.max(np.abs(ours[meaningful] / theirs[meaningful] - 1)) < 1e-10


@pytest.mark.parametrize("eps0,n,k", [(1.0, 10**4, 2), pytest.param(4.0, 10**5, 3, marks=pytest.mark.slow),
                                      (4.0, 10**5, 100), (2.0, 10**3, 10)])
def test_the_default_is_the_least_proven_bound(eps0, n, k):
    """account shuffle's default takes every numerical bound that applies and reports the least: for k-ary RR
    the blanket accountant joins FMT and Wang et al., and at k = 100 it needs 60% less eps."""
    every = shuffle_epsilons(eps0, n, 1e-6, values=k)
    assert set(every) == {"fmt", "wang", "blanket"}
    assert shuffle_epsilon(eps0, n, 1e-6, values=k) == min(every.values()) <= every["fmt"]
    assert shuffle_epsilon(eps0, n, 1e-6) == min(shuffle_epsilons(eps0, n, 1e-6).values())


def brute_binary_rr_epsilon(eps0, n, delta):
    """Shuffled binary RR over every dataset: the other users hold j ones, j = 0..n-1 (written here)."""
    p = math.exp(eps0) / (1 + math.exp(eps0))
    laws = []
    for j in range(n):
        others = np.convolve(binom.pmf(np.arange(j + 1), j, p), binom.pmf(np.arange(n - j), n - 1 - j, 1 - p))
        laws.append((np.convolve(others, [1 - p, p]), np.convolve(others, [p, 1 - p])))

    def worst(eps):
        e = math.exp(eps)
        return max(max(np.maximum(a - e * b, 0).sum(), np.maximum(b - e * a, 0).sum()) for a, b in laws)

    lo, hi = 0.0, eps0
    for _ in range(60):
        mid = (lo + hi) / 2
        lo, hi = (lo, mid) if worst(mid) <= delta else (mid, hi)
    return hi


@pytest.mark.parametrize("eps0,n", [(1.0, 60), (3.0, 300), (2.0, 500)])
def test_binary_randomized_response_exact_epsilon(eps0, n):
    """The exact eps of shuffled binary RR: over every dataset (n - 1 < 400), as the brute force here; at
    n = 500 over the 400 most extreme splits, which on these instances hold the worst; and below every bound."""
    exact = binary_randomized_response_epsilon(eps0, n, 1e-3)
    assert exact == pytest.approx(brute_binary_rr_epsilon(eps0, n, 1e-3), abs=1e-9)
    assert exact <= min(shuffle_epsilons(eps0, n, 1e-3, values=2).values())


def test_the_blanket_accountant_is_left_out_where_it_would_take_seconds():
    """Its cost grows as sqrt(gamma n / k) binomial tails per blanket size: at n = 10^6, k = 3, eps0 = 4 the
    default leaves it out (FMT and Wang et al. stand), and --method blanket is refused at once, naming the size."""
    from privagg.privacy.blanket import WINDOW_MAX, window_width

    gamma = randomized_response_blanket(4.0, 3)
    assert window_width(gamma, 10**6, 3) > WINDOW_MAX >= window_width(gamma, 10**5, 3)
    assert set(shuffle_epsilons(4.0, 10**6, 1e-6, values=3)) == {"fmt", "wang"}
    with pytest.raises(ParameterError, match="users must be fewer for --method blanket"):
        shuffle_epsilons(4.0, 10**8, 1e-6, "blanket", values=3)


def test_the_exact_binary_epsilon_refuses_sizes_it_cannot_hold():
    """Its laws grow as sqrt(n): at n = 10^12 it is refused before any work, and account shuffle says it was not
    computed instead of failing (the bounds stand)."""
    import time

    start = time.perf_counter()
    with pytest.raises(ParameterError, match="users must be fewer for the exact binary randomized response eps"):
        binary_randomized_response_epsilon(4.0, 10**12, 1e-6)
    assert time.perf_counter() - start < 1.0


@pytest.mark.parametrize("trials", [1, 7, 10**3, 10**6, 10**8, 10**9, 3 * 10**10])
@pytest.mark.parametrize("p", [1e-9, 0.1, 0.5, 0.97])
def test_binomial_tails_agree_with_scipy_stats_at_every_size(trials, p):
    from scipy.stats import binom

    from privagg.privacy.shuffle import binomial_cdf, binomial_sf

    mean, sd = trials * p, (trials * p * (1 - p)) ** 0.5
    k = np.unique(np.clip(np.round(mean + sd * np.array([-8, -3, -1, 0, 0.5, 2, 6])), 0, trials)).astype(np.int64)
    np.testing.assert_allclose(binomial_cdf(k, trials, p), binom.cdf(k, trials, p), rtol=1e-9, atol=1e-300)
    np.testing.assert_allclose(binomial_sf(k, trials, p), binom.sf(k, trials, p), rtol=1e-9, atol=1e-300)
    assert binomial_cdf(-1, trials, p) == 0 and binomial_cdf(trials, trials, p) == 1
    assert binomial_sf(-1, trials, p) == 1 and binomial_sf(trials, trials, p) == 0


@pytest.mark.parametrize("p", [1e-9, 0.5, 0.97])
def test_binomial_tails_of_repeated_pairs_are_the_elementwise_values_bit_for_bit(p):
    """``repeated=True`` evaluates each distinct (k, trials) once (the blanket accountant's windows repeat them);
    every value must be the bits of its own scalar evaluation and of scipy's betainc, whatever the shape, the
    repeats and the pairs outside the tails' range (k < 0, k >= trials) or too large for the integer key."""
    from scipy.special import betainc

    from privagg.privacy.shuffle import binomial_sf

    rng = np.random.default_rng(5)
    for trials, k in [(rng.integers(0, 300, size=(40, 50)), rng.integers(-5, 320, size=(40, 50))),
                      (np.full(500, 3 * 10**10), rng.integers(0, 3 * 10**10, size=500)),  # keys beyond 2^62
                      (rng.integers(1, 40, size=200).astype(float), rng.integers(0, 40, size=200)),
                      (rng.integers(1, 40, size=200) + 0.5, rng.integers(0, 40, size=200))]:  # fractional trials
        n = np.broadcast_to(trials, k.shape)
        batched = binomial_sf(k, trials, p, repeated=True)
        assert batched.shape == k.shape
        assert batched.ravel().tolist() == [float(binomial_sf(kk, nn, p)) for kk, nn in zip(k.ravel(), n.ravel())]
        inner = (np.floor(k) >= 0) & (np.floor(k) < n)
        assert np.array_equal(batched[inner], betainc((k + 1.0)[inner], (n - k)[inner].astype(float), p))
        assert np.array_equal(batched, binomial_sf(k, trials, p))  # the same as without the option
