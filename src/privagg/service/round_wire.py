"""The round services' binary bodies (issue 47): a user's inbox request and round answer, and the inbox the server
answers with, versioned as privagg's protocol messages are (a magic and a version first, as
:mod:`privagg.protocols.sharing_messages`' header), in place of JSON with base64: the sealed backups, relayed messages
and signatures go as their bytes.

A body is :data:`HEADER` (magic ``PVR``, :data:`VERSION`), then one value: an object of named fields. Each value is a
tag byte, then (every integer and length little-endian)

* ``INT``: a signed 64-bit integer;
* ``BYTES`` / ``TEXT``: a 32-bit length and that many bytes (UTF-8 for text);
* ``LIST``: a 32-bit count and a column of that many values;
* ``MAP``: a 32-bit count, that many 64-bit integer keys, and a column of their values (an inbox's ``{user: message}``);
* ``OBJECT``: a 32-bit count and that many (16-bit name length, UTF-8 name, value) fields;
* ``TABLE``: a list of objects with the same fields (the relayed messages, their signatures, the keys): a 32-bit
  count of rows, a 16-bit count of fields, and for each its name and its column of the rows' values.

A column is a kind byte, then its values: ``INT``, as many 64-bit integers; ``BYTES``, as many 32-bit lengths, then the
bytes one after another; ``ANY``, as many values, each with its tag. Integers and bytes go in columns so that a body
of k relayed messages is read in a few calls, not k times three (JSON's C parser read the old bodies faster than a
value-by-value reader would).

:func:`decode` reads exactly that and nothing else: a wrong magic or version, an unknown tag or kind, a count or
length past the body's end, a key or name twice, nesting deeper than :data:`DEPTH` or bytes after the value are a
ParameterError naming the field where it stopped (``body.backups.sealed``) and the byte offset; the services turn it
into 400 ``malformed``. What the fields must hold (their names, types and sizes) the services check as before. JSON
stays for the human-facing routes (a task's state, the roster, enrollment, the result) and is still taken on these
routes (``application/json``, bytes as base64) for a hand-made request.
"""

from __future__ import annotations

import struct
from collections.abc import Mapping

from ..errors import ParameterError

MEDIA_TYPE = "application/vnd.privagg.round"
MAGIC, VERSION = b"PVR", 1
HEADER = struct.Struct("<3sB")  # magic, version
INT, BYTES, TEXT, LIST, MAP, OBJECT, TABLE = range(1, 8)  # value tags
ANY = 0  # a column's kind besides INT and BYTES: each value tagged
DEPTH = 8  # the deepest nesting of lists, maps, objects and tables a body may hold (an inbox's is 3)
_I64, _U32, _U16 = struct.Struct("<q"), struct.Struct("<I"), struct.Struct("<H")
_TAGS = {tag: bytes([tag]) for tag in range(ANY, TABLE + 1)}


def encode(value: Mapping[str, object]) -> bytes:
    """The body holding ``value``: an object of named fields whose values are integers, bytes, text, lists,
    integer-keyed mappings and string-keyed mappings (objects)."""
    out = [HEADER.pack(MAGIC, VERSION)]
    _encode(value, out)
    return b"".join(out)


def _is_int(v) -> bool:
    return hasattr(v, "__index__") and not isinstance(v, bool)


def _name(name: str) -> bytes:
    raw = name.encode()
    return _U16.pack(len(raw)) + raw


def _column(values: list, out: list) -> None:
    if values and all(type(v) is bytes for v in values):
        out += [_TAGS[BYTES], struct.pack(f"<{len(values)}I", *map(len, values)), *values]
    elif values and all(_is_int(v) for v in values):
        out += [_TAGS[INT], struct.pack(f"<{len(values)}q", *map(int, values))]
    else:
        out.append(_TAGS[ANY])
        for v in values:
            _encode(v, out)


def _encode(value, out: list) -> None:
    if isinstance(value, (bytes, bytearray, memoryview)):
        out += [_TAGS[BYTES], _U32.pack(len(value)), bytes(value)]
    elif isinstance(value, str):
        raw = value.encode()
        out += [_TAGS[TEXT], _U32.pack(len(raw)), raw]
    elif isinstance(value, Mapping) and all(isinstance(k, str) for k in value):
        out += [_TAGS[OBJECT], _U32.pack(len(value))]
        for name, v in value.items():
            out.append(_name(name))
            _encode(v, out)
    elif isinstance(value, Mapping):
        keys = list(value)
        if not all(_is_int(k) for k in keys):
            raise TypeError("a round body's mappings have integer keys (a map) or string keys (an object)")
        out += [_TAGS[MAP], _U32.pack(len(keys)), struct.pack(f"<{len(keys)}q", *map(int, keys))]
        _column(list(value.values()), out)
    elif isinstance(value, (list, tuple)):
        first = value[0] if value else None
        if isinstance(first, dict) and first and all(isinstance(k, str) for k in first) and all(
                isinstance(v, dict) and v.keys() == first.keys() for v in value):
            out += [_TAGS[TABLE], _U32.pack(len(value)), _U16.pack(len(first))]
            for name in first:
                out.append(_name(name))
                _column([row[name] for row in value], out)
        else:
            out += [_TAGS[LIST], _U32.pack(len(value))]
            _column(list(value), out)
    elif _is_int(value):
        out += [_TAGS[INT], _I64.pack(int(value))]
    else:
        raise TypeError(f"a round body holds integers, bytes, text, lists and mappings, not {type(value).__name__}")


def decode(raw: bytes, what: str = "body") -> dict:
    """The object a body holds (bytes as bytes, maps as dicts with integer keys, tables as lists of dicts), every
    length checked against the body; a ParameterError naming the field (``what`` and its path) otherwise."""
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

    def need(self, size: int, field: str) -> None:
        if size > len(self.raw) - self.at:
            raise ParameterError(field, f"{size} bytes at byte {self.at}", f"{len(self.raw) - self.at} left: "
                                 "the body is truncated or a length is wrong")

    def take(self, size: int, field: str) -> bytes:
        self.need(size, field)
        self.at += size
        return self.raw[self.at - size:self.at]

    def unpack(self, form: struct.Struct, field: str) -> int:
        return form.unpack(self.take(form.size, field))[0]

    def numbers(self, count: int, code: str, field: str) -> tuple:
        """``count`` integers of struct ``code`` (``q``, ``I``): checked to fit before they are read."""
        size = count * struct.calcsize(code)
        self.need(size, field)
        self.at += size
        return struct.unpack_from(f"<{count}{code}", self.raw, self.at - size)

    def text(self, raw: bytes, field: str) -> str:
        try:
            return raw.decode()
        except UnicodeDecodeError:
            raise ParameterError(field, "UTF-8 text", f"undecodable bytes at byte {self.at - len(raw)}") from None

    def column(self, count: int, field: str, depth: int) -> list:
        kind = self.take(1, field)[0]
        if kind == INT:
            return list(self.numbers(count, "q", field))
        if kind == BYTES:
            lengths = self.numbers(count, "I", field)
            self.need(sum(lengths), field)
            out, at = [], self.at
            for size in lengths:
                out.append(self.raw[at:at + size])
                at += size
            self.at = at
            return out
        if kind != ANY:
            raise ParameterError(field, f"a column's kind ({ANY}, {INT} or {BYTES}) at byte {self.at - 1}", kind)
        return [self.value(f"{field}[{i}]", depth) for i in range(count)]

    def value(self, field: str, depth: int):
        tag = self.take(1, field)[0]
        if tag == INT:
            return self.unpack(_I64, field)
        if tag in (BYTES, TEXT):
            raw = self.take(self.unpack(_U32, field), field)
            return raw if tag == BYTES else self.text(raw, field)
        if tag not in (LIST, MAP, OBJECT, TABLE):
            raise ParameterError(field, f"a value's tag ({INT}-{TABLE}) at byte {self.at - 1}", tag)
        if depth >= DEPTH:
            raise ParameterError(field, f"values nested at most {DEPTH} deep", "deeper")
        count = self.unpack(_U32, field)
        if count > len(self.raw) - self.at:  # each entry at least a byte: nothing is made for a count past the end
            raise ParameterError(field, f"at most {len(self.raw) - self.at} entries (the bytes left at byte "
                                 f"{self.at})", count)
        if tag == LIST:
            return self.column(count, field, depth + 1)
        if tag == MAP:
            keys = self.numbers(count, "q", f"{field}'s keys")
            if len(set(keys)) != count:
                raise ParameterError(field, "each key once", f"{next(k for k in keys if keys.count(k) > 1)!r} twice")
            return dict(zip(keys, self.column(count, field, depth + 1)))
        if tag == OBJECT:
            out: dict = {}
            for _ in range(count):
                name = self.text(self.take(self.unpack(_U16, f"{field}'s names"), f"{field}'s names"), f"{field}'s names")
                if name in out:
                    raise ParameterError(field, "each name once", f"{name!r} twice")
                out[name] = self.value(f"{field}.{name}", depth + 1)
            return out
        columns: dict = {}
        for _ in range(self.unpack(_U16, field)):
            name = self.text(self.take(self.unpack(_U16, f"{field}'s names"), f"{field}'s names"), f"{field}'s names")
            if name in columns:
                raise ParameterError(field, "each name once", f"{name!r} twice")
            columns[name] = self.column(count, f"{field}.{name}", depth + 1)
        if not columns:
            raise ParameterError(field, "a table of at least one field", "none")
        names = list(columns)
        return [dict(zip(names, row)) for row in zip(*columns.values())]
