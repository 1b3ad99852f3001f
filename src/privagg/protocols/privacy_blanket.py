"""The privacy blanket in the shuffle model (Balle, Bell, Gascon, Nissim 2019; Scott, Cormode, Maple 2021):
``blanket-hist``, randomized response R^PH over a domain of B values and its debiasing analyzer.

Each user sends one message: his value with probability 1 - gamma, a value uniform over [B] otherwise
(:class:`BlanketClient`; reference ../shared/papers/shuffle-vector-aggregation.md, Algorithm 1). The
shuffled messages form a histogram; about gamma n of them are the "blanket" that hides any one user's value.
The analyzer counts each value and debiases: E[count_x] = (1 - gamma) g_x + gamma n / B, so the estimate is
(count_x - gamma n / B) / (1 - gamma) (derived in docs/derivations.md, "Privacy blanket"). gamma comes from
the paper's closed form or from the shuffle accountant (:mod:`privagg.privacy.blanket`).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from ..core.encoding import check_item_key
from ..core.messages import Column, MessageBatch, MessageLayout
from ..core.randomness import RNGLike, resolve
from ..errors import ParameterError, check_delta, check_epsilon, check_integer
from ..privacy import blanket
from ..privacy.description import REPLACE_ONE, PrivacyDescription
from .balls_into_bins import (HISTOGRAM_DOMAIN_MAX, MAX_ERROR_BETA, N_USERS_MAX, FE0Analyzer, check_honest_fraction,
                              honest_users)
from .parameters import FrozenParameters, check_item_codes

METHOD_DETAIL = {
    "tight": "the least gamma the shuffle accountant certifies: R^PH is eps0-LDP with e^eps0 = 1 + B (1 - gamma) / "
             "gamma and total variation 1 - gamma; the smaller of FMT's numerical and Wang et al.'s "
             "variation-ratio bounds",
    "paper": "the closed form of Balle et al. (eps < 1) and of the vector paper's extension (1 <= eps < 6) the "
             "authors' code evaluates",
}


def bernoulli(probability: float, size: int, rng: np.random.Generator) -> np.ndarray:
    """Coins with Pr[1] = ceil(p 2^53) / 2^53 >= p, from 53-bit uniform integers: never less blanket than
    calibrated."""
    return rng.integers(0, 2**53, size=size, dtype=np.int64) < math.ceil(probability * 2**53)


@dataclass(frozen=True)
class BlanketHistParameters(FrozenParameters):
    """R^PH over [B]: the blanket probability gamma for (eps, delta)-DP of n shuffled reports."""

    protocol: ClassVar[str] = "blanket-hist"
    mechanism: ClassVar[str] = "R^PH: randomized response with blanket probability gamma over [B]"
    model: ClassVar[str] = "shuffle"
    trusted: ClassVar[tuple[str, ...]] = ("shuffler",)
    domain_max: ClassVar[int] = HISTOGRAM_DOMAIN_MAX
    rho: ClassVar[float] = 0.0  # no dummy messages: one report per user
    messages_sd: ClassVar[float] = 0.0
    noise_options: ClassVar[dict[str, str]] = {}

    epsilon: float
    delta: float
    n_users: int
    domain_size: int
    calibration: str
    gamma: float
    item_key: str | None = dataclasses.field(default=None, kw_only=True)
    honest_fraction: float = dataclasses.field(default=1.0, kw_only=True)

    def __post_init__(self) -> None:
        check_epsilon(self.epsilon)
        check_delta(self.delta)
        check_integer("n_users", self.n_users, 2, N_USERS_MAX)
        check_integer("domain", self.domain_size, 2, self.domain_max)
        if self.calibration not in blanket.METHODS:
            raise ParameterError("calibration", f"one of {', '.join(blanket.METHODS)}", self.calibration)
        if self.item_key is not None:
            check_item_key(self.item_key)
        check_honest_fraction(self.honest_fraction, self.n_users)
        if not 0 < self.gamma < 1:
            raise ParameterError("gamma", "in (0, 1)", self.gamma)

    def verify(self) -> None:
        """The claim against the calibration it names: gamma at least the closed form, or the accountant's delta."""
        if self.calibration == "paper":
            needed = blanket.paper_gamma(self.epsilon, self.delta, self.honest_users, self.domain_size)
            if self.gamma < needed:
                raise ParameterError("gamma", f">= the paper's closed form {needed:.6g}", self.gamma)
            return
        achieved = self.delta_at(self.epsilon)
        if achieved > self.delta * (1 + 1e-9):
            raise ParameterError("gamma", f"large enough for ({self.epsilon:g}, {self.delta:g})-DP (it buys delta = "
                                 f"{achieved:.3g})", self.gamma)

    @property
    def honest_users(self) -> int:
        return honest_users(self.n_users, self.honest_fraction)

    @property
    def layout(self) -> MessageLayout:
        return MessageLayout((Column("value", 0, self.domain_size),))

    @property
    def bits_per_message(self) -> int:
        return self.layout.bits_per_message

    @property
    def messages_per_user(self) -> float:
        return 1.0

    def check_codes(self, codes) -> np.ndarray:
        return check_item_codes(codes, self.domain_size)

    def check_population(self, codes: np.ndarray) -> None:
        """No condition on the data."""

    def derived(self) -> dict[str, Any]:
        return {"local_epsilon": blanket.local_epsilon(self.gamma, self.domain_size)}

    # --- theory (docs/derivations.md, "Privacy blanket") ----------------------------------------------
    def debias(self, counts: np.ndarray) -> np.ndarray:
        """(count - gamma n / B) / (1 - gamma): unbiased for g_x."""
        return (np.asarray(counts, dtype=np.float64) - self.gamma * self.n_users / self.domain_size) / (1 - self.gamma)

    def standard_error(self, frequency=0.0):
        """sqrt(g a1 (1 - a1) + (n - g) a0 (1 - a0)) / (1 - gamma), a1 = 1 - gamma + gamma / B, a0 = gamma / B:
        each user's message equals x with probability a1 if he holds x, a0 otherwise."""
        g = np.clip(frequency, 0, self.n_users)
        a0 = self.gamma / self.domain_size
        a1 = 1 - self.gamma + a0
        return np.sqrt(g * a1 * (1 - a1) + (self.n_users - g) * a0 * (1 - a0)) / (1 - self.gamma)

    def max_error_bound(self, beta: float = MAX_ERROR_BETA) -> float:
        """Bernstein + union bound over [B] at the largest per-item variance (g = n/2 or 0, whichever larger)."""
        if not 0 < beta < 1:
            raise ParameterError("beta", "in (0, 1)", beta)
        sd = float(max(self.standard_error(self.n_users / 2), self.standard_error(0)))
        log_term = math.log(2 * self.domain_size / beta)
        return log_term / (3 * (1 - self.gamma)) + math.sqrt((log_term / (3 * (1 - self.gamma))) ** 2 +
                                                              2 * sd**2 * log_term)

    def expected_error(self) -> dict[str, float]:
        return {"messages_per_user": 1.0, "bits_per_message": self.bits_per_message,
                "standard_error": float(self.standard_error(0)), "max_error_bound": self.max_error_bound(),
                "max_error_beta": MAX_ERROR_BETA}

    def costs(self) -> dict[str, dict[str, float]]:
        return {"user": {"sent": 1.0}, "analyzer": {"received": float(self.n_users)}}

    def theory(self) -> dict[str, float | str]:
        return {"estimate": "(count - gamma n / B) / (1 - gamma)", "blanket_messages": self.gamma * self.n_users,
                "standard_error_at_zero": float(self.standard_error(0))}

    def noise_fields(self, scale: float) -> dict[str, float]:
        """gamma multiplied by ``scale`` (for the auditors)."""
        return {"gamma": min(self.gamma * scale, 1 - 1e-12)}

    # --- privacy --------------------------------------------------------------------------------------
    def delta_at(self, epsilon: float) -> float:
        """The accountant's delta(eps) for the honest users' reports (any calibration)."""
        return blanket.delta_at(epsilon, self.gamma, self.honest_users, self.domain_size)

    @property
    def privacy(self) -> PrivacyDescription:
        caveats = ("the paper's closed form for 1 <= eps < 6 is the vector paper's extension, whose proof was not "
                   "retrieved; delta_at(eps) gives the accountant's bound for this gamma",) if (
            self.calibration == "paper" and self.epsilon >= 1) else ()
        return PrivacyDescription(
            mechanism=self.mechanism, parameters={"gamma": self.gamma, "n_users": self.n_users,
                                                  "honest_users": self.honest_users, "domain_size": self.domain_size},
            epsilon=self.epsilon, delta=self.delta, model=self.model, neighbouring=REPLACE_ONE, trusted=self.trusted,
            honest_fraction=self.honest_fraction,
            assumptions=("all n users follow the protocol" if self.honest_fraction == 1 else
                         f"at least {self.honest_users} of the {self.n_users} users follow the protocol (the others' "
                         "reports are not counted as blanket)", "the item-hash key and the parameters are public"),
            method=self.calibration, method_detail=METHOD_DETAIL[self.calibration],
            reference="src/privagg/privacy/blanket.py; docs/derivations.md, 'Privacy blanket'", caveats=caveats)

    def warnings(self) -> list[str]:
        return [f"gamma = {self.gamma:.3g}: most reports are blanket noise, so the estimates' error is large; more "
                "users or a smaller domain help"] if self.gamma > 0.9 else []


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
        replaced = bernoulli(p.gamma, codes.size, rng)
        values = codes.copy()
        values[replaced] = rng.integers(0, p.domain_size, size=int(replaced.sum()))
        return self.layout.batch({"value": values})


class BlanketAnalyzer(FE0Analyzer):
    """A^PH: the histogram of the shuffled reports (counted as FE0's analyzer counts its values), debiased by
    (count - gamma n / B) / (1 - gamma)."""


def message_law(parameters: BlanketHistParameters, item: int) -> dict[tuple[int, ...], float]:
    """One user's message as an exact law over one-message histograms (the exact auditor)."""
    B, gamma = parameters.domain_size, parameters.gamma
    return {tuple(int(j == value) for j in range(B)): (1 - gamma) * (value == item) + gamma / B
            for value in range(B)}
