"""The kinds the registry sorts protocols by: topology, family and result.

String enums, so that a kind is its name wherever it is written out (JSON, tables, messages) and compares
equal to it; the layers above ask a :class:`~privagg.protocols.registry.ProtocolEntry` what they need
(``served``, ``single_batch``, ``multi_round``, ``trusted_curator``, ``categorical``) rather than compare kinds.
"""

from __future__ import annotations

from enum import StrEnum


class Topology(StrEnum):
    """Who talks to whom (:mod:`privagg.protocols.roles` has each topology's parties)."""

    CENTRAL = "central"  # users send their values in the clear to a trusted curator, which adds the noise
    SHUFFLE = "shuffle"  # clients -> a trusted shuffler -> the analyzer
    LOCAL = "local"  # clients -> the analyzer, each report private on its own
    SECRET_SHARING = "secret_sharing"  # users share among themselves, one server reconstructs
    TWO_SERVERS = "two_servers"  # users, an elector (S1) and the server that reconstructs (S2)


class Family(StrEnum):
    """Protocols that share their noise, calibrations and exact laws."""

    BALLS_INTO_BINS = "balls into bins"
    PRIVACY_BLANKET = "privacy blanket"
    SAMPLING_SHARING = "sampling + secret sharing"
    CENTRAL_BASELINES = "central baselines"
    LOCAL_BASELINES = "local baselines"


class ResultKind(StrEnum):
    """What an analyzer's ``finalize`` returns (:mod:`privagg.protocols.results`)."""

    FREQUENCY_TABLE = "frequency table"  # FrequencyTable
    HEAVY_HITTER_LIST = "heavy-hitter list"  # HeavyHitterList
    VECTOR_SUM = "vector sum"  # VectorSum
