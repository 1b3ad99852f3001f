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


# What the dense implementation (one holders x t evaluation matrix) gave for these seeds: SHA-256 of the shares as
# little-endian int64. The blocked evaluation must give the same shares for the same rng.
DENSE_DIGESTS = {(3, 5, 1): "3d4ac1ea86fa811f6cfc533de6fe01dd38ef32666ca908982418f28122cbb0ff",
                 (700, 1300, 2): "7733f68fb437a98906bf6447992646ec31aa6ff75dc3bf77e08d7d9e57c00a19",
                 (2053, 2100, 3): "f66b36664d7ea3f07c51f8ee4e1523e02da83e0227f439e032642187a534af50"}
DENSE_SECRETS = {1: bytes(range(32)), 2: b"\xab" * 64, 3: bytes(range(64))}


@pytest.mark.parametrize("t, holders, seed", sorted(DENSE_DIGESTS))
def test_the_blocked_split_gives_todays_shares_for_the_same_rng(t, holders, seed):
    """Holders past shamir.ROWS (several evaluation blocks) and t past BLOCK (several float64 blocks) included; the
    shares at chosen holders are those same rows."""
    import hashlib

    shares = shamir.split(DENSE_SECRETS[seed], t, holders, np.random.default_rng(seed))
    assert hashlib.sha256(shares.astype("<i8").tobytes()).hexdigest() == DENSE_DIGESTS[t, holders, seed]
    at = np.random.default_rng(9).permutation(holders)[:t]
    assert np.array_equal(shamir.split(DENSE_SECRETS[seed], t, holders, np.random.default_rng(seed), at=at),
                          shares[at])


def _weights_by_loop(x: list[int]) -> list[int]:
    """Lagrange's weights at 0 by the pure-Python O(t^2) loop the module used to run."""
    p, out = shamir.PRIME, []
    for i, xi in enumerate(x):
        numerator = denominator = 1
        for j, xj in enumerate(x):
            if j != i:
                numerator, denominator = numerator * xj % p, denominator * (xj - xi) % p
        out.append(numerator * pow(denominator, -1, p) % p)
    return out


@settings(max_examples=30, deadline=None)
@given(st.lists(st.integers(0, shamir.PRIME - 2), min_size=1, max_size=1200, unique=True))
def test_the_vectorised_lagrange_weights_are_exact(holders):
    """Any distinct points (up to the field's largest), more than shamir.ROWS of them included."""
    assert shamir.lagrange_weights(np.array(holders)).tolist() == _weights_by_loop([h + 1 for h in holders])


@settings(max_examples=30, deadline=None)
@given(st.integers(2, 60).flatmap(lambda n: st.tuples(st.just(n), st.integers(1, n))), st.integers(0, 2**32))
def test_shares_at_a_neighbourhood_rebuild_from_any_t_of_them(sizes, seed):
    holders, t = sizes
    rng = np.random.default_rng(seed)
    at = rng.permutation(holders)[:rng.integers(t, holders + 1)]
    secret = rng.bytes(32)
    shares = shamir.split(secret, t, holders, rng, at=at)
    assert shares.shape == (at.size, 16)
    chosen = rng.permutation(at.size)[:t]
    assert shamir.combine(at[chosen], shares[chosen][None], t) == [secret]


def test_many_secrets_with_the_same_holders_rebuild_in_one_call_and_the_bad_ones_are_named():
    rng = np.random.default_rng(5)
    secrets = [rng.bytes(32) for _ in range(40)]
    at = np.array([3, 17, 4, 29, 8, 11])
    shares = np.stack([shamir.split(s, 4, 30, rng, at=at) for s in secrets])
    assert shamir.combine(at, shares, 4) == secrets
    shares[[7, 31], 1] = (shares[[7, 31], 1] + 12345) % shamir.PRIME
    with pytest.raises(ParameterError, match=r"of secrets \[7, 31\] \(0-based, of 40\)"):
        shamir.combine(at, shares, 4)


@settings(max_examples=30, deadline=None)
@given(st.integers(1, 40), st.integers(1, 30), st.integers(0, 2**32))
def test_each_secret_rebuilds_from_its_own_holders_in_one_pass(sets, t, seed):
    """The owners of a neighbour graph, each with other holders: every set's Lagrange weights at once (2-D holders)
    are those of the set alone, and at_zero rebuilds each secret from its own t holders' shares, exactly; a share
    moved off its polynomial moves every limb of that secret, and of no other."""
    rng = np.random.default_rng(seed)
    holders = np.stack([rng.choice(shamir.PRIME - 1, t, replace=False) for _ in range(sets)])
    weights = shamir.lagrange_weights(holders)
    assert weights.shape == holders.shape
    assert all(weights[i].tolist() == _weights_by_loop((holders[i] + 1).tolist()) for i in range(sets))
    secrets = [rng.bytes(32) for _ in range(sets)]
    shares = np.stack([shamir.split(s, t, shamir.PRIME - 1, rng, at=h) for s, h in zip(secrets, holders)])
    limbs = shamir.at_zero(weights, shares)
    assert [row.astype("<u2").tobytes() for row in limbs] == secrets
    if t > 1:
        shares[0, 0] = (shares[0, 0] + 1) % shamir.PRIME  # the secret's limbs move by weights[0, 0] != 0
        moved = shamir.at_zero(weights, shares)
        assert (moved[1:] == limbs[1:]).all() and not (moved[0] == limbs[0]).any()


def test_t_minus_1_shares_at_chosen_holders_are_independent_of_the_secret():
    """Perfect secrecy at chosen holders (x far apart, one past ROWS): t - 1 = 2 shares of the all-zero and of the
    all-ones secret, 2,000 splits each, have the same law (a two-sample chi-square over 16 bins of each limb's low
    bits at the 1e-4 level) and it is uniform."""
    from scipy.stats import chi2_contingency, chisquare

    rng = np.random.default_rng(12)
    at = np.array([2, 700, 999])
    counts = []
    for secret in (bytes(32), b"\xff" * 32):
        shares = np.stack([shamir.split(secret, 3, 1000, rng, at=at)[:2] for _ in range(2_000)])
        counts.append(np.bincount((shares % 16).ravel(), minlength=16))
        assert chisquare(counts[-1]).pvalue > 1e-4, counts[-1]
    assert chi2_contingency(np.array(counts)).pvalue > 1e-4, counts


@pytest.mark.parametrize("at, match", [
    (np.array([0, 1]), "at least the threshold of 3 distinct holders in 0..9, got 2 holders"),
    (np.array([0, 1, 1]), "distinct"),
    (np.array([0, 1, 10]), "in 0..9, got 3 holders in 0..10"),
    (np.array([-1, 1, 2]), "got 3 holders in -1..2"),
    (np.array([0.0, 1.0, 2.0]), "got 3 holders"),
    (np.array([[0, 1, 2]]), "distinct holders"),
])
def test_wrong_holder_points_are_refused_naming_the_field(at, match):
    with pytest.raises(ParameterError, match="at must be") as err:
        shamir.split(bytes(32), 3, 10, np.random.default_rng(0), at=at)
    assert match in str(err.value)
