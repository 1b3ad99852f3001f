"""Part 14 of ``make bench``: a shuffle task's batch larger than memory, released as Arrow partitions and aggregated
partition by partition (``service/partitions.py``; the order's proof in docs/derivations.md).

m FE1 messages (10^6 by default; ``PRIVAGG_BENCH_PARTITION_MESSAGES`` sets it) are sealed in bulk to one task's
key by two processes, as the clients would have sealed them (the HTTP path is not what this measures), and
written to chunk files. Then, each in its own process, with peak RSS from ``getrusage``:

* the release: the chunks streamed through the two passes into P partitions (P from the memory budget);
* the analysis: ``AnalyzerService.apply_partitioned_batch`` with two worker processes opening each partition,
  against the memory budget; its estimates must equal those of the plaintext messages exactly.

The memory budget is ``PRIVAGG_BENCH_PARTITION_BUDGET`` bytes, by default that of a 10^8-message batch in 2 GiB
scaled to m (2 GiB x m / 10^8, so P is what it would be at 10^8). Each process's peak RSS is reported beside its
fixed part (once its modules loaded): the rest is one partition's working set.
"""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from benchfmt import Report, note  # noqa: E402

USERS_PER_CHUNK = 10_000
EPSILON, DELTA, DOMAIN = 1.0, 1e-8, 1 << 20
FULL_SCALE, FULL_BUDGET = 10**8, 2 << 30
BATCH = "b" * 32


def _parameters(users: int):
    from privagg.protocols.registry import calibrate

    return calibrate("fe1", epsilon=EPSILON, delta=DELTA, n_users=users, domain_size=DOMAIN)


def _seal_chunk(task_json: str, seed: int, path: str) -> tuple[int, bytes]:
    """One chunk of users' sealed messages written to ``path``: (messages, their plaintext aggregate, encoded)."""
    from privagg.protocols.registry import analyzer, client
    from privagg.service.aggregate_codec import encode_aggregate
    from privagg.service.tasks import Task, seal_messages

    task = Task.from_json(task_json, verify=False)
    rng = np.random.default_rng(seed)
    messages = client(task.parameters).randomize(rng.zipf(1.2, USERS_PER_CHUNK) % DOMAIN, rng)
    Path(path).write_bytes(b"".join(seal_messages(task, messages)))
    role = analyzer(task.parameters)
    return len(messages), encode_aggregate(role.agg_update(role.agg_init(), messages))


def _peak(fixed: float) -> dict:
    """Peak RSS (MB) of this process, its fixed part (once its modules were loaded), and its largest child's."""
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return {"rss_mb": own.ru_maxrss / 1024, "fixed_mb": fixed, "children_rss_mb": children.ru_maxrss / 1024}


def _loaded() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _release(folder: Path, task_json: str, chunks: list[str], messages: int, reports: int, budget: int) -> dict:
    from privagg.service.partitions import partition_count, write_partitions
    from privagg.service.tasks import Task, sealed_size

    task = Task.from_json(task_json, verify=False)
    size, fixed = sealed_size(task), _loaded()
    partitions = partition_count(messages, size, budget)
    start = time.perf_counter()
    stream = (np.fromfile(c, dtype=np.uint8).reshape(-1, size) for c in chunks)
    manifest = write_partitions(stream, size, folder / "root" / task.task_id / BATCH, partitions, task.task_id,
                                BATCH, reports)
    return {"seconds": time.perf_counter() - start, "partitions": partitions,
            "largest": max(e["messages"] for e in manifest["partitions"]), **_peak(fixed)}


def _analyze(folder: Path, budget: int) -> dict:
    from privagg.service import storage
    from privagg.service.analyzer import AnalyzerService
    from privagg.service.keys import KeyEncryptionKey
    from privagg.service.workers import BatchWorkers

    kek, fixed = KeyEncryptionKey.load(folder / "kek"), _loaded()
    engine = storage.connect(f"sqlite:///{folder / 'analyzer.db'}", "analyzer", kek=kek)
    service = AnalyzerService(engine, BatchWorkers(2), 2, kek=kek, partition_root=folder / "root",
                              memory_budget=budget)
    task_id = (folder / "task_id").read_text()
    start = time.perf_counter()
    assert service.apply_partitioned_batch(task_id, BATCH) == "applied"
    seconds = time.perf_counter() - start
    service.executor.shutdown()
    result = service.result(task_id, top=50)
    return {"seconds": seconds, "estimates": {e["item"]: e["estimate"] for e in result["estimates"]}, **_peak(fixed)}


def run(folder: Path, messages: int, budget: int) -> dict:
    """The whole run in ``folder``: seal (two processes), release, analyze (each in its own process)."""
    from concurrent.futures import ProcessPoolExecutor

    from privagg.protocols.registry import analyzer
    from privagg.service import storage
    from privagg.service.aggregate_codec import decode_aggregate
    from privagg.service.analyzer import AnalyzerService
    from privagg.service.keys import KeyEncryptionKey

    kek = KeyEncryptionKey.generate()
    kek.write(folder / "kek")
    service = AnalyzerService(storage.connect(f"sqlite:///{folder / 'analyzer.db'}", "analyzer", kek=kek), kek=kek)
    users = messages  # the users whose messages number about ``messages`` (FE1 adds blanket messages per user)
    for _ in range(3):
        per_user = float(_parameters(users).messages_per_user)
        users = max(2, round(messages / per_user / (2 * USERS_PER_CHUNK))) * 2 * USERS_PER_CHUNK
    task = service.create_task(_parameters(users))
    service.engine.dispose()
    (folder / "task_id").write_text(task.task_id)
    chunks = [str(folder / f"chunk-{i:05d}") for i in range(users // USERS_PER_CHUNK)]
    start = time.perf_counter()
    with ProcessPoolExecutor(2) as pool:
        done = list(pool.map(_seal_chunk, [task.to_json()] * len(chunks), range(len(chunks)), chunks))
    sealing = time.perf_counter() - start
    count, parts = sum(d[0] for d in done), [decode_aggregate(d[1]) for d in done]
    role = analyzer(task.parameters)
    expected = role.finalize(role.merge(parts)).estimates
    released = _child("release", folder, task.to_json(), chunks, count, users, budget)
    for c in chunks:
        Path(c).unlink()
    analyzed = _child("analyze", folder, budget)
    exact = all(analyzed["estimates"][str(i)] == float(expected[i]) for i in map(int, analyzed["estimates"]))
    return {"messages": count, "users": users, "budget": budget, "sealing": sealing, "release": released,
            "analyze": analyzed, "exact": exact}


def _child(step: str, *args) -> dict:
    out = subprocess.run([sys.executable, __file__, step, json.dumps([str(a) if isinstance(a, Path) else a
                                                                      for a in args])],
                         capture_output=True, text=True, check=True)
    return json.loads(out.stdout)


def partitions(report: Report) -> None:
    messages = int(os.environ.get("PRIVAGG_BENCH_PARTITION_MESSAGES", "1000000"))
    budget = int(os.environ.get("PRIVAGG_BENCH_PARTITION_BUDGET", max(16 << 20, FULL_BUDGET * messages // FULL_SCALE)))
    report.add(f"## 14. A batch larger than memory: about {messages:,} FE1 messages as Arrow partitions", "")
    note(f"partitioned release and aggregation of {messages:,} messages in a budget of {budget:,} bytes")
    with tempfile.TemporaryDirectory() as tmp:
        r = run(Path(tmp), messages, budget)
    rel, ana = r["release"], r["analyze"]
    per_worker = r["messages"] / ana["seconds"] / 2
    report.table(["step", "seconds", "peak RSS (MB): process (of which fixed) / largest child", "notes"], [
        ["seal (2 processes, as clients would)", f"{r['sealing']:.1f}", "-",
         f"{r['messages']:,} messages from {r['users']:,} users"],
        ["release: 2 passes", f"{rel['seconds']:.1f}", f"{rel['rss_mb']:.0f} ({rel['fixed_mb']:.0f}) / -",
         f"P = {rel['partitions']} partitions (budget {r['budget'] / 2**20:,.0f} MiB), the largest "
         f"{rel['largest']:,} messages"],
        ["analyze: check, deduplicate, open, aggregate", f"{ana['seconds']:.1f}",
         f"{ana['rss_mb']:.0f} ({ana['fixed_mb']:.0f}) / {ana['children_rss_mb']:.0f}",
         f"{per_worker:,.0f} messages/s per worker (2 workers); estimates = the plaintext's exactly: "
         f"{'yes' if r['exact'] else '**NO**'}"]])
    report.add(f"The budget ({r['budget'] / 2**20:,.0f} MiB; PRIVAGG_BENCH_PARTITION_BUDGET sets it, by default a "
               "10^8-message batch's 2 GiB scaled to m) bounds WORKING_COPIES = 4 times the largest partition's "
               "sealed bytes; each process holds one partition's working set beside its fixed cost (the "
               "interpreter and libraries, measured once they loaded). The times grow in proportion to m; the "
               "peak RSS does not grow with m at a fixed partition size.", "")


if __name__ == "__main__":
    step, args = sys.argv[1], json.loads(sys.argv[2])
    if step == "release":
        print(json.dumps(_release(Path(args[0]), *args[1:])))
    else:
        print(json.dumps(_analyze(Path(args[0]), int(args[1]))))
