"""The sharing server: DPDS's and DPDG's server as a service (FastAPI): roster, relay, rounds with deadlines, release.

The users are SDK clients (:mod:`privagg.service.sharing_client`) with their own HPKE key pairs. Each enrolls
with a one-use token and his public key and is given his index in the roster and a secret he authenticates
his later requests with. Once all n enrolled, the rounds of :mod:`privagg.protocols.sharing_parties` run, each
until every user it expects has answered or its deadline passes:

round 1   a user posts his pair key and his n - 1 backups, each sealed to its recipient (HPKE, the task id
          bound as info); the server stores them, whole or not at all, and can open none. U1: who posted by
          the deadline.
round 2   a user of U1 fetches U1's pair keys and posts his masked sum. U2: who posted by the deadline.
round 3   the server publishes U2; a user of U2 fetches the backups U1 sent him and posts his revealed shares.
release   once every user of U2 revealed, or at the deadline once t did (``threshold``): the survivors' sum,
          estimates, and the guarantee recomputed for them (``SharingServer.release``). Fewer than the task's
          minimum of senders or survivors, or fewer than t revealers at round 3's deadline: the task fails,
          and nothing is released.

Every message is stored once (primary keys; a second post is refused 409 and stores nothing), in committed
transactions (SQLite WAL with synchronous FULL, or PostgreSQL), so a kill -9 loses nothing: the rounds resume
from the database with their absolute deadlines.

Routes: ``POST /tasks/{id}/enroll``, ``GET /tasks/{id}`` (the task and its state), ``GET /tasks/{id}/roster``
(the public keys, once full), ``POST /tasks/{id}/round1``, ``POST /tasks/{id}/inbox``, ``POST
/tasks/{id}/round2``, ``POST /tasks/{id}/round3``, ``GET /tasks/{id}/result``, ``POST
/tasks/{id}/close-round/{round}`` (the operator's: closes the open round now, as its deadline would);
``/healthz``, ``/readyz``, ``/metrics``.
"""

from __future__ import annotations

import base64
import dataclasses
import json
import logging
import secrets
import time

import sqlalchemy as sa
from fastapi import FastAPI
from fastapi.concurrency import run_in_threadpool
from prometheus_client import CollectorRegistry

from ..errors import ParameterError
from ..protocols.sharing_parties import ADVERTISE, MASKED_SUM, SharingServer
from . import storage
from .roster import RoundServer, b64_field, rounds_app, user_routes
from .round_tasks import SharingTask
from .storage import relayed_shares, roster, round_messages, sharing_tasks, sharing_tokens
from .tasks import TASK_ID_BYTES
from .web import Limits, Refused, json_object, log_event, shown

log = logging.getLogger("privagg.sharing")

STATES = ("enrolling", "round1", "round2", "round3", "released", "failed")
SERVICE_RANDOMNESS = ("secure: each user's SDK draws his secret from the OS and his coin or noise from ChaCha20 "
                      "keyed from OS entropy (privagg.service.sharing_client)")


class SharingService(RoundServer):
    """The sharing server's logic over its database; the HTTP routes (:func:`create_app`) only call it.

    ``clock``: seconds since the epoch (deadlines are stored as such, so a restarted server keeps them)."""

    tasks_table, messages_table, task_type, server_name = sharing_tasks, round_messages, SharingTask, "sharing server"

    def __init__(self, engine: sa.Engine, registry: CollectorRegistry | None = None, clock=time.time) -> None:
        super().__init__(engine, sharing_tokens, roster, "sharing", "Sealed share bytes stored for relay", registry,
                         clock)

    # ---- tasks, tokens, the roster -------------------------------------------------------------------------
    def create_task(self, parameters, round_seconds: float = 60.0, min_survivors: int | None = None) -> SharingTask:
        """A new task; ``min_survivors`` defaults to n (every user must take part to the end): set it lower to
        release despite dropouts."""
        task = SharingTask(secrets.token_hex(TASK_ID_BYTES), parameters, round_seconds,
                           parameters.n_users if min_survivors is None else min_survivors)
        with self.engine.begin() as c:
            c.execute(sa.insert(sharing_tasks).values(task_id=task.task_id, task=json.dumps(task.to_dict()),
                                                      state="enrolling"))
        log_event(log, "task created", task=task.task_id, protocol=parameters.protocol, users=parameters.n_users)
        return task

    def roster(self, task_id: str) -> list[str]:
        task = self.task(task_id)
        keys = [key for _, key in sorted(self.users.public_keys(task_id).items())]
        if len(keys) < task.parameters.n_users:
            raise Refused(409, "roster_open", f"{len(keys)} of the n = {task.parameters.n_users} users enrolled so far")
        return [base64.b64encode(k).decode() for k in keys]

    # ---- rounds --------------------------------------------------------------------------------------------
    def round1(self, task_id: str, body: bytes) -> str:
        """A user's pair key and sealed backups, one for each other user, stored whole or not at all."""
        task, data = self.task(task_id), json_object(body, "round 1")
        user = self._authenticated(task_id, data)
        self._open_round(task_id, 1, user)
        n, backups = task.parameters.n_users, data.get("backups")
        if set(data) != {"user", "secret", "key", "backups"} or not isinstance(backups, list) or len(backups) != n - 1:
            raise Refused(400, "malformed", "round 1 must be user, secret, key (his pair key message, base64) and "
                          f"backups: a list of the n - 1 = {n - 1} {{\"recipient\", \"sealed\"}}")
        key = self._checked(task, b64_field(data.get("key"), "key"), ADVERTISE, user)
        rows = {}
        for i, entry in enumerate(backups):
            recipient = entry.get("recipient") if isinstance(entry, dict) else None
            if type(recipient) is not int or not 0 <= recipient < n or recipient == user or recipient in rows:
                raise Refused(400, "bad_recipient", f"backups[{i}].recipient must be another user of the roster, "
                              f"each once (not the sender {user}), got {shown(recipient)}")
            rows[recipient] = b64_field(entry.get("sealed"), f"backups[{i}].sealed", task.sealed_size)

        def insert(c: sa.Connection) -> None:
            c.execute(sa.insert(round_messages).values(task_id=task_id, round=1, user=user, message=key))
            c.execute(sa.insert(relayed_shares), [{"task_id": task_id, "sender": user, "recipient": k, "sealed": v}
                                                  for k, v in rows.items()])

        return self._store(task_id, 1, user, insert, sum(len(v) for v in rows.values()))

    @staticmethod
    def _checked(task: SharingTask, raw: bytes, kind: int, user: int, *lists) -> bytes:
        """``raw`` if the server role accepts it as ``user``'s message of ``kind`` (a 400 naming what is wrong)."""
        try:
            server = SharingServer(task.parameters, task.min_survivors)
            server.check_reveal(raw, user, *lists) if lists else server.check(raw, kind, user)
        except ParameterError as err:
            raise Refused(400, "bad_message", str(err)) from None
        return raw

    def inbox(self, task_id: str, body: bytes) -> dict:
        """What a user needs for the open round: U1's pair keys (round 2), or U2 and the backups U1 sent him
        (round 3)."""
        data = json_object(body, "the inbox request")
        user = self._authenticated(task_id, data)
        self.advance(task_id)
        with storage.reading(self.engine) as c:
            row = self._row(c, task_id)
            if row.state not in ("round2", "round3"):
                raise Refused(409, "round_closed", f"round 2 or 3 must be open; the task is {row.state}")
            senders = json.loads(row.senders)
            survivors = None if row.state == "round2" else json.loads(row.survivors)
            if user not in (senders if survivors is None else survivors):
                raise Refused(409, "not_expected", f"user {user} takes no part in {row.state} (he is not among "
                              f"{'the senders of round 1' if survivors is None else 'the survivors of round 2'})")
            if survivors is None:
                found = c.execute(sa.select(round_messages.c.user, round_messages.c.message).where(
                    round_messages.c.task_id == task_id, round_messages.c.round == 1)).all()
                return {"round": 2, "senders": senders,
                        "keys": [{"user": u, "key": base64.b64encode(m).decode()} for u, m in found]}
            found = c.execute(sa.select(relayed_shares.c.sender, relayed_shares.c.sealed).where(
                relayed_shares.c.task_id == task_id, relayed_shares.c.recipient == user,
                relayed_shares.c.sender.in_(senders))).all()
        return {"round": 3, "senders": senders, "survivors": survivors,
                "backups": [{"sender": s, "sealed": base64.b64encode(v).decode()} for s, v in found]}

    def round_message(self, task_id: str, round_: int, body: bytes) -> str:
        """A user's masked sum (round 2) or revealed shares (round 3), checked by the server role before it is
        stored."""
        task, data = self.task(task_id), json_object(body, f"round {round_}")
        user = self._authenticated(task_id, data)
        row = self._open_round(task_id, round_, user)
        if set(data) != {"user", "secret", "message"}:
            raise Refused(400, "malformed", f"round {round_} must be user, secret and message (base64)")
        senders = json.loads(row.senders)
        expected = senders if round_ == 2 else json.loads(row.survivors)
        if user not in expected:
            raise Refused(409, "not_expected", f"user {user} takes no part in round {round_}")
        lists = () if round_ == 2 else (senders, expected)
        raw = self._checked(task, b64_field(data.get("message"), "message"), MASKED_SUM, user, *lists)
        return self._store(task_id, round_, user, lambda c: c.execute(sa.insert(round_messages).values(
            task_id=task_id, round=round_, user=user, message=raw)), 0)

    # ---- the rounds' progress ------------------------------------------------------------------------------
    def advance(self, task_id: str) -> str:
        """Close the open round if everyone it expects answered or its deadline passed, and open the next (or
        release, or fail); the task's state after."""
        task = self.task(task_id)
        n, least = task.parameters.n_users, task.min_survivors
        with self._lock, self.engine.begin() as c:
            row = self._row(c, task_id, lock=True)
            state, now = row.state, self.clock()
            late = row.deadline is not None and now >= row.deadline
            update: dict = {}
            if state == "enrolling":
                enrolled = c.execute(sa.select(sa.func.count()).select_from(roster).where(
                    roster.c.task_id == task_id)).scalar()
                if enrolled == n:
                    update = {"state": "round1", "deadline": now + task.round_seconds}
            elif state == "round1":
                senders = c.execute(sa.select(relayed_shares.c.sender).where(
                    relayed_shares.c.task_id == task_id).distinct()).scalars().all()
                if len(senders) == n or late:
                    update = self._next(sorted(senders), least, "round 1", now + task.round_seconds, "round2",
                                        senders=json.dumps(sorted(senders)))
            elif state in ("round2", "round3"):
                round_ = int(state[-1])
                users = c.execute(sa.select(round_messages.c.user).where(
                    round_messages.c.task_id == task_id, round_messages.c.round == round_)).scalars().all()
                expected = json.loads(row.senders if round_ == 2 else row.survivors)
                if round_ == 2 and (len(users) == len(expected) or late):
                    update = self._next(sorted(users), least, "round 2", now + task.round_seconds, "round3",
                                        survivors=json.dumps(sorted(users)))
                elif round_ == 3 and (len(users) == len(expected) or late and len(users) >= task.threshold):
                    try:
                        update = {"state": "released", "deadline": None,
                                  "outcome": json.dumps(self._release(c, task, row))}
                    except ParameterError as err:  # revealed shares that rebuild no committed secret
                        update = {"state": "failed", "deadline": None, "outcome": json.dumps({"failed": (
                            f"the release was refused: {err}; nothing was released")})}
                elif round_ == 3 and late:
                    update = {"state": "failed", "deadline": None, "outcome": json.dumps({"failed": (
                        f"{len(users)} of the {len(expected)} survivors of round 2 revealed by the deadline, fewer "
                        f"than the backups' threshold t = {task.threshold}: no mask can be rebuilt "
                        "(docs/privacy.md, 'Dropouts in DPDS and DPDG'); nothing was released")})}
            if update:
                c.execute(sa.update(sharing_tasks).where(sharing_tasks.c.task_id == task_id).values(**update))
                log_event(log, "round", task=task_id, state=update["state"])
        return update.get("state", state)

    @staticmethod
    def _next(users: list[int], least: int, what: str, deadline: float, state: str, **lists) -> dict:
        if len(users) < least:
            return {"state": "failed", "deadline": None, "outcome": json.dumps({"failed": (
                f"{len(users)} users answered {what}, fewer than the task's minimum of {least} survivors; nothing "
                "was released")}), **lists}
        return {"state": state, "deadline": deadline, **lists}

    def _release(self, c: sa.Connection, task: SharingTask, row) -> dict:
        from ..pipelines import Analysis
        from ..reports import Collection, Dropouts, Engine, report_document

        messages: dict[int, dict[int, bytes]] = {1: {}, 2: {}, 3: {}}
        for r, u, m in c.execute(sa.select(round_messages.c.round, round_messages.c.user, round_messages.c.message)
                                 .where(round_messages.c.task_id == task.task_id)):
            messages[r][u] = m
        start = time.perf_counter()
        released = SharingServer(task.parameters, task.min_survivors).release(messages[1], messages[2], messages[3])
        p = released.parameters
        privacy = dataclasses.replace(released.privacy, randomness=SERVICE_RANDOMNESS)
        report = Analysis.of(p).report(
            released.table, privacy, Engine("local", 1, seconds={"release": time.perf_counter() - start}),
            top=p.domain_size, collection=Collection(released.survivors, 1, 0, 0))
        report.dropouts = Dropouts(task.parameters.n_users, released.senders, released.survivors, task.min_survivors)
        return report_document(report)

    def close_round(self, task_id: str, round_: int) -> str:
        """The operator's early close of round ``round_`` (if it is the open one): as if its deadline passed now
        (a demo or a test whose users have all answered that will answer). The state after."""
        self.task(task_id)
        with self._lock, self.engine.begin() as c:
            if self._row(c, task_id, lock=True).state == f"round{round_}":
                c.execute(sa.update(sharing_tasks).where(sharing_tasks.c.task_id == task_id).values(
                    deadline=self.clock()))
        return self.advance(task_id)

    def state(self, task_id: str) -> dict:
        task = self.task(task_id)
        self.advance(task_id)
        with storage.reading(self.engine) as c:
            row = self._row(c, task_id)
        return {"task": task.to_dict(), "state": row.state,
                "seconds_left": None if row.deadline is None else max(0.0, row.deadline - self.clock()),
                "senders": None if row.senders is None else len(json.loads(row.senders)),
                "survivors": None if row.survivors is None else len(json.loads(row.survivors))}

    def result(self, task_id: str) -> dict:
        self.task(task_id)
        self.advance(task_id)
        with storage.reading(self.engine) as c:
            row = self._row(c, task_id)
        if row.state == "failed":
            raise Refused(409, "failed", json.loads(row.outcome)["failed"])
        if row.state != "released":
            raise Refused(409, "not_released", f"task {task_id} is in {row.state}: nothing is released yet")
        return json.loads(row.outcome)

    def active(self) -> list[str]:
        with storage.reading(self.engine) as c:
            return c.execute(sa.select(sharing_tasks.c.task_id).where(
                sharing_tasks.c.state.in_(("round1", "round2", "round3")))).scalars().all()


def create_app(service: SharingService, max_body_bytes: int = 1 << 30, tick: float | None = 0.5, *,
               operator_token: str | None = None, api_docs: bool = False, limits: Limits | None = None) -> FastAPI:
    """The sharing server's HTTP service (``tick=None``: rounds advance only on requests)."""
    app, body = rounds_app("privagg sharing server", service, log, max_body_bytes, tick=tick,
                           operator_token=operator_token, api_docs=api_docs, limits=limits)
    user_routes(app, service, body, (1, 2, 3), (2, 3), operator_token)

    @app.get("/tasks/{task_id}/roster")
    async def keys(task_id: str) -> dict:
        return {"public_keys": await run_in_threadpool(service.roster, task_id)}

    @app.get("/tasks/{task_id}/result")
    async def result(task_id: str) -> dict:
        return await run_in_threadpool(service.result, task_id)

    return app


def open_sharing(db_url: str, registry: CollectorRegistry | None = None) -> SharingService:
    """The sharing server over its existing database at ``db_url`` (:func:`~privagg.service.storage.connect`: a
    service makes no database)."""
    return SharingService(storage.connect(db_url, "sharing", create=False), registry)
