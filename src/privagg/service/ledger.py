"""The privacy budget across tasks (issue 49, item 3): a ledger per population and period.

A **population** is the set of devices a task's tokens are issued to, named by the operator (``privagg task create
--population NAME``; :data:`DEFAULT_POPULATION` when none is named: one per service). A population may have a
**budget**: an (epsilon, delta) per calendar **period** in UTC (a day, an ISO week from Monday, or a month;
:data:`~privagg.service.device_budget.PERIODS`). Each task's guarantee is charged to its population when the task
is created, in the transaction that stores the task, and composed with what the period already spent
(:func:`compose`); a task that would exceed the budget is refused (:class:`BudgetExceeded`: what is left and what
the task costs) and nothing is stored. A charge stays once made: a task closed or failed may have released.
Without a budget the tasks are charged and never refused.

What is composed (docs/privacy.md, "A budget across tasks"): every task of a population is over the same users, a
user in every one, each task (epsilon_i, delta_i)-DP for the change of one user's data; the period's tasks together
are then DP for that change at the composition of their guarantees:

* **PLD** (dp-accounting's privacy loss distributions, pessimistic) for the tasks whose mechanism dp-accounting
  models exactly: grr (k-ary randomized response) and olh (randomized response over its g hashed bins, given the
  public hash), composed at the budget's delta minus the deltas of the others;
* **basic composition** (the epsilons and the deltas add) for every other task (the shuffle, blanket and
  sampling + secret-sharing protocols, whose (epsilon, delta) come from their own accountants), and for all of
  them together where it is no larger.

The deltas always add (a period may hold at most the budget's delta of them); the epsilon spent is the least of
the two statements at the budget's delta, and the ledger says which (``method``).

SQLite serializes the ledger's writers (every write transaction begins ``BEGIN IMMEDIATE``); on PostgreSQL a
charge locks its population's budget row (``SELECT ... FOR UPDATE``), so two tasks racing for the last of a budget
are charged one after the other and the second sees the first.
"""

from __future__ import annotations

import importlib.util
import json
import re
import time
from dataclasses import dataclass

import sqlalchemy as sa

from ..errors import ParameterError, check_integer
from .device_budget import check_budget, period_label, period_start
from .storage import insert_if_absent, metadata

DEFAULT_POPULATION = "default"
DEFAULT_PERIOD = "day"  # a population without a budget: what ``privagg budget show`` sums
ROLES = ("analyzer", "sharing", "s1")  # the services that create the tasks whose tokens they (or their collector) issue
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")
PLD_INTERVAL = 1e-4  # dp-accounting's value discretization interval (its default)

budgets = {role: sa.Table(
    "budgets", metadata[role],
    sa.Column("population", sa.String(64), primary_key=True),
    sa.Column("epsilon", sa.Float, nullable=False),
    sa.Column("delta", sa.Float, nullable=False),
    sa.Column("period", sa.String(8), nullable=False),  # day, week, month (UTC calendar)
) for role in ROLES}
charges = {role: sa.Table(
    "budget_charges", metadata[role],
    sa.Column("task_id", sa.String(32), primary_key=True),
    sa.Column("population", sa.String(64), nullable=False),
    sa.Column("created", sa.Float, nullable=False),  # seconds since the epoch
    sa.Column("protocol", sa.String(32), nullable=False),
    sa.Column("epsilon", sa.Float, nullable=False),
    sa.Column("delta", sa.Float, nullable=False),
    sa.Column("pld", sa.Text),  # the dp-accounting mechanisms (JSON list) where modelled; NULL: basic composition
    sa.Index("charges_by_population", "population", "created"),
) for role in ROLES}
# the same two tables in each of those roles' databases (each role's metadata declares them): one role's describe the
# statements of every role's
BUDGETS, CHARGES = budgets["analyzer"], charges["analyzer"]


def check_population(name) -> str:
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        raise ParameterError("population", "a name of 1 to 64 letters, digits, '.', '_' or '-' (starting with a "
                             "letter or digit)", name)
    return name


@dataclass(frozen=True)
class Cost:
    """One task's guarantee as the ledger charges it: (epsilon, delta), and the mechanisms dp-accounting models
    exactly (``pld``: JSON-ready dicts), or None where it does not (basic composition)."""

    epsilon: float
    delta: float
    pld: tuple[dict, ...] | None

    def plus(self, other: "Cost") -> "Cost":
        """Two stages of one task (a discovery, then its estimate): composed as two tasks would be."""
        pld = None if self.pld is None or other.pld is None else self.pld + other.pld
        return Cost(self.epsilon + other.epsilon, self.delta + other.delta, pld)


def cost_of(parameters, delta: float | None = None) -> Cost:
    """A task's cost from its frozen parameters: their privacy event's (epsilon, delta) (``delta``: the delta its
    release states, where that is above the target: a round task's at its fewest survivors), with the randomized
    response dp-accounting models where the parameters' report is one (``randomized_response``: grr, olh; pure
    eps-DP, so the PLD states no more than the event's (epsilon, 0))."""
    from ..privacy.events import guarantee

    epsilon, target = guarantee(parameters.privacy.event)
    delta = target if delta is None else max(target, delta)
    response = getattr(parameters, "randomized_response", None)
    pld = None
    if response is not None and delta == 0:
        pld = ({"mechanism": "randomized_response", "noise_parameter": response[0], "num_buckets": response[1]},)
    return Cost(epsilon, delta, pld)


def task_cost(parameters, stage=None) -> Cost:
    """An analyzer task's charge: its parameters', after its first stage's (``stage``: that stage's parameters, a
    staged task's: ``privagg task create --discover-phi``) where it has one."""
    cost = cost_of(parameters)
    return cost if stage is None else cost_of(stage).plus(cost)


def _pld(components: list[dict]):
    """The composition of the mechanisms' privacy loss distributions (dp-accounting, pessimistic estimates): each
    distinct mechanism's PLD composed with itself as many times as it occurs (one FFT power, not one composition a
    task: a period of hundreds of like tasks composes in a second), then the distinct ones together."""
    from collections import Counter

    from dp_accounting.pld import privacy_loss_distribution as pld

    total = None
    for key, count in Counter(json.dumps(c, sort_keys=True) for c in components).items():
        c = json.loads(key)
        if c["mechanism"] != "randomized_response":
            raise ParameterError("pld", "a mechanism the ledger knows (randomized_response)", c["mechanism"])
        one = pld.from_randomized_response(c["noise_parameter"], c["num_buckets"],
                                           value_discretization_interval=PLD_INTERVAL).self_compose(count)
        total = one if total is None else total.compose(one)
    return total


@dataclass(frozen=True)
class Spent:
    """What a period's tasks spent together, (``epsilon``, ``delta``)-DP: basic composition's sums, or a PLD's epsilon
    at the budget's whole delta (without a budget, at the deltas' sum), which it then spends (a reviewer's finding:
    ten pure tasks were shown as (9.58, 0) spent, the 9.58 holding only at the budget's 1e-6); ``method`` how the
    epsilon was composed, ``tasks`` how many."""

    epsilon: float
    delta: float
    method: str
    tasks: int


def compose(costs: list[Cost], delta_budget: float | None = None, epsilon_budget: float | None = None) -> Spent:
    """The period's tasks composed (the module's docstring): basic composition (the epsilons' and the deltas' sums)
    where it fits the budget (``epsilon_budget``, ``delta_budget``), else, where its epsilon is less, the PLD of the
    modelled tasks at ``delta_budget`` minus the other tasks' deltas, plus the other tasks' epsilons and deltas (the
    two groups composed basically): it spends the budget's whole delta. Without a budget the PLD is taken at the
    deltas' sum. One task: its own epsilon (a PLD never states more than the mechanism's epsilon: the least of the
    two)."""
    basic_eps, deltas = sum(c.epsilon for c in costs), sum(c.delta for c in costs)
    modelled = [c for c in costs if c.pld is not None]
    fits = epsilon_budget is not None and delta_budget is not None and basic_eps <= epsilon_budget * (1 + 1e-12) \
        and deltas <= delta_budget * (1 + 1e-12)
    if not modelled or fits:
        return Spent(basic_eps, deltas, "basic", len(costs))
    others = [c for c in costs if c.pld is None]
    room = (deltas if delta_budget is None else delta_budget) - sum(c.delta for c in others)
    if room < 0:
        return Spent(basic_eps, deltas, "basic", len(costs))
    if importlib.util.find_spec("dp_accounting") is None:  # the service extra's: basic, which holds too, and says why
        return Spent(basic_eps, deltas, "basic (dp-accounting is not installed)", len(costs))
    pld_eps = _pld([m for c in modelled for m in c.pld]).get_epsilon_for_delta(room) + sum(c.epsilon for c in others)
    if pld_eps < basic_eps:  # (pld_eps, room)-DP and the others' (eps, delta): the delta the epsilon holds at
        how = "pld" if not others else f"pld ({len(modelled)} tasks) + basic ({len(others)})"
        return Spent(pld_eps, room + sum(c.delta for c in others), how, len(costs))
    return Spent(basic_eps, deltas, "basic", len(costs))


class BudgetExceeded(ParameterError):
    """A task its population's budget cannot pay for: nothing was charged or stored. One line: ``budget of
    population P exceeded: WHY; nothing charged``."""

    def __init__(self, population: str, why: str) -> None:
        super().__init__("population", "a population whose budget pays for the task", population)
        self.args = (f"budget of population {population} exceeded: {why}; the task is refused, nothing charged",)


@dataclass(frozen=True)
class Ledger:
    """A population's budget (None: none set) and the period's spend."""

    population: str
    epsilon: float | None
    delta: float | None
    period: str
    label: str  # the period holding now: 2026-12-06, 2026-W49, 2026-12
    spent: Spent

    @property
    def remaining(self) -> tuple[float, float] | None:
        if self.epsilon is None:
            return None
        return self.epsilon - self.spent.epsilon, self.delta - self.spent.delta

    def to_dict(self) -> dict:
        left = self.remaining
        return {"population": self.population, "period": self.period, "period_label": self.label,
                "budget": None if self.epsilon is None else {"epsilon": self.epsilon, "delta": self.delta},
                "spent": {"epsilon": self.spent.epsilon, "delta": self.spent.delta, "tasks": self.spent.tasks,
                          "composition": self.spent.method},
                "remaining": None if left is None else {"epsilon": left[0], "delta": left[1]}}


def _costs(connection: sa.Connection, population: str, since: float) -> list[Cost]:
    table = CHARGES
    rows = connection.execute(sa.select(table.c.epsilon, table.c.delta, table.c.pld).where(
        table.c.population == population, table.c.created >= since).order_by(table.c.created))
    return [Cost(r.epsilon, r.delta, None if r.pld is None else tuple(json.loads(r.pld))) for r in rows]


def _budget_row(connection: sa.Connection, population: str, lock: bool = False):
    query = sa.select(BUDGETS).where(BUDGETS.c.population == population)
    return connection.execute(query.with_for_update() if lock else query).first()


def _ledger(connection, population: str, now: float, extra: Cost | None = None, lock: bool = False) -> Ledger:
    row = _budget_row(connection, population, lock)
    period = DEFAULT_PERIOD if row is None else row.period
    costs = _costs(connection, population, period_start(period, now)) + ([] if extra is None else [extra])
    epsilon, delta = (None, None) if row is None else (row.epsilon, row.delta)
    return Ledger(population, epsilon, delta, period, period_label(period, now), compose(costs, delta, epsilon))


def charge(connection: sa.Connection, population: str, task_id: str, protocol: str, cost: Cost,
           now: float | None = None) -> Ledger:
    """Charge ``cost`` (task ``task_id``'s) to ``population`` in the caller's transaction (the one storing the
    task), or raise :class:`BudgetExceeded` naming what is left and what the task costs; the ledger with it."""
    now = time.time() if now is None else now
    ledger = _ledger(connection, check_population(population), now, cost, lock=True)
    if ledger.epsilon is None:
        _check_known(connection, population)
    if ledger.epsilon is not None:
        left = _ledger(connection, population, now)
        eps_left, delta_left = ledger.epsilon - left.spent.epsilon, ledger.delta - left.spent.delta
        if ledger.spent.epsilon > ledger.epsilon * (1 + 1e-12) or ledger.spent.delta > ledger.delta * (1 + 1e-12):
            alone = cost.epsilon > ledger.epsilon or cost.delta > ledger.delta
            alone = " (more than the whole budget)" if alone else ""
            raise BudgetExceeded(population, (
                f"the task costs epsilon {cost.epsilon:g}, delta {cost.delta:g}{alone}, and the {ledger.period} budget "
                f"(epsilon {ledger.epsilon:g}, delta {ledger.delta:g}) has epsilon {max(eps_left, 0):.4g}, delta "
                f"{max(delta_left, 0):.3g} left in {ledger.label} ({_tasks(left.spent.tasks)} so far, "
                f"{left.spent.method} composition; with the task: epsilon {ledger.spent.epsilon:.4g}, delta "
                f"{ledger.spent.delta:.3g})"))
    connection.execute(sa.insert(CHARGES).values(
        task_id=task_id, population=population, created=now, protocol=protocol, epsilon=cost.epsilon,
        delta=cost.delta, pld=None if cost.pld is None else json.dumps(list(cost.pld))))
    return ledger


def _check_known(connection: sa.Connection, population: str) -> None:
    """A population with no budget is charged only if it is the default one, has tasks already, or no population has
    a budget; else it is most likely a misspelt one (a reviewer's finding: ``--population phone`` beside a budget
    for ``phones`` made a population of its own, and its tasks escaped the budget): a ParameterError naming it."""
    if population == DEFAULT_POPULATION or connection.execute(
            sa.select(CHARGES.c.task_id).where(CHARGES.c.population == population).limit(1)).first() is not None:
        return
    budgeted = connection.execute(sa.select(BUDGETS.c.population).order_by(BUDGETS.c.population)).scalars().all()
    if budgeted:
        raise ParameterError("population", f"a population with a budget ({', '.join(budgeted[:5])}"
                             f"{', ...' if len(budgeted) > 5 else ''}), one with tasks already, or the default one; "
                             f"for a new population, set its budget first (privagg budget set --population "
                             f"{population} ...)", population)


def set_budget(engine: sa.Engine, population: str, epsilon, delta, period: str) -> Ledger:
    """Set (or replace) ``population``'s budget; the ledger under it (its period may have spent more already:
    no task is then charged until the next period)."""
    epsilon, delta, period = check_budget(epsilon, delta, period)
    population = check_population(population)
    values = dict(epsilon=epsilon, delta=delta, period=period)
    with engine.begin() as c:  # a row for it if none (another process's at once included), then these values
        c.execute(insert_if_absent(c, BUDGETS).values(population=population, **values))
        c.execute(sa.update(BUDGETS).where(BUDGETS.c.population == population).values(**values))
        return _ledger(c, population, time.time())


def ledgers(connection: sa.Connection, now: float | None = None) -> list[Ledger]:
    """Every population's ledger: those with a budget, and those with charges (in a transaction of the caller's)."""
    now = time.time() if now is None else now
    names = {r for (r,) in connection.execute(sa.select(BUDGETS.c.population))}
    names |= {r for (r,) in connection.execute(sa.select(CHARGES.c.population).distinct())}
    return [_ledger(connection, name, now) for name in sorted(names)]


def round_cost(parameters, min_survivors: int) -> Cost:
    """A multi-round task's cost (the sharing server's, S1's): its guarantee at the delta its release states over
    its fewest survivors (:func:`~privagg.service.round_tasks.release_delta`, the worst case)."""
    from .round_tasks import release_delta

    return cost_of(parameters, release_delta(parameters, min_survivors))


def charge_round_task(connection: sa.Connection, task, population: str) -> Ledger:
    """A multi-round task's charge (:func:`round_cost`), in the transaction that stores it."""
    return charge(connection, population, task.task_id, task.parameters.protocol,
                  round_cost(task.parameters, task.min_survivors))


def check_charge(engine: sa.Engine, population: str, protocol: str, cost: Cost) -> None:
    """Raise :class:`BudgetExceeded` now if ``cost`` would not be paid for (the charge tried, then rolled back): before
    a task of two servers is made on the first (TSS's S2), so that a refusal leaves nothing behind on either. The
    charge itself is made again where the task is stored."""
    with engine.connect() as c, c.begin() as transaction:
        charge(c, population, "0" * 32, protocol, cost)
        transaction.rollback()


def _tasks(count: int) -> str:
    return f"{count} task" + ("" if count == 1 else "s")


def show(ledger: Ledger) -> str:
    """One line for an operator."""
    s = ledger.spent
    spent = f"spent epsilon {s.epsilon:.4g}, delta {s.delta:.3g} over {_tasks(s.tasks)} ({s.method} composition)"
    if ledger.epsilon is None:
        return f"{ledger.population}: no budget; {ledger.period} {ledger.label}: {spent}"
    eps_left, delta_left = ledger.remaining
    over = [f"{name} by {-left:.4g}" for name, left in (("epsilon", eps_left), ("delta", delta_left)) if left < 0]
    left = (f"left: none (exceeded: {', '.join(over)})" if over else
            f"left epsilon {eps_left:.4g}, delta {_significant(delta_left)}")
    return (f"{ledger.population}: budget epsilon {ledger.epsilon:g}, delta {ledger.delta:g} a {ledger.period}; "
            f"{ledger.label}: {spent}; {left}")


def _significant(value: float) -> str:
    """``value`` with as many digits as it takes not to round up to its next power of ten (0.9999988, not 1)."""
    for digits in range(3, 16):
        if float(text := f"{value:.{digits}g}") <= value:
            return text
    return repr(value)  # the shortest text that reads back as the value itself


LEDGER_TABLES = ("budget_charges", "budgets")
TASKS = {"analyzer": "analyzer_tasks", "sharing": "sharing_tasks", "s1": "s1_tasks"}  # each ledger role's tasks


def charge_older_tasks(connection: sa.Connection, role: str, now: float | None = None) -> int:
    """Every task of ``role``'s database without a charge (made by a release before the ledger) charged to
    :data:`DEFAULT_POPULATION` as its creation would have been, without a budget's refusal (the task exists); the
    number charged. The analyzer's at their creation time; the sharing server's and S1's, whose tables keep none, at
    ``now`` (the upgrade's): the period of the upgrade holds them all, never fewer than it spent. The first stage of
    a staged analyzer task is in its task's charge, as :meth:`~privagg.service.shuffle.analyzer.AnalyzerService.
    create_task` charges it. For migrations a0009, s0007 and s1_0007."""
    from ..protocols.registry import load_parameters
    from .tasks import Task

    now = time.time() if now is None else now
    table = sa.table(TASKS[role], sa.column("task_id"), sa.column("task"),
                     *([sa.column("created")] if role == "analyzer" else []))
    charged = set(connection.execute(sa.select(CHARGES.c.task_id)).scalars())
    every = connection.execute(sa.select(table)).all()  # read once: the analyzer's first stages are found among all
    rows = [r for r in every if r.task_id not in charged]

    def read(row):
        """The analyzer's Task; a round task's (parameters, min_survivors), all its charge needs (not the whole task,
        which this release may refuse for another reason: a size an older release allowed)."""
        try:
            if role == "analyzer":
                return Task.from_json(row.task, verify=False)
            data = json.loads(row.task)
            return load_parameters(data["parameters"], verify=False), check_integer(
                "min_survivors", data["min_survivors"], 1)
        except (ParameterError, ValueError, KeyError, TypeError) as err:
            raise ParameterError("db", f"{role} tasks whose stored JSON this release reads (each is charged to the "
                                 "privacy budget ledger)", f"task {row.task_id}: {type(err).__name__}: {err}") from None

    costs = []  # (task id, protocol, cost, when)
    if role == "analyzer":
        tasks = {r.task_id: read(r) for r in every}
        stages = {t.discovery.task_id for t in tasks.values() if t.discovery is not None}
        for r in rows:
            task = tasks[r.task_id]
            if r.task_id not in stages:
                stage = None if task.discovery is None else task.discovery.parameters
                costs.append((r.task_id, task.parameters.protocol, task_cost(task.parameters, stage), r.created))
    else:
        for r in rows:
            parameters, least = read(r)
            costs.append((r.task_id, parameters.protocol, round_cost(parameters, least), now))
    if costs:
        connection.execute(sa.insert(CHARGES), [
            {"task_id": task_id, "population": DEFAULT_POPULATION, "created": at, "protocol": protocol,
             "epsilon": cost.epsilon, "delta": cost.delta,
             "pld": None if cost.pld is None else json.dumps(list(cost.pld))} for task_id, protocol, cost, at in costs])
    return len(costs)


def drop_tables_migration(op) -> None:
    """The ledger's two tables dropped, for each role's migration's downgrade (a0008, s0006, s1_0006), which
    :func:`privagg.service.schema_versions.downgrade` runs only over an empty ledger unless told to drop it."""
    for table in LEDGER_TABLES:
        op.drop_table(table)


def create_tables_migration(op) -> None:
    """The ledger's two tables, for each role's migration (a0008, s0006, s1_0006)."""
    op.create_table("budgets", sa.Column("population", sa.String(64), primary_key=True),
                    sa.Column("epsilon", sa.Float, nullable=False), sa.Column("delta", sa.Float, nullable=False),
                    sa.Column("period", sa.String(8), nullable=False))
    op.create_table("budget_charges", sa.Column("task_id", sa.String(32), primary_key=True),
                    sa.Column("population", sa.String(64), nullable=False),
                    sa.Column("created", sa.Float, nullable=False),
                    sa.Column("protocol", sa.String(32), nullable=False),
                    sa.Column("epsilon", sa.Float, nullable=False), sa.Column("delta", sa.Float, nullable=False),
                    sa.Column("pld", sa.Text))
    op.create_index("charges_by_population", "budget_charges", ["population", "created"])
