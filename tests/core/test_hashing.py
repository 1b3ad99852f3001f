import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from privagg.core import hash_kernels, hashing
from privagg.core.hash_kernels import inverse
from privagg.core.hashing import MAX_MODULUS_BITS, UniversalHash, mulmod
from privagg.core.primes import mod_inverse, next_prime


@pytest.fixture(autouse=True)
def kernels(monkeypatch):
    """count_all through its kernels (and counting by key) at every size here, as they count large calls: its numpy
    path for the smallest calls, every (message, item) pair evaluated, has a test of its own
    (test_count_all_of_few_pairs_is_the_kernels_count)."""
    monkeypatch.setattr(hashing, "PAIRS_MAX", -1)


def brute_collision_probability(q, b):
    x, y = 0, 1  # p_col is the same for every pair; check two pairs below
    hits = total = 0
    for u in range(1, q):
        for v in range(q):
            hits += ((u * x + v) % q) % b == ((u * y + v) % q) % b
            total += 1
    return hits / total


@pytest.mark.parametrize("q,b", [(7, 3), (11, 4), (13, 13), (31, 5), (37, 36)])
def test_collision_probability_formula_matches_brute_force(q, b):
    h = UniversalHash(q, b)
    u, v = np.meshgrid(np.arange(1, q), np.arange(q), indexing="ij")
    u, v = u.ravel(), v.ravel()
    for x, y in [(0, 1), (2, q - 1)]:
        same = h.evaluate(u, v, np.full(u.size, x)) == h.evaluate(u, v, np.full(u.size, y))
        assert same.mean() == pytest.approx(h.collision_probability, abs=1e-12)
    assert h.collision_probability == pytest.approx(brute_collision_probability(q, b), abs=1e-12)
    assert h.collision_probability < 1 / b or b == q


@settings(max_examples=200)
@given(st.data())
def test_evaluate_matches_python_integers(data):
    q = next_prime(data.draw(st.integers(min_value=3, max_value=2**49)))
    b = data.draw(st.integers(min_value=2, max_value=q))
    u = data.draw(st.lists(st.integers(1, q - 1), min_size=1, max_size=20))
    v = data.draw(st.lists(st.integers(0, q - 1), min_size=len(u), max_size=len(u)))
    x = data.draw(st.lists(st.integers(0, q - 1), min_size=len(u), max_size=len(u)))
    got = UniversalHash(q, b).evaluate(u, v, x)
    assert got.tolist() == [((ui * xi + vi) % q) % b for ui, vi, xi in zip(u, v, x)]


@settings(max_examples=100)
@given(q=st.sampled_from([101, 257, 1009]), b=st.integers(2, 60), data=st.data())
def test_preimages_match_brute_force(q, b, data):
    h = UniversalHash(q, b)
    u, v = data.draw(st.integers(1, q - 1)), data.draw(st.integers(0, q - 1))
    w, domain = data.draw(st.integers(0, b - 1)), data.draw(st.integers(1, q))
    expected = [x for x in range(domain) if ((u * x + v) % q) % b == w]
    assert sorted(h.preimages(u, v, w, domain).tolist()) == expected


def test_count_all_matches_count_matches_and_brute_force():
    rng = np.random.default_rng(5)
    domain = 70_000  # more than one 2^16 tile
    h = UniversalHash(next_prime(domain), 97)
    u, v = h.sample_keys(3000, rng)
    w = rng.integers(0, h.bins, size=3000)
    every = h.count_all(u, v, w, domain)
    queries = rng.integers(0, domain, size=200)
    assert np.array_equal(every[queries], h.count_matches(u, v, w, queries))
    brute = [(((u * x + v) % h.modulus) % h.bins == w).sum() for x in queries[:20]]
    assert every[queries[:20]].tolist() == brute
    assert every.sum() == sum(h.preimages(a, c, d, domain).size for a, c, d in zip(u, v, w))


@pytest.mark.parametrize("domain, modulus, bins", [(1024, 1031, 4), (1024, 1031, 1031), (3, 3, 2),
                                                    (60_000, 60_013, 97), (1000, 1_048_583, 16)])
@pytest.mark.parametrize("messages", [0, 1, 3, 4, 7, 2001])
def test_count_all_in_one_tile_is_the_brute_force_count(domain, modulus, bins, messages):
    """The one-tile kernel walks four messages side by side with a table of inverses: every count exact,
    whatever n mod 4 and whichever walk (of ceil((q - w) / b) steps) is the longest; a modulus above the
    table's bound (2^20 + 7) walks in place (count_direct), exact too."""
    rng = np.random.default_rng(messages)
    h = UniversalHash(modulus, bins)
    u, v = h.sample_keys(messages, rng)
    w = rng.integers(0, h.bins, size=messages)
    x, brute = np.arange(domain), np.zeros(domain, np.int64)
    for lo in range(0, messages, 100):  # every (message, item) pair, 100 messages at a time
        a, c, d = u[lo:lo + 100, None], v[lo:lo + 100, None], w[lo:lo + 100, None]
        brute += (((a * x + c) % h.modulus) % h.bins == d).sum(axis=0)
    assert np.array_equal(h.count_all(u, v, w, domain), brute)


@pytest.mark.parametrize("q, n", [(7, 1), (7, 2), (101, 3), (101, 50), (1009, 505), (65_537, 300),
                                  (next_prime(2**40), 1000)])
def test_three_gaps_are_the_extreme_points_and_the_successor_walks_them_in_order(q, n):
    """three_gaps' a and c are the indices of the smallest and the largest of j d mod q over j in [1, n) (their
    gaps to 0 and to q); successor from j = 0 visits every point once, in increasing order around the circle."""
    rng = np.random.default_rng(q + n)
    for d in {1, 2, q - 1, q - 2, *rng.integers(1, q, size=40).tolist()}:
        a, gap_a, c, gap_c = hash_kernels.three_gaps(d, n, q)
        points = [j * d % q for j in range(n)]
        if n > 1:
            rest = points[1:]
            assert (a, gap_a) == (1 + rest.index(min(rest)), min(rest))
            assert (c, gap_c) == (1 + rest.index(max(rest)), q - max(rest))
        j, x, visited = 0, 0, []
        for _ in range(n):
            visited.append((j, x))
            j, x = hash_kernels.successor(j, x, n - a, a, c, gap_a, gap_c, a - c, gap_a + gap_c)
        assert (j, x) == (0, q)  # once around the circle, back at j = 0
        assert [p for _, p in visited] == sorted(points) and all(points[j] == p for j, p in visited)


def test_tiles_take_half_a_cores_cache_or_a_default_where_linux_does_not_say(monkeypatch):
    """Tiles of counters in half the L2 that /sys describes (4 KiB at the least), of 512 KiB where it describes
    none; the counts do not depend on the tile (the tests below count over 4096-counter tiles)."""
    assert hashing.core_cache_bytes() >= 0
    for cache, counter_bytes, tile in ((2 << 20, 1, 1 << 20), (2 << 20, 2, 1 << 19), (0, 1, 1 << 19), (0, 4, 1 << 17),
                                       (1024, 1, 4096)):
        monkeypatch.setattr(hashing, "core_cache_bytes", lambda: cache)
        assert hashing._count_all_plan(1 << 24, counter_bytes)[1] == tile


@pytest.mark.parametrize("messages", [1, 2, 3, 2001])
@pytest.mark.parametrize("domain, modulus", [(70_000, 70_001), (70_000, 140_009), (3 * 4096, 3 * 4096 + 7)])
def test_count_all_over_tiles_is_the_brute_force_count_added_to_out(monkeypatch, messages, domain, modulus):
    """Over tiles of 4096 counters (the smallest) each message walks its preimages in increasing order, a tile
    at a time, two messages side by side and an odd last one beside a parked partner; the walks wrap past q into
    the second round of tiles; the domain ends inside a tile, at q - 1 (70,001 = q) or far below q, or at a
    tile's end. Counts are added to ``out``."""
    monkeypatch.setattr(hashing, "core_cache_bytes", lambda: 2 * 4096)
    assert hashing._count_all_plan(domain, 1)[1] == 4096
    rng = np.random.default_rng(messages)
    h = UniversalHash(next_prime(modulus - 1), 97)
    u, v = h.sample_keys(messages, rng)
    w = rng.integers(0, h.bins, size=messages)
    x, brute = np.arange(domain), np.zeros(domain, np.int64)
    for lo in range(0, messages, 100):
        a, c, d = u[lo:lo + 100, None], v[lo:lo + 100, None], w[lo:lo + 100, None]
        brute += (((a * x + c) % h.modulus) % h.bins == d).sum(axis=0)
    out = np.arange(domain, dtype=np.int64)
    assert h.count_all(u, v, w, domain, out=out) is out
    assert np.array_equal(out, brute + np.arange(domain))


@pytest.mark.parametrize("cache", [None, 2 * 4096])
def test_count_all_adds_back_every_wrap_of_its_narrow_counters(monkeypatch, cache):
    """300,000 messages all hashing one item x* to their w: its narrow counter (uint16 here, where the records of
    wraps would take more than uint8 saves; uint8 forced) wraps at each 65,536 or 256 hits in a thread, and each
    wrap is added back: x*'s count is every message, and every count is the int32 counters' (which no count
    wraps), added into a non-zero ``out``. A plan whose records would outgrow what a narrow type saves falls
    back to int32. ``cache``: counters in place (the domain fits a tile), or over tiles of 4096 counters."""
    if cache:
        monkeypatch.setattr(hashing, "core_cache_bytes", lambda: cache)
    rng = np.random.default_rng(11)
    domain, star = 70_000, 12_345
    h = UniversalHash(next_prime(domain), 1000)
    u, v = h.sample_keys(300_000, rng)
    w = (((u * star + v) % h.modulus) % h.bins).astype(np.int64)
    wide = np.zeros(domain, np.int64)
    with monkeypatch.context() as patched:
        patched.setattr(UniversalHash, "_counters", lambda self, *args, **kw: (np.int32, 0))
        h.count_all(u, v, w, domain, out=wide)
    assert wide[star] == u.size
    assert h._counters(u.size, 2, domain, one_tile=False)[0] is np.uint16  # uint8's records would not fit here
    plans = {np.uint16: None, np.uint8: (np.uint8, u.size * -(-h.modulus // h.bins) // 256 + 1)}  # room for 1 thread
    for counter, plan in plans.items():
        with monkeypatch.context() as patched:
            if plan:
                patched.setattr(UniversalHash, "_counters", lambda self, *args, **kw: plan)
            out = np.arange(domain, dtype=np.int64)
            h.count_all(u, v, w, domain, out=out)
        assert np.array_equal(out - np.arange(domain), wide), counter
    assert h._counters(10**9, 1, domain, one_tile=False) == (np.int32, 0)  # records would pass what is saved
    assert h._counters(10**6, 1, 10**7, one_tile=False)[0] is np.uint8  # a larger domain: uint8's records fit


def test_narrow_counters_compile_no_table_path(monkeypatch):
    """count_all's uint8 and uint16 counters never take the table of inverses (a small domain and modulus: int32),
    so numba compiles that path for int32 counters alone (its kernel apart, hash_kernels.count_all_table): each
    narrow variant of one kernel holding every path cost a fresh clone's suite its compile time.

    Checked by the counters each kernel is handed, and by count_all's code not naming the table's kernel (so no
    variant of it compiles count_one_tile). Not by count_one_tile's compiled signatures, as before: with numba's
    cache warm (conftest compiles it in the xdist controller) none are listed, and that check passed whatever ran."""
    assert "count_one_tile" not in hash_kernels.count_all.py_func.__code__.co_names  # the kernel they compile
    handed = []
    for name in ("count_all", "count_all_table"):
        kernel = getattr(hash_kernels, name)
        monkeypatch.setattr(hash_kernels, name, lambda *args, _kernel=kernel, _name=name: handed.append(
            (_name, str(args[6].dtype))) or _kernel(*args))  # args[6]: the counters, counts_per_thread
    rng = np.random.default_rng(5)
    for q, b, domain, messages in [(4_194_319, 1000, 1 << 22, 2000), (262_147, 8, 1 << 12, 300),
                                   (65_537, 8, 1 << 12, 3000)]:  # uint8, uint16, then the table's int32
        h = UniversalHash(q, b)
        u, v = h.sample_keys(messages, rng)
        h.count_all(u, v, rng.integers(0, b, messages), domain)
    assert handed == [("count_all", "uint8"), ("count_all", "uint16"), ("count_all_table", "int32")]


@pytest.mark.parametrize("q, b, domain", [(101, 101, 100), (101, 2, 100), (1031, 4, 1024), (1_048_583, 16, 1000),
                                           (next_prime(2**48), 2**40, 64), (3, 2, 1)])
@pytest.mark.parametrize("messages", [0, 1, 3, 999])
def test_count_all_of_few_pairs_is_the_kernels_count(monkeypatch, q, b, domain, messages):
    """A call of at most PAIRS_MAX (message, item) pairs (a small estimate's) evaluates h at each pair in numpy, with
    no numba: the kernels' counts exactly, added to ``out``, from compact columns too, and a scratch estimate within
    its bound; batches of a few messages when the domain is large."""
    rng = np.random.default_rng(messages + domain)
    h = UniversalHash(q, b)
    u, v = h.sample_keys(messages, rng)
    w = rng.integers(0, b, messages)
    w[: messages // 3] = h.evaluate(u[: messages // 3], v[: messages // 3], np.full(messages // 3, domain - 1))
    kernels = h.count_all(u, v, w, domain)  # PAIRS_MAX is -1 here: the kernels
    monkeypatch.undo()
    assert messages * domain <= hashing.PAIRS_MAX
    monkeypatch.setattr(hashing, "PAIRS_BATCH", 3 * domain)  # three messages a batch
    out = np.arange(domain, dtype=np.int64)
    assert h.count_all(u, v, w, domain, out=out) is out and np.array_equal(out - np.arange(domain), kernels)
    assert np.array_equal(h.count_all(*(a.astype(np.uint64) for a in (u, v, w)), domain), kernels)
    assert h.count_all_bytes(domain, messages) <= 48 * hashing.PAIRS_BATCH


@pytest.mark.parametrize("column, values", [("u", [0, 5]), ("v", [-1, 5]), ("w", [5, -1]), ("w", [5, 97])])
def test_count_all_refuses_messages_out_of_range(column, values):
    """A w below 0 would walk more preimages than the narrow counters' record of wraps has room for."""
    h = UniversalHash(next_prime(70_000), 97)
    message = {"u": np.array([3, 4]), "v": np.array([1, 2]), "w": np.array([5, 6])}
    message[column] = np.array(values)
    with pytest.raises(ValueError, match=f"{column} must be integers in "):
        h.count_all(message["u"], message["v"], message["w"], 70_000)
    with pytest.raises(ValueError, match="u, v and w must have one length"):
        h.count_all(np.array([3]), np.array([1, 2]), np.array([5, 6]), 70_000)


@pytest.mark.parametrize("out", [np.zeros(70_000, np.int32), np.zeros(69_999, np.int64),
                                 np.zeros(140_000, np.int64)[::2]])
def test_count_all_refuses_an_out_it_cannot_add_into(out):
    h = UniversalHash(next_prime(70_000), 97)
    with pytest.raises(ValueError, match="out must be a contiguous int64 array of length domain_size=70000"):
        h.count_all(np.array([1]), np.array([2]), np.array([3]), 70_000, out=out)


def test_counting_takes_compact_columns_as_int64():
    # Messages are stored in the layout's compact dtypes; in uint32 arithmetic w - v would wrap.
    rng = np.random.default_rng(7)
    h = UniversalHash(next_prime(70_000), 97)
    u, v = h.sample_keys(3000, rng)
    w = rng.integers(0, h.bins, size=3000)
    compact = (u.astype(np.uint32), v.astype(np.uint32), w.astype(np.uint8))
    strided = np.empty(3000, dtype=[("u", "u4"), ("v", "u4"), ("w", "u1")])  # fields of row-major records
    strided["u"], strided["v"], strided["w"] = compact
    queries = rng.integers(0, 70_000, size=50)
    for columns in (compact, (strided["u"], strided["v"], strided["w"])):
        assert np.array_equal(h.count_all(*columns, 70_000), h.count_all(u, v, w, 70_000))
        assert np.array_equal(h.count_matches(*columns, queries), h.count_matches(u, v, w, queries))
    assert h.count_all_bytes(70_000, 3000) >= 4 * 70_000  # at least one thread's int32 counters


@pytest.mark.parametrize("q, b, domain, messages", [(67, 4, 64, 5000), (1031, 4, 1024, 200_000), (101, 7, 50, 30_000),
                                                    (5, 5, 5, 1000), (2, 2, 1, 50), (3001, 3, 3000, 100_000)])
@pytest.mark.parametrize("cells", [None, 999])
def test_counting_by_key_counts_as_the_walk(monkeypatch, q, b, domain, messages, cells):
    """count_all over small moduli counts each key's messages together (OLH's hashes): every item's count equals
    count_matches', which evaluates each message's hash at the item; ``cells``: batches of few keys (sorted)."""
    import privagg.core.hashing as hashing

    if cells:
        monkeypatch.setattr(hashing, "BY_KEY_CELLS", cells)
    rng = np.random.default_rng(q * messages)
    h = UniversalHash(q, b)
    u, v = h.sample_keys(messages, rng)
    w = rng.integers(0, b, messages)
    w[: messages // 3] = h.evaluate(u[: messages // 3], v[: messages // 3], np.full(messages // 3, domain - 1))
    assert hashing.by_key_cheaper(q, b, domain, messages)
    out = np.arange(domain, dtype=np.int64)  # counts add to out
    assert np.array_equal(h.count_all(u, v, w, domain, out=out) - np.arange(domain),
                          h.count_matches(u, v, w, np.arange(domain)))
    assert h.count_all_bytes(domain, messages) < 2**27


def test_large_modulus_counts():
    rng = np.random.default_rng(6)
    q = next_prime(2**48)
    h = UniversalHash(q, 1000)
    x = rng.integers(0, 2**48, size=50)
    u, v = h.sample_keys(50, rng)
    w = h.evaluate(u, v, x)
    assert h.count_matches(u, v, w, x[:5]).min() >= 1


def test_rejects_bad_family():
    with pytest.raises(ValueError, match="modulus must be a prime"):
        UniversalHash(100, 10)
    with pytest.raises(ValueError, match="bins must be in"):
        UniversalHash(101, 1)
    with pytest.raises(ValueError, match="u must be integers in"):
        UniversalHash(101, 10).evaluate([0], [1], [1])


@given(st.integers(min_value=1, max_value=562949953421231 - 1))  # every unit of the field: 1..q - 1
def test_kernel_inverse_matches_mod_inverse(a):
    q = 562949953421231  # a prime below 2^49 (q itself, which hypothesis once drew, has no inverse)
    assert inverse(a, q) == mod_inverse(a, q)


LARGEST_Q = 1125899906842597  # the largest prime below 2^50


def test_largest_modulus_is_the_largest_prime_below_the_limit():
    assert LARGEST_Q.bit_length() == MAX_MODULUS_BITS and next_prime(LARGEST_Q) == LARGEST_Q
    assert next_prime(LARGEST_Q + 1).bit_length() > MAX_MODULUS_BITS


@settings(max_examples=300)
@given(data=st.data())
def test_numpy_and_kernel_mulmod_match_python_integers(data):
    # Clients evaluate with numpy's mulmod, the analyzer's kernels with their own: both exact for q < 2^50.
    q = data.draw(st.sampled_from([3, 101, 562949953421231, LARGEST_Q]))
    a = data.draw(st.lists(st.one_of(st.integers(0, q - 1), st.sampled_from([0, 1, q - 2, q - 1])),
                           min_size=1, max_size=30))
    x = data.draw(st.lists(st.one_of(st.integers(0, q - 1), st.sampled_from([0, 1, q - 2, q - 1])),
                           min_size=len(a), max_size=len(a)))
    expected = [ai * xi % q for ai, xi in zip(a, x)]
    assert mulmod(np.array(a, dtype=np.int64), np.array(x, dtype=np.int64), q).tolist() == expected
    assert [hash_kernels.mulmod(ai, xi, q, 1.0 / q) for ai, xi in zip(a, x)] == expected


def test_numpy_evaluate_agrees_with_the_counting_kernels_at_the_largest_modulus():
    rng = np.random.default_rng(8)
    h = UniversalHash(LARGEST_Q, 2**20 + 7)
    x = np.concatenate([rng.integers(0, LARGEST_Q, size=200), [0, 1, LARGEST_Q - 1]])
    u, v = h.sample_keys(x.size, rng)
    u[:3], v[:3] = LARGEST_Q - 1, LARGEST_Q - 1
    w = h.evaluate(u, v, x)
    assert w.tolist() == [((int(a) * int(b) + int(c)) % LARGEST_Q) % h.bins for a, b, c in zip(u, x, v)]
    # each message matches its own item: the kernels see what the clients computed
    assert all(h.count_matches(u[i:i + 1], v[i:i + 1], w[i:i + 1], x[i:i + 1])[0] == 1 for i in range(0, 203, 7))


@pytest.mark.parametrize("bins", [2, 3, 97, 2518, 4096, 18494, 2**20 + 7, 2**31])
def test_progression_counts_are_the_numpy_hashs_matches(bins):
    """count_progressions (and count_matches, its runs of one) against h.evaluate, for bins odd, even and powers
    of two: the kernel's test of y mod b = w by the multiple-of-b test of y - w (hash_kernels.is_multiple)."""
    rng = np.random.default_rng(bins)
    h = UniversalHash(LARGEST_Q, bins)
    u, v = h.sample_keys(3000, rng)
    u[:2], v[:2] = LARGEST_Q - 1, LARGEST_Q - 1
    w = rng.integers(0, bins, size=3000)
    w[-300:] = h.evaluate(u[-300:], v[-300:], np.full(300, 12345))  # matches to find, of any w
    w[:3] = bins - 1
    bases, fanouts = np.array([12345 - 3, LARGEST_Q - 2, 0, 7]), np.array([6, 4, 1, 9])
    counts = h.count_progressions(u, v, w, bases, fanouts)
    for k, (base, fanout) in enumerate(zip(bases, fanouts)):
        for j in range(fanout):
            x = np.full(u.size, (int(base) + j) % LARGEST_Q)
            assert counts[k, j] == (h.evaluate(u, v, x) == w).sum(), (k, j)
        assert not counts[k, fanout:].any()
    assert counts[0, 3] >= 300


@pytest.mark.parametrize("b", [1, 2, 3, 6, 97, 18494, 2**16, 2**31 + 11, 2**48 - 59])
def test_the_multiple_test_is_the_remainder(b):
    m_inverse, shift, limit = map(np.uint64, hash_kernels.divisibility(b))  # (as the kernel holds them)
    rng = np.random.default_rng(b)
    ds = np.concatenate([np.arange(-3, 4 * b + 3) if b < 100 else [], [-b, -1, 0, b - 1, b, b + 1, 2**49 - 1],
                         rng.integers(0, 2**49, size=500), b * rng.integers(0, 2**49 // b, size=500)]).astype(np.int64)
    assert [hash_kernels.is_multiple(d, m_inverse, shift, limit) for d in ds.tolist()] == \
        [d >= 0 and d % b == 0 for d in ds.tolist()]


def test_the_kernels_count_without_importing_scipy_linalg():
    """numba's CPU target imports numba.np.arraymath, which imported scipy.linalg (about 0.2 s of CPU, a tenth of
    fe-hh's process at n = 10^7) only to learn whether np.dot may call BLAS; hash_kernels imports it with scipy's
    BLAS refused. A kernel counts as before, and np.dot compiled afterwards still imports scipy and works."""
    import subprocess
    import sys

    code = """
import sys
import numpy as np
from privagg.core.hashing import UniversalHash
h = UniversalHash(1_000_003, 97)
rng = np.random.default_rng(1)
u, v = h.sample_keys(500, rng)
w = h.evaluate(u, v, np.full(500, 5))
counts = h.count_all(u, v, w, 1_000_003)
walk = h.count_progressions(u, v, w, np.array([4]), np.array([3]))
print(int(counts[5]), int(walk[0, 1]), 'numba' in sys.modules, 'scipy.linalg' in sys.modules)
import numba
dot = numba.njit(lambda a, b: np.dot(a, b))
print(dot(np.ones(3), np.ones(3)), 'scipy.linalg' in sys.modules)
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split("\n")[:2] == ["500 500 True False", "3.0 True"], out.stdout
