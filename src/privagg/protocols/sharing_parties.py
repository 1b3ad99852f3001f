"""DPDS and DPDG as separate parties: each user's rounds and the server's release, sans I/O, every message bytes.

Algorithm 2 (reference §2.3) has each user share his vector among all n users and send the sum of what he
received to the server. Real users drop out, so the parties here run the recovery derived in docs/privacy.md
("Dropouts in DPDS and DPDG"), in three rounds; the server (:mod:`privagg.service.sharing`) relays, sets the
deadlines and publishes who took part:

round 1, share
    User i makes his vector x_i (:meth:`SharingUsers.contributions`: his coin's one-hot vector, DPDS; the
    one-hot vector at scale 2^k plus his discrete Gaussian noise, DPDG) and sends each other user k his share
    s_ik, sealed to k. The uniform shares derive from i's secret (:func:`derive_seed`): one seed per recipient,
    sent as such, with ``share_encoding="seeds"``; rows of one ChaCha20 block otherwise. The correction share
    x_i - sum of the others goes to user n - 1 (user n - 1 keeps his own). U1: the users whose shares all
    reached the server by the round's deadline; only theirs are delivered.
round 2, masked sum
    The server publishes U1. User k in U1 sends y_k = s_kk + sum_{i in U1, i != k} s_ik + sum_{j not in U1}
    s_kj + b_k: what he received, what he sent to users who never took part, and a mask b_k from his secret.
    U2: the users whose y_k reached the server by the deadline.
round 3, unmask
    The server publishes E = U1 \\ U2 (round 2's dropouts) and redelivers their shares. User k in U2 sends
    v_k = sum_{d in E} (s_kd - s_dk) - b_k. The server releases sum_{k in U2} (y_k + v_k) = sum_{k in U2} x_k:
    the survivors' vectors, exactly.

A user named in E refuses round 3 (he sent y_k, and his y_k with everyone's v would be his vector), as does a
user asked twice, or asked to leave fewer survivors than the task's minimum. A survivor who drops out in round
3 leaves the server without his mask: nothing is released (docs/privacy.md says why n-out-of-n shares cannot
recover him). The guarantee is recomputed for the survivors (:func:`survivors_parameters`).
"""

from __future__ import annotations

import dataclasses
import json
import secrets
import struct
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from ..core.randomness import RNGLike, resolve
from ..core.sharing import SEED_BYTES, derive_seed, element_bytes, expand, pack_elements, unpack_elements
from ..errors import ParameterError, check_integer
from .results import FrequencyTable
from .sampling_sharing import SharingParameters, SharingUsers

# --- messages ----------------------------------------------------------------------------------------------
MAGIC, VERSION = b"PVS", 1
SHARE, SEED, MASKED_SUM, UNMASK = 1, 2, 3, 4  # message kinds
KIND_NAMES = {SHARE: "share", SEED: "share seed", MASKED_SUM: "masked sum", UNMASK: "unmask"}
SERVER = 0xFFFFFFFF  # the recipient field of a message to the server
HEADER = struct.Struct("<3sBBIII")  # magic, version, kind, sender, recipient, payload count


@dataclass(frozen=True)
class Message:
    """One decoded message: its kind, sender, recipient (:data:`SERVER` for the server) and payload (field
    elements, or a seed's bytes)."""

    kind: int
    sender: int
    recipient: int
    payload: np.ndarray | bytes


def encode(parameters: SharingParameters, kind: int, sender: int, recipient: int, payload) -> bytes:
    """A message's bytes: :data:`HEADER`, then N field elements (:func:`pack_elements`) or a 32-byte seed."""
    body = payload if kind == SEED else pack_elements(parameters.field, payload)
    count = SEED_BYTES if kind == SEED else parameters.domain_size
    return HEADER.pack(MAGIC, VERSION, kind, sender, recipient, count) + body


def decode(parameters: SharingParameters, raw: bytes, kinds: Sequence[int], sender: int | None = None,
           recipient: int | None = None) -> Message:
    """The message in ``raw``, every field checked: the magic and version, a kind among ``kinds``, the sender and
    recipient among the n users (and equal to ``sender`` / ``recipient`` when given), no one sending to himself,
    exactly the payload's length, every element below p. A ParameterError (field ``message``) names what is
    wrong."""
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
    if kind == SEED:
        if count != SEED_BYTES or len(body) != SEED_BYTES:
            raise ParameterError("message", f"a seed of {SEED_BYTES} bytes", f"{len(body)} bytes")
        return Message(kind, source, target, body)
    if count != parameters.domain_size:
        raise ParameterError("message", f"{parameters.domain_size} field elements (N)", count)
    return Message(kind, source, target, unpack_elements(parameters.field, body, count, "message"))


def message_bytes(parameters: SharingParameters, kind: int) -> int:
    """The length of one message of ``kind``."""
    return HEADER.size + (SEED_BYTES if kind == SEED else parameters.domain_size * element_bytes(parameters.field))


# --- a user ------------------------------------------------------------------------------------------------


@dataclass
class UserState:
    """What a user keeps between rounds: his index, his secret (every uniform share and his mask derive from
    it), his correction share once he has shared, and the last round he answered. Plain data with an encoding
    (:meth:`to_bytes`), so that a device or a test harness can store it."""

    index: int
    secret: bytes
    correction: np.ndarray | None = None
    answered: int = 0

    def to_bytes(self) -> bytes:
        head = json.dumps({"version": VERSION, "index": self.index, "answered": self.answered,
                           "elements": 0 if self.correction is None else int(self.correction.size)}).encode()
        body = b"" if self.correction is None else np.asarray(self.correction, dtype="<u8").tobytes()
        return struct.pack("<I", len(head)) + head + self.secret + body

    @classmethod
    def from_bytes(cls, raw: bytes) -> "UserState":
        try:
            (size,) = struct.unpack_from("<I", raw)
            head = json.loads(raw[4:4 + size])
            secret, body = raw[4 + size:4 + size + SEED_BYTES], raw[4 + size + SEED_BYTES:]
            assert head["version"] == VERSION and len(secret) == SEED_BYTES and len(body) == 8 * head["elements"]
        except Exception:
            raise ParameterError("user state", f"a state written by UserState.to_bytes (version {VERSION})",
                                 f"{len(raw)} unreadable bytes") from None
        correction = np.frombuffer(body, dtype="<u8").astype(np.uint64) if head["elements"] else None
        return cls(head["index"], secret, correction, head["answered"])


class SharingUser:
    """User ``index`` of a DPDS or DPDG task, one round at a time (module docstring).

    ``min_survivors``: the task's; he unmasks only for a release over at least as many users. ``rng=None`` (a
    real user) draws his secret from the OS and his coin or noise from the secure generator;
    a seeded simulation passes a generator. ``state`` resumes a user saved with ``state.to_bytes()``.
    """

    def __init__(self, parameters: SharingParameters, index: int, min_survivors: int, rng: RNGLike = None,
                 state: UserState | None = None) -> None:
        self.parameters, self.field, self.rng = parameters, parameters.field, rng
        self.min_survivors = check_min_survivors(parameters, min_survivors)
        n = parameters.n_users
        index = check_integer("user index", index, 0, n - 1)
        if state is None:
            secret = secrets.token_bytes(SEED_BYTES) if rng is None else resolve(rng).bytes(SEED_BYTES)
            state = UserState(index, secret)
        elif state.index != index:
            raise ParameterError("user state", f"the state of user {index}", f"user {state.index}'s")
        self.state, self.index = state, index
        self.correction_to = n - 1  # who receives every user's correction share

    # what this user sent each recipient, from his secret and his correction share
    def _seed(self, recipient: int) -> bytes:
        return derive_seed(self.state.secret, f"share {recipient}")

    def sent_shares(self, recipients: Sequence[int]) -> np.ndarray:
        """s_ik for each of ``recipients`` (his own for himself), as rows of field elements: with elements, rows of
        one ChaCha20 block (n x N) keyed from his secret, drawn again each time (no n x N state is kept); with
        seeds, each recipient's seed expanded. The correction share's row is the one he stored."""
        p, recipients = self.parameters, list(recipients)
        if p.share_encoding == "seeds":
            rows = np.zeros((len(recipients), p.domain_size), dtype=np.uint64)
            for row, k in enumerate(recipients):
                if k != self.correction_to:
                    rows[row] = expand(self.field, self._seed(k), p.domain_size)
        else:
            block = expand(self.field, derive_seed(self.state.secret, "shares"), (p.n_users, p.domain_size))
            rows = block[recipients].astype(np.uint64)
        if self.correction_to in recipients and self.state.correction is not None:
            rows[recipients.index(self.correction_to)] = self.state.correction
        return rows

    def sent_share(self, recipient: int) -> np.ndarray:
        """s_ik: his share for ``recipient``."""
        return self.sent_shares([recipient])[0]

    def _mask(self) -> np.ndarray:
        return expand(self.field, derive_seed(self.state.secret, "mask"), self.parameters.domain_size)

    def _sent_sum(self, recipients) -> np.ndarray:
        return self.field.sum(self.sent_shares(recipients).reshape(-1, self.parameters.domain_size), axis=0)

    def _expect(self, round_: int) -> None:
        if self.state.answered != round_ - 1:
            raise ParameterError("round", f"round {self.state.answered + 1} next (each round is answered once, "
                                 "in order)", f"round {round_}")

    def share(self, code: int) -> dict[int, bytes]:
        """Round 1: his vector's share for every other user, each as a message (seal it to its recipient)."""
        p, n = self.parameters, self.parameters.n_users
        self._expect(1)
        vector = SharingUsers(p).contributions(np.array([code]), self.rng)[0].astype(np.uint64)
        self.state.answered = 1
        others = [k for k in range(n) if k != self.correction_to]
        self.state.correction = self.field.sub(vector, self._sent_sum(others))
        recipients = [k for k in range(n) if k != self.index]
        if p.share_encoding == "seeds":
            return {k: encode(p, SHARE, self.index, k, self.state.correction) if k == self.correction_to else
                    encode(p, SEED, self.index, k, self._seed(k)) for k in recipients}
        return {k: encode(p, SHARE, self.index, k, row) for k, row in zip(recipients, self.sent_shares(recipients))}

    def _received(self, senders: Sequence[int], shares: Mapping[int, bytes], what: str) -> np.ndarray:
        """The sum of the shares ``senders`` sent him, each message checked (sender, recipient, kind)."""
        missing = sorted(set(senders) - set(shares) - {self.index})
        extra = sorted(set(shares) - set(senders))
        if missing or extra:
            raise ParameterError(what, "one share from each listed sender", f"missing {missing[:5]}, unlisted "
                                 f"{extra[:5]}")
        total = np.zeros(self.parameters.domain_size, dtype=np.uint64)
        for sender in senders:
            if sender == self.index:
                continue
            message = decode(self.parameters, shares[sender], (SHARE, SEED), sender, self.index)
            value = (expand(self.field, message.payload, self.parameters.domain_size) if message.kind == SEED
                     else message.payload)
            total = self.field.add(total, value)
        return total

    def _check_list(self, users: Sequence[int], what: str) -> list[int]:
        listed = sorted({check_integer(what, u, 0, self.parameters.n_users - 1) for u in users})
        if len(listed) != len(users):
            raise ParameterError(what, "distinct users", "a user listed twice")
        return listed

    def masked_sum(self, senders: Sequence[int], shares: Mapping[int, bytes]) -> bytes:
        """Round 2: y_k, given U1 (``senders``, himself among them) and the shares they sent him."""
        self._expect(2)
        senders = self._check_list(senders, "round-1 senders")
        if self.index not in senders:
            raise ParameterError("round-1 senders", f"a list naming user {self.index}, who shared", "a list without him")
        received = self._received(senders, shares, "round-1 shares")
        absent = [j for j in range(self.parameters.n_users) if j not in set(senders)]
        total = self.field.add(self.field.add(received, self.sent_share(self.index)), self._sent_sum(absent))
        self.state.answered = 2
        return encode(self.parameters, MASKED_SUM, self.index, SERVER, self.field.add(total, self._mask()))

    def unmask(self, senders: Sequence[int], dropped: Sequence[int], shares: Mapping[int, bytes]) -> bytes:
        """Round 3: v_k, given U1 (``senders``), E (``dropped``: round 2's dropouts) and the shares E sent him.

        Refused (a ParameterError, and nothing to send) if he is named in E, if E is not within U1, or if U1
        less E leaves fewer survivors than the task's minimum."""
        self._expect(3)
        senders, dropped = self._check_list(senders, "round-1 senders"), self._check_list(dropped, "dropouts")
        if self.index in dropped:
            raise ParameterError("dropouts", f"a list without user {self.index}, who sent his masked sum (revealing "
                                 "his mask now would reveal his vector)", "a list naming him")
        if not set(dropped) <= set(senders):
            raise ParameterError("dropouts", "round-1 senders only", sorted(set(dropped) - set(senders))[:5])
        if len(senders) - len(dropped) < self.min_survivors:
            raise ParameterError("dropouts", f"leaving at least {self.min_survivors} survivors (the task's minimum)",
                                 f"{len(senders) - len(dropped)} survivors")
        received = self._received(dropped, shares, "dropouts' shares")
        value = self.field.sub(self.field.sub(self._sent_sum(dropped), received), self._mask())
        self.state.answered = 3
        return encode(self.parameters, UNMASK, self.index, SERVER, value)


# --- the server --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class SharingRelease:
    """What the server releases: the estimates over the survivors, who they were, and the parameters with the
    guarantee recomputed for them (``honest_fraction`` = survivors / n)."""

    table: FrequencyTable
    enrolled: int  # n
    senders: int  # |U1|
    survivors: int  # |U2|
    parameters: SharingParameters

    @property
    def privacy(self):
        """The guarantee of this release: the recomputed parameters' delta at the calibrated epsilon, with who took
        part."""
        p, base = self.parameters, self.parameters.privacy
        delta = p.delta_at(p.epsilon)
        weakened = (f"; the dropouts weakened it from the task's target delta {p.delta:.3g} to {delta:.3g} (fewer "
                    "users to hide among)" if delta > p.delta * (1 + 1e-9) else "")
        return dataclasses.replace(base, delta=delta, caveats=base.caveats + (
            f"recomputed for the {self.survivors} users who took part to the end, of the {self.enrolled} enrolled "
            f"({self.senders} shared in round 1): the release is theirs, and its conditions (the users who may not "
            f"follow the protocol, the data condition) are stated of them{weakened}",))


class SharingServer:
    """The aggregating server of a DPDS or DPDG task: checks what users send it and releases the survivors' sum.

    It never opens a share (they are sealed to their recipients); it relays them, and between rounds keeps
    only the lists and the messages (the service's database)."""

    def __init__(self, parameters: SharingParameters, min_survivors: int) -> None:
        self.parameters, self.field = parameters, parameters.field
        self.min_survivors = check_min_survivors(parameters, min_survivors)

    def check(self, raw: bytes, kind: int, user: int) -> np.ndarray:
        """A user's round-2 or round-3 message, checked (``kind``, sender ``user``, to the server)."""
        return decode(self.parameters, raw, (kind,), user, SERVER).payload

    def release(self, senders: Sequence[int], masked: Mapping[int, bytes], unmasks: Mapping[int, bytes],
                queries=None) -> SharingRelease:
        """sum_{k in U2} (y_k + v_k), U2 = the users in ``masked``; refused unless every one of U2 unmasked and
        U2 holds at least the task's minimum of survivors."""
        p, survivors = self.parameters, sorted(masked)
        if not set(survivors) <= set(senders):
            raise ParameterError("masked sums", "from round-1 senders only", sorted(set(survivors) - set(senders))[:5])
        if sorted(unmasks) != survivors:
            missing = sorted(set(survivors) - set(unmasks))
            raise ParameterError("unmasks", "one from every survivor of round 2 (a survivor's mask is his alone)",
                                 f"none from {len(missing)} of them, e.g. user {missing[0]}" if missing else
                                 f"unmasks from users who sent no masked sum: {sorted(set(unmasks) - set(survivors))[:5]}")
        if len(survivors) < self.min_survivors:
            raise ParameterError("survivors", f"at least {self.min_survivors} (the task's minimum)", len(survivors))
        total = np.zeros(p.domain_size, dtype=np.uint64)
        for user in survivors:
            total = self.field.add(total, self.field.add(self.check(masked[user], MASKED_SUM, user),
                                                         self.check(unmasks[user], UNMASK, user)))
        recomputed = survivors_parameters(p, len(survivors))
        estimates = recomputed.estimate(total)
        chosen = None if queries is None else np.unique(p.check_codes(queries))
        table = FrequencyTable(recomputed, estimates if chosen is None else estimates[chosen], chosen,
                               messages=2 * len(survivors), malformed=0)
        return SharingRelease(table, p.n_users, len(senders), len(survivors), recomputed)


def survivors_parameters(parameters: SharingParameters, survivors: int) -> SharingParameters:
    """The parameters of the release over ``survivors`` of the n users (docs/privacy.md, "Dropouts in DPDS and
    DPDG"): n' = survivors users; the (1 - G) n users who may not follow the protocol all counted among them
    (honest fraction (n' - (n - ceil(G n))) / n'); DPDS's data condition, every category held by beta n'
    users, stated of the survivors; DPDG's noise that of the honest survivors. The sampling probability or the
    noise variance is the task's: only the users change."""
    n = parameters.n_users
    honest = survivors - (n - parameters.honest_users)
    if not 2 <= survivors <= n or honest < 1:
        raise ParameterError("survivors", f"in [2, {n}] and more than the {n - parameters.honest_users} users who "
                             "may not follow the protocol", survivors)
    return dataclasses.replace(parameters, n_users=survivors, honest_fraction=honest / survivors)


def check_min_survivors(parameters: SharingParameters, min_survivors: int) -> int:
    """``min_survivors`` if a release over that many users is valid (:func:`survivors_parameters`: for DPDS, its
    N categories of beta n' holders fit), else a ParameterError naming it."""
    if parameters.model != "secret_sharing":
        raise ParameterError("protocol", "dpds or dpdg (users who share among all users)", parameters.protocol)
    return checked_survivors(parameters, min_survivors, 2)


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
    """What a well-formed message carries, from its header: its kind's name and its entries (N field elements; a
    seed counts one). For traffic counts (``privagg demo-service``), not a check: :func:`decode` checks."""
    _, _, kind, _, _, count = HEADER.unpack_from(raw)
    return KIND_NAMES[kind], 1 if kind == SEED else count


def expected_traffic(parameters: SharingParameters, user: int, senders: Sequence[int],
                     dropped: Sequence[int]) -> tuple[dict[str, int], dict[str, int]]:
    """The entries (:func:`message_entries`) survivor ``user`` sends and receives by kind, when ``senders`` (U1)
    shared in round 1 and ``dropped`` (E) of them vanished before round 2: n - 1 shares (seeds, but to user
    n - 1, with ``share_encoding="seeds"``), a masked sum and an unmask sent; a share from every other sender
    received in round 2, and again from each dropout in round 3 (the server redelivers them)."""
    n, N, seeds = parameters.n_users, parameters.domain_size, parameters.share_encoding == "seeds"
    sent, received = {"masked sum": N, "unmask": N}, {}

    def add(counts: dict[str, int], recipient: int) -> None:
        name, entries = ("share seed", 1) if seeds and recipient != n - 1 else ("share", N)
        counts[name] = counts.get(name, 0) + entries

    for k in range(n):
        if k != user:
            add(sent, k)
    for j in [*senders, *dropped]:
        if j != user:
            add(received, user)
    return sent, received
