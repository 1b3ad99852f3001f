"""Randomness policy (DESIGN.md, "Randomness").

* Every function that draws randomness takes one ``rng`` argument in the numpy
  style: a :class:`numpy.random.Generator`, an int seed, a
  :class:`numpy.random.SeedSequence`, or ``None``.
* ``None`` in a client randomizer or shuffler means a cryptographically secure
  generator: ChaCha20 (20 rounds, randomgen's bit generator) keyed with 256
  bits from the operating system (:mod:`secrets`). Real deployments use this.
* An int seed or a SeedSequence means a seeded *simulation* generator (PCG64);
  results made with one say so (see :func:`describe`).
* Independent streams for the parties come from child SeedSequences, one
  per role name (:func:`streams`), never from reusing a seed.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import ForwardRef, Union

import numpy as np

from ..errors import ParameterError, kind_of

# numpy's classes named, not touched: np.random loads on first use (12 ms of CPU that a command's --help, and
# whatever imports this module without drawing, does not spend); typing.get_type_hints resolves them here
RNGLike = Union[ForwardRef("np.random.Generator", module=__name__), int,
                ForwardRef("np.random.SeedSequence", module=__name__), None]


def secure_rng() -> np.random.Generator:
    """A numpy Generator over ChaCha20 keyed from the OS entropy source (randomgen and secrets load on first use:
    a seeded simulation needs neither)."""
    import secrets

    from randomgen import ChaCha

    return np.random.Generator(ChaCha(key=secrets.randbits(256), counter=0, rounds=20))


def is_secure(rng: np.random.Generator) -> bool:
    """True if ``rng`` draws from the ChaCha20 bit generator of :func:`secure_rng`."""
    from randomgen import ChaCha

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
    if isinstance(rng, (int, np.integer, np.random.SeedSequence)) and not isinstance(rng, (bool, np.bool_)):
        return np.random.default_rng(_seed(rng))
    raise ParameterError("rng", "a numpy Generator, an int seed >= 0, a SeedSequence or None", kind_of(rng))


def _seed(seed):
    """An int seed must be >= 0 (numpy's own error would not name the argument)."""
    if isinstance(seed, (int, np.integer)) and seed < 0:
        raise ParameterError("rng", "a numpy Generator, an int seed >= 0, a SeedSequence or None", seed)
    return seed


def streams(rng: RNGLike, roles: Sequence[str]) -> dict[str, np.random.Generator]:
    """One independent generator per party role, keyed by the role's name.

    Secure input (``None`` or a ChaCha generator) gives a fresh secure
    generator per role. A seed (or SeedSequence) gives the child
    ``SeedSequence(entropy, spawn_key + (H(role),))`` with H a 32-bit BLAKE2b
    digest of the name, so a role's stream does not depend on which other
    roles a topology has or in which order they are listed. A seeded
    Generator first draws the entropy for such a SeedSequence.
    """
    if len(set(roles)) != len(roles):
        raise ValueError(f"roles must be distinct, got {list(roles)}")
    if rng is None or (isinstance(rng, np.random.Generator) and is_secure(rng)):
        return {role: secure_rng() for role in roles}
    if isinstance(rng, np.random.Generator):
        rng = np.random.SeedSequence(rng.integers(0, 2**63, size=4).tolist())
    elif isinstance(rng, (int, np.integer)) and not isinstance(rng, (bool, np.bool_)):
        rng = np.random.SeedSequence(_seed(int(rng)))
    if not isinstance(rng, np.random.SeedSequence):
        resolve(rng)  # raises the TypeError for bad input
    return {role: np.random.default_rng(
        np.random.SeedSequence(rng.entropy, spawn_key=(*rng.spawn_key, _role_key(role)))) for role in roles}


def _role_key(role: str) -> int:
    import hashlib  # (OpenSSL's, loaded by a seeded run's streams only)

    return int.from_bytes(hashlib.blake2b(role.encode(), digest_size=4).digest(), "big")


def describe(rng: RNGLike) -> str:
    """How a result's randomness was made, for its report."""
    if rng is None or (isinstance(rng, np.random.Generator) and is_secure(rng)):
        return "secure (ChaCha20 keyed from OS entropy)"
    if isinstance(rng, (int, np.integer)):
        return f"seeded simulation (PCG64, seed {int(rng)}); not for real users"
    return "caller-supplied generator (simulation); not for real users"
