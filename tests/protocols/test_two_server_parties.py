"""TSS and TSS' as separate parties (protocols/two_server_parties.py), played in-process with seeded users.

Checked: S2's field sums are exactly the sampled counts of the users who took part (their coins and sets),
with reporters dropping out at rounds 1 and 2 and helpers at round 3 (recovered, or the item lost, and only
it); the reporters' refusals in round 4 and S2's of a hand-over naming a helper whose sum it holds; every
decode check naming its field; the user's state between rounds; the election among R1 (sizes, pool, and
each member equally likely).
"""

import dataclasses
import json

import numpy as np
import pytest
from scipy.stats import binom

from privagg.errors import ParameterError
from privagg.protocols.sampling_calibration import calibrate_dpds, calibrate_tss, calibrate_tss_collusion
from privagg.protocols.sharing_parties import survivors_parameters
from privagg.protocols.two_server_messages import (FIRST, RECOVERY, REPORT_SET, SECOND, SHARES, SUMS, survivors_bitmap,
                                                   check_min_survivors, decode, encode, message_bytes)
from privagg.core import identity
from privagg.protocols.two_server_election import CONTEXT, as_inbox
from privagg.protocols.two_server_parties import Election, FirstServer, Handover, SecondServer, TSSUser, UserState

N_USERS, DOMAIN, MIN = 32, 4, 26
S2_KEY = bytes(range(32))  # S2's identity key in these runs


def attested(parameters, election: Election, key: bytes = S2_KEY) -> dict:
    """A reporter's round-2 inbox: ``election`` as S2 (identity ``key``) attests it."""
    return as_inbox(election, *SecondServer(parameters, MIN, identity=key).attest(election))


def tss_prime(**options):
    return calibrate_tss_collusion(1.0, 0.1, N_USERS, DOMAIN, min_count_fraction=0.2, report_fraction=0.5,
                                   colluders=2, honest_fraction=0.9, sampling_probability=0.6, **options)


def tss():
    return calibrate_tss(1.0, 0.1, N_USERS, DOMAIN, min_count_fraction=0.2, report_fraction=0.5, honest_fraction=0.9,
                         sampling_probability=0.6)


@dataclasses.dataclass
class Run:
    """One task played round by round: the users, S1's election and plan, what S2 was handed."""

    parameters: object
    users: list
    sets: dict
    election: Election
    survivors: dict
    reporters: tuple
    sums: dict
    recoveries: dict
    handover: Handover

    def truth(self) -> np.ndarray:
        """The sampled counts of R2: sum of e_ij over the survivors, from their own coins and sets."""
        counts = np.zeros(self.parameters.domain_size, dtype=np.int64)
        for i in self.survivors:
            for j, e in zip(self.users[i].state.items, self.users[i].state.entries):
                counts[j] += e
        return counts


def play(parameters, seed: int, silent1=(), silent2=(), silent_helpers=(), silent4=(), min_survivors=MIN,
         garbled=(), hidden=None) -> Run:
    """Every round, the users in ``silent1`` sending no report set, ``silent2`` no shares, ``silent_helpers`` no
    sums, ``silent4`` no recovery; the helpers in ``garbled`` send a sum S2 cannot read (S1 asks S2 which, as it
    closes round 3, and recovers them as dropped); ``hidden`` = (helper, reporter): a lying S1 keeps that
    reporter (and his shares) from that helper while counting him in R2 for S2."""
    rng = np.random.default_rng(seed)
    n, N = parameters.n_users, parameters.domain_size
    codes = np.arange(n) % N
    users = [TSSUser(parameters, i, min_survivors, rng=rng) for i in range(n)]
    s1 = FirstServer(parameters, min_survivors, second=SecondServer(parameters, min_survivors, identity=S2_KEY))
    sets = {i: s1.check_report_set(users[i].report(int(codes[i])).message, i) for i in range(n) if i not in silent1}
    election = s1.elect(sets, rng)
    attestation = as_inbox(election, *s1.second.attest(election))
    inbox, survivors = {}, {}
    for i in sets:
        if i in silent2:
            continue
        messages = users[i].share(**attestation).relayed
        expected = s1.expected_shares(election, i, sets[i])
        assert {h: len(m) for h, m in messages.items()} == {h: message_bytes(parameters, SHARES, k)
                                                            for h, k in expected.items()}
        survivors[i] = sets[i].tolist()
        for h, m in messages.items():
            inbox.setdefault(h, {})[i] = m
    reporters = s1.reporters(survivors, N)
    shown = lambda h, j: [i for i in reporters[j] if (h, i) != hidden]  # noqa: E731
    r2, sums = list(survivors_bitmap(survivors, n)), {}
    for h, items in election.by_helper.items():
        if h not in silent_helpers:
            try:  # (S1's inbox: the election to one not in R2)
                sums[h] = users[h].sums({j: shown(h, j) for j in items}, {i: m for i, m in inbox.get(h, {}).items()
                                        if (h, i) != hidden}, r2, **({} if h in survivors else attestation)).message
            except ParameterError:  # he refused his lists: he sends no sum
                pass
    for h in garbled:
        sums[h] = b"not a sum"
    unopened = s1.second.unopened(election, sums, sorted(survivors), [len(r) for r in reporters])
    sums = {h: m for h, m in sums.items() if h not in unopened}
    plan = s1.plan(election, reporters, list(sums))
    recoveries = {i: users[i].recover(asked).message for i, asked in plan.asked(reporters).items()
                  if i not in silent4}
    handover = Handover(n, election.senders, tuple(sorted(survivors)), election.counts, election.helpers,
                        tuple(len(r) for r in reporters), {j: (d, reporters[j]) for j, d in plan.dropped.items()},
                        {h: b"sealed" for h in sums}, {i: b"sealed" for i in recoveries}, tuple(unopened))
    return Run(parameters, users, sets, election, survivors, reporters, sums, recoveries, handover)


def release(run: Run, **options):
    return SecondServer(run.parameters, MIN).release(run.handover, run.sums, run.recoveries, **options)


@pytest.mark.parametrize("make", [tss, tss_prime], ids=["tss", "tss-collusion"])
def test_s2_reconstructs_the_sampled_counts_exactly(make):
    p = make()
    for seed in range(3):
        run = play(p, seed)
        released = release(run)
        truth = run.truth()
        assert released.counts.tolist() == truth.tolist() and truth.sum() > 0
        assert np.allclose(released.table.estimates, truth / p.effective_probability)
        assert released.table.full_domain and not released.recovered and not released.lost
        assert released.survivors == released.senders == N_USERS
        # the counts are the coins: every entry is the user's coin on his own item, and some coins are 0
        entries = [e for u in run.users for e in u.state.entries]
        assert set(entries) == {0, 1}
        privacy = released.privacy
        assert privacy.delta == pytest.approx(survivors_parameters(p, N_USERS).delta_at(p.epsilon))
        assert any("must not collude" in c for c in privacy.caveats)
        assert any("S1 and S2 do not collude" in a for a in privacy.assumptions)


def test_reporters_dropping_out_at_rounds_1_and_2_leave_the_counts_of_r2():
    p = tss_prime()
    run = play(p, 4, silent1=(0, 5), silent2=(7, 11, 12))
    released = release(run)
    assert released.senders == N_USERS - 2 and released.survivors == N_USERS - 5
    assert sorted(run.survivors) == [i for i in range(N_USERS) if i not in (0, 5, 7, 11, 12)]
    assert released.counts.tolist() == run.truth().tolist()
    assert set(run.election.senders) == set(range(N_USERS)) - {0, 5}  # helpers come from R1 only
    assert set(run.election.by_helper) <= set(run.election.senders)
    recomputed = survivors_parameters(p, N_USERS - 5)
    assert released.parameters == recomputed
    assert np.allclose(released.table.estimates, released.counts / recomputed.effective_probability)
    assert released.privacy.delta == pytest.approx(recomputed.delta_at(p.epsilon))
    assert any(f"{N_USERS - 5} users" in c for c in released.privacy.caveats)


def test_the_release_says_when_dropouts_weaken_the_guarantee():
    p = calibrate_tss_collusion(1.0, 0.1, N_USERS, DOMAIN, min_count_fraction=0.2, report_fraction=0.5, colluders=2,
                                honest_fraction=0.9)  # p calibrated: the target delta nearly spent by n users
    whole = release(play(p, 17)).privacy
    assert whole.delta == pytest.approx(p.delta_at(p.epsilon)) and whole.delta <= p.delta
    assert not any("weakened" in c for c in whole.caveats)
    fewer = release(play(p, 17, silent2=(1, 2, 3, 4))).privacy
    recomputed = survivors_parameters(p, N_USERS - 4).delta_at(p.epsilon)
    # the task's condition, ceil(0.2 * 32) = 7 holders a category, leaves 7 - 4 = 3 of the 28, and the 3 users who
    # may not follow the protocol may be those: the changed user alone, released with probability p' = p p_chi
    assert fewer.delta == pytest.approx(recomputed) == pytest.approx(p.effective_probability, rel=1e-12)
    assert fewer.delta > p.delta
    assert any(f"weakened it from the task's target delta 0.1 to {recomputed:.3g}" in c for c in fewer.caveats)
    assert "4 of them dropped out" in fewer.assumptions[0]


def test_a_helper_who_misses_round_3_is_recovered_exactly():
    p = tss_prime()
    probe = play(p, 5)
    dropped = sorted(probe.election.by_helper)[:2]  # two helpers, each serving some items
    run = play(p, 5, silent_helpers=dropped)
    served = sorted({j for h in dropped for j in run.election.by_helper[h]})
    assert sorted(run.handover.recovery) == served  # every item of theirs has reporters (m_j >= 1 of 32)
    released = release(run)
    assert released.counts.tolist() == run.truth().tolist()
    assert list(released.recovered) == served and not released.lost
    assert any("completed by recovery" in c for c in released.privacy.caveats)
    # each asked reporter revealed exactly his shares to the dropped helpers of his items
    for i, raw in run.recoveries.items():
        message = decode(p, raw, RECOVERY, i)
        for j, d, value in zip(message.items, message.helpers, message.values):
            state = run.users[i].state
            assert d in dropped and value == state.shares[j][state.helpers[j].index(d)]


def test_an_item_whose_helpers_all_drop_has_s2_open_no_sum():
    """Every helper of an item missing round 3 left its |R_j| without a sum behind it, which S2 cannot tell from an
    |R_j| S1 inflated as ballast for another item's short lists (a third review's attack: docs/privacy.md, "A
    helper's lists"): S2 opens no sum then, and the round fails (before, the item alone was lost)."""
    p = tss()  # phi = 0: an item's helpers are its m_j reporters' number
    probe = play(p, 6)
    item = int(np.argmin([len(h) for h in probe.election.helpers]))
    with pytest.raises(ParameterError, match=rf"sums.items\[{item}\] must be a sum from one of its helpers"):
        play(p, 6, silent_helpers=probe.election.helpers[item])


def test_a_reporter_who_misses_recovery_loses_the_items_he_was_asked_about():
    p = tss_prime()
    probe = play(p, 7)
    helper = sorted(probe.election.by_helper)[0]
    run = play(p, 7, silent_helpers=(helper,))
    asked = run.handover.recovery
    reporter = next(iter(asked.values()))[1][0]
    run = play(p, 7, silent_helpers=(helper,), silent4=(reporter,))
    released = release(run)
    his = sorted(j for j, (_, r) in run.handover.recovery.items() if reporter in r)
    assert sorted(released.lost) == his and all("recovery" in released.lost[j] for j in his)
    kept = released.table.items
    assert released.counts.tolist() == run.truth()[kept].tolist()


def test_s2_opens_no_sum_while_an_items_count_has_no_sum_behind_it():
    """A third review's attack: S1 had S2 attest m_T = 1 and raise another item B's m_j as much, listed one reporter
    to T's helper and named S2 |R_j| = the claimed m_j (in range, adding up); B's helpers refused their short lists,
    and S2 opened T's sum, one reporter's entry. S2 now opens nothing while an item with R2 reporters has no sum
    from any of its helpers (``backed``), naming it; the hand-over's own check (every=False) does not ask it."""
    p = tss()
    run = play(p, 9)
    election, reporters = run.election, [len(r) for r in run.reporters]
    ballast = 1
    posted = {h: run.sums[h] for h in run.sums if h not in election.helpers[ballast]}
    with pytest.raises(ParameterError, match=rf"sums.items\[{ballast}\] must be a sum from one of its helpers "
                       rf"\({len(election.helpers[ballast])} of them; \|R_j\| = {reporters[ballast]} named\)"):
        SecondServer(p, MIN).unopened(election, posted, sorted(run.survivors), reporters)
    assert SecondServer(p, MIN).unopened(election, posted, sorted(run.survivors), reporters, every=False) == []
    assert SecondServer(p, MIN).unopened(election, run.sums, sorted(run.survivors), reporters) == []


def test_every_item_lost_releases_nothing():
    p = tss()
    probe = play(p, 8)
    with pytest.raises(ParameterError, match=r"sums.items\[0\] must be a sum from one of its helpers"):
        play(p, 8, silent_helpers=tuple(probe.election.by_helper))


def test_a_reporter_refuses_recoveries_that_would_reveal_his_entry():
    p = tss_prime()
    run = play(p, 9, silent2=(3,))
    user = run.users[0]
    j = user.state.items[0]
    helpers = user.state.helpers[j]
    other = next(k for k in range(DOMAIN) if k not in user.state.items)
    for asked, why in (({j: helpers}, "not all of the item's helpers"), ({j: []}, "some but not all"),
                       ({j: [h for h in range(N_USERS) if h not in helpers][:1]}, "some but not all"),
                       ({other: helpers[:1]}, "dropped helpers must be items he shared")):
        with pytest.raises(ParameterError, match=why):
            TSSUser(p, 0, MIN, state=UserState.from_bytes(user.state.to_bytes())).recover(asked)
    with pytest.raises(ParameterError, match="round 2 answered before round 4"):  # he never shared
        run.users[3].recover({run.users[3].state.items[0]: [0]})
    helper = next(h for h, items in run.election.by_helper.items() if h in run.survivors and
                  set(items) & set(run.users[h].state.items))
    item = sorted(set(run.election.by_helper[helper]) & set(run.users[helper].state.items))[0]
    with pytest.raises(ParameterError, match="who sent his sum for the item"):
        run.users[helper].recover({item: [helper]})
    fine = run.users[1]
    first = fine.state.items[0]
    fine.recover({first: fine.state.helpers[first][:1]})
    with pytest.raises(ParameterError, match="each round is answered once"):
        fine.recover({first: fine.state.helpers[first][:1]})


def test_s2_refuses_a_handover_naming_a_helper_whose_sum_it_holds():
    p = tss_prime()
    run = play(p, 10)
    j = 0
    helper, reporters = run.election.helpers[j][0], run.reporters[j]
    forged = dataclasses.replace(run.handover, recovery={j: ((helper,), reporters)})
    with pytest.raises(ParameterError, match=r"handover.recovery\[0\].dropped must be helpers that sent no sum"):
        SecondServer(p, MIN).check(forged)
    every = dataclasses.replace(run.handover, sums={}, recovery={j: (run.election.helpers[j], reporters)})
    with pytest.raises(ParameterError, match="some but not all"):
        SecondServer(p, MIN).check(every)


@pytest.mark.parametrize("change, field", [
    (lambda h: dict(h, survivors=h["survivors"] + [N_USERS + 3]), "handover.survivors"),
    (lambda h: dict(h, enrolled=N_USERS + 1), "handover.enrolled"),
    (lambda h: dict(h, reporters=[r + 1 for r in h["reporters"]]), "handover.reporters"),
    (lambda h: dict(h, helpers=h["helpers"][:-1]), "handover.helpers"),
    (lambda h: dict(h, helpers=[[0, 1]] + h["helpers"][1:]), r"handover.helpers\[0\]"),
    (lambda h: dict(h, sums=[{"helper": 0, "sealed": "not base64!", "signature": None}]), "handover.sums.sealed"),
    (lambda h: dict(h, sums=[{**h["sums"][0], "signature": "not base64!"}]), "handover.sums.signature"),
    (lambda h: dict(h, sums=[{"helper": 0, "sealed": ""}]), "handover.sums must be"),
    (lambda h: dict(h, roster="signed"), "handover.roster"),
    (lambda h: dict(h, sums=h["sums"] + h["sums"][:1]), "handover.sums.helper"),
    (lambda h: dict(h, senders="all"), "handover.senders"),
    (lambda h: {k: v for k, v in h.items() if k != "recovery"}, "handover must be"),
])
def test_s2_checks_every_field_of_a_handover(change, field):
    p = tss_prime()
    run = play(p, 11, silent1=(0,))
    data = change(run.handover.to_dict())
    with pytest.raises(ParameterError, match=field):
        SecondServer(p, MIN).check(Handover.from_dict(data))


def test_a_sum_that_does_not_decode_leaves_its_items_lost_not_wrong():
    p = tss_prime()
    run = play(p, 12)
    helper = sorted(run.sums)[0]
    raw = bytearray(run.sums[helper])
    raw[-1] = 0xFF  # the last element beyond the field
    released = SecondServer(p, MIN).release(run.handover, {**run.sums, helper: bytes(raw)}, run.recoveries)
    assert sorted(released.lost) == run.election.by_helper[helper] and released.table.malformed == 1
    assert released.counts.tolist() == run.truth()[released.table.items].tolist()


def message_cases(p):
    n, N = p.n_users, p.domain_size
    good = {REPORT_SET: encode(p, REPORT_SET, 3, FIRST, [0, 2]),
            SHARES: encode(p, SHARES, 3, 5, [1, 2], [4, 36]),
            SUMS: encode(p, SUMS, 3, SECOND, [0, 3], [1, 2], counts=[4, 5]),
            RECOVERY: encode(p, RECOVERY, 3, SECOND, [0, 0, 2], values=[5, 6, 7], helpers=[4, 6, 1])}
    return good, [
        (REPORT_SET, good[REPORT_SET][:-1], "message must be a report set message of"),
        (REPORT_SET, good[SHARES], "message must be a report set message, got shares"),
        (REPORT_SET, encode(p, REPORT_SET, 3, FIRST, [0, N]), "message.items must be items in"),
        (REPORT_SET, encode(p, REPORT_SET, 3, FIRST, [2, 0]), "message.items must be strictly ascending"),
        (REPORT_SET, encode(p, REPORT_SET, 3, FIRST, [1, 1]), "message.items must be strictly ascending"),
        (REPORT_SET, encode(p, REPORT_SET, 3, FIRST, [0]), "message.items must be alpha N = 2 items"),
        (REPORT_SET, encode(p, REPORT_SET, 3, SECOND, [0, 2]), "message.recipient must be S1, got S2"),
        (REPORT_SET, encode(p, REPORT_SET, n, FIRST, [0, 2]), "message.sender must be"),
        (SHARES, encode(p, SHARES, 3, 3, [1, 2], [4, 36]), "message.recipient must be another user than the sender"),
        (SHARES, encode(p, SHARES, 3, n, [1, 2], [4, 36]), "message.recipient must be"),
        (SHARES, encode(p, SHARES, 3, SECOND, [1, 2], [4, 36]), "message.recipient must be"),
        (SHARES, good[SHARES][:-1], "message must be a shares message of"),
        (SHARES, good[SHARES] + b"\0", "message must be a shares message of"),
        (SHARES, good[SHARES][:-1] + bytes([p.modulus]),
         f"message.values must be field elements below p = {p.modulus}"),
        (SUMS, good[SUMS].replace(b"PVT", b"PVS", 1), "message must be version 1"),
        (SUMS, encode(p, SUMS, 3, FIRST, [0, 3], [1, 2], counts=[4, 5]), "message.recipient must be S2, got S1"),
        (SUMS, encode(p, SUMS, 3, SECOND, [0, 3], [1, 2], counts=[4, n + 1]), "message.counts must be counts"),
        (RECOVERY, encode(p, RECOVERY, 3, SECOND, [0, 0], values=[5, 6], helpers=[6, 4]), "pairs strictly ascending"),
        (RECOVERY, encode(p, RECOVERY, 3, SECOND, [0, 0], values=[5, 6], helpers=[4, n]),
         "message.helpers must be users"),
    ]


def test_every_decode_check_names_its_field():
    p = tss_prime()
    good, bad = message_cases(p)
    for kind, raw in good.items():
        assert decode(p, raw, kind).kind == kind
    for kind, raw, error in bad:
        with pytest.raises(ParameterError, match=error):
            decode(p, raw, kind)
    with pytest.raises(ParameterError, match="message.sender must be user 4, got 3"):
        decode(p, good[SHARES], SHARES, sender=4)
    with pytest.raises(ParameterError, match="message.recipient must be user 6, got 5"):
        decode(p, good[SHARES], SHARES, recipient=6)
    with pytest.raises(ParameterError, match=r"message.items must be the items \[1, 3\]"):
        decode(p, good[SHARES], SHARES, items=[1, 3])
    with pytest.raises(ParameterError, match="message must be a privagg TSS message of at least"):
        decode(p, b"PVT", SUMS)


def test_a_helper_checks_what_he_is_sent():
    p = tss_prime()
    run = play(p, 13)
    helper, items = sorted(run.election.by_helper.items())[0]
    reporters = {j: run.reporters[j] for j in items}
    senders = sorted({i for j in items for i in reporters[j]} - {helper})
    done = run.users[helper].state.to_bytes()  # after his round 3
    fresh = lambda: TSSUser(p, helper, MIN, state=UserState.from_bytes(done))  # noqa: E731
    resumed = UserState.from_bytes(run.users[helper].state.to_bytes())
    resumed.answered.remove(3)  # before his round 3
    again = lambda: TSSUser(p, helper, MIN, state=UserState.from_bytes(resumed.to_bytes()))  # noqa: E731
    inbox = {i: encode(p, SHARES, i, helper, [j for j in items if i in reporters[j]],
                       [1] * len([j for j in items if i in reporters[j]])) for i in senders}
    r2 = list(survivors_bitmap(run.survivors, N_USERS))
    assert decode(p, again().sums(reporters, inbox, r2).message, SUMS, helper).items.tolist() == items
    with pytest.raises(ParameterError, match="round-2 shares must be one message from each listed reporter"):
        again().sums(reporters, {i: m for i, m in inbox.items() if i != senders[0]}, r2)
    with pytest.raises(ParameterError, match="message.sender"):
        again().sums(reporters, {**inbox, senders[0]: inbox[senders[1]]}, r2)
    with pytest.raises(ParameterError, match="each round is answered once"):
        fresh().sums(reporters, inbox, r2)


@pytest.mark.parametrize("least", [MIN, N_USERS], ids=["6-may-drop", "none-may-drop"])
def test_a_helper_refuses_lists_that_leave_out_more_reporters_than_may_have_dropped(least):
    """A reviewer's attack on the helpers' sums: S1 lists one reporter of an item to every helper (relaying only
    his shares), so that their sums, which S2 opens, add up to his entry. A helper's lists must be within R2 (shown
    to him; at least min_survivors users) and hold at least m_j - (|R1| - |R2|) of the item's m_j reporters in S2's
    attested election: one of about 16 is refused, and so is m_j - 1 with nobody dropped out, at either minimum (a
    second reviewer's attack: min_survivors below n let S1 leave one reporter of each item out with nobody
    dropped), while m_j - 6 are taken when 6 users of R1 are not in R2. Lists of other items than the election has
    him help with, or naming a user outside R2, are refused, and so is an R2 below the minimum; a helper who missed
    round 2 checks the election his inbox carries, and refuses without one."""
    p = tss_prime()
    run = play(p, 13, min_survivors=least)
    attestation = as_inbox(run.election, *SecondServer(p, least, identity=S2_KEY).attest(run.election))
    helper, items = max(run.election.by_helper.items(), key=lambda e: len(e[1]))
    resumed = UserState.from_bytes(run.users[helper].state.to_bytes())
    resumed.answered.remove(3)  # before his round 3
    again = lambda: TSSUser(p, helper, least, state=UserState.from_bytes(resumed.to_bytes()))  # noqa: E731

    def shown(keep, out=()):  # each item's listed reporters, their messages to him, R2 (less ``out``)
        lists = {j: keep(j, [i for i in run.reporters[j] if i not in out]) for j in items}
        senders = sorted({i for j in items for i in lists[j]} - {helper})
        return lists, {i: encode(p, SHARES, i, helper, [j for j in items if i in lists[j]],
                                 [1] * len([j for j in items if i in lists[j]])) for i in senders}, list(
            survivors_bitmap([u for u in run.survivors if u not in out], N_USERS))

    j0 = items[0]
    m = run.election.counts[j0]
    assert resumed.served == {j: run.election.counts[j] for j in items} and resumed.senders == N_USERS and m >= 10
    assert again().sums(*shown(lambda j, r: r)).message  # the honest lists
    one = shown(lambda j, r: r[:1] if j == j0 else r)
    with pytest.raises(ParameterError, match=rf"reporters of item {j0} must be between m_j - \(\|R1\| - \|R2\|\) "
                       rf"= {m} - 0 and m_j = {m} of its reporters.*got 1"):
        again().sums(*one)
    with pytest.raises(ParameterError, match=rf"reporters of item {j0} must be between .* got {m - 1}"):
        again().sums(*shown(lambda j, r: r[:m - 1] if j == j0 else r))  # one left out, nobody dropped
    dropped = [i for i in run.reporters[j0] if i != helper][:N_USERS - least]  # R2 without them: R1 less 6
    if least < N_USERS:
        assert again().sums(*shown(lambda j, r: r, dropped)).message
        lists, messages, _ = shown(lambda j, r: r, dropped[1:])
        with pytest.raises(ParameterError, match=rf"reporters of item \d must be users of R2, got \[{dropped[0]}\]"):
            again().sums({j: sorted({*lists[j], dropped[0]}) if j == j0 else lists[j] for j in items}, messages,
                         shown(lambda j, r: r, dropped)[2])
    else:
        with pytest.raises(ParameterError, match=rf"survivors must be R2 of at least min_survivors = {N_USERS}"):
            again().sums(*shown(lambda j, r: r, run.reporters[j0][:1]))
    with pytest.raises(ParameterError, match=r"items helped must be the items S2's attested election has user"):
        again().sums({j: run.reporters[j] for j in items[1:]}, *shown(lambda j, r: r)[1:])
    if least < N_USERS:  # he sent no shares in round 2, so he is not in R2 (nor listed), and holds no election
        missed = lambda: TSSUser(p, helper, least, state=UserState(helper, [1], resumed.items,  # noqa: E731
                                                                    resumed.entries))
        without = shown(lambda j, r: r, [helper])
        with pytest.raises(ParameterError, match="election must be S2's attested election in his round-3 inbox"):
            missed().sums(*without)
        assert missed().sums(*without, **attestation).message
        with pytest.raises(ParameterError, match="must be between"):
            missed().sums(*shown(lambda j, r: r[:1] if j == j0 else r, [helper]), **attestation)
    older = {k: v for k, v in json.loads(resumed.to_bytes()).items() if k not in ("senders", "served")}
    saved = lambda: TSSUser(p, helper, least, state=UserState.from_bytes(json.dumps(older).encode()))  # noqa: E731
    with pytest.raises(ParameterError, match="election must be .* or an older release saved his state"):
        saved().sums(*shown(lambda j, r: r))  # a state an older release saved: he checks the inbox's election
    assert saved().sums(*shown(lambda j, r: r), **attestation).message


def test_the_floor_on_the_m_j_holds_for_honest_elections_and_refuses_an_s1_claiming_fewer():
    """A reviewer's attack on the helpers' check: the m_j are S1's word, so S1 had S2 attest m_j = 1 for an item
    (the others' m_j raised to add up), listed one reporter to its helper, who took the list (1 of m_j = 1), and S2
    released that reporter's entry as the item's count. In the uniform stage m_j ~ Bin(|R1|, alpha): every party
    now refuses an election with an m_j below the floor (the largest that an honest one breaks with probability at
    most 1e-9, N binomial lower tails: checked here against scipy's), so the helpers' lists hold at least that less
    the users who may have missed round 2. The adaptive stage has no floor (its m_j move with the data)."""
    from scipy.stats import binom

    from privagg.protocols.two_server_election import ELECTION_FAILURE, check_attested, least_reporters

    for senders in (10, 32, 100, 200, 1000, 10**4, 10**6):
        for alpha, N in ((0.5, 4), (0.1, 10), (0.01, 100), (0.25, 2**10)):
            stage = dataclasses.make_dataclass("P", ["second_stage", "report_fraction", "domain_size"])(
                "uniform", alpha, N)
            least = least_reporters(stage, senders)
            assert N * binom.cdf(least - 1, senders, alpha) <= ELECTION_FAILURE  # honest: refused at most so often
            assert N * binom.cdf(least, senders, alpha) > ELECTION_FAILURE  # and the largest floor that is
            assert least_reporters(dataclasses.replace(stage, second_stage="adaptive"), senders) == 0
            assert least_reporters(dataclasses.replace(stage, report_fraction=1.0), senders) == senders
    assert least_reporters(stage, 10**6) > 0.98 * 10**6 * 0.25  # not vacuous at scale (mu - 7 sd)
    n = 200
    p = calibrate_tss(1.0, 0.1, n, DOMAIN, min_count_fraction=0.2, report_fraction=0.5, honest_fraction=0.9,
                      sampling_probability=0.6)
    least = least_reporters(p, n)
    assert least == 57
    rng = np.random.default_rng(31)
    s1 = FirstServer(p, n)
    honest = s1.elect({i: s1.check_report_set(TSSUser(p, i, n, rng=rng).report(i % DOMAIN).message, i)
                       for i in range(n)}, rng)
    second = SecondServer(p, n, identity=S2_KEY)
    assert second.attest(honest)

    def claiming(m0):  # item 0's m_j claimed m0, item 1's raised to keep the sum, their helpers drawn to match
        counts = (m0, honest.counts[1] + honest.counts[0] - m0, *honest.counts[2:])
        return Election(honest.senders, counts, (honest.senders[:m0], honest.senders[-counts[1]:], *honest.helpers[2:]))

    assert second.attest(claiming(least))
    lie = claiming(least - 1)
    with pytest.raises(ParameterError, match=rf"election.counts must be m_j of at least {least} each"):
        second.attest(lie)
    signed = as_inbox(lie, identity.sign(S2_KEY, CONTEXT, lie.document(p)), identity.public_key(S2_KEY))
    with pytest.raises(ParameterError, match=rf"election.counts must be m_j of at least {least} each"):
        check_attested(p, signed["election"], signed["attestation"], signed["second"], n)  # as every reporter does


def test_the_state_resumes_a_user_between_rounds():
    p = tss_prime()
    a = TSSUser(p, 2, MIN, rng=np.random.default_rng(14))
    report = a.report(1).message
    b = TSSUser(p, 2, MIN, rng=np.random.default_rng(15), state=UserState.from_bytes(a.state.to_bytes()))
    assert b.state == a.state and decode(p, report, REPORT_SET, 2).items.tolist() == a.state.items
    others = {i: TSSUser(p, i, MIN, rng=np.random.default_rng(i)).report(0).message for i in range(N_USERS) if i != 2}
    s1 = FirstServer(p, MIN)
    election = s1.elect({i: s1.check_report_set(m, i) for i, m in {**others, 2: report}.items()},
                        np.random.default_rng(3))
    shares = b.share(**attested(p, election)).relayed
    assert sorted(shares) == sorted(set().union(*(election.helpers[j] for j in a.state.items)) - {2})
    assert all(sum(s) % p.modulus == e for s, e in zip(b.state.shares.values(), b.state.entries))
    with pytest.raises(ParameterError, match="user state must be a state written by UserState.to_bytes"):
        UserState.from_bytes(b"{}")
    with pytest.raises(ParameterError, match="user state must be the state of user 3"):
        TSSUser(p, 3, MIN, state=b.state)
    with pytest.raises(ParameterError, match="each round is answered once"):
        b.share(**attested(p, election))


def test_min_survivors_is_checked():
    p = tss_prime()
    assert check_min_survivors(p, MIN) == MIN
    for bad in (2, N_USERS + 1, 1.5):
        with pytest.raises(ParameterError, match="min_survivors"):
            check_min_survivors(p, bad)
    dpds = calibrate_dpds(1.0, 0.1, N_USERS, DOMAIN, min_count_fraction=0.2)
    with pytest.raises(ParameterError, match="protocol must be tss or tss-collusion"):
        check_min_survivors(dpds, MIN)


def test_the_parties_are_the_roles_declared_for_the_protocol():
    from privagg.protocols.roles import Coordinator, RoundUser
    from privagg.protocols.two_server_parties import PROTOCOL

    p = tss_prime()
    assert isinstance(TSSUser(p, 0, MIN), RoundUser) and isinstance(FirstServer(p, MIN), Coordinator)
    assert [r.name for r in PROTOCOL.rounds] == ["report", "share", "sums", "recover"]
    assert all(callable(getattr(TSSUser, r.name)) for r in PROTOCOL.rounds)


def test_s1_elects_uniformly_among_r1_without_replacement():
    p = tss_prime()
    s1, rng = FirstServer(p, MIN), np.random.default_rng(16)
    senders = [i for i in range(N_USERS) if i not in (1, 4, 9)]
    sets = {i: np.array([0, 1]) if i % 2 else np.array([2, 3]) for i in senders}  # m = 14 or 15; phi + 1 = 3
    runs, chosen = 2000, np.zeros(N_USERS, dtype=np.int64)
    for _ in range(runs):
        election = s1.elect(sets, rng)
        assert election.counts == (14, 14, 15, 15) and [len(h) for h in election.helpers] == [14, 14, 15, 15]
        assert all(len(set(h)) == len(h) and set(h) <= set(senders) for h in election.helpers)
        chosen[list(election.helpers[0])] += 1
    assert chosen[[1, 4, 9]].sum() == 0
    rate = 14 / len(senders)  # each of R1 elected for item 0 with probability m_0 / |R1|
    low, high = binom.ppf(1e-6, runs, rate), binom.isf(1e-6, runs, rate)
    assert all(low <= c <= high for c in chosen[senders])
    with pytest.raises(ParameterError, match="round-1 senders must be at least 26"):
        s1.elect({i: sets[i] for i in senders[:20]}, rng)


def one_helper(election: Election, helper: int, counts=None) -> Election:
    """S1's lie of issue 46: ``helper`` the only helper of every item (with its true m_j, or ``counts``)."""
    return Election(election.senders, election.counts if counts is None else counts,
                    tuple((helper,) for _ in election.helpers))


@pytest.mark.parametrize("make", [tss, tss_prime], ids=["tss", "tss-collusion"])
def test_s2_attests_only_an_election_that_keeps_the_rules(make):
    """S2 refuses to attest one helper for every item, whether S1 states the true m_j or m_j = 1 (they no longer add
    up to |R1| alpha N), helpers outside R1, twice the same helper, or fewer than the task's minimum in R1."""
    p = make()
    election = play(p, 20).election
    s2 = SecondServer(p, MIN, identity=S2_KEY)
    signature, key = s2.attest(election)
    assert identity.verify(key, signature, b"privagg tss election", election.document(p))
    lies = [(one_helper(election, 5), r"election.helpers\[0\] must be max\(m_j, phi \+ 1\)"),
            (one_helper(election, 5, (1,) * DOMAIN), "election.counts must be m_j of at most"),
            (dataclasses.replace(election, senders=election.senders[1:]), "election"),
            (dataclasses.replace(election, helpers=((election.helpers[0][0],) * len(election.helpers[0]),)
                                 + election.helpers[1:]), r"election.helpers\[0\]")]
    for lie, message in lies:
        with pytest.raises(ParameterError, match=message):
            s2.attest(lie)
    with pytest.raises(ParameterError, match="identity must be S2's identity key"):
        SecondServer(p, MIN).attest(election)


def test_a_reporter_shares_only_along_an_election_s2_attested():
    """A reporter refuses (nothing to send) an election signed by another key (S1's own), a signature of another
    election, one that S2's key signed but breaks the rules (S1 cannot get it), one without him in R1, none, or
    S1's key where his own (the task's) is pinned; the honest one he shares along."""
    p = tss()
    run = play(p, 21)
    election = run.election
    reporter = lambda: TSSUser(p, 0, MIN, state=UserState.from_bytes(state))  # noqa: E731
    state = UserState(0, [1], list(run.users[0].state.items), list(run.users[0].state.entries)).to_bytes()
    lie = one_helper(election, 5)
    forged = as_inbox(lie, identity.sign(S2_KEY, b"privagg tss election", lie.document(p)), identity.public_key(S2_KEY))
    cases = [(attested(p, election, key=bytes(32)), {"second": list(identity.public_key(S2_KEY))},
              "attestation must be a valid Ed25519 signature by S2"),
             ({**attested(p, election), "attestation": attested(p, election, bytes(32))["attestation"]}, {},
              "attestation must be a valid"),
             ({**attested(p, election), "election": attested(p, election)["election"][:2] + [[[5]] * DOMAIN]}, {},
              "attestation must be a valid"),
             (forged, {}, r"election.helpers\[0\] must be max\(m_j, phi \+ 1\)"),
             ({**attested(p, election), "second": [1] * 31}, {}, "second must be 32 bytes")]
    for inbox, change, message in cases:
        with pytest.raises(ParameterError, match=message):
            reporter().share(**{**inbox, **change})
    sets = {i: run.sets[i] for i in run.sets}
    s1 = FirstServer(p, MIN)
    no_zero = s1.elect({i: s for i, s in sets.items() if i != 0}, np.random.default_rng(1))
    with pytest.raises(ParameterError, match="election.senders must be R1 with user 0"):
        reporter().share(**attested(p, no_zero))
    with pytest.raises(ParameterError, match="second must be S2's identity key"):
        reporter().share(**{k: v for k, v in attested(p, election).items() if k != "second"})
    pinned = TSSUser(p, 0, MIN, state=UserState.from_bytes(state), second=identity.public_key(bytes(32)))
    with pytest.raises(ParameterError, match="attestation must be a valid"):  # his key from the task, not S1's
        pinned.share(**attested(p, election))
    assert reporter().share(**attested(p, election)).relayed


@pytest.mark.parametrize("make", [tss, tss_prime], ids=["tss", "tss-collusion"])
def test_a_helper_whose_sum_does_not_open_is_recovered_as_dropped(make):
    """A sum S2 cannot read (another helper's, garbage) makes S1 treat its helper as dropped: his items are
    recovered and the release is exact over R2, naming him."""
    p = make()
    run = play(p, 22, garbled=(sorted(play(p, 22).election.by_helper)[0],))
    released = release(run)
    helper = run.handover.unopened[0]
    assert run.handover.unopened == (helper,) and helper not in run.handover.sums
    assert not released.lost and sorted(released.recovered) == run.election.by_helper[helper]
    assert released.counts.tolist() == run.truth().tolist() and released.unopened == (helper,)


def test_a_count_outside_its_reporters_is_refused_not_released():
    """A helper's sum moved so that its item's count leaves [0, |R_j|] (e.g. a sum of garbage): that item is not
    released, blaming nobody; the others are, exactly. +7 inside the range is not detectable (the trust says so)."""
    p = tss_prime()
    run = play(p, 23)
    helper, items = sorted(run.election.by_helper.items())[0]
    message = decode(p, run.sums[helper], SUMS, helper)
    shifted = lambda k: encode(p, SUMS, helper, SECOND, message.items, [  # noqa: E731
        (int(v) + (k if j == items[0] else 0)) % p.modulus for j, v in zip(message.items, message.values)],
        counts=message.counts)
    truth = run.truth()
    outside = release(dataclasses.replace(run, sums={**run.sums, helper: shifted(run.reporters[items[0]].__len__()
                                                                                  - truth[items[0]] + 1)}))
    assert list(outside.lost) == [items[0]] and "outside [0," in outside.lost[items[0]]
    assert outside.counts.tolist() == np.delete(truth, items[0]).tolist()
    inside = release(dataclasses.replace(run, sums={**run.sums, helper: shifted(-truth[items[0]] % p.modulus)}))
    assert not inside.lost and inside.counts[items[0]] == 0  # undetected: the release trusts the helpers
    assert "integrity: trusted" in inside.trust["helpers"]
    assert any("integrity" in c for c in inside.privacy.caveats)


def test_a_reporter_s1_keeps_from_a_helper_is_refused_by_the_helper_and_his_items_recovered():
    """S1 counts reporter i in R2 for S2 but keeps him and his shares from one helper of his items (the helper
    would sum the others: i's entry would silently leave the counts). With nobody dropped out, that helper's list
    for i's items is short of m_j - (|R1| - |R2|) = m_j: he refuses it and sends no sum, so his items are recovered
    in round 4 and released exactly (before, he summed, and S2 refused the items when his count disagreed)."""
    p = tss_prime()
    honest = play(p, 24)
    helper, items = sorted(honest.election.by_helper.items())[0]
    reporter = next(i for i in honest.survivors if i != helper and set(honest.survivors[i]) & set(items))
    run = play(p, 24, hidden=(helper, reporter))
    assert helper not in run.sums and set(run.handover.recovery) == set(items)
    released = release(run)
    assert not released.lost and released.counts.tolist() == run.truth().tolist()


def test_what_s2_cannot_check_s1_misstating_m_j():
    """The residual of docs/privacy.md, "Dishonest parties": S2 sees m_j only from S1, so an S1 that misstates them (adding up
    to |R1| alpha N, each at most |R1|) gets one helper attested for up to N - alpha N items in TSS (phi = 0, the
    paper's assumption that no user colludes). S2 then refuses the hand-over if an item has more R2 reporters
    than the m_j it attested, or fewer than m_j less the users who missed round 2 (here item 0's 12 of m_j = 32;
    without dropouts the hand-over's counts must then be the m_j); an m_j above |R1| it refuses to attest at all."""
    p = tss()
    run = play(p, 25)
    senders, R1 = run.election.senders, len(run.election.senders)
    counts = (R1, R1 * p.report_size - R1 - 2, 1, 1)
    helpers = tuple(tuple(senders[:c]) for c in counts[:2]) + ((senders[5],), (senders[5],))
    lie = Election(senders, counts, helpers)
    assert SecondServer(p, MIN, identity=S2_KEY).attest(lie)  # attested: the m_j are S1's word
    assert run.handover.reporters[0] == 12 and run.handover.reporters[2] > 1
    with pytest.raises(ParameterError, match=r"handover.reporters\[0\] must be at most .* at least m_j - "
                       r"\(\|R1\| - \|R2\|\) = 32 .*got 12"):
        SecondServer(p, MIN).check(dataclasses.replace(run.handover, counts=counts, helpers=helpers, recovery={}))
    with pytest.raises(ParameterError, match="election.counts must be m_j of at most"):
        SecondServer(p, MIN, identity=S2_KEY).attest(Election(senders, (R1 + 1, R1 - 3, 1, 1), helpers))


def test_the_field_is_made_and_checked_prime_once_per_modulus():
    """A user's every share encoded or decoded asks the parameters for their field: it is made (and its modulus
    tested prime) once, not on each call (2.5% of the users' CPU in TSS's rounds at n = 1,000 before)."""
    p = calibrate_tss(1.0, 0.1, 40, 4, min_count_fraction=0.2, report_fraction=0.5)
    assert p.field is p.field and p.field is dataclasses.replace(p).field
