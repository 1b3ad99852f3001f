"""The simulator's multi-round harness (simulate/rounds.py): it runs the deployed parties (the registry entry's
rounds), with dropouts at each round, and its fast path draws the same release from its law."""

import numpy as np
import pytest
from scipy import stats

from privagg.errors import ParameterError
from privagg.protocols import registry
from privagg.simulate import simulate
from privagg.simulate.rounds import FAITHFUL_SECONDS_MAX, check_faithful

RUNS = 100
P_MIN = 1e-3  # KS p-value below which faithful and fast are declared different


def small(name: str):
    """12 users over 2 categories, each held by 6: cheap faithful runs."""
    options = {"dpds": dict(min_count_fraction=0.25, sampling_probability=0.5), "dpdg": dict(fractional_bits=2),
               "tss": dict(min_count_fraction=0.25, report_fraction=0.5, sampling_probability=0.5)}[name]
    return registry.calibrate(name, epsilon=1.0, delta=0.4, n_users=12, domain_size=2, **options), np.arange(12) % 2


# faithful: users vanish at the rounds (two of those up to the release round, and both after it, where the release
# does not change: DPDS's every round between the two protocols); fast: the same survivors, drawn from the release's law
DROPOUTS = {"dpds": ({"advertise": [0], "check": [3], "consistency": [4], "reveal": [5]},
                     {"advertise": [0], "check": [3]}),
            "dpdg": ({"check": [0], "masked_sum": [3], "consistency": [4], "reveal": [5]},
                     {"check": [0], "masked_sum": [3]}),
            "tss": ({"report": [0], "share": [3]}, {"report": [0], "share": [3]})}


@pytest.mark.parametrize("name", sorted(DROPOUTS))
def test_faithful_and_fast_agree_in_distribution_with_dropouts(name):
    """Over seeded runs, the faithful run of the deployed parties with users vanishing at each round and the fast
    path over the same survivors give the same law of estimates (two-sample KS per category), and both release
    over the 10 survivors with the guarantee recomputed for them."""
    params, codes = small(name)
    faithful_dropouts, fast_dropouts = DROPOUTS[name]
    draws = {}
    for mode, dropouts, seed in (("faithful", faithful_dropouts, 1), ("fast", fast_dropouts, 2)):
        runs = [simulate(params, codes, mode, rng=s, dropouts=dropouts)
                for s in np.random.SeedSequence(seed).spawn(RUNS)]
        assert {r.result.parameters.n_users for r in runs} == {10} and {r.mode for r in runs} == {mode}
        draws[mode] = np.array([r.result.estimates for r in runs])
    for j in range(2):
        assert stats.ks_2samp(draws["faithful"][:, j], draws["fast"][:, j]).pvalue > P_MIN, j
    truth = np.bincount(np.delete(codes, [0, 3]), minlength=2)
    sd = registry.get(name).rounds.survivors_parameters(params, 10).standard_error(truth)
    assert np.all(np.abs(draws["faithful"].mean(axis=0) - truth) <= 4 * sd / np.sqrt(RUNS) + 1e-9)


@pytest.mark.parametrize("name", sorted(DROPOUTS))
def test_a_run_with_dropouts_states_the_delta_recomputed_for_its_survivors(name):
    """Both modes state the release's guarantee, as the services do: the delta of the parameters recomputed for the
    10 survivors at the calibrated epsilon (the simulator stated the task's 0.4, which a release over fewer users may
    not hold: DPDS's and DPDG's are above it), over the survivors of the 12 enrolled."""
    params, codes = small(name)
    faithful_dropouts, fast_dropouts = DROPOUTS[name]
    held = registry.get(name).rounds.survivors_parameters(params, 10).delta_at(params.epsilon)
    assert abs(held - params.delta) > 0.01 and (held > params.delta or name == "tss")
    for mode, dropouts in (("faithful", faithful_dropouts), ("fast", fast_dropouts)):
        privacy = simulate(params, codes, mode, rng=1, dropouts=dropouts).privacy
        assert privacy.delta == pytest.approx(held, rel=1e-12) and privacy.epsilon == params.epsilon
        assert (privacy.event.enrolled, privacy.event.survivors) == (12, 10) and not privacy.private
        if name == "tss":  # what the two servers must not do, in the fast path too (a reviewer's finding)
            assert any(note.startswith("S1 must not see this release") for note in privacy.event.notes)


def test_a_neighbour_graph_run_with_dropouts_states_the_graph_not_the_complete_graph():
    """A release over survivors of a task on a neighbour graph states the graph (its failure terms added to delta)
    and how the deployed parties share, in both modes; before, the simulator dropped the graph with the survivors'
    parameters and stated the paper's n-out-of-n shares and the task's delta."""
    params = registry.calibrate("dpds", epsilon=3.0, delta=1e-3, n_users=60, domain_size=4, min_count_fraction=0.2,
                                degree=14, graph_dropouts=0.1)
    codes, dropouts = np.arange(60) % 4, {"masked_sum": [3, 7, 9]}
    held = registry.get("dpds").rounds.survivors_parameters(params, 57).delta_at(params.epsilon)
    for mode in ("faithful", "fast"):
        privacy = simulate(params, codes, mode, rng=1, dropouts=dropouts).privacy
        said = " ".join(privacy.event.event.assumptions + privacy.event.notes)
        assert privacy.delta >= held > params.delta and "n-out-of-n" not in said
        assert params.sharing_assumption in privacy.event.event.assumptions and "degree k = 14" in said


def test_a_faithful_run_is_the_deployed_protocol():
    """The simulator's faithful DPDS is the parties' protocol: what the server receives in round 2 are masked sums
    (the transcript counts keys, backups, masked sums and revealed shares), and the release equals the
    sharing_parties' release of the same users' messages."""
    params, codes = small("dpds")
    run = simulate(params, codes, rng=7, keep_messages=True)
    server = run.transcript["server"]
    assert server["received pair key"] == 12 and server["received masked sum"] == 24
    assert server["received revealed shares"] == 12 * 12 and server["bytes_relayed"] > 0
    assert len(run.messages) == 24 and run.result.messages == 24  # N elements per survivor


def test_dropouts_are_checked():
    params, codes = small("dpds")
    for dropouts, match in (({"nonsense": [1]}, "rounds of dpds"), ({"advertise": [12]}, "distinct users"),
                            ({"advertise": [1], "reveal": [1]}, "each dropping out once")):
        with pytest.raises(ParameterError, match=match):
            simulate(params, codes, rng=1, dropouts=dropouts)
    with pytest.raises(ParameterError, match="at rounds up to masked_sum with --mode fast"):
        simulate(params, codes, "fast", rng=1, dropouts={"reveal": [1]})
    with pytest.raises(ParameterError, match="dropouts must be dropouts the task survives"):  # t = 7 of 12
        simulate(params, codes, rng=1, dropouts={"reveal": list(range(6))})
    with pytest.raises(ParameterError, match="one-round protocol"):
        simulate(registry.calibrate("grr", epsilon=1.0, n_users=12, domain_size=2), codes, rng=1,
                 dropouts={"advertise": [1]})


def test_faithful_runs_past_their_measured_cost_are_refused_naming_fast():
    """The harness's cost grows as n^2 (every pair of users agrees a key): a run its measured rates put above
    FAITHFUL_SECONDS_MAX is refused before any work, naming --mode fast, which the same size takes."""
    big = registry.calibrate("dpds", epsilon=1.0, delta=1e-6, n_users=5_000, domain_size=10, min_count_fraction=0.05)
    assert registry.get("dpds").rounds.faithful_seconds(big) > FAITHFUL_SECONDS_MAX
    with pytest.raises(ParameterError, match="fast for this size: a faithful run of 5,000 users") as err:
        check_faithful(registry.get("dpds").rounds, big)
    assert err.value.field == "mode"
    codes = np.arange(5_000) % 10
    assert simulate(big, codes, "fast", rng=1).result.parameters.n_users == 5_000
    check_faithful(registry.get("dpds").rounds, small("dpds")[0])  # a small run goes ahead


def test_a_tss_run_whose_item_loses_every_helper_is_refused_naming_it():
    """S2 opens no round-3 sum while an item's count has no sum behind it (docs/privacy.md, "A helper's lists"): the
    faithful simulator refuses such dropouts as the services fail the task, naming the item, not with a traceback
    (the coordinator's refusal as the round closes is the round's failure)."""
    params, codes = small("tss")
    with pytest.raises(ParameterError, match=r"round 3 \(sums\) could not close: sums.items\[0\] must be a sum from "
                                             r"one of its helpers"):
        simulate(params, codes, rng=1, dropouts={"sums": list(range(12))})
