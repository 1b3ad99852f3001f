"""An early close: m of the n users a task was calibrated for report, and the analyzer, told m, debiases with the
noise their messages carry (docs/derivations.md, "An early close").

For every protocol whose users make the noise, many seeded closes at m / n = 1/2, 3/4 and 1 (a local task may
also count more than n): the real clients' messages of m users, aggregated and finalized with ``reporters=m``.
Each tracked item's z-score, (estimate - truth among the m) / its exact sd for m users, must have mean 0 within
K_SIGMA / sqrt(R) and variance 1 within K_SIGMA sqrt(2 / (R - 1)) over the R closes. Before the fix the analyzers
debiased with n: over 300 closes at m = n / 2, the mean z-scores were -1.4 to -2.4 (blanket-hist), -4.3 (fe0), -4.6
(fe1), -2.6 to -5.2 (grr, olh, oue), -3.2 to -6.0 (the sparse vectors) and +6.0 (blanket-vector, whose variance was
4 times its m users'), fe-hh missed an item held by 60% of the users, and about 40% of these at 3/4; a local task
of 1.5 n reports was biased up by 1.5 to 2.9 sd. Hadamard's estimate has no term in n: only its errors were n's.
The results' own errors, messages per user and expected errors are those of the m users (the last test).
"""

import math

import numpy as np
import pytest

from privagg.errors import ParameterError
from privagg.pipelines import Analysis
from privagg.protocols.registry import analyzer as make_analyzer, calibrate, client
from privagg.reports import Engine

from heavy_hitter_paths import path_sd

# seeded closes per (protocol, fraction); the slow variant takes 10 times as many. 200 is plenty: a debias with n
# (the bug) moves the mean z-score by 0.5 sd or more at m = 3/4 n, past 4.5 / sqrt(200) = 0.32, and every such
# case fails with `reporters=m` left out of finalize (checked at 200; Hadamard's estimate has no n in it)
CLOSES = 200
K_SIGMA = 4.5  # a few hundred checks over the file: a false alarm below 1e-3 in all
N = 400  # users each task is calibrated for
# fe-hh's reported estimate combines its levels, whose variance (path_sd) leaves out two covariances of
# relative size O(p_f / K + p_col) (docs/derivations.md, "Heavy hitters"): at 400 users (K = 2, p_f = 0.87, b = 6)
# they took the z-scores' variance to 0.46-0.49; at 20,000 (p_f = 0.017, b = 98), 1.006 over 300 closes
USERS = {"fe-hh": 20_000}
FRACTIONS = (0.5, 0.75, 1.0)
LOCAL_FRACTIONS = (0.5, 1.0, 1.5)  # a local task's batches may hold more reports than n
SMALL = 8  # items of the frequency protocols' domains
HELD = np.array([0.45, 0.25, 0.15, 0.1, 0.05, 0, 0, 0])  # the share of users holding each item: 5..7 held by none


def frequency_users(rng, m):
    return rng.choice(SMALL, size=m, p=HELD)


def frequency_truth(params, data, m, tracked):
    return np.bincount(data, minlength=params.domain_size)[tracked]


def frequency_sd(params, data, m, tracked):
    """The estimate's exact sd at the true count among the m users: every protocol's standard_error is exact."""
    return params.standard_error(frequency_truth(params, data, m, tracked), reporters=m)


def pairs_users(dimension):
    """(coordinate, weight) rows: coordinates skewed towards 0, the last held by nobody; weights in [0, 1]."""
    def draw(rng, m):
        index = np.minimum(rng.geometric(0.4, size=m) - 1, dimension - 2)
        return np.column_stack([index, rng.random(m)])
    return draw


def pairs_truth(params, data, m, tracked):
    return params.true_total(data)[tracked]


def rounding(data, dimension, levels):
    """Per coordinate, the holders' rounding variances f (1 - f) / k^2, f the fractional part of w k."""
    frac = data[:, 1] * levels - np.floor(data[:, 1] * levels)
    return np.bincount(data[:, 0].astype(int), weights=frac * (1 - frac) / levels**2, minlength=dimension)


def sparse_sd(params, data, m, tracked):
    """FE0 over the cells: the exact variance given the rounding (multinomial dummies of m users)."""
    return np.sqrt(params.variance(rounding(data, params.dimension, params.levels), reporters=m))[tracked]


def hashed_sd(params, data, m, tracked):
    """FE1 over the cells, k = 1: G ~ sum Bern(w) of a coordinate's holders round to it, so Var = E[FE1's
    variance at G] + Var G = se(S, m)^2 + sum w (1 - w) (the variance is linear in G), S = sum w."""
    weight_sum = pairs_truth(params, data, m, tracked)
    return np.sqrt(params.standard_error(weight_sum, reporters=m) ** 2 + rounding(data, params.dimension, 1)[tracked])


def vector_users(rng, m):
    return rng.random((m, 4)) ** 2


def vector_truth(params, data, m, tracked):
    return data.sum(axis=0)[tracked]


def vector_sd(params, data, m, tracked):
    """The exact variance given S1, S2 and the rounding variances, for m users (c >= 1: at m t / d >= 50 reports
    a coordinate, c = 0 has probability below 1e-6)."""
    k = params.levels
    frac = data * k - np.floor(data * k)
    return np.sqrt(params.variance(data.sum(0), (data**2).sum(0), (frac * (1 - frac)).sum(0) / k**2,
                                   reporters=m))[tracked]


def heavy_users(rng, m):
    """Item 5 held by 60% of the users (always found: phi m = 0.2 m), the others spread over [16]."""
    return np.where(rng.random(m) < 0.6, 5, rng.integers(0, 16, size=m))


def heavy_truth(params, data, m, tracked):
    return np.array([np.sum(data == 5)])


def heavy_sd(params, data, m, tracked):
    """The reported estimate's sd (combined over the levels, item 5's siblings holding users)."""
    return np.array([path_sd(params, np.bincount(data, minlength=16), 5, reporters=m)])


SHUFFLE = {  # protocol: (calibration options, users, truth, exact sd, tracked items, analyzer queries)
    "fe0": (dict(domain_size=SMALL, honest_fraction=0.5), frequency_users, frequency_truth, frequency_sd,
            [0, 1, 7], None),
    "fe1": (dict(domain_size=SMALL, honest_fraction=0.5, bins=20), frequency_users, frequency_truth, frequency_sd,
            [0, 1, 2], [0, 4, 7]),  # tracked: positions among the queries
    "blanket-hist": (dict(domain_size=SMALL, honest_fraction=0.5), frequency_users, frequency_truth, frequency_sd,
                     [0, 1, 7], None),
    "sparse-vector": (dict(domain_size=4, honest_fraction=0.5, levels=2), pairs_users(4), pairs_truth, sparse_sd,
                      [0, 1, 3], None),
    "sparse-vector-hashed": (dict(domain_size=20, honest_fraction=0.5), pairs_users(20), pairs_truth, hashed_sd,
                             [0, 1, 2], [0, 2, 19]),
    "blanket-vector": (dict(domain_size=4, honest_fraction=0.5), vector_users, vector_truth, vector_sd, [0, 1, 3],
                       None),
    "fe-hh": (dict(domain_size=16, phi=0.2), heavy_users, heavy_truth, heavy_sd, [0], None),
}
LOCAL = {name: (dict(domain_size=SMALL), frequency_users, frequency_truth, frequency_sd, [0, 1, 7], None)
         for name in ("grr", "oue", "olh", "hadamard")}


def parameters(protocol: str, options: dict, n_users: int | None = None):
    delta = None if protocol in LOCAL else 1e-5
    return calibrate(protocol, epsilon=2.0, delta=delta, n_users=n_users or USERS.get(protocol, N), **options)


def estimates(protocol, result, queries, tracked):
    """The tracked items' estimates of one close (fe-hh: its heavy item 5, which it must find)."""
    if protocol == "fe-hh":
        assert 5 in result, "fe-hh missed an item held by 60% of the users"
        return result.estimates[result.items.tolist().index(5)][None]
    values = getattr(result, "total", None)
    if values is None:
        values = result.estimates
    return np.asarray(values)[tracked]


def z_scores(protocol: str, fraction: float, closes: int, seed: int) -> np.ndarray:
    """(closes, tracked) z-scores of ``closes`` seeded early closes at m = fraction n."""
    options, users, truth, sd, tracked, queries = {**SHUFFLE, **LOCAL}[protocol]
    params = parameters(protocol, options)
    randomizer, analyzer = client(params), make_analyzer(params, queries)
    m = round(fraction * params.n_users)
    z = []
    for s in np.random.SeedSequence([seed, round(100 * fraction)]).spawn(closes):
        rng = np.random.default_rng(s)
        data = users(rng, m)
        agg = analyzer.agg_update(analyzer.agg_init(), randomizer.randomize(data, rng))
        result = analyzer.finalize(agg, reporters=m)
        truth_codes = tracked if queries is None else np.asarray(queries)[tracked]
        z.append((estimates(protocol, result, queries, tracked) - truth(params, data, m, truth_codes))
                 / sd(params, data, m, truth_codes))
    return np.array(z)


def check_standard_normal(z: np.ndarray) -> None:
    closes = z.shape[0]
    mean, variance = z.mean(axis=0), z.var(axis=0, ddof=1)
    assert np.all(np.abs(mean) <= K_SIGMA / math.sqrt(closes)), f"mean z-scores {mean}"
    assert np.all(np.abs(variance - 1) <= K_SIGMA * math.sqrt(2 / (closes - 1))), f"z-score variances {variance}"


@pytest.mark.parametrize("fraction", FRACTIONS)
@pytest.mark.parametrize("protocol", sorted(SHUFFLE))
def test_an_early_close_of_a_shuffle_task_is_unbiased_with_the_variance_of_m_users(protocol, fraction):
    check_standard_normal(z_scores(protocol, fraction, CLOSES, seed=1))


@pytest.mark.parametrize("fraction", LOCAL_FRACTIONS)
@pytest.mark.parametrize("protocol", sorted(LOCAL))
def test_a_local_task_is_unbiased_over_the_reports_it_counted(protocol, fraction):
    check_standard_normal(z_scores(protocol, fraction, CLOSES, seed=2))


@pytest.mark.slow
@pytest.mark.parametrize("protocol", sorted(SHUFFLE))
def test_early_closes_at_ten_times_the_closes(protocol):
    for fraction in (0.5, 0.6, 0.9):
        check_standard_normal(z_scores(protocol, fraction, 10 * CLOSES, seed=3))


@pytest.mark.parametrize("protocol", sorted({**SHUFFLE, **LOCAL}))
def test_the_release_states_the_errors_and_messages_of_the_users_counted(protocol):
    """One close at m = n / 2: each result's standard errors, the report's messages per user and expected error
    are those of m users, not n (n's differ: the noise of n users is larger, and a frequency's is linear in n)."""
    options, users, _, _, _, queries = {**SHUFFLE, **LOCAL}[protocol]
    params = parameters(protocol, options, N)  # 400 users: fe-hh's errors of m and of n far apart
    analysis = Analysis.of(params, None if queries is None else np.asarray(queries))
    analyzer, m, rng = analysis.analyzer(), params.n_users // 2, np.random.default_rng(4)
    agg = analyzer.agg_update(analyzer.agg_init(), client(params).randomize(users(rng, m), rng))
    result = analyzer.finalize(agg, reporters=m)
    assert result.reporters == m
    if hasattr(result, "standard_error"):  # a frequency table: the reported standard errors of m users
        assert np.allclose(result.standard_error(), params.reported_standard_error(result.estimates, m))
        assert not np.allclose(result.standard_error(), params.reported_standard_error(result.estimates))
    elif protocol == "fe-hh":
        # the estimates plugged into the variance: within a few percent of the exact sd of m users, far from n's
        counts = np.bincount(users(np.random.default_rng(4), m), minlength=16)
        reported = result.standard_errors[result.items.tolist().index(5)]
        assert reported == pytest.approx(path_sd(params, counts, 5, reporters=m), rel=0.05)
        assert reported < 0.9 * path_sd(params, counts, 5)
        assert result.threshold == params.phi * m
    else:  # a vector sum's mean is over the m users
        assert np.allclose(result.mean(), result.total / m)
    report = analysis.report(result, params.privacy, Engine("local", 1))
    received = int(agg.messages + agg.malformed)
    assert report.messages.total == received and report.messages.per_user == received / m
    expected = params.expected_error(reporters=m)
    assert report.expected_error.standard_error == expected["standard_error"] != \
        params.expected_error()["standard_error"]
    assert report.expected_error.max_error_bound == expected["max_error_bound"]


@pytest.mark.parametrize("reporters", [0, -3, 2.5, "20", True])
def test_a_count_of_reporters_that_is_no_count_is_refused(reporters):
    params = parameters("fe0", SHUFFLE["fe0"][0])
    analyzer = make_analyzer(params)
    with pytest.raises(ParameterError) as err:
        analyzer.finalize(analyzer.agg_init(), reporters=reporters)
    assert err.value.field == "reporters"
