import itertools
import math
import pickle

import numpy as np
import pytest
from scipy import stats

from privagg.core.messages import Column, MessageBatch, MessageLayout, shuffle
from privagg.errors import ParameterError

K = 4.0  # sigma tolerance of the statistical checks


def records_batch(n):
    """A row-major batch (as the simulator holds a population) whose rows are recognisable: (i, 7i, i mod 5)."""
    layout = MessageLayout((Column("u", 0, 2**20), Column("v", 0, 2**23), Column("w", 0, 5)))
    records = np.empty(n, dtype=layout.record_dtype)
    records["u"], records["v"], records["w"] = np.arange(n), 7 * np.arange(n), np.arange(n) % 5
    return MessageBatch.from_records(records)


@pytest.mark.parametrize("make", [records_batch,
                                  lambda n: MessageBatch({"u": np.arange(n), "v": 7 * np.arange(n),
                                                          "w": np.arange(n) % 5})])
@pytest.mark.parametrize("rng", [1, None])  # seeded, and the secure default
def test_shuffle_permutes_whole_messages_in_place(make, rng):
    batch = make(1000)
    out = shuffle(batch, rng)
    assert out is batch  # the shuffler owns what it receives
    assert sorted(out["u"].tolist()) == list(range(1000)) and not np.array_equal(out["u"], np.arange(1000))
    assert np.array_equal(out["v"], 7 * out["u"]) and np.array_equal(out["w"], out["u"] % 5)  # rows move whole


def test_shuffle_of_rows_and_of_columns_is_the_generators_permutation():
    # rng.shuffle on the records makes the draws of rng.permutation: one generator state, one permutation
    order = np.random.default_rng(5).permutation(1000)
    assert np.array_equal(shuffle(records_batch(1000), np.random.default_rng(5))["u"], order)
    columns = MessageBatch({"u": np.arange(1000), "v": 7 * np.arange(1000)})
    assert np.array_equal(shuffle(columns, np.random.default_rng(5))["u"], order)


def chacha20(key):
    """The secure generator's bit generator (ChaCha20), with a fixed key so that the test is reproducible."""
    from randomgen import ChaCha

    return np.random.Generator(ChaCha(key=key, counter=0, rounds=20))


@pytest.mark.parametrize("rng", [np.random.default_rng(11), chacha20(2**200 + 11)], ids=["pcg64", "chacha20"])
def test_shuffle_positions_are_uniform(rng):
    """Each message lands in each position with probability 1/n.

    C[i, j] counts the rounds that put message i at position j. For uniform
    permutations vec(C) has mean R/n and covariance R/(n - 1) (H x H), H the
    centering projector (rank n - 1), so Pearson's X = (n/R) sum (C - R/n)^2
    is (n / (n - 1)) chi2 with (n - 1)^2 degrees of freedom: mean n (n - 1),
    sd sqrt(2) n. The check is two-sided at K sigma.
    """
    n, rounds = 8, 20_000
    counts = np.zeros((n, n), dtype=np.int64)
    for _ in range(rounds):
        batch = records_batch(n)
        counts[shuffle(batch, rng)["u"], np.arange(n)] += 1
    x = n / rounds * ((counts - rounds / n) ** 2).sum()
    assert abs(x - n * (n - 1)) <= K * math.sqrt(2) * n


def test_shuffle_is_uniform_over_permutations():
    rng = np.random.default_rng(11)
    seen = {p: 0 for p in itertools.permutations(range(4))}
    for _ in range(4800):
        seen[tuple(shuffle(records_batch(4), rng)["u"].tolist())] += 1
    assert stats.chisquare(list(seen.values())).pvalue > 1e-3


def test_record_batches_slice_and_pickle_as_views_of_their_rows():
    batch = records_batch(10)
    part = batch.take(slice(2, 5))
    assert part.records is not None and part["v"].tolist() == [14, 21, 28]
    assert [len(s) for s in batch.slices(4)] == [4, 4, 2] and list(batch.slices(4))[2]["u"].tolist() == [8, 9]
    back = pickle.loads(pickle.dumps(batch))  # e.g. shipped to a Dask worker
    shuffle(back, 3)
    assert np.array_equal(back["v"], 7 * back["u"])  # columns are still views of the shuffled rows


LAYOUT = MessageLayout((Column("u", 1, 7), Column("w", 0, 5)))


def test_batches_need_aligned_columns():
    with pytest.raises(ParameterError, match="arrays of one length"):
        MessageBatch({"a": np.arange(3), "b": np.arange(4)})
    assert len(MessageBatch({})) == 0


def test_layout_bits_per_message():
    assert [c.bits for c in LAYOUT.columns] == [3, 3]  # ceil(log2 6), ceil(log2 5)
    assert LAYOUT.bits_per_message == 6
    assert Column("one", 0, 1).bits == 1 and Column("b", 0, 2**40).bits == 40 and Column("c", 0, 2**40 + 1).bits == 41


@pytest.mark.parametrize("low,high,dtype", [
    (0, 256, "uint8"), (0, 257, "uint16"), (1, 2**16, "uint16"), (1, 2**16 + 1, "uint32"),
    (1, 2**32, "uint32"), (0, 2**32 + 1, "uint64"), (0, 2**64, "uint64"),
    (-1, 127, "int8"), (-128, 128, "int8"), (-128, 129, "int16"), (-(2**31), 2**31, "int32"),
    (-(2**31), 2**31 + 1, "int64"), (-(2**63), 2**63, "int64"),
])
def test_column_dtype_is_the_smallest_that_holds_its_range(low, high, dtype):
    assert Column("x", low, high).dtype == np.dtype(dtype)


def test_columns_outside_64_bits_or_empty_are_refused():
    with pytest.raises(ValueError, match="does not fit a 64-bit integer"):
        Column("x", -1, 2**63 + 1).dtype
    with pytest.raises(ValueError, match="low must be below high"):
        Column("x", 5, 5)


def test_record_dtype_packs_the_columns():
    assert LAYOUT.record_dtype == np.dtype([("u", "u1"), ("w", "u1")]) and LAYOUT.record_dtype.itemsize == 2
    batch = LAYOUT.batch({"u": np.array([1, 6]), "w": np.array([0, 4]), "extra": np.zeros(2)})
    assert set(batch.columns) == {"u", "w"} and batch["u"].dtype == batch["w"].dtype == np.uint8


@pytest.mark.parametrize("dtype", ["int8", "uint8", "int32", "uint64", "int64"])
def test_validate_accepts_any_integer_dtype_and_returns_the_declared_one(dtype):
    batch = MessageBatch({"u": np.array([1, 6, 7], dtype=dtype), "w": np.array([0, 4, 4], dtype=dtype)})
    clean, dropped = LAYOUT.validate(batch)
    assert dropped == 1 and clean["u"].tolist() == [1, 6] and clean["w"].tolist() == [0, 4]
    assert clean["u"].dtype == clean["w"].dtype == np.uint8


def test_validate_keeps_well_formed_rows_in_the_declared_dtypes():
    batch = MessageBatch({"u": np.array([1, 6], dtype=np.int32), "w": np.array([0.0, 4.0]), "extra": np.arange(2)})
    clean, dropped = LAYOUT.validate(batch)
    assert dropped == 0 and set(clean.columns) == {"u", "w"}  # extra columns are not the layout's
    assert clean["u"].dtype == clean["w"].dtype == np.uint8
    assert clean["u"].tolist() == [1, 6] and clean["w"].tolist() == [0, 4]
    compact = LAYOUT.batch(clean.columns)
    again, _ = LAYOUT.validate(compact)
    assert again["u"] is compact["u"]  # already declared and well formed: no copy


@pytest.mark.parametrize("u,w,kept", [
    ([1, 2, 7], [0, 9, 1], [0]),  # u = 7 and w = 9: out of range
    ([0, 2, 3], [0, -1, 4], [2]),  # below range
    ([1.0, 2.5, 3.0], [1, 1, 1], [0, 2]),  # a float with a fraction
    ([1.0, float("nan"), float("inf")], [1, 1, 1], [0]),  # NaN and infinity
    ([1.0, 2.0, -float("inf")], [1.5, 1.0, 1.0], [1]),
])
def test_validate_drops_and_counts_malformed_rows(u, w, kept):
    batch = MessageBatch({"u": np.array(u), "w": np.array(w)})
    clean, dropped = LAYOUT.validate(batch)
    assert dropped == 3 - len(kept)
    assert clean["u"].tolist() == [int(u[i]) for i in kept] and clean["w"].tolist() == [int(w[i]) for i in kept]
    assert clean["u"].dtype == np.uint8


@pytest.mark.parametrize("columns", [
    {"u": np.array([1, 2])},  # w missing
    {"v": np.array([1, 2]), "w": np.array([0, 0])},  # u missing
    {"u": np.array(["1", "2"]), "w": np.array([0, 0])},  # not numbers
    {"u": np.array([True, True]), "w": np.array([0, 0])},  # booleans are not integers
    {"u": np.array([1, 2], dtype=object), "w": np.array([0, 0])},
])
def test_validate_drops_whole_batches_of_the_wrong_shape(columns):
    clean, dropped = LAYOUT.validate(MessageBatch(columns))
    assert dropped == 2 and len(clean) == 0 and set(clean.columns) == {"u", "w"}


def test_validate_of_an_empty_batch():
    clean, dropped = LAYOUT.validate(LAYOUT.empty())
    assert dropped == 0 and len(clean) == 0


def test_arrow_and_parquet_round_trip_in_the_declared_dtypes(tmp_path):
    batch = MessageBatch({"u": np.array([1, 6, 3]), "w": np.array([4, 0, 2])})
    table = LAYOUT.to_arrow(batch)
    assert table.column_names == ["u", "w"] and [str(t) for t in table.schema.types] == ["uint8", "uint8"]
    back = LAYOUT.from_arrow(table)
    assert back["u"].tolist() == [1, 6, 3] and back["w"].tolist() == [4, 0, 2]
    rows = records_batch(6)
    LAYOUT.write_parquet(MessageBatch({"u": rows["u"] + 1, "w": rows["w"]}), tmp_path / "m.parquet")
    read = LAYOUT.read_parquet(tmp_path / "m.parquet")
    assert read["u"].dtype == np.uint8
    clean, dropped = LAYOUT.validate(read)
    assert dropped == 0 and clean["u"].tolist() == [1, 2, 3, 4, 5, 6] and clean["w"].tolist() == [0, 1, 2, 3, 4, 0]
    strided = records_batch(6).take(slice(1, 4))  # fields of a row-major batch are strided views
    to_w = MessageLayout((Column("w", 0, 5),)).to_arrow(strided)
    assert to_w.column("w").to_pylist() == [1, 2, 3]


def test_from_arrow_leaves_bad_columns_to_validate(tmp_path):
    import pyarrow as pa

    table = pa.table({"u": pa.array([1, None, 3]), "w": pa.array([0.0, 1.0, 2.5]), "x": pa.array(["a", "b", "c"])})
    clean, dropped = LAYOUT.validate(LAYOUT.from_arrow(table))
    assert dropped == 2 and clean["u"].tolist() == [1] and clean["w"].tolist() == [0]
