"""The parties' interfaces, one per topology: sans-I/O and batch-shaped.

Modelled on the VDAF interfaces (shard / prepare / aggregate / unshard): a
role takes data and returns data and never knows how messages travel, so the
same code runs in the simulator (:mod:`privagg.simulate`), on Dask workers
(:mod:`privagg.engine`) and, later, behind a network service. Every role is
built from a protocol's frozen parameters and never recalibrates.

Topologies and their roles:

``shuffle``
    :class:`Client` on each device -> the shuffler (:func:`privagg.core.messages.shuffle`,
    protocol-independent) -> :class:`Analyzer`.
``local``
    :class:`Client` -> :class:`Analyzer` (no shuffler; the analyzer may see
    who sent what).
``central``
    users send their values in the clear to a trusted :class:`Curator`,
    which aggregates them like an analyzer and adds the noise when it
    finalizes.
``secret_sharing``
    :class:`Sharers` (the users: each makes his vector, shares it among all
    n users and forwards the sum of what he received) -> an :class:`Analyzer`
    (the server, which reconstructs): DPDS, DPDG. Over a network, one
    :class:`SharingRounds` per user and a :class:`SharingRelease` server
    (:mod:`privagg.protocols.sharing_parties`), every message bytes.
``two_servers``
    :class:`Reporters` (the users' coins and report sets) -> an
    :class:`Elector` (S1: counts and elects helper users) -> the reporters
    share each entry among the item's helpers, who sum and forward ->
    an :class:`Analyzer` (S2): TSS, TSS'.

An aggregate is plain picklable data (numpy arrays and integers):
``agg_update`` folds a batch of messages into it, ``merge`` adds partial
aggregates from disjoint partitions, and ``merge`` of the partitions'
aggregates equals one ``agg_update`` over all their messages.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Callable, Protocol, TypeVar, runtime_checkable

import numpy as np

from ..core.messages import MessageBatch, MessageLayout, check_batch
from ..errors import ParameterError, check_sequence, checked_arguments, kind_of
from ..core.randomness import RNGLike

Agg = TypeVar("Agg")


@runtime_checkable
class Client(Protocol):
    """A user's randomizer (shuffle and local topologies)."""

    layout: MessageLayout

    def randomize(self, values: np.ndarray, rng: RNGLike = None) -> MessageBatch:
        """Messages for a batch of users' values; ``rng=None`` draws from the secure generator."""


@runtime_checkable
class Analyzer(Protocol[Agg]):
    """Aggregates messages into mergeable partial results, then finalizes."""

    layout: MessageLayout

    def agg_init(self) -> Agg:
        """An empty aggregate."""

    def agg_update(self, agg: Agg, messages: MessageBatch) -> Agg:
        """``agg`` with ``messages`` folded in; malformed messages are dropped and counted."""

    def merge(self, aggs: Sequence[Agg]) -> Agg:
        """One aggregate of disjoint partitions' aggregates."""

    def finalize(self, agg: Agg) -> Any:
        """The typed result (:mod:`privagg.protocols.results`). The analyzers of the protocols whose users make the
        noise (a client randomizer: the served ones) also take ``reporters=``, the users whose reports ``agg``
        holds where the caller knows them (a task closed early, a message folder's record), and debias with them
        (default: the calibrated n). A curator's noise is its own, whoever reported: it takes none
        (:func:`privagg.protocols.parameters.with_reporters` calls either)."""

    @classmethod
    def working_bytes(cls, parameters: Any, full_domain: bool = True) -> int:
        """About the memory an analyzer of ``parameters`` works in (the aggregate, a slice's scratch): the
        simulator's check before work (:func:`privagg.simulate.runner.simulation_bytes`) adds it up."""


@runtime_checkable
class Curator(Analyzer[Agg], Protocol):
    """The trusted party of the central model: its ``finalize`` adds the noise from its own ``rng``."""

    rng: RNGLike


@runtime_checkable
class Sharers(Protocol):
    """A batch of users of a secret-sharing protocol, one round after another (simulate/secret_sharing.py)."""

    def contributions(self, values: np.ndarray, rng: RNGLike = None) -> np.ndarray:
        """Each user's vector as field elements (users x N): what he shares."""

    def share(self, contributions: np.ndarray, rng: RNGLike = None) -> np.ndarray:
        """n additive shares of each vector (recipients x users x N)."""

    def receive(self, received: np.ndarray, shares: np.ndarray) -> np.ndarray:
        """The recipients' running sums (n x N) with a block of shares (n x senders x N) added."""

    def forward(self, received: np.ndarray) -> MessageBatch:
        """Each user's sum of the shares he received (n x N), as the rows the server receives."""


@runtime_checkable
class SharingRounds(Protocol):
    """One DPDS or DPDG user over a network, a round at a time; what he sends is bytes and what he keeps between
    rounds is ``state`` (plain data with ``to_bytes``)."""

    def advertise(self, code: int) -> tuple[bytes, dict[int, bytes]]:
        """Round 1: his pair key for the server, and a backup of his keys for every other user (to be sealed)."""

    def masked_sum(self, keys: dict[int, bytes]) -> bytes:
        """Round 2: his vector plus the shares agreed with the round-1 senders (``keys``), masked."""

    def reveal(self, senders: Sequence[int], survivors: Sequence[int], backups: dict[int, bytes]) -> bytes:
        """Round 3: his shares of the survivors' mask seeds and of round 2's dropouts' pair keys."""


@runtime_checkable
class SharingRelease(Protocol):
    """The server of DPDS or DPDG over a network: checks the users' messages, releases the survivors' sum."""

    def check(self, raw: bytes, kind: int, user: int) -> Any:
        """A user's message to the server decoded and checked."""

    def release(self, keys: dict[int, bytes], masked: dict[int, bytes], reveals: dict[int, bytes],
                queries=None) -> Any:
        """The release over the survivors, with its guarantee recomputed for them."""


@runtime_checkable
class Reporters(Protocol):
    """A batch of users of a two-server protocol: first stage."""

    def first_stage(self, values: np.ndarray, rng: RNGLike = None) -> tuple[np.ndarray, np.ndarray]:
        """(participation coins, report sets as users x set size)."""


@runtime_checkable
class Elector(Protocol):
    """The first server: counts the report sets and elects each item's helpers."""

    def elect(self, reports: np.ndarray, rng: RNGLike = None) -> tuple[np.ndarray, list[np.ndarray]]:
        """(reports per item m_j, the elected helpers of each item)."""


# --- parameters' fingerprints: aggregates and message batches of other parameters are refused, not mixed ---

FINGERPRINT = "parameters_fingerprint"  # the attribute an aggregate carries (None or absent: not checked)


def parameters_fingerprint(parameters: Any) -> str | None:
    """A short hash of the parameters' canonical JSON (``parameters.to_dict()``), or None without one."""
    import hashlib
    import json

    to_dict = getattr(parameters, "to_dict", None)
    if to_dict is None:
        return None
    text = json.dumps(to_dict(), sort_keys=True, separators=(",", ":"), default=str)
    return f"{getattr(parameters, 'protocol', '?')}:{hashlib.sha256(text.encode()).hexdigest()[:12]}"


def _own_fingerprint(role: Any) -> str | None:
    cached = role.__dict__.get("_parameters_fingerprint", False)
    if cached is False:
        cached = parameters_fingerprint(getattr(role, "parameters", None))
        role.__dict__["_parameters_fingerprint"] = cached
    return cached


def _queries_text(queries: np.ndarray) -> str:
    """The candidates as a person reads them: all of a few, else the first and last with a digest of them all."""
    import hashlib

    values = np.asarray(queries).ravel().tolist()
    if len(values) <= 8:
        return "candidates " + ", ".join(str(v) for v in values)
    digest = hashlib.sha256(np.asarray(queries, dtype=np.int64).tobytes()).hexdigest()[:8]
    return (f"{len(values)} candidates {', '.join(str(v) for v in values[:3])}, ..., {values[-1]} "
            f"(digest {digest})")


def _own_aggregate_fingerprint(role: Any) -> str | None:
    """What an aggregate of ``role`` carries: its parameters' fingerprint and, for an analyzer built over a list
    of candidates (``queries``), that list -- an aggregate over other candidates holds other counts, in other
    places, and must not be merged or finalized here. An analyzer of the whole domain adds "every item"."""
    cached = role.__dict__.get("_aggregate_fingerprint", False)
    if cached is False:
        cached = _own_fingerprint(role)
        if cached is not None:
            queries = getattr(role, "queries", None)
            cached += f", {'every item' if queries is None else _queries_text(queries)}"
        role.__dict__["_aggregate_fingerprint"] = cached
    return cached


def _stamp(agg: Any, fingerprint: str | None) -> Any:
    if fingerprint is not None and getattr(agg, FINGERPRINT, None) is None:
        try:
            setattr(agg, FINGERPRINT, fingerprint)
        except (AttributeError, TypeError):  # an aggregate that holds no attributes: left unchecked
            pass
    return agg


def check_fingerprint(expected: str | None, found: str | None, what: str) -> None:
    """ParameterError naming both when ``found`` (of an aggregate or a message batch) is not ``expected``."""
    if expected is not None and found is not None and found != expected:
        same_parameters = expected.split(",")[0] == found.split(",")[0]
        if same_parameters:  # an aggregate of an analyzer over other candidates
            raise ParameterError(what, f"made by an analyzer over the same candidates ({expected})",
                                 f"{what} made over others ({found})")
        raise ParameterError(what, f"made with the analyzer's parameters ({expected})",
                             f"{what} made with other parameters ({found})")


_AGGREGATE_TYPES: dict[type, type | None] = {}


def aggregate_type(role: type) -> type | None:
    """The class of ``role``'s aggregates, from its ``agg_init``'s return annotation (None: not declared)."""
    if role not in _AGGREGATE_TYPES:
        import typing

        try:
            found = typing.get_type_hints(role.agg_init).get("return")
        except Exception:  # an annotation that does not resolve: aggregates are not type-checked
            found = None
        _AGGREGATE_TYPES[role] = found if isinstance(found, type) else None
    return _AGGREGATE_TYPES[role]


def check_aggregate(role: Any, agg: Any, field: str = "aggregate", owner: type | None = None) -> None:
    """A ParameterError naming ``field`` unless ``agg`` is an aggregate of ``role``'s class (``agg_init``'s), or of
    ``owner``'s (the class whose method is running: a subclass's method may hand its base one of the base's)."""
    kinds = {aggregate_type(type(role)), None if owner is None else aggregate_type(owner)} - {None}
    if kinds and not isinstance(agg, tuple(kinds)):
        names = " or ".join(sorted(kind.__name__ for kind in kinds))
        raise ParameterError(field, f"an aggregate of this analyzer (a {names}: analyzer.agg_init(), or what "
                             "agg_update or merge returned)", kind_of(agg))


def with_fingerprints(cls: type) -> type:
    """Stamp and check the parameters' fingerprint on what ``cls``'s roles make and take, in one place for every
    protocol: ``randomize`` stamps its message batch; ``agg_init`` stamps its aggregate (with the analyzer's
    candidates, ``queries``, too); ``agg_update`` refuses an aggregate or a batch of other parameters, or an
    aggregate over other candidates; ``merge`` and ``finalize`` refuse aggregates of other parameters or over
    other candidates. Batches and aggregates without a fingerprint (read from files, made before fingerprints) are not
    checked. The same wrappers refuse what is no batch or no aggregate of the role's class at all (a
    ParameterError naming the argument, not an AttributeError from inside the protocol)."""
    import functools

    def wrap(name: str, make: Callable[[Callable[..., Any]], Callable[..., Any]]) -> None:
        method = getattr(cls, name, None)
        if method is None or getattr(method, "_fingerprinted", False):
            return
        # a call with arguments the method does not take: a ParameterError (the wrappers check their types)
        wrapped = checked_arguments(functools.wraps(method)(make(method)), types=False)
        wrapped._fingerprinted = True  # type: ignore[attr-defined]
        setattr(cls, name, wrapped)

    def randomize(method):
        def inner(self, *args, **kwargs):
            batch = method(self, *args, **kwargs)
            mine = _own_fingerprint(self)
            return batch.with_fingerprint(mine) if isinstance(batch, MessageBatch) and mine is not None else batch
        return inner

    def agg_init(method):
        def inner(self, *args, **kwargs):
            return _stamp(method(self, *args, **kwargs), _own_aggregate_fingerprint(self))
        return inner

    def agg_update(method):
        def inner(self, agg, messages, *args, **kwargs):
            check_aggregate(self, agg, owner=cls)
            check_batch(messages)
            mine = _own_aggregate_fingerprint(self)
            check_fingerprint(mine, getattr(agg, FINGERPRINT, None), "aggregate")
            check_fingerprint(_own_fingerprint(self), getattr(messages, "fingerprint", None), "messages")
            return _stamp(method(self, agg, messages, *args, **kwargs), mine)
        return inner

    def merge(method):
        def inner(self, aggs, *args, **kwargs):
            mine = _own_aggregate_fingerprint(self)
            aggs = list(check_sequence("aggregates to merge", aggs, "a list of aggregates of this analyzer"))
            for agg in aggs:
                check_aggregate(self, agg, "aggregates to merge", cls)
                check_fingerprint(mine, getattr(agg, FINGERPRINT, None), "aggregates to merge")
            return _stamp(method(self, aggs, *args, **kwargs), mine)
        return inner

    def finalize(method):
        def inner(self, agg, *args, **kwargs):
            check_aggregate(self, agg, owner=cls)
            check_fingerprint(_own_aggregate_fingerprint(self), getattr(agg, FINGERPRINT, None), "aggregate")
            return method(self, agg, *args, **kwargs)
        return inner

    for name, make in (("randomize", randomize), ("agg_init", agg_init), ("agg_update", agg_update),
                       ("merge", merge), ("finalize", finalize)):
        wrap(name, make)
    return cls
