"""benchmarks/event_log.py, issue 49's acceptance, at 10^4 rows (docs/benchmarks.md runs it at 10^6): the command
line and the API on a pandas and on a Polars frame, each run's z-scores against the truth of its bounded data."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "event_log.py"


def _script():
    import importlib.util

    spec = importlib.util.spec_from_file_location("event_log", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _check(run: dict, k: int) -> None:
    """The k z-scores look standard normal within the theory's 4 sigma: the mean within 4 / sqrt(k), the sd within
    4 sqrt(1 / (2 (k - 1))) of 1, and the Kolmogorov-Smirnov test not rejecting N(0, 1) at the 0.1% level."""
    assert run["truth_agrees"] and run["items"] == k, run
    assert abs(run["z_mean"]) < 4 / math.sqrt(k), run
    assert abs(run["z_sd"] - 1) < 4 * math.sqrt(1 / (2 * (k - 1))), run
    assert run["ks_p"] > 1e-3, run


def test_event_log_z_scores_on_pandas_and_polars():
    """The script's parts in-process (the fast version of the test below): the log's shape, and the API's
    z-scores on a pandas and on a Polars frame against the truth the library's bounding gives."""
    import polars as pl

    import privagg

    script = _script()
    frame, apps = script.event_log(5000, 500, 30, seed=11)
    sizes = frame.groupby("device").size()
    assert len(frame) == 5000 and len(sizes) == 500 and sizes.min() >= 1 and sizes.max() <= 200
    for seed, data in ((1, frame), (2, pl.from_pandas(frame))):
        report = privagg.estimate(data, "fe1", item="app", user="device", max_items=3, candidates=apps, top=30,
                                  epsilon=1, delta=1e-8, seed=seed)
        assert report.n_users == 500
        _check(script.z_scores(script._summary(report), script.bounded_truth(frame, apps, seed, 3)), 30)


@pytest.mark.slow
def test_event_log_acceptance_at_ten_thousand_rows(tmp_path):
    """10^4 rows from 10^3 users (1 to 200 rows each), 50 apps, L = 3: for each of the three runs (own seed) n is
    the users, the guarantee the user's (1, 1e-8), the truth computed with the library's bounding equals the
    run's own evaluation, and the k = 50 z-scores look standard normal (:func:`_check`)."""
    out = tmp_path / "figures.json"
    done = subprocess.run([sys.executable, str(SCRIPT), "--rows", "10000", "--users", "1000", "--apps", "50",
                           "--json", str(out)], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    figures = json.loads(out.read_text())
    assert (figures["rows"], figures["users"]) == (10_000, 1_000)
    assert figures["rows_per_user"]["min"] >= 1 and figures["rows_per_user"]["max"] <= 200
    runs = figures["runs"]
    assert set(runs) == {"cli", "pandas", "polars"} and len({r["seed"] for r in runs.values()}) == 3
    k = 50
    for name, run in runs.items():
        assert run["n_users"] == 1000 and (run["epsilon"], run["delta"]) == (1.0, 1e-8), name
        _check(run, k)
        assert run["peak_rss_mib"] > 0 and run["wall_seconds"] > 0
