"""Where analyzers aggregate: in-process (default) or on a Dask cluster.

Any protocol's analyzer (:class:`privagg.protocols.roles.Analyzer`) runs
over partitioned messages the same way: each partition is read, validated
against the protocol's message layout and folded into a fresh aggregate
(``agg_update``); the partial aggregates are merged pairwise, as a tree
(``merge``); ``finalize`` makes the result. Aggregates are plain data, so
the Dask workers compute the partitions' aggregates and ship them back.

A message folder, as ``privagg estimate --write-messages DIR`` writes it:

* ``DIR/params.json``: the protocol's frozen parameters, the public
  item-hash key among them (the analyzer encodes candidates with it);
* ``DIR/items.json``: the kind of the items (integer or text), how the
  messages were made (``private``, ``randomness``) and how many users' they
  are (``users``: the analyzer debiases with them);
* ``DIR/part-NNNNN.parquet``: the shuffled messages, one Parquet file a
  partition, with the columns of the protocol's layout.

On an existing cluster (``scheduler``) the workers read the partitions by
path, so the folder must be on storage every worker can read. What an
analysis of a folder may state of its guarantee, it takes from items.json
(:func:`folder_privacy`, :func:`folder_reporters`).
"""

from __future__ import annotations

import json
import logging
import os
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ..core.messages import MessageBatch
from ..errors import ParameterError, check_instance, check_integer, check_sequence, checked_arguments
from ..protocols.parameters import with_reporters
from ..reports import Engine

PARAMS_FILE = "params.json"
ITEMS_FILE = "items.json"
PART_PATTERN = "part-*.parquet"
ENGINES = ("local", "dask")
SCHEDULER_TIMEOUT = "10s"
# Partitions one run writes, at most (more asked are capped, with a warning, as past the message count): each
# is a Parquet file written (and later read) on its own, about 0.9 ms apiece measured (100,000 took about 90 s,
# silent, past the simulation); 10,000 stay near 10 s and are more than any cluster here needs.
PARTITIONS_MAX = 10_000


def prepare_message_folder(directory: str | Path, partitions: int) -> Path:
    """Create ``directory`` for :func:`write_messages`, or refuse it, before any work is done."""
    check_integer("partitions", partitions, 1, 100_000)
    directory = Path(directory)
    try:
        directory.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise ParameterError("write-messages", "a writable folder", f"{directory} ({err.strerror})") from None
    if any(directory.glob(PART_PATTERN)):
        raise ParameterError("write-messages", "a folder without message partitions (it would mix two runs)",
                             str(directory))
    if not os.access(directory, os.W_OK):
        raise ParameterError("write-messages", "a writable folder", str(directory))
    return directory


def partition_count(partitions: int, messages: int) -> int:
    """The partitions ``messages`` are written in: ``partitions``, but no more than the messages (an empty
    partition would be a file to write and read for nothing) nor PARTITIONS_MAX, and at least one."""
    return max(1, min(int(partitions), int(messages), PARTITIONS_MAX))


def capped_partitions_warning(partitions: int, messages: int) -> str | None:
    """The line saying that --partitions was capped at the message count, or None when it was not."""
    written = partition_count(partitions, messages)
    if written >= partitions:
        return None
    if written == messages:
        return (f"--partitions {partitions} capped at {written}, the number of messages (a partition holds at "
                "least one)")
    return (f"--partitions {partitions} capped at {written}, the most one run writes (each is a file: about 1 ms "
            "apiece to write and to read)")


def write_messages(directory: str | Path, parameters, messages: MessageBatch, partitions: int,
                   items: dict[str, Any]) -> list[Path]:
    """Write ``messages`` as ``partitions`` Parquet files plus params.json and items.json.

    No more partitions are written than there are messages (:func:`partition_count`); the paths returned say
    how many were.
    """
    directory = prepare_message_folder(directory, partitions)
    partitions = partition_count(partitions, len(messages))
    try:
        layout = parameters.layout
        paths = []
        bounds = np.linspace(0, len(messages), partitions + 1).astype(np.int64)
        for i, (lo, hi) in enumerate(zip(bounds[:-1], bounds[1:])):
            path = directory / f"part-{i:05d}.parquet"
            layout.write_parquet(messages.take(slice(lo, hi)), path)
            paths.append(path)
        (directory / PARAMS_FILE).write_text(json.dumps(parameters.to_dict(), indent=2) + "\n")
        (directory / ITEMS_FILE).write_text(json.dumps({**items, "params_digest": params_digest(parameters)},
                                                       indent=2) + "\n")
    except OSError as err:
        raise ParameterError("write-messages", "a writable folder", f"{directory} ({err.strerror})") from None
    return paths


def params_digest(parameters) -> str:
    """A digest of the parameters a folder's messages were made with (SHA-256 of their canonical JSON), kept in its
    items.json: another run's params.json beside them (its item key, say) is then refused, not read into wrong
    estimates."""
    import hashlib

    return hashlib.sha256(json.dumps(parameters.to_dict(), sort_keys=True).encode()).hexdigest()


def read_items_info(directory: Path, domain_size: int) -> dict[str, Any]:
    """items.json of a message folder: the item kind, and how the messages were made.

    Without the file the items are taken as integers and the origin of the messages is unknown.
    """
    from ..io import read_json_text

    path = Path(directory) / ITEMS_FILE
    if not path.exists():
        return {"kind": "integer"}
    try:
        info = json.loads(read_json_text(path, "messages"))
    except ValueError as err:
        if isinstance(err, ParameterError):
            raise
        raise ParameterError("messages", f"a folder with a readable {ITEMS_FILE}", f"{path} ({err})") from None
    if not isinstance(info, dict):
        raise ParameterError("messages", f"a folder whose {ITEMS_FILE} is a JSON object", f"{path} "
                             f"(a JSON {type(info).__name__})")
    if info.get("domain_size") != domain_size:
        raise ParameterError(ITEMS_FILE, f"for the domain of the parameters ({domain_size})", info.get("domain_size"))
    users = info.get("users")
    if users is not None and (type(users) is not int or users < 1):
        raise ParameterError(f"{ITEMS_FILE} users", "the number of users whose messages the folder holds, an "
                             "integer >= 1", users)
    return info


def folder_privacy(parameters, items: dict[str, Any], received: int, lost: int = 0):
    """The guarantee of an analysis of a message folder, as far as the analyzer can know it
    (:func:`privagg.pipelines.analysis_privacy`), with ``lost`` of its ``received`` messages that did not enter
    the aggregate (malformed: :func:`privagg.pipelines.with_lost_messages`, as the analyzer service states them).

    The analyzer cannot see how the clients drew their randomness, nor how many users' messages the folder
    holds: it takes items.json's record of both (:func:`read_items_info`; ``users``, where recorded, and why a
    run was not private), and without a record of the randomness says the run is not known to be private.
    """
    from dataclasses import replace

    from ..pipelines import analysis_privacy, over_reporters, with_lost_messages, with_received_caveat

    reporters = items.get("users")
    if items.get("private") is True:
        privacy = analysis_privacy(parameters, received, f"as recorded in {ITEMS_FILE}: {items.get('randomness')}",
                                   reporters=reporters)
    elif items.get("private") is False and items.get("not_private") is not None:  # the run recorded why
        privacy = replace(parameters.privacy, randomness=str(items.get("randomness", "unknown")))
        privacy = over_reporters(privacy.as_unfounded(str(items["not_private"])), parameters, reporters)
        privacy = with_received_caveat(privacy, parameters, received, reporters)
    else:
        why = ("the messages came from a simulation with reproducible randomness" if items.get("private") is False
               else f"no {ITEMS_FILE} records how the messages were made, so the analyzer cannot tell whether the "
                    "clients used secure randomness")
        privacy = analysis_privacy(parameters, received, items.get("randomness", "unknown"), not_private=why,
                                   reporters=reporters)
    if not lost:
        return privacy
    return with_lost_messages(privacy, parameters, lost, parameters.n_users if reporters is None else reporters)


def folder_reporters(parameters, items: dict[str, Any]) -> tuple[int | None, list[str]]:
    """(the users whose messages a folder holds, as its items.json records them; the warnings of the report: how
    the run that wrote the folder made its values ready, as recorded (``input_warnings``: values clipped), and
    the following). A protocol whose users make the noise is debiased with them; where the folder does not say (a
    folder written before the record, or by hand), the calibrated n is used and the report says so: the
    estimates are biased if fewer users' messages are in it. A curator's noise does not depend on them (None, no
    warning)."""
    from ..protocols.registry import get

    recorded = [f"{w} (recorded in {ITEMS_FILE} by the run that wrote the messages)"
                for w in items.get("input_warnings", ()) if isinstance(w, str)]
    if not get(parameters.protocol).served:
        return None, recorded
    if items.get("users") is not None:
        return items["users"], recorded
    return None, [*recorded, f"{ITEMS_FILE} does not record how many users' messages the folder holds (\"users\"): "
                  f"the estimates are debiased for the calibrated n = {parameters.n_users}, and are biased if the "
                  "messages are fewer users' (a collection closed early)"]


def message_partitions(directory: str | Path) -> list[Path]:
    """The Parquet partitions of a message folder, in order."""
    directory = Path(directory)
    if not directory.is_dir():
        raise ParameterError("messages", f"a folder holding {PART_PATTERN} files (as --write-messages writes it)",
                             f"{directory} ({'a file' if directory.exists() else 'no such folder'})")
    try:
        paths = sorted(directory.glob(PART_PATTERN))
    except OSError as err:
        raise ParameterError("messages", "a readable folder", f"{directory} ({err.strerror or err})") from None
    if not paths:
        raise ParameterError("messages", f"a folder holding {PART_PATTERN} files", str(directory))
    odd = next((p for p in paths if not p.is_file()), None)
    if odd is not None:
        raise ParameterError("messages", f"a folder whose {PART_PATTERN} are Parquet files",
                             f"{odd} ({'a folder' if odd.is_dir() else 'not a regular file'})")
    return paths


def _load(partition, layout) -> MessageBatch:
    if isinstance(partition, MessageBatch):
        return partition
    try:
        return layout.read_parquet(partition)
    except (OSError, EOFError, ValueError) as err:  # pyarrow's errors derive from these
        detail = (str(getattr(err, "strerror", None) or err).strip() or type(err).__name__).splitlines()[0]
        raise ParameterError("messages", "readable Parquet partitions", f"{partition} ({detail[:200]})") from None


def aggregate_partition(analyzer, partition):
    """One partition's aggregate: read it, then ``agg_update`` a fresh aggregate (a Dask task)."""
    return analyzer.agg_update(analyzer.agg_init(), _load(partition, analyzer.layout))


def _merge_pair(analyzer, a, b):
    return analyzer.merge([a, b])


def _rows(partition) -> int | None:
    """The messages of a partition, from its Parquet footer (no data read); None where it cannot be read
    (reading it will say why)."""
    if isinstance(partition, MessageBatch):
        return len(partition)
    try:
        import pyarrow.parquet as pq

        return pq.ParquetFile(partition).metadata.num_rows
    except Exception:  # noqa: BLE001 - a broken file is reported by _load, with its name
        return None


def check_analysis(analyzer, partitions: Sequence[Path | MessageBatch]) -> None:
    """Refuse at once a full-domain analysis (``analyzer.queries`` None) that cannot finish: the same limits as
    ``privagg estimate`` (:mod:`privagg.protocols.registry`): OLH's n x B hash checks past ANALYZER_CHECKS_MAX,
    a preimage walk (FE1's, sparse-vector-hashed's) past PREIMAGES_MAX, the domain-sized arrays past
    FULL_DOMAIN_BYTES_MAX."""
    from ..protocols.registry import ANALYZER_CHECKS_MAX, FULL_DOMAIN_BYTES_MAX, PREIMAGES_MAX, full_domain_preimages

    parameters = getattr(analyzer, "parameters", None)
    if parameters is None or not hasattr(analyzer, "queries") or analyzer.queries is not None:
        return  # candidates only: small
    domain = getattr(parameters, "domain_size", None)
    if not domain:
        return
    remedy = "give --candidates without --full-domain"
    working = getattr(type(analyzer), "working_bytes", None)
    working = working(parameters, True) if working is not None else None
    memory = None if working is None else working + 8 * domain  # and finalize's float64 estimates
    if memory is not None and memory > FULL_DOMAIN_BYTES_MAX:
        raise ParameterError("full-domain", f"left out for {parameters.protocol} at B = {domain:,}: the analyzer's "
                             f"arrays over [B] would take {memory / 2**30:.1f} GiB, above "
                             f"{FULL_DOMAIN_BYTES_MAX / 2**30:g} GiB; {remedy}", True)
    checks = getattr(type(analyzer), "checks", None)
    walks = full_domain_preimages(parameters, 1) > 0
    if checks is None and not walks:
        return  # nothing else grows with the messages: no footer to open
    rows = [_rows(p) for p in partitions]
    if None in rows:
        return
    messages = sum(rows)
    if checks is not None and checks(messages, domain) > ANALYZER_CHECKS_MAX:
        raise ParameterError("full-domain", f"left out for {parameters.protocol} at B = {domain:,}: its analyzer "
                             f"would check each of the {messages:,} reports at every item ({checks(messages, domain):.3g}"
                             f" checks, above {ANALYZER_CHECKS_MAX:.0e}: more than a minute); {remedy}", True)
    if walks:
        walked = full_domain_preimages(parameters, messages)
        if walked > PREIMAGES_MAX:
            raise ParameterError("full-domain", f"left out for {parameters.protocol} at B = {domain:,} and "
                                 f"{messages:,} messages: its analyzer would walk {walked:.3g} hash preimages, above "
                                 f"{PREIMAGES_MAX:.0e} (more than a minute); {remedy}", True)


@checked_arguments
def analyze(analyzer, partitions: Sequence[Path | MessageBatch], engine: str = "local",
            scheduler: str | None = None, workers: int | None = None,
            reporters: int | None = None) -> tuple[Any, Engine]:
    """Run ``analyzer`` over ``partitions`` on ``engine``; returns (result, how it ran). A full-domain analysis
    that cannot finish is refused first (:func:`check_analysis`). ``reporters``: the users whose messages the
    partitions hold, where known (the analyzer debiases with them; default: the calibrated n)."""
    from ..protocols.roles import Analyzer

    check_instance("analyzer", analyzer, Analyzer, "a protocol's analyzer (privagg.analyzer(parameters))")
    partitions = list(check_sequence("partitions", partitions, "a list of Parquet partitions or MessageBatches"))
    if engine not in ENGINES:
        raise ParameterError("engine", f"one of {', '.join(ENGINES)}", engine)
    if not partitions:
        raise ParameterError("messages", "at least one partition", "none")
    check_analysis(analyzer, partitions)
    if engine == "local":
        if scheduler is not None or workers is not None:
            raise ParameterError("scheduler/workers", "given only with --engine dask", scheduler or workers)
        run = Engine("local", len(partitions))
        start = time.perf_counter()
        agg = analyzer.agg_init()
        for partition in partitions:
            agg = analyzer.agg_update(agg, _load(partition, analyzer.layout))
        run.seconds["aggregate"] = time.perf_counter() - start
    else:
        agg, run = _analyze_on_dask(analyzer, partitions, scheduler, workers)
    start = time.perf_counter()
    result = with_reporters(analyzer.finalize, agg, reporters=reporters)
    run.seconds["finalize"] = time.perf_counter() - start
    return result, run


def _analyze_on_dask(analyzer, partitions, scheduler: str | None, workers: int | None):
    try:
        from dask.distributed import Client, LocalCluster
    except ImportError:
        raise ParameterError("engine", "local, or dask with privagg[dask] installed", "dask") from None
    start = time.perf_counter()
    if scheduler is not None:
        if workers is not None:
            raise ParameterError("workers", "left out with --scheduler (the cluster has its own)", workers)
        try:
            cluster, client = None, Client(scheduler, timeout=SCHEDULER_TIMEOUT)
        except (OSError, TimeoutError) as err:
            raise ParameterError("scheduler", "the address of a reachable Dask scheduler", f"{scheduler} ({err})") \
                from None
    else:
        workers = check_integer("workers", 2 if workers is None else workers, 1, 1024)
        threads = max(1, (os.cpu_count() or 1) // workers)  # numba threads per worker: no oversubscription
        # a free port for the scheduler's HTTP server (8787 taken is a warning), and only errors logged: a
        # worker slow to stop ("Worker process still alive") is Dask's business, not the user's
        cluster = LocalCluster(n_workers=workers, threads_per_worker=1, processes=True, dashboard_address=":0",
                               silence_logs=logging.ERROR, env={"NUMBA_NUM_THREADS": str(threads)})
        client = Client(cluster)
    run = Engine("dask", len(partitions), workers, scheduler)
    try:
        run.workers = len(client.scheduler_info()["workers"])
        run.seconds["startup"] = time.perf_counter() - start
        start = time.perf_counter()
        shared = client.scatter(analyzer, broadcast=True)
        level = client.map(aggregate_partition, [shared] * len(partitions), list(partitions), pure=False)
        while len(level) > 1:  # tree reduction: merge pairs until one aggregate is left
            pairs = [client.submit(_merge_pair, shared, a, b, pure=False) for a, b in zip(level[::2], level[1::2])]
            level = pairs + ([level[-1]] if len(level) % 2 else [])
        agg = level[0].result()
        run.seconds["aggregate"] = time.perf_counter() - start
    finally:
        client.close()
        if cluster is not None:
            cluster.close()
    return agg, run
