"""Bisection on a monotone yes/no question, Brent's root finder, and the least value meeting a target of a falling
bound, shared by the calibrations and the accountants."""

from __future__ import annotations

import functools
import math
import sys
from collections.abc import Callable


def bisect(turns: Callable[[float], bool], lo: float, hi: float, steps: int) -> tuple[float, float]:
    """The bracket (lo, hi), ``steps`` halvings narrow, where a monotone ``turns`` goes from False (at lo) to True
    (at hi). Callers pick the side they may report: hi for the least value that turns, lo for the largest that
    does not."""
    for _ in range(steps):
        mid = (lo + hi) / 2
        lo, hi = (lo, mid) if turns(mid) else (mid, hi)
    return lo, hi


def brent_root(f: Callable[[float], float], a: float, b: float, xtol: float, rtol: float = 4 * sys.float_info.epsilon,
               max_steps: int = 100) -> float:
    """A zero of ``f`` in [a, b], where f(a) and f(b) differ in sign, to within xtol + rtol |x|: Brent's method
    (Brent 1973, "Algorithms for Minimization without Derivatives", ch. 4). The bracket [cur, blk] always holds a
    sign change; each step tries the secant (two points) or inverse quadratic interpolation (three), and bisects
    instead when that step would not shrink the bracket fast enough. The step rules, tolerance, stopping test and
    refusals are those of ``scipy.optimize.brentq`` (its brentq.c), so that both return the same float where
    scipy's C code is compiled without fused multiply-adds, as on x86-64 (a test compares them bit for bit there):
    a calibration's parameters do not depend on which of the two found them, and, being plain Python floats,
    not on the platform either. A step whose interpolation divides by zero bisects, as the C code's inf or NaN
    step does. Written here because importing scipy.optimize takes about 0.3 s, which every calibrating command
    paid."""
    if not xtol > 0:
        raise ValueError(f"brent_root: xtol must be > 0, got {xtol!r}")
    if not rtol >= 4 * sys.float_info.epsilon:
        raise ValueError(f"brent_root: rtol must be >= 4 * machine epsilon, got {rtol!r}")

    def value(x: float) -> float:
        y = f(x)
        if math.isnan(y):
            raise ValueError(f"brent_root: the function is NaN at {x!r}")
        return y

    prev_x, cur_x = a, b
    prev_f, cur_f = value(a), value(b)
    if prev_f == 0:
        return prev_x
    if cur_f == 0:
        return cur_x
    if math.copysign(1.0, prev_f) == math.copysign(1.0, cur_f):
        raise ValueError(f"brent_root: f must change sign on the bracket, but f({a!r}) = {prev_f!r} and "
                         f"f({b!r}) = {cur_f!r}")
    blk_x = blk_f = step_prev = step_cur = 0.0
    for _ in range(max_steps):
        if prev_f != 0 and cur_f != 0 and math.copysign(1.0, prev_f) != math.copysign(1.0, cur_f):
            blk_x, blk_f = prev_x, prev_f  # the sign changed between prev and cur: prev is the new far end
            step_prev = step_cur = cur_x - prev_x
        if abs(blk_f) < abs(cur_f):  # cur is always the end with the smaller |f|
            prev_x, cur_x, blk_x = cur_x, blk_x, cur_x
            prev_f, cur_f, blk_f = cur_f, blk_f, cur_f
        tolerance = (xtol + rtol * abs(cur_x)) / 2
        half = (blk_x - cur_x) / 2
        if cur_f == 0 or abs(half) < tolerance:
            return cur_x
        if abs(step_prev) > tolerance and abs(cur_f) < abs(prev_f):
            try:
                if prev_x == blk_x:  # the secant through prev and cur
                    trial = -cur_f * (cur_x - prev_x) / (cur_f - prev_f)
                else:  # inverse quadratic interpolation through prev, cur and blk
                    slope_prev = (prev_f - cur_f) / (prev_x - cur_x)
                    slope_blk = (blk_f - cur_f) / (blk_x - cur_x)
                    trial = (-cur_f * (blk_f * slope_blk - prev_f * slope_prev)
                             / (slope_blk * slope_prev * (blk_f - prev_f)))
            except ZeroDivisionError:  # C's inf or NaN: no step is short enough, so it bisects
                trial = math.inf
            if 2 * abs(trial) < min(abs(step_prev), 3 * abs(half) - tolerance):  # short enough: take it
                step_prev, step_cur = step_cur, trial
            else:
                step_prev = step_cur = half
        else:
            step_prev = step_cur = half
        prev_x, prev_f = cur_x, cur_f
        cur_x += step_cur if abs(step_cur) > tolerance else (tolerance if half > 0 else -tolerance)
        cur_f = value(cur_x)
    raise RuntimeError(f"brent_root: no convergence in {max_steps} steps (last point {cur_x!r})")


def least_meeting(bound: Callable[[float], float], target: float, lo: float, hi: float, *, log_scale: bool = False,
                  relative_tolerance: float = 1e-12) -> float:
    """The least x in [lo, hi] with bound(x) <= target, for a bound that falls as x grows and meets the target at
    hi: Brent's method on ln bound(x) - ln target (over ln x with ``log_scale``), to a relative
    ``relative_tolerance``, then nudged up until the bound holds, so the x returned always meets the target.
    About a dozen evaluations of the bound where bisection to the same precision takes forty; ``bound`` is a function
    of x alone, evaluated once at each point."""
    bound = functools.lru_cache(maxsize=None)(bound)  # the check below repeats the point Brent stopped at
    if bound(lo) <= target:
        return lo
    to_x = math.exp if log_scale else (lambda t: t)
    start, end = (math.log(lo), math.log(hi)) if log_scale else (lo, hi)
    # a bound of 0 is floored (its log would be -inf) below the target, so it still reads as meeting it: at 1e-300,
    # or at half a target below that (delta = 1e-320), or at the least positive float
    floor = max(min(1e-300, target / 2), 5e-324)
    x = to_x(brent_root(lambda t: math.log(max(bound(to_x(t)), floor)) - math.log(target), start, end,
                         xtol=relative_tolerance * max(abs(start), abs(end))))
    step = relative_tolerance
    while x < hi and bound(x) > target:  # Brent may stop on either side of the root: take the side that holds
        x, step = min(x * (1 + step), hi), 2 * step
    return x
