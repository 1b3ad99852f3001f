"""The service leg of ``privagg demo-service`` (:func:`privagg.demos.run_demo` puts the simulation beside it).

Starts an analyzer and a collector on loopback ports (SQLite files in a work folder), creates a task for the
parameters, issues one token per user, and sends every user's report as a real SDK client over HTTP.
"""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path

import numpy as np


def run_services(workdir: Path, parameters, codes: np.ndarray, concurrency: int = 500, top: int = 10,
                 progress=print) -> tuple[dict, dict]:
    """(the task's released result with its ``top`` items, the load figures) of one user a code of ``codes``,
    each sent through both services by an SDK client."""
    from .client import Client
    from .loadgen import run_load
    from ..local import fresh_sqlite
    from .deployment import LocalDeployment

    dbs = {role: fresh_sqlite(workdir, role) for role in ("analyzer", "collector")}
    with LocalDeployment(dbs, workdir / "logs") as dep:
        progress(f"analyzer at {dep.url('analyzer')}, collector at {dep.url('collector')} (logs in {workdir / 'logs'})")
        task = dep.create_task(parameters)
        tokens = dep.issue_tokens(task.task_id, len(codes))
        progress(f"{len(codes)} clients randomizing, sealing and sending...")
        load = run_load(dep.url("collector"), Client.fetch(dep.url("analyzer"), task.task_id), codes.tolist(), tokens,
                        concurrency)
        dep.wait_released(task.task_id)
        return dep.result(task.task_id, top=top), asdict(load)

