"""FE0, FE1 and M^BIB against their theory (k-sigma tolerances with k = 4, fixed seeds)."""

import math

import numpy as np
import pytest

from privagg.core.messages import MessageBatch, shuffle
from privagg.errors import ParameterError
from privagg.privacy.balls_into_bins import hockey_stick_divergence
from privagg.protocols import registry
from privagg.protocols.balls_into_bins import (
    BallsIntoBinsCurator, BIBParameters, CountAggregate, FE0Analyzer, FE0Client, FE0Parameters, FE1Analyzer,
    FE1Client, FE1Parameters, calibrate_bib, calibrate_fe0, calibrate_fe1, dummy_counts, fe0_fast_aggregate,
    fe1_fast_aggregate, total_dummies)
from privagg.protocols.results import FrequencyTable, HeavyHitterList, VectorSum, count_among, top_k

N, EPS, DELTA = 10_000, 1.0, 1e-6
K = 4.0
RUNS = 300


def population(domain, rng_seed=0):
    """Item 0: 3000 users, item 1: 1000, item 2: 100, item domain-1: none, the rest uniform."""
    rng = np.random.default_rng(rng_seed)
    rest = rng.integers(3, domain - 1, size=N - 4100)
    return np.concatenate([np.zeros(3000, int), np.ones(1000, int), np.full(100, 2), rest])


def fast_estimates(params, fast, analyzer_type, codes, items, rng):
    """One run of the protocol's distributional shortcut: the estimates of ``items``."""
    analyzer = analyzer_type(params, queries=items)
    return analyzer.finalize(fast(params, codes, rng, analyzer)).estimate(items)


def check_unbiased_with_theoretical_variance(params, codes, draws, items):
    """draws: RUNS x len(items) estimates of ``items``."""
    truth = np.bincount(codes, minlength=params.domain_size)[items]
    sd = params.standard_error(truth)
    mean, var = draws.mean(axis=0), draws.var(axis=0, ddof=1)
    assert np.all(np.abs(mean - truth) <= K * sd / math.sqrt(RUNS)), (mean, truth, sd)
    # sample variance of a near-Gaussian: relative sd sqrt(2 / (R - 1))
    assert np.all(np.abs(var / sd**2 - 1) <= K * math.sqrt(2 / (RUNS - 1))), var / sd**2


@pytest.mark.parametrize("domain", [100, 30])  # rho < 1 and rho > 1
def test_fe0_unbiased_with_theoretical_variance(domain):
    params = calibrate_fe0(EPS, DELTA, N, domain)
    assert params.rho == pytest.approx(params.mu * domain / N)
    codes = population(domain)
    rng = np.random.default_rng(1)
    items = np.array([0, 1, 2, 3, domain - 1])
    draws = np.array([fast_estimates(params, fe0_fast_aggregate, FE0Analyzer, codes, items, rng)
                      for _ in range(RUNS)])
    check_unbiased_with_theoretical_variance(params, codes, draws, items)


@pytest.mark.parametrize("bins", [50, 200])  # rho < 1 and rho > 1
def test_fe1_unbiased_with_theoretical_variance(bins):
    params = calibrate_fe1(EPS, DELTA, N, 5000, bins=bins)
    assert (params.rho < 1) == (bins == 50)
    codes = population(5000)
    rng = np.random.default_rng(2)
    items = np.array([0, 1, 2, 3, 4999])
    draws = np.array([fast_estimates(params, fe1_fast_aggregate, FE1Analyzer, codes, items, rng)
                      for _ in range(RUNS)])
    check_unbiased_with_theoretical_variance(params, codes, draws, items)


def test_fe1_full_domain_agrees_with_queries():
    params = calibrate_fe1(EPS, DELTA, N, 5000, bins=50)
    codes = population(5000)
    messages = shuffle(FE1Client(params).randomize(codes, rng=3), rng=4)
    full = FE1Analyzer(params)
    table = full.finalize(full.agg_update(full.agg_init(), messages))
    assert table.full_domain and table.items is None and table.estimates.size == 5000
    every = table.estimate_all()
    queries = np.arange(0, 5000, 7)
    some = FE1Analyzer(params, queries=queries[::-1])  # queries are sorted and made distinct
    some_table = some.finalize(some.agg_update(some.agg_init(), messages))
    assert not some_table.full_domain and some_table.items.tolist() == queries.tolist()
    assert np.array_equal(every[queries], some_table.estimate(queries))
    assert np.array_equal(table.estimate(queries), every[queries])
    top_codes, top_est = table.top_k(3)
    assert top_codes.tolist() == [0, 1, 2] and np.array_equal(top_est, every[[0, 1, 2]])
    cands = FE1Analyzer(params, queries=[3, 2, 1])
    cand_codes, _ = cands.finalize(cands.agg_update(cands.agg_init(), messages)).top_k(2)
    assert cand_codes.tolist() == [1, 2]
    assert table.messages == len(messages) and table.malformed == 0


@pytest.mark.parametrize("make", [lambda: calibrate_fe0(EPS, DELTA, N, 30), lambda: calibrate_fe0(EPS, DELTA, N, 100),
                                  lambda: calibrate_fe1(EPS, DELTA, N, 5000, bins=50),
                                  lambda: calibrate_fe1(EPS, DELTA, N, 5000, bins=200)])
def test_messages_per_user_is_one_plus_rho(make):
    params = make()
    batch = registry.client(params).randomize(population(params.domain_size), rng=5)
    frac = params.rho - math.floor(params.rho)
    assert abs(len(batch) / N - params.messages_per_user) <= K * math.sqrt(frac * (1 - frac) / N)


def test_dummy_counts_follow_the_coins():
    rng = np.random.default_rng(9)
    counts = dummy_counts(100_000, 2.3, rng)
    assert set(np.unique(counts).tolist()) == {2, 3}
    assert abs((counts == 3).mean() - 0.3) <= K * math.sqrt(0.3 * 0.7 / 100_000)
    assert dummy_counts(5, 4.0, rng).tolist() == [4] * 5 and total_dummies(5, 4.0, rng) == 20
    totals = np.array([total_dummies(1000, 2.3, rng) for _ in range(2000)])
    assert abs(totals.mean() - 2300) <= K * math.sqrt(1000 * 0.21 / 2000)


def test_fe1_parameters_follow_the_reference():
    params = calibrate_fe1(1.0, 1e-10, 100_000, 2**24, c=1)
    assert params.bins == 8685 and params.modulus == params.hash.modulus == 16777259
    assert params.collision_probability == pytest.approx(1.15081e-4, rel=1e-5)
    assert params.bits_per_message == 2 * 25 + 14
    assert params.messages_per_user == pytest.approx(9.508, abs=0.01)  # SDPFE: 9.50795 (mu 97.96)
    assert calibrate_fe1(1.0, 1e-10, 100_000, 2**24, c=3).bins == 65
    assert calibrate_fe1(1.0, 1e-10, 100_000, 2**24, c=3).collision_probability == pytest.approx(0.0153846,
                                                                                                  rel=1e-5)


def test_fe1_privacy_accounts_for_the_overlap():
    params = calibrate_fe1(EPS, DELTA, N, 5000, bins=50)
    theta = params.collision_probability
    assert params.overlap == theta > 0 and params.privacy.parameters["overlap"] == theta
    assert params.delta_at(EPS) == hockey_stick_divergence(params.mu, N, 50, EPS, theta) <= DELTA
    assert "joint convexity" in params.privacy.method_detail
    assert calibrate_fe0(EPS, DELTA, N, 50).overlap == 0.0
    closed = calibrate_fe1(EPS, DELTA, N, 5000, bins=50, calibration="closed_form")
    assert any("overlapping" in c for c in closed.privacy.caveats)


def test_theory_of_the_parameters():
    params = calibrate_fe1(EPS, DELTA, N, 5000, bins=200)
    whole, frac = math.floor(params.rho), params.rho - math.floor(params.rho)
    assert params.noise_mean() == pytest.approx(params.mu, rel=1e-12)
    assert params.noise_variance() == pytest.approx(N * (whole / 200 * (1 - 1 / 200) + frac / 200 * (1 - frac / 200)))
    p = params.collision_probability
    assert params.debias(N * p + params.mu + 7 * (1 - p)) == pytest.approx(7.0)
    assert params.standard_error(0) == pytest.approx(math.sqrt(N * p * (1 - p) + params.noise_variance()) / (1 - p))
    assert params.standard_error(2 * N) == params.standard_error(N)  # g is clipped to [0, n]
    assert params.standard_error(N) < params.standard_error(-5) == params.standard_error(0)
    expected = params.expected_error()
    assert expected["messages_per_user"] == params.messages_per_user and expected["max_error_beta"] == 0.05
    assert expected["max_error_bound"] == params.max_error_bound(0.05)
    with pytest.raises(ParameterError, match=r"beta must be in \(0, 1\)"):
        params.max_error_bound(1.0)
    assert params.derived() == {"collision_probability": p} and calibrate_fe0(EPS, DELTA, N, 30).derived() == {}


def test_central_bib_matches_fe0_theory():
    params = calibrate_bib(EPS, DELTA, N, 100)
    fe0 = calibrate_fe0(EPS, DELTA, N, 100)
    assert params.model == "central" and params.messages_per_user == 1
    assert params.privacy.model == "central" and params.privacy.trusted == ("curator",)
    assert (params.mu, params.rho, params.standard_error(0)) == (fe0.mu, fe0.rho, fe0.standard_error(0))
    codes = population(100)
    rng = np.random.default_rng(6)
    items = np.array([0, 1, 2, 3, 99])
    sent = MessageBatch({"value": codes})
    draws = []
    for _ in range(RUNS):
        curator = BallsIntoBinsCurator(params, queries=items, rng=rng)
        draws.append(curator.finalize(curator.agg_update(curator.agg_init(), sent)).estimate(items))
    check_unbiased_with_theoretical_variance(params, codes, np.array(draws), items)


def test_max_error_bound_holds_in_practice():
    params = calibrate_fe1(EPS, DELTA, N, 5000, bins=50)
    codes = population(5000)
    truth = np.bincount(codes, minlength=5000)
    analyzer = FE1Analyzer(params)
    table = analyzer.finalize(fe1_fast_aggregate(params, codes, np.random.default_rng(7), analyzer))
    assert np.abs(table.estimate_all() - truth).max() <= params.max_error_bound(0.05)


@pytest.mark.parametrize("make,match", [
    (lambda: calibrate_fe1(EPS, DELTA, N, 5000, bins=50, c=1), "bins must be given alone"),
    (lambda: calibrate_fe1(EPS, DELTA, N, 5000, c=10),
     r"c must be such that b = floor\(n / ln\^c n\) is in \[2, 2\^49\]"),
    (lambda: calibrate_fe1(EPS, DELTA, N, 5000, c=-1), "c must be a finite number >= 0"),
    (lambda: calibrate_fe1(EPS, DELTA, N, 5000, bins=1), r"bins must be an integer in \[2, "),
    (lambda: calibrate_fe1(EPS, DELTA, N, 2**60), "domain must be an integer in"),
    (lambda: calibrate_fe0(EPS, DELTA, N, 1), "domain must be an integer in"),
    (lambda: calibrate_fe0(EPS, DELTA, N, 2**28 + 1), "domain must be an integer in"),
    (lambda: calibrate_fe0(EPS, DELTA, 1, 100), r"n_users must be an integer in \[2, 9007199254740992\]"),
    (lambda: calibrate_fe0(EPS, DELTA, 2**63, 100), r"n_users must be an integer in \[2, 9007199254740992\]"),
    (lambda: calibrate_fe1(EPS, DELTA, 10**400, 100), r"n_users must be .*got 1000000000.*\(401 characters\)"),
    (lambda: calibrate_fe0(0, DELTA, N, 100), "epsilon must be"),
    (lambda: calibrate_fe0(EPS, 1.5, N, 100), "delta must be"),
    (lambda: calibrate_fe0(EPS, DELTA, N, 100, calibration="magic"), "calibration must be one of"),
    (lambda: registry.calibrate("fe0", epsilon=EPS, delta=DELTA, n_users=N, domain_size=100, c=1),
     r"c must be left out for fe0"),
    (lambda: registry.calibrate("fe9", epsilon=EPS, delta=DELTA, n_users=N, domain_size=100),
     "protocol must be one of bib, fe0, fe1"),
])
def test_bad_parameters(make, match):
    with pytest.raises(ParameterError, match=match):
        make()


@pytest.mark.parametrize("change,field", [
    (dict(rho=1.0), "rho"), (dict(mu=-1.0), "mu"), (dict(mu=float("inf")), "mu"),
    (dict(calibration="x"), "calibration"),
    (dict(modulus=5001), "modulus"), (dict(modulus=4999), "modulus"), (dict(bins=1), "bins"),
    (dict(modulus=5021), "modulus"),  # a prime >= max(B, b), but not the smallest: not what calibration picks
    (dict(c=1.0), "bins"),  # b = 50 was given, but c = 1 would mean floor(n / ln n)
    (dict(epsilon=0.0), "epsilon"), (dict(n_users=1), "n_users"),
])
def test_frozen_parameters_check_their_fields(change, field):
    good = calibrate_fe1(EPS, DELTA, N, 5000, bins=50).to_dict()
    del good["protocol"]
    with pytest.raises(ParameterError) as err:
        FE1Parameters(**{**good, **change})
    assert err.value.field == field


@pytest.mark.parametrize("change,field", [
    (dict(protocol="fe1"), "parameters.protocol"),  # another protocol's parameters
    (dict(mu="55"), "parameters.mu"), (dict(n_users=10_000.0), "parameters.n_users"),
    (dict(n_users=True), "parameters.n_users"), (dict(calibration=1), "parameters.calibration"),
    (dict(extra=1), "parameters"),
])
def test_from_dict_checks_types(change, field):
    good = calibrate_fe0(EPS, DELTA, N, 100).to_dict()
    data = {k: v for k, v in {**good, **change}.items() if v is not None}
    with pytest.raises(ParameterError) as err:
        FE0Parameters.from_dict(data)
    assert err.value.field == field


def test_bad_items_and_messages():
    params = calibrate_fe1(EPS, DELTA, N, 5000, bins=50)
    client = FE1Client(params)
    for bad, shown in [([5000], "5000"), ([1.5], "1.5 (among floats)"), ([3.0], "3.0 (among floats)"),
                       (["a"], "'a' (among strings)"), ([[1, 2], [3]], "a ragged sequence"),
                       ([[1, 2], [3, 4]], "shape (2, 2)"), ([True], "True (among booleans)")]:
        with pytest.raises(ParameterError, match=r"item must be integer codes in \[0, 5000\)") as err:
            client.randomize(bad)
        assert str(err.value).endswith(shown)
    analyzer = FE1Analyzer(params)
    # a message outside the layout is dropped and counted, not fatal
    agg = analyzer.agg_update(analyzer.agg_init(), MessageBatch({"u": np.array([1, 1]), "v": np.array([0, 0]),
                                                                 "w": np.array([50, 3])}))
    assert (agg.messages, agg.malformed, int(agg.counts.sum())) == (1, 1, 100)  # w = 3 has q/b preimages
    table = analyzer.finalize(analyzer.agg_update(analyzer.agg_init(), client.randomize([1, 2, 3], rng=0)))
    with pytest.raises(ParameterError, match="item must be integer codes"):
        table.estimate([-1])
    cand = FE1Analyzer(params, queries=[1, 2])
    with pytest.raises(ParameterError, match="item must be one of the analyzed candidates"):
        cand.finalize(cand.agg_init()).estimate([3])
    with pytest.raises(ParameterError, match="estimate_all must be asked of a full-domain table"):
        cand.finalize(cand.agg_init()).estimate_all()
    with pytest.raises(ParameterError, match="candidates must be at least 1 item"):
        FE1Analyzer(params, queries=[])
    with pytest.raises(ParameterError, match="protocol must be one with a client randomizer"):
        registry.client(calibrate_bib(EPS, DELTA, N, 100))


def test_roles_are_the_registry_entries():
    for params, client, analyzer in ((calibrate_fe0(EPS, DELTA, N, 30), FE0Client, FE0Analyzer),
                                     (calibrate_fe1(EPS, DELTA, N, 5000, bins=50), FE1Client, FE1Analyzer)):
        assert type(registry.client(params)) is client and type(registry.analyzer(params)) is analyzer
    bib = calibrate_bib(EPS, DELTA, N, 30)
    curator = registry.analyzer(bib, [1, 2], rng=3)
    assert type(curator) is BallsIntoBinsCurator and curator.rng == 3 and curator.queries.tolist() == [1, 2]
    assert {type(p) for p in (bib, calibrate_fe0(EPS, DELTA, N, 30))} == {BIBParameters, FE0Parameters}


def test_curator_noise_is_reproducible_with_a_seed_and_fresh_without():
    params = calibrate_bib(EPS, DELTA, N, 100)
    sent = MessageBatch({"value": population(100)})

    def release(rng):
        curator = BallsIntoBinsCurator(params, rng=rng)
        return curator.finalize(curator.agg_update(curator.agg_init(), sent)).estimates

    assert np.array_equal(release(5), release(5))
    assert not np.array_equal(release(None), release(None))
    table = BallsIntoBinsCurator(params, rng=5).finalize(CountAggregate(np.zeros(100, dtype=np.int64)))
    assert table.messages == 0 and table.estimates.size == 100


def test_top_k_breaks_ties_by_smaller_code():
    codes = np.array([10, 11, 12, 13, 14, 15])
    est = np.array([1.0, 5.0, 5.0, 3.0, 5.0, 0.0])
    assert top_k(codes, est, 2)[0].tolist() == [11, 12]
    assert top_k(codes, est, 4)[0].tolist() == [11, 12, 14, 13]
    assert top_k(codes, est, 99)[0].tolist() == [11, 12, 14, 13, 10, 15]
    assert top_k(codes[::-1].copy(), est, 1)[0].tolist() == [11]  # code 14 and 13 hold 5.0: smaller code
    rng = np.random.default_rng(3)
    est = rng.integers(0, 20, size=5000).astype(float)
    codes = np.arange(5000)
    for k in (1, 7, 100, 4999):
        got_codes, got_est = top_k(codes, est, k)
        order = np.lexsort((codes, -est))[:k]  # the full sort, as a reference
        assert got_codes.tolist() == codes[order].tolist() and np.array_equal(got_est, est[order])
    with pytest.raises(ParameterError, match="top must be an integer >= 1"):
        top_k(codes, est, 0)
    full = FrequencyTable(calibrate_fe0(EPS, DELTA, N, 5000), est)  # a full-domain table: codes are positions
    for k in (1, 7, 100):
        order = np.lexsort((codes, -est))[:k]
        assert full.top_k(k)[0].tolist() == order.tolist() and np.array_equal(full.top_k(k)[1], est[order])


def test_count_among_and_table_standard_errors():
    pool = np.array([2, 5, 9])
    assert count_among(np.array([5, 5, 1, 9, 10, 2, 0]), pool).tolist() == [1, 2, 1]
    assert count_among(np.array([], dtype=np.int64), pool).tolist() == [0, 0, 0]
    params = calibrate_fe0(EPS, DELTA, N, 30)
    table = FrequencyTable(params, np.array([-3.0, 10.0, 500.0]), np.array([1, 4, 7]))
    assert np.array_equal(table.standard_error(), params.standard_error(np.array([-3.0, 10.0, 500.0])))
    assert table.standard_error([7]).tolist() == [params.standard_error(500.0)]


def test_the_curator_releases_once_per_aggregate():
    """A second finalize repeats the release instead of drawing fresh noise (which would spend epsilon twice)."""
    params = calibrate_bib(EPS, DELTA, N, 100)
    curator = BallsIntoBinsCurator(params)  # secure randomness: every draw differs
    agg = curator.agg_update(curator.agg_init(), MessageBatch({"value": population(100)}))
    first, again = curator.finalize(agg), curator.finalize(agg)
    assert np.array_equal(first.estimates, again.estimates)
    other = curator.agg_update(curator.agg_init(), MessageBatch({"value": population(100)}))
    assert not np.array_equal(curator.finalize(other).estimates, first.estimates)


@pytest.mark.parametrize("calibrate,kwargs", [(calibrate_fe0, {}), (calibrate_bib, {}), (calibrate_fe1, {"c": 3})])
def test_loading_checks_what_the_noise_buys(calibrate, kwargs):
    params = calibrate(EPS, DELTA, N, 500, **kwargs)
    data = params.to_dict()
    assert registry.load_parameters(data) == params
    # claiming a smaller epsilon than the noise buys: refused by verify, which loads scipy
    with pytest.raises(ParameterError, match=r"mu must be large enough for \(0.05, 1e-06\)-DP"):
        registry.load_parameters({**data, "epsilon": 0.05})
    assert registry.load_parameters({**data, "epsilon": 0.05}, verify=False).epsilon == 0.05  # the device's choice
    # (next to) no noise: refused even without verify, by the numpy-free floor
    low = {**data, "mu": 1.0, "rho": 1.0 * params.noise_bins / N}
    with pytest.raises(ParameterError, match="chance of no noise"):
        registry.load_parameters(low, verify=False)
    assert params.no_noise_probability() <= params.delta <= params.delta_at(params.epsilon / 2)


def test_heavy_hitter_list_and_vector_sum_queries():
    params = calibrate_fe0(EPS, DELTA, N, 100)
    hh = HeavyHitterList(params, np.array([3, 7, 42]), np.array([500.0, 900.0, 500.0]), threshold=400,
                         standard_errors=np.array([20.0, 25.0, 20.0]))
    assert 7 in hh and 8 not in hh and 100 not in hh
    codes, estimates = hh.top_k(2)
    assert codes.tolist() == [7, 3] and estimates.tolist() == [900.0, 500.0]  # ties: the smaller item first
    total = VectorSum(params, np.array([2500.0, 5000.0]), np.array([10.0, 12.0]))
    assert np.allclose(total.mean(), [0.25, 0.5])


@pytest.mark.parametrize("n, B", [(10**12, 2**24), (10**6, 2**10), (10**5, 100), (10**9, 2**20)])
def test_fe1_with_more_bins_than_items_warns_that_fe0_is_cheaper(n, B):
    """n = 10^12, B = 2^24: b = 3.6e10 bins (rho 3.55) where FE0 needs rho 0.0016. A warning, not a cap: the
    calibrated numbers are unchanged."""
    params = calibrate_fe1(1.0, 1e-10, n, B)
    assert params.bins >= B
    fe0 = calibrate_fe0(1.0, 1e-10, n, B)
    warning = next(w for w in params.warnings() if "fe0" in w)
    assert f"b = {params.bins:,} bins" in warning and f"B = {B:,} items" in warning
    assert f"rho = {fe0.rho:.3g}" in warning and f"against {params.rho:.3g}" in warning
    assert fe0.rho < params.rho
    assert calibrate_fe1(1.0, 1e-10, n, B).bins == params.bins  # the calibration itself is untouched


@pytest.mark.parametrize("n, B", [(10**5, 2**24), (10**6, 2**30), (1000, 2**40)])
def test_fe1_with_fewer_bins_than_items_does_not_warn(n, B):
    params = calibrate_fe1(1.0, 1e-10, n, B)
    assert params.bins < B and not any("fe0" in w for w in params.warnings())


def test_fe1_bins_given_past_the_domain_warns_too():
    params = calibrate_fe1(1.0, 1e-8, 10**5, 64, bins=1000)
    assert any("fe0 (no hashing, B bins) is cheaper" in w for w in params.warnings())


def test_a_calibration_asked_twice_searches_once(monkeypatch):
    """privagg estimate calibrates for the file's estimated n before reading it and for the n read after: the same
    mu where the estimate was exact, so the second search is kept from the first (0.04 s of each run at n = 10^5,
    B = 2^24); the parameters are the same, and a bad calibration is refused by name before anything is kept."""
    from privagg.protocols import balls_into_bins as bib

    searches = []
    search = bib.kept_calibration  # (the search, or its value kept on disk: tests/conftest.py turns that off)
    monkeypatch.setattr(bib, "kept_calibration", lambda *args: searches.append(args) or search(*args))
    bib._noise.cache_clear()
    first = bib.calibrate_fe1(1.0, 1e-9, 5_000, 2**16, calibration="hockey_stick")
    assert bib.calibrate_fe1(1.0, 1e-9, 5_000, 2**16, calibration="hockey_stick") == first
    assert len(searches) == 1
    assert bib.calibrate_fe1(1.0, 1e-9, 5_001, 2**16, calibration="hockey_stick").n_users == 5_001  # searched again
    assert len(searches) == 2
    for bad in (["numeric"], "nope", None):
        with pytest.raises(ParameterError, match="calibration must be one of numeric, hockey_stick, closed_form"):
            bib.calibrate_fe1(1.0, 1e-9, 5_000, 2**16, calibration=bad)
    bib._noise.cache_clear()


@pytest.mark.parametrize("command", [["fe1", "--domain", "1024"],
                                     ["fe-hh", "--item-type", "int", "--domain", "65536", "--phi", "0.05"]])
def test_a_calibration_met_before_is_read_from_disk_and_imports_no_scipy(tmp_path, command):
    """FE1's mu and fe-hh's (with its level tails) are kept on disk per version of their code
    (protocols.balls_into_bins.kept_calibration, privacy.evaluation_cache): two whole processes at the same
    settings, the first computes and keeps, the second reads every value, imports no scipy.special (the binomial
    tails' special functions; numba, where the count loads it, imports scipy's top package) and reports the same."""
    import json
    import os
    import subprocess
    import sys

    items = tmp_path / "items.txt"
    items.write_text("\n".join(map(str, np.random.default_rng(4).zipf(1.5, 3000) % 1024)) + "\n")
    code = ("import sys\nsys.argv = ['privagg', 'estimate', *{command!r}, '--input', {input!r}, '--epsilon', '1', "
            "'--delta', '1e-8', '--seed', '2', '--json', '--output', {output!r}]\nfrom privagg.cli import main\n"
            "try:\n    main()\nexcept SystemExit:\n    pass\nsys.stderr.write(repr('scipy.special' in sys.modules))")
    env = {**os.environ, "PRIVAGG_CACHE": str(tmp_path / "cache")}
    loaded, reports = [], []
    for run in range(2):
        output = tmp_path / f"report{run}.json"
        out = subprocess.run([sys.executable, "-c", code.format(command=command, input=str(items), output=str(output))],
                             env=env, capture_output=True, text=True, check=True)
        loaded.append(out.stderr[-5:].strip())
        report = json.loads(output.read_text())
        del report["simulation"]["seconds"]
        reports.append(report)
    assert loaded == ["True", "False"] and reports[0] == reports[1]
