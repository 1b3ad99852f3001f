"""The parties as processes on this machine: ``privagg demo-service``, the fault tests and the benchmarks.

:class:`ServiceProcess` is one party, whatever its role, started as ``privagg serve ROLE`` on a free loopback
port; it can be killed with SIGKILL and started again on the same port and database, and stops gracefully
(SIGTERM). The shuffle model's analyzer and collector together are
:class:`privagg.service.shuffle.deployment.LocalDeployment`; the sharing server, S1 and S2 run alone.
"""

from __future__ import annotations

import fcntl
import os
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
    _hold_workdir(workdir)
    for suffix in ("", "-wal", "-shm"):
        (workdir / f"{name}.db{suffix}").unlink(missing_ok=True)
    return f"sqlite:///{workdir / f'{name}.db'}"


_HELD: dict[Path, int] = {}  # the demo folders this process holds: folder -> the open mark's descriptor


def _hold_workdir(workdir: Path) -> None:
    """The folder's mark, locked (flock) for as long as this process runs, with its pid in it: a second demo in the
    same folder is refused in one line (a reviewer's finding: it deleted the running demo's databases under its
    services, and both ended in tracebacks)."""
    mark = (workdir / DEMO_MARK).resolve()
    if mark in _HELD:
        return
    fd = os.open(mark, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        pid = os.read(fd, 32).decode(errors="replace").strip() or "unknown"
        os.close(fd)
        raise errors.ParameterError("workdir", "a folder no other demo-service is running in (it replaces its "
                                    "databases there)", f"{workdir}, where demo-service pid {pid} runs") from None
    os.ftruncate(fd, 0)
    os.write(fd, str(os.getpid()).encode())
    _HELD[mark] = fd


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_ready(url: str, seconds: float = READY_SECONDS, process: subprocess.Popen | None = None,
               log: Path | None = None) -> None:
    """Wait until ``url``/readyz answers 200; a RuntimeError with the last line of ``log`` as soon as ``process``
    (the service's) has ended instead (a service that refused to start: its own one-line error)."""
    deadline = time.monotonic() + seconds
    while True:
        if process is not None and process.poll() is not None:
            last = (log.read_text(errors="replace").strip().splitlines() or ["(no output)"])[-1] if log else ""
            raise errors.StartFailed(f"the service at {url} ended (exit {process.returncode}) before it was ready: "
                                     f"{last}")
        try:
            with urllib.request.urlopen(f"{url}/readyz", timeout=2) as answer:
                if answer.status == 200:
                    return
        except (urllib.error.URLError, OSError):
            pass
        if time.monotonic() > deadline:
            raise errors.StartFailed(f"{url} did not become ready in {seconds:.0f} s")
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
        wait_ready(self.url, process=self.process, log=self.log)

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
