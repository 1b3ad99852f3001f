import pytest

from privagg.core.randomness import describe, is_secure, resolve, spawn


def test_none_is_secure_and_seed_is_reproducible():
    assert is_secure(resolve(None))
    assert not is_secure(resolve(3))
    assert resolve(3).integers(0, 2**62, 4).tolist() == resolve(3).integers(0, 2**62, 4).tolist()
    assert "secure" in describe(None) and "seed 3" in describe(3)


def test_secure_generators_differ():
    assert resolve(None).integers(0, 2**62, 4).tolist() != resolve(None).integers(0, 2**62, 4).tolist()


def test_spawn_gives_independent_reproducible_streams():
    a, b = spawn(7, 2)
    a2, b2 = spawn(7, 2)
    assert a.integers(0, 2**62, 8).tolist() == a2.integers(0, 2**62, 8).tolist()
    assert b.integers(0, 2**62, 8).tolist() == b2.integers(0, 2**62, 8).tolist()
    x, y = spawn(7, 2)
    assert x.integers(0, 2**62, 8).tolist() != y.integers(0, 2**62, 8).tolist()
    assert all(is_secure(g) for g in spawn(None, 3))


def test_rejects_non_rng():
    with pytest.raises(TypeError, match="rng must be"):
        resolve("seed")
    with pytest.raises(TypeError, match="rng must be"):
        resolve(True)
