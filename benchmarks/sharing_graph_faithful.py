"""The faithful simulator on a neighbour graph (issue 47; docs/benchmarks.md, part 16): DPDG, N = 20, 5% colluding,
k = least_degree(n, 5%, 10%, 2^-40), 10% of the users vanishing over the five rounds, the release checked exact.
Each round's wall time as it closes, then the figures as JSON. Run under GNU time for the peak RSS:

    /usr/bin/time -v python benchmarks/sharing_graph_faithful.py 10000
"""

from __future__ import annotations

import dataclasses
import json
import math
import sys
import time

import numpy as np

from privagg.privacy import neighbour_graph
from privagg.protocols import sampling_calibration as sc
from privagg.protocols.sharing_server import PROTOCOL
from privagg.simulate.rounds import run_rounds

ROUNDS = ("advertise", "check", "masked_sum", "consistency", "reveal")


def main(n: int) -> dict:
    chosen = neighbour_graph.least_degree(n, n - math.ceil(0.95 * n), n // 10, 2.0 ** -40)
    p = dataclasses.replace(sc.calibrate_dpdg(1.0, 1e-6, n, 20, honest_fraction=0.95), degree=chosen.degree,
                            graph_dropouts=0.1)
    gone = np.random.default_rng(11).permutation(n)[:n // 10].tolist()
    dropouts = {name: gone[i::len(ROUNDS)] for i, name in enumerate(ROUNDS)}
    times, last = {}, [time.time()]

    def progress(name, number, total):
        now = time.time()
        times[name], last[0] = round(now - last[0], 1), now
        print(name, times[name], flush=True)

    start = time.time()
    run = run_rounds(PROTOCOL, p, np.arange(n) % 20, {k: np.random.default_rng([12, i]) for i, k in
                     enumerate(("users", "server", "identities"))}, dropouts=dropouts, progress=progress)
    wall = time.time() - start
    release, total = run.release, np.zeros(20, dtype=np.uint64)
    masked = {u for name in ROUNDS[:3] for u in dropouts[name]}
    for u in range(n):
        if u not in masked:
            total = p.field.add(total, run.users[u].state.vector)
    return {"n": n, "degree": chosen.degree, "threshold": release.threshold, "wall_seconds": round(wall, 1),
            "rounds_seconds": times, "survivors": release.survivors,
            "exact": bool(np.array_equal(release.table.estimates, release.parameters.estimate(total))),
            "user": {k: v / n for k, v in run.transcript["user"].items()}, "server": run.transcript["server"]}


if __name__ == "__main__":
    print(json.dumps(main(int(sys.argv[1])), indent=1))
