"""Simulated clients against a collector: ``privagg loadgen`` and the service tests under faults and load.

Each simulated user is a real SDK client (:class:`privagg.service.shuffle.client.Client`: secure randomness, one
HPKE seal per message, a fresh report id) holding one value of the input and one token. The reports are
made first, then sent over HTTP with at most ``concurrency`` in flight; a client whose attempt fails to
connect, or gets a busy or 5xx answer, sends the same report again (safe: the collector stores a report
once) until ``retry_for`` seconds have passed. A refusal (4xx) is final.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections import Counter
from dataclasses import asdict, dataclass, field

import numpy as np

from ..calls import RETRY_STATUSES
from .client import Client, Report


MAX_CONCURRENCY = 100_000  # reports in flight at once, at most


@dataclass
class LoadResult:
    """What a load run saw: no values, no tokens."""

    clients: int
    acknowledged: int  # answered 2xx: stored, or found already stored on a retry
    refused: int  # answered 4xx
    failed: int  # never answered 2xx or 4xx within retry_for
    messages_acknowledged: int  # the sealed messages of the acknowledged reports
    concurrency: int
    prepare_seconds: float  # randomizing and sealing every report (the SDK's work)
    send_seconds: float
    reports_per_second: float  # acknowledged / send_seconds
    latency_ms: dict[str, float | None]  # of acknowledged reports, first attempt to acknowledgement: p50, p90, p99,
    # max (None when none was acknowledged)
    retries: int
    refusals: dict[str, int] = field(default_factory=dict)  # by the collector's reason

    def to_json(self) -> str:
        return json.dumps(asdict(self), allow_nan=False)


def prepare_reports(client: Client, values, tokens: list[str]) -> list[Report]:
    """One report per value, each with its own token, made as each device would make it."""
    return [client.report(value, token) for value, token in zip(values, tokens)]


async def send_reports(collector_url: str | list[str], reports: list[Report], concurrency: int = 100,
                       retry_for: float = 120.0, timeout: float = 60.0,
                       acknowledged=None) -> tuple[list[str | None], dict]:
    """Send every report; returns each one's outcome ("acknowledged", a refusal reason, or None: failed)
    and {"latencies": [...], "retries": n, "failovers": n, "seconds": s}. (aiohttp: its C parser keeps one
    process able to drive thousands of connections.)

    Several collector URLs (replicas of one task): report i goes to URL i mod k first and, when that one does
    not answer, to the next, as a device configured with all of them would. ``acknowledged(count)``: called
    after each acknowledgement (a test kills a replica there)."""
    import aiohttp

    from ...errors import check_integer

    gate = asyncio.Semaphore(check_integer("concurrency", concurrency, 1, MAX_CONCURRENCY))  # 0 would never send
    outcomes: list[str | None] = [None] * len(reports)
    latencies: list[float] = []
    retries = failovers = 0
    bases = [u.rstrip("/") for u in ([collector_url] if isinstance(collector_url, str) else collector_url)]

    async def one(i: int, report: Report, http: aiohttp.ClientSession) -> None:
        nonlocal retries, failovers
        body = json.dumps(report.to_dict()).encode()
        target = i % len(bases)
        async with gate:
            start = time.perf_counter()
            pause = 0.05
            while True:
                try:
                    async with http.post(f"{bases[target]}/tasks/{report.task_id}/reports", data=body,
                                         headers={"content-type": "application/json"}) as answer:
                        if answer.status < 300:
                            outcomes[i] = "acknowledged"
                            latencies.append(time.perf_counter() - start)
                            if acknowledged is not None:
                                acknowledged(len(latencies))
                            return
                        if answer.status not in RETRY_STATUSES:  # the collector's reason, or the status alone
                            try:
                                refusal = await answer.json(content_type=None)
                            except ValueError:
                                refusal = None
                            reason = refusal.get("error") if isinstance(refusal, dict) else None
                            outcomes[i] = reason if isinstance(reason, str) else str(answer.status)
                            return
                except aiohttp.ClientConnectionError:  # no answer from this collector: the next one
                    if len(bases) > 1:
                        target, failovers = (target + 1) % len(bases), failovers + 1
                except (aiohttp.ClientError, asyncio.TimeoutError):
                    pass
                if time.perf_counter() - start > retry_for:
                    return
                retries += 1
                await asyncio.sleep(pause)
                pause = min(2 * pause, 1.0)

    start = time.perf_counter()
    connector = aiohttp.TCPConnector(limit=concurrency)
    async with aiohttp.ClientSession(connector=connector, timeout=aiohttp.ClientTimeout(total=timeout)) as http:
        await asyncio.gather(*(one(i, r, http) for i, r in enumerate(reports)))
    return outcomes, {"latencies": latencies, "retries": retries, "failovers": failovers,
                      "seconds": time.perf_counter() - start}


def run_load(collector_url: str, client: Client, values, tokens: list[str], concurrency: int = 100,
             retry_for: float = 120.0) -> LoadResult:
    """Make one report per value with ``client`` (the task's SDK client) and send them all to the collector."""
    if len(tokens) < len(values):
        from ...errors import ParameterError

        raise ParameterError("tokens", f"at least one per value ({len(values)})", len(tokens))
    start = time.perf_counter()
    reports = prepare_reports(client, values, tokens)
    prepared = time.perf_counter() - start
    outcomes, sent = asyncio.run(send_reports(collector_url, reports, concurrency, retry_for))
    acknowledged = [r for r, o in zip(reports, outcomes) if o == "acknowledged"]
    refusals = Counter(o for o in outcomes if o not in (None, "acknowledged"))
    ms = np.asarray(sent["latencies"]) * 1000
    latency = {q: round(float(np.percentile(ms, p)), 2) if ms.size else None
               for q, p in (("p50", 50), ("p90", 90), ("p99", 99), ("max", 100))}
    return LoadResult(len(reports), len(acknowledged), sum(refusals.values()), outcomes.count(None),
                      sum(len(r.ciphertexts) for r in acknowledged), concurrency, round(prepared, 3),
                      round(sent["seconds"], 3), round(len(acknowledged) / sent["seconds"], 1), latency,
                      sent["retries"], dict(refusals))
