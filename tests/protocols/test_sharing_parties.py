"""DPDS and DPDG as separate parties (protocols/sharing_parties.py): exact reconstruction over the survivors, the
recovery's refusals, what a server that lies about a dropout sees, and every message's decoding checks."""

import dataclasses
import math

import numpy as np
import pytest

from privagg.errors import ParameterError
from privagg.protocols import sampling_sharing as ss
from privagg.protocols.sharing_parties import (HEADER, MASKED_SUM, SEED, SERVER, SHARE, UNMASK, SharingServer,
                                               SharingUser, UserState, check_min_survivors, decode, encode,
                                               message_bytes, survivors_parameters)

N_USERS, DOMAIN = 24, 3
CODES = np.arange(N_USERS) % DOMAIN


def parameters(protocol: str, encoding: str = "elements", **options):
    if protocol == "dpds":
        return ss.calibrate_dpds(1.0, 1e-3, N_USERS, DOMAIN, min_count_fraction=0.25, share_encoding=encoding,
                                 **options)
    return ss.calibrate_dpdg(1.0, 1e-3, N_USERS, DOMAIN, share_encoding=encoding, **options)


def run(p, codes, drop1=(), drop2=(), min_survivors=12, seed=1, claimed=None):
    """Every round in process: (users, the shares each sender made, U1, masked sums, unmasks). ``claimed``: the
    dropouts the server names in round 3 (default: the true ones); a user who refuses is left out."""
    rng = np.random.default_rng(seed)
    users = [SharingUser(p, i, min_survivors, rng=rng) for i in range(p.n_users)]
    outbox = {i: users[i].share(int(codes[i])) for i in range(p.n_users) if i not in drop1}
    senders = sorted(outbox)
    masked = {k: users[k].masked_sum(senders, {i: outbox[i][k] for i in senders if i != k})
              for k in senders if k not in drop2}
    dropped = sorted(set(senders) - set(masked)) if claimed is None else sorted(claimed)
    unmasks = {}
    for k in masked:
        try:
            unmasks[k] = users[k].unmask(senders, dropped, {d: outbox[d][k] for d in dropped if d != k})
        except ParameterError:
            pass
    return users, outbox, senders, masked, unmasks


def vector(p, user: SharingUser) -> np.ndarray:
    """x_i: the sum of every share the user made."""
    total = np.zeros(p.domain_size, dtype=np.uint64)
    for k in range(p.n_users):
        total = p.field.add(total, user.sent_share(k))
    return total


@pytest.mark.parametrize("protocol", ["dpds", "dpdg"])
@pytest.mark.parametrize("encoding", ["elements", "seeds"])
def test_the_release_is_the_survivors_sum_exactly(protocol, encoding):
    p = parameters(protocol, encoding)
    users, _, senders, masked, unmasks = run(p, CODES, drop1=(3, 7), drop2=(5, 11, 23))
    released = SharingServer(p, 12).release(senders, masked, unmasks)
    survivors = sorted(masked)
    assert (released.senders, released.survivors, released.enrolled) == (22, 19, N_USERS)
    total = np.zeros(DOMAIN, dtype=np.uint64)
    for k in survivors:
        x = vector(p, users[k])
        if protocol == "dpds":  # a participant's one-hot vector, or zeros
            assert x.sum() in (0, 1) and (x.sum() == 0 or x[CODES[k]] == 1)
        total = p.field.add(total, x)
    recomputed = survivors_parameters(p, len(survivors))
    np.testing.assert_array_equal(released.table.estimates, recomputed.estimate(total))
    assert released.parameters.n_users == 19


def test_without_dropouts_everyone_is_released():
    p = parameters("dpds")
    users, _, senders, masked, unmasks = run(p, CODES)
    released = SharingServer(p, N_USERS).release(senders, masked, unmasks)
    assert released.survivors == N_USERS and released.parameters == p
    sums = sum(vector(p, u).astype(np.int64) for u in users)
    np.testing.assert_array_equal(released.table.estimates, p.estimate(sums))


def test_dpds_through_the_parties_is_unbiased():
    """Over 150 seeded runs with dropouts, the release's mean is the survivors' counts within 4 standard errors
    (each run's estimate has variance Pi (1 - p) / p, Lemma III.1)."""
    p = ss.calibrate_dpds(1.0, 0.05, 12, 2, min_count_fraction=0.25)
    codes = np.arange(12) % 2
    runs, errors = 150, []
    for seed in range(runs):
        _, _, senders, masked, unmasks = run(p, codes, drop1=(0,), drop2=(3,), min_survivors=6, seed=seed)
        released = SharingServer(p, 6).release(senders, masked, unmasks)
        truth = np.bincount(codes[sorted(masked)], minlength=2)
        errors.append(released.table.estimates - truth)
    q = p.sampling_probability
    sd = np.sqrt(np.array([5, 5]) * (1 - q) / q / runs)  # 5 survivors hold each item
    assert np.all(np.abs(np.mean(errors, axis=0)) < 4 * sd), (np.mean(errors, axis=0), sd)


def test_a_user_named_as_dropped_refuses_and_his_vector_stays_hidden():
    """The server names user 4 among the dropouts though he sent his masked sum: he refuses to unmask, and the
    release is the sum of the others, exactly; his own vector never enters it."""
    p = parameters("dpds")
    users, _, senders, masked, unmasks = run(p, CODES, claimed=[4])
    assert 4 in masked and 4 not in unmasks
    with pytest.raises(ParameterError, match="dropouts.*without user 4"):
        users[4].unmask(senders, [4], {})
    others = {k: v for k, v in masked.items() if k != 4}
    released = SharingServer(p, 12).release(senders, others, unmasks)
    total = sum(vector(p, users[k]).astype(np.int64) for k in others)
    np.testing.assert_array_equal(released.table.estimates, survivors_parameters(p, 23).estimate(total))


def test_the_lying_servers_view_is_the_same_for_any_item_of_the_named_user():
    """Two datasets differing in user 4's item, every party's secret the same: of everything the server sees
    (masked sums, unmasks), only user n - 1's masked sum and unmask differ (his share from user 4 is the
    correction share, which carries the item), and by opposite amounts, which his uniform mask b hides: their
    sum is the same. So the server's view has the same law under both items."""
    p = ss.calibrate_dpdg(1.0, 1e-3, N_USERS, DOMAIN)
    other = CODES.copy()
    other[4] = (CODES[4] + 1) % DOMAIN
    views = []
    for codes in (CODES, other):
        users, _, senders, masked, unmasks = run(p, codes, claimed=[4], seed=5)
        views.append((masked, unmasks))
    (m1, u1), (m2, u2) = views
    last = N_USERS - 1
    assert {k for k in m1 if m1[k] != m2[k]} == {last} and {k for k in u1 if u1[k] != u2[k]} == {last}
    field = p.field

    def value(raw, kind, user):
        return decode(p, raw, (kind,), user, SERVER).payload

    np.testing.assert_array_equal(field.add(value(m1[last], MASKED_SUM, last), value(u1[last], UNMASK, last)),
                                  field.add(value(m2[last], MASKED_SUM, last), value(u2[last], UNMASK, last)))


def test_each_round_once_and_in_order():
    p = parameters("dpds")
    users, outbox, senders, masked, _ = run(p, CODES)
    with pytest.raises(ParameterError, match="round"):
        users[0].share(0)
    with pytest.raises(ParameterError, match="round"):
        users[0].masked_sum(senders, {i: outbox[i][0] for i in senders if i})
    fresh = SharingUser(p, 2, 12)
    with pytest.raises(ParameterError, match="round 1 next"):
        fresh.unmask(senders, [], {})


def test_round_inputs_are_checked():
    p = parameters("dpds")
    rng = np.random.default_rng(0)
    users = [SharingUser(p, i, 20, rng=rng) for i in range(N_USERS)]
    outbox = {i: users[i].share(int(CODES[i])) for i in range(N_USERS)}
    everyone = list(range(N_USERS))
    inbox = {i: outbox[i][0] for i in range(1, N_USERS)}
    with pytest.raises(ParameterError, match="missing \\[5\\]"):
        users[0].masked_sum(everyone, {k: v for k, v in inbox.items() if k != 5})
    with pytest.raises(ParameterError, match="user 1"):  # a share user 2 sent user 0, relayed as if from user 1
        users[0].masked_sum(everyone, {**inbox, 1: outbox[2][0]})
    with pytest.raises(ParameterError, match="user 0, who shared"):
        users[0].masked_sum(everyone[1:], inbox)
    with pytest.raises(ParameterError, match="distinct"):
        users[0].masked_sum(everyone + [3], inbox)
    users[0].masked_sum(everyone, inbox)
    with pytest.raises(ParameterError, match="at least 20 survivors"):
        users[0].unmask(everyone, [1, 2, 3, 4, 5], {d: outbox[d][0] for d in (1, 2, 3, 4, 5)})
    with pytest.raises(ParameterError, match="round-1 senders only"):
        users[0].unmask(everyone[:-1], [N_USERS - 1], {})


def test_the_server_refuses_an_incomplete_release():
    p = parameters("dpdg")
    _, _, senders, masked, unmasks = run(p, CODES, drop2=(6,))
    server = SharingServer(p, 20)
    with pytest.raises(ParameterError, match="unmasks.*user 2"):
        server.release(senders, masked, {k: v for k, v in unmasks.items() if k != 2})
    with pytest.raises(ParameterError, match="survivors must be at least 20"):
        server.release(senders, {k: masked[k] for k in list(masked)[:19]}, {k: unmasks[k] for k in list(masked)[:19]})
    with pytest.raises(ParameterError, match="masked sums"):
        server.release(senders[1:], masked, unmasks)


def test_messages_are_decoded_strictly():
    p = parameters("dpds")
    good = encode(p, SHARE, 1, 2, np.arange(DOMAIN))
    assert decode(p, good, (SHARE,), 1, 2).payload.tolist() == [0, 1, 2]
    assert len(good) == message_bytes(p, SHARE)
    cases = {
        "of at least": good[:5],
        "version": b"XYZ" + good[3:],
        "masked sum message": good,  # a share where a masked sum is expected
        "sender must be user 3": good,
        "field elements of": good + b"\0",
        "below p": good[:HEADER.size] + b"\xff" * (len(good) - HEADER.size),
        "another user than the sender": encode(p, SHARE, 2, 2, np.zeros(DOMAIN, dtype=np.uint64)),
        "in \\[0, 24\\)": encode(p, SHARE, 2, 99, np.zeros(DOMAIN, dtype=np.uint64)),
        "seed of 32": encode(p, SEED, 1, 2, b"x" * 32)[:-1],
    }
    expected = {"masked sum message": ((MASKED_SUM,), None), "sender must be user 3": ((SHARE,), 3)}
    for match, raw in cases.items():
        kinds, sender = expected.get(match, ((SHARE, SEED), None))
        with pytest.raises(ParameterError, match=match):
            decode(p, raw, kinds, sender)


def test_a_users_state_round_trips_and_refuses_garbage():
    p = parameters("dpdg", "seeds")
    user = SharingUser(p, 3, 12, rng=np.random.default_rng(0))
    user.share(1)
    again = SharingUser(p, 3, 12, state=UserState.from_bytes(user.state.to_bytes()))
    assert [again.sent_share(k).tolist() for k in range(N_USERS)] == [user.sent_share(k).tolist()
                                                                      for k in range(N_USERS)]
    with pytest.raises(ParameterError, match="user state"):
        UserState.from_bytes(b"\x05\x00\x00\x00{bad")
    with pytest.raises(ParameterError, match="user 4"):
        SharingUser(p, 4, 12, state=user.state)


def test_the_release_over_survivors_is_recomputed():
    """n' survivors: DPDS's data condition over beta n'; the users who may not follow the protocol all among them;
    DPDG's noise that of the honest survivors (its delta grows as they do)."""
    dpds = parameters("dpds", honest_fraction=0.9)
    fewer = survivors_parameters(dpds, 20)
    dishonest = N_USERS - dpds.honest_users
    assert fewer.n_users == 20 and fewer.honest_users == 20 - dishonest
    assert fewer.min_count == math.ceil(0.25 * 20) and fewer.sampling_probability == dpds.sampling_probability
    dpdg = parameters("dpdg")
    assert survivors_parameters(dpdg, 12).delta_at(1.0) > dpdg.delta_at(1.0)
    assert survivors_parameters(dpdg, N_USERS) == dpdg
    with pytest.raises(ParameterError, match="survivors"):
        survivors_parameters(dpds, dishonest)
    with pytest.raises(ParameterError, match="min_survivors"):
        check_min_survivors(dpds, 1)
    with pytest.raises(ParameterError, match="protocol"):
        check_min_survivors(ss.calibrate_dpcs(1.0, 1e-3, N_USERS, DOMAIN, min_count_fraction=0.25), 12)
    weak = dataclasses.replace(dpds, min_count_fraction=0.3)
    with pytest.raises(ParameterError, match="min_survivors"):  # 3 categories of ceil(0.3 * 4) = 2 holders > 4
        check_min_survivors(weak, 4)


def test_the_release_states_who_took_part_and_a_weakened_delta():
    p = parameters("dpdg")
    _, _, senders, masked, unmasks = run(p, CODES, drop1=(1,), drop2=(2, 3))
    privacy = SharingServer(p, 12).release(senders, masked, unmasks).privacy
    text = " ".join(privacy.caveats)
    assert "21 users who took part to the end, of the 24 enrolled (23 shared in round 1)" in text
    assert privacy.delta > p.delta and "weakened it from the task's target delta" in text


def test_the_parties_are_the_roles_declared_for_the_topology():
    from privagg.protocols.roles import Sharers, SharingRelease, SharingRounds

    p = parameters("dpds")
    assert isinstance(SharingUser(p, 0, 12), SharingRounds) and isinstance(SharingServer(p, 12), SharingRelease)
    assert isinstance(ss.SharingUsers(p), Sharers)
