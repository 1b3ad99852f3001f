"""Sampling + secret sharing (Yang, Tjuawinata, Lam, Zhu, Zhao, arXiv:2104.05974): DPCS, DPCS*, DPDS, DPDG, TSS, TSS'.

Users hold one item of [N] each (categorical data, one-hot encoded). Privacy
comes from sampling: each user's item is counted with probability p, and
nobody but the user knows whether it was. The released counts are the
sampled users' counts; estimates are counts ``tau_j / p`` (the paper's
frequencies times n). Reference: ../shared/papers/fair-dp-distributed-frequency.md;
what was derived here is in docs/derivations.md, "Sampling and secret sharing".

* ``dpcs`` -- §2.1: a trusted server samples the records and counts them
  (:class:`~privagg.protocols.sampling_servers.SamplingCurator`).
* ``dpcs-star`` -- §2.2: the same, but the server releases the counts as n
  additive shares over F_q; a receiver reconstructs them (same output).
* ``dpds`` -- Algorithm 2: each user samples his own participation, shares his
  one-hot (or zero) vector among all n users, each user forwards the sum of
  the shares he received, the server reconstructs (:class:`~privagg.protocols.sampling_servers.SumServer`). The
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
  to S2 (:class:`~privagg.protocols.sampling_servers.SumServer`), which estimates with the effective rate p p_chi.
  The parties are in :mod:`privagg.protocols.two_server_parties`.

Here: the parameters shared by the family, DPCS's, DPCS*'s and DPDS's, and their
theory. TSS and TSS' are in :mod:`privagg.protocols.tss_parameters`, DPDG's in
:mod:`privagg.protocols.dpdg_parameters`; every calibration in
:mod:`privagg.protocols.sampling_calibration`; the trusted servers of DPCS and
DPCS*, the server's field sums (:class:`~privagg.protocols.sampling_servers.SumServer`)
and the fast path in :mod:`privagg.protocols.sampling_servers`; the exact laws in
:mod:`privagg.protocols.sampling_laws`; weighted aggregation in
:mod:`privagg.protocols.weighted_aggregation`. Privacy of the sampled counts is
computed exactly (:mod:`privagg.privacy.sampling`), under the data condition
the user states: every item held by at least beta n users
(``min_count_fraction``), checked against the data before any run.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from ..core.coins import at_most, coins
from ..core.encoding import check_item_key
from ..core.messages import Column, MessageLayout
from ..core.sharing import PrimeField
from ..errors import ParameterError, check_delta, check_epsilon, check_integer
from ..privacy import sampling as accountant
from ..privacy.description import REPLACE_ONE, Mechanism, PrivacyDescription
from .balls_into_bins import N_USERS_MAX, check_honest_fraction
from .parameters import FrozenParameters, check_item_codes
from .results import MAX_ERROR_BETA

CATEGORIES_MAX = 2**20  # N: every user's vector has N field elements
BLOCK_SHARES = 1 << 22  # DPCS*'s server shares this many elements (n x a block of categories) at a time
SAMPLING_CALIBRATIONS = ("exact", "paper", "closed_form")
NOISE_CALIBRATIONS = ("tight", "classic")
SECOND_STAGES = ("uniform", "adaptive")

METHOD_DETAIL = {
    "exact": "the largest p whose exact delta(eps) of the sampled counts meets the target, or the p given "
             "(--sampling-probability) checked to meet it (hockey-stick divergence over the changed pair of items, "
             "every other count at its minimum; the delta it holds: the profile's delta at eps)",
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
    # DPDS and DPDG's neighbour graph (issue 47; docs/privacy.md, "Neighbour graphs"): None, the complete graph (each
    # user masks with, and backs his keys up among, all n - 1 others: the paper's n-of-n sharing); an even degree k,
    # a random Harary graph of degree k, its threshold planned for graph_dropouts n honest users dropping out
    degree: int | None = dataclasses.field(default=None, kw_only=True)
    graph_dropouts: float = dataclasses.field(default=0.0, kw_only=True)

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
        self._check_graph()
        PrimeField(self.modulus)  # a prime below 2^62
        if self.modulus <= self.largest_aggregate:
            raise ParameterError("modulus", f"a prime above the largest aggregate {self.largest_aggregate} (a smaller "
                                 "field wraps the sum around)", self.modulus)

    def _check_graph(self) -> None:
        """A degree only where users share among users (DPDS, DPDG): even in [2, n - 2] (leave it out for the
        complete graph); the planned dropout fraction in [0, 1)."""
        if (self.degree is not None or self.graph_dropouts) and self.model != "secret_sharing":
            raise ParameterError("degree", "none for this protocol (neighbour graphs are for dpds and dpdg, whose users "
                                 "share among users)", self.degree if self.degree is not None else self.graph_dropouts)
        if self.degree is not None:
            check_integer("degree", self.degree, 2, self.n_users - 2)
            if self.degree % 2:
                raise ParameterError("degree", f"even in [2, {self.n_users - 2}] (a Harary graph; leave it out for the "
                                     "complete graph)", self.degree)
        if not 0 <= self.graph_dropouts < 1:
            raise ParameterError("graph-dropouts", "a fraction of the users in [0, 1) (the honest users the threshold "
                                 "plans to drop out)", self.graph_dropouts)

    @property
    def field(self) -> PrimeField:
        return _field(self.modulus)

    @property
    def sharing_assumption(self) -> str:
        """Whom DPDS's and DPDG's masks hide a user's vector from, as the parties deploy them (Bonawitz et al.'s
        secure aggregation: docs/privacy.md, "Dropouts in DPDS and DPDG"; the paper's n-out-of-n shares cannot survive
        a dropout): on the complete graph the server with fewer than the backups' threshold t of users, t above the
        n - ceil(G n) who may not follow the protocol; on a neighbour graph, as its release states with the graph's
        failure terms added to delta (docs/privacy.md, "Neighbour graphs")."""
        if self.degree is None:
            return ("each user masks his vector with masks agreed by key with every other user and backs his keys up "
                    "t-out-of-n (Shamir), t above the n - ceil(G n) users who may not follow the protocol: the server, "
                    "even with those users, learns only the survivors' sum, and users see no one's masked vector "
                    "(docs/privacy.md, 'Dropouts in DPDS and DPDG'; a lying server is caught or harmless, 'Dishonest "
                    "parties')")
        return (f"each user masks with, and backs his keys up among, his {self.degree} "
                "neighbours of a random graph drawn from the organisation's signed seed (docs/privacy.md, 'Neighbour "
                "graphs'): a release adds the graph's failure terms (an honest user with too many colluding "
                "neighbours, the honest survivors' graph disconnected) to delta")

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
                "standard_error_at": f"the largest count one item can have, {self.largest_count:,} (the largest)",
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
        [0, :attr:`largest_count`], the most one category holds under the data condition, so that no item's
        reported sd exceeds ``expected_error``'s, which is at that count). It is 0 at Pi = 0, so results report
        :meth:`reported_standard_error`, not this at the estimate."""
        p = self.effective_probability
        return np.sqrt(np.clip(estimate, 0, self.largest_count) * (1 - p) / p)

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
        if m and p * m < 10:  # (m = 0: a release recomputed for survivors among whom the smallest may be gone,
            # which its warning of the dropouts says; "counts 0 of the 0 holders" said nothing)
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
    accepted = (f"{'given, ' if beta is None else ''}in (0, 1/N] = (0, {1 / domain_size:.6g}] with N = {domain_size} "
                "categories: the smallest "
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
        return self._sampling_description((self.sharing_assumption,), "p")

    def costs(self) -> dict[str, dict[str, float]]:
        return sharing_costs(self, {"bernoulli_samples": 1})


def sharing_costs(parameters: SharingParameters, own: dict[str, float]) -> dict[str, dict[str, float]]:
    """DPDS's and DPDG's costs per party as Algorithm 2 has them (reference §2.3, Table I): a user sends (n - 1) N
    elements to the others and N to the server, receives (n - 1) N, keeps N (his self-share); ``paper_count`` is
    the paper's 2 n N + N = sent + received + 2 kept (it counts the self-share both ways). ``bytes_sent``: those
    elements on the wire, at ceil(bits / 8) bytes each. ``own``: what makes a user's vector. The deployed parties
    agree their shares by key instead of sending them (:func:`privagg.protocols.sharing_messages.expected_traffic`
    counts what they send)."""
    n, N = parameters.n_users, parameters.domain_size
    element = -(-math.ceil(math.log2(parameters.modulus)) // 8)
    return {"user": {"sent": n * N, "received": (n - 1) * N, "kept": N, "paper_count": 2 * n * N + N,
                     "bytes_sent": n * N * element, "uniform_samples": (n - 1) * N,
                     "field_additions": 2 * (n - 1) * N, **own},
            "server": {"received": n * N, "field_additions": (n - 1) * N, "real_multiplications": N}}


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


@functools.lru_cache(maxsize=64)
def _field(modulus: int) -> PrimeField:
    """Z_p, its modulus checked prime once: every message a user encodes or decodes asks for the field (TSS's helper
    decodes about alpha^2 n N shares; the primality test was 2.5% of the users' CPU at n = 1,000, bench part 16)."""
    return PrimeField(modulus)
