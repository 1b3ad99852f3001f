"""DPDS and DPDG on a neighbour graph (issue 47; docs/privacy.md, "Neighbour graphs"): the graph from the roster's
seed (each neighbourhood a uniform k-subset, symmetric, of degree k), the threshold t_k, and the parties run by the
faithful simulator (the same code the services run) on a graph: the release exactly the survivors' sum with users
vanishing at every round, k + 5 messages and O(k) bytes a user, refusals of what is not the user's neighbourhood,
a seed other than the server's, and the dishonest parties of issue 46 (a dealer whose backup does not match, one
whose shares are inconsistent, a revealer who lies, a server that shows two survivor lists)."""

from __future__ import annotations

import dataclasses
import hashlib
import itertools
import math
import struct

import numpy as np
import pytest
from scipy import stats

from privagg.core import shamir
from privagg.errors import ParameterError
from privagg.privacy import neighbour_graph
from privagg.protocols import sampling_calibration as sc
from privagg.protocols import sharing_graph
from privagg.protocols.roles import Outbox, RoundFailed
from privagg.protocols.sharing_messages import (BACKUP, COMMITMENTS, LIMBS, MASK_SEED, PAIR_KEY, REVEAL, SERVER,
                                                Revealed,
                                                dealt_commitments, decode, encode)
from privagg.protocols.sharing_parties import SharingUser, deal, threshold
from privagg.protocols.sharing_server import PROTOCOL, SharingServer
from privagg.simulate.rounds import run_rounds

N, K, DOMAIN = 200, 20, 20
ROUND_NAMES = ("advertise", "check", "masked_sum", "consistency", "reveal")


def graph_parameters(protocol: str = "dpds", n: int = N, k: int | None = K, dropouts: float = 0.1):
    p = (sc.calibrate_dpds(1.0, 1e-3, n, DOMAIN, min_count_fraction=0.05) if protocol == "dpds" else
         sc.calibrate_dpdg(1.0, 1e-3, n, DOMAIN))
    return dataclasses.replace(p, degree=k, graph_dropouts=dropouts)


def streams(seed: int) -> dict[str, np.random.Generator]:
    return {name: np.random.default_rng([seed, i]) for i, name in enumerate(("users", "server", "identities"))}


def spread(n: int, fraction: float, seed: int) -> dict[str, list[int]]:
    """floor(fraction n) users vanishing, as evenly as they go, at each of the five rounds."""
    gone = np.random.default_rng(seed).permutation(n)[:math.floor(fraction * n)].tolist()
    return {name: gone[i::len(ROUND_NAMES)] for i, name in enumerate(ROUND_NAMES)}


def released_over(run, dropouts: dict[str, list[int]], left_out=()) -> list[int]:
    """The users whose masked sums the release must hold: none gone by round 3, none left out."""
    gone = {u for name in ROUND_NAMES[:3] for u in dropouts.get(name, ())} | set(left_out)
    return [u for u in range(len(run.users)) if u not in gone]


def assert_exact(run, survivors) -> None:
    release = run.release
    p = release.parameters
    total = np.zeros(p.domain_size, dtype=np.uint64)
    for u in survivors:
        total = p.field.add(total, run.users[u].state.vector)
    assert release.survivors == len(survivors)
    np.testing.assert_array_equal(release.table.estimates, p.estimate(total))


# --- the graph ------------------------------------------------------------------------------------------------


def test_the_order_is_blake2b_of_the_seed_and_index_portable_and_deterministic():
    seed = bytes(range(32))
    digests = [hashlib.blake2b(seed + struct.pack("<I", u), digest_size=16, person=b"privagg cycle").digest()
               for u in range(50)]
    assert neighbour_graph.cycle_order(seed, 50).tolist() == sorted(range(50), key=lambda u: digests[u])
    assert neighbour_graph.cycle_order(seed, 50).tolist() != neighbour_graph.cycle_order(bytes(32), 50).tolist()


@pytest.mark.parametrize("n, k", [(9, 4), (12, 6), (40, 10)])
def test_the_graph_is_symmetric_of_degree_k(n, k):
    for s in range(20):
        graph = neighbour_graph.Graph(n, k, hashlib.sha256(bytes([s])).digest())
        for u in range(n):
            assert len(graph.neighbours(u)) == k and u not in graph.neighbours(u)
            assert all(u in graph.neighbours(v) for v in graph.neighbours(u))
            assert graph.holders(u) == sorted(graph.neighbours(u) + [u])
            assert [graph.holders(u)[graph.slot(u, v)] for v in graph.holders(u)] == graph.holders(u)
            assert sorted(graph.near(u, k)) == sorted({w for v in graph.holders(u) for w in graph.holders(v)})


def test_every_neighbourhood_is_a_uniform_k_subset():
    """Over 7,000 seeds at n = 8, k = 4: user 0's neighbourhood (and user 5's) takes each of the C(7, 4) = 35
    subsets of the others equally often (chi-square, 34 degrees of freedom, p-value above 1e-4 with fixed seeds)."""
    n, k, trials = 8, 4, 7000
    subsets = {s: i for i, s in enumerate(itertools.combinations(range(1, n), k))}
    others = {s: i for i, s in enumerate(itertools.combinations([u for u in range(n) if u != 5], k))}
    counts, counts_5 = np.zeros(len(subsets)), np.zeros(len(others))
    for s in range(trials):
        graph = neighbour_graph.Graph(n, k, hashlib.sha256(struct.pack("<I", s)).digest())
        counts[subsets[tuple(graph.neighbours(0))]] += 1
        counts_5[others[tuple(graph.neighbours(5))]] += 1
    for observed in (counts, counts_5):
        assert stats.chisquare(observed).pvalue > 1e-4, observed


def test_the_complete_graph_holds_everyone_without_a_seed():
    graph = neighbour_graph.Graph(10, 9, None)
    assert graph.complete and list(graph.holders(3)) == list(range(10)) and graph.slot(3, 7) == 7
    with pytest.raises(ParameterError, match="graph_seed"):
        neighbour_graph.Graph(10, 4, None)
    with pytest.raises(ParameterError, match="graph_seed"):
        neighbour_graph.Graph(10, 4, b"short")


def test_the_threshold_is_the_graphs_and_the_complete_graph_keeps_todays_rule():
    p = graph_parameters()
    assert threshold(p) == neighbour_graph.guarantee(N, 0, 20, K).threshold == K // 2 + 2  # (e): no cut opens
    colluding = dataclasses.replace(p, honest_fraction=0.98)  # C = 4
    assert threshold(colluding) == neighbour_graph.guarantee(N, 4, 20, K).threshold == 14
    today = graph_parameters(k=None)
    assert threshold(today) == N // 2 + 1


def test_a_degree_that_cannot_be_private_and_live_is_refused_naming_it():
    with pytest.raises(ParameterError) as err:
        threshold(dataclasses.replace(graph_parameters("dpdg", k=4, dropouts=0.3), honest_fraction=0.6))
    assert err.value.field == "degree"


def test_deal_is_shamirs_split_at_the_chosen_holders():
    secret = bytes(range(32))
    everyone = shamir.split(secret, 5, 30, np.random.default_rng(4))
    chosen = [0, 3, 4, 17, 29]
    np.testing.assert_array_equal(deal(secret, 5, chosen, np.random.default_rng(4)), everyone[chosen])
    assert shamir.combine(np.array(chosen), deal(secret, 5, chosen, np.random.default_rng(9))[None], 5)[0] == secret


# --- the parties on a graph -------------------------------------------------------------------------------------


@pytest.mark.parametrize("protocol", ["dpds", "dpdg"])
def test_the_release_on_a_graph_is_the_survivors_sum_exactly(protocol):
    """n = 200, k = 20, 10% of the users vanishing over the five rounds: the release is exactly the sum of the
    users who sent their masked sums, and its guarantee names the graph."""
    p = graph_parameters(protocol)
    dropouts = spread(N, 0.1, seed=1)
    codes = np.arange(N) % DOMAIN
    run = run_rounds(PROTOCOL, p, codes, streams(2), dropouts=dropouts)
    assert_exact(run, released_over(run, dropouts))
    assert run.release.threshold == 12
    privacy = run.release.privacy.to_dict()
    assert any("degree k = 20, threshold t_k = 12" in c for c in privacy["caveats"])
    assert not any("NOT YET RUN" in c for c in privacy["caveats"])


def test_a_user_sends_k_plus_5_messages_and_o_k_bytes():
    """Without dropouts each user sends k + 5 messages (a backup to each neighbour, commitments, key, masked sum,
    signature, reveal) and the bytes sharing_graph.costs counts, at n = 200 as at any n; he receives what it
    counts (the keys of his neighbourhood, the signatures of the users within k places)."""
    p = graph_parameters()
    run = run_rounds(PROTOCOL, p, np.arange(N) % DOMAIN, streams(3))
    user, costs = run.transcript["user"], sharing_graph.costs(p, K)["user"]
    assert user["messages_sent"] == N * (K + 5) == N * costs["messages_sent"]
    assert user["bytes_sent"] == N * costs["bytes_sent"]
    assert user["bytes_received"] == N * costs["bytes_received"]
    assert run.transcript["server"]["bytes_relayed"] == N * K * sharing_graph.traffic(p, K)["sent"]["backup"][
        "bytes"] // K


def test_a_user_given_another_seed_is_refused_in_round_1_and_the_release_holds_the_others():
    """A user whose seed is not the server's (the roster's) backs up with other users than his neighbours: the
    server refuses his round-1 message, he is a round-1 dropout, and nothing of his enters the release."""

    class OtherSeed(SharingUser):
        def advertise(self, value, graph_seed=None):
            return super().advertise(value, graph_seed if self.index != 7 else bytes(32))

    run = run_rounds(dataclasses.replace(PROTOCOL, user=OtherSeed), graph_parameters(), np.arange(N) % DOMAIN,
                     streams(4))
    assert run.transcript["server"]["refused"] == 1
    assert_exact(run, [u for u in range(N) if u != 7])


def test_a_user_refuses_a_backup_or_commitment_from_a_stranger():
    p = graph_parameters()
    seed = bytes(range(32))
    graph = neighbour_graph.graph(N, K, seed)
    stranger = next(u for u in range(1, N) if u not in graph.holders(0))
    user = SharingUser(p, 0, threshold(p), rng=np.random.default_rng(0))
    user.advertise(3, graph_seed=seed)
    with pytest.raises(ParameterError, match="backups .*not"):
        user.check(commitments={}, backups={stranger: b"junk"})
    with pytest.raises(ParameterError, match="round-1 senders .*not"):
        user.check(commitments={stranger: b"junk"}, backups={})


class LyingServer(SharingServer):
    """Adds a stranger's key (round 3) or signature (round 5) to the victim's inbox."""

    victim, kind = 0, ""

    def inbox(self, round_, user, state, messages):
        inbox = super().inbox(round_, user, state, messages)
        graph = self.graph(state)
        if user == self.victim and round_.name == self.kind == "masked_sum":
            stranger = next(u for u in state["checked"] if u not in graph.holders(user))
            inbox["keys"][stranger] = messages["check"][stranger]
        if user == self.victim and round_.name == self.kind == "reveal":
            stranger = next(u for u in state["signers"] if u not in graph.near(user, K))
            inbox["signatures"][stranger] = messages["consistency"][stranger]
            inbox["identities"][stranger] = state["identities"][stranger]
        return inbox


@pytest.mark.parametrize("kind", ["masked_sum", "reveal"])
def test_a_strangers_key_or_signature_is_refused(kind):
    """The server adds a non-neighbour's key to a user's round-3 inbox (he would mask with him), or a signature
    from farther than k places to his round-5 inbox: he refuses (sends nothing), and the release is still exact
    (a round-3 refusal makes him a dropout, a round-5 one a silent holder)."""
    lying = type("Lying", (LyingServer,), {"kind": kind})
    run = run_rounds(dataclasses.replace(PROTOCOL, coordinator=lying), graph_parameters(), np.arange(N) % DOMAIN,
                     streams(5))
    assert run.transcript["user"]["refusals"] == 1
    assert_exact(run, [u for u in range(N) if u != 0 or kind == "reveal"])


# --- issue 46's dishonest users, on a graph ---------------------------------------------------------------------


class JunkBackup(SharingUser):
    """User 3 sends his first neighbour a backup that matches no commitment."""

    def advertise(self, value, graph_seed=None):
        out = super().advertise(value, graph_seed)
        if self.index == 3:
            first = min(out.relayed)
            out.relayed[first] = encode(self.parameters, BACKUP, 3, first, np.zeros((2, LIMBS), dtype=np.int64))
        return out


class InconsistentDealer(SharingUser):
    """User 3 moves his first neighbour's shares by one, committed to as dealt: every holder's check passes and t_k
    shares that include the victim's rebuild no secret he announced."""

    def advertise(self, value, graph_seed=None):
        out = super().advertise(value, graph_seed)
        if self.index != 3:
            return out
        p, holders = self.parameters, self.graph.holders(3)
        shares = np.zeros((len(holders), 2, LIMBS), dtype=np.int64)
        relayed = {}
        for slot, k in enumerate(holders):
            shares[slot] = self.state.backup if k == 3 else decode(p, out.relayed[k], (BACKUP,), 3, k).payload
            if k == min(out.relayed):
                shares[slot, :, 1] = (shares[slot, :, 1] + 1) % shamir.PRIME
            if k != 3:
                relayed[k] = encode(p, BACKUP, 3, k, shares[slot])
        return Outbox(encode(p, COMMITMENTS, 3, SERVER, dealt_commitments(3, shares, holders)), relayed)


class WrongRevealer(SharingUser):
    """User 3 reveals every share moved by one."""

    def reveal(self, *args, **kwargs):
        out = super().reveal(*args, **kwargs)
        if self.index != 3:
            return out
        honest = decode(self.parameters, out.message, (REVEAL,), 3, SERVER).payload
        return Outbox(encode(self.parameters, REVEAL, 3, SERVER, Revealed(
            honest.owners, honest.secrets, (honest.shares + 1) % shamir.PRIME)), {})


@pytest.mark.parametrize("role, what", [(JunkBackup, "excluded"), (InconsistentDealer, "inconsistent"),
                                        (WrongRevealer, "blamed")])
@pytest.mark.parametrize("k", [K, None])
def test_a_dishonest_user_is_caught_and_the_release_is_the_others_exactly(role, what, k):
    """Issue 46's deviations on a graph (and on the complete graph, k None): a dealer whose backup does not match
    is complained about by his neighbour and excluded before anyone masks; one whose shares are inconsistent is
    proven so when the reveals close, his surviving neighbours send their pair seeds with him in round 6 and he is
    left out; a revealer whose shares do not match is blamed and the shares of the others rebuild every secret.
    With 10% of the users vanishing over the rounds (none of them user 3; by round 3 for the inconsistent dealer:
    a survivor silent in round 6 would be the second fault that refuses the release)."""
    n = N if k else 40
    p = graph_parameters(n=n, k=k)
    last = 3 if role is InconsistentDealer else len(ROUND_NAMES)
    dropouts = {name: [u for u in users if u != 3] for name, users in spread(n, 0.1, seed=6).items()
                if ROUND_NAMES.index(name) < last}
    run = run_rounds(dataclasses.replace(PROTOCOL, user=role), p, np.arange(n) % DOMAIN, streams(7),
                     dropouts=dropouts)
    release = run.release
    if what == "blamed":
        assert [revealer for revealer, _ in release.blamed] == [3]
        assert_exact(run, released_over(run, dropouts))
    else:
        assert getattr(release, what) == (3,)
        assert_exact(run, released_over(run, dropouts, left_out=(3,)))


class EquivocatingServer(SharingServer):
    """Shows k / 2 - 1 of user d's holders (his nearest neighbours after him on the cycle) a U2 without d, everyone
    else the true one, so as to get d's pair key from the ones and his mask seed from the others; records the
    reveals."""

    d, reveals, shown = 5, None, set()

    def inbox(self, round_, user, state, messages):
        inbox = super().inbox(round_, user, state, messages)
        graph = self.graph(state)
        after = [v for v in graph.neighbours(self.d) if (graph.position[v] - graph.position[self.d]) % N < K // 2]
        if round_.name in ("consistency", "reveal") and user in after:
            inbox["survivors"] = self.published(user, "without d", [u for u in state["survivors"] if u != self.d])
            type(self).shown.add(user)
        return inbox

    def check(self, round_, user, message, state, messages):
        if round_.name != "consistency":  # the server takes both lists' signatures
            super().check(round_, user, message, state, messages)

    def finish(self, state, messages):
        type(self).reveals = dict(messages["reveal"])
        return super().finish(state, messages)


def test_a_server_showing_two_survivor_lists_in_a_neighbourhood_gets_one_of_the_users_secrets_at_most():
    """(d) per neighbourhood: a holder reveals a share of u's secret only after t_k valid signatures of the lists he
    signed from u's holders. Shown a U2 without d, the 9 holders of d's secrets nearest after him on the cycle sign
    it, but no user's holders hold t_k = 12 of its signatures: all 9 refuse, and the server gets no share of d's pair
    key (the others, shown the true U2 and 12 of d's 21 holders, reveal his mask seed's shares: at most one group
    proceeds). The release is exact over everyone."""
    p = graph_parameters(dropouts=0.0)
    server = type("Equivocating", (EquivocatingServer,), {})
    run = run_rounds(dataclasses.replace(PROTOCOL, coordinator=server), p, np.arange(N) % DOMAIN, streams(8))
    assert run.transcript["user"]["refusals"] == K // 2 - 1 == len(server.shown)
    assert all(run.users[u].state.answered == 4 for u in server.shown)  # they signed U2 without d, then refused
    d = server.d
    shares = {tag: 0 for tag in (PAIR_KEY, MASK_SEED)}
    for k, raw in server.reveals.items():
        revealed = decode(p, raw, (REVEAL,), k, SERVER).payload
        for owner, tag in zip(revealed.owners.tolist(), revealed.secrets.tolist()):
            shares[tag] += owner == d
    assert shares == {PAIR_KEY: 0, MASK_SEED: threshold(p)}
    assert_exact(run, range(N))


class CuttingServer(SharingServer):
    """Declares two runs of k / 2 users dropped once every masked sum is in, chosen on the graph (a reviewer's attack
    at t_k = k / 2 + 1): the k / 2 + 1 users between them are cut off from the others, and their mask seeds with the
    runs' pair keys would give the server their sum."""

    arc: list[int] = []
    survivors: list[int] = []
    cycle = None

    def close(self, round_, answered, state, messages):
        state = super().close(round_, answered, state, messages)
        if round_.name == "masked_sum":
            graph = type(self).cycle = self.graph(state)
            order, half = graph.order.tolist(), graph.half
            runs = order[10:10 + half] + order[10 + 2 * half + 1:10 + 3 * half + 1]
            type(self).arc = order[10 + half:10 + 2 * half + 1]
            state = {**state, "survivors": [u for u in state["survivors"] if u not in runs]}
            type(self).survivors = state["survivors"]
        return state


@pytest.mark.parametrize("protocol", ["dpds", "dpdg"])
def test_a_server_that_cuts_the_cycle_after_seeing_it_gets_no_sum_of_the_part_it_cut_off(protocol):
    """(e): n = 60, k = 8, every user honest. The server declares two runs of 4 users dropped after their masked sums
    arrived; the 5 users between them would be a part of the honest survivors of its own. Their holders reveal what
    they are asked (no user refuses), but each of the 5 keeps 4 + 1 holders in U2, fewer than t_k = 6 (the least at
    which the arc's end users could not be rebuilt), so their mask seeds cannot be rebuilt: the release is refused,
    and nothing of the arc's sum is released."""
    p = graph_parameters(protocol, n=60, k=8, dropouts=0.0)
    assert threshold(p) == 6
    server = type("Cutting", (CuttingServer,), {})
    with pytest.raises(RoundFailed, match="reveals must be t = 6 shares"):
        run_rounds(dataclasses.replace(PROTOCOL, coordinator=server), p, np.arange(60) % DOMAIN, streams(5),
                   min_survivors=52)
    assert len(server.arc) == 5 and len(server.survivors) == 52
    in_u2 = [sum(h in server.survivors for h in server.cycle.holders(u)) for u in server.arc]
    assert in_u2 == [5] * 5  # k / 2 + 1 each: enough for t = 5 (the attack), not for 6


def test_the_releases_delta_adds_the_graphs_privacy_terms_and_the_auditor_states_the_graph():
    """delta = the survivors' recomputed delta + max((d), (e)) at the task's C + (c) at C and the users not released
    (a run with 12% of the users vanishing by round 3, so that (c) counts; and (e), which contains (d), at C = 4);
    the exact auditor's notes state the graph as an assumption it does not audit, and say nothing on the complete
    graph."""
    from privagg.audit import exact_audit
    from privagg.protocols.sharing_graph import graph_delta

    p = graph_parameters("dpdg", dropouts=0.12)
    gone = np.random.default_rng(9).permutation(N)[:24].tolist()
    run = run_rounds(PROTOCOL, p, np.arange(N) % DOMAIN, streams(10),
                     dropouts={name: gone[i::3] for i, name in enumerate(ROUND_NAMES[:3])})
    release = run.release
    found = neighbour_graph.guarantee(N, 0, 24, K)
    removed = N - release.survivors
    assert removed == 24 and neighbour_graph.disconnection_bound(N, removed, K) > 0
    survivors = release.parameters
    assert release.privacy.delta == survivors.delta_at(survivors.epsilon) + found.private + \
        neighbour_graph.disconnection_bound(N, removed, K)
    colluding = dataclasses.replace(graph_parameters("dpdg"), honest_fraction=0.98)  # C = 4
    found = neighbour_graph.guarantee(N, 4, 20, K)
    assert found.private == found.cut > found.equivocation
    assert graph_delta(colluding, 30) == found.cut + neighbour_graph.disconnection_bound(N, 30, K) > found.cut
    tiny = sc.calibrate_dpds(1.0, 1e-2, 8, 2, min_count_fraction=0.25)
    notes = exact_audit(dataclasses.replace(tiny, degree=4)).notes
    assert any(note.startswith("ASSUMED, not audited") and "degree k = 4, threshold t_k = 4" in note
               for note in notes)
    assert not any("ASSUMED" in note for note in exact_audit(tiny).notes)


def test_the_least_survivors_count_two_honest_users_beside_the_colluders_when_t_k_is_below_them():
    """On a graph t_k may be at most C (n = 1,000, k = 140, C = 150): a task's minimum of survivors is then C + 2
    (its release is recomputed for two honest users at least), where it was t and the coordinator refused to start;
    on the complete graph it is t, as before."""
    from privagg.protocols.sharing_parties import least_survivors

    p = dataclasses.replace(graph_parameters("dpdg", n=1000, k=140, dropouts=0.0), honest_fraction=0.85)  # C = 150
    assert threshold(p) == neighbour_graph.guarantee(1000, 150, 0, 140).threshold < 152 == least_survivors(p)
    SharingServer(p, least_survivors(p))
    complete = dataclasses.replace(graph_parameters("dpdg", n=1000, k=None), honest_fraction=0.85)
    assert least_survivors(complete) == threshold(complete) == (1000 + 150) // 2 + 1


def test_the_published_lists_are_bitmaps_of_n_bits_decoded_strictly():
    """U1' and U2 reach a user on a graph as USERS messages: n / 8 bytes after the header, the server's, to him."""
    from privagg.protocols.sharing_messages import HEADER, USERS, message_bytes

    p = graph_parameters("dpdg", n=21, k=4, dropouts=0.0)
    raw = SharingServer(p, 12).published(4, "survivors", [0, 3, 20])
    assert len(raw) == HEADER.size + 3 == message_bytes(p, USERS)
    assert decode(p, raw, (USERS,), SERVER, 4).payload == [0, 3, 20]
    with pytest.raises(ParameterError, match="bits set past the last user"):
        decode(p, raw[:-1] + bytes([0xFF]), (USERS,), SERVER, 4)
    with pytest.raises(ParameterError, match="recipient"):
        decode(p, raw, (USERS,), SERVER, 5)


@pytest.mark.parametrize("protocol", ["dpds", "dpdg"])
def test_the_release_checks_each_revealed_share_once(protocol, monkeypatch):
    """The reveal round's close (SharingServer.proven) checks every revealed share against its dealer's commitment;
    the release (finish) reuses that check for the same lists instead of hashing every share again: one check a
    share (two before), and the release still the survivors' sum exactly."""
    from privagg.protocols import sharing_server

    checks = []

    def counted(*args):
        checks.append(1)
        return original(*args)

    original = sharing_server.packed_commitment
    monkeypatch.setattr(sharing_server, "packed_commitment", counted)
    p, dropouts = graph_parameters(protocol, n=80, k=12), spread(80, 0.1, seed=4)
    run = run_rounds(PROTOCOL, p, np.arange(80) % DOMAIN, streams(5), dropouts=dropouts)
    assert_exact(run, released_over(run, dropouts))
    revealed = run.transcript["user"]["sent revealed shares"]
    assert revealed > 0 and len(checks) == revealed


def test_a_release_over_other_reveals_than_the_close_checked_checks_them_again(monkeypatch):
    """The close's checks are reused only for the reveals they checked: had more reveals come in over the same U1'
    and U2 (a close whose commit failed leaves the round open), the release checks them all again."""
    from privagg.protocols import sharing_server

    finished, checks = [], []
    finish, original = SharingServer.finish, sharing_server.packed_commitment

    def kept(self, state, messages):
        finished.append((self, state, messages))
        return finish(self, state, messages)

    monkeypatch.setattr(SharingServer, "finish", kept)
    monkeypatch.setattr(sharing_server, "packed_commitment", lambda *args: checks.append(1) or original(*args))
    run_rounds(PROTOCOL, graph_parameters(n=80, k=12), np.arange(80) % DOMAIN, streams(5))
    server, state, messages = finished[-1]
    checks.clear()
    server.finish(state, messages)  # the reveals the close checked: none again
    assert checks == []
    fewer = {**messages, "reveal": dict(list(messages["reveal"].items())[1:])}
    server._opened = sharing_server._checked_over(state["checked"], state["survivors"], fewer["reveal"]), \
        server._opened[1]  # as if the close had checked one reveal fewer
    server.finish(state, messages)
    assert len(checks) > 0


def test_the_signed_lists_on_a_graph_bind_the_task():
    """Round 4's statement on a neighbour graph carries the task's graph seed (which the organisation draws per task
    and signs with its id): a user's signature of U1' and U2 in one task does not check as his signature of the same
    lists in another task, even under the same identity key (it did before: the statement was n and the lists)."""
    from privagg.core import identity
    from privagg.protocols.sharing_parties import SIGNED_LISTS, signed_lists

    here, there = (neighbour_graph.graph(40, 6, bytes([i]) * neighbour_graph.SEED_BYTES) for i in (1, 2))
    senders, survivors, key = list(range(40)), list(range(1, 40)), identity.generate()
    public = identity.public_key(key)
    signature = identity.sign(key, SIGNED_LISTS, signed_lists(here, senders, survivors, b""))
    identity.check(public, signature, SIGNED_LISTS, signed_lists(here, senders, survivors, b""), "message", "user 3")
    with pytest.raises(ParameterError, match="message"):
        identity.check(public, signature, SIGNED_LISTS, signed_lists(there, senders, survivors, b""), "message",
                       "user 3")


def test_the_delta_task_create_states_adds_the_graphs_terms_at_its_fewest_survivors():
    """A reviewer's run: dpdg at n = 30 on a graph of degree 2 (planned for no dropout), --min-survivors 16: task
    create stated delta 0.000149, the sampling part alone, where the graph's terms at 14 users removed are 1 (as
    the release would state them). release_delta, which task create states and the budget charges, adds them."""
    from privagg.protocols.registry import calibrate
    from privagg.protocols.sharing_graph import graph_delta
    from privagg.protocols.sharing_parties import survivors_parameters
    from privagg.service.round_tasks import release_delta

    p = calibrate("dpdg", epsilon=1.0, delta=1e-3, n_users=30, domain_size=5, degree=2)
    assert release_delta(p, 30) == p.delta_at(1.0)
    assert release_delta(p, 29) == survivors_parameters(p, 29).delta_at(1.0) + graph_delta(p, 1) > p.delta_at(1.0)
    assert release_delta(p, 16) == 1.0 and survivors_parameters(p, 16).delta_at(1.0) < 0.01
