"""The realised-error summary of a simulation (privagg.simulate.frequency.error_summary)."""

import numpy as np
import pytest

from privagg.simulate.frequency import error_summary


@pytest.mark.parametrize("size", [10, (1 << 16) * 3 + 5, (1 << 20) + 3])
def test_error_summary_over_the_true_counts_equals_it_in_a_fresh_array(size):
    """With overwrite, the errors are written over the int64 true counts a block at a time (no second
    domain-sized array): the same statistics, bit for bit, as numpy's over a fresh array, whatever the last
    block's length (sizes above 2^20 take the sampled percentiles)."""
    rng = np.random.default_rng(size)
    estimates = rng.normal(2.0, 30.0, size)
    truth = rng.poisson(3.0, size).astype(np.int64)
    errors = np.abs(estimates - truth)
    expected = (float(errors.max()), float(errors.mean()), *map(float, np.percentile(errors, [50, 90, 99])))
    fresh = error_summary(estimates, truth.copy(), "domain")
    assert (fresh.max_abs, fresh.mean_abs, fresh.p50, fresh.p90, fresh.p99) == expected
    assert error_summary(estimates, truth, "domain", overwrite=True) == fresh
