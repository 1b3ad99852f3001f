"""Privacy as events that compose: what a release promises, as frozen data.

In the shape of dp-accounting's ``dp_event.py`` (a mechanism's event, events composed of events; accountants read
them), with what its events leave out and privagg's guarantees rest on: who is trusted, how many users must follow
the protocol, what is public, and who took part.

* :class:`Mechanism`: one mechanism's guarantee as its calibration (or its accountant, for other parameters)
  states it, with the trust it rests on.
* :class:`Sequential`: stages run one after the other over the same users (a discovery, then an estimate of what
  it found): basic composition, the epsilons and the deltas add.
* :class:`Survivors`: a mechanism's guarantee recomputed for the users who took part to the end, after others
  dropped out (DPDS, DPDG, TSS: docs/privacy.md, "Dropouts in DPDS and DPDG").
* :class:`EarlyClose`: a release over the m < n users who reported before a one-batch task was closed
  (docs/privacy.md, "An early close"): the guarantee counts on ceil(G n) honest users among them.
* :class:`Composed`: a user's L reports (his bounded items or rows), each under the per-report event: group
  privacy or composition (:mod:`privagg.privacy.composition`; docs/privacy.md, "Many rows a user").
* :class:`Incomplete`: a one-batch release of m counted reports some of whose messages did not enter the
  aggregate (docs/deployment.md, "Messages that do not enter the aggregate"): the guarantee counts on ceil(G n)
  honest users among the reports whose messages all entered.

:func:`guarantee` computes the (epsilon, delta) of any event, and :func:`describe` the fields of the sentence users
read (:class:`privagg.privacy.description.PrivacyDescription` renders them): each in this one place.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal, Union

Model = Literal["central", "shuffle", "local", "secret_sharing", "two_servers"]
REPLACE_ONE = "replace-one: neighbouring datasets differ in one user's item; n is public"
COMPOSITION = "basic composition: the stages' epsilons and deltas add"


@dataclass(frozen=True)
class Mechanism:
    """One mechanism's (epsilon, delta)-DP guarantee and everything it rests on: its parameters, the neighbouring
    relation, the trusted parties, the fraction of users who must follow the protocol, further assumptions, what is
    public, how (epsilon, delta) were established (``method``: the calibration, one of the registry entry's) and
    where the proof or derivation lives."""

    type: Literal["mechanism"] = field(default="mechanism", init=False)
    mechanism: str
    parameters: dict[str, float]
    epsilon: float
    delta: float
    model: Model
    neighbouring: str
    trusted: tuple[str, ...]
    honest_fraction: float
    assumptions: tuple[str, ...]
    method: str
    method_detail: str
    reference: str
    caveats: tuple[str, ...] = ()
    public: tuple[str, ...] = ("the parameters",)

    def __post_init__(self) -> None:
        if self.model not in Model.__args__:
            raise ValueError(f"model must be one of {Model.__args__}, got {self.model!r}")
        if not 0 < self.honest_fraction <= 1:
            raise ValueError(f"honest_fraction must be in (0, 1], got {self.honest_fraction}")
        if not isinstance(self.method, str) or not self.method:
            raise ValueError(f"method must be a calibration's name, got {self.method!r}")


@dataclass(frozen=True)
class Stage:
    """One stage of a :class:`Sequential` event: its name (what it does: "discovery", "estimation") and its
    guarantee."""

    name: str
    event: Event


@dataclass(frozen=True)
class Sequential:
    """Stages run one after the other over the same users, each on what the ones before released (an estimate of
    the coordinates a discovery found): basic composition (Dwork and Roth, Theorem 3.16), epsilon and delta the
    sums of the stages'."""

    type: Literal["sequential"] = field(default="sequential", init=False)
    stages: tuple[Stage, ...]

    def __post_init__(self) -> None:
        if len(self.stages) < 2:
            raise ValueError(f"a sequential event has at least 2 stages, got {len(self.stages)}")


@dataclass(frozen=True)
class Survivors:
    """``event`` (the mechanism with its parameters recomputed for the ``survivors`` of the ``enrolled`` users:
    its delta the task's target) released over the survivors only; ``delta``: what the recomputed parameters buy at
    the event's epsilon (their accountant's ``delta_at``), above the target when the dropouts weakened it.
    ``who`` names the survivors ("users who took part to the end"), ``detail`` who took part in which round, and
    ``notes`` what else the release rests on (how the shares were backed up; which servers must not collude)."""

    type: Literal["survivors"] = field(default="survivors", init=False)
    event: Mechanism
    delta: float
    enrolled: int
    survivors: int
    who: str
    detail: str
    notes: tuple[str, ...] = ()

    @property
    def weakened(self) -> bool:
        return self.delta > self.event.delta * (1 + 1e-9)


@dataclass(frozen=True)
class EarlyClose:
    """``event`` released over the ``reporters`` m < n users whose reports were counted when a one-batch (shuffle)
    task was closed early: the noise in the release is the m users' own, and the guarantee counts on
    ``honest_users`` ceil(G n) of them following the protocol, the n - m absent among the (1 - G) n it does not
    count on. Below ceil(G n) it holds nothing (:attr:`unfounded`)."""

    type: Literal["early_close"] = field(default="early_close", init=False)
    event: Event
    reporters: int
    n_users: int
    honest_users: int
    honest_fraction: float

    @property
    def unfounded(self) -> str | None:
        """Why the release is not private (too few reports), or None."""
        if self.reporters >= self.honest_users:
            return None
        return (f"too few reports: {self.reporters} of the {self.n_users} users' reports were counted, fewer than the "
                f"{self.honest_users} honest users whose noise the guarantee counts on (ceil(G n), G = "
                f"{self.honest_fraction:g})")


@dataclass(frozen=True)
class Incomplete:
    """``event`` released over ``reporters`` counted reports of which ``lost`` messages did not enter the aggregate
    (they did not open, or opened malformed) and ``missing`` more were never sent (the reports carried that many
    fewer than 5 sd below what their users' randomizers draw, :func:`privagg.pipelines.with_received_caveat`) in a
    one-batch (shuffle) task: sealed one by one and shuffled, each may be another report's, so the guarantee counts
    on ``honest_users`` ceil(G n) users following the protocol among the at least m - lost - missing reports whose
    messages all entered. Below ceil(G n) it holds nothing (:attr:`unfounded`)."""

    type: Literal["incomplete"] = field(default="incomplete", init=False)
    event: Event
    lost: int
    reporters: int
    honest_users: int
    honest_fraction: float
    missing: int = 0

    @property
    def whole(self) -> int:
        """The least number of reports whose messages all entered."""
        return max(0, self.reporters - self.lost - self.missing)

    @property
    def unfounded(self) -> str | None:
        """Why the release is not private (too few whole reports), or None."""
        if self.whole >= self.honest_users:
            return None
        what = [f"{self.lost} messages of the {self.reporters} reports did not enter the aggregate"] if self.lost \
            else []
        if self.missing:
            what.append(f"the {self.reporters} reports carried at least {self.missing} messages fewer than their "
                        "users' randomizers draw (beyond 5 sd)")
        return (f"messages {'lost' if self.lost else 'missing'}: {' and '.join(what)}, so as few as {self.whole} "
                f"reports may be whole, fewer than the {self.honest_users} honest users whose noise the guarantee "
                f"counts on (ceil(G n), G = {self.honest_fraction:g}; a task calibrated with a lower honest fraction "
                "tolerates that many)")


@dataclass(frozen=True)
class Composed:
    """``event`` (one report's guarantee) used ``reports`` = L times by each user, who holds up to L items or rows
    (bounded, padded to L): (``epsilon``, ``delta``) by ``method`` (:mod:`privagg.privacy.composition`), which
    ``detail`` states; ``neighbouring``: the user-level relation that replaces the report-level one."""

    type: Literal["composed"] = field(default="composed", init=False)
    event: Event
    reports: int
    epsilon: float
    delta: float
    method: str
    detail: str
    neighbouring: str


Event = Union[Mechanism, Sequential, Survivors, EarlyClose, Incomplete, Composed]


def event_from_dict(data: dict[str, Any]) -> Event:
    """The event a JSON privacy block's ``event`` holds (``dataclasses.asdict``'s: lists read back as tuples)."""
    kind = data.get("type", "mechanism")
    fields_ = {k: tuple(v) if isinstance(v, list) else v for k, v in data.items() if k not in ("type", "event")}
    if kind == "sequential":
        return Sequential(tuple(Stage(s["name"], event_from_dict(s["event"])) for s in data["stages"]))
    if kind == "mechanism":
        return Mechanism(**fields_)
    wrapper = {"survivors": Survivors, "early_close": EarlyClose, "incomplete": Incomplete, "composed": Composed}[kind]
    return wrapper(event=event_from_dict(data["event"]), **fields_)


def guarantee(event: Event) -> tuple[float, float]:
    """The (epsilon, delta) of ``event``: a mechanism's own; a sequential event's sums; the survivors' recomputed
    delta at the mechanism's epsilon; an early close's (an incomplete release's) event's."""
    if isinstance(event, Mechanism):
        return event.epsilon, event.delta
    if isinstance(event, Sequential):
        parts = [guarantee(stage.event) for stage in event.stages]
        return sum(e for e, _ in parts), sum(d for _, d in parts)
    if isinstance(event, Survivors):
        return event.event.epsilon, event.delta
    if isinstance(event, Composed):
        return event.epsilon, event.delta
    return guarantee(event.event)


def _unique(items) -> tuple:
    return tuple(dict.fromkeys(items))


def _public(mechanism: Mechanism) -> tuple[str, ...]:
    if not mechanism.public:
        return ()
    return ("public: " + "; ".join(mechanism.public),)


def describe(event: Event) -> dict[str, Any]:
    """The fields of the sentence users read about ``event`` (the privacy block of every report): ``mechanism``,
    ``parameters``, ``epsilon``, ``delta``, ``model``, ``neighbouring``, ``trusted``, ``honest_fraction``,
    ``assumptions``, ``method``, ``method_detail``, ``reference``, ``caveats``."""
    epsilon, delta = guarantee(event)
    if isinstance(event, Mechanism):
        return dict(mechanism=event.mechanism, parameters=dict(event.parameters), epsilon=epsilon, delta=delta,
                    model=event.model, neighbouring=event.neighbouring, trusted=event.trusted,
                    honest_fraction=event.honest_fraction, assumptions=event.assumptions + _public(event),
                    method=event.method, method_detail=event.method_detail, reference=event.reference,
                    caveats=event.caveats)
    if isinstance(event, Sequential):
        parts = [(stage.name, describe(stage.event)) for stage in event.stages]
        last = parts[-1][1]
        return dict(
            mechanism="; then ".join(f"{name}: {part['mechanism']}" for name, part in parts),
            parameters={f"{name}.{key}": value for name, part in parts
                        for key, value in part["parameters"].items()},
            epsilon=epsilon, delta=delta, model=last["model"],
            neighbouring=last["neighbouring"],  # the users' inputs (the earlier stages run on what each user derives)
            trusted=_unique(t for _, part in parts for t in part["trusted"]),
            honest_fraction=min(part["honest_fraction"] for _, part in parts),
            assumptions=_unique(a for _, part in parts for a in part["assumptions"]),
            method=last["method"],
            method_detail=f"{COMPOSITION}: " + "; ".join(
                f"{name} at ({part['epsilon']:g}, {part['delta']:g}), {part['method_detail']}"
                for name, part in parts),
            reference=" and ".join(_unique(part["reference"] for _, part in parts)),
            caveats=_unique(c for _, part in parts for c in part["caveats"]))
    inner = describe(event.event)
    if isinstance(event, Composed):
        return {**inner, "epsilon": epsilon, "delta": delta, "neighbouring": event.neighbouring,
                "parameters": {**inner["parameters"], "per_report_epsilon": inner["epsilon"],
                               "per_report_delta": inner["delta"], "reports_per_user": event.reports},
                "method_detail": f"{event.method}: {event.detail}; one report: {inner['method_detail']}"}
    if isinstance(event, Survivors):
        weakened = (f"; the dropouts weakened it from the task's target delta {event.event.delta:.3g} to "
                    f"{event.delta:.3g} (fewer users to hide among)" if event.weakened else "")
        return {**inner, "delta": delta, "caveats": inner["caveats"] + (
            f"recomputed for the {event.survivors} {event.who}, of the {event.enrolled} enrolled ({event.detail}): the "
            "release is theirs, and its conditions (the users who may not follow the protocol; what the data "
            f"condition, stated of all the enrolled, leaves them) are stated of them{weakened}", *event.notes)}
    if event.unfounded is not None:  # nothing to assume: the release says why it is not private
        return inner
    if isinstance(event, Incomplete):
        return {**inner, "assumptions": inner["assumptions"] + (
            f"{event.lost} messages did not enter the aggregate: the guarantee counts on {event.honest_users} users "
            f"following the protocol among the at least {event.whole} reports whose messages all entered",)}
    m, n, honest = event.reporters, event.n_users, event.honest_users
    return {**inner, "assumptions": inner["assumptions"] + (
        f"{m} of the {n} users reported: the guarantee counts on {honest} of them following the protocol, the "
        f"{n - m} absent among the {n - honest} it does not count on; the estimates are of the {m} users' data",)}


def stages(event: Event) -> list[tuple[str, float, float]]:
    """(name, epsilon, delta) of each stage of a sequential ``event`` (wrapped or not); [] for one stage."""
    while isinstance(event, (Survivors, EarlyClose, Incomplete, Composed)):
        event = event.event
    if not isinstance(event, Sequential):
        return []
    return [(stage.name, *guarantee(stage.event)) for stage in event.stages]
