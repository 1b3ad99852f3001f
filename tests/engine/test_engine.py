"""Analyzers over partitioned message folders: in-process and on a Dask cluster give the same result."""

import json

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from privagg import engine
from privagg.errors import ParameterError
from privagg.protocols import registry
from privagg.simulate import simulate

N, DOMAIN, PARTITIONS = 8000, 5000, 5
CANDIDATES = [0, 1, 2, 3, 250, 4999]


@pytest.fixture(scope="module")
def fe1_run():
    params = registry.calibrate("fe1", epsilon=1.0, delta=1e-6, n_users=N, domain_size=DOMAIN)
    codes = np.minimum(np.random.default_rng(0).zipf(1.4, size=N) - 1, DOMAIN - 1)
    return params, simulate(params, codes, rng=12, keep_messages=True)


@pytest.fixture(scope="module")
def folder(fe1_run, tmp_path_factory):
    params, run = fe1_run
    directory = tmp_path_factory.mktemp("fe1-messages")
    paths = engine.write_messages(directory, params, run.messages, PARTITIONS, {"kind": "integer"})
    assert [p.name for p in paths] == [f"part-{i:05d}.parquet" for i in range(PARTITIONS)]
    return directory


def test_message_folder_layout(fe1_run, folder):
    params, run = fe1_run
    assert registry.load_parameters((folder / engine.PARAMS_FILE).read_text()) == params
    assert json.loads((folder / engine.ITEMS_FILE).read_text()) == {"kind": "integer",
                                                                  "params_digest": engine.params_digest(params)}
    partitions = engine.message_partitions(folder)
    assert [p.name for p in partitions] == [f"part-{i:05d}.parquet" for i in range(PARTITIONS)]
    sizes = [pq.read_metadata(p).num_rows for p in partitions]
    assert sum(sizes) == len(run.messages) and max(sizes) - min(sizes) <= 1
    schema = pq.read_schema(partitions[0])
    assert schema.names == list(params.layout.names)
    assert [str(t) for t in schema.types] == [str(c.dtype) for c in params.layout.columns] == ["uint16"] * 3


@pytest.mark.parametrize("queries", [CANDIDATES, None])
def test_local_engine_equals_the_simulation(fe1_run, folder, queries):
    params, run = fe1_run
    analyzer = registry.analyzer(params, queries)
    result, how = engine.analyze(analyzer, engine.message_partitions(folder), "local")
    direct = analyzer.finalize(analyzer.agg_update(analyzer.agg_init(), run.messages))
    assert np.array_equal(result.estimates, direct.estimates)
    assert (result.messages, result.malformed) == (len(run.messages), 0)
    assert how.name == "local" and how.partitions == PARTITIONS and how.workers is None
    assert set(how.seconds) == {"aggregate", "finalize"}
    if queries is None:
        assert np.array_equal(result.estimates, run.result.estimates)  # the simulation's own full-domain table


def test_local_and_dask_engines_agree_exactly(fe1_run, folder, tmp_path):
    params, run = fe1_run
    # one more partition with malformed rows: counted, not fatal, on both engines
    bad = tmp_path / "bad"
    bad.mkdir()
    good = engine.message_partitions(folder)
    broken = bad / "part-99999.parquet"
    pq.write_table(pa.table({"u": pa.array([1, 0, 2, None]), "v": pa.array([0, 1, 2, 3]),
                             "w": pa.array([0, 1, 10**9, 0])}), broken)
    partitions = good + [broken]
    # the full domain on a cluster of one worker process (the same tree of merges, one process's start-up less: a
    # worker is about 2.5 s of CPU, importing privagg and numba)
    for queries, workers in ((CANDIDATES, 2), (None, 1)):
        analyzer = registry.analyzer(params, queries)
        local, local_how = engine.analyze(analyzer, partitions, "local")
        dask, dask_how = engine.analyze(analyzer, partitions, "dask", workers=workers)
        assert np.array_equal(local.estimates, dask.estimates)
        assert (local.messages, local.malformed) == (dask.messages, dask.malformed) == (len(run.messages) + 1, 3)
        assert dask_how.name == "dask" and dask_how.workers == workers and dask_how.partitions == PARTITIONS + 1
        assert {"startup", "aggregate", "finalize"} <= set(dask_how.seconds)
        clean, _ = engine.analyze(analyzer, good, "local")
        assert clean.messages == len(run.messages)


def test_partitions_may_be_batches_in_memory(fe1_run):
    params, run = fe1_run
    analyzer = registry.analyzer(params, CANDIDATES)
    halves = [run.messages.take(slice(0, 1000)), run.messages.take(slice(1000, None))]
    result, _ = engine.analyze(analyzer, halves)
    whole, _ = engine.analyze(analyzer, [run.messages])
    assert np.array_equal(result.estimates, whole.estimates) and result.messages == len(run.messages)


def test_a_partition_with_malformed_rows_is_counted(fe1_run, folder, tmp_path):
    params, _ = fe1_run
    analyzer = registry.analyzer(params, CANDIDATES)
    first = engine.message_partitions(folder)[0]
    rows = pq.read_table(first)
    table = rows.set_column(2, "w", pa.array(np.where(np.arange(rows.num_rows) % 10 == 0, params.bins,
                                                      rows.column("w").to_numpy())))
    pq.write_table(table, tmp_path / "part-00000.parquet")
    pq.write_table(rows.drop(["v"]), tmp_path / "part-00001.parquet")  # a column missing: every row dropped
    result, _ = engine.analyze(analyzer, engine.message_partitions(tmp_path))
    tenth = -(-rows.num_rows // 10)
    assert result.malformed == tenth + rows.num_rows and result.messages == rows.num_rows - tenth


def test_bad_engine_input(fe1_run, folder, tmp_path):
    params, run = fe1_run
    analyzer = registry.analyzer(params, CANDIDATES)
    partitions = engine.message_partitions(folder)
    for kwargs, field in ((dict(engine="spark"), "engine"), (dict(workers=2), "scheduler/workers"),
                          (dict(scheduler="tcp://x:1"), "scheduler/workers")):
        with pytest.raises(ParameterError) as err:
            engine.analyze(analyzer, partitions, **kwargs)
        assert err.value.field == field
    with pytest.raises(ParameterError, match="messages must be at least one partition"):
        engine.analyze(analyzer, [])
    with pytest.raises(ParameterError, match="messages must be a folder holding"):
        engine.message_partitions(tmp_path)
    (tmp_path / "part-00000.parquet").write_bytes(b"not parquet")
    with pytest.raises(ParameterError, match="messages must be readable Parquet partitions"):
        engine.analyze(analyzer, engine.message_partitions(tmp_path))
    with pytest.raises(ParameterError, match="write-messages must be a folder without message partitions"):
        engine.write_messages(folder, params, run.messages, 2, {})
    with pytest.raises(ParameterError, match="partitions must be an integer in"):
        engine.write_messages(tmp_path / "new", params, run.messages, 0, {})
    with pytest.raises(ParameterError, match="workers must be an integer in"):
        engine.analyze(analyzer, partitions, "dask", workers=0)


@pytest.mark.parametrize("protocol", ["fe1", "sparse-vector-hashed"])
def test_every_preimage_walk_is_held_to_its_limit(protocol):
    """analyze's preimage limit (registry.PREIMAGES_MAX) was keyed on the name fe1: sparse-vector-hashed's analyzer,
    which walks the preimages of every cell the same way, ran past it. The limit now follows the analyzer's
    ``preimages`` (registry.full_domain_preimages), whichever protocol's."""
    from privagg.core.messages import MessageBatch

    params = registry.calibrate(protocol, epsilon=1.0, delta=1e-6, n_users=100_000, domain_size=2**24, bins=2)
    messages = 10**6  # each walks about q / b = 2^23 preimages: 8e12, past PREIMAGES_MAX
    assert registry.full_domain_preimages(params, messages) > registry.PREIMAGES_MAX
    batch = MessageBatch({name: np.zeros(messages, dtype=np.int64) for name in params.layout.names})
    with pytest.raises(ParameterError) as err:
        engine.check_analysis(registry.analyzer(params), [batch])
    assert err.value.field == "full-domain" and f"left out for {protocol}" in str(err.value)
    assert "hash preimages" in str(err.value)
