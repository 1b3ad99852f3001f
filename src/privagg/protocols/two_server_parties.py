"""TSS and TSS' as separate parties: the users' rounds (reporter, and helper when elected), S1's election and
S2's release, sans I/O, every message bytes (:mod:`privagg.protocols.two_server_messages`).

Algorithm 3 (reference §2.5) over a network where users drop out, in four rounds; S1
(:mod:`privagg.service.two_servers.servers`) relays, sets the deadlines, and hands S2 what S2 needs. What follows is
derived in docs/privacy.md, "Dropouts in TSS":

round 1, report set
    User i draws his coin and his report set A_i of alpha N items (:func:`report_sets`) and sends
    A_i to S1. R1: the users whose set reached S1 by the deadline. S1 counts m_j over R1 and elects
    max(m_j, phi + 1) helpers H_j per item among R1 (:func:`elect`'s rule, its pool R1:
    :meth:`FirstServer.elect`), has S2 check and sign the election (:mod:`~privagg.protocols.two_server_election`),
    and serves it with S2's signature to every reporter.
round 2, shares
    Reporter i checks S2's signature of the election (S2's key from the task) and its rules, then shares his
    entry e_ij = coin_i [v_i = j] of each j in A_i among H_j (:func:`share_entries`): one message per helper,
    holding his shares of the items that helper serves, each sealed to its helper; a share for himself (a
    reporter may be elected) he keeps. R2: the reporters whose shares all reached S1 by the deadline; only
    theirs are delivered.
round 3, helper sums
    Helper h sums, per item he serves, the shares R2's reporters sent him (his own too, if he is one of
    them) and sends the sums to S2, sealed to S2 (S1 relays what it cannot read), the seal binding R2 (shown to
    him) and his numbers of reporters. He refuses an item's list of fewer than m_j - (|R1| - |R2|) reporters, or
    of users outside R2 (the attested election's m_j: S1 may leave out only those who missed round 2;
    docs/privacy.md, "A helper's lists"). As the round closes, S2 names
    the sums that do not open or decode (:meth:`SecondServer.unopened`); their senders count as helpers who sent
    none.
round 4, recovery (only when helpers missed round 3)
    For an item j with R2 reporters whose helpers D_j sent no sum, D_j not all of H_j: each of item j's R2
    reporters reveals to S2 the shares he sent D_j. Every reporter's shares to the other helpers stay hidden
    in their sums, so S2 learns the item's count and uniform values besides. A reporter refuses a request
    naming every helper of an item (those shares add up to his entry), or naming himself for an item he
    sent a sum for; a hand-over naming a helper whose sum it holds fails the task at S2.
release (S2)
    Per item, the helpers' sums plus the recovered shares: the count of item j over R2 exactly; estimates
    tau_j / p' with the guarantee recomputed for the |R2| users who took part
    (:func:`~privagg.protocols.sharing_parties.survivors_parameters`). An item whose reporter missed round 4
    cannot be completed and is not released (his entries are in the other helpers' sums, and removing a
    reporter needs him); the others are. An item with R2 reporters whose helpers all missed round 3 fails the
    task as round 3 closes: S2 opens no sum then (:meth:`SecondServer.backed`).
"""

from __future__ import annotations

import base64
import dataclasses
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from ..core.randomness import RNGLike, resolve
from ..core.sharing import element_bytes, share
from ..errors import ParameterError, check_integer
from .roles import MultiRound, Outbox, Round
from .sampling_sharing import bernoulli
from .sharing_parties import HELD_BYTES, survivors_parameters
from .tss_parameters import TSSParameters
from .two_server_election import Election, as_inbox, check_attested, raw_bytes
from .two_server_second import (Handover, SecondServer, TSSRelease, asked_of,  # noqa: F401 (S2's, re-exported)
                                survivors_privacy)
from .two_server_messages import (FIRST, HEADER, INDEX, RECOVERY, REPORT_SET, SECOND, SHARES, SUMS, VERSION, _items,
                                  _users, bitmap_users, check_min_survivors, decode, encode, message_bytes,
                                  message_entries, survivors_bitmap)

# --- the draws: report sets, shares of an entry, the election ----------------------------------------------

REPORT_KEYS_ELEMENTS = 1 << 22  # report sets are drawn from this many random keys at a time


def report_sets(parameters: TSSParameters, codes, rng: RNGLike = None) -> tuple[np.ndarray, np.ndarray]:
    """Algorithm 3, L2-9, for a batch of users: (participation coins, report sets A_i of alpha N items as users x
    alpha N item indices, sorted). Uniform stage: A_i is a uniform alpha N-subset. Adaptive: the user's item is in
    A_i with probability p_chi = gamma alpha / (gamma alpha + 1 - alpha) and the rest is uniform, which is
    Pr[A | v] proportional to gamma^[v in A] (reference §3.5). Users whose coin is 0 still report a set (their
    entries are zeros), or S1 would learn the coin. Subsets come from integer random keys (the alpha N smallest of
    N), no floating point, drawn for chunks of users so that the keys take about REPORT_KEYS_ELEMENTS at a time."""
    p, rng = parameters, resolve(rng)
    codes = p.check_codes(codes)
    coins = bernoulli(p.sampling_probability, codes.size, rng)
    include = bernoulli(p.inclusion_probability, codes.size, rng) if p.second_stage == "adaptive" else None
    size, N = p.report_size, p.domain_size
    if size == N:
        return coins, np.tile(np.arange(N), (codes.size, 1))
    reports = np.empty((codes.size, size), dtype=np.int64)
    chunk = max(1, REPORT_KEYS_ELEMENTS // N)
    for lo in range(0, codes.size, chunk):
        keys = rng.integers(0, 2**62, size=(min(chunk, codes.size - lo), N), dtype=np.int64)
        if include is not None:  # the own item first when included, last otherwise; the others at random
            keys[np.arange(keys.shape[0]), codes[lo:lo + chunk]] = np.where(include[lo:lo + chunk], -1, 2**62)
        reports[lo:lo + chunk] = np.sort(np.argpartition(keys, size - 1, axis=1)[:, :size], axis=1)
    return coins, reports


def share_entries(parameters: TSSParameters, entries, helpers: int, rng: RNGLike = None) -> np.ndarray:
    """(helpers, reporters): each reporter's 0/1 entry for one item in ``helpers`` additive shares, row k to the
    item's k-th helper (Algorithm 3, L15-18); with one helper, the entry itself."""
    field, entries = parameters.field, np.asarray(entries)
    entries = field.element(entries.astype(np.uint8) if entries.dtype == bool else entries).astype(field.dtype)
    return entries[None, :] if helpers == 1 else share(field, entries, helpers, rng)


def elect(parameters, reports: np.ndarray, rng: RNGLike = None) -> tuple[np.ndarray, list[np.ndarray]]:
    """S1's rule (Algorithm 3, L11-14): m_j counted over the report sets, and max(m_j, phi + 1) distinct helpers
    per item drawn uniformly from the ``parameters.n_users`` users (without replacement; a reporter may be
    elected)."""
    p, rng = parameters, resolve(rng)
    counts = np.bincount(reports.ravel(), minlength=p.domain_size)
    sizes = np.maximum(counts, p.colluders + 1) if p.colluders else counts
    return counts, [rng.choice(p.n_users, size=int(s), replace=False) for s in sizes]


# --- a user ------------------------------------------------------------------------------------------------


@dataclass
class UserState:
    """What a user keeps between rounds: his index, the rounds he answered, his report set and entries (round
    1), each item's helpers and his shares to them in their order, and of the election S2 attested |R1| and the m_j
    of the items he helps with (round 2; ``senders`` 0: not known), the items he sent sums for (round 3). Plain data
    with an encoding (:meth:`to_bytes`), so that a device or a test harness can store it.
    """

    index: int
    answered: list[int] = dataclasses.field(default_factory=list)
    items: list[int] = dataclasses.field(default_factory=list)
    entries: list[int] = dataclasses.field(default_factory=list)
    helpers: dict[int, list[int]] = dataclasses.field(default_factory=dict)
    shares: dict[int, list[int]] = dataclasses.field(default_factory=dict)
    summed: list[int] = dataclasses.field(default_factory=list)
    senders: int = 0
    served: dict[int, int] = dataclasses.field(default_factory=dict)

    def to_bytes(self) -> bytes:
        return json.dumps({"version": VERSION, **dataclasses.asdict(self)}).encode()

    @classmethod
    def from_bytes(cls, raw: bytes) -> "UserState":
        try:
            data = {"senders": 0, "served": {}, **json.loads(raw)}  # (an older release's state has neither)
            assert data.pop("version") == VERSION and set(data) == {f.name for f in dataclasses.fields(cls)}
            state = cls(data["index"], data["answered"], data["items"], data["entries"],
                        {int(j): h for j, h in data["helpers"].items()}, {int(j): s for j, s in data["shares"].items()},
                        data["summed"], data["senders"], {int(j): m for j, m in data["served"].items()})
            assert len(state.entries) == len(state.items) and state.helpers.keys() == state.shares.keys()
            assert all(len(state.helpers[j]) == len(state.shares[j]) for j in state.helpers)
        except Exception:
            raise ParameterError("user state", f"a state written by UserState.to_bytes (version {VERSION})",
                                 f"{len(raw)} unreadable bytes") from None
        return state


class TSSUser:
    """User ``index`` of a TSS or TSS' task, one round at a time (module docstring): a reporter, and a helper
    when S1 elects him.

    ``min_survivors``: the task's. ``rng=None`` (a real user) draws his coin, his report set and his shares
    from the secure generator; a seeded simulation passes a generator. ``state`` resumes a user saved with
    ``state.to_bytes()``. ``identity``: his Ed25519 private key (unused: no round of his signs protocol data).
    ``second``: S2's public identity key, from the task document the organisation signed (the SDK passes it); a
    role built without it (a simulation, whose S1 is honest) takes the one S1's round-2 inbox carries.
    """

    def __init__(self, parameters: TSSParameters, index: int, min_survivors: int, rng: RNGLike = None,
                 state: UserState | None = None, identity: bytes | None = None, second: bytes | None = None) -> None:
        self.min_survivors = check_min_survivors(parameters, min_survivors)
        self.parameters, self.field, self.rng, self.second = parameters, parameters.field, rng, second
        index = check_integer("user index", index, 0, parameters.n_users - 1)
        if state is None:
            state = UserState(index)
        elif state.index != index:
            raise ParameterError("user state", f"the state of user {index}", f"user {state.index}'s")
        self.state, self.index = state, index

    def _expect(self, round_: int, needs: int | None) -> None:
        done = self.state.answered
        if round_ in done or (done and round_ < max(done)):
            raise ParameterError("round", f"a round after round {max(done)} (each round is answered once, in order)",
                                 f"round {round_}")
        if needs is not None and needs not in done:
            raise ParameterError("round", f"round {needs} answered before round {round_}", f"round {round_}")

    def report(self, value: int) -> Outbox:
        """Round 1: his coin and report set drawn, the set as a message to S1."""
        self._expect(1, None)
        coins, sets = report_sets(self.parameters, np.array([value]), self.rng)
        self.state.items = [int(j) for j in sets[0]]
        self.state.entries = [int(coins[0]) * int(j == value) for j in sets[0]]
        self.state.answered.append(1)
        return Outbox(encode(self.parameters, REPORT_SET, self.index, FIRST, sets[0]), {})

    def share(self, election: list, attestation: list, second: list | None = None) -> Outbox:
        """Round 2: given S1's election as S2 attested it (R1, the m_j and the H_j as lists; S2's signature; ``second``:
        S2's identity key as S1 relays it, used only by a role built without one), his shares of each item of his
        set to its helpers, one message per helper (seal each to it); his own share, where he is a helper, he keeps.
        Refused (a ParameterError, and nothing to send) unless S2's signature verifies and the election keeps S2's
        rules (:func:`~privagg.protocols.two_server_election.check_attested`), names him in R1, and gives each of
        his items at least max(1, phi + 1) helpers."""
        p, least = self.parameters, max(1, self.parameters.colluders + 1)
        self._expect(2, 1)
        key = self.second if self.second is not None else second
        elected = self._attested(election, attestation, key)
        if self.index not in elected.senders:
            raise ParameterError("election.senders", f"R1 with user {self.index} (he sent his report set)",
                                 "an R1 without him")
        sent = {}
        for j, entry in zip(self.state.items, self.state.entries):
            listed = list(elected.helpers[j])
            if len(listed) < least:
                raise ParameterError(f"helpers of item {j}", f"at least {least} users (max(m_j, phi + 1) with phi = "
                                     f"{p.colluders}, m_j >= 1 as he reports it)", len(listed))
            shares = share_entries(p, np.array([entry]), len(listed), self.rng)[:, 0]
            self.state.helpers[j], self.state.shares[j] = listed, [int(s) for s in shares]
            for helper, value in zip(listed, shares):
                if helper != self.index:
                    sent.setdefault(helper, []).append((j, value))
        self.state.answered.append(2)
        return Outbox(None, {h: encode(p, SHARES, self.index, h, [j for j, _ in pairs], [v for _, v in pairs])
                             for h, pairs in sorted(sent.items())})

    def _attested(self, election, attestation, key) -> Election:
        """The election S2 attested (:func:`~privagg.protocols.two_server_election.check_attested`), with what a
        helper checks his round-3 lists against kept: |R1| and the m_j of the items he helps with."""
        if not key:
            raise ParameterError("second", "S2's identity key from the task (a task of an older release has none: "
                                 "recreate it)", "none")
        elected = check_attested(self.parameters, election, attestation, key, self.min_survivors)
        self.state.senders = len(elected.senders)
        self.state.served = {j: elected.counts[j] for j in elected.by_helper.get(self.index, ())}
        return elected

    def sums(self, reporters: Mapping[int, Sequence[int]], shares: Mapping[int, bytes], survivors: list,
             election: list | None = None, attestation: list | None = None, second: list | None = None) -> Outbox:
        """Round 3, as a helper: given each item he serves with its R2 reporters, R2 (``survivors``: its bitmap,
        :func:`~privagg.protocols.two_server_messages.survivors_bitmap`, as a list of byte values), and the messages
        those reporters sent him, the field sum of the shares per item (his own share too where he is a reporter)
        and the number of reporters it adds up, as a message to S2 (which checks those numbers against S1's). A
        service seals it binding R2 and those numbers (``round_tasks.second_info``): S2 opens it only with the R2
        and the |R_j| S1 names to it as round 3 closes, which it checks add up and holds the hand-over to.

        Refused (a ParameterError, and nothing to send) unless the items are those S2's attested election has him
        help with, R2 holds at least min_survivors users and at most |R1|, each list is within R2, and holds at
        least m_j - (|R1| - |R2|) of the item's m_j reporters: S1 may leave out only reporters who missed round 2.
        Keeping all but one reporter from every helper would make their sums his entry, which S2 opens
        (docs/privacy.md, "A helper's lists"). The election is the one he checked in round 2; a helper who missed
        round 2 checks the one his inbox carries (``election``, ``attestation``, ``second``: as round 2's)."""
        p = self.parameters
        self._expect(3, 1)
        if not self.state.senders:  # he missed round 2 (or an older release saved his state): not checked yet
            if election is None:
                raise ParameterError("election", "S2's attested election in his round-3 inbox (he holds none: he "
                                     "missed round 2, or an older release saved his state)", "none")
            self._attested(election, attestation, self.second if self.second is not None else second)
        r2 = bitmap_users(raw_bytes(survivors, "survivors", -(-p.n_users // 8)), p.n_users, "survivors")
        if not self.min_survivors <= len(r2) <= self.state.senders:
            raise ParameterError("survivors", f"R2 of at least min_survivors = {self.min_survivors} and at most "
                                 f"|R1| = {self.state.senders} users", len(r2))
        items = _items(p, reporters, "items helped")
        served = self.state.served
        if not items or items != sorted(served):
            raise ParameterError("items helped", f"the items S2's attested election has user {self.index} help with "
                                 f"{sorted(served)[:8]}", items[:8])
        lists = {j: _users(p, reporters[j], f"reporters of item {j}") for j in items}
        absent = self.state.senders - len(r2)  # the users of R1 who missed round 2
        for j in items:
            if not set(lists[j]) <= r2:
                raise ParameterError(f"reporters of item {j}", "users of R2", sorted(set(lists[j]) - r2)[:5])
            if not served[j] - absent <= len(lists[j]) <= served[j]:
                raise ParameterError(f"reporters of item {j}", f"between m_j - (|R1| - |R2|) = {served[j]} - {absent} "
                                     f"and m_j = {served[j]} of its reporters (S1 may leave out only those who missed "
                                     "round 2)", len(lists[j]))
        expected = {}
        for j in items:
            for sender in lists[j]:
                if sender != self.index:
                    expected.setdefault(sender, []).append(j)
        if set(shares) != set(expected):
            missing, unlisted = sorted(set(expected) - set(shares))[:5], sorted(set(shares) - set(expected))[:5]
            raise ParameterError("round-2 shares", "one message from each listed reporter",
                                 f"missing {missing}, unlisted {unlisted}")
        totals = dict.fromkeys(items, np.uint64(0))
        for sender, raw in shares.items():
            message = decode(p, raw, SHARES, sender, self.index, expected[sender])
            for j, value in zip(expected[sender], message.values):
                totals[j] = self.field.add(totals[j], value)
        for j in items:
            if self.index in lists[j]:
                if self.index not in self.state.helpers.get(j, ()):
                    raise ParameterError(f"reporters of item {j}", f"a list without user {self.index} (he holds no "
                                         f"share of his own for item {j})", "a list naming him")
                own = self.state.shares[j][self.state.helpers[j].index(self.index)]
                totals[j] = self.field.add(totals[j], np.uint64(own))
        self.state.summed = items
        self.state.answered.append(3)
        return Outbox(encode(p, SUMS, self.index, SECOND, items, [totals[j] for j in items],
                             counts=[len(lists[j]) for j in items]), {})

    def recover(self, dropped: Mapping[int, Sequence[int]]) -> Outbox:
        """Round 4, as a reporter: given, for items of his set, the helpers that sent S2 no sum, his shares to
        them as a message to S2. Refused (a ParameterError, and nothing to send) for an item he did not share,
        helpers not of the item, every helper of the item (his shares to all of them add up to his entry), or
        himself for an item he sent a sum for."""
        p = self.parameters
        self._expect(4, 2)
        items = _items(p, dropped, "dropped helpers")
        if not items:
            raise ParameterError("dropped helpers", "at least one item (he takes part in round 4 when asked)", "none")
        pairs = []
        for j in items:
            if j not in self.state.helpers:
                raise ParameterError("dropped helpers", f"items he shared, of {self.state.items[:8]}", j)
            helpers, named = self.state.helpers[j], _users(p, dropped[j], f"dropped helpers of item {j}")
            if not named or not set(named) < set(helpers):
                raise ParameterError(f"dropped helpers of item {j}", f"some but not all of the item's helpers "
                                     f"{helpers[:8]} (his shares to all of them would be his entry)", named[:8])
            if self.index in named and j in self.state.summed:
                raise ParameterError(f"dropped helpers of item {j}", f"a list without user {self.index}, who sent "
                                     "his sum for the item", "a list naming him")
            pairs += [(j, d, self.state.shares[j][helpers.index(d)]) for d in named]
        self.state.answered.append(4)
        return Outbox(encode(p, RECOVERY, self.index, SECOND, [j for j, _, _ in pairs], [v for _, _, v in pairs],
                             [d for _, d, _ in pairs]), {})


# --- S1 ----------------------------------------------------------------------------------------------------


class ElectionPool(NamedTuple):
    """What :func:`elect` reads of the parameters, for an election among R1's users: their number, N and phi. Its
    draws are positions in R1."""

    n_users: int
    domain_size: int
    colluders: int


@dataclass(frozen=True)
class Recovery:
    """S1's plan when round 3 closes: for each item with R2 reporters whose helpers ``dropped`` sent no sum,
    some but not all of them, the recovery asked of all its R2 reporters; ``lost``: the items with R2 reporters
    whose every helper missed round 3 (recovering them would reveal each reporter's entry)."""

    dropped: dict[int, tuple[int, ...]]
    lost: tuple[int, ...]

    def asked(self, reporters: Sequence[Sequence[int]]) -> dict[int, dict[int, list[int]]]:
        """reporter -> {item: the dropped helpers he is asked about}, given each item's R2 reporters
        (:func:`~privagg.protocols.two_server_second.asked_of`)."""
        return asked_of({j: (helpers, reporters[j]) for j, helpers in self.dropped.items()})

    def to_dict(self) -> dict:
        return {"dropped": [{"item": j, "helpers": list(d)} for j, d in sorted(self.dropped.items())],
                "lost": list(self.lost)}

    @classmethod
    def from_dict(cls, data: dict) -> "Recovery":
        return cls({e["item"]: tuple(e["helpers"]) for e in data["dropped"]}, tuple(data["lost"]))


class FirstServer:
    """S1 of a TSS task, the coordinator of its rounds (:data:`ROUNDS`): checks the report sets, elects the helpers
    (from ``rng``), has S2 attest the election, says what each party must send, has S2 say which helpers' sums do
    not open, plans the recovery, and hands S2 what S2 releases (:class:`Handover`). It never opens a share or a
    sum (sealed to their recipients); it relays them.

    ``second``: how S1 asks S2 (:meth:`SecondServer.attest` and :meth:`SecondServer.unopened`, or the service's
    client of S2's routes); None (a simulation) plays S2's role in-process, its identity key drawn from ``rng``
    when first needed."""

    def __init__(self, parameters: TSSParameters, min_survivors: int, rng: RNGLike = None,
                 second=None) -> None:
        self.min_survivors = check_min_survivors(parameters, min_survivors)
        self.parameters, self.rng, self._second = parameters, rng, second

    @property
    def second(self):
        if self._second is None:
            from ..core.identity import generate

            self._second = SecondServer(self.parameters, self.min_survivors, identity=generate(self.rng))
        return self._second

    @second.setter
    def second(self, value) -> None:
        self._second = value

    # --- the rounds (roles.Coordinator) ---------------------------------------------------------------------
    def expected(self, round_: Round, state: dict) -> list[int]:
        """report: every user; share: R1; sums: the elected helpers; recover: the R2 reporters asked."""
        if round_.expects == "enrolled":
            return list(range(self.parameters.n_users))
        election = self.election(state)
        if round_.expects == "senders":
            return list(election.senders)
        if round_.expects == "helpers":
            return sorted(election.by_helper)
        return sorted(self.asked(state))

    def minimum(self, round_: Round) -> tuple[int, str]:
        """R1 and R2 need the task's minimum; the helpers' and the recovery's rounds go on with whoever answers
        (a missing sum is recovered, or its item lost)."""
        if round_.minimum == "min_survivors":
            return self.min_survivors, f"the task's minimum of {self.min_survivors}"
        return 0, "none"

    def check(self, round_: Round, user: int, message: bytes, state: dict, messages: Mapping) -> None:
        """report: his alpha N distinct items, to S1."""
        self.check_report_set(message, user)

    def message_size(self, round_: Round, user: int, state: dict, messages: Mapping) -> int:
        """sums: an entry per item he helps with; recover: per dropped helper he is asked about."""
        if round_.name == "sums":
            return message_bytes(self.parameters, SUMS, len(self.election(state).by_helper[user]))
        asked = self.asked(state)[user]
        return message_bytes(self.parameters, RECOVERY, sum(len(d) for d in asked.values()))

    def recipients(self, round_: Round, user: int, state: dict, messages: Mapping) -> dict[int, int]:
        """share: one message to each helper of his items (but himself), of as many shares as items they share."""
        election, items = self.election(state), self.check_report_set(messages["report"][user], user)
        return {h: message_bytes(self.parameters, SHARES, k) for h, k in self.expected_shares(
            election, user, items).items()}

    def inbox(self, round_: Round, user: int, state: dict, messages: Mapping) -> dict:
        """share: the election as S2 attested it (with S2's key); sums: each item he helps with and its R2 reporters
        (their shares come with it, relayed), and the attested election too for a helper not in R2; recover: the
        dropped helpers of his items he is asked about."""
        if round_.name == "share":
            return self._attested(state)
        if round_.name == "sums":
            items = self.election(state).by_helper[user]
            n = self.parameters.n_users
            reporters = {"reporters": {j: list(state["reporters"][j]) for j in items}, "survivors": self._kept(
                "R2 bitmap", state, ("survivors",), lambda: list(survivors_bitmap(state["survivors"], n)))}
            if user in self._kept("R2", state, ("survivors",), lambda: set(state["survivors"])):
                return reporters
            # a helper who missed round 2 has not checked the election his lists are checked against
            return {**self._attested(state), **reporters}
        if round_.name == "recover":
            return {"dropped": self.asked(state)[user]}
        return {}

    def close(self, round_: Round, answered: list[int], state: dict, messages: Mapping) -> dict:
        """report: the election among R1, as S2 attested it; share: R2 and each item's R2 reporters; sums: the
        helpers whose sums S2 cannot open (treated as dropped), and the recovery plan."""
        if round_.name == "report":
            sets = {u: self.check_report_set(messages["report"][u], u) for u in answered}
            election = self.elect(sets, self.rng)
            signature, key = self.second.attest(election)
            return {**state, "election": election.to_dict(), "attestation": {
                "signature": base64.b64encode(signature).decode(), "key": base64.b64encode(key).decode()}}
        if round_.name == "share":
            sets = {u: self.check_report_set(messages["report"][u], u).tolist() for u in answered}
            return {**state, "survivors": list(answered),
                    "reporters": [list(r) for r in self.reporters(sets, self.parameters.domain_size)]}
        if round_.name == "sums":
            election = self.election(state)
            unopened = sorted(self.second.unopened(election, {h: messages["sums"][h] for h in answered},
                                                   state["survivors"], [len(r) for r in state["reporters"]]))
            plan = self.plan(election, state["reporters"], [h for h in answered if h not in unopened])
            return {**state, "unopened": unopened, "recovery": plan.to_dict()}
        return dict(state)

    def finish(self, state: dict, messages: Mapping) -> "Handover":
        """The hand-over to S2 once the rounds are done (:meth:`handover`)."""
        return self.handover(state, messages.get("sums", {}), messages.get("recover", {}))

    def handover(self, state: dict, sums: Mapping[int, bytes], recoveries: Mapping[int, bytes]) -> "Handover":
        """What S2 gets: the users, the election, each item's number of R2 reporters, the recovery plan with the
        reporters asked, the helpers whose sums S2 could not open (their sums apart, for S2 to open again before it
        names them), and the helpers' sums and the reporters' recoveries (sealed to S2)."""
        election, reporters = Election.from_dict(state["election"]), state["reporters"]
        plan, unopened = Recovery.from_dict(state["recovery"]), tuple(state.get("unopened", ()))
        return Handover(self.parameters.n_users, election.senders, tuple(state["survivors"]), election.counts,
                        election.helpers, tuple(len(r) for r in reporters),
                        {j: (d, tuple(reporters[j])) for j, d in plan.dropped.items()},
                        {h: m for h, m in sums.items() if h not in unopened}, dict(recoveries), unopened,
                        unopened_sums={h: m for h, m in sums.items() if h in unopened})

    # --- what is published, parsed once a round --------------------------------------------------------------
    def _attested(self, state: Mapping) -> dict:
        """The election as S2 attested it, with S2's key, as an inbox carries them (built once a round)."""
        attested = state.get("attestation", {"signature": "", "key": ""})  # none: elected by an older release
        return self._kept("share inbox", state, ("election", "attestation"), lambda: as_inbox(
            self.election(state), base64.b64decode(attested["signature"]), base64.b64decode(attested["key"])))

    def election(self, state: Mapping) -> Election:
        """The election S1 published (``state["election"]``), parsed once for as long as the state is the same."""
        return self._kept("election", state, ("election",), lambda: Election.from_dict(state["election"]))

    def asked(self, state: Mapping) -> dict[int, dict[int, list[int]]]:
        """The recovery plan's reporters asked (:meth:`Recovery.asked`), built once for the state published."""
        return self._kept("asked", state, ("recovery", "reporters"),
                          lambda: Recovery.from_dict(state["recovery"]).asked(state["reporters"]))

    def _kept(self, name: str, state: Mapping, fields: tuple[str, ...], build):
        """What ``build()`` makes of ``state``'s ``fields``, kept until they change. The round driver keeps a round's
        state, so a request finds the very objects and costs O(1), not the O(n) of parsing the election (O(n^2) a
        round); a caller with a state of its own (a simulation) has them compared."""
        kept, now = self.__dict__.setdefault("_parsed", {}).get(name), tuple(state.get(f) for f in fields)
        if kept is None or not all(a is b or a == b for a, b in zip(kept[0], now)):
            kept = self._parsed[name] = now, build()
        return kept[1]

    # --- the rules ------------------------------------------------------------------------------------------

    def check_report_set(self, raw: bytes, user: int) -> np.ndarray:
        """A user's round-1 message, checked: his alpha N distinct items, to S1."""
        return decode(self.parameters, raw, REPORT_SET, user).items

    def elect(self, sets: Mapping[int, np.ndarray], rng: RNGLike = None) -> Election:
        """m_j over R1 (the users in ``sets``) and max(m_j, phi + 1) distinct helpers per item, uniformly among R1
        (:func:`elect` with R1 as its pool); refused below the task's minimum of users."""
        p, senders = self.parameters, sorted(sets)
        if len(senders) < self.min_survivors:
            raise ParameterError("round-1 senders", f"at least {self.min_survivors} (the task's minimum)", len(senders))
        reports = np.stack([np.asarray(sets[u], dtype=np.int64) for u in senders])
        counts, drawn = elect(ElectionPool(len(senders), p.domain_size, p.colluders), reports, rng)
        pool = np.array(senders, dtype=np.int64)
        return Election(tuple(senders), tuple(int(c) for c in counts),
                        tuple(tuple(sorted(int(u) for u in pool[d])) for d in drawn))

    @staticmethod
    def expected_shares(election: Election, user: int, items: Sequence[int]) -> dict[int, int]:
        """recipient -> the number of shares reporter ``user`` with report set ``items`` sends him in round 2."""
        counts: dict[int, int] = {}
        for j in items:
            for h in election.helpers[j]:
                if h != user:
                    counts[h] = counts.get(h, 0) + 1
        return counts

    @staticmethod
    def reporters(sets: Mapping[int, Sequence[int]], domain_size: int) -> tuple[tuple[int, ...], ...]:
        """Each item's reporters among the users of ``sets`` (R2), ascending."""
        out: list[list[int]] = [[] for _ in range(domain_size)]
        for user in sorted(sets):
            for j in sets[user]:
                out[j].append(user)
        return tuple(tuple(r) for r in out)

    @staticmethod
    def plan(election: Election, reporters: Sequence[Sequence[int]], summed: Sequence[int]) -> Recovery:
        """When round 3 closes: given each item's R2 reporters (:meth:`reporters`) and the helpers who sent sums
        (``summed``), the recovery each item with R2 reporters and a missing helper needs."""
        done, dropped, lost = set(summed), {}, []
        for j, helpers in enumerate(election.helpers):
            missing = tuple(h for h in helpers if h not in done)
            if reporters[j] and missing:
                if len(missing) == len(helpers):
                    lost.append(j)
                else:
                    dropped[j] = missing
        return Recovery(dropped, tuple(lost))


# --- the protocol as data ----------------------------------------------------------------------------------

# A faithful simulation's costs, measured on 2 busy cores: a reporter's message to a helper made, relayed and
# read (numpy's small arrays, the checks of decode) about 60 us; a share element about 1 us more.
MESSAGE_SECONDS, SHARE_SECONDS = 60e-6, 1e-6


def _pairs(parameters: TSSParameters) -> float:
    """About the (reporter, helper) messages of round 2: each reporter writes to the distinct helpers of his alpha
    N items, about alpha n each (m'_j ~ m_j ~ alpha n), at most the n - 1 others."""
    n, size = parameters.n_users, parameters.report_size
    return n * min(n - 1, size * max(parameters.report_fraction * n, parameters.colluders + 1))


def faithful_seconds(parameters: TSSParameters) -> float:
    """About what a faithful simulation of TSS or TSS' takes: round 2's messages and share elements (about
    alpha^2 n^2 N of them, as many as Algorithm 3's shares), each user's few other messages."""
    return _pairs(parameters) * MESSAGE_SECONDS + parameters.expected_shares * SHARE_SECONDS + \
        4 * parameters.n_users * MESSAGE_SECONDS


def faithful_bytes(parameters: TSSParameters) -> int:
    """About the memory a faithful simulation holds: every message of round 2 (a header, and an item and an
    element per share) and the users' states (a share and a helper per share)."""
    per_share = INDEX.itemsize + element_bytes(parameters.field)
    return int(_pairs(parameters) * (HEADER.size + HELD_BYTES) + parameters.expected_shares * (per_share + 64))


# The rounds (module docstring): S1 closes each once every user it expects answered, or at its deadline; R1 and R2
# need the task's minimum, the helpers' and the recovery's rounds go on with whoever answered.
ROUNDS = (
    Round("report", value=True),
    Round("share", expects="senders", to_server=False, relay="shares", relay_info=b"privagg tss share ",
          reads=("report",)),
    Round("sums", expects="helpers", seal="s2", delivers="shares", minimum="none"),
    Round("recover", expects="asked", seal="s2", minimum="none"),
)

PROTOCOL = MultiRound(
    rounds=ROUNDS, user=TSSUser, coordinator=FirstServer, releaser=SecondServer, release_round="share",
    survivors_parameters=survivors_parameters, survivors_privacy=survivors_privacy,
    least_survivors=lambda p: max(2, p.colluders + 1), entries=message_entries, faithful_seconds=faithful_seconds,
    faithful_bytes=faithful_bytes, parties=("s1", "s2"))
