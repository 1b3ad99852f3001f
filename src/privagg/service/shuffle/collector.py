"""The collector: the shuffle model's shuffler as a service (FastAPI).

It authenticates each client by a one-use token of the task, stores the client's sealed messages durably
(committed before it answers 2xx), refuses a second report on a token and a report id already used, and
never holds a key that opens a message. When a batch may be released (:meth:`Collector.form_batches`: a
shuffle task has one, of all n reports or of all that came to it once closed, if at least its minimum),
it puts the batch's messages in a uniformly random order drawn from the secure
generator (Fisher-Yates, :meth:`numpy.random.Generator.permutation`), and forwards them to the analyzer
as one Arrow IPC stream holding a single column of ciphertexts: no report boundaries, token, report id,
arrival order or time. The batch's reports are deleted only once the analyzer acknowledges it; a batch
whose acknowledgement was lost is sent again under the same batch id, which the analyzer applies once.
No batch smaller than the minimum is ever released: the calibration counts on that many users' noise.
A closed task, or a shuffle task whose batch is out, takes no more reports. A staged task's report
(``Task.discovery``) carries its first stage's messages too, under the same token: they are stored as a report of
the stage's task, in the same transaction, and form that task's own batch; closing the task closes its stage.

Routes: ``POST /tasks/{task_id}/reports`` (a client's report, JSON), ``GET /tasks/{task_id}`` (the
task, as the analyzer serves it), ``GET /tasks/{task_id}/status`` (counts), ``/healthz``, ``/readyz``,
``/metrics``.

Reports are stored by the writer (:class:`~privagg.service.shuffle.collector_writer.GroupCommit`), many to a
transaction.
"""

from __future__ import annotations

import asyncio
import binascii
import collections
import hashlib
import io
import json
import logging
import math
import os
import secrets
import socket
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from contextlib import asynccontextmanager
from pathlib import Path

import numpy as np
import sqlalchemy as sa
from fastapi import FastAPI, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import Response
from prometheus_client import CollectorRegistry, Counter, Histogram

from ...core.randomness import secure_rng
from ...errors import ParameterError
from .. import storage
from ..storage import batches, collector_tasks, encapsulations, reports, task_numbers, tokens
from ..tasks import Task, encapsulation_digests, is_hex_id
from ..web import (Health, Limits, Refused, add_operations, json_object, log_event, make_app, read_body,
                  require_operator, shown)
from .collector_writer import GroupCommit, Pending, insert_rows

log = logging.getLogger("privagg.collector")

TOKEN_BYTES = 24
REPORT_FIELDS = {"report_id", "token", "key_id", "ciphertexts", "discovery"}
PADDING_BYTES = 64  # white space a report's JSON may carry beyond its compact encoding
BATCH_MEDIA_TYPE = "application/vnd.apache.arrow.stream"
# the answers, made once (a response is sent as it is: its headers and body are not changed by sending)
STORED = {status: Response(json.dumps({"status": status}).encode(), 201 if status == "stored" else 200,
                           media_type="application/json") for status in ("stored", "already stored")}


def token_hash(token: str) -> bytes:
    return hashlib.sha256(token.encode()).digest()


class Collector:
    """The collector's logic over its database; the HTTP routes (:func:`create_app`) only call it.

    ``fetch_task(task_id)`` returns the task's JSON from the analyzer (None: no such task);
    ``forward(task_id, batch_id, blob)`` delivers a batch and returns once the analyzer acknowledged it
    (it raises otherwise, and the batch is sent again later); ``forward_partitioned(task_id, batch_id)`` tells
    it a batch is in ``partition_root`` as Arrow partitions (:mod:`privagg.service.shuffle.partitions`), which a shuffle
    task's batch is when ``partition_root`` is set and the batch would not fit ``memory_budget`` whole.
    """

    def __init__(self, engine: sa.Engine, fetch_task: Callable[[str], str | None],
                 forward: Callable[[str, str, bytes], None], registry: CollectorRegistry | None = None,
                 quiet: float = 2.0, max_batch_reports: int = 100_000,
                 forward_partitioned: Callable[[str, str], None] | None = None, partition_root: Path | None = None,
                 memory_budget: int = 2 << 30) -> None:
        self.engine, self.fetch_task, self.forward = engine, fetch_task, forward
        self.quiet, self.max_batch_reports = quiet, max_batch_reports
        self.forward_partitioned, self.memory_budget = forward_partitioned, memory_budget
        self.partition_root = None if partition_root is None else Path(partition_root)
        self._tasks: dict[str, Task] = {}
        self._numbers: dict[str, int] = {}  # each loaded task's number (task_numbers), committed before its reports
        self._fetching: dict[str, threading.Lock] = {}  # per task id being fetched: one fetch, the others wait
        self._fetching_lock = threading.Lock()
        self.health = Health()
        self._writer = GroupCommit(engine, self._store_group, self.health, stored=self._count_stored)
        self._undelivered: dict[str, str] = {}  # batch id -> the last error logged for it (logged once per error)
        self.registry = registry or CollectorRegistry()
        self.accepted = Counter("privagg_reports_accepted", "Reports stored", ["task"], registry=self.registry)
        self.refused = Counter("privagg_reports_refused", "Requests refused, nothing stored", ["reason"],
                               registry=self.registry)
        self.released = Counter("privagg_batches_released", "Batches acknowledged by the analyzer", ["task"],
                                registry=self.registry)
        self.batch_reports = Histogram("privagg_batch_reports", "Reports per released batch",
                                       buckets=(100, 1_000, 5_000, 10_000, 50_000, 100_000, 1_000_000),
                                       registry=self.registry)

    def _count_stored(self, stored: list[Pending]) -> None:
        """The accepted-reports counter of each task, once a group (not once a report: its labels' lookup and
        lock)."""
        for task_id, count in collections.Counter(report.task_id for report in stored).items():
            self.accepted.labels(task_id).inc(count)

    # ---- tasks and tokens ----------------------------------------------------------------------------------
    def task(self, task_id: str) -> Task:
        """The task (cached, then from the database, then fetched from the analyzer once and kept).

        Concurrent first requests for a task wait for one fetch (a lock per task id, so a flood of made-up
        ids does not hold up a real one), and the row is inserted only if absent, so several collector
        processes meeting a new task at once store it once."""
        if task_id in self._tasks:
            return self._tasks[task_id]
        if not is_hex_id(task_id):
            raise Refused(404, "unknown_task", f"task_id must be 32 lowercase hexadecimal characters, got "
                          f"{shown(task_id)}")
        with self._fetching_lock:
            lock = self._fetching.setdefault(task_id, threading.Lock())
        try:
            with lock:
                if task_id not in self._tasks:
                    self._tasks[task_id] = self._load_task(task_id)
        finally:
            with self._fetching_lock:
                self._fetching.pop(task_id, None)  # kept only while fetching: unknown ids leave nothing behind
        return self._tasks[task_id]

    def known_task(self, task_id: str) -> Task | None:
        """The task if this process holds it already (nothing to read or fetch), else None."""
        return self._tasks.get(task_id)

    def _load_task(self, task_id: str) -> Task:
        """The task from the database, or fetched and stored; either way with its number, and its first stage's,
        made if new and committed before any of its reports is checked (the writer reads them from
        ``_numbers``)."""
        with storage.reading(self.engine) as c:
            text = c.execute(sa.select(collector_tasks.c.task).where(collector_tasks.c.task_id == task_id)).scalar()
        stored = text is not None
        if stored:
            task = Task.from_json(text, verify=False)  # verified when it was fetched
        else:
            try:
                text = self.fetch_task(task_id)
                task = None if text is None else Task.from_json(text)  # parameters verified before anything is stored
            except Exception as err:  # the analyzer is unreachable or served something unusable: try later
                log.warning("task not fetched", extra={"fields": {"task": task_id, "error": type(err).__name__}})
                raise Refused(503, "unavailable", "the task could not be fetched from the analyzer; try "
                              "again") from None
            if task is None:
                raise Refused(404, "unknown_task", f"task_id must name a task of the analyzer, got {task_id}")
        ids = [task_id] + ([] if task.discovery is None else [task.discovery.task_id])  # and its first stage's
        read = sa.select(task_numbers.c.task_id, task_numbers.c.number).where(task_numbers.c.task_id.in_(ids))
        with storage.reading(self.engine) as c:  # (a write only for what is new: none waits on a busy database)
            numbers = dict(c.execute(read).all())
        if not stored or len(numbers) < len(ids):
            with self.engine.begin() as c:
                if not stored:
                    c.execute(storage.insert_if_absent(c, collector_tasks).values(task_id=task_id, task=text))
                    if task.discovery is not None:  # its reports arrive with the task's: no fetch of its own
                        c.execute(storage.insert_if_absent(c, collector_tasks).values(task_id=task.discovery.task_id,
                                                                                      task=task.discovery.to_json()))
                for number_of in ids:  # (another collector process may make it at the same time: one is kept)
                    c.execute(storage.insert_if_absent(c, task_numbers).values(task_id=number_of))
                numbers = dict(c.execute(read).all())
        self._numbers.update(numbers)
        if task.discovery is not None:
            self._tasks[task.discovery.task_id] = task.discovery
        return task

    def issue_tokens(self, task_id: str, count: int) -> list[str]:
        """``count`` new one-use tokens for ``task_id``; only their hashes are stored. The task must be one this
        collector knows, or fetches now from its analyzer (:meth:`task`, as at a task's first report): tokens of a
        task that does not exist are a ParameterError naming ``task``, and none is stored."""
        try:
            self.task(task_id)
        except Refused as err:
            raise ParameterError("task", "a task of the analyzer this collector serves (known to the collector, or "
                                 "fetched from the analyzer now)", f"{shown(task_id)} ({err.detail})") from None
        issued = [secrets.token_urlsafe(TOKEN_BYTES) for _ in range(count)]
        with self.engine.begin() as c:
            c.execute(sa.insert(tokens), [{"token_hash": token_hash(t), "task_id": task_id} for t in issued])
        return issued

    # ---- reports -------------------------------------------------------------------------------------------
    def accept(self, task_id: str, body: bytes) -> str:
        """Store one report, durably; "stored", or "already stored" for a retry of a stored report.

        Raises :class:`Refused` (nothing stored) for an unknown task, a malformed report, a token that is
        not this task's or was spent on another report, a report id already used, or a message whose HPKE
        encapsulated key an accepted message of the task already carried (a replay: 409 ``replayed_message``).
        """
        return self.store(self.check(self.task(task_id), body)).result()

    def check(self, task: Task, body: bytes) -> Pending:
        """The report ``body`` for ``task`` checked on its own (its form, key id and ciphertexts; not yet its
        token, id or replays, which :meth:`store` checks against the database), or :class:`Refused`."""
        data = json_object(body, "the report")
        unknown = set(data) - REPORT_FIELDS
        if unknown:
            raise Refused(400, "malformed", f"a report's fields must be {', '.join(sorted(REPORT_FIELDS))}; got "
                          f"{shown(sorted(unknown))} besides")
        if len(body) > len(json.dumps(data)) + PADDING_BYTES:  # the SDK's own encoding, give or take spaces
            raise Refused(400, "malformed", f"the report must be its JSON with at most {PADDING_BYTES} bytes of "
                          f"white space, got {len(body) - len(json.dumps(data))} more")
        report_id, token, key_id, sealed = (data.get(k) for k in ("report_id", "token", "key_id", "ciphertexts"))
        if not is_hex_id(report_id):
            raise Refused(400, "malformed", "report_id must be 32 lowercase hexadecimal characters")
        if not isinstance(token, str) or not 0 < len(token) <= 256 or not token.isascii():
            raise Refused(400, "malformed", "token must be the string the collector issued")
        if type(key_id) is not int or key_id != task.key_id:
            raise Refused(400, "unknown_key", f"key_id must be the task's key id {task.key_id}, got "
                          f"{str(key_id)[:40]}")
        blob, digests = _sealed(task, "ciphertexts", sealed)
        stage = None
        if task.discovery is not None:
            stage = (task.discovery.task_id, *_sealed(task.discovery, "discovery", data.get("discovery")))
        elif "discovery" in data:
            raise Refused(400, "malformed", "discovery must be left out: this task has no first stage")
        return Pending(task.task_id, report_id, token_hash(token), blob, digests, stage)

    def store(self, report: Pending) -> Future:
        """The future outcome of storing ``report`` (see :meth:`accept`), set once the writer's transaction
        holding it committed, or failed."""
        return self._writer.submit(report)

    async def stored(self, report: Pending) -> str:
        """:meth:`store` awaited on the running event loop, whose futures the writer settles a group at a time
        (one thread-safe call per group, not one per report)."""
        report.outcome = asyncio.get_running_loop().create_future()
        return await self._writer.submit(report)

    def _store_group(self, c: sa.Connection, group: list["Pending"]) -> list[str | Refused]:
        """Each report's outcome, the accepted ones stored, inside the writer's transaction (set-based: one
        update and three inserts for the whole group).

        A group whose tasks are open is first written whole inside a savepoint, as if every report were new: the
        token's update (of an unspent token of the report's task) and the primary keys of report ids and
        encapsulations are the checks, and one that fails rolls the savepoint back. Only then are the tokens,
        report ids and encapsulations looked up, and each report judged on its own (three lookups)."""
        task_ids = sorted({task_id for r in group for task_id, _, _ in r.parts})
        # the tasks' rows locked: a batch being formed, a close and these reports do not interleave (PostgreSQL)
        task_rows = c.execute(sa.select(collector_tasks.c.task_id, collector_tasks.c.closed, collector_tasks.c.waiting
                                        ).where(collector_tasks.c.task_id.in_(task_ids)).with_for_update()).all()
        closed = {row.task_id for row in task_rows if row.closed}
        released = set(c.execute(sa.select(batches.c.task_id).where(batches.c.task_id.in_(task_ids))).scalars())
        finished = closed | {t for t in released if self.task(t).single_batch}
        # a shuffle task's one batch takes every waiting report, and the analyzer refuses more than its n: the
        # seats left (a report past them would stall the task, its batch refused for ever)
        seats = {row.task_id: task.parameters.n_users - row.waiting for row in task_rows
                 if (task := self.task(row.task_id)).single_batch}
        keys = self._numbered_keys(group)
        arriving = collections.Counter(task_id for r in group for task_id, _, _ in r.parts)
        if not finished and all(arriving[t] <= left for t, left in seats.items()) and \
                c.dialect.supports_sane_multi_rowcount:
            try:
                with c.begin_nested():
                    if self._write(c, group, keys) != len(group):  # a token not this task's, spent, or spent twice here
                        raise _Conflict()
                return ["stored"] * len(group)
            except (_Conflict, sa.exc.IntegrityError):  # a report id or an encapsulation already stored
                pass
        rows = {row.token_hash: row for row in c.execute(sa.select(tokens.c.token_hash, tokens.c.task_id,
                                                                   tokens.c.report_id).where(
            tokens.c.token_hash.in_([r.token_hash for r in group])))}
        used = {tuple(row) for row in c.execute(sa.select(tokens.c.task_id, tokens.c.report_id).where(
            tokens.c.report_id.in_([r.report_id for r in group])))}
        seen = storage.existing_digests(c, encapsulations, {key for report_keys in keys for key in report_keys})
        outcomes: list[str | Refused] = []
        spent: dict[bytes, str] = {}  # tokens spent earlier in this group
        new, new_keys = [], []
        for r, report_keys in zip(group, keys):
            row = rows.get(r.token_hash)
            earlier = row.report_id if row is not None and row.report_id is not None else spent.get(r.token_hash)
            if row is None or row.task_id != r.task_id:
                outcomes.append(Refused(403, "bad_token", "token must be one the collector issued for this task"))
            elif earlier == r.report_id:
                outcomes.append("already stored")  # a retry of a report this token already delivered
            elif earlier is not None:
                outcomes.append(Refused(409, "token_used", "token must be unused: it already delivered a report"))
            elif any(task_id in finished for task_id, _, _ in r.parts):
                outcomes.append(Refused(409, "task_closed", "the task must be open: it was closed, or its one batch "
                                        "was released"))
            elif any(seats.get(task_id, 1) < 1 for task_id, _, _ in r.parts):
                outcomes.append(Refused(409, "task_full", "the task must have room: a shuffle-model task takes "
                                        "exactly its n reports, and it has them (more tokens were issued than n)"))
            elif (r.task_id, r.report_id) in used:
                outcomes.append(Refused(409, "duplicate_report_id", "report_id must be new: another report used it"))
            elif any(key in seen for key in report_keys):
                outcomes.append(Refused(409, "replayed_message", "each message must be new: an accepted message "
                                        "of this task carried the same HPKE encapsulated key"))
            else:
                spent[r.token_hash] = r.report_id
                for task_id, _, _ in r.parts:
                    if task_id in seats:
                        seats[task_id] -= 1
                used.add((r.task_id, r.report_id))
                seen.update(report_keys)
                new.append(r)
                new_keys.append(report_keys)
                outcomes.append("stored")
        if new and self._write(c, new, new_keys) != len(new) and c.dialect.supports_sane_multi_rowcount:
            raise RuntimeError("a token was spent concurrently")  # by another collector
        return outcomes

    def _numbered_keys(self, group: list[Pending]) -> list[list[tuple[int, bytes]]]:
        """Each report's (task number, digest) of every message, its own and its first stage's: the keys of its
        encapsulations' replay records."""
        numbers = self._numbers
        return [[(numbers[task_id], d) for task_id, _, digests in r.parts for d in digests] for r in group]

    def _write(self, c: sa.Connection, new: list["Pending"], keys: list[list[tuple[int, bytes]]]) -> int:
        """The reports ``new`` stored, their tokens spent and their encapsulations (``keys``, a list a report:
        :meth:`_numbered_keys`) recorded; how many tokens were spent (each must be an unspent token of its report's
        task)."""
        # (through the driver: about one row per message, see storage.execute_driver)
        updated = storage.execute_driver(c, SPEND_TOKEN, [{"h": r.token_hash, "t": r.task_id, "r": r.report_id}
                                                          for r in new]).rowcount
        stored = [(task_id, r.report_id, blob) for r in new for task_id, blob, _ in r.parts]
        insert_rows(c, reports, ("task_id", "report_id", "ciphertexts"), stored)
        # the rows are locked above: the quiet period's clock, and the count of reports waiting
        arrived, now = collections.Counter(row[0] for row in stored), time.time()
        storage.execute_driver(c, COUNT_ARRIVALS, [{"task": t, "now": now, "count": k} for t, k in arrived.items()])
        # the primary key makes this atomic across collector processes: a digest another one stored since
        # fails the whole group, whose clients send again and are then refused as replays
        insert_rows(c, encapsulations, ("task", "digest"), [key for report_keys in keys for key in report_keys])
        return updated

    # ---- batches -------------------------------------------------------------------------------------------
    def form_batches(self) -> int:
        """Form the batches that may be released.

        A shuffle-model task has one batch (:class:`Task`): all its reports once n wait, or once it is
        closed (:meth:`close`) with at least its minimum. A local task's batches take the waiting reports
        (at most ``max_batch_reports``, never fewer than the minimum, chosen by their random report ids, not
        by arrival) once at least the minimum wait and either ``max_batch_reports`` wait or no report came
        for ``quiet`` seconds (timed from the task's ``last_arrival`` in the database, which every collector
        process updates as it stores reports: replicas agree). Every condition is checked again inside the
        batch's transaction, with the task's row locked, so replicas release each batch once."""
        formed = 0
        with storage.reading(self.engine) as c:  # (each task's count, not a count of its reports: one row each)
            waiting = c.execute(sa.select(collector_tasks.c.task_id, collector_tasks.c.waiting,
                                          collector_tasks.c.last_arrival).where(collector_tasks.c.waiting > 0)).all()
        for task_id, count, last in waiting:
            task = self.task(task_id)
            cap = max(self.max_batch_reports, task.min_batch_size)  # a cap never cuts a batch below the minimum
            if count < task.min_batch_size or not (task.single_batch or count >= cap or self._quiet(last)):
                continue
            batch_id = secrets.token_hex(16)
            try:
                with self.engine.begin() as c:
                    closed, last, now = c.execute(sa.select(
                        collector_tasks.c.closed, collector_tasks.c.last_arrival, collector_tasks.c.waiting).where(
                        collector_tasks.c.task_id == task_id).with_for_update()).one()
                    chosen = [reports.c.task_id == task_id, reports.c.batch_id.is_(None)]
                    if task.single_batch:  # all n reports, or all that came to a closed task; and only once
                        if not (now >= task.parameters.n_users or closed) or c.execute(sa.select(
                                batches.c.batch_id).where(batches.c.task_id == task_id)).first() is not None:
                            raise _TooSmall()
                    elif count < cap and not self._quiet(last):  # a report came meanwhile
                        raise _TooSmall()
                    elif count > cap:  # the cap smallest report ids (random for honest clients), not the first arrived
                        chosen.append(reports.c.report_id <= sa.select(reports.c.report_id).where(*chosen).order_by(
                            reports.c.report_id).offset(cap - 1).limit(1).scalar_subquery())
                    taken = c.execute(sa.update(reports).where(*chosen).values(batch_id=batch_id)).rowcount
                    if taken < task.min_batch_size:  # another process took some meanwhile: release nothing
                        raise _TooSmall()
                    c.execute(sa.update(collector_tasks).where(collector_tasks.c.task_id == task_id).values(
                        waiting=collector_tasks.c.waiting - taken))
                    size = c.execute(sa.select(sa.func.sum(sa.func.length(reports.c.ciphertexts))).where(
                        reports.c.batch_id == batch_id)).scalar()
                    c.execute(sa.insert(batches).values(batch_id=batch_id, task_id=task_id, reports=taken,
                                                        messages=size // task.sealed_size, acknowledged=False))
            except _TooSmall:
                continue
            log_event(log, "batch formed", task=task_id, batch=batch_id, reports=taken)
            formed += 1
        return formed

    def _quiet(self, last_arrival: float | None) -> bool:
        """No report was stored in the ``quiet`` seconds since ``last_arrival`` (a task's, stored by any collector
        process)."""
        return time.time() - (last_arrival or -math.inf) >= self.quiet

    def batch_blob(self, task_id: str, batch_id: str) -> bytes:
        """The batch as the analyzer receives it: its messages in a fresh secure random order, one column."""
        size = self.task(task_id).sealed_size
        with storage.reading(self.engine) as c:
            blobs = c.execute(sa.select(reports.c.ciphertexts).where(reports.c.batch_id == batch_id)).scalars().all()
            count = c.execute(sa.select(batches.c.reports).where(batches.c.batch_id == batch_id)).scalar_one()
        messages = np.frombuffer(b"".join(blobs), dtype=np.uint8).reshape(-1, size)
        return batch_stream(task_id, batch_id, count, messages[secure_rng().permutation(len(messages))])

    def _partitioned(self, task_id: str, messages: int) -> bool:
        """Whether a batch of ``messages`` goes as partitions: a shuffle task's, too large for the budget whole."""
        from .partitions import working_bytes

        return (self.partition_root is not None and self.task(task_id).single_batch and
                working_bytes(messages, self.task(task_id).sealed_size) > self.memory_budget)

    def write_partitions(self, task_id: str, batch_id: str, reports_count: int, messages: int) -> Path:
        """The batch written as Arrow partitions in a uniform random order under ``partition_root``, read from the
        database in chunks (never whole, and on SQLite without its write lock).

        An earlier write is kept if its manifest reads back whole and its largest partition fits this collector's
        budget (another replica's, or this one's before a restart). Otherwise the batch is written in a directory
        of this call's own and moved into place once complete, so a replica never reads or deletes another's
        write in progress; a directory found in place and not kept is moved aside first, then deleted."""
        import shutil
        import tempfile

        from .partitions import PartitionError, partition_count, read_manifest, working_bytes, write_partitions

        directory = self.partition_root / task_id / batch_id
        size = self.task(task_id).sealed_size
        try:
            kept = read_manifest(directory, task_id, batch_id, size)
            if working_bytes(max(e["messages"] for e in kept["partitions"]), size) <= self.memory_budget:
                return directory
        except PartitionError:
            pass
        directory.parent.mkdir(parents=True, exist_ok=True)
        scratch = Path(tempfile.mkdtemp(prefix=f".{batch_id}-", dir=directory.parent))

        def chunks():
            with storage.reading(self.engine) as c:
                rows = c.execution_options(stream_results=True, yield_per=4_096).execute(
                    sa.select(reports.c.ciphertexts).where(reports.c.batch_id == batch_id))
                for part in rows.partitions():
                    yield np.frombuffer(b"".join(r[0] for r in part), dtype=np.uint8).reshape(-1, size)

        aside = None
        try:
            write_partitions(chunks(), size, scratch, partition_count(messages, size, self.memory_budget), task_id,
                             batch_id, reports_count)
            if directory.exists():  # not kept: moved aside, as a rename onto a directory with files fails
                aside = Path(tempfile.mkdtemp(prefix=f".{batch_id}-", dir=directory.parent))
                try:
                    os.replace(directory, aside)
                except OSError:
                    pass  # another replica moved it first
            try:
                os.rename(scratch, directory)
            except OSError:
                pass  # another replica's complete write went in meanwhile: it is as good as this one
        finally:
            shutil.rmtree(scratch, ignore_errors=True)  # (gone if it went in)
            if aside is not None:
                shutil.rmtree(aside, ignore_errors=True)
        return directory

    def release_batches(self) -> int:
        """Form batches, then deliver every unacknowledged one; a delivered batch's reports are deleted (and its
        partitions, if it went as partitions). Returns how many were delivered."""
        import shutil

        self.form_batches()
        with storage.reading(self.engine) as c:
            pending = c.execute(sa.select(batches.c.task_id, batches.c.batch_id, batches.c.reports,
                                          batches.c.messages).where(batches.c.acknowledged.is_(False))).all()
        released = 0
        for task_id, batch_id, count, messages in pending:
            partitioned = self._partitioned(task_id, messages)
            try:
                if partitioned:
                    self.write_partitions(task_id, batch_id, count, messages)
                    self.forward_partitioned(task_id, batch_id)
                else:
                    self.forward(task_id, batch_id, self.batch_blob(task_id, batch_id))
            except Exception as err:  # the analyzer is down or refused: the batch stays and is sent again
                status = getattr(getattr(err, "response", None), "status_code", None)  # an HTTP refusal's
                error = type(err).__name__ if status is None else f"HTTP {status}" + (
                    ": the analyzer refused the collector's token (its collector_token must be the analyzer's): no "
                    "batch is delivered until it is" if status in (401, 403) else "")
                if partitioned and status == 400 and _reason(err.response) == "malformed_batch":
                    # the partitions as written did not check out (changed or damaged since): written again
                    shutil.rmtree(self.partition_root / task_id / batch_id, ignore_errors=True)
                if self._undelivered.get(batch_id) != error:  # once per batch and error, not once a second
                    (log.error if status in (401, 403) else log.warning)(  # a wrong token does not mend itself
                        "batch not delivered; retrying", extra={"fields": {"task": task_id, "batch": batch_id,
                                                                           "error": error}})
                    self._undelivered[batch_id] = error
                continue
            self._undelivered.pop(batch_id, None)
            if partitioned:  # with what a replica killed while writing it left
                for written in [self.partition_root / task_id / batch_id,
                                *(self.partition_root / task_id).glob(f".{batch_id}-*")]:
                    shutil.rmtree(written, ignore_errors=True)
            with self.engine.begin() as c:
                c.execute(sa.delete(reports).where(reports.c.batch_id == batch_id))
                c.execute(sa.update(batches).where(batches.c.batch_id == batch_id).values(acknowledged=True))
                if self.task(task_id).single_batch:  # it takes no more reports: replays need no record now
                    c.execute(sa.delete(encapsulations).where(encapsulations.c.task == sa.select(
                        task_numbers.c.number).where(task_numbers.c.task_id == task_id).scalar_subquery()))
            self.released.labels(task_id).inc()
            self.batch_reports.observe(count)
            log_event(log, "batch released", task=task_id, batch=batch_id, reports=count)
            released += 1
        if released:  # the released ciphertexts' bytes leave the database's files too (secure delete, WAL)
            storage.scrub(self.engine)
        return released

    def close(self, task_id: str) -> tuple[int, str | None]:
        """Take no more reports for ``task_id`` (and its first stage, if staged); a shuffle task's waiting reports then
        form its batch. Returns (how many reports were waiting, None), or for a task that took no report already,
        unchanged, (its waiting reports, why: "closed" by an earlier close, or "released": a shuffle task's one
        batch is out).

        Refused (:class:`ParameterError`, nothing changed) when the reports waiting are fewer than the task's
        minimum batch: closed, the task would never release them. The message names the shortfall and the
        remedies (wait for more reports; for a shuffle task, a task calibrated with a lower honest fraction,
        whose batch may be closed at ceil(G n) reports)."""
        with self.engine.begin() as c:
            row = c.execute(sa.select(collector_tasks.c.task, collector_tasks.c.waiting, collector_tasks.c.closed)
                            .where(collector_tasks.c.task_id == task_id).with_for_update()).first()
            if row is None:
                raise ParameterError("task", "a task this collector has received reports for", shown(task_id))
            task, waiting = Task.from_json(row.task, verify=False), row.waiting
            released = c.execute(sa.select(batches.c.batch_id).where(batches.c.task_id == task_id)).first()
            if row.closed or (task.single_batch and released is not None):
                return waiting, "closed" if row.closed else "released"
            if waiting < task.min_batch_size and (waiting or (task.single_batch and released is None)):
                short = task.min_batch_size - waiting
                remedy = f"wait for {short} more reports"
                if task.single_batch:  # (a lower --min-batch-size only where it is above ceil(G n) already)
                    lower = "" if task.min_batch_size <= task.parameters.honest_users else \
                        "created with a lower --min-batch-size (down to ceil(G n)), "
                    remedy += (f", or collect under a task whose one batch may be smaller: {lower}calibrated with a "
                               "lower honest fraction G (privagg calibrate --honest-fraction)")
                raise ParameterError("task", "a task whose waiting reports reach its minimum batch (closed before, it "
                                     "would never release them)", f"{task_id}, with {waiting} reports waiting of the "
                                     f"{task.min_batch_size} needed ({short} short): {remedy}")
            closing = [task_id] + ([] if task.discovery is None else [task.discovery.task_id])  # and its first stage
            c.execute(sa.update(collector_tasks).where(collector_tasks.c.task_id.in_(closing)).values(closed=True))
        log_event(log, "task closed", task=task_id, reports_waiting=waiting)
        return waiting, None

    def counts(self, task_id: str) -> dict[str, int | bool]:
        """For ``task_id`` (counts only): reports waiting for a batch, the fewest a batch may hold, how many more
        a first batch still needs (a shuffle task's at a close; without one it waits for n: ``release`` says when
        a batch goes out), batches awaiting the analyzer's acknowledgement, and what was released."""
        task = self.task(task_id)
        with storage.reading(self.engine) as c:
            rows = c.execute(sa.select(batches.c.acknowledged, sa.func.count(), sa.func.sum(batches.c.reports)).where(
                batches.c.task_id == task_id).group_by(batches.c.acknowledged)).all()
            row = c.execute(sa.select(collector_tasks.c.closed, collector_tasks.c.waiting).where(
                collector_tasks.c.task_id == task_id)).first()
        closed, waiting = (bool(row.closed), row.waiting) if row is not None else (False, 0)
        by_state = {bool(done): (count, int(total)) for done, count, total in rows}
        formed = sum(count for count, _ in by_state.values())
        return {"closed": closed, "reports_waiting": waiting, "min_batch_size": task.min_batch_size,
                "reports_needed": max(0, task.min_batch_size - waiting) if not formed or not task.single_batch else 0,
                "batches_pending": by_state.get(False, (0, 0))[0], "batches_released": by_state.get(True, (0, 0))[0],
                "reports_released": by_state.get(True, (0, 0))[1], "release": task.release_rule}


class _TooSmall(Exception):
    """A batch not to be formed after all, found inside its transaction (rolled back)."""


class _Conflict(Exception):
    """A group of reports not all new after all, found inside its savepoint (rolled back)."""


def _sealed(task: Task, name: str, sealed) -> tuple[bytes, list[bytes]]:
    """(the report's field ``name``, a list of base64 HPKE seals to ``task``, as one blob, their encapsulations'
    digests), or a 400 naming what is wrong, or a 409 if two share an encapsulated key."""
    cap = task.message_cap
    if not isinstance(sealed, list) or len(sealed) > cap:  # none is a user's output too (OUE with no bit set)
        raise Refused(400, "malformed", f"{name} must be a list of at most {cap} base64 strings")
    size, raws = task.sealed_size, []
    for i, text in enumerate(sealed):
        try:
            raw = binascii.a2b_base64(text, strict_mode=True) if isinstance(text, str) else b""  # (b64decode's check)
        except (binascii.Error, ValueError):  # not base64, or not even ASCII
            raw = b""
        if len(raw) != size:
            raise Refused(400, "bad_ciphertext", f"{name}[{i}] must be base64 of {size} bytes (an HPKE seal of one "
                          f"message), got {len(raw)} bytes")
        raws.append(raw)
    digests = encapsulation_digests(task, raws)  # each seal's bytes hashed as they are: no array for a few
    if len(set(digests)) < len(digests):
        raise Refused(409, "replayed_message", "each message must be sealed afresh: two ciphertexts of the report "
                      "share an HPKE encapsulated key")
    return b"".join(raws), digests


def batch_stream(task_id: str, batch_id: str, reports: int, sealed: np.ndarray) -> bytes:
    """A batch on the wire: an Arrow IPC stream of one column of fixed-size ciphertexts (the rows of
    ``sealed``, in the order given), with the task id, the batch id and its number of reports as metadata."""
    import pyarrow as pa

    column = pa.FixedSizeBinaryArray.from_buffers(pa.binary(sealed.shape[1]), len(sealed),
                                                  [None, pa.py_buffer(np.ascontiguousarray(sealed).tobytes())])
    table = pa.table({"ciphertext": column}).replace_schema_metadata(
        {"task_id": task_id, "batch_id": batch_id, "reports": str(reports)})
    sink = io.BytesIO()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    return sink.getvalue()


# the writer's statements, executed through the driver (storage.execute_driver)
SPEND_TOKEN = sa.update(tokens).where(tokens.c.token_hash == sa.bindparam("h"), tokens.c.task_id == sa.bindparam("t"),
                                      tokens.c.report_id.is_(None)).values(report_id=sa.bindparam("r"))
COUNT_ARRIVALS = sa.update(collector_tasks).where(collector_tasks.c.task_id == sa.bindparam("task")).values(
    last_arrival=sa.bindparam("now"), waiting=collector_tasks.c.waiting + sa.bindparam("count"))


def _reason(response) -> str | None:
    """The ``error`` of a refusal's JSON body, if it has one."""
    try:
        return response.json().get("error")
    except (ValueError, AttributeError):
        return None


class BatchLoop:
    """Calls ``release_batches`` every ``interval`` seconds on a thread, until stopped."""

    def __init__(self, collector: Collector, interval: float) -> None:
        self.collector, self.interval = collector, interval
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="privagg-batches", daemon=True)

    def _run(self) -> None:
        failing = None  # the error of the rounds failing in a row: logged when it starts and when it ends
        while not self._stop.wait(self.interval):
            try:
                self.collector.release_batches()
            except Exception as err:  # the database blinked, or is full: try again next time
                if failing != type(err).__name__:
                    log.warning("batches not formed or released; retrying", extra={"fields": {
                        "error": type(err).__name__}}, exc_info=not isinstance(err, sa.exc.DBAPIError))
                    failing = type(err).__name__
                self.collector.health.write_failed(f"batches cannot be formed ({type(err).__name__})")
            else:
                if failing is not None:
                    log_event(log, "batches formed and released again")
                    failing = None

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        """Stops the loop; waits for its round at most STOP_WAIT seconds (a round waiting on the analyzer is left
        to end with the process: its batch, unacknowledged, is sent again after a restart)."""
        self._stop.set()
        self._thread.join(self.STOP_WAIT)

    STOP_WAIT = 10.0


PARTITIONED_READ_TIMEOUT = 24 * 3600.0  # seconds the collector waits for a partitioned batch to be applied
# probes after 60 s of silence, every 10 s, 6 unanswered end the connection (where the platform has them)
_KEEPALIVE = [(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)] + [
    (socket.IPPROTO_TCP, getattr(socket, name), value)
    for name, value in (("TCP_KEEPIDLE", 60), ("TCP_KEEPINTVL", 10), ("TCP_KEEPCNT", 6)) if hasattr(socket, name)]


def http_peer(analyzer_url: str, timeout: float = 60.0, ca_file: str | None = None, token: str | None = None):
    """(fetch_task, forward, forward_partitioned) over HTTP to the analyzer at ``analyzer_url``, showing it
    ``token``; its TLS certificate is checked against ``ca_file``, or httpx's default bundle (certifi)."""
    import ssl

    import httpx

    verify = True if ca_file is None else ssl.create_default_context(cafile=ca_file)
    client = httpx.Client(base_url=analyzer_url, timeout=timeout,
                          transport=httpx.HTTPTransport(verify=verify, socket_options=_KEEPALIVE),
                          headers={} if token is None else {"authorization": f"Bearer {token}"})

    def fetch_task(task_id: str) -> str | None:
        answer = client.get(f"/tasks/{task_id}")
        if answer.status_code == 404:
            return None
        answer.raise_for_status()
        return answer.text

    def forward(task_id: str, batch_id: str, blob: bytes) -> None:
        client.post(f"/tasks/{task_id}/batches/{batch_id}", content=blob,
                    headers={"content-type": BATCH_MEDIA_TYPE}).raise_for_status()

    def forward_partitioned(task_id: str, batch_id: str) -> None:
        # the analyzer answers once it opened every partition (an hour or more for 10^8 messages): a long read
        # timeout; an analyzer host that vanished is found by TCP keepalive within about two minutes
        client.post(f"/tasks/{task_id}/batches/{batch_id}/partitioned",
                    timeout=httpx.Timeout(timeout, read=PARTITIONED_READ_TIMEOUT)).raise_for_status()

    return fetch_task, forward, forward_partitioned


def create_app(collector: Collector, max_body_bytes: int = 1 << 20, batch_interval: float | None = 1.0, *,
               operator_token: str | None = None, api_docs: bool = False, limits: Limits | None = None) -> FastAPI:
    """The collector's HTTP service; ``batch_interval=None`` leaves batches to explicit ``release_batches``.

    ``operator_token``: the secret ``/tasks/{id}/status`` and ``/metrics`` ask for (open without it);
    ``api_docs``: serve /docs, /redoc and /openapi.json; ``limits``: the connection and request limits of a
    served app (:func:`privagg.service.web.add_operations`)."""
    loop = None if batch_interval is None else BatchLoop(collector, batch_interval)

    @asynccontextmanager
    async def lifespan(_app: FastAPI):
        if loop is not None:
            loop.start()
        log_event(log, "collector started")
        yield
        if loop is not None:  # graceful shutdown: finish the batch in hand, then stop
            loop.stop()
        collector.engine.dispose()
        log_event(log, "collector stopped")

    app = make_app("privagg collector", lifespan, api_docs)

    add_operations(app, collector.registry, collector.engine, lambda err: collector.refused.labels(err.reason).inc(),
                   health=collector.health, operator_token=operator_token, limits=limits)

    async def submit(request: Request) -> Response:
        task_id = request.path_params["task_id"]
        body = await read_body(request, max_body_bytes, "application/json")
        # a known task's report is checked on the event loop and waits for the writer there, without a worker
        # thread: every report in flight can join the writer's next transaction, not only a thread pool's worth
        known = collector.known_task(task_id) or await run_in_threadpool(collector.task, task_id)
        return STORED[await collector.stored(collector.check(known, body))]

    app.add_hot_route("POST", "/tasks/{task_id}/reports", submit)

    @app.get("/tasks/{task_id}")
    async def task(task_id: str) -> Response:
        found = await run_in_threadpool(collector.task, task_id)
        return Response(found.to_json(), media_type="application/json")

    @app.get("/tasks/{task_id}/status")
    async def status(task_id: str, request: Request) -> dict:
        require_operator(request, operator_token)
        return await run_in_threadpool(collector.counts, task_id)  # (counts loads the task: 404 if unknown)

    return app


def open_collector(db_url: str, analyzer_url: str | None, ca_file: str | None = None, token: str | None = None,
                   registry: CollectorRegistry | None = None, **batching) -> Collector:
    """A collector over its existing database at ``db_url`` (a service makes no database; on SQLite, refused if
    another process serves it: :mod:`~privagg.service.process_lock`) and the analyzer at
    ``analyzer_url`` (its TLS certificate checked against httpx's default bundle or ``ca_file``; the collector
    token ``token`` shown with each batch)."""
    if not analyzer_url:
        raise ParameterError("analyzer_url", "the analyzer's URL (--analyzer, PRIVAGG_COLLECTOR_ANALYZER_URL or "
                             "analyzer_url in the config file)", analyzer_url)
    engine = storage.serving(db_url, "collector")
    fetch_task, forward, forward_partitioned = http_peer(analyzer_url, ca_file=ca_file, token=token)
    return Collector(engine, fetch_task, forward, registry=registry, forward_partitioned=forward_partitioned,
                     **batching)
