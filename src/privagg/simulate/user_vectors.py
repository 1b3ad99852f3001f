"""Vector sums over many rows a user (issue 49; docs/privacy.md, "Many rows a user"): a user's rows summed and
clipped to [0, 1]^d, one vector a user and the protocol's guarantee with the user as the unit; or ``max_rows``
= R of his rows sampled uniformly at random, R reports a user (padded with zero vectors, which add nothing),
and the guarantee composed over them (:mod:`privagg.privacy.composition`). The sparse protocols' (coordinate,
weight) rows: a user's weights summed per coordinate and clipped to [0, 1], then R of his coordinates (1 by
default) sampled, padded with weight-0 rows."""

from __future__ import annotations

from typing import Any

import numpy as np

from ..errors import ParameterError
from ..io import InputFormat


def vectors_by_user(entry, data, kind: str, columns, fmt: InputFormat, user: str, max_rows: int | None, *,
                    domain_size, candidates, seed, evaluate, epsilon: float, delta: float, calibration, mode: str,
                    **options: Any):
    from ..io.users import RECORD, bound_codes, user_keys
    from .frames import _check_users, _integers, _source
    from .frequency import estimate_vector_sum
    from .users import budget, bounding_rng, stated_of_users

    table, source = _user_table(data, kind, columns, fmt, user)
    of_users = source if kind == "file" else _source(data, user)  # how errors of the user column name it
    users = table.column(user).combine_chunks()
    if users.null_count:
        row = int(np.flatnonzero(users.is_null().to_numpy(zero_copy_only=False))[0])
        raise ParameterError("user", "a user on every row", f"nothing on row {row + 1} of {of_users}")
    keys = user_keys(users)
    inputs, keys = _vectors(table.drop_columns([user]), keys, fmt, source, "data" if kind == "file" else "columns")
    sparse = entry.one_sparse
    _check_rows(inputs[:, 1:] if sparse else inputs, 1 if sparse else 0, source, fmt.missing == "drop")
    if sparse and domain_size is None:
        raise ParameterError.required("domain_size", "B, the public number of coordinates (the (coordinate, weight) "
                                      "rows must lie in [0, B))")
    from ..io.users import run_key

    if sparse:
        pool, owners, clipped = _per_coordinate(inputs, keys, domain_size)
        reports = max_rows or 1
    elif max_rows is None:
        pool, owners, clipped = _summed(inputs, keys)
        reports = 1
    else:
        pool, owners, clipped = inputs, keys, 0
        reports = max_rows
    # R of each user's pooled rows by a keyed hash of (user, row), padded with a zero row (index len(pool))
    records = np.empty(len(pool), dtype=RECORD)
    records["user"], records["code"] = owners, np.arange(len(pool))
    chosen, truncated, _ = bound_codes(records, reports, len(pool), run_key(bounding_rng(seed)))
    padded = np.vstack([pool, np.zeros((1, pool.shape[1]))])[chosen.ravel()]
    n = len(chosen)
    _check_users("user", n, 0, of_users)
    per = budget(entry, epsilon, delta, reports)
    coordinates = None if candidates is None else _integers("candidates", candidates)
    report, _ = estimate_vector_sum(entry.name, padded, epsilon=per.epsilon, delta=per.delta, seed=seed,
                                    evaluate=evaluate, dimension=domain_size, candidates=coordinates,
                                    input_name=source, calibration=calibration, mode=mode, options=options)
    what = (f"weights summed per coordinate and clipped to [0, 1], then {reports} coordinate(s) a user sampled "
            "uniformly at random" if sparse else "summed and clipped to [0, 1]^d" if max_rows is None else
            f"at most R = {reports} rows, sampled uniformly at random among the user's rows, padded with zero vectors")
    evaluated = seed is not None if evaluate is None else evaluate
    stated_of_users(report, n, None if max_rows is None and not sparse else truncated, per, evaluated, what=what)
    if evaluated and (sparse or max_rows is None):
        report.warnings.insert(1, f"{clipped} users' sums were clipped to [0, 1] (--evaluate: a count of the data)")
    return report


def _user_table(data, kind: str, columns, fmt: InputFormat, user: str):
    """(the table of the vectors' columns and the user's, how errors name it)."""
    from ..io.frames import frame_table
    from ..io.vectors import _load_table
    from .frames import _source

    if kind != "file":
        if not columns:
            raise ParameterError.required("columns", "the names of the columns of the users' vectors (the sparse "
                                          "protocols: the coordinate and the weight)")
        return frame_table(data, [*columns, user], ["columns"] * len(columns) + ["user"]), _source(data, *columns)
    if columns is not None:
        raise ParameterError("columns", "left out for a file (every column but the user's is a coordinate)",
                             list(columns))
    from pathlib import Path

    from .users import user_table

    path = Path(data)
    table, _ = _load_table(path, user_table(path, fmt, user), fmt)
    if user not in table.column_names:
        raise ParameterError("user", f"one of the table's columns ({', '.join(table.column_names)})", user)
    return table, str(path)


def _vectors(table, keys: np.ndarray, fmt: InputFormat, source: str, field: str):
    """(the rows as an (m, d) float array, each row's user key): with ``missing="drop"`` a row with an empty cell
    is left out, and a user left with no row is an error naming the user argument."""
    from ..io.vectors import _empty_rows, _numeric_table

    if fmt.missing == "drop":
        keep = ~_empty_rows(table)
        lost = np.setdiff1d(keys, keys[keep]).size
        if lost:
            raise ParameterError("user", "users with a row without missing cells at least (missing drop leaves "
                                 "out rows; a user with none would be left out, and n would count the data)",
                                 f"{lost} users with none in {source}")
        import pyarrow as pa

        table, keys = table.filter(pa.array(keep)), keys[keep]
    inputs, _ = _numeric_table(table, None, source, field, "error")
    return inputs, keys


def _check_rows(values: np.ndarray, first: int, source: str, dropped: bool) -> None:
    """Every row's values (the weights of (coordinate, weight) rows: ``first`` 1) in [0, 1], finite, before a
    user's rows are summed and the sum clipped: a row outside, summed, cancelled his other rows or became 1 in
    silence (a reviewer's run: -3 and inf taken), where the same row without a user column is an error."""
    bad = ~np.isfinite(values) | (values < 0) | (values > 1)
    if bad.any():
        row, column = (int(i) for i in np.argwhere(bad)[0])
        raise ParameterError("vector", "values in [0, 1] on every row (a user's rows are summed, and the sum "
                             "clipped, only once each row is)", f"{float(values[row, column])!r} in column "
                             f"{column + first} on data row {row + 1} of {source} (counted from 1"
                             f"{', among the rows --missing drop kept' if dropped else ''})")


def _summed(inputs: np.ndarray, keys: np.ndarray):
    """(each user's rows summed and clipped to [0, 1]^d, one row a user in key order; the users' keys; how many
    users had a sum clipped)."""
    order = np.argsort(keys, kind="stable")
    keys, inputs = keys[order], inputs[order]
    starts = np.flatnonzero(np.r_[True, keys[1:] != keys[:-1]])
    sums = np.add.reduceat(inputs, starts, axis=0)
    clipped = int(((sums > 1) | (sums < 0)).any(axis=1).sum())
    return np.clip(sums, 0, 1), keys[starts], clipped


def _per_coordinate(inputs: np.ndarray, keys: np.ndarray, domain_size: int):
    """(a user's (coordinate, weight) rows combined per coordinate, weights summed and clipped to [0, 1]; their
    users' keys; how many users had a weight clipped). A coordinate outside [0, B) stays the protocol's error."""
    coordinates = inputs[:, 0]
    whole = np.isfinite(coordinates) & (coordinates == np.floor(coordinates)) & (coordinates >= 0) & \
        (coordinates < domain_size)
    if not whole.all():
        return inputs, keys, 0  # the protocol names the first bad row
    codes = coordinates.astype(np.int64)
    order = np.lexsort((codes, keys))
    keys, codes, weights = keys[order], codes[order], inputs[order, 1]
    starts = np.flatnonzero(np.r_[True, (keys[1:] != keys[:-1]) | (codes[1:] != codes[:-1])])
    sums = np.add.reduceat(weights, starts)
    over = (sums > 1) | (sums < 0)
    clipped = np.unique(keys[starts][over]).size
    return np.column_stack([codes[starts].astype(np.float64), np.clip(sums, 0, 1)]), keys[starts], int(clipped)
