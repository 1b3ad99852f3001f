"""Long-term identities and signatures of the multi-round protocols' parties: Ed25519 (RFC 8032), from
``cryptography``. A user signs what he sends with the identity key he registered at enrollment, and the
organisation signs the task and the roster it published, so that no single server can swap a key or put words in
a party's mouth (docs/privacy.md, "Dishonest parties").

Every signature is over a context (what is signed, for which task) and the message, so that a signature given for
one purpose or task is never valid for another. Ed25519 signing is deterministic: a seeded simulation draws its
parties' identity keys from its generator (:func:`generate`) and is reproducible.
"""

from __future__ import annotations

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
    return _private(private_key).public_key().public_bytes_raw()


def _private(private_key: bytes):
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    return Ed25519PrivateKey.from_private_bytes(private_key)


def _signed(context: bytes, message: bytes) -> bytes:
    if b"\x00" in context:
        raise ParameterError("context", "bytes without NUL", context)
    return b"privagg signature v1\x00" + context + b"\x00" + message


def sign(private_key: bytes, context: bytes, message: bytes) -> bytes:
    """The identity's signature (64 bytes) of ``message`` in ``context``."""
    return _private(private_key).sign(_signed(context, message))


def verify(public: bytes, signature: bytes, context: bytes, message: bytes) -> bool:
    """Whether ``signature`` is ``public``'s signature of ``message`` in ``context``."""
    from cryptography.exceptions import InvalidSignature
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

    if not isinstance(public, (bytes, bytearray)) or len(public) != KEY_BYTES or not isinstance(
            signature, (bytes, bytearray)) or len(signature) != SIGNATURE_BYTES:
        return False
    try:
        Ed25519PublicKey.from_public_bytes(bytes(public)).verify(bytes(signature), _signed(context, message))
    except (InvalidSignature, ValueError):
        return False
    return True


def check(public: bytes, signature: bytes, context: bytes, message: bytes, field: str, signer: str) -> None:
    """Nothing if :func:`verify`; else a ParameterError naming ``field`` and who should have signed it."""
    if not verify(public, signature, context, message):
        raise ParameterError(field, f"a valid Ed25519 signature by {signer}", "a signature that does not verify")


def canonical(document) -> bytes:
    """A JSON document's signed bytes: keys sorted, no spaces, ASCII (so that every party signs and verifies the
    same bytes for the same document)."""
    return json.dumps(document, sort_keys=True, separators=(",", ":"), ensure_ascii=True,
                      allow_nan=False).encode()
