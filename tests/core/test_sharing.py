"""Prime-field vectors and additive secret sharing: exact reconstruction without overflow, shares that say
nothing of the secret, seed-compressed shares, fixed-point encoding."""

import numpy as np
import pytest
from scipy import stats

from privagg.core.sharing import (PrimeField, decode_fixed, encode_fixed, expand, fixed_point_modulus,
                                  reconstruct, share)
from privagg.errors import ParameterError

LARGE = PrimeField(2**61 - 1)  # a Mersenne prime: sums of two elements near 2^62 stress the uint64 headroom


@pytest.mark.parametrize("field", [PrimeField(7), PrimeField(1_000_003), LARGE])
def test_shares_reconstruct_exactly(field):
    rng = np.random.default_rng(1)
    secret = rng.integers(0, field.modulus, size=(50, 8), dtype=np.uint64)
    for count in (2, 3, 17):
        shares = share(field, secret, count, rng=rng)
        assert shares.shape == (count, 50, 8)
        assert np.array_equal(reconstruct(field, shares), secret)


def test_long_sums_never_wrap():
    """10^4 elements all equal to p - 1 sum to 10^4 (p - 1) mod p = p - 10^4, computed in uint64 blocks."""
    values = np.full((10_000, 3), LARGE.modulus - 1, dtype=np.uint64)
    assert np.all(LARGE.sum(values) == LARGE.modulus - 10_000)
    assert int(LARGE.sum(values, axis=1)[0]) == (3 * (LARGE.modulus - 1)) % LARGE.modulus


def test_any_n_minus_1_shares_are_uniform_whatever_the_secret():
    """p = 5, 3 shares: the last two shares are uniform over the 25 pairs for secret 0 and for secret 3
    (chi-square at a fixed seed; p-value above 1e-4)."""
    field, rng = PrimeField(5), np.random.default_rng(7)
    for secret in (0, 3):
        shares = share(field, np.full(20_000, secret), 3, rng=rng)
        pairs = (shares[1] * 5 + shares[2]).astype(np.int64)
        observed = np.bincount(pairs, minlength=25)
        assert stats.chisquare(observed).pvalue > 1e-4
        assert np.array_equal(reconstruct(field, shares), np.full(20_000, secret))


def test_fixed_point_sums_decode_exactly():
    rng = np.random.default_rng(2)
    k, n = 16, 1000
    values = rng.uniform(-1, 1, size=n)
    field = fixed_point_modulus(n, 1.0, k)
    encoded = encode_fixed(field, values, k)
    assert np.all(np.abs(decode_fixed(field, encoded, k) - values) <= 2.0 ** -(k + 1))
    total = decode_fixed(field, field.sum(encoded), k)
    assert total == np.rint(values * 2**k).sum() / 2**k  # exact: the field is large enough
    smaller = PrimeField(65_537)  # 2^16 + 1: too small for 2.0 at 16 fractional bits
    with pytest.raises(ParameterError, match="value must be below"):
        encode_fixed(smaller, [2.0], k)


@pytest.mark.parametrize("make,match", [
    (lambda: PrimeField(8), "modulus must be a prime in"),
    (lambda: PrimeField(2**62 + 135), "modulus must be a prime in"),
    (lambda: PrimeField(7).element([7]), r"field element must be integers in \[0, 7\)"),
    (lambda: PrimeField(7).element([-1]), r"field element must be integers in \[0, 7\)"),
    (lambda: PrimeField(7).element([1.5]), "field element must be integers"),
    (lambda: share(PrimeField(7), [1, 2], 1), "shares must be an integer >= 2"),
    (lambda: expand(PrimeField(7), b"short", (3,)), "seed must be 32 bytes"),
    (lambda: encode_fixed(PrimeField(65_537), [np.nan], 4), "value must be finite reals"),
    (lambda: fixed_point_modulus(10**6, 1e9, 40), "fractional bits must be few enough"),
])
def test_bad_input(make, match):
    with pytest.raises(ParameterError, match=match):
        make()


def test_expand_is_uniform_over_the_field_and_fills_any_shape():
    """ChaCha20 words rejection-sampled below p: uniform (a chi-square test over a field whose p is far below its
    bit length's power of two, where a reduction mod p would be biased), in the storage dtype, of the shape asked,
    the same for the same seed and independent across seeds."""
    field = PrimeField(17)  # 5 bits: words below 32, 15 of 32 rejected
    values = expand(field, bytes(range(32)), (200, 100))
    assert values.shape == (200, 100) and values.dtype == field.dtype
    observed = np.bincount(values.ravel().astype(np.int64), minlength=17)
    assert observed.size == 17 and stats.chisquare(observed).pvalue > 1e-4
    assert np.array_equal(expand(field, bytes(range(32)), (200, 100)), values)  # the same seed, the same share
    big = PrimeField.for_aggregate(2**61)
    wide = expand(big, bytes(32), 50_000)
    assert wide.dtype == np.uint64 and int(wide.max()) < big.modulus
    assert expand(field, bytes(32), 0).shape == (0,)
    other = expand(field, bytes(31) + b"\x01", (200, 100))
    assert np.mean(other == values) < 0.1  # 1/17 by chance
