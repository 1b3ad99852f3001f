"""TSS and TSS' (Algorithm 3 of the fair DP paper, arXiv:2104.05974; its §3.4 uniform and §3.5 adaptive report
sets): their parameters, the report-set options, and delta(eps) of the adaptive stage (docs/derivations.md,
"Sampling and secret sharing"). The parties are in :mod:`privagg.protocols.two_server_parties`; the calibration in
:mod:`privagg.protocols.sampling_calibration`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from ..errors import ParameterError, check_integer
from ..privacy import sampling as accountant
from ..privacy.description import PrivacyDescription
from .sampling_sharing import METHOD_DETAIL, SECOND_STAGES, SamplingParameters, min_count


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

    def delta_against_first(self, epsilon: float) -> float:
        """delta(eps) of the release against S1, should it see it: S1 knows every report set, so the counts are
        sampled at rate p among the holders who put their item in their set (the adaptive stage's bound, at
        gamma = 1 for the uniform stage), and the d dropouts (``dropouts``) are counted as S1's choice among those
        holders, not as independent of the sets (docs/privacy.md, "The release and S1")."""
        holders = max(1, min_count(self.enrolled, self.min_count_fraction) - (self.n_users - self.honest_users))
        return adaptive_delta(epsilon - math.log(self.gamma), self.sampling_probability, holders,
                              self.inclusion_probability, removed=self.dropouts)

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
        against_s1 = ("S1 sees each user's report set A_i, which is independent of the user's item (uniform stage), "
                      "and must not see the release: given the report sets a count is sampled at rate p, not p "
                      "p_chi, among the holders who put their item in their set, and an S1 that leaves users out "
                      "of R2 by their sets can leave an item's count to one reporter's entry (docs/privacy.md, "
                      "'The release and S1')"
                      if self.second_stage == "uniform" else
                      f"S1 sees each user's report set A_i: ln(gamma) = {math.log(self.gamma):.4g}-LDP of the item "
                      "(adaptive stage), a local guarantee, not the central one; the bound holds given every report "
                      "set, but an S1 that leaves users out of R2 by their sets can leave an item's count to one "
                      "reporter's entry: it must not see the release (docs/privacy.md, 'The release and S1')")
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


def adaptive_delta(epsilon: float, p: float, holders: int, inclusion: float, removed: int = 0) -> float:
    """delta(eps) of the counts given every report set, the holders who report their item Bin(holders - 1, p_chi)
    besides the changed user (TSSParameters.delta_at): min over k of 2 F(k - 2) + delta_p(eps) at k holders.
    ``removed``: users a party that knows the report sets left out by them (S1's dropouts), each perhaps one of
    those holders: at least k - 1 of them stay unless Bin(holders - 1, p_chi) < k - 1 + removed, so F(k - 2 +
    removed) (docs/privacy.md, "The release and S1")."""
    from scipy.stats import binom

    if epsilon <= 0:
        return 1.0
    mean, sd = (holders - 1) * inclusion, math.sqrt(max((holders - 1) * inclusion * (1 - inclusion), 1e-12))
    candidates = {max(1, math.floor(mean - removed - z * sd)) for z in (0.5, 1, 2, 3, 4, 5, 6, 8, 10, 13, 16, 20)}
    return min(1.0, min(2 * float(binom.cdf(k - 2 + removed, holders - 1, inclusion)) +
                        accountant.sampling_delta(epsilon, p, k) for k in candidates))
