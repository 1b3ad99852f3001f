"""What the collector and the analyzer share as HTTP services: refusals, bounded bodies and connections, health,
metrics, logs.

A refusal is a :class:`Refused` with its status, a short machine-readable reason (the label of the
refusals metric) and a one-line detail naming the field and what is accepted. Every refusal is counted, and
logged as one JSON line at most once a second per reason (with how many there were since the reason's last
line), so that a flood shows in the log without flooding it. Logs are JSON lines of events and counts: never
a token, a ciphertext, a user's value or a plaintext; values a client chose appear only through
:func:`shown`, cut short.

Connections are bounded by :class:`GuardedHttp` (uvicorn's HTTP protocol with a header timeout, a body
timeout, an idle timeout and a connection limit that fits the process's open-file limit) and requests in
flight by :class:`RequestLimit`: see :class:`Limits`.
"""

from __future__ import annotations

import asyncio
import errno
import hmac
import ipaddress
import json
import logging
import math
import re
import resource
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, PlainTextResponse
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.requests import ClientDisconnect
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from ..errors import ParameterError

log = logging.getLogger("privagg.http")

OPERATIONS = ("/healthz", "/readyz", "/metrics")  # answered whatever the load: never refused as busy
RESERVED_DESCRIPTORS = 128  # open files kept for the database, its pool, worker pipes and logs, not for clients
MAX_HEADER_BYTES = 64 * 1024  # a request line and headers longer than this are refused (431)
# body bytes a connection reads after its request was answered (refused before its body came: 401, 413, 415, busy),
# to stay usable for the client's next request; past it the connection is closed, not fed a gigabyte body
DRAIN_MAX = 1 << 20
CLOSED_BY_TIMEOUT = "privagg.closed_by_timeout"  # scope key: the body timeout closed this request's connection


class Refused(Exception):
    """A request the service refuses: nothing of it is stored.

    ``counted``: already counted and logged where it happened (a connection the body timeout closed), so the
    answer handler does not count it twice."""

    def __init__(self, status: int, reason: str, detail: str, counted: bool = False) -> None:
        super().__init__(detail)
        self.status, self.reason, self.detail, self.counted = status, reason, detail, counted


def shown(value: Any, limit: int = 40) -> str:
    """``value`` as a refusal or a log line may show it: its ``repr`` (quotes, newlines and control characters
    escaped, so it cannot forge a line or a field), cut to ``limit`` characters with an ellipsis and the original
    length. Attacker-chosen values (ids, headers, keys) are shown through it, never echoed whole."""
    if isinstance(value, (str, bytes)):
        if len(value) <= limit:
            return repr(value)
        unit = "characters" if isinstance(value, str) else "bytes"
        return f"{value[:limit]!r}... ({len(value)} {unit})"
    text = repr(value)
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text)} characters)"


class Refusals:
    """Counts every refusal (``count``: the service's refusals counter) and logs it as one JSON line, at most
    one line per ``interval`` seconds for each reason: the refusals of a reason that come within ``interval``
    of its last line are logged together at the interval's end, as one line with their ``count``. A flood
    thus shows in the log (its size included) without flooding it; the exact totals are the metric's.
    Thread-safe: refusals come from the event loop and from worker threads.

    The detail is logged only for refusals of the service's own making (5xx, timeouts, limits): the others'
    details may quote what a client sent."""

    def __init__(self, count: Callable[[Refused], None], interval: float = 1.0) -> None:
        self.count, self.interval = count, interval
        self._lock = threading.Lock()
        self._last: dict[str, float] = {}  # reason -> when its last line was written
        self._held: dict[str, tuple[Refused, int]] = {}  # reason -> (its latest refusal, how many) not yet logged

    def __call__(self, err: Refused) -> None:
        self.count(err)
        with self._lock:
            wait = self._last.get(err.reason, -math.inf) + self.interval - time.monotonic()
            if wait > 0:  # within the interval: held for one line at its end
                if err.reason not in self._held:
                    timer = threading.Timer(wait, self._flush, (err.reason,))
                    timer.daemon = True
                    timer.start()
                self._held[err.reason] = (err, self._held.get(err.reason, (err, 0))[1] + 1)
                return
            self._last[err.reason] = time.monotonic()
        self._write(err, 1)

    def _flush(self, reason: str) -> None:
        with self._lock:
            err, count = self._held.pop(reason)
            self._last[reason] = time.monotonic()
        self._write(err, count)

    @staticmethod
    def _write(err: Refused, count: int) -> None:
        ours = err.status >= 500 or err.status in (408, 431)
        fields = {"reason": err.reason, "status": err.status, "count": count}
        if ours:
            fields["detail"] = err.detail
        log.log(logging.WARNING if ours else logging.INFO, "refused", extra={"fields": fields})


class Health:
    """What the service's own writes say about its database, for ``/readyz``: not ready while the last write
    failed (its reason shown), ready again once a write succeeds.

    Thread-safe: the collector's writer thread and the analyzer's request threads report here, the event
    loop reads. A failure stops counting after ``hold`` seconds without another write: a service out of its
    load balancer's rotation receives no writes to prove itself healthy again, so it is let back in to try
    (and taken out again at once if the next write fails too).
    """

    def __init__(self, hold: float = 30.0) -> None:
        self.hold = hold
        self._lock = threading.Lock()
        self._failure: tuple[float, str] | None = None  # (when, why) of the last write, if it failed

    def write_failed(self, reason: str) -> None:
        with self._lock:
            self._failure = (time.monotonic(), reason)

    def write_succeeded(self) -> None:
        with self._lock:
            self._failure = None

    def failure(self) -> str | None:
        """Why the last write failed, if it did less than ``hold`` seconds ago; None otherwise."""
        with self._lock:
            if self._failure is None or time.monotonic() - self._failure[0] > self.hold:
                return None
            return self._failure[1]


class ReadinessProbe:
    """The database check behind ``/readyz``, on a thread of its own.

    Readiness must answer when every worker thread is blocked (on a locked table, a full disk, a slow
    database), so the check never runs on the request thread pool and the event loop never waits for it longer
    than ``timeout`` seconds: a check still running after that is an answer ("did not answer within").
    One result serves every ``/readyz`` for ``fresh`` seconds, so a load balancer polling often costs one
    query a second. The check is ``SELECT 1`` on a connection of the service's pool, outside any transaction
    (the SQLite engine's BEGIN IMMEDIATE would make it queue behind every writer).
    """

    IDLE_EXIT = 60.0  # seconds without a /readyz after which the thread ends (an app that is gone leaves none)

    def __init__(self, engine: sa.Engine, fresh: float = 1.0, timeout: float = 1.0) -> None:
        self.engine, self.fresh, self.timeout = engine, fresh, timeout
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._result: tuple[float, str | None] | None = None  # (when the last check ended, why not ready or None)
        self._started: float | None = None  # when the check now running began
        self._thread: threading.Thread | None = None

    def _run(self) -> None:
        while True:
            if not self._wake.wait(self.IDLE_EXIT):
                with self._lock:
                    if not self._wake.is_set():  # no /readyz for a while: end (the next one starts a thread again)
                        self._thread = None
                        return
            self._wake.clear()
            try:
                connection = self.engine.raw_connection()
                try:
                    cursor = connection.cursor()
                    cursor.execute("SELECT 1")
                    cursor.fetchall()
                    cursor.close()
                finally:
                    connection.close()
                problem = None
            except Exception as err:  # the database is unreachable: not ready, and say why (no data in it)
                problem = f"the database did not answer ({type(err).__name__})"
            with self._lock:
                self._result, self._started = (time.monotonic(), problem), None

    async def problem(self) -> str | None:
        """Why the database is not ready (None: it is), from a check at most ``fresh`` seconds old."""
        asked = time.monotonic()
        with self._lock:
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="privagg-readiness", daemon=True)
                self._thread.start()
            if self._started is None and (self._result is None or asked - self._result[0] > self.fresh):
                self._started = asked
                self._wake.set()
        while True:
            with self._lock:
                result, started = self._result, self._started
            if result is not None and result[0] >= asked - self.fresh:
                return result[1]
            if started is not None and time.monotonic() - started > self.timeout:
                return f"the database did not answer within {self.timeout:g} s"
            await asyncio.sleep(0.01)


def content_type(request: Request) -> str:
    """The media type a request declares (its content-type without parameters, lower case)."""
    return request.headers.get("content-type", "").split(";")[0].strip().lower()


async def read_body(request: Request, limit: int, media_type: str | tuple[str, ...]) -> bytes:
    """The request body, of type ``media_type`` (or one of them, a tuple; else 415), refused (413) beyond ``limit``
    bytes whether or not it declares its length.

    A client that closes the connection before its body is complete is refused as ``client_disconnected``
    (counted, one log line: no traceback), or as ``body_timeout`` when the body timeout closed it."""
    given, accepted = content_type(request), (media_type,) if isinstance(media_type, str) else media_type
    if given not in accepted:
        raise Refused(415, "unsupported_media_type", f"the body must be {' or '.join(accepted)}, got "
                      f"{shown(given) if given else 'no content-type'}")
    declared = request.headers.get("content-length")
    if declared is not None and not (declared.isascii() and declared.isdigit() and len(declared) <= len(str(limit))
                                     and int(declared) <= limit):
        raise Refused(413, "oversized", f"the body must be at most {limit} bytes, got {shown(declared)}")
    body = bytearray()
    try:
        async for chunk in request.stream():
            body += chunk
            if len(body) > limit:
                raise Refused(413, "oversized", f"the body must be at most {limit} bytes")
    except ClientDisconnect:
        if request.scope.get(CLOSED_BY_TIMEOUT):
            raise Refused(408, "body_timeout", "the body must arrive within the body timeout", counted=True) from None
        raise Refused(400, "client_disconnected", f"the body must be complete: the client closed the connection "
                      f"after {len(body)} bytes") from None
    return bytes(body)


def json_object(body: bytes, what: str) -> dict:
    try:
        data = json.loads(body)
    except (ValueError, UnicodeDecodeError, RecursionError):
        raise Refused(400, "malformed", f"{what} must be a JSON object, got unreadable JSON") from None
    if not isinstance(data, dict):
        raise Refused(400, "malformed", f"{what} must be a JSON object, got {type(data).__name__}")
    return data


def loopback_only(request: Request, setting: str, what: str) -> None:
    """Refuses (403) a request from another host than this one's loopback: for a route that changes a task, on a
    service started without the token that would guard it (a reviewer's finding: anyone who reached a sharing
    server's port could close its rounds, failing its tasks). Behind a proxy on the same host every request is a
    loopback one: set the token there."""
    host = getattr(request.client, "host", None) or ""
    try:
        local = ipaddress.ip_address(host).is_loopback
    except ValueError:
        local = False
    if not local:
        raise Refused(403, "no_token_set", f"{what}: a service started without {setting} answers it from its own "
                      f"host only (set {setting} to let the operator's tools elsewhere use it), got a request from "
                      f"{host or 'an unknown address'}")


def require_bearer(request: Request, token: str | None, why: str) -> None:
    """A 401 naming ``why`` unless ``token`` is None or the request shows it as ``Authorization: Bearer TOKEN``
    (compared in constant time)."""
    if token is not None and not hmac.compare_digest(request.headers.get("authorization", "").encode(),
                                                     f"Bearer {token}".encode()):
        raise Refused(401, "unauthenticated", why)


def require_operator(request: Request, token: str | None, changes: str | None = None) -> None:
    """Refuses (401) a request that does not show the operator token as ``Authorization: Bearer TOKEN``
    (compared in constant time); with no token configured, the route is open, but one that ``changes`` a task (the
    words say how) only to this host (:func:`loopback_only`)."""
    if token is None and changes:
        loopback_only(request, "operator_token", changes)
    require_bearer(request, token, "this route is the operator's: Authorization must be Bearer followed by the "
                   "operator token")


class JsonLines(logging.Formatter):
    """One JSON object per line: time, level, logger, event and the event's counts (``extra={"fields": ...}``)."""

    def format(self, record: logging.LogRecord) -> str:
        line = {"time": round(record.created, 3), "level": record.levelname, "logger": record.name,
                "event": record.getMessage(), **getattr(record, "fields", {})}
        if record.exc_info:
            line["error"] = repr(record.exc_info[1])
        return json.dumps(line)


def configure_logging(level: str = "INFO") -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonLines())
    root = logging.getLogger("privagg")
    root.handlers[:] = [handler]
    root.setLevel(level)
    root.propagate = False


def log_event(logger: logging.Logger, event: str, **fields) -> None:
    logger.info(event, extra={"fields": fields})


class ServiceApp(FastAPI):
    """A service's FastAPI application. Every request passes its request limit first (:class:`RequestLimit`, set by
    :func:`add_operations`); then a route added by :meth:`add_hot_route` runs at once, without FastAPI's
    middleware, routing and exception layers, which cost the collector about a fifth of its CPU per report."""

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self._hot: list[tuple[str, re.Pattern, Callable]] = []
        self._outer = self._dispatch

    def limit_requests(self, limit: int, refusals: Refusals) -> None:
        self._outer = RequestLimit(self._dispatch, limit, refusals)

    def add_hot_route(self, method: str, path: str, endpoint: Callable) -> None:
        """``endpoint`` (a Starlette request to a response) serves ``method`` on ``path`` (``{name}`` matching one
        path segment, in ``request.path_params``); its exceptions are answered by the app's exception handlers
        as any route's. Also a route of the app's router, which answers other methods on ``path`` (405)."""
        self.add_route(path, endpoint, methods=[method])
        pattern = re.sub(r"\\\{(\w+)\\\}", r"(?P<\1>[^/]+)", re.escape(path))
        self._hot.append((method, re.compile(pattern), endpoint))

    async def __call__(self, scope, receive, send) -> None:
        await self._outer(scope, receive, send)

    async def _dispatch(self, scope, receive, send) -> None:
        if scope["type"] == "http":
            for method, pattern, endpoint in self._hot:
                found = pattern.fullmatch(scope["path"])
                if found is not None and scope["method"] == method:
                    scope["app"], scope["path_params"] = self, found.groupdict()
                    request = Request(scope, receive)
                    try:
                        response = await endpoint(request)
                    except Exception as err:
                        response = await self.answer(request, err)
                    return await response(scope, receive, send)
        await super().__call__(scope, receive, send)

    async def answer(self, request: Request, err: Exception):
        """The app's answer to ``err`` (its exception handlers': a refusal's JSON, counted and logged); ``err``
        again where no handler takes it (a bug)."""
        for kind in type(err).__mro__:
            handler = self.exception_handlers.get(kind)
            if handler is not None:
                return await handler(request, err)
        raise err


def make_app(title: str, lifespan, api_docs: bool = False) -> ServiceApp:
    """A service's application; ``/docs``, ``/redoc`` and ``/openapi.json`` only with ``api_docs`` (off
    by default: they list every route and field to whoever reaches the port)."""
    return ServiceApp(title=title, lifespan=lifespan, docs_url="/docs" if api_docs else None,
                      redoc_url="/redoc" if api_docs else None, openapi_url="/openapi.json" if api_docs else None)


def database_trouble(err: BaseException) -> str | None:
    """What ``err`` says about the database when it means the service cannot work for now (the disk or quota is
    full, the database is down, unreachable or out of connections), as a short code for the log; None for
    any other error (a bug, which stays one)."""
    if isinstance(err, OSError):
        return errno.errorcode[err.errno] if err.errno in (errno.ENOSPC, errno.EDQUOT) else None
    if isinstance(err, sa.exc.TimeoutError):
        return "connection pool exhausted"
    if isinstance(err, sa.exc.OperationalError):
        cause = err.orig
        code = getattr(cause, "sqlstate", None) or getattr(cause, "sqlite_errorname", None)
        return f"{type(cause).__name__}" + (f" {code}" if code else "")
    return None


@dataclass(frozen=True)
class Limits:
    """How long a connection may take and how many the service holds (ServiceConfig's fields of these names).

    ``header_timeout``: seconds from a connection's opening, or from the first byte of its next request, until
    the request's headers are complete; ``body_timeout``: seconds from then until its body is complete;
    ``idle_timeout``: seconds a kept-alive connection may wait for its next request; ``max_connections``:
    connections held at once (lowered to fit the open-file limit); ``max_requests``: requests in flight at once,
    beyond which a request is refused as busy (503, to be sent again)."""

    header_timeout: float
    body_timeout: float
    idle_timeout: float
    max_connections: int
    max_requests: int


class RequestLimit:
    """ASGI middleware: at most ``limit`` requests in flight (their bodies being read, or waiting for a worker
    thread, or running). One more waits, before its body is read, for up to ``wait`` seconds for a place (in
    arrival order); only then is it refused as ``busy`` (503, Retry-After 1 s), which clients send again. A burst
    of clients thus queues instead of turning into a storm of retries, and the memory held is bounded: bodies by
    ``limit`` times the largest body, waiting requests by the connection limit times the server's read buffer.
    ``/healthz``, ``/readyz`` and ``/metrics`` never wait and are never refused."""

    def __init__(self, app, limit: int, refusals: Refusals, wait: float = 10.0) -> None:
        self.app, self.limit, self.refusals, self.wait = app, limit, refusals, wait
        self.places = asyncio.Semaphore(limit)  # (made on the event loop's first use: Python >= 3.10)

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http" or scope["path"] in OPERATIONS:
            return await self.app(scope, receive, send)
        try:
            if self.places.locked():  # (wait_for makes a task: only when there is a queue to wait in)
                await asyncio.wait_for(self.places.acquire(), self.wait)
            else:
                await self.places.acquire()
        except asyncio.TimeoutError:
            err = Refused(503, "busy", f"the service has had {self.limit} requests in flight for {self.wait:g} s; "
                          "send again")
            self.refusals(err)
            answer = JSONResponse({"error": err.reason, "detail": err.detail}, 503, headers={"retry-after": "1"})
            return await answer(scope, receive, send)
        try:
            await self.app(scope, receive, send)
        finally:
            self.places.release()


class ConnectionGuard:
    """The connections of one server: at most ``capacity`` held at once, and which of them are idle (no request
    in progress: before the first request's headers are complete, or between requests), oldest first.

    At the limit, a new connection closes the oldest idle one in its place: idle sockets (whether a flood or
    honest keep-alives) never keep a real request out. Only when every connection carries a request in
    progress is the new one closed. Either is refused as ``connection_limit``. Runs on the event loop only."""

    def __init__(self, limits: Limits, refusals: Refusals, capacity: int) -> None:
        self.limits, self.refusals, self.capacity = limits, refusals, capacity
        self.open = 0
        self._idle: dict[GuardedHttp, None] = {}  # insertion-ordered: the oldest idle connection first

    def admit(self, connection: GuardedHttp) -> bool:
        if self.open >= self.capacity:
            if not self._idle:
                self.refusals(Refused(503, "connection_limit", f"at the limit of {self.capacity} connections, all "
                                      "with a request in progress: a new connection was closed"))
                return False
            oldest = next(iter(self._idle))
            self.forget(oldest)
            oldest.transport.close()
            self.refusals(Refused(503, "connection_limit", f"at the limit of {self.capacity} connections: the "
                                  "oldest idle one was closed for a new one"))
        self.open += 1
        self._idle[connection] = None
        return True

    def busy(self, connection: GuardedHttp) -> None:
        self._idle.pop(connection, None)

    def idle(self, connection: GuardedHttp) -> None:
        self._idle.pop(connection, None)
        self._idle[connection] = None

    def forget(self, connection: GuardedHttp) -> None:
        if connection.admitted:
            connection.admitted = False
            self.open -= 1
            self._idle.pop(connection, None)


class GuardedHttp(HttpToolsProtocol):
    """uvicorn's httptools protocol with timeouts on every phase of a connection and a connection limit.

    uvicorn (0.54, read in its source) times out only a kept-alive connection after a response
    (``timeout_keep_alive``): a connection that sends nothing, or its headers or body a byte at a time, is
    held for ever, and its ``limit_concurrency`` counts idle connections with requests, so an idle flood turns
    every real request into a 503. Under a flood of idle sockets the process then runs out of file
    descriptors, and libuv (uvloop) accepts and resets every new connection without a log line.

    Here, per connection, one timeout runs at a time: the header timeout from the connection's opening (or from
    the first byte of its next request) until the request's headers are complete; then the body timeout until
    its body is complete (also when the route answered without reading it: the rest is read and discarded,
    for at most that long); then none while the request is handled; then uvicorn's idle timeout
    (``idle_timeout``) until the next request's first byte. A timer that fires closes the connection and is
    a refusal (``header_timeout``, ``body_timeout``), as are headers beyond :data:`MAX_HEADER_BYTES` (431
    ``header_too_large``) and a request the parser cannot read (400 ``malformed_http``, counted instead of
    uvicorn's log line per request). The connection limit is :class:`ConnectionGuard`'s. Over TLS all this
    starts once the handshake is done; the handshake itself is bounded by the event loop's 60 s handshake
    timeout. WebSocket upgrades are not served (``ws="none"``).

    A request pipelined behind one in progress waits for it without a timeout of its own (httptools stops
    reading once one is queued); its body timeout starts when it does.

    A timeout is a deadline, kept by the connection's one event-loop timer (:meth:`_due`): starting, moving or
    ending a timeout only sets the deadline. A timer made and cancelled for each (a header timeout and a body
    timeout every request) was 8% of py-spy's samples of the collector's event loop under part 10's FE1 load,
    this 1% (docs/benchmarks.md, part 10). The timer fires at most ``min(header_timeout, body_timeout)`` after
    it was set, so no deadline set later is earlier than it; finding a deadline not yet due, it is set again
    for the deadline, or for that step if sooner; finding none, it ends. A timeout thus closes its connection
    at its deadline, as a timer of its own would.

    Made per server by :func:`http_protocol`, which sets ``guard``.
    """

    guard: ConnectionGuard

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.timeout_keep_alive = self.guard.limits.idle_timeout
        self.admitted = False
        self._timer: asyncio.TimerHandle | None = None  # the connection's one timer, while set (_due)
        self._deadline: float | None = None  # the running timeout's end (the loop's clock), if one runs
        self._timing = ""  # the refusal reason of the running timeout
        self._active = None  # the request in progress (headers complete, response not), if any
        self._headers_seen = 0  # requests whose headers were complete on this connection
        self._header_bytes = 0  # bytes received towards headers not yet complete
        self._drained = 0  # body bytes received after the request in progress was answered

    # ---- timers ----------------------------------------------------------------------------------------------
    def _arm(self, reason: str) -> None:
        """The timeout ``reason`` runs from now (in place of any running one)."""
        limits = self.guard.limits
        now = self.loop.time()
        self._deadline = now + (limits.header_timeout if reason == "header_timeout" else limits.body_timeout)
        self._timing = reason
        if self._timer is None:
            self._timer = self.loop.call_at(min(self._deadline, now + self._step()), self._due)

    def _disarm(self) -> None:
        """No timeout runs (the timer, if set, finds no deadline and ends)."""
        self._deadline, self._timing = None, ""

    def _step(self) -> float:
        limits = self.guard.limits
        return min(limits.header_timeout, limits.body_timeout)

    def _due(self) -> None:
        """The connection's timer: the running timeout expires if its deadline passed; else the timer is set again
        for the deadline, or the step if sooner (see the class)."""
        self._timer = None
        if self._deadline is None:
            return
        now = self.loop.time()
        if now < self._deadline:
            self._timer = self.loop.call_at(min(self._deadline, now + self._step()), self._due)
            return
        self._expire(self._timing)

    def _expire(self, reason: str) -> None:
        self._disarm()
        if self.transport.is_closing():
            return
        if reason == "header_timeout":
            detail = f"a request's headers must be complete within {self.guard.limits.header_timeout:g} s"
        else:
            detail = f"a request's body must be complete within {self.guard.limits.body_timeout:g} s"
            if self._active is not None:
                self._active.scope[CLOSED_BY_TIMEOUT] = True  # the route reading the body is told why (read_body)
        self.guard.refusals(Refused(408, reason, f"{detail}: the connection was closed"))
        self.transport.close()

    # ---- a request's phases ----------------------------------------------------------------------------------
    def _start(self, cycle) -> None:
        self._active = cycle
        self.guard.busy(self)
        if cycle.privagg_body_done:
            self._disarm()
        else:
            self._arm("body_timeout")

    def _finish(self) -> None:
        """The request in progress is answered and its body read: the connection is idle."""
        self._active = None
        self._disarm()
        self.guard.idle(self)
        if self.timeout_keep_alive_task is None:  # (uvicorn's own, cancelled if body bytes came after the answer)
            self.timeout_keep_alive_task = self.loop.call_later(self.timeout_keep_alive,
                                                                self.timeout_keep_alive_handler)

    # ---- uvicorn's protocol ----------------------------------------------------------------------------------
    def connection_made(self, transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self.admitted = self.guard.admit(self)
        if not self.admitted:
            transport.close()
            return
        self._arm("header_timeout")

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self.guard.forget(self)
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        if self._active is None and self._deadline is None:  # the first bytes of the next request on this connection
            self._arm("header_timeout")
        seen = self._headers_seen
        # decided before parsing: a chunk that ends a body is body bytes, though the body is done once parsed
        towards_headers = self._active is None or self._active.privagg_body_done
        super().data_received(data)
        if self.transport.is_closing() or self._headers_seen != seen:
            return
        active = self._active
        if active is not None and active.response_complete and not active.privagg_body_done:
            self._drained += len(data)
            if self._drained > DRAIN_MAX:  # answered before its body came, and the body goes on: not read
                self.transport.close()
                return
        if towards_headers:  # these bytes are towards a request's headers
            self._header_bytes += len(data)
            if self._header_bytes > MAX_HEADER_BYTES:
                self.guard.refusals(Refused(431, "header_too_large", f"a request's line and headers must be at "
                                            f"most {MAX_HEADER_BYTES} bytes"))
                self.transport.write(b"HTTP/1.1 431 Request Header Fields Too Large\r\ncontent-length: 0\r\n"
                                     b"connection: close\r\n\r\n")
                self.transport.close()

    def on_headers_complete(self) -> None:
        before = self.cycle
        super().on_headers_complete()
        if self.cycle is before:  # an upgrade, which is not served
            return
        self._headers_seen += 1
        self._header_bytes = self._drained = 0
        self.cycle.privagg_body_done = False
        if self._active is None:  # (else it is pipelined behind the request in progress, and waits)
            self._start(self.cycle)

    def on_message_complete(self) -> None:
        super().on_message_complete()
        cycle = self.cycle
        cycle.privagg_body_done = True
        if cycle is self._active:
            if cycle.response_complete:  # answered before its body came: now the connection is idle
                self._finish()
            else:
                self._disarm()

    def on_response_complete(self) -> None:
        following = self.pipeline[-1][0] if self.pipeline else None  # the request uvicorn starts next, if any
        super().on_response_complete()
        if self.transport.is_closing():
            return
        if following is not None:
            self._start(following)
        elif self._active is not None and not self._active.privagg_body_done:
            return  # answered before its body came: the rest must still come within the body timeout
        else:
            self._finish()

    def send_400_response(self, msg: str) -> None:
        self.guard.refusals(Refused(400, "malformed_http", "the request must be valid HTTP/1.1"))
        super().send_400_response(msg)


class _CountedElsewhere(logging.Filter):
    """Drops uvicorn's line for each request its parser refuses: :class:`GuardedHttp` counts and logs those as
    refusals (at most a line a second), where uvicorn would write one line per request of a flood."""

    def filter(self, record: logging.LogRecord) -> bool:
        return record.getMessage() != "Invalid HTTP request received."


def raise_open_files_limit() -> tuple[int, int]:
    """Raise this process's soft limit of open files (RLIMIT_NOFILE) to its hard limit where allowed, so that
    connections do not run it out before :class:`Limits` says; returns (before, after), the soft limit."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = hard if hard != resource.RLIM_INFINITY else max(soft, 1 << 16)
    if soft != resource.RLIM_INFINITY and soft < target:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
        except (ValueError, OSError):  # not allowed here (macOS caps it, containers may): keep what is
            pass
    return soft, resource.getrlimit(resource.RLIMIT_NOFILE)[0]


def http_protocol(app: FastAPI) -> type[GuardedHttp]:
    """The HTTP protocol class for uvicorn (``uvicorn.run(app, http=...)``) serving ``app``, which
    :func:`add_operations` gave its limits: :class:`GuardedHttp` with a :class:`ConnectionGuard` of its own.

    The connection limit is ``max_connections``, lowered to the open-file limit less
    :data:`RESERVED_DESCRIPTORS` (logged when it is): past the open-file limit, new connections would be reset
    unseen. Raises ParameterError when the open-file limit leaves no room for connections."""
    limits: Limits = app.state.limits
    soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    room = limits.max_connections if soft == resource.RLIM_INFINITY else soft - RESERVED_DESCRIPTORS
    if room < 1:
        raise ParameterError("the open-file limit (ulimit -n, LimitNOFILE)", f"above {RESERVED_DESCRIPTORS} (kept "
                             "for the database and logs) to leave room for connections", soft)
    capacity = min(limits.max_connections, room)
    if capacity < limits.max_connections:
        log.warning("connection limit lowered", extra={"fields": {"max_connections": limits.max_connections,
                                                                  "lowered_to": capacity, "open_files": soft}})
    logging.getLogger("uvicorn.error").addFilter(_CountedElsewhere())
    return type("GuardedHttp", (GuardedHttp,), {"guard": ConnectionGuard(limits, app.state.refusals, capacity)})


def add_operations(app: ServiceApp, registry: CollectorRegistry, engine: sa.Engine,
                   on_refusal: Callable[[Refused], None], health: Health | None = None,
                   operator_token: str | None = None, limits: Limits | None = None) -> None:
    """``/healthz`` (the process answers, and which service it is: the app's title), ``/readyz`` (its writes and its database), ``/metrics`` (Prometheus
    text, behind ``operator_token`` when given), the JSON answer of every refusal, and 503 ``unavailable`` for
    a database that is full or unreachable.

    ``on_refusal`` counts a refusal on the service's counter; each is also logged (:class:`Refusals`).
    ``health``: the service's record of its writes; ``/readyz`` is 503 while the last one failed.
    ``limits``: the request limit (:class:`RequestLimit`) is installed, and :func:`http_protocol` then makes
    uvicorn's protocol for the app. None of the three operations routes waits for a worker thread."""
    started = time.time()
    refusals = Refusals(on_refusal)
    probe = ReadinessProbe(engine)
    app.state.refusals, app.state.limits = refusals, limits
    if limits is not None:
        app.limit_requests(limits.max_requests, refusals)

    @app.exception_handler(Refused)
    async def _refused(_request: Request, err: Refused) -> JSONResponse:
        if not err.counted:
            refusals(err)
        return JSONResponse({"error": err.reason, "detail": err.detail}, status_code=err.status)

    @app.exception_handler(StarletteHTTPException)
    async def _no_route(request: Request, err: StarletteHTTPException) -> JSONResponse:
        # a path or a method no route has: the refusals' JSON too, naming what was asked (and, for a method, the
        # ones the route takes), not Starlette's {"detail": "Not Found"}; not counted among the service's refusals
        # (a scanner's 404s are no refused report)
        allowed = next((v for k, v in (err.headers or {}).items() if k.lower() == "allow"), None)
        path = shown(request.url.path, 120)
        reason, detail = {404: ("not_found", f"{shown(request.method)} {path} must be a route of the {app.title}"),
                          405: ("method_not_allowed", f"the method of {path} must be {allowed}, got "
                                                      f"{shown(request.method)}")}.get(
            err.status_code, ("http_error", str(err.detail)))
        return JSONResponse({"error": reason, "detail": detail}, status_code=err.status_code,
                            headers={"allow": allowed} if allowed else None)

    @app.exception_handler(RequestValidationError)
    async def _invalid(request: Request, err: RequestValidationError) -> JSONResponse:
        first = err.errors()[0] if err.errors() else {}
        where = ".".join(str(part) for part in first.get("loc", ())[1:]) or "request"
        return await _refused(request, Refused(400, "malformed", f"{shown(where)} must be valid: "
                                                                 f"{first.get('msg', '')}"))

    async def _unavailable(request: Request, err: Exception) -> JSONResponse:
        trouble = database_trouble(err)
        if trouble is None:
            raise err
        return await _refused(request, Refused(503, "unavailable", f"the database is unavailable or full "
                                                                   f"({trouble}); send again later"))

    for kind in (sa.exc.OperationalError, sa.exc.TimeoutError, OSError):
        app.add_exception_handler(kind, _unavailable)

    @app.get("/healthz")
    async def healthz() -> dict:  # names the service, so a client given another's URL can say which answered
        return {"status": "ok", "service": app.title, "uptime_seconds": round(time.time() - started, 1)}

    @app.get("/readyz")
    async def readyz() -> JSONResponse:
        problem = (health.failure() if health is not None else None) or await probe.problem()
        if problem is not None:
            return JSONResponse({"status": "not ready", "detail": problem}, status_code=503)
        return JSONResponse({"status": "ready"})

    @app.get("/metrics")
    async def metrics(request: Request) -> PlainTextResponse:
        require_operator(request, operator_token)
        return PlainTextResponse(generate_latest(registry), media_type=CONTENT_TYPE_LATEST)
