"""The universal hash family of the shuffle FE paper (Luo, Wang, Yi 2022, §3.2).

    h_{u,v}(x) = ((u x + v) mod q) mod b,   (u, v) in {1..q-1} x [q],

maps [B] into [b] for a prime q >= B. For every x != y the collision
probability is the same (reference §2.3):

    p_col = floor(q/b) ((q mod b) + q - b) / (q (q - 1)) < 1/b.

Besides evaluation this module gives the analyzer's counting kernels:

* :meth:`UniversalHash.count_matches` -- for each queried x, how many
  messages (u, v, w) have h_{u,v}(x) = w (the FE1 single/batch query).
* :meth:`UniversalHash.count_progressions` -- the same for runs of consecutive x (the heavy-hitter
  tree's children of a prefix); count_matches is its runs of one.
* :meth:`UniversalHash.count_all` -- the same count for every x in [B], by
  enumerating each message's preimages (a few messages over a small domain: h at every pair, in numpy). The preimages of w are
  x_j = (w + j b - v) u^{-1} mod q for j = 0, 1, ... while w + j b < q, an
  arithmetic progression x_j = x_0 + j d (mod q) with d = b u^{-1}; over a
  domain larger than an L2-sized tile of counters the kernel takes them in
  increasing x (three-gap theorem: steps of three sizes), one tile at a time
  for all messages, so that every increment hits the tile in cache (see
  docs/derivations.md, "Full-domain counting").

Arithmetic is exact for q < 2^50: products are reduced with the
floating-point-quotient method (an estimate of floor(a x / q) in double
precision, then an exact correction in wrapping 64-bit integers). Clients
evaluate hashes with numpy alone; the counting kernels are numba code in
:mod:`privagg.core.hash_kernels`, loaded on first use.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache, cached_property
from pathlib import Path

import numpy as np

from .primes import is_prime

MAX_MODULUS_BITS = 50
_COUNTER_BYTES_MAX = 2**32  # full-domain counting uses fewer threads than that would need more


def mulmod(a: np.ndarray, x: np.ndarray, q: int) -> np.ndarray:
    """(a * x) mod q elementwise for int64 arrays 0 <= a, x < q < 2^50 (numpy only).

    floor(a x / q) is estimated in double precision (off by at most 2 for
    q < 2^50); a x - quot q is then exact in wrapping unsigned 64-bit
    arithmetic, and a final ``%`` corrects the estimate. Where q < 2^31, a x < 2^62 is exact in int64: one product
    and one ``%`` (half the passes: OLH's and FE1's hashing up to B of about 2^31).
    """
    if q < 1 << 31:
        return np.asarray(a, dtype=np.int64) * np.asarray(x, dtype=np.int64) % q
    quot = (a.astype(np.float64) * x.astype(np.float64) * (1.0 / q)).astype(np.uint64)
    r = (a.astype(np.uint64) * x.astype(np.uint64) - quot * np.uint64(q)).view(np.int64)
    return r % q


def _as_int64(name: str, values, upper: int, lower: int = 0) -> np.ndarray:
    arr = np.asarray(values)
    if arr.size and not np.issubdtype(arr.dtype, np.integer):
        raise ValueError(f"{name} must be integers in [{lower}, {upper}), got dtype {arr.dtype}")
    arr = arr.astype(np.int64, copy=False).ravel()
    if arr.size and (arr.min() < lower or arr.max() >= upper):
        raise ValueError(f"{name} must be integers in [{lower}, {upper}), got values in [{arr.min()}, {arr.max()}]")
    return arr


def _kernel_columns(u, v, w) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """u, v, w as contiguous int64, the kernels' arithmetic (w - v must not wrap as it would in uint32).

    Messages are stored in compact dtypes; the analyzer passes one slice at
    a time, so this copy is bounded by the slice. int64 input is not copied.
    """
    return tuple(np.ascontiguousarray(a, dtype=np.int64) for a in (u, v, w))


BY_KEY_CELLS = 1 << 17  # prefix sums counting by key takes at a time (1 MiB of int64: a batch's arrays stay in L2)
# count_all of at most this many (message, item) pairs evaluates h at each in numpy (UniversalHash._count_pairs): about
# 20 ms at the most, where loading numba and the kernels' cache takes 0.3-0.45 s, most of a small estimate's process
PAIRS_MAX = 1 << 20
PAIRS_BATCH = 1 << 16  # pairs evaluated at a time (a few 512 KiB temporaries)
INVERSE_TABLE_MAX = 1 << 17  # moduli whose table of inverses (1 MiB at most) count_all builds once and keeps


def by_key_cheaper(q: int, b: int, domain_size: int, messages: int) -> bool:
    """Whether :meth:`UniversalHash.count_all` counts each key's messages together (about 3 b q + B steps a key u,
    ``hash_kernels.count_by_key``) rather than walking each message's ceil(q / b) preimages: OLH's small moduli."""
    return q * (3 * b * q + domain_size) < messages * -(-q // b)


@cache
def core_cache_bytes() -> int:
    """The size of a core's level-2 cache as Linux describes it (/sys/devices/system/cpu/cpu0/cache), 0 where it
    does not: full-domain counting's tiles take half of it (:func:`_count_all_plan`)."""
    for entry in Path("/sys/devices/system/cpu/cpu0/cache").glob("index*"):
        try:  # level "2", size "2048K"
            if (entry / "level").read_text().strip() == "2":
                text = (entry / "size").read_text().strip()
                return int(text.rstrip("KMG")) << {"K": 10, "M": 20, "G": 30}.get(text[-1:], 0)
        except (OSError, ValueError):
            continue
    return 0


TILE_BYTES_UNKNOWN = 1 << 19  # a tile's counters where the L2's size is unknown: half of the smallest L2 common today


def _count_all_plan(domain_size: int, counter_bytes: int) -> tuple[int, int]:
    """(threads, counters per tile) of :meth:`UniversalHash.count_all` over ``domain_size`` items.

    Fewer threads than numba's when their int32 counters would pass _COUNTER_BYTES_MAX; a tile of
    ``counter_bytes``-byte counters in half of a core's L2 (the rest for the messages' state streaming past).
    """
    import numba

    threads = max(1, min(numba.get_num_threads(), _COUNTER_BYTES_MAX // (4 * domain_size)))
    return threads, max(1 << 12, (core_cache_bytes() // 2 or TILE_BYTES_UNKNOWN) // counter_bytes)


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

    @cached_property
    def _inverses(self) -> np.ndarray:
        """u^-1 mod q for every u in [q] (q <= INVERSE_TABLE_MAX): one lookup per message, not Euclid's steps."""
        from .hash_kernels import inverses

        return inverses(self.modulus)

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
        return ((mulmod(u, x, self.modulus) + v) % self.modulus) % self.bins

    def preimages(self, u: int, v: int, w: int, domain_size: int) -> np.ndarray:
        """All x in [domain_size] with h_{u,v}(x) = w, in progression order."""
        if not 1 <= u < self.modulus or not 0 <= v < self.modulus or not 0 <= w < self.bins:
            raise ValueError(f"message (u={u}, v={v}, w={w}) is outside {{1..q-1}} x [q] x [b]")
        from .hash_kernels import preimages

        return preimages(int(u), int(v), int(w), self.modulus, self.bins, int(domain_size))

    def count_matches(self, u: np.ndarray, v: np.ndarray, w: np.ndarray, queries) -> np.ndarray:
        """For each query x, the number of messages i with h_{u_i,v_i}(x) = w_i (integer columns of any dtype)."""
        queries = _as_int64("queries", queries, self.modulus)
        return self.count_progressions(u, v, w, queries, np.ones(queries.size, dtype=np.int64))[:, 0]

    def count_progressions(self, u: np.ndarray, v: np.ndarray, w: np.ndarray, bases, fanouts) -> np.ndarray:
        """counts[k, j]: the messages with h((bases[k] + j) mod q) = w, for j < fanouts[k].

        The heavy-hitter tree's children of a prefix are such a run of
        codes; the kernel walks u x + v along it with additions only.
        """
        import numba

        from .hash_kernels import count_progressions

        bases = _as_int64("bases", bases, self.modulus)
        fanouts = np.ascontiguousarray(fanouts, dtype=np.int64)
        if fanouts.size != bases.size or (bases.size and (fanouts.min() < 1 or fanouts.max() > self.modulus)):
            raise ValueError(f"fanouts must be in [1, modulus={self.modulus}], one per base")
        width = int(fanouts.max(initial=1))
        out = np.zeros((numba.get_num_threads(), bases.size, width), dtype=np.int64)
        count_progressions(*_kernel_columns(u, v, w), bases, fanouts, self.modulus, self.bins, out)
        return out.sum(axis=0)

    def count_all(self, u: np.ndarray, v: np.ndarray, w: np.ndarray, domain_size: int,
                  out: np.ndarray | None = None) -> np.ndarray:
        """For every x in [domain_size], the number of messages with h(x) = w (integer columns of any dtype).

        With ``out`` (int64, length domain_size) the counts are added to it
        in place and it is returned: a full-domain aggregate grows without a
        second domain-sized temporary.
        """
        if not 1 <= domain_size <= self.modulus:
            raise ValueError(f"domain_size must be in [1, modulus={self.modulus}], got {domain_size}")
        # messages in range: a w outside [b] would walk past the ceil(q / b) preimages the counters' record of
        # wraps is sized for (:meth:`_counters`)
        u, v, w = _as_int64("u", u, self.modulus, 1), _as_int64("v", v, self.modulus), _as_int64("w", w, self.bins)
        if not u.size == v.size == w.size:
            raise ValueError(f"u, v and w must have one length, got {u.size}, {v.size}, {w.size}")
        if u.size >= 2**31:
            raise ValueError(f"at most 2^31 - 1 messages fit the int32 counters, got {u.size}")
        if out is None:
            out = np.zeros(domain_size, dtype=np.int64)
        elif out.dtype != np.int64 or out.shape != (domain_size,) or not out.flags.c_contiguous:
            raise ValueError(f"out must be a contiguous int64 array of length domain_size={domain_size}")
        if u.size * domain_size <= PAIRS_MAX:
            return self._count_pairs(u, v, w, domain_size, out)
        if by_key_cheaper(self.modulus, self.bins, domain_size, u.size):
            return self._count_by_key(u, v, w, domain_size, out)
        from .hash_kernels import TABLE_BITS, add_rows, count_all, count_all_table

        table = domain_size <= 1 << TABLE_BITS and self.modulus <= INVERSE_TABLE_MAX
        threads = _count_all_plan(domain_size, 4)[0]
        counter, wraps = self._counters(u.size, threads, domain_size, one_tile=table)
        tile = _count_all_plan(domain_size, np.dtype(counter).itemsize)[1]
        counts = np.zeros((threads, domain_size), dtype=counter)
        wrapped, n_wrapped = np.empty((threads, wraps), np.int64), np.zeros(threads, np.int64)
        columns = _kernel_columns(u, v, w)
        if table:
            count_all_table(*columns, self.modulus, self.bins, domain_size, counts, self._inverses)
        else:
            walks = -(-u.size // threads) + 1 if domain_size > tile else 0  # over tiles: a walk's state
            count_all(*columns, self.modulus, self.bins, domain_size, counts, tile,
                      np.empty((threads, walks, 8), np.int64), wrapped, n_wrapped)
        add_rows(counts, wrapped, n_wrapped, 1 << (8 * np.dtype(counter).itemsize), out)
        return out

    def _count_pairs(self, u: np.ndarray, v: np.ndarray, w: np.ndarray, domain_size: int,
                     out: np.ndarray) -> np.ndarray:
        """:meth:`count_all` of few messages over a small domain (at most PAIRS_MAX pairs): h evaluated at every
        (message, item) pair in numpy, PAIRS_BATCH at a time (no numba to load: a small estimate's whole process)."""
        q = self.modulus
        x = np.arange(domain_size, dtype=np.int64)[None, :]
        rows = max(1, PAIRS_BATCH // domain_size)
        for lo in range(0, u.size, rows):
            part = slice(lo, lo + rows)
            hashed = (mulmod(u[part, None], x, q) + v[part, None]) % q % self.bins
            out += (hashed == w[part, None]).sum(axis=0)
        return out

    def _count_by_key(self, u: np.ndarray, v: np.ndarray, w: np.ndarray, domain_size: int,
                      out: np.ndarray) -> np.ndarray:
        """:meth:`count_all` for a small modulus, each key's messages counted together, in numpy (no numba to
        load): about 3 b q + B steps a key u in place of ceil(q / b) a message (docs/derivations.md, "Counting by
        key").

        For a key u, H[y] is the number of its messages (v, w) with ((y + v) mod q) mod b = w, y in [q]; then
        count[x] += H[u x mod q]. With A_w[v] the key's messages of value w at v, and T_w its prefix sums along
        each residue class mod b (T_w[k] = sum of A_w[v] over v <= k, v = k mod b; stored b places right, after
        zeros, so that k < 0 reads 0):

            H[y] = sum over w of T_w[q - y - 1 - e_w] - T_w[q - y - 1 - g_w] + total of A_w's class (w + q - y) mod b

        with e_w = (q - 1 - w) mod b and g_w = (-1 - w) mod b: the messages with y + v < q, and those that wrap
        past q (v >= q - y). Keys are taken BY_KEY_CELLS cells of T at a time, so that a batch's prefix sums stay
        in a core's cache: each message's cell in the table of every key (one integer: (u - 1, w, v)) is made once,
        then sorted by key (a radix sort of u where q < 2^16) when that is more than one batch. The items' cells
        u x mod q are taken in int32 where q B fits it (half the time of int64's remainders)."""
        q, b = self.modulus, self.bins
        width = -(-(q + b) // b) * b  # b zeros, then v in [q], padded to whole residue rows
        batch = max(1, BY_KEY_CELLS // (b * width))
        # T_w[q - y - 1 - e] for y = 0, 1, ... is T_w read backwards from q - 1 - e: a slice per w and offset
        starts = [(w_, b - (q - 1 - w_) % b, b - (-1 - w_) % b) for w_ in range(b)]
        totals = b + q - 1 - (q - 1 - np.arange(b)) % b  # index of class c's last prefix sum, c in [b]
        shift = (np.arange(b)[:, None] + np.arange(b)) % b  # [w, c]: the class (w + c) mod b
        turn = (q - np.arange(q)) % b
        narrow = np.int32 if q * max(q, domain_size) < 2**31 else np.int64  # u x mod q and a batch's cells
        x = np.arange(domain_size, dtype=narrow)
        key_cells = b * width  # one key's table
        cell = ((u - 1) * b + w) * width + b + v  # the message's cell in the table of every key
        if narrow is np.int32 and q * key_cells < 2**31:
            cell = cell.astype(np.int32)
        if batch < q - 1:
            cell = cell[np.argsort(u.astype(np.uint16) if q <= 1 << 16 else u, kind="stable")]
            before = np.concatenate([[0], np.cumsum(np.bincount(u, minlength=q))])  # [a]: messages of keys below a
            edges = before[np.minimum(np.arange(1, q + batch, batch), q)]
        else:
            edges = np.array([0, u.size])
        for k, a0 in enumerate(range(1, q, batch)):
            keys = min(batch, q - a0)
            lo, hi = edges[k], edges[k + 1]
            cells = cell[lo:hi] - (a0 - 1) * key_cells
            t = np.bincount(cells, minlength=keys * key_cells).reshape(keys, b, width // b, b)
            t = np.cumsum(t, axis=2).reshape(keys, b, width)
            wrapped = t[:, :, totals][:, np.arange(b)[:, None], shift].sum(axis=1)  # (keys, c)
            hits = wrapped[:, turn]
            for w_, below, wrapping in starts:
                hits += (t[:, w_, below:below + q] - t[:, w_, wrapping:wrapping + q])[:, ::-1]
            rows = np.arange(keys, dtype=narrow)[:, None]
            out += hits.ravel()[rows * q + (rows + a0) * x % q].sum(axis=0)
        return out

    def _counters(self, messages: int, threads: int, domain_size: int, one_tile: bool) -> tuple[type, int]:
        """(the per-thread counters' dtype, room for wrapped items per thread) of :meth:`count_all`.

        Over tiles, the narrowest of uint8 and uint16 whose record of wrapped items takes at most the bytes an item
        it saves on int32: a counter wraps once per 2^8 or 2^16 hits, and a thread's share of messages walks at
        most ceil(q / b) preimages each, so that many hits over the range bound the records (8 bytes each; room
        reserved, touched only as used). Else int32, which no count reaches (fewer than 2^31 messages, each
        hitting an item at most once). One tile: int32 (a small domain).
        """
        if not one_tile:
            hits = -(-messages // threads) * -(-self.modulus // self.bins)
            for counter in (np.uint8, np.uint16):
                size = np.dtype(counter).itemsize
                wraps = hits // (1 << 8 * size) + 1
                if 8 * wraps <= (4 - size) * domain_size:
                    return counter, wraps
        return np.int32, 0

    def count_all_bytes(self, domain_size: int, messages: int) -> int:
        """Scratch memory of one :meth:`count_all` call over ``messages`` messages, at most: counting by key, the
        messages' sorted copies and order and a batch's prefix sums and gathers; else every thread's counters (int32;
        narrower ones and their record of wrapped items take no more, :meth:`_counters`) and, over a domain larger
        than a tile of int32 counters, the walks' state (8 int64 a message, ``hash_kernels.count_sorted``)."""
        if messages * domain_size <= PAIRS_MAX:
            return 48 * PAIRS_BATCH
        if by_key_cheaper(self.modulus, self.bins, domain_size, messages):
            return 32 * messages + 48 * BY_KEY_CELLS + 16 * domain_size * max(1, BY_KEY_CELLS // self.bins // self.modulus)
        threads, tile = _count_all_plan(domain_size, 4)
        return threads * 4 * domain_size + (64 * (messages + 2 * threads) if domain_size > tile else 0)
