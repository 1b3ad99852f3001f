import itertools

import numpy as np
import pytest
from scipy import stats

from privagg.core.messages import Column, MessageBatch, MessageLayout, shuffle
from privagg.errors import ParameterError


def test_shuffle_is_a_permutation_of_whole_messages():
    batch = MessageBatch({"a": np.arange(1000), "b": np.arange(1000) * 7})
    out = shuffle(batch, rng=1)
    assert sorted(out["a"].tolist()) == list(range(1000))
    assert np.array_equal(out["b"], out["a"] * 7)  # columns move together
    assert not np.array_equal(out["a"], batch["a"])
    assert sorted(shuffle(batch)["a"].tolist()) == list(range(1000))  # secure default


def test_shuffle_is_uniform_over_permutations():
    batch = MessageBatch({"a": np.arange(4)})
    rng = np.random.default_rng(11)
    seen = {p: 0 for p in itertools.permutations(range(4))}
    for _ in range(4800):
        seen[tuple(shuffle(batch, rng)["a"].tolist())] += 1
    assert stats.chisquare(list(seen.values())).pvalue > 1e-3


LAYOUT = MessageLayout((Column("u", 1, 7), Column("w", 0, 5)))


def test_batches_need_aligned_columns():
    with pytest.raises(ParameterError, match="arrays of one length"):
        MessageBatch({"a": np.arange(3), "b": np.arange(4)})
    assert len(MessageBatch({})) == 0


def test_layout_bits_per_message():
    assert [c.bits for c in LAYOUT.columns] == [3, 3]  # ceil(log2 6), ceil(log2 5)
    assert LAYOUT.bits_per_message == 6
    assert Column("one", 0, 1).bits == 1 and Column("b", 0, 2**40).bits == 40 and Column("c", 0, 2**40 + 1).bits == 41


def test_validate_keeps_well_formed_rows_as_int64():
    batch = MessageBatch({"u": np.array([1, 6], dtype=np.int32), "w": np.array([0.0, 4.0]), "extra": np.arange(2)})
    clean, dropped = LAYOUT.validate(batch)
    assert dropped == 0 and set(clean.columns) == {"u", "w"}  # extra columns are not the layout's
    assert clean["u"].dtype == clean["w"].dtype == np.int64
    assert clean["u"].tolist() == [1, 6] and clean["w"].tolist() == [0, 4]


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
    assert clean["u"].dtype == np.int64


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


def test_arrow_and_parquet_round_trip(tmp_path):
    batch = MessageBatch({"u": np.array([1, 6, 3]), "w": np.array([4, 0, 2])})
    table = LAYOUT.to_arrow(batch)
    assert table.column_names == ["u", "w"] and str(table.schema.field("u").type) == "int64"
    back = LAYOUT.from_arrow(table)
    assert back["u"].tolist() == [1, 6, 3] and back["w"].tolist() == [4, 0, 2]
    LAYOUT.write_parquet(batch, tmp_path / "m.parquet")
    read = LAYOUT.read_parquet(tmp_path / "m.parquet")
    clean, dropped = LAYOUT.validate(read)
    assert dropped == 0 and clean["u"].tolist() == [1, 6, 3] and clean["w"].tolist() == [4, 0, 2]


def test_from_arrow_leaves_bad_columns_to_validate(tmp_path):
    import pyarrow as pa

    table = pa.table({"u": pa.array([1, None, 3]), "w": pa.array([0.0, 1.0, 2.5]), "x": pa.array(["a", "b", "c"])})
    clean, dropped = LAYOUT.validate(LAYOUT.from_arrow(table))
    assert dropped == 2 and clean["u"].tolist() == [1] and clean["w"].tolist() == [0]
