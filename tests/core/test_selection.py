"""core/selection.py: the order statistics numpy's partition and percentile give, without partitioning a large
array whole; arrays above selection.SMALL take the sampled path, and one built to mislead the sample the fallback."""

import numpy as np
import pytest

from privagg.core import selection


def arrays():
    rng = np.random.default_rng(0)
    large = selection.SMALL + 12_345
    step = large // selection.SAMPLE
    misleading = np.zeros(large)
    misleading[::step] = 1.0 + rng.random(misleading[::step].size)  # the strided sample sees only these
    tied_sample = np.zeros(large)
    tied_sample[::step] = 1.0  # the sample's values tied, the array's ranks not among them
    return {
        "tiny": rng.normal(size=3), "one": np.array([2.5]), "small": rng.normal(size=1001),
        "errors": np.abs(rng.normal(0, 10, large)), "ties": np.round(rng.exponential(3, large)),
        "sorted": np.sort(rng.random(large)), "reversed": np.arange(large, dtype=float)[::-1].copy(),
        "constant": np.full(large, 7.0), "misleading": misleading, "tied_sample": tied_sample,
    }


@pytest.mark.parametrize("name", list(arrays()))
def test_percentiles_are_numpys_to_the_last_bit(name):
    values = arrays()[name]
    for qs in ([50, 90, 99], [0, 100], [33.3, 66.7, 99.99]):
        assert selection.percentiles(values, qs) == np.percentile(values, qs).tolist()


@pytest.mark.parametrize("name", list(arrays()))
def test_kth_largest_is_partitions(name):
    values = arrays()[name]
    for k in {1, min(values.size, 10), min(values.size, 5000), values.size}:
        assert selection.kth_largest(values, k) == np.partition(values, values.size - k)[values.size - k]


def test_the_misleading_array_takes_the_fallback(monkeypatch):
    """The bracket check is what makes the sampled path exact: here the sample's bracket misses the median."""
    values = arrays()["misleading"]
    calls = []
    partition = np.partition
    monkeypatch.setattr(np, "partition", lambda a, kth: calls.append(a.size) or partition(a, kth))
    assert selection.sorted_slice(values, values.size // 2)[0] == 0.0
    assert calls == [values.size]  # the whole array, once


def test_ranks_among_tied_values_are_counted_not_partitioned(monkeypatch):
    """Where the sample holds the rank's value more than once and the ranks fall among its equals, two counts
    settle them: nothing is partitioned or copied out."""
    values = arrays()["ties"]
    calls = []
    partition = np.partition
    monkeypatch.setattr(np, "partition", lambda a, kth: calls.append(a.size) or partition(a, kth))
    assert selection.percentiles(values, [50, 90, 99]) == np.percentile(values, [50, 90, 99]).tolist()
    assert calls == []


def test_ranks_outside_the_array_are_refused():
    with pytest.raises(ValueError, match="outside an array of 3 values"):
        selection.sorted_slice(np.arange(3.0), 2, 2)


@pytest.mark.parametrize("name", ["errors", "misleading"])
def test_a_scratch_array_gives_the_same_percentiles_in_place(name):
    """overwrite=True (error_summary's scratch array) reorders the values instead of partitioning a copy."""
    values = arrays()[name].copy()
    expected = np.percentile(values, [50, 90, 99]).tolist()
    assert selection.percentiles(values, [50, 90, 99], overwrite=True) == expected
    assert np.array_equal(np.sort(values), np.sort(arrays()[name]))  # the same values, perhaps reordered


def test_ties_at_the_kth_largest_are_not_partitioned(monkeypatch):
    """A full domain at a few users: every item nobody holds has the same estimate. The k-th largest is then that
    tied value, found without partitioning the tied mass (2^24 of them took 1.1 s of grr's 1.6 s at n = 3)."""
    values = np.full(selection.SMALL * 4, -0.75)
    values[[5, 70_000, 3_000_000]] = [4.0, 2.0, 2.0]
    sizes = []
    partition = np.partition
    monkeypatch.setattr(np, "partition", lambda a, kth: sizes.append(a.size) or partition(a, kth))
    assert selection.kth_largest(values, 10) == -0.75
    assert selection.kth_largest(values, 2) == 2.0 and selection.kth_largest(values, 1) == 4.0
    assert max(sizes) < values.size // selection.BLOCK + 10  # the blocks' maxima and the few above them
