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
``secret_sharing`` and ``two_servers`` (multi-round)
    A :class:`MultiRound` declaration: the protocol's rounds as data
    (:class:`Round`: who sends, to whom, the least answers to go on, what
    closes it, what a late or invalid message means), the users' role (one
    method per round, each taking the user's inbox and returning an
    :class:`Outbox`; its state encodable) and the :class:`Coordinator`, the
    server that runs the rounds (whom each round expects, what it checks,
    what each user's inbox holds, what it publishes when a round closes),
    and, for TSS, the second server that releases what the coordinator hands
    over. The simulator (:mod:`privagg.simulate.rounds`) and the services'
    round driver (:mod:`privagg.service.rounds`) run every such protocol
    alike, never branching on it: DPDS, DPDG
    (:mod:`privagg.protocols.sharing_parties`), TSS, TSS'
    (:mod:`privagg.protocols.two_server_parties`).

An aggregate is plain picklable data (numpy arrays and integers):
``agg_update`` folds a batch of messages into it, ``merge`` adds partial
aggregates from disjoint partitions, and ``merge`` of the partitions'
aggregates equals one ``agg_update`` over all their messages.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Callable, Literal, NamedTuple, Protocol, TypeVar, runtime_checkable

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


# --- multi-round protocols: rounds as data, one role per party kind -----------------------------------------


class RoundFailed(Exception):
    """A round closed with fewer answers than the protocol needs to go on (or what they hold cannot be released):
    the task fails and nothing is released. The message says why."""


class Outbox(NamedTuple):
    """What a party sends in a round: its message to the round's server (None: none) and its messages to other
    parties (recipient -> bytes), each sealed to its recipient and relayed by the server, which cannot read them."""

    message: bytes | None
    relayed: dict[int, bytes]


@dataclass(frozen=True)
class Round:
    """One round of a multi-round protocol, as data (the VDAF reference's ROUNDS, Janus's job steps).

    The users' role answers the round with its method ``name``, given the inbox the coordinator made for him (and,
    in the round marked ``value``, his value). Whom the round expects is the coordinator's (:meth:`Coordinator.
    expected`: ``expects`` read from what earlier rounds published, or a list it computes, as TSS's helpers); a
    round that expects nobody is skipped."""

    name: str  # the round's name, and the users' role's method that answers it
    sender: str = "user"  # the kind of party that sends (every round so far: the users)
    # whom it waits for: every enrolled user, or a list an earlier round published (the coordinator's state)
    expects: str = "enrolled"
    publishes: str | None = None  # the name under which the list of who answered is published when it closes
    value: bool = False  # the round the user's value enters (the method takes it as ``value``)
    to_server: bool = True  # each sender sends the round's server a message (checked by the coordinator, stored)
    seal: str | None = None  # the party the message to the server is sealed to, when not the server (TSS's "s2")
    relay: str | None = None  # the name of each sender's messages to other parties, sealed to them and relayed
    relay_info: bytes = b""  # what a relayed message's seal binds, before the task, sender and recipient (HPKE info)
    # the inbox field (sender -> bytes) of the round that delivers the relay whose entry each relayed message's signature
    # also covers: the protocol's ``bound`` of the sender's message to the server (DPDS: his commitments to the
    # recipient's shares), which the server checks against that message and shows the recipient as it is
    binds: str | None = None
    delivers: str | None = None  # an earlier round's ``relay`` whose messages to the user his inbox carries
    reads: tuple[str, ...] = ()  # earlier rounds whose messages to the server the coordinator's inbox reads
    signed: tuple[tuple[str, str], ...] = ()  # (inbox field, round): its {sender: message} travel with their signatures
    # the least answers the round may close with (the coordinator's :meth:`~Coordinator.minimum`); fewer fail the task
    minimum: str = "min_survivors"
    early: bool = True  # closes as soon as every expected sender answered; always at its deadline
    deadline: float = 1.0  # its deadline, in the task's round_seconds, from its start
    late: Literal["refuse"] = "refuse"  # a message after the close is refused; its sender takes no further part
    invalid: Literal["refuse"] = "refuse"  # an invalid message is refused, nothing stored; he may send until the close


@runtime_checkable
class RoundUser(Protocol):
    """A user's role in a multi-round protocol: one method per :class:`Round` (named as the round), each taking the
    inbox's fields as keyword arguments and returning an :class:`Outbox`; what he keeps between rounds is
    ``state``, plain data with ``to_bytes``."""

    index: int
    state: Any


@runtime_checkable
class Coordinator(Protocol):
    """The server that runs a multi-round protocol's rounds, sans I/O. Its ``state`` between rounds is a JSON object
    (lists it published when rounds closed); ``messages`` maps an earlier round's name to the messages users sent
    the server in it (user -> bytes)."""

    def expected(self, round_: Round, state: dict) -> list[int]:
        """The users the round waits for."""

    def minimum(self, round_: Round) -> tuple[int, str]:
        """The least answers the round may close with, and what that number is (for the failure's message)."""

    def check(self, round_: Round, user: int, message: bytes, state: dict, messages: Mapping) -> None:
        """A ParameterError naming what is wrong with ``user``'s message to the server (a round without ``seal``)."""

    def message_size(self, round_: Round, user: int, state: dict, messages: Mapping) -> int:
        """The bytes of ``user``'s message sealed to another party (a round with ``seal``): all the server checks."""

    def recipients(self, round_: Round, user: int, state: dict, messages: Mapping) -> dict[int, int]:
        """Recipient -> the bytes of the message ``user`` relays to him (a round with ``relay``)."""

    def inbox(self, round_: Round, user: int, state: dict, messages: Mapping) -> dict[str, Any]:
        """What ``user``'s method for the round takes (besides the relayed messages ``delivers`` names)."""

    def close(self, round_: Round, answered: list[int], state: dict, messages: Mapping) -> dict:
        """The state once the round closed with ``answered`` (at least :meth:`minimum` of them): what it publishes.
        Raises :class:`RoundFailed` when nothing can be released."""

    def finish(self, state: dict, messages: Mapping) -> Any:
        """After the last round: the release (DPDS), or what a second server releases (TSS's hand-over)."""


def answer_each(users: Sequence[Any], round_: Round, inboxes: Sequence[dict]) -> list[Outbox | None]:
    """Each user's answer to ``round_``: his role's method of the round over his inbox; None for a user whose role
    refuses what he was shown (a ParameterError: a lying server's lists, a dealer he complained about): he sends
    nothing, as his device would."""
    out: list[Outbox | None] = []
    for user, inbox in zip(users, inboxes):
        try:
            out.append(getattr(user, round_.name)(**inbox))
        except ParameterError:
            out.append(None)
    return out


@dataclass(frozen=True)
class MultiRound:
    """A multi-round protocol as data: its rounds, its parties' roles, and what the release is over. One per family;
    the registry entry names it (``rounds``), and the simulator and the services run it from there.

    ``user(parameters, index, min_survivors, rng=None, state=None)`` and ``coordinator(parameters, min_survivors,
    rng=None)`` build the roles; ``answer(users, round, inboxes)`` runs a round's method over a batch of users (the
    same computation as one user at a time; :func:`answer_each`, or a batch that derives what two users share
    once; None for a user who refuses); ``releaser(parameters, min_survivors).release(handed)`` is a second server that releases what the
    coordinator's ``finish`` hands over (None: the coordinator releases). The release is over the users who sent
    ``release_round`` (the survivors), with ``survivors_parameters(parameters, survivors)`` and the guarantee
    ``survivors_privacy(parameters, survivors, who, detail)`` (a fast simulation's); ``least_survivors``
    is the fewest a task may require. ``entries(raw)`` reads a message's kind and entries for traffic counts;
    ``faithful_seconds(parameters)`` and ``faithful_bytes(parameters)`` are what a faithful simulation takes (from
    measured rates; every message of a run is held at once); ``parties`` names the coordinator and the releaser
    in transcripts; ``bound(parameters, graph_seed, sender, recipient, message)`` is what the signature of a message
    relayed in a round with ``binds`` covers besides its sealed bytes, from the sender's ``message`` to the server."""

    rounds: tuple[Round, ...]
    user: Callable[..., Any]
    coordinator: Callable[..., Any]
    release_round: str
    survivors_parameters: Callable[[Any, int], Any]
    survivors_privacy: Callable[..., Any]
    least_survivors: Callable[[Any], int]
    entries: Callable[[bytes], tuple[str, int]]
    faithful_seconds: Callable[[Any], float]
    faithful_bytes: Callable[[Any], int]
    answer: Callable[[Sequence[Any], Round, Sequence[dict]], list[Outbox]] = answer_each
    releaser: Callable[..., Any] | None = None
    parties: tuple[str, ...] = ("server",)
    bound: Callable[[Any, bytes | None, int, int, bytes], bytes] | None = None

    def __post_init__(self) -> None:
        names = [r.name for r in self.rounds]
        relays = {r.relay for r in self.rounds if r.relay}
        assert len(set(names)) == len(names) and self.release_round in names, names
        for i, r in enumerate(self.rounds):  # what a round reads or delivers comes from an earlier round
            assert set(r.reads) <= set(names[:i]) and (r.delivers is None or r.delivers in {
                e.relay for e in self.rounds[:i]}), r
        assert sum(r.value for r in self.rounds) == 1 and len(relays) == len([r for r in self.rounds if r.relay])
        assert (self.bound is None) == all(r.binds is None for r in self.rounds)

    def round(self, name: str) -> Round:
        return next(r for r in self.rounds if r.name == name)

    def number(self, name: str) -> int:
        """A round's number, 1 for the first."""
        return 1 + [r.name for r in self.rounds].index(name)


def messages_in(value: Any) -> list[bytes]:
    """The byte messages an inbox (or one of its fields) holds: a user's copies of what others sent, for the traffic
    counts of the simulator and the SDK."""
    if isinstance(value, (bytes, bytearray)):
        return [value]
    if isinstance(value, Mapping):
        value = list(value.values())
    return [m for v in value for m in messages_in(v)] if isinstance(value, (list, tuple)) else []


def encode_inbox(inbox: Mapping[str, Any]) -> dict[str, Any]:
    """An inbox as JSON: integers and lists of them as they are; bytes as ``{"bytes": base64}``; a mapping with
    integer keys as ``{"map": [[key, value], ...]}`` (JSON objects take only string keys)."""
    import base64

    def value(v):
        if isinstance(v, (bytes, bytearray)):
            return {"bytes": base64.b64encode(v).decode()}
        if isinstance(v, Mapping):
            return {"map": [[int(k), value(x)] for k, x in v.items()]}
        if isinstance(v, (list, tuple)):
            return [value(x) for x in v]
        if isinstance(v, (bool, np.bool_)) or not isinstance(v, (int, np.integer)):
            raise TypeError(f"an inbox holds integers, bytes, lists and mappings, not {type(v).__name__}")
        return int(v)

    return {k: value(v) for k, v in inbox.items()}


def decode_inbox(data: Mapping[str, Any]) -> dict[str, Any]:
    """:func:`encode_inbox`'s inverse; a ParameterError (field ``inbox``) for anything it did not write."""
    import base64
    import binascii

    def value(v):
        if isinstance(v, list):
            return [value(x) for x in v]
        if isinstance(v, dict) and set(v) == {"bytes"} and isinstance(v["bytes"], str):
            try:
                return base64.b64decode(v["bytes"], validate=True)
            except (binascii.Error, ValueError):
                pass
        elif isinstance(v, dict) and set(v) == {"map"} and isinstance(v["map"], list) and all(
                isinstance(e, list) and len(e) == 2 and type(e[0]) is int for e in v["map"]):
            return {k: value(x) for k, x in v["map"]}
        elif type(v) is int:
            return v
        raise ParameterError("inbox", "what encode_inbox writes (integers, lists, {\"bytes\"}, {\"map\"})",
                             kind_of(v))

    if not isinstance(data, Mapping):
        raise ParameterError("inbox", "a JSON object", kind_of(data))
    return {k: value(v) for k, v in data.items()}


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


_FINALIZING = threading.local()  # how deep this thread is in finalize calls (only the outermost warns)


def warn_received(parameters: Any, result: Any, reporters: int | None) -> None:
    """A :class:`~privagg.errors.PrivaggWarning` when ``result`` was made of far more or fewer messages (its valid and
    malformed ones) than the ``reporters`` (None: the calibrated n) send, as ``privagg analyze`` warns: the Python
    API's finalize of a batch given twice said nothing (a reviewer's finding)."""
    import warnings

    from ..errors import PrivaggWarning
    from .parameters import received_mismatch

    mismatch = received_mismatch(parameters, result.messages + result.malformed, reporters)
    if mismatch is not None:
        warnings.warn(f"{mismatch}: a batch given twice, or one left out, or messages lost; the estimates, debiased "
                      "for that many users, may be biased, and the privacy guarantee assumed them all "
                      "(privagg analyze's caveat)", PrivaggWarning, stacklevel=4)


def with_fingerprints(cls: type) -> type:
    """Stamp and check the parameters' fingerprint on what ``cls``'s roles make and take, in one place for every
    protocol: ``randomize`` stamps its message batch; ``agg_init`` stamps its aggregate (with the analyzer's
    candidates, ``queries``, too); ``agg_update`` refuses an aggregate or a batch of other parameters, or an
    aggregate over other candidates; ``merge`` and ``finalize`` refuse aggregates of other parameters or over
    other candidates, and ``finalize`` of the protocols whose users' messages are counted (it takes ``reporters``)
    or a curator's records warns (:class:`~privagg.errors.PrivaggWarning`) when they are far from what the users
    send. Batches and aggregates without a fingerprint (read from files, made before fingerprints) are not checked.
    The same wrappers refuse what is no batch or no aggregate of the role's class at all (a ParameterError naming the
    argument, not an AttributeError from inside the protocol)."""
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
        import inspect

        counted = "reporters" in inspect.signature(method).parameters  # the users' messages; a curator's records

        def inner(self, agg, *args, **kwargs):
            check_aggregate(self, agg, owner=cls)
            check_fingerprint(_own_aggregate_fingerprint(self), getattr(agg, FINGERPRINT, None), "aggregate")
            depth = _FINALIZING.__dict__.setdefault("depth", 0)
            _FINALIZING.depth = depth + 1  # a finalize inside another (a subclass's, a protocol's inner analyzer's)
            try:
                result = method(self, agg, *args, **kwargs)
            finally:
                _FINALIZING.depth = depth
            if not depth and (counted or self.parameters.model == "central"):  # the outermost call warns, once
                warn_received(self.parameters, result, kwargs.get("reporters", args[0] if args else None))
            return result
        return inner

    for name, make in (("randomize", randomize), ("agg_init", agg_init), ("agg_update", agg_update),
                       ("merge", merge), ("finalize", finalize)):
        wrap(name, make)
    return cls
