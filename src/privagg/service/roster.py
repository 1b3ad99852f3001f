"""What the servers of the multi-round protocols share (the sharing server; TSS's S1): a task's roster of users,
each enrolled with a one-use token and his own X25519 public key, and given a secret his later requests show.

Only hashes are kept: the tokens' and the secrets' SHA-256. The tables (``tokens``: token hash, task, the roster
index it enrolled; ``roster``: task, index, public key, secret hash) are each service's own (storage.py,
two_servers.py); :class:`Roster` works on either pair.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import secrets
import threading

import sqlalchemy as sa

from ..errors import ParameterError, check_integer
from . import storage
from .tasks import KEMS
from .web import Refused, json_object

KEM = "x25519"  # the users' keys and every seal between parties of these protocols
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


def unknown_task(err: Refused, task_id: str, server: str) -> ParameterError:
    """An operator's command naming a task the server does not have: one ParameterError line."""
    return ParameterError("task", f"a task of this {server}", f"{task_id} ({err.detail})")
