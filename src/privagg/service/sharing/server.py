"""The sharing server: DPDS's and DPDG's server as a service (FastAPI): roster, relay, rounds with deadlines, release.

The users are SDK clients (:mod:`privagg.service.round_client`) with their own HPKE key pairs. Each enrolls
with a one-use token and his public key and is given his index in the roster and a secret he authenticates
his later requests with. Once all n enrolled, the rounds of :mod:`privagg.protocols.sharing_parties` run on the
round driver (:mod:`privagg.service.rounds`), each until every user it expects has answered or its deadline
passes:

round 1   advertise: a user posts his commitments to each user's Shamir shares and his n - 1 backups, each sealed
          to its recipient (HPKE, the task id bound as info); the server stores them, whole or not at all, and can
          open none. U1: who posted by the deadline.
round 2   check: a user of U1 fetches the backups U1 sent him with their dealers' commitments to his shares, and
          posts his pair key and his complaints (the dealers whose backup did not open or match). U1': U1 less the
          users complained about (``SharingServer.excluded``) and those who did not answer.
round 3   masked_sum: a user of U1' fetches U1''s pair keys and posts his masked sum. U2: who posted by the deadline.
round 4   consistency: a user of U2 fetches U1' and U2 and posts his signature of them (his identity key). U3.
round 5   reveal: a user of U3 fetches the lists and U3's signatures, checks that t of them sign what he signed, and
          posts his revealed shares. At its close the server checks them and proves each dealer whose shares rebuild
          another secret than he announced (``SharingServer.proven``).
round 6   exclusion, only when some dealer was proven inconsistent: a survivor fetches each proven dealer's signed
          round-1 and round-2 messages and the openings that prove him inconsistent, checks every proof, and posts
          his pair seeds with each (nothing if a proof fails).
release   once every user of U3 revealed, or at the deadline once t did (``threshold``): each revealed share checked
          against its dealer's commitment (a wrong one discarded, its revealer blamed), the survivors' sum (a dealer
          proven inconsistent left out, the survivors' terms with him removed with their pair seeds), estimates, and
          the guarantee recomputed for them (``SharingServer.release``). Fewer than the task's
          minimum of senders or survivors, or fewer than t signers or revealers: the task fails, and nothing is
          released.

Every message is stored once, in committed transactions (SQLite WAL with synchronous FULL, or PostgreSQL), so a
kill -9 loses nothing: the rounds resume from the database with their absolute deadlines.

Routes: the round driver's (``POST /tasks/{id}/enroll``, ``/inbox``, ``/round{k}``, ``GET /tasks/{id}/roster``,
``POST /tasks/{id}/close-round/{k}``), ``GET /tasks/{id}`` (the task and its state), ``GET
/tasks/{id}/result``; ``/healthz``, ``/readyz``, ``/metrics``.
"""

from __future__ import annotations

import dataclasses
import logging
import secrets
import time

import sqlalchemy as sa
from fastapi import FastAPI
from fastapi.concurrency import run_in_threadpool
from prometheus_client import CollectorRegistry

from .. import storage
from ..roster import rounds_app
from ..round_tasks import SharingTask
from ..rounds import RoundDriver, round_routes
from ..storage import SHARING_TABLES
from ..tasks import TASK_ID_BYTES
from ..web import Limits

log = logging.getLogger("privagg.sharing")

SERVICE_RANDOMNESS = ("secure: each user's SDK draws his secret from the OS and his coin or noise from ChaCha20 "
                      "keyed from OS entropy (privagg.service.round_client)")


def release_document(task: SharingTask, released, seconds: float) -> dict:
    """The outcome of a released task: the report ``privagg analyze`` would make of the release, with who took part
    (and who complained about whom, whom that excluded, whose revealed shares were discarded, which dealers were
    proven inconsistent and excluded in round 6) and the guarantee recomputed for them."""
    from ...pipelines import Analysis
    from ...reports import Collection, Dropouts, Engine, report_document

    p = released.parameters
    privacy = dataclasses.replace(released.privacy, randomness=SERVICE_RANDOMNESS)
    report = Analysis.of(p).report(released.table, privacy, Engine("local", 1, seconds={"release": seconds}),
                                   top=p.domain_size, collection=Collection(released.survivors, 1, 0, 0))
    report.dropouts = Dropouts(task.parameters.n_users, released.senders, released.survivors, task.min_survivors)
    out = report_document(report)
    # round 2's complaints ([complainer, the dealers he named...]) and the excluded; the revealers whose shares did
    # not match their dealers' commitments ([revealer, the owners of his discarded shares...]); the dealers proven
    # inconsistent, excluded in round 6
    out["dropouts"].update(complaints=[[k, *accused] for k, accused in released.complaints],
                           excluded=list(released.excluded), blamed=[[k, *owners] for k, owners in released.blamed],
                           inconsistent=list(released.inconsistent))
    return out


class SharingService(RoundDriver):
    """The sharing server over its database: the round driver over the sharing tables, its tasks DPDS and DPDG
    tasks, its outcome the release's report (:func:`release_document`)."""

    def __init__(self, engine: sa.Engine, registry: CollectorRegistry | None = None, clock=time.time) -> None:
        super().__init__(engine, SHARING_TABLES, SharingTask, "sharing server", "sharing", release_document, registry,
                         clock)

    def create_task(self, parameters, round_seconds: float = 60.0, min_survivors: int | None = None) -> SharingTask:
        """A new task; ``min_survivors`` defaults to n (every user must take part to the end): set it lower to
        release despite dropouts."""
        task = SharingTask(secrets.token_hex(TASK_ID_BYTES), parameters, round_seconds,
                           parameters.n_users if min_survivors is None else min_survivors)
        self.add_task(task)
        return task


def create_app(service: SharingService, max_body_bytes: int = 1 << 30, tick: float | None = 0.5, *,
               operator_token: str | None = None, api_docs: bool = False, limits: Limits | None = None) -> FastAPI:
    """The sharing server's HTTP service (``tick=None``: rounds advance only on requests)."""
    app, body = rounds_app("privagg sharing server", service, log, max_body_bytes, tick=tick,
                           operator_token=operator_token, api_docs=api_docs, limits=limits)
    round_routes(app, service, body, operator_token)

    @app.get("/tasks/{task_id}/result")
    async def result(task_id: str) -> dict:
        return await run_in_threadpool(service.result, task_id)

    return app


def open_sharing(db_url: str, registry: CollectorRegistry | None = None) -> SharingService:
    """The sharing server over its existing database at ``db_url`` (:func:`~privagg.service.storage.connect`: a
    service makes no database), refused if another process serves it (:mod:`~privagg.service.process_lock`)."""
    return SharingService(storage.serving(db_url, "sharing"), registry)
