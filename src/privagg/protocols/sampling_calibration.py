"""The calibrations of the sampling + secret sharing protocols (fair DP paper, arXiv:2104.05974): p for DPCS,
DPCS*, DPDS, TSS and TSS' so that the sampled counts are (eps, delta)-DP, computed exactly
(:mod:`privagg.privacy.sampling`; §2.1-2.3, Algorithm 3), and DPDG's per-user discrete Gaussian variance (§2.4).
What was derived here is in docs/derivations.md, "Sampling and secret sharing".
"""

from __future__ import annotations

import math

from ..core.sharing import MODULUS_MAX, PrimeField
from ..errors import ParameterError, check_delta, check_epsilon, check_integer
from ..privacy import sampling as accountant
from .balls_into_bins import N_USERS_MAX, check_honest_fraction
from .dpdg_parameters import DPDGParameters
from .parameters import honest_users
from .sampling_sharing import (NOISE_CALIBRATIONS, SAMPLING_CALIBRATIONS, DPCSParameters, DPCSStarParameters,
                               DPDSParameters, check_class, check_min_count_fraction, min_count)
from .tss_parameters import (TSSCollusionParameters, TSSParameters, adaptive_delta, check_tss_options,
                             inclusion_probability)


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


def check_graph_dropouts(degree, graph_dropouts) -> None:
    """A planned dropout fraction only with a degree: the complete graph's threshold has none to plan for (it
    counts the n - ceil(G n) users who may not follow the protocol), and took one in silence (a reviewer's finding)."""
    if graph_dropouts and degree is None:
        raise ParameterError("graph-dropouts", "left out without --degree (the fraction a neighbour graph's threshold "
                             "plans to drop out; the complete graph's counts the users who may not follow the "
                             "protocol, --honest-fraction)", graph_dropouts)


def calibrate_dpds(epsilon, delta, n_users, domain_size, calibration="exact", min_count_fraction=None,
                   sampling_probability=None, honest_fraction=1.0, degree=None, graph_dropouts=0.0) -> DPDSParameters:
    """DPDS: p for (eps, delta)-DP of the reconstructed counts; dishonest users' coins count as known. ``degree``,
    ``graph_dropouts``: the neighbour graph (:class:`SharingParameters`; None, the complete graph)."""
    check_graph_dropouts(degree, graph_dropouts)
    return calibrate_sampling(DPDSParameters, epsilon, delta, n_users, domain_size, calibration,
                              min_count_fraction, sampling_probability, honest_fraction, degree=degree,
                              graph_dropouts=graph_dropouts)


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
                   honest_fraction=1.0, degree=None, graph_dropouts=0.0) -> DPDGParameters:
    """DPDG: the per-user discrete Gaussian variance (integer, scale 2^k) for (eps, delta)-DP of the sum.

    ``tight``: the least variance the exact accountant certifies for the
    honest users' summed noise; ``classic``: the paper's sigma_G (checked
    exactly, an error if the discrete sum does not meet the target).
    """
    from ..privacy import discrete_gaussian as dg

    check_graph_dropouts(degree, graph_dropouts)
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
                                honest_fraction=float(honest_fraction), degree=degree,
                                graph_dropouts=float(graph_dropouts))
    if calibration == "classic":
        achieved = parameters.delta_at(epsilon)
        if achieved > delta * (1 + 1e-9):  # sigma_G's proof covers eps < 1 only
            raise ParameterError("calibration", f"tight here: the classic sigma_G buys delta = {achieved:.3g} at eps = "
                                 f"{epsilon:g}, not {delta:g} (its proof covers eps < 1)", calibration)
    return parameters
