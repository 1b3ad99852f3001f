"""TSS's two servers as services (FastAPI): S1 (roster, report sets, election, relay, rounds with deadlines)
and S2 (the hand-over, the release), each with its own database and keys.

The users are SDK clients (:mod:`privagg.service.two_servers.client`) with their own HPKE key pairs; they talk
to S1 only. The protocol is :mod:`privagg.protocols.two_server_parties`' (derivation: docs/privacy.md,
"Dropouts in TSS"). A task is made on S2 first (:meth:`SecondService.create_task`: its id, an HPKE key pair
whose private half never leaves S2's database, and a relay token for S1), then on S1 with S2's public task, S2's
URL and the relay token (:meth:`FirstService.create_task`; :func:`create_tasks` does both). The task users
fetch from S1 carries S2's task id and public key, to seal what only S2 may open. S1 runs the rounds the
protocol declares (``two_server_parties.ROUNDS``) on the round driver (:mod:`privagg.service.rounds`), as the
sharing server runs DPDS's. Once all n enrolled:

round 1   report: a user posts his report set A_i (to S1, in the clear over TLS). R1: who posted by the
          deadline. S1 elects each item's helpers among R1, has S2 attest the election (``POST /tasks/{id}/election``
          at S2, with the relay token; S2 signs it with its identity key for the task, in the task users hold),
          and serves it with S2's signature and the helpers' public keys (round 2's inbox).
round 2   share: a reporter posts his shares, one message per helper, each sealed to it (the task and both users
          bound as HPKE's info); stored whole or not at all; S1 can open none. R2: who posted by the deadline.
round 3   sums: a helper fetches his inbox (his items, their R2 reporters, the sealed shares they sent him) and posts
          his per-item sums sealed to S2. S1 cannot open them; as the round closes it asks S2 which do not open
          (``POST /tasks/{id}/sums`` at S2), and their senders count as helpers who sent none.
round 4   recover: only if helpers missed round 3: each asked R2 reporter fetches the dropped helpers of his items and
          posts his shares to them, sealed to S2.
hand-over S1 posts S2 the users, the election, the sealed sums and recoveries with their senders' signatures, its
          task and roster as the organisation signed them (``POST /tasks/{id}/handover`` at S2, with the relay
          token), until S2 has it; S2 checks each signature under the organisation's key in its own task
          (:func:`check_senders`), opens them, checks them and releases the items it can complete, with the
          guarantee recomputed for R2 (``GET /tasks/{id}/result`` at S2). A hand-over of S1's that does not check
          fails the task at S2, naming the field, and at S1 once S2 answers its delivery 409 ``failed``
          (:meth:`SecondService.receive`: what can fail a task, and what cannot).

Fewer than the task's minimum in R1 or R2 fails the task at S1 (nothing is handed over, nothing released).
Every message is stored once (primary keys; a second post is refused 409 and stores nothing), in committed
transactions, so a kill -9 loses nothing: the rounds resume from the database with their absolute deadlines,
and the hand-over is sent again until S2 has it (S2 takes the same hand-over twice as once).

S1's routes: the round driver's (``POST /tasks/{id}/enroll``, ``/inbox``, ``/round1`` to ``/round4``, ``GET
/tasks/{id}/roster``, the operator's ``POST /tasks/{id}/close-round/{round}``) and ``GET /tasks/{id}``. S2's: ``GET
/tasks/{id}``, S1's (with the relay token) ``POST /tasks/{id}/election``, ``/sums``, ``/handover`` and
``/withdraw`` (the undo of a create S1 refused), ``GET /tasks/{id}/result``. Both: ``/healthz``, ``/readyz``,
``/metrics``. If S2 does not answer while S1 closes round 1 or 3, the round stays open past its deadline and closes
at a later tick.
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

from ...core import identity
from ...errors import ParameterError
from ...protocols.two_server_election import check_election
from ...protocols.two_server_messages import RECOVERY, SHARES, SUMS, survivors_bitmap
from ...protocols.two_server_parties import Election, Handover, SecondServer
from .. import storage
from ..roster import load_task, new_token, rounds_app, secret_hash
from ..round_tasks import KEM, SecondTask, TSSTask, counted_digest, second_info
from ..rounds import FAILED, RELEASING, RUNNING, RoundDriver, protocol_of, round_routes
from ..keys import KeyEncryptionKey
from ..tasks import TASK_ID_BYTES, _private_key, _suite
from ..web import Health, Limits, Refused, json_object, log_event, loopback_only, require_bearer, shown
from .second_client import SecondAway, SecondClient
from .senders import check_senders, check_sums_signed

log = logging.getLogger("privagg.s1")
HANDOVER, DELIVERED = "handover", "delivered"  # S1's status once the rounds are done: to hand over, handed over
log2 = logging.getLogger("privagg.s2")

SERVICE_RANDOMNESS = ("secure: each user's SDK draws his coin, report set and shares from ChaCha20 keyed from OS "
                      "entropy, and S1 elects the helpers from it (privagg.service.two_servers.client)")

# ---- S1's tables: the round driver's (service/rounds.py) -------------------------------------------------
s1_tasks = sa.Table(
    "s1_tasks", storage.metadata["s1"],
    sa.Column("task_id", sa.String(32), primary_key=True),
    sa.Column("task", sa.Text, nullable=False),  # the task's public JSON (TSSTask)
    sa.Column("status", sa.String(16), nullable=False),  # enrolling, running, handover (to S2), delivered, failed
    sa.Column("round", sa.Integer, nullable=False),  # the open round's number (1 report, 2 share, 3 sums, 4 recover)
    sa.Column("round_name", sa.String(32)),
    sa.Column("deadline", sa.Float),  # the open round's end (seconds since the epoch)
    sa.Column("published", sa.Text, nullable=False),  # the election, R2, each item's reporters, the recovery (JSON)
    sa.Column("outcome", sa.Text),  # why the task failed (JSON)
    sa.Column("second_url", sa.Text, nullable=False),  # where the hand-over goes
    sa.Column("relay_token", sa.Text, nullable=False),  # S1's credential at S2 for this task
    *storage.identity_columns(),
)
s1_tokens = sa.Table(
    "s1_tokens", storage.metadata["s1"],
    *storage.token_columns(),
)
s1_roster = sa.Table(
    "s1_roster", storage.metadata["s1"],
    *storage.roster_columns(),
)
s1_messages = sa.Table(  # round 1: the report set; 2: an empty record that he shared; 3, 4: sealed to S2
    "s1_messages", storage.metadata["s1"],
    sa.Column("task_id", sa.String(32), primary_key=True),
    sa.Column("round", sa.Integer, primary_key=True),
    sa.Column("user", sa.Integer, primary_key=True),
    sa.Column("message", sa.LargeBinary, nullable=False),
    sa.Column("signature", sa.LargeBinary),  # the sender's Ed25519 signature of the message
)
s1_relayed = sa.Table(  # round 2's shares, each sealed to its helper: S1 cannot open them
    "s1_relayed", storage.metadata["s1"],
    sa.Column("task_id", sa.String(32), primary_key=True),
    sa.Column("round", sa.Integer, primary_key=True),
    sa.Column("sender", sa.Integer, primary_key=True),
    sa.Column("recipient", sa.Integer, primary_key=True),
    sa.Column("sealed", sa.LargeBinary, nullable=False),
    sa.Column("signature", sa.LargeBinary),  # the sender's Ed25519 signature of the sealed bytes
    sa.Index("s1_relayed_to", "task_id", "round", "recipient", "sender"),  # a helper's inbox
    sqlite_with_rowid=False,
)
S1_TABLES = {"tasks": s1_tasks, "messages": s1_messages, "relayed": s1_relayed, "tokens": s1_tokens,
             "roster": s1_roster}

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
    sa.Column("counted", sa.LargeBinary(32)),  # SHA-256 of the R2 and |R_j| S2 opened the sums with (round 3)
    sa.Column("elected", sa.LargeBinary(32)),  # SHA-256 of the one election S2 attested (round 1)
    sa.Column("outcome", sa.Text),  # the release's JSON, or why nothing was released
)


def post_handover(url: str, task_id: str, token: str, body: bytes, timeout: float = 60.0,
                  ca_file: str | None = None) -> bytes:
    """S1's delivery of a hand-over: ``POST {url}/tasks/{task_id}/handover`` with the relay token; the answer's body.
    S2's refusal (4xx) raises :class:`Refused` with its reason (``failed``: S2 failed the task); no answer anything
    else (the ticker sends it again). Over https, S2's certificate is checked against ``ca_file``, or the system's."""
    return _post(f"{url.rstrip('/')}/tasks/{task_id}/handover", token, body, timeout, ca_file)


def _post(url: str, token: str, body: bytes, timeout: float, ca_file: str | None) -> bytes:
    """The answer's body to ``POST url`` with the relay token; S2's refusal (4xx) raises :class:`Refused`."""
    import ssl
    import urllib.error

    request = urllib.request.Request(url, data=body, method="POST",
                                     headers={"content-type": "application/json", "authorization": f"Bearer {token}"})
    context = None if ca_file is None else ssl.create_default_context(cafile=ca_file)
    try:
        with urllib.request.urlopen(request, timeout=timeout, context=context) as answer:
            return answer.read()
    except urllib.error.HTTPError as err:
        if not 400 <= err.code < 500:
            raise
        try:
            answer = json.loads(err.read())
        except ValueError:
            answer = {}
        answer = answer if isinstance(answer, dict) else {}
        raise Refused(err.code, str(answer.get("error", "refused")), str(answer.get("detail", ""))) from None


def ask_second(url: str, task_id: str, route: str, token: str, body: bytes, timeout: float = 10.0,
               ca_file: str | None = None) -> dict:
    """S1's question to S2 while it closes a round (``route``: ``election``, to attest it; ``sums``, which do not
    open): ``POST {url}/tasks/{task_id}/{route}`` with the relay token; S2's answer (JSON). S2's refusal (4xx)
    raises :class:`Refused` with its reason; no answer raises anything else (the round closes at a later tick)."""
    return json.loads(_post(f"{url.rstrip('/')}/tasks/{task_id}/{route}", token, body, timeout, ca_file))


def withdraw_second(url: str, task_id: str, token: str, timeout: float = 10.0, ca_file: str | None = None) -> None:
    """The undo of S2's task when S1's side of the create was refused (its budget): ``POST
    {url}/tasks/{task_id}/withdraw`` with the relay token (:meth:`SecondService.withdraw`). S2's refusal raises
    :class:`Refused`; no answer, anything else."""
    _post(f"{url.rstrip('/')}/tasks/{task_id}/withdraw", token, b"{}", timeout, ca_file)


def second_identity(private_key: bytes, task_id: str) -> bytes:
    """S2's Ed25519 identity key for a task, derived (HKDF-SHA256) from the task's X25519 private key it keeps sealed
    under its KEK: a key of its own purpose, stored nowhere else."""
    from cryptography.hazmat.primitives.hashes import SHA256
    from cryptography.hazmat.primitives.kdf.hkdf import HKDF

    return HKDF(SHA256(), identity.KEY_BYTES, salt=None,
                info=b"privagg tss S2 identity " + bytes.fromhex(task_id)).derive(private_key)


# ---- S1 ----------------------------------------------------------------------------------------------------


class FirstService(RoundDriver):
    """S1 over its database: the round driver over S1's tables (the rounds of
    :mod:`privagg.protocols.two_server_parties`), and the hand-over to S2 once they are done; the HTTP routes
    (:func:`create_first_app`) only call it.

    ``clock``: seconds since the epoch (deadlines are stored as such, so a restarted server keeps them).
    ``send``: how a hand-over reaches S2 (:func:`post_handover`; a test passes S2's service directly)."""

    def __init__(self, engine: sa.Engine, registry: CollectorRegistry | None = None, clock=time.time,
                 send=post_handover, ask=ask_second) -> None:
        super().__init__(engine, S1_TABLES, TSSTask, "S1", "s1", lambda task, handed, seconds: {}, registry, clock,
                         done=HANDOVER)
        self.send, self.ask = send, ask
        self.handovers = Counter("privagg_s1_handovers", "Hand-overs to S2 by outcome", ["outcome"],
                                 registry=self.registry)

    def create_task(self, parameters, second: SecondTask, second_url: str, relay_token: str,
                    round_seconds: float = 60.0) -> TSSTask:
        """A new task for S2's ``second`` (its parameters and minimum the task's) at ``second_url``, ``relay_token``."""
        if second.parameters.to_dict() != parameters.to_dict():
            raise ParameterError("second task", "S2's task of these parameters", second.parameters.to_dict())
        if not isinstance(second_url, str) or not second_url.startswith(("http://", "https://")):
            raise ParameterError("second_url", "S2's http:// or https:// URL", shown(second_url))
        if not isinstance(relay_token, str) or not relay_token:
            raise ParameterError("relay_token", "the token S2 gave for this task", shown(relay_token))
        with storage.reading(self.engine) as c:  # S2's token is its task's: one S1 task each (a reviewer's finding)
            other = c.execute(sa.select(s1_tasks.c.task_id).where(s1_tasks.c.relay_token == relay_token)).first()
        if other is not None:  # (S2 takes one hand-over a task: a second task's users would answer for nothing)
            raise ParameterError("second task", "an S2 task no other task of this S1 uses",
                                 f"{second.task_id}, S2's task of S1's task {other.task_id} already")
        task = TSSTask(secrets.token_hex(TASK_ID_BYTES), parameters, round_seconds, second.min_survivors,
                       second.task_id, second.public_key, second.identity_key)
        self.add_task(task, second_url=second_url, relay_token=relay_token)
        return task

    def _close(self, c, task, protocol, coordinator, *args, **kwargs) -> dict:
        """The round driver's close (:class:`RoundDriver`), with S1's coordinator asking S2 over its routes
        (:class:`SecondClient`: the election attested as round 1 closes, the sums that do not open as round 3
        does). S2 away: nothing changes, the round stays open past its deadline and closes at a later tick."""
        row = self._row(c, task.task_id)
        coordinator.second = SecondClient(self.ask, row.second_url, task, row.relay_token,
                                          functools.partial(self._signed_sums, c, task, row))
        try:
            return super()._close(c, task, protocol, coordinator, *args, **kwargs)
        except SecondAway as err:
            log.warning("S2 did not answer: the round closes later", extra={"fields": {"task": task.task_id,
                                                                                       "error": str(err)}})
            return {}

    def _signed_sums(self, c, task, row) -> tuple[dict[int, bytes], dict, dict | None]:
        """What S2 checks the round-3 sums by before it opens any (:func:`check_sums_signed`): each helper's
        signature as S1 stored it, S1's task and its roster as the organisation signed them."""
        m, number = s1_messages.c, protocol_of(task.parameters).number("sums")
        signatures = dict(c.execute(sa.select(m.user, m.signature).where(m.task_id == task.task_id,
                                                                          m.round == number)).all())
        return (signatures, *self._signed_task(task, row))

    def _signed_task(self, task, row) -> tuple[dict, dict | None]:
        """S1's task and its roster as the organisation signed them (what S2 checks S1's signatures under)."""
        signed, roster = row.task_signature, self.signed_roster(task.task_id)
        return {"task": task.to_dict(), "signature": None if signed is None else base64.b64encode(signed).decode()
                }, roster and roster.to_dict()

    def handover(self, task_id: str) -> Handover:
        """What S2 gets once the rounds are done (:meth:`FirstServer.finish`: the users, the election, each item's
        number of R2 reporters, the recovery plan with the reporters asked, and the sealed sums and recoveries),
        with what S2 checks them by (:func:`check_senders`): each one's signature as S1 stored it, the task and the
        roster as the organisation signed them."""
        task = self.task(task_id)
        protocol = protocol_of(task.parameters)
        numbers = {protocol.number(name): kind for name, kind in (("share", SHARES), ("sums", SUMS),
                                                                  ("recover", RECOVERY))}
        with storage.reading(self.engine) as c:
            row = self._row(c, task_id)
            if row.status not in (HANDOVER, DELIVERED):
                raise Refused(409, "not_done", f"task {task_id} is in {self.label(row)}: the rounds are not done")
            messages = self._messages(task_id, protocol)
            m = s1_messages.c
            signatures = {(numbers[k], user): signature for k, user, signature in c.execute(
                sa.select(m.round, m.user, m.signature).where(m.task_id == task_id, m.round.in_(numbers)))}
        handover = self._coordinator(task).finish(self._state(task_id, row.published), messages)
        signed_task, roster = self._signed_task(task, row)
        return dataclasses.replace(handover, signatures=signatures, task=signed_task, roster=roster)

    def deliver(self, task_id: str) -> str:
        """Send the hand-over to S2 if the rounds are done and S2 does not have it yet; the state after
        ("delivered" once S2 took it; "failed" if S2 failed the task, saying why; else the failure is logged, and
        the next call sends it again)."""
        task = self.task(task_id)
        with storage.reading(self.engine) as c:
            row = self._row(c, task_id)
        if row.status != HANDOVER:
            return self.label(row)
        body = json.dumps(self.handover(task_id).to_dict()).encode()
        try:
            self.send(row.second_url, task.second_task_id, row.relay_token, body)
        except Refused as err:
            if err.reason == "failed":  # S2 failed the task (a hand-over of S1's that did not check): S1 says so
                return self._failed_at_second(task_id, err.detail)
            self._not_delivered(task_id, err.reason, err.detail)
            return HANDOVER
        except Exception as err:  # S2 away: sent again at the next tick
            self._not_delivered(task_id, type(err).__name__, str(err))
            return HANDOVER
        self.handovers.labels("delivered").inc()
        with self._lock, self.engine.begin() as c:
            c.execute(sa.update(s1_tasks).where(s1_tasks.c.task_id == task_id, s1_tasks.c.status == HANDOVER).values(
                status=DELIVERED))
        log_event(log, "handed over", task=task_id, bytes=len(body))
        return DELIVERED

    def _not_delivered(self, task_id: str, error: str, detail: str) -> None:
        self.handovers.labels("failed").inc()
        log.warning("hand-over not delivered", extra={"fields": {"task": task_id, "error": error,
                                                                  "detail": detail[:200]}})

    def _failed_at_second(self, task_id: str, why: str) -> str:
        """S2 failed the task on its hand-over: the task fails at S1 too, with S2's reason (its state and the
        users' poll say it); nothing is sent again."""
        self.handovers.labels("refused").inc()
        with self._lock, self.engine.begin() as c:
            c.execute(sa.update(s1_tasks).where(s1_tasks.c.task_id == task_id, s1_tasks.c.status == HANDOVER).values(
                status=FAILED, outcome=json.dumps({"failed": f"S2 failed the task: {why[:500]}"})))
        log.warning("S2 failed the task", extra={"fields": {"task": task_id, "detail": why[:200]}})
        return FAILED

    def state(self, task_id: str) -> dict:
        """The round driver's state, and what S1 published: helpers, items to recover or lost, why the task failed."""
        out = super().state(task_id)
        task = self.task(task_id)
        coordinator = self._coordinator(task)
        with storage.reading(self.engine) as c:  # the state kept for the round (the lists are O(n): not a request's)
            row = self._status(c, task_id)
            published = self._round_state(c, task_id, row, coordinator, protocol_of(task.parameters)).state
            failed = None if row.status != FAILED else json.loads(c.execute(sa.select(s1_tasks.c.outcome).where(
                s1_tasks.c.task_id == task_id)).scalar_one())["failed"]
        election = None if "election" not in published else coordinator.election(published)
        plan = published.get("recovery")  # Recovery.to_dict's
        return {**out, "senders": None if election is None else len(election.senders),
                "survivors": len(published["survivors"]) if "survivors" in published else None,
                "helpers": None if election is None else len(election.by_helper),
                "items_to_recover": None if plan is None else sorted(e["item"] for e in plan["dropped"]),
                "items_lost": None if plan is None else list(plan["lost"]), "failed": failed}

    def active(self) -> list[str]:
        """The tasks whose rounds run, and those whose hand-over S2 does not have yet."""
        with storage.reading(self.engine) as c:
            return c.execute(sa.select(s1_tasks.c.task_id).where(s1_tasks.c.status.in_((RUNNING, RELEASING, HANDOVER)))
                             ).scalars().all()


class FirstRounds:
    """What the :class:`Ticker` drives at S1: every open task's rounds, and the hand-over of those done."""

    def __init__(self, service: FirstService) -> None:
        self.service = service

    def active(self) -> list[str]:
        return self.service.active()

    def advance(self, task_id: str) -> None:
        if self.service.advance(task_id) == HANDOVER:
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
        self.failed = Counter("privagg_s2_handovers_failed", "Tasks failed by a hand-over of S1's that does not check",
                              registry=self.registry)
        self.refused = Counter("privagg_s2_refused", "Requests refused, nothing stored", ["reason"],
                               registry=self.registry)
        self.unopened = Counter("privagg_s2_unopened", "Sealed sums and recoveries that would not open or decode",
                                registry=self.registry)
        self.attested = Counter("privagg_s2_elections_attested", "Elections of S1 attested", registry=self.registry)

    def create_task(self, parameters, min_survivors: int | None = None, *,
                    organisation_key: bytes) -> tuple[SecondTask, str]:
        """A new task with its own HPKE key pair (sealed under the KEK), and the relay token S1 must show (returned
        once, kept hashed). ``organisation_key``: the public key of the organisation that signs S1's task and roster
        (S2 checks the hand-over under it), from the organisation, never from S1. ``min_survivors`` defaults to n
        (every user must take part to the end): set it lower to release despite dropouts."""
        from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey

        key, token, task_id = X25519PrivateKey.generate(), new_token(), secrets.token_hex(TASK_ID_BYTES)
        task = SecondTask(task_id, parameters, parameters.n_users if min_survivors is None else min_survivors,
                          key.public_key().public_bytes_raw(),
                          identity.public_key(second_identity(key.private_bytes_raw(), task_id)), organisation_key)
        with self.engine.begin() as c:
            c.execute(sa.insert(s2_tasks).values(task_id=task.task_id, task=json.dumps(task.to_dict()),
                                                 sealed_key=self.kek.seal(key.private_bytes_raw(), task.task_id),
                                                 kek_id=self.kek.kek_id, relay_hash=secret_hash(token),
                                                 state="waiting"))
        log_event(log2, "task created", task=task.task_id, protocol=parameters.protocol, users=parameters.n_users)
        return task, token

    def task(self, task_id: str) -> SecondTask:
        return load_task(self.engine, s2_tasks, SecondTask, task_id, self._tasks)

    def withdraw(self, task_id: str, authorization: str | None) -> str:
        """Remove a task, its key with it, at S1's request (the relay token) while it waits for a hand-over: the undo
        of a create that S1's side refused (its budget; :func:`create_tasks`, ``privagg task create
        --second-task``), so that a refused task leaves nothing behind on either server. 409 ``not_waiting`` once
        S2 holds a hand-over, released or failed the task (S1 could only stall the task otherwise)."""
        self.task(task_id)
        self._from_first(task_id, authorization, "a withdrawal")
        with self._lock, self.engine.begin() as c:
            state = self._row(c, task_id, lock=True).state
            if state != "waiting":
                raise Refused(409, "not_waiting", f"task {task_id} is {state}: only a task waiting for its hand-over "
                              "is withdrawn")
            c.execute(sa.delete(s2_tasks).where(s2_tasks.c.task_id == task_id))
        self._tasks.pop(task_id, None)
        log_event(log2, "task withdrawn", task=task_id)
        return "withdrawn"

    def _row(self, c: sa.Connection, task_id: str, lock: bool = False):
        query = sa.select(s2_tasks).where(s2_tasks.c.task_id == task_id)
        return c.execute(query.with_for_update() if lock else query).one()

    def _from_first(self, task_id: str, authorization: str | None, what: str):
        """The task's row if ``authorization`` is S1's relay token for it, else 401."""
        with storage.reading(self.engine) as c:
            row = self._row(c, task_id)
        given = (authorization or "").removeprefix("Bearer ")
        if not authorization or not authorization.startswith("Bearer ") or not hmac.compare_digest(
                secret_hash(given), row.relay_hash):
            raise Refused(401, "unauthenticated", f"{what} must carry Authorization: Bearer and the relay token S2 "
                          "gave for this task")
        return row

    def _keys(self, task: SecondTask, row) -> tuple[bytes, bytes]:
        """(the task's X25519 private key, S2's identity key for it), opened under the KEK."""
        private = self.kek.open(row.sealed_key, task.task_id)  # a task of an older release too: S2 derives its key
        return private, second_identity(private, task.task_id)

    def _election(self, task: SecondTask, data) -> Election:
        try:
            election = Election.from_dict(data.get("election") if isinstance(data, dict) else None)
            check_election(task.parameters, election, task.min_survivors)
        except ParameterError as err:
            raise Refused(400, "bad_election", str(err)) from None
        return election

    def attest(self, task_id: str, authorization: str | None, body: bytes) -> dict:
        """S1's election as round 1 closes, shown with the relay token: attested (S2's signature with its identity
        key for the task, :meth:`SecondServer.attest`) if it keeps the rules, else 400 ``bad_election`` naming
        the field. S2 attests one election a task (its digest kept: the same one again gets the same signature,
        Ed25519 being deterministic; another is refused 409 ``election_differs``), and opens the sums and takes the
        hand-over only under it: an S1 that had two attested, or showed S2 another as round 3 closes, could
        otherwise choose which helpers back an item (a fourth review's attack: docs/privacy.md, "A helper's lists")."""
        task = self.task(task_id)
        row = self._from_first(task_id, authorization, "an election")
        election = self._election(task, json_object(body, "the election"))
        signature, _ = SecondServer(task.parameters, task.min_survivors, identity=self._keys(task, row)[1]).attest(
            election)
        self._keep(task_id, "elected", hashlib.sha256(election.document(task.parameters)).digest(),
                   "election_differs", "S2 attested another election for this task")
        self.attested.inc()
        log_event(log2, "election attested", task=task_id, helpers=len(election.by_helper))
        return {"signature": base64.b64encode(signature).decode()}

    def open_sums(self, task_id: str, authorization: str | None, body: bytes) -> dict:
        """The helpers' sealed sums as round 3 closes, with the election, R2 and each item's |R_j|, shown with the
        relay token: R2 and the |R_j| checked (:meth:`SecondServer.counted`: 400 ``bad_counts``) and kept (their
        digest: another R2 or |R_j| later is refused 409 ``counts_differ``, and the hand-over is held to them) before
        any sum is opened, each with them as its seal binds; the helpers whose sum does not open or decode
        (:meth:`SecondServer.unopened`), which S1 treats as dropped. It opens them again from the hand-over."""
        task = self.task(task_id)
        row = self._from_first(task_id, authorization, "the sums")
        data = json_object(body, "the sums")
        election = self._election(task, data)
        if not self._attested(task, row, election):
            raise Refused(409, "not_attested", "S2 opens the sums only under the election it attested for this task")
        entries, survivors, reporters = data.get("sums"), data.get("survivors"), data.get("reporters")
        if not isinstance(entries, list) or not all(isinstance(e, dict) and type(e.get("helper")) is int and
                                                    isinstance(e.get("sealed"), str) for e in entries):
            raise Refused(400, "malformed", "sums must be a list of {\"helper\", \"sealed\"} (base64)")
        second, sealed = SecondServer(task.parameters, task.min_survivors), {e["helper"]: e["sealed"] for e in entries}
        try:
            if not all(isinstance(v, list) and all(type(u) is int for u in v) for v in (survivors, reporters)):
                raise ParameterError("sums.survivors", "lists of integers: R2 and each item's |R_j|", None)
            second.counted(election, survivors, reporters, "sums")
        except ParameterError as err:
            raise Refused(400, "bad_counts", str(err)) from None
        self._keep(task_id, "counted", counted_digest(survivors, reporters), "counts_differ",
                   "S1 named S2 another R2 or other |R_j| before, for this task")
        try:  # every sum its helper's, and every item with R2 reporters one, before any is opened
            signatures = {e.get("helper"): base64.b64decode(e.get("signature") or "", validate=True)
                          for e in data.get("signatures") or []}
            check_sums_signed(task, data.get("task"), data.get("roster"), {
                h: base64.b64decode(v, validate=True) for h, v in sealed.items()}, signatures)
            second.backed(election, sealed, reporters)
        except (ParameterError, ValueError, TypeError, AttributeError) as err:
            raise Refused(400, "bad_counts", str(err)) from None
        unopened = second.unopened(election, self._opened(task, row, sealed, election, survivors, reporters),
                                   survivors, reporters)
        self.unopened.inc(len(unopened))
        log_event(log2, "sums checked", task=task_id, sums=len(entries), unopened=len(unopened))
        return {"unopened": unopened}

    def _keep(self, task_id: str, column: str, digest: bytes, reason: str, detail: str) -> None:
        """Keep ``digest`` in the task's ``column`` (what S2 committed to: the election it attested, the R2 and
        |R_j| it opened the sums with), or refuse another than the one kept (409 ``reason``)."""
        with self._lock, self.engine.begin() as c:
            kept = getattr(self._row(c, task_id, lock=True), column)
            if kept is not None and not hmac.compare_digest(kept, digest):
                raise Refused(409, reason, detail)
            c.execute(sa.update(s2_tasks).where(s2_tasks.c.task_id == task_id).values({column: digest}))

    @staticmethod
    def _attested(task: SecondTask, row, election: Election) -> bool:
        """Whether ``election`` is the one S2 attested for the task (:meth:`attest`)."""
        return row.elected is not None and hmac.compare_digest(row.elected, hashlib.sha256(election.document(
            task.parameters)).digest())

    def _opened(self, task: SecondTask, row, sums: dict, election: Election, survivors, reporters) -> dict:
        """The helpers' sums sealed to S2 (bytes, or base64 text), opened (None: one that does not open), each with
        R2 and the |R_j| of his items as its seal binds them."""
        suite, key, opened = _suite(KEM), _private_key(KEM, self._keys(task, row)[0]), {}
        bitmap, served = survivors_bitmap(survivors, task.parameters.n_users), election.by_helper
        for helper, blob in sums.items():
            try:
                raw = base64.b64decode(blob, validate=True) if isinstance(blob, str) else blob
                info = second_info(task.task_id, SUMS, helper, counted=(bitmap, [reporters[j] for j in served[helper]]))
                opened[helper] = suite.decrypt(raw, key, info=info)
            except Exception:  # not base64, InvalidTag, a malformed encapsulation, not a helper: it does not open
                opened[helper] = None
        return opened

    def receive(self, task_id: str, authorization: str | None, body: bytes) -> str:
        """S1's hand-over, shown with the relay token: checked (:meth:`SecondServer.check`, and each sealed message
        its sender's: :func:`check_senders`) and stored once; the same hand-over again is taken as already
        received, another refused (409 ``handover_differs``).

        What fails the task (docs/privacy.md, "Dishonest parties"): a hand-over authenticated as S1's (the relay
        token, which S2 gave S1 alone, checked before anything else: without it 401 and nothing changes) that
        does not check while the task waits for one. It proves S1 dishonest: an honest S1 checked each
        signature as it stored the message and hands over only what checks, so nothing later from it is to be
        relied on. The task turns ``failed``, naming the field, and this and every later hand-over are refused
        409 ``failed`` (S1 records it). What does not fail it, as it proves nothing about the users' messages: a
        body that is no hand-over of this version (400 ``bad_handover``: cut in transit, or an S1 of another
        release; S1 sends it again), and anything once the task holds a hand-over (the same one replayed is
        taken as already received, another refused 409) or was released."""
        task = self.task(task_id)
        row = self._from_first(task_id, authorization, "a hand-over")
        try:
            handover = Handover.from_dict(json_object(body, "the hand-over"))
        except ParameterError as err:
            raise Refused(400, "bad_handover", str(err)) from None
        try:
            second = SecondServer(task.parameters, task.min_survivors)
            second.check(handover)
            if not self._attested(task, row, handover.election):
                raise ParameterError("handover.election", "the election S2 attested for this task", "another")
            if row.counted is not None and not hmac.compare_digest(row.counted, counted_digest(
                    handover.survivors, handover.reporters)):
                raise ParameterError("handover.survivors", "the R2 and |R_j| S1 named S2 as round 3 closed (the "
                                     "sums were opened with them)", "others")
            check_senders(task, handover)
            opened = self._opened(task, row, handover.unopened_sums, handover.election, handover.survivors,
                                  handover.reporters)
            opens = sorted(set(handover.unopened) - set(second.unopened(handover.election, opened, handover.survivors,
                                                                               handover.reporters, every=False)))
            if opens:
                raise ParameterError(f"handover.unopened_sums[{opens[0]}]", "a sum that does not open (S2 names its "
                                     "helper)", "one that opens: S1 named him unopened, or S2 said so at round 3")
            bad = None
        except ParameterError as err:
            bad = err
        digest = hashlib.sha256(body).digest()
        with self._lock, self.engine.begin() as c:
            row = self._row(c, task_id, lock=True)
            if row.state == "failed":
                raise Refused(409, "failed", json.loads(row.outcome)["failed"])
            if bad is not None and row.state == "waiting":
                why = (f"S1's hand-over does not check ({bad}), which an honest S1's always does: S2 failed the "
                       "task, nothing was released")
                c.execute(sa.update(s2_tasks).where(s2_tasks.c.task_id == task_id).values(
                    state="failed", outcome=json.dumps({"failed": why})))
            elif bad is not None:
                raise Refused(400, "bad_handover", str(bad))
            elif row.handover_digest is not None:
                if hmac.compare_digest(row.handover_digest, digest):
                    return "already received"
                raise Refused(409, "handover_differs", "S2 already holds another hand-over for this task")
            else:
                c.execute(sa.update(s2_tasks).where(s2_tasks.c.task_id == task_id).values(
                    state="received", handover=body, handover_digest=digest))
        if bad is not None:
            self.failed.inc()
            log_event(log2, "hand-over failed the task", task=task_id, field=bad.field)
            raise Refused(409, "failed", why)
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
        from ...pipelines import Analysis
        from ...reports import Collection, Dropouts, Engine, report_document

        start = time.perf_counter()
        handover = Handover.from_dict(json.loads(row.handover))
        suite, key = _suite(KEM), _private_key(KEM, self.kek.open(row.sealed_key, task.task_id))
        asked = handover.asked()  # (recoveries: the plan's helpers)
        opened = {SUMS: self._opened(task, row, handover.sums, handover.election, handover.survivors,
                                     handover.reporters), RECOVERY: {}}
        for sender, blob in handover.recoveries.items():
            try:
                opened[RECOVERY][sender] = suite.decrypt(blob, key, info=second_info(task.task_id, RECOVERY, sender,
                                                                                     asked.get(sender, {})))
            except Exception:  # InvalidTag, a malformed encapsulation: it does not open
                opened[RECOVERY][sender] = None
        unopened = sum(v is None for kind in opened.values() for v in kind.values())
        opened = {kind: {u: v for u, v in values.items() if v is not None} for kind, values in opened.items()}
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
                               unopened_sums=list(released.unopened), recovered_items=list(released.recovered),
                               lost_items=[{"item": j, "reason": why} for j, why in sorted(released.lost.items())])
        out["trust"] = released.trust
        return out

    def state(self, task_id: str) -> dict:
        """The task, its state (waiting, received, released, failed) and why it failed (None otherwise)."""
        task = self.task(task_id)
        self.advance(task_id)
        with storage.reading(self.engine) as c:
            row = self._row(c, task_id)
        return {"task": task.to_dict(), "state": row.state,
                "failed": json.loads(row.outcome)["failed"] if row.state == "failed" else None}

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
                 round_seconds: float = 60.0, min_survivors: int | None = None, *,
                 organisation_key: bytes) -> TSSTask:
    """A task on both servers, from one process that opens both databases (a demo, a test; across machines, do
    the two steps: :meth:`SecondService.create_task`, then :meth:`FirstService.create_task` with S2's public task
    from ``GET {second_url}/tasks/{id}``, its URL and the relay token), for the organisation of ``organisation_key``
    (which signs S1's task). Both or neither: S2's task is withdrawn (:meth:`SecondService.withdraw`) if S1 refuses
    its own (its population's budget: a ParameterError saying so)."""
    second_task, token = second.create_task(parameters, min_survivors, organisation_key=organisation_key)
    try:
        return first.create_task(parameters, second_task, second_url, token, round_seconds)
    except Exception as err:  # S1 refused (its budget, a parameter): S2's task goes too, nothing is left behind
        second.withdraw(second_task.task_id, f"Bearer {token}")
        if isinstance(err, ParameterError):
            err.args = (f"{err}; S2's task {second_task.task_id} was withdrawn: nothing is left on either server",)
        raise


# ---- the HTTP services -------------------------------------------------------------------------------------


def create_first_app(service: FirstService, max_body_bytes: int = 1 << 30, tick: float | None = 0.5, *,
                     operator_token: str | None = None, api_docs: bool = False,
                     limits: Limits | None = None) -> FastAPI:
    """S1's HTTP service: the round driver's routes (``tick=None``: rounds advance only on requests, and the
    hand-over waits for :meth:`FirstService.deliver`)."""
    app, body = rounds_app("privagg TSS S1", service, log, max_body_bytes, FirstRounds(service), tick,
                           operator_token=operator_token, api_docs=api_docs, limits=limits)
    round_routes(app, service, body, operator_token)
    return app


def create_second_app(service: SecondService, max_body_bytes: int = 1 << 30, tick: float | None = 0.5, *,
                      operator_token: str | None = None, api_docs: bool = False, limits: Limits | None = None,
                      result_token: str | None = None) -> FastAPI:
    """S2's HTTP service (``tick=None``: a received hand-over is released when its state or result is asked). Its
    result route asks for ``result_token``, or without one answers this host only: S1 must not see the release
    (docs/privacy.md, "The release and S1"), and it was open to anyone who reached the port."""
    app, body = rounds_app("privagg TSS S2", service, log2, max_body_bytes, tick=tick, operator_token=operator_token,
                           api_docs=api_docs, limits=limits)

    @app.post("/tasks/{task_id}/handover")
    async def handover(task_id: str, request: Request) -> JSONResponse:
        raw = await body(request)
        status = await run_in_threadpool(service.receive, task_id, request.headers.get("authorization"), raw)
        return JSONResponse({"status": status}, status_code=202 if status == "received" else 200)

    @app.post("/tasks/{task_id}/withdraw")
    async def withdraw(task_id: str, request: Request) -> dict:
        await body(request)
        return {"status": await run_in_threadpool(service.withdraw, task_id, request.headers.get("authorization"))}

    @app.post("/tasks/{task_id}/election")
    async def election(task_id: str, request: Request) -> dict:
        raw = await body(request)
        return await run_in_threadpool(service.attest, task_id, request.headers.get("authorization"), raw)

    @app.post("/tasks/{task_id}/sums")
    async def sums(task_id: str, request: Request) -> dict:
        raw = await body(request)
        return await run_in_threadpool(service.open_sums, task_id, request.headers.get("authorization"), raw)

    @app.get("/tasks/{task_id}/result")
    async def result(task_id: str, request: Request) -> dict:
        if result_token is None:
            loopback_only(request, "result_token", "the release is its owner's, never S1's")
        require_bearer(request, result_token, "the release is its owner's, never S1's: Authorization must be Bearer "
                       "followed by S2's result token")
        return await run_in_threadpool(service.result, task_id)

    return app


def open_first_server(db_url: str, registry: CollectorRegistry | None = None,
                      second_ca: str | None = None) -> FirstService:
    """S1 over its existing database at ``db_url`` (a service makes no database; refused if another process serves
    it: :mod:`~privagg.service.process_lock`); its hand-overs check S2's TLS certificate against ``second_ca``."""
    return FirstService(storage.serving(db_url, "s1"), registry,
                        send=functools.partial(post_handover, ca_file=second_ca),
                        ask=functools.partial(ask_second, ca_file=second_ca))


def open_second_server(db_url: str, registry: CollectorRegistry | None = None, *,
                       kek: KeyEncryptionKey) -> SecondService:
    """S2 over its existing database at ``db_url`` (a service makes no database; refused if another process serves
    it: :mod:`~privagg.service.process_lock`)."""
    return SecondService(storage.serving(db_url, "s2", kek=kek), registry, kek=kek)
