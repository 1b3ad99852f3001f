"""DPDS/DPDG on a neighbour graph (protocols/sharing_graph.py): the costs from the messages' sizes, equal to the
protocol's own count on the complete graph; the colluders counted as the task's honest fraction counts them; and
``privagg calibrate dpds|dpdg --colluding --dropouts --failure``'s output and errors."""

from __future__ import annotations

import json

import jsonschema
import pytest
from typer.testing import CliRunner

from privagg.cli import app
from privagg.errors import ParameterError
from privagg.privacy import neighbour_graph
from privagg.protocols import sharing_graph
from privagg.protocols.registry import calibrate
from privagg.protocols.sharing_messages import COMMITMENTS, REVEAL, expected_traffic, message_bytes
from privagg.reports import CalibrationReport, json_schema

runner = CliRunner()


def _dpds(n=1000, **given):
    return calibrate("dpds", epsilon=1.0, delta=1e-6, n_users=n, domain_size=10, min_count_fraction=0.09, **given)


@pytest.mark.parametrize("protocol", ["dpds", "dpdg"])
def test_the_complete_graphs_traffic_is_the_protocols_own(protocol):
    """k = n - 1: every entry as expected_traffic counts a survivor's, and the commitments and reveal as the
    complete graph's messages (n pairs, n entries)."""
    p = _dpds() if protocol == "dpds" else calibrate("dpdg", epsilon=1.0, delta=1e-6, n_users=300, domain_size=7)
    n = p.n_users
    flows = sharing_graph.traffic(p, n - 1)
    sent, received = expected_traffic(p, n)
    assert {kind: counts["entries"] for kind, counts in flows["sent"].items()} == sent
    assert {kind: counts["entries"] for kind, counts in flows["received"].items()} == received
    assert flows["sent"]["commitments"]["bytes"] == message_bytes(p, COMMITMENTS)
    assert flows["sent"]["revealed shares"]["bytes"] == message_bytes(p, REVEAL, n)


def test_the_costs_grow_with_the_degree_not_with_n():
    """The same per user at n = 1,000 and 10,000 but U1' and U2's bitmaps (4 of n / 8 bytes)."""
    small, large = _dpds(1000), _dpds(10000)
    for k in (10, 100):
        bitmaps = {**sharing_graph.costs(small, k)["user"]}
        bitmaps["bytes_received"] += 4 * (10000 - 1000) // 8
        assert bitmaps == sharing_graph.costs(large, k)["user"]
        assert sharing_graph.costs(small, k)["user"]["messages_sent"] == k + 5  # k backups and 5 messages
        assert sharing_graph.costs(large, k)["server"]["rows"] == 10 * sharing_graph.costs(small, k)["server"]["rows"]
    assert sharing_graph.costs(small, 999)["user"]["messages_sent"] == 1004


def test_the_colluders_are_the_honest_fractions_complement():
    assert sharing_graph.counted(_dpds(honest_fraction=0.95), None, 0.05) == (50, 50)
    assert sharing_graph.counted(_dpds(honest_fraction=0.95), 0.05, None) == (50, 0)
    assert sharing_graph.counted(_dpds(999, honest_fraction=0.95), 0.05, 0.05) == (49, 49)
    with pytest.raises(ParameterError, match="colluding"):
        sharing_graph.counted(_dpds(honest_fraction=0.95), 0.02, 0.05)


def test_the_choice_is_the_least_degree_and_the_complete_graph():
    chosen, complete = sharing_graph.choose(_dpds(honest_fraction=0.95), 0.05, 0.05, 1e-9)
    assert chosen == neighbour_graph.least_degree(1000, 50, 50, 1e-9)
    assert complete.complete and complete.threshold == (1000 + 50) // 2 + 1 and complete.failure == 0


@pytest.mark.parametrize("given, field", [
    (dict(colluding=1.0), "colluding"), (dict(colluding=-0.1), "colluding"), (dict(dropouts=1.5), "dropouts"),
    (dict(failure=0.0), "failure"), (dict(failure=1.0), "failure"), (dict(dropouts=0.5), "dropouts"),
])
def test_bad_options_are_refused_naming_the_field(given, field):
    with pytest.raises(ParameterError) as err:
        sharing_graph.choose(_dpds(), **given)
    assert err.value.field == field


BASE = ["calibrate", "dpds", "--users", "1000", "--domain", "10", "--epsilon", "1", "--delta", "1e-6",
        "--min-count-fraction", "0.1"]


def test_the_cli_prints_the_degree_the_terms_and_the_costs_against_the_complete_graph():
    result = runner.invoke(app, [*BASE, "--colluding", "0.05", "--dropouts", "0.05", "--failure", "1e-9"])
    assert result.exit_code == 0, result.output
    chosen = neighbour_graph.least_degree(1000, 50, 50, 1e-9)
    rows = {line.split("│")[1].strip(): [c.strip() for c in line.split("│")[2:4]]
            for line in result.stdout.splitlines() if line.count("│") == 4}
    assert rows["degree k"] == [str(chosen.degree), "999"]
    assert rows["threshold t_k"] == [str(chosen.threshold), "526"]
    assert rows["failure (sum)"] == [f"{chosen.failure:.3g}", "0"]
    assert rows["user messages sent"] == [f"{chosen.degree + 5:,}", "1,004"]
    assert "NOT YET RUN" not in result.stdout and "Bell et al." in result.stdout  # the parties run it (issue 47)
    # the parameters are the complete graph's unless --degree says otherwise: the command says how to get the graph's
    assert f"calibrated on the complete graph (--degree); for this graph's: --degree {chosen.degree}" in result.stdout
    on_it = runner.invoke(app, [*BASE, "--colluding", "0.05", "--dropouts", "0.05", "--failure", "1e-9", "--degree",
                                str(chosen.degree)])
    assert on_it.exit_code == 0 and "for this graph's" not in on_it.stdout, on_it.output


def test_planned_dropouts_say_what_the_release_over_the_survivors_holds_and_need_a_degree_to_plan_a_threshold():
    """A reviewer's findings: calibrate --dropouts printed the target delta for a run it was told would lose 1% of its
    users (the release over the survivors holds more, as task create and the release state); --graph-dropouts on the
    complete graph was taken and changed nothing. Now a warning names the survivors' delta, and --graph-dropouts
    without --degree is refused, naming it (in Python too)."""
    from privagg.service.round_tasks import release_delta

    result = runner.invoke(app, [*BASE, "--dropouts", "0.05"])
    held = release_delta(calibrate("dpds", epsilon=1.0, delta=1e-6, n_users=1000, domain_size=10,
                                   min_count_fraction=0.1), 950)
    assert result.exit_code == 0 and held > 1e-6
    assert (f"a release over the 950 survivors holds delta {held:.3g} at eps = 1, not 1e-06"
            in " ".join(result.output.split()))
    refused = runner.invoke(app, [*BASE, "--graph-dropouts", "0.1"])
    assert refused.exit_code == 2 and refused.output.startswith("error: graph-dropouts must be left out without "
                                                                "--degree"), refused.output
    for name, options in (("dpds", dict(min_count_fraction=0.1)), ("dpdg", {})):
        with pytest.raises(ParameterError, match="graph-dropouts must be left out without --degree"):
            calibrate(name, epsilon=1.0, delta=1e-6, n_users=1000, domain_size=10, graph_dropouts=0.1, **options)


def test_the_json_carries_the_same_and_keeps_the_schema():
    result = runner.invoke(app, [*BASE, "--colluding", "0.05", "--dropouts", "0.05", "--json"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    jsonschema.Draft202012Validator(json_schema(CalibrationReport)).validate(report)
    graph = report["neighbour_graph"]
    chosen = neighbour_graph.least_degree(1000, 50, 50, sharing_graph.DEFAULT_FAILURE)
    assert graph["graph"]["degree"] == chosen.degree and graph["graph"]["failure"] == chosen.failure
    assert graph["complete_graph"]["degree"] == 999
    assert graph["graph"]["costs"] == sharing_graph.costs(_dpds(honest_fraction=0.95), chosen.degree)
    assert report["parameters"]["honest_fraction"] == 0.95  # --colluding set it
    plain = json.loads(runner.invoke(app, [*BASE, "--json"]).stdout)
    assert "neighbour_graph" not in plain


@pytest.mark.parametrize("extra, field", [
    (["--colluding", "1.2"], "colluding"), (["--colluding", "1"], "colluding"), (["--dropouts", "-0.1"], "dropouts"),
    (["--failure", "0"], "failure"), (["--failure", "1"], "failure"), (["--failure", "1e-300"], "failure"),
    (["--colluding", "0.02", "--honest-fraction", "0.95"], "colluding"),
    (["--colluding", "0.3"], "colluding"),  # more than beta n users the accountant could not count on
    (["--colluding", "0.05", "--dropouts", "0.45"], "dropouts"),  # no threshold, even on the complete graph
])
def test_bad_input_is_one_line_naming_the_field(extra, field):
    result = runner.invoke(app, [*BASE, *extra])
    assert result.exit_code == 2
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith(f"error: {field} "), result.output


def test_only_dpds_and_dpdg_take_the_graph_options():
    result = runner.invoke(app, ["calibrate", "tss", "--users", "100", "--domain", "10", "--epsilon", "1", "--delta",
                                 "1e-6", "--min-count-fraction", "0.1", "--colluding", "0.1"])
    assert result.exit_code == 2 and "--colluding" in result.output
