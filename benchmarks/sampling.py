"""Part 6 of ``benchmarks/run.py``: sampling + secret sharing (DPDS, TSS) through the simulator.

    .venv/bin/python benchmarks/run.py --only sampling

``sampling(report)`` adds the part to run.py's Markdown report:

* faithful DPDS at n = 100, 200 and 400, N = 100, through ``privagg.simulate.simulate``: the deployed parties
  (protocols/sharing_parties.py) round by round, every pair of users agreeing a key (X25519, HKDF) and
  expanding its two shares (ChaCha20); the wall time against the floor, the same pairs' primitives timed
  alone in the same run (:func:`floor_per_pair`), the fitted growth in n, and the protocol's own estimate
  (``faithful_seconds``, which refuses a run past 90 s);
* fast DPDS at n = 10^7, N = 1,000 (the release drawn from its law; users per second);
* faithful TSS at n = 400, N = 100, alpha = 0.1 (the deployed reporters, S1, helpers and S2);
* the peak memory of each as a whole process (a child ``python -c`` under GNU time, ``sdpfe.measure``),
  against ``simulation_bytes``, the estimate privagg refuses runs by.

Populations: every category is held by ceil(beta n) users with beta = 1/(2N) (the data condition DPDS and TSS
rest on, and half the users), the other half draw Zipf(1.1) ranks truncated to N; shuffled.

Takes about two minutes on a 2-CPU machine. Needs numpy, privagg and GNU time (``/usr/bin/time``, as run.py). The
formatting helpers repeat run.py's, so that this module imports without it (the memory children import this
file).
"""

from __future__ import annotations

import math
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import sdpfe  # noqa: E402  (benchmarks/sdpfe.py: the whole-process measurement)
from benchfmt import load_average, note, ratio, seconds, verdict  # noqa: E402

from privagg.protocols import registry  # noqa: E402
from privagg.simulate import simulate  # noqa: E402
from privagg.simulate.rounds import FAITHFUL_SECONDS_MAX  # noqa: E402
from privagg.simulate.runner import simulation_bytes  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
HERE = Path(__file__).resolve().parent

EPSILON, DELTA = 1.0, 1e-6
ZIPF_EXPONENT = 1.1
DATA_SEED = 2022      # the populations
RUN_SEED = 1          # simulate(..., rng=RUN_SEED)
REPEATS = 3           # timed runs per setting (medians)
FLOOR_CALLS = 2000    # primitives timed per floor measurement

# name: (protocol, n, N, options, mode); beta = 1 / (2 N) throughout
SETTINGS = {
    "dpds-faithful-100": ("dpds", 100, 100, {}, "faithful"),
    "dpds-faithful-200": ("dpds", 200, 100, {}, "faithful"),
    "dpds-faithful": ("dpds", 400, 100, {}, "faithful"),
    "dpds-fast": ("dpds", 10**7, 1_000, {}, "fast"),
    "tss-faithful": ("tss", 400, 100, {"report_fraction": 0.1}, "faithful"),
}
MEMORY = ("dpds-faithful", "dpds-fast", "tss-faithful")  # measured in child processes


# --- populations and settings ------------------------------------------------------------

def population(n_users: int, domain: int, floor: int, rng: np.random.Generator) -> np.ndarray:
    """Item codes: ``floor`` users in each category, the other n - N floor Zipf ranks truncated to N; shuffled."""
    ranks = rng.zipf(ZIPF_EXPONENT, n_users - domain * floor)
    while (redraw := ranks > domain).any():
        ranks[redraw] = rng.zipf(ZIPF_EXPONENT, int(redraw.sum()))
    codes = np.concatenate([np.repeat(np.arange(domain, dtype=np.int64), floor), ranks - 1])
    rng.shuffle(codes)
    return codes


def setting(name: str):
    """(parameters, codes, mode) of a setting: calibrated for (EPSILON, DELTA) with beta = 1 / (2 N)."""
    protocol, n, domain, options, mode = SETTINGS[name]
    parameters = registry.calibrate(protocol, epsilon=EPSILON, delta=DELTA, n_users=n, domain_size=domain,
                                    min_count_fraction=1 / (2 * domain), **options)
    codes = population(n, domain, parameters.min_count, np.random.default_rng(DATA_SEED))
    return parameters, codes, mode


def child(name: str) -> None:
    """What a memory measurement runs in a fresh process: the setting, then one simulated run.

    After the set-up (imports, population, calibration) it prints its
    resident set and high-water mark (/proc/self/status: VmRSS, VmHWM, KiB),
    then resets the high-water mark to the current RSS (``5`` into
    /proc/self/clear_refs, Linux >= 4.0), so that the peak GNU time reports
    is the peak during the run; the last field says whether the reset worked.
    """
    parameters, codes, mode = setting(name)
    status = dict(line.split(":", 1) for line in Path("/proc/self/status").read_text().splitlines() if ":" in line)
    try:
        Path("/proc/self/clear_refs").write_text("5")
        reset = 1
    except OSError:
        reset = 0
    print("before", int(status["VmRSS"].split()[0]), int(status["VmHWM"].split()[0]), reset, flush=True)
    simulate(parameters, codes, mode=mode, rng=RUN_SEED)


def measure_child(name: str, folder: Path) -> dict:
    """Peak RSS (GNU time), wall and CPU of ``child(name)`` as a whole process; its RSS and peak before the run."""
    code = f"import sys; sys.path.insert(0, {str(HERE)!r}); import sampling; sampling.child({name!r})"
    log = folder / f"{name}.log"
    figures = sdpfe.measure([sys.executable, "-c", code], ROOT, dict(os.environ), log)
    _, rss, hwm, reset = next(line for line in log.read_text().splitlines() if line.startswith("before")).split()
    return {**figures, "before_kib": int(rss), "setup_peak_kib": int(hwm), "reset": reset == "1"}


# --- the floor -------------------------------------------------------------------------

def floor_per_pair(parameters) -> dict[str, float]:
    """Seconds of the primitives one pair of users costs, timed alone (FLOOR_CALLS calls each, medians of three):
    an X25519 agreement, HKDF-SHA256, and a ChaCha20 expansion to N field elements (two per pair)."""
    import secrets

    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey
    from cryptography.hazmat.primitives.kdf.hkdf import HKDF

    from privagg.core.sharing import expand

    key, other = X25519PrivateKey.generate(), X25519PrivateKey.generate().public_key()
    seed, field, N = secrets.token_bytes(32), parameters.field, parameters.domain_size

    def timed(fn) -> float:
        runs = []
        for _ in range(3):
            start = time.perf_counter()
            for _ in range(FLOOR_CALLS):
                fn()
            runs.append((time.perf_counter() - start) / FLOOR_CALLS)
        return statistics.median(runs)

    figures = {"x25519": timed(lambda: key.exchange(other)),
               "hkdf": timed(lambda: HKDF(hashes.SHA256(), 32, salt=None, info=b"x").derive(seed)),
               "expand": timed(lambda: expand(field, seed, N))}
    figures["pair"] = figures["x25519"] + figures["hkdf"] + 2 * figures["expand"]
    return figures


# --- formatting (shared ones in benchfmt.py) -----------------------------------------------

def mib(b: float) -> str:
    return f"{b / 2**20:,.1f} MiB" if b < 2**30 else f"{b / 2**30:.2f} GiB"


def count(x: int) -> str:
    """10^k for a power of ten (as the issue writes sizes), else the number."""
    k = round(math.log10(x))
    return f"10^{k}" if 10**k == x and k > 3 else str(x)


def clocked(fn, *args):
    """(fn(*args), wall seconds, CPU seconds of the whole process: every thread)."""
    wall, cpu = time.perf_counter(), time.process_time()
    result = fn(*args)
    return result, time.perf_counter() - wall, time.process_time() - cpu


def sampled_counts(run, codes: np.ndarray) -> tuple[np.ndarray, bool]:
    """The counts tau_j the server reconstructed (estimate times p'), and whether each is a whole number in
    [0, Pi_j]."""
    p = run.result.parameters.effective_probability
    scaled = run.result.estimates * p
    tau = np.rint(scaled).astype(np.int64)
    true = np.bincount(codes, minlength=tau.size)
    return tau, bool(np.allclose(scaled, tau, rtol=0, atol=1e-6) and (tau >= 0).all() and (tau <= true).all())


def increment(m: dict) -> int:
    """The run's own peak above the RSS it started from, in bytes (an upper bound if the reset failed)."""
    return (m["peak_rss_kib"] - m["before_kib"]) * 1024


def memory_row(label: str, m: dict, estimate: int, figures: str) -> list[str]:
    """A memory table row: the peaks, the run's increment against privagg's estimate (simulation_bytes)."""
    peak = max(m["peak_rss_kib"], m["setup_peak_kib"]) * 1024
    shown = mib(increment(m)) if m["reset"] else f"at most {mib(increment(m))} (no reset)"
    return [label, mib(peak), mib(m["setup_peak_kib"] * 1024), mib(m["before_kib"] * 1024), shown, mib(estimate),
            f"{verdict(increment(m) <= estimate)} ({increment(m) / estimate:.2f} of it)", figures]


# --- the part ----------------------------------------------------------------------------

def sampling(report) -> None:
    """Part 6: faithful DPDS (the deployed parties) against its floor and its growth, fast DPDS, faithful TSS, peak
    memory per process."""
    start_part, load_start = time.perf_counter(), load_average()

    # Faithful DPDS at three sizes: the deployed parties, n (n - 1) / 2 pairs each agreed once (masked_sums).
    dpds = {}
    for name in ("dpds-faithful-100", "dpds-faithful-200", "dpds-faithful"):
        params, codes, mode = setting(name)
        note(f"faithful DPDS at n = {params.n_users}, N = {params.domain_size}")
        runs = [clocked(simulate, params, codes, mode, RUN_SEED) for _ in range(REPEATS if params.n_users < 400 else 1)]
        run = runs[-1][0]
        dpds[params.n_users] = {"params": params, "run": run, "wall": statistics.median(w for _, w, _ in runs),
                                "cpu": statistics.median(c for _, _, c in runs),
                                "estimate": registry.get("dpds").rounds.faithful_seconds(params),
                                "counts": sampled_counts(run, codes)}
    sizes = sorted(dpds)
    biggest = dpds[sizes[-1]]
    floor = floor_per_pair(biggest["params"])
    slope = np.polyfit(np.log(sizes), np.log([dpds[n]["wall"] for n in sizes]), 1)[0]

    # Fast DPDS, n = 10^7, N = 1000.
    note("fast DPDS at n = 10^7, N = 1000")
    calibrate_start = time.perf_counter()
    fast_params, fast_codes, fast_mode = setting("dpds-fast")
    t_fast_setting = time.perf_counter() - calibrate_start
    fast_runs = [clocked(simulate, fast_params, fast_codes, fast_mode, RUN_SEED) for _ in range(REPEATS)]
    t_fast = statistics.median(w for _, w, _ in fast_runs)
    fast_tau, fast_ok = sampled_counts(fast_runs[-1][0], fast_codes)
    del fast_codes

    # Faithful TSS, n = 400, N = 100, alpha = 0.1.
    note("faithful TSS at n = 400, N = 100, alpha = 0.1")
    tss_params, tss_codes, tss_mode = setting("tss-faithful")
    tss_runs = [clocked(simulate, tss_params, tss_codes, tss_mode, RUN_SEED) for _ in range(REPEATS)]
    tss_run = tss_runs[-1][0]
    t_tss, cpu_tss = statistics.median(w for _, w, _ in tss_runs), statistics.median(c for _, _, c in tss_runs)
    tss_tau, tss_ok = sampled_counts(tss_run, tss_codes)
    tss_estimate = registry.get("tss").rounds.faithful_seconds(tss_params)

    # Peak memory, each setting in a fresh process.
    memory = {}
    with tempfile.TemporaryDirectory(prefix="privagg-bench-") as tmp:
        for name in MEMORY:
            note(f"peak memory: {name} in a child process")
            memory[name] = measure_child(name, Path(tmp))

    report.add(
        "## 6. Sampling and secret sharing: the deployed parties in the simulator",
        "",
        f"Every run is calibrated by `registry.calibrate(protocol, epsilon={EPSILON:g}, delta={DELTA:g}, n_users=n, "
        "domain_size=N, min_count_fraction=beta, ...)` (exact calibration) and run by `simulate(params, codes, "
        f"mode, rng={RUN_SEED})`. Populations: beta = 1/(2N), so every category is held by ceil(beta n) users (the "
        "data condition of DPDS and TSS; `simulate` checks it) and the other half of the users draw "
        f"Zipf({ZIPF_EXPONENT}) ranks truncated to N; shuffled, data seed {DATA_SEED}. Times are medians of "
        f"{REPEATS} runs in this process (one at n = 400); CPU is the process's CPU time over all its threads. "
        f"Load average at the start of the part: {load_start}.",
        "",
        "A faithful run is the deployed protocol (protocols/sharing_parties.py, two_server_parties.py: the parties "
        "the services run), round by round through the simulator's harness. DPDS: each user advertises an X25519 "
        "key and backs his two secrets up to the n - 1 others (Shamir), every pair of users agrees a secret and "
        "expands its two shares from it (ChaCha20; the harness derives each pair once for both, as each would "
        "alone), each user sends his masked sum and reveals his shares of the others' mask seeds, and the server "
        "rebuilds the masks and releases the sum. It replaced an additive-share simulation of the paper's users "
        "(n (n - 1) N share elements at about 490 M/s at n = 2000, N = 100, in an earlier run of this part), which "
        "was not the protocol the services run.",
        "",
        f"### Faithful DPDS, N = {biggest['params'].domain_size}, n = {', '.join(map(str, sizes))}",
        "",
        "The floor is what the run cannot do without, per pair of users, timed alone in this run "
        f"({FLOOR_CALLS} calls each, medians of three): an X25519 agreement {floor['x25519'] * 1e6:.1f} us, HKDF "
        f"{floor['hkdf'] * 1e6:.1f} us, a ChaCha20 expansion to N elements {floor['expand'] * 1e6:.1f} us (two per "
        f"pair): {floor['pair'] * 1e6:.1f} us a pair.",
        "",
    )
    rows = []
    for n in sizes:
        d = dpds[n]
        pairs = n * (n - 1) / 2
        tau, ok = d["counts"]
        rows.append([str(n), f"{pairs:,.0f}", seconds(d["wall"]), seconds(d["cpu"]), f"{d['wall'] / pairs * 1e6:.0f} us",
                     ratio(d["wall"] / (pairs * floor["pair"])), seconds(d["estimate"]),
                     f"counts {'whole, within [0, Pi_j]' if ok else '**not** whole within [0, Pi_j]'}; "
                     f"{int(tau.sum())} counted"])
    report.table(["n", "pairs", "wall", "CPU", "wall / pair", "wall / floor", "privagg's estimate (faithful_seconds)",
                  "check"], rows)
    report.add(
        f"Wall time grows as n^{slope:.2f} over n = {sizes[0]} to {sizes[-1]} (least squares on logs; the pairs grow "
        f"as n^2, the users' own work as n). The estimate privagg refuses runs by (above "
        f"{FAITHFUL_SECONDS_MAX:.0f} s, naming --mode fast) is `faithful_seconds`, from rates measured on 2 busy "
        "cores; a faithful DPDS past about n = 800 at N = 100 is refused.",
        "",
        f"### Fast DPDS, n = {count(fast_params.n_users)}, N = {fast_params.domain_size}",
        "",
        f"beta = {fast_params.min_count_fraction:g} (>= {fast_params.min_count} users per category), p = "
        f"{fast_params.sampling_probability:.4f}. The release is exact over the survivors, so the fast path draws "
        f"the participants' counts. Building the population and calibrating took {seconds(t_fast_setting)}.",
        "",
    )
    report.table(["what", "wall", "users / s", "check"], [[
        "`simulate(..., mode='fast')`", seconds(t_fast), f"{fast_params.n_users / t_fast / 1e6:,.0f} M/s",
        f"counts {'whole, within [0, Pi_j]' if fast_ok else '**not** whole within [0, Pi_j]'}; "
        f"{int(fast_tau.sum()):,} counted, n p = {fast_params.n_users * fast_params.sampling_probability:,.0f}"]])
    t = tss_run.transcript
    report.add(
        f"### Faithful TSS, n = {tss_params.n_users}, N = {tss_params.domain_size}, alpha = "
        f"{tss_params.report_fraction:g}",
        "",
        f"beta = {tss_params.min_count_fraction:g} (>= {tss_params.min_count} users per category), p = "
        f"{tss_params.sampling_probability:.4f}, p p_chi = {tss_params.effective_probability:.4f}, q = "
        f"{tss_params.modulus}. The deployed reporters send S1 their report sets of alpha N = "
        f"{tss_params.report_size} items, share each entry among the item's elected helpers ("
        f"{t['user']['messages_sent'] - 2 * tss_params.n_users:,} messages holding {t['user']['sent shares']:,} "
        f"shares), the helpers send S2 their sums ({t['s2']['received']:,} elements).",
        "",
    )
    report.table(["what", "wall", "CPU", "privagg's estimate", "check"], [
        ["`simulate`, whole run", seconds(t_tss), seconds(cpu_tss), seconds(tss_estimate),
         f"counts {'whole, within [0, Pi_j]' if tss_ok else '**not** whole within [0, Pi_j]'}; "
         f"{int(tss_tau.sum())} counted, n p p_chi = {tss_params.n_users * tss_params.effective_probability:.1f}"]])

    labels = {"dpds-faithful": f"faithful DPDS, n = {sizes[-1]}, N = {biggest['params'].domain_size}",
              "dpds-fast": f"fast DPDS, n = {count(fast_params.n_users)}, N = {fast_params.domain_size}",
              "tss-faithful": f"faithful TSS, n = {tss_params.n_users}, N = {tss_params.domain_size}"}
    estimates = {name: simulation_bytes(setting(name)[0], SETTINGS[name][4]) for name in MEMORY}
    within = {name: increment(memory[name]) <= estimates[name] for name in MEMORY}
    report.add(
        "### Peak memory (whole processes)",
        "",
        "Each setting again in a fresh `python -c` process (`sampling.child(name)`: imports, population, "
        "calibration, then one `simulate`), under GNU time (`sdpfe.measure`: the maximum resident set size, as "
        "`/usr/bin/time -v` reports it). After its set-up the child notes its resident set (VmRSS) and high-water "
        "mark, then resets the mark (`5` into /proc/self/clear_refs), so GNU time's figure is the process's peak "
        "during the run; the whole-process peak is the larger of the two. The run's increment is its peak less "
        "the RSS it started from. privagg's estimate is `simulation_bytes(params, mode)` (a faithful run holds "
        "every message of the run at once: the protocol's `faithful_bytes`), which privagg refuses runs that "
        "cannot fit by; the increment should stay within it.",
        "",
    )
    report.table(["setting", "peak RSS, whole process", "set-up's peak", "RSS before the run", "the run's increment",
                  "privagg's estimate", "increment within it", "what it holds"],
                 [memory_row(labels[name], memory[name], estimates[name], figures) for name, figures in (
                     ("dpds-faithful", "n (n - 1) backups and revealed entries, n keys and masked sums"),
                     ("dpds-fast", f"the codes, n x 8 bytes = {mib(8 * fast_params.n_users)}"),
                     ("tss-faithful", "round 2's messages and the users' kept shares"))])
    report.add(
        "Wall and CPU of the child processes, set-up included: " + "; ".join(
            f"{name} {m['wall_s']:.2f} s wall, {m['cpu_s']:.2f} s CPU" for name, m in memory.items()) + ".",
        "",
        "### Verdicts",
        "",
    )
    report.table(["target", "measured", "verdict"], [
        [f"faithful DPDS grows as the pairs, about n^2 ({sizes[0]} to {sizes[-1]} users)", f"n^{slope:.2f}",
         verdict(slope <= 2.2)],
        [f"faithful DPDS at n = {sizes[-1]} within {FAITHFUL_SECONDS_MAX:.0f} s (the default limit)",
         seconds(biggest["wall"]), verdict(biggest["wall"] <= FAITHFUL_SECONDS_MAX)],
        ["privagg's estimate (faithful_seconds) not below the measured wall, every size",
         ", ".join(f"{seconds(dpds[n]['estimate'])} for {seconds(dpds[n]['wall'])}" for n in sizes),
         verdict(all(dpds[n]["estimate"] >= dpds[n]["wall"] for n in sizes))],
        *([f"peak memory, {labels[name]}: the run's increment within privagg's estimate",
           f"{mib(increment(memory[name]))} of {mib(estimates[name])}", verdict(within[name])] for name in MEMORY),
        [f"faithful DPDS at n = {sizes[-1]} against the floor (X25519, HKDF, 2 expansions per pair), same run",
         ratio(biggest["wall"] / (sizes[-1] * (sizes[-1] - 1) / 2 * floor["pair"])), "no target"],
    ])
    report.add(f"Part 6 took {seconds(time.perf_counter() - start_part)}; load average at its end: {load_average()}.",
               "")
