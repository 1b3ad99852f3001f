"""Bisection on a monotone yes/no question, and the least value meeting a target of a falling bound, shared by
the calibrations and the accountants."""

from __future__ import annotations

import functools
import math
from collections.abc import Callable


def bisect(turns: Callable[[float], bool], lo: float, hi: float, steps: int) -> tuple[float, float]:
    """The bracket (lo, hi), ``steps`` halvings narrow, where a monotone ``turns`` goes from False (at lo) to True
    (at hi). Callers pick the side they may report: hi for the least value that turns, lo for the largest that
    does not."""
    for _ in range(steps):
        mid = (lo + hi) / 2
        lo, hi = (lo, mid) if turns(mid) else (mid, hi)
    return lo, hi


def least_meeting(bound: Callable[[float], float], target: float, lo: float, hi: float, *, log_scale: bool = False,
                  relative_tolerance: float = 1e-12) -> float:
    """The least x in [lo, hi] with bound(x) <= target, for a bound that falls as x grows and meets the target at
    hi: Brent's method on ln bound(x) - ln target (over ln x with ``log_scale``), to a relative
    ``relative_tolerance``, then nudged up until the bound holds, so the x returned always meets the target.
    About a dozen evaluations of the bound where bisection to the same precision takes forty; ``bound`` is a function
    of x alone, evaluated once at each point."""
    from scipy.optimize import brentq

    bound = functools.lru_cache(maxsize=None)(bound)  # the check below repeats the point Brent stopped at
    if bound(lo) <= target:
        return lo
    to_x = math.exp if log_scale else (lambda t: t)
    start, end = (math.log(lo), math.log(hi)) if log_scale else (lo, hi)
    x = to_x(brentq(lambda t: math.log(max(bound(to_x(t)), 1e-300)) - math.log(target), start, end,
                    xtol=relative_tolerance * max(abs(start), abs(end))))
    step = relative_tolerance
    while x < hi and bound(x) > target:  # Brent may stop on either side of the root: take the side that holds
        x, step = min(x * (1 + step), hi), 2 * step
    return x
