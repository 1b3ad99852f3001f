"""Order statistics of a large array without partitioning all of it: a full domain's top items and the
percentiles of its errors, exactly the values numpy's ``partition`` and ``percentile`` give.

numpy's ``percentile`` partitions the whole array (0.45 s for three percentiles of 2^24 doubles here,
``partition`` for the 10th largest 0.1 s). :func:`sorted_slice` brackets the wanted rank by a strided sample of
the values, counts the values below the bracket and partitions only those inside it (a few reads of the array);
the bracket is checked against the counts, and where it misses (values ordered so that the sample misleads) the
whole array is partitioned as before. Where the sample holds the rank's value twice or more, the values below it and
equal to it are counted first: ranks among many equal values (a full domain's errors, a few thousand distinct values
over 2^24 items) are settled by those two reads. :func:`kth_largest` needs no sample (its docstring). The values must not
be NaN (the callers' arrays are finite).
"""

from __future__ import annotations

import numpy as np

SMALL = 1 << 20  # at most this many values: numpy's partition outright
SAMPLE = 1 << 14  # values in the strided sample
BLOCK = 1 << 12  # values a block, for kth_largest
SLACK = 256  # sample positions each side of the rank's estimate: the bracket holds about 2 SLACK / SAMPLE of the values


def sorted_slice(values: np.ndarray, start: int, count: int = 1, overwrite: bool = False) -> np.ndarray:
    """sorted(values)[start:start + count] for a 1-d array without NaN, exactly. ``overwrite``: the fallback may
    reorder ``values`` in place rather than partition a copy (a scratch array: no second domain-sized array)."""
    n = values.size
    if not (0 <= start and start + count <= n):
        raise ValueError(f"ranks {start}..{start + count - 1} outside an array of {n} values")
    ranks = list(range(start, start + count))
    if n > SMALL:
        sample = np.sort(values[::n // SAMPLE])
        at = start * sample.size // n
        tied = sample[at]
        if at + 1 < sample.size and sample[at + 1] == tied:  # the rank's sampled value is held by about n / SAMPLE
            # values or more: when the ranks fall among them, counting the values below it and equal to it says so
            # in two reads, with no bracket to copy out (a full domain's errors hold a few thousand distinct values)
            below = int(np.count_nonzero(values < tied))
            if below <= start and start + count <= below + int(np.count_nonzero(values == tied)):
                return np.full(count, tied)
        low, high = sample[max(0, at - SLACK)], sample[min(sample.size - 1, at + SLACK)]
        at_least = values >= low  # the values below low are the rest (no NaN): one comparison less a rank
        below = n - int(np.count_nonzero(at_least))
        at_least &= values <= high
        inside = values[at_least]
        if below <= start and start + count <= below + inside.size:
            offsets = [r - below for r in ranks]
            return np.partition(inside, offsets)[offsets]
    if overwrite:
        values.partition(ranks)
        return values[ranks]
    return np.partition(values, ranks)[ranks]


def kth_largest(values: np.ndarray, k: int):
    """The k-th largest value (1 <= k <= size) of a 1-d array without NaN. Of a large array, only the values at
    or above the k-th largest of its blocks' maxima, m, are partitioned: the k blocks of the largest maxima each
    hold a value that large, so the k-th largest value is among them (two reads of the array, no fallback). When
    fewer than k values exceed m, it is m itself: ties at m (a full domain's untouched items, all estimated
    alike at a few users) are never partitioned (2^24 tied values took 1.1 s)."""
    n = values.size
    if n > SMALL and k <= n // BLOCK:
        maxima = values[:n // BLOCK * BLOCK].reshape(-1, BLOCK).max(axis=1)
        bound = np.partition(maxima, maxima.size - k)[maxima.size - k]
        values = values[values > bound]
        if values.size < k:  # at least k values are >= bound, fewer than k above it
            return bound
    return np.partition(values, values.size - k)[values.size - k]


def percentiles(values: np.ndarray, qs, overwrite: bool = False) -> list[float]:
    """``numpy.percentile(values, qs)`` with its default (linear) method, to the last bit, for a 1-d array without
    NaN: the value at the virtual index (n - 1) q / 100 interpolated between its two neighbours as numpy's ``_lerp``
    does (from the right neighbour when the weight is at least 1/2). ``overwrite`` as :func:`sorted_slice`'s."""
    out = []
    for q in qs:
        virtual = (values.size - 1) * (float(q) / 100)
        below = int(np.floor(virtual))
        pair = sorted_slice(values, below, 2 if below + 1 < values.size else 1, overwrite).tolist()
        a, b = pair[0], pair[-1]
        t = virtual - below
        out.append(b - (b - a) * (1 - t) if t >= 0.5 else a + (b - a) * t)
    return out
