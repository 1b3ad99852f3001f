"""What every protocol's frozen parameters share: exact JSON round trips, checked field by field on load.

Parameters are data (docs/architecture.md): a calibration function returns
them, clients and servers are built from them and never recalibrate. Each
protocol's parameters are a frozen dataclass deriving from
:class:`FrozenParameters`, with a ``protocol`` class attribute naming it;
:meth:`~FrozenParameters.from_dict` rebuilds one from :meth:`~FrozenParameters.to_dict`
output as a client would accept it (types, then the class's own checks in
``__post_init__``, then agreement of any derived quantity a report carried).
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, ClassVar, Protocol, runtime_checkable

import numpy as np

from ..core.messages import Column, MessageLayout
from ..errors import ParameterError, check_instance, check_integer
from ..privacy.description import PrivacyDescription

REPORTERS_MAX = 2**53  # users an analysis may count (n's own limit: beyond, a count is not exact in floating point)
_TYPE_CHECKS = {
    "float": lambda v: isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v),
    "int": lambda v: isinstance(v, int) and not isinstance(v, bool),
    "str": lambda v: isinstance(v, str),
}


@runtime_checkable
class Parameters(Protocol):
    """The parameters contract: what the layers above the protocols (simulate, engine, service, pipelines, the CLI)
    use of any protocol's frozen parameters. Every registry entry's parameters keep it (its example instance is
    checked in tests/protocols/test_contract.py); members beyond it belong to a family (``rho`` and
    ``messages_sd`` of the message-sending protocols, ``check_codes`` of what ``simulate`` runs; ``model``, the
    topology as a privacy description names it, which no layer picks behaviour by: the entry's topology does)."""

    protocol: ClassVar[str]  # the registry entry's name (what a layer needs of the protocol, it asks its entry)
    epsilon: float
    delta: float  # 0 for a pure eps-DP protocol
    n_users: int
    domain_size: int  # B items (categories, coordinates)
    calibration: str
    honest_fraction: float

    @property
    def privacy(self) -> PrivacyDescription: ...

    @property
    def layout(self) -> MessageLayout: ...

    @property
    def messages_per_user(self) -> float: ...

    @property
    def bits_per_message(self) -> int: ...

    @property
    def honest_users(self) -> int: ...

    def to_dict(self) -> dict[str, Any]: ...

    def derived(self) -> dict[str, Any]: ...

    def warnings(self) -> list[str]: ...

    def delta_at(self, epsilon: float) -> float: ...

    def verify(self) -> None: ...

    def expected_error(self) -> dict[str, float | str]: ...  # standard_error_at: the count standard_error is at

    def standard_error(self, estimates: Any) -> Any: ...  # the served protocols' take reporters= (with_reporters)

    def reported_standard_error(self, estimates: Any) -> Any: ...

    def costs(self) -> dict[str, dict[str, float]]: ...

    def theory(self) -> dict[str, float | str]: ...


def no_information(standard_error: float, n_users: int) -> str | None:
    """The warning for estimates that carry no information at this size: a standard error (the largest of one
    estimate, as ``expected_error`` gives it) above n, the most any count or sum over the users can be, so an
    item every user holds is not told from one nobody holds by a standard error; None otherwise."""
    if not standard_error > n_users:
        return None
    return (f"the estimates carry no information at this size: their standard error, {standard_error:.3g}, exceeds "
            f"n = {n_users}, the most any count can be; more users, or a larger epsilon or delta, help")


class FrozenParameters:
    """Serialisation of a frozen parameters dataclass (fields typed float, int or str, optionally ``| None``)."""

    protocol: ClassVar[str]

    def to_dict(self) -> dict[str, Any]:
        """The fields, tagged with the protocol name (JSON-ready; floats round-trip exactly)."""
        return {"protocol": self.protocol, **dataclasses.asdict(self)}

    def derived(self) -> dict[str, Any]:
        """Quantities that follow from the fields, for reports (not part of :meth:`to_dict`)."""
        return {}

    def warnings(self) -> list[str]:
        """Legal but poor settings of this protocol, one sentence each (reports carry them; the CLI prints them):
        here, estimates whose standard error passes n (:meth:`no_information`); each protocol adds its own."""
        found = self.no_information()
        return [] if found is None else [found]

    def no_information(self) -> str | None:
        """The warning that these parameters' estimates carry no information (:func:`no_information`), or None."""
        return no_information(self.expected_error()["standard_error"], self.n_users)

    @property
    def honest_users(self) -> int:
        """ceil(G n): the users whose noise the guarantee counts on (fields ``n_users``, ``honest_fraction``)."""
        return honest_users(self.n_users, self.honest_fraction)

    def counted(self, reporters: int | None = None) -> int:
        """m: the users whose reports an analysis counted (``reporters``), or the calibrated n where that is not
        known (a simulation runs all n). The protocols whose users make the noise (a client randomizer) debias,
        and compute their errors, with it: a shuffle task closed early counts m >= ceil(G n) reports, whose
        messages carry m users' noise, not n's (docs/derivations.md, "An early close")."""
        return self.n_users if reporters is None else check_integer("reporters", reporters, 1, REPORTERS_MAX)

    @property
    def report_weight(self) -> float | None:
        """How far one user's report moves an item's estimate, where the estimator's sd can vanish at some count
        (:meth:`reported_standard_error`); None where noise no count takes away (dummies, a blanket, added noise) keeps
        it above zero at every count."""
        return None

    def reported_standard_error(self, estimates, reporters: int | None = None):
        """The standard errors a result reports beside ``estimates`` (docs/derivations.md, "Reported standard
        errors"): ``standard_error`` at the estimate; with a ``report_weight`` w, the larger of its values at
        estimate - w and estimate + w. The sd at the estimate alone reads 0, "certain", wherever it vanishes at the
        estimate (a sampled count of 0) though not at a count one report away, which the release cannot tell
        from it; for the sampling family the result is the posterior sd of the count under a flat prior.
        ``reporters``: the users whose reports were counted, where known (:func:`with_reporters`)."""
        w = self.report_weight
        if w is None:
            return with_reporters(self.standard_error, estimates, reporters=reporters)
        e = np.asarray(estimates, dtype=np.float64)
        return np.maximum(with_reporters(self.standard_error, e - w, reporters=reporters),
                          with_reporters(self.standard_error, e + w, reporters=reporters))

    @property
    def bits_per_message(self) -> int:
        """Bits of one message (the sum of the layout's columns)."""
        return self.layout.bits_per_message

    def check_delta_at(self, field: str, value) -> None:
        """Refuse, naming ``field``, a noise setting whose ``delta_at(epsilon)`` exceeds the claimed delta (a
        relative 1e-9 absorbs rounding where the calibration meets the target)."""
        achieved = self.delta_at(self.epsilon)
        if achieved > self.delta * (1 + 1e-9):
            raise ParameterError(field, f"large enough for ({self.epsilon:g}, {self.delta:g})-DP (it buys delta = "
                                 f"{achieved:.3g} at epsilon {self.epsilon:g})", value)

    @classmethod
    def from_dict(cls, data: dict[str, Any]):
        """Parameters from :meth:`to_dict` output (``protocol`` must name this class), checked field by field.

        Values are checked as a client would before using them: types, then
        the class's own checks (ranges, relations between fields, noise
        floors), then derived quantities a report carries must agree with
        the fields. Nothing is recalibrated (``verify`` checks what the
        noise buys).
        """
        if data.get("protocol") != cls.protocol:
            raise ParameterError("parameters.protocol", cls.protocol, data.get("protocol"))
        fields = {f.name: f for f in dataclasses.fields(cls)}
        given = {k: v for k, v in data.items() if k in fields}
        extra = {k: v for k, v in data.items() if k not in fields and k != "protocol"}
        required = {name for name, f in fields.items()
                    if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING}
        if not required <= set(given):
            raise ParameterError("parameters", f"the fields {sorted(fields)} of {cls.protocol}", sorted(given))
        for name, value in given.items():
            kind = fields[name].type.replace(" | None", "")
            if not (_TYPE_CHECKS[kind](value) or (value is None and "None" in fields[name].type)):
                raise ParameterError(f"parameters.{name}", f"of type {fields[name].type}", value)
        parameters = cls(**{k: float(v) if fields[k].type == "float" else v for k, v in given.items()})
        derived = parameters.derived()
        for name, value in extra.items():  # derived quantities (reports carry them) must agree with the fields
            if name not in derived:
                raise ParameterError("parameters", f"only the fields {sorted(fields)} and {sorted(derived)}", name)
            if value != derived[name]:
                raise ParameterError(f"parameters.{name}", f"{derived[name]!r}, as the fields imply", value)
        return parameters


class OneItemReports:
    """For parameters whose every message is one item code of [B] (blanket-hist, the local and central
    baselines): the layout, one message a user, codes checked against [B]."""

    domain_size: int

    @property
    def layout(self) -> MessageLayout:
        return MessageLayout((Column("value", 0, self.domain_size),))

    @property
    def messages_per_user(self) -> float:
        return 1.0

    def check_codes(self, codes) -> np.ndarray:
        return check_item_codes(codes, self.domain_size)

    def worst_standard_error(self, reporters: int | None = None) -> float:
        """The largest sd of one item's estimate, ``expected_error``'s "at most": each user's report counts for an
        item independently, with one chance if he holds it and another if not, so the variance is linear in the
        item's count and largest at 0 or at every user counted; no item's reported sd exceeds it."""
        ends = (0, self.counted(reporters))
        return float(max(with_reporters(self.standard_error, g, reporters=reporters) for g in ends))


def with_reporters(method, *args, reporters: int | None = None):
    """``method(*args)``, told the ``reporters`` whose reports were counted where they are known: the theory of the
    protocols whose users make the noise takes them (:meth:`FrozenParameters.counted`); a curator's or the sharing
    family's does not depend on them, and is asked only without them (None: the calibrated n)."""
    return method(*args) if reporters is None else method(*args, reporters=reporters)


def received_mismatch(parameters, received: int, reporters: int | None = None) -> str | None:
    """None when ``received`` messages lie within 5 sd (+ 1) of the n (1 + rho) the parameters count on from
    ``reporters`` users (default: the calibrated n); otherwise the mismatch, e.g. ``"29758 messages where the
    guarantee counts on 23800 from 3000 users (sd 13.7)"`` (a release's caveat, ``privagg analyze``'s warning or,
    with --strict, error, and an analyzer's :class:`~privagg.errors.PrivaggWarning` from ``finalize``)."""
    users, expected, sd = received_bounds(parameters, reporters)
    if abs(received - expected) <= 5 * sd + 1:
        return None
    return f"{received} messages where the guarantee counts on {expected:.0f} from {users} users (sd {sd:.1f})"


def received_bounds(parameters, reporters: int | None = None) -> tuple[int, float, float]:
    """(the users counted: ``reporters``, default the calibrated n; the messages they send in expectation; its sd)."""
    users = parameters.n_users if reporters is None else reporters
    sd = (getattr(parameters, "messages_sd", 0.0) or 0.0) * (users / parameters.n_users) ** 0.5  # over n users
    return users, users * parameters.messages_per_user, sd


def check_parameters(parameters: Any, field: str = "parameters") -> "FrozenParameters":
    """``parameters`` if they are a protocol's frozen parameters; else a ParameterError naming ``field``."""
    return check_instance(field, parameters, FrozenParameters, "a protocol's frozen parameters (privagg.calibrate(...) "
                          "or privagg.load_parameters(json_text))")


def check_pure_delta(protocol: str, delta) -> float:
    """0, the delta of a pure eps-DP protocol, which takes none: None and 0 are accepted, anything else refused."""
    if delta not in (None, 0.0):
        raise ParameterError("delta", f"left out for {protocol} (pure eps-DP: delta is 0)", delta)
    return 0.0


def check_item_codes(codes, domain_size: int) -> np.ndarray:
    """``codes`` as a flat int64 array; a clear error unless they are integers in [0, domain_size).

    Strings, floats (even ``3.0``), NaN and ragged lists are refused, not
    coerced: items other than codes go through :class:`privagg.ItemEncoder`.
    """
    accepted = f"integer codes in [0, {domain_size}) (map other items with privagg.ItemEncoder)"
    try:
        array = np.asarray(codes)
    except ValueError:
        raise ParameterError("item", accepted, "a ragged sequence") from None
    if array.size and not np.issubdtype(array.dtype, np.integer):
        first = next((v for v in array.ravel().tolist() if not isinstance(v, int) or isinstance(v, bool)),
                     array.ravel()[0])
        kind = {"U": "strings", "S": "bytes", "f": "floats", "b": "booleans", "c": "complex numbers"}
        raise ParameterError("item", accepted, f"{first!r} (among {kind.get(array.dtype.kind, 'objects')})")
    if array.ndim != 1:
        raise ParameterError("item", accepted + ", one per user in a flat sequence", f"shape {array.shape}")
    if array.size and (array.min() < 0 or array.max() >= domain_size):
        raise ParameterError("item", accepted, array.min() if array.min() < 0 else array.max())
    return array.astype(np.int64, copy=False)


def float_rows(values) -> np.ndarray:
    """``values`` as a float array: float32 and float64 arrays as they are (a float32 value is exactly a float64
    one, so the randomizer converts only what it picks:
    :meth:`privagg.protocols.privacy_blanket.VectorClient.randomize`), anything else as float64."""
    array = np.asarray(values)
    return array if array.dtype in (np.float32, np.float64) else array.astype(np.float64)


def neighbouring_pairs(items: int, users: int):
    """Every neighbouring pair of datasets for the exact auditor, as lists of items: user 0 holds x in D and y in
    D' (all x < y of [0, ``items``); the hockey-stick divergence is taken both ways), and the other ``users`` - 1
    users hold any multiset of items, the same in both (users are exchangeable: the output law depends on the
    counts only). Complete: nothing is assumed of which datasets are the worst. Lazy, even over a huge domain
    (the auditor takes the first pairs, and refuses past its limit)."""
    for others in _multisets(items, users - 1):
        for x in range(items):
            for y in range(x + 1, items):
                yield [x, *others], [y, *others]


def _multisets(items: int, size: int):
    """itertools.combinations_with_replacement(range(items), size), in its order, without building the pool
    (which holds all of range(items): gigabytes at B = 2^28)."""
    if size == 0:
        yield ()
        return
    if items <= 0:
        return
    indices = [0] * size
    yield tuple(indices)
    while True:
        for i in reversed(range(size)):
            if indices[i] != items - 1:
                break
        else:
            return
        indices[i:] = [indices[i] + 1] * (size - i)
        yield tuple(indices)


def neighbouring_pair_count(items: int, users: int) -> int:
    """How many pairs :func:`neighbouring_pairs` yields: C(items + users - 2, users - 1) C(items, 2)."""
    return math.comb(items + users - 2, users - 1) * math.comb(items, 2)


def honest_users(n_users: int, fraction: float) -> int:
    """ceil(G n), with G n rounded to 9 decimals first so that 0.9 * 10 counts 9 users, not 10."""
    return math.ceil(round(fraction * n_users, 9))
