"""Hostile inputs end in one line naming the option, exit status 2, never a traceback.

Every input path (--input of estimate and compare, --candidates, --params, --messages) is given a huge
sparse file, a huge first line, binary data, an empty file, another format under a misleading extension,
a folder; the Python API's top-level functions are given objects of the wrong type.
"""

from __future__ import annotations

import gzip
import json
import subprocess
import sys

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

import privagg
from privagg.cli import app
from privagg.errors import ParameterError

runner = CliRunner()
EPS = ["--epsilon", "1", "--delta", "1e-6"]


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    d = tmp_path_factory.mktemp("hostile")
    (d / "good.txt").write_text("\n".join(str(i % 50) for i in range(300)) + "\n")
    with open(d / "sparse.tsv", "wb") as f:  # 1 GiB of holes: no disk used, and nothing may read it all
        f.truncate(1 << 30)
    with open(d / "sparse.json", "wb") as f:
        f.truncate(1 << 30)
    (d / "wide.tsv").write_text("h" * 300_000 + "\tz\n1\t2\n")  # a 300,000-character header
    (d / "long.csv").write_text("a\n" + "7" * 1_500_000 + "\n")  # a 1.5 MB line
    (d / "long.txt").write_text("1\n" + "q" * 1_500_000 + "\n")
    (d / "zipped.csv").write_bytes(gzip.compress(b"item\n1\n2\n"))
    (d / "latin1.txt").write_bytes("caf\u00e9\n".encode("latin-1") * 3)
    pq.write_table(pa.table({"item": [1, 2]}), d / "table.csv")  # Parquet under a .csv name
    np.save(d / "array.npy", np.arange(5))
    (d / "array.npy").rename(d / "array.txt")  # .npy under a .txt name
    (d / "json.parquet").write_text('{"item": [1, 2]}')
    (d / "text.npy").write_text("1\n2\n")
    (d / "empty.parquet").write_bytes(b"")
    (d / "empty.npy").write_bytes(b"")
    (d / "folder.txt").mkdir()
    (d / "folder.json").mkdir()
    (d / "random.json").write_bytes(np.random.default_rng(0).bytes(4096))
    code = runner.invoke(app, ["estimate", "fe1", *EPS, "--domain", "64", "--input", str(d / "good.txt"), "--seed",
                               "1", "--write-messages", str(d / "msgs"), "--partitions", "2"]).exit_code
    assert code == 0
    for name in ("nested", "zipped-part"):
        (d / name).mkdir()
        (d / name / "params.json").write_text((d / "msgs" / "params.json").read_text())
    (d / "nested" / "part-00000.parquet").mkdir()
    (d / "zipped-part" / "part-00000.parquet").write_bytes(gzip.compress(b"x" * 100))
    return d


FE1 = ["estimate", "fe1", *EPS, "--domain", "64"]
ANALYZE = ["analyze", "fe1", "--params", "{d}/msgs/params.json", "--messages", "{d}/msgs"]
CASES = [
    # (arguments, the option the error names)
    (FE1 + ["--input", "{d}/sparse.tsv"], "input"),
    (FE1 + ["--input", "{d}/wide.tsv"], "column"),  # one line, the long name cut short
    (FE1 + ["--input", "{d}/long.csv"], "input"),
    (FE1 + ["--input", "{d}/long.txt"], "input"),
    (FE1 + ["--input", "{d}/zipped.csv"], "input"),
    (FE1 + ["--input", "{d}/latin1.txt"], "input"),
    (FE1 + ["--input", "{d}/table.csv"], "input"),
    (FE1 + ["--input", "{d}/array.txt"], "input"),
    (FE1 + ["--input", "{d}/json.parquet"], "input"),
    (FE1 + ["--input", "{d}/text.npy"], "input"),
    (FE1 + ["--input", "{d}/empty.npy"], "input"),
    (FE1 + ["--input", "{d}/empty.parquet"], "input"),
    (FE1 + ["--input", "{d}/folder.txt"], "input"),
    (FE1 + ["--input", "{d}/good.txt", "--candidates", "{d}/zipped.csv"], "candidates"),
    (FE1 + ["--input", "{d}/good.txt", "--candidates", "{d}/long.txt"], "candidates"),
    (["estimate", "olh", "--epsilon", "1", "--input", "{d}/good.txt", "--candidates", "{d}/folder.txt"], "candidates"),
    (["estimate", "grr", "--epsilon", "1", "--input", "{d}/good.txt", "--candidates", "{d}/array.txt"], "candidates"),
    (["estimate", "fe-hh", *EPS, "--input", "{d}/latin1.txt"], "input"),
    (["estimate", "fe-hh", *EPS, "--input", "{d}/empty.npy"], "input"),
    (["estimate", "blanket-vector", *EPS, "--input", "{d}/text.npy"], "input"),
    (["estimate", "blanket-vector", *EPS, "--input", "{d}/table.csv"], "input"),
    (["compare", "--protocols", "fe1", "--epsilon", "1", "--delta", "1e-6", "--input", "{d}/sparse.tsv"], "input"),
    (["compare", "--protocols", "fe1", "--epsilon", "1", "--delta", "1e-6", "--input", "{d}/array.txt"], "input"),
    (["analyze", "fe1", "--params", "{d}/sparse.json", "--messages", "{d}/msgs"], "params"),
    (["analyze", "fe1", "--params", "{d}/random.json", "--messages", "{d}/msgs"], "params"),
    (["analyze", "fe1", "--params", "{d}/folder.json", "--messages", "{d}/msgs"], "params"),
    (["analyze", "fe1", "--params", "{d}/table.csv", "--messages", "{d}/msgs"], "params"),
    (ANALYZE + ["--candidates", "{d}/latin1.txt"], "candidates"),
    (ANALYZE + ["--candidates", "{d}/sparse.tsv"], "candidates"),
    (["analyze", "fe1", "--params", "{d}/msgs/params.json", "--messages", "{d}/nested"], "messages"),
    (["analyze", "fe1", "--params", "{d}/msgs/params.json", "--messages", "{d}/zipped-part"], "messages"),
    (["analyze", "fe1", "--params", "{d}/msgs/params.json", "--messages", "{d}/good.txt"], "messages"),
]


@pytest.mark.parametrize("args, option", CASES, ids=[" ".join(a[1:2] + a[-2:]).replace("{d}/", "")
                                                    for a, _ in CASES])
def test_hostile_input_is_one_line(files, capfd, args, option):
    result = runner.invoke(app, [a.format(d=files) for a in args])
    captured = capfd.readouterr()  # what Arrow's callbacks might print past the runner
    output = result.stdout + result.stderr + captured.out + captured.err
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(result.exception)
    assert result.exit_code == 2, output
    assert "Traceback" not in output and "Exception ignored" not in output, output
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith(f"error: {option} must be "), output
    assert len(lines[0]) < 600, lines[0]


def test_first_line_longer_than_a_csv_field_says_so(tmp_path):
    path = tmp_path / "wide.csv"
    path.write_text("x" * 2_000_000 + "\n1\n")
    result = runner.invoke(app, FE1 + ["--input", str(path)])
    assert result.exit_code == 2 and "a first line longer than 1 MiB" in result.stderr, result.stderr


def test_a_huge_sparse_file_is_refused_at_once(files):
    """A real process: the 1 GiB file is refused on its first bytes, not read into memory."""
    proc = subprocess.run([sys.executable, "-m", "privagg", "estimate", "fe1", *EPS, "--input", str(files / "sparse.tsv")],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    assert proc.stderr.startswith("error: input must be a readable UTF-8 delimited table") and "binary data" in \
        proc.stderr, proc.stderr


def test_partitions_are_capped_at_the_message_count(files, tmp_path):
    result = runner.invoke(app, FE1 + ["--input", str(files / "good.txt"), "--seed", "2", "--write-messages",
                                       str(tmp_path / "m"), "--partitions", "100000", "--json"])
    assert result.exit_code == 0, result.stderr
    written = len(list((tmp_path / "m").glob("part-*.parquet")))
    report = json.loads(result.stdout)
    assert written == report["messages"]["total"] < 100_000
    assert f"--partitions 100000 capped at {written}" in result.stderr


def test_task_create_in_a_missing_folder_is_one_line(files):
    result = runner.invoke(app, ["task", "create", "--params", str(files / "msgs" / "params.json"),
                                 "--db", "sqlite:////no/such/folder/tasks.db"])
    assert result.exit_code == 2 and "Traceback" not in result.stdout + result.stderr
    assert result.stderr.startswith("error: db must be"), result.stderr


@pytest.mark.parametrize("call, argument", [
    (lambda: privagg.shuffle((4, 5, 6)), "batch"),
    (lambda: privagg.shuffle({"a": np.arange(3)}), "batch"),
    (lambda: privagg.client({"protocol": "fe1"}), "parameters"),
    (lambda: privagg.analyzer("fe1"), "parameters"),
    (lambda: privagg.calibrate(("fe1",), epsilon=1, n_users=100, domain_size=8), "protocol"),
    (lambda: privagg.calibrate("fe1", epsilon="1", delta=1e-6, n_users=100, domain_size=8), "epsilon"),
    (lambda: privagg.load_parameters(42), "data"),
], ids=["shuffle-tuple", "shuffle-dict", "client-dict", "analyzer-str", "calibrate-tuple", "calibrate-str-epsilon",
        "load_parameters-int"])
def test_api_wrong_types_name_the_argument(call, argument):
    with pytest.raises(ParameterError) as err:
        call()
    assert err.value.field == argument and str(err.value).startswith(f"{argument} must be ")
