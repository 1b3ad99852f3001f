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
interpolation are matrix products in blocks of :data:`BLOCK` terms, reduced modulo the prime between blocks. The
evaluation matrix is built :data:`ROWS` holders at a time (the complete graph's holders x t matrix would be 400 MB
at n = 10^4) and the Lagrange weights are vectorised in exact int64 arithmetic (a product of two elements is below
2^42).
"""

from __future__ import annotations

import numpy as np

from ..errors import ParameterError, check_integer

PRIME = 2_097_143  # the largest prime below 2^21
BLOCK = 1 << 11  # terms per exact float64 block: 2^11 * (2^21)^2 = 2^53
SHARE_BYTES = 3  # an element below 2^21 on the wire
ROWS = 512  # holders evaluated (or differences taken) at a time: a block of ROWS x t, never holders x t


def _modular_product(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """(a @ b) mod PRIME for matrices of elements (held as float64 or int64), exactly: float64 products of blocks
    of :data:`BLOCK` terms."""
    out = np.zeros((a.shape[0], b.shape[1]), dtype=np.int64)
    for start in range(0, a.shape[1], BLOCK):
        block = np.asarray(a[:, start:start + BLOCK], np.float64) @ np.asarray(b[start:start + BLOCK], np.float64)
        out = (out + np.fmod(block, PRIME).astype(np.int64)) % PRIME
    return out


def _powers(x: np.ndarray, threshold: int) -> np.ndarray:
    """x^j mod PRIME for the points ``x`` (rows) and j = 0..threshold - 1 (columns): the evaluation matrix of a
    block of holders (:data:`ROWS` of them at a time: never the dense holders x t matrix)."""
    powers = np.ones((x.size, threshold), dtype=np.int64)
    filled = 1  # columns 0..filled - 1 hold x^0..x^(filled - 1); each step doubles them: x^(filled + j) = x^filled x^j
    while filled < threshold:
        step = min(filled, threshold - filled)
        powers[:, filled:filled + step] = powers[:, :step] * (powers[:, filled - 1] * x % PRIME)[:, None] % PRIME
        filled += step
    return powers


def _product(a: np.ndarray) -> np.ndarray:
    """The product mod PRIME of each row of ``a`` (elements), by halves: log2(columns) vectorised steps."""
    while a.shape[1] > 1:
        if a.shape[1] % 2:
            a = np.concatenate([a, np.ones((a.shape[0], 1), dtype=np.int64)], axis=1)
        a = a[:, 0::2] * a[:, 1::2] % PRIME
    return a[:, 0]


def _inverse(a: np.ndarray) -> np.ndarray:
    """a^-1 mod PRIME of nonzero elements (Fermat: a^(PRIME - 2)), vectorised."""
    out, base, e = np.ones_like(a), a % PRIME, PRIME - 2
    while e:
        if e & 1:
            out = out * base % PRIME
        base, e = base * base % PRIME, e >> 1
    return out


def lagrange_weights(holders: np.ndarray) -> np.ndarray:
    """Lagrange's basis polynomials of the points x = holders + 1 (distinct 0-based holders) at 0, over GF(PRIME):
    w_i = prod_{j != i} x_j / (x_j - x_i), in blocks of at least :data:`ROWS` rows of differences (O(t^2) products,
    in numpy). ``holders`` 2-D: each row its own points (the owners on a neighbour graph, each with his holders),
    every row's weights at once, in the same shape."""
    x = np.asarray(holders, dtype=np.int64) + 1
    if x.ndim == 1:
        return lagrange_weights(x[None, :] - 1)[0]
    t = x.shape[1]
    numerators = _product(x)[:, None] * _inverse(x) % PRIME
    denominators = np.empty(x.size, dtype=np.int64)  # row r: the differences x_j - x_i of point set r // t, i = r % t
    step = max(ROWS, BLOCK * ROWS // max(t, 1))  # rows of t differences at a time (about 2^20 elements)
    for start in range(0, x.size, step):
        rows = np.arange(start, min(start + step, x.size))
        sets, i = np.divmod(rows, t)
        differences = (x[sets] - x[sets, i][:, None]) % PRIME
        differences[np.arange(rows.size), i] = 1  # j = i left out
        denominators[start:start + rows.size] = _product(differences)
    return numerators * _inverse(denominators.reshape(x.shape)) % PRIME


def at_zero(weights: np.ndarray, shares: np.ndarray) -> np.ndarray:
    """sum_i weights[s, i] shares[s, i, :] mod PRIME for each secret s: each secret's limbs from its own holders'
    Lagrange weights (``weights``: secrets x t, :func:`lagrange_weights` of each one's holders; ``shares``: secrets x
    t x limbs), exactly in int64 (a product is below 2^42, a sum of t < 2^21 of them below 2^63)."""
    return np.einsum("si,sil->sl", np.asarray(weights, np.int64), np.asarray(shares, np.int64)) % PRIME


def check_threshold(threshold: int, holders: int) -> tuple[int, int]:
    """(threshold, holders) if 1 <= threshold <= holders < PRIME, else a ParameterError naming the field."""
    holders = check_integer("holders", holders, 1, PRIME - 1)
    return check_integer("threshold", threshold, 1, holders), holders


def split(secret: bytes, threshold: int, holders: int, rng: np.random.Generator,
          at: np.ndarray | None = None) -> np.ndarray:
    """The shares of ``secret`` (an even number of bytes) for holders 0..holders - 1, or for the holders ``at``
    only (distinct 0-based indices below ``holders``, at least ``threshold`` of them: a neighbourhood), in that
    order: shape (holders or len(at), limbs), int64 elements of GF(PRIME). ``rng`` draws the polynomials' other
    coefficients (the same draws either way: a holder's share does not depend on who else gets one); a user
    passes the secure generator."""
    threshold, holders = check_threshold(threshold, holders)
    if not isinstance(secret, bytes) or len(secret) % 2:
        raise ParameterError("secret", "an even number of bytes", len(secret) if isinstance(secret, bytes) else secret)
    if at is None:
        x = np.arange(1, holders + 1, dtype=np.int64)
    else:
        at = np.asarray(at)
        if at.ndim != 1 or at.dtype.kind not in "iu" or np.unique(at).size != at.size or at.size < threshold or (
                at.size and (at.min() < 0 or at.max() >= holders)):
            raise ParameterError("at", f"at least the threshold of {threshold} distinct holders in 0..{holders - 1}",
                                 f"{at.size} holders" + ("" if at.dtype.kind not in "iu" or not at.size else
                                                         f" in {int(at.min())}..{int(at.max())}"))
        x = at.astype(np.int64) + 1
    limbs = np.frombuffer(secret, dtype="<u2").astype(np.int64)
    coefficients = rng.integers(0, PRIME, size=(threshold, limbs.size), dtype=np.int64)
    coefficients[0] = limbs
    return np.concatenate([_modular_product(_powers(x[start:start + ROWS], threshold), coefficients)
                           for start in range(0, x.size, ROWS)])


def combine(holders: np.ndarray, shares: np.ndarray, threshold: int) -> list[bytes]:
    """The secrets that the shares of ``holders`` (0-based indices, distinct) stand for: ``shares`` has shape
    (secrets, len(holders), limbs), every secret shared among the same holders; the first ``threshold`` holders'
    shares are interpolated at 0 (one set of Lagrange weights, one modular product for all the secrets).

    A ParameterError names what is wrong: fewer than ``threshold`` holders, a holder twice, a share outside the
    field, or the secrets whose shares do not interpolate to 16-bit limbs (so they are not all shares of one
    secret)."""
    holders, shares = np.asarray(holders, dtype=np.int64), np.asarray(shares, dtype=np.int64)
    if holders.size < threshold:
        raise ParameterError("shares", f"from at least the threshold of {threshold} holders", f"{holders.size}")
    if np.unique(holders).size != holders.size:
        raise ParameterError("shares", "one share per holder", "a holder twice")
    if shares.size and (shares.min() < 0 or shares.max() >= PRIME):
        raise ParameterError("shares", f"elements of GF({PRIME})", "an element outside it")
    weights = lagrange_weights(holders[:threshold])
    limbs = _modular_product(weights[None, :], shares[:, :threshold].transpose(1, 0, 2).reshape(threshold, -1))
    limbs = limbs.reshape(shares.shape[0], shares.shape[2])
    wrong = np.flatnonzero((limbs >= 1 << 16).any(axis=1))
    if wrong.size:
        raise ParameterError("shares", "shares of one secret each (they interpolate to 16-bit limbs)",
                             f"shares that do not, of secrets {wrong[:5].tolist()} (0-based, of {shares.shape[0]})")
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
