"""A batch larger than memory (service/shuffle/partitions.py): the two-pass release through P Arrow partitions is a
uniform random permutation (chi-square on positions; all 24 orders of 4 messages, slow), partitions stay within the memory
budget, tampered manifests and partitions are refused, repeated encapsulations are found across partitions, and
the collector and the analyzer move a shuffle task's batch as partitions end to end, on SQLite and PostgreSQL,
exactly as the analyzer would aggregate the plaintext messages."""

import json
import math
import shutil
import threading
import time
from collections import Counter

import numpy as np
import pytest
import sqlalchemy as sa
from scipy.stats import chi2_contingency, chisquare

from privagg.protocols.registry import analyzer as make_analyzer, calibrate
from privagg.service import storage
from privagg.service.shuffle.partitions import (MANIFEST, WORKING_COPIES, PartitionError, duplicate_rows,
                                                largest_partition, partition_count, read_manifest, read_partition,
                                                write_partitions)
from service_deployment import AUTH, deploy, users

TASK, BATCH = "a" * 32, "b" * 32


def released(tmp_path, messages: np.ndarray, partitions: int, rng, chunk: int = 1_000) -> list[int]:
    """The batch's first column (each message's input index) in the order the partitions hold it."""
    chunks = (messages[i:i + chunk] for i in range(0, len(messages), chunk))
    manifest = write_partitions(chunks, messages.shape[1], tmp_path, partitions, TASK, BATCH, len(messages), rng)
    read = read_manifest(tmp_path, TASK, BATCH, messages.shape[1])
    assert read == manifest and manifest["messages"] == len(messages)
    rows = np.concatenate([read_partition(tmp_path, read, j) for j in range(partitions)])
    return rows[:, :4].copy().view("<u4").ravel().tolist()


def indexed(m: int) -> np.ndarray:
    """m messages of 8 bytes, the first 4 their index."""
    out = np.zeros((m, 8), dtype=np.uint8)
    out[:, :4] = np.arange(m, dtype="<u4").view(np.uint8).reshape(m, 4)
    return out


def formed(databases, tmp_path, n: int, seed: int, candidates=None):
    """A deployment whose n users' reports (FE1 over 20 items) are stored and formed into one batch, with budgets
    that send it as partitions: (deployment, batch id, its reports, its messages, the users' plaintext messages)."""
    d = deploy(databases, calibrate("fe1", epsilon=2.0, delta=1e-5, n_users=n, domain_size=20),
               partition_root=tmp_path, budgets=(50_000, 1 << 30), candidates=candidates)
    reports, sent = users(d, np.arange(n) % 20, np.random.default_rng(seed))
    d.store(reports)
    d.collector.form_batches()
    with d.collector.engine.connect() as c:
        (batch, count, messages), = c.execute(sa.select(storage.batches.c.batch_id, storage.batches.c.reports,
                                                        storage.batches.c.messages)).all()
    return d, batch, count, messages, sent


def test_the_release_is_a_permutation_whose_positions_do_not_depend_on_arrival():
    """50,000 messages through 7 partitions, streamed in chunks of 1,000: every message once, and its output decile
    independent of its input decile (chi-square on the 10 x 10 table, each cell 500 expected, at the 1e-4 level)."""
    import tempfile
    from pathlib import Path

    m = 50_000
    with tempfile.TemporaryDirectory() as folder:
        order = released(Path(folder), indexed(m), 7, np.random.default_rng(20261202))
    assert sorted(order) == list(range(m))
    table = np.zeros((10, 10))
    np.add.at(table, (np.array(order) * 10 // m, np.arange(m) * 10 // m), 1)
    assert chi2_contingency(table).pvalue > 1e-4, table


@pytest.mark.slow  # 4,800 releases
def test_every_order_of_four_messages_is_equally_likely(tmp_path):
    """docs/derivations.md's check with the service's own code: 4 messages in 3 partitions, 4,800 releases; the 24
    orders each 200 times expected (chi-square at the 1e-4 level)."""
    rng, counts = np.random.default_rng(7), Counter()
    for _ in range(4_800):
        counts[tuple(released(tmp_path, indexed(4), 3, rng, chunk=3))] += 1
    assert len(counts) == 24 and chisquare(list(counts.values())).pvalue > 1e-4, counts


@pytest.mark.parametrize("messages, partitions", [(1_000, 1_000), (1_000, 10), (50, 7), (10**6, 23), (10**8, 23)])
def test_the_largest_partition_bound_holds_against_the_exact_binomial_tail(messages, partitions):
    """P times the exact Pr[Binomial(m, 1/P) > bound] is at most eta, for partitions of one message on average as
    for millions (the form sqrt(3 mu L) used before failed the first: 9.6e-6)."""
    from scipy.stats import binom

    from privagg.service.shuffle.partitions import ETA

    bound = largest_partition(messages, partitions)
    assert partitions * binom.sf(math.floor(bound), messages, 1 / partitions) <= ETA


def test_the_partitions_fit_the_budget():
    m, size, budget = 1_000_000, 60, 64 << 20
    p = partition_count(m, size, budget)
    bound = largest_partition(m, p)
    assert bound * size * WORKING_COPIES <= budget and p > m * size * WORKING_COPIES / budget
    largest = np.random.default_rng(3).multinomial(m, [1 / p] * p, size=300).max()
    assert largest <= bound
    assert partition_count(100, 60, 1 << 30) == 1
    with pytest.raises(ValueError, match="at least"):
        partition_count(10**9, 60, 1_000)


def test_a_tampered_manifest_or_partition_is_refused(tmp_path):
    write_partitions([indexed(200)], 8, tmp_path, 3, TASK, BATCH, 200, np.random.default_rng(0))
    manifest = json.loads((tmp_path / MANIFEST).read_text())
    with pytest.raises(PartitionError, match="task_id and batch_id"):
        read_manifest(tmp_path, TASK, "c" * 32, 8)
    with pytest.raises(PartitionError, match="9 bytes"):
        read_manifest(tmp_path, TASK, BATCH, 9)

    def refused(change, match):
        edited = json.loads(json.dumps(manifest))
        change(edited)
        (tmp_path / MANIFEST).write_text(json.dumps(edited))
        with pytest.raises(PartitionError, match=match):
            read_manifest(tmp_path, TASK, BATCH, 8)

    refused(lambda m: m["partitions"][0].update(file="../../etc/passwd"), "partition-NNNNN.arrow")
    refused(lambda m: m["partitions"][1].update(file=m["partitions"][0]["file"]), "each once")
    refused(lambda m: m["partitions"][0].update(messages=m["partitions"][0]["messages"] + 1), "add up")
    refused(lambda m: m.update(reports=0), "reports")
    refused(lambda m: m.update(extra=1), "fields")
    (tmp_path / MANIFEST).write_text("{")
    with pytest.raises(PartitionError, match="readable JSON"):
        read_manifest(tmp_path, TASK, BATCH, 8)
    (tmp_path / MANIFEST).write_text(json.dumps(manifest))
    path = tmp_path / manifest["partitions"][1]["file"]
    raw = bytearray(path.read_bytes())
    raw[-40] ^= 1
    path.write_bytes(bytes(raw))
    with pytest.raises(PartitionError, match="SHA-256"):
        read_partition(tmp_path, read_manifest(tmp_path, TASK, BATCH, 8), 1)
    swapped = json.loads(json.dumps(manifest))  # partition 0's file and digest under partition 2's entry
    swapped["partitions"][2] = dict(swapped["partitions"][0], file=swapped["partitions"][2]["file"])
    (tmp_path / swapped["partitions"][2]["file"]).write_bytes((tmp_path / manifest["partitions"][0]["file"]).read_bytes())
    swapped["partitions"][2]["messages"] = manifest["partitions"][0]["messages"]
    swapped["messages"] = sum(e["messages"] for e in swapped["partitions"])
    (tmp_path / MANIFEST).write_text(json.dumps(swapped))
    with pytest.raises(PartitionError, match="must be partition 2 of the 3 of this batch"):
        read_partition(tmp_path, read_manifest(tmp_path, TASK, BATCH, 8), 2)


def test_a_manifest_that_leaves_out_a_partition_or_points_at_no_file_is_refused(tmp_path):
    """A manifest without its last partition (the counts made to add up) is refused at the first partition read,
    which knows how many its batch has; a partition that is a FIFO, a symbolic link or a file larger than its
    messages can take is refused before a byte of it is read (a FIFO would block, /dev/zero fill the memory)."""
    import os

    manifest = write_partitions([indexed(200)], 8, tmp_path, 3, TASK, BATCH, 200, np.random.default_rng(0))
    short = dict(manifest, partitions=manifest["partitions"][:2])
    short["messages"] = sum(e["messages"] for e in short["partitions"])
    (tmp_path / MANIFEST).write_text(json.dumps(short))
    with pytest.raises(PartitionError, match="partition 0 of the 2 of this batch"):
        read_partition(tmp_path, read_manifest(tmp_path, TASK, BATCH, 8), 0)
    (tmp_path / MANIFEST).write_text(json.dumps(manifest))
    name = manifest["partitions"][0]["file"]
    limit = manifest["partitions"][0]["messages"] * 8 + (1 << 16)
    (tmp_path / name).unlink()
    os.mkfifo(tmp_path / name)
    with pytest.raises(PartitionError, match="regular file"):
        read_partition(tmp_path, manifest, 0)
    (tmp_path / name).unlink()
    (tmp_path / name).symlink_to("/dev/zero")
    with pytest.raises(PartitionError, match="readable file"):  # O_NOFOLLOW: ELOOP
        read_partition(tmp_path, manifest, 0)
    (tmp_path / name).unlink()
    with open(tmp_path / name, "wb") as f:  # sparse: its size, not its bytes
        f.truncate(limit + 1)
    with pytest.raises(PartitionError, match=f"at most {limit:,} bytes"):
        read_partition(tmp_path, manifest, 0)
    (tmp_path / MANIFEST).unlink()
    os.mkfifo(tmp_path / MANIFEST)
    with pytest.raises(PartitionError, match="regular file"):
        read_manifest(tmp_path, TASK, BATCH, 8)


@pytest.mark.parametrize("block", [7, 1 << 20])
def test_repeated_encapsulations_are_found_across_partitions(tmp_path, block):
    """Messages 0..299, then copies of messages 5 and 17 (a replay): exactly the later copy of each is dropped,
    wherever the shuffle put them, whether the digests are made a few rows at a time or a partition at once."""
    messages = np.concatenate([indexed(300), indexed(300)[[5, 17, 5]]])
    manifest = write_partitions([messages], 8, tmp_path, 4, TASK, BATCH, 300, np.random.default_rng(1))
    sizes = []
    dropped = duplicate_rows(tmp_path, manifest, lambda sealed: sizes.append(len(sealed)) or [
        bytes(row).ljust(32, b"\0") for row in sealed], block=block)
    assert max(sizes) == min(block, max(e["messages"] for e in manifest["partitions"])) and sum(sizes) == 303
    assert dropped == duplicate_rows(tmp_path, manifest, lambda sealed: [bytes(row).ljust(32, b"\0")
                                                                         for row in sealed], block=300)
    seen = Counter()
    for j in range(4):
        rows = read_partition(tmp_path, manifest, j)[:, :4].copy().view("<u4").ravel()
        keep = np.setdiff1d(np.arange(len(rows)), dropped.get(j, []))
        seen.update(rows[keep].tolist())
    assert sum(len(r) for r in dropped.values()) == 3 and sorted(seen) == list(range(300))
    assert not list(tmp_path.glob(".digests-*")) and not list(tmp_path.glob("spill-*"))


def test_a_shuffle_tasks_batch_goes_as_partitions_and_aggregates_exactly(databases, tmp_path):
    """A collector whose budget is too small for the batch whole writes it as partitions and tells the analyzer,
    which opens them one at a time: the aggregate is the plaintext messages' exactly, the partitions are deleted
    once applied, and a second delivery applies nothing."""
    n = 1_200
    d = deploy(databases, calibrate("fe1", epsilon=2.0, delta=1e-5, n_users=n, domain_size=20),
               partition_root=tmp_path, budgets=(200_000, 200_000))
    rng = np.random.default_rng(4)
    reports, sent = users(d, rng.integers(0, 20, n), rng)
    d.store(reports)
    assert d.collector.release_batches() == 1 and not d.delivered  # no blob: partitions
    assert not list(tmp_path.rglob("*.arrow"))  # deleted once acknowledged
    result = d.result()
    analyzer = make_analyzer(d.task.parameters)
    direct = analyzer.finalize(analyzer.agg_update(analyzer.agg_init(), type(sent[0]).concatenate(sent)))
    assert {e["item"]: e["estimate"] for e in result["estimates"]} == {i: float(direct.estimates[i]) for i in range(20)}
    assert result["collection"] == {"reports": n, "batches": 1, "unopened": 0, "malformed": 0, "duplicates": 0}
    again = d.A.post(f"/tasks/{d.task.task_id}/batches/{'0' * 32}/partitioned", headers=AUTH)
    assert again.status_code == 400  # no such batch's manifest


def test_the_analyzer_refuses_partitions_over_its_budget_or_without_a_root(databases, tmp_path):
    n = 600
    d = deploy(databases, calibrate("fe1", epsilon=2.0, delta=1e-5, n_users=n, domain_size=20),
               partition_root=tmp_path, budgets=(100_000, 20_000))
    reports, _ = users(d, np.zeros(n, dtype=int), np.random.default_rng(5))
    d.store(reports)
    assert d.collector.release_batches() == 0  # refused: the batch waits, its partitions kept for the next try
    (batch,) = [p for p in (tmp_path / d.task.task_id).iterdir()]
    answer = d.A.post(f"/tasks/{d.task.task_id}/batches/{batch.name}/partitioned", headers=AUTH)
    assert answer.status_code == 400 and "over this analyzer's memory budget of 20,000" in answer.json()["detail"]
    assert d.A.post(f"/tasks/{d.task.task_id}/batches/{batch.name}/partitioned").status_code == 401
    d.collector.memory_budget = 20_000  # as the refusal says: more, smaller partitions; the old ones are not kept
    assert d.collector.release_batches() == 1 and d.result()["collection"]["reports"] == n
    d.analyzer.partition_root = None
    answer = d.A.post(f"/tasks/{d.task.task_id}/batches/{batch.name}/partitioned", headers=AUTH)
    assert answer.status_code == 409 and answer.json()["error"] == "no_partitions"


def test_a_batch_applied_twice_at_once_is_applied_once_one_request_at_a_time(databases, tmp_path, monkeypatch):
    """A collector that posts a batch again while the analyzer still works on the first post (it was restarted,
    or a replica): the second request waits for the first (one partitioned batch in memory at a time, and no
    shared scratch files: they once clashed and replays were counted twice), then finds the batch applied. No
    scratch file is left in the collector's directory."""
    from privagg.service.shuffle import partitions

    n = 600
    d, batch, count, messages, _ = formed(databases, tmp_path, n, 8)
    directory = d.collector.write_partitions(d.task.task_id, batch, count, messages)
    inside, most, slow = [0], [0], partitions.duplicate_rows

    def slowly(*args, **kwargs):  # long enough for the other request to come in
        inside[0] += 1
        most[0] = max(most[0], inside[0])
        threading.Event().wait(0.5)
        inside[0] -= 1
        return slow(*args, **kwargs)

    monkeypatch.setattr(partitions, "duplicate_rows", slowly)
    outcomes = []
    threads = [threading.Thread(target=lambda: outcomes.append(d.analyzer.apply_partitioned_batch(d.task.task_id,
                                                                                                   batch)))
               for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(outcomes) == ["already applied", "applied"] and most[0] == 1
    assert d.result()["collection"] == {"reports": n, "batches": 1, "unopened": 0, "malformed": 0, "duplicates": 0}
    assert d.result()["messages"]["total"] == messages
    assert sorted(p.name for p in directory.iterdir()) == sorted(
        [partitions.MANIFEST] + [e["file"] for e in read_manifest(directory, d.task.task_id, batch,
                                                                   d.task.sealed_size)["partitions"]])


def stopped_in(d, batch: str, partition: int, monkeypatch) -> list[int]:
    """Apply the batch with the analyzer stopped (an exception) as it starts its ``partition``-th partition; the
    partitions it is asked to aggregate, then and afterwards, are appended to the list returned."""
    from privagg.service.shuffle.analyzer import AnalyzerService

    calls, stop, aggregate = [], [partition], AnalyzerService._aggregate_partition

    def stopping(self, loaded, directory, manifest, index, dropped):
        calls.append(index)
        if len(calls) == stop[0]:
            stop[0] = None  # once
            raise RuntimeError("the analyzer was stopped")
        return aggregate(self, loaded, directory, manifest, index, dropped)

    monkeypatch.setattr(AnalyzerService, "_aggregate_partition", stopping)
    with pytest.raises(RuntimeError, match="stopped"):
        d.analyzer.apply_partitioned_batch(d.task.task_id, batch)
    return calls


@pytest.mark.parametrize("candidates", [None, [0, 3, 7]])
def test_an_analyzer_stopped_part_way_goes_on_from_the_partitions_it_had_not_done(databases, tmp_path, monkeypatch,
                                                                                 caplog, candidates):
    """An analyzer stopped in a batch's third partition (a crash), then told again, aggregates only the partitions
    it had not: the result is the plaintext messages' exactly, a candidates task answers candidates added
    afterwards exactly (the messages it kept of the first two partitions are not lost or doubled), and no
    progress is left once the batch is applied. Progress made on another manifest is not used."""
    import logging

    n = 600
    d, batch, count, messages, sent = formed(databases, tmp_path, n, 14, candidates)
    directory = d.collector.write_partitions(d.task.task_id, batch, count, messages)
    partitions = len(read_manifest(directory, d.task.task_id, batch, d.task.sealed_size)["partitions"])
    assert partitions >= 4
    calls = stopped_in(d, batch, 3, monkeypatch)
    assert calls == [0, 1, 2]
    with d.analyzer.engine.connect() as c:
        assert c.execute(sa.select(sa.func.count()).select_from(storage.partition_progress)).scalar() == 2
    calls.clear()
    with caplog.at_level(logging.INFO, logger="privagg"):
        assert d.analyzer.apply_partitioned_batch(d.task.task_id, batch) == "applied"
    assert calls == list(range(2, partitions))
    assert [(r.fields["partitions_done"], r.fields["partitions"]) for r in caplog.records
            if r.getMessage() == "partitioned batch resumed"] == [(2, partitions)]
    items = candidates or list(range(20))
    if candidates:
        assert d.analyzer.add_candidates(d.task.task_id, [11, 19]) == 5
        items = sorted(candidates + [11, 19])
    analyzer = make_analyzer(d.task.parameters, np.array(items) if candidates else None)
    direct = analyzer.finalize(analyzer.agg_update(analyzer.agg_init(), type(sent[0]).concatenate(sent)))
    result = d.result()
    assert {e["item"]: e["estimate"] for e in result["estimates"]} == dict(zip(items, direct.estimates.tolist()))
    assert result["messages"]["total"] == messages and result["collection"]["reports"] == n
    with d.analyzer.engine.connect() as c:
        assert c.execute(sa.select(sa.func.count()).select_from(storage.partition_progress)).scalar() == 0


def test_progress_on_another_manifest_is_not_used(databases, tmp_path, monkeypatch):
    """The collector wrote the batch again (in another order) after the analyzer aggregated some partitions of the
    first write: the analyzer aggregates every partition of the new one, and counts each message once."""
    n = 600
    d, batch, count, messages, sent = formed(databases, tmp_path, n, 15)
    directory = d.collector.write_partitions(d.task.task_id, batch, count, messages)
    calls = stopped_in(d, batch, 2, monkeypatch)
    shutil.rmtree(directory)
    d.collector.write_partitions(d.task.task_id, batch, count, messages)  # another random order
    calls.clear()
    assert d.analyzer.apply_partitioned_batch(d.task.task_id, batch) == "applied"
    analyzer = make_analyzer(d.task.parameters)
    direct = analyzer.finalize(analyzer.agg_update(analyzer.agg_init(), type(sent[0]).concatenate(sent)))
    assert {e["item"]: e["estimate"] for e in d.result()["estimates"]} == {
        i: float(direct.estimates[i]) for i in range(20)}
    assert d.result()["messages"]["total"] == messages and calls == list(range(len(calls))) and len(calls) >= 4


def test_a_torn_manifest_is_written_again(databases, tmp_path):
    """A manifest cut short (a crash in the middle of writing it, before writes were atomic) is not trusted: the
    collector writes the batch again from its database."""
    n = 600
    d, batch, count, messages, _ = formed(databases, tmp_path, n, 10)
    directory = d.collector.write_partitions(d.task.task_id, batch, count, messages)
    manifest = (directory / MANIFEST).read_text()
    (directory / MANIFEST).write_text(manifest[:len(manifest) // 2])
    assert d.collector.release_batches() == 1 and d.result()["collection"]["reports"] == n


@pytest.mark.slow
def test_partitions_are_aggregated_on_a_dask_cluster_as_in_one_process(tmp_path):
    """An analyzer on a Dask cluster (each partition a task) and one in this process: the same aggregate as the
    batch sent whole."""
    import sqlalchemy as sa
    from dask.distributed import Client, LocalCluster

    from privagg.protocols.registry import client as make_client
    from privagg.service.shuffle.analyzer import AnalyzerService
    from privagg.service.shuffle.collector import batch_stream
    from privagg.service.keys import KeyEncryptionKey
    from privagg.service.storage import aggregates, analyzer_tasks, connect
    from privagg.service.tasks import seal_messages

    params = calibrate("fe1", epsilon=1.0, delta=1e-6, n_users=2_000, domain_size=100)
    kek = KeyEncryptionKey.generate()
    whole = AnalyzerService(connect(f"sqlite:///{tmp_path}/whole.db", "analyzer"), kek=kek)
    task = whole.create_task(params)
    for name in ("dask", "local"):  # the same task, key and empty aggregate
        with whole.engine.connect() as source, connect(f"sqlite:///{tmp_path}/{name}.db", "analyzer").begin() as c:
            for table in (analyzer_tasks, aggregates):
                c.execute(table.insert(), [dict(r._mapping) for r in source.execute(sa.select(table))])
    batch = make_client(params).randomize(np.arange(2_000) % 100, np.random.default_rng(3))
    sealed = np.frombuffer(b"".join(seal_messages(task, batch)), dtype=np.uint8).reshape(len(batch), -1)
    whole.apply_batch(task.task_id, BATCH, batch_stream(task.task_id, BATCH, 2_000, sealed))
    write_partitions([sealed[:3_000], sealed[3_000:]], task.sealed_size, tmp_path / task.task_id / BATCH, 5,
                     task.task_id, BATCH, 2_000)
    results = []
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=False, dashboard_address=None) as cluster, \
            Client(cluster) as client:
        for name, executor in (("dask", client), ("local", None)):
            service = AnalyzerService(connect(f"sqlite:///{tmp_path}/{name}.db", "analyzer"), executor, 2, kek=kek,
                                      partition_root=tmp_path)
            assert service.apply_partitioned_batch(task.task_id, BATCH) == "applied"
            results.append(service.result(task.task_id))
    expected = whole.result(task.task_id)
    for result in results:
        assert result["estimates"] == expected["estimates"] and result["collection"] == expected["collection"]


def test_a_partial_write_is_redone_and_a_batch_applied_once(databases, tmp_path):
    """A collector killed while it wrote the partitions leaves files but no manifest (written last): the next try
    writes the batch again from the database. The analyzer applies the batch once, however often it is told."""
    n = 600
    d, batch, _, _, _ = formed(databases, tmp_path, n, 9)
    partial = tmp_path / d.task.task_id / batch
    partial.mkdir(parents=True)
    (partial / "partition-00000.arrow").write_bytes(b"half a file")
    (partial / "spill-00001").write_bytes(b"\0" * 60)
    assert d.collector.release_batches() == 1
    assert d.result()["collection"]["reports"] == n and not partial.exists()
    answer = d.A.post(f"/tasks/{d.task.task_id}/batches/{batch}/partitioned", headers=AUTH)
    assert answer.status_code == 200 and answer.json() == {"status": "already applied"}
    assert d.result()["collection"]["batches"] == 1


def test_two_replicas_writing_one_batch_at_once_and_a_damaged_partition_still_release_it(databases, tmp_path,
                                                                                         monkeypatch):
    """Two collector replicas write the same batch's partitions at once, one starting while the other is still
    writing: each writes in a directory of its own and moves it into place whole, so neither reads or deletes
    the other's half-written files (they once did, and the batch was never released). Then a partition damaged
    after its manifest was written: the analyzer refuses it as malformed, the collector writes the batch again,
    and the next round releases it, every report counted once and no stray directory left."""
    from privagg.service.shuffle import partitions
    from privagg.service.shuffle.collector import Collector

    n = 600
    d, batch, count, messages, _ = formed(databases, tmp_path, n, 12)
    c = d.collector
    replica = Collector(c.engine, c.fetch_task, c.forward, quiet=0.0, forward_partitioned=c.forward_partitioned,
                        partition_root=tmp_path, memory_budget=c.memory_budget)
    real = partitions.write_partitions

    def first_slowly(chunks, *args, **kwargs):  # the first replica stalls with its spill files open
        def stalled():
            if threading.current_thread().name == "first":
                threading.Event().wait(1.0)
            yield from chunks
        return real(stalled(), *args, **kwargs)

    monkeypatch.setattr(partitions, "write_partitions", first_slowly)
    first = threading.Thread(target=c.write_partitions, args=(d.task.task_id, batch, count, messages), name="first")
    first.start()
    threading.Event().wait(0.3)
    replica.write_partitions(d.task.task_id, batch, count, messages)
    first.join()
    directory = tmp_path / d.task.task_id / batch
    manifest = read_manifest(directory, d.task.task_id, batch, d.task.sealed_size)
    assert [p.name for p in (tmp_path / d.task.task_id).iterdir()] == [batch] and manifest["messages"] == messages
    damaged = directory / manifest["partitions"][0]["file"]
    damaged.write_bytes(damaged.read_bytes()[:-8] + b"\0" * 8)
    assert c.release_batches() == 0 and not directory.exists()  # refused as malformed: written again next time
    assert c.release_batches() == 1
    assert d.result()["collection"] == {"reports": n, "batches": 1, "unopened": 0, "malformed": 0, "duplicates": 0}
    assert not list((tmp_path / d.task.task_id).iterdir())


def test_writing_the_partitions_leaves_the_database_open_to_writers(tmp_path, monkeypatch):
    """The collector reads a batch for its partitions in a read transaction: on SQLite a deferred one, which takes
    no write lock, so reports go on being stored while a large batch is read (it once began IMMEDIATE, and every
    report waited for the whole read)."""
    from privagg.service.shuffle import partitions

    n = 300
    d, batch, count, messages, _ = formed({"analyzer": f"sqlite:///{tmp_path}/a.db", "collector": f"sqlite:///{tmp_path}/c.db"}, tmp_path, n, 13)
    real, waited = partitions.write_partitions, []

    def write_meanwhile(chunks, *args, **kwargs):  # once the read is under way, a writer's transaction
        def reading():
            yield next(chunks)
            start = time.perf_counter()
            with d.collector.engine.begin():
                waited.append(time.perf_counter() - start)
            yield from chunks
        return real(reading(), *args, **kwargs)

    monkeypatch.setattr(partitions, "write_partitions", write_meanwhile)
    d.collector.write_partitions(d.task.task_id, batch, count, messages)
    assert waited and waited[0] < 1.0
