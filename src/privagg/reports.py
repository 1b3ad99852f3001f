"""The typed reports of ``privagg calibrate``, ``estimate`` and ``analyze``, and their JSON Schema.

Reports are dataclasses of plain values; :func:`to_json_dict` turns one into
the JSON object the CLI writes (fields left ``None`` are omitted), and
:func:`json_schema` generates the JSON Schema from the types with pydantic
(``privagg schema`` prints it, docs/schemas/ holds copies, and the tests
validate every report against it). The protocol names, the parameter
fields and the privacy methods (the calibrations) come from the registry.
The fields of issue 2's estimate report are kept. What a release holds is
decided in :mod:`privagg.pipelines`, not here.
"""

from __future__ import annotations

import dataclasses
import re
import textwrap
from dataclasses import dataclass, field
from typing import Any, Literal, Union

import numpy as np

from .errors import LARGEST
from .privacy.description import PrivacyDescription
from .protocols import registry
from .protocols.parameters import with_reporters
from .protocols.registry import IMPLEMENTED

# The metadata of a field computed from the raw data (the true counts or sums, a realised error, z-scores against
# the truth): a report holding one is not a private release, whatever its privacy block says (json_document).
FROM_DATA = {"from_data": True}

Scalar = int | float | str | None
# Generated from the registry: a new protocol's name and parameter fields enter the schemas with its entry. The
# parameters' types (``Parameters``, the union of every implemented protocol's) import every protocol's module: they
# are made with the first schema (:func:`json_schema`), not when a command writes its report.
ProtocolName = Literal[IMPLEMENTED]  # type: ignore[valid-type]


@dataclass
class ExpectedError:
    """The theory: costs and error before any data is seen."""

    messages_per_user: float
    bits_per_message: int
    # the largest of one item (balls into bins: at frequency 0; sampling: the largest count the data condition allows;
    # local baselines, blanket-hist: at 0 or every user; docs/derivations.md); vectors: a coordinate's at the average
    standard_error: float
    max_error_bound: float  # over all of [B], holds with probability 1 - max_error_beta
    max_error_beta: float
    standard_error_at: str  # the count standard_error is at, in words (the protocol's expected_error says)


@dataclass
class ProfilePoint:
    epsilon: float
    delta: float


@dataclass
class GraphChoice:
    """One neighbour graph for DPDS/DPDG's masks and backups: its degree and per-neighbourhood threshold, each failure
    term (union bounds, docs/privacy.md, "Neighbour graphs") and their total, and its costs per user and at the
    server (protocols/sharing_graph.py)."""

    degree: int
    threshold: int
    complete: bool
    collusion: float  # (a) an honest user's t colluding holders
    liveness: float  # (b) a needed secret without t honest surviving holders: the release fails, not privacy
    disconnection: float  # (c) the honest survivors' graph not connected
    equivocation: float  # (d) t <= (k + 1 + colluding holders) / 2 somewhere
    cut: float  # (e) t <= k / 2 + 1 + colluding neighbours somewhere: a server's chosen dropouts cut off a part
    failure: float
    costs: dict[str, dict[str, int]]


@dataclass
class NeighbourGraphReport:
    """``privagg calibrate dpds|dpdg --colluding --dropouts --failure``: the least degree meeting the failure target,
    and the complete graph the protocol runs today."""

    colluding: int
    colluding_fraction: float
    dropouts: int
    dropout_fraction: float
    failure_target: float
    assumptions: list[str]
    graph: GraphChoice
    complete_graph: GraphChoice


@dataclass
class CalibrationReport:
    """``privagg calibrate``: the frozen parameters, their guarantee and what they cost."""

    protocol: ProtocolName
    parameters: Parameters  # as a dict: the fields, "protocol" and the derived quantities
    privacy: PrivacyDescription
    privacy_profile: list[ProfilePoint]  # delta(eps) at other epsilons, for the same noise
    messages_per_user: float
    bits_per_message: int
    standard_error: float
    max_error_bound: float
    max_error_beta: float
    standard_error_at: str  # the count standard_error is at, in words
    warnings: list[str] = field(default_factory=list)  # legal but weak choices (privacy_warnings)
    costs: dict[str, dict[str, float]] = field(default_factory=dict)  # expected, per kind of party
    theory: dict[str, float | str] = field(default_factory=dict)  # the estimate's law and variance
    neighbour_graph: NeighbourGraphReport | None = None  # DPDS, DPDG given --colluding, --dropouts or --failure


@dataclass
class Estimate:
    item: int | str  # an integer item, a public candidate, or "#code"
    estimate: float
    stderr: float
    hash_collision: bool | None = None  # true when several public candidates share the code
    true_count: int | None = field(default=None, metadata=FROM_DATA)  # --evaluate only: the input's count of the item
    # weighted aggregation (--epsilon-column): the unweighted sum_g tau_g / p_g, unbiased whatever the groups
    unweighted: float | None = None
    unweighted_stderr: float | None = None


@dataclass
class Messages:
    total: int
    per_user: float
    malformed: int = 0


@dataclass
class RealisedError:
    """|estimate - true count| in a simulation (uses the true counts: not private, not for release)."""

    over: Literal["domain", "candidates"]
    items: int
    max_abs: float
    mean_abs: float
    p50: float
    p90: float
    p99: float


@dataclass
class Simulation:
    mode: Literal["faithful", "fast"]
    randomness: str
    full_domain: bool
    seconds: dict[str, float]
    transcript: dict[str, dict[str, int]]


@dataclass
class RunReport:
    """What every report of a run holds first: the protocol, its parameters and guarantee, what it cost and the
    theory of its error."""

    protocol: ProtocolName
    parameters: Parameters  # as a dict: the fields, "protocol" and the derived quantities
    privacy: PrivacyDescription
    n_users: int
    messages: Messages
    bits_per_message: int
    expected_error: ExpectedError


class _Estimates:
    """A report's estimates as a table and a chart (issue 49): :meth:`to_pandas`, :meth:`to_polars`, :meth:`plot`.
    ``_listed``: the field holding the rows (each with ``item``, ``estimate`` and ``stderr``)."""

    _listed = "estimates"
    _quantity = "users holding the item"

    def _rows(self) -> dict[Any, dict[str, Any]]:
        """{item: its other fields}, without the fields that are None in every row (those not computed)."""
        rows = [dataclasses.asdict(row) for row in getattr(self, self._listed)]
        kept = [name for name in (rows[0] if rows else ()) if name != "item" and any(r[name] is not None for r in rows)]
        return {row["item"]: {name: row[name] for name in kept} for row in rows}

    def to_pandas(self):
        """The estimates as a pandas DataFrame (index ``item``; ``estimate``, ``stderr``, and ``true_count`` or
        ``true_sum`` where the report was evaluated). pandas is optional."""
        from .protocols.results import data_frame

        return data_frame(self._rows(), "item")

    def to_polars(self):
        """:meth:`to_pandas`'s table as a Polars DataFrame, ``item`` its first column. Polars is optional."""
        from .protocols.results import polars_frame

        return polars_frame(self._rows(), "item")

    def plot(self, ax=None):
        """The estimates as bars with 95% error bars (1.96 standard errors, the normal approximation of
        docs/derivations.md), titled with the privacy summary (``NOT PRIVATE (seeded simulation ...`` where so);
        drawn on ``ax``, else on a new matplotlib figure. Returns the Axes."""
        rows = getattr(self, self._listed)
        if ax is None:
            import matplotlib.pyplot as plt

            ax = plt.figure(figsize=(max(6.0, 0.6 * len(rows) + 2), 4.5)).add_subplot()
        labels = [_label(getattr(row, "name", None) or row.item) for row in rows]
        ax.bar(range(len(rows)), [row.estimate for row in rows], yerr=[1.96 * row.stderr for row in rows],
               capsize=3)
        ax.set_xticks(range(len(rows)), labels, rotation=45 if any(len(label) > 6 for label in labels) else 0,
                      ha="right" if any(len(label) > 6 for label in labels) else "center")
        ax.set_ylabel(f"{self._quantity} (± 1.96 stderr)")
        ax.set_title(f"{self.protocol} over {self.n_users} users\n" + textwrap.fill(self.privacy.summary(), 70),
                     fontsize=8)
        return ax


def _label(item: Any, longest: int = 24) -> str:
    """An item as a chart's tick label: unprintable text shown escaped, long text cut."""
    text = item if isinstance(item, str) and item.isprintable() else str(item) if not isinstance(item, str) \
        else repr(item)[1:-1]
    return text if len(text) <= longest else text[:longest - 3] + "..."


@dataclass
class FrequencyReport(RunReport, _Estimates):
    """What every frequency report holds: parameters, guarantee, cost, theory and the top estimates."""

    estimates: list[Estimate]
    privacy_profile: list[ProfilePoint]  # delta(eps) at eps/2, eps, 2 eps for the same noise
    warnings: list[str]  # legal but weak choices, users left out for a missing value, ...


@dataclass
class Group:
    """One privacy group of a weighted aggregation: its users, their epsilon, its p and its weight."""

    epsilon: float
    n_users: int
    sampling_probability: float
    weight: float  # in the inverse-variance combination
    privacy: str  # the group's guarantee, in one line


@dataclass
class EstimateReport(FrequencyReport):
    """``privagg estimate``: a simulated run over a dataset (with ``error`` and true counts when evaluated)."""

    simulation: Simulation
    input: str
    error: RealisedError | None = field(default=None, metadata=FROM_DATA)  # --evaluate only: against the raw data
    messages_written: str | None = None  # the folder of --write-messages
    groups: list[Group] | None = None  # weighted aggregation (--epsilon-column): one per distinct epsilon
    # weighted aggregation: true when the groups' released counts contradict the one distribution the weighted
    # estimates assume (they are then biased: the unweighted ones are not)
    groups_disagree: bool | None = None
    # the baseline sum_g tau_g / p_g, beside the weighted error
    unweighted_error: RealisedError | None = field(default=None, metadata=FROM_DATA)


@dataclass
class CoordinateEstimate:
    """One coordinate of a vector sum."""

    item: int  # the coordinate
    estimate: float  # of the sum over users
    stderr: float  # the estimate's sd, estimated from the release (blanket-vector) or its formula at the estimate
    true_sum: float | None = field(default=None, metadata=FROM_DATA)  # --evaluate only
    name: str | None = None  # the coordinate's public name, where the input has names (the bundled data)
    stderr_bound: float | None = None  # blanket-vector: an upper bound on the sd, beside the estimate


@dataclass
class VectorError:
    """The estimates against the true sums (simulation only, not for release)."""

    max_abs: float  # largest |estimate - true sum|
    squared_error: float  # sum over every coordinate of (estimate - true sum)^2, the FE paper's ||v - v_hat||^2
    # mean over coordinates of (estimated mean - true mean)^2: dense vectors (blanket-vector) only, as normalised_mse
    mse_of_mean: float | None = None
    # sum over coordinates of squared error of the sums / (n/d)^2, the vector paper's MSE-hat: dense vectors
    # (blanket-vector) only, None for the 1-sparse protocols (over d = 2^40 coordinates it means nothing)
    normalised_mse: float | None = None


@dataclass
class VectorReport(RunReport, _Estimates):
    """What every vector-sum report holds: parameters, guarantee, cost, theory and the coordinates' sums."""

    _quantity = "sum over users"

    estimates: list[CoordinateEstimate]  # every coordinate, or the candidates (the others are estimated as 0)
    mean: list[float]  # the estimated mean of each listed coordinate (sums / n)
    privacy_profile: list[ProfilePoint]
    warnings: list[str]


@dataclass
class Discovery:
    """sparse-vector-hashed's first stage (``--discover-phi``): fe-hh over the rounded cells finds the candidates."""

    phi: float
    coordinates: int  # how many were found: the coordinates the second stage estimates
    messages: Messages  # the first stage's share of the report's messages
    parameters: dict[str, Any]  # fe-hh's, at (eps/2, delta/2)
    privacy: str  # the stage's guarantee, in one line
    survivors: list[int]  # prefixes followed at each level


@dataclass
class VectorEstimateReport(VectorReport):
    """``privagg estimate`` for vector sums: a simulated run over users' vectors or (coordinate, weight) rows."""

    simulation: Simulation
    input: str
    error: VectorError | None = field(default=None, metadata=FROM_DATA)  # --evaluate only
    messages_written: str | None = None  # the folder of --write-messages
    discovery: Discovery | None = None  # sparse-vector-hashed --discover-phi: the heavy-hitter stage


@dataclass
class HeavyHitter:
    """A discovered item: an output of the private protocol, so strings are reported by name."""

    item: int | str
    estimate: float  # of the number of users holding it
    stderr: float
    true_count: int | None = field(default=None, metadata=FROM_DATA)  # --evaluate only


@dataclass
class HeavyHitterEvaluation:
    """The reported items against the true counts (simulation only, not for release)."""

    heavy_items: int  # items held by at least phi n users
    reported: int
    recall: float  # share of the items held by >= phi n users that are reported
    recall_strong: float  # share of the items held by >= 1.5 phi n users that are reported
    precision: float  # share of the reported items held by >= phi n users
    precision_loose: float  # share of the reported items held by >= phi n / 2 users


@dataclass
class HeavyHitterRelease(RunReport, _Estimates):
    """What fe-hh releases, simulated or served: the heavy hitters its tree walk discovered."""

    _listed = "heavy_hitters"

    threshold: float  # phi n: reported items are estimated to be held by at least this many users
    heavy_hitters: list[HeavyHitter]  # largest estimate first
    survivors: list[int]  # prefixes followed at each level of the tree
    theory: dict[str, float | str]  # the estimator and the detection probabilities
    reliable: bool  # both detection bounds at most 0.05: otherwise NOT A RELIABLE LIST (more users or a larger phi)
    privacy_profile: list[ProfilePoint]
    warnings: list[str]


@dataclass
class HeavyHitterReport(HeavyHitterRelease):
    """``privagg estimate fe-hh``: the heavy hitters discovered in a simulated run."""

    simulation: Simulation
    input: str
    evaluation: HeavyHitterEvaluation | None = field(default=None, metadata=FROM_DATA)  # --evaluate only


@dataclass
class Engine:
    name: Literal["local", "dask"]
    partitions: int
    workers: int | None = None
    scheduler: str | None = None
    seconds: dict[str, float] = field(default_factory=dict)


@dataclass
class Collection:
    """What the analyzer service received for a task: counts only, no identities."""

    reports: int  # reports in the applied batches (as the collector counted them)
    batches: int  # batches applied, each once
    unopened: int  # messages that would not open (another key or task, truncated, tampered): dropped
    malformed: int  # messages that opened but broke the protocol's layout: dropped
    duplicates: int = 0  # messages repeating another's HPKE encapsulated key (a replay): dropped


@dataclass
class Dropouts:
    """Who took part in a release of the sharing server (DPDS, DPDG): counts only."""

    enrolled: int  # n, the roster
    round1_senders: int  # |U1|: took part in round 1
    survivors: int  # |U2|: sent their masked sums; the release is theirs
    min_survivors: int  # the task's least


@dataclass
class AnalysisReport(FrequencyReport):
    """``privagg analyze``: the analyzer over written messages (or the analyzer service's, or the sharing server's,
    result)."""

    full_domain: bool
    engine: Engine
    collection: Collection | None = None  # the analyzer service: what its batches held
    dropouts: Dropouts | None = None  # the sharing server: who took part


@dataclass
class SharingDemoRow:
    """One category in ``privagg demo-service dpds|dpdg|tss|tss-collusion``: the truth over the survivors, both estimates, their
    z-scores against the truth (over its standard deviation at the true count; None where it is 0)."""

    item: int
    word: str
    truth: int = field(metadata=FROM_DATA)
    service: float
    service_stderr: float
    service_z: float | None = field(metadata=FROM_DATA)
    simulation: float
    simulation_stderr: float
    simulation_z: float | None = field(metadata=FROM_DATA)


@dataclass
class SharingDemoSimulation:
    private: bool  # false: a seeded simulation
    seed: int
    mode: str  # faithful (the same parties, in-process) where its cost allows, else fast
    parameters: dict[str, Any]  # the task's, recomputed for the survivors


@dataclass
class SharingDemoBytes:
    http_sent: int  # the users' request bodies (JSON, base64)
    http_received: int  # their answers
    sealed_sent: int  # the sealed messages among what they sent, as bytes
    sealed_expected: int | None = None  # the sealed shares by the formula (DPDS, DPDG)


@dataclass
class SharingDemoParty:
    """One kind of party's messages in the demo, per party: the entries (field elements; items in a report set or a
    list of helpers; a key counts one, a backup one per secret, a revealed share one) of each kind of message,
    measured and expected, beside its Table I row."""

    party: str  # user; server (DPDS, DPDG); user as reporter, user as helper, S1, S2 (TSS)
    parties: int  # how many took this part (users: those who took part to the end)
    sent: dict[str, float]
    received: dict[str, float]
    expected_sent: dict[str, float]  # DPDS, DPDG: exact, given who answered each round; TSS: no dropouts
    expected_received: dict[str, float]
    table_i: str  # the paper reference's Table I row (paper or derived), at this n and N


@dataclass
class SharingDemoDishonest:
    """``privagg demo-service --dishonest KIND``: the one user who deviated (privagg.service.sharing.dishonest, two_servers.dishonest)."""

    kind: str
    user: int  # his roster index
    did: str
    outcome: str  # what the protocol does about it
    item: int | None = None  # wrong-sum: the item whose sum he moved (None: no sum sent, or another kind)


@dataclass
class SharingDemoReport:
    """``privagg demo-service dpds|dpdg|tss|tss-collusion --json``: the release beside the simulation."""

    protocol: str
    users: int
    drop_fraction: float
    estimates: list[SharingDemoRow]
    service: AnalysisReport  # the sharing server's or S2's release, as its result route answers
    simulation: SharingDemoSimulation
    z_rms: float | None = field(metadata=FROM_DATA)
    round_seconds: dict[str, float]  # enroll, round1, round2, round3 (TSS: round4, handover): wall time
    bytes: SharingDemoBytes
    parties: list[SharingDemoParty]
    # the survivors' data breaks the condition the guarantee assumes
    data_condition_broken: str | None = field(default=None, metadata=FROM_DATA)
    # the release's blame data (privagg.demos.DETECTED): user indices (lists of them) and items with why
    detected: dict[str, list[Any]] = field(default_factory=dict)
    dishonest: SharingDemoDishonest | None = None  # --dishonest: the one user who deviated


@dataclass
class VectorAnalysisReport(VectorReport):
    """``privagg analyze`` for vector sums: the analyzer over written messages (or the service's result)."""

    engine: Engine
    collection: Collection | None = None
    discovery: Discovery | None = None  # a staged service task's first stage (the discovered coordinates)


@dataclass
class HeavyHitterAnalysisReport(HeavyHitterRelease):
    """The analyzer service's fe-hh result: the heavy hitters its tree walk discovered in the batches it applied."""

    engine: Engine
    collection: Collection | None = None


@dataclass
class Claimed:
    epsilon: float
    delta: float


@dataclass
class AuditReport:
    """``privagg audit``: a claimed guarantee against what the mechanism does."""

    protocol: str
    calibration: str
    method: Literal["exact", "statistical"]
    claimed: Claimed
    true_epsilon: float | None  # exact: eps at the claimed delta (None: no finite eps); statistical: a lower bound
    holds: bool  # exact: true delta(claimed eps) <= claimed delta; statistical: the lower bound <= claimed eps
    noise_scale: float
    instance: dict[str, Any]  # the parameters audited (n, domain, mu, rho, ...)
    true_delta: float | None = None  # exact: delta at the claimed eps, worst pair
    slack: float | None = None  # exact: claimed eps - true eps (how much the calibration gives away)
    pairs: int | None = None  # exact: neighbouring pairs examined
    dropouts: int | None = None  # exact: users who sent nothing (dropped out, or colluded and were subtracted)
    runs: int | None = None  # statistical: runs per dataset
    confidence: float | None = None  # statistical
    notes: list[str] = field(default_factory=list)


@dataclass
class AccountReport:
    """``privagg account shuffle``: (eps, delta) of n shuffled eps0-LDP reports."""

    model: Literal["shuffle"]
    local_epsilon: float
    n_users: int
    delta: float
    method: Literal["best", "fmt", "wang", "blanket", "closed-form"]  # as asked
    epsilon: float  # the least the methods asked for certify
    by: str  # the method that certified it
    epsilons: dict[str, float]  # what each method asked for certifies
    assumptions: list[str]
    reference: str
    total_variation: float | None = None  # beta of the randomizer, when given (wang) or implied by --values
    values: int | None = None  # k: the randomizer is k-ary randomized response
    closed_form_epsilon: float | None = None  # for comparison, where its condition holds
    exact_epsilon: float | None = None  # binary randomized response (--values 2): its exact eps, for the gap
    exact_note: str | None = None  # what the exact eps was computed over
    seconds: float = 0.0


@dataclass
class CompareRow:
    """One (protocol, epsilon) of ``privagg compare``: its errors averaged over the trials, or why it was refused."""

    protocol: ProtocolName
    epsilon: float
    delta: float  # 0 for a pure eps-DP protocol
    # of |estimate - true count| over the domain, mean over the trials
    error_p50: float | None = field(default=None, metadata=FROM_DATA)
    error_p90: float | None = field(default=None, metadata=FROM_DATA)
    error_p99: float | None = field(default=None, metadata=FROM_DATA)
    error_max: float | None = field(default=None, metadata=FROM_DATA)
    messages_per_user: float | None = None
    bits_per_user: float | None = None
    seconds: float | None = None  # one run's simulation, median over the trials
    trust: str = ""
    refused: str | None = None  # the protocol's error message, when it cannot run this setting
    warnings: list[str] = field(default_factory=list)  # its runs' legal but weak choices (as estimate prints them)


@dataclass
class CompareReport:
    """``privagg compare``: every protocol at every epsilon over the same data (seeded simulations)."""

    input: str
    n_users: int
    domain_size: int
    trials: int
    seed: int
    rows: list[CompareRow]
    private: Literal[False]  # the document's flag (json_document): seeded simulations, never a private release
    note: str


def reported_estimates(table, encoder, top: int, truth=None) -> list[Estimate]:
    """The top items of a frequency table, named only when public (``encoder.label``), with standard errors.

    ``truth(sorted_codes)``, in a simulation, gives the true counts of sorted,
    distinct codes, to show beside the estimates.
    """
    codes, estimates = table.top_k(top)
    stderr = np.broadcast_to(table.parameters.reported_standard_error(estimates, getattr(table, "reporters", None)),
                             estimates.shape)
    true = [None] * codes.size
    if truth is not None:
        order = np.argsort(codes)  # the top codes are distinct
        counts = np.empty(codes.size, dtype=np.int64)
        counts[order] = truth(codes[order])
        true = counts.tolist()
    return [Estimate(encoder.label(code), float(est), float(se), True if encoder.is_collision(code) else None, t)
            for code, est, se, t in zip(codes.tolist(), estimates.tolist(), stderr.tolist(), true)]


def shared_code_warnings(estimates: list[Estimate], encoder, n_users: int, reports_per_user: int = 1) -> list[str]:
    """The warning that estimates named by public strings count every user whose string hashes to their code, a
    public one or not, where that may be many: each of the strings reported (n, or n L with L a user) lands on a
    given code with probability 1 / B (over the hash key), so up to n L / B of them a code in expectation; none
    below one (docs/derivations.md, "Strings hashed into [B]"). It depends on n, L and B alone, not on the data."""
    named = any(isinstance(e.item, str) and not re.fullmatch(r"#\d+", e.item) for e in estimates)
    strings, codes = n_users * reports_per_user, encoder.domain_size
    if not (named and encoder.shares_codes and strings >= codes):
        return []
    whose = (f"n = {n_users:,} users" if reports_per_user == 1 else
             f"{strings:,} reports ({n_users:,} users, up to {reports_per_user} a user)")
    return [f"each named estimate counts every user whose string hashes to its code, listed or not: with {whose} over "
            f"B = {codes:,} codes, up to {'n / B' if reports_per_user == 1 else 'n L / B'} = {strings / codes:.3g} "
            f"{'users' if reports_per_user == 1 else 'reports'} a code (in expectation over the hash key) may hold strings other than its name; a --domain well above n "
            "makes them negligible"]


def levels_text(levels) -> str:
    """Tree levels as prose: "level 2", "levels 0 and 1", "levels 0, 1 and 2"."""
    names = [str(int(k)) for k in levels]
    if len(names) == 1:
        return f"level {names[0]}"
    return f"levels {', '.join(names[:-1])} and {names[-1]}"


def heavy_hitters(result, truth: dict | None = None) -> list[HeavyHitter]:
    """fe-hh's discovered items, largest estimate first (with their true counts where ``truth`` is given)."""
    order = np.argsort(-result.estimates, kind="stable")
    return [HeavyHitter(result.items[i], float(result.estimates[i]), float(result.standard_errors[i]),
                        None if truth is None else truth.get(result.items[i], 0)) for i in order]


def capped_warnings(parameters, result) -> list[str]:
    """fe-hh: a warning when more prefixes passed a level than the walk follows."""
    return ([f"more prefixes than the {parameters.survivor_cap} followed passed {levels_text(result.capped_levels)}: "
             "the largest estimates were kept"] if result.capped_levels else [])


def coordinate_estimates(result, coordinates, truth=None, names=None) -> list[CoordinateEstimate]:
    """A vector sum's coordinates with their standard errors (and bounds, where the protocol gives them); ``truth``
    and ``names`` where known."""
    bounds = result.standard_error_bounds
    return [CoordinateEstimate(int(i), float(e), float(se), None if truth is None else float(truth[j]),
                               None if names is None else names[i], None if bounds is None else float(bounds[j]))
            for j, (i, e, se) in enumerate(zip(coordinates, result.total, result.standard_errors))]


def privacy_profile(parameters) -> list[ProfilePoint]:
    """delta at eps/2, eps and 2 eps for the parameters' noise (``parameters.delta_at``, loads scipy); 2 eps only
    where it is a legal epsilon (at most :data:`privagg.errors.LARGEST`)."""
    return [ProfilePoint(e, parameters.delta_at(e)) for e in (parameters.epsilon / 2, parameters.epsilon,
                                                              2 * parameters.epsilon) if e <= LARGEST]


def expected_error(parameters, reporters: int | None = None) -> ExpectedError:
    """The parameters' expected error, for the ``reporters`` users counted where known (default: n)."""
    return ExpectedError(**with_reporters(parameters.expected_error, reporters=reporters))


def report_parameters(parameters) -> dict[str, Scalar]:
    """The frozen parameters and what follows from them."""
    return {**parameters.to_dict(), **parameters.derived()}


def _drop_none(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _drop_none(v) for k, v in value.items() if v is not None}
    if isinstance(value, (list, tuple)):
        return [_drop_none(v) for v in value]
    return value


def to_json_dict(report: Any) -> dict[str, Any]:
    """A report (or a part of one) as a JSON object; ``None`` fields are left out. A whole document, as a command
    prints it or a service answers it, is :func:`report_document`'s."""
    return _drop_none(dataclasses.asdict(report))


PRIVATE_FLAG = {"type": "boolean", "title": "Private", "description":
                "true only when the whole document is a private release: nothing in it was computed from the raw "
                "data except by the protocol's release (no true counts or sums, realised error, z-score or recall), "
                "and no run or privacy block in it says private: false (a seeded simulation, an evaluation); a "
                "calibration, an audit or an accounting holds no data"}


def json_document(content: dict[str, Any], *, from_data: bool) -> dict[str, Any]:
    """Every JSON document privagg prints, writes or answers: its ``private`` flag first (:data:`PRIVATE_FLAG`),
    then ``content``. ``from_data``: the document holds figures computed from the raw data beside the release;
    any ``private: false`` inside it (a privacy block, a seeded simulation) also makes it false."""
    return {"private": not from_data and not _says_not_private(content), **content}


DATA_BESIDE = ("data beside the release: the document holds figures computed from the raw data besides the release "
               "(its private flag is false)")  # why a document whose privacy block says private is not


def document_privacy(document: dict[str, Any]) -> PrivacyDescription:
    """The guarantee a release's JSON document states, for printing it (a served result, a demo's service part): its
    privacy block, not private where the document's own ``private`` flag is false though the block says private
    (something beside the release was computed from the data)."""
    privacy = PrivacyDescription.from_dict(document["privacy"])
    if document.get("private") is not False or not privacy.private:
        return privacy
    return privacy.as_unfounded(DATA_BESIDE)


def report_document(report: Any) -> dict[str, Any]:
    """A report as its command prints it: :func:`json_document` of its fields, from the data when any field marked
    :data:`FROM_DATA` is set in it (the true counts of an evaluation, the errors of a comparison...)."""
    return json_document(to_json_dict(report), from_data=_holds_data(report))


def _holds_data(value: Any) -> bool:
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return any((f.metadata.get("from_data") and getattr(value, f.name) is not None) or
                   _holds_data(getattr(value, f.name)) for f in dataclasses.fields(value))
    if isinstance(value, (list, tuple)):
        return any(_holds_data(v) for v in value)
    if isinstance(value, dict):
        return any(_holds_data(v) for v in value.values())
    return False


def _says_not_private(value: Any) -> bool:
    if isinstance(value, dict):
        return value.get("private") is False or any(_says_not_private(v) for v in value.values())
    if isinstance(value, (list, tuple)):
        return any(_says_not_private(v) for v in value)
    return False


def json_schema(report_type: type) -> dict[str, Any]:
    """The JSON Schema of a report type's document (pydantic, loaded here only): its fields and the
    document's ``private`` flag (:func:`json_document`)."""
    from pydantic import TypeAdapter

    globals().setdefault("Parameters", Union[tuple(e.parameters for e in registry.ENTRIES if e.implemented)])
    schema = TypeAdapter(report_type).json_schema(mode="serialization")
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["properties"] = {"private": PRIVATE_FLAG, **schema["properties"]}  # a type's own flag stays its own
    schema["required"] = ["private", *(name for name in schema.get("required", []) if name != "private")]
    calibrations = sorted({c for e in registry.ENTRIES if e.implemented for c in e.calibrations})
    for name in ("Mechanism", "PrivacyDescription"):  # a privacy method is a calibration of some entry
        method = schema.get("$defs", {}).get(name, {}).get("properties", {}).get("method")
        if method is not None:
            method["enum"] = calibrations
    return schema


REPORT_TYPES = {"calibrate": CalibrationReport, "estimate": EstimateReport, "estimate-vector": VectorEstimateReport,
                "estimate-hh": HeavyHitterReport,
                "analyze": AnalysisReport, "analyze-vector": VectorAnalysisReport, "analyze-hh": HeavyHitterAnalysisReport,
                "compare": CompareReport,
                "audit": AuditReport, "account": AccountReport, "demo-sharing": SharingDemoReport}
