"""The analyzer as a service (FastAPI): holds the HPKE private keys, applies batches once, serves results.

It creates tasks (:meth:`AnalyzerService.create_task`, ``privagg task create``) and serves each task's
public part to the collector and to clients. A batch arrives from the collector as one Arrow IPC stream of
sealed messages in random order (:mod:`privagg.service.collector`); the analyzer checks its shape, opens
the messages in parallel (worker processes, or a Dask cluster when configured), drops and counts the
ones that do not open, lets the protocol's ``agg_update`` validate the rest against the declared layout
(malformed rows dropped and counted), and folds the batch into the task's aggregate. The new aggregate and
the batch id are committed in one transaction, so a batch sent twice (the collector lost the
acknowledgement, or either party was killed) is applied once.

The result is the report ``privagg analyze`` prints, with the privacy block of a private run (the clients
drew from the SDK's secure generator), the task's honest-fraction assumption, and a ``collection`` block
counting reports, batches and dropped messages.

Routes: ``GET /tasks/{task_id}`` (public), ``POST /tasks/{task_id}/batches/{batch_id}`` (the collector),
``GET /tasks/{task_id}/result?top=K``, ``/healthz``, ``/readyz``, ``/metrics``.
"""

from __future__ import annotations

import hmac
import logging
import multiprocessing
import pickle
import re
import threading
import time
from concurrent.futures import Executor, ProcessPoolExecutor
from contextlib import asynccontextmanager
from dataclasses import dataclass, replace

import numpy as np
import sqlalchemy as sa
from fastapi import FastAPI, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import Response
from prometheus_client import CollectorRegistry, Counter, Histogram

from ..core.messages import MessageBatch
from ..errors import ParameterError
from . import storage
from .storage import aggregates, analyzer_tasks, applied_batches
from .tasks import Task, create_task, is_hex_id, open_messages, sealed_size
from .web import Refused, add_operations, log_event, read_body

log = logging.getLogger("privagg.analyzer")

SERIAL_BELOW = 4_096  # messages: a smaller batch is opened in this process (workers cost more than they save)
SERVICE_RANDOMNESS = "secure: each client's SDK draws from ChaCha20 keyed from its OS entropy (privagg.service.client)"


@dataclass
class _Loaded:
    task: Task
    private_key: bytes
    analyzer: object


class AnalyzerService:
    """The analyzer's logic over its database; the HTTP routes (:func:`create_app`) only call it.

    ``executor``: where sealed messages are opened (``None``: in this process); a
    :class:`concurrent.futures.Executor` or a ``dask.distributed.Client`` (both have ``map``/``submit``).
    """

    def __init__(self, engine: sa.Engine, executor: Executor | None = None, workers: int = 1,
                 registry: CollectorRegistry | None = None) -> None:
        self.engine, self.executor, self.workers = engine, executor, workers
        self._tasks: dict[str, _Loaded] = {}
        self._lock = threading.Lock()  # one batch folds into an aggregate at a time (the database locks too)
        self.registry = registry or CollectorRegistry()
        self.batches = Counter("privagg_batches", "Batches received", ["outcome"], registry=self.registry)
        self.refused = Counter("privagg_requests_refused", "Requests refused", ["reason"], registry=self.registry)
        self.dropped = Counter("privagg_messages_dropped", "Messages dropped", ["reason"], registry=self.registry)
        self.opened = Counter("privagg_messages_opened", "Messages opened and aggregated", registry=self.registry)
        self.batch_messages = Histogram("privagg_batch_messages", "Messages per applied batch",
                                        buckets=(1_000, 10_000, 100_000, 1_000_000, 10_000_000),
                                        registry=self.registry)

    # ---- tasks ---------------------------------------------------------------------------------------------
    def create_task(self, parameters, min_batch_size: int | None = None, key_id: int = 0,
                    kem: str = "x25519") -> Task:
        """A new task for ``parameters`` (its KEM: "x25519" or "mlkem768-x25519"), its private key and an empty
        aggregate stored; returns the task."""
        from ..protocols.registry import analyzer as make_analyzer, get

        if get(parameters.protocol).result not in ("frequency table", "vector sum"):
            raise ParameterError("protocol", "one whose result is a frequency table or a vector sum (the service "
                                 "does not run fe-hh yet)", parameters.protocol)
        if get(parameters.protocol).result == "frequency table" and parameters.domain_size > 1 << 24:
            raise ParameterError("domain_size", "at most 2^24 for a service task (its aggregate counts every item)",
                                 parameters.domain_size)
        task, private_key = create_task(parameters, min_batch_size, key_id, kem)
        analyzer = make_analyzer(parameters)
        with self.engine.begin() as c:
            c.execute(sa.insert(analyzer_tasks).values(task_id=task.task_id, task=task.to_json(),
                                                       private_key=private_key))
            c.execute(sa.insert(aggregates).values(task_id=task.task_id, aggregate=pickle.dumps(analyzer.agg_init()),
                                                   batches=0, reports=0, unopened=0))
        log_event(log, "task created", task=task.task_id, protocol=parameters.protocol)
        return task

    def load(self, task_id: str) -> _Loaded:
        from ..protocols.registry import analyzer as make_analyzer

        if task_id not in self._tasks:
            if not is_hex_id(task_id):
                raise Refused(404, "unknown_task", f"task_id must be 32 lowercase hexadecimal characters, got {task_id}")
            with self.engine.connect() as c:
                row = c.execute(sa.select(analyzer_tasks.c.task, analyzer_tasks.c.private_key).where(
                    analyzer_tasks.c.task_id == task_id)).first()
            if row is None:
                raise Refused(404, "unknown_task", f"task_id must name a task of this analyzer, got {task_id}")
            task = Task.from_json(row.task, verify=False)  # verified when it was created
            self._tasks[task_id] = _Loaded(task, row.private_key, make_analyzer(task.parameters))
        return self._tasks[task_id]

    # ---- batches -------------------------------------------------------------------------------------------
    def _applied(self, connection, task_id: str, batch_id: str) -> bool:
        return connection.execute(sa.select(applied_batches.c.batch_id).where(
            applied_batches.c.task_id == task_id, applied_batches.c.batch_id == batch_id)).first() is not None

    def read_batch(self, loaded: _Loaded, batch_id: str, blob: bytes) -> tuple[np.ndarray, int]:
        """(the sealed messages as rows of bytes, the reports they came from), or a 400 naming the problem."""
        import pyarrow as pa

        size = sealed_size(loaded.task)
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
                          f"values, got {table.schema}")
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
        """(the messages that opened, how many did not), opened on the executor in chunks."""
        if self.executor is None or len(sealed) < SERIAL_BELOW:
            opened = [open_messages(loaded.task, loaded.private_key, sealed)]
        else:
            chunks = np.array_split(sealed, 4 * self.workers)
            n = len(chunks)
            futures = self.executor.map(open_messages, [loaded.task] * n, [loaded.private_key] * n, chunks)
            opened = self.executor.gather(futures) if hasattr(self.executor, "gather") else list(futures)
        return MessageBatch.concatenate([o.messages for o in opened]), sum(o.unopened for o in opened)

    def apply_batch(self, task_id: str, batch_id: str, blob: bytes) -> str:
        """Fold one batch into the task's aggregate, once: "applied", or "already applied"."""
        loaded = self.load(task_id)
        if not is_hex_id(batch_id):
            raise Refused(400, "malformed_batch", f"batch_id must be 32 lowercase hexadecimal characters, got "
                          f"{batch_id}")
        with self.engine.connect() as c:
            if self._applied(c, task_id, batch_id):
                self.batches.labels("replayed").inc()
                return "already applied"
        sealed, reports = self.read_batch(loaded, batch_id, blob)
        start = time.perf_counter()
        messages, unopened = self.open_batch(loaded, sealed)
        analyzer = loaded.analyzer
        part = analyzer.agg_update(analyzer.agg_init(), messages)
        with self._lock, self.engine.begin() as c:
            if self._applied(c, task_id, batch_id):  # a copy of this batch was applied meanwhile
                self.batches.labels("replayed").inc()
                return "already applied"
            row = c.execute(sa.select(aggregates).where(aggregates.c.task_id == task_id).with_for_update()).one()
            total = analyzer.merge([pickle.loads(row.aggregate), part])
            c.execute(sa.update(aggregates).where(aggregates.c.task_id == task_id).values(
                aggregate=pickle.dumps(total), batches=row.batches + 1, reports=row.reports + reports,
                unopened=row.unopened + unopened))
            c.execute(sa.insert(applied_batches).values(task_id=task_id, batch_id=batch_id))
        seconds = time.perf_counter() - start
        self.batches.labels("applied").inc()
        self.opened.inc(len(messages))
        self.dropped.labels("unopened").inc(unopened)
        self.dropped.labels("malformed").inc(part.malformed)
        self.batch_messages.observe(len(sealed))
        log_event(log, "batch applied", task=task_id, batch=batch_id, reports=reports, messages=len(sealed),
                  unopened=unopened, malformed=int(part.malformed), seconds=round(seconds, 3),
                  messages_per_second=round(len(sealed) / max(seconds, 1e-9)))
        return "applied"

    # ---- results -------------------------------------------------------------------------------------------
    def result(self, task_id: str, top: int = 10) -> dict:
        """The task's result as ``privagg analyze --json`` prints it, private, with the collection counts."""
        from ..core.encoding import ItemEncoder
        from ..reports import Collection, Engine, analysis_report, to_json_dict, with_received_caveat

        loaded = self.load(task_id)
        with self.engine.connect() as c:
            row = c.execute(sa.select(aggregates).where(aggregates.c.task_id == task_id)).one()
        agg, p = pickle.loads(row.aggregate), loaded.task.parameters
        start = time.perf_counter()
        result = loaded.analyzer.finalize(agg)
        engine = Engine("local", row.batches, seconds={"finalize": time.perf_counter() - start})
        privacy = with_received_caveat(replace(p.privacy, randomness=SERVICE_RANDOMNESS), p,
                                       int(agg.messages + agg.malformed))
        report = analysis_report(p, result, privacy, engine, encoder=ItemEncoder(p.domain_size, kind="integer"), top=top,
                                 collection=Collection(row.reports, row.batches, row.unopened, int(agg.malformed)))
        return to_json_dict(report)


def create_app(service: AnalyzerService, max_batch_bytes: int = 1 << 30, collector_token: str | None = None, *,
               operator_token: str | None = None, api_docs: bool = False, limits: Limits | None = None) -> FastAPI:
    """The analyzer's HTTP service; with ``collector_token``, a batch is taken only from whoever shows it
    (``Authorization: Bearer TOKEN``): the collector. Without it, anyone who reaches the port can add
    messages, so it is for loopback and tests.

    ``operator_token``: the secret ``/metrics`` asks for (open without it); ``api_docs``: serve /docs, /redoc
    and /openapi.json; ``limits``: the connection and request limits of a served app
    (:func:`privagg.service.web.add_operations`)."""
    from .collector import BATCH_MEDIA_TYPE
    from .web import make_app

    if collector_token is None:
        log.warning("no collector token: batches are taken from anyone who reaches this port")

    @asynccontextmanager
    async def lifespan(_app: FastAPI):
        log_event(log, "analyzer started")
        yield
        if isinstance(service.executor, Executor):
            service.executor.shutdown()
        elif service.executor is not None:  # a Dask client
            service.executor.close()
        service.engine.dispose()
        log_event(log, "analyzer stopped")

    app = make_app("privagg analyzer", lifespan, api_docs)

    add_operations(app, service.registry, service.engine, lambda err: service.refused.labels(err.reason).inc(),
                   health=getattr(service, "health", None), operator_token=operator_token, limits=limits)

    @app.get("/tasks/{task_id}")
    async def task(task_id: str) -> Response:
        loaded = await run_in_threadpool(service.load, task_id)
        return Response(loaded.task.to_json(), media_type="application/json")

    @app.post("/tasks/{task_id}/batches/{batch_id}")
    async def batch(task_id: str, batch_id: str, request: Request) -> dict:
        if collector_token is not None and not hmac.compare_digest(
                request.headers.get("authorization", "").encode(), f"Bearer {collector_token}".encode()):
            raise Refused(401, "unauthenticated", "a batch must come from the collector: Authorization must be "
                          "Bearer followed by the collector token")
        body = await read_body(request, max_batch_bytes, BATCH_MEDIA_TYPE)
        return {"status": await run_in_threadpool(service.apply_batch, task_id, batch_id, body)}

    @app.get("/tasks/{task_id}/result")
    async def result(task_id: str, top: int = 10) -> dict:
        if not 1 <= top <= 100_000:
            raise Refused(400, "malformed", f"top must be 1..100000, got {top}")
        return await run_in_threadpool(service.result, task_id, top)

    return app


def open_analyzer(db_url: str, workers: int | None = None, dask_scheduler: str | None = None,
                  registry: CollectorRegistry | None = None) -> AnalyzerService:
    """An analyzer over the database at ``db_url`` (migrated), opening messages on ``workers`` processes
    (default: one per core; 0 or 1: in this process) or on the Dask scheduler at ``dask_scheduler``.
    Dask workers see the private key: they are inside the analyzer's trust boundary."""
    import os

    engine = storage.connect(db_url, "analyzer")
    if dask_scheduler is not None:
        from dask.distributed import Client

        client = Client(dask_scheduler)
        return AnalyzerService(engine, client, len(client.scheduler_info()["workers"]) or 1, registry)
    workers = os.cpu_count() or 1 if workers is None else workers
    executor = None if workers <= 1 else ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("spawn"))
    return AnalyzerService(engine, executor, workers, registry)
