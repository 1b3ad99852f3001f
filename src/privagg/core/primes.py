"""Prime-field arithmetic for the universal hash family (shuffle FE paper, §3.2).

The family h_{u,v}(x) = ((u x + v) mod q) mod b needs a prime q >= B.
Primality is decided with Miller-Rabin over the first twelve prime bases,
which is deterministic for every n < psi_12 = 3.2e23 (Sorenson and Webster 2015), so
in particular for all 64-bit integers. Python's built-in three-argument
``pow`` does the modular exponentiation and the modular inverse.
"""

from __future__ import annotations

_BASES = (2, 3, 5, 7, 11, 13, 17, 19, 23, 29, 31, 37)
DETERMINISTIC_LIMIT = 318_665_857_834_031_151_167_461  # psi_12: the least strong pseudoprime to all 12 bases


def is_prime(n: int) -> bool:
    """Deterministic primality for 0 <= n < 3.2e23 (covers all 64-bit integers)."""
    n = int(n)
    if n < 0 or n >= DETERMINISTIC_LIMIT:
        raise ValueError(f"n must be in [0, {DETERMINISTIC_LIMIT}), got {n}")
    if n < 2:
        return False
    for p in _BASES:
        if n % p == 0:
            return n == p
    d, r = n - 1, 0
    while d % 2 == 0:
        d //= 2
        r += 1
    for a in _BASES:
        x = pow(a, d, n)
        if x in (1, n - 1):
            continue
        for _ in range(r - 1):
            x = x * x % n
            if x == n - 1:
                break
        else:
            return False
    return True


def next_prime(n: int) -> int:
    """The smallest prime >= n."""
    n = max(int(n), 2)
    if n > 2 and n % 2 == 0:
        n += 1
    while not is_prime(n):
        n += 1 if n == 2 else 2
    return n


def mod_inverse(a: int, q: int) -> int:
    """The inverse of a modulo q; raises ValueError if gcd(a, q) != 1."""
    return pow(int(a), -1, int(q))
