"""Keys no single server can swap (issue 46, first bullet): the attacks of a dishonest server (tests/service/
dishonest.py) through the real services and SDKs, each caught by the organisation's signatures (of the task, of the
roster) and the users' (of every message they post), and the honest path unchanged (the other service tests run
it with the organisation's steps).

The issue's "S1 reads every entry" (S1 serves its own key as every user's) now gets S1 no share at all: every
reporter refuses to seal to a key the signed roster does not list. A server that substitutes a DPDS pair key,
forges or replays a relayed message, serves a roster signed by another key or a task with another S2 key, or
swaps a user's keys at enrollment (it knows his token's authentication half, not its binding half) is refused by
the devices or left out by the organisation, naming what failed."""

import dataclasses
import json
import time
from base64 import b64decode, b64encode

import numpy as np
import pytest
import sqlalchemy as sa
from fastapi.testclient import TestClient

from service.dishonest import (EnrollmentSwapping, GarbageRelaying, KeySwappingFirst, PairKeySubstituting, RelayForging, RosterForging,
                       S2KeySwapping)
from privagg.core import identity
from privagg.errors import ParameterError
from privagg.protocols import sampling_calibration as sc
from privagg.service.calls import SubmitError
from privagg.service.keys import KeyEncryptionKey
from privagg.service.organisation import Organisation
from privagg.service.round_tasks import SignedRoster
from privagg.service.sharing.client import SharingClient
from privagg.service.sharing.server import SharingService, create_app
from privagg.service.storage import connect, relayed_messages, round_messages
from privagg.service.two_servers.client import TSSClient
from privagg.service.two_servers.servers import SecondService, create_first_app, create_tasks, s1_relayed
from privagg.service import round_wire, storage
from service_deployment import count, enrollment, in_process, organised, route_sdk_to, signed

N, DOMAIN, MIN = 12, 3, 8
TSS_USERS = 32


class Clock:
    def __init__(self) -> None:
        self.now = 1.8e9

    def __call__(self) -> float:
        return self.now


@pytest.fixture(params=["sqlite", "postgresql"])
def dbs(request, tmp_path) -> dict[str, str]:
    if request.param == "sqlite":
        return {role: f"sqlite:///{tmp_path}/{role}.db" for role in ("sharing", "s1", "s2")}
    make = request.getfixturevalue("postgres_databases")
    return {role: make() for role in ("sharing", "s1", "s2")}


@pytest.fixture
def sqlite_dbs(tmp_path) -> dict[str, str]:
    return {role: f"sqlite:///{tmp_path}/{role}.db" for role in ("sharing", "s1", "s2")}


@pytest.fixture
def serve(monkeypatch):
    """``serve(service, app)``: the SDK's requests go to ``app`` (the service's, in process); closed after."""
    opened, engines = [], []

    def start(service, app):
        http = TestClient(app)
        route_sdk_to(http, monkeypatch)
        opened.append(http)
        engines.append(service.engine)
        return http

    start.engines = engines
    yield start
    for http in opened:
        http.close()
    for engine in engines:
        engine.dispose()


def sharing(dbs, serve, kind=SharingService, clock=None, **attributes):
    service = kind(connect(dbs["sharing"], "sharing"), clock=clock or Clock())
    for name, value in attributes.items():
        setattr(service, name, value)
    return service, serve(service, create_app(service, tick=None))


def dpds():
    return sc.calibrate_dpds(1.0, 1e-3, N, DOMAIN, min_count_fraction=0.25)


def tss(dbs, serve, kind):
    second = SecondService(storage.connect(dbs["s2"], "s2"), kek=KeyEncryptionKey.generate())
    first = kind(storage.connect(dbs["s1"], "s1"), clock=Clock(), **in_process(second))
    serve.engines.append(second.engine)
    serve(first, create_first_app(first, tick=None))
    p = sc.calibrate_tss(1.0, 0.1, TSS_USERS, 4, min_count_fraction=0.2, report_fraction=0.5, honest_fraction=0.9,
                         sampling_probability=0.6)
    organisation = Organisation.generate()
    return first, create_tasks(first, second, p, "http://s2.invalid", 60.0, TSS_USERS - 6,
                               organisation_key=organisation.public_key), organisation


@pytest.mark.parametrize("where", ["roster", "inbox"])
def test_s1_serving_its_own_key_as_every_users_gets_no_share(dbs, serve, where):
    """The issue's attack: S1 puts its own X25519 key in place of every user's, in the roster it serves (the
    organisation's signature kept) or only in round 2's inboxes. Before, every reporter sealed his shares to S1
    (766 of 766 opened); now the devices check each key against the roster the organisation signed and refuse,
    naming the field: 0 shares are sealed to S1, and none stored."""
    first, task, organisation = tss(dbs, serve, KeySwappingFirst)
    first.where = where
    clients = organised(first, task, TSSClient, "http://s1", TSS_USERS, organisation)[0]
    if where == "roster":  # the roster he fetches at his first round does not carry the organisation's signature
        for c in clients:
            with pytest.raises(ParameterError, match="roster.signature must be a valid Ed25519 signature by the "
                                                     "organisation"):
                c.send("report", c.user % 4)
        assert first.state(task.task_id)["state"] == "round1"
    else:
        for c in clients:
            assert c.send("report", c.user % 4)
        assert first.state(task.task_id)["state"] == "round2"
        for c in clients:
            with pytest.raises(ParameterError, match="public_keys must be each recipient's X25519 key as the "
                                                     "organisation's signed roster lists it"):
                c.send("share")
    assert count(first, s1_relayed, task.task_id) == 0 and first.opened(task.task_id) == 0


def test_a_server_substituting_a_dpds_pair_key_is_refused(dbs, serve):
    """The sharing server shows round 3 its own pair key in user 1's place (his signature kept, as it cannot make
    his): every user refuses his masked sum, naming the key, and none is stored."""
    service, _ = sharing(dbs, serve, PairKeySubstituting)
    task = service.create_task(dpds(), 60.0, MIN)
    users = organised(service, task, SharingClient, "http://sharing", N)[0]
    for round_ in ("advertise", "check"):
        for user in users:
            user.send(round_, user.user % DOMAIN)
    assert service.state(task.task_id)["state"] == "round3"
    for user in users:
        with pytest.raises(ParameterError, match=r"inbox.keys\[1\] must be a valid Ed25519 signature by user 1"):
            user.send("masked_sum")
    with service.engine.connect() as c:
        assert c.execute(sa.select(sa.func.count()).select_from(round_messages).where(
            round_messages.c.round == 3)).scalar() == 0


def test_a_relayed_message_forged_by_the_server_is_refused(sqlite_dbs, serve):
    """The server relays, as user 1's backup, one of its own sealed to the recipient, with user 1's signature of
    the real one: the recipient refuses it, naming the message (and sends nothing in round 2)."""
    service, _ = sharing(sqlite_dbs, serve, RelayForging)
    task = service.create_task(dpds(), 60.0, MIN)
    users = organised(service, task, SharingClient, "http://sharing", N)[0]
    for user in users:
        user.send("advertise", user.user % DOMAIN)
    for user in users:
        if user.user != 1:
            with pytest.raises(ParameterError, match=r"backups\[1\]\.signature must be a valid Ed25519 signature "
                                                     "by user 1"):
                user.send("check")
    assert count(service, round_messages, task.task_id) == N


def test_what_is_no_relayed_message_is_refused_naming_it_never_a_traceback(sqlite_dbs, serve):
    """A server that relays garbage (no list, no entries, a bad base64, no keys): the device refuses it with a
    ParameterError naming the field, and sends nothing."""
    service, _ = sharing(sqlite_dbs, serve, GarbageRelaying)
    task = service.create_task(dpds(), 60.0, MIN)
    users = organised(service, task, SharingClient, "http://sharing", N)[0]
    service.case = len(GarbageRelaying.garbage)
    with pytest.raises(ParameterError, match="public_keys must be a list of his recipients' keys"):
        users[0].send("advertise", 0)  # refused before his role answers: he answers round 1 below
    service.case = 0
    for user in users:
        user.send("advertise", user.user % DOMAIN)
    for case, user in enumerate(users[:len(GarbageRelaying.garbage)]):
        service.case = case
        with pytest.raises(ParameterError, match=r"^backups"):
            user.send("check")
    assert count(service, round_messages, task.task_id) == N


def test_a_duly_signed_message_that_does_not_open_is_none_for_the_role_and_kept_as_proof(sqlite_dbs, serve):
    """User 1 posts, signed by himself, backups that are random bytes of the right size (the server cannot tell):
    his recipients' SDK hands their role None for his backup (the role blames him) and keeps the signed ciphertext,
    which verifies under his identity key in the signed roster: what a complaint shows."""
    import secrets

    service, http = sharing(sqlite_dbs, serve)
    task = service.create_task(dpds(), 60.0, MIN)
    users = organised(service, task, SharingClient, "http://sharing", N)[0]
    liar = users[1]
    key, _ = liar.role.advertise(1)
    junk = [{"recipient": k, "sealed": b64encode(secrets.token_bytes(task.sealed_size)).decode()}
            for k in range(N) if k != liar.user]
    answer = http.post(f"/tasks/{task.task_id}/round1", content=json.dumps(signed(
        liar, 1, {"message": b64encode(key).decode(), "backups": junk}, "backups")),
        headers={"content-type": "application/json"})
    assert answer.status_code == 201, answer.text
    for user in users:
        if user is not liar:
            user.send("advertise", user.user % DOMAIN)
    me = users[0]  # round 2 (check) delivers the backups
    inbox = round_wire.decode(http.post(f"/tasks/{task.task_id}/inbox", content=round_wire.encode(
        {"user": me.user, "secret": me.secret}), headers={"content-type": round_wire.MEDIA_TYPE}).content)
    opened = me._delivered(me.protocol.round("check"), inbox["backups"], inbox["inbox"])
    assert opened[liar.user] is None and all(v is not None for k, v in opened.items() if k != liar.user)
    signed_bytes, signature = me.unopened[(1, liar.user)]  # the sealed backup and his commitments to user 0's shares
    junk = next(e["sealed"] for e in inbox["backups"] if e["sender"] == liar.user)
    assert signed_bytes == junk + inbox["inbox"]["commitments"][liar.user]
    assert identity.verify(liar.identity_key, signature, b"privagg message " + task.task_id.encode() +
                           b" round 1 from user 1 to user 0", signed_bytes)


def test_a_signed_message_replayed_into_another_task_or_round_is_refused(sqlite_dbs, serve):
    """A user's signed messages bind the task, the round, the sender and the recipient: the same user (the same
    identity key) in two tasks; his round-1 answer of task A posted to task B, his backup to user 2 posted as his
    backup to user 3, and his round-1 message posted in round 2: each 403 ``bad_signature``, nothing stored. A
    backup of task A relayed in task B by the server is refused by its recipient."""
    service, http = sharing(sqlite_dbs, serve, RelayForging)
    tasks, users = [], []
    shared = identity.generate()
    for _ in range(2):
        task = service.create_task(dpds(), 60.0, MIN)
        clients, organisation, tokens = organised(service, task, SharingClient, "http://sharing", N, enroll=False)
        clients[1].identity, clients[1].identity_key = shared, identity.public_key(shared)  # one device, two tasks
        for client, token in zip(clients, tokens):
            client.enroll(token)
        organisation.sign_roster(service, task.task_id, tokens)
        tasks.append(task)
        users.append({c.user: c for c in clients})
    bodies = {}

    def capture(client):
        """Client ``client``'s round-1 body, as he posts it."""
        post = client._call

        def call(route, body=None, ok=(), binary=False):
            if route == "round1":
                bodies[(client.task.task_id, client.user)] = body
            return post(route, body, ok, binary)
        client._call = call

    for task, clients in zip(tasks, users):
        for client in clients.values():
            capture(client)
            if client.user != 1 or task is tasks[0]:
                client.send("advertise", client.user % DOMAIN)
    a, b = tasks[0].task_id, tasks[1].task_id
    me = users[1][1]
    replayed = {**bodies[(a, 1)], "secret": me.secret}  # as his SDK sent it: bytes, in a binary body
    path = f"/tasks/{b}/round1"

    def refused(path, body, as_json=False):  # (a binary body's bytes are bin; JSON's base64 text)
        answer = http.post(path, content=json.dumps(body) if as_json else round_wire.encode(body),
                           headers={"content-type": "application/json" if as_json else round_wire.MEDIA_TYPE})
        assert (answer.status_code, answer.json()["error"]) == (403, "bad_signature"), answer.text
        return answer.json()["detail"]

    assert refused(path, replayed).startswith("signature must be user 1's Ed25519 signature")
    mine = signed(me, 1, {"message": b64encode(replayed["message"]).decode(), "backups": [  # his own signatures in
        {"recipient": e["recipient"], "sealed": b64encode(e["sealed"]).decode()}  # task B, each backup's
        for e in replayed["backups"]]}, "backups")
    swapped = [dict(e) for e in mine["backups"]]
    swapped[1]["signature"], swapped[2]["signature"] = mine["backups"][2]["signature"], mine["backups"][1]["signature"]
    assert refused(path, {**mine, "backups": swapped}, as_json=True).startswith("backups[1].signature must be user 1's")
    assert count(service, round_messages, b) == N - 1 and count(service, relayed_messages, b) == (N - 1) * (N - 1)
    assert me.send("advertise", 1)
    round2 = signed(me, 2, {"message": b64encode(replayed["message"]).decode()})
    round2["signature"] = b64encode(replayed["signature"]).decode()  # his signature of that message, in round 1
    answer = http.post(f"/tasks/{b}/round2", content=json.dumps(round2), headers={"content-type": "application/json"})
    assert (answer.status_code, answer.json()["error"]) == (403, "bad_signature")
    # the server relays task A's backups from user 1 (signed by him, for task A) in task B
    service.replayed = {e["recipient"]: (e["sealed"], e["signature"]) for e in bodies[(a, 1)]["backups"]}
    with pytest.raises(ParameterError, match=r"backups\[1\]\.signature must be a valid Ed25519 signature by user 1"):
        users[1][0].send("check")


def test_a_roster_signed_by_another_key_is_refused(sqlite_dbs, serve):
    """The server serves the roster signed by a key of its own: every device refuses at its first round; the
    server itself takes no roster its task's organisation did not sign."""
    service, _ = sharing(sqlite_dbs, serve, RosterForging)
    task = service.create_task(dpds(), 60.0, MIN)
    users = organised(service, task, SharingClient, "http://sharing", N)[0]
    with pytest.raises(ParameterError, match="roster.signature must be a valid Ed25519 signature by the organisation"):
        users[0].send("advertise", 1)
    other = service.create_task(dpds(), 60.0, MIN)
    clients, organisation, tokens = organised(service, other, SharingClient, "http://sharing", N, enroll=False)
    for client, token in zip(clients, tokens):
        client.enroll(token)
    impostor = Organisation.generate()
    with pytest.raises(ParameterError, match="roster.signature must be a valid Ed25519 signature by the organisation"):
        impostor.sign_roster(service, other.task_id, tokens)
    with pytest.raises(ParameterError, match="organisation-key must be the organisation key that signed the task"):
        impostor.sign_task(service, other)
    assert service.state(other.task_id)["state"] == "enrolling"


def test_a_task_served_with_another_s2_key_is_refused(sqlite_dbs, serve):
    """S1 serves the task with its own key in place of S2's (which the users seal their sums to): the organisation
    signed the task with S2's, and the SDK refuses the task before enrolling."""
    first, task, organisation = tss(sqlite_dbs, serve, S2KeySwapping)
    organisation.sign_task(first, task)
    with pytest.raises(ParameterError, match="task.signature must be a valid Ed25519 signature by the organisation"):
        TSSClient.fetch("http://s1", task.task_id, organisation_key=organisation.public_key)
    with pytest.raises(ParameterError, match="task.signature must be a valid Ed25519 signature by the organisation"):
        TSSClient.fetch("http://s1", task.task_id, organisation_key=Organisation.generate().public_key)


def test_a_binding_forged_by_the_server_leaves_its_user_out(sqlite_dbs, serve):
    """The server sees each token's authentication half, never its binding half. It swaps user 2's keys for its own
    on their way to the roster (his binding kept), and enrolls a user of its own with another token's
    authentication half (a binding it made up): the organisation leaves both out, naming them; the victim's device
    refuses the roster without him; the others go on, the two counted as round-1 dropouts."""
    service, http = sharing(sqlite_dbs, serve, EnrollmentSwapping)
    task = service.create_task(dpds(), 60.0, MIN)
    users, organisation, tokens = organised(service, task, SharingClient, "http://sharing", N, enroll=False)
    service.victims = {identity.token_halves(tokens[2])[0]}
    for user, token in zip(users[:-1], tokens[:-1]):
        user.enroll(token)
    forged = enrollment(task.task_id, tokens[-1], b"s" * 32, binding=bytes(32))  # the server's own user
    assert http.post(f"/tasks/{task.task_id}/enroll", content=json.dumps(forged),
                     headers={"content-type": "application/json"}).status_code == 201
    signed_roster, left_out = organisation.sign_roster(service, task.task_id, tokens)
    victim = users[2].user
    assert set(left_out) == {victim, N - 1} and sorted(signed_roster.users) == sorted(set(range(N)) - {victim, N - 1})
    assert all("binding does not check" in why for why in left_out.values())
    with pytest.raises(SubmitError, match="not_in_roster"):  # the server says so; were it to hide it, his device
        users[2].send("advertise", 1)
    with pytest.raises(ParameterError, match=f"roster must be a signed roster listing user {victim} with the keys he "
                                             "enrolled"):  # refuses the roster without him
        users[2].roster()
    for user in users[:-1]:
        if user.user != victim:
            assert user.send("advertise", user.user % DOMAIN)
    assert service.state(task.task_id)["state"] == "round2"  # closed early: every user of the signed roster answered
    answer = http.post(f"/tasks/{task.task_id}/inbox", content=json.dumps({"user": victim, "secret": users[2].secret}),
                       headers={"content-type": "application/json"})
    assert (answer.status_code, answer.json()["error"]) == (403, "not_in_roster")


def test_a_forged_signature_is_refused_and_nothing_stored(sqlite_dbs, serve):
    """A round answer signed by another key, or whose signature is of other bytes, or with none: 403
    ``bad_signature`` or 400 ``malformed``, naming the field, and nothing stored."""
    service, http = sharing(sqlite_dbs, serve)
    task = service.create_task(dpds(), 60.0, MIN)
    users = organised(service, task, SharingClient, "http://sharing", N)[0]
    me, path = users[0], f"/tasks/{task.task_id}/round1"
    key, plain = me.role.advertise(1)
    from privagg.service.round_tasks import KEM, relay_info
    from privagg.protocols.sharing_server import ROUNDS
    from privagg.service.tasks import _public_key, _suite

    backups = [{"recipient": k, "sealed": b64encode(_suite(KEM).encrypt(m, _public_key(KEM, me.roster().users[k][1]),
                                                                       info=relay_info(ROUNDS[0], task.task_id, 0, k))
                                                   ).decode()} for k, m in plain.items()]
    good = signed(me, 1, {"message": b64encode(key).decode(), "backups": backups}, "backups")
    other = identity.generate()

    def post(body):
        answer = http.post(path, content=json.dumps(body), headers={"content-type": "application/json"})
        return answer.status_code, answer.json().get("error"), answer.json().get("detail", "")

    forged = b64encode(identity.sign(other, b"anything", b64decode(good["message"]))).decode()
    assert post({**good, "signature": forged})[:2] == (403, "bad_signature")
    assert post({**good, "signature": good["backups"][0]["signature"]})[:2] == (403, "bad_signature")
    assert post({**good, "signature": "AAAA"})[:2] == (400, "malformed")
    assert post({k: v for k, v in good.items() if k != "signature"})[:2] == (400, "malformed")
    unsigned = [dict(e) for e in good["backups"]]
    unsigned[4]["signature"] = b64encode(identity.sign(other, b"x", b"y")).decode()
    status, reason, detail = post({**good, "backups": unsigned})
    assert (status, reason) == (403, "bad_signature") and detail.startswith("backups[4].signature must be user 0's")
    assert count(service, round_messages, task.task_id) == 0 and count(service, relayed_messages, task.task_id) == 0
    assert post(good)[:2] == (201, None)
    with service.engine.connect() as c:
        stored = c.execute(sa.select(round_messages.c.signature)).scalar()
    assert identity.verify(me.identity_key, stored, b"privagg message " + task.task_id.encode() +
                           b" round 1 from user 0 to server", key)


def test_the_signed_roster_round_trips_and_names_a_bad_one():
    """A roster the devices fetch whole: its head canonical (the Merkle root of its n entries, a left-out index
    included), its signature the organisation's; the entries' root recomputed on load, so an entry altered, added or
    left out is named; a malformed one is a ParameterError naming the field (never a traceback)."""
    organisation = Organisation.generate()
    users = {0: (identity.public_key(identity.generate()), bytes(range(32))), 3: (bytes(32), bytes(32))}
    unsigned = SignedRoster("ab" * 16, users, b"")
    signed_roster = SignedRoster("ab" * 16, users, identity.sign(organisation.private_key,
                                                                 SignedRoster.context("ab" * 16), unsigned.document))
    again = SignedRoster.from_dict(json.loads(json.dumps(signed_roster.to_dict())), "ab" * 16)
    assert again.verify(organisation.public_key) == signed_roster and again.size == 4
    with pytest.raises(ParameterError, match="roster.task_id must be the task's"):
        SignedRoster.from_dict(signed_roster.to_dict(), "cd" * 16)
    for bad in ({}, {"roster": "[]"}, {"roster": json.dumps({"task_id": "ab" * 16, "size": 4, "root": "00"})},
                {**signed_roster.to_dict(), "users": [[0, "x", "y"]]}):
        with pytest.raises(ParameterError, match="roster must be the organisation's signed roster"):
            SignedRoster.from_dict(bad, "ab" * 16)
    whole = signed_roster.to_dict()
    for users_served in (whole["users"][:1], whole["users"] + [[2, *whole["users"][1][1:]]],
                         [whole["users"][0], [3, whole["users"][1][1], whole["users"][0][2]]]):
        with pytest.raises(ParameterError, match="roster.users must be the entries whose Merkle root the "
                                                 "organisation signed"):
            SignedRoster.from_dict({**whole, "users": users_served}, "ab" * 16)
    with pytest.raises(ParameterError, match="roster.signature must be a valid Ed25519 signature by the organisation"):
        again.verify(Organisation.generate().public_key)
    assert np.unique([identity.token_halves("t")[0], identity.token_halves("u")[0]]).size == 2


def test_the_graph_seed_is_signed_with_the_roster():
    """The neighbour graph's public randomness (issue 47) is part of the signed document: it round-trips, another seed
    breaks the organisation's signature, and a seed of another length is named. A roster signed before seeds existed
    (none) keeps its document, so its signature still checks."""
    organisation, task_id = Organisation.generate(), "ab" * 16
    users = {0: (identity.public_key(identity.generate()), bytes(range(32)))}
    for seed in (bytes(range(32)), b""):
        unsigned = SignedRoster(task_id, users, b"", seed)
        signed = dataclasses.replace(unsigned, signature=identity.sign(
            organisation.private_key, SignedRoster.context(task_id), unsigned.document))
        again = SignedRoster.from_dict(json.loads(json.dumps(signed.to_dict())), task_id)
        assert again.verify(organisation.public_key).graph_seed == seed
        assert ("graph_seed" in json.loads(signed.to_dict()["roster"])) == bool(seed)
    other = dataclasses.replace(again, graph_seed=bytes(32))
    with pytest.raises(ParameterError, match="roster.signature"):
        other.verify(organisation.public_key)
    document = json.loads(signed.to_dict()["roster"])
    with pytest.raises(ParameterError, match="roster must be the organisation's signed roster"):
        SignedRoster.from_dict({"roster": json.dumps({**document, "graph_seed": "ab" * 8}),
                                "signature": signed.to_dict()["signature"]}, task_id)


def test_the_organisation_key_file_is_private_and_never_overwritten(tmp_path):
    """The CLI's one private-file writer (the organisation's key, a relay token, tokens) and the key's reader: the
    file is the owner's alone from its creation on, an existing one is never overwritten, and a file that is no key
    is one error naming the option (core/identity does no file I/O: keys, signatures, encodings only)."""
    from privagg.cli.tasks import _read_key, _write_private

    private, path = identity.generate(), tmp_path / "org.key"
    _write_private(path, b64encode(private).decode() + "\n", "output")
    assert (path.stat().st_mode & 0o777) == 0o600 and _read_key(path) == private
    with pytest.raises(ParameterError, match="output must be a new file"):
        _write_private(path, "another\n", "output")
    assert _read_key(path) == private
    (tmp_path / "bad.key").write_text("not a key\n")
    (tmp_path / "short.key").write_text(b64encode(bytes(16)).decode())
    for bad in (tmp_path / "bad.key", tmp_path / "short.key"):
        bad.chmod(0o600)
    path.chmod(0o644)  # a reviewer's finding: a key others may read was taken without a word
    with pytest.raises(ParameterError, match="organisation-key must be a file only its owner may read or write"):
        _read_key(path)
    for bad in (tmp_path / "bad.key", tmp_path / "short.key", tmp_path / "none.key", tmp_path):
        with pytest.raises(ParameterError, match="organisation-key must be a key file privagg organisation keygen"):
            _read_key(bad)


def test_the_operators_commands_sign_the_task_and_the_roster(tmp_path, serve):
    """``privagg organisation keygen`` (a new 0600 file, never overwritten; the public key printed), ``task create
    --organisation-key`` (required for a task with rounds), ``tokens issue`` and, once the devices (pinning the
    printed key) enrolled, ``roster sign``: the roster is published and round 1 opens; a user whose keys the server
    swapped is named and left out. Bad input is one line naming the option."""
    from typer.testing import CliRunner

    from privagg.cli import app
    from privagg.cli.tasks import _read_key

    run = CliRunner().invoke
    key, db = tmp_path / "org.key", f"sqlite:///{tmp_path}/sharing.db"
    made = run(app, ["organisation", "keygen", "--output", str(key)])
    assert made.exit_code == 0 and (key.stat().st_mode & 0o777) == 0o600
    pinned = b64decode(made.stdout.strip())
    assert identity.public_key(_read_key(key)) == pinned
    again = run(app, ["organisation", "keygen", "--output", str(key)])
    assert again.exit_code == 2 and "output must be a new file" in again.output and _read_key(key)
    (tmp_path / "p.json").write_text(json.dumps(dpds().to_dict()))
    create = ["task", "create", "--params", str(tmp_path / "p.json"), "--db", db, "--min-survivors", str(MIN)]
    unsigned = run(app, create)
    assert unsigned.exit_code == 2 and "organisation-key is required for a dpds, dpdg or tss task" in unsigned.output
    (tmp_path / "p.json").chmod(0o600)
    bad_key = run(app, [*create, "--organisation-key", str(tmp_path / "p.json")])
    assert bad_key.exit_code == 2 and "organisation-key must be a key file privagg organisation keygen wrote" in \
        bad_key.output
    created = run(app, [*create, "--organisation-key", str(key), "--json"])
    assert created.exit_code == 0, created.output
    task_id = json.loads(created.stdout)["task_id"]
    assert json.loads(created.stdout)["organisation_key"] == b64encode(pinned).decode()
    tokens = tmp_path / "tokens.txt"
    issued = run(app, ["tokens", "issue", "--server", "sharing", "--db", db, "--task", task_id, "--count", str(N),
                       "--output", str(tokens)])
    assert issued.exit_code == 0 and "warning" not in issued.stderr, issued.output
    more = run(app, ["tokens", "issue", "--server", "sharing", "--db", db, "--task", task_id, "--count", "1",
                     "--output", str(tmp_path / "more.txt")])  # more tokens than seats: the first to enroll take them
    assert more.exit_code == 0 and f"warning: task {task_id} has {N + 1} tokens for its n = {N} seats" in more.stderr
    sign = ["roster", "sign", "--task", task_id, "--tokens", str(tokens), "--organisation-key", str(key), "--db", db]
    early = run(app, sign)
    assert early.exit_code == 2 and "roster must be complete (all n = 12 users enrolled)" in early.output
    service, _ = sharing({"sharing": db}, serve, EnrollmentSwapping, time.time)  # the CLI's clock opens round 1
    lines = tokens.read_text().split()
    service.victims = {identity.token_halves(lines[5])[0]}
    users = [SharingClient.fetch("http://sharing", task_id, organisation_key=pinned) for _ in range(N)]
    for user, token in zip(users[:-1], lines):  # the last device never enrolls
        user.enroll(token)
    waiting = run(app, sign)  # a reviewer's finding: the task waited for him for ever
    assert waiting.exit_code == 2 and "roster sign --without-unenrolled" in waiting.output
    complete, sign = sign, [*sign, "--without-unenrolled"]
    # another tokens file (none of the enrolled users' tokens): a reviewer's run stored the empty roster, and every
    # route of the task answered 500 for good; refused now, nothing stored, and the right file signs after
    wrong = run(app, [*sign[:5], str(tmp_path / "more.txt"), *sign[6:]])
    assert wrong.exit_code == 2 and wrong.output.startswith(
        f"error: tokens must be the tokens of at least the task's minimum of {MIN} users among those who enrolled "
        f"(this task's tokens file?), got 0 users whose enrollment checks against them, of the {N - 1} enrolled"), \
        wrong.output
    signed_run = run(app, sign)
    assert signed_run.exit_code == 0, signed_run.output
    assert f"task {task_id}: the roster of {N - 2} users is signed and published; the task is in round1" in \
        signed_run.stdout
    assert signed_run.stderr.strip().splitlines() == [
        f"warning: user {users[5].user} is left out of the roster (a dropout of round 1): his token's binding does "
        "not check: keys his device did not enroll",
        f"warning: user {N - 1} is left out of the roster (a dropout of round 1): did not enroll"]
    assert run(app, sign).exit_code == 0  # again: the same roster, nothing changes
    assert users[0].send("advertise", 1)
    impostor = tmp_path / "other.key"
    run(app, ["organisation", "keygen", "--output", str(impostor)])
    other = run(app, [*complete[:-4], "--organisation-key", str(impostor), "--db", db, "--without-unenrolled"])
    assert other.exit_code == 2 and "roster.signature must be a valid Ed25519 signature by the organisation" in \
        other.output


@pytest.mark.parametrize("key", ["the base64 text", b"x" * 31, None])
def test_a_device_given_its_pinned_key_in_another_form_is_told_so_before_anything(key):
    """A reviewer's run: the key as organisation keygen prints it (base64 text) was reported as the task's signature
    not verifying, as if the server had forged it."""
    from privagg.service.sharing.client import SharingClient
    from privagg.service.two_servers.client import TSSClient

    for client in (SharingClient, TSSClient):
        with pytest.raises(ParameterError, match="^organisation_key must be the organisation's Ed25519 public key, "
                                                 r"32 raw bytes \(base64.b64decode"):
            client.fetch("http://127.0.0.1:9", "ab" * 16, organisation_key=key)
