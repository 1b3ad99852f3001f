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

TILE_BITS = 16  # tiles of 2^16 counters (64 KiB of uint8, 256 KiB of int32), inside a core's L2; offsets: uint16
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
    return progression_from(inverse(u, q), v, w, q, b, qinv)


@nb.njit(cache=True, inline="always")
def progression_from(u_inv, v, w, q, b, qinv):
    """:func:`progression` given u's inverse mod q."""
    x0 = mulmod((w - v) % q, u_inv, q, qinv)
    d = mulmod(b % q, u_inv, q, qinv)
    return x0, d


@nb.njit(cache=True)
def inverses(q):
    """The table of a^-1 mod q for a in [q] (0 at 0)."""
    out = np.zeros(q, np.int64)
    for a in range(1, q):
        out[a] = inverse(a, q)
    return out


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
def flush(counts, buckets, start, filled, tile, wrapped, n_wrapped):
    """Count a bucket's offsets into its tile; a counter that wraps to 0 (a narrow one, :func:`count_all`) has its
    item appended to ``wrapped`` (n_wrapped so far; the new count returned), for :func:`count_all` to add back."""
    base = tile << TILE_BITS
    for p in range(start, start + filled):
        x = base + buckets[p]
        c = counts[x] + 1
        counts[x] = c
        if counts[x] == 0:
            wrapped[n_wrapped] = x
            n_wrapped += 1
    return n_wrapped


@nb.njit(cache=True, inline="always")
def walk_length(w, q, b):
    """How many y = w, w + b, ... lie below q: the preimages of a message with value w, in [q]."""
    return (q - w + b - 1) // b


@nb.njit(cache=True, inline="always")
def count_walk(counts, x, d, steps, q, domain_size):
    """``steps`` steps of the progression x, x + d, ... (mod q): each preimage in the domain counted."""
    for _ in range(steps):
        if x < domain_size:
            counts[x] += 1
        x += d
        if x >= q:
            x -= q


@nb.njit(cache=True)
def count_one_tile(u, v, w, q, b, domain_size, counts, lo, hi, u_inverses):
    """counts[x] += preimage hits of x among messages lo..hi - 1, for a domain of one tile (counters in L2),
    given the table of inverses mod q (:func:`inverses`: one tile's domain has a small q).

    Four messages walk their progressions side by side, written out (a helper called per step costs its
    array argument's reference count each time): four independent chains of additions the core overlaps,
    where one message's chain waits on each of its steps (about 1.5x faster here)."""
    qinv = 1.0 / q
    i = lo
    while i + 4 <= hi:
        x0, d0 = progression_from(u_inverses[u[i]], v[i], w[i], q, b, qinv)
        x1, d1 = progression_from(u_inverses[u[i + 1]], v[i + 1], w[i + 1], q, b, qinv)
        x2, d2 = progression_from(u_inverses[u[i + 2]], v[i + 2], w[i + 2], q, b, qinv)
        x3, d3 = progression_from(u_inverses[u[i + 3]], v[i + 3], w[i + 3], q, b, qinv)
        t0, t1 = walk_length(w[i], q, b), walk_length(w[i + 1], q, b)
        t2, t3 = walk_length(w[i + 2], q, b), walk_length(w[i + 3], q, b)
        together = min(min(t0, t1), min(t2, t3))
        for _ in range(together):
            if x0 < domain_size:
                counts[x0] += 1
            if x1 < domain_size:
                counts[x1] += 1
            if x2 < domain_size:
                counts[x2] += 1
            if x3 < domain_size:
                counts[x3] += 1
            x0 += d0
            x1 += d1
            x2 += d2
            x3 += d3
            if x0 >= q:
                x0 -= q
            if x1 >= q:
                x1 -= q
            if x2 >= q:
                x2 -= q
            if x3 >= q:
                x3 -= q
        count_walk(counts, x0, d0, t0 - together, q, domain_size)  # the longer walks' last steps
        count_walk(counts, x1, d1, t1 - together, q, domain_size)
        count_walk(counts, x2, d2, t2 - together, q, domain_size)
        count_walk(counts, x3, d3, t3 - together, q, domain_size)
        i += 4
    for j in range(i, hi):
        x, d = progression_from(u_inverses[u[j]], v[j], w[j], q, b, qinv)
        count_walk(counts, x, d, walk_length(w[j], q, b), q, domain_size)


@nb.njit(cache=True)
def count_direct(u, v, w, q, b, domain_size, counts, lo, hi, wrapped):
    """counts[x] += preimage hits of x among messages lo..hi - 1, each walk incrementing the counters in place;
    returns how many items it appended to ``wrapped`` (a narrow counter that wraps, as :func:`flush`).

    For counters that fit in the last-level cache (:func:`privagg.core.hashing._count_all_plan`): there a random
    increment costs less than a bucket's write and read (docs/derivations.md, "Full-domain counting")."""
    qinv = 1.0 / q
    n_wrapped = 0
    for i in range(lo, hi):
        x, d = progression(u[i], v[i], w[i], q, b, qinv)
        for _ in range(walk_length(w[i], q, b)):
            if x < domain_size:
                counts[x] += 1
                if counts[x] == 0:
                    wrapped[n_wrapped] = x
                    n_wrapped += 1
            x += d
            if x >= q:
                x -= q
    return n_wrapped


@nb.njit(cache=True, parallel=True)
def count_all(u, v, w, q, b, domain_size, counts_per_thread, bucket_capacity, u_inverses, wrapped, wrap, out):
    """out[x] += preimage hits of x among all messages, counted in counts_per_thread[t, x] (zeros) by thread t
    over its share of messages (``u_inverses``: the table of inverses mod q for a domain of one tile and a small
    q, else empty); the rows are then added into ``out`` (int64) by all threads, a block of the domain each.

    Over tiles the counters may be narrower than the counts (uint8 or uint16): each time one wraps, thread t
    appends its item to wrapped[t] (room for its share's preimages / ``wrap`` items: a counter wraps once per
    ``wrap`` hits, its type's range), and ``wrap`` is added back to ``out`` for each. A quarter or half the bytes
    of int32 counters to carry between memory and the L2 a tile is counted in, and to touch first.

    Each preimage's offset inside its 2^16-counter tile is appended to that
    tile's bucket; a full bucket is counted into its tile (which then sits in
    L2) and emptied (:func:`count_tiles`). A domain of one tile is counted directly (:func:`count_one_tile`).
    Buckets are padded (BUCKET_PAD) so that the write heads of the buckets do not all fall into one cache set.
    A ``bucket_capacity`` of 0 counts in place instead (:func:`count_direct`: counters in the last-level cache).
    """
    n_threads = counts_per_thread.shape[0]
    n_tiles = (domain_size + (1 << TILE_BITS) - 1) >> TILE_BITS
    share = (u.size + n_threads - 1) // n_threads
    n_wrapped = np.zeros(n_threads, np.int64)
    for t in nb.prange(n_threads):
        lo, hi = t * share, min(u.size, (t + 1) * share)
        if n_tiles == 1 and u_inverses.size:  # the counters fit one tile (in L2): no buckets needed
            count_one_tile(u, v, w, q, b, domain_size, counts_per_thread[t], lo, hi, u_inverses)
        elif bucket_capacity == 0:
            n_wrapped[t] = count_direct(u, v, w, q, b, domain_size, counts_per_thread[t], lo, hi, wrapped[t])
        else:
            n_wrapped[t] = count_tiles(u, v, w, q, b, domain_size, counts_per_thread[t], lo, hi, n_tiles,
                                       bucket_capacity, wrapped[t])
    block = 1 << TILE_BITS
    for k in nb.prange((domain_size + block - 1) // block):
        for x in range(k * block, min(domain_size, (k + 1) * block)):
            total = out[x]
            for t in range(n_threads):
                total += counts_per_thread[t, x]
            out[x] = total
    for t in range(n_threads):
        for j in range(n_wrapped[t]):
            out[wrapped[t, j]] += wrap


@nb.njit(cache=True)
def count_tiles(u, v, w, q, b, domain_size, counts, lo, hi, n_tiles, bucket_capacity, wrapped):
    """counts[x] += preimage hits of x among messages lo..hi - 1, through the tiles' buckets; returns how many
    items it appended to ``wrapped`` (:func:`flush`).

    Two messages walk side by side, the bucket append written out for each as in :func:`count_one_tile` (as
    a numba helper taking the arrays, inlined or not, it ran ten times slower: reference counts per call):
    while one walk's bucket write waits, the other's proceeds (about 8% less time than one walk). Each
    tile's write head is kept as a position in ``buckets`` (its next free slot), compared with the tile's end."""
    mask = (1 << TILE_BITS) - 1
    stride = bucket_capacity + BUCKET_PAD
    buckets = np.empty(n_tiles * stride, np.uint16)
    begin = np.arange(n_tiles) * stride
    end = begin + bucket_capacity
    head = begin.copy()
    qinv = 1.0 / q
    n_wrapped = 0
    for i in range(lo, hi, 2):
        x0, d0 = progression(u[i], v[i], w[i], q, b, qinv)
        t0 = walk_length(w[i], q, b)
        x1, d1, t1 = q, q, 0  # an odd last message walks beside a walk that stays at q, outside the domain
        if i + 1 < hi:
            x1, d1 = progression(u[i + 1], v[i + 1], w[i + 1], q, b, qinv)
            t1 = walk_length(w[i + 1], q, b)
        if t1 > t0:
            x0, d0, t0, x1, d1, t1 = x1, d1, t1, x0, d0, t0
        for steps in (t1, t0 - t1):  # both walks, then the longer alone beside the other parked at q
            for _ in range(steps):
                if x0 < domain_size:
                    tile = x0 >> TILE_BITS
                    h = head[tile]
                    buckets[h] = x0 & mask
                    h += 1
                    if h == end[tile]:
                        h = begin[tile]
                        n_wrapped = flush(counts, buckets, h, bucket_capacity, tile, wrapped, n_wrapped)
                    head[tile] = h
                if x1 < domain_size:
                    tile = x1 >> TILE_BITS
                    h = head[tile]
                    buckets[h] = x1 & mask
                    h += 1
                    if h == end[tile]:
                        h = begin[tile]
                        n_wrapped = flush(counts, buckets, h, bucket_capacity, tile, wrapped, n_wrapped)
                    head[tile] = h
                x0 += d0
                x1 += d1
                if x0 >= q:
                    x0 -= q
                if x1 >= q:
                    x1 -= q
            x1 = d1 = q  # (q + q - q: it stays there)
    for tile in range(n_tiles):
        n_wrapped = flush(counts, buckets, begin[tile], head[tile] - begin[tile], tile, wrapped, n_wrapped)
    return n_wrapped


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
