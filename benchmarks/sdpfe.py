"""Whole-process timing of privagg's FE1 against the authors' C++ (SDPFE, FE/fe.cpp).

    .venv/bin/python benchmarks/sdpfe.py --sdpfe-dir PATH/TO/SDPFE [--repeats 5] [--privagg EXE]

(or set SDPFE_DIR). PATH/TO/SDPFE is a checkout of https://github.com/hkustDB/SDPFE,
the code of Luo, Wang and Yi, "Frequency estimation in the shuffle model with
almost a single message" (CCS 2022). Without it the script says how to get it
and exits with status 0.

What it does, all in one run on one machine:

1. Compiles ``FE/fe.cpp`` with ``g++ -O2`` into a temporary folder.
2. Writes one data set, n = 10^5 users, in the two formats (see ``zipf_items``):
   ``data/zipf,n=100000,B=16777216.txt`` for fe.cpp (whitespace-separated:
   n, then B, then the n items; fe.cpp reads ``../data/<name>,n=<n>,B=<B>.txt``
   relative to its working directory and writes ``../result/fe,...out``) and
   ``items.txt`` for privagg (one integer per line). The item values are the
   same in both files and lie in [1, B - 1], inside fe.cpp's domain [1, B] and
   privagg's [0, B).
3. Runs both as whole processes, once each to warm up (page cache; privagg's
   numba cache, kept in the temporary folder), then alternately
   peer, privagg, peer, privagg, ... ``repeats`` times, timing the wall clock
   around each subprocess and reading its peak RSS and CPU time from
   ``os.wait4`` (ru_maxrss is in KiB on Linux).
4. Prints a Markdown report: medians and ranges of wall time, peak RSS and CPU
   time, the peer/privagg ratio (median of the per-pair ratios), each side's
   own per-stage timings, and both sides' realised error as a sanity check.

Settings (fixed, as in the paper's experiment): epsilon = 1, delta = 1e-10
(fe.cpp always uses delta = 1 / n^2, which is 1e-10 at n = 10^5), B = 2^24,
c = 1 (b = floor(n / ln n) = 8685), full-domain estimation (every item of [B]).

Differences between the two programs that the timings include (see the report):
fe.cpp is single-threaded, draws a fresh ``std::random_device``-seeded
mt19937 per user, calibrates mu with its own binomial search, and after the
analyzer computes the error over [B] (including sorting the B errors) and
100 single-item queries; privagg uses numba's threads, seeded PCG64 (``--seed``),
shuffles the messages, and also computes the error over [B] and a top-k.

``run(sdpfe_dir, repeats)`` returns the figures as a dict, for other scripts.
Needs only the standard library and numpy (and g++ on the PATH).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_PRIVAGG = ROOT / ".venv" / "bin" / "privagg"
SDPFE_URL = "https://github.com/hkustDB/SDPFE"

N_USERS = 100_000
DOMAIN = 2**24
EPSILON = 1.0
DELTA = 1e-10          # what fe.cpp hard-codes: 1 / n^2
C = 1
PRIVAGG_SEED = 1
REPEATS = 5

# Data: ranks r = 1, 2, ... with Pr[r] proportional to r^-ZIPF_EXPONENT
# (numpy's Zipf with seed DATA_SEED, truncated to r <= B - 1 by redrawing), then
# rank r becomes item 1 + ((MIX (r - 1) + OFFSET) mod (B - 1)): a bijection of
# the ranks onto [1, B - 1] (MIX = 2654435761 is a prime not dividing B - 1),
# spreading the heavy items over the domain. Same exponent and constants as
# benchmarks/run.py, shifted to avoid item 0, which fe.cpp's domain [1, B] lacks.
ZIPF_EXPONENT = 1.1
MIX, OFFSET = 0x9E3779B1, 0x5851F42D
DATA_SEED = 2022
DATA_NAME = "zipf"

MISSING = (f"The authors' code is needed: clone {SDPFE_URL} (git clone {SDPFE_URL}) and pass the folder "
           "with --sdpfe-dir PATH or the environment variable SDPFE_DIR.")


def zipf_items(count: int, domain: int, seed: int = DATA_SEED) -> np.ndarray:
    """``count`` items of [1, domain - 1] with Zipf-distributed ranks (see ZIPF_EXPONENT)."""
    rng = np.random.default_rng(seed)
    span = domain - 1
    assert np.gcd(MIX, span) == 1
    ranks = rng.zipf(ZIPF_EXPONENT, count)
    while (redraw := ranks > span).any():
        ranks[redraw] = rng.zipf(ZIPF_EXPONENT, int(redraw.sum()))
    # (r - 1) MIX < 2^24 2^32: exact in uint64.
    return 1 + ((ranks - 1).astype(np.uint64) * np.uint64(MIX) + np.uint64(OFFSET)) % np.uint64(span)


def write_data(folder: Path, items: np.ndarray) -> tuple[Path, Path]:
    """The peer's data file (n, B, items) and privagg's (one item per line)."""
    body = "\n".join(map(str, items.tolist())) + "\n"
    peer = folder / "data" / f"{DATA_NAME},n={items.size},B={DOMAIN}.txt"
    peer.parent.mkdir(parents=True, exist_ok=True)
    peer.write_text(f"{items.size}\n{DOMAIN}\n" + body)
    ours = folder / "items.txt"
    ours.write_text(body)
    return peer, ours


def measure(cmd: list[str], cwd: Path, env: dict, log: Path) -> dict:
    """Run ``cmd`` to completion under GNU time: wall seconds, peak RSS (KiB) and CPU seconds of the child, and
    the one-minute load average as it starts.

    ``/usr/bin/time`` is what a user would run; measuring from this Python
    process instead would be wrong: Linux keeps a process's peak RSS across
    exec, so a child forked from a large benchmark process inherits the
    parent's peak. GNU time is small, so its child starts clean.
    """
    timer = shutil.which("time", path="/usr/bin:/bin")
    if timer is None:
        raise RuntimeError("GNU time is needed for honest peak-memory figures: apt-get install time")
    stats = log.with_suffix(".time")
    load = os.getloadavg()[0]  # the one-minute load average as the run starts (what `uptime` shows first)
    with open(log, "wb") as out:
        proc = subprocess.run([timer, "-f", "%e %M %U %S", "-o", str(stats), *map(str, cmd)], cwd=cwd, env=env,
                              stdout=out, stderr=subprocess.STDOUT)
    if proc.returncode != 0:
        tail = log.read_text(errors="replace")[-2000:]
        raise RuntimeError(f"{' '.join(map(str, cmd))} exited with {proc.returncode}:\n{tail}")
    wall, rss, user, system = stats.read_text().split()[-4:]
    return {"wall_s": float(wall), "peak_rss_kib": int(rss), "cpu_s": float(user) + float(system), "load": load}


def parse_peer(work: Path, log: Path) -> dict:
    """fe.cpp's own report (``../result/fe,*.out``, 'key = value' lines) and its stdout."""
    (result,) = (work / "result").glob("fe,*.out")
    values = {}
    for line in result.read_text().splitlines():
        key, sep, value = line.partition(" = ")
        if sep:
            values[key.strip()] = value.strip()
    match = re.search(r"total received messages (\d+)", log.read_text(errors="replace"))
    values["total received messages"] = match.group(1) if match else "?"
    result.unlink()
    return values


PEER_STAGES = {"randomize": "local randomizer time cost", "analyze": "analyzer time cost",
               "single query": "single element query time cost"}


def _shown(command: str, tmp: Path) -> str:
    """A command as a reader can repeat it: $TMP for the temporary folder, paths relative to the repository."""
    return command.replace(str(tmp), "$TMP").replace(str(ROOT) + "/", "")


def summary(values: list[float]) -> dict:
    return {"median": statistics.median(values), "min": min(values), "max": max(values)}


def run(sdpfe_dir, repeats: int = REPEATS, privagg=None) -> dict:
    """Compile, generate, warm up, then time peer and privagg alternately; the figures as a dict.

    Returns ``{"skipped": reason}`` when the peer's source or g++ is missing.
    """
    source = Path(sdpfe_dir).expanduser() / "FE" / "fe.cpp" if sdpfe_dir else None
    if source is None or not source.is_file():
        return {"skipped": MISSING + (f" ({source} not found)" if source else "")}
    gxx = shutil.which("g++")
    if gxx is None:
        return {"skipped": "g++ is not on the PATH (e.g. apt-get install build-essential)."}
    privagg = Path(privagg) if privagg else DEFAULT_PRIVAGG
    if not privagg.exists():
        raise FileNotFoundError(f"{privagg} not found (make .venv/installed)")

    with tempfile.TemporaryDirectory(prefix="sdpfe-bench-") as tmp:
        tmp = Path(tmp)
        peer_exe = tmp / "fe"
        subprocess.run([gxx, "-O2", "-o", str(peer_exe), str(source)], check=True, capture_output=True)
        items = zipf_items(N_USERS, DOMAIN)
        _, data = write_data(tmp, items)
        peer_cwd = tmp / "FE"          # fe.cpp reads ../data and writes ../result
        peer_cwd.mkdir()
        (tmp / "result").mkdir()
        report_path = tmp / "report.json"

        peer_cmd = [str(peer_exe), f"{EPSILON:g}", str(N_USERS), str(DOMAIN), f"{C:g}", DATA_NAME]
        ours_cmd = [str(privagg), "estimate", "fe1", "--input", str(data), "--epsilon", f"{EPSILON:g}",
                    "--delta", f"{DELTA:g}", "--domain", str(DOMAIN), "--c", f"{C:g}", "--full-domain",
                    "--seed", str(PRIVAGG_SEED), "--output", str(report_path)]
        env = dict(os.environ)
        env["NUMBA_CACHE_DIR"] = str(tmp / "numba-cache")  # keep the source tree clean
        peer_log, ours_log = tmp / "peer.log", tmp / "privagg.log"

        def peer_once() -> tuple[dict, dict]:
            return measure(peer_cmd, peer_cwd, env, peer_log), parse_peer(tmp, peer_log)

        def ours_once() -> tuple[dict, dict]:
            m = measure(ours_cmd, tmp, env, ours_log)
            return m, json.loads(report_path.read_text())

        _log("warm-up: peer")
        peer_once()
        _log("warm-up: privagg (fills the numba cache)")
        warm_ours, _ = ours_once()
        peer_runs, ours_runs = [], []
        for i in range(repeats):
            _log(f"repeat {i + 1}/{repeats}: peer")
            peer_runs.append(peer_once())
            _log(f"repeat {i + 1}/{repeats}: privagg")
            ours_runs.append(ours_once())
        ours_stdout = _shown(ours_log.read_text(errors="replace"), tmp)

    def figures(runs: list[tuple[dict, dict]]) -> dict:
        return {key: summary([m[key] for m, _ in runs]) for key in ("wall_s", "peak_rss_kib", "cpu_s")}

    peer_stages = {name: summary([float(info[key]) for _, info in peer_runs]) for name, key in PEER_STAGES.items()}
    stage_names = sorted({k for _, rep in ours_runs for k in rep["simulation"]["seconds"]})
    ours_stages = {name: summary([rep["simulation"]["seconds"].get(name, 0.0) for _, rep in ours_runs])
                   for name in stage_names}
    last_peer, last_ours = peer_runs[-1][1], ours_runs[-1][1]
    return {
        "settings": {"n_users": N_USERS, "domain": DOMAIN, "epsilon": EPSILON, "delta": DELTA, "c": C,
                     "repeats": repeats, "zipf_exponent": ZIPF_EXPONENT, "data_seed": DATA_SEED,
                     "distinct_items": int(np.unique(items).size)},
        "commands": {"peer": _shown(f"(cd {peer_cwd}) " + " ".join(peer_cmd), tmp),
                     "privagg": _shown(" ".join(ours_cmd), tmp)},
        "peer": {**figures(peer_runs), "stages_s": peer_stages},
        "privagg": {**figures(ours_runs), "stages_s": ours_stages, "cold_wall_s": warm_ours["wall_s"]},
        "ratio_wall": summary([p["wall_s"] / o["wall_s"] for (p, _), (o, _) in zip(peer_runs, ours_runs)]),
        "runs": [{"peer": p, "privagg": o} for (p, _), (o, _) in zip(peer_runs, ours_runs)],
        "ratio_peak_rss": summary([p["peak_rss_kib"] / o["peak_rss_kib"]
                                   for (p, _), (o, _) in zip(peer_runs, ours_runs)]),
        "peer_report": last_peer,
        "privagg_report": {k: last_ours[k] for k in ("parameters", "messages", "error", "simulation")},
        "privagg_stdout": ours_stdout,
    }


def _log(text: str) -> None:
    print(f"[sdpfe] {text}", file=sys.stderr, flush=True)


def markdown(res: dict) -> str:
    s = res["settings"]
    lines = [
        "privagg FE1 against SDPFE's `FE/fe.cpp` (g++ -O2), whole processes, same data, measured with GNU time "
        "(`/usr/bin/time`: wall clock, maximum resident set size, user + system CPU).",
        "",
        f"n = {s['n_users']}, B = 2^{DOMAIN.bit_length() - 1}, epsilon = {s['epsilon']:g}, delta = {s['delta']:g}, "
        f"c = {s['c']:g}, full domain; Zipf({s['zipf_exponent']}) items, seed {s['data_seed']}, "
        f"{s['distinct_items']} distinct; {s['repeats']} alternating repeats after one warm-up each; "
        f"{os.cpu_count()} CPUs.",
        "",
        f"* peer: `{res['commands']['peer']}`",
        f"* privagg: `{res['commands']['privagg']}`",
        "",
        "| program | wall s, median (min-max) | peak RSS MiB, median (min-max) | CPU s (user+sys), median |",
        "|---|---|---|---|",
    ]
    for name in ("peer", "privagg"):
        w, r, c = res[name]["wall_s"], res[name]["peak_rss_kib"], res[name]["cpu_s"]
        lines.append(f"| {name} | {w['median']:.2f} ({w['min']:.2f}-{w['max']:.2f}) | "
                     f"{r['median'] / 1024:.0f} ({r['min'] / 1024:.0f}-{r['max'] / 1024:.0f}) | {c['median']:.2f} |")
    rw, rr = res["ratio_wall"], res["ratio_peak_rss"]
    lines += [
        f"| **peer / privagg** | **{rw['median']:.2f}x** ({rw['min']:.2f}-{rw['max']:.2f}) | "
        f"{rr['median']:.2f}x ({rr['min']:.2f}-{rr['max']:.2f}) | "
        f"{res['peer']['cpu_s']['median'] / res['privagg']['cpu_s']['median']:.2f}x |",
        "",
        "The peer runs on one thread; privagg's analyzer uses numba's threads (one per core). The wall-time "
        "ratio is what a user waits for; the CPU-time ratio compares the work done.",
        "",
        "Every run, in the order run (load: the one-minute load average as each started):",
        "",
        "| pair | peer wall s | peer CPU s | load | privagg wall s | privagg CPU s | load | wall ratio | CPU ratio |",
        "|---|---|---|---|---|---|---|---|---|",
        *(f"| {i} | {r['peer']['wall_s']:.2f} | {r['peer']['cpu_s']:.2f} | {r['peer']['load']:.2f} | "
          f"{r['privagg']['wall_s']:.2f} | {r['privagg']['cpu_s']:.2f} | {r['privagg']['load']:.2f} | "
          f"{r['peer']['wall_s'] / r['privagg']['wall_s']:.2f}x | {r['peer']['cpu_s'] / r['privagg']['cpu_s']:.2f}x |"
          for i, r in enumerate(res.get("runs", []), 1)),
        "",
        f"privagg's first (warm-up) run, which compiled the numba kernels: {res['privagg']['cold_wall_s']:.2f} s.",
        "",
        "Per-stage times, median over the repeats (peer: its own clock() CPU seconds; privagg: "
        "`simulation.seconds`, wall):",
        "",
        "| program | stage | seconds, median (min-max) |",
        "|---|---|---|",
    ]
    for name in ("peer", "privagg"):
        for stage, v in res[name]["stages_s"].items():
            lines.append(f"| {name} | {stage} | {v['median']:.4g} ({v['min']:.4g}-{v['max']:.4g}) |")
    p, o = res["peer_report"], res["privagg_report"]
    par, err = o["parameters"], o["error"]
    lines += [
        "",
        "Sanity check, last run of each (not timed):",
        "",
        "| | mu | b | q | messages | max abs error | p99 | p50 |",
        "|---|---|---|---|---|---|---|---|",
        f"| peer | {p.get('mu')} | {p.get('modular size')} | {p.get('big prime')} | "
        f"{p.get('total received messages')} | {p.get('Linf error')} | {p.get('99% error')} | {p.get('50% error')} |",
        f"| privagg | {par.get('mu', float('nan')):.4g} | {par.get('bins')} | {par.get('modulus')} | "
        f"{o['messages']['total']} | {err['max_abs']:.4g} | {err['p99']:.4g} | {err['p50']:.4g} |",
        "",
        "The peer's own report (last run):",
        "",
        "```",
        *(f"{k} = {v}" for k, v in p.items()),
        "```",
        "",
        "privagg's printed summary (last run):",
        "",
        "```",
        res["privagg_stdout"].rstrip(),
        "```",
    ]
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sdpfe-dir", default=os.environ.get("SDPFE_DIR"),
                        help="checkout of https://github.com/hkustDB/SDPFE (default: $SDPFE_DIR)")
    parser.add_argument("--repeats", type=int, default=REPEATS, help="alternating pairs timed (default 5)")
    parser.add_argument("--privagg", default=str(DEFAULT_PRIVAGG), help="privagg executable")
    parser.add_argument("--json", metavar="FILE", help="also write the figures as JSON to FILE")
    args = parser.parse_args(argv)
    if args.repeats < 1:
        parser.error("--repeats must be >= 1")
    res = run(args.sdpfe_dir, args.repeats, args.privagg)
    if "skipped" in res:
        print(res["skipped"])
        return 0
    print(markdown(res))
    if args.json:
        Path(args.json).write_text(json.dumps(res, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
