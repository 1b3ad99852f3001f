"""The collector's writer: one thread that stores checked reports (:class:`Pending`) many to a transaction
(:class:`GroupCommit`), answering each report's caller once the transaction holding it committed.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import itertools
import logging
import queue
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from dataclasses import dataclass, field

import sqlalchemy as sa

from .. import storage
from ..web import Health, Refused, log_event

log = logging.getLogger("privagg.collector")

WRITER_CACHE_KIB = 64 << 10  # the writer's SQLite page cache (KiB, filled only as pages are read)


def writer_connection(engine: sa.Engine) -> sa.Connection:
    """A connection to a SQLite ``engine`` for one thread that writes many transactions in turn (the collector's
    writer), kept by it, with its own settings (the other connections keep SQLite's): a page cache of
    :data:`WRITER_CACHE_KIB` instead of SQLite's 2 MiB, and its temporary storage in memory. A report's rows go
    into b-trees at random places (its encapsulations' and report id's keys are random), so a group's writes
    touch about as many pages as it has rows: with 2 MiB the pages were read back from the WAL and spilled to it
    before their commit, and the statement journal of the group's savepoint (the pages' contents before it, for
    its rollback) went to a temporary file. Neither changes what a commit writes to the WAL, nor its fsync.
    Measured in-process on 10,000 FE1 reports (about 9 rows each, groups of 256): 38 KB read and 43 KB written a
    report before, 2 KB and 17 KB after; the writer's CPU a report about 0.12 ms -> 0.085 ms (docs/benchmarks.md,
    part 10). The cache is this connection's alone: SQLite fills it only as far as the database's pages are
    read."""
    connection = engine.connect()
    raw = connection.connection.dbapi_connection  # (before any transaction: temp_store cannot change inside one)
    raw.execute(f"PRAGMA cache_size=-{WRITER_CACHE_KIB}")
    raw.execute("PRAGMA temp_store=MEMORY")
    return connection


ROWS_PER_INSERT = (256, 16, 1)  # the sizes of insert_rows's statements, largest first (SQLite: 32,766 parameters)


@functools.cache
def _rows_insert(table: sa.Table, columns: tuple[str, ...], size: int) -> tuple[sa.Insert, tuple[str, ...]]:
    """One INSERT of ``size`` rows into ``table``'s ``columns``, the i-th row's values bound as ``{column}_{i}``,
    and those names in the rows' order (row 0's columns, then row 1's, ...)."""
    names = tuple(f"{c}_{i}" for i in range(size) for c in columns)
    return sa.insert(table).values([{c: sa.bindparam(f"{c}_{i}") for c in columns} for i in range(size)]), names


def insert_rows(connection: sa.Connection, table: sa.Table, columns: tuple[str, ...], rows: list[tuple]) -> None:
    """``rows`` (tuples of ``columns``' values, already the driver's types) inserted into ``table``, up to 256 to a
    statement (:data:`ROWS_PER_INSERT`: a few statement texts, each compiled once); a primary key already
    present fails the statement as a one-row INSERT would (IntegrityError).

    SQLite's driver lets go of the GIL for each statement it runs and takes it back after, from the busy event loop
    in the served collector: there the writer's statements took 0.12 ms of CPU a report, one statement a row (a
    report has about 9), against 0.05-0.06 ms in-process; 0.10 ms with these (docs/benchmarks.md, part 10)."""
    done = 0
    for size in ROWS_PER_INSERT:
        count = (len(rows) - done) // size * size
        if count:
            statement, names = _rows_insert(table, columns, size)
            chunks = [dict(zip(names, itertools.chain.from_iterable(rows[start:start + size])))
                      for start in range(done, done + count, size)]
            storage.execute_driver(connection, statement, chunks)
            done += count


@dataclass
class Pending:
    """A checked report waiting for the writer."""

    task_id: str
    report_id: str
    token_hash: bytes
    ciphertexts: bytes
    digests: list[bytes]  # of the messages' encapsulated keys
    stage: tuple[str, bytes, list[bytes]] | None = None  # a staged task's first stage: its task id, messages, digests
    outcome: Future | asyncio.Future | None = None  # set by the writer; an event loop's future on a loop
    # (task id, sealed messages, their digests) of the report, and of its first stage's if any
    parts: list[tuple[str, bytes, list[bytes]]] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        # made once here: the writer reads them several times a report (functools.cached_property takes a lock each
        # first read)
        self.parts = [(self.task_id, self.ciphertexts, self.digests), *([self.stage] if self.stage is not None else [])]


class GroupCommit:
    """One writer thread that stores waiting reports many to a transaction.

    A report's caller is answered only after the transaction holding it committed, so 2xx still means
    durable; one commit (one fsync) then covers many reports, and writers never queue on the database's
    lock. If the transaction fails (the database is down, or another collector spent a token of the group
    at the same moment), nothing of the group is stored and every caller gets a 503 to send again.

    On SQLite the thread keeps one connection (:meth:`_transaction`).
    """

    MAX_GROUP = 512

    def __init__(self, engine: sa.Engine, store: Callable[[sa.Connection, list[Pending]], list[str | Refused]],
                 health: Health, stored: Callable[[list[Pending]], None] = lambda reports: None) -> None:
        self.engine, self.store, self.health, self.stored = engine, store, health, stored
        self._failed = 0  # groups failed in a row: logged when writes start and stop failing, not per group
        self._queue: queue.Queue[Pending] = queue.Queue()
        self._thread: threading.Thread | None = None
        self._start = threading.Lock()
        self._connection: sa.Connection | None = None  # the writer's own on SQLite (_transaction), kept between groups
        self._renew = False  # the engine was disposed: the writer's connection is replaced before its next group
        sa.event.listen(engine, "engine_disposed", self._disposed)

    def _disposed(self, _engine: sa.Engine) -> None:
        self._renew = True

    def submit(self, report: Pending) -> Future | asyncio.Future:
        """``report``'s outcome (a new concurrent future unless it has one), set once the transaction holding it
        committed (or failed); ``stored`` is called with the reports stored, once their transaction committed."""
        if report.outcome is None:
            report.outcome = Future()
        with self._start:
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="privagg-writer", daemon=True)
                self._thread.start()
        self._queue.put(report)
        return report.outcome

    @contextlib.contextmanager
    def _transaction(self) -> Iterator[sa.Connection]:
        """A group's transaction. On SQLite on the writer's own connection (:func:`writer_connection`: its page
        cache stays warm from group to group), dropped after a failed group or once the engine was disposed (its
        pool's connections replaced), the next group then opening another; elsewhere on a connection of the pool,
        which checks it before lending it (``pool_pre_ping``: a restarted PostgreSQL costs no group)."""
        if self.engine.dialect.name != "sqlite":
            with self.engine.begin() as connection:
                yield connection
            return
        if self._connection is not None and self._renew:
            self._connection = _dropped(self._connection)
        if self._connection is None:
            self._renew = False
            self._connection = writer_connection(self.engine)
        try:
            with self._connection.begin():
                yield self._connection
        except BaseException:
            self._connection = _dropped(self._connection)
            raise

    def _run(self) -> None:
        while True:
            group = [self._queue.get()]
            while len(group) < self.MAX_GROUP and not self._queue.empty():
                group.append(self._queue.get_nowait())
            try:
                with self._transaction() as connection:
                    outcomes = self.store(connection, group)
            except Exception as err:
                if not self._failed:  # a full disk fails every group: one line when it starts, one when it ends
                    log.warning("reports not stored: writes are failing", extra={"fields": {
                        "reports": len(group), "error": type(err).__name__}})
                self._failed += 1
                self.health.write_failed(f"reports cannot be stored ({type(err).__name__})")
                outcomes = [Refused(503, "unavailable", "the report was not stored (the collector's database is "
                                    "failing); send it again") for _ in group]
            else:
                if self._failed:
                    log_event(log, "reports stored again", failed_groups=self._failed)
                    self._failed = 0
                self.health.write_succeeded()
            on_loops: dict[asyncio.AbstractEventLoop, list[tuple[asyncio.Future, str | Refused]]] = {}
            self.stored([report for report, outcome in zip(group, outcomes) if outcome == "stored"])
            for report, outcome in zip(group, outcomes):
                if isinstance(report.outcome, asyncio.Future):
                    on_loops.setdefault(report.outcome.get_loop(), []).append((report.outcome, outcome))
                elif report.outcome.set_running_or_notify_cancel():  # (else its caller gave up on it)
                    _settle([(report.outcome, outcome)])
            for loop, settled in on_loops.items():
                try:
                    loop.call_soon_threadsafe(_settle, settled)
                except RuntimeError:  # the loop is closed: the server stopped, and its requests with it
                    pass


def _dropped(connection: sa.Connection) -> None:
    """``connection`` closed for good (not returned to its pool, which would hand its settings to others)."""
    connection.invalidate()
    connection.close()


def _settle(settled: list[tuple[Future | asyncio.Future, str | Refused]]) -> None:
    """Each future's outcome set, but for futures already done (an event loop's, whose request was cancelled)."""
    for future, outcome in settled:
        if isinstance(future, asyncio.Future) and future.done():
            continue
        if isinstance(outcome, Refused):
            future.set_exception(outcome)
        else:
            future.set_result(outcome)
