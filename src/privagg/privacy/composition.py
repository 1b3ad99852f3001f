"""A user with up to L items (or rows) sends L reports: the guarantee of the user from the guarantee of one report
(docs/privacy.md, "Many rows a user"), and the other way round, the per-report budget that keeps the user's.

* **Local model** (each report its own run of the local randomizer, whatever the others send): the user's L
  reports are an L-fold composition of the per-report (eps0, delta0) guarantee. dp-accounting's privacy loss
  distribution (PLD) of the generic (eps0, delta0) pair, composed L times, gives the optimal composition of L
  (eps0, delta0)-DP mechanisms (Kairouz, Oh and Viswanath 2015; the pair dominates every such mechanism, so
  the bound holds for each), pessimistically discretised. Without dp-accounting: basic composition (L eps0,
  L delta0), Dwork and Roth Theorem 3.16.
* **Other models** (shuffle, central, two servers: one report's guarantee rests on the n L - 1 others, so the
  L reports are no independent mechanisms): the protocol over the n L reports, calibrated for n L, where a
  neighbour changes up to L of them: group privacy, (L eps0, delta0 (1 + e^eps0 + ... + e^((L-1) eps0))) by
  the chain D = D_0, ..., D_L = D' of datasets one report apart (Dwork and Roth, Theorem 2.2's argument with
  delta kept; Vadhan, "The Complexity of Differential Privacy", Lemma 2.2).

For L = 1 both are the per-report guarantee itself.
"""

from __future__ import annotations

import math
from dataclasses import dataclass


GROUP = "group privacy"
PLD = "PLD composition (dp-accounting)"
BASIC = "basic composition"
BISECTION_STEPS = 60


@dataclass(frozen=True)
class PerReport:
    """The per-report (``epsilon``, ``delta``) whose L-fold use by one user is (``user_epsilon``, ``user_delta``)
    by ``method`` (:data:`GROUP`, :data:`PLD` or :data:`BASIC`)."""

    epsilon: float
    delta: float
    reports: int
    user_epsilon: float
    user_delta: float
    method: str

    @property
    def detail(self) -> str:
        """How the user's guarantee follows from one report's, in a sentence of the privacy block."""
        per = f"each of the user's {self.reports} reports at ({self.epsilon:.6g}, {self.delta:.3g})"
        if self.method == GROUP:
            return (f"{per}, the protocol run over all the users' reports (n L, each user padded to L); a neighbour "
                    f"changes up to L = {self.reports} of them: group privacy, (L eps0, delta0 sum_i<L e^(i eps0))")
        if self.method == PLD:
            return (f"{per}, each its own run of the local randomizer: L-fold optimal composition of the (eps0, "
                    "delta0) pair by dp-accounting's privacy loss distribution (pessimistic discretisation)")
        return f"{per}, each its own run of the local randomizer: L-fold basic composition (L eps0, L delta0)"


def group_privacy(epsilon: float, delta: float, reports: int) -> tuple[float, float]:
    """(L eps0, delta0 sum_{i<L} e^(i eps0)): the guarantee against a neighbour changing ``reports`` = L reports of
    a mechanism (``epsilon``, ``delta``)-DP against one."""
    return reports * epsilon, delta * sum(math.exp(i * epsilon) for i in range(reports))


def basic_composition(epsilon: float, delta: float, reports: int) -> tuple[float, float]:
    return reports * epsilon, reports * delta


def pld_epsilon(epsilon: float, delta: float, reports: int, target_delta: float) -> float:
    """The epsilon at ``target_delta`` of L = ``reports`` (``epsilon``, ``delta``)-DP mechanisms composed, by
    dp-accounting's PLD of the generic pair (infinite when ``target_delta`` is below 1 - (1 - delta)^L)."""
    from dp_accounting.pld import common, privacy_loss_distribution

    pair = privacy_loss_distribution.from_privacy_parameters(common.DifferentialPrivacyParameters(epsilon, delta))
    return float(pair.self_compose(reports).get_epsilon_for_delta(target_delta))


def have_pld() -> bool:
    try:
        import dp_accounting  # noqa: F401
    except ImportError:
        return False
    return True


def per_report(model: str, epsilon: float, delta: float, reports: int) -> PerReport:
    """The largest per-report budget whose use by a user with ``reports`` = L reports keeps (``epsilon``,
    ``delta``), by the composition valid for ``model`` (the module's docstring)."""
    if reports == 1:
        return PerReport(epsilon, delta, 1, epsilon, delta, GROUP if model != "local" else BASIC)
    if model != "local":
        eps0 = epsilon / reports
        delta0 = delta / sum(math.exp(i * eps0) for i in range(reports))
        return PerReport(eps0, delta0, reports, *group_privacy(eps0, delta0, reports), GROUP)
    if not have_pld():
        return PerReport(epsilon / reports, delta / reports, reports, epsilon, delta, BASIC)
    # the local baselines are pure (delta0 = 0); the user's delta buys a larger eps0 than eps / L
    low, high = epsilon / reports, epsilon
    for _ in range(BISECTION_STEPS):
        middle = (low + high) / 2
        low, high = (middle, high) if pld_epsilon(middle, 0.0, reports, delta) <= epsilon else (low, middle)
    composed = pld_epsilon(low, 0.0, reports, delta)
    if composed > epsilon or low <= epsilon / reports * (1 + 1e-9):  # nothing gained over L eps0 (delta = 0)
        return PerReport(epsilon / reports, 0.0, reports, epsilon, 0.0, BASIC)
    return PerReport(low, 0.0, reports, composed, delta, PLD)
