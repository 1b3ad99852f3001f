"""Faithful (every role, message by message) and fast (shortcut) paths agree in distribution."""

import numpy as np
import pytest
from scipy import stats

from privagg.core.encoding import ItemEncoder
from privagg.core.randomness import secure_rng
from privagg.errors import ParameterError
from privagg.protocols.balls_into_bins import calibrate_bib, calibrate_fe0, calibrate_fe1
from privagg.simulate import estimate_frequencies, runner, simulate

N = 10_000
RUNS = 200


def codes_for(domain):
    rng = np.random.default_rng(0)
    return np.minimum(rng.zipf(1.3, size=N) - 1, domain - 1)


@pytest.mark.parametrize("make", [lambda: calibrate_fe0(1.0, 1e-6, N, 40),
                                  lambda: calibrate_fe1(1.0, 1e-6, N, 3000, bins=150)])
def test_faithful_and_fast_agree_in_distribution(make):
    params = make()
    codes = codes_for(params.domain_size)
    items = np.array([0, 1, 5, params.domain_size - 1])
    draws = {}
    for mode, seed in (("faithful", 10), ("fast", 20)):
        seeds = np.random.SeedSequence(seed).spawn(RUNS)
        runs = [simulate(params, codes, mode, rng=s, queries=items) for s in seeds]
        draws[mode] = (np.array([r.result.estimate(items) for r in runs]),
                       np.array([r.messages_total for r in runs]))
    # Same distribution: two-sample KS per item and for the message totals, at level 1e-3.
    for j in range(items.size):
        assert stats.ks_2samp(draws["faithful"][0][:, j], draws["fast"][0][:, j]).pvalue > 1e-3
    assert stats.ks_2samp(draws["faithful"][1], draws["fast"][1]).pvalue > 1e-3


def test_faithful_run_reports_roles_and_messages():
    params = calibrate_fe1(1.0, 1e-6, N, 3000, bins=150)
    run = simulate(params, codes_for(3000), "faithful", rng=1)
    assert set(run.seconds) == {"randomize", "shuffle", "analyze", "finalize"}
    assert run.messages_total > N and run.messages_per_user == run.messages_total / N
    assert run.transcript["clients"]["sent"] == run.transcript["shuffler"]["received"] == run.messages_total
    assert run.transcript["analyzer"]["malformed"] == 0 and run.result.messages == run.messages_total
    assert "seed" in run.randomness and run.mode == "faithful" and run.messages is None
    fast = simulate(params, codes_for(3000), "fast")
    assert "secure" in fast.randomness and "simulation shortcuts" in fast.randomness and "shuffler" not in fast.transcript
    kept = simulate(params, codes_for(3000), rng=1, keep_messages=True)
    assert len(kept.messages) == kept.messages_total == run.messages_total  # same seed, same run
    assert np.array_equal(kept.result.estimates, run.result.estimates)


def test_seeded_runs_are_reproducible_and_role_streams_independent():
    params = calibrate_fe1(1.0, 1e-6, N, 3000, bins=150)
    a = simulate(params, codes_for(3000), rng=7, keep_messages=True)
    b = simulate(params, codes_for(3000), rng=7, keep_messages=True)
    assert all(np.array_equal(a.messages[k], b.messages[k]) for k in "uvw")
    c = simulate(params, codes_for(3000), rng=8, keep_messages=True)
    assert not np.array_equal(a.messages["u"][:100], c.messages["u"][:100])


def test_central_protocol_runs_the_curator():
    params = calibrate_bib(1.0, 1e-6, N, 40)
    run = simulate(params, codes_for(40), rng=2)
    assert run.messages_total == N and "curator" in run.seconds
    assert run.result.full_domain and run.result.estimates.size == 40
    # the curator's noise comes from its own stream: reproducible with the seed
    assert np.array_equal(simulate(params, codes_for(40), rng=2).result.estimates, run.result.estimates)


def test_bad_runs():
    params = calibrate_fe0(1.0, 1e-6, N, 40)
    with pytest.raises(ParameterError, match="mode must be one of"):
        simulate(params, codes_for(40), "quick")
    with pytest.raises(ParameterError, match="codes must be one item per user"):
        simulate(params, codes_for(40)[:10])
    with pytest.raises(ParameterError, match=r"item must be integer codes in \[0, 40\)"):
        simulate(params, np.full(N, 40))


@pytest.mark.parametrize("make,field", [(lambda: calibrate_fe0(1.0, 1e-10, N, 2**24), "domain"),
                                        (lambda: calibrate_fe1(1.0, 1e-10, N, 2**30, bins=2**26), "bins")])
def test_runs_too_large_for_memory_are_refused(make, field):
    params = make()  # calibrating is fine: the cost is reported
    assert params.rho > 10_000
    with pytest.raises(ParameterError, match=f"{field} must be set so that a faithful simulation's n"):
        simulate(params, np.zeros(N, dtype=int))


def test_central_runs_too_large_for_memory_are_refused(monkeypatch):
    # Like BallsIntoBinsCentral(1, 1e-10, N, 2**24) in issue 2; the limit is lowered here so that a broken check
    # would not allocate 2^27+ noisy balls: n (1 + rho) = 13,137 values > 2^12.
    monkeypatch.setattr(runner, "MESSAGES_MAX", 2**12)
    params = calibrate_bib(1.0, 1e-6, 2000, 200)
    assert params.n_users * (1 + params.rho) > 2**12
    with pytest.raises(ParameterError, match="domain must be set so that a faithful simulation's n"):
        simulate(params, np.zeros(2000, dtype=int), rng=1)


def test_estimate_frequencies_reports_privacy_honestly():
    items = codes_for(40)
    encoder = ItemEncoder(40)
    report, run = estimate_frequencies("fe0", encoder.encode(items), encoder, epsilon=1.0, delta=1e-6, seed=3, top=3)
    assert not report.privacy.private and "seed" in report.privacy.not_private_reason
    truth = np.bincount(items, minlength=40)
    assert report.n_users == N and [e.item for e in report.estimates] == np.argsort(-truth)[:3].tolist()
    assert all(abs(e.estimate - truth[e.item]) <= 4 * e.stderr for e in report.estimates)
    assert [e.true_count for e in report.estimates] == [truth[e.item] for e in report.estimates]
    assert report.parameters["item_key"] == encoder.key.hex()  # public: a later run can reuse it
    assert report.error.over == "domain" and report.error.items == 40 and encoder.kind == "integer"
    assert report.messages.total == run.messages_total
    secure, _ = estimate_frequencies("fe0", items, encoder, epsilon=1.0, delta=1e-6, top=3)
    assert secure.privacy.private and secure.privacy.not_private_reason is None
    fast, _ = estimate_frequencies("fe0", items, encoder, epsilon=1.0, delta=1e-6, mode="fast", top=3)
    assert not fast.privacy.private and "fast path" in fast.privacy.not_private_reason


def test_a_fast_request_without_a_fast_path_stays_private():
    report, run = estimate_frequencies("bib", np.arange(2000) % 7, ItemEncoder(50), epsilon=1.0, delta=1e-6,
                                       mode="fast")
    assert "simulation shortcuts" not in run.randomness  # the curator ran as in a deployment
    assert report.privacy.private, report.privacy.not_private_reason


def test_the_run_itself_says_whether_it_was_private():
    params = calibrate_fe0(1.0, 1e-6, N, 40)
    codes = codes_for(40)
    assert simulate(params, codes).privacy.private
    assert simulate(params, codes, rng=secure_rng()).privacy.private  # a secure generator passed in
    seeded = simulate(params, codes, rng=3).privacy
    assert not seeded.private and "seed" in seeded.not_private_reason
    assert not simulate(params, codes, rng=np.random.default_rng(3)).privacy.private
    fast = simulate(params, codes, mode="fast").privacy
    assert not fast.private and "fast path" in fast.not_private_reason


# --- memory: one compact buffer, shuffled in place, folded in slices ----------------------------------


def test_faithful_population_is_one_buffer_of_compact_rows():
    params = calibrate_fe1(1.0, 1e-6, N, 3000, bins=150)
    run = simulate(params, codes_for(3000), rng=1, keep_messages=True)
    records = run.messages.records
    assert records is not None and records.dtype == params.layout.record_dtype
    assert records.dtype.itemsize == 5  # u, v < q = 3001: uint16; w < 150: uint8
    assert len(records) == run.messages_total and records.base.size >= len(records)  # a view of the buffer
    assert np.array_equal(run.messages["u"], records["u"])


def test_the_buffer_grows_past_its_margin_to_the_same_messages(monkeypatch):
    params = calibrate_fe1(1.0, 1e-6, N, 3000, bins=150)
    monkeypatch.setattr(runner, "MESSAGES_PER_BATCH", 2000)  # several batches
    sized = simulate(params, codes_for(3000), rng=6, keep_messages=True)
    monkeypatch.setattr(runner, "MARGIN_SD", -100.0)  # a buffer too small from the start
    assert runner._capacity(params) < sized.messages_total
    grown = simulate(params, codes_for(3000), rng=6, keep_messages=True)
    assert all(np.array_equal(grown.messages[k], sized.messages[k]) for k in "uvw")
    assert np.array_equal(grown.result.estimates, sized.result.estimates)


MID = 2_500_000  # users: more messages than one analyzer slice, a second or less per run
_MID_RUNS = {
    "fe1 candidates": (lambda: calibrate_fe1(1.0, 1e-10, MID, 2**24, c=2), "faithful", [0, 1, 2, 3]),
    "fe1 full domain": (lambda: calibrate_fe1(1.0, 1e-10, MID, 2**16, c=2), "faithful", None),
    "fe1 fast": (lambda: calibrate_fe1(1.0, 1e-10, MID, 2**24, c=2), "fast", [0, 1, 2, 3]),
    "fe0 candidates": (lambda: calibrate_fe0(1.0, 1e-10, MID, 2**12), "faithful", list(range(100))),
    "fe0 full domain": (lambda: calibrate_fe0(1.0, 1e-10, MID, 2**12), "faithful", None),
    "bib": (lambda: calibrate_bib(1.0, 1e-10, MID, 2**12), "faithful", None),
}


@pytest.mark.parametrize("case", list(_MID_RUNS))
def test_simulation_bytes_is_within_a_quarter_of_the_measured_peak(case):
    import tracemalloc

    make, mode, queries = _MID_RUNS[case]
    params = make()
    codes = np.random.default_rng(0).integers(0, 4000, MID)
    simulate(params, codes, mode, rng=1, queries=queries)  # once first: kernels and caches loaded, not counted
    tracemalloc.start()
    try:
        simulate(params, codes, mode, rng=1, queries=queries)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    estimate = runner.simulation_bytes(params, mode, full_domain=queries is None)
    assert abs(estimate / peak - 1) <= 0.25, (estimate, peak)


def test_simulation_bytes_counts_the_population_once_in_compact_rows():
    params = calibrate_fe1(1.0, 1e-10, 50_000_000, 2**24, c=2)  # the 5 x 10^7-user run; nothing is simulated
    assert params.layout.record_dtype.itemsize == 12
    faithful = runner.simulation_bytes(params, "faithful", full_domain=False)
    population = 12 * params.n_users * params.messages_per_user
    assert population < faithful < population + 100 * 2**20  # besides the messages: a batch's or a slice's scratch
    assert runner.simulation_bytes(params, "fast", full_domain=False) < 100 * 2**20
    assert runner.simulation_bytes(params, "faithful") > faithful + 8 * params.domain_size  # aggregate, counters
    with pytest.raises(ParameterError, match="mode must be one of"):
        runner.simulation_bytes(params, "quick")


def test_the_permutation_is_left_out_only_where_no_one_sees_the_order(monkeypatch):
    """blanket-vector's analyzer sums (order_free): a run that keeps no messages makes no permutation and releases
    the same bits as one that does; a run that keeps its messages, and FE1's (whose analyzer does not say so),
    permute them; the transcript shows the shuffler passing every message on either way."""
    from privagg.core import messages as core_messages
    from privagg.protocols import registry
    from privagg.protocols.privacy_blanket import VectorAnalyzer

    calls = []
    real = core_messages.shuffle
    monkeypatch.setattr(runner, "shuffle", lambda batch, rng: calls.append(len(batch)) or real(batch, rng))
    params = registry.calibrate("blanket-vector", epsilon=1.0, delta=1e-9, n_users=4000, domain_size=6)
    vectors = np.random.default_rng(5).random((4000, 6))
    skipped = simulate(params, vectors, rng=3)
    assert calls == [] and "shuffle" not in skipped.seconds
    assert skipped.transcript["shuffler"] == {"received": 4000, "sent": 4000}
    kept = simulate(params, vectors, rng=3, keep_messages=True)
    monkeypatch.setattr(VectorAnalyzer, "order_free", False)
    shuffled = simulate(params, vectors, rng=3)
    assert calls == [4000, 4000]
    for run in (kept, shuffled):
        assert np.array_equal(run.result.total, skipped.result.total)
        assert np.array_equal(run.result.standard_errors, skipped.result.standard_errors)
    fe1 = calibrate_fe1(1.0, 1e-6, N, 3000, bins=150)
    simulate(fe1, codes_for(3000), rng=1)
    assert len(calls) == 3
