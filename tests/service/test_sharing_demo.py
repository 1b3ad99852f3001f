"""privagg demo-service dpds|dpdg: real SDK users through the sharing server on loopback, as a newcomer runs it."""

import argparse
import json
import re
import signal
import subprocess
import sys

import pyarrow as pa
import pytest
from typer.testing import CliRunner

from privagg.cli.demo import _detected
from privagg.datasets import english_vocabulary


def demo(tmp_path, *args: str) -> dict:
    out = subprocess.run([sys.executable, "-m", "privagg", "demo-service", *args, "--workdir", str(tmp_path), "--json"],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


FEW = 20  # the fewest users the demo takes over few_users_categories (2 a category)


def few_users_categories(n_users: int, categories: int) -> tuple[pa.ChunkedArray, list[str]]:
    """privagg.datasets.english_categories with the n users spread evenly over the categories (at least 2 a category
    at FEW): the bundled words give each category enough holders only from 90 users (DEMO_USERS_MIN), and the
    demo refuses data that breaks DPDS's condition."""
    names = english_vocabulary(categories).to_pylist()
    return pa.chunked_array([pa.array([names[i % categories] for i in range(n_users)])]), names


@pytest.fixture
def cli_in_process(monkeypatch):
    """The command line in this process; the SIGTERM handler and unraisable hook demo-service sets put back after the
    test."""
    monkeypatch.setattr(sys, "unraisablehook", sys.unraisablehook)
    handler = signal.getsignal(signal.SIGTERM)
    yield CliRunner()
    signal.signal(signal.SIGTERM, handler)


def demo_in_process(cli: CliRunner, monkeypatch, tmp_path, protocol: str, users: int, *args: str) -> tuple[dict, str]:
    """``demo-service protocol --users users args`` through the command line in this process, over
    :func:`few_users_categories`: the --json document, and the text's output of the same run (the demo runs once,
    both printed from its summary)."""
    import privagg.datasets
    import privagg.demos
    from privagg.cli import app

    monkeypatch.setattr(privagg.datasets, "english_categories", few_users_categories)
    monkeypatch.setattr(privagg.demos, "DEMO_USERS_MIN", FEW)  # what that data serves
    real, runs = privagg.demos.run_sharing_demo, []

    def once(*args, **kwargs):
        if not runs:
            runs.append(real(*args, **kwargs))
        return runs[0]

    monkeypatch.setattr(privagg.demos, "run_sharing_demo", once)
    outputs = [cli.invoke(app, ["demo-service", protocol, "--users", str(users), *args, "--workdir", str(tmp_path),
                                *as_json]) for as_json in (["--json"], [])]
    for result in outputs:
        assert result.exit_code == 0, result.output
    return json.loads(outputs[0].stdout), outputs[1].stdout


def check_honest_demo(report: dict, said: str) -> None:
    """DPDS through the services with some users dropping out in each of rounds 1-5, beside the simulation (dpdg
    without dropouts: tests/service/test_sharing_service.py)."""
    import jsonschema

    from privagg.reports import REPORT_TYPES, json_schema

    jsonschema.validate(report, json_schema(REPORT_TYPES["demo-sharing"]))
    users, dropouts = report["users"], report["service"]["dropouts"]
    assert dropouts["enrolled"] == users and dropouts["min_survivors"] <= dropouts["survivors"] < users
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
    assert user["sent"]["backup"] == 2 * (users - 1) and user["sent"]["masked sum"] == 10
    assert user["sent"]["commitments"] == users and user["sent"]["signature"] == user["sent"]["pair key"] == 1
    assert user["sent"]["revealed shares"] == dropouts["round1_senders"] and dropouts["excluded"] == []
    assert f"2nN + N = {2 * users * 10 + 10:,}" in user["table_i"]
    assert set(report["round_seconds"]) == {"enroll", "round1", "round2", "round3", "round4", "round5"}
    assert report["z_rms"] is not None
    check_released_counts(report)
    # the document holds the truth and z-scores: not private, whatever the release beside them is
    assert report["private"] is False and report["service"]["private"] is True
    # no count reads as certain: a category nobody sampled has the sd of one held by 1 / p' users, or by all n'
    # where that is fewer (at 100 users p' = 0.001: a count is 0 or 1 / p' = 1000) (issue 44)
    p, n = report["service"]["parameters"]["effective_probability"], dropouts["survivors"]
    at_zero = min((1 - p) ** 0.5 / p, (n * (1 - p) / p) ** 0.5)
    for row in report["estimates"]:
        assert row["service_stderr"] > 0 and row["simulation_stderr"] > 0
        assert row["service_stderr"] == pytest.approx(at_zero) or row["service"] > 0
    # 2 holders in some category (beta = 0.012 of the 100 users; 0.05 of 24 spread evenly), so any dropout may leave
    # a user alone in his: delta = p'
    assert report["service"]["privacy"]["delta"] == pytest.approx(p, rel=1e-12)
    assert "dropped out" in report["service"]["privacy"]["assumptions"][0]
    # an honest run: nothing to blame (issue 46), said so in --json and in the text
    assert report["detected"] == {"complaints": [], "excluded": [], "blamed": [], "inconsistent": []}
    assert report["dishonest"] is None
    assert said == "detected: none"


DROPPING = 24  # at --drop-fraction 0.25, 6 users vanish: one in each of rounds 1-5 (and one more in round 1)


def test_the_demo_releases_over_the_survivors_beside_the_simulation(cli_in_process, monkeypatch, tmp_path):
    """(at DROPPING users, in this process: its json and text printed from one run; the bundled data at 100 users,
    as a newcomer runs it: the slow test below)"""
    report, text = demo_in_process(cli_in_process, monkeypatch, tmp_path, "dpds", DROPPING, "--drop-fraction", "0.25")
    assert report["users"] == DROPPING
    check_honest_demo(report, next(line for line in text.splitlines() if line.startswith("detected: ")))


@pytest.mark.slow
def test_the_demo_releases_over_the_survivors_of_its_own_data(tmp_path):
    """The test above as a newcomer runs it: a process, the bundled words over 100 users."""
    report = demo(tmp_path, "dpds", "--users", "100", "--drop-fraction", "0.1")
    check_honest_demo(report, "detected: " + _detected(report["detected"]))


def dishonest_demo(tmp_path, protocol: str, kind: str, text: bool) -> tuple[dict, str | None]:
    """``--dishonest kind`` over the demo's 100 users, no dropouts: the --json document, and (``text``: a second run,
    its own liar) the text's line of what was detected."""
    report = demo(tmp_path / "json", protocol, "--users", "100", "--dishonest", kind)
    if not text:
        return report, None
    out = subprocess.run([sys.executable, "-m", "privagg", "demo-service", protocol, "--users", "100", "--dishonest",
                          kind, "--workdir", str(tmp_path / "text")], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    return report, next(line for line in out.stdout.splitlines() if line.startswith("detected: "))


KINDS = [("dpds", "junk-backups"), ("dpdg", "wrong-share"), ("dpds", "inconsistent-shares")]


def check_released_counts(report: dict) -> None:
    """The service's release beside the truth. DPDS's: each category's estimate is tau_j / p', tau_j a whole number
    of its survivors' holders who sampled themselves, 0 <= tau_j <= the truth (exact, where a bound on the z-scores
    was not: at the demo's fewest users p' is about 0.001, and in the one run in about 50 where a survivor samples
    himself his category's z is about 22, the sd at a true count of 2 being 45 and his estimate 1,000: z RMS 7.1,
    which failed a bound of 5). DPDG's: its discrete Gaussian noise makes the 10 z-scores about standard normal, z
    RMS >= 5 a chi-square(10) tail of 250, about 1e-47."""
    if report["protocol"] == "dpdg":
        assert report["z_rms"] < 5
        return
    p = report["service"]["parameters"]["effective_probability"]
    for row in report["estimates"]:
        tau = row["service"] * p
        assert abs(tau - round(tau)) < 1e-6 and 0 <= round(tau) <= row["truth"], (row, p)


def check_dishonest_demo(report: dict, said: str, kind: str) -> None:
    """Issue 46, live: junk backups get their dealer excluded on all the others' complaints (the release over the
    others, his value out of the truth), wrong revealed shares are discarded and their revealer blamed (the release
    over all), inconsistent shares get their dealer proven and excluded in round 6 (the release over the others,
    its guarantee recomputed for them); the text's line of what was detected says so."""
    import jsonschema

    from privagg.reports import REPORT_TYPES, json_schema

    jsonschema.validate(report, json_schema(REPORT_TYPES["demo-sharing"]))
    n = report["users"]
    liar, detected, dropouts = report["dishonest"]["user"], report["detected"], report["service"]["dropouts"]
    assert report["dishonest"]["kind"] == kind and set(detected) == {"complaints", "excluded", "blamed", "inconsistent"}
    if kind == "junk-backups":
        assert detected["excluded"] == [liar] and detected["blamed"] == []
        assert detected["complaints"] == [[k, liar] for k in range(n) if k != liar]
        assert dropouts["survivors"] == n - 1 == sum(row["truth"] for row in report["estimates"])
        assert re.fullmatch(rf"detected: {n - 1} complaints naming users \[(\d+)\]; excluded dealers \[\1\]", said)
    elif kind == "inconsistent-shares":
        assert detected["inconsistent"] == [liar] and detected["excluded"] == detected["blamed"] == []
        assert dropouts["survivors"] == n - 1 == sum(row["truth"] for row in report["estimates"])
        assert report["service"]["parameters"]["n_users"] == n - 1 and set(report["round_seconds"]) >= {"round6"}
        assert re.fullmatch(r"detected: dealers proven inconsistent \[\d+\], excluded in round 6 \(the survivors' "
                            r"pair seeds with them removed their terms\)", said)
    else:
        assert detected["blamed"] == [[liar, *range(n)]] and detected["excluded"] == detected["complaints"] == []
        assert dropouts["survivors"] == n == sum(row["truth"] for row in report["estimates"])
        assert re.fullmatch(rf"detected: blamed revealers {liar} \({n} shares discarded\)", said)
    check_released_counts(report)  # the release over the others beside the truth over them


@pytest.mark.parametrize("protocol, kind", KINDS)
def test_a_dishonest_user_is_detected_and_the_release_proceeds_over_the_others(cli_in_process, monkeypatch, tmp_path,
                                                                                protocol, kind):
    """(at the demo's fewest users, in this process: its json and text printed from one run; the bundled data at 100
    users, as a newcomer runs it: the slow test below)"""
    report, text = demo_in_process(cli_in_process, monkeypatch, tmp_path, protocol, FEW, "--dishonest", kind)
    assert report["users"] == FEW
    said = next(line for line in text.splitlines() if line.startswith("detected: "))
    check_dishonest_demo(report, said, kind)
    assert f"dishonest: user {report['dishonest']['user']} ({kind}) {report['dishonest']['did']}" in text


def test_an_inconsistent_dealer_is_proven_beside_dropouts(cli_in_process, monkeypatch, tmp_path):
    """A reviewer's finding: with --drop-fraction the demo mostly failed (survivors who left at rounds 4-5 were silent
    in round 6: two faults) or detected nothing (the one holder dealt wrong shares had dropped out). The dealer now
    moves every holder's shares and the demo's dropouts leave at rounds 1-3: he is proven and excluded, the release
    exact over the 15 others."""
    report, text = demo_in_process(cli_in_process, monkeypatch, tmp_path, "dpds", FEW, "--dishonest",
                                   "inconsistent-shares", "--drop-fraction", "0.2")
    liar, detected = report["dishonest"]["user"], report["detected"]
    assert detected["inconsistent"] == [liar] and detected["excluded"] == detected["blamed"] == []
    assert report["service"]["dropouts"]["survivors"] == FEW - 4 - 1 == sum(row["truth"] for row in report["estimates"])
    assert "round6" in report["round_seconds"] and "detected: dealers proven inconsistent" in text
    check_released_counts(report)


@pytest.mark.slow
@pytest.mark.parametrize("protocol, kind", KINDS)
def test_a_dishonest_user_is_detected_over_the_demos_own_data(tmp_path, protocol, kind):
    """The test above as a newcomer runs it: a process each, the bundled words over 100 users (one kind's line read
    from a second, text run; the others' from the same formatter)."""
    report, said = dishonest_demo(tmp_path, protocol, kind, text=kind == "inconsistent-shares")
    check_dishonest_demo(report, said or "detected: " + _detected(report["detected"]), kind)


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["misrouted-sum", "wrong-sum"])
def test_a_dishonest_tss_helper_is_recovered_or_trusted(tmp_path, kind):
    """Issue 46, live: a helper's sum sealed as another's does not open at S2, his items are recovered in round 4
    and every item is released; a helper adding 1 to one item's sum stays inside [0, |R_j|] (but with probability
    about 0: every reporter of the item holds it), where nobody can detect it: nothing is blamed, and the release's
    trust block says it trusts the helpers' integrity."""
    report, said = dishonest_demo(tmp_path, "tss", kind, text=True)
    liar, detected = report["dishonest"]["user"], report["detected"]
    assert set(detected) == {"unopened_sums", "recovered_items", "lost_items"} and detected["lost_items"] == []
    assert len(report["estimates"]) == 10 and report["service"]["dropouts"]["survivors"] == 100
    if kind == "misrouted-sum":
        assert detected["unopened_sums"] == [liar] and detected["recovered_items"]
        assert re.fullmatch(r"detected: helpers whose sums did not open \[\d+\]; items recovered in round 4 "
                            r"\[[\d, ]+\]", said)
        assert report["z_rms"] < 5
    else:
        assert detected == {"unopened_sums": [], "recovered_items": [], "lost_items": []} and said == "detected: none"
        assert report["dishonest"]["item"] in range(10)
        assert "a wrong sum inside it is not detected" in report["service"]["trust"]["helpers"]


def test_a_dishonest_kind_of_another_protocol_is_refused_in_one_line(cli_in_process, tmp_path):
    """(in this process; a refusal by the command's own process: test_the_demo_refuses_impossible_settings)"""
    from privagg.cli import app

    for protocol, kind, accepted in (("dpds", "wrong-sum", "junk-backups, wrong-share, inconsistent-shares"),
                                     ("tss", "junk-backups", "misrouted-sum, wrong-sum")):
        out = cli_in_process.invoke(app, ["demo-service", protocol, "--users", "100", "--dishonest", kind,
                                          "--workdir", str(tmp_path)])
        assert out.exit_code == 2 and out.stderr.strip().splitlines() == [
            f"error: dishonest must be one of {accepted} for {protocol}, got {kind}"]
    out = cli_in_process.invoke(app, ["demo-service", "fe1", "--dishonest", "wrong-sum", "--workdir", str(tmp_path)])
    assert out.exit_code == 2 and "--dishonest must be given only for dpds, dpdg, tss and tss-collusion" in out.stderr


def test_the_demo_refuses_impossible_settings(tmp_path):
    out = subprocess.run([sys.executable, "-m", "privagg", "demo-service", "dpds", "--users", "100", "--drop-fraction",
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
    assert reporter["sent"]["report set"] == reporter["expected_sent"]["report set"] == 1  # alpha N, exactly
    # the users' counters of what they sealed to S2 against S2's own count of the entries it opened and used
    assert sum(s2["received"].values()) == report["service"]["messages"]["total"] > 0
    assert helper["sent"]["helper sums"] * helper["parties"] == pytest.approx(s2["received"]["helper sums"])



def test_tss_users_in_two_worker_processes(tmp_path):
    """TSS with the users' devices in two worker processes (as at n >= 2,000 on two cores): S2's release is the
    survivors' sampled counts exactly, the clients come back in user order, and each round's users' CPU is counted
    from the workers."""
    import numpy as np

    from privagg.demos import TSS_REPORT_FRACTION
    from privagg.protocols.registry import calibrate
    from privagg.protocols.sharing_parties import survivors_parameters
    from privagg.service.two_servers.demo import run_tss_services

    from privagg.protocols.roles import RoundFailed

    codes = np.arange(40) % 10  # each of 10 items held by 4 users: beta = 1/10
    p = calibrate("tss", epsilon=1.0, delta=1e-6, n_users=40, domain_size=10, min_count_fraction=0.1,
                  report_fraction=TSS_REPORT_FRACTION)
    try:
        run = run_tss_services(tmp_path, p, codes, 0.1, 300.0, seed=0, progress=lambda _text: None, processes=2)
    except RoundFailed as err:  # an item whose elected helpers all vanished in round 3 (S1's election is not seeded:
        # 1 run in 8 here) fails the task before S2 opens a sum, saying so (docs/privacy.md, "A helper's lists")
        assert "S2 refused the sums (bad_counts): sums.items[" in str(err) and "must be a sum from one of its " \
            "helpers" in str(err), str(err)
        return
    counts = np.zeros(10, dtype=np.int64)
    for client in run["clients"]:
        if client.user in run["survivors"]:
            for j, entry in zip(client.role.state.items, client.role.state.entries):
                counts[j] += entry
    released = {e["item"]: e["estimate"] for e in run["report"]["estimates"]}
    expected = survivors_parameters(p, len(run["survivors"])).estimate(counts).tolist()
    assert released == {j: expected[j] for j in released}
    # an item is lost only when a reporter asked to recover it missed round 4 (one whose helpers all vanished fails
    # the task, above), saying so
    lost = run["report"]["dropouts"]["lost_items"]
    assert set(released) | {e["item"] for e in lost} == set(range(10))
    assert all("sent no usable recovery" in e["reason"] for e in lost)
    assert sorted(c.user for c in run["clients"]) == list(range(40)) and len(run["user_cpu"]) == 40
    assert run["cpu"]["round1"] > 0 and all(cpu > 0 for cpu in run["user_cpu"])

def test_the_fewest_users_a_sharing_demo_takes_are_the_fewest_its_data_serves():
    """The range a sharing demo states starts where its bundled data meets the protocol's data condition: at 89
    users some category has too few holders (a user told [20, ...] who asked for 20 was refused for another reason);
    at every n from 90 to the most, each has enough."""
    import numpy as np

    from privagg.demos import DEMO_USERS_MAX, DEMO_USERS_MIN, sharing_demo_data

    codes = sharing_demo_data(DEMO_USERS_MAX)[0]  # n users' codes are the first n of these (one draw per user)
    for n in (DEMO_USERS_MIN - 1, DEMO_USERS_MIN, 1234, DEMO_USERS_MAX):
        assert np.array_equal(sharing_demo_data(n)[0], codes[:n])
    n = np.arange(1, codes.size + 1)
    beta = np.floor(0.6 * np.cumsum(np.eye(10, dtype=np.int64)[codes], axis=0).min(axis=1) / n * 1000) / 1000
    assert sharing_demo_data(DEMO_USERS_MIN - 1)[2] == beta[DEMO_USERS_MIN - 2] == 0  # sharing_demo_data's beta
    assert (beta[DEMO_USERS_MIN - 1:] > 0).all() and sharing_demo_data(DEMO_USERS_MIN)[2] == beta[DEMO_USERS_MIN - 1]


def test_the_demo_refuses_user_counts_that_would_run_for_hours(cli_in_process, tmp_path):
    """n^2 work on the complete graph: at most 1,000 users there; 10,000 on a neighbour graph; 4,000 for TSS (alpha =
    0.1), 1,000 for a dishonest TSS helper (alpha = 1/2), whose round 2 seals alpha^2 N n^2 shares (the paper's helper
    sets), saying so (in this process); fewer than 90, too few for the bundled data."""
    from privagg.cli import app

    for args, says in ((["dpds", "--users", "20000"], "users must be an integer in [90, 10000]"),
                       (["dpds", "--users", "5000", "--degree", "complete"], "users must be at most 1,000 for dpds on "
                        "the complete graph (more on a neighbour graph: --degree auto or an even k), got 5000"),
                       (["tss", "--users", "5000"], "users must be in [90, 4,000] for tss: its round 2 seals, relays "
                        "and opens one share per reporter and helper of an item (the paper's helper sets, m_j of them "
                        "for m_j reporters), about alpha^2 N n^2 = 2,504,500 at alpha = 0.1, N = 10 and n = 5,000"),
                       (["tss-collusion", "--users", "4001"], "users must be in [90, 4,000] for tss-collusion"),
                       (["tss", "--users", "1001", "--dishonest", "wrong-sum"], "users must be in [90, 1,000] for tss "
                        "--dishonest: its round 2 seals, relays and opens one share per reporter and helper of an item "
                        "(the paper's helper sets, m_j of them for m_j reporters), about alpha^2 N n^2 = 2,507,505 at "
                        "alpha = 0.5"),
                       (["tss", "--users", "10"], "users must be an integer in [90, 4000], got 10"),
                       (["dpds", "--users", "89"], "users must be an integer in [90, 10000], got 89"),
                       (["dpdg", "--users", "19"], "users must be an integer in [20, 10000], got 19"),  # no condition
                       (["tss", "--users", "10000000000"], "users must be an integer in [90, 4000], got 10000000000"),
                       (["tss", "--degree", "20"], "degree must be given only for dpds and dpdg")):
        out = cli_in_process.invoke(app, ["demo-service", *args, "--workdir", str(tmp_path)])
        assert out.exit_code == 2 and says in out.stderr, (args, out.stderr)


def test_a_demo_whose_task_failed_says_why_in_one_line(cli_in_process, monkeypatch, tmp_path):
    """A round server that failed the task (here one serving that state): the demo raises RoundFailed with the
    server's reason, and demo-service prints it as one line, exit 1, not a traceback."""
    import json
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    import privagg.demos
    from privagg.cli import app
    from privagg.protocols.roles import RoundFailed
    from privagg.service.round_demo import check_not_failed

    class Failed(BaseHTTPRequestHandler):  # the round server's answers: the task's state, then its result's 409
        def do_GET(self):
            failed, why = self.path.endswith("/result"), "round 5 closed with 3 of 12 users, fewer than t = 7"
            body = json.dumps({"error": "failed", "detail": why} if failed else {"state": "failed"})
            self.send_response(409 if failed else 200)
            self.end_headers()
            self.wfile.write(body.encode())

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Failed)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        with pytest.raises(RoundFailed, match="the task failed: round 5 closed with 3 of 12"):
            check_not_failed(f"http://127.0.0.1:{server.server_address[1]}", "ab" * 16)
    finally:
        server.shutdown()

    def failing(*args, **kwargs):
        raise RoundFailed("the task failed: round 5 closed with 3 of 12 users")

    monkeypatch.setattr(privagg.demos, "run_sharing_demo", failing)
    result = cli_in_process.invoke(app, ["demo-service", "dpds", "--users", "100", "--workdir", str(tmp_path / "w")])
    assert result.exit_code == 1 and "Traceback" not in result.output
    assert result.output.strip().splitlines()[-1] == "error: the task failed: round 5 closed with 3 of 12 users"


def test_a_demo_whose_server_stopped_says_so_in_one_line(cli_in_process, monkeypatch, tmp_path):
    """The sharing server gone after round 1 (SIGKILL, no restart): the demo's rounds raise SubmitError (before,
    urllib's URLError from the close, a traceback), and demo-service prints one line naming the failed request and
    where the services' logs are, exit 1."""
    import numpy as np

    import privagg.demos
    from privagg.cli import app
    from privagg.protocols import sampling_calibration as sc
    from privagg.service.calls import SubmitError
    from privagg.service.organisation import Organisation
    from privagg.service.round_demo import check_not_failed, dropout_plan
    from privagg.service.sharing.demo import SharingDeployment, run_rounds

    p, organisation = sc.calibrate_dpds(1.0, 1e-3, 16, 2, min_count_fraction=0.25), Organisation.generate()
    with SharingDeployment(f"sqlite:///{tmp_path}/sharing.db", tmp_path / "log") as dep:
        task, tokens, sign_roster = dep.organised(organisation, p, 300.0, 12, 16)
        with pytest.raises(SubmitError, match="^no answer: "):
            run_rounds(dep.url, task.task_id, np.arange(16) % 2, tokens, dropout_plan(16, 0.0, (1,), seed=0),
                       organisation.public_key, sign_roster, progress=lambda _text: None,
                       between=lambda _round: dep.kill())
    assert check_not_failed(dep.url, task.task_id) is None  # nothing answers there: the caller's error stands

    def stopped(*args, **kwargs):
        raise SubmitError(None, "<urlopen error [Errno 111] Connection refused>")

    monkeypatch.setattr(privagg.demos, "run_sharing_demo", stopped)
    result = cli_in_process.invoke(app, ["demo-service", "dpds", "--users", "100", "--workdir", str(tmp_path / "w")])
    assert result.exit_code == 1 and "Traceback" not in result.output
    assert " ".join(result.output.split()) == (
        "error: a request to the demo's service failed (no answer: <urlopen error [Errno 111] Connection refused>); "
        f"the services' logs are in {tmp_path / 'w' / 'logs'}")


@pytest.mark.parametrize("users, fraction, dropped", [(60, 0.1, 6), (24, 0.25, 6), (16, 0.15, 2), (5, 0.1, 0),
                                                      (10_000, 0.1, 1_000)])
def test_a_demo_drops_the_users_its_graph_is_planned_for_spread_over_the_rounds(users, fraction, dropped):
    """floor(fraction n) users, the D a neighbour graph's failure bound is computed at (a binomial count exceeded it
    half the time: 8 of 60 at 0.1 and the demo's seed, where k = 12 had liveness 2.1e-3 at D = 6 but 4.5e-2 at 8,
    and CI's release failed), each round taking its share (one more or less)."""
    import numpy as np

    from privagg.protocols.sharing_graph import planned_counts
    from privagg.service.round_demo import dropout_plan

    for seed in range(3):
        plan = dropout_plan(users, fraction, (1, 2, 3, 4, 5), seed)
        per_round = np.bincount(plan, minlength=6)[1:]
        assert per_round.sum() == dropped and per_round.max() - per_round.min() <= 1
    assert planned_counts(argparse.Namespace(n_users=users, honest_users=users, degree=12,
                                             graph_dropouts=fraction))[1] == dropped
