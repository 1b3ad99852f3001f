"""What a file is before it is read: its kind (by extension and first bytes), the checks that refuse it in one
line (a folder, binary data, another format, not UTF-8), small JSON files, how many rows it holds, and what a
standard input of unknown kind holds (:mod:`privagg.io`)."""

from __future__ import annotations

import csv
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import numpy as np

from ..errors import ParameterError


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


LIKELY_DELIMITERS = (";", "\t", "|")


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
