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
  walks it with additions only and appends each hit to the bucket of its
  L2-sized tile of counters; a full bucket is counted while its tile sits in
  cache (see docs/derivations.md, "Full-domain counting").

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
_COUNTER_BYTES_MAX = 2**32  # full-domain counting uses fewer threads than that would need more


@nb.njit(cache=True, inline="always")
def _mulmod(a: int, x: int, q: int, qinv: float) -> int:
    """(a * x) mod q for 0 <= a, x < q < 2^50.

    The products are taken in unsigned 64-bit arithmetic, which wraps mod
    2^64 by definition; their difference, reinterpreted as signed, is the
    exact remainder up to a few multiples of q.
    """
    quot = np.uint64(float(a) * float(x) * qinv)
    r = np.int64(np.uint64(a) * np.uint64(x) - quot * np.uint64(q))
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


@nb.njit(cache=True, inline="always")
def _hash(u: int, v: int, x: int, q: int, b: int, qinv: float, binv: float) -> int:
    """h_{u,v}(x) = ((u x + v) mod q) mod b, without a hardware division."""
    y = _mulmod(u, x, q, qinv) + v
    if y >= q:
        y -= q
    r = y - b * np.int64(float(y) * binv)
    while r < 0:
        r += b
    while r >= b:
        r -= b
    return r


@nb.njit(cache=True, parallel=True)
def _evaluate(u, v, x, q, b, out):
    qinv, binv = 1.0 / q, 1.0 / b
    for i in nb.prange(u.size):
        out[i] = _hash(u[i], v[i], x[i], q, b, qinv, binv)


_MATCH_BLOCK = 2048  # messages per block: u, v, w of a block stay in L1/L2 while all queries pass


@nb.njit(cache=True, parallel=True)
def _count_matches(u, v, w, queries, q, b, out_per_thread):
    """out_per_thread[t, k] += messages of thread t's share matching query k."""
    qinv, binv = 1.0 / q, 1.0 / b
    n_threads = out_per_thread.shape[0]
    share = (u.size + n_threads - 1) // n_threads
    for t in nb.prange(n_threads):
        end = min(u.size, (t + 1) * share)
        for lo in range(t * share, end, _MATCH_BLOCK):
            hi = min(end, lo + _MATCH_BLOCK)
            for k in range(queries.size):
                x = queries[k]
                c = 0
                for i in range(lo, hi):
                    if _hash(u[i], v[i], x, q, b, qinv, binv) == w[i]:
                        c += 1
                out_per_thread[t, k] += c


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
def _flush(counts, buckets, start, filled, tile):
    base = tile << _TILE_BITS
    for p in range(start, start + filled):
        counts[base + buckets[p]] += 1


@nb.njit(cache=True, parallel=True)
def _count_all(u, v, w, q, b, domain_size, counts_per_thread, bucket_capacity):
    """counts_per_thread[t, x] += preimage hits of x among thread t's share of messages.

    Each preimage's offset inside its 2^16-counter tile is appended to that
    tile's bucket; a full bucket is counted into its tile (which then sits in
    L2) and emptied. Buckets are padded by one cache line so that the write
    heads of the buckets do not all fall into one cache set.
    """
    n_threads = counts_per_thread.shape[0]
    n_tiles = (domain_size + (1 << _TILE_BITS) - 1) >> _TILE_BITS
    share = (u.size + n_threads - 1) // n_threads
    mask = (1 << _TILE_BITS) - 1
    stride = bucket_capacity + 32
    for t in nb.prange(n_threads):
        counts = counts_per_thread[t]
        buckets = np.empty(n_tiles * stride, np.uint16)
        fill = np.zeros(n_tiles, np.int64)
        qinv = 1.0 / q
        for i in range(t * share, min(u.size, (t + 1) * share)):
            x, d = _progression(u[i], v[i], w[i], q, b, qinv)
            y = w[i]
            while y < q:
                if x < domain_size:
                    tile = x >> _TILE_BITS
                    f = fill[tile]
                    buckets[tile * stride + f] = x & mask
                    f += 1
                    if f == bucket_capacity:
                        _flush(counts, buckets, tile * stride, f, tile)
                        f = 0
                    fill[tile] = f
                x += d
                if x >= q:
                    x -= q
                y += b
        for tile in range(n_tiles):
            _flush(counts, buckets, tile * stride, fill[tile], tile)


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

    def count_matches(self, u: np.ndarray, v: np.ndarray, w: np.ndarray, queries,
                      progress: Callable[[int], None] | None = None) -> np.ndarray:
        """For each query x, the number of messages i with h_{u_i,v_i}(x) = w_i.

        ``progress`` (optional) is called with the number of queries done
        after each slice of them.
        """
        queries = _as_int64("queries", queries, self.modulus)
        out = np.zeros((nb.get_num_threads(), queries.size), dtype=np.int64)
        step = max(1, -(-queries.size // (1 if progress is None else 20)))
        for lo in range(0, queries.size, step):
            hi = min(queries.size, lo + step)
            _count_matches(u, v, w, queries[lo:hi], self.modulus, self.bins, out[:, lo:hi])
            if progress is not None:
                progress(hi - lo)
        return out.sum(axis=0)

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
        threads = max(1, min(nb.get_num_threads(), _COUNTER_BYTES_MAX // (4 * domain_size)))
        counts = np.zeros((threads, domain_size), dtype=np.int32)
        n_tiles = (domain_size + (1 << _TILE_BITS) - 1) >> _TILE_BITS
        capacity = max(4096, min(1 << 16, (1 << 24) // n_tiles))  # at most 32 MiB of offsets per thread
        slice_size = max(1, -(-u.size // (1 if progress is None else 10)))  # each slice flushes all buckets
        for lo in range(0, u.size, slice_size):
            hi = min(u.size, lo + slice_size)
            _count_all(u[lo:hi], v[lo:hi], w[lo:hi], self.modulus, self.bins, domain_size, counts, capacity)
            if progress is not None:
                progress(hi - lo)
        return counts.sum(axis=0, dtype=np.int64)
