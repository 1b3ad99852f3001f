"""DPDS and DPDG's server: the coordinator of their rounds and the release (:class:`SharingServer`), and the protocol
as data (:data:`ROUNDS`, :data:`PROTOCOL`: the services and the simulator run it from there). The users' role, the
key agreement and the checks both sides make are :mod:`privagg.protocols.sharing_parties` (its docstring has the
rounds); the messages :mod:`privagg.protocols.sharing_messages`. The derivations: docs/privacy.md, "Dropouts in DPDS
and DPDG" and "Dishonest parties"."""

from __future__ import annotations

import hashlib
from bisect import bisect_left
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from ..core import identity, shamir
from ..core.messages import MessageBatch
from ..core.randomness import RNGLike
from ..core.sharing import SEED_BYTES, expand
from ..errors import ParameterError
from ..privacy import neighbour_graph
from .results import FrequencyTable
from .roles import MultiRound, Round, RoundFailed
from .sampling_servers import SumServer
from .sampling_sharing import SharingParameters
from .sharing_messages import (BACKUP, COMMITMENTS, COMPLAINTS, HEADER, KEY_BYTES, KEY_MESSAGE, LIMBS,
                               MASK_SEED, MASKED_SUM, OPENINGS, PAIR_KEY, PAIR_SEEDS, REVEAL, SERVER, SIGNATURE,
                               MAGIC, USERS, VERSION, Message, Revealed, committed_to, decode,
                               decode_checked, encode, holders, message_bytes, message_entries, packed_commitment)
from .sharing_parties import (SIGNED_LISTS, PairShares, SharingUser, announces, answer, bound, check_min_survivors,
                              faithful_bytes, faithful_seconds, keys_digest, least_survivors, mask, signed_lists,
                              survivors_parameters, survivors_privacy, task_graph, threshold)


@dataclass(frozen=True)
class SharingRelease:
    """What the server releases: the estimates over the survivors, who they were, and the parameters with the
    guarantee recomputed for them (``honest_fraction`` = survivors / n); who complained about whom in round 2 and
    whom that excluded, the revealers whose shares did not match their dealers' commitments (``blamed``:
    revealer -> the owners of the discarded shares), and the dealers proven inconsistent and excluded in round 6
    (``inconsistent``: left out of the survivors)."""

    table: FrequencyTable
    enrolled: int  # n
    senders: int  # |U1'|, the round-1 senders kept by the check round
    survivors: int  # |U2| less the dealers proven inconsistent
    revealers: int  # the users who answered round 5
    threshold: int  # t, of the backups
    parameters: SharingParameters
    rows: MessageBatch  # what the release folded: the survivors' masked sums as (item, share) rows
    complaints: tuple[tuple[int, tuple[int, ...]], ...] = ()  # (complainer, the dealers he named)
    excluded: tuple[int, ...] = ()
    blamed: tuple[tuple[int, tuple[int, ...]], ...] = ()  # (revealer, the owners of his discarded shares)
    inconsistent: tuple[int, ...] = ()  # the dealers proven inconsistent, excluded in round 6
    graph_seed: str = ""  # a digest of the neighbour graph's seed (none on the complete graph)
    task: SharingParameters | None = None  # the task's parameters (default ``parameters``: nobody dropped out)

    @property
    def privacy(self):
        """The guarantee of this release: the recomputed parameters' delta at the calibrated epsilon, with who took
        part; on a neighbour graph, plus its failure terms (:func:`~privagg.protocols.sharing_graph.graph_delta`:
        equivocation at the task's colluding users, disconnection at them and the users not released) and its
        assumptions."""
        task = self.task or self.parameters
        left_out = (f"; {len(self.excluded)} excluded in round 2 on complaints (the dealer's or the complainer's "
                    "fault, which a backup sealed to its holder cannot prove)" if self.excluded else "") + (
            f"; {len(self.blamed)} revealers' wrong shares discarded" if self.blamed else "") + (
            f"; {len(self.inconsistent)} dealers proven inconsistent, excluded in round 6 (their terms removed with "
            "the survivors' pair seeds)" if self.inconsistent else "")
        shared = (f"{self.threshold}-out-of-{self.enrolled}" if not self.graph_seed else
                  f"{self.threshold}-out-of-{holders(task)} among each user's neighbours and himself")
        return survivors_privacy(
            task, self.survivors, "users who took part to the end",
            f"{self.senders} advertised in round 1 and passed the check, {self.revealers} revealed in round 5" +
            left_out,
            (f"served with key-agreed shares backed up {shared} (Shamir), each share committed to by its dealer: the "
             f"server learns only the survivors' sum unless it pools shares with {self.threshold} users; every "
             f"survivor checked {self.threshold} signatures of the survivor lists before revealing (a server that "
             "shows different lists is caught), and the users' identity keys are the organisation's roster's",
             "the survivors' inputs are trusted, not proven: a user may mask any vector in place of his own and move "
             "the estimates by any amount (DPDS refuses only counts that add up to more than its survivors)"),
            self.graph_seed)


class SharingServer:
    """The aggregating server of a DPDS or DPDG task, the coordinator of its rounds (:data:`ROUNDS`): whom each round
    expects, what it checks, what a user's inbox holds, what it publishes (U1, U1', U2, U3, the complaints and who
    they excluded), and the release of the survivors' sum.

    It never opens a backup (they are sealed to their recipients); it relays them, and between rounds keeps
    only the lists it published (its ``state``) and the messages (the service's database). The users' identity
    keys are ``state["identities"]`` (user -> Ed25519 public key), put there by whoever runs the rounds (the round
    driver stores the state without them)."""

    def __init__(self, parameters: SharingParameters, min_survivors: int, rng: RNGLike = None) -> None:
        self.parameters, self.field = parameters, parameters.field
        self.min_survivors = check_min_survivors(parameters, min_survivors)
        self.threshold = threshold(parameters)

    def graph(self, state: Mapping) -> neighbour_graph.Graph:
        """The task's graph (:func:`~privagg.protocols.sharing_parties.task_graph`): on a neighbour graph, ordered by
        ``state["graph_seed"]`` (:func:`graph_seed`), which whoever runs the rounds puts there from the
        organisation's signed roster (the round driver; the simulator draws it)."""
        return task_graph(self.parameters, graph_seed(state))

    # --- the rounds (roles.Coordinator) ---------------------------------------------------------------------
    def expected(self, round_: Round, state: dict) -> list[int]:
        """advertise: every user; check: U1; masked_sum: U1'; consistency: U2; reveal: U3; exclusion: U2 less the
        dealers proven inconsistent, if any (:data:`ROUNDS`)."""
        return list(range(self.parameters.n_users)) if round_.expects == "enrolled" else state[round_.expects]

    def minimum(self, round_: Round) -> tuple[int, str]:
        """The task's minimum of survivors, or (consistency, reveal) the backups' threshold t; the exclusion round
        closes with whoever answered (the release names a survivor who did not)."""
        if round_.minimum == "threshold":
            return self.threshold, f"the backups' threshold t = {self.threshold}"
        if round_.minimum == "none":
            return 0, "none"
        return self.min_survivors, f"the task's minimum of {self.min_survivors} survivors"

    def check(self, round_: Round, user: int, message: bytes, state: dict, messages: Mapping) -> None:
        """A user's commitments (advertise), key and complaints about U1 (check), masked sum, signature of the lists
        (consistency: valid under his identity key), revealed shares (checked against U1' and U2) or pair seeds
        (exclusion: one for each dealer proven inconsistent)."""
        p, name = self.parameters, round_.name
        if name == "advertise":
            self.check_message(message, COMMITMENTS, user)
        elif name == "check":
            accused = set(decode_checked(p, message, user)[1].tolist())
            if not accused <= set(among(self.graph(state), user, state["senders"])):
                raise ParameterError("message", "complaints about round-1 senders among his neighbours only",
                                     sorted(accused)[:5])
        elif name == "masked_sum":
            self.check_message(message, MASKED_SUM, user)
        elif name == "consistency":
            signature = self.check_message(message, SIGNATURE, user).payload
            identity.check(state["identities"][user], signature, SIGNED_LISTS, self.statement(state), "message",
                           f"user {user}'s identity key, of the lists published")
        elif name == "reveal":
            graph = self.graph(state)
            self.check_reveal(message, user, among(graph, user, state["checked"]), state["survivors"])
        else:
            self.check_pair_seeds(message, user, among(self.graph(state), user, state["inconsistent"]))

    def published(self, user: int, field: str, listed: Sequence[int]) -> bytes:
        """``listed`` as a USERS message to ``user`` (a bitmap of n bits), the bitmap built once per list."""
        bitmaps = self.__dict__.setdefault("_bitmaps", {})
        if not _same(bitmaps.get(field, (None,))[0], listed):
            bitmaps[field] = listed, encode(self.parameters, USERS, SERVER, 0, listed)[HEADER.size:]
        return HEADER.pack(MAGIC, VERSION, USERS, SERVER, user, self.parameters.n_users) + bitmaps[field][1]

    def statement(self, state: Mapping) -> bytes:
        """What the survivors sign in round 4 (:func:`~privagg.protocols.sharing_parties.signed_lists`), built once
        for the lists published."""
        key = (state["keys"], state["checked"], state["survivors"])
        kept = getattr(self, "_statement", None)
        if kept is None or not (kept[0][0] == key[0] and all(_same(a, b) for a, b in zip(kept[0][1:], key[1:]))):
            self._statement = key, signed_lists(self.graph(state), state["checked"], state["survivors"],
                                                bytes.fromhex(state["keys"]))
        return self._statement[1]

    def message_size(self, round_: Round, user: int, state: dict, messages: Mapping) -> int:
        raise ParameterError("round", "a round whose message is sealed to another party (DPDS has none)", round_.name)

    def recipients(self, round_: Round, user: int, state: dict, messages: Mapping) -> dict[int, int]:
        """advertise: a backup to each of his neighbours (every other user on the complete graph)."""
        size = message_bytes(self.parameters, BACKUP)
        return {k: size for k in self.graph(state).neighbours(user)} if round_.name == "advertise" else {}

    def inbox(self, round_: Round, user: int, state: dict, messages: Mapping) -> dict:
        """Everything about his neighbourhood only (on the complete graph, everyone): advertise: the graph's seed (a
        neighbour graph's; his SDK replaces it by the signed roster's); check: the commitments U1's neighbours made
        to his shares (the backups come with them, relayed); masked_sum: the keys of U1''s neighbours and his own;
        consistency: U1' and U2; reveal: U1', U2, the signatures of U3's users within k places of him on the cycle
        (whose holders' signatures each secret he holds needs) and their identity keys; exclusion: each proven
        dealer among his neighbours, his round-1 and round-2 messages and the openings that prove him inconsistent
        (never another user's shares)."""
        p, name, graph = self.parameters, round_.name, self.graph(state)
        if name == "exclusion":
            proven = among(graph, user, state["inconsistent"])
            proofs = dict(zip(state["inconsistent"], state["proofs"]))
            return {"commitments": {u: messages["advertise"][u] for u in proven},
                    "keys": {u: messages["check"][u] for u in proven},
                    "openings": {u: bytes.fromhex(proofs[u]) for u in proven}}
        if name == "check":  # each as its dealer signed it with the backup (bound)
            return {"commitments": {u: bound(p, graph_seed(state), u, user, messages["advertise"][u])
                                    for u in among(graph, user, state["senders"]) if u != user}}
        if name == "masked_sum":
            return {"keys": {u: messages["check"][u] for u in among(graph, user, state["checked"])}}
        if name == "advertise":
            return {} if graph.complete else {"graph_seed": graph.seed}
        lists = {"senders": state["checked"], "survivors": state["survivors"]}
        if not graph.complete:  # n bits each, not n integers
            lists = {field: self.published(user, field, listed) for field, listed in lists.items()}
        if name == "reveal":
            signed = messages["consistency"]  # U3's messages: the signers published
            signers = state["signers"] if graph.complete else [
                v for v in graph.near(user, 2 * graph.half) if member(state["signers"], v)]
            return {**lists, "signatures": {v: signed[v] for v in signers},
                    "identities": {v: state["identities"][v] for v in signers}}
        return lists

    def close(self, round_: Round, answered: list[int], state: dict, messages: Mapping) -> dict:
        """Who answered, published (U1, U2, U3); check: U1' (:meth:`checked`); reveal: the dealers proven
        inconsistent, if any, with their proofs (:meth:`proven`)."""
        if round_.name == "check":
            return self.checked(answered, state, messages)
        if round_.name == "reveal":
            return self.proven(state, messages)
        return {**state, round_.publishes: list(answered)} if round_.publishes else state

    def excluded(self, complaints: Mapping[int, Sequence[int]]) -> set[int]:
        """The users the check round excludes: every dealer complained about, but a complainer who names more than
        n - min_survivors, or more than k + 1 - t_k of his neighbours on a neighbour graph (excluding them all would
        fail the task, or leave him fewer than t_k honest holders: he lies or the task is lost either way, liveness
        (b)), is excluded himself and his complaints are ignored; one complaint is always believed (where the task
        allows no exclusion, min_survivors = n, it fails either way, and must name the dealer, not every honest
        holder who saw his bad backup). No one has masked yet: an exclusion costs a user, never privacy
        (docs/privacy.md, "Dishonest parties", "Neighbour graphs")."""
        most = max(1, min(self.parameters.n_users - self.min_survivors, holders(self.parameters) - self.threshold))
        liars = {k for k, accused in complaints.items() if len(accused) > most}
        return liars | {u for k, accused in complaints.items() if k not in liars for u in accused}

    def checked(self, answered: list[int], state: dict, messages: Mapping) -> dict:
        """The state once the check round closed: U1' (``checked``: who answered, less the excluded), the
        complaints (complainer, accused) and the excluded, and the digest of U1''s keys the users sign in round 4;
        :class:`RoundFailed` if U1' is below the task's minimum."""
        complaints = {k: decode(self.parameters, messages["check"][k][KEY_MESSAGE:], (COMPLAINTS,), k, SERVER)
                      .payload.tolist() for k in answered}
        complaints = {k: accused for k, accused in complaints.items() if accused}
        excluded = self.excluded(complaints)
        checked = [u for u in answered if u not in excluded]
        if len(checked) < self.min_survivors:
            raise RoundFailed(f"{len(checked)} users passed round 2 (check) of the {len(state['senders'])} round-1 "
                              f"senders ({len(answered)} answered; complaints {sorted(complaints.items())[:5]} "
                              f"excluded {sorted(excluded)[:10]}), fewer than the task's minimum of "
                              f"{self.min_survivors} survivors: nothing was released")
        graph = self.graph(state)
        self.check_neighbourhoods(graph, checked, checked, "passed round 2 (check)")
        keys = keys_digest({u: messages["check"][u] for u in checked}).hex() if graph.complete else ""
        return {**state, "checked": checked, "complaints": [[k, accused] for k, accused in sorted(complaints.items())],
                "excluded": sorted(excluded), "keys": keys}

    def check_neighbourhoods(self, graph: neighbour_graph.Graph, owners: Sequence[int], holding: Sequence[int],
                             what: str) -> None:
        """:class:`RoundFailed` naming the first users of ``owners`` with fewer than t_k of their holders in
        ``holding`` (sorted): their secrets could never be rebuilt (liveness, docs/privacy.md "Neighbour graphs",
        (b)). On the complete graph every user's holders are ``holding`` itself, which the task's minimum bounds."""
        if graph.complete:
            return
        short = [u for u in owners if len(among(graph, u, holding)) < self.threshold]
        if short:
            raise RoundFailed(f"users {short[:10]} have fewer than t = {self.threshold} of their {graph.degree} "
                              f"neighbours and themselves among the users who {what}: their secrets cannot be "
                              "rebuilt, nothing was released")

    def proven(self, state: dict, messages: Mapping) -> dict:
        """The state once the reveal round closed: the dealers whose verified shares rebuild another secret than the
        one they announced (``inconsistent``, :meth:`opened`), each with his proof (``proofs``: an OPENINGS message
        of the t shares the server rebuilt from, hex) and whom round 6 asks for their pair seeds with them
        (``asked``: U2 less them; nobody when no dealer is proven, and round 6 is skipped). :class:`RoundFailed`
        when the shares cannot be checked (fewer than t matching shares of a secret), or when U2 less the proven
        dealers is below the task's minimum."""
        checked, survivors = state["checked"], state["survivors"]
        try:
            opened = self.opened({u: messages["check"][u] for u in checked}, survivors, messages["reveal"],
                                 {u: messages["advertise"][u] for u in checked}, self.graph(state))
        except ParameterError as err:
            raise RoundFailed(f"the release was refused: {err}; nothing was released") from None
        # for finish: each share checked once
        self._opened = _checked_over(checked, survivors, messages["reveal"]), opened
        proven, graph = opened.inconsistent, self.graph(state)
        near = {v for u in proven for v in graph.neighbours(u)}  # whose masks hold terms with a proven dealer
        left = [u for u in survivors if u not in proven]
        asked = [u for u in left if u in near] if proven else []
        if proven and len(left) < self.min_survivors:
            raise RoundFailed(f"the dealers {proven[:10]} dealt inconsistent shares (proven: t shares of each, "
                              f"matching his signed commitments, rebuild another secret than he announced); without "
                              f"them {len(left)} survivors are left, fewer than the task's minimum of "
                              f"{self.min_survivors}: nothing was released")
        proofs = [encode(self.parameters, OPENINGS, u, SERVER, Revealed(
            np.array([k for k, _ in opened.verified[u][:self.threshold]]),
            np.full(self.threshold, MASK_SEED if u in survivors else PAIR_KEY),
            np.stack([row for _, row in opened.verified[u][:self.threshold]]))).hex() for u in proven]
        return {**state, "inconsistent": proven, "proofs": proofs, "asked": asked}

    def finish(self, state: dict, messages: Mapping) -> "SharingRelease":
        """The release once the reveal round closed (or the exclusion round, when it ran) (:meth:`release`), with
        the check round's complaints: refused (:class:`RoundFailed`, naming whom to blame) when it cannot be
        computed."""
        try:
            checked, kept = state["checked"], getattr(self, "_opened", None)
            same = kept is not None and kept[0] == _checked_over(checked, state["survivors"], messages["reveal"])
            return self.release({u: messages["check"][u] for u in checked}, messages["masked_sum"], messages["reveal"],
                                {u: messages["advertise"][u] for u in checked}, complaints=state["complaints"],
                                excluded=state["excluded"], pair_seeds=messages.get("exclusion", {}),
                                graph=self.graph(state), opened=kept[1] if same else None)
        except ParameterError as err:
            raise RoundFailed(f"the release was refused: {err}; nothing was released") from None

    # --- checks and the release -----------------------------------------------------------------------------
    def check_message(self, raw: bytes, kind: int, user: int) -> Message:
        """A user's message of ``kind`` to the server, checked (sender ``user``)."""
        return decode(self.parameters, raw, (kind,), user, SERVER)

    def check_reveal(self, raw: bytes, user: int, senders: Sequence[int], survivors: Sequence[int]) -> Revealed:
        """A round-5 message from ``user``, checked against the lists: one entry per user of U1' whose secrets he
        holds (``senders``: U1' on the complete graph, his neighbours in it and himself on a neighbour graph), the
        mask seed's share for each survivor and the pair key's for each dropout (``survivors``, ascending), in
        U1''s order."""
        revealed = self.check_message(raw, REVEAL, user).payload
        owners = sorted(senders)
        if (list(revealed.owners) != owners or
                list(revealed.secrets) != [MASK_SEED if member(survivors, u) else PAIR_KEY for u in owners]):
            raise ParameterError("message", "a share of each survivor's mask seed and each round-3 dropout's pair key, "
                                 "one per round-1 sender whose secrets he holds, in order", "other entries")
        return revealed

    def check_pair_seeds(self, raw: bytes, user: int, inconsistent: Sequence[int]) -> dict[int, bytes]:
        """A round-6 message from ``user``: his pair seeds with each dealer proven inconsistent among his neighbours
        (``inconsistent``), in order."""
        seeds = self.check_message(raw, PAIR_SEEDS, user).payload
        if list(seeds) != sorted(inconsistent):
            raise ParameterError("message", f"pair seeds with each dealer proven inconsistent "
                                 f"({sorted(inconsistent)[:5]}), in order", f"pair seeds with {list(seeds)[:5]}")
        return seeds

    def verified_shares(self, commitments: Mapping[int, bytes], reveals: Mapping[int, Revealed],
                        graph: neighbour_graph.Graph) -> tuple[dict[int, list[tuple[int, np.ndarray]]],
                                                               dict[int, list[int]]]:
        """Each owner's revealed shares that match the commitment his dealer made to them ((holder, shares) in
        holder order), and the revealers blamed (revealer -> the owners whose share he sent did not match). Each
        reveal's rows are packed at once (a share's commitment checked about 3 times faster than one by one)."""
        verified: dict[int, list[tuple[int, np.ndarray]]] = {u: [] for u in commitments}
        blamed: dict[int, list[int]] = {}
        width = LIMBS * shamir.SHARE_BYTES
        for k, revealed in sorted(reveals.items()):
            packed = shamir.pack(revealed.shares)
            for i, (u, s, row) in enumerate(zip(revealed.owners.tolist(), revealed.secrets.tolist(), revealed.shares)):
                if packed_commitment(u, k, s, packed[i * width:(i + 1) * width]) == committed_to(
                        commitments[u], graph.slot(u, k), s):
                    verified[u].append((k, row))
                else:
                    blamed.setdefault(k, []).append(u)
        return verified, blamed

    def rebuilt(self, verified: Mapping[int, list[tuple[int, np.ndarray]]]) -> dict[int, bytes | None]:
        """Each owner's secret from the first t of his verified shares (None: they interpolate to no secret), every
        owner at once: the Lagrange weights of each distinct set of holders (one on the complete graph, one an owner
        on a neighbour graph) in one vectorised pass, each owner's limbs from his (:func:`shamir.at_zero`), a block
        of owners at a time."""
        t, owners = self.threshold, list(verified)
        distinct: dict[tuple[int, ...], int] = {}
        which = np.array([distinct.setdefault(tuple(k for k, _ in verified[u][:t]), len(distinct)) for u in owners],
                         dtype=np.int64)
        weights = shamir.lagrange_weights(np.array(list(distinct), dtype=np.int64).reshape(len(distinct), t))
        rebuilt: dict[int, bytes | None] = {}
        step = max(1, shamir.BLOCK * shamir.ROWS // (t * LIMBS))  # owners at a time: about 2^20 shares
        for start in range(0, len(owners), step):
            block = owners[start:start + step]
            limbs = shamir.at_zero(weights[which[start:start + step]],
                                   np.array([[row for _, row in verified[u][:t]] for u in block], dtype=np.int64))
            for u, row in zip(block, limbs):
                rebuilt[u] = row.astype("<u2").tobytes() if row.max(initial=0) < 1 << 16 else None
        return rebuilt

    def opened(self, keys: Mapping[int, bytes], survivors: Sequence[int], reveals: Mapping[int, bytes],
               commitments: Mapping[int, bytes], graph: neighbour_graph.Graph | None = None) -> "Opened":
        """The reveals checked and the secrets rebuilt (:class:`Opened`), U1' = the users in ``keys`` (their round-2
        messages; ``commitments``: their round-1 messages), U2 = ``survivors``, on the task's ``graph`` (default the
        complete graph): refused unless U2 is within U1' and at least t users of U2 revealed. Each revealed share is
        checked against its dealer's commitment (a wrong one discarded, its revealer blamed) and each secret (U2's
        mask seeds, the dropouts' pair keys) rebuilt from t verified shares of its holders (fewer: refused, naming
        the users and the revealers blamed; on a neighbour graph, the liveness term (b)); a dealer whose t verified
        shares rebuild no secret, or another than his round-2 key or hash, dealt inconsistent shares
        (``inconsistent``)."""
        p, senders, survivors, t = self.parameters, sorted(keys), sorted(survivors), self.threshold
        graph = graph or task_graph(p, None)
        if not set(survivors) <= set(senders):
            raise ParameterError("masked sums", "from round-1 senders only", sorted(set(survivors) - set(senders))[:5])
        revealers = sorted(set(reveals) & set(survivors))
        if len(revealers) < t:
            raise ParameterError("reveals", f"from at least t = {t} survivors (the backups' threshold)", len(revealers))
        advertised = {u: decode_checked(p, keys[u], u)[0] for u in senders}
        verified, blamed = self.verified_shares({u: self.check_message(commitments[u], COMMITMENTS, u).payload
                                                 for u in senders}, {
            k: self.check_reveal(reveals[k], k, among(graph, k, senders), survivors) for k in revealers}, graph)
        short = [u for u in senders if len(verified[u]) < t]
        if short:
            raise ParameterError("reveals", f"t = {t} shares of each secret that match their dealer's commitments",
                                 f"fewer for users {short[:5]}: revealers {sorted(blamed)[:5]} sent shares that do not "
                                 f"match" + ("" if graph.complete else ", or too few of their holders revealed"))
        rebuilt = self.rebuilt(verified)
        inconsistent = [u for u in senders if not announces(rebuilt[u], MASK_SEED if member(survivors, u) else PAIR_KEY,
                                                             advertised[u])]
        return Opened(advertised, verified, blamed, rebuilt, inconsistent, revealers)

    def release(self, keys: Mapping[int, bytes], masked: Mapping[int, bytes], reveals: Mapping[int, bytes],
                commitments: Mapping[int, bytes], queries=None, complaints: Sequence = (),
                excluded: Sequence[int] = (), pair_seeds: Mapping[int, bytes] | None = None,
                graph: neighbour_graph.Graph | None = None, opened: "Opened | None" = None) -> SharingRelease:
        """sum_{u in U2} (y_u - b_u) - sum_{d in E, u in U2 ∩ N(d)} (s_du - s_ud), U1' = the users in ``keys`` (their
        round-2 messages; ``commitments``: their round-1 messages), U2 = those in ``masked``, N(d) d's neighbours on
        the task's ``graph`` (default the complete graph: everyone), the reveals checked and the secrets rebuilt by
        :meth:`opened`. A dealer P proven inconsistent is a dropout: his y_P (if any) left out, and each surviving
        neighbour u's terms with him, s_Pu - s_uP, removed with the pair seeds u sent in round 6 (``pair_seeds``:
        user -> his round-6 message); a survivor who sent none leaves a term that cannot be removed and the release is
        refused, naming him. Refused also unless the survivors left hold at least the task's minimum. The masked sums
        are folded as (item, share) rows by the survivors' :class:`SumServer` (what it received), the masks and the
        dropouts' shares taken off its sums. ``complaints`` and ``excluded`` (the check round's) are reported; the
        guarantee is recomputed for the survivors left. ``opened``: these reveals as :meth:`opened` checked them
        already (:meth:`finish` passes what :meth:`proven` checked at the reveal round's close for the same lists;
        None: checked here)."""
        p, senders, survivors = self.parameters, sorted(keys), sorted(masked)
        graph = graph or task_graph(p, None)
        if not set(survivors) <= set(senders):
            raise ParameterError("masked sums", "from round-1 senders only", sorted(set(survivors) - set(senders))[:5])
        if len(survivors) < self.min_survivors:
            raise ParameterError("survivors", f"at least {self.min_survivors} (the task's minimum)", len(survivors))
        opened = opened or self.opened(keys, survivors, reveals, commitments, graph)
        proven, pair_seeds = opened.inconsistent, pair_seeds or {}
        kept = [u for u in survivors if u not in proven]
        near = {v for u in proven for v in graph.neighbours(u)}
        silent = [u for u in kept if u in near and u not in pair_seeds] if proven else []
        if silent:
            u = proven[0]
            raise ParameterError("pair seeds", "from every survivor in round 6 (exclusion), his terms with the "
                                 f"dealers proven inconsistent {proven[:5]} to remove",
                                 f"none from users {silent[:5]}: two faults, user {u}'s shares (those revealed by "
                                 f"users {[k for k, _ in opened.verified[u][:self.threshold]]}, each matching the "
                                 "commitment he signed in round 1, rebuild another secret than his round-2 key or "
                                 "hash: he dealt inconsistent shares) and their silence")
        if len(kept) < self.min_survivors:
            raise ParameterError("survivors", f"at least {self.min_survivors} (the task's minimum) once the dealers "
                                 f"proven inconsistent {proven[:5]} are left out", len(kept))
        unmask = np.zeros(p.domain_size, dtype=np.uint64)
        for u in kept:
            unmask = self.field.add(unmask, mask(p, opened.rebuilt[u]))
        for d in sorted(set(senders) - set(survivors) - set(proven)):
            pair_shares = PairShares(p, opened.rebuilt[d])
            for u in among(graph, d, kept):
                theirs, mine = pair_shares(opened.advertised[u][:KEY_BYTES], d, u)  # s_du, s_ud
                unmask = self.field.add(self.field.sub(unmask, mine), theirs)
        for u in kept if proven else ():
            if u not in near:
                continue
            for d, seeds in self.check_pair_seeds(pair_seeds[u], u, among(graph, u, proven)).items():
                mine, theirs = (expand(self.field, seed, p.domain_size) for seed in (seeds[:SEED_BYTES],
                                                                                     seeds[SEED_BYTES:]))
                unmask = self.field.add(self.field.sub(unmask, mine), theirs)  # s_du - s_ud
        recomputed = survivors_parameters(p, len(kept))
        rows = recomputed.layout.batch({"item": np.tile(np.arange(p.domain_size), len(kept)),
                                        "share": np.concatenate([self.check_message(masked[u], MASKED_SUM, u).payload
                                                                 for u in kept])})
        server = SumServer(recomputed, queries)
        agg = server.agg_update(server.agg_init(), rows)
        agg.sums = self.field.sub(agg.sums, unmask)
        wrong = impossible_counts(p, agg.sums, len(kept))
        if wrong:
            raise ParameterError("masked sums", "the survivors' one-hot vectors added up (DPDS: each his sampled item "
                                 "or nothing)", f"{wrong}: a survivor masked another vector, and no input proof "
                                 "names him")
        return SharingRelease(server.finalize(agg), p.n_users, len(senders), len(kept), len(opened.revealers),
                              self.threshold, recomputed, rows, tuple((int(k), tuple(a)) for k, a in complaints),
                              tuple(int(u) for u in excluded),
                              tuple((k, tuple(o)) for k, o in sorted(opened.blamed.items())), tuple(proven),
                              "" if graph.complete else seed_digest(graph.seed), p)


def impossible_counts(parameters: SharingParameters, sums: np.ndarray, survivors: int) -> str:
    """Why the survivors' unmasked sums cannot be DPDS counts (each survivor adds his one-hot vector or nothing, so
    each count is at most the survivors and so is their total), or "" when they can, or for DPDG, whose noise makes
    any sum possible. A survivor who masked another vector is caught only this way: there are no input proofs."""
    if parameters.protocol != "dpds":
        return ""
    counts = sums.astype(np.int64)
    if counts.sum() <= survivors:
        return ""
    item = int(np.argmax(counts))
    return (f"counts adding up to {int(counts.sum())} over {survivors} survivors (item {item}: {int(counts[item])}), "
            "which no one-hot inputs give")


def graph_seed(state: Mapping) -> bytes | None:
    """The signed roster's graph seed in the coordinator's state: bytes (the round driver's) or hex (a state held as
    JSON, the simulator's); None without one."""
    seed = state.get("graph_seed")
    return bytes.fromhex(seed) if isinstance(seed, str) else seed


def seed_digest(seed: bytes) -> str:
    """A short public digest of the graph's seed, for the release to name the graph it ran on."""
    return hashlib.blake2b(seed, digest_size=8, person=b"privagg graph").hexdigest()


def _same(kept: Sequence[int] | None, listed: Sequence[int]) -> bool:
    """Whether a list kept is ``listed``: the same object at once (the round driver keeps the state of a round, so a
    request costs O(1), not O(n)), else compared."""
    return kept is listed or (kept is not None and list(kept) == list(listed))


def member(listed: Sequence[int], u: int) -> bool:
    """Whether ``u`` is in ``listed`` (ascending), in O(log n)."""
    at = bisect_left(listed, u)
    return at < len(listed) and listed[at] == u


def among(graph: neighbour_graph.Graph, user: int, listed: Sequence[int]) -> list[int]:
    """The holders of ``user``'s secrets (his neighbours and himself) in ``listed`` (ascending): ``listed`` itself
    on the complete graph, in O(k log n) on a neighbour graph."""
    if graph.complete:
        return list(listed)
    return [u for u in graph.holders(user) if member(listed, u)]


def _checked_over(checked: Sequence[int], survivors: Sequence[int], reveals: Mapping[int, bytes]) -> tuple:
    """What :meth:`SharingServer.proven` checked, as a key: U1', U2 and the reveals themselves (a close whose commit
    failed leaves the reveal round open, and more reveals may come in over the same lists)."""
    return tuple(sorted(checked)), tuple(sorted(survivors)), dict(reveals)


@dataclass(frozen=True)
class Opened:
    """The reveals checked and the secrets rebuilt (:meth:`SharingServer.opened`): each user of U1''s round-2 key
    and hash (``advertised``), the verified shares of each owner ((holder, shares) in holder order), the revealers
    blamed, each secret rebuilt from t of them (None: none), the dealers whose secret is not the one they announced,
    and the survivors who revealed."""

    advertised: dict[int, bytes]
    verified: dict[int, list[tuple[int, np.ndarray]]]
    blamed: dict[int, list[int]]
    rebuilt: dict[int, bytes | None]
    inconsistent: list[int]
    revealers: list[int]


# The rounds (module docstring): the server closes each once every user it expects answered, or at its deadline,
# and goes on with at least the task's minimum of survivors (rounds 4 and 5: at least t signers, t revealers; round 6
# with whoever answered, the release naming a survivor who did not).
ROUNDS = (
    Round("advertise", value=True, relay="backups", relay_info=b"privagg backup ", binds="commitments",
          publishes="senders"),
    Round("check", expects="senders", delivers="backups", reads=("advertise",), publishes="checked"),
    Round("masked_sum", expects="checked", reads=("check",), signed=(("keys", "check"),), publishes="survivors"),
    Round("consistency", expects="survivors", publishes="signers", minimum="threshold"),
    # its ``signatures`` (round 4's messages) carry no transport signatures: each is a signature of the lists, which the
    # user's role checks under its signer's roster key (docs/privacy.md, "What the signatures rest on")
    Round("reveal", expects="signers", reads=("consistency",), minimum="threshold"),
    # run only when the reveal round proved dealers inconsistent (``asked``: nobody otherwise, and it is skipped)
    Round("exclusion", expects="asked", reads=("advertise", "check"),
          signed=(("commitments", "advertise"), ("keys", "check")), minimum="none"),
)

PROTOCOL = MultiRound(
    rounds=ROUNDS, user=SharingUser, coordinator=SharingServer, answer=answer, release_round="masked_sum",
    survivors_parameters=survivors_parameters, survivors_privacy=survivors_privacy, least_survivors=least_survivors,
    entries=message_entries, faithful_seconds=faithful_seconds, faithful_bytes=faithful_bytes, bound=bound)
