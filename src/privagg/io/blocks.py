"""One column of a text, CSV, TSV or Parquet file, streamed in blocks of strings that know the file line (or row)
each value came from: the header, the column, a delimiter that is not the extension's, missing values
(:mod:`privagg.io`)."""

from __future__ import annotations

import csv
import io
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from ..errors import ParameterError
from .files import BLOCK_BYTES, DELIMITERS, LIKELY_DELIMITERS, LONGEST_LINE, InputFormat, _first_invalid_utf8, _unreadable

if TYPE_CHECKING:
    import pyarrow as pa


TEXT_SEPARATOR = "\x1f"  # a control character no text line holds: plain text is read as a one-column table
CANONICAL_INTEGER = r"^[+-]?[0-9]+\z"
NUMBER = r"^[+-]?([\p{Nd}_]*\p{Nd}[\p{Nd}_]*(\.[\p{Nd}_]*)?|\.[\p{Nd}_]*\p{Nd}[\p{Nd}_]*)([eE][+-]?\p{Nd}+)?\z"


@dataclass
class _Block:
    """A block of values and where each came from: a file line, or a row counted from 1."""

    values: pa.Array
    first: int  # the line or row of the block's first value
    unit: str  # "line" or "row"
    capacity: int | None = None  # the file's row count, when its metadata gives it
    kept: np.ndarray | None = None  # positions in the block of the values left after dropping missing ones
    users: pa.Array | None = None  # each row's user (--user-column), beside its value

    def where(self, index: int, path: Path | str) -> str:
        position = index if self.kept is None else int(self.kept[index])
        return f"{self.unit} {self.first + position} of {path}"


def _blocks(path: Path, kind: str, fmt: InputFormat, field: str, user: str | None = None) -> Iterator[_Block]:
    """The blocks of ``fmt.column``, each with its rows' ``user`` column when given (:mod:`privagg.io.users`)."""
    if kind == "parquet":
        yield from _parquet_blocks(path, fmt, user)
    else:
        yield from _delimited_blocks(path, kind, fmt, field, user)


def _user_column(names: list[str], user: str | None, column: str) -> list[str]:
    """The columns to read: the item's, and the user's (--user-column, which must be another of ``names``)."""
    if user is None:
        return [column]
    if user not in names or user == column:
        what = f"one of {_shown([n for n in names if n != column])}" if len(names) > 1 else \
            "a column beside the items' (the table has one)"
        raise ParameterError("user", what, user)
    return [column, user]


def _parquet_blocks(path: Path, fmt: InputFormat, user: str | None = None) -> Iterator[_Block]:
    import pyarrow.parquet as pq

    file = pq.ParquetFile(path)
    names = file.schema_arrow.names
    column = _pick_column(names, fmt.column, header=True)
    row = 1
    for batch in file.iter_batches(columns=_user_column(names, user, column)):
        values = batch.column(column)
        yield _Block(values, row, "row", file.metadata.num_rows, users=None if user is None else batch.column(user))
        row += len(values)


def _delimited_blocks(path: Path, kind: str, fmt: InputFormat, field: str, user: str | None = None) -> Iterator[_Block]:
    """Text lines or one column of a delimited table, as strings, block by block."""
    import pyarrow as pa
    import pyarrow.csv as pacsv

    if kind == "text":
        if path.stat().st_size == 0:  # Arrow refuses an empty file; it holds no items
            return
        names, column, skip = ["item"], "item", 0
        parse = dict(delimiter=TEXT_SEPARATOR, quote_char=False, escape_char=False, ignore_empty_lines=False)
    else:
        delimiter = fmt.delimiter or DELIMITERS[path.suffix.lower()]
        first = _first_record(path, delimiter, field)
        if fmt.header:
            names, skip = first, 1
            if any(_looks_like_number(name) for name in (names if fmt.column is None else [fmt.column])):
                raise ParameterError("input", "a table with a header line (give --no-header if it has none)",
                                     f"{path}, whose first line {first!r} looks like data")
            if fmt.delimiter is None and fmt.column is None:
                _refuse_other_delimiter(path, delimiter, names, field)
            column = _pick_column(names, fmt.column, header=True)
        else:
            names, skip = [str(i) for i in range(len(first))], 0
            column = _pick_column(names, fmt.column, header=False)
        parse = dict(delimiter=delimiter, ignore_empty_lines=False)
    columns = _user_column(names, user, column)

    def reader(**handler):
        return pacsv.open_csv(
            path, read_options=pacsv.ReadOptions(column_names=names, skip_rows=skip, block_size=BLOCK_BYTES,
                                                 use_threads=False),  # threads hide a bad row's line number
            parse_options=pacsv.ParseOptions(**parse, **handler),
            convert_options=pacsv.ConvertOptions(include_columns=columns,
                                                 column_types=dict.fromkeys(columns, pa.string()), null_values=[""],
                                                 strings_can_be_null=True, quoted_strings_can_be_null=True))

    line = skip + 1
    try:
        # no Python handler in this reader: a generator left unfinished keeps it to the interpreter's exit, and
        # Arrow releasing a Python callback there aborted the process (a reviewer's finding: exit 134, 1 run in 10)
        for batch in reader():
            values = batch.column(column)
            yield _Block(values, line, "line", users=None if user is None else batch.column(user))
            line += len(values)
    except pa.ArrowInvalid:
        problem = _first_bad_row(reader)  # read again with a handler, to name the first bad row
        if problem is None:
            raise
        if problem == UNDECODABLE:
            raise _unreadable(path, kind, field, _first_invalid_utf8(path)) from None
        if kind == "text":  # the one way a text line splits
            problem = problem.split(":")[0] + " holds the control character U+001F"
        raise _unreadable(path, kind, field, problem) from None


UNDECODABLE = "not UTF-8"


def _first_bad_row(reader) -> str | None:
    """The first row with the wrong number of fields, as Arrow's handler sees it in a reader made by ``reader``
    (read to its error, and released, here), :data:`UNDECODABLE` when Arrow could not hand the handler a row
    that is not UTF-8, or None."""
    import pyarrow as pa

    bad_rows: list[str] = []

    def first_bad_row(row) -> str:
        """Arrow's handler for a row with the wrong number of fields: remember the first for the error."""
        if not bad_rows:
            shown = row.text if len(row.text) <= 60 else row.text[:57] + "..."
            bad_rows.append(f"line {row.number}: {row.expected_columns} field(s) expected, {row.actual_columns} "
                            f"found in {shown!r}")
        return "error"

    undecodable: list[BaseException] = []
    with _undecodable_rows(first_bad_row, undecodable):
        try:
            for _ in reader(invalid_row_handler=first_bad_row):
                pass
        except pa.ArrowInvalid:
            pass
    if undecodable and not bad_rows:
        return UNDECODABLE
    return bad_rows[0] if bad_rows else None


@contextmanager
def _undecodable_rows(handler, caught: list[BaseException]) -> Iterator[None]:
    """Arrow decodes a bad row for its handler; a row that is not UTF-8 fails there, and the error (which
    Arrow can only print, as a traceback) is kept in ``caught`` instead: the reading then fails, and says so."""
    previous = sys.unraisablehook

    def hook(unraisable) -> None:
        if unraisable.object is handler and isinstance(unraisable.exc_value, UnicodeDecodeError):
            caught.append(unraisable.exc_value)
        else:
            previous(unraisable)

    sys.unraisablehook = hook
    try:
        yield
    finally:
        if sys.unraisablehook is hook:
            sys.unraisablehook = previous


def _first_record(path: Path, delimiter: str, field: str) -> list[str]:
    """The first record of a delimited file (its header, or its first row), with a byte-order mark dropped."""
    try:
        with path.open("rb") as f:
            head = f.read(LONGEST_LINE + 1)
        cut = len(head) > LONGEST_LINE
        text = head[:LONGEST_LINE].decode("utf-8-sig", errors="ignore" if cut else "strict")
        if csv.field_size_limit() < LONGEST_LINE:  # a field may be as long as a line Arrow reads
            csv.field_size_limit(LONGEST_LINE)
        buffer = io.StringIO(text, newline="")
        record = next(csv.reader(buffer, delimiter=delimiter), None)
    except (OSError, UnicodeDecodeError) as err:
        raise _unreadable(path, "table", field, err) from None
    except csv.Error as err:
        raise _unreadable(path, "table", field, err if "field limit" in str(err) else str(err)) from None
    if cut and buffer.tell() >= len(text) and not text.endswith(("\n", "\r")):
        raise _unreadable(path, "table", field, f"a first line longer than {LONGEST_LINE // 2**20} MiB "
                          f"({LONGEST_LINE} bytes), the longest read")
    if not record:
        raise ParameterError(field, "a table with a first line", f"{path} (empty first line or empty file)")
    return record


def _cut(value, longest: int = 60) -> str:
    """A value for an error line: its repr, a long one cut short with its length."""
    shown = repr(value)
    return shown if len(shown) <= longest else shown[:longest - 3] + f"... ({len(str(value))} characters)"


def _shown(names: list[str], most: int = 20, longest: int = 40) -> str:
    """A list of column names for one line: long names and long lists cut short."""
    cut = [n if len(n) <= longest else n[:longest - 3] + f"... ({len(n)} characters)" for n in names[:most]]
    return ", ".join(repr(n) for n in cut) + (f", ... ({len(names)} names)" if len(names) > most else "")


def _other_delimiter(delimiter: str, names: list[str]) -> str | None:
    """The likely delimiter of a table read as one column whose header holds one (; tab |), else None."""
    if len(names) != 1:
        return None
    return next((d for d in LIKELY_DELIMITERS if d != delimiter and d in names[0]), None)


def _refuse_other_delimiter(path: Path, delimiter: str, names: list[str], field: str) -> None:
    """A ``;``-separated file named ``.csv`` would be one text column: say so instead."""
    other = _other_delimiter(delimiter, names)
    if other is not None:
        raise ParameterError(field, f"a table separated by {delimiter!r} (its extension's), or --delimiter for "
                             f"another", f"{path}, read as one column whose header {_cut(names[0])} holds "
                             f"{other!r}: give --delimiter {other!r} (or --column to read it as one column)")


def _pick_column(names: list[str], column: str | None, header: bool) -> str:
    duplicated = sorted({n for n in names if names.count(n) > 1})
    if header and duplicated:
        raise ParameterError("input", "a table whose column names are distinct", f"duplicated {_shown(duplicated)}")
    if column is None:
        if len(names) != 1:
            what = f"one of {_shown(names)}" if header else f"a 0-based index below {len(names)}"
            raise ParameterError.required("column", f"for a table of {len(names)} columns: --column, {what}")
        return names[0]
    if column not in names:
        what = f"one of {_shown(names)}" if header else f"a 0-based index below {len(names)} (--no-header)"
        raise ParameterError("column", what, column)
    return column


def _without_missing(block: _Block, fmt: InputFormat, field: str, path: Path) -> tuple[_Block, int]:
    values = block.values
    if values.null_count == 0:
        return block, 0
    present = values.is_valid()
    if fmt.missing == "error":
        first = int(np.flatnonzero(~present.to_numpy(zero_copy_only=False))[0])
        raise ParameterError(field, "a value for every user (an empty cell or line is missing; --missing drop "
                             "leaves those users out)", f"nothing on {block.where(first, path)}")
    keep = present.to_numpy(zero_copy_only=False)
    return _Block(values.filter(present), block.first, block.unit, kept=np.flatnonzero(keep),
                  users=None if block.users is None else block.users.filter(present)), int((~keep).sum())


def _matches(values: pa.Array, pattern: str) -> np.ndarray:
    import pyarrow.compute as pc

    return pc.match_substring_regex(values, pattern).to_numpy(zero_copy_only=False)


PLAIN_DIGITS_MAX = 18  # digits of a value _plain_integers reads: below 10^18 < 2^63


def _plain_integers(values: pa.Array) -> np.ndarray | None:
    """The values of a string array whose every value is 1 to PLAIN_DIGITS_MAX ASCII digits, read from its buffers
    with numpy; None for any other array (a sign, a longer value, anything else), which the exact path reads.

    The common input, one integer a line, then needs no Arrow compute function: the first call of one imports
    pandas (about 0.4 s of a command). Canonical integers (:data:`CANONICAL_INTEGER`) and their values as
    Arrow's cast gives them: digits only, leading zeros allowed."""
    import pyarrow as pa

    if values.type != pa.string() or values.null_count:
        return None
    n, start = len(values), values.offset
    offsets = np.frombuffer(values.buffers()[1], np.int32, n + 1, 4 * start)
    lengths = np.diff(offsets)
    if n == 0 or lengths.min() < 1 or lengths.max() > PLAIN_DIGITS_MAX:
        return None
    digits = np.frombuffer(values.buffers()[2], np.uint8, offsets[-1] - offsets[0], offsets[0]) - np.uint8(48)
    if digits.max() > 9:
        return None
    return _digit_values(digits, offsets[1:] - offsets[0], lengths)


def _digit_values(digits: np.ndarray, ends: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """The int64 values of decimal numbers laid out in ``digits`` (bytes less 48: a digit's value, 0 to 9), the
    i-th the ``lengths[i]`` digits (1 to PLAIN_DIGITS_MAX) just before ``ends[i]`` (what lies between them is not read).

    Place by place from the values' ends: the units of every value, then the tens of those with two digits or
    more, ...: a pass over the values a place, no array as long as the digits (3-4x faster than weighting every
    digit by its power of 10 and summing per value, at 10^6 values of 1 to 4 digits)."""
    numbers = digits[ends - 1].astype(np.int64)
    for place in range(1, int(lengths.max())):
        longer = np.flatnonzero(lengths > place)
        numbers[longer] += digits[ends[longer] - 1 - place] * np.int64(10**place)
    return numbers


def _looks_like_number(text: str) -> bool:
    """Any number: a canonical integer, or ``3.0``, ``1_05``, ``1e5``, digits of any script."""
    import pyarrow as pa

    return bool(_matches(pa.array([text]), NUMBER)[0])
