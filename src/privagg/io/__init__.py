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
domain (beyond 64 bits too) are errors naming their line.

Values are encoded block by block (:class:`privagg.core.encoding.ItemEncoder`)
into one int64 array of codes, so memory stays near 8 bytes per user.
Locations in errors are file lines for text, CSV and TSV (counting the
header; a quoted value spanning lines makes later numbers run short) and
rows (from 1) for Parquet and ``.npy``; a protocol's error about a value it
was given (fe-hh's items, vectors) names the same place (:func:`location`).

The package's modules, by concern: :mod:`~privagg.io.files` (what a file is, checked before it is read),
:mod:`~privagg.io.blocks` (one column streamed in located blocks), :mod:`~privagg.io.items` (items and public
lists to codes) and :mod:`~privagg.io.vectors` (vectors).
"""

from .files import InputFormat, checked_file, estimated_rows, file_kind, read_json_text, text_format
from .items import ReadSummary, location, read_codes, read_epsilons, read_items, read_list
from .vectors import load_npy, read_vectors, read_vectors_counted

__all__ = ["InputFormat", "ReadSummary", "checked_file", "estimated_rows", "file_kind", "load_npy", "location",
           "read_codes", "read_epsilons", "read_items", "read_json_text", "read_list", "read_vectors",
           "read_vectors_counted", "text_format"]
