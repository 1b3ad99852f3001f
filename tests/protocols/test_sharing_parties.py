"""DPDS and DPDG as separate parties (protocols/sharing_parties.py): exact reconstruction over the survivors whatever
round users vanish at, the refusals, what a server that lies about a dropout sees, and every message's decoding
checks."""

import dataclasses
import math

import numpy as np
import pytest

from privagg.core import identity, shamir
from privagg.errors import ParameterError
from privagg.protocols import sampling_calibration as sc
from privagg.protocols.sharing_messages import (ADVERTISE, BACKUP, COMPLAINTS, HEADER, KEY_MESSAGE, LIMBS, MASK_SEED,
                                                MASKED_SUM, PAIR_KEY, REVEAL, SERVER, Revealed, decode, encode,
                                                message_bytes)
from privagg.protocols.sharing_parties import (PairShares, SharingUser, UserState, check_min_survivors,
                                               survivors_parameters, threshold)
from privagg.protocols.sharing_server import ROUNDS, SharingServer

N_USERS, DOMAIN = 24, 3
CODES = np.arange(N_USERS) % DOMAIN
T = 13  # threshold: a majority of 24


def parameters(protocol: str, **options):
    if protocol == "dpds":
        return sc.calibrate_dpds(1.0, 1e-3, N_USERS, DOMAIN, min_count_fraction=0.25, **options)
    return sc.calibrate_dpdg(1.0, 1e-3, N_USERS, DOMAIN, **options)


def run(p, codes, drop1=(), drop2=(), drop3=(), min_survivors=T, seed=1, claimed=None):
    """Every round in process, the server's inboxes and lists the coordinator's: (users, round-1 outboxes, the
    round-2 messages of U1' (keys), masked sums, reveals, the round-1 messages of U1' (commitments)). Users in ``drop1`` vanish before round 1,
    in ``drop2`` before their masked sums, in ``drop3`` before revealing. ``claimed``: the survivors the server
    names in rounds 4-5 (default: the true ones); a user who refuses is left out."""
    rng = np.random.default_rng(seed)
    ids = [identity.generate(rng) for _ in range(p.n_users)]
    users = [SharingUser(p, i, min_survivors, rng=rng, identity=ids[i]) for i in range(p.n_users)]
    server = SharingServer(p, min_survivors)
    outbox = {i: users[i].advertise(int(codes[i])) for i in range(p.n_users) if i not in drop1}
    messages = {"advertise": {i: message for i, (message, _) in outbox.items()}}
    state = {"senders": sorted(outbox), "identities": {i: identity.public_key(k) for i, k in enumerate(ids)}}
    messages["check"] = {k: users[k].check(**server.inbox(ROUNDS[1], k, state, messages), backups={
        i: outbox[i][1][k] for i in outbox if i != k}).message for k in outbox}
    state = {**server.close(ROUNDS[1], sorted(outbox), state, messages), "identities": state["identities"]}
    keys = server.inbox(ROUNDS[2], 0, state, messages)["keys"]
    masked = {k: users[k].masked_sum(keys).message for k in keys if k not in drop2}
    state["survivors"] = sorted(masked) if claimed is None else sorted(claimed)
    signatures = {}
    for k in masked:
        try:
            signatures[k] = users[k].consistency(state["checked"], state["survivors"]).message
        except ParameterError:
            pass
    state["signers"] = sorted(signatures)
    reveals = {}
    for k in signatures:
        if k not in drop3:
            reveals[k] = users[k].reveal(**server.inbox(ROUNDS[4], k, state, {"consistency": signatures})).message
    return users, outbox, keys, masked, reveals, {u: messages["advertise"][u] for u in state["checked"]}


def advertised_and_checked(p, users, codes, absent=()):
    """Rounds 1 and 2 for ``users`` but the ``absent``: (their outboxes, U1''s key messages as round 3 gives them)."""
    server = SharingServer(p, users[0].min_survivors)
    outbox = {u.index: u.advertise(int(codes[u.index])) for u in users if u.index not in absent}
    messages = {"advertise": {i: m for i, (m, _) in outbox.items()}}
    state = {"senders": sorted(outbox)}
    messages["check"] = {k: users[k].check(**server.inbox(ROUNDS[1], k, state, messages), backups={
        i: outbox[i][1][k] for i in outbox if i != k}).message for k in outbox}
    state = server.close(ROUNDS[1], sorted(outbox), state, messages)
    return outbox, server.inbox(ROUNDS[2], 0, state, messages)["keys"]


def vectors_sum(p, users, which) -> np.ndarray:
    total = np.zeros(p.domain_size, dtype=np.uint64)
    for k in which:
        total = p.field.add(total, users[k].state.vector)
    return total


@pytest.mark.parametrize("protocol", ["dpds", "dpdg"])
def test_the_release_is_the_survivors_sum_exactly_whatever_round_users_vanish_at(protocol):
    p = parameters(protocol)
    users, _, keys, masked, reveals, committed = run(p, CODES, drop1=(3, 7), drop2=(5, 11, 23), drop3=(0, 9))
    released = SharingServer(p, T).release(keys, masked, reveals, committed)
    survivors = sorted(masked)
    assert (released.senders, released.survivors, released.revealers, released.enrolled) == (22, 19, 17, N_USERS)
    for k in survivors:
        if protocol == "dpds":  # a participant's one-hot vector, or zeros
            x = users[k].state.vector
            assert x.sum() in (0, 1) and (x.sum() == 0 or x[CODES[k]] == 1)
    recomputed = survivors_parameters(p, len(survivors))
    np.testing.assert_array_equal(released.table.estimates, recomputed.estimate(vectors_sum(p, users, survivors)))
    assert released.parameters.n_users == 19


def test_without_dropouts_everyone_is_released():
    p = parameters("dpds")
    users, _, keys, masked, reveals, committed = run(p, CODES)
    released = SharingServer(p, N_USERS).release(keys, masked, reveals, committed)
    assert released.survivors == N_USERS and released.parameters == p
    np.testing.assert_array_equal(released.table.estimates, p.estimate(vectors_sum(p, users, range(N_USERS))))


def test_the_shares_are_algorithm_2s():
    """A user's n shares (his own x_i - sum_j s_ij and the s_ij he agrees with each other user) sum to his vector,
    and the share i derives for j is the one j derives from i: the masked sums are Algorithm 2's sums of what
    each user holds, plus the mask."""
    p = parameters("dpdg")
    users, _, keys, masked, _, _ = run(p, CODES)
    i, j = 2, 5
    pub = {u: decode(p, keys[u][:KEY_MESSAGE], (ADVERTISE,), u, SERVER).payload[:32] for u in (i, j)}
    s_ij, s_ji = PairShares(p, users[i]._secret(PAIR_KEY))(pub[j], i, j)
    t_ji, t_ij = PairShares(p, users[j]._secret(PAIR_KEY))(pub[i], j, i)
    np.testing.assert_array_equal(s_ij, t_ij)
    np.testing.assert_array_equal(s_ji, t_ji)
    assert not np.array_equal(s_ij, s_ji)


@pytest.mark.parametrize("runs", [40, pytest.param(150, marks=pytest.mark.slow)])
def test_dpds_through_the_parties_is_unbiased(runs):
    """Over seeded runs with dropouts at every round, the release's mean is the survivors' counts within 4
    standard errors (each run's estimate has variance Pi (1 - p) / p, Lemma III.1)."""
    p = sc.calibrate_dpds(1.0, 0.05, 12, 2, min_count_fraction=0.25)
    codes = np.arange(12) % 2
    errors = []
    for seed in range(runs):
        _, _, keys, masked, reveals, committed = run(p, codes, drop1=(0,), drop2=(3,), drop3=(4,), min_survivors=7, seed=seed)
        released = SharingServer(p, 7).release(keys, masked, reveals, committed)
        truth = np.bincount(codes[sorted(masked)], minlength=2)
        errors.append(released.table.estimates - truth)
    q = p.sampling_probability
    sd = np.sqrt(np.array([5, 5]) * (1 - q) / q / runs)  # 5 survivors hold each item
    assert np.all(np.abs(np.mean(errors, axis=0)) < 4 * sd), (np.mean(errors, axis=0), sd)


def test_a_release_needs_t_revealers_and_no_more():
    p = parameters("dpds")
    users, _, keys, masked, reveals, committed = run(p, CODES, drop2=(1, 2))
    survivors = sorted(masked)
    exactly_t = {k: reveals[k] for k in survivors[:T]}
    released = SharingServer(p, T).release(keys, masked, exactly_t, committed)
    np.testing.assert_array_equal(released.table.estimates,
                                  survivors_parameters(p, 22).estimate(vectors_sum(p, users, survivors)))
    with pytest.raises(ParameterError, match=f"reveals must be from at least t = {T} survivors"):
        SharingServer(p, T).release(keys, masked, {k: reveals[k] for k in survivors[:T - 1]}, committed)


def test_a_user_named_as_dropped_refuses_and_his_vector_stays_hidden():
    """The server names user 4 among round 2's dropouts though it holds his masked sum: he refuses to reveal; the
    others reveal his pair key but not his mask seed, so the server can release the others' sum exactly and its
    view of user 4 is y_4, masked by a b_4 of which no share was revealed."""
    p = parameters("dpds")
    others = [k for k in range(N_USERS) if k != 4]
    users, _, keys, masked, reveals, committed = run(p, CODES, claimed=others)
    assert 4 in masked and 4 not in reveals
    with pytest.raises(ParameterError, match="survivors.*naming user 4"):
        SharingUser(p, 4, T, state=dataclasses.replace(users[4].state, answered=4)).reveal(list(range(N_USERS)),
                                                                                            others, {}, {})
    for k, raw in reveals.items():
        entry = decode(p, raw, (REVEAL,), k, SERVER).payload
        assert entry.secrets[list(entry.owners).index(4)] == PAIR_KEY  # of user 4, only his pair key
    released = SharingServer(p, T).release(keys, {k: masked[k] for k in others}, reveals, committed)
    np.testing.assert_array_equal(released.table.estimates,
                                  survivors_parameters(p, 23).estimate(vectors_sum(p, users, others)))


def test_the_lying_servers_view_is_the_same_for_any_item_of_the_named_user():
    """Two datasets differing in user 4's item, every party's secret the same, the server naming user 4 as a
    dropout: of everything it sees (keys, masked sums, reveals), only y_4 differs, and y_4 - b_4 is all that
    carries the item while no share of b_4's seed is revealed: y_4 is uniform to the server under both items."""
    p = sc.calibrate_dpdg(1.0, 1e-3, N_USERS, DOMAIN)
    other = CODES.copy()
    other[4] = (CODES[4] + 1) % DOMAIN
    claimed = [k for k in range(N_USERS) if k != 4]
    views = [run(p, codes, claimed=claimed, seed=5)[2:5] for codes in (CODES, other)]
    (k1, m1, r1), (k2, m2, r2) = views
    assert k1 == k2 and r1 == r2 and {k for k in m1 if m1[k] != m2[k]} == {4}


def test_each_round_once_and_in_order():
    p = parameters("dpds")
    users, outbox, keys, masked, _, _ = run(p, CODES)
    with pytest.raises(ParameterError, match="round"):
        users[0].advertise(0)
    with pytest.raises(ParameterError, match="round"):
        users[0].masked_sum(keys)
    fresh = SharingUser(p, 2, T)
    with pytest.raises(ParameterError, match="round 1 next"):
        fresh.reveal(list(keys), list(keys), {}, {})


def test_round_inputs_are_checked():
    p = parameters("dpds")
    rng = np.random.default_rng(0)
    users = [SharingUser(p, i, 20, rng=rng, identity=identity.generate(rng)) for i in range(N_USERS)]
    outbox, keys = advertised_and_checked(p, users, CODES)[:2]
    with pytest.raises(ParameterError, match="user 1"):  # user 2's key relayed as if it were user 1's
        users[0].masked_sum({**keys, 1: keys[2]})
    with pytest.raises(ParameterError, match="user 0, who advertised"):
        users[0].masked_sum({k: v for k, v in keys.items() if k})
    users[0].masked_sum(keys)
    everyone = list(range(N_USERS))
    with pytest.raises(ParameterError, match="at least 20"):
        users[0].consistency(everyone, everyone[:19])
    with pytest.raises(ParameterError, match="the 24 users he masked with"):
        users[0].consistency(everyone[:-1], everyone[:-1])
    with pytest.raises(ParameterError, match="distinct"):
        users[0].consistency(everyone + [3], everyone)
    with pytest.raises(ParameterError, match="identity"):  # a user without his identity key cannot sign
        SharingUser(p, 0, 20, state=users[0].state).consistency(everyone, everyone)
    users[0].consistency(everyone, everyone)
    with pytest.raises(ParameterError, match="the lists he signed in round 4"):
        users[0].reveal(everyone, everyone[:-1], {}, {})


def test_a_dealer_whose_backup_does_not_open_or_does_not_match_is_complained_about_and_a_withheld_one_refused():
    """Round 2: user 0 complains about the dealers whose backup did not open (None from his SDK: 6), is another's
    (user 7's relayed as 8's) or holds shares that do not match the commitments (9); the server excludes them and
    user 0 never masks with them (he refuses a U1' that keeps one). A backup withheld (5's: the server took no
    round-1 message without it) is the server's doing: he refuses the round, naming 5, and blames no dealer."""
    p = parameters("dpds")
    rng = np.random.default_rng(0)
    users = [SharingUser(p, i, 13, rng=rng) for i in range(N_USERS)]
    outbox = {i: users[i].advertise(int(CODES[i])) for i in range(N_USERS)}
    messages = {"advertise": {i: m for i, (m, _) in outbox.items()}}
    server, state = SharingServer(p, 13), {"senders": list(range(N_USERS))}
    backups = {i: outbox[i][1][0] for i in range(1, N_USERS)}
    wrong = decode(p, backups[9], (BACKUP,), 9, 0).payload.copy()
    wrong[1, 0] = (wrong[1, 0] + 1) % shamir.PRIME
    backups = {**backups, 6: None, 8: backups[7], 9: encode(p, BACKUP, 9, 0, wrong)}
    withheld = {k: v for k, v in backups.items() if k != 5}
    alone = SharingUser(p, 0, 13, rng=1)
    alone.advertise(int(CODES[0]))
    with pytest.raises(ParameterError, match=r"none from users \[5\]: the server withheld them"):
        alone.check(**server.inbox(ROUNDS[1], 0, state, messages), backups=withheld)
    complaints = users[0].check(**server.inbox(ROUNDS[1], 0, state, messages), backups=backups).message
    assert decode(p, complaints[KEY_MESSAGE:], (COMPLAINTS,), 0, SERVER).payload.tolist() == [6, 8, 9]
    assert users[0].state.checked == set(range(1, N_USERS)) - {6, 8, 9}
    messages["check"] = {0: complaints, **{k: users[k].check(**server.inbox(ROUNDS[1], k, state, messages), backups={
        i: outbox[i][1][k] for i in outbox if i != k}).message for k in range(1, N_USERS)}}
    with pytest.raises(ParameterError, match="whose backups he complained about or lacks"):
        users[0].masked_sum(messages["check"])  # a server that kept the users he complained about
    closed = server.close(ROUNDS[1], list(range(N_USERS)), state, messages)
    assert closed["checked"] == [u for u in range(N_USERS) if u not in (6, 8, 9)]
    assert closed["complaints"] == [[0, [6, 8, 9]]] and closed["excluded"] == [6, 8, 9]
    users[0].masked_sum(server.inbox(ROUNDS[1 + 1], 0, closed, messages)["keys"])  # U1' without them: he masks


def test_a_complainer_who_names_more_than_the_task_can_lose_is_excluded_himself():
    """n - min_survivors = 24 - 13 = 11: a complainer naming 11 users excludes them; one naming 12 (excluding them
    would fail the task) is excluded instead, his complaints ignored."""
    p = parameters("dpds")
    server = SharingServer(p, 13)
    assert server.excluded({0: list(range(1, 12))}) == set(range(1, 12))
    assert server.excluded({0: list(range(1, 13)), 14: [15]}) == {0, 15}


def test_where_the_task_allows_no_exclusion_the_dealer_complained_about_is_named_not_his_holders():
    """min_survivors = n (the default): one dealer whose backups are all wrong draws a complaint from each of the
    others. One complaint is believed (max(1, n - min_survivors)): the task fails naming him excluded, where every
    honest complainer was excluded as a liar and the dealer named as the one who passed."""
    p = parameters("dpdg")
    server = SharingServer(p, N_USERS)
    assert server.excluded({k: [3] for k in range(N_USERS) if k != 3}) == {3}
    assert server.excluded({0: [3, 4]}) == {0}


def test_the_server_refuses_what_does_not_add_up():
    p = parameters("dpdg")
    _, _, keys, masked, reveals, committed = run(p, CODES, drop2=(6,))
    server = SharingServer(p, 20)
    with pytest.raises(ParameterError, match="survivors must be at least 20"):
        server.release(keys, {k: masked[k] for k in list(masked)[:19]}, reveals, committed)
    with pytest.raises(ParameterError, match="masked sums"):
        server.release({k: v for k, v in keys.items() if k}, masked, reveals, committed)
    survivors = sorted(masked)
    forged = decode(p, reveals[0], (REVEAL,), 0, SERVER).payload
    swapped = forged.secrets.copy()
    swapped[1] = PAIR_KEY  # a survivor's pair key: the share an honest user never reveals
    bad = encode(p, REVEAL, 0, SERVER, Revealed(forged.owners, swapped, forged.shares))
    with pytest.raises(ParameterError, match="each survivor's mask seed"):
        server.check_reveal(bad, 0, sorted(keys), survivors)


def test_messages_are_decoded_strictly():
    p = parameters("dpds")
    good = encode(p, MASKED_SUM, 1, SERVER, np.arange(DOMAIN))
    assert decode(p, good, (MASKED_SUM,), 1, SERVER).payload.tolist() == [0, 1, 2]
    assert len(good) == message_bytes(p, MASKED_SUM)
    backup = encode(p, BACKUP, 1, 2, np.zeros((2, LIMBS), dtype=np.int64))
    assert len(backup) == message_bytes(p, BACKUP)
    low_order = encode(p, ADVERTISE, 1, SERVER, bytes(64))
    reveal = encode(p, REVEAL, 1, SERVER, Revealed(np.array([0, 2]), np.array([MASK_SEED, PAIR_KEY]),
                                                  np.zeros((2, LIMBS), dtype=np.int64)))
    assert len(reveal) == message_bytes(p, REVEAL, 2)
    twice = encode(p, REVEAL, 1, SERVER, Revealed(np.array([2, 2]), np.array([1, 1]),
                                                 np.zeros((2, LIMBS), dtype=np.int64)))
    cases = {
        "of at least": (good[:5], (MASKED_SUM,)),
        "version": (b"XYZ" + good[3:], (MASKED_SUM,)),
        "masked sum message": (backup, (MASKED_SUM,)),
        "sender must be user 3": (good, (MASKED_SUM,), 3),
        "field elements of": (good + b"\0", (MASKED_SUM,)),
        "below p": (good[:HEADER.size] + b"\xff" * (len(good) - HEADER.size), (MASKED_SUM,)),
        "another user than the sender": (encode(p, BACKUP, 2, 2, np.zeros((2, LIMBS), dtype=np.int64)), (BACKUP,)),
        "in \\[0, 24\\)": (encode(p, BACKUP, 2, 99, np.zeros((2, LIMBS), dtype=np.int64)), (BACKUP,)),
        f"elements of GF\\({shamir.PRIME}\\)": (backup[:HEADER.size] + b"\xff" * (len(backup) - HEADER.size),
                                               (BACKUP,)),
        "low order": (low_order, (ADVERTISE,)),
        "public key and a hash": (low_order[:-1], (ADVERTISE,)),
        "distinct users": (twice, (REVEAL,)),
        "revealed entries of": (reveal[:-1], (REVEAL,)),
    }
    for match, (raw, kinds, *sender) in cases.items():
        with pytest.raises(ParameterError, match=match):
            decode(p, raw, kinds, *sender)


def test_a_users_state_round_trips_and_refuses_garbage():
    p = parameters("dpdg")
    user = SharingUser(p, 3, T, rng=np.random.default_rng(0))
    user.advertise(1)
    again = SharingUser(p, 3, T, state=UserState.from_bytes(user.state.to_bytes()))
    assert again.state.secret == user.state.secret and again.state.answered == 1
    np.testing.assert_array_equal(again.state.vector, user.state.vector)
    np.testing.assert_array_equal(again.state.backup, user.state.backup)
    with pytest.raises(ParameterError, match="user state"):
        UserState.from_bytes(b"\x05\x00\x00\x00{bad")
    with pytest.raises(ParameterError, match="user 4"):
        SharingUser(p, 4, T, state=user.state)


def test_the_threshold_is_a_majority_and_more_than_the_dishonest_users():
    assert threshold(parameters("dpds")) == 13
    # D = 18 users who may not follow the protocol: t > (n + D) / 2 = 21, so that two groups of the 6 honest users
    # shown different lists cannot both gather t signatures with the D's (2 (t - D) > n - D)
    assert threshold(parameters("dpdg", honest_fraction=0.25)) == 22
    with pytest.raises(ParameterError, match="min_survivors must be an integer in \\[13, 24\\]"):
        check_min_survivors(parameters("dpds"), 12)


def test_the_threshold_is_the_least_that_two_survivor_lists_cannot_both_gather():
    """docs/privacy.md, "Dishonest parties": for every n up to 60 and every number D of users who may not follow the protocol,
    t exceeds D, is at most n, and two groups of honest users shown different lists cannot both count t signatures
    with the D's (2 (t - D) > n - D), while t - 1 would let them (or would not exceed D)."""
    from types import SimpleNamespace

    for n in range(2, 61):
        for honest in range(1, n + 1):  # threshold reads only n and ceil(G n)
            t, d = threshold(SimpleNamespace(n_users=n, honest_users=honest)), n - honest
            assert d < t <= n and 2 * (t - d) > n - d
            assert t - 1 <= d or 2 * (t - 1 - d) <= n - d


def test_the_release_over_survivors_is_recomputed():
    """n' survivors: DPDS's data condition stays stated of the n enrolled, so it leaves every category ceil(beta n) -
    (n - n') survivors at least; the users who may not follow the protocol all among them; DPDG's noise that of the
    honest survivors (its delta grows as they do)."""
    dpds = parameters("dpds", honest_fraction=0.9)
    fewer = survivors_parameters(dpds, 20)
    dishonest = N_USERS - dpds.honest_users
    assert fewer.n_users == 20 and fewer.honest_users == 20 - dishonest and fewer.dropouts == 4
    assert fewer.min_count == math.ceil(0.25 * N_USERS) - 4 and fewer.sampling_probability == dpds.sampling_probability
    assert fewer.counted_holders == max(1, fewer.min_count - dishonest)
    dpdg = parameters("dpdg")
    assert survivors_parameters(dpdg, 12).delta_at(1.0) > dpdg.delta_at(1.0)
    assert survivors_parameters(dpdg, N_USERS) == dpdg
    with pytest.raises(ParameterError, match="survivors"):
        survivors_parameters(dpds, dishonest)
    with pytest.raises(ParameterError, match="protocol"):
        check_min_survivors(sc.calibrate_dpcs(1.0, 1e-3, N_USERS, DOMAIN, min_count_fraction=0.25), 12)
    # 3 categories of ceil(0.33 * 24) = 8 holders: 13 survivors may have lost a category's every holder but one,
    # and the release says so: delta = p, a user alone in his category
    weak = sc.calibrate_dpds(1.0, 1e-3, N_USERS, DOMAIN, min_count_fraction=0.33)
    assert check_min_survivors(weak, 13) == 13
    assert survivors_parameters(weak, 13).delta_at(1.0) == weak.sampling_probability


def pair_delta(epsilon: float, p: float, others: int) -> float:
    """The changed pair's hockey-stick divergence, enumerated over both counts (independently of
    privacy/sampling.py): (X + B, Y) against (X, Y + B), X, Y ~ Bin(others, p), B ~ Bern(p)."""
    from scipy.stats import binom

    i = np.arange(others + 2)
    x = binom.pmf(i, others, p)
    x_plus = p * binom.pmf(i - 1, others, p) + (1 - p) * x
    return float(np.maximum(np.outer(x_plus, x) - math.exp(epsilon) * np.outer(x, x_plus), 0).sum())


@pytest.mark.parametrize("dropped", [(0, 3, 6), (0, 3, 6, 9, 12, 15)])
def test_the_survivors_delta_is_the_planned_conditions_worst_case(dropped):
    """The task states every category held by ceil(beta n) = 6 of the 24; users of category 0 drop out (CODES
    gives users 0, 3, 6, ... item 0), so the condition leaves it 6 - d survivors, and the release's delta is the
    exact one there: d = 3, 2 other holders; d = 6, none (delta = p). (It was computed at ceil(beta n') = 6
    holders, "kept by dropouts unrelated to the data", which the condition does not imply.)"""
    p = parameters("dpds")
    _, _, keys, masked, reveals, committed = run(p, CODES, drop2=dropped)
    release = SharingServer(p, T).release(keys, masked, reveals, committed)
    others = max(0, 6 - len(dropped) - 1)
    assert release.privacy.delta == pytest.approx(pair_delta(1.0, p.sampling_probability, others), rel=1e-9)
    assert release.privacy.delta > 5 * p.delta
    condition = release.privacy.assumptions[0]
    assert f"{len(dropped)} of them dropped out" in condition and "it would be" in condition
    if others == 0:
        assert release.privacy.delta == pytest.approx(p.sampling_probability, rel=1e-12)


def test_the_issues_300_users_dropouts_state_the_exact_worst_case():
    """n = 300, 10 categories, beta = 0.022 (7 holders), (1, 1e-6): one dropout may leave a category 6 holders
    (delta 6.3e-6, where 1e-6 was stated); 21 may leave a user alone in his category (delta = p)."""
    p = sc.calibrate_dpds(1.0, 1e-6, 300, 10, min_count_fraction=0.022)
    one = survivors_parameters(p, 299)
    assert one.delta_at(1.0) == pytest.approx(pair_delta(1.0, p.sampling_probability, 5), rel=1e-9)
    assert 6e-6 < one.delta_at(1.0) < 6.5e-6
    assert survivors_parameters(p, 279).delta_at(1.0) == pytest.approx(p.sampling_probability, rel=1e-12)


def test_the_release_states_who_took_part_and_a_weakened_delta():
    p = parameters("dpdg")
    _, _, keys, masked, reveals, committed = run(p, CODES, drop1=(1,), drop2=(2, 3), drop3=(4,))
    privacy = SharingServer(p, T).release(keys, masked, reveals, committed).privacy
    text = " ".join(privacy.caveats)
    assert ("21 users who took part to the end, of the 24 enrolled (23 advertised in round 1 and passed the check, "
            "20 revealed in round 5") in text
    assert "backed up 13-out-of-24 (Shamir)" in text
    assert privacy.delta > p.delta and "weakened it from the task's target delta" in text


def test_the_parties_are_the_roles_declared_for_the_protocol():
    from privagg.protocols.roles import Coordinator, RoundUser
    from privagg.protocols.sharing_server import PROTOCOL

    p = parameters("dpds")
    assert isinstance(SharingUser(p, 0, T), RoundUser) and isinstance(SharingServer(p, T), Coordinator)
    assert [r.name for r in PROTOCOL.rounds] == ["advertise", "check", "masked_sum", "consistency", "reveal",
                                                 "exclusion"]
    assert all(callable(getattr(SharingUser, r.name)) for r in PROTOCOL.rounds)


def test_a_batch_of_users_sends_what_each_would_send_alone():
    """Round 2 over a batch derives each pair's shares once for both users (masked_sums): every user's masked sum
    is the one he computes alone, byte for byte."""
    from privagg.protocols.sharing_parties import masked_sums

    p = parameters("dpdg")
    rng = np.random.default_rng(3)
    users = [SharingUser(p, i, T, rng=rng) for i in range(N_USERS)]
    _, keys = advertised_and_checked(p, users, CODES, absent=(4,))
    alone = [SharingUser(p, i, T, state=UserState.from_bytes(users[i].state.to_bytes())) for i in keys]
    batch = masked_sums([users[i] for i in keys], keys)
    assert [out.message for out in batch] == [user.masked_sum(keys).message for user in alone]


@pytest.mark.parametrize("protocol", ["dpds", "dpdg"])
def test_a_survivor_who_masks_another_vector_is_caught_only_where_no_one_hot_inputs_add_up(protocol, monkeypatch):
    """No input proofs: user 7 adds s to his item-0 count before masking (s from 1 to q - 1 in 12 steps). DPDS's sums
    are the sampled one-hot counts, so the release is refused exactly when the unmasked counts add up to more than
    the survivors (it proves a survivor lied); any other shift moves item 0's estimate undetected, and so does every
    shift under DPDG's noise (docs/privacy.md, "Dishonest parties": the users' inputs are trusted)."""
    p = parameters(protocol)
    honest = SharingServer(p, T).release(*run(p, CODES)[2:])
    counts = np.rint(honest.table.estimates * p.effective_probability).astype(np.int64) if protocol == "dpds" else None
    masked_sum, outcomes = SharingUser.masked_sum, set()
    for shift in range(1, p.field.modulus, max(1, p.field.modulus // 12)):
        def lying(self, keys, shift=shift):
            if self.index == 7:
                vector = self.state.vector.copy()
                vector[0] = (int(vector[0]) + shift) % p.field.modulus
                self.state.vector = vector
            return masked_sum(self, keys)

        monkeypatch.setattr(SharingUser, "masked_sum", lying)
        _, _, keys, masked, reveals, committed = run(p, CODES)
        server = SharingServer(p, T)
        if protocol == "dpds" and (counts[0] + shift) % p.field.modulus + counts[1:].sum() > honest.survivors:
            with pytest.raises(ParameterError, match="no one-hot inputs give") as err:
                server.release(keys, masked, reveals, committed)
            assert err.value.field == "masked sums"
            outcomes.add("refused")
        else:
            moved = server.release(keys, masked, reveals, committed).table.estimates - honest.table.estimates
            assert moved[0] != 0 and not moved[1:].any()
            outcomes.add("moved")
    assert outcomes == ({"refused", "moved"} if protocol == "dpds" else {"moved"})
