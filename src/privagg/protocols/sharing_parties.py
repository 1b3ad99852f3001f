"""DPDS and DPDG's parties: each user's rounds, sans I/O, every message bytes, and what both sides compute (the key
agreement, the threshold, the proof of an inconsistent dealer, the survivors' parameters);
:mod:`privagg.protocols.sharing_server` has the server's role and the release, and the rounds as data
(:data:`~privagg.protocols.sharing_server.ROUNDS`, :data:`~privagg.protocols.sharing_server.PROTOCOL`),
:mod:`privagg.protocols.sharing_messages` the messages. The one implementation: the services
(:mod:`privagg.service.sharing.server`) and the simulator (:mod:`privagg.simulate.rounds`) run these roles from
PROTOCOL.

Algorithm 2 (reference §2.3) has each user share his vector among all n users and send the sum of what he
received to the server. Over a network users vanish at any round, so the parties derive their shares by key
agreement and back their keys up with Shamir's threshold shares, as Bonawitz et al.'s secure aggregation does
(CCS 2017, §4), in its actively secure variant (§6: signatures, a consistency round) with commitments to the
backed-up shares, so that one lying user or a lying server is caught and blamed rather than trusted. The
derivation, and what each party learns in every dropout case and every deviation, are in docs/privacy.md
("Dropouts in DPDS and DPDG") and docs/privacy.md, "Dishonest parties". Five rounds, and a sixth when a dealer is proven
inconsistent; the server relays, sets the deadlines and publishes who took part:

round 1, advertise
    User i makes his vector x_i (:func:`user_vectors`: his coin's one-hot vector, DPDS; the one-hot vector at
    scale 2^k plus his discrete Gaussian noise, DPDG) and Shamir shares (threshold t, :func:`threshold`) of his
    pair key and of his mask seed (both derived from his secret). He sends the server a commitment to each user
    k's shares (:func:`~privagg.protocols.sharing_messages.commitment`), and every other user k a backup, sealed
    to k: k's shares. U1: the users whose messages all reached the server by the round's deadline.
round 2, check
    User k of U1 opens the backups U1 sent him and checks each against the commitments its dealer made to his
    shares (the server's copy for him). He sends the server the public half of his pair key (X25519) with a hash
    of his mask seed, followed by his complaints: the dealers whose backup did not open (None from his SDK) or did
    not match. The server excludes every dealer complained about, and a complainer who names more than
    n - min_survivors users instead (:meth:`~privagg.protocols.sharing_server.SharingServer.excluded`). U1': U1
    less the excluded and those who did not answer. An excluded user is a round-1 dropout: nothing of his is used.
round 3, masked sum
    The server publishes U1''s public keys. Users i and j of U1' agree on a secret (X25519, then HKDF), from which
    i's share for j, s_ij, and j's share for i, s_ji, derive (:class:`PairShares`). i's own share is
    x_i - sum_j s_ij, so his n shares sum to x_i as Algorithm 2's do; he sends
    y_i = x_i - sum_{j in U1'} s_ij + sum_{j in U1'} s_ji + b_i, a mask b_i expanded from his mask seed. He refuses
    a U1' with a dealer whose backup he lacks or complained about. U2: the users whose y_i reached the server.
round 4, consistency
    The server publishes U2; each user of U2 signs (U1', U2, a digest of U1''s keys) with his identity key
    (Bonawitz et al. §4, ConsistencyCheck). U3: the users whose signature reached the server (checked).
round 5, reveal
    The server gives each user of U3 the signatures. He reveals only if at least t of them, from distinct users of
    U2, sign the lists he signed (else the server showed different lists: he aborts). He reveals his share of the
    mask seed of every user of U2 and of the pair key of every user of E = U1' \\ U2: never both for one user.
    The server checks each revealed share against its dealer's commitment (a wrong one is discarded and its
    revealer blamed), rebuilds each b_u (u in U2) and each pair key of E from t verified shares, recomputes
    s_du and s_ud for d in E and u in U2, and releases
    sum_{u in U2} (y_u - b_u) - sum_{d in E, u in U2} (s_du - s_ud) = sum_{u in U2} x_u,
    the survivors' vectors, exactly. A survivor who vanishes in rounds 4-5 costs nothing while t others answer.
    A dealer P whose t verified shares rebuild another secret than he announced is proven inconsistent when the
    round closes (:meth:`~privagg.protocols.sharing_server.SharingServer.proven`).
round 6, exclusion (only if a dealer was proven inconsistent; skipped otherwise)
    Each user of U2 less the proven dealers is given, for each such P, P's signed round-1 and round-2 messages and
    the t openings (:func:`check_proof`), and sends his pair seeds with P (:meth:`PairShares.seeds`) if every proof
    holds. P is then a dropout: y_P is left out, and each survivor's term s_Pu - s_uP removed with his seeds. A
    survivor silent in round 6 leaves a term no one can remove: the release is refused, naming him.

The guarantee is recomputed for the survivors (:func:`survivors_parameters`). No party sends a share: each is
derived where it is used.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import secrets
import struct
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from ..core import identity, shamir
from ..core.randomness import RNGLike, resolve
from ..core.sharing import SEED_BYTES, derive_seed, expand
from ..errors import ParameterError, check_integer
from ..privacy import neighbour_graph
from ..privacy.description import PrivacyDescription
from ..privacy.events import Survivors
from .roles import Outbox, Round, answer_each
from .dpdg_parameters import DPDGParameters
from .sampling_servers import one_hot_rows
from .sampling_sharing import SamplingParameters, SharingParameters, bernoulli
from .sharing_graph import graph_delta, planned, stated, task_degree
from .sharing_messages import (ADVERTISE, BACKUP, COMMITMENT, COMMITMENTS, COMPLAINTS, HASH_BYTES, HEADER, KEY_BYTES,
                               KEY_MESSAGE, LIMBS, MASK_SEED, MASKED_SUM, OPENINGS, PAIR_KEY, PAIR_SEEDS, REVEAL,
                               SERVER, SIGNATURE, USERS, VERSION, Revealed, bitmap, commitment, commitments_to,
                               committed_to, dealt_commitments, decode, decode_checked, encode, low_order, message_bytes)


def threshold(parameters: SharingParameters) -> int:
    """t, the shares that rebuild a backed-up secret. On the complete graph (``parameters.degree`` None): more than
    (n + D) / 2, D = n - ceil(G n) the users who may not follow the protocol. So t > D (they cannot pool enough
    shares with the server's), t is a majority, and two groups of honest users shown different lists cannot both
    gather t signatures with the D's help: 2 (t - D) > n - D honest users (the consistency round, docs/privacy.md,
    "Dishonest parties"). With D = 0, floor(n / 2) + 1. On a neighbour graph of degree k: t_k of each user's k + 1
    holders, the threshold of :func:`privagg.protocols.sharing_graph.planned` (docs/privacy.md, "Neighbour
    graphs")."""
    n, found = parameters.n_users, planned(parameters)
    return (2 * n - parameters.honest_users) // 2 + 1 if found is None else found.threshold


def task_graph(parameters: SharingParameters, seed: bytes | None) -> neighbour_graph.Graph:
    """The graph the task's users mask and back up on: the complete graph when ``parameters.degree`` is None (or
    n - 1), else the random Harary graph of that degree ordered by ``seed``, which must be the one the organisation
    signed in the roster (:func:`privagg.privacy.neighbour_graph.cycle_order`): a server that gave one user another
    seed could make all his neighbours colluders, so a user takes it only from the signed roster (his SDK replaces
    the inbox's ``graph_seed`` by the roster's) and the server from the round driver's state."""
    degree = task_degree(parameters)
    complete = degree == parameters.n_users - 1
    return neighbour_graph.graph(parameters.n_users, degree, None if complete else seed)


def bound(parameters: SharingParameters, graph_seed: bytes | None, dealer: int, holder: int, message: bytes) -> bytes:
    """What the signature of ``dealer``'s backup to ``holder`` covers besides its sealed bytes: the COMMITMENT message
    of his commitments to ``holder``'s shares, cut from his round-1 message to the server (``message``, checked).
    The server shows it to the holder as it is (``commitments``); the dealer signed both together, so a server that
    shows another commitment has the holder refuse the backup as forged, never complain about an honest dealer
    (docs/privacy.md, "What a holder is shown is the dealer's word")."""
    slot = task_graph(parameters, graph_seed).slot(dealer, holder)
    return encode(parameters, COMMITMENT, dealer, holder, commitments_to(message[HEADER.size:], slot))


def deal(secret: bytes, threshold_: int, holders: Sequence[int], rng: np.random.Generator) -> np.ndarray:
    """Shamir shares of ``secret`` for the chosen holders only (shape (len(holders), limbs)): the polynomials drawn
    as :func:`privagg.core.shamir.split` draws them (one row of t coefficients per limb, the constant the limb) and
    evaluated at x = holder + 1 by Horner's rule, so that a user deals k + 1 shares, not n, on a neighbour graph; on
    the complete graph the shares are shamir.split's own (same draws, same values)."""
    limbs = np.frombuffer(secret, dtype="<u2").astype(np.int64)
    shamir.check_threshold(threshold_, shamir.PRIME - 1)
    coefficients = rng.integers(0, shamir.PRIME, size=(threshold_, limbs.size), dtype=np.int64)
    coefficients[0] = limbs
    x = np.asarray(holders, dtype=np.int64)[:, None] + 1
    values = np.zeros((x.shape[0], limbs.size), dtype=np.int64)
    for row in coefficients[::-1]:  # each product below 2^42
        values = (values * x + row) % shamir.PRIME
    return values


class PairShares:
    """One user's side of the pairwise shares (s_me,other, s_other,me) with each other user of U1: X25519 then
    HKDF-SHA256 (RFC 7748, RFC 5869), expanded to N field elements each (ChaCha20, :func:`expand`). The private
    key is loaded once for the n - 1 agreements (a user's round 2; the server's, per dropout, in the release)."""

    def __init__(self, parameters: SharingParameters, private_key: bytes) -> None:
        from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey

        self.field, self.elements = parameters.field, parameters.domain_size
        self.key = X25519PrivateKey.from_private_bytes(private_key)

    def seeds(self, public_key: bytes, me: int, other: int) -> tuple[bytes, bytes]:
        """The seeds of s_me,other and s_other,me: keyed by the pair's agreed secret, each labelled with the pair
        and its direction, so that revealing them (round 6) reveals no other pair's shares. A ParameterError for a
        ``public_key`` of low order (:func:`~privagg.protocols.sharing_messages.low_order`), whose agreement is all
        zeros."""
        from cryptography.hazmat.primitives import hashes
        from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PublicKey
        from cryptography.hazmat.primitives.kdf.hkdf import HKDF

        try:
            agreed = self.key.exchange(X25519PublicKey.from_public_bytes(public_key))
        except ValueError:  # a key of low order: the agreement is all zeros
            raise low_order() from None
        key = HKDF(hashes.SHA256(), SEED_BYTES, salt=None, info=b"privagg sharing pair v2").derive(agreed)
        return derive_seed(key, f"share {me} to {other}"), derive_seed(key, f"share {other} to {me}")

    def __call__(self, public_key: bytes, me: int, other: int) -> tuple[np.ndarray, np.ndarray]:
        mine, theirs = self.seeds(public_key, me, other)
        return expand(self.field, mine, self.elements), expand(self.field, theirs, self.elements)


def _public_key(private_key: bytes) -> bytes:
    from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey

    return X25519PrivateKey.from_private_bytes(private_key).public_key().public_bytes_raw()


def mask(parameters: SharingParameters, seed: bytes) -> np.ndarray:
    return expand(parameters.field, seed, parameters.domain_size)


def _seed_hash(seed: bytes) -> bytes:
    return hashlib.blake2b(seed, digest_size=KEY_BYTES, person=b"privagg mask").digest()


def announces(secret: bytes | None, which: int, announced: bytes) -> bool:
    """Whether ``secret`` (rebuilt; None: the shares rebuilt none) is the pair key (``which`` = PAIR_KEY) or mask
    seed whose public key or hash its owner announced in round 2 (``announced``: his key message's 64 bytes)."""
    return secret is not None and (_public_key if which == PAIR_KEY else _seed_hash)(secret) == \
        announced[which * KEY_BYTES:(which + 1) * KEY_BYTES]


def check_proof(parameters: SharingParameters, dealer: int, commitments: bytes, key: bytes, openings: bytes,
                graph: neighbour_graph.Graph | None = None) -> None:
    """Nothing if ``openings`` (an OPENINGS message) prove that ``dealer`` dealt inconsistent shares: t distinct
    holders' shares of one of his secrets (his holders on the task's ``graph``, default the complete graph), each
    matching the commitment he made to it in his round-1 message (``commitments``), that interpolate to no secret or
    to another than the key or hash of his round-2 message (``key``). An honest dealer's committed shares lie on one
    polynomial of degree t - 1 whose constant is his secret, and no other share opens his commitment: no proof
    against him exists (docs/privacy.md, "The exclusion round"). Else a ParameterError (field ``proof``) naming what
    fails. That both messages are his, signed, is his SDK's to check (the round's ``signed`` fields)."""
    p, t = parameters, threshold(parameters)
    graph = graph or task_graph(p, None)
    committed = decode(p, commitments, (COMMITMENTS,), dealer, SERVER).payload
    announced = decode_checked(p, key, dealer)[0]
    opened = decode(p, openings, (OPENINGS,), dealer, SERVER).payload
    which = set(opened.secrets.tolist())
    if len(opened.owners) != t or len(which) != 1:
        raise ParameterError("proof", f"t = {t} holders' shares of one of user {dealer}'s secrets",
                             f"{len(opened.owners)} shares of {len(which)} secrets")
    strangers = sorted(set(opened.owners.tolist()) - set(graph.holders(dealer)))
    if strangers:
        raise ParameterError("proof", f"shares of holders of user {dealer}'s secrets (his neighbours and himself)",
                             f"shares of users {strangers[:5]}")
    which = which.pop()
    for k, row in zip(opened.owners.tolist(), opened.shares):
        if commitment(dealer, k, which, row) != committed_to(committed, graph.slot(dealer, k), which):
            raise ParameterError("proof", f"shares each matching the commitment user {dealer} signed in round 1",
                                 f"holder {k}'s, which does not: a forged opening")
    try:
        secret = shamir.combine(opened.owners, opened.shares[None], t)[0]
    except ParameterError:
        secret = None
    if announces(secret, which, announced):
        raise ParameterError("proof", f"shares that rebuild another secret than user {dealer} announced in round 2",
                             "his own: he dealt consistent shares, and the server accuses him falsely")


# --- a user ------------------------------------------------------------------------------------------------


@dataclass
class UserState:
    """What a user keeps between rounds: his index, his secret (his pair key and mask seed derive from it), his
    vector and his own backup shares once he has advertised, and the task's graph seed (from the signed roster; empty
    on the complete graph); the dealers of U1 he holds shares of and the ones he complained about, and the shares
    they backed up with him, checked (``held``: one row of 2 x LIMBS per holder of his own secrets, his neighbours and
    himself in order, his own row 0; round 2); the users he masked with and a digest of their keys (round 3; the
    digest only on the complete graph); a digest of the lists he signed (round 4); and the last round he answered.
    Plain data with an encoding (:meth:`to_bytes`), so that a device or a test harness can store it."""

    index: int
    secret: bytes
    vector: np.ndarray | None = None
    backup: np.ndarray | None = None  # his own Shamir shares of his two secrets, (2, LIMBS)
    answered: int = 0
    held: np.ndarray | None = None  # (holders, 2, LIMBS): the checked shares of each dealer he holds (others 0)
    dealers: list[int] = dataclasses.field(default_factory=list)  # U1 (his neighbours in it), as shown in round 2
    complaints: list[int] = dataclasses.field(default_factory=list)
    senders: list[int] = dataclasses.field(default_factory=list)  # U1', the users he masked with
    keys: bytes = b""  # the digest of U1''s keys he masked with (:func:`keys_digest`)
    signed: bytes = b""  # the digest of the statement he signed (:func:`signed_lists`)
    graph_seed: bytes = b""  # the signed roster's (a neighbour graph's order); empty on the complete graph

    @property
    def checked(self) -> set[int]:
        """The dealers whose shares he holds, checked against their commitments."""
        return set(self.dealers) - set(self.complaints) - {self.index}

    def to_bytes(self) -> bytes:
        head = json.dumps({"version": VERSION, "index": self.index, "answered": self.answered,
                           "elements": 0 if self.vector is None else int(self.vector.size),
                           "held": self.held is not None, "dealers": self.dealers, "complaints": self.complaints,
                           "senders": self.senders, "keys": self.keys.hex(), "signed": self.signed.hex(),
                           "graph_seed": self.graph_seed.hex()}).encode()
        body = b"" if self.vector is None else (np.asarray(self.vector, dtype="<u8").tobytes() +
                                                shamir.pack(self.backup))
        held = b"" if self.held is None else shamir.pack(self.held)
        return struct.pack("<I", len(head)) + head + self.secret + body + held

    @classmethod
    def from_bytes(cls, raw: bytes) -> "UserState":
        row = 2 * LIMBS
        try:
            (size,) = struct.unpack_from("<I", raw)
            head = json.loads(raw[4:4 + size])
            secret, body = raw[4 + size:4 + size + SEED_BYTES], raw[4 + size + SEED_BYTES:]
            elements = head["elements"]
            assert head["version"] == VERSION and len(secret) == SEED_BYTES
            own = 8 * elements + row * shamir.SHARE_BYTES if elements else 0
            vector = np.frombuffer(body[:8 * elements], dtype="<u8").astype(np.uint64) if elements else None
            backup = shamir.unpack(body[8 * elements:own], row, "user state").reshape(2, LIMBS) if elements else None
            held = None
            if head["held"]:
                count = (len(body) - own) // shamir.SHARE_BYTES
                held = shamir.unpack(body[own:], count, "user state").reshape(-1, 2, LIMBS).astype(np.int32)
            else:
                assert len(body) == own
            return cls(head["index"], secret, vector, backup, head["answered"], held, head["dealers"],
                       head["complaints"], head["senders"], bytes.fromhex(head["keys"]), bytes.fromhex(head["signed"]),
                       bytes.fromhex(head.get("graph_seed", "")))
        except Exception:
            raise ParameterError("user state", f"a state written by UserState.to_bytes (version {VERSION})",
                                 f"{len(raw)} unreadable bytes") from None


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


def keys_digest(keys: Mapping[int, bytes]) -> bytes:
    """A digest of U1''s round-2 messages, their keys (user -> bytes): what a user masked with, bound into the lists he
    signs, so that a signature is for this task's keys only (they are fresh for each task)."""
    digest = hashlib.blake2b(digest_size=HASH_BYTES, person=b"privagg keys")
    for u in sorted(keys):
        digest.update(struct.pack("<I", u) + bytes(keys[u]))
    return digest.digest()


SIGNED_LISTS = b"privagg survivors"  # the context of a user's signature of the lists (core/identity.py)


def statement(senders: Sequence[int], survivors: Sequence[int], keys: bytes) -> bytes:
    """What a user of U2 signs in round 4 on the complete graph: U1', U2 and the digest of U1''s keys
    (:func:`keys_digest`)."""
    return identity.canonical({"senders": sorted(int(u) for u in senders),
                               "survivors": sorted(int(u) for u in survivors), "keys": keys.hex()})


def signed_lists(graph: neighbour_graph.Graph, senders: Sequence[int], survivors: Sequence[int], keys: bytes) -> bytes:
    """What a user of U2 signs in round 4, the same for every signer: on the complete graph :func:`statement` (the
    lists and the digest of U1''s keys he masked with); on a neighbour graph U1' and U2 as two bitmaps of n bits
    (n / 4 bytes), and no digest of keys. The digest would differ from user to user (each masks with his neighbours'
    keys only), and a digest over U1''s n keys would cost each user O(n k) bytes to build; it is not needed: each
    round-2 key reaches a user with its owner's signature, which his SDK checks under the owner's identity key in the
    organisation's roster, so the server cannot swap an honest user's key, and a dishonest owner who signed two keys
    learns from that nothing his collusion does not give him (docs/privacy.md, "Neighbour graphs"). What each user
    masked with is then fixed by U1' and the graph: his neighbours in U1' (:meth:`SharingUser._check_lists`).
    The neighbour-graph statement carries the graph's seed, which the organisation draws for the task and signs with
    its id in the roster: a signature of the same lists in another task (another seed) does not check here, whether
    or not its signer's identity key is the same (on the complete graph the digest of this task's keys binds it)."""
    if graph.complete:
        return statement(senders, survivors, keys)
    n = graph.n_users
    return b"privagg survivors v2" + graph.seed + struct.pack("<I", n) + bitmap(senders, n) + bitmap(survivors, n)


class SharingUser:
    """User ``index`` of a DPDS or DPDG task, one round at a time (module docstring): the role the service's users
    (:mod:`privagg.service.round_client`) and the simulator (:mod:`privagg.simulate.rounds`) run.

    ``min_survivors``: the task's; he reveals only for a release over at least as many users. ``rng=None`` (a
    real user) draws his secret from the OS and his coin, noise and Shamir polynomials from the secure
    generator; a seeded simulation passes a generator. ``state`` resumes a user saved with ``state.to_bytes()``.
    ``identity``: his Ed25519 private key (core/identity.py), which signs the lists in round 4.
    """

    def __init__(self, parameters: SharingParameters, index: int, min_survivors: int, rng: RNGLike = None,
                 state: UserState | None = None, identity: bytes | None = None) -> None:
        self.parameters, self.field, self.rng, self.identity = parameters, parameters.field, rng, identity
        self.min_survivors = check_min_survivors(parameters, min_survivors)
        self.threshold = threshold(parameters)
        index = check_integer("user index", index, 0, parameters.n_users - 1)
        if state is None:
            secret = secrets.token_bytes(SEED_BYTES) if rng is None else resolve(rng).bytes(SEED_BYTES)
            state = UserState(index, secret)
        elif state.index != index:
            raise ParameterError("user state", f"the state of user {index}", f"user {state.index}'s")
        self.state, self.index = state, index

    @property
    def graph(self) -> neighbour_graph.Graph:
        """The task's graph (:func:`task_graph`), from the seed he took in round 1."""
        return task_graph(self.parameters, self.state.graph_seed)

    def _secret(self, which: int) -> bytes:
        return derive_seed(self.state.secret, ("pair key", "mask")[which])

    def _expect(self, round_: int) -> None:
        if self.state.answered != round_ - 1:
            raise ParameterError("round", f"round {self.state.answered + 1} next (each round is answered once, "
                                 "in order)", f"round {round_}")

    def _strangers(self, users, what: str) -> None:
        """A ParameterError naming ``what`` if ``users`` holds anyone who is not his neighbour (or himself)."""
        strangers = sorted(set(users) - set(self.graph.holders(self.index)))
        if strangers:
            raise ParameterError(what, f"user {self.index}'s neighbours on the task's graph (degree "
                                 f"{self.graph.degree})", f"users {strangers[:5]}, who are not")

    def advertise(self, value: int, graph_seed: bytes | None = None) -> Outbox:
        """Round 1: his commitments to each holder's shares (his neighbours' and his own), for the server, and a
        backup for every neighbour (seal each to its recipient). ``graph_seed``: the signed roster's, on a neighbour
        graph (his SDK puts it there; never the server's word)."""
        p = self.parameters
        self._expect(1)
        self.state.graph_seed = b"" if graph_seed is None else bytes(graph_seed)
        holders = self.graph.holders(self.index)
        generator = resolve(self.rng)
        vector = user_vectors(p, np.array([value]), generator)[0]
        shares = deal(self._secret(PAIR_KEY) + self._secret(MASK_SEED), self.threshold, holders, generator)
        shares = shares.reshape(len(holders), 2, LIMBS)
        own = self.graph.slot(self.index, self.index)
        self.state.vector, self.state.backup, self.state.answered = vector, shares[own], 1
        committed = encode(p, COMMITMENTS, self.index, SERVER, dealt_commitments(self.index, shares, holders))
        return Outbox(committed, {k: encode(p, BACKUP, self.index, k, shares[slot])
                                  for slot, k in enumerate(holders) if k != self.index})

    def check(self, commitments: Mapping[int, bytes], backups: Mapping[int, bytes | None]) -> Outbox:
        """Round 2: his pair key's public half and his mask seed's hash, followed by his complaints, given the
        commitments each dealer of U1 among his neighbours made to his shares (``commitments``: dealer -> the
        server's copy, which his SDK checked under the dealer's signature of the backup, :func:`bound`) and the
        backups they sent him (None: one his SDK could not open). A dealer whose backup does not open or decode, or
        does not match its commitments is complained about; the others' shares are kept for round 5. Refused (a
        ParameterError, nothing sent) if either names a user who is not his neighbour, or a backup is missing: the
        server took no round-1 message without one to each neighbour, so it withholds it (a complaint would blame
        the dealer for the server's doing)."""
        self._expect(2)
        p, graph = self.parameters, self.graph
        dealers = self._check_list(commitments, "round-1 senders")
        self._strangers(dealers, "round-1 senders")
        self._strangers(backups, "backups")
        withheld = sorted(set(dealers) - set(backups) - {self.index})
        if withheld:
            raise ParameterError("backups", "a backup from each round-1 sender among his neighbours (the server takes "
                                 "no round-1 message without them)", f"none from users {withheld[:5]}: the server "
                                 "withheld them")
        complaints = []
        held = np.zeros((len(graph.holders(self.index)), 2, LIMBS), dtype=np.int32)
        for u in dealers:
            if u == self.index:
                continue
            committed = decode(p, commitments[u], (COMMITMENT,), u, self.index).payload
            try:
                shares = decode(p, backups[u], (BACKUP,), u, self.index).payload
            except ParameterError:
                complaints.append(u)
                continue
            if any(commitment(u, self.index, s, shares[s]) != committed[s * HASH_BYTES:(s + 1) * HASH_BYTES]
                   for s in (PAIR_KEY, MASK_SEED)):
                complaints.append(u)
            else:
                held[graph.slot(self.index, u)] = shares
        self.state.held, self.state.dealers, self.state.complaints, self.state.answered = held, dealers, complaints, 2
        key = encode(p, ADVERTISE, self.index, SERVER,
                     _public_key(self._secret(PAIR_KEY)) + _seed_hash(self._secret(MASK_SEED)))
        return Outbox(key + encode(p, COMPLAINTS, self.index, SERVER, complaints), {})

    def _check_list(self, users: Sequence[int], what: str) -> list[int]:
        """``users`` ascending, each a user of the task, each once (a ParameterError naming ``what``): checked in
        numpy when every one is an int in range (n of them in rounds 4-5), one by one otherwise (to name the first
        bad one)."""
        try:  # a server's None or number is refused here, not a TypeError in the round
            users = list(users)
        except TypeError:
            raise ParameterError(what, "a list of users", type(users).__name__) from None
        if all(type(u) is int for u in users):
            ranked = np.array(users, dtype=np.int64)
            if not ranked.size or (ranked.min() >= 0 and ranked.max() < self.parameters.n_users):
                listed = np.unique(ranked).tolist()
                if len(listed) != len(users):
                    raise ParameterError(what, "distinct users", "a user listed twice")
                return listed
        listed = sorted({check_integer(what, u, 0, self.parameters.n_users - 1) for u in users})
        if len(listed) != len(users):
            raise ParameterError(what, "distinct users", "a user listed twice")
        return listed

    def masked_sum(self, keys: Mapping[int, bytes]) -> Outbox:
        """Round 3: y_i, given the pair keys of U1' among his neighbours (``keys``: user to his round-2 message,
        himself among them)."""
        return masked_sums([self], [keys])[0]

    def _users(self, listed: Sequence[int] | bytes, what: str) -> list[int]:
        """A list of users as the server gave it: a list (checked), or (on a neighbour graph) a USERS message, its
        bitmap, whose set bits are distinct users of the task, ascending, as decoded (n of them: not checked again)."""
        if isinstance(listed, (bytes, bytearray)):
            return decode(self.parameters, listed, (USERS,), SERVER, self.index).payload
        return self._check_list(listed, what)

    def _check_lists(self, senders: Sequence[int] | bytes, survivors: Sequence[int] | bytes
                     ) -> tuple[list[int], list[int]]:
        """U1' and U2 (lists, or USERS messages), checked: his neighbours in U1' the users he masked with, U2 within
        U1', naming him, at least the task's minimum."""
        senders, survivors = self._users(senders, "round-1 senders"), self._users(survivors, "survivors")
        sent = set(senders)
        if [u for u in self.graph.holders(self.index) if u in sent] != self.state.senders:
            raise ParameterError("round-1 senders", f"the {len(self.state.senders)} users he masked with (his "
                                 "neighbours in it)", f"{len(senders)} others")
        if self.index not in survivors:
            raise ParameterError("survivors", f"a list naming user {self.index}, who sent his masked sum (revealing "
                                 "his pair key now would reveal his vector)", "a list without him")
        if not sent.issuperset(survivors):
            raise ParameterError("survivors", "round-1 senders only", sorted(set(survivors) - sent)[:5])
        if len(survivors) < self.min_survivors:
            raise ParameterError("survivors", f"at least {self.min_survivors} (the task's minimum)", len(survivors))
        return senders, survivors

    def consistency(self, senders: Sequence[int], survivors: Sequence[int]) -> Outbox:
        """Round 4: his signature of U1' (``senders``), U2 (``survivors``) and, on the complete graph, the digest of
        U1''s keys (:func:`signed_lists`), with his identity key; refused (a ParameterError, nothing sent) for lists
        he would not reveal for (:meth:`reveal`)."""
        self._expect(4)
        if self.identity is None:
            raise ParameterError("identity", "the user's Ed25519 private key (32 bytes), which signs the survivor "
                                 "lists in round 4", None)
        signed = signed_lists(self.graph, *self._check_lists(senders, survivors), self.state.keys)
        signature = identity.sign(self.identity, SIGNED_LISTS, signed)
        self.state.signed, self.state.answered = hashlib.blake2b(signed, digest_size=HASH_BYTES).digest(), 4
        return Outbox(encode(self.parameters, SIGNATURE, self.index, SERVER, signature), {})

    def reveal(self, senders: Sequence[int], survivors: Sequence[int], signatures: Mapping[int, bytes],
               identities: Mapping[int, bytes]) -> Outbox:
        """Round 5: his shares of the mask seeds of U2 (``survivors``) and of the pair keys of E = U1' \\ U2, for the
        users of U1' whose secrets he holds (his neighbours and himself), given U1' (``senders``), the round-4
        signatures the server received from the users within k places of him on the cycle (user -> message) and the
        signers' identity keys (which his SDK checks against the organisation's roster).

        Refused (a ParameterError, and nothing to send) unless the lists are the ones he signed and, for each user
        whose share he reveals, at least t valid signatures of them came from that user's holders in U2 (his
        neighbours and himself: on the complete graph, t from distinct users of U2): else the server showed other
        users other lists (docs/privacy.md, "Neighbour graphs", (d)). Refused also if a signature comes from
        farther than k places, if he is not in U2 (he sent y_i: his pair key must stay his), if U2 is not within U1'
        or leaves fewer survivors than the task's minimum."""
        self._expect(5)
        graph = self.graph
        senders, survivors = self._check_lists(senders, survivors)
        signed = signed_lists(graph, senders, survivors, self.state.keys)
        if hashlib.blake2b(signed, digest_size=HASH_BYTES).digest() != self.state.signed:
            raise ParameterError("survivors", "the lists he signed in round 4", "other lists: the server showed "
                                 "different survivor lists")
        far = sorted(set(signatures) - set(graph.near(self.index, 2 * graph.half)))
        if far:
            raise ParameterError("signatures", f"signatures of the users within {graph.degree} places of user "
                                 f"{self.index} on the task's graph", f"signatures of users {far[:5]}")
        kept, owners = set(survivors), self.state.senders
        need = np.full(len(owners), self.threshold)  # each owner's signatures still wanted, from his holders
        candidates = sorted(set(signatures) & kept & set(identities))
        order = np.argsort(graph.distance(self.index, candidates), kind="stable")  # the closest hold the most
        for v in (candidates[j] for j in order):  # until each owner has t valid
            holds = graph.distance(v, owners) <= graph.half  # v holds a share of each such owner's secrets
            if not np.any(holds & (need > 0)):
                continue
            signature = decode(self.parameters, signatures[v], (SIGNATURE,), v, SERVER).payload
            if identity.verify(identities[v], signature, SIGNED_LISTS, signed):
                need -= holds
                if np.all(need <= 0):
                    break
        if np.any(need > 0):
            short = [u for u, left in zip(owners, need.tolist()) if left > 0]
            raise ParameterError("signatures", f"at least t = {self.threshold} valid signatures of the lists he "
                                 "signed from the holders of each secret he reveals a share of (on the complete "
                                 "graph, from distinct survivors)", f"fewer for users {short[:5]} "
                                 f"({len(signatures)} signatures): the server showed different survivor lists (or "
                                 "forged signatures); nothing was revealed")
        tags = np.array([MASK_SEED if u in kept else PAIR_KEY for u in owners], dtype=np.int64)
        rows = np.empty((len(owners), LIMBS), dtype=np.int64)
        for row, (u, tag) in enumerate(zip(owners, tags)):
            rows[row] = (self.state.backup if u == self.index else self.state.held[graph.slot(self.index, u)])[tag]
        self.state.answered = 5
        return Outbox(encode(self.parameters, REVEAL, self.index, SERVER,
                             Revealed(np.array(owners, dtype=np.int64), tags, rows)), {})

    def exclusion(self, commitments: Mapping[int, bytes], keys: Mapping[int, bytes],
                  openings: Mapping[int, bytes]) -> Outbox:
        """Round 6, run only when the reveal round proved dealers inconsistent: for each such dealer u among his
        neighbours, given his round-1 message (``commitments``), his round-2 message (``keys``; both signed by him,
        which his SDK checks against the signed roster) and the server's openings, his pair seeds with u
        (:meth:`PairShares.seeds`), so that the server removes his terms with u and releases without u.

        Refused (a ParameterError, nothing sent) unless every proof holds (:func:`check_proof`), each about a
        dealer he masked with other than himself: a server that accused an honest survivor falsely would get all
        his pair terms, and with his mask seed's shares revealed in round 5, his vector (docs/privacy.md, "The
        exclusion round"). A user who masked (round 3) answers it once, whatever he did in rounds 4-5."""
        p = self.parameters
        if not 3 <= self.state.answered <= 5:
            raise ParameterError("round", "round 6 once, after his masked sum (round 3)",
                                 f"round 6 after round {self.state.answered}")
        dealers = self._check_list(openings, "inconsistent dealers")
        if not dealers or sorted(commitments) != dealers or sorted(keys) != dealers:
            raise ParameterError("proofs", "each accused dealer's round-1 and round-2 messages and openings",
                                 f"messages of {sorted(commitments)[:5]} and {sorted(keys)[:5]}, openings of "
                                 f"{dealers[:5]}")
        for u in dealers:
            if u == self.index or u not in self.state.senders:
                raise ParameterError("inconsistent dealers", f"users user {self.index} masked with, not himself", u)
            check_proof(p, u, commitments[u], keys[u], openings[u], self.graph)
        pair_shares = PairShares(p, self._secret(PAIR_KEY))
        seeds = {u: b"".join(pair_shares.seeds(decode_checked(p, keys[u], u)[0][:KEY_BYTES], self.index, u))
                 for u in dealers}
        self.state.answered = 6
        return Outbox(encode(p, PAIR_SEEDS, self.index, SERVER, seeds), {})


def masked_sums(users: Sequence[SharingUser], keys: Mapping[int, bytes] | Sequence[Mapping[int, bytes]]
                ) -> list[Outbox]:
    """Round 3 for a batch of users of one task (a device is a batch of one), given each one's pair keys of U1' (his
    neighbours' and his own; one mapping: the same for every user): each user's y_i = x_i - sum_j s_ij + sum_j s_ji +
    b_i over j his neighbours in U1'.
    Users i and j of the batch who were shown the same two keys agree on the same secret and derive the same
    (s_ij, s_ji) (X25519 is symmetric): the batch derives each such pair once, for both, and each key message is
    decoded once. What each user sends is what he would send alone. A user refuses (ParameterError) keys of users
    who are not his neighbours, or a dealer whose backup he lacks or complained about (round 2): he never masks with
    him; and fewer than t keys, himself included (t_k on a neighbour graph): shown his own key alone he would send
    y_i = x_i + b_i, and the others, shown the true lists, reveal b_i (a reviewer's attack). With t or more, the
    server needs, for each j shown, s_ij from a colluder or j named a dropout, and it cannot name that many
    without leaving fewer than t revealers of b_i (he, shown other lists than theirs, reveals nothing): t > (n + D)
    / 2 on the complete graph, condition (e) on a neighbour graph (docs/privacy.md, "A list too short to
    mask with"). An honest run shows him fewer only when b_i could not be rebuilt anyway."""
    if not users:
        return []
    p, field = users[0].parameters, users[0].field
    keys = [keys] * len(users) if isinstance(keys, Mapping) else keys
    batch = {u.index: (u, k) for u, k in zip(users, keys)}
    senders = {}
    for user, shown in zip(users, keys):
        user._expect(3)
        listed = senders[user.index] = user._check_list(shown, "round-1 senders")
        if user.index not in listed:
            raise ParameterError("round-1 senders", f"a list naming user {user.index}, who advertised",
                                 "a list without him")
        user._strangers(listed, "round-1 senders")
        if len(listed) < user.threshold:
            raise ParameterError("round-1 senders", f"at least t = {user.threshold} users to mask with, himself "
                                 "included (fewer leave his masked sum open to a server that names the others "
                                 "dropouts)", f"{len(listed)}: the server showed him too few keys")
        unchecked = sorted(set(listed) - user.state.checked - {user.index})
        if unchecked:
            raise ParameterError("round-1 senders", f"dealers whose backups user {user.index} checked", f"users "
                                 f"{unchecked[:5]}, whose backups he complained about or lacks (the server should "
                                 "have excluded them)")
    public: dict[tuple[int, bytes], bytes] = {}

    def key_of(j: int, raw: bytes) -> bytes:
        if (j, raw) not in public:
            public[j, raw] = decode(p, raw[:KEY_MESSAGE], (ADVERTISE,), j, SERVER, agreed=True).payload[:KEY_BYTES]
        return public[j, raw]

    def shared(i: int, j: int) -> bool:  # both in the batch, each shown the other's key as the other was shown it
        if j not in batch:
            return False
        mine, theirs = batch[i][1], batch[j][1]
        return mine is theirs or (i in theirs and theirs[i] == mine[i] and theirs[j] == mine[j])

    digests: list[tuple[Mapping[int, bytes], bytes]] = []  # the complete graph's: each inbox's keys digested once
    totals = {i: u.state.vector.copy() for i, (u, _) in batch.items()}
    for i, (user, shown) in batch.items():
        pair_shares = PairShares(p, user._secret(PAIR_KEY))
        for j in senders[i]:
            if j == i or (j < i and shared(i, j)):  # himself, or a pair the batch derived for j already
                continue
            mine, theirs = pair_shares(key_of(j, shown[j]), i, j)  # s_ij, s_ji
            totals[i] = field.add(field.sub(totals[i], mine), theirs)
            if shared(i, j):
                totals[j] = field.add(field.sub(totals[j], theirs), mine)
    out = []
    for i, (user, shown) in batch.items():
        digest = b""
        if user.graph.complete:
            digest = next((d for keys_, d in digests if keys_ is shown or keys_ == shown), None)
            if digest is None:
                digests.append((shown, digest := keys_digest(shown)))
        user.state.answered, user.state.senders, user.state.keys = 3, senders[i], digest
        out.append(Outbox(encode(p, MASKED_SUM, i, SERVER, field.add(totals[i], mask(p, user._secret(MASK_SEED)))),
                          {}))
    return out


def answer(users: Sequence[SharingUser], round_: Round, inboxes: Sequence[dict]) -> list[Outbox]:
    """A round over a batch of users (:attr:`MultiRound.answer`): round 3's masked sums derived once per pair when
    the users were given the same keys and none refuses them (:func:`masked_sums`), every other round one user at
    a time (None for a user who refuses)."""
    if round_.name == "masked_sum" and inboxes:
        try:
            return masked_sums(users, [inbox["keys"] for inbox in inboxes])
        except ParameterError:  # a user refuses (masked_sums checks them all before any answers): one at a time
            pass
    return answer_each(users, round_, inboxes)


def survivors_parameters(parameters: SharingParameters, survivors: int) -> SharingParameters:
    """The parameters of the release over ``survivors`` of the n users (docs/privacy.md, "Dropouts in DPDS and
    DPDG"): n' = survivors users; the (1 - G) n users who may not follow the protocol all counted among them
    (honest fraction (n' - (n - ceil(G n))) / n'); the sampling family's data condition stays stated of the n
    enrolled users (``dropouts`` = n - n'), which leaves every category ceil(beta n) - (n - n') of the survivors
    at least; DPDG's noise that of the honest survivors. The sampling probability or the noise variance is the
    task's: only the users change. The neighbour graph is the task's, of its n users (the release states it from the
    task's parameters): the survivors' parameters have none."""
    n = parameters.n_users
    honest = survivors - (n - parameters.honest_users)
    if survivors == n:  # no dropouts: the task's own parameters
        return parameters
    if not 2 <= survivors <= n or honest < 1:
        raise ParameterError("survivors", f"in [2, {n}] and more than the {n - parameters.honest_users} users who "
                             "may not follow the protocol", survivors)
    dropped = {"dropouts": parameters.dropouts + n - survivors} if isinstance(parameters, SamplingParameters) else {}
    return dataclasses.replace(parameters, n_users=survivors, honest_fraction=honest / survivors, degree=None,
                               graph_dropouts=0.0, **dropped)


def survivors_privacy(task: SharingParameters, survivors: int, who: str, detail: str, notes: Sequence[str] = (),
                      seed_digest: str = "") -> PrivacyDescription:
    """The guarantee of a release over ``survivors`` of ``task``'s n users: the mechanism of
    :func:`survivors_parameters` with its delta at the calibrated epsilon, plus a neighbour graph's failure terms at
    the users removed (its colluding ones and the dropouts: :func:`~privagg.protocols.sharing_graph.graph_delta`);
    how the users share is stated of the task (the survivors' parameters have no graph). ``who`` names the survivors,
    ``detail`` who took part in which round, ``notes`` what else the release rests on, then the graph's statement
    (:func:`~privagg.protocols.sharing_graph.stated`, with its seed's ``seed_digest``)."""
    released = survivors_parameters(task, survivors)
    event = released.privacy.event
    if task.degree is not None:
        event = dataclasses.replace(event, assumptions=tuple(
            task.sharing_assumption if said == released.sharing_assumption else said for said in event.assumptions))
    removed = (task.n_users - task.honest_users) + (task.n_users - survivors)
    return PrivacyDescription.of(Survivors(event, released.delta_at(released.epsilon) + graph_delta(task, removed),
                                           task.n_users, survivors, who, detail,
                                           (*notes, *stated(task, seed_digest))))


def check_min_survivors(parameters: SharingParameters, min_survivors: int) -> int:
    """``min_survivors`` if a release over that many users can happen (at least the backups' threshold t of
    users to reveal, :func:`threshold`) and is valid (:func:`survivors_parameters`: more than the users who may
    not follow the protocol), else a ParameterError naming it."""
    if parameters.model != "secret_sharing":
        raise ParameterError("protocol", "dpds or dpdg (users who share among all users)", parameters.protocol)
    return checked_survivors(parameters, min_survivors, least_survivors(parameters))


def least_survivors(parameters: SharingParameters) -> int:
    """The fewest survivors a task may require: the backups' threshold t of users to reveal, and two honest users
    besides the n - ceil(G n) who may not follow the protocol (:func:`survivors_parameters`; on the complete graph t
    is all of these, on a neighbour graph t_k may be below them)."""
    return max(2, threshold(parameters), parameters.n_users - parameters.honest_users + 2)


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


# --- the protocol as data ----------------------------------------------------------------------------------

# A faithful simulation's costs, measured on 2 busy cores (load about 3.4): an X25519 agreement with its HKDF
# 50 us; a ChaCha20 expansion 56 us at N = 10 plus 0.03 us an element; a message encoded, relayed and decoded
# (a backup, a revealed entry) 12 us.
AGREEMENT_SECONDS, EXPANSION_SECONDS, ELEMENT_SECONDS, MESSAGE_SECONDS = 50e-6, 56e-6, 3e-8, 12e-6
# and (the same load, scaled from a run at load 10) an Ed25519 signature checked 140 us, made 80 us; a share's
# commitment made or checked 4 us
VERIFY_SECONDS, SIGN_SECONDS, COMMITMENT_SECONDS = 140e-6, 80e-6, 4e-6


def faithful_seconds(parameters: SharingParameters) -> float:
    """About what a faithful simulation of DPDS or DPDG without dropouts takes, with k the task's degree (n - 1 on
    the complete graph): each of the n k / 2 pairs agreed once and expanded twice (:func:`masked_sums`), each user's
    mask expanded twice (by him and by the server), n k backups and as many revealed entries made and read, each
    share's commitment made, checked by its holder and by the server (3 n (k + 1)), and each user's signature made,
    checked by the server and by each survivor until t are valid (on a neighbour graph, until each secret he holds
    has t_k from its holders: up to the 2 k + 1 users within k places)."""
    n, N, k = parameters.n_users, parameters.domain_size, task_degree(parameters)
    expansion = EXPANSION_SECONDS + N * ELEMENT_SECONDS
    pairs = n * k / 2
    verified = threshold(parameters) if k == n - 1 else min(n, 2 * k + 1)
    return (pairs * (AGREEMENT_SECONDS + 2 * expansion) + 2 * n * expansion + 2 * n * k * MESSAGE_SECONDS +
            3 * n * (k + 1) * COMMITMENT_SECONDS + n * (SIGN_SECONDS + (1 + verified) * VERIFY_SECONDS))


HELD_BYTES = 150  # a message held in a simulation besides its bytes: the bytes object and its slot in a dict


def faithful_bytes(parameters: SharingParameters) -> int:
    """About the memory a faithful simulation holds: every backup, revealed entry and commitment relayed to its
    holder (n k of each, k the task's degree), the users' checked shares, the keys with their commitments, the masked
    sums and signatures, the users' vectors and backup shares."""
    n, N, k = parameters.n_users, parameters.domain_size, task_degree(parameters)
    entry = message_bytes(parameters, REVEAL, 1) - HEADER.size
    relayed = message_bytes(parameters, BACKUP) + entry + message_bytes(parameters, COMMITMENT) + 3 * HELD_BYTES
    held = 2 * LIMBS * 4  # a dealer's checked shares, in his holder's state
    return n * k * (relayed + held) + n * (
        message_bytes(parameters, ADVERTISE) + message_bytes(parameters, COMMITMENTS) +
        2 * message_bytes(parameters, MASKED_SUM) + message_bytes(parameters, SIGNATURE) + 8 * N + 4 * HELD_BYTES)
