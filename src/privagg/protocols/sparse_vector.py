"""1-sparse vector summation in the shuffle model (shuffle FE paper, §5; reference
../shared/papers/shuffle-frequency-estimation.md, §2.5): each user holds one coordinate x in [B] and a weight
w in [0, 1]; the target is v_x = sum of the weights of the users holding x, for every x.

Each user randomly rounds his weight to a level j in {0..k} (j = floor(w k) + Bern(w k - floor(w k)), so
E[j / k] = w) and reports the cell (x, j) of a frequency protocol over the B k + 1 cells: (x, j) is the code
x k + j - 1 for j >= 1, and every level 0 is the one cell B k ("nothing to add", the reference's dummy
coordinate). The analyzer debiases the cells' counts and returns v_x = sum_j (j / k) f_(x, j).

* ``sparse-vector`` (low dimension, B = o(n)): FE0 over the cells, every coordinate estimated. The paper's
  own low-dimensional protocol (its §5.1 change of Ghazi et al.'s real summation) was not retrieved; this
  construction, its error and its choice of k are derived in docs/derivations.md, "1-sparse vector sums".
* ``sparse-vector-hashed`` (high dimension, B = Omega(n)): FE1 over the cells with k = 1 (report x with
  probability w, else the dummy cell; the authors' VS code), estimated on candidate coordinates only; the
  others are estimated as 0. The candidates are a public list (``--candidates``, FE1 takes the whole
  budget), or, as in the paper, found first by fe-hh over the rounded cells at (eps/2, delta/2)
  (``--discover-phi``; privagg.simulate.frequency.estimate_vector_sum).

Privacy is that of FE0 / FE1 over the cells: a user's messages are a mixture, over his rounding, of the
messages of one cell, and the hockey-stick divergence is jointly convex, so a guarantee for every pair of
cells is one for every pair of (coordinate, weight) inputs (docs/derivations.md).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from ..core.messages import MessageBatch
from ..core.randomness import RNGLike, resolve
from ..errors import ParameterError, check_integer
from ..privacy.description import PrivacyDescription
from .balls_into_bins import (HASHED_DOMAIN_MAX, HISTOGRAM_DOMAIN_MAX, N_USERS_MAX, FE0Analyzer, FE0Client,
                              FE0Parameters, FE1Analyzer, FE1Client, FE1Parameters, _calibrated, _fast_aggregate,
                              bins_for, calibrate_fe1)
from .privacy_blanket import randomized_rounding
from .results import MAX_ERROR_BETA, VectorSum

LEVELS_MAX = 2**10


def check_pairs(pairs, dimension: int) -> np.ndarray:
    """Users' (coordinate, weight) rows as an (n, 2) float array: coordinates integers in [0, B), weights in
    [0, 1]; anything else is an error naming the row (counted from 0) and the column."""
    try:
        array = np.asarray(pairs, dtype=np.float64)
    except (TypeError, ValueError):
        raise ParameterError("input", "rows of two numbers (coordinate, weight)", "a ragged or non-numeric array") \
            from None
    if array.ndim != 2 or array.shape[1] != 2:
        raise ParameterError("input", "an (n, 2) array: one (coordinate, weight) row per user", f"shape {array.shape}")
    index, weight = array[:, 0], array[:, 1]
    bad = ~((index >= 0) & (index < dimension) & (index == np.floor(index)))
    if bad.any():
        row = int(np.flatnonzero(bad)[0])
        raise ParameterError("coordinate", f"an integer in [0, {dimension}) (column 0)", float(index[row]), row)
    bad = ~((weight >= 0) & (weight <= 1))  # NaN fails both
    if bad.any():
        row = int(np.flatnonzero(bad)[0])
        raise ParameterError("weight", "in [0, 1] (column 1; give --clip to clip weights explicitly)",
                             float(weight[row]), row)
    return array


def check_coordinates(values, dimension: int) -> np.ndarray:
    """Candidate coordinates: integers in [0, B), at least one."""
    try:
        array = np.atleast_1d(np.asarray(values))
    except ValueError:
        raise ParameterError("candidates", f"integer coordinates in [0, {dimension})", "a ragged sequence") from None
    if array.size == 0:
        raise ParameterError("candidates", "at least 1 coordinate", "an empty list")
    if not np.issubdtype(array.dtype, np.integer) or array.min() < 0 or array.max() >= dimension:
        bad = (v for v in array.tolist() if isinstance(v, bool) or not (isinstance(v, int) and 0 <= v < dimension))
        raise ParameterError("candidates", f"integer coordinates in [0, {dimension})", next(bad, array.tolist()[0]))
    return array.astype(np.int64)


class _OneSparse:
    """What both variants add to their frequency protocol: the cells, the rounding, the vector estimate."""

    one_sparse: ClassVar[bool] = True  # inputs are (coordinate, weight) rows, not vectors
    dimension: int
    levels: int

    def _check_cells(self) -> None:
        check_integer("dimension", self.dimension, 1, (self.domain_max - 1) // self.levels)
        if self.domain_size != self.dimension * self.levels + 1:
            raise ParameterError("domain_size", f"dimension * levels + 1 = {self.dimension * self.levels + 1} "
                                 "cells", self.domain_size)

    def check_codes(self, pairs) -> np.ndarray:
        """The users' inputs (the simulator's), checked: (n, 2) rows of (coordinate, weight)."""
        return check_pairs(pairs, self.dimension)

    def warnings(self) -> list[str]:
        """Every report says that its stderr is a bound (:meth:`coordinate_variance`: a reviewer measured the errors
        at 0.76-0.87 of it over seeded runs, where the frequency protocols' come out near 1)."""
        return super().warnings() + [
            "stderr is an upper bound on each coordinate's standard deviation, not an estimate of it: it takes the "
            "randomized rounding's variance at w / k a user, its largest (a weight w = (j + f) / k adds "
            "f (1 - f) / k^2), so the errors run smaller than it"]

    def cells(self, pairs: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """Each checked (x, w) as its randomly rounded cell: x k + j - 1 for level j >= 1, B k for j = 0."""
        level = randomized_rounding(pairs[:, 1], self.levels, rng)
        return np.where(level > 0, pairs[:, 0].astype(np.int64) * self.levels + level - 1,
                        self.dimension * self.levels)

    def weighted(self, cell_estimates: np.ndarray) -> np.ndarray:
        """v_x = sum_j (j / k) f_(x, j) from the debiased cell estimates, ordered by coordinate then level."""
        k = self.levels
        return np.asarray(cell_estimates).reshape(-1, k) @ (np.arange(1, k + 1) / k)

    def coordinate_variance(self, weight_sum=0.0, reporters: int | None = None) -> np.ndarray:
        """A bound on the variance of v_x at a weight sum S = ``weight_sum`` (clipped to [0, m]) of the m users
        whose reports were counted (default: n): S / k for the rounding (a user's f (1 - f) / k^2 <= w / k) plus
        sum_j (j / k)^2 se_cell^2, the cells' noise taken as uncorrelated (FE0's are negatively correlated; FE1's
        cell is the coordinate, k = 1)."""
        m = self.counted(reporters)
        s = np.clip(weight_sum, 0, m)
        k = self.levels
        a2 = (k + 1) * (2 * k + 1) / (6 * k)
        return s / k + a2 * np.asarray(self.standard_error(s, m)) ** 2  # FE1: se of the cell holding about S users

    def coordinate_standard_error(self, weight_sum=0.0, reporters: int | None = None) -> np.ndarray:
        return np.sqrt(self.coordinate_variance(weight_sum, reporters))

    def mse_bound(self) -> float:
        """A bound on E ||v - v_hat||^2 when every coordinate is estimated: n / (4 k^2) for the rounding plus
        the noise of all B coordinates."""
        return self.n_users / (4 * self.levels**2) + self.dimension * float(self.coordinate_variance(0.0))

    def max_error_bound(self, beta: float = MAX_ERROR_BETA, reporters: int | None = None) -> float:
        """Gaussian tail + union over the B coordinates at the average weight sum m / B."""
        if not 0 < beta < 1:
            raise ParameterError("beta", "in (0, 1)", beta)
        m = self.counted(reporters)
        return float(self.coordinate_standard_error(m / self.dimension, m)) * math.sqrt(
            2 * math.log(2 * self.dimension / beta))

    def expected_error(self, reporters: int | None = None) -> dict[str, float]:
        m = self.counted(reporters)
        return {"messages_per_user": self.messages_per_user, "bits_per_message": self.bits_per_message,
                "standard_error": float(self.coordinate_standard_error(m / self.dimension, m)),
                "standard_error_at": f"a coordinate held by m / d = {m / self.dimension:,.4g} users (an upper bound)",
                "max_error_bound": self.max_error_bound(reporters=m), "max_error_beta": MAX_ERROR_BETA}

    def theory(self) -> dict[str, float | str]:
        return {"estimate": "v_x = sum_j (j / k) f_(x, j) over the debiased cells (x, j)", "cells": self.domain_size,
                "standard_error_at_average": float(self.coordinate_standard_error(self.n_users / self.dimension)),
                "mse_bound": self.mse_bound()}

    @property
    def privacy(self) -> PrivacyDescription:
        return PrivacyDescription.of(dataclasses.replace(
            super().privacy.event, neighbouring="replace-one: neighbouring datasets differ in one user's (coordinate, "
            "weight); n and B are public"))

    def true_total(self, pairs: np.ndarray, coordinates: np.ndarray | None = None) -> np.ndarray:
        """The exact v over ``coordinates`` (default: all B), computed in the clear (simulations only)."""
        index = pairs[:, 0].astype(np.int64)
        if coordinates is None:
            return np.bincount(index, weights=pairs[:, 1], minlength=self.dimension)
        if not coordinates.size:  # a discovery that found none
            return np.zeros(0)
        slot = np.searchsorted(coordinates, index).clip(max=coordinates.size - 1)
        hit = coordinates[slot] == index
        return np.bincount(slot[hit], weights=pairs[hit, 1], minlength=coordinates.size)

    def true_total_outside(self, pairs: np.ndarray, coordinates: np.ndarray) -> np.ndarray:
        """The exact nonzero v_x of the coordinates not in ``coordinates`` (simulations: their error, as they
        are estimated as 0), without a B-sized array."""
        held, where = np.unique(pairs[:, 0].astype(np.int64), return_inverse=True)
        sums = np.bincount(where, weights=pairs[:, 1], minlength=held.size)
        return sums[~np.isin(held, coordinates)]


@dataclass(frozen=True)
class SparseVectorParameters(_OneSparse, FE0Parameters):
    """FE0 over the B k + 1 cells (coordinate, level) of the users' randomly rounded weights."""

    protocol: ClassVar[str] = "sparse-vector"
    mechanism: ClassVar[str] = ("1-sparse vectors: weights randomly rounded to {0..k}, FE0 over the cells "
                                "(coordinate, level)")
    noise_options: ClassVar[dict[str, str]] = {"levels": "lower"}

    dimension: int = dataclasses.field(kw_only=True)
    levels: int = dataclasses.field(kw_only=True)

    def __post_init__(self) -> None:
        check_integer("levels", self.levels, 1, LEVELS_MAX)
        self._check_cells()
        super().__post_init__()

    def suggested_levels(self) -> int:
        """The k in [1, 64] that minimises the mean square error bound n / (4 k^2) + B (k + 1)(2k + 1) / (6k) s^2
        at this noise (s: a cell's standard error, which hardly depends on k)."""
        cell = float(self.standard_error(0.0)) ** 2
        k = np.arange(1, 65)
        return int(k[np.argmin(self.n_users / (4 * k**2) + self.dimension * (k + 1) * (2 * k + 1) / (6 * k) * cell)])

    def theory(self) -> dict[str, float | str]:
        return {**super().theory(), "suggested_levels": self.suggested_levels()}

    def variance(self, rounding: np.ndarray, reporters: int | None = None) -> np.ndarray:
        """The exact variance of each v_x given the users' rounding variances summed per coordinate
        (``rounding``): the dummies' counts are multinomial, n floor(rho) of them fixed and n more with
        probability f = rho - floor(rho), each uniform over the M cells (docs/derivations.md); n: the users
        whose reports were counted (default: the calibrated n)."""
        k, m = self.levels, self.domain_size
        a1, a2 = (k + 1) / 2, (k + 1) * (2 * k + 1) / (6 * k)
        whole = math.floor(self.rho)
        frac = self.rho - whole
        noise = self.counted(reporters) * (whole * (a2 / m - (a1 / m) ** 2) + frac * a2 / m - (frac * a1 / m) ** 2)
        return np.asarray(rounding) + noise


@dataclass(frozen=True)
class HashedSparseVectorParameters(_OneSparse, FE1Parameters):
    """FE1 over the B + 1 cells of the users' weights rounded to {0, 1}: for B = Omega(n)."""

    protocol: ClassVar[str] = "sparse-vector-hashed"
    mechanism: ClassVar[str] = ("1-sparse vectors: the coordinate with probability w, else a dummy coordinate, "
                                "through FE1's universal hashes")
    levels: ClassVar[int] = 1  # as the authors' VS code: report x with probability w

    dimension: int = dataclasses.field(kw_only=True)

    def __post_init__(self) -> None:
        self._check_cells()
        super().__post_init__()

    def theory(self) -> dict[str, float | str]:
        """Per candidate: its estimate's variance is at most S + se(S)^2 at its weight sum S; a coordinate left
        out is estimated as 0, so its error is its whole v_x (no bound over B coordinates is useful here)."""
        return {"estimate": "v_x = FE1's debiased count of cell x, for each candidate x; 0 elsewhere",
                "cells": self.domain_size, "candidate_variance_at_zero": float(self.coordinate_variance(0.0)),
                "error_outside_candidates": "v_x^2 for every coordinate left out"}


# The paper's first stage (§5, high dimension; ``--discover-phi``): fe-hh over the users' rounded cells finds the
# coordinates whose sums reach phi n, which the second stage then estimates (registry.Discovery).
def discovery_items(parameters: HashedSparseVectorParameters, pairs, rng: np.random.Generator) -> np.ndarray:
    """Each user's item in the discovery stage: his weight rounded with his own coins, the cell of his coordinate
    with probability w, else the dummy cell B (as the second stage rounds it again, with fresh coins)."""
    return parameters.cells(parameters.check_codes(pairs), rng).astype(np.uint64)


def discovered_coordinates(parameters: HashedSparseVectorParameters, items) -> np.ndarray:
    """The coordinates among a discovery's reported ``items`` (the dummy cell left out): the second stage's
    candidates, sorted."""
    return np.array(sorted(int(i) for i in items if i < parameters.dimension), dtype=np.int64)


def calibrate_sparse_vector(epsilon: float, delta: float, n_users: int, domain_size: int, calibration: str = "numeric",
                            levels: int | None = None, honest_fraction: float = 1.0) -> SparseVectorParameters:
    """FE0 over the B k + 1 cells for (eps, delta)-DP; ``domain_size`` is B, the vectors' dimension.

    ``levels`` k: default, the k that minimises the error bound (:meth:`SparseVectorParameters.suggested_levels`
    at k = 1's noise, which hardly depends on k)."""
    if levels is None:
        levels = calibrate_sparse_vector(epsilon, delta, n_users, domain_size, calibration, 1,
                                         honest_fraction).suggested_levels()
    k = check_integer("levels", levels, 1, LEVELS_MAX)
    dimension = check_integer("dimension", domain_size, 1, (HISTOGRAM_DOMAIN_MAX - 1) // k)
    return _calibrated(SparseVectorParameters, epsilon, delta, n_users, dimension * k + 1, calibration,
                       honest_fraction=honest_fraction, dimension=dimension, levels=k)


def calibrate_hashed_sparse_vector(epsilon: float, delta: float, n_users: int, domain_size: int,
                                   calibration: str = "numeric", bins: int | None = None, c: float | None = None,
                                   honest_fraction: float = 1.0) -> HashedSparseVectorParameters:
    """FE1 over the B + 1 cells for (eps, delta)-DP; b = ``bins``, or floor(n / ln^c n) with c = 3 by default, as
    the authors' VS code (fewer dummies: 1 + o(1) messages, more collisions), or c = 1 where c = 3 leaves fewer
    than 2 bins (n below about 1,000)."""
    dimension = check_integer("dimension", domain_size, 1, HASHED_DOMAIN_MAX - 1)
    if bins is None and c is None:
        c = 3.0 if bins_for(check_integer("n_users", n_users, 2, N_USERS_MAX), 3.0) >= 2 else 1.0
    return calibrate_fe1(epsilon, delta, n_users, dimension + 1, bins, c, calibration, honest_fraction,
                         parameters=HashedSparseVectorParameters, dimension=dimension)


class SparseVectorClient:
    """A user: his (x, w) randomly rounded to a cell, then that cell's FE0 or FE1 messages, dummies included."""

    def __init__(self, parameters: SparseVectorParameters | HashedSparseVectorParameters) -> None:
        self.parameters, self.layout = parameters, parameters.layout
        self.cell_client = (FE1Client if isinstance(parameters, FE1Parameters) else FE0Client)(parameters)

    def randomize(self, pairs, rng: RNGLike = None) -> MessageBatch:
        rng, p = resolve(rng), self.parameters
        return self.cell_client.messages(p.cells(p.check_codes(pairs), rng), rng)


class _VectorFromCells:
    """The analyzer of the cells' protocol, finalized into the vector sum v_x = sum_j (j / k) f_(x, j)."""

    parameters: Any

    def __init__(self, parameters, queries=None) -> None:
        """``queries``: candidate coordinates (their cells are counted); None: every coordinate."""
        self.coordinates = None
        if queries is None and parameters.domain_size > HISTOGRAM_DOMAIN_MAX:
            raise ParameterError("candidates", f"given when B k + 1 exceeds 2^{HISTOGRAM_DOMAIN_MAX.bit_length() - 1} "
                                 "(every coordinate cannot be counted)", None)
        if queries is not None:
            self.coordinates = np.unique(check_coordinates(queries, parameters.dimension))
            queries = (self.coordinates[:, None] * parameters.levels + np.arange(parameters.levels)).ravel()
        super().__init__(parameters, queries)

    def finalize(self, agg, reporters: int | None = None) -> VectorSum:
        """v over the cells the ``reporters`` users' messages fill (default: the calibrated n)."""
        p = self.parameters
        table = super().finalize(agg, reporters)
        estimates = table.estimates if self.coordinates is not None else table.estimates[:-1]  # the dummy cell
        total = p.weighted(estimates)
        return VectorSum(p, total, p.coordinate_standard_error(total, reporters), self.coordinates, table.messages,
                         table.malformed, reporters=reporters)


class SparseVectorAnalyzer(_VectorFromCells, FE0Analyzer):
    """FE0's histogram of the cells, then v_x for every coordinate (or the candidates)."""


class HashedSparseVectorAnalyzer(_VectorFromCells, FE1Analyzer):
    """FE1's match counts of the candidates' cells, then v_x; every coordinate by preimage enumeration when no
    candidates are given (B must then be small enough to count)."""


def sparse_fast_aggregate(parameters, pairs: np.ndarray, rng: np.random.Generator, analyzer):
    """The fast path: the rounded cells' real messages, then the total of dummies drawn in one step."""
    client = SparseVectorClient(parameters).cell_client
    return _fast_aggregate(client, parameters.cells(pairs, rng), rng, analyzer)
