"""DPDG on a neighbour graph through the services (issue 47): real SDK users on loopback take the graph's seed from
the organisation's signed roster, and each sends k + 5 messages: a backup to each of his k neighbours, commitments
to his k + 1 holders' shares, and a revealed share per holder-owner; the release states the graph."""

import json
import subprocess
import sys


def test_the_services_run_dpdg_on_a_neighbour_graph(tmp_path):
    out = subprocess.run([sys.executable, "-m", "privagg", "demo-service", "dpdg", "--users", "60", "--degree", "12",
                          "--drop-fraction", "0.1", "--workdir", str(tmp_path), "--json"],
                         capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr
    report = json.loads(out.stdout)
    user = report["parties"][0]
    assert user["party"] == "user"
    assert user["sent"]["backup"] == 2 * 12 and user["sent"]["commitments"] == 13  # the survivors' means
    assert user["sent"]["revealed shares"] <= 13 and user["received"]["pair key"] <= 13
    assert user["received"]["signature"] <= 2 * 12 + 1
    caveats = report["service"]["privacy"]["caveats"]
    assert any("a neighbour graph of degree k = 12, threshold t_k = 8, its order from the roster's seed" in c
               for c in caveats)
    assert report["service"]["privacy"]["private"] and report["z_rms"] < 5
