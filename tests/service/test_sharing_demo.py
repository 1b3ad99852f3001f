"""privagg demo-service dpds|dpdg: real SDK users through the sharing server on loopback, as a newcomer runs it."""

import json
import subprocess
import sys

import pytest


def demo(tmp_path, *args: str) -> dict:
    out = subprocess.run([sys.executable, "-m", "privagg", "demo-service", *args, "--workdir", str(tmp_path), "--json"],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def test_the_demo_releases_over_the_survivors_beside_the_simulation(tmp_path):
    """(dpdg without dropouts: tests/service/test_sharing_service.py)"""
    import jsonschema

    from privagg.reports import REPORT_TYPES, json_schema

    report = demo(tmp_path, "dpds", "--users", "100", "--drop-fraction", "0.1")
    jsonschema.validate(report, json_schema(REPORT_TYPES["demo-sharing"]))
    dropouts = report["service"]["dropouts"]
    assert dropouts["enrolled"] == 100 and dropouts["min_survivors"] <= dropouts["survivors"] < 100
    assert len(report["estimates"]) == 10
    assert sum(row["truth"] for row in report["estimates"]) == dropouts["survivors"]
    assert report["service"]["privacy"]["private"] and not report["simulation"]["private"]
    assert report["service"]["privacy"]["randomness"].startswith("secure")
    assert report["simulation"]["parameters"]["n_users"] == dropouts["survivors"]
    assert report["simulation"]["mode"] == "faithful"  # the same parties, in-process
    b = report["bytes"]
    assert b["sealed_sent"] == b["sealed_expected"] > 0
    user, server = report["parties"]  # every kind of message, exactly the count given who answered which round
    assert (user["party"], server["party"]) == ("user", "server")
    assert 0 < user["parties"] < dropouts["survivors"]  # some survivors vanished in rounds 4-5, after their sums
    for row in (user, server):
        assert row["sent"] == row["expected_sent"] and row["received"] == row["expected_received"]
    assert user["sent"]["backup"] == 2 * 99 and user["sent"]["masked sum"] == 10 and user["sent"]["pair key"] == 1
    assert user["sent"]["commitments"] == 100 and user["sent"]["signature"] == 1
    assert user["sent"]["revealed shares"] == dropouts["round1_senders"] and dropouts["excluded"] == []
    assert "2nN + N = 2,010" in user["table_i"]
    assert set(report["round_seconds"]) == {"enroll", "round1", "round2", "round3", "round4", "round5"}
    assert report["z_rms"] is not None and report["z_rms"] < 5
    # the document holds the truth and z-scores: not private, whatever the release beside them is
    assert report["private"] is False and report["service"]["private"] is True
    # no count reads as certain: a category nobody sampled has the sd of one held by 1 / p' users, or by all n'
    # where that is fewer (here p' = 0.001: a count is 0 or 1 / p' = 1000) (issue 44)
    p, n = report["service"]["parameters"]["effective_probability"], dropouts["survivors"]
    at_zero = min((1 - p) ** 0.5 / p, (n * (1 - p) / p) ** 0.5)
    for row in report["estimates"]:
        assert row["service_stderr"] > 0 and row["simulation_stderr"] > 0
        assert row["service_stderr"] == pytest.approx(at_zero) or row["service"] > 0
    # 2 holders a category (beta = 0.012 of the 100), so any dropout may leave a user alone in his: delta = p'
    assert report["service"]["privacy"]["delta"] == pytest.approx(p, rel=1e-12)
    assert "dropped out" in report["service"]["privacy"]["assumptions"][0]


def test_the_demo_refuses_impossible_settings(tmp_path):
    out = subprocess.run([sys.executable, "-m", "privagg", "demo-service", "dpds", "--users", "60", "--drop-fraction",
                          "0.7", "--workdir", str(tmp_path)], capture_output=True, text=True, timeout=60)
    assert out.returncode == 2 and "drop-fraction must be in [0, 0.5)" in out.stderr


@pytest.mark.slow
def test_tss_through_s1_and_s2_with_dropouts(tmp_path):
    """TSS' (phi = 2): S1 and S2 as processes, 10% of the users vanishing at round 1 or 2; S2's release over R2
    beside the simulation over the same survivors, in the published schema."""
    import jsonschema

    from privagg.reports import REPORT_TYPES, json_schema

    report = demo(tmp_path, "tss-collusion", "--users", "100", "--drop-fraction", "0.1")
    jsonschema.validate(report, json_schema(REPORT_TYPES["demo-sharing"]))
    dropouts = report["service"]["dropouts"]
    assert dropouts["min_survivors"] <= dropouts["survivors"] < 100
    assert sum(row["truth"] for row in report["estimates"]) == dropouts["survivors"]
    assert report["service"]["privacy"]["model"] == "two_servers" and report["service"]["privacy"]["private"]
    assert "collude" in " ".join(report["service"]["privacy"]["assumptions"] + report["service"]["privacy"]["caveats"])
    assert {"round1", "round2", "round3", "handover"} <= set(report["round_seconds"])
    reporter, helper, s1, s2 = report["parties"]
    assert [r["party"] for r in report["parties"]] == ["user as reporter", "user as helper", "S1", "S2"]
    assert reporter["sent"]["report set"] == reporter["expected_sent"]["report set"] == 5  # alpha N, exactly
    # the users' counters of what they sealed to S2 against S2's own count of the entries it opened and used
    assert sum(s2["received"].values()) == report["service"]["messages"]["total"] > 0
    assert helper["sent"]["helper sums"] * helper["parties"] == pytest.approx(s2["received"]["helper sums"])


def test_the_demo_refuses_user_counts_that_would_run_for_hours(tmp_path):
    out = subprocess.run([sys.executable, "-m", "privagg", "demo-service", "dpds", "--users", "5000", "--workdir",
                          str(tmp_path)], capture_output=True, text=True, timeout=60)
    assert out.returncode == 2 and "users must be an integer in [20, 1000]" in out.stderr
