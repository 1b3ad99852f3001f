"""Randomness policy (DESIGN.md, "Randomness").

* Every function that draws randomness takes one ``rng`` argument in the numpy
  style: a :class:`numpy.random.Generator`, an int seed, a
  :class:`numpy.random.SeedSequence`, or ``None``.
* ``None`` in a client randomizer or shuffler means a cryptographically secure
  generator: ChaCha20 (20 rounds, randomgen's bit generator) keyed with 256
  bits from the operating system (:mod:`secrets`). Real deployments use this.
* An int seed or a SeedSequence means a seeded *simulation* generator (PCG64);
  results made with one say so (see :func:`describe`).
* Independent streams for the parties come from ``SeedSequence.spawn``
  (:func:`spawn`), never from reusing a seed.
"""

from __future__ import annotations

import secrets
from typing import Union

import numpy as np
from randomgen import ChaCha

RNGLike = Union[np.random.Generator, int, np.random.SeedSequence, None]


def secure_rng() -> np.random.Generator:
    """A numpy Generator over ChaCha20 keyed from the OS entropy source."""
    return np.random.Generator(ChaCha(key=secrets.randbits(256), counter=0, rounds=20))


def is_secure(rng: np.random.Generator) -> bool:
    """True if ``rng`` draws from the ChaCha20 bit generator of :func:`secure_rng`."""
    return isinstance(rng.bit_generator, ChaCha)


def resolve(rng: RNGLike) -> np.random.Generator:
    """Turn an ``rng`` argument into a Generator.

    ``None`` gives a secure generator; an int or SeedSequence gives a seeded
    PCG64 simulation generator; a Generator is used as is.
    """
    if rng is None:
        return secure_rng()
    if isinstance(rng, np.random.Generator):
        return rng
    if isinstance(rng, (bool, np.bool_)):
        raise TypeError("rng must be a numpy Generator, an int seed, a SeedSequence or None, not a bool")
    if isinstance(rng, (int, np.integer, np.random.SeedSequence)):
        return np.random.default_rng(rng)
    raise TypeError(f"rng must be a numpy Generator, an int seed, a SeedSequence or None, not {type(rng).__name__}")


def spawn(rng: RNGLike, count: int) -> list[np.random.Generator]:
    """``count`` independent generators for separate parties.

    Secure input (``None`` or a ChaCha generator) gives fresh secure generators;
    a seed gives children of ``SeedSequence(seed).spawn``.
    """
    if rng is None or (isinstance(rng, np.random.Generator) and is_secure(rng)):
        return [secure_rng() for _ in range(count)]
    if isinstance(rng, np.random.Generator):
        return rng.spawn(count)
    if isinstance(rng, (int, np.integer)) and not isinstance(rng, (bool, np.bool_)):
        rng = np.random.SeedSequence(int(rng))
    if isinstance(rng, np.random.SeedSequence):
        return [np.random.default_rng(child) for child in rng.spawn(count)]
    return resolve(rng).spawn(count)  # raises the TypeError for bad input


def describe(rng: RNGLike) -> str:
    """How a result's randomness was made, for its report."""
    if rng is None or (isinstance(rng, np.random.Generator) and is_secure(rng)):
        return "secure (ChaCha20 keyed from OS entropy)"
    if isinstance(rng, (int, np.integer)):
        return f"seeded simulation (PCG64, seed {int(rng)}); not for real users"
    return "caller-supplied generator (simulation); not for real users"
