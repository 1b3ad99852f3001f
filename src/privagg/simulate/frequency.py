"""Private frequency estimation over a list of items, with its full report.

:func:`estimate_frequencies` is what ``privagg estimate`` runs over the
users' item codes: calibrate the protocol, simulate it, and report the top
items with standard errors, the privacy description and the cost; and,
when asked to evaluate (``evaluate``), the true counts and the realised
error beside them, which makes the report an evaluation, not a private
release (its privacy block says so). What the report releases is decided
by :mod:`privagg.pipelines`, as for ``privagg analyze`` and the services.
"""

from __future__ import annotations

import dataclasses
import hashlib
import math
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np

from ..core.encoding import ItemEncoder, check_item_key
from ..core.selection import percentiles
from ..errors import ParameterError, check_callable, check_instance, check_integer, check_sequence, checked_arguments
from ..pipelines import Analysis, FirstStage
from ..privacy.description import privacy_warnings
from ..protocols.registry import (FULL_DOMAIN_BYTES_MAX, PREIMAGES_MAX, analyzer_checks, calibrate,
                                  choose_full_domain, discovery_parameters, full_domain_seconds, get)
from ..protocols.results import MAX_ERROR_BETA, FrequencyTable, count_among, top_k
from ..reports import (Estimate, EstimateReport, Group, Messages, RealisedError, Simulation,
                       privacy_profile, report_parameters)
from .progress import Progress
from .runner import check_cost, check_size, option_value, shrink_hint, simulate, simulation_bytes

def item_encoder(domain_size: int, hash_key: str | None = None, seed: int | None = None) -> ItemEncoder:
    """The encoder of one run: the public ``hash_key`` (hex) when given, so codes match other runs with it;
    else a key derived from ``seed`` (a reproducible simulation), else a random one."""
    if hash_key is not None:
        key = bytes.fromhex(check_item_key(hash_key))
    elif seed is not None:
        key = hashlib.blake2b(f"privagg-item-key-{seed}".encode(), digest_size=32).digest()
    else:
        key = None
    return ItemEncoder(domain_size, key)


ERROR_BLOCK = 1 << 16  # values per block when the errors overwrite the true counts


def error_summary(estimates: np.ndarray, truth: np.ndarray, over: str, overwrite: bool = False) -> RealisedError:
    """Statistics of |estimate - truth|, computed in one scratch array (full domains are large). ``overwrite``
    (int64 or float64 ``truth``): the scratch array is ``truth``'s own memory, the errors written over the
    counts a block at a time. A fresh domain-sized array costs its first touch of every page: at 2^24 doubles
    0.15 to 0.3 s here, several times the arithmetic."""
    if overwrite and truth.dtype.itemsize == 8 and truth.flags.c_contiguous:
        abs_err = truth.view(np.float64)
        for start in range(0, truth.size, ERROR_BLOCK):  # each block read as counts before written as errors
            block = slice(start, start + ERROR_BLOCK)
            abs_err[block] = np.abs(np.subtract(estimates[block], truth[block], dtype=np.float64))
    else:
        abs_err = np.subtract(estimates, truth, dtype=np.float64)
        np.abs(abs_err, out=abs_err)
    largest, mean = float(abs_err.max()), float(abs_err.mean())
    # numpy.percentile's values, without partitioning the whole domain (a NaN estimate, were there one: NaN, as numpy)
    p50, p90, p99 = [math.nan] * 3 if math.isnan(largest) else percentiles(abs_err, [50, 90, 99], overwrite=True)
    return RealisedError(over, int(abs_err.size), largest, mean, float(p50), float(p90), float(p99))


def full_domain_bytes(parameters, mode: str) -> int:
    """The memory estimating all of [B] adds to a run of ``parameters`` (:func:`peak_bytes` over the full domain
    less over candidates)."""
    return peak_bytes(parameters, mode, True) - peak_bytes(parameters, mode, False)


def full_domain_preimages(parameters) -> int:
    """The preimages an analyzer that enumerates them over [B] walks (FE1, and sparse-vector-hashed over its cells:
    every message's q / b, the dummies' too, which the fast path also makes and counts one by one), else 0
    (:func:`privagg.protocols.registry.full_domain_preimages`)."""
    from ..protocols.registry import full_domain_preimages as preimages

    return preimages(parameters, math.ceil(parameters.n_users * parameters.messages_per_user))


def check_full_domain(parameters, mode: str) -> None:
    """Refuse, before any message is made, a full-domain estimate whose domain-sized arrays pass
    :data:`FULL_DOMAIN_BYTES_MAX` or whose preimage walk passes :data:`PREIMAGES_MAX`, naming the largest
    --domain that fits and the other ways out (--candidates with --no-full-domain)."""
    domain = parameters.domain_size
    need = full_domain_bytes(parameters, mode)
    if need > FULL_DOMAIN_BYTES_MAX:
        largest = max(2, int(FULL_DOMAIN_BYTES_MAX / (need / domain)))
        raise ParameterError("domain", f"at most about {largest:,} (2^{math.log2(largest):.2f}) to estimate the whole "
                             "domain (--full-domain, the default without --candidates) "
                             f"for {parameters.protocol}: its arrays over [B] would take {need / 2**30:.1f} GiB, above "
                             f"{FULL_DOMAIN_BYTES_MAX / 2**30:g} GiB ({need / domain:.0f} bytes an item); or give "
                             "--candidates with --no-full-domain", domain)
    walked = full_domain_preimages(parameters)
    if walked > PREIMAGES_MAX:
        largest = max(2, int(domain * PREIMAGES_MAX / walked))
        raise ParameterError("domain", f"at most about {largest:,} (2^{math.log2(largest):.2f}) to estimate the whole "
                             "domain (--full-domain, the default without --candidates) "
                             f"for {parameters.protocol} at {parameters.n_users:,} users: its analyzer would walk {walked:.3g} hash "
                             f"preimages, above {PREIMAGES_MAX:.0e} (more than a minute); or give --candidates "
                             "with --no-full-domain, or fewer users", domain)


def fits_full_domain(parameters, mode: str, asked: bool | None, candidates_given: bool) -> bool:
    """Whether the full-domain estimate the default chose fits :func:`check_full_domain`: when it does not and
    candidates are given, the default estimates them instead; asked for (``asked``), or without candidates, the
    check's error stands."""
    try:
        check_full_domain(parameters, mode)
    except ParameterError:
        if asked is not None or not candidates_given:
            raise
        return False
    return True


@checked_arguments
def estimate_frequencies(protocol: str, codes: np.ndarray, encoder: ItemEncoder, *, epsilon: float, delta: float,
                         calibration: str | None = None, options: dict[str, Any] | None = None,
                         candidate_codes: np.ndarray | None = None, top: int = 10, full_domain: bool | None = None,
                         mode: str = "faithful", seed: int | None = None, input_name: str = "",
                         keep_messages: bool = False, progress: Progress | None = None,
                         warnings: Sequence[str] = (), evaluate: bool | None = None):
    """Simulate ``protocol`` over ``codes`` (one per user, from ``encoder``); returns (report, run).

    ``full_domain`` (default: B <= 2^24) estimates every item of [B] and
    measures the error over the whole domain; otherwise ``candidate_codes``
    are required, and the estimates and the error cover them. Only public
    items are reported by name (``encoder.label``: candidates encoded with
    ``public=True``; other text items appear as ``#code``, integers as
    themselves); each estimate shows the true count beside it, since this
    is a simulation. The parameters record the encoder's key (public), so a
    later run given it (``--hash-key``) maps every string to the same code.
    ``seed`` makes the simulation reproducible, and the report's privacy
    block says the run is not private; without it every party draws from
    the secure generator. ``evaluate`` (default: when seeded) adds the
    ``error`` part and each estimate's true count, computed from the input:
    they evaluate the protocol, are not for release, and the privacy block
    says the report is not private; without it nothing data-derived outside
    the protocol's release appears. ``warnings`` (from reading the input)
    join the report's own.
    """
    top = check_integer("top", top, 1)
    if seed is not None:
        seed = check_integer("seed", seed, 0)
    evaluate = seed is not None if evaluate is None else evaluate
    codes = np.asarray(check_sequence("codes", codes, "one item code per user (ItemEncoder.encode)"))
    if options is not None:
        check_instance("options", options, dict, "the protocol's options as a dict (REGISTRY[protocol].options)")
    check_callable("progress", progress, "a function (stage, done, total) or None")
    warnings = list(check_sequence("warnings", warnings, "a list of warning lines"))
    if codes.size < 2:
        raise ParameterError("input", "at least 2 items (one per user)", f"{codes.size} items")
    domain_size = encoder.domain_size
    if candidate_codes is not None:
        candidate_codes = np.unique(candidate_codes)
        if candidate_codes.size == 0:
            raise ParameterError("candidates", "at least 1 item", "an empty list")
    start = time.perf_counter()
    parameters = calibrate(protocol, epsilon=epsilon, delta=delta, n_users=codes.size, domain_size=domain_size,
                           calibration=calibration, item_key=encoder.item_key, **(options or {}))
    calibrate_seconds = time.perf_counter() - start
    asked = full_domain
    full_domain = choose_full_domain(domain_size, full_domain, candidate_codes is not None,
                                     analyzer_checks(protocol, codes.size, domain_size),
                                     full_domain_seconds(parameters), codes.size, protocol,
                                     parameters.no_information())
    check_size(parameters, mode, options)
    check_cost(parameters, mode, options)
    if full_domain:
        full_domain = fits_full_domain(parameters, mode, asked, candidate_codes is not None)
    top = min(top, domain_size if candidate_codes is None else candidate_codes.size)  # no more than are estimated
    run = simulate(parameters, codes, mode=mode, rng=seed, queries=None if full_domain else candidate_codes,
                   keep_messages=keep_messages, progress=progress)
    run.seconds["calibrate"] = calibrate_seconds
    table: FrequencyTable = run.result
    start = time.perf_counter()
    privacy, error, true_counts = run.privacy, None, None
    if evaluate:
        truth = np.bincount(codes, minlength=domain_size) if full_domain else count_among(codes, candidate_codes)
        # the top items are items of the domain, or candidates: their true counts are already in ``truth``
        position = (lambda c: c) if full_domain else (lambda c: np.searchsorted(candidate_codes, c))
        true_counts = lambda top_codes: truth[position(top_codes)]  # noqa: E731
        privacy = privacy.as_evaluation("the true counts of the reported items and the realised error")
    # the release, as analyze's and the services' (among the candidates, if given)
    release = Analysis(parameters, full_domain, candidate_codes).release(table, privacy, encoder=encoder, top=top,
                                                                         truth=true_counts, warnings=warnings)
    if evaluate:  # after the top items' true counts were read: the errors overwrite the counts
        items = getattr(encoder, "unused_slot", None) if full_domain else None  # not the users' unused slots' code
        error = error_summary(table.estimates[:items], truth[:items], "domain" if full_domain else "candidates",
                              overwrite=True)
    run.seconds["report"] = time.perf_counter() - start
    report = EstimateReport(**release, error=error, input=input_name,
                            simulation=Simulation(run.mode, run.randomness, full_domain, run.seconds, run.transcript))
    return report, run


GROUPS_MAX = 16


def estimate_weighted(protocol: str, codes: np.ndarray, epsilons: np.ndarray, encoder: ItemEncoder, *,
                      epsilon: float, delta: float, calibration: str | None = None,
                      options: dict[str, Any] | None = None,
                      top: int = 10, mode: str = "faithful", seed: int | None = None, input_name: str = "",
                      progress: Progress | None = None, warnings: Sequence[str] = (), evaluate: bool | None = None):
    """Weighted aggregation (docs/derivations.md, "Weighted aggregation"): users grouped by their epsilon, each
    group run with its own p, the groups' counts combined by inverse-variance weights; returns (report, runs).

    The report's estimates are the weighted ones; the unweighted baseline sum_g tau_g / p_g is measured beside
    them (``unweighted_error``). Each user has the guarantee of his group; the report's ``privacy`` is the
    weakest group's, with the others listed in ``groups``. ``epsilon`` is the largest a user may ask for: a
    larger one in ``epsilons`` is an error. ``seed`` seeds the simulation (group g's runs from the seed's g-th
    child). ``evaluate`` (default: when seeded), as :func:`estimate_frequencies`: the true counts and the errors
    (weighted and unweighted) beside the estimates, and the report marked not private.
    """
    from ..protocols.registry import listed, names
    from ..protocols.weighted_aggregation import combine_groups

    top = check_integer("top", top, 1)
    evaluate = seed is not None if evaluate is None else evaluate
    codes, epsilons = np.asarray(codes), np.asarray(epsilons, dtype=np.float64)
    if epsilons.shape != codes.shape:
        raise ParameterError("epsilon-column", f"one value per user ({codes.size})", f"{epsilons.size} values")
    levels = np.unique(epsilons)
    if levels.size and levels[-1] > epsilon:
        raise ParameterError("epsilon-column", f"at most --epsilon = {epsilon:g} (the largest epsilon a user may ask "
                             "for)", float(levels[-1]))
    if levels.size > GROUPS_MAX:
        raise ParameterError("epsilon-column", f"at most {GROUPS_MAX} distinct epsilons (privacy groups)",
                             f"{levels.size} distinct values")
    domain = encoder.domain_size
    runs, groups = [], []
    seeds = [None] * levels.size if seed is None else np.random.SeedSequence(seed).spawn(levels.size)
    for eps, group_seed in zip(levels, seeds):
        members = codes[epsilons == eps]
        if members.size < 2:
            raise ParameterError("epsilon-column", "each epsilon held by at least 2 users (a group of one would "
                                 "be calibrated and released alone)", f"epsilon {eps:g} held by 1 user")
        try:
            params = calibrate(protocol, epsilon=float(eps), delta=delta, n_users=members.size, domain_size=domain,
                               calibration=calibration, item_key=encoder.item_key, **(options or {}))
            if not hasattr(params, "effective_probability"):  # the sampling protocols' (SamplingParameters)
                weighted = names(lambda e: hasattr(e.parameters, "effective_probability"))
                raise ParameterError("epsilon-column", f"given for a sampling protocol ({listed(weighted)})", protocol)
            runs.append(simulate(params, members, mode=mode, rng=group_seed, progress=progress))
        except ParameterError as err:  # say which group
            raise ParameterError(err.field, f"{err.accepted} (in the group of the {members.size} users with "
                                 f"epsilon {eps:g})", err.got) from None
        groups.append(params)
    combined = combine_groups(groups, [r.result.estimates * p.effective_probability for r, p in zip(runs, groups)])
    truth = np.bincount(codes, minlength=domain) if evaluate else None
    labels, values = top_k(None, combined.estimates, top)
    stderr = np.sqrt(combined.error_variance[labels])
    estimates = [Estimate(encoder.label(c), float(v), float(e), None, None if truth is None else int(truth[c]),
                          float(combined.unweighted[c]), float(combined.unweighted_stderr[c]))
                 for c, v, e in zip(labels.tolist(), values.tolist(), stderr.tolist())]
    weakest = int(np.argmax(levels))
    privacy = runs[weakest].privacy
    privacy = privacy.with_caveat(
        f"weighted aggregation over {levels.size} groups: each user has his group's guarantee, epsilon in "
        f"{', '.join(f'{e:g}' for e in levels)} (this is the weakest), and each group's data condition is of its "
        f"own users: every category held by at least beta n_g of the n_g users of group g; each user's epsilon, so "
        f"his group and the groups' sizes, is public as n is (neighbours differ in one user's item, not his epsilon)")
    disagree, weighting = _weighting_warnings(combined, encoder)
    first = runs[weakest]
    randomness = first.randomness if seed is None else (  # the groups' runs are seeded by the seed's children
        f"seeded simulation (PCG64, seed {seed}, each group from a child of it); not for real users")
    privacy = dataclasses.replace(privacy, randomness=randomness)
    if evaluate:
        privacy = privacy.as_evaluation("the true counts of the reported items and the realised errors")
    report = EstimateReport(
        protocol=protocol, parameters=report_parameters(groups[weakest]), privacy=privacy, n_users=int(codes.size),
        messages=Messages(sum(r.messages_total for r in runs), sum(r.messages_total for r in runs) / codes.size,
                          sum(r.malformed for r in runs)),
        bits_per_message=groups[weakest].bits_per_message,
        expected_error=_weighted_expected_error(groups, combined, domain, sum(r.messages_total for r in runs)),
        estimates=estimates, privacy_profile=privacy_profile(groups[weakest]),
        warnings=[*warnings, *weighting, *privacy_warnings(float(levels.max()), delta, int(codes.size)),
                  *(w for p in groups for w in p.warnings())],
        error=None if truth is None else error_summary(combined.estimates, truth, "domain"),
        simulation=Simulation(first.mode, randomness, True, {k: sum(r.seconds.get(k, 0.0) for r in runs)
                                                                     for k in first.seconds},
                              {f"group {g}: {k}": v for g, r in enumerate(runs) for k, v in r.transcript.items()}),
        input=input_name,
        groups=[Group(float(e), p.n_users, p.sampling_probability, float(w), r.privacy.summary())
                for e, p, w, r in zip(levels, groups, combined.weights, runs)],
        unweighted_error=None if truth is None else error_summary(combined.unweighted, truth, "domain"),
        groups_disagree=disagree)
    return report, runs


# The groups' released counts contradict one shared distribution when some category's weighted and unweighted
# estimates differ by more than this many of their sd under it (Bonferroni over the N categories): a false alarm
# has probability about DISAGREEMENT_LEVEL when the groups do share one distribution.
DISAGREEMENT_LEVEL = 0.01


def _weighting_warnings(combined, encoder: ItemEncoder) -> tuple[bool, list[str]]:
    """(whether the release contradicts the weighted estimates' assumption, the warnings saying what they assume
    and, where the release contradicts it, where): computed from the released counts only, so the report stays
    the protocol's release (docs/derivations.md, "Weighted aggregation")."""
    from statistics import NormalDist

    z = np.abs(combined.disagreement)
    limit = NormalDist().inv_cdf(1 - DISAGREEMENT_LEVEL / (2 * z.size))
    assumed = ("weighted aggregation: the estimates weight the groups' frequencies by inverse variance, which is "
               "unbiased only where every group holds the categories in the same proportions (no party can check "
               "it); the unweighted estimates beside them (sum of tau_g / p_g) are unbiased whatever the groups, "
               "with larger standard errors")
    worst = int(np.argmax(z))
    if z[worst] <= limit:
        return False, [assumed]
    return True, [assumed, f"the groups' released counts contradict one shared distribution: {encoder.label(worst)}'s "
                           f"weighted estimate {combined.estimates[worst]:.1f} and unweighted "
                           f"{combined.unweighted[worst]:.1f} differ by {z[worst]:.1f} standard deviations (more "
                           f"than {limit:.2f}: by chance with probability {DISAGREEMENT_LEVEL:g} over the {z.size} "
                           "categories), so the weighted estimates are biased: use the unweighted ones"]


def estimate_vector_sum(protocol: str, inputs: np.ndarray, *, epsilon: float, delta: float,
                        calibration: str | None = None, options: dict[str, Any] | None = None,
                        dimension: int | None = None, candidates: np.ndarray | None = None,
                        names: Sequence[str] | None = None, mode: str = "faithful", seed: int | None = None,
                        input_name: str = "", progress: Progress | None = None, warnings: Sequence[str] = (),
                        keep_messages: bool = False, discover_phi: float | None = None,
                        evaluate: bool | None = None):
    """Simulate a vector-sum protocol; returns (report, run).

    ``inputs``: one row a user, a vector in [0, 1]^d (blanket-vector: d is the row length), or a
    (coordinate, weight) pair (the sparse protocols: ``dimension`` B is public and given). ``candidates``:
    the coordinates to estimate (the others are estimated as 0); ``names``: the coordinates' public names.
    ``discover_phi`` (a protocol with a discovery stage, registry.DiscoveryStage: sparse-vector-hashed; no
    candidates): the paper's two stages, fe-hh over the users' rounded cells finds the coordinates whose sums
    reach phi n, then FE1 estimates them, each stage at (eps/2, delta/2) (basic composition; :func:`_discover`).
    As :func:`estimate_frequencies`: calibrated for the data's n, seeded runs marked not private, and with
    ``evaluate`` (default: when seeded) the error against the true sums beside the estimates, the report then
    an evaluation, not a release.
    """
    from ..protocols import registry
    from ..protocols.parameters import float_rows
    from ..reports import VectorError, VectorEstimateReport

    inputs = float_rows(inputs)
    if inputs.ndim != 2 or len(inputs) < 2:
        raise ParameterError("input", "at least 2 users, one row a user", f"shape {inputs.shape}")
    if seed is not None:
        seed = check_integer("seed", seed, 0)
    evaluate = seed is not None if evaluate is None else evaluate
    n, d = len(inputs), inputs.shape[1] if dimension is None else dimension
    if discover_phi is not None and candidates is not None:
        staged = registry.listed(registry.names(lambda e: e.discovery is not None))
        raise ParameterError("discover-phi", f"given for {staged} without --candidates (the discovered coordinates "
                             "are the candidates)", discover_phi)
    stage = 2 if discover_phi is not None else 1  # the budget each stage gets: (eps/2, delta/2) when two
    start = time.perf_counter()
    parameters = calibrate(protocol, epsilon=epsilon / stage, delta=delta / stage, n_users=n, domain_size=d,
                           calibration=calibration, **(options or {}))
    # the first stage's parameters (its checks, its errors named for --discover-phi), before any work
    stage = None if discover_phi is None else discovery_parameters(parameters, discover_phi)
    calibrate_seconds = time.perf_counter() - start
    check_size(parameters, mode, options)
    check_cost(parameters, mode, options)
    if stage is None:
        check_coordinates(parameters, candidates)
    first = None
    if stage is not None:
        first = _discover(parameters, stage, inputs, seed, progress)
        candidates = get(protocol).discovery.candidates(parameters, first.result.items.tolist())
    # no coordinate discovered: the second stage's users still report, as a deployment's would, and its release is
    # empty (run here over coordinate 0, whose estimate is dropped unseen); a private outcome, not a fact about the data
    nothing = first is not None and not candidates.size
    dense = not getattr(parameters, "one_sparse", False)  # vectors of [0, 1]^d, not (coordinate, weight) rows
    with ThreadPoolExecutor(1) as pool:
        truth_soon = None
        if evaluate and dense:
            # the true sums on a second thread while the protocol runs: einsum, which makes no temporaries and
            # releases the GIL (the size and cost checks above come first: a refused run waits for no pass over its
            # input)
            truth_soon = pool.submit(parameters.true_total, inputs)
        queries = np.zeros(1, np.int64) if nothing else candidates
        run = simulate(parameters, inputs, mode=mode, rng=seed, queries=queries, progress=progress,
                       keep_messages=keep_messages)
        run.seconds["calibrate"] = calibrate_seconds
        result = run.result
        if nothing:
            result = dataclasses.replace(result, total=result.total[:0], standard_errors=result.standard_errors[:0],
                                         coordinates=candidates)
    if first is not None:
        run.seconds["discover"] = first.seconds
    privacy, truth, error = run.privacy, None, None
    if evaluate:
        truth = truth_soon.result() if truth_soon else parameters.true_total(inputs, result.coordinates)
        errors = result.total - truth
        squared, largest = float(np.sum(errors**2)), float(np.abs(errors).max(initial=0.0))
        if result.coordinates is not None:  # the others are estimated as 0: their error is their true sum
            missed = parameters.true_total_outside(inputs, result.coordinates)
            squared += float(np.sum(missed**2))
            largest = max(largest, float(missed.max(initial=0.0)))
        error = VectorError(largest, squared, squared / d / n**2 if dense else None,
                            squared / (n / d) ** 2 if dense else None)
        privacy = privacy.as_evaluation("the true sums of the coordinates and the realised error")
    nothing_found = [f"the discovery stage ({get(protocol).discovery.protocol} at phi = {discover_phi:g}) reported "
                     "no coordinate, so none is estimated (each sum is estimated as 0): a private outcome, not a "
                     "statement that no sum reaches phi n (one near it may go either way); a lower --discover-phi, "
                     "or --candidates, looks for smaller sums"] if nothing else []
    release = Analysis(parameters, candidates is None, candidates).release(
        result, privacy, truth=truth, names=names, warnings=warnings, first=None if first is None else first.stage)
    release["warnings"] += nothing_found
    report = VectorEstimateReport(**release, error=error, input=input_name,
                                  simulation=Simulation(run.mode, run.randomness, True, run.seconds, run.transcript))
    return report, run


# A vector sum's report lists every coordinate it estimated, each an object of the report and of its JSON: about
# 5e-5 s apiece (3 users on 2 cores at load average 4 to 5: sparse-vector-hashed's 2^19 coordinates took 28 s to
# estimate and 2^18 18 s to analyze, the report's objects, their walks and the JSON nearly all of it; the cells'
# preimages 1.5 s)
COORDINATE_SECONDS = 5e-5


def check_coordinates(parameters, candidates: np.ndarray | None = None, simulated: bool = True) -> None:
    """Refuse, before any message, a vector sum whose coordinates would take longer than a run of n users may
    (registry.run_budget), whatever n: the report lists every coordinate estimated (the ``candidates`` number, else
    all d), and sparse-vector-hashed without candidates enumerates the preimages of every cell (3 users over 2^19
    coordinates took 28 s, over 2^20 47 s, and as long to analyze their written messages). The error names what
    shrinks it: fewer candidates, or candidates, and for a ``simulated`` run (estimate) --discover-phi and the
    dimension that fits."""
    from ..protocols.registry import run_budget

    count = parameters.dimension if candidates is None else np.unique(candidates).size
    seconds = count * COORDINATE_SECONDS + (full_domain_seconds(parameters) if candidates is None else 0.0)
    budget = run_budget(parameters.n_users)
    if seconds <= budget:
        return
    largest = max(1, int(count * budget / seconds))
    why = (f"{parameters.protocol}'s estimate of {count:,} coordinates would take about {seconds:.2g} s whatever the "
           f"number of users, past the {budget:.2g} s a run of {parameters.n_users:,} users may take by default")
    if candidates is not None:
        raise ParameterError("candidates", f"at most about {largest:,} coordinates: {why}", f"{count:,}")
    if getattr(parameters, "one_sparse", False):
        others = ((", or --discover-phi" if get(parameters.protocol).discovery is not None else "")
                  + f", or a --dimension of at most about {largest:,}") if simulated else ""
        raise ParameterError("candidates", f"given (a file of public coordinates){others}: {why}", None)
    raise ParameterError("dimension", f"at most about {largest:,} coordinates (columns) at {parameters.n_users:,} "
                         f"users, or more users: {why}", count)


@dataclasses.dataclass
class _Discovered:
    """The discovery stage of a simulated staged run: what it released (its result, guarantee and messages) and
    the seconds it took."""

    stage: FirstStage
    seconds: float

    @property
    def result(self):
        return self.stage.result


def _discover(parameters, stage, inputs: np.ndarray, seed: int | None, progress: Progress | None) -> _Discovered:
    """The first stage of a staged run of ``parameters`` (their entry's registry.DiscoveryStage: fe-hh over the
    users' rounded cells for sparse-vector-hashed), at ``stage``'s (registry.discovery_parameters: their (eps,
    delta)): each user's item of the stage is drawn with his own coins (``DiscoveryStage.items``), and the stage
    simulated as ``privagg estimate`` would, its release kept for the staged report."""
    from ..core.randomness import resolve
    from .heavy_hitters import estimate_heavy_hitters

    start = time.perf_counter()
    rng = resolve(None if seed is None else np.random.SeedSequence([seed, 1]))
    items = get(parameters.protocol).discovery.items(parameters, inputs, rng)
    try:
        report, result = estimate_heavy_hitters(items, epsilon=stage.epsilon, delta=stage.delta, phi=stage.phi,
                                                domain_size=stage.domain_size, calibration=stage.calibration,
                                                seed=None if seed is None else seed + 1, progress=progress,
                                                evaluate=False)
    except ParameterError as err:  # the stage's phi is this command's --discover-phi
        if err.field != "phi":
            raise
        raise ParameterError("discover-phi", err.accepted.replace("--phi", "--discover-phi").replace(
            "a smaller --domain", "a smaller --dimension"), err.got) from None
    return _Discovered(FirstStage(result.parameters, result, report.privacy, report.messages),
                       time.perf_counter() - start)


def _weighted_expected_error(groups, combined, domain_size: int, messages: int):
    """The weighted estimate's theory: its largest standard error over the categories (against the population's
    count: with the groups' chance differences, ``error_variance``), and a Bernstein bound
    with the union over them (each holder in group g moves the estimate by c_g = n w_g / (p_g n_g) with
    probability p_g), at the estimated counts (the release's, as a deployment has them)."""
    from ..reports import ExpectedError

    n = sum(g.n_users for g in groups)
    worst = int(np.argmax(combined.error_variance))
    p = np.array([g.effective_probability for g in groups])
    step = float(np.max(n * combined.weights / (p * np.array([g.n_users for g in groups]))))
    log_term = math.log(2 * domain_size / MAX_ERROR_BETA)
    variance = float(combined.error_variance[worst])
    bound = step * log_term / 3 + math.sqrt((step * log_term / 3) ** 2 + 2 * variance * log_term)
    return ExpectedError(messages / n, groups[0].bits_per_message, math.sqrt(variance), bound, MAX_ERROR_BETA,
                         f"the worst category, {worst} (the largest)")


def available_memory() -> int | None:
    """Bytes the kernel says a new process can use (Linux's MemAvailable); None where unknown."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def check_resources(protocol: str, path, fmt, *, epsilon: float, delta: float, domain_size: int,
                    calibration: str, options: dict[str, Any], mode: str, full_domain: bool | None,
                    candidates: bool, n_users: int | None = None) -> None:
    """Refuse, before reading the input, a simulation that cannot run: too many messages or too little memory.

    n is estimated from the file (:func:`privagg.io.estimated_rows`) and the
    protocol calibrated for it, so parameter errors also surface at once; or
    ``n_users`` where it is known (the reports of users grouped from many rows).
    The error names the option that shrinks the run.
    """
    from ..io import estimated_rows

    n_users = max(2, estimated_rows(path, fmt) if n_users is None else n_users)
    parameters = calibrate(protocol, epsilon=epsilon, delta=delta, n_users=n_users, domain_size=domain_size,
                           calibration=calibration, **options)
    check_size(parameters, mode, options)
    # the default's time budget waits for the true n (estimate_frequencies): the estimated rows only bound sizes
    asked = full_domain
    full_domain = choose_full_domain(domain_size, full_domain, candidates, analyzer_checks(protocol, n_users, domain_size))
    if full_domain:
        full_domain = fits_full_domain(parameters, mode, asked, candidates)
    need = peak_bytes(parameters, mode, full_domain)
    available = available_memory()
    if available is not None and need > available:
        field, remedy = shrink_hint(parameters, mode, options)
        raise ParameterError(field, f"set so that the run fits in memory: about {n_users:.3g} users in {path} "
                             f"need about {need / 2**30:.1f} GiB, {available / 2**30:.1f} GiB are available; "
                             f"{remedy}", option_value(parameters, field, options))


# The interpreter with numpy, numba and pyarrow loaded (about 200 MB resident) and the reader's blocks in flight:
# with it, peak_bytes is 7% and 4% under the peak RSS GNU time measured at n = 10^7 and 5 x 10^7 (docs/benchmarks.md).
BASE_BYTES = 256 << 20


def peak_bytes(parameters, mode: str, full_domain: bool) -> int:
    """About the peak memory of ``privagg estimate`` for ``parameters``: the users' codes (8 bytes each), the
    simulation (:func:`privagg.simulate.runner.simulation_bytes`) and, over the full domain, the true counts
    and the error's scratch array (8 bytes per item each)."""
    domain_arrays = 2 * 8 * parameters.domain_size if full_domain else 0
    return BASE_BYTES + 8 * parameters.n_users + simulation_bytes(parameters, mode, full_domain) + domain_arrays
