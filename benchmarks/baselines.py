"""Part 8 of ``make bench``: the local-model baselines (grr, oue, olh, hadamard) at d = 1,024, eps = 1.

OLH's full-domain decoding against pure-LDP (the best-known Python library of local frequency oracles), measured
in the same run on the same data: its ``LHClient`` / ``LHServer`` (``use_olh=True``: g = round(e^eps) + 1, as
privagg's) run in a subprocess under a virtualenv of its own (it needs ``xxhash<4``, scikit-learn and statsmodels beside
it): the one ``PURE_LDP_PYTHON`` names, or else one this part makes from the package registry the first time, in
PEER_VENV (:func:`_peer_python`), from a script this part writes into a temporary folder; it reads the users'
items from an .npy file the part writes. The peer's server is timed over its
aggregation and estimation (``aggregate_all`` then ``check_and_update_estimates``), which hash every item of [d]
for every report in Python; it decodes a few thousand users a second, so it gets PEER_USERS users (the first
PEER_USERS of the data) while privagg's ``OLHAnalyzer`` (agg_init / agg_update / finalize, FE1's numba kernels)
decodes those same users and all N_USERS, in this process. Both sides' estimates are checked against the true
counts and the theory (privagg's exact max-error bound and standard error at the same p and g).

Then every baseline's randomizer and full-domain decoder at N_USERS users: the issue's target is at least
1 M users per second through OLH's decoder at d = 1,024. Where the peer cannot be installed (no registry) it is
skipped (the report says why and how to install it) and the rest runs.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from benchfmt import load_average, note, ratio, seconds, verdict  # noqa: E402

N_USERS, DOMAIN, EPSILON = 10**6, 1024, 1.0
PEER_USERS = 20_000             # the peer decodes ~3,000 users/s: ~7 s here
PROTOCOLS = ("grr", "oue", "olh", "hadamard")
REPEATS = 3                     # privagg's timings at N_USERS: the median of this many runs (OUE's randomizer: one)
SMALL_REPEATS = 5               # privagg's OLH decoding at PEER_USERS
WARM_USERS = 1_000
TARGET_USERS_PER_S = 1e6        # OLH decoding at d = 1,024 (the issue)
QUOTED_PEER_USERS_PER_S = 3_000  # pure-LDP's OLH decoding at d = 1,024, as the issue quotes it
DATA_SEED, CLIENT_SEED, PEER_SEED = 2022, 1, 1
ZIPF_EXPONENT, MIX, OFFSET = 1.1, 0x9E3779B1, 0x5851F42D  # benchmarks/run.py's data, over [DOMAIN]

WHOLE_REPEATS = 5               # privagg's whole process on the text file (alternating with pure-LDP's runs)
WHOLE_TARGET = 1000.0           # issue 48: the whole process at least 1000x pure-LDP's users/s
PEER_ENV = "PURE_LDP_PYTHON"
PEER_PACKAGES = ("pure-ldp==1.2.0", "xxhash<4", "scikit-learn", "statsmodels")  # 1.2.0: the version the issue quotes
PEER_VENV = Path(__file__).resolve().parent.parent / ".bench-peers" / "pure-ldp"  # made once, kept (git ignores it)
PEER_INSTALL = (f"python3 -m venv /tmp/pureldp-venv && /tmp/pureldp-venv/bin/pip install "
                f"{' '.join(repr(p) if '<' in p else p for p in PEER_PACKAGES)}")

# Run by the peer's interpreter: argv = items.npy epsilon domain seed out.json. Items are codes of [d]
# (the identity index mapper: pure-LDP's default maps item x to index x - 1).
PEER_SCRIPT = '''\
import json, random, sys, time
from importlib.metadata import version

import numpy as np
from pure_ldp.frequency_oracles.local_hashing import LHClient, LHServer

path, epsilon, domain, seed, out = sys.argv[1], float(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), sys.argv[5]
items = np.load(path).tolist()
random.seed(seed)
np.random.seed(seed)
identity = lambda x: x
client = LHClient(epsilon=epsilon, d=domain, use_olh=True, index_mapper=identity)
server = LHServer(epsilon=epsilon, d=domain, use_olh=True, index_mapper=identity)
start = time.perf_counter()
reports = [client.privatise(x) for x in items]
randomize_s = time.perf_counter() - start
start = time.perf_counter()
server.aggregate_all(reports)
server.check_and_update_estimates()
decode_s = time.perf_counter() - start
with open(out, "w") as f:
    json.dump({"randomize_s": randomize_s, "decode_s": decode_s, "g": server.g, "p": server.p, "n": server.n,
               "estimates": np.asarray(server.get_estimates, dtype=float).tolist(),
               "versions": {m: version(m) for m in ("pure-ldp", "xxhash", "numpy")}}, f)
'''


def zipf_items(count: int, domain: int, seed: int = DATA_SEED) -> np.ndarray:
    """Zipf ranks (exponent ZIPF_EXPONENT, redrawn above ``domain``), rank r to item (MIX (r - 1) + OFFSET) mod
    domain (a bijection for a power-of-two domain): benchmarks/run.py's data, here over [DOMAIN]."""
    rng = np.random.default_rng(seed)
    ranks = rng.zipf(ZIPF_EXPONENT, count)
    while (redraw := ranks > domain).any():
        ranks[redraw] = rng.zipf(ZIPF_EXPONENT, int(redraw.sum()))
    return (((ranks - 1).astype(np.uint64) * np.uint64(MIX) + np.uint64(OFFSET)) % np.uint64(domain)).astype(np.int64)


def _decode(analyzer, messages) -> tuple[float, np.ndarray]:
    start = time.perf_counter()
    agg = analyzer.agg_init()
    analyzer.agg_update(agg, messages)
    estimates = analyzer.finalize(agg).estimates
    return time.perf_counter() - start, estimates


def _median_decode(analyzer, messages, repeats: int) -> tuple[float, np.ndarray]:
    runs = [_decode(analyzer, messages) for _ in range(repeats)]
    return statistics.median(t for t, _ in runs), runs[-1][1]


def _rate(users_per_s: float) -> str:
    return f"{users_per_s / 1e6:,.2f} M" if users_per_s >= 1e6 else f"{users_per_s:,.0f}"


def _errors(estimates: np.ndarray, truth: np.ndarray) -> tuple[float, float]:
    error = np.asarray(estimates, dtype=np.float64) - truth
    return float(np.abs(error).max()), float(np.sqrt(np.mean(error**2)))


def _peer_python() -> tuple[str | None, str]:
    """(the python of a virtualenv holding pure-LDP, or None; why not): ``PURE_LDP_PYTHON`` if set, else PEER_VENV,
    made and filled from the package registry the first time (a minute or so; reused afterwards)."""
    if os.environ.get(PEER_ENV):
        return os.environ[PEER_ENV], ""
    python = PEER_VENV / "bin" / "python"
    ready = PEER_VENV / "installed"
    if not ready.exists():
        note(f"installing pure-LDP into {PEER_VENV} (once)")
        steps = [[sys.executable, "-m", "venv", "--clear", str(PEER_VENV)],
                 [str(python), "-m", "pip", "install", "--quiet", *PEER_PACKAGES]]
        for step in steps:
            done = subprocess.run(step, capture_output=True, text=True)
            if done.returncode != 0:
                tail = (done.stderr.strip().splitlines() or ["(no output)"])[-1]
                return None, (f"not run: installing it failed ({' '.join(step[:4])}...: {tail}); install it with "
                              f"`{PEER_INSTALL}`, then `{PEER_ENV}=/tmp/pureldp-venv/bin/python make bench`")
        ready.write_text(" ".join(PEER_PACKAGES) + "\n")
    return str(python), ""


def _peer(items: np.ndarray) -> dict | str:
    """pure-LDP's OLH on ``items`` in its own interpreter: its figures, or why it did not run."""
    python, why = _peer_python()
    if python is None:
        return why
    with tempfile.TemporaryDirectory(prefix="privagg-bench-") as tmp:
        folder = Path(tmp)
        (folder / "peer_olh.py").write_text(PEER_SCRIPT)
        np.save(folder / "items.npy", items)
        try:
            done = subprocess.run([python, "peer_olh.py", "items.npy", repr(EPSILON), str(DOMAIN), str(PEER_SEED),
                                   "out.json"], cwd=folder, capture_output=True, text=True)
        except OSError as err:
            return f"failed: `{python}` does not run ({err}); install pure-LDP with `{PEER_INSTALL}`"
        if done.returncode != 0:
            tail = (done.stderr.strip().splitlines() or ["(no output)"])[-1]
            return f"failed: `{python} peer_olh.py` exited with status {done.returncode}: {tail}"
        return json.loads((folder / "out.json").read_text())


def _whole_process(items: np.ndarray, peer: dict | str) -> dict:
    """``privagg estimate olh`` as a user runs it on a text file of the N_USERS items, whole processes under GNU time
    (read, calibrate, randomize, decode, report), WHOLE_REPEATS runs alternating with pure-LDP's (when it runs: its
    decode rate, as the issue measures it, from each of its runs)."""
    import sdpfe

    runs, peers = [], [peer] if isinstance(peer, dict) else []
    with tempfile.TemporaryDirectory(prefix="privagg-bench-") as tmp:
        folder = Path(tmp)
        text = folder / "items.txt"
        text.write_text("".join(f"{x}\n" for x in items.tolist()))
        command = [sys.executable, "-m", "privagg", "estimate", "olh", "--input", text, "--epsilon", f"{EPSILON:g}",
                   "--domain", DOMAIN, "--seed", 1, "--output", folder / "report.json"]
        for r in range(WHOLE_REPEATS):
            note(f"local baselines: privagg estimate olh, whole process ({r + 1}/{WHOLE_REPEATS})")
            runs.append(sdpfe.measure(command, folder, dict(os.environ), folder / "olh.log"))
            runs[-1]["stages"] = json.loads((folder / "report.json").read_text())["simulation"]["seconds"]
            if peers and r + 1 < WHOLE_REPEATS:
                again = _peer(items[:PEER_USERS])
                if isinstance(again, dict):
                    peers.append(again)
    return {"runs": runs, "peer_rates": [PEER_USERS / p["decode_s"] for p in peers]}


def _run(run: dict) -> str:
    return f"{seconds(run['wall_s'])} (load {run['load']:.1f}; {seconds(run['cpu_s'])})"


def _report_whole(report, whole: dict, peer_rate: float | None) -> None:
    from benchfmt import ROWS

    walls = [r["wall_s"] for r in whole["runs"]]
    best, median = min(walls), statistics.median(walls)
    stages = min(whole["runs"], key=lambda r: r["wall_s"])["stages"]
    peer_rates = whole["peer_rates"]
    text = (f"The whole process a user runs, `privagg estimate olh --input items.txt --epsilon {EPSILON:g} --domain "
            f"{DOMAIN} --seed 1` on a text file of the {N_USERS:,} items, {len(walls)} runs under GNU time alternating "
            f"with pure-LDP's (the 1-minute load at each start; CPU, user + system): "
            f"{', '.join(_run(r) for r in whole['runs'])} (peak RSS "
            f"{max(r['peak_rss_kib'] for r in whole['runs']) / 1024:,.0f} MiB); {_rate(N_USERS / best)} users/s "
            f"best, {_rate(N_USERS / median)} by the median. Its best run's stages: "
            + ", ".join(f"{k} {seconds(v)}" for k, v in stages.items())
            + f"; the rest, {seconds(best - sum(stages.values()))}, is the interpreter and the imports.")
    if peer_rates:
        best_ratio = N_USERS / best / max(peer_rates)
        median_ratio = N_USERS / median / statistics.median(peer_rates)
        text += (f" pure-LDP's decoding in the same runs: {', '.join(f'{r:,.0f}' for r in peer_rates)} users/s. "
                 f"Whole process against pure-LDP's decoding: {ratio(best_ratio)} best against best, "
                 f"{ratio(median_ratio)} by medians (target at least {WHOLE_TARGET:g}x: "
                 f"{verdict(min(best_ratio, median_ratio) >= WHOLE_TARGET)}).")
        ROWS.append([f"OLH whole process, n = 10^6, d = {DOMAIN:,}, eps {EPSILON:g}, text file",
                     f"pure-LDP decode: {statistics.median(peer_rates):,.0f} users/s",
                     f"{_rate(N_USERS / median)} users/s", f"{ratio(median_ratio)} (best {ratio(best_ratio)})",
                     f">= {WHOLE_TARGET:g}x: {verdict(min(best_ratio, median_ratio) >= WHOLE_TARGET)}"])
    report.add(text, "")


def baselines(report) -> None:
    import numba

    from privagg.protocols import registry

    began, start_load = time.perf_counter(), load_average()
    items = zipf_items(N_USERS, DOMAIN)
    small = items[:PEER_USERS]
    truth, small_truth = np.bincount(items, minlength=DOMAIN), np.bincount(small, minlength=DOMAIN)
    params = {p: registry.calibrate(p, epsilon=EPSILON, n_users=N_USERS, domain_size=DOMAIN) for p in PROTOCOLS}

    note("local baselines: warming up (FE1's numba kernels compile or load from their cache)")
    start = time.perf_counter()
    for p in PROTOCOLS:
        _decode(registry.analyzer(params[p]), registry.client(params[p]).randomize(items[:WARM_USERS], rng=0))
    warm_s = time.perf_counter() - start

    rows, olh = [], {}
    for p in PROTOCOLS:
        note(f"local baselines: {p} at n = {N_USERS}, d = {DOMAIN}")
        client, analyzer, repeats = registry.client(params[p]), registry.analyzer(params[p]), REPEATS
        randomize = []
        for r in range(1 if p == "oue" else repeats):
            start = time.perf_counter()
            messages = client.randomize(items, rng=CLIENT_SEED + r)
            randomize.append(time.perf_counter() - start)
        randomize_s = statistics.median(randomize)
        decode_s, estimates = _median_decode(analyzer, messages, repeats)
        worst, _ = _errors(estimates, truth)
        bound = params[p].max_error_bound()
        rows.append([p, f"{len(messages) / N_USERS:,.1f}", seconds(randomize_s) + (" (1 run)" if p == "oue" else ""),
                     _rate(N_USERS / randomize_s), seconds(decode_s), _rate(N_USERS / decode_s), f"{worst:,.0f}",
                     f"{bound:,.0f}", "yes" if worst <= bound else "**no**"])
        if p == "olh":
            olh = {"messages": messages, "decode_s": decode_s, "estimates": estimates}
            threads = numba.get_num_threads()
            numba.set_num_threads(1)
            try:
                olh["single_s"], olh["single_estimates"] = _median_decode(analyzer, messages, repeats)
            finally:
                numba.set_num_threads(threads)
            olh["threads"] = threads
        del messages

    note(f"local baselines: OLH at n = {PEER_USERS}, privagg then pure-LDP")
    small_params = registry.calibrate("olh", epsilon=EPSILON, n_users=PEER_USERS, domain_size=DOMAIN)
    small_messages = registry.client(small_params).randomize(small, rng=CLIENT_SEED)
    small_s, small_estimates = _median_decode(registry.analyzer(small_params), small_messages, SMALL_REPEATS)
    peer = _peer(small)
    whole = _whole_process(items, peer)
    took = time.perf_counter() - began

    big, sp = params["olh"], small_params
    olh_rate = N_USERS / olh["decode_s"]
    peer_rate = PEER_USERS / peer["decode_s"] if isinstance(peer, dict) else None
    table = []
    if isinstance(peer, dict):
        worst, rms = _errors(peer["estimates"], small_truth)
        table.append([f"pure-LDP {peer['versions']['pure-ldp']} `LHServer` (1 thread, Python)", f"{PEER_USERS:,}",
                      seconds(peer["decode_s"]), f"{peer_rate:,.0f}", "1.0x", f"{worst:,.0f}",
                      f"{sp.max_error_bound():,.0f}", f"{rms:,.0f}", f"{float(sp.standard_error(0)):,.0f}"])
    for label, n, s, est, p in (
            (f"privagg `OLHAnalyzer` ({olh['threads']} threads)", PEER_USERS, small_s, small_estimates, sp),
            (f"privagg `OLHAnalyzer` ({olh['threads']} threads)", N_USERS, olh["decode_s"], olh["estimates"], big),
            ("privagg `OLHAnalyzer` (1 thread)", N_USERS, olh["single_s"], olh["single_estimates"], big)):
        worst, rms = _errors(est, small_truth if n == PEER_USERS else truth)
        versus = [ratio(n / s / peer_rate)] if peer_rate else []
        table.append([label, f"{n:,}", seconds(s), f"{n / s:,.0f}", *versus,
                      f"{worst:,.0f}", f"{p.max_error_bound():,.0f}", f"{rms:,.0f}",
                      f"{float(p.standard_error(0)):,.0f}"])

    report.add("## 8. Local baselines: OLH decoding against pure-LDP, and every baseline's throughput", "",
               f"eps = {EPSILON:g} (pure eps-LDP, no delta), d = {DOMAIN:,}; users' items Zipf ({ZIPF_EXPONENT}) over "
               f"[d], spread by the same bijection as part 1 (seed {DATA_SEED}). OLH hashes into g = round(e^eps) + 1 "
               f"= {big.bins} values on both sides (privagg: FE1's universal family mod {big.modulus}, collision "
               f"probability {big.hash.collision_probability:.4f}; pure-LDP: xxhash32 mod g, seeded per user). "
               "Decoding = every item of [d] estimated from the reports: privagg's `agg_init` / `agg_update` / "
               "`finalize` in this process, median of "
               f"{REPEATS} runs at n = {N_USERS:,} and of {SMALL_REPEATS} at n = {PEER_USERS:,}, after a warm-up call "
               f"of every protocol on {WARM_USERS:,} users that compiles (or loads from numba's cache) FE1's kernels "
               f"({seconds(warm_s)}, not counted); pure-LDP's `LHServer.aggregate_all` + `check_and_update_estimates`"
               " in a subprocess on the same items, one run. pure-LDP hashes all d items for every report in Python, "
               f"so it gets the first {PEER_USERS:,} users only; users per second are compared across the two sizes "
               "(its cost is linear in n). The bound and sd columns are privagg's exact theory at that n (the same "
               "p and g; pure-LDP's debiasing takes the collision probability as 1/g). Load average at the start: "
               f"{start_load}.", "")
    if not isinstance(peer, dict):
        report.add(f"pure-LDP {peer}.", "")
    report.table(["decoder", "n", "decode", "users / s", *(["/ pure-LDP"] if peer_rate else []), "max abs error",
                  "bound (beta 0.05)", "RMS error", "sd at count 0"], table)
    lines = [f"OLH decoding at n = 10^6, d = {DOMAIN:,}: {olh_rate / 1e6:.2f} M users/s with {olh['threads']} threads "
             f"({N_USERS / olh['single_s'] / 1e6:.2f} M on one); target at least 1 M users/s: "
             f"{verdict(olh_rate >= TARGET_USERS_PER_S)}."]
    if isinstance(peer, dict):
        worst_peer, _ = _errors(peer["estimates"], small_truth)
        worst_ours, _ = _errors(small_estimates, small_truth)
        lines.append(f" pure-LDP measured at {peer_rate:,.0f} users/s (the issue quotes about "
                     f"{QUOTED_PEER_USERS_PER_S:,}), so privagg decodes {ratio(olh_rate / peer_rate)} as many users a "
                     f"second at n = 10^6 ({ratio(PEER_USERS / small_s / peer_rate)} at n = {PEER_USERS:,}). "
                     f"Both within the max-error bound at n = {PEER_USERS:,}: "
                     f"{'yes' if max(worst_peer, worst_ours) <= sp.max_error_bound() else '**no**'} (pure-LDP's "
                     f"estimator assumes collision probability 1/g = {1 / sp.bins:g}, the same p = {peer['p']:.4f}). "
                     f"pure-LDP's client randomized those users at {PEER_USERS / peer['randomize_s']:,.0f} users/s "
                     "(one Python call per user).")
    report.add("".join(lines), "")
    _report_whole(report, whole, peer_rate)
    report.add(f"### 8b. Every local baseline at n = 10^6, d = {DOMAIN:,}: randomizer and full-domain decoder", "",
               f"`registry.client(params).randomize(items, rng=seed)` and the analyzer as above, in this process, "
               f"median of {REPEATS} runs each (OUE's randomizer once: it draws d - 1 coins per user and sends about "
               f"{params['oue'].messages_per_user:.0f} messages each). No per-user Python loop in any of them. "
               "Error = the largest |estimate - true count| over [d], against the protocol's max-error bound "
               "(beta 0.05, Bernstein and a union bound).", "")
    report.table(["protocol", "messages / user", "randomize", "users / s", "decode", "users / s", "max abs error",
                  "bound", "within"], rows)
    report.add(f"Part 8 took {seconds(took)} (load average at the end: {load_average()}).", "")
