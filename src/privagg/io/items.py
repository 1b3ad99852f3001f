"""The users' items and the public lists: typed once for the whole file, encoded block by block into codes, and
located by file line in errors (:mod:`privagg.io`)."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from ..core.encoding import ItemEncoder
from ..errors import ParameterError, parse_number
from .blocks import (CANONICAL_INTEGER, NUMBER, PLAIN_DIGITS_MAX, _Block, _blocks, _cut, _digit_values, _matches,
                     _plain_integers, _without_missing)
from .files import InputFormat, _unreadable, checked_file, file_kind
from .vectors import _empty_rows, _load_table, load_npy

if TYPE_CHECKING:
    import pyarrow as pa


@dataclass
class ReadSummary:
    """What reading a file gave: the codes, and the users left out for a missing value (``missing="drop"``)."""

    codes: np.ndarray
    dropped: int = 0


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
    if kind == "text" and fmt.item_type != "str":
        try:
            numbers = _plain_text_integers(path)
        except OSError as err:
            raise _unreadable(path, kind, field, err) from None
        if numbers is not None:  # one integer a line, read as Arrow's reader reads it, without loading Arrow
            return ReadSummary(_ItemTyper(fmt.item_type, field, path)._integers(numbers, _Block(None, 1, "line"),
                                                                                encoder, public))
    import pyarrow as pa  # for what follows: a .npy, or a text file of one integer a line, is read without Arrow

    # Each stored value took at least 2 bytes of the file (a character and a line break or delimiter; an empty
    # value is missing, so never stored): np.empty reserves that bound without touching it, and only the
    # pages the codes fill become resident. Joining per-block arrays instead would hold every user twice.
    try:
        return encode_blocks(_blocks(path, kind, fmt, field), encoder, fmt, field, path, public,
                             lambda: path.stat().st_size // 2 + 1)
    except (OSError, EOFError, pa.ArrowException) as err:
        raise _unreadable(path, kind, field, err) from None


PLAIN_TEXT_CHUNK = 1 << 24  # bytes of a text file :func:`_plain_text_integers` reads at a time


def _plain_text_integers(path: Path) -> np.ndarray | None:
    """The integers of a text file whose every line is 1 to PLAIN_DIGITS_MAX ASCII digits (the last line's break
    optional), read with numpy a chunk at a time; None for any other file (empty, a blank line, a sign, a
    carriage return, a byte-order mark, anything else), which Arrow's reader then reads (:func:`_blocks`). The
    same values as that reader's blocks give (:func:`~privagg.io.blocks._plain_integers`), without loading Arrow
    (about 40 ms of a command) or making its strings (half the time of reading them)."""
    numbers = np.empty(path.stat().st_size // 2 + 1, dtype=np.int64)  # a digit and a break a line, but the last
    count, tail = 0, b""
    with path.open("rb") as f:
        while True:
            chunk = f.read(PLAIN_TEXT_CHUNK)
            data = tail + (chunk or b"\n" * bool(tail))  # at the end, the last line with the break it lacked
            if not data:
                break
            cut = data.rfind(b"\n") + 1  # whole lines; the rest is read with the next chunk
            tail = data[cut:]
            part = _plain_lines(np.frombuffer(data, np.uint8, cut))
            if part is None or len(tail) > PLAIN_DIGITS_MAX:
                return None
            numbers[count:count + part.size] = part
            count += part.size
    return numbers[:count] if count else None


def _plain_lines(data: np.ndarray) -> np.ndarray | None:
    """The values of ``data``, whole lines of 1 to PLAIN_DIGITS_MAX ASCII digits each and a line feed, else None."""
    breaks = np.flatnonzero(data == 10)
    digits = data - np.uint8(48)  # any byte but a digit above 9
    if np.count_nonzero(digits > 9) != breaks.size:
        return None
    if not breaks.size:
        return np.empty(0, dtype=np.int64)
    lengths = np.diff(breaks, prepend=-1) - 1
    if lengths.min() < 1 or lengths.max() > PLAIN_DIGITS_MAX:
        return None
    return _digit_values(digits, breaks, lengths)


def encode_blocks(blocks: Iterable[_Block], encoder: ItemEncoder, fmt: InputFormat, field: str, source: Path | str,
                  public: bool = False, bound: Callable[[], int] = lambda: 0) -> ReadSummary:
    """The codes of ``blocks`` (a file's, or a table's: :func:`privagg.io.frames.table_blocks`) by the file's rules:
    the item type decided once, missing values refused or dropped, each error naming its row of ``source``.
    ``bound()``: how many values there can be, where the blocks do not say (their ``capacity``)."""
    typer = _ItemTyper(fmt.item_type, field, source)
    codes, count, dropped = None, 0, 0
    for block in blocks:
        if codes is None:
            codes = np.empty(block.capacity or bound(), dtype=np.int64)
        block, lost = _without_missing(block, fmt, field, source)
        dropped += lost
        part = typer.encode(block, encoder, public)
        codes[count:count + part.size] = part
        count += part.size
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

    try:
        return typed_items(_blocks(path, kind, fmt, field), fmt, field, path, lambda i: location(path, fmt, i))
    except (OSError, pa.ArrowException) as err:
        raise _unreadable(path, kind, field, err) from None


def typed_items(blocks: Iterable[_Block], fmt: InputFormat, field: str, source: Path | str,
                where: Callable[[int], str]) -> tuple[list, int]:
    """:func:`read_items`'s values of ``blocks`` (a file's or a table's), missing ones refused or dropped by
    ``fmt``, as strings or Python ints; ``where(i)``: the place of the i-th value kept, for an error."""
    import pyarrow as pa
    import pyarrow.compute as pc

    values: list = []
    dropped = 0
    for block in blocks:
        block, lost = _without_missing(block, fmt, field, source)
        dropped += lost
        kind = block.values.type
        if pa.types.is_nested(kind) or pa.types.is_binary(kind) or pa.types.is_large_binary(kind) or \
                pa.types.is_fixed_size_binary(kind):  # not text, whatever a cast would make of it
            raise ParameterError(field, "integers or strings", f"values of type {kind} in {source}")
        values += pc.cast(block.values, pa.string()).to_pylist()
    if fmt.item_type == "str" or not values:
        return values, dropped
    bad = np.flatnonzero(~_matches(pa.array(values, pa.string()), CANONICAL_INTEGER))
    if bad.size and fmt.item_type == "int":
        raise ParameterError(field, "canonical decimal integers (--item-type int)",
                             f"{_cut(values[bad[0]])} on {where(int(bad[0]))}")
    if not bad.size:
        huge = next((i for i, text in enumerate(values) if len(text) > 40), None)
        if huge is not None:  # beyond any domain (and past what int() converts at 4,300 digits)
            raise ParameterError(field, "integers of at most 40 digits", f"{_cut(values[huge])} on {where(huge)}")
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


class _ItemTyper:
    """Decides the item type once for the whole file and holds every block to it."""

    def __init__(self, item_type: str, field: str, path: Path) -> None:
        self.item_type, self.field, self.path = item_type, field, path
        self.decided: str | None = None if item_type == "auto" else item_type
        self.first: str | None = None  # auto: the value that decided, and where

    def encode(self, block: _Block, encoder: ItemEncoder, public: bool) -> np.ndarray:
        import pyarrow as pa

        values = block.values
        if len(values) == 0:
            return np.empty(0, dtype=np.int64)
        if pa.types.is_integer(values.type):
            if self.item_type != "str":
                return self._integers(values.to_numpy(), block, encoder, public)
            import pyarrow.compute as pc

            return encoder.encode(pc.cast(values, pa.string()), field=self.field, public=public)
        if not (pa.types.is_string(values.type) or pa.types.is_large_string(values.type)):
            raise ParameterError(self.field, "integers or strings", f"values of type {values.type} in {self.path}")
        if self.item_type == "str":
            return encoder.encode(values, field=self.field, public=public)
        if self.decided != "str" and (numbers := _plain_integers(values)) is not None:
            if self.decided is None:
                self.decided, self.first = "int", f"{block.where(0, self.path)} ({_cut(values[0].as_py())})"
            return self._integers(numbers, block, encoder, public)
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
        """Canonical decimal strings to int64 (to uint64 for a domain beyond it: fe-hh's B up to 2^64); a value
        beyond that names its line."""
        import pyarrow as pa
        import pyarrow.compute as pc

        if pc.any(pc.starts_with(values, "+")).as_py():  # Arrow's cast takes no plus sign
            values = pc.utf8_ltrim(values, characters="+")
        wide = domain_size > 2**63 - 1
        try:
            return pc.cast(values, pa.int64()).to_numpy()
        except pa.ArrowInvalid:
            if wide:
                try:
                    return pc.cast(values, pa.uint64()).to_numpy()
                except pa.ArrowInvalid:
                    pass
            low, high = (0, 2**64) if wide else (-(2**63), 2**63)
            for index, text in enumerate(values.to_pylist()):  # a 20-digit bound first: int() refuses 4,300 digits
                if len(text.lstrip("+-")) > 20 or not low <= int(text) < high:
                    raise ParameterError(self.field, f"integers in [0, {domain_size}) (the domain, --domain)",
                                         f"{text if len(text) <= 60 else _cut(text)}, outside it, on "
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
