import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from privagg.core.hashing import UniversalHash, _inverse
from privagg.core.primes import mod_inverse, next_prime


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


@given(st.integers(min_value=1, max_value=2**49 - 1))
def test_kernel_inverse_matches_mod_inverse(a):
    q = 562949953421231  # a prime below 2^49
    assert _inverse(a, q) == mod_inverse(a, q)
