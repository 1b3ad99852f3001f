"""TSS and TSS' messages on the wire (Algorithm 3, reference §2.5; :mod:`privagg.protocols.two_server_parties`
has the parties): their kinds and recipients, the header, encoding and checked decoding, their sizes, and the
task's minimum of survivors.
"""

from __future__ import annotations

import struct
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from ..core.sharing import element_bytes, pack_elements, unpack_elements
from ..errors import ParameterError, check_integer
from .sharing_parties import checked_survivors
from .tss_parameters import TSSParameters

MAGIC, VERSION = b"PVT", 1
REPORT_SET, SHARES, SUMS, RECOVERY = 1, 2, 3, 4  # message kinds
KIND_NAMES = {REPORT_SET: "report set", SHARES: "shares", SUMS: "helper sums", RECOVERY: "recovery"}
FIRST, SECOND = 0xFFFFFFFE, 0xFFFFFFFF  # the recipient field of a message to S1, to S2
SERVERS = {FIRST: "S1", SECOND: "S2"}
TO_SERVER = {REPORT_SET: FIRST, SUMS: SECOND, RECOVERY: SECOND}  # shares go to a user
HEADER = struct.Struct("<3sBBIII")  # magic, version, kind, sender, recipient, entries
INDEX = np.dtype("<u4")  # an item or a user on the wire


@dataclass(frozen=True)
class Message:
    """One decoded message: its kind, sender, recipient (a user, or :data:`FIRST` / :data:`SECOND`), its items
    (ascending), the helpers of a recovery's entries, its field elements (none in a report set), and a helper's
    count of the reporters whose shares each of his sums adds up (sums only)."""

    kind: int
    sender: int
    recipient: int
    items: np.ndarray
    helpers: np.ndarray | None
    values: np.ndarray | None
    counts: np.ndarray | None = None


def message_bytes(parameters: TSSParameters, kind: int, entries: int) -> int:
    """The length of a message of ``kind`` with ``entries`` entries: each an item (4 bytes), a recovery's also a
    helper (4), a sum's also its count of reporters (4), and but in a report set a field element."""
    per = INDEX.itemsize * (2 if kind in (RECOVERY, SUMS) else 1) + (0 if kind == REPORT_SET else element_bytes(
        parameters.field))
    return HEADER.size + entries * per


def encode(parameters: TSSParameters, kind: int, sender: int, recipient: int, items, values=None,
           helpers=None, counts=None) -> bytes:
    """A message's bytes: :data:`HEADER`, the items, a recovery's helpers or a sum's counts of reporters, the field
    elements (:func:`pack_elements`)."""
    items = np.asarray(items, dtype=np.int64)
    body = items.astype(INDEX).tobytes()
    if kind in (RECOVERY, SUMS):
        body += np.asarray(helpers if kind == RECOVERY else counts, dtype=np.int64).astype(INDEX).tobytes()
    if kind != REPORT_SET:
        body += pack_elements(parameters.field, values)
    return HEADER.pack(MAGIC, VERSION, kind, sender, recipient, items.size) + body


def message_entries(raw: bytes) -> tuple[str, int]:
    """What a well-formed message carries, from its header: its kind's name and its entries (items; each but in a
    report set with a field element). For traffic counts (``privagg demo-service``), not a check: :func:`decode`
    checks."""
    _, _, kind, _, _, count = HEADER.unpack_from(raw)
    return KIND_NAMES[kind], count


def decode(parameters: TSSParameters, raw: bytes, kind: int, sender: int | None = None,
           recipient: int | None = None, items: Sequence[int] | None = None,
           helpers: Sequence[int] | None = None) -> Message:
    """The message in ``raw``, every field checked: magic and version; the kind; the sender a user (``sender``
    when given); the recipient S1 (a report set), S2 (sums, recovery) or another user (shares; ``recipient``
    when given); exactly the entries' length; items below N, strictly ascending (a recovery's (item, helper)
    pairs), a report set of alpha N; helpers users; a sum's counts at most n; elements below p; ``items`` (and
    ``helpers``) exactly, when given. A ParameterError names the field that is wrong (``message``,
    ``message.sender``, ``message.recipient``, ``message.items``, ``message.helpers``, ``message.counts``,
    ``message.values``)."""
    if not isinstance(raw, (bytes, bytearray)) or len(raw) < HEADER.size:
        raise ParameterError("message", f"a privagg TSS message of at least {HEADER.size} bytes",
                             f"{len(raw)} bytes" if isinstance(raw, (bytes, bytearray)) else type(raw).__name__)
    magic, version, got, source, target, count = HEADER.unpack_from(raw)
    n, N = parameters.n_users, parameters.domain_size
    if magic != MAGIC or version != VERSION:
        raise ParameterError("message", f"version {VERSION} of privagg's TSS messages", f"{magic!r} {version}")
    if got != kind:
        raise ParameterError("message", f"a {KIND_NAMES[kind]} message", KIND_NAMES.get(got, f"kind {got}"))
    if not source < n or (sender is not None and source != sender):
        raise ParameterError("message.sender", f"user {sender}" if sender is not None else f"a user in [0, {n})",
                             source)
    server = TO_SERVER.get(kind)
    if server is not None and target != server:
        raise ParameterError("message.recipient", SERVERS[server], SERVERS.get(target, f"user {target}"))
    if server is None and (not target < n or (recipient is not None and target != recipient)):
        raise ParameterError("message.recipient", f"user {recipient}" if recipient is not None else
                             f"a user in [0, {n})", SERVERS.get(target, target))
    if target == source:
        raise ParameterError("message.recipient", "another user than the sender", target)
    most = n * N if kind == RECOVERY else N
    if not 1 <= count <= most or len(raw) != message_bytes(parameters, kind, count):
        size = (f"{message_bytes(parameters, kind, count)} bytes for its {count} entries" if 1 <= count <= most
                else f"1 to {most} entries")
        raise ParameterError("message", f"a {KIND_NAMES[kind]} message of {size}", f"{len(raw)} bytes, "
                             f"{count} entries")
    offset = HEADER.size
    got_items = np.frombuffer(raw, INDEX, count, offset).astype(np.int64)
    offset += count * INDEX.itemsize
    if got_items.max() >= N:
        raise ParameterError("message.items", f"items in [0, {N})", int(got_items.max()))
    if kind == REPORT_SET and count != parameters.report_size:
        raise ParameterError("message.items", f"alpha N = {parameters.report_size} items", count)
    got_helpers = got_counts = None
    if kind == RECOVERY:
        got_helpers = np.frombuffer(raw, INDEX, count, offset).astype(np.int64)
        offset += count * INDEX.itemsize
        if got_helpers.max() >= n:
            raise ParameterError("message.helpers", f"users in [0, {n})", int(got_helpers.max()))
    elif kind == SUMS:
        got_counts = np.frombuffer(raw, INDEX, count, offset).astype(np.int64)
        offset += count * INDEX.itemsize
        if got_counts.max() > n:
            raise ParameterError("message.counts", f"counts of reporters in [0, {n}]", int(got_counts.max()))
    keys = got_items * n + (0 if got_helpers is None else got_helpers)
    if np.any(np.diff(keys) <= 0):
        raise ParameterError("message.items", "strictly ascending (each entry once)" if got_helpers is None else
                             "(item, helper) pairs strictly ascending (each once)", got_items[:8].tolist())
    if items is not None and not np.array_equal(got_items, np.asarray(items, dtype=np.int64)):
        raise ParameterError("message.items", f"the items {list(items)[:8]}", got_items[:8].tolist())
    if helpers is not None and not np.array_equal(got_helpers, np.asarray(helpers, dtype=np.int64)):
        raise ParameterError("message.helpers", f"the helpers {list(helpers)[:8]}", got_helpers[:8].tolist())
    values = None if kind == REPORT_SET else unpack_elements(parameters.field, bytes(raw[offset:]), count,
                                                             "message.values")
    return Message(kind, source, target, got_items, got_helpers, values, got_counts)


def check_min_survivors(parameters: TSSParameters, min_survivors: int) -> int:
    """``min_survivors`` if S1 can elect among that many users (phi + 1 of them at least) and a release over
    that many is valid (:func:`survivors_parameters`), else a ParameterError naming it."""
    if getattr(parameters, "model", None) != "two_servers":
        raise ParameterError("protocol", "tss or tss-collusion (two servers and elected helpers)",
                             getattr(parameters, "protocol", type(parameters).__name__))
    return checked_survivors(parameters, min_survivors, max(2, parameters.colluders + 1))


def _users(parameters: TSSParameters, users: Sequence[int], what: str) -> list[int]:
    """``users`` as a sorted list of distinct roster indices, else a ParameterError naming ``what``."""
    if isinstance(users, (str, bytes)) or not isinstance(users, Sequence):
        raise ParameterError(what, "a list of users", type(users).__name__)
    listed = sorted({check_integer(what, u, 0, parameters.n_users - 1) for u in users})
    if len(listed) != len(users):
        raise ParameterError(what, "distinct users", "a user listed twice")
    return listed


def survivors_bitmap(users, n_users: int) -> bytes:
    """R2 as the bitmap a helper's round-3 inbox carries and his seal binds: bit i % 8 of byte i // 8 set for
    each user i of ``users`` (ceil(n / 8) bytes)."""
    bits = np.zeros(-(-n_users // 8) * 8, dtype=np.uint8)
    bits[np.asarray(list(users), dtype=np.int64)] = 1
    return np.packbits(bits, bitorder="little").tobytes()


def bitmap_users(raw: bytes, n_users: int, what: str) -> set[int]:
    """The users of a :func:`survivors_bitmap`, else a ParameterError naming ``what``."""
    if len(raw) != -(-n_users // 8):
        raise ParameterError(what, f"a bitmap of the n = {n_users} users ({-(-n_users // 8)} bytes)", len(raw))
    users = np.flatnonzero(np.unpackbits(np.frombuffer(raw, dtype=np.uint8), bitorder="little"))
    if users.size and users[-1] >= n_users:
        raise ParameterError(what, f"a bitmap of the n = {n_users} users (no bit past them)", int(users[-1]))
    return set(users.tolist())


def _items(parameters: TSSParameters, mapping: Mapping, what: str) -> list[int]:
    if not isinstance(mapping, Mapping):
        raise ParameterError(what, "a mapping item -> users", type(mapping).__name__)
    return sorted(check_integer(what, j, 0, parameters.domain_size - 1) for j in mapping)


