"""The local-model baselines of frequency estimation: each user randomizes his own item and the analyzer sees
every report, so no party is trusted and the guarantee is pure eps-LDP (delta = 0) whatever n.

* ``grr``: k-ary randomized response (Warner; Kairouz, Oh, Viswanath 2014): the item with probability
  p = e^eps / (e^eps + B - 1), else one of the B - 1 others uniformly.
* ``oue``: optimized unary encoding (Wang, Blocki, Li, Jha 2017): the one-hot vector of the item, each bit
  sent as 1 with probability 1/2 where it is 1 and q = 1 / (e^eps + 1) where it is 0; the reports travel as
  their set bits, one message each.
* ``olh``: optimized local hashing (same paper): a fresh hash h from FE1's universal family into
  g = round(e^eps) + 1 values, then randomized response over [g] on h(x); the user sends (h, y). The
  analyzer counts, for each item, the reports with h(x) = y by FE1's kernels (preimage enumeration for the
  whole domain), and debiases with the family's exact collision probability.
* ``hadamard``: Hadamard randomized response: a uniform column j of the K x K Hadamard matrix (K the least
  power of 2 >= B) and the sign H[x, j] kept with probability e^eps / (e^eps + 1); the analyzer sums the
  signs per column and decodes every item at once with a fast Walsh-Hadamard transform, O(n + K log K).

Every coin has an exact dyadic probability K / 2^53, derived in rational arithmetic against a lower bound of
e^eps so that no ratio of a report's probabilities exceeds e^eps (:mod:`privagg.core.coins`). Each estimate
is unbiased for those probabilities; its variance is exact (``standard_error``, derived in docs/derivations.md,
"Local baselines"). Every randomizer's output law is enumerated for the exact auditor (``message_law``).
"""

from __future__ import annotations

import dataclasses
import functools
import math
from dataclasses import dataclass
from fractions import Fraction
from typing import Any, ClassVar, NamedTuple

import numpy as np

from ..core.coins import ONE, coins, exp_lower_bound, randomized_response_keep, unary_flip
from ..core.encoding import check_item_key
from ..core.hashing import UniversalHash
from ..core.messages import SLICE_ROWS, Column, MessageBatch, MessageLayout
from ..core.primes import next_prime
from ..core.randomness import RNGLike, resolve
from ..errors import ParameterError, check_epsilon, check_integer
from ..privacy.description import REPLACE_ONE, Mechanism, PrivacyDescription
from .balls_into_bins import (HASHED_DOMAIN_MAX, HISTOGRAM_DOMAIN_MAX, N_USERS_MAX, CountAggregate, FE0Analyzer,
                              FE1Analyzer, _CountingAnalyzer)
from . import exact_laws
from .parameters import FrozenParameters, OneItemReports, check_pure_delta, neighbouring_pairs
from .results import MAX_ERROR_BETA, FrequencyTable

CALIBRATIONS = ("exact",)
# OLH's default g = round(e^eps) + 1 stays within HASHED_DOMAIN_MAX below this epsilon (ln(2^49 - 1/2), 33.96)
OLH_DEFAULT_BINS_EPSILON_MAX = math.log(HASHED_DOMAIN_MAX - 0.5)
OUE_COINS = 2**24  # OUE's coins drawn at once (8 bytes each)


def _check_pure(epsilon: float, delta: float, local_epsilon: float) -> None:
    check_epsilon(epsilon)
    if delta != 0.0:
        raise ParameterError("delta", "0 (left out): the local baselines are pure eps-DP", delta)
    check_epsilon(local_epsilon, "local_epsilon")
    if local_epsilon > epsilon:
        raise ParameterError("local_epsilon", f"at most epsilon = {epsilon:g} (the randomizer's own epsilon)",
                             local_epsilon)


@dataclass(frozen=True)
class _LocalParameters(OneItemReports, FrozenParameters):
    """What the four randomizers share: pure eps-LDP, one report a user, an unbiased debiased count."""

    model: ClassVar[str] = "local"
    trusted: ClassVar[tuple[str, ...]] = ()
    rho: ClassVar[float] = 0.0
    messages_sd: ClassVar[float] = 0.0
    noise_options: ClassVar[dict[str, str]] = {}
    honest_fraction: ClassVar[float] = 1.0
    mechanism: ClassVar[str]

    epsilon: float
    delta: float
    n_users: int
    domain_size: int
    calibration: str
    local_epsilon: float
    item_key: str | None = dataclasses.field(default=None, kw_only=True)  # maps text items into [B] (public)

    def __post_init__(self) -> None:
        _check_pure(self.epsilon, self.delta, self.local_epsilon)
        if self.item_key is not None:
            check_item_key(self.item_key)
        check_integer("n_users", self.n_users, 2, N_USERS_MAX)
        check_integer("domain", self.domain_size, 2, self.domain_max)
        if self.calibration not in CALIBRATIONS:
            raise ParameterError("calibration", f"one of {', '.join(CALIBRATIONS)}", self.calibration)
        if self.keep <= self.other:
            # p - q is about eps / B for GRR, eps / 2 for the binary randomizers, against the coins' 2^-53
            smallest = (self.domain_size if self.protocol == "grr" else 2) * 2.0**-52
            field = "epsilon" if self.local_epsilon == self.epsilon else "local_epsilon"  # --epsilon, as calibrated
            raise ParameterError(field, f"large enough that a report carries signal once its coins are rounded to "
                                 f"53 bits (at least about {smallest:.1g} here)", self.local_epsilon)

    @property
    def keep_numerator(self) -> int:
        """K: a holder of x makes a report that counts for x with probability exactly K / 2^53
        (:mod:`privagg.core.coins`: the coins are derived so that the ratio never exceeds e^eps)."""
        raise NotImplementedError

    @property
    def keep(self) -> float:
        """p = K / 2^53: the chance a holder of x makes a report that counts for x."""
        return self.keep_numerator / ONE

    @property
    def other(self) -> float:
        """q: the chance any other user makes a report that counts for x."""
        raise NotImplementedError

    def check_population(self, codes: np.ndarray) -> None:
        """No condition on the data."""

    def verify(self) -> None:
        """The randomizer's epsilon is at most the claim (``_check_pure``, on load); nothing else to verify."""

    def noise_fields(self, scale: float) -> dict[str, float]:
        """Less noise is a larger local epsilon: eps / ``scale`` (for the auditors)."""
        return {"local_epsilon": self.local_epsilon / scale}

    # The theory of the m users whose reports were counted (``reporters``; default: the calibrated n): a local
    # task's batches may hold fewer or more than n (docs/derivations.md, "An early close").
    def debias(self, counts: np.ndarray, reporters: int | None = None) -> np.ndarray:
        """(count - m q) / (p - q): unbiased for g_x among the m users counted."""
        m = self.counted(reporters)
        return (np.asarray(counts, dtype=np.float64) - m * self.other) / (self.keep - self.other)

    def standard_error(self, frequency=0.0, reporters: int | None = None):
        """sqrt((m - g) q (1 - q) + g p (1 - p)) / (p - q) for an item held by g of the m users counted: each
        holder's report counts with probability p, each other user's with q, independently."""
        m = self.counted(reporters)
        g = np.clip(frequency, 0, m)
        p, q = self.keep, self.other
        return np.sqrt((m - g) * q * (1 - q) + g * p * (1 - p)) / (p - q)

    @property
    def report_weight(self) -> float:
        """1 / (p - q): one report's weight in an estimate. At large eps the sd at g = 0 nears 0 (q does) while a
        holder's report still counts with probability p (1/2 for OUE, OLH), so results report the sd one report
        from the estimate too (:meth:`reported_standard_error`)."""
        return 1 / (self.keep - self.other)

    def max_error_bound(self, beta: float = MAX_ERROR_BETA, reporters: int | None = None) -> float:
        """Bernstein + union bound over [B] at the larger per-item variance (g = 0 or m): each report moves a
        count by at most 1 / (p - q)."""
        if not 0 < beta < 1:
            raise ParameterError("beta", "in (0, 1)", beta)
        m = self.counted(reporters)
        sd = float(max(self.standard_error(0, m), self.standard_error(m, m)))
        step, log_term = 1 / (self.keep - self.other), math.log(2 * self.domain_size / beta)
        return step * log_term / 3 + math.sqrt((step * log_term / 3) ** 2 + 2 * sd**2 * log_term)

    def expected_error(self, reporters: int | None = None) -> dict[str, float]:
        return {"messages_per_user": self.messages_per_user, "bits_per_message": self.bits_per_message,
                "standard_error": self.worst_standard_error(reporters),
                "standard_error_at": "the worst item (the largest over the items' counts)",
                "max_error_bound": self.max_error_bound(reporters=reporters), "max_error_beta": MAX_ERROR_BETA}

    def costs(self) -> dict[str, dict[str, float]]:
        return {"user": {"sent": self.messages_per_user},
                "analyzer": {"received": self.n_users * self.messages_per_user}}

    def theory(self) -> dict[str, float | str]:
        return {"estimate": "(count - n q) / (p - q)", "p": self.keep, "q": self.other,
                "standard_error_at_zero": float(self.standard_error(0))}

    def delta_at(self, epsilon: float) -> float:
        """The exact delta(eps) of one report (the local model shows each): the largest hockey-stick divergence
        between the report's laws for two items, computed in rational arithmetic over the coins' exact
        probabilities against a lower bound of e^eps, so never below the truth (0 for eps >= local_epsilon: the
        coins make every ratio at most e^local_epsilon)."""
        if check_epsilon(epsilon) >= self.local_epsilon:
            return 0.0
        divergence = self._report_divergence(exp_lower_bound(epsilon))
        value = float(divergence)
        return value if value >= divergence else math.nextafter(value, math.inf)

    def _report_divergence(self, e: Fraction) -> Fraction:
        """sum_y max(0, P_x(y) - e Q_x'(y)) for the worst pair, exactly (protocol-specific)."""
        raise NotImplementedError

    @property
    def privacy(self) -> PrivacyDescription:
        return PrivacyDescription.of(Mechanism(
            mechanism=self.mechanism, parameters={"local_epsilon": self.local_epsilon, "n_users": self.n_users},
            epsilon=self.epsilon, delta=self.delta, model=self.model, neighbouring=REPLACE_ONE, trusted=(),
            honest_fraction=1.0,
            assumptions=("each user's report is drawn independently from his own item; the analyzer sees every "
                         "report and who sent it",),
            public=("the parameters" + (" (and OLH's hash family)" if self.protocol == "olh" else ""),),
            method=self.calibration, method_detail="pure eps-LDP of each report: the largest ratio of the "
            "report's probabilities under two items is e^eps",
            reference="src/privagg/protocols/local_baselines.py; docs/derivations.md, 'Local baselines'"))


@dataclass(frozen=True)
class GRRParameters(_LocalParameters):
    """k-ary randomized response over [B]."""

    protocol: ClassVar[str] = "grr"
    mechanism: ClassVar[str] = "GRR: the item with probability e^eps / (e^eps + B - 1), else another uniformly"
    domain_max: ClassVar[int] = HISTOGRAM_DOMAIN_MAX

    @property
    def keep_numerator(self) -> int:
        return randomized_response_keep(self.local_epsilon, self.domain_size)

    @property
    def other(self) -> float:
        return (ONE - self.keep_numerator) / ONE / (self.domain_size - 1)

    @property
    def randomized_response(self) -> tuple[float, int]:
        """The report as dp-accounting's randomized response over k buckets, (q, k): the input with probability
        1 - q, else a uniform bucket; here p = K / 2^53 keeps it and each other item gets (1 - p) / (k - 1), so
        q = (1 - p) k / (k - 1). (The ledger composes tasks' PLDs with it: service/ledger.py.)"""
        k = self.domain_size
        return min(1.0, (1 - self.keep) * k / (k - 1)), k

    def _report_divergence(self, e: Fraction) -> Fraction:
        return _rr_divergence(self.keep_numerator, self.domain_size, e)  # y = x: p against q; the rest cancel


@dataclass(frozen=True)
class OUEParameters(_LocalParameters):
    """Optimized unary encoding: 1/2 on the item's bit, q = 1 / (e^eps + 1) on every other."""

    protocol: ClassVar[str] = "oue"
    mechanism: ClassVar[str] = "OUE: the one-hot vector, its 1 kept with probability 1/2, each 0 flipped with q"
    domain_max: ClassVar[int] = 2**20  # n (1/2 + (B - 1) q) messages

    @property
    def messages_per_user(self) -> float:
        return 0.5 + (self.domain_size - 1) * self.other

    @property
    def messages_sd(self) -> float:  # type: ignore[override]
        q = self.other
        return math.sqrt(self.n_users * (0.25 + (self.domain_size - 1) * q * (1 - q)))

    @property
    def keep_numerator(self) -> int:
        return ONE // 2

    @property
    def flip_numerator(self) -> int:
        """Q: each 0 bit is sent as 1 with probability exactly Q / 2^53 (1 / (e^eps + 1) rounded up)."""
        return unary_flip(self.local_epsilon)

    @property
    def other(self) -> float:
        return self.flip_numerator / ONE

    def _report_divergence(self, e: Fraction) -> Fraction:
        """Two items differ in two bits (x: 1/2 against q; x': q against 1/2); the others cancel. The
        divergence of the product of the two differing bits, over their four values."""
        p, q = Fraction(1, 2), Fraction(self.flip_numerator, ONE)
        first, second = (p, 1 - p), (q, 1 - q)
        return sum(max(Fraction(0), a1 * b1 - e * a2 * b2)  # bit x from the holder of x, bit x' from him
                   for a1, a2 in zip(first, second) for b1, b2 in zip(second, first))


@dataclass(frozen=True)
class OLHParameters(_LocalParameters):
    """Optimized local hashing: FE1's universal hash into g = round(e^eps) + 1 values, then GRR over [g]."""

    protocol: ClassVar[str] = "olh"
    mechanism: ClassVar[str] = "OLH: a random universal hash into g values, then randomized response over [g]"
    domain_max: ClassVar[int] = HASHED_DOMAIN_MAX

    bins: int
    modulus: int

    def __post_init__(self) -> None:
        check_integer("bins", self.bins, 2, HASHED_DOMAIN_MAX)
        check_integer("domain", self.domain_size, 2, self.domain_max)
        if self.modulus != (modulus := next_prime(max(self.domain_size, self.bins))):
            raise ParameterError("modulus", f"the smallest prime >= max(domain, bins), {modulus}", self.modulus)
        super().__post_init__()

    @functools.cached_property
    def hash(self) -> UniversalHash:
        return UniversalHash(self.modulus, self.bins)

    @property
    def layout(self) -> MessageLayout:
        q = self.modulus
        return MessageLayout((Column("u", 1, q), Column("v", 0, q), Column("w", 0, self.bins)))

    @property
    def keep_numerator(self) -> int:
        return randomized_response_keep(self.local_epsilon, self.bins)

    @property
    def other(self) -> float:
        """p p_col + (1 - p)(1 - p_col) / (g - 1): another item's hash equals the report."""
        p, col = self.keep, self.hash.collision_probability
        return p * col + (1 - p) * (1 - col) / (self.bins - 1)

    @property
    def randomized_response(self) -> tuple[float, int]:
        """Given the public hash, the report is randomized response over the g bins on h(x) (two items that collide
        give the same report, so the non-colliding pair dominates): dp-accounting's (q, g), as GRR's."""
        g = self.bins
        return min(1.0, (1 - self.keep) * g / (g - 1)), g

    def derived(self) -> dict[str, Any]:
        return {"collision_probability": self.hash.collision_probability}

    def _report_divergence(self, e: Fraction) -> Fraction:
        """Given the hash, the report is GRR over [g] on h(x) against h(x'): divergence max(0, p - e q_g) when the
        two do not collide, 0 when they do; averaged over the family (p_col exactly, as a fraction)."""
        q, b = self.modulus, self.bins
        collision = Fraction((q // b) * ((q % b) + q - b), q * (q - 1))
        return (1 - collision) * _rr_divergence(self.keep_numerator, self.bins, e)


@dataclass(frozen=True)
class HadamardParameters(_LocalParameters):
    """Hadamard randomized response: a uniform column j of the K x K Sylvester-Hadamard matrix and the sign
    H[x, j] kept with probability e^eps / (e^eps + 1)."""

    protocol: ClassVar[str] = "hadamard"
    mechanism: ClassVar[str] = "Hadamard RR: a random Hadamard column and the item's sign there, randomized"
    domain_max: ClassVar[int] = 2**26  # the analyzer's transform holds K >= B sums

    @property
    def columns(self) -> int:
        """K: the least power of 2 >= B."""
        return 1 << (self.domain_size - 1).bit_length()

    @property
    def layout(self) -> MessageLayout:
        return MessageLayout((Column("j", 0, self.columns), Column("sign", 0, 2)))

    @property
    def keep_numerator(self) -> int:
        return randomized_response_keep(self.local_epsilon, 2)

    @property
    def other(self) -> float:
        return 1 - self.keep  # the estimate is the transform's (``debias``); the error bound uses p - q = 2p - 1

    def debias(self, signed_sums: np.ndarray) -> np.ndarray:
        """sum_i H[x, j_i] b_i / (2p - 1), b_i = +-1: unbiased for g_x (E[H[x, j] H[x_i, j]] = [x = x_i]), whoever
        reported (no term in the users counted)."""
        return np.asarray(signed_sums, dtype=np.float64) / (2 * self.keep - 1)

    def standard_error(self, frequency=0.0, reporters: int | None = None):
        """sqrt(m / (2p - 1)^2 - g) for g of the m users counted: each report adds H b / (2p - 1), of second
        moment 1 / (2p - 1)^2 and mean [x_i = x]."""
        m = self.counted(reporters)
        g = np.clip(frequency, 0, m)
        return np.sqrt(np.maximum(m / (2 * self.keep - 1) ** 2 - g, 0.0))

    def theory(self) -> dict[str, float | str]:
        return {"estimate": "sum_i H[x, j_i] b_i / (2p - 1), by a fast Walsh-Hadamard transform", "p": self.keep,
                "columns": self.columns, "standard_error_at_zero": float(self.standard_error(0))}

    def _report_divergence(self, e: Fraction) -> Fraction:
        """Per column, the signs of x and x' agree on half the columns (no divergence) and differ on the other
        half (binary RR: max(0, p - e (1 - p)))."""
        return _rr_divergence(self.keep_numerator, 2, e) / 2


def _rr_divergence(keep: int, values: int, e: Fraction) -> Fraction:
    """max(0, p - e q) for randomized response over ``values`` values keeping with p = K / 2^53, q = (1 - p) /
    (values - 1): its one positive term, at the holder's own value."""
    return max(Fraction(0), Fraction(keep, ONE) - e * Fraction(ONE - keep, ONE * (values - 1)))


def _calibrated(cls, epsilon: float, delta: float | None, n_users: int, domain_size: int, calibration: str,
                **fields):
    epsilon = check_epsilon(epsilon)
    delta = check_pure_delta(cls.protocol, delta)
    if calibration not in CALIBRATIONS:
        raise ParameterError("calibration", f"one of {', '.join(CALIBRATIONS)}", calibration)
    return cls(epsilon=epsilon, delta=delta, n_users=check_integer("n_users", n_users, 2, N_USERS_MAX),
               domain_size=check_integer("domain", domain_size, 2, cls.domain_max), calibration=calibration,
               local_epsilon=epsilon, **fields)


def calibrate_grr(epsilon: float, delta: float | None, n_users: int, domain_size: int,
                  calibration: str = "exact") -> GRRParameters:
    return _calibrated(GRRParameters, epsilon, delta, n_users, domain_size, calibration)


def calibrate_oue(epsilon: float, delta: float | None, n_users: int, domain_size: int,
                  calibration: str = "exact") -> OUEParameters:
    return _calibrated(OUEParameters, epsilon, delta, n_users, domain_size, calibration)


def calibrate_olh(epsilon: float, delta: float | None, n_users: int, domain_size: int, calibration: str = "exact",
                  bins: int | None = None) -> OLHParameters:
    """g = ``bins``, default round(e^eps) + 1 (the variance-optimal g of Wang et al. 2017)."""
    epsilon = check_epsilon(epsilon)
    if bins is None and epsilon >= OLH_DEFAULT_BINS_EPSILON_MAX:  # e^eps + 1 bins would pass the hash's field
        raise ParameterError("epsilon", f"at most about {math.floor(OLH_DEFAULT_BINS_EPSILON_MAX * 10) / 10:g} for olh "
                             f"(its bins g = round(e^eps) + 1 must be at most {HASHED_DOMAIN_MAX}; or give --bins)",
                             epsilon)
    g = round(math.exp(epsilon)) + 1 if bins is None else check_integer("bins", bins, 2, HASHED_DOMAIN_MAX)
    domain = check_integer("domain", domain_size, 2, HASHED_DOMAIN_MAX)
    return _calibrated(OLHParameters, epsilon, delta, n_users, domain, calibration, bins=g,
                       modulus=next_prime(max(domain, g)))


def calibrate_hadamard(epsilon: float, delta: float | None, n_users: int, domain_size: int,
                       calibration: str = "exact") -> HadamardParameters:
    return _calibrated(HadamardParameters, epsilon, delta, n_users, domain_size, calibration)


# --- roles ---------------------------------------------------------------------------------------------------


def _randomized_response(codes: np.ndarray, values: int, keep: int, rng: np.random.Generator) -> np.ndarray:
    """Each code kept with probability exactly ``keep`` / 2^53 (:func:`~privagg.core.coins.coins`), else one of
    the other ``values - 1`` uniformly (numpy's bounded integers are exactly uniform)."""
    return _respond(codes.copy(), *_response_draws(codes.size, values, keep, rng))


def _response_draws(users: int, values: int, keep: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """The randomness of :func:`_randomized_response` for ``users`` codes, in its stream's order: whether each is
    replaced (a coin that keeps it with probability exactly ``keep`` / 2^53), and each replaced one's draw over the
    other ``values - 1``."""
    replaced = ~coins(keep, users, rng)
    return replaced, rng.integers(0, values - 1, size=int(replaced.sum()))


def _respond(codes: np.ndarray, replaced: np.ndarray, other: np.ndarray) -> np.ndarray:
    """``codes``, changed in place, with each ``replaced`` one set to its draw in ``other`` over the other values
    (the true value skipped, so each of them is equally likely)."""
    codes[replaced] = other + (other >= codes[replaced])
    return codes


class GRRClient:
    def __init__(self, parameters: GRRParameters) -> None:
        self.parameters, self.layout = parameters, parameters.layout

    def randomize(self, codes, rng: RNGLike = None) -> MessageBatch:
        p, rng = self.parameters, resolve(rng)
        return self.layout.batch({"value": _randomized_response(p.check_codes(codes), p.domain_size, p.keep_numerator, rng)})


class OUEClient:
    """The set bits of each user's perturbed one-hot vector, one message each."""

    def __init__(self, parameters: OUEParameters) -> None:
        self.parameters, self.layout = parameters, parameters.layout

    def randomize(self, codes, rng: RNGLike = None) -> MessageBatch:
        p, rng = self.parameters, resolve(rng)
        codes = p.check_codes(codes)
        others = p.domain_size - 1
        parts = [codes[coins(p.keep_numerator, codes.size, rng)]]  # each user's own bit
        block = max(1, OUE_COINS // others)  # users whose B - 1 other coins are drawn at once
        for lo in range(0, codes.size, block):
            users = codes[lo:lo + block]
            user, slot = np.divmod(np.flatnonzero(coins(p.flip_numerator, users.size * others, rng)), others)
            parts.append(slot + (slot >= users[user]))  # the other items' bits, the user's own skipped
        return self.layout.batch({"value": np.concatenate(parts)})


class OLHDraws(NamedTuple):
    """Every random choice of a batch of :class:`OLHClient` users, none of which depends on their items: each
    user's hash key (u, v), whether his hashed item is replaced, and the replacements' draws over the other
    g - 1 values."""

    u: np.ndarray
    v: np.ndarray
    replaced: np.ndarray  # bool, a user each
    other: np.ndarray  # in [0, g - 1), one a replaced user


class OLHClient:
    """Each user's own hash h_{u,v}, his item's hash under it kept by randomized response over [g]
    (:func:`_randomized_response`), sent with the key. Its randomness is drawn apart from the arithmetic
    (:meth:`draw`, then :meth:`write`), in the order of one stream, as
    :class:`~privagg.protocols.privacy_blanket.VectorClient`'s: the simulator computes the messages on other
    threads (``simulate.runner``), the same messages as one thread's."""

    def __init__(self, parameters: OLHParameters) -> None:
        self.parameters, self.layout = parameters, parameters.layout

    def randomize(self, codes, rng: RNGLike = None) -> MessageBatch:
        codes = self.parameters.check_codes(codes)
        records = np.empty(codes.size, dtype=self.layout.record_dtype)
        self.write(codes, self.draw(codes.size, resolve(rng)), records)
        return self.layout.batch({name: records[name] for name in self.layout.names})

    def draw(self, users: int, rng: np.random.Generator) -> OLHDraws:
        """The randomness of ``users`` clients (:class:`OLHDraws`), as :func:`_randomized_response` draws it."""
        p = self.parameters
        u, v = p.hash.sample_keys(users, rng)
        return OLHDraws(u, v, *_response_draws(users, p.bins, p.keep_numerator, rng))

    def write(self, codes: np.ndarray, draws: OLHDraws, out: np.ndarray) -> None:
        """The messages of ``codes`` (checked) under ``draws`` into ``out``, a row a user of the layout's record
        dtype: numpy's arithmetic alone, which releases the GIL."""
        w = _respond(self.parameters.hash.evaluate(draws.u, draws.v, codes), draws.replaced, draws.other)
        out["u"], out["v"], out["w"] = draws.u, draws.v, w


class HadamardClient:
    def __init__(self, parameters: HadamardParameters) -> None:
        self.parameters, self.layout = parameters, parameters.layout

    def randomize(self, codes, rng: RNGLike = None) -> MessageBatch:
        p, rng = self.parameters, resolve(rng)
        codes = p.check_codes(codes)
        j = rng.integers(0, p.columns, size=codes.size)
        sign = hadamard_sign(codes, j)  # 0 for +1, 1 for -1
        flip = ~coins(p.keep_numerator, codes.size, rng)  # the sign kept with probability exactly K / 2^53
        return self.layout.batch({"j": j, "sign": sign ^ flip})


def hadamard_sign(rows: np.ndarray, columns: np.ndarray) -> np.ndarray:
    """H[x, j] of the Sylvester matrix as a bit, 1 for -1: the parity of popcount(x & j), folded by shifts."""
    bits = np.asarray(rows, dtype=np.uint64) & np.asarray(columns, dtype=np.uint64)
    for shift in (32, 16, 8, 4, 2, 1):
        bits ^= bits >> np.uint64(shift)
    return (bits & np.uint64(1)).astype(np.uint8)


def walsh_hadamard(values: np.ndarray) -> np.ndarray:
    """H v for the Sylvester-Hadamard matrix (len(v) a power of 2), in log2(K) butterfly passes; or, when v has
    fewer nonzero entries than half as many (a few users' reports), as the sum of their columns, H[x, j] =
    (-1)^popcount(x & j): one pass each (at K = 2^25 and 3 users 0.3 s, not 2.5). The same integers either way
    (exact in float64)."""
    nonzero = np.flatnonzero(values)
    if 2 * nonzero.size < len(values).bit_length() - 1:
        rows, out = np.arange(len(values), dtype=np.uint32), np.zeros(len(values))
        for j in nonzero.tolist():
            out += float(values[j]) * (1 - 2 * (np.bitwise_count(rows & np.uint32(j)) & np.uint8(1)).astype(np.int8))
        return out
    out = np.array(values, dtype=np.float64)
    half = 1
    while half < out.size:
        pairs = out.reshape(-1, 2, half)
        a, b = pairs[:, 0, :].copy(), pairs[:, 1, :]
        pairs[:, 0, :] += b
        pairs[:, 1, :] = a - b
        half *= 2
    return out


class GRRAnalyzer(FE0Analyzer):
    """The histogram of the reports, debiased (FE0's counting)."""


class OUEAnalyzer(FE0Analyzer):
    """The count of each item's set bits, debiased (FE0's counting of one message per set bit)."""


class OLHAnalyzer(FE1Analyzer):
    """For each item, the reports (u, v, w) with h_{u,v}(x) = w (FE1's kernels), debiased."""

    @staticmethod
    def checks(n_users: int, items: int) -> int:
        """Hash checks to estimate ``items`` items: each user's report has its own hash, evaluated at each item."""
        return n_users * items


class HadamardAnalyzer(_CountingAnalyzer):
    """Signed sums per Hadamard column (+1 signs minus -1 signs); ``finalize`` transforms them into every item's
    estimate."""

    def _size(self) -> int:
        return self.parameters.columns

    def _count_into(self, counts: np.ndarray, messages: MessageBatch) -> None:
        cells = np.bincount(2 * messages["j"].astype(np.int64) + messages["sign"], minlength=2 * counts.size)
        counts += cells[0::2] - cells[1::2]

    def finalize(self, agg: CountAggregate, reporters: int | None = None) -> FrequencyTable:
        p = self.parameters
        estimates = p.debias(walsh_hadamard(agg.counts)[:p.domain_size])
        if self.queries is not None:
            estimates = estimates[self.queries]
        return FrequencyTable(p, estimates, self.queries, agg.messages, agg.malformed, reporters)

    @classmethod
    def working_bytes(cls, parameters: HadamardParameters, full_domain: bool = True) -> int:
        """The sums and their transform, and one slice's cell codes and validation masks."""
        return 48 * parameters.columns + 16 * min(SLICE_ROWS, parameters.n_users)


# --- exact laws (the exact auditor: one user's report, since the local model shows each) ----------------------


def _local_size(parameters: _LocalParameters, domain_size: int) -> tuple[float, int]:
    """(states, types) of one report's law at B = ``domain_size`` (the other fields as in ``parameters``)."""
    p, B = parameters, domain_size
    if isinstance(p, GRRParameters):
        return float(B), B
    if isinstance(p, OUEParameters):
        return exact_laws.power(2.0, B), B
    if isinstance(p, OLHParameters):
        q = p.modulus if B == p.domain_size else max(B, 2)  # q >= B: a lower bound away from the instance
        return float((q - 1) * q * p.bins), (q - 1) * q * p.bins
    columns = 1 << (B - 1).bit_length()  # K: the least power of 2 >= B
    return 2.0 * columns, 2 * columns


def law_size(parameters: _LocalParameters, item: int = 0) -> exact_laws.LawSize:
    """:func:`message_law`'s size before it is built: GRR B outcomes, OUE 2^B (every bit vector), OLH
    (q - 1) q g (hash and value), Hadamard 2K (column and sign), each a histogram over as many types. The
    auditor builds one law per item of [B] (the local model's pairs are one user's)."""
    p = parameters
    states, types = _local_size(p, p.domain_size)

    def limit(budget: float):  # the largest B whose B laws fit, at these other parameters
        return exact_laws.largest_fitting(
            lambda b: b * _local_size(p, b)[0] * (_local_size(p, b)[1] + exact_laws.UNITS_PER_STATE), budget, 2,
            p.domain_size)

    return exact_laws.LawSize(p.protocol, states, types, 1, "domain", p.domain_size,
                              others="fewer --bins" if isinstance(p, OLHParameters) else "", limit=limit)


def message_law(parameters: _LocalParameters, item: int) -> dict[tuple[int, ...], float]:
    """One user's report as an exact law over histograms of the layout's message types (tiny instances; its
    size checked first, :func:`law_size`)."""
    p = parameters
    exact_laws.check_law(law_size(p, item))
    law: dict[tuple[int, ...], float] = {}
    if isinstance(p, GRRParameters):
        for y in range(p.domain_size):
            law[tuple(int(y == z) for z in range(p.domain_size))] = p.keep if y == item else p.other
    elif isinstance(p, OUEParameters):
        for bits in range(2**p.domain_size):
            vector = tuple((bits >> z) & 1 for z in range(p.domain_size))
            law[vector] = math.prod((p.keep if z == item else p.other) if b else
                                    (1 - p.keep if z == item else 1 - p.other) for z, b in enumerate(vector))
    elif isinstance(p, OLHParameters):
        q, g = p.modulus, p.bins
        keys = (q - 1) * q
        u, v = np.divmod(np.arange(keys), q)
        hashed = p.hash.evaluate(u + 1, v, np.full(keys, item))
        for key, h in enumerate(hashed.tolist()):
            for w in range(g):
                position = key * g + w
                histogram = [0] * (keys * g)
                histogram[position] = 1
                law[tuple(histogram)] = (p.keep if w == h else (1 - p.keep) / (g - 1)) / keys
    else:
        K = p.columns
        signs = hadamard_sign(np.full(K, item), np.arange(K))
        for j in range(K):
            for b in (0, 1):
                histogram = [0] * (2 * K)
                histogram[2 * j + b] = 1
                law[tuple(histogram)] = (p.keep if b == signs[j] else 1 - p.keep) / K
    return law


def audit_pairs(parameters: _LocalParameters, users: int):
    """Neighbouring datasets of one user: the analyzer sees each report and who sent it, and the others' reports
    are independent of his and alike on both sides, so the divergence of the whole view is exactly that of his
    report (the pairs of every two items; docs/privacy.md, "The exact audit")."""
    return neighbouring_pairs(parameters.domain_size, 1)
