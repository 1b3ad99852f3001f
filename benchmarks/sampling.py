"""Part 6 of ``benchmarks/run.py``: sampling + additive secret sharing (DPDS, TSS) at the issue's sizes.

    .venv/bin/python benchmarks/run.py --only sampling

``sampling(report)`` adds the part to run.py's Markdown report:

* faithful DPDS at n = 2,000, N = 100 through ``privagg.simulate.simulate``:
  the whole run and the sharing alone (``run.seconds["share"]``), the share
  elements drawn (n (n - 1) N = 3.998 x 10^8) per second against the
  issue's 10^8 per second on 2 cores; and, alternately in the same run, a
  plain single-threaded numpy loop doing the same sharing and summation
  (:func:`numpy_sharing`), checked to reconstruct its own sampled counts;
* fast DPDS at n = 10^7, N = 1,000 (the sharing skipped; users per second);
* faithful TSS at n = 10^4, N = 1,000, alpha = 0.1 (about 10^9 share
  elements);
* the peak memory of each as a whole process (a child ``python -c`` under
  GNU time, ``sdpfe.measure``), next to the O(n N) figures and to the
  n x n x N elements a sharing that held every share at once would need.

Populations: every category is held by ceil(beta n) users with beta =
1/(2N) (the data condition DPDS and TSS rest on, and half the users), the
other half draw Zipf(1.1) ranks truncated to N; shuffled.

Takes about a minute on a 2-CPU machine. Needs numpy, privagg and GNU time
(``/usr/bin/time``, as run.py). The formatting helpers repeat run.py's, so
that this module imports without it (the memory children import this file).
"""

from __future__ import annotations

import dataclasses
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
from privagg.protocols.sampling_sharing import SumServer  # noqa: E402
from privagg.simulate import simulate  # noqa: E402
from privagg.simulate.secret_sharing import run_secret_sharing, sharing_bytes  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
HERE = Path(__file__).resolve().parent

EPSILON, DELTA = 1.0, 1e-6
ZIPF_EXPONENT = 1.1
DATA_SEED = 2022      # the populations
RUN_SEED = 1          # simulate(..., rng=RUN_SEED)
BASELINE_SEED = 5     # the numpy loop's coins and shares
REPEATS = 3           # timed runs per setting (medians); privagg and the loop alternate
TARGET_ELEMENTS_PER_S = 1e8  # share elements per second on 2 cores (the issue)

# name: (protocol, n, N, options, mode); beta = 1 / (2 N) throughout
SETTINGS = {
    "dpds-faithful": ("dpds", 2_000, 100, {}, "faithful"),
    "dpds-fast": ("dpds", 10**7, 1_000, {}, "fast"),
    "tss-faithful": ("tss", 10**4, 1_000, {"report_fraction": 0.1}, "faithful"),
}


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


# --- the baseline ------------------------------------------------------------------------

def numpy_sharing(codes: np.ndarray, coins: np.ndarray, domain: int, q: int, rng: np.random.Generator) -> np.ndarray:
    """DPDS's sharing and summation as a plain single-threaded numpy loop; the server's reconstruction.

    Sender by sender: his vector (one-hot, or zeros if his coin is 0); n - 1
    uniform share vectors in [0, q) (``rng.integers``, numpy's default int64)
    for users 0 .. n - 2; the last, his vector minus their sum mod q, for user
    n - 1; each share added into its recipient's running sum mod q. Then the
    server adds the n partial sums mod q.
    """
    n = codes.size
    received = np.zeros((n, domain), dtype=np.int64)
    for i in range(n):
        value = np.zeros(domain, dtype=np.int64)
        value[codes[i]] = coins[i]
        shares = rng.integers(0, q, size=(n - 1, domain))
        correction = (value - shares.sum(axis=0)) % q
        received[:-1] += shares
        received[:-1] %= q
        received[-1] += correction
        received[-1] %= q
    return received.sum(axis=0) % q


# --- formatting (shared ones in benchfmt.py) -----------------------------------------------

def mib(b: float) -> str:
    return f"{b / 2**20:,.1f} MiB" if b < 2**30 else f"{b / 2**30:.2f} GiB"


def rate(r: float) -> str:
    return f"{r / 1e6:,.0f} M/s"


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
    """A memory table row: the peaks, the run's increment against privagg's estimate (sharing_bytes)."""
    peak = max(m["peak_rss_kib"], m["setup_peak_kib"]) * 1024
    shown = mib(increment(m)) if m["reset"] else f"at most {mib(increment(m))} (no reset)"
    return [label, mib(peak), mib(m["setup_peak_kib"] * 1024), mib(m["before_kib"] * 1024), shown, mib(estimate),
            f"{verdict(increment(m) <= estimate)} ({increment(m) / estimate:.2f} of it)", figures]


# --- the part ----------------------------------------------------------------------------

def sampling(report) -> None:
    """Part 6: DPDS and TSS at the issue's sizes, a plain numpy loop as the baseline, peak memory per process."""
    start_part, load_start = time.perf_counter(), load_average()

    # Faithful DPDS, n = 2000, N = 100, alternating with the numpy loop.
    note("faithful DPDS at n = 2000, N = 100, and the numpy loop (about 15-20 s)")
    params, codes, mode = setting("dpds-faithful")
    n, N, q = params.n_users, params.domain_size, params.modulus
    drawn = n * (n - 1) * N  # uniform share elements: n - 1 vectors of N per sender
    baseline_rng = np.random.default_rng(BASELINE_SEED)
    ours, loops = [], []
    for _ in range(REPEATS):
        run, wall, cpu = clocked(simulate, params, codes, mode, RUN_SEED)
        ours.append((run, wall, cpu))
        coins = baseline_rng.random(n) < params.sampling_probability
        sums, loop_wall, loop_cpu = clocked(numpy_sharing, codes, coins, N, q, baseline_rng)
        loops.append((np.array_equal(sums, np.bincount(codes[coins], minlength=N)), loop_wall, loop_cpu))
    run = ours[-1][0]
    t_run, cpu_run = statistics.median(w for _, w, _ in ours), statistics.median(c for _, _, c in ours)
    t_share = statistics.median(r.seconds["share"] for r, _, _ in ours)
    t_loop, cpu_loop = statistics.median(w for _, w, _ in loops), statistics.median(c for _, _, c in loops)
    loop_exact = all(ok for ok, _, _ in loops)
    tau, tau_ok = sampled_counts(run, codes)
    transcript_drawn = run.transcript["user"]["uniform_samples"]

    # The same sharing called directly with p = 1: every user takes part, so the server must get the true counts.
    everyone = dataclasses.replace(params, sampling_probability=1.0)
    rows, _ = run_secret_sharing(everyone, codes, np.random.default_rng(RUN_SEED))
    server = SumServer(everyone)
    direct_exact = np.array_equal(server.agg_update(server.agg_init(), rows).sums, np.bincount(codes, minlength=N))
    del rows

    # Fast DPDS, n = 10^7, N = 1000.
    note("fast DPDS at n = 10^7, N = 1000")
    calibrate_start = time.perf_counter()
    fast_params, fast_codes, fast_mode = setting("dpds-fast")
    t_fast_setting = time.perf_counter() - calibrate_start
    fast_runs = [clocked(simulate, fast_params, fast_codes, fast_mode, RUN_SEED) for _ in range(REPEATS)]
    t_fast = statistics.median(w for _, w, _ in fast_runs)
    fast_tau, fast_ok = sampled_counts(fast_runs[-1][0], fast_codes)
    del fast_codes

    # Faithful TSS, n = 10^4, N = 1000, alpha = 0.1.
    note("faithful TSS at n = 10^4, N = 1000, alpha = 0.1 (about 15 s)")
    tss_params, tss_codes, tss_mode = setting("tss-faithful")
    tss_runs = [clocked(simulate, tss_params, tss_codes, tss_mode, RUN_SEED) for _ in range(REPEATS)]
    tss_run = tss_runs[-1][0]
    t_tss, cpu_tss = statistics.median(w for _, w, _ in tss_runs), statistics.median(c for _, _, c in tss_runs)
    t_tss_share = statistics.median(r.seconds["share"] for r, _, _ in tss_runs)
    tss_drawn = tss_run.transcript["user"]["uniform_samples"]
    tss_tau, tss_ok = sampled_counts(tss_run, tss_codes)

    # Peak memory, each setting in a fresh process.
    memory = {}
    with tempfile.TemporaryDirectory(prefix="privagg-bench-") as tmp:
        for name in SETTINGS:
            note(f"peak memory: {name} in a child process")
            memory[name] = measure_child(name, Path(tmp))

    share_rate, run_rate, loop_rate = drawn / t_share, drawn / t_run, drawn / t_loop
    tss_rate = tss_drawn / t_tss_share
    report.add(
        "## 6. Sampling and secret sharing: DPDS and TSS at the issue's sizes",
        "",
        f"Every run is calibrated by `registry.calibrate(protocol, epsilon={EPSILON:g}, delta={DELTA:g}, n_users=n, "
        "domain_size=N, min_count_fraction=beta, ...)` (exact calibration) and run by `simulate(params, codes, "
        f"mode, rng={RUN_SEED})`. Populations: beta = 1/(2N), so every category is held by ceil(beta n) users (the "
        "data condition of DPDS and TSS; `simulate` checks it) and the other half of the users draw "
        f"Zipf({ZIPF_EXPONENT}) ranks truncated to N; shuffled, data seed {DATA_SEED}. Times are medians of "
        f"{REPEATS} runs in this process; CPU is the process's CPU time over all its threads (CPU / wall near 2 "
        f"means both cores worked). Load average at the start of the part: {load_start}.",
        "",
        f"### Faithful DPDS, n = {n}, N = {N}, against a plain numpy loop",
        "",
        f"beta = {params.min_count_fraction:g} (every category held by >= {params.min_count} users), p = "
        f"{params.sampling_probability:.4f}, q = {q} (shares stored as {params.field.dtype}). Every sender draws n - 1 "
        f"uniform vectors of N elements: n (n - 1) N = {drawn:,} share elements (the run's transcript counts "
        f"{transcript_drawn:,}); with the n N correction shares, n^2 N = {n * n * N:,} shares are made. The numpy loop "
        "(`numpy_sharing` in benchmarks/sampling.py: per sender, `rng.integers` for n - 1 share vectors, the last one "
        "the vector minus their sum mod q, each added into its recipient's running sum mod q; one thread, int64) "
        "ran alternately with privagg, on the same codes, n, N and q, with its own coins.",
        "",
    )
    target = f">= {TARGET_ELEMENTS_PER_S / 1e6:.0f} M/s"
    report.table(["what", "wall", "CPU", "CPU / wall", "share elements / s (wall)", target], [
        ["privagg: `simulate`, whole run", seconds(t_run), seconds(cpu_run), f"{cpu_run / t_run:.2f}", rate(run_rate),
         verdict(run_rate >= TARGET_ELEMENTS_PER_S)],
        ["privagg: the sharing alone (`run.seconds['share']`)", seconds(t_share), "", "", rate(share_rate),
         verdict(share_rate >= TARGET_ELEMENTS_PER_S)],
        ["plain numpy loop (baseline)", seconds(t_loop), seconds(cpu_loop), f"{cpu_loop / t_loop:.2f}", rate(loop_rate),
         verdict(loop_rate >= TARGET_ELEMENTS_PER_S)],
    ])
    report.add(
        f"Numpy loop / privagg: {ratio(t_loop / t_share)} in wall time (the sharing alone), "
        f"{ratio(t_loop / t_run)} against the whole run, {ratio(cpu_loop / cpu_run)} in CPU time (the work done, "
        "whatever the threads).",
        "",
        f"Checks: the numpy loop reconstructed {'exactly' if loop_exact else '**not**'} the counts of its own sampled "
        f"users in every run; privagg's reconstructed counts (estimates times p) are "
        f"{'whole numbers within [0, Pi_j]' if tau_ok else '**not** whole numbers within [0, Pi_j]'} "
        f"({int(tau.sum())} users counted, n p = {n * params.sampling_probability:.1f}); with p = 1 (every user "
        f"takes part), `run_secret_sharing` gave {'exactly' if direct_exact else '**not**'} the true counts "
        "(not timed).",
        "",
        f"### Fast DPDS, n = {count(fast_params.n_users)}, N = {fast_params.domain_size}",
        "",
        f"beta = {fast_params.min_count_fraction:g} (>= {fast_params.min_count} users per category), p = "
        f"{fast_params.sampling_probability:.4f}. The fast path skips the sharing, which reconstructs exactly, and "
        "draws the participants' counts. Building the population and calibrating took "
        f"{seconds(t_fast_setting)}.",
        "",
    )
    report.table(["what", "wall", "users / s", "check"], [[
        "`simulate(..., mode='fast')`", seconds(t_fast), f"{fast_params.n_users / t_fast / 1e6:,.0f} M/s",
        f"counts {'whole, within [0, Pi_j]' if fast_ok else '**not** whole within [0, Pi_j]'}; "
        f"{int(fast_tau.sum()):,} counted, n p = {fast_params.n_users * fast_params.sampling_probability:,.0f}"]])
    report.add(
        f"### Faithful TSS, n = {count(tss_params.n_users)}, N = {tss_params.domain_size}, alpha = "
        f"{tss_params.report_fraction:g}",
        "",
        f"beta = {tss_params.min_count_fraction:g} (>= {tss_params.min_count} users per category), p = "
        f"{tss_params.sampling_probability:.4f}, p p_chi = {tss_params.effective_probability:.4f}, q = "
        f"{tss_params.modulus}. Each user reports alpha N = {tss_params.report_size} categories; item j's m_j "
        "reporters share their entries among m_j elected helpers. Share elements: the uniform ones drawn, "
        f"sum_j m_j (m_j - 1) = {tss_drawn:,} (transcript); {tss_run.transcript['user']['sent']:,} sent in all.",
        "",
    )
    report.table(["what", "wall", "CPU", "CPU / wall", "share elements / s", target, "check"], [
        ["`simulate`, whole run", seconds(t_tss), seconds(cpu_tss), f"{cpu_tss / t_tss:.2f}", rate(tss_drawn / t_tss),
         "", f"counts {'whole, within [0, Pi_j]' if tss_ok else '**not** whole within [0, Pi_j]'}; "
         f"{int(tss_tau.sum())} counted, n p p_chi = {tss_params.n_users * tss_params.effective_probability:.1f}"],
        ["users, S1 and helpers (`run.seconds['share']`)", seconds(t_tss_share), "", "", rate(tss_rate),
         verdict(tss_rate >= TARGET_ELEMENTS_PER_S), ""],
    ])

    naive = n * n * N
    memory_settings = [  # name, label, privagg's estimate, the O(n N) and all-shares figures
        ("dpds-faithful", f"faithful DPDS, n = {n}, N = {N}", sharing_bytes(params, "faithful"),
         f"n N x 8 bytes = {mib(8 * n * N)} (one set of partial sums); all n^2 N shares at once: {mib(4 * naive)} "
         f"as uint32, {mib(8 * naive)} as int64"),
        ("dpds-fast", f"fast DPDS, n = {count(fast_params.n_users)}, N = {fast_params.domain_size}",
         sharing_bytes(fast_params, "fast"), f"the codes, n x 8 bytes = {mib(8 * fast_params.n_users)}; no shares"),
        ("tss-faithful", f"faithful TSS, n = {count(tss_params.n_users)}, N = {tss_params.domain_size}",
         sharing_bytes(tss_params, "faithful"),
         f"n N x 8 bytes = {mib(8 * tss_params.n_users * tss_params.domain_size)}; all "
         f"{tss_run.transcript['user']['sent']:,} shares at once: {mib(4 * tss_run.transcript['user']['sent'])} "
         "as uint32"),
    ]
    within = {name: increment(memory[name]) <= estimate for name, _, estimate, _ in memory_settings}
    report.add(
        "### Peak memory (whole processes)",
        "",
        "Each setting again in a fresh `python -c` process (`sampling.child(name)`: imports, population, "
        "calibration, then one `simulate`), under GNU time (`sdpfe.measure`: the maximum resident set size, as "
        "`/usr/bin/time -v` reports it). After its set-up the child notes its resident set (VmRSS) and high-water "
        "mark, then resets the mark (`5` into /proc/self/clear_refs), so GNU time's figure is the process's peak "
        "during the run; the whole-process peak is the larger of the two. The run's increment is its peak less "
        "the RSS it started from. privagg's estimate is `sharing_bytes(params, mode)` "
        "(privagg.simulate.secret_sharing), the O(n N) figure privagg uses to refuse runs that cannot fit; the "
        "increment should stay within it.",
        "",
    )
    report.table(["setting", "peak RSS, whole process", "set-up's peak", "RSS before the run", "the run's increment",
                  "privagg's estimate", "increment within it", "O(n N) and all-shares figures"],
                 [memory_row(label, memory[name], estimate, figures)
                  for name, label, estimate, figures in memory_settings])
    report.add(
        "A miss means privagg's estimate is too low for that run, not by itself that memory grows faster than "
        "O(n N): compare the increment with the last column. Wall and CPU of the child processes, set-up "
        "included: " + "; ".join(f"{name} {m['wall_s']:.2f} s wall, {m['cpu_s']:.2f} s CPU"
                                 for name, m in memory.items()) + ".",
        "",
        "### Verdicts",
        "",
    )
    report.table(["target (the issue)", "measured", "verdict"], [
        [f"faithful DPDS at n = {n}, N = {N}: >= 100 M share elements / s on {os.cpu_count()} cores",
         f"{rate(share_rate)} (sharing), {rate(run_rate)} (whole run)", verdict(share_rate >= TARGET_ELEMENTS_PER_S)],
        [f"faithful TSS at n = {count(tss_params.n_users)}, N = {tss_params.domain_size}, alpha = "
         f"{tss_params.report_fraction:g}: the same rate", rate(tss_rate),
         verdict(tss_rate >= TARGET_ELEMENTS_PER_S)],
        *([f"peak memory O(n N), {label}: the run's increment within privagg's estimate",
           f"{mib(increment(memory[name]))} of {mib(estimate)}", verdict(within[name])]
          for name, label, estimate, _ in memory_settings),
        ["faithful DPDS against a plain single-thread numpy loop, same run", f"{ratio(t_loop / t_share)} (wall), "
         f"{ratio(cpu_loop / cpu_run)} (CPU)", "no target"],
    ])
    report.add(f"Part 6 took {seconds(time.perf_counter() - start_part)}; load average at its end: {load_average()}.",
               "")
