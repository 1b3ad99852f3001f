"""brent_root makes the same steps as scipy.optimize.brentq, so the calibrations it serves give the same floats.

The calibrations used scipy's brentq until its 0.3 s import was dropped; a seeded result depends on gamma's last
bit (the debiasing divides by 1 - gamma), so the replacement must return what scipy returns, not merely a root to
the tolerance. Each case records the points both evaluate and compares the lists exactly.
"""

from __future__ import annotations

import math
import platform

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.optimize import brentq

from privagg.core import bisection
from privagg.core.bisection import brent_root, least_meeting
from privagg.privacy import blanket, shuffle


def _evaluations(finder, f, a, b, xtol):
    """The root ``finder`` returns (None if it gives up after its 100 steps) and every point at which it evaluated
    f."""
    points = []

    def traced(x):
        points.append(x)
        return f(x)

    try:
        return finder(traced, a, b, xtol=xtol), points
    except RuntimeError as err:  # both, for not converging in 100 steps
        assert "100" in str(err)
        return None, points


# scipy's brentq.c compiled with fused multiply-adds (clang's default, e.g. macOS arm64 wheels) may round its
# interpolation differently in the last bit; x86-64 wheels have none
same_as_scipy = pytest.mark.skipif(platform.machine().lower() not in ("x86_64", "amd64"),
                                   reason="scipy's C code may fuse multiply-adds here")


def _both(f, a, b, xtol):
    ours = _evaluations(brent_root, f, a, b, xtol)
    scipys = _evaluations(brentq, f, a, b, xtol)
    assert ours == scipys  # the same root (or both give up) and the same points, bit for bit
    return ours[0]


@same_as_scipy
@settings(max_examples=300, deadline=None)
@given(roots=st.lists(st.floats(-5, 5), min_size=1, max_size=4), scale=st.floats(1e-6, 1e6),
       a=st.floats(-20, -6), b=st.floats(6, 20), xtol=st.sampled_from([1e-300, 1e-14, 1e-12, 1e-6, 1e-2]))
def test_polynomials_with_odd_root_counts_in_the_bracket_take_the_same_steps(roots, scale, a, b, xtol):
    roots = roots if len(roots) % 2 else [*roots, 0.5]  # an odd number of roots inside: a sign change across [a, b]

    def f(x):
        return scale * math.prod(x - r for r in roots)

    root = _both(f, a, b, xtol)
    assert root is None or min(abs(root - r) for r in roots) < 1e-2 or abs(f(root)) < 1e-6 * scale


@same_as_scipy
@pytest.mark.parametrize("f, a, b", [
    (lambda x: math.log(x) - 1, 0.5, 10.0),  # smooth
    (lambda x: math.exp(-x) - 1e-9, 0.0, 50.0),  # steep then flat
    (lambda x: math.copysign(1.0, x - 0.3), 0.0, 1.0),  # a step: bisection only
    (lambda x: 0.0 if x >= 2 else -1.0, 0.0, 5.0),  # an exact zero reached on the way
    (lambda x: x - 1.0, 1.0, 3.0),  # a zero at the lower end
    (lambda x: x**3 - 2 * x - 5, 2.0, 3.0),  # Brent's own example
    (lambda x: math.atan(1e6 * (x - 1e-3)), -1.0, 1.0),  # a near-vertical crossing
    (lambda x: 1e-100 * (x - 0.3) ** 3, -1.0, 2.0),  # values so small that an interpolation divides by 0
])
def test_hard_shapes_take_the_same_steps(f, a, b):
    for xtol in (2e-12, 1e-9, 1e-3):
        _both(f, a, b, xtol)


@same_as_scipy
def test_the_blanket_calibrations_give_the_same_gamma_as_with_scipy(monkeypatch):
    """The tight gamma of blanket-hist and blanket-vector, and the shuffle accountant's least eps, at a few
    settings: least_meeting with brent_root and with scipy's brentq return the same float."""
    cases = [lambda: blanket.tight_gamma(1.0, 1e-6, 10_000, 10),
             lambda: blanket.tight_vector_gamma(1.0, 1e-9, 5_000_000, 3, 1),
             lambda: blanket.tight_vector_gamma(0.5, 1e-8, 100_000, 3, 2),
             lambda: shuffle.shuffle_epsilon(2.0, 100_000, 1e-8)]
    ours = [case() for case in cases]
    monkeypatch.setattr(bisection, "brent_root", lambda f, a, b, xtol: brentq(f, a, b, xtol=xtol))
    assert [case() for case in cases] == ours
    assert ours[1] == 5.763747777271931e-05  # the figure docs/benchmarks.md quotes for part 7


def test_least_meeting_returns_a_point_that_meets_the_target():
    for target in np.geomspace(1e-12, 0.5, 9):
        x = least_meeting(lambda v: math.exp(-v), float(target), 0.0, 40.0)
        assert math.exp(-x) <= target < math.exp(-x * (1 - 1e-11))


def test_a_bracket_without_a_sign_change_or_a_nan_is_an_error_as_in_scipy():
    with pytest.raises(ValueError, match="f must change sign on the bracket"):
        brent_root(lambda x: x * x + 1, -1.0, 1.0, xtol=1e-12)
    with pytest.raises(ValueError, match="the function is NaN at"):
        brent_root(lambda x: math.nan if x > 0 else -1.0, -1.0, 1.0, xtol=1e-12)
    for xtol, rtol, field in ((0.0, 1e-15, "xtol"), (1e-12, 1e-17, "rtol")):
        with pytest.raises(ValueError, match=f"{field} must be"):
            brent_root(lambda x: x, -1.0, 1.0, xtol=xtol, rtol=rtol)
        with pytest.raises(ValueError):
            brentq(lambda x: x, -1.0, 1.0, xtol=xtol, rtol=rtol)
