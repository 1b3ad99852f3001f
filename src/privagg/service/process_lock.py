"""One process serves a party's database (the collector's replicas on PostgreSQL share theirs): ``privagg serve``
holds a lock while it runs (:func:`hold`), which a second service of that party over the same database finds held and
refuses, and so do ``privagg db upgrade`` and ``db downgrade`` (:func:`check_not_served`), which would change the
schema under a running service (the collector's replicas included). Each refusal is one line naming the database and
the lock.

The round driver (the sharing server, S1) keeps state per process that another process's writes do not update: its
lock, each round's count of answers (a round closes early on the count of the process that stored them, so with two
processes only at its deadline), the release in progress (each would compute it, and S1 hand it over to S2, again);
the database's row lock keeps a round from closing twice, not the rest. The collector's replicas on PostgreSQL agree
through rows and stored times, so each collector takes a shared lock there, which the others' do not stop and the
schema commands' exclusive one does.

On SQLite the lock is an exclusive ``flock`` of ``DB.ROLE.lock`` beside the database file; on PostgreSQL a
transaction-level advisory lock, one per role, in a transaction kept open while the process runs (it holds no snapshot
and writes nothing). Either ends with its process, even under kill -9 (the kernel drops the flock and closes the
session's socket), and the PostgreSQL one with its host (:data:`KEEPALIVES`).
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import sqlalchemy as sa

from ..errors import ParameterError

# PostgreSQL's TCP keepalives on a lock's session: a service whose host vanished (no FIN, no RST) lets its lock go
# once the server's probes go unanswered, about 30 + 3 x 10 s, not after the kernel's default two hours
KEEPALIVES = {"tcp_keepalives_idle": 30, "tcp_keepalives_interval": 10, "tcp_keepalives_count": 3}
_HELD: dict[tuple[str, str], object] = {}  # (the lock file, or the URL; role) -> the lock this process holds


def sqlite_path(parsed: sa.engine.URL) -> Path | None:
    """The database file of a SQLite URL; None for an in-memory database or a ``file:`` URI (left to SQLite)."""
    database = parsed.database
    if not database or database == ":memory:" or database.startswith("file:") or "uri" in parsed.query:
        return None
    return Path(os.path.abspath(database))


def _lock(engine: sa.Engine, role: str) -> tuple[str, Path | None, int | None]:
    """(what names the database, its SQLite lock file, its PostgreSQL advisory key); both None: no lock (an
    in-memory database)."""
    from .storage import shown_url  # (storage imports this module)

    shown = shown_url(engine.url)
    if engine.dialect.name == "sqlite":
        path = sqlite_path(engine.url)
        if path is None:
            return shown, None, None
        path = Path(os.path.realpath(path))  # one lock for the file, whichever symbolic link or relative path names it
        return shown, path.with_name(f"{path.name}.{role}.lock"), None
    return shown, None, int.from_bytes(hashlib.sha256(f"privagg serve {role}".encode()).digest()[:8], "big",
                                       signed=True)


def _served(role: str, shown: str, lock, accepted: str | None = None) -> ParameterError:
    why = "SQLite is for one process: run collector replicas on PostgreSQL" if role == "collector" else \
        f"the {role} runs as one process"
    return ParameterError("db", accepted or f"a database no other {role} process serves ({why})",
                          f"{shown}, served by another process (it holds {lock})")


def _stop_first(role: str) -> str:
    return (f"a database no {role} process serves (stop every {role} process first: a schema changed under one "
            "would meet code that does not know it)")


def hold(engine: sa.Engine, role: str) -> None:
    """Make this process the one that serves ``role`` over ``engine``'s database, for as long as it runs; a
    ParameterError naming ``db`` if another process does."""
    import fcntl

    shown, path, key = _lock(engine, role)
    held = (str(path or shown), role)  # a file by its real path: this process holds it by whichever name
    if held in _HELD or (path is None and key is None):
        return
    if path is not None:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            raise _served(role, shown, path) from None
        _HELD[held] = fd
        return
    # a transaction left open for the process's life, at READ COMMITTED: it holds no snapshot between statements (so
    # it keeps no vacuum waiting), pins one server session even behind PgBouncer in transaction mode, and ends, with
    # its lock and its settings, when the process does
    connection = engine.connect().execution_options(isolation_level="READ COMMITTED")
    connection.begin()
    for name, seconds in KEEPALIVES.items():  # the server's probes of this idle session (over TCP)
        connection.execute(sa.text(f"SET LOCAL {name} = {seconds}"))
    take = "pg_try_advisory_xact_lock_shared" if role == "collector" else "pg_try_advisory_xact_lock"  # replicas share
    if not connection.execute(sa.text(f"SELECT {take}(:key)"), {"key": key}).scalar_one():
        connection.close()
        raise _served(role, shown, f"PostgreSQL's advisory lock {key}")
    _HELD[held] = connection


def check_not_served(engine: sa.Engine, role: str) -> None:
    """Nothing if no other process serves ``role`` over ``engine``'s database (:func:`hold`); else a ParameterError
    naming ``db``: a schema changed under a running service would meet code that does not know it."""
    import fcntl

    shown, path, key = _lock(engine, role)
    if (str(path or shown), role) in _HELD or (path is None and key is None) or (path and not path.exists()):
        return
    if path is not None:
        try:
            fd = os.open(path, os.O_RDONLY)  # flock needs no write access to the lock file
        except OSError as err:
            raise ParameterError("db", f"a database whose {role} lock file this user may read (to see that no {role} "
                                 "process serves it)", f"{shown}: {path}: {err.strerror}") from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            raise _served(role, shown, path, _stop_first(role)) from None
        finally:
            os.close(fd)  # its flock, if taken, with it
        return
    with engine.connect() as connection, connection.begin() as transaction:  # the lock ends with the transaction
        if not connection.execute(sa.text("SELECT pg_try_advisory_xact_lock(:key)"), {"key": key}).scalar_one():
            raise _served(role, shown, f"PostgreSQL's advisory lock {key}", _stop_first(role))
        transaction.rollback()
