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
``secret_sharing`` and ``two_servers``
    :class:`Party` objects (users, servers, helpers) exchanging batches over
    rounds: the sampling + secret-sharing family (DPDS, TSS, ...).

An aggregate is plain picklable data (numpy arrays and integers):
``agg_update`` folds a batch of messages into it, ``merge`` adds partial
aggregates from disjoint partitions, and ``merge`` of the partitions'
aggregates equals one ``agg_update`` over all their messages.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal, Protocol, TypeVar, runtime_checkable

import numpy as np

from ..core.messages import MessageBatch, MessageLayout
from ..core.randomness import RNGLike

Topology = Literal["central", "shuffle", "local", "secret_sharing", "two_servers"]

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
        """The typed result (:mod:`privagg.protocols.results`)."""

    @classmethod
    def working_bytes(cls, parameters: Any, full_domain: bool = True) -> int:
        """About the memory an analyzer of ``parameters`` works in (the aggregate, a slice's scratch): the
        simulator's check before work (:func:`privagg.simulate.runner.simulation_bytes`) adds it up."""


@runtime_checkable
class Curator(Analyzer[Agg], Protocol):
    """The trusted party of the central model: its ``finalize`` adds the noise from its own ``rng``."""

    rng: RNGLike


@runtime_checkable
class Party(Protocol):
    """One party of a multi-round protocol (a user, a server or a helper).

    ``step`` takes what the party received in round ``round`` (by sender)
    and returns what it sends (by recipient). Parties are numbered; the
    topology's runner delivers the messages.
    """

    party: int

    def step(self, round: int, inbox: dict[int, MessageBatch], rng: RNGLike = None) -> dict[int, MessageBatch]:
        """Process one round's inbox and return the outbox."""
