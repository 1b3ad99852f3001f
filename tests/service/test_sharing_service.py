"""The sharing server (service/sharing/server.py) and its users' SDK: the rounds end to end with dropouts, exact on
SQLite and PostgreSQL, a survivor who vanishes in round 3 included; bad input refused 4xx with nothing stored and
counted; deadlines; fewer revealers than the threshold; kill -9 of the server in rounds 1 and 2 with nothing
lost."""

import json
import os
import secrets
from base64 import b64encode

import numpy as np
import pytest
from fastapi.testclient import TestClient

from privagg.protocols import sampling_calibration as sc
from privagg.protocols.roles import decode_inbox
from privagg.core import identity
from privagg.protocols.sharing_messages import (ADVERTISE, COMMITMENTS, COMPLAINTS, HEADER, MAGIC, MASKED_SUM, PAIR_KEY,
                                                REVEAL, SERVER, SIGNATURE, VERSION, Revealed, decode, encode,
                                                expected_traffic)
from privagg.protocols.sharing_parties import SIGNED_LISTS, statement, survivors_parameters
from privagg.protocols.sharing_server import PROTOCOL, ROUNDS
from privagg.service.round_tasks import KEM, relay_info, release_delta
from privagg.service.sharing.server import SharingService, create_app
from privagg.service.sharing.client import SharingClient
from privagg.service.round_demo import dropout_plan, traffic
from privagg.service.sharing.demo import SharingDeployment, run_rounds
from privagg.service.storage import connect, relayed_messages, round_messages, roster as storage_roster
from privagg.service.tasks import _public_key, _suite
from service_deployment import count, enrollment, organised, route_sdk_to, signed

N, DOMAIN = 12, 3
CODES = np.arange(N) % DOMAIN


@pytest.fixture(params=["sqlite", "postgresql"])
def db(request, tmp_path):
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path}/sharing.db"
    return request.getfixturevalue("postgres_databases")()


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def server(db, monkeypatch):
    """The service in process (a settable clock, no ticker) behind a TestClient that the SDK's requests go to."""
    clock = Clock()
    service = SharingService(connect(db, "sharing"), clock=clock)
    http = TestClient(create_app(service, tick=None))

    route_sdk_to(http, monkeypatch)
    yield service, http, clock
    http.close()
    service.engine.dispose()


def test_a_round_is_closed_from_another_host_only_with_the_operator_token(server):
    """A reviewer's finding: with no operator token set, anyone who reached the port could close a round (failing
    the task). Such a service now closes rounds for its own host only; with a token, for whoever shows it."""
    service = server[0]
    task, _ = enrolled(service, dpdg())
    path = f"/tasks/{task.task_id}/close-round/1"
    for app, headers, status in ((create_app(service, tick=None), {}, 403),
                                 (create_app(service, tick=None, operator_token="o" * 32), {}, 401),
                                 (create_app(service, tick=None, operator_token="o" * 32),
                                  {"authorization": "Bearer " + "o" * 32}, 200)):
        answer = TestClient(app, client=("203.0.113.9", 50000)).post(path, headers=headers)
        assert answer.status_code == status, answer.text
    assert service.state(task.task_id)["state"] != "round1"  # closed by the operator who showed the token


def test_closing_a_round_not_yet_open_is_refused_and_one_closed_before_says_its_state(server):
    """A reviewer's finding: close-round/3 while round 1 was open answered 200 and closed nothing. Now 409 naming
    the task's state; round 1, the open one, closes; closing it again answers the state it left."""
    service = server[0]
    task, _ = enrolled(service, dpdg())
    http = TestClient(create_app(service, tick=None, operator_token="o" * 32),
                      headers={"authorization": "Bearer " + "o" * 32})
    answer = http.post(f"/tasks/{task.task_id}/close-round/3")
    assert answer.status_code == 409 and answer.json()["error"] == "not_open", answer.text
    assert "round 3 is not open: the task is round1" in answer.json()["detail"]
    assert service.state(task.task_id)["state"] == "round1"
    closed = http.post(f"/tasks/{task.task_id}/close-round/1")
    assert closed.status_code == 200 and closed.json()["state"] != "round1"
    again = http.post(f"/tasks/{task.task_id}/close-round/1")
    assert again.status_code == 200 and again.json()["state"] == closed.json()["state"]


def dpdg(n=N):
    return sc.calibrate_dpdg(1.0, 1e-3, n, DOMAIN)


def enrolled(service, parameters, min_survivors=8, round_seconds=60.0):
    """A task its organisation signed, its users enrolled and its roster signed: round 1 is open."""
    task = service.create_task(parameters, round_seconds, min_survivors)
    users = organised(service, task, SharingClient, "http://sharing", parameters.n_users)[0]
    return task, users


def field_sum(p, clients) -> np.ndarray:
    """The field sum of the clients' vectors."""
    total = np.zeros(p.domain_size, dtype=np.uint64)
    for client in clients:
        total = p.field.add(total, client.role.state.vector)
    return total


def refused(http, path, body, status, reason):
    answer = http.post(path, content=json.dumps(body), headers={"content-type": "application/json"})
    assert (answer.status_code, answer.json()["error"]) == (status, reason), answer.text
    return answer.json()["detail"]


# who vanishes before which round: user 2 before round 1, 4 before the check, 5 before his masked sum, 8 before
# signing the lists and 9 before revealing
VANISH = {"advertise": {2}, "check": {4}, "masked_sum": {5}, "consistency": {8}, "reveal": {9}}


def send_rounds(service, task, users, clock, vanish=VANISH, codes=CODES):
    """Every round, each user sending but those who vanished before it; each round closed at its deadline."""
    gone = set()
    for number, round_ in enumerate(ROUNDS, 1):
        gone |= vanish.get(round_.name, set())
        for user in users:
            if user.user not in gone:
                user.send(round_.name, int(codes[user.user]) if round_.value else None)
        clock.now += 61
        service.advance(task.task_id)
    return gone


@pytest.mark.parametrize("protocol", ["dpds", "dpdg"])
def test_the_rounds_release_the_survivors_sum_exactly(server, protocol, monkeypatch):
    """Users vanish before each round: the release is over those whose masked sums arrived (9), at round 5's
    deadline (t = 7 of them revealed). Each user who stayed to the end sent and received, kind by kind,
    expected_traffic's count. The server checks each revealed share against its commitment once (the release
    reuses the reveal round's close's checks: twice before)."""
    from privagg.protocols import sharing_server

    checks, check = [], sharing_server.packed_commitment
    monkeypatch.setattr(sharing_server, "packed_commitment", lambda *args: checks.append(1) or check(*args))
    service, _, clock = server
    p = sc.calibrate_dpds(1.0, 1e-3, N, DOMAIN, min_count_fraction=0.25) if protocol == "dpds" else dpdg()
    task, users = enrolled(service, p)
    assert task.threshold == 7
    send_rounds(service, task, users, clock)
    report = service.result(task.task_id)
    survivors = [u for u in users if u.user not in (2, 4, 5)]
    total = field_sum(p, survivors)
    estimates = {e["item"]: e["estimate"] for e in report["estimates"]}
    expected = survivors_parameters(p, 9).estimate(total)
    assert [estimates[j] for j in range(DOMAIN)] == pytest.approx(expected.tolist(), abs=1e-9)
    assert report["dropouts"] == {"enrolled": N, "round1_senders": 10, "survivors": 9, "min_survivors": 8,
                                  "complaints": [], "excluded": [], "blamed": [], "inconsistent": []}
    assert report["privacy"]["private"] and "9 users who took part" in " ".join(report["privacy"]["caveats"])
    # the delta task create stated for the release (its worst case, at min_survivors) bounds the one it states
    assert report["privacy"]["delta"] == pytest.approx(release_delta(p, 9), rel=1e-12)
    assert release_delta(p, 9) <= release_delta(p, 8)
    sent, received = expected_traffic(p, 11, 10, 8)
    for user in users:
        if user.user not in (2, 4, 5, 8, 9):
            assert traffic([user], "sent") == sent and traffic([user], "received") == received
    assert len(checks) == sum(u.traffic.get(("sent", "revealed shares"), [0, 0])[1] for u in users) == 7 * 10


def test_bad_input_is_refused_with_nothing_stored_and_counted(server):
    service, http, clock = server
    p = dpdg()
    task, users = enrolled(service, p)
    tid, me = task.task_id, users[0]
    auth = {"user": me.user, "secret": me.secret}
    key, plain = me.role.advertise(1)
    keys = {k: public for k, (_, public) in me.roster().users.items()}
    sealed = {k: b64encode(_suite(KEM).encrypt(m, _public_key(KEM, keys[k]), info=relay_info(
        ROUNDS[0], tid, me.user, k))).decode() for k, m in plain.items()}
    shares = signed(me, 1, {"message": b64encode(key).decode(), "backups": [{"recipient": k, "sealed": v} for k, v in
                                                                            sealed.items()]}, "backups")["backups"]
    good, path = signed(me, 1, {"message": b64encode(key).decode()}), f"/tasks/{tid}/round1"
    other = me.role.__class__(p, me.user, task.min_survivors, rng=5).advertise(1).message  # other commitments
    unbound = signed(me, 1, {"message": b64encode(other).decode(), "backups": [
        {"recipient": k, "sealed": v} for k, v in sealed.items()]}, "backups")["backups"]
    assert "backups[0].signature must be user 0's" in refused(http, path, {
        **good, "backups": unbound}, 403, "bad_signature")  # each backup signed with his commitments to its holder
    refused(http, path, {**good, "backups": shares[:-1]}, 400, "malformed")
    refused(http, path, {**auth, "backups": shares}, 400, "malformed")
    refused(http, path, {**good, "backups": shares[:-1] + [{"recipient": me.user, "sealed": shares[0]["sealed"]}]},
            400, "bad_recipient")
    refused(http, path, {**good, "backups": shares[:-1] + [{"recipient": N, "sealed": shares[0]["sealed"]}]}, 400,
            "bad_recipient")
    refused(http, path, {**good, "backups": shares[:-1] + [dict(shares[0])]}, 400, "bad_recipient")
    short = [dict(s) for s in shares]
    short[3]["sealed"] = b64encode(b"x" * 40).decode()
    assert f"of {task.sealed_size} bytes, got 40 bytes" in refused(http, path, {**good, "backups": short}, 400,
                                                                   "malformed")
    few = encode(p, COMMITMENTS, me.user, SERVER, key[HEADER.size:])[:-64]  # commitments to n - 1 users
    assert "n = 12 pairs of commitments" in refused(http, path, signed(me, 1, {"message": b64encode(few).decode(),
                                                                               "backups": shares}), 400, "bad_message")
    theirs = encode(p, COMMITMENTS, 1, SERVER, decode(p, key, (COMMITMENTS,)).payload)  # named as another user's
    refused(http, path, signed(me, 1, {"message": b64encode(theirs).decode(), "backups": shares}), 400,
            "bad_message")
    refused(http, path, {**good, "secret": "guess", "backups": shares}, 403, "bad_secret")
    refused(http, path, {**good, "user": N, "backups": shares}, 400, "malformed")
    refused(http, f"/tasks/{tid}/round2", {**auth, "message": "AAAA"}, 409, "round_closed")
    for number in (0, 7):  # DPDG has rounds 1-6
        assert "one of 1..6, got" in refused(http, f"/tasks/{tid}/round{number}", good, 404, "unknown_round")
    for number in ("x", "1x", "01234", "١"):  # (an Arabic-Indic one: str.isdigit's, not int()'s concern here)
        assert "a round's number" in refused(http, f"/tasks/{tid}/round{number}", good, 404, "unknown_round")
    answer = http.get(f"/tasks/{tid}/round1")
    assert answer.status_code == 405 and answer.json()["error"] == "method_not_allowed"
    assert count(service, relayed_messages, tid) == 0 and count(service, round_messages, tid) == 0
    assert http.post(path, content=json.dumps({**good, "backups": shares}),
                     headers={"content-type": "application/json"}).status_code == 201
    refused(http, path, {**good, "backups": shares}, 409, "already_sent")
    assert count(service, relayed_messages, tid) == N - 1 and count(service, round_messages, tid) == 1
    refused(http, "/tasks/" + "ab" * 16 + "/round1", {**good, "backups": shares}, 404, "unknown_task")
    clock.now += 61
    refused(http, path, {**good, "user": 1, "secret": users[1].secret, "backups": shares}, 409,
            "round_closed")  # late
    refused(http, path, {**good, "backups": shares}, 409, "already_sent")  # a retry of what arrived: said so
    # round 1 closed at its deadline with one sender: below the minimum, the task failed and releases nothing
    answer = http.get(f"/tasks/{tid}/result")
    assert answer.status_code == 409 and "fewer than the task's minimum of 8" in answer.json()["detail"]
    metrics = http.get("/metrics").text
    for reason in ("malformed", "bad_recipient", "bad_message", "bad_secret", "round_closed", "already_sent",
                   "unknown_task"):
        assert f'privagg_sharing_refused_total{{reason="{reason}"}}' in metrics


def test_binary_bodies_are_checked_field_by_field_and_answered_in_kind(server):
    """The round routes' binary bodies (service/round_wire.py), as the SDK sends them: truncated, with bytes after
    them, of another version, of a wrong length (a sealed backup one byte short) or type (a backup's bytes as text,
    a float, nil or a boolean; a recipient nil)
    refused 400 naming the field, of another media type 415, nothing stored; a good one stored; an inbox asked in
    binary answered in binary, its relayed messages, signatures and keys as bytes."""
    from privagg.service import round_wire

    service, http, clock = server
    p = dpdg()
    task, users = enrolled(service, p)
    tid, me, path = task.task_id, users[0], f"/tasks/{task.task_id}/round1"
    key, plain = me.role.advertise(1)
    keys = me.roster().users
    backups = []
    for k, m in plain.items():
        sealed = _suite(KEM).encrypt(m, _public_key(KEM, keys[k][1]), info=relay_info(ROUNDS[0], tid, me.user, k))
        bound = PROTOCOL.bound(p, me.roster().graph_seed, me.user, k, key)  # his commitments to k's shares
        backups.append({"recipient": k, "sealed": sealed, "signature": me._sign(1, k, sealed + bound)})
    good = {**me._auth(), "message": key, "signature": me._sign(1, None, key), "backups": backups}
    raw = round_wire.encode(good)

    def post(body: bytes, media_type: str = round_wire.MEDIA_TYPE) -> tuple[int, str, str]:
        answer = http.post(path, content=body, headers={"content-type": media_type})
        return answer.status_code, answer.json().get("error"), answer.json().get("detail", "")

    status, error, detail = post(raw[:-7])
    assert (status, error) == (400, "malformed") and "round 1 must be one MessagePack map" in detail and \
        "got a truncated body" in detail
    assert post(raw + b"\0")[:2] == (400, "malformed")
    assert "version 1 of privagg's round bodies" in post(raw[:3] + b"\x02" + raw[4:])[2]
    short = [dict(e) for e in backups]
    short[3]["sealed"] = short[3]["sealed"][:-1]
    status, error, detail = post(round_wire.encode({**good, "backups": short}))
    assert (status, error) == (400, "malformed") and f"backups[3].sealed must be bytes (MessagePack's bin) of " \
        f"{task.sealed_size} bytes, got {task.sealed_size - 1} bytes" in detail
    # MessagePack's nil, booleans and floats refused as JSON's are; and text, base64 or not: a binary body's bytes
    # are bin (the same bytes as base64 text were taken before)
    for wrong in ("text", 1.5, None, True, b64encode(backups[3]["sealed"]).decode()):
        short[3]["sealed"] = wrong
        assert "backups[3].sealed must be bytes (MessagePack's bin)" in post(round_wire.encode(
            {**good, "backups": short}))[2]
    text_signature = {**good, "signature": b64encode(good["signature"]).decode()}
    assert "signature must be bytes (MessagePack's bin) of 64 bytes, got '" in post(round_wire.encode(
        text_signature))[2]
    assert post(round_wire.encode({**good, "backups": [{**backups[0], "recipient": None}]}))[:2] == (400,
                                                                                                 "bad_recipient")
    assert post(raw, "application/octet-stream")[:2] == (415, "unsupported_media_type")
    assert count(service, relayed_messages, tid) == 0 and count(service, round_messages, tid) == 0
    assert http.post(path, content=raw, headers={"content-type": round_wire.MEDIA_TYPE}).status_code == 201
    assert count(service, relayed_messages, tid) == N - 1 and count(service, round_messages, tid) == 1
    for user in users[1:]:
        user.send("advertise", 0)
    assert service.advance(tid) == "round2"
    answer = http.post(f"/tasks/{tid}/inbox", content=round_wire.encode({**users[1]._auth(), "round": 2}),
                       headers={"content-type": round_wire.MEDIA_TYPE})
    assert answer.headers["content-type"] == round_wire.MEDIA_TYPE
    inbox = round_wire.decode(answer.content)
    mine = next(e for e in inbox["backups"] if e["sender"] == me.user)
    assert (mine["sealed"], mine["signature"]) == (backups[0]["sealed"], backups[0]["signature"])
    as_json = json.loads(http.post(f"/tasks/{tid}/inbox", content=json.dumps(users[1]._auth()),
                                   headers={"content-type": "application/json"}).content)
    assert as_json["backups"][0] == {k: v if isinstance(v, int) else b64encode(v).decode()
                                     for k, v in inbox["backups"][0].items()}
    assert decode_inbox(as_json["inbox"]) == inbox["inbox"]


def test_round_messages_are_checked_and_stored_once(server):
    service, http, clock = server
    p = dpdg()
    task, users = enrolled(service, p)
    for user in users[:-1]:
        user.send("advertise", 0)
    clock.now += 61
    service.advance(task.task_id)
    tid, path = task.task_id, f"/tasks/{task.task_id}/round2"
    last, me = users[-1], users[0]
    refused(http, path, signed(last, 2, {"message": "AAAA"}), 409, "not_expected")
    low_order = encode(p, ADVERTISE, me.user, SERVER, bytes(64)) + encode(p, COMPLAINTS, me.user, SERVER, [])
    assert "low order" in refused(http, path, signed(me, 2, {"message": b64encode(low_order).decode()}), 400,
                                  "bad_message")  # a key whose agreed secrets are all zero
    himself = encode(p, ADVERTISE, 1, SERVER, bytes(64))[:HEADER.size] + low_order[HEADER.size:]
    refused(http, path, signed(me, 2, {"message": b64encode(himself).decode()}), 400, "bad_message")
    for user in users[:-1]:
        user.send("check")
    assert service.advance(tid) == "round3"
    path = f"/tasks/{tid}/round3"
    truncated = HEADER.pack(MAGIC, VERSION, MASKED_SUM, me.user, SERVER, DOMAIN) + b"\0"
    detail = refused(http, path, signed(me, 3, {"message": b64encode(truncated).decode()}), 400, "bad_message")
    assert "field elements" in detail
    me.send("masked_sum")
    another = encode(p, MASKED_SUM, me.user, SERVER, np.zeros(DOMAIN, dtype=np.uint64))
    refused(http, path, signed(me, 3, {"message": b64encode(another).decode()}), 409, "already_sent")
    refused(http, f"/tasks/{tid}/inbox", {"user": last.user, "secret": last.secret}, 409, "not_expected")
    for user in users[1:-1]:
        user.send("masked_sum")
    assert service.advance(tid) == "round4"
    # a signature of other lists than those published, or by another key, is refused
    lists = statement(range(11), range(10), me.role.state.keys)
    other = encode(p, SIGNATURE, me.user, SERVER, identity.sign(me.identity, SIGNED_LISTS, lists))
    assert "identity key, of the lists published" in refused(
        http, f"/tasks/{tid}/round4", signed(me, 4, {"message": b64encode(other).decode()}), 400, "bad_message")
    for user in users[:-1]:
        user.send("consistency")
    assert service.advance(tid) == "round5"
    # a reveal whose entries give away a survivor's pair key (what an honest user never sends) is refused
    answer = json.loads(http.post(f"/tasks/{tid}/inbox", content=json.dumps(me._auth()),
                                  headers={"content-type": "application/json"}).content)
    inbox = decode_inbox(answer["inbox"])
    assert answer["round"] == 5 and answer["name"] == "reveal"
    assert set(inbox) == {"senders", "survivors", "signatures", "identities"}
    honest = decode(p, me.role.reveal(**inbox).message, (REVEAL,)).payload
    secrets_ = honest.secrets.copy()
    secrets_[2] = PAIR_KEY
    greedy = encode(p, REVEAL, me.user, SERVER, Revealed(honest.owners, secrets_, honest.shares))
    detail = refused(http, f"/tasks/{tid}/round5", signed(me, 5, {"message": b64encode(greedy).decode()}), 400,
                     "bad_message")
    assert "each survivor's mask seed" in detail
    assert count(service, round_messages, tid) == 4 * 11  # rounds 1-4's messages only


def test_fewer_revealers_than_the_threshold_fail_the_task_and_nothing_is_released(server):
    service, http, clock = server
    p = dpdg()
    task, users = enrolled(service, p)
    for round_ in ROUNDS[:4]:
        for user in users:
            user.send(round_.name, 2 if round_.value else None)
    for user in users[:6]:  # t = 7
        user.send("reveal")
    assert service.advance(task.task_id) == "round5"
    clock.now += 61
    assert service.advance(task.task_id) == "failed"
    answer = http.get(f"/tasks/{task.task_id}/result")
    assert answer.status_code == 409 and answer.json()["error"] == "failed"
    assert "6 of the 12 users round 5 (reveal) expected answered by its close, fewer than the backups' threshold " \
        "t = 7" in answer.json()["detail"]


def test_enrollment_checks_tokens_and_keys(server):
    """An enrollment shows the token's authentication half (the server keeps its hash, never the token), the user's
    keys and their binding; a retry gets the same index, other keys on a spent token are refused, and the rounds
    open once the organisation signed the full roster."""
    from privagg.core import identity
    from privagg.service.organisation import Organisation

    service, http, _ = server
    task = service.create_task(dpdg(3), 60.0, 2)
    organisation = Organisation.generate()
    organisation.sign_task(service, task)
    tokens = service.issue_tokens(task.task_id, 4)
    tid = task.task_id

    def b64(raw: bytes) -> str:
        return b64encode(raw).decode()

    path = f"/tasks/{tid}/enroll"
    refused(http, path, enrollment(tid, "nope", b"k" * 32), 403, "bad_token")
    refused(http, path, {**enrollment(tid, tokens[0], b"k" * 32), "token": tokens[0]}, 403, "bad_token")  # the whole
    refused(http, path, {**enrollment(tid, tokens[0], b"k" * 32), "public_key": b64(b"k" * 31)}, 400, "malformed")
    refused(http, path, {"token": enrollment(tid, tokens[0], b"k" * 32)["token"], "public_key": b64(b"k" * 32)}, 400,
            "malformed")  # no identity key nor binding: an SDK of before
    assert http.get(f"/tasks/{tid}/roster").status_code == 409  # not signed yet
    body = enrollment(tid, tokens[0], b"k" * 32)
    first = http.post(path, content=json.dumps(body), headers={"content-type": "application/json"}).json()
    inbox = f"/tasks/{tid}/inbox"
    refused(http, inbox, first, 409, "round_closed")  # authenticated (and his secret kept), no round open yet
    again = http.post(path, content=json.dumps(body), headers={"content-type": "application/json"}).json()
    assert first["user"] == again["user"] == 0 and first["secret"] != again["secret"]  # a retry: same index
    refused(http, inbox, first, 403, "bad_secret")  # the retry's secret replaced the one kept
    refused(http, inbox, again, 409, "round_closed")
    refused(http, path, enrollment(tid, tokens[0], b"j" * 32), 409, "token_spent")
    refused(http, path, {**body, "identity_key": b64(identity.public_key(identity.generate()))}, 409, "token_spent")
    for weak in (bytes([1]) + bytes(31), bytes(31) + bytes([0x80]), b"i" * 32):  # small order (1, 4); off the curve
        refused(http, path, enrollment(tid, tokens[1], b"k" * 32, weak), 400, "malformed")
    for token in tokens[1:3]:
        http.post(path, content=json.dumps(enrollment(tid, token, secrets.token_bytes(32))),
                  headers={"content-type": "application/json"})
    refused(http, path, enrollment(tid, tokens[3], b"m" * 32), 409, "roster_full")
    assert service.state(tid)["state"] == "enrolling"  # full, not signed: no round opens
    signed_roster, left_out = organisation.sign_roster(service, tid, tokens)
    assert left_out == {} and sorted(signed_roster.users) == [0, 1, 2] and service.state(tid)["state"] == "round1"
    assert json.loads(http.get(f"/tasks/{tid}/roster").content) == signed_roster.to_dict()


def test_kill_9_of_the_server_in_rounds_1_and_2_loses_nothing(tmp_path):
    """The server killed and restarted after rounds 1 and 2, the users' devices in two worker processes
    (service/round_demo.py, as at n >= 2,000 on two cores): the release is the survivors' field sum, the clients come
    back in user order with their roles' state, each user's CPU is counted (every enrolled user's calls took some),
    and an error in a worker is raised here as itself, the worker going on; a worker killed is DevicesLost, naming it,
    and the other ends."""
    from privagg.errors import ParameterError
    from privagg.service.calls import SubmitError
    from privagg.service.organisation import Organisation
    from privagg.service.round_demo import Devices, DevicesLost, processes_for
    from privagg.service.sharing.client import SharingClient

    p = sc.calibrate_dpds(1.0, 1e-3, 16, 2, min_count_fraction=0.25)
    codes = np.arange(16) % 2
    db = f"sqlite:///{tmp_path}/sharing.db"
    with SharingDeployment(db, tmp_path / "log") as dep:
        organisation = Organisation.generate()
        task, tokens, sign_roster = dep.organised(organisation, p, 300.0, 12, 16)

        def restart(_round: int) -> None:
            dep.kill()
            dep.start()

        run = run_rounds(dep.url, task.task_id, codes, tokens, dropout_plan(16, 0.15, (1, 2, 3), seed=3),
                         organisation.public_key, sign_roster, progress=lambda _text: None, between=restart,
                         processes=2)
        report = run["clients"][0]._call("result")
        with Devices([SharingClient] * 3, dep.url, task.task_id, organisation.public_key, processes=2) as devices:
            with pytest.raises(ParameterError, match="^token must be an enrollment token") as refused_here:
                devices.call("enroll", [(0, ("",))])
            assert refused_here.value.field == "token"
            with pytest.raises(SubmitError) as unknown:
                devices.call("enroll", [(2, ("not one of the task's tokens",))])
            assert unknown.value.status == 403
            devices.workers[1][0].kill()  # SIGKILL, as the kernel's out-of-memory killer would
            with pytest.raises(DevicesLost, match=r"^the worker process of users 1 \(pid \d+\) ended "
                               r"\(killed by signal 9\) before it answered"):
                devices.call("enroll", [(1, ("",)), (2, ("",))])
        assert all(worker.poll() is not None for worker, _ in devices.workers)  # the other ended with the demo
        with pytest.raises(ParameterError, match=r"^processes must be an integer in \[1, 64\], got 0"):
            Devices([SharingClient], dep.url, task.task_id, organisation.public_key, processes=0)
    assert [c.user for c in run["clients"]] == run["index"] and all(c.role is not None for c in run["clients"])
    assert all(cpu > 0 for cpu in run["user_cpu"]) and run["cpu"]["round1"] > 0
    survivors = [c for c in run["clients"] if c.user in run["survivors"]]
    total = field_sum(p, survivors)
    estimates = [e["estimate"] for e in sorted(report["estimates"], key=lambda e: e["item"])]
    assert estimates == pytest.approx(survivors_parameters(p, len(survivors)).estimate(total).tolist())
    assert report["dropouts"]["survivors"] == len(survivors) < 16
    assert processes_for(999) == 1 and processes_for(10_000) == min(os.cpu_count(), 10)


def test_the_users_sdks_import_no_server():
    """A device runs the SDK: it loads the task types from service/round_tasks.py, never FastAPI or SQLAlchemy."""
    import subprocess
    import sys

    code = ("import sys, privagg.service.sharing.client, privagg.service.two_servers.client; print(sorted(m for m in "
            "('fastapi', 'sqlalchemy', 'starlette', 'uvicorn', 'prometheus_client', 'alembic') if m in sys.modules))")
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip() == "[]"


def test_a_task_too_large_to_serve_is_refused_naming_its_cost(tmp_path):
    """A newcomer's dpds task for 50,000 users: refused at creation with what it would cost, before any table."""
    from typer.testing import CliRunner

    from privagg.cli import app

    p = sc.calibrate_dpds(1.0, 1e-6, 50_000, 10, min_count_fraction=0.05)
    (tmp_path / "p.json").write_text(json.dumps(p.to_dict()))
    assert CliRunner().invoke(app, ["organisation", "keygen", "--output", str(tmp_path / "org.key")]).exit_code == 0
    out = CliRunner().invoke(app, ["task", "create", "--params", str(tmp_path / "p.json"), "--db",
                                   f"sqlite:///{tmp_path}/sharing.db", "--min-survivors", "40000",
                                   "--organisation-key", str(tmp_path / "org.key")])
    assert out.exit_code == 2 and "n_users must be at most 10,000 for a served DPDS or DPDG task" in out.output
    assert "2,499,950,000 sealed backups" in out.output


def test_task_create_states_the_delta_its_release_may_claim_at_min_survivors(tmp_path):
    """After dropouts the release's delta is recomputed for its survivors, up to p' (docs/privacy.md, "Dropouts in
    DPDS and DPDG"): task create says the worst, at --min-survivors, in its output and its JSON, and warns (one
    line) when it exceeds the target, naming the --min-survivors that keeps it."""
    from typer.testing import CliRunner

    from privagg.cli import app
    from privagg.protocols.registry import calibrate

    assert CliRunner().invoke(app, ["organisation", "keygen", "--output", str(tmp_path / "org.key")]).exit_code == 0

    def create(parameters, *args: str):
        (tmp_path / "p.json").write_text(json.dumps(parameters.to_dict()))
        out = CliRunner().invoke(app, ["task", "create", "--params", str(tmp_path / "p.json"), "--db",
                                       f"sqlite:///{tmp_path}/sharing.db", "--organisation-key",
                                       str(tmp_path / "org.key"), *args])
        assert out.exit_code == 0, out.output
        return out, [line for line in out.stderr.splitlines() if line.startswith("warning:")]

    dpds = calibrate("dpds", epsilon=1.0, delta=1e-6, n_users=300, domain_size=10, min_count_fraction=0.03)
    worst = survivors_parameters(dpds, 295).delta_at(1.0)  # what the release over 295 survivors states
    assert worst == pytest.approx(5.3e-4, rel=0.01)  # docs/privacy.md's figure: 9 holders, 5 dropouts
    out, warnings = create(dpds, "--min-survivors", "295")
    assert f"its release states delta {worst:.3g} at epsilon 1 over as few as 295 survivors (the worst case, 5 " \
           "dropouts); the target delta is 1e-06" in out.stdout
    assert warnings == [f"warning: a release over 295 survivors would state delta {worst:.3g}, over the task's target "
                        "1e-06 (its 5 dropouts leave fewer users, and holders of a category, to hide among): only "
                        "--min-survivors 300, no dropout, keeps it (or calibrate for a smaller delta to leave room "
                        "for dropouts)"]
    assert all(release_delta(dpds, s) >= release_delta(dpds, s + 1) for s in range(151, 300))  # falls as s grows
    task = json.loads(create(dpds, "--min-survivors", "295", "--json")[0].stdout)
    assert task["min_survivors"] == 295 and task["delta_at_min_survivors"] == pytest.approx(worst, rel=1e-12)
    assert task["min_survivors_for_target_delta"] == 300
    # classic calibration leaves room: 191 survivors keep the target, 190 do not
    dpdg = calibrate("dpdg", epsilon=1.0, delta=1e-6, n_users=300, domain_size=10, calibration="classic")
    assert release_delta(dpdg, 191) <= 1e-6 < release_delta(dpdg, 190)
    assert all(release_delta(dpdg, s) >= release_delta(dpdg, s + 1) for s in range(151, 300))  # falls as s grows
    out, warnings = create(dpdg, "--min-survivors", "151")
    assert len(warnings) == 1 and warnings[0].endswith("(its 149 dropouts leave less noise from honest users): "
                                                       "--min-survivors 191 or more keeps the target")
    task = json.loads(create(dpdg, "--min-survivors", "191", "--json")[0].stdout)
    assert task["min_survivors_for_target_delta"] == 191 and task["delta_at_min_survivors"] <= 1e-6
    out, warnings = create(dpdg)  # the default: every user to the end
    assert "(no dropout allowed); the target delta is 1e-06" in out.stdout and warnings == []


def test_an_enrollment_flood_spends_nothing_and_leaves_the_roster_open(server):
    """300 enrollments with made-up tokens, and 20 that replay one real token with other keys: all refused, the
    roster holds only the real one, and the other users still enroll."""
    from concurrent.futures import ThreadPoolExecutor

    service, http, _ = server
    task = service.create_task(dpdg(), 60.0, 8)
    users, organisation, tokens = organised(service, task, SharingClient, "http://sharing", N, enroll=False)
    tid, path = task.task_id, f"/tasks/{task.task_id}/enroll"

    def post(body):
        return http.post(path, content=json.dumps(body), headers={"content-type": "application/json"}).status_code

    first = post(enrollment(tid, tokens[0], b"k" * 32))
    with ThreadPoolExecutor(8) as pool:
        forged = list(pool.map(post, [enrollment(tid, secrets.token_urlsafe(24), b"f" * 32) for _ in range(300)]))
        replays = list(pool.map(post, [enrollment(tid, tokens[0], secrets.token_bytes(32)) for _ in range(20)]))
    assert first == 201 and set(forged) == {403} and set(replays) == {409}
    assert count(service, storage_roster, task.task_id) == 1
    for user, token in zip(users[1:], tokens[1:]):
        user.enroll(token)
    organisation.sign_roster(service, tid, tokens)
    assert service.state(task.task_id)["state"] == "round1"
