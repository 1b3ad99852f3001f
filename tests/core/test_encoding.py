import numpy as np
import pyarrow as pa
import pytest

from privagg.core.encoding import ItemEncoder
from privagg.errors import ParameterError


def test_integers_in_range_map_to_themselves():
    enc = ItemEncoder(10)
    assert enc.encode([0, 3, 9]).tolist() == [0, 3, 9]
    assert enc.encode(pa.chunked_array([[1, 2]])).tolist() == [1, 2]


@pytest.mark.parametrize("bad", [[10], [-1], [0, 5, 12]])
def test_out_of_domain_integers_are_errors(bad):
    with pytest.raises(ParameterError, match=r"item must be integers in \[0, 10\)"):
        ItemEncoder(10).encode(bad)


def test_strings_hash_with_the_key():
    enc = ItemEncoder(2**20, key=b"k1")
    codes = enc.encode(["apple", "pear", "apple", "fig"])
    assert codes[0] == codes[2] and len(set(codes.tolist())) == 3
    assert np.array_equal(ItemEncoder(2**20, key=b"k1").encode(["apple", "pear"]), codes[:2])
    assert not np.array_equal(ItemEncoder(2**20, key=b"k2").encode(["apple", "pear"]), codes[:2])


def test_only_public_items_get_labels():
    enc = ItemEncoder(2**20, key=b"k1")
    private = enc.encode(["apple", "SECRET-alice"])
    public = enc.encode(["apple", "kiwi"], public=True)
    assert enc.label(public[0]) == "apple" and enc.label(public[1]) == "kiwi"
    assert public[0] == private[0]
    assert enc.label(private[1]) == f"#{private[1]}"  # the users' own items are never printed
    ints = ItemEncoder(100)
    ints.encode([5])
    assert ints.label(5) == 5


def test_one_kind_of_item_per_encoder():
    enc = ItemEncoder(100)
    enc.encode([1, 2])
    with pytest.raises(ParameterError, match="candidate must be integer items, like the input"):
        enc.encode(["a"], field="candidate")


def test_collisions_are_reported_together():
    enc = ItemEncoder(2, key=b"k")
    codes = enc.encode([f"w{i}" for i in range(20)], public=True)
    code = int(codes[0])
    assert enc.is_collision(code)
    assert "w0" in enc.label(code).split("|")


def test_bytes_and_dictionary_columns():
    enc = ItemEncoder(2**20, key=b"k")
    code = enc.encode([b"\xff\x00"], public=True)[0]
    assert enc.label(code) == "0xff00"
    column = pa.chunked_array([pa.array(["a", "b", "a"]).dictionary_encode()])
    assert ItemEncoder(2**20, key=b"k").encode(column).tolist() == ItemEncoder(2**20, key=b"k").encode(
        ["a", "b", "a"]).tolist()


@pytest.mark.parametrize("bad,match", [([1.5, 2.0], "integers, strings or bytes"),
                                       (["a", None], "no missing values")])
def test_bad_items(bad, match):
    with pytest.raises(ParameterError, match=match):
        ItemEncoder(100).encode(bad)


def test_bad_domain():
    with pytest.raises(ParameterError, match="domain must be an integer >= 2"):
        ItemEncoder(1)


@pytest.mark.parametrize("domain", [2**63 + 1, 2**64 - 1, 2**64, 10**30])
def test_a_domain_past_int64_codes_is_refused_naming_domain(domain):
    """compare --domain 18446744073709551615 hashed the bundled words into it: an OverflowError (int64 codes)."""
    with pytest.raises(ParameterError) as err:
        ItemEncoder(domain)
    assert err.value.field == "domain" and "at most 2^63" in str(err.value)


def test_the_largest_int64_domain_still_encodes():
    encoder = ItemEncoder(2**63, key=b"k")
    codes = encoder.encode(["a", "b", "a"])
    assert codes.dtype == np.int64 and codes[0] == codes[2] and 0 <= codes.min() and codes.max() < 2**63
    assert ItemEncoder(2**63, kind="integer").encode(np.array([0, 2**63 - 1], dtype=np.int64)).tolist() == [0, 2**63 - 1]


def test_compare_at_a_domain_past_int64_is_one_line():
    from typer.testing import CliRunner

    from privagg.cli import app

    result = CliRunner().invoke(app, ["compare", "--protocols", "fe1,grr,oue", "--epsilon", "1", "--delta", "1e-8",
                                      "--domain", str(2**64 - 1)])
    assert result.exit_code == 2 and result.stderr.startswith("error: domain must be at most 2^63"), result.output
