"""Ed25519 identities: signatures bound to their context, seeded keys reproducible, forgeries refused."""

import numpy as np
import pytest

from privagg.core import identity
from privagg.errors import ParameterError


def test_a_signature_verifies_only_for_its_key_context_and_message():
    key = identity.generate()
    public = identity.public_key(key)
    signature = identity.sign(key, b"roster 00ff", b"message")
    assert len(signature) == identity.SIGNATURE_BYTES and len(public) == identity.KEY_BYTES
    assert identity.verify(public, signature, b"roster 00ff", b"message")
    assert not identity.verify(public, signature, b"roster 00fe", b"message")  # another task or purpose
    assert not identity.verify(public, signature, b"roster 00ff", b"messagf")
    assert not identity.verify(identity.public_key(identity.generate()), signature, b"roster 00ff", b"message")
    assert not identity.verify(public, signature[:-1], b"roster 00ff", b"message")  # malformed: False, no raise
    assert not identity.verify(b"junk", signature, b"roster 00ff", b"message")
    with pytest.raises(ParameterError, match="roster.*signature by the organisation"):
        identity.check(public, bytes(64), b"roster 00ff", b"message", "roster", "the organisation")


def test_context_and_message_cannot_trade_bytes():
    key = identity.generate()
    signature = identity.sign(key, b"a", b"bc")
    assert not identity.verify(identity.public_key(key), signature, b"ab", b"c")
    with pytest.raises(ParameterError, match="context"):
        identity.sign(key, b"a\x00b", b"c")


def test_seeded_identities_are_reproducible_and_the_default_is_not():
    assert identity.generate(np.random.default_rng(1)) == identity.generate(np.random.default_rng(1))
    assert identity.generate() != identity.generate()


def test_canonical_documents_sort_keys_and_refuse_nan():
    assert identity.canonical({"b": 1, "a": [2, "x"]}) == b'{"a":[2,"x"],"b":1}'
    with pytest.raises(ValueError):
        identity.canonical({"a": float("nan")})
