"""Hostile inputs end in one line naming the option, exit status 2, never a traceback.

Every input path (--input of estimate and compare, --candidates, --params, --messages) is given a huge
sparse file, a huge first line, binary data, an empty file, another format under a misleading extension,
a folder; the Python API's top-level functions are given objects of the wrong type.
"""

from __future__ import annotations

import gzip
import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

import privagg
from privagg.cli import app
from privagg.errors import ParameterError
from privagg.protocols import registry
from privagg.protocols.kinds import Family

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
    # event logs, many rows a user (--user-column): well formed, a row without its user, a user left with no item
    (d / "events.csv").write_text("user,app,x\n" + "".join(f"u{i % 40},{i % 7},0.{i % 10}\n" for i in range(300)))
    (d / "no-user.csv").write_text("user,app\nu1,3\n,4\nu2,5\n")
    (d / "no-item.csv").write_text("user,app\nu1,3\nu2,\nu1,\nu3,5\n")
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
    (["estimate", "grr", "--epsilon", "1", "--domain", "64", "--input", "{d}/good.txt", "--candidates",
      "{d}/array.txt"], "candidates"),
    (["estimate", "fe-hh", *EPS, "--input", "{d}/latin1.txt"], "input"),
    (["estimate", "fe-hh", *EPS, "--input", "{d}/empty.npy"], "input"),
    (["estimate", "blanket-vector", *EPS, "--input", "{d}/text.npy"], "input"),
    (["estimate", "blanket-vector", *EPS, "--input", "{d}/table.csv"], "input"),
    # many rows a user (issue 49): the user column missing, empty, a user with no item left, L = 0, the text format
    (FE1 + ["--input", "{d}/events.csv", "--column", "app", "--user-column", "device"], "user-column"),
    (FE1 + ["--input", "{d}/events.csv", "--column", "app", "--user-column", "app"], "user-column"),
    (FE1 + ["--input", "{d}/no-user.csv", "--column", "app", "--user-column", "user"], "user-column"),
    (FE1 + ["--input", "{d}/no-item.csv", "--column", "app", "--user-column", "user", "--missing", "drop"],
     "user-column"),
    (FE1 + ["--input", "{d}/no-item.csv", "--column", "app", "--user-column", "user"], "input"),
    (FE1 + ["--input", "{d}/events.csv", "--column", "app", "--user-column", "user", "--max-items", "0"],
     "max-items"),
    (FE1 + ["--input", "{d}/events.csv", "--column", "app", "--max-items", "2"], "max-items"),
    (FE1 + ["--input", "{d}/good.txt", "--user-column", "user"], "user-column"),
    (FE1 + ["--user-column", "user"], "user-column"),
    (["estimate", "dpcs", *EPS, "--domain", "7", "--input", "{d}/events.csv", "--column", "app", "--user-column",
      "user", "--max-items", "2"], "max-items"),
    (["estimate", "fe-hh", *EPS, "--input", "{d}/good.txt", "--user-column", "user"], "user-column"),
    (["estimate", "blanket-vector", *EPS, "--input", "{d}/events.csv", "--user-column", "device"], "user-column"),
    (["estimate", "blanket-vector", *EPS, "--input", "{d}/events.csv", "--user-column", "user", "--max-rows", "0"],
     "max-rows"),
    (["calibrate", "dpcs", *EPS, "--users", "1000", "--domain", "7", "--max-items", "2"], "max-items"),
    (["calibrate", "fe1", *EPS, "--users", "1000", "--domain", "7", "--max-items", "0"], "max-items"),
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
    assert len(lines) == 1 and lines[0].startswith((f"error: {option} must be ", f"error: {option} is required ")), \
        output
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


def test_partitions_are_capped_at_the_message_count(tmp_path):
    # 50 users (about 800 messages, each written as a partition of its own), not good.txt's 300 (3,245)
    (tmp_path / "few.txt").write_text("\n".join(str(i) for i in range(50)) + "\n")
    result = runner.invoke(app, FE1 + ["--input", str(tmp_path / "few.txt"), "--seed", "2", "--write-messages",
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


# --- every path option of every command, read from the typer app: a path it cannot take is one line, before work ---

def _path_options(typer_app=app, command=()):
    """(command words, flag or None for an argument, kind) of every Path option and argument of every command."""
    import inspect
    import typing

    from typer.models import ParameterInfo

    from privagg.cli.options import PATH_OPTIONS

    for info in typer_app.registered_commands:
        words = (*command, info.name or info.callback.__name__.replace("_", "-"))
        hints = typing.get_type_hints(info.callback)
        for name, parameter in inspect.signature(info.callback).parameters.items():
            kind = hints.get(name)
            if typing.get_origin(kind) is typing.Union:
                kind = next(k for k in typing.get_args(kind) if k is not type(None))
            if kind is Path and isinstance(parameter.default, ParameterInfo):
                flag = next((d for d in parameter.default.param_decls or () if d.startswith("--")), None)
                yield words, flag, PATH_OPTIONS[flag[2:] if flag else name]
    for group in typer_app.registered_groups:
        yield from _path_options(group.typer_instance, (*command, group.name))


PATH_CASES = list(_path_options())
# what no path option takes: a path below a file, below a missing folder of /proc (where even root writes nothing),
# and, by kind, a folder where a file is read or written, a file where a folder is
BAD_PATHS = {"file": ("FILE/sub", "/proc/x/y", "/proc/x", "FOLDER"), "folder": ("FILE/sub", "/proc/x/y", "FILE"),
             "output": ("FILE/sub", "/proc/x/y", "/proc/x", "FOLDER"), "path": ("FILE/sub", "/proc/x/y", "FOLDER"),
             "new-folder": ("FILE/sub", "/proc/x/y", "/proc/x", "FILE")}


def test_every_path_option_is_enumerated():
    commands = {" ".join(words) for words, _, _ in PATH_CASES}
    assert len(PATH_CASES) > 100 and {"compare", "reproduce sampling", "demo-service", "serve", "example-data",
                                      "task create", "estimate fe1", "analyze"} <= commands


@pytest.mark.parametrize("words, flag, kind", PATH_CASES, ids=[f"{' '.join(w)} {f or 'ARG'}" for w, f, _ in PATH_CASES])
def test_a_path_an_option_cannot_take_is_one_line_before_any_work(tmp_path, capfd, monkeypatch, words, flag, kind):
    """compare --out, reproduce --out and demo-service --workdir at /proc/x or FILE/sub were tracebacks (exit 4),
    compare's after the whole comparison ran: every path option of every command (read from the app, so a new one
    is covered) is checked as the command line is read, whatever else is missing from it."""
    from typer.main import get_command

    monkeypatch.chdir(tmp_path)
    (tmp_path / "FILE").write_text("x\n")
    (tmp_path / "FOLDER").mkdir()
    command = _CLICK.setdefault("app", get_command(app))
    field = flag[2:] if flag else "folder"
    for bad in BAD_PATHS[kind]:
        status = command.main([*words, *([flag] if flag else []), bad], prog_name="privagg", standalone_mode=False)
        err = capfd.readouterr().err
        lines = [line for line in err.splitlines() if line.strip()]
        assert status == 2 and len(lines) == 1 and lines[0].startswith(f"error: {field} must be "), (bad, err)
        assert bad in lines[0]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["FILE", "FOLDER"]  # the checks leave nothing behind


_CLICK: dict = {}


def test_a_new_path_option_without_its_kind_stops_the_import():
    import typer

    from privagg.cli.options import _checked_paths

    extra = typer.Typer()

    @extra.command()
    def new(where: Path = typer.Option(..., "--somewhere")) -> None:
        pass

    with pytest.raises(RuntimeError, match="--somewhere"):
        _checked_paths(extra)


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


# --- the Python API's classes and methods: bad arguments are a ParameterError naming the field --------------

@pytest.fixture(scope="module")
def fe1():
    """FE1 at a tiny size: parameters, a client's messages, an analyzer and its full-domain table."""
    params = privagg.calibrate("fe1", epsilon=1, delta=1e-6, n_users=1000, domain_size=16)
    analyzer = privagg.analyzer(params)
    messages = privagg.client(params).randomize(np.arange(10) % 16, rng=1)
    return params, messages, analyzer, analyzer.finalize(analyzer.agg_update(analyzer.agg_init(), messages))


def _other_parameters():
    return privagg.calibrate("fe1", epsilon=1, delta=1e-6, n_users=2000, domain_size=16)


class _Opaque:
    pass


API_CASES = [
    # (name, call(fe1 fixture), the field the error names)
    ("ItemEncoder-str", lambda f: privagg.ItemEncoder("x"), "domain_size"),
    ("ItemEncoder-None", lambda f: privagg.ItemEncoder(None), "domain_size"),
    ("ItemEncoder-inf", lambda f: privagg.ItemEncoder(float("inf")), "domain"),
    ("ItemEncoder-bool", lambda f: privagg.ItemEncoder(True), "domain_size"),
    ("ItemEncoder-key-str", lambda f: privagg.ItemEncoder(16, key="abc"), "key"),
    ("ItemEncoder-key-float", lambda f: privagg.ItemEncoder(16, key=2.5), "key"),
    ("ItemEncoder-kind-array", lambda f: privagg.ItemEncoder(16, kind=np.zeros(2)), "kind"),
    ("for_parameters-None", lambda f: privagg.ItemEncoder.for_parameters(None), "parameters"),
    ("for_parameters-dict", lambda f: privagg.ItemEncoder.for_parameters({"item_key": "00"}), "parameters"),
    ("encode-int", lambda f: privagg.ItemEncoder(16).encode(3), "item"),
    ("encode-None", lambda f: privagg.ItemEncoder(16).encode(None), "item"),
    ("encode-one-string", lambda f: privagg.ItemEncoder(16).encode("abc"), "item"),  # not three items 'a', 'b', 'c'
    ("encode-bytes", lambda f: privagg.ItemEncoder(16).encode(b"\x01\x02"), "item"),  # not the integers 1 and 2
    ("encode-dict", lambda f: privagg.ItemEncoder(16).encode({"a": 1}), "item"),
    ("label-outside-domain", lambda f: privagg.ItemEncoder(16).label(99), "code"),
    ("label-negative", lambda f: privagg.ItemEncoder(16).label(-1), "code"),
    ("label-None", lambda f: privagg.ItemEncoder(16).label(None), "code"),
    ("label-text", lambda f: privagg.ItemEncoder(16).label("3"), "code"),
    ("is_collision-inf", lambda f: privagg.ItemEncoder(16).is_collision(float("inf")), "code"),
    ("MessageBatch-list", lambda f: privagg.MessageBatch([1, 2]), "columns"),
    ("MessageBatch-None", lambda f: privagg.MessageBatch(None), "columns"),
    ("MessageBatch-list-column", lambda f: privagg.MessageBatch({"value": [1, 2]}), "columns"),
    ("MessageBatch-2d-column", lambda f: privagg.MessageBatch({"value": np.zeros((2, 2), dtype=int)}), "columns"),
    ("MessageBatch-ragged", lambda f: privagg.MessageBatch({"a": np.arange(2), "b": np.arange(3)}), "message columns"),
    ("from_records-list", lambda f: privagg.MessageBatch.from_records([1, 2]), "records"),
    ("from_records-plain-array", lambda f: privagg.MessageBatch.from_records(np.arange(3)), "records"),
    ("concatenate-empty", lambda f: privagg.MessageBatch.concatenate([]), "batches"),
    ("concatenate-ints", lambda f: privagg.MessageBatch.concatenate([1]), "batches"),
    ("concatenate-other-columns", lambda f: privagg.MessageBatch.concatenate(
        [f[1], privagg.MessageBatch({"value": np.arange(2)})]), "batches"),
    ("slices-0", lambda f: list(f[1].slices(0)), "rows"),
    ("calibrate-pure-delta-None-ok-then-str-n", lambda f: privagg.calibrate(
        "grr", epsilon=1, delta=None, n_users="1000", domain_size=4), "n_users"),
    ("calibrate-array-domain", lambda f: privagg.calibrate(
        "fe1", epsilon=1, delta=1e-6, n_users=1000, domain_size=np.array([16, 16])), "domain_size"),
    ("calibrate-str-c", lambda f: privagg.calibrate("fe1", epsilon=1, delta=1e-6, n_users=1000, domain_size=16,
                                                    c="x"), "c"),
    ("calibrate-array-calibration", lambda f: privagg.calibrate(
        "fe1", epsilon=1, delta=1e-6, n_users=1000, domain_size=16, calibration=np.zeros(2)), "calibration"),
    ("calibrate-list-gamma", lambda f: privagg.calibrate(
        "tss", epsilon=1, delta=1e-3, n_users=2000, domain_size=16, min_count_fraction=0.01, report_fraction=0.5,
        gamma=[2]), "gamma"),
    ("load_parameters-huge-c", lambda f: privagg.load_parameters({**f[0].to_dict(), "c": 1e30}), "c"),
    ("load_parameters-array-protocol", lambda f: privagg.load_parameters({"protocol": np.zeros(2)}),
     "parameters.protocol"),
    ("randomize-negative-seed", lambda f: privagg.client(f[0]).randomize([1], rng=-1), "rng"),
    ("shuffle-negative-seed", lambda f: privagg.shuffle(f[1], -1), "rng"),
    ("agg_update-list", lambda f: f[2].agg_update(f[2].agg_init(), [1, 2]), "messages"),
    ("agg_update-None-batch", lambda f: f[2].agg_update(f[2].agg_init(), None), "messages"),
    ("agg_update-None-aggregate", lambda f: f[2].agg_update(None, f[1]), "aggregate"),
    ("agg_update-batch-as-aggregate", lambda f: f[2].agg_update(f[1], f[1]), "aggregate"),
    ("agg_update-other-protocol-aggregate", lambda f: f[2].agg_update(
        privagg.analyzer(privagg.calibrate("blanket-vector", epsilon=1, delta=1e-3, n_users=2000,
                                           domain_size=4)).agg_init(), f[1]), "aggregate"),
    ("merge-one-aggregate", lambda f: f[2].merge(f[2].agg_init()), "aggregates to merge"),
    ("merge-ints", lambda f: f[2].merge([1, 2]), "aggregates to merge"),
    ("merge-str", lambda f: f[2].merge("ab"), "aggregates to merge"),
    ("finalize-None", lambda f: f[2].finalize(None), "aggregate"),
    ("finalize-dict", lambda f: f[2].finalize({"counts": np.zeros(16)}), "aggregate"),
    ("finalize-other-parameters", lambda f: f[2].finalize(privagg.analyzer(_other_parameters()).agg_init()),
     "aggregate"),
    ("top_k-negative", lambda f: f[3].top_k(-1), "top"),
    ("top_k-text", lambda f: f[3].top_k("3"), "k"),
    ("top_k-None", lambda f: f[3].top_k(None), "k"),
    ("estimate-outside-domain", lambda f: f[3].estimate([99]), "item"),
    ("standard_error-outside-domain", lambda f: f[3].standard_error([16]), "item"),
    ("standard_error-text", lambda f: f[3].standard_error(["a"]), "item"),
    ("to_dict-unhashable-labels", lambda f: f[3].to_dict(labels=[[i] for i in range(16)]), "labels"),
    ("to_dict-2d-labels", lambda f: f[3].to_dict(labels=np.zeros((4, 4))), "labels"),
    ("to_dict-numpy-bool-labels", lambda f: f[3].to_dict(labels=np.bool_(True)), "labels"),
    ("FrequencyTable-list", lambda f: privagg.FrequencyTable(f[0], [1.0, 2.0]), "estimates"),
    ("FrequencyTable-2d", lambda f: privagg.FrequencyTable(f[0], np.zeros((2, 2))), "estimates"),
    ("FrequencyTable-items-mismatch", lambda f: privagg.FrequencyTable(f[0], np.zeros(3), np.arange(2)), "items"),
    ("VectorSum-None", lambda f: privagg.VectorSum(f[0], None, 1.0), "total"),
    ("HeavyHitterList-list", lambda f: privagg.HeavyHitterList(f[0], [1], np.zeros(1), 1.0, np.zeros(1)), "items"),
    ("sparse-vector-ragged-candidates", lambda f: privagg.analyzer(
        privagg.calibrate("sparse-vector-hashed", epsilon=1, delta=1e-6, n_users=2000, domain_size=16),
        queries=[[1], [1, 2]]), "candidates"),
    ("estimate-user-mixed-items", lambda f: privagg.estimate(
        _frame_of({"u": [1, 1, 2, 3], "app": [1, "a", 2, 3]}), "fe1", item="app", user="u", epsilon=1, delta=1e-6,
        domain_size=16), "item"),
    ("estimate-user-empty", lambda f: privagg.estimate(
        _frame_of({"u": [], "app": []}), "fe1", item="app", user="u", epsilon=1, delta=1e-6), "user"),
    ("estimate-user-missing", lambda f: privagg.estimate(
        _frame_of({"u": [1, 2], "app": [1, 2]}), "fe1", item="app", user="device", epsilon=1, delta=1e-6), "user"),
    ("estimate-max-items-0", lambda f: privagg.estimate(
        _frame_of({"u": [1, 2], "app": [1, 2]}), "fe1", item="app", user="u", max_items=0, epsilon=1, delta=1e-6),
     "max_items"),
    ("plan-max-items-0", lambda f: privagg.plan("fe1", epsilon=1, delta=1e-6, n_users=100, max_items=0),
     "max_items"),
    ("plan-dpcs-max-items-2", lambda f: privagg.plan("dpcs", epsilon=1, delta=1e-6, n_users=100, max_items=2,
                                                     domain_size=4), "max_items"),
    ("fe-hh-randomize-int", lambda f: privagg.client(
        privagg.calibrate("fe-hh", epsilon=1, delta=1e-3, n_users=2000, domain_size=16, phi=0.1)).randomize(0),
     "items"),
    ("fe-hh-randomize-dict", lambda f: privagg.client(
        privagg.calibrate("fe-hh", epsilon=1, delta=1e-3, n_users=2000, domain_size=16, phi=0.1)).randomize(
        {1: 2}), "items"),
]


@pytest.mark.parametrize("call, field", [(c, f) for _, c, f in API_CASES], ids=[n for n, _, _ in API_CASES])
def test_api_bad_arguments_name_the_field(fe1, call, field):
    with pytest.raises(ParameterError) as err:
        call(fe1)
    assert err.value.field == field and str(err.value).startswith(f"{field} must be "), str(err.value)


# --- every public function and method, read from privagg's API: arguments it does not take are a ParameterError ---

@pytest.fixture(scope="module")
def api(fe1):
    """A valid call, by name, of every public function and method: (callable, keyword arguments)."""
    params, messages, analyzer, table = fe1
    keyed = privagg.calibrate("fe1", epsilon=1, delta=1e-6, n_users=1000, domain_size=16, item_key="00ff")
    vectors = privagg.calibrate("blanket-vector", epsilon=1, delta=1e-3, n_users=2000, domain_size=3)
    encoder = privagg.ItemEncoder(16, kind="text")
    client = privagg.client(params)
    hh = privagg.HeavyHitterList(params, np.array([1], dtype=object), np.array([2.0]), 1.0, np.array([0.5]))
    vector_sum = privagg.VectorSum(vectors, np.zeros(3), np.ones(3))
    batch = lambda: privagg.MessageBatch({"value": np.arange(3)})  # noqa: E731
    return {
        "calibrate": (privagg.calibrate, dict(protocol="fe1", epsilon=1.0, delta=1e-6, n_users=1000, domain_size=16,
                                              calibration="numeric", item_key="00ff")),
        "load_parameters": (privagg.load_parameters, dict(data=json.dumps(params.to_dict()), verify=True)),
        "client": (privagg.client, dict(parameters=params)),
        "analyzer": (privagg.analyzer, dict(parameters=params, queries=np.arange(3))),
        "shuffle": (privagg.shuffle, dict(batch=client.randomize([1, 2], rng=1), rng=1)),
        "ItemEncoder": (privagg.ItemEncoder, dict(domain_size=16, key=b"k", kind="text")),
        "ItemEncoder.for_parameters": (privagg.ItemEncoder.for_parameters, dict(parameters=keyed, kind="text")),
        "ItemEncoder.encode": (encoder.encode, dict(items=["a", "b"], field="item", public=True)),
        "ItemEncoder.check_code": (encoder.check_code, dict(code=3)),
        "ItemEncoder.label": (encoder.label, dict(code=3)),
        "ItemEncoder.is_collision": (encoder.is_collision, dict(code=3)),
        "MessageBatch": (privagg.MessageBatch, dict(columns={"value": np.arange(3)}, records=None, fingerprint="x")),
        "MessageBatch.from_records": (privagg.MessageBatch.from_records, dict(
            records=np.zeros(3, dtype=[("value", "i8")]), fingerprint="x")),
        "MessageBatch.with_fingerprint": (batch().with_fingerprint, dict(fingerprint="x")),
        "MessageBatch.take": (batch().take, dict(index=np.arange(2))),
        "MessageBatch.slices": (lambda **kw: list(batch().slices(**kw)), dict(rows=2)),
        "MessageBatch.concatenate": (privagg.MessageBatch.concatenate, dict(batches=[batch(), batch()])),
        "FrequencyTable": (privagg.FrequencyTable, dict(parameters=params, estimates=np.zeros(16), items=None,
                                                         messages=0, malformed=0)),
        "FrequencyTable.estimate": (table.estimate, dict(items=[1])),
        "FrequencyTable.estimate_all": (table.estimate_all, {}),
        "FrequencyTable.standard_error": (table.standard_error, dict(items=[1])),
        "FrequencyTable.top_k": (table.top_k, dict(k=2)),
        "FrequencyTable.restricted_to": (table.restricted_to, dict(items=[1, 2])),
        "FrequencyTable.to_dict": (table.to_dict, dict(labels=None)),
        "FrequencyTable.to_pandas": (table.to_pandas, dict(labels=None)),
        "FrequencyTable.to_polars": (table.to_polars, dict(labels=None)),
        "HeavyHitterList": (privagg.HeavyHitterList, dict(
            parameters=params, items=np.array([1], dtype=object), estimates=np.array([2.0]), threshold=1.0,
            standard_errors=np.array([0.5]), survivors=(), capped_levels=(), messages=0, malformed=0)),
        "HeavyHitterList.top_k": (hh.top_k, dict(k=1)),
        "HeavyHitterList.to_dict": (hh.to_dict, {}),
        "HeavyHitterList.to_pandas": (hh.to_pandas, {}),
        "HeavyHitterList.to_polars": (hh.to_polars, {}),
        "VectorSum": (privagg.VectorSum, dict(parameters=vectors, total=np.zeros(3), standard_errors=np.ones(3),
                                              coordinates=None, messages=0, malformed=0, standard_error_bounds=None)),
        "VectorSum.mean": (vector_sum.mean, {}),
        "VectorSum.to_dict": (vector_sum.to_dict, dict(labels=None)),
        "VectorSum.to_pandas": (vector_sum.to_pandas, dict(labels=None)),
        "VectorSum.to_polars": (vector_sum.to_polars, dict(labels=None)),
        "estimate": (privagg.estimate, dict(
            data=_frame(), protocol="fe1", item="app", columns=None, epsilon=1.0, delta=1e-6, domain_size=16,
            candidates=None, top=3, seed=1, evaluate=False, missing="error", item_type="auto", calibration="numeric",
            hash_key=None, full_domain=True, mode="fast", phi=None, max_length=None, user=None, max_items=1,
            max_rows=None, delimiter=None, header=True)),
        "plan": (privagg.plan, dict(protocol="fe1", epsilon=1.0, delta=1e-6, n_users=1000, max_items=2,
                                    domain_size=16, calibration="numeric")),
        "client.randomize": (client.randomize, dict(codes=[1, 2], rng=1)),
        "analyzer.agg_init": (analyzer.agg_init, {}),
        "analyzer.agg_update": (analyzer.agg_update, dict(agg=analyzer.agg_init(), messages=messages)),
        "analyzer.merge": (analyzer.merge, dict(aggs=[analyzer.agg_init()])),
        "analyzer.finalize": (analyzer.finalize, dict(agg=analyzer.agg_init())),
        "simulate.simulate": (privagg.simulate.simulate, dict(
            parameters=params, codes=np.arange(1000) % 16, mode="fast", rng=1, queries=None, keep_messages=False,
            progress=None, check_population=True)),
        "simulate.estimate_frequencies": (privagg.simulate.estimate_frequencies, dict(
            protocol="fe1", codes=np.arange(1000) % 16, encoder=privagg.ItemEncoder(16), epsilon=1.0, delta=1e-6,
            calibration="numeric", options={"c": 1.0}, candidate_codes=None, top=3, full_domain=True, mode="fast",
            seed=1, input_name="x", keep_messages=False, progress=None, warnings=(), evaluate=False)),
        "engine.analyze": (privagg.engine.analyze, dict(analyzer=analyzer, partitions=[messages], engine="local",
                                                        scheduler=None, workers=None)),
    }


def _frame_of(columns: dict):
    import pandas as pd

    return pd.DataFrame(columns)


def _frame():
    """A pandas frame of 1000 users' items in [0, 16), where pandas is installed (privagg.estimate's data)."""
    if not importlib.util.find_spec("pandas"):
        return None
    import pandas as pd

    return pd.DataFrame({"app": np.arange(1000) % 16})


def _public_api():
    """The names of privagg's public functions, classes and their public methods, and the roles' methods."""
    import inspect

    from privagg.protocols import roles

    names = set()
    for name in privagg.__all__:
        value = getattr(privagg, name)
        if inspect.isclass(value) and not issubclass(value, Exception):
            names.add(name)
            names |= {f"{name}.{m}" for m, v in vars(value).items() if not m.startswith("_") and (
                inspect.isfunction(v) or isinstance(v, (classmethod, staticmethod)))}
        elif inspect.isfunction(value):
            names.add(name)
    names |= {f"simulate.{name}" for name in privagg.simulate.__all__ if inspect.isfunction(getattr(
        privagg.simulate, name))} | {"engine.analyze"}  # the documented entry points of the submodules
    for role, label in ((roles.Client, "client"), (roles.Analyzer, "analyzer")):
        names |= {f"{label}.{m}" for m, v in vars(role).items() if inspect.isfunction(v) and not m.startswith("_")
                  and m != "working_bytes"}
    return names


# where an error names the argument as the command line does, or as the thing it checks
FIELD_ALIASES = {"queries": {"item", "candidates"}, "candidate_codes": {"item"}, "codes": {"items", "item"}, "items": {"item"},
                 "aggs": {"aggregates to merge"}, "agg": {"aggregate"}, "index": {"rows"}}
NEEDS_PANDAS = {"FrequencyTable.to_pandas", "HeavyHitterList.to_pandas", "VectorSum.to_pandas", "estimate"}
NEEDS_POLARS = {"FrequencyTable.to_polars", "HeavyHitterList.to_polars", "VectorSum.to_polars"}


def test_every_public_function_has_a_valid_call(api):
    assert set(api) == _public_api()
    for name, (call, kwargs) in api.items():
        if name not in NEEDS_PANDAS or importlib.util.find_spec("pandas"):
            call(**kwargs)  # the valid call is valid


@pytest.mark.parametrize("name", sorted(_public_api()))
def test_a_public_function_refuses_an_unknown_keyword_and_an_extra_argument(api, name):
    """privagg.analyzer(p, bogus=1) was a TypeError from inside the protocol: every public function and method
    refuses a keyword it does not take, and one positional argument too many, as a ParameterError naming it."""
    import inspect

    call, kwargs = api[name]
    with pytest.raises(ParameterError) as err:
        call(**kwargs, bogus=1)
    assert err.value.field == "bogus" and str(err.value).startswith("bogus must be left out"), str(err.value)
    parameters = inspect.signature(call).parameters.values()
    if not any(p.kind is p.VAR_POSITIONAL for p in parameters) and name not in ("MessageBatch.slices",):
        positional = [kwargs[p.name] if p.name in kwargs else p.default for p in parameters
                      if p.kind is p.POSITIONAL_OR_KEYWORD]
        with pytest.raises(ParameterError) as err:
            call(*positional, *([_Opaque()] * (1 + sum(p.kind is p.KEYWORD_ONLY for p in parameters))),
                 **{k: v for k, v in kwargs.items() if k not in [p.name for p in parameters
                                                                  if p.kind is p.POSITIONAL_OR_KEYWORD]})
        assert err.value.field == "arguments" and "given by position" in str(err.value), str(err.value)


def test_a_public_function_refuses_a_wrong_type_for_each_argument(api):
    """Each argument of each public function and method given an object of no type it takes is a ParameterError
    naming that argument, never a TypeError or an AttributeError from inside."""
    import inspect

    failures = []
    for name, (call, kwargs) in sorted(api.items()):
        if (name in NEEDS_PANDAS and not importlib.util.find_spec("pandas")) or (
                name in NEEDS_POLARS and not importlib.util.find_spec("polars")):
            continue
        for parameter in inspect.signature(call).parameters.values():
            if parameter.kind in (parameter.VAR_POSITIONAL, parameter.VAR_KEYWORD):
                continue
            try:
                call(**{**kwargs, parameter.name: _Opaque()})
            except ParameterError as err:
                if err.field not in {parameter.name, *FIELD_ALIASES.get(parameter.name, ())}:
                    failures.append(f"{name}({parameter.name}=...): names {err.field}: {err}")
            except Exception as err:
                failures.append(f"{name}({parameter.name}=...): {type(err).__name__}: {err}")
            else:
                failures.append(f"{name}({parameter.name}=...): accepted")
    assert not failures, "\n".join(failures)


def test_lone_surrogates_are_refused_naming_the_item():
    """ItemEncoder(...).encode(['\\ud800']) raised UnicodeEncodeError: a str that does not encode as UTF-8 is a
    ParameterError naming its row, for the encoder and for fe-hh's string items alike."""
    for items, row in ((["\ud800"], 0), (["ok", "x\udcff", "y"], 1)):
        with pytest.raises(ParameterError) as err:
            privagg.ItemEncoder(16).encode(items)
        assert err.value.field == "item" and err.value.row == row and "UTF-8" in str(err.value)
        with pytest.raises(ParameterError) as err:
            privagg.ItemEncoder(16).encode(items, public=True)
        assert err.value.row == row
    hh = privagg.calibrate("fe-hh", epsilon=1, delta=1e-3, n_users=2000, domain_size=None, phi=0.1, max_length=4)
    with pytest.raises(ParameterError) as err:
        privagg.client(hh).randomize(["ok", "\ud800"], rng=1)
    assert err.value.field == "item" and err.value.row == 1


def test_api_accepts_what_it_documents(fe1):
    """The checks refuse only what is wrong: a pure protocol's delta=None, merge([]), numpy integers, a sequence
    of items, a heavy-hitter list asked for an unhashable item (simply not in it)."""
    params, messages, analyzer, table = fe1
    assert privagg.calibrate("grr", epsilon=1, delta=None, n_users=1000, domain_size=4).delta == 0
    assert analyzer.finalize(analyzer.merge([])).estimates.shape == (16,)
    assert analyzer.finalize(analyzer.merge(iter([analyzer.agg_init()]))).messages == 0
    assert table.top_k(np.int64(2))[0].size == 2 and privagg.ItemEncoder(np.int64(16)).label(np.int64(3)) == 3
    assert privagg.ItemEncoder(16, key=bytearray(b"k")).encode(("a", "b")).size == 2
    hh = privagg.HeavyHitterList(params, np.array([1], dtype=object), np.array([2.0]), 1.0, np.array([0.5]))
    assert 1 in hh and [1] not in hh and {} not in hh
    assert privagg.shuffle(messages, np.random.default_rng(0)) is messages


BASELINES = registry.names(lambda e: e.family in (Family.LOCAL_BASELINES, Family.CENTRAL_BASELINES))


@pytest.mark.parametrize("protocol", BASELINES)
@pytest.mark.parametrize("epsilon", ["33.97", "40", "100", "1000", "1e-9", "1e-300"])
def test_extreme_epsilon_of_the_baselines_is_a_result_or_one_line(files, protocol, epsilon):
    """olh at eps 100 was a ValueError, at 1000 an OverflowError (exit 4), and at 40 named --bins, never given:
    every baseline answers, or refuses in one line naming what the user typed."""
    delta = ["--delta", "1e-9"] if protocol == "gaussian" else []
    result = runner.invoke(app, ["estimate", protocol, "--epsilon", epsilon, *delta, "--domain", "100", "--input",
                                 str(files / "good.txt"), "--seed", "1"])
    assert result.exit_code in (0, 2), result.output
    if result.exit_code == 2:
        lines = [line for line in result.stderr.splitlines() if line.strip()]
        assert len(lines) == 1 and lines[0].split()[1] in ("epsilon", "delta"), result.stderr
        assert "local_epsilon" not in lines[0] and "fractional-bits" not in lines[0], lines[0]


@pytest.mark.parametrize("epsilon", ["33.97", "40", "100", "1000"])
def test_olh_past_its_default_bins_names_epsilon_and_bins(files, epsilon):
    result = runner.invoke(app, ["estimate", "olh", "--epsilon", epsilon, "--domain", "100", "--input",
                                 str(files / "good.txt")])
    assert result.exit_code == 2 and result.stderr.startswith("error: epsilon must be at most about 33.9 for olh")
    assert "--bins" in result.stderr
    given = runner.invoke(app, ["estimate", "olh", "--epsilon", epsilon, "--bins", "64", "--domain", "100", "--input",
                                str(files / "good.txt"), "--seed", "1"])
    assert given.exit_code == 0, given.output


def test_olh_just_below_its_largest_default_epsilon_calibrates():
    from privagg.protocols.local_baselines import OLH_DEFAULT_BINS_EPSILON_MAX, calibrate_olh

    assert calibrate_olh(33.96, None, 1000, 100).bins <= 2**49
    with pytest.raises(ParameterError, match="epsilon must be at most about 33.9"):
        calibrate_olh(OLH_DEFAULT_BINS_EPSILON_MAX, None, 1000, 100)


# ---- a fresh probe of the same classes ---------------------------------------------------------------------------
@pytest.mark.parametrize("args", [["protocols", "--json"], ["schema", "estimate"],
                                  ["calibrate", "fe1", "--epsilon", "1", "--delta", "1e-9", "--users", "1000",
                                   "--domain", "1024", "--json"]])
def test_standard_output_on_a_full_disk_is_one_line_not_a_traceback(args):
    """> /dev/full (a full disk, a quota) was a traceback, exit 4, 'a bug in privagg': it is the environment's."""
    with open("/dev/full", "w") as full:
        done = subprocess.run([sys.executable, "-m", "privagg", *args], stdout=full, stderr=subprocess.PIPE, text=True,
                              timeout=120)
    assert done.returncode == 2 and done.stderr == "error: the output could not be written (No space left on " \
                                                   "device)\n", done.stderr


def test_an_output_file_is_written_whole_or_left_as_it_was(tmp_path, monkeypatch):
    """--output was written in place: a full disk or an interrupt while writing left half a report. Now a failed
    write leaves the old file and no temporary one; a link is followed, a device written as it is."""
    from privagg.cli import output as cli_output

    old = tmp_path / "report.json"
    old.write_text('{"old": true}\n')
    old.chmod(0o640)

    def interrupted(*_args):
        raise KeyboardInterrupt

    monkeypatch.setattr(cli_output.os, "replace", interrupted)
    with pytest.raises(KeyboardInterrupt):
        cli_output.write_whole(old, "x" * 100_000)
    assert old.read_text() == '{"old": true}\n' and sorted(p.name for p in tmp_path.iterdir()) == ["report.json"]
    monkeypatch.undo()
    (tmp_path / "link.json").symlink_to(old)
    cli_output.write_whole(tmp_path / "link.json", "new\n")
    assert old.read_text() == "new\n" and (tmp_path / "link.json").is_symlink() and old.stat().st_mode & 0o777 == 0o640
    cli_output.write_whole(Path("/dev/null"), "to a device\n")  # not replaced by a file
    assert Path("/dev/null").is_char_device()


def test_task_create_reads_its_parameters_as_analyze_does(tmp_path, files, monkeypatch):
    """task create --params of a UTF-16 file was a traceback (UnicodeDecodeError); a UTF-8 byte-order mark was
    refused in Python's words ('decode using utf-8-sig'); a pipe (--params <(privagg calibrate ...)) was refused by
    analyze as not a JSON file. Now both read through io.read_json_text: the mark dropped, a pipe read, the rest one
    line."""
    monkeypatch.setenv("PRIVAGG_KEK", "A" * 43 + "=")
    text = (files / "msgs" / "params.json").read_text()
    (tmp_path / "utf16.json").write_bytes(text.encode("utf-16"))
    (tmp_path / "bom.json").write_bytes(b"\xef\xbb\xbf" + text.encode())
    db = f"sqlite:///{tmp_path}/analyzer.db"
    refused = runner.invoke(app, ["task", "create", "--params", str(tmp_path / "utf16.json"), "--db", db])
    assert refused.exit_code == 2 and refused.stderr.startswith("error: params must be a readable UTF-8 JSON file"), \
        refused.output
    made = runner.invoke(app, ["task", "create", "--params", str(tmp_path / "bom.json"), "--db", db])
    assert made.exit_code == 0, made.output
    reader, writer = os.pipe()
    os.write(writer, text.encode())
    os.close(writer)
    try:
        piped = runner.invoke(app, ["analyze", "fe1", "--params", f"/dev/fd/{reader}", "--messages",
                                    str(files / "msgs")])
    finally:
        os.close(reader)
    assert piped.exit_code == 0, piped.output


@pytest.mark.parametrize("protocol, size", [("blanket-hist", "--domain"), ("blanket-vector", "--dimension")])
def test_a_delta_below_1e_300_calibrates(protocol, size):
    """delta = 1e-320 (a subnormal float) made the blanket's Brent search a ValueError (exit 4): its bound was
    floored at 1e-300, above the target, so the bound never read as meeting it."""
    from privagg.privacy.blanket import delta_at

    for delta in ("1e-320", "5e-324"):
        result = runner.invoke(app, ["calibrate", protocol, "--users", "1000", size, "16", "--epsilon", "1",
                                     "--delta", delta, "--json"])
        assert result.exit_code == 0, result.output
    params = privagg.calibrate("blanket-hist", epsilon=1, delta=1e-320, n_users=1000, domain_size=16)
    assert delta_at(1.0, params.gamma, 1000, 16) <= 1e-320


def test_fe_hh_at_a_tiny_phi_refuses_or_calibrates():
    """phi = 1e-320 overflowed (4 / phi prefixes), 1e-20 made the error bound's normal quantile of 1 - 1e-24 (= 1)
    a StatisticsError: phi below 2^-64 is refused (phi n < 1 for any n), and the quantile is taken from its tail."""
    for phi in ("1e-320", "1e-300", "1e-20"):
        result = runner.invoke(app, ["calibrate", "fe-hh", "--users", "1000", "--domain", "16", "--epsilon", "1",
                                     "--delta", "1e-6", "--phi", phi])
        assert result.exit_code == 2 and result.stderr.startswith("error: phi must be in [2^-64, 1)"), result.output
    params = privagg.calibrate("fe-hh", epsilon=1, delta=1e-6, n_users=1000, domain_size=16, phi=1e-19)
    assert np.isfinite(params.expected_error()["max_error_bound"])


def test_every_command_reading_items_has_each_option_its_errors_name(tmp_path):
    """compare and loadgen read a file of items as estimate does, and its errors name --no-header, --item-type str
    and --missing drop, which they did not have (compare over a headerless CSV said 'give --no-header', then 'No
    such option: --no-header')."""
    from typer.main import get_command

    command = get_command(app)
    named = {"--column", "--item-type", "--delimiter", "--no-header", "--missing"}
    for words in (["estimate", "fe1"], ["compare"], ["loadgen"]):
        found = command
        for word in words:
            found = found.commands[word]
        flags = {flag for p in found.params for flag in [*p.opts, *p.secondary_opts]}
        assert named <= flags, (words, named - flags)
    (tmp_path / "items.csv").write_text("".join(f"{i % 7}\n" for i in range(300)))
    common = ["compare", "--protocols", "fe0", "--epsilon", "1", "--delta", "1e-6", "--domain", "8", "--trials", "1",
              "--input", str(tmp_path / "items.csv")]
    assert "give --no-header" in runner.invoke(app, common).stderr
    assert runner.invoke(app, [*common, "--no-header"]).exit_code == 0


@pytest.mark.parametrize("protocol, accepted", [("dpds", "[90, 10000]"), ("fe-hh", "[5000, 1000000]")])
def test_demo_service_refuses_zero_users_instead_of_its_default(tmp_path, protocol, accepted):
    """``demo-service --users 0`` is refused, naming the range, before any service starts: it ran the default (300
    users for dpds, 20,000 for fe-hh) because the default was taken with ``users or ...``."""
    result = runner.invoke(app, ["demo-service", protocol, "--users", "0", "--workdir", str(tmp_path / "w")])
    assert result.exit_code == 2 and f"users must be an integer in {accepted}, got 0" in result.output
    assert not (tmp_path / "w" / "logs").exists()
