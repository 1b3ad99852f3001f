"""The privacy blanket in the shuffle model (Balle, Bell, Gascon, Nissim 2019; Scott, Cormode, Maple 2021):
``blanket-hist``, randomized response R^PH over a domain of B values and its debiasing analyzer.

Each user sends one message: his value with probability 1 - gamma, a value uniform over [B] otherwise
(:class:`BlanketClient`; reference ../shared/papers/shuffle-vector-aggregation.md, Algorithm 1). The
shuffled messages form a histogram; about gamma n of them are the "blanket" that hides any one user's value.
The analyzer counts each value and debiases: E[count_x] = (1 - gamma) g_x + gamma n / B, so the estimate is
(count_x - gamma n / B) / (1 - gamma) (derived in docs/derivations.md, "Privacy blanket"), with n the users whose
reports were counted (m of a task closed early). gamma comes from the paper's closed form or from the shuffle
accountant (:mod:`privagg.privacy.blanket`).
"""

from __future__ import annotations

import dataclasses
import functools
import itertools
import math
from dataclasses import dataclass
from typing import Any, ClassVar, NamedTuple

import numpy as np

from ..core.coins import at_least, coins
from ..core.encoding import check_item_key
from ..core.messages import SLICE_ROWS, Column, MessageBatch, MessageLayout
from ..core.randomness import RNGLike, resolve
from ..errors import ParameterError, check_delta, check_epsilon, check_integer
from ..privacy import blanket, shuffle
from ..privacy.description import REPLACE_ONE, Mechanism, PrivacyDescription
from ..privacy.evaluation_cache import on_disk
from .balls_into_bins import EXACT_LAW_MAX, HISTOGRAM_DOMAIN_MAX, N_USERS_MAX, FE0Analyzer, check_honest_fraction
from . import exact_laws
from .parameters import FrozenParameters, OneItemReports, float_rows, honest_users, neighbouring_pairs
from .results import MAX_ERROR_BETA, VectorSum

METHOD_DETAIL = {
    "tight": "the least gamma the blanket accountant certifies: the mixture over how many other users sent noise "
             "(Bin(n - 1, gamma)) of the exact divergence of the changed user's report among them, bounded by "
             "monotone buckets; or FMT's or Wang et al.'s bound where smaller (R^PH is eps0-LDP with e^eps0 = 1 + "
             "B (1 - gamma) / gamma)",
    "paper": "the closed form of Balle et al. (eps < 1) and of the vector paper's extension (1 <= eps < 6) the "
             "authors' code evaluates",
}


class _BlanketParameters(FrozenParameters):
    """What R^PH and R_{d,k,n,t} share: one blanket probability gamma, its calibrations, honest users."""

    model: ClassVar[str] = "shuffle"
    trusted: ClassVar[tuple[str, ...]] = ("shuffler",)
    rho: ClassVar[float] = 0.0  # no dummy messages
    messages_sd: ClassVar[float] = 0.0  # a fixed number of messages per user
    noise_options: ClassVar[dict[str, str]] = {}

    def _check_common(self) -> None:
        check_epsilon(self.epsilon)
        check_delta(self.delta)
        check_integer("n_users", self.n_users, 2, N_USERS_MAX)
        if self.calibration not in blanket.METHODS:
            raise ParameterError("calibration", f"one of {', '.join(blanket.METHODS)}", self.calibration)
        check_honest_fraction(self.honest_fraction, self.n_users)
        if not 0 < self.gamma < 1:
            raise ParameterError("gamma", "in (0, 1)", self.gamma)

    def paper_gamma(self) -> float:
        """The paper's closed form for these parameters (protocol-specific)."""
        raise NotImplementedError

    def verify(self) -> None:
        """The claim against the calibration it names: gamma at least the closed form, or the accountant's delta."""
        if self.calibration == "paper":
            needed = self.paper_gamma()
            if self.gamma < needed:
                raise ParameterError("gamma", f">= the paper's closed form {needed:.6g}", self.gamma)
            return
        self.check_delta_at("gamma", self.gamma)

    def check_population(self, values: np.ndarray) -> None:
        """No condition on the data."""

    def noise_fields(self, scale: float) -> dict[str, float]:
        """gamma multiplied by ``scale`` (for the auditors)."""
        return {"gamma": min(self.gamma * scale, 1 - 1e-12)}

    def _description(self, parameters: dict[str, float], neighbouring: str,
                     public: tuple[str, ...]) -> PrivacyDescription:
        caveats = ("the paper's closed form for 1 <= eps < 6 is the vector paper's extension, whose proof was not "
                   "retrieved; delta_at(eps) gives the accountant's bound for this gamma",) if (
            self.calibration == "paper" and self.epsilon >= 1) else ()
        return PrivacyDescription.of(Mechanism(
            mechanism=self.mechanism, parameters={"gamma": self.gamma, "n_users": self.n_users,
                                                  "honest_users": self.honest_users, **parameters},
            epsilon=self.epsilon, delta=self.delta, model=self.model, neighbouring=neighbouring,
            trusted=self.trusted, honest_fraction=self.honest_fraction,
            assumptions=("all n users follow the protocol" if self.honest_fraction == 1 else
                         f"at least {self.honest_users} of the {self.n_users} users follow the protocol (the others' "
                         "reports are not counted as blanket)",), public=public,
            method=self.calibration, method_detail=METHOD_DETAIL[self.calibration],
            reference="src/privagg/privacy/blanket.py; docs/derivations.md, 'Privacy blanket'", caveats=caveats))


@dataclass(frozen=True)
class BlanketHistParameters(OneItemReports, _BlanketParameters):
    """R^PH over [B]: the blanket probability gamma for (eps, delta)-DP of n shuffled reports."""

    protocol: ClassVar[str] = "blanket-hist"
    mechanism: ClassVar[str] = "R^PH: randomized response with blanket probability gamma over [B]"
    domain_max: ClassVar[int] = HISTOGRAM_DOMAIN_MAX

    epsilon: float
    delta: float
    n_users: int
    domain_size: int
    calibration: str
    gamma: float
    item_key: str | None = dataclasses.field(default=None, kw_only=True)
    honest_fraction: float = dataclasses.field(default=1.0, kw_only=True)

    def __post_init__(self) -> None:
        self._check_common()
        check_integer("domain", self.domain_size, 2, self.domain_max)
        if self.item_key is not None:
            check_item_key(self.item_key)

    def paper_gamma(self) -> float:
        return blanket.paper_gamma(self.epsilon, self.delta, self.honest_users, self.domain_size)

    def derived(self) -> dict[str, Any]:
        return {"local_epsilon": blanket.local_epsilon(self.gamma, self.domain_size)}

    # --- theory (docs/derivations.md, "Privacy blanket"), of the m users whose reports were counted -----------
    def debias(self, counts: np.ndarray, reporters: int | None = None) -> np.ndarray:
        """(count - gamma m / B) / (1 - gamma): unbiased for g_x among the m users counted (default: n)."""
        m = self.counted(reporters)
        return (np.asarray(counts, dtype=np.float64) - self.gamma * m / self.domain_size) / (1 - self.gamma)

    def standard_error(self, count=0.0, reporters: int | None = None):
        """sqrt(g a1 (1 - a1) + (m - g) a0 (1 - a0)) / (1 - gamma) for an item held by g = ``count`` of the m
        users counted, a1 = 1 - gamma + gamma / B, a0 = gamma / B: each user's message equals x with probability
        a1 if he holds x, a0 otherwise."""
        m = self.counted(reporters)
        g = np.clip(count, 0, m)
        a0 = self.gamma / self.domain_size
        a1 = 1 - self.gamma + a0
        return np.sqrt(g * a1 * (1 - a1) + (m - g) * a0 * (1 - a0)) / (1 - self.gamma)

    def max_error_bound(self, beta: float = MAX_ERROR_BETA, reporters: int | None = None) -> float:
        """Bernstein + union bound over [B] at the largest per-item variance (it is linear in g: at g = 0 or m)."""
        if not 0 < beta < 1:
            raise ParameterError("beta", "in (0, 1)", beta)
        m = self.counted(reporters)
        sd = float(max(self.standard_error(m, m), self.standard_error(0, m)))
        log_term = math.log(2 * self.domain_size / beta)
        return log_term / (3 * (1 - self.gamma)) + math.sqrt((log_term / (3 * (1 - self.gamma))) ** 2 +
                                                              2 * sd**2 * log_term)

    def expected_error(self, reporters: int | None = None) -> dict[str, float]:
        return {"messages_per_user": 1.0, "bits_per_message": self.bits_per_message,
                "standard_error": self.worst_standard_error(reporters),
                "standard_error_at": "the worst item (the largest over the items' counts)",
                "max_error_bound": self.max_error_bound(reporters=reporters), "max_error_beta": MAX_ERROR_BETA}

    def costs(self) -> dict[str, dict[str, float]]:
        return {"user": {"sent": 1.0}, "analyzer": {"received": float(self.n_users)}}

    def theory(self) -> dict[str, float | str]:
        return {"estimate": "(count - gamma n / B) / (1 - gamma)", "blanket_messages": self.gamma * self.n_users,
                "standard_error_at_zero": float(self.standard_error(0))}

    # --- privacy --------------------------------------------------------------------------------------
    def delta_at(self, epsilon: float) -> float:
        """The accountant's delta(eps) for the honest users' reports (any calibration)."""
        return blanket.delta_at(check_epsilon(epsilon), self.gamma, self.honest_users, self.domain_size)

    @property
    def privacy(self) -> PrivacyDescription:
        return self._description({"domain_size": self.domain_size}, REPLACE_ONE,
                                 ("the parameters", "the item-hash key"))

    def warnings(self) -> list[str]:
        blanket = [f"gamma = {self.gamma:.3g}: most reports are blanket noise, so the estimates' error is large; more "
                   "users or a smaller domain help"]
        return super().warnings() + (blanket if self.gamma > 0.9 else [])


def calibrate_blanket_hist(epsilon: float, delta: float, n_users: int, domain_size: int, calibration: str = "tight",
                           honest_fraction: float = 1.0) -> BlanketHistParameters:
    """gamma for (eps, delta)-DP of the shuffled reports of ceil(G n) honest users."""
    epsilon, delta = check_epsilon(epsilon), check_delta(delta)
    n = check_integer("n_users", n_users, 2, N_USERS_MAX)
    domain = check_integer("domain", domain_size, 2, HISTOGRAM_DOMAIN_MAX)
    honest = honest_users(n, check_honest_fraction(honest_fraction, n))
    if calibration == "tight":
        gamma = blanket.tight_gamma(epsilon, delta, honest, domain)
    elif calibration == "paper":
        gamma = blanket.paper_gamma(epsilon, delta, honest, domain)
    else:
        raise ParameterError("calibration", f"one of {', '.join(blanket.METHODS)}", calibration)
    return BlanketHistParameters(epsilon=epsilon, delta=delta, n_users=n, domain_size=domain,
                                 calibration=calibration, gamma=gamma, honest_fraction=float(honest_fraction))


class BlanketClient:
    """R^PH (reference Algorithm 1): the value with probability 1 - gamma, else a value uniform over [B]."""

    def __init__(self, parameters: BlanketHistParameters) -> None:
        self.parameters, self.layout = parameters, parameters.layout

    def randomize(self, codes, rng: RNGLike = None) -> MessageBatch:
        p, rng = self.parameters, resolve(rng)
        codes = p.check_codes(codes)
        replaced = coins(at_least(p.gamma), codes.size, rng)  # never less blanket than calibrated
        values = codes.copy()
        values[replaced] = rng.integers(0, p.domain_size, size=int(replaced.sum()))
        return self.layout.batch({"value": values})


class BlanketAnalyzer(FE0Analyzer):
    """A^PH: the histogram of the shuffled reports (counted as FE0's analyzer counts its values), debiased by
    (count - gamma n / B) / (1 - gamma)."""

    order_free: ClassVar[bool] = True  # counts: the messages' order cannot change them (simulate.runner)


def law_size(parameters: BlanketHistParameters, item: int = 0) -> exact_laws.LawSize:
    """:func:`message_law`'s size before it is built: B outcomes (the value sent), each a histogram over B types;
    an audit builds one per item of [B]."""
    B = parameters.domain_size
    return exact_laws.LawSize(parameters.protocol, float(B), B, 1, "domain", B, limit=lambda budget:
                              exact_laws.largest_fitting(lambda b: b * b * (b + exact_laws.UNITS_PER_STATE),
                                                         budget, 2, B))


def message_law(parameters: BlanketHistParameters, item: int) -> dict[tuple[int, ...], float]:
    """One user's message as an exact law over one-message histograms (the exact auditor; its size checked first,
    :func:`law_size`)."""
    B, gamma = parameters.domain_size, parameters.gamma
    exact_laws.check_law(law_size(parameters, item))
    return {tuple(int(j == value) for j in range(B)): (1 - gamma) * (value == item) + gamma / B
            for value in range(B)}


# --- vectors: blanket-vector, R_{d,k,n,t} and A_{d,k,t} (reference Algorithms 2-3) ---------------------------


def check_vectors(values, dimension: int) -> np.ndarray:
    """Users' vectors as an (n, d) float array in [0, 1] (:func:`~privagg.protocols.parameters.float_rows`:
    float32 stays float32); NaN, values outside [0, 1] and a wrong d are errors naming the row and column (counted
    from 0), never clipped here (``privagg.io.vectors.clip_vectors`` is the explicit option)."""
    try:
        array = float_rows(values)
    except (TypeError, ValueError):
        raise ParameterError("vector", f"rows of {dimension} numbers in [0, 1]", "a ragged or non-numeric array") \
            from None
    if array.ndim != 2 or array.shape[1] != dimension:
        raise ParameterError("vector", f"an (n, {dimension}) array: one row of d = {dimension} values per user",
                             f"shape {array.shape}")
    if array.size and _bits_within_unit(array):  # one pass, no temporaries
        return array
    bad = ~np.isfinite(array) | (array < 0) | (array > 1)  # -0.0, which the pass above leaves here, is not
    if bad.any():
        row, column = (int(i) for i in np.argwhere(bad)[0])
        raise ParameterError("vector", "values in [0, 1] (give --clip to clip them explicitly)",
                             f"{float(array[row, column])!r} in coordinate {column}", row)
    return array


def _bits_within_unit(array: np.ndarray) -> bool:
    """Whether every value of a float32 or float64 array (in the machine's byte order, :func:`float_rows`) lies in
    [+0.0, 1], in one pass over its bits: read as unsigned integers of their width, they are at most 1.0's exactly
    for +0.0 up to 1.0, and larger for anything above 1, infinity, NaN and every value with its sign bit set (-0.0
    too, which the caller's check of the values then accepts). Half the time of min() and max()."""
    bits = np.uint32 if array.dtype == np.float32 else np.uint64
    return bool(array.view(bits).max() <= np.array(1.0, array.dtype).view(bits))


TRUE_SUM_BYTES = 1 << 20  # the float64 block :func:`_row_order_sums` converts rows into: in a core's cache


def _row_order_sums(vectors: np.ndarray) -> np.ndarray:
    """The float64 sums of a C-ordered (n, d >= 2) float32 array's columns, adding its rows in their order (each
    column's s <- s + x, as einsum does; tested): the rows a TRUE_SUM_BYTES block holds (at least one) converted at a
    time into a float64 block whose first row holds the sums so far, which einsum then adds the block's rows to.
    einsum's own conversion, through a buffer a few rows long, took 0.09 s of CPU at n = 5 x 10^6, d = 20; this
    0.07 s."""
    n, d = vectors.shape
    step = max(1, TRUE_SUM_BYTES // (8 * d))
    block = np.empty((min(n, step) + 1, d))
    sums = np.zeros(d)
    for start in range(0, n, step):
        rows = vectors[start:start + step]
        block[0] = sums
        block[1:len(rows) + 1] = rows
        sums = np.einsum("ij->j", block[:len(rows) + 1])
    return sums


@dataclass(frozen=True)
class BlanketVectorParameters(_BlanketParameters):
    """R_{d,k,n,t}: t coordinates a user, rounded to {0..k}, randomized response with blanket probability gamma."""

    protocol: ClassVar[str] = "blanket-vector"
    mechanism: ClassVar[str] = "R_{d,k,n,t}: coordinate sampling, randomized rounding, randomized response (gamma)"
    domain_max: ClassVar[int] = 2**20  # d

    epsilon: float
    delta: float
    n_users: int
    dimension: int
    levels: int
    coordinates: int
    calibration: str
    gamma: float
    honest_fraction: float = dataclasses.field(default=1.0, kw_only=True)

    def __post_init__(self) -> None:
        self._check_common()
        check_integer("dimension", self.dimension, 1, self.domain_max)
        check_integer("levels", self.levels, 1, 2**16)
        check_integer("coordinates-per-user", self.coordinates, 1, self.dimension)

    def true_total(self, vectors: np.ndarray, coordinates=None) -> np.ndarray:
        """The exact sum of the vectors, computed in the clear (simulations only), in float64 whatever the input's
        float type: einsum's, which casts as it goes (about twice as fast as ``sum(axis=0, dtype=float64)`` on
        float32) and, over d >= 2 columns in C order, adds the rows in their order, each column's sum s <- s + x
        (:func:`_row_order_sums`: the same additions, in less time, for float32)."""
        if vectors.dtype == np.float32 and vectors.ndim == 2 and vectors.shape[1] > 1 and vectors.flags.c_contiguous:
            return _row_order_sums(vectors)
        return np.einsum("ij->j", vectors, dtype=np.float64)

    def paper_gamma(self) -> float:
        return blanket.paper_vector_gamma(self.epsilon, self.delta, self.honest_users, self.dimension, self.levels,
                                          self.coordinates)

    @property
    def domain_size(self) -> int:
        """d: the registry's domain is the dimension for vector protocols."""
        return self.dimension

    def check_codes(self, vectors) -> np.ndarray:
        """The users' vectors (the simulator's input), checked: (n, d) in [0, 1]."""
        return check_vectors(vectors, self.dimension)

    @property
    def layout(self) -> MessageLayout:
        return MessageLayout((Column("coordinate", 0, self.dimension), Column("value", 0, self.levels + 1)))

    @property
    def messages_per_user(self) -> float:
        return float(self.coordinates)

    def derived(self) -> dict[str, Any]:
        return {"local_epsilon": blanket.vector_local_epsilon(self.gamma, self.levels, self.coordinates)}

    def delta_at(self, epsilon: float) -> float:
        return blanket.vector_delta_at(check_epsilon(epsilon), self.gamma, self.honest_users, self.levels,
                                       self.coordinates)

    # --- theory (docs/derivations.md, "Vector sums") -------------------------------------------------
    # n below is the users whose reports were counted (``reporters``; default: the calibrated n): a task closed
    # early sums the vectors of the m >= ceil(G n) users who reported (docs/derivations.md, "An early close").
    def estimate(self, value_sums: np.ndarray, counts: np.ndarray, reporters: int | None = None) -> np.ndarray:
        """Per coordinate l, the sum of the users' x_l: n times the debiased mean of the c_l reports at l,
        n (sum y / k - gamma c_l / 2) / ((1 - gamma) c_l), the authors' code's normalisation by the realised
        count. Unbiased given c_l >= 1 (the reporters are a uniform subset of the users); n / 2 where no user
        reported l (probability (1 - t/d)^n)."""
        n = self.counted(reporters)
        c = np.asarray(counts, dtype=np.float64)
        debiased = np.asarray(value_sums, dtype=np.float64) / self.levels - self.gamma * c / 2
        mean = debiased / ((1 - self.gamma) * np.maximum(c, 1))
        return np.where(c > 0, n * mean, n / 2)

    @property
    def inverse_count_mean(self) -> float:
        """E[1 / c | c >= 1] for a coordinate's report count c ~ Bin(n, t / d) (:func:`_inverse_count_mean`)."""
        return _inverse_count_mean(self.n_users, self.coordinates, self.dimension)

    def _spread(self, sum_x, sum_x2, rounding, n: int) -> tuple[np.ndarray, np.ndarray]:
        """(S^2, V): the n users' variance of x_l (denominator n - 1) and their mean variance of a debiased report
        z = (y / k - gamma / 2) / (1 - gamma) given x, from S1 = sum x, S2 = sum x^2 and R = sum f (1 - f) / k^2."""
        g, k = self.gamma, self.levels
        s1, s2 = np.asarray(sum_x, dtype=np.float64), np.asarray(sum_x2, dtype=np.float64)
        spread = (s2 - s1 * s1 / n) / (n - 1)
        second = (1 - g) * (s2 + rounding) + n * g * (2 * k + 1) / (6 * k)  # sum E[(y/k)^2]
        first2 = (1 - g) ** 2 * s2 + g * (1 - g) * s1 + n * g * g / 4  # sum E[y/k]^2
        return spread, (second - first2) / (n * (1 - g) ** 2)

    def variance(self, sum_x, sum_x2, rounding, reporters: int | None = None) -> np.ndarray:
        """The exact variance of a coordinate's estimate (c >= 1), given S1, S2 and R (``_spread``): given c
        it is n^2 ((1 - c/n) S^2 + V) / c, whose mean over c is n^2 (S^2 + V) E[1/c] - n S^2."""
        n = self.counted(reporters)
        spread, noise = self._spread(sum_x, sum_x2, rounding, n)
        return n * n * (spread + noise) * _inverse_count_mean(n, self.coordinates, self.dimension) - n * spread

    def estimated_standard_error(self, value_sums, value_squares, counts, bound,
                                 reporters: int | None = None) -> np.ndarray:
        """A consistent estimate of each coordinate's sd given its c reports (docs/derivations.md, "Vector sums",
        the reported standard error): Var = n^2 ((1 - c/n) S^2 + V) / c, where the sample variance s^2 of the c
        debiased reports z = (y / k - gamma / 2) / (1 - gamma) is unbiased for S^2 + V (the reporters are a
        uniform c-subset of the users, their noise independent), and S^2 >= n / (n - 1) (B - A^2 - 1 / (4 k^2)),
        with A the mean of z and B = (mean of (y/k)^2 - gamma (2k + 1) / (6k)) / (1 - gamma) estimating the mean
        of x^2 plus the rounding variance (at most 1 / (4 k^2)): the finite-population term taken at S^2's lower
        end, so the estimate errs up by at most n / (4 k^2) (the rounding variance is not identifiable from the
        release; it matters only as t / d nears 1). Never below the blanket's own share, n^2 V_min / c with
        V_min = gamma (k + 2) / (12 k (1 - gamma)^2), the least Var(z | x) over x (at x = 1/2): a sample of few
        reports may hold no blanket ones. Coordinates with fewer than 2 reports get ``bound`` (:meth:`standard_error`
        at the estimate)."""
        g, k, n = self.gamma, self.levels, self.counted(reporters)
        s, q = np.asarray(value_sums, dtype=np.float64), np.asarray(value_squares, dtype=np.float64)
        c = np.asarray(counts, dtype=np.float64)
        several = c >= 2
        cc = np.where(several, c, 2.0)
        mean_z = (s / k / cc - g / 2) / (1 - g)
        sum_z2 = (q / (k * k) - g * s / k + cc * g * g / 4) / (1 - g) ** 2
        sample = np.maximum(sum_z2 - cc * mean_z**2, 0.0) / (cc - 1)
        second = (q / (k * k) / cc - g * (2 * k + 1) / (6 * k)) / (1 - g)
        spread = np.maximum(second - mean_z**2 - 1 / (4 * k * k), 0.0) * n / (n - 1)
        least = g * (k + 2) / (12 * k * (1 - g) ** 2)
        estimate = n * np.sqrt(np.maximum(sample - cc / n * spread, least) / cc)
        return np.where(several, estimate, bound)

    def standard_error(self, estimate=0.0, counts=None, gamma: float | None = None,
                       reporters: int | None = None) -> np.ndarray:
        """An upper bound on the sd given the realised counts c (default: over c), at a mean m = estimate / n
        clipped to [0, 1]: S^2 <= n m (1 - m) / (n - 1), and V <= ((1 - gamma) / (4 k^2) + gamma ((2k + 1) / (6k)
        - gamma / 4)) / (1 - gamma)^2 (from S2 <= S1 and f (1 - f) <= 1/4; derived in docs/derivations.md).
        ``gamma``: another blanket probability than the calibrated one (0: the design's floor)."""
        g, k, n = self.gamma if gamma is None else gamma, self.levels, self.counted(reporters)
        mean = np.clip(np.asarray(estimate, dtype=np.float64) / n, 0.0, 1.0)
        spread = n * mean * (1 - mean) / (n - 1)
        noise = ((1 - g) / (4 * k * k) + g * ((2 * k + 1) / (6 * k) - g / 4)) / (1 - g) ** 2
        inverse = (_inverse_count_mean(n, self.coordinates, self.dimension) if counts is None
                   else 1 / np.maximum(np.asarray(counts, float), 1))
        return n * np.sqrt(np.maximum((spread + noise) * inverse - spread / n, 0.0))

    def mse_bound(self, gamma: float | None = None) -> float:
        """An upper bound on E ||mean_hat - mean||^2 = sum_l Var_l / n^2 over every vector in [0, 1]^d: d times
        the largest variance bound (at m = 1/2), over n^2 (at ``gamma``, default the calibrated one)."""
        return self.dimension * float(self.standard_error(self.n_users / 2, gamma=gamma)) ** 2 / self.n_users**2

    def paper_mse_bound(self) -> float:
        """The reference's Theorem 4.6 form, t d^2 (1/(4k^2) + gamma/2) / (n (1 - gamma)^2): for comparison with
        the paper only; it leaves out which users report a coordinate and measured errors exceed it
        (docs/results/vector-shuffle.md)."""
        return (self.coordinates * self.dimension**2 * (1 / (4 * self.levels**2) + self.gamma / 2)
                / (self.n_users * (1 - self.gamma) ** 2))

    def max_error_bound(self, beta: float = MAX_ERROR_BETA, reporters: int | None = None) -> float:
        if not 0 < beta < 1:
            raise ParameterError("beta", "in (0, 1)", beta)
        n = self.counted(reporters)
        return float(self.standard_error(n / 2, reporters=n)) * math.sqrt(2 * math.log(2 * self.dimension / beta))

    def expected_error(self, reporters: int | None = None) -> dict[str, float]:
        n = self.counted(reporters)
        return {"messages_per_user": float(self.coordinates), "bits_per_message": self.bits_per_message,
                "standard_error": float(self.standard_error(n / 2, reporters=n)),
                "standard_error_at": "a coordinate whose sum is n / 2 (the largest; an upper bound)",
                "max_error_bound": self.max_error_bound(reporters=n), "max_error_beta": MAX_ERROR_BETA}

    def costs(self) -> dict[str, dict[str, float]]:
        return {"user": {"sent": float(self.coordinates)},
                "analyzer": {"received": float(self.n_users * self.coordinates)}}

    def theory(self) -> dict[str, float | str]:
        t, k, gamma, bound = suggested_design(self)
        return {"estimate": "n (sum y / k - gamma c_l / 2) / ((1 - gamma) c_l) per coordinate",
                "mse_bound": self.mse_bound(), "paper_mse_bound": self.paper_mse_bound(),
                "suggested_coordinates_per_user": t, "suggested_levels": k, "suggested_gamma": gamma,
                "suggested_mse_bound": bound}

    def warnings(self) -> list[str]:
        warnings = super().warnings()
        if self.coordinates > 1 and self.calibration == "tight":
            warnings.append(f"t = {self.coordinates}: the tight calibration composes a user's t reports before the "
                            "shuffle (t eps0), which is sound but loose: gamma is larger than a per-report analysis "
                            "would need (the error bound already counts it)")
        if self.gamma > 0.9:
            warnings.append(f"gamma = {self.gamma:.3g}: most reports are blanket noise; more users, a larger epsilon "
                            "or t = 1 help")
        reports = self.n_users * self.coordinates / self.dimension  # a coordinate's, in expectation
        if reports < 100:  # a reviewer's finding: at 28 reports, 7.7% of |z| > 1.96
            warnings.append(f"each coordinate's stderr is estimated from about n t / d = {reports:.3g} reports: so "
                            f"few leave it uncertain itself (by about {math.sqrt(2 / max(reports - 1, 1)):.0%}), and "
                            "± stderr covers the true sum less often than a normal's would (stderr_bound, an upper "
                            "bound, covers it); more users or a larger t help")
        return warnings

    @property
    def privacy(self) -> PrivacyDescription:
        return self._description({"levels": self.levels, "coordinates": self.coordinates},
                                 "replace-one: neighbouring datasets differ in one user's whole vector; n is public",
                                 ("the parameters",))


INVERSE_COUNT_TERMS = 1 << 20  # E[1/c]'s sum takes every count of its window up to this many, else a grid
INVERSE_COUNT_GRID = 1 << 16  # the grid's points over a wider window


@functools.lru_cache(maxsize=64)
@on_disk("blanket-vector-counts", (__file__, shuffle.__file__))  # kept per version of this code (privacy.evaluation_cache)
def _inverse_count_mean(n_users: int, coordinates: int, dimension: int) -> float:
    """E[1 / c | c >= 1] for a coordinate's report count c ~ Bin(n, t / d), from the exact binomial law (kept for
    the designs :func:`suggested_design` compares, which share it for each t; and on disk, as the calibration's
    values). The sums are math.fsum's, correctly rounded: an OpenBLAS dot product split a window of more than 10^4
    terms across its threads, so the last digits changed with the host's core count (n = 10^7, t = 3, d = 50), and
    its threads' wait for more work took 0.025 s of CPU after every such command at n = 5 x 10^6, d = 20.

    The sum runs over mean +- 14 sd. A window of more than INVERSE_COUNT_TERMS counts (n t / d above about
    10^9) is summed on an evenly spaced grid of about INVERSE_COUNT_GRID of them, whose spacing is under
    sd / 2000: the terms are smooth on the scale of sd, so by Poisson summation the grid's weighted mean differs
    from the sum over every count by a relative exp(-2 pi^2 (sd / spacing)^2) (docs/derivations.md, "Vector
    sums"; tests/protocols compare the two). Every count of a window of 2.8 x 10^7 took 45 s at n = 10^12."""
    n, q = n_users, coordinates / dimension
    if q == 1:
        return 1 / n
    sd = math.sqrt(n * q * (1 - q))
    low, high = max(1, math.floor(n * q - 14 * sd - 30)), min(n, math.ceil(n * q + 14 * sd + 30))
    spacing = 1 if high - low < INVERSE_COUNT_TERMS else -(-(high - low) // INVERSE_COUNT_GRID)
    c = np.arange(low, high + 1, spacing)
    weights = shuffle.binomial_pmf(c, n, q)
    return math.fsum(weights / c) / math.fsum(weights)  # correctly rounded: the same on any host


def calibrate_blanket_vector(epsilon: float, delta: float, n_users: int, domain_size: int, calibration: str = "tight",
                             levels: int = 3, coordinates_per_user: int = 1,
                             honest_fraction: float = 1.0) -> BlanketVectorParameters:
    """gamma for (eps, delta)-DP of n users' t reports each; ``domain_size`` is the dimension d; k = ``levels``
    (default 3, the authors' default), t = ``coordinates_per_user`` (default 1, the paper's best)."""
    coordinates = coordinates_per_user
    epsilon, delta = check_epsilon(epsilon), check_delta(delta)
    n = check_integer("n_users", n_users, 2, N_USERS_MAX)
    d = check_integer("dimension", domain_size, 1, BlanketVectorParameters.domain_max)
    k = check_integer("levels", levels, 1, 2**16)
    t = check_integer("coordinates-per-user", coordinates, 1, d)
    honest = honest_users(n, check_honest_fraction(honest_fraction, n))
    if calibration == "tight":
        gamma = blanket.tight_vector_gamma(epsilon, delta, honest, k, t)
    elif calibration == "paper":
        gamma = blanket.paper_vector_gamma(epsilon, delta, honest, d, k, t)
    else:
        raise ParameterError("calibration", f"one of {', '.join(blanket.METHODS)}", calibration)
    return BlanketVectorParameters(epsilon=epsilon, delta=delta, n_users=n, dimension=d, levels=k, coordinates=t,
                                   calibration=calibration, gamma=gamma, honest_fraction=float(honest_fraction))


SUGGESTED_T, SUGGESTED_K = 10, 10  # the designs calibrate compares: t and k in 1..10, the paper's grids


def suggested_design(parameters: BlanketVectorParameters) -> tuple[int, int, float, float]:
    """(t, k, gamma, mse_bound) of the design with the least mean square error bound among t <= min(d, 10),
    k <= 10, each calibrated like ``parameters`` (a calibration that cannot meet the target is skipped; of equal
    bounds, ``parameters``' own design, then the least t, then the least k).

    A design's bound grows strictly with gamma (docs/derivations.md, "Vector sums"), so its value at gamma = 0,
    the rounding and the sampling of coordinates alone, is a floor that costs no calibration. Designs are
    calibrated in the order of their floors, until a floor reaches the least bound found: every design after it
    has a bound above its floor, so none could be chosen, and the answer is that of calibrating them all (at
    n = 5 x 10^6, d = 20: 78 of the 100, and none of the ten t = 1 ones, which cost 0.2 to 0.4 s each)."""
    n, d = parameters.n_users, parameters.dimension
    best = (parameters.mse_bound(), -1, parameters.coordinates, parameters.levels, parameters.gamma)
    designs = [(t, k) for t in range(1, min(d, SUGGESTED_T) + 1) for k in range(1, SUGGESTED_K + 1)]
    floors = [dataclasses.replace(parameters, coordinates=t, levels=k).mse_bound(gamma=0.0) for t, k in designs]
    for position in sorted(range(len(designs)), key=lambda i: floors[i]):
        if floors[position] >= best[0]:
            break
        t, k = designs[position]
        if (t, k) == (parameters.coordinates, parameters.levels):  # its own design, already the first of best's ties
            continue
        try:
            other = calibrate_blanket_vector(parameters.epsilon, parameters.delta, n, d, parameters.calibration, k, t,
                                             parameters.honest_fraction)
        except ParameterError:
            continue
        best = min(best, (other.mse_bound(), position, t, k, other.gamma))
    bound, _, t, k, gamma = best
    return t, k, gamma, bound


def randomized_rounding(values: np.ndarray, levels: int, rng: np.random.Generator) -> np.ndarray:
    """floor(x k) + Bern(x k - floor(x k)) in {0..k}: unbiased for x k (reference Algorithm 2, step 2)."""
    return rounded(values, levels, rng.random(values.shape))


def rounded(values: np.ndarray, levels: int, uniforms: np.ndarray) -> np.ndarray:
    """:func:`randomized_rounding` given its uniforms: floor(x k) + [u < x k - floor(x k)]. x k is taken in float64
    (exact for float32 values and k < 2^29), and so is its fraction x k - floor(x k) (for x k >= 0, or -0.0), in
    place: one array besides the levels. np.floor is vectorized; np.modf, which gives the same two parts, calls the
    C library once a value (0.035 s more of CPU at n = 5 x 10^6)."""
    scaled = np.multiply(values, levels, dtype=np.float64)
    low = np.floor(scaled)
    scaled -= low
    level = low.astype(np.int64)
    level += uniforms < scaled
    return level


def distinct_coordinates(users: int, dimension: int, t: int, rng: np.random.Generator) -> np.ndarray:
    """Each user's t distinct coordinates, uniform: the j-th is uniform over the d - j not yet taken, drawn as a
    rank and moved past the taken ones in increasing order. O(n t^2) work, against O(n d) for random keys."""
    chosen = np.empty((users, t), dtype=np.int64)
    for j in range(t):
        rank = rng.integers(0, dimension - j, size=users)
        for taken in np.sort(chosen[:, :j], axis=1).T:  # ascending: each one at or below the rank moves it up
            rank += rank >= taken
        chosen[:, j] = rank
    return chosen


class VectorDraws(NamedTuple):
    """Every random choice of a batch of :class:`VectorClient` users, none of which depends on their vectors: each
    user's t coordinates, the rounding's uniforms, the blanket's coins, and the uniform levels of the replaced."""

    chosen: np.ndarray  # (users, t) coordinates
    uniforms: np.ndarray  # (users, t) in [0, 1)
    replaced: np.ndarray  # (users t,) bool
    levels: np.ndarray  # the replaced reports' levels, uniform over {0..k}


class VectorClient:
    """R_{d,k,n,t} (reference Algorithm 2): t distinct coordinates (integer random keys), each randomly rounded to
    {0..k} and sent as (coordinate, value), the value replaced by a uniform level with probability gamma.

    Its randomness is drawn apart from the arithmetic (:meth:`draw`, then :meth:`write`), in the order of one
    stream: no draw depends on the vectors, so the simulator draws a batch's while other threads compute the
    messages of the batches before it (``simulate.runner``), the same messages as one thread's."""

    def __init__(self, parameters: BlanketVectorParameters) -> None:
        self.parameters, self.layout = parameters, parameters.layout

    def randomize(self, vectors, rng: RNGLike = None) -> MessageBatch:
        return self.randomize_checked(check_vectors(vectors, self.parameters.dimension), rng)

    def randomize_checked(self, vectors: np.ndarray, rng: RNGLike = None) -> MessageBatch:
        """:meth:`randomize` over vectors :func:`check_vectors` has passed."""
        records = np.empty(vectors.shape[0] * self.parameters.coordinates, dtype=self.layout.record_dtype)
        self.write(vectors, self.draw(vectors.shape[0], resolve(rng)), records)
        return self.layout.batch({name: records[name] for name in self.layout.names})

    def draw(self, users: int, rng: np.random.Generator) -> VectorDraws:
        """The randomness of ``users`` clients (:class:`VectorDraws`)."""
        p, t = self.parameters, self.parameters.coordinates
        if t == p.dimension:
            chosen = np.tile(np.arange(t), (users, 1))
        elif t * t <= p.dimension:
            chosen = distinct_coordinates(users, p.dimension, t, rng)
        else:
            keys = rng.integers(0, 2**62, size=(users, p.dimension), dtype=np.int64)
            chosen = np.argpartition(keys, t - 1, axis=1)[:, :t]
        uniforms = rng.random((users, t))
        replaced = coins(at_least(p.gamma), users * t, rng)
        return VectorDraws(chosen, uniforms, replaced, rng.integers(0, p.levels + 1, size=int(replaced.sum())))

    def write(self, vectors: np.ndarray, draws: VectorDraws, out: np.ndarray) -> None:
        """The messages of ``vectors`` (checked) under ``draws`` into ``out``, t rows a user of the layout's record
        dtype: numpy's arithmetic alone, which releases the GIL."""
        values = rounded(_picked(vectors, draws.chosen), self.parameters.levels, draws.uniforms).ravel()
        values[draws.replaced] = draws.levels
        out["coordinate"] = draws.chosen.ravel()
        out["value"] = values


def _picked(vectors: np.ndarray, chosen: np.ndarray) -> np.ndarray:
    """vectors[i, chosen[i, j]], in the vectors' dtype: from a C-contiguous array by one take over its flat
    values (0.6 of take_along_axis's time: no index arrays broadcast per axis), else by take_along_axis."""
    if not vectors.flags.c_contiguous:
        return np.take_along_axis(vectors, chosen, axis=1)
    rows = np.arange(0, vectors.size, vectors.shape[1])[:, None]
    return vectors.reshape(-1).take(rows + chosen, mode="clip")  # every index in range: clip moves none


def _packed_bytes(batch: MessageBatch, layout: MessageLayout) -> bool:
    """Whether ``batch`` is stored row-major in ``layout``'s records of one byte a column, coordinate then value
    (d and k + 1 at most 256): the simulator's population, and each slice of it."""
    records = batch.records
    return (records is not None and records.dtype == layout.record_dtype and records.dtype.itemsize == 2
            and records.flags.c_contiguous)


def _byte_pair_table(records: np.ndarray, d: int, types: int) -> np.ndarray:
    """The (coordinate, level) counts of records of two bytes, in one pass: each record read as the little-endian
    16-bit number coordinate + 256 level, counted over the 2^16 of them; a record outside [0, d) x [0, types) is
    malformed (:meth:`MessageLayout.validate`'s rule) and left out of the (d, types) table returned."""
    counts = np.bincount(records.view("<u2"), minlength=1 << 16).reshape(256, 256)  # [level, coordinate]
    return counts[:types, :d].T


@dataclass
class VectorAggregate:
    """Per coordinate: the sum of the reported levels, of their squares (for the standard errors), and the number
    of reports; messages seen and dropped."""

    sums: np.ndarray
    squares: np.ndarray
    counts: np.ndarray
    messages: int = 0
    malformed: int = 0


class VectorAnalyzer:
    """A_{d,k,t} (reference Algorithm 3): relabel by coordinate, aggregate, debias (``estimate``)."""

    order_free: ClassVar[bool] = True  # sums and counts: the messages' order cannot change them (simulate.runner)

    def __init__(self, parameters: BlanketVectorParameters, queries=None) -> None:
        if queries is not None:
            raise ParameterError("candidates", "left out for vector sums (every coordinate is estimated)", queries)
        self.parameters, self.layout = parameters, parameters.layout

    def agg_init(self) -> VectorAggregate:
        d = self.parameters.dimension
        return VectorAggregate(np.zeros(d, dtype=np.int64), np.zeros(d, dtype=np.int64), np.zeros(d, dtype=np.int64))

    def agg_update(self, agg: VectorAggregate, messages: MessageBatch) -> VectorAggregate:
        d, types = self.parameters.dimension, self.parameters.levels + 1
        for part in messages.slices():
            if _packed_bytes(part, self.layout):
                table, rows = _byte_pair_table(part.records, d, types), len(part)
            else:
                clean, dropped = self.layout.validate(part)
                cells = clean["coordinate"].astype(np.int64) * types + clean["value"]  # (coordinate, level) counts
                table, rows = np.bincount(cells, minlength=d * types).reshape(d, types), len(part)
            counted = int(table.sum())
            agg.sums += table @ np.arange(types)
            agg.squares += table @ np.arange(types) ** 2
            agg.counts += table.sum(axis=1)
            agg.messages += counted
            agg.malformed += rows - counted
        return agg

    def merge(self, aggs) -> VectorAggregate:
        total = self.agg_init()
        for a in aggs:
            total.sums += a.sums
            total.squares += a.squares
            total.counts += a.counts
            total.messages += a.messages
            total.malformed += a.malformed
        return total

    def finalize(self, agg: VectorAggregate, reporters: int | None = None) -> VectorSum:
        """The sums of the ``reporters`` users' vectors (default: the calibrated n), each with its estimated standard
        error and, beside it, the upper bound (at the estimate)."""
        p = self.parameters
        total = p.estimate(agg.sums, agg.counts, reporters)
        bound = p.standard_error(total, agg.counts, reporters=reporters)
        return VectorSum(p, total, p.estimated_standard_error(agg.sums, agg.squares, agg.counts, bound, reporters),
                         None, agg.messages, agg.malformed, standard_error_bounds=bound, reporters=reporters)

    @classmethod
    def working_bytes(cls, parameters: BlanketVectorParameters, full_domain: bool = True) -> int:
        return 40 * parameters.dimension + 24 * min(SLICE_ROWS, parameters.n_users * parameters.coordinates)


def grid_vector(parameters: BlanketVectorParameters, item: int) -> np.ndarray:
    """The levels (in {0..k}) of the grid vector of [0, 1]^d numbered ``item``, its d digits in base k + 1: the
    exact auditor's inputs. A vector off the grid rounds to a mixture of grid vectors, and the hockey-stick
    divergence is jointly convex, so the worst pair of inputs is a pair of grid vectors (docs/privacy.md)."""
    return (item // (parameters.levels + 1) ** np.arange(parameters.dimension)) % (parameters.levels + 1)


def vector_law_size(parameters: BlanketVectorParameters, item: int = 0) -> exact_laws.LawSize:
    """:func:`vector_message_law`'s size before it is built: C(d, t) (k + 1)^t outcomes (the coordinates and
    their reported levels), each a histogram over d (k + 1) types, a type receiving at most t reports; an
    audit builds one per grid vector, (k + 1)^d of them."""
    d, k, t = parameters.dimension, parameters.levels, parameters.coordinates
    states = exact_laws.comb(d, t) * exact_laws.power(k + 1, t)
    return exact_laws.LawSize(parameters.protocol, states, d * (k + 1), 1, "dimension", d,
                              others="fewer --levels or --coordinates-per-user")


def vector_message_law(parameters: BlanketVectorParameters, item: int) -> dict[tuple[int, ...], float]:
    """One user's t reports for the grid vector ``item``, as an exact law over histograms of the d (k + 1)
    (coordinate, level) types: each t-subset of coordinates with probability 1 / C(d, t), each of its levels
    kept with probability 1 - gamma, else uniform over the k + 1."""
    d, k, g, t = parameters.dimension, parameters.levels, parameters.gamma, parameters.coordinates
    exact_laws.check_law(vector_law_size(parameters, item))
    x = grid_vector(parameters, item)
    subsets = math.comb(d, t)
    if subsets * (k + 1) ** t > EXACT_LAW_MAX:
        raise ParameterError("method", f"statistical for an instance this large (one user's reports take "
                             f"{subsets * (k + 1) ** t:.3g} states, above {EXACT_LAW_MAX:.0e})", "exact")
    law: dict[tuple[int, ...], float] = {}
    for chosen in itertools.combinations(range(d), t):
        for levels in itertools.product(range(k + 1), repeat=t):
            key = [0] * (d * (k + 1))
            p = 1 / subsets
            for coordinate, level in zip(chosen, levels):
                key[coordinate * (k + 1) + level] += 1
                p *= (1 - g) * (level == x[coordinate]) + g / (k + 1)
            law[tuple(key)] = law.get(tuple(key), 0.0) + p
    return law


def grid_pairs(parameters: BlanketVectorParameters, users: int):
    """The auditor's neighbouring pairs for vectors: every pair of the (k + 1)^d grid vectors for the changed user,
    every multiset of them for the others (:func:`~privagg.protocols.parameters.neighbouring_pairs`)."""
    return neighbouring_pairs((parameters.levels + 1) ** parameters.dimension, users)
