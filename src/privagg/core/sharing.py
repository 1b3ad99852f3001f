"""Prime-field vectors and additive secret sharing (the fair DP paper's users share one-hot vectors).

* :class:`PrimeField`: integers mod a prime p < 2^62, held as uint64 so that
  the sum of two elements (< 2^63) never wraps; longer sums are reduced in
  blocks of at most floor((2^64 - 1) / (p - 1)) terms, each exact in uint64.
  :meth:`PrimeField.for_aggregate` picks the smallest prime above the
  largest aggregate, so that the sum is recovered exactly.
* :func:`share` / :func:`reconstruct`: n-out-of-n additive sharing,
  vectorized over users: n - 1 shares uniform in the field, the last the
  secret minus their sum. Any n - 1 shares are uniform and independent of
  the secret.
* :func:`expand`: a uniform share stood for by a 32-byte seed, expanded by ChaCha20 (``cryptography``'s
  keystream, rejection-sampled below p): d field elements cost 32 bytes instead of 8 d.
* :func:`derive_seed` / :func:`element_bytes` / :func:`pack_elements` / :func:`unpack_elements`: a party's
  per-recipient seeds from one secret (keyed BLAKE2b as a PRF), and field elements on the wire at
  ceil(log2(p) / 8) bytes each, little-endian, checked below p when read back.
* :func:`encode_fixed` / :func:`decode_fixed` / :func:`fixed_point_modulus`:
  reals as integers with k fractional bits (negatives as p - |v|), and the
  field a sum of n of them needs.

Numpy (and ``cryptography`` for :func:`expand`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..errors import ParameterError, check_integer
from .primes import is_prime, next_prime
from .randomness import RNGLike, resolve

MODULUS_MAX = 2**62  # two elements add below 2^63: uint64 never wraps
SEED_BYTES = 32


@dataclass(frozen=True)
class PrimeField:
    """Z_p for a prime p < 2^62."""

    modulus: int

    def __post_init__(self) -> None:
        p = self.modulus
        if isinstance(p, bool) or not isinstance(p, (int, np.integer)) or not 2 <= p < MODULUS_MAX or not is_prime(p):
            raise ParameterError("modulus", "a prime in [2, 2^62)", p)

    @classmethod
    def for_aggregate(cls, largest: int) -> "PrimeField":
        """The smallest prime field holding every value in [0, largest]: sums up to ``largest`` come back exactly."""
        largest = check_integer("largest aggregate", largest, 1, MODULUS_MAX - 2)
        return cls(next_prime(largest + 1))

    def element(self, values) -> np.ndarray:
        """``values`` as field elements (uint64); integers outside [0, p) are an error, never reduced silently."""
        array = np.asarray(values)
        if array.size and not np.issubdtype(array.dtype, np.integer):
            raise ParameterError("field element", f"integers in [0, {self.modulus})", f"values of type {array.dtype}")
        if array.size and (array.min() < 0 or array.max() >= self.modulus):
            raise ParameterError("field element", f"integers in [0, {self.modulus})",
                                 array.min() if array.min() < 0 else array.max())
        return array.astype(np.uint64)

    @property
    def dtype(self) -> np.dtype:
        """Storage of elements: uint32 when p <= 2^32 (half the memory and twice the sampling speed), else uint64."""
        return np.dtype(np.uint32 if self.modulus <= 2**32 else np.uint64)

    def add(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        return np.add(a, b, dtype=np.uint64) % np.uint64(self.modulus)  # in uint64 even for uint32 elements

    def sub(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        return np.add(a, np.subtract(np.uint64(self.modulus), b, dtype=np.uint64), dtype=np.uint64) % np.uint64(
            self.modulus)

    def sum(self, values: np.ndarray, axis: int = 0) -> np.ndarray:
        """The field sum along ``axis``: blocks of terms whose plain sum fits in uint64, reduced one by one."""
        values = np.asarray(values)  # uint32 or uint64 elements, summed in uint64
        block = (2**64 - 1) // (self.modulus - 1)
        if values.shape[axis] <= block:  # one plain sum cannot wrap: no copy, no moved axis
            return values.sum(axis=axis, dtype=np.uint64) % np.uint64(self.modulus)
        values = np.moveaxis(values, axis, 0)
        total = np.zeros(values.shape[1:], dtype=np.uint64)
        for lo in range(0, values.shape[0], block):
            total = self.add(total, values[lo:lo + block].sum(axis=0, dtype=np.uint64) % np.uint64(self.modulus))
        return total

    def uniform(self, shape, rng: np.random.Generator) -> np.ndarray:
        """Uniform elements in the storage dtype (numpy's unbiased bounded-integer sampler)."""
        return rng.integers(0, self.modulus, size=shape, dtype=self.dtype)

    def signed(self, values: np.ndarray) -> np.ndarray:
        """Representatives in (-p/2, p/2]: how fixed-point sums with negative terms are read back (int64)."""
        values = np.asarray(values, dtype=np.uint64)
        half = np.uint64(self.modulus // 2)
        return np.where(values > half, -(np.uint64(self.modulus) - values).astype(np.int64), values.astype(np.int64))


def share(field: PrimeField, secret: np.ndarray, shares: int, rng: RNGLike = None) -> np.ndarray:
    """``shares`` additive shares of ``secret`` (any shape, e.g. users x d): shape (shares, *secret.shape).

    ``rng=None`` draws the uniform shares from the secure generator, as a user must.
    """
    shares = check_integer("shares", shares, 2)
    values = field.element(secret)
    rng = resolve(rng)
    out = np.empty((shares, *values.shape), dtype=field.dtype)
    out[:-1] = field.uniform((shares - 1, *values.shape), rng)
    out[-1] = field.sub(values, field.sum(out[:-1], axis=0))
    return out


def reconstruct(field: PrimeField, shares: np.ndarray) -> np.ndarray:
    """The secrets: the field sum of all shares (axis 0)."""
    return field.sum(field.element(shares), axis=0)


def expand(field: PrimeField, seed: bytes, shape) -> np.ndarray:
    """The share a seed stands for: field elements drawn from the ChaCha20 keystream (RFC 8439, ``cryptography``;
    key ``seed``, nonce and counter zero) by rejection: each little-endian 64-bit word masked to p's bit length,
    kept if below p (at least half are), so every element is exactly uniform. A seed serves one purpose
    (:func:`derive_seed`), so the fixed nonce never repeats a keystream across purposes."""
    from cryptography.hazmat.primitives.ciphers import Cipher, algorithms

    if len(seed) != SEED_BYTES:
        raise ParameterError("seed", f"{SEED_BYTES} bytes", f"{len(seed)} bytes")
    count = int(np.prod(shape, dtype=np.int64))
    bits = field.modulus.bit_length()
    mask, modulus = np.uint64((1 << bits) - 1), np.uint64(field.modulus)
    stream = Cipher(algorithms.ChaCha20(bytes(seed), bytes(16)), mode=None).encryptor()
    kept, have = [np.empty(0, np.uint64)], 0
    while have < count:  # about count * 2^bits / p words, and a margin that makes a second pass rare
        want = count - have
        words = np.frombuffer(stream.update(bytes(8 * (want * (1 << bits) // field.modulus + want // 16 + 8))),
                              dtype="<u8") & mask
        words = words[words < modulus]
        kept.append(words)
        have += words.size
    return np.concatenate(kept)[:count].astype(field.dtype).reshape(shape)


def derive_seed(master: bytes, label: str) -> bytes:
    """A 32-byte seed for ``label`` from a party's 32-byte secret ``master``: BLAKE2b keyed with ``master`` (a PRF,
    RFC 7693), so that one secret stands for all the seeds a party needs and they are independent of each other."""
    import hashlib

    if not isinstance(master, bytes) or len(master) != SEED_BYTES:
        raise ParameterError("master seed", f"{SEED_BYTES} bytes", len(master) if isinstance(master, bytes) else master)
    return hashlib.blake2b(label.encode(), key=master, digest_size=SEED_BYTES).digest()


def element_bytes(field: PrimeField) -> int:
    """Bytes of one field element on the wire: ceil(log2(p) / 8)."""
    return -(-(field.modulus - 1).bit_length() // 8)


def pack_elements(field: PrimeField, values: np.ndarray) -> bytes:
    """Field elements as :func:`element_bytes` little-endian bytes each."""
    width = element_bytes(field)
    raw = np.ascontiguousarray(field.element(values), dtype="<u8").view(np.uint8).reshape(-1, 8)
    return raw[:, :width].tobytes()


def unpack_elements(field: PrimeField, raw: bytes, count: int, what: str) -> np.ndarray:
    """``count`` field elements from ``raw`` (exactly their bytes), each checked below p: a ParameterError naming
    ``what`` for a wrong length or a value outside the field."""
    width = element_bytes(field)
    if len(raw) != count * width:
        raise ParameterError(what, f"{count} field elements of {width} bytes ({count * width} bytes)",
                             f"{len(raw)} bytes")
    wide = np.zeros((count, 8), dtype=np.uint8)
    wide[:, :width] = np.frombuffer(raw, dtype=np.uint8).reshape(count, width)
    values = wide.view("<u8").ravel().astype(np.uint64)
    if count and values.max() >= field.modulus:
        raise ParameterError(what, f"field elements below p = {field.modulus}", int(values.max()))
    return values


def encode_fixed(field: PrimeField, values, fractional_bits: int) -> np.ndarray:
    """Reals as field elements: round(x 2^k), negatives as p - |v| (NaN and infinities are refused)."""
    k = check_integer("fractional bits", fractional_bits, 0, 52)
    array = np.asarray(values, dtype=np.float64)
    if not np.isfinite(array).all():
        raise ParameterError("value", "finite reals", "NaN or infinity")
    scaled = np.rint(array * 2.0**k)
    if np.abs(scaled).max(initial=0) >= field.modulus / 2:
        raise ParameterError("value", f"below {field.modulus / 2**(k + 1):.6g} in magnitude for this field and "
                             f"{k} fractional bits", float(np.abs(array).max()))
    integers = scaled.astype(np.int64)
    return np.where(integers < 0, np.uint64(field.modulus) - (-integers).astype(np.uint64),
                    integers.astype(np.uint64))


def decode_fixed(field: PrimeField, values, fractional_bits: int) -> np.ndarray:
    """Field elements (sums of encodings) back to reals."""
    return field.signed(values) / 2.0 ** check_integer("fractional bits", fractional_bits, 0, 52)


def fixed_point_modulus(n_values: int, max_abs: float, fractional_bits: int) -> PrimeField:
    """The smallest prime field in which a sum of ``n_values`` encodings of reals in [-max_abs, max_abs] decodes
    exactly: p > 2 n (max_abs 2^k + 1/2)."""
    n = check_integer("values", n_values, 1)
    k = check_integer("fractional bits", fractional_bits, 0, 52)
    if not (max_abs > 0 and np.isfinite(max_abs)):
        raise ParameterError("max_abs", "a finite number > 0", max_abs)
    largest = int(np.ceil(2 * n * (max_abs * 2.0**k + 0.5)))
    if largest >= MODULUS_MAX:
        raise ParameterError("fractional bits", f"few enough that 2 n (max_abs 2^k + 1/2) < 2^62 (it is {largest:.3g})", k)
    return PrimeField(next_prime(largest + 1))
