"""Heavy-hitter discovery over users' items, with its full report (what ``privagg estimate fe-hh`` runs).

Calibrate fe-hh for the data's n, play the clients (in batches of users), the shuffler and the analyzer,
and report the discovered items with their estimates and standard errors, the privacy description, the
cost, and -- since the data is known in a simulation -- each item's true count and the recall and
precision of the reported set when asked to evaluate (``evaluate``: then the report is not private).
"""

from __future__ import annotations

import math
import os
import time
from collections import Counter
from collections.abc import Sequence

import numpy as np

from ..core.messages import MessageBatch, shuffle
from ..core.randomness import describe, streams
from ..errors import ParameterError, check_integer
from ..pipelines import Analysis
from ..protocols.registry import get
from ..reports import HeavyHitterEvaluation, HeavyHitterReport, Simulation
from .progress import Progress

USERS_PER_BATCH = 1 << 20  # users one client call randomizes: bounds the clients' scratch
# Bytes a level's walk takes per child it may count, besides the int64 counter per thread and child that the
# analyzer's count_progressions keeps (walk_bytes adds those): each child's parent and place (int64), code and
# estimate (float64) and value (a Python int and its list slot, about 40 bytes); at most survivor_cap = 4 / phi
# parents of 2^step children each. Held to 2 GiB, as a full-domain estimate (FULL_DOMAIN_BYTES_MAX); phi = 1e-6
# over strings asked 15.3 GiB at once.
CHILD_BYTES = 72
# The walk's (message, followed prefix, child) steps: messages of levels past the first times the prefixes one
# follows, bounded by min(4 / phi, 2 / phi + the first level's expected false prefixes) (at most 2 / phi prefixes
# hold phi n / 2 users), times 2^step children. On the bundled words phi = 0.003 bounds 5.5e11 and took 25 s (its
# levels followed about 60 prefixes, not 667), 2 cores; phi = 0.001 (bound 2.6e12) ran past 150 s. The bound is
# held here, about 7 minutes at WALK_STEP_SECONDS on 2 cores.
WALK_STEPS_MAX = 10**12
# The walk's pace: a (message, prefix, child) step of hash_kernels.count_progressions takes about 0.8 ns of one
# core's time: 0.79-0.80 ns on a quiet host at 3e4 to 10^6 messages and 20 to 300 prefixes of 256 children, where
# the kernel before its vectorized rewrite took 1.7-2.1 ns (Intel Xeon, 2 cores; docs/benchmarks.md part 9), numba's
# threads one per core.
WALK_STEP_SECONDS = 0.8e-9
# The most the walk's sure steps (walk_steps(noise_only=True): those whatever the data) may take at that pace.
WALK_SECONDS_MAX = 300.0


def walk_bytes(parameters) -> int:
    """The most memory one level of the analyzer's tree walk may take (:data:`CHILD_BYTES`, and a counter per
    thread: numba's threads are one per core)."""
    return parameters.survivor_cap * (1 << parameters.step) * (CHILD_BYTES + 8 * (os.cpu_count() or 1))


def walk_steps(parameters, noise_only: bool = False) -> float:
    """About the most (message, prefix, child) steps the analyzer's walk takes past the first level
    (:data:`WALK_STEPS_MAX`); ``noise_only``: the steps the prefixes held by no one make, whatever the data.

    Those are expected: each empty prefix passes phi n / 2 with probability p_0 (``false_first_level`` / 2^s at
    the first level), so a level whose parents are F_k follows F_{k+1} = min(survivor_cap, 2^step p_0 F_k) empty
    children, from F_0 = min(survivor_cap, false_first_level): once 2^step p_0 >= 1 the noise alone fills the cap
    at every level (fe-hh over n L reports at phi / L: 744 false prefixes at the first level of 2^16 at 100,000
    users, L = 3, phi 0.01, 8-byte strings). p_0 is the normal approximation's, low in its far tail: the runs
    kept 1.4 to 4 times F_k where it was below the cap (docs/derivations.md, "Heavy hitters")."""
    p = parameters
    if p.levels < 2:
        return 0.0
    level_messages = p.n_users * p.messages_per_user / p.levels
    false = p.detection()["false_first_level"]
    if not noise_only:
        return level_messages * (p.levels - 1) * min(p.survivor_cap, 2 / p.phi + false) * (1 << p.step)
    growth, followed, total = (1 << p.step) * false / 2.0 ** p.first_level, min(p.survivor_cap, false), 0.0
    for _ in range(p.levels - 1):
        total += followed
        followed = min(p.survivor_cap, growth * followed)
    return level_messages * total * (1 << p.step)


def walk_seconds(steps: float) -> float:
    """The seconds ``steps`` walk steps take at :data:`WALK_STEP_SECONDS` on this machine's cores."""
    return steps * WALK_STEP_SECONDS / (os.cpu_count() or 1)


def check_walk(parameters, max_items: int = 1) -> None:
    """Refuse, before any message is made, a tree walk whose memory or steps cannot fit, naming a --phi that
    fits and the other ways out (a shorter --max-length, or a smaller --domain: fewer levels; a smaller
    --max-items), with the walk's time at its measured pace (:data:`WALK_STEP_SECONDS`). Refused: a level above
    FULL_DOMAIN_BYTES_MAX, a bound above :data:`WALK_STEPS_MAX`, or sure steps (the noise's) above
    :data:`WALK_SECONDS_MAX`. ``max_items``: L, the parameters being those of the n L reports at phi / L."""
    from ..protocols.registry import FULL_DOMAIN_BYTES_MAX

    p = parameters
    need, steps, sure = walk_bytes(p), walk_steps(p), walk_steps(p, noise_only=True)
    if need <= FULL_DOMAIN_BYTES_MAX and steps <= WALK_STEPS_MAX and walk_seconds(sure) <= WALK_SECONDS_MAX:
        return
    # memory falls as 1 / phi, steps at least as fast (messages fall too): these phi fit
    fits = max_items * max(p.phi * need / FULL_DOMAIN_BYTES_MAX, p.phi * steps / WALK_STEPS_MAX,
                           p.phi * walk_seconds(sure) / WALK_SECONDS_MAX)
    shorter = "a shorter --max-length" if p.max_length is not None else "a smaller --domain"
    fewer = f", or a smaller --max-items ({max_items} now)" if max_items > 1 else ""
    pace = f"at about {1 / WALK_STEP_SECONDS:.2g} steps a second on each of {os.cpu_count() or 1} cores"
    reports = f"{p.n_users:,} users'" if max_items == 1 else f"{p.n_users:,} reports' ({max_items} a user)"
    if need > FULL_DOMAIN_BYTES_MAX:
        why = (f"a level follows up to 4 / phi prefixes of {1 << p.step} children: {need / 2**30:.1f} GiB, above "
               f"{FULL_DOMAIN_BYTES_MAX / 2**30:g} GiB")
    elif steps > WALK_STEPS_MAX:
        why = (f"the analyzer's walk over {reports} messages could take up to {steps:.2g} steps, above "
               f"{WALK_STEPS_MAX:.0e}: about {walk_seconds(steps) / 60:.0f} minutes {pace}")
    else:
        why = (f"the analyzer's walk over {reports} messages would take about {walk_seconds(sure) / 60:.0f} "
               f"minutes ({sure:.2g} steps {pace}), above {WALK_SECONDS_MAX / 60:g} minutes: noise prefixes alone (about "
               f"{p.detection()['false_first_level']:.0f} at the first level) fill the {p.survivor_cap} followed")
    raise ParameterError("phi", f"larger (--phi {fits:.2g} fits), or {shorter} ({p.levels} levels now){fewer}: "
                         f"{why}", p.phi * max_items)


def check_detection(parameters) -> None:
    """Refuse, before any message is made, a tree walk whose list would mean nothing: one whose bound on missing
    an item held by 1.5 phi n users is vacuous (at least 1, the union over the levels saturated: at 10,000 users,
    phi 0.1 and 40 levels of strings the walk listed 40 random strings under "missed w.p. <= 1"). A bound above
    0.05 and below 1 still gives a list, printed NOT A RELIABLE LIST."""
    p = parameters
    miss = p.detection()["miss_probability"]
    if miss < 1:
        return
    fewer = "a shorter --max-length" if p.max_length is not None else "a smaller --domain"
    raise ParameterError("phi", f"larger, or more users, a larger --epsilon, or fewer levels ({fewer}; "
                         f"{p.levels} now): at {p.n_users:,} users an item held by 1.5 phi n = "
                         f"{1.5 * p.threshold:,.0f} users could be missed with probability up to {miss:.2g} "
                         f"(standard error {p.detection()['standard_error_at_phi_n']:,.0f} at phi n = "
                         f"{p.threshold:,.0f}): the guarantee would say nothing, and the list be noise", p.phi)


def estimate_heavy_hitters(values, *, epsilon: float, delta: float, phi: float | None, domain_size: int | None = None,
                           max_length: int | None = None, calibration: str = "hockey_stick", seed: int | None = None,
                           input_name: str = "", progress: Progress | None = None, warnings: Sequence[str] = (),
                           evaluate: bool | None = None, unused_slot: int | str | None = None, max_items: int = 1):
    """Simulate fe-hh over ``values`` (integers of [0, B), or strings with ``max_length``); returns (report, result).

    ``unused_slot``: the value (as the list names it) that :func:`privagg.protocols.heavy_hitters.padded` gave
    the users' unused slots, ``values`` then its checked array: left out of the list and of the true counts.
    ``max_items``: L, when ``values`` are the n L reports of n users at phi / L (refusals name the users' phi).

    ``seed``: a reproducible simulation (the report's privacy block says it is not private), which also fixes
    the public prefix-code key; None draws every party's randomness, and the key, securely. ``evaluate``
    (default: when seeded) adds each item's true count and the recall and precision against the raw data,
    and marks the report not private; without it the report holds the protocol's release only.
    """
    evaluate = seed is not None if evaluate is None else evaluate
    if seed is not None:
        seed = check_integer("seed", seed, 0)
    n = len(values)
    if n < 2:
        raise ParameterError("input", "at least 2 users", f"{n} items")
    seconds: dict[str, float] = {}
    start = time.perf_counter()
    entry = get("fe-hh")
    key = None if seed is None else int(np.random.default_rng([seed, 0x6B6579]).integers(
        2, entry.parameters.code_prime))
    parameters = entry.calibrate(epsilon, delta, n, domain_size, phi, max_length, calibration, code_key=key)
    check_walk(parameters, max_items)
    check_detection(parameters)
    checked = parameters.check_values(values)  # every row checked before any message is made
    seconds["calibrate"] = time.perf_counter() - start
    rngs = streams(seed, ("clients", "shuffler"))
    client, analyzer = entry.client(parameters), entry.analyzer(parameters)
    start = time.perf_counter()
    # integers go to the clients checked (a uint64 array, re-checked in one vectorized pass, not row by row)
    users = values if max_length is not None else checked
    batches = []
    for lo in range(0, n, USERS_PER_BATCH):
        batches.append(client.randomize(users[lo:lo + USERS_PER_BATCH], rngs["clients"]))
        if progress:
            progress("randomize", min(USERS_PER_BATCH, n - lo), n)
    messages = MessageBatch.concatenate(batches)
    del batches
    seconds["clients"] = time.perf_counter() - start
    start = time.perf_counter()
    shuffle(messages, rngs["shuffler"])
    seconds["shuffler"] = time.perf_counter() - start
    start = time.perf_counter()
    result = analyzer.finalize(analyzer.agg_update(analyzer.agg_init(), messages))
    seconds["analyzer"] = time.perf_counter() - start
    sent = len(messages)
    del messages

    truth = _true_counts(values if max_length is not None else checked, parameters, result.items) if evaluate \
        else None
    if truth is not None:
        truth.pop(unused_slot, None)
    privacy = parameters.privacy
    randomness = describe(seed)
    if seed is not None:
        privacy = privacy.as_simulation(randomness, "seeded simulation: whoever knows the seed can regenerate the "
                                        "levels, coins and dummies, and recover the users' prefixes")
    if evaluate:
        privacy = privacy.as_evaluation("each reported item's true count and the recall and precision of the list")
    report = HeavyHitterReport(
        **Analysis.of(parameters).release(result, privacy, truth=truth, warnings=warnings),
        evaluation=score([i for i in result.items.tolist() if i != unused_slot], truth, parameters.threshold)
        if evaluate else None,
        simulation=Simulation("faithful", randomness, False, seconds,
                              {"clients": {"sent": sent}, "shuffler": {"received": sent, "sent": sent},
                               "analyzer": {"received": sent, "malformed": result.malformed}}),
        input=input_name)
    report.heavy_hitters = [h for h in report.heavy_hitters if h.item != unused_slot]
    return report, result


def _true_counts(values, parameters, reported) -> dict:
    """The true number of holders of every item held by at least phi n / 2 users and of every ``reported`` item,
    keyed as the protocol reports items (strings decoded as UTF-8).

    Integers: ``values`` (the checked copy) is sorted in place; an item held by h or more users is one whose
    copies span h places of the sorted array, so no table of every distinct item is built.
    """
    if parameters.max_length is None:
        values.sort()
        h = max(1, math.ceil(parameters.threshold / 2))
        held = np.unique(values[:values.size - h + 1][values[:values.size - h + 1] == values[h - 1:]])
        items = np.union1d(held, np.asarray(reported.tolist(), dtype=np.uint64))
        counts = np.searchsorted(values, items, side="right") - np.searchsorted(values, items, side="left")
        return dict(zip(items.tolist(), counts.tolist()))
    truth: Counter = Counter()
    if isinstance(values, np.ndarray):  # checked rows: as bytes, the padding zeros dropped
        values = values.view(f"S{values.shape[1]}").ravel().tolist()
    for item, count in Counter(values).items():
        truth[item if isinstance(item, str) else bytes(item).decode("utf-8", errors="backslashreplace")] += count
    return dict(truth)


def score(reported: list, truth: dict, threshold: float) -> HeavyHitterEvaluation:
    """Recall and precision of ``reported`` against the true counts, at phi n (``threshold``), 1.5 phi n and
    phi n / 2; a share over an empty set is 1."""
    def share(part: int, whole: int) -> float:
        return part / whole if whole else 1.0

    heavy = {item for item, c in truth.items() if c >= threshold}
    strong = {item for item, c in truth.items() if c >= 1.5 * threshold}
    held = [truth.get(item, 0) for item in reported]
    return HeavyHitterEvaluation(
        heavy_items=len(heavy), reported=len(reported), recall=share(len(heavy & set(reported)), len(heavy)),
        recall_strong=share(len(strong & set(reported)), len(strong)),
        precision=share(sum(c >= threshold for c in held), len(held)),
        precision_loose=share(sum(c >= threshold / 2 for c in held), len(held)))
