"""The central-model baselines: a trusted curator counts every item and adds integer noise to each count it
releases, drawn exactly (no floating-point noise sampler).

* ``laplace``: the discrete Laplace Lap_Z(t / s), Pr[Y = y] proportional to exp(-a |y|) with a = s / t <=
  eps / 2 (replacing one user's item moves two counts by 1: L1 sensitivity 2), pure eps-DP. Sampled by
  Canonne, Kamath and Steinke's Algorithm 2 (:mod:`privagg.privacy.discrete_gaussian`).
* ``gaussian``: the discrete Gaussian N_Z(0, s2) of the same authors, s2 the least integer whose exact
  delta(eps) for the two moved counts meets delta (the accountant DPDG uses, with one noise draw per count).

The estimate is the noisy count itself (unbiased); its variance is the noise's, computed exactly from the
law. Derivations: docs/derivations.md, "Central baselines".
"""

from __future__ import annotations

import dataclasses
import functools
import math
from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from ..core.encoding import check_item_key
from ..core.randomness import RNGLike, resolve
from ..errors import ParameterError, check_delta, check_epsilon, check_integer
from ..privacy import discrete_gaussian
from ..privacy.description import REPLACE_ONE, Mechanism, PrivacyDescription
from .balls_into_bins import HISTOGRAM_DOMAIN_MAX, N_USERS_MAX, CountAggregate, FE0Analyzer
from . import exact_laws
from .parameters import FrozenParameters, OneItemReports, check_pure_delta, neighbouring_pairs
from .results import MAX_ERROR_BETA, FrequencyTable

LAPLACE_DENOMINATOR = 2**24  # t: the Laplace parameter a = s / t is eps / 2 rounded down to a multiple of 2^-24
AUDIT_TAIL = 1e-13  # the exact auditor truncates the noise where less than this is left beyond (audit.ROUND_OFF)


@dataclass(frozen=True)
class _CentralParameters(OneItemReports, FrozenParameters):
    """What the two curators share: a count per item, one noise draw per released count."""

    model: ClassVar[str] = "central"
    trusted: ClassVar[tuple[str, ...]] = ("curator",)
    rho: ClassVar[float] = 0.0
    messages_sd: ClassVar[float] = 0.0
    noise_options: ClassVar[dict[str, str]] = {}
    honest_fraction: ClassVar[float] = 1.0
    domain_max: ClassVar[int] = HISTOGRAM_DOMAIN_MAX
    mechanism: ClassVar[str]

    epsilon: float
    delta: float
    n_users: int
    domain_size: int
    calibration: str
    item_key: str | None = dataclasses.field(default=None, kw_only=True)  # maps text items into [B] (public)

    def _check_common(self) -> None:
        check_epsilon(self.epsilon)
        if self.calibration != "exact":
            raise ParameterError("calibration", "exact", self.calibration)
        check_integer("n_users", self.n_users, 2, N_USERS_MAX)
        check_integer("domain", self.domain_size, 2, self.domain_max)
        if self.item_key is not None:
            check_item_key(self.item_key)

    def check_population(self, codes: np.ndarray) -> None:
        """No condition on the data."""

    def debias(self, counts: np.ndarray) -> np.ndarray:
        """The noisy count itself: the noise has mean 0."""
        return np.asarray(counts, dtype=np.float64)

    @property
    def noise_sd(self) -> float:
        raise NotImplementedError

    def standard_error(self, frequency=0.0):
        """The noise's sd, whatever the count."""
        return np.broadcast_to(self.noise_sd, np.shape(frequency)).astype(np.float64)

    def max_error_bound(self, beta: float = MAX_ERROR_BETA) -> float:
        """The least m with Pr[some |noise| > m] <= beta over [B] (union bound on ``tail_above``: the exact tail
        for Laplace, a sub-Gaussian upper bound for Gaussian)."""
        if not 0 < beta < 1:
            raise ParameterError("beta", "in (0, 1)", beta)
        tail = beta / self.domain_size / 2  # one side of one count
        m = 0
        while self.tail_above(m) > tail:
            m = max(1, 2 * m)
        lo, hi = m // 2, m
        while hi - lo > 1:
            mid = (lo + hi) // 2
            lo, hi = (mid, hi) if self.tail_above(mid) > tail else (lo, mid)
        return float(hi)

    def tail_above(self, m: int) -> float:
        """Pr[noise > m] (protocol-specific)."""
        raise NotImplementedError

    def expected_error(self) -> dict[str, float]:
        return {"messages_per_user": 1.0, "bits_per_message": self.bits_per_message,
                "standard_error": self.noise_sd, "standard_error_at": "any item (the noise's alone)",
                "max_error_bound": self.max_error_bound(),
                "max_error_beta": MAX_ERROR_BETA}

    def costs(self) -> dict[str, dict[str, float]]:
        return {"user": {"sent": 1.0}, "curator": {"received": float(self.n_users)}}

    def verify(self) -> None:
        """The noise's exact delta at eps against the claim (Laplace: 0, checked on load already)."""
        self.check_delta_at(self.noise_field, getattr(self, self.noise_field))

    def sample(self, size: int, rng: np.random.Generator) -> np.ndarray:
        """``size`` exact noise draws (protocol-specific)."""
        raise NotImplementedError

    def noise_law(self) -> tuple[int, np.ndarray]:
        """(W, Pr[noise = -W..W]): the law the exact auditor convolves, truncated where both tails from W on hold
        less than AUDIT_TAIL (the audit cannot see that mass; a divergence hidden there is below it)."""
        width = self.noise_width()
        return width, self.pmf(np.arange(-width, width + 1))

    def noise_width(self) -> int:
        """W of :meth:`noise_law`, without its law: the least power of 2 whose two tails from W on hold at most
        AUDIT_TAIL. From W, not beyond it: a neighbour's count moves by one, so the values at the edge of one
        dataset's truncated law are cut from the other's; held below AUDIT_TAIL, they are round-off, not an output
        one side cannot give (at eps = 40 the edge held 4e-9 and the audit called a pure eps-DP Laplace VIOLATED)."""
        width = 1
        while 2 * self.tail_above(width - 1) > AUDIT_TAIL:
            width *= 2
        return width

    def _description(self, parameters: dict, method_detail: str) -> PrivacyDescription:
        return PrivacyDescription.of(Mechanism(
            mechanism=self.mechanism, parameters={"n_users": self.n_users, **parameters}, epsilon=self.epsilon,
            delta=self.delta, model=self.model, neighbouring=REPLACE_ONE, trusted=self.trusted,
            honest_fraction=1.0, assumptions=("the curator counts every item and adds fresh noise to each count "
                                              "it releases, once",),
            method=self.calibration, method_detail=method_detail,
            reference="src/privagg/protocols/central_baselines.py; docs/derivations.md, 'Central baselines'"))


@dataclass(frozen=True)
class LaplaceParameters(_CentralParameters):
    """Discrete Laplace noise Lap_Z(t / s) per count, a = s / t <= eps / 2: pure eps-DP."""

    protocol: ClassVar[str] = "laplace"
    noise_field: ClassVar[str] = "scale_numerator"
    mechanism: ClassVar[str] = "Laplace: each count plus discrete Laplace noise Pr[y] ~ exp(-a |y|), a <= eps / 2"

    scale_numerator: int  # s
    scale_denominator: int  # t

    def __post_init__(self) -> None:
        self._check_common()
        if self.delta != 0:
            raise ParameterError("delta", "0 (left out): the Laplace mechanism is pure eps-DP", self.delta)
        check_integer("scale_denominator", self.scale_denominator, 1, 2**40)
        check_integer("scale_numerator", self.scale_numerator, 1, self.scale_denominator * 64)
        if 2 * self.scale_numerator > self.epsilon * self.scale_denominator * (1 + 1e-12):
            raise ParameterError("scale_numerator", f"at most eps t / 2 = {self.epsilon * self.scale_denominator / 2}"
                                 " (the noise buys eps = 2 s / t)", self.scale_numerator)

    @property
    def a(self) -> float:
        return self.scale_numerator / self.scale_denominator

    def noise_fields(self, scale: float) -> dict[str, int]:
        """Noise multiplied by ``scale`` (for the auditors): a divided by it."""
        return {"scale_numerator": max(1, round(self.scale_numerator / scale))}

    @property
    def noise_sd(self) -> float:
        """sqrt(2 e^-a) / (1 - e^-a): the discrete Laplace's variance is 2 e^-a / (1 - e^-a)^2."""
        return math.sqrt(2 * math.exp(-self.a)) / -math.expm1(-self.a)

    def pmf(self, y: np.ndarray) -> np.ndarray:
        """tanh(a / 2) e^(-a |y|)."""
        return math.tanh(self.a / 2) * np.exp(-self.a * np.abs(np.asarray(y, dtype=np.float64)))

    def tail_above(self, m: int) -> float:
        """Pr[Y > m] = e^(-a (m + 1)) / (1 + e^-a)."""
        return math.exp(-self.a * (m + 1)) / (1 + math.exp(-self.a))

    def sample(self, size: int, rng: np.random.Generator) -> np.ndarray:
        return discrete_gaussian.discrete_laplace(size, self.scale_denominator, self.scale_numerator, rng)

    def delta_at(self, epsilon: float) -> float:
        """Exact: each of the two moved counts adds a loss of +a or -a (+a when its noise is on the far side of
        the shift, with probability 1 / (1 + e^-a)), so delta(eps) = (1 / (1 + e^-a))^2 max(0, 1 - e^(eps - 2a))
        (docs/derivations.md)."""
        if check_epsilon(epsilon) >= 2 * self.a:  # pure eps-DP at 2a: nothing above it (and no expm1 overflow)
            return 0.0
        return (1 / (1 + math.exp(-self.a))) ** 2 * -math.expm1(epsilon - 2 * self.a)

    def derived(self) -> dict:
        return {"noise_epsilon": 2 * self.a}

    def theory(self) -> dict[str, float | str]:
        return {"estimate": "count + Lap_Z(1 / a)", "a": self.a, "noise_sd": self.noise_sd}

    @property
    def privacy(self) -> PrivacyDescription:
        return self._description({"a": self.a}, "pure eps-DP: the counts' L1 sensitivity is 2 and the noise's "
                                 "log-likelihood moves by at most a per unit, 2a <= eps")


@dataclass(frozen=True)
class GaussianParameters(_CentralParameters):
    """Discrete Gaussian noise N_Z(0, s2) per count, s2 the least integer meeting (eps, delta) exactly."""

    protocol: ClassVar[str] = "gaussian"
    noise_field: ClassVar[str] = "noise_variance"
    mechanism: ClassVar[str] = "Gaussian: each count plus discrete Gaussian noise N_Z(0, s2)"

    noise_variance: int  # s2

    def __post_init__(self) -> None:
        self._check_common()
        check_delta(self.delta)
        check_integer("noise variance", self.noise_variance, 1, discrete_gaussian.TOTAL_VARIANCE_MAX)

    def noise_fields(self, scale: float) -> dict[str, int]:
        """Noise multiplied by ``scale`` (for the auditors): s2 times its square."""
        return {"noise_variance": max(1, round(self.noise_variance * scale**2))}

    @property
    def noise_sd(self) -> float:
        """The exact sd of N_Z(0, s2) (at most sqrt(s2), below it by a relative e^(-2 pi^2 s2) or so; Canonne,
        Kamath, Steinke), from its law over +-40 sd, computed once per s2."""
        return _discrete_gaussian_sd(self.noise_variance)

    def pmf(self, y: np.ndarray) -> np.ndarray:
        return discrete_gaussian.pmf(self.noise_variance, y)

    def tail_above(self, m: int) -> float:
        """Pr[Y > m] <= exp(-(m + 1)^2 / (2 s2)) (sub-Gaussian tail)."""
        return math.exp(-((m + 1) ** 2) / (2 * self.noise_variance))

    def sample(self, size: int, rng: np.random.Generator) -> np.ndarray:
        return discrete_gaussian.sample(self.noise_variance, size, rng)

    def delta_at(self, epsilon: float) -> float:
        """The exact accountant of the two moved counts, one N_Z(0, s2) each (``discrete_gaussian.delta_at``)."""
        return discrete_gaussian.delta_at(epsilon, self.noise_variance, 1, 1)

    def theory(self) -> dict[str, float | str]:
        return {"estimate": "count + N_Z(0, s2)", "noise_variance": self.noise_variance, "noise_sd": self.noise_sd}

    @property
    def privacy(self) -> PrivacyDescription:
        return self._description({"noise_variance": self.noise_variance}, "the least integer s2 whose exact "
                                 "delta(eps), computed from the discrete Gaussian's law, meets delta")


@functools.lru_cache(maxsize=64)
def _discrete_gaussian_sd(s2: int) -> float:
    width = math.ceil(40 * math.sqrt(s2)) + 50
    y = np.arange(-width, width + 1)
    return math.sqrt(float(np.sum(y * y * discrete_gaussian.pmf(s2, y))))


def _calibrated(cls, epsilon: float, delta: float, n_users: int, domain_size: int, calibration: str, noise):
    """``cls`` with the checked common fields and the noise field(s) ``noise(epsilon, delta)`` returns."""
    if calibration != "exact":
        raise ParameterError("calibration", "exact", calibration)
    n = check_integer("n_users", n_users, 2, N_USERS_MAX)
    domain = check_integer("domain", domain_size, 2, HISTOGRAM_DOMAIN_MAX)
    return cls(epsilon=epsilon, delta=delta, n_users=n, domain_size=domain, calibration=calibration,
               **noise(epsilon, delta))


def _laplace_scale(epsilon: float, delta: float) -> dict[str, int]:
    """s = floor(eps t / 2), at most 64 t (a = 64, the sampler's largest: the noise is then nonzero with
    probability about 3e-28; a larger eps gets that noise, which buys eps = 128, less than it claims)."""
    s = min(math.floor(epsilon / 2 * LAPLACE_DENOMINATOR), 64 * LAPLACE_DENOMINATOR)
    if s < 1:
        raise ParameterError("epsilon", f"at least 2 / {LAPLACE_DENOMINATOR} for the discrete Laplace's grid", epsilon)
    return {"scale_numerator": s, "scale_denominator": LAPLACE_DENOMINATOR}


def calibrate_laplace(epsilon: float, delta: float | None, n_users: int, domain_size: int,
                      calibration: str = "exact") -> LaplaceParameters:
    """a = s / t: eps / 2 rounded down to a multiple of 1 / t (t = 2^24), so the noise buys at most eps."""
    return _calibrated(LaplaceParameters, check_epsilon(epsilon), check_pure_delta("laplace", delta), n_users,
                       domain_size, calibration, _laplace_scale)


def calibrate_gaussian(epsilon: float, delta: float, n_users: int, domain_size: int,
                       calibration: str = "exact") -> GaussianParameters:
    """s2: the least integer whose exact delta(eps) meets delta (``discrete_gaussian.calibrate``, one draw a count)."""
    return _calibrated(GaussianParameters, check_epsilon(epsilon), check_delta(delta), n_users, domain_size,
                       calibration, lambda e, d: {"noise_variance": discrete_gaussian.calibrate(e, d, 1, 1)})


class CentralCurator(FE0Analyzer):
    """Counts the items (FE0's histogram), then adds one exact noise draw to each released count, once per
    aggregate (finalizing again repeats the same release, never a second one)."""

    noise_per_item: ClassVar[bool] = True  # an exact draw for every item estimated (what a full domain costs)

    def __init__(self, parameters: _CentralParameters, queries=None, rng: RNGLike = None) -> None:
        super().__init__(parameters, queries)
        self.rng = rng

    def finalize(self, agg: CountAggregate) -> FrequencyTable:
        if agg.noise is None:
            agg.noise = self.parameters.sample(agg.counts.size, resolve(self.rng))
        return super().finalize(CountAggregate(agg.counts + agg.noise, agg.messages, agg.malformed))

    @classmethod
    def working_bytes(cls, parameters: _CentralParameters, full_domain: bool = True) -> int:
        aggregate = 8 * parameters.domain_size if full_domain else 0
        return super().working_bytes(parameters, full_domain) + 4 * aggregate  # the noise and its draws


# --- the exact auditor: users' one-hot values and the curator's noise, as one more "user" -----------------------


def law_size(parameters: _CentralParameters, item: int) -> exact_laws.LawSize:
    """:func:`message_law`'s size before it is built: a user's one-hot value is one outcome; the curator's noise
    (the item B) is (2W + 1)^B outcomes, W the truncation of one count's noise (``noise_width``: about
    ln(1 / AUDIT_TAIL) / a for Laplace, 7.6 sd for the Gaussian), so it grows as eps shrinks (and delta, for the
    Gaussian) and exponentially with B."""
    p, B = parameters, parameters.domain_size
    raise_noise = "a larger --epsilon" + (" or --delta" if isinstance(p, GaussianParameters) else "")
    if item < B:
        return exact_laws.LawSize(p.protocol, 1.0, B, 1, "domain", B, others=raise_noise)
    width = p.noise_width()
    support = 2 * width + 1

    def fits(budget: float) -> int | None:
        return exact_laws.largest_fitting(lambda b: exact_laws.power(support, b) * (b + exact_laws.UNITS_PER_STATE),
                                          budget, 2, B)

    states, detail = exact_laws.power(support, B), f"each count's noise is truncated to {support} values"
    if fits(exact_laws.EXACT_LAW_MAX_WORK) is None:  # not even 2 counts: only less noise helps
        return exact_laws.LawSize(p.protocol, states, B, 2 * width, "epsilon", p.epsilon, "larger",
                                  "a larger --delta" if isinstance(p, GaussianParameters) else "", detail)
    return exact_laws.LawSize(p.protocol, states, B, 2 * width, "domain", B, others=raise_noise, detail=detail,
                              limit=fits)


def message_law(parameters: _CentralParameters, item: int) -> dict[tuple[int, ...], float]:
    """A user's value as a one-hot histogram; the pseudo-item B stands for the curator's noise: W + noise per
    count, truncated at W (``noise_law``; the same shift in both datasets, so it changes no divergence). Its
    size is checked first (:func:`law_size`)."""
    B = parameters.domain_size
    exact_laws.check_law(law_size(parameters, item))
    if item < B:
        return {tuple(int(z == item) for z in range(B)): 1.0}
    _, law = parameters.noise_law()
    out: dict[tuple[int, ...], float] = {}
    for offsets in np.ndindex(*(law.size,) * B):
        out[offsets] = float(np.prod(law[list(offsets)]))
    return out


def audit_pairs(parameters: _CentralParameters, users: int):
    """Every neighbouring pair (:func:`neighbouring_pairs`), the curator's noise riding along as the item B."""
    for first, second in neighbouring_pairs(parameters.domain_size, users):
        yield first + [parameters.domain_size], second + [parameters.domain_size]
