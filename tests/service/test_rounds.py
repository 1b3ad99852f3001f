"""The round driver (service/rounds.py): a new round is a declaration and a role's method, nothing else; and an
older sharing database, its tasks half-way through their rounds, is upgraded to rounds as data (s0003), and those
mid-task failed at the upgrade to signed rosters (s0004)."""

import dataclasses
import json
import time
from base64 import b64encode

import numpy as np
import pytest
import sqlalchemy as sa
from fastapi.testclient import TestClient

from privagg.errors import ParameterError
from privagg.protocols import registry
from privagg.protocols import sampling_calibration as sc
from privagg.protocols import sharing_parties as sp
from privagg.protocols import sharing_server as ss
from privagg.protocols.sharing_messages import message_entries
from privagg.protocols.roles import Outbox, Round
from privagg.service.sharing.server import SharingService, create_app
from privagg.service.sharing.client import SharingClient
from privagg.service.storage import connect, round_messages
from privagg.simulate.rounds import run_rounds
from service_deployment import organised, route_sdk_to, signed

N, DOMAIN = 10, 2


class AcknowledgingUser(sp.SharingUser):
    """A DPDS user with one more round: he acknowledges the survivors he was shown (an empty message but his
    index), as a consistency round would sign them."""

    def acknowledge(self, survivors) -> Outbox:
        if self.index not in survivors:
            raise ParameterError("survivors", f"a list naming user {self.index}", "a list without him")
        return Outbox(b"ack %d" % self.index, {})


class AcknowledgingServer(ss.SharingServer):
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
    return ("acknowledgement", 1) if raw.startswith(b"ack ") else message_entries(raw)


# the toy protocol: DPDS with an acknowledge round between the masked sums and the reveal; nothing else is changed
TOY = dataclasses.replace(ss.PROTOCOL, rounds=ss.ROUNDS[:3] + (Round("acknowledge", expects="survivors"),) +
                          ss.ROUNDS[3:], user=AcknowledgingUser, coordinator=AcknowledgingServer, entries=entries)


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
    """The acknowledge round runs through the unchanged driver, routes and SDK: round 4 waits for every survivor's
    acknowledgement (stored once, refused when forged or late), the consistency round becomes round 5, and the release is the
    survivors' sum exactly. The simulator's harness runs the same declaration to the same release."""
    service, http, clock = toy
    p = sc.calibrate_dpds(1.0, 0.05, N, DOMAIN, min_count_fraction=0.3)
    codes = np.arange(N) % DOMAIN
    task = service.create_task(p, 60.0, 7)
    users = organised(service, task, SharingClient, "http://sharing", N)[0]
    assert [r.name for r in users[0].protocol.rounds] == ["advertise", "check", "masked_sum", "acknowledge",
                                                          "consistency", "reveal", "exclusion"]
    for user in users:
        user.send("advertise", int(codes[user.user]))
    for user in users:
        user.send("check")
    for user in users[:-1]:  # the last user vanishes after round 2
        user.send("masked_sum")
    clock.now += 61
    assert service.advance(task.task_id) == "round4" and service.state(task.task_id)["round_name"] == "acknowledge"
    me = users[0]
    forged = signed(me, 4, {"message": b64encode(b"ack 1").decode()})
    answer = http.post(f"/tasks/{task.task_id}/round4", content=json.dumps(forged),
                       headers={"content-type": "application/json"})
    assert (answer.status_code, answer.json()["error"]) == (400, "bad_message")
    for user in users[:-1]:
        user.send("acknowledge")
    with service.engine.connect() as c:
        acks = dict(c.execute(sa.select(round_messages.c.user, round_messages.c.message).where(
            round_messages.c.round == 4)).all())
    assert acks == {u.user: b"ack %d" % u.user for u in users[:-1]}
    assert service.advance(task.task_id) == "round5"  # closed early: every survivor acknowledged
    late = signed(me, 4, {"message": b64encode(b"ack %d" % me.user).decode()})
    answer = http.post(f"/tasks/{task.task_id}/round4", content=json.dumps(late),
                       headers={"content-type": "application/json"})
    assert (answer.status_code, answer.json()["error"]) == (409, "already_sent")
    for user in users[:-1]:
        user.send("consistency")
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
    simulated = run_rounds(TOY, p, codes, {"users": np.random.default_rng(1), "server": np.random.default_rng(2),
                                           "identities": np.random.default_rng(3)},
                           {"masked_sum": [N - 1]}, min_survivors=7)
    assert simulated.transcript["server"]["received acknowledgement"] == N - 1
    assert simulated.release.survivors == N - 1 and simulated.release.parameters == sp.survivors_parameters(p, N - 1)


@pytest.fixture(params=["sqlite", "postgresql"])
def db(request, tmp_path):
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path}/sharing.db"
    return request.getfixturevalue("postgres_databases")()


def test_an_older_database_is_upgraded_and_its_tasks_keep_their_state(db):
    """A sharing database of the release before rounds as data (s0002: a state string per round, a column per
    list, relayed_shares): a task in round 2 (its keys and sealed backups stored), a released one and a failed one.
    ``privagg db upgrade`` turns them into rounds as data (s0003): the first's round and published list, its
    relayed backups as round 1's; the others keep their outcome. The first, mid-task at the upgrade to signed rosters
    (s0004), cannot go on (no organisation signed it, no user enrolled an identity): it is failed, saying why."""
    from service_deployment import database_at

    from privagg.service import storage
    from privagg.service.ledger import CHARGES, round_cost
    from privagg.service.roster import secret_hash
    from privagg.service.round_tasks import SharingTask
    from privagg.service.storage import relayed_messages

    p = sc.calibrate_dpds(1.0, 0.05, N, DOMAIN, min_count_fraction=0.3)
    old = database_at(db, "sharing", "s0002")
    meta = sa.MetaData()
    tasks, msgs, relayed, roster = (sa.Table(name, meta, autoload_with=old) for name in (
        "sharing_tasks", "round_messages", "relayed_shares", "roster"))
    task = SharingTask("ab" * 16, p, 60.0, 7)
    with old.begin() as c:
        c.execute(sa.insert(tasks), [
            {"task_id": task.task_id, "task": json.dumps(task.to_dict()), "state": "round2", "deadline": 2e9,
             "senders": json.dumps(list(range(N))), "survivors": None, "outcome": None},
            {"task_id": "cd" * 16, "task": json.dumps({**task.to_dict(), "task_id": "cd" * 16}), "state": "released",
             "deadline": None, "senders": "[0]", "survivors": "[0]", "outcome": json.dumps({"estimates": []})},
            {"task_id": "ef" * 16, "task": json.dumps({**task.to_dict(), "task_id": "ef" * 16}), "state": "failed",
             "deadline": None, "senders": "[0, 1]", "survivors": None, "outcome": json.dumps({"failed": "too few"})}])
        c.execute(sa.insert(roster), [{"task_id": task.task_id, "user": i, "public_key": bytes([i]) * 32,
                                       "secret_hash": secret_hash(f"secret {i}")} for i in range(N)])
        c.execute(sa.insert(msgs), [{"task_id": task.task_id, "round": 1, "user": i, "message": b"key"}
                                    for i in range(N)])
        c.execute(sa.insert(relayed), [{"task_id": task.task_id, "sender": i, "recipient": k, "sealed": b"sealed"}
                                       for i in range(N) for k in range(N) if k != i])
    old.dispose()
    upgraded = time.time()
    assert storage.upgrade_database(db, "sharing") == ("s0002", "s0007")
    service = SharingService(connect(db, "sharing", create=False), clock=Clock())
    try:
        state = service.state(task.task_id)
        assert (state["state"], state["round_name"], state["senders"]) == ("failed", "masked_sum", N)
        with pytest.raises(Exception, match="upgraded to signed rosters"):
            service.result(task.task_id)
        assert service.result("cd" * 16) == {"estimates": []}
        with pytest.raises(Exception, match="too few"):
            service.result("ef" * 16)
        with service.engine.connect() as c:
            assert c.execute(sa.select(sa.func.count()).select_from(relayed_messages).where(
                relayed_messages.c.round == 1)).scalar() == N * (N - 1)
            # s0007: the three tasks the older release made, charged to the default population at the upgrade (their
            # creation time unknown), each at its guarantee over its fewest survivors, as task create charges it
            charged = c.execute(sa.select(CHARGES)).all()
        cost = round_cost(p, 7)
        assert sorted((r.task_id, r.population, r.protocol, r.epsilon, r.delta) for r in charged) == [
            (t, "default", "dpds", cost.epsilon, cost.delta) for t in (task.task_id, "cd" * 16, "ef" * 16)]
        assert all(upgraded <= r.created <= time.time() for r in charged)
    finally:
        service.engine.dispose()


def _whole_round_reads(engine, seen: list) -> None:
    """Record each statement that reads a round's messages whole (no user named): per round, not per request."""
    @sa.event.listens_for(engine, "before_cursor_execute")
    def record(conn, cursor, statement, parameters, context, executemany):
        statement = statement.replace('"', "")  # PostgreSQL quotes the column user
        if "FROM round_messages" in statement and "round_messages.user =" not in statement and \
                "round_messages.user IN" not in statement:
            seen.append(statement)


def _release_equals_the_survivors_sum(report: dict, p, users) -> None:
    total = np.zeros(DOMAIN, dtype=np.uint64)
    for u in users:
        total = p.field.add(total, u.role.state.vector)
    expected = sp.survivors_parameters(p, len(users)).estimate(total)
    assert [e["estimate"] for e in sorted(report["estimates"], key=lambda e: e["item"])] == pytest.approx(
        expected.tolist())


@pytest.fixture
def dpds(db, monkeypatch):
    """The sharing server in process (DPDS's rounds as registered) over SQLite or PostgreSQL, its users' SDKs
    routed to it; and the database's URL."""
    clock = Clock()
    service = SharingService(connect(db, "sharing", create=True), clock=clock)
    http = TestClient(create_app(service, tick=None))
    route_sdk_to(http, monkeypatch)
    yield service, http, db
    http.close()
    service.engine.dispose()


@pytest.mark.parametrize("n", [6, 12])
def test_a_request_reads_the_messages_it_needs_per_user_and_the_answers_are_counted(dpds, n):
    """No request reads a round's messages whole: a coordinator's inbox and checks read the users' messages it
    indexes (one row each, kept), and a round's answers are counted as they are stored. The statements that read a
    round's messages whole are the same handful at n = 6 and 12 (each round's count once, its close, the release),
    where every answer and inbox used to read them (thrice per request: over 100 at n = 6)."""
    service, http, _ = dpds
    p = sc.calibrate_dpds(1.0, 0.05, n, DOMAIN, min_count_fraction=0.3)
    task = service.create_task(p, 60.0, n - 1)
    users = organised(service, task, SharingClient, "http://sharing", n)[0]
    seen: list[str] = []
    _whole_round_reads(service.engine, seen)
    for name in ("advertise", "check", "masked_sum", "consistency", "reveal"):
        for user in users:
            user.send(name, int(user.user % DOMAIN) if name == "advertise" else None)
    assert service.state(task.task_id)["state"] == "released"
    assert len(seen) <= 3 * 5, seen  # per round: the count, the close's answers, the release's read
    _release_equals_the_survivors_sum(service.result(task.task_id), p, users)


class Crash(BaseException):
    """A kill -9 in the middle of the release: nothing after it runs."""


def _crash():
    raise Crash


def _hold_the_release(monkeypatch, then):
    """The coordinator's release held until ``go`` is set, then ``then(coordinator, state, messages)``, and the
    server's wait for it short: (``started``, set once the release began; ``go``)."""
    import threading

    from privagg.service import rounds

    started, go = threading.Event(), threading.Event()

    def held(self, state, messages):
        started.set()
        assert go.wait(30)
        return then(self, state, messages)

    monkeypatch.setattr(ss.SharingServer, "finish", held)
    monkeypatch.setattr(rounds, "RELEASE_WAIT", 0.05)
    return started, go


def _all_but_the_last_reveal(service):
    """A DPDS task whose users all answered rounds 1-4 and all but the last round 5: the parameters, the task, the
    users (the last one's reveal closes the rounds)."""
    p = sc.calibrate_dpds(1.0, 0.05, N, DOMAIN, min_count_fraction=0.3)
    task = service.create_task(p, 60.0, N - 1)
    users = organised(service, task, SharingClient, "http://sharing", N)[0]
    for name in ("advertise", "check", "masked_sum", "consistency"):
        for user in users:
            user.send(name, int(user.user % DOMAIN) if name == "advertise" else None)
    for user in users[:-1]:
        user.send("reveal")
    return p, task, users


def test_the_release_runs_outside_the_lock_and_resumes_after_a_crash(dpds, monkeypatch):
    """The last reveal closes the rounds: the task is ``releasing`` (stored) and the coordinator's finish runs
    after the write transaction, without the lock: meanwhile the task's state and roster are served and its result
    is 409 ``not_released``. A crash in the middle of it leaves the task releasing; the restarted server's next
    advance (its tick) computes the release again, the survivors' sum exactly."""
    import threading

    service, http, db = dpds
    p, task, users = _all_but_the_last_reveal(service)
    finish = ss.SharingServer.finish
    started, go = _hold_the_release(monkeypatch, lambda *_: _crash())
    last = threading.Thread(target=lambda: pytest.raises(Crash, users[-1].send, "reveal"))
    last.start()
    assert started.wait(30)
    try:  # the release is under way, in the last user's request: the routes answer
        assert http.get(f"/tasks/{task.task_id}").json()["state"] == "releasing"
        assert http.get(f"/tasks/{task.task_id}/roster").status_code == 200
        answer = http.get(f"/tasks/{task.task_id}/result")
        assert (answer.status_code, answer.json()["error"]) == (409, "not_released")
        assert "releasing" in answer.json()["detail"]
    finally:
        go.set()
        last.join(30)
    with service.engine.connect() as c:
        row = c.execute(sa.select(service.tasks).where(service.tasks.c.task_id == task.task_id)).one()
    assert (row.status, row.outcome) == ("releasing", None)
    monkeypatch.setattr(ss.SharingServer, "finish", finish)
    restarted = SharingService(connect(db, "sharing", create=False), clock=Clock())
    try:
        assert restarted.active() == [task.task_id]
        assert restarted.advance(task.task_id) == "released"
        _release_equals_the_survivors_sum(restarted.result(task.task_id), p, users)
    finally:
        restarted.engine.dispose()


def test_a_users_sdk_asks_for_the_result_again_while_the_release_is_under_way(dpds, monkeypatch):
    """RoundClient.result: 409 not_released while the task is releasing is asked again, and the release comes."""
    import threading

    service, http, _ = dpds
    p, task, users = _all_but_the_last_reveal(service)
    started, go = _hold_the_release(monkeypatch, ss.SharingServer.finish)
    last = threading.Thread(target=users[-1].send, args=("reveal",))
    last.start()
    assert started.wait(30)
    got = []
    asking = threading.Thread(target=lambda: got.append(users[0].result(wait=30, every=0.05)))
    asking.start()
    try:
        asking.join(0.5)
        assert asking.is_alive() and not got  # still asking: the release is held
    finally:
        go.set()
        last.join(30)
        asking.join(30)
    _release_equals_the_survivors_sum(got[0], p, users)
