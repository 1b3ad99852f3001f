"""Reading users' items and candidate lists from CSV, Parquet or plain text.

* ``.parquet``: a column of a Parquet file (Arrow).
* ``.csv``: a column of a CSV file with a header row (Arrow's CSV reader).
* anything else: plain text, one item per line; blank lines are skipped; a
  file whose every line is an integer holds integer items.

A file with a single column needs no ``column``. Items come back as an Arrow
array, which :class:`privagg.core.encoding.ItemEncoder` encodes.
"""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv
import pyarrow.parquet as pq

from .errors import ParameterError


def read_items(path: str | Path, column: str | None = None, field: str = "input") -> pa.ChunkedArray:
    """The items in ``path`` (one per user), from ``column`` if the file has several."""
    path = Path(path)
    try:
        suffix = path.suffix.lower()
        if suffix == ".parquet":
            table = pq.read_table(path)
        elif suffix == ".csv":
            table = pacsv.read_csv(path)
        else:
            if column is not None:
                raise ParameterError("column", "left out for a plain-text file (one item per line)", column)
            return _read_lines(path)
    except (OSError, pa.ArrowException, UnicodeDecodeError) as err:
        raise ParameterError(field, "a readable CSV, Parquet or text file", f"{path} ({err})") from None
    if column is None:
        if table.num_columns != 1:
            raise ParameterError("column", f"one of {table.column_names} (the file has several columns)", None)
        return table.column(0)
    if column not in table.column_names:
        raise ParameterError("column", f"one of {table.column_names}", column)
    return table.column(column)


def _read_lines(path: Path) -> pa.ChunkedArray:
    lines = [line.strip() for line in path.read_text(encoding="utf-8").splitlines()]
    items = pa.chunked_array([pa.array([line for line in lines if line], type=pa.string())])
    try:
        return pc.cast(items, pa.int64())
    except pa.ArrowInvalid:
        return items
