"""Private frequency estimation over a list of items, with its full report.

:func:`estimate_frequencies` is what ``privagg estimate`` runs: encode the
items into [B], calibrate the protocol, simulate it, and report the top
items with standard errors, the privacy description, the cost, and -- since
the true counts are known in a simulation -- the realised error.
"""

from __future__ import annotations

import hashlib
import math
import time
from typing import Any

import numpy as np

from ..core.encoding import ItemEncoder
from ..errors import ParameterError, check_integer
from ..protocols.registry import calibrate
from ..protocols.results import FrequencyTable, count_among
from ..reports import (EstimateReport, Messages, RealisedError, Simulation, expected_error, privacy_profile,
                       report_parameters, reported_estimates)
from .runner import Progress, simulate

FULL_DOMAIN_DEFAULT_MAX = 2**24  # --full-domain is the default up to this domain size
FULL_DOMAIN_MAX = 2**28


def item_key(seed: int | None) -> bytes | None:
    """The item-hash key: random without a seed; derived from the seed for a reproducible simulation."""
    return None if seed is None else hashlib.blake2b(f"privagg-item-key-{seed}".encode(), digest_size=32).digest()


def error_summary(estimates: np.ndarray, truth: np.ndarray, over: str) -> RealisedError:
    """Statistics of |estimate - truth|, computed in one scratch array (full domains are large)."""
    abs_err = np.subtract(estimates, truth, dtype=np.float64)
    np.abs(abs_err, out=abs_err)
    largest, mean = float(abs_err.max()), float(abs_err.mean())
    p50, p90, p99 = np.percentile(abs_err, [50, 90, 99], overwrite_input=True)
    return RealisedError(over, int(abs_err.size), largest, mean, float(p50), float(p90), float(p99))


def choose_full_domain(domain_size: int, full_domain: bool | None, candidates_given: bool) -> bool:
    """Whether to estimate all of [B]: the default up to 2^24; refused above 2^28; otherwise candidates."""
    if full_domain is None:
        full_domain = domain_size <= FULL_DOMAIN_DEFAULT_MAX
    if full_domain and domain_size > FULL_DOMAIN_MAX:
        raise ParameterError("domain", f"at most 2^{int(math.log2(FULL_DOMAIN_MAX))} with --full-domain "
                             "(give --candidates)", domain_size)
    if not full_domain and not candidates_given:
        raise ParameterError("candidates", "given without --full-domain (the analyzer cannot list all of [B]; "
                             "heavy-hitter detection comes in a later release)", None)
    return full_domain


def estimate_frequencies(protocol: str, items, *, epsilon: float, delta: float, domain_size: int,
                         calibration: str = "numeric", options: dict[str, Any] | None = None,
                         candidates=None, top: int = 10, full_domain: bool | None = None,
                         mode: str = "faithful", seed: int | None = None, input_name: str = "",
                         keep_messages: bool = False, progress: Progress | None = None):
    """Simulate ``protocol`` over ``items`` (one per user); returns (report, run, encoder).

    ``full_domain`` (default: B <= 2^24) estimates every item of [B] and
    measures the error over the whole domain; otherwise ``candidates`` are
    required, and the estimates and the error cover them. ``candidates`` are
    public: they are the only items reported by name (other text items are
    reported as ``#code``, integers as themselves). ``seed`` makes the
    simulation and the item-hash key reproducible, and the report's privacy
    block says the run is not private; without it every party draws from
    the secure generator. The ``error`` part uses the true counts: it is for
    evaluating the protocol, not for release.
    """
    top = check_integer("top", top, 1)
    if seed is not None:
        seed = check_integer("seed", seed, 0)
    encoder = ItemEncoder(domain_size, item_key(seed))
    start = time.perf_counter()
    codes = encoder.encode(items)
    encode_seconds = time.perf_counter() - start
    if codes.size < 2:
        raise ParameterError("input", "at least 2 items (one per user)", f"{codes.size} items")
    full_domain = choose_full_domain(domain_size, full_domain, candidates is not None)
    candidate_codes = None
    if candidates is not None:
        candidate_codes = np.unique(encoder.encode(candidates, field="candidate", public=True))
        if candidate_codes.size == 0:
            raise ParameterError("candidates", "at least 1 item", "an empty list")
    start = time.perf_counter()
    parameters = calibrate(protocol, epsilon=epsilon, delta=delta, n_users=codes.size, domain_size=domain_size,
                           calibration=calibration, **(options or {}))
    calibrate_seconds = time.perf_counter() - start
    run = simulate(parameters, codes, mode=mode, rng=seed, queries=None if full_domain else candidate_codes,
                   keep_messages=keep_messages, progress=progress)
    run.seconds.update(encode=encode_seconds, calibrate=calibrate_seconds)
    table: FrequencyTable = run.result
    start = time.perf_counter()
    truth = np.bincount(codes, minlength=domain_size) if full_domain else count_among(codes, candidate_codes)
    error = error_summary(table.estimates, truth, "domain" if full_domain else "candidates")
    if full_domain and candidate_codes is not None:  # report the top among the public candidates
        table = table.restricted_to(candidate_codes)
    estimates = reported_estimates(table, encoder, top)
    run.seconds["report"] = time.perf_counter() - start
    report = EstimateReport(
        protocol=protocol, parameters=report_parameters(parameters), privacy=run.privacy, n_users=parameters.n_users,
        messages=Messages(run.messages_total, run.messages_per_user, run.malformed),
        bits_per_message=parameters.bits_per_message, expected_error=expected_error(parameters),
        estimates=estimates, privacy_profile=privacy_profile(parameters), error=error,
        simulation=Simulation(run.mode, run.randomness, full_domain, run.seconds, run.transcript),
        input=input_name)
    return report, run, encoder
