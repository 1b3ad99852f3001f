"""The round services' binary bodies (issue 47): a user's inbox request and round answer, and the inbox the server
answers with, in place of JSON with base64: the sealed backups, relayed messages and signatures go as their bytes.

A body is :data:`HEADER` (magic ``PVR``, :data:`VERSION`, as :mod:`privagg.protocols.sharing_messages`' header, so
that another version is refused by name), then one MessagePack value (https://msgpack.org): a map of named fields
whose values are integers, bytes (``bin``), text (``str``), arrays and maps (integer keys for an inbox's
``{user: message}``). MessagePack does this job, so it is not written here: a specified format with libraries in
every language a client may be written in, its values the ones these bodies hold; the ``msgpack`` package's C
packer and reader write a round-1 answer or an inbox at k = 66 in a third of the CPU of the columnar codec written
here before it and read it in about as much, checks included (docs/benchmarks.md part 16).

:func:`decode` reads it with every length bounded by the body's own (a string, bytes or array at most the body's
size, a map half of it: each entry takes a byte at least, so a count past the body's size is refused before
anything is made, and one within it makes a list of at most that many entries before a truncation is found), no
extension types, no key twice in a map (MessagePack allows it and its reader keeps the last one), at most
:data:`DEPTH` levels of arrays and maps (the reader's own bound is 1,024, past Python's recursion limit: ``repr`` of
a refused value would fail), and nothing after the value. A wrong magic or version, a truncated body, bytes after the value, a top level
that is not a map and each of the above is a ParameterError naming the field (``body``) and the accepted form; the
services turn it into 400 ``malformed``. What the fields must hold (names, types, sizes) the services check as before,
as they do a JSON body's: MessagePack's nil, booleans and floats, like JSON's null, true and 1.5, are refused there
field by field. JSON stays for the human-facing routes (a task's state, the roster, enrollment, the result) and is
still taken on these routes (``application/json``, bytes as base64) for a hand-made request.
"""

from __future__ import annotations

import operator
import struct
from collections.abc import Mapping

import msgpack

from ..errors import ParameterError

MEDIA_TYPE = "application/vnd.privagg.round"
MAGIC, VERSION = b"PVR", 1
HEADER = struct.Struct("<3sB")  # magic, version
DEPTH = 8  # the deepest nesting of arrays and maps a body may hold (an inbox's is 3)
_FORM = f"one MessagePack map after the magic {MAGIC!r} and version {VERSION}"


def _plain(value):
    """What ``msgpack.packb`` calls for a value it cannot write: a numpy integer as an int, a mapping as a dict."""
    if hasattr(value, "__index__") and not isinstance(value, bool):
        return operator.index(value)
    if isinstance(value, Mapping):
        return dict(value)
    raise TypeError(f"a round body holds integers, bytes, text, lists and mappings, not {type(value).__name__}")


def encode(value: Mapping[str, object]) -> bytes:
    """The body holding ``value``: a map of named fields whose values are integers, bytes, text, lists and
    mappings (integer-keyed or named); a TypeError for what MessagePack cannot hold."""
    return HEADER.pack(MAGIC, VERSION) + msgpack.packb(value, use_bin_type=True, default=_plain)


def _pairs(pairs: list) -> dict:
    """A map as the reader hands it (its pairs in order): a dict, unless a key comes twice."""
    out = dict(pairs)
    if len(out) != len(pairs):
        seen: set = set()
        twice = repr(next(k for k, _ in pairs if k in seen or seen.add(k)))
        if len(twice) > 40:  # the sender's key, shown cut (as web.shown does; the SDK does not import web)
            twice = f"{twice[:40]}... ({len(twice)} characters)"
        raise ParameterError("body", f"{_FORM}, each key of a map once", f"{twice} twice")
    return out


def _no_ext(code: int, data: bytes):
    raise ParameterError("body", f"{_FORM}, no extension types", f"extension type {code}")


def _why(err: Exception) -> str:
    if isinstance(err, msgpack.ExtraData):
        return f"{len(err.extra)} more bytes after it"
    if isinstance(err, msgpack.StackError):
        return "arrays and maps nested more than 1,024 deep"
    if isinstance(err, UnicodeDecodeError):
        return "text that is not UTF-8"
    if isinstance(err, TypeError):  # unhashable
        return "an array or a map as a map's key"
    if isinstance(err, msgpack.FormatError):
        return "a byte that starts no MessagePack value"
    if "max_ext_len" in str(err):
        return "an extension type"
    if "exceeds max_" in str(err):  # "4294967295 exceeds max_array_len(12)"
        return f"a length or count past the body's size ({err})"
    if "incomplete input" in str(err):
        return "a truncated body (a value or a length past its end)"
    return f"unreadable MessagePack ({err})"


def _deeper(value) -> bool:
    """Whether ``value`` nests arrays and maps more than :data:`DEPTH` deep (read level by level, no recursion)."""
    level = [value]
    for _ in range(DEPTH):
        level = [v for c in level for v in (c.values() if type(c) is dict else c)
                 if type(v) is dict or type(v) is list]
        if not level:
            return False
    return True


def decode(raw: bytes, what: str = "body") -> dict:
    """The map a body holds (bytes as bytes, text as str, arrays as lists, maps as dicts), every length checked
    against the body; a ParameterError naming the field (``what``) otherwise."""
    if not isinstance(raw, (bytes, bytearray)) or len(raw) < HEADER.size:
        raise ParameterError(what, f"a privagg round body ({MEDIA_TYPE}) of at least {HEADER.size} bytes",
                             f"{len(raw)} bytes" if isinstance(raw, (bytes, bytearray)) else type(raw).__name__)
    magic, version = HEADER.unpack_from(raw)
    if magic != MAGIC or version != VERSION:
        raise ParameterError(what, f"version {VERSION} of privagg's round bodies (magic {MAGIC!r})",
                             f"magic {bytes(magic)!r}, version {version}")
    size = len(raw)
    try:
        value = msgpack.unpackb(memoryview(raw)[HEADER.size:], raw=False, strict_map_key=False, use_list=True,
                                object_pairs_hook=_pairs, ext_hook=_no_ext, max_str_len=size, max_bin_len=size,
                                max_array_len=size, max_map_len=size // 2, max_ext_len=0)
    except ParameterError as err:
        raise ParameterError(what, err.accepted, err.got) from None
    except (ValueError, TypeError) as err:
        raise ParameterError(what, _FORM, _why(err)) from None
    if type(value) is not dict:
        raise ParameterError(what, _FORM, f"a {type(value).__name__}")
    if _deeper(value):
        raise ParameterError(what, f"{_FORM}, arrays and maps nested at most {DEPTH} deep", "deeper")
    return value
