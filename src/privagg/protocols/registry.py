"""One entry per protocol: the single list the CLI, the JSON Schema, ``privagg protocols`` and the
contract tests are generated from.

Adding a protocol means one module under ``protocols/`` (parameters,
calibration function, roles) and one :class:`ProtocolEntry` in
:data:`ENTRIES` (docs/architecture.md, "Adding a protocol"). Planned
protocols are listed with ``status="planned"`` and no roles.

Also the public entry points that work for every protocol:
:func:`calibrate`, :func:`load_parameters`, :func:`client`,
:func:`analyzer`.
"""

from __future__ import annotations

import dataclasses
import importlib
import inspect
import json
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np

from ..errors import ParameterError, checked_arguments, kind_of
from .kinds import Family, ResultKind, Topology
from .parameters import check_parameters, check_pure_delta
from .roles import MultiRound


@dataclass(frozen=True)
class _Reference:
    """An object of a protocol module, named: the module is imported when an entry first hands it out."""

    module: str
    name: str

    def resolve(self) -> Any:
        return getattr(importlib.import_module(f"{__package__}.{self.module}"), self.name)


class _Module:
    """A protocol module not yet imported: ``bib.calibrate_fe1`` is a :class:`_Reference` to its attribute. The
    entries below name their roles through these, so that a command imports only its own protocol's module
    (``privagg estimate olh`` loads local_baselines, not FE's kernels, the sampling family or the services)."""

    def __init__(self, module: str) -> None:
        self._module = module

    def __getattr__(self, name: str) -> _Reference:
        return _Reference(self._module, name)


bib, cb, hh, lb = (_Module(m) for m in ("balls_into_bins", "central_baselines", "heavy_hitters", "local_baselines"))
pb, ss, sv = (_Module(m) for m in ("privacy_blanket", "sampling_sharing", "sparse_vector"))
sc, sl, ssv = (_Module(m) for m in ("sampling_calibration", "sampling_laws", "sampling_servers"))
dgp, hhl, tsp = (_Module(m) for m in ("dpdg_parameters", "heavy_hitter_laws", "tss_parameters"))
ssp, tp = (_Module(m) for m in ("sharing_server", "two_server_parties"))


class _Role:
    """A field of an entry (or a discovery stage) holding a protocol module's object, given as the object or as a
    :class:`_Reference`: the first read of any such field resolves them all (:func:`_resolve`), so that reading
    the entry's metadata (name, options, calibrations...) imports nothing."""

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    def __get__(self, holder: Any, owner: type | None = None) -> Any:
        if holder is None:
            return None  # the field's default
        if "_resolved" not in holder.__dict__:
            _resolve(holder)
        return holder.__dict__[self.name]

    def __set__(self, holder: Any, value: Any) -> None:
        holder.__dict__[self.name] = value


def _resolve(holder: Any) -> None:
    """Import what ``holder``'s role fields name; an entry's client and analyzer then stamp and check their
    parameters' fingerprint (roles.py, one place for every protocol)."""
    from .roles import with_fingerprints

    for name, role in vars(type(holder)).items():
        if isinstance(role, _Role) and isinstance(holder.__dict__[name], _Reference):
            holder.__dict__[name] = holder.__dict__[name].resolve()
    holder.__dict__["_resolved"] = True
    if isinstance(holder, ProtocolEntry):
        for role in (holder.client, holder.analyzer):
            if isinstance(role, type):
                with_fingerprints(role)


@dataclass(frozen=True)
class Option:
    """A protocol-specific calibration option (``--name`` on the command line, ``name=`` in Python)."""

    name: str
    type: type
    help: str
    required: bool = False  # the protocol cannot be calibrated without it (compare, which takes none, refuses it)


@dataclass(frozen=True)
class DiscoveryStage:
    """A first stage that finds what a protocol then estimates (``--discover-phi``; the shuffle FE paper's two
    stages, §5): ``protocol`` (a heavy-hitter protocol taking ``phi``) runs over the protocol's own domain at its
    (epsilon, delta), each user's item there ``items(parameters, inputs, rng)``; ``candidates(parameters,
    reported)`` are the items it reports that the second stage estimates. The two stages compose
    (:func:`privagg.pipelines.staged_privacy`)."""

    protocol: str
    items: Callable[[Any, Any, np.random.Generator], np.ndarray] = _Role()  # type: ignore[assignment]
    candidates: Callable[[Any, Any], np.ndarray] = _Role()  # type: ignore[assignment]
    what: str = ""  # what the first stage runs over, for reports ("the users' rounded cells")


@dataclass(frozen=True)
class ProtocolEntry:
    """What privagg knows of one protocol."""

    name: str
    title: str
    family: Family
    topology: Topology
    trust: str
    messages_per_user: str
    reference: str
    status: Literal["implemented", "planned"] = "implemented"
    result: ResultKind = ResultKind.FREQUENCY_TABLE
    # a small instance, calibrate's keyword arguments, that every calibration but the closed form accepts: the
    # contract tests check its parameters, and the tests that need some instance of each protocol take it
    example: dict[str, Any] = field(default_factory=dict)
    calibrate: Callable[..., Any] | None = _Role()  # type: ignore[assignment]
    # the frozen parameters: from_dict, domain_max, theory, privacy
    parameters: type | None = _Role()  # type: ignore[assignment]
    client: Callable[[Any], Any] | None = _Role()  # type: ignore[assignment]
    analyzer: Callable[..., Any] | None = _Role()  # type: ignore[assignment]
    fast: Callable[..., Any] | None = _Role()  # type: ignore[assignment]
    # a multi-round protocol's rounds and parties (the simulator and services run it)
    rounds: MultiRound | None = _Role()  # type: ignore[assignment]
    options: tuple[Option, ...] = ()
    calibrations: tuple[str, ...] = ()
    # The exact auditor (privagg.audit): one user's exact output law, and tiny instances it can enumerate
    # (calibrate's keyword arguments; "calibrations": only these, "slow": more than a few seconds, for make test-all);
    # every entry with a law joins the audit grid of the tests.
    message_law: Callable[[Any, int], dict] | None = _Role()  # type: ignore[assignment]
    # the law's size before it is built (exact_laws.LawSize)
    law_size: Callable[[Any, int], Any] | None = _Role()  # type: ignore[assignment]
    audit_instances: tuple[dict[str, Any], ...] = ()
    # neighbouring pairs of datasets (lists of items) to audit, when the guarantee needs a data condition
    audit_pairs: Callable[[Any, int], Any] | None = _Role()  # type: ignore[assignment]
    # (pairs, joint states, cached states) the exact audit of (parameters, users) would take, before it is built
    audit_cost: Callable[..., tuple[float, float, float]] | None = _Role()  # type: ignore[assignment]
    pure: bool = False  # pure eps-DP: no delta anywhere (calibrate takes delta = 0)
    # messages or error grow with B: no default domain for --input, and the bundled data is the
    # datasets.SMALL_VOCABULARY most common words as categories (the 20,000 hashed into 2^24 would not run)
    small_domain: bool = False
    # users hold one (coordinate, weight) row each, not a vector: the parameters' one_sparse, read here by the command
    # line's help without importing the protocol's module
    one_sparse: bool = False
    discovery: DiscoveryStage | None = None  # a first stage that can find the candidates (--discover-phi)
    # privagg demo-service runs it over the bundled words: through the collector and the analyzer (a frequency
    # table's top words, or a heavy-hitter list), or through its rounds' servers (a multi-round protocol)
    demo: bool = False

    @property
    def implemented(self) -> bool:
        return self.status == "implemented"

    @property
    def trusted_curator(self) -> bool:
        """Users send their values in the clear to a curator, which adds the noise (no client randomizer)."""
        return self.topology is Topology.CENTRAL

    @property
    def multi_round(self) -> bool:
        """Users take part in several rounds with a server (no client): the entry's ``rounds`` declares them."""
        return self.rounds is not None

    @property
    def single_batch(self) -> bool:
        """The guarantee counts on the analyzer taking all users' messages in one batch (the shuffle's)."""
        return self.topology is Topology.SHUFFLE

    @property
    def served(self) -> bool:
        """One round, a client randomizer and an analyzer: the services (collector, analyzer) run it (fe-hh's tree
        walk too: each device reports at one level, the analyzer walks the levels). Read without importing the
        protocol's module (the command line's choices)."""
        return self.__dict__["client"] is not None

    @property
    def categorical(self) -> bool:
        """Users hold one of N public categories (codes by their place in the list: no items to hash)."""
        return self.family is Family.SAMPLING_SHARING


def _example(domain_size: int, pure: bool = False, n_users: int = 10_000, **options: Any) -> dict[str, Any]:
    """An entry's example: ``n_users`` (10,000) users at epsilon 1 (and delta 1e-6, unless pure eps-DP) over
    ``domain_size``. The instance the tests take of every protocol: the contract tests' (its users' population is
    Zipf-like, or every category held by n / 2N users for a categorical protocol), the same-seeds record's, the
    services' (on a smaller domain), every calibration's but the closed form's."""
    return dict(epsilon=1.0, **({} if pure else {"delta": 1e-6}), n_users=n_users, domain_size=domain_size, **options)


# What the entries repeat of the modules they do not import (tests/test_start_up.py checks them against the modules'
# own): the local baselines' and the sampling family's calibrations, DPDG's, fe-hh's string lengths.
LOCAL_CALIBRATIONS = ("exact",)
SAMPLING_CALIBRATIONS = ("exact", "paper", "closed_form")
NOISE_CALIBRATIONS = ("tight", "classic")
MAX_LENGTH_MAX, DEFAULT_MAX_LENGTH = 64, 32


# the sampling family's example: n N shares a user (the contract tests simulate DPDS among all n users), and enough
# holders a category for the paper's p = 1 - e^-eps to meet delta = 1e-6 (2,000 users at beta = 0.05 over N = 10)
_SAMPLING_USERS = 2_000


# what the three balls-into-bins entries share: the family, its calibrations, its exact message law
_BALLS_INTO_BINS: dict[str, Any] = dict(family=Family.BALLS_INTO_BINS,
                                        calibrations=("numeric", "hockey_stick", "closed_form"),
                                        message_law=bib.message_law, law_size=bib.law_size)
_HONEST = Option("honest_fraction", float, "G in (0, 1]: the guarantee holds while at least G n users follow the "
                 "protocol (the others' dummies are not counted on; default 1)")
# DPDS and DPDG's neighbour graph (docs/privacy.md, "Neighbour graphs"; `privagg calibrate dpds --colluding F
# --dropouts F` chooses k)
_GRAPH = (Option("degree", int, "k: each user masks with, and backs his keys up among, k neighbours of a random graph "
                 "(even; default: all n - 1 others, the complete graph)"),
          Option("graph_dropouts", float, "the fraction of honest users the graph's threshold plans to drop out "
                 "(default 0)"))
# "calibrations" narrows an instance: the closed form's noise (mu >= 32 ln 2 at any delta) is too much to enumerate
# but on the smallest domain. A calibration that refuses an instance (the closed form above eps = 1) claims nothing.
_HISTOGRAM_AUDITS = (dict(n_users=3, domain_size=3, epsilon=1.0, delta=0.1, calibrations=("numeric", "hockey_stick")),
                     dict(n_users=4, domain_size=3, epsilon=2.0, delta=0.05),
                     dict(n_users=3, domain_size=2, epsilon=1.0, delta=0.1))

# the local baselines (protocols/local_baselines.py): pure eps-LDP, no delta; one user's report is audited
_LOCAL: dict[str, Any] = dict(family=Family.LOCAL_BASELINES, calibrations=LOCAL_CALIBRATIONS, pure=True,
                              message_law=lb.message_law, law_size=lb.law_size, audit_pairs=lb.audit_pairs,
                              audit_instances=(dict(n_users=2, domain_size=3, epsilon=1.0),
                                               dict(n_users=2, domain_size=4, epsilon=0.5)))

# the central baselines (protocols/central_baselines.py): the curator's noise audited as one more "user"
_CENTRAL: dict[str, Any] = dict(family=Family.CENTRAL_BASELINES, calibrations=("exact",), message_law=cb.message_law,
                                law_size=cb.law_size, audit_pairs=cb.audit_pairs)

# the sampling family (protocols/sampling_sharing.py and the modules beside it)
_SAMPLING: dict[str, Any] = dict(family=Family.SAMPLING_SHARING, calibrations=SAMPLING_CALIBRATIONS,
                                 message_law=sl.message_law, law_size=sl.law_size, audit_pairs=sl.audit_pairs,
                                 audit_cost=sl.audit_cost)
# beta = 1/3 of n = 6 users over N = 2 categories: count vectors (2, 4), (3, 3), (4, 2) and their neighbours
# (the closed form's delta needs hundreds of holders: its instance claims a large delta, to be audited at all)
_SAMPLING_AUDITS = (dict(n_users=6, domain_size=2, epsilon=1.0, delta=0.2, min_count_fraction=1 / 3),
                    dict(n_users=12, domain_size=3, epsilon=1.0, delta=0.1, min_count_fraction=0.25),
                    dict(n_users=40, domain_size=2, epsilon=1.0, delta=0.05, min_count_fraction=0.45),
                    dict(n_users=40, domain_size=2, epsilon=1.0, delta=0.7, min_count_fraction=0.45,
                         calibrations=("closed_form",)))
_BETA = Option("min_count_fraction", float, "beta in (0, 1/N]: every category is held by at least beta n users "
               "(required: the guarantee rests on it; checked on the data)", required=True)
_P = Option("sampling_probability", float, "p in (0, 1]: fix p instead of calibrating it (its delta is computed, "
            "and must meet --delta)")
_TSS = (Option("report_fraction", float, "alpha in (0, 1]: each user reports alpha N categories (required)",
               required=True),
        Option("second_stage", str, "uniform (default) or adaptive report sets"),
        Option("gamma", float, "G >= 1: the adaptive stage's bias (ln G-LDP against S1; default 2)"))


ENTRIES: tuple[ProtocolEntry, ...] = (
    ProtocolEntry(
        name="bib", small_domain=True, title="M^BIB: balls into bins, trusted curator", topology=Topology.CENTRAL,
        example=_example(100),
        trust="central (trusted curator)", messages_per_user="1", reference="shuffle FE paper, Algorithm 1",
        calibrate=bib.calibrate_bib, parameters=bib.BIBParameters, analyzer=bib.BallsIntoBinsCurator,
        audit_instances=_HISTOGRAM_AUDITS, **_BALLS_INTO_BINS),
    ProtocolEntry(
        name="fe0", small_domain=True, title="FE0: value + blanket noise (small domains)", topology=Topology.SHUFFLE,
        example=_example(100),
        trust="shuffle (trusted shuffler)", messages_per_user="1 + rho, rho = mu B / n",
        reference="shuffle FE paper, Algorithms 2-3", calibrate=bib.calibrate_fe0, parameters=bib.FE0Parameters,
        client=bib.FE0Client, analyzer=bib.FE0Analyzer, fast=bib.fe0_fast_aggregate,
        audit_instances=_HISTOGRAM_AUDITS, options=(_HONEST,), **_BALLS_INTO_BINS),
    ProtocolEntry(
        name="fe1", title="FE1: universal hashing, 1 + o(1) messages (any domain)", topology=Topology.SHUFFLE,
        example=_example(5000, bins=50), demo=True,
        trust="shuffle (trusted shuffler)", messages_per_user="1 + rho, rho = mu b / n",
        reference="shuffle FE paper, §3.2", calibrate=bib.calibrate_fe1, parameters=bib.FE1Parameters,
        client=bib.FE1Client, analyzer=bib.FE1Analyzer, fast=bib.fe1_fast_aggregate, **_BALLS_INTO_BINS,
        # the closed form (rho >= 22 here) is beyond enumeration over FE1's 12 message types
        audit_instances=(dict(n_users=2, domain_size=3, bins=2, epsilon=1.0, delta=0.3,
                              calibrations=("numeric", "hockey_stick")),
                         dict(n_users=2, domain_size=3, bins=2, epsilon=2.0, delta=0.1)),
        options=(Option("c", float, "b = floor(n / ln^c n) hash bins (default c = 1)"),
                 Option("bins", int, "hash range b, instead of --c"), _HONEST)),
    ProtocolEntry(
        name="fe-hh", title="Heavy hitters: prefix tree of FE1 levels (integers up to 2^64, strings)",
        example=_example(2**20, phi=0.1), demo=True,
        family=Family.BALLS_INTO_BINS, topology=Topology.SHUFFLE, trust="shuffle (trusted shuffler)",
        messages_per_user="p_f (1 + rho), rho = mu b / m", reference="shuffle FE paper, §4 (the authors' HHD code)",
        result=ResultKind.HEAVY_HITTER_LIST, calibrate=hh.calibrate_fe_hh, parameters=hh.HeavyHitterParameters,
        client=hh.HeavyHitterClient, analyzer=hh.HeavyHitterAnalyzer,
        # the hockey-stick bound first: every calibration is verified with it, and it needs 14% less mu
        calibrations=("hockey_stick", "numeric", "closed_form"), message_law=hhl.message_law,
        law_size=hhl.law_size,
        # one level (B = 2) is the largest enumerable instance (two levels already take 44 message types); phi
        # 0.9 of 24 users makes p_f = 0.89, so the thinning is audited too; the closed form's rho is beyond it
        audit_instances=(dict(n_users=24, domain_size=2, phi=0.9, epsilon=1.0, delta=0.2, calibrations=("numeric",),
                              slow=True),
                         dict(n_users=24, domain_size=2, phi=0.9, epsilon=1.0, delta=0.1,
                              calibrations=("hockey_stick",), slow=True)),
        options=(Option("phi", float, "phi in (0, 1): report the items held by at least phi n users (required)",
                        required=True),
                 Option("max_length", int, f"L: string items of at most L bytes, discovered byte by byte "
                        f"(1..{MAX_LENGTH_MAX}, default {DEFAULT_MAX_LENGTH} for text input; --domain is then "
                        "left out)"))),
    ProtocolEntry(
        name="sparse-vector", title="1-sparse vector sums: rounded weights, FE0 over (coordinate, level) cells",
        example=_example(100), one_sparse=True,
        topology=Topology.SHUFFLE, trust="shuffle (trusted shuffler)",
        messages_per_user="1 + rho, rho = mu (B k + 1) / n",
        reference="shuffle FE paper, §5 (low dimension; our construction)", result=ResultKind.VECTOR_SUM,
        calibrate=sv.calibrate_sparse_vector, parameters=sv.SparseVectorParameters, client=sv.SparseVectorClient,
        analyzer=sv.SparseVectorAnalyzer, fast=sv.sparse_fast_aggregate, **_BALLS_INTO_BINS,
        # cells are the audited items: (coordinate, level) with a deterministic rounding, and the level-0 cell
        audit_instances=(dict(n_users=3, domain_size=1, levels=2, epsilon=1.0, delta=0.1,
                              calibrations=("numeric", "hockey_stick")),
                         dict(n_users=4, domain_size=2, levels=1, epsilon=2.0, delta=0.05),
                         dict(n_users=3, domain_size=1, levels=1, epsilon=1.0, delta=0.1)),
        options=(Option("levels", int, "k: weights are randomly rounded to {0..k} (default: the k that minimises "
                        "the error bound, about (3 n / (2 B mu))^(1/3))"), _HONEST)),
    ProtocolEntry(
        name="sparse-vector-hashed", title="1-sparse vector sums over huge dimensions: FE1 on candidates",
        example=_example(4096, bins=50), one_sparse=True,
        topology=Topology.SHUFFLE, trust="shuffle (trusted shuffler)", messages_per_user="1 + rho, rho = mu b / n",
        reference="shuffle FE paper, §5 (high dimension; the authors' VS code)", result=ResultKind.VECTOR_SUM,
        discovery=DiscoveryStage("fe-hh", sv.discovery_items, sv.discovered_coordinates, "the users' rounded cells"),
        calibrate=sv.calibrate_hashed_sparse_vector, parameters=sv.HashedSparseVectorParameters,
        client=sv.SparseVectorClient, analyzer=sv.HashedSparseVectorAnalyzer, fast=sv.sparse_fast_aggregate,
        **_BALLS_INTO_BINS,  # as FE1's: the closed form is beyond enumeration
        audit_instances=(dict(n_users=2, domain_size=2, bins=2, epsilon=1.0, delta=0.3,
                              calibrations=("numeric", "hockey_stick")),),
        options=(Option("c", float, "b = floor(n / ln^c n) hash bins (default c = 3, as the authors' VS code; "
                        "c = 1 below about 1,000 users)"),
                 Option("bins", int, "hash range b, instead of --c"), _HONEST)),
    ProtocolEntry(
        name="blanket-hist", small_domain=True, title="Privacy-blanket histogram R^PH", family=Family.PRIVACY_BLANKET,
        topology=Topology.SHUFFLE,
        example=_example(6),  # the paper's gamma <= 1 needs about 80 B ln(2 / delta) / eps^2 users
        trust="shuffle (trusted shuffler)", messages_per_user="1", reference="shuffle vector paper, Algorithm 1",
        calibrate=pb.calibrate_blanket_hist, parameters=pb.BlanketHistParameters, client=pb.BlanketClient,
        analyzer=pb.BlanketAnalyzer, calibrations=("tight", "paper"), message_law=pb.message_law,
        law_size=pb.law_size,
        # the paper's closed form needs gamma <= 1: some hundreds of users even on two values
        audit_instances=(dict(n_users=3, domain_size=3, epsilon=1.0, delta=0.2, calibrations=("tight",)),
                         dict(n_users=4, domain_size=3, epsilon=2.0, delta=0.1, calibrations=("tight",)),
                         dict(n_users=200, domain_size=2, epsilon=0.9, delta=0.1)),
        options=(_HONEST,)),
    ProtocolEntry(
        name="blanket-vector", title="Privacy-blanket vector sums R_{d,k,n,t}", family=Family.PRIVACY_BLANKET,
        example=_example(2),
        topology=Topology.SHUFFLE, trust="shuffle (trusted shuffler)", messages_per_user="t",
        reference="shuffle vector paper, Algorithms 2-3", result=ResultKind.VECTOR_SUM,
        calibrate=pb.calibrate_blanket_vector,
        parameters=pb.BlanketVectorParameters, client=pb.VectorClient, analyzer=pb.VectorAnalyzer,
        calibrations=("tight", "paper"), message_law=pb.vector_message_law, law_size=pb.vector_law_size,
        audit_pairs=pb.grid_pairs,
        # grid vectors of [0, 1]^d, one or two reports a user; the paper's gamma needs hundreds of users on d = k = 1
        audit_instances=(dict(n_users=2, domain_size=2, epsilon=1.0, delta=0.2, levels=2, calibrations=("tight",)),
                         dict(n_users=3, domain_size=2, epsilon=2.0, delta=0.1, levels=2, calibrations=("tight",)),
                         dict(n_users=200, domain_size=1, epsilon=0.9, delta=0.1, levels=1),
                         dict(n_users=3, domain_size=3, epsilon=2.0, delta=0.2, levels=1, coordinates_per_user=2,
                              calibrations=("tight",))),
        options=(Option("levels", int, "k: coordinates are randomly rounded to {0..k} (default 3)"),
                 Option("coordinates_per_user", int, "t: coordinates each user reports (default 1)"), _HONEST)),
    ProtocolEntry(
        name="dpcs", title="DPCS: a trusted server samples the records and publishes the sampled counts",
        topology=Topology.CENTRAL,
        example=_example(10, n_users=_SAMPLING_USERS, min_count_fraction=0.05),
        trust="central (trusted server)", messages_per_user="1", reference="fair DP paper, §III-A (DPCS)",
        calibrate=sc.calibrate_dpcs, parameters=ss.DPCSParameters, analyzer=ssv.SamplingCurator,
        options=(_BETA, _P), audit_instances=_SAMPLING_AUDITS, **_SAMPLING),
    ProtocolEntry(
        name="dpcs-star", topology=Topology.CENTRAL,
        # what it adds to DPCS is the form of the release, not its numbers
        title="DPCS*: DPCS whose server publishes the sampled counts as n additive shares over F_q, which add up "
              "to DPCS's counts (the same estimates and guarantee; the view DPDS's server has, which DPDS is "
              "proved against)",
        example=_example(10, n_users=_SAMPLING_USERS, min_count_fraction=0.05),
        trust="central (trusted server)", messages_per_user="1", reference="fair DP paper, §III-A (DPCS*)",
        calibrate=sc.calibrate_dpcs_star, parameters=ss.DPCSStarParameters, analyzer=ssv.SharingCurator,
        options=(_BETA, _P), audit_instances=_SAMPLING_AUDITS, **_SAMPLING),
    ProtocolEntry(
        name="dpds", title="DPDS: users sample themselves and share one-hot vectors", topology=Topology.SECRET_SHARING,
        example=_example(10, n_users=_SAMPLING_USERS, min_count_fraction=0.05), demo=True,
        trust="no trusted server (honest-but-curious users and server)",
        messages_per_user="n N field elements sent, N to the server", reference="fair DP paper, Algorithm 2",
        calibrate=sc.calibrate_dpds, parameters=ss.DPDSParameters, analyzer=ssv.SumServer, fast=ssv.fast_aggregate,
        rounds=ssp.PROTOCOL, options=(_BETA, _P, _HONEST, *_GRAPH), audit_instances=_SAMPLING_AUDITS, **_SAMPLING),
    ProtocolEntry(
        name="dpdg", title="DPDG: distributed discrete Gaussian noise, shared one-hot vectors",
        example=_example(10, n_users=_SAMPLING_USERS), demo=True,
        family=Family.SAMPLING_SHARING, topology=Topology.SECRET_SHARING,
        trust="no trusted server (honest-but-curious users and server)",
        messages_per_user="n N field elements sent, N to the server", reference="fair DP paper, §III-B (DPDG)",
        calibrate=sc.calibrate_dpdg, parameters=dgp.DPDGParameters, analyzer=ssv.SumServer, fast=ssv.fast_aggregate,
        rounds=ssp.PROTOCOL, calibrations=NOISE_CALIBRATIONS, message_law=sl.message_law, law_size=sl.law_size,
        audit_cost=sl.audit_cost,
        # scale 2^0 and tiny noise: each user's law is enumerable (the noise truncated at 12 sd, docs/privacy.md)
        audit_instances=(dict(n_users=2, domain_size=2, epsilon=2.0, delta=0.1, fractional_bits=0),
                         dict(n_users=2, domain_size=2, epsilon=1.0, delta=0.05, fractional_bits=1,
                              calibrations=("tight",), slow=True)),
        options=(Option("fractional_bits", int, "k: noise at the fixed-point scale 2^k (default 8)"), _HONEST,
                 *_GRAPH)),
    ProtocolEntry(
        name="tss", title="TSS: two servers, report sets and elected helpers", topology=Topology.TWO_SERVERS,
        example=_example(10, n_users=_SAMPLING_USERS, min_count_fraction=0.05, report_fraction=0.5), demo=True,
        trust="two non-colluding servers", messages_per_user="about alpha^2 n N field elements",
        reference="fair DP paper, Algorithm 3", calibrate=sc.calibrate_tss, parameters=tsp.TSSParameters,
        analyzer=ssv.SumServer, fast=ssv.fast_aggregate, rounds=tp.PROTOCOL, options=(_BETA, _P, *_TSS, _HONEST),
        **_SAMPLING,
        audit_instances=(dict(_SAMPLING_AUDITS[0], report_fraction=0.5), dict(_SAMPLING_AUDITS[1], report_fraction=2 / 3),
                         dict(_SAMPLING_AUDITS[2], report_fraction=0.5), dict(_SAMPLING_AUDITS[3], report_fraction=0.5),
                         # the adaptive stage, its report sets in S2's view (sampling_laws._adaptive_law)
                         *(dict(_SAMPLING_AUDITS[i], report_fraction=fraction, second_stage="adaptive", gamma=2.0,
                                calibrations=("exact",)) for i, fraction in ((1, 2 / 3), (2, 0.5))))),
    ProtocolEntry(
        name="tss-collusion", title="TSS': phi + 1 helpers per item against phi colluding users",
        example=_example(10, n_users=_SAMPLING_USERS, min_count_fraction=0.05, report_fraction=0.5, colluders=2),
        demo=True,
        topology=Topology.TWO_SERVERS, trust="two non-colluding servers; at most phi colluding users",
        messages_per_user="about alpha^2 n N field elements", reference="fair DP paper, §III-C (TSS')",
        calibrate=sc.calibrate_tss_collusion, parameters=tsp.TSSCollusionParameters, analyzer=ssv.SumServer,
        fast=ssv.fast_aggregate, rounds=tp.PROTOCOL,
        options=(_BETA, _P, *_TSS, Option("colluders", int, "phi >= 1: the largest group of "
                                                              "colluding users"), _HONEST), **_SAMPLING,
        audit_instances=tuple(dict(_SAMPLING_AUDITS[i], report_fraction=0.5, colluders=1) for i in (0, 2, 3))),
    ProtocolEntry(
        name="laplace", title="Laplace: counts plus exact discrete Laplace noise (trusted curator)",
        example=_example(100, pure=True),
        topology=Topology.CENTRAL, trust="central (trusted curator)", messages_per_user="1",
        reference="Dwork, McSherry, Nissim, Smith 2006; the discrete sampler of Canonne, Kamath, Steinke 2020",
        calibrate=cb.calibrate_laplace, parameters=cb.LaplaceParameters, analyzer=cb.CentralCurator, pure=True,
        audit_instances=(dict(n_users=2, domain_size=2, epsilon=1.0), dict(n_users=3, domain_size=2, epsilon=2.0)),
        **_CENTRAL),
    ProtocolEntry(
        name="gaussian", title="Gaussian: counts plus exact discrete Gaussian noise (trusted curator)",
        example=_example(100),
        topology=Topology.CENTRAL, trust="central (trusted curator)", messages_per_user="1",
        reference="Canonne, Kamath, Steinke 2020 (the discrete Gaussian)", calibrate=cb.calibrate_gaussian,
        parameters=cb.GaussianParameters, analyzer=cb.CentralCurator,
        audit_instances=(dict(n_users=2, domain_size=2, epsilon=1.0, delta=0.1),
                         dict(n_users=2, domain_size=2, epsilon=2.0, delta=0.01)), **_CENTRAL),
    ProtocolEntry(
        name="grr", small_domain=True, title="GRR: k-ary randomized response", topology=Topology.LOCAL,
        trust="local (no trusted party)",
        example=_example(100, pure=True),
        messages_per_user="1", reference="Kairouz, Oh, Viswanath 2014", calibrate=lb.calibrate_grr,
        parameters=lb.GRRParameters, client=lb.GRRClient, analyzer=lb.GRRAnalyzer, **_LOCAL),
    ProtocolEntry(
        name="oue", small_domain=True, title="OUE: optimized unary encoding", topology=Topology.LOCAL,
        trust="local (no trusted party)",
        example=_example(100, pure=True),
        messages_per_user="1/2 + (B - 1) / (e^eps + 1) set bits", reference="Wang, Blocki, Li, Jha 2017",
        calibrate=lb.calibrate_oue, parameters=lb.OUEParameters, client=lb.OUEClient, analyzer=lb.OUEAnalyzer,
        **_LOCAL),
    ProtocolEntry(
        name="olh", title="OLH: optimized local hashing (universal hashes into g = e^eps + 1 values)",
        example=_example(5000, pure=True, bins=50),
        topology=Topology.LOCAL, trust="local (no trusted party)", messages_per_user="1",
        reference="Wang, Blocki, Li, Jha 2017", calibrate=lb.calibrate_olh, parameters=lb.OLHParameters,
        client=lb.OLHClient, analyzer=lb.OLHAnalyzer,
        options=(Option("bins", int, "g: the hash range (default round(e^eps) + 1)"),),
        **{**_LOCAL, "audit_instances": (dict(n_users=2, domain_size=3, epsilon=1.0, bins=2),
                                         dict(n_users=2, domain_size=3, epsilon=2.0, bins=3))}),
    ProtocolEntry(
        name="hadamard", title="Hadamard randomized response", topology=Topology.LOCAL,
        trust="local (no trusted party)",
        example=_example(100, pure=True),
        messages_per_user="1", reference="Acharya, Sun, Zhang 2019 (Hadamard response family)",
        calibrate=lb.calibrate_hadamard, parameters=lb.HadamardParameters, client=lb.HadamardClient,
        analyzer=lb.HadamardAnalyzer, **_LOCAL),
)

REGISTRY: dict[str, ProtocolEntry] = {entry.name: entry for entry in ENTRIES}
IMPLEMENTED: tuple[str, ...] = tuple(e.name for e in ENTRIES if e.implemented)


def register(entry: ProtocolEntry) -> None:
    """Add ``entry`` (a protocol of a module outside privagg) to :data:`ENTRIES`, :data:`REGISTRY` and
    :data:`IMPLEMENTED`. What is generated from the registry at import (the CLI's commands, the report schemas'
    protocol names, the stored aggregates' types) picks it up when imported after this call."""
    global ENTRIES, IMPLEMENTED
    if entry.name in REGISTRY:
        raise ParameterError("protocol", "a name no entry has", entry.name)
    ENTRIES = (*ENTRIES, entry)
    REGISTRY[entry.name] = entry
    IMPLEMENTED = tuple(e.name for e in ENTRIES if e.implemented)


def names(where: Callable[[ProtocolEntry], bool]) -> list[str]:
    """The implemented protocols whose entry satisfies ``where``, in the registry's order (messages list them)."""
    return [e.name for e in ENTRIES if e.implemented and where(e)]


def listed(names: Sequence[str], last: str = "or") -> str:
    """Names as prose: "fe1", "fe0 or fe1", "dpds, dpdg or tss"."""
    names = list(names)
    return names[0] if len(names) == 1 else f"{', '.join(names[:-1])} {last} {names[-1]}"


def aggregate_types() -> dict[str, type]:
    """The classes of the implemented analyzers' aggregates (their ``agg_init``'s), by name: what a service may
    store (:mod:`privagg.service.shuffle.aggregate_codec`)."""
    from .roles import aggregate_type

    found = (aggregate_type(e.analyzer) for e in ENTRIES if e.implemented and isinstance(e.analyzer, type))
    return {kind.__name__: kind for kind in found if kind is not None}


def full_domain_preimages(parameters, messages: int) -> int:
    """The hash preimages the analyzer of ``parameters`` walks to count ``messages`` messages over all of [B]
    (its class's ``preimages``: FE1's kernels, sparse-vector-hashed's over its cells), unless it counts its work
    as ``checks`` (OLH: every user's own hash at every item); else 0."""
    role = get(parameters.protocol).analyzer
    if getattr(role, "checks", None) is not None or getattr(role, "preimages", None) is None:
        return 0
    return role.preimages(parameters, messages)


def analyzer_checks(protocol: str, n_users: int, items: int) -> int:
    """The (message, item) checks ``protocol``'s analyzer makes to estimate ``items`` items from ``n_users``
    users: its ``checks`` (OLH: every user's own hash at every item), or 0 where the work does not grow with
    users times items (FE1 hashes each item once per hash function, whoever sent what)."""
    checks = getattr(get(protocol).analyzer, "checks", None)
    return 0 if checks is None else checks(n_users, items)


# Seconds per unit of the work a full-domain estimate adds, on 2 AMD EPYC cores at load average 3 to 5 (issue 44,
# n = 3 over B = 2^24): the domain's arrays, debiasing and ranking, 0.27 s for grr (1.6e-8 an item; olh 0.8 s,
# blanket-hist 0.4 s, hadamard 0.7 s); the central curators' exact noise, 4.3 s (laplace) and 6.5 s (gaussian) for
# 2^24 items; FE1's preimages, 3.6e9 in 15.8 s (2.3e8 a second; 1.2e8 on busier cores, PREIMAGES_MAX); OLH's
# checks, 1.5 to 2.3e9 a second (ANALYZER_CHECKS_MAX).
ITEM_SECONDS = 3e-8
NOISE_SAMPLE_SECONDS = 4e-7
PREIMAGE_SECONDS = 1 / 1.5e8
CHECK_SECONDS = 1 / 1.5e9


def full_domain_seconds(parameters) -> float:
    """About the seconds estimating every item of [B] adds to a run of ``parameters`` (the rates above): whatever
    the number of users, every item is counted, debiased and ranked (and given exact noise by a central curator),
    FE1 walks every message's preimages and OLH checks every user's hash at every item (the analyzer's
    ``noise_per_item``, ``preimages`` and ``checks``)."""
    domain = parameters.domain_size
    noise = getattr(get(parameters.protocol).analyzer, "noise_per_item", False)
    walked = full_domain_preimages(parameters, math.ceil(parameters.n_users * parameters.messages_per_user))
    return (domain * (NOISE_SAMPLE_SECONDS if noise else ITEM_SECONDS) + walked * PREIMAGE_SECONDS
            + analyzer_checks(parameters.protocol, parameters.n_users, domain) * CHECK_SECONDS)


def discovery_parameters(parameters, phi: float):
    """The first stage of a staged run of ``parameters`` (their entry's :class:`DiscoveryStage`): its protocol at
    their (epsilon, delta), calibration and users, over their domain, with ``phi``. A ParameterError names
    ``discover-phi`` (or ``honest-fraction``, which a first stage without that option cannot take)."""
    entry = get(parameters.protocol)
    if entry.discovery is None:
        raise ParameterError("discover-phi", f"given for a {listed(names(lambda e: e.discovery is not None))} task "
                             "(a protocol with a discovery stage)", parameters.protocol)
    stage = get(entry.discovery.protocol)
    honest = {"honest_fraction": parameters.honest_fraction} if any(
        o.name == "honest_fraction" for o in stage.options) else {}
    if not honest and parameters.honest_fraction != 1:
        raise ParameterError("honest-fraction", f"1 with --discover-phi ({stage.name} counts on every user's noise)",
                             parameters.honest_fraction)
    try:
        return calibrate(stage.name, epsilon=parameters.epsilon, delta=parameters.delta, n_users=parameters.n_users,
                         domain_size=parameters.domain_size, calibration=parameters.calibration, phi=phi, **honest)
    except ParameterError as err:
        if err.field != "phi":
            raise
        raise ParameterError("discover-phi", err.accepted.replace("--phi", "--discover-phi").replace(
            "a smaller --domain", "a smaller --dimension"), err.got) from None


def get(name: str) -> ProtocolEntry:
    """The entry of an implemented protocol."""
    if name not in IMPLEMENTED:
        raise ParameterError("protocol", f"one of {', '.join(IMPLEMENTED)}", name)
    return REGISTRY[name]


# The public entry points refuse a call they cannot take as a ParameterError naming the argument (an unknown
# keyword, a missing or extra one, a type their annotation excludes: errors.checked_arguments), here where they
# are defined, so that privagg.calibrate and registry.calibrate are one checked function.

NUMBERS = (int, float, np.integer, np.floating)


@checked_arguments
def calibrate(protocol: str, *, epsilon: float, delta: float | None = None, n_users: int, domain_size: int | None,
              calibration: str | None = None, item_key: str | None = None, **options: Any):
    """Frozen parameters of ``protocol`` for (epsilon, delta)-DP; ``options`` are the entry's options.

    ``calibration``: one of the entry's ``calibrations`` (default: the first).

    ``item_key`` (hex) is the public key that maps text items into the
    domain (:meth:`privagg.ItemEncoder.for_parameters`); it is recorded in
    the parameters so that every client and the analyzer share it.
    """
    entry = get(protocol)
    for option in entry.options:  # numbers where the protocol takes numbers, text where it takes text
        value = options.get(option.name)
        text = option.type is str
        if value is None or (isinstance(value, str) if text else
                             isinstance(value, NUMBERS) and not isinstance(value, (bool, np.bool_))):
            continue
        raise ParameterError(option.name, "a string" if text else "an integer" if option.type is int else "a number",
                             kind_of(value))
    if entry.pure:
        delta = check_pure_delta(protocol, delta)
    elif delta is None:
        raise ParameterError.required("delta", f"for {protocol}, an (epsilon, delta)-DP protocol: a number in (0, 1)")
    allowed = {o.name for o in entry.options}
    for name, value in options.items():
        if name not in allowed and value is not None:
            raise ParameterError(name, f"left out for {protocol} (its options: {sorted(allowed) or 'none'})", value)
    given = {k: v for k, v in options.items() if k in allowed and v is not None}  # None: the option's default
    calibration = entry.calibrations[0] if calibration is None else calibration
    parameters = entry.calibrate(epsilon, delta, n_users, domain_size, calibration=calibration, **given)
    return parameters if item_key is None else dataclasses.replace(parameters, item_key=item_key)


@checked_arguments
def load_parameters(data: str | bytes | dict, verify: bool = True):
    """Parameters from their JSON text or dict (as ``params.to_dict()`` or ``privagg calibrate --json`` wrote).

    Fields are checked on load, and so is a floor on the noise that needs no
    scipy. ``verify=True`` (the default) also checks that the noise buys the
    claimed (epsilon, delta) (``params.verify()``, which loads scipy); a
    device without scipy passes ``verify=False`` and keeps the floor check.
    Nothing is recalibrated either way.
    """
    if isinstance(data, dict) and not isinstance(data.get("protocol", ""), str):
        raise ParameterError("parameters.protocol", "a protocol's name (a string)", kind_of(data["protocol"]))
    if not isinstance(data, dict):
        try:
            data = json.loads(data)
        except ValueError as err:
            raise ParameterError("parameters", "a JSON object", f"unreadable JSON ({err})") from None
    if isinstance(data, dict) and "parameters" in data and "protocol" in data and isinstance(data["parameters"], dict):
        data = {**data["parameters"], "protocol": data["protocol"]}  # a whole calibrate report
    if not isinstance(data, dict) or data.get("protocol") not in IMPLEMENTED:
        raise ParameterError("parameters.protocol", f"one of {', '.join(IMPLEMENTED)}",
                             data.get("protocol") if isinstance(data, dict) else type(data).__name__)
    parameters = get(data["protocol"]).parameters.from_dict(data)
    if verify:
        parameters.verify()
    return parameters


@checked_arguments
def client(parameters):
    """The client randomizer of the parameters' protocol."""
    entry = get(check_parameters(parameters).protocol)
    if entry.client is None:
        raise ParameterError("protocol", f"one with a client randomizer ({entry.name} is {entry.topology})",
                             entry.name)
    return entry.client(parameters)


FULL_DOMAIN_MAX = 2**28  # the largest domain an analyzer estimates whole (2 GiB of 8-byte counts)
FULL_DOMAIN_DEFAULT_MAX = 2**24  # estimate's --full-domain is the default up to this domain size
# The limits of an analysis, shared by estimate (simulate/frequency.py) and analyze (engine.check_analysis):
# (message, item) checks an analyzer may make to estimate a list of items: about a minute on 2 cores at the 1.5 to
# 2.3 10^9 checks a second measured for OLH's kernel (n = 10^5 users, B = 2^16 and 2^18)
ANALYZER_CHECKS_MAX = 10**11
# Memory the full domain adds to a run (peak_bytes over [B] less over candidates: the aggregate, FE1's per-thread
# int32 counters, the float64 estimates, true counts and error scratch), at most: B = 2^26 at n = 10^5 took 10 s
# and 1.74 GB peak RSS for grr (1.5 GiB estimated here), 21 s and 2.27 GB for hadamard (1.0), 26 s and 2.28 GB for
# laplace (3.5: an overestimate); B = 2^28 failed allocating 2 GiB (under a 4 GB address-space limit) after up to
# 44 s of work, or ran past a minute. 2 GiB keeps every full-domain run of the bundled users near half a minute.
FULL_DOMAIN_BYTES_MAX = 2 << 30
# Preimages FE1's full-domain analyzer enumerates (each message's u x + v = w mod q walks q / b of them): about a
# minute at the 1.2 10^8 (2 busy cores) to 3.5 10^8 (docs/benchmarks.md) a second measured at n = 10^5, B = 2^24
# (1.66 10^9 preimages in 14 s and 4.7 s); B = 2^26 (6.6 10^9) ran past a minute on the busy cores.
PREIMAGES_MAX = 10**10
# What a simulated run may take by default (issue 44: 3 users' fe1 over 2^24 items took 17 s, their whole domain
# costing as much as 10^5 users'; sparse-vector's dummies over 2^20 coordinates 72 s): about a second, or 10 ms a
# user (fe1 over 2^24 items, about 11 s by full_domain_seconds whatever n, stays the default from about 1,100 users;
# laplace's exact noise, 4 to 7 s, from about 700). Past it, a default full domain gives way to the candidates, or is
# refused naming the domain that fits and --full-domain; a faithful simulation's dummies are refused naming what
# shrinks them (simulate.runner.check_cost).
RUN_SECONDS_FAST = 1.0
RUN_SECONDS_PER_USER = 0.01


def run_budget(n_users: int) -> float:
    """The seconds a simulated run of ``n_users`` users may take by default (:data:`RUN_SECONDS_FAST`)."""
    return max(RUN_SECONDS_FAST, RUN_SECONDS_PER_USER * n_users)


def choose_full_domain(domain_size: int, full_domain: bool | None, candidates_given: bool, checks: int = 0,
                       seconds: float = 0.0, n_users: int = 2, protocol: str = "", note: str | None = None,
                       forced: bool = True) -> bool:
    """Whether to estimate all of [B]: the default up to 2^24 when its ``seconds`` (about what it adds to the
    run, :func:`full_domain_seconds`) fit :func:`run_budget` of ``n_users``,
    unless candidates are given and the analyzer's ``checks`` over the full domain
    (:func:`analyzer_checks`) pass :data:`ANALYZER_CHECKS_MAX`; refused above 2^28,
    or past that many checks; otherwise candidates, and without them a refusal naming the domain that fits (and
    ``note``, e.g. that the estimates would carry no information anyway), and --full-domain where the command has
    it (``forced``: not a service task's, whose release is held to the same budget)."""
    affordable = seconds <= run_budget(n_users)
    if full_domain is None and not affordable and not candidates_given and domain_size <= FULL_DOMAIN_DEFAULT_MAX:
        largest = max(2, int(domain_size * run_budget(n_users) / seconds))
        raise ParameterError("domain", f"at most about {largest:,} (2^{math.log2(largest):.1f}) to estimate every item "
                             f"by default at {n_users:,} users: {protocol}'s estimate of all {domain_size:,} would "
                             f"take about {seconds:.2g} s, whatever the number of users; or give --candidates FILE "
                             "(the public items to estimate)" + (", or --full-domain to run it anyway" if forced else "")
                             + (f" ({note})" if note else ""), domain_size)
    if full_domain is None:
        full_domain = domain_size <= FULL_DOMAIN_DEFAULT_MAX and affordable and not (candidates_given and
                                                                                      checks > ANALYZER_CHECKS_MAX)
    if full_domain and checks > ANALYZER_CHECKS_MAX:
        raise ParameterError("domain", f"small enough for the analyzer to check every user's report at every item "
                             f"(here {checks:.3g} checks, above {ANALYZER_CHECKS_MAX:.0e}: more than a minute); "
                             "or give --candidates without --full-domain", domain_size)
    if full_domain and domain_size > FULL_DOMAIN_MAX:
        raise ParameterError("domain", f"at most 2^{FULL_DOMAIN_MAX.bit_length() - 1} to estimate the whole domain "
                             "(--full-domain, the default without --candidates): give --candidates", domain_size)
    if not full_domain and not candidates_given:
        raise ParameterError("candidates", "given without --full-domain (the analyzer cannot list all of [B]; "
                             "privagg estimate fe-hh discovers heavy items without candidates)", None)
    return full_domain


@checked_arguments
def analyzer(parameters, queries=None, **role_options):
    """The analyzer (or curator) of the parameters' protocol, over ``queries`` or the whole domain;
    ``role_options``: the role's own (a curator's ``rng``).

    The whole domain is refused past FULL_DOMAIN_MAX (2^28, also the CLI's --full-domain limit): its aggregate
    holds a count for every item (fe1 at B = 2^49 asked agg_init for 4 PiB)."""
    entry = get(check_parameters(parameters).protocol)
    role = inspect.signature(entry.analyzer).parameters
    for name, value in role_options.items():
        if name not in role or name in ("parameters", "queries"):
            options = [p for p in role if p not in ("parameters", "queries")]
            raise ParameterError(name, f"left out for {entry.name}'s analyzer (its options: "
                                 f"{', '.join(options) or 'none'})", repr(value) if len(repr(value)) <= 60
                                 else kind_of(value))
    if queries is None and entry.result is ResultKind.FREQUENCY_TABLE:
        if parameters.domain_size > FULL_DOMAIN_MAX:
            raise ParameterError("queries", f"given when the domain has more than 2^{FULL_DOMAIN_MAX.bit_length() - 1}"
                                 f" items (an analyzer of the whole domain counts each of its "
                                 f"{parameters.domain_size:,} items, {parameters.domain_size * 8 / 2**30:,.3g} GiB "
                                 "at 8 bytes a count); the candidate items to estimate, or a smaller domain", None)
    return entry.analyzer(parameters, queries, **role_options)
