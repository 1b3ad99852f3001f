"""The round services' binary bodies (service/round_wire.py: a header, then MessagePack): what the SDK and the server
exchange in place of JSON with base64, read back exactly, and every malformed body (truncated anywhere, bytes after
it, another version or magic, a length or count past its end, a key twice, an extension type, nesting too deep) a
ParameterError naming the field, never another exception, and nothing made much larger than the body."""

from __future__ import annotations

import struct
import tracemalloc

import msgpack
import numpy as np
import pytest

from privagg.errors import ParameterError
from privagg.service.round_wire import DEPTH, HEADER, MAGIC, VERSION, decode, encode

INBOX = {"round": 2, "name": "check", "inbox": {"senders": [0, 1, 5], "keys": {1: b"\x00" * 80, 7: b""},
                                                "nested": [{3: [b"a", -4]}], "graph_seed": 2**63 - 1},
         "backups": [{"sender": 1, "sealed": bytes(range(256)) * 2, "signature": b"s" * 64},
                     {"sender": 3, "sealed": b"", "signature": b"t" * 64}],
         "mixed": [{"a": 1}, {"b": 2}, {"a": "x"}, [], [b"", 0]], "empty": [], "rows": [{"a": 1, "b": b""}, {"a": "t", "b": 5}],
         "signatures": {"keys": [{"sender": 1, "signature": b"g" * 64}]},
         "public_keys": [{"user": 4, "public_key": b"k" * 32}], "secret": "text \u00e9", "least": -2**63}
HEAD = HEADER.pack(MAGIC, VERSION)
FORM = r"body must be one MessagePack map after the magic b'PVR' and version 1"


def field(value: bytes) -> bytes:
    """A body of one field ``x`` whose value is the MessagePack bytes ``value`` (well formed or not)."""
    return HEAD + b"\x81\xa1x" + value


def test_a_body_reads_back_as_written():
    raw = encode(INBOX)
    assert raw[:HEADER.size] == HEAD and msgpack.unpackb(raw[HEADER.size:], strict_map_key=False) == INBOX
    assert decode(raw) == INBOX
    assert decode(encode({"n": np.int64(3), "t": (1, 2)})) == {"n": 3, "t": [1, 2]}  # numpy integers, tuples
    assert decode(encode({"x": None, "y": True, "z": 1.5})) == {"x": None, "y": True, "z": 1.5}  # as JSON's: the
    # services refuse them field by field (test_sharing_service.py: a recipient None, a sealed backup 1.5)


def test_relayed_messages_cost_their_bytes_and_a_few_of_framing():
    """k relayed messages cost their bytes, their field names and 6 bytes of framing each, not base64's 4/3."""
    rows = [{"sender": i, "sealed": bytes(128), "signature": bytes(64)} for i in range(60)]
    names = len("sendersealedsignature") + 3  # fixstr headers
    assert len(encode({"backups": rows})) == HEADER.size + 1 + 1 + len("backups") + 3 + 60 * (
        1 + names + 1 + 2 + 128 + 2 + 64)  # array 16; a row: fixmap, fixint sender, bin 8 headers


def test_bytes_go_as_bytes_not_base64():
    """The sealed payload is carried at its size plus a few bytes of framing (base64 alone is 4/3 of it)."""
    sealed = bytes(10_000)
    assert len(encode({"sealed": sealed})) - len(sealed) == HEADER.size + 1 + 1 + len("sealed") + 3  # bin 16


@pytest.mark.parametrize("value", [{2.0}, object(), 1j])
def test_what_a_body_cannot_hold_is_a_type_error_at_the_sender(value):
    with pytest.raises(TypeError, match="a round body holds"):
        encode({"x": value})


def test_every_truncation_is_refused_naming_the_field():
    raw = encode(INBOX)
    for end in range(len(raw)):
        with pytest.raises(ParameterError, match="body must be"):
            decode(raw[:end])
    with pytest.raises(ParameterError, match=FORM + r", got a truncated body \(a value or a length past its end\)"):
        decode(raw[:raw.index(bytes(range(256))) + 100])
    with pytest.raises(ParameterError, match=r"round 1 must be one MessagePack map .* got a truncated body"):
        decode(raw[:-1], "round 1")
    with pytest.raises(ParameterError, match="body must be a privagg round body .* of at least 4 bytes, got 3 bytes"):
        decode(raw[:3])


def test_bytes_after_the_value_are_refused():
    with pytest.raises(ParameterError, match=FORM + ", got 1 more bytes after it"):
        decode(encode(INBOX) + b"\x00")
    with pytest.raises(ParameterError, match=FORM + ", got 5 more bytes after it"):
        decode(encode(INBOX) + encode({}))


@pytest.mark.parametrize("header, said", [(HEADER.pack(MAGIC, VERSION + 1), "version 2"),
                                          (HEADER.pack(b"PVS", VERSION), "magic b'PVS'"),
                                          (b'{"us', "magic b'{\"u'")])
def test_another_version_or_magic_is_refused_naming_it(header, said):
    raw = encode(INBOX)
    with pytest.raises(ParameterError, match=f"body must be version 1 of privagg's round bodies .*{said}"):
        decode(header + raw[HEADER.size:])


@pytest.mark.parametrize("value, said", [
    (b"\xc6" + struct.pack(">I", 2**32 - 1), "a truncated body"),  # bin 32
    (b"\xdb" + struct.pack(">I", 2**32 - 1), "a truncated body"),  # str 32
    (b"\xdd" + struct.pack(">I", 2**32 - 1), r"a length or count past the body's size \(4294967295 exceeds "
                                             r"max_array_len\(12\)\)"),
    (b"\xdf" + struct.pack(">I", 2**32 - 1), r"a length or count past the body's size \(4294967295 exceeds "
                                             r"max_map_len\(6\)\)"),
    (b"\xdc" + struct.pack(">H", 1000) + bytes(999), "a truncated body")])  # array 16 of 1000, 999 given
def test_lengths_and_counts_past_the_end_are_refused_before_anything_is_made(value, said):
    tracemalloc.start()
    try:
        with pytest.raises(ParameterError, match=f"{FORM}, got {said}"):
            decode(field(value))
        assert tracemalloc.get_traced_memory()[1] < 64_000  # 4 GB claimed, nothing of that size made
    finally:
        tracemalloc.stop()


def test_a_count_as_large_as_the_body_makes_a_few_times_its_size_at_most():
    """The counts are bounded by the body's size (an entry takes a byte at least): a hostile body of n bytes makes at
    most a list of n entries (8 bytes each) before its truncation is found."""
    n = 100_000
    raw = field(b"\xdd" + struct.pack(">I", n + 12) + bytes(n))  # the largest count the bound lets through
    tracemalloc.start()
    try:
        with pytest.raises(ParameterError, match="a truncated body"):
            decode(raw)
        assert tracemalloc.get_traced_memory()[1] < 10 * len(raw)
    finally:
        tracemalloc.stop()


def test_the_top_level_is_a_map_of_fields():
    for value in ([], 1, b"x", "x", None):
        with pytest.raises(ParameterError, match=f"{FORM}, got a {type(value).__name__}"):
            decode(HEAD + msgpack.packb(value, use_bin_type=True))
    assert decode(encode({})) == {}


def test_a_key_twice_is_refused_where_messagepack_keeps_the_last():
    twice = b"\x82\x05\x01\x05\x02"  # {5: 1, 5: 2}
    assert msgpack.unpackb(twice, strict_map_key=False) == {5: 2}  # what the reader alone would make of it
    with pytest.raises(ParameterError, match=FORM + ", each key of a map once, got 5 twice"):
        decode(field(twice))
    with pytest.raises(ParameterError, match=FORM + ", each key of a map once, got 'x' twice"):
        decode(HEAD + b"\x82\xa1x\x01\xa1x\x02")
    with pytest.raises(ParameterError, match="round 2 must be .* each key of a map once, got 1 twice"):
        decode(field(b"\x82\xc3\x01\x01\x02"), "round 2")  # True and 1: one key to a dict
    long = msgpack.packb("k" * 10**5)
    with pytest.raises(ParameterError, match=r"got 'k{39}\.\.\. \(100002 characters\) twice$"):
        decode(field(b"\x82" + long + b"\x01" + long + b"\x02"))  # a key twice, not echoed whole


@pytest.mark.parametrize("value, said", [(b"\xc1", "a byte that starts no MessagePack value"),
                                         (b"\xd4\x05\x00", "an extension type"),  # fixext 1
                                         (b"\xc7\x00\x05", "extension type 5"),  # ext 8, empty
                                         (b"\xd6\xff" + bytes(4), "an extension type"),  # a timestamp
                                         (b"\xa2\xff\xfe", "text that is not UTF-8"),
                                         (b"\x81\x90\x01", "an array or a map as a map's key"),
                                         (b"\x81\x80\x01", "an array or a map as a map's key")])
def test_values_messagepack_holds_and_these_bodies_do_not_are_refused(value, said):
    with pytest.raises(ParameterError, match=f"{FORM}, (no extension types, )?got {said}"):
        decode(field(value))


def test_deep_nesting_is_refused_before_anything_recurses_on_it():
    """MessagePack's reader stops at 1,024 levels, deep enough for ``repr`` (a refusal showing the value) to overflow
    the stack; a body nests at most DEPTH levels."""
    deep: dict = {"x": 1}
    for _ in range(DEPTH - 1):
        deep = {"x": deep}
    assert decode(encode(deep)) == deep
    with pytest.raises(ParameterError, match=f"{FORM}, arrays and maps nested at most {DEPTH} deep, got deeper"):
        decode(encode({"x": deep}))
    with pytest.raises(ParameterError, match=f"nested at most {DEPTH} deep"):
        decode(field(b"\x91" * 1000 + b"\x00"))  # within the reader's bound, past repr's
    with pytest.raises(ParameterError, match=f"{FORM}, got arrays and maps nested more than 1,024 deep"):
        decode(field(b"\x91" * 5000 + b"\x00"))


def test_random_damage_is_a_parameter_error_or_a_body_never_another_exception():
    raw, rng = bytearray(encode(INBOX)), np.random.default_rng(47)
    for _ in range(3000):
        damaged = bytearray(raw)
        for at in rng.integers(0, len(raw), rng.integers(1, 4)):
            damaged[at] = int(rng.integers(0, 256))
        try:
            assert isinstance(decode(bytes(damaged)), dict)
        except ParameterError:
            pass
