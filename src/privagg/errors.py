"""The one error type for bad input: it names the field and the accepted range."""

from __future__ import annotations

from typing import Any

import numpy as np


class ParameterError(ValueError):
    """A parameter or input value outside its accepted range.

    ``str(err)`` is one line, e.g. ``epsilon must be > 0, got -1``; the CLI
    prints it as is and exits with status 2.
    """

    def __init__(self, field: str, accepted: str, got: Any) -> None:
        self.field, self.accepted, self.got = field, accepted, got
        shown = str(got)
        if not isinstance(got, str) and len(shown) > 200:  # a 400-digit number or a huge list: one readable line
            shown = shown[:100] + f"... ({len(shown)} characters)"
        super().__init__(f"{field} must be {accepted}, got {shown}")


def check_epsilon(epsilon: float, field: str = "epsilon") -> float:
    """epsilon must be a finite number > 0."""
    e = float(epsilon)
    if not (e > 0 and np.isfinite(e)):
        raise ParameterError(field, "a finite number > 0", epsilon)
    return e


def check_delta(delta: float) -> float:
    """delta must be in the open interval (0, 1)."""
    d = float(delta)
    if not 0 < d < 1:
        raise ParameterError("delta", "in (0, 1)", delta)
    return d


def check_integer(field: str, value: Any, lowest: int, highest: int | None = None) -> int:
    """An integer in [lowest, highest] (no upper end when highest is None)."""
    accepted = f"an integer >= {lowest}" if highest is None else f"an integer in [{lowest}, {highest}]"
    if isinstance(value, (bool, np.bool_)):
        raise ParameterError(field, accepted, value)
    if isinstance(value, (int, np.integer)):
        v = int(value)
    else:
        try:
            number = float(value)
        except (TypeError, ValueError, OverflowError):
            raise ParameterError(field, accepted, value) from None
        if not number.is_integer():
            raise ParameterError(field, accepted, value)
        v = int(number)
    if v < lowest or (highest is not None and v > highest):
        raise ParameterError(field, accepted, value)
    return v
