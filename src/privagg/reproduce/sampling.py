"""``privagg reproduce sampling``: the stand-in evaluation of the sampling + secret-sharing family.

The paper (Yang, Tjuawinata, Lam, Zhu, Zhao, arXiv:2104.05974) has an
experiments section, but it was not available to us (reference
../shared/papers/fair-dp-distributed-frequency.md, §5): no dataset, grid or
number of it is known. What runs here is the reference's recommended stand-in
evaluation, which tests the claims the paper states in prose, against the
closed forms of the reference (§3.3, §3.6, §4). Nothing written here is a
number of the paper. Results and discussion: docs/results/sampling.md.

1. Variance against n (``variance_vs_n.csv``, ``variance_vs_n.png``): the
   MSE of the frequency vector, sum_j (est_j / n - psi_j)^2, averaged over
   ``runs`` seeded fast-mode runs, for DPDS (exact p), DPDS with the paper's
   p = 1 - e^-eps (where it meets delta; the other points are recorded as
   infeasible), DPDG (tight and classic noise), TSS (uniform, alpha = 0.5) and
   TSS (adaptive, alpha = 0.5, gamma = 2), at eps = 1, delta = 1e-5, N = 10.
   The population is Zipf-like with every category held by at least n / (2N)
   users, and beta = 1/(2N) is stated. Theory: sum_j se(Pi_j)^2 / n^2 from the
   parameters' ``standard_error``. ``crossover.csv``: the smallest n of the
   grid where DPDG's MSE is below DPDS's, and the paper's n*.
2. Variance against eps at n = 2000 (``variance_vs_eps.csv``, ``.png``).
3. Costs per party (``costs.csv``, ``costs.png``): faithful runs of DPDS, DPDG
   and TSS (uniform, several alpha) at small n and N, through the deployed
   parties; the transcript's field elements and bytes per user and per server
   against the paper's 2nN + N (DPDS: the deployed users agree their shares
   by key and send none) and the reference's derived TSS counts (``costs()``).

Weighted aggregation (the paper's fourth claim) is left to another module.
matplotlib is imported inside the plotting functions (Agg canvas, no pyplot),
so that ``import privagg`` stays light.
"""

from __future__ import annotations

import csv
import math
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import ParameterError
from ..simulate.progress import Progress

EPSILON = 1.0
DELTA = 1e-5
DOMAIN = 10  # N of the variance experiments
ZIPF_EXPONENT = 1.0  # the population's counts above the floor n / (2N) fall off as 1 / rank^s
EPS_USERS = 2000  # n of the variance-against-eps experiment
RELIABLE_COUNTED = 100  # a sampling point's MSE is measured reliably when runs * n * p' reaches this
TSS_ALPHA = 0.5
TSS_GAMMA = 2.0



@dataclass(frozen=True)
class Variant:
    """One protocol setting of the variance experiments."""

    label: str
    protocol: str
    options: tuple[tuple[str, Any], ...]
    description: str

    @property
    def sampling(self) -> bool:
        return self.protocol != "dpdg"


VARIANTS: tuple[Variant, ...] = (
    Variant("dpds", "dpds", (("calibration", "exact"),), "DPDS, exact p"),
    Variant("dpds-paper", "dpds", (("calibration", "paper"),), "DPDS, p = 1 - e^-eps"),
    Variant("dpdg-tight", "dpdg", (("calibration", "tight"),), "DPDG, tight noise"),
    Variant("dpdg-classic", "dpdg", (("calibration", "classic"),), "DPDG, classic sigma"),
    Variant("tss-uniform", "tss", (("report_fraction", TSS_ALPHA), ("second_stage", "uniform")),
            f"TSS uniform, alpha = {TSS_ALPHA:g}"),
    Variant("tss-adaptive", "tss", (("report_fraction", TSS_ALPHA), ("second_stage", "adaptive"),
                                    ("gamma", TSS_GAMMA)),
            f"TSS adaptive, alpha = {TSS_ALPHA:g}, gamma = {TSS_GAMMA:g}"),
)


@dataclass(frozen=True)
class Grid:
    """The sizes of one run of the three experiments (FULL, or QUICK for a first look and the tests)."""

    users: tuple[int, ...]
    epsilons: tuple[float, ...]
    runs: int
    cost_users: tuple[int, ...]
    cost_domains: tuple[int, ...]
    cost_alphas: tuple[float, ...]  # multiples of 1/N for every N of cost_domains
    cost_runs: int  # faithful TSS runs per point (its traffic depends on the random m_j)


FULL = Grid(users=(100, 200, 500, 1000, 2000, 5000, 10000), epsilons=(0.25, 0.5, 1.0, 2.0, 4.0), runs=1000,
            cost_users=(50, 100, 200, 400), cost_domains=(5, 10, 20), cost_alphas=(0.2, 0.4, 0.6), cost_runs=3)
QUICK = Grid(users=(200, 1000, 5000), epsilons=(0.5, 1.0, 2.0), runs=100, cost_users=(50, 100),
             cost_domains=(5, 10), cost_alphas=(0.4,), cost_runs=1)

VARIANCE_COLUMNS = ("experiment", "variant", "protocol", "calibration", "n_users", "domain_size", "epsilon", "delta",
                    "min_count", "feasible", "sampling_probability", "effective_probability", "count_noise_sd",
                    "runs", "mse", "mse_se", "theory_mse", "theory_se", "ratio", "z", "reliable", "note")
CROSSOVER_COLUMNS = ("dpds_variant", "dpdg_variant", "measured_crossover_n", "dpdg_lower_at_every_n",
                     "theory_crossover_n", "paper_n_star", "derived_total_mse_threshold", "grid")
FILES = ("variance_vs_n.csv", "variance_vs_n.png", "crossover.csv", "variance_vs_eps.csv", "variance_vs_eps.png",
         "costs.csv", "costs.png")
COST_COLUMNS = ("protocol", "n_users", "domain_size", "report_fraction", "field_bits", "runs", "user_sent",
                "user_received", "user_to_server", "user_total", "user_indices_to_s1", "reference_user_total",
                "expected_user_total", "user_bytes", "reference_user_bytes", "reference", "ratio_to_dpds",
                "alpha_squared", "server_received", "reference_server_received", "s1_received")


# --- population and theory --------------------------------------------------------------------------------


def population(n_users: int, domain_size: int, exponent: float = ZIPF_EXPONENT) -> np.ndarray:
    """Counts of a Zipf-like population: every category held by ceil(n / (2N)) users, the rest of the users
    spread as 1 / rank^exponent (largest remainders, so the counts add up to n)."""
    floor = math.ceil(n_users / (2 * domain_size))
    rest = n_users - domain_size * floor
    if rest < 0:
        raise ParameterError("n_users", f"at least N ceil(n / 2N) (N = {domain_size})", n_users)
    weights = 1.0 / np.arange(1, domain_size + 1) ** exponent
    share = rest * weights / weights.sum()
    extra = np.floor(share).astype(np.int64)
    extra[np.argsort(-(share - extra), kind="stable")[:rest - int(extra.sum())]] += 1
    return floor + extra


def codes_of(counts: np.ndarray) -> np.ndarray:
    """One item code per user, category j repeated counts[j] times."""
    return np.repeat(np.arange(counts.size), counts)


def calibrate_variant(variant: Variant, epsilon: float, delta: float, n_users: int, domain_size: int):
    """The variant's parameters; sampling protocols state beta = 1 / (2N) (the population's floor)."""
    from ..protocols import registry

    options = dict(variant.options)
    if variant.sampling:
        options["min_count_fraction"] = 1 / (2 * domain_size)
    return registry.calibrate(variant.protocol, epsilon=epsilon, delta=delta, n_users=n_users,
                              domain_size=domain_size, **options)


def theory_mse(parameters, counts: np.ndarray) -> float:
    """E sum_j (est_j / n - psi_j)^2 = sum_j se(Pi_j)^2 / n^2 (reference §3.3, §3.6; DPDG: n s2 / 4^k per item)."""
    se = np.broadcast_to(parameters.standard_error(counts.astype(np.float64)), counts.shape)
    return float(np.sum(se**2)) / parameters.n_users**2


def theory_mse_sd(parameters, counts: np.ndarray) -> float:
    """The standard deviation of one run's sum_j (est_j / n - psi_j)^2.

    Sampling: est_j = tau_j / p' with tau_j ~ Bin(Pi_j, p') independent, so
    Var[(tau - Pi p')^2] = mu_4 - (Pi p' q')^2, mu_4 = Pi p' q' (1 + 3 (Pi - 2) p' q').
    DPDG: each coordinate's noise nearly normal with variance v, Var = 2 v^2.
    """
    n = parameters.n_users
    if getattr(parameters, "protocol", "") == "dpdg":
        v = float(parameters.standard_error()) ** 2
        return math.sqrt(counts.size * 2 * v**2) / n**2
    p = parameters.effective_probability
    pq, pi = p * (1 - p), counts.astype(np.float64)
    fourth = pi * pq * (1 + 3 * (pi - 2) * pq)
    return math.sqrt(float(np.sum(fourth - (pi * pq) ** 2))) / p**2 / n**2


# --- experiments 1 and 2: variance ------------------------------------------------------------------------


def _seeds(seed: int, key: Sequence[int], runs: int) -> list[np.random.SeedSequence]:
    return np.random.SeedSequence(seed, spawn_key=tuple(key)).spawn(runs)


def measure_mse(parameters, counts: np.ndarray, runs: int, seeds: Sequence[np.random.SeedSequence]) -> np.ndarray:
    """Each run's sum_j (est_j / n - psi_j)^2, fast mode (the sharing skipped: it reconstructs exactly)."""
    from ..simulate import simulate

    codes, n = codes_of(counts), parameters.n_users
    errors = np.empty(runs)
    for r in range(runs):
        estimates = simulate(parameters, codes, mode="fast", rng=seeds[r]).result.estimates
        errors[r] = float(np.sum((estimates - counts) ** 2)) / n**2
    return errors


def variance_point(experiment: str, variant: Variant, n_users: int, epsilon: float, runs: int,
                   seed: int, key: Sequence[int]) -> dict[str, Any]:
    """One row: the variant calibrated at (n, eps), measured over ``runs`` runs, and its theory."""
    counts = population(n_users, DOMAIN)
    options = dict(variant.options)
    row: dict[str, Any] = {"experiment": experiment, "variant": variant.label, "protocol": variant.protocol,
                           "calibration": options.get("calibration", "exact"), "n_users": n_users,
                           "domain_size": DOMAIN, "epsilon": epsilon, "delta": DELTA, "runs": 0}
    try:
        parameters = calibrate_variant(variant, epsilon, DELTA, n_users, DOMAIN)
    except ParameterError as err:
        return {**row, "feasible": False, "reliable": False, "note": "infeasible: " + str(err).split(";")[0]}
    row.update(feasible=True, calibration=parameters.calibration)
    if variant.sampling:
        row.update(min_count=parameters.min_count, sampling_probability=parameters.sampling_probability,
                   effective_probability=parameters.effective_probability)
        counted = runs * n_users * parameters.effective_probability
        reliable = counted >= RELIABLE_COUNTED
    else:
        row.update(count_noise_sd=parameters.count_noise_sd)
        reliable = True
    errors = measure_mse(parameters, counts, runs, _seeds(seed, key, runs))
    mse, mse_se = float(errors.mean()), float(errors.std(ddof=1) / math.sqrt(runs))
    theory, theory_se = theory_mse(parameters, counts), theory_mse_sd(parameters, counts) / math.sqrt(runs)
    note = "" if reliable else f"too few users counted to measure: runs n p' = {counted:.3g} < {RELIABLE_COUNTED}"
    return {**row, "runs": runs, "mse": mse, "mse_se": mse_se, "theory_mse": theory, "theory_se": theory_se,
            "ratio": mse / theory, "z": (mse - theory) / theory_se, "reliable": reliable, "note": note}


def variance_rows(experiment: str, points: Sequence[tuple[int, float]], runs: int, seed: int,
                  progress: Progress | None, stage: str, experiment_key: int) -> list[dict[str, Any]]:
    """Every variant at every (n, eps) of ``points``; each point's runs seeded by (experiment, point, variant)."""
    rows = []
    total = len(points) * len(VARIANTS) * runs
    for i, (n_users, epsilon) in enumerate(points):
        for v, variant in enumerate(VARIANTS):
            rows.append(variance_point(experiment, variant, n_users, epsilon, runs, seed, (experiment_key, i, v)))
            if progress:
                progress(stage, runs, total)
    return rows


def _crossover(row: dict[str, Any]) -> int | str | None:
    """The measured crossover n as the summary says it: below the grid ("at most" its least n) where DPDG is below
    DPDS at every n, as the grid's first n is not where they cross (a reviewer's finding)."""
    n = row["measured_crossover_n"]
    return f"at most {n} (the grid's least n: DPDG is below DPDS at every n)" if row["dpdg_lower_at_every_n"] else n


def crossovers(rows: Sequence[dict[str, Any]], users: Sequence[int], epsilon: float,
               delta: float) -> list[dict[str, Any]]:
    """For each (DPDS, DPDG) pair of variants: the smallest n of the grid where DPDG's measured (and theoretical)
    MSE is below DPDS's, among the n where both are feasible."""
    from ..protocols.sampling_sharing import crossover_users

    by = {(r["variant"], r["n_users"]): r for r in rows if r["feasible"]}
    n_star = crossover_users(epsilon, delta)
    out = []
    for dpds in ("dpds", "dpds-paper"):
        for dpdg in ("dpdg-tight", "dpdg-classic"):
            both = [n for n in users if (dpds, n) in by and (dpdg, n) in by]
            measured = [n for n in both if by[dpdg, n]["mse"] < by[dpds, n]["mse"]]
            theory = [n for n in both if by[dpdg, n]["theory_mse"] < by[dpds, n]["theory_mse"]]
            out.append({"dpds_variant": dpds, "dpdg_variant": dpdg,
                        "measured_crossover_n": measured[0] if measured else None,
                        "dpdg_lower_at_every_n": bool(both) and len(measured) == len(both),
                        "theory_crossover_n": theory[0] if theory else None, "paper_n_star": n_star,
                        "derived_total_mse_threshold": DOMAIN * n_star,
                        "grid": " ".join(str(n) for n in both)})
    return out


# --- experiment 3: costs ----------------------------------------------------------------------------------


def _cost_codes(n_users: int, domain_size: int, seed: int) -> np.ndarray:
    codes = codes_of(population(n_users, domain_size))
    return np.random.default_rng(np.random.SeedSequence(seed, spawn_key=(3, n_users, domain_size))).permutation(codes)


def sharing_cost_row(protocol: str, n_users: int, domain_size: int, seed: int) -> dict[str, Any]:
    """One faithful DPDS or DPDG run: the deployed parties (protocols/sharing_parties.py), whose shares are agreed
    by key, not sent. Per user, the transcript's field elements (none to the other users; N to the server, the
    masked sum) and bytes (his key, backups and revealed shares too), beside the paper's 2nN + N elements (its
    users send the shares; reference §2.3, ambiguity A5: the self-share counted as sent and as received) and
    their bytes at ceil(bits / 8) an element."""
    from ..protocols import registry
    from ..simulate import simulate

    if protocol == "dpds":
        parameters = registry.calibrate("dpds", epsilon=EPSILON, delta=DELTA, n_users=n_users,
                                        domain_size=domain_size, min_count_fraction=1 / (2 * domain_size))
    else:
        parameters = registry.calibrate("dpdg", epsilon=EPSILON, delta=DELTA, n_users=n_users,
                                        domain_size=domain_size)
    run = simulate(parameters, _cost_codes(n_users, domain_size, seed), mode="faithful",
                   rng=np.random.SeedSequence(seed, spawn_key=(3, 0, n_users, domain_size)))
    user, server = run.transcript["user"], run.transcript["server"]
    n, N = n_users, domain_size
    to_server = user["sent masked sum"] / n
    expected = parameters.costs()
    element = -(-parameters.modulus.bit_length() // 8)
    return {"protocol": protocol, "n_users": n, "domain_size": N, "field_bits": parameters.modulus.bit_length(),
            "runs": 1, "user_sent": 0.0, "user_received": 0.0, "user_to_server": to_server,
            "user_total": to_server, "reference_user_total": expected["user"]["paper_count"],
            "expected_user_total": N, "user_bytes": (user["bytes_sent"] + user["bytes_received"]) / n,
            "reference_user_bytes": expected["user"]["paper_count"] * element,
            "reference": "paper: 2nN + N (self-share sent and received); deployed: shares agreed by key",
            "server_received": server["received"], "reference_server_received": expected["server"]["received"]}


def tss_cost_row(n_users: int, domain_size: int, alpha: float, runs: int, seed: int) -> dict[str, Any]:
    """Faithful TSS runs (uniform stage) of the deployed parties (protocols/two_server_parties.py), which send the
    paper's shares, their per-user traffic averaged; the reference's derived counts (sum_j m_j^2 taken as
    N (alpha n)^2) and the exact expectation (``costs()``: E m_j^2 = (alpha n)^2 + alpha (1 - alpha) n,
    m_j ~ Bin(n, alpha)). A reporter elected helper of his own item keeps that share (not sent)."""
    from ..protocols import registry
    from ..simulate import simulate

    parameters = registry.calibrate("tss", epsilon=EPSILON, delta=DELTA, n_users=n_users, domain_size=domain_size,
                                    min_count_fraction=1 / (2 * domain_size), report_fraction=alpha)
    codes = _cost_codes(n_users, domain_size, seed)
    n, N = n_users, domain_size
    totals: dict[str, float] = {}
    for r in range(runs):
        run = simulate(parameters, codes, mode="faithful",
                       rng=np.random.SeedSequence(seed, spawn_key=(3, 1, n_users, domain_size, round(alpha * 1000), r)))
        user, s1, s2 = run.transcript["user"], run.transcript["s1"], run.transcript["s2"]
        for key, value in (("sent", user["sent shares"]), ("received", user["received shares"]),
                           ("to_s2", user["sent helper sums"]), ("indices", user["sent report set"]),
                           ("bytes", user["bytes_sent"] + user["bytes_received"]), ("s2", s2["received"]),
                           ("s1_received", s1["received report set"])):
            totals[key] = totals.get(key, 0.0) + value / runs
    expected = parameters.costs()
    reference = 2 * alpha**2 * n * N + alpha * N
    exact = expected["user"]["sent"] + expected["user"]["received"] + expected["user"]["to_s2"]
    return {"protocol": "tss", "n_users": n, "domain_size": N, "report_fraction": alpha,
            "field_bits": parameters.modulus.bit_length(), "runs": runs, "user_sent": totals["sent"] / n,
            "user_received": totals["received"] / n, "user_to_server": totals["to_s2"] / n,
            "user_total": (totals["sent"] + totals["received"] + totals["to_s2"]) / n,
            "user_indices_to_s1": totals["indices"] / n, "user_bytes": totals["bytes"] / n,
            "reference_user_total": reference, "expected_user_total": exact,
            "reference": "reference §4 (derived): 2 alpha^2 n N + alpha N", "alpha_squared": alpha**2,
            "server_received": totals["s2"], "reference_server_received": expected["s2"]["received"],
            "s1_received": totals["s1_received"]}


def cost_rows(grid: Grid, seed: int, progress: Progress | None) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    total = len(grid.cost_users) * len(grid.cost_domains) * (2 + len(grid.cost_alphas))
    for N in grid.cost_domains:
        for n in grid.cost_users:
            dpds = sharing_cost_row("dpds", n, N, seed)
            rows += [dpds, sharing_cost_row("dpdg", n, N, seed)]
            for alpha in grid.cost_alphas:
                rows.append(tss_cost_row(n, N, alpha, grid.cost_runs, seed))
            for row in rows[-(2 + len(grid.cost_alphas)):]:
                row["ratio_to_dpds"] = row["user_total"] / dpds["reference_user_total"]
            if progress:
                progress("costs", 2 + len(grid.cost_alphas), total)
    return rows


# --- output ---------------------------------------------------------------------------------------------


def _cell(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, float):
        return f"{value:.6g}"
    return str(value)


def write_csv(path: Path, rows: Sequence[dict[str, Any]], columns: Sequence[str]) -> None:
    with open(path, "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(columns)
        for row in rows:
            writer.writerow([_cell(row.get(c)) for c in columns])


def _figure(width: float, height: float, panels: int = 1):
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, height), layout="constrained")
    FigureCanvasAgg(fig)
    return fig, (fig.subplots(1, panels) if panels > 1 else fig.subplots())


COLORS = {"dpds": "C0", "dpds-paper": "C9", "dpdg-tight": "C3", "dpdg-classic": "C1", "tss-uniform": "C2",
          "tss-adaptive": "C4"}


def _variance_axes(ax, rows: Sequence[dict[str, Any]], x: str) -> None:
    for variant in VARIANTS:
        mine = [r for r in rows if r["variant"] == variant.label and r["feasible"]]
        if not mine:
            continue
        color = COLORS[variant.label]
        ax.plot([r[x] for r in mine], [r["theory_mse"] for r in mine], "-", color=color, lw=1.2, alpha=0.8)
        shown = [r for r in mine if r["reliable"]]
        ax.errorbar([r[x] for r in shown], [r["mse"] for r in shown], yerr=[2 * r["mse_se"] for r in shown],
                    fmt="o", ms=4, color=color, capsize=2, label=variant.description)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.grid(True, which="both", lw=0.3, alpha=0.5)


def plot_variance_vs_n(path: Path, rows: Sequence[dict[str, Any]], crossover: dict[str, Any], epsilon: float,
                       runs: int) -> None:
    fig, ax = _figure(11, 5.5)
    _variance_axes(ax, rows, "n_users")
    users = sorted({r["n_users"] for r in rows})
    n_star = crossover["paper_n_star"]
    grid = np.geomspace(min(0.8 * n_star, users[0]), users[-1], 200)
    p = -math.expm1(-epsilon)
    ax.plot(grid, (1 - p) / (p * grid), ":", color=COLORS["dpds-paper"], lw=1,
            label="DPDS at p = 1 - e^-eps, theory at every n\n(meets delta only where measured)")
    ax.axvline(n_star, color="k", ls="--", lw=1, label=f"paper's n* = {n_star:.1f}")
    ax.axvline(crossover["derived_total_mse_threshold"], color="0.5", ls="-.", lw=1,
               label=f"N n* = {crossover['derived_total_mse_threshold']:.0f} (n* for the total MSE)")
    measured = crossover["measured_crossover_n"]
    if measured is not None:
        where = "at or below" if crossover["dpdg_lower_at_every_n"] else "at"
        ax.axvline(measured, color="C3", ls=":", lw=2,
                   label=f"measured DPDS / DPDG crossover:\n{where} n = {measured}")
    ax.set_xlabel("users n")
    ax.set_ylabel("MSE of the frequency vector, sum over items")
    ax.set_title(f"Variance against n: N = {DOMAIN}, eps = {epsilon:g}, delta = {DELTA:g}, beta = 1/(2N)\n"
                 f"points: mean of {runs} runs (error bars +-2 se), lines: theory", fontsize=9)
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1))
    fig.savefig(path, dpi=110)


def plot_variance_vs_eps(path: Path, rows: Sequence[dict[str, Any]], runs: int) -> None:
    from matplotlib.ticker import NullFormatter, ScalarFormatter

    fig, ax = _figure(9.5, 5)
    _variance_axes(ax, rows, "epsilon")
    ax.set_xticks(sorted({r["epsilon"] for r in rows}))
    ax.xaxis.set_major_formatter(ScalarFormatter())
    ax.xaxis.set_minor_formatter(NullFormatter())
    ax.set_xlabel("epsilon")
    ax.set_ylabel("MSE of the frequency vector, sum over items")
    ax.set_title(f"Variance against eps: n = {EPS_USERS}, N = {DOMAIN}, delta = {DELTA:g}, beta = 1/(2N)\n"
                 f"points: mean of {runs} runs (error bars +-2 se), lines: theory", fontsize=9)
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1))
    fig.savefig(path, dpi=110)


def plot_costs(path: Path, rows: Sequence[dict[str, Any]]) -> None:
    fig, (left, right) = _figure(11, 4.8, panels=2)
    domains = sorted({r["domain_size"] for r in rows})
    alphas = sorted({r["report_fraction"] for r in rows if r["protocol"] == "tss"})
    middle = domains[len(domains) // 2]
    dpds = sorted((r for r in rows if r["protocol"] == "dpds" and r["domain_size"] == middle),
                  key=lambda r: r["n_users"])
    n = np.array([r["n_users"] for r in dpds], dtype=float)
    left.plot(n, [r["reference_user_bytes"] for r in dpds], "-", color="C0", lw=1,
              label="DPDS, paper: (2nN + N) elements")
    left.plot(n, [r["user_bytes"] for r in dpds], "o", color="C0", label="DPDS deployed (keys, backups), measured")
    for i, alpha in enumerate(alphas):
        tss = sorted((r for r in rows if r["protocol"] == "tss" and r["domain_size"] == middle
                      and r["report_fraction"] == alpha), key=lambda r: r["n_users"])
        color = f"C{2 + i}"
        left.plot([r["n_users"] for r in tss], [r["user_bytes"] for r in tss], "s", color=color,
                  label=f"TSS alpha = {alpha:g}, measured")
    left.set_xscale("log")
    left.set_yscale("log")
    left.set_xlabel("users n")
    left.set_ylabel("bytes per user (sent + received, messages before sealing)")
    left.set_title(f"Per-user traffic, N = {middle} (faithful runs)", fontsize=9)
    left.legend(fontsize=7)
    left.grid(True, which="both", lw=0.3, alpha=0.5)
    markers = "o^sDv"
    for i, alpha in enumerate(alphas):
        color = f"C{2 + i}"
        right.axhline(alpha**2, color=color, ls="--", lw=1)
        for k, N in enumerate(domains):
            tss = sorted((r for r in rows if r["protocol"] == "tss" and r["domain_size"] == N
                          and r["report_fraction"] == alpha), key=lambda r: r["n_users"])
            ns = np.array([r["n_users"] for r in tss], dtype=float)
            right.plot(ns, [r["ratio_to_dpds"] for r in tss], markers[k % len(markers)], color=color,
                       label=f"alpha = {alpha:g}, N = {N}")
            right.plot(ns, [r["expected_user_total"] / (2 * r["n_users"] * N + N) for r in tss], "-", color=color,
                       lw=0.6, alpha=0.6)
    right.set_xscale("log")
    right.set_xlabel("users n")
    right.set_ylabel("TSS's measured elements / DPDS's paper count")
    right.set_title("Ratio (markers), alpha^2 (dashed), exact expectation (thin lines)", fontsize=9)
    right.legend(fontsize=6, ncol=2)
    right.grid(True, which="both", lw=0.3, alpha=0.5)
    fig.savefig(path, dpi=110)


# --- entry point ----------------------------------------------------------------------------------------


def run(out: Path, quick: bool = False, seed: int = 0, progress: Progress | None = None) -> dict[str, Any]:
    """Run the three experiments (module docstring) and write their CSV tables and PNG plots into ``out``.

    ``quick``: a small grid (about 5 s) instead of the full one (about 20 s
    on two cores). ``seed``: every run's generator is spawned from it (seeded
    simulations, not private runs). ``progress(stage, advance, total)``: as
    privagg.simulate's, called as each stage advances. Returns a summary.
    """
    start = time.perf_counter()
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    grid = QUICK if quick else FULL
    name = "quick" if quick else "full"

    by_n = variance_rows("variance_vs_n", [(n, EPSILON) for n in grid.users], grid.runs, seed, progress,
                         "variance vs n", 1)
    by_eps = variance_rows("variance_vs_eps", [(EPS_USERS, e) for e in grid.epsilons], grid.runs, seed, progress,
                           "variance vs eps", 2)
    cross = crossovers(by_n, grid.users, EPSILON, DELTA)
    costs = cost_rows(grid, seed, progress)

    write_csv(out / "variance_vs_n.csv", by_n, VARIANCE_COLUMNS)
    write_csv(out / "variance_vs_eps.csv", by_eps, VARIANCE_COLUMNS)
    write_csv(out / "crossover.csv", cross, CROSSOVER_COLUMNS)
    write_csv(out / "costs.csv", costs, COST_COLUMNS)
    main = next(c for c in cross if c["dpds_variant"] == "dpds" and c["dpdg_variant"] == "dpdg-tight")
    plot_variance_vs_n(out / "variance_vs_n.png", by_n, main, EPSILON, grid.runs)
    plot_variance_vs_eps(out / "variance_vs_eps.png", by_eps, grid.runs)
    plot_costs(out / "costs.png", costs)

    measured = [r for r in by_n + by_eps if r["feasible"] and r["reliable"]]
    classic = next(c for c in cross if c["dpds_variant"] == "dpds" and c["dpdg_variant"] == "dpdg-classic")
    dpds_costs = [r for r in costs if r["protocol"] == "dpds"]
    return {
        "grid": name,
        "runs_per_point": grid.runs,
        "paper_n_star": round(main["paper_n_star"], 1),
        "crossover_n_dpdg_tight": _crossover(main),
        "crossover_n_dpdg_classic": _crossover(classic),
        "dpdg_below_dpds_at_every_n": main["dpdg_lower_at_every_n"] and classic["dpdg_lower_at_every_n"],
        "largest_abs_z": round(max(abs(r["z"]) for r in measured), 2),
        "infeasible_points": sum(not r["feasible"] for r in by_n + by_eps),
        "dpds_sends_no_share": all(r["user_sent"] == r["user_received"] == 0 and r["user_to_server"] == r[
            "domain_size"] for r in dpds_costs),
        "files": sorted(FILES),
        "seconds": round(time.perf_counter() - start, 1),
    }
