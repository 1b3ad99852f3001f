"""Balls into bins: M^BIB, FE0 and FE1 (Luo, Wang, Yi, CCS 2022, §3).

Each protocol is frozen parameters (with their theory), a calibration
function returning them, and roles built from them:

* ``bib`` -- Algorithm 1, M^BIB, as a central mechanism: users send their
  value to a trusted :class:`BallsIntoBinsCurator`, which adds n floor(rho)
  noisy balls uniform over [B] plus one more per user with probability
  rho - floor(rho).
* ``fe0`` -- Algorithms 2-3: each user sends x plus rho blanket noises
  uniform in [B] (:class:`FE0Client`); the analyzer counts and debiases by
  n rho / B (:class:`FE0Analyzer`). In the shuffle model its output is
  exactly M^BIB's.
* ``fe1`` -- §3.2: each user sends (u, v, h_{u,v}(x)) for a random hash of
  the universal family, plus dummies (u', v', w') uniform
  (:class:`FE1Client`); the analyzer counts the messages whose hash of x
  matches and debiases by m p_col + m rho / b, then divides by 1 - p_col
  (:class:`FE1Analyzer`).

The analyzers debias with the m users whose reports they counted (FE0: by
m rho / B), the calibrated n unless told otherwise: a task closed early
counts m >= ceil(G n) reports, and only their dummies are in the counts.

All three share the noise level mu (expected noisy balls per special set;
:mod:`privagg.privacy.balls_into_bins`) and rho = mu * bins / n, where
``bins`` is B for FE0/M^BIB and b for FE1. Derivations of the estimator,
its variance and the max-error bound: docs/derivations.md.

This module needs numpy only: calibration loads scipy, and FE1's analyzer
loads the numba kernels, when they are first used.
"""

from __future__ import annotations

import dataclasses
import functools
import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from ..core import bisection
from ..core.encoding import check_item_key
from ..core.hashing import MAX_MODULUS_BITS, UniversalHash
from ..core.messages import SLICE_ROWS, Column, MessageBatch, MessageLayout
from ..core.primes import next_prime
from ..core.randomness import RNGLike, resolve
from ..errors import ParameterError, check_delta, check_epsilon, check_integer
from ..privacy import balls_into_bins as calibration_bib
from ..privacy import shuffle
from ..privacy.description import REPLACE_ONE, Mechanism, PrivacyDescription
from ..privacy.evaluation_cache import on_disk
from . import exact_laws
from .exact_laws import LawSize
from .parameters import FrozenParameters, check_item_codes, honest_users, with_reporters
from .results import MAX_ERROR_BETA, FrequencyTable, count_among

HISTOGRAM_DOMAIN_MAX = 2**28  # FE0 and M^BIB keep a count per domain item
HASHED_DOMAIN_MAX = 2 ** (MAX_MODULUS_BITS - 1)  # FE1: q < 2^50
N_USERS_MAX = 2**53  # beyond it n is not exact in floating point, where the theory computes with it


def dummy_counts(n_users: int, rho: float, rng: np.random.Generator) -> np.ndarray:
    """Per user: floor(rho) dummies plus one more with probability rho - floor(rho).

    The coin is ``uniform double < frac``: its probability is frac rounded up
    to a multiple of 2^-53, never less noise than calibrated.
    """
    whole = math.floor(rho)
    return whole + (rng.random(n_users) < rho - whole).astype(np.int64)


def total_dummies(n_users: int, rho: float, rng: np.random.Generator) -> int:
    """The sum of :func:`dummy_counts` drawn in one step: n floor(rho) + Bin(n, frac) (simulation only)."""
    whole = math.floor(rho)
    return n_users * whole + int(rng.binomial(n_users, rho - whole))


# --- parameters ---------------------------------------------------------------------------------------

@dataclass(frozen=True)
class BallsIntoBinsParameters(FrozenParameters):
    """Everything the roles of M^BIB / FE0 need, and the theory of their error.

    Built by a calibration function (:func:`calibrate_fe0`, ...); round-trips
    through :meth:`to_dict` / :meth:`from_dict` exactly.
    """

    protocol: ClassVar[str]
    mechanism: ClassVar[str]
    model: ClassVar[str] = "shuffle"
    trusted: ClassVar[tuple[str, ...]] = ("shuffler",)
    domain_max: ClassVar[int] = HISTOGRAM_DOMAIN_MAX
    # The options that set noise_bins (where the rho dummies per user spread) and which way shrinks rho, for
    # error messages: a run with too many messages names the one the user gave, else the first that is set.
    noise_options: ClassVar[dict[str, str]] = {"domain": "lower"}

    epsilon: float
    delta: float
    n_users: int
    domain_size: int
    calibration: str
    mu: float
    rho: float
    # The key that maps text items into [B] (hex; privagg.core.encoding). Public, like every field: fixing it
    # in the parameters keeps one deployment's codes stable across runs. None: not chosen (integer items).
    item_key: str | None = dataclasses.field(default=None, kw_only=True)
    # G: the guarantee holds while at least ceil(G n) users follow the protocol; the dummies the others would
    # send are not counted on (calibrate_fe0 / calibrate_fe1). 1 for M^BIB, whose curator adds the noise.
    honest_fraction: float = dataclasses.field(default=1.0, kw_only=True)

    def __post_init__(self) -> None:
        check_epsilon(self.epsilon)
        check_delta(self.delta)
        check_integer("n_users", self.n_users, 2, N_USERS_MAX)
        if self.item_key is not None:
            check_item_key(self.item_key)
        check_honest_fraction(self.honest_fraction, self.n_users)
        check_integer("domain", self.domain_size, 2, self.domain_max)
        if self.calibration not in calibration_bib.METHODS:
            raise ParameterError("calibration", f"one of {', '.join(calibration_bib.METHODS)}", self.calibration)
        if not (self.mu >= 0 and math.isfinite(self.mu)):
            raise ParameterError("mu", "a finite number >= 0", self.mu)
        rho = self.mu * self.noise_bins / self.honest_users
        if not math.isclose(self.rho, rho, rel_tol=1e-12, abs_tol=1e-300):
            raise ParameterError("rho", f"mu * bins / ceil(honest_fraction n_users) = {rho!r}", self.rho)
        floor = self.no_noise_probability()
        if floor > self.delta:
            raise ParameterError("mu", f"large enough that the chance of no noise where the neighbour's message "
                                 f"would go ({floor:.3g}) is at most delta", self.mu)

    def no_noise_probability(self) -> float:
        """(1 - theta) Pr[no dummy in S_y minus S_x]: a lower bound on delta at every epsilon (numpy-free).

        When no dummy lands where the neighbour's real message would go, the
        output is impossible under the neighbour, so delta can be no smaller
        (docs/derivations.md, "Privacy loss of M^BIB"). Checked whenever
        parameters are built, so that even a device without scipy refuses
        parameters with (next to) no noise.
        """
        whole, frac = math.floor(self.rho), self.rho - math.floor(self.rho)
        hit = (1.0 - self.overlap) / self.noise_bins
        log_p = math.log1p(-self.overlap) + self.honest_users * (whole * math.log1p(-hit) + math.log1p(-frac * hit))
        return math.exp(log_p)

    def verify(self) -> None:
        """Check that mu buys the claimed (epsilon, delta) without recalibrating (loads scipy).

        ``closed_form``: mu >= 32 ln(2/delta)/eps^2 with eps <= 1. Otherwise
        the hockey-stick bound :meth:`delta_at` at epsilon must be at most
        delta (it bounds both criteria from below, so a correctly calibrated
        mu always passes; a relative 1e-9 absorbs rounding where the two meet).
        """
        if self.calibration == "closed_form":
            needed = calibration_bib.closed_form_noise(self.epsilon, self.delta)
            if self.mu < needed:
                raise ParameterError("mu", f">= 32 ln(2/delta)/eps^2 = {needed:.6g}", self.mu)
            return
        self.check_delta_at("mu", self.mu)

    # --- protocol-specific ---------------------------------------------------------------------------
    @property
    def noise_bins(self) -> int:
        """Where noisy balls land: B for FE0 and M^BIB, b for FE1."""
        return self.domain_size

    @property
    def collision_probability(self) -> float:
        return 0.0

    @property
    def layout(self) -> MessageLayout:
        return MessageLayout((Column("value", 0, self.domain_size),))

    # --- theory ----------------------------------------------------------------------------------------
    @property
    def messages_per_user(self) -> float:
        """Expected messages per user, 1 + rho."""
        return 1.0 + self.rho

    @property
    def messages_sd(self) -> float:
        """Standard deviation of the total number of messages: sqrt(n f (1 - f)), f = rho - floor(rho)."""
        frac = self.rho - math.floor(self.rho)
        return math.sqrt(self.n_users * frac * (1 - frac))

    # The theory below is that of the m users whose reports were counted (``reporters``; default: the calibrated
    # n): their real messages and their dummies are what the counts hold (docs/derivations.md, "An early close").
    def noise_mean(self, reporters: int | None = None) -> float:
        """Expected dummy messages matching one item, m rho / bins (mu at m = ceil(G n))."""
        return self.counted(reporters) * self.rho / self.noise_bins

    def noise_variance(self, reporters: int | None = None) -> float:
        """Variance of the dummies matching one item: Bin(m floor(rho), 1/bins) + Bin(m, frac/bins)."""
        whole = math.floor(self.rho)
        hit, frac_hit = 1.0 / self.noise_bins, (self.rho - whole) / self.noise_bins
        return self.counted(reporters) * (whole * hit * (1 - hit) + frac_hit * (1 - frac_hit))

    def debias(self, counts: np.ndarray, reporters: int | None = None) -> np.ndarray:
        """(count - m p_col - m rho / bins) / (1 - p_col): unbiased for g_x among the m users counted."""
        p, m = self.collision_probability, self.counted(reporters)
        return (np.asarray(counts, dtype=np.float64) - m * p - self.noise_mean(m)) / (1.0 - p)

    def standard_error(self, frequency=0.0, reporters: int | None = None) -> np.ndarray | float:
        """Standard deviation of the estimate of an item with true ``frequency`` g among the m users counted.

        sqrt((m - g) p_col (1 - p_col) + noise_variance) / (1 - p_col); largest
        at g = 0. Reported results plug in the estimate clipped to [0, m].
        """
        p, m = self.collision_probability, self.counted(reporters)
        g = np.clip(frequency, 0, m)
        return np.sqrt((m - g) * p * (1 - p) + self.noise_variance(m)) / (1 - p)

    def max_error_bound(self, beta: float = MAX_ERROR_BETA, reporters: int | None = None) -> float:
        """alpha with Pr[max_x |est_x - g_x| <= alpha] >= 1 - beta (Chernoff + union bound).

        max(sqrt(3 L log(2B/beta)), 3 log(2B/beta)) / (1 - p_col), with
        L = m p_col + m rho / bins (docs/derivations.md).
        """
        if not 0 < beta < 1:
            raise ParameterError("beta", "in (0, 1)", beta)
        p, m = self.collision_probability, self.counted(reporters)
        lam = m * p + self.noise_mean(m)
        log_term = math.log(2 * self.domain_size / beta)
        return max(math.sqrt(3 * lam * log_term), 3 * log_term) / (1 - p)

    def noise_fields(self, scale: float) -> dict[str, float]:
        """The fields that set the noise, multiplied by ``scale`` (for the auditors)."""
        return {"mu": self.mu * scale, "rho": self.rho * scale}

    def costs(self) -> dict[str, dict[str, float]]:
        """Expected messages per party: each user sends 1 + rho, the analyzer (or curator) receives them all."""
        return {"user": {"sent": self.messages_per_user}, self.aggregator: {"received": self.n_users *
                                                                            self.messages_per_user}}

    @property
    def aggregator(self) -> str:
        return "analyzer" if self.model == "shuffle" else "curator"

    def theory(self) -> dict[str, float | str]:
        return {"estimate": "(count - n p_col - mu) / (1 - p_col)", "standard_error_at_zero":
                float(self.standard_error(0))}

    def expected_error(self, reporters: int | None = None) -> dict[str, float]:
        return {"messages_per_user": self.messages_per_user, "bits_per_message": self.bits_per_message,
                "standard_error": float(self.standard_error(0, reporters)),
                "standard_error_at": "an item no user holds (the largest)",
                "max_error_bound": self.max_error_bound(MAX_ERROR_BETA, reporters), "max_error_beta": MAX_ERROR_BETA}

    # --- privacy ---------------------------------------------------------------------------------------
    @property
    def overlap(self) -> float:
        """theta: the chance that one message lies in two items' special sets (FE1's p_col)."""
        return self.collision_probability

    @property
    def privacy(self) -> PrivacyDescription:
        caveats = []
        if self.calibration == "closed_form":
            caveats.append("the closed form is the paper's theorem as reconstructed, proved here for eps <= 1 only")
            if self.overlap:
                caveats.append("the closed form ignores FE1's overlapping special sets; delta_at(epsilon) gives "
                               "the delta this mu actually buys")
        return PrivacyDescription.of(Mechanism(
            mechanism=self.mechanism,
            parameters={"mu": self.mu, "n_users": self.n_users, "honest_users": self.honest_users,
                        "bins": self.noise_bins, "overlap": self.overlap},
            epsilon=self.epsilon, delta=self.delta, model=self.model, neighbouring=REPLACE_ONE,
            trusted=self.trusted, honest_fraction=self.honest_fraction,
            assumptions=("all n users follow the protocol (none drops out or colludes)" if self.honest_fraction == 1
                         else f"at least {self.honest_users} of the {self.n_users} users follow the protocol; the "
                              "others may drop out or collude (their dummies are not counted on)",),
            public=("the parameters", "the item-hash key"),
            method=self.calibration, method_detail=calibration_bib.METHOD_DETAIL[self.calibration]
            + ("; FE1's overlapping special sets by joint convexity" if self.overlap and
               self.calibration != "closed_form" else ""),
            reference="docs/derivations.md, 'Balls into bins'" + (
                " and 'FE1's overlapping special sets'" if self.overlap else ""), caveats=tuple(caveats)))

    def delta_at(self, epsilon: float) -> float:
        """The delta this noise level buys at ``epsilon`` (hockey-stick bound; any calibration)."""
        return kept_delta_at(epsilon, self.mu, self.honest_users, self.noise_bins, self.overlap)

    def check_codes(self, codes) -> np.ndarray:
        return check_item_codes(codes, self.domain_size)

    def check_population(self, codes: np.ndarray) -> None:
        """The condition on the data the guarantee rests on: none for balls into bins."""


@dataclass(frozen=True)
class FE0Parameters(BallsIntoBinsParameters):
    """P^FE0: value + rho blanket noises uniform over [B]."""

    protocol: ClassVar[str] = "fe0"
    mechanism: ClassVar[str] = "FE0: M^BIB over [B] with the users' dummies as noisy balls"


@dataclass(frozen=True)
class BIBParameters(BallsIntoBinsParameters):
    """M^BIB with a trusted curator: same noise as FE0, one message per user."""

    protocol: ClassVar[str] = "bib"
    mechanism: ClassVar[str] = "M^BIB: balls into bins, noise added by a trusted curator"
    model: ClassVar[str] = "central"
    trusted: ClassVar[tuple[str, ...]] = ("curator",)

    def __post_init__(self) -> None:
        if self.honest_fraction != 1:
            raise ParameterError("honest-fraction", "1 for M^BIB (the curator adds the noise, not the users)",
                                 self.honest_fraction)
        super().__post_init__()

    @property
    def messages_per_user(self) -> float:
        return 1.0


@dataclass(frozen=True)
class FE1Parameters(BallsIntoBinsParameters):
    """P^FE1: one hashed message (u, v, h_{u,v}(x)) plus rho uniform dummies; b bins, prime q."""

    protocol: ClassVar[str] = "fe1"
    mechanism: ClassVar[str] = "FE1: M^BIB over universal hashes (u, v, h_{u,v}(x)), b bins"
    domain_max: ClassVar[int] = HASHED_DOMAIN_MAX
    noise_options: ClassVar[dict[str, str]] = {"c": "raise", "bins": "lower"}

    bins: int
    modulus: int
    c: float | None = None

    def __post_init__(self) -> None:
        check_integer("bins", self.bins, 2, HASHED_DOMAIN_MAX)
        check_integer("domain", self.domain_size, 2, HASHED_DOMAIN_MAX)
        check_integer("n_users", self.n_users, 2, N_USERS_MAX)
        modulus = next_prime(max(self.domain_size, self.bins))
        if self.modulus != modulus:
            raise ParameterError("modulus", f"the smallest prime >= max(domain, bins), {modulus}", self.modulus)
        if self.c is not None and self.bins != (bins := bins_for(self.n_users, self.c)):
            raise ParameterError("bins", f"floor(n / ln^c n) = {bins} for c = {self.c}", self.bins)
        super().__post_init__()

    @property
    def noise_bins(self) -> int:
        return self.bins

    def warnings(self) -> list[str]:
        """b >= B: FE1 hashes into at least as many bins as there are items, and its dummies (rho = mu b / n)
        grow with b, while FE0 spreads the same mu over B bins without hashing: it is cheaper. A warning, not a
        cap: b = floor(n / ln^c n) is the authors' choice (docs/derivations.md), and --bins sets any b."""
        found = super().warnings()
        if self.protocol != "fe1" or self.bins < self.domain_size:
            return found
        try:
            fe0 = calibrate_fe0(self.epsilon, self.delta, self.n_users, self.domain_size, self.calibration,
                                self.honest_fraction)
            compared = f" (rho = {fe0.rho:.3g} dummies a user there, against {self.rho:.3g} here)"
        except ParameterError:  # FE0 refuses this domain or calibration: no number to compare
            fe0, compared = None, ""
        if fe0 is not None and fe0.rho >= self.rho:
            return found
        return found + [f"b = {self.bins:,} bins is at least the domain's B = {self.domain_size:,} items: FE1 hashes "
                        f"into more bins than there are items, and its noise grows with b; fe0 (no hashing, B bins) "
                        f"is cheaper here{compared}, or give FE1 fewer --bins (or a larger --c)"]

    @functools.cached_property
    def hash(self) -> UniversalHash:
        return UniversalHash(self.modulus, self.bins)

    @property
    def collision_probability(self) -> float:
        return self.hash.collision_probability

    def derived(self) -> dict[str, Any]:
        return {"collision_probability": self.collision_probability}

    @property
    def layout(self) -> MessageLayout:
        q = self.modulus
        return MessageLayout((Column("u", 1, q), Column("v", 0, q), Column("w", 0, self.bins)))


# --- calibration ------------------------------------------------------------------------------------


def check_honest_fraction(fraction: float, n_users: int) -> float:
    """G in (0, 1], with at least 2 honest users."""
    if isinstance(fraction, bool) or not (isinstance(fraction, (int, float)) and 0 < fraction <= 1):
        raise ParameterError("honest-fraction", "in (0, 1]", fraction)
    if honest_users(n_users, fraction) < 2:
        raise ParameterError("honest-fraction", f"at least 2 / n = {2 / n_users:.3g} (two honest users)", fraction)
    return float(fraction)


# A calibration's mu, and the delta a mu buys, are pure functions of their arguments and of the code that computes
# them: kept on disk per version of that code (privacy.evaluation_cache, as the blanket accountant's values), so that
# a run at settings met before reads them, imports no scipy.special (the binomial tails' special functions: 0.2-0.5 s
# of CPU) and searches nothing
CALIBRATION_SOURCES = (calibration_bib.__file__, shuffle.__file__, bisection.__file__)
kept_calibration = on_disk("balls-into-bins", CALIBRATION_SOURCES)(calibration_bib.calibrate)
kept_delta_at = on_disk("balls-into-bins", CALIBRATION_SOURCES)(calibration_bib.delta_at)  # each report's profile


@functools.lru_cache(maxsize=16)
def _noise(epsilon: float, delta: float, honest: int, bins: int, calibration: str, overlap: float) -> float:
    """mu of :func:`privagg.privacy.balls_into_bins.calibrate`, kept on disk (:data:`kept_calibration`) and in the
    process: ``privagg estimate`` calibrates before reading its input (for the file's estimated n,
    :func:`privagg.simulate.frequency.check_resources`) and again for the n read, the same search where the
    estimate was exact (Parquet, .npy, text under a mebibyte): 0.04 s of CPU at n = 10^5, B = 2^24, twice."""
    return kept_calibration(epsilon, delta, honest, bins, calibration, overlap)


def _calibrated(cls, epsilon, delta, n_users, domain_size, calibration, noise_bins=None, overlap=0.0,
                honest_fraction=1.0, **fields):
    """``cls`` with mu calibrated for noisy balls over ``noise_bins`` (default: the domain) and FE1's ``overlap``,
    counting only the dummies of ceil(honest_fraction n) users: rho = mu bins / ceil(G n)."""
    epsilon, delta = check_epsilon(epsilon), check_delta(delta)
    n = check_integer("n_users", n_users, 2, N_USERS_MAX)
    domain = check_integer("domain", domain_size, 2, cls.domain_max)
    honest = honest_users(n, check_honest_fraction(honest_fraction, n))
    bins = domain if noise_bins is None else noise_bins
    if not isinstance(calibration, str) or calibration not in calibration_bib.METHODS:  # before the cache hashes it
        raise ParameterError("calibration", f"one of {', '.join(calibration_bib.METHODS)}", calibration)
    mu = _noise(epsilon, delta, honest, bins, calibration, overlap)
    return cls(epsilon=epsilon, delta=delta, n_users=n, domain_size=domain, calibration=calibration,
               mu=mu, rho=mu * bins / honest, honest_fraction=float(honest_fraction), **fields)


def calibrate_fe0(epsilon: float, delta: float, n_users: int, domain_size: int, calibration: str = "numeric",
                  honest_fraction: float = 1.0) -> FE0Parameters:
    """FE0's parameters for (epsilon, delta)-DP in the shuffle model while ceil(G n) users follow it."""
    return _calibrated(FE0Parameters, epsilon, delta, n_users, domain_size, calibration,
                       honest_fraction=honest_fraction)


def calibrate_bib(epsilon: float, delta: float, n_users: int, domain_size: int,
                  calibration: str = "numeric") -> BIBParameters:
    """M^BIB's parameters for (epsilon, delta)-DP with a trusted curator."""
    return _calibrated(BIBParameters, epsilon, delta, n_users, domain_size, calibration)


def bins_for(n_users: int, c: float) -> int:
    """b = floor(n / ln^c n), the authors' choice of FE1's hash range."""
    try:
        return math.floor(n_users / math.log(n_users) ** c)
    except (OverflowError, ZeroDivisionError):  # ln^c n past a float's range, either way
        raise ParameterError("c", f"such that ln^c n is a float (n = {n_users})", c) from None


def calibrate_fe1(epsilon: float, delta: float, n_users: int, domain_size: int, bins: int | None = None,
                  c: float | None = None, calibration: str = "numeric", honest_fraction: float = 1.0,
                  parameters: type[FE1Parameters] | None = None, **fields: Any) -> FE1Parameters:
    """FE1's parameters: b = ``bins``, or b = floor(n / ln^c n) (c = 1 by default, as the authors' code).

    ``parameters``: a subclass of FE1Parameters to build, with its own ``fields`` (sparse vectors)."""
    n = check_integer("n_users", n_users, 2, N_USERS_MAX)
    if bins is not None and c is not None:
        raise ParameterError("bins", "given alone (not together with c)", bins)
    if bins is None:
        c = 1.0 if c is None else float(c)
        if not (c >= 0 and math.isfinite(c)):
            raise ParameterError("c", "a finite number >= 0", c)
        bins = bins_for(n, c)
        if not 2 <= bins <= HASHED_DOMAIN_MAX:
            raise ParameterError("c", f"such that b = floor(n / ln^c n) is in [2, 2^{MAX_MODULUS_BITS - 1}] "
                                 f"(n = {n})", c)
    bins = check_integer("bins", bins, 2, HASHED_DOMAIN_MAX)
    domain = check_integer("domain", domain_size, 2, HASHED_DOMAIN_MAX)
    modulus = next_prime(max(domain, bins))
    return _calibrated(parameters or FE1Parameters, epsilon, delta, n, domain, calibration, noise_bins=bins,
                       overlap=UniversalHash(modulus, bins).collision_probability, honest_fraction=honest_fraction,
                       bins=bins, modulus=modulus, c=c, **fields)


# --- roles --------------------------------------------------------------------------------------------


def _slice_sizes(total: int) -> list[int]:
    """``total`` cut into slices of at most :data:`~privagg.core.messages.SLICE_ROWS`."""
    return [min(SLICE_ROWS, total - lo) for lo in range(0, total, SLICE_ROWS)]


class _BallsClient:
    """What R^FE0 and R^FE1 share: each user's real message, plus floor(rho) or ceil(rho) dummies.

    Messages come in the layout's compact dtypes (:meth:`MessageLayout.batch`),
    as a device would send them and as the simulator stores a population.
    """

    def __init__(self, parameters: BallsIntoBinsParameters) -> None:
        self.parameters, self.layout = parameters, parameters.layout

    def randomize(self, codes, rng: RNGLike = None) -> MessageBatch:
        """Messages of a batch of users (``rng=None``: secure randomness)."""
        rng = resolve(rng)
        return self.messages(self.parameters.check_codes(codes), rng)

    def messages(self, codes: np.ndarray, rng: np.random.Generator) -> MessageBatch:
        """The messages of users holding checked ``codes``: each one's real message, then every dummy."""
        extra = int(dummy_counts(codes.size, self.parameters.rho, rng).sum())
        return MessageBatch.concatenate([self.real_messages(codes, rng), self.dummies(extra, rng)])

    def real_messages(self, codes: np.ndarray, rng: np.random.Generator) -> MessageBatch:
        """One message per user for checked ``codes`` (protocol-specific)."""
        raise NotImplementedError

    def dummies(self, count: int, rng: np.random.Generator) -> MessageBatch:
        """``count`` blanket-noise messages (protocol-specific)."""
        raise NotImplementedError


class FE0Client(_BallsClient):
    """R^FE0 (Algorithm 2): the value, plus floor(rho) or ceil(rho) values uniform in [B]."""

    def real_messages(self, codes: np.ndarray, rng: np.random.Generator) -> MessageBatch:
        return self.layout.batch({"value": codes})

    def dummies(self, count: int, rng: np.random.Generator) -> MessageBatch:
        return self.layout.batch({"value": rng.integers(0, self.parameters.domain_size, size=count)})


class FE1Client(_BallsClient):
    """R^FE1 (§3.2): (u, v, h_{u,v}(x)) for a random key, plus dummies (u', v', w') uniform."""

    def __init__(self, parameters: FE1Parameters) -> None:
        super().__init__(parameters)
        self.hash = parameters.hash

    def real_messages(self, codes: np.ndarray, rng: np.random.Generator) -> MessageBatch:
        u, v = self.hash.sample_keys(codes.size, rng)
        return self.layout.batch({"u": u, "v": v, "w": self.hash.evaluate(u, v, codes)})

    def dummies(self, count: int, rng: np.random.Generator) -> MessageBatch:
        u, v = self.hash.sample_keys(count, rng)
        return self.layout.batch({"u": u, "v": v, "w": rng.integers(0, self.hash.bins, size=count, dtype=np.int64)})


@dataclass
class CountAggregate:
    """Raw match counts per queried item (or per domain item), messages seen and dropped: plain data.

    ``noise`` is the central curator's noisy-ball counts, drawn at its first
    ``finalize`` and kept, so that finalizing again repeats the same release
    instead of spending the privacy budget twice.
    """

    counts: np.ndarray
    messages: int = 0
    malformed: int = 0
    noise: np.ndarray | None = None


class _CountingAnalyzer:
    """What the three analyzers share: count matches per item, add partial counts, debias."""

    # int64 temporaries per message that counting a slice makes: (over the full domain, over candidates)
    count_words: ClassVar[tuple[int, int]] = (0, 0)

    def __init__(self, parameters: BallsIntoBinsParameters, queries=None) -> None:
        self.parameters, self.layout = parameters, parameters.layout
        self.queries = None if queries is None else np.unique(check_item_codes(queries, parameters.domain_size))
        if self.queries is not None and self.queries.size == 0:
            raise ParameterError("candidates", "at least 1 item", "an empty list")

    def _size(self) -> int:
        return self.parameters.domain_size if self.queries is None else self.queries.size

    def agg_init(self) -> CountAggregate:
        return CountAggregate(np.zeros(self._size(), dtype=np.int64))

    def agg_update(self, agg: CountAggregate, messages: MessageBatch) -> CountAggregate:
        """Fold ``messages`` into ``agg`` (in place, and returned); malformed rows are counted in ``malformed``.

        The batch is folded ``SLICE_ROWS`` rows at a time, so that
        validation masks and the kernels' int64 copies take memory in
        proportion to a slice, not to the batch (a simulated population is
        one batch). Counts add, so the aggregate is that of one pass.
        """
        for part in messages.slices():
            clean, dropped = self.layout.validate(part)
            self._count_into(agg.counts, clean)
            agg.messages += len(clean)
            agg.malformed += dropped
        return agg

    def merge(self, aggs: Sequence[CountAggregate]) -> CountAggregate:
        total = self.agg_init()
        for a in aggs:
            total.counts += a.counts
            total.messages += a.messages
            total.malformed += a.malformed
        return total

    def finalize(self, agg: CountAggregate, reporters: int | None = None) -> FrequencyTable:
        """The debiased counts of the ``reporters`` users whose reports ``agg`` holds (default: the calibrated n)."""
        p = self.parameters
        return FrequencyTable(p, with_reporters(p.debias, agg.counts, reporters=reporters), self.queries,
                              agg.messages, agg.malformed, reporters)

    def _count_into(self, counts: np.ndarray, messages: MessageBatch) -> None:
        """Add each item's matching messages to ``counts`` (protocol-specific)."""
        raise NotImplementedError

    @classmethod
    def working_bytes(cls, parameters: BallsIntoBinsParameters, full_domain: bool = True) -> int:
        """About the memory aggregating takes besides the messages, for a simulation's budget.

        The int64 aggregate over the domain (over candidates it is small and
        left out) and one slice's scratch per message: 3 bytes of validation
        masks and the counting's int64 temporaries (``count_words``).
        """
        aggregate = 8 * parameters.domain_size if full_domain else 0
        rows = min(SLICE_ROWS, math.ceil(parameters.n_users * parameters.messages_per_user))
        return aggregate + (3 + 8 * cls.count_words[0 if full_domain else 1]) * rows


class FE0Analyzer(_CountingAnalyzer):
    """A^FE0 (Algorithm 3): one histogram of the values (queried items picked out of it)."""

    count_words = (0, 2)  # np.add.at makes none; count_among makes positions and their clipped copy

    def _count_into(self, counts: np.ndarray, messages: MessageBatch) -> None:
        values = messages["value"]
        if self.queries is None:
            np.add.at(counts, values, 1)  # unlike bincount, no domain-sized temporary per slice
        else:
            counts += count_among(values, self.queries)


class BallsIntoBinsCurator(FE0Analyzer):
    """M^BIB's trusted curator (Algorithm 1): counts the users' values, adds the noisy balls when finalizing.

    The n coins are drawn one by one (:func:`dummy_counts`), not with a
    floating-point binomial sampler, since privacy rests on their law; coins
    and balls are drawn a slice at a time, which changes nothing in their law.
    """

    def __init__(self, parameters: BIBParameters, queries=None, rng: RNGLike = None) -> None:
        super().__init__(parameters, queries)
        self.rng = rng

    def finalize(self, agg: CountAggregate) -> FrequencyTable:
        """The noisy release; the noise is drawn once per aggregate (a second call repeats the release). It is the
        curator's, n users' worth, whoever sent a value: no count of reporters changes the debiasing."""
        if agg.noise is None:
            rng, p = resolve(self.rng), self.parameters
            balls = sum(int(dummy_counts(users, p.rho, rng).sum()) for users in _slice_sizes(p.n_users))
            agg.noise = np.zeros_like(agg.counts)
            for size in _slice_sizes(balls):
                self._count_into(agg.noise, MessageBatch({"value": rng.integers(0, p.domain_size, size=size)}))
        return super().finalize(CountAggregate(agg.counts + agg.noise, agg.messages, agg.malformed))

    @classmethod
    def working_bytes(cls, parameters: BIBParameters, full_domain: bool = True) -> int:
        """Aggregating, or drawing the noise if that takes more: a slice of users' coins (a double, then
        the coin, 9 bytes a user), the noise counts and their sum with the counts."""
        aggregate = 8 * parameters.domain_size if full_domain else 0
        noise = 3 * aggregate + 9 * min(SLICE_ROWS, parameters.n_users)
        return max(super().working_bytes(parameters, full_domain), noise)


class FE1Analyzer(_CountingAnalyzer):
    """A^FE1: per queried x, the messages with h_{u,v}(x) = w; all of [B] by preimage enumeration."""

    count_words = (3, 3)  # the kernels' int64 copies of u, v and w

    def _count_into(self, counts: np.ndarray, messages: MessageBatch) -> None:
        h, u, v, w = self.parameters.hash, messages["u"], messages["v"], messages["w"]  # int64 copies: in h
        if self.queries is None:
            h.count_all(u, v, w, self.parameters.domain_size, out=counts)
        else:
            counts += h.count_matches(u, v, w, self.queries)

    @classmethod
    def working_bytes(cls, parameters: FE1Parameters, full_domain: bool = True) -> int:
        """Aggregating, plus the full-domain kernel's per-thread counters and buckets."""
        rows = min(SLICE_ROWS, math.ceil(parameters.n_users * parameters.messages_per_user))
        kernel = parameters.hash.count_all_bytes(parameters.domain_size, rows) if full_domain else 0
        return super().working_bytes(parameters, full_domain) + kernel

    @staticmethod
    def preimages(parameters: FE1Parameters, messages: int) -> int:
        """The preimages counting ``messages`` messages over all of [B] walks: each message's u x + v = w mod q has
        ceil(q / b) of them (the limits of an analysis: registry.full_domain_preimages)."""
        return messages * -(-parameters.hash.modulus // parameters.hash.bins)


# --- distributional shortcuts (simulation only) ------------------------------------------------------


def _fast_aggregate(client: _BallsClient, codes: np.ndarray, rng: np.random.Generator,
                    analyzer: _CountingAnalyzer) -> CountAggregate:
    """The real messages, then the dummy total drawn in one step; no per-user coins, no shuffle.

    Counts ignore message order, so messages are drawn and counted a slice
    at a time: memory does not grow with n.
    """
    agg = analyzer.agg_init()
    for lo in range(0, codes.size, SLICE_ROWS):
        analyzer.agg_update(agg, client.real_messages(codes[lo:lo + SLICE_ROWS], rng))
    for size in _slice_sizes(total_dummies(codes.size, client.parameters.rho, rng)):
        analyzer.agg_update(agg, client.dummies(size, rng))
    return agg


def fe0_fast_aggregate(parameters: FE0Parameters, codes: np.ndarray, rng: np.random.Generator,
                       analyzer: FE0Analyzer) -> CountAggregate:
    """FE0's shortcut: the true values plus the total noise drawn in one step."""
    return _fast_aggregate(FE0Client(parameters), codes, rng, analyzer)


def fe1_fast_aggregate(parameters: FE1Parameters, codes: np.ndarray, rng: np.random.Generator,
                       analyzer: FE1Analyzer) -> CountAggregate:
    """FE1's shortcut: hashed real messages plus the total of dummies drawn in one step."""
    return _fast_aggregate(FE1Client(parameters), codes, rng, analyzer)


# --- exact laws (the exact auditor, tiny instances) ----------------------------------------------------


EXACT_LAW_MAX = 10**6  # states one user's exact law may have: beyond, the auditor must sample instead


def _uniform_multisets(types: int, count: int) -> dict[tuple[int, ...], float]:
    """The histogram of ``count`` draws uniform over ``types`` message types, as an exact law (multinomial)."""
    states = exact_laws.comb(types + count - 1, count)  # a float: no huge integer, no overflow formatting it
    if states > EXACT_LAW_MAX:
        raise ParameterError("method", f"statistical for an instance this large (one user's {count} dummies over "
                             f"{types} message types take {exact_laws.big(states)} states, above "
                             f"{EXACT_LAW_MAX:.0e})", "exact")
    law: dict[tuple[int, ...], float] = {}
    for draw in itertools.combinations_with_replacement(range(types), count):
        histogram = np.bincount(np.asarray(draw, dtype=np.int64), minlength=types)
        ways = math.factorial(count) // math.prod(math.factorial(int(h)) for h in histogram)
        law[tuple(histogram.tolist())] = ways / types**count  # integers divided: exact past floats (171 dummies)
    return law


def law_size(parameters: BallsIntoBinsParameters, item: int = 0) -> LawSize:
    """:func:`message_law`'s size before it is built: the dummies' multisets (C(T + r - 1, r) for r = floor(rho),
    and C(T + r, r + 1) when rho is fractional) once, then once more for each position of the real message
    (FE1: (q - 1) q of them), each a histogram of T types; a type receives at most 1 + ceil(rho) messages."""
    p = parameters
    if isinstance(p, FE1Parameters):
        q, b = p.modulus, p.bins
        types, positions = (q - 1) * q * b, (q - 1) * q
    else:
        types, positions = p.domain_size, 1
    whole = math.floor(p.rho)
    dummies = exact_laws.comb(types + whole - 1, whole) + (exact_laws.comb(types + whole, whole + 1)
                                                           if p.rho > whole else 0.0)
    for count in (whole, whole + 1) if p.rho > whole else (whole,):  # _uniform_multisets' own limit, a priori
        if (multisets := exact_laws.comb(types + count - 1, count)) > EXACT_LAW_MAX:
            raise ParameterError("method", f"statistical for an instance this large (one user's {count} dummies "
                                 f"over {types} message types take {exact_laws.big(multisets)} states, above "
                                 f"{EXACT_LAW_MAX:.0e})", "exact")
    largest = 1 + math.ceil(p.rho)
    less_noise = "a larger --epsilon or --delta"
    if p.protocol in ("sparse-vector", "sparse-vector-hashed"):
        field, got, others = "dimension", getattr(p, "dimension", p.domain_size), f"fewer --levels or --bins, or {less_noise}"
    elif isinstance(p, FE1Parameters):
        field, got, others = "bins", p.bins, f"a smaller --domain, or {less_noise}"
    else:
        field, got, others = "domain", p.domain_size, less_noise
    return exact_laws.LawSize(p.protocol, (positions + 1) * dummies, types, largest, field, got, others=others,
                              detail=f"rho = {p.rho:.3g} dummies a user over {types} message types")


def message_law(parameters: BallsIntoBinsParameters, item: int) -> dict[tuple[int, ...], float]:
    """One user's messages (FE0, FE1) -- or one user's value and its share of the curator's noisy balls (M^BIB)
    -- as an exact law over histograms of the message types: what the shuffler's output is the sum of.

    Types are the rows of the layout in order (FE0: the value; FE1: ((u - 1) q + v) b + w). The real
    message, then floor(rho) dummies and one more with probability rho - floor(rho), each uniform over every
    type. Enumerated, so for tiny instances only (:mod:`privagg.audit`), its size checked first
    (:func:`law_size`).
    """
    exact_laws.check_law(law_size(parameters, item))
    if isinstance(parameters, FE1Parameters):
        q, b = parameters.modulus, parameters.bins
        types = (q - 1) * q * b
        u, v = np.divmod(np.arange((q - 1) * q), q)
        w = parameters.hash.evaluate(u + 1, v, np.full(u.size, item))
        real = {int(position): 1 / u.size for position in (u * q + v) * b + w}
    else:
        types, real = parameters.domain_size, {item: 1.0}
    whole, frac = math.floor(parameters.rho), parameters.rho - math.floor(parameters.rho)
    dummies = {h: p * (1 - frac) for h, p in _uniform_multisets(types, whole).items()}
    if frac:
        for h, p in _uniform_multisets(types, whole + 1).items():
            dummies[h] = dummies.get(h, 0.0) + p * frac
    law: dict[tuple[int, ...], float] = {}
    for position, p_real in real.items():
        for h, p in dummies.items():
            key = h[:position] + (h[position] + 1,) + h[position + 1:]
            law[key] = law.get(key, 0.0) + p_real * p
    return law
