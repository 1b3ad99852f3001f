"""The multi-round protocols in-process: the parties' own roles, their messages moved between them by a harness.

A protocol is a :class:`~privagg.protocols.roles.MultiRound` declaration, read from its registry entry: its
rounds as data, the users' role, the coordinator (the server that runs the rounds) and, for TSS, the second
server that releases. :func:`run_rounds` plays every party as the VDAF reference's ``run_vdaf`` does, never
branching on the protocol: round by round it asks the coordinator whom the round expects and what each user's
inbox holds, hands every user still there his inbox (and the messages relayed to him), takes his
:class:`~privagg.protocols.roles.Outbox`, has the coordinator check what is addressed to it and holds the
relayed messages for their recipients, then closes the round as the coordinator says. The services' round
driver (:mod:`privagg.service.rounds`) does the same over HTTP and a database, so a simulated release is the
deployed protocol's: the same key agreements, backups, masks and reconstruction, exact over the survivors.

Users vanish at the rounds ``dropouts`` names (a user gone sends nothing from that round on), as they do in a
deployment; a user whose role refuses what he was shown sends nothing that round; a message the coordinator refuses
is not taken (the round's ``invalid``). What each kind of party
sent, received and relayed is counted per message kind (the declaration's ``entries``) in the transcript.

What a run costs grows as n^2 (every pair of users agrees a key in DPDS and DPDG): :func:`check_faithful`
refuses, before any work, a run the protocol's measured rates (``faithful_seconds``) put above
:data:`FAITHFUL_SECONDS_MAX`, naming ``--mode fast``, which draws the same release from its law.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..core import identity
from ..errors import ParameterError, kind_of
from ..protocols.roles import MultiRound, RoundFailed, messages_in
from .progress import Progress

# The longest faithful multi-round simulation run by default: a minute and a half, as the additive-share simulation
# it replaced allowed (2^33 share elements at 10^8 a second)
FAITHFUL_SECONDS_MAX = 90.0


def check_faithful(protocol: MultiRound, parameters) -> None:
    """Refuse a faithful run that would take more than :data:`FAITHFUL_SECONDS_MAX`, by the protocol's measured
    rates (``faithful_seconds``), naming ``--mode fast``."""
    seconds = protocol.faithful_seconds(parameters)
    if seconds > FAITHFUL_SECONDS_MAX:
        raise ParameterError("mode", f"fast for this size: a faithful run of {parameters.n_users:,} users runs the "
                             f"deployed parties' every round (about {seconds:,.0f} s, above "
                             f"{FAITHFUL_SECONDS_MAX:.0f} s; it grows as n^2); --mode fast draws the same release "
                             "from its law", "faithful")


def check_dropouts(protocol: MultiRound, parameters, dropouts: Mapping[str, Sequence[int]] | None,
                   mode: str) -> dict[str, list[int]]:
    """``dropouts`` (round name -> the users who vanish before sending it) checked: rounds of the protocol, users of
    the n, each once; the fast path takes dropouts only up to the round the release is over (its survivors)."""
    names = [r.name for r in protocol.rounds]
    checked, seen = {}, set()
    for name, users in (dropouts or {}).items():
        if name not in names:
            raise ParameterError("dropouts", f"a mapping from rounds of {parameters.protocol} ({', '.join(names)})",
                                 name)
        try:
            listed = [int(u) for u in np.asarray(users, dtype=np.int64).ravel()]
        except (TypeError, ValueError):
            raise ParameterError("dropouts", "lists of user indices", f"{name}: {kind_of(users)}") from None
        if any(not 0 <= u < parameters.n_users for u in listed) or len(set(listed)) != len(listed) or \
                set(listed) & seen:
            raise ParameterError("dropouts", f"distinct users in [0, {parameters.n_users}), each dropping out once",
                                 f"{name}: {listed[:8]}")
        if mode == "fast" and names.index(name) > names.index(protocol.release_round):
            raise ParameterError("dropouts", f"at rounds up to {protocol.release_round} with --mode fast (the release "
                                 f"is over who sent it; later dropouts need the faithful run)", name)
        seen |= set(listed)
        checked[name] = listed
    return checked


def survivors(protocol: MultiRound, parameters, dropouts: Mapping[str, Sequence[int]]) -> np.ndarray:
    """The users who send the round the release is over (no dropout at it or before), ascending."""
    names = [r.name for r in protocol.rounds]
    gone = {u for name, users in dropouts.items() if names.index(name) <= names.index(protocol.release_round)
            for u in users}
    return np.array([u for u in range(parameters.n_users) if u not in gone], dtype=np.int64)


@dataclass
class RoundsRun:
    """A run of every round: the release (the coordinator's, or the second server's), the transcript, and the users'
    roles as the run left them."""

    release: Any
    transcript: dict[str, dict[str, int]]
    users: list


class _Traffic:
    """What each kind of party sent and received: messages, bytes, and each message kind's entries."""

    def __init__(self, protocol: MultiRound) -> None:
        self.entries, self.parties = protocol.entries, {}

    def count(self, party: str, direction: str, raw: bytes) -> None:
        tally = self.parties.setdefault(party, {})
        kind, entries = self.entries(raw)
        for key, value in ((f"messages_{direction}", 1), (f"bytes_{direction}", len(raw)),
                           (f"{direction} {kind}", entries)):
            tally[key] = tally.get(key, 0) + value

    def add(self, party: str, key: str, value: int) -> None:
        tally = self.parties.setdefault(party, {})
        tally[key] = tally.get(key, 0) + value


def run_rounds(protocol: MultiRound, parameters, codes: np.ndarray, rngs: Mapping[str, np.random.Generator],
               dropouts: Mapping[str, Sequence[int]] | None = None, min_survivors: int | None = None,
               progress: Progress | None = None) -> RoundsRun:
    """Every round of ``protocol`` over users holding ``codes``: the release and the transcript. ``rngs``: the
    users' stream ("users", drawn in turn by each user's role), the servers' ("server") and the users' identity
    keys' ("identities": each user's role takes his, and the coordinator finds their public keys in the round
    state, ``state["identities"]``, as the services' roster gives them). ``min_survivors``:
    the task's (default: the least the protocol allows). A round that closes with fewer answers than it needs
    raises :class:`RoundFailed`, as the task would fail. The neighbour graph's seed (``state["graph_seed"]``, which
    the organisation draws when it signs the roster) is drawn from the identities' stream after the keys: a seeded
    simulation's graph is the seed's, not public randomness no party controls."""
    dropouts = dropouts or {}
    n = parameters.n_users
    least = protocol.least_survivors(parameters) if min_survivors is None else min_survivors
    coordinator = protocol.coordinator(parameters, least, rng=rngs["server"])
    keys = [identity.generate(rngs["identities"]) for _ in range(n)]
    users = [protocol.user(parameters, i, least, rng=rngs["users"], identity=keys[i]) for i in range(n)]
    identities = {i: identity.public_key(key) for i, key in enumerate(keys)}
    server = protocol.parties[0]
    traffic = _Traffic(protocol)
    traffic.add("user", "parties", n)
    traffic.add(server, "parties", 1)
    # the signed roster's, beside the coordinator's state as the round driver puts them
    roster = {"identities": identities, "graph_seed": rngs["identities"].bytes(32).hex()}
    state: dict = dict(roster)
    messages: dict[str, dict[int, bytes]] = {}  # round -> user -> his message to the server
    relayed: dict[str, dict[int, dict[int, bytes]]] = {}  # relay -> recipient -> sender -> message
    gone: set[int] = set()
    for number, round_ in enumerate(protocol.rounds, 1):
        expected = coordinator.expected(round_, state)
        if not expected:  # a round nobody is asked to answer (TSS's recovery when every helper summed)
            continue
        gone |= set(dropouts.get(round_.name, ()))
        senders = [u for u in expected if u not in gone]
        read = {name: messages[name] for name in round_.reads}
        inboxes = []
        for u in senders:
            inbox = coordinator.inbox(round_, u, state, read)
            if round_.delivers:
                inbox[round_.delivers] = relayed.get(round_.delivers, {}).get(u, {})
            for raw in messages_in(inbox):
                traffic.count("user", "received", raw)
            if round_.value:
                inbox["value"] = int(codes[u])
            inboxes.append(inbox)
        outboxes = protocol.answer([users[u] for u in senders], round_, inboxes)
        stored: dict[int, bytes] = {}
        for u, out in zip(senders, outboxes):
            if out is None:  # he refused what he was shown (a ParameterError of his role): he sends nothing
                traffic.add("user", "refusals", 1)
                continue
            try:  # what the coordinator takes, as the service's driver would
                if round_.to_server and round_.seal:
                    if len(out.message) != coordinator.message_size(round_, u, state, read):
                        raise ParameterError("message", "of the size the round expects", len(out.message))
                elif round_.to_server:
                    coordinator.check(round_, u, out.message, state, read)
                sizes = coordinator.recipients(round_, u, state, read) if round_.relay else {}
                if {k: len(m) for k, m in out.relayed.items()} != sizes:
                    raise ParameterError("relayed", "a message to each recipient the round expects", sorted(out.relayed))
            except ParameterError:
                traffic.add(server, "refused", 1)
                continue
            stored[u] = out.message if round_.to_server else b""
            for raw in ([out.message] if round_.to_server else []) + list(out.relayed.values()):
                traffic.count("user", "sent", raw)
            if round_.to_server:
                traffic.count(server, "received", out.message)
            for recipient, raw in out.relayed.items():
                relayed.setdefault(round_.relay, {}).setdefault(recipient, {})[u] = raw
                traffic.add(server, "bytes_relayed", len(raw))
        messages[round_.name] = stored
        answered = sorted(stored)
        fewest, what = coordinator.minimum(round_)
        if len(answered) < fewest:
            raise RoundFailed(f"{len(answered)} of the {len(expected)} users round {number} ({round_.name}) expected "
                              f"answered, fewer than {what}: nothing was released")
        try:
            state = {**coordinator.close(round_, answered, state, messages), **roster}
        except ParameterError as err:  # what a server refuses as the round closes (TSS's S2: sums without a count)
            raise RoundFailed(f"round {number} ({round_.name}) could not close: {err}; nothing was released") from None
        if progress:
            progress(round_.name, number, len(protocol.rounds))
    handed = coordinator.finish(state, messages)
    if protocol.releaser is None:
        return RoundsRun(handed, traffic.parties, users)
    try:
        return RoundsRun(protocol.releaser(parameters, least).release(handed), traffic.parties, users)
    except ParameterError as err:  # nothing the second server can complete
        raise RoundFailed(f"the release was refused: {err}; nothing was released") from None
