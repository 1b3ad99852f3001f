"""The round driver (service/rounds.py): a new round is a declaration and a role's method, nothing else; and an
older sharing database, its tasks half-way through their rounds, is upgraded to rounds as data (s0003)."""

import dataclasses
import json
from base64 import b64encode

import numpy as np
import pytest
import sqlalchemy as sa
from fastapi.testclient import TestClient

from privagg.errors import ParameterError
from privagg.protocols import registry
from privagg.protocols import sampling_calibration as sc
from privagg.protocols import sharing_parties as sp
from privagg.protocols.roles import Outbox, Round
from privagg.service.sharing.server import SharingService, create_app
from privagg.service.sharing.client import SharingClient
from privagg.service.storage import connect, round_messages
from privagg.simulate.rounds import run_rounds
from service_deployment import route_sdk_to

N, DOMAIN = 10, 2


class AcknowledgingUser(sp.SharingUser):
    """A DPDS user with one more round: he acknowledges the survivors he was shown (an empty message but his
    index), as a consistency round would sign them."""

    def acknowledge(self, survivors) -> Outbox:
        if self.index not in survivors:
            raise ParameterError("survivors", f"a list naming user {self.index}", "a list without him")
        return Outbox(b"ack %d" % self.index, {})


class AcknowledgingServer(sp.SharingServer):
    """DPDS's coordinator, which checks the acknowledgements and shows each survivor U2."""

    def check(self, round_, user, message, state, messages) -> None:
        if round_.name != "acknowledge":
            return super().check(round_, user, message, state, messages)
        if message != b"ack %d" % user:
            raise ParameterError("message", f"user {user}'s acknowledgement", message[:16])

    def inbox(self, round_, user, state, messages) -> dict:
        if round_.name != "acknowledge":
            return super().inbox(round_, user, state, messages)
        return {"survivors": state["survivors"]}


def entries(raw: bytes) -> tuple[str, int]:
    return ("acknowledgement", 1) if raw.startswith(b"ack ") else sp.message_entries(raw)


# the toy protocol: DPDS with an acknowledge round between the masked sums and the reveal; nothing else is changed
TOY = dataclasses.replace(sp.PROTOCOL, rounds=sp.ROUNDS[:2] + (Round("acknowledge", expects="survivors"),) +
                          sp.ROUNDS[2:], user=AcknowledgingUser, coordinator=AcknowledgingServer, entries=entries)


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def toy(tmp_path, monkeypatch):
    """The sharing server in process, its dpds entry's rounds the toy's (a test-only declaration)."""
    monkeypatch.setitem(registry.REGISTRY, "dpds", dataclasses.replace(registry.REGISTRY["dpds"], rounds=TOY))
    clock = Clock()
    service = SharingService(connect(f"sqlite:///{tmp_path}/sharing.db", "sharing"), clock=clock)
    http = TestClient(create_app(service, tick=None))

    route_sdk_to(http, monkeypatch)
    yield service, http, clock
    http.close()
    service.engine.dispose()


def test_a_round_added_by_declaration_runs_through_the_driver_and_the_simulator(toy):
    """The acknowledge round runs through the unchanged driver, routes and SDK: round 3 waits for every survivor's
    acknowledgement (stored once, refused when forged or late), the reveal becomes round 4, and the release is the
    survivors' sum exactly. The simulator's harness runs the same declaration to the same release."""
    service, http, clock = toy
    p = sc.calibrate_dpds(1.0, 0.05, N, DOMAIN, min_count_fraction=0.3)
    codes = np.arange(N) % DOMAIN
    task = service.create_task(p, 60.0, 7)
    users = [SharingClient("http://sharing", task) for _ in range(N)]
    for user, token in zip(users, service.issue_tokens(task.task_id, N)):
        user.enroll(token)
    assert [r.name for r in users[0].protocol.rounds] == ["advertise", "masked_sum", "acknowledge", "reveal"]
    for user in users:
        user.send("advertise", int(codes[user.user]))
    for user in users[:-1]:  # the last user vanishes after round 1
        user.send("masked_sum")
    clock.now += 61
    assert service.advance(task.task_id) == "round3" and service.state(task.task_id)["round_name"] == "acknowledge"
    me = users[0]
    forged = {"user": me.user, "secret": me.secret, "message": b64encode(b"ack 1").decode()}
    answer = http.post(f"/tasks/{task.task_id}/round3", content=json.dumps(forged),
                       headers={"content-type": "application/json"})
    assert (answer.status_code, answer.json()["error"]) == (400, "bad_message")
    for user in users[:-1]:
        user.send("acknowledge")
    with service.engine.connect() as c:
        acks = dict(c.execute(sa.select(round_messages.c.user, round_messages.c.message).where(
            round_messages.c.round == 3)).all())
    assert acks == {u.user: b"ack %d" % u.user for u in users[:-1]}
    assert service.advance(task.task_id) == "round4"  # closed early: every survivor acknowledged
    late = {"user": me.user, "secret": me.secret, "message": b64encode(b"ack %d" % me.user).decode()}
    answer = http.post(f"/tasks/{task.task_id}/round3", content=json.dumps(late),
                       headers={"content-type": "application/json"})
    assert (answer.status_code, answer.json()["error"]) == (409, "already_sent")
    for user in users[:-1]:
        user.send("reveal")
    report = service.result(task.task_id)
    survivors = [u for u in users[:-1]]
    total = np.zeros(DOMAIN, dtype=np.uint64)
    for u in survivors:
        total = p.field.add(total, u.role.state.vector)
    expected = sp.survivors_parameters(p, N - 1).estimate(total)
    assert [e["estimate"] for e in sorted(report["estimates"], key=lambda e: e["item"])] == pytest.approx(
        expected.tolist())
    simulated = run_rounds(TOY, p, codes, {"users": np.random.default_rng(1), "server": np.random.default_rng(2)},
                           {"masked_sum": [N - 1]}, min_survivors=7)
    assert simulated.transcript["server"]["received acknowledgement"] == N - 1
    assert simulated.release.survivors == N - 1 and simulated.release.parameters == sp.survivors_parameters(p, N - 1)


@pytest.fixture(params=["sqlite", "postgresql"])
def db(request, tmp_path):
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path}/sharing.db"
    return request.getfixturevalue("postgres_databases")()


def test_an_older_database_is_upgraded_and_its_tasks_go_on_from_their_round(db, monkeypatch):
    """A sharing database of the release before rounds as data (s0002: a state string per round, a column per
    list, relayed_shares): a task in round 2 (its keys and sealed backups stored), a released one and a failed one.
    ``privagg db upgrade`` (s0003) turns them into rounds as data: the first goes on from round 2 through the new
    driver to the survivors' exact sum, the others keep their outcome."""
    from service_deployment import database_at

    from privagg.service import storage
    from privagg.service.roster import secret_hash
    from privagg.service.round_tasks import KEM, SharingTask, relay_info
    from privagg.service.tasks import _public_key, _suite

    p = sc.calibrate_dpds(1.0, 0.05, N, DOMAIN, min_count_fraction=0.3)
    codes = np.arange(N) % DOMAIN
    old = database_at(db, "sharing", "s0002")
    meta = sa.MetaData()
    tasks, msgs, relayed, roster = (sa.Table(name, meta, autoload_with=old) for name in (
        "sharing_tasks", "round_messages", "relayed_shares", "roster"))
    task = SharingTask("ab" * 16, p, 60.0, 7)
    clients = [SharingClient("http://sharing", task) for _ in range(N)]
    with old.begin() as c:
        c.execute(sa.insert(tasks), [
            {"task_id": task.task_id, "task": json.dumps(task.to_dict()), "state": "round2", "deadline": 2e9,
             "senders": json.dumps(list(range(N))), "survivors": None, "outcome": None},
            {"task_id": "cd" * 16, "task": json.dumps({**task.to_dict(), "task_id": "cd" * 16}), "state": "released",
             "deadline": None, "senders": "[0]", "survivors": "[0]", "outcome": json.dumps({"estimates": []})},
            {"task_id": "ef" * 16, "task": json.dumps({**task.to_dict(), "task_id": "ef" * 16}), "state": "failed",
             "deadline": None, "senders": "[0, 1]", "survivors": None, "outcome": json.dumps({"failed": "too few"})}])
        for i, client in enumerate(clients):
            client.user, client.secret = i, f"secret {i}"
            client.role = client.make_role(i)
            c.execute(sa.insert(roster).values(task_id=task.task_id, user=i, public_key=client.public_key,
                                               secret_hash=secret_hash(client.secret)))
        for i, client in enumerate(clients):
            key, backups = client.role.advertise(int(codes[i]))
            c.execute(sa.insert(msgs).values(task_id=task.task_id, round=1, user=i, message=key))
            c.execute(sa.insert(relayed), [{"task_id": task.task_id, "sender": i, "recipient": k, "sealed": _suite(
                KEM).encrypt(m, _public_key(KEM, clients[k].public_key), info=relay_info(sp.ROUNDS[0], task.task_id,
                                                                                           i, k))}
                                           for k, m in backups.items()])
    old.dispose()
    assert storage.upgrade_database(db, "sharing") == ("s0002", "s0006")
    clock = Clock()
    service = SharingService(connect(db, "sharing", create=False), clock=clock)
    http = TestClient(create_app(service, tick=None))

    route_sdk_to(http, monkeypatch)
    try:
        state = service.state(task.task_id)
        assert (state["state"], state["round_name"], state["senders"]) == ("round2", "masked_sum", N)
        assert service.result("cd" * 16) == {"estimates": []}
        with pytest.raises(Exception, match="too few"):
            service.result("ef" * 16)
        for client in clients[1:]:  # user 0 vanishes in round 2
            client.send("masked_sum")
        clock.now += 3e9
        assert service.advance(task.task_id) == "round3"
        for client in clients[1:]:
            client.send("reveal")  # his backups of round 1 come from the upgraded relayed_messages
        report = service.result(task.task_id)
    finally:
        http.close()
        service.engine.dispose()
    total = np.zeros(DOMAIN, dtype=np.uint64)
    for client in clients[1:]:
        total = p.field.add(total, client.role.state.vector)
    assert [e["estimate"] for e in sorted(report["estimates"], key=lambda e: e["item"])] == pytest.approx(
        sp.survivors_parameters(p, N - 1).estimate(total).tolist())
