"""Users' files read without surprises: a table of odd inputs, each giving the right counts or exit status 2
with one line naming the problem, and a property test against a simple reference reader."""

import collections
import csv
import io
import json
import mmap
import re

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from privagg.cli import app
from privagg.core.encoding import ItemEncoder
from privagg.errors import ParameterError
from privagg.io import InputFormat, read_codes
from privagg.protocols import registry
from privagg.simulate import runner as runner_module

KEY = b"test-key"
DOMAIN = 1000
runner = CliRunner()


def text_codes(*items):
    """The codes of text items under the test key, as a Counter."""
    encoder = ItemEncoder(DOMAIN, KEY)
    return collections.Counter(encoder.encode(list(items)).tolist())


def write(tmp_path, name, content):
    path = tmp_path / name
    if isinstance(content, pa.Table):
        pq.write_table(content, path)
    elif isinstance(content, np.ndarray):
        np.save(path, content)
    else:
        path.write_bytes(content if isinstance(content, bytes) else content.encode())
    return path


# (file name, content, InputFormat options, expected counts and users left out)
READS = [
    ("bom.txt", b"\xef\xbb\xbf3\n3\n5\n", {}, {3: 2, 5: 1}, 0),
    ("crlf.txt", b"1\r\n2\r\n2\r\n", {}, {1: 1, 2: 2}, 0),
    ("no-final-newline.txt", b"4\n4", {}, {4: 2}, 0),
    ("signs.txt", b"+5\n-0\n007\n", {}, {5: 1, 0: 1, 7: 1}, 0),
    ("words.txt", "é\nNA\nnull\nnan\n", {}, text_codes("é", "NA", "null", "nan"), 0),
    ("spaces.txt", " a\na \n", {}, text_codes(" a", "a "), 0),
    ("quotes.txt", '"a"\n"a"\n', {}, text_codes('"a"', '"a"'), 0),  # text is verbatim: quotes are characters
    ("ints-as-text.txt", b"1\n2\n2\n", {"item_type": "str"}, text_codes("1", "2", "2"), 0),
    ("mixed-as-text.txt", b"1\nabc\n3.0\n", {"item_type": "str"}, text_codes("1", "abc", "3.0"), 0),
    ("na.csv", "app\nNA\nnull\nnan\n", {}, text_codes("NA", "null", "nan"), 0),
    ("two.csv", b"user,app\n1,7\n2,7\n3,9\n", {"column": "app"}, {7: 2, 9: 1}, 0),
    ("quoted.csv", b'app\n"a,b"\n"a,b"\nc\n', {}, text_codes("a,b", "a,b", "c"), 0),
    ("bom.csv", b"\xef\xbb\xbfapp\n12\n", {}, {12: 1}, 0),
    ("t.tsv", b"user\tapp\nx\t4\ny\t4\n", {"column": "app"}, {4: 2}, 0),
    ("semicolons.txt", b"a;b\n1;8\n2;8\n", {"delimiter": ";", "column": "b"}, {8: 2}, 0),
    ("headless.csv", b"1,2\n3,2\n", {"header": False, "column": "1"}, {2: 2}, 0),
    ("holes.csv", b"app,n\n5,1\n,2\n5,3\n", {"column": "app", "missing": "drop"}, {5: 2}, 1),
    ("blank-lines.txt", b"5\n\n6\n", {"missing": "drop"}, {5: 1, 6: 1}, 1),
    ("ints.parquet", pa.table({"x": pa.array([1, 1, 2], pa.int64())}), {}, {1: 2, 2: 1}, 0),
    ("strings.parquet", pa.table({"x": ["4", "4"]}), {}, {4: 2}, 0),
    ("words.parquet", pa.table({"x": ["a", "b"], "y": [1, 2]}), {"column": "x"}, text_codes("a", "b"), 0),
    ("nulls.parquet", pa.table({"x": pa.array([3, None, 3])}), {"missing": "drop"}, {3: 2}, 1),
    ("ints.npy", np.array([9, 9, 1]), {}, {9: 2, 1: 1}, 0),
]


@pytest.mark.parametrize("name,content,options,counts,dropped", READS, ids=[r[0] for r in READS])
def test_files_read_to_the_right_counts(tmp_path, name, content, options, counts, dropped):
    summary = read_codes(write(tmp_path, name, content), ItemEncoder(DOMAIN, KEY), InputFormat(**options))
    assert collections.Counter(summary.codes.tolist()) == counts
    assert summary.dropped == dropped


# (file name, content, command-line options, fragments the one error line holds)
REFUSALS = [
    ("mixed.csv", b"app\n1\n2\nabc\n4\n", [], ["input must be integers throughout", "'abc' on line 4",
                                               "--item-type str"]),
    ("floats.txt", b"3.0\n4.0\n", [], ["'3.0' on line 1", "not a canonical decimal integer"]),
    ("late-float.txt", b"3\n4\n5.0\n", [], ["'5.0' on line 3"]),
    ("underscore.txt", b"1_05\n2\n", [], ["'1_05' on line 1"]),
    ("arabic.txt", "\u0663\n\u0664\n".encode(), [], ["on line 1", "not a canonical decimal integer"]),
    ("word-then-number.txt", b"apple\n42\n", [], ["'42' on line 2", "where line 1", "('apple') is text"]),
    ("huge.txt", b"18446744073709551616\n1\n", [], ["18446744073709551616, outside it, on line 1"]),
    ("signed.txt", b"9223372036854775808\n1\n", [], ["9223372036854775808, outside it, on line 1"]),  # not int64
    ("negative.txt", b"5\n-1\n", [], ["integers in [0, 1000)", "-1 on line 2"]),
    ("outside.csv", b"x\n5\n7\n1000\n", [], ["integers in [0, 1000)", "1000 on line 4"]),
    ("declared-int.txt", b"1\nx\n", ["--item-type", "int"], ["'x' on line 2"]),
    ("headless.csv", b"1\n2\n3\n", [], ["header line", "--no-header"]),
    ("two.tsv", b"a\tb\nx\t1\n", [], ["column is required for a table of 2 columns: --column, one of 'a', 'b'"]),
    ("two.csv", b"a,b\nx,1\n", ["--column", "c"], ["column must be one of 'a', 'b', got c"]),
    ("index.csv", b"1,2\n3,4\n", ["--no-header", "--column", "b"], ["column must be a 0-based index below 2"]),
    ("text-column.txt", b"1\n2\n", ["--column", "x"], ["column must be left out for a plain-text file"]),
    ("duplicates.csv", b"a,a\n1,2\n", ["--column", "a"], ["column names are distinct", "duplicated 'a'"]),
    ("ragged.csv", b"a,b\n1,2\n3\n", ["--column", "a"], ["line 3: 2 field(s) expected, 1 found"]),
    ("empty-cell.csv", b"a,b\n1,2\n,3\n", ["--column", "a"], ["nothing on line 3", "--missing drop"]),
    ("blank-line.txt", b"1\n\n2\n", [], ["nothing on line 2", "--missing drop"]),
    ("latin1.txt", b"caf\xe9\n", [], ["line 1 is not valid UTF-8"]),
    ("control.txt", b"a\x1fb\nc\n", [], ["line 1 holds the control character U+001F"]),
    ("broken.parquet", b"not parquet", [], ["input must be a readable Parquet file"]),
    ("floats.parquet", pa.table({"x": [1.5, 2.5]}), [], ["integers or strings", "double"]),
    ("matrix.npy", np.zeros((2, 2), dtype=np.int64), [], ["one-dimensional integer .npy array"]),
    ("items.txt", b"1\n2\n", ["--delimiter", "ab"], ["delimiter must be one ASCII character"]),
    ("items.txt", b"1\n2\n", ["--hash-key", "xyz"], ["hash-key must be 2 to 128 hex digits"]),
    ("missing.txt", None, [], ["input must be an existing file"]),
]


@pytest.mark.parametrize("name,content,options,fragments", REFUSALS, ids=[r[0] for r in REFUSALS])
def test_bad_files_exit_2_with_one_line(tmp_path, name, content, options, fragments):
    path = tmp_path / name if content is None else write(tmp_path, name, content)
    result = runner.invoke(app, ["estimate", "fe1", "--input", str(path), "--epsilon", "1", "--delta", "1e-6",
                                 "--domain", str(DOMAIN), *options])
    assert result.exit_code == 2, result.stdout
    assert result.stderr.startswith("error: ") and result.stderr.count("\n") == 1, result.stderr
    for fragment in fragments:
        assert fragment in result.stderr, result.stderr


def test_output_may_not_be_the_input(tmp_path):
    path = write(tmp_path, "items.txt", b"1\n2\n")
    result = runner.invoke(app, ["estimate", "fe1", "--input", str(path), "--epsilon", "1", "--delta", "1e-6",
                                 "--domain", "10", "--output", str(path)])
    assert result.exit_code == 2 and "output must be a file other than the inputs" in result.stderr
    assert path.read_bytes() == b"1\n2\n"


def _candidate_commands():
    """Every estimate command that takes --candidates, read from the app, with the options it needs."""
    from typer.main import get_command

    for name, command in get_command(app).commands["estimate"].commands.items():
        if any("--candidates" in getattr(p, "opts", ()) for p in command.params):
            yield [name, "--epsilon", "1", *([] if registry.REGISTRY[name].pure else ["--delta", "1e-6"])]


CANDIDATE_COMMANDS = list(_candidate_commands())
# how a user's data file comes back as its own candidate list
AS_CANDIDATES = {"the same path": lambda d, f: f, "another path": lambda d, f: d / ".." / d.name / f.name,
                 "a symbolic link": lambda d, f: _link(d / "link.txt", f, hard=False),
                 "a hard link": lambda d, f: _link(d / "hard.txt", f, hard=True),
                 "a copy": lambda d, f: (d / "copy.txt").write_bytes(f.read_bytes()) and d / "copy.txt"}


def _link(link, target, hard):
    link.hardlink_to(target) if hard else link.symlink_to(target)
    return link


@pytest.mark.parametrize("how", AS_CANDIDATES)
@pytest.mark.parametrize("command", CANDIDATE_COMMANDS, ids=[c[0] for c in CANDIDATE_COMMANDS])
def test_the_input_is_refused_as_its_own_candidates(tmp_path, command, how):
    """estimate fe1 --input mydata.txt --candidates mydata.txt printed a user's raw value (a string held by one
    user) by name under the DP line: candidates are a public list, and the input as candidates is refused, as
    --output is, by any path and as a copy, for every protocol that takes candidates."""
    data = write(tmp_path, "mydata.txt", b"maps\nmail\nmaps\nalice-ssn-123-45-6789\n" if command[0] not in (
        "sparse-vector", "sparse-vector-hashed") else b"c,w\n1,0.5\n2,0.5\n")
    if command[0].startswith("sparse-vector"):
        data = data.rename(tmp_path / "mydata.csv")
    result = runner.invoke(app, ["estimate", *command, "--input", str(data), "--candidates",
                                 str(AS_CANDIDATES[how](tmp_path, data))])
    assert result.exit_code == 2 and result.stderr.startswith(
        "error: candidates must be a public list chosen without the users' data"), result.output
    assert "alice" not in result.output


@pytest.mark.parametrize("shell", [
    "privagg estimate fe1 --input mydata.txt --candidates /dev/stdin < mydata.txt",
    "privagg estimate fe1 --input - --candidates mydata.txt < mydata.txt",
    "cat mydata.txt | privagg estimate fe1 --input - --candidates mydata.txt",
    "cat mydata.txt | privagg estimate fe1 --input - --candidates /dev/stdin",
], ids=["candidates-stdin", "input-stdin-redirected", "input-stdin-piped", "both-stdin"])
def test_the_input_through_standard_input_is_refused_as_candidates(tmp_path, shell):
    import os
    import subprocess
    import sys

    (tmp_path / "mydata.txt").write_text("maps\nmail\nmaps\nalice-ssn-123-45-6789\n")
    command = shell.replace("privagg", f"{sys.executable} -m privagg") + " --epsilon 1 --delta 1e-9"
    if "<" in command:  # the redirection last
        command = command.replace(" < mydata.txt", "") + " < mydata.txt"
    done = subprocess.run(command, shell=True, cwd=tmp_path, capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
    assert done.returncode == 2 and done.stderr.startswith(
        "error: candidates must be a public list chosen without the users' data"), done.stderr
    assert "alice" not in done.stdout + done.stderr


STDIN_TABLES = [
    (["estimate", "fe1", "--epsilon", "1", "--delta", "1e-6"], b"name,age\nalice,3\nbob,4\n", "--delimiter ','"),
    (["estimate", "fe-hh", "--epsilon", "1", "--delta", "1e-6"], b"name\tage\nalice\t3\nbob\t4\n",
     "--delimiter $'\\t'"),
    (["estimate", "grr", "--epsilon", "1", "--domain", "8"], b"\xef\xbb\xbfa;b\r\n1;2\r\n", "--delimiter ';'"),
    (["estimate", "dpds", "--epsilon", "1", "--delta", "1e-6"], b"a|b\nx|y\n", "--delimiter '|'"),
    (["estimate", "blanket-vector", "--epsilon", "1", "--delta", "1e-6"], b"x,y\n0.1,0.2\n0.3,0.4\n",
     "--delimiter ','"),
    (["compare", "--protocols", "grr", "--epsilon", "1"], b"item,n\na,1\nb,2\n", "--delimiter ','"),
    (["compare", "--protocols", "grr", "--epsilon", "1"], b'["a",\n"b", "c"]\n', "JSON"),
    (["estimate", "fe1", "--epsilon", "1", "--delta", "1e-6"], b'{"item": "a"}\n{"item": "b"}\n', "JSON"),
    (["estimate", "fe1", "--epsilon", "1", "--delta", "1e-6"], b'[\n  "a",\n  "b"\n]\n', "JSON"),
]


@pytest.mark.parametrize("command, data, hint", STDIN_TABLES, ids=[f"{c[c[0] == 'estimate']}-{h.split()[-1]}" for c, _, h in STDIN_TABLES])
def test_a_table_or_json_on_standard_input_is_not_read_line_by_line(command, data, hint):
    """A CSV piped to --input - was read line by line, its header and commas in the items: a table (every line
    holds one delimiter) or JSON on standard input stops, suggesting --delimiter."""
    result = runner.invoke(app, [*command, "--input", "-"], input=data)
    assert result.exit_code == 2 and result.stderr.startswith("error: input must be ") and hint in result.stderr, \
        result.output
    assert result.stderr.count("\n") == 1 and "privagg-stdin" not in result.stderr, result.stderr


@pytest.mark.parametrize("command, data", [
    (["estimate", "fe-hh", "--epsilon", "1", "--delta", "1e-6", "--phi", "0.1"], b"a\n\xed\xa0\x80\nb\n"),
    (["estimate", "grr", "--epsilon", "1", "--domain", "4"], b"1\n\n2\n"),
    (["estimate", "blanket-vector", "--epsilon", "1", "--delta", "1e-6"], b"x\n1\n"),
    (["estimate", "fe-hh", "--epsilon", "1", "--delta", "1e-6", "--phi", "0.1", "--domain", "8"], b"1\n" * 3000 + b"9\n"),
], ids=["not-utf8", "blank-line", "vectors-as-text", "outside-the-domain"])
def test_errors_about_standard_input_name_it_so(command, data):
    """The readers named standard input by its temporary copy (/tmp/privagg-stdin-.../stdin): it is "standard
    input" in every error, as in the reports."""
    result = runner.invoke(app, [*command, "--input", "-"], input=data)
    assert result.exit_code == 2 and "standard input" in result.stderr, result.output
    assert "privagg-stdin" not in result.stderr and result.stderr.count("\n") == 1, result.stderr


def test_a_pipe_named_as_input_points_to_the_dash():
    import os
    import subprocess
    import sys

    done = subprocess.run(f"printf 'a\\nb\\n' | {sys.executable} -m privagg estimate fe1 --epsilon 1 --delta 1e-6 "
                          "--input /dev/stdin", shell=True, capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
    assert done.returncode == 2 and "--input - reads standard input" in done.stderr, done.stderr


def _zipped(data: bytes) -> bytes:
    import zipfile

    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr("items.txt", data)
    return buffer.getvalue()


@pytest.mark.parametrize("pack, name", [("gzip", "gzip-compressed"), ("bz2", "bzip2-compressed"),
                                        ("lzma", "xz-compressed"), ("zip", "a zip archive")])
@pytest.mark.parametrize("where", ["stdin", "file"])
def test_compressed_input_says_so(tmp_path, pack, name, where):
    """A compressed file or archive, piped or named .txt or .csv, is named as such, not as text that is not
    UTF-8 (or, for bzip2's ASCII header, read as items)."""
    import importlib

    data = b"item\n" + b"apple\n" * 50
    packed = _zipped(data) if pack == "zip" else importlib.import_module(pack).compress(data)
    if where == "stdin":
        result = runner.invoke(app, ["estimate", "fe1", "--epsilon", "1", "--delta", "1e-6", "--input", "-"],
                               input=packed)
    else:
        result = runner.invoke(app, ["estimate", "fe1", "--epsilon", "1", "--delta", "1e-6", "--input",
                                     str(write(tmp_path, "items.csv", packed))])
    assert result.exit_code == 2 and f"({name}" in result.stderr and "unpack it first" in result.stderr, \
        result.stderr


def test_standard_input_as_a_table_with_its_delimiter_and_text_with_some_commas(tmp_path):
    given = runner.invoke(app, ["estimate", "grr", "--epsilon", "1", "--domain", "8", "--input", "-", "--delimiter",
                                ",", "--column", "n", "--seed", "1", "--json"], input=b"name,n\na,1\nb,2\nc,1\n")
    assert given.exit_code == 0, given.output
    assert json.loads(given.stdout)["n_users"] == 3
    text = runner.invoke(app, ["estimate", "grr", "--epsilon", "1", "--domain", "8", "--input", "-", "--item-type",
                               "str", "--seed", "1", "--json"], input=b"Smith, John\nDoe\nSmith, John\n")
    assert text.exit_code == 0 and json.loads(text.stdout)["n_users"] == 3, text.output
    named = write(tmp_path, "names.txt", b"Smith, John\nDoe, Jane\n")  # a file's extension says what it is
    assert runner.invoke(app, ["estimate", "grr", "--epsilon", "1", "--domain", "8", "--input", str(named),
                               "--seed", "1"]).exit_code == 0


HH = ["estimate", "fe-hh", "--epsilon", "1", "--delta", "1e-6", "--phi", "0.1"]
VECTORS = ["estimate", "blanket-vector", "--epsilon", "1", "--delta", "1e-6"]
LOCATIONS = [  # (command, file, content, options, the place the error names)
    (HH + ["--max-length", "4"], "hh.txt", b"ab\n" * 3000 + b"\nlonger-than-four\n", ["--missing", "drop"],
     "'longer-than-four' (16 bytes) on line 3002 of"),
    (HH + ["--max-length", "4"], "hh.csv", b"id,item\n" + b"1,ab\n" * 3000 + b"2,toolong\n", ["--column", "item"],
     "on line 3002 of"),
    (HH + ["--domain", "8"], "big.txt", b"1\n" * 3000 + b"99\n", [], "got 99 on line 3001 of"),
    (HH + ["--domain", "8"], "big.parquet", pa.table({"x": [1] * 3000 + [99]}), [], "got 99 on row 3001 of"),
    (HH + ["--domain", "8"], "big.npy", np.array([1] * 3000 + [99]), [], "got 99 on row 3001 of"),
    (HH, "mixed.txt", b"1\n2\nx\n", ["--item-type", "int"], "got 'x' on line 3 of"),
    (VECTORS, "v.csv", b"p,q\n0.1,0.2\n\n0.3,1.5\n", ["--missing", "drop"], "1.5 in coordinate 1 on line 4 of"),
    (VECTORS, "v.parquet", pa.table({"p": [0.1, None, 0.3], "q": [0.2, 0.1, 1.5]}), ["--missing", "drop"],
     "1.5 in coordinate 1 on row 3 of"),
    (VECTORS, "nan.csv", b"p,q\n0.1,0.2\n\n0.3,nan\n", ["--missing", "drop", "--clip"], "NaN in coordinate 1 on line 4 of"),
    (["estimate", "sparse-vector", "--epsilon", "1", "--delta", "1e-6", "--dimension", "4"], "sv.csv",
     b"c,w\n1,0.5\n2,1.5\n", [], "1.5 on line 3 of"),
]


@pytest.mark.parametrize("command, name, content, options, place", LOCATIONS, ids=[r[1] for r in LOCATIONS])
def test_a_bad_value_is_named_by_its_place_in_the_file(tmp_path, command, name, content, options, place):
    """fe-hh said "row 3, counted from 0" of its items where the readers say "line N of FILE": a protocol's error
    about a value it was given names the value's place in the file as the readers do (the header counted, users
    left out for a missing value skipped, rows from 1 for Parquet and .npy)."""
    path = write(tmp_path, name, content)
    result = runner.invoke(app, [*command, "--input", str(path), *options])
    assert result.exit_code == 2 and f"{place} {path}" in result.stderr, result.stderr
    assert "counted from 0" not in result.stderr and result.stderr.count("\n") == 1


def test_npy_vectors_are_mapped_and_clip_leaves_the_file_as_it_was(tmp_path):
    """A .npy of vectors is mapped from the file (no copy read into fresh memory), and ``--clip``'s writes go to
    private copies of the pages they touch: the report is the clipped data's, the file stays byte for byte."""
    from privagg.io import read_vectors

    vectors = np.random.default_rng(4).random((400, 3))
    vectors[5, 1], vectors[9, 0] = 1.5, -0.25
    np.save(tmp_path / "v.npy", vectors)
    before = (tmp_path / "v.npy").read_bytes()
    read = read_vectors(tmp_path / "v.npy")
    bases = [read]
    while getattr(bases[-1], "base", None) is not None:
        bases.append(bases[-1].base)
    assert isinstance(bases[-1], mmap.mmap) and np.array_equal(read, vectors)
    args = ["estimate", "blanket-vector", "--epsilon", "1", "--delta", "1e-6", "--seed", "3", "--json"]
    clipped = runner.invoke(app, [*args, "--input", str(tmp_path / "v.npy"), "--clip"])
    np.save(tmp_path / "c.npy", np.clip(vectors, 0, 1))
    reference = runner.invoke(app, [*args, "--input", str(tmp_path / "c.npy")])
    assert clipped.exit_code == reference.exit_code == 0, clipped.stderr
    assert "2 values outside [0, 1] were clipped" in clipped.stdout
    strip = ("warnings", "input", "simulation")
    assert ({k: v for k, v in json.loads(clipped.stdout).items() if k not in strip}
            == {k: v for k, v in json.loads(reference.stdout).items() if k not in strip})
    assert (tmp_path / "v.npy").read_bytes() == before

# --- the property: any file read successfully gives the counts of a simple reference reader ----------------

CANONICAL = re.compile(r"[+-]?[0-9]+")
NUMBER = re.compile(r"[+-]?([\d_]*\d[\d_]*(\.[\d_]*)?|\.[\d_]*\d[\d_]*)([eE][+-]?\d+)?")


def reference_counts(values: list[str]) -> collections.Counter | None:
    """The rule in plain Python: integers when every value is canonical, text when none looks like a number,
    else refused (None)."""
    if all(CANONICAL.fullmatch(v) for v in values):
        numbers = [int(v) for v in values]
        if any(not 0 <= x < DOMAIN for x in numbers):
            return None
        return collections.Counter(numbers)
    if any(NUMBER.fullmatch(v) for v in values):
        return None
    return text_codes(*values)


def lines_of(text: str) -> list[str]:
    """One item per line: CR LF, CR or LF end a line; a final line break ends the last item."""
    lines = text.replace("\r\n", "\n").replace("\r", "\n").split("\n")
    return lines[:-1] if lines[-1] == "" else lines


ITEM = st.one_of(
    st.integers(-5, DOMAIN + 5).map(str),
    st.sampled_from(["3.0", "1_05", "\u0663", "1e5", ".5", "+7", "007", "NA", "nan", "apple", " 4"]),
    st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\n\r\x1f"), min_size=1, max_size=6),
)
ENDINGS = st.sampled_from(["\n", "\r\n"])


def outcome(path, fmt):
    try:
        return collections.Counter(read_codes(path, ItemEncoder(DOMAIN, KEY), fmt).codes.tolist())
    except ParameterError:
        return None


@settings(max_examples=150, deadline=None)
@given(values=st.lists(ITEM, min_size=1, max_size=30), ending=ENDINGS, bom=st.booleans())
def test_text_files_count_like_the_reference_reader(tmp_path_factory, values, ending, bom):
    text = ("\ufeff" if bom else "") + ending.join(values) + ending
    path = tmp_path_factory.mktemp("prop") / "items.txt"
    path.write_bytes(text.encode())
    assert lines_of(text.removeprefix("\ufeff")) == values  # the file holds what was generated
    assert outcome(path, InputFormat()) == reference_counts(values)


@settings(max_examples=150, deadline=None)
@given(values=st.lists(ITEM, min_size=1, max_size=30), delimiter=st.sampled_from([",", "\t", ";"]))
def test_tables_count_like_the_reference_reader(tmp_path_factory, values, delimiter):
    buffer = io.StringIO()
    writer = csv.writer(buffer, delimiter=delimiter, lineterminator="\n")
    writer.writerow(["item", "other"])
    writer.writerows([[v, "x"] for v in values])
    path = tmp_path_factory.mktemp("prop") / "items.csv"
    path.write_text(buffer.getvalue(), encoding="utf-8")
    rows = list(csv.reader(io.StringIO(buffer.getvalue()), delimiter=delimiter))[1:]
    assert [r[0] for r in rows] == values
    assert outcome(path, InputFormat(column="item", delimiter=delimiter)) == reference_counts(values)


# --- checks before work -----------------------------------------------------------------------------------

def estimate(*args):
    result = runner.invoke(app, ["estimate", *map(str, args)])
    return result.exit_code, result.stdout, result.stderr


def test_runs_that_cannot_fit_are_refused_before_reading(tmp_path, monkeypatch):
    # the last line is bad: a refusal naming it would mean the file was read first
    path = write(tmp_path, "items.txt", "1\n" * 5000 + "oops\n")
    code, _, err = estimate("fe0", "--input", path, "--epsilon", 1, "--delta", 1e-10, "--domain", 2**28)
    assert code == 2 and err.startswith("error: domain must be set so that a faithful simulation's n x messages per user")
    assert "lower --domain" in err and "--mode fast" in err and "oops" not in err
    # the central curator has no fast path: --mode fast runs faithfully, so it is refused too, with no such hint
    code, _, err = estimate("bib", "--input", path, "--epsilon", 1, "--delta", 1e-10, "--domain", 2**28,
                            "--mode", "fast")
    assert code == 2 and "lower --domain" in err and "--mode fast" not in err and "oops" not in err
    code, _, err = estimate("fe1", "--input", path, "--epsilon", 1, "--delta", 1e-10, "--c", 0, "--bins", 2**27)
    assert code == 2 and "bins must be" in err  # the option the user gave, not --c
    monkeypatch.setattr(runner_module, "MESSAGES_MAX", 2**12)  # 5000 users, c = 0.5: about 300,000 messages
    code, _, err = estimate("fe1", "--input", path, "--epsilon", 1, "--delta", 1e-10, "--c", 0.5)
    assert code == 2 and err.startswith("error: c must be set") and "raise --c" in err


@pytest.mark.parametrize("seeded", [False, True])
def test_vectors_too_many_to_simulate_are_refused_before_their_values_are_read(tmp_path, monkeypatch, seeded):
    """A .npy of 2^27 + 1 vectors (a sparse file of zeros: its pages cost nothing until read) is refused for its
    message count, not after a pass over its 512 MiB: its last value, NaN, would be named had it been read. A
    seeded run is evaluated against the true sums, which are summed on a second thread beside the run: not for
    a run that is refused (the refusal would wait for a pass over the whole file)."""
    from numpy.lib import format

    from privagg.protocols.privacy_blanket import BlanketVectorParameters

    summed = []
    monkeypatch.setattr(BlanketVectorParameters, "true_total", lambda self, *a: summed.append(1))
    rows = 2**27 + 1
    path = tmp_path / "many.npy"
    with open(path, "wb") as f:
        format.write_array_header_1_0(f, {"descr": "<f4", "fortran_order": False, "shape": (rows, 1)})
        f.seek(4 * (rows - 1), 1)
        f.write(np.float32(np.nan).tobytes())
    code, _, err = estimate("blanket-vector", "--input", path, "--epsilon", 1, "--delta", 1e-9,
                            *(("--seed", 1) if seeded else ()))
    assert code == 2 and "stay below 2^27" in err and "nan" not in err.lower()
    assert summed == []


def test_runs_beyond_the_memory_are_refused_before_reading(tmp_path, monkeypatch):
    import privagg.simulate.frequency as frequency

    monkeypatch.setattr(frequency, "available_memory", lambda: 2**20)
    path = write(tmp_path, "items.txt", "1\n" * 5000 + "oops\n")
    code, _, err = estimate("fe1", "--input", path, "--epsilon", 1, "--delta", 1e-10, "--domain", 100)
    assert code == 2 and "GiB are available" in err and "about 5e+03 users" in err and "oops" not in err


def test_progress_is_plain_lines_off_a_terminal(tmp_path):
    path = write(tmp_path, "items.txt", "1\n2\n" * 3000)
    code, _, err = estimate("fe1", "--input", path, "--epsilon", 1, "--delta", 1e-6, "--domain", 4096, "--progress")
    assert code == 0
    lines = err.splitlines()
    assert any(line.startswith("randomize: 6000/6000 (100%)") for line in lines), lines
    assert all(re.match(r"(randomize|analyze): \d+/\d+ \(\d+%\), [\d.]+ s$", line) for line in lines), lines


def test_plain_integers_are_read_place_by_place_as_int_reads_them():
    """blocks._plain_integers (a text file's one integer a line, read from Arrow's buffers): every value of 1 to
    18 digits, leading zeros kept, as int() reads it, in a sliced array too (its offset); None wherever the exact
    path must decide (a sign, 19 digits, an empty value, a letter, a null)."""
    from privagg.io.blocks import _plain_integers

    rng = np.random.default_rng(5)
    widths = rng.integers(1, 19, 20_000)
    texts = ["".join(map(str, rng.integers(0, 10, w))) for w in widths]
    texts[:3] = ["0", "000000000000000007", "999999999999999999"]
    values = pa.array(texts)
    np.testing.assert_array_equal(_plain_integers(values), [int(t) for t in texts])
    np.testing.assert_array_equal(_plain_integers(values.slice(17, 500)), [int(t) for t in texts[17:517]])
    for bad in (["1", "+2"], ["1", "-2"], ["1", "1" * 19], ["1", ""], ["1", "2a"], ["1", None]):
        assert _plain_integers(pa.array(bad)) is None, bad
