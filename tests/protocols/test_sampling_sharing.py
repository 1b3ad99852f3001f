"""The sampling + secret-sharing family beyond the registry contract: cost counts against the paper's, what
coalitions of users see, the data condition, calibration choices and bad input.

Views are tested on small instances by chi-square tests against the uniform law (fixed seeds, p-value
thresholds fixed in advance); costs are the transcript's measured counts against the paper's formulas
(reference §2.3, §2.6 and §4: ../shared/papers/fair-dp-distributed-frequency.md).
"""

import dataclasses
import math

import numpy as np
import pytest
from scipy import stats

from privagg.core.messages import MessageBatch
from privagg.core.sharing import PrimeField, reconstruct, share
from privagg.errors import ParameterError
from privagg.privacy.sampling import chernoff_delta, paper_sampling_probability, sampling_delta
from privagg.protocols import registry
from privagg.protocols import results
from privagg.protocols import sampling_calibration as sc
from privagg.protocols import tss_parameters as tsp
from privagg.protocols import two_server_parties as tp
from privagg.protocols import weighted_aggregation as wa
from privagg.simulate import simulate

EPS, DELTA = 1.0, 1e-6
P_MIN = 1e-4  # chi-square p-value below which a view is declared non-uniform


def balanced(n, domain, seed=0):
    """Every category held by n / (2 N) users at least, the rest skewed."""
    rng = np.random.default_rng(seed)
    floor = n // (2 * domain)
    rest = np.minimum(rng.zipf(1.6, size=n - floor * domain) - 1, domain - 1)
    return rng.permutation(np.concatenate([np.repeat(np.arange(domain), floor), rest]))


def dpds(n=60, domain=5, **options):
    return registry.calibrate("dpds", epsilon=EPS, delta=0.01, n_users=n, domain_size=domain,
                              min_count_fraction=1 / (2 * domain), **options)


def tss(n=400, domain=8, protocol="tss", **options):
    options = {"report_fraction": 0.5, **options}
    return registry.calibrate(protocol, epsilon=EPS, delta=DELTA, n_users=n, domain_size=domain,
                              min_count_fraction=1 / (2 * domain), **options)


# --- costs -------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("n,domain", [(40, 3), (101, 7)])
def test_dpds_transcript_counts_what_the_deployed_parties_send(n, domain):
    """A faithful run plays the deployed parties (protocols/sharing_parties.py): each user sends his key, a backup
    of 2 secrets to each of the n - 1 others, N elements and a revealed share per sender, and receives U1's keys
    and the others' backups (expected_traffic, the same count the service's users make); the server receives the
    N elements of each of the n masked sums, Algorithm 2's nN (Table I). The paper's 2nN + N per user
    (``costs``) is what its users would send, the shares being sent rather than agreed by key."""
    from privagg.protocols.sharing_messages import expected_traffic

    params = dpds(n, domain)
    run = simulate(params, balanced(n, domain), rng=3)
    user, server, paper = run.transcript["user"], run.transcript["server"], params.costs()
    sent, received = expected_traffic(params, n)
    assert user["parties"] == n and server["parties"] == 1
    assert {k[5:]: v for k, v in user.items() if k.startswith("sent ")} == {k: v * n for k, v in sent.items()}
    assert {k[9:]: v for k, v in user.items() if k.startswith("received ")} == {k: v * n for k, v in received.items()}
    assert server["received"] == n * domain == paper["server"]["received"] and server["malformed"] == 0
    assert server["received masked sum"] == n * domain and paper["user"]["paper_count"] == 2 * n * domain + domain


@pytest.mark.parametrize("n", [200, pytest.param(400, marks=pytest.mark.slow)])  # O(n^2) shares: 7 s and 32 s
def test_tss_transcript_matches_the_derived_cost_counts(n):
    """S1 receives alpha N indices per user; S2 one element per helper, sum_j m_j = n alpha N of them (TSS);
    users send about sum_j m_j^2 share elements, about alpha^2 n N per user, alpha^2 times DPDS's n N (a reporter
    elected helper of his own item keeps that share)."""
    N, a = 8, 0.5
    params = tss(n=n, domain=N)
    run = simulate(params, balanced(n, N), rng=5)
    user, s1, s2 = run.transcript["user"], run.transcript["s1"], run.transcript["s2"]
    assert user["sent report set"] == s1["received report set"] == n * a * N
    assert s2["received"] == user["sent helper sums"] == n * a * N  # m'_j = m_j: one helper per reporter
    assert user["sent shares"] == user["received shares"]  # every share delivered to its helper
    # sum_j m_j^2 with m_j ~ Bin(n, a): mean N (n a (1 - a) + (n a)^2), sd about sqrt(N) 2 n a sqrt(n a (1 - a))
    mean = N * (n * a * (1 - a) + (n * a) ** 2)
    kept = N * (n * a) ** 2 / n  # about m_j^2 / n of item j's shares are a reporter's to himself
    assert abs(user["sent shares"] + kept - mean) <= 4 * math.sqrt(N) * 2 * n * a * math.sqrt(n * a * (1 - a))
    # the alpha^2 factor against DPDS: at alpha = 1/2, sent / n = alpha^2 n N in expectation (mean - kept), its sd
    # relative to that 2 / sqrt(n N); within sqrt(2) of them (5% at n = 400)
    assert user["sent shares"] / n == pytest.approx(a**2 * n * N, rel=math.sqrt(2) * 2 / math.sqrt(n * N))
    assert mean == params.expected_shares


def test_tss_collusion_tops_up_the_helpers():
    """TSS': every item gets at least phi + 1 helpers, even with fewer reporters (reference §2.6)."""
    params = tss(n=200, domain=10, protocol="tss-collusion", report_fraction=0.1, colluders=40)
    reports = tp.report_sets(params, balanced(200, 10), rng=1)[1]
    counts, helpers = tp.elect(params, reports, rng=2)
    sizes = np.array([h.size for h in helpers])
    assert np.array_equal(sizes, np.maximum(counts, 41)) and (counts < 41).any()
    assert all(np.unique(h).size == h.size and h.min() >= 0 and h.max() < 200 for h in helpers)


# --- views -------------------------------------------------------------------------------------------------


def chi_square_uniform(rows: np.ndarray, q: int) -> float:
    """p-value of rows (trials x k elements of Z_q) being uniform on Z_q^k."""
    cells = np.ravel_multi_index(rows.T, (q,) * rows.shape[1])
    observed = np.bincount(cells, minlength=q ** rows.shape[1])
    return stats.chisquare(observed).pvalue


@pytest.mark.parametrize("target", [0, 3])
def test_any_n_minus_1_users_see_uniform_shares_whatever_the_last_users_item(target):
    """Algorithm 2's view: n = 4 users, N = 2 categories, q = 5, n additive shares of each vector (core.sharing,
    which DPCS* releases): the three other users' shares of the target's entry are uniform on Z_5^3, and equal in
    law whether the target participates with his item or not (the target keeps the correction share when he is
    the last user; otherwise it goes to the last user, one of the coalition); all four shares give the vector
    back. (The deployed parties agree these shares by key: tests/protocols/test_sharing_parties.py.)"""
    params = registry.calibrate("dpds", epsilon=EPS, delta=0.4, n_users=4, domain_size=2, min_count_fraction=0.5,
                                sampling_probability=0.3)
    field, q, trials = params.field, params.modulus, 30_000
    others = [k for k in range(4) if k != target]
    views = {}
    for value in (0, 1):
        vectors = np.zeros((trials, 2), dtype=np.uint64)
        vectors[:, 0] = value  # the target holds category 0, counted or not
        shares = share(field, vectors, 4, rng=value + 10 * target)  # (recipients, trials, N)
        assert np.array_equal(reconstruct(field, shares), vectors)
        views[value] = shares[others, :, 0].T.astype(np.int64)  # what the coalition sees of coordinate 0
        assert chi_square_uniform(views[value], q) > P_MIN
    table = np.stack([np.bincount(np.ravel_multi_index(v.T, (q,) * 3), minlength=q**3) for v in views.values()])
    assert q == 5 and stats.chi2_contingency(table).pvalue > P_MIN


def test_s2_sees_helper_sums_that_do_not_reveal_who_reported():
    """For one item with m = 3 reporters and 3 helpers, S2's three partial sums are uniform given their total
    s_j: the same law whichever reporter's entry was 1."""
    field, trials = PrimeField(7), 30_000
    laws = []
    for entries in ([1, 0, 0], [0, 0, 1]):
        rng = np.random.default_rng(sum(entries[i] * i for i in range(3)))
        shares = share(field, np.tile(np.array(entries, dtype=np.uint64), (trials, 1)), 3, rng)  # (3, trials, 3)
        sums = shares.sum(axis=2) % 7  # each helper sums what the three reporters sent him
        assert np.all(sums.sum(axis=0) % 7 == 1)
        view = sums[:2].T.astype(np.int64)  # the third is fixed by the total
        assert chi_square_uniform(view, 7) > P_MIN
        laws.append(np.bincount(np.ravel_multi_index(view.T, (7, 7)), minlength=49))
    assert stats.chi2_contingency(np.stack(laws)).pvalue > P_MIN


def test_tss_collusion_holds_against_phi_helpers_and_fails_beyond():
    """TSS' with phi = 2 through its roles: an item reported once gets phi + 1 = 3 helpers (``elect``), the
    reporter's entry is split among them (``share_entries``): any 2 helpers' shares are uniform whatever the
    entry; all 3 together (phi + 1 colluders, beyond the guarantee) reconstruct it, as documented."""
    params = tss(n=40, domain=4, protocol="tss-collusion", report_fraction=0.25, colluders=2)
    q, trials = params.modulus, 20_000
    _, helpers = tp.elect(params, np.array([[0]] + [[1]] * 39), rng=1)
    assert helpers[0].size == 3 and helpers[1].size == 39 and helpers[2].size == 3  # topped up to phi + 1
    views = []
    for entry in (0, 1):
        shares = tp.share_entries(params, np.full(trials, entry), helpers[0].size, rng=entry + 7)  # (3, trials)
        view = shares[[0, 2]].T.astype(np.int64)
        assert chi_square_uniform(view, q) > P_MIN
        views.append(np.bincount(np.ravel_multi_index(view.T, (q, q)), minlength=q * q))
        assert np.all(shares.astype(np.int64).sum(axis=0) % q == entry)  # three colluders learn the entry
    assert stats.chi2_contingency(np.stack(views)).pvalue > P_MIN
    one = tss(n=40, domain=4, report_fraction=0.25)  # TSS: a lone reporter's helper sees his entry
    assert np.array_equal(tp.share_entries(one, np.array([1, 0, 1]), 1), [[1, 0, 1]])


def test_tss_rows_to_s2_carry_no_user():  # at 60 users (0.6 s; 5.4 s at 200): the rows' form has no size
    params = tss(n=60, domain=4)
    rows = simulate(params, balanced(60, 4), rng=1, keep_messages=True).messages
    assert set(rows.columns) == {"item", "share"} and len(rows) == 60 * params.report_size


# --- the report sets of TSS ----------------------------------------------------------------------------------


@pytest.mark.parametrize("stage,gamma", [("uniform", 1.0), ("adaptive", 2.0), ("adaptive", 2.5)])
def test_report_sets_hold_the_own_item_with_probability_p_chi(stage, gamma):
    n, N = 20_000, 10
    params = tss(n=n, domain=N, second_stage=stage, gamma=gamma, report_fraction=0.3)
    codes = balanced(n, N)
    coins, reports = tp.report_sets(params, codes, rng=4)
    assert reports.shape == (n, 3) and np.all(np.diff(reports, axis=1) > 0)  # distinct items
    inside = (reports == codes[:, None]).any(axis=1)
    p_chi = params.inclusion_probability
    assert p_chi == pytest.approx(gamma * 0.3 / (gamma * 0.3 + 0.7))
    assert abs(inside.mean() - p_chi) <= 4 * math.sqrt(p_chi * (1 - p_chi) / n)
    assert abs(coins.mean() - params.sampling_probability) <= 4 * math.sqrt(0.25 / n) + 1e-12
    # the other items are uniform: each non-own item equally likely
    others = np.bincount((reports[~inside] - codes[~inside, None]).ravel() % N, minlength=N)[1:]
    assert stats.chisquare(others).pvalue > P_MIN


# --- calibration ---------------------------------------------------------------------------------------------


def test_exact_calibration_is_the_largest_p_meeting_delta():
    params = registry.calibrate("dpds", epsilon=EPS, delta=DELTA, n_users=2000, domain_size=10,
                                min_count_fraction=0.05)
    p, m = params.sampling_probability, params.min_count
    # the data hold every category m times: a replaced user's category keeps m - 1 others, the accountant's m
    assert m == 100 and sampling_delta(EPS, p, m) <= DELTA < sampling_delta(EPS, p + 1e-9, m)
    assert params.privacy.method == "exact" and params.delta_at(EPS) <= DELTA


def test_paper_and_closed_form_calibrations():
    paper = registry.calibrate("dpds", epsilon=EPS, delta=DELTA, n_users=20_000, domain_size=10,
                               min_count_fraction=0.05, calibration="paper")
    assert paper.sampling_probability == paper_sampling_probability(EPS)
    closed = registry.calibrate("dpds", epsilon=EPS, delta=DELTA, n_users=20_000, domain_size=10,
                                min_count_fraction=0.05, calibration="closed_form")
    assert chernoff_delta(closed.sampling_probability, 1000) <= DELTA
    with pytest.raises(ParameterError) as err:  # 50 holders are too few for p = 1 - e^-1 at delta = 1e-6
        registry.calibrate("dpds", epsilon=EPS, delta=DELTA, n_users=1000, domain_size=10, min_count_fraction=0.05,
                           calibration="paper")
    assert err.value.field == "delta" and "largest p" in str(err.value)


def test_a_given_sampling_probability_is_checked_not_trusted():
    ok = registry.calibrate("dpds", epsilon=EPS, delta=DELTA, n_users=2000, domain_size=10,
                            min_count_fraction=0.05, sampling_probability=0.5)
    assert ok.sampling_probability == 0.5 and ok.delta_at(EPS) <= DELTA
    with pytest.raises(ParameterError) as err:
        registry.calibrate("dpds", epsilon=EPS, delta=DELTA, n_users=2000, domain_size=10, min_count_fraction=0.05,
                           sampling_probability=0.9)
    assert err.value.field == "sampling-probability" and "buys delta" in str(err.value)


def test_dishonest_users_lower_p():
    """Users who may not follow the protocol are counted as known holders: the guarantee rests on the others."""
    full = dpds(2000, 10)
    some = dpds(2000, 10, honest_fraction=0.98)
    assert full.counted_holders == full.min_count and some.counted_holders == full.counted_holders - 40
    assert some.sampling_probability < full.sampling_probability and some.delta_at(EPS) <= some.delta
    with pytest.raises(ParameterError) as err:
        dpds(2000, 10, honest_fraction=0.9)  # 200 dishonest users could be all 100 holders of a category
    assert err.value.field == "honest-fraction"


def test_tss_guarantee_uses_the_effective_rate():
    params = tss(n=4000, domain=8, report_fraction=0.25)
    rate = params.sampling_probability * 0.25
    assert params.effective_probability == pytest.approx(rate)
    assert params.delta_at(EPS) == sampling_delta(EPS, rate, params.min_count)
    adaptive = tss(n=4000, domain=8, report_fraction=0.25, second_stage="adaptive", gamma=1.5)
    assert adaptive.delta_at(EPS) == tsp.adaptive_delta(EPS - math.log(1.5), adaptive.sampling_probability,
                                                       adaptive.min_count, adaptive.inclusion_probability) <= DELTA


# --- the data condition and bad input ---------------------------------------------------------------------


def test_data_breaking_the_stated_condition_is_refused():
    params = dpds(50, 5)  # beta = 0.1: every category held by at least 5 users (the deployed parties: O(n^2))
    codes = np.concatenate([np.zeros(30, dtype=np.int64), np.repeat(np.arange(1, 5), 5)])
    simulate(params, codes, rng=0)
    codes[:-1][codes[:-1] == 4] = 0  # category 4 now held by 1 user only
    with pytest.raises(ParameterError) as err:
        simulate(params, codes, rng=0)
    assert err.value.field == "min-count-fraction" and "some category is held by fewer than beta n = 5" in str(err.value)
    assert "category 4" not in str(err.value) and " 1 " not in str(err.value)  # no count of the data, no category


BAD = [
    (dict(min_count_fraction=None), "min-count-fraction"), (dict(min_count_fraction=0.0), "min-count-fraction"),
    (dict(min_count_fraction=0.2), "min-count-fraction"), (dict(min_count_fraction=-0.01), "min-count-fraction"),
    (dict(sampling_probability=0.0), "sampling-probability"), (dict(sampling_probability=1.5), "sampling-probability"),
    (dict(report_fraction=0.0), "report-fraction"), (dict(report_fraction=1.5), "report-fraction"),
    (dict(report_fraction=0.15), "report-fraction"), (dict(gamma=0.5, second_stage="adaptive"), "gamma"),
    (dict(gamma=2.0), "gamma"), (dict(gamma=3.0, second_stage="adaptive"), "gamma"),
    (dict(second_stage="sometimes"), "second-stage"), (dict(colluders=0, protocol="tss-collusion"), "colluders"),
    (dict(colluders=1000, protocol="tss-collusion"), "colluders"), (dict(colluders=2), "colluders"),
]


@pytest.mark.parametrize("change,field", BAD)
def test_bad_options_name_the_field(change, field):
    change = dict(change)
    protocol = change.pop("protocol", "tss")
    options = {"min_count_fraction": 0.05, "report_fraction": 0.5, **change}
    with pytest.raises(ParameterError) as err:
        registry.calibrate(protocol, epsilon=EPS, delta=DELTA, n_users=1000, domain_size=10, **options)
    assert err.value.field == field, err.value


def test_a_field_too_small_for_the_aggregate_is_refused():
    data = dpds(60, 5).to_dict()
    with pytest.raises(ParameterError) as err:
        registry.load_parameters({**data, "modulus": 59})
    assert err.value.field == "modulus" and "largest aggregate" in str(err.value)


# --- DPCS* and weighted aggregation ---------------------------------------------------------------------------


def test_the_trusted_server_releases_once_and_refuses_impossible_classes():
    params = registry.calibrate("dpcs", epsilon=EPS, delta=DELTA, n_users=2000, domain_size=10,
                                min_count_fraction=0.05)
    curator = registry.analyzer(params, rng=5)
    agg = curator.agg_update(curator.agg_init(), MessageBatch({"value": balanced(2000, 10)}))
    first = curator.finalize(agg).estimates
    assert np.array_equal(curator.finalize(agg).estimates, first)  # finalizing again repeats the release
    for again in (lambda: curator.agg_update(agg, MessageBatch({"value": np.zeros(5, dtype=np.int64)})),
                  lambda: curator.merge([agg, curator.agg_init()])):
        with pytest.raises(ParameterError) as err:
            again()
        assert err.value.field == "aggregate"
    with pytest.raises(ParameterError) as err:  # 10 categories of 3 holders need 30 users
        registry.calibrate("dpds", epsilon=2.0, delta=0.1, n_users=25, domain_size=10, min_count_fraction=0.1)
    assert err.value.field == "min-count-fraction" and "need 30 users" in str(err.value)


def test_closed_form_also_meets_the_exact_replace_one_delta():
    """The Chernoff form is derived for add/remove neighbours; at tiny eps and delta it falls below the exact
    replace-one delta, and the calibration refuses rather than claim it."""
    with pytest.raises(ParameterError):
        registry.calibrate("dpds", epsilon=0.05, delta=1e-40, n_users=14_000, domain_size=2, min_count_fraction=0.45,
                           calibration="closed_form")


def test_dpcs_star_releases_shares_of_dpcs_counts():
    params = registry.calibrate("dpcs-star", epsilon=EPS, delta=DELTA, n_users=2000, domain_size=10,
                                min_count_fraction=0.05)
    codes = balanced(2000, 10)
    curator = registry.analyzer(params, rng=5)
    agg = curator.agg_update(curator.agg_init(), MessageBatch({"value": codes}))
    shares = curator.shares(agg)
    assert shares.shape == (2000, 10)
    assert np.array_equal(reconstruct(params.field, shares), curator.sample(agg).astype(np.uint64))
    assert np.array_equal(curator.release(agg), curator.sample(agg))  # block by block, the same counts
    counts = np.bincount(codes, minlength=10)
    assert np.all(curator.sample(agg) <= counts)


def test_inverse_variance_weighting_beats_the_unweighted_baselines():
    """Two groups (eps 0.5 and 3) with one distribution: both estimates are unbiased, and the weighted one's
    variance is below the unweighted sum_g tau_g / p_g's, as the theory says; 400 seeded runs, 4-sigma bands."""
    groups = [registry.calibrate("dpds", epsilon=e, delta=1e-5, n_users=n, domain_size=4,
                                 min_count_fraction=0.125) for e, n in ((0.5, 4000), (3.0, 1000))]
    codes = [np.tile(balanced(1000, 4), 4), balanced(1000, 4)]  # the same frequencies in both groups
    truth = sum(np.bincount(c, minlength=4) for c in codes)
    runs = 400
    draws, plain = [], []
    for seed in range(runs):
        sums = [simulate(g, c, mode="fast", rng=seed * 2 + i).result.estimates * g.sampling_probability
                for i, (g, c) in enumerate(zip(groups, codes))]
        combined = wa.combine_groups(groups, sums)
        draws.append(combined.estimates)
        plain.append(combined.unweighted)
    draws, plain = np.array(draws), np.array(plain)
    theory = wa.combine_groups(groups, [np.bincount(c, minlength=4) * g.sampling_probability
                                        for g, c in zip(groups, codes)])
    assert np.all(theory.variance < theory.unweighted_variance)
    for est, variance in ((plain, theory.unweighted_variance), (draws, theory.variance)):
        assert np.all(np.abs(est.mean(axis=0) - truth) <= 4 * np.sqrt(variance / runs))
        assert np.all(np.abs(est.var(axis=0, ddof=1) / variance - 1) <= 4 * math.sqrt(2 / (runs - 1)))


@pytest.mark.parametrize("make", [lambda: registry.calibrate("dpcs", epsilon=EPS, delta=DELTA, n_users=2000,
                                                               domain_size=5, min_count_fraction=0.1),
                                   lambda: dpds(n=2000), lambda: tss(n=2000)], ids=["dpcs", "dpds", "tss"])
def test_a_count_nobody_sampled_is_not_reported_as_certain(make):
    """A released count tau = 0 estimates 0 holders, but a category held by Pi users has variance Pi (1 - p') / p':
    the reported stderr is the posterior sd of Pi given tau under a flat prior, computed here by summing over Pi
    (docs/derivations.md, "Reported standard errors"), sqrt((tau + 1) (1 - p')) / p', sqrt(1 - p') / p' at tau = 0
    (the sd at the estimate read 0 there)."""
    p = make()
    q = p.effective_probability
    taus = np.arange(6)
    table = results.FrequencyTable(p, taus / q)
    reported = table.standard_error()
    for tau, se in zip(taus, reported):
        holders = np.arange(tau, tau + 4000)
        weight = stats.binom.pmf(tau, holders, q)
        mean = (weight * holders).sum() / weight.sum()
        assert se == pytest.approx(math.sqrt((weight * (holders - mean) ** 2).sum() / weight.sum()), rel=1e-9)
    assert reported[0] == pytest.approx(math.sqrt(1 - q) / q) and all(
        row["stderr"] > 0 for row in table.to_dict().values())
    # over the release, its square is the estimator's variance plus one counted holder's, (1 - p') / p'^2, for every
    # Pi (exact over tau ~ Bin(Pi, p')): never below the variance, and never 0 where the variance is not
    for count in (0, 1, 3, 20, 200):
        tau = np.arange(count + 1)
        mean_square = (stats.binom.pmf(tau, count, q) * p.reported_standard_error(tau / q) ** 2).sum()
        assert mean_square == pytest.approx(p.standard_error(count) ** 2 + (1 - q) / q**2, rel=1e-9)


def test_weighted_stderr_covers_the_groups_chance_differences():
    """A reviewer's finding: with every user's answer drawn from one distribution (the weighting's own assumption),
    the weighted estimate n sum_g w_g c_g / n_g still misses the population's count sum_g c_g by sum_g (n w_g / n_g
    - 1) c_g, as the groups' frequencies differ by chance: its z-scores against the true count had sd 1.5-1.9 with
    the sampling variance alone. ``error_variance`` adds sum_g (n w_g - n_g)^2 psi (1 - psi) / n_g: over 300 seeded
    populations (500 users at eps 0.1, 500 at 2, a yes/no answer at psi = 1/2) the z-scores' variance is 1 (4-sigma
    band), where the sampling variance alone leaves it far above."""
    groups = [registry.calibrate("dpds", epsilon=e, delta=1e-6, n_users=500, domain_size=2, min_count_fraction=0.3)
              for e in (0.1, 2.0)]
    rng, runs, z, z_sampling = np.random.default_rng(11), 300, [], []
    for seed in range(runs):
        codes = [rng.integers(0, 2, g.n_users) for g in groups]
        truth = sum(np.bincount(c, minlength=2) for c in codes)
        sums = [simulate(g, c, mode="fast", rng=2 * seed + i).result.estimates * g.effective_probability
                for i, (g, c) in enumerate(zip(groups, codes))]
        combined = wa.combine_groups(groups, sums)
        z.append((combined.estimates - truth) / np.sqrt(combined.error_variance))
        z_sampling.append((combined.estimates - truth) / np.sqrt(combined.variance))
    z, z_sampling = np.array(z)[:, 1], np.array(z_sampling)[:, 1]  # "yes" ("no" is its complement)
    band = 4 * math.sqrt(2 / (z.size - 1))
    assert abs(z.var(ddof=1) - 1) <= band and abs(z.mean()) <= 4 / math.sqrt(z.size)
    assert z_sampling.var(ddof=1) > 1 + 2 * band


def test_weighted_groups_report_no_certain_zero():
    """Weighted aggregation: categories no group counted still have a positive variance (at the estimate plus one
    counted holder's largest weight)."""
    groups = [registry.calibrate("dpds", epsilon=e, delta=1e-5, n_users=n, domain_size=4, min_count_fraction=0.125)
              for e, n in ((0.5, 4000), (3.0, 1000))]
    combined = wa.combine_groups(groups, [np.array([0, 0, 10, 40]), np.array([0, 3, 20, 100])])
    assert np.all(combined.variance > 0) and np.all(combined.unweighted_variance > 0)
    assert combined.variance[1] < combined.variance[2] < combined.variance[3]


def test_weighted_groups_that_differ_are_flagged_and_the_unweighted_estimate_stays_unbiased():
    """The inverse-variance weights assume every group holds the categories in the same proportions: where the
    groups differ (eps 0.5 holds mostly category 0, eps 2 mostly 1), the weighted estimate is biased by hundreds of
    its sds, so the release must say so. Over 300 seeded runs each: the unweighted estimate, sum_g tau_g / p_g, is
    unbiased (4-sigma band) with ``unweighted_stderr`` its sd (4-sigma band on the variance ratio); the disagreement
    exceeds the Bonferroni limit in every run where the groups differ, and, where they share one distribution, in
    about DISAGREEMENT_LEVEL of them (4-sigma binomial band)."""
    from statistics import NormalDist

    from privagg.simulate.frequency import DISAGREEMENT_LEVEL

    groups = [registry.calibrate("dpds", epsilon=e, delta=1e-5, n_users=n, domain_size=4, min_count_fraction=0.1)
              for e, n in ((0.5, 800), (2.0, 400))]

    def held(n, shares):
        return np.repeat(np.arange(4), np.round(np.array(shares) * n).astype(int))

    limit = NormalDist().inv_cdf(1 - DISAGREEMENT_LEVEL / 8)
    runs = 300
    for shares, alarms_expected in ((([.7, .1, .1, .1], [.1, .7, .1, .1]), None),
                                    (([.4, .3, .2, .1], [.4, .3, .2, .1]), DISAGREEMENT_LEVEL)):
        codes = [held(g.n_users, s) for g, s in zip(groups, shares)]
        truth = sum(np.bincount(c, minlength=4) for c in codes)
        plain, stderr, alarms = [], [], 0
        for seed in range(runs):
            sums = [simulate(g, c, mode="fast", rng=2 * seed + i).result.estimates * g.effective_probability
                    for i, (g, c) in enumerate(zip(groups, codes))]
            combined = wa.combine_groups(groups, sums)
            plain.append(combined.unweighted)
            stderr.append(combined.unweighted_stderr)
            alarms += np.abs(combined.disagreement).max() > limit
        plain, stderr = np.array(plain), np.array(stderr)
        sd = plain.std(axis=0, ddof=1)
        assert np.all(np.abs(plain.mean(axis=0) - truth) <= 4 * sd / math.sqrt(runs))
        # each group's reported variance is, in mean, its estimator's plus one counted holder's (1 - p) / p^2
        # (test_a_count_nobody_sampled_is_not_reported_as_certain), so the sum's is the unweighted variance plus
        # the groups' (1 - p_g) / p_g^2
        extra = sum((1 - g.effective_probability) / g.effective_probability**2 for g in groups)
        assert np.all(np.abs(((stderr**2).mean(axis=0) - extra) / sd**2 - 1) <= 4 * math.sqrt(2 / (runs - 1)))
        if alarms_expected is None:
            assert alarms == runs
        else:
            assert abs(alarms - runs * alarms_expected) <= 4 * math.sqrt(runs * alarms_expected) + 1


def test_the_share_encoding_option_is_gone():
    """--share-encoding chose how the additive-share simulation sent the paper's shares; the deployed parties agree
    them by key, so it is refused as an option of no protocol."""
    for name in ("dpds", "dpdg"):
        with pytest.raises(ParameterError) as err:
            registry.calibrate(name, epsilon=EPS, delta=0.01, n_users=30, domain_size=3, share_encoding="seeds",
                               **({"min_count_fraction": 0.1} if name == "dpds" else {}))
        assert err.value.field == "share_encoding"


def test_a_neighbour_graph_is_a_dpds_and_dpdg_parameter_checked_by_name():
    """``degree`` (issue 47): an even k in [2, n - 2] for DPDS and DPDG, left out for the complete graph; the planned
    dropout fraction in [0, 1); neither for a protocol whose users do not share among users. Each named as typed."""
    dpds = sc.calibrate_dpds(1.0, 1e-6, 1000, 10, min_count_fraction=0.05, degree=20, graph_dropouts=0.1)
    assert (dpds.degree, dpds.graph_dropouts) == (20, 0.1) and dpds.to_dict()["degree"] == 20
    assert sc.calibrate_dpdg(1.0, 1e-6, 1000, 10, degree=20).degree == 20
    for graph, complete in ((dpds, sc.calibrate_dpds(1.0, 1e-6, 1000, 10, min_count_fraction=0.05)),
                            (sc.calibrate_dpdg(1.0, 1e-6, 1000, 10, degree=20), sc.calibrate_dpdg(1.0, 1e-6, 1000, 10))):
        stated = " ".join(graph.privacy.to_dict()["assumptions"])  # the graph stated wherever the parameters are
        assert "his 20 neighbours of a random graph" in stated and "every other user" not in stated
        assert "agreed by key with every other user" in " ".join(complete.privacy.to_dict()["assumptions"])
    assert sc.calibrate_dpds(1.0, 1e-6, 1000, 10, min_count_fraction=0.05).degree is None
    for degree, accepted in ((21, "even in"), (0, r"integer in \[2, 998\]"), (999, r"integer in \[2, 998\]"),
                             (True, "integer")):
        with pytest.raises(ParameterError, match=f"degree must be (an? )?{accepted}"):
            sc.calibrate_dpds(1.0, 1e-6, 1000, 10, min_count_fraction=0.05, degree=degree)
    for fraction in (1.0, -0.1, float("nan")):
        with pytest.raises(ParameterError, match=r"graph-dropouts must be a fraction of the users in \[0, 1\)"):
            sc.calibrate_dpdg(1.0, 1e-6, 1000, 10, degree=20, graph_dropouts=fraction)
    dpcs = sc.calibrate_dpcs(1.0, 1e-6, 1000, 10, min_count_fraction=0.05)
    with pytest.raises(ParameterError, match="degree must be none for this protocol"):
        dataclasses.replace(dpcs, degree=20)
