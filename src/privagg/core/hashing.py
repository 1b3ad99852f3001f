"""The universal hash family of the shuffle FE paper (Luo, Wang, Yi 2022, §3.2).

    h_{u,v}(x) = ((u x + v) mod q) mod b,   (u, v) in {1..q-1} x [q],

maps [B] into [b] for a prime q >= B. For every x != y the collision
probability is the same (reference §2.3):

    p_col = floor(q/b) ((q mod b) + q - b) / (q (q - 1)) < 1/b.

Besides evaluation this module gives the analyzer's two counting kernels:

* :meth:`UniversalHash.count_matches` -- for each queried x, how many
  messages (u, v, w) have h_{u,v}(x) = w (the FE1 single/batch query).
* :meth:`UniversalHash.count_all` -- the same count for every x in [B], by
  enumerating each message's preimages. The preimages of w are
  x_j = (w + j b - v) u^{-1} mod q for j = 0, 1, ... while w + j b < q, an
  arithmetic progression x_j = x_0 + j d (mod q) with d = b u^{-1}; the kernel
  walks it with additions only and scatters the hits into L2-sized tiles
  before counting them (see docs/derivations.md, "Full-domain counting").

Arithmetic is exact for q < 2^50: products are reduced with the
floating-point-quotient method (an estimate of floor(a x / q) in double
precision, then an exact correction in wrapping 64-bit integers).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numba as nb
import numpy as np

from .primes import is_prime

MAX_MODULUS_BITS = 50
_TILE_BITS = 16  # tiles of 2^16 int32 counters = 256 KiB, inside a core's L2


@nb.njit(cache=True, inline="always")
def _mulmod(a: int, x: int, q: int, qinv: float) -> int:
    """(a * x) mod q for 0 <= a, x < q < 2^50."""
    quot = np.int64(float(a) * float(x) * qinv)
    r = a * x - quot * q  # both products wrap mod 2^64; their difference is exact
    while r < 0:
        r += q
    while r >= q:
        r -= q
    return r


@nb.njit(cache=True)
def _inverse(a: int, q: int) -> int:
    t, new_t, r, new_r = 0, 1, q, a
    while new_r != 0:
        quotient = r // new_r
        t, new_t = new_t, t - quotient * new_t
        r, new_r = new_r, r - quotient * new_r
    return t % q


@nb.njit(cache=True, parallel=True)
def _evaluate(u, v, x, q, b, out):
    qinv = 1.0 / q
    for i in nb.prange(u.size):
        out[i] = (_mulmod(u[i], x[i], q, qinv) + v[i]) % q % b


@nb.njit(cache=True, parallel=True)
def _count_matches(u, v, w, queries, q, b, out):
    qinv = 1.0 / q
    for k in nb.prange(queries.size):
        x = queries[k]
        c = 0
        for i in range(u.size):
            if (_mulmod(u[i], x, q, qinv) + v[i]) % q % b == w[i]:
                c += 1
        out[k] += c


@nb.njit(cache=True)
def _progression(u, v, w, q, b, qinv):
    """First preimage x_0 and step d of message (u, v, w)."""
    u_inv = _inverse(u, q)
    x0 = _mulmod((w - v) % q, u_inv, q, qinv)
    d = _mulmod(b % q, u_inv, q, qinv)
    return x0, d


@nb.njit(cache=True)
def _preimages(u, v, w, q, b, domain_size):
    qinv = 1.0 / q
    x, d = _progression(u, v, w, q, b, qinv)
    out = []
    y = w
    while y < q:
        if x < domain_size:
            out.append(x)
        x += d
        if x >= q:
            x -= q
        y += b
    return np.array(out, dtype=np.int64)


@nb.njit(cache=True)
def _count_block(u, v, w, q, b, domain_size, counts, offsets, bucket_start, bucket_fill):
    """Add the preimage counts of messages u, v, w into ``counts``.

    Two passes over the progressions: the first sizes the tile buckets, the
    second scatters each preimage's offset inside its tile; then each tile is
    counted while it sits in cache.
    """
    qinv = 1.0 / q
    n_tiles = bucket_fill.size
    bucket_fill[:] = 0
    for i in range(u.size):
        x, d = _progression(u[i], v[i], w[i], q, b, qinv)
        y = w[i]
        while y < q:
            if x < domain_size:
                bucket_fill[x >> _TILE_BITS] += 1
            x += d
            if x >= q:
                x -= q
            y += b
    bucket_start[0] = 0
    for t in range(n_tiles):
        bucket_start[t + 1] = bucket_start[t] + bucket_fill[t]
        bucket_fill[t] = bucket_start[t]
    for i in range(u.size):
        x, d = _progression(u[i], v[i], w[i], q, b, qinv)
        y = w[i]
        while y < q:
            if x < domain_size:
                t = x >> _TILE_BITS
                offsets[bucket_fill[t]] = x & ((1 << _TILE_BITS) - 1)
                bucket_fill[t] += 1
            x += d
            if x >= q:
                x -= q
            y += b
    for t in range(n_tiles):
        base = t << _TILE_BITS
        for p in range(bucket_start[t], bucket_start[t + 1]):
            counts[base + offsets[p]] += 1


@nb.njit(cache=True, parallel=True)
def _count_all(u, v, w, q, b, domain_size, counts_per_thread, messages_per_block):
    n_threads = counts_per_thread.shape[0]
    n_tiles = (domain_size + (1 << _TILE_BITS) - 1) >> _TILE_BITS
    share = (u.size + n_threads - 1) // n_threads
    per_message = q // b + 1
    for t in nb.prange(n_threads):
        offsets = np.empty(messages_per_block * per_message, np.uint16)
        bucket_start = np.empty(n_tiles + 1, np.int64)
        bucket_fill = np.empty(n_tiles, np.int64)
        end = min(u.size, (t + 1) * share)
        for lo in range(t * share, end, messages_per_block):
            hi = min(end, lo + messages_per_block)
            _count_block(u[lo:hi], v[lo:hi], w[lo:hi], q, b, domain_size,
                         counts_per_thread[t], offsets, bucket_start, bucket_fill)


def _as_int64(name: str, values, upper: int, lower: int = 0) -> np.ndarray:
    arr = np.asarray(values)
    if arr.size and not np.issubdtype(arr.dtype, np.integer):
        raise ValueError(f"{name} must be integers in [{lower}, {upper}), got dtype {arr.dtype}")
    arr = arr.astype(np.int64, copy=False).ravel()
    if arr.size and (arr.min() < lower or arr.max() >= upper):
        raise ValueError(f"{name} must be integers in [{lower}, {upper}), got values in [{arr.min()}, {arr.max()}]")
    return arr


@dataclass(frozen=True)
class UniversalHash:
    """The family H = {h_{u,v}} for a prime ``modulus`` q and ``bins`` b."""

    modulus: int
    bins: int

    def __post_init__(self) -> None:
        q, b = self.modulus, self.bins
        if q.bit_length() > MAX_MODULUS_BITS or not is_prime(q):
            raise ValueError(f"modulus must be a prime below 2^{MAX_MODULUS_BITS}, got {q}")
        if not 2 <= b <= q:
            raise ValueError(f"bins must be in [2, modulus={q}], got {b}")

    @property
    def collision_probability(self) -> float:
        """p_col = floor(q/b)((q mod b) + q - b) / (q(q-1)), the same for all x != y."""
        q, b = self.modulus, self.bins
        return (q // b) * ((q % b) + q - b) / (q * (q - 1))

    def sample_keys(self, count: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
        """``count`` independent uniform keys: u in {1..q-1}, v in [q]."""
        u = rng.integers(1, self.modulus, size=count, dtype=np.int64)
        v = rng.integers(0, self.modulus, size=count, dtype=np.int64)
        return u, v

    def evaluate(self, u, v, x) -> np.ndarray:
        """h_{u_i,v_i}(x_i) for aligned arrays u, v, x (x < q)."""
        u = _as_int64("u", u, self.modulus, 1)
        v = _as_int64("v", v, self.modulus)
        x = _as_int64("x", x, self.modulus)
        if not u.size == v.size == x.size:
            raise ValueError(f"u, v and x must have one length, got {u.size}, {v.size}, {x.size}")
        out = np.empty(u.size, dtype=np.int64)
        _evaluate(u, v, x, self.modulus, self.bins, out)
        return out

    def preimages(self, u: int, v: int, w: int, domain_size: int) -> np.ndarray:
        """All x in [domain_size] with h_{u,v}(x) = w, in progression order."""
        if not 1 <= u < self.modulus or not 0 <= v < self.modulus or not 0 <= w < self.bins:
            raise ValueError(f"message (u={u}, v={v}, w={w}) is outside {{1..q-1}} x [q] x [b]")
        return _preimages(int(u), int(v), int(w), self.modulus, self.bins, int(domain_size))

    def count_matches(self, u: np.ndarray, v: np.ndarray, w: np.ndarray, queries) -> np.ndarray:
        """For each query x, the number of messages i with h_{u_i,v_i}(x) = w_i."""
        queries = _as_int64("queries", queries, self.modulus)
        out = np.zeros(queries.size, dtype=np.int64)
        _count_matches(u, v, w, queries, self.modulus, self.bins, out)
        return out

    def count_all(self, u: np.ndarray, v: np.ndarray, w: np.ndarray, domain_size: int,
                  progress: Callable[[int], None] | None = None) -> np.ndarray:
        """For every x in [domain_size], the number of messages with h(x) = w.

        ``progress`` (optional) is called with the number of messages done
        after each slice of the work.
        """
        if not 1 <= domain_size <= self.modulus:
            raise ValueError(f"domain_size must be in [1, modulus={self.modulus}], got {domain_size}")
        if u.size >= 2**31:
            raise ValueError(f"at most 2^31 - 1 messages fit the int32 counters, got {u.size}")
        threads = nb.get_num_threads()
        counts = np.zeros((threads, domain_size), dtype=np.int32)
        per_message = self.modulus // self.bins + 1
        per_block = max(1, (1 << 25) // per_message)  # 64 MiB of tile offsets per thread
        slice_size = max(per_block * threads, -(-u.size // 20))
        for lo in range(0, u.size, slice_size):
            hi = min(u.size, lo + slice_size)
            _count_all(u[lo:hi], v[lo:hi], w[lo:hi], self.modulus, self.bins, domain_size, counts, per_block)
            if progress is not None:
                progress(hi - lo)
        return counts.sum(axis=0, dtype=np.int64)
