"""Privacy events that compose (privagg/privacy/events.py): (epsilon, delta) and the sentence computed from the event
in one place, the same figures as before events, and the JSON privacy block read back."""

import dataclasses
import json
import math

import numpy as np
import pytest

from privagg.engine import folder_privacy
from privagg.pipelines import (FirstStage, Analysis, analysis_privacy, over_reporters, staged_privacy,
                               with_lost_messages)
from privagg.privacy.description import PrivacyDescription
from privagg.privacy.events import (EarlyClose, Incomplete, Mechanism, Sequential, Stage, Survivors, describe,
                                    event_from_dict, guarantee)
from privagg.protocols.registry import calibrate, discovery_parameters
from privagg.reports import Messages, ProfilePoint


def mechanism(**changes):
    fields = dict(mechanism="M", parameters={"mu": 1.0}, epsilon=0.5, delta=1e-7, model="shuffle",
                  neighbouring="replace-one", trusted=("shuffler",), honest_fraction=1.0, assumptions=("a",),
                  method="numeric", method_detail="d", reference="r", caveats=("c",))
    return Mechanism(**{**fields, **changes})


def test_a_sequential_event_adds_its_stages_guarantees():
    first, second = mechanism(mechanism="A", epsilon=0.25, delta=1e-8), mechanism(mechanism="B", method="exact")
    event = Sequential((Stage("discovery", first), Stage("estimation", second)))
    assert guarantee(event) == (0.75, 1e-7 + 1e-8)
    described = describe(event)
    assert described["mechanism"] == "discovery: A; then estimation: B" and described["method"] == "exact"
    assert described["parameters"] == {"discovery.mu": 1.0, "estimation.mu": 1.0}
    assert described["method_detail"].startswith("basic composition") and described["caveats"] == ("c",)
    text = PrivacyDescription.of(event).render()
    assert "stage discovery: (0.25, 1e-08)-DP" in text and "stage estimation: (0.5, 1e-07)-DP" in text
    with pytest.raises(ValueError):
        Sequential((Stage("alone", first),))


def test_a_description_says_only_what_its_event_says():
    privacy = PrivacyDescription.of(mechanism())
    assert (privacy.epsilon, privacy.delta) == (0.5, 1e-7)
    assert privacy.assumptions == ("a", "public: the parameters")
    with pytest.raises(ValueError, match="says what its event says"):
        dataclasses.replace(privacy, delta=1e-9)
    assert privacy.with_caveat("seen").caveats == ("c", "seen") and privacy.with_caveat("seen").release_caveats == (
        "seen",)
    later = privacy.with_event(mechanism(delta=1e-8))
    assert later.delta == 1e-8 and later.private == privacy.private


def test_the_staged_guarantee_is_the_composed_figures():
    """Discovery + estimate (sparse-vector-hashed --discover-phi): one composed event whose (epsilon, delta) and
    profile are what the two stages' parameters buy by basic composition, as they were before events."""
    estimate = calibrate("sparse-vector-hashed", epsilon=0.5, delta=5e-7, n_users=20_000, domain_size=2**20)
    stage = discovery_parameters(estimate, 0.05)
    composed = staged_privacy(stage.privacy, estimate.privacy)
    assert (composed.epsilon, composed.delta) == (estimate.epsilon + stage.epsilon, estimate.delta + stage.delta)
    assert composed.event.stages[0].event == stage.privacy.event and composed.private
    analysis = Analysis.of(estimate, np.array([1, 2]))
    analyzer = analysis.analyzer()
    result = analyzer.finalize(analyzer.agg_init())
    hh = stage.privacy  # any result with survivors stands for the first stage's
    first = FirstStage(stage, type("R", (), {"survivors": (3, 1)})(), hh, Messages(10, 1e-3))
    release = analysis.release(result, estimate.privacy, first=first)
    total = composed.epsilon
    assert release["privacy"] == composed
    assert release["privacy_profile"] == [ProfilePoint(e, estimate.delta_at(e / 2) + stage.delta_at(e / 2))
                                          for e in (total / 2, total, 2 * total)]
    assert release["messages"].total == 10 and release["discovery"].survivors == [3, 1]


def test_a_staged_release_is_private_only_where_both_stages_are():
    estimate = calibrate("sparse-vector-hashed", epsilon=0.5, delta=5e-7, n_users=20_000, domain_size=2**20)
    stage = discovery_parameters(estimate, 0.05)
    seeded = stage.privacy.as_simulation("seed 1", "seeded simulation: the seed")
    composed = staged_privacy(seeded, estimate.privacy)
    assert not composed.private and composed.not_private_reason.startswith("seeded simulation (discovery): the seed")
    assert composed.summary().startswith("NOT PRIVATE (seeded simulation (discovery)); would be")


def test_survivors_recompute_delta_and_say_who_took_part():
    task = calibrate("dpds", epsilon=1.0, delta=1e-6, n_users=2000, domain_size=10, min_count_fraction=0.05)
    from privagg.protocols.sharing_parties import survivors_parameters

    fewer = survivors_parameters(task, 1500)
    event = Survivors(fewer.privacy.event, fewer.delta_at(fewer.epsilon), 2000, 1500, "users who took part",
                      "1600 in round 1", ("note",))
    privacy = PrivacyDescription.of(event)
    assert (privacy.epsilon, privacy.delta) == (1.0, fewer.delta_at(1.0))
    assert privacy.caveats[-2].startswith("recomputed for the 1500 users who took part, of the 2000 enrolled "
                                          "(1600 in round 1)") and privacy.caveats[-1] == "note"
    assert event.weakened == (privacy.delta > 1e-6 * (1 + 1e-9))
    assert ("weakened" in privacy.caveats[-2]) == event.weakened


def test_an_early_close_and_lost_messages_count_on_the_honest_users():
    params = calibrate("fe0", epsilon=1.0, delta=1e-6, n_users=2000, domain_size=50, honest_fraction=0.75)
    early = over_reporters(params.privacy, params, 1600)
    assert isinstance(early.event, EarlyClose) and early.private and guarantee(early.event) == (1.0, 1e-6)
    assert early.assumptions[-1].startswith("1600 of the 2000 users reported")
    lost = with_lost_messages(early, params, 50, 1600)
    assert isinstance(lost.event, Incomplete) and lost.event.event == early.event and lost.private
    assert lost.assumptions[-1].startswith("50 messages did not enter the aggregate: the guarantee counts on 1500")
    short = with_lost_messages(early, params, 200, 1600)
    assert not short.private and short.not_private_reason.startswith("messages lost: 200 messages")
    local = calibrate("grr", epsilon=1.0, n_users=2000, domain_size=50)
    assert with_lost_messages(local.privacy, local, 50, 1600) == local.privacy  # each report stands alone


@pytest.mark.parametrize("make", [
    lambda p: p.privacy,
    lambda p: analysis_privacy(p, 10, "secure", reporters=1700),
    lambda p: with_lost_messages(analysis_privacy(p, 10, "secure", reporters=1700), p, 3, 1700),
    lambda p: staged_privacy(p.privacy, p.privacy.as_simulation("seed 2", "seeded")),
    lambda p: folder_privacy(p, {"private": False, "not_private": "why", "users": 1000}, 10),
])
def test_the_privacy_block_reads_back_as_the_description(make):
    params = calibrate("fe0", epsilon=1.0, delta=1e-6, n_users=2000, domain_size=50, honest_fraction=0.75)
    privacy = make(params)
    block = json.loads(json.dumps(privacy.to_dict()))
    assert PrivacyDescription.from_dict(block) == privacy and event_from_dict(block["event"]) == privacy.event
    old = {k: v for k, v in block.items() if k not in ("event", "release_caveats")}  # a block written before events
    read = PrivacyDescription.from_dict(old)
    assert (read.epsilon, read.delta, read.assumptions, read.caveats) == (
        privacy.epsilon, privacy.delta, privacy.assumptions, privacy.caveats)
    assert math.isclose(read.honest_fraction, privacy.honest_fraction)
