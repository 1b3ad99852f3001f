"""Privacy auditors: the exact delta(eps) of small instances, and a statistical lower bound on eps.

A guarantee printed next to a result is only as good as the computation
behind it; these check it from the outside, by the output laws of the
mechanism itself rather than by the derivation that calibrated it.

Exact (:func:`exact_audit`)
    For a tiny instance, the law of the whole output -- the histogram of
    every message the shuffler (or the curator) releases -- is computed by
    convolving the users' exact message laws (the registry entry's
    ``message_law``), on every neighbouring pair of datasets: user 0 holds x
    in D and y in D', over all x != y, and the other users every multiset
    of the domain's items (or the pairs a protocol's entry gives: those
    meeting its data condition, or a reduction proved in docs/privacy.md).
    The hockey-stick divergence sum_o max(0, P(o) - e^eps Q(o)),
    both directions, is the true delta(eps); the true eps at the claimed
    delta is found by bisection. Nothing is bounded or approximated beyond
    floating-point sums.

Statistical (:func:`statistical_audit`)
    For instances too large to enumerate: the mechanism runs ``runs`` times
    on a neighbouring pair; the statistic est(y) - est(x) of each run is
    thresholded (threshold chosen on the first half of the runs, probabilities
    measured on the second), and Clopper-Pearson bounds give, with the stated
    confidence, eps >= ln((P_D[T] - delta) / P_D'[T]) (Jagielski et al. 2020).
    It can only catch a mechanism, never certify one.

``noise_scale`` multiplies the calibrated noise (mu, hence rho), bypassing
the parameters' checks, so that anyone can watch the auditors catch an
under-noised mechanism.
"""

from __future__ import annotations

import copy
import dataclasses
import itertools
import math
from collections import Counter
from typing import Any

import numpy as np

from .core.bisection import bisect
from .errors import ParameterError, check_integer
from .protocols.exact_laws import EXACT_LAW_MAX_WORK, big, check_keys
from .protocols.kinds import ResultKind, Topology
from .protocols.parameters import neighbouring_pair_count, neighbouring_pairs
from .protocols.registry import calibrate, get
from .protocols.sharing_graph import stated
from .reports import AuditReport, Claimed

EXACT_MAX_PAIRS = 5 * 10**7  # joint states one convolution step may form
EXACT_MAX_DATASET_PAIRS = 10**5  # neighbouring pairs of datasets one exact audit may examine
# Joint states all of one exact audit's convolutions may form: measured at about 100 ns a joint state (the outer
# sum, its stable sort and the merge), so about a minute on a 2-core machine; memory is bounded per step by
# EXACT_MAX_PAIRS. Past it the audit stops, naming --users (the others' multisets grow with n and B).
EXACT_MAX_WORK = 6 * 10**8
# Laws all of one exact audit's caches may hold (every prefix of the others' multisets, every dataset's law), at 16
# bytes an outcome (its key and probability): 0.8 GB. The sampling family's users have 2-outcome laws, so its
# caches hold half its joint states: dpds at n = 300, N = 2 passed 2.9 GB within the work budget above.
EXACT_MAX_CACHED = 5 * 10**7
# Items of the neighbouring datasets listed before any law is built (two lists of n items a pair, 8 bytes an item):
# 160 MB. At n = 10^5 over N = 2 the pairs alone asked for gigabytes.
EXACT_MAX_PAIR_ITEMS = 10**7
# The statistical auditor's runs: each costs at least about 1 ms (measured: grr 1.0 ms, gaussian 2.0 ms, fe1 54 ms
# a run at n = 1000) plus about 0.2 us a user (fe1: 73 ms at n = 10^5); 2 x runs of them are refused, before any
# run, when even that floor passes this budget (ten minutes on a 2-core machine); below it the CLI shows progress.
STATISTICAL_RUN_SECONDS, STATISTICAL_USER_SECONDS = 1e-3, 2e-7
STATISTICAL_MAX_SECONDS = 600.0
_EPS_MAX, _EPS_LAST = 50.0, 700.0  # the true eps's first search bound, and its last (e^eps stays a float)


# Summing an exact law's probabilities in floating point leaves about 1e-16 where the true divergence is 0 (a
# pure eps-DP randomizer at its own eps), and a truncated noise law leaves out less than 1e-13: a verdict, and
# the true eps at the claimed delta, allow this much absolute round-off.
ROUND_OFF = 1e-12


def with_noise_scale(parameters, scale: float):
    """The parameters with their noise multiplied by ``scale`` (``noise_fields``), built without their checks.

    For the auditors only: scaled-down noise fails the parameters' own
    floor, which is the point -- the auditor must see the mechanism as it
    would run.
    """
    if not (scale > 0 and math.isfinite(scale)):
        raise ParameterError("noise-scale", "a finite number > 0", scale)
    if scale == 1:  # as calibrated, to the last bit (1 - (1 - p) need not give p back)
        return parameters
    scaled = copy.copy(parameters)
    for name, value in parameters.noise_fields(scale).items():
        object.__setattr__(scaled, name, value)
    return scaled


# --- exact laws as (keys, probabilities): a histogram is one mixed-radix integer ------------------------


def _encode(law: dict[tuple[int, ...], float], radix: int) -> tuple[np.ndarray, np.ndarray]:
    """The law as sorted int64 keys sum_i h_i radix^i (``radix`` above any count) and their probabilities."""
    types = len(next(iter(law)))
    if radix**types >= 2**63:
        raise ParameterError("method", f"statistical for an instance this large ({types} message types with counts "
                             f"up to {radix - 1} overflow the exact auditor's 64-bit keys)", "exact")
    weights = radix ** np.arange(types, dtype=np.int64)
    keys = np.array([int(np.dot(h, weights)) for h in law], dtype=np.int64)
    order = np.argsort(keys)
    return keys[order], np.fromiter(law.values(), dtype=np.float64, count=len(law))[order]


def _convolve(a: tuple[np.ndarray, np.ndarray], b: tuple[np.ndarray, np.ndarray]):
    """The law of the sum of two independent histograms (keys add digit by digit: no digit overflows). Each row
    of the outer sum, one per key of the smaller law, is the larger law's sorted keys shifted, so a stable sort
    (timsort, which merges runs) orders them in O(N log rows)."""
    if a[0].size * b[0].size > EXACT_MAX_PAIRS:
        raise ParameterError("method", f"statistical for an instance this large (the exact output law needs "
                             f"{a[0].size * b[0].size:.3g} joint states in one step, above {EXACT_MAX_PAIRS:.0e})",
                             "exact")
    small, large = (a, b) if a[0].size <= b[0].size else (b, a)
    keys = np.add.outer(small[0], large[0]).ravel()
    order = np.argsort(keys, kind="stable")
    keys = keys[order]
    starts = np.flatnonzero(np.r_[True, keys[1:] != keys[:-1]])
    return keys[starts], np.add.reduceat(np.multiply.outer(small[1], large[1]).ravel()[order], starts)


class OutputLaws:
    """The exact law of everything released for any dataset (a list of items, one per user), from each item's
    encoded message law (``user_laws``). Users are exchangeable, so the law depends on the counts only: a
    multiset's law is its largest sorted prefix's convolved with one user's law at a time (each step has one
    small factor), every prefix cached, so the others' law is computed once for all the changed user's items."""

    def __init__(self, user_laws: dict[int, tuple[np.ndarray, np.ndarray]], budget: int = EXACT_MAX_WORK) -> None:
        self.user_laws = user_laws
        self.budget, self.work, self.users = budget, 0, None  # users: the dataset's, named when the budget is passed
        self._multisets: dict[tuple[int, ...], tuple[np.ndarray, np.ndarray]] = {}
        self._datasets: dict[tuple[int, ...], tuple[np.ndarray, np.ndarray]] = {}

    def multiset(self, items: tuple[int, ...]):
        """The law of users holding the sorted ``items``."""
        known = len(items)
        while known and items[:known] not in self._multisets:
            known -= 1
        law = self._multisets[items[:known]] if known else None
        for end in range(known + 1, len(items) + 1):
            one = self.user_laws[items[end - 1]]
            law = one if law is None else self._convolve(law, one)
            self._multisets[items[:end]] = law
        return law

    def __call__(self, dataset) -> tuple[np.ndarray, np.ndarray]:
        """The law of ``dataset``: its first user's law convolved with the (sorted) others'."""
        key, self.users = tuple(sorted(dataset)), len(dataset)
        if key not in self._datasets:
            self._datasets[key] = self.user_laws[dataset[0]] if len(dataset) == 1 else \
                self._convolve(self.multiset(tuple(sorted(dataset[1:]))), self.user_laws[dataset[0]])
        return self._datasets[key]

    def _convolve(self, a, b):
        """:func:`_convolve`, counted against the audit's work budget (refused before the step that would pass it)."""
        self.work += a[0].size * b[0].size
        if self.work > self.budget:
            raise ParameterError("users", f"fewer, or a smaller --domain, for the exact auditor (its convolutions "
                                 f"passed {self.budget:.0e} joint states, about a minute; or --method statistical)",
                                 self.users)
        return _convolve(a, b)


def hockey_stick(p, q, epsilon: float) -> float:
    """sum_o max(0, P(o) - e^eps Q(o)) for laws given as sorted (keys, probabilities)."""
    slot = np.searchsorted(q[0], p[0]).clip(max=q[0].size - 1)
    q_at = np.where(q[0][slot] == p[0], q[1][slot], 0.0)
    return float(np.maximum(p[1] - math.exp(min(epsilon, 700.0)) * q_at, 0.0).sum())


def epsilon_at(p, q, delta: float) -> float:
    """The least eps >= 0 with delta(eps) <= delta, both directions (inf when no eps will do)."""
    def worst(eps: float) -> float:
        return max(hockey_stick(p, q, eps), hockey_stick(q, p, eps))

    low, high = 0.0, _EPS_MAX
    while worst(high) > delta:  # past 50 (a claim of eps 60 had "no finite epsilon" beside "holds"), up to e^700
        if high >= _EPS_LAST:
            return math.inf
        low, high = high, min(2 * high, _EPS_LAST)
    if worst(0.0) <= delta:
        return 0.0
    return bisect(lambda eps: worst(eps) <= delta, low, high, 60)[1]


def _instance(parameters) -> dict[str, Any]:
    """The parameters an audited instance is published with: no item key, and no neighbour graph where it is the
    complete graph (the audit is of the mechanism; a graph is stated as an assumption, not audited)."""
    return {k: v for k, v in parameters.to_dict().items()
            if k != "item_key" and not (k in ("degree", "graph_dropouts") and not v)}


def _pair_count(items: int, users: int) -> float:
    """:func:`neighbouring_pair_count`, from its logarithm first where it is huge (the exact binomials of n = 10^9
    and B = 10^6 would take minutes to write out)."""
    if items < 2:
        return 0
    log_count = (math.lgamma(items + users - 1) - math.lgamma(users) - math.lgamma(items) + math.log(items)
                 + math.log(items - 1) - math.log(2))
    return math.exp(min(log_count, 700.0)) if log_count > 50 else neighbouring_pair_count(items, users)


def exact_audit(parameters, noise_scale: float = 1.0, dropouts: int = 0, progress=None) -> AuditReport:
    """The true delta at the claimed eps and the true eps at the claimed delta, worst neighbouring pair.

    Pairs come from the entry's ``audit_pairs`` (datasets meeting a
    protocol's data condition, vectors on the rounding grid, one user of
    the local model), by default every neighbouring pair of datasets over
    the domain (:func:`~privagg.protocols.parameters.neighbouring_pairs`:
    the changed user's two items and every multiset of the others').
    ``dropouts`` users (of the others) send nothing: what the adversary sees when they drop out, or
    when they collude and their messages are subtracted. ``progress(stage, done, total)`` hears of each pair.
    """
    entry = get(parameters.protocol)
    if entry.message_law is None:
        raise ParameterError("method", f"statistical for {entry.name} (no exact message law)", "exact")
    dropouts = check_integer("dropouts", dropouts, 0, parameters.n_users - 1)
    if dropouts and entry.audit_pairs is not None:
        raise ParameterError("dropouts", f"0 for {entry.name} (its guarantee counts dishonest users through "
                             "--honest-fraction, in the calibration)", dropouts)
    audited = with_noise_scale(parameters, noise_scale)
    n = audited.n_users - dropouts
    eps, delta = parameters.epsilon, parameters.delta
    check_audit_cost(entry, audited, n, dropouts)
    if entry.audit_pairs is None and (count := _pair_count(audited.domain_size, n)) > EXACT_MAX_DATASET_PAIRS:
        raise ParameterError("method", f"statistical for an instance this large ({count:.3g} neighbouring pairs "
                             f"of datasets, above {EXACT_MAX_DATASET_PAIRS:.0e})", "exact")
    pairs_to_audit = list(itertools.islice(entry.audit_pairs(audited, n) if entry.audit_pairs else
                                           neighbouring_pairs(audited.domain_size, n), EXACT_MAX_DATASET_PAIRS + 1))
    if len(pairs_to_audit) > EXACT_MAX_DATASET_PAIRS:
        raise ParameterError("method", f"statistical for an instance this large (more than "
                             f"{EXACT_MAX_DATASET_PAIRS:.0e} neighbouring pairs of datasets)", "exact")
    items = sorted({item for pair in pairs_to_audit for dataset in pair for item in dataset})
    check_law_sizes(entry, audited, items, n)
    raw = {item: entry.message_law(audited, item) for item in items}
    radix = n * max(max(h) for law in raw.values() for h in law) + 1  # more than any count a histogram can hold
    law_of = OutputLaws({item: _encode(law, radix) for item, law in raw.items()})

    def worst(p, q, at: float) -> float:
        return max(hockey_stick(p, q, at), hockey_stick(q, p, at))

    worst_delta, worst_eps, worst_pair = 0.0, 0.0, None
    for first, second in pairs_to_audit:
        p, q = law_of(first), law_of(second)
        if progress is not None:
            progress("pairs", 1, len(pairs_to_audit))
        if (pair_delta := worst(p, q, eps)) > worst_delta:
            worst_delta, worst_pair = pair_delta, (first, second)
        # the true eps is the largest over the pairs: a pair that meets delta at the largest so far cannot raise it
        if math.isfinite(worst_eps) and worst(p, q, worst_eps) > delta + ROUND_OFF:
            worst_eps = epsilon_at(p, q, delta + ROUND_OFF)
    if not pairs_to_audit:
        raise ParameterError("users", f"enough for two neighbouring datasets that meet {entry.name}'s data "
                             "condition", parameters.n_users)
    finite = math.isfinite(worst_eps)
    notes = [] if worst_pair is None else [f"worst pair: {_dataset_text(worst_pair[0])} against "
                                           f"{_dataset_text(worst_pair[1])}"]
    return AuditReport(
        protocol=parameters.protocol, calibration=parameters.calibration, method="exact",
        claimed=Claimed(eps, delta), true_epsilon=worst_eps if finite else None,
        holds=worst_delta <= delta * (1 + 1e-9) + ROUND_OFF, noise_scale=noise_scale, instance=_instance(audited),
        true_delta=worst_delta, slack=eps - worst_eps if finite else None, pairs=len(pairs_to_audit),
        dropouts=dropouts,
        notes=notes + ([] if finite else ["no finite epsilon meets the claimed delta: some output is possible under "
                                          "one dataset and impossible under its neighbour with probability above "
                                          "delta"])
        + ([f"{dropouts} of the {parameters.n_users} users sent nothing"] if dropouts else [])
        + [f"ASSUMED, not audited (the audit is of the released sum's law): {line}" for line in stated(parameters)])


def _audit_cost_over(entry, parameters, users: int) -> str | None:
    """Why the exact audit of ``parameters`` over ``users`` users passes a budget, before any of it is built
    (None when it fits): the items of its neighbouring datasets, and, where the entry estimates them
    (``audit_cost``), the joint states its convolutions form and the states its caches hold."""
    if entry.audit_cost is not None:
        pairs, work, cached = entry.audit_cost(parameters, users, EXACT_MAX_WORK)
    elif entry.audit_pairs is None:
        pairs, work, cached = _pair_count(parameters.domain_size, users), 0.0, 0.0
    else:
        return None
    if entry.audit_cost is not None and pairs > EXACT_MAX_DATASET_PAIRS:
        return f"{big(pairs)} neighbouring pairs of datasets, above {EXACT_MAX_DATASET_PAIRS:.0e}"
    if pairs <= EXACT_MAX_DATASET_PAIRS and pairs * users > EXACT_MAX_PAIR_ITEMS:
        return (f"its {big(pairs)} neighbouring pairs of datasets of {users} users list {big(2 * pairs * users)} "
                f"items, above {2 * EXACT_MAX_PAIR_ITEMS:.0e}")
    if pairs <= EXACT_MAX_DATASET_PAIRS and work > EXACT_MAX_WORK:
        return (f"its convolutions would form more than {big(work) if math.isfinite(work) else 'ever so many'} "
                f"joint states, above {EXACT_MAX_WORK:.0e}, about a minute")
    if pairs <= EXACT_MAX_DATASET_PAIRS and cached > EXACT_MAX_CACHED:
        return (f"its laws would hold {big(cached)} outcomes, above {EXACT_MAX_CACHED:.0e}, "
                f"{EXACT_MAX_CACHED * 16 / 1e9:.1f} GB")
    return None  # past EXACT_MAX_DATASET_PAIRS: refused by the pairs' own check, which names --method


def check_audit_cost(entry, parameters, users: int, dropouts: int = 0) -> None:
    """Refuse, within a second, an exact audit whose pairs or laws pass their budgets, naming --users and the
    largest number of users (each recalibrated as the command would) that fits, or --method statistical."""
    reason = _audit_cost_over(entry, parameters, users)
    if reason is None:
        return
    # the options as given; p is calibrated again (a fixed p may not buy the claim at fewer users; the sizes
    # do not depend on it)
    options = {o.name: getattr(parameters, o.name) for o in entry.options
               if hasattr(parameters, o.name) and o.name != "sampling_probability"}

    def at(n_users: int, epsilon: float = parameters.epsilon):
        return calibrate(parameters.protocol, epsilon=epsilon, delta=parameters.delta, n_users=n_users,
                         domain_size=parameters.domain_size, calibration=parameters.calibration, **options)

    def over(n_users: int) -> str | None:
        try:
            return _audit_cost_over(entry, at(n_users), n_users - dropouts)
        except ParameterError:  # too few users for the protocol: no audit to refuse there
            return None

    def less_noise_helps(n_users: int) -> bool:
        """Whether less noise (twice epsilon) makes the laws smaller: DPDG's discrete Gaussian, not a sampled
        count's two outcomes."""
        try:
            work = [entry.audit_cost(at(n_users, e), n_users - dropouts, EXACT_MAX_WORK)[1]
                    for e in (parameters.epsilon, 2 * parameters.epsilon)]
        except ParameterError:
            return False
        return work[1] < work[0]

    def fits(n_users: int) -> bool:
        return over(n_users) is None

    lo, hi = 2 + dropouts, parameters.n_users - 1  # the largest n in [lo, hi] that fits (fitting falls with n)
    if hi < lo or (smallest := over(lo)) is not None:
        largest = None
        reason = reason if hi < lo else f"{smallest}, even at {lo} users"
    else:
        while lo < hi:
            mid = (lo + hi + 1) // 2
            lo, hi = (mid, hi) if fits(mid) else (lo, mid - 1)
        largest = lo
    if largest is None:  # not the users: the laws themselves are too large
        less_noise = (", or a larger --epsilon or --delta" if entry.audit_cost is not None and less_noise_helps(lo)
                      else "")
        raise ParameterError("method", f"statistical for {entry.name} here{less_noise} (the exact audit: {reason})",
                             "exact")
    raise ParameterError("users", f"at most {largest} for {entry.name}'s exact audit ({reason}; or --method "
                         "statistical)", parameters.n_users)


def check_law_sizes(entry, parameters, items, users: int) -> None:
    """Refuse, before building any, the single-user laws of ``items`` whose histograms overflow the 64-bit keys
    (``users`` users' counts in one key) or whose building passes EXACT_LAW_MAX_WORK in all, naming the option
    of the largest law (protocols/exact_laws.py: the sizes and their measured cost)."""
    size_of = entry.law_size
    if size_of is None or not items:
        return
    sizes = [size_of(parameters, item) for item in items]
    largest = max(sizes, key=lambda s: s.work)
    check_keys(dataclasses.replace(largest, types=max(s.types for s in sizes),
                                   largest_count=max(s.largest_count for s in sizes)), users)
    total = sum(s.work for s in sizes)
    if total > EXACT_LAW_MAX_WORK:
        laws = f"{len(items)} single-user laws, the largest with " if len(items) > 1 else "one user's law has "
        raise largest.refuse(f"{laws}up to {big(largest.states)} outcomes over {largest.types} message types: "
                             f"{big(total)} units of work, above {EXACT_LAW_MAX_WORK:.0e}, about a minute",
                             EXACT_LAW_MAX_WORK)


def _dataset_text(dataset) -> str:
    """A dataset as how many users hold each item, e.g. "2 users hold 0, 1 holds 2" (the pair differs in one
    user's item, so the two texts show which)."""
    held = sorted(Counter(dataset).items())
    return ", ".join(f"{count} {'user holds' if count == 1 else 'users hold'} {item}" if i == 0 else
                     f"{count} {'holds' if count == 1 else 'hold'} {item}" for i, (item, count) in enumerate(held))


def check_statistical_cost(runs: int, n_users: int) -> None:
    """Refuse, before any run, 2 x ``runs`` runs of n users whose least cost passes STATISTICAL_MAX_SECONDS,
    naming --runs (and its largest that fits) where at least 100 runs fit, else --users."""
    per_run = STATISTICAL_RUN_SECONDS + STATISTICAL_USER_SECONDS * n_users
    if 2 * runs * per_run <= STATISTICAL_MAX_SECONDS:
        return
    most_runs = int(STATISTICAL_MAX_SECONDS / (2 * per_run))
    if most_runs >= 100:
        raise ParameterError("runs", f"at most {most_runs} at n = {n_users} (each run takes at least "
                             f"{per_run * 1e3:.3g} ms: {2 * runs * per_run:.3g} s in all, above "
                             f"{STATISTICAL_MAX_SECONDS:g} s)", runs)
    most_users = int((STATISTICAL_MAX_SECONDS / (2 * 100) - STATISTICAL_RUN_SECONDS) / STATISTICAL_USER_SECONDS)
    raise ParameterError("users", f"at most {most_users} for the statistical auditor (at the least 100 runs each "
                         f"run takes at least {per_run:.3g} s: {2 * 100 * per_run:.3g} s in all, above "
                         f"{STATISTICAL_MAX_SECONDS:g} s)", n_users)


def statistical_audit(parameters, runs: int = 4000, confidence: float = 0.95, noise_scale: float = 1.0,
                      seed: int = 0, progress=None) -> AuditReport:
    """A lower bound on eps, holding with probability ``confidence``, from ``runs`` runs per dataset
    (``progress(stage, done, total)`` hears of each run)."""
    from scipy.stats import beta as beta_law

    from .simulate.runner import simulate

    runs = check_integer("runs", runs, 100)
    check_statistical_cost(runs, parameters.n_users)
    if not 0 < confidence < 1:
        raise ParameterError("confidence", "in (0, 1)", confidence)
    audited = with_noise_scale(parameters, noise_scale)
    entry = get(parameters.protocol)
    if entry.result is not ResultKind.FREQUENCY_TABLE:
        raise ParameterError("method", f"exact for {entry.name} (the statistical auditor compares two items' "
                             "frequency estimates; a vector sum's exact audit covers its extreme inputs)", "statistical")
    # the first neighbouring pair: an accepted dataset (the sampling family's first puts a category at exactly
    # m holders) and the neighbour that moves one of them away, the boundary the guarantee covers
    # (the local model's exact pairs hold its one audited user; the estimates here need all n)
    local = entry.topology is Topology.LOCAL
    dataset, neighbour = next(iter(entry.audit_pairs(audited, audited.n_users) if entry.audit_pairs and not local
                                   else neighbouring_pairs(audited.domain_size, audited.n_users)))
    # items >= B stand for a central curator's noise in the exact auditor's pairs: the simulation adds its own
    dataset, neighbour = ([i for i in d if i < audited.domain_size] for d in (dataset, neighbour))
    moved = np.bincount(neighbour, minlength=audited.domain_size) - np.bincount(dataset, minlength=audited.domain_size)
    x, y = int(np.argmin(moved)), int(np.argmax(moved))  # one user's item moves from x to y
    mode = "fast" if entry.fast is not None else "faithful"
    seeds = iter(np.random.SeedSequence(seed).spawn(2 * runs))
    estimates = {}

    def one_run(codes: np.ndarray):
        estimate = simulate(audited, codes, mode=mode, rng=np.random.default_rng(next(seeds)), queries=[x, y],
                            check_population=False).result.estimate([x, y])
        if progress is not None:
            progress("runs", 1, 2 * runs)
        return estimate

    for side, items in (("D", dataset), ("D'", neighbour)):
        codes = np.array(items)
        estimates[side] = np.array([one_run(codes) for _ in range(runs)])
    half, delta = runs // 2, parameters.delta
    # Candidate events {s <= t}, where s is likelier small under the first dataset than under the second:
    # est(y) (y is held in D' only), est(y) - est(x), and -est(x) (x is held in D only), in both directions.
    statistics = {name: {side: f(e) for side, e in estimates.items()} for name, f in (
        ("est(y)", lambda e: e[:, 1]), ("est(y) - est(x)", lambda e: e[:, 1] - e[:, 0]),
        ("-est(x)", lambda e: -e[:, 0]))}

    def score(a: np.ndarray, b: np.ndarray, t: float) -> float:
        pa, pb = np.mean(a <= t), max(np.mean(b <= t), 1 / a.size)
        return (pa - delta) / pb

    # the event that looks best on the first half of the runs ...
    best, chosen = -math.inf, None
    for name, values in statistics.items():
        for first, second, flip in (("D", "D'", 1.0), ("D'", "D", -1.0)):
            a, b = flip * values[first][:half], flip * values[second][:half]
            for t in np.unique(a):
                if (value := score(a, b, t)) > best:
                    best, chosen = value, (name, first, second, flip, t)
    # ... measured on the second, with Clopper-Pearson bounds splitting 1 - confidence between the two
    name, first, second, flip, t = chosen
    m, alpha = runs - half, (1 - confidence) / 2
    k_a = int(np.sum(flip * statistics[name][first][half:] <= t))
    k_b = int(np.sum(flip * statistics[name][second][half:] <= t))
    p_low = beta_law.ppf(alpha, k_a, m - k_a + 1) if k_a else 0.0
    q_high = beta_law.ppf(1 - alpha, k_b + 1, m - k_b) if k_b < m else 1.0
    bound = max(0.0, math.log((p_low - delta) / q_high)) if p_low > delta else 0.0
    event = f"{name} {'<=' if flip > 0 else '>='} {flip * t:.4g}"
    return AuditReport(
        protocol=parameters.protocol, calibration=parameters.calibration, method="statistical",
        claimed=Claimed(parameters.epsilon, parameters.delta), true_epsilon=bound,
        holds=bound <= parameters.epsilon, noise_scale=noise_scale, instance=_instance(audited), runs=runs,
        confidence=confidence, notes=[
            f"one user holds {x} in D and {y} in D' (counts {np.bincount(dataset).tolist()} in D); {runs} {mode} runs "
            f"each; the event "
            f"{event} (chosen on half the runs) has P_{first} >= {p_low:.4g} and P_{second} <= {q_high:.4g} on the "
            "other half; a lower bound only"])


# --- the audit grid: every registered protocol's tiny instances --------------------------------------------


def grid_cases() -> list[tuple[str, int, str]]:
    """The exact audit grid's cases, before any calibration: (protocol, index of one of its registry entry's
    ``audit_instances``, a calibration the instance names or else each of the entry's)."""
    from .protocols.registry import ENTRIES

    return [(entry.name, index, calibration) for entry in ENTRIES
            for index, instance in enumerate(entry.audit_instances)
            for calibration in instance.get("calibrations", entry.calibrations)]


def grid_parameters(protocol: str, index: int, calibration: str):
    """A grid case's calibrated parameters, or None where the calibration refuses the instance (it claims nothing
    there)."""
    from .protocols.registry import calibrate, get

    instance = {k: v for k, v in get(protocol).audit_instances[index].items() if k not in ("calibrations", "slow")}
    try:
        return calibrate(protocol, calibration=calibration, **instance)
    except ParameterError:
        return None


def grid() -> list[AuditReport]:
    """The exact audit of every grid case (:func:`grid_cases`) at the calibrated noise."""
    return [exact_audit(parameters) for parameters in (grid_parameters(*case) for case in grid_cases())
            if parameters is not None]


NOISE_FIELDS = ("rho", "sampling_probability", "noise_variance", "gamma", "local_epsilon", "scale_numerator")


def markdown_table(reports: list[AuditReport]) -> str:
    """docs/privacy.md's audit table: one row per protocol, calibration and instance."""
    from .protocols.registry import get

    lines = ["| protocol | calibration | instance | claimed (eps, delta) | true delta at eps | true eps at delta | "
             "slack | verdict |", "|---|---|---|---|---|---|---|---|"]
    for r in reports:
        noise_field = next(name for name in NOISE_FIELDS if name in r.instance)
        options = "".join(f", {o.name} {r.instance[o.name]:.4g}" if isinstance(r.instance[o.name], float) else
                          f", {o.name} {r.instance[o.name]}" for o in get(r.protocol).options
                          if r.instance.get(o.name) is not None and o.name != noise_field)
        eps = "none finite" if r.true_epsilon is None else f"{r.true_epsilon:.3f}"
        slack = "" if r.slack is None else f"{r.slack:.3f}"
        value = r.instance[noise_field]
        noise = f"{noise_field} {value}" if isinstance(value, int) else f"{noise_field} {value:.3f}"
        size = f"d {r.instance['dimension']}" if "dimension" in r.instance else f"B {r.instance['domain_size']}"
        size += f", t {r.instance['coordinates']}" if "coordinates" in r.instance else ""
        lines.append(f"| {r.protocol} | {r.calibration} | n {r.instance['n_users']}, {size}"
                     f"{options}, {noise} | ({r.claimed.epsilon:g}, {r.claimed.delta:g}) | "
                     f"{r.true_delta:.3g} | {eps} | {slack} | {'holds' if r.holds else '**violated**'} |")
    return "\n".join(lines)


if __name__ == "__main__":  # python -m privagg.audit: the table docs/privacy.md holds
    print(markdown_table(grid()))
