"""What the fe-hh tests share: the standard error of a reported estimate, from the data's counts."""

import numpy as np


def path_sd(params, counts: np.ndarray, item: int, reporters=None) -> float:
    """The sd of the reported estimate of integer ``item`` (HeavyHitterParameters.path_standard_error), from
    ``counts``: the users holding each value, the values of [len(counts)] (every other value held by no one)."""
    counts = np.concatenate([counts, np.zeros(1 << params.width, dtype=counts.dtype)])
    holders, siblings = [], []
    for k in range(params.levels):
        span = 1 << (params.width - params.first_level - k)  # values under a prefix of level k
        start = item - item % span
        holders.append(counts[start:start + span].sum())
        siblings.append(counts[start ^ span:(start ^ span) + span].sum())
    return float(params.path_standard_error(holders, siblings, reporters))
