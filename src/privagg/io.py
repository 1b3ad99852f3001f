"""Reading users' items and candidate lists: typed, streamed, and never guessed line by line.

Formats, by extension (``delimiter`` makes any file a delimited table):

* ``.parquet``: one column, read row group by row group.
* ``.csv`` / ``.tsv``: a delimited UTF-8 table with a header row (``header=False``:
  none, and ``column`` is a 0-based index), read block by block with Arrow's
  streaming CSV reader. Quoting follows RFC 4180.
* ``.npy``: a one-dimensional integer array (memory-mapped).
* anything else: UTF-8 text, one item per line, taken verbatim (no quoting,
  no trimming; a line ending in CR LF loses both).

A UTF-8 byte-order mark is dropped. Only an empty cell or line is missing
(``NA``, ``null`` or ``nan`` are values); ``missing="error"`` (default)
stops at the first, naming its line, and ``missing="drop"`` leaves those
users out and counts them.

The item type is declared (``item_type="int"`` or ``"str"``) or unambiguous
(``"auto"``): text values are integers only when every one is a canonical
decimal integer (optional sign, ASCII digits, nothing else), and any mix of
integers, other numbers (``3.0``, ``1_05``, Arabic-Indic digits) and text is
an error naming the first line that breaks the rule. Integers outside the
domain, or beyond 64 bits, are errors naming their line.

Values are encoded block by block (:class:`privagg.core.encoding.ItemEncoder`)
into one int64 array of codes, so memory stays near 8 bytes per user.
Locations in errors are file lines for text, CSV and TSV (counting the
header; a quoted value spanning lines makes later numbers run short) and
rows (from 1) for Parquet and ``.npy``; a protocol's error about a value it
was given (fe-hh's items, vectors) names the same place (:func:`location`).
"""

from __future__ import annotations

import csv
import io
import math
import re
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Literal

import numpy as np

from .core.encoding import ItemEncoder
from .errors import ParameterError, parse_number

if TYPE_CHECKING:
    import pyarrow as pa

ItemType = Literal["auto", "int", "str"]
ITEM_TYPES: tuple[str, ...] = ("auto", "int", "str")
MISSING: tuple[str, ...] = ("error", "drop")
DELIMITERS = {".csv": ",", ".tsv": "\t"}
BLOCK_BYTES = 1 << 20  # CSV and text blocks (Arrow holds several, each a few times its size, in flight)
LONGEST_LINE = BLOCK_BYTES  # Arrow's reader refuses a line (a record) longer than its block
SNIFF_BYTES = 1 << 16  # how much of a file is looked at before reading it: binary data, another format
MAGIC = {b"PAR1": "parquet", b"\x93NUMPY": "npy"}
# compressed files and archives, by their first bytes (bzip2's are ASCII: its block size and pi's digits in BCD)
PACKED = {rb"\x1f\x8b": "gzip-compressed data", rb"PK\x03\x04": "a zip archive (or an .xlsx or .ods sheet)",
          rb"BZh[1-9]1AY&SY": "bzip2-compressed data", rb"\xfd7zXZ\x00": "xz-compressed data",
          rb"\x28\xb5\x2f\xfd": "zstd-compressed data"}
TEXT_SEPARATOR = "\x1f"  # a control character no text line holds: plain text is read as a one-column table
CANONICAL_INTEGER = r"^[+-]?[0-9]+\z"
NUMBER = r"^[+-]?([\p{Nd}_]*\p{Nd}[\p{Nd}_]*(\.[\p{Nd}_]*)?|\.[\p{Nd}_]*\p{Nd}[\p{Nd}_]*)([eE][+-]?\p{Nd}+)?\z"


@dataclass(frozen=True)
class InputFormat:
    """How to read one input file (the command line's ``--item-type``, ``--column``, ... options)."""

    item_type: ItemType = "auto"
    column: str | None = None
    delimiter: str | None = None
    header: bool = True
    missing: str = "error"

    def __post_init__(self) -> None:
        if self.item_type not in ITEM_TYPES:
            raise ParameterError("item-type", f"one of {', '.join(ITEM_TYPES)}", self.item_type)
        if self.missing not in MISSING:
            raise ParameterError("missing", f"one of {', '.join(MISSING)}", self.missing)
        if self.delimiter is not None and (len(self.delimiter) != 1 or not self.delimiter.isascii()
                                           or self.delimiter in '"\r\n'):
            raise ParameterError("delimiter", "one ASCII character other than a quote or a line break",
                                 repr(self.delimiter))


@dataclass
class ReadSummary:
    """What reading a file gave: the codes, and the users left out for a missing value (``missing="drop"``)."""

    codes: np.ndarray
    dropped: int = 0


BINARY_SAMPLE = 4096  # bytes: a shorter head (a few short items) is not judged binary by its NULs


def file_kind(path: Path, fmt: InputFormat) -> str:
    """``parquet``, ``npy``, ``table`` (delimited) or ``text``."""
    suffix = path.suffix.lower()
    if suffix in (".parquet", ".npy") and fmt.delimiter is None:
        return suffix[1:]
    return "table" if fmt.delimiter is not None or suffix in DELIMITERS else "text"


KIND_NAMES = {"parquet": "a Parquet file", "npy": "a NumPy .npy file", "table": "a UTF-8 delimited table (CSV, TSV)",
              "text": "a UTF-8 text file (one item per line)"}
ACCEPTED = {"parquet": "a readable Parquet file", "npy": "a readable .npy file",
            "table": f"a readable UTF-8 delimited table (lines of at most {LONGEST_LINE // 2**20} MiB)",
            "text": f"a readable UTF-8 text file (lines of at most {LONGEST_LINE // 2**20} MiB)"}


def checked_file(path: str | Path, field: str, kind: str | None = None) -> Path:
    """``path`` as an existing, readable regular file, or one line saying what it is instead.

    With ``kind`` (as :func:`file_kind` names it) the file's first bytes are also looked at, so that binary
    data, another format under a misleading extension, or a NUL-filled (sparse) file is refused before any
    reading; a file of any size is looked at in milliseconds.
    """
    path = Path(path)
    accepted = ACCEPTED.get(kind or "", "a readable file")
    if path.is_dir():
        raise ParameterError(field, f"{accepted}, not a folder", path)
    if not path.exists():
        raise ParameterError(field, "an existing file", path)
    if not path.is_file():
        hint = "; --input - reads standard input" if field == "input" else ""
        raise ParameterError(field, f"{accepted} (a regular file, not a device, socket or pipe{hint})", path)
    try:
        with path.open("rb") as f:
            head = f.read(SNIFF_BYTES)
    except OSError as err:
        raise ParameterError(field, accepted, f"{path} ({err.strerror or err})") from None
    if kind is not None:
        problem = _sniff(head, kind)
        if problem:
            raise ParameterError(field, accepted, f"{path} ({problem})")
    return path


JSON_BYTES = 64 << 20  # a parameters file or report: a few kilobytes


def read_json_text(path: str | Path, field: str, largest: int = JSON_BYTES) -> str:
    """The text of a small UTF-8 JSON file (parameters, a report), or of a pipe (``--params <(privagg calibrate
    ...)``): refused, in one line, when it is a folder, unreadable, binary, not UTF-8 or larger than ``largest``
    bytes (a file's size is checked before it is read; a pipe is read no further)."""
    accepted = f"a readable UTF-8 JSON file of at most {largest // 2**20} MiB"
    path = Path(path)
    if path.is_dir():
        raise ParameterError(field, f"{accepted}, not a folder", path)
    if not path.exists():
        raise ParameterError(field, "an existing file", path)
    try:
        size = path.stat().st_size
        if size > largest:
            raise ParameterError(field, accepted, f"{path} ({size} bytes)")
        with path.open("rb") as f:
            data = f.read(largest + 1)
        if len(data) > largest:  # a pipe or a device (/dev/zero) that goes on
            raise ParameterError(field, accepted, f"{path} (longer)")
    except OSError as err:
        raise ParameterError(field, accepted, f"{path} ({err.strerror or err})") from None
    found = next((name for magic, name in MAGIC.items() if data.startswith(magic)), None)
    if found or b"\0" in data[:SNIFF_BYTES]:
        raise ParameterError(field, accepted, f"{path} ({KIND_NAMES[found] if found else 'binary data'})")
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as err:
        line = data[:err.start].count(b"\n") + 1
        raise ParameterError(field, accepted, f"{path} (line {line} is not valid UTF-8)") from None


def _sniff(head: bytes, kind: str) -> str | None:
    """What is wrong with a file whose first bytes are ``head``, to be read as ``kind``; None: nothing seen."""
    found = next((name for magic, name in MAGIC.items() if head.startswith(magic)), None)
    if kind in ("parquet", "npy"):
        if not head:
            return "an empty file"
        if found == kind:
            return None
        what = f"{KIND_NAMES[found]} under a .{kind} name" if found else \
            "binary data" if b"\0" in head or not _utf8_prefix(head) else "text"
        return f"{what}, not {KIND_NAMES[kind]}"
    if found:
        return f"{KIND_NAMES[found]}: name it .{found} (or leave out --delimiter)"
    packed = next((name for magic, name in PACKED.items() if re.match(magic, head)), None)
    if packed:
        return f"{packed}, not {KIND_NAMES[kind]}: unpack it first"
    if len(head) >= BINARY_SAMPLE and head.count(0) * 8 > len(head):  # a NUL is valid text; mostly NULs are not
        return f"binary data ({head.count(0)} NUL bytes in the first {len(head)}), not {KIND_NAMES[kind]}"
    if not _utf8_prefix(head):
        line = head[:_utf8_error_at(head)].count(b"\n") + 1
        return f"line {line} is not valid UTF-8"
    return None


def _utf8_prefix(head: bytes) -> bool:
    """Whether ``head`` is valid UTF-8, but for a character cut at its end."""
    return _utf8_error_at(head) is None


def _utf8_error_at(head: bytes) -> int | None:
    try:
        head.decode("utf-8")
    except UnicodeDecodeError as err:
        if err.reason == "unexpected end of data" and err.start >= len(head) - 3:
            return None
        return err.start
    return None


def read_codes(path: str | Path, encoder: ItemEncoder, fmt: InputFormat = InputFormat(), field: str = "input",
               public: bool = False) -> ReadSummary:
    """The codes of the items in ``path`` (one per user), encoded block by block with ``encoder``.

    ``public=True`` for candidate lists: the encoder may then label their
    codes with the items. ``field`` names the file in error messages.
    """
    path = Path(path)
    kind = file_kind(path, fmt)
    checked_file(path, field, kind)
    if kind == "text" and (fmt.column is not None or not fmt.header):
        option = "column" if fmt.column is not None else "header"
        raise ParameterError(option, "left out for a plain-text file (one item per line; give --delimiter for a "
                             "table)", fmt.column if fmt.column is not None else "--no-header")
    if kind == "npy":
        return ReadSummary(_read_npy(path, encoder, fmt, field))
    import pyarrow as pa  # for what follows: a .npy is read without Arrow

    typer = _ItemTyper(fmt.item_type, field, path)
    # Each stored value took at least 2 bytes of the file (a character and a line break or delimiter; an empty
    # value is missing, so never stored): np.empty reserves that bound without touching it, and only the
    # pages the codes fill become resident. Joining per-block arrays instead would hold every user twice.
    codes, count, dropped = None, 0, 0
    try:
        for block in _blocks(path, kind, fmt, field):
            if codes is None:
                codes = np.empty(block.capacity or path.stat().st_size // 2 + 1, dtype=np.int64)
            block, lost = _without_missing(block, fmt, field, path)
            dropped += lost
            part = typer.encode(block, encoder, public)
            codes[count:count + part.size] = part
            count += part.size
    except (OSError, EOFError, pa.ArrowException) as err:
        raise _unreadable(path, kind, field, err) from None
    return ReadSummary(np.empty(0, dtype=np.int64) if codes is None else codes[:count], dropped)


def read_list(path: str | Path, fmt: InputFormat = InputFormat(item_type="str"), field: str = "candidates",
              largest: int = 2**20) -> list[str]:
    """A small public list (a categorical protocol's categories), in file order, as text; at most ``largest``."""
    import pyarrow as pa
    import pyarrow.compute as pc

    path = Path(path)
    kind = file_kind(path, fmt)
    checked_file(path, field, kind)
    values: list[str] = []
    try:
        if kind == "npy":
            values = [str(v) for v in np.load(path, allow_pickle=False).ravel().tolist()]
        for block in () if kind == "npy" else _blocks(path, kind, fmt, field):
            block, _ = _without_missing(block, fmt, field, path)
            values += pc.cast(block.values, pa.string()).to_pylist()
            if len(values) > largest:
                break
    except ParameterError:
        raise
    except (OSError, EOFError, ValueError, pa.ArrowException) as err:  # ValueError: an .npy of objects, a bad header
        raise _unreadable(path, kind, field, err) from None
    if len(values) > largest:
        raise ParameterError(field, f"a list of at most {largest} items", f"more in {path}")
    return values


def read_items(path: str | Path, fmt: InputFormat = InputFormat(), field: str = "input") -> tuple[list | np.ndarray, int]:
    """(the users' raw items, users left out for a missing value): what heavy-hitter discovery reads.

    A 1-D integer .npy array comes back as it is; other files as a list of strings, or of Python ints when
    ``--item-type int`` (or ``auto`` and every value is a canonical decimal integer). The protocol checks the
    items' range and length, naming the row, which :func:`location` finds in the file.
    """
    path = Path(path)
    kind = file_kind(path, fmt)
    checked_file(path, field, kind)
    if kind == "npy":
        try:
            array = load_npy(path)
        except (OSError, EOFError, ValueError) as err:
            raise _unreadable(path, "npy", field, err) from None
        if array.ndim != 1 or not np.issubdtype(array.dtype, np.integer) or fmt.item_type == "str":
            raise ParameterError(field, "a one-dimensional integer .npy array (use a text, CSV or Parquet file "
                                 "for strings)", f"{path} (shape {array.shape}, dtype {array.dtype})")
        return array, 0
    import pyarrow as pa  # for what follows: a .npy is read without Arrow
    import pyarrow.compute as pc

    values: list = []
    dropped = 0
    try:
        for block in _blocks(path, kind, fmt, field):
            block, lost = _without_missing(block, fmt, field, path)
            dropped += lost
            values += pc.cast(block.values, pa.string()).to_pylist()
    except (OSError, pa.ArrowException) as err:
        raise _unreadable(path, kind, field, err) from None
    if fmt.item_type == "str" or not values:
        return values, dropped
    bad = np.flatnonzero(~_matches(pa.array(values, pa.string()), CANONICAL_INTEGER))
    if bad.size and fmt.item_type == "int":
        raise ParameterError(field, "canonical decimal integers (--item-type int)",
                             f"{_cut(values[bad[0]])} on {location(path, fmt, int(bad[0]))}")
    if not bad.size:
        huge = next((i for i, text in enumerate(values) if len(text) > 40), None)
        if huge is not None:  # beyond any domain (and past what int() converts at 4,300 digits)
            raise ParameterError(field, "integers of at most 40 digits",
                                 f"{_cut(values[huge])} on {location(path, fmt, huge)}")
        values = [int(text) for text in values]
    return values, dropped


def read_epsilons(path: str | Path, fmt: InputFormat, column: str) -> np.ndarray:
    """Each user's privacy requirement: the numbers of ``column`` in the table ``path``, row by row (weighted
    aggregation). Every value must be a finite number > 0; a missing one is an error (rows must stay aligned
    with the items)."""
    from dataclasses import replace

    import pyarrow as pa
    import pyarrow.compute as pc

    path = Path(path)
    kind = file_kind(path, fmt)
    checked_file(path, "epsilon-column", kind)
    if kind not in ("table", "parquet"):
        raise ParameterError("epsilon-column", "given for a CSV, TSV or Parquet table (a column beside the items)",
                             column)
    if fmt.missing != "error":
        raise ParameterError("missing", "error with --epsilon-column (users left out would misalign the rows)",
                             fmt.missing)
    fmt = replace(fmt, column=column)
    parts = []
    try:
        for block in _column_blocks(path, kind, fmt):
            block, _ = _without_missing(block, fmt, "epsilon-column", path)
            text = pc.cast(block.values, pa.string())
            try:
                values = pc.cast(text, pa.float64()).to_numpy(zero_copy_only=False)
            except pa.ArrowInvalid:
                values = np.array([_number(v) for v in text.to_pylist()])
            bad = np.flatnonzero(~(np.isfinite(values) & (values > 0)))
            if bad.size:
                raise ParameterError("epsilon-column", "a finite number > 0 on every row",
                                     f"{text[int(bad[0])].as_py()!r} on {block.where(int(bad[0]), path)}")
            parts.append(values)
    except (OSError, pa.ArrowException) as err:
        raise _unreadable(path, kind, "epsilon-column", err) from None
    return np.concatenate(parts) if parts else np.empty(0)


def _column_blocks(path: Path, kind: str, fmt: InputFormat) -> Iterator[_Block]:
    """The blocks of --epsilon-column, a missing column named as that option."""
    try:
        yield from _blocks(path, kind, fmt, "epsilon-column")
    except ParameterError as err:
        if err.field != "column":
            raise
        raise ParameterError("epsilon-column", err.accepted, err.got) from None


def _number(text: str) -> float:
    """A value of --epsilon-column by the one rule for typed numbers (``1_05`` is not 105): NaN if it breaks it."""
    try:
        return float(parse_number("epsilon-column", text))
    except ParameterError:
        return math.nan


@dataclass
class _Block:
    """A block of values and where each came from: a file line, or a row counted from 1."""

    values: pa.Array
    first: int  # the line or row of the block's first value
    unit: str  # "line" or "row"
    capacity: int | None = None  # the file's row count, when its metadata gives it
    kept: np.ndarray | None = None  # positions in the block of the values left after dropping missing ones

    def where(self, index: int, path: Path | str) -> str:
        position = index if self.kept is None else int(self.kept[index])
        return f"{self.unit} {self.first + position} of {path}"


def _blocks(path: Path, kind: str, fmt: InputFormat, field: str) -> Iterator[_Block]:
    if kind == "parquet":
        yield from _parquet_blocks(path, fmt)
    else:
        yield from _delimited_blocks(path, kind, fmt, field)


def _parquet_blocks(path: Path, fmt: InputFormat) -> Iterator[_Block]:
    import pyarrow.parquet as pq

    file = pq.ParquetFile(path)
    names = file.schema_arrow.names
    column = _pick_column(names, fmt.column, header=True)
    row = 1
    for batch in file.iter_batches(columns=[column]):
        values = batch.column(0)
        yield _Block(values, row, "row", file.metadata.num_rows)
        row += len(values)


def _delimited_blocks(path: Path, kind: str, fmt: InputFormat, field: str) -> Iterator[_Block]:
    """Text lines or one column of a delimited table, as strings, block by block."""
    import pyarrow as pa
    import pyarrow.csv as pacsv

    bad_rows: list[str] = []

    def first_bad_row(row) -> str:
        """Arrow's handler for a row with the wrong number of fields: remember the first for the error."""
        if not bad_rows:
            shown = row.text if len(row.text) <= 60 else row.text[:57] + "..."
            bad_rows.append(f"line {row.number}: {row.expected_columns} field(s) expected, {row.actual_columns} "
                            f"found in {shown!r}")
        return "error"

    if kind == "text":
        if path.stat().st_size == 0:  # Arrow refuses an empty file; it holds no items
            return
        names, column, skip = ["item"], "item", 0
        parse = pacsv.ParseOptions(delimiter=TEXT_SEPARATOR, quote_char=False, escape_char=False,
                                   ignore_empty_lines=False, invalid_row_handler=first_bad_row)
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
        parse = pacsv.ParseOptions(delimiter=delimiter, ignore_empty_lines=False, invalid_row_handler=first_bad_row)
    line = skip + 1
    undecodable: list[BaseException] = []
    try:
        with _undecodable_rows(first_bad_row, undecodable):
            reader = pacsv.open_csv(
                path, read_options=pacsv.ReadOptions(column_names=names, skip_rows=skip, block_size=BLOCK_BYTES,
                                                     use_threads=False),  # threads hide a bad row's line number
                parse_options=parse,
                convert_options=pacsv.ConvertOptions(include_columns=[column], column_types={column: pa.string()},
                                                     null_values=[""], strings_can_be_null=True,
                                                     quoted_strings_can_be_null=True))
            for batch in reader:
                values = batch.column(0)
                yield _Block(values, line, "line")
                line += len(values)
    except pa.ArrowInvalid:
        if undecodable and not bad_rows:  # Arrow could not hand the handler a row that is not UTF-8
            raise _unreadable(path, kind, field, _first_invalid_utf8(path)) from None
        if not bad_rows:
            raise
        problem = bad_rows[0]
        if kind == "text":  # the one way a text line splits
            problem = problem.split(":")[0] + " holds the control character U+001F"
        raise _unreadable(path, kind, field, problem) from None


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


LIKELY_DELIMITERS = (";", "\t", "|")


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


def text_format(path: Path) -> str | None:
    """What a text file of unknown kind (standard input) holds besides one item per line, judged on its first
    64 KiB: a table's delimiter (``,`` tab ``;`` ``|``) when every line, at least two, holds it; ``"json"`` for
    JSON (an array or object, or a first line of only ``[`` or ``{``) or JSON Lines (every line an object); else
    None. Read line by line,
    either would make each whole line, header and delimiters included, one user's item."""
    try:
        with path.open("rb") as f:
            head = f.read(SNIFF_BYTES + 1)
    except OSError:
        return None  # the reader says what is wrong
    text = head[:SNIFF_BYTES].decode("utf-8-sig", errors="replace")
    lines = text.splitlines()
    if len(head) > SNIFF_BYTES and lines:
        lines.pop()  # cut short
    lines = [line for line in lines if line.strip()]
    if not lines:
        return None
    if lines[0].strip() in ("[", "{") or all(line.lstrip().startswith("{") and line.rstrip().endswith("}")
                                                for line in lines) or _json_document(text, len(head) <= SNIFF_BYTES):
        return "json"
    if len(lines) < 2:
        return None
    return next((d for d in (",", *LIKELY_DELIMITERS) if all(d in line for line in lines)), None)


def _json_document(text: str, whole: bool) -> bool:
    """Whether ``text``, the whole file, is a JSON array or object."""
    import json

    if not whole or text.lstrip()[:1] not in ("[", "{"):
        return False
    try:
        return isinstance(json.loads(text), (list, dict))
    except ValueError:
        return False


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
    return _Block(values.filter(present), block.first, block.unit, kept=np.flatnonzero(keep)), int((~keep).sum())


def _matches(values: pa.Array, pattern: str) -> np.ndarray:
    import pyarrow.compute as pc

    return pc.match_substring_regex(values, pattern).to_numpy(zero_copy_only=False)


def _looks_like_number(text: str) -> bool:
    """Any number: a canonical integer, or ``3.0``, ``1_05``, ``1e5``, digits of any script."""
    import pyarrow as pa

    return bool(_matches(pa.array([text]), NUMBER)[0])


class _ItemTyper:
    """Decides the item type once for the whole file and holds every block to it."""

    def __init__(self, item_type: str, field: str, path: Path) -> None:
        self.item_type, self.field, self.path = item_type, field, path
        self.decided: str | None = None if item_type == "auto" else item_type
        self.first: str | None = None  # auto: the value that decided, and where

    def encode(self, block: _Block, encoder: ItemEncoder, public: bool) -> np.ndarray:
        import pyarrow as pa
        import pyarrow.compute as pc

        values = block.values
        if len(values) == 0:
            return np.empty(0, dtype=np.int64)
        if pa.types.is_integer(values.type):
            return self._integers(values.to_numpy(), block, encoder, public) if self.item_type != "str" else (
                encoder.encode(pc.cast(values, pa.string()), field=self.field, public=public))
        if not (pa.types.is_string(values.type) or pa.types.is_large_string(values.type)):
            raise ParameterError(self.field, "integers or strings", f"values of type {values.type} in {self.path}")
        if self.item_type == "str":
            return encoder.encode(values, field=self.field, public=public)
        if self.decided is None:
            first = values.slice(0, 1)
            self.decided = "int" if _matches(first, CANONICAL_INTEGER)[0] else "str"
            self.first = f"{block.where(0, self.path)} ({_cut(values[0].as_py())})"
            if self.decided == "str" and _matches(first, NUMBER)[0]:
                self._refuse(values, block, 0, "is a number but not a canonical decimal integer")
        if self.decided == "int":
            bad = np.flatnonzero(~_matches(values, CANONICAL_INTEGER))
            if bad.size:
                self._refuse(values, block, int(bad[0]), "is not a canonical decimal integer (optional sign, "
                             "ASCII digits only)" + (f" like {self.first}" if self.first else ""))
            return self._integers(self._parse(values, block, encoder.domain_size), block, encoder, public)
        bad = np.flatnonzero(_matches(values, NUMBER))
        if bad.size:
            self._refuse(values, block, int(bad[0]), f"is a number, where {self.first} is text")
        return encoder.encode(values, field=self.field, public=public)

    def _refuse(self, values: pa.Array, block: _Block, index: int, problem: str) -> None:
        hint = "; give --item-type str to count every value as text" if self.item_type == "auto" else ""
        raise ParameterError(self.field, f"{'integers' if self.decided == 'int' else 'one kind of item'} throughout",
                             f"{_cut(values[index].as_py())} on {block.where(index, self.path)}, which {problem}{hint}")

    def _parse(self, values: pa.Array, block: _Block, domain_size: int) -> np.ndarray:
        """Canonical decimal strings to int64; a value beyond that names its line."""
        import pyarrow as pa
        import pyarrow.compute as pc

        if pc.any(pc.starts_with(values, "+")).as_py():  # Arrow's cast takes no plus sign
            values = pc.utf8_ltrim(values, characters="+")
        try:
            return pc.cast(values, pa.int64()).to_numpy()
        except pa.ArrowInvalid:
            for index, text in enumerate(values.to_pylist()):  # a 20-digit bound first: int() refuses 4,300 digits
                if len(text.lstrip("+-")) > 20 or not -(2**63) <= int(text) < 2**63:
                    raise ParameterError(self.field, f"integers in [0, {domain_size}) (the domain, --domain)",
                                         f"{text if len(text) <= 60 else _cut(text)}, beyond 64 bits, on "
                                         f"{block.where(index, self.path)}") from None
            raise

    def _integers(self, numbers: np.ndarray, block: _Block, encoder: ItemEncoder, public: bool) -> np.ndarray:
        outside = np.flatnonzero((numbers < 0) | (numbers >= encoder.domain_size))
        if outside.size:
            index = int(outside[0])
            raise ParameterError(self.field, f"integers in [0, {encoder.domain_size}) (the domain, --domain)",
                                 f"{numbers[index]} on {block.where(index, self.path)}")
        return encoder.encode(numbers, field=self.field, public=public)


def _read_npy(path: Path, encoder: ItemEncoder, fmt: InputFormat, field: str) -> np.ndarray:
    try:
        array = np.load(path, mmap_mode="r", allow_pickle=False)
    except (OSError, EOFError, ValueError) as err:
        raise _unreadable(path, "npy", field, err) from None
    if array.ndim != 1 or not np.issubdtype(array.dtype, np.integer) or fmt.item_type == "str":
        raise ParameterError(field, "a one-dimensional integer .npy array (use a text, CSV or Parquet file "
                             "for strings)", f"{path} (shape {array.shape}, dtype {array.dtype})")
    block = _Block(array, 1, "row")  # type: ignore[arg-type]
    return _ItemTyper("int", field, path)._integers(np.asarray(array), block, encoder, False)


def _unreadable(path: Path, kind: str, field: str, err: Exception | str) -> ParameterError:
    """One line saying why the file cannot be read (Arrow's messages can span several)."""
    if isinstance(err, str):
        detail = err
    elif isinstance(err, UnicodeDecodeError) or "invalid UTF8" in str(err):
        detail = _first_invalid_utf8(path)
    elif "straddling" in str(err) or isinstance(err, csv.Error) and "field limit" in str(err):
        detail = f"a line longer than {LONGEST_LINE // 2**20} MiB ({LONGEST_LINE} bytes), the longest read"
    else:
        detail = (str(getattr(err, "strerror", None) or err).strip() or type(err).__name__).splitlines()[0]
        if len(detail) > 200:  # Arrow quotes a whole bad row
            detail = detail[:160] + f"... ({len(detail)} characters)"
    return ParameterError(field, ACCEPTED[kind], f"{path} ({detail})")


def _first_invalid_utf8(path: Path) -> str:
    with path.open("rb") as f:
        for number, raw in enumerate(iter(lambda: f.readline(LONGEST_LINE + 1), b""), 1):
            if len(raw) > LONGEST_LINE:
                return f"line {number} is longer than {LONGEST_LINE // 2**20} MiB"
            try:
                raw.decode("utf-8")
            except UnicodeDecodeError:
                return f"line {number} is not valid UTF-8"
    return "not valid UTF-8"


def estimated_rows(path: str | Path, fmt: InputFormat = InputFormat()) -> int:
    """About how many items ``path`` holds, without reading it: exact for Parquet and .npy; for text and
    tables, the file size over the mean line length of its first mebibyte (checks before work use it)."""
    path = Path(path)
    kind = file_kind(path, fmt)
    checked_file(path, "input", kind)
    if kind == "parquet":  # Arrow only here
        import pyarrow as pa
        import pyarrow.parquet as pq

        try:
            return pq.ParquetFile(path).metadata.num_rows
        except (OSError, EOFError, ValueError, pa.ArrowException) as err:
            raise _unreadable(path, kind, "input", err) from None
    try:
        if kind == "npy":
            return int(np.prod(np.load(path, mmap_mode="r", allow_pickle=False).shape))
        size = path.stat().st_size
        with path.open("rb") as f:
            sample = f.read(BLOCK_BYTES)
    except (OSError, EOFError, ValueError) as err:
        raise _unreadable(path, kind, "input", err) from None
    lines = sample.count(b"\n") + (not sample.endswith(b"\n") and bool(sample))
    header = 1 if kind == "table" and fmt.header else 0
    return max(0, round(size * lines / max(len(sample), 1)) - header)


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


def location(path: str | Path, fmt: InputFormat, index: int, vectors: bool = False, name: str | None = None) -> str:
    """Where the ``index``-th value (counted from 0; users left out for a missing value not counted) of what
    :func:`read_items`, or with ``vectors`` :func:`read_vectors`, read from ``path`` lies in the file, as the readers
    name places: "line 5 of data.csv" for text and tables (file lines, the header counted), "row 3 of x.parquet"
    for Parquet and .npy (rows from 1). ``name`` calls the file otherwise (standard input). It reads the file
    again: for an error's message."""
    path = Path(path)
    shown = name or str(path)
    kind = file_kind(path, fmt)
    if kind == "npy":
        return f"row {index + 1} of {shown}"
    if vectors:
        table, first_line = _load_table(path, kind, fmt)
        rows = np.flatnonzero(~_empty_rows(table)) if fmt.missing == "drop" else np.arange(table.num_rows)
        row = int(rows[index])
        return f"row {row + 1} of {shown}" if first_line is None else f"line {row + first_line} of {shown}"
    seen = 0
    for block in _blocks(path, kind, fmt, "input"):
        block, _ = _without_missing(block, fmt, "input", path)
        if index < seen + len(block.values):
            return block.where(index - seen, shown)
        seen += len(block.values)
    return f"item {index + 1} of {shown}"  # the file changed since it was read


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
