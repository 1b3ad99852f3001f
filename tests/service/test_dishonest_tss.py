"""TSS's S1, helpers and S2 lying, through the services (issue 46; the deviations and what they change:
docs/privacy.md, "Dishonest parties"). The dishonest parties are tests/service/dishonest_tss.py's; the deployment and the
honest users are test_two_servers.py's, on SQLite and PostgreSQL.

Checked: S1 naming one helper for every item is refused by S2 (with the true m_j, or m_j = 1 that no longer add
up), and an election S1 attests itself is refused by every reporter, so no share is ever sent and the task fails
naming why; a helper's wrong sum is refused when the count leaves [0, |R_j|] (blaming nobody) and released, as the
release's trust says, when it does not; S2 claiming that no sum opens has no reporter reveal anything (S1 recovers
no item all of whose helpers it would name) and fails the release; S1 replacing a helper's sealed sum in the
hand-over by one it sealed to S2 itself is refused by S2 (the helper's signature does not verify), naming the sum.
"""

import base64
import dataclasses
import json
import re

import pytest
import sqlalchemy as sa

from service.dishonest_tss import EverySumUnopenedS2, OneHelperS1, SelfAttestingS1, SubstitutingS1, WrongSumHelper
from service.test_two_servers import (DOMAIN, MIN, N_USERS, answer_of, deploy, dbs, refusal,  # noqa: F401
                                     served, sqlite_dbs, step, tss)

from privagg.core import identity
from privagg.errors import ParameterError
from privagg.protocols.two_server_messages import SHARES, SUMS
from privagg.protocols.two_server_second import Handover
from privagg.protocols.two_server_parties import TSSUser
from privagg.service.two_servers.servers import s1_relayed
from privagg.service.web import Refused


def relayed(d) -> int:
    with d.first.engine.connect() as c:
        return c.execute(sa.select(sa.func.count()).select_from(s1_relayed)).scalar()


@pytest.mark.parametrize("counts", [None, 1], ids=["true-counts", "counts-of-1"])
def test_s1_electing_one_helper_for_every_item_is_refused_by_s2(dbs, counts):
    """Issue 46: S1 named user 5 the only helper of every item (phi = 0: one helper is phi + 1), and helper 5
    would read every entry. S2 refuses to attest it (H_j must be m_j; or the m_j must add up to |R1| alpha N), so
    the task fails as round 1 closes, naming S2's refusal: no reporter is ever asked to share."""
    with deploy(dbs, tss(), first_type=OneHelperS1, counts=counts) as d:
        assert step(d, 1) == "failed"
        outcome = json.loads(d.row().outcome)["failed"]
        assert "S2 refused the election (bad_election)" in outcome
        assert ("election.helpers[0] must be max(m_j, phi + 1)" if counts is None else
                "election.counts must be m_j of at most") in outcome
        assert "round2" not in d.state() and relayed(d) == 0
        assert d.second.attested._value.get() == 0


def test_an_election_s1_attests_itself_is_refused_by_every_reporter(sqlite_dbs):
    """S1 skips S2 and signs the one-helper election with its own key (serving that key too): every reporter
    checks the signature against S2's identity key in the task and refuses, nothing is sealed to helper 5, and
    round 2 closes with no one, failing the task."""
    with deploy(sqlite_dbs, tss(), first_type=SelfAttestingS1) as d:
        assert step(d, 1) == "round2"
        for c in d.clients:
            with pytest.raises(ParameterError, match="attestation must be a valid Ed25519 signature by S2"):
                c.send("share")
        assert relayed(d) == 0 and d.close(2) == "failed"
        assert "fewer than the task's minimum" in json.loads(d.row().outcome)["failed"]


@pytest.mark.parametrize("answer", [b'{"unopened": [[3]]}', b'{"unopened": [true]}', b"<html>hello</html>"],
                         ids=["helpers-as-lists", "true-for-a-helper", "not-json"])
def test_s2_answering_the_sums_with_no_list_of_helpers_fails_the_task(sqlite_dbs, answer):
    """S2 answers S1's question as round 3 closes (which sums do not open) with something that is no list of helpers
    who sent sums: a helper as a list, true for a helper, an HTML page with status 200. Before, S1 raised TypeError
    at every tick (a list is unhashable) or took the page for S2 away, or handed S2 a hand-over it refuses (true is
    no user), and the task waited forever; now it fails as round 3 closes, naming S2's answer."""
    from fastapi import FastAPI
    from fastapi.responses import Response

    from privagg.service.two_servers.servers import ask_second

    liar = FastAPI()
    liar.get("/readyz")(lambda: {"status": "ok"})
    liar.post("/tasks/{task_id}/sums")(lambda task_id: Response(answer, media_type="application/json"))
    with deploy(sqlite_dbs) as d, served(liar) as url:
        honest = d.first.ask
        d.first.ask = lambda _url, task_id, route, token, body: (
            ask_second(url, task_id, route, token, body) if route == "sums" else honest(_url, task_id, route, token,
                                                                                         body))
        step(d, 1)
        step(d, 2)
        assert step(d, 3) == "failed"
        why = d.first.state(d.task_id)["failed"]
        assert why.startswith("S2's answer on the") and ("not JSON" in why) == (answer[0] == ord("<"))
        assert d.first.deliver(d.task_id) == "failed" and d.second.received._value.get() == 0


def wrong_sum_run(d, shift) -> tuple[dict, int, int]:
    """Rounds 1-4 with the first helper adding ``shift(true count, R2 reporters)`` to his first item's sum: (the
    result, the item, its true count)."""
    step(d, 1)
    step(d, 2)
    helper, items = sorted(d.election().by_helper.items())[0]
    true = d.truth(range(N_USERS))[items[0]]
    liar = d.client(helper)
    liar.role = WrongSumHelper(d.task.parameters, helper, MIN, state=liar.role.state,
                               second=d.task.second_identity_key)
    liar.role.extra = shift(true, len(d.published()["reporters"][items[0]]))
    step(d, 3)
    step(d, 4)
    return d.result(), items[0], true


def test_a_helpers_sum_that_moves_a_count_out_of_range_is_refused(dbs):
    """A helper's sum moved so far that its item's count exceeds its R2 reporters (a sum of garbage does so with
    probability about 1 - |R_j| / p): S2 refuses that item, blaming nobody (it cannot tell whose sum or share is
    wrong), and releases the others exactly."""
    with deploy(dbs) as d:
        result, item, _ = wrong_sum_run(d, lambda true, reporters: reporters + 1 - true)
        lost = result["dropouts"]["lost_items"]
        assert [e["item"] for e in lost] == [item] and "outside [0," in lost[0]["reason"]
        p, truth = d.task.parameters, d.truth(range(N_USERS))
        assert {e["item"]: round(e["estimate"] * p.effective_probability) for e in result["estimates"]} == {
            j: truth[j] for j in range(DOMAIN) if j != item}


def test_a_helpers_plus_7_inside_the_range_is_released_and_the_release_says_it_trusts_helpers(sqlite_dbs):
    """Issue 46's +7 (here +-1, keeping the count within [0, |R_j|]): not detectable without input proofs (his sum
    of uniform shares plus k is as uniform as an honest one), so the count moves by k; the release says it
    trusts the helpers' integrity, per party, in its trust block and its caveats."""
    with deploy(sqlite_dbs) as d:
        result, item, true = wrong_sum_run(d, lambda true, reporters: 1 if true < reporters else -1)
        moved = true + 1 if true < len(d.published()["reporters"][item]) else true - 1  # in range: undetectable
        p = d.task.parameters
        estimate = next(e["estimate"] for e in result["estimates"] if e["item"] == item)
        assert round(estimate * p.effective_probability) == moved and result["dropouts"]["lost_items"] == []
        assert "integrity: trusted" in result["trust"]["helpers"] and "phi colluding" in result["trust"]["helpers"]
        assert any("integrity" in c for c in result["privacy"]["caveats"])


def test_s2_saying_no_sum_opens_makes_no_reporter_reveal(sqlite_dbs):
    """S2 claims, as round 3 closes, that none of the helpers' sums opens, hoping to be handed their shares. Every
    helper of every item is then missing, which S1 never asks to recover (the shares to all of an item's helpers
    add up to each entry): round 4 asks no one, every item is lost and nothing is released. At the hand-over S2
    opens the sums named unopened again, which do open: the hand-over fails the task (one of the two servers lied)."""
    with deploy(sqlite_dbs, second_type=EverySumUnopenedS2) as d:
        step(d, 1)
        step(d, 2)
        assert step(d, 3) == "handover"  # no round 4: nobody is asked to reveal a share
        assert d.published()["recovery"]["dropped"] == [] and len(d.published()["recovery"]["lost"]) == DOMAIN
        assert d.first.deliver(d.task_id) == "failed"
        assert refusal(d.second.result, d.task.second_task_id) == (409, "failed")
        assert "handover.unopened_sums" in d.second.state(d.task.second_task_id)["failed"]
        assert all(c.role.state.answered[-1] <= 3 for c in d.clients)


def test_s1_cannot_have_an_honest_helper_named_for_a_sum_that_did_not_open(sqlite_dbs, monkeypatch):
    """A reviewer's finding: S1 showed S2 junk for helper h's sum as round 3 closed (S2 then said it does not open),
    had his shares recovered, and S2's release named h among the helpers whose sums did not open: blame on an honest
    helper, on S1's word. S2 now checks each round-3 sum's signature by its helper before it opens any (it counts
    which items have one): the junk fails the round there, naming h, and nothing is opened or blamed. (The
    hand-over's own check, each unopened helper's sum as he sent it, signed, is test_two_servers'.)"""
    from privagg.service.two_servers.servers import SecondClient

    unopened = SecondClient.unopened
    monkeypatch.setattr(SecondClient, "unopened", lambda self, election, sums, *counted: unopened(
        self, election, {**sums, min(sums): b"junk"}, *counted))
    with deploy(sqlite_dbs) as d:
        step(d, 1)
        step(d, 2)
        h = min(d.election().by_helper)
        assert step(d, 3) == "failed"
        assert f"S2 refused the sums (bad_counts): sums.signatures[{h}]" in d.row().outcome


class _Recording(TSSUser):
    """A helper's honest role that keeps the plaintext of the sums he sends (what a dishonest S1 forges from)."""

    sent = b""

    def sums(self, reporters, shares, survivors, election=None, attestation=None, second=None):
        out = super().sums(reporters, shares, survivors, election, attestation, second)
        self.sent = out.message
        return out


def test_a_sum_s1_seals_to_s2_itself_fails_the_task_at_both_servers_naming_it(dbs):
    """Issue 46: anyone can seal to S2's public key, so S1 replaces helper h's sealed sum by his sum with +7 on his
    first item, sealed by S1 (keeping the signature h gave the sum he sent). Unchecked, S2 released that item's count
    moved by 7 (inside [0, |R_j|]: undetectable by range). S2 checks the organisation's roster and each sealed
    message's signature under its sender's identity key, as the user signed it. The hand-over, authenticated as S1's
    (the relay token), proves S1 dishonest: S2 fails the task naming the sum (before: it refused it 400 and kept the
    task waiting forever), S1's delivery records S2's reason, both servers' task states say it over HTTP, the
    result is refused 409 failed, the demo's wait for the result ends at once in one line, and S1's honest
    hand-over after it is refused too: nothing is released."""
    from privagg.protocols.roles import RoundFailed
    from privagg.service.two_servers.demo import _result
    from privagg.service.two_servers.servers import create_second_app, post_handover, s1_tasks

    with deploy(dbs, first_type=SubstitutingS1) as d, served(create_second_app(d.second, tick=None)) as s2:
        with d.first.engine.begin() as c:  # S1 hands over to S2's service over HTTP
            c.execute(sa.update(s1_tasks).values(second_url=s2))
        d.first.send = post_handover
        step(d, 1)
        step(d, 2)
        helper, items = sorted(d.election().by_helper.items())[0]
        true = d.truth(range(N_USERS))[items[0]]
        assert true + 7 <= len(d.published()["reporters"][items[0]])  # +7 stays in range: no range check sees it
        liar = d.client(helper)
        liar.role = _Recording(d.task.parameters, helper, MIN, state=liar.role.state,
                               second=d.task.second_identity_key)
        step(d, 3)
        step(d, 4)
        honest = json.dumps(d.first.handover(d.task_id).to_dict()).encode()  # what the users sent
        d.first.helper, d.first.plain = helper, liar.role.sent
        field = f"handover.sums[{helper}].signature must be a valid Ed25519 signature by user {helper}'s identity key"
        assert d.first.deliver(d.task_id) == "failed"
        s1_state = d.first.state(d.task_id)
        assert s1_state["state"] == "failed" and s1_state["failed"].startswith("S2 failed the task: S1's hand-over "
                                                                               "does not check (" + field)
        assert d.clients[0].state() == "failed"  # the users' poll of S1
        second_id = d.task.second_task_id
        status, shown = answer_of(f"{s2}/tasks/{second_id}")
        assert status == 200 and shown["state"] == "failed" and field in shown["failed"]
        assert "nothing was released" in shown["failed"]
        status, refused = answer_of(f"{s2}/tasks/{second_id}/result")
        assert (status, refused["error"]) == (409, "failed") and field in refused["detail"]
        with pytest.raises(RoundFailed, match=re.escape(field)):
            _result(f"{s2}/tasks/{second_id}/result")
        with pytest.raises(Refused) as again:  # what the users sent, once S1 proved dishonest: nothing is released
            post_handover(s2, second_id, d.row().relay_token, honest)
        assert (again.value.status, again.value.reason) == (409, "failed") and field in again.value.detail
        assert d.second.state(second_id)["state"] == "failed" and d.second.received._value.get() == 0
        assert d.second.failed._value.get() == 1
        assert d.first.deliver(d.task_id) == "failed"  # S1 sends nothing again


def _other_roster(d, honest) -> dict:
    """The hand-over's roster document signed by another key than the organisation's."""
    from privagg.service.organisation import Organisation

    other = Organisation.generate()
    return dict(honest.roster, signature=base64.b64encode(identity.sign(
        other.private_key, b"privagg roster " + d.task_id.encode(), honest.roster["roster"].encode())).decode())


@pytest.mark.parametrize("lie", ["recovery", "roster"])
def test_a_hand_over_of_s1s_that_does_not_check_fails_the_task_and_nothing_else_does(dbs, lie):
    """Which refusals fail S2's task: only a hand-over authenticated as S1's (the relay token) that does not check
    while the task waits for one (here: a recovery of a helper whose sum S1 hands over, which S1's own rules never make;
    or the roster signed by another key than the organisation's). Before it, nothing a third party or the network
    can send changes the task: a request without the relay token (401), a body that is no hand-over (cut in
    transit, or of another version: 400, S1 sends it again). After it, the task is failed, naming the field, and
    the honest hand-over is refused 409 failed. (Before: S2 refused each 400 and the task waited forever.)"""
    with deploy(dbs) as d:
        step(d, 1)
        step(d, 2)
        step(d, 3)
        assert step(d, 4) == "handover"
        honest = d.first.handover(d.task_id)
        body = json.dumps(honest.to_dict()).encode()
        second_id, token = d.task.second_task_id, d.row().relay_token
        if lie == "recovery":
            bad, field = {**honest.to_dict(), "recovery": [
                {"item": 0, "dropped": list(honest.helpers[0][:1]), "reporters": []}]}, "handover.recovery[0].dropped"
        else:
            bad, field = {**honest.to_dict(), "roster": _other_roster(d, honest)}, "roster.signature"
        bad = json.dumps(bad).encode()
        assert refusal(d.second.receive, second_id, "Bearer guess", bad) == (401, "unauthenticated")
        assert refusal(d.second.receive, second_id, None, bad) == (401, "unauthenticated")
        assert refusal(d.second.receive, second_id, f"Bearer {token}", bad[:-9]) == (400, "malformed")
        assert refusal(d.second.receive, second_id, f"Bearer {token}",
                       json.dumps({**honest.to_dict(), "version": 0}).encode()) == (400, "bad_handover")
        assert d.second.state(second_id)["state"] == "waiting" and d.second.failed._value.get() == 0
        with pytest.raises(Refused) as failed:
            d.second.receive(second_id, f"Bearer {token}", bad)
        assert (failed.value.status, failed.value.reason) == (409, "failed") and field in failed.value.detail
        state = d.second.state(second_id)
        assert state["state"] == "failed" and field in state["failed"]
        assert refusal(d.second.receive, second_id, f"Bearer {token}", body) == (409, "failed")
        assert refusal(d.second.result, second_id) == (409, "failed")
        assert d.first.deliver(d.task_id) == "failed" and field in d.first.state(d.task_id)["failed"]


def test_s1_counting_in_r2_a_user_who_did_not_share_is_refused_naming_him(sqlite_dbs):
    """A reviewer's finding: S1 handed S2 an R2 with a user of R1 who never shared, and S2 released with the
    guarantee computed for one more survivor than took part (and past the task's minimum). Each user of R2 now comes
    with his signature of his round-2 post, as S1 stored it: an added user has none, another's does not verify, and
    the hand-over (through its JSON) is refused naming him; the honest one passes."""
    from privagg.service.two_servers.servers import check_senders

    with deploy(sqlite_dbs) as d:
        step(d, 1)
        absent = sorted(d.election().senders)[-1]
        step(d, 2, skip=(absent,))
        step(d, 3)
        assert step(d, 4) == "handover"
        honest, second = d.first.handover(d.task_id), d.second.task(d.task.second_task_id)
        assert absent not in honest.survivors and absent in honest.senders
        check_senders(second, Handover.from_dict(json.loads(json.dumps(honest.to_dict()))))
        inflated = dataclasses.replace(honest, survivors=tuple(sorted((*honest.survivors, absent))))
        other = honest.survivors[0]
        borrowed = {**honest.signatures, (SHARES, absent): honest.signatures[SHARES, other]}
        for lie in (inflated, dataclasses.replace(inflated, signatures=borrowed)):
            with pytest.raises(ParameterError, match=re.escape(f"handover.shared[{absent}].signature")):
                check_senders(second, Handover.from_dict(json.loads(json.dumps(lie.to_dict()))))


def test_every_swapped_or_unsigned_part_of_the_hand_over_is_refused_naming_it(sqlite_dbs):
    """The class of issue 46's substitution, on an honest hand-over with a recovery (helper h sent no sum): a
    reporter's recovery swapped for another's, a sum without its signature, the roster signed by another key, S1's
    task edited (another S2 task named), or S2's task without the organisation's key (an older release's) are each
    refused naming the field; the honest hand-over passes."""
    from privagg.service.two_servers.servers import check_senders

    with deploy(sqlite_dbs) as d:
        step(d, 1)
        step(d, 2)
        helper = sorted(d.election().by_helper)[0]
        step(d, 3, skip=(helper,))
        assert step(d, 4) == "handover"
        honest, second = d.first.handover(d.task_id), d.second.task(d.task.second_task_id)
        check_senders(second, honest)
        (a, blob), (b, _) = sorted(honest.recoveries.items())[:2]
        some = sorted(honest.sums)[0]
        roster = _other_roster(d, honest)
        edited = {**honest.task, "task": {**honest.task["task"], "second_task_id": "cd" * 16}}
        for lie, field in [({"recoveries": {**honest.recoveries, b: blob}}, f"handover.recoveries[{b}].signature"),
                           ({"signatures": {k: v for k, v in honest.signatures.items() if k != (SUMS, some)}},
                            f"handover.sums[{some}].signature"),
                           ({"roster": roster}, "roster.signature"),
                           ({"task": edited}, "task.signature")]:
            with pytest.raises(ParameterError, match=re.escape(field)):
                check_senders(second, dataclasses.replace(honest, **lie))
        with pytest.raises(ParameterError, match="organisation_key"):
            check_senders(dataclasses.replace(second, organisation_key=None), honest)
        assert d.result()["dropouts"]["recovered_items"]  # the honest hand-over, with its recovery, is released


def test_a_recovery_s1_asked_about_other_helpers_than_it_hands_over_does_not_open_for_s2(sqlite_dbs, monkeypatch):
    """A reviewer's attack: S1 asks an item's reporters about different dropped helpers (one reporter all of them
    but one, the others that one), so that S2, opening every recovery, adds one reporter's shares up to his entry.
    A recovery's seal now binds the (item, helper) pairs its reporter was asked about (``second_info``), and S2
    opens it with those its hand-over's plan asks of him: here S1 shows one reporter one more helper of an item
    than its plan, he recovers to both, and S2 cannot open what he sent (it never reads his shares); the item is
    lost, the others released."""
    import dataclasses as dc

    from privagg.protocols import registry
    from privagg.protocols.two_server_messages import RECOVERY, message_bytes
    from privagg.protocols.two_server_parties import FirstServer

    class AskingOtherHelpers(FirstServer):
        target = item = extra = None

        def inbox(self, round_, user, state, messages):
            inbox = super().inbox(round_, user, state, messages)
            if round_.name == "recover" and user == self.target:
                inbox["dropped"] = {**inbox["dropped"], self.item: sorted([*inbox["dropped"][self.item], self.extra])}
            return inbox

        def message_size(self, round_, user, state, messages):  # it takes the recovery of what it asked
            size = super().message_size(round_, user, state, messages)
            one = message_bytes(self.parameters, RECOVERY, 2) - message_bytes(self.parameters, RECOVERY, 1)
            return size + (one if round_.name == "recover" and user == self.target else 0)

    name = "tss-collusion"
    entry = registry.REGISTRY[name]
    monkeypatch.setitem(registry.REGISTRY, name, dc.replace(entry, rounds=dc.replace(
        entry.rounds, coordinator=AskingOtherHelpers)))
    with deploy(sqlite_dbs) as d:
        assert d.task.parameters.protocol == name
        step(d, 1)
        step(d, 2)
        election = d.election()
        item = next(j for j, helpers in enumerate(election.helpers) if len(helpers) >= 3)
        dropped, extra = election.helpers[item][:2]
        reporters = d.published()["reporters"][item]
        target = next(i for i in reporters if i not in (dropped, extra))
        AskingOtherHelpers.target, AskingOtherHelpers.item, AskingOtherHelpers.extra = target, item, extra
        assert step(d, 3, skip=(dropped,)) == "round4"
        assert d.client(target).send("recover")  # he recovers to both helpers he is shown
        for c in d.clients:
            if c.user != target:
                c.send("recover")
        assert d.state() == "handover"
        result = d.result()
        lost = {e["item"]: e["reason"] for e in result["dropouts"]["lost_items"]}
        assert f"sent no usable recovery (e.g. user {target}; or S1 asked him about other helpers" in lost[item]
        assert len(lost) < DOMAIN and result["collection"]["unopened"] >= 1  # his recovery: S2 never read it


def test_s1_keeping_all_but_one_reporter_from_every_helper_is_refused_by_the_helpers(sqlite_dbs):
    """A reviewer's attack: S1 shows every helper of an item one reporter of it (and relays him that reporter's
    shares only), counting the others in R2 for S2; each helper's sum is then that reporter's share, and S2, which
    opens the sums, adds them up to his entry. Each helper now checks his lists against the m_j of S2's attested
    election: at least m_j - (|R1| - |R2|) reporters an item, R2 shown to him (here m_j about 16, nobody absent), so
    every helper refuses, nothing reaches S2 in round 3, and no item is released."""
    from service.dishonest_tss import IsolatingS1

    with deploy(sqlite_dbs, first_type=IsolatingS1, target=3) as d:
        assert step(d, 1) == "round2" and step(d, 2) == "round3"
        refused = 0
        for c in d.clients:
            try:
                c.send("sums")
            except ParameterError as err:
                assert re.search(r"reporters of item \d must be between m_j - \(\|R1\| - \|R2\|\) = \d+ - 0 "
                                 r"and m_j = \d+ of its reporters \(S1 may leave out only those who missed round 2\), "
                                 r"got [01]", str(err))
                refused += 1
        assert refused == len(d.election().by_helper)
        assert d.close(3) == "failed"  # S2 opens no sum: no item has one
        assert "must be a sum from one of its helpers" in d.row().outcome


def test_s1_leaving_one_reporter_out_of_every_list_with_nobody_dropped_is_refused_by_his_items_helpers(sqlite_dbs):
    """A second reviewer's attack: with min_survivors = 26 of 32, a helper took lists short by up to 6 reporters
    (who might have missed round 2) though nobody had, so S1 could leave a different reporter out of each item's
    lists, R2 unchanged. The helper is now shown R2 (his seal binds it, and S2 opens the sums only with the R2 and
    |R_j| S1 names as round 3 closes, which must add up): with nobody dropped, an item's list must hold all of its
    m_j reporters, so every helper of user 3's items refuses, and S2, finding items without a sum, opens none: the
    task fails as round 3 closes."""
    from service.dishonest_tss import IsolatingS1

    with deploy(sqlite_dbs, first_type=IsolatingS1, target=3, without=True) as d:
        assert step(d, 1) == "round2" and step(d, 2) == "round3"
        election, his = d.election(), set(d.client(3).role.state.items)
        refused = set()
        for c in d.clients:
            try:
                c.send("sums")
            except ParameterError as err:
                assert "must be between m_j - (|R1| - |R2|) = " in str(err) and " - 0 and m_j" in str(err)
                refused.add(c.user)
        assert refused == {h for j in his for h in election.helpers[j]}
        assert d.close(3) == "failed" and "must be a sum from one of its helpers" in d.row().outcome


def test_s2_attests_one_election_a_task_and_opens_sums_only_under_it(sqlite_dbs):
    """A fourth review's attack: S2 checked only the rules of the election S1 showed it as round 3 closed, so S1
    could show another (one helper of the ballast item swapped for a helper of another item who did post), which
    passed S2's count of the items' sums, and have T's isolated sum opened; or have two elections attested and show
    each to other users. S2 now keeps the one election it attests: another is refused (409 ``election_differs``),
    it opens sums only under it (409 ``not_attested``), and a hand-over with another fails the task."""
    with deploy(sqlite_dbs) as d:
        assert step(d, 1) == "round2"
        second_id, auth = d.task.second_task_id, f"Bearer {d.row().relay_token}"
        election = d.election()
        # one helper of item j, who helps another item too (so the hand-over's own rules still hold), swapped out
        j, gone = next((k, g) for k, h in enumerate(election.helpers) if set(election.senders) - set(h)
                       for g in h if len(election.by_helper[g]) > 1)
        outsider = min(set(election.senders) - set(election.helpers[j]))
        swapped = tuple(sorted({*election.helpers[j], outsider} - {gone}))
        other = dataclasses.replace(election, helpers=(*election.helpers[:j], swapped, *election.helpers[j + 1:]))
        body = json.dumps({"election": other.to_dict()}).encode()
        assert refusal(d.second.attest, second_id, auth, body) == (409, "election_differs")
        assert d.second.attest(second_id, auth, json.dumps({"election": election.to_dict()}).encode())  # the same
        assert refusal(d.second.open_sums, second_id, auth, body) == (409, "not_attested")
        for r in (2, 3, 4):
            step(d, r)
        assert d.state() == "handover"
        honest = d.first.handover(d.task_id)
        lying = dataclasses.replace(honest, helpers=other.helpers)
        with pytest.raises(Refused, match="handover.election must be the election S2 attested for this task"):
            d.second.receive(second_id, auth, json.dumps(lying.to_dict()).encode())
