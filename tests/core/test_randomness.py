import numpy as np
import pytest

from privagg.core.randomness import describe, is_secure, resolve, streams
from privagg.errors import ParameterError


def test_none_is_secure_and_seed_is_reproducible():
    assert is_secure(resolve(None))
    assert not is_secure(resolve(3))
    assert resolve(3).integers(0, 2**62, 4).tolist() == resolve(3).integers(0, 2**62, 4).tolist()
    assert "secure" in describe(None) and "seed 3" in describe(3)


def test_secure_generators_differ():
    assert resolve(None).integers(0, 2**62, 4).tolist() != resolve(None).integers(0, 2**62, 4).tolist()


def draw(g):
    return g.integers(0, 2**62, 8).tolist()


def test_streams_are_keyed_by_role_name_and_reproducible():
    a = streams(7, ["client", "shuffler"])
    b = streams(7, ["shuffler", "client", "server"])  # order and other roles do not matter
    assert draw(a["client"]) == draw(b["client"]) and draw(a["shuffler"]) == draw(b["shuffler"])
    c = streams(7, ["client", "shuffler"])
    assert draw(c["client"]) != draw(c["shuffler"])
    assert draw(streams(8, ["client"])["client"]) != draw(streams(7, ["client"])["client"])
    seq = streams(np.random.SeedSequence(7), ["client"])["client"]
    assert draw(seq) == draw(streams(7, ["client"])["client"])
    assert all(is_secure(g) for g in streams(None, ["a", "b", "c"]).values())
    with pytest.raises(ValueError, match="roles must be distinct"):
        streams(1, ["a", "a"])


def test_rejects_non_rng():
    with pytest.raises(ParameterError, match="rng must be"):
        resolve("seed")
    with pytest.raises(ParameterError, match="rng must be"):
        resolve(True)
    with pytest.raises(ParameterError, match="rng must be"):
        streams("seed", ["client"])
