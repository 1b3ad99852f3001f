"""The analyzer as a service (FastAPI): holds the HPKE private keys, applies batches once, serves results.

It creates tasks (:meth:`AnalyzerService.create_task`, ``privagg task create``) and serves each task's
public part to the collector and to clients. A batch arrives from the collector as one Arrow IPC stream of
sealed messages in random order (:mod:`privagg.service.shuffle.collector`); the analyzer checks its shape, opens
the messages in parallel (worker processes, or a Dask cluster when configured), drops and counts the
ones that do not open, lets the protocol's ``agg_update`` validate the rest against the declared layout
(malformed rows dropped and counted), and folds the batch into the task's aggregate. The new aggregate and
the batch id are committed in one transaction, so a batch sent twice (the collector lost the
acknowledgement, or either party was killed) is applied once.

The result is the report ``privagg analyze`` prints, with the privacy block of a private run (the clients
drew from the SDK's secure generator), the task's honest-fraction assumption, and a ``collection`` block
counting reports, batches and dropped messages. Messages of the counted reports that did not enter the aggregate
(unopened, malformed) cannot be traced to reports: the release counts every report and says what that assumes
(:class:`LostMessages`; docs/deployment.md, "Messages that do not enter the aggregate").

A sparse-vector-hashed task created with ``discover_phi`` has two stages (``Task.discovery``): its first stage is
an fe-hh task of its own over the B + 1 cells, whose batch is applied first; the coordinates it discovers (the
dummy cell left out) become the task's candidates when the task's own batch comes (refused with a 503, which the
collector retries, until then), and the result states both stages' guarantee composed.

A batch too large for one process's memory comes as Arrow partitions in a shared directory instead
(:mod:`privagg.service.shuffle.partitions`, :meth:`AnalyzerService.apply_partitioned_batch`): the collector posts
only the batch's address, and the analyzer reads the partitions from under its own ``partition_root``.

Routes: ``GET /tasks/{task_id}`` (public), ``POST /tasks/{task_id}/batches/{batch_id}`` and
``.../{batch_id}/partitioned`` (the collector),
``GET /tasks/{task_id}/result?top=K``, ``POST /tasks/{task_id}/candidates`` (more public candidates for a task
created with them: :meth:`AnalyzerService.add_candidates`), ``GET /tasks`` (the task list), ``GET /console`` and
``/console/tasks/{task_id}`` (the operator console: :mod:`privagg.service.shuffle.console`), ``/healthz``, ``/readyz``,
``/metrics``.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import re
import threading
import time
from concurrent.futures import Executor
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import sqlalchemy as sa
from fastapi import FastAPI, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from prometheus_client import CollectorRegistry, Counter, Histogram

from ...core.messages import MessageBatch
from ...errors import ParameterError
from .. import storage
from .aggregate_codec import decode_aggregate, encode_aggregate
from .collector import BATCH_MEDIA_TYPE
from .console import refusal_page, task_page, tasks_page
from ..keys import KeyEncryptionKey
from ..storage import (aggregates, analyzer_tasks, applied_batches, applied_encapsulations, opened_messages,
                      partition_progress)
from ..tasks import (SERVED, Task, create_task, encapsulation_digests, is_hex_id, open_messages,
                    packed_records, unpacked_records)
from ..web import Health, Limits, Refused, add_operations, json_object, log_event, make_app, read_body, shown
from .workers import BatchWorkers

log = logging.getLogger("privagg.analyzer")

SERIAL_BELOW = 4_096  # messages: a smaller batch is opened in this process (workers cost more than they save)
DEFAULT_MEMORY_BUDGET = 2 << 30  # bytes one partition of a partitioned batch may take to open
SERVICE_RANDOMNESS = "secure: each client's SDK draws from ChaCha20 keyed from its OS entropy (privagg.service.shuffle.client)"


MAX_REPORTS = 2**31 - 1  # reports one task may count (its stored counter)
MAX_CANDIDATES = 1_000_000  # public items one task answers
MAX_CANDIDATE_BYTES = 64 << 20  # the body of a request adding candidates


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


@dataclass
class _Loaded:
    task: Task
    private_key: bytes
    analysis: object  # pipelines.Analysis: the whole domain, or the task's candidates; None: none known (staged)
    analyzer: object  # None with analysis
    encoder: object  # names a frequency task's candidates in the result (ItemEncoder)
    candidates: str | None  # the task's candidates as stored (JSON): loaded again when they change

    @property
    def keeps(self) -> bool:
        """It keeps the messages it opened, so that candidates added later are answered (public candidates)."""
        return self.candidates is not None and self.task.discovery is None


class AnalyzerService:
    """The analyzer's logic over its database; the HTTP routes (:func:`create_app`) only call it.

    ``executor``: where sealed messages are opened (``None``: in this process); a
    :class:`~privagg.service.shuffle.workers.BatchWorkers` (processes started for each batch and gone once it is
    opened, so that no process holds the private key between batches; :func:`open_analyzer`'s choice), or a
    :class:`concurrent.futures.Executor` or a ``dask.distributed.Client`` (both have ``map``/``submit``), whose
    workers the caller owns: they receive the key with each batch. ``workers``: how many processes.

    ``kek``: the key-encryption key the tasks' private keys are sealed under in the database
    (:mod:`privagg.service.keys`); one that did not seal the stored keys is refused here, naming both KEK ids,
    before any key is opened. ``partition_root``: where the collector writes batches released as partitions
    (:meth:`apply_partitioned_batch`; none read without it); ``memory_budget``: the bytes one partition may
    take to open (:data:`privagg.service.shuffle.partitions.WORKING_COPIES` times its sealed bytes).
    """

    def __init__(self, engine: sa.Engine, executor: Executor | BatchWorkers | None = None, workers: int = 1,
                 registry: CollectorRegistry | None = None, *, kek: KeyEncryptionKey,
                 partition_root: Path | None = None, memory_budget: int = DEFAULT_MEMORY_BUDGET) -> None:
        if not isinstance(kek, KeyEncryptionKey):
            raise ParameterError("kek", "a KeyEncryptionKey (privagg.service.keys)", type(kek).__name__)
        kek.check_stored(engine, analyzer_tasks)
        self.engine, self.executor, self.workers, self.kek = engine, executor, workers, kek
        self.partition_root = None if partition_root is None else Path(partition_root)
        self.memory_budget = memory_budget
        self._tasks: dict[str, _Loaded] = {}
        self._stages: dict[str, tuple] = {}  # first stages' results, once final (_first_stage)
        self._lock = threading.Lock()  # one batch folds into an aggregate at a time (the database locks too)
        # one partitioned batch applied at a time, checked and opened under it: the memory budget is one partition's,
        # and a second request for the same batch (a collector that retries) finds it applied, not half done
        self._partitioned = threading.Lock()
        self.registry = registry or CollectorRegistry()
        self.health = Health()
        self.batches = Counter("privagg_batches", "Batches received", ["outcome"], registry=self.registry)
        self.refused = Counter("privagg_requests_refused", "Requests refused", ["reason"], registry=self.registry)
        self.dropped = Counter("privagg_messages_dropped", "Messages dropped", ["reason"], registry=self.registry)
        self.opened = Counter("privagg_messages_opened", "Messages opened and aggregated", registry=self.registry)
        self.batch_messages = Histogram("privagg_batch_messages", "Messages per applied batch",
                                        buckets=(1_000, 10_000, 100_000, 1_000_000, 10_000_000),
                                        registry=self.registry)

    # ---- tasks ---------------------------------------------------------------------------------------------
    def create_task(self, parameters, min_batch_size: int | None = None, key_id: int | None = None,
                    kem: str = "x25519", candidates: list | None = None, discover_phi: float | None = None) -> Task:
        """A new task for ``parameters`` (its KEM: "x25519" or "mlkem768-x25519"), its private key (a new key pair
        for every task, sealed under the KEK) and an empty aggregate stored; returns the task. ``key_id``
        (0..255): the id clients see for its key; by default the one after the newest task's, so consecutive
        tasks' keys never share an id. ``candidates`` (frequency protocols, and the 1-sparse vector sums): the
        public items the result answers, integers of the domain or strings (hashed with the parameters'
        ``item_key``), or coordinates; required over a domain too large to estimate whole (over 2^24 items).
        ``discover_phi`` (sparse-vector-hashed, no candidates): the paper's two stages as one task, its first an
        fe-hh task over the B + 1 cells at the parameters' (eps, delta) and this phi (so the task's guarantee is
        twice theirs, by basic composition), whose discovered coordinates the task estimates."""
        from ...pipelines import Analysis
        from ...protocols.balls_into_bins import CountAggregate
        from ...protocols.kinds import ResultKind
        from ...protocols.registry import (analyzer_checks, choose_full_domain, discovery_parameters,
                                          full_domain_seconds, get)

        entry = get(parameters.protocol)
        if not entry.served:
            raise ParameterError("protocol", SERVED, parameters.protocol)
        stage = None if discover_phi is None else discovery_parameters(parameters, discover_phi)
        codes = None
        if candidates is not None:
            if entry.result is not ResultKind.FREQUENCY_TABLE and not getattr(parameters, "one_sparse", False):
                raise ParameterError("candidates", "given only for a frequency protocol's or a 1-sparse vector "
                                     "sum's task", parameters.protocol)
            if discover_phi is not None:
                raise ParameterError("discover-phi", "left out with candidates (the discovered coordinates are the "
                                     "task's candidates)", discover_phi)
            codes = _candidates(parameters, candidates)[0]  # every one in the domain, strings only with an item key
        elif entry.result is ResultKind.FREQUENCY_TABLE and parameters.domain_size > 1 << 24:
            raise ParameterError("candidates", "given for a domain over 2^24 items (a service task's aggregate "
                                 "counts every item otherwise): the public items to estimate",
                                 f"none, domain {parameters.domain_size}")
        elif entry.result is ResultKind.FREQUENCY_TABLE:  # its release held to a run's budget, as estimate is
            choose_full_domain(parameters.domain_size, None, False, analyzer_checks(parameters.protocol,
                               parameters.n_users, parameters.domain_size), full_domain_seconds(parameters),
                               parameters.n_users, parameters.protocol, parameters.no_information(), forced=False)
        with self.engine.begin() as c:
            if key_id is None:
                newest = c.execute(sa.select(analyzer_tasks.c.key_id).order_by(analyzer_tasks.c.created.desc())
                                   .limit(1)).scalar()
                key_id = 0 if newest is None else (newest + 1) % 256
            if stage is not None:  # the first stage: a task of its own (key, batch, aggregate), stored first
                stage = self._insert_task(c, stage, Analysis.of(stage).analyzer().agg_init(), min_batch_size, key_id,
                                          kem, None, None)
                key_id = (key_id + 1) % 256
                initial = CountAggregate(np.zeros(0, dtype=np.int64))  # no coordinate known until the first stage's
            else:
                initial = Analysis.of(parameters, codes).analyzer().agg_init()
            task = self._insert_task(c, parameters, initial, min_batch_size, key_id, kem, candidates, stage)
        log_event(log, "task created", task=task.task_id, protocol=parameters.protocol,
                  **({} if stage is None else {"discovery": stage.task_id}))
        return task

    def _insert_task(self, c, parameters, aggregate, min_batch_size, key_id, kem, candidates, discovery) -> Task:
        """A new task's rows: the task with its private key sealed under the KEK, and its initial ``aggregate``."""
        task, private_key = create_task(parameters, min_batch_size, key_id, kem, discovery)
        c.execute(sa.insert(analyzer_tasks).values(
            task_id=task.task_id, task=task.to_json(), key_id=task.key_id, created=time.time(),
            sealed_key=self.kek.seal(private_key, task.task_id), kek_id=self.kek.kek_id,
            candidates=None if candidates is None else json.dumps(list(candidates))))
        c.execute(sa.insert(aggregates).values(task_id=task.task_id, aggregate=encode_aggregate(aggregate), batches=0,
                                               reports=0, unopened=0))
        return task

    def _candidates_now(self, connection, task_id: str) -> str | None:
        return connection.execute(sa.select(analyzer_tasks.c.candidates).where(
            analyzer_tasks.c.task_id == task_id)).scalar()

    def load(self, task_id: str) -> _Loaded:
        """The task, its key opened and its analysis made, cached; a candidates task's again once its candidates
        changed (:meth:`add_candidates`, maybe by another process)."""
        from ...pipelines import Analysis

        cached = self._tasks.get(task_id)
        if cached is not None and cached.candidates is not None:
            with storage.reading(self.engine) as c:
                if self._candidates_now(c, task_id) != cached.candidates:
                    del self._tasks[task_id]
        if task_id not in self._tasks:
            if not is_hex_id(task_id):
                raise Refused(404, "unknown_task", f"task_id must be 32 lowercase hexadecimal characters, got "
                              f"{shown(task_id)}")
            with storage.reading(self.engine) as c:
                row = c.execute(sa.select(analyzer_tasks.c.task, analyzer_tasks.c.sealed_key,
                                          analyzer_tasks.c.candidates).where(
                    analyzer_tasks.c.task_id == task_id)).first()
            if row is None:
                raise Refused(404, "unknown_task", f"task_id must name a task of this analyzer, got {task_id}")
            task = Task.from_json(row.task, verify=False)  # verified when it was created
            items = None if row.candidates is None else json.loads(row.candidates)
            analysis, encoder = None, None
            if task.discovery is None or items:  # a staged task: once its first stage found coordinates
                codes, encoder = (None, None) if items is None else _candidates(task.parameters, items)
                analysis = Analysis.of(task.parameters, codes)
            self._tasks[task_id] = _Loaded(task, self.kek.open(row.sealed_key, task_id), analysis,
                                           None if analysis is None else analysis.analyzer(), encoder, row.candidates)
        return self._tasks[task_id]

    def _first_stage(self, task: Task) -> tuple[object, sa.Row] | None:
        """A staged task's first stage: (fe-hh's result, its aggregate's row), or None before its batch was applied;
        finalized once (a shuffle task's one batch is final), not at each result request."""
        if task.discovery.task_id in self._stages:
            return self._stages[task.discovery.task_id]
        stage = self.load(task.discovery.task_id)
        with storage.reading(self.engine) as c:
            row = c.execute(sa.select(aggregates).where(aggregates.c.task_id == stage.task.task_id)).one()
        if not row.batches:
            return None
        first = stage.analyzer.finalize(decode_aggregate(row.aggregate), reporters=row.reports), row
        if stage.task.single_batch:
            self._stages[task.discovery.task_id] = first
        return first

    def _with_coordinates(self, loaded: _Loaded) -> _Loaded:
        """A staged task with its coordinates: the ones its first stage discovered (the dummy cell left out), fixed
        as its candidates when its own batch first comes; a 503 (the collector sends the batch again) until the
        first stage's batch was applied. Unchanged for any other task."""
        from ...pipelines import Analysis
        from ...protocols.registry import get

        task = loaded.task
        if task.discovery is None or loaded.candidates is not None:
            return loaded
        first = self._first_stage(task)
        if first is None:
            raise Refused(503, "unavailable", "the task's first stage (its discovery task "
                          f"{task.discovery.task_id}) has no batch applied yet: send this batch again after it")
        found = get(task.parameters.protocol).discovery.candidates(task.parameters, first[0].items).tolist()
        with self._lock, self.engine.begin() as c:  # once, whichever process gets here first
            if c.execute(sa.update(analyzer_tasks).where(analyzer_tasks.c.task_id == task.task_id,
                                                         analyzer_tasks.c.candidates.is_(None)).values(
                    candidates=json.dumps(found))).rowcount and found:
                c.execute(sa.update(aggregates).where(aggregates.c.task_id == task.task_id).values(
                    aggregate=encode_aggregate(Analysis.of(task.parameters, np.array(found)).analyzer().agg_init())))
        self._tasks.pop(task.task_id, None)
        log_event(log, "coordinates discovered", task=task.task_id, coordinates=len(found))
        return self.load(task.task_id)

    def add_candidates(self, task_id: str, items: list) -> int:
        """Answer more public candidates in a task created with candidates: ``items`` (integers of the domain, or
        strings hashed with the parameters' ``item_key``) join the task's list, and its aggregate is computed again
        from the messages it kept, exactly as if they had been given at creation. Returns how many candidates the
        task answers now. A ParameterError names ``candidates`` for a task without them, an item outside the
        domain, or a list that would grow past MAX_CANDIDATES."""
        from ...pipelines import Analysis

        loaded = self.load(task_id)
        if loaded.task.discovery is not None:
            raise ParameterError("candidates", "added to a task created with candidates (a staged task estimates the "
                                 "coordinates its first stage discovers)", f"task {task_id}, a staged task")
        if loaded.candidates is None:
            raise ParameterError("candidates", "added to a task created with candidates (it keeps the messages it "
                                 "opened to answer later ones)", f"task {task_id}, which estimates its whole domain")
        if not isinstance(items, list) or not items:
            raise ParameterError("candidates", "a non-empty list of items", type(items).__name__)
        parameters = loaded.task.parameters
        with self._lock, self.engine.begin() as c:
            row = c.execute(sa.select(aggregates).where(aggregates.c.task_id == task_id).with_for_update()).one()
            known = json.loads(self._candidates_now(c, task_id))
            seen = set(known)
            merged = known + [item for item in dict.fromkeys(items) if item not in seen]
            codes = _candidates(parameters, merged)[0]
            analyzer = Analysis.of(parameters, codes).analyzer()
            total = analyzer.agg_init()
            kept = c.execute(sa.select(opened_messages.c.records).join(applied_batches, sa.and_(
                applied_batches.c.task_id == opened_messages.c.task_id,
                applied_batches.c.batch_id == opened_messages.c.batch_id)).where(opened_messages.c.task_id == task_id))
            for (records,) in kept:
                total = analyzer.agg_update(total, unpacked_records(parameters, records))
            c.execute(sa.update(aggregates).where(aggregates.c.task_id == task_id).values(
                aggregate=encode_aggregate(total)))
            c.execute(sa.update(analyzer_tasks).where(analyzer_tasks.c.task_id == task_id).values(
                candidates=json.dumps(merged)))
            self._tasks.pop(task_id, None)  # loaded again with the new candidates
        log_event(log, "candidates added", task=task_id, candidates=len(codes), batches=row.batches)
        return len(codes)

    # ---- batches -------------------------------------------------------------------------------------------
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
        """Fold a batch released as Arrow partitions (:mod:`privagg.service.shuffle.partitions`) into the task's aggregate,
        once, one partition in memory at a time: its manifest and every partition are checked (400 otherwise), the
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
                    unopened=row.unopened + unopened, duplicates=row.duplicates + duplicates))
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

    # ---- results -------------------------------------------------------------------------------------------
    def _released_first_stage(self, task: Task):
        """A staged task's first stage as its release holds it (pipelines.FirstStage: its result, the guarantee
        of its batch's release and its messages), and its messages lost (:class:`LostMessages`, or None); (None,
        None) for a task of one stage."""
        from ...pipelines import FirstStage, analysis_privacy
        from ...reports import Messages

        if task.discovery is None:
            return None, None
        first, row = self._first_stage(task)
        stage, received = task.discovery.parameters, int(first.messages + first.malformed)
        stage_privacy = analysis_privacy(stage, received, SERVICE_RANDOMNESS, reporters=row.reports)
        lost = lost_messages(self.load(task.discovery.task_id).analyzer, decode_aggregate(row.aggregate), first,
                             row.reports, row.unopened)
        if lost is not None:  # the first stage's messages that did not enter its aggregate: its guarantee, the task's
            stage_privacy = lost.privacy(stage_privacy, stage)
        return FirstStage(stage, first, stage_privacy, Messages(received, received / row.reports,
                                                                int(first.malformed))), lost

    def overview(self, task_id: str | None = None, limit: int = 1_000) -> list[dict]:
        """The newest ``limit`` tasks (or the one named): public parameters and counts, no estimate (the task list
        and the console)."""
        query = sa.select(analyzer_tasks.c.task_id, analyzer_tasks.c.task, aggregates.c.batches, aggregates.c.reports,
                          aggregates.c.unopened, aggregates.c.duplicates).join(
            aggregates, aggregates.c.task_id == analyzer_tasks.c.task_id).order_by(
            analyzer_tasks.c.created.desc()).limit(limit)
        if task_id is not None:
            self.load(task_id)  # 404 unless it is one of ours
            query = query.where(analyzer_tasks.c.task_id == task_id)
        with storage.reading(self.engine) as c:
            rows = c.execute(query).all()
        out = []
        for row in rows:
            task = Task.from_json(row.task, verify=False)
            out.append({"task_id": row.task_id, "protocol": task.parameters.protocol,
                        "n_users": task.parameters.n_users, "min_batch_size": task.min_batch_size,
                        "key_id": task.key_id, "kem": task.kem, "batches": row.batches, "reports": row.reports,
                        "unopened": row.unopened, "duplicates": row.duplicates,
                        "state": "released" if row.batches else "waiting for its batch"})
        return out

    def result(self, task_id: str, top: int = 10) -> dict:
        """The task's result as ``privagg analyze --json`` prints it, private, with the collection counts;
        409 ``not_released`` until a batch was applied (before, the estimates would be the debiased noise
        floor of no users at all, not a result).

        The estimates are debiased, and their errors and the messages per user computed, with the m users whose
        reports were counted (an early-closed shuffle task's m >= ceil(G n), a local task's any number), whose
        noise is all the release holds; the privacy block states what the guarantee counts on among them, its
        caveat compares the messages received with what they would send, and the warnings name repeated
        encapsulations dropped, and messages lost (:class:`LostMessages`)."""
        from ...pipelines import analysis_privacy
        from ...reports import Collection, Engine, report_document

        loaded = self.load(task_id)
        with storage.reading(self.engine) as c:
            row = c.execute(sa.select(aggregates).where(aggregates.c.task_id == task_id)).one()
        if not row.batches:
            raise Refused(409, "not_released", f"task {task_id} has no result yet: no batch was applied (the "
                          f"collector releases one once at least {loaded.task.min_batch_size} reports came)")
        if loaded.analysis is None:  # staged, and its first stage discovered no coordinate
            raise Refused(409, "nothing_discovered", f"task {task_id} has nothing to estimate: its first stage (task "
                          f"{loaded.task.discovery.task_id}, whose result is the empty list) found no coordinate whose "
                          f"sum reaches phi n (phi = {loaded.task.discovery.parameters.phi:g})")
        agg, p = decode_aggregate(row.aggregate), loaded.task.parameters
        start = time.perf_counter()
        result = loaded.analyzer.finalize(agg, reporters=row.reports)
        engine = Engine("local", row.batches, seconds={"finalize": time.perf_counter() - start})
        privacy = analysis_privacy(p, int(agg.messages + agg.malformed), SERVICE_RANDOMNESS, reporters=row.reports)
        lost = lost_messages(loaded.analyzer, agg, result, row.reports, row.unopened)
        if lost is not None:
            privacy = lost.privacy(privacy, p)
        first, first_lost = self._released_first_stage(loaded.task)
        report = loaded.analysis.report(result, privacy, engine, encoder=loaded.encoder, top=top, collection=Collection(
            row.reports, row.batches, row.unopened, int(agg.malformed), row.duplicates), first=first)
        if lost is not None:
            report.warnings.append(lost.warning())
        if first_lost is not None:
            report.warnings.append(f"the first stage (task {loaded.task.discovery.task_id}): {first_lost.warning()}")
        if row.duplicates:
            report.warnings.append(f"{row.duplicates} messages repeated the HPKE encapsulated key of another and "
                                   "were dropped: whoever delivered the batches replayed messages; each was "
                                   "counted once")
        return report_document(report)


def create_app(service: AnalyzerService, max_batch_bytes: int = 1 << 30, collector_token: str | None = None, *,
               operator_token: str | None = None, api_docs: bool = False, limits: Limits | None = None,
               result_token: str | None = None) -> FastAPI:
    """The analyzer's HTTP service; with ``collector_token``, a batch is taken only from whoever shows it
    (``Authorization: Bearer TOKEN``): the collector. Without it, anyone who reaches the port can add
    messages, so it is for loopback and tests.

    ``result_token``: the secret the result route, the task list and the console ask for (``Authorization: Bearer
    TOKEN``; open without it, for releases that are public once made). ``operator_token``: the secret ``/metrics`` asks for (open without
    it); ``api_docs``: serve /docs, /redoc
    and /openapi.json; ``limits``: the connection and request limits of a served app
    (:func:`privagg.service.web.add_operations`)."""

    if collector_token is None:
        log.warning("no collector token: batches are taken from anyone who reaches this port")

    @asynccontextmanager
    async def lifespan(_app: FastAPI):
        log_event(log, "analyzer started")
        yield
        if isinstance(service.executor, (Executor, BatchWorkers)):  # BatchWorkers: no batch after this
            service.executor.shutdown()
        elif service.executor is not None:  # a Dask client
            service.executor.close()
        service.engine.dispose()
        log_event(log, "analyzer stopped")

    app = make_app("privagg analyzer", lifespan, api_docs)

    add_operations(app, service.registry, service.engine, lambda err: service.refused.labels(err.reason).inc(),
                   health=service.health, operator_token=operator_token, limits=limits)

    def owner(request: Request) -> None:
        _bearer(request, result_token, "the results and the task list are for their owners: Authorization must be "
                "Bearer followed by the result token")

    @app.get("/tasks")
    async def tasks(request: Request) -> dict:
        owner(request)
        return {"tasks": await run_in_threadpool(service.overview)}

    async def console_page(request: Request, render) -> HTMLResponse:
        """The page ``render()`` makes, or the page of its refusal (the API's refusal, counted and logged alike)."""
        try:
            owner(request)
            return HTMLResponse(await render())
        except Exception as err:
            answer = await app.answer(request, err)
            refusal = json.loads(answer.body)
            headers = {k: v for k, v in answer.headers.items() if k in ("retry-after", "www-authenticate")}
            return HTMLResponse(refusal_page(answer.status_code, refusal.get("detail", "")), answer.status_code,
                                headers)

    @app.get("/console", response_class=HTMLResponse)
    async def console(request: Request) -> HTMLResponse:
        async def render() -> str:
            return tasks_page(await run_in_threadpool(service.overview))
        return await console_page(request, render)

    @app.get("/console/tasks/{task_id}", response_class=HTMLResponse)
    async def console_task(task_id: str, request: Request) -> HTMLResponse:
        async def render() -> str:
            (row,) = await run_in_threadpool(service.overview, task_id)
            try:
                report = await run_in_threadpool(service.result, task_id, 20) if row["batches"] else None
            except Refused as err:  # released with nothing to estimate: a staged task whose first stage found none
                if err.reason != "nothing_discovered":
                    raise
                return task_page(row, None, note=err.detail)
            return task_page(row, report)
        return await console_page(request, render)

    @app.get("/console/{path:path}", response_class=HTMLResponse)
    async def console_elsewhere(path: str, request: Request) -> Response:
        if not path:  # /console/
            return RedirectResponse("/console")

        async def render() -> str:
            raise Refused(404, "not_found", f"the console has no page {shown('/console/' + path, 80)}: its pages are "
                          "/console (the tasks) and /console/tasks/ID (one task)")
        return await console_page(request, render)

    @app.get("/tasks/{task_id}")
    async def task(task_id: str) -> Response:
        loaded = await run_in_threadpool(service.load, task_id)
        return Response(loaded.task.to_json(), media_type="application/json")

    @app.post("/tasks/{task_id}/batches/{batch_id}")
    async def batch(task_id: str, batch_id: str, request: Request) -> dict:
        _bearer(request, collector_token, "a batch must come from the collector: Authorization must be Bearer "
                "followed by the collector token")
        body = await read_body(request, max_batch_bytes, BATCH_MEDIA_TYPE)
        return {"status": await run_in_threadpool(service.apply_batch, task_id, batch_id, body)}

    @app.post("/tasks/{task_id}/batches/{batch_id}/partitioned")
    async def partitioned(task_id: str, batch_id: str, request: Request) -> dict:
        _bearer(request, collector_token, "a batch must come from the collector: Authorization must be Bearer "
                "followed by the collector token")
        return {"status": await run_in_threadpool(service.apply_partitioned_batch, task_id, batch_id)}

    @app.post("/tasks/{task_id}/candidates")
    async def candidates(task_id: str, request: Request) -> dict:
        owner(request)
        data = json_object(await read_body(request, MAX_CANDIDATE_BYTES, "application/json"), "the candidates")
        if set(data) != {"candidates"}:
            raise Refused(400, "malformed", "the body must be {\"candidates\": [items]}")
        try:
            count = await run_in_threadpool(service.add_candidates, task_id, data["candidates"])
        except ParameterError as err:
            raise Refused(400, "bad_candidates", str(err)) from None
        return {"candidates": count}

    @app.get("/tasks/{task_id}/result")
    async def result(task_id: str, request: Request, top: int = 10) -> dict:
        owner(request)
        if not 1 <= top <= 100_000:
            raise Refused(400, "malformed", f"top must be 1..100000, got {top}")
        return await run_in_threadpool(service.result, task_id, top)

    return app


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


@dataclass(frozen=True)
class LostMessages:
    """Messages of the counted reports that did not enter the aggregate: ``unopened`` (another key, or altered on
    the way) and ``malformed`` (opened, but broke the protocol's layout), of ``total`` in the applied batches, from
    ``reporters`` reports. Sealed one by one and shuffled, they cannot be traced to reports, so the release counts
    every report and states what that assumes (docs/deployment.md, "Messages that do not enter the aggregate"):
    ``reports_worth`` is their count in reports at the batches' mean messages a report, and ``shift`` the largest
    change of an estimate were that many whole reports left out of the debiasing (None where it cannot be
    computed): how low the estimates may be."""

    unopened: int
    malformed: int
    total: int
    reporters: int
    reports_worth: int
    shift: float | None

    @property
    def lost(self) -> int:
        return self.unopened + self.malformed

    def _what(self) -> str:
        return (f"{self.lost} of the {self.total} messages of the {self.reporters} reports counted did not enter the "
                f"aggregate ({self.unopened} did not open, {self.malformed} opened malformed)")

    def _bias(self) -> str:
        return ("" if self.shift is None else f": each estimate may be low by up to {self.shift:.3g} (were they "
                f"whole reports, about {self.reports_worth}, the noise their users added is subtracted but missing)")

    def warning(self) -> str:
        return (f"{self._what()}; they cannot be traced to reports (each is sealed alone, and shuffled), so every "
                f"report is counted as if all its messages arrived{self._bias()}. A client that does not follow the "
                "protocol, or tampering between the clients and the analyzer, sends such messages: investigate "
                "(privagg_messages_dropped_total by reason)")

    def privacy(self, privacy, parameters):
        """``privacy`` with the caveat of the estimates' bias, and, in the shuffle model, the guarantee counted on the
        reports whose messages all entered: at least m - lost of them (each lost message may be another report's,
        whose user then counts among those the guarantee does not count on; below ceil(G n) it is not founded)."""
        from ...pipelines import with_lost_messages

        caveat = (f"{self._what()}; the estimates assume that those messages' users reported in full (their noise "
                  f"is subtracted, though it is missing from the aggregate){self._bias()}")
        return with_lost_messages(privacy.with_caveat(caveat), parameters, self.lost, self.reporters)


def lost_messages(analyzer, agg, result, reporters: int, unopened: int) -> LostMessages | None:
    """The messages of the ``reporters`` counted reports that did not enter ``agg`` (``unopened`` besides its
    malformed ones), with how low they may leave ``result``'s estimates; None if none was lost."""
    malformed = int(agg.malformed)
    lost, total = unopened + malformed, int(agg.messages) + malformed + unopened
    if not lost:
        return None
    worth = min(lost, reporters - 1, max(1, round(lost * reporters / total)))
    shift = None
    if worth >= 1:  # the estimates debiased as if that many whole reports were left out
        fewer, counted = _estimates(analyzer.finalize(agg, reporters=reporters - worth)), _estimates(result)
        common = counted.keys() & fewer.keys()
        shift = max((abs(fewer[k] - counted[k]) for k in common), default=None)
    return LostMessages(unopened, malformed, total, reporters, worth, shift)


def _estimates(result) -> dict:
    """A result's estimates by item (a frequency table, a heavy-hitter list) or coordinate (a vector sum)."""
    values = result.total if hasattr(result, "total") else result.estimates
    keys = getattr(result, "coordinates", None) if hasattr(result, "total") else getattr(result, "items", None)
    keys = range(len(values)) if keys is None else np.asarray(keys).tolist()
    return dict(zip(keys, np.asarray(values, dtype=np.float64).tolist()))


def _candidates(parameters, items: list) -> tuple[np.ndarray, object]:
    """(the sorted codes of the public ``items``, the encoder that names them): integers of the domain, or strings
    hashed with the parameters' ``item_key``; a 1-sparse vector sum's integer coordinates (no encoder); a
    ParameterError naming ``candidates`` otherwise."""
    from ...core.encoding import ItemEncoder
    from ...protocols.sparse_vector import check_coordinates

    if not isinstance(items, list) or not items or len(items) > MAX_CANDIDATES:
        raise ParameterError("candidates", f"a list of 1 to {MAX_CANDIDATES:,} items", type(items).__name__ if not
                             isinstance(items, list) else f"{len(items):,} items")
    if getattr(parameters, "one_sparse", False):
        bad = next((item for item in items if type(item) is not int), None)  # 7.0, True or "7" is no coordinate
        if bad is not None:
            raise ParameterError("candidates", f"integer coordinates in [0, {parameters.dimension})", bad)
        return np.unique(check_coordinates(items, parameters.dimension)), None
    text = any(isinstance(item, str) for item in items)
    encoder = ItemEncoder.for_parameters(parameters, "text") if text else ItemEncoder(parameters.domain_size,
                                                                                     kind="integer")
    return np.unique(encoder.encode(items, "candidates", public=True)), encoder


def _bearer(request: Request, token: str | None, why: str) -> None:
    """A 401 naming ``why`` unless ``token`` is None or the request shows it as a bearer token."""
    if token is not None and not hmac.compare_digest(request.headers.get("authorization", "").encode(),
                                                     f"Bearer {token}".encode()):
        raise Refused(401, "unauthenticated", why)


def open_analyzer(db_url: str, workers: int | None = None, dask_scheduler: str | None = None,
                  registry: CollectorRegistry | None = None, *, kek: KeyEncryptionKey, **options) -> AnalyzerService:
    """An analyzer over its existing database at ``db_url`` (a service makes no database), opening messages on
    ``workers`` processes (default: one per core; 0 or 1: in this process) or on the Dask scheduler at
    ``dask_scheduler``.

    The worker processes are started for each batch and exit once it is opened, and die with the analyzer
    even under SIGKILL (:mod:`privagg.service.shuffle.workers`): the private key is in a worker only while a batch
    is opened. Dask workers are long-lived and hold the private key (it comes with every batch): they are
    inside the analyzer's trust boundary. ``options``: ``partition_root`` and ``memory_budget``
    (:class:`AnalyzerService`)."""
    import os

    engine = storage.connect(db_url, "analyzer", kek=kek, create=False)
    if dask_scheduler is not None:
        from dask.distributed import Client

        client = Client(dask_scheduler)
        return AnalyzerService(engine, client, len(client.scheduler_info()["workers"]) or 1, registry, kek=kek,
                               **options)
    workers = os.cpu_count() or 1 if workers is None else workers
    executor = None if workers <= 1 else BatchWorkers(workers)
    return AnalyzerService(engine, executor, workers, registry, kek=kek, **options)
