"""``privagg.estimate(data, protocol, item=...)``: a protocol simulated over a column of a DataFrame (pandas,
Polars) or of a Parquet file or dataset, as ``privagg estimate PROTOCOL --input ... --column ...`` does over a
file, returning the same typed report (issue 49, item 2).

The column is read by the file readers' rules (:mod:`privagg.io`): one kind of item throughout (integers or
text), integers in the domain, a missing value (None, NaN, null) an error naming the row unless
``missing="drop"``; an absent or empty column is an error naming the argument. As on the command line, the
randomness is secure unless ``seed`` is given, and a seeded run's report says it is not private.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ..core.encoding import CategoryEncoder
from ..errors import ParameterError, check_instance, check_sequence, checked_arguments
from ..io import InputFormat
from ..io.frames import FRAME_KINDS, frame_kind, frame_name, frame_table, table_blocks
from ..io.items import ReadSummary
from ..pipelines import with_left_out
from ..protocols import registry
from ..protocols.kinds import ResultKind
from .users import check_bounding

DEFAULT_DOMAIN = 2**24  # as the command line's --domain for a hashed protocol


@checked_arguments
def estimate(data: Any, protocol: str, *, item: str | None = None, columns: Sequence[str] | None = None,
             epsilon: float, delta: float | None = None, domain_size: int | None = None,
             candidates: Sequence[Any] | None = None, top: int | None = None, seed: int | None = None,
             evaluate: bool | None = None, missing: str = "error", item_type: str = "auto",
             calibration: str | None = None, hash_key: str | None = None, full_domain: bool | None = None,
             mode: str = "faithful", phi: float | None = None, max_length: int | None = None,
             user: str | None = None, max_items: int = 1, max_rows: int | None = None, delimiter: str | None = None,
             header: bool = True, **options: Any):
    """Simulate ``protocol`` over ``data``'s column ``item`` (frequencies, heavy hitters) or ``columns`` (a vector
    sum: one row a user, every column a coordinate in [0, 1]); returns the report ``privagg estimate`` writes
    (``EstimateReport``, ``HeavyHitterReport`` or ``VectorEstimateReport``), with ``to_pandas()``,
    ``to_polars()`` and ``plot()``.

    ``data``: a pandas DataFrame, a Polars DataFrame or LazyFrame (only the named columns are collected), or the
    path of a Parquet file (streamed) or of a folder of Parquet files (a dataset), or of any file ``--input``
    reads. ``domain_size``: B for hashed and small-domain protocols (text is hashed into [B]; default 2^24 where
    the protocol allows); ``delimiter``, ``header``: how a delimited ``data`` file is read (as ``--delimiter``,
    ``--no-header``); ``candidates``: public items to estimate (a categorical protocol's list of categories).
    ``options``: the protocol's own (``REGISTRY[protocol].options``). ``missing="drop"`` leaves out the users
    without a value, and the report then says it is not private (docs/privacy.md, "Missing values").

    ``user``: the column naming each row's user, for data with many rows a user (an event log; also a CSV, TSV
    or Parquet ``data`` file, streamed and grouped in bounded memory): the privacy unit is then the user, n the
    number of distinct users, and ``epsilon``, ``delta`` the user's guarantee (docs/privacy.md, "Many rows a
    user"). Items: each user's rows bounded to ``max_items`` = L distinct items chosen uniformly at random with
    the run's randomness, the protocol run over L reports a user (padded), its per-report budget what the
    composition leaves (:mod:`privagg.privacy.composition`; ``plan`` shows it beforehand); fe-hh runs at phi / L
    over the n L reports, so that heavy still means held by phi n users among their bounded items. Vectors: a user's
    rows summed and clipped to [0, 1]^d (the sparse protocols: weights summed per coordinate and clipped, one
    coordinate a user), or ``max_rows`` = R rows (coordinates) a user sampled, R reports a user.
    """
    entry = registry.get(protocol)
    if columns is not None:
        columns = [str(c) for c in check_sequence("columns", columns, "a list of column names")]
    if candidates is not None:
        candidates = list(check_sequence("candidates", candidates, "a list of public items"))
    kind = frame_kind(data)
    if kind is None:
        raise ParameterError("data", FRAME_KINDS, type(data).__name__)
    check_instance("header", header, bool, "True or False (whether a delimited file's first line names its columns)")
    if delimiter is not None:
        check_instance("delimiter", delimiter, str, "one character (a delimited file's), or None")
    fmt = InputFormat(item_type, item, delimiter, header, missing)
    if user is None:
        for name, value in (("max_items", None if max_items == 1 else max_items), ("max_rows", max_rows)):
            if value is not None:
                raise ParameterError(name, f"left out for {protocol} without user= (one row a user)", value)
    else:
        max_items, max_rows = check_bounding(entry, max_items, max_rows)
        if kind == "file":
            from .users import user_table

            user_table(Path(data), fmt, user)
    unused = {}
    if entry.result is not ResultKind.HEAVY_HITTER_LIST:
        unused.update(phi=phi, max_length=max_length)
    else:  # fe-hh's run takes none of these (a reviewer's finding: honest_fraction, top, candidates, mode ignored)
        unused.update(candidates=candidates, top=top, mode=None if mode == "faithful" else mode, **options)
    if entry.result is not ResultKind.FREQUENCY_TABLE:
        unused.update(hash_key=hash_key, full_domain=full_domain, top=top)
    for name, value in unused.items():  # an argument this protocol's run does not read is refused, not ignored
        if value is not None:
            raise ParameterError(name, f"left out for {protocol}", value)
    if delta is None and entry.pure:  # pure eps-DP: no delta to give (calibrate and plan take it so)
        delta = 0.0
    if user is not None and entry.result is ResultKind.VECTOR_SUM:
        if item is not None:
            raise ParameterError("item", f"left out for {protocol} (a vector sum: columns=[...], the coordinates)",
                                 item)
        from .user_vectors import vectors_by_user

        return vectors_by_user(entry, data, kind, columns, fmt, user, max_rows, epsilon=epsilon, delta=delta,
                               calibration=calibration, seed=seed, evaluate=evaluate, domain_size=domain_size,
                               candidates=candidates, mode=mode, **options)
    if entry.result is ResultKind.VECTOR_SUM:
        if item is not None:
            raise ParameterError("item", f"left out for {protocol} (a vector sum: columns=[...], the coordinates)",
                                 item)
        return _vector_estimate(entry, data, kind, columns, fmt, epsilon=epsilon, delta=delta, calibration=calibration,
                                seed=seed, evaluate=evaluate, domain_size=domain_size, candidates=candidates,
                                mode=mode, options=options)
    if columns is not None:
        raise ParameterError("columns", f"left out for {protocol} (items: item=, one column)", list(columns))
    if item is None:
        raise ParameterError.required("item", "the name of the column of items, one row a user")
    source = _source(data, item)
    if entry.result is ResultKind.HEAVY_HITTER_LIST:
        return _heavy_hitters(data, kind, fmt, source, user=user, max_items=max_items, epsilon=epsilon, delta=delta,
                              phi=phi, domain_size=domain_size, max_length=max_length, calibration=calibration,
                              seed=seed, evaluate=evaluate)
    return _frequencies(entry, data, kind, fmt, source, user=user, max_items=max_items, epsilon=epsilon, delta=delta,
                        domain_size=domain_size, candidates=candidates, top=10 if top is None else top, seed=seed,
                        evaluate=evaluate, calibration=calibration, hash_key=hash_key, full_domain=full_domain,
                        mode=mode, options=options)


def _source(data: Any, *columns: str) -> str:
    """How errors and the report name the input: "column 'app' of a pandas DataFrame", or of the path."""
    return f"column{'s' if len(columns) > 1 else ''} {', '.join(map(repr, columns))} of {frame_name(data)}"


def _item_encoder(entry, domain_size: int | None, candidates, hash_key: str | None, seed: int | None, item_type: str):
    """As the command line's: a categorical protocol's public categories (or integers in [0, N)), a small-domain
    protocol's B (required), else B (default 2^24) with the run's item-hash key."""
    from .frequency import item_encoder

    if entry.categorical:
        if candidates is not None:
            encoder = CategoryEncoder([str(c) for c in candidates])
            if domain_size not in (None, encoder.domain_size):
                raise ParameterError("domain_size", f"left out, or the number of categories listed "
                                     f"({encoder.domain_size})", domain_size)
            return encoder
        if domain_size is None or item_type == "str":
            raise ParameterError("candidates", "given for text items (the public list of the N categories), or "
                                 "domain_size=N for integer items in [0, N)", None)
        return CategoryEncoder(domain_size)
    if domain_size is None and entry.small_domain:
        raise ParameterError.required("domain_size", f"for {entry.name}: B, the number of possible items (its "
                                      "messages or its error grow with B; text is hashed into [B])")
    return item_encoder(DEFAULT_DOMAIN if domain_size is None else domain_size, hash_key, seed)


def _frequencies(entry, data, kind: str, fmt: InputFormat, source: str, *, domain_size, candidates, options,
                 hash_key, seed, user, max_items, epsilon, delta, top, evaluate, **run: Any):
    from ..io import read_codes
    from ..io.items import encode_blocks
    from .frequency import estimate_frequencies
    from ..reports import shared_code_warnings
    from .users import budget, padded, read_grouped, stated_of_users

    if user is not None and max_items > 1 and domain_size is None and not (entry.categorical or entry.small_domain):
        domain_size = DEFAULT_DOMAIN - 1  # items hashed into [2^24 - 1], the last code the unused slots'
    encoder = _item_encoder(entry, domain_size, candidates, hash_key, seed, fmt.item_type)
    grouped, per = None, None
    if user is not None:
        grouped = read_grouped(data, kind, fmt, user, encoder, max_items, encoder.domain_size, seed,
                               str(data) if kind == "file" else source)
        read = ReadSummary(grouped.codes.ravel())
        _check_users("user", grouped.n_users, 0, str(data) if kind == "file" else _source(data, user))
        source = str(data) if kind == "file" else source
        per = budget(entry, epsilon, delta, max_items)
        epsilon, delta = per.epsilon, per.delta
    elif kind == "file":
        read = read_codes(data, encoder, fmt, field="data")
        source = str(data)
    else:
        table = frame_table(data, [fmt.column], ["item"])
        read = encode_blocks(table_blocks(table, fmt.column), encoder, fmt, "item", source)
    _check_users("data" if kind == "file" else "item", read.codes.size // max_items, read.dropped, source)
    candidate_codes = None
    if candidates is not None and not entry.categorical:
        candidate_codes = encoder.encode(_like_items(encoder, list(candidates)), field="candidates", public=True)
    pad = encoder.domain_size if user is not None and max_items > 1 else None
    if user is not None and kind == "file":  # the grouped reports' run checked as a file's before it is read
        from .frequency import check_resources

        check_resources(entry.name, data, fmt, epsilon=epsilon, delta=delta, domain_size=encoder.domain_size +
                        (pad is not None), calibration=run["calibration"], options=options, mode=run["mode"],
                        full_domain=run["full_domain"], candidates=candidates is not None, n_users=read.codes.size)
    report, _ = estimate_frequencies(entry.name, read.codes, encoder if pad is None else padded(encoder, pad),
                                     candidate_codes=candidate_codes, seed=seed, input_name=source, options=options,
                                     epsilon=epsilon, delta=delta, top=top + (pad is not None), evaluate=evaluate,
                                     **run)
    if user is not None:
        evaluated = seed is not None if evaluate is None else evaluate
        used = encoder if pad is None else padded(encoder, pad)
        stale = shared_code_warnings(report.estimates, used, read.codes.size)
        stated_of_users(report, grouped.n_users, grouped.truncated, per, evaluated, None if pad is None else
                        used.label(pad))
        report.estimates = report.estimates[:top]  # the strings hashed: the n users' L reports, over the B codes
        report.warnings = [w for w in report.warnings if w not in stale] + shared_code_warnings(
            report.estimates, encoder, grouped.n_users, max_items)
    return with_left_out(report, read.dropped)


def _heavy_hitters(data, kind: str, fmt: InputFormat, source: str, *, max_length, user, max_items, **run: Any):
    import numpy as np

    from ..io import read_items
    from ..io.items import typed_items
    from ..protocols.registry import DEFAULT_MAX_LENGTH
    from .heavy_hitters import estimate_heavy_hitters
    from .users import DistinctValues, budget, read_grouped, stated_of_users

    grouped, unused = None, None
    if user is not None:
        distinct = DistinctValues(run["domain_size"])
        grouped = read_grouped(data, kind, fmt, user, distinct, max_items, distinct.PAD, run["seed"],
                               str(data) if kind == "file" else source)
        codes = grouped.codes.ravel()
        unused = codes == distinct.PAD
        _check_users("user", grouped.n_users, 0, str(data) if kind == "file" else _source(data, user))
        values, dropped = distinct.values_of(np.where(unused, 0, codes)), 0
        source = str(data) if kind == "file" else source
    elif kind == "file":
        values, dropped = read_items(data, fmt, field="data")
        source = str(data)
    else:
        table = frame_table(data, [fmt.column], ["item"])
        values, dropped = typed_items(table_blocks(table, fmt.column), fmt, "item", source,
                                      lambda i: f"value {i + 1} of {source}")
    _check_users("data" if kind == "file" else "item", len(values) // max_items, dropped, source)
    strings = isinstance(values, list) and values and isinstance(values[0], str)
    if strings and max_length is None:
        max_length = DEFAULT_MAX_LENGTH
    if not strings and max_length is not None:
        raise ParameterError("max_length", "left out for integer items (domain_size B sets their range)", max_length)
    if run["calibration"] is None:
        run["calibration"] = registry.get("fe-hh").calibrations[0]
    per, slot = None, None
    if user is not None:
        per = budget(registry.get("fe-hh"), run["epsilon"], run["delta"], max_items)
        run.update(epsilon=per.epsilon, delta=per.delta)
    if max_items > 1:  # the n L reports: unused slots padded, heavy still phi n of the n users (docs/privacy.md)
        values, run["domain_size"], run["phi"], slot = registry.get("fe-hh").parameters.padded(
            values, unused, run["domain_size"], max_length, run["phi"], max_items)
    report, _ = estimate_heavy_hitters(values, max_length=max_length, input_name=source, unused_slot=slot,
                                       max_items=max_items, **run)
    if user is not None:
        evaluate = run["seed"] is not None if run["evaluate"] is None else run["evaluate"]
        stated_of_users(report, grouped.n_users, grouped.truncated, per, evaluate)
    if max_items > 1:
        report.warnings.insert(1, f"fe-hh ran over the {len(values):,} reports ({max_items} a user, a user's unused "
                               f"slots padded with a value no item is, left out of the list) at phi / L = "
                               f"{run['phi']:.4g}: the threshold phi n counts users")
    return with_left_out(report, dropped)


def _vector_estimate(entry, data, kind: str, columns, fmt: InputFormat, *, domain_size, candidates, **run: Any):
    from ..io import read_vectors_counted
    from ..io.vectors import _numeric_table
    from .frequency import estimate_vector_sum

    if kind == "file":
        if columns is not None:
            raise ParameterError("columns", "left out for a file (every column of the table is a coordinate)",
                                 list(columns))
        inputs, dropped = read_vectors_counted(data, fmt, field="data")
        source = str(data)
    else:
        if not columns:
            raise ParameterError.required("columns", "the names of the columns of the users' vectors (the sparse "
                                          "protocols: the coordinate and the weight), one row a user")
        source = _source(data, *columns)
        table = frame_table(data, columns, ["columns"] * len(columns))
        inputs, dropped = _numeric_table(table, None, source, "columns", fmt.missing)
    _check_users("data" if kind == "file" else "columns", len(inputs), dropped, source)
    if entry.one_sparse and domain_size is None:
        raise ParameterError.required("domain_size", "B, the public number of coordinates (the (coordinate, weight) "
                                      "rows must lie in [0, B))")
    coordinates = None if candidates is None else _integers("candidates", candidates)
    report, _ = estimate_vector_sum(entry.name, inputs, dimension=domain_size, candidates=coordinates,
                                    input_name=source, **run)
    return with_left_out(report, dropped)


def _like_items(encoder, candidates: list) -> list:
    """Candidates read as text (a file's lines: the command line's --candidates) as integers where the items were
    integers."""
    if encoder.kind != "integer" or not all(isinstance(c, str) for c in candidates):
        return candidates
    try:
        return [int(c) for c in candidates]
    except ValueError:
        bad = next(c for c in candidates if not c.strip().lstrip("+-").isdigit())
        raise ParameterError("candidates", "integers, like the input's items", repr(bad)) from None


def _integers(field: str, values) -> Any:
    import numpy as np

    array = np.asarray(list(values))
    if array.ndim != 1 or not np.issubdtype(array.dtype, np.integer):
        raise ParameterError(field, "a list of integer coordinates", repr(list(values))[:60])
    return array.astype(np.int64)


def _check_users(field: str, n: int, dropped: int, source: str) -> None:
    """An empty column (or one whose every value was missing and dropped) is named before any calibration."""
    if n < 2:
        left = f", after {dropped} missing values dropped" if dropped else ""
        raise ParameterError(field, "at least 2 users with a value", f"{n} in {source}{left}")

