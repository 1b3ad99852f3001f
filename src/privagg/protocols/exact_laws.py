"""What one user's exact output law costs to build, known before building it (the exact auditor, privagg.audit).

Every registry entry with a ``message_law`` has a ``law_size(parameters, item)`` beside it, in its own module:
a closed-form bound on the outcomes the law enumerates (``states``), the length of each outcome's histogram
(``types``: its message types) and the most messages of one type a user may send (``largest_count``), and the
option to change when it is too large. ``message_law`` checks its own size first (:func:`check_law`), and the
auditor checks the sum over all the items it needs, and its 64-bit keys, before building any.

Measured cost: building a law and encoding it take about (types + 16) units a state enumerated -- a tuple of
``types`` counts, a probability, a dict entry, then the key -- at 0.7 to 1.8 us a unit on 2 AMD EPYC cores
(laplace's noise over 3 counts, 274,625 states x 3 types: 3.6 s; oue at B = 16, 65,536 states x 16 types:
2.6 s; dpdg 18,225 x 2: 0.5 s; fe0 76,153 x 6: 2.2 s; grr B = 400, 400 x 400: 0.04 s). EXACT_LAW_MAX_WORK
units are then 20 to 55 s; the audit's convolutions that follow have their own budget (audit.EXACT_MAX_WORK).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable

from ..errors import ParameterError

EXACT_LAW_MAX_WORK = 3 * 10**7
UNITS_PER_STATE = 16  # a state's fixed cost, in units of one histogram entry
KEY_BITS = 63  # the auditor's keys: a histogram as one int64, sum_i h_i radix^i (audit._encode)


def big(x: float) -> str:
    """A count for a message: 3 significant digits, or a power of ten past a float's range."""
    return f"{x:.3g}" if math.isfinite(x) else "more than 1e308"


def power(base: float, exponent: float) -> float:
    """base^exponent as a float, inf past a float's range (never an OverflowError, never a huge int)."""
    if base <= 1 or exponent <= 0:
        return float(base) ** exponent if base > 0 else 0.0
    log = exponent * math.log(base)
    return math.inf if log > 709 else math.exp(log)


def comb(n: int, k: int) -> float:
    """C(n, k) as a float (inf past a float's range): exact for small arguments, else from lgamma."""
    if k < 0 or k > n:
        return 0.0
    k = min(k, n - k)
    if k <= 64 and n <= 10**6:
        return float(math.comb(n, k))
    log = math.lgamma(n + 1) - math.lgamma(k + 1) - math.lgamma(n - k + 1)
    return math.inf if log > 709 else math.exp(log)


@dataclass(frozen=True)
class LawSize:
    """A-priori size of one user's exact law for one item, and the option that shrinks it.

    The refusal names ``field`` (its value ``got``): ``direction`` says which way to move it, ``others`` which
    other options help, ``detail`` why the law is large; ``limit(budget)``, where given, is the largest value
    of ``field`` whose laws -- all those an audit of the instance builds -- fit ``budget`` units, the
    message's accepted range.
    """

    protocol: str
    states: float
    types: int
    largest_count: int
    field: str
    got: Any
    direction: str = "smaller"
    others: str = ""
    detail: str = ""
    limit: Callable[[float], Any] | None = None

    @property
    def work(self) -> float:
        return self.states * (self.types + UNITS_PER_STATE)

    def refuse(self, reason: str, budget: float | None = None) -> ParameterError:
        limit = self.limit(budget) if self.limit is not None and budget is not None else None
        accepted = (self.direction if limit is None else f"at most {limit}") + (f", or {self.others}"
                                                                                if self.others else "")
        detail = f"{self.detail}; " if self.detail else ""
        return ParameterError(self.field, f"{accepted} for {self.protocol}'s exact audit ({detail}{reason}; or "
                                          "--method statistical)", self.got)


def check_law(size: LawSize, laws: int = 1) -> LawSize:
    """Refuse ``laws`` laws of ``size`` whose building passes EXACT_LAW_MAX_WORK, before building any."""
    work = laws * size.work
    if work > EXACT_LAW_MAX_WORK:
        many = f"{laws} such laws, " if laws > 1 else ""
        raise size.refuse(f"one user's law has up to {big(size.states)} outcomes over {size.types} message types: "
                          f"{many}{big(work)} units of work, above {EXACT_LAW_MAX_WORK:.0e}, about a minute",
                          EXACT_LAW_MAX_WORK)
    return size


def check_keys(size: LawSize, users: int) -> None:
    """Refuse laws whose histograms cannot be the auditor's 64-bit keys: ``types`` digits in base
    users x largest_count + 1 (the most a histogram of the whole output may hold)."""
    radix = users * max(size.largest_count, 1) + 1
    if size.types * math.log2(radix) >= KEY_BITS:
        raise size.refuse(f"{size.types} message types with counts up to {radix - 1} overflow the exact auditor's "
                          "64-bit keys")


def largest_fitting(cost: Callable[[int], float], budget: float, lowest: int, highest: int) -> int | None:
    """The largest x in [lowest, highest] with cost(x) <= budget (cost increasing in x), None when none is."""
    if cost(lowest) > budget:
        return None
    lo, hi = lowest, highest
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if cost(mid) <= budget:
            lo = mid
        else:
            hi = mid - 1
    return lo
