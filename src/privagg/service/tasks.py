"""Tasks and sealed reports: what the client SDK, the collector-shuffler and the analyzer agree on.

A **task** is a task id, the frozen parameters of one protocol (never recalibrated by anyone who loads
them), the analyzer's HPKE public key with its key id, and the least number of reports a batch may hold
before the collector releases it. In the shuffle model a task has one batch, of all n reports or, once the
task is closed, of the reports that came if at least ``min_batch_size`` (at least ceil(G n); see
``Task.__post_init__``). A sparse-vector-hashed task may have a first stage (``discovery``, the paper's two stages:
``privagg task create --discover-phi``): an fe-hh task of its own (id, key, batch) over the B + 1 cells, whose
discovered coordinates are the ones the task estimates. A device's one report then carries both stages' messages.

A client's **report** is every message of one user, each sealed separately to the analyzer with HPKE
(RFC 9180; ``cryptography``'s implementation: DHKEM(X25519, HKDF-SHA256), HKDF-SHA256, AES-128-GCM by
default, or the ML-KEM-768 + X25519 hybrid KEM (X-Wing, draft-ietf-hpke-pq) with ``kem="mlkem768-x25519"``,
secure against a quantum adversary recording today's traffic, at 1,136 bytes of overhead per message
instead of 48), with the task id bound
as HPKE's ``info``, so a message sealed for one task does not open under another. A plaintext is one
row of the protocol's message layout in its packed record dtype (little-endian), so the analyzer
rebuilds a :class:`~privagg.core.messages.MessageBatch` without parsing. The report id (16 random bytes)
and the client's one-use token travel beside the ciphertexts, for the collector; neither reaches the
analyzer.

Keys are raw bytes: X25519's 32 bytes; for the hybrid, ML-KEM-768's public key (1,184 bytes) then
X25519's, and the private key as ML-KEM-768's 64-byte seed then X25519's 32 bytes.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
import secrets
from dataclasses import dataclass
from functools import cached_property
from typing import Any

import numpy as np

from ..core.messages import MessageBatch
from ..errors import ParameterError, check_integer

TASK_ID_BYTES = 16
# what a task's protocol must be (registry.ProtocolEntry.served)
SERVED = "one the services run: one round, a client randomizer and an analyzer"
REPORT_ID_BYTES = 16
TAG_BYTES = 16  # AES-128-GCM's tag
# the KEMs a task may use: the suite's name, and the sizes of a raw public key and of an encapsulation
MLKEM_PUBLIC, MLKEM_SEED = 1184, 64  # ML-KEM-768's raw public key and private seed
KEMS = {"x25519": ("DHKEM(X25519, HKDF-SHA256), HKDF-SHA256, AES-128-GCM", 32, 32),
        "mlkem768-x25519": ("MLKEM768-X25519, HKDF-SHA256, AES-128-GCM", MLKEM_PUBLIC + 32, 1088 + 32)}


_HEX_ID = re.compile(f"[0-9a-f]{{{2 * TASK_ID_BYTES}}}")


def is_hex_id(text) -> bool:
    """A task, report or batch id: 32 lowercase hexadecimal characters."""
    return isinstance(text, str) and _HEX_ID.fullmatch(text) is not None


def _suite(kem: str):
    from cryptography.hazmat.primitives import hpke

    return hpke.Suite(hpke.KEM.X25519 if kem == "x25519" else hpke.KEM.MLKEM768_X25519, hpke.KDF.HKDF_SHA256,
                      hpke.AEAD.AES_128_GCM)


def _public_key(kem: str, raw: bytes):
    from cryptography.hazmat.primitives import hpke
    from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PublicKey

    if kem == "x25519":
        return X25519PublicKey.from_public_bytes(raw)
    from cryptography.hazmat.primitives.asymmetric.mlkem import MLKEM768PublicKey

    return hpke.MLKEM768X25519PublicKey(MLKEM768PublicKey.from_public_bytes(raw[:MLKEM_PUBLIC]),
                                        X25519PublicKey.from_public_bytes(raw[MLKEM_PUBLIC:]))


def _private_key(kem: str, raw: bytes):
    from cryptography.hazmat.primitives import hpke
    from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey

    if kem == "x25519":
        return X25519PrivateKey.from_private_bytes(raw)
    from cryptography.hazmat.primitives.asymmetric.mlkem import MLKEM768PrivateKey

    return hpke.MLKEM768X25519PrivateKey(MLKEM768PrivateKey.from_seed_bytes(raw[:MLKEM_SEED]),
                                         X25519PrivateKey.from_private_bytes(raw[MLKEM_SEED:]))


def _hex(field: str, value: Any, size: int) -> bytes:
    try:
        raw = bytes.fromhex(value) if isinstance(value, str) else None
    except ValueError:
        raw = None
    if raw is None or len(raw) != size:
        raise ParameterError(field, f"{2 * size} hexadecimal characters", value)
    return raw


EXTRA_MESSAGES = 16  # beyond 12 sd of a user's message count: the cap on one report (Task.message_cap)


@dataclass(frozen=True)
class Task:
    """What every party of one collection knows: public, served by the analyzer, fetched by clients."""

    task_id: str  # 32 hex characters
    parameters: Any  # the protocol's frozen parameters
    public_key: bytes  # the analyzer's public key (raw; see the module's docstring)
    key_id: int  # which of the analyzer's keys, 0..255
    min_batch_size: int  # reports: a smaller batch is never released
    kem: str = "x25519"  # or "mlkem768-x25519"
    discovery: "Task | None" = None  # sparse-vector-hashed --discover-phi: its first stage, an fe-hh task


    def __post_init__(self) -> None:
        _hex("task_id", self.task_id, TASK_ID_BYTES)
        if self.kem not in KEMS:
            raise ParameterError("kem", f"one of {', '.join(KEMS)}", self.kem)
        size = KEMS[self.kem][1]
        if not isinstance(self.public_key, bytes) or len(self.public_key) != size:
            raise ParameterError("public_key", f"{size} bytes (a raw {self.kem} public key)",
                                 len(self.public_key) if isinstance(self.public_key, bytes) else self.public_key)
        check_integer("key_id", self.key_id, 0, 255)

        # The shuffle model's guarantee counts on the noise of G n honest users in the analyzer's view, with up
        # to (1 - G) n of the n users not following the protocol (absent, or sending what they like). A task
        # has one batch: all n reports, or, once the task is closed, all that came, if at least
        # min_batch_size. Then the n - m absent users are among the (1 - G) n, so at most m - G n of the m
        # present are not honest, and m >= ceil(G n) reports hold G n honest ones. (Several smaller batches
        # would not do: the dishonest could all sit in one.) A local report stands alone.
        if self.single_batch:
            check_integer("min_batch_size", self.min_batch_size, self.parameters.honest_users,
                          self.parameters.n_users)
        else:
            check_integer("min_batch_size", self.min_batch_size, 1)
        if self.discovery is not None:
            self._check_discovery()

    def _check_discovery(self) -> None:
        """A staged task (``privagg task create --discover-phi``): a task of a protocol with a discovery stage
        (registry.DiscoveryStage: sparse-vector-hashed) whose first stage is a task of that stage's protocol (fe-hh)
        over its domain (the B + 1 cells), for the same users, under the same KEM and batch rule, and no further
        stage."""
        from ..protocols.registry import get, listed, names

        p, stage = self.parameters, self.discovery
        discovery = get(p.protocol).discovery
        if not isinstance(stage, Task) or discovery is None:
            raise ParameterError("discovery", f"a first stage only for a task of "
                                 f"{listed(names(lambda e: e.discovery is not None))}", p.protocol)
        q = stage.parameters
        expected = dict(protocol=discovery.protocol, domain_size=p.domain_size, n_users=p.n_users,
                        honest_fraction=p.honest_fraction, min_batch_size=self.min_batch_size, kem=self.kem,
                        discovery=None)
        got = dict(protocol=q.protocol, domain_size=q.domain_size, n_users=q.n_users,
                   honest_fraction=q.honest_fraction, min_batch_size=stage.min_batch_size, kem=stage.kem,
                   discovery=stage.discovery)
        for name, value in expected.items():
            if got[name] != value:
                raise ParameterError(f"discovery.{name}", f"{value} (the first stage of this task)", got[name])
        if stage.task_id == self.task_id:
            raise ParameterError("discovery.task_id", "another task's id than this one's", stage.task_id)

    @property
    def single_batch(self) -> bool:
        """Shuffle-model tasks release one batch (see ``__post_init__``); local ones any number."""
        from ..protocols.registry import get

        return get(self.parameters.protocol).single_batch

    @property
    def release_rule(self) -> str:
        """When the collector releases a batch, as the result and the console say while none was: a shuffle task's
        one batch at n reports, or at a close once its minimum came (not at the minimum alone: a reviewer's
        operator waited for ever)."""
        if self.single_batch:
            return (f"the collector releases its one batch once n = {self.parameters.n_users:,} reports came, or at "
                    f"privagg task close once at least {self.min_batch_size:,} did")
        return f"the collector releases one once at least {self.min_batch_size:,} reports came"

    @cached_property
    def sealed_size(self) -> int:
        """Bytes of one sealed message: its packed layout row, the KEM's encapsulation, the AEAD's tag."""
        return self.parameters.layout.record_dtype.itemsize + KEMS[self.kem][2] + TAG_BYTES

    @cached_property
    def message_cap(self) -> int:
        """The most messages one report may carry: a user's mean plus t = 12 of his standard deviations sigma,
        plus 16 (``EXTRA_MESSAGES``).

        An honest user's count is the protocol's fixed messages plus a sum of independent 0/1 draws, so
        Bernstein's bound puts his chance of exceeding it at exp(-t^2 / (2 (sigma^2 + t / 3))) <= e^-24, about
        4 10^-11, for t = 12 sigma + 16. The collector refuses a report carrying more, so no one inflates a
        batch with messages of his own, and the analyzer refuses a batch holding more than its reports times
        this."""
        p = self.parameters
        per_user_sd = p.messages_sd / math.sqrt(p.n_users)
        return math.ceil(p.messages_per_user + 12 * per_user_sd) + EXTRA_MESSAGES

    @property
    def info(self) -> bytes:
        """HPKE's info: binds every sealed message to this task."""
        return b"privagg task " + bytes.fromhex(self.task_id)

    def to_dict(self) -> dict[str, Any]:
        out = {"task_id": self.task_id, "parameters": self.parameters.to_dict(), "public_key":
               self.public_key.hex(), "key_id": self.key_id, "min_batch_size": self.min_batch_size,
               "kem": self.kem, "suite": KEMS[self.kem][0]}
        if self.discovery is not None:
            out["discovery"] = self.discovery.to_dict()
        return out

    def to_json(self) -> str:
        return json.dumps(self.to_dict())

    @classmethod
    def from_dict(cls, data: dict[str, Any], verify: bool = True) -> "Task":
        """A task as a client accepts it: every field checked, the parameters loaded (never recalibrated;
        ``verify`` also checks their noise, which loads scipy)."""
        from ..protocols.registry import get, load_parameters

        if not isinstance(data, dict):
            raise ParameterError("task", "a JSON object", type(data).__name__)
        missing = {"task_id", "parameters", "public_key", "key_id", "min_batch_size"} - set(data)
        if missing:
            raise ParameterError("task", f"the fields {sorted(missing)} too", sorted(data))
        kem = data.get("kem", "x25519")
        if kem not in KEMS:
            raise ParameterError("task.kem", f"one of {', '.join(KEMS)}", kem)
        if data.get("suite", KEMS[kem][0]) != KEMS[kem][0]:
            raise ParameterError("task.suite", KEMS[kem][0], data.get("suite"))
        parameters = load_parameters(data["parameters"], verify=verify)
        if not get(parameters.protocol).served:
            raise ParameterError("parameters.protocol", SERVED, parameters.protocol)
        discovery = data.get("discovery")
        return cls(data["task_id"], parameters, _hex("public_key", data["public_key"], KEMS[kem][1]),
                   data["key_id"], data["min_batch_size"], kem,
                   None if discovery is None else cls.from_dict(discovery, verify))

    @classmethod
    def from_json(cls, text: str | bytes, verify: bool = True) -> "Task":
        try:
            data = json.loads(text)
        except ValueError as err:
            raise ParameterError("task", "a JSON object", f"unreadable JSON ({err})") from None
        return cls.from_dict(data, verify)


def create_task(parameters, min_batch_size: int | None = None, key_id: int = 0,
                kem: str = "x25519", discovery: Task | None = None) -> tuple[Task, bytes]:
    """A new task and the analyzer's private key (raw; it never leaves the analyzer).

    ``min_batch_size`` defaults to the users the parameters were calibrated for (n): the collector releases
    no batch of fewer reports (a shuffle task may set it down to ceil(G n), for a closed task whose absent
    users count against the honest fraction). ``kem``: "x25519" or the hybrid "mlkem768-x25519". ``discovery``: a
    sparse-vector-hashed task's first stage (:meth:`Task._check_discovery`).
    """
    from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey

    if kem not in KEMS:
        raise ParameterError("kem", f"one of {', '.join(KEMS)}", kem)
    classic = X25519PrivateKey.generate()
    public, private = classic.public_key().public_bytes_raw(), classic.private_bytes_raw()
    if kem == "mlkem768-x25519":
        from cryptography.hazmat.primitives.asymmetric.mlkem import MLKEM768PrivateKey

        quantum = MLKEM768PrivateKey.generate()
        public, private = quantum.public_key().public_bytes_raw() + public, quantum.private_bytes_raw() + private
    task = Task(secrets.token_hex(TASK_ID_BYTES), parameters, public, key_id,
                parameters.n_users if min_batch_size is None else min_batch_size, kem, discovery)
    return task, private


def encapsulation_digests(task: Task, sealed) -> list[bytes]:
    """The SHA-256 of each sealed message's HPKE encapsulated key (its first ``enc`` bytes, RFC 9180's
    single-shot ``enc || ct``), for rows of bytes or of a uint8 array.

    Every honest seal draws a fresh ephemeral key, so two messages with one encapsulation are a replay: the
    same message sent again, or a variant of it (which would not open: the key schedule binds ``enc``).
    The digest keeps the record 32 bytes for either KEM; a collision would need a SHA-256 collision."""
    size = KEMS[task.kem][2]
    if isinstance(sealed, np.ndarray):  # one copy of the encapsulations, hashed through views (a third faster)
        encapsulations = memoryview(np.ascontiguousarray(sealed[:, :size]).reshape(-1))
        return [hashlib.sha256(encapsulations[i:i + size]).digest() for i in range(0, len(encapsulations), size)]
    return [hashlib.sha256(bytes(row[:size])).digest() for row in sealed]


def packed_records(parameters, messages: MessageBatch) -> np.ndarray:
    """The messages as the layout's packed little-endian rows (what a client seals; what the analyzer keeps of a
    candidates task, :func:`unpacked_records` reads them back)."""
    layout = parameters.layout
    records = np.empty(len(messages), dtype=layout.record_dtype.newbyteorder("<"))
    for name in layout.names:
        records[name] = messages[name]
    return records


def unpacked_records(parameters, raw: bytes) -> MessageBatch:
    """The messages whose packed rows are ``raw`` (:func:`packed_records`)."""
    dtype = parameters.layout.record_dtype.newbyteorder("<")
    return MessageBatch.from_records(np.frombuffer(raw, dtype=dtype).astype(dtype.newbyteorder("=")))


def seal_messages(task: Task, messages: MessageBatch) -> list[bytes]:
    """Each message (a layout row, packed) sealed separately to the task's analyzer key."""
    key, suite, info = _public_key(task.kem, task.public_key), _suite(task.kem), task.info
    return [suite.encrypt(row.tobytes(), key, info=info) for row in packed_records(task.parameters, messages)]


@dataclass
class OpenedBatch:
    """A batch of sealed messages as the analyzer opens it: the messages, and how many would not open."""

    messages: MessageBatch
    unopened: int


def open_messages(task: Task, private_key: bytes, ciphertexts) -> OpenedBatch:
    """Open every sealed message of a batch (bytes, or rows of a uint8 array); one that fails (another key or task, truncated, tampered, the
    wrong size) is counted in ``unopened`` and left out. Layout validation is the analyzer's next step."""
    dtype = task.parameters.layout.record_dtype.newbyteorder("<")
    key, suite, info = _private_key(task.kem, private_key), _suite(task.kem), task.info
    rows, unopened = [], 0
    for sealed in ciphertexts:
        try:
            plain = suite.decrypt(bytes(sealed), key, info=info)
        except Exception:  # InvalidTag, or a malformed encapsulation: the message does not open
            unopened += 1
            continue
        if len(plain) != dtype.itemsize:
            unopened += 1
            continue
        rows.append(plain)
    return OpenedBatch(unpacked_records(task.parameters, b"".join(rows)), unopened)
