"""Heavy hitters in the shuffle model: a prefix tree of FE1 levels (``fe-hh``; shuffle FE paper, §4, as the
authors' HHD code; reference ../shared/papers/shuffle-frequency-estimation.md, §2.4).

A value is a string of W bits: an integer of [B] (W = bit length of B - 1, up to 64), or a byte string of at
most L bytes padded with zero bytes (W = 8 L). The tree's levels are prefix lengths
s, s + step, ..., W (step 1 bit for integers, one byte for strings); the last level is the whole value.

* Each user picks one level uniformly, and sends FE1's messages for the prefix of his value at that level:
  one hashed real message and floor(rho) or ceil(rho) uniform dummies, each tagged with the level
  (:class:`HeavyHitterClient`). Each message is then sent only with probability p_f (thinning).
* The analyzer (:class:`HeavyHitterAnalyzer`) counts every prefix of the first level (FE1's preimage
  enumeration), keeps the prefixes whose estimated number of holders is at least phi n / 2, and goes down
  level by level querying the children of the survivors. At the last level an item is reported when its
  estimate combined over its prefixes (each level's, less the siblings'; docs/derivations.md, "The report's
  estimate") is at least phi n: the last level is the frequency check that drops false positives.

Prefix codes: the FE1 domain of the first level is its 2^s prefixes. Deeper prefixes are coded
code(p b) = (code(p) K + b) mod P, with P the largest prime below 2^49 and K the public ``code_key``: the
children of a prefix are consecutive codes, which the counting kernel walks by additions. When every value
fits (2^W <= P), K = 2^step and the code is the prefix itself (exact, as the authors' code); otherwise K is
random and two distinct prefixes of one level share a code with probability at most (levels) / P (a
polynomial of that degree in K), which costs accuracy only, never privacy.

Privacy (docs/derivations.md, "Heavy hitters"): given the users' levels (independent of the data), the
levels are separate FE1 instances and only the changed user's level sees the change; thinning is applied
message by message independently of the content, so it is post-processing of the shuffled multiset.
Calibrating every level's noise for m users, delta = delta_FE1(m) + Pr[the changed user's level has fewer
than m users], computed exactly (binomial tail).
"""

from __future__ import annotations

import functools
import math
import secrets
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from ..core.hashing import UniversalHash, mulmod
from ..core.messages import Column, MessageBatch, MessageLayout
from ..core.primes import next_prime
from ..core.randomness import RNGLike, resolve
from ..errors import ParameterError, check_delta, check_epsilon, check_integer, check_sequence
from ..privacy import balls_into_bins as calibration_bib, shuffle
from ..privacy.description import REPLACE_ONE, Mechanism, PrivacyDescription
from ..privacy.evaluation_cache import on_disk
from .balls_into_bins import N_USERS_MAX, dummy_counts, kept_calibration, kept_delta_at
from .parameters import FrozenParameters
from .results import MAX_ERROR_BETA, HeavyHitterList

CODE_PRIME = 562_949_953_421_231  # the largest prime below 2^49: the code space of prefixes deeper than s
EXACT_WIDTH_MAX = 48  # values of at most 48 bits are their own codes (2^48 <= P)
INTEGER_DOMAIN_MAX = 2**64
MAX_LENGTH_MAX = 64  # bytes of a string value
DEFAULT_MAX_LENGTH = 32  # the command line's --max-length for strings
FIRST_LEVEL_BITS_MAX = 24  # 2^24 prefixes counted at the first level: 64 MiB of int32 counters per thread
STRING_STEP = 8
UNUSED_SLOT = b"\x00\x01"  # a string value no user's item is: a zero byte (refused in items), then a non-zero one
SURVIVORS_PER_PHI = 4  # at most 4 / phi prefixes survive a level (at most 2 / phi hold phi n / 2 users each)


RELIABLE_BOUND = 0.05  # a miss or false-report bound above it makes the list not one to act on
PHI_MIN = 2.0**-64  # below it phi n < 1 for every n a float counts exactly, and 4 / phi prefixes overflow


def _check_phi(phi) -> float:
    if isinstance(phi, bool) or not isinstance(phi, (int, float)) or not PHI_MIN <= phi < 1:
        raise ParameterError("phi", "in [2^-64, 1): heavy items are held by at least phi n users", phi)
    return float(phi)


def _first_level(n_users: int, phi: float, width: int, step: int) -> int:
    """s: the authors' ceil(log2(n / (phi log2 n))), capped at 2^24 prefixes, a multiple of ``step``, and below
    the last level when there is room for two levels."""
    if width == step:
        return width
    ratio = n_users / (phi * math.log2(n_users))  # inf for a phi near the least float: past any cap
    s = math.ceil(math.log2(ratio)) if math.isfinite(ratio) else FIRST_LEVEL_BITS_MAX
    s = step * max(1, min(s, FIRST_LEVEL_BITS_MAX) // step)
    return min(s, width - step)


@on_disk("fe-hh-level-tails", (__file__, shuffle.__file__))  # kept per version of this code (privacy.evaluation_cache)
def level_tail(n_users: int, levels: int, users: int) -> float:
    """Pr[the changed user's level holds fewer than ``users`` users]: 1 + Bin(n - 1, 1 / levels) < m."""
    if levels == 1 or users < 2:
        return 0.0
    return float(shuffle.binomial_cdf(users - 2, n_users - 1, 1.0 / levels))


def _level_users(n_users: int, levels: int, budget: float) -> int:
    """The most users m a level's noise may be calibrated for with the tail (:func:`level_tail`) at most
    ``budget``."""
    if levels == 1:
        return n_users
    low, high = 1, n_users  # tail(1) = 0; find the largest m with tail(m) <= budget
    while low < high:
        mid = (low + high + 1) // 2
        low, high = (mid, high) if level_tail(n_users, levels, mid) <= budget else (low, mid - 1)
    return low


def _least_users(levels: int, budget: float) -> int:
    """The least n whose levels may each be calibrated for 2 users or more (:func:`_level_users`)."""
    low, high = 2, 4
    while _level_users(high, levels, budget) < 2:
        low, high = high, 2 * high
    while high - low > 1:
        mid = (low + high) // 2
        low, high = (low, mid) if _level_users(mid, levels, budget) >= 2 else (mid, high)
    return high


TAIL_SHARES = (1 / 2, 1 / 8, 1 / 32, 1 / 128, 1 / 1024)  # of delta, tried for the level tail: the least rho wins


def filter_probability(n_users: int, phi: float, levels: int, domain_size: int) -> float:
    """p_f: the authors' min(8 K/(phi n) ln(K/(0.1 phi)), 30 K/(phi n) ln(phi B)) with K levels, at most 1.

    A phi n heavy item then puts 8 ln(K / (0.1 phi)) messages in expectation at each level (reference §2.4);
    ln(phi B) is floored at 1 (our change: the authors' term goes to 0 as phi B nears 1).
    """
    terms = [1.0, 8 * levels / (phi * n_users) * math.log(levels / (0.1 * phi))]
    # ln(phi B) floored at 1: near phi B = 1 the authors' second term would thin every message away
    terms.append(30 * levels / (phi * n_users) * max(1.0, math.log(phi * domain_size)))
    return min(terms)


def level_hashes(first_level: int, step: int, levels: int, bins: int, exact_codes: bool) -> tuple[UniversalHash, ...]:
    """FE1's family at each level: a prime q >= the level's code space (2^bits, or P past the first level
    when the codes are hashed) and b bins."""
    def modulus(level: int) -> int:
        space = 1 << (first_level + level * step) if level == 0 or exact_codes else CODE_PRIME
        return next_prime(max(space, bins))
    return tuple(UniversalHash(modulus(k), bins) for k in range(levels))


def _normal_tail(z: float) -> float:
    """Pr[N(0, 1) > z]."""
    return 0.5 * math.erfc(z / math.sqrt(2))


def _normal_quantile(tail: float) -> float:
    """z with Pr[N(0, 1) > z] = ``tail``: -Phi^-1(tail), exact for tails below 1e-16 too (1 - tail would round to 1),
    a tail that underflowed to 0 taken at the least float."""
    from statistics import NormalDist

    return -NormalDist().inv_cdf(max(tail, 5e-324))


@dataclass(frozen=True)
class HeavyHitterParameters(FrozenParameters):
    """fe-hh: the prefix tree's levels, FE1's bins and noise per level, thinning, and the thresholds."""

    protocol: ClassVar[str] = "fe-hh"
    mechanism: ClassVar[str] = ("fe-hh: one uniformly chosen prefix level per user, FE1 over that level's prefix "
                                "codes, each message kept with probability p_f")
    model: ClassVar[str] = "shuffle"
    trusted: ClassVar[tuple[str, ...]] = ("shuffler",)
    honest_fraction: ClassVar[float] = 1.0

    epsilon: float
    delta: float
    n_users: int
    domain_size: int  # integers: B; strings: 256^L (every byte string of L bytes)
    phi: float
    calibration: str
    bins: int  # b = max(2, ceil(n / log2^2 n)), the authors' hash range at every level
    first_level: int  # s, in bits
    level_users: int  # m: the users every level's noise is calibrated for
    mu: float
    rho: float  # mu b / m dummies per user, before thinning
    filter_probability: float
    code_key: int
    max_length: int | None = None  # strings: L bytes; None: integers

    code_prime: ClassVar[int] = CODE_PRIME  # P: a code key is in [2, P - 1]

    def __post_init__(self) -> None:
        check_epsilon(self.epsilon)
        check_delta(self.delta)
        n = check_integer("n_users", self.n_users, 2, N_USERS_MAX)
        _check_phi(self.phi)
        if self.max_length is None:
            check_integer("domain", self.domain_size, 2, INTEGER_DOMAIN_MAX)
        else:
            check_integer("max-length", self.max_length, 1, MAX_LENGTH_MAX)
            if self.domain_size != 256**self.max_length:
                raise ParameterError("domain", f"256^max_length = {256**self.max_length} for strings",
                                     self.domain_size)
        if self.calibration not in calibration_bib.METHODS:
            raise ParameterError("calibration", f"one of {', '.join(calibration_bib.METHODS)}", self.calibration)
        derived = (("bins", lambda: max(2, math.ceil(n / math.log2(n) ** 2))),
                   ("first_level", lambda: _first_level(n, self.phi, self.width, self.step)),
                   ("filter_probability", lambda: filter_probability(n, self.phi, self.levels, self.domain_size)))
        for name, value in derived:  # in order: each check may rest on the fields checked before it
            if getattr(self, name) != (expected := value()):
                raise ParameterError(name, f"{expected!r}, as n, phi, the domain and delta imply", getattr(self, name))
        # the exact binomial tail that fixes level_users needs scipy: verify() checks it
        check_integer("level_users", self.level_users, 2, n)
        if self.exact_codes and self.code_key != 1 << self.step:
            raise ParameterError("code_key", f"2^step = {1 << self.step} (every prefix fits the code space)",
                                 self.code_key)
        check_integer("code_key", self.code_key, 2, CODE_PRIME - 1)
        if not (self.mu > 0 and math.isfinite(self.mu)):
            raise ParameterError("mu", "a finite number > 0", self.mu)
        if not math.isclose(self.rho, self.mu * self.bins / self.level_users, rel_tol=1e-12):
            raise ParameterError("rho", f"mu * bins / level_users = {self.mu * self.bins / self.level_users!r}",
                                 self.rho)
        floor = self.no_noise_probability()
        if floor > self.delta:
            raise ParameterError("mu", f"large enough that the chance of no noise where the neighbour's message "
                                 f"would go ({floor:.3g}) is at most delta", self.mu)

    def no_noise_probability(self) -> float:
        """(1 - p_col) Pr[no dummy of the level's m users lands in S_y minus S_x]: the limit, as epsilon grows,
        of the bound the calibration uses; numpy-free, so that a device without scipy still refuses (next to)
        no noise. A floor on what the claim needs, not a proof of it (verify() checks the claim)."""
        whole, frac = math.floor(self.rho), self.rho - math.floor(self.rho)
        hit = (1.0 - self.overlap) / self.bins
        users = self.level_users
        return math.exp(math.log1p(-self.overlap) + users * (whole * math.log1p(-hit) + math.log1p(-frac * hit)))

    def verify(self) -> None:
        """Check what scipy is needed for: mu, for level_users users at every level, and the chance that the
        changed user's level holds fewer (the binomial tail) buy the claimed (epsilon, delta) at the levels'
        largest overlap (nothing recalibrated)."""
        if self.calibration == "closed_form":
            needed = calibration_bib.closed_form_noise(self.epsilon, self.delta - self.level_tail)
            if self.mu < needed:
                raise ParameterError("mu", f">= 32 ln(2/delta)/eps^2 = {needed:.6g}", self.mu)
            return
        self.check_delta_at("mu", self.mu)

    # --- the tree -----------------------------------------------------------------------------------------
    @property
    def width(self) -> int:
        """W: bits of a value."""
        return 8 * self.max_length if self.max_length is not None else max(1, (self.domain_size - 1).bit_length())

    @property
    def step(self) -> int:
        return 1 if self.max_length is None else STRING_STEP

    @property
    def levels(self) -> int:
        """K: the number of levels s, s + step, ..., W."""
        return (self.width - self.first_level) // self.step + 1

    @property
    def exact_codes(self) -> bool:
        """Whether every prefix is its own code (2^W <= P)."""
        return self.width <= EXACT_WIDTH_MAX

    @functools.cached_property
    def hashes(self) -> tuple[UniversalHash, ...]:
        return level_hashes(self.first_level, self.step, self.levels, self.bins, self.exact_codes)

    @property
    def layout(self) -> MessageLayout:
        top = max(h.modulus for h in self.hashes)
        return MessageLayout((Column("level", 0, self.levels), Column("u", 1, top), Column("v", 0, top),
                              Column("w", 0, self.bins)))

    @property
    def survivor_cap(self) -> int:
        return math.ceil(SURVIVORS_PER_PHI / self.phi)

    @property
    def threshold(self) -> float:
        """phi n: an item is reported when its estimate reaches it; a prefix survives at half of it."""
        return self.phi * self.n_users

    # --- theory --------------------------------------------------------------------------------------------
    @property
    def messages_per_user(self) -> float:
        """p_f (1 + rho) expected messages per user."""
        return self.filter_probability * (1 + self.rho)

    @property
    def messages_sd(self) -> float:
        """Standard deviation of the total number of messages (the thinned real and dummy messages)."""
        frac, pf = self.rho - math.floor(self.rho), self.filter_probability
        per_user = pf * (1 - pf) * (1 + self.rho) + pf**2 * frac * (1 - frac)  # Var Bin(1 + D, p_f), E D = rho
        return math.sqrt(self.n_users * per_user)

    def _moments(self, match: float) -> tuple[float, float]:
        """(mean, variance) of one user's contribution to a code's count at one level, when his real message
        matches with probability ``match`` if he is at that level (1 for a holder, p_col for the others)."""
        a, pf = 1.0 / self.levels, self.filter_probability
        r = pf / self.bins  # a dummy is kept and matches
        frac = self.rho - math.floor(self.rho)
        real, dummy = pf * match, self.rho * r
        dummy_sq = self.rho * r * (1 - r) + r * r * frac * (1 - frac) + dummy * dummy
        inner_sq = real + 2 * real * dummy + dummy_sq  # E[(R + S)^2], R a 0/1 coin independent of S
        mean = a * (real + dummy)
        return mean, a * inner_sq - mean * mean

    # estimate, count_at, standard_error: of the m users whose reports were counted (``reporters``; default: the
    # calibrated n), whose real messages and dummies the counts hold (docs/derivations.md, "An early close")
    def estimate(self, counts, level: int, reporters: int | None = None) -> np.ndarray:
        """Unbiased estimates of the number of holders of codes among the m users counted, from their counts at
        ``level``: (K c / p_f - m p_col - m rho / b) / (1 - p_col)."""
        p = self.hashes[level].collision_probability
        scale = self.levels / self.filter_probability
        noise = self.counted(reporters) * (p + self.rho / self.bins)
        return (np.asarray(counts, dtype=np.float64) * scale - noise) / (1 - p)

    def count_at(self, estimate: float, level: int, reporters: int | None = None) -> float:
        """The count whose estimate at ``level`` is ``estimate`` (the inverse of :meth:`estimate`)."""
        p = self.hashes[level].collision_probability
        noise = self.counted(reporters) * (p + self.rho / self.bins)
        return (estimate * (1 - p) + noise) * self.filter_probability / self.levels

    def variance_terms(self, level: int, reporters: int | None = None) -> tuple[float, float]:
        """(a, c) with Var(g_hat) = a + c g for a code held by g of the m users counted, at ``level``: the
        variance is linear in the holders (docs/derivations.md, "Heavy hitters", "Variance")."""
        p = self.hashes[level].collision_probability
        m = self.counted(reporters)
        var_holder, var_other = self._moments(1.0)[1], self._moments(p)[1]
        scale = (self.levels / self.filter_probability / (1 - p)) ** 2
        return scale * m * var_other, scale * (var_holder - var_other)

    def standard_error(self, holders, level: int | None = None, reporters: int | None = None) -> np.ndarray:
        """Standard deviation of one level's estimate (default: the last level's) of a code held by ``holders``
        of the m users counted (clipped to [0, m])."""
        a, c = self.variance_terms(-1 if level is None else level, reporters)
        return np.sqrt(a + c * np.clip(np.asarray(holders, dtype=np.float64), 0, self.counted(reporters)))

    def combined(self, level: int, parent: tuple, own: np.ndarray, siblings, sibling_held, fanouts,
                 reporters: int | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """One step down an item's prefix path (docs/derivations.md, "Heavy hitters", "The report's estimate"):
        the (estimate, variance, reference variance) of each child from its own estimate at ``level`` and its
        parent's combined estimate less the sum of its siblings' estimates, both unbiased (a prefix's holders
        are its children's), weighed by inverse variances taken at fixed reference points (the child at phi m
        holders, each sibling at none), so that the combination stays linear and unbiased whatever the data.

        ``parent``: (estimate, variance, reference variance) of each child's parent; ``siblings``: the sum of
        the other children's estimates; ``sibling_held``: the same sum with each estimate clipped to [0, m] (its
        variance's plug-in); ``fanouts``: the parent's children (1 + the siblings). The variance plugs each
        estimate into :meth:`variance_terms`, as :meth:`standard_error` does."""
        (a, c), m = self.variance_terms(level, reporters), self.counted(reporters)
        estimate, variance, reference = parent
        noise = (np.asarray(fanouts) - 1) * a
        prior, mine = reference + noise, a + c * self.phi * m
        weight = prior / (prior + mine)  # the child's own estimate's share
        out = weight * own + (1 - weight) * (estimate - siblings)
        spread = (1 - weight) ** 2 * (variance + noise + c * np.asarray(sibling_held)) \
            + weight**2 * (a + c * np.clip(out, 0, m))
        return out, spread, prior * mine / (prior + mine)

    def first_state(self, estimates, reporters: int | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(estimate, variance, reference variance) of first-level estimates: the start of :meth:`combined`."""
        (a, c), m, g = self.variance_terms(0, reporters), self.counted(reporters), np.asarray(estimates, np.float64)
        return g, a + c * np.clip(g, 0, m), np.full(g.shape, a + c * self.phi * m)

    def path_standard_error(self, holders: Sequence, siblings: Sequence, reporters: int | None = None) -> np.ndarray:
        """Standard deviation of the reported estimate (:meth:`combined` down the levels) of an item whose prefix
        at level k is held by ``holders[k]`` of the m users counted and its 2^step - 1 siblings there by
        ``siblings[k]`` together (``siblings[0]`` unused): the variance of the linear combination, each estimate at
        its truth, the levels' and codes' covariances left out (a relative error of O(p_f / K + p_col):
        docs/derivations.md, "Heavy hitters"). Strings that end early have fewer siblings, and a smaller error."""
        state = self.first_state(holders[0], reporters)
        for k in range(1, self.levels):
            own = np.asarray(holders[k], dtype=np.float64)
            state = self.combined(k, state, own, siblings[k], siblings[k], 1 << self.step, reporters)
        return np.sqrt(state[1])

    def report_standard_error(self, holders, reporters: int | None = None) -> np.ndarray:
        """:meth:`path_standard_error` of an item held by ``holders`` of the m users counted (clipped to [0, m]),
        every prefix of it held by its holders alone and each sibling by no one: the theory's figures."""
        g = np.clip(np.asarray(holders, dtype=np.float64), 0, self.counted(reporters))
        return self.path_standard_error([g] * self.levels, [0.0] * self.levels, reporters)

    def detection(self) -> dict[str, float]:
        """Normal approximations of the tree's errors (the counts are sums of many independent small terms).

        ``miss_probability``: an item held by 1.5 phi n users falls below phi n / 2 at one of the K - 1 levels
        it must survive, or its reported estimate (:meth:`report_standard_error`) below phi n (union bound);
        ``false_report_probability``: an item held by phi n / 2 users is reported; ``report_band``: c such that
        an item held by (1 + c) phi n users or more is reported with probability >= 95% and one held by
        (1 - c) phi n or fewer with probability <= 5%, each side's sd at its own holders (the variance V(g) is
        affine in g: c phi n = 1.645 sd((1 +- c) phi n) solved, the larger c; the walk's misses aside);
        ``false_first_level``: expected prefixes held by no one that pass phi n / 2 at the first level (of 2^s).
        """
        t, z = self.threshold, _normal_quantile(0.05)
        sd_strong, sd_zero = (float(self.standard_error(g, 0)) for g in (1.5 * t, 0.0))
        report_strong, report_half, report_at, report_none = self.report_standard_error([1.5 * t, t / 2, t, 0]).tolist()
        miss = (self.levels - 1) * _normal_tail((1.5 * t - t / 2) / sd_strong) + _normal_tail(0.5 * t / report_strong)
        slope = z * z * abs(report_at**2 - report_none**2) / t  # z^2 |dV/dg|: (c t)^2 = z^2 V(t) +- c t z^2 dV/dg
        return {"miss_probability": min(1.0, miss), "false_report_probability": _normal_tail(0.5 * t / report_half),
                "report_band": (slope + math.sqrt(slope**2 + 4 * (z * report_at) ** 2)) / (2 * t),
                "false_first_level": 2.0 ** self.first_level * _normal_tail(0.5 * t / sd_zero),
                "standard_error_at_phi_n": report_at}

    def theory(self) -> dict[str, float | str]:
        return {"estimate": "g_hat = (K count / p_f - n p_col - n rho / b) / (1 - p_col) at each level, combined down "
                            "the item's prefixes (each parent's less its siblings', weighed with its own)",
                "prefix_threshold": self.threshold / 2, "report_threshold": self.threshold, **self.detection()}

    def expected_error(self, reporters: int | None = None) -> dict[str, float]:
        """Costs, the standard error at phi m, and alpha: every reported estimate (of at most survivor_cap 2^step
        children) is within alpha of its truth with probability 1 - beta (normal approximation, union bound, the
        largest standard error, at m holders); m: the users counted (default n)."""
        m, queries = self.counted(reporters), self.survivor_cap << self.step
        alpha = float(self.report_standard_error(m, reporters=m)) * _normal_quantile(MAX_ERROR_BETA / (2 * queries))
        return {"messages_per_user": self.messages_per_user, "bits_per_message": self.bits_per_message,
                "standard_error": float(self.report_standard_error(self.phi * m, reporters=m)),
                "standard_error_at": f"an item held by phi n = {self.phi * m:,.4g} users (the threshold)",
                "max_error_bound": alpha, "max_error_beta": MAX_ERROR_BETA}

    def derived(self) -> dict[str, Any]:
        return {"levels": self.levels, "width": self.width}

    def reliable(self) -> bool:
        """Whether the list is one to act on: both detection bounds (:meth:`detection`) at most
        :data:`RELIABLE_BOUND`; a list outside them is released marked not reliable."""
        d = self.detection()
        return d["miss_probability"] <= RELIABLE_BOUND and d["false_report_probability"] <= RELIABLE_BOUND

    def warnings(self) -> list[str]:
        d, out = self.detection(), super().warnings()
        if d["miss_probability"] > RELIABLE_BOUND:
            out.append(f"an item held by 1.5 phi n = {1.5 * self.threshold:.0f} users is missed with probability "
                       f"about {d['miss_probability']:.2g}: phi n is small for {self.levels} levels at this epsilon "
                       "(raise phi, or give more users)")
        if d["false_first_level"] > self.survivor_cap / 4:
            out.append(f"about {d['false_first_level']:.0f} noise prefixes pass the first level (at most "
                       f"{self.survivor_cap} are followed): the noise is large against phi n / 2")
        return out

    def costs(self) -> dict[str, dict[str, float]]:
        return {"user": {"sent": self.messages_per_user},
                "analyzer": {"received": self.n_users * self.messages_per_user}}

    def noise_fields(self, scale: float) -> dict[str, float]:
        return {"mu": self.mu * scale, "rho": self.rho * scale}

    # --- privacy -------------------------------------------------------------------------------------------
    @property
    def level_tail(self) -> float:
        """Pr[the changed user's level holds fewer than level_users users]: the delta the levels cannot cover."""
        return level_tail(self.n_users, self.levels, self.level_users)

    @property
    def overlap(self) -> float:
        """The largest p_col over the levels: the least private level (delta grows with the overlap, since the
        noise that hides the changed message lands in S_y minus S_x, a 1 - p_col share of a special set)."""
        return max(h.collision_probability for h in self.hashes)

    def delta_at(self, epsilon: float) -> float:
        """delta at ``epsilon``: FE1's hockey-stick bound for level_users users at the least private level, plus
        the chance that the changed user's level has fewer users."""
        return self.level_tail + kept_delta_at(epsilon, self.mu, self.level_users, self.bins, self.overlap)

    @property
    def privacy(self) -> PrivacyDescription:
        return PrivacyDescription.of(Mechanism(
            mechanism=self.mechanism,
            parameters={"mu": self.mu, "n_users": self.n_users, "levels": self.levels, "level_users":
                        self.level_users, "bins": self.bins, "overlap": self.overlap,
                        "level_tail": self.level_tail, "filter_probability": self.filter_probability},
            epsilon=self.epsilon, delta=self.delta, model=self.model, neighbouring=REPLACE_ONE,
            trusted=self.trusted, honest_fraction=1.0,
            assumptions=("all n users follow the protocol (none drops out or colludes)",
                         "each user draws his level and his thinning coins with secure randomness"),
            public=("the parameters", "the prefix code key"),
            method=self.calibration, method_detail=calibration_bib.METHOD_DETAIL[self.calibration]
            + f", for {self.level_users} users at every level; plus Pr[the changed user's level has fewer] = "
              f"{self.level_tail:.3g} (exact binomial tail); thinning is post-processing",
            reference="docs/derivations.md, 'Heavy hitters'",
            caveats=("discovered items are outputs of the private protocol and are reported by name",)))

    # --- values --------------------------------------------------------------------------------------------
    @staticmethod  # reached through the registry's entry: the simulator imports no protocol module
    def padded(values: Sequence, unused: np.ndarray, domain_size: int | None, max_length: int | None, phi,
               reports: int):
        """fe-hh over the n L = ``reports`` x n reports of users with L items each (docs/privacy.md, "Many rows a
        user", "Heavy hitters with L items a user"): (the checked values, each ``unused`` slot (a mask) set to a
        value no user's item can be; the domain_size to calibrate for; phi / L, so that the threshold phi / L x n L
        still counts phi n users; that value as the list would report it).

        Integers of [0, B): the value B, calibrated over B + 1 values (so B < 2^64). Strings: the bytes 00 01
        (:data:`UNUSED_SLOT`): items are refused with a zero byte, and the non-zero byte after it keeps it apart
        from the empty string (all zero bytes); so ``max_length`` >= 2. The value is one more value of the W-bit space,
        coded and counted as any other: no user's estimate is biased by it, and it is left out of the list."""
        share = None if phi is None else _check_phi(phi) / reports
        held = [v for v, slot in zip(values, unused.tolist()) if not slot]
        if max_length is None:
            if domain_size is None:
                raise ParameterError.required("domain_size", "for integer items: B (items in [0, B))")
            domain_size = check_integer("domain_size", domain_size, 2)
            if domain_size >= INTEGER_DOMAIN_MAX:
                raise ParameterError("domain_size", "below 2^64 with more than one item a user (a user's unused slots "
                                     "take the value B, which must fit 64 bits)", domain_size)
            checked = np.full(len(values), domain_size, dtype=np.uint64)
            checked[~unused] = _check_integers(held, domain_size)
            return checked, domain_size + 1, share, int(domain_size)
        if check_integer("max_length", max_length, 1) < 2:
            raise ParameterError("max_length", "at least 2 with more than one item a user (a user's unused slots take "
                                 "the 2-byte value 00 01, which no string item holds)", max_length)
        checked = np.zeros((len(values), max_length), dtype=np.uint8)
        checked[~unused] = _check_strings(held, max_length)
        checked[unused, :len(UNUSED_SLOT)] = np.frombuffer(UNUSED_SLOT, dtype=np.uint8)
        return checked, domain_size, share, UNUSED_SLOT.decode()

    def check_values(self, values) -> np.ndarray:
        """Integers in [0, B) as uint64, or strings (str as UTF-8, or bytes) of at most L bytes and no zero
        byte as an (n, L) uint8 matrix padded with zeros; anything else is an error naming the row."""
        if self.max_length is None:
            return _check_integers(values, self.domain_size)
        return _check_strings(values, self.max_length)

    def codes(self, values: np.ndarray, level: np.ndarray) -> np.ndarray:
        """The code of each checked value's prefix at its ``level`` (Horner's rule on the step-bit chunks)."""
        if self.exact_codes and self.max_length is None:  # K = 2, no code reaches P: Horner's rule is a shift
            return (values >> (np.uint64(self.width - self.first_level) - level.astype(np.uint64))).astype(np.int64)
        first, chunk = self._chunks(values)
        code = first.astype(np.int64)
        key = np.int64(self.code_key)
        for j in range(1, int(level.max(initial=0)) + 1):
            deeper = np.flatnonzero(level >= j)
            code[deeper] = (mulmod(code[deeper], key, CODE_PRIME) + chunk(j, deeper)) % CODE_PRIME
        return code

    def _chunks(self, values: np.ndarray):
        """(the first s bits of every value, chunk(j, rows): the j-th step-bit chunk after them)."""
        if self.max_length is None:
            shift = self.width - self.first_level
            return values >> np.uint64(shift), lambda j, rows: (
                (values[rows] >> np.uint64(shift - j)) & np.uint64(1)).astype(np.int64)
        head = self.first_level // 8
        first = np.zeros(len(values), dtype=np.int64)
        for column in range(head):
            first = (first << 8) | values[:, column]
        return first, lambda j, rows: values[rows, head + j - 1].astype(np.int64)

    def item_value(self, value: int) -> int | str:
        """A discovered value as reported: the integer, or the string (UTF-8, undecodable bytes escaped)."""
        if self.max_length is None:
            return int(value)
        return value.to_bytes(self.max_length, "big").rstrip(b"\0").decode("utf-8", errors="backslashreplace")


def _check_integers(values, domain_size: int) -> np.ndarray:
    if not isinstance(values, np.ndarray):  # Python ints: numpy would make floats of a list spanning 2^63
        values = list(check_sequence("items", values, f"a sequence of integers in [0, {domain_size}), one per user"))
        for row, value in enumerate(values):
            if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or not 0 <= value < domain_size:
                raise ParameterError("item", f"an integer in [0, {domain_size})", value, row)
        return np.array(values, dtype=np.uint64)
    array = values
    if array.ndim != 1 or (array.size and not np.issubdtype(array.dtype, np.integer)):
        raise ParameterError("item", f"integers in [0, {domain_size}), one per user", f"dtype {array.dtype}, shape "
                             f"{array.shape}")
    unsigned = array.astype(np.uint64, copy=False)  # a copy only of signed or narrower items, made once
    bad = (unsigned > np.uint64(domain_size - 1)) | ((array < 0) if array.dtype.kind != "u" else False)
    if bad.any():
        row = int(np.flatnonzero(bad)[0])
        raise ParameterError("item", f"an integer in [0, {domain_size})", int(array[row]), row)
    return unsigned


def _check_strings(values, max_length: int) -> np.ndarray:
    if isinstance(values, np.ndarray) and values.dtype == np.uint8 and values.shape[1:] == (max_length,):
        return values  # already checked (:func:`padded`'s matrix: the rows as the clients code them)
    if isinstance(values, (str, bytes)):
        raise ParameterError("items", "a sequence of strings, one per user", "a single string")
    check_sequence("items", values, "a sequence of strings, one per user")
    encoded = []
    for row, item in enumerate(values):
        try:
            data = item.encode("utf-8") if isinstance(item, str) else item
        except UnicodeEncodeError:
            raise ParameterError("item", "text that UTF-8 encodes (no lone surrogates)", repr(item), row) from None
        if not isinstance(data, (bytes, bytearray)):
            raise ParameterError("item", "a string", type(item).__name__, row)
        if len(data) > max_length:
            raise ParameterError("item", f"at most --max-length {max_length} bytes", f"{item!r} ({len(data)} bytes)",
                                 row)
        if 0 in data:
            raise ParameterError("item", "a string without a zero byte (values are padded with zero bytes)",
                                 repr(item), row)
        encoded.append(bytes(data))
    matrix = np.zeros((len(encoded), max_length), dtype=np.uint8)
    if encoded:
        packed = np.array(encoded, dtype=f"S{max_length}")
        matrix[:] = packed.view(np.uint8).reshape(len(encoded), max_length)
    return matrix


# --- calibration -------------------------------------------------------------------------------------------


def calibrate_fe_hh(epsilon: float, delta: float, n_users: int, domain_size: int | None, phi: float | None = None,
                    max_length: int | None = None, calibration: str = "hockey_stick",
                    code_key: int | None = None) -> HeavyHitterParameters:
    """fe-hh's parameters for (epsilon, delta)-DP in the shuffle model.

    Integers: ``domain_size`` B up to 2^64. Strings: ``max_length`` L bytes (``domain_size`` left out, or
    256^L). ``code_key``: the public key of the prefix codes when 2^W > P (default: drawn from the OS).
    """
    epsilon, delta = check_epsilon(epsilon), check_delta(delta)
    n = check_integer("n_users", n_users, 2, N_USERS_MAX)
    if phi is None:
        raise ParameterError("phi", "given: heavy items are those held by at least phi n users, phi in (0, 1)", None)
    phi = _check_phi(phi)
    if max_length is None:
        if domain_size is None:
            raise ParameterError("domain", "given for integer items (B: items in [0, B)), or --max-length L for "
                                 "strings", None)
        domain = check_integer("domain", domain_size, 2, INTEGER_DOMAIN_MAX)
        width, step = max(1, (domain - 1).bit_length()), 1
    else:
        max_length = check_integer("max-length", max_length, 1, MAX_LENGTH_MAX)
        if domain_size not in (None, 256**max_length):
            raise ParameterError("domain", "left out for strings (--max-length sets it)", domain_size)
        domain, width, step = 256**max_length, 8 * max_length, STRING_STEP
    s = _first_level(n, phi, width, step)
    levels = (width - s) // step + 1
    if _level_users(n, levels, delta / 2) < 2:
        raise ParameterError("users", f"at least {_least_users(levels, delta / 2):,} for {levels} levels of at least 2 "
                             f"users each (delta / 2 = {delta / 2:.3g} bounds the chance of fewer); or fewer levels: "
                             "a shorter --max-length or a smaller --domain", n)
    bins = max(2, math.ceil(n / math.log2(n) ** 2))
    if width <= EXACT_WIDTH_MAX:
        key = 1 << step
    else:
        key = check_integer("code_key", code_key, 2, CODE_PRIME - 1) if code_key is not None else \
            2 + secrets.randbelow(CODE_PRIME - 2)
    overlap = max(h.collision_probability for h in level_hashes(s, step, levels, bins, width <= EXACT_WIDTH_MAX))
    # delta splits between the level tail and FE1's noise: a larger m needs less noise per message but leaves
    # FE1 less delta; the share of the tail with the least rho = mu b / m wins
    choices = []
    for users in sorted({_level_users(n, levels, share * delta) for share in TAIL_SHARES}):
        if users >= 2:
            mu = kept_calibration(epsilon, delta - level_tail(n, levels, users), users, bins, calibration, overlap)
            choices.append((mu * bins / users, users, mu))
    _, users, mu = min(choices)
    return HeavyHitterParameters(
        epsilon=epsilon, delta=delta, n_users=n, domain_size=domain, phi=phi, calibration=calibration, bins=bins,
        first_level=s, level_users=users, mu=mu, rho=mu * bins / users, code_key=key, max_length=max_length,
        filter_probability=filter_probability(n, phi, levels, domain))


# --- roles -------------------------------------------------------------------------------------------------


class HeavyHitterClient:
    """A user's randomizer: one level, FE1's messages for his prefix there, each kept with probability p_f."""

    def __init__(self, parameters: HeavyHitterParameters) -> None:
        self.parameters, self.layout = parameters, parameters.layout

    def randomize(self, values, rng: RNGLike = None) -> MessageBatch:
        """The messages of a batch of users (``rng=None``: secure randomness).

        Thinning is drawn per user as Bin(messages, p_f), the same law as a coin per message; it does not
        touch privacy (post-processing), so its floating-point binomial sampler is harmless. The dummy count
        floor(rho) + [uniform < rho - floor(rho)] is exact, as FE1's.
        """
        p, rng = self.parameters, resolve(rng)
        values = p.check_values(values)
        n = len(values)
        level = rng.integers(0, p.levels, size=n)
        real = np.flatnonzero(rng.random(n) < p.filter_probability)
        dummies = np.bincount(level, weights=rng.binomial(dummy_counts(n, p.rho, rng), p.filter_probability),
                              minlength=p.levels).astype(np.int64)
        codes, real_level = p.codes(values[real], level[real]), level[real]
        parts = []
        for k, h in enumerate(p.hashes):
            mine = real_level == k
            u, v = h.sample_keys(int(mine.sum()), rng)
            du, dv = h.sample_keys(int(dummies[k]), rng)
            parts.append({"level": np.full(u.size + du.size, k), "u": np.concatenate([u, du]),
                          "v": np.concatenate([v, dv]), "w": np.concatenate(
                              [h.evaluate(u, v, codes[mine]), rng.integers(0, p.bins, size=du.size)])})
        return self.layout.batch({name: np.concatenate([part[name] for part in parts]) for name in self.layout.names})


@dataclass
class HeavyHitterAggregate:
    """The well-formed messages received, per level (u, v, w columns), and the counts seen and dropped."""

    levels: list[list[tuple[np.ndarray, np.ndarray, np.ndarray]]]
    messages: int = 0
    malformed: int = 0


class HeavyHitterAnalyzer:
    """The tree walk: count the first level's prefixes, then the children of the survivors level by level."""

    def __init__(self, parameters: HeavyHitterParameters, queries=None) -> None:
        if queries is not None:
            raise ParameterError("candidates", "left out for fe-hh (it discovers its items)", "a list")
        self.parameters, self.layout = parameters, parameters.layout

    def agg_init(self) -> HeavyHitterAggregate:
        return HeavyHitterAggregate([[] for _ in range(self.parameters.levels)])

    def agg_update(self, agg: HeavyHitterAggregate, messages: MessageBatch) -> HeavyHitterAggregate:
        """Keep ``messages`` by level (one stable sort by level, each level's rows a slice in their order, not a pass
        over the batch per level); rows outside the layout or outside their level's field are malformed."""
        for part in messages.slices():
            clean, dropped = self.layout.validate(part)
            order = np.argsort(clean["level"], kind="stable")
            ends = np.cumsum(np.bincount(clean["level"], minlength=self.parameters.levels))[:-1]
            split = [np.split(clean[name][order], ends) for name in "uvw"]
            for k, (h, u, v, w) in enumerate(zip(self.parameters.hashes, *split)):
                ok = (u < h.modulus) & (v < h.modulus)
                kept = int(ok.sum())
                dropped += u.size - kept
                if kept:
                    agg.levels[k].append((u, v, w) if kept == u.size else (u[ok], v[ok], w[ok]))
                agg.messages += kept
            agg.malformed += dropped
        return agg

    def merge(self, aggs: Sequence[HeavyHitterAggregate]) -> HeavyHitterAggregate:
        total = self.agg_init()
        for a in aggs:
            for k, parts in enumerate(a.levels):
                total.levels[k].extend(parts)
            total.messages += a.messages
            total.malformed += a.malformed
        return total

    def finalize(self, agg: HeavyHitterAggregate, reporters: int | None = None) -> HeavyHitterList:
        """The items held by at least phi m of the m = ``reporters`` users whose reports ``agg`` holds (default:
        the calibrated n), estimated among them.

        A prefix survives a level on that level's own estimate (at phi m / 2); an item is reported on its
        estimate combined over its path (:meth:`HeavyHitterParameters.combined`: every level's count of its
        prefixes, less their siblings'): at SDPFE's HHD setting (n 10^7, 25 levels of integers) its standard error at
        phi m is 0.48 of the last level's; over strings, whose prefixes have 255 siblings, little less unless the
        string has ended (docs/derivations.md, "Heavy hitters")."""
        p = self.parameters
        m = p.counted(reporters)
        top = p.phi * m
        columns = [tuple(np.concatenate([part[i] for part in parts]) if parts else np.zeros(0, np.int64)
                         for i in range(3)) for parts in agg.levels]
        counts = p.hashes[0].count_all(*columns[0], 1 << p.first_level)
        threshold = top if p.levels == 1 else top / 2
        # estimates grow with counts: only the prefixes whose count can reach the threshold get one
        passing = np.flatnonzero(counts >= np.floor(p.count_at(threshold, 0, m)))
        estimates = p.estimate(counts[passing], 0, m)
        kept, capped = _survivors(estimates, threshold, p.survivor_cap)
        del counts
        values, codes = [int(x) for x in passing[kept]], passing[kept]
        state = p.first_state(estimates[kept], m)
        survivors, capped_levels = [len(values)], [0] if capped else []  # level 0, when its cap dropped any
        for k in range(1, p.levels):
            if not values:
                break
            bases = mulmod(codes, np.int64(p.code_key), CODE_PRIME)
            fanouts = np.full(len(values), 1 << p.step, dtype=np.int64)
            if p.max_length is not None:  # a string has ended once a zero byte is read: only zero bytes follow
                fanouts[np.array([x & 0xFF == 0 for x in values], dtype=bool)] = 1
            counts = p.hashes[k].count_progressions(*columns[k], bases, fanouts)
            parent, child = np.nonzero(np.arange(counts.shape[1]) < fanouts[:, None])
            child_codes = (bases[parent] + child) % CODE_PRIME
            child_values = [(values[i] << p.step) | int(j) for i, j in zip(parent.tolist(), child.tolist())]
            own = p.estimate(counts[parent, child], k, m)
            held = np.clip(own, 0, m)  # every child counted, the out-of-range ones below too (unbiased, held by none)
            siblings = np.bincount(parent, own, len(values))[parent] - own
            sibling_held = np.bincount(parent, held, len(values))[parent] - held
            state = p.combined(k, tuple(x[parent] for x in state), own, siblings, sibling_held, fanouts[parent], m)
            last = k == p.levels - 1
            inside = np.arange(len(child_values))
            if last and p.max_length is None:  # the last level's values must lie in [0, B)
                inside = np.flatnonzero([x < p.domain_size for x in child_values])
            kept, capped = _survivors(state[0][inside] if last else own[inside], top if last else top / 2,
                                      p.survivor_cap)
            kept = inside[kept]
            values, codes = [child_values[i] for i in kept.tolist()], child_codes[kept]
            state = tuple(x[kept] for x in state)
            survivors.append(len(values))
            if capped:
                capped_levels.append(k)
        if len(survivors) < p.levels:
            values, state = [], (np.zeros(0),) * 3
        order = sorted(range(len(values)), key=lambda i: values[i])
        items = [p.item_value(values[i]) for i in order]
        estimates, variances = (np.asarray(x, dtype=np.float64)[order] for x in state[:2])
        return HeavyHitterList(p, np.array(items, dtype=object), estimates, top, standard_errors=np.sqrt(variances),
                               survivors=tuple(survivors), capped_levels=tuple(capped_levels),
                               messages=agg.messages, malformed=agg.malformed, reporters=reporters)


def _survivors(estimates: np.ndarray, threshold: float, cap: int) -> tuple[np.ndarray, bool]:
    """(the places of the estimates that reach ``threshold``, at most ``cap`` of them (the largest), capped:
    whether the cap dropped any)."""
    keep = np.flatnonzero(estimates >= threshold)
    capped = keep.size > cap
    if capped:
        keep = keep[np.argsort(-estimates[keep], kind="stable")[:cap]]
    return keep, capped
