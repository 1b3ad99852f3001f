"""The analyzer's batches (:class:`~privagg.service.shuffle.analyzer.AnalyzerService`'s half that applies them): a
batch checked against the task's rules, its repeated encapsulations dropped, its messages opened (in this process,
on worker processes that exist for the batch alone, or on a Dask cluster) and folded into the task's aggregate once,
in one transaction with the batch's id; a partitioned batch (:mod:`privagg.service.shuffle.partitions`) one
partition in memory at a time, each partition's aggregate stored as it is done.
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
import time
from typing import TYPE_CHECKING

import numpy as np
import sqlalchemy as sa

from ...core.messages import MessageBatch
from .. import storage
from ..storage import aggregates, applied_batches, applied_encapsulations, opened_messages, partition_progress
from ..tasks import Task, encapsulation_digests, is_hex_id, open_messages, packed_records
from ..web import Refused, log_event, shown
from .aggregate_codec import decode_aggregate, encode_aggregate
from .workers import BatchWorkers

if TYPE_CHECKING:
    from .analyzer import _Loaded

log = logging.getLogger("privagg.analyzer")

SERIAL_BELOW = 4_096  # messages: a smaller batch is opened in this process (workers cost more than they save)
MAX_REPORTS = 2**31 - 1  # reports one task may count (its stored counter)


def check_batch_rules(task: Task, batches: int, counted: int, reports: int, messages: int) -> None:
    """Refuse (409) a batch the task's rules forbid, whoever sent it: fewer reports than the task's minimum, a
    second batch of a shuffle task, more reports than a shuffle task's n users or than the counter holds, or
    more messages than its reports may carry (each at most :attr:`~privagg.service.tasks.Task.message_cap`).
    ``batches`` and ``counted``: the task's batches and reports applied so far."""
    if reports < task.min_batch_size:
        raise Refused(409, "batch_too_small", f"a batch must hold at least the task's min_batch_size "
                      f"{task.min_batch_size} reports, got {reports}")
    if task.single_batch and batches:
        raise Refused(409, "second_batch", "a shuffle task has one batch, and this task's was applied")
    most = task.parameters.n_users if task.single_batch else MAX_REPORTS - counted
    if reports > most:
        bound = "the task's n users" if task.single_batch else "what the task's report counter can still hold"
        raise Refused(409, "report_count", f"a batch of this task may hold at most {most} reports ({bound}), got "
                      f"{reports}")
    cap = task.message_cap
    if messages > reports * cap:
        raise Refused(409, "report_count", f"a batch of {reports} reports may hold at most {reports * cap} messages "
                      f"({cap} a report), got {messages}")


def first_encapsulations(task: Task, sealed: np.ndarray) -> tuple[list[int], list[bytes]]:
    """The rows of ``sealed`` whose encapsulated key no earlier row carried, and those keys' digests."""
    keep, digests, seen = [], [], set()
    for i, digest in enumerate(encapsulation_digests(task, sealed)):
        if digest not in seen:
            seen.add(digest)
            keep.append(i)
            digests.append(digest)
    return keep, digests


class BatchApplication:
    """:class:`~privagg.service.shuffle.analyzer.AnalyzerService`'s batches: it has the engine, executor, task
    loading (``load``, ``_with_coordinates``, ``_candidates_now``), locks and metrics they use."""

    def _applied(self, connection, task_id: str, batch_id: str) -> bool:
        return connection.execute(sa.select(applied_batches.c.batch_id).where(
            applied_batches.c.task_id == task_id, applied_batches.c.batch_id == batch_id)).first() is not None

    def _unapplied(self, task_id: str, batch_id: str) -> tuple[_Loaded, sa.Row] | None:
        """(the task, its aggregate's batch and report counts so far), or None if this batch was applied (counted
        as a replay); a 400 for a batch id that is not one; a staged task's coordinates fixed first."""
        loaded = self.load(task_id)
        if not is_hex_id(batch_id):
            raise Refused(400, "malformed_batch", f"batch_id must be 32 lowercase hexadecimal characters, got "
                          f"{shown(batch_id)}")
        with storage.reading(self.engine) as c:
            if self._applied(c, task_id, batch_id):
                self.batches.labels("replayed").inc()
                return None
        loaded = self._with_coordinates(loaded)
        with storage.reading(self.engine) as c:
            return loaded, c.execute(sa.select(aggregates.c.batches, aggregates.c.reports).where(
                aggregates.c.task_id == task_id)).one()

    def read_batch(self, loaded: _Loaded, batch_id: str, blob: bytes) -> tuple[np.ndarray, int]:
        """(the sealed messages as rows of bytes, the reports they came from), or a 400 naming the problem."""
        import pyarrow as pa

        size = loaded.task.sealed_size
        try:
            table = pa.ipc.open_stream(blob).read_all()
        except (pa.ArrowInvalid, OSError):
            raise Refused(400, "malformed_batch", "the batch must be an Arrow IPC stream") from None
        try:
            meta = {k.decode(): v.decode() for k, v in (table.schema.metadata or {}).items()}
        except UnicodeDecodeError:
            raise Refused(400, "malformed_batch", "the batch's metadata must be UTF-8") from None
        if table.column_names != ["ciphertext"] or table.schema.field("ciphertext").type != pa.binary(size):
            raise Refused(400, "malformed_batch", f"the batch must hold one column 'ciphertext' of {size}-byte "
                          f"values, got {shown(str(table.schema), 120)}")
        if meta.get("task_id") != loaded.task.task_id or meta.get("batch_id") != batch_id:
            raise Refused(400, "malformed_batch", "the batch's task_id and batch_id must match its address")
        if not re.fullmatch(r"[1-9][0-9]{0,11}", meta.get("reports", "")):
            raise Refused(400, "malformed_batch", f"the batch's reports must be a count >= 1, got "
                          f"{meta.get('reports', '')[:40]}")
        column = table.column("ciphertext").combine_chunks()
        sealed = np.frombuffer(column.buffers()[1], dtype=np.uint8, count=len(column) * size,
                               offset=column.offset * size).reshape(-1, size)
        return sealed, int(meta["reports"])

    def open_batch(self, loaded: _Loaded, sealed: np.ndarray) -> tuple[MessageBatch, int]:
        """(the messages that opened, how many did not): on worker processes that exist for this batch alone
        (:class:`~privagg.service.shuffle.workers.BatchWorkers`, which opens a small batch in this process), or on the
        executor in chunks."""
        if isinstance(self.executor, BatchWorkers):
            opened = self.executor.open(loaded.task, loaded.private_key, sealed)
        elif self.executor is None or len(sealed) < SERIAL_BELOW:
            opened = [open_messages(loaded.task, loaded.private_key, sealed)]
        else:
            chunks = np.array_split(sealed, 4 * self.workers)
            n = len(chunks)
            futures = self.executor.map(open_messages, [loaded.task] * n, [loaded.private_key] * n, chunks)
            opened = self.executor.gather(futures) if hasattr(self.executor, "gather") else list(futures)
        return MessageBatch.concatenate([o.messages for o in opened]), sum(o.unopened for o in opened)

    def apply_batch(self, task_id: str, batch_id: str, blob: bytes) -> str:
        """Fold one batch into the task's aggregate, once: "applied", or "already applied".

        The analyzer trusts no batch, not even the collector's: it enforces the task's batch rules itself
        (:func:`check_batch_rules`), and it drops and counts every message whose HPKE encapsulated key another
        message of the batch, or of a batch applied before (a local task's), already carried: an honest
        collector forwards none, and counting a user's message twice multiplies his privacy loss."""
        fresh = self._unapplied(task_id, batch_id)
        if fresh is None:
            return "already applied"
        loaded, before = fresh
        task = loaded.task
        sealed, reports = self.read_batch(loaded, batch_id, blob)
        check_batch_rules(task, before.batches, before.reports, reports, len(sealed))
        start = time.perf_counter()
        keep, digests = first_encapsulations(task, sealed)
        if not task.single_batch:  # a shuffle task has one batch: nothing applied before can repeat
            with storage.reading(self.engine) as c:
                known = storage.existing_digests(c, applied_encapsulations, {(task_id, d) for d in digests})
            fresh = [j for j, d in enumerate(digests) if (task_id, d) not in known]
            keep, digests = [keep[j] for j in fresh], [digests[j] for j in fresh]
        duplicates = len(sealed) - len(keep)
        if loaded.analyzer is None:  # a staged task whose first stage found nothing: nothing to estimate, none opened
            return self._commit(loaded, batch_id, None, reports, len(sealed), 0, 0, duplicates, digests, start)
        messages, unopened = self.open_batch(loaded, sealed[list(keep)])
        analyzer = loaded.analyzer
        part = analyzer.agg_update(analyzer.agg_init(), messages)
        kept = [self._kept(loaded, batch_id, 0, messages)] if loaded.keeps else []
        return self._commit(loaded, batch_id, part, reports, len(sealed), len(messages), unopened, duplicates,
                            digests, start, kept)

    def apply_partitioned_batch(self, task_id: str, batch_id: str) -> str:
        """Fold a batch released as Arrow partitions (:mod:`privagg.service.shuffle.partitions`) into the task's
        aggregate, once, one partition in memory at a time: its manifest and every partition are checked (400 otherwise), the
        largest partition must fit this analyzer's ``memory_budget``, encapsulations repeated anywhere in the
        batch are dropped and counted (found in bounded memory), and each partition is opened and aggregated
        alone: on the Dask cluster, each partition a task, when one is configured. One partitioned batch at a time
        (the others wait).

        Each partition's aggregate is stored as it is done (``partition_progress``), so an analyzer stopped part
        way (a batch of 10^8 messages takes hours on two cores) and told again aggregates only the partitions it
        had not, if the manifest and the task's candidates are the same; the rows go when the batch is applied."""
        if self.partition_root is None:
            raise Refused(409, "no_partitions", "this analyzer reads no partitioned batches (start it with "
                          "--partition-root, the directory the collector writes them to)")
        with self._partitioned:
            return self._apply_partitioned_batch(task_id, batch_id)

    def _apply_partitioned_batch(self, task_id: str, batch_id: str) -> str:
        from . import partitions

        fresh = self._unapplied(task_id, batch_id)
        if fresh is None:
            return "already applied"
        loaded, before = fresh
        task = loaded.task
        if not task.single_batch:
            raise Refused(400, "malformed_batch", "only a shuffle task's one batch comes in partitions")
        directory = self.partition_root / task_id / batch_id
        size = task.sealed_size
        try:
            manifest = partitions.read_manifest(directory, task_id, batch_id, size)
            largest = max(e["messages"] for e in manifest["partitions"])
            if partitions.working_bytes(largest, size) > self.memory_budget:
                raise Refused(400, "over_budget", f"a partition of {largest:,} messages needs "
                              f"{partitions.working_bytes(largest, size):,} bytes, over this analyzer's memory "
                              f"budget of {self.memory_budget:,}: release it in more partitions (a smaller "
                              "--memory-budget on the collector)")
            check_batch_rules(task, before.batches, before.reports, manifest["reports"], manifest["messages"])
            start = time.perf_counter()
            dropped = partitions.duplicate_rows(directory, manifest, lambda sealed: encapsulation_digests(task, sealed))
            if loaded.analyzer is None:  # a staged task whose first stage found nothing: checked, none opened
                return self._commit(loaded, batch_id, None, manifest["reports"], manifest["messages"], 0, 0,
                                    sum(len(rows) for rows in dropped.values()), [], start)
            analyzer, keep = loaded.analyzer, loaded.keeps
            basis = hashlib.sha256(json.dumps([manifest, loaded.candidates], sort_keys=True).encode()).digest()
            todo = self._partitions_to_do(loaded, batch_id, basis, len(manifest["partitions"]))
            if self.executor is not None and hasattr(self.executor, "gather"):  # Dask: a task per partition
                from dask.distributed import as_completed

                futures = {self.executor.submit(aggregate_partition, directory, manifest, j, task, loaded.private_key,
                                                analyzer, dropped.get(j), keep): j for j in todo}
                done = ((futures[future], future.result()) for future in as_completed(futures))
            else:
                done = ((j, self._aggregate_partition(loaded, directory, manifest, j, dropped.get(j))) for j in todo)
            for j, (aggregate, count_opened, count_unopened, records) in done:
                self._partition_done(loaded, batch_id, basis, j, aggregate, count_opened, count_unopened, records)
            part, opened, unopened = self._partitions_total(loaded, batch_id, basis, len(manifest["partitions"]))
        except partitions.PartitionError as err:
            raise Refused(400, "malformed_batch", str(err)) from None
        duplicates = sum(len(rows) for rows in dropped.values())
        return self._commit(loaded, batch_id, part, manifest["reports"], manifest["messages"], opened, unopened,
                            duplicates, [], start)

    def _partitions_to_do(self, loaded: _Loaded, batch_id: str, basis: bytes, count: int) -> list[int]:
        """The partitions of a batch not aggregated yet. Those an earlier attempt aggregated (an analyzer stopped
        part way, then told again) are kept if it read the same manifest with the same candidates (``basis``);
        another attempt's are deleted (the collector wrote the batch again, in another order), with the messages
        a candidates task kept for them."""
        key = (partition_progress.c.task_id == loaded.task.task_id) & (partition_progress.c.batch_id == batch_id)
        with self.engine.begin() as c:
            c.execute(sa.delete(partition_progress).where(key, partition_progress.c.basis != basis))
            done = {row.part for row in c.execute(sa.select(partition_progress.c.part).where(key))}
            if loaded.keeps:
                c.execute(sa.delete(opened_messages).where(opened_messages.c.task_id == loaded.task.task_id,
                                                           opened_messages.c.batch_id == batch_id,
                                                           opened_messages.c.part.not_in(done)))
        if done:
            log_event(log, "partitioned batch resumed", task=loaded.task.task_id, batch=batch_id,
                      partitions_done=len(done), partitions=count)
        return [j for j in range(count) if j not in done]

    def _partition_done(self, loaded: _Loaded, batch_id: str, basis: bytes, part: int, aggregate, opened: int,
                        unopened: int, records: bytes | None) -> None:
        """Store one partition's aggregate (and a candidates task's opened messages) in one transaction; another
        process that stored it first stored the same (the same partition, dropped rows and key)."""
        try:
            with self.engine.begin() as c:
                c.execute(sa.insert(partition_progress).values(
                    task_id=loaded.task.task_id, batch_id=batch_id, part=part, basis=basis,
                    aggregate=encode_aggregate(aggregate), opened=opened, unopened=unopened))
                if records is not None:
                    c.execute(sa.insert(opened_messages).values(task_id=loaded.task.task_id, batch_id=batch_id,
                                                                part=part, records=records))
        except sa.exc.IntegrityError:
            pass

    def _partitions_total(self, loaded: _Loaded, batch_id: str, basis: bytes, count: int) -> tuple:
        """(the batch's aggregate, messages opened, unopened): the stored partitions' merged one at a time; a 503
        if one is missing (another attempt on a newer manifest deleted it meanwhile: the collector sends again)."""
        analyzer, total, opened, unopened = loaded.analyzer, loaded.analyzer.agg_init(), 0, 0
        for j in range(count):
            with storage.reading(self.engine) as c:
                row = c.execute(sa.select(partition_progress).where(
                    partition_progress.c.task_id == loaded.task.task_id, partition_progress.c.batch_id == batch_id,
                    partition_progress.c.part == j, partition_progress.c.basis == basis)).first()
            if row is None:
                raise Refused(503, "unavailable", f"partition {j} of the batch was written again while it was "
                              "aggregated; send it again")
            total, opened, unopened = analyzer.merge([total, decode_aggregate(row.aggregate)]), \
                opened + row.opened, unopened + row.unopened
        return total, opened, unopened

    def _aggregate_partition(self, loaded: _Loaded, directory, manifest: dict, index: int, dropped) -> tuple:
        """(partition ``index``'s aggregate, its messages opened, unopened, their packed rows if a candidates task
        keeps them), opened on this analyzer's workers."""
        messages, unopened = self.open_batch(loaded, _partition_rows(directory, manifest, index, dropped))
        records = packed_records(loaded.task.parameters, messages).tobytes() if loaded.keeps else None
        return loaded.analyzer.agg_update(loaded.analyzer.agg_init(), messages), len(messages), unopened, records

    @staticmethod
    def _kept(loaded: _Loaded, batch_id: str, part: int, messages: MessageBatch) -> dict:
        """The row that keeps a candidates task's opened ``messages`` (:meth:`add_candidates` reads them)."""
        return {"task_id": loaded.task.task_id, "batch_id": batch_id, "part": part,
                "records": packed_records(loaded.task.parameters, messages).tobytes()}

    def _commit(self, loaded: _Loaded, batch_id: str, part, reports: int, messages: int, opened: int, unopened: int,
                duplicates: int, digests: list[bytes], start: float, kept: list[dict] = ()) -> str:
        """Fold ``part`` (the batch's aggregate; None: none was opened) into the task's and record the batch as
        applied, with the ``kept`` rows of opened messages, in one transaction, checking the batch rules again
        (another batch may have come meanwhile)."""
        task, analyzer, task_id = loaded.task, loaded.analyzer, loaded.task.task_id
        counted = 0 if duplicates == messages else reports  # all applied before: the batch adds no report
        try:
            with self._lock, self.engine.begin() as c:
                c.execute(sa.delete(partition_progress).where(partition_progress.c.task_id == task_id,
                                                              partition_progress.c.batch_id == batch_id))
                if self._applied(c, task_id, batch_id):  # a copy of this batch was applied meanwhile
                    self.batches.labels("replayed").inc()
                    return "already applied"
                row = c.execute(sa.select(aggregates).where(aggregates.c.task_id == task_id).with_for_update()).one()
                check_batch_rules(task, row.batches, row.reports, reports, messages)  # another batch came meanwhile
                if loaded.candidates is not None and self._candidates_now(c, task_id) != loaded.candidates:
                    raise Refused(503, "unavailable", "the task's candidates changed while this batch was opened; "
                                  "send it again")
                total = decode_aggregate(row.aggregate) if part is None else analyzer.merge(
                    [decode_aggregate(row.aggregate), part])
                c.execute(sa.update(aggregates).where(aggregates.c.task_id == task_id).values(
                    aggregate=encode_aggregate(total), batches=row.batches + 1, reports=row.reports + counted,
                    unopened=row.unopened + unopened, duplicates=row.duplicates + duplicates,
                    messages=int(total.messages), malformed=int(total.malformed)))
                c.execute(sa.insert(applied_batches).values(task_id=task_id, batch_id=batch_id))
                if kept:
                    c.execute(sa.delete(opened_messages).where(opened_messages.c.task_id == task_id,
                                                               opened_messages.c.batch_id == batch_id))
                    c.execute(sa.insert(opened_messages), list(kept))
                if not task.single_batch and digests:  # a digest applied meanwhile fails the primary key
                    c.execute(sa.insert(applied_encapsulations), [{"task_id": task_id, "digest": d} for d in digests])
        except sa.exc.IntegrityError:
            raise Refused(503, "unavailable", "a batch sharing messages with this one was applied meanwhile; send "
                          "it again") from None
        except sa.exc.DBAPIError as err:  # the disk is full, the database gone: not ready until a write succeeds
            self.health.write_failed(f"a batch could not be stored ({type(err.orig).__name__})")
            raise
        self.health.write_succeeded()
        seconds = time.perf_counter() - start
        self.batches.labels("applied").inc()
        self.opened.inc(opened)
        self.dropped.labels("unopened").inc(unopened)
        self.dropped.labels("malformed").inc(0 if part is None else part.malformed)
        self.dropped.labels("duplicate").inc(duplicates)
        self.batch_messages.observe(messages)
        log_event(log, "batch applied", task=task_id, batch=batch_id, reports=counted, messages=messages,
                  unopened=unopened, malformed=0 if part is None else int(part.malformed), duplicates=duplicates,
                  seconds=round(seconds, 3), messages_per_second=round(messages / max(seconds, 1e-9)))
        return "applied"


def _partition_rows(directory, manifest: dict, index: int, dropped) -> np.ndarray:
    """Partition ``index``'s sealed messages, checked, less the ``dropped`` rows (repeated encapsulations)."""
    from .partitions import read_partition

    sealed = read_partition(directory, manifest, index)
    return sealed if dropped is None else np.delete(sealed, dropped, axis=0)


def aggregate_partition(directory, manifest: dict, index: int, task: Task, private_key: bytes, analyzer,
                        dropped, keep: bool) -> tuple:
    """What a Dask worker does with one partition: (its aggregate, messages opened, unopened, their packed rows if
    ``keep``)."""
    opened = open_messages(task, private_key, _partition_rows(directory, manifest, index, dropped))
    records = packed_records(task.parameters, opened.messages).tobytes() if keep else None
    return analyzer.agg_update(analyzer.agg_init(), opened.messages), len(opened.messages), opened.unopened, records
