"""What the servers of the multi-round protocols share (the sharing server; TSS's S1 and S2): a task's roster of
users, each enrolled with a one-use token and his own X25519 public key, and given a secret his later requests
show (:class:`Roster`); the thread that closes late rounds (:class:`Ticker`); and the HTTP routes every round
server has (:func:`rounds_app`).

Only hashes are kept: the tokens' and the secrets' SHA-256. The tables (``tokens``: token hash, task, the roster
index it enrolled; ``roster``: task, index, public key, secret hash) are each service's own (storage.py,
two_servers.py); :class:`Roster` works on either pair.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
import logging
import secrets
import threading
import time
from contextlib import asynccontextmanager

import sqlalchemy as sa
from fastapi import FastAPI, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import JSONResponse
from prometheus_client import CollectorRegistry, Counter

from ..errors import ParameterError, check_integer
from . import storage
from .round_tasks import KEM
from .tasks import KEMS, is_hex_id
from .web import (Health, Limits, Refused, add_operations, json_object, log_event, make_app, read_body,
                  require_operator, shown)

TOKEN_BYTES, SECRET_BYTES = 24, 24


def secret_hash(secret: str) -> bytes:
    return hashlib.sha256(secret.encode()).digest()


def new_token() -> str:
    return secrets.token_urlsafe(TOKEN_BYTES)


def b64_field(text, field: str, size: int | None = None) -> bytes:
    """The bytes of a base64 request field (of ``size`` bytes when given), else 400 ``malformed`` naming it."""
    try:
        raw = base64.b64decode(text, validate=True) if isinstance(text, str) else None
    except (binascii.Error, ValueError):
        raw = None
    if raw is None or (size is not None and len(raw) != size):
        raise Refused(400, "malformed", f"{field} must be base64" + (f" of {size} bytes" if size else "") +
                      (f", got {len(raw)} bytes" if raw is not None else ""))
    return raw


class Roster:
    """Enrollment and authentication over a service's ``tokens`` and ``roster`` tables; ``lock`` is the service's
    write lock (one writer at a time in the process)."""

    def __init__(self, engine: sa.Engine, tokens: sa.Table, roster: sa.Table, lock: threading.Lock) -> None:
        self.engine, self.tokens, self.roster, self.lock = engine, tokens, roster, lock

    def issue(self, task_id: str, count: int) -> list[str]:
        """``count`` one-use enrollment tokens for ``task_id`` (the caller checked the task)."""
        issued = [new_token() for _ in range(check_integer("count", count, 1, 10**7))]
        with self.engine.begin() as c:
            c.execute(sa.insert(self.tokens), [{"token_hash": secret_hash(t), "task_id": task_id} for t in issued])
        return issued

    def enroll(self, task_id: str, n_users: int, body: bytes) -> dict:
        """A user joins the roster: his token spent, his public key kept, his index and a fresh secret returned.
        The same token and key again (a retry) get the same index and a new secret; a full roster is 409."""
        data = json_object(body, "the enrollment")
        token = data.get("token")
        if set(data) != {"token", "public_key"} or not isinstance(token, str) or not 0 < len(token) <= 256:
            raise Refused(400, "malformed", "an enrollment must be {\"token\": the issued token, \"public_key\": "
                          "base64 of the user's X25519 public key}")
        public = b64_field(data.get("public_key"), "public_key", KEMS[KEM][1])
        secret = secrets.token_urlsafe(SECRET_BYTES)
        tokens, roster = self.tokens, self.roster
        with self.lock, self.engine.begin() as c:
            row = c.execute(sa.select(tokens).where(tokens.c.token_hash == secret_hash(token))).first()
            if row is None or row.task_id != task_id:
                raise Refused(403, "bad_token", "token must be one the server issued for this task")
            if row.user is not None:
                known = c.execute(sa.select(roster.c.public_key).where(roster.c.task_id == task_id,
                                                                       roster.c.user == row.user)).scalar()
                if known != public:
                    raise Refused(409, "token_spent", "token was spent on another enrollment")
                user = row.user
                c.execute(sa.update(roster).where(roster.c.task_id == task_id, roster.c.user == user).values(
                    secret_hash=secret_hash(secret)))
            else:
                user = c.execute(sa.select(sa.func.count()).select_from(roster).where(
                    roster.c.task_id == task_id)).scalar()
                if user >= n_users:
                    raise Refused(409, "roster_full", f"the roster holds its n = {n_users} users")
                c.execute(sa.insert(roster).values(task_id=task_id, user=user, public_key=public,
                                                   secret_hash=secret_hash(secret)))
                c.execute(sa.update(tokens).where(tokens.c.token_hash == secret_hash(token)).values(user=user))
        return {"user": user, "secret": secret}

    def authenticated(self, task_id: str, n_users: int, data: dict) -> int:
        """The roster index of a request's ``user`` whose ``secret`` is the one enrollment gave him; 400 or 403."""
        user, secret = data.get("user"), data.get("secret")
        if type(user) is not int or not 0 <= user < n_users or not isinstance(secret, str):
            raise Refused(400, "malformed", f"user must be a roster index in [0, {n_users}) and secret the string "
                          "enrollment returned")
        with storage.reading(self.engine) as c:
            known = c.execute(sa.select(self.roster.c.secret_hash).where(self.roster.c.task_id == task_id,
                                                                         self.roster.c.user == user)).scalar()
        if known is None or not hmac.compare_digest(known, secret_hash(secret)):
            raise Refused(403, "bad_secret", "secret must be the one enrollment returned to this user")
        return user

    def public_keys(self, task_id: str, users=None) -> dict[int, bytes]:
        """The enrolled users' public keys (of ``users`` only, when given)."""
        query = sa.select(self.roster.c.user, self.roster.c.public_key).where(self.roster.c.task_id == task_id)
        if users is not None:
            query = query.where(self.roster.c.user.in_(list(users)))
        with storage.reading(self.engine) as c:
            return dict(c.execute(query).all())


def load_task(engine: sa.Engine, table: sa.Table, task_type: type, task_id: str, cache: dict):
    """The task ``task_id`` of a round server (its ``table``'s ``task`` JSON as ``task_type``), kept in ``cache``;
    404 ``unknown_task`` for an id that is malformed or not the server's."""
    if task_id not in cache:
        if not is_hex_id(task_id):
            raise Refused(404, "unknown_task", f"task_id must be 32 lowercase hexadecimal characters, got "
                          f"{shown(task_id)}")
        with storage.reading(engine) as c:
            text = c.execute(sa.select(table.c.task).where(table.c.task_id == task_id)).scalar()
        if text is None:
            raise Refused(404, "unknown_task", f"task_id must name a task of this server, got {task_id}")
        cache[task_id] = task_type.from_dict(json.loads(text), verify=False)
    return cache[task_id]


def _already(user: int, round_: int) -> str:
    return f"user {user} already sent his round-{round_} message"


class RoundServer:
    """What a round server that users enroll with does the same way (the sharing server, S1): its tasks (rows of
    ``tasks_table``, loaded as ``task_type``), tokens and enrollment over its :class:`Roster` (``self.users``),
    authentication, storing a round message once, and refusing a message of a round that is not open. A subclass
    has ``advance(task_id)``."""

    tasks_table: sa.Table
    messages_table: sa.Table  # a row per user and round he answered (task_id, round, user)
    task_type: type
    server_name: str

    def __init__(self, engine: sa.Engine, tokens: sa.Table, roster: sa.Table, metric: str, relayed: str,
                 registry: CollectorRegistry | None = None, clock=time.time) -> None:
        """``metric``: the prefix of its counters (``privagg_{metric}_...``); ``relayed``: what its relayed-bytes
        counter counts."""
        self.engine, self.clock = engine, clock
        self.health = Health()
        self._tasks: dict = {}
        self._lock = threading.Lock()
        self.users = Roster(engine, tokens, roster, self._lock)
        self.registry = registry or CollectorRegistry()
        self.accepted = Counter(f"privagg_{metric}_messages_accepted", "Round messages stored", ["round"],
                                registry=self.registry)
        self.refused = Counter(f"privagg_{metric}_refused", "Requests refused, nothing stored", ["reason"],
                               registry=self.registry)
        self.relayed = Counter(f"privagg_{metric}_relayed_bytes", relayed, registry=self.registry)

    def task(self, task_id: str):
        return load_task(self.engine, self.tasks_table, self.task_type, task_id, self._tasks)

    def issue_tokens(self, task_id: str, count: int) -> list[str]:
        """``count`` one-use enrollment tokens (only their hashes are kept); an unknown task is a ParameterError."""
        try:
            self.task(task_id)
        except Refused as err:
            raise ParameterError("task", f"a task of this {self.server_name}", f"{task_id} ({err.detail})") from None
        return self.users.issue(task_id, count)

    def enroll(self, task_id: str, body: bytes) -> dict:
        """A user joins the roster (:meth:`Roster.enroll`); round 1 opens with the n-th."""
        answer = self.users.enroll(task_id, self.task(task_id).parameters.n_users, body)
        self.advance(task_id)
        return answer

    def _row(self, c: sa.Connection, task_id: str, lock: bool = False):
        query = sa.select(self.tasks_table).where(self.tasks_table.c.task_id == task_id)
        return c.execute(query.with_for_update() if lock else query).one()

    def _authenticated(self, task_id: str, data: dict) -> int:
        return self.users.authenticated(task_id, self.task(task_id).parameters.n_users, data)

    def _store(self, task_id: str, round_: int, user: int, insert, relayed: int) -> str:
        """Store a user's round message (``insert(connection)``, which writes his row of ``messages_table``) once,
        while its round is open: 409 ``already_sent`` for a second one (the primary keys; also once the round
        closed, so that a device's retry of a message that arrived is told so), ``round_closed`` if the round
        closed without it. ``relayed``: the sealed bytes among it that the server only passes on (counted)."""
        try:
            with self._lock, self.engine.begin() as c:
                if self._row(c, task_id, lock=True).state != f"round{round_}":  # closed meanwhile
                    self._sent_before(c, task_id, round_, user)
                    raise Refused(409, "round_closed", f"round {round_} closed before this message was stored")
                insert(c)
        except sa.exc.IntegrityError:
            raise Refused(409, "already_sent", _already(user, round_)) from None
        except sa.exc.DBAPIError as err:
            self.health.write_failed(f"a round message could not be stored ({type(err.orig).__name__})")
            raise
        self.health.write_succeeded()
        self.accepted.labels(str(round_)).inc()
        self.relayed.inc(relayed)
        self.advance(task_id)
        return "stored"

    def _sent_before(self, c: sa.Connection, task_id: str, round_: int, user: int) -> None:
        """409 ``already_sent`` if ``user``'s message of ``round_`` is stored: a device's retry of a message that
        arrived is told so, also once its round closed."""
        table = self.messages_table
        if c.execute(sa.select(table.c.user).where(table.c.task_id == task_id, table.c.round == round_,
                                                    table.c.user == user)).first() is not None:
            raise Refused(409, "already_sent", _already(user, round_))

    def _open_round(self, task_id: str, round_: int, user: int | None = None):
        """The task's row, refusing (409) unless round ``round_`` is open (``already_sent`` for ``user``'s retry of a
        message that arrived before it closed)."""
        self.advance(task_id)
        with storage.reading(self.engine) as c:
            row = self._row(c, task_id)
            if row.state != f"round{round_}" and user is not None:
                self._sent_before(c, task_id, round_, user)
        if row.state != f"round{round_}":
            raise Refused(409, "round_closed", f"round {round_} must be open; the task is {row.state}")
        return row


class Ticker:
    """Advances ``service``'s active tasks (its ``active()`` ids, its ``advance(task_id)``) every ``interval``
    seconds, in a thread: rounds whose deadline passed close even when no user asks."""

    def __init__(self, service, interval: float, logger: logging.Logger) -> None:
        self.service, self.interval, self.log = service, interval, logger
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="privagg-rounds", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            try:
                for task_id in self.service.active():
                    self.service.advance(task_id)
            except Exception as err:  # the database is away: the next tick tries again
                self.log.warning("rounds not advanced", extra={"fields": {"error": type(err).__name__}})


def rounds_app(title: str, service, logger: logging.Logger, max_body_bytes: int, ticking=None,
               tick: float | None = 0.5, *, operator_token: str | None = None, api_docs: bool = False,
               limits: Limits | None = None) -> tuple[FastAPI, object]:
    """A round server's app with what they all have: ``/healthz``, ``/readyz``, ``/metrics``, ``GET
    /tasks/{id}`` (``service.state``), and a :class:`Ticker` over ``ticking`` (default ``service``; ``tick=None``:
    none). Returns the app and ``body``, the coroutine reading a request's JSON body (at most ``max_body_bytes``),
    for the caller's routes."""
    ticker = None if tick is None else Ticker(service if ticking is None else ticking, tick, logger)

    @asynccontextmanager
    async def lifespan(_app: FastAPI):
        if ticker is not None:
            ticker.start()
        log_event(logger, f"{title} started")
        yield
        if ticker is not None:
            ticker.stop()
        service.engine.dispose()
        log_event(logger, f"{title} stopped")

    app = make_app(title, lifespan, api_docs)
    add_operations(app, service.registry, service.engine, lambda err: service.refused.labels(err.reason).inc(),
                   health=service.health, operator_token=operator_token, limits=limits)

    async def body(request: Request) -> bytes:
        return await read_body(request, max_body_bytes, "application/json")

    @app.get("/tasks/{task_id}")
    async def task(task_id: str) -> dict:
        return await run_in_threadpool(service.state, task_id)

    return app, body


def user_routes(app: FastAPI, service, body, rounds: tuple[int, ...], message_rounds: tuple[int, ...],
                operator_token: str | None) -> None:
    """The routes of a server users enroll with and send round messages to: ``POST /tasks/{id}/enroll``, ``/inbox``,
    ``/round1`` (``service.round1``), ``/roundR`` for each R of ``message_rounds`` (``service.round_message``), and
    the operator's ``/close-round/{r}`` for the ``rounds``."""

    @app.post("/tasks/{task_id}/enroll")
    async def enroll(task_id: str, request: Request) -> JSONResponse:
        return JSONResponse(await run_in_threadpool(service.enroll, task_id, await body(request)), status_code=201)

    @app.post("/tasks/{task_id}/inbox")
    async def inbox(task_id: str, request: Request) -> dict:
        return await run_in_threadpool(service.inbox, task_id, await body(request))

    @app.post("/tasks/{task_id}/round1")
    async def round1(task_id: str, request: Request) -> JSONResponse:
        return JSONResponse({"status": await run_in_threadpool(service.round1, task_id, await body(request))},
                            status_code=201)

    def round_route(round_: int) -> None:
        @app.post(f"/tasks/{{task_id}}/round{round_}")
        async def message(task_id: str, request: Request) -> JSONResponse:
            status = await run_in_threadpool(service.round_message, task_id, round_, await body(request))
            return JSONResponse({"status": status}, status_code=201)

    for round_ in message_rounds:
        round_route(round_)

    @app.post("/tasks/{task_id}/close-round/{round_}")
    async def close_round(task_id: str, round_: int, request: Request) -> dict:
        require_operator(request, operator_token)
        if round_ not in rounds:
            raise Refused(400, "malformed", f"the round must be one of {', '.join(map(str, rounds))}, got {round_}")
        return {"state": await run_in_threadpool(service.close_round, task_id, round_)}
