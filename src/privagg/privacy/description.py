"""What a release promises, as the sentence users read: rendered from its privacy event.

The guarantee itself is an event (:mod:`privagg.privacy.events`: a mechanism, stages composed, a recomputation
for the survivors, an early close); :class:`PrivacyDescription` is a release's statement of it: the event, the
fields its sentence is made of (computed from the event by :func:`~privagg.privacy.events.describe`, the privacy
block every report has carried), how the release's randomness was drawn, and whether the release is private at
all. The sentence a user reads is rendered from it (:meth:`PrivacyDescription.render`), never stored beside it.

A seeded simulation is not private: anyone holding the seed regenerates the
noise and subtracts it. :meth:`PrivacyDescription.as_simulation` marks such
a run in the description itself (``private: false`` and the reason).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field, fields, replace

from .events import REPLACE_ONE, Event, Mechanism, Model, describe, event_from_dict, stages

__all__ = ["REPLACE_ONE", "MODEL_PHRASES", "Mechanism", "Model", "PrivacyDescription", "privacy_warnings"]

# the model as a sentence says it (the JSON keeps the short name)
MODEL_PHRASES = {"central": "central model", "shuffle": "shuffle model", "local": "local model",
                 "secret_sharing": "secret-sharing model (users share among themselves, one server)",
                 "two_servers": "two-server model (S1 and S2 must not collude, and S1 must not see the release)"}


@dataclass(frozen=True)
class PrivacyDescription:
    """A release's (epsilon, delta)-DP guarantee (``event``) and everything it rests on, as users read it.

    Made by :meth:`of`: the fields before ``private`` are the sentence's, computed from ``event`` by
    :func:`describe` (and checked to be: a description never says what its event does not);
    ``release_caveats``: what the release adds to its event's caveats (messages received far from what the users
    would send; the groups of a weighted aggregation), read among the caveats."""

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
    caveats: tuple[str, ...]
    private: bool = True
    not_private_reason: str | None = None
    randomness: str = "secure (ChaCha20 keyed from OS entropy)"
    event: Event = field(kw_only=True)
    release_caveats: tuple[str, ...] = field(default=(), kw_only=True)

    @classmethod
    def of(cls, event: Event, *, release_caveats: tuple[str, ...] = (), **release) -> "PrivacyDescription":
        """The description of ``event``; ``release``: ``private``, ``not_private_reason``, ``randomness``."""
        return cls(**_described(event, release_caveats), **release, event=event, release_caveats=release_caveats)

    def __post_init__(self) -> None:
        described = _described(self.event, self.release_caveats)
        if any(getattr(self, name) != value for name, value in described.items()):
            raise ValueError("a privacy description says what its event says (PrivacyDescription.of, with_event)")

    def with_event(self, event: Event) -> "PrivacyDescription":
        """The same release stating ``event`` (its early close, say)."""
        return replace(self, **_described(event, self.release_caveats), event=event)

    def with_caveat(self, caveat: str) -> "PrivacyDescription":
        """The same release, with a caveat of its own (:attr:`release_caveats`)."""
        caveats = self.release_caveats + (caveat,)
        return replace(self, **_described(self.event, caveats), release_caveats=caveats)

    def as_simulation(self, randomness: str, reason: str) -> "PrivacyDescription":
        """The same mechanism in a simulation whose randomness is not fit for privacy (``reason``)."""
        return replace(self, private=False, randomness=randomness, not_private_reason=self._with_reason(
            f"{reason}; the (epsilon, delta) hold only for a run with secure randomness"))

    def as_evaluation(self, what: str) -> "PrivacyDescription":
        """The same release beside what the report adds from the raw data (``what``): an evaluation of the
        protocol, not a private report, whatever its randomness."""
        return replace(self, private=False, not_private_reason=self._with_reason(
            f"evaluated: the report holds {what}, computed from the raw data, which are not part of the "
            "protocol's release and carry no privacy guarantee (leave out --evaluate for a report to publish)"))

    def as_unfounded(self, reason: str) -> "PrivacyDescription":
        """The same mechanism in a run where what the guarantee rests on does not hold (``reason``): not private,
        whatever its randomness."""
        return replace(self, private=False, not_private_reason=self._with_reason(reason))

    def as_left_out(self, users: int) -> "PrivacyDescription":
        """The release over the users who had a value, ``users`` others left out for a missing one: n is then a
        count of the data, which the report carries un-noised (docs/privacy.md, "Missing values")."""
        return self.as_unfounded(
            f"users left out: --missing drop left out {users} users with a missing value, so n (and the message "
            "count) is a count of the data, released un-noised, and whether a user has a value is not protected; "
            "write a placeholder item such as NA in the empty cells for a report to publish")

    def _with_reason(self, reason: str) -> str:
        """``reason`` after any reason already given (a seeded run that is also evaluated has both)."""
        return reason if self.not_private_reason is None else f"{self.not_private_reason}; and {reason}"

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> "PrivacyDescription":
        """The description a JSON privacy block holds (:meth:`to_dict`'s), for printing a served result as a local
        one is printed: its event rebuilt (:func:`~privagg.privacy.events.event_from_dict`), or, in a block written
        before events, one mechanism of the block's fields (lists as tuples, unknown keys left out)."""
        release = {f.name: data[f.name] for f in fields(cls)
                   if f.name in ("private", "not_private_reason", "randomness") and f.name in data}
        if "event" in data:
            return cls.of(event_from_dict(data["event"]), release_caveats=tuple(data.get("release_caveats", ())),
                          **release)
        names = {f.name for f in fields(Mechanism) if f.init} - {"public"}
        return cls.of(Mechanism(**{k: tuple(v) if isinstance(v, list) else v for k, v in data.items() if k in names},
                                public=()), **release)

    def summary(self) -> str:
        """One short line: the claim, the model and who is trusted (:meth:`render` gives everything)."""
        trusted = ", ".join(self.trusted) if self.trusted else "no party"
        claim = f"privacy: ({self.epsilon:g}, {self.delta:g})-DP, {MODEL_PHRASES[self.model]}, trusting {trusted}"
        if self.caveats:
            claim += f", {len(self.caveats)} caveat{'s' if len(self.caveats) > 1 else ''}"
        if not self.private:
            heads = ", ".join(part.split(":")[0] for part in (self.not_private_reason or "").split("; and "))
            return f"NOT PRIVATE ({heads}); would be {claim[9:]}"
        return claim + f"; {self.method} calibration"

    def render(self) -> str:
        """Human lines: the claim, its assumptions, how it was computed, the caveats."""
        trusted = ", ".join(self.trusted) if self.trusted else "no party"
        lines = []
        if not self.private:
            lines.append(f"NOT PRIVATE: {self.not_private_reason}")
        lines += [
            f"privacy: ({self.epsilon:g}, {self.delta:g})-DP, {MODEL_PHRASES[self.model]} ({self.mechanism})",
            f"  neighbours: {self.neighbouring}",
            f"  trusted: {trusted}; honest users: {self.honest_fraction:.0%}; {'; '.join(self.assumptions)}",
            f"  method: {self.method} -- {self.method_detail} [{self.reference}]",
        ]
        lines += [f"  stage {name}: ({epsilon:g}, {delta:g})-DP" for name, epsilon, delta in stages(self.event)]
        lines += [f"  caveat: {c}" for c in self.caveats]
        return "\n".join(lines)


def _described(event: Event, release_caveats: tuple[str, ...]) -> dict:
    described = describe(event)
    described["caveats"] = described["caveats"] + release_caveats
    return described


WEAK_EPSILON = 10.0


def privacy_warnings(epsilon: float, delta: float, n_users: int) -> list[str]:
    """Legal but weak choices, one sentence each: delta >= 1/n, epsilon > 10."""
    warnings = []
    if delta >= 1 / n_users:
        warnings.append(f"delta = {delta:g} is at least 1/n = {1 / n_users:.3g}: a mechanism that publishes one "
                        "random user's item outright meets it; choose delta well below 1/n")
    if epsilon > WEAK_EPSILON:
        warnings.append(f"epsilon = {epsilon:g} exceeds {WEAK_EPSILON:g}: e^epsilon = "
                        f"{math.exp(min(epsilon, 700)):.3g}, so the guarantee barely limits what the output reveals "
                        "about a user")
    return warnings
