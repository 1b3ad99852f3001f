"""DPDG (§2.4 of the fair DP paper, arXiv:2104.05974; §III-B): no sampling, each user adds distributed discrete
Gaussian noise at the fixed-point scale 2^k before the sharing of Algorithm 2; its parameters, with privacy of the
sum computed exactly (:mod:`privagg.privacy.discrete_gaussian`). The calibration is in
:mod:`privagg.protocols.sampling_calibration`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from ..errors import ParameterError, check_integer
from ..privacy.description import PrivacyDescription
from .results import MAX_ERROR_BETA
from .sampling_sharing import NOISE_CALIBRATIONS, SharingParameters, _crossover, sharing_costs


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
            (honesty, "no condition on the data", self.sharing_assumption),
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
