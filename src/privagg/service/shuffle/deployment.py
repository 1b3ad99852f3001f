"""The shuffle model's parties as processes on this machine: ``privagg demo-service``, the fault tests and the
benchmarks.

:class:`LocalDeployment` creates a task in the analyzer's database, issues its tokens, and starts
``privagg serve analyzer`` and ``privagg serve collector`` as child processes on free loopback ports
(:class:`~privagg.service.local.ServiceProcess`); it can kill either with SIGKILL and start it again on the same
port and database, and stops both gracefully (SIGTERM) on exit.
"""

from __future__ import annotations

import json
import os
import secrets
import time
import urllib.request
from pathlib import Path

from ... import errors
from ..local import ServiceProcess
from ..storage import connect
from ..tasks import Task


class LocalDeployment:
    """An analyzer and a collector on loopback, over the databases ``dbs`` ({"analyzer": URL, "collector": URL}).

    ``env`` adds to the services' environment (``PRIVAGG_COLLECTOR_BATCH_QUIET``, ...); their logs go to
    ``log_dir`` (one file per role, appended across restarts).
    """

    def __init__(self, dbs: dict[str, str], log_dir: Path, env: dict[str, str] | None = None) -> None:
        self.dbs, self.log_dir = dbs, Path(log_dir)
        from ..keys import KeyEncryptionKey

        token = secrets.token_urlsafe(32)  # the collector shows it to the analyzer with each batch
        self.kek = KeyEncryptionKey.local()  # the analyzer's private keys are sealed under it in its database
        self.env = {**os.environ, "PRIVAGG_COLLECTOR_COLLECTOR_TOKEN": token, "PRIVAGG_ANALYZER_COLLECTOR_TOKEN": token,
                    "PRIVAGG_KEK": self.kek.export(), **(env or {})}  # the services' environment (a test starting
        # its own processes takes it too)
        analyzer = ServiceProcess("analyzer", dbs["analyzer"], self.log_dir / "analyzer.log", self.env)
        self.services = {"analyzer": analyzer, "collector": ServiceProcess(
            "collector", dbs["collector"], self.log_dir / "collector.log", self.env,
            ("--analyzer", analyzer.url, "--batch-interval", "0.2"))}

    def url(self, role: str) -> str:
        return self.services[role].url

    def create_task(self, parameters, min_batch_size: int | None = None) -> Task:
        from .analyzer import AnalyzerService

        engine = connect(self.dbs["analyzer"], "analyzer", kek=self.kek)
        try:
            return AnalyzerService(engine, kek=self.kek).create_task(parameters, min_batch_size)
        finally:
            engine.dispose()

    def issue_tokens(self, task_id: str, count: int) -> list[str]:
        """Tokens of a task of the analyzer, which the collector fetches first (from the analyzer's database, so
        that the services need not run yet) as it would at the task's first report."""
        from .collector import Collector

        engine = connect(self.dbs["collector"], "collector")
        try:
            return Collector(engine, self._analyzer_task, None).issue_tokens(task_id, count)
        finally:
            engine.dispose()

    def _analyzer_task(self, task_id: str) -> str | None:
        """The task's public JSON as the analyzer serves it (GET /tasks/ID), None if it has no such task."""
        import sqlalchemy as sa

        from ..storage import analyzer_tasks

        engine = connect(self.dbs["analyzer"], "analyzer", kek=self.kek, create=False)
        try:
            with engine.connect() as c:
                return c.execute(sa.select(analyzer_tasks.c.task).where(analyzer_tasks.c.task_id == task_id)).scalar()
        finally:
            engine.dispose()

    def start(self, role: str) -> None:
        self.services[role].start()

    def kill(self, role: str) -> None:
        """SIGKILL: no shutdown code runs, as in a crash."""
        self.services[role].kill()

    def stop(self, role: str) -> None:
        self.services[role].stop()

    def status(self, task_id: str) -> dict:
        with urllib.request.urlopen(f"{self.url('collector')}/tasks/{task_id}/status", timeout=10) as answer:
            return json.loads(answer.read())

    def result(self, task_id: str, top: int = 10) -> dict:
        with urllib.request.urlopen(f"{self.url('analyzer')}/tasks/{task_id}/result?top={top}", timeout=120) as a:
            return json.loads(a.read())

    def wait_released(self, task_id: str, seconds: float = 180.0) -> dict:
        """Wait until no report waits at the collector and no batch awaits acknowledgement."""
        deadline = time.monotonic() + seconds
        while True:
            status = self.status(task_id)
            if status["reports_waiting"] == 0 and status["batches_pending"] == 0:
                return status
            if time.monotonic() > deadline:
                raise errors.ParameterError("collection", f"released within {seconds:.0f} s", status)
            time.sleep(0.1)

    def __enter__(self) -> "LocalDeployment":
        try:
            for role in ("analyzer", "collector"):
                self.start(role)
        except BaseException:  # one not ready, or interrupted (demo-service's SIGTERM): no process left behind
            self.__exit__()
            raise
        return self

    def __exit__(self, *exc) -> None:
        for role in self.services:
            self.stop(role)
