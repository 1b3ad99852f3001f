"""The public tasks of the multi-round protocols, as every party (and the users' SDKs) load them: light (numpy
and the protocols; no service framework), so that a device's SDK imports no server.

* :class:`SharingTask`: a DPDS or DPDG task of the sharing server.
* :class:`TSSTask` (what S1 serves users) and :class:`SecondTask` (what S2 serves S1): a TSS or TSS' task.

Every field is checked on load, the parameters are loaded (never recalibrated), and the HPKE suite is named.

A task's trust anchor is its organisation's Ed25519 key, pinned on the users' devices: it signs the task's document
(:func:`task_context`) and, once enrollment is complete, its roster (:class:`SignedRoster`); each message a user
posts carries his signature under the identity key the roster lists (:func:`message_context`).
"""

from __future__ import annotations

import base64
import binascii
import functools
import hashlib
import json
from dataclasses import dataclass

from ..core import identity, merkle
from ..errors import ParameterError
from ..protocols.roles import Round
from ..protocols.sharing_messages import BACKUP, message_bytes as sharing_message_bytes
from ..protocols.sharing_parties import check_min_survivors as check_sharing_survivors, survivors_parameters, threshold
from ..protocols.two_server_messages import RECOVERY, SUMS, check_min_survivors, message_bytes
from ..core.identity import KEY_BYTES as IDENTITY_BYTES
from .tasks import KEMS, TAG_BYTES, TASK_ID_BYTES, is_hex_id

KEM = "x25519"  # the users' keys and every seal between parties of these protocols


def _check_id(field: str, value) -> None:
    if not is_hex_id(value):
        raise ParameterError(field, f"{2 * TASK_ID_BYTES} lowercase hexadecimal characters", value)


ROUND_SECONDS_LEAST = 10.0  # what the command line takes: a deadline users' devices can meet


def check_round_deadline(value, field: str = "round-seconds") -> float:
    """A round's deadline as an operator gives it (``task create``, ``demo-service``): at least
    :data:`ROUND_SECONDS_LEAST` seconds, where 1e-300 or 0.001 was taken and failed the task as the roster was
    signed (a reviewer's finding); the operator's close-round ends a round early once everyone answered."""
    _check_round_seconds(value)
    if value < ROUND_SECONDS_LEAST:
        raise ParameterError(field, f"at least {ROUND_SECONDS_LEAST:g} seconds, a deadline the users' devices can "
                             "meet (privagg's close-round ends a round early once everyone answered)", value)
    return float(value)


def _check_round_seconds(value) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value <= 7 * 86_400:
        raise ParameterError("round_seconds", "a number of seconds in (0, 604800]", value)


def _load(data, fields: set[str], what: str, verify: bool):
    from ..protocols.registry import load_parameters

    if not isinstance(data, dict) or not fields <= set(data):
        raise ParameterError(what, f"a JSON object with {', '.join(sorted(fields))}", type(data).__name__)
    if data.get("suite", KEMS[KEM][0]) != KEMS[KEM][0]:
        raise ParameterError(f"{what}.suite", KEMS[KEM][0], data.get("suite"))
    return load_parameters(data["parameters"], verify=verify)


def _key(field: str, text, size: int = KEMS[KEM][1], kind: str = KEM) -> bytes:
    try:
        raw = base64.b64decode(text, validate=True) if isinstance(text, str) else b""
    except (binascii.Error, ValueError):
        raw = b""
    if len(raw) != size:
        raise ParameterError(field, f"base64 of a raw {kind} public key ({size} bytes)",
                             f"{len(text) if isinstance(text, str) else type(text).__name__} characters")
    return raw


def _identity_key(field: str, value) -> None:
    """S2's identity key, or None: a task of an older release (before S2 attested elections), whose round 1 cannot
    close and whose reporters refuse round 2; one past round 2 goes on."""
    if value is not None and (not isinstance(value, bytes) or len(value) != IDENTITY_BYTES):
        raise ParameterError(field, f"{IDENTITY_BYTES} bytes (S2's raw Ed25519 identity key for the task, which "
                             "attests the election)", len(value) if isinstance(value, bytes) else type(value).__name__)


def task_context(task_id: str) -> bytes:
    """What the organisation's signature of a task's document (``canonical(task.to_dict())``) binds."""
    return b"privagg task " + task_id.encode()


def message_context(task_id: str, number: int, sender: int, recipient: int | None) -> bytes:
    """What a user's signature of a message he posts binds: the task, the round's number, the sender and the
    recipient (None: the round's server; the signed bytes are then his message to it, empty in a round that has
    none), so that no signed message is valid in another task, round, or mouth, or to another recipient."""
    to = "server" if recipient is None else f"user {recipient}"
    return f"privagg message {task_id} round {number} from user {sender} to {to}".encode()


def check_task(data: dict, signature, organisation_key: bytes, task_id: str) -> None:
    """That ``data`` (a task's public JSON as served) is the task ``task_id`` its organisation signed: a
    ParameterError naming ``task.signature`` (or ``task.task_id``) otherwise."""
    if not isinstance(data, dict) or data.get("task_id") != task_id:
        raise ParameterError("task.task_id", f"the task asked for, {task_id}", shown_id(data))
    identity.check(organisation_key, _signature(signature, "task.signature"), task_context(task_id), identity.canonical(data), "task.signature",
                   "the organisation (the task's document, its servers' keys included)")


def shown_id(data) -> str:
    return str(data.get("task_id"))[:40] if isinstance(data, dict) else type(data).__name__


def _signature(text, field: str) -> bytes:
    try:
        raw = base64.b64decode(text, validate=True) if isinstance(text, str) else b""
    except (binascii.Error, ValueError):
        raw = b""
    if len(raw) != identity.SIGNATURE_BYTES:
        raise ParameterError(field, f"base64 of an Ed25519 signature ({identity.SIGNATURE_BYTES} bytes)",
                             "none" if text is None else "something else")
    return raw


GRAPH_SEED_BYTES = 32
ROSTER_TREE = "RFC 9162 SHA-256"  # the Merkle tree hashing the signed root is of (core/merkle.py)


def roster_leaf(task_id: str, index: int, keys: tuple[bytes, bytes] | None) -> bytes:
    """The Merkle leaf of roster index ``index`` of task ``task_id``: the task, the index and, for a user the
    organisation signed, his identity key and X25519 key (fixed sizes); for one it left out, a marker that he has
    none, so that a server cannot hide a user (his index is in the tree either way)."""
    head = b"privagg roster entry v1\x00" + bytes.fromhex(task_id) + index.to_bytes(4, "big")
    return head + (b"\x00" if keys is None else b"\x01" + bytes(keys[0]) + bytes(keys[1]))


@dataclass(frozen=True)
class RosterHead:
    """What the organisation signs of a task's roster (:class:`SignedRoster`): the task, the roster's size n (every
    index enrolled, those left out included), the graph seed and the root of the Merkle tree whose leaf i is
    :func:`roster_leaf` of index i (:mod:`privagg.core.merkle`). A device checks the few entries it needs against
    it, each with its inclusion proof (:meth:`proven`): k entries and k ceil(log2 n) hashes on a graph of degree k
    (docs/privacy.md, "The roster a device downloads")."""

    task_id: str
    size: int
    graph_seed: bytes
    root: bytes
    signature: bytes = b""

    @property
    def document(self) -> bytes:
        seed = {"graph_seed": self.graph_seed.hex()} if self.graph_seed else {}
        return identity.canonical({"task_id": self.task_id, "size": self.size, "root": self.root.hex(),
                                   "tree": ROSTER_TREE, **seed})

    def verify(self, organisation_key: bytes) -> "RosterHead":
        identity.check(organisation_key, self.signature, SignedRoster.context(self.task_id), self.document,
                       "roster.signature", "the organisation")
        return self

    @classmethod
    def parse(cls, document, signature: bytes, task_id: str) -> "RosterHead":
        """The head of the document served (its signature not checked yet: :meth:`verify`); a ParameterError
        naming ``roster`` (``roster.task_id``) otherwise."""
        try:
            data = json.loads(document)
            size, seed, root = data["size"], bytes.fromhex(data.get("graph_seed", "")), bytes.fromhex(data["root"])
            if type(size) is not int or not 0 < size <= 10**7 or len(seed) not in (0, GRAPH_SEED_BYTES) or len(
                    root) != merkle.HASH_BYTES or data.get("tree") != ROSTER_TREE:
                raise ValueError(size)
        except (TypeError, KeyError, ValueError, AttributeError) as err:
            raise ParameterError("roster", "the organisation's signed roster ({\"roster\": its document, "
                                 "\"signature\"})", f"something else ({type(err).__name__})") from None
        if data.get("task_id") != task_id:
            raise ParameterError("roster.task_id", f"the task's, {task_id}", shown_id(data))
        return cls(task_id, size, seed, root, signature)

    def proven(self, served, asked) -> dict[int, tuple[bytes, bytes] | None]:
        """The entries ``served`` (a list of ``{"user", "identity_key", "public_key", "proof"}``: the keys absent
        for a user the organisation left out) for the users ``asked``, each checked against the signed root: index
        -> (identity key, X25519 key), or None for one left out. A ParameterError naming the field for an entry
        without a valid inclusion proof (a swapped key, another task's entry, a proof for another index, truncated
        or extended), an entry twice, one not asked for or one asked for and missing."""
        if not isinstance(served, list):
            raise ParameterError("roster.entries", "a list of entries with their inclusion proofs",
                                 type(served).__name__)
        out: dict[int, tuple[bytes, bytes] | None] = {}
        for e in served:
            user = e.get("user") if isinstance(e, dict) else None
            field = f"roster.entries[{user!r}]"
            if type(user) is not int or user not in asked or user in out:
                raise ParameterError(field, "one entry for each user asked for, each once",
                                     "an entry twice" if user in out else "an entry not asked for")
            keys = (e.get("identity_key"), e.get("public_key"))
            if keys == (None, None):
                keys = None
            elif not all(isinstance(k, bytes) for k in keys) or tuple(map(len, keys)) != (IDENTITY_BYTES,
                                                                                          KEMS[KEM][1]):
                raise ParameterError(f"{field}.public_key", f"an Ed25519 and an X25519 key ({IDENTITY_BYTES} "
                                     f"bytes each)", "something else")
            proof = e.get("proof")
            if not isinstance(proof, list) or not merkle.verify(roster_leaf(self.task_id, user, keys), user,
                                                                 self.size, proof, self.root):
                raise ParameterError(f"{field}.proof", "an inclusion proof of the entry under the roster's signed "
                                     "root (RFC 9162 audit path)", "one that does not check: the server altered "
                                     "the entry, or took it from another roster or index")
            out[user] = keys
        missing = sorted(set(asked) - set(out))
        if missing:
            raise ParameterError("roster.entries", "an entry for each user asked for",
                                 f"none for users {missing[:5]}: the server left them out")
        return out


@dataclass(frozen=True)
class SignedRoster:
    """A task's roster as its organisation signed it once enrollment was complete: each user it lists, his index,
    his identity key (Ed25519) and his X25519 key; those whose enrollment its tokens did not bind are left out
    (round-1 dropouts). The organisation signs its :class:`RosterHead`, the Merkle root of the n entries (``size``,
    default the largest index + 1) with the task and graph seed; ``document`` is the signed bytes, ``signature``
    the organisation's. The servers keep it whole; a device gets the entries he needs with their inclusion proofs
    (:meth:`entries`), or, on the complete graph, the whole list (:meth:`to_dict`), whose root he recomputes.

    ``graph_seed``: 32 bytes the organisation draws when it signs, after every user enrolled (so after every key and
    every colluder is fixed): the public randomness that places DPDS and DPDG's users on their neighbour graph
    (docs/privacy.md, "Neighbour graphs"). It is signed with the roster, so the server cannot choose it; the
    organisation could, but it is already trusted for who the users are (it could enroll colluders of its own).
    Empty: the complete graph only."""

    task_id: str
    users: dict  # index -> (identity key, X25519 public key)
    signature: bytes
    graph_seed: bytes = b""
    size: int | None = None  # n: the roster's indices 0..n-1 (default: the largest listed + 1)

    def __post_init__(self) -> None:
        if self.size is None:
            object.__setattr__(self, "size", max(self.users, default=-1) + 1)
        if any(type(i) is not int or not 0 <= i < self.size for i in self.users):
            raise ParameterError("roster.users", f"indices in [0, {self.size})", sorted(self.users)[:5])

    @staticmethod
    def context(task_id: str) -> bytes:
        return b"privagg roster " + task_id.encode()

    @functools.cached_property
    def tree(self) -> merkle.Tree:
        """The Merkle tree of the n entries (:func:`roster_leaf`), built once."""
        return merkle.Tree([roster_leaf(self.task_id, i, self.users.get(i)) for i in range(self.size)])

    @property
    def head(self) -> RosterHead:
        return RosterHead(self.task_id, self.size, self.graph_seed, self.tree.root, self.signature)

    @property
    def document(self) -> bytes:
        return self.head.document

    def identities(self) -> dict[int, bytes]:
        """Each listed user's identity key (the rounds' ``state["identities"]``)."""
        return {i: key for i, (key, _) in self.users.items()}

    def verify(self, organisation_key: bytes) -> "SignedRoster":
        """The organisation's signature of the root of these entries, checked (ParameterError
        ``roster.signature``)."""
        self.head.verify(organisation_key)
        return self

    def entries(self, users) -> dict:
        """What a device asking for ``users`` (indices in [0, n)) is served: the signed head and each entry with
        its inclusion proof (:meth:`RosterHead.proven` checks them), as the binary body holds them."""
        def entry(i: int) -> dict:
            keys = self.users.get(i)
            return {"user": i, **({} if keys is None else {"identity_key": keys[0], "public_key": keys[1]}),
                    "proof": self.tree.proof(i)}

        return {"roster": self.document, "signature": self.signature, "entries": [entry(i) for i in users]}

    def to_dict(self) -> dict:
        b64 = base64.b64encode
        return {"roster": self.document.decode(), "signature": b64(self.signature).decode(),
                "users": [[i, b64(key).decode(), b64(public).decode()] for i, (key, public) in
                          sorted(self.users.items())]}

    @classmethod
    def from_dict(cls, data, task_id: str) -> "SignedRoster":
        """The whole roster ``GET /tasks/{id}/roster`` served for ``task_id``, its entries' root recomputed and
        checked against the signed head's (its signature not checked yet: :meth:`verify`)."""
        if not isinstance(data, dict):
            raise ParameterError("roster", "the organisation's signed roster ({\"roster\": its document, "
                                 "\"signature\", \"users\"})", type(data).__name__)
        head = RosterHead.parse(data.get("roster"), b"", task_id)
        signature = _signature(data.get("signature"), "roster.signature")
        try:
            users = {}
            for entry in data["users"]:
                index, key, public = entry
                if type(index) is not int or index in users:
                    raise ValueError(index)
                users[index] = (identity.public_text(key, "roster.users"), _key("roster.users", public))
            signed = cls(task_id, users, signature, head.graph_seed, head.size)
        except (TypeError, KeyError, ValueError) as err:
            raise ParameterError("roster", "the organisation's signed roster ({\"roster\": its document, "
                                 "\"signature\", \"users\"})", f"something else ({type(err).__name__})") from None
        if signed.tree.root != head.root:
            raise ParameterError("roster.users", "the entries whose Merkle root the organisation signed",
                                 "other entries: the server altered, added or left out one")
        return signed


def relay_info(round_: Round, task_id: str, sender: int, recipient: int) -> bytes:
    """HPKE's info for a message ``sender`` relays to ``recipient`` in ``round_`` (a DPDS backup, a TSS share): binds
    it to the round's relay, the task, the sender and the recipient."""
    return round_.relay_info + bytes.fromhex(task_id) + sender.to_bytes(4, "big") + recipient.to_bytes(4, "big")


def release_delta(parameters, survivors: int) -> float:
    """The delta a release over ``survivors`` of the task's n users states, at its epsilon: the parameters recomputed
    for them (:func:`~privagg.protocols.sharing_parties.survivors_parameters`: the n - survivors who dropped out may
    all have held one category; the users who may not follow the protocol all among the survivors), the worst case
    for that many dropouts (docs/privacy.md, "Dropouts in DPDS and DPDG"). It grows as the survivors fall (fewer
    holders and honest users to hide among), so a task's worst is at its ``min_survivors``. On a neighbour graph,
    plus its failure terms at the users removed (its colluding ones and the dropouts:
    :func:`~privagg.protocols.sharing_graph.graph_delta`), as the release adds them (a reviewer's finding: task
    create stated 0.000149 over 16 of 30 survivors on a graph of degree 2, whose terms there are 1)."""
    from ..protocols.sharing_graph import graph_delta

    removed = (parameters.n_users - parameters.honest_users) + (parameters.n_users - survivors)
    return min(1.0, survivors_parameters(parameters, survivors).delta_at(parameters.epsilon) +
               graph_delta(parameters, removed))


def survivors_for_target(parameters, least: int) -> int:
    """The fewest survivors, ``least`` to n, whose release keeps the task's target delta (as the release judges it,
    to 1e-9 relative): a binary search over :func:`release_delta`, which falls as they grow; n if none fewer does."""
    low, high = least, parameters.n_users  # the release over all n users keeps its calibrated delta
    while low < high:
        middle = (low + high) // 2
        if release_delta(parameters, middle) <= parameters.delta * (1 + 1e-9):
            high = middle
        else:
            low = middle + 1
    return low


def second_info(task_id: str, kind: int, sender: int, asked=None, counted=None) -> bytes:
    """HPKE's info for a message sealed to S2: binds it to S2's task, its kind (sums, recovery) and its sender, and
    a recovery to the (item, helper) pairs S1 asked him about (``asked``: item -> dropped helpers): S2 opens it
    with the pairs its hand-over's plan asks of him, so one that S1 asked about other helpers does not open. An S1
    that asks an item's reporters about different helpers, to have S2 add one reporter's shares up to his entry
    (a reviewer's attack), gets S2 nothing of theirs (docs/privacy.md, "Dishonest parties"). A helper's sums bind
    R2 and his numbers of reporters (``counted``: (R2's bitmap, the numbers of his items in order), by SHA-256): S2
    opens them only with the R2 and |R_j| it checked as round 3 closed (docs/privacy.md, "A helper's lists")."""
    pairs = b"".join(int(j).to_bytes(4, "big") + int(d).to_bytes(4, "big")
                     for j in sorted(asked or {}) for d in sorted(asked[j]))
    if counted is not None:
        bitmap, numbers = counted
        pairs += hashlib.sha256(bytes(bitmap) + b"".join(int(k).to_bytes(4, "big") for k in numbers)).digest()
    return b"privagg tss to S2 " + bytes.fromhex(task_id) + bytes([kind]) + sender.to_bytes(4, "big") + pairs


def counted_digest(survivors, reporters) -> bytes:
    """SHA-256 of R2 and each item's |R_j| as S1 named them to S2 as round 3 closed (S2 keeps it and holds the
    hand-over to it)."""
    return hashlib.sha256(json.dumps([sorted(survivors), list(reporters)]).encode()).digest()


def sealed_size(parameters, kind: int, entries: int) -> int:
    """Bytes of a sealed message of ``kind`` with ``entries`` entries: the message, HPKE's encapsulation and tag."""
    return message_bytes(parameters, kind, entries) + KEMS[KEM][2] + TAG_BYTES


@dataclass(frozen=True)
class SecondTask:
    """A TSS task as S2 serves it: public. ``organisation_key`` is the task's organisation's Ed25519 public key, given
    by S2's operator (never by S1): S2 checks S1's hand-over under it (the signed task and roster, and through the
    roster each sealed message's sender); None: an older release's task, whose hand-over S2 refuses."""

    task_id: str
    parameters: object
    min_survivors: int  # the fewest users (|R2|) a release may be over
    public_key: bytes  # S2's HPKE public key for this task (raw X25519)
    identity_key: bytes | None = None  # S2's Ed25519 identity key for the task (raw; None: an older release's)
    organisation_key: bytes | None = None  # the organisation's Ed25519 public key (raw; None: an older release's)

    def __post_init__(self) -> None:
        _check_id("task_id", self.task_id)
        check_min_survivors(self.parameters, self.min_survivors)
        if not isinstance(self.public_key, bytes) or len(self.public_key) != KEMS[KEM][1]:
            raise ParameterError("public_key", f"{KEMS[KEM][1]} bytes (a raw {KEM} public key)", f"{len(self.public_key) if isinstance(self.public_key, bytes) else type(self.public_key).__name__}")
        _identity_key("identity_key", self.identity_key)
        if self.organisation_key is not None and (not isinstance(self.organisation_key, bytes) or
                                                  len(self.organisation_key) != IDENTITY_BYTES):
            raise ParameterError("organisation_key", f"{IDENTITY_BYTES} bytes (the organisation's raw Ed25519 public "
                                 "key)", len(self.organisation_key) if isinstance(self.organisation_key, bytes) else
                                 type(self.organisation_key).__name__)

    def to_dict(self) -> dict:
        b64 = base64.b64encode
        return {"task_id": self.task_id, "parameters": self.parameters.to_dict(), "min_survivors": self.min_survivors,
                "public_key": b64(self.public_key).decode(), "kem": KEM, "suite": KEMS[KEM][0],
                **({} if self.identity_key is None else {"identity_key": b64(self.identity_key).decode()}),
                **({} if self.organisation_key is None else {"organisation_key": b64(self.organisation_key).decode()})}

    @classmethod
    def from_dict(cls, data: dict, verify: bool = True) -> "SecondTask":
        parameters = _load(data, {"task_id", "parameters", "min_survivors", "public_key"}, "second task", verify)
        return cls(data["task_id"], parameters, data["min_survivors"], _key("public_key", data["public_key"]),
                   _key("identity_key", data["identity_key"], IDENTITY_BYTES, "Ed25519") if "identity_key" in data
                   else None, _key("organisation_key", data["organisation_key"], IDENTITY_BYTES, "Ed25519")
                   if "organisation_key" in data else None)


MAX_SHARING_USERS = 10_000  # a served task's n (DPDS, DPDG: n (n - 1) backups on the complete graph, 1.6 x 10^10
# bytes at 10^4; TSS: about alpha^2 N n^2 shares)


@dataclass(frozen=True)
class TSSTask:
    """A TSS task as S1 serves it to users: public, with S2's task id, public key and identity key (a reporter checks
    S2's attestation of the election with it)."""

    task_id: str
    parameters: object
    round_seconds: float  # each round's deadline, from its start
    min_survivors: int  # the fewest users in R1 and R2 for the task to go on
    second_task_id: str
    second_public_key: bytes
    second_identity_key: bytes | None = None  # S2's Ed25519 identity key for the task (None: an older release's)

    def __post_init__(self) -> None:
        _check_id("task_id", self.task_id)
        _check_id("second_task_id", self.second_task_id)
        n = self.parameters.n_users
        if n > MAX_SHARING_USERS:
            raise ParameterError("n_users", f"at most {MAX_SHARING_USERS:,} for a served TSS task: its round 2 seals, "
                                 "relays and opens one share per reporter and helper of an item, about "
                                 f"{self.parameters.expected_shares:,.0f} at n = {n:,}; split the users into tasks of "
                                 "fewer (their releases add up)", n)
        check_min_survivors(self.parameters, self.min_survivors)
        _check_round_seconds(self.round_seconds)
        if not isinstance(self.second_public_key, bytes) or len(self.second_public_key) != KEMS[KEM][1]:
            raise ParameterError("second_public_key", f"{KEMS[KEM][1]} bytes", f"{len(self.second_public_key) if isinstance(self.second_public_key, bytes) else type(self.second_public_key).__name__}")
        _identity_key("second_identity_key", self.second_identity_key)

    def sealed_to(self, round_: Round, sender: int, inbox: dict) -> tuple[bytes, bytes]:
        """(S2's public key, HPKE's info) for ``sender``'s message of a round sealed to S2 (his helper sums, his
        recovery): bound to S2's task, the message's kind and the sender, a recovery also to the dropped helpers
        his ``inbox`` asked about, sums to the R2 and the numbers of reporters it shows him (:func:`second_info`)."""
        if round_.seal != "s2":
            raise ParameterError("round", "a round whose message is sealed to S2", round_.name)
        kind = {"sums": SUMS, "recover": RECOVERY}[round_.name]
        if kind == RECOVERY:
            return self.second_public_key, second_info(self.second_task_id, kind, sender, inbox["dropped"])
        listed = inbox["reporters"]
        return self.second_public_key, second_info(self.second_task_id, kind, sender, counted=(
            inbox["survivors"], [len(set(listed[j])) for j in sorted(listed)]))

    def to_dict(self) -> dict:
        return {"task_id": self.task_id, "parameters": self.parameters.to_dict(), "round_seconds": self.round_seconds,
                "min_survivors": self.min_survivors, "second_task_id": self.second_task_id,
                "second_public_key": base64.b64encode(self.second_public_key).decode(), "kem": KEM,
                "suite": KEMS[KEM][0], **({} if self.second_identity_key is None else {
                    "second_identity_key": base64.b64encode(self.second_identity_key).decode()})}

    @classmethod
    def from_dict(cls, data: dict, verify: bool = True) -> "TSSTask":
        parameters = _load(data, {"task_id", "parameters", "round_seconds", "min_survivors", "second_task_id",
                                  "second_public_key"}, "task", verify)
        attesting = data.get("second_identity_key")
        return cls(data["task_id"], parameters, data["round_seconds"], data["min_survivors"], data["second_task_id"],
                   _key("second_public_key", data["second_public_key"]),
                   None if attesting is None else _key("second_identity_key", attesting, IDENTITY_BYTES, "Ed25519"))




@dataclass(frozen=True)
class SharingTask:
    """A DPDS or DPDG task as every party knows it: public."""

    task_id: str
    parameters: object
    round_seconds: float  # each round's deadline, from its start
    min_survivors: int  # the fewest users a release may be over (check_min_survivors)

    def __post_init__(self) -> None:
        _check_id("task_id", self.task_id)
        n = self.parameters.n_users
        if n > MAX_SHARING_USERS:
            backups = n * (n - 1)
            raise ParameterError("n_users", f"at most {MAX_SHARING_USERS:,} for a served DPDS or DPDG task: each user "
                                 f"backs his keys up to every other, so n = {n:,} users would send {backups:,} sealed "
                                 f"backups ({backups * self.sealed_size / 1e9:,.0f} GB through the server) and agree "
                                 "as many shares; split the users into tasks of fewer (their releases add up)", n)
        check_sharing_survivors(self.parameters, self.min_survivors)
        _check_round_seconds(self.round_seconds)

    @property
    def threshold(self) -> int:
        """t: the revealed shares that rebuild a backed-up key (:func:`privagg.protocols.sharing_parties.threshold`)."""
        return threshold(self.parameters)

    @property
    def sealed_size(self) -> int:
        """Bytes of a sealed backup (each user sends one to every other): the message, HPKE's encapsulation and
        tag."""
        return sharing_message_bytes(self.parameters, BACKUP) + KEMS[KEM][2] + TAG_BYTES

    def to_dict(self) -> dict:
        return {"task_id": self.task_id, "parameters": self.parameters.to_dict(), "round_seconds": self.round_seconds,
                "min_survivors": self.min_survivors, "kem": KEM, "suite": KEMS[KEM][0]}

    @classmethod
    def from_dict(cls, data: dict, verify: bool = True) -> "SharingTask":
        parameters = _load(data, {"task_id", "parameters", "round_seconds", "min_survivors"}, "task", verify)
        return cls(data["task_id"], parameters, data["round_seconds"], data["min_survivors"])
