"""A batch larger than memory: released through P Arrow partitions in a uniform random order, checked, and opened
and aggregated one partition at a time.

The scheme and its proof are in docs/derivations.md, "A shuffle larger than memory". Pass 1
(:func:`write_partitions`) streams the batch's sealed messages in chunks, never whole: each message draws a
label uniform on [P] from the secure generator and is appended to that label's spill file. Pass 2 reads each
spill file whole, permutes it by a uniform permutation from the same generator, and writes it as
``partition-JJJJJ.arrow``, an Arrow IPC file of one column of fixed-size ciphertexts, with the task, the batch
and the partition in its metadata. The partitions in order are a uniform random permutation of the batch (the
multinomial theorem). The manifest (``manifest.json``) names each partition's file, its messages and its
SHA-256, so the analyzer (:func:`read_manifest`, :func:`read_partition`) reads no file it was not promised
and no byte that changed on the way.

Memory: one partition at a time. :func:`partition_count` picks P so that the largest partition stays within
the budget with probability at least 1 - 1e-9 (a Chernoff bound on the Binomial(m, 1/P) sizes).
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import re
import stat
import tempfile
from collections.abc import Iterable
from pathlib import Path

import numpy as np

from ...core.randomness import secure_rng

MANIFEST, VERSION = "manifest.json", 1
PARTITION_FILE = re.compile(r"partition-[0-9]{5}\.arrow")
MAX_PARTITIONS = 10_000  # spill files open at once in pass 1
# bytes of working memory a process may take per sealed byte of the partition it holds: measured, the analyzer
# peaked at 1,697 MB opening a partition of 270 MB (4.5 million FE1 messages; docs/benchmarks.md part 14), 5.9
# times it beside what it held before; the collector's two passes take fewer
WORKING_COPIES = 8
ETA = 1e-9  # the chance that some partition outgrows its bound
ARROW_OVERHEAD = 1 << 16  # bytes an Arrow file of one fixed-size column takes beyond its values (about 1 KB measured)
MANIFEST_BYTES_MAX = 4 << 20  # a manifest of MAX_PARTITIONS entries takes about 1.5 MB


class PartitionError(ValueError):
    """A manifest or partition that is not what the batch promised (the analyzer answers 400)."""


def largest_partition(messages: int, partitions: int, eta: float = ETA) -> float:
    """A bound on the largest of ``partitions`` Binomial(messages, 1/partitions) sizes, exceeded with probability at
    most ``eta``: mu + t, mu = m / P, t = (L + sqrt(L^2 + 8 mu L)) / 2, L = ln(P / eta). Chernoff's
    Pr[X >= mu + t] <= exp(-t^2 / (2 mu + t)) holds for every t > 0 (the form sqrt(3 mu L), used before, only for
    t <= mu: small partitions outgrew it), and t solves t^2 = L (2 mu + t); a union bound over the P partitions."""
    mu, log_term = messages / partitions, math.log(partitions / eta)
    return min(float(messages), mu + (log_term + math.sqrt(log_term * log_term + 8 * mu * log_term)) / 2)


def working_bytes(messages: int, message_bytes: int) -> int:
    """The memory a process takes to hold and open ``messages`` sealed messages at once: :data:`WORKING_COPIES`
    times their bytes (what a memory budget is checked against)."""
    return messages * message_bytes * WORKING_COPIES


def partition_count(messages: int, message_bytes: int, budget_bytes: int) -> int:
    """The fewest partitions P whose largest, times :data:`WORKING_COPIES` copies, fits ``budget_bytes`` (with
    probability 1 - :data:`ETA`); a ValueError if even single messages would not."""
    if messages < 1 or message_bytes < 1 or budget_bytes < 1:
        raise ValueError("messages, message_bytes and budget_bytes must be positive")
    per = working_bytes(1, message_bytes)
    partitions = max(1, math.ceil(messages * per / budget_bytes))
    while largest_partition(messages, partitions) * per > budget_bytes:
        if partitions >= min(messages, MAX_PARTITIONS):
            raise ValueError(f"a budget of {budget_bytes:,} bytes fits fewer than the partitions' messages; give "
                             f"at least {math.ceil(largest_partition(messages, min(messages, MAX_PARTITIONS)) * per):,}")
        partitions = min(messages, MAX_PARTITIONS, math.ceil(partitions * 1.1) + 1)
    return partitions


def _arrow_file(path: Path, sealed: np.ndarray, metadata: dict[str, str]) -> str:
    """Write the rows of ``sealed`` as an Arrow IPC file of one column ``ciphertext``; its SHA-256 (hex)."""
    import pyarrow as pa

    column = pa.FixedSizeBinaryArray.from_buffers(pa.binary(sealed.shape[1]), len(sealed),
                                                  [None, pa.py_buffer(np.ascontiguousarray(sealed))])
    table = pa.table({"ciphertext": column}).replace_schema_metadata(metadata)
    with pa.OSFile(str(path), "wb") as sink, pa.ipc.new_file(sink, table.schema) as writer:
        writer.write_table(table)
    return _sha256(path)


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 22), b""):
            digest.update(block)
    return digest.hexdigest()


def write_partitions(chunks: Iterable[np.ndarray], message_bytes: int, directory: Path, partitions: int,
                     task_id: str, batch_id: str, reports: int, rng: np.random.Generator | None = None) -> dict:
    """The batch whose sealed messages ``chunks`` yields (uint8 arrays of rows of ``message_bytes``), written to
    ``directory`` as ``partitions`` Arrow files in a uniform random order (module docstring), and its manifest
    (also written, last, so a manifest names only complete files). ``rng``: the secure generator unless a test
    passes its own."""
    rng = secure_rng() if rng is None else rng
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    spills = [directory / f"spill-{j:05d}" for j in range(partitions)]
    total = 0
    files = [open(path, "wb") for path in spills]
    try:
        for chunk in chunks:  # pass 1: label, append
            chunk = np.asarray(chunk, dtype=np.uint8).reshape(-1, message_bytes)
            labels = rng.integers(0, partitions, size=len(chunk))
            order = np.argsort(labels, kind="stable")
            bounds = np.cumsum(np.bincount(labels, minlength=partitions))
            for j, rows in enumerate(np.split(chunk[order], bounds[:-1])):
                if len(rows):
                    files[j].write(rows.tobytes())
            total += len(chunk)
    finally:
        for f in files:
            f.close()
    entries = []
    for j, spill in enumerate(spills):  # pass 2: permute each partition whole
        sealed = np.fromfile(spill, dtype=np.uint8).reshape(-1, message_bytes)
        sealed = sealed[rng.permutation(len(sealed))]
        name = f"partition-{j:05d}.arrow"
        digest = _arrow_file(directory / name, sealed, {"task_id": task_id, "batch_id": batch_id,
                                                        "partition": str(j), "partitions": str(partitions)})
        entries.append({"file": name, "messages": len(sealed), "sha256": digest})
        del sealed
        spill.unlink()
        _sync(directory / name)
    manifest = {"version": VERSION, "task_id": task_id, "batch_id": batch_id, "reports": reports,
                "message_bytes": message_bytes, "messages": total, "partitions": entries}
    written = directory / f".{MANIFEST}.new"  # whole or not at all: a crash leaves no torn manifest
    written.write_text(json.dumps(manifest, indent=1))
    _sync(written)
    os.replace(written, directory / MANIFEST)
    _sync(directory)
    return manifest


def _sync(path: Path) -> None:
    """fsync a file or a directory: the partitions are on disk before the manifest that names them, and the
    manifest before the analyzer is told."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _read_bounded(path: Path, limit: int, what: str) -> bytes:
    """The bytes of the regular file ``path``, refused (a :class:`PartitionError`) before they are read if it is
    larger than ``limit``, or is not a regular file: a symbolic link (not followed), a FIFO (not waited on), a
    device."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError as err:
        raise PartitionError(f"{what} must be a readable file ({type(err).__name__})") from None
    with os.fdopen(fd, "rb") as f:
        info = os.fstat(f.fileno())
        if not stat.S_ISREG(info.st_mode) or info.st_size > limit:
            raise PartitionError(f"{what} must be a regular file of at most {limit:,} bytes")
        raw = f.read(limit + 1)
    if len(raw) > limit:  # it grew after fstat
        raise PartitionError(f"{what} must be a regular file of at most {limit:,} bytes")
    return raw


def read_manifest(directory: Path, task_id: str, batch_id: str, message_bytes: int) -> dict:
    """The manifest in ``directory``, checked: this task and batch, this message size, a report count >= 1, each
    partition a file named as the writer names them, counts that add up. A :class:`PartitionError` names what is
    wrong."""
    raw = _read_bounded(Path(directory) / MANIFEST, MANIFEST_BYTES_MAX, f"the batch's {MANIFEST}")
    try:
        manifest = json.loads(raw)
    except ValueError as err:
        raise PartitionError(f"the batch's {MANIFEST} must be readable JSON ({type(err).__name__})") from None
    expected = {"version", "task_id", "batch_id", "reports", "message_bytes", "messages", "partitions"}
    if not isinstance(manifest, dict) or set(manifest) != expected or manifest["version"] != VERSION:
        raise PartitionError(f"the manifest must be version {VERSION} with the fields {sorted(expected)}")
    if manifest["task_id"] != task_id or manifest["batch_id"] != batch_id:
        raise PartitionError("the manifest's task_id and batch_id must match the batch's address")
    if manifest["message_bytes"] != message_bytes:
        raise PartitionError(f"the manifest's messages must be {message_bytes} bytes (the task's sealed size), got "
                             f"{manifest['message_bytes']!r}"[:200])
    if type(manifest["reports"]) is not int or manifest["reports"] < 1:
        raise PartitionError("the manifest's reports must be a count >= 1")
    entries = manifest["partitions"]
    if not isinstance(entries, list) or not 1 <= len(entries) <= MAX_PARTITIONS:
        raise PartitionError(f"the manifest must list 1 to {MAX_PARTITIONS} partitions")
    names = set()
    for j, e in enumerate(entries):
        if (not isinstance(e, dict) or set(e) != {"file", "messages", "sha256"} or not isinstance(e["file"], str)
                or not PARTITION_FILE.fullmatch(e["file"]) or e["file"] in names or type(e["messages"]) is not int
                or e["messages"] < 0 or not isinstance(e["sha256"], str) or not re.fullmatch(r"[0-9a-f]{64}",
                                                                                              e["sha256"])):
            raise PartitionError(f"partitions[{j}] must be a file partition-NNNNN.arrow (each once), its messages "
                                 "and its SHA-256 (hex)")
        names.add(e["file"])
    if sum(e["messages"] for e in entries) != manifest["messages"]:
        raise PartitionError("the partitions' messages must add up to the manifest's")
    return manifest


def read_partition(directory: Path, manifest: dict, index: int) -> np.ndarray:
    """Partition ``index``'s sealed messages (rows of bytes), checked against the manifest: its SHA-256, its schema,
    its metadata (task, batch, partition) and its count. A :class:`PartitionError` names what is wrong."""
    import pyarrow as pa

    entry, size = manifest["partitions"][index], manifest["message_bytes"]
    raw = _read_bounded(Path(directory) / entry["file"], entry["messages"] * size + ARROW_OVERHEAD, entry["file"])
    if hashlib.sha256(raw).hexdigest() != entry["sha256"]:
        raise PartitionError(f"{entry['file']} must have the SHA-256 its manifest gives")
    try:
        table = pa.ipc.open_file(pa.py_buffer(raw)).read_all()
    except (pa.ArrowInvalid, OSError):
        raise PartitionError(f"{entry['file']} must be an Arrow IPC file") from None
    meta = {k.decode(errors="replace"): v.decode(errors="replace") for k, v in (table.schema.metadata or {}).items()}
    if table.column_names != ["ciphertext"] or table.schema.field("ciphertext").type != pa.binary(size):
        raise PartitionError(f"{entry['file']} must hold one column 'ciphertext' of {size}-byte values")
    if (meta.get("task_id"), meta.get("batch_id"), meta.get("partition"), meta.get("partitions")) != (
            manifest["task_id"], manifest["batch_id"], str(index), str(len(manifest["partitions"]))) \
            or table.num_rows != entry["messages"]:
        raise PartitionError(f"{entry['file']} must be partition {index} of the {len(manifest['partitions'])} of "
                             f"this batch, with {entry['messages']} messages")
    column = table.column("ciphertext").combine_chunks()
    return np.frombuffer(column.buffers()[1], dtype=np.uint8, count=len(column) * size,
                         offset=column.offset * size).reshape(-1, size)


DIGEST_RECORD = np.dtype([("high", "<u8"), ("low", "<u8"), ("partition", "<u4"), ("row", "<u4")])


DIGEST_BLOCK = 1 << 20  # rows hashed at a time: the digests held (about 100 MB) do not grow with the partition


def duplicate_rows(directory: Path, manifest: dict, digests, buckets: int | None = None,
                   block: int = DIGEST_BLOCK) -> dict[int, np.ndarray]:
    """For each partition, the rows whose encapsulation an earlier row of the batch (in partition, then row
    order) already carried: what the analyzer drops and counts as duplicates, found in bounded memory.

    ``digests(sealed)`` gives each row's encapsulation digest (32 bytes), called on ``block`` rows at a time.
    Their first 16 bytes, with the row's place, go to one of ``buckets`` spill files (default: one per partition)
    by their value; each bucket is then sorted alone. Two distinct encapsulations share 128 bits with probability
    m^2 / 2^129."""
    directory = Path(directory)
    entries = manifest["partitions"]
    buckets = buckets or len(entries)
    with tempfile.TemporaryDirectory(prefix=".digests-", dir=directory) as scratch:  # this call's own
        return _duplicate_rows(directory, manifest, digests, [Path(scratch) / f"{b:05d}" for b in range(buckets)],
                               block)


def _duplicate_rows(directory: Path, manifest: dict, digests, paths: list[Path], block: int) -> dict[int, np.ndarray]:
    entries, buckets = manifest["partitions"], len(paths)
    files = [open(path, "wb") for path in paths]
    try:
        for j in range(len(entries)):
            sealed = read_partition(directory, manifest, j)
            for lo in range(0, len(sealed), block):
                found = digests(sealed[lo:lo + block])
                pairs = np.frombuffer(b"".join(d[:16] for d in found), dtype="<u8").reshape(-1, 2)
                records = np.empty(len(found), dtype=DIGEST_RECORD)
                records["high"], records["low"] = pairs[:, 0], pairs[:, 1]
                records["partition"], records["row"] = j, lo + np.arange(len(found))
                which = records["high"] % np.uint64(buckets)
                for b in np.unique(which):
                    files[b].write(records[which == b].tobytes())
    finally:
        for f in files:
            f.close()
    dropped: dict[int, list[int]] = {}
    for path in paths:
        records = np.fromfile(path, dtype=DIGEST_RECORD)
        path.unlink()
        order = np.lexsort((records["row"], records["partition"], records["low"], records["high"]))
        records = records[order]
        repeat = np.zeros(len(records), dtype=bool)
        repeat[1:] = (records["high"][1:] == records["high"][:-1]) & (records["low"][1:] == records["low"][:-1])
        for r in records[repeat]:
            dropped.setdefault(int(r["partition"]), []).append(int(r["row"]))
    return {j: np.array(sorted(rows), dtype=np.int64) for j, rows in dropped.items()}
