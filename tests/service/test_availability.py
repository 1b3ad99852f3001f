"""Availability: the red-team report's attacks on the services, each a test that failed before the services
bounded their connections, answered their health checks from the event loop and failed cleanly.

Connections are attacked on real service processes (``python -m privagg serve``) on 127.0.0.1, with header and
body timeouts of 1 s and an idle timeout of 0.5 s (the environment's ``PRIVAGG_<ROLE>_..._TIMEOUT``): idle
sockets, headers or bodies a byte at a time, a body cut short, and idle sockets beyond the open files a
process may hold. These do not touch the database, so they run on SQLite only; what does (health under a
blocked thread pool, a full database) runs on SQLite and on PostgreSQL (the ``databases`` fixture).

Timing bounds are generous and one-sided: a connection the server should close must be closed within its
timeout plus :data:`SLACK` (the server's timer fires on time; a loaded 2-core machine may run the test's own
polling late), where before the change it stayed open for good; a health check must answer within
:data:`QUICK`, where before it waited for a worker thread held by a lock for as long as the lock was held.
"""

import asyncio
import json
import logging
import os
import resource
import selectors
import socket
import sqlite3
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
import sqlalchemy as sa
from fastapi.responses import JSONResponse
from fastapi.testclient import TestClient
from prometheus_client import CollectorRegistry
from starlette.requests import Request
from typer.testing import CliRunner

from privagg.errors import ParameterError
from privagg.protocols.registry import calibrate
from privagg.service import storage
from privagg.service.shuffle.analyzer import AnalyzerService, create_app as analyzer_app
from privagg.service.shuffle.client import Client
from privagg.service.shuffle.collector import BATCH_MEDIA_TYPE, Collector, batch_stream, create_app as collector_app
from privagg.service.config import describe, load_config
from privagg.service.keys import KeyEncryptionKey
from privagg.service.local import free_port, wait_ready
from privagg.service.tasks import create_task, seal_messages
from privagg.service.web import (Health, Limits, Refusals, Refused, RequestLimit, add_operations, make_app,
                                 read_body, shown)

TIMEOUT = 1.0  # the header and body timeouts of the services under test (seconds)
IDLE = 0.5  # their idle timeout
SLACK = 4.0  # seconds past a timeout before a connection still open fails a test
QUICK = 2.0  # seconds within which /healthz, /readyz and the task must answer while reports wait on a lock
ROOT = Path(__file__).resolve().parents[2]
ARROW = {"content-type": BATCH_MEDIA_TYPE}


@dataclass
class Service:
    """A service process under test: its URL and its log (stdout and stderr)."""

    process: subprocess.Popen
    port: int
    log: Path

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def refused(self, reason: str) -> float:
        """The service's refusals of ``reason`` so far, from /metrics."""
        text = get(self, "/metrics")[1]
        label = f'{{reason="{reason}"}} '
        return sum(float(line.split()[-1]) for line in text.splitlines()
                   if line.startswith("privagg_") and "_refused_total" in line and label in line)

    def log_lines(self) -> list[dict]:
        return [json.loads(line) for line in self.log.read_text().splitlines() if line.startswith("{")]


@contextmanager
def serve(role: str, db: str, folder: Path, env: dict[str, str] | None = None, open_files: int | None = None,
          args: tuple[str, ...] = ()) -> Iterator[Service]:
    """``privagg serve ROLE`` on a free loopback port with the test timeouts, over ``db`` made first as its operator
    would (``privagg serve`` makes none); ``open_files``: the process's soft and hard RLIMIT_NOFILE (so it cannot
    raise it)."""
    storage.connect(db, role).dispose()
    port, prefix = free_port(), f"PRIVAGG_{role.upper()}_"
    environment = {**os.environ, prefix + "HEADER_TIMEOUT": str(TIMEOUT), prefix + "BODY_TIMEOUT": str(TIMEOUT),
                   prefix + "IDLE_TIMEOUT": str(IDLE), **(env or {})}
    command = [sys.executable, "-m", "privagg", "serve", role, "--db", db, "--port", str(port), *args]
    if open_files is not None:  # set in the child, which then becomes the service (no preexec_fn: threads here)
        limit_then_serve = ("import os, resource, sys; n = int(sys.argv[1]); "
                            "resource.setrlimit(resource.RLIMIT_NOFILE, (n, n)); "
                            "os.execv(sys.executable, [sys.executable, *sys.argv[2:]])")
        command = [sys.executable, "-c", limit_then_serve, str(open_files), *command[1:]]
    log = folder / f"{role}-{port}.log"
    with open(log, "wb") as out:
        process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, env=environment)
    try:
        wait_ready(f"http://127.0.0.1:{port}")
        yield Service(process, port, log)
    finally:
        process.terminate()
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def get(service: Service, path: str, timeout: float = 5.0, headers: dict | None = None) -> tuple[int, str]:
    request = urllib.request.Request(f"{service.url}{path}", headers=headers or {})
    try:
        with urllib.request.urlopen(request, timeout=timeout) as answer:
            return answer.status, answer.read().decode()
    except urllib.error.HTTPError as err:
        return err.code, err.read().decode()


def connections(service: Service, count: int, first: bytes = b"") -> list[socket.socket]:
    made = []
    for _ in range(count):
        s = socket.create_connection(("127.0.0.1", service.port), timeout=5)
        if first:
            s.sendall(first)
        made.append(s)
    return made


def closing_times(sockets: list[socket.socket], within: float, trickle: bytes = b"") -> list[float | None]:
    """Seconds until the server closed each socket (None: still open after ``within`` seconds), sending
    ``trickle`` on each open one every 0.2 s meanwhile (a slow sender); what the server sends is read and
    dropped. Closes the sockets."""
    start, closed = time.monotonic(), {}
    selector = selectors.DefaultSelector()
    for s in sockets:
        s.setblocking(False)
        selector.register(s, selectors.EVENT_READ)
    next_send = start
    while len(closed) < len(sockets) and time.monotonic() - start < within:
        for key, _ in selector.select(timeout=0.05):
            try:
                data = key.fileobj.recv(65536)
            except BlockingIOError:
                continue
            except OSError:  # reset by the server
                data = b""
            if not data:
                closed[key.fileobj] = time.monotonic() - start
                selector.unregister(key.fileobj)
        if trickle and time.monotonic() >= next_send:
            for s in sockets:
                if s not in closed:
                    try:
                        s.send(trickle)
                    except OSError:  # closed: its reader sees it
                        pass
            next_send += 0.2
    selector.close()
    for s in sockets:
        s.close()
    return [closed.get(s) for s in sockets]


def logged(service: Service, reason: str, seconds: float = 5.0) -> list[dict]:
    """The service's "refused" log lines of ``reason``, waiting up to ``seconds`` for one (a line held for the
    end of its second)."""
    deadline = time.monotonic() + seconds
    while True:
        lines = [line for line in service.log_lines() if line.get("event") == "refused" and line["reason"] == reason]
        if lines or time.monotonic() > deadline:
            return lines
        time.sleep(0.1)


@pytest.fixture(scope="module")
def analyzer(tmp_path_factory) -> Iterator[Service]:
    """One analyzer process (SQLite, no worker processes) for the connection attacks."""
    folder = tmp_path_factory.mktemp("analyzer")
    with serve("analyzer", f"sqlite:///{folder}/analyzer.db", folder, args=("--workers", "0")) as service:
        yield service


# ---- 1. bounded connections --------------------------------------------------------------------------------------
def test_idle_connections_are_closed_at_the_header_timeout(analyzer):
    before = analyzer.refused("header_timeout")
    times = closing_times(connections(analyzer, 300), TIMEOUT + SLACK)
    assert times.count(None) == 0, f"{times.count(None)} of 300 idle connections still open after {TIMEOUT + SLACK} s"
    assert get(analyzer, "/readyz")[0] == 200  # and the service serves on
    assert analyzer.refused("header_timeout") - before == 300
    line = logged(analyzer, "header_timeout")[-1]
    assert line["level"] == "WARNING" and line["status"] == 408 and "1 s" in line["detail"]


def test_headers_sent_a_byte_at_a_time_are_cut_off(analyzer):
    slow = connections(analyzer, 100, b"POST /tasks/" + b"a" * 32 + b"/batches/" + b"b" * 32 + b" HTTP/1.1\r\n")
    # one more sends a whole request, then the next one's headers slowly: the timeout runs again on a kept-alive
    # connection, from the first byte of its next request
    kept = connections(analyzer, 1, b"GET /healthz HTTP/1.1\r\nhost: a\r\n\r\nGET /healthz HTTP/1.1\r\n")
    times = closing_times(slow + kept, TIMEOUT + SLACK, trickle=b"x-a: b\r\n")  # a header line every 0.2 s
    assert times.count(None) == 0, f"{times.count(None)} of 101 slow header senders still open"
    assert get(analyzer, "/healthz")[0] == 200


def test_bodies_sent_a_byte_at_a_time_are_cut_off(analyzer):
    before = {r: analyzer.refused(r) for r in ("body_timeout", "client_disconnected")}
    head = (b"POST /tasks/" + b"a" * 32 + b"/batches/" + b"b" * 32 + b" HTTP/1.1\r\nhost: a\r\ncontent-type: "
            + BATCH_MEDIA_TYPE.encode() + b"\r\ncontent-length: 1000000\r\n\r\n")
    read = connections(analyzer, 100, head + b"x")  # the route is reading the body
    # the route answers without reading (415): the rest of the body must still come within the timeout
    unread = connections(analyzer, 20, head.replace(BATCH_MEDIA_TYPE.encode(), b"text/plain") + b"x")
    times = closing_times(read + unread, TIMEOUT + SLACK, trickle=b"x")
    assert times.count(None) == 0, f"{times.count(None)} of 120 slow body senders still open"
    assert analyzer.refused("body_timeout") - before["body_timeout"] == 120
    assert analyzer.refused("client_disconnected") == before["client_disconnected"]  # counted once, as a timeout
    assert get(analyzer, "/healthz")[0] == 200


def test_each_timeout_closes_at_its_own_deadline_when_they_differ(tmp_path):
    """A connection's one timer keeps whichever deadline runs (GuardedHttp._due): with a header timeout of 0.5 s and
    a body timeout of 2.5 s, a body sent slowly is not cut off at the header timeout's step but at 2.5 s, and a
    connection that sends nothing is closed at 0.5 s."""
    header, body = 0.5, 2.5
    env = {"PRIVAGG_ANALYZER_HEADER_TIMEOUT": str(header), "PRIVAGG_ANALYZER_BODY_TIMEOUT": str(body)}
    with serve("analyzer", f"sqlite:///{tmp_path}/analyzer.db", tmp_path, env=env, args=("--workers", "0")) as service:
        head = (b"POST /tasks/" + b"a" * 32 + b"/batches/" + b"b" * 32 + b" HTTP/1.1\r\nhost: a\r\ncontent-type: "
                + BATCH_MEDIA_TYPE.encode() + b"\r\ncontent-length: 1000000\r\n\r\n")
        slow_bodies = closing_times(connections(service, 20, head + b"x"), body + SLACK, trickle=b"x")
        silent = closing_times(connections(service, 20), body + SLACK)
        assert get(service, "/healthz")[0] == 200
    assert None not in slow_bodies and None not in silent
    # (timed from after the connections were made: their deadlines ran from a little before)
    assert min(slow_bodies) >= body - 1.0, slow_bodies  # not at the header timeout's step, nor at twice it
    assert max(silent) < body - 1.0, silent  # at the header timeout, not at the body timeout


def test_a_kept_alive_connection_is_closed_at_the_idle_timeout(analyzer):
    (kept,) = connections(analyzer, 1, b"GET /healthz HTTP/1.1\r\nhost: a\r\n\r\n")
    (time_closed,) = closing_times([kept], 2.5)
    assert time_closed is not None  # 0.5 s configured (uvicorn's own default, 5 s, would fail this)


def test_oversized_headers_and_garbage_are_refused_and_counted(analyzer):
    before = {r: analyzer.refused(r) for r in ("header_too_large", "malformed_http")}
    (big,) = connections(analyzer, 1)
    big.sendall(b"GET /healthz HTTP/1.1\r\n" + b"x-filler: " + b"a" * 100_000)
    big.settimeout(5)
    assert big.recv(100).startswith(b"HTTP/1.1 431")
    big.close()
    garbage = connections(analyzer, 20, b"\x16\x03\x01 not HTTP at all\r\n\r\n")
    assert closing_times(garbage, SLACK).count(None) == 0
    assert analyzer.refused("header_too_large") - before["header_too_large"] == 1
    assert analyzer.refused("malformed_http") - before["malformed_http"] == 20
    logged(analyzer, "malformed_http")
    assert "Invalid HTTP request received" not in analyzer.log.read_text()  # counted, not one line per request


def test_a_body_that_goes_on_after_an_early_answer_is_cut_off(analyzer):
    """A request answered before its body came (here 405; also 401, 413, 415, busy) whose body goes on: the
    connection reads at most DRAIN_MAX bytes more, then closes, where it once read a declared gigabyte whole."""
    from privagg.service.web import DRAIN_MAX

    (s,) = connections(analyzer, 1, b"POST /healthz HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n"
                                    b"content-length: 1000000000\r\n\r\n")
    assert s.recv(100).startswith(b"HTTP/1.1 405")
    sent, block = 0, b"\0" * 65536
    with pytest.raises(OSError):  # the server closed the connection: a broken pipe or a reset
        while sent < 200 * DRAIN_MAX:
            s.sendall(block)
            sent += len(block)
    assert sent < 32 * DRAIN_MAX  # what it read, and what the two sockets' buffers held
    s.close()


def test_a_client_that_leaves_mid_body_is_one_log_line_not_a_traceback(analyzer):
    before = analyzer.refused("client_disconnected")
    head = (b"POST /tasks/" + b"a" * 32 + b"/batches/" + b"b" * 32 + b" HTTP/1.1\r\nhost: a\r\ncontent-type: "
            + BATCH_MEDIA_TYPE.encode() + b"\r\ncontent-length: 10000\r\n\r\n")
    (s,) = connections(analyzer, 1, head + b"x" * 5000)  # half the body
    time.sleep(0.2)
    s.close()
    deadline = time.monotonic() + SLACK
    while analyzer.refused("client_disconnected") == before and time.monotonic() < deadline:
        time.sleep(0.1)
    assert analyzer.refused("client_disconnected") == before + 1
    assert logged(analyzer, "client_disconnected")
    assert "Traceback" not in analyzer.log.read_text()


def test_idle_sockets_beyond_the_open_file_limit_do_not_keep_real_requests_out(tmp_path):
    """256 open files: the service takes 128 connections (128 kept for its database and logs); 400 idle
    sockets come first, then real requests, which are served at once (the oldest idle connection is closed
    for each). Before, the process ran out of descriptors and libuv reset every new connection, unlogged."""
    with serve("analyzer", f"sqlite:///{tmp_path}/analyzer.db", tmp_path, open_files=256,
               env={"PRIVAGG_ANALYZER_HEADER_TIMEOUT": "3"}, args=("--workers", "0")) as service:
        idle = connections(service, 400)
        deadline, answers = time.monotonic() + SLACK, []
        while len(answers) < 3 and time.monotonic() < deadline:  # a real request must not wait for the reaping
            try:
                answers.append(get(service, "/readyz" if answers else f"/tasks/{'ab' * 16}", timeout=2)[0])
            except OSError:
                time.sleep(0.1)
        assert answers == [404, 200, 200]  # (an unknown task: the database was asked)
        assert closing_times(idle, 3 + SLACK).count(None) == 0  # all reaped by the header timeout, or made room
        lines = service.log_lines()
        assert {"event": "open files", "limit": 256} in [{k: line.get(k) for k in ("event", "limit")} for line in lines]
        lowered = next(line for line in lines if line["event"] == "connection limit lowered")
        assert lowered["lowered_to"] == 256 - 128
        assert logged(service, "connection_limit")[0]["detail"].startswith("at the limit of 128 connections")
        assert service.refused("connection_limit") >= 400 - 128


def test_serve_raises_the_open_file_limit_and_logs_it(analyzer):
    line = next(line for line in analyzer.log_lines() if line["event"] == "open files")
    assert line["limit"] == resource.getrlimit(resource.RLIMIT_NOFILE)[1] or line["limit"] >= line["raised_from"]
    connections_line = next(line for line in analyzer.log_lines() if line["event"] == "connections")
    assert connections_line["header_timeout"] == TIMEOUT and connections_line["idle_timeout"] == IDLE


def test_requests_beyond_the_limit_in_flight_wait_for_a_place_then_are_refused_as_busy():
    async def scenario(wait: float, opened_after: float):
        gate, refused = asyncio.Event(), []

        async def slow(scope, receive, send) -> None:
            await gate.wait()
            await send({"type": "http.response.start", "status": 200, "headers": []})
            await send({"type": "http.response.body", "body": b""})

        limited = RequestLimit(slow, 2, Refusals(refused.append), wait=wait)

        async def call(path: str) -> int:
            sent = []

            async def send(message):
                sent.append(message)

            async def receive():
                return {"type": "http.request", "body": b"", "more_body": False}

            await limited({"type": "http", "path": path, "method": "GET", "headers": []}, receive, send)
            return sent[0]["status"]

        first = [asyncio.create_task(call("/tasks/x")) for _ in range(2)]
        await asyncio.sleep(0.05)
        third = asyncio.create_task(call("/tasks/x"))  # two in flight: the third waits for a place
        health = asyncio.create_task(call("/healthz"))  # never waits for a place (it waits at the gate like the rest)
        await asyncio.sleep(opened_after)
        gate.set()
        return await third, [await t for t in first], await health, [r.reason for r in refused]

    # a place frees within the wait: the third is served; it does not: refused as busy
    assert asyncio.run(scenario(wait=5.0, opened_after=0.2)) == (200, [200, 200], 200, [])
    assert asyncio.run(scenario(wait=0.1, opened_after=0.3)) == (503, [200, 200], 200, ["busy"])


# ---- 2. health that answers ----------------------------------------------------------------------------------
def _collector_with_task(url: str, users: int) -> tuple[object, list]:
    """The collector's database holding a task (as if fetched from the analyzer) and ``users`` reports for it."""
    engine = storage.connect(url, "collector")
    task, _key = create_task(calibrate("grr", epsilon=1.0, n_users=1000, domain_size=4), min_batch_size=1)
    with engine.begin() as c:
        c.execute(sa.insert(storage.collector_tasks).values(task_id=task.task_id, task=task.to_json()))
    tokens = Collector(engine, None, None).issue_tokens(task.task_id, users)
    engine.dispose()
    client = Client(task)
    return task, [client.report(i % 4, token) for i, token in enumerate(tokens)]


@contextmanager
def locked(url: str) -> Iterator[None]:
    """The collector's reports locked by another session for the block: SQLite's write lock, or PostgreSQL's
    ACCESS EXCLUSIVE lock on the reports table."""
    if url.startswith("sqlite"):
        holder = sqlite3.connect(sa.engine.make_url(url).database, isolation_level=None)
        holder.execute("BEGIN IMMEDIATE")
        try:
            yield
        finally:
            holder.execute("ROLLBACK")
            holder.close()
    else:
        engine = sa.create_engine(url)
        with engine.connect() as c:
            c.exec_driver_sql("LOCK TABLE reports IN ACCESS EXCLUSIVE MODE")
            try:
                yield
            finally:
                c.rollback()
        engine.dispose()


def test_health_and_tasks_answer_while_reports_wait_on_a_locked_database(databases, tmp_path):
    """60 reports wait on a locked database; /healthz, /readyz and the task's route (which takes a worker
    thread) answer at once: a waiting report holds no worker thread. (Before, each waiting report held one of
    the 40, and then the task's route, and earlier both health routes, waited for one: 8 s timeouts.)"""
    task, reports = _collector_with_task(databases["collector"], 60)
    with serve("collector", databases["collector"], tmp_path,
               args=("--analyzer", f"http://127.0.0.1:{free_port()}", "--batch-interval", "60")) as service:
        outcomes: list = []

        def send(report) -> None:
            request = urllib.request.Request(f"{service.url}/tasks/{task.task_id}/reports", json.dumps(
                report.to_dict()).encode(), {"content-type": "application/json"})
            try:
                with urllib.request.urlopen(request, timeout=60) as answer:
                    outcomes.append(answer.status)
            except urllib.error.HTTPError as err:
                outcomes.append(err.code)

        with locked(databases["collector"]):
            senders = [threading.Thread(target=send, args=(r,)) for r in reports]
            for t in senders:
                t.start()
            time.sleep(1.0)
            assert outcomes == []  # every report waits for the database
            latencies = {}
            for path in ("/healthz", "/readyz", f"/tasks/{task.task_id}") * 3:
                start = time.monotonic()
                status, _ = get(service, path, timeout=10)
                latencies.setdefault(path, []).append(time.monotonic() - start)
                assert status == 200, path
            assert max(max(v) for v in latencies.values()) < QUICK, latencies
            assert outcomes == []
        for t in senders:
            t.join(timeout=60)
        assert outcomes == [201] * 60  # the blocked reports are stored once the lock goes


def test_a_hot_route_is_answered_like_any_route_and_held_to_the_request_limit(tmp_path):
    """ServiceApp.add_hot_route runs before FastAPI's layers: its refusals are still the app's JSON answers,
    counted; other methods on its path are 405; and it takes a place under the request limit like any route."""
    refused, gate = [], asyncio.Event()
    engine = storage.connect(f"sqlite:///{tmp_path}/c.db", "collector")
    app = make_app("test", None)
    add_operations(app, CollectorRegistry(), engine, refused.append,
                   limits=Limits(header_timeout=5, body_timeout=5, idle_timeout=5, max_connections=10, max_requests=1))

    async def hot(request):
        if request.path_params["name"] == "refuse":
            raise Refused(409, "token_used", "token must be unused")
        await gate.wait()
        return JSONResponse({"name": request.path_params["name"]}, status_code=201)

    app.add_hot_route("POST", "/things/{name}/reports", hot)

    async def call(method: str, path: str) -> tuple[int, bytes]:
        sent = []

        async def send(message):
            sent.append(message)

        async def receive():
            return {"type": "http.request", "body": b"", "more_body": False}

        await app({"type": "http", "path": path, "method": method, "headers": [], "query_string": b""}, receive, send)
        return sent[0]["status"], b"".join(m.get("body", b"") for m in sent[1:])

    async def scenario():
        app._outer.wait = 0.2  # (the busy refusal's wait, shortened)
        refusal = await call("POST", "/things/refuse/reports")
        other_method = await call("GET", "/things/x/reports")
        held = asyncio.create_task(call("POST", "/things/held/reports"))  # takes the one place, waits at the gate
        await asyncio.sleep(0.05)
        busy = await asyncio.wait_for(call("POST", "/things/second/reports"), 5)  # (unlimited, it would hang)
        gate.set()
        return refusal, other_method, await held, busy

    refusal, other_method, held, busy = asyncio.run(scenario())
    assert refusal == (409, b'{"error":"token_used","detail":"token must be unused"}')
    assert other_method[0] == 405 and held == (201, b'{"name":"held"}') and busy[0] == 503
    assert [r.reason for r in refused] == ["token_used", "busy"]
    engine.dispose()


def test_readyz_follows_the_last_write(databases):
    engine = storage.connect(databases["collector"], "collector")
    health = Health()
    app = make_app("test", None)
    add_operations(app, CollectorRegistry(), engine, lambda err: None, health=health)
    client = TestClient(app)
    assert client.get("/readyz").json() == {"status": "ready"}
    health.write_failed("reports cannot be stored (OperationalError)")
    answer = client.get("/readyz")
    assert answer.status_code == 503 and answer.json()["detail"] == "reports cannot be stored (OperationalError)"
    health.write_succeeded()
    assert client.get("/readyz").status_code == 200
    engine.dispose()
    brief = Health(hold=0.2)  # a failure not followed by any write stops counting after the hold
    brief.write_failed("disk full")
    assert brief.failure() == "disk full"
    time.sleep(0.3)
    assert brief.failure() is None


def test_readyz_answers_within_its_probe_timeout_when_the_database_hangs():
    class Hanging:
        def raw_connection(self):
            time.sleep(5)  # a database that never answers (the probe thread waits; nothing else does)

    app = make_app("test", None)
    add_operations(app, CollectorRegistry(), Hanging(), lambda err: None)
    client = TestClient(app)
    for _ in range(2):
        start = time.monotonic()
        answer = client.get("/readyz")
        assert answer.status_code == 503 and "did not answer within 1 s" in answer.json()["detail"]
        assert time.monotonic() - start < 1 + QUICK
    assert client.get("/healthz").status_code == 200


def test_readyz_is_503_when_the_database_is_down():
    down = sa.create_engine(f"postgresql+psycopg://postgres@127.0.0.1:{free_port()}/none",
                            connect_args={"connect_timeout": 2})
    app = make_app("test", None)
    add_operations(app, CollectorRegistry(), down, lambda err: None)
    answer = TestClient(app).get("/readyz")
    assert answer.status_code == 503 and answer.json()["detail"] == "the database did not answer (OperationalError)"


# ---- 3. clean failures -------------------------------------------------------------------------------------------
def _disk_full(url: str, task_id: str, engine: sa.Engine) -> None:
    """Writes of a new applied batch fail as on a full disk: SQLite at its max_page_count, with the index leaf
    that batch id "00...01" goes to filled (a fresh leaf has room for a row), or PostgreSQL with a trigger
    raising disk_full (SQLSTATE 53100) on every insert into applied_batches."""
    if url.startswith("sqlite"):
        filler = sqlite3.connect(sa.engine.make_url(url).database, isolation_level=None)
        pages = filler.execute("PRAGMA page_count").fetchone()[0]
        filler.execute(f"PRAGMA max_page_count = {pages}")
        with pytest.raises(sqlite3.OperationalError, match="database or disk is full"):
            for n in range(100_000):  # keys right after "00...01": they go where it will
                filler.execute("INSERT INTO applied_batches (task_id, batch_id) VALUES (?, ?)",
                               (task_id, f"{1:032x}{n:06d}"))
        filler.close()
        sa.event.listen(engine, "connect", lambda connection, _record: connection.execute(
            f"PRAGMA max_page_count = {pages}"))
        engine.dispose()  # the service's connections from now on have the limit
    else:
        with engine.begin() as c:
            c.exec_driver_sql("CREATE FUNCTION disk_full() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
                              "RAISE EXCEPTION 'could not extend file' USING ERRCODE = 'disk_full'; END $$")
            c.exec_driver_sql("CREATE TRIGGER disk_full BEFORE INSERT ON applied_batches FOR EACH ROW "
                              "EXECUTE FUNCTION disk_full()")


def test_a_full_database_is_a_clean_503(databases, caplog):
    url = databases["analyzer"]
    engine = storage.connect(url, "analyzer")
    service = AnalyzerService(engine, kek=KeyEncryptionKey.generate())
    task = service.create_task(calibrate("grr", epsilon=1.0, n_users=10, domain_size=4), min_batch_size=1)
    messages = Client(task).randomizer.randomize([1], np.random.default_rng(0))
    sealed = np.frombuffer(b"".join(seal_messages(task, messages)), np.uint8).reshape(len(messages), -1)
    batch_id = f"{1:032x}"
    _disk_full(url, task.task_id, engine)
    client = TestClient(analyzer_app(service))
    with caplog.at_level(logging.INFO, logger="privagg"):
        answer = client.post(f"/tasks/{task.task_id}/batches/{batch_id}", headers=ARROW,
                             content=batch_stream(task.task_id, batch_id, 1, sealed))
    assert answer.status_code == 503 and answer.json()["error"] == "unavailable", answer.text
    assert ("SQLITE_FULL" if url.startswith("sqlite") else "DiskFull 53100") in answer.json()["detail"]
    assert service.registry.get_sample_value("privagg_requests_refused_total", {"reason": "unavailable"}) == 1
    lines = [r for r in caplog.records if r.getMessage() == "refused"]
    assert [r.fields["reason"] for r in lines] == ["unavailable"] and not any(r.exc_info for r in caplog.records)
    engine.dispose()


def test_other_errors_stay_errors():
    app = make_app("test", None)
    add_operations(app, CollectorRegistry(), None, lambda err: None)

    @app.get("/denied")
    async def denied():
        raise PermissionError(13, "Permission denied")  # an OSError, but not the database's trouble: a bug

    answer = TestClient(app, raise_server_exceptions=False).get("/denied")
    assert answer.status_code == 500


def _start_failure(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "privagg", "serve", *args], capture_output=True, text=True,
                          timeout=120, check=False)


def test_serve_fails_in_one_line_on_a_database_it_cannot_use(tmp_path):
    unusable = ["sqlite:////nonexistent/dir/a.db"]
    if os.geteuid() != 0:  # (root writes a read-only file all the same)
        storage.connect(f"sqlite:///{tmp_path}/a.db", "analyzer").dispose()
        os.chmod(tmp_path / "a.db", 0o400)
        unusable.append(f"sqlite:///{tmp_path}/a.db")
    for db in unusable:
        out = _start_failure("analyzer", "--db", db, "--port", str(free_port()))
        errors = [line for line in out.stderr.splitlines() if not line.startswith("{")]  # (the JSON log lines)
        assert out.returncode == 2 and len(errors) == 1 and errors[0].startswith("error: db must be"), out.stderr
        assert "Traceback" not in out.stderr + out.stdout


def _serve_here(*args: str):
    """``privagg serve ARGS`` in this process (CliRunner); the logging it configures is put back after."""
    from privagg.cli import app

    privagg_log = logging.getLogger("privagg")
    saved = (privagg_log.handlers[:], privagg_log.level, privagg_log.propagate)
    try:
        return CliRunner().invoke(app, ["serve", *args])
    finally:
        privagg_log.handlers[:], privagg_log.level, privagg_log.propagate = saved


def test_any_other_start_failure_is_one_line(tmp_path, monkeypatch):
    from privagg.service.shuffle import analyzer

    result = _serve_here("analyzer", "--db", f"sqlite:///{tmp_path}/a.db", "--tls-cert", str(tmp_path / "no.pem"),
                         "--tls-key", str(tmp_path / "no.key"))  # (uvicorn would fail on them with a traceback)
    assert result.exit_code == 2 and result.stderr.strip().splitlines()[-1].startswith(
        "error: tls-cert must be an existing file"), result.output
    (tmp_path / "no.pem").write_text("not a certificate")
    (tmp_path / "no.key").write_text("not a key")
    result = _serve_here("analyzer", "--db", f"sqlite:///{tmp_path}/a.db", "--tls-cert", str(tmp_path / "no.pem"),
                         "--tls-key", str(tmp_path / "no.key"))
    assert result.exit_code == 2 and result.stderr.strip().splitlines()[-1].startswith(
        "error: tls_cert/tls_key must be a readable PEM certificate chain"), result.output

    def fails(*_args, **_kwargs):
        raise RuntimeError("the workers did not start\nsecond line")

    monkeypatch.setattr(analyzer, "open_analyzer", fails)
    result = _serve_here("analyzer", "--db", f"sqlite:///{tmp_path}/a.db")
    assert result.exit_code == 3, result.output
    assert result.stderr.strip().splitlines()[-1] == \
        "error: the analyzer did not start: RuntimeError: the workers did not start"
    assert "Traceback" not in result.output


def test_the_port_the_service_got_is_logged_and_a_port_in_use_is_one_line(tmp_path):
    """``--port 0`` asks the system for a free port, which no line named (an operator review's finding): the
    "listening" event says which, and the service answers there; a second service on that port fails in one line,
    exit 3 (before: uvicorn's own log line)."""
    for name in ("first", "second"):
        storage.connect(f"sqlite:///{tmp_path}/{name}.db", "sharing").dispose()
    log = tmp_path / "first.log"
    with open(log, "wb") as out:
        process = subprocess.Popen([sys.executable, "-m", "privagg", "serve", "sharing", "--db",
                                    f"sqlite:///{tmp_path}/first.db", "--port", "0"], stdout=out, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 60
        while not (events := [json.loads(line) for line in log.read_text().splitlines() if '"listening"' in line]):
            assert time.monotonic() < deadline and process.poll() is None, log.read_text()
            time.sleep(0.1)
        port = events[0]["port"]
        assert port > 0 and events[0]["host"] == "127.0.0.1" and events[0]["tls"] is False
        wait_ready(f"http://127.0.0.1:{port}")
        result = _serve_here("sharing", "--db", f"sqlite:///{tmp_path}/second.db", "--port", str(port))
        assert result.exit_code == 3 and result.stderr.strip().splitlines()[-1].startswith(
            f"error: the sharing did not start: RuntimeError: cannot listen on 127.0.0.1:{port}: Address already in "
            "use"), result.output
    finally:
        process.terminate()
        process.wait(timeout=30)


# ---- 4. supervision ----------------------------------------------------------------------------------------------
def test_the_healthcheck_script_says_whether_a_service_is_ready(analyzer):
    script = [sys.executable, str(ROOT / "deploy" / "healthcheck.py")]
    ready = subprocess.run([*script, analyzer.url], capture_output=True, text=True, timeout=30, check=False)
    assert ready.returncode == 0 and ready.stdout.strip() == "200 ready"
    down = subprocess.run([*script, f"http://127.0.0.1:{free_port()}", "--timeout", "1"], capture_output=True,
                          text=True, timeout=30, check=False)
    assert down.returncode == 1 and down.stdout.startswith("no answer")
    insecure = subprocess.run([*script, "https://example.org", "--insecure"], capture_output=True, text=True,
                              timeout=30, check=False)
    assert insecure.returncode == 2 and "only for a loopback URL" in insecure.stderr


def test_the_systemd_units_restart_and_confine_the_services():
    for role in ("collector", "analyzer"):
        unit = (ROOT / "deploy" / f"privagg-{role}.service").read_text()
        settings = {line.split("=", 1)[0] for line in unit.splitlines() if "=" in line and not line.startswith("#")}
        assert {"Restart", "RestartSec", "User", "UMask", "LimitNOFILE", "NoNewPrivileges", "ProtectSystem",
                "PrivateTmp", "EnvironmentFile", "ExecStart", "ExecStartPost"} <= settings, role
        assert "Restart=always" in unit and "UMask=0077" in unit and f"privagg serve {role}" in unit


# ---- 5. smaller items --------------------------------------------------------------------------------------------
@pytest.fixture
def collector(tmp_path) -> Iterator[Collector]:
    engine = storage.connect(f"sqlite:///{tmp_path}/collector.db", "collector")
    yield Collector(engine, lambda _task_id: None, None)  # (an analyzer that knows no task)
    engine.dispose()


def test_bodies_of_another_media_type_are_refused(collector, tmp_path):
    C = TestClient(collector_app(collector, batch_interval=None))
    path = f"/tasks/{'ab' * 16}/reports"
    for headers in ({"content-type": "text/plain"}, {"content-type": "application/x-www-form-urlencoded"}, {}):
        answer = C.post(path, content=b"{}", headers=headers)
        assert answer.status_code == 415 and answer.json()["error"] == "unsupported_media_type", headers
        assert "application/json" in answer.json()["detail"]
    answer = C.post(path, content=b"{}", headers={"content-type": "Application/JSON; charset=utf-8"})
    assert answer.status_code != 415  # (refused further on: the task is unknown)
    assert collector.registry.get_sample_value("privagg_reports_refused_total",
                                               {"reason": "unsupported_media_type"}) == 3
    analyzer_engine = storage.connect(f"sqlite:///{tmp_path}/analyzer.db", "analyzer")
    A = TestClient(analyzer_app(AnalyzerService(analyzer_engine, kek=KeyEncryptionKey.generate())))
    for headers in ({"content-type": "application/json"}, {}):
        answer = A.post(f"/tasks/{'ab' * 16}/batches/{'cd' * 16}", content=b"x", headers=headers)
        assert answer.status_code == 415 and BATCH_MEDIA_TYPE in answer.json()["detail"]
    analyzer_engine.dispose()


def test_api_docs_are_off_unless_configured(collector):
    for api_docs, status in ((False, 404), (True, 200)):
        C = TestClient(collector_app(collector, batch_interval=None, api_docs=api_docs))
        for path in ("/docs", "/redoc", "/openapi.json"):
            assert C.get(path).status_code == status, (path, api_docs)


def test_status_and_metrics_ask_for_the_operator_token(collector):
    token = "the operator's own secret"
    C = TestClient(collector_app(collector, batch_interval=None, operator_token=token))
    for path in ("/metrics", f"/tasks/{'ab' * 16}/status"):
        for headers in ({}, {"authorization": "Bearer a guess"}, {"authorization": token}):
            answer = C.get(path, headers=headers)
            assert answer.status_code == 401 and answer.json()["error"] == "unauthenticated", (path, headers)
    shown_token = {"authorization": f"Bearer {token}"}
    assert C.get("/metrics", headers=shown_token).status_code == 200
    assert C.get(f"/tasks/{'ab' * 16}/status", headers=shown_token).json()["error"] == "unknown_task"  # past the token
    assert C.get("/healthz").status_code == 200 and C.get("/readyz").status_code == 200  # probes need none
    open_ = TestClient(collector_app(collector, batch_interval=None))
    assert open_.get("/metrics").status_code == 200  # no token configured: open, as before


def test_refusals_never_echo_long_values(collector, tmp_path):
    assert shown("abc") == "'abc'"
    assert shown("x" * 1000) == f"{'x' * 40!r}... (1000 characters)"
    assert shown("a\nb\x00") == repr("a\nb\x00")  # escaped: no forged log line
    assert shown(b"\xff" * 50, limit=4) == "b'\\xff\\xff\\xff\\xff'... (50 bytes)"
    assert shown(list(range(100))).endswith("... (390 characters)")

    async def nothing():
        return {"type": "http.request", "body": b"", "more_body": False}

    scope = {"type": "http", "method": "POST", "path": "/", "headers": [
        (b"content-type", b"application/json"), (b"content-length", b"9" * 5000)]}
    with pytest.raises(Refused) as err:
        asyncio.run(read_body(Request(scope, nothing), 100, "application/json"))
    assert err.value.status == 413 and "(5000 characters)" in err.value.detail and len(err.value.detail) < 150
    for length in ("\u00b2", "+1", "1" * 101):  # (a Latin-1 superscript 2 is a digit to str.isdigit)
        scope["headers"][1] = (b"content-length", length.encode("latin-1"))
        with pytest.raises(Refused, match="at most 100 bytes"):
            asyncio.run(read_body(Request(scope, nothing), 100, "application/json"))
    scope["headers"][0] = (b"content-type", b"text/" + b"p" * 5000)
    with pytest.raises(Refused) as err:
        asyncio.run(read_body(Request(scope, nothing), 100, "application/json"))
    assert err.value.status == 415 and len(err.value.detail) < 150
    engine = storage.connect(f"sqlite:///{tmp_path}/analyzer.db", "analyzer")
    A = TestClient(analyzer_app(AnalyzerService(engine, kek=KeyEncryptionKey.generate())))
    answer = A.get(f"/tasks/{'ab' * 16}/result", params={"top": "9" * 5000})
    assert answer.status_code == 400 and len(answer.json()["detail"]) < 200
    engine.dispose()


def test_operator_token_and_timeouts_are_configured_and_checked(monkeypatch):
    monkeypatch.setenv("PRIVAGG_ANALYZER_HEADER_TIMEOUT", "2.5")
    monkeypatch.setenv("PRIVAGG_ANALYZER_API_DOCS", "yes")
    monkeypatch.setenv("PRIVAGG_ANALYZER_OPERATOR_TOKEN", "o" * 16)
    cfg = load_config("analyzer", max_requests=50)
    assert (cfg.header_timeout, cfg.body_timeout, cfg.idle_timeout, cfg.api_docs) == (2.5, 300.0, 5.0, True)
    assert cfg.limits().max_requests == 50 and cfg.limits().max_connections == 10_000
    assert describe(cfg)["operator_token"] == "(set)" and "o" * 16 not in json.dumps(describe(cfg))
    assert load_config("collector").body_timeout == 30.0
    monkeypatch.setenv("PRIVAGG_ANALYZER_API_DOCS", "maybe")
    with pytest.raises(ParameterError, match="PRIVAGG_ANALYZER_API_DOCS must be true or false"):
        load_config("analyzer")
    monkeypatch.delenv("PRIVAGG_ANALYZER_API_DOCS")
    for given, field in ((dict(operator_token="short"), "operator_token"), (dict(header_timeout=0), "header_timeout"),
                         (dict(body_timeout=4000), "body_timeout"), (dict(idle_timeout=True), "idle_timeout"),
                         (dict(max_connections=0), "max_connections"), (dict(max_requests=2.5), "max_requests")):
        with pytest.raises(ParameterError) as err:
            load_config("analyzer", **given)
        assert err.value.field == field


def test_task_create_warns_of_a_shuffle_task_that_needs_all_n(tmp_path):
    from privagg.cli import app

    for name, parameters, warned in (
            ("all", calibrate("blanket-hist", epsilon=1.0, delta=1e-6, n_users=1000, domain_size=10), True),
            ("most", calibrate("blanket-hist", epsilon=1.0, delta=1e-6, n_users=1000, domain_size=10,
                               honest_fraction=0.9), False),
            ("local", calibrate("grr", epsilon=1.0, n_users=1000, domain_size=10), False)):
        path = tmp_path / f"{name}.json"
        path.write_text(json.dumps(parameters.to_dict()))
        result = CliRunner().invoke(app, ["task", "create", "--params", str(path), "--db",
                                          f"sqlite:///{tmp_path}/analyzer.db"])
        assert result.exit_code == 0, result.output
        assert ("one absent user stalls it" in result.stderr) is warned, (name, result.stderr)
        if warned:
            assert "--honest-fraction G" in result.stderr and "ceil(G n)" in result.stderr
