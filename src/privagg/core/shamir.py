"""Shamir's t-out-of-n secret sharing of short secrets (Shamir 1979), vectorised for thousands of holders.

The sharing parties back up two 32-byte secrets of each user this way (Bonawitz et al., CCS 2017, §4), so that any
t users can rebuild one of them for the server when its owner drops out (docs/privacy.md, "Dropouts in DPDS and
DPDG"). Only the arithmetic is here; who may reveal which share is the protocol's rule
(:mod:`privagg.protocols.sharing_parties`).

A secret of b bytes is cut into b / 2 limbs of 16 bits, each a constant term of its own random polynomial of
degree t - 1 over GF(:data:`PRIME`); holder k (0-based) gets the polynomials' values at x = k + 1. Any t shares
give every limb back by Lagrange interpolation at 0; t - 1 shares are uniform and independent of the secret
(the polynomial's t - 1 free coefficients are uniform). The prime is below 2^21 so that a product of two
elements is below 2^42 and a sum of 2^11 such products is exact in float64: the evaluations and the
interpolation are matrix products in blocks of :data:`BLOCK` terms, reduced modulo the prime between blocks.
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np

from ..errors import ParameterError, check_integer

PRIME = 2_097_143  # the largest prime below 2^21
BLOCK = 1 << 11  # terms per exact float64 block: 2^11 * (2^21)^2 = 2^53
SHARE_BYTES = 3  # an element below 2^21 on the wire


def _modular_product(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """(a @ b) mod PRIME for matrices of elements (held as float64 or int64), exactly: float64 products of blocks
    of :data:`BLOCK` terms."""
    out = np.zeros((a.shape[0], b.shape[1]), dtype=np.int64)
    for start in range(0, a.shape[1], BLOCK):
        block = np.asarray(a[:, start:start + BLOCK], np.float64) @ np.asarray(b[start:start + BLOCK], np.float64)
        out = (out + np.fmod(block, PRIME).astype(np.int64)) % PRIME
    return out


@lru_cache(maxsize=8)
def _powers(holders: int, threshold: int) -> np.ndarray:
    """x^j mod PRIME for x = 1..holders (rows) and j = 0..threshold - 1 (columns): the evaluation matrix, held as
    float64 (exact) for :func:`_modular_product`."""
    x = np.arange(1, holders + 1, dtype=np.int64)
    powers = np.ones((holders, threshold), dtype=np.int64)
    for j in range(1, threshold):
        powers[:, j] = powers[:, j - 1] * x % PRIME
    powers = powers.astype(np.float64)
    powers.setflags(write=False)
    return powers


def check_threshold(threshold: int, holders: int) -> tuple[int, int]:
    """(threshold, holders) if 1 <= threshold <= holders < PRIME, else a ParameterError naming the field."""
    holders = check_integer("holders", holders, 1, PRIME - 1)
    return check_integer("threshold", threshold, 1, holders), holders


def split(secret: bytes, threshold: int, holders: int, rng: np.random.Generator) -> np.ndarray:
    """The shares of ``secret`` (an even number of bytes) for holders 0..holders - 1: shape (holders, limbs), int64
    elements of GF(PRIME). ``rng`` draws the polynomials' other coefficients: a user passes the secure generator."""
    threshold, holders = check_threshold(threshold, holders)
    if not isinstance(secret, bytes) or len(secret) % 2:
        raise ParameterError("secret", "an even number of bytes", len(secret) if isinstance(secret, bytes) else secret)
    limbs = np.frombuffer(secret, dtype="<u2").astype(np.int64)
    coefficients = rng.integers(0, PRIME, size=(threshold, limbs.size), dtype=np.int64)
    coefficients[0] = limbs
    return _modular_product(_powers(holders, threshold), coefficients)


def combine(holders: np.ndarray, shares: np.ndarray, threshold: int) -> list[bytes]:
    """The secrets that the shares of ``holders`` (0-based indices, distinct) stand for: ``shares`` has shape
    (secrets, len(holders), limbs); the first ``threshold`` holders' shares are interpolated at 0.

    A ParameterError names what is wrong: fewer than ``threshold`` holders, a holder twice, a share outside the
    field, or shares that do not interpolate to 16-bit limbs (so they are not all shares of one secret)."""
    holders, shares = np.asarray(holders, dtype=np.int64), np.asarray(shares, dtype=np.int64)
    if holders.size < threshold:
        raise ParameterError("shares", f"from at least the threshold of {threshold} holders", f"{holders.size}")
    if np.unique(holders).size != holders.size:
        raise ParameterError("shares", "one share per holder", "a holder twice")
    if shares.size and (shares.min() < 0 or shares.max() >= PRIME):
        raise ParameterError("shares", f"elements of GF({PRIME})", "an element outside it")
    x = [int(h) + 1 for h in holders[:threshold]]
    weights = np.empty(threshold, dtype=np.int64)  # Lagrange's basis polynomials at 0
    for i, xi in enumerate(x):
        numerator = denominator = 1
        for j, xj in enumerate(x):
            if j != i:
                numerator, denominator = numerator * xj % PRIME, denominator * (xj - xi) % PRIME
        weights[i] = numerator * pow(denominator, -1, PRIME) % PRIME
    limbs = _modular_product(weights[None, :], shares[:, :threshold].transpose(1, 0, 2).reshape(threshold, -1))
    limbs = limbs.reshape(shares.shape[0], shares.shape[2])
    if limbs.size and limbs.max() >= 1 << 16:
        raise ParameterError("shares", "shares of one secret each (they interpolate to 16-bit limbs)",
                             "shares that do not")
    return [row.astype("<u2").tobytes() for row in limbs]


def pack(shares: np.ndarray) -> bytes:
    """Elements as :data:`SHARE_BYTES` little-endian bytes each."""
    return np.ascontiguousarray(np.asarray(shares, dtype="<u4").reshape(-1, 1).view(np.uint8)[:, :SHARE_BYTES]).tobytes()


def unpack(raw: bytes, count: int, what: str) -> np.ndarray:
    """``count`` elements from exactly their bytes, each checked below PRIME (a ParameterError naming ``what``)."""
    if len(raw) != count * SHARE_BYTES:
        raise ParameterError(what, f"{count} shares of {SHARE_BYTES} bytes", f"{len(raw)} bytes")
    wide = np.zeros((count, 4), dtype=np.uint8)
    wide[:, :SHARE_BYTES] = np.frombuffer(raw, dtype=np.uint8).reshape(count, SHARE_BYTES)
    values = wide.view("<u4").ravel().astype(np.int64)
    if count and values.max() >= PRIME:
        raise ParameterError(what, f"elements of GF({PRIME})", int(values.max()))
    return values
