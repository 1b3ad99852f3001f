"""DPDG on a neighbour graph through the services (issue 47): real SDK users on loopback take the graph's seed from
the organisation's signed roster, and each sends k + 5 messages: a backup to each of his k neighbours, commitments
to his k + 1 holders' shares, and a revealed share per holder-owner; the release states the graph."""

import json
import subprocess
import sys


def test_the_services_run_dpdg_on_a_neighbour_graph(tmp_path):
    # k = 14, t_k = 9 at 6 dropouts (0.1 of 60): no user has the 7 of 15 holders missing that would stop his
    # secret's release, whatever the roster's seed (k = 12, t_k = 8 failed in about 2% of seeds: liveness 2.1e-3 at
    # D = 6, and the demo dropped a binomial count, 8 at its seed)
    out = subprocess.run([sys.executable, "-m", "privagg", "demo-service", "dpdg", "--users", "60", "--degree", "14",
                          "--drop-fraction", "0.1", "--workdir", str(tmp_path), "--json"],
                         capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr
    report = json.loads(out.stdout)
    user = report["parties"][0]
    assert user["party"] == "user"
    assert user["sent"]["backup"] == 2 * 14 and user["sent"]["commitments"] == 15  # the survivors' means
    assert user["sent"]["revealed shares"] <= 15 and user["received"]["pair key"] <= 15
    assert user["received"]["signature"] <= 2 * 14 + 1
    caveats = report["service"]["privacy"]["caveats"]
    assert any("a neighbour graph of degree k = 14, threshold t_k = 9, its order from the roster's seed" in c
               for c in caveats)
    assert report["service"]["privacy"]["private"] and report["z_rms"] < 5
