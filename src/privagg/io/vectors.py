"""The users' vectors: an (n, d) .npy array mapped from the file, or every column of a CSV, TSV or Parquet table,
with rows of missing values refused or left out (:mod:`privagg.io`)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from ..errors import ParameterError
from .blocks import NUMBER, _cut, _matches, _other_delimiter
from .files import BLOCK_BYTES, DELIMITERS, InputFormat, _unreadable, checked_file, file_kind

if TYPE_CHECKING:
    import pyarrow as pa


def read_vectors(path: str | Path, fmt: InputFormat = InputFormat(), field: str = "input") -> np.ndarray:
    """Users' vectors, one row each: an (n, d) ``.npy`` array, or every column of a CSV, TSV or Parquet table
    (a header line names the columns, as for items). Values must be numbers; the protocol checks their range.

    A row with an empty cell, or a blank line, is missing, as for items: ``fmt.missing="error"`` (default)
    stops at the first, naming its line; ``"drop"`` leaves it out (:func:`read_vectors_counted` says how many).
    NaN is a value, not a missing one. A float32 ``.npy`` array stays float32 as it was loaded (no copy: every
    float32 is a float64 exactly, and the randomizer converts only the values it picks); others are float64."""
    return read_vectors_counted(path, fmt, field)[0]


def load_npy(path: Path) -> np.ndarray:
    """A .npy array mapped from the file, not read into fresh memory (no pickles): the pages come from the page
    cache as they are used, and a write (``--clip``) copies the page it touches, never the file (copy on write).
    The file must stay as it is while the command runs."""
    return np.asarray(np.load(path, allow_pickle=False, mmap_mode="c"))


def read_vectors_counted(path: str | Path, fmt: InputFormat = InputFormat(),
                         field: str = "input") -> tuple[np.ndarray, int]:
    """(:func:`read_vectors`, how many rows with a missing value ``fmt.missing="drop"`` left out)."""
    path = Path(path)
    kind = file_kind(path, fmt)
    if kind == "text":
        raise ParameterError(field, "a .npy array, or a CSV, TSV or Parquet table of vectors (one row a user)", path)
    checked_file(path, field, kind)
    if kind == "npy":  # without Arrow, whose import a .npy does not need
        try:
            array, dropped = load_npy(path), 0
        except (OSError, EOFError, ValueError) as err:
            raise _unreadable(path, kind, field, err) from None
    else:
        array, dropped = _read_table(path, kind, fmt, field)
    if array.ndim != 2 or not np.issubdtype(array.dtype, np.number):
        raise ParameterError(field, "an (n, d) array of numbers, one row a user", f"shape {array.shape} of "
                             f"{array.dtype}")
    return (array if array.dtype == np.float32 else array.astype(np.float64, copy=False)), dropped


def _read_table(path: Path, kind: str, fmt: InputFormat, field: str) -> tuple[np.ndarray, int]:
    """A CSV, TSV or Parquet table of vectors: (:func:`_numeric_table`)."""
    import pyarrow as pa

    try:
        return _numeric_table(*_load_table(path, kind, fmt), path, field, fmt.missing)
    except ParameterError:
        raise
    except (OSError, EOFError, ValueError, pa.ArrowException) as err:
        raise _unreadable(path, kind, field, err) from None


def _load_table(path: Path, kind: str, fmt: InputFormat) -> tuple[pa.Table, int | None]:
    """(a CSV, TSV or Parquet table, the file line of its row 0: None for Parquet, whose rows count from 1)."""
    import pyarrow as pa
    import pyarrow.csv as pacsv
    import pyarrow.parquet as pq

    if kind == "parquet":
        return pq.read_table(path), None
    delimiter = fmt.delimiter or DELIMITERS[path.suffix.lower()]
    # a blank line is a user with nothing, not a line to skip silently (Arrow's default)
    table = pacsv.read_csv(path, read_options=pacsv.ReadOptions(autogenerate_column_names=not fmt.header,
                                                                block_size=BLOCK_BYTES),
                           parse_options=pacsv.ParseOptions(delimiter=delimiter, ignore_empty_lines=False),
                           convert_options=pacsv.ConvertOptions(null_values=[""]))  # NaN is a value
    names = table.column_names
    # a first line of numbers is a user's vector, not a header (it was dropped, one user less): refused as for
    # items, but for the column numbers 0..d-1 that a table written from an array carries (pandas' to_csv)
    if fmt.header and names != [str(i) for i in range(len(names))] and _matches(pa.array(names), NUMBER).any():
        first = delimiter.join(names)
        raise ParameterError("input", "a table with a header line (give --no-header if it has none)",
                             f"{path}, whose first line {_cut(first)} looks like data")
    return table, 2 if fmt.header else 1


def _empty_rows(table: pa.Table) -> np.ndarray:
    """The rows of ``table`` with a missing cell (a blank line: all of them)."""
    empty = np.zeros(table.num_rows, dtype=bool)
    for column in table.columns:
        if column.null_count:
            empty |= column.is_null().to_numpy(zero_copy_only=False)
    return empty


def _numeric_table(table: pa.Table, first_line: int | None, path: Path, field: str,
                   missing: str = "error") -> tuple[np.ndarray, int]:
    """(the table's columns as an (n, d) float array, rows left out): a column that is not numeric is named;
    a row with a missing cell (a blank line: all of them) is an error naming its line (``first_line``: the
    file line of row 0; None: rows counted from 1), or with ``missing="drop"`` left out and counted."""
    import pyarrow as pa

    for name, column in zip(table.column_names, table.columns):
        if column.null_count == column.length() and column.length() and pa.types.is_null(column.type):
            pass  # every cell of the column missing: reported below, row by row
        elif not (pa.types.is_integer(column.type) or pa.types.is_floating(column.type)):
            other = _other_delimiter("", table.column_names) if first_line is not None else None
            hint = f" (read as one column whose header holds {other!r}: give --delimiter {other!r})" if other else ""
            raise ParameterError(field, f"numbers in every column of {path}",
                                 f"column {_cut(name)} of type {column.type}{hint}")
    empty = _empty_rows(table)
    if empty.any():
        if missing != "drop":
            row = int(np.flatnonzero(empty)[0])
            where = f"row {row + 1}" if first_line is None else f"line {row + first_line}"
            blank = all(c.is_null().to_numpy(zero_copy_only=False)[row] for c in table.columns)
            raise ParameterError(field, "a value in every cell (--missing drop leaves such rows out)",
                                 f"{'a blank line' if blank else 'an empty cell'} on {where} of {path}")
        table = table.filter(pa.array(~empty))
    array = np.column_stack([c.to_numpy(zero_copy_only=False).astype(np.float64) for c in table.columns]) \
        if table.num_columns else np.empty((table.num_rows, 0))
    return array, int(empty.sum())


def clip_vectors(values) -> np.ndarray:
    """The explicit clip to [0, 1] (``--clip``); NaN stays an error."""
    array = np.asarray(values, dtype=np.float64)
    if np.isnan(array).any():
        row, column = (int(i) for i in np.argwhere(np.isnan(array))[0])
        raise ParameterError("vector", "numbers (NaN cannot be clipped)", f"NaN in coordinate {column}", row)
    return np.clip(array, 0.0, 1.0)
