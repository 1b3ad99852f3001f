"""Many rows a user (issue 49): the bounding, its guarantee composed over a user's L reports, the grouping in
bounded memory, the plan before any data is read, and the command line (docs/privacy.md, "Many rows a user")."""

from __future__ import annotations

import json
import math
import re

import numpy as np
import pandas as pd
import pytest
from typer.testing import CliRunner

import privagg
from privagg import ParameterError
from privagg.cli import app
from privagg.privacy import composition
from privagg.privacy.description import PrivacyDescription

APPS = ["mail", "maps", "chat", "news", "music", "photos", "games", "shop"]
runner = CliRunner()


def _log(n: int, seed: int = 3, items: int = len(APPS), most: int = 40) -> pd.DataFrame:
    """An event log: n users with 1 to ``most`` rows each (heavy-tailed), items in [0, ``items``), skewed."""
    rng = np.random.default_rng(seed)
    rows = np.minimum(rng.zipf(1.5, n), most)
    users = np.repeat(np.arange(n), rows)
    weights = 1 / np.arange(1, items + 1)
    return pd.DataFrame({"device": users * 7 + 11, "app": rng.choice(items, users.size, p=weights / weights.sum())})


# --- the composition (privacy/composition.py) ------------------------------------------------------------------

def _exact_rr_epsilon(eps0: float, reports: int, delta: float) -> float:
    """The exact epsilon at ``delta`` of L-fold eps0 randomized response (the dominating pair of a pure eps0-DP
    mechanism): the privacy loss is (L - 2k) eps0 with k ~ Binomial(L, 1 / (1 + e^eps0)); bisection on
    delta(eps) = E[(1 - e^(eps - loss))_+]."""
    from scipy.stats import binom

    k = np.arange(reports + 1)
    mass, loss = binom.pmf(k, reports, 1 / (1 + math.exp(eps0))), (reports - 2 * k) * eps0
    low, high = 0.0, reports * eps0
    for _ in range(100):
        middle = (low + high) / 2
        low, high = (low, middle) if (mass * np.clip(1 - np.exp(middle - loss), 0, None)).sum() <= delta else \
            (middle, high)
    return high


def test_pld_composition_is_valid_and_tight():
    """dp-accounting's PLD of the generic eps0 pair, composed L times: never below the exact epsilon of L-fold
    randomized response (the tight bound for pure eps0-DP mechanisms), within 1% above it; at most basic
    composition L eps0, and eps0 itself for L = 1."""
    for eps0, reports, delta in [(0.1, 16, 1e-6), (0.05, 100, 1e-8), (0.5, 4, 1e-3), (0.3, 8, 1e-5)]:
        exact = _exact_rr_epsilon(eps0, reports, delta)
        pld = composition.pld_epsilon(eps0, 0.0, reports, delta)
        assert exact - 1e-9 <= pld <= 1.01 * exact + 1e-6, (eps0, reports, delta, exact, pld)
        assert pld <= reports * eps0 + 1e-9
        assert composition.pld_epsilon(eps0, 0.0, 1, delta) <= eps0 + 1e-9
    assert composition.pld_epsilon(0.5, 0.0, 1, 0.0) == pytest.approx(0.5, rel=1e-6)


def test_per_report_budget_keeps_the_users_guarantee():
    """The per-report budget composes back to at most the user's: group privacy exactly (the shuffle and central
    models), PLD in the local model (where it beats basic composition's eps / L only with a delta to spend)."""
    for reports in (1, 2, 4, 16):
        per = composition.per_report("shuffle", 1.0, 1e-6, reports)
        assert composition.group_privacy(per.epsilon, per.delta, reports) == pytest.approx((1.0, 1e-6), rel=1e-12)
        assert per.method == composition.GROUP
    pure = composition.per_report("local", 1.0, 0.0, 4)
    assert (pure.epsilon, pure.delta, pure.method) == (0.25, 0.0, composition.BASIC)
    spent = composition.per_report("local", 2.0, 1e-6, 16)
    assert spent.method == composition.PLD and spent.epsilon > 2.0 / 16
    assert composition.pld_epsilon(spent.epsilon, 0.0, 16, 1e-6) <= 2.0
    assert _exact_rr_epsilon(spent.epsilon, 16, 1e-6) <= 2.0


def test_group_privacy_bound_holds_on_an_exact_mechanism():
    """The group-privacy bound against the exact privacy curve of a mechanism over n L reports where a neighbour
    changes L of them: binary randomized response at eps0 on each report, the count of ones released (the
    reports of a user are L of the n L). The exact delta at L eps0 is at most delta0 sum_i e^(i eps0) (with
    delta0 = 0: zero), and at a smaller epsilon the bound's delta is what the exact one reaches or less."""
    from scipy.stats import binom

    eps0, reports, others = 0.4, 3, 30
    p = math.exp(eps0) / (1 + math.exp(eps0))
    # the user's L reports all 1 (D) or all 0 (D'); the others' count is common: the released count's laws
    mine_d, mine_d2 = binom.pmf(np.arange(reports + 1), reports, p), binom.pmf(np.arange(reports + 1), reports, 1 - p)
    rest = binom.pmf(np.arange(others + 1), others, 0.5)
    law_d, law_d2 = np.convolve(mine_d, rest), np.convolve(mine_d2, rest)
    delta_at = lambda eps: max(np.clip(law_d - math.exp(eps) * law_d2, 0, None).sum(),  # noqa: E731
                               np.clip(law_d2 - math.exp(eps) * law_d, 0, None).sum())
    epsilon, delta = composition.group_privacy(eps0, 0.0, reports)
    assert delta == 0 and delta_at(epsilon) <= 1e-15
    assert delta_at(epsilon * 0.8) > 0  # the bound is not vacuous: a smaller epsilon needs a delta


# --- estimates over many rows a user -----------------------------------------------------------------------------

RUN = dict(epsilon=1.0, delta=1e-8, seed=7)


def test_l_items_a_user_estimate_the_bounded_counts_and_state_the_composition():
    """max_items = 3: n is the users, each estimate within 4 stderr of the users holding the item among their
    bounded items (the evaluation's true counts, which sum to at most 3 n), the guarantee the user's (1, 1e-8)
    by group privacy over his 3 reports, stated in the privacy block and read back from its JSON."""
    log = _log(3000)
    report = privagg.estimate(log, "fe1", item="app", user="device", max_items=3, candidates=list(range(8)),
                              top=8, **RUN)
    assert report.n_users == log["device"].nunique() == 3000
    z = [(e.estimate - e.true_count) / e.stderr for e in report.estimates]
    assert len(z) == 8 and max(map(abs, z)) < 4, z
    counts = log.groupby("device")["app"].nunique().clip(upper=3)
    assert sum(e.true_count for e in report.estimates) == counts.sum()
    privacy = report.privacy
    assert (privacy.epsilon, privacy.delta) == pytest.approx((1.0, 1e-8), rel=1e-9)
    assert privacy.parameters["per_report_epsilon"] == pytest.approx(1 / 3)
    assert privacy.parameters["reports_per_user"] == 3 and "group privacy" in privacy.method_detail
    assert "at most L = 3 distinct items" in privacy.neighbouring and report.privacy_profile == []
    assert report.warnings[0].startswith("the estimates count the users holding each item among their bounded")
    again = PrivacyDescription.from_dict(json.loads(json.dumps(privacy.to_dict())))
    assert (again.epsilon, again.delta, again.method_detail) == (privacy.epsilon, privacy.delta,
                                                                 privacy.method_detail)
    released = privagg.estimate(log, "fe1", item="app", user="device", max_items=3, candidates=list(range(8)),
                                epsilon=1, delta=1e-8)
    assert released.privacy.private and "count of the data" in released.warnings[0]
    assert not any(str(3000 - 1) in w for w in released.warnings)


def test_the_warnings_and_costs_are_the_users_not_one_reports():
    """max_items = 2 (a reviewer's finding): the weak-guarantee warnings looked at one report's (eps / L, delta0)
    and the n L reports, so a user's (15, 2.5e-3) over n = 600 (delta >= 1/n) carried none, which L = 1 gives;
    the "no information" warning was missing where the table's title said to see it; the expected messages a user
    were one report's. Each is now of the user's guarantee and the n users; and a vector sum of each user's rows
    summed says nothing of users holding "more than 1 distinct rows" (nothing was bounded)."""
    log = _log(600)
    weak = dict(item="app", user="device", candidates=list(range(8)), epsilon=15, delta=2.5e-3, seed=7)
    for items in (1, 2):
        report = privagg.estimate(log, "fe1", max_items=items, domain_size=8, **weak)
        assert any(w.startswith("delta = 0.0025 is at least 1/n = 0.00167") for w in report.warnings), items
        assert any(w.startswith("epsilon = 15 exceeds 10") for w in report.warnings), items
    plain = privagg.estimate(log, "fe1", item="app", user="device", max_items=2, candidates=list(range(8)),
                             domain_size=8, **RUN)
    assert plain.expected_error.messages_per_user == pytest.approx(plain.messages.per_user, rel=0.02)
    assert not any("exceeds 10" in w or "at least 1/n" in w for w in plain.warnings)
    few = privagg.estimate(_log(8, most=3), "laplace", item="app", user="device", max_items=3,
                           candidates=list(range(8)), domain_size=8, epsilon=0.8, seed=7)
    named = privagg.estimate(pd.DataFrame({"device": np.repeat(np.arange(600), 3), "app": [f"a{i % 7}" for i in
                                                                                             range(1800)]}),
                             "fe1", item="app", user="device", max_items=3, candidates=["a0", "a1"], domain_size=8,
                             **RUN)  # strings hashed into B = 8: the warning counts the 1,800 reports, not "users"
    assert any("with 1,800 reports (600 users, up to 3 a user) over B = 8 codes, up to n L / B = 225 reports a code" in w
               for w in named.warnings), named.warnings
    with pytest.raises(ParameterError, match="^delta is required for fe1"):  # was a TypeError in the composition
        privagg.estimate(log, "fe1", item="app", user="device", max_items=2, candidates=list(range(8)), epsilon=1)
    assert few.expected_error.standard_error > 8 and any(w.startswith("the estimates carry no information at "
                                                                       "this size") for w in few.warnings)
    rng = np.random.default_rng(2)
    users = np.repeat(np.arange(300), 10)
    frame = pd.DataFrame({"device": users, "x": rng.random(users.size), "y": rng.random(users.size)})
    summed = privagg.estimate(frame, "blanket-vector", columns=["x", "y"], user="device", **RUN)
    assert summed.warnings[0] == "the estimates are sums over the users of their bounded rows: summed and clipped " \
                                 "to [0, 1]^d"


def test_local_model_composes_by_pld():
    """grr with 16 items a user at (2, 1e-6): each report eps0 > 2 / 16 by dp-accounting's PLD, stated so, and the
    estimates within 4 stderr of the bounded counts."""
    log = _log(3000, items=16)
    report = privagg.estimate(log, "grr", item="app", user="device", max_items=16, domain_size=16, epsilon=2,
                              delta=1e-6, seed=7, top=16)
    privacy = report.privacy
    assert privacy.method_detail.startswith(composition.PLD) and privacy.model == "local"
    assert privacy.parameters["per_report_epsilon"] > 2 / 16 and privacy.epsilon <= 2 and privacy.delta == 1e-6
    assert all(abs(e.estimate - e.true_count) < 4 * e.stderr for e in report.estimates)


def test_vectors_by_user_summed_and_clipped_or_sampled():
    """Vectors: a user's rows summed and clipped to [0, 1]^d (one report a user, the protocol's guarantee), or R
    rows sampled (R reports, group privacy); either way the sums within 4 stderr of the bounded data's."""
    rng = np.random.default_rng(2)
    users = np.repeat(np.arange(3000), rng.integers(1, 6, 3000))
    frame = pd.DataFrame({"device": users, "x": rng.random(users.size) * 0.4, "y": rng.random(users.size) * 0.1})
    summed = privagg.estimate(frame, "blanket-vector", columns=["x", "y"], user="device", **RUN)
    truth = frame.groupby("device")[["x", "y"]].sum().clip(upper=1).sum()
    assert summed.n_users == 3000 and summed.privacy.epsilon == 1
    for e, true in zip(summed.estimates, truth):
        assert e.true_sum == pytest.approx(true) and abs(e.estimate - true) < 4 * e.stderr
    sampled = privagg.estimate(frame, "blanket-vector", columns=["x", "y"], user="device", max_rows=2, **RUN)
    assert sampled.n_users == 3000 and sampled.privacy.parameters["reports_per_user"] == 2
    for e in sampled.estimates:
        assert abs(e.estimate - e.true_sum) < 4 * e.stderr
        assert e.true_sum <= frame.groupby("device")["x" if e.item == 0 else "y"].apply(
            lambda v: np.sort(v.to_numpy())[-2:].sum()).sum() + 1e-9


@pytest.mark.parametrize("bad", [-3.0, 1.5, np.inf, -np.inf])
def test_a_row_outside_the_unit_cube_is_refused_before_a_users_rows_are_summed(bad):
    """A reviewer's run: a row of -3 (or inf) was summed with its user's other rows and the sum clipped, in
    silence (a negative row cancels his real ones), where the same row without a user column is an error. Now one
    error naming the value, the column and the data row; the (coordinate, weight) rows' weights alike."""
    frame = pd.DataFrame({"device": [1, 2, 3, 2], "x": [0.1, 0.3, 0.2, 0.5], "y": [0.2, bad, 0.2, 0.5]})
    with pytest.raises(ParameterError, match=rf"^vector must be values in \[0, 1\] on every row .*got {bad!r} in "
                                             r"column 1 on data row 2 of "):
        privagg.estimate(frame, "blanket-vector", columns=["x", "y"], user="device", **RUN)
    sparse = pd.DataFrame({"device": [1, 2, 2], "c": [1, 1, 1], "w": [0.5, bad, 0.9]})
    with pytest.raises(ParameterError, match=rf"got {bad!r} in column 1 on data row 2 of "):
        privagg.estimate(sparse, "sparse-vector", columns=["c", "w"], user="device", domain_size=4, epsilon=1.0,
                         delta=1e-6, seed=1)


# --- bounded memory ----------------------------------------------------------------------------------------------

def test_grouping_in_partitions_on_disk_gives_the_in_memory_result(tmp_path, monkeypatch):
    """A budget far below the data forces the records through partitions on disk: the users' bounded codes, and
    the whole seeded estimate, are identical to the grouping in memory."""
    from privagg.core.encoding import ItemEncoder
    from privagg.io import InputFormat
    from privagg.simulate import users

    log = _log(4000, most=60)
    path = tmp_path / "events.csv"
    log.to_csv(path, index=False)
    fmt = InputFormat(column="app")
    kwargs = dict(encoder=ItemEncoder(64, b"k"), reports=3, pad=64, seed=5, source=str(path))
    memory = users.read_grouped(path, "file", fmt, "device", memory=1 << 30, **kwargs)
    disk = users.read_grouped(path, "file", fmt, "device", memory=20_000, **kwargs)
    assert memory.partitions == 0 and disk.partitions >= 16
    assert np.array_equal(memory.codes, disk.codes) and memory.truncated == disk.truncated
    assert memory.n_users == 4000
    whole = privagg.estimate(path, "fe1", item="app", user="device", max_items=3, domain_size=64, **RUN)
    monkeypatch.setattr(users, "grouping_budget", lambda: 20_000)
    parted = privagg.estimate(path, "fe1", item="app", user="device", max_items=3, domain_size=64, **RUN)
    assert [(e.item, e.estimate, e.true_count) for e in parted.estimates] == \
        [(e.item, e.estimate, e.true_count) for e in whole.estimates]


# --- accuracy before spending ------------------------------------------------------------------------------------

def test_plan_stderr_is_the_runs_spread():
    """plan's expected stderr an item against a seeded run's errors over 1,000 items (the true counts from the
    evaluation): their sd within 4 of its standard errors (sd / sqrt(2 (m - 1)), 9%) of the plan's."""
    n, reports, items = 6000, 3, 1000
    planned = privagg.plan("fe1", epsilon=1, delta=1e-8, n_users=n, max_items=reports, domain_size=items)
    assert planned.reports == n * reports and planned.method == composition.GROUP
    assert (planned.epsilon, planned.delta) == pytest.approx((1, 1e-8))
    log = _log(n, items=items, most=10)
    report = privagg.estimate(log, "fe1", item="app", user="device", max_items=reports, domain_size=items,
                              candidates=list(range(items)), top=items, mode="fast", **RUN)
    errors = np.array([e.estimate - e.true_count for e in report.estimates])
    assert errors.size == items
    spread = errors.std(ddof=1)
    assert abs(spread - planned.stderr) < 4 * planned.stderr / math.sqrt(2 * (items - 1)), (spread, planned.stderr)
    assert abs(errors.mean()) < 4 * planned.stderr / math.sqrt(items)


# --- the command line ----------------------------------------------------------------------------------------------

def test_command_line_matches_the_api_on_pandas_and_polars(tmp_path):
    """privagg estimate fe1 --user-column on a Parquet file gives the API's report on the pandas and the Polars
    frame (same seed): the same estimates, n and guarantee."""
    import polars as pl

    log = _log(2000)
    path = tmp_path / "events.parquet"
    log.to_parquet(path)
    args = ["estimate", "fe1", "--input", str(path), "--column", "app", "--user-column", "device", "--max-items",
            "2", "--domain", "8", "--epsilon", "1", "--delta", "1e-8", "--seed", "7", "--json"]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    cli = json.loads(result.stdout)
    on_pandas = privagg.estimate(log, "fe1", item="app", user="device", max_items=2, domain_size=8, **RUN)
    on_polars = privagg.estimate(pl.from_pandas(log), "fe1", item="app", user="device", max_items=2, domain_size=8,
                                 **RUN)
    rows = lambda r: [(e.item, round(e.estimate, 6)) for e in r.estimates]  # noqa: E731
    assert rows(on_pandas) == rows(on_polars) == [(e["item"], round(e["estimate"], 6)) for e in cli["estimates"]]
    assert cli["n_users"] == on_pandas.n_users == 2000
    assert cli["privacy"]["epsilon"] == on_pandas.privacy.epsilon == pytest.approx(1.0)
    planned = runner.invoke(app, ["calibrate", "fe1", "--users", "2000", "--domain", "8", "--epsilon", "1",
                                  "--delta", "1e-8", "--max-items", "2"])
    assert planned.exit_code == 0 and "each user (1, 1e-08)-DP by group privacy" in planned.stdout


def test_default_full_domain_falls_back_to_the_candidates_given():
    """fe1 at 12,000 users and eps 1/3: the full domain's preimage walk passes its cap, so the default estimates
    the candidates given (it was refused, naming --domain, though candidates were given)."""
    frame = pd.DataFrame({"app": np.array(APPS)[np.random.default_rng(1).integers(0, 8, 12_000)]})
    report = privagg.estimate(frame, "fe1", item="app", candidates=APPS, epsilon=1 / 3, delta=3e-9, seed=3,
                              mode="fast")
    assert not report.simulation.full_domain and {e.item for e in report.estimates} <= set(APPS)


def test_command_line_candidates_of_integer_items(tmp_path):
    """--candidates is read as text lines: with integer items (and --user-column) they are the integers, not text
    (it was refused: 'candidates must be integer items, like the input')."""
    rng = np.random.default_rng(0)
    pd.DataFrame({"u": rng.integers(0, 500, 3000), "a": rng.integers(0, 5, 3000)}).to_csv(tmp_path / "e.csv",
                                                                                          index=False)
    (tmp_path / "c.txt").write_text("0\n1\n2\n3\n")
    result = runner.invoke(app, ["estimate", "fe1", "--input", str(tmp_path / "e.csv"), "--column", "a",
                                 "--user-column", "u", "--max-items", "2", "--candidates", str(tmp_path / "c.txt"),
                                 "--epsilon", "1", "--delta", "1e-8", "--seed", "1", "--json"])
    assert result.exit_code == 0, result.output
    assert sorted(e["item"] for e in json.loads(result.stdout)["estimates"]) == [0, 1, 2, 3]
    (tmp_path / "c.txt").write_text("0\nten\n")
    result = runner.invoke(app, ["estimate", "fe1", "--input", str(tmp_path / "e.csv"), "--column", "a",
                                 "--user-column", "u", "--candidates", str(tmp_path / "c.txt"), "--epsilon", "1",
                                 "--delta", "1e-8", "--seed", "1"])
    assert result.exit_code == 2 and "candidates must be integers, like the input's items, got 'ten'" in result.output


def test_grouped_run_is_checked_against_memory_before_it_runs(tmp_path, monkeypatch):
    """A file's users grouped into n L reports: the run over them is refused, naming the option that shrinks it,
    when it would not fit in memory (as a file's run is before it is read), rather than started."""
    from privagg.errors import ParameterError
    from privagg.simulate import frequency

    path = tmp_path / "events.parquet"
    _log(500).to_parquet(path)
    monkeypatch.setattr(frequency, "available_memory", lambda: 1 << 20)
    with pytest.raises(ParameterError, match="set so that the run fits in memory: about 1.5e\\+03 users"):
        privagg.estimate(path, "fe1", item="app", user="device", max_items=3, domain_size=8, **RUN)


# --- heavy hitters with L items a user (fe-hh, padded) -----------------------------------------------------------

WORDS = [f"w{i}" for i in range(40)]


def _favourites(n: int, seed: int = 1, integers: bool = False) -> pd.DataFrame:
    """n users with 1 to 3 favourite items (Zipf over 40) and 1 to 50 rows each (heavy-tailed), every row one of
    the user's favourites: with L = 3 the bounded data is the raw data, so the truth is pandas' count of users."""
    rng = np.random.default_rng(seed)
    held = rng.integers(1, 4, n)
    rows = np.minimum(rng.zipf(1.5, n), 50)
    users = np.repeat(np.arange(n), rows)
    popularity = 1 / np.arange(1, 41) ** 1.2
    favourite = rng.choice(40, size=(n, 3), p=popularity / popularity.sum())
    items = favourite[users, rng.integers(0, 6, users.size) % held[users]]
    return pd.DataFrame({"device": users * 13 + 5, "app": items * 3 if integers else np.array(WORDS)[items]})


@pytest.mark.parametrize("integers", [False, True])
def test_heavy_hitters_with_l_items_a_user(integers):
    """fe-hh with max_items = 3 over 8,000 users each holding 1 to 3 items: the unused slots padded with a value
    no item is (strings: the bytes 00 01; integers: B) and left out of the list; heavy still means held by phi n
    users (fe-hh run over the n L reports at phi / L); the list's recall of the items held by 1.5 phi n and
    precision at phi n / 2 are 1, as the detection bounds (each <= 0.05) say; each estimate within 4 stderr of the
    users holding the item (here the raw count: no user holds more than 3), the z-scores' mean within 4 / sqrt(k);
    the guarantee the user's (1, 1e-8) by group privacy over his 3 reports."""
    log = _favourites(8000, integers=integers)
    options = dict(domain_size=128) if integers else dict(max_length=3)
    report = privagg.estimate(log, "fe-hh", item="app", user="device", max_items=3, phi=0.1, **options, **RUN)
    assert report.n_users == 8000 and report.threshold == pytest.approx(0.1 * 8000)
    assert report.parameters["n_users"] == 3 * 8000 and report.parameters["phi"] == pytest.approx(0.1 / 3)
    assert report.reliable and report.theory["miss_probability"] <= 0.05
    pad = 128 if integers else "\x00\x01"
    assert report.survivors[-1] == len(report.heavy_hitters) + 1  # the padding's value was found, and left out
    assert all(h.item != pad for h in report.heavy_hitters)
    e = report.evaluation
    assert e.heavy_items >= 3 and e.recall_strong == 1 and e.precision_loose == 1, e
    raw = log.drop_duplicates().groupby("app").size()
    z = [(h.estimate - raw[h.item]) / h.stderr for h in report.heavy_hitters]
    assert all(h.true_count == raw[h.item] for h in report.heavy_hitters)
    assert max(map(abs, z)) < 4 and abs(np.mean(z)) < 4 / math.sqrt(len(z)), z
    privacy = report.privacy
    assert (privacy.epsilon, privacy.delta) == pytest.approx((1.0, 1e-8), rel=1e-9)
    assert privacy.parameters["per_report_epsilon"] == pytest.approx(1 / 3)
    assert privacy.parameters["reports_per_user"] == 3 and "group privacy" in privacy.method_detail
    assert "at most L = 3 distinct items" in privacy.neighbouring
    planned = privagg.plan("fe-hh", epsilon=1, delta=1e-8, n_users=8000, max_items=3, phi=0.1, **options)
    assert planned.stderr == pytest.approx(report.theory["standard_error_at_phi_n"], rel=1e-9)


def test_heavy_hitters_truth_is_of_the_bounded_data():
    """With users holding up to 3 items bounded to L = 2, an item's true count is the users holding it among
    their 2 chosen items (at most its raw count; the counts over the list at most 2 n), and each estimate is
    within 4 stderr of it, not of the raw count."""
    log = _favourites(8000, seed=2)
    report = privagg.estimate(log, "fe-hh", item="app", user="device", max_items=2, phi=0.1, max_length=3, **RUN)
    raw = log.drop_duplicates().groupby("app").size()
    assert report.evaluation.recall_strong == 1 and report.evaluation.precision_loose == 1
    assert any(h.true_count < raw[h.item] for h in report.heavy_hitters)
    for h in report.heavy_hitters:
        assert h.true_count <= raw[h.item] and abs(h.estimate - h.true_count) < 4 * h.stderr, h
    assert "2 distinct items" in report.warnings[0]


def test_heavy_hitters_padding_refuses_what_it_cannot_pad(tmp_path):
    """The unused slots need a value no item is: strings of at least 2 bytes (00 01), integers with B < 2^64;
    refused naming the field, in the API and on the command line."""
    log = _favourites(300)
    with pytest.raises(ParameterError, match="max_length must be at least 2 with more than one item a user"):
        privagg.estimate(log, "fe-hh", item="app", user="device", max_items=2, phi=0.1, max_length=1, **RUN)
    ints = _favourites(300, integers=True)
    with pytest.raises(ParameterError, match="domain_size must be below 2\\^64 with more than one item a user"):
        privagg.estimate(ints, "fe-hh", item="app", user="device", max_items=2, phi=0.1, domain_size=2**64, **RUN)
    path = tmp_path / "events.parquet"
    log.to_parquet(path)
    result = runner.invoke(app, ["estimate", "fe-hh", "--input", str(path), "--column", "app", "--user-column",
                                 "device", "--max-items", "2", "--max-length", "1", "--phi", "0.1", "--epsilon", "1",
                                 "--delta", "1e-8"])
    assert result.exit_code == 2 and "max-length must be at least 2 with more than one item" in result.output, \
        result.output


def test_heavy_hitters_command_line_matches_the_api(tmp_path):
    """privagg estimate fe-hh --user-column --max-items 2 on a Parquet file: the API's list on the pandas and
    the Polars frame (same seed), n the users, the guarantee the user's."""
    import polars as pl

    log = _favourites(6000, seed=4)
    path = tmp_path / "events.parquet"
    log.to_parquet(path)
    result = runner.invoke(app, ["estimate", "fe-hh", "--input", str(path), "--column", "app", "--user-column",
                                 "device", "--max-items", "2", "--max-length", "3", "--phi", "0.1", "--epsilon", "1",
                                 "--delta", "1e-8", "--seed", "7", "--json"])
    assert result.exit_code == 0, result.output
    cli = json.loads(result.stdout)
    listed = lambda r: [(h.item, round(h.estimate, 6)) for h in r.heavy_hitters]  # noqa: E731
    for frame in (log, pl.from_pandas(log)):
        api = privagg.estimate(frame, "fe-hh", item="app", user="device", max_items=2, phi=0.1, max_length=3,
                               **RUN)
        assert listed(api) == [(h["item"], round(h["estimate"], 6)) for h in cli["heavy_hitters"]] != []
    assert cli["n_users"] == 6000 and cli["privacy"]["epsilon"] == pytest.approx(1.0)
    assert cli["privacy"]["parameters"]["reports_per_user"] == 2


def test_calibrate_l_items_names_the_domain_and_length_as_typed():
    """privagg calibrate --max-items L: a bad --domain is named with the value typed (it said "got 1" for
    --domain 0: the unused slots' code was added first), fe-hh's --max-length as the option."""
    for args, message in [(["fe1", "--domain", "0"], "domain must be an integer >= 2, got 0"),
                          (["fe-hh", "--max-length", "1", "--phi", "0.1"], "max-length must be at least 2"),
                          (["fe-hh", "--domain", str(2**64), "--phi", "0.1"], "domain must be below 2^64")]:
        result = runner.invoke(app, ["calibrate", *args, "--users", "8000", "--epsilon", "1", "--delta", "1e-8",
                                     "--max-items", "3"])
        assert result.exit_code == 2 and message in result.output, result.output
    planned = runner.invoke(app, ["calibrate", "fe-hh", "--users", "8000", "--max-length", "3", "--phi", "0.1",
                                  "--epsilon", "1", "--delta", "1e-8", "--max-items", "3"])
    assert planned.exit_code == 0 and "24000 reports" in planned.stdout and "by group privacy" in planned.stdout


def test_calibrate_l_items_counts_a_users_cost_as_his_l_reports():
    """A reviewer's finding: calibrate --max-items 3 printed each report's cost as "cost per user" (1 message where
    a user sends 3), and its JSON said messages_per_user 31.8 where estimate said 63.7 at L = 2. A user's cost is now
    his L reports', and the table says its parameters are each report's."""
    one = json.loads(runner.invoke(app, ["calibrate", "fe1", "--users", "5000", "--domain", "16777216", "--epsilon",
                                         "1", "--delta", "1e-8", "--max-items", "2", "--json"]).stdout)
    per_report = one["costs"]["analyzer"]["received"] / one["parameters"]["n_users"]  # over the 10^4 reports
    assert one["parameters"]["n_users"] == 10000 and per_report > 1
    assert one["messages_per_user"] == pytest.approx(2 * per_report) == one["costs"]["user"]["sent"]
    shown = runner.invoke(app, ["calibrate", "grr", "--users", "5000", "--domain", "16", "--epsilon", "1",
                                "--max-items", "3"]).stdout
    assert "each of the 15000 reports' parameters (at most 3 a user)" in shown
    assert re.search(r"cost per user\s*│\s*sent 3\s", shown), shown


def test_the_evaluation_of_l_items_a_user_leaves_out_the_unused_slots_code(tmp_path):
    """A reviewer's finding: --user-column with --max-items L evaluated the error over B + 1 items, the code of a
    user's unused slots among them; it is over the B items of the domain."""
    rng = np.random.default_rng(1)
    rows = [(u, int(rng.integers(0, 8))) for u in range(3000) for _ in range(int(rng.integers(1, 5)))]
    (tmp_path / "ev.csv").write_text("user,item\n" + "".join(f"{u},{i}\n" for u, i in rows))
    out = runner.invoke(app, ["estimate", "fe0", "--input", str(tmp_path / "ev.csv"), "--column", "item",
                              "--user-column", "user", "--max-items", "3", "--domain", "8", "--epsilon", "2",
                              "--delta", "1e-6", "--seed", "1", "--json"])
    assert out.exit_code == 0, out.output
    report = json.loads(out.stdout)
    assert report["error"]["items"] == 8 and report["parameters"]["domain_size"] == 9  # the cells: B + the slot


def test_fe_hh_by_user_takes_the_whole_64_bit_domain_and_names_the_line_of_an_item_outside_it(tmp_path):
    """A reviewer's runs: with --user-column, fe-hh refused 18446744073709551614 in B = 2^64 - 1 ('beyond 64
    bits', the domain misstated as [0, 2^63 - 1)), and an item outside B = 100 was named as 'row 14 (counted
    from 0)' of the distinct values, not by its line."""
    rows = "".join(f"u{u},{2**64 - 2 if u % 3 else 5}\n" for u in range(20_000))
    (tmp_path / "big.csv").write_text("user,x\n" + rows)
    args = ["estimate", "fe-hh", "--column", "x", "--user-column", "user", "--epsilon", "4", "--delta", "1e-8",
            "--phi", "0.3", "--seed", "1", "--json"]
    out = CliRunner().invoke(app, [*args, "--input", str(tmp_path / "big.csv"), "--domain", str(2**64 - 1)])
    assert out.exit_code == 0, out.output
    found = {h["item"]: h["true_count"] for h in json.loads(out.stdout)["heavy_hitters"]}
    assert found == {str(2**64 - 2): 13_333, "5": 6_667} or found == {2**64 - 2: 13_333, 5: 6_667}, found
    (tmp_path / "small.csv").write_text("user,x\nu1,5\nu2,7\nu1,8\nu3,500\n")
    out = CliRunner().invoke(app, [*args, "--input", str(tmp_path / "small.csv"), "--domain", "100"])
    assert out.exit_code == 2 and out.output.strip() == (
        f"error: input must be integers in [0, 100) (the domain, --domain), got 500 on line 5 of "
        f"{tmp_path / 'small.csv'}"), out.output
