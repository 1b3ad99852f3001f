"""How the commands read the users' data: --input (a file, or standard input copied to a private file), the
format options, the public candidates (never the input itself), the bundled datasets when no file is given, and
a protocol's error about a value located in the file."""

from __future__ import annotations

import atexit
import inspect
import os
import shutil
import sys
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Iterator, Optional

import typer

from ..errors import ParameterError
from .options import ItemTypeChoice, MissingChoice, _param
from .output import SHOWN_PATHS, format_option, same_file

if TYPE_CHECKING:
    from ..protocols.registry import ProtocolEntry


KIND_TO_ITEM_TYPE = {"integer": "int", "text": "str"}  # an encoder's kind, as --item-type


PUBLIC_CANDIDATES = ("File of public candidate items to estimate, one per line: a list chosen without looking at the "
                     "users' data (a dictionary, a catalogue). Each is printed by name beside the guarantee, so a "
                     "list drawn from the data (its distinct values, sort -u) publishes them.")



STDIN_NAME = "standard input"


# the temporary copies of standard input (named so in reports), each with (device, inode) of what it was read from
_stdin_copies: dict[Path, tuple[int, int] | None] = {}


def _input_file(value: Path | None) -> Path | None:
    """``--input -``: standard input, copied first to a private temporary file (the readers take two passes,
    the size estimate then the items, and a pipe has one). Parquet and .npy are known by their first bytes;
    anything else is text, one item per line, or a table with --delimiter."""
    if value is None or str(value) != "-":
        return value
    if sys.stdin is None or sys.stdin.isatty():
        raise typer.BadParameter("'-' reads standard input: pipe or redirect the data into the command")
    try:
        source = os.fstat(sys.stdin.fileno())
        origin: tuple[int, int] | None = (source.st_dev, source.st_ino)
    except (OSError, ValueError, AttributeError):  # not a file descriptor (a test's stream)
        origin = None
    import tempfile  # (not for every command's start)

    folder = Path(tempfile.mkdtemp(prefix="privagg-stdin-"))  # mode 0700: the users' raw data
    atexit.register(shutil.rmtree, folder, ignore_errors=True)
    copy = folder / "stdin"
    with copy.open("wb") as out:
        shutil.copyfileobj(sys.stdin.buffer, out, 1 << 20)
    with copy.open("rb") as f:
        head = f.read(6)
    suffix = ".parquet" if head.startswith(b"PAR1") else ".npy" if head.startswith(b"\x93NUMPY") else ""
    copy = copy.rename(copy.with_suffix(suffix)) if suffix else copy
    _stdin_copies[copy] = origin
    SHOWN_PATHS[str(copy)] = STDIN_NAME  # the readers' errors name the copy
    return copy


_input_file.reads_stdin = True  # type: ignore[attr-defined]  # "-" is no path to check (options._path_check)


def _check_stdin_format(input: Path | None, delimiter: str | None,
                        accepted: str = "text, one item per line (a table needs --delimiter)") -> None:
    """Standard input read as text (no --delimiter; Parquet and .npy are known by their bytes) must not be a table
    or JSON (:func:`privagg.io.text_format`): read line by line, each whole line, header and delimiters included,
    would be one user's item."""
    from ..io import text_format

    if input not in _stdin_copies or delimiter is not None or input.suffix:
        return
    found = text_format(input)
    if found == "json":
        raise ParameterError("input", accepted, f"{STDIN_NAME} holding JSON: write the items one per line "
                             "(jq -r '.[]' for an array of strings) or as a CSV table")
    if found is not None:
        option = "--delimiter $'\\t'" if found == "\t" else f"--delimiter '{found}'"
        raise ParameterError("input", accepted, f"{STDIN_NAME}, every line of which holds {found!r}, a table's "
                             f"delimiter: give {option} (and --column NAME) to read it as a table, or save it as a "
                             ".txt file to take each whole line as one item")


@contextmanager
def _located(input: Path | None, fmt, vectors: bool = False) -> Iterator[None]:
    """A protocol's error about the value in some row of what it was given names that value's place in ``input``
    instead, as the readers do ("line 5 of data.csv"; :func:`privagg.io.location`)."""
    try:
        yield
    except ParameterError as err:
        if err.row is None or input is None:
            raise
        from ..io import location

        raise err.located(location(input, fmt, err.row, vectors, _input_name(input))) from None


def _check_public(candidates: Path | None, input: Path | None) -> None:
    """--candidates must be a public list, not the users' data: every candidate is printed by name beside the
    guarantee, so the input as candidates prints each user's raw value. Refused: the input file by any path (links,
    hard links, /dev/stdin), what standard input was read from, and a byte-for-byte copy of the input. A list
    made from the data otherwise (sort -u) cannot be told from a public one: --help and the README say so."""
    if candidates is None or input is None:
        return
    accepted = "a public list chosen without the users' data (each candidate is printed by name)"
    origin = _stdin_copies.get(input)
    try:
        found = os.stat(candidates)
    except OSError:
        return  # the reader says what is wrong with it
    if same_file(candidates, input) or (origin is not None and origin == (found.st_dev, found.st_ino)):
        raise ParameterError("candidates", accepted, f"{candidates}, which is the input")
    if _same_bytes(candidates, input):
        raise ParameterError("candidates", accepted, f"{candidates}, a copy of the input")


def _same_bytes(a: Path, b: Path, block: int = 1 << 20) -> bool:
    """Whether two regular files hold the same bytes (read only when their sizes agree, and only until they
    differ)."""
    try:
        if not (a.is_file() and b.is_file()) or a.stat().st_size != b.stat().st_size:
            return False
        with a.open("rb") as x, b.open("rb") as y:
            while True:
                left, right = x.read(block), y.read(block)
                if left != right:
                    return False
                if not left:
                    return True
    except OSError:
        return False


def _input_name(input: Path) -> str:
    """How a report names its input: the file, or standard input."""
    return STDIN_NAME if input in _stdin_copies else str(input)


def _input_parameters() -> list[inspect.Parameter]:
    """How to read the input file: --input, --column, --item-type, --delimiter, --no-header, --missing."""
    return [
        _param("input", Optional[Path], typer.Option(
            None, "--input", callback=_input_file,
            help="Text (one item per line), CSV, TSV, Parquet or .npy file; - reads standard input (text, or a table "
                 "with --delimiter). Default: the bundled English-words dataset.")),
        _param("column", Optional[str], format_option("column")),
        _param("item_type", ItemTypeChoice, format_option("item_type")),
        _param("delimiter", Optional[str], format_option("delimiter")),
        _param("header", bool, format_option("header")),
        _param("missing", MissingChoice, format_option("missing")),
    ]


def _read_input(entry: ProtocolEntry, input: Path | None, fmt, encoder, candidates: Path | None):
    """(codes, candidate codes or None, dropped users, input name): the users' items and the public candidates."""
    from ..core.encoding import CategoryEncoder
    from ..io import InputFormat, read_codes

    if input is None:
        from .. import datasets  # (Arrow: for the bundled data only)

        if entry.categorical:
            bundled, name = datasets.english_categories()[0], datasets.CATEGORY_DESCRIPTION
        elif isinstance(encoder, CategoryEncoder):  # a small-domain protocol: the most common words
            bundled, name = datasets.english_words(vocabulary=datasets.SMALL_VOCABULARY), datasets.SMALL_DESCRIPTION
        else:
            bundled, name = datasets.english_words(), datasets.DESCRIPTION
        codes, dropped = encoder.encode(bundled), 0
    else:
        summary = read_codes(input, encoder, fmt)
        codes, dropped, name = summary.codes, summary.dropped, _input_name(input)
    candidate_codes = None
    if isinstance(encoder, CategoryEncoder):
        pass  # the categories are the domain, every one labelled
    elif candidates is not None:
        item_type = KIND_TO_ITEM_TYPE.get(encoder.kind, fmt.item_type)  # of the input's kind
        candidate_codes = read_codes(candidates, encoder, InputFormat(item_type=item_type), field="candidates",
                                     public=True).codes
    elif input is None:  # the bundled dataset's public vocabulary names its words
        candidate_codes = encoder.encode(datasets.english_vocabulary(), field="candidate", public=True)
    return codes, candidate_codes, dropped, name


def _category_encoder(input: Path | None, candidates: Path | None, domain: int | None, item_type: str):
    """The encoder of a categorical protocol: the public list of categories (--candidates, or the bundled
    data's), or integers in [0, N) with --domain N."""
    from .. import datasets
    from ..core.encoding import CategoryEncoder
    from ..io import read_list

    if candidates is not None:
        encoder = CategoryEncoder(read_list(candidates))
    elif input is None:
        encoder = CategoryEncoder(datasets.english_categories()[1])
    elif domain is None or item_type == "str":
        raise ParameterError("candidates", "given for text items (the public list of the N categories, one per line)"
                             ", or --domain N for integer items in [0, N)", None)
    else:
        return CategoryEncoder(domain)
    if domain is not None and domain != encoder.domain_size:
        raise ParameterError("domain", f"left out, or the number of categories listed ({encoder.domain_size})",
                             domain)
    return encoder


DEFAULT_DOMAIN = 2**24


def _small_domain_encoder(entry: ProtocolEntry, input: Path | None, hash_key: str | None):
    """A small-domain protocol (grr, oue, fe0, bib, blanket-hist) run without --domain: on the bundled data, its
    most common words as the domain's categories; on a file, --domain is required."""
    from .. import datasets
    from ..core.encoding import CategoryEncoder

    if input is not None:
        raise ParameterError.required("domain", f"for {entry.name} with --input: B, the number of possible items "
                                      "(its messages or its error grow with B; text is hashed into [B])")
    if hash_key is not None:
        raise ParameterError("hash-key", f"left out for {entry.name} on the bundled words without --domain (they are "
                             "categories, no key)", hash_key)
    return CategoryEncoder(datasets.english_vocabulary(datasets.SMALL_VOCABULARY).to_pylist())


def _read_vector_input(entry: ProtocolEntry, input: Path | None, fmt, clip: bool, dimension: Optional[int],
                       candidates: Optional[Path], evaluate: bool):
    """(inputs, dimension, candidate coordinates, coordinate names, input name, warnings, rows left out for a
    missing value) of a vector protocol: the file's vectors or (coordinate, weight) rows, or the bundled data's
    (``evaluate``: the report is an evaluation, which may say how many values --clip clipped)."""
    from ..io import read_vectors_counted
    from ..io.vectors import clip_vectors

    sparse = entry.one_sparse
    names, dropped = None, 0
    if input is None:
        from .. import datasets

        if sparse:
            inputs, names = datasets.sparse_vectors()
            if dimension not in (None, len(names)):
                raise ParameterError("dimension", f"left out, or {len(names)} (the bundled data's words)", dimension)
            dimension, name = len(names), datasets.SPARSE_DESCRIPTION
        else:
            inputs, name = datasets.digits_vectors(), datasets.DIGITS_DESCRIPTION
    else:
        inputs, dropped = read_vectors_counted(input, fmt)
        name = _input_name(input)
        if sparse and dimension is None:
            raise ParameterError("dimension", "given with --input: B, the public number of coordinates (the data's "
                                 "(coordinate, weight) rows must lie in [0, B))", None)
    warnings = []
    if clip:
        values = inputs[:, 1:] if sparse else inputs  # sparse: the weights only; a bad coordinate stays an error
        outside = int(((values < 0) | (values > 1)).sum())
        values[...] = clip_vectors(values)
        # how many were clipped is a count of the data: an evaluation shows it, a release says only what --clip does
        warnings.append(f"{outside} values outside [0, 1] were clipped (--clip)" if evaluate else
                        "values outside [0, 1] are clipped to it (--clip; how many is a count of the data, which a "
                        "release does not carry: --evaluate shows it)")
    coordinates = None if candidates is None else _read_coordinates(candidates)
    return inputs, dimension, coordinates, names, name, warnings, dropped


def _read_coordinates(path: Path):
    """A file of public candidate coordinates, integers one per line (estimate and analyze of vector sums)."""
    import numpy as np

    from ..io import InputFormat, read_list

    listed = read_list(path, InputFormat(item_type="int"), field="candidates")
    try:
        return np.array([int(v) for v in listed], dtype=np.int64)
    except (ValueError, OverflowError):
        bad = next((v for v in listed if not v.lstrip("-").isdigit() or len(v) > 20), "")
        raise ParameterError("candidates", "integer coordinates of at most 19 digits, one per line",
                             bad if len(bad) <= 60 else f"{bad[:50]}... ({len(bad)} characters)") from None
