"""A newcomer's first hour: defaults that run, files to try them on, standard input, exit statuses a script
can trust, output a person (or a pipe) can read."""

from __future__ import annotations

import json
import socket
import subprocess
import sys

import pytest
from typer.testing import CliRunner

from privagg import cli, datasets
from privagg.cli import evaluation
from privagg.cli import app
from privagg.protocols.registry import ENTRIES
from in_process import privagg as here

runner = CliRunner()


def privagg(*args: str, stdin: bytes | None = None, cwd=None) -> subprocess.CompletedProcess:
    """The command as a user runs it: its own process, stdout and stderr pipes (not a terminal). For what only a
    process shows (standard input, a pipe for output, the exit statuses a script sees); ``here`` runs the others'
    refusals through the same entry point in this process."""
    return subprocess.run([sys.executable, "-m", "privagg", *args], input=stdin, capture_output=True, cwd=cwd,
                          timeout=300, check=False)


@pytest.fixture(scope="module")
def examples(tmp_path_factory):
    folder = tmp_path_factory.mktemp("examples")
    result = runner.invoke(app, ["example-data", str(folder)])
    assert result.exit_code == 0, result.output
    return folder


# ---- files to try the README on --------------------------------------------------------------------------
def test_example_data_writes_what_the_readme_reads(examples):
    assert sorted(p.name for p in examples.iterdir()) == sorted(datasets.EXAMPLE_FILES)
    readme = (cli.evaluation.Path(__file__).resolve().parent.parent / "README.md").read_text()
    assert all(name in readme for name in datasets.EXAMPLE_FILES)
    header, *rows = (examples / "items.csv").read_text().splitlines()
    assert header == "user,app" and len(rows) == 20_000
    apps = {row.split(",")[1] for row in rows}
    names = set((examples / "names.txt").read_text().split())
    assert apps < names  # one listed name nobody uses
    answers = set((examples / "answers.txt").read_text().split())
    assert {row.split(",")[0] for row in (examples / "survey.csv").read_text().splitlines()[1:]} == answers
    heavy = [int(c) for c in (examples / "coordinates.txt").read_text().split()]
    pairs = [row.split(",") for row in (examples / "pairs.csv").read_text().splitlines()[1:]]
    assert all(0 <= int(c) < 2**40 and 0 <= float(w) <= 1 for c, w in pairs)
    assert sum(int(c) in heavy for c, _ in pairs) > len(pairs) / 3


def test_example_data_is_deterministic_and_refuses_a_file(tmp_path, examples):
    assert runner.invoke(app, ["example-data", str(tmp_path / "again")]).exit_code == 0
    for name in datasets.EXAMPLE_FILES:
        assert (tmp_path / "again" / name).read_bytes() == (examples / name).read_bytes()
    (tmp_path / "file").write_text("x")
    result = here("example-data", str(tmp_path / "file"))
    assert result.returncode == 2 and result.stderr.startswith("error: folder must be a folder")


def test_example_data_never_overwrites_a_file_but_with_force(tmp_path):
    (tmp_path / "names.txt").write_text("my own list\n")
    result = here("example-data", str(tmp_path))
    assert result.returncode == 2 and result.stderr == (
        f"error: folder must be a folder without files of the examples' names (--force replaces them), got {tmp_path}, "
        "which holds names.txt\n")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["names.txt"]  # nothing written, not even the others
    assert (tmp_path / "names.txt").read_text() == "my own list\n"
    assert runner.invoke(app, ["example-data", str(tmp_path), "--force"]).exit_code == 0
    assert (tmp_path / "names.txt").read_text() == "maps\nmail\nchat\nnews\ngames\n"


# ---- every protocol runs without a domain the user did not give ------------------------------------------
SMALL = [e.name for e in ENTRIES if e.small_domain]


def test_the_small_domain_protocols_are_the_ones_whose_cost_or_error_grows_with_b():
    assert sorted(SMALL) == ["bib", "blanket-hist", "fe0", "grr", "oue"]


@pytest.mark.parametrize("name", SMALL)
def test_a_small_domain_protocol_runs_on_its_bundled_words_without_domain(name):
    entry = next(e for e in ENTRIES if e.name == name)
    delta = [] if entry.pure else ["--delta", "1e-8"]
    result = runner.invoke(app, ["estimate", name, "--epsilon", "2", *delta, "--seed", "1", "--json"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report["parameters"]["domain_size"] == datasets.SMALL_VOCABULARY
    assert report["estimates"][0]["item"] == "the"  # the most common word, by name, on top at eps = 2
    assert f"{datasets.SMALL_VOCABULARY} most common" in report["input"]


@pytest.mark.parametrize("name", SMALL)
def test_a_small_domain_protocol_needs_a_domain_for_a_file(name, tmp_path):
    (tmp_path / "items.txt").write_text("a\nb\n" * 50)
    result = here("estimate", name, "--input", str(tmp_path / "items.txt"), "--epsilon", "1", "--delta", "1e-3")
    assert result.returncode == 2
    assert result.stderr.startswith(f"error: domain is required for {name} with --input"), result.stderr


def test_the_domain_help_says_the_default():
    result = runner.invoke(app, ["estimate", "oue", "--help"])
    assert f"their {datasets.SMALL_VOCABULARY} most common" in " ".join(result.stdout.split())


@pytest.mark.slow  # one estimate and one analyze over 100,000 users
def test_analyze_names_the_categories_written_with_the_messages(tmp_path):
    folder = tmp_path / "msgs"
    made = runner.invoke(app, ["estimate", "grr", "--epsilon", "3", "--seed", "1", "--write-messages", str(folder)])
    assert made.exit_code == 0, made.output
    result = runner.invoke(app, ["analyze", "grr", "--params", str(folder / "params.json"), "--messages", str(folder),
                                 "--json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["estimates"][0]["item"] == "the"
    items = json.loads((folder / "items.json").read_text())
    items["categories"] = "the to and"  # a forged list: text, not a list
    (folder / "items.json").write_text(json.dumps(items))
    forged = privagg("analyze", "grr", "--params", str(folder / "params.json"), "--messages", str(folder))
    assert forged.returncode == 2 and b"categories as a JSON list" in forged.stderr


# ---- standard input ---------------------------------------------------------------------------------------
def test_input_dash_reads_standard_input_as_text_or_a_table(examples):
    lines = b"".join(b"%d\n" % (i % 7) for i in range(3_000))
    result = privagg("estimate", "grr", "--input", "-", "--domain", "7", "--epsilon", "3", "--seed", "1", "--json",
                     stdin=lines)
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["input"] == "standard input" and report["n_users"] == 3_000
    from_file = privagg("estimate", "blanket-vector", "--input", str(examples / "vectors.csv"), "--clip",
                        "--epsilon", "1", "--delta", "1e-6", "--seed", "1", "--json")
    piped = privagg("estimate", "blanket-vector", "--input", "-", "--delimiter", ",", "--clip", "--epsilon", "1",
                    "--delta", "1e-6", "--seed", "1", "--json", stdin=(examples / "vectors.csv").read_bytes())
    assert piped.returncode == 0, piped.stderr
    a, b = json.loads(from_file.stdout), json.loads(piped.stdout)
    assert [e["estimate"] for e in a["estimates"]] == [e["estimate"] for e in b["estimates"]]


def test_input_dash_knows_parquet_by_its_first_bytes(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.table({"item": [i % 5 for i in range(500)]}), tmp_path / "items.parquet")
    result = privagg("estimate", "grr", "--input", "-", "--domain", "5", "--epsilon", "2", "--seed", "1", "--json",
                     stdin=(tmp_path / "items.parquet").read_bytes())
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["n_users"] == 500


def test_input_dash_with_nothing_piped_is_one_line():
    empty = privagg("estimate", "fe1", "--input", "-", "--epsilon", "1", "--delta", "1e-6", stdin=b"")
    assert empty.returncode == 2 and empty.stderr.decode().count("\n") == 1, empty.stderr


# ---- exit statuses ----------------------------------------------------------------------------------------
def test_help_documents_the_exit_statuses():
    text = " ".join(privagg("--help").stdout.decode().split())
    for phrase in ("0 done", "1 an audit found a violation", "2 bad input", "4 an internal error", "130 interrupted"):
        assert phrase in text


def test_a_crash_is_status_4_with_its_traceback_never_1(monkeypatch, capsys):
    def broken(*_args, **_kwargs):
        raise KeyError("a bug")

    monkeypatch.setattr(evaluation, "_reproduce", broken)
    monkeypatch.setattr(sys, "argv", ["privagg", "reproduce", "sampling", "--out", "x", "--quick"])
    with pytest.raises(SystemExit) as stop:
        cli.main()
    assert stop.value.code == cli.EXIT_INTERNAL == 4
    err = capsys.readouterr().err
    assert "Traceback" in err and "KeyError" in err and "internal error: KeyError (a bug in privagg" in err


def test_bad_input_is_2_and_a_violation_is_1():
    assert privagg("estimate", "fe1", "--epsilon", "-1", "--delta", "1e-6").returncode == 2
    violated = privagg("audit", "grr", "--users", "2", "--domain", "2", "--epsilon", "1", "--noise-scale", "0.3")
    assert violated.returncode == 1 and b"VIOLATED" in violated.stdout


# ---- output a person and a pipe can read ------------------------------------------------------------------
def test_tables_are_not_cut_when_piped():
    out = privagg("protocols").stdout.decode()
    assert "…" not in out and max(map(len, out.splitlines())) > 80
    assert "sparse-vector-hashed" in out and "frequency table" in out


def test_warnings_go_to_stderr_once(examples):
    result = privagg("estimate", "blanket-vector", "--input", str(examples / "vectors.csv"), "--clip", "--epsilon",
                     "1", "--delta", "1e-6", "--seed", "1")
    assert result.returncode == 0, result.stderr
    out, err = result.stdout.decode(), result.stderr.decode()
    assert "warning" not in out
    assert err.count("were clipped (--clip)") == 1


def test_a_secret_sharing_guarantee_names_its_model_in_words():
    result = runner.invoke(app, ["estimate", "dpds", "--epsilon", "1", "--delta", "1e-6", "--min-count-fraction",
                                 "0.04", "--seed", "1", "--mode", "fast"])
    assert result.exit_code == 0, result.output
    assert "secret-sharing model (users share among themselves, one server)" in result.stdout
    assert "secret_sharing" not in result.stdout and "fast path, fast path" not in result.stdout
    assert "over the 10 items of the domain" in result.stdout


def test_heavy_hitters_with_nothing_to_find_say_so(tmp_path):
    (tmp_path / "flat.txt").write_text("".join(f"{i}\n" for i in range(4_000)))  # every item held once
    result = runner.invoke(app, ["estimate", "fe-hh", "--input", str(tmp_path / "flat.txt"), "--domain", "4096",
                                 "--phi", "0.2", "--epsilon", "1", "--delta", "1e-6", "--seed", "1"])
    assert result.exit_code == 0, result.output
    assert "0 items held by >= phi n, none to find; nothing reported" in result.stdout
    assert "100%" not in result.stdout
    assert "missed w.p. <=" in result.stdout


def test_a_reproduction_summary_prints_tables_not_dicts(tmp_path, capsys):
    evaluation._print_summary({"files": ["a.csv", "b.png"], "grid": "quick", "ok": True, "none_left": [],
                        "gamma": {"paper": 0.123456, "tight": None}, "mse": {"paper": 1e-7, "tight": [1.0, 2.5]},
                        "slopes": {"n": -0.5}, "fits": {"d": None, "n": None}}, tmp_path)
    out = capsys.readouterr().out
    assert "{" not in out and "[" not in out and "None" not in out
    assert out.startswith(f"wrote 2 files to {tmp_path}: a.csv, b.png")
    assert "ok: yes" in out and "none left: none" in out
    paper = next(line for line in out.splitlines() if "paper" in line)
    assert "0.1235" in paper and "1e-07" in paper  # the two mappings over the same keys side by side
    assert "1 / 2.5" in out and "-0.5" in out and "fits: none on this grid" in out


@pytest.mark.slow  # starts a Dask cluster
def test_dask_says_nothing_when_its_usual_port_is_taken(tmp_path):
    folder = tmp_path / "msgs"
    made = runner.invoke(app, ["estimate", "fe1", "--epsilon", "1", "--delta", "1e-9", "--domain", "65536", "--seed",
                               "1", "--write-messages", str(folder), "--partitions", "3"])
    assert made.exit_code == 0, made.output
    with socket.socket() as busy:
        try:
            busy.bind(("127.0.0.1", 8787))
            busy.listen()
        except OSError:
            pass  # already taken by someone else: the same situation
        result = privagg("analyze", "fe1", "--params", str(folder / "params.json"), "--messages", str(folder),
                         "--engine", "dask", "--workers", "2")
    assert result.returncode == 0 and result.stderr == b"", result.stderr.decode()


def test_a_users_control_characters_never_reach_the_terminal(tmp_path):
    red = "\x1b[31mRED\x1b[0m"
    (tmp_path / "items.txt").write_text(f"{red}\nplain\n{red}\n\x07bell\n")
    (tmp_path / "names.txt").write_text(f"{red}\nplain\n\x07bell\n")
    result = privagg("estimate", "fe1", "--input", str(tmp_path / "items.txt"), "--candidates",
                     str(tmp_path / "names.txt"), "--domain", "1024", "--epsilon", "1", "--delta", "0.1", "--seed", "1")
    assert result.returncode == 0, result.stderr
    out = result.stdout.decode()
    assert "\x1b" not in out and "\x07" not in out
    assert "\\x1b[31mRED\\x1b[0m" in out and "\\x07bell" in out
    # a space at an item's end is shown, quoted: "maps " and "maps" read as one item twice (a reviewer's finding)
    (tmp_path / "spaced.txt").write_text("maps\nmaps\nmaps \n")
    (tmp_path / "public.txt").write_text("maps\nmaps \n")
    result = privagg("estimate", "fe1", "--input", str(tmp_path / "spaced.txt"), "--candidates",
                     str(tmp_path / "public.txt"), "--domain", "1024", "--epsilon", "1", "--delta", "0.1", "--seed", "1")
    assert result.returncode == 0, result.stderr
    assert "│ 'maps ' │" in result.stdout.decode() and "│ maps    │" in result.stdout.decode()


def test_heavy_hitters_say_when_the_list_is_not_reliable(tmp_path):
    """A miss bound of 0.53 (phi 0.03): the list, marked in its title. A vacuous one (1, at phi 0.01, issue 44):
    refused before any message, naming phi and what else would do."""
    (tmp_path / "few.txt").write_text("common\n" * 3_000 + "".join(f"w{i}\n" for i in range(300)))
    command = ["estimate", "fe-hh", "--input", str(tmp_path / "few.txt"), "--epsilon", "1", "--delta", "1e-6",
               "--seed", "1", "--max-length", "6"]
    result = runner.invoke(app, [*command, "--phi", "0.03", "--output", str(tmp_path / "report.json")])
    assert result.exit_code == 0, result.output
    assert "NOT A RELIABLE LIST at this n and phi" in result.stdout
    # the JSON (the same run's) says it as a field, not only in a warning; a list within both bounds is reliable
    assert json.loads((tmp_path / "report.json").read_text())["reliable"] is False
    assert json.loads(runner.invoke(app, [*command, "--phi", "0.3", "--json"]).stdout)["reliable"] is True
    result = runner.invoke(app, [*command, "--phi", "0.01"])
    assert result.exit_code == 2 and "error: phi must be larger, or more users" in result.output, result.output
    assert "could be missed with probability up to 1" in result.output and "--max-length" in result.output


def test_compare_prints_every_refusal_whole(tmp_path):
    """(gaussian refuses eps = 1e-6 at once; fe1 refuses it too, after some seconds of searching for its noise)"""
    (tmp_path / "items.txt").write_text("".join(f"{i % 50}\n" for i in range(2_000)))
    result = runner.invoke(app, ["compare", "--protocols", "gaussian,grr", "--epsilon", "0.000001,1", "--delta", "1e-8",
                                 "--input", str(tmp_path / "items.txt"), "--domain", "64", "--trials", "1"])
    assert result.exit_code == 0, result.output
    (refusal,) = [line for line in result.stdout.splitlines() if line.startswith("refused [1] gaussian at eps 1e-06: ")]
    assert refusal.endswith("got 1e-06") and "1 seeded trial a row" in result.stdout
