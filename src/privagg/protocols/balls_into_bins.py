"""Balls into bins: M^BIB, FE0 and FE1 (Luo, Wang, Yi, CCS 2022, §3).

Reference: ``shared/papers/shuffle-frequency-estimation.md`` (§2.1-2.3).

* :class:`BallsIntoBinsCentral` (``bib``) -- Algorithm 1, M^BIB, as a central
  frequency mechanism: a trusted curator counts the users' values (one real
  ball each, s = 1 special bin out of m = B) and throws k + Bin(n, p) noisy
  balls uniformly into the B bins.
* :class:`FE0` (``fe0``) -- Algorithms 2-3: each user sends its value and
  floor(rho) + Ber(rho - floor(rho)) blanket noises uniform in [B]; the
  analyzer counts and subtracts n rho / B. In the shuffle model its output is
  exactly M^BIB's.
* :class:`FE1` (``fe1``) -- §3.2: each user sends (u, v, h_{u,v}(x)) for a
  random hash of the universal family, plus dummies (u', v', w') uniform; the
  analyzer counts the messages whose hash of x matches and debiases by
  n p_col + n rho / b, then divides by 1 - p_col.

All three share the noise level mu (expected noisy balls per special set;
:mod:`privagg.privacy.balls_into_bins`) and rho = mu * bins / n, where
``bins`` is B for FE0/M^BIB and b for FE1. Derivations of the estimator,
its variance and the max-error bound: docs/derivations.md.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Callable

import numpy as np

from ..core.hashing import MAX_MODULUS_BITS, UniversalHash
from ..core.messages import MessageBatch
from ..core.primes import next_prime
from ..core.randomness import RNGLike, resolve
from ..errors import ParameterError, check_delta, check_epsilon, check_integer
from ..privacy.balls_into_bins import calibrate

HISTOGRAM_DOMAIN_MAX = 2**28  # FE0 and M^BIB keep a count per domain item
HASHED_DOMAIN_MAX = 2 ** (MAX_MODULUS_BITS - 1)  # FE1: q < 2^50


def dummy_counts(n_users: int, rho: float, rng: np.random.Generator) -> np.ndarray:
    """Per user: floor(rho) dummies plus one more with probability rho - floor(rho).

    The coin is ``uniform double < frac``: its probability is frac rounded up
    to a multiple of 2^-53, never less noise than calibrated.
    """
    whole = math.floor(rho)
    return whole + (rng.random(n_users) < rho - whole).astype(np.int64)


def total_dummies(n_users: int, rho: float, rng: np.random.Generator) -> int:
    """The sum of :func:`dummy_counts` drawn in one step: n floor(rho) + Bin(n, frac)."""
    whole = math.floor(rho)
    return n_users * whole + int(rng.binomial(n_users, rho - whole))


@dataclass(frozen=True)
class FrequencyOracle:
    """The analyzer's answer: debiased frequency estimates on demand.

    ``counts(codes, progress)`` gives raw match counts for queried codes and
    ``counts_all(progress)`` for the whole domain; the protocol turns them
    into unbiased estimates. ``progress``, if given, is called with the
    amount of work done after each slice of it.
    """

    protocol: "BallsIntoBinsFrequency"
    counts: Callable[[np.ndarray, Callable[[int], None] | None], np.ndarray]
    counts_all: Callable[[Callable[[int], None] | None], np.ndarray]

    def estimate(self, codes, progress: Callable[[int], None] | None = None) -> np.ndarray:
        """Unbiased estimates of the frequencies of ``codes`` (single or batch query)."""
        codes = self.protocol.check_codes(np.atleast_1d(codes))
        return self.protocol.debias(self.counts(codes, progress))

    def estimate_all(self, progress: Callable[[int], None] | None = None) -> np.ndarray:
        """Estimates for every item of [B] (FE1: by preimage enumeration)."""
        return self.protocol.debias(self.counts_all(progress))

    def top_k(self, k: int, candidates=None) -> tuple[np.ndarray, np.ndarray]:
        """The k codes with the largest estimates, among ``candidates`` or all of [B]."""
        if candidates is None:
            return top_k(np.arange(self.protocol.domain_size), self.estimate_all(), k)
        codes = self.protocol.check_codes(np.asarray(candidates))
        return top_k(codes, self.estimate(codes), k)


def top_k(codes: np.ndarray, estimates: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """The k (code, estimate) pairs with the largest estimates, largest first (ties: first code first)."""
    k = check_integer("top", k, 1)
    order = np.argsort(-estimates, kind="stable")[:k]
    return codes[order], estimates[order]


class BallsIntoBinsFrequency:
    """What M^BIB, FE0 and FE1 share: parameters, debiasing and error theory."""

    name: str
    title: str
    model = "shuffle"
    domain_max: int
    noise_parameter = "domain"  # what sets rho besides (epsilon, delta, n), for error messages

    def __init__(self, epsilon: float, delta: float, n_users: int, domain_size: int,
                 calibration: str = "numeric") -> None:
        self.epsilon = check_epsilon(epsilon)
        self.delta = check_delta(delta)
        self.n_users = check_integer("n_users", n_users, 2)
        self.domain_size = check_integer("domain", domain_size, 2, self.domain_max)
        self.calibration = calibration
        noise = calibrate(self.epsilon, self.delta, self.n_users, self.bins, calibration, self.model)
        self.mu = noise.mu
        self.guarantee = noise.guarantee
        self.rho = self.mu * self.bins / self.n_users

    # --- overridden per protocol -------------------------------------------------
    @property
    def bins(self) -> int:
        """Where noisy balls land: B for FE0 and M^BIB, b for FE1."""
        return self.domain_size

    collision_probability = 0.0

    @property
    def bits_per_message(self) -> int:
        return math.ceil(math.log2(self.domain_size))

    # --- shared theory -------------------------------------------------------------
    @property
    def messages_per_user(self) -> float:
        """Expected messages per user, 1 + rho."""
        return 1.0 + self.rho

    @property
    def noise_mean(self) -> float:
        """Expected dummy messages matching one item, n rho / bins (= mu)."""
        return self.n_users * self.rho / self.bins

    @property
    def noise_variance(self) -> float:
        """Variance of the dummies matching one item: Bin(n floor(rho), 1/bins) + Bin(n, frac/bins)."""
        whole = math.floor(self.rho)
        hit, frac_hit = 1.0 / self.bins, (self.rho - whole) / self.bins
        return self.n_users * (whole * hit * (1 - hit) + frac_hit * (1 - frac_hit))

    def debias(self, counts: np.ndarray) -> np.ndarray:
        """(count - n p_col - n rho / bins) / (1 - p_col): unbiased for g_x."""
        p = self.collision_probability
        return (np.asarray(counts, dtype=np.float64) - self.n_users * p - self.noise_mean) / (1.0 - p)

    def standard_error(self, frequency=0.0) -> np.ndarray | float:
        """Standard deviation of the estimate of an item with true ``frequency`` g.

        sqrt((n - g) p_col (1 - p_col) + noise_variance) / (1 - p_col); largest
        at g = 0. Reported results plug in the estimate clipped to [0, n].
        """
        p = self.collision_probability
        g = np.clip(frequency, 0, self.n_users)
        return np.sqrt((self.n_users - g) * p * (1 - p) + self.noise_variance) / (1 - p)

    def max_error_bound(self, beta: float = 0.05) -> float:
        """alpha with Pr[max_x |est_x - g_x| <= alpha] >= 1 - beta (Chernoff + union bound).

        max(sqrt(3 L log(2B/beta)), 3 log(2B/beta)) / (1 - p_col), with
        L = n p_col + n rho / bins (docs/derivations.md).
        """
        if not 0 < beta < 1:
            raise ParameterError("beta", "in (0, 1)", beta)
        p = self.collision_probability
        lam = self.n_users * p + self.noise_mean
        log_term = math.log(2 * self.domain_size / beta)
        return max(math.sqrt(3 * lam * log_term), 3 * log_term) / (1 - p)

    def parameters(self) -> dict:
        return {"epsilon": self.epsilon, "delta": self.delta, "n_users": self.n_users,
                "domain_size": self.domain_size, "calibration": self.calibration,
                "mu": self.mu, "rho": self.rho}

    def check_codes(self, codes: np.ndarray) -> np.ndarray:
        """Raise unless ``codes`` are integers in [0, B)."""
        codes = np.asarray(codes)
        if codes.size and (not np.issubdtype(codes.dtype, np.integer)
                           or codes.min() < 0 or codes.max() >= self.domain_size):
            bad = codes.min() if np.issubdtype(codes.dtype, np.integer) and codes.min() < 0 else codes.max()
            raise ParameterError("item", f"integers in [0, {self.domain_size}) (the domain)", bad)
        return codes.astype(np.int64, copy=False)


class FE0(BallsIntoBinsFrequency):
    """P^FE0: always send x, plus rho blanket noises uniform in [B] (Algorithms 2-3)."""

    name = "fe0"
    title = "FE0: value + blanket noise (small domains)"
    domain_max = HISTOGRAM_DOMAIN_MAX

    def randomize(self, codes, rng: RNGLike = None) -> MessageBatch:
        """R^FE0 for a batch of users (``rng=None``: secure randomness)."""
        rng = resolve(rng)
        codes = self.check_codes(np.asarray(codes))
        noise = rng.integers(0, self.domain_size, size=int(dummy_counts(codes.size, self.rho, rng).sum()))
        return MessageBatch({"value": np.concatenate([codes, noise])})

    def analyze(self, messages: MessageBatch) -> FrequencyOracle:
        """A^FE0: count each value once; queries are then O(1)."""
        messages.check({"value": (0, self.domain_size)})
        return self._oracle(np.bincount(messages["value"], minlength=self.domain_size))

    def fast_oracle(self, codes: np.ndarray, rng: np.random.Generator) -> tuple[FrequencyOracle, int]:
        """Distributional shortcut: true histogram + total noise drawn in one step."""
        return self._noisy_histogram(codes, total_dummies(codes.size, self.rho, rng), rng)

    def _noisy_histogram(self, codes: np.ndarray, noise_balls: int, rng: np.random.Generator):
        noise = rng.integers(0, self.domain_size, size=noise_balls)
        counts = np.bincount(codes, minlength=self.domain_size) + np.bincount(noise, minlength=self.domain_size)
        return self._oracle(counts), codes.size + noise_balls

    def _oracle(self, histogram: np.ndarray) -> FrequencyOracle:
        return FrequencyOracle(self, lambda codes, progress: histogram[codes], lambda progress: histogram)


class BallsIntoBinsCentral(FE0):
    """M^BIB (Algorithm 1) as a central mechanism: a trusted curator adds the noisy balls.

    Same parameters and output distribution as FE0 (m = B bins, s = 1, k =
    n floor(rho) noisy balls and n coins of probability rho - floor(rho)), but
    users send their value in the clear to the curator.
    """

    name = "bib"
    title = "M^BIB: balls into bins, trusted curator"
    model = "central"

    @property
    def messages_per_user(self) -> float:
        return 1.0

    def release(self, codes, rng: RNGLike = None) -> FrequencyOracle:
        """The curator: bin counts of the real balls plus Algorithm 1's noisy balls.

        The n coins are drawn one by one (:func:`dummy_counts`), not with a
        floating-point binomial sampler, since privacy rests on their law.
        """
        codes, rng = self.check_codes(np.asarray(codes)), resolve(rng)
        oracle, _ = self._noisy_histogram(codes, int(dummy_counts(codes.size, self.rho, rng).sum()), rng)
        return oracle


class FE1(BallsIntoBinsFrequency):
    """P^FE1: one hashed message (u, v, h_{u,v}(x)) plus rho uniform dummies (§3.2)."""

    name = "fe1"
    title = "FE1: universal hashing, 1 + o(1) messages (any domain)"
    domain_max = HASHED_DOMAIN_MAX
    noise_parameter = "bins"

    def __init__(self, epsilon: float, delta: float, n_users: int, domain_size: int,
                 bins: int | None = None, c: float | None = None, calibration: str = "numeric") -> None:
        n = check_integer("n_users", n_users, 2)
        if bins is not None and c is not None:
            raise ParameterError("bins", "given alone (not together with c)", bins)
        if bins is None:
            c = 1.0 if c is None else float(c)
            if not (c >= 0 and math.isfinite(c)):
                raise ParameterError("c", "a finite number >= 0", c)
            bins = math.floor(n / math.log(n) ** c)
            if not 2 <= bins <= HASHED_DOMAIN_MAX:
                raise ParameterError("c", f"such that b = floor(n / ln^c n) is in [2, 2^{MAX_MODULUS_BITS - 1}] "
                                     f"(n = {n})", c)
        self.c = c
        self._bins = check_integer("bins", bins, 2, HASHED_DOMAIN_MAX)
        domain = check_integer("domain", domain_size, 2, self.domain_max)
        self.hash = UniversalHash(next_prime(max(domain, self._bins)), self._bins)
        super().__init__(epsilon, delta, n, domain, calibration)
        self.guarantee = replace(self.guarantee, method=self.guarantee.method + (
            "; the analysis takes disjoint special sets, FE1's overlap (p_col) was checked numerically, "
            "not proven (docs/derivations.md)"))

    @property
    def bins(self) -> int:
        return self._bins

    @property
    def collision_probability(self) -> float:  # type: ignore[override]
        return self.hash.collision_probability

    @property
    def bits_per_message(self) -> int:
        """2 ceil(log2 q) + ceil(log2 b): the triple (u, v, w)."""
        return 2 * math.ceil(math.log2(self.hash.modulus)) + math.ceil(math.log2(self.bins))

    def parameters(self) -> dict:
        return {**super().parameters(), "bins": self.bins, "c": self.c, "modulus": self.hash.modulus,
                "collision_probability": self.collision_probability}

    def _uniform_messages(self, count: int, rng: np.random.Generator) -> MessageBatch:
        u, v = self.hash.sample_keys(count, rng)
        return MessageBatch({"u": u, "v": v, "w": rng.integers(0, self.bins, size=count, dtype=np.int64)})

    def _real_messages(self, codes: np.ndarray, rng: np.random.Generator) -> MessageBatch:
        u, v = self.hash.sample_keys(codes.size, rng)
        return MessageBatch({"u": u, "v": v, "w": self.hash.evaluate(u, v, codes)})

    def randomize(self, codes, rng: RNGLike = None) -> MessageBatch:
        """R^FE1 for a batch of users (``rng=None``: secure randomness)."""
        rng = resolve(rng)
        codes = self.check_codes(np.asarray(codes))
        dummies = int(dummy_counts(codes.size, self.rho, rng).sum())
        return MessageBatch.concatenate([self._real_messages(codes, rng), self._uniform_messages(dummies, rng)])

    def analyze(self, messages: MessageBatch) -> FrequencyOracle:
        """A^FE1 over the shuffled messages."""
        q = self.hash.modulus
        messages.check({"u": (1, q), "v": (0, q), "w": (0, self.bins)})
        u, v, w = (np.ascontiguousarray(messages[k], dtype=np.int64) for k in "uvw")
        return FrequencyOracle(
            self,
            lambda codes, progress: self.hash.count_matches(u, v, w, codes, progress),
            lambda progress: self.hash.count_all(u, v, w, self.domain_size, progress),
        )

    def fast_oracle(self, codes: np.ndarray, rng: np.random.Generator) -> tuple[FrequencyOracle, int]:
        """Shortcut: the dummy total drawn in one step, no shuffle (counts ignore order)."""
        batch = MessageBatch.concatenate([
            self._real_messages(codes, rng), self._uniform_messages(total_dummies(codes.size, self.rho, rng), rng)])
        return self.analyze(batch), len(batch)


PROTOCOLS: dict[str, type[BallsIntoBinsFrequency]] = {
    cls.name: cls for cls in (BallsIntoBinsCentral, FE0, FE1)
}
