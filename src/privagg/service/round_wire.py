"""The round services' binary bodies (issue 47): a user's inbox request and round answer, and the inbox the server
answers with, versioned as privagg's protocol messages are (a magic and a version first, as
:mod:`privagg.protocols.sharing_messages`' header), in place of JSON with base64: the sealed backups, relayed messages
and signatures go as their bytes.

A body is :data:`HEADER` (magic ``PVR``, :data:`VERSION`), then one value: an object of named fields. Each value is a
tag byte, then

* ``INT``: a signed 64-bit integer (little-endian, as every length below);
* ``BYTES`` / ``TEXT``: a 32-bit length and that many bytes (UTF-8 for text);
* ``LIST``: a 32-bit count and that many values;
* ``MAP``: a 32-bit count and that many (64-bit integer key, value) pairs (an inbox's ``{user: message}``);
* ``OBJECT``: a 32-bit count and that many (16-bit name length, UTF-8 name, value) fields.

:func:`decode` reads exactly that and nothing else: a wrong magic or version, an unknown tag, a count or length past
the body's end, a key or name twice, nesting deeper than :data:`DEPTH` or bytes after the value are a
ParameterError naming the field where it stopped (``body.backups[3].sealed``) and the byte offset; the services turn
it into 400 ``malformed``. What the fields must hold (their names, types and sizes) the services check as before.
JSON stays for the human-facing routes (a task's state, the roster, enrollment, the result) and is still taken on
these routes (``application/json``, bytes as base64) for a hand-made request.
"""

from __future__ import annotations

import struct
from collections.abc import Mapping

from ..errors import ParameterError

MEDIA_TYPE = "application/vnd.privagg.round"
MAGIC, VERSION = b"PVR", 1
HEADER = struct.Struct("<3sB")  # magic, version
INT, BYTES, TEXT, LIST, MAP, OBJECT = range(1, 7)
DEPTH = 8  # the deepest nesting of lists, maps and objects a body may hold (an inbox's is 4)
_I64, _U32, _U16 = struct.Struct("<q"), struct.Struct("<I"), struct.Struct("<H")


def encode(value: Mapping[str, object]) -> bytes:
    """The body holding ``value``: an object of named fields whose values are integers, bytes, text, lists,
    integer-keyed mappings and string-keyed mappings (objects)."""
    out = [HEADER.pack(MAGIC, VERSION)]
    _encode(value, out)
    return b"".join(out)


def _encode(value, out: list) -> None:
    if isinstance(value, (bytes, bytearray, memoryview)):
        out += [bytes([BYTES]), _U32.pack(len(value)), bytes(value)]
    elif isinstance(value, str):
        raw = value.encode()
        out += [bytes([TEXT]), _U32.pack(len(raw)), raw]
    elif isinstance(value, Mapping) and all(isinstance(k, str) for k in value):
        out += [bytes([OBJECT]), _U32.pack(len(value))]
        for name, v in value.items():
            raw = name.encode()
            out += [_U16.pack(len(raw)), raw]
            _encode(v, out)
    elif isinstance(value, Mapping):
        out += [bytes([MAP]), _U32.pack(len(value))]
        for k, v in value.items():
            out.append(_I64.pack(int(k)))
            _encode(v, out)
    elif isinstance(value, (list, tuple)):
        out += [bytes([LIST]), _U32.pack(len(value))]
        for v in value:
            _encode(v, out)
    elif hasattr(value, "__index__") and not isinstance(value, bool):
        out += [bytes([INT]), _I64.pack(int(value))]
    else:
        raise TypeError(f"a round body holds integers, bytes, text, lists and mappings, not {type(value).__name__}")


def decode(raw: bytes, what: str = "body") -> dict:
    """The object a body holds (bytes as bytes, maps as dicts with integer keys), every length checked against the
    body; a ParameterError naming the field (``what`` and its path) otherwise."""
    if not isinstance(raw, (bytes, bytearray)) or len(raw) < HEADER.size:
        raise ParameterError(what, f"a privagg round body ({MEDIA_TYPE}) of at least {HEADER.size} bytes",
                             f"{len(raw)} bytes" if isinstance(raw, (bytes, bytearray)) else type(raw).__name__)
    magic, version = HEADER.unpack_from(raw)
    if magic != MAGIC or version != VERSION:
        raise ParameterError(what, f"version {VERSION} of privagg's round bodies (magic {MAGIC!r})",
                             f"magic {bytes(magic)!r}, version {version}")
    reader = _Reader(bytes(raw), HEADER.size)
    value = reader.value(what, 0)
    if not isinstance(value, dict):
        raise ParameterError(what, "an object of named fields", "another value")
    if reader.at != len(raw):
        raise ParameterError(what, f"nothing after its value (ends at byte {reader.at})",
                             f"{len(raw) - reader.at} more bytes")
    return value


class _Reader:
    def __init__(self, raw: bytes, at: int) -> None:
        self.raw, self.at = raw, at

    def take(self, size: int, field: str) -> bytes:
        if size > len(self.raw) - self.at:
            raise ParameterError(field, f"{size} bytes at byte {self.at}", f"{len(self.raw) - self.at} left: "
                                 "the body is truncated or a length is wrong")
        self.at += size
        return self.raw[self.at - size:self.at]

    def unpack(self, form: struct.Struct, field: str) -> int:
        return form.unpack(self.take(form.size, field))[0]

    def count(self, field: str) -> int:
        """A count of entries, each at least one byte: no more than the bytes left."""
        count = self.unpack(_U32, field)
        if count > len(self.raw) - self.at:
            raise ParameterError(field, f"at most {len(self.raw) - self.at} entries (the bytes left at byte "
                                 f"{self.at})", count)
        return count

    def value(self, field: str, depth: int):
        tag = self.take(1, field)[0]
        if tag == INT:
            return self.unpack(_I64, field)
        if tag in (BYTES, TEXT):
            raw = self.take(self.unpack(_U32, field), field)
            if tag == BYTES:
                return raw
            try:
                return raw.decode()
            except UnicodeDecodeError:
                raise ParameterError(field, "UTF-8 text", f"undecodable bytes at byte {self.at - len(raw)}") from None
        if tag not in (LIST, MAP, OBJECT):
            raise ParameterError(field, f"a value's tag ({INT}-{OBJECT}) at byte {self.at - 1}", tag)
        if depth >= DEPTH:
            raise ParameterError(field, f"values nested at most {DEPTH} deep", "deeper")
        count = self.count(field)
        if tag == LIST:
            return [self.value(f"{field}[{i}]", depth + 1) for i in range(count)]
        out: dict = {}
        for _ in range(count):
            if tag == MAP:
                key = self.unpack(_I64, f"{field}'s keys")
            else:
                name = self.take(self.unpack(_U16, f"{field}'s names"), f"{field}'s names")
                try:
                    key = name.decode()
                except UnicodeDecodeError:
                    raise ParameterError(f"{field}'s names", "UTF-8 text", f"undecodable bytes at byte "
                                         f"{self.at - len(name)}") from None
            if key in out:
                raise ParameterError(field, "each key once", f"{key!r} twice")
            out[key] = self.value(f"{field}[{key}]" if tag == MAP else f"{field}.{key}", depth + 1)
        return out
