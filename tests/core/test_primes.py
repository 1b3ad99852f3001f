import pytest
import sympy
from hypothesis import given, settings, strategies as st

from privagg.core.primes import is_prime, mod_inverse, next_prime


def test_is_prime_matches_sympy_below_20000():
    assert [n for n in range(20_000) if is_prime(n)] == list(sympy.primerange(0, 20_000))


def test_strong_pseudoprimes_are_rejected():
    # Composites that fool Miller-Rabin for the first few bases.
    for n in (2047, 1373653, 25326001, 3215031751, 2152302898747, 3474749660383, 341550071728321,
              3825123056546413051):
        assert not is_prime(n), n
    # psi_12 fools all twelve bases: it is the end of the deterministic range
    with pytest.raises(ValueError, match="n must be in"):
        is_prime(318665857834031151167461)


@settings(max_examples=300)
@given(st.integers(min_value=0, max_value=2**64 - 1))
def test_is_prime_matches_sympy_on_64_bit(n):
    assert is_prime(n) == sympy.isprime(n)


@settings(max_examples=100)
@given(st.integers(min_value=0, max_value=2**62))
def test_next_prime_is_the_smallest_prime_at_or_above(n):
    p = next_prime(n)
    assert p >= n and sympy.isprime(p)
    assert p == (n if sympy.isprime(n) else sympy.nextprime(n))


def test_known_moduli():
    assert next_prime(2**24) == 16777259  # the SDPFE modulus for B = 2^24
    assert next_prime(2**32) == 4294967311


@given(st.integers(min_value=1, max_value=2**49))
def test_mod_inverse(a):
    q = 562949953421231  # a prime below 2^49
    if a % q:
        assert a * mod_inverse(a, q) % q == 1
