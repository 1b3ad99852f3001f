"""The command line: JSON reports against their generated schemas, human output, message folders and
one-line errors with exit status 2."""

import csv
import json
import os
import platform
import subprocess
import sys
import tomllib
from pathlib import Path

import jsonschema
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

import privagg
from privagg.cli import app
from privagg.protocols import registry
from privagg.protocols.kinds import ResultKind
from privagg.protocols.registry import ENTRIES, IMPLEMENTED, REGISTRY, load_parameters
from privagg.reports import REPORT_TYPES, AnalysisReport, CalibrationReport, EstimateReport, json_schema

runner = CliRunner()
ROOT = Path(__file__).resolve().parent.parent


def validate(report, report_type):
    """``report`` against the JSON Schema generated from its type, plus what the types cannot say."""
    schema = json_schema(report_type)
    jsonschema.Draft202012Validator.check_schema(schema)
    jsonschema.Draft202012Validator(schema).validate(report)
    assert report["protocol"] in IMPLEMENTED
    assert report["privacy"]["model"] == REGISTRY[report["protocol"]].topology
    stages = [report["parameters"], *([report["discovery"]["parameters"]] if "discovery" in report else [])]
    assert report["privacy"]["epsilon"] == sum(p["epsilon"] for p in stages) > 0  # two stages: composed
    for e in report.get("estimates", []):
        assert e["stderr"] >= 0


def without_true_counts(estimates):
    """Estimates as an analysis reports them: only a simulation knows the true counts."""
    return [{k: v for k, v in e.items() if k != "true_count"} for e in estimates]


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


def privacy_args(protocol):
    """--epsilon and --delta, or --epsilon alone for a pure eps-DP protocol (which takes no delta)."""
    return COMMON[:2] if REGISTRY[protocol].pure else COMMON


@pytest.mark.parametrize("protocol", ["fe1", "fe0", "bib"])
def test_estimate_json_follows_the_schema(protocol, ints_file):
    code, out, _ = run("estimate", protocol, "--input", ints_file, *COMMON, "--domain", 1000, "--seed", 1,
                       "--top", 5, "--json")
    assert code == 0
    report = json.loads(out)
    validate(report, EstimateReport)
    assert report["n_users"] == 20_000 and len(report["estimates"]) == 5
    assert report["estimates"][0]["item"] == 0  # the most frequent Zipf item
    truth = np.bincount(np.loadtxt(ints_file, dtype=np.int64), minlength=1000)
    assert [e["true_count"] for e in report["estimates"]] == [truth[e["item"]] for e in report["estimates"]]
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
        assert [e["true_count"] for e in report["estimates"]] == [3000, 1000, 0]  # kiwi: a candidate nobody holds
        assert report["error"]["over"] == "candidates" and report["error"]["items"] == 3
        truth = {"apple": 3000, "pear": 1000, "kiwi": 0}
        errors = [abs(e["estimate"] - truth[e["item"]]) for e in report["estimates"]]
        assert report["error"]["max_abs"] == pytest.approx(max(errors))
        assert report["error"]["mean_abs"] == pytest.approx(sum(errors) / 3)
        assert report["simulation"]["full_domain"] is False


def test_human_output_has_top_items_privacy_and_cost(ints_file):
    code, out, _ = run("estimate", "fe1", "--input", ints_file, *COMMON, "--domain", 1000, "--seed", 1)
    assert code == 0
    for text in ("estimate ± stderr", "true count (--evaluate)", "messages from 20000 users",
                 "NOT PRIVATE (seeded simulation, evaluated); would be (1, 1e-06)-DP, "
                 "shuffle model, trusting shuffler",
                 "error against the true counts (--evaluate: not for release) over the 1000 items of the domain"):
        assert text in out
    privacy_lines = [line for line in out.splitlines() if "DP" in line]
    assert len(privacy_lines) == 1 and len(privacy_lines[0]) < 150 and "neighbours" not in out
    code, out, _ = run("estimate", "fe1", "--input", ints_file, *COMMON, "--domain", 1000, "--seed", 1, "--verbose")
    for text in ("privacy: (1, 1e-06)-DP, shuffle model", "neighbours: replace-one", "method: numeric",
                 "delta at other epsilons"):
        assert text in out


def test_calibrate_json_and_table():
    code, out, _ = run("calibrate", "fe1", "--epsilon", 1, "--delta", 1e-10, "--users", 100_000,
                       "--domain", 2**24, "--c", 1, "--json")
    assert code == 0
    report = json.loads(out)
    validate(report, CalibrationReport)
    assert report["parameters"]["bins"] == 8685
    assert report["parameters"]["mu"] == pytest.approx(97.96, abs=0.1)
    assert report["messages_per_user"] == pytest.approx(9.508, abs=0.01)
    assert report["bits_per_message"] == 64
    code, out, _ = run("calibrate", "fe0", "--epsilon", 1, "--delta", 1e-10, "--users", 100_000, "--domain", 100,
                       "--calibration", "closed_form", "--verbose")
    assert code == 0 and "closed form" in out
    code, out, _ = run("calibrate", "fe1", "--epsilon", 1, "--delta", 1e-10, "--users", 100_000,
                       "--domain", 2**24, "--calibration", "hockey_stick", "--json")
    assert code == 0 and json.loads(out)["parameters"]["mu"] == pytest.approx(82.13, abs=0.1)


def test_protocols_table():
    code, out, _ = run("protocols")
    assert code == 0 and "fe1" in out and "fe-hh" in out
    code, out, _ = run("protocols", "--json")
    rows = json.loads(out)
    assert code == 0 and [r["protocol"] for r in rows] == [e.name for e in ENTRIES]
    assert {r["protocol"] for r in rows if r["status"] == "implemented"} == set(IMPLEMENTED)
    assert next(r for r in rows if r["protocol"] == "fe1")["options"] == ["c", "bins", "honest_fraction"]
    assert next(r for r in rows if r["protocol"] == "fe1")["audit"].startswith("exact grid holds")
    assert "audit" in run("protocols")[1]  # the column (rich wraps its cells to the terminal)
    # what each is: dpcs and dpcs-star print the same estimates, and the listing says how they differ
    titles = {r["protocol"]: r["title"] for r in rows}
    assert len(set(titles.values())) == len(titles) and "additive shares" in titles["dpcs-star"]
    assert "same estimates" in titles["dpcs-star"] and "sampled counts" in titles["dpcs"]
    assert titles["dpcs-star"] in run("protocols")[1]  # in the table too (piped: not wrapped)


def test_a_fast_seeded_run_names_both_reasons_it_is_not_private(ints_file):
    """--seed 1 --mode fast named only one of its two reasons (the fast path): each is in the privacy block and in
    the one-line summary."""
    code, out, err = run("estimate", "fe1", "--input", ints_file, "--domain", 1000, "--epsilon", 1, "--delta", 1e-6,
                         "--seed", 1, "--mode", "fast", "--no-evaluate")
    assert code == 0 and "NOT PRIVATE (fast path, seeded simulation)" in out, out
    code, out, _ = run("estimate", "fe1", "--input", ints_file, "--domain", 1000, "--epsilon", 1, "--delta", 1e-6,
                       "--seed", 1, "--mode", "fast", "--json")
    reason = json.loads(out)["privacy"]["not_private_reason"]
    assert reason.startswith("fast path") and "; and seeded simulation" in reason and "; and evaluated" in reason


FREQUENCY = [name for name in IMPLEMENTED if REGISTRY[name].result is ResultKind.FREQUENCY_TABLE]


def example_args(protocol):
    """The command line of the entry's example instance: its privacy, users, domain (or dimension) and options."""
    example, entry = dict(REGISTRY[protocol].example), REGISTRY[protocol]
    args = ["--epsilon", example.pop("epsilon"), *(["--delta", example.pop("delta")] if "delta" in example else []),
            "--users", example.pop("n_users"),
            "--dimension" if entry.result is ResultKind.VECTOR_SUM else "--domain", example.pop("domain_size")]
    return args + [a for name, value in example.items() for a in (f"--{name.replace('_', '-')}", value)]


def test_calibrate_says_at_what_count_its_standard_error_is():
    """The standard error calibrate prints (and --max-items' plan line) is each protocol's at a count of its own:
    an item no user holds for FE1 (its largest), the worst item for OLH, a coordinate at n / 2 for blanket-vector,
    the threshold phi n for fe-hh; it said "an item" alone (a reviewer's finding: read as any item's)."""
    for args, at in ((("fe1", "--delta", 1e-10, "--domain", 2**20), "an item no user holds (the largest)"),
                     (("olh", "--domain", 1024), "the worst item (the largest over the items' counts)"),
                     (("blanket-vector", "--delta", 1e-8, "--dimension", 20), "a coordinate whose sum is n / 2"),
                     (("fe-hh", "--delta", 1e-10, "--domain", 2**32, "--phi", 0.01), "an item held by phi n = 1,000 "
                      "users (the threshold)")):
        code, out, err = run("calibrate", *args, "--epsilon", 1, "--users", 100_000, "--json")
        assert code == 0, err
        assert json.loads(out)["standard_error_at"].startswith(at)
    code, out, err = run("calibrate", "olh", "--epsilon", 1, "--users", 10_000, "--domain", 1024, "--max-items", 3)
    assert code == 0, err
    assert "reports; expected stderr " in out and " at the worst item (the largest over the items' counts); each" in \
        " ".join(out.split())


@pytest.mark.parametrize("protocol,calibration", [(e.name, c) for e in ENTRIES if e.implemented
                                                  for c in e.calibrations if c != "closed_form"])
def test_calibrate_json_reloads_as_the_calibrated_parameters(protocol, calibration, tmp_path):
    code, out, err = run("calibrate", protocol, *example_args(protocol), "--calibration", calibration, "--json",
                         "--output", tmp_path / "cal.json")
    assert code == 0, err
    report = json.loads(out)
    validate(report, CalibrationReport)
    assert json.loads((tmp_path / "cal.json").read_text()) == report
    params = registry.calibrate(protocol, calibration=calibration, item_key=report["parameters"].get("item_key"),
                                **REGISTRY[protocol].example)
    assert [p["epsilon"] for p in report["privacy_profile"]] == [0.5, 1.0, 2.0]
    assert report["privacy_profile"][1]["delta"] == params.delta_at(1.0) <= 1e-6
    assert report["costs"] and report["theory"]  # expected costs per party, the estimate's law
    assert load_parameters(json.dumps(report)) == params  # the whole report
    assert load_parameters((tmp_path / "cal.json").read_text()) == params


def test_calibrate_records_the_public_hash_key(tmp_path):
    args = ["calibrate", "fe1", *COMMON, "--users", 10_000, "--domain", 2**20, "--json"]
    first, second = (json.loads(run(*args)[1])["parameters"]["item_key"] for _ in range(2))
    assert first != second and len(bytes.fromhex(first)) == 32  # random unless given
    code, out, _ = run(*args, "--hash-key", "00ff")
    assert code == 0 and json.loads(out)["parameters"]["item_key"] == "00ff"


def test_hash_key_keeps_string_codes_across_runs(tmp_path):
    (tmp_path / "w.txt").write_text("apple\n" * 300 + "pear\n" * 200)
    args = ["estimate", "fe1", "--input", tmp_path / "w.txt", *COMMON, "--domain", 2**20, "--top", 2, "--json"]
    code, out, _ = run(*args)
    first = json.loads(out)
    key = first["parameters"]["item_key"]
    items = {e["item"] for e in first["estimates"]}
    assert code == 0 and all(str(i).startswith("#") for i in items)
    assert {e["item"] for e in json.loads(run(*args, "--hash-key", key)[1])["estimates"]} == items
    assert {e["item"] for e in json.loads(run(*args)[1])["estimates"]} != items  # a new random key
    code, out, _ = run(*args[:-1], "--hash-key", key)
    assert "give --candidates FILE to name them" in out and f"--hash-key {key} keeps these codes" in out


def test_weak_privacy_warns_and_goes_on(ints_file):
    code, out, err = run("estimate", "fe0", "--input", ints_file, "--epsilon", 12, "--delta", 1e-3,
                         "--domain", 1000, "--seed", 1, "--json")
    assert code == 0
    warnings = json.loads(out)["warnings"]
    assert len(warnings) == 2 and warnings[0].startswith("delta = 0.001 is at least 1/n")
    assert "epsilon = 12 exceeds 10" in warnings[1]
    assert err.splitlines() == [f"warning: {w}" for w in warnings]
    code, out, err = run("calibrate", "fe0", "--epsilon", 1, "--delta", 0.5, "--users", 100, "--domain", 10,
                         "--json")
    assert code == 0 and json.loads(out)["warnings"] and err.startswith("warning: delta = 0.5")


def test_version():
    code, out, _ = run("--version")
    assert code == 0 and out.strip() == f"privagg {privagg.__version__}"


def test_version_is_the_project_version():
    with open(ROOT / "pyproject.toml", "rb") as f:
        assert privagg.__version__ == tomllib.load(f)["project"]["version"]


@pytest.mark.parametrize("name", sorted(REPORT_TYPES))
def test_schema_prints_the_generated_json_schema(name):
    code, out, _ = run("schema", name)
    assert code == 0
    schema = json.loads(out)
    jsonschema.Draft202012Validator.check_schema(schema)
    assert schema == json_schema(REPORT_TYPES[name])
    code, _, err = run("schema", "nonsense")
    assert code == 2 and err.startswith("error: report must be one of calibrate, estimate, "), err


def test_seeded_estimates_say_they_are_not_private(ints_file):
    code, out, _ = run("estimate", "fe0", "--input", ints_file, *COMMON, "--domain", 1000, "--seed", 4, "--json")
    privacy = json.loads(out)["privacy"]
    assert code == 0 and privacy["private"] is False and "seed" in privacy["not_private_reason"]
    assert "seeded" in privacy["randomness"]
    code, out, _ = run("estimate", "fe0", "--input", ints_file, *COMMON, "--domain", 1000, "--seed", 4)
    assert code == 0 and out.splitlines()[-1] != "" and \
        "NOT PRIVATE (seeded simulation, evaluated)" in out


def test_every_document_has_one_private_flag_false_whenever_it_holds_the_data(ints_file, tmp_path):
    """One top-level ``private`` per JSON document: true for the release alone (and for a calibration, which holds
    no data), false with the true counts beside it (--evaluate), for a seeded run, and for compare."""
    def document(*args):
        code, out, err = run(*args, "--json")
        assert code == 0, err
        return json.loads(out)

    estimate = ["estimate", "fe0", "--input", ints_file, *COMMON, "--domain", 1000, "--top", 3]
    release, evaluated, seeded = (document(*estimate, *extra) for extra in ([], ["--evaluate"], ["--seed", 4]))
    assert release["private"] is True and "error" not in release
    assert evaluated["private"] is False and "error" in evaluated
    assert seeded["private"] is False
    assert list(release)[0] == "private"
    assert document("calibrate", "fe0", *COMMON, "--users", 1000, "--domain", 10)["private"] is True
    compared = document("compare", "--input", ints_file, "--domain", 1000, "--protocols", "fe0", "--epsilon", 1,
                        "--delta", 1e-6, "--trials", 1)
    assert compared["private"] is False


def test_a_report_holding_the_data_is_not_private_whatever_its_privacy_block_says(ints_file):
    """The flag reads the fields marked FROM_DATA, not only the privacy block: a report whose block was left
    private beside true counts is still not a private document."""
    import dataclasses

    from privagg.core.encoding import ItemEncoder
    from privagg.reports import report_document
    from privagg.simulate.frequency import estimate_frequencies

    codes = np.loadtxt(ints_file, dtype=np.int64)
    report, _ = estimate_frequencies("fe0", codes, ItemEncoder(1000, kind="integer"), epsilon=1.0, delta=1e-6,
                                     top=3, full_domain=True, evaluate=True)
    assert report_document(report)["private"] is False
    unmarked = dataclasses.replace(report, privacy=dataclasses.replace(report.privacy, private=True,
                                                                       not_private_reason=None))
    assert report_document(unmarked)["private"] is False
    released = dataclasses.replace(unmarked, error=None, estimates=[dataclasses.replace(e, true_count=None)
                                                                     for e in report.estimates])
    assert report_document(released)["private"] is True


def test_every_field_computed_from_the_data_is_marked():
    """The report types' fields that hold the truth or an error against it carry FROM_DATA (by name: true_*,
    truth, *_z, z_*, error*, evaluation, data_condition*), so that no new one slips past the document's flag."""
    import dataclasses
    import re

    from privagg import reports

    named = re.compile(r"^(true_|truth)|_z$|^z_|^error(_|$)|^unweighted_error$|^evaluation$|^data_condition")
    types = [t for t in vars(reports).values() if isinstance(t, type) and dataclasses.is_dataclass(t) and
             t.__module__ == reports.__name__]
    checked = [(t.__name__, f.name) for t in types for f in dataclasses.fields(t) if named.search(f.name)]
    assert len(checked) >= 15
    mechanism = {("AuditReport", "true_epsilon"), ("AuditReport", "true_delta")}  # from its laws, not from data
    assert [c for t in types for f in dataclasses.fields(t) if named.search(f.name) and
            not f.metadata.get("from_data") for c in [(t.__name__, f.name)] if c not in mechanism] == []


@pytest.mark.parametrize("protocol", FREQUENCY)
def test_unseeded_estimates_are_private(protocol, tmp_path):
    path = tmp_path / "small.txt"
    # a multi-round protocol's faithful run is its deployed parties' rounds, O(n^2) pair work: 70 users (dpds 5 s
    # under load, 16 s at 140, a minute and more at 500); what is checked is the report's form, not a size
    n = 70 if registry.get(protocol).multi_round else 500
    path.write_text("\n".join(str(i % 7) for i in range(n)) + "\n")
    # 7 categories held by n / 7 users each: the sampling family's condition with beta = 0.1
    extra = ["--domain", 7, "--min-count-fraction", 0.1] if "min_count_fraction" in {
        o.name for o in registry.get(protocol).options} else ["--domain", 50]
    extra += {"tss": ["--report-fraction", 3 / 7], "tss-collusion": ["--report-fraction", 3 / 7, "--colluders", 2]
              }.get(protocol, [])
    # one run, its report as JSON (--output) and as the human summary (stdout)
    code, out, err = run("estimate", protocol, "--input", path, *privacy_args(protocol), *extra, "--top", 3,
                         "--output", tmp_path / "report.json")
    assert code == 0, err
    report = json.loads((tmp_path / "report.json").read_text())
    validate(report, EstimateReport)
    assert report["privacy"]["private"] is True and "not_private_reason" not in report["privacy"]
    assert report["private"] is True  # the whole document: the release alone
    assert "secure" in report["privacy"]["randomness"] and report["n_users"] == n
    # a private report holds the release only: no true count, no error against the data
    assert "error" not in report and all("true_count" not in e for e in report["estimates"])
    assert "NOT PRIVATE" not in out and "true count" not in out and "error against" not in out
    assert "estimate ± stderr" in out and str(report["estimates"][0]["item"]) in out  # the summary, of this report


def test_output_writes_json_and_prints_the_summary(ints_file, tmp_path):
    code, out, _ = run("estimate", "fe1", "--input", ints_file, *COMMON, "--domain", 1000, "--seed", 1,
                       "--output", tmp_path / "r.json")
    assert code == 0
    assert "estimate ± stderr" in out and "NOT PRIVATE" in out and not out.lstrip().startswith("{")
    report = json.loads((tmp_path / "r.json").read_text())
    validate(report, EstimateReport)
    assert report["n_users"] == 20_000 and str(report["estimates"][0]["item"]) in out


def write_run(ints_file, tmp_path, *args):
    folder = tmp_path / "messages"
    (tmp_path / "cands.txt").write_text("0\n1\n2\n17\n999\n")
    code, out, err = run("estimate", "fe1", "--input", ints_file, *COMMON, "--domain", 1000, "--bins", 300,
                         "--seed", 5, "--candidates", tmp_path / "cands.txt", "--write-messages", folder,
                         "--partitions", 3, "--json", *args)
    assert code == 0, err
    return json.loads(out), folder


def test_written_messages_analyze_to_the_same_estimates(ints_file, tmp_path):
    estimated, folder = write_run(ints_file, tmp_path)
    assert estimated["messages_written"] == str(folder)
    assert json.loads((folder / "items.json").read_text())["users"] == estimated["n_users"]  # whose messages
    assert sorted(p.name for p in folder.iterdir()) == ["items.json", "params.json", "part-00000.parquet",
                                                        "part-00001.parquet", "part-00002.parquet"]
    params = load_parameters((folder / "params.json").read_text())
    assert load_parameters(estimated["parameters"]) == params  # the report's parameters, derived ones included
    code, out, err = run("analyze", "fe1", "--params", folder / "params.json", "--messages", folder,
                         "--candidates", tmp_path / "cands.txt", "--engine", "local", "--json")
    assert code == 0, err
    analyzed = json.loads(out)
    validate(analyzed, AnalysisReport)
    assert {e["item"]: e["estimate"] for e in analyzed["estimates"]} == {
        e["item"]: e["estimate"] for e in estimated["estimates"]}  # exactly: the same counts
    assert [e["item"] for e in analyzed["estimates"]] == [e["item"] for e in estimated["estimates"]]
    assert analyzed["messages"] == {**estimated["messages"], "per_user": analyzed["messages"]["per_user"]}
    assert analyzed["messages"]["total"] == estimated["messages"]["total"] and analyzed["messages"]["malformed"] == 0
    assert analyzed["engine"]["name"] == "local" and analyzed["engine"]["partitions"] == 3
    assert analyzed["full_domain"] is False
    # the messages came from a seeded run: the analysis says so too
    assert analyzed["privacy"]["private"] is False and analyzed["privacy"]["not_private_reason"]
    code, out, _ = run("analyze", "fe1", "--params", folder / "params.json", "--messages", folder,
                       "--candidates", tmp_path / "cands.txt")
    assert code == 0 and "NOT PRIVATE" in out and "3 partitions" in out


def test_a_folder_with_malformed_messages_analyzes_stating_them(ints_file, tmp_path):
    """Messages of a folder that break the protocol's layout are dropped and stated, as the analyzer service
    states its lost messages: the guarantee becomes an Incomplete event counting on whole reports."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    _, folder = write_run(ints_file, tmp_path)
    part = folder / "part-00000.parquet"
    table = pq.read_table(part)
    w = table.column("w").to_numpy().copy()
    w[:7] = np.iinfo(w.dtype).max  # past every bin
    pq.write_table(table.set_column(table.schema.get_field_index("w"), "w", pa.array(w)), part)
    code, out, err = run("analyze", "fe1", "--params", folder / "params.json", "--messages", folder,
                         "--candidates", tmp_path / "cands.txt", "--json")
    assert code == 0, err
    analyzed = json.loads(out)
    assert analyzed["messages"]["malformed"] == 7
    assert analyzed["privacy"]["event"]["type"] == "incomplete" and analyzed["privacy"]["event"]["lost"] == 7


def test_written_messages_analyze_to_the_same_full_domain(ints_file, tmp_path):
    folder = tmp_path / "m"
    code, out, _ = run("estimate", "fe0", "--input", ints_file, *COMMON, "--domain", 1000, "--seed", 2,
                       "--top", 1000, "--write-messages", folder, "--partitions", 4, "--json")
    assert code == 0
    estimated = json.loads(out)
    code, out, err = run("analyze", "fe0", "--params", folder / "params.json", "--messages", folder, "--top", 1000,
                         "--json")
    assert code == 0, err
    analyzed = json.loads(out)
    assert analyzed["full_domain"] is True and len(analyzed["estimates"]) == 1000
    assert analyzed["estimates"] == without_true_counts(estimated["estimates"])


def test_analyze_refuses_parameters_of_another_protocol(ints_file, tmp_path):
    _, folder = write_run(ints_file, tmp_path)
    code, out, err = run("analyze", "fe0", "--params", folder / "params.json", "--messages", folder)
    assert code == 2 and err.startswith("error: params must be parameters of fe0, got parameters of fe1"), err
    assert err.count("\n") == 1 and not out
    (tmp_path / "broken.json").write_text("{not json")
    code, _, err = run("analyze", "fe1", "--params", tmp_path / "broken.json", "--messages", folder)
    assert code == 2 and err.startswith("error: parameters must be a JSON object"), err
    code, _, err = run("analyze", "fe1", "--params", folder / "params.json", "--messages", tmp_path)
    assert code == 2 and err.startswith("error: messages must be a folder holding part-*.parquet files"), err
    code, _, err = run("analyze", "fe1", "--params", folder / "params.json", "--messages", folder,
                       "--engine", "local", "--workers", 2)
    assert code == 2 and err.startswith("error: scheduler/workers must be given only with --engine dask"), err


def test_written_text_items_analyze_to_the_same_labels_and_estimates(tmp_path):
    words = ["apple"] * 3000 + ["pear"] * 1000 + ["SECRET-bob"] * 500 + [f"w{i}" for i in range(5500)]
    (tmp_path / "f.csv").write_text("fruit\n" + "\n".join(words) + "\n")
    (tmp_path / "c.txt").write_text("apple\npear\nkiwi\n")
    code, out, err = run("estimate", "fe1", "--input", tmp_path / "f.csv", *COMMON, "--domain", 2**40, "--candidates",
                         tmp_path / "c.txt", "--write-messages", tmp_path / "m", "--partitions", 2, "--json")
    assert code == 0, err
    estimated = json.loads(out)
    assert estimated["privacy"]["private"] is True  # unseeded: secure randomness, a random item key
    code, out, err = run("analyze", "fe1", "--params", tmp_path / "m" / "params.json", "--messages", tmp_path / "m",
                         "--candidates", tmp_path / "c.txt", "--json")
    assert code == 0, err
    analyzed = json.loads(out)
    assert analyzed["estimates"] == without_true_counts(estimated["estimates"]) and "SECRET" not in out
    assert [e["item"] for e in analyzed["estimates"]][:2] == ["apple", "pear"]
    assert analyzed["privacy"]["private"] is True


def test_analyze_refuses_parameters_other_than_the_messages(ints_file, tmp_path):
    estimated, folder = write_run(ints_file, tmp_path)
    code, _, _ = run("calibrate", "fe1", "--epsilon", 2, "--delta", 1e-6, "--users", estimated["n_users"],
                     "--domain", 1000, "--bins", 300, "--output", tmp_path / "other.json")
    assert code == 0
    code, _, err = run("analyze", "fe1", "--params", tmp_path / "other.json", "--messages", folder,
                       "--candidates", tmp_path / "cands.txt")
    assert code == 2 and err.startswith("error: params must be"), err


def test_analyze_refuses_another_runs_parameters_beside_the_messages(tmp_path):
    """A reviewer's finding: two unseeded runs of the same settings differ only in their item key; one run's
    params.json beside the other's messages and items.json was read into estimates near 0 for items thousands of
    users hold, with no warning. items.json keeps a digest of the parameters, and analyze refuses another's."""
    from privagg.engine import write_messages
    from privagg.protocols.registry import calibrate, client

    params = [calibrate("fe1", epsilon=1.0, delta=1e-6, n_users=300, domain_size=2**32, item_key=key) for key in
              ("aa" * 16, "bb" * 16)]
    assert params[0] != params[1]
    items = {"kind": "integer", "domain_size": 2**32, "private": True, "randomness": "the SDK's", "users": 300}
    folder = tmp_path / "b"
    write_messages(folder, params[1], client(params[1]).randomize(np.arange(300) % 7, rng=3), 2, items)
    (tmp_path / "a.json").write_text(json.dumps(params[0].to_dict()))
    (folder / "params.json").write_text(json.dumps(params[0].to_dict()))  # the other run's, copied in too
    (tmp_path / "cands.txt").write_text("1\n2\n")
    code, _, err = run("analyze", "fe1", "--params", tmp_path / "a.json", "--messages", folder,
                       "--candidates", tmp_path / "cands.txt")
    assert code == 2 and err.startswith("error: params must be the parameters the messages were made with"), err
    (folder / "params.json").write_text(json.dumps(params[1].to_dict()))
    code, _, err = run("analyze", "fe1", "--params", folder / "params.json", "--messages", folder,
                       "--candidates", tmp_path / "cands.txt")
    assert code == 0, err


def test_a_folder_of_fewer_users_is_debiased_with_the_users_its_items_json_records(tmp_path):
    """A folder holding m = 200 of the n = 400 users' messages (a collection closed early), as items.json records:
    analyze debiases with m, divides the messages by m and states what the guarantee counts on among them (not
    private below ceil(G n) = 200); a folder that does not record m is debiased with n and the report says so."""
    from privagg.engine import write_messages
    from privagg.protocols.registry import analyzer, calibrate, client

    params = calibrate("fe0", epsilon=1.0, delta=1e-6, n_users=400, domain_size=5, honest_fraction=0.5)
    m, folder = 200, tmp_path / "m"
    messages = client(params).randomize(np.arange(m) % 3, rng=7)
    items = {"kind": "integer", "domain_size": 5, "private": True, "randomness": "the SDK's", "users": m}
    write_messages(folder, params, messages, 2, items)
    aggregator = analyzer(params)
    agg = aggregator.agg_update(aggregator.agg_init(), messages)
    args = ("analyze", "fe0", "--params", folder / "params.json", "--messages", folder, "--json")

    def analyze(**record):
        (folder / "items.json").write_text(json.dumps({k: v for k, v in {**items, **record}.items() if v != "-"}))
        code, out, err = run(*args)
        assert code == 0, err
        return json.loads(out)

    report = analyze()
    assert {e["item"]: e["estimate"] for e in report["estimates"]} == dict(enumerate(
        aggregator.finalize(agg, reporters=m).estimates.tolist()))
    assert report["messages"]["per_user"] == len(messages) / m and not report["warnings"]
    assert report["privacy"]["private"] and not report["privacy"]["caveats"]
    assert "200 of the 400 users reported" in report["privacy"]["assumptions"][-1]
    report = analyze(users="-")  # not recorded: n, and the report says so
    assert {e["item"]: e["estimate"] for e in report["estimates"]} == dict(enumerate(
        aggregator.finalize(agg).estimates.tolist()))
    assert any('does not record how many users' in w and "n = 400" in w for w in report["warnings"])
    report = analyze(users=150)  # fewer than the ceil(G n) honest users the guarantee counts on
    assert report["privacy"]["private"] is False and report["privacy"]["not_private_reason"].startswith(
        "too few reports: 150 of the 400 users' reports were counted, fewer than the 200 honest users")
    for bad in (0, "200", 2.5, True):
        (folder / "items.json").write_text(json.dumps({**items, "users": bad}))
        code, _, err = run(*args)
        assert code == 2 and err.startswith("error: items.json users must be the number of users whose messages"), err


def test_write_messages_needs_a_faithful_shuffle_run(ints_file, tmp_path):
    code, _, err = run("estimate", "fe1", "--input", ints_file, *COMMON, "--domain", 1000, "--mode", "fast",
                       "--write-messages", tmp_path / "m")
    assert code == 2 and err.startswith("error: write-messages must be left out with --mode fast"), err
    write_run(ints_file, tmp_path)
    code, _, err = run("estimate", "fe1", "--input", ints_file, *COMMON, "--domain", 1000,
                       "--write-messages", tmp_path / "messages")
    assert code == 2 and err.startswith("error: write-messages must be a folder without message partitions"), err


@pytest.mark.parametrize("args,field", [
    (["--epsilon", 0, "--delta", 1e-6, "--domain", 1000], "epsilon"),
    (["--epsilon", -1, "--delta", 1e-6, "--domain", 1000], "epsilon"),
    (["--epsilon", 1, "--delta", 0, "--domain", 1000], "delta"),
    (["--epsilon", 1, "--delta", 1, "--domain", 1000], "delta"),
    (["--epsilon", 1, "--delta", 1e-6, "--domain", 1], "domain"),
    (["--epsilon", 1, "--delta", 1e-6, "--domain", 10], "input"),  # out-of-domain ints
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
        assert code == 2 and err.startswith("error: input must be a"), err
        assert err.count("\n") == 1


def test_out_of_domain_candidate(ints_file, tmp_path):
    (tmp_path / "cands.txt").write_text("3\n5000\n")
    code, _, err = run("estimate", "fe1", "--input", ints_file, *COMMON, "--domain", 1000,
                       "--candidates", tmp_path / "cands.txt")
    assert code == 2 and err.startswith(r"error: candidates must be integers in [0, 1000)"), err
    assert "5000 on line 2" in err


def csv_file(tmp_path, text):
    path = tmp_path / "items.csv"
    path.write_bytes(text)
    return path


@pytest.mark.parametrize("content,args,field", [
    (b"app\na\nb\n", ["--column", "user"], "column"),  # missing column
    (b"app,n\na,1\n,2\nb,3\n", ["--column", "app"], "input"),  # an empty cell is a missing value
    (b"app\n\xff\xfe\nb\n", [], "input"),  # not UTF-8
    (b"x\n1.5\n2.5\n", [], "input"),  # floats
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
    assert code == 2 and err.startswith("error: candidates must be integers throughout, got 'apple'"), err
    (tmp_path / "empty.txt").write_text("")
    code, _, err = run("estimate", "fe1", "--input", ints_file, *COMMON, "--domain", 1000,
                       "--candidates", tmp_path / "empty.txt")
    assert code == 2 and err.startswith("error: candidates must be at least 1 item"), err


def test_private_items_are_never_printed(tmp_path):
    words = ["apple"] * 3000 + ["pear"] * 2000 + ["SECRET-alice"]
    (tmp_path / "w.txt").write_text("\n".join(words) + "\n")
    # every item of the domain is reported (a small domain: rich prints 2^16 rows in ~15 s)
    code, out, _ = run("estimate", "fe1", "--input", tmp_path / "w.txt", *COMMON, "--domain", 2**12,
                       "--top", 2**12, "--seed", 1, "--json")
    assert code == 0 and "SECRET" not in out
    estimates = json.loads(out)["estimates"]
    assert len(estimates) == 2**12 and all(str(e["item"]).startswith("#") for e in estimates)


def test_usage_errors_are_one_line():
    """Errors of the command-line parser itself (the installed entry point, as a user runs it)."""
    for args in (["estimate", "fe1", "--epsilon", "abc", "--delta", "1e-6"], ["estimate", "fe9"],
                 ["estimate", "fe1", "--delta", "1e-6"],
                 ["estimate", "dpdg", "--epsilon", "1", "--delta", "1e-6", "--calibration", "exact"]):
        result = subprocess.run([sys.executable, "-m", "privagg", *args], capture_output=True, text=True)
        assert result.returncode == 2 and result.stderr.startswith("error: "), result.stderr
        assert result.stderr.count("\n") == 1 and not result.stdout
    for args in ([], ["estimate"]):  # a command without arguments shows its help, not an error
        result = subprocess.run([sys.executable, "-m", "privagg", *args], capture_output=True, text=True)
        assert result.stdout.startswith("Usage: python -m privagg") and not result.stderr, result.stderr


@pytest.mark.parametrize("protocol", IMPLEMENTED)
@pytest.mark.parametrize("users", [1, 2**53 + 1, 2**63, 2**64 + 5])
def test_calibrate_bad_users(protocol, users):
    code, _, err = run("calibrate", protocol, *privacy_args(protocol), "--users", users,
                       "--dimension" if REGISTRY[protocol].result is ResultKind.VECTOR_SUM else "--domain", 100)
    assert code == 2 and err.startswith("error: users must be an integer in [2, 9007199254740992]"), err


def test_analyze_without_a_record_of_the_messages_origin_is_not_private(ints_file, tmp_path):
    _, folder = write_run(ints_file, tmp_path)
    (folder / "items.json").unlink()  # integer items need no key, but nothing says how the messages were made
    code, out, err = run("analyze", "fe1", "--params", folder / "params.json", "--messages", folder,
                         "--candidates", tmp_path / "cands.txt", "--json")
    assert code == 0, err
    privacy = json.loads(out)["privacy"]
    assert privacy["private"] is False and "cannot tell whether the clients used secure randomness" in \
        privacy["not_private_reason"]


def test_missing_messages_add_a_caveat(ints_file, tmp_path):
    _, folder = write_run(ints_file, tmp_path)
    args = ("analyze", "fe1", "--params", folder / "params.json", "--messages", folder,
            "--candidates", tmp_path / "cands.txt")
    code, out, err = run(*args, "--verbose")
    assert code == 0 and "caveat: the analyzer received" not in out, err
    (folder / "part-00002.parquet").unlink()  # a third of the messages: users dropped out, or they were lost
    code, out, err = run(*args)
    assert code == 0 and "1 caveat" in out, err  # the one-line statement points to it
    code, out, err = run(*args, "--verbose")
    assert code == 0, err
    assert "caveat: the analyzer received 24507 messages where the guarantee counts on 36722 from 20000 users" in out
    # items.json records 20000 users: a third of their messages missing leaves as few as 8047 whole reports, below
    # the ceil(G n) = 20000 honest users the guarantee counts on at G = 1
    assert "and messages missing: the 20000 reports carried at least 11953 messages fewer than their users' " \
           "randomizers draw (beyond 5 sd), so as few as 8047 reports may be whole" in " ".join(out.split())


def test_tampered_parameters_are_refused(ints_file, tmp_path):
    _, folder = write_run(ints_file, tmp_path)
    params = json.loads((folder / "params.json").read_text())
    for change in ({"epsilon": 0.05}, {"mu": 0.0, "rho": 0.0}):  # claims more privacy than the noise buys
        (tmp_path / "tampered.json").write_text(json.dumps({**params, **change}))
        code, _, err = run("analyze", "fe1", "--params", tmp_path / "tampered.json", "--messages", folder,
                           "--candidates", tmp_path / "cands.txt")
        assert code == 2 and err.startswith("error: mu must be large enough"), err


def test_unreachable_scheduler_is_one_line(ints_file, tmp_path, monkeypatch):
    from privagg import engine

    _, folder = write_run(ints_file, tmp_path)
    monkeypatch.setattr(engine, "SCHEDULER_TIMEOUT", "1s")
    code, _, err = run("analyze", "fe1", "--params", folder / "params.json", "--messages", folder,
                       "--candidates", tmp_path / "cands.txt", "--engine", "dask", "--scheduler", "tcp://127.0.0.1:9")
    assert code == 2 and err.startswith("error: scheduler must be the address of a reachable Dask scheduler"), err


SAMPLING_BAD = [
    (["dpds"], "min-count-fraction must be given"),
    (["dpds", "--min-count-fraction", 0.2], "min-count-fraction must be in (0, 1/N]"),  # given: out of range
    # the bundled data's smallest category holds 4.7%: the error says the condition fails, not which or how many
    (["dpds", "--min-count-fraction", 0.05, "--mode", "fast"],
     "some category is held by fewer than beta n = 100 of the 2000 users"),
    (["dpds", "--min-count-fraction", 0.04], "mode must be fast for this size: a faithful run of 2,000 users"),
    (["dpds", "--min-count-fraction", 0.04, "--sampling-probability", 1.5], "sampling-probability must be in (0, 1]"),
    (["dpds", "--min-count-fraction", 0.04, "--sampling-probability", 0.99], "sampling-probability must be met"),
    (["tss", "--min-count-fraction", 0.04, "--report-fraction", 0], "report-fraction must be in (0, 1]"),
    (["tss", "--min-count-fraction", 0.04, "--report-fraction", 0.25], "report-fraction must be a multiple of 1/N"),
    (["tss", "--min-count-fraction", 0.04, "--report-fraction", 0.5, "--second-stage", "adaptive", "--gamma", 0.5],
     "gamma must be >= 1"),
    (["tss-collusion", "--min-count-fraction", 0.04, "--report-fraction", 0.5, "--colluders", 5000],
     "colluders must be an integer in [1, 1999]"),
]


@pytest.mark.parametrize("args,message", SAMPLING_BAD)
def test_sampling_family_bad_input_is_one_line(args, message):
    code, out, err = run("estimate", *args, *COMMON, "--seed", 1)
    assert code == 2 and err.count("\n") == 1 and "Traceback" not in err and message in err, err


def test_categories_outside_the_list_and_integers_without_a_domain(tmp_path):
    (tmp_path / "answers.txt").write_text("yes\nno\n")
    (tmp_path / "data.txt").write_text("yes\nno\nyes\nperhaps\n")
    code, _, err = run("estimate", "dpdg", "--input", tmp_path / "data.txt", "--candidates", tmp_path / "answers.txt",
                       *COMMON)
    assert code == 2 and "item must be one of the 2 categories" in err and "'perhaps'" in err
    (tmp_path / "ints.txt").write_text("0\n1\n1\n0\n")
    code, _, err = run("estimate", "dpdg", "--input", tmp_path / "ints.txt", *COMMON)
    assert code == 2 and err.startswith("error: candidates must be given for text items"), err
    code, out, err = run("estimate", "dpdg", "--input", tmp_path / "ints.txt", "--domain", 2, *COMMON, "--json")
    assert code == 0, err
    assert json.loads(out)["parameters"]["domain_size"] == 2 and "item_key" not in json.loads(out)["parameters"]


def test_vector_sums_from_npy_and_csv(tmp_path):
    from privagg.reports import VectorEstimateReport

    vectors = np.random.default_rng(5).random((3000, 4))
    np.save(tmp_path / "v.npy", vectors)
    (tmp_path / "v.csv").write_text("a,b,c,d\n" + "".join(",".join(f"{x:.6f}" for x in row) + "\n" for row in vectors))
    for name in ("v.npy", "v.csv"):
        code, out, err = run("estimate", "blanket-vector", "--input", tmp_path / name, *COMMON, "--seed", 2, "--json")
        assert code == 0, err
        report = json.loads(out)
        jsonschema.Draft202012Validator(json_schema(VectorEstimateReport)).validate(report)
        assert report["privacy"]["private"] is False and len(report["estimates"]) == 4 and len(report["mean"]) == 4
        assert all(abs(e["estimate"] - e["true_sum"]) <= 5 * e["stderr"] for e in report["estimates"])
    bad = vectors.copy()
    bad[7, 2] = 1.5
    np.save(tmp_path / "bad.npy", bad)
    code, _, err = run("estimate", "blanket-vector", "--input", tmp_path / "bad.npy", *COMMON)
    assert code == 2 and f"1.5 in coordinate 2 on row 8 of {tmp_path / 'bad.npy'}" in err and err.count("\n") == 1
    code, out, err = run("estimate", "blanket-vector", "--input", tmp_path / "bad.npy", *COMMON, "--clip", "--json")
    assert code == 0 and "values outside [0, 1] are clipped to it (--clip" in err  # a release: no count
    code, out, err = run("estimate", "blanket-vector", "--input", tmp_path / "bad.npy", *COMMON, "--clip", "--json",
                         "--evaluate")
    assert code == 0 and "1 values outside [0, 1] were clipped" in err and json.loads(out)["private"] is False


def test_vector_sums_on_the_bundled_digits():
    code, out, err = run("estimate", "blanket-vector", *COMMON, "--seed", 1, "--json")
    assert code == 0, err
    report = json.loads(out)
    assert report["n_users"] == 1797 and len(report["estimates"]) == 64 and "digits" in report["input"]
    assert report["estimates"][0]["true_sum"] == 0.0  # a border pixel: never inked


def test_sparse_vector_sums_bundled_and_from_a_table(tmp_path):
    from privagg.reports import VectorEstimateReport

    code, out, err = run("estimate", "sparse-vector", *COMMON, "--seed", 1, "--json")
    assert code == 0, err
    report = json.loads(out)
    assert len(report["estimates"]) == 1000 and report["estimates"][0]["name"] == "the"
    squared = sum((e["estimate"] - e["true_sum"]) ** 2 for e in report["estimates"])
    assert report["error"]["squared_error"] == pytest.approx(squared)
    rng = np.random.default_rng(4)
    pairs = np.column_stack([rng.integers(0, 50, 4000), rng.random(4000)])
    (tmp_path / "p.csv").write_text("coordinate,weight\n" + "".join(f"{int(i)},{w:.6f}\n" for i, w in pairs))
    code, _, err = run("estimate", "sparse-vector", "--input", tmp_path / "p.csv", *COMMON)
    assert code == 2 and err.startswith("error: dimension must be given with --input"), err
    code, out, err = run("estimate", "sparse-vector", "--input", tmp_path / "p.csv", "--dimension", 50, "--levels", 2,
                         *COMMON, "--seed", 3, "--json")
    assert code == 0, err
    report = json.loads(out)
    jsonschema.Draft202012Validator(json_schema(VectorEstimateReport)).validate(report)
    assert report["parameters"]["domain_size"] == 101 and len(report["estimates"]) == 50
    assert sum(abs(e["estimate"] - e["true_sum"]) > 4.5 * e["stderr"] for e in report["estimates"]) == 0
    (tmp_path / "bad.csv").write_text("coordinate,weight\n1,0.5\n60,0.5\n")
    code, _, err = run("estimate", "sparse-vector", "--input", tmp_path / "bad.csv", "--dimension", 50, *COMMON)
    assert code == 2 and "coordinate must be an integer in [0, 50)" in err and "60.0 on line 3 of" in err


def test_hashed_sparse_vector_sums_on_candidates(tmp_path):
    rng = np.random.default_rng(6)
    heavy = np.array([3, 2**35 + 1, 2**39 - 5])
    index = np.where(rng.random(20_000) < 0.6, heavy[rng.integers(0, 3, 20_000)], rng.integers(0, 2**40, 20_000))
    np.save(tmp_path / "p.npy", np.column_stack([index, rng.random(20_000)]))
    (tmp_path / "c.txt").write_text("".join(f"{c}\n" for c in [*heavy, 12345]))
    code, out, err = run("estimate", "sparse-vector-hashed", "--input", tmp_path / "p.npy", "--dimension", 2**40,
                         "--candidates", tmp_path / "c.txt", *COMMON, "--seed", 2, "--json")
    assert code == 0, err
    report = json.loads(out)
    assert [e["item"] for e in report["estimates"]] == sorted([*heavy.tolist(), 12345])
    assert all(abs(e["estimate"] - e["true_sum"]) <= 4.5 * e["stderr"] for e in report["estimates"])
    # every coordinate left out is estimated as 0: the squared error counts their true sums
    assert report["error"]["squared_error"] > sum((e["estimate"] - e["true_sum"]) ** 2 for e in report["estimates"])


def test_vector_sums_audit_exactly_and_refuse_the_statistical_auditor():
    code, out, err = run("audit", "sparse-vector", "--users", 3, "--dimension", 1, "--levels", 2, "--epsilon", 1,
                         "--delta", 0.1)
    assert code == 0 and "verdict: holds" in out, err
    code, out, err = run("audit", "sparse-vector", "--users", 3, "--dimension", 1, "--levels", 2, "--epsilon", 1,
                         "--delta", 0.1, "--noise-scale", 0.3)
    assert code == 1 and "VIOLATED" in out
    code, _, err = run("audit", "blanket-vector", "--users", 3, "--dimension", 1, "--epsilon", 1, "--delta", 0.1,
                       "--method", "statistical")
    assert code == 2 and "method must be exact for blanket-vector" in err


@pytest.mark.parametrize("protocol,extra", [("blanket-vector", []), ("sparse-vector", ["--levels", 2])])
def test_vector_messages_written_then_analyzed(protocol, extra, tmp_path):
    from privagg.reports import VectorAnalysisReport

    folder = tmp_path / "messages"
    code, out, err = run("estimate", protocol, *COMMON, *extra, "--seed", 4, "--write-messages", folder,
                         "--partitions", 3, "--json")
    assert code == 0, err
    estimated = json.loads(out)
    code, out, err = run("analyze", protocol, "--params", folder / "params.json", "--messages", folder, "--json")
    assert code == 0, err
    analyzed = json.loads(out)
    jsonschema.Draft202012Validator(json_schema(VectorAnalysisReport)).validate(analyzed)
    # the same messages give the same sums; the analyzer knows the run was seeded
    assert [e["estimate"] for e in analyzed["estimates"]] == [e["estimate"] for e in estimated["estimates"]]
    assert analyzed["privacy"]["private"] is False and analyzed["messages"]["total"] == estimated["messages"]["total"]


def test_the_fast_path_writes_no_vector_messages(tmp_path):
    code, _, err = run("estimate", "sparse-vector", *COMMON, "--mode", "fast", "--write-messages", tmp_path / "x")
    assert code == 2 and "write-messages must be left out with --mode fast" in err


def test_compare_prints_the_table_writes_the_plots_and_follows_its_schema(tmp_path):
    from privagg.reports import CompareReport

    out = tmp_path / "cmp"
    code, stdout, err = run("compare", "--protocols", "fe1,olh,laplace,gaussian", "--epsilon", "1,4", "--delta",
                            1e-8, "--trials", 2, "--out", out, "--json")
    assert code == 0, err
    report = json.loads(stdout)
    jsonschema.Draft202012Validator(json_schema(CompareReport)).validate(report)
    assert report["private"] is False and report["n_users"] == 100_000 and report["domain_size"] == 1024
    rows = {(r["protocol"], r["epsilon"]): r for r in report["rows"]}
    assert set(rows) == {(p, e) for p in ("fe1", "olh", "laplace", "gaussian") for e in (1.0, 4.0)}
    for (protocol, _), r in rows.items():
        assert r["delta"] == (0.0 if protocol in ("olh", "laplace") else 1e-8)  # pure protocols run at 0
        assert r["error_p50"] <= r["error_p90"] <= r["error_p99"] <= r["error_max"]
    # more epsilon, less error; the central baseline beats the local one at every epsilon
    for protocol in ("fe1", "olh", "laplace", "gaussian"):
        assert rows[(protocol, 4.0)]["error_p90"] < rows[(protocol, 1.0)]["error_p90"]
    assert rows[("laplace", 1.0)]["error_p90"] < rows[("fe1", 1.0)]["error_p90"] < rows[("olh", 1.0)]["error_p90"]
    assert {p.name for p in out.iterdir()} == {"compare.csv", "error_vs_epsilon.png", "error_vs_messages.png"}
    with open(out / "compare.csv", newline="") as f:
        written = list(csv.DictReader(f))
    assert len(written) == 8 and all(r["run"].startswith("seeded simulation, not private") for r in written)
    assert all(r["warnings"] == " | ".join(rows[(r["protocol"], float(r["epsilon"]))]["warnings"]) for r in written)


def test_compare_prints_the_weak_choices_estimate_would_warn_of_and_writes_them_in_its_csv(tmp_path):
    """compare ran each protocol as estimate does but dropped its warnings, so a row at epsilon 12 or delta >= 1/n
    read as any other (a reviewer's finding); and its CSV's rows did not say they are seeded simulations."""
    code, stdout, err = run("compare", "--protocols", "grr,gaussian", "--epsilon", "1,12", "--delta", 0.01,
                            "--trials", 1, "--domain", 16, "--out", tmp_path)
    assert code == 0, err
    assert "warning (grr at eps 12, gaussian at eps 12): epsilon = 12 exceeds 10" in err  # on stderr, as estimate's
    assert "warning (gaussian at eps 1, gaussian at eps 12): delta = 0.01 is at least 1/n" in err
    with open(tmp_path / "compare.csv", newline="") as f:
        written = {(r["protocol"], r["epsilon"]): r for r in csv.DictReader(f)}
    assert written[("grr", "1.0")]["warnings"] == "" and "exceeds 10" in written[("grr", "12.0")]["warnings"]
    assert "delta = 0.01 is at least 1/n" in written[("gaussian", "1.0")]["warnings"]


def test_compare_needs_delta_for_approximate_protocols_and_records_refusals(tmp_path):
    code, _, err = run("compare", "--protocols", "grr,fe1", "--epsilon", "1")
    assert code == 2 and err.startswith("error: delta must be given for fe1"), err
    code, stdout, err = run("compare", "--protocols", "grr,oue", "--epsilon", "1", "--domain", 2**20, "--trials", 1,
                            "--json")
    assert code == 0, err
    refused = [r for r in json.loads(stdout)["rows"] if r.get("refused")]
    assert [r["protocol"] for r in refused] == ["oue"]  # n (B - 1) q messages: too many to simulate
    code, _, err = run("compare", "--protocols", "blanket-vector", "--epsilon", "1", "--delta", 1e-6)
    assert code == 2 and "frequency protocols" in err
    for protocol, needs in (("dpds", "--min-count-fraction"), ("tss", "--min-count-fraction, --report-fraction")):
        code, _, err = run("compare", "--protocols", f"grr,{protocol}", "--epsilon", "1", "--delta", 1e-6)
        assert code == 2 and f"({protocol} needs {needs}: run privagg estimate {protocol}" in err, err


def test_estimate_fe_hh_discovers_heavy_integers_and_strings(tmp_path):
    rng = np.random.default_rng(4)
    values = rng.integers(0, 2**48, size=300_000, dtype=np.uint64)
    values[:30_000] = 2**48 - 2
    np.save(tmp_path / "ids.npy", values)
    code, out, err = run("estimate", "fe-hh", "--input", tmp_path / "ids.npy", "--domain", 2**48, "--phi", 0.05,
                         *COMMON, "--seed", 1, "--json")
    assert code == 0, err
    report = json.loads(out)
    validate(report, REPORT_TYPES["estimate-hh"])
    assert [h["item"] for h in report["heavy_hitters"]] == [2**48 - 2]
    assert report["evaluation"]["recall"] == 1.0 and report["privacy"]["private"] is False
    words = tmp_path / "words.txt"
    words.write_text("\n".join(["hello"] * 30_000 + [f"w{i}" for i in range(270_000)]) + "\n")
    code, out, err = run("estimate", "fe-hh", "--input", words, "--phi", 0.05, "--max-length", 8, *COMMON, "--seed", 1)
    assert code == 0, err
    assert "hello" in out and "recall 100%" in out


@pytest.mark.parametrize("args,message", [
    (["--domain", 2**48], "error: phi must be given"),
    (["--domain", 2**48, "--phi", 1.5], "error: phi must be in [2^-64, 1)"),
    (["--phi", 0.1, "--max-length", 3], "error: max-length must be left out for integer items"),
    (["--phi", 0.1, "--domain", 2**64 + 1], "error: domain must be an integer in [2, 18446744073709551616]")])
def test_estimate_fe_hh_bad_input_is_one_line(args, message, ints_file):
    code, _, err = run("estimate", "fe-hh", "--input", ints_file, *COMMON, *args)
    assert code == 2 and err.startswith(message), err


def test_sparse_vector_hashed_discovers_its_candidates(tmp_path):
    rng = np.random.default_rng(0)
    n, dimension = 300_000, 2**30
    coordinates = rng.integers(0, dimension, size=n)
    coordinates[:50_000], coordinates[50_000:80_000] = 12_345, 999_999_999
    np.save(tmp_path / "pairs.npy", np.column_stack([coordinates, rng.random(n)]).astype(np.float64))
    code, out, err = run("estimate", "sparse-vector-hashed", "--input", tmp_path / "pairs.npy", "--dimension",
                         dimension, "--epsilon", 1, "--delta", 1e-10, "--discover-phi", 0.02, "--seed", 1, "--json")
    assert code == 0, err
    report = json.loads(out)
    validate(report, REPORT_TYPES["estimate-vector"])
    assert [e["item"] for e in report["estimates"]] == [12_345, 999_999_999]
    for e in report["estimates"]:
        assert abs(e["estimate"] - e["true_sum"]) < 4 * e["stderr"]
    # two stages at (eps/2, delta/2) each: the FE1 stage's parameters, the composed guarantee
    assert report["parameters"]["epsilon"] == 0.5 and report["discovery"]["parameters"]["epsilon"] == 0.5
    assert (report["privacy"]["epsilon"], report["privacy"]["delta"]) == (1.0, 1e-10)
    assert report["privacy_profile"][1]["delta"] <= 1e-10
    assert report["messages"]["total"] > report["discovery"]["messages"]["total"] > 0
    (tmp_path / "candidates.txt").write_text("12345\n")
    code, _, err = run("estimate", "sparse-vector-hashed", "--input", tmp_path / "pairs.npy", "--dimension",
                       dimension, *COMMON, "--discover-phi", 0.02, "--candidates", tmp_path / "candidates.txt")
    assert code == 2 and err.startswith("error: discover-phi must be given for sparse-vector-hashed without"), err


def test_a_discovery_that_finds_nothing_is_an_empty_private_release(tmp_path):
    """No coordinate's sum near phi n: the first stage reports none, and the release is empty, with the composed
    guarantee and a warning that says it is a private outcome, not a fact about the data (it was an error: "none
    did", issue 44)."""
    rng = np.random.default_rng(3)
    np.save(tmp_path / "pairs.npy", np.column_stack([rng.integers(0, 2**20, size=20_000), rng.random(20_000)]))
    code, out, err = run("estimate", "sparse-vector-hashed", "--input", tmp_path / "pairs.npy", "--dimension", 2**20,
                         "--epsilon", 1, "--delta", 1e-9, "--discover-phi", 0.2, "--json")
    assert code == 0, err
    report = json.loads(out)
    validate(report, REPORT_TYPES["estimate-vector"])
    assert report["estimates"] == [] and report["discovery"]["coordinates"] == 0
    assert (report["privacy"]["epsilon"], report["privacy"]["delta"], report["privacy"]["private"]) == (1.0, 1e-9, True)
    assert report["messages"]["total"] > report["discovery"]["messages"]["total"] > 0  # both stages' users reported
    assert any("reported no coordinate" in w and "not a statement that no sum reaches phi n" in w
               for w in report["warnings"])
    code, out, _ = run("estimate", "sparse-vector-hashed", "--input", tmp_path / "pairs.npy", "--dimension", 2**20,
                       "--epsilon", 1, "--delta", 1e-9, "--discover-phi", 0.2)
    assert code == 0 and "no coordinate discovered at phi 0.2, none estimated" in out


def test_evaluation_is_explicit_and_marks_the_report_not_private(ints_file, tmp_path):
    """--evaluate puts the truth beside the release and says the report is not private; without it (an input file,
    secure randomness) nothing data-derived outside the release appears, for frequencies, vectors and heavy
    hitters; the bundled data is evaluated by default."""
    code, out, _ = run("estimate", "fe1", "--input", ints_file, *COMMON, "--domain", 1000, "--evaluate", "--json")
    report = json.loads(out)
    assert code == 0 and report["privacy"]["private"] is False and "error" in report
    assert report["privacy"]["not_private_reason"].startswith("evaluated: the report holds the true counts")
    assert "seed" not in report["privacy"]["not_private_reason"] and "secure" in report["privacy"]["randomness"]
    assert all(isinstance(e["true_count"], int) for e in report["estimates"])
    bundled = ("estimate", "fe1", "--epsilon", 1, "--delta", 1e-8, "--top", 3, "--domain", 2**16)  # the words
    code, out, _ = run(*bundled, "--json")
    assert code == 0 and json.loads(out)["privacy"]["private"] is False and "error" in json.loads(out)
    code, out, _ = run(*bundled, "--no-evaluate", "--json")
    assert code == 0 and json.loads(out)["privacy"]["private"] is True and "error" not in json.loads(out)

    vectors = tmp_path / "v.npy"
    np.save(vectors, np.random.default_rng(1).random((3000, 4)))
    base = ["estimate", "blanket-vector", "--input", vectors, "--epsilon", 1, "--delta", 1e-6, "--json"]
    report = json.loads(run(*base)[1])
    assert report["privacy"]["private"] is True and "error" not in report
    assert all("true_sum" not in e and e["stderr_bound"] >= e["stderr"] for e in report["estimates"])
    report = json.loads(run(*base, "--evaluate")[1])
    assert report["privacy"]["private"] is False and "error" in report and "true_sum" in report["estimates"][0]

    items = tmp_path / "hh.txt"
    items.write_text("\n".join(str(i % 3 if i % 2 else i) for i in range(20000)) + "\n")
    base = ["estimate", "fe-hh", "--input", items, "--domain", 2**15, "--epsilon", 1, "--delta", 1e-8, "--phi",
            0.1, "--json"]
    report = json.loads(run(*base)[1])
    assert report["privacy"]["private"] is True and "evaluation" not in report
    assert report["heavy_hitters"] and all("true_count" not in h for h in report["heavy_hitters"])
    report = json.loads(run(*base, "--evaluate")[1])
    assert report["privacy"]["private"] is False and report["evaluation"]["recall"] == 1.0


def test_missing_values_make_a_report_not_private(tmp_path):
    """--missing drop runs over the users with a value: n is then a count of the data, which the report carries
    un-noised (n_users was 1,800 in a report marked private, while the docs said no such figure appears), so the
    report, the message folder it writes and analyze over it are not private and say why; with nothing missing the
    run stays the private release (docs/privacy.md, "Missing values")."""
    path = tmp_path / "gaps.txt"
    path.write_text("\n".join("" if i % 10 == 0 else str(i % 7) for i in range(2000)) + "\n")
    base = ["estimate", "fe0", "--input", path, "--domain", 7, "--epsilon", 1, "--delta", 1e-6, "--missing", "drop",
            "--json"]
    code, out, err = run(*base, "--write-messages", tmp_path / "msgs", "--partitions", 2)
    report = json.loads(out)
    assert code == 0 and report["n_users"] == 1800 and report["privacy"]["private"] is False
    assert report["privacy"]["not_private_reason"].startswith("users left out: --missing drop left out 200 users")
    assert report["warnings"][0].startswith("200 users with a missing value were left out (--missing drop)")
    assert "not private" in err
    code, out, _ = run("analyze", "fe0", "--params", tmp_path / "msgs" / "params.json", "--messages",
                       tmp_path / "msgs", "--json")
    analysis = json.loads(out)["privacy"]
    assert code == 0 and analysis["private"] is False and analysis["not_private_reason"].startswith("users left out")
    whole = tmp_path / "whole.txt"
    whole.write_text("\n".join(str(i % 7) for i in range(2000)) + "\n")
    report = json.loads(run(*base[:2], "--input", whole, *base[4:])[1])
    assert report["privacy"]["private"] is True and report["n_users"] == 2000 and not report["warnings"]
    rows = tmp_path / "rows.csv"  # vectors and heavy hitters alike
    rows.write_text("p,q\n0.25,0.75\n,0.5\n" + "0.5,0.5\n" * 500)
    vectors = json.loads(run("estimate", "blanket-vector", "--input", rows, "--epsilon", 2, "--delta", 1e-6,
                             "--missing", "drop", "--json")[1])
    assert vectors["privacy"]["private"] is False and vectors["n_users"] == 501
    (tmp_path / "hh.txt").write_text("\n".join("" if i % 50 == 0 else str(i % 3) for i in range(5000)) + "\n")
    heavy = json.loads(run("estimate", "fe-hh", "--input", tmp_path / "hh.txt", "--domain", 2**10, "--phi", 0.2,
                           "--epsilon", 1, "--delta", 1e-6, "--missing", "drop", "--json")[1])
    assert heavy["privacy"]["private"] is False and "users left out" in heavy["privacy"]["not_private_reason"]


BATCHES = """
import resource, sys
import numpy as np
from privagg.cli.options import _keep_freed_heap
if sys.argv[1] == "kept":
    _keep_freed_heap()
def batch():  # a client batch's temporaries: ten arrays of 250,000 doubles, allocated then freed
    arrays = [np.ones(250_000) for _ in range(10)]
    del arrays
batch(); batch()
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(10):
    batch()
print(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
"""


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc" or "LD_PRELOAD" in os.environ,
                    reason="glibc's own malloc and mallopt")
def test_the_protocol_commands_keep_freed_batches_on_their_heap():
    """Ten batches of 20 MB of temporaries fault 10 x 20 MB / 4 KiB = 48,000 pages in with glibc's defaults (it
    gives the freed top of the heap back each time), where transparent huge pages do not cover the heap; once a
    protocol command has set the allocator, the pages are reused."""
    faults = {mode: int(subprocess.run([sys.executable, "-c", BATCHES, mode], capture_output=True, text=True,
                                       check=True).stdout) for mode in ("default", "kept")}
    assert faults["kept"] <= max(1_000, faults["default"] // 10)


def test_the_protocol_commands_set_the_allocator_and_the_others_do_not(monkeypatch):
    import privagg.cli.options as cli

    calls = []
    monkeypatch.setattr(cli, "_keep_freed_heap", lambda: calls.append(1))
    assert runner.invoke(app, ["protocols"]).exit_code == 0
    assert calls == []  # nor do the services' commands, which are not generated from the registry
    result = runner.invoke(app, ["calibrate", "blanket-hist", "--users", "1000", "--domain", "8", "--epsilon", "1",
                                 "--delta", "1e-6"])
    assert result.exit_code == 0, result.output
    assert calls == [1]


@pytest.mark.parametrize("protocol,offered", [("fe1", True), ("olh", True), ("fe-hh", False), ("grr", True),
                                               ("dpds", False), ("blanket-vector", False)])
def test_calibrate_offers_hash_key_only_where_items_are_hashed(protocol, offered):
    """--hash-key is in a calibrate command's help only where its parameters record the item-hash key; elsewhere
    the option is unknown (it was offered by every command, then refused by those with no items to hash)."""
    code, out, _ = run("calibrate", protocol, "--help")
    assert code == 0 and ("--hash-key" in out) is offered, out
    if not offered:
        code, _, err = run("calibrate", protocol, "--hash-key", "00ff", "--users", 1000, "--epsilon", 1)
        assert code == 2 and "No such option: --hash-key" in err, err


@pytest.mark.parametrize("protocol,offered", [("fe1", True), ("olh", True), ("grr", True), ("dpds", False),
                                               ("tss", False)])
def test_estimate_offers_hash_key_only_where_items_are_hashed(protocol, offered):
    """The same for estimate: a categorical protocol's categories are codes by their place in the public list."""
    code, out, _ = run("estimate", protocol, "--help")
    assert code == 0 and ("--hash-key" in out) is offered, out
    if not offered:
        code, _, err = run("estimate", protocol, "--min-count-fraction", 0.04, "--hash-key", "00ff", *COMMON)
        assert code == 2 and "No such option: --hash-key" in err, err
