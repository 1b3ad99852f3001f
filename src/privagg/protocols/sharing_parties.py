"""DPDS and DPDG's parties: each user's rounds and the server's release, sans I/O, every message bytes. The one
implementation: the services (:mod:`privagg.service.sharing.server`) and the simulator (:mod:`privagg.simulate.rounds`)
run these roles from :data:`PROTOCOL`, the rounds as data (:data:`ROUNDS`).

Algorithm 2 (reference §2.3) has each user share his vector among all n users and send the sum of what he
received to the server. Over a network users vanish at any round, so the parties derive their shares by key
agreement and back their keys up with Shamir's threshold shares, as Bonawitz et al.'s secure aggregation does
(CCS 2017, §4). The derivation, and what each party learns in every dropout case, are in docs/privacy.md
("Dropouts in DPDS and DPDG"). Three rounds; the server relays, sets the deadlines and publishes who took part:

round 1, advertise
    User i makes his vector x_i (:func:`user_vectors`: his coin's one-hot vector, DPDS; the one-hot vector at
    scale 2^k plus his discrete Gaussian noise, DPDG). He sends the server the public half of his pair key
    (X25519, the private half derived from his secret) with a hash of his mask seed (which the server checks
    the seed against when it rebuilds it), and sends every other user k a backup, sealed to k: k's Shamir
    shares (threshold t, :func:`threshold`) of his pair key and of his mask seed. U1: the users whose messages
    all reached the server by the round's deadline.
round 2, masked sum
    The server publishes U1's public keys. Users i and j of U1 agree on a secret (X25519, then HKDF), from which
    i's share for j, s_ij, and j's share for i, s_ji, derive (:class:`PairShares`). i's own share is
    x_i - sum_j s_ij, so his n shares sum to x_i as Algorithm 2's do; he sends
    y_i = x_i - sum_{j in U1} s_ij + sum_{j in U1} s_ji + b_i, a mask b_i expanded from his mask seed.
    U2: the users whose y_i reached the server by the deadline.
round 3, reveal
    The server publishes U2 (so E = U1 \\ U2, round 2's dropouts). User k in U2 opens the backups U1 sent him
    and reveals his share of the mask seed of every user of U2 and of the pair key of every user of E: never
    both for one user. Once t users revealed, the server rebuilds each b_u (u in U2) and each pair key of E,
    recomputes s_du and s_ud for d in E and u in U2, and releases
    sum_{u in U2} (y_u - b_u) - sum_{d in E, u in U2} (s_du - s_ud) = sum_{u in U2} x_u,
    the survivors' vectors, exactly. A survivor who vanishes in round 3 costs nothing while t others answer.

A user refuses round 3 if he is named in E (he sent y_k), if U2 is not within U1 or leaves fewer survivors than
the task's minimum, or if he is asked twice. The guarantee is recomputed for the survivors
(:func:`survivors_parameters`). No party sends a share: each is derived where it is used.
"""

from __future__ import annotations

import dataclasses
import json
import secrets
import struct
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from ..core import shamir
from ..core.messages import MessageBatch
from ..core.randomness import RNGLike, resolve
from ..core.sharing import SEED_BYTES, derive_seed, element_bytes, expand, pack_elements, unpack_elements
from ..errors import ParameterError, check_integer
from ..privacy.description import PrivacyDescription
from ..privacy.events import Survivors
from .results import FrequencyTable
from .roles import MultiRound, Outbox, Round, RoundFailed, answer_each
from .dpdg_parameters import DPDGParameters
from .sampling_servers import SumServer, one_hot_rows
from .sampling_sharing import SamplingParameters, SharingParameters, bernoulli

# --- messages ----------------------------------------------------------------------------------------------
MAGIC, VERSION = b"PVS", 2
ADVERTISE, BACKUP, MASKED_SUM, REVEAL = 1, 2, 3, 4  # message kinds
KIND_NAMES = {ADVERTISE: "pair key", BACKUP: "backup", MASKED_SUM: "masked sum", REVEAL: "revealed shares"}
SERVER = 0xFFFFFFFF  # the recipient field of a message to the server
HEADER = struct.Struct("<3sBBIII")  # magic, version, kind, sender, recipient, payload count
KEY_BYTES = 32  # an X25519 public key; the round-1 message to the server is one and a mask seed's hash
LIMBS = SEED_BYTES // 2  # Shamir limbs of one 32-byte secret (core/shamir.py)
PAIR_KEY, MASK_SEED = 0, 1  # the two backed-up secrets, in a backup's order and in a revealed entry's tag
ENTRY = struct.Struct("<IB")  # a revealed entry's owner and secret, then LIMBS shares


@dataclass(frozen=True)
class Revealed:
    """A round-3 message's entries: for each owner, which of his secrets (:data:`PAIR_KEY` or :data:`MASK_SEED`)
    and the sender's Shamir shares of it (LIMBS elements)."""

    owners: np.ndarray
    secrets: np.ndarray
    shares: np.ndarray  # (entries, LIMBS)


@dataclass(frozen=True)
class Message:
    """One decoded message: its kind, sender, recipient (:data:`SERVER` for the server) and payload (a public key
    and a mask seed's hash, 2 x 32 bytes; a backup's 2 x LIMBS Shamir shares; N field elements;
    :class:`Revealed`)."""

    kind: int
    sender: int
    recipient: int
    payload: bytes | np.ndarray | Revealed


def _count_and_body(parameters: SharingParameters, kind: int, payload) -> tuple[int, bytes]:
    if kind == ADVERTISE:
        return 2 * KEY_BYTES, bytes(payload)
    if kind == BACKUP:
        return 2, shamir.pack(payload)
    if kind == MASKED_SUM:
        return parameters.domain_size, pack_elements(parameters.field, payload)
    entries = b"".join(ENTRY.pack(int(o), int(s)) + shamir.pack(row)
                       for o, s, row in zip(payload.owners, payload.secrets, payload.shares))
    return len(payload.owners), entries


def encode(parameters: SharingParameters, kind: int, sender: int, recipient: int, payload) -> bytes:
    """A message's bytes: :data:`HEADER` (its count: the key's and hash's bytes, 2 backed-up secrets, N elements,
    or the revealed entries), then the payload."""
    count, body = _count_and_body(parameters, kind, payload)
    return HEADER.pack(MAGIC, VERSION, kind, sender, recipient, count) + body


def _check_public_key(raw: bytes) -> bytes:
    """``raw`` if it is an X25519 public key whose shared secrets are not all zero (not of low order)."""
    from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey, X25519PublicKey

    try:
        X25519PrivateKey.from_private_bytes(bytes(32)).exchange(X25519PublicKey.from_public_bytes(raw))
    except ValueError:
        raise ParameterError("message", "an X25519 public key of large order", "a key of low order") from None
    return raw


def decode(parameters: SharingParameters, raw: bytes, kinds: Sequence[int], sender: int | None = None,
           recipient: int | None = None) -> Message:
    """The message in ``raw``, every field checked: the magic and version, a kind among ``kinds``, the sender and
    recipient among the n users (and equal to ``sender`` / ``recipient`` when given), no one sending to himself,
    exactly the payload's length, every element in its field, a public key not of low order, revealed owners
    among the n users and each once. A ParameterError (field ``message``) names what is wrong."""
    if not isinstance(raw, (bytes, bytearray)) or len(raw) < HEADER.size:
        raise ParameterError("message", f"a privagg sharing message of at least {HEADER.size} bytes",
                             f"{len(raw)} bytes" if isinstance(raw, (bytes, bytearray)) else type(raw).__name__)
    magic, version, kind, source, target, count = HEADER.unpack_from(raw)
    n, expected = parameters.n_users, [KIND_NAMES.get(k, str(k)) for k in kinds]
    if magic != MAGIC or version != VERSION:
        raise ParameterError("message", f"version {VERSION} of privagg's sharing messages", f"{magic!r} {version}")
    if kind not in kinds:
        raise ParameterError("message", f"a {' or '.join(expected)} message", KIND_NAMES.get(kind, f"kind {kind}"))
    if not source < n or (sender is not None and source != sender):
        raise ParameterError("message.sender", f"user {sender}" if sender is not None else f"a user in [0, {n})",
                             source)
    if (target != SERVER and not target < n) or (recipient is not None and target != recipient):
        raise ParameterError("message.recipient", "the server" if recipient == SERVER else
                             f"user {recipient}" if recipient is not None else f"a user in [0, {n})", target)
    if target == source:
        raise ParameterError("message.recipient", "another user than the sender", target)
    body = bytes(raw[HEADER.size:])
    if kind == ADVERTISE:
        if count != 2 * KEY_BYTES or len(body) != 2 * KEY_BYTES:
            raise ParameterError("message", f"a public key and a hash of {KEY_BYTES} bytes each", f"{len(body)} bytes")
        return Message(kind, source, target, _check_public_key(body[:KEY_BYTES]) + body[KEY_BYTES:])
    if kind == BACKUP:
        if count != 2:
            raise ParameterError("message", "a backup of 2 secrets", count)
        return Message(kind, source, target, shamir.unpack(body, 2 * LIMBS, "message").reshape(2, LIMBS))
    if kind == MASKED_SUM:
        if count != parameters.domain_size:
            raise ParameterError("message", f"{parameters.domain_size} field elements (N)", count)
        return Message(kind, source, target, unpack_elements(parameters.field, body, count, "message"))
    width = ENTRY.size + LIMBS * shamir.SHARE_BYTES
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


def message_bytes(parameters: SharingParameters, kind: int, entries: int = 0) -> int:
    """The length of one message of ``kind`` (``entries``: a round-3 message's revealed entries)."""
    return HEADER.size + {ADVERTISE: 2 * KEY_BYTES, BACKUP: 2 * LIMBS * shamir.SHARE_BYTES,
                          MASKED_SUM: parameters.domain_size * element_bytes(parameters.field),
                          REVEAL: entries * (ENTRY.size + LIMBS * shamir.SHARE_BYTES)}[kind]


def threshold(parameters: SharingParameters) -> int:
    """t, the shares that rebuild a backed-up secret: a majority of the n users, and more than the n - ceil(G n)
    users who may not follow the protocol (who could otherwise pool their shares with the server's)."""
    n = parameters.n_users
    return min(n, max(n // 2 + 1, n - parameters.honest_users + 1))


class PairShares:
    """One user's side of the pairwise shares (s_me,other, s_other,me) with each other user of U1: X25519 then
    HKDF-SHA256 (RFC 7748, RFC 5869), expanded to N field elements each (ChaCha20, :func:`expand`). The private
    key is loaded once for the n - 1 agreements (a user's round 2; the server's, per dropout, in the release)."""

    def __init__(self, parameters: SharingParameters, private_key: bytes) -> None:
        from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey

        self.field, self.elements = parameters.field, parameters.domain_size
        self.key = X25519PrivateKey.from_private_bytes(private_key)

    def __call__(self, public_key: bytes, me: int, other: int) -> tuple[np.ndarray, np.ndarray]:
        from cryptography.hazmat.primitives import hashes
        from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PublicKey
        from cryptography.hazmat.primitives.kdf.hkdf import HKDF

        agreed = self.key.exchange(X25519PublicKey.from_public_bytes(public_key))
        key = HKDF(hashes.SHA256(), SEED_BYTES, salt=None, info=b"privagg sharing pair v2").derive(agreed)
        return (expand(self.field, derive_seed(key, f"share {me} to {other}"), self.elements),
                expand(self.field, derive_seed(key, f"share {other} to {me}"), self.elements))


def _public_key(private_key: bytes) -> bytes:
    from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey

    return X25519PrivateKey.from_private_bytes(private_key).public_key().public_bytes_raw()


def _mask(parameters: SharingParameters, seed: bytes) -> np.ndarray:
    return expand(parameters.field, seed, parameters.domain_size)


def _seed_hash(seed: bytes) -> bytes:
    import hashlib

    return hashlib.blake2b(seed, digest_size=KEY_BYTES, person=b"privagg mask").digest()


# --- a user ------------------------------------------------------------------------------------------------


@dataclass
class UserState:
    """What a user keeps between rounds: his index, his secret (his pair key and mask seed derive from it), his
    vector and his own backup shares once he has advertised, and the last round he answered. Plain data with an
    encoding (:meth:`to_bytes`), so that a device or a test harness can store it."""

    index: int
    secret: bytes
    vector: np.ndarray | None = None
    backup: np.ndarray | None = None  # his own Shamir shares of his two secrets, (2, LIMBS)
    answered: int = 0

    def to_bytes(self) -> bytes:
        head = json.dumps({"version": VERSION, "index": self.index, "answered": self.answered,
                           "elements": 0 if self.vector is None else int(self.vector.size)}).encode()
        body = b"" if self.vector is None else (np.asarray(self.vector, dtype="<u8").tobytes() +
                                                shamir.pack(self.backup))
        return struct.pack("<I", len(head)) + head + self.secret + body

    @classmethod
    def from_bytes(cls, raw: bytes) -> "UserState":
        try:
            (size,) = struct.unpack_from("<I", raw)
            head = json.loads(raw[4:4 + size])
            secret, body = raw[4 + size:4 + size + SEED_BYTES], raw[4 + size + SEED_BYTES:]
            elements = head["elements"]
            assert head["version"] == VERSION and len(secret) == SEED_BYTES
            assert len(body) == (8 * elements + 2 * LIMBS * shamir.SHARE_BYTES if elements else 0)
        except Exception:
            raise ParameterError("user state", f"a state written by UserState.to_bytes (version {VERSION})",
                                 f"{len(raw)} unreadable bytes") from None
        if not elements:
            return cls(head["index"], secret, answered=head["answered"])
        vector = np.frombuffer(body[:8 * elements], dtype="<u8").astype(np.uint64)
        backup = shamir.unpack(body[8 * elements:], 2 * LIMBS, "user state").reshape(2, LIMBS)
        return cls(head["index"], secret, vector, backup, head["answered"])


def user_vectors(parameters: SharingParameters, codes, rng: np.random.Generator) -> np.ndarray:
    """Each user's vector x_i as field elements (users x N): his one-hot vector if his coin says he participates,
    else zeros (DPDS, Algorithm 2 L1-4); his one-hot vector at scale 2^k plus his discrete Gaussian noise (DPDG,
    reference §2.4), negatives as p - |v|."""
    p = parameters
    codes = p.check_codes(codes)
    if isinstance(p, DPDGParameters):
        from ..privacy.discrete_gaussian import sample

        values = sample(p.noise_variance, (codes.size, p.domain_size), rng)
        values[np.arange(codes.size), codes] += p.scale
        return (values % p.modulus).astype(np.uint64)  # Python-style mod: negatives as p - |v|
    return one_hot_rows(codes, bernoulli(p.sampling_probability, codes.size, rng), p.domain_size, np.uint64)


class SharingUser:
    """User ``index`` of a DPDS or DPDG task, one round at a time (module docstring): the role the service's users
    (:mod:`privagg.service.round_client`) and the simulator (:mod:`privagg.simulate.rounds`) run.

    ``min_survivors``: the task's; he reveals only for a release over at least as many users. ``rng=None`` (a
    real user) draws his secret from the OS and his coin, noise and Shamir polynomials from the secure
    generator; a seeded simulation passes a generator. ``state`` resumes a user saved with ``state.to_bytes()``.
    """

    def __init__(self, parameters: SharingParameters, index: int, min_survivors: int, rng: RNGLike = None,
                 state: UserState | None = None, identity: bytes | None = None) -> None:
        self.parameters, self.field, self.rng = parameters, parameters.field, rng
        self.min_survivors = check_min_survivors(parameters, min_survivors)
        index = check_integer("user index", index, 0, parameters.n_users - 1)
        if state is None:
            secret = secrets.token_bytes(SEED_BYTES) if rng is None else resolve(rng).bytes(SEED_BYTES)
            state = UserState(index, secret)
        elif state.index != index:
            raise ParameterError("user state", f"the state of user {index}", f"user {state.index}'s")
        self.state, self.index = state, index

    def _secret(self, which: int) -> bytes:
        return derive_seed(self.state.secret, ("pair key", "mask")[which])

    def _expect(self, round_: int) -> None:
        if self.state.answered != round_ - 1:
            raise ParameterError("round", f"round {self.state.answered + 1} next (each round is answered once, "
                                 "in order)", f"round {round_}")

    def advertise(self, value: int) -> Outbox:
        """Round 1: his pair key's public half (and his mask seed's hash) for the server, and a backup for every
        other user (seal each to its recipient)."""
        p, n = self.parameters, self.parameters.n_users
        self._expect(1)
        generator = resolve(self.rng)
        vector = user_vectors(p, np.array([value]), generator)[0]
        shares = shamir.split(self._secret(PAIR_KEY) + self._secret(MASK_SEED), threshold(p), n, generator)
        shares = shares.reshape(n, 2, LIMBS)
        self.state.vector, self.state.backup, self.state.answered = vector, shares[self.index], 1
        key = encode(p, ADVERTISE, self.index, SERVER,
                     _public_key(self._secret(PAIR_KEY)) + _seed_hash(self._secret(MASK_SEED)))
        return Outbox(key, {k: encode(p, BACKUP, self.index, k, shares[k]) for k in range(n) if k != self.index})

    def _check_list(self, users: Sequence[int], what: str) -> list[int]:
        listed = sorted({check_integer(what, u, 0, self.parameters.n_users - 1) for u in users})
        if len(listed) != len(users):
            raise ParameterError(what, "distinct users", "a user listed twice")
        return listed

    def masked_sum(self, keys: Mapping[int, bytes]) -> Outbox:
        """Round 2: y_i, given U1's pair keys (``keys``: user to his round-1 key message, himself among them)."""
        return masked_sums([self], keys)[0]

    def reveal(self, senders: Sequence[int], survivors: Sequence[int], backups: Mapping[int, bytes]) -> Outbox:
        """Round 3: his shares of the mask seeds of U2 (``survivors``) and of the pair keys of E = U1 \\ U2, given
        U1 (``senders``) and the backups U1 sent him.

        Refused (a ParameterError, and nothing to send) if he is not in U2 (he sent y_i: his pair key must stay
        his), if U2 is not within U1 or leaves fewer survivors than the task's minimum, or a backup is missing."""
        self._expect(3)
        senders, survivors = self._check_list(senders, "round-1 senders"), self._check_list(survivors, "survivors")
        if self.index not in survivors:
            raise ParameterError("survivors", f"a list naming user {self.index}, who sent his masked sum (revealing "
                                 "his pair key now would reveal his vector)", "a list without him")
        if not set(survivors) <= set(senders):
            raise ParameterError("survivors", "round-1 senders only", sorted(set(survivors) - set(senders))[:5])
        if len(survivors) < self.min_survivors:
            raise ParameterError("survivors", f"at least {self.min_survivors} (the task's minimum)", len(survivors))
        missing = sorted(set(senders) - set(backups) - {self.index})
        if missing or set(backups) - set(senders):
            raise ParameterError("backups", "one from each round-1 sender", f"missing {missing[:5]}, unlisted "
                                 f"{sorted(set(backups) - set(senders))[:5]}")
        kept = set(survivors)
        owners = np.array(senders, dtype=np.int64)
        tags = np.array([MASK_SEED if u in kept else PAIR_KEY for u in senders], dtype=np.int64)
        rows = np.empty((len(senders), LIMBS), dtype=np.int64)
        for row, (u, tag) in enumerate(zip(senders, tags)):
            backup = (self.state.backup if u == self.index else
                      decode(self.parameters, backups[u], (BACKUP,), u, self.index).payload)
            rows[row] = backup[tag]
        self.state.answered = 3
        return Outbox(encode(self.parameters, REVEAL, self.index, SERVER, Revealed(owners, tags, rows)), {})


def masked_sums(users: Sequence[SharingUser], keys: Mapping[int, bytes]) -> list[Outbox]:
    """Round 2 for a batch of users of one task (a device is a batch of one), given U1's pair keys: each user's
    y_i = x_i - sum_j s_ij + sum_j s_ji + b_i. Users i and j of the batch agree on the same secret and derive the
    same (s_ij, s_ji) (X25519 is symmetric): the batch derives each such pair once, for both, and each key of
    U1 is decoded once. What each user sends is what he would send alone."""
    if not users:
        return []
    p, field = users[0].parameters, users[0].field
    batch = {u.index: u for u in users}
    for user in users:
        user._expect(2)
    senders = users[0]._check_list(list(keys), "round-1 senders")
    for user in users:
        if user.index not in senders:
            raise ParameterError("round-1 senders", f"a list naming user {user.index}, who advertised",
                                 "a list without him")
    public = {j: decode(p, keys[j], (ADVERTISE,), j, SERVER).payload[:KEY_BYTES] for j in senders}
    totals = {i: u.state.vector.copy() for i, u in batch.items()}
    for i, user in batch.items():
        pair_shares = PairShares(p, user._secret(PAIR_KEY))
        for j in senders:
            if j == i or (j in batch and j < i):  # himself, or a pair the batch derived for j already
                continue
            mine, theirs = pair_shares(public[j], i, j)  # s_ij, s_ji
            totals[i] = field.add(field.sub(totals[i], mine), theirs)
            if j in batch:
                totals[j] = field.add(field.sub(totals[j], theirs), mine)
    out = []
    for i, user in batch.items():
        user.state.answered = 2
        out.append(Outbox(encode(p, MASKED_SUM, i, SERVER, field.add(totals[i], _mask(p, user._secret(MASK_SEED)))),
                          {}))
    return out


def answer(users: Sequence[SharingUser], round_: Round, inboxes: Sequence[dict]) -> list[Outbox]:
    """A round over a batch of users (:attr:`MultiRound.answer`): round 2's masked sums derived once per pair when
    the users were given the same keys (:func:`masked_sums`), every other round one user at a time."""
    if round_.name == "masked_sum" and inboxes and all(inbox == inboxes[0] for inbox in inboxes):
        return masked_sums(users, inboxes[0]["keys"])
    return answer_each(users, round_, inboxes)


# --- the server --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class SharingRelease:
    """What the server releases: the estimates over the survivors, who they were, and the parameters with the
    guarantee recomputed for them (``honest_fraction`` = survivors / n)."""

    table: FrequencyTable
    enrolled: int  # n
    senders: int  # |U1|
    survivors: int  # |U2|
    revealers: int  # the users who answered round 3
    threshold: int  # t, of the backups
    parameters: SharingParameters
    rows: MessageBatch  # what the release folded: the survivors' masked sums as (item, share) rows

    @property
    def privacy(self):
        """The guarantee of this release: the recomputed parameters' delta at the calibrated epsilon, with who took
        part."""
        p = self.parameters
        return PrivacyDescription.of(Survivors(
            p.privacy.event, p.delta_at(p.epsilon), self.enrolled, self.survivors, "users who took part to the end",
            f"{self.senders} advertised in round 1, {self.revealers} revealed in round 3",
            (f"served with key-agreed shares backed up {self.threshold}-out-of-{self.enrolled} (Shamir): the server "
             "learns only the survivors' sum if it follows the protocol (it shows every user the same lists and relays "
             "the public keys unaltered) and pools shares with fewer than that many users",)))


class SharingServer:
    """The aggregating server of a DPDS or DPDG task, the coordinator of its rounds (:data:`ROUNDS`): whom each round
    expects, what it checks, what a user's inbox holds, what it publishes (U1, U2), and the release of the
    survivors' sum.

    It never opens a backup (they are sealed to their recipients); it relays them, and between rounds keeps
    only the lists it published (its ``state``) and the messages (the service's database)."""

    def __init__(self, parameters: SharingParameters, min_survivors: int, rng: RNGLike = None) -> None:
        self.parameters, self.field = parameters, parameters.field
        self.min_survivors = check_min_survivors(parameters, min_survivors)
        self.threshold = threshold(parameters)

    # --- the rounds (roles.Coordinator) ---------------------------------------------------------------------
    def expected(self, round_: Round, state: dict) -> list[int]:
        """advertise: every user; masked_sum: U1; reveal: U2 (as :data:`ROUNDS` declares)."""
        return list(range(self.parameters.n_users)) if round_.expects == "enrolled" else state[round_.expects]

    def minimum(self, round_: Round) -> tuple[int, str]:
        """The task's minimum of survivors, or (reveal) the backups' threshold t."""
        if round_.minimum == "threshold":
            return self.threshold, f"the backups' threshold t = {self.threshold}"
        return self.min_survivors, f"the task's minimum of {self.min_survivors} survivors"

    def check(self, round_: Round, user: int, message: bytes, state: dict, messages: Mapping) -> None:
        """A user's key (advertise), masked sum, or revealed shares (checked against U1 and U2)."""
        if round_.name == "reveal":
            self.check_reveal(message, user, state["senders"], state["survivors"])
        else:
            self.check_message(message, ADVERTISE if round_.name == "advertise" else MASKED_SUM, user)

    def message_size(self, round_: Round, user: int, state: dict, messages: Mapping) -> int:
        raise ParameterError("round", "a round whose message is sealed to another party (DPDS has none)", round_.name)

    def recipients(self, round_: Round, user: int, state: dict, messages: Mapping) -> dict[int, int]:
        """advertise: a backup to every other user."""
        size = message_bytes(self.parameters, BACKUP)
        return {k: size for k in range(self.parameters.n_users) if k != user} if round_.name == "advertise" else {}

    def inbox(self, round_: Round, user: int, state: dict, messages: Mapping) -> dict:
        """masked_sum: U1's keys; reveal: U1 and U2 (the backups U1 sent him come with it, relayed)."""
        if round_.name == "masked_sum":
            return {"keys": {u: messages["advertise"][u] for u in state["senders"]}}
        if round_.name == "reveal":
            return {"senders": state["senders"], "survivors": state["survivors"]}
        return {}

    def close(self, round_: Round, answered: list[int], state: dict, messages: Mapping) -> dict:
        """U1 (advertise) or U2 (masked_sum) published: who answered."""
        return {**state, round_.publishes: list(answered)} if round_.publishes else dict(state)

    def finish(self, state: dict, messages: Mapping) -> "SharingRelease":
        """The release once the reveal round closed (:meth:`release`): refused (:class:`RoundFailed`) when the
        revealed shares rebuild no committed secret."""
        try:
            return self.release(messages["advertise"], messages["masked_sum"], messages["reveal"])
        except ParameterError as err:
            raise RoundFailed(f"the release was refused: {err}; nothing was released") from None

    # --- checks and the release -----------------------------------------------------------------------------
    def check_message(self, raw: bytes, kind: int, user: int) -> Message:
        """A user's round-1 key, round-2 or round-3 message, checked (``kind``, sender ``user``, to the server)."""
        return decode(self.parameters, raw, (kind,), user, SERVER)

    def check_reveal(self, raw: bytes, user: int, senders: Sequence[int], survivors: Sequence[int]) -> Revealed:
        """A round-3 message from ``user``, checked against the lists: one entry per user of U1 (``senders``), the
        mask seed's share for each survivor and the pair key's for each dropout, in U1's order."""
        revealed = self.check_message(raw, REVEAL, user).payload
        kept = set(survivors)
        if (list(revealed.owners) != sorted(senders) or
                list(revealed.secrets) != [MASK_SEED if u in kept else PAIR_KEY for u in sorted(senders)]):
            raise ParameterError("message", "a share of each survivor's mask seed and each round-2 dropout's pair key, "
                                 "one per round-1 sender in order", "other entries")
        return revealed

    def release(self, keys: Mapping[int, bytes], masked: Mapping[int, bytes], reveals: Mapping[int, bytes],
                queries=None) -> SharingRelease:
        """sum_{u in U2} (y_u - b_u) - sum_{d in E, u in U2} (s_du - s_ud), U1 = the users in ``keys`` (their round-1
        key messages), U2 = those in ``masked``; refused unless at least t users of U2 revealed (``reveals``) and
        U2 holds at least the task's minimum of survivors. The masked sums are folded as (item, share) rows by the
        survivors' :class:`SumServer` (what it received), the masks and the dropouts' shares taken off its sums."""
        p, senders, survivors = self.parameters, sorted(keys), sorted(masked)
        if not set(survivors) <= set(senders):
            raise ParameterError("masked sums", "from round-1 senders only", sorted(set(survivors) - set(senders))[:5])
        if len(survivors) < self.min_survivors:
            raise ParameterError("survivors", f"at least {self.min_survivors} (the task's minimum)", len(survivors))
        revealers = sorted(set(reveals) & set(survivors))
        if len(revealers) < self.threshold:
            raise ParameterError("reveals", f"from at least t = {self.threshold} survivors (the backups' threshold)",
                                 len(revealers))
        chosen = revealers[:self.threshold]
        shares = np.stack([self.check_reveal(reveals[k], k, senders, survivors).shares for k in chosen], axis=1)
        rebuilt = dict(zip(senders, shamir.combine(np.array(chosen), shares, self.threshold)))
        advertised = {u: self.check_message(keys[u], ADVERTISE, u).payload for u in senders}
        wrong = [u for u in senders if (_seed_hash(rebuilt[u]) if u in masked else _public_key(rebuilt[u])) !=
                 advertised[u][KEY_BYTES if u in masked else 0:][:KEY_BYTES]]
        if wrong:
            raise ParameterError("reveals", "shares that rebuild each user's committed secret (his round-1 key or "
                                 "mask seed hash)", f"shares that do not, for users {wrong[:5]}: a revealer among "
                                 f"{chosen[:5]}... sent a wrong share")
        unmask = np.zeros(p.domain_size, dtype=np.uint64)
        for u in survivors:
            unmask = self.field.add(unmask, _mask(p, rebuilt[u]))
        public = {u: advertised[u][:KEY_BYTES] for u in survivors}
        for d in sorted(set(senders) - set(survivors)):
            pair_shares = PairShares(p, rebuilt[d])
            for u in survivors:
                theirs, mine = pair_shares(public[u], d, u)  # s_du, s_ud
                unmask = self.field.add(self.field.sub(unmask, mine), theirs)
        recomputed = survivors_parameters(p, len(survivors))
        rows = recomputed.layout.batch({"item": np.tile(np.arange(p.domain_size), len(survivors)),
                                        "share": np.concatenate([self.check_message(masked[u], MASKED_SUM, u).payload
                                                                 for u in survivors])})
        server = SumServer(recomputed, queries)
        agg = server.agg_update(server.agg_init(), rows)
        agg.sums = self.field.sub(agg.sums, unmask)
        return SharingRelease(server.finalize(agg), p.n_users, len(senders), len(survivors), len(revealers),
                              self.threshold, recomputed, rows)


def survivors_parameters(parameters: SharingParameters, survivors: int) -> SharingParameters:
    """The parameters of the release over ``survivors`` of the n users (docs/privacy.md, "Dropouts in DPDS and
    DPDG"): n' = survivors users; the (1 - G) n users who may not follow the protocol all counted among them
    (honest fraction (n' - (n - ceil(G n))) / n'); the sampling family's data condition stays stated of the n
    enrolled users (``dropouts`` = n - n'), which leaves every category ceil(beta n) - (n - n') of the survivors
    at least; DPDG's noise that of the honest survivors. The sampling probability or the noise variance is the
    task's: only the users change."""
    n = parameters.n_users
    honest = survivors - (n - parameters.honest_users)
    if survivors == n:  # no dropouts: the task's own parameters
        return parameters
    if not 2 <= survivors <= n or honest < 1:
        raise ParameterError("survivors", f"in [2, {n}] and more than the {n - parameters.honest_users} users who "
                             "may not follow the protocol", survivors)
    dropped = {"dropouts": parameters.dropouts + n - survivors} if isinstance(parameters, SamplingParameters) else {}
    return dataclasses.replace(parameters, n_users=survivors, honest_fraction=honest / survivors, **dropped)


def check_min_survivors(parameters: SharingParameters, min_survivors: int) -> int:
    """``min_survivors`` if a release over that many users can happen (at least the backups' threshold t of
    users to reveal, :func:`threshold`) and is valid (:func:`survivors_parameters`: more than the users who may
    not follow the protocol), else a ParameterError naming it."""
    if parameters.model != "secret_sharing":
        raise ParameterError("protocol", "dpds or dpdg (users who share among all users)", parameters.protocol)
    return checked_survivors(parameters, min_survivors, max(2, threshold(parameters)))


def checked_survivors(parameters, min_survivors: int, least: int) -> int:
    """``min_survivors`` in [``least``, n] if :func:`survivors_parameters` can recompute the guarantee for that many
    users, else a ParameterError naming it (the sharing family's and TSS's check)."""
    least = check_integer("min_survivors", min_survivors, least, parameters.n_users)
    try:
        survivors_parameters(parameters, least)
    except ParameterError as err:
        raise ParameterError("min_survivors", f"a number of survivors the release can be computed for ({err})",
                             least) from None
    return least


def message_entries(raw: bytes) -> tuple[str, int]:
    """What a well-formed message carries, from its header: its kind's name and its entries (a key counts one; a
    backup two secrets' shares; N field elements; a revealed share per user). For traffic counts (``privagg
    demo-service``), not a check: :func:`decode` checks."""
    _, _, kind, _, _, count = HEADER.unpack_from(raw)
    return KIND_NAMES[kind], 1 if kind == ADVERTISE else count


def expected_traffic(parameters: SharingParameters, senders: int) -> tuple[dict[str, int], dict[str, int]]:
    """The entries (:func:`message_entries`) a survivor sends and receives by kind when ``senders`` users (|U1|)
    advertised in round 1: his key, a backup of 2 secrets to each of the n - 1 others, his masked sum (N) and a
    revealed share per sender; U1's keys (round 2, his own among them) and the other senders' backups (round 3)."""
    n, N = parameters.n_users, parameters.domain_size
    sent = {"pair key": 1, "backup": 2 * (n - 1), "masked sum": N, "revealed shares": senders}
    return sent, {"pair key": senders, "backup": 2 * (senders - 1)}


# --- the protocol as data ----------------------------------------------------------------------------------

# A faithful simulation's costs, measured on 2 busy cores (load about 3.4): an X25519 agreement with its HKDF
# 50 us; a ChaCha20 expansion 56 us at N = 10 plus 0.03 us an element; a message encoded, relayed and decoded
# (a backup, a revealed entry) 12 us.
AGREEMENT_SECONDS, EXPANSION_SECONDS, ELEMENT_SECONDS, MESSAGE_SECONDS = 50e-6, 56e-6, 3e-8, 12e-6


def faithful_seconds(parameters: SharingParameters) -> float:
    """About what a faithful simulation of DPDS or DPDG without dropouts takes: each of the n (n - 1) / 2 pairs
    agreed once and expanded twice (:func:`masked_sums`), each user's mask expanded twice (by him and by the
    server), and n (n - 1) backups and as many revealed entries made and read."""
    n, N = parameters.n_users, parameters.domain_size
    expansion = EXPANSION_SECONDS + N * ELEMENT_SECONDS
    pairs = n * (n - 1) / 2
    return pairs * (AGREEMENT_SECONDS + 2 * expansion) + 2 * n * expansion + 2 * n * (n - 1) * MESSAGE_SECONDS


HELD_BYTES = 150  # a message held in a simulation besides its bytes: the bytes object and its slot in a dict


def faithful_bytes(parameters: SharingParameters) -> int:
    """About the memory a faithful simulation holds: every backup and revealed entry (n (n - 1) of each), the keys,
    the masked sums, the users' vectors and backup shares."""
    n, N = parameters.n_users, parameters.domain_size
    entry = message_bytes(parameters, REVEAL, 1) - HEADER.size
    return n * (n - 1) * (message_bytes(parameters, BACKUP) + entry + HELD_BYTES) + n * (
        message_bytes(parameters, ADVERTISE) + 2 * message_bytes(parameters, MASKED_SUM) + 8 * N + 3 * HELD_BYTES)


# The rounds (module docstring): the server closes each once every user it expects answered, or at its deadline,
# and goes on with at least the task's minimum of survivors (round 3: at least t revealers).
ROUNDS = (
    Round("advertise", value=True, relay="backups", relay_info=b"privagg backup ", publishes="senders"),
    Round("masked_sum", expects="senders", reads=("advertise",), signed=(("keys", "advertise"),), publishes="survivors"),
    Round("reveal", expects="survivors", delivers="backups", minimum="threshold"),
)

PROTOCOL = MultiRound(
    rounds=ROUNDS, user=SharingUser, coordinator=SharingServer, answer=answer, release_round="masked_sum",
    survivors_parameters=survivors_parameters, least_survivors=lambda p: max(2, threshold(p)),
    entries=message_entries, faithful_seconds=faithful_seconds, faithful_bytes=faithful_bytes)
