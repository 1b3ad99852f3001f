"""numba kernels of the universal hash family (:mod:`privagg.core.hashing`).

Loaded only by the analyzer's counting methods, so that clients and the
command line start without numba. ``cache=True`` keeps the compiled code
beside this file: a second run compiles nothing.

Arithmetic is exact for q < 2^50: products are reduced with the
floating-point-quotient method (an estimate of floor(a x / q) in double
precision, then an exact correction in wrapping 64-bit integers).
"""

from __future__ import annotations

import importlib
import sys

import numba as nb
import numpy as np


def _imported_without(module: str, refused: str) -> None:
    """Import numba's ``module`` with the optional library ``refused`` refused (ImportError, as numba expects where it
    is not installed), unless either is imported already. numba's CPU target imports both modules below when it first
    compiles or loads a kernel, each only to learn whether an optional library is there:

    * numba.np.arraymath imports scipy.linalg (about 0.2 s of CPU, a tenth of fe-hh's whole process at n = 10^7:
      docs/benchmarks.md part 9) only to learn whether its np.dot may call BLAS. No kernel here calls BLAS; numba's
      linear algebra, if anything else compiles it later, imports scipy then as usual.
    * numba.core.typing.cffi_utils imports cffi, whose FFI() imports pycparser and compiles its lexer's regular
      expressions (25-40 ms of every FE1 process: docs/benchmarks.md), only to type the cffi functions a kernel may
      be passed; none is. cffi itself imports as usual afterwards (PyNaCl's bindings)."""
    if refused in sys.modules or module in sys.modules:
        return
    sys.modules[refused] = None
    try:
        importlib.import_module(module)
    except ImportError:  # another numba's layout: let it import as it does
        pass
    finally:
        del sys.modules[refused]


_imported_without("numba.np.arraymath", "scipy.linalg.cython_blas")
_imported_without("numba.core.typing.cffi_utils", "cffi")

TABLE_BITS = 16  # a domain of at most 2^16 items and a small q: counted with the table of inverses (count_one_tile)
MATCH_BLOCK = 2048  # messages per block: u, v, w of a block stay in L1/L2 while all queries pass


@nb.njit(cache=True, inline="always")
def mulmod(a: int, x: int, q: int, qinv: float) -> int:
    """(a * x) mod q for 0 <= a, x < q < 2^50.

    The products are taken in unsigned 64-bit arithmetic, which wraps mod
    2^64 by definition; their difference, reinterpreted as signed, is the
    exact remainder up to two multiples of q either way (the quotient's estimate is off by at most 2 for
    q < 2^50). The corrections are selects, not loops, so that a loop calling this one vectorizes
    (:func:`count_progressions`).
    """
    quot = np.uint64(float(a) * float(x) * qinv)
    r = np.int64(np.uint64(a) * np.uint64(x) - quot * np.uint64(q))
    r = r + q if r < 0 else r
    r = r + q if r < 0 else r
    r = r - q if r >= q else r
    return r - q if r >= q else r


@nb.njit(cache=True)
def inverse(a: int, q: int) -> int:
    t, new_t, r, new_r = 0, 1, q, a
    while new_r != 0:
        quotient = r // new_r
        t, new_t = new_t, t - quotient * new_t
        r, new_r = new_r, r - quotient * new_r
    return t % q


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
    returns how many items it appended to ``wrapped`` (each counter that wraps to 0: a narrow one, whose ``wrap``
    :func:`add_rows` adds back).

    For counters that fit a tile (in L2, :func:`privagg.core.hashing._count_all_plan`): there the walk in j-order
    hits cache, and costs an addition a step where :func:`count_sorted`'s costs its selects."""
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


@nb.njit(cache=True)
def three_gaps(d, n, q):
    """(a, gap_a, c, gap_c) of the points j d mod q, j in [n), for d in [1, q) and q prime: a in [1, n) minimises
    j d mod q (gap_a = a d mod q) and c maximises it (gap_c = q - c d mod q); (1, d, 1, q - d) for n = 1.

    By the three-gap theorem (Steinhaus; Slater 1967) the points' successor in increasing order around the circle
    of [q] is j + a (a step of gap_a) if j + a < n, else j - c (gap_c) if j >= c, else j + a - c (gap_a + gap_c).
    The next record minimum or maximum is at j = a + c (it splits the largest gap): the search runs the
    subtractive Euclidean algorithm on (gap_a, gap_c), k subtractions at a time, while a + c < n
    (docs/derivations.md, "Full-domain counting")."""
    a, gap_a, c, gap_c = 1, d, 1, q - d
    while True:
        if gap_a > gap_c:  # j = a + c lands at gap_a - gap_c: the new minimum, k times while it stays above 0
            k = min((gap_a - 1) // gap_c, (n - 1 - a) // c)
            if k <= 0:
                return a, gap_a, c, gap_c
            a += k * c
            gap_a -= k * gap_c
        else:  # at q - (gap_c - gap_a): the new maximum
            k = min((gap_c - 1) // gap_a, (n - 1 - c) // a)
            if k <= 0:
                return a, gap_a, c, gap_c
            c += k * a
            gap_c -= k * gap_a


@nb.njit(cache=True, inline="always")
def successor(j, x, last_up, a, c, gap_a, gap_c, a_c, gap_ac):
    """The next (j, x) in increasing x of :func:`three_gaps`' points; last_up = n - a, a_c = a - c, gap_ac = gap_a +
    gap_c. Selects, not branches: which of the three steps follows is as good as random, a branch mispredicted
    about every other step."""
    down = j - c if j >= c else j + a_c
    step_down = gap_c if j >= c else gap_ac
    return (j + a if j < last_up else down), x + (gap_a if j < last_up else step_down)


@nb.njit(cache=True)
def count_sorted(u, v, w, q, b, domain_size, counts, lo, hi, tile, state, wrapped):
    """counts[x] += preimage hits of x among messages lo..hi - 1, a tile of ``tile`` counters at a time (in L2);
    returns how many items it appended to ``wrapped`` (a narrow counter that wraps to 0, as :func:`count_direct`).

    Each message's preimages x_0 + j d (mod q), j in [n), are taken in increasing x rather than in j
    (:func:`three_gaps`, :func:`successor`): the message walks its preimages inside the current tile and stops at
    its end, keeping (x, j) for the next tile. x runs over [x_0, x_0 + q), the preimages past q counted at x - q
    in a second round of the tiles. Every increment then hits the tile in L2, where the walk in j-order hits the
    whole domain at random (an L3 or memory latency each). Two messages walk side by side (k and k + half): the
    selects of one step wait on each other, the two walks do not. The increment is written out at each of its
    three places: the same lines as an ``inline="always"`` helper made the whole decode 5x slower (2.0 s against
    10.8 s at n = 1e5, B = 2^24, measured alternately)."""
    n = hi - lo  # state: a row a message (x, j, n - a, a, c, gap_a, gap_c, x_0 + q), and a last one parked
    qinv = 1.0 / q
    for k in range(n):
        x0, d = progression(u[lo + k], v[lo + k], w[lo + k], q, b, qinv)
        steps = walk_length(w[lo + k], q, b)
        a, gap_a, c, gap_c = three_gaps(d, steps, q)
        state[k, 0], state[k, 1], state[k, 2], state[k, 3] = x0, 0, steps - a, a
        state[k, 4], state[k, 5], state[k, 6], state[k, 7] = c, gap_a, gap_c, x0 + q
    state[n, 0], state[n, 7] = 2 * q, 2 * q  # an odd message's partner: past every tile
    half = (n + 1) // 2
    size = np.uint64(domain_size)  # compared with unsigned offsets, which index without a test for a negative one
    n_wrapped = 0
    for base in (0, q):
        for start in range(base, base + q, tile):
            stop = min(start + tile, base + q)
            for k in range(half):
                k1 = k + half if k + half < n else n
                x0, end0, j0, up0 = state[k, 0], min(stop, state[k, 7]), state[k, 1], state[k, 2]
                a0, c0, ga0, gc0 = state[k, 3], state[k, 4], state[k, 5], state[k, 6]
                x1, end1, j1, up1 = state[k1, 0], min(stop, state[k1, 7]), state[k1, 1], state[k1, 2]
                a1, c1, ga1, gc1 = state[k1, 3], state[k1, 4], state[k1, 5], state[k1, 6]
                ac0, gac0, ac1, gac1 = a0 - c0, ga0 + gc0, a1 - c1, ga1 + gc1
                while x0 < end0 and x1 < end1:
                    y = np.uint64(x0 - base)
                    if y < size:
                        counts[y] += 1
                        if counts[y] == 0:
                            wrapped[n_wrapped] = y
                            n_wrapped += 1
                    j0, x0 = successor(j0, x0, up0, a0, c0, ga0, gc0, ac0, gac0)
                    y = np.uint64(x1 - base)
                    if y < size:
                        counts[y] += 1
                        if counts[y] == 0:
                            wrapped[n_wrapped] = y
                            n_wrapped += 1
                    j1, x1 = successor(j1, x1, up1, a1, c1, ga1, gc1, ac1, gac1)
                row = k
                if x1 < end1:  # the second walk goes on alone, in the first's place (10% faster than guarding each)
                    state[k, 0], state[k, 1] = x0, j0
                    row, x0, end0, j0, up0, a0, c0 = k1, x1, end1, j1, up1, a1, c1
                    ga0, gc0, ac0, gac0 = ga1, gc1, ac1, gac1
                else:
                    state[k1, 0], state[k1, 1] = x1, j1  # (the parked row keeps its 2 q)
                while x0 < end0:
                    y = np.uint64(x0 - base)
                    if y < size:
                        counts[y] += 1
                        if counts[y] == 0:
                            wrapped[n_wrapped] = y
                            n_wrapped += 1
                    j0, x0 = successor(j0, x0, up0, a0, c0, ga0, gc0, ac0, gac0)
                state[row, 0], state[row, 1] = x0, j0
    return n_wrapped


@nb.njit(cache=True, inline="always")
def thread_share(t, n_threads, n_messages):
    """Thread t's share of ``n_messages`` split among ``n_threads`` (the parallel kernels' prange over threads):
    the messages lo..hi - 1, ceil(n_messages / n_threads) of them (fewer for the last threads)."""
    share = (n_messages + n_threads - 1) // n_threads
    return t * share, min(n_messages, (t + 1) * share)


@nb.njit(cache=True, parallel=True)
def count_all(u, v, w, q, b, domain_size, counts_per_thread, tile, state, wrapped, n_wrapped):
    """counts_per_thread[t, x] (zeros) += preimage hits of x among thread t's share of the messages.

    The counters may be narrower than the counts (uint8 or uint16): each time one wraps, thread t appends its item
    to wrapped[t] (room for its share's preimages / the type's range: a counter wraps once per that many hits) and
    their number is n_wrapped[t]; :func:`add_rows` adds the range back for each. A quarter or half the bytes of
    int32 counters to hold in L2 and to touch first.

    A domain whose counters fit a ``tile`` (in L2) is counted in place, message by message (:func:`count_direct`);
    a larger one tile by tile, each message's preimages in increasing order (:func:`count_sorted`, the walks'
    state in state[t]: a share's messages and one row more). A domain of at most 2^TABLE_BITS items and a small q
    is :func:`count_all_table`'s (int32 counters only): compiled apart, so that the narrow counters' variants of
    this kernel do not compile its path.
    """
    n_threads = counts_per_thread.shape[0]
    for t in nb.prange(n_threads):
        lo, hi = thread_share(t, n_threads, u.size)
        if domain_size <= tile:
            n_wrapped[t] = count_direct(u, v, w, q, b, domain_size, counts_per_thread[t], lo, hi, wrapped[t])
        else:
            n_wrapped[t] = count_sorted(u, v, w, q, b, domain_size, counts_per_thread[t], lo, hi, tile, state[t],
                                        wrapped[t])


@nb.njit(cache=True, parallel=True)
def count_all_table(u, v, w, q, b, domain_size, counts_per_thread, u_inverses):
    """counts_per_thread[t, x] (int32 zeros) += preimage hits of x among thread t's share of the messages, for a
    domain of at most 2^TABLE_BITS items and a small q, given the table of inverses mod q (:func:`count_one_tile`)."""
    n_threads = counts_per_thread.shape[0]
    for t in nb.prange(n_threads):
        lo, hi = thread_share(t, n_threads, u.size)
        count_one_tile(u, v, w, q, b, domain_size, counts_per_thread[t], lo, hi, u_inverses)


@nb.njit(cache=True, parallel=True)
def add_rows(counts_per_thread, wrapped, n_wrapped, wrap, out):
    """out[x] += the sum of counts_per_thread[:, x] (int64 ``out``), by all threads a block of the domain each;
    then ``wrap`` for each item in wrapped[t, :n_wrapped[t]] (a narrow counter that wrapped, :func:`count_all`)."""
    n_threads, domain_size = counts_per_thread.shape
    block = 1 << 16
    for k in nb.prange((domain_size + block - 1) // block):
        for x in range(k * block, min(domain_size, (k + 1) * block)):
            total = out[x]
            for t in range(n_threads):
                total += counts_per_thread[t, x]
            out[x] = total
    for t in range(n_wrapped.size):
        for j in range(n_wrapped[t]):
            out[wrapped[t, j]] += wrap


@nb.njit(cache=True)
def divisibility(b):
    """(m^-1 mod 2^64, s, floor((2^64 - 1) / b)) for b = 2^s m, m odd: d >= 0 is a multiple of b iff
    rotr(d m^-1 mod 2^64, s) <= floor((2^64 - 1) / b) (Granlund and Montgomery 1994, section 9; Warren, Hacker's
    Delight, 10-17): a product, a rotation and a comparison in place of a remainder."""
    shift, m = 0, b
    while m % 2 == 0:
        m //= 2
        shift += 1
    m_inverse = np.uint64(m)  # right to 3 bits (m m = 1 mod 8); each Newton step doubles them
    for _ in range(5):
        m_inverse = m_inverse * (np.uint64(2) - np.uint64(m) * m_inverse)
    return m_inverse, np.uint64(shift), np.uint64(0xFFFFFFFFFFFFFFFF) // np.uint64(b)


@nb.njit(cache=True, inline="always")
def is_multiple(d, m_inverse, shift, limit):
    """d >= 0 and d a multiple of b, given :func:`divisibility` of b (no branch: it vectorizes)."""
    x, s = np.uint64(d) * np.uint64(m_inverse), np.uint64(shift)  # (unsigned throughout: a signed operand would
    return (d >= 0) & (((x >> s) | (x << ((np.uint64(64) - s) & np.uint64(63)))) <= np.uint64(limit))  # make a float)


@nb.njit(cache=True, parallel=True)
def count_progressions(u, v, w, bases, fanouts, q, b, out_per_thread):
    """out_per_thread[t, k, j] += messages of thread t's share matching x = (bases[k] + j) mod q, j < fanouts[k].

    FE1's queries are runs of one (fanout 1). The children of one prefix in
    the heavy-hitter tree are consecutive codes (protocols/heavy_hitters.py),
    so u x + v mod q runs along a progression of step u: one product per
    (message, prefix), then an addition per child. y = (u x + v) mod q lies in [0, q) and w in [0, b), so
    y mod b = w exactly when y - w is a non-negative multiple of b (:func:`is_multiple`).

    A block of messages at a time, each loop over the block one pass without a branch or a store in it but its
    own, which LLVM vectorizes (4 messages a step in AVX2 registers): y - w of every message of the block at the
    prefix's first child, then, child by child, the block's matches summed and each y moved on to the next
    child. The loops over the prefixes and children within the block, over the messages one at a time, took
    1.5 times the CPU (fe-hh at n = 10^7, B = 2^48: docs/benchmarks.md part 9).
    """
    qinv = 1.0 / q
    m_inverse, shift, limit = divisibility(b)
    n_threads = out_per_thread.shape[0]
    for t in nb.prange(n_threads):
        start, end = thread_share(t, n_threads, u.size)
        y = np.empty(MATCH_BLOCK, np.int64)  # y - w of the block's messages at the current child
        for lo in range(start, end, MATCH_BLOCK):
            n = min(end, lo + MATCH_BLOCK) - lo
            for k in range(bases.size):
                base = bases[k]
                for i in range(n):
                    r = mulmod(u[lo + i], base, q, qinv) + v[lo + i]
                    y[i] = (r - q if r >= q else r) - w[lo + i]  # in [-w, q - w)
                for j in range(fanouts[k]):
                    hits = 0
                    for i in range(n):
                        d = y[i]
                        hits += is_multiple(d, m_inverse, shift, limit)
                        d += u[lo + i]
                        y[i] = d - q if d >= q - w[lo + i] else d
                    out_per_thread[t, k, j] += hits
