"""What the servers of the multi-round protocols share (the sharing server; TSS's S1 and S2): a task's roster of
users, each enrolled with a one-use token's authentication half, his own X25519 public key and Ed25519 identity key
and his token's binding of them (which only the organisation can check), and given a secret his later requests
show (:class:`Roster`); the thread that closes late rounds (:class:`Ticker`); and the HTTP routes every round
server has (:func:`rounds_app`). The rounds themselves are the round driver's (:mod:`privagg.service.rounds`).

Only hashes are kept: the SHA-256 of the tokens' authentication halves (:func:`privagg.core.identity.token_halves`)
and of the secrets. The tables (``tokens``: that hash, task, the roster index it enrolled; ``roster``: task, index,
public key, identity key, binding, secret hash) are each service's own (storage.py, two_servers.py); :class:`Roster`
works on either pair.
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
from collections.abc import Iterator
from contextlib import asynccontextmanager, contextmanager

import sqlalchemy as sa
from fastapi import FastAPI, Request
from fastapi.concurrency import run_in_threadpool

from ..core import identity
from ..errors import check_integer
from . import storage
from .round_tasks import KEM
from .tasks import KEMS, is_hex_id
from .web import Limits, Refused, add_operations, json_object, log_event, make_app, read_body, shown

TOKEN_BYTES, SECRET_BYTES = 24, 24
ENROLLMENT = {"token", "public_key", "identity_key", "binding"}  # an enrollment's fields


def secret_hash(secret: str) -> bytes:
    return hashlib.sha256(secret.encode()).digest()


def new_token() -> str:
    return secrets.token_urlsafe(TOKEN_BYTES)


def b64_field(value, field: str, size: int | None = None, binary: bool = False) -> bytes:
    """The bytes of a request field (of ``size`` bytes when given): bytes in a ``binary`` body
    (:mod:`~privagg.service.round_wire`: MessagePack's bin, never text), base64 text in a JSON one; else 400
    ``malformed`` naming it."""
    if binary:
        raw = value if isinstance(value, bytes) else None
    else:
        try:
            raw = base64.b64decode(value, validate=True) if isinstance(value, str) else None
        except (binascii.Error, ValueError):
            raw = None
    if raw is None or (size is not None and len(raw) != size):
        raise Refused(400, "malformed", f"{field} must be " + ("bytes (MessagePack's bin)" if binary else
                                                               "base64 text") +
                      (f" of {size} bytes" if size else "") + (f", got {len(raw)} bytes" if raw is not None else
                                                                f", got {shown(value)}"))
    return raw


class Roster:
    """Enrollment and authentication over a service's ``tokens`` and ``roster`` tables; ``lock`` is the service's
    write lock (one writer at a time in the process)."""

    def __init__(self, engine: sa.Engine, tokens: sa.Table, roster: sa.Table, lock: threading.Lock) -> None:
        self.engine, self.tokens, self.roster, self.lock = engine, tokens, roster, lock
        # task -> {user: the hash of his secret} as committed (:meth:`authenticated`); an enrollment, under the lock,
        # drops its user's and counts itself in _enrolled once it committed (:meth:`_enrolling`)
        self._secrets: dict[str, dict[int, bytes]] = {}
        self._enrolled = 0

    def issue(self, task_id: str, count: int) -> list[str]:
        """``count`` one-use enrollment tokens for ``task_id`` (the caller checked the task): the organisation keeps
        them; the server keeps the hash of each one's authentication half."""
        issued = [new_token() for _ in range(check_integer("count", count, 1, 10**7))]
        with self.engine.begin() as c:
            c.execute(sa.insert(self.tokens), [{"token_hash": secret_hash(identity.token_halves(t)[0]),
                                                "task_id": task_id} for t in issued])
        return issued

    def issued(self, task_id: str) -> int:
        """How many tokens ``task_id`` has had issued in all."""
        with storage.reading(self.engine) as c:
            return c.execute(sa.select(sa.func.count()).select_from(self.tokens).where(
                self.tokens.c.task_id == task_id)).scalar_one()

    def enroll(self, task_id: str, n_users: int, body: bytes) -> dict:
        """A user joins the roster: his token (its authentication half) spent, his keys and his token's binding of
        them kept, his index and a fresh secret returned. The same token, keys and binding again (a retry) get the
        same index and a new secret; other ones are 409 ``token_spent``; a full roster is 409."""
        data = json_object(body, "the enrollment")
        token = data.get("token")
        if set(data) != ENROLLMENT or not isinstance(token, str) or not 0 < len(token) <= 256:
            raise Refused(400, "malformed", "an enrollment must be {\"token\": the authentication half of the issued "
                          "token, \"public_key\": base64 of the user's X25519 public key, \"identity_key\": base64 "
                          "of his Ed25519 public key, \"binding\": base64 of his token's HMAC of them}")
        keys = {"public_key": b64_field(data.get("public_key"), "public_key", KEMS[KEM][1]),
                "identity_key": b64_field(data.get("identity_key"), "identity_key", identity.KEY_BYTES),
                "binding": b64_field(data.get("binding"), "binding", 32)}
        if not identity.is_key(keys["identity_key"]):
            raise Refused(400, "malformed", "identity_key must be an Ed25519 public key of the curve's prime-order "
                          "subgroup (no signature checks under a point of small order or off the curve)")
        secret = secrets.token_urlsafe(SECRET_BYTES)
        tokens, roster = self.tokens, self.roster
        with self.lock, self._enrolling(), self.engine.begin() as c:
            row = c.execute(sa.select(tokens).where(tokens.c.token_hash == secret_hash(token))).first()
            if row is None or row.task_id != task_id:
                raise Refused(403, "bad_token", "token must be the authentication half of one the server issued for "
                              "this task")
            if row.user is not None:
                known = c.execute(sa.select(roster.c.public_key, roster.c.identity_key, roster.c.binding).where(
                    roster.c.task_id == task_id, roster.c.user == row.user)).one()
                if tuple(known) != (keys["public_key"], keys["identity_key"], keys["binding"]):
                    raise Refused(409, "token_spent", "token was spent on another enrollment")
                user = row.user
                self._secrets.get(task_id, {}).pop(user, None)
                c.execute(sa.update(roster).where(roster.c.task_id == task_id, roster.c.user == user).values(
                    secret_hash=secret_hash(secret)))
            else:
                # the next index: users enroll one at a time (the lock), indices 0, 1, ... and none removed, so the
                # largest + 1 is the count, read from the primary key's end (counting the rows made enrollment O(n))
                user = c.execute(sa.select(sa.func.coalesce(sa.func.max(roster.c.user) + 1, 0)).where(
                    roster.c.task_id == task_id)).scalar()
                if user >= n_users:
                    raise Refused(409, "roster_full", f"the roster holds its n = {n_users} users")
                c.execute(sa.insert(roster).values(task_id=task_id, user=user, secret_hash=secret_hash(secret), **keys))
                c.execute(sa.update(tokens).where(tokens.c.token_hash == secret_hash(token)).values(user=user))
        return {"user": user, "secret": secret}

    @contextmanager
    def _enrolling(self) -> Iterator[None]:
        """Around an enrollment's transaction, under the lock: counted once it committed or failed, so that
        :meth:`authenticated` keeps no secret it read before (a retry's enrollment changes the user's secret)."""
        try:
            yield
        finally:
            self._enrolled += 1

    def forget(self, task_id: str) -> None:
        """Drop what :meth:`authenticated` keeps of a finished task."""
        self._secrets.pop(task_id, None)

    def enrollments(self, task_id: str) -> list[dict]:
        """What the organisation checks before it signs the roster: each enrolled user's index, keys and binding,
        and the hash of the token authentication half he enrolled with."""
        r, t = self.roster, self.tokens
        with storage.reading(self.engine) as c:
            rows = c.execute(sa.select(r.c.user, r.c.public_key, r.c.identity_key, r.c.binding, t.c.token_hash).join(
                t, sa.and_(t.c.task_id == r.c.task_id, t.c.user == r.c.user)).where(r.c.task_id == task_id)
                .order_by(r.c.user)).all()
        return [row._asdict() for row in rows]

    def authenticated(self, task_id: str, n_users: int, data: dict) -> int:
        """The roster index of a request's ``user`` whose ``secret`` is the one enrollment gave him; 400 or 403."""
        user, secret = data.get("user"), data.get("secret")
        if type(user) is not int or not 0 <= user < n_users or not isinstance(secret, str):
            raise Refused(400, "malformed", f"user must be a roster index in [0, {n_users}) and secret the string "
                          "enrollment returned")
        known = self._secrets.get(task_id, {}).get(user)
        if known is None:
            enrolled = self._enrolled
            with storage.reading(self.engine) as c:
                known = c.execute(sa.select(self.roster.c.secret_hash).where(self.roster.c.task_id == task_id,
                                                                             self.roster.c.user == user)).scalar()
            with self.lock:  # kept unless an enrollment ended since (it may have changed the secret after the read)
                if known is not None and enrolled == self._enrolled:
                    self._secrets.setdefault(task_id, {})[user] = known
        if known is None or not hmac.compare_digest(known, secret_hash(secret)):
            raise Refused(403, "bad_secret", "secret must be the one enrollment returned to this user")
        return user



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
    none). Returns the app and ``body``, the coroutine reading a request's body (at most ``max_body_bytes``; JSON
    unless the route names other ``media_types``), for the caller's routes."""
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

    async def body(request: Request, media_types: tuple[str, ...] = ("application/json",)) -> bytes:
        return await read_body(request, max_body_bytes, media_types)

    @app.get("/tasks/{task_id}")
    async def task(task_id: str) -> dict:
        return await run_in_threadpool(service.state, task_id)

    return app, body
