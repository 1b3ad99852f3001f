"""The command line: JSON schema, human output, and one-line errors with exit status 2."""

import json
import subprocess
import sys

import jsonschema
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from privagg.cli import app

runner = CliRunner()

# The schema documented in README.md, "JSON output".
REPORT_SCHEMA = {
    "type": "object",
    "required": ["protocol", "parameters", "privacy", "n_users", "messages", "bits_per_message",
                 "expected_error", "estimates", "error", "simulation", "input"],
    "properties": {
        "protocol": {"enum": ["bib", "fe0", "fe1"]},
        "parameters": {"type": "object", "required": ["epsilon", "delta", "n_users", "domain_size", "mu", "rho"]},
        "privacy": {"type": "object", "required": ["epsilon", "delta", "model", "method"],
                    "properties": {"model": {"enum": ["shuffle", "central"]}}},
        "n_users": {"type": "integer", "minimum": 2},
        "messages": {"type": "object", "required": ["total", "per_user"],
                     "properties": {"total": {"type": "integer"}, "per_user": {"type": "number"}}},
        "bits_per_message": {"type": "integer"},
        "expected_error": {"type": "object",
                           "required": ["standard_error", "max_error_bound", "max_error_beta"]},
        "estimates": {"type": "array", "items": {
            "type": "object", "required": ["item", "estimate", "stderr"],
            "properties": {"item": {"type": ["integer", "string"]}, "estimate": {"type": "number"},
                           "stderr": {"type": "number", "minimum": 0}}}},
        "error": {"type": "object", "required": ["over", "items", "max_abs", "mean_abs", "p50", "p90", "p99"]},
        "simulation": {"type": "object", "required": ["mode", "randomness", "full_domain"]},
    },
}


def run(*args):
    result = runner.invoke(app, [str(a) for a in args])
    return result.exit_code, result.stdout, result.stderr


@pytest.fixture
def ints_file(tmp_path):
    rng = np.random.default_rng(0)
    path = tmp_path / "items.txt"
    path.write_text("\n".join(map(str, np.minimum(rng.zipf(1.4, 20_000) - 1, 999))) + "\n")
    return path


COMMON = ["--epsilon", 1, "--delta", 1e-6]


@pytest.mark.parametrize("protocol", ["fe1", "fe0", "bib"])
def test_estimate_json_follows_the_schema(protocol, ints_file):
    code, out, _ = run("estimate", protocol, "--input", ints_file, *COMMON, "--domain", 1000, "--seed", 1,
                       "--top", 5, "--json")
    assert code == 0
    report = json.loads(out)
    jsonschema.validate(report, REPORT_SCHEMA)
    assert report["n_users"] == 20_000 and len(report["estimates"]) == 5
    assert report["estimates"][0]["item"] == 0  # the most frequent Zipf item
    assert report["error"]["over"] == "domain" and report["error"]["items"] == 1000
    assert report["privacy"]["model"] == ("central" if protocol == "bib" else "shuffle")


def test_estimate_csv_parquet_candidates_and_output(tmp_path):
    words = ["apple"] * 3000 + ["pear"] * 1000 + [f"w{i}" for i in range(16_000)]
    pq.write_table(pa.table({"user": range(len(words)), "fruit": words}), tmp_path / "f.parquet")
    (tmp_path / "f.csv").write_text("fruit\n" + "\n".join(words) + "\n")
    (tmp_path / "cands.txt").write_text("apple\npear\nkiwi\n")
    for name in ("f.parquet", "f.csv"):
        code, out, _ = run("estimate", "fe1", "--input", tmp_path / name, "--column", "fruit", *COMMON,
                           "--domain", 2**40, "--candidates", tmp_path / "cands.txt", "--seed", 3, "--json",
                           "--output", tmp_path / "report.json")
        assert code == 0, out
        report = json.loads(out)
        assert json.loads((tmp_path / "report.json").read_text()) == report
        assert [e["item"] for e in report["estimates"]][:2] == ["apple", "pear"]
        assert report["error"]["over"] == "candidates" and report["error"]["items"] == 3
        truth = {"apple": 3000, "pear": 1000, "kiwi": 0}
        errors = [abs(e["estimate"] - truth[e["item"]]) for e in report["estimates"]]
        assert report["error"]["max_abs"] == pytest.approx(max(errors))
        assert report["error"]["mean_abs"] == pytest.approx(sum(errors) / 3)
        assert report["simulation"]["full_domain"] is False


def test_human_output_has_top_items_privacy_and_cost(ints_file):
    code, out, _ = run("estimate", "fe1", "--input", ints_file, *COMMON, "--domain", 1000, "--seed", 1)
    assert code == 0
    for text in ("estimate ± stderr", "privacy: (1, 1e-06)-DP, shuffle model", "messages from 20000 users",
                 "error against the true counts (simulation only, not for release) over 1000 domain",
                 "seeded simulation"):
        assert text in out


def test_calibrate_json_and_table():
    code, out, _ = run("calibrate", "fe1", "--epsilon", 1, "--delta", 1e-10, "--users", 100_000,
                       "--domain", 2**24, "--c", 1, "--json")
    assert code == 0
    report = json.loads(out)
    assert report["parameters"]["bins"] == 8685
    assert report["parameters"]["mu"] == pytest.approx(97.96, abs=0.1)
    assert report["messages_per_user"] == pytest.approx(9.508, abs=0.01)
    assert report["bits_per_message"] == 64
    code, out, _ = run("calibrate", "fe0", "--epsilon", 1, "--delta", 1e-10, "--users", 100_000, "--domain", 100,
                       "--calibration", "closed_form")
    assert code == 0 and "closed form" in out
    code, out, _ = run("calibrate", "fe1", "--epsilon", 1, "--delta", 1e-10, "--users", 100_000,
                       "--domain", 2**24, "--calibration", "hockey_stick", "--json")
    assert code == 0 and json.loads(out)["parameters"]["mu"] == pytest.approx(82.13, abs=0.1)


def test_protocols_table():
    code, out, _ = run("protocols")
    assert code == 0 and "fe1" in out and "planned" in out


@pytest.mark.parametrize("args,field", [
    (["--epsilon", 0, "--delta", 1e-6, "--domain", 1000], "epsilon"),
    (["--epsilon", -1, "--delta", 1e-6, "--domain", 1000], "epsilon"),
    (["--epsilon", 1, "--delta", 0, "--domain", 1000], "delta"),
    (["--epsilon", 1, "--delta", 1, "--domain", 1000], "delta"),
    (["--epsilon", 1, "--delta", 1e-6, "--domain", 1], "domain"),
    (["--epsilon", 1, "--delta", 1e-6, "--domain", 10], "item"),  # out-of-domain ints
    (["--epsilon", 1, "--delta", 1e-6, "--domain", 1000, "--column", "x"], "column"),
    (["--epsilon", 1, "--delta", 1e-6, "--domain", 1000, "--top", 0], "top"),
    (["--epsilon", 1, "--delta", 1e-6, "--domain", 1000, "--seed", -1], "seed"),
    (["--epsilon", 1, "--delta", 1e-6, "--domain", 1000, "--c", -1], "c"),
    (["--epsilon", 1, "--delta", 1e-6, "--domain", 1000, "--bins", 2**60], "bins"),
    (["--epsilon", 1, "--delta", 1e-6, "--domain", 2**30], "candidates"),  # no full domain, no candidates
    (["--epsilon", 1, "--delta", 1e-6, "--domain", 1000, "--output", "/nonexistent/r.json"], "output"),
])
def test_bad_input_exits_2_with_one_line(args, field, ints_file):
    code, out, err = run("estimate", "fe1", "--input", ints_file, *args)
    assert code == 2
    assert err.count("\n") == 1 and err.startswith(f"error: {field} must be"), err


@pytest.mark.parametrize("content,field", [("", "input"), ("7\n", "input")])
def test_too_few_users(tmp_path, content, field):
    path = tmp_path / "few.txt"
    path.write_text(content)
    code, _, err = run("estimate", "fe0", "--input", path, *COMMON, "--domain", 100)
    assert code == 2 and err.startswith(f"error: {field} must be at least 2 items"), err


def test_unreadable_files(tmp_path):
    (tmp_path / "bad.parquet").write_bytes(b"not parquet")
    for path in (tmp_path / "missing.csv", tmp_path / "bad.parquet", tmp_path):
        code, _, err = run("estimate", "fe1", "--input", path, *COMMON)
        assert code == 2 and err.startswith("error: input must be a readable CSV, Parquet or UTF-8 text file"), err
        assert err.count("\n") == 1


def test_out_of_domain_candidate(ints_file, tmp_path):
    (tmp_path / "cands.txt").write_text("3\n5000\n")
    code, _, err = run("estimate", "fe1", "--input", ints_file, *COMMON, "--domain", 1000,
                       "--candidates", tmp_path / "cands.txt")
    assert code == 2 and err.startswith(r"error: candidate must be integers in [0, 1000)"), err


def csv_file(tmp_path, text):
    path = tmp_path / "items.csv"
    path.write_bytes(text)
    return path


@pytest.mark.parametrize("content,args,field", [
    (b"app\na\nb\n", ["--column", "user"], "column"),  # missing column
    (b"app,n\na,1\n,2\nb,3\n", ["--column", "app"], "item"),  # an empty cell is a missing value
    (b"app\n\xff\xfe\nb\n", [], "input"),  # not UTF-8
    (b"x\n1.5\n2.5\n", [], "item"),  # floats
])
def test_bad_csv_inputs(tmp_path, content, args, field):
    code, _, err = run("estimate", "fe1", "--input", csv_file(tmp_path, content), *args, *COMMON)
    assert code == 2 and err.startswith(f"error: {field} must be"), err
    assert err.count("\n") == 1


def test_stray_line_in_an_integer_file(tmp_path):
    path = tmp_path / "ints.txt"
    path.write_text("1\n2\n3\nnan\n4\n")
    code, _, err = run("estimate", "fe1", "--input", path, *COMMON, "--domain", 100)
    assert code == 2 and err.startswith("error: input must be"), err
    assert "line 4" in err


def test_candidates_must_match_the_input(ints_file, tmp_path):
    (tmp_path / "c.txt").write_text("apple\n")
    code, _, err = run("estimate", "fe1", "--input", ints_file, *COMMON, "--domain", 1000,
                       "--candidates", tmp_path / "c.txt")
    assert code == 2 and err.startswith("error: candidate must be integer items, like the input"), err
    (tmp_path / "empty.txt").write_text("")
    code, _, err = run("estimate", "fe1", "--input", ints_file, *COMMON, "--domain", 1000,
                       "--candidates", tmp_path / "empty.txt")
    assert code == 2 and err.startswith("error: candidates must be at least 1 item"), err


def test_private_items_are_never_printed(tmp_path):
    words = ["apple"] * 3000 + ["pear"] * 2000 + ["SECRET-alice"]
    (tmp_path / "w.txt").write_text("\n".join(words) + "\n")
    code, out, _ = run("estimate", "fe1", "--input", tmp_path / "w.txt", *COMMON, "--domain", 2**16,
                       "--top", 2**16, "--seed", 1, "--json")
    assert code == 0 and "SECRET" not in out
    assert all(str(e["item"]).startswith("#") for e in json.loads(out)["estimates"])


def test_usage_errors_are_one_line():
    """Errors of the command-line parser itself (the installed entry point, as a user runs it)."""
    for args in (["estimate", "fe1", "--epsilon", "abc", "--delta", "1e-6"], ["estimate", "fe9"],
                 ["estimate", "fe1", "--delta", "1e-6"]):
        result = subprocess.run([sys.executable, "-m", "privagg", *args], capture_output=True, text=True)
        assert result.returncode == 2 and result.stderr.startswith("error: "), result.stderr
        assert result.stderr.count("\n") == 1 and not result.stdout


def test_calibrate_bad_users():
    code, _, err = run("calibrate", "fe1", *COMMON, "--users", 1, "--domain", 100)
    assert code == 2 and err.startswith("error: n_users must be an integer >= 2")
