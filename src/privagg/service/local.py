"""The parties as processes on this machine: ``privagg demo-service``, the fault tests and the benchmarks.

:class:`LocalDeployment` creates a task in the analyzer's database, issues its tokens, and starts
``privagg serve analyzer`` and ``privagg serve collector`` as child processes on free loopback ports; it
can kill either with SIGKILL and start it again on the same port and database, and stops both gracefully
(SIGTERM) on exit. :class:`ServiceProcess` is one such party, whatever its role (the sharing server, S1 and S2
run alone).
"""

from __future__ import annotations

import json
import os
import secrets
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

from .. import errors
from .storage import connect
from .tasks import Task

READY_SECONDS = 60.0
DEMO_MARK = ".privagg-demo-service"  # in a folder a demo made: the demo may replace its own databases there


def fresh_sqlite(workdir: Path, name: str) -> str:
    """A SQLite URL ``name``.db in ``workdir`` with no database left from an earlier run: a demo's folder, made
    (and marked with :data:`DEMO_MARK`) if it does not exist or is empty. A folder that holds other files and no
    mark is refused (a ParameterError naming ``workdir``): a database of that name there may be a deployment's,
    which a demo must never delete."""
    workdir = Path(workdir)
    if workdir.is_dir() and not (workdir / DEMO_MARK).exists() and any(workdir.iterdir()):
        held = sorted(p.name for p in workdir.iterdir())
        raise errors.ParameterError("workdir", "a new or empty folder, or one demo-service made (it replaces its "
                                    "databases there)", f"{workdir}, which holds {', '.join(held[:5])}"
                                    f"{', ...' if len(held) > 5 else ''}")
    workdir.mkdir(parents=True, exist_ok=True)
    (workdir / DEMO_MARK).touch()
    for suffix in ("", "-wal", "-shm"):
        (workdir / f"{name}.db{suffix}").unlink(missing_ok=True)
    return f"sqlite:///{workdir / f'{name}.db'}"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_ready(url: str, seconds: float = READY_SECONDS) -> None:
    """Wait until ``url``/readyz answers 200."""
    deadline = time.monotonic() + seconds
    while True:
        try:
            with urllib.request.urlopen(f"{url}/readyz", timeout=2) as answer:
                if answer.status == 200:
                    return
        except (urllib.error.URLError, OSError):
            pass
        if time.monotonic() > deadline:
            raise RuntimeError(f"{url} did not become ready in {seconds:.0f} s")
        time.sleep(0.05)


def cpu_seconds(pid: int) -> float:
    """The CPU time process ``pid`` has used so far, user and system (from /proc: Linux only)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime, stime: stat's 14th, 15th


class ServiceProcess:
    """``privagg serve ROLE`` as a child process on a free loopback port over the database ``db`` (``args``: more
    flags), its log appended to ``log``; it can be killed with SIGKILL and started again on the same port and
    database. Its first start makes the database if there is none, as its operator would (``privagg db upgrade
    --create``: ``privagg serve`` makes none)."""

    def __init__(self, role: str, db: str, log: Path, env: dict[str, str] | None = None,
                 args: tuple[str, ...] = ()) -> None:
        self.role, self.db, self.log, self.args, self.port = role, db, Path(log), args, free_port()
        self.env = {**os.environ, **(env or {})}
        self.process: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"{'https' if '--tls-cert' in self.args else 'http'}://127.0.0.1:{self.port}"

    def start(self) -> None:
        if self.process is None:
            connect(self.db, self.role, create=True).dispose()
        self.log.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log, "ab") as log:
            self.process = subprocess.Popen([sys.executable, "-m", "privagg", "serve", self.role, "--db", self.db,
                                             "--port", str(self.port), *self.args], stdout=log,
                                            stderr=subprocess.STDOUT, env=self.env)
        wait_ready(self.url)

    def cpu_seconds(self) -> float:
        """The CPU time the process has used so far, user and system (from /proc: Linux only)."""
        return cpu_seconds(self.process.pid)

    def kill(self) -> None:
        """SIGKILL: no shutdown code runs, as in a crash."""
        self.process.send_signal(signal.SIGKILL)
        self.process.wait()

    def stop(self) -> None:
        """SIGTERM: uvicorn finishes its requests, background loops stop; SIGKILL after 30 s."""
        if self.process is None or self.process.poll() is not None:
            return
        self.process.send_signal(signal.SIGTERM)
        try:
            self.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()

    def __enter__(self):
        try:
            self.start()
        except BaseException:  # not ready, or interrupted (demo-service's SIGTERM): no process left behind
            self.stop()
            raise
        return self

    def __exit__(self, *_exc) -> None:
        self.stop()


class LocalDeployment:
    """An analyzer and a collector on loopback, over the databases ``dbs`` ({"analyzer": URL, "collector": URL}).

    ``env`` adds to the services' environment (``PRIVAGG_COLLECTOR_BATCH_QUIET``, ...); their logs go to
    ``log_dir`` (one file per role, appended across restarts).
    """

    def __init__(self, dbs: dict[str, str], log_dir: Path, env: dict[str, str] | None = None) -> None:
        self.dbs, self.log_dir = dbs, Path(log_dir)
        from .keys import KeyEncryptionKey

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

        from .storage import analyzer_tasks

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
