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
    (the server, which reconstructs): DPDS, DPDG.
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
class Sharers(Protocol):
    """A batch of users of a secret-sharing protocol, one round after another (simulate/secret_sharing.py)."""

    def contributions(self, values: np.ndarray, rng: RNGLike = None) -> np.ndarray:
        """Each user's vector as field elements (users x N): what he shares."""

    def share(self, contributions: np.ndarray, rng: RNGLike = None) -> np.ndarray:
        """n additive shares of each vector (recipients x users x N)."""

    def forward(self, received: np.ndarray) -> MessageBatch:
        """Each user's sum of the shares he received (n x N), as the rows the server receives."""


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
