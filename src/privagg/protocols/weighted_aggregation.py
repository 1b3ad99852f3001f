"""Weighted aggregation of groups sampled at different rates (a derived design: docs/derivations.md, "Weighted
aggregation"), over the sampling + secret sharing protocols' counts (fair DP paper, arXiv:2104.05974).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:  # any protocol's parameters with an effective probability and n users
    from .sampling_sharing import SamplingParameters


@dataclass(frozen=True)
class WeightedEstimate:
    """Per-group DPDS counts combined: inverse-variance weighting and the unweighted baseline."""

    estimates: np.ndarray  # weighted, as counts over all n users
    unweighted: np.ndarray  # sum_g tau_g / p_g
    variance: np.ndarray  # per category, of the weighted estimate given the data (at the estimate + a holder's weight)
    # per category, of its error against the population's count: ``variance`` plus the groups' chance differences,
    # sum_g (n w_g - n_g)^2 psi (1 - psi) / n_g where every user's item is drawn from one distribution (the weighting's
    # assumption); what a report's stderr is
    error_variance: np.ndarray
    unweighted_variance: np.ndarray
    weights: np.ndarray  # w_g, summing to 1
    groups: list[SamplingParameters]
    # the unweighted estimate's standard error, each group's reported one (at its own estimate plus one counted
    # holder) added over the groups: no assumption on how the groups' data differ
    unweighted_stderr: np.ndarray
    # (weighted - unweighted) over its sd were the groups to share one distribution: far from 0, the release
    # contradicts the weighted estimate's assumption (docs/derivations.md, "Weighted aggregation")
    disagreement: np.ndarray


def combine_groups(groups: Sequence[SamplingParameters], sums: Sequence[np.ndarray]) -> WeightedEstimate:
    """Combine per-group sampled counts tau_g (group g: n_g users, rate p_g = the effective rate) into population
    counts.

    Unweighted: sum_g tau_g / p_g (unbiased for the population). Weighted:
    each group's frequency estimate tau_g / (p_g n_g) is weighted by its
    inverse variance, w_g proportional to p_g n_g / (1 - p_g), then scaled to
    n: unbiased when the groups share one distribution, and the least
    variance of any fixed convex combination (reference §2.7, our design). The variances are the theory's at
    psi = (the weighted estimate + one counted holder's largest weight) / n, never 0 where the estimate is.
    When the groups' frequencies differ, the weighted estimate is biased and the unweighted one is not:
    ``disagreement`` measures, per category, how far the release is from the shared distribution the weighting
    assumes, and ``unweighted_stderr`` assumes nothing of it.
    """
    n = sum(g.n_users for g in groups)
    p = np.array([g.effective_probability for g in groups])
    size = np.array([g.n_users for g in groups], dtype=np.float64)
    taus = np.stack([np.asarray(s, dtype=np.float64) for s in sums])
    unweighted = (taus / p[:, None]).sum(axis=0)
    precision = np.where(p < 1, p * size / np.maximum(1 - p, 1e-300), np.inf)
    weights = precision / precision.sum() if np.isfinite(precision).all() else np.isinf(precision) / np.isinf(
        precision).sum()
    frequencies = taus / (p * size)[:, None]
    weighted = n * (weights[:, None] * frequencies).sum(axis=0)
    # psi at the estimate plus the largest weight one counted holder has in it (docs/derivations.md, "Reported
    # standard errors"): the sd at the estimate alone is 0 where every group's count is
    step = n * np.max(np.where(weights > 0, weights / (p * size), 0.0))
    psi = np.clip((weighted + step) / n, 0, 1)
    variance = n**2 * (weights**2 * (1 - p) / (p * size))[:, None].sum(axis=0) * psi
    # the estimate targets n sum_g w_g c_g / n_g, the population's count is sum_g c_g: their gap sum_g (n w_g / n_g -
    # 1) c_g has mean 0 and this variance when each user's item is drawn from one distribution (c_g ~ Bin(n_g, psi))
    error_variance = variance + ((n * weights - size) ** 2 / size)[:, None].sum(axis=0) * psi * (1 - psi)
    unweighted_variance = (size * (1 - p) / p)[:, None].sum(axis=0) * psi
    unweighted_stderr = np.sqrt(sum(g.reported_standard_error(t / q) ** 2 for g, t, q in zip(groups, taus, p)))
    # weighted - unweighted = sum_g a_g tau_g, a_g = n w_g / (p_g n_g) - 1 / p_g: mean 0 when every group holds a
    # category at one frequency psi, variance sum_g a_g^2 n_g psi p_g (1 - p_g) (psi at the larger estimate plus a
    # holder's weight, as above: the sd errs up, never certain)
    a = n * weights / (p * size) - 1 / p
    shared = np.clip((np.maximum(weighted, unweighted) + step) / n, 0, 1)
    spread = np.sqrt((a**2 * size * p * (1 - p))[:, None].sum(axis=0) * shared)
    disagreement = np.divide(weighted - unweighted, spread, out=np.zeros_like(weighted), where=spread > 0)
    return WeightedEstimate(weighted, unweighted, variance, error_variance, unweighted_variance, weights, list(groups),
                            unweighted_stderr, disagreement)
