"""Runs of both services as real processes: under kill -9, under load, and with three collector replicas. Shared by
the service tests (tests/service/test_faults.py, test_replicas.py) and ``make bench`` (benchmarks/service.py),
which quotes their figures.

Both runs use the privacy-blanket histogram (one message per user, shuffle model; a batch holds all n
reports); every value comes from a seeded generator, every client's randomness from the SDK's secure
generator.
"""

import asyncio
import secrets
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

import numpy as np

from privagg.protocols.registry import calibrate
from privagg.service.shuffle.client import Client, Report
from privagg.service.shuffle.loadgen import prepare_reports, send_reports
from privagg.service.local import ServiceProcess
from privagg.service.shuffle.deployment import LocalDeployment

DOMAIN = 100


def _task(dep: LocalDeployment, clients: int, protocol: str = "blanket-hist", domain: int = DOMAIN):
    return dep.create_task(calibrate(protocol, epsilon=1.0, delta=1e-6, n_users=clients, domain_size=domain))


def _exactly_once(result: dict, reports: list[Report], outcomes: list) -> dict:
    acknowledged = [r for r, o in zip(reports, outcomes) if o == "acknowledged"]
    return {"acknowledged": len(acknowledged), "acknowledged_messages": sum(len(r.ciphertexts) for r in acknowledged),
            "refused": sum(o not in (None, "acknowledged") for o in outcomes), "failed": outcomes.count(None),
            "counted_reports": result["collection"]["reports"], "counted_messages": result["messages"]["total"],
            "dropped": result["collection"]["unopened"] + result["collection"]["malformed"]}


def kill_run(dbs: dict[str, str], log_dir: Path, clients: int = 20_000, seed: int = 0, concurrency: int = 500) -> dict:
    """The collector is killed with SIGKILL while clients send, once it stored a random tenth to three fifths of
    their reports; once they are done and the batch is on its way, the analyzer, then the collector again (the
    batch released, not yet acknowledged); each is restarted at once. 100 abusive submissions (forged tokens,
    reused report ids) go in among the clients.

    Returns the exactly-once figures and the collector's counts seen just before each kill."""
    rng = np.random.default_rng(seed)
    with LocalDeployment(dbs, log_dir, {"PRIVAGG_ANALYZER_WORKERS": "2"}) as dep:
        task = _task(dep, clients)
        tokens = dep.issue_tokens(task.task_id, clients + 50)
        client = Client(task)
        honest = prepare_reports(client, rng.integers(0, DOMAIN, clients), tokens[:clients])
        forged = [Report(task.task_id, secrets.token_hex(16), secrets.token_urlsafe(24), task.key_id, r.ciphertexts)
                  for r in honest[:50]]
        reused = [Report(task.task_id, honest[i].report_id, t, task.key_id, r.ciphertexts) for i, (t, r) in
                  enumerate(zip(tokens[clients:], prepare_reports(client, np.zeros(50, int), tokens[clients:])))]
        reports = honest + forged + reused
        order = rng.permutation(len(reports))
        reports = [reports[i] for i in order]
        sent: dict = {}
        sender = threading.Thread(target=lambda: sent.update(zip(("outcomes", "stats"), asyncio.run(
            send_reports(dep.url("collector"), reports, concurrency, retry_for=300.0)))))
        kills = []

        def kill(role: str, when) -> None:
            """Kill ``role`` once the collector's status satisfies ``when`` (or 60 s passed); record that status;
            restart it."""
            deadline = time.monotonic() + 60
            while not when(status := dep.status(task.task_id)) and time.monotonic() < deadline:
                time.sleep(0.005)
            dep.kill(role)
            kills.append({"killed": role, **status})
            dep.start(role)

        sender.start()
        stored = int(rng.uniform(0.1, 0.6) * clients)  # (a moment by progress, not by time: as fast as the collector)
        kill("collector", lambda status: status["reports_waiting"] >= stored)  # while clients are sending
        sender.join()
        kill("analyzer", lambda status: status["batches_pending"] > 0)  # as the batch is on its way or being applied
        kill("collector", lambda status: status["batches_pending"] > 0)  # between its release and its ack
        final = dep.wait_released(task.task_id)
        result = dep.result(task.task_id, top=DOMAIN)
    return {"kills": kills, "final": final, "retries": sent["stats"]["retries"],
            **_exactly_once(result, reports, sent["outcomes"])}


def load_run(dbs: dict[str, str], log_dir: Path, clients: int = 10_000, concurrency: int = 10_000,
             protocol: str = "blanket-hist", domain: int = DOMAIN) -> dict:
    """``clients`` SDK clients of a ``protocol`` task over ``domain``, ``concurrency`` of them connected at once;
    reports/s and latency percentiles, the collector's CPU time per acknowledged report while they send (the
    task fetched and verified before: once per task, not per report), and the latency of the collector's
    /healthz and /readyz, asked every 50 ms while the clients send."""
    with LocalDeployment(dbs, log_dir, {"PRIVAGG_ANALYZER_WORKERS": "2"}) as dep:
        task = _task(dep, clients, protocol, domain)
        tokens = dep.issue_tokens(task.task_id, clients)
        with urllib.request.urlopen(f"{dep.url('collector')}/tasks/{task.task_id}", timeout=60) as answer:
            answer.read()
        probes: dict[str, list[float]] = {"healthz": [], "readyz": []}
        sending = threading.Event()

        def probe() -> None:
            while not sending.is_set():
                time.sleep(0.01)
            while sending.is_set():
                for route, seen in probes.items():
                    start = time.perf_counter()
                    try:
                        with urllib.request.urlopen(f"{dep.url('collector')}/{route}", timeout=30) as answer:
                            answer.read()
                    except (urllib.error.URLError, OSError):  # a 503 or a refused connection: still an answer
                        pass
                    seen.append(time.perf_counter() - start)
                time.sleep(0.05)

        prober = threading.Thread(target=probe, daemon=True)
        prober.start()
        client = Client(task)
        values = np.random.default_rng(1).integers(0, domain, clients)
        reports = prepare_reports(client, values, tokens)
        collector = dep.services["collector"]
        cpu = collector.cpu_seconds()
        sending.set()
        outcomes, sent = asyncio.run(send_reports(dep.url("collector"), reports, concurrency, retry_for=300.0))
        sending.clear()
        cpu = collector.cpu_seconds() - cpu
        prober.join()
        dep.wait_released(task.task_id)
        result = dep.result(task.task_id, top=DOMAIN)
    ms = np.asarray(sent["latencies"]) * 1000
    health = {route: np.asarray(seen) * 1000 for route, seen in probes.items()}
    acknowledged = outcomes.count("acknowledged")
    return {"clients": clients, "concurrency": concurrency, "seconds": sent["seconds"],
            "reports_per_second": acknowledged / sent["seconds"], "collector_cpu_ms": 1000 * cpu / acknowledged,
            "messages_per_report": sum(len(r.ciphertexts) for r in reports) / clients,
            "p50_ms": float(np.percentile(ms, 50)),
            "p99_ms": float(np.percentile(ms, 99)), "retries": sent["retries"],
            **{f"{route}_{q}_ms": float(np.percentile(v, p)) if v.size else float("nan")
               for route, v in health.items() for q, p in (("p50", 50), ("p99", 99), ("max", 100))},
            **_exactly_once(result, reports, outcomes)}


def replica_run(dbs: dict[str, str], log_dir: Path, clients: int = 10_000, concurrency: int = 1_000) -> dict:
    """Three collector processes serve one task behind one PostgreSQL database (``dbs["collector"]``), clients
    spread over them; one replica is killed with SIGKILL once a third of the reports were acknowledged, and its
    clients go on to the next replica. A surviving replica releases the task's one batch. Reports/s, latency
    percentiles, failovers, and the exactly-once counts."""
    with LocalDeployment(dbs, log_dir, {"PRIVAGG_ANALYZER_WORKERS": "2"}) as dep:
        task = _task(dep, clients)
        tokens = dep.issue_tokens(task.task_id, clients)
        first = dep.services["collector"]
        replicas = [first] + [ServiceProcess("collector", dbs["collector"], log_dir / f"collector{i}.log", dep.env,
                                             first.args) for i in (1, 2)]
        for replica in replicas[1:]:
            replica.start()
        values = np.random.default_rng(2).integers(0, DOMAIN, clients)
        reports = prepare_reports(Client(task), values, tokens)
        killed: list[int] = []

        def acknowledged(count: int) -> None:
            if count >= clients // 3 and not killed:
                replicas[1].kill()
                killed.append(count)

        outcomes, sent = asyncio.run(send_reports([r.url for r in replicas], reports, concurrency, retry_for=300.0,
                                                  acknowledged=acknowledged))
        dep.wait_released(task.task_id)
        result = dep.result(task.task_id, top=DOMAIN)
        batches = result["collection"]["batches"]
        replicas[2].stop()
    ms = np.asarray(sent["latencies"]) * 1000
    return {"clients": clients, "concurrency": concurrency, "seconds": sent["seconds"],
            "reports_per_second": outcomes.count("acknowledged") / sent["seconds"],
            "p50_ms": float(np.percentile(ms, 50)), "p99_ms": float(np.percentile(ms, 99)),
            "failovers": sent["failovers"], "killed_after": killed[0] if killed else None, "batches": batches,
            **_exactly_once(result, reports, outcomes)}
