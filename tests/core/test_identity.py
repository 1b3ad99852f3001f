"""Ed25519 identities: signatures bound to their context, seeded keys reproducible, forgeries refused."""

import base64

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


def test_a_tokens_halves_are_independent_and_its_binding_covers_every_key(tmp_path):
    """A token's authentication half (what the server sees) and binding half (what it never does) are HKDF outputs
    under distinct infos: neither gives the other. The binding changes with the task and with either key."""
    from privagg.core.identity import binding, token_halves

    auth, half = token_halves("a token")
    assert token_halves("a token") == (auth, half) and token_halves("another")[0] != auth
    assert len(half) == 32 and base64.urlsafe_b64decode(auth + "=") != half
    key, public = identity.public_key(identity.generate()), bytes(range(32))
    made = binding(half, "ab" * 16, key, public)
    assert made == binding(half, "ab" * 16, key, public) and len({made, binding(half, "cd" * 16, key, public),
                                                                 binding(half, "ab" * 16, public, key),
                                                                 binding(token_halves("x")[1], "ab" * 16, key,
                                                                         public)}) == 4
    for bad in (None, "", "x" * 257):
        with pytest.raises(ParameterError, match="token must be an enrollment token"):
            token_halves(bad)


def test_a_public_key_as_text_is_base64_of_32_bytes():
    from privagg.core.identity import public_text

    private = identity.generate()
    assert public_text(base64.b64encode(identity.public_key(private)).decode(), "k") == identity.public_key(private)
    with pytest.raises(ParameterError, match="k must be base64 of an Ed25519 public key"):
        public_text("AAAA", "k")


def test_keys_and_signatures_are_rfc_8032s():
    """RFC 8032 section 7.1, test 1 (the empty message): the public key, and the signature of the signed bytes,
    so that any Ed25519 library reads privagg's keys and signatures and privagg reads theirs."""
    secret = bytes.fromhex("9d61b19deffd5a60ba844af492ec2cc44449c5697b326919703bac031cae7f60")
    public = bytes.fromhex("d75a980182b10ab7d54bfed3c964073a0ee172f3daa62325af021a68f707511a")
    signature = bytes.fromhex("e5564300c360ac729086e2cc806e828a84877f1eb8e5d974d873e065224901555fb8821590a33bacc61e3970"
                              "1cf9b46bd25bf5f0595bbe24655141438e7a100b")
    assert identity.public_key(secret) == public
    assert identity._private(secret).sign(b"").signature == signature
    ours = identity.sign(secret, b"ctx", b"m")
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey
    Ed25519PublicKey.from_public_bytes(public).verify(ours, identity._signed(b"ctx", b"m"))  # OpenSSL reads it


@pytest.mark.parametrize("public", [bytes([1]) + bytes(31),  # the neutral point: order 1
                                    bytes(31) + bytes([0x80]),  # y = 0: order 4
                                    bytes.fromhex("c7176a703d4dd84fba3c0b760d10670f2a2053fa2c39ccc64ec7fd7792ac037a")])
def test_a_small_order_key_has_no_universal_signature(public):
    """R = the neutral point and S = 0 satisfy [S]B = R + [k]A whenever [k]A is neutral: for every message when A
    has order 1, 2 or 4, for one in 8 when it has order 8. Under OpenSSL's check (cryptography's) a user who
    enrolled such an identity key had a signature of every statement, which anyone could make for him (the first
    two cases here passed it). libsodium refuses small-order keys and R."""
    forged = bytes([1]) + bytes(63)
    for message in (b"", b"round 4: the survivors are U", b"anything"):
        assert not identity.verify(public, forged, b"ctx", message)
