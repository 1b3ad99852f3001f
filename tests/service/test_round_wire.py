"""The round services' binary bodies (service/round_wire.py): what the SDK and the server exchange in place of JSON
with base64, read back exactly, and every malformed body (truncated anywhere, bytes after it, another version or
magic, a length or count past its end, a key twice, an unknown tag, nesting too deep) a ParameterError naming the
field, never another exception."""

from __future__ import annotations

import struct

import numpy as np
import pytest

from privagg.errors import ParameterError
from privagg.service import round_wire
from privagg.service.round_wire import ANY, BYTES, HEADER, INT, LIST, MAGIC, MAP, OBJECT, TABLE, VERSION, decode, encode

INBOX = {"round": 2, "name": "check", "inbox": {"senders": [0, 1, 5], "keys": {1: b"\x00" * 80, 7: b""},
                                                "nested": [{3: [b"a", -4]}], "graph_seed": 2**63 - 1},
         "backups": [{"sender": 1, "sealed": bytes(range(256)) * 2, "signature": b"s" * 64},
                     {"sender": 3, "sealed": b"", "signature": b"t" * 64}],
         "mixed": [{"a": 1}, {"b": 2}, {"a": "x"}, [], [b"", 0]], "empty": [], "rows": [{"a": 1, "b": b""}, {"a": "t", "b": 5}],
         "signatures": {"keys": [{"sender": 1, "signature": b"g" * 64}]},
         "public_keys": [{"user": 4, "public_key": b"k" * 32}], "secret": "text \u00e9", "least": -2**63}


def test_a_body_reads_back_as_written():
    raw = encode(INBOX)
    assert raw[:HEADER.size] == HEADER.pack(MAGIC, VERSION)
    assert decode(raw) == INBOX
    assert decode(encode({"n": np.int64(3), "t": (1, 2)})) == {"n": 3, "t": [1, 2]}  # numpy integers, tuples
    assert raw[raw.index(b"backups") + len("backups")] == TABLE  # rows of one shape go as columns


def test_relayed_messages_go_as_columns_of_their_bytes():
    """k relayed messages (a table's rows) cost their bytes and 4 bytes of length each, not k times three tags and
    names: the bulk travels at about its size."""
    rows = [{"sender": i, "sealed": bytes(128), "signature": bytes(64)} for i in range(60)]
    payload = 60 * (8 + 128 + 64)
    assert len(encode({"backups": rows})) - payload == HEADER.size + 1 + 4 + 2 + 7 + 1 + 4 + 2 + 3 * (2 + 1) + len(
        "sendersealedsignature") + 2 * 60 * 4


def test_bytes_go_as_bytes_not_base64():
    """The sealed payload is carried at its size plus a few bytes of framing (base64 alone is 4/3 of it)."""
    sealed = bytes(10_000)
    assert len(encode({"sealed": sealed})) - len(sealed) == HEADER.size + 1 + 4 + 2 + len("sealed") + 1 + 4


@pytest.mark.parametrize("value", [None, True, 1.5, {1: {2.0}}])
def test_what_a_body_cannot_hold_is_a_type_error_at_the_sender(value):
    with pytest.raises(TypeError, match="a round body holds"):
        encode({"x": value})


def test_every_truncation_names_the_field_where_it_stopped():
    raw = encode(INBOX)
    for end in range(len(raw)):
        with pytest.raises(ParameterError):
            decode(raw[:end])
    with pytest.raises(ParameterError, match=r"body\.backups\.sealed must be 512 bytes at byte \d+, got \d+ "
                                             r"left: the body is truncated"):
        decode(raw[:raw.index(bytes(range(256))) + 100])


def test_bytes_after_the_value_are_refused():
    with pytest.raises(ParameterError, match="body must be nothing after its value .* got 1 more bytes"):
        decode(encode(INBOX) + b"\x00")


@pytest.mark.parametrize("header, said", [(HEADER.pack(MAGIC, VERSION + 1), "version 2"),
                                          (HEADER.pack(b"PVS", VERSION), "magic b'PVS'"),
                                          (b'{"us', "magic b'{\"u'")])
def test_another_version_or_magic_is_refused_naming_it(header, said):
    raw = encode(INBOX)
    with pytest.raises(ParameterError, match=f"body must be version 1 of privagg's round bodies .*{said}"):
        decode(header + raw[HEADER.size:])


def test_lengths_and_counts_past_the_end_are_refused_before_anything_is_allocated():
    head = HEADER.pack(MAGIC, VERSION) + bytes([OBJECT]) + struct.pack("<I", 1) + struct.pack("<H", 1) + b"x"
    with pytest.raises(ParameterError, match=r"body\.x must be 4294967295 bytes at byte \d+, got 0 left"):
        decode(head + bytes([BYTES]) + struct.pack("<I", 2**32 - 1))
    with pytest.raises(ParameterError, match=r"body\.x must be at most 0 entries .* got 4294967295"):
        decode(head + bytes([LIST]) + struct.pack("<I", 2**32 - 1))
    with pytest.raises(ParameterError, match=r"body\.x must be 8000 bytes at byte \d+, got 1000 left"):
        decode(head + bytes([LIST]) + struct.pack("<I", 1000) + bytes([INT]) + bytes(1000))
    with pytest.raises(ParameterError, match=r"body\.x must be 9 bytes at byte \d+, got 8 left"):  # lengths' sum
        decode(head + bytes([LIST]) + struct.pack("<I", 2) + bytes([BYTES]) + struct.pack("<2I", 4, 5) + bytes(8))
    with pytest.raises(ParameterError, match="body must be an object of named fields"):
        decode(HEADER.pack(MAGIC, VERSION) + bytes([LIST]) + struct.pack("<I", 0) + bytes([ANY]))


def test_a_key_twice_an_unknown_tag_and_deep_nesting_are_refused():
    head = HEADER.pack(MAGIC, VERSION) + bytes([OBJECT]) + struct.pack("<I", 1) + struct.pack("<H", 1) + b"m"
    twice = bytes([MAP]) + struct.pack("<I", 2) + struct.pack("<2q", 5, 5) + bytes([INT]) + bytes(16)
    with pytest.raises(ParameterError, match=r"body\.m must be each key once, got 5 twice"):
        decode(head + twice)
    with pytest.raises(ParameterError, match=r"body\.m must be each name once, got 'a' twice"):
        decode(head + bytes([TABLE]) + struct.pack("<IH", 1, 2) + (struct.pack("<H", 1) + b"a" + bytes([INT]) +
                                                                   bytes(8)) * 2)
    with pytest.raises(ParameterError, match=r"body\.m\.a must be a column's kind \(0, 1 or 2\) at byte \d+, got 5"):
        decode(head + bytes([TABLE]) + struct.pack("<IH", 1, 1) + struct.pack("<H", 1) + b"a" + bytes([5]) + bytes(8))
    assert decode(head + bytes([LIST]) + struct.pack("<I", 1) + bytes([ANY, INT]) + bytes(8)) == {"m": [0]}
    with pytest.raises(ParameterError, match=r"body\.x must be a value's tag \(1-7\) at byte \d+, got 9"):
        decode(encode({"x": 1})[:-9] + bytes([9]) + bytes(8))
    deep: dict = {"x": 1}
    for _ in range(round_wire.DEPTH):
        deep = {"x": deep}
    with pytest.raises(ParameterError, match="must be values nested at most 8 deep"):
        decode(encode(deep))


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
