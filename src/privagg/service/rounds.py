"""The round driver: one stored state machine that runs every multi-round protocol's task (the Janus job-driver
shape: state in the database, stepped generically).

A protocol is its registry entry's :class:`~privagg.protocols.roles.MultiRound` declaration: its rounds as data
and the coordinator role that says, round by round, whom it expects, what it checks, what a user's inbox holds
and what it publishes when it closes. The driver knows none of that. A task's row holds the open round's number
and name, its deadline, the coordinator's published state (JSON) and, once done, the outcome; every message a
user sends the server is a row (task, round, user), every message he relays to another party a row (task, round,
sender, recipient), sealed to its recipient. So a new round is a declaration and a role's method: the driver,
its tables, its routes and the users' SDK (:class:`RoundClient`) take it as it comes.

Each round runs from its start until every user it expects has answered (``early``) or its deadline passes
(``deadline`` x the task's round_seconds); it then closes with at least its minimum of answers (the
coordinator's :meth:`~privagg.protocols.roles.Coordinator.minimum`), or the task fails and nothing is released.
A message after the close is refused (``late``: 409 ``round_closed``; a retry of one that arrived, 409
``already_sent``); an invalid one is refused and nothing stored (``invalid``: 400), and its sender may send a
valid one while the round is open. Every message is stored once (primary keys), in committed transactions, so
a kill -9 loses nothing: the rounds resume from the database with their absolute deadlines. After the last
round the coordinator's ``finish`` gives what the service keeps (the sharing server's release; S1's hand-over).

No key and no message comes from the server alone (docs/privacy.md, "Dishonest parties"): the rounds open once the
task's organisation has signed the roster (:meth:`RoundDriver.publish_roster`, after ``privagg roster sign``
checked every enrollment's binding), and run over its users only (those it left out are round-1 dropouts); the
coordinator reads their identity keys as ``state["identities"]``. Every answer carries its sender's Ed25519
signature of his message to the server (empty when he sends none) and of each message he relays (with what its
round ``binds``), for the task, round, sender and recipient (:func:`~privagg.service.round_tasks.message_context`);
the driver checks each against the signed roster (403 ``bad_signature``), stores it and relays it with the message.

Routes (:func:`round_routes`): ``POST /tasks/{id}/enroll``, ``POST /tasks/{id}/inbox`` (the open round's inbox
for the user: the coordinator's fields, the earlier messages it carries with their ``signatures``, the messages
relayed to him with theirs, his recipients' public keys from the signed roster), ``POST /tasks/{id}/round{k}``
(his answer to round k: ``message`` to the server, ``signature``, and the round's relay as a list of
``{"recipient", "sealed", "signature"}``), ``GET /tasks/{id}/roster`` (the signed roster, whole), ``GET
/tasks/{id}/roster/entries?users=i,j,...`` (those users' entries with their inclusion proofs, binary), ``POST
/tasks/{id}/close-round/{k}`` (the operator's: closes the open round now, as its deadline would). The inbox and
round routes take binary bodies (:mod:`~privagg.service.round_wire`: bytes as bytes; an inbox asked so is answered
so), as the SDK sends them, or JSON with base64 (a hand-made request); the others are JSON.
"""

from __future__ import annotations

import base64
import json
import logging
import threading
import time
from collections.abc import Callable
from contextlib import nullcontext
from dataclasses import dataclass

import sqlalchemy as sa
from fastapi import Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import JSONResponse, Response
from prometheus_client import CollectorRegistry, Counter

from ..core import identity
from ..errors import ParameterError
from ..protocols.registry import get
from ..protocols.roles import MultiRound, Round, RoundFailed, encode_inbox
from . import round_wire, storage
from .ledger import DEFAULT_POPULATION, charge_round_task
from .roster import Roster, b64_field, load_task
from .round_messages import MessageCache, StoredMessages
from .round_tasks import KEM, SignedRoster, check_task, message_context
from .tasks import KEMS, TAG_BYTES
from .web import Health, Refused, ServiceApp, content_type, json_object, log_event, require_operator, shown

SEAL_BYTES = KEMS[KEM][2] + TAG_BYTES  # what sealing adds to a message: HPKE's encapsulated key and tag
ENROLLING, RUNNING, RELEASING, RELEASED, FAILED = "enrolling", "running", "releasing", "released", "failed"  # status
ROSTER_FIELDS = ("identities", "graph_seed")  # what the coordinator's state takes from the signed roster
RELEASE_WAIT = 30.0  # seconds a request for the result waits for a release another thread computes (then 409)
CACHE_BYTES = 1 << 30  # stored messages kept in memory (the complete graph's commitments at n = 2,000: 256 MB)


def protocol_of(parameters) -> MultiRound:
    """The rounds and roles of the parameters' protocol (its registry entry's)."""
    return get(parameters.protocol).rounds


class RoundDriver:
    """Stores and advances the tasks of a multi-round server over its database: the tasks table (``tasks``: the
    task, ``round``, ``round_name``, ``status``, ``deadline``, ``published``, ``outcome``), the tokens and roster
    (:class:`~privagg.service.roster.Roster`), the messages to the server (``messages``) and the relayed ones
    (``relayed``). ``finished(task, handed, seconds)`` turns what the coordinator hands over after the last round
    (computed in ``seconds``) into the task's outcome (a JSON object), and the task's status becomes ``done``
    (``released``; S1's ``handover``, until S2 has it). ``clock``: seconds since the epoch (deadlines stored so)."""

    def __init__(self, engine: sa.Engine, tables: dict[str, sa.Table], task_type: type, name: str, metric: str,
                 finished: Callable[[object, object, float], dict], registry: CollectorRegistry | None = None,
                 clock=time.time, done: str = RELEASED) -> None:
        self.engine, self.clock, self.task_type, self.name, self.finished = engine, clock, task_type, name, finished
        self.done = done
        self.log = logging.getLogger(f"privagg.{metric}")
        self.tasks, self.messages, self.relayed = tables["tasks"], tables["messages"], tables["relayed"]
        self.health = Health()
        self._tasks: dict = {}
        self._rosters: dict = {}
        self._cache = MessageCache(CACHE_BYTES)
        self._counts: dict[tuple[str, int], int] = {}  # (task, round) -> answers stored (:meth:`_answered`)
        self._rounds: dict[str, RoundState] = {}  # task -> its state as last read (:meth:`_round_state`)
        self._running: dict[str, tuple] = {}  # task -> its status and round state while it runs (:meth:`_now`)
        self._coordinators: dict[str, object] = {}  # task -> its coordinator (:meth:`_coordinator`)
        self._releasing: dict[str, threading.Event] = {}  # the releases this process computes (:meth:`_release`)
        self._lock = threading.Lock()
        self.users = Roster(engine, tables["tokens"], tables["roster"], self._lock)
        self.registry = registry or CollectorRegistry()
        self.accepted = Counter(f"privagg_{metric}_messages_accepted", "Round messages stored", ["round"],
                                registry=self.registry)
        self.refused = Counter(f"privagg_{metric}_refused", "Requests refused, nothing stored", ["reason"],
                               registry=self.registry)
        self.relayed_bytes = Counter(f"privagg_{metric}_relayed_bytes", "Sealed bytes stored for relay",
                                     registry=self.registry)

    # ---- tasks, tokens, the roster -------------------------------------------------------------------------
    population = DEFAULT_POPULATION  # the ledger's population new tasks are charged to (issue 49: service/ledger.py)

    def add_task(self, task, **columns) -> None:
        """Store a new task (enrolling), with the service's own ``columns``."""
        with self.engine.begin() as c:
            c.execute(sa.insert(self.tasks).values(task_id=task.task_id, task=json.dumps(task.to_dict()), round=0,
                                                   status=ENROLLING, published="{}", **columns))
            charge_round_task(c, task, self.population)
        log_event(self.log, "task created", task=task.task_id,
                  protocol=task.parameters.protocol, users=task.parameters.n_users)

    def task(self, task_id: str):
        return load_task(self.engine, self.tasks, self.task_type, task_id, self._tasks)

    def issue_tokens(self, task_id: str, count: int) -> list[str]:
        """``count`` one-use enrollment tokens (only their hashes are kept); an unknown task is a ParameterError."""
        try:
            self.task(task_id)
        except Refused as err:
            raise ParameterError("task", f"a task of this {self.name}", f"{task_id} ({err.detail})") from None
        return self.users.issue(task_id, count)

    def enroll(self, task_id: str, body: bytes) -> dict:
        """A user joins the roster (:meth:`Roster.enroll`); the first round opens once the organisation signed it."""
        answer = self.users.enroll(task_id, self.task(task_id).parameters.n_users, body)
        self.advance(task_id)
        return answer

    # ---- the organisation's signatures: of the task, of the roster ---------------------------------------------
    def sign_task(self, task_id: str, organisation_key: bytes, signature: bytes) -> None:
        """Keep the organisation's key and its signature of the task's document (checked), which the task's state
        serves its devices; a task signed by another key is refused (ParameterError)."""
        task = self.task(task_id)
        check_task(task.to_dict(), base64.b64encode(signature).decode(), organisation_key, task_id)
        with self._lock, self.engine.begin() as c:
            row = self._row(c, task_id, lock=True)
            if row.organisation_key not in (None, organisation_key):
                raise ParameterError("organisation-key", "the organisation key that signed the task",
                                     "another key")
            c.execute(sa.update(self.tasks).where(self.tasks.c.task_id == task_id).values(
                organisation_key=organisation_key, task_signature=signature))

    def enrollments(self, task_id: str, complete: bool = True) -> list[dict]:
        """Each enrolled user's keys and binding for the organisation (:meth:`Roster.enrollments`), once all n
        enrolled (a ParameterError before), or as they are with ``complete`` False (--without-unenrolled)."""
        try:
            n = self.task(task_id).parameters.n_users
        except Refused as err:
            raise ParameterError("task", f"a task of this {self.name}", f"{task_id} ({err.detail})") from None
        rows = self.users.enrollments(task_id)
        if len(rows) < n and complete:
            raise ParameterError("roster", f"complete (all n = {n} users enrolled) before the organisation signs it, "
                                 "or signed without the users who did not enroll (roster sign --without-unenrolled: "
                                 "they are dropouts of round 1)", f"{len(rows)} enrolled so far")
        return rows

    def publish_roster(self, task_id: str, signed: SignedRoster) -> str:
        """The roster the organisation signed, kept and served (``GET /tasks/{id}/roster``) once checked: its
        signature under the task's organisation key, and each user it lists with the keys he enrolled. The
        rounds open with it; the users it leaves out are dropouts of round 1. The same roster again changes
        nothing; another is refused (ParameterError). The task's state after."""
        n = self.task(task_id).parameters.n_users  # (the organisation may leave out users who did not enroll)
        with storage.reading(self.engine) as c:
            row = self._row(c, task_id)
        if row.organisation_key is None:
            raise ParameterError("task", "a task its organisation signed (privagg task create --organisation-key)",
                                 f"{task_id}, unsigned")
        signed.verify(row.organisation_key)
        enrolled = {e["user"]: (e["identity_key"], e["public_key"]) for e in self.enrollments(task_id, complete=False)}
        if signed.size != n:
            raise ParameterError("roster.size", f"the task's n = {n} users", signed.size)
        wrong = [i for i, keys in signed.users.items() if enrolled.get(i) != keys]
        if wrong:
            raise ParameterError("roster", "the users as they enrolled (index, identity key, X25519 key)",
                                 f"other keys for users {wrong[:5]}")
        text = json.dumps(signed.to_dict())
        with self._lock, self.engine.begin() as c:
            row = self._row(c, task_id, lock=True)
            if row.signed_roster not in (None, text):
                raise ParameterError("roster", "signed once", "another roster: the task has one")
            c.execute(sa.update(self.tasks).where(self.tasks.c.task_id == task_id).values(signed_roster=text))
        log_event(self.log, "roster signed", task=task_id, users=len(signed.users), left_out=n - len(signed.users))
        return self.advance(task_id)

    def signed_roster(self, task_id: str) -> SignedRoster | None:
        """The roster the organisation signed (None before), kept once read (it never changes)."""
        if task_id not in self._rosters:
            with storage.reading(self.engine) as c:
                text = self._row(c, task_id).signed_roster
            if text is None:
                return None
            self._rosters[task_id] = SignedRoster.from_dict(json.loads(text), task_id)
        return self._rosters[task_id]

    def roster(self, task_id: str) -> dict:
        """The roster the organisation signed, whole (:meth:`SignedRoster.to_dict`)."""
        return self._signed(task_id).to_dict()

    def _signed(self, task_id: str) -> SignedRoster:
        """The roster the organisation signed; 409 ``roster_unsigned`` before."""
        self.task(task_id)
        signed = self.signed_roster(task_id)
        if signed is None:
            raise Refused(409, "roster_unsigned", "the organisation has not signed the roster yet (it does once all "
                          "users enrolled: privagg roster sign)")
        return signed

    def roster_entries(self, task_id: str, users: str) -> dict:
        """The signed head and the entries of the users ``users`` names (distinct roster indices, comma-separated),
        each with its inclusion proof (:meth:`SignedRoster.entries`); 400 ``malformed`` for another list."""
        signed = self._signed(task_id)
        digits = len(str(signed.size))  # an index below n has no more (and int() refuses past 4,300 digits)
        asked = users.split(",") if len(users) <= 8 * signed.size else [""]
        if not all(u.isascii() and u.isdigit() and len(u) <= digits and int(u) < signed.size for u in asked) or \
                len({int(u) for u in asked}) != len(asked):
            raise Refused(400, "malformed", f"users must be distinct roster indices in [0, {signed.size}), "
                          f"comma-separated, got {shown(users)}")
        return signed.entries([int(u) for u in asked])

    def _state(self, task_id: str, published: str) -> dict:
        """The coordinator's state: what it published, and the signed roster's identity keys
        (``state["identities"]``) and graph seed (``state["graph_seed"]``, bytes), never stored in ``published``."""
        state = json.loads(published)
        signed = self.signed_roster(task_id)
        if signed is not None:
            state["identities"], state["graph_seed"] = signed.identities(), signed.graph_seed
        return state

    @staticmethod
    def _expected(coordinator, round_: Round, state: dict) -> list[int]:
        """Whom the round waits for: the coordinator's, among the users the signed roster lists."""
        return [u for u in coordinator.expected(round_, state) if u in state.get("identities", ())]

    @staticmethod
    def _recipients(coordinator, round_: Round, user: int, state: dict, read) -> dict[int, int]:
        """The coordinator's recipients of ``user``'s relay, among the users the signed roster lists."""
        if not round_.relay:
            return {}
        return {k: v for k, v in coordinator.recipients(round_, user, state, read).items() if k in state["identities"]}

    def _signed_by(self, task_id: str, user: int, signature, message: bytes, context: bytes, field: str,
                   binary: bool) -> bytes:
        """``signature`` (bytes in a ``binary`` body, base64 in JSON) if it is ``user``'s of ``message`` in
        ``context`` under his identity key in the signed roster; 403 ``bad_signature`` naming ``field`` otherwise."""
        key = self.signed_roster(task_id).users[user][0]
        raw = b64_field(signature, field, identity.SIGNATURE_BYTES, binary)
        if not identity.verify(key, raw, context, message):
            raise Refused(403, "bad_signature", f"{field} must be user {user}'s Ed25519 signature (his identity key in "
                          "the signed roster) of this message, for this task, round and recipient")
        return raw

    # ---- what is stored ------------------------------------------------------------------------------------
    def _row(self, c: sa.Connection, task_id: str, lock: bool = False):
        query = sa.select(self.tasks).where(self.tasks.c.task_id == task_id)
        return c.execute(query.with_for_update() if lock else query).one()

    def _status(self, c: sa.Connection, task_id: str, lock: bool = False):
        """The task's row without its columns that grow with n (the published lists, the signed roster, the outcome:
        1 MB and more at n = 10^4, which every request read before): ``status``, ``round``, ``round_name``,
        ``deadline``, ``task_signature`` and ``signed`` (whether the organisation signed the roster)."""
        t = self.tasks
        query = sa.select(t.c.status, t.c.round, t.c.round_name, t.c.deadline, t.c.task_signature,
                          t.c.signed_roster.is_not(None).label("signed")).where(t.c.task_id == task_id)
        return c.execute(query.with_for_update() if lock else query).one()

    def _round_state(self, c: sa.Connection, task_id: str, row, coordinator, protocol: MultiRound) -> "RoundState":
        """The coordinator's state as ``row`` (:meth:`_status`) has the task, and whom its open round expects: read
        and parsed once per round (the published lists are O(n); a request reads none of them), kept per task. What
        is published changes only with the round or the status (:meth:`advance`), and the roster's identities
        only once it is signed, so that is what the state kept is known by. Callers get the state's own dict: they
        build new ones from it (``{**state, ...}``), never change it."""
        key = (row.status, row.round, row.signed)
        kept = self._rounds.get(task_id)
        if kept is None or kept.key != key:
            t = self.tasks
            state = self._state(task_id, c.execute(sa.select(t.c.published).where(t.c.task_id == task_id)).scalar_one())
            expected = self._expected(coordinator, protocol.rounds[row.round - 1], state) if row.status == RUNNING \
                else []
            kept = RoundState(key, state, expected, frozenset(expected))
            if row.status in (ENROLLING, RUNNING, RELEASING):
                self._rounds[task_id] = kept
            else:  # finished: a server holding many finished tasks keeps none of their O(n) state or coordinators
                self._rounds.pop(task_id, None)
                self._coordinators.pop(task_id, None)
                self.users.forget(task_id)
        return kept

    def _now(self, task_id: str, coordinator, protocol: MultiRound) -> tuple[object, "RoundState"]:
        """The task's status (:meth:`_status`) and round state (:meth:`_round_state`) as last committed: kept while
        it runs (``_running``: set under the process lock from a read in a write transaction, :meth:`_store`, and
        dropped under the lock before any transaction that changes the row, :meth:`advance`, :meth:`close_round`),
        else read in one snapshot. Only this process changes a running task's row (one server process a database,
        as the lock and the counts of answers assume); another writes only an enrolling one's (the roster's
        signature). It spares each request's reads of the row (29% of an answer's CPU at n = 3,000: part 16 of
        docs/benchmarks.md)."""
        kept = self._running.get(task_id)
        if kept is not None:
            return kept
        with storage.reading(self.engine) as c:
            row = self._status(c, task_id)
            return row, self._round_state(c, task_id, row, coordinator, protocol)

    def _locked_now(self, c: sa.Connection, task_id: str) -> tuple[object, "RoundState"]:
        """:meth:`_now` from the database, in the caller's write transaction under the process lock."""
        task = self.task(task_id)
        row = self._status(c, task_id, lock=True)
        return row, self._round_state(c, task_id, row, self._coordinator(task), protocol_of(task.parameters))

    def _coordinator(self, task):
        """The task's coordinator, made once per task (it keeps what it builds from the published lists: the
        bitmaps, the statement the survivors sign)."""
        if task.task_id not in self._coordinators:
            self._coordinators[task.task_id] = protocol_of(task.parameters).coordinator(task.parameters,
                                                                                          task.min_survivors)
        return self._coordinators[task.task_id]

    def _messages(self, task_id: str, protocol: MultiRound,
                  rounds: tuple[str, ...] | None = None) -> dict[str, "StoredMessages"]:
        """The messages users sent the server, by round name (of ``rounds`` only, when given), each round's read
        from the database as the coordinator indexes it (:class:`StoredMessages`): no query until then."""
        names = rounds if rounds is not None else [r.name for r in protocol.rounds]
        return {name: StoredMessages(self, task_id, protocol.number(name)) for name in names}

    def _message(self, task_id: str, number: int, user: int) -> bytes:
        """``user``'s message to the server in round ``number`` (KeyError: none stored), from the cache of stored
        messages (a stored message never changes: the primary keys keep the first) or one query."""
        key = (task_id, number, user)
        found = self._cache.get(key)
        if found is None:
            m = self.messages
            with storage.reading(self.engine) as c:
                found = c.execute(sa.select(m.c.message).where(m.c.task_id == task_id, m.c.round == number,
                                                               m.c.user == user)).scalar()
            if found is None:
                raise KeyError(user)
            self._cache.put(key, found)
        return found

    def _round_messages(self, task_id: str, number: int) -> dict[int, bytes]:
        """Every message users sent the server in round ``number`` (user -> bytes), in one query."""
        m = self.messages
        with storage.reading(self.engine) as c:
            return {user: message for user, message in c.execute(sa.select(m.c.user, m.c.message).where(
                m.c.task_id == task_id, m.c.round == number))}

    def _relayed_to(self, c: sa.Connection, task_id: str, number: int, user: int) -> list:
        """The (sender, sealed, signature) relayed to ``user`` in round ``number``, by sender: his senders from the
        index by recipient (it alone answers that), their rows by primary key. Asked for the rows at once, SQLite
        searched the primary key by task and round, every relayed row of the round (n k) for each inbox, as it
        prefers a covering index to one that must look each row up (48 ms an inbox at n = 2,000, k = 60)."""
        r = self.relayed
        senders = sa.select(r.c.sender).where(r.c.task_id == task_id, r.c.round == number, r.c.recipient == user)
        return c.execute(sa.select(r.c.sender, r.c.sealed, r.c.signature).where(
            r.c.task_id == task_id, r.c.round == number, r.c.recipient == user, r.c.sender.in_(senders)).order_by(
            r.c.sender)).all()

    def _answered(self, c: sa.Connection, task_id: str, number: int) -> int:
        """How many users answered round ``number`` (under the lock): counted as stored, read once after a (re)start."""
        key = (task_id, number)
        if key not in self._counts:
            m = self.messages
            self._counts[key] = c.execute(sa.select(sa.func.count()).select_from(m).where(
                m.c.task_id == task_id, m.c.round == number)).scalar_one()
        return self._counts[key]

    @staticmethod
    def label(row) -> str:
        """The task's state as users and operators read it: enrolling, round1, round2, ..., released, failed."""
        return _label(row.status, row.round)

    def _authenticated(self, task_id: str, data: dict) -> int:
        """The user a request's secret authenticates (:meth:`Roster.authenticated`), once the signed roster lists
        him (403 ``not_in_roster`` if it left him out)."""
        user = self.users.authenticated(task_id, self.task(task_id).parameters.n_users, data)
        signed = self.signed_roster(task_id)
        if signed is not None and user not in signed.users:
            raise Refused(403, "not_in_roster", f"user {user} is not in the roster the organisation signed: his "
                          "enrollment's binding did not check")
        return user

    def _sent_before(self, c: sa.Connection, task_id: str, number: int, user: int) -> None:
        """409 ``already_sent`` if ``user``'s answer to round ``number`` is stored (a device's retry of a message
        that arrived is told so, also once its round closed)."""
        m = self.messages
        if c.execute(sa.select(m.c.user).where(m.c.task_id == task_id, m.c.round == number,
                                               m.c.user == user)).first() is not None:
            raise Refused(409, "already_sent", f"user {user} already sent his round-{number} message")

    def _open(self, task_id: str, number: int | None, user: int, retry: bool = True) -> tuple[object, "RoundState"]:
        """The task's row (:meth:`_status`) and state (:meth:`_round_state`) while round ``number`` (any, when None)
        is open, else 409 (``already_sent`` for ``user``'s
        retry of a message that arrived before it closed, with ``retry``; ``round_closed`` otherwise)."""
        self.advance(task_id)
        task = self.task(task_id)
        row, kept = self._now(task_id, self._coordinator(task), protocol_of(task.parameters))
        if row.status != RUNNING or (number is not None and row.round != number):
            if number is not None and retry:
                with storage.reading(self.engine) as c:
                    self._sent_before(c, task_id, number, user)
            wanted = "a round" if number is None else f"round {number}"
            raise Refused(409, "round_closed", f"{wanted} must be open; the task is {self.label(row)}")
        return row, kept

    # ---- a user's inbox and answer -------------------------------------------------------------------------
    def inbox(self, task_id: str, data: dict) -> dict:
        """What a user needs to answer the open round (``round``, when the request ``data`` names one: 409
        ``round_closed`` unless it is the open one): its number and name, the coordinator's fields for him
        (``inbox``), the messages relayed to him (``delivers``: ``sender``, ``sealed``, ``signature``), the earlier
        messages' ``signatures`` and the public keys of the users he relays to (``public_keys``), as bytes
        (:func:`as_json` for a JSON answer); 409 ``not_expected`` if the round does not ask him."""
        user = self._authenticated(task_id, data)
        task = self.task(task_id)
        number = data.get("round")
        if number is not None and type(number) is not int:
            raise Refused(400, "malformed", f"round must be a round's number, got {shown(number)}")
        row, kept = self._open(task_id, number, user, retry=False)
        protocol = protocol_of(task.parameters)
        round_, state, coordinator = protocol.rounds[row.round - 1], kept.state, self._coordinator(task)
        if user not in kept.expecting:
            raise Refused(409, "not_expected", f"user {user} takes no part in round {row.round} ({round_.name})")
        read = self._messages(task_id, protocol, round_.reads)
        inbox = coordinator.inbox(round_, user, state, read)
        out = {"round": row.round, "name": round_.name, "inbox": inbox}
        with storage.reading(self.engine) if round_.delivers or round_.signed else nullcontext() as c:
            if round_.delivers:
                number = next(protocol.number(e.name) for e in protocol.rounds if e.relay == round_.delivers)
                out[round_.delivers] = [{"sender": s, "sealed": v, "signature": g}
                                        for s, v, g in self._relayed_to(c, task_id, number, user)]
            if round_.signed:  # earlier messages the inbox carries, each with its sender's signature
                m = self.messages
                out["signatures"] = {field: [{"sender": u, "signature": g} for u, g in c.execute(
                    sa.select(m.c.user, m.c.signature).where(m.c.task_id == task_id, m.c.round == protocol.number(
                        name), m.c.user.in_(list(inbox[field]))).order_by(m.c.user))] for field, name in round_.signed}
        if round_.relay:
            keys = self.signed_roster(task_id).users
            out["public_keys"] = [{"user": u, "public_key": keys[u][1]} for u in sorted(
                self._recipients(coordinator, round_, user, state, read))]
        return out

    def answer(self, task_id: str, number: int, data: dict, binary: bool = False) -> str:
        """A user's answer to round ``number`` (the request's ``data``, from a ``binary`` body or JSON): his message
        to the server (checked by the coordinator, or of the size it expects when sealed to another party) and his
        relayed messages (one to each recipient the coordinator names, each of its size once sealed), stored whole
        or not at all; 404 ``unknown_round`` for a round the protocol does not have."""
        task = self.task(task_id)
        protocol = protocol_of(task.parameters)
        if not 1 <= number <= len(protocol.rounds):
            raise Refused(404, "unknown_round", f"the round must be one of 1..{len(protocol.rounds)}, got {number}")
        user = self._authenticated(task_id, data)
        _, kept = self._open(task_id, number, user)
        round_, state, coordinator = protocol.rounds[number - 1], kept.state, self._coordinator(task)
        fields = {"user", "secret", "signature"} | ({"message"} if round_.to_server else set()) | (
            {round_.relay} if round_.relay else set())
        if set(data) != fields:
            raise Refused(400, "malformed", f"round {number} ({round_.name}) must be {', '.join(sorted(fields))}"
                          + (f" ({round_.relay}: a list of {{\"recipient\", \"sealed\", \"signature\"}})"
                             if round_.relay else ""))
        if user not in kept.expecting:
            raise Refused(409, "not_expected", f"user {user} takes no part in round {number} ({round_.name})")
        read = self._messages(task_id, protocol, round_.reads)
        message = b""
        if round_.to_server and round_.seal:
            message = b64_field(data["message"], "message", coordinator.message_size(round_, user, state, read) +
                                SEAL_BYTES, binary)
        elif round_.to_server:
            message = b64_field(data["message"], "message", binary=binary)
        signature = self._signed_by(task_id, user, data["signature"], message, message_context(
            task_id, number, user, None), "signature", binary)
        if round_.to_server and not round_.seal:
            try:
                coordinator.check(round_, user, message, state, read)
            except ParameterError as err:
                raise Refused(400, "bad_message", str(err)) from None
        rows = self._relayed(round_, user, data.get(round_.relay),
                             self._recipients(coordinator, round_, user, state, read), binary)
        for i, (k, (sealed, signed)) in enumerate(rows.items()):  # with what the round binds, from his message
            bound = protocol.bound(task.parameters, state.get("graph_seed"), user, k, message) if round_.binds else b""
            rows[k] = sealed, self._signed_by(task_id, user, signed, sealed + bound, message_context(
                task_id, number, user, k), f"{round_.relay}[{i}].signature", binary)

        def insert(c: sa.Connection) -> None:
            c.execute(sa.insert(self.messages), {"task_id": task_id, "round": number, "user": user, "message": message,
                                                 "signature": signature})
            if rows:
                c.execute(sa.insert(self.relayed), [{"task_id": task_id, "round": number, "sender": user,
                                                     "recipient": k, "sealed": v, "signature": g}
                                                    for k, (v, g) in rows.items()])

        return self._store(task_id, number, user, insert, sum(len(v) for v, _ in rows.values()) +
                           (len(message) if round_.seal else 0))

    @staticmethod
    def _relayed(round_: Round, user: int, entries, expected: dict[int, int],
                 binary: bool) -> dict[int, tuple[bytes, object]]:
        """The sealed messages of a round's relay, one to each recipient ``expected`` names, each of its size, with
        its signature as sent (checked by the caller)."""
        if not round_.relay:
            return {}
        if not isinstance(entries, list):
            raise Refused(400, "malformed", f"{round_.relay} must be a list of the {len(expected)} {{\"recipient\", "
                          "\"sealed\"}} the round expects")
        rows = {}
        for i, entry in enumerate(entries):
            recipient = entry.get("recipient") if isinstance(entry, dict) else None
            if type(recipient) is not int or recipient not in expected or recipient in rows:
                raise Refused(400, "bad_recipient", f"{round_.relay}[{i}].recipient must be one of the round's "
                              f"recipients, each once (not the sender {user}), got {shown(recipient)}")
            rows[recipient] = (b64_field(entry.get("sealed"), f"{round_.relay}[{i}].sealed",
                                         expected[recipient] + SEAL_BYTES, binary), entry.get("signature"))
        if len(rows) != len(expected):
            raise Refused(400, "malformed", f"{round_.relay} must hold one sealed message for each of the "
                          f"{len(expected)} recipients the round expects, missing {sorted(set(expected) - set(rows))[:5]}")
        return rows

    def _store(self, task_id: str, number: int, user: int, insert, relayed: int) -> str:
        """Store a user's answer (``insert(connection)``) once, while its round is open: 409 ``already_sent`` for a
        second one (the primary keys), ``round_closed`` if the round closed without it. ``relayed``: the sealed
        bytes the server only passes on (counted)."""
        try:
            with self._lock:
                with self.engine.begin() as c:
                    row, kept = self._running.get(task_id) or self._locked_now(c, task_id)
                    if row.status != RUNNING or row.round != number:  # closed meanwhile
                        self._sent_before(c, task_id, number, user)
                        raise Refused(409, "round_closed", f"round {number} closed before this message was stored")
                    insert(c)
                if (task_id, number) in self._counts:  # committed: counted (else counted from the database)
                    self._counts[task_id, number] += 1
                if row.status == RUNNING:
                    self._running[task_id] = row, kept
        except sa.exc.IntegrityError:
            raise Refused(409, "already_sent", f"user {user} already sent his round-{number} message") from None
        except sa.exc.DBAPIError as err:
            self.health.write_failed(f"a round message could not be stored ({type(err.orig).__name__})")
            raise
        self.health.write_succeeded()
        self.accepted.labels(str(number)).inc()
        self.relayed_bytes.inc(relayed)
        self.advance(task_id)
        return "stored"

    # ---- the rounds' progress ------------------------------------------------------------------------------
    def advance(self, task_id: str) -> str:
        """Open the first round once the roster is full; close the open round once every user it expects answered
        (``early``) or its deadline passed, and open the next one that expects someone, or finish (the outcome),
        or fail; the task's state after. Without the lock and a write transaction when nothing is due (:meth:`_due`)."""
        task = self.task(task_id)
        protocol, coordinator = protocol_of(task.parameters), self._coordinator(task)
        row, kept = self._now(task_id, coordinator, protocol)
        if not self._due(task_id, row, kept, protocol):
            return self.label(row)
        with self._lock, self.engine.begin() as c:
            self._running.pop(task_id, None)  # (before the row changes: see _now)
            row = self._status(c, task_id, lock=True)
            now, update = self.clock(), {}
            kept = self._round_state(c, task_id, row, coordinator, protocol)
            state, expected = dict(kept.state), kept.expected
            if row.status == ENROLLING:
                if row.signed:  # the organisation signed the full roster
                    update = self._next(c, task, protocol, coordinator, 1, state, now)
            elif row.status == RUNNING:
                round_ = protocol.rounds[row.round - 1]
                if (round_.early and self._answered(c, task_id, row.round) == len(expected)) or now >= row.deadline:
                    m = self.messages
                    answered = sorted(c.execute(sa.select(m.c.user).where(m.c.task_id == task_id,
                                                                          m.c.round == row.round)).scalars())
                    update = self._close(c, task, protocol, coordinator, row.round, expected, answered, state, now)
            if update:
                c.execute(sa.update(self.tasks).where(self.tasks.c.task_id == task_id).values(**update))
                log_event(self.log, "round", task=task_id, round=update.get("round"), status=update["status"],
                          process_cpu_seconds=round(time.process_time(), 2))
        status = update.get("status", row.status)
        if status == RELEASING:
            status = self._release(task_id)
        return _label(status, update.get("round", row.round))

    def _due(self, task_id: str, row, kept: "RoundState", protocol: MultiRound) -> bool:
        """Whether :meth:`advance` may change the task as ``row`` (with its round state ``kept``) has it: the
        roster signed while enrolling; the open round past its deadline, or closing early with every answer it
        expects (or its answers not counted yet in this process); a release to compute."""
        if row.status == RUNNING:
            round_, count = protocol.rounds[row.round - 1], self._counts.get((task_id, row.round))
            return count is None or self.clock() >= row.deadline or (round_.early and count == len(kept.expected))
        return row.status == RELEASING or (row.status == ENROLLING and row.signed)

    def _close(self, c, task, protocol: MultiRound, coordinator, number: int, expected: list[int],
               answered: list[int], state: dict, now: float) -> dict:
        round_ = protocol.rounds[number - 1]
        least, what = coordinator.minimum(round_)
        try:
            if len(answered) < least:
                raise RoundFailed(f"{len(answered)} of the {len(expected)} users round {number} ({round_.name}) "
                                  f"expected answered by its close, fewer than {what}: nothing was released")
            state = coordinator.close(round_, answered, state, self._messages(task.task_id, protocol))
            return self._next(c, task, protocol, coordinator, number + 1, state, now)
        except RoundFailed as err:
            return {"status": FAILED, "deadline": None, "outcome": json.dumps({"failed": str(err)})}

    def _next(self, c, task, protocol: MultiRound, coordinator, number: int, state: dict, now: float) -> dict:
        """The first round from ``number`` on that expects someone, opened; none left: ``releasing`` (the outcome
        is computed after the transaction, :meth:`_release`)."""
        for k in range(number, len(protocol.rounds) + 1):
            round_ = protocol.rounds[k - 1]
            if self._expected(coordinator, round_, state):
                return {"status": RUNNING, "round": k, "round_name": round_.name, "published": _published(state),
                        "deadline": now + round_.deadline * task.round_seconds}
        return {"status": RELEASING, "deadline": None, "published": _published(state)}

    def _release(self, task_id: str) -> str:
        """The outcome of a task whose rounds are done (``releasing``): the coordinator's ``finish`` over the stored
        messages, computed outside the lock and any write transaction (the routes answer meanwhile; another caller
        is told ``releasing``), then stored with the status ``done`` (or ``failed``, saying why) if the task is
        still releasing. A kill -9 meanwhile leaves it releasing, and the next :meth:`advance` (the tick's)
        computes it again. The status after."""
        with self._lock:
            if task_id in self._releasing:
                return RELEASING
            self._releasing[task_id] = done = threading.Event()
        try:
            task = self.task(task_id)
            protocol = protocol_of(task.parameters)
            with storage.reading(self.engine) as c:
                row = self._row(c, task_id)
            if row.status != RELEASING:
                return row.status
            start = time.perf_counter()
            try:
                handed = self._coordinator(task).finish(self._state(task_id, row.published),
                                                        self._messages(task_id, protocol))
                update = {"status": self.done, "outcome": json.dumps(self.finished(task, handed,
                                                                                   time.perf_counter() - start))}
            except RoundFailed as err:
                update = {"status": FAILED, "outcome": json.dumps({"failed": str(err)})}
            with self._lock, self.engine.begin() as c:
                if self._row(c, task_id, lock=True).status != RELEASING:
                    return self._row(c, task_id).status
                c.execute(sa.update(self.tasks).where(self.tasks.c.task_id == task_id).values(**update))
            log_event(self.log, "round", task=task_id, round=None, status=update["status"],
                      seconds=round(time.perf_counter() - start, 3), process_cpu_seconds=round(time.process_time(), 2))
            return update["status"]
        finally:
            with self._lock:
                del self._releasing[task_id]
            done.set()

    def close_round(self, task_id: str, number: int) -> str:
        """The operator's early close of round ``number`` if it is the open one, as if its deadline passed now (a demo
        or a test whose users have all answered that will answer); one already closed is left (the state says what
        came of it); one not yet open, 409 ``not_open`` (it closed nothing, a reviewer's finding). The state after."""
        self.task(task_id)
        with self._lock, self.engine.begin() as c:
            self._running.pop(task_id, None)  # (before the row changes: see _now)
            row = self._status(c, task_id, lock=True)
            if row.status == ENROLLING or (row.status == RUNNING and number > row.round):
                raise Refused(409, "not_open", f"round {number} is not open: the task is {self.label(row)}")
            if row.status == RUNNING and row.round == number:
                c.execute(sa.update(self.tasks).where(self.tasks.c.task_id == task_id).values(deadline=self.clock()))
        return self.advance(task_id)

    def state(self, task_id: str) -> dict:
        """The task, its state, the open round (number, name, seconds left) and how many each published list holds."""
        task = self.task(task_id)
        self.advance(task_id)
        with storage.reading(self.engine) as c:
            row = self._status(c, task_id)
            state = self._round_state(c, task_id, row, self._coordinator(task), protocol_of(task.parameters)).state
        published = {k: v for k, v in state.items() if k not in ROSTER_FIELDS}
        return {"task": task.to_dict(), "signature": None if row.task_signature is None else
                base64.b64encode(row.task_signature).decode(), "state": self.label(row), "round": row.round,
                "round_name": row.round_name,
                "seconds_left": None if row.deadline is None else max(0.0, row.deadline - self.clock()),
                **{name: len(value) for name, value in published.items() if isinstance(value, list)}}

    def result(self, task_id: str) -> dict:
        """The outcome once released; 409 while the rounds run, or naming why the task failed."""
        self.task(task_id)
        if self.advance(task_id) == RELEASING and task_id in self._releasing:  # another thread computes it
            self._releasing.get(task_id, _DONE).wait(RELEASE_WAIT)
        with storage.reading(self.engine) as c:
            row = self._status(c, task_id)
            outcome = None if row.status not in (FAILED, RELEASED) else c.execute(sa.select(self.tasks.c.outcome).where(
                self.tasks.c.task_id == task_id)).scalar_one()
        if row.status == FAILED:
            raise Refused(409, "failed", json.loads(outcome)["failed"])
        if row.status != RELEASED:
            raise Refused(409, "not_released", f"task {task_id} is in {self.label(row)}: nothing is released yet")
        return json.loads(outcome)

    def active(self) -> list[str]:
        with storage.reading(self.engine) as c:
            return c.execute(sa.select(self.tasks.c.task_id).where(self.tasks.c.status.in_((RUNNING, RELEASING)))
                             ).scalars().all()


@dataclass(frozen=True)
class RoundState:
    """A task's coordinator state as one round has it (:meth:`RoundDriver._round_state`): its ``key`` (status,
    round, roster signed), the ``state``, and whom the open round expects (a list, and a set to ask)."""

    key: tuple
    state: dict
    expected: list[int]
    expecting: frozenset[int]


_DONE = threading.Event()
_DONE.set()


def _published(state: dict) -> str:
    """The coordinator's state as stored: what it published, without the roster's identities and graph seed."""
    return json.dumps({k: v for k, v in state.items() if k not in ROSTER_FIELDS})


def as_json(out: dict) -> dict:
    """An inbox (:meth:`RoundDriver.inbox`) as JSON: the coordinator's fields as :func:`encode_inbox` writes them,
    every other bytes value as base64."""
    def value(v):
        if isinstance(v, bytes):
            return base64.b64encode(v).decode()
        if isinstance(v, dict):
            return {k: value(x) for k, x in v.items()}
        return [value(x) for x in v] if isinstance(v, list) else v

    return {k: encode_inbox(v) if k == "inbox" else value(v) for k, v in out.items()}


def _label(status: str, number: int) -> str:
    return f"round{number}" if status == RUNNING else status


def round_routes(app: ServiceApp, driver: RoundDriver, body, operator_token: str | None) -> None:
    """A round driver's routes: ``POST /tasks/{id}/enroll``, ``/inbox``, ``/round{k}`` for every round k of any
    protocol, ``GET /tasks/{id}/roster`` and the operator's ``POST /tasks/{id}/close-round/{k}``."""

    @app.post("/tasks/{task_id}/enroll")
    async def enroll(task_id: str, request: Request) -> JSONResponse:
        return JSONResponse(await run_in_threadpool(driver.enroll, task_id, await body(request)), status_code=201)

    async def data(request: Request, what: str) -> tuple[dict, bool]:
        """The request's fields, and whether its body is binary (round_wire.MEDIA_TYPE; else JSON)."""
        raw = await body(request, (round_wire.MEDIA_TYPE, "application/json"))
        if content_type(request) != round_wire.MEDIA_TYPE:
            return json_object(raw, what), False
        try:
            return round_wire.decode(raw, what), True
        except ParameterError as err:
            raise Refused(400, "malformed", str(err)) from None

    # a user's requests, each round (2 n a round, and his roster entries): routes of the app's own dispatch, not
    # FastAPI's middleware and routing (ServiceApp.add_hot_route: about a third of the sharing server's CPU a request)
    async def inbox(request: Request) -> Response:
        fields, binary = await data(request, "the inbox request")
        out = await run_in_threadpool(driver.inbox, request.path_params["task_id"], fields)
        return Response(round_wire.encode(out), media_type=round_wire.MEDIA_TYPE) if binary else \
            JSONResponse(as_json(out))

    async def answer(request: Request) -> JSONResponse:
        number = request.path_params["number"]
        if not (number.isascii() and number.isdigit() and len(number) <= 3):
            raise Refused(404, "unknown_round", f"the round must be a round's number, got {shown(number)}")
        fields, binary = await data(request, f"round {number}")
        return JSONResponse({"status": await run_in_threadpool(driver.answer, request.path_params["task_id"],
                                                               int(number), fields, binary)}, status_code=201)

    async def roster_entries(request: Request) -> Response:
        entries = await run_in_threadpool(driver.roster_entries, request.path_params["task_id"],
                                          request.query_params.get("users", ""))
        return Response(round_wire.encode(entries), media_type=round_wire.MEDIA_TYPE)

    app.add_hot_route("POST", "/tasks/{task_id}/inbox", inbox)
    app.add_hot_route("POST", "/tasks/{task_id}/round{number}", answer)
    app.add_hot_route("GET", "/tasks/{task_id}/roster/entries", roster_entries)

    @app.get("/tasks/{task_id}/roster")
    async def roster(task_id: str) -> dict:
        return await run_in_threadpool(driver.roster, task_id)

    @app.post("/tasks/{task_id}/close-round/{number}")
    async def close_round(task_id: str, number: int, request: Request) -> dict:
        require_operator(request, operator_token, "this route closes a round now (which can fail its task)")
        rounds = protocol_of((await run_in_threadpool(driver.task, task_id)).parameters).rounds
        if not 1 <= number <= len(rounds):
            raise Refused(400, "malformed", f"the round must be one of 1..{len(rounds)}, got {number}")
        return {"state": await run_in_threadpool(driver.close_round, task_id, number)}
