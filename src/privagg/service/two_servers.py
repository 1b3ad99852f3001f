"""TSS's two servers as services (FastAPI): S1 (roster, report sets, election, relay, rounds with deadlines)
and S2 (the hand-over, the release), each with its own database and keys.

The users are SDK clients (:mod:`privagg.service.two_servers_client`) with their own HPKE key pairs; they talk
to S1 only. The protocol is :mod:`privagg.protocols.two_server_parties`' (derivation: docs/privacy.md,
"Dropouts in TSS"). A task is made on S2 first (:meth:`SecondService.create_task`: its id, an HPKE key pair
whose private half never leaves S2's database, and a relay token for S1), then on S1 with S2's public task, S2's
URL and the relay token (:meth:`FirstService.create_task`; :func:`create_tasks` does both). The task users
fetch from S1 carries S2's task id and public key, to seal what only S2 may open. Once all n enrolled:

round 1   a user posts his report set A_i (to S1, in the clear over TLS). R1: who posted by the deadline.
          S1 elects each item's helpers among R1 and serves each reporter his items' helpers with their
          public keys (``/election``).
round 2   a reporter posts his shares, one message per helper, each sealed to it (the task and both users
          bound as HPKE's info); stored whole or not at all; S1 can open none. R2: who posted by the deadline.
round 3   a helper fetches his inbox (his items, their R2 reporters, the sealed shares they sent him) and posts
          his per-item sums sealed to S2. S1 cannot open them.
round 4   only if helpers missed round 3: each asked R2 reporter fetches the dropped helpers of his items and
          posts his shares to them, sealed to S2.
hand-over S1 posts S2 the users, the election, the sealed sums and recoveries (``POST /tasks/{id}/handover``
          at S2, with the relay token), until S2 has it; S2 opens them, checks them and releases the items it
          can complete, with the guarantee recomputed for R2 (``GET /tasks/{id}/result`` at S2).

Fewer than the task's minimum in R1 or R2 fails the task at S1 (nothing is handed over, nothing released).
Every message is stored once (primary keys; a second post is refused 409 and stores nothing), in committed
transactions, so a kill -9 loses nothing: the rounds resume from the database with their absolute deadlines,
and the hand-over is sent again until S2 has it (S2 takes the same hand-over twice as once).

S1's routes: ``GET /tasks/{id}``, ``POST /tasks/{id}/enroll``, ``POST /tasks/{id}/round1``, ``POST
/tasks/{id}/election``, ``POST /tasks/{id}/round2``, ``POST /tasks/{id}/inbox``, ``POST /tasks/{id}/round3``,
``POST /tasks/{id}/round4``, ``POST /tasks/{id}/close-round/{round}`` (the operator's). S2's: ``GET
/tasks/{id}``, ``POST /tasks/{id}/handover``, ``GET /tasks/{id}/result``. Both: ``/healthz``, ``/readyz``,
``/metrics``.
"""

from __future__ import annotations

import base64
import dataclasses
import functools
import hashlib
import hmac
import json
import logging
import secrets
import threading
import time
import urllib.request

import sqlalchemy as sa
from fastapi import FastAPI, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import JSONResponse
from prometheus_client import CollectorRegistry, Counter

from ..errors import ParameterError
from ..protocols.two_server_parties import (RECOVERY, REPORT_SET, SHARES, SUMS, Election, FirstServer, Handover,
                                            Recovery, SecondServer, message_bytes)
from . import storage
from .roster import (RoundServer, b64_field, load_task, new_token, rounds_app, secret_hash,
                     user_routes)
from .round_tasks import KEM, SecondTask, TSSTask, sealed_size, second_info
from .keys import KeyEncryptionKey
from .tasks import TASK_ID_BYTES, _private_key, _suite
from .web import Health, Limits, Refused, json_object, log_event, shown

log = logging.getLogger("privagg.s1")
log2 = logging.getLogger("privagg.s2")

SERVICE_RANDOMNESS = ("secure: each user's SDK draws his coin, report set and shares from ChaCha20 keyed from OS "
                      "entropy, and S1 elects the helpers from it (privagg.service.two_servers_client)")

# ---- S1's tables -------------------------------------------------------------------------------------------
s1_tasks = sa.Table(
    "s1_tasks", storage.metadata["s1"],
    sa.Column("task_id", sa.String(32), primary_key=True),
    sa.Column("task", sa.Text, nullable=False),  # the task's public JSON (TSSTask)
    # enrolling, round1, round2, round3, round4, handover (to S2), delivered (S2 has it), failed
    sa.Column("state", sa.String(16), nullable=False),
    sa.Column("deadline", sa.Float),  # the open round's end (seconds since the epoch)
    sa.Column("second_url", sa.Text, nullable=False),  # where the hand-over goes
    sa.Column("relay_token", sa.Text, nullable=False),  # S1's credential at S2 for this task
    sa.Column("election", sa.Text),  # R1 and each item's helpers (JSON), once round 1 closed
    sa.Column("survivors", sa.Text),  # R2 (JSON list), once round 2 closed
    sa.Column("reporters", sa.Text),  # each item's R2 reporters (JSON), once round 2 closed
    sa.Column("recovery", sa.Text),  # the recovery plan (JSON), once round 3 closed
    sa.Column("outcome", sa.Text),  # why the task failed
)
s1_tokens = sa.Table(
    "s1_tokens", storage.metadata["s1"],
    sa.Column("token_hash", sa.LargeBinary(32), primary_key=True),
    sa.Column("task_id", sa.String(32), nullable=False),
    sa.Column("user", sa.Integer),  # the roster index the token enrolled; NULL while unused
)
s1_roster = sa.Table(
    "s1_roster", storage.metadata["s1"],
    sa.Column("task_id", sa.String(32), primary_key=True),
    sa.Column("user", sa.Integer, primary_key=True),
    sa.Column("public_key", sa.LargeBinary, nullable=False),  # the user's HPKE public key (raw)
    sa.Column("secret_hash", sa.LargeBinary(32), nullable=False),  # SHA-256 of the secret he authenticates with
)
s1_messages = sa.Table(  # round 1: the report set; 2: an empty record that he shared; 3, 4: sealed to S2
    "s1_messages", storage.metadata["s1"],
    sa.Column("task_id", sa.String(32), primary_key=True),
    sa.Column("round", sa.Integer, primary_key=True),
    sa.Column("user", sa.Integer, primary_key=True),
    sa.Column("message", sa.LargeBinary, nullable=False),
)
s1_shares = sa.Table(
    "s1_shares", storage.metadata["s1"],
    sa.Column("task_id", sa.String(32), primary_key=True),
    sa.Column("sender", sa.Integer, primary_key=True),
    sa.Column("recipient", sa.Integer, primary_key=True),
    sa.Column("sealed", sa.LargeBinary, nullable=False),  # sealed to the recipient: S1 cannot open it
    sqlite_with_rowid=False,
)

# ---- S2's table --------------------------------------------------------------------------------------------
s2_tasks = sa.Table(
    "s2_tasks", storage.metadata["s2"],
    sa.Column("task_id", sa.String(32), primary_key=True),
    sa.Column("task", sa.Text, nullable=False),  # the task's public JSON (SecondTask)
    sa.Column("sealed_key", sa.LargeBinary, nullable=False),  # its X25519 key sealed under the KEK (keys.py)
    sa.Column("kek_id", sa.String(16), nullable=False),  # which KEK sealed it
    sa.Column("relay_hash", sa.LargeBinary(32), nullable=False),  # SHA-256 of S1's relay token
    sa.Column("state", sa.String(16), nullable=False),  # waiting, received (the hand-over), released, failed
    sa.Column("handover", sa.LargeBinary),  # S1's hand-over until released (then NULL)
    sa.Column("handover_digest", sa.LargeBinary(32)),  # SHA-256 of the hand-over taken
    sa.Column("outcome", sa.Text),  # the release's JSON, or why nothing was released
)


def post_handover(url: str, task_id: str, token: str, body: bytes, timeout: float = 60.0,
                  ca_file: str | None = None) -> None:
    """S1's delivery of a hand-over: ``POST {url}/tasks/{task_id}/handover`` with the relay token; an HTTP error or
    no answer raises (the ticker sends it again). Over https, S2's certificate is checked against ``ca_file``, or
    the system's CAs."""
    import ssl

    request = urllib.request.Request(f"{url.rstrip('/')}/tasks/{task_id}/handover", data=body, method="POST",
                                     headers={"content-type": "application/json", "authorization": f"Bearer {token}"})
    context = None if ca_file is None else ssl.create_default_context(cafile=ca_file)
    with urllib.request.urlopen(request, timeout=timeout, context=context) as answer:
        answer.read()


# ---- S1 ----------------------------------------------------------------------------------------------------


class FirstService(RoundServer):
    """S1's logic over its database; the HTTP routes (:func:`create_first_app`) only call it.

    ``clock``: seconds since the epoch (deadlines are stored as such, so a restarted server keeps them).
    ``send``: how a hand-over reaches S2 (:func:`post_handover`; a test passes S2's service directly)."""

    tasks_table, messages_table, task_type, server_name = s1_tasks, s1_messages, TSSTask, "S1"

    def __init__(self, engine: sa.Engine, registry: CollectorRegistry | None = None, clock=time.time,
                 send=post_handover) -> None:
        super().__init__(engine, s1_tokens, s1_roster, "s1", "Sealed bytes stored for relay (to helpers and to S2)",
                         registry, clock)
        self.send = send
        self.handovers = Counter("privagg_s1_handovers", "Hand-overs to S2 by outcome", ["outcome"],
                                 registry=self.registry)

    # ---- tasks, tokens, the roster -------------------------------------------------------------------------
    def create_task(self, parameters, second: SecondTask, second_url: str, relay_token: str,
                    round_seconds: float = 60.0) -> TSSTask:
        """A new task for S2's ``second`` (its parameters and minimum are the task's), reached at ``second_url``
        with ``relay_token``."""
        if second.parameters.to_dict() != parameters.to_dict():
            raise ParameterError("second task", "S2's task of these parameters", second.parameters.to_dict())
        if not isinstance(second_url, str) or not second_url.startswith(("http://", "https://")):
            raise ParameterError("second_url", "S2's http:// or https:// URL", shown(second_url))
        if not isinstance(relay_token, str) or not relay_token:
            raise ParameterError("relay_token", "the token S2 gave for this task", shown(relay_token))
        task = TSSTask(secrets.token_hex(TASK_ID_BYTES), parameters, round_seconds, second.min_survivors,
                       second.task_id, second.public_key)
        with self.engine.begin() as c:
            c.execute(sa.insert(s1_tasks).values(task_id=task.task_id, task=json.dumps(task.to_dict()),
                                                 state="enrolling", second_url=second_url, relay_token=relay_token))
        log_event(log, "task created", task=task.task_id, protocol=parameters.protocol, users=parameters.n_users)
        return task

    def _role(self, task: TSSTask) -> FirstServer:
        return FirstServer(task.parameters, task.min_survivors)

    # ---- what the rounds read ------------------------------------------------------------------------------
    def _messages(self, c: sa.Connection, task_id: str, round_: int) -> dict[int, bytes]:
        return dict(c.execute(sa.select(s1_messages.c.user, s1_messages.c.message).where(
            s1_messages.c.task_id == task_id, s1_messages.c.round == round_)).all())

    def _report_set(self, task: TSSTask, user: int) -> list[int]:
        with storage.reading(self.engine) as c:
            raw = c.execute(sa.select(s1_messages.c.message).where(
                s1_messages.c.task_id == task.task_id, s1_messages.c.round == 1, s1_messages.c.user == user)).scalar()
        return self._role(task).check_report_set(raw, user).tolist()

    @staticmethod
    def _message_fields(data: dict, round_: int) -> None:
        if set(data) != {"user", "secret", "message"}:
            raise Refused(400, "malformed", f"round {round_} must be user, secret and message (base64)")

    # ---- rounds --------------------------------------------------------------------------------------------
    def round1(self, task_id: str, body: bytes) -> str:
        """A user's report set, checked (alpha N distinct items) and stored once."""
        task, data = self.task(task_id), json_object(body, "round 1")
        user = self._authenticated(task_id, data)
        self._open_round(task_id, 1, user)
        self._message_fields(data, 1)
        raw = b64_field(data.get("message"), "message", message_bytes(task.parameters, REPORT_SET,
                                                                 task.parameters.report_size))
        try:
            self._role(task).check_report_set(raw, user)
        except ParameterError as err:
            raise Refused(400, "bad_message", str(err)) from None
        return self._store(task_id, 1, user, lambda c: c.execute(sa.insert(s1_messages).values(
            task_id=task_id, round=1, user=user, message=raw)), 0)

    def election(self, task_id: str, body: bytes) -> dict:
        """Round 2's question: the helpers of each item of the user's report set, and their public keys."""
        task, data = self.task(task_id), json_object(body, "the election request")
        user = self._authenticated(task_id, data)
        row = self._open_round(task_id, 2)
        election = Election.from_dict(json.loads(row.election))
        if user not in election.senders:
            raise Refused(409, "not_expected", f"user {user} takes no part in round 2 (his report set did not reach "
                          "S1 in round 1)")
        helpers = election.helpers_of(self._report_set(task, user))
        everyone = sorted({h for hs in helpers.values() for h in hs})
        keys = self.users.public_keys(task_id, everyone)
        return {"helpers": [{"item": j, "helpers": hs} for j, hs in helpers.items()],
                "public_keys": [{"user": u, "public_key": base64.b64encode(keys[u]).decode()} for u in everyone]}

    def round2(self, task_id: str, body: bytes) -> str:
        """A reporter's shares: one sealed message for each helper of his items (but himself), each of the size
        its number of shares makes, stored whole or not at all."""
        task, data = self.task(task_id), json_object(body, "round 2")
        user = self._authenticated(task_id, data)
        row = self._open_round(task_id, 2, user)
        election = Election.from_dict(json.loads(row.election))
        if user not in election.senders:
            raise Refused(409, "not_expected", f"user {user} takes no part in round 2")
        shares = data.get("shares")
        if set(data) != {"user", "secret", "shares"} or not isinstance(shares, list):
            raise Refused(400, "malformed", "round 2 must be user, secret and shares: a list of {\"recipient\", "
                          "\"sealed\"}, one for each helper of the sender's items")
        expected = FirstServer.expected_shares(election, user, self._report_set(task, user))
        rows = {}
        for i, entry in enumerate(shares):
            recipient = entry.get("recipient") if isinstance(entry, dict) else None
            if type(recipient) is not int or recipient not in expected or recipient in rows:
                raise Refused(400, "bad_recipient", f"shares[{i}].recipient must be a helper of an item of the "
                              f"sender's report set, each once (not the sender {user} himself), got {shown(recipient)}")
            rows[recipient] = b64_field(entry.get("sealed"), f"shares[{i}].sealed",
                                   sealed_size(task.parameters, SHARES, expected[recipient]))
        if set(rows) != set(expected):
            raise Refused(400, "malformed", f"shares must hold one sealed message for each of the {len(expected)} "
                          f"helpers of the sender's items, missing {sorted(set(expected) - set(rows))[:5]}")

        def insert(c: sa.Connection) -> None:
            c.execute(sa.insert(s1_messages).values(task_id=task_id, round=2, user=user, message=b""))
            if rows:
                c.execute(sa.insert(s1_shares), [{"task_id": task_id, "sender": user, "recipient": k, "sealed": v}
                                                 for k, v in rows.items()])

        return self._store(task_id, 2, user, insert, sum(len(v) for v in rows.values()))

    def inbox(self, task_id: str, body: bytes) -> dict:
        """What a user needs for the open round: round 3, the items he helps with, their R2 reporters and the
        sealed shares they sent him; round 4, the dropped helpers of his items he is asked about. Empty lists
        for a user the round does not ask."""
        data = json_object(body, "the inbox request")
        user = self._authenticated(task_id, data)
        self.advance(task_id)
        with storage.reading(self.engine) as c:
            row = self._row(c, task_id)
            if row.state not in ("round3", "round4"):
                raise Refused(409, "round_closed", f"round 3 or 4 must be open; the task is {row.state}")
            reporters = json.loads(row.reporters)
            if row.state == "round4":
                asked = Recovery.from_dict(json.loads(row.recovery)).asked(reporters).get(user, {})
                return {"round": 4, "dropped": [{"item": j, "helpers": d} for j, d in asked.items()]}
            items = Election.from_dict(json.loads(row.election)).by_helper.get(user, [])
            senders = sorted({i for j in items for i in reporters[j]} - {user})
            found = c.execute(sa.select(s1_shares.c.sender, s1_shares.c.sealed).where(
                s1_shares.c.task_id == task_id, s1_shares.c.recipient == user,
                s1_shares.c.sender.in_(senders or [-1]))).all()
        return {"round": 3, "items": [{"item": j, "reporters": reporters[j]} for j in items],
                "shares": [{"sender": s, "sealed": base64.b64encode(v).decode()} for s, v in found]}

    def round_message(self, task_id: str, round_: int, body: bytes) -> str:
        """A helper's sums (round 3) or an asked reporter's recovery (round 4), sealed to S2: of the size his
        entries make, stored once."""
        task, data = self.task(task_id), json_object(body, f"round {round_}")
        user = self._authenticated(task_id, data)
        row = self._open_round(task_id, round_, user)
        self._message_fields(data, round_)
        if round_ == 3:
            entries = len(Election.from_dict(json.loads(row.election)).by_helper.get(user, []))
        else:
            asked = Recovery.from_dict(json.loads(row.recovery)).asked(json.loads(row.reporters)).get(user, {})
            entries = sum(len(d) for d in asked.values())
        if not entries:
            raise Refused(409, "not_expected", f"user {user} takes no part in round {round_} (he is not "
                          f"{'an elected helper' if round_ == 3 else 'a reporter of an item with a dropped helper'})")
        raw = b64_field(data.get("message"), "message", sealed_size(task.parameters, SUMS if round_ == 3 else RECOVERY,
                                                               entries))
        return self._store(task_id, round_, user, lambda c: c.execute(sa.insert(s1_messages).values(
            task_id=task_id, round=round_, user=user, message=raw)), len(raw))


    # ---- the rounds' progress ------------------------------------------------------------------------------
    def advance(self, task_id: str) -> str:
        """Close the open round if everyone it expects answered or its deadline passed, and open the next (or
        the hand-over, or fail); the task's state after. The hand-over itself is :meth:`deliver`'s."""
        task = self.task(task_id)
        p, least, role = task.parameters, task.min_survivors, self._role(task)
        with self._lock, self.engine.begin() as c:
            row = self._row(c, task_id, lock=True)
            state, now = row.state, self.clock()
            late = row.deadline is not None and now >= row.deadline
            next_deadline = now + task.round_seconds
            update: dict = {}
            if state == "enrolling":
                enrolled = c.execute(sa.select(sa.func.count()).select_from(s1_roster).where(
                    s1_roster.c.task_id == task_id)).scalar()
                if enrolled == p.n_users:
                    update = {"state": "round1", "deadline": next_deadline}
            elif state == "round1":
                sets = self._messages(c, task_id, 1)
                if len(sets) == p.n_users or late:
                    update = self._fewer(len(sets), least, "sent report sets in round 1") or {
                        "state": "round2", "deadline": next_deadline, "election": json.dumps(role.elect(
                            {u: role.check_report_set(m, u) for u, m in sets.items()}).to_dict())}
            elif state == "round2":
                election = Election.from_dict(json.loads(row.election))
                posted = sorted(self._messages(c, task_id, 2))
                if len(posted) == len(election.senders) or late:
                    sets = {u: role.check_report_set(m, u).tolist() for u, m in self._messages(c, task_id, 1).items()
                            if u in posted}
                    update = self._fewer(len(posted), least, "sent their shares in round 2") or {
                        "state": "round3", "deadline": next_deadline, "survivors": json.dumps(posted),
                        "reporters": json.dumps([list(r) for r in FirstServer.reporters(sets, p.domain_size)])}
            elif state == "round3":
                election = Election.from_dict(json.loads(row.election))
                summed = sorted(self._messages(c, task_id, 3))
                if len(summed) == len(election.by_helper) or late:
                    plan = FirstServer.plan(election, json.loads(row.reporters), summed)
                    update = {"state": "round4" if plan.dropped else "handover",
                              "deadline": next_deadline if plan.dropped else None,
                              "recovery": json.dumps(plan.to_dict())}
            elif state == "round4":
                asked = Recovery.from_dict(json.loads(row.recovery)).asked(json.loads(row.reporters))
                if len(self._messages(c, task_id, 4)) == len(asked) or late:
                    update = {"state": "handover", "deadline": None}
            if update:
                c.execute(sa.update(s1_tasks).where(s1_tasks.c.task_id == task_id).values(**update))
                log_event(log, "round", task=task_id, state=update["state"])
        return update.get("state", state)

    @staticmethod
    def _fewer(count: int, least: int, what: str) -> dict:
        """The failed state when fewer than the task's minimum answered; empty otherwise."""
        if count >= least:
            return {}
        return {"state": "failed", "deadline": None, "outcome": (
            f"{count} users {what}, fewer than the task's minimum of {least}; nothing was handed over to S2, "
            "nothing released")}

    def close_round(self, task_id: str, round_: int) -> str:
        """The operator's early close of round ``round_`` (if it is the open one): as if its deadline passed now
        (a demo or a test whose users have all answered that will answer). The state after."""
        self.task(task_id)
        with self._lock, self.engine.begin() as c:
            if self._row(c, task_id, lock=True).state == f"round{round_}":
                c.execute(sa.update(s1_tasks).where(s1_tasks.c.task_id == task_id).values(deadline=self.clock()))
        return self.advance(task_id)

    def handover(self, task_id: str) -> Handover:
        """What S2 gets once the rounds are done: the users, the election, each item's number of R2 reporters, the
        recovery plan with the reporters asked, and the sealed sums and recoveries."""
        task = self.task(task_id)
        with storage.reading(self.engine) as c:
            row = self._row(c, task_id)
            if row.state not in ("handover", "delivered"):
                raise Refused(409, "not_done", f"task {task_id} is in {row.state}: the rounds are not done")
            sums, recoveries = self._messages(c, task_id, 3), self._messages(c, task_id, 4)
        election, reporters = Election.from_dict(json.loads(row.election)), json.loads(row.reporters)
        plan = Recovery.from_dict(json.loads(row.recovery))
        return Handover(task.parameters.n_users, election.senders, tuple(json.loads(row.survivors)), election.helpers,
                        tuple(len(r) for r in reporters),
                        {j: (d, tuple(reporters[j])) for j, d in plan.dropped.items()}, sums, recoveries)

    def deliver(self, task_id: str) -> str:
        """Send the hand-over to S2 if the rounds are done and S2 does not have it yet; the state after
        ("delivered" once S2 took it; a failure is logged, and the next call sends it again)."""
        task = self.task(task_id)
        with storage.reading(self.engine) as c:
            row = self._row(c, task_id)
        if row.state != "handover":
            return row.state
        body = json.dumps(self.handover(task_id).to_dict()).encode()
        try:
            self.send(row.second_url, task.second_task_id, row.relay_token, body)
        except Exception as err:  # S2 away or refusing: sent again at the next tick
            self.handovers.labels("failed").inc()
            log.warning("hand-over not delivered", extra={"fields": {"task": task_id, "error": type(err).__name__,
                                                                      "detail": str(err)[:200]}})
            return "handover"
        self.handovers.labels("delivered").inc()
        with self._lock, self.engine.begin() as c:
            c.execute(sa.update(s1_tasks).where(s1_tasks.c.task_id == task_id, s1_tasks.c.state == "handover").values(
                state="delivered"))
        log_event(log, "handed over", task=task_id, bytes=len(body))
        return "delivered"

    def state(self, task_id: str) -> dict:
        task = self.task(task_id)
        self.advance(task_id)
        with storage.reading(self.engine) as c:
            row = self._row(c, task_id)
        election = None if row.election is None else Election.from_dict(json.loads(row.election))
        plan = None if row.recovery is None else Recovery.from_dict(json.loads(row.recovery))
        return {"task": task.to_dict(), "state": row.state,
                "seconds_left": None if row.deadline is None else max(0.0, row.deadline - self.clock()),
                "senders": None if election is None else len(election.senders),
                "survivors": None if row.survivors is None else len(json.loads(row.survivors)),
                "helpers": None if election is None else len(election.by_helper),
                "items_to_recover": None if plan is None else sorted(plan.dropped),
                "items_lost": None if plan is None else list(plan.lost), "failed": row.outcome}

    def active(self) -> list[str]:
        with storage.reading(self.engine) as c:
            return c.execute(sa.select(s1_tasks.c.task_id).where(s1_tasks.c.state.in_(
                ("round1", "round2", "round3", "round4", "handover")))).scalars().all()


class FirstRounds:
    """What the :class:`Ticker` drives at S1: every open task's rounds, and the hand-over of those done."""

    def __init__(self, service: FirstService) -> None:
        self.service = service

    def active(self) -> list[str]:
        return self.service.active()

    def advance(self, task_id: str) -> None:
        if self.service.advance(task_id) == "handover":
            self.service.deliver(task_id)


# ---- S2 ----------------------------------------------------------------------------------------------------


class SecondService:
    """S2's logic over its database; the HTTP routes (:func:`create_second_app`) only call it."""

    def __init__(self, engine: sa.Engine, registry: CollectorRegistry | None = None, *,
                 kek: KeyEncryptionKey) -> None:
        kek.check_stored(engine, s2_tasks)  # refused before any key is opened, naming the KEK that sealed them
        self.engine, self.kek = engine, kek
        self.health = Health()
        self._tasks: dict[str, SecondTask] = {}
        self._lock = threading.Lock()
        self.registry = registry or CollectorRegistry()
        self.received = Counter("privagg_s2_handovers_received", "Hand-overs stored", registry=self.registry)
        self.refused = Counter("privagg_s2_refused", "Requests refused, nothing stored", ["reason"],
                               registry=self.registry)
        self.unopened = Counter("privagg_s2_unopened", "Sealed sums and recoveries that would not open or decode",
                                registry=self.registry)

    def create_task(self, parameters, min_survivors: int | None = None) -> tuple[SecondTask, str]:
        """A new task with its own HPKE key pair (sealed under the KEK), and the relay token S1 must show (returned
        once, kept hashed).
        ``min_survivors`` defaults to n (every user must take part to the end): set it lower to release despite
        dropouts."""
        from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey

        key, token = X25519PrivateKey.generate(), new_token()
        task = SecondTask(secrets.token_hex(TASK_ID_BYTES), parameters,
                          parameters.n_users if min_survivors is None else min_survivors,
                          key.public_key().public_bytes_raw())
        with self.engine.begin() as c:
            c.execute(sa.insert(s2_tasks).values(task_id=task.task_id, task=json.dumps(task.to_dict()),
                                                 sealed_key=self.kek.seal(key.private_bytes_raw(), task.task_id),
                                                 kek_id=self.kek.kek_id, relay_hash=secret_hash(token),
                                                 state="waiting"))
        log_event(log2, "task created", task=task.task_id, protocol=parameters.protocol, users=parameters.n_users)
        return task, token

    def task(self, task_id: str) -> SecondTask:
        return load_task(self.engine, s2_tasks, SecondTask, task_id, self._tasks)

    def _row(self, c: sa.Connection, task_id: str, lock: bool = False):
        query = sa.select(s2_tasks).where(s2_tasks.c.task_id == task_id)
        return c.execute(query.with_for_update() if lock else query).one()

    def receive(self, task_id: str, authorization: str | None, body: bytes) -> str:
        """S1's hand-over, shown with the relay token: checked (:meth:`SecondServer.check`) and stored once; the
        same hand-over again is taken as already received, another refused (409)."""
        task = self.task(task_id)
        with storage.reading(self.engine) as c:
            relay_hash = self._row(c, task_id).relay_hash
        given = (authorization or "").removeprefix("Bearer ")
        if not authorization or not authorization.startswith("Bearer ") or not hmac.compare_digest(
                secret_hash(given), relay_hash):
            raise Refused(401, "unauthenticated", "a hand-over must carry Authorization: Bearer and the relay token "
                          "S2 gave for this task")
        try:
            SecondServer(task.parameters, task.min_survivors).check(Handover.from_dict(json_object(body,
                                                                                                   "the hand-over")))
        except ParameterError as err:
            raise Refused(400, "bad_handover", str(err)) from None
        digest = hashlib.sha256(body).digest()
        with self._lock, self.engine.begin() as c:
            row = self._row(c, task_id, lock=True)
            if row.handover_digest is not None:
                if hmac.compare_digest(row.handover_digest, digest):
                    return "already received"
                raise Refused(409, "handover_differs", "S2 already holds another hand-over for this task")
            c.execute(sa.update(s2_tasks).where(s2_tasks.c.task_id == task_id).values(
                state="received", handover=body, handover_digest=digest))
        self.received.inc()
        log_event(log2, "hand-over received", task=task_id, bytes=len(body))
        return "received"

    def advance(self, task_id: str) -> str:
        """Release a received hand-over (or fail it, saying why); the task's state after."""
        task = self.task(task_id)
        with self._lock, self.engine.begin() as c:
            row = self._row(c, task_id, lock=True)
            if row.state != "received":
                return row.state
            try:
                outcome, state = self._release(task, row), "released"
            except ParameterError as err:
                outcome, state = {"failed": f"nothing was released: {err}"}, "failed"
            c.execute(sa.update(s2_tasks).where(s2_tasks.c.task_id == task_id).values(
                state=state, outcome=json.dumps(outcome), handover=None))
        log_event(log2, "release", task=task_id, state=state)
        return state

    def _release(self, task: SecondTask, row) -> dict:
        from ..pipelines import Analysis
        from ..reports import Collection, Dropouts, Engine, report_document

        start = time.perf_counter()
        handover = Handover.from_dict(json.loads(row.handover))
        suite, key = _suite(KEM), _private_key(KEM, self.kek.open(row.sealed_key, task.task_id))
        opened: dict[int, dict[int, bytes]] = {SUMS: {}, RECOVERY: {}}
        unopened = 0
        for kind, sealed in ((SUMS, handover.sums), (RECOVERY, handover.recoveries)):
            for sender, blob in sealed.items():
                try:
                    opened[kind][sender] = suite.decrypt(blob, key, info=second_info(task.task_id, kind, sender))
                except Exception:  # InvalidTag, a malformed encapsulation: it does not open
                    unopened += 1
        released = SecondServer(task.parameters, task.min_survivors).release(handover, opened[SUMS], opened[RECOVERY],
                                                                             unopened)
        table, p = released.table, released.parameters
        self.unopened.inc(table.malformed)
        privacy = dataclasses.replace(released.privacy, randomness=SERVICE_RANDOMNESS)
        analysis = Analysis.of(p) if table.full_domain else Analysis.of(p, table.items, full_domain=False)
        report = analysis.report(table, privacy, Engine("local", 1, seconds={"release": time.perf_counter() - start}),
                                 top=table.estimates.size,
                                 collection=Collection(released.survivors, 1, unopened, table.malformed - unopened))
        report.dropouts = Dropouts(released.enrolled, released.senders, released.survivors, task.min_survivors)
        out = report_document(report)
        helpers = {h for hs in handover.helpers for h in hs}
        out["dropouts"].update(helpers=len(helpers), helpers_without_sum=len(helpers - set(handover.sums)),
                               recovered_items=list(released.recovered),
                               lost_items=[{"item": j, "reason": why} for j, why in sorted(released.lost.items())])
        return out

    def state(self, task_id: str) -> dict:
        task = self.task(task_id)
        self.advance(task_id)
        with storage.reading(self.engine) as c:
            row = self._row(c, task_id)
        return {"task": task.to_dict(), "state": row.state}

    def result(self, task_id: str) -> dict:
        self.task(task_id)
        state = self.advance(task_id)
        with storage.reading(self.engine) as c:
            row = self._row(c, task_id)
        if state == "failed":
            raise Refused(409, "failed", json.loads(row.outcome)["failed"])
        if state != "released":
            raise Refused(409, "not_released", f"task {task_id} is {state}: nothing is released yet")
        return json.loads(row.outcome)

    def active(self) -> list[str]:
        with storage.reading(self.engine) as c:
            return c.execute(sa.select(s2_tasks.c.task_id).where(s2_tasks.c.state == "received")).scalars().all()


def create_tasks(first: FirstService, second: SecondService, parameters, second_url: str,
                 round_seconds: float = 60.0, min_survivors: int | None = None) -> TSSTask:
    """A task on both servers, from one process that opens both databases (a demo, a test; across machines, do
    the two steps: :meth:`SecondService.create_task`, then :meth:`FirstService.create_task` with S2's public task
    from ``GET {second_url}/tasks/{id}``, its URL and the relay token)."""
    second_task, token = second.create_task(parameters, min_survivors)
    return first.create_task(parameters, second_task, second_url, token, round_seconds)


# ---- the HTTP services -------------------------------------------------------------------------------------


def create_first_app(service: FirstService, max_body_bytes: int = 1 << 30, tick: float | None = 0.5, *,
                     operator_token: str | None = None, api_docs: bool = False,
                     limits: Limits | None = None) -> FastAPI:
    """S1's HTTP service (``tick=None``: rounds advance only on requests, and the hand-over waits for
    :meth:`FirstService.deliver`)."""
    app, body = rounds_app("privagg TSS S1", service, log, max_body_bytes, FirstRounds(service), tick,
                           operator_token=operator_token, api_docs=api_docs, limits=limits)
    user_routes(app, service, body, (1, 2, 3, 4), (3, 4), operator_token)

    @app.post("/tasks/{task_id}/election")
    async def election(task_id: str, request: Request) -> dict:
        return await run_in_threadpool(service.election, task_id, await body(request))

    @app.post("/tasks/{task_id}/round2")
    async def round2(task_id: str, request: Request) -> JSONResponse:
        return JSONResponse({"status": await run_in_threadpool(service.round2, task_id, await body(request))},
                            status_code=201)

    return app


def create_second_app(service: SecondService, max_body_bytes: int = 1 << 30, tick: float | None = 0.5, *,
                      operator_token: str | None = None, api_docs: bool = False,
                      limits: Limits | None = None) -> FastAPI:
    """S2's HTTP service (``tick=None``: a received hand-over is released when its state or result is asked)."""
    app, body = rounds_app("privagg TSS S2", service, log2, max_body_bytes, tick=tick, operator_token=operator_token,
                           api_docs=api_docs, limits=limits)

    @app.post("/tasks/{task_id}/handover")
    async def handover(task_id: str, request: Request) -> JSONResponse:
        raw = await body(request)
        status = await run_in_threadpool(service.receive, task_id, request.headers.get("authorization"), raw)
        return JSONResponse({"status": status}, status_code=202 if status == "received" else 200)

    @app.get("/tasks/{task_id}/result")
    async def result(task_id: str) -> dict:
        return await run_in_threadpool(service.result, task_id)

    return app


def open_first_server(db_url: str, registry: CollectorRegistry | None = None,
                      second_ca: str | None = None) -> FirstService:
    """S1 over its existing database at ``db_url`` (a service makes no database); its hand-overs check S2's TLS
    certificate against ``second_ca`` (or the system's CAs)."""
    return FirstService(storage.connect(db_url, "s1", create=False), registry,
                        send=functools.partial(post_handover, ca_file=second_ca))


def open_second_server(db_url: str, registry: CollectorRegistry | None = None, *,
                       kek: KeyEncryptionKey) -> SecondService:
    """S2 over its existing database at ``db_url`` (a service makes no database)."""
    return SecondService(storage.connect(db_url, "s2", kek=kek, create=False), registry, kek=kek)
