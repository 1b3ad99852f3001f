"""Sampling + secret sharing (Yang, Tjuawinata, Lam, Zhu, Zhao, arXiv:2104.05974): DPCS, DPCS*, DPDS, DPDG, TSS, TSS'.

Users hold one item of [N] each (categorical data, one-hot encoded). Privacy
comes from sampling: each user's item is counted with probability p, and
nobody but the user knows whether it was. The released counts are the
sampled users' counts; estimates are counts ``tau_j / p`` (the paper's
frequencies times n). Reference: ../shared/papers/fair-dp-distributed-frequency.md;
what was derived here is in docs/derivations.md, "Sampling and secret sharing".

* ``dpcs`` -- §2.1: a trusted server samples the records and counts them
  (:class:`SamplingCurator`).
* ``dpcs-star`` -- §2.2: the same, but the server releases the counts as n
  additive shares over F_q; a receiver reconstructs them (same output).
* ``dpds`` -- Algorithm 2: each user samples his own participation, shares his
  one-hot (or zero) vector among all n users, each user forwards the sum of
  the shares he received, the server reconstructs (:class:`SumServer`). The
  server sees what it would see under DPCS*. The parties, which agree their
  shares by key and survive dropouts, are in
  :mod:`privagg.protocols.sharing_parties`.
* ``dpdg`` -- §2.4: no sampling; each user adds distributed discrete Gaussian
  noise (integer, exact sampler) to his one-hot vector at the fixed-point
  scale 2^k before the same sharing; privacy of the sum is computed exactly
  (:mod:`privagg.privacy.discrete_gaussian`).
* ``tss`` / ``tss-collusion`` -- Algorithm 3: users send a report set A_i of
  alpha N items to S1, which elects max(m_j, phi + 1) helper users per item;
  reporters share their entry among item j's helpers, helpers sum and forward
  to S2 (:class:`SumServer`), which estimates with the effective rate p p_chi.
  The parties are in :mod:`privagg.protocols.two_server_parties`.

Here: the parameters, their theory and calibration, the trusted servers of
DPCS and DPCS*, the server's field sums (:class:`SumServer`), the fast path
and weighted aggregation. Privacy of the sampled counts is
computed exactly (:mod:`privagg.privacy.sampling`), under the data condition
the user states: every item held by at least beta n users
(``min_count_fraction``), checked against the data before any run.
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

from ..core.coins import at_most, coins
from ..core.encoding import check_item_key
from ..core.messages import SLICE_ROWS, Column, MessageBatch, MessageLayout
from ..core.randomness import RNGLike, resolve
from ..core.sharing import MODULUS_MAX, PrimeField, reconstruct, share
from ..errors import ParameterError, check_delta, check_epsilon, check_integer
from ..privacy import sampling as accountant
from ..privacy.description import REPLACE_ONE, Mechanism, PrivacyDescription
from .balls_into_bins import N_USERS_MAX, check_honest_fraction
from . import exact_laws
from .parameters import FrozenParameters, check_item_codes, honest_users
from .results import FrequencyTable

CATEGORIES_MAX = 2**20  # N: every user's vector has N field elements
BLOCK_SHARES = 1 << 22  # DPCS*'s server shares this many elements (n x a block of categories) at a time
MAX_ERROR_BETA = 0.05
SAMPLING_CALIBRATIONS = ("exact", "paper", "closed_form")
NOISE_CALIBRATIONS = ("tight", "classic")
SECOND_STAGES = ("uniform", "adaptive")

METHOD_DETAIL = {
    "exact": "the largest p whose exact delta(eps) of the sampled counts meets the target (hockey-stick divergence "
             "over the changed pair of items, every other count at its minimum)",
    "paper": "p = 1 - e^-eps, the choice the paper's variance comparison implies; its delta computed exactly",
    "closed_form": "p = 1 - e^-eps with the loose Chernoff closed form delta = exp(-p (1 - p)^2 m / 3) (derived for "
                   "add/remove neighbours; the replace-one delta is checked exactly too)",
    "tight": "the least per-user discrete Gaussian variance whose summed noise meets (eps, delta), computed "
             "exactly from the law of the sum",
    "classic": "the classic Gaussian mechanism's sigma = sqrt(2 ln(1.25/delta))/eps the paper uses, its delta "
               "checked exactly for the discrete sum",
}


def bernoulli(probability: float, size: int, rng: np.random.Generator) -> np.ndarray:
    """Coins with Pr[1] = floor(p 2^53) / 2^53 <= p exactly (never more than p)."""
    return coins(at_most(probability), size, rng)


# --- parameters -----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class SharingParameters(FrozenParameters):
    """What the family shares: n users, N categories, (eps, delta), the field the shares live in."""

    protocol: ClassVar[str]
    mechanism: ClassVar[str]
    model: ClassVar[str] = "secret_sharing"
    trusted: ClassVar[tuple[str, ...]] = ()
    domain_max: ClassVar[int] = CATEGORIES_MAX
    calibrations: ClassVar[tuple[str, ...]] = SAMPLING_CALIBRATIONS

    epsilon: float
    delta: float
    n_users: int
    domain_size: int
    calibration: str
    modulus: int
    item_key: str | None = dataclasses.field(default=None, kw_only=True)
    # G: the guarantee holds while ceil(G n) users follow the protocol (the others may drop out or collude)
    honest_fraction: float = dataclasses.field(default=1.0, kw_only=True)

    def __post_init__(self) -> None:
        check_epsilon(self.epsilon)
        check_delta(self.delta)
        check_integer("n_users", self.n_users, 2, N_USERS_MAX)
        check_integer("domain", self.domain_size, 2, self.domain_max)
        if self.calibration not in self.calibrations:
            raise ParameterError("calibration", f"one of {', '.join(self.calibrations)}", self.calibration)
        if self.item_key is not None:
            check_item_key(self.item_key)
        check_honest_fraction(self.honest_fraction, self.n_users)
        PrimeField(self.modulus)  # a prime below 2^62
        if self.modulus <= self.largest_aggregate:
            raise ParameterError("modulus", f"a prime above the largest aggregate {self.largest_aggregate} (a smaller "
                                 "field wraps the sum around)", self.modulus)

    @property
    def field(self) -> PrimeField:
        return PrimeField(self.modulus)

    @property
    def largest_aggregate(self) -> int:
        """The largest value a released sum can take: n for counts."""
        return self.n_users

    @property
    def layout(self) -> MessageLayout:
        """What the aggregating server receives: one field element per row, labelled with its item."""
        return MessageLayout((Column("item", 0, self.domain_size), Column("share", 0, self.modulus)))

    def check_codes(self, codes) -> np.ndarray:
        return check_item_codes(codes, self.domain_size)

    def check_population(self, codes: np.ndarray) -> None:
        """The condition on the data the guarantee rests on (none by default)."""

    def verify(self) -> None:
        self.check_delta_at("parameters", self.to_dict())

    def expected_error(self) -> dict[str, float]:
        """Costs and errors before any data is seen (each protocol's ``standard_error`` and ``max_error_bound``)."""
        return {"messages_per_user": self.messages_per_user, "bits_per_message": self.bits_per_message,
                "standard_error": float(self.standard_error(self.largest_count)),
                "max_error_bound": self.max_error_bound(MAX_ERROR_BETA), "max_error_beta": MAX_ERROR_BETA}

    @property
    def largest_count(self) -> int:
        """The largest count one item can have (where sampled counts' errors are largest)."""
        return self.n_users

    def _description(self, parameters: dict[str, float], assumptions: tuple[str, ...], reference: str,
                     caveats: tuple[str, ...] = ()) -> PrivacyDescription:
        return PrivacyDescription.of(Mechanism(
            mechanism=self.mechanism, parameters=parameters, epsilon=self.epsilon, delta=self.delta,
            model=self.model, neighbouring=REPLACE_ONE, trusted=self.trusted, honest_fraction=self.honest_fraction,
            assumptions=assumptions, public=("the parameters", "the list of categories"),
            method=self.calibration, method_detail=self.method_detail, reference=reference, caveats=caveats))

    @property
    def method_detail(self) -> str:
        return METHOD_DETAIL[self.calibration]


def min_count(n_users: int, fraction: float) -> int:
    """ceil(beta n), with beta n rounded to 9 decimals first (0.1 * 30 is 3 users, not 4); at least 1."""
    return max(1, math.ceil(round(fraction * n_users, 9)))


@dataclass(frozen=True)
class SamplingParameters(SharingParameters):
    """DPCS, DPCS*, DPDS: sampling probability p under the data condition "every count >= beta n"."""

    min_count_fraction: float
    sampling_probability: float
    # d: users of the task who dropped out before the release, which is over the n = n_users who remained (the
    # survivors' parameters, sharing_parties.survivors_parameters); the data condition is stated of all n + d
    dropouts: int = dataclasses.field(default=0, kw_only=True)

    def __post_init__(self) -> None:
        super().__post_init__()
        check_min_count_fraction(self.min_count_fraction, self.domain_size)
        check_integer("dropouts", self.dropouts, 0, N_USERS_MAX - self.n_users)
        check_class(self.enrolled, self.domain_size, min_count(self.enrolled, self.min_count_fraction),
                    self.min_count_fraction)
        if not 0 < self.sampling_probability <= 1:
            raise ParameterError("sampling-probability", "in (0, 1] (the probability that a user's record is "
                                 "counted)", self.sampling_probability)
        if not self.dropouts and self.min_count - (self.n_users - self.honest_users) < 1:
            raise ParameterError("honest-fraction", f"above 1 - beta = {1 - self.min_count_fraction:.3g} (beta = "
                                 f"{self.min_count_fraction:g}, the min-count-fraction): of the n = {self.n_users} "
                                 f"users, the {self.n_users - self.honest_users} who may not follow the protocol could "
                                 f"be all {self.min_count} holders of a category (at most {self.min_count - 1} may not "
                                 "follow it)", self.honest_fraction)

    @property
    def enrolled(self) -> int:
        """n + d: the users the data condition is stated of (n without dropouts)."""
        return self.n_users + self.dropouts

    @property
    def min_count(self) -> int:
        """The fewest users holding any item: m = ceil(beta n), as the user states it; after d dropouts, what that
        condition, stated of the n + d enrolled users, leaves the n who remain: ceil(beta (n + d)) - d, at least 0
        (the d who dropped out may all have held one category; docs/privacy.md, "Dropouts in DPDS and DPDG")."""
        return max(0, min_count(self.enrolled, self.min_count_fraction) - self.dropouts)

    @property
    def counted_holders(self) -> int:
        """The accountant's m: the checked dataset holds every category at least m times, so when one user's
        item is replaced, his category keeps at least m - 1 other holders and the new one has at least m; the
        accountant puts m - 1 on both. Less the users who may not follow the protocol (a dishonest user's coin
        is known to the adversary, so it is no noise); at least 1, the changed user himself (after dropouts a
        category may have no other holder left: delta is then p')."""
        return max(1, self.min_count - (self.n_users - self.honest_users))

    @property
    def effective_probability(self) -> float:
        """The chance that one holder's item is counted: p (p p_chi for TSS)."""
        return self.sampling_probability

    def derived(self) -> dict[str, Any]:
        return {"min_count": self.min_count, "effective_probability": self.effective_probability}

    def delta_at(self, epsilon: float) -> float:
        """delta(eps) of the released counts, exactly (privacy/sampling.py), at the counted holders."""
        return self.holders_delta(epsilon, self.counted_holders)

    def holders_delta(self, epsilon: float, holders: int) -> float:
        """delta(eps) when every category has at least ``holders`` counted holders."""
        return accountant.sampling_delta(epsilon, self.effective_probability, holders)

    def verify(self) -> None:
        """The exact delta at eps, for every calibration; the closed form's own conditions besides (it is derived
        for add/remove neighbours, so the replace-one claim also rests on the exact delta)."""
        if self.calibration == "closed_form":
            p, eps = self.effective_probability, self.epsilon
            if p >= 1 or math.log1p(-p) < -eps * (1 + 1e-12) or \
                    accountant.chernoff_delta(p, self.counted_holders) > self.delta * (1 + 1e-9):
                raise ParameterError("sampling-probability", f"at most 1 - e^-eps = {-math.expm1(-eps):.6g} with the "
                                     f"Chernoff delta at most {self.delta:g}", p)
        super().verify()

    def check_population(self, codes: np.ndarray) -> None:
        """Every one of the N categories must be held by at least beta n users: the guarantee needs it. The error
        says only that the condition fails, never which category or how many hold it (the data's, not the
        protocol's)."""
        if np.bincount(codes, minlength=self.domain_size).min() < self.min_count:
            raise ParameterError("min-count-fraction", f"at most the smallest category's share of the users, which "
                                 f"the data breaks: some category is held by fewer than beta n = {self.min_count} of "
                                 f"the {self.n_users} users, and the sampling guarantee needs every category held by "
                                 "beta n users (lower beta, merge rare categories, or use dpdg, which needs no data "
                                 "condition)", self.min_count_fraction)

    # --- theory: counts tau_j ~ Bin(Pi_j, p'), estimate tau_j / p' (reference §3.3, Lemma III.1) ---------------
    def estimate(self, sums: np.ndarray) -> np.ndarray:
        return np.asarray(sums, dtype=np.float64) / self.effective_probability

    def standard_error(self, estimate=0.0):
        """sqrt(Pi (1 - p') / p'): the sd of the estimate of an item held by Pi = ``estimate`` users (clipped to
        [0, n]). It is 0 at Pi = 0, so results report :meth:`reported_standard_error`, not this at the estimate."""
        p = self.effective_probability
        return np.sqrt(np.clip(estimate, 0, self.n_users) * (1 - p) / p)

    @property
    def report_weight(self) -> float:
        """1 / p': one counted holder's weight in an estimate. A result's standard error is then this sd at the
        estimate plus 1 / p', sqrt((tau + 1) (1 - p')) / p': the posterior sd of Pi given the released count tau
        under a flat prior (docs/derivations.md, "Reported standard errors"); a category whose count is 0 (nobody
        sampled) reads sqrt(1 - p') / p', the sd of one held by 1 / p' users, not 0."""
        return 1 / self.effective_probability

    @property
    def largest_count(self) -> int:
        """n - (N - 1) m: every other category holds at least m users."""
        return self.n_users - (self.domain_size - 1) * self.min_count

    def max_error_bound(self, beta: float = MAX_ERROR_BETA) -> float:
        """Bernstein + union bound over the N categories: Pr[max_j |est_j - Pi_j| > bound] <= beta."""
        if not 0 < beta < 1:
            raise ParameterError("beta", "in (0, 1): the probability that some category's error exceeds the "
                                 "bound (not the min-count-fraction)", beta)
        p, log_term = self.effective_probability, math.log(2 * self.domain_size / beta)
        variance = self.largest_count * p * (1 - p)
        return (log_term / 3 + math.sqrt((log_term / 3) ** 2 + 2 * variance * log_term)) / p

    def warnings(self) -> list[str]:
        """A rate so low that the smallest category's count is mostly noise; p = 1 (a stronger guarantee than
        asked for, capped by the report sets)."""
        p, m = self.effective_probability, self.min_count
        out = super().warnings()
        if p * m < 10:
            out.append(f"p' = {p:.3g} counts {p * m:.3g} of the {m} holders of the smallest category in expectation: "
                       "its estimate is mostly sampling noise; more users per category, a larger epsilon or delta, "
                       "or dpdg would do better")
        if self.sampling_probability == 1 and p < 1:
            out.append(f"p = 1: the report sets cap the counted share at p' = {p:.3g}, so the release is more private "
                       f"than asked (delta {self.delta_at(self.epsilon):.3g} at eps {self.epsilon:g}) and no more "
                       "accurate; a larger --report-fraction trades traffic for accuracy")
        return out

    def noise_fields(self, scale: float) -> dict[str, float]:
        """The chance of not being counted, 1 - p, multiplied by ``scale`` (for the auditors)."""
        return {"sampling_probability": min(1.0, max(0.0, 1 - (1 - self.sampling_probability) * scale))}

    def theory(self) -> dict[str, float | str]:
        """The estimate's law (Lemma III.1 form; TSS: Lemma III.2 form), derived in docs/derivations.md."""
        p = self.effective_probability
        return {"estimate": "tau_j / p', tau_j the released count of category j",
                "law": f"tau_j ~ Bin(Pi_j, p'), independent over categories, p' = {p:.6g}",
                "per_item_variance": "Pi_j (1 - p') / p' on counts; (1 - p') psi_j / (p' n) on frequencies",
                "variance_at_min_count": self.min_count * (1 - p) / p,
                "total_frequency_variance": (1 - p) / (p * self.n_users), **_crossover(self.epsilon, self.delta)}

    @property
    def _left_by_dropouts(self) -> str:
        """What the data condition, stated of the n + d enrolled users, leaves the n who remain (with the delta a
        stronger, unchecked assumption would give), or nothing without dropouts (docs/privacy.md, "Dropouts in DPDS
        and DPDG")."""
        if not self.dropouts:
            return ""
        planned, d, n = min_count(self.enrolled, self.min_count_fraction), self.dropouts, self.n_users
        text = (f", of the {self.enrolled} enrolled users; {d} of them dropped out and may all have held one category, "
                f"so among the {n} who remain it holds at least {planned} - {d} = {self.min_count}" if planned > d else
                f", of the {self.enrolled} enrolled users; {d} of them dropped out and may have held every one of a "
                f"category's {planned}, so among the {n} who remain a user may be alone in his category")
        dishonest = n - self.honest_users
        stronger = min_count(n, self.min_count_fraction) - dishonest
        if stronger <= self.counted_holders:
            return text
        return (f"{text}: the delta of this release is computed there; were every category still held by ceil(beta "
                f"n) = {min_count(n, self.min_count_fraction)} of the {n}, which the condition does not imply and no "
                f"party can check, it would be {self.holders_delta(self.epsilon, stronger):.3g}")

    def _sampling_description(self, extra_assumptions: tuple[str, ...], rate: str) -> PrivacyDescription:
        parameters = {"sampling_probability": self.sampling_probability, "effective_probability":
                      self.effective_probability, "min_count": self.min_count,
                      "counted_holders": self.counted_holders, "n_users": self.n_users,
                      **({"dropouts": self.dropouts} if self.dropouts else {})}
        condition = (f"ASSUMED of the data, and the release depends on it: every category is held by at least beta n = "
                     f"{min_count(self.enrolled, self.min_count_fraction)} users (beta = {self.min_count_fraction:g}, "
                     f"stated by the user{self._left_by_dropouts}). No party can check it in a deployment (the server "
                     "sees only the sampled counts; a simulation checks it on the data); where it fails, a user whose "
                     "category has fewer holders is protected less, and a user alone in his category is released "
                     "with probability p' (docs/privacy.md, \"The data condition\")")
        honesty = ("all n users follow the protocol" if self.honest_fraction == 1 else
                   f"at least {self.honest_users} of the {self.n_users} users follow the protocol; the others may drop "
                   "out or reveal their own coins (counted as known: the guarantee counts "
                   f"{self.counted_holders} holders), but do not pass other users' shares to a server")
        caveats = ("with probability p' a holder is counted, so a user's own item is released with probability "
                   f"{rate}: the guarantee protects through the other holders' sampling, not through noise",)
        return self._description(parameters, (condition, honesty, *extra_assumptions),
                                 "docs/derivations.md, 'Sampling and secret sharing'", caveats)


def check_class(n_users: int, domain_size: int, least: int, beta: float | None = None) -> None:
    """N categories of at least m = ceil(beta n) holders need N m <= n users (``beta``: as the user gave it)."""
    if domain_size * least > n_users:
        most = n_users // domain_size  # the most holders every one of the N categories can have
        fits = (f"the largest min-count-fraction that fits is {most}/{n_users} = {most / n_users:.6g} ({most} "
                "holders a category)" if most >= 1 else
                f"there are fewer users than categories, so some category has no holder: use at least {domain_size} "
                "users or fewer categories")
        raise ParameterError("min-count-fraction", f"small enough that N ceil(beta n) <= n: with n = {n_users} users "
                             f"and N = {domain_size} categories, every category held by at least ceil(beta n) = {least} "
                             f"users means {domain_size} categories of {least} holders, which need "
                             f"{domain_size * least} users, and there are {n_users}; {fits}",
                             least / n_users if beta is None else beta)


def check_min_count_fraction(beta, domain_size: int) -> float:
    """beta in (0, 1/N]: every one of the N categories held by beta n users needs beta <= 1/N."""
    accepted = (f"given, in (0, 1/N] = (0, {1 / domain_size:.6g}] with N = {domain_size} categories: the smallest "
                "category's share of the users (--min-count-fraction BETA, or min_count_fraction=BETA in Python); the "
                "sampling guarantee holds only when every category is held by at least beta n users, and N categories "
                "cannot each hold more than 1/N of them")
    if beta is None or isinstance(beta, bool) or not isinstance(beta, (int, float)) or not \
            (0 < beta <= 1 / domain_size * (1 + 1e-12)):
        raise ParameterError("min-count-fraction", accepted, beta)
    return float(beta)


@dataclass(frozen=True)
class DPCSParameters(SamplingParameters):
    """DPCS (§2.1): a trusted server samples each record with probability p and counts the sample."""

    protocol: ClassVar[str] = "dpcs"
    mechanism: ClassVar[str] = "DPCS: centralized sampling of the records"
    model: ClassVar[str] = "central"
    trusted: ClassVar[tuple[str, ...]] = ("server",)

    def __post_init__(self) -> None:
        if self.honest_fraction != 1:
            raise ParameterError("honest-fraction", f"1 for {self.protocol} (the trusted server samples)",
                                 self.honest_fraction)
        super().__post_init__()

    @property
    def messages_per_user(self) -> float:
        return 1.0

    def costs(self) -> dict[str, dict[str, float]]:
        return {"user": {"sent": 1}, "server": {"received": self.n_users, "bernoulli_samples": self.n_users,
                                                "sent": self.domain_size}}

    @property
    def layout(self) -> MessageLayout:
        """What the trusted server receives: each user's category, in the clear."""
        return MessageLayout((Column("value", 0, self.domain_size),))

    @property
    def privacy(self) -> PrivacyDescription:
        return self._sampling_description(("the server is trusted with every record and its coins",), "p")


@dataclass(frozen=True)
class DPCSStarParameters(DPCSParameters):
    """DPCS* (§2.2): DPCS whose server releases the counts as n additive shares over F_q."""

    protocol: ClassVar[str] = "dpcs-star"
    mechanism: ClassVar[str] = "DPCS*: centralized sampling, counts released as n additive shares"

    def costs(self) -> dict[str, dict[str, float]]:
        costs = super().costs()
        costs["server"]["sent"] = self.n_users * self.domain_size  # n shares of the N counts
        return costs


@dataclass(frozen=True)
class DPDSParameters(SamplingParameters):
    """DPDS (Algorithm 2): users sample themselves and share one-hot vectors among all n users."""

    protocol: ClassVar[str] = "dpds"
    mechanism: ClassVar[str] = "DPDS: decentralized sampling, one-hot vectors shared among all users"

    @property
    def messages_per_user(self) -> float:
        """Field elements the server receives per user: one partial sum of N elements."""
        return float(self.domain_size)

    @property
    def privacy(self) -> PrivacyDescription:
        return self._sampling_description((
            "honest-but-curious parties; the server does not collude with users; up to n - 1 colluding users "
            "learn nothing of the last user's vector (n-out-of-n additive shares)",), "p")

    def costs(self) -> dict[str, dict[str, float]]:
        return sharing_costs(self, {"bernoulli_samples": 1})


def sharing_costs(parameters: SharingParameters, own: dict[str, float]) -> dict[str, dict[str, float]]:
    """DPDS's and DPDG's costs per party as Algorithm 2 has them (reference §2.3, Table I): a user sends (n - 1) N
    elements to the others and N to the server, receives (n - 1) N, keeps N (his self-share); ``paper_count`` is
    the paper's 2 n N + N = sent + received + 2 kept (it counts the self-share both ways). ``bytes_sent``: those
    elements on the wire, at ceil(bits / 8) bytes each. ``own``: what makes a user's vector. The deployed parties
    agree their shares by key instead of sending them (:func:`privagg.protocols.sharing_parties.expected_traffic`
    counts what they send)."""
    n, N = parameters.n_users, parameters.domain_size
    element = -(-math.ceil(math.log2(parameters.modulus)) // 8)
    return {"user": {"sent": n * N, "received": (n - 1) * N, "kept": N, "paper_count": 2 * n * N + N,
                     "bytes_sent": n * N * element, "uniform_samples": (n - 1) * N,
                     "field_additions": 2 * (n - 1) * N, **own},
            "server": {"received": n * N, "field_additions": (n - 1) * N, "real_multiplications": N}}


# --- TSS --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class TSSParameters(SamplingParameters):
    """TSS (Algorithm 3) and TSS' (phi >= 1): two servers, report sets of alpha N items, elected helpers."""

    protocol: ClassVar[str] = "tss"
    mechanism: ClassVar[str] = "TSS: two-stage sampling, two servers and elected helper users"
    model: ClassVar[str] = "two_servers"

    report_fraction: float
    second_stage: str
    gamma: float
    colluders: int

    def __post_init__(self) -> None:
        check_tss_options(self.report_fraction, self.second_stage, self.gamma, self.colluders, self.n_users,
                          self.domain_size, self.epsilon, self.protocol, self.calibration)
        super().__post_init__()

    @property
    def report_size(self) -> int:
        """alpha N: items in each user's report set."""
        return round(self.report_fraction * self.domain_size)

    @property
    def inclusion_probability(self) -> float:
        return inclusion_probability(self.report_fraction, self.gamma)

    @property
    def effective_probability(self) -> float:
        return self.sampling_probability * self.inclusion_probability

    def derived(self) -> dict[str, Any]:
        return {**super().derived(), "inclusion_probability": self.inclusion_probability}

    def holders_delta(self, epsilon: float, holders: int) -> float:
        """delta(eps) against S2 (the aggregator), every category with at least ``holders`` counted holders (m).

        Uniform stage: the report sets are independent of the data, so S2's
        counts are DPCS's at the effective rate p' = p alpha. Adaptive stage
        (derived, docs/derivations.md): even given every report set, the set
        costs ln(gamma) and the counts are sampled at rate p among the
        holders that put their item in their set, of whom at least k - 1 others
        with probability >= 1 - F(k - 2; m - 1, p_chi); so delta <= min_k
        2 F(k - 2; m - 1, p_chi) + delta_p,k(eps - ln gamma).
        """
        if self.second_stage == "uniform":
            return super().holders_delta(epsilon, holders)
        return adaptive_delta(epsilon - math.log(self.gamma), self.sampling_probability, holders,
                              self.inclusion_probability)

    @property
    def method_detail(self) -> str:
        """What the calibration computes for S2's view: at the effective rate p' = p p_chi (uniform stage), or by
        the adaptive stage's derived bound."""
        if self.second_stage == "adaptive":
            return ("the largest p meeting the target by the derived bound 2 F(k - 2; m - 1, p_chi) + "
                    "delta_p,k(eps - ln gamma), S2 given every report set (docs/derivations.md, \"TSS and TSS'\")"
                    if self.calibration == "exact" else
                    "p' = p p_chi = 1 - e^-eps (p at most 1), its delta by the adaptive stage's derived bound")
        if self.calibration == "exact":
            return METHOD_DETAIL["exact"] + ", at the effective rate p' = p p_chi"
        return METHOD_DETAIL[self.calibration].replace("p = 1 - e^-eps", "p' = p p_chi = 1 - e^-eps (p at most 1)")

    @property
    def messages_per_user(self) -> float:
        """Field elements S2 receives per user: E[sum_j max(m_j, phi + 1)] / n."""
        return self.expected_helpers / self.n_users

    @property
    def expected_helpers(self) -> float:
        """E[sum_j m'_j], m'_j = max(m_j, phi + 1) (TSS': phi >= 1) or m_j (TSS): sum_j m_j = n alpha N exactly,
        plus TSS''s top-ups with m_j ~ Bin(n, alpha) (uniform stage; adaptive stages move the m_j with the data)."""
        return self.report_size * self.n_users + self.domain_size * self._top_up(lambda k: self.colluders + 1 - k)

    @property
    def expected_shares(self) -> float:
        """E[sum_j m_j m'_j], the elements reporters send helpers: N (E m^2 + top-ups), E m^2 = n a (1 - a) + (n a)^2
        (uniform stage)."""
        n, a = self.n_users, self.report_fraction
        return self.domain_size * (n * a * (1 - a) + (n * a) ** 2 + self._top_up(
            lambda k: k * (self.colluders + 1 - k)))

    def _top_up(self, extra) -> float:
        """E[extra(m) ; m <= phi] for m ~ Bin(n, alpha); 0 for TSS."""
        if not self.colluders:
            return 0.0
        from scipy.stats import binom

        k = np.arange(self.colluders + 1)
        return float(np.sum(extra(k) * binom.pmf(k, self.n_users, self.report_fraction)))

    @property
    def privacy(self) -> PrivacyDescription:
        against_s1 = ("S1 sees each user's report set A_i, which is independent of the user's item (uniform stage)"
                      if self.second_stage == "uniform" else
                      f"S1 sees each user's report set A_i: ln(gamma) = {math.log(self.gamma):.4g}-LDP of the item "
                      "(adaptive stage), a local guarantee, not the central one")
        collusion = (f"no more than {self.colluders} users collude (each item has at least {self.colluders + 1} "
                     "helpers)" if self.colluders else
                     "no users collude: an item with m_j = 1 reporter has one helper, who sees that entry")
        return self._sampling_description((
            "the guarantee is against S2, the aggregator; S1 and S2 do not collude and neither colludes with users",
            against_s1, collusion), "p p_chi")

    def costs(self) -> dict[str, dict[str, float]]:
        """Expected per-party costs (reference §4, derived exactly for the uniform stage, m_j ~ Bin(n, alpha))."""
        n, N = self.n_users, self.domain_size
        helpers, shares, reports = self.expected_helpers, self.expected_shares, n * self.report_size
        # items with helpers: all of them for TSS', those someone reported for TSS
        served = N if self.colluders else N * (1 - (1 - self.report_fraction) ** n)
        # a reporter's correction share sums his m'_j - 1 uniform ones; a helper sums the m_j shares he got
        return {"user": {"indices_to_s1": self.report_size, "sent": shares / n, "received": shares / n,
                         "to_s2": helpers / n, "uniform_samples": (shares - reports) / n,
                         "field_additions": (2 * shares - reports - helpers) / n, "bernoulli_samples": 1},
                "s1": {"received": reports, "published": helpers, "samples": helpers},
                "s2": {"received": helpers, "field_additions": helpers - served, "real_multiplications": N}}


@dataclass(frozen=True)
class TSSCollusionParameters(TSSParameters):
    """TSS' (§2.6): at least phi + 1 helpers per item, so that phi colluding users learn nothing."""

    protocol: ClassVar[str] = "tss-collusion"
    mechanism: ClassVar[str] = "TSS': two-stage sampling with phi + 1 helpers per item against phi colluders"


def inclusion_probability(alpha: float, gamma: float) -> float:
    """p_chi = Pr[v in A | v]: alpha (uniform, gamma = 1), gamma alpha / (gamma alpha + 1 - alpha) (adaptive; §3.5)."""
    return gamma * alpha / (gamma * alpha + 1 - alpha)


def check_tss_options(alpha, stage: str, gamma, colluders, n_users: int, domain_size: int, epsilon: float,
                      protocol: str, calibration: str) -> None:
    """alpha in (0, 1] with alpha N whole; the second stage; gamma >= 1 (1 when uniform, < e^eps when adaptive);
    phi in [1, n - 1] for TSS' and 0 for TSS; no closed form for the adaptive stage."""
    if isinstance(alpha, bool) or not isinstance(alpha, (int, float)) or not 0 < alpha <= 1:
        raise ParameterError("report-fraction", f"in (0, 1]: alpha, the fraction of the N = {domain_size} "
                             f"categories each user reports, a multiple of 1/N = {1 / domain_size:.6g}", alpha)
    if not math.isclose(round(alpha * domain_size), alpha * domain_size, rel_tol=1e-9) or round(alpha * domain_size) < 1:
        nearest = max(1, round(alpha * domain_size)) / domain_size
        raise ParameterError("report-fraction", f"a multiple of 1/N = {1 / domain_size:.6g} with N = {domain_size} "
                             f"categories (each user reports alpha N whole categories; the nearest is {nearest:.6g}: "
                             f"{round(nearest * domain_size)} of the {domain_size})", alpha)
    if stage not in SECOND_STAGES:
        raise ParameterError("second-stage", f"one of {', '.join(SECOND_STAGES)}", stage)
    if isinstance(gamma, bool) or not isinstance(gamma, (int, float)) or not (gamma >= 1 and math.isfinite(gamma)) \
            or (stage == "uniform" and gamma != 1):
        raise ParameterError("gamma", ">= 1 (and 1 with --second-stage uniform)", gamma)
    if stage == "adaptive" and math.log(gamma) >= epsilon:
        raise ParameterError("gamma", f"below e^eps = {math.exp(epsilon):.6g}: against S2 the adaptive stage spends "
                             "ln(gamma) of eps", gamma)
    if stage == "adaptive" and calibration == "closed_form":
        raise ParameterError("calibration", "exact or paper with --second-stage adaptive (the closed form covers the "
                             "uniform stage)", calibration)
    if protocol == "tss-collusion":
        check_integer("colluders", colluders, 1, n_users - 1)
    elif colluders != 0:
        raise ParameterError("colluders", "0 for tss (use tss-collusion)", colluders)


def adaptive_delta(epsilon: float, p: float, holders: int, inclusion: float) -> float:
    """delta(eps) of the counts given every report set, the holders who report their item Bin(holders - 1, p_chi)
    besides the changed user (TSSParameters.delta_at): min over k of 2 F(k - 2) + delta_p(eps) at k holders."""
    from scipy.stats import binom

    if epsilon <= 0:
        return 1.0
    mean, sd = (holders - 1) * inclusion, math.sqrt(max((holders - 1) * inclusion * (1 - inclusion), 1e-12))
    candidates = {max(1, math.floor(mean - z * sd)) for z in (0.5, 1, 2, 3, 4, 5, 6, 8, 10, 13, 16, 20)}
    return min(1.0, min(2 * float(binom.cdf(k - 2, holders - 1, inclusion)) +
                        accountant.sampling_delta(epsilon, p, k) for k in candidates))


# --- DPDG --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class DPDGParameters(SharingParameters):
    """DPDG (§2.4): each user adds discrete Gaussian noise N_Z(0, s2) at the fixed-point scale 2^k, then shares."""

    protocol: ClassVar[str] = "dpdg"
    mechanism: ClassVar[str] = "DPDG: distributed discrete Gaussian noise, one-hot vectors shared among all users"
    calibrations: ClassVar[tuple[str, ...]] = NOISE_CALIBRATIONS

    fractional_bits: int
    noise_variance: int  # s2 per user, on the integer scale 2^k

    def __post_init__(self) -> None:
        from ..privacy.discrete_gaussian import SIGMA_SQUARED_MAX

        check_integer("fractional-bits", self.fractional_bits, 0, 30)
        check_integer("noise variance", self.noise_variance, 1, SIGMA_SQUARED_MAX)
        super().__post_init__()

    @property
    def scale(self) -> int:
        return 2**self.fractional_bits

    def noise_fields(self, scale: float) -> dict[str, float]:
        """The per-user variance multiplied by ``scale``^2 (the noise's sd by ``scale``), for the auditors."""
        return {"noise_variance": max(1, round(self.noise_variance * scale**2))}

    @property
    def noise_bound(self) -> int:
        """|sum of the users' noise| stays below this (50 sd: a sub-Gaussian tail below 2 e^-1250)."""
        return math.ceil(50 * math.sqrt(self.n_users * self.noise_variance)) + 1

    @staticmethod
    def signed_sums(n_users: int, scale: int, noise_variance: int) -> int:
        """Signed sums in [-B, B] with B = n 2^k + the noise bound: the field needs p > 2 B."""
        return 2 * (n_users * scale + math.ceil(50 * math.sqrt(n_users * noise_variance)) + 1)

    @property
    def largest_aggregate(self) -> int:
        return self.signed_sums(self.n_users, self.scale, self.noise_variance)

    def derived(self) -> dict[str, Any]:
        return {"count_noise_sd": self.count_noise_sd}

    @property
    def count_noise_sd(self) -> float:
        """The standard deviation of the honest users' summed noise on the count scale."""
        return math.sqrt(self.honest_users * self.noise_variance) / self.scale

    def delta_at(self, epsilon: float) -> float:
        """delta(eps) of the sum of the honest users' noise, exactly (privacy/discrete_gaussian.py)."""
        from ..privacy.discrete_gaussian import delta_at

        return delta_at(epsilon, self.noise_variance, self.honest_users, self.scale)

    @property
    def messages_per_user(self) -> float:
        return float(self.domain_size)

    def estimate(self, sums: np.ndarray) -> np.ndarray:
        return self.field.signed(sums) / self.scale

    def standard_error(self, estimate=0.0):
        """The noise's sd on the count scale, whatever the count (every user adds noise; n s2 bounds the sum's
        variance, the discrete Gaussian's variance being at most s2)."""
        return np.broadcast_to(math.sqrt(self.n_users * self.noise_variance) / self.scale, np.shape(estimate))

    def max_error_bound(self, beta: float = MAX_ERROR_BETA) -> float:
        """Sub-Gaussian tail + union bound: sd sqrt(2 ln(2N/beta))."""
        if not 0 < beta < 1:
            raise ParameterError("beta", "in (0, 1): the probability that some category's error exceeds the "
                                 "bound (not the min-count-fraction)", beta)
        return float(self.standard_error()) * math.sqrt(2 * math.log(2 * self.domain_size / beta))

    @property
    def privacy(self) -> PrivacyDescription:
        honesty = ("all n users add their noise" if self.honest_fraction == 1 else
                   f"at least {self.honest_users} of the {self.n_users} users add their noise (the guarantee counts "
                   "only theirs)")
        caveats = () if self.calibration == "tight" else (
            "classic sigma: the paper's calibration (its proof covers eps < 1); the delta above is checked exactly "
            "for the discrete sum",)
        return self._description(
            {"noise_variance": self.noise_variance, "fractional_bits": self.fractional_bits,
             "honest_users": self.honest_users, "count_noise_sd": self.count_noise_sd},
            (honesty, "no condition on the data", "honest-but-curious parties; the server does not collude with "
             "users; up to n - 1 colluding users learn nothing of the last user's vector"),
            "docs/derivations.md, 'DPDG: distributed discrete Gaussian'", caveats)

    def costs(self) -> dict[str, dict[str, float]]:
        return sharing_costs(self, {"noise_samples": self.domain_size})

    def theory(self) -> dict[str, float | str]:
        """Unbiased counts with the summed noise's variance; the classic Gaussian's V_G and the paper's n* beside."""
        sd = float(self.standard_error())
        return {"estimate": "the signed sum / 2^k", "law": "counts + the sum of n discrete Gaussians N_Z(0, s2) / 2^k",
                "per_item_variance": sd**2,
                # divided twice: eps^2 overflows at eps 1e300 (and underflows below 1e-162)
                "classic_gaussian_per_item_variance": 4 * math.log(1.25 / self.delta) / self.epsilon / self.epsilon,
                **_crossover(self.epsilon, self.delta)}


# --- calibration ------------------------------------------------------------------------------------


def _field_for(largest: int) -> int:
    return PrimeField.for_aggregate(largest).modulus


def _sampling_probability(epsilon: float, delta: float, holders: int, calibration: str, rate: float = 1.0,
                          given: float | None = None, exact_delta=None) -> float:
    """p for the target: ``given`` (its delta checked), or calibrated; p' = p ``rate`` (rate = p_chi for TSS).

    ``exact_delta(p)``: the exact delta at eps (default: the sampled counts at rate p'); ``exact`` bisects it,
    ``paper`` takes p' = 1 - e^-eps and checks it, ``closed_form`` checks the Chernoff form and the exact delta
    (the Chernoff form is derived for add/remove neighbours; the claim is for replace-one).
    """
    # the sampled counts' delta, where a cheap bound may decide (accountant.meets_delta: the same answers)
    exceeds = (lambda p: exact_delta(p) > delta) if exact_delta else (
        lambda p: not accountant.meets_delta(epsilon, p * rate, holders, delta))
    exact_delta = exact_delta or (lambda p: accountant.sampling_delta(epsilon, p * rate, holders))
    if calibration == "exact" and given is None:
        from ..core.bisection import bisect

        if exact_delta(1.0) <= delta:
            return 1.0
        p = bisect(exceeds, 0.0, 1.0, 60)[0]
        if p == 0:  # no p the bisection resolves (2^-60) meets delta: say what the least of them buys
            raise ParameterError("delta", f"at least {exact_delta(2.0**-60):.3g} at eps = {epsilon:g} with {holders} "
                                 "holders per category (what sampling with probability 2^-60 buys: no larger p "
                                 f"meets delta = {delta:g}); or a larger --min-count-fraction if the data allows",
                                 delta)
        return p
    # p' = 1 - e^-eps; above p_chi (TSS) no p reaches it, and p = 1 gives the smaller eps' = ln(1/(1 - p_chi))
    p = min(1.0, accountant.paper_sampling_probability(epsilon) / rate) if given is None else given
    if calibration == "closed_form":
        if given is None and p * rate >= 1:  # 1 - e^-eps rounds to 1 above eps ~ 36.7: everyone counted
            raise ParameterError("epsilon", "at most about 36 for the closed form (above it p' = 1 - e^-eps rounds to "
                                 "1: every record is counted and the sampling hides nobody); or use --calibration "
                                 "exact", epsilon)
        if p * rate >= 1 or math.log1p(-p * rate) < -epsilon * (1 + 1e-12):
            raise ParameterError("sampling-probability", f"at most (1 - e^-eps) / p_chi = "
                                 f"{-math.expm1(-epsilon) / rate:.6g} for the closed form", p)
        achieved = max(accountant.chernoff_delta(p * rate, holders), exact_delta(p))
    else:
        achieved = exact_delta(p)
    if achieved > delta:
        largest = _sampling_probability(epsilon, delta, holders, "exact", rate, exact_delta=exact_delta)
        raise ParameterError("delta" if given is None else "sampling-probability",
                             f"met by the sampling (p = {p:.6g} buys delta = {achieved:.3g} at eps = {epsilon:g} with "
                             f"{holders} holders per category; the largest p meeting delta = {delta:g} by the exact "
                             f"computation is {largest:.6g}: use --calibration exact, a larger --min-count-fraction "
                             "if the data allows, or a larger delta)", p if given is not None else delta)
    return p


def _common(epsilon, delta, n_users, domain_size, cls) -> tuple[float, float, int, int]:
    return (check_epsilon(epsilon), check_delta(delta), check_integer("n_users", n_users, 2, N_USERS_MAX),
            check_integer("domain", domain_size, 2, cls.domain_max))


def calibrate_sampling(cls, epsilon: float, delta: float, n_users: int, domain_size: int,
                       calibration: str = "exact", min_count_fraction: float | None = None,
                       sampling_probability: float | None = None, honest_fraction: float = 1.0, **fields):
    """``cls`` (DPCS, DPCS*, DPDS, TSS) with p for (eps, delta)-DP of the released counts (module docstring)."""
    epsilon, delta, n, domain = _common(epsilon, delta, n_users, domain_size, cls)
    beta = check_min_count_fraction(min_count_fraction, domain)
    check_class(n, domain, min_count(n, beta), beta)
    if calibration not in SAMPLING_CALIBRATIONS:
        raise ParameterError("calibration", f"one of {', '.join(SAMPLING_CALIBRATIONS)}", calibration)
    if sampling_probability is not None and not 0 < sampling_probability <= 1:
        raise ParameterError("sampling-probability", "in (0, 1] (the probability that a user's record is "
                             "counted; leave it out to have it calibrated)", sampling_probability)
    honest = honest_users(n, check_honest_fraction(honest_fraction, n))
    holders = min_count(n, beta) - (n - honest)  # SamplingParameters.counted_holders
    if holders < 1:
        raise ParameterError("honest-fraction", f"above 1 - beta = {1 - beta:.3g} (beta = {beta:g}, the "
                             f"min-count-fraction): of the n = {n} users, the {n - honest} who may not follow the "
                             f"protocol could be all {min_count(n, beta)} holders of a category (at most "
                             f"{min_count(n, beta) - 1} may not follow it)", honest_fraction)
    # every calibration ends in the exact accountant (a bisection when p misses): its largest window, before any
    accountant.check_sampling_cost(holders, got=n)
    build = dict(epsilon=epsilon, delta=delta, n_users=n, domain_size=domain, calibration=calibration,
                 modulus=_field_for(n), min_count_fraction=beta, honest_fraction=float(honest_fraction), **fields)
    if issubclass(cls, TSSParameters):
        check_tss_options(fields["report_fraction"], fields["second_stage"], fields["gamma"], fields["colluders"], n,
                          domain, epsilon, cls.protocol, calibration)
        rate, gamma, exact = inclusion_probability(fields["report_fraction"], fields["gamma"]), fields["gamma"], None
        if fields["second_stage"] == "adaptive":
            exact = lambda p: adaptive_delta(epsilon - math.log(gamma), p, holders, rate)  # noqa: E731
        p = _sampling_probability(epsilon, delta, holders, calibration, rate, sampling_probability, exact)
    else:
        p = _sampling_probability(epsilon, delta, holders, calibration, given=sampling_probability)
    return cls(sampling_probability=p, **build)


def calibrate_dpcs(epsilon, delta, n_users, domain_size, calibration="exact", min_count_fraction=None,
                   sampling_probability=None) -> DPCSParameters:
    """DPCS: p for (eps, delta)-DP of the trusted server's sampled counts."""
    return calibrate_sampling(DPCSParameters, epsilon, delta, n_users, domain_size, calibration,
                              min_count_fraction, sampling_probability)


def calibrate_dpcs_star(epsilon, delta, n_users, domain_size, calibration="exact", min_count_fraction=None,
                        sampling_probability=None) -> DPCSStarParameters:
    """DPCS*: as DPCS (the shares add nothing but n, which is public)."""
    return calibrate_sampling(DPCSStarParameters, epsilon, delta, n_users, domain_size, calibration,
                              min_count_fraction, sampling_probability)


def calibrate_dpds(epsilon, delta, n_users, domain_size, calibration="exact", min_count_fraction=None,
                   sampling_probability=None, honest_fraction=1.0) -> DPDSParameters:
    """DPDS: p for (eps, delta)-DP of the reconstructed counts; dishonest users' coins count as known."""
    return calibrate_sampling(DPDSParameters, epsilon, delta, n_users, domain_size, calibration,
                              min_count_fraction, sampling_probability, honest_fraction)


def calibrate_tss(epsilon, delta, n_users, domain_size, calibration="exact", min_count_fraction=None,
                  sampling_probability=None, report_fraction=None, second_stage="uniform", gamma=None,
                  honest_fraction=1.0, colluders=0, protocol=TSSParameters) -> TSSParameters:
    """TSS: p so that S2's counts, sampled at p p_chi, are (eps, delta)-DP (the adaptive stage spends ln gamma)."""
    _common(epsilon, delta, n_users, domain_size, protocol)  # the common fields first, as for every protocol
    if report_fraction is None:
        raise ParameterError("report-fraction", "given: alpha in (0, 1], the fraction of the N categories each "
                             "user reports", None)
    gamma = (1.0 if second_stage == "uniform" else 2.0) if gamma is None else float(gamma)
    if isinstance(report_fraction, (int, float)) and not isinstance(report_fraction, bool) and \
            abs(report_fraction * domain_size - round(report_fraction * domain_size)) <= 1e-6 * domain_size:
        report_fraction = round(report_fraction * domain_size) / domain_size  # 0.666667 of 3 is 2/3, as printed
    return calibrate_sampling(protocol, epsilon, delta, n_users, domain_size, calibration, min_count_fraction,
                              sampling_probability, honest_fraction, report_fraction=float(report_fraction),
                              second_stage=second_stage, gamma=gamma, colluders=colluders)


def calibrate_tss_collusion(epsilon, delta, n_users, domain_size, calibration="exact", min_count_fraction=None,
                            sampling_probability=None, report_fraction=None, second_stage="uniform", gamma=None,
                            honest_fraction=1.0, colluders=None) -> TSSCollusionParameters:
    """TSS': as TSS, with at least phi + 1 helpers per item."""
    _common(epsilon, delta, n_users, domain_size, TSSCollusionParameters)
    if colluders is None:
        raise ParameterError("colluders", "given: phi >= 1, the largest group of colluding users", None)
    return calibrate_tss(epsilon, delta, n_users, domain_size, calibration, min_count_fraction, sampling_probability,
                         report_fraction, second_stage, gamma, honest_fraction, colluders, TSSCollusionParameters)


def calibrate_dpdg(epsilon, delta, n_users, domain_size, calibration="tight", fractional_bits=8,
                   honest_fraction=1.0) -> DPDGParameters:
    """DPDG: the per-user discrete Gaussian variance (integer, scale 2^k) for (eps, delta)-DP of the sum.

    ``tight``: the least variance the exact accountant certifies for the
    honest users' summed noise; ``classic``: the paper's sigma_G (checked
    exactly, an error if the discrete sum does not meet the target).
    """
    from ..privacy import discrete_gaussian as dg

    epsilon, delta, n, domain = _common(epsilon, delta, n_users, domain_size, DPDGParameters)
    k = check_integer("fractional-bits", fractional_bits, 0, 30)
    honest = honest_users(n, check_honest_fraction(honest_fraction, n))
    if calibration == "tight":
        variance = dg.calibrate(epsilon, delta, honest, 2**k)
    elif calibration == "classic":
        variance = dg.classic_variance(epsilon, delta, honest, 2**k)
    else:
        raise ParameterError("calibration", f"one of {', '.join(NOISE_CALIBRATIONS)}", calibration)
    largest = DPDGParameters.signed_sums(n, 2**k, variance)
    if largest >= MODULUS_MAX - 2:  # PrimeField.for_aggregate's limit
        most = (MODULUS_MAX // 2 - 1) // (2**k + math.ceil(50 * math.sqrt(variance)))  # n 2^k + 50 sqrt(n v) <= n (...)
        raise ParameterError("users", f"at most about {most:.3g} for dpdg at --fractional-bits {k} (the signed sums, n "
                             "2^k plus the noise, must fit a prime field below 2^62); or fewer --fractional-bits",
                             n_users)
    parameters = DPDGParameters(epsilon=epsilon, delta=delta, n_users=n, domain_size=domain, calibration=calibration,
                                modulus=_field_for(largest), fractional_bits=k, noise_variance=variance,
                                honest_fraction=float(honest_fraction))
    if calibration == "classic":
        achieved = parameters.delta_at(epsilon)
        if achieved > delta * (1 + 1e-9):  # sigma_G's proof covers eps < 1 only
            raise ParameterError("calibration", f"tight here: the classic sigma_G buys delta = {achieved:.3g} at eps = "
                                 f"{epsilon:g}, not {delta:g} (its proof covers eps < 1)", calibration)
    return parameters


def crossover_users(epsilon: float, delta: float) -> float:
    """The paper's n* = 4 (e^eps - 1) ln(1.25/delta) / eps^2: DPDG's per-item variance V_G beats DPDS's total V
    = 1/(n (e^eps - 1)) above it (reference §3.3)."""
    epsilon = check_epsilon(epsilon)  # divided twice, not by eps^2, which underflows to 0 below about 1e-162
    log_n = math.log(4 * math.log(1.25 / check_delta(delta))) + epsilon + math.log(-math.expm1(-epsilon) / epsilon
                                                                                 ) - math.log(epsilon)
    return math.exp(log_n) if log_n < 709 else math.inf  # beyond a float's range above epsilon ~ 700


def _crossover(epsilon: float, delta: float) -> dict[str, float]:
    """The theory's ``crossover_users_paper`` (:func:`crossover_users`), left out where it passes a float's range
    (a report holds no infinity: it is not JSON)."""
    n_star = crossover_users(epsilon, delta)
    return {"crossover_users_paper": n_star} if math.isfinite(n_star) else {}


# --- exact laws (the exact auditor, tiny instances) --------------------------------------------------------


def law_size(parameters: SharingParameters, item: int) -> exact_laws.LawSize:
    """:func:`message_law`'s size before it is built. DPDG: (2T + 1)^N outcomes (T = 12 sd + 2 per coordinate;
    the sd grows with 2^k and as eps and delta shrink), each N counts up to 2T + 2^k. TSS's adaptive stage: the
    changed user's 2 C(N, s) outcomes (his report set of s = alpha N categories, sampled or not) over
    2N + C(N, s) types. The sampling protocols: 2 outcomes over N types."""
    p, N = parameters, parameters.domain_size
    if isinstance(p, DPDGParameters):
        cut = math.ceil(12 * math.sqrt(p.noise_variance)) + 2
        support = 2 * cut + 1

        def fits(budget: float) -> int | None:
            return exact_laws.largest_fitting(
                lambda b: exact_laws.power(support, b) * (b + exact_laws.UNITS_PER_STATE), budget, 2, N)

        states, detail = exact_laws.power(support, N), f"each coordinate's noise is truncated to {support} values"
        if fits(exact_laws.EXACT_LAW_MAX_WORK) is None:
            return exact_laws.LawSize(p.protocol, states, N, 2 * cut + p.scale, "fractional-bits", p.fractional_bits,
                                      others="a larger --epsilon or --delta", detail=detail)
        return exact_laws.LawSize(p.protocol, states, N, 2 * cut + p.scale, "domain", N,
                                  others="fewer --fractional-bits, or a larger --epsilon or --delta", detail=detail,
                                  limit=fits)
    if isinstance(p, TSSParameters) and p.second_stage == "adaptive":
        subsets = exact_laws.comb(N, p.report_size)
        types = 2 * N + subsets
        return exact_laws.LawSize(p.protocol, 2 * subsets if item >= N else 3.0,
                                  int(types) if math.isfinite(types) else 2**62, 1, "domain", N,
                                  others="a --report-fraction further from 1/2")
    return exact_laws.LawSize(p.protocol, 2.0, N, 1, "domain", N)


def message_law(parameters: SharingParameters, item: int) -> dict[tuple[int, ...], float]:
    """One user's part of what the aggregator reconstructs, as an exact law over count vectors.

    Sampling (DPCS, DPCS*, DPDS, TSS's uniform stage): e_item with probability p', else zeros -- the shares
    reconstruct exactly, so the server's view is the sampled counts (reference §2.2). DPDG: e_item 2^k plus
    N discrete Gaussians, each shifted by its truncation point T (the sum is shifted by n T alike in both
    datasets); T = 12 sd + 2 leaves out less than e^-70 of each coordinate's mass.
    """
    N = parameters.domain_size
    exact_laws.check_law(law_size(parameters, item))
    if isinstance(parameters, DPDGParameters):
        from ..privacy.discrete_gaussian import pmf

        cut = math.ceil(12 * math.sqrt(parameters.noise_variance)) + 2
        support = np.arange(-cut, cut + 1)
        one = pmf(parameters.noise_variance, support)
        law: dict[tuple[int, ...], float] = {}
        for values in np.ndindex(*(support.size,) * N):
            shifted = [int(v) + (parameters.scale if j == item else 0) for j, v in enumerate(values)]
            law[tuple(shifted)] = float(np.prod(one[list(values)]))
        return law
    if isinstance(parameters, TSSParameters) and parameters.second_stage == "adaptive":
        return _adaptive_law(parameters, item)
    counted = tuple(int(j == item) for j in range(N))
    return {counted: parameters.effective_probability, (0,) * N: 1 - parameters.effective_probability}


def _adaptive_law(parameters: TSSParameters, item: int) -> dict[tuple[int, ...], float]:
    """S2's view of one user in TSS's adaptive stage, given every report set (as the derivation gives it): types
    0..N-1 count the other users of each category whose set holds their item, N..2N-1 are the released counts,
    and 2N.. the changed user's own set, whole (item N + a: the changed user, holding a). An other user's set
    tells nothing beyond whether it holds his item (the rest is uniform); the changed user's does."""
    N, p, include = parameters.domain_size, parameters.sampling_probability, parameters.inclusion_probability
    subsets = list(itertools.combinations(range(N), parameters.report_size))
    size = 2 * N + len(subsets)
    law: dict[tuple[int, ...], float] = {}

    def add(ones: tuple[int, ...], probability: float) -> None:
        key = tuple(int(t in ones) for t in range(size))
        law[key] = law.get(key, 0.0) + probability

    if item < N:  # another user, holding item
        add((item, N + item), include * p)
        add((item,), include * (1 - p))
        add((), 1 - include)
        return law
    held = item - N
    with_item = math.comb(N - 1, parameters.report_size - 1)
    without = math.comb(N - 1, parameters.report_size)
    for s, subset in enumerate(subsets):
        if held in subset:
            add((2 * N + s, N + held), include / with_item * p)
            add((2 * N + s,), include / with_item * (1 - p))
        else:
            add((2 * N + s,), (1 - include) / without)
    return law


def audit_pairs(parameters: SamplingParameters, users: int):
    """Every neighbouring pair (one user moved from category a to b) whose first dataset holds every category at
    least ceil(beta n) times -- the datasets a run accepts -- as lists of items; the second may fall short. In
    TSS's adaptive stage the moved user is the item N + a (his report set is part of S2's view:
    :func:`_adaptive_law`)."""
    m, N = parameters.min_count, parameters.domain_size
    adaptive = isinstance(parameters, TSSParameters) and parameters.second_stage == "adaptive"
    for counts in _compositions(users, N, m):
        for a in range(N):
            for b in range(N):
                if a != b:
                    moved = list(counts)
                    moved[a] -= 1
                    moved[b] += 1
                    if adaptive:
                        others = np.repeat(np.arange(N), moved)
                        others = np.delete(others, np.flatnonzero(others == b)[0]).tolist()
                        yield [N + a, *others], [N + b, *others]
                    else:
                        yield (np.repeat(np.arange(N), counts).tolist(), np.repeat(np.arange(N), moved).tolist())


def _composition_count(total: int, parts: int, least: int) -> float:
    """How many count vectors :func:`_compositions` yields: C(total - least parts + parts - 1, parts - 1)."""
    free = total - least * parts
    return exact_laws.comb(free + parts - 1, parts - 1) if free >= 0 else 0.0


def audit_cost(parameters: SharingParameters, users: int, budget: float = math.inf) -> tuple[float, float, float]:
    """What the exact auditor (privagg.audit) would do for these parameters and ``users`` users, before it does any
    of it: (neighbouring pairs of datasets, joint states its convolutions form, states its caches hold).

    It mirrors audit.OutputLaws on count vectors: each dataset is its first user's law convolved with the law of
    the others' sorted items, built one user at a time with every prefix cached. A prefix holding q_j users of
    category j has at most prod_j (q_j + 1) outcomes for the sampling protocols (each user counted or not), its
    pairs (q_j + 1)(q_j + 2) / 2 in TSS's adaptive stage, and prod_t (2 T |q| + 2^k q_t + 1) for DPDG (capped by
    the product of the users' law sizes). The pairs are :func:`audit_pairs`' (DPDG: every neighbouring pair,
    parameters.neighbouring_pairs). Counting stops once the work passes ``budget``."""
    from .parameters import neighbouring_pair_count

    p, N = parameters, parameters.domain_size
    dpdg = isinstance(p, DPDGParameters)
    adaptive = isinstance(p, TSSParameters) and p.second_stage == "adaptive"
    if dpdg:
        cut = math.ceil(12 * math.sqrt(p.noise_variance)) + 2
        user_states = exact_laws.power(2 * cut + 1, N)
        pairs = float(neighbouring_pair_count(N, users)) if N <= 64 and users <= 10**6 else \
            exact_laws.comb(N + users - 2, users - 1) * N * (N - 1) / 2
        least = 0
    else:
        least = p.min_count
        pairs = _composition_count(users, N, least) * N * (N - 1)
        user_states = 3.0 if adaptive else 2.0
    if pairs > 10**6:  # the auditor refuses past its pairs anyway: the work is at least one user's law a pair
        return pairs, math.inf, math.inf

    def sizes(leading: tuple[int, ...], j: int, ks: np.ndarray) -> np.ndarray:
        """The outcomes of the prefix holding ``leading`` (categories before j) and ks users of category j."""
        counts = np.array(leading + (0,) * (N - len(leading)), dtype=np.float64)
        if dpdg:
            total = sum(leading) + ks
            grid = np.prod([2 * cut * total + p.scale * (counts[t] + (ks if t == j else 0)) + 1 for t in range(N)],
                           axis=0)
            return np.minimum(grid, np.exp(np.minimum(total * math.log(user_states), 709.0)))
        if adaptive:
            return np.prod((counts + 1) * (counts + 2) / 2) * (ks + 1) * (ks + 2) / 2
        return np.prod(counts + 1) * (ks + 1)

    work = cached = 0.0
    built: dict[tuple[tuple[int, ...], int], int] = {}
    datasets: set[tuple[int, tuple[int, ...]]] = set()

    def add(first_states: float, others: tuple[int, ...], key) -> None:
        nonlocal work, cached
        if key in datasets:
            return
        datasets.add(key)
        for j in range(N):
            if others[j]:
                leading = others[:j]
                while leading and not leading[-1]:
                    leading = leading[:-1]
                done = built.get((leading, j), 0)
                if others[j] > done:
                    ks = np.arange(done, others[j], dtype=np.float64)
                    step = sizes(leading, j, ks)
                    work += float(step.sum()) * user_states
                    cached += float(sizes(leading, j, ks + 1).sum())
                    built[(leading, j)] = others[j]
        whole = float(sizes(others[:N - 1], N - 1, np.array([float(others[N - 1])]))[0])
        work += whole * first_states
        cached += float(sizes(others[:N - 1], N - 1, np.array([others[N - 1] + 1.0]))[0]) if dpdg else \
            whole * first_states

    first_states = 2 * exact_laws.comb(N, p.report_size) if adaptive else user_states
    for counts in _compositions(users - 1 if dpdg else users, N, least):
        if work > budget:
            break
        if dpdg:  # user 0 holds any x, the others ``counts``
            for x in range(N):
                add(user_states, counts, (x, counts))
        elif adaptive:  # the moved user (his law is his report set's) held a or holds b; the others: counts - e_a
            for a in range(N):
                others = counts[:a] + (counts[a] - 1,) + counts[a + 1:]
                for first in range(N):
                    add(first_states, others, (first, others))
        else:
            for dataset in [counts] + [tuple(c - (j == a) + (j == b) for j, c in enumerate(counts))
                                       for a in range(N) for b in range(N) if a != b]:
                first = next(j for j, c in enumerate(dataset) if c)
                add(user_states, dataset[:first] + (dataset[first] - 1,) + dataset[first + 1:], dataset)
    return pairs, work, cached


def _compositions(total: int, parts: int, least: int):
    """Count vectors of ``parts`` entries, each at least ``least``, summing to ``total``."""
    if parts == 1:
        if total >= least:
            yield (total,)
        return
    for first in range(least, total - least * (parts - 1) + 1):
        for rest in _compositions(total - first, parts - 1, least):
            yield (first, *rest)


# --- roles ----------------------------------------------------------------------------------------------


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

    A record's coin is :func:`bernoulli`; the coins are drawn once per
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


# --- weighted aggregation (derived design; docs/derivations.md) --------------------------------------------


@dataclass(frozen=True)
class WeightedEstimate:
    """Per-group DPDS counts combined: inverse-variance weighting and the unweighted baseline."""

    estimates: np.ndarray  # weighted, as counts over all n users
    unweighted: np.ndarray  # sum_g tau_g / p_g
    variance: np.ndarray  # per category, of the weighted estimate (at the estimate + a holder's weight)
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
    unweighted_variance = (size * (1 - p) / p)[:, None].sum(axis=0) * psi
    unweighted_stderr = np.sqrt(sum(g.reported_standard_error(t / q) ** 2 for g, t, q in zip(groups, taus, p)))
    # weighted - unweighted = sum_g a_g tau_g, a_g = n w_g / (p_g n_g) - 1 / p_g: mean 0 when every group holds a
    # category at one frequency psi, variance sum_g a_g^2 n_g psi p_g (1 - p_g) (psi at the larger estimate plus a
    # holder's weight, as above: the sd errs up, never certain)
    a = n * weights / (p * size) - 1 / p
    shared = np.clip((np.maximum(weighted, unweighted) + step) / n, 0, 1)
    spread = np.sqrt((a**2 * size * p * (1 - p))[:, None].sum(axis=0) * shared)
    disagreement = np.divide(weighted - unweighted, spread, out=np.zeros_like(weighted), where=spread > 0)
    return WeightedEstimate(weighted, unweighted, variance, unweighted_variance, weights, list(groups),
                            unweighted_stderr, disagreement)
