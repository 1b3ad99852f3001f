"""The web stack's own cost per report, for bench part 10: what any collector written on uvicorn and Starlette pays
before it checks or stores anything.

``app`` is one Starlette route at the collector's report address that reads the JSON body, parses it and
answers 201. :func:`measure` serves it with uvicorn (its defaults: httptools, one process) and sends it the
same FE1 reports as part 10's FE1 row, through the same sender (``loadgen.send_reports``, 1,000 in flight),
and returns the server's CPU time per request (its own user + system time while the clients send), beside
reports/s. The collector's CPU per report less this is what privagg's own code costs.
"""

from __future__ import annotations

import asyncio
import json
import socket
import subprocess
import sys
import time
from pathlib import Path

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route


async def _report(request: Request) -> JSONResponse:
    report = json.loads(await request.body())
    return JSONResponse({"report_id": report["report_id"], "status": "stored"}, status_code=201)


app = Starlette(routes=[Route("/tasks/{task_id}/reports", _report, methods=["POST"])])


def measure(clients: int, concurrency: int, domain: int) -> dict:
    """FE1 reports of ``clients`` devices over ``domain`` items (sealed to a throwaway task's key, as SDK clients
    seal them) sent to ``app``: its CPU ms per request and the reports/s."""
    import numpy as np

    from privagg.protocols.registry import calibrate
    from privagg.service import storage
    from privagg.service.shuffle.analyzer import AnalyzerService
    from privagg.service.shuffle.client import Client
    from privagg.service.keys import KeyEncryptionKey
    from privagg.service.shuffle.loadgen import prepare_reports, send_reports
    from privagg.service.local import cpu_seconds

    kek = KeyEncryptionKey.generate()
    task = AnalyzerService(storage.connect("sqlite://", "analyzer", kek=kek), kek=kek).create_task(
        calibrate("fe1", epsilon=1.0, delta=1e-6, n_users=clients, domain_size=domain))
    reports = prepare_reports(Client(task), np.random.default_rng(1).integers(0, domain, clients),
                              ["0" * 43] * clients)
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    server = subprocess.Popen([sys.executable, "-m", "uvicorn", "stack_floor:app", "--app-dir",
                               str(Path(__file__).resolve().parent), "--port", str(port), "--backlog", "4096",
                               "--log-level", "warning", "--no-access-log"])
    try:
        for _ in range(300):  # until it accepts connections
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                time.sleep(0.1)
        else:
            raise RuntimeError(f"uvicorn did not accept connections on port {port} within 30 s")
        before = cpu_seconds(server.pid)
        outcomes, sent = asyncio.run(send_reports(f"http://127.0.0.1:{port}", reports, concurrency))
        used = cpu_seconds(server.pid) - before
    finally:
        server.terminate()
        server.wait()
    answered = outcomes.count("acknowledged")
    return {"cpu_ms": 1000 * used / answered, "reports_per_second": answered / sent["seconds"],
            "answered": answered}
