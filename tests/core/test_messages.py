import itertools

import numpy as np
import pytest
from scipy import stats

from privagg.core.messages import MessageBatch, shuffle
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


def test_malformed_batches():
    with pytest.raises(ParameterError, match="arrays of one length"):
        MessageBatch({"a": np.arange(3), "b": np.arange(4)})
    batch = MessageBatch({"u": np.array([1, 2]), "w": np.array([0, 9])})
    with pytest.raises(ParameterError, match=r"message field 'w' must be integers in \[0, 5\), got 9"):
        batch.check({"u": (1, 7), "w": (0, 5)})
    with pytest.raises(ParameterError, match="a batch with columns"):
        batch.check({"v": (0, 7)})
