"""numba kernels of the universal hash family (:mod:`privagg.core.hashing`).

Loaded only by the analyzer's counting methods, so that clients and the
command line start without numba. ``cache=True`` keeps the compiled code
beside this file: a second run compiles nothing.

Arithmetic is exact for q < 2^50: products are reduced with the
floating-point-quotient method (an estimate of floor(a x / q) in double
precision, then an exact correction in wrapping 64-bit integers).
"""

from __future__ import annotations

import numba as nb
import numpy as np

TILE_BITS = 16  # tiles of 2^16 int32 counters = 256 KiB, inside a core's L2
MATCH_BLOCK = 2048  # messages per block: u, v, w of a block stay in L1/L2 while all queries pass
BUCKET_PAD = 32  # uint16 slots (a cache line) after each tile bucket: write heads spread over cache sets


@nb.njit(cache=True, inline="always")
def mulmod(a: int, x: int, q: int, qinv: float) -> int:
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
def inverse(a: int, q: int) -> int:
    t, new_t, r, new_r = 0, 1, q, a
    while new_r != 0:
        quotient = r // new_r
        t, new_t = new_t, t - quotient * new_t
        r, new_r = new_r, r - quotient * new_r
    return t % q


@nb.njit(cache=True, inline="always")
def hash_value(u: int, v: int, x: int, q: int, b: int, qinv: float, binv: float) -> int:
    """h_{u,v}(x) = ((u x + v) mod q) mod b, without a hardware division."""
    y = mulmod(u, x, q, qinv) + v
    if y >= q:
        y -= q
    r = y - b * np.int64(float(y) * binv)
    while r < 0:
        r += b
    while r >= b:
        r -= b
    return r


@nb.njit(cache=True)
def progression(u, v, w, q, b, qinv):
    """First preimage x_0 and step d of message (u, v, w)."""
    u_inv = inverse(u, q)
    x0 = mulmod((w - v) % q, u_inv, q, qinv)
    d = mulmod(b % q, u_inv, q, qinv)
    return x0, d


@nb.njit(cache=True)
def preimages(u, v, w, q, b, domain_size):
    qinv = 1.0 / q
    x, d = progression(u, v, w, q, b, qinv)
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
def flush(counts, buckets, start, filled, tile):
    base = tile << TILE_BITS
    for p in range(start, start + filled):
        counts[base + buckets[p]] += 1


@nb.njit(cache=True, parallel=True)
def count_all(u, v, w, q, b, domain_size, counts_per_thread, bucket_capacity):
    """counts_per_thread[t, x] += preimage hits of x among thread t's share of messages.

    Each preimage's offset inside its 2^16-counter tile is appended to that
    tile's bucket; a full bucket is counted into its tile (which then sits in
    L2) and emptied. A domain of one tile is counted directly. Buckets are padded (BUCKET_PAD) so that the write heads
    of the buckets do not all fall into one cache set.
    """
    n_threads = counts_per_thread.shape[0]
    n_tiles = (domain_size + (1 << TILE_BITS) - 1) >> TILE_BITS
    share = (u.size + n_threads - 1) // n_threads
    mask = (1 << TILE_BITS) - 1
    stride = bucket_capacity + BUCKET_PAD
    for t in nb.prange(n_threads):
        counts = counts_per_thread[t]
        buckets = np.empty(n_tiles * stride, np.uint16)
        fill = np.zeros(n_tiles, np.int64)
        qinv = 1.0 / q
        for i in range(t * share, min(u.size, (t + 1) * share)):
            x, d = progression(u[i], v[i], w[i], q, b, qinv)
            y = w[i]
            while y < q:
                if x < domain_size and n_tiles == 1:  # the counters fit one tile (in L2): no buckets needed
                    counts[x] += 1
                elif x < domain_size:
                    tile = x >> TILE_BITS
                    f = fill[tile]
                    buckets[tile * stride + f] = x & mask
                    f += 1
                    if f == bucket_capacity:
                        flush(counts, buckets, tile * stride, f, tile)
                        f = 0
                    fill[tile] = f
                x += d
                if x >= q:
                    x -= q
                y += b
        for tile in range(n_tiles):
            flush(counts, buckets, tile * stride, fill[tile], tile)


@nb.njit(cache=True, parallel=True)
def count_progressions(u, v, w, bases, fanouts, q, b, out_per_thread):
    """out_per_thread[t, k, j] += messages of thread t's share matching x = (bases[k] + j) mod q, j < fanouts[k].

    FE1's queries are runs of one (fanout 1). The children of one prefix in
    the heavy-hitter tree are consecutive codes (protocols/heavy_hitters.py),
    so u x + v mod q runs along a progression of step u: one product per
    (message, prefix), then an addition per child.
    """
    qinv, binv = 1.0 / q, 1.0 / b
    n_threads = out_per_thread.shape[0]
    share = (u.size + n_threads - 1) // n_threads
    for t in nb.prange(n_threads):
        end = min(u.size, (t + 1) * share)
        for lo in range(t * share, end, MATCH_BLOCK):
            hi = min(end, lo + MATCH_BLOCK)
            for k in range(bases.size):
                base = bases[k]
                if fanouts[k] == 1:  # one query: no progression to walk
                    c = 0
                    for i in range(lo, hi):
                        if hash_value(u[i], v[i], base, q, b, qinv, binv) == w[i]:
                            c += 1
                    out_per_thread[t, k, 0] += c
                    continue
                for i in range(lo, hi):
                    ui = u[i]
                    y = mulmod(ui, base, q, qinv) + v[i]
                    if y >= q:
                        y -= q
                    for j in range(fanouts[k]):
                        r = y - b * np.int64(float(y) * binv)
                        while r < 0:
                            r += b
                        while r >= b:
                            r -= b
                        if r == w[i]:
                            out_per_thread[t, k, j] += 1
                        y += ui
                        if y >= q:
                            y -= q
