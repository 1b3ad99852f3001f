"""DPDS and DPDG's messages on the wire (:mod:`privagg.protocols.sharing_parties` has the parties and the rounds):
their kinds, the header, encoding and checked decoding, their sizes, and the commitments a dealer makes to the
Shamir shares he backs up (docs/privacy.md, "Dishonest parties in DPDS and DPDG")."""

from __future__ import annotations

import hashlib
import struct
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from ..core import shamir
from ..core.identity import KEY_BYTES as IDENTITY_BYTES, SIGNATURE_BYTES
from ..core.sharing import SEED_BYTES, element_bytes, pack_elements, unpack_elements
from ..errors import ParameterError
from .sampling_sharing import SharingParameters

MAGIC, VERSION = b"PVS", 4  # 4: the exclusion round's OPENINGS and PAIR_SEEDS (issue 46)
# message kinds: round 2's pair key (followed by his COMPLAINTS), round 1's backup, round 3's masked sum, round 5's
# revealed shares; round 1's commitments to each user's shares, the commitments to one recipient's shares (the
# server's copy for him, round 2), a signature of the survivor lists (round 4); the openings that prove a dealer
# inconsistent (the server's, in round 6's inbox: t holders' shares of one of his secrets, its sender field naming
# him) and a survivor's pair seeds with each dealer so proven (round 6); a list of users the server publishes, as a
# bitmap of n bits (U1' and U2 in rounds 4-5 on a neighbour graph; its sender field is SERVER)
(ADVERTISE, BACKUP, MASKED_SUM, REVEAL, COMMITMENTS, COMMITMENT, COMPLAINTS, SIGNATURE, OPENINGS,
 PAIR_SEEDS, USERS) = range(1, 12)
KIND_NAMES = {ADVERTISE: "pair key", BACKUP: "backup", MASKED_SUM: "masked sum", REVEAL: "revealed shares",
              COMMITMENTS: "commitments", COMMITMENT: "commitment", COMPLAINTS: "complaints", SIGNATURE: "signature",
              OPENINGS: "openings", PAIR_SEEDS: "pair seeds", USERS: "users"}
SERVER = 0xFFFFFFFF  # the recipient field of a message to the server
HEADER = struct.Struct("<3sBBIII")  # magic, version, kind, sender, recipient, payload count
KEY_BYTES = 32  # an X25519 public key; the round-1 message to the server is one and a mask seed's hash
HASH_BYTES = 32  # a commitment to one secret's share
LIMBS = SEED_BYTES // 2  # Shamir limbs of one 32-byte secret (core/shamir.py)
PAIR_KEY, MASK_SEED = 0, 1  # the two backed-up secrets, in a backup's order and in a revealed entry's tag
ENTRY = struct.Struct("<IB")  # a revealed entry's owner (an opening's holder) and secret, then LIMBS shares
SEEDS = struct.Struct(f"<I{2 * SEED_BYTES}s")  # a pair seeds entry: the dealer, then the two directions' seeds
INDEX = np.dtype("<u4")  # a user on the wire (a complaint)
KEY_MESSAGE = HEADER.size + 2 * KEY_BYTES  # a round-2 message's first part, the key message


@dataclass(frozen=True)
class Revealed:
    """A round-5 message's entries: for each owner, which of his secrets (:data:`PAIR_KEY` or :data:`MASK_SEED`)
    and the sender's Shamir shares of it (LIMBS elements). An OPENINGS message's entries are the same with the
    holders in the owners' place: each holder's shares of its sender's secret."""

    owners: np.ndarray
    secrets: np.ndarray
    shares: np.ndarray  # (entries, LIMBS)


@dataclass(frozen=True)
class Message:
    """One decoded message: its kind, sender, recipient (:data:`SERVER` for the server) and payload (a public key
    and a mask seed's hash, 2 x 32 bytes; a backup's 2 x LIMBS Shamir shares; N field elements;
    :class:`Revealed` (revealed shares, openings); n x 2 commitments, or one recipient's 2, of 32 bytes each; the
    users complained about, ascending; a signature's 64 bytes; pair seeds: dealer -> the seeds of s_sender,dealer
    and of s_dealer,sender, 32 bytes each)."""

    kind: int
    sender: int
    recipient: int
    payload: bytes | np.ndarray | Revealed | dict[int, bytes]


def holders(parameters: SharingParameters) -> int:
    """The holders of each user's secrets: his k neighbours and himself (``parameters.degree``), or all n users on the
    complete graph (degree None: Bonawitz et al.'s, the paper's n-of-n sharing)."""
    return parameters.n_users if parameters.degree is None else parameters.degree + 1


def bitmap(users: Sequence[int], n_users: int) -> bytes:
    """The users as n bits (user u: bit u % 8 of byte u // 8)."""
    bits = np.zeros(n_users, dtype=bool)
    bits[np.asarray(users, dtype=np.int64)] = True
    return np.packbits(bits, bitorder="little").tobytes()


def _count_and_body(parameters: SharingParameters, kind: int, payload) -> tuple[int, bytes]:
    if kind == USERS:
        return parameters.n_users, bitmap(payload, parameters.n_users)
    if kind == ADVERTISE:
        return 2 * KEY_BYTES, bytes(payload)
    if kind == BACKUP:
        return 2, shamir.pack(payload)
    if kind == MASKED_SUM:
        return parameters.domain_size, pack_elements(parameters.field, payload)
    if kind in (COMMITMENTS, COMMITMENT, SIGNATURE):
        return {COMMITMENTS: holders(parameters), COMMITMENT: 2, SIGNATURE: 1}[kind], bytes(payload)
    if kind == COMPLAINTS:
        return len(payload), np.asarray(payload, dtype=np.int64).astype(INDEX).tobytes()
    if kind == PAIR_SEEDS:
        return len(payload), b"".join(SEEDS.pack(int(u), bytes(seeds)) for u, seeds in sorted(payload.items()))
    entries = b"".join(ENTRY.pack(int(o), int(s)) + shamir.pack(row)
                       for o, s, row in zip(payload.owners, payload.secrets, payload.shares))
    return len(payload.owners), entries


def encode(parameters: SharingParameters, kind: int, sender: int, recipient: int, payload) -> bytes:
    """A message's bytes: :data:`HEADER` (its count: the key's and hash's bytes, 2 backed-up secrets, N elements,
    the revealed entries or openings, n dealt or 2 received commitments, the complaints, 1 signature, the pair
    seeds' dealers), then the payload."""
    count, body = _count_and_body(parameters, kind, payload)
    return HEADER.pack(MAGIC, VERSION, kind, sender, recipient, count) + body


def _check_public_key(raw: bytes) -> bytes:
    """``raw`` if it is an X25519 public key whose shared secrets are not all zero (not of low order)."""
    from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey, X25519PublicKey

    try:
        X25519PrivateKey.from_private_bytes(bytes(32)).exchange(X25519PublicKey.from_public_bytes(raw))
    except ValueError:
        raise low_order() from None
    return raw


def low_order() -> ParameterError:
    """The refusal of an X25519 public key of low order (all its shared secrets zero)."""
    return ParameterError("message", "an X25519 public key of large order", "a key of low order")


def _fixed(body: bytes, count: int, expected_count: int, size: int, what: str) -> bytes:
    if count != expected_count or len(body) != size:
        raise ParameterError("message", what, f"{len(body)} bytes for {count} entries")
    return body


def decode(parameters: SharingParameters, raw: bytes, kinds: Sequence[int], sender: int | None = None,
           recipient: int | None = None, agreed: bool = False) -> Message:
    """The message in ``raw``, every field checked: the magic and version, a kind among ``kinds``, the sender and
    recipient among the n users (and equal to ``sender`` / ``recipient`` when given), no one sending to himself,
    exactly the payload's length, every element in its field, a public key not of low order, revealed owners
    among the n users and each once (an opening's holders), complaints about other users, ascending, pair seeds with
    other users, ascending. A ParameterError (field ``message``) names what is wrong. ``agreed``: the caller agrees
    a secret with the key at once (:meth:`~privagg.protocols.sharing_parties.PairShares.seeds`, which refuses a key
    of low order with the same error), so its order is not checked twice (the check is an X25519 agreement)."""
    if not isinstance(raw, (bytes, bytearray)) or len(raw) < HEADER.size:
        raise ParameterError("message", f"a privagg sharing message of at least {HEADER.size} bytes",
                             f"{len(raw)} bytes" if isinstance(raw, (bytes, bytearray)) else type(raw).__name__)
    magic, version, kind, source, target, count = HEADER.unpack_from(raw)
    n, expected = parameters.n_users, [KIND_NAMES.get(k, str(k)) for k in kinds]
    if magic != MAGIC or version != VERSION:
        raise ParameterError("message", f"version {VERSION} of privagg's sharing messages", f"{magic!r} {version}")
    if kind not in kinds:
        raise ParameterError("message", f"a {' or '.join(expected)} message", KIND_NAMES.get(kind, f"kind {kind}"))
    if not (source < n or (kind == USERS and source == SERVER)) or (sender is not None and source != sender):
        raise ParameterError("message.sender", f"user {sender}" if sender is not None else f"a user in [0, {n})",
                             source)
    if (target != SERVER and not target < n) or (recipient is not None and target != recipient):
        raise ParameterError("message.recipient", "the server" if recipient == SERVER else
                             f"user {recipient}" if recipient is not None else f"a user in [0, {n})", target)
    if target == source:
        raise ParameterError("message.recipient", "another user than the sender", target)
    body = bytes(raw[HEADER.size:])
    if kind == ADVERTISE:
        body = _fixed(body, count, 2 * KEY_BYTES, 2 * KEY_BYTES, f"a public key and a hash of {KEY_BYTES} bytes each")
        return Message(kind, source, target, body if agreed else _check_public_key(body[:KEY_BYTES]) +
                       body[KEY_BYTES:])
    if kind in (COMMITMENTS, COMMITMENT, SIGNATURE):
        h = holders(parameters)
        pairs = f"n = {n} pairs of commitments" if h == n else f"k + 1 = {h} pairs of commitments (one per holder)"
        count_, size, what = {COMMITMENTS: (h, 2 * h * HASH_BYTES, pairs),
                              COMMITMENT: (2, 2 * HASH_BYTES, "a pair of commitments"),
                              SIGNATURE: (1, SIGNATURE_BYTES, f"a signature of {SIGNATURE_BYTES} bytes")}[kind]
        return Message(kind, source, target, _fixed(body, count, count_, size, what))
    if kind == COMPLAINTS:
        if count > n or len(body) != count * INDEX.itemsize:
            raise ParameterError("message", f"at most n = {n} complaints of {INDEX.itemsize} bytes",
                                 f"{len(body)} bytes for {count}")
        accused = np.frombuffer(body, dtype=INDEX).astype(np.int64)
        if count and (accused.max() >= n or np.any(np.diff(accused) <= 0) or source in accused):
            raise ParameterError("message", "complaints about other users of the task, ascending", accused[:5].tolist())
        return Message(kind, source, target, accused)
    if kind == PAIR_SEEDS:
        if count > n or len(body) != count * SEEDS.size:
            raise ParameterError("message", f"at most n = {n} pair seeds entries of {SEEDS.size} bytes",
                                 f"{len(body)} bytes for {count}")
        seeds = dict(SEEDS.iter_unpack(body))
        if len(seeds) != count or list(seeds) != sorted(seeds) or (count and (max(seeds) >= n or source in seeds)):
            raise ParameterError("message", "pair seeds with other users of the task, each once, ascending",
                                 list(seeds)[:5])
        return Message(kind, source, target, seeds)
    if kind == USERS:
        bits = np.unpackbits(np.frombuffer(_fixed(body, count, n, -(-n // 8), f"a bitmap of n = {n} users"),
                                           dtype=np.uint8), bitorder="little")
        if bits[n:].any():
            raise ParameterError("message", f"a bitmap of n = {n} users", "bits set past the last user")
        return Message(kind, source, target, np.flatnonzero(bits[:n]).tolist())
    if kind == BACKUP:
        if count != 2:
            raise ParameterError("message", "a backup of 2 secrets", count)
        return Message(kind, source, target, shamir.unpack(body, 2 * LIMBS, "message").reshape(2, LIMBS))
    if kind == MASKED_SUM:
        if count != parameters.domain_size:
            raise ParameterError("message", f"{parameters.domain_size} field elements (N)", count)
        return Message(kind, source, target, unpack_elements(parameters.field, body, count, "message"))
    width = ENTRY.size + LIMBS * shamir.SHARE_BYTES  # REVEAL, OPENINGS
    if count > n or len(body) != count * width:
        raise ParameterError("message", f"at most n = {n} revealed entries of {width} bytes", f"{len(body)} bytes "
                             f"for {count} entries")
    rows = np.frombuffer(body, dtype=np.uint8).reshape(count, width)
    owners = rows[:, :4].copy().view("<u4").ravel().astype(np.int64)
    tags = rows[:, 4].astype(np.int64)
    if count and (owners.max() >= n or np.unique(owners).size != count or tags.max() > MASK_SEED):
        raise ParameterError("message", "revealed entries for distinct users of the task, each of a pair key (0) or a "
                             "mask seed (1)", "an entry outside them")
    shares = shamir.unpack(rows[:, ENTRY.size:].tobytes(), count * LIMBS, "message").reshape(count, LIMBS)
    return Message(kind, source, target, Revealed(owners, tags, shares))


def decode_checked(parameters: SharingParameters, raw: bytes, sender: int) -> tuple[bytes, np.ndarray]:
    """A round-2 message to the server: the pair key message (his public key and mask seed's hash) followed by his
    complaints, both checked; (the key's and hash's 64 bytes, the users he complains about)."""
    key = decode(parameters, raw[:KEY_MESSAGE], (ADVERTISE,), sender, SERVER).payload
    return key, decode(parameters, raw[KEY_MESSAGE:], (COMPLAINTS,), sender, SERVER).payload


def commitment(dealer: int, recipient: int, secret: int, shares: np.ndarray) -> bytes:
    """H(dealer, recipient, secret, recipient's LIMBS shares of it): BLAKE2b-256 with its own person string. The
    task is bound by the round-1 message that carries it (signed by the dealer, his secrets fresh for the task)."""
    return packed_commitment(dealer, recipient, secret, shamir.pack(shares))


def packed_commitment(dealer: int, recipient: int, secret: int, packed: bytes) -> bytes:
    """:func:`commitment` of shares already packed (``shamir.pack``: a message's rows are packed at once)."""
    return hashlib.blake2b(struct.pack("<IIB", dealer, recipient, secret) + packed, digest_size=HASH_BYTES,
                           person=b"privagg backup").digest()


def committed_to(commitments: bytes, slot: int, secret: int) -> bytes:
    """The commitment to the shares of ``secret`` of the holder at ``slot`` among the dealer's holders (his place
    among them, ascending: the user's index on the complete graph), of the dealer's pairs."""
    start = (2 * slot + secret) * HASH_BYTES
    return commitments[start:start + HASH_BYTES]


def dealt_commitments(dealer: int, shares: np.ndarray, holders: Sequence[int] | None = None) -> bytes:
    """The commitments to each holder's shares (``shares``: holders x 2 x LIMBS; ``holders`` ascending, default
    every user: the complete graph), in holder then secret order."""
    holders = range(len(shares)) if holders is None else holders
    return b"".join(commitment(dealer, k, s, shares[slot, s]) for slot, k in enumerate(holders)
                    for s in (PAIR_KEY, MASK_SEED))


def commitments_to(commitments: bytes, slot: int) -> bytes:
    """The pair of commitments to the shares of the holder at ``slot`` among the dealer's holders."""
    return commitments[2 * HASH_BYTES * slot:2 * HASH_BYTES * (slot + 1)]


def message_bytes(parameters: SharingParameters, kind: int, entries: int = 0) -> int:
    """The length of one message of ``kind`` (``entries``: a round-5 message's revealed entries; openings;
    complaints; pair seeds)."""
    return HEADER.size + {ADVERTISE: 2 * KEY_BYTES, BACKUP: 2 * LIMBS * shamir.SHARE_BYTES,
                          MASKED_SUM: parameters.domain_size * element_bytes(parameters.field),
                          REVEAL: entries * (ENTRY.size + LIMBS * shamir.SHARE_BYTES),
                          OPENINGS: entries * (ENTRY.size + LIMBS * shamir.SHARE_BYTES),
                          PAIR_SEEDS: entries * SEEDS.size,
                          COMMITMENTS: 2 * holders(parameters) * HASH_BYTES, COMMITMENT: 2 * HASH_BYTES,
                          COMPLAINTS: entries * INDEX.itemsize, SIGNATURE: SIGNATURE_BYTES,
                          USERS: -(-parameters.n_users // 8)}[kind]


def message_entries(raw: bytes) -> tuple[str, int]:
    """What a well-formed message carries, from its header: its kind's name and its entries (a key counts one, the
    complaints that follow it in round 2 are not counted; a list of users one; a backup two secrets' shares; N field
    elements; a revealed share per user; n pairs of commitments, or two; one signature; an opening per holder; pair
    seeds per dealer). A user's identity key in an inbox (32 bytes, not a message's header) counts one; anything
    else that is no message (a liar's junk) counts one "unreadable". For traffic counts (``privagg demo-service``),
    not a check: :func:`decode` checks."""
    if len(raw) < HEADER.size or raw[:len(MAGIC)] != MAGIC or raw[len(MAGIC)] != VERSION or \
            raw[len(MAGIC) + 1] not in KIND_NAMES:
        return ("identity key", 1) if len(raw) == IDENTITY_BYTES else ("unreadable", 1)
    _, _, kind, _, _, count = HEADER.unpack_from(raw)
    return KIND_NAMES[kind], 1 if kind in (ADVERTISE, USERS) else count


def expected_traffic(parameters: SharingParameters, senders: int, checked: int | None = None,
                     signers: int | None = None) -> tuple[dict[str, int], dict[str, int]]:
    """The entries (:func:`message_entries`) a survivor sends and receives by kind when ``senders`` users (|U1|)
    advertised in round 1, ``checked`` (|U1'|, default |U1|) passed round 2 and ``signers`` (|U3|, default
    |U1'|) signed in round 4: his commitments (n pairs), a backup of 2 secrets to each of the n - 1 others, his
    key (and complaints), his masked sum (N), his signature and a revealed share per user of U1'; 2 commitments
    and a backup from each other sender (round 2), U1''s keys (round 3, his own among them), U3's signatures and
    identity keys (round 5)."""
    n, N = parameters.n_users, parameters.domain_size
    checked = senders if checked is None else checked
    signers = checked if signers is None else signers
    sent = {"commitments": n, "backup": 2 * (n - 1), "pair key": 1, "masked sum": N, "signature": 1,
            "revealed shares": checked}
    return sent, {"commitment": 2 * (senders - 1), "backup": 2 * (senders - 1), "pair key": checked,
                  "signature": signers, "identity key": signers}
