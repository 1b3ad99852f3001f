"""Many rows a user (issue 49): each user's rows read, grouped and bounded before any randomizing, the protocol
run over the users' reports (L each, padded), and the report stated of the user: the composed guarantee, n the
number of users, and what the estimates estimate (docs/privacy.md, "Many rows a user").

Also :func:`plan`: what a run with L items a user would cost in accuracy and privacy, before any data is read.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from ..errors import ParameterError, check_integer, checked_arguments
from ..io import InputFormat
from ..privacy.composition import PerReport, per_report
from ..privacy.events import Composed
from ..protocols import registry
from ..protocols.kinds import Family, ResultKind

NO_ITEM_LABEL = "(no item: a user's unused slot)"


def user_level(reports: int, what: str = "item") -> str:
    """The neighbouring relation with the user as the unit, each bounded to ``reports`` = L items (or rows)."""
    chosen = ("one item, chosen uniformly at random among the user's distinct items" if reports == 1 and what == "item"
              else f"at most L = {reports} distinct items, chosen uniformly at random among the user's distinct items, "
                   "and padded to L reports" if what == "item" else what)
    return ("user-level: neighbouring datasets differ in all of one user's rows (each user's rows bounded to "
            f"{chosen}, before randomizing); n, the number of distinct users, is public")


def model_of(entry) -> str:
    """The model a protocol's guarantee is in, as composition needs it: local, or not."""
    return "local" if entry.family is Family.LOCAL_BASELINES else "shuffle"


def budget(entry, epsilon: float, delta: float, reports: int) -> PerReport:
    """The per-report (eps0, delta0) that keeps a user with ``reports`` = L reports at (``epsilon``, ``delta``):
    ``delta`` None is 0 for a pure protocol (whose L reports may still spend a user's delta > 0: the local model's
    composition), and refused for any other."""
    if delta is None and not entry.pure:
        raise ParameterError.required("delta", f"for {entry.name}, an (epsilon, delta)-DP protocol: the user's delta, "
                                      "in (0, 1)")
    return per_report(model_of(entry), epsilon, 0.0 if delta is None else delta, reports)


def check_bounding(entry, max_items: Any, max_rows: Any) -> tuple[int, int | None]:
    """``max_items`` (L >= 1; > 1 refused for the sampling family and vector sums) and ``max_rows`` (vector sums
    only), checked."""
    max_items = check_integer("max_items", max_items, 1)
    if max_rows is not None:
        max_rows = check_integer("max_rows", max_rows, 1)
        if entry.result is not ResultKind.VECTOR_SUM:
            raise ParameterError("max_rows", f"left out for {entry.name} (items: max_items bounds a user's items)",
                                 max_rows)
    if max_items > 1 and entry.result is ResultKind.VECTOR_SUM:
        raise ParameterError("max_items", f"1 for {entry.name} (vectors: a user's rows are summed and clipped, or "
                             "max_rows of them sampled)", max_items)
    if max_items > 1 and entry.family is Family.SAMPLING_SHARING:
        raise ParameterError("max_items", f"1 for {entry.name}: the sampling + secret-sharing protocols' guarantee "
                             "rests on each category held by at least beta n users, a condition on one category a "
                             "user that L > 1 reports a user would break (docs/privacy.md, \"Many rows a user\")",
                             max_items)
    return max_items, max_rows


def grouping_budget() -> int:
    """Bytes the grouping by user may hold in memory: half of what the kernel says is available (the memory
    check's figure; 1 GiB where unknown)."""
    from .frequency import available_memory

    available = available_memory()
    return (1 << 30) if available is None else available // 2


def read_grouped(data, kind: str, fmt: InputFormat, user: str, encoder, reports: int, pad: int, seed: int | None,
                 source: str, memory: int | None = None):
    """The users' bounded codes (:class:`privagg.io.users.Grouped`) of a file (``kind`` "file": a CSV, TSV or
    Parquet table streamed) or of a frame's columns, grouped within ``memory`` bytes (default
    :func:`grouping_budget`)."""
    import pyarrow as pa

    from ..io.files import _unreadable, estimated_rows
    from ..io.frames import frame_name, frame_table
    from ..io.items import _ItemTyper
    from ..io.users import group_items, run_key, user_records

    field = "data" if kind == "file" else "item"
    user_field = "user"
    memory = grouping_budget() if memory is None else memory
    key = run_key(bounding_rng(seed))
    if kind == "file":
        from ..io.blocks import _blocks

        path = Path(data)
        file = user_table(path, fmt, user)
        blocks, rows = _blocks(path, file, fmt, field, user), estimated_rows(path, fmt)
    else:
        from ..io.blocks import _Block

        table = frame_table(data, [fmt.column, user], ["item", "user"])
        blocks = [_Block(table.column(0).combine_chunks(), 1, "row", table.num_rows,
                         users=table.column(1).combine_chunks())]
        rows = table.num_rows
    typer = _ItemTyper(fmt.item_type, field, source)
    records = user_records(blocks, fmt, lambda block: typer.encode(block, encoder, False), field, user_field, source,
                           source if kind == "file" else f"column {user!r} of {frame_name(data)}")
    try:
        return group_items(records, reports, pad, key, memory, rows, user_field)
    except (OSError, pa.ArrowException) as err:
        if kind != "file":
            raise
        raise _unreadable(path, file, field, err) from None


def user_table(path: Path, fmt: InputFormat, user: str) -> str:
    """The kind of the file ``path`` (checked), which a user column needs to be a table: ``table`` or ``parquet``."""
    from ..io.files import checked_file, file_kind

    file = file_kind(path, fmt)
    checked_file(path, "data", file)
    if file not in ("table", "parquet"):
        raise ParameterError("user", "given with a CSV, TSV or Parquet table (a column of users beside the items "
                             "or vectors); a plain-text or .npy file holds one item a user", user)
    return file


def bounding_rng(seed: int | None):
    """The run's randomness for the bounding: its own stream of the seed, else the secure generator."""
    from ..core.randomness import streams

    return streams(seed, ("bounding",))["bounding"]


def padded(encoder, pad: int):
    """``encoder`` with one more code, ``pad`` (its domain's last): the slot a user with fewer than L items leaves
    unused, which no item encodes to."""
    import copy

    out = copy.copy(encoder)
    out.domain_size, out.unused_slot = pad + 1, pad
    return out


def stated_of_users(report, n: int, truncated: int, per: PerReport, evaluate: bool, pad_label=None,
                    what: str = "item"):
    """``report`` (of the n L reports) stated of the n users: n, the messages a user (measured and expected), the
    composed guarantee (:class:`~privagg.privacy.events.Composed`, for L > 1) and the warnings on it (a weak
    epsilon or delta, no information) taken again of the user's guarantee and the n users, not of one report's
    and the n L reports, the pad left out of the estimates, and what the estimates estimate; how many users held
    more than L is a count of the data, shown in an evaluation only (``truncated`` None: no user's rows were
    bounded, as when a vector sum sums each user's rows)."""
    from ..privacy.description import privacy_warnings
    from ..protocols.parameters import no_information

    reports = per.reports
    privacy = report.privacy
    standard_error = report.expected_error.standard_error
    stale = [*privacy_warnings(privacy.epsilon, privacy.delta, report.n_users),
             no_information(standard_error, report.n_users)]  # of one report, over the n L reports
    if reports == 1:
        event = replace(privacy.event, neighbouring=user_level(1, what))
    else:
        event = Composed(privacy.event, reports, per.user_epsilon, per.user_delta, per.method, per.detail,
                         user_level(reports, what))
        report.privacy_profile = []  # the profile is of one report's noise
    report.privacy = replace(privacy.with_event(event), private=privacy.private,
                             not_private_reason=privacy.not_private_reason, randomness=privacy.randomness)
    report.n_users = n
    report.messages = replace(report.messages, per_user=report.messages.total / n)
    report.expected_error = replace(report.expected_error,
                                    messages_per_user=report.expected_error.messages_per_user * reports)
    fresh = [*privacy_warnings(report.privacy.epsilon, report.privacy.delta, n), no_information(standard_error, n)]
    report.warnings = [w for w in fresh if w] + [w for w in report.warnings if w not in stale]
    if hasattr(report, "mean"):
        report.mean = [e.estimate / n for e in report.estimates]
    if pad_label is not None and hasattr(report, "estimates"):
        report.estimates = [e for e in report.estimates if e.item != pad_label]
    unit = "items" if what == "item" else "rows"
    held = ("" if truncated is None else f" ({truncated} of the {n} users held more than {reports} distinct {unit})"
            if evaluate else f" (how many users held more than {reports} is a count of the data, which a release does "
            "not carry: --evaluate shows it)")
    report.warnings.insert(0, (
        f"the estimates count the users holding each item among their bounded items: at most {reports} distinct "
        f"item{'s' if reports > 1 else ''} a user, chosen uniformly at random{held}" if what == "item" else
        f"the estimates are sums over the users of their bounded rows: {what}{held}"))
    return report


@dataclass
class Plan:
    """What a run would cost, before any data is read (:func:`plan`): the expected standard error of each
    estimate (``stderr``; vector sums: of each coordinate's sum), the per-report guarantee, the user's composed
    guarantee and how it follows (``method``), with the calibrated parameters of the run over n L reports."""

    protocol: str
    n_users: int
    max_items: int
    reports: int
    stderr: float
    stderr_at: str
    per_report_epsilon: float
    per_report_delta: float
    epsilon: float
    delta: float
    method: str
    detail: str
    parameters: Any

    def __str__(self) -> str:
        return (f"{self.protocol}, {self.n_users} users, at most {self.max_items} item(s) a user: expected stderr "
                f"{self.stderr:.4g} at {self.stderr_at}; per report ({self.per_report_epsilon:.4g}, "
                f"{self.per_report_delta:.3g})"
                f"-DP, the user ({self.epsilon:.4g}, {self.delta:.3g})-DP by {self.method}")


@checked_arguments
def plan(protocol: str, *, epsilon: float, delta: float | None = None, n_users: int, max_items: int = 1,
         domain_size: int | None = None, calibration: str | None = None, **options: Any) -> Plan:
    """The expected error per item and the guarantees of ``protocol`` over ``n_users`` users with up to
    ``max_items`` = L items each, at the user's (``epsilon``, ``delta``), before any data is read: the protocol
    calibrated for the n L reports (each user padded to L) at the per-report budget the composition leaves
    (:mod:`privagg.privacy.composition`). ``domain_size``: B (default 2^24 for a hashed protocol; a padded run
    adds one code for L > 1 when B is given). fe-hh: ``phi`` of the n users (the run over n L reports at phi / L),
    ``max_length`` for strings; its ``stderr`` is at phi n holders."""
    entry = registry.get(protocol)
    n_users = check_integer("n_users", n_users, 2)  # the protocol's calibration checks the n L reports
    max_items, _ = check_bounding(entry, max_items, None)
    delta = 0.0 if delta is None else delta
    per = budget(entry, epsilon, delta, max_items)
    if entry.result is ResultKind.HEAVY_HITTER_LIST:
        if max_items > 1:  # as estimate runs fe-hh: n L reports, padded, at phi / L (docs/privacy.md)
            import numpy as np

            _, domain_size, options["phi"], _ = entry.parameters.padded(
                [], np.zeros(0, dtype=bool), domain_size, options.get("max_length"), options.get("phi"), max_items)
    elif domain_size is None:
        domain_size = 2**24 if entry.result is ResultKind.FREQUENCY_TABLE and not entry.small_domain else None
        if domain_size is None:
            raise ParameterError.required("domain_size", f"for {protocol}: B, the number of possible items (or d)")
    elif max_items > 1:
        domain_size = check_integer("domain_size", domain_size, 2) + 1  # the unused slots' code
    parameters = registry.calibrate(protocol, epsilon=per.epsilon, delta=per.delta, n_users=n_users * max_items,
                                    domain_size=domain_size, calibration=calibration, **options)
    expected = parameters.expected_error()
    return Plan(protocol, n_users, max_items, n_users * max_items, float(expected["standard_error"]),
                expected["standard_error_at"], per.epsilon, per.delta, per.user_epsilon,
                per.user_delta, per.method if max_items > 1 else "the protocol's own guarantee", per.detail,
                parameters)



class DistinctValues:
    """An encoder (as :class:`~privagg.core.encoding.ItemEncoder` is called by the readers) giving each distinct
    item its index in order of appearance, keeping the items: fe-hh's raw values, grouped by user as codes.
    ``domain_size``: the integers the readers take, [0, B) (fe-hh's B, up to 2^64: a value outside is refused
    naming its line, not later as a row of the distinct values); :data:`PAD` codes an unused slot."""

    PAD = 2**63 - 1  # no index reaches it

    def __init__(self, domain_size: int | None = None) -> None:
        self.domain_size = self.PAD if domain_size is None else domain_size
        self.values: list = []
        self._index: dict = {}

    def encode(self, items, field: str = "item", public: bool = False):
        import numpy as np
        import pyarrow as pa

        if isinstance(items, np.ndarray):
            uniques, inverse = np.unique(items, return_inverse=True)
            found = [int(u) for u in uniques.tolist()]
        else:
            encoded = (items if isinstance(items, pa.Array) else pa.array(items)).dictionary_encode()
            found, inverse = encoded.dictionary.to_pylist(), encoded.indices.to_numpy(zero_copy_only=False)
        ids = np.empty(len(found), dtype=np.int64)
        for i, value in enumerate(found):
            if value not in self._index:
                self._index[value] = len(self.values)
                self.values.append(value)
            ids[i] = self._index[value]
        return ids[inverse]

    def values_of(self, codes) -> list:
        return [self.values[c] for c in codes.tolist()]
