"""What an analysis releases (privagg/pipelines.py), the decision privagg analyze and the analyzer service share."""

import numpy as np
import pytest

from privagg.errors import ParameterError
from privagg.engine import folder_privacy
from privagg.pipelines import Analysis, analysis_privacy
from privagg.protocols.registry import calibrate, client
from privagg.reports import AnalysisReport, Engine, VectorAnalysisReport

N, B = 2000, 50


def frequency_run(candidates=None, full_domain=None):
    params = calibrate("fe0", epsilon=1.0, delta=1e-6, n_users=N, domain_size=B)
    analysis = Analysis.of(params, candidates, full_domain)
    analyzer = analysis.analyzer()
    messages = client(params).randomize(np.arange(N) % 10, rng=1)  # items 0..9, 200 users each
    return analysis, analyzer.finalize(analyzer.agg_update(analyzer.agg_init(), messages))


def test_without_candidates_the_whole_domain_is_estimated_and_its_top_released():
    analysis, result = frequency_run()
    assert analysis.full_domain and analysis.candidates is None and result.full_domain
    report = analysis.report(result, analysis.parameters.privacy, Engine("local", 1), top=3)
    assert isinstance(report, AnalysisReport) and report.full_domain
    assert len(report.estimates) == 3 and {e.item for e in report.estimates} <= set(range(10))  # integer codes


def test_candidates_are_estimated_alone_or_within_the_whole_domain():
    candidates = np.array([12, 20, 30])  # held by nobody
    analysis, result = frequency_run(candidates)
    assert not analysis.full_domain and result.items.tolist() == [12, 20, 30]
    whole, table = frequency_run(candidates, full_domain=True)
    assert whole.full_domain and table.full_domain  # the analyzer counts every item...
    report = whole.report(table, whole.parameters.privacy, Engine("local", 1), top=10)
    assert report.full_domain and sorted(e.item for e in report.estimates) == [12, 20, 30]  # ...the top among these
    assert [e.estimate for e in report.estimates] == sorted(table.estimate(candidates).tolist(), reverse=True)


def test_a_whole_domain_past_the_limit_is_refused_and_candidates_are_needed():
    params = calibrate("fe1", epsilon=1.0, delta=1e-6, n_users=N, domain_size=2**30)
    with pytest.raises(ParameterError) as err:
        Analysis.of(params)
    assert err.value.field == "domain" and "give --candidates" in str(err.value)
    analyzer = Analysis.of(params, np.array([1, 2])).analyzer()
    assert analyzer.finalize(analyzer.agg_init()).items.tolist() == [1, 2]
    with pytest.raises(ParameterError) as err:
        Analysis.of(params, full_domain=False)
    assert err.value.field == "candidates"


def test_a_vector_sum_releases_every_coordinate_or_the_candidates():
    params = calibrate("sparse-vector", epsilon=1.0, delta=1e-6, n_users=N, domain_size=8)
    for candidates, coordinates in ((None, list(range(8))), (np.array([2, 5]), [2, 5])):
        analysis = Analysis.of(params, candidates)
        analyzer = analysis.analyzer()
        result = analyzer.finalize(analyzer.agg_init())
        report = analysis.report(result, params.privacy, Engine("local", 1))
        assert isinstance(report, VectorAnalysisReport) and [e.item for e in report.estimates] == coordinates


def test_the_privacy_block_states_the_clients_randomness_and_the_received_count():
    params = calibrate("fe0", epsilon=1.0, delta=1e-6, n_users=N, domain_size=B)
    expected = round(N * params.messages_per_user)
    private = analysis_privacy(params, expected, "secure: the SDK's")
    assert private.private and private.randomness == "secure: the SDK's" and not private.caveats
    seeded = analysis_privacy(params, expected, "seed 3", not_private="a seeded simulation")
    assert not seeded.private and "a seeded simulation" in seeded.not_private_reason
    few = analysis_privacy(params, expected // 2, "secure")
    assert few.private and "users may have dropped out" in few.caveats[-1]
    # what the users who reported would send, not the calibrated n
    assert not analysis_privacy(params, expected // 2, "secure", reporters=N // 2).caveats
    assert folder_privacy(params, {"private": True, "randomness": "ChaCha20"}, expected).randomness == \
        "as recorded in items.json: ChaCha20"
    for items, reason in (({"private": False, "randomness": "seed 1"}, "reproducible randomness"),
                          ({}, "no items.json records how the messages were made")):
        privacy = folder_privacy(params, items, expected)
        assert not privacy.private and reason in privacy.not_private_reason


def test_a_message_folder_with_malformed_messages_states_them_as_the_service_does():
    """privagg analyze of a folder some of whose messages are malformed: the guarantee counts on ceil(G n) whole
    reports, as the analyzer service's release (an Incomplete event); not private below, and a local report stands
    alone."""
    params = calibrate("fe0", epsilon=1.0, delta=1e-6, n_users=N, domain_size=B, honest_fraction=0.75)
    expected, recorded = round(N * params.messages_per_user), {"private": True, "randomness": "ChaCha20", "users": N}
    assert folder_privacy(params, recorded, expected, 0) == folder_privacy(params, recorded, expected)
    some = folder_privacy(params, recorded, expected, 400)
    assert some.private and some.event.type == "incomplete" and some.event.lost == 400
    many = folder_privacy(params, recorded, expected, 501)
    assert not many.private and "501 messages of the 2000 reports did not enter" in many.not_private_reason
    local = calibrate("grr", epsilon=1.0, n_users=N, domain_size=B)
    assert folder_privacy(local, recorded, N, 501).private


def test_a_release_of_fewer_users_states_what_its_guarantee_counts_on():
    """m of the n users reported (a shuffle task closed early): the guarantee counts on ceil(G n) honest users among
    them, and says so; below ceil(G n) it is not private. A local report stands alone; more than n add noise."""
    params = calibrate("fe0", epsilon=1.0, delta=1e-6, n_users=N, domain_size=B, honest_fraction=0.75)
    per_user = params.messages_per_user
    early = analysis_privacy(params, round(1600 * per_user), "secure", reporters=1600)
    assert early.private and early.assumptions[-1].startswith("1600 of the 2000 users reported: the guarantee counts "
                                                              "on 1500 of them following the protocol")
    short = analysis_privacy(params, round(1499 * per_user), "secure", reporters=1499)
    assert not short.private and "fewer than the 1500 honest users" in short.not_private_reason
    assert short.summary().startswith("NOT PRIVATE (too few reports)")
    assert analysis_privacy(params, round(N * per_user), "secure", reporters=N) == analysis_privacy(
        params, round(N * per_user), "secure")
    local = calibrate("grr", epsilon=1.0, n_users=N, domain_size=B)
    for users in (10, 3 * N):
        privacy = analysis_privacy(local, users, "secure", reporters=users)
        assert privacy.private and privacy.assumptions == local.privacy.assumptions and not privacy.caveats
