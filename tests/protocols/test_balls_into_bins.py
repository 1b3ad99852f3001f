"""FE0, FE1 and M^BIB against their theory (k-sigma tolerances with k = 4, fixed seeds)."""

import math

import numpy as np
import pytest

from privagg.core.messages import MessageBatch, shuffle
from privagg.errors import ParameterError
from privagg.protocols import FE0, FE1, BallsIntoBinsCentral

N, EPS, DELTA = 10_000, 1.0, 1e-6
K = 4.0
RUNS = 300


def population(domain, rng_seed=0):
    """Item 0: 3000 users, item 1: 1000, item 2: 100, item domain-1: none, the rest uniform."""
    rng = np.random.default_rng(rng_seed)
    rest = rng.integers(3, domain - 1, size=N - 4100)
    return np.concatenate([np.zeros(3000, int), np.ones(1000, int), np.full(100, 2), rest])


def check_unbiased_with_theoretical_variance(protocol, codes, draws):
    """draws: RUNS x len(items) estimates of the items below."""
    items = np.array([0, 1, 2, 3, protocol.domain_size - 1])
    truth = np.bincount(codes, minlength=protocol.domain_size)[items]
    sd = protocol.standard_error(truth)
    mean, var = draws.mean(axis=0), draws.var(axis=0, ddof=1)
    assert np.all(np.abs(mean - truth) <= K * sd / math.sqrt(RUNS)), (mean, truth, sd)
    # sample variance of a near-Gaussian: relative sd sqrt(2 / (R - 1))
    assert np.all(np.abs(var / sd**2 - 1) <= K * math.sqrt(2 / (RUNS - 1))), var / sd**2
    return items


@pytest.mark.parametrize("domain", [100, 30])  # rho < 1 and rho > 1
def test_fe0_unbiased_with_theoretical_variance(domain):
    proto = FE0(EPS, DELTA, N, domain)
    assert proto.rho == pytest.approx(proto.mu * domain / N)
    codes = population(domain)
    rng = np.random.default_rng(1)
    items = np.array([0, 1, 2, 3, domain - 1])
    draws = np.array([proto.fast_oracle(codes, rng)[0].estimate(items) for _ in range(RUNS)])
    check_unbiased_with_theoretical_variance(proto, codes, draws)


@pytest.mark.parametrize("bins", [50, 200])  # rho < 1 and rho > 1
def test_fe1_unbiased_with_theoretical_variance(bins):
    proto = FE1(EPS, DELTA, N, 5000, bins=bins)
    assert (proto.rho < 1) == (bins == 50)
    codes = population(5000)
    rng = np.random.default_rng(2)
    items = np.array([0, 1, 2, 3, 4999])
    draws = np.array([proto.fast_oracle(codes, rng)[0].estimate(items) for _ in range(RUNS)])
    check_unbiased_with_theoretical_variance(proto, codes, draws)


def test_fe1_full_domain_agrees_with_queries():
    proto = FE1(EPS, DELTA, N, 5000, bins=50)
    codes = population(5000)
    oracle = proto.analyze(shuffle(proto.randomize(codes, rng=3), rng=4))
    every = oracle.estimate_all()
    queries = np.arange(0, 5000, 7)
    assert np.allclose(every[queries], oracle.estimate(queries))
    top_codes, top_est = oracle.top_k(3)
    assert top_codes.tolist() == [0, 1, 2] and np.allclose(top_est, every[[0, 1, 2]])
    cand_codes, _ = oracle.top_k(2, candidates=[3, 2, 1])
    assert cand_codes.tolist() == [1, 2]


@pytest.mark.parametrize("make", [lambda: FE0(EPS, DELTA, N, 30), lambda: FE0(EPS, DELTA, N, 100),
                                  lambda: FE1(EPS, DELTA, N, 5000, bins=50),
                                  lambda: FE1(EPS, DELTA, N, 5000, bins=200)])
def test_messages_per_user_is_one_plus_rho(make):
    proto = make()
    batch = proto.randomize(population(proto.domain_size), rng=5)
    frac = proto.rho - math.floor(proto.rho)
    assert abs(len(batch) / N - proto.messages_per_user) <= K * math.sqrt(frac * (1 - frac) / N)


def test_fe1_parameters_follow_the_reference():
    proto = FE1(1.0, 1e-10, 100_000, 2**24, c=1)
    assert proto.bins == 8685 and proto.hash.modulus == 16777259
    assert proto.collision_probability == pytest.approx(1.15081e-4, rel=1e-5)
    assert proto.bits_per_message == 2 * 25 + 14
    assert proto.messages_per_user == pytest.approx(9.508, abs=0.01)  # SDPFE: 9.50795 (mu 97.96)
    assert FE1(1.0, 1e-10, 100_000, 2**24, c=3).bins == 65
    assert FE1(1.0, 1e-10, 100_000, 2**24, c=3).collision_probability == pytest.approx(0.0153846, rel=1e-5)


def test_central_bib_matches_fe0_theory():
    proto = BallsIntoBinsCentral(EPS, DELTA, N, 100)
    assert proto.model == "central" and proto.messages_per_user == 1
    codes = population(100)
    rng = np.random.default_rng(6)
    items = np.array([0, 1, 2, 3, 99])
    draws = np.array([proto.release(codes, rng).estimate(items) for _ in range(RUNS)])
    check_unbiased_with_theoretical_variance(proto, codes, draws)


def test_max_error_bound_holds_in_practice():
    proto = FE1(EPS, DELTA, N, 5000, bins=50)
    codes = population(5000)
    truth = np.bincount(codes, minlength=5000)
    oracle, _ = proto.fast_oracle(codes, np.random.default_rng(7))
    assert np.abs(oracle.estimate_all() - truth).max() <= proto.max_error_bound(0.05)


@pytest.mark.parametrize("make,match", [
    (lambda: FE1(EPS, DELTA, N, 5000, bins=50, c=1), "bins must be given alone"),
    (lambda: FE1(EPS, DELTA, N, 5000, c=10), r"c must be such that b = floor\(n / ln\^c n\) is in \[2, 2\^49\]"),
    (lambda: FE1(EPS, DELTA, N, 5000, bins=1), r"bins must be an integer in \[2, "),
    (lambda: FE1(EPS, DELTA, N, 2**60), "domain must be an integer in"),
    (lambda: FE0(EPS, DELTA, N, 1), "domain must be an integer in"),
    (lambda: FE0(EPS, DELTA, 1, 100), "n_users must be an integer >= 2"),
    (lambda: FE0(0, DELTA, N, 100), "epsilon must be"),
    (lambda: FE0(EPS, 1.5, N, 100), "delta must be"),
])
def test_bad_parameters(make, match):
    with pytest.raises(ParameterError, match=match):
        make()


def test_bad_items_and_messages():
    proto = FE1(EPS, DELTA, N, 5000, bins=50)
    with pytest.raises(ParameterError, match=r"item must be integers in \[0, 5000\)"):
        proto.randomize([5000])
    with pytest.raises(ParameterError, match="message field 'w'"):
        proto.analyze(MessageBatch({"u": np.array([1]), "v": np.array([0]), "w": np.array([50])}))
    oracle = proto.analyze(proto.randomize([1, 2, 3], rng=0))
    with pytest.raises(ParameterError, match="item must be integers"):
        oracle.estimate([-1])
