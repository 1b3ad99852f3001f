"""fe-hh's precision and recall at SDPFE's HHD setting over many seeds (issue 48): n = 10^7 integers of [0, 2^48)
from ``sdpfe_hhd.generate`` (40 head items holding 40% of the users in proportion 1 / (i + 1), the rest uniform),
phi = 0.005, (1, 1/n^2)-DP, seeds FIRST to LAST - 1, each seed both the data's and the protocol's (as
``sdpfe_hhd.py --seed S`` runs it). Precision and recall as issue 48 and ``simulate.heavy_hitters.score`` define
them: recall over the items held by >= phi n users, precision the share of the reported items held by >= phi n.

The head's counts are the same for every seed (only its values and the tail change), so the theory predicts the
distribution: each item reported when its estimate (normal, sd ``report_standard_error`` at its count) reaches
phi n; printed first, beside the same for the last level's estimate alone (``standard_error``: the rule before
the combined estimate), then the runs.

    .venv/bin/python benchmarks/fe_hh_hhd_seeds.py [FIRST LAST] [--users N] [--json FILE]   (default 1 21)
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections import Counter
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from sdpfe_hhd import DOMAIN, EPSILON, PHI, USERS, generate  # noqa: E402

from privagg.protocols.registry import calibrate  # noqa: E402
from privagg.simulate.heavy_hitters import estimate_heavy_hitters  # noqa: E402

PREDICTION_DRAWS = 100_000


def predicted(counts: np.ndarray, threshold: float, sd: np.ndarray, rng) -> dict:
    """Expected precision and recall, and the chance of each target, when item i is reported iff
    counts[i] + sd[i] Z_i >= threshold (independent normals; items off the head are never reported)."""
    reported = counts + sd * rng.standard_normal((PREDICTION_DRAWS, counts.size)) >= threshold
    heavy = counts >= threshold
    hits, false = (reported & heavy).sum(1), (reported & ~heavy).sum(1)
    precision, recall = hits / np.maximum(hits + false, 1), hits / heavy.sum()
    return {"precision": float(precision.mean()), "recall": float(recall.mean()),
            "P(precision >= 95%)": float((precision >= 0.95).mean()), "P(recall = 100%)": float((recall == 1).mean()),
            "P(both)": float(((precision >= 0.95) & (recall == 1)).mean()), "false reports": float(false.mean())}


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("first", type=int, nargs="?", default=1)
    parser.add_argument("last", type=int, nargs="?", default=21)
    parser.add_argument("--users", type=int, default=USERS)
    parser.add_argument("--json", metavar="FILE", help="write the runs and the prediction there too")
    args = parser.parse_args(argv)
    n = args.users
    parameters = calibrate("fe-hh", epsilon=EPSILON, delta=1.0 / n**2, n_users=n, domain_size=DOMAIN, phi=PHI)
    t = parameters.threshold
    counts = np.unique(generate(n, args.first), return_counts=True)[1]
    head = np.sort(counts[counts >= t / 4])[::-1].astype(np.float64)
    print(f"n = {n:,}, phi n = {t:,.0f}; head counts / phi n: {', '.join(f'{c / t:.3f}' for c in head)}")
    print(f"reported estimate's sd at phi n: {float(parameters.report_standard_error(t)):,.0f} (last level alone: "
          f"{float(parameters.standard_error(t)):,.0f}); theory: {parameters.detection()}")
    rng = np.random.default_rng(0)
    prediction = {name: predicted(head, t, sd, rng) for name, sd in
                  (("combined", parameters.report_standard_error(head)), ("last level", parameters.standard_error(head)))}
    for name, figures in prediction.items():
        print(f"predicted, {name}: " + ", ".join(f"{k} {v:.3f}" for k, v in figures.items()))
    runs, outcomes, missed, extra = [], Counter(), Counter(), Counter()
    for seed in range(args.first, args.last):
        values = generate(n, seed)
        start = time.process_time()
        report, _ = estimate_heavy_hitters(values, epsilon=EPSILON, delta=1.0 / n**2, phi=PHI, domain_size=DOMAIN,
                                           seed=seed)
        cpu = time.process_time() - start
        e = report.evaluation
        truth = {h.item: h.true_count for h in report.heavy_hitters}
        false = sorted(round(c / t, 3) for c in truth.values() if c < t)
        found = set(truth)
        uniques, held = np.unique(values, return_counts=True)
        lost = sorted(round(int(c) / t, 3) for v, c in zip(uniques[held >= t].tolist(), held[held >= t]) if v not in found)
        runs.append({"seed": seed, "precision": e.precision, "recall": e.recall, "recall_strong": e.recall_strong,
                     "reported": e.reported, "false_reports": false, "missed": lost, "cpu_s": cpu})
        outcomes[f"precision {e.precision:.3f}, recall {e.recall:.3f}"] += 1
        missed.update(lost)
        extra.update(false)
        print(f"seed {seed}: precision {e.precision:.3f}, recall {e.recall:.3f} (>= 1.5 phi n: {e.recall_strong:.2f}), "
              f"reported below phi n (count / phi n): {false}, missed: {lost}; {cpu:.1f} s CPU", file=sys.stderr,
              flush=True)
    k = len(runs)
    print(f"over {k} runs: " + "; ".join(f"{v} x {o}" for o, v in outcomes.most_common()))
    print(f"mean precision {np.mean([r['precision'] for r in runs]):.4f}, mean recall "
          f"{np.mean([r['recall'] for r in runs]):.4f}; precision >= 95% in {sum(r['precision'] >= 0.95 for r in runs)}, "
          f"recall 100% in {sum(r['recall'] == 1 for r in runs)}, both in "
          f"{sum(r['precision'] >= 0.95 and r['recall'] == 1 for r in runs)}")
    print(f"reported below phi n (count / phi n: runs): {dict(sorted(extra.items()))}; "
          f"missed (count / phi n: runs): {dict(sorted(missed.items()))}")
    if args.json:
        Path(args.json).write_text(json.dumps({"users": n, "phi": PHI, "epsilon": EPSILON, "head": head.tolist(),
                                               "prediction": prediction, "runs": runs}, indent=1) + "\n")


if __name__ == "__main__":
    main()
