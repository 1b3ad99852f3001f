"""The servers of the sampling + secret sharing protocols (fair DP paper, arXiv:2104.05974): the server that
field-sums what it receives and estimates (Algorithm 2's server, S2 of Algorithm 3: :class:`SumServer`), the trusted
curators of DPCS (§2.1) and DPCS* (§2.2), and the distributional shortcut the simulator takes (simulation only).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from ..core.messages import SLICE_ROWS, MessageBatch
from ..core.randomness import RNGLike, resolve
from ..core.sharing import reconstruct, share
from ..errors import ParameterError
from .dpdg_parameters import DPDGParameters
from .results import FrequencyTable
from .sampling_sharing import BLOCK_SHARES, DPCSParameters, SharingParameters, bernoulli
from .tss_parameters import TSSParameters


def one_hot_rows(codes: np.ndarray, weights: np.ndarray, domain_size: int, dtype) -> np.ndarray:
    """Rows e_{code} * weight (users x N)."""
    rows = np.zeros((codes.size, domain_size), dtype=dtype)
    rows[np.arange(codes.size), codes] = weights
    return rows


@dataclass
class SumAggregate:
    """Field sums per category and the rows seen and dropped: plain data."""

    sums: np.ndarray
    messages: int = 0
    malformed: int = 0


class SumServer:
    """The aggregating server (DPDS, DPDG) or S2 (TSS): field-sums what it receives per category, then estimates.

    Rows are (item, share); sums are reconstructed exactly (the field exceeds
    the largest aggregate) and turned into counts: tau_j / p' for sampling,
    the signed sum / 2^k for DPDG.
    """

    def __init__(self, parameters: SharingParameters, queries=None) -> None:
        self.parameters, self.layout, self.field = parameters, parameters.layout, parameters.field
        self.queries = None if queries is None else np.unique(parameters.check_codes(queries))
        if self.queries is not None and self.queries.size == 0:
            raise ParameterError("candidates", "at least 1 item", "an empty list")

    def agg_init(self) -> SumAggregate:
        return SumAggregate(np.zeros(self.parameters.domain_size, dtype=np.uint64))

    def agg_update(self, agg: SumAggregate, messages: MessageBatch) -> SumAggregate:
        """Fold rows into ``agg``: uint64 additions in blocks short enough never to wrap, reduced mod p."""
        q = np.uint64(self.field.modulus)
        block = max(1, (2**64 - 1) // (self.field.modulus - 1) - 1)
        for part in messages.slices():
            clean, dropped = self.layout.validate(part)
            for lo in range(0, len(clean), block):
                np.add.at(agg.sums, clean["item"][lo:lo + block], clean["share"][lo:lo + block].astype(np.uint64))
                agg.sums %= q
            agg.messages += len(clean)
            agg.malformed += dropped
        return agg

    def merge(self, aggs: Sequence[SumAggregate]) -> SumAggregate:
        total = self.agg_init()
        for a in aggs:
            total.sums = self.field.add(total.sums, a.sums)
            total.messages += a.messages
            total.malformed += a.malformed
        return total

    def finalize(self, agg: SumAggregate) -> FrequencyTable:
        estimates = self.parameters.estimate(agg.sums)
        if self.queries is not None:
            estimates = estimates[self.queries]
        return FrequencyTable(self.parameters, estimates, self.queries, agg.messages, agg.malformed)

    @classmethod
    def working_bytes(cls, parameters: SharingParameters, full_domain: bool = True) -> int:
        """The sums, and one slice's scratch: validation masks (3 bytes a row), the shares as uint64 (8) and the
        items as np.add.at's index array (8)."""
        rows = min(SLICE_ROWS, math.ceil(parameters.n_users * parameters.messages_per_user))
        return 16 * parameters.domain_size + 19 * rows


@dataclass
class SampleAggregate:
    """The trusted server's exact counts, and its sampled counts once drawn (kept: one release per aggregate)."""

    counts: np.ndarray
    messages: int = 0
    malformed: int = 0
    sampled: np.ndarray | None = None


class SamplingCurator(SumServer):
    """DPCS's trusted server (§2.1): counts the records, then counts each one again with probability p.

    A record's coin is :func:`~privagg.protocols.sampling_sharing.bernoulli`; the coins are drawn once per
    aggregate, when it is first finalized (a second call repeats the release).
    """

    def __init__(self, parameters: DPCSParameters, queries=None, rng: RNGLike = None) -> None:
        super().__init__(parameters, queries)
        self.rng = rng

    def agg_init(self) -> SampleAggregate:
        return SampleAggregate(np.zeros(self.parameters.domain_size, dtype=np.int64))

    def agg_update(self, agg: SampleAggregate, messages: MessageBatch) -> SampleAggregate:
        _unreleased(agg)
        for part in messages.slices():
            clean, dropped = self.layout.validate(part)
            agg.counts += np.bincount(clean["value"], minlength=self.parameters.domain_size)
            agg.messages += len(clean)
            agg.malformed += dropped
        return agg

    def merge(self, aggs: Sequence[SampleAggregate]) -> SampleAggregate:
        total = self.agg_init()
        for a in aggs:
            _unreleased(a)
            total.counts += a.counts
            total.messages += a.messages
            total.malformed += a.malformed
        return total

    def sample(self, agg: SampleAggregate) -> np.ndarray:
        """The sampled counts: record by record, a coin each (records of one category are consecutive)."""
        if agg.sampled is None:
            coins = bernoulli(self.parameters.sampling_probability, int(agg.counts.sum()), resolve(self.rng))
            ends = np.cumsum(agg.counts)
            kept = np.concatenate([[0], np.cumsum(coins)])
            agg.sampled = kept[ends] - kept[ends - agg.counts]
        return agg.sampled

    def release(self, agg: SampleAggregate) -> np.ndarray:
        """What leaves the server: the sampled counts (DPCS)."""
        return self.sample(agg).astype(np.uint64)

    def finalize(self, agg: SampleAggregate) -> FrequencyTable:
        return super().finalize(SumAggregate(self.release(agg), agg.messages, agg.malformed))

    @classmethod
    def working_bytes(cls, parameters: DPCSParameters, full_domain: bool = True) -> int:
        """Counting a slice (as the server does), or drawing the coins: 8 bytes for each record's uniform
        integer, 1 for its coin, 8 for their running sum."""
        return max(super().working_bytes(parameters, full_domain), 16 * parameters.domain_size + 17 * parameters.n_users)


def _unreleased(agg: SampleAggregate) -> None:
    """Records join an aggregate only before its release: its coins are drawn once, so that adding records, or
    merging it into another aggregate, would release (some of) the same records again under fresh coins."""
    if agg.sampled is not None:
        raise ParameterError("aggregate", "not yet released (the trusted server samples each record once; start a "
                             "new aggregate for new records)", "an aggregate already finalized")


class SharingCurator(SamplingCurator):
    """DPCS*'s server (§2.2): releases the sampled counts as n additive shares; a receiver adds them up."""

    def shares(self, agg: SampleAggregate, columns: slice = slice(None), rng: RNGLike = None) -> np.ndarray:
        """The n shares (n x categories) of the sampled counts of ``columns`` (``rng``: default the curator's)."""
        return share(self.field, self.sample(agg)[columns].astype(np.uint64), self.parameters.n_users,
                     self.rng if rng is None else rng)

    def release(self, agg: SampleAggregate) -> np.ndarray:
        """The receiver's reconstruction, a block of categories at a time (n x block shares in memory), every
        block's shares from one generator."""
        sampled, width, rng = self.sample(agg), max(1, BLOCK_SHARES // self.parameters.n_users), resolve(self.rng)
        return np.concatenate([reconstruct(self.field, self.shares(agg, slice(lo, lo + width), rng))
                               for lo in range(0, sampled.size, width)])

    @property
    def elements_sent(self) -> int:
        """What its release sends: n shares of the N counts (a simulation's transcript)."""
        return self.parameters.n_users * self.parameters.domain_size

    @classmethod
    def working_bytes(cls, parameters: DPCSParameters, full_domain: bool = True) -> int:
        """Counting and the coins, or one block of shares and their uint64 sum."""
        return max(super().working_bytes(parameters, full_domain), 16 * BLOCK_SHARES)


# --- the distributional shortcut (simulation only) -----------------------------------------------------


def fast_aggregate(parameters, codes: np.ndarray, rng: np.random.Generator, server: SumServer) -> SumAggregate:
    """What the server reconstructs, without the sharing (exact, so skipping it changes nothing in law).

    DPDS: the participants' counts. TSS: holders counted with probability p
    p_chi (their coin, and their item in their set). DPDG: the counts at
    scale 2^k plus the sum of the users' noise, drawn from its law (computed
    exactly, sampled by inverse CDF in floating point: a simulation
    shortcut). Rows received are counted as the faithful run would have them.
    """
    n, N, q = parameters.n_users, parameters.domain_size, parameters.modulus
    if isinstance(parameters, DPDGParameters):
        offset, cdf = _noise_cdf(parameters.noise_variance, n)
        noise = offset + np.searchsorted(cdf, rng.random(N) * cdf[-1])
        totals = np.bincount(codes, minlength=N) * parameters.scale + noise
        sums, rows = totals % q, n * N
    else:
        counted = bernoulli(parameters.sampling_probability, n, rng)
        if isinstance(parameters, TSSParameters):
            counted &= bernoulli(parameters.inclusion_probability, n, rng)
            # n alpha N reports; TSS' tops items up to phi + 1 helpers (m_j drawn Bin(n, alpha) one by one)
            reports = rng.binomial(n, parameters.report_fraction, N)
            rows = n * parameters.report_size + int(np.maximum(parameters.colluders + 1 - reports, 0).sum()) \
                if parameters.colluders else n * parameters.report_size
        else:
            rows = n * N
        sums = np.bincount(codes[counted], minlength=N)
    return SumAggregate(np.asarray(sums, dtype=np.uint64), messages=rows)


@functools.lru_cache(maxsize=8)
def _noise_cdf(sigma_squared: int, users: int) -> tuple[int, np.ndarray]:
    """The law of the users' summed noise as (offset, cdf), computed once per (s2, n) for the fast path."""
    from ..privacy.discrete_gaussian import sum_law

    offset, probabilities, _ = sum_law(sigma_squared, users)
    return offset, np.cumsum(probabilities)
