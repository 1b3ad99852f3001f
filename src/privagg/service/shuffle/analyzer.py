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
(:class:`~privagg.service.shuffle.analyzer_results.LostMessages`; docs/deployment.md, "Messages that do not enter
the aggregate").

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

:class:`AnalyzerService` holds the tasks (creation, loading, candidates) here; applying batches is
:class:`~privagg.service.shuffle.analyzer_batches.BatchApplication`'s, the task list and results
:class:`~privagg.service.shuffle.analyzer_results.Release`'s.
"""

from __future__ import annotations

import json
import logging
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

from ...errors import ParameterError
from .. import storage
from ..keys import KeyEncryptionKey
from ..ledger import DEFAULT_POPULATION, charge, check_population, ledgers, task_cost
from ..storage import aggregates, analyzer_tasks, applied_batches, opened_messages
from ..tasks import SERVED, Task, create_task, is_hex_id, unpacked_records
from ..web import (Health, Limits, Refused, add_operations, json_object, log_event, loopback_only, make_app, read_body,
                   require_bearer, shown)
from .aggregate_codec import decode_aggregate, encode_aggregate
from .analyzer_batches import BatchApplication
from .analyzer_results import Release
from .collector import BATCH_MEDIA_TYPE
from .console import refusal_page, task_page, tasks_page
from .workers import BatchWorkers

log = logging.getLogger("privagg.analyzer")

DEFAULT_MEMORY_BUDGET = 2 << 30  # bytes one partition of a partitioned batch may take to open
MAX_CANDIDATES = 1_000_000  # public items one task answers
MAX_CANDIDATE_BYTES = 64 << 20  # the body of a request adding candidates


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


class AnalyzerService(BatchApplication, Release):
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
                    kem: str = "x25519", candidates: list | None = None, discover_phi: float | None = None,
                    population: str = DEFAULT_POPULATION) -> Task:
        """A new task for ``parameters`` (its KEM: "x25519" or "mlkem768-x25519"), its private key (a new key pair
        for every task, sealed under the KEK) and an empty aggregate stored; returns the task. ``key_id``
        (0..255): the id clients see for its key; by default the one after the newest task's, so consecutive
        tasks' keys never share an id. ``candidates`` (frequency protocols, and the 1-sparse vector sums): the
        public items the result answers, integers of the domain or strings (hashed with the parameters'
        ``item_key``), or coordinates; required over a domain too large to estimate whole (over 2^24 items).
        ``discover_phi`` (sparse-vector-hashed, no candidates): the paper's two stages as one task, its first an
        fe-hh task over the B + 1 cells at the parameters' (eps, delta) and this phi (so the task's guarantee is
        twice theirs, by basic composition), whose discovered coordinates the task estimates. ``population``: the
        ledger's population the task's guarantee is charged to in the transaction that stores it
        (:func:`~privagg.service.ledger.charge`: a :class:`~privagg.service.ledger.BudgetExceeded` stores nothing)."""
        from ...pipelines import Analysis
        from ...protocols.balls_into_bins import CountAggregate
        from ...protocols.kinds import ResultKind
        from ...protocols.registry import (analyzer_checks, choose_full_domain, discovery_parameters,
                                          full_domain_seconds, get)

        entry = get(parameters.protocol)
        if not entry.served:
            raise ParameterError("protocol", SERVED, parameters.protocol)
        check_population(population)
        stage = None if discover_phi is None else discovery_parameters(parameters, discover_phi)
        cost = task_cost(parameters, stage)
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
            charge(c, population, task.task_id, parameters.protocol, cost)
        log_event(log, "task created", task=task.task_id, protocol=parameters.protocol,
                  **({} if stage is None else {"discovery": stage.task_id}))
        return task

    def ledgers(self) -> list[dict]:
        """Each population's privacy budget, spent and remaining (:func:`privagg.service.ledger.ledgers`)."""
        with storage.reading(self.engine) as c:
            return [ledger.to_dict() for ledger in ledgers(c)]

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
                aggregate=encode_aggregate(total), messages=int(total.messages), malformed=int(total.malformed)))
            c.execute(sa.update(analyzer_tasks).where(analyzer_tasks.c.task_id == task_id).values(
                candidates=json.dumps(merged)))
            self._tasks.pop(task_id, None)  # loaded again with the new candidates
        log_event(log, "candidates added", task=task_id, candidates=len(codes), batches=row.batches)
        return len(codes)

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
        require_bearer(request, result_token, "the results and the task list are for their owners: Authorization "
                       "must be Bearer followed by the result token")

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
            return tasks_page(await run_in_threadpool(service.overview), await run_in_threadpool(service.ledgers))
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
        require_bearer(request, collector_token, "a batch must come from the collector: Authorization must be "
                       "Bearer followed by the collector token")
        body = await read_body(request, max_batch_bytes, BATCH_MEDIA_TYPE)
        return {"status": await run_in_threadpool(service.apply_batch, task_id, batch_id, body)}

    @app.post("/tasks/{task_id}/batches/{batch_id}/partitioned")
    async def partitioned(task_id: str, batch_id: str, request: Request) -> dict:
        require_bearer(request, collector_token, "a batch must come from the collector: Authorization must be "
                       "Bearer followed by the collector token")
        return {"status": await run_in_threadpool(service.apply_partitioned_batch, task_id, batch_id)}

    @app.post("/tasks/{task_id}/candidates")
    async def candidates(task_id: str, request: Request) -> dict:
        owner(request)
        if result_token is None:
            loopback_only(request, "result_token", "this route adds the items a task's result is estimated on and "
                          "published by")
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

    engine = storage.serving(db_url, "analyzer", kek=kek)  # refused if another process serves it
    if dask_scheduler is not None:
        from dask.distributed import Client

        client = Client(dask_scheduler)
        return AnalyzerService(engine, client, len(client.scheduler_info()["workers"]) or 1, registry, kek=kek,
                               **options)
    workers = os.cpu_count() or 1 if workers is None else workers
    executor = None if workers <= 1 else BatchWorkers(workers)
    return AnalyzerService(engine, executor, workers, registry, kek=kek, **options)
