"""Bisection on a monotone yes/no question, shared by the calibrations and the accountants."""

from __future__ import annotations

from collections.abc import Callable


def bisect(turns: Callable[[float], bool], lo: float, hi: float, steps: int) -> tuple[float, float]:
    """The bracket (lo, hi), ``steps`` halvings narrow, where a monotone ``turns`` goes from False (at lo) to True
    (at hi). Callers pick the side they may report: hi for the least value that turns, lo for the largest that
    does not."""
    for _ in range(steps):
        mid = (lo + hi) / 2
        lo, hi = (lo, mid) if turns(mid) else (mid, hi)
    return lo, hi
