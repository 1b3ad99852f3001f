"""Issue 49's acceptance: an event log of many rows a user, estimated through the command line and through the API
on a pandas and on a Polars frame, each run's z-scores against the truth of the bounded data.

    python benchmarks/event_log.py [--rows 1000000] [--users 100000] [--apps 1000] [--max-items 3]

builds the log (``device``: a user id; ``app``: one of ``--apps`` public app names, each user leaning on a few of
them; 1 to 200 rows a user, heavy-tailed, ``--rows`` in all) as a Parquet file in a temporary folder, then runs,
each in its own process (its wall time and peak RSS from ``wait4``'s rusage):

* ``privagg estimate fe1 --input events.parquet --user-column device --column app --max-items L --candidates
  apps.txt ...`` (the command line, the file streamed and grouped in bounded memory);
* ``privagg.estimate(frame, "fe1", item="app", user="device", max_items=L, candidates=apps, ...)`` on the pandas
  frame ``pandas.read_parquet`` gives, and on the Polars one ``polars.read_parquet`` gives.

Each run has its own seed (so the three are three runs, not one run thrice). The truth of each run's bounded data
is computed here with the library's own bounding (:func:`privagg.simulate.users.read_grouped` with the run's
encoder and seed: which L items each user keeps depends on the seed), not a copy of it, and checked against the
true counts the seeded run's evaluation carries. Each run prints the z-scores (estimate - truth) / stderr over the
apps: their mean, sd and the Kolmogorov-Smirnov p-value against N(0, 1), with the wall time and peak RSS.
``--json PATH`` writes the figures (tests/test_event_log.py runs the script at 10^4 rows and checks them).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

EPSILON, DELTA = 1.0, 1e-8
MOST_ROWS = 200
SEED = 20261206
RUNNERS = ("cli", "pandas", "polars")


def rows_per_user(users: int, rows: int, rng) -> np.ndarray:
    """``users`` counts in [1, 200] summing to ``rows``: a power law P(k) ~ k^-a with a fitted so the mean is
    rows / users, sampled, then adjusted one row at a time on random users to the exact total."""
    if not users <= rows <= MOST_ROWS * users:
        raise SystemExit(f"--rows must lie in [users, {MOST_ROWS} users], got {rows}")
    k = np.arange(1, MOST_ROWS + 1)
    mean = lambda a: (k ** (1.0 - a)).sum() / (k ** -a).sum()  # noqa: E731
    low, high = 0.0, 5.0
    for _ in range(60):  # the mean falls as a grows
        middle = (low + high) / 2
        low, high = (middle, high) if mean(middle) > rows / users else (low, middle)
    p = k ** -low
    counts = rng.choice(k, size=users, p=p / p.sum())
    while (gap := rows - int(counts.sum())) != 0:
        step = 1 if gap > 0 else -1
        pick = rng.integers(0, users, size=min(abs(gap), users))
        room = (counts[pick] < MOST_ROWS) if step > 0 else (counts[pick] > 1)
        pick = np.unique(pick[room])[:abs(gap)]
        counts[pick] += step
    return counts


def event_log(rows: int, users: int, apps: int, seed: int):
    """The log as a pandas frame: each user holds 3 favourite apps (Zipf popularity) used 80% of the time, any
    app (Zipf) otherwise; device ids are scattered 63-bit integers."""
    import pandas as pd

    rng = np.random.default_rng(seed)
    counts = rows_per_user(users, rows, rng)
    popularity = 1.0 / np.arange(1, apps + 1)
    popularity /= popularity.sum()
    favourites = rng.choice(apps, size=(users, 3), p=popularity)
    owner = np.repeat(np.arange(users), counts)
    usual = favourites[owner, rng.integers(0, 3, size=rows)]
    item = np.where(rng.random(rows) < 0.8, usual, rng.choice(apps, size=rows, p=popularity))
    ids = rng.choice(2**62, size=users, replace=False)
    order = rng.permutation(rows)  # an event log's rows interleave its users
    names = np.array([f"app{i:05d}" for i in range(apps)], dtype=object)
    return pd.DataFrame({"device": ids[owner][order], "app": names[item][order]}), [str(x) for x in names]


def run_child(argv: list[str], out: Path) -> dict:
    """Run ``argv`` with stdout to ``out``: its wall time and peak RSS (MiB, from wait4)."""
    import privagg

    library = str(Path(privagg.__file__).resolve().parents[1])  # the children run the library this process runs
    path = os.pathsep.join([library, *filter(None, [os.environ.get("PYTHONPATH")])])
    start = time.perf_counter()
    with out.open("w") as stdout:
        child = subprocess.Popen(argv, stdout=stdout, env={**os.environ, "PYTHONPATH": path})
        _, status, usage = os.wait4(child.pid, 0)
    wall = time.perf_counter() - start
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"{' '.join(argv)} failed (exit {os.waitstatus_to_exitcode(status)})")
    return {"wall_seconds": wall, "peak_rss_mib": usage.ru_maxrss / 1024, "cpu_seconds": usage.ru_utime +
            usage.ru_stime}


def api_run(kind: str, path: str, apps: str, seed: int, max_items: int) -> None:
    """A child: read the Parquet file into a ``kind`` frame, run the API, print the report's estimates as JSON."""
    import privagg

    if kind == "pandas":
        import pandas as pd

        frame = pd.read_parquet(path)
    else:
        import polars as pl

        frame = pl.read_parquet(path)
    candidates = Path(apps).read_text().split()
    report = privagg.estimate(frame, "fe1", item="app", user="device", max_items=max_items, candidates=candidates,
                              top=len(candidates), epsilon=EPSILON, delta=DELTA, seed=seed)
    json.dump(_summary(report), sys.stdout)


def _summary(report) -> dict:
    return {"n_users": report.n_users, "epsilon": report.privacy.epsilon, "delta": report.privacy.delta,
            "method": report.privacy.method_detail,
            "estimates": [{"item": e.item, "estimate": e.estimate, "stderr": e.stderr, "true_count": e.true_count}
                          for e in report.estimates]}


def bounded_truth(frame, candidates: list[str], seed: int, max_items: int) -> dict[str, int]:
    """How many users hold each candidate among their bounded items, by the library's bounding for ``seed``: the
    run's encoder (the apps hashed with the seed's key into [2^24 - 1] for L > 1, as the run does) and
    :func:`read_grouped` (the keyed choice of L distinct codes a user); a candidate counts the users holding its
    code (apps sharing a code are one item to the protocol)."""
    from privagg.io import InputFormat
    from privagg.protocols import registry
    from privagg.simulate.frames import DEFAULT_DOMAIN, _item_encoder
    from privagg.simulate.users import read_grouped

    entry = registry.get("fe1")
    domain = DEFAULT_DOMAIN - 1 if max_items > 1 else None
    encoder = _item_encoder(entry, domain, candidates, None, seed, "auto")
    fmt = InputFormat("auto", "app", None, True, "error")
    grouped = read_grouped(frame, "frame", fmt, "device", encoder, max_items, encoder.domain_size, seed, "the log")
    codes, counts = np.unique(grouped.codes.ravel(), return_counts=True)
    held = dict(zip(codes.tolist(), counts.tolist()))
    mine = encoder.encode(candidates, field="candidates", public=True)
    return {c: held.get(int(code), 0) for c, code in zip(candidates, mine.tolist())}


def z_scores(summary: dict, truth: dict[str, int]) -> dict:
    """The z-scores of a run's estimates against ``truth``: mean, sd, KS p against N(0, 1), and whether the run's
    own evaluation agrees with ``truth``."""
    from scipy import stats

    rows = summary["estimates"]
    z = np.array([(e["estimate"] - truth[e["item"]]) / e["stderr"] for e in rows])
    return {"items": len(z), "z_mean": float(z.mean()), "z_sd": float(z.std(ddof=1)),
            "ks_p": float(stats.kstest(z, "norm").pvalue), "z_max_abs": float(np.abs(z).max()),
            "truth_agrees": all(e["true_count"] == truth[e["item"]] for e in rows)}


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=10**6)
    parser.add_argument("--users", type=int, default=10**5)
    parser.add_argument("--apps", type=int, default=1000)
    parser.add_argument("--max-items", type=int, default=3)
    parser.add_argument("--seed", type=int, default=SEED)
    parser.add_argument("--runners", default=",".join(RUNNERS), help="which of cli,pandas,polars to run")
    parser.add_argument("--json", type=Path, help="write the figures here too")
    args = parser.parse_args(argv)
    import pandas as pd

    started = time.perf_counter()
    frame, apps = event_log(args.rows, args.users, args.apps, args.seed)
    figures = {"rows": len(frame), "users": int(frame["device"].nunique()), "apps": args.apps,
               "max_items": args.max_items, "epsilon": EPSILON, "delta": DELTA,
               "rows_per_user": {"min": int(frame.groupby("device").size().min()),
                                 "median": float(frame.groupby("device").size().median()),
                                 "max": int(frame.groupby("device").size().max())},
               "cpu": _cpu_model(), "cores": os.cpu_count(), "load_before": os.getloadavg(), "runs": {}}
    print(f"event log: {figures['rows']:,} rows, {figures['users']:,} users (rows a user: "
          f"{figures['rows_per_user']}), {args.apps} apps; L = {args.max_items}, ({EPSILON}, {DELTA})-DP a user; "
          f"built in {time.perf_counter() - started:.1f} s", flush=True)
    python = sys.executable
    with tempfile.TemporaryDirectory(prefix="privagg-event-log-") as folder:
        folder = Path(folder)
        path, listed = folder / "events.parquet", folder / "apps.txt"
        frame.to_parquet(path, index=False)
        listed.write_text("\n".join(apps) + "\n")
        for number, runner in enumerate(args.runners.split(",")):
            seed = args.seed + 1 + number
            if runner == "cli":
                command = [python, "-m", "privagg", "estimate", "fe1", "--input", str(path), "--user-column",
                           "device", "--column", "app", "--max-items", str(args.max_items), "--candidates",
                           str(listed), "--top", str(len(apps)), "--epsilon", str(EPSILON), "--delta", str(DELTA),
                           "--seed", str(seed), "--json"]
            elif runner in ("pandas", "polars"):
                command = [python, str(Path(__file__).resolve()), "api-run", runner, str(path), str(listed),
                           str(seed), str(args.max_items)]
            else:
                raise SystemExit(f"--runners: cli, pandas or polars, got {runner}")
            load = os.getloadavg()
            measured = run_child(command, folder / f"{runner}.json")
            summary = json.loads((folder / f"{runner}.json").read_text())
            if runner == "cli":
                summary = {"n_users": summary["n_users"], "epsilon": summary["privacy"]["epsilon"],
                           "delta": summary["privacy"]["delta"], "method": summary["privacy"]["method_detail"],
                           "estimates": summary["estimates"]}
            scores = z_scores(summary, bounded_truth(pd.read_parquet(path), apps, seed, args.max_items))
            figures["runs"][runner] = {"seed": seed, "n_users": summary["n_users"], "epsilon": summary["epsilon"],
                                       "delta": summary["delta"], "load_before": load, **scores, **measured}
            print(f"{runner:>6}: seed {seed}, n = {summary['n_users']:,} users, ({summary['epsilon']:g}, "
                  f"{summary['delta']:g})-DP a user; z over {scores['items']} apps: mean {scores['z_mean']:+.3f}, "
                  f"sd {scores['z_sd']:.3f}, KS p {scores['ks_p']:.2f}, max |z| {scores['z_max_abs']:.2f}, truth "
                  f"{'agrees with' if scores['truth_agrees'] else 'DIFFERS from'} the run's evaluation; "
                  f"{measured['wall_seconds']:.1f} s wall, {measured['cpu_seconds']:.1f} s CPU, peak RSS "
                  f"{measured['peak_rss_mib']:.0f} MiB (load {load[0]:.2f})", flush=True)
    print(f"host: {figures['cpu']}, {figures['cores']} cores; self peak RSS "
          f"{resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MiB", flush=True)
    if args.json:
        args.json.write_text(json.dumps(figures, indent=1))
    return figures


def markdown(figures: dict, when: str) -> list[str]:
    """The figures as part 15 of docs/benchmarks.md (``when``: the run's date, commit and how it was started)."""
    f = figures
    lines = ["## 15. Many rows a user: issue 49's acceptance, 10^6 rows from 10^5 users (whole processes)", "",
             f"`benchmarks/event_log.py` ({when}): an event log of {f['rows']:,} rows from {f['users']:,} users, "
             f"{f['rows_per_user']['min']} to {f['rows_per_user']['max']} rows a user (a power law fitted to a mean "
             f"of {f['rows'] / f['users']:g}; median {f['rows_per_user']['median']:g}), items among {f['apps']:,} "
             "public app names (each user leaning on 3 favourites, Zipf popularity), as a Parquet file. fe1 with "
             f"`--user-column device --max-items {f['max_items']}` at ({f['epsilon']:g}, {f['delta']:g})-DP a user "
             "(group privacy over his reports), the apps as candidates, each run in its own process with its own "
             "seed; z = (estimate - truth) / stderr over the apps, the truth of each run's bounded data computed "
             "with the library's bounding for its seed (and equal to the seeded run's own evaluation). On "
             f"{f['cpu']}, {f['cores']} cores, shared with other engineers' test suites (the load column): the "
             "times are pessimistic.", "",
             "| run | n users | z mean | z sd | KS p vs N(0, 1) | max abs z | truth = evaluation | wall | CPU | "
             "peak RSS | load at start |", "|---|---|---|---|---|---|---|---|---|---|---|"]
    names = {"cli": "`privagg estimate fe1 --input events.parquet ...`", "pandas": "`privagg.estimate(pandas frame)`",
             "polars": "`privagg.estimate(Polars frame)`"}
    for name, r in f["runs"].items():
        lines.append(f"| {names[name]} | {r['n_users']:,} | {r['z_mean']:+.3f} | {r['z_sd']:.3f} | {r['ks_p']:.2f} | "
                     f"{r['z_max_abs']:.2f} | {'yes' if r['truth_agrees'] else 'NO'} | {r['wall_seconds']:.0f} s | "
                     f"{r['cpu_seconds']:.0f} s | {r['peak_rss_mib']:.0f} MiB | {r['load_before'][0]:.2f} |")
    return [*lines, ""]


def _cpu_model() -> str:
    return next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                 if line.startswith("model name")), "unknown")


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "api-run":
        api_run(sys.argv[2], sys.argv[3], sys.argv[4], int(sys.argv[5]), int(sys.argv[6]))
    else:
        main()
