"""Part 10 of ``make bench``: the collector and the analyzer as services, on loopback.

* The analyzer's decrypt-and-aggregate throughput: one batch of FE1 messages (20,000 users of the bundled
  demo's setting, n = 20,000, B = 1,000, eps = 1, delta = 10^-6) through ``AnalyzerService.apply_batch``
  with two worker processes started for the batch (and gone after it) opening the HPKE seals, against the same
  batch opened in the calling process alone (the baseline, same run). Target: at least 20,000 messages/s on 2 cores.
* Load: SDK clients with 1, 100 and 1,000 reports in flight, against both services as processes, on SQLite
  and on a throwaway PostgreSQL server (skipped where PostgreSQL is not installed): reports/s, latency
  percentiles, the collector's CPU time per report, the latency of its health and readiness answers under
  that load, and the exactly-once counts; and FE1 reports (about 7 sealed messages each) at 1,000 in flight
  on SQLite, whose collector CPU per report has a target: at most 0.25 ms (issue 48); beside it, the web stack's own cost per
  report: the same reports and sender against one bare Starlette route under uvicorn (``stack_floor.py``).
* kill -9: a 20,000-client run during which the collector, then the analyzer (as a batch waits for it),
  then the collector again are killed with SIGKILL and restarted, on both databases: reports acknowledged,
  refused and counted.
* Replicas: three collector processes behind one PostgreSQL database serve one task to 10,000 clients with
  1,000 in flight spread over them; one replica is killed with SIGKILL once a third of the reports were
  acknowledged: reports/s, latency percentiles, failovers, and every acknowledged report counted once.

Loopback only: client, collector and analyzer share the machine's two cores.
"""

from __future__ import annotations

import secrets
import sys
from contextlib import nullcontext
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
import stack_floor  # noqa: E402
from benchfmt import Report, cpu_model, load_average, note, ratio, verdict  # noqa: E402
from pg_server import admin, create_database, postgres_bin_dir, throwaway_postgres  # noqa: E402  (tests/)
from service_runs import kill_run, load_run, replica_run  # noqa: E402  (tests/: the service tests' runs)

TARGET_MESSAGES_PER_S = 20_000
USERS, DOMAIN, EPSILON, DELTA = 20_000, 1_000, 1.0, 1e-6
LOADS = ((500, 1), (5_000, 100), (10_000, 1_000))  # (clients, in flight at once)
FE1_CLIENTS, FE1_DOMAIN, TARGET_CPU_MS = 10_000, 1 << 24, 0.25  # the collector's CPU per report (issue 48)
DATA_SEED, CLIENT_SEED = 2022, 1


def decrypt_throughput(folder: Path) -> dict:
    """One batch of all USERS reports applied to a fresh task twice: opened in the calling process, and on two
    worker processes started for the batch and gone after it (the analyzer's way: the key lives in a worker
    only while it opens), their start-up included."""
    from privagg.protocols.registry import calibrate, client as make_client
    from privagg.service import storage
    from privagg.service.shuffle.analyzer import AnalyzerService
    from privagg.service.shuffle.collector import batch_stream
    from privagg.service.keys import KeyEncryptionKey
    from privagg.service.tasks import seal_messages
    from privagg.service.shuffle.workers import BatchWorkers

    engine = storage.connect(f"sqlite:///{folder / 'analyzer.db'}", "analyzer")
    params = calibrate("fe1", epsilon=EPSILON, delta=DELTA, n_users=USERS, domain_size=DOMAIN)
    items = np.random.default_rng(DATA_SEED).zipf(1.3, USERS) % DOMAIN
    messages = make_client(params).randomize(items, np.random.default_rng(CLIENT_SEED))

    def apply(service: AnalyzerService) -> float:
        task = service.create_task(params)  # a shuffle task takes one batch: a fresh task for each run
        sealed = np.frombuffer(b"".join(seal_messages(task, messages)), dtype=np.uint8).reshape(len(messages), -1)
        blob = batch_stream(task.task_id, batch := secrets.token_hex(16), USERS, sealed)
        start = time.perf_counter()
        service.apply_batch(task.task_id, batch, blob)
        return time.perf_counter() - start

    note(f"sealing and opening {len(messages)} messages, in one process and on two workers")
    kek = KeyEncryptionKey.generate()
    serial = apply(AnalyzerService(engine, kek=kek))
    parallel = apply(AnalyzerService(engine, BatchWorkers(2), 2, kek=kek))
    engine.dispose()
    return {"messages": len(messages), "serial": serial, "parallel": parallel}


def _databases(server: str | None, folder: Path, name: str) -> dict[str, str]:
    if server is None:
        return {role: f"sqlite:///{folder / f'{name}-{role}.db'}" for role in ("collector", "analyzer")}
    return {role: create_database(server, f"{name}_{role}") for role in ("collector", "analyzer")}


def service(report: Report) -> None:
    report.add("## 10. The services: decrypt throughput, load at 1, 100 and 1,000 clients in flight, health under "
               "load, kill -9 (loopback)", "")
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        note("analyzer decrypt-and-aggregate throughput")
        d = decrypt_throughput(folder)
        rate = d["messages"] / d["parallel"]
        report.add(f"The analyzer's decrypt-and-aggregate of one batch of {d['messages']:,} FE1 messages ({USERS:,} "
                   f"users, B = {DOMAIN:,}; HPKE X25519 + HKDF-SHA256 + AES-128-GCM, one seal per message):", "")
        report.table(["opened by", "seconds", "messages/s", "vs one process"],
                     [["2 worker processes, started for the batch", f"{d['parallel']:.2f}", f"{rate:,.0f}",
                       ratio(d["serial"] / d["parallel"])],
                      ["the calling process (baseline)", f"{d['serial']:.2f}", f"{d['messages'] / d['serial']:,.0f}",
                       "1.0x"]])
        report.add(f"Target: at least {TARGET_MESSAGES_PER_S:,} messages/s on 2 cores: "
                   f"{verdict(rate >= TARGET_MESSAGES_PER_S)}.", "")
        bin_dir = postgres_bin_dir()
        backends = ["sqlite"] + (["postgresql"] if bin_dir else [])
        load_rows, kill_rows, replica_rows = [], [], []
        with throwaway_postgres(bin_dir) if bin_dir else nullcontext() as server:
            for backend in backends:
                pg = server if backend == "postgresql" else None
                for clients, concurrency in LOADS:
                    note(f"{clients:,} clients, {concurrency:,} at once, on {backend}")
                    run = load_run(_databases(pg, folder, f"load{concurrency}"), folder / "logs", clients=clients,
                                   concurrency=concurrency)
                    load_rows.append([backend, f"{concurrency:,}", f"{run['acknowledged']:,} of {clients:,}",
                                      str(run["failed"]), f"{run['reports_per_second']:,.0f}",
                                      f"{run['collector_cpu_ms']:.2f}",
                                      f"{run['p50_ms']:,.1f}", f"{run['p99_ms']:,.1f}",
                                      f"{run['healthz_p50_ms']:,.1f} / {run['healthz_max_ms']:,.1f}",
                                      f"{run['readyz_p50_ms']:,.1f} / {run['readyz_max_ms']:,.1f}",
                                      f"{run['counted_reports']:,}"])
                if backend == "sqlite":
                    note(f"{FE1_CLIENTS:,} FE1 clients (B = 2^24), 1,000 at once, on sqlite")
                    fe1 = load_run(_databases(None, folder, "fe1load"), folder / "logs", clients=FE1_CLIENTS,
                                   concurrency=1_000, protocol="fe1", domain=FE1_DOMAIN)
                    note(f"the same {FE1_CLIENTS:,} FE1 reports against a bare Starlette route (the stack's floor)")
                    floor = stack_floor.measure(FE1_CLIENTS, 1_000, FE1_DOMAIN)
                note(f"kill -9 run on {backend}")
                run = kill_run(_databases(pg, folder, "kill"), folder / "logs", clients=20_000, seed=11)
                at = "; ".join(f"{k['killed']} killed with {k['reports_waiting']:,} reports waiting, "
                               f"{k['batches_pending']} batch pending, {k['reports_released']:,} released"
                               for k in run["kills"])
                kill_rows.append([backend, f"{run['acknowledged']:,}", str(run["refused"]), str(run["failed"]),
                                  f"{run['counted_reports']:,}", f"{run['counted_messages']:,}", at])
                if pg is not None:
                    note("3 collector replicas on postgresql, 10,000 clients, one killed")
                    dbs = {"analyzer": f"sqlite:///{folder / 'replicas-analyzer.db'}",
                           "collector": create_database(pg, "replicas_collector")}
                    run = replica_run(dbs, folder / "logs", clients=10_000, concurrency=1_000)
                    replica_rows.append([f"{run['acknowledged']:,} of {run['clients']:,}", str(run["failed"]),
                                         f"{run['reports_per_second']:,.0f}", f"{run['p50_ms']:,.1f}",
                                         f"{run['p99_ms']:,.1f}", f"{run['killed_after']:,}", f"{run['failovers']:,}",
                                         f"{run['counted_reports']:,} in {run['batches']} batch",
                                         f"{run['counted_messages']:,} / {run['acknowledged_messages']:,}"])
                    admin(pg, "DROP DATABASE replicas_collector WITH (FORCE)")
                    for name in [f"load{c}" for _, c in LOADS] + ["kill"]:
                        for role in ("collector", "analyzer"):
                            admin(pg, f"DROP DATABASE {name}_{role} WITH (FORCE)")
        if not bin_dir:
            report.add("PostgreSQL is not installed here: its rows are skipped.", "")
        report.add("SDK clients (privacy-blanket histogram, one message each) at 1, 100 and 1,000 in flight (`loadgen "
                   "--concurrency C`), each run on fresh databases; while they send, the collector's /healthz and "
                   "/readyz are asked every 50 ms (median / largest latency):", "")
        report.table(["database", "in flight", "acknowledged", "failed", "reports/s", "collector CPU ms / report",
                      "p50 ms", "p99 ms", "healthz ms", "readyz ms", "counted"], load_rows)
        report.add(f"FE1 reports (n = {FE1_CLIENTS:,}, B = 2^24, eps = 1, delta = 1e-6: "
                   f"{fe1['messages_per_report']:.2f} sealed messages each), 1,000 in flight, SQLite: "
                   f"{fe1['acknowledged']:,} of {FE1_CLIENTS:,} acknowledged, {fe1['reports_per_second']:,.0f} "
                   f"reports/s, p50 {fe1['p50_ms']:,.0f} ms, p99 {fe1['p99_ms']:,.0f} ms, "
                   f"{fe1['counted_reports']:,} counted; the collector's CPU (its own user + system time while "
                   f"the clients send, over the reports it acknowledged; the task fetched and verified before) "
                   f"{fe1['collector_cpu_ms']:.2f} ms per report. Target: at most {TARGET_CPU_MS} ms: "
                   f"{verdict(fe1['collector_cpu_ms'] <= TARGET_CPU_MS)}. The web stack alone, the same reports "
                   f"and sender against one Starlette route under uvicorn that parses the body and answers 201 "
                   f"(`benchmarks/stack_floor.py`): {floor['cpu_ms']:.2f} ms of its CPU per report, "
                   f"{floor['reports_per_second']:,.0f} reports/s; privagg's own checks, middleware and writes "
                   f"are the other {fe1['collector_cpu_ms'] - floor['cpu_ms']:.2f} ms; the collector's CPU per report "
                   f"is {fe1['collector_cpu_ms'] / floor['cpu_ms']:.1f}x the stack's, in one run on {cpu_model()}, "
                   f"load average {load_average()}.", "")
        report.add("kill -9 during a 20,000-client run (plus 100 abusive submissions), each party restarted at once "
                   "and the clients retrying:", "")
        report.table(["database", "acknowledged", "refused", "failed", "counted reports", "counted messages",
                      "when killed"], kill_rows)
        if replica_rows:
            report.add("Three collector replicas on PostgreSQL, 10,000 clients with 1,000 in flight spread over them "
                       "(each client fails over to the next replica when its own does not answer), one replica "
                       "killed with SIGKILL once a third were acknowledged:", "")
            report.table(["acknowledged", "failed", "reports/s", "p50 ms", "p99 ms", "killed after",
                          "failovers", "counted", "messages counted / acknowledged"], replica_rows)

