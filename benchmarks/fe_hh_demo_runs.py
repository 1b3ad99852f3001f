"""The figures the README quotes for ``privagg demo-service fe-hh``: the same 20,000 bundled words of at most 4
bytes, phi = 0.03, (1, 1e-6)-DP, through the simulation (the services' protocol, other coins) with seeds FIRST to
LAST - 1: the guarantee (the normal approximations of the parameters' ``detection``) beside the recall and
precision each run measured, and which words were missed or reported in error.

    .venv/bin/python benchmarks/fe_hh_demo_runs.py [FIRST LAST]      (default 100 300: 200 runs, some 5 minutes)
"""

from __future__ import annotations

import sys
from collections import Counter

from privagg.datasets import english_words
from privagg.protocols.registry import calibrate
from privagg.simulate.heavy_hitters import estimate_heavy_hitters, score

USERS, MAX_LENGTH, PHI, EPSILON, DELTA = 20_000, 4, 0.03, 1.0, 1e-6  # privagg.demos.run_heavy_hitter_demo's


def main(first: int, last: int) -> None:
    pool = [w for w in english_words(3 * USERS, 1_000).to_pylist() if len(w.encode()) <= MAX_LENGTH][:USERS]
    truth = Counter(pool)
    parameters = calibrate("fe-hh", epsilon=EPSILON, delta=DELTA, n_users=len(pool), domain_size=256**MAX_LENGTH,
                           max_length=MAX_LENGTH, phi=PHI)
    t, d = parameters.threshold, parameters.detection()
    print(f"n = {len(pool)}, phi n = {t:.0f}: an item held by >= 1.5 phi n missed w.p. <= {d['miss_probability']:.2g}, "
          f"one held by <= phi n / 2 reported w.p. <= {d['false_report_probability']:.2g}")
    print("words held by >= phi n / 2:", ", ".join(f"{w} {c}" for w, c in truth.most_common() if c >= t / 2))
    recall, precision, missed, extra = Counter(), Counter(), Counter(), Counter()
    for seed in range(first, last):
        report, _ = estimate_heavy_hitters(pool, epsilon=EPSILON, delta=DELTA, phi=PHI, max_length=MAX_LENGTH,
                                           seed=seed, evaluate=False)
        found = [h.item for h in report.heavy_hitters]
        s = score(found, truth, t)
        recall[f"{s.recall:.2f} (>= 1.5 phi n: {s.recall_strong:.2f})"] += 1
        precision[f"{s.precision:.2f} (>= phi n / 2: {s.precision_loose:.2f})"] += 1
        missed.update(w for w, c in truth.items() if c >= t and w not in found)
        extra.update(f"{w} ({truth[w]})" for w in found if truth[w] < t)
        print(f"seed {seed}: recall {s.recall:.2f}, precision {s.precision:.2f}", file=sys.stderr)
    runs = last - first
    print(f"over {runs} runs: recall {dict(recall)}; precision {dict(precision)}")
    print(f"missed (held by >= phi n), runs each: {dict(missed)}; reported below phi n, runs each: {dict(extra)}")


if __name__ == "__main__":
    main(*(map(int, sys.argv[1:3]) if len(sys.argv) > 2 else (100, 300)))
