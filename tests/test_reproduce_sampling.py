"""privagg reproduce sampling on its quick grid: the files it writes, and two properties of what they hold."""

import math

import numpy as np
import pytest
from reproduction import png_size, quick_run, read

from privagg.protocols import registry
from privagg.reproduce import sampling

pytestmark = pytest.mark.slow  # about 5 s: the quick grid's seeded runs and calibrations

K_SIGMA = 4  # the MSE band: 4 standard errors of a mean of R runs (a false alarm about once in 16,000 seeds)


@pytest.fixture(scope="module")
def written(tmp_path_factory):
    return quick_run(sampling, tmp_path_factory.mktemp("sampling"))



def test_files_and_summary(written):
    out, summary, calls = written
    names = {"variance_vs_n.csv", "variance_vs_eps.csv", "crossover.csv", "costs.csv",
             "variance_vs_n.png", "variance_vs_eps.png", "costs.png"}
    assert names <= {p.name for p in out.iterdir()}
    assert set(summary["files"]) == names
    assert summary["grid"] == "quick" and summary["runs_per_point"] == sampling.QUICK.runs
    assert summary["paper_n_star"] == pytest.approx(80.7, abs=0.05)
    assert {c[0] for c in calls} == {"variance vs n", "variance vs eps", "costs"}
    for stage in ("variance vs n", "variance vs eps", "costs"):  # increments that add up to the stage's total
        steps = [c for c in calls if c[0] == stage]
        assert sum(c[1] for c in steps) == steps[0][2]


def test_pngs_are_images(written):
    out = written[0]
    for name in ("variance_vs_n.png", "variance_vs_eps.png", "costs.png"):
        width, height = png_size(out / name)
        assert width > 300 and height > 300


def test_csv_columns(written):
    out = written[0]
    expected = {
        "variance_vs_n.csv": {"variant", "protocol", "n_users", "epsilon", "feasible", "sampling_probability",
                              "runs", "mse", "mse_se", "theory_mse", "z", "note"},
        "variance_vs_eps.csv": {"variant", "protocol", "n_users", "epsilon", "feasible", "mse", "theory_mse"},
        "crossover.csv": {"dpds_variant", "dpdg_variant", "measured_crossover_n", "paper_n_star"},
        "costs.csv": {"protocol", "n_users", "domain_size", "report_fraction", "user_sent", "user_received",
                      "user_to_server", "user_total", "reference_user_total", "server_received", "ratio_to_dpds"},
    }
    for name, columns in expected.items():
        header, rows = read(out / name)
        assert columns <= set(header), name
        assert rows, name
    header, rows = read(out / "variance_vs_n.csv")
    variants = {v.label for v in sampling.VARIANTS}
    assert {r["variant"] for r in rows} == variants
    assert {int(r["n_users"]) for r in rows} == set(sampling.QUICK.users)
    # the paper's p = 1 - e^-eps is refused where it does not buy delta: recorded, not measured
    refused = [r for r in rows if r["feasible"] == "false"]
    assert refused and all(r["note"].startswith("infeasible") and r["mse"] == "" for r in refused)


def test_dpds_mse_within_band_of_theory(written):
    """At n = 1000: the measured MSE against sum_j Pi_j (1 - p) / (p n^2), within K_SIGMA standard errors of a
    mean of R runs; one run's sd from the binomial's fourth central moment (tau_j ~ Bin(Pi_j, p))."""
    n, N = 1000, sampling.DOMAIN
    row = next(r for r in read(written[0] / "variance_vs_n.csv")[1] if r["variant"] == "dpds"
               and int(r["n_users"]) == n)
    p = registry.calibrate("dpds", epsilon=1.0, delta=1e-5, n_users=n, domain_size=N,
                           min_count_fraction=1 / (2 * N)).sampling_probability
    assert float(row["sampling_probability"]) == pytest.approx(p, rel=1e-5)
    counts = sampling.population(n, N).astype(float)
    assert counts.sum() == n and counts.min() >= math.ceil(n / (2 * N))
    q = 1 - p
    theory = float(np.sum(counts * q / p)) / n**2
    fourth = counts * p * q * (1 + 3 * (counts - 2) * p * q)
    sd_one_run = math.sqrt(float(np.sum(fourth - (counts * p * q) ** 2))) / p**2 / n**2
    runs = int(row["runs"])
    assert runs == sampling.QUICK.runs
    assert float(row["theory_mse"]) == pytest.approx(theory, rel=1e-5)
    assert abs(float(row["mse"]) - theory) <= K_SIGMA * sd_one_run / math.sqrt(runs)


def test_faithful_dpds_sends_no_share_and_its_bytes_are_measured(written):
    """The deployed DPDS (a faithful run) sends no share: per user, no element to the other users and N to the
    server (the masked sum), the server nN as the paper's; beside it the paper's 2nN + N, and the measured bytes
    (keys, backups, revealed shares) against the paper's elements' bytes."""
    rows = [r for r in read(written[0] / "costs.csv")[1] if r["protocol"] == "dpds"]
    assert len(rows) == len(sampling.QUICK.cost_users) * len(sampling.QUICK.cost_domains)
    for r in rows:
        n, N = int(r["n_users"]), int(r["domain_size"])
        assert float(r["user_sent"]) == float(r["user_received"]) == 0 and float(r["user_to_server"]) == N
        assert float(r["reference_user_total"]) == 2 * n * N + N and float(r["server_received"]) == n * N
        assert float(r["user_bytes"]) > 0 and float(r["reference_user_bytes"]) >= 2 * n * N + N
    for r in read(written[0] / "costs.csv")[1]:
        if r["protocol"] == "tss":  # one run: sum_j m_j^2 near its expectation
            assert float(r["user_total"]) == pytest.approx(float(r["expected_user_total"]), rel=0.1)
