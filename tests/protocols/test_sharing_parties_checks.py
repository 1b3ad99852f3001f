"""The checks a DPDS user's round makes once where it made them twice (issue 47's users near the floor): each attack
the dropped copy guarded is still refused, by the check that remains."""

import numpy as np
import pytest

from privagg.core import identity
from privagg.errors import ParameterError
from privagg.protocols import sampling_calibration as sc
from privagg.protocols.sharing_messages import ADVERTISE, COMPLAINTS, SERVER, SIGNATURE, encode
from privagg.protocols.sharing_parties import SharingUser, masked_sums
from privagg.protocols.sharing_server import ROUNDS, SharingServer

N_USERS, DOMAIN, T = 12, 3, 7


def _checked_users():
    """Rounds 1 and 2 of 12 users in process: (the users, U1''s key messages as round 3 gives them)."""
    p = sc.calibrate_dpds(1.0, 1e-3, N_USERS, DOMAIN, min_count_fraction=0.25)
    rng = np.random.default_rng(5)
    users = [SharingUser(p, i, T, rng=rng, identity=identity.generate(rng)) for i in range(N_USERS)]
    server = SharingServer(p, T)
    outbox = {u.index: u.advertise(u.index % DOMAIN) for u in users}
    messages = {"advertise": {i: m for i, (m, _) in outbox.items()}}
    state = {"senders": sorted(outbox)}
    messages["check"] = {k: users[k].check(**server.inbox(ROUNDS[1], k, state, messages), backups={
        i: outbox[i][1][k] for i in outbox if i != k}).message for k in outbox}
    state = server.close(ROUNDS[1], sorted(outbox), state, messages)
    return p, users, server.inbox(ROUNDS[2], 0, state, messages)["keys"]


def test_a_pair_key_of_low_order_is_refused_by_the_agreement_alone_and_in_a_batch():
    """Round 3 decodes U1''s keys without the separate low-order check (an X25519 agreement with a zero key) because
    the pair's own agreement refuses such a key: a server (or a dealer it let through) that shows a key of low order,
    whose agreement would be all zeros and its pair's shares public, is refused with the same error, alone and in a
    batch, before anything is sent."""
    p, users, keys = _checked_users()
    low = encode(p, ADVERTISE, 4, SERVER, bytes(64)) + encode(p, COMPLAINTS, 4, SERVER, [])
    shown = {**keys, 4: low}
    with pytest.raises(ParameterError, match="low order"):
        users[0].masked_sum(shown)
    assert users[0].state.answered == 2  # nothing answered: he may still mask with the true keys
    with pytest.raises(ParameterError, match="low order"):
        masked_sums(users[:3], [shown] * 3)
    assert len(users[0].masked_sum(keys).message) > 0


def _signed_round():
    """Rounds 1-4 of 12 users, none dropping out: (the users, U1', U2, the round-4 messages, their identity keys)."""
    p, users, keys = _checked_users()
    masked = {u.index: u.masked_sum(keys) for u in users}
    lists = sorted(keys), sorted(masked)
    signatures = {u.index: u.consistency(*lists).message for u in users}
    return users, lists, signatures, {u.index: identity.public_key(u.identity) for u in users}


def test_round_5_counts_only_signatures_that_verify_under_the_rosters_key_as_the_lists_he_signed():
    """His device no longer checks each round-4 message's transport signature (the reveal round signs no field): the
    message is his signer's signature of the lists, which the role checks under the signer's key in the signed
    roster, and any message that passes that check is byte for byte the one its signer sent (the header fixed by
    decode, Ed25519 signatures not malleable). The attacks the transport check refused are still refused: a signature
    the server forged (a key of its own, or the lists of another group) is not counted, and with fewer than t left
    nothing is revealed; another signer's message replayed under v's name is refused; with t valid he reveals."""
    users, lists, signatures, identities = _signed_round()
    me, p = users[0], users[0].parameters
    forger = identity.generate(np.random.default_rng(9))
    forged = {v: encode(p, SIGNATURE, v, SERVER, identity.sign(forger, b"privagg survivors", b"other lists"))
              for v in signatures}
    few = {**forged, **{v: signatures[v] for v in range(T - 1)}}  # t - 1 valid, the rest forged
    with pytest.raises(ParameterError, match="fewer for users"):
        me.reveal(*lists, signatures=few, identities=identities)
    assert me.state.answered == 4  # nothing revealed
    with pytest.raises(ParameterError, match="message.sender"):
        me.reveal(*lists, signatures={**signatures, 3: signatures[4]}, identities=identities)
    assert me.state.answered == 4
    enough = {**forged, **{v: signatures[v] for v in range(T)}}
    assert len(me.reveal(*lists, signatures=enough, identities=identities).message) > 0
