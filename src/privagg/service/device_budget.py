"""A device's own privacy budget (issue 49, item 3): the client SDK's local ledger, and the calendar periods the
services' ledgers share (:mod:`privagg.service.ledger`).

:class:`LocalBudget` keeps, in a small JSON file on the device, the guarantee each task the device took part in
claimed, and refuses a task that would bring the period's total past the device's budget
(:class:`DeviceBudgetExceeded`): the shuffle SDK before it randomizes a report
(:class:`privagg.service.shuffle.client.Client`'s ``budget``), the round SDK before it enrolls
(:class:`privagg.service.round_client.RosterClient`'s ``budget``). The device composes basically (the epsilons and
deltas add: a bound for any tasks, with nothing beyond the standard library to load). A task is charged once: its
reports again (a retry, another value) spend nothing more. Nothing beyond what the SDK loads already.
"""

from __future__ import annotations

import datetime as dt
import fcntl
import json
import os
import time
from pathlib import Path

from ..errors import ParameterError, check_epsilon, parse_number

PERIODS = ("day", "week", "month")


def check_period(period) -> str:
    if period not in PERIODS:
        raise ParameterError("period", f"one of {', '.join(PERIODS)} (calendar, UTC)", period)
    return period


def check_budget(epsilon, delta, period) -> tuple[float, float, str]:
    """A budget's fields: epsilon > 0 finite (at most 10^6), delta in [0, 1), a period of :data:`PERIODS`."""
    epsilon = check_epsilon(epsilon)
    if epsilon > 1e6:
        raise ParameterError("epsilon", "a finite number in (0, 1e6]", epsilon)
    d = delta if isinstance(delta, float) else parse_number("delta", delta)
    if not 0 <= d < 1:
        raise ParameterError("delta", "in [0, 1)", delta)
    return epsilon, float(d), check_period(period)


def period_start(period: str, now: float) -> float:
    """The start of the calendar ``period`` (UTC: a day, an ISO week from Monday, a month) holding ``now``."""
    day = dt.datetime.fromtimestamp(now, dt.timezone.utc).replace(hour=0, minute=0, second=0, microsecond=0)
    if period == "week":
        day -= dt.timedelta(days=day.weekday())
    elif period == "month":
        day = day.replace(day=1)
    return day.timestamp()


def period_label(period: str, now: float) -> str:
    """2026-12-06, 2026-W49 or 2026-12."""
    start = dt.datetime.fromtimestamp(period_start(period, now), dt.timezone.utc)
    return {"day": start.strftime("%Y-%m-%d"), "month": start.strftime("%Y-%m"),
            "week": "%d-W%02d" % start.isocalendar()[:2]}[period]


def claimed_guarantee(task) -> tuple[float, float]:
    """The (epsilon, delta) a task claims: its parameters' privacy event's, and its first stage's added (a staged
    task, basic composition)."""
    from ..privacy.events import guarantee

    epsilon, delta = guarantee(task.parameters.privacy.event)
    stage = getattr(task, "discovery", None)
    if stage is not None:
        more = claimed_guarantee(stage)
        epsilon, delta = epsilon + more[0], delta + more[1]
    return epsilon, delta


class DeviceBudgetExceeded(ParameterError):
    """A task the device's own budget cannot pay for: nothing was charged and nothing sent."""

    def __init__(self, task_id: str, why: str) -> None:
        super().__init__("task", "a task the device's budget pays for", task_id)
        self.args = (f"the device's privacy budget refuses task {task_id}: {why}",)


class LocalBudget:
    """The device's ledger at ``path`` (a JSON file, made on the first charge, mode 0600): at most ``epsilon`` and
    ``delta`` per calendar ``period`` (UTC) over every task the device takes part in."""

    def __init__(self, path, epsilon: float, delta: float, period: str = "day") -> None:
        self.epsilon, self.delta, self.period = check_budget(epsilon, delta, period)
        self.path = Path(path)
        if not self.path.parent.is_dir():
            raise ParameterError("path", "a file in an existing folder", str(self.path))

    def _read(self) -> list[dict]:
        try:
            text = self.path.read_text(encoding="utf-8")
        except FileNotFoundError:
            return []
        except OSError as err:
            raise ParameterError("path", "a readable ledger file", f"{self.path} ({err.strerror})") from None
        try:
            charges = json.loads(text)["charges"] if text else []
            return [{"task_id": str(c["task_id"]), "time": float(c["time"]), "epsilon": float(c["epsilon"]),
                     "delta": float(c["delta"])} for c in charges]
        except (ValueError, KeyError, TypeError):  # refused, never reset: a reset would spend the budget again
            raise ParameterError("path", "a ledger file written by LocalBudget (JSON: {\"charges\": [...]})",
                                 f"{self.path}, which is not one") from None

    def spent(self, now: float | None = None) -> tuple[float, float, int]:
        """(epsilon, delta, tasks) the current period spent."""
        since = period_start(self.period, time.time() if now is None else now)
        current = [c for c in self._read() if c["time"] >= since]
        return sum(c["epsilon"] for c in current), sum(c["delta"] for c in current), len(current)

    def charge(self, task_id: str, epsilon: float, delta: float, now: float | None = None) -> None:
        """Charge a task's claimed (epsilon, delta), or raise :class:`DeviceBudgetExceeded` (nothing charged); a task
        charged before in this period is not charged again. One process at a time (an exclusive lock on
        ``PATH.lock``); the file replaced whole (written beside it, then renamed), so a crash leaves the old or the
        new ledger."""
        now = time.time() if now is None else now
        since = period_start(self.period, now)
        lock = os.open(f"{self.path}.lock", os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(lock, fcntl.LOCK_EX)
            current = [c for c in self._read() if c["time"] >= since]  # earlier periods' charges are dropped
            if any(c["task_id"] == task_id for c in current):
                return
            eps, dlt = sum(c["epsilon"] for c in current), sum(c["delta"] for c in current)
            if eps + epsilon > self.epsilon * (1 + 1e-12) or dlt + delta > self.delta * (1 + 1e-12):
                raise DeviceBudgetExceeded(task_id, (
                    f"it claims epsilon {epsilon:g}, delta {delta:g}, and the device's {self.period} budget (epsilon "
                    f"{self.epsilon:g}, delta {self.delta:g}) has epsilon {max(self.epsilon - eps, 0):.4g}, delta "
                    f"{max(self.delta - dlt, 0):.3g} left in {period_label(self.period, now)} ({len(current)} tasks "
                    "so far, basic composition); nothing charged, nothing sent"))
            current.append({"task_id": task_id, "time": now, "epsilon": epsilon, "delta": delta})
            new = Path(f"{self.path}.new")
            fd = os.open(new, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            with os.fdopen(fd, "w", encoding="utf-8") as out:
                json.dump({"charges": current}, out)
                out.flush()
                os.fsync(out.fileno())
            os.replace(new, self.path)
        finally:
            os.close(lock)

    def charge_task(self, task) -> None:
        """Charge ``task``'s claimed guarantee (:func:`claimed_guarantee`)."""
        self.charge(task.task_id, *claimed_guarantee(task))


def charge_device(budget: LocalBudget | None, task) -> None:
    """The SDKs' hook: charge ``task`` to the device's ``budget``, if it has one."""
    if budget is not None:
        budget.charge_task(task)
