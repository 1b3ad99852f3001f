"""Part 14 of ``make bench``: a shuffle task's batch larger than memory, released as Arrow partitions and aggregated
partition by partition (``service/shuffle/partitions.py``; the order's proof in docs/derivations.md).

m FE1 messages (10^6 by default; ``PRIVAGG_BENCH_PARTITION_MESSAGES`` sets it) are sealed in bulk to one task's
key by two processes, as the clients would have sealed them (the HTTP path is not what this measures), and
written to chunk files. Then, each in its own process, with peak RSS from ``getrusage``:

* the release: the chunks streamed through the two passes into P partitions (P from the memory budget);
* the analysis: ``AnalyzerService.apply_partitioned_batch`` with two worker processes opening each partition,
  against the memory budget; its result must equal that of the plaintext messages exactly. The workers' own
  peak RSS is sampled from /proc while they run (``_WorkerPeaks``).

The same for an fe-hh task over strings (English words of at most 6 bytes, phi = 0.01) with 10^6 simulated
devices: the heavy words it names, scored (recall, precision) against the truth beside the simulation's.

``python benchmarks/partitions.py release-full [MESSAGES]`` (not part of ``make bench``: it writes 2 x 5.8 GB) runs
the release alone at full scale, 10^8 messages of the FE1 task's sealed size under the 2 GiB budget
(:func:`release_full`): the release never opens a message, so random bytes stand in for the ciphertexts that would
take hours of HPKE sealing to make.

At 10^8 messages the sealing takes hours (HPKE's seal: 110 us a message on one core here, more with both busy),
and the analysis more than an hour and a half. ``PRIVAGG_BENCH_PARTITION_DIR`` names a folder that outlives the run: a run stopped part way is run
again with the same settings and seals only the chunks not yet sealed in it, keeps a release made whole, and
aggregates only the partitions the analyzer had not (its partitioned batches resume: ``partition_progress``); the
folder is emptied once the analysis is done.

The memory budget is ``PRIVAGG_BENCH_PARTITION_BUDGET`` bytes, by default that of a 10^8-message batch in 2 GiB
scaled to m (2 GiB x m / 10^8, so P is what it would be at 10^8). Each process's peak RSS (VmHWM) is reported beside what
it held before the batch (its modules loaded, the task open): the rest is one partition's working set.
"""

from __future__ import annotations

import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from benchfmt import Report, note  # noqa: E402

USERS_PER_CHUNK = 10_000
EPSILON = 1.0
FULL_SCALE, FULL_BUDGET = 10**8, 2 << 30
BATCH = "b" * 32
HH_USERS, HH_MAX_LENGTH, HH_PHI, HH_DELTA = 1_000_000, 6, 0.01, 1e-6


def fe1_workload(messages: int):
    """(parameters, the users' items): FE1 over 2^20 items (delta 1e-8), Zipf(1.2) items, with as many users as
    send about ``messages`` messages (FE1 adds blanket messages per user)."""
    from privagg.protocols.registry import calibrate

    def parameters(users: int):
        return calibrate("fe1", epsilon=EPSILON, delta=1e-8, n_users=users, domain_size=1 << 20)

    users = messages
    for _ in range(3):
        users = max(2, round(messages / float(parameters(users).messages_per_user) / USERS_PER_CHUNK)) * USERS_PER_CHUNK
    return parameters(users), np.random.default_rng(2026).zipf(1.2, users) % (1 << 20)


def heavy_workload(users: int = HH_USERS):
    """(parameters, the users' items): fe-hh over strings of at most 6 bytes, phi = 0.01, the bundled English
    words (one a user)."""
    from privagg.datasets import english_words
    from privagg.protocols.registry import calibrate

    pool = [w for w in english_words(4 * users, 1_000).to_pylist() if len(w.encode()) <= HH_MAX_LENGTH][:users]
    parameters = calibrate("fe-hh", epsilon=EPSILON, delta=HH_DELTA, n_users=len(pool),
                           domain_size=256**HH_MAX_LENGTH, max_length=HH_MAX_LENGTH, phi=HH_PHI)
    return parameters, np.array(pool, dtype=object)


def _seal_chunk(task_json: str, items, seed: int, path: str) -> tuple[int, bytes, bool]:
    """One chunk of simulated devices' sealed messages (seeded: a benchmark) written to ``path``, whole or not at
    all: (messages, their plaintext aggregate, encoded, whether they were sealed now). A chunk already at ``path``
    with as many bytes as the seed's messages seal to was sealed by an earlier run in the same folder and is kept
    (the analysis checks it: its result must equal the plaintext messages')."""
    from privagg.protocols.registry import analyzer, client
    from privagg.service.shuffle.aggregate_codec import encode_aggregate
    from privagg.service.tasks import Task, seal_messages

    task = Task.from_json(task_json, verify=False)
    messages = client(task.parameters).randomize(items, np.random.default_rng(seed))
    target = Path(path)
    sealed_now = not (target.is_file() and target.stat().st_size == len(messages) * task.sealed_size)
    if sealed_now:
        partial = target.with_suffix(".part")
        partial.write_bytes(b"".join(seal_messages(task, messages)))
        partial.replace(target)
    role = analyzer(task.parameters)
    return len(messages), encode_aggregate(role.agg_update(role.agg_init(), messages)), sealed_now


def _peak(fixed: float, workers: float | None = None) -> dict:
    """Peak RSS (MB) of this process, its fixed part (once its modules were loaded), and its workers' (the
    largest VmHWM sampled while they ran: :class:`_WorkerPeaks`; None for a step without workers)."""
    return {"rss_mb": _loaded(), "fixed_mb": fixed, "workers_rss_mb": workers}


def _loaded(pid: str = "self") -> float:
    """A process's peak RSS so far (MB): VmHWM, which, unlike getrusage's, starts afresh at exec; 0 if it is gone."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except OSError:
        return 0.0
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


class _WorkerPeaks:
    """The largest peak RSS (VmHWM) of this process's child processes, sampled every ``interval`` seconds on a
    thread while they run: the worker processes' own memory, which getrusage's RUSAGE_CHILDREN does not give (a
    spawned worker inherits the analyzer's high-water mark through the fork before its exec). VmHWM only grows, so
    a sample misses at most a worker's growth in its last interval."""

    def __init__(self, interval: float = 0.2) -> None:
        import threading

        self.interval, self.largest, self._stop = interval, 0.0, threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        me = os.getpid()
        while not self._stop.wait(self.interval):
            for children in Path(f"/proc/{me}/task").glob("*/children"):
                for pid in children.read_text().split():
                    self.largest = max(self.largest, _loaded(pid))

    def __enter__(self) -> "_WorkerPeaks":
        self._thread.start()
        return self

    def __exit__(self, *_exc) -> None:
        self._stop.set()
        self._thread.join()


def _release(folder: Path, task_json: str, chunks: list[str], messages: int, reports: int, budget: int) -> dict:
    from privagg.service.shuffle.partitions import partition_count, write_partitions
    from privagg.service.tasks import Task

    task = Task.from_json(task_json, verify=False)
    size, fixed = task.sealed_size, _loaded()
    partitions = partition_count(messages, size, budget)
    start = time.perf_counter()
    stream = (np.fromfile(c, dtype=np.uint8).reshape(-1, size) for c in chunks)
    manifest = write_partitions(stream, size, folder / "root" / task.task_id / BATCH, partitions, task.task_id,
                                BATCH, reports)
    return {"seconds": time.perf_counter() - start, "partitions": partitions,
            "largest": max(e["messages"] for e in manifest["partitions"]), **_peak(fixed)}


def _analyze(folder: Path, budget: int) -> dict:
    import sqlalchemy as sa

    from privagg.service import storage
    from privagg.service.shuffle.analyzer import AnalyzerService
    from privagg.service.keys import KeyEncryptionKey
    from privagg.service.shuffle.partitions import MANIFEST
    from privagg.service.shuffle.workers import BatchWorkers

    kek = KeyEncryptionKey.load(folder / "kek")
    engine = storage.connect(f"sqlite:///{folder / 'analyzer.db'}", "analyzer", kek=kek)
    service = AnalyzerService(engine, BatchWorkers(2), 2, kek=kek, partition_root=folder / "root",
                              memory_budget=budget)
    task_id = (folder / "task_id").read_text()
    service.load(task_id)
    with engine.connect() as c:  # partitions an earlier run aggregated before it was stopped
        earlier = [row.part for row in c.execute(sa.select(storage.partition_progress.c.part))]
    fixed = _loaded()  # the analyzer with its modules loaded and the task open, before any partition
    start = time.perf_counter()
    with _WorkerPeaks() as workers:
        assert service.apply_partitioned_batch(task_id, BATCH) == "applied"
    seconds = time.perf_counter() - start
    service.executor.shutdown()
    result = service.result(task_id, top=50)
    found = result.get("heavy_hitters", result.get("estimates"))
    manifest = json.loads((folder / "root" / task_id / BATCH / MANIFEST).read_text())
    now = sum(e["messages"] for j, e in enumerate(manifest["partitions"]) if j not in earlier)
    return {"seconds": seconds, "earlier_partitions": earlier, "messages_now": now,
            "found": [[e["item"], e["estimate"]] for e in found], **_peak(fixed, workers.largest)}


def run(folder: Path, parameters, items: np.ndarray, budget: int) -> dict:
    """The whole run in ``folder``: seal (two processes), release, analyze (each in its own process); the
    analysis's result against the plaintext messages' (``exact``) and, for heavy hitters, scored against the
    truth."""
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    from privagg.protocols.registry import analyzer
    from privagg.protocols.results import HeavyHitterList
    from privagg.service import storage
    from privagg.service.shuffle.aggregate_codec import decode_aggregate
    from privagg.service.shuffle.analyzer import AnalyzerService
    from privagg.service.keys import KeyEncryptionKey

    if (folder / "task_id").exists():  # an earlier run in this folder: its task, and the chunks it sealed
        kek = KeyEncryptionKey.load(folder / "kek")
        service = AnalyzerService(storage.connect(f"sqlite:///{folder / 'analyzer.db'}", "analyzer", kek=kek),
                                  kek=kek)
        task = service.load((folder / "task_id").read_text()).task
        if task.parameters != parameters:
            raise RuntimeError(f"{folder} holds a task of other parameters ({task.parameters}): use a new folder")
    else:
        kek = KeyEncryptionKey.generate()
        kek.write(folder / "kek")
        service = AnalyzerService(storage.connect(f"sqlite:///{folder / 'analyzer.db'}", "analyzer", kek=kek),
                                  kek=kek)
        task = service.create_task(parameters)
        (folder / "task_id").write_text(task.task_id)
    service.engine.dispose()
    slices = [items[i:i + USERS_PER_CHUNK] for i in range(0, len(items), USERS_PER_CHUNK)]
    chunks = [str(folder / f"chunk-{i:05d}") for i in range(len(slices))]
    role = analyzer(task.parameters)
    start, count, sealed, total = time.perf_counter(), 0, 0, role.agg_init()
    # spawned, not forked: this process may have started numba's OpenMP threads (merging the chunks' aggregates),
    # and a child forked from such a process is terminated (at 10^8 messages it was)
    with ProcessPoolExecutor(2, mp_context=multiprocessing.get_context("spawn")) as pool:
        for sent, part, now in pool.map(_seal_chunk, [task.to_json()] * len(chunks), slices, range(len(chunks)),
                                        chunks):
            count, sealed, total = count + sent, sealed + now * sent, role.merge([total, decode_aggregate(part)])
    sealing = time.perf_counter() - start
    plain = role.finalize(total)
    if (folder / "release.json").exists():  # released by an earlier run, maybe analyzed in part: kept as it is
        released = {**json.loads((folder / "release.json").read_text()), "earlier": True}
    else:
        shutil.rmtree(folder / "root", ignore_errors=True)  # an earlier run's release, cut short
        released = _child("release", folder, task.to_json(), chunks, count, len(items), budget)
        (folder / "release.json").write_text(json.dumps(released))
    analyzed = _child("analyze", folder, budget)
    for c in chunks:
        Path(c).unlink()
    if isinstance(plain, HeavyHitterList):  # the same heavy items, with the same estimates
        expected = [[item, float(e)] for item, e in zip(plain.items.tolist(), plain.estimates)]
        exact = sorted(analyzed["found"]) == sorted(expected)
    else:
        exact = all(e == float(plain.estimates[int(i)]) for i, e in analyzed["found"])
    return {"messages": count, "sealed": sealed, "users": len(items), "budget": budget, "sealing": sealing,
            "release": released, "analyze": analyzed, "exact": exact}


def release_full(folder: Path, messages: int = FULL_SCALE, chunk: int = 1_000_000) -> dict:
    """The partitioned release of ``messages`` sealed messages of the FE1 task's size under the 2 GiB budget, in
    this process, streamed in chunks as the collector streams them from its database: wall time, partitions, peak
    RSS (VmHWM) and what the process held before the batch. Random bytes stand in for the ciphertexts (the release
    only moves them)."""
    from privagg.service import storage
    from privagg.service.shuffle.analyzer import AnalyzerService
    from privagg.service.keys import KeyEncryptionKey
    from privagg.service.shuffle.partitions import partition_count, write_partitions

    kek = KeyEncryptionKey.generate()
    service = AnalyzerService(storage.connect(f"sqlite:///{folder / 'analyzer.db'}", "analyzer", kek=kek), kek=kek)
    task = service.create_task(fe1_workload(10**6)[0])
    size = task.sealed_size
    partitions = partition_count(messages, size, FULL_BUDGET)
    source, fixed = np.random.default_rng(7), _loaded()

    def chunks():
        for lo in range(0, messages, chunk):
            yield np.frombuffer(source.bytes(min(chunk, messages - lo) * size), dtype=np.uint8)

    start = time.perf_counter()
    manifest = write_partitions(chunks(), size, folder / "release", partitions, task.task_id, BATCH, messages // 7)
    sizes = [e["messages"] for e in manifest["partitions"]]
    return {"messages": messages, "sealed_size": size, "partitions": partitions, "largest": max(sizes),
            "smallest": min(sizes), "seconds": time.perf_counter() - start, **_peak(fixed),
            "written_bytes": sum(p.stat().st_size for p in (folder / "release").glob("*.arrow"))}


def _child(step: str, *args) -> dict:
    out = subprocess.run([sys.executable, __file__, step, json.dumps([str(a) if isinstance(a, Path) else a
                                                                      for a in args])],
                         capture_output=True, text=True)
    if out.returncode:
        raise RuntimeError(f"the {step} step failed:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout)


def partitions(report: Report) -> None:
    from collections import Counter

    from privagg.simulate.heavy_hitters import estimate_heavy_hitters, score

    messages = int(os.environ.get("PRIVAGG_BENCH_PARTITION_MESSAGES", "1000000"))
    budget = int(os.environ.get("PRIVAGG_BENCH_PARTITION_BUDGET", max(16 << 20, FULL_BUDGET * messages // FULL_SCALE)))
    kept = os.environ.get("PRIVAGG_BENCH_PARTITION_DIR") and Path(os.environ["PRIVAGG_BENCH_PARTITION_DIR"])
    report.add(f"## 14. A batch larger than memory: about {messages:,} FE1 messages as Arrow partitions; fe-hh "
               f"over strings with {HH_USERS:,} simulated devices", "")
    rows = []
    for name, (parameters, items) in (("fe1", fe1_workload(messages)), ("fe-hh", heavy_workload())):
        note(f"{name}: partitioned release and aggregation of {len(items):,} devices' messages, budget {budget:,} B")
        if not kept:
            with tempfile.TemporaryDirectory() as tmp:
                r = run(Path(tmp), parameters, items, budget)
        else:
            (kept / name).mkdir(parents=True, exist_ok=True)
            r = run(kept / name, parameters, items, budget)
            shutil.rmtree(kept / name)
        rel, ana = r["release"], r["analyze"]
        quality = ""
        if name == "fe-hh":
            truth = dict(Counter(items.tolist()))
            simulated, _ = estimate_heavy_hitters(list(items), epsilon=EPSILON, delta=HH_DELTA, phi=HH_PHI,
                                                  max_length=HH_MAX_LENGTH, seed=0, evaluate=False)
            served = score([item for item, _ in ana["found"]], truth, parameters.threshold)
            sim = score([h.item for h in simulated.heavy_hitters], truth, parameters.threshold)
            quality = (f"; the {sum(c >= parameters.threshold for c in truth.values())} words held by at least "
                       f"phi n = {parameters.threshold:,.0f} users: recall {served.recall:.2f}, precision "
                       f"{served.precision:.2f} (the simulation: {sim.recall:.2f}, {sim.precision:.2f})")
        earlier = r["messages"] - r["sealed"]
        resumed = (f" ({len(ana['earlier_partitions'])} of the {rel['partitions']} partitions aggregated by an earlier "
                   "run: the time and rate are this run's, over the others)" if ana["earlier_partitions"] else "")
        rows += [[name, "seal (2 processes, as devices would)", f"{r['sealing']:.1f}", "-",
                  f"{r['messages']:,} messages from {r['users']:,} devices"
                  + (f" ({earlier:,} of them sealed by an earlier run in the folder)" if earlier else "")],
                 [name, "release: 2 passes", f"{rel['seconds']:.1f}", f"{rel['rss_mb']:.0f} ({rel['fixed_mb']:.0f}) / -",
                  f"P = {rel['partitions']} partitions, the largest {rel['largest']:,} messages"
                  + (" (measured by an earlier run in the folder)" if rel.get("earlier") else "")],
                 [name, "analyze: check, deduplicate, open, aggregate", f"{ana['seconds']:.1f}",
                  f"{ana['rss_mb']:.0f} ({ana['fixed_mb']:.0f}) / {ana['workers_rss_mb']:.0f}",
                  f"{ana['messages_now'] / ana['seconds'] / 2:,.0f} messages/s per worker (2 workers){resumed}; the result is "
                  f"the plaintext messages' exactly: {'yes' if r['exact'] else '**NO**'}{quality}"]]
    report.table(["task", "step", "seconds", "peak RSS (MB): process (before the batch) / largest worker", "notes"],
                 rows)
    report.add(f"The budget ({budget / 2**20:,.0f} MiB; PRIVAGG_BENCH_PARTITION_BUDGET sets it, by default a "
               "10^8-message batch's 2 GiB scaled to m) bounds WORKING_COPIES = 8 times the largest partition's "
               "sealed bytes; each process holds one partition's working set beside what it held before the "
               "batch (the interpreter, the libraries, the task). The times grow in proportion to m; the peak RSS "
               "grows with the partition's size, not with m.", "")


if __name__ == "__main__":
    step = sys.argv[1]
    if step == "release-full":
        count = sys.argv[2] if len(sys.argv) > 2 else str(FULL_SCALE)
        if not (count.isdigit() and int(count) >= 1):
            sys.exit(f"usage: {sys.argv[0]} release-full [MESSAGES]: MESSAGES must be an integer >= 1, got {count!r}")
        # the spill files and the partitions: twice the sealed bytes (about 58 a message) on the temporary folder
        need, free = 2 * 58 * int(count), shutil.disk_usage(tempfile.gettempdir()).free
        if need > free:
            sys.exit(f"release-full of {int(count):,} messages needs about {need / 1e9:,.1f} GB in "
                     f"{tempfile.gettempdir()}, which has {free / 1e9:,.1f} GB free (TMPDIR sets the folder)")
        with tempfile.TemporaryDirectory() as tmp:
            print(json.dumps(release_full(Path(tmp), int(count))))
        sys.exit()
    args = json.loads(sys.argv[2])
    if step == "release":
        print(json.dumps(_release(Path(args[0]), *args[1:])))
    else:
        print(json.dumps(_analyze(Path(args[0]), int(args[1]))))
