"""privagg reproduce vector-shuffle on its quick grid: the files it writes, and properties of what they hold."""

import math

import numpy as np
import pytest
from reproduction import png_size, quick_run, read

from privagg.datasets import digits_vectors
from privagg.protocols.privacy_blanket import calibrate_blanket_vector
from privagg.reproduce import vector_shuffle as vs

pytestmark = pytest.mark.slow  # about 6 s: the quick grid's seeded runs, calibrations and five figures

K_SIGMA = 4  # the MSE band: 4 standard errors of a mean of R runs (chosen before the first run, never widened)
SEED = 0


@pytest.fixture(scope="module")
def written(tmp_path_factory):
    return quick_run(vs, tmp_path_factory.mktemp("vector_shuffle"), seed=SEED)



def test_files_summary_and_progress(written):
    out, summary, calls = written
    assert set(vs.FILES) <= {p.name for p in out.iterdir()}
    assert set(summary["files"]) == set(vs.FILES)
    assert summary["grid"] == "quick" and summary["runs_per_point"] == vs.QUICK.runs
    stages = {f"mse vs {name}" for name, _, _ in vs.QUICK.experiments()}
    assert {c[0] for c in calls} == stages
    for stage in stages:  # increments that add up to the stage's total
        steps = [c for c in calls if c[0] == stage]
        assert sum(c[1] for c in steps) == steps[0][2]
    # the paper's gamma at the defaults (t = 1, eps < 1): max(14 B ln(2/delta) / ((n-1) eps^2), 27 B / ((n-1) eps)),
    # B = d k = 192; the 27 B term wins at delta = 0.5
    n, eps = vs.DEFAULTS["n"], vs.DEFAULTS["eps"]
    B = vs.DEFAULTS["d"] * vs.DEFAULTS["k"]
    paper = max(14 * B * math.log(2 / 0.5) / ((n - 1) * eps**2), 27 * B / ((n - 1) * eps))
    assert summary["gamma_at_defaults"]["paper@0.5"] == pytest.approx(paper, rel=1e-12)
    assert summary["gamma_at_defaults"]["tight@0.5"] < summary["gamma_at_defaults"]["paper@0.5"]
    assert summary["largest_abs_z"] <= K_SIGMA


def test_pngs_are_images(written):
    out = written[0]
    for name in vs.PLOTS.values():
        width, height = png_size(out / name)
        assert width > 600 and height > 400


def test_csv_columns(written):
    out = written[0]
    expected = {"mse.csv": set(vs.MSE_COLUMNS), "gamma.csv": set(vs.GAMMA_COLUMNS), "fits.csv": set(vs.FIT_COLUMNS)}
    for name, columns in expected.items():
        header, rows = read(out / name)
        assert columns == set(header), name
        assert rows, name
    header, rows = read(out / "mse.csv")
    assert {r["experiment"] for r in rows} == {name for name, _, _ in vs.QUICK.experiments()}
    assert {r["calibration"] for r in rows} == set(vs.CALIBRATIONS)
    assert {float(r["delta"]) for r in rows} == set(vs.DELTAS)
    points = sum(len(values) for _, _, values in vs.QUICK.experiments())
    assert len(rows) == points * len(vs.DELTAS) * len(vs.CALIBRATIONS)


def test_infeasible_points_recorded(written):
    """The paper's gamma exceeds 1 at delta = 1e-6 for t >= 2 (and at eps = 1, where the 80-constant form takes
    over): recorded with the refusal, not measured, and never a crash."""
    out, summary, _ = written
    rows = read(out / "mse.csv")[1]
    refused = [r for r in rows if r["feasible"] == "false"]
    assert refused and summary["infeasible_points"] == len(refused)
    for r in refused:
        assert r["note"].startswith("infeasible") and r["mse"] == "" and r["gamma"] == "" and r["runs"] == "0"
        with pytest.raises(Exception):  # the calibration itself refuses the point
            calibrate_blanket_vector(float(r["eps"]), float(r["delta"]), int(r["n"]), int(r["d"]),
                                     calibration=r["calibration"], levels=int(r["k"]),
                                     coordinates_per_user=int(r["t"]))
    assert any(r["t"] == "2" and r["delta"] == "1e-06" and r["calibration"] == "paper" for r in refused)


def test_tight_gamma_not_above_paper(written):
    """On the quick grid, wherever both calibrations are feasible, the accountant's gamma is at most the paper's.
    (Not a theorem for t >= 2: on the full grid it fails at t >= 8, delta = 0.5, see the results page.)"""
    rows = read(written[0] / "gamma.csv")[1]
    both = [r for r in rows if r["gamma_paper"] and r["gamma_tight"]]
    assert both
    for r in both:
        assert float(r["gamma_tight"]) <= float(r["gamma_paper"]), r
        assert float(r["gamma_ratio"]) >= 1


def test_measured_mse_within_band_of_theory(written):
    """Every measured point: |mean of R runs - exact expectation| <= K_SIGMA sd(one run) / sqrt(R)."""
    rows = [r for r in read(written[0] / "mse.csv")[1] if r["feasible"] == "true"]
    assert len(rows) >= 30
    for r in rows:
        runs = int(r["runs"])
        assert runs == vs.QUICK.runs
        assert float(r["theory_se"]) > 0
        z = (float(r["mse"]) - float(r["theory_mse"])) / float(r["theory_se"])
        assert abs(z) <= K_SIGMA, (r["experiment"], r["value"], r["delta"], r["calibration"], z)
        assert float(r["theory_no_blanket"]) <= float(r["theory_mse"])


def test_theory_at_defaults_from_first_principles(written):
    """The default point's expected MSE-hat, recomputed here without the library's ``variance``: a coordinate's
    reporters are a uniform subset of the users, of size c ~ Bin(n, 1/d); each report's level over k is the
    rounded x with probability 1 - gamma (mean x, second moment x^2 + f (1 - f) / k^2) or uniform on {0..k}/k
    (mean 1/2, second moment (2k+1)/(6k)); the estimate is n times the mean of the debiased reports, so given c
    its variance is n^2 ((1 - c/n) S^2 / c + V / c) (finite-population sampling plus the reports' own noise)."""
    from scipy.stats import binom

    rows = read(written[0] / "mse.csv")[1]
    d, k, n, eps = vs.DEFAULTS["d"], vs.DEFAULTS["k"], vs.DEFAULTS["n"], vs.DEFAULTS["eps"]
    data = digits_vectors()
    x = data[vs.bootstrap(data.shape[0], SEED)[:n], :d]
    c = np.arange(1, n + 1)
    weights = binom.pmf(c, n, 1 / d)
    inverse = float(np.sum(weights / c) / weights.sum())
    for calibration in vs.CALIBRATIONS:
        row = next(r for r in rows if r["experiment"] == "t" and r["value"] == "1" and r["delta"] == "0.5"
                   and r["calibration"] == calibration)
        g = calibrate_blanket_vector(eps, 0.5, n, d, calibration=calibration, levels=k).gamma
        assert float(row["gamma"]) == pytest.approx(g, rel=1e-5)
        f = x * k - np.floor(x * k)
        level_mean = (1 - g) * x + g / 2
        level_square = (1 - g) * (x**2 + f * (1 - f) / k**2) + g * (2 * k + 1) / (6 * k)
        report_variance = ((level_square - level_mean**2) / (1 - g) ** 2).mean(axis=0)  # V, per coordinate
        spread = x.var(axis=0, ddof=1)  # S^2
        expected = float(np.sum(n * n * (spread + report_variance) * inverse - n * spread)) / n**2
        assert float(row["theory_mse"]) == pytest.approx(expected, rel=1e-5)  # the CSV keeps 6 digits
