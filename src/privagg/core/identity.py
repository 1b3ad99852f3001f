"""Long-term identities and signatures of the multi-round protocols' parties: Ed25519 (RFC 8032), from libsodium
(PyNaCl), whose verification takes about half the CPU of OpenSSL's (60 against 110 us on the AMD EPYC host of
docs/benchmarks.md part 16; a user of a neighbour graph checks about 3k signatures, the server k an answer). The keys
and signatures are RFC 8032's, so either library reads the other's; libsodium's check is the stricter one (it refuses
small-order keys and R, and non-canonical encodings). A user signs what he sends with the identity key he registered
at enrollment, and the organisation signs the task and the roster it published, so that no single server can swap a
key or put words in a party's mouth (docs/privacy.md, "Dishonest parties").

Every signature is over a context (what is signed, for which task) and the message, so that a signature given for
one purpose or task is never valid for another. Ed25519 signing is deterministic: a seeded simulation draws its
parties' identity keys from its generator (:func:`generate`) and is reproducible.
"""

from __future__ import annotations

import functools
import json

from ..errors import ParameterError
from .randomness import RNGLike

KEY_BYTES, SIGNATURE_BYTES = 32, 64


def generate(rng: RNGLike = None) -> bytes:
    """A new identity's private key (32 raw bytes): from the OS's secure source by default; from ``rng`` (a
    seeded simulation, not private) when given."""
    import secrets

    from .randomness import resolve

    return secrets.token_bytes(KEY_BYTES) if rng is None else resolve(rng).bytes(KEY_BYTES)


def public_key(private_key: bytes) -> bytes:
    """The identity's public key (32 raw bytes)."""
    return bytes(_private(private_key).verify_key)


@functools.lru_cache(maxsize=1 << 14)
def _private(private_key: bytes):
    """The key object (kept: loading one derives its public key, as costly as a signature; as many as a roster's
    public keys, for the processes that run many users: a demo's SDK users, the faithful simulator)."""
    from nacl.signing import SigningKey

    return SigningKey(private_key)  # a ValueError (nacl's subclass) unless 32 bytes


@functools.lru_cache(maxsize=1 << 14)
def _public(public: bytes):
    """The key object of a public key (kept: a roster's keys verify many messages)."""
    from nacl.signing import VerifyKey

    return VerifyKey(public)


def _signed(context: bytes, message: bytes) -> bytes:
    if b"\x00" in context:
        raise ParameterError("context", "bytes without NUL", context)
    return b"privagg signature v1\x00" + context + b"\x00" + message


def sign(private_key: bytes, context: bytes, message: bytes) -> bytes:
    """The identity's signature (64 bytes) of ``message`` in ``context``."""
    return _private(private_key).sign(_signed(context, message)).signature


def verify(public: bytes, signature: bytes, context: bytes, message: bytes) -> bool:
    """Whether ``signature`` is ``public``'s signature of ``message`` in ``context``."""
    from nacl.exceptions import BadSignatureError

    if not isinstance(public, (bytes, bytearray)) or len(public) != KEY_BYTES or not isinstance(
            signature, (bytes, bytearray)) or len(signature) != SIGNATURE_BYTES:
        return False
    try:
        _public(bytes(public)).verify(_signed(context, message), bytes(signature))
    except (BadSignatureError, ValueError):
        return False
    return True


def is_key(public: bytes) -> bool:
    """Whether ``public`` (32 bytes) is an Ed25519 public key under which a signature can check: a point of the
    curve's prime-order subgroup, not of small order (libsodium's own test)."""
    from nacl.bindings import crypto_core_ed25519_is_valid_point

    return isinstance(public, bytes) and len(public) == KEY_BYTES and crypto_core_ed25519_is_valid_point(public)


def check(public: bytes, signature: bytes, context: bytes, message: bytes, field: str, signer: str) -> None:
    """Nothing if :func:`verify`; else a ParameterError naming ``field`` and who should have signed it."""
    if not verify(public, signature, context, message):
        raise ParameterError(field, f"a valid Ed25519 signature by {signer}", "a signature that does not verify")


def canonical(document) -> bytes:
    """A JSON document's signed bytes: keys sorted, no spaces, ASCII (so that every party signs and verifies the
    same bytes for the same document)."""
    return json.dumps(document, sort_keys=True, separators=(",", ":"), ensure_ascii=True,
                      allow_nan=False).encode()


# ---- enrollment tokens bound to an identity ------------------------------------------------------------------
# A one-use token (the organisation's) has two halves, each derived with HKDF-SHA256: the device shows the server
# the authentication half (the server keeps its hash, as it kept the token's), and keys with the binding half,
# which the server never sees, an HMAC-SHA256 of the keys he enrolls; only the token's issuer can check it, so a
# server that swaps a key at enrollment, or enrolls a user of its own with a token's authentication half, is
# caught when the organisation signs the roster (docs/privacy.md, "Dishonest parties").

def token_halves(token: str) -> tuple[str, bytes]:
    """(the authentication half as text, the binding half's 32 bytes) of an enrollment token."""
    import base64

    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives.kdf.hkdf import HKDF

    if not isinstance(token, str) or not 0 < len(token) <= 256:
        raise ParameterError("token", "an enrollment token (text of at most 256 characters)", type(token).__name__)

    def half(info: bytes) -> bytes:
        return HKDF(hashes.SHA256(), KEY_BYTES, None, info).derive(token.encode())

    return (base64.urlsafe_b64encode(half(b"privagg token authentication")).decode().rstrip("="),
            half(b"privagg token binding"))


def binding(binding_half: bytes, task_id: str, identity_key: bytes, public_key: bytes) -> bytes:
    """HMAC-SHA256 under a token's binding half of what a device enrolls in task ``task_id``: his identity key and
    his X25519 key (fixed sizes: no two enrollments have the same bytes)."""
    import hashlib
    import hmac

    return hmac.new(binding_half, b"privagg enrollment binding " + task_id.encode() + b"\x00" + bytes(identity_key) +
                    bytes(public_key), hashlib.sha256).digest()


# ---- public keys as text ------------------------------------------------------------------------------------

def public_text(text, field: str) -> bytes:
    """The 32-byte Ed25519 public key of base64 ``text`` (a pinned organisation key, a roster's identity key); a
    ParameterError naming ``field`` otherwise."""
    import base64
    import binascii

    try:
        raw = base64.b64decode(text, validate=True) if isinstance(text, (str, bytes)) else b""
    except (binascii.Error, ValueError):
        raw = b""
    if len(raw) != KEY_BYTES:
        raise ParameterError(field, f"base64 of an Ed25519 public key ({KEY_BYTES} bytes)", "something else")
    return raw
