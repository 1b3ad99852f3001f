"""Shamir's threshold sharing (core/shamir.py): any t shares rebuild the secret, fewer or inconsistent ones are
refused, t - 1 shares are uniform whatever the secret, and the wire encoding round-trips and checks the field."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from privagg.core import shamir
from privagg.errors import ParameterError


@settings(max_examples=40, deadline=None)
@given(st.integers(1, 40).flatmap(lambda n: st.tuples(st.just(n), st.integers(1, n))), st.binary(min_size=32, max_size=32),
       st.integers(0, 2**32))
def test_any_t_shares_rebuild_the_secret(sizes, secret, seed):
    holders, t = sizes
    rng = np.random.default_rng(seed)
    shares = shamir.split(secret, t, holders, rng)
    chosen = rng.permutation(holders)[:t]
    assert shamir.combine(chosen, shares[chosen][None], t) == [secret]


def test_the_exact_float_blocks_hold_past_one_block():
    """t above BLOCK: the evaluation and the interpolation sum over several float64 blocks, still exactly."""
    rng = np.random.default_rng(3)
    secret = bytes(range(64))
    t = shamir.BLOCK + 5
    shares = shamir.split(secret, t, t + 3, rng)
    chosen = np.arange(3, t + 3)
    assert shamir.combine(chosen, shares[chosen][None], t) == [secret]


def test_fewer_shares_a_holder_twice_or_a_wrong_share_are_refused():
    rng = np.random.default_rng(0)
    shares = shamir.split(b"\x01" * 32, 5, 9, rng)
    with pytest.raises(ParameterError, match="at least the threshold of 5"):
        shamir.combine(np.arange(4), shares[:4][None], 5)
    with pytest.raises(ParameterError, match="a holder twice"):
        shamir.combine(np.array([0, 1, 2, 3, 3]), shares[[0, 1, 2, 3, 3]][None], 5)
    wrong = shares[:5].copy()
    wrong[2] = (wrong[2] + 12345) % shamir.PRIME  # every limb off: some interpolate outside 16 bits
    with pytest.raises(ParameterError, match="interpolate to 16-bit limbs"):
        shamir.combine(np.arange(5), wrong[None], 5)
    with pytest.raises(ParameterError, match="elements of GF"):
        shamir.combine(np.arange(5), (wrong + shamir.PRIME)[None], 5)
    with pytest.raises(ParameterError, match="threshold"):
        shamir.split(b"\x01" * 32, 10, 9, rng)
    with pytest.raises(ParameterError, match="even number of bytes"):
        shamir.split(b"\x01" * 3, 2, 3, rng)


def test_t_minus_1_shares_are_uniform_whatever_the_secret():
    """Perfect secrecy: with t = 3, two holders' shares of the all-zero and the all-ones secret follow the same
    (uniform) law; a chi-square over 16 bins of each limb's low bits, 2,000 splits each, at the 1e-4 level."""
    from scipy.stats import chisquare

    rng = np.random.default_rng(11)
    for secret in (bytes(32), b"\xff" * 32):
        shares = np.stack([shamir.split(secret, 3, 5, rng)[[1, 4]] for _ in range(2_000)])
        counts = np.bincount((shares % 16).ravel(), minlength=16)
        assert chisquare(counts).pvalue > 1e-4, counts


def test_the_wire_encoding_round_trips_and_checks_the_field():
    values = np.array([0, 1, shamir.PRIME - 1, 65_535])
    assert shamir.unpack(shamir.pack(values), 4, "x").tolist() == values.tolist()
    with pytest.raises(ParameterError, match="x must be 4 shares of 3 bytes"):
        shamir.unpack(shamir.pack(values)[:-1], 4, "x")
    with pytest.raises(ParameterError, match="elements of GF"):
        shamir.unpack(b"\xff\xff\xff", 1, "x")
