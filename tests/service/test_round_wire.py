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
from privagg.service.round_wire import BYTES, HEADER, LIST, MAGIC, MAP, OBJECT, VERSION, decode, encode

INBOX = {"round": 2, "name": "check", "inbox": {"senders": [0, 1, 5], "keys": {1: b"\x00" * 80, 7: b""},
                                                "nested": [{3: [b"a", -4]}], "graph_seed": 2**63 - 1},
         "backups": [{"sender": 1, "sealed": bytes(range(256)) * 2, "signature": b"s" * 64}],
         "signatures": {"keys": [{"sender": 1, "signature": b"g" * 64}]},
         "public_keys": [{"user": 4, "public_key": b"k" * 32}], "secret": "text \u00e9", "least": -2**63}


def test_a_body_reads_back_as_written():
    raw = encode(INBOX)
    assert raw[:HEADER.size] == HEADER.pack(MAGIC, VERSION)
    assert decode(raw) == INBOX
    assert decode(encode({"n": np.int64(3), "t": (1, 2)})) == {"n": 3, "t": [1, 2]}  # numpy integers, tuples


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
    with pytest.raises(ParameterError, match=r"body\.backups\[0\]\.sealed must be 512 bytes at byte \d+, got \d+ "
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
    with pytest.raises(ParameterError, match="body must be an object of named fields"):
        decode(HEADER.pack(MAGIC, VERSION) + bytes([LIST]) + struct.pack("<I", 0))


def test_a_key_twice_an_unknown_tag_and_deep_nesting_are_refused():
    twice = HEADER.pack(MAGIC, VERSION) + bytes([MAP]) + struct.pack("<I", 2) + (struct.pack("<q", 5) + bytes(
        [round_wire.INT]) + struct.pack("<q", 0)) * 2
    with pytest.raises(ParameterError, match=r"body\.m must be each key once, got 5 twice"):
        decode(HEADER.pack(MAGIC, VERSION) + bytes([OBJECT]) + struct.pack("<I", 1) + struct.pack("<H", 1) + b"m" +
               twice[HEADER.size:])
    with pytest.raises(ParameterError, match=r"body\.x must be a value's tag \(1-6\) at byte \d+, got 9"):
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
