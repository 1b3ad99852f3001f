"""Reading users' items and candidate lists from CSV, Parquet or plain text.

* ``.parquet``: a column of a Parquet file (Arrow).
* ``.csv``: a column of a UTF-8 CSV file with a header row (Arrow's CSV
  reader); an empty cell is a missing value, which the encoder refuses.
* anything else: UTF-8 plain text, one item per line; blank lines are
  skipped. If the first item is an integer, every item must be one.

A file with a single column needs no ``column``. Items come back as an Arrow
array, which :class:`privagg.core.encoding.ItemEncoder` encodes.
"""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq

from .errors import ParameterError

READABLE = "a readable CSV, Parquet or UTF-8 text file"


def read_items(path: str | Path, column: str | None = None, field: str = "input") -> pa.ChunkedArray:
    """The items in ``path`` (one per user), from ``column`` if the file has several."""
    path = Path(path)
    suffix = path.suffix.lower()
    if suffix not in (".parquet", ".csv") and column is not None:
        raise ParameterError("column", "left out for a plain-text file (one item per line)", column)
    try:
        if suffix == ".parquet":
            table = pq.read_table(path)
        elif suffix == ".csv":
            table = pacsv.read_csv(path, convert_options=pacsv.ConvertOptions(strings_can_be_null=True))
        else:
            return _read_lines(path, field)
    except (OSError, pa.ArrowException, UnicodeDecodeError) as err:
        raise ParameterError(field, READABLE, f"{path} ({err})") from None
    if column is None:
        if table.num_columns != 1:
            raise ParameterError("column", f"one of {table.column_names} (the file has several columns)", None)
        column = table.column_names[0]
    if column not in table.column_names:
        raise ParameterError("column", f"one of {table.column_names}", column)
    items = table.column(column)
    if suffix == ".csv" and pa.types.is_binary(items.type):  # Arrow's CSV reader falls back to bytes
        raise ParameterError(field, READABLE, f"{path} (column {column!r} is not valid UTF-8)")
    return items


def _read_lines(path: Path, field: str) -> pa.ChunkedArray:
    lines = [(number, line.strip()) for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)]
    lines = [(number, line) for number, line in lines if line]
    if lines and _is_integer(lines[0][1]):
        for number, line in lines:
            if not _is_integer(line):
                raise ParameterError(field, f"{READABLE} with an integer on every line, like its first",
                                     f"line {number} of {path}: {line!r}")
        return pa.chunked_array([pa.array([int(line) for _, line in lines], type=pa.int64())])
    return pa.chunked_array([pa.array([line for _, line in lines], type=pa.string())])


def _is_integer(text: str) -> bool:
    try:
        return -(2**63) <= int(text) < 2**63
    except ValueError:
        return False
