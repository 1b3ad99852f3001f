"""Private frequency estimation over a list of items, with its full report.

:func:`estimate_frequencies` is what ``privagg estimate`` runs: encode the
items into [B], simulate the protocol over them, and report the top items
with standard errors, the privacy guarantee, the cost, and -- since the true
counts are known in a simulation -- the realised error.
"""

from __future__ import annotations

import hashlib
import math
import time
from typing import Any

import numpy as np

from ..core.encoding import ItemEncoder
from ..errors import ParameterError, check_integer
from ..protocols import PROTOCOLS
from ..protocols.balls_into_bins import top_k
from .runner import Progress, simulate

FULL_DOMAIN_DEFAULT_MAX = 2**24  # --full-domain is the default up to this domain size
FULL_DOMAIN_MAX = 2**28
BETA = 0.05  # failure probability of the reported max-error bound


def build_protocol(name: str, *, epsilon: float, delta: float, n_users: int, domain_size: int,
                   bins: int | None = None, c: float | None = None, calibration: str = "numeric"):
    """The protocol ``name`` with its parameters derived from (epsilon, delta, n, B, b or c)."""
    if name not in PROTOCOLS:
        raise ParameterError("protocol", f"one of {', '.join(PROTOCOLS)}", name)
    options = {"bins": bins, "c": c} if name == "fe1" else {}
    if name != "fe1" and (bins is not None or c is not None):
        raise ParameterError("bins/c", "given only for fe1", bins if bins is not None else c)
    return PROTOCOLS[name](epsilon, delta, n_users, domain_size, calibration=calibration, **options)


def theory(protocol) -> dict[str, Any]:
    """A protocol's costs and expected error, as in ``privagg calibrate``."""
    return {
        "messages_per_user": protocol.messages_per_user,
        "bits_per_message": protocol.bits_per_message,
        "standard_error": float(protocol.standard_error(0)),
        "max_error_bound": protocol.max_error_bound(BETA),
        "max_error_beta": BETA,
    }


def error_summary(errors: np.ndarray, over: str) -> dict[str, Any]:
    abs_err = np.abs(errors)
    p50, p90, p99 = np.percentile(abs_err, [50, 90, 99])
    return {"over": over, "items": int(abs_err.size), "max_abs": float(abs_err.max()),
            "mean_abs": float(abs_err.mean()), "p50": float(p50), "p90": float(p90), "p99": float(p99)}


def estimate_frequencies(protocol_name: str, items, *, epsilon: float, delta: float, domain_size: int,
                         bins: int | None = None, c: float | None = None, calibration: str = "numeric",
                         candidates=None, top: int = 10, full_domain: bool | None = None,
                         mode: str = "faithful", seed: int | None = None,
                         progress: Progress | None = None) -> dict[str, Any]:
    """Simulate ``protocol_name`` over ``items`` (one per user) and report (README, "JSON output").

    ``full_domain`` (default: B <= 2^24) estimates every item of [B] and
    measures the error over the whole domain; otherwise ``candidates`` are
    required, and the estimates and the error cover them. ``candidates`` are
    public: they are the only items reported by name (other text items are
    reported as ``#code``, integers as themselves). ``seed`` makes the
    simulation and the item-hash key reproducible; without it both come from
    the secure generator. The ``error`` part uses the true counts: it is for
    evaluating the protocol, not for release.
    """
    top = check_integer("top", top, 1)
    if seed is not None:
        seed = check_integer("seed", seed, 0)
    key = None if seed is None else hashlib.blake2b(f"privagg-item-key-{seed}".encode(), digest_size=32).digest()
    encoder = ItemEncoder(domain_size, key)
    start = time.perf_counter()
    codes = encoder.encode(items)
    encode_seconds = time.perf_counter() - start
    if codes.size < 2:
        raise ParameterError("input", "at least 2 items (one per user)", f"{codes.size} items")
    if full_domain is None:
        full_domain = domain_size <= FULL_DOMAIN_DEFAULT_MAX
    if full_domain and domain_size > FULL_DOMAIN_MAX:
        raise ParameterError("domain", f"at most 2^{int(math.log2(FULL_DOMAIN_MAX))} with --full-domain", domain_size)
    if not full_domain and candidates is None:
        raise ParameterError("candidates", "given without --full-domain (the analyzer cannot list all of [B]; "
                             "heavy-hitter detection comes in a later release)", None)
    protocol = build_protocol(protocol_name, epsilon=epsilon, delta=delta, n_users=codes.size,
                              domain_size=domain_size, bins=bins, c=c, calibration=calibration)
    run = simulate(protocol, codes, mode=mode, rng=seed, progress=progress)
    run.seconds["encode"] = encode_seconds
    start = time.perf_counter()

    candidate_codes = None
    if candidates is not None:
        candidate_codes = np.unique(encoder.encode(candidates, field="candidate", public=True))
        if candidate_codes.size == 0:
            raise ParameterError("candidates", "at least 1 item", "an empty list")
    if full_domain:
        advance = None if progress is None else (lambda k: progress("analyze", k, run.messages_total))
        estimates_all = run.oracle.estimate_all(advance)
        error = error_summary(estimates_all - np.bincount(codes, minlength=domain_size), "domain")
        pool = np.arange(domain_size) if candidate_codes is None else candidate_codes
        pool_estimates = estimates_all[pool]
    else:
        pool, over = candidate_codes, "candidates"
        slot = np.searchsorted(pool, codes).clip(max=pool.size - 1)  # pool is sorted
        truth = np.bincount(slot[pool[slot] == codes], minlength=pool.size)
        advance = None if progress is None else (lambda k: progress("estimate", k, pool.size))
        pool_estimates = run.oracle.estimate(pool, advance)
        error = error_summary(pool_estimates - truth, over)
    run.seconds["estimate"] = time.perf_counter() - start
    top_codes, top_estimates = top_k(pool, pool_estimates, top)
    stderr = np.broadcast_to(protocol.standard_error(top_estimates), top_estimates.shape)
    reported = [
        {"item": encoder.label(code), "estimate": float(est), "stderr": float(se),
         **({"hash_collision": True} if encoder.is_collision(code) else {})}
        for code, est, se in zip(top_codes.tolist(), top_estimates, stderr)
    ]
    return {
        "protocol": protocol.name,
        "parameters": protocol.parameters(),
        "privacy": protocol.guarantee.to_dict(),
        "n_users": protocol.n_users,
        "messages": {"total": run.messages_total, "per_user": run.messages_per_user},
        "bits_per_message": protocol.bits_per_message,
        "expected_error": theory(protocol),
        "estimates": reported,
        "error": error,
        "simulation": {"mode": run.mode, "randomness": run.randomness, "full_domain": full_domain,
                       "seconds": run.seconds},
    }
