"""``privagg reproduce vector-shuffle``: the vector-sum experiments of Scott, Cormode and Maple, "Applying the
Shuffle Model of Differential Privacy to Vector Aggregation" (BICOD 2021; reference
../shared/papers/shuffle-vector-aggregation.md, §4), on the bundled digits instead of the authors' ECG rows.
Results and discussion: docs/results/vector-shuffle.md.

The protocol is ``blanket-vector`` (R_{d,k,n,t} and A_{d,k,t}): each user samples t of his d coordinates,
rounds each to {0..k} and sends it through randomized response with blanket probability gamma. gamma comes
from the paper's closed forms (calibration ``paper``, reference §3.1) or from the shuffle accountant
(``tight``); both are run at every point.

Dataset (``privagg.datasets.digits_vectors``): the 1,797 x 64 UCI digits scaled to [0, 1], instead of the
authors' ECG rows (d up to 150, n up to 70,000). Users are rows drawn with replacement, one seeded bootstrap
of USERS_MAX rows of which a point with n users takes the first n (when n > 1,797; the first n rows
otherwise); a user's vector is the first d columns, as the authors take. The dimension grid is therefore
d in {8, 16, ..., 64} instead of 60..150, and the default d = 64 instead of 100. The other defaults and grids
are the authors' (t = 1, k = 3, eps = 0.95, n = 50,000, R = 10 runs). delta = 0.5 is the authors' (their
code's; our parameters accept it and the closed forms are defined there), and every experiment is also run
at the realistic delta = 1e-6, where the paper's gamma exceeds 1 at many points: such points are recorded
as infeasible (``feasible`` false, the refusal in ``note``), never measured.

1. MSE against t, k, d, eps (0.5..0.95 and 1.0..5.5) and n, one parameter varied at a time
   (``mse.csv``; ``mse_vs_t.png``, ``mse_vs_k.png``, ``mse_vs_d.png``, ``mse_vs_eps.png``,
   ``mse_vs_n.png``). The metric is the authors' "total experimental MSE-hat", sum over the d coordinates
   of (estimated mean - true mean)^2, on the [0, 1] scale (the authors map [-1, 1] to [0, 1] and measure
   back on [-1, 1]: 4 times ours). Measured: mean and sd over R seeded runs of the library's estimate, the
   debiased mean of the c_l reports a coordinate received, (sum y / k - gamma c_l / 2) / ((1 - gamma) c_l),
   as the authors' code normalises (``mse``). Theory (``theory_mse``): the exact expectation, sum_l Var_l /
   n^2 with Var_l from ``BlanketVectorParameters.variance`` at the population's S1, S2 and rounding term R;
   ``theory_se`` is the sd of a mean of R runs, from the estimates' covariance with the errors taken as
   normal: Var(sum_l e_l^2) = 2 ||Sigma||_F^2. Off the diagonal, Cov(est_l, est_m) = -n s_lm (d - t) /
   (t (d - 1)), s_lm the users' covariance of x_l and x_m: exact for t = 1 (disjoint uniform samples of the
   users) and t = d, to first order in between. ``z`` = (mse - theory) / theory_se.
   ``theory_no_blanket``: the same expectation at gamma = 0 (coordinate sampling and rounding only), the floor
   no calibration removes.
   Bounds: ``mse_bound`` is the reference's Theorem 4.6 form t d^2 (1/(4k^2) + gamma/2) / (n (1 - gamma)^2)
   (``paper_mse_bound``, already on the scale of ``mse``), which leaves out which users report a coordinate
   and is no upper bound; ``library_bound`` is the library's ``mse_bound``, an upper bound over every
   dataset in [0, 1]^d.
2. gamma and the gain of the tight calibration (``gamma.csv``): at every point of the grids, the paper's
   and the tight gamma, their ratio, and the ratio of the MSEs (theory and measured), paper over tight. (For
   t >= 2 the tight accountant composes the t reports' local epsilons linearly, so at large t its gamma can
   exceed the paper's advanced-composition form: the summary lists such points, ``tight_above_paper``.)
3. Slopes (``fits.csv``): least-squares slopes of log MSE on log x for x = n, d, eps (both ranges):
   measured, theory, the bound, and the authors' fitted curves (reference §4 table, evaluated with the
   paper's gamma at their d = 100 over their grids), beside the exponents their curves and the theory state.

The runs skip the shuffle: VectorClient(parameters).randomize and VectorAnalyzer's agg_update / finalize are
called directly. The analyzer only sums per coordinate (bincounts), so its output does not depend on the
order of the messages and a shuffle would change nothing but the running time. These are seeded
simulations, not private runs. matplotlib is imported inside the plotting functions (Agg canvas, no pyplot),
so that ``import privagg`` stays light.
"""

from __future__ import annotations

import functools
import math
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import ParameterError
from ..simulate.progress import Progress
from .sampling import write_csv

DEFAULTS = {"t": 1, "k": 3, "d": 64, "eps": 0.95, "n": 50_000}  # the authors' except d (100 there)
PAPER_DELTA = 0.5  # the authors' code's delta
REALISTIC_DELTA = 1e-6  # below 1/n at every n of the grids
DELTAS = (PAPER_DELTA, REALISTIC_DELTA)
CALIBRATIONS = ("paper", "tight")
USERS_MAX = 70_000  # the bootstrap's length: the largest n of the authors' grid
AUTHORS_DIMENSION = 100  # the authors' default d, at which their fitted curves were drawn


@dataclass(frozen=True)
class Grid:
    """The values each varied parameter takes (the others at DEFAULTS), and the runs per point."""

    t: tuple[int, ...]
    k: tuple[int, ...]
    d: tuple[int, ...]
    eps_small: tuple[float, ...]
    eps_large: tuple[float, ...]
    n: tuple[int, ...]
    runs: int

    def experiments(self) -> list[tuple[str, str, tuple]]:
        """(experiment name, the parameter it varies, its values) in the order they run."""
        return [("t", "t", self.t), ("k", "k", self.k), ("d", "d", self.d), ("eps_small", "eps", self.eps_small),
                ("eps_large", "eps", self.eps_large), ("n", "n", self.n)]


FULL = Grid(t=tuple(range(1, 11)), k=tuple(range(1, 11)), d=tuple(range(8, 65, 8)),
            eps_small=tuple(round(0.5 + 0.05 * i, 2) for i in range(10)),
            eps_large=tuple(round(1.0 + 0.5 * i, 1) for i in range(10)),
            n=(10_000, 11_000, 14_000, 17_000, 20_000, 30_000, 40_000, 50_000, 60_000, 70_000), runs=10)
QUICK = Grid(t=(1, 2), k=(1, 3), d=(16, 64), eps_small=(0.5, 0.95), eps_large=(1.0, 4.0), n=(10_000, 50_000), runs=5)

MSE_COLUMNS = ("experiment", "varied", "value", "delta", "calibration", "t", "k", "d", "eps", "n", "feasible",
               "gamma", "runs", "mse", "mse_sd", "mse_se", "theory_mse", "theory_se", "z", "ratio",
               "theory_no_blanket", "mse_bound", "mse_over_bound", "library_bound", "note")
GAMMA_COLUMNS = ("experiment", "varied", "value", "delta", "t", "k", "d", "eps", "n", "gamma_paper", "gamma_tight",
                 "gamma_ratio", "theory_mse_paper", "theory_mse_tight", "theory_mse_ratio", "mse_ratio",
                 "bound_paper", "bound_tight")
FIT_COLUMNS = ("experiment", "varied", "delta", "calibration", "points", "x_range", "slope_mse", "slope_theory",
               "slope_bound", "authors_curve_slope", "authors_curve_exponent",
               "theory_exponent")
PLOTS = {"t": "mse_vs_t.png", "k": "mse_vs_k.png", "d": "mse_vs_d.png", "eps": "mse_vs_eps.png",
         "n": "mse_vs_n.png"}
FILES = ("mse.csv", "gamma.csv", "fits.csv", *PLOTS.values())

# The authors' best-fit curves (reference §4, from their plotting code), on their [-1, 1] scale, as functions of
# the varied value and the paper's gamma there; the exponent of x their curves state; the theory's (§3.2, at the
# balancing k*, which grows as n^(1/3)); the grid they were fitted over.
AUTHORS_CURVES = {
    "d": (lambda x, g: 1.8e-7 * x ** (8 / 3) / (1 - g) ** 2 + 0.002, 8 / 3, 8 / 3, tuple(range(60, 151, 10))),
    "eps_small": (lambda x, g: 0.025 * x ** (-4 / 3) / (1 - g) ** 2 + 0.016, -4 / 3, -4 / 3,
                  tuple(round(0.5 + 0.05 * i, 2) for i in range(10))),
    "eps_large": (lambda x, g: 0.08 * x ** (-4 / 3) / (1 - g) ** 2 + 0.017, -4 / 3, -4 / 3,
                  tuple(round(1.0 + 0.5 * i, 1) for i in range(10))),
    "n": (lambda x, g: 1.1 * (x / 1000) ** (-7 / 6) / (1 - g) ** 2 + 0.024, -7 / 6, -5 / 3,
          (10_000, 11_000, 14_000, 17_000, 20_000, 30_000, 40_000, 50_000, 60_000, 70_000)),
}


# --- population and theory --------------------------------------------------------------------------------


def bootstrap(rows: int, seed: int, users: int = USERS_MAX) -> np.ndarray:
    """The users' row indices: ``users`` rows drawn with replacement from ``rows``, seeded by ``seed``."""
    rng = np.random.default_rng(np.random.SeedSequence(seed, spawn_key=(0,)))
    return rng.integers(0, rows, size=users)


def population(data: np.ndarray, index: np.ndarray, n_users: int, dimension: int) -> np.ndarray:
    """The (n, d) vectors of a point: the first n rows of the bootstrap (the first n rows of the data when they
    suffice), the first d columns."""
    rows = np.arange(n_users) if n_users <= data.shape[0] else index[:n_users]
    return np.ascontiguousarray(data[rows, :dimension])


@dataclass(frozen=True)
class Moments:
    """What the theory needs of a population at k levels: per coordinate S1 = sum x, S2 = sum x^2, the rounding
    term R = sum f (1 - f) / k^2 (f the fraction of x k), and the users' covariance matrix s_lm (denominator
    n - 1)."""

    s1: np.ndarray
    s2: np.ndarray
    rounding: np.ndarray
    covariance: np.ndarray


def moments(vectors: np.ndarray, levels: int) -> Moments:
    scaled = vectors * levels
    fraction = scaled - np.floor(scaled)
    return Moments(vectors.sum(axis=0), (vectors**2).sum(axis=0),
                   (fraction * (1 - fraction)).sum(axis=0) / levels**2, np.atleast_2d(np.cov(vectors, rowvar=False)))


def error_covariance(parameters, m: Moments) -> np.ndarray:
    """The (d, d) covariance of the coordinates' sum estimates: Var_l from ``variance`` on the diagonal; off it
    -n s_lm (d - t) / (t (d - 1)) (module docstring)."""
    d, t = parameters.dimension, parameters.coordinates
    c = (d - t) / (t * (d - 1)) if d > 1 else 0.0
    sigma = -c * parameters.n_users * m.covariance
    np.fill_diagonal(sigma, parameters.variance(m.s1, m.s2, m.rounding))
    return sigma


def floor_mse(parameters, m: Moments) -> float:
    """The same estimator's expected MSE-hat without blanket (gamma = 0): coordinate sampling and rounding only,
    sum_l (n^2 (S^2 + R / n) E[1/c] - n S^2) / n^2 (``variance`` at gamma = 0). What no calibration removes."""
    n = parameters.n_users
    spread = (m.s2 - m.s1**2 / n) / (n - 1)
    return float(np.sum((spread + m.rounding / n) * parameters.inverse_count_mean - spread / n))


def theory(parameters, m: Moments) -> tuple[float, float]:
    """(E[one run's MSE-hat], its sd): tr Sigma / n^2 and sqrt(2 ||Sigma||_F^2) / n^2 (normal errors)."""
    sigma = error_covariance(parameters, m)
    n2 = float(parameters.n_users) ** 2
    return float(np.trace(sigma)) / n2, math.sqrt(2 * float(np.sum(sigma**2))) / n2


@functools.lru_cache(maxsize=None)
def calibrate(epsilon: float, delta: float, n_users: int, dimension: int, levels: int, coordinates: int,
              calibration: str):
    from ..protocols.privacy_blanket import calibrate_blanket_vector

    return calibrate_blanket_vector(epsilon, delta, n_users, dimension, calibration=calibration, levels=levels,
                                    coordinates_per_user=coordinates)


# --- experiment 1: MSE ----------------------------------------------------------------------------------


def measure(parameters, vectors: np.ndarray, seeds: Sequence[np.random.SeedSequence]) -> np.ndarray:
    """Each run's MSE-hat (no shuffle: the analyzer's bincounts do not depend on the messages' order)."""
    from ..protocols.privacy_blanket import VectorAnalyzer, VectorClient

    client, analyzer = VectorClient(parameters), VectorAnalyzer(parameters)
    n = parameters.n_users
    true_mean = vectors.sum(axis=0) / n
    mse = np.empty(len(seeds))
    for r, s in enumerate(seeds):
        agg = analyzer.agg_update(analyzer.agg_init(), client.randomize(vectors, np.random.default_rng(s)))
        mse[r] = float(np.sum((analyzer.finalize(agg).total / n - true_mean) ** 2))
    return mse


def point_row(experiment: str, varied: str, value, setting: dict[str, Any], delta: float, calibration: str,
              vectors: np.ndarray, m: Moments, runs: int, seeds) -> dict[str, Any]:
    """One (point, delta, calibration): calibrated, measured over ``runs`` runs, its theory and bound."""
    row: dict[str, Any] = {"experiment": experiment, "varied": varied, "value": value, "delta": delta,
                           "calibration": calibration, **setting, "runs": 0}
    try:
        parameters = calibrate(setting["eps"], delta, setting["n"], setting["d"], setting["k"], setting["t"],
                               calibration)
    except ParameterError as err:
        return {**row, "feasible": False, "note": "infeasible: " + str(err).replace("; or use --calibration tight", "")}
    ours = measure(parameters, vectors, seeds)
    mse, sd = float(ours.mean()), float(ours.std(ddof=1))
    expected, one_sd = theory(parameters, m)
    se = one_sd / math.sqrt(runs)
    bound = parameters.paper_mse_bound()
    return {**row, "feasible": True, "gamma": parameters.gamma, "runs": runs, "mse": mse, "mse_sd": sd,
            "mse_se": sd / math.sqrt(runs), "theory_mse": expected, "theory_se": se, "z": (mse - expected) / se,
            "ratio": mse / expected, "theory_no_blanket": floor_mse(parameters, m),
            "mse_bound": bound, "mse_over_bound": mse / bound, "library_bound": parameters.mse_bound(),
            "note": ""}


def mse_rows(grid: Grid, data: np.ndarray, index: np.ndarray, seed: int,
             progress: Progress | None) -> list[dict[str, Any]]:
    """Every experiment's points at both deltas and calibrations; the runs of each (experiment, point, delta,
    calibration) seeded by that key, so the points are independent."""
    rows = []
    for e, (experiment, varied, values) in enumerate(grid.experiments()):
        stage = f"mse vs {experiment}"
        total = len(values) * len(DELTAS) * len(CALIBRATIONS) * grid.runs
        for i, value in enumerate(values):
            setting = {**DEFAULTS, varied: value}
            vectors = population(data, index, setting["n"], setting["d"])
            m = moments(vectors, setting["k"])
            for j, delta in enumerate(DELTAS):
                for c, calibration in enumerate(CALIBRATIONS):
                    seeds = np.random.SeedSequence(seed, spawn_key=(1, e, i, j, c)).spawn(grid.runs)
                    rows.append(point_row(experiment, varied, value, setting, delta, calibration, vectors, m,
                                          grid.runs, seeds))
                    if progress:
                        progress(stage, grid.runs, total)
    return rows


# --- experiments 2 and 3: gamma and slopes ------------------------------------------------------------


def gamma_rows(rows: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per point and delta: both gammas, and paper over tight for gamma and the MSEs (where both are feasible)."""
    by = {(r["experiment"], r["value"], r["delta"], r["calibration"]): r for r in rows}
    out = []
    for r in rows:
        if r["calibration"] != "paper":
            continue
        paper, tight = r, by[r["experiment"], r["value"], r["delta"], "tight"]
        row = {key: r[key] for key in ("experiment", "varied", "value", "delta", "t", "k", "d", "eps", "n")}
        row.update(gamma_paper=paper.get("gamma"), gamma_tight=tight.get("gamma"),
                   theory_mse_paper=paper.get("theory_mse"), theory_mse_tight=tight.get("theory_mse"),
                   bound_paper=paper.get("mse_bound"), bound_tight=tight.get("mse_bound"))
        if paper["feasible"] and tight["feasible"]:
            row.update(gamma_ratio=paper["gamma"] / tight["gamma"],
                       theory_mse_ratio=paper["theory_mse"] / tight["theory_mse"],
                       mse_ratio=paper["mse"] / tight["mse"])
        out.append(row)
    return out


def slope(x: Sequence[float], y: Sequence[float]) -> float | None:
    """Least-squares slope of log y on log x (None below 3 points)."""
    if len(x) < 3:
        return None
    return float(np.polyfit(np.log(np.asarray(x, dtype=float)), np.log(np.asarray(y, dtype=float)), 1)[0])


def authors_curve_slope(experiment: str) -> float:
    """The slope (log-log, least squares) of the authors' fitted curve over their grid, with the paper's gamma at
    their defaults (d = 100, t = 1, k = 3, eps = 0.95, n = 50,000, delta = 0.5)."""
    from ..privacy.blanket import paper_vector_gamma

    curve, _, _, values = AUTHORS_CURVES[experiment]
    setting = {**DEFAULTS, "d": AUTHORS_DIMENSION}
    ys = []
    for x in values:
        s = {**setting, {"eps_small": "eps", "eps_large": "eps"}.get(experiment, experiment): x}
        g = paper_vector_gamma(s["eps"], PAPER_DELTA, s["n"], s["d"], s["k"], s["t"])
        ys.append(curve(x, g))
    return slope(values, ys)


def fit_rows(rows: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    out = []
    for experiment, (_, exponent, theory_exponent, _) in AUTHORS_CURVES.items():
        authors = authors_curve_slope(experiment)
        for delta in DELTAS:
            for calibration in CALIBRATIONS:
                mine = [r for r in rows if r["experiment"] == experiment and r["delta"] == delta
                        and r["calibration"] == calibration and r["feasible"]]
                xs = [r["value"] for r in mine]
                out.append({"experiment": experiment, "varied": mine[0]["varied"] if mine else "",
                            "delta": delta, "calibration": calibration, "points": len(mine),
                            "x_range": f"{min(xs):g}-{max(xs):g}" if xs else "",
                            "slope_mse": slope(xs, [r["mse"] for r in mine]),
                            "slope_theory": slope(xs, [r["theory_mse"] for r in mine]),
                            "slope_bound": slope(xs, [r["mse_bound"] for r in mine]),
                            "authors_curve_slope": authors, "authors_curve_exponent": exponent,
                            "theory_exponent": theory_exponent})
    return out


# --- plots ---------------------------------------------------------------------------------------------


COLORS = {"paper": "C0", "tight": "C3"}
TITLES = {"t": "coordinates per user t", "k": "levels k", "d": "dimension d (first d pixels)",
          "eps": "epsilon", "n": "users n"}


def plot_parameter(path: Path, rows: Sequence[dict[str, Any]], varied: str, runs: int) -> None:
    """Two columns (delta = 0.5, 1e-6), two rows (MSE-hat, gamma); paper and tight calibrations. Log y
    throughout (the paper's eps and n figures are log y; here the calibrations differ by orders of magnitude at
    every parameter), log x for d, eps and n (where slopes are read)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    from matplotlib.ticker import FuncFormatter, LogLocator

    plain = FuncFormatter(lambda value, _: f"{value:g}")  # no mathtext: faster, and readable
    fig = Figure(figsize=(12, 8.5))
    FigureCanvasAgg(fig)
    axes = fig.subplots(2, 2, sharex=True, height_ratios=(2, 1))
    fig.subplots_adjust(left=0.07, right=0.98, bottom=0.07, top=0.80, wspace=0.16, hspace=0.06)
    mine = [r for r in rows if r["varied"] == varied]
    experiments = sorted({r["experiment"] for r in mine})
    values = sorted({r["value"] for r in mine})
    ticks = values if len(values) <= 10 else values[::2]
    if varied == "eps":
        ticks = [e for e in (0.5, 0.6, 0.7, 0.8, 1, 1.5, 2, 3, 4, 5.5) if values[0] <= e <= values[-1]]
    elif varied == "n":  # labels in thousands, at least a factor 1.25 apart on the log axis
        ticks = [values[0]]
        for value in values[1:]:
            if value >= 1.25 * ticks[-1]:
                ticks.append(value)
    for col, delta in enumerate(DELTAS):
        top, bottom = axes[0][col], axes[1][col]
        labelled = col == 0  # one legend for the figure, from the first column's artists
        for calibration in CALIBRATIONS:
            color = COLORS[calibration]
            for experiment in experiments:
                points = sorted((r for r in mine if r["delta"] == delta and r["calibration"] == calibration
                                 and r["experiment"] == experiment and r["feasible"]), key=lambda r: r["value"])
                if not points:
                    continue
                label = labelled and experiment == experiments[0]
                x = [r["value"] for r in points]
                top.errorbar(x, [r["mse"] for r in points], yerr=[r["mse_sd"] for r in points], fmt="o", ms=4,
                             capsize=0, color=color, label=f"{calibration}: measured, mean +-1 sd" if label else None)
                top.plot(x, [r["theory_mse"] for r in points], "--_" if len(x) == 1 else "--", ms=14, color=color,
                         lw=1.2, label=f"{calibration}: exact theory" if label else None)
                top.plot(x, [r["library_bound"] for r in points], "-.", color=color, lw=1.0, alpha=0.7,
                         label=f"{calibration}: library's upper bound (any data)" if label else None)
                top.plot(x, [r["mse_bound"] for r in points], ":", color=color, lw=1.5,
                         label=f"{calibration}: paper's bound (Thm 4.6 form)" if label else None)
                bottom.plot(x, [r["gamma"] for r in points], "o-", ms=3, color=color,
                            label=f"{calibration}: gamma" if label else None)
            refused = sorted({r["value"] for r in mine if r["delta"] == delta and r["calibration"] == calibration
                              and not r["feasible"]})
            if refused:
                bottom.plot(refused, [1.0] * len(refused), "X", color=color, ms=7, ls="none",
                            label=f"{calibration}: infeasible (gamma > 1), drawn at 1")
        if varied == "eps":
            for ax in (top, bottom):
                ax.axvline(1.0, color="0.5", lw=0.8, ls="-.")
        top.set_yscale("log")
        bottom.set_yscale("log")
        if varied in ("d", "eps", "n"):
            top.set_xscale("log")
        top.set_title(f"delta = {delta:g}" + (" (the authors')" if delta == PAPER_DELTA else " (realistic)"),
                      fontsize=10)
        bottom.set_xlabel(TITLES[varied])
        for ax in (top, bottom):
            ax.grid(True, lw=0.3, alpha=0.5)
            ax.minorticks_off()  # the log axes' minor ticks cost a third of the drawing: 1-2-5 majors instead
            ax.yaxis.set_major_locator(LogLocator(subs=(1, 2, 5) if ax is top else (1,)))
            ax.set_xticks(ticks)
            ax.yaxis.set_major_formatter(plain)
            ax.xaxis.set_major_formatter(FuncFormatter(lambda value, _: f"{value / 1000:g}k") if varied == "n"
                                         else plain)
    axes[0][0].set_ylabel("total MSE-hat, [0, 1] scale")
    axes[1][0].set_ylabel("gamma")
    found: dict[str, Any] = {}
    for ax in (axes[0][0], axes[1][0], axes[1][1]):
        for h, lab in zip(*ax.get_legend_handles_labels()):
            found.setdefault(lab, h)
    order = sorted(found, key=lambda lab: (not lab.startswith("paper"), lab.split(": ")[1].startswith("infeasible"),
                                           "gamma" in lab, "bound" in lab, "theory" in lab))
    fig.legend([found[lab] for lab in order], order, loc="upper center", bbox_to_anchor=(0.5, 0.96), ncol=2,
               fontsize=8, frameon=False)
    others = ", ".join(f"{key} = {value:g}" for key, value in DEFAULTS.items() if key != varied)
    fig.suptitle(f"MSE-hat against {varied} ({others}; digits, bootstrap users); {runs} runs a point", fontsize=11)
    fig.savefig(path, dpi=100)


# --- entry point ----------------------------------------------------------------------------------------


def run(out: Path, quick: bool = False, seed: int = 0, progress: Progress | None = None) -> dict[str, Any]:
    """Run the experiments (module docstring) and write their CSV tables and PNG plots into ``out``.

    ``quick``: a small grid (a few seconds) instead of the full one. ``seed``: the bootstrap and every run's
    generator are spawned from it (seeded simulations, not private runs). ``progress(stage, advance, total)``:
    as privagg.simulate's, one stage per experiment (``mse vs t``, ...). Returns a summary.
    """
    from ..datasets import digits_vectors

    start = time.perf_counter()
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    grid = QUICK if quick else FULL
    data = digits_vectors()
    index = bootstrap(data.shape[0], seed, max(USERS_MAX, *grid.n))

    rows = mse_rows(grid, data, index, seed, progress)
    gammas = gamma_rows(rows)
    fits = fit_rows(rows)
    write_csv(out / "mse.csv", rows, MSE_COLUMNS)
    write_csv(out / "gamma.csv", gammas, GAMMA_COLUMNS)
    write_csv(out / "fits.csv", fits, FIT_COLUMNS)
    for varied, name in PLOTS.items():
        plot_parameter(out / name, rows, varied, grid.runs)

    measured = [r for r in rows if r["feasible"]]
    default = {}
    for r in rows:  # the first experiment that holds the default point
        if all(r[key] == value for key, value in DEFAULTS.items()):
            default.setdefault((r["delta"], r["calibration"]), r)
    best_t, best_t_theory = {}, {}
    for delta in DELTAS:
        for calibration in CALIBRATIONS:
            ts = [r for r in measured if r["experiment"] == "t" and r["delta"] == delta
                  and r["calibration"] == calibration]
            best_t[f"{calibration}@{delta:g}"] = min(ts, key=lambda r: r["mse"])["value"] if ts else None
            best_t_theory[f"{calibration}@{delta:g}"] = min(ts, key=lambda r: r["theory_mse"])["value"] if ts else None
    slopes = {f"{f['experiment']}:{f['calibration']}@{f['delta']:g}": None if f["slope_mse"] is None else
              round(f["slope_mse"], 2) for f in fits}
    return {
        "grid": "quick" if quick else "full",
        "runs_per_point": grid.runs,
        "gamma_at_defaults": {f"{c}@{d:g}": default[d, c].get("gamma") for d, c in default},
        "mse_at_defaults": {f"{c}@{d:g}": default[d, c].get("mse") for d, c in default},
        "largest_abs_z": round(max(abs(r["z"]) for r in measured), 2),
        "infeasible_points": sum(not r["feasible"] for r in rows),
        "best_t": best_t,
        "best_t_theory": best_t_theory,
        "tight_above_paper": [f"{g['experiment']}={g['value']:g}@{g['delta']:g}" for g in gammas
                              if g.get("gamma_ratio") is not None and g["gamma_ratio"] < 1],
        "slopes": slopes,
        "files": sorted(FILES),
        "seconds": round(time.perf_counter() - start, 1),
    }
