"""What the collector and the analyzer share as HTTP services: refusals, bounded bodies, health, metrics, logs.

A refusal is a :class:`Refused` with its status, a short machine-readable reason (the label of the
refusals metric) and a one-line detail naming the field and what is accepted. Logs are JSON lines of
events and counts: never a token, a ciphertext, a user's value or a plaintext.
"""

from __future__ import annotations

import json
import logging
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

import sqlalchemy as sa
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, PlainTextResponse
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest


class Refused(Exception):
    """A request the service refuses: nothing of it is stored."""

    def __init__(self, status: int, reason: str, detail: str) -> None:
        super().__init__(detail)
        self.status, self.reason, self.detail = status, reason, detail


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


async def read_body(request: Request, limit: int) -> bytes:
    """The request body, refused (413) beyond ``limit`` bytes whether or not it declares its length."""
    declared = request.headers.get("content-length")
    if declared is not None and (not declared.isdigit() or int(declared) > limit):
        raise Refused(413, "oversized", f"the body must be at most {limit} bytes, got {declared}")
    body = bytearray()
    async for chunk in request.stream():
        body += chunk
        if len(body) > limit:
            raise Refused(413, "oversized", f"the body must be at most {limit} bytes")
    return bytes(body)


def json_object(body: bytes, what: str) -> dict:
    try:
        data = json.loads(body)
    except (ValueError, UnicodeDecodeError, RecursionError):
        raise Refused(400, "malformed", f"{what} must be a JSON object, got unreadable JSON") from None
    if not isinstance(data, dict):
        raise Refused(400, "malformed", f"{what} must be a JSON object, got {type(data).__name__}")
    return data


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


def add_operations(app: FastAPI, registry: CollectorRegistry, engine: sa.Engine,
                   on_refusal: Callable[[Refused], None], health: Health | None = None) -> None:
    """``/healthz`` (the process answers), ``/readyz`` (its database answers), ``/metrics`` (Prometheus text),
    and the JSON answer of every refusal."""
    started = time.time()

    @app.exception_handler(Refused)
    async def _refused(_request: Request, err: Refused) -> JSONResponse:
        on_refusal(err)
        return JSONResponse({"error": err.reason, "detail": err.detail}, status_code=err.status)

    @app.exception_handler(RequestValidationError)
    async def _invalid(request: Request, err: RequestValidationError) -> JSONResponse:
        first = err.errors()[0] if err.errors() else {}
        where = ".".join(str(part) for part in first.get("loc", ())[1:]) or "request"
        return await _refused(request, Refused(400, "malformed", f"{where} must be valid: {first.get('msg', '')}"))

    @app.get("/healthz")
    def healthz() -> dict:
        return {"status": "ok", "uptime_seconds": round(time.time() - started, 1)}

    @app.get("/readyz")
    def readyz() -> JSONResponse:
        try:
            with engine.connect() as c:
                c.execute(sa.select(1))
        except Exception as err:  # the database is unreachable: not ready, and say why (no data in it)
            return JSONResponse({"status": "not ready", "detail": type(err).__name__}, status_code=503)
        return JSONResponse({"status": "ready"})

    @app.get("/metrics")
    def metrics() -> PlainTextResponse:
        return PlainTextResponse(generate_latest(registry), media_type=CONTENT_TYPE_LATEST)
