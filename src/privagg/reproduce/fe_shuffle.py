"""``privagg reproduce fe-shuffle``: the frequency-estimation experiments of Luo, Wang and Yi, "Frequency
Estimation in the Shuffle Model with Almost a Single Message" (CCS 2022; reference
../shared/papers/shuffle-frequency-estimation.md). Results and discussion: docs/results/fe-shuffle.md.

The paper's experiments section was not available (reference §5): its grids, baselines and figures are
unknown. The one set of published numbers we have is the authors' demo repository's shipped results table
(SDPFE, reference §4): FE1 on the AOL query log, n = 10^5, B = 2^24, eps = 1, delta = 10^-10, hash range
b = floor(n / ln^c n) at c = 1 and c = 3 (``SDPFE``). The AOL data is not available offline; the substitute
is the bundled English words (``privagg.datasets.english_words``: words drawn from wordfreq's real
frequencies over its 20,000 most common words, Zipf-like), hashed into [B] with
``privagg.simulate.frequency.item_encoder(B, None, seed)``. Users are the first n of one seeded draw of
the largest n of the grid.

Every point is one seeded fast-mode run of :func:`privagg.simulate.frequency.estimate_frequencies` at
eps = 1, delta = 10^-10 (pure eps-DP protocols at delta = 0), with each protocol's default calibration, as
``privagg compare`` runs them. Protocols (``VARIANTS``): ``fe1`` at c = 1 and c = 3 (FE1, one hashed message
plus rho = mu b / n dummies), ``fe0`` (the value plus rho = mu B / n blanket values), ``blanket-hist``
(the single-message privacy-blanket histogram of Balle et al., tight gamma), the local baselines ``grr``,
``olh``, ``hadamard`` and ``oue``, and the central ``laplace`` as the floor. The error of a point is the
50th, 90th and 99th percentile (and the max and mean) of |estimate - count| over the domain, as SDPFE
reports it, and the messages a user sent (realised; ``messages_expected`` is the protocol's expectation).

1. FE1 against c (``points.csv`` rows with experiment ``c``; ``error_vs_c.png``): c in ``Grid.c_values``
   (0.5 to 3 on the full grid) at the SDPFE point (n, B) = (10^5, 2^24) on the full grid, beside the other
   protocols at that point (recorded with experiment ``c`` and no value) and beside SDPFE's c = 1 and c = 3
   rows (``sdpfe.csv``; there messages and bytes per user are expected values, 1 + rho, as SDPFE's are).
2. Error and messages against n (experiment ``n``; ``error_vs_n.png``) at B = 2^16 (the largest domain
   where the local baselines run) and at the paper's B = 2^24.
3. Error and messages against B (experiment ``B``; ``error_vs_B.png``) at n = 10^5.

Not run, and recorded with the reason (``status`` ``not run``): the local baselines GRR, OLH, Hadamard and
OUE above B = 2^16 (their analyzers decode the whole domain: GRR and Hadamard are cheap, but their error
is already far above the shuffle protocols' at 2^16); OLH also where n B > 2^33 (its analyzer hashes every
report at every item, about 6 s at n B = 2^33 on 2 cores); FE0 where it would send more than 1,100
messages a user (1 + mu B / n: B > about 11 n); OUE where its n (1/2 + (B - 1) / (e^eps + 1)) messages exceed
2^25 (about a second; its error is OLH's). Refused by the library (``status`` ``refused``, its ParameterError
in ``note``): OUE where those messages exceed 2^27, which the simulator does not take.

The error is measured over the whole domain, except for FE1 where counting every item by preimage
enumeration (work n (1 + rho) q / b) would cost more than counting a uniform sample of ``sample_items``
items of [B] directly (work n (1 + rho) per item): there, q / b > sample_items, the percentiles are over
that sample (the same seeded sample for every such row at one B; ``error_over`` says which). The sample's
percentiles estimate the domain's: their standard error is sqrt(p (1 - p) / K) / f(x_p), about 0.8 sigma /
sqrt(K) at the median.

Theory (fe0 and fe1 rows): an empty item's estimate (count - n p_col - mu) / (1 - p_col) has sd
sigma = sqrt(n p_col (1 - p_col) + mu) / (1 - p_col) (reference §4, "DERIVED check"; FE0: p_col = 0), so
|error| is about |N(0, sigma)|: ``pred_p50``, ``pred_p90``, ``pred_p99`` = 0.6745, 1.645, 2.576 sigma.
``p50_gap`` = measured - predicted median; ``p50_allowance`` = 4 standard errors of the empirical median
over the row's items plus one step of the estimates' lattice (counts are integers, so |error| takes values
|k - n p_col - mu| / (1 - p_col) and an empirical quantile sits on one of them). ``pred_max``: the median
of the largest of the row's items' |N(0, sigma)|. ``fits.csv``: log-log slopes of the error percentiles and
the messages against n and against B.

The runs are seeded simulations, not private runs; the errors use the true counts. matplotlib is imported
inside the plotting functions (Agg canvas, no pyplot), so that ``import privagg`` stays light.
"""

from __future__ import annotations

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

EPSILON = 1.0
DELTA = 1e-10  # SDPFE's delta = 1/n^2 at n = 10^5; kept at every n of the grids
VOCABULARY = 20_000  # the bundled words' vocabulary (privagg.datasets.DEFAULT_VOCABULARY)
LOCAL_DOMAIN_MAX = 2**16  # GRR, OLH, Hadamard, OUE run up to this B
OLH_WORK_MAX = 2**33  # OLH runs while n B is at most this
FE0_MESSAGES_MAX = 1100  # FE0 runs while 1 + mu B / n is at most this
OUE_TOTAL_MAX = 2**25  # OUE runs while its n (1/2 + (B - 1) / (e^eps + 1)) messages are at most this (about 1 s)
LOCAL = ("grr", "olh", "hadamard", "oue")
Z50, Z90, Z99 = 0.6744897501960817, 1.6448536269514722, 2.5758293035489004  # |N(0,1)| percentiles
ALLOWANCE_SE = 4  # standard errors of the empirical median in p50_allowance

# SDPFE's shipped results (reference §4): AOL "aol01", n = 10^5, B = 2^24, eps = 1, delta = 1e-10, q = 16777259,
# mu = 97.9614. Percentiles and L-infinity of |error| over all 2^24 ids.
SDPFE_POINT = {"n": 100_000, "B": 2**24, "q": 16_777_259, "mu": 97.9614}
SDPFE = {
    1: {"bins": 8685, "collision_probability": 1.15081e-4, "messages_per_user": 9.50795, "bytes_per_user": 76.06,
        "error_max": 57.54, "error_p50": 7.47, "error_p90": 17.47, "error_p95": 20.53, "error_p99": 26.53},
    3: {"bins": 65, "collision_probability": 0.0153846, "messages_per_user": 1.06367, "bytes_per_user": 7.58,
        "error_max": 222.0, "error_p50": 27.85, "error_p90": 67.45, "error_p95": 79.81, "error_p99": 105.03},
}


@dataclass(frozen=True)
class Variant:
    """One protocol setting."""

    label: str
    protocol: str
    c: float | None = None  # FE1's c: b = floor(n / ln^c n)

    @property
    def options(self) -> dict[str, Any]:
        return {} if self.c is None else {"c": self.c}


def fe1(c: float) -> Variant:
    return Variant(f"fe1 (c={c:g})", "fe1", float(c))


VARIANTS: tuple[Variant, ...] = (fe1(1), fe1(3), Variant("fe0", "fe0"), Variant("blanket-hist", "blanket-hist"),
                                 Variant("grr", "grr"), Variant("olh", "olh"), Variant("hadamard", "hadamard"),
                                 Variant("oue", "oue"), Variant("laplace", "laplace"))
SHUFFLE = ("fe1", "fe0", "blanket-hist")


@dataclass(frozen=True)
class Grid:
    """The points of the three experiments (FULL, or QUICK for a first look and the tests)."""

    c_users: int
    c_domain: int
    c_values: tuple[float, ...]
    n_values: tuple[int, ...]
    n_domains: tuple[int, ...]
    b_users: int
    b_domains: tuple[int, ...]
    sample_items: int

    @property
    def users_max(self) -> int:
        return max(self.c_users, self.b_users, *self.n_values)


FULL = Grid(c_users=100_000, c_domain=2**24, c_values=(0.5, 1.0, 1.5, 2.0, 2.5, 3.0),
            n_values=(10_000, 30_000, 100_000, 300_000, 1_000_000), n_domains=(2**16, 2**24),
            b_users=100_000, b_domains=tuple(2**k for k in range(10, 25, 2)), sample_items=4096)
QUICK = Grid(c_users=20_000, c_domain=2**16, c_values=(1.0, 2.0, 3.0), n_values=(10_000, 30_000),
             n_domains=(2**14,), b_users=20_000, b_domains=(2**10, 2**14, 2**18), sample_items=2048)

POINT_COLUMNS = ("experiment", "varied", "value", "label", "protocol", "c", "n_users", "domain_size", "epsilon",
                 "delta", "status", "note", "bins", "modulus", "collision_probability", "mu", "rho", "gamma",
                 "messages_expected", "messages_per_user", "bits_per_message", "bits_per_user", "error_over",
                 "items", "error_p50", "error_p90", "error_p99", "error_max", "error_mean", "theory_sd",
                 "pred_p50", "pred_p90", "pred_p99", "pred_max", "p50_gap", "p50_allowance", "max_error_bound",
                 "seconds")
SDPFE_COLUMNS = ("c", "quantity", "ours", "sdpfe", "gaussian", "ours_over_sdpfe", "note")
FIT_COLUMNS = ("experiment", "label", "fixed", "points", "x_range", "slope_p50", "slope_p90", "slope_p99",
               "slope_messages")
PLOTS = ("error_vs_c.png", "error_vs_n.png", "error_vs_B.png")
FILES = ("points.csv", "sdpfe.csv", "fits.csv", *PLOTS)


# --- theory -------------------------------------------------------------------------------------------


def gaussian_sd(n_users: int, collision_probability: float, mu: float) -> float:
    """sigma = sqrt(n p_col (1 - p_col) + mu) / (1 - p_col): the sd of an empty item's estimate (reference §4)."""
    p = collision_probability
    return math.sqrt(n_users * p * (1 - p) + mu) / (1 - p)


def quantile_se(sigma: float, z: float, level: float, items: int) -> float:
    """The standard error of the empirical ``level`` quantile of |N(0, sigma)| over ``items`` independent items:
    sqrt(level (1 - level) / K) / f(z sigma), f the density of |N(0, sigma)|."""
    density = 2 * math.exp(-z * z / 2) / math.sqrt(2 * math.pi) / sigma
    return math.sqrt(level * (1 - level) / items) / density


def max_median(sigma: float, items: int) -> float:
    """The median of the largest of ``items`` independent |N(0, sigma)|: sigma Phi^-1((1 + 2^(-1/B)) / 2)."""
    from scipy.stats import norm

    return sigma * float(norm.isf(-math.expm1(-math.log(2) / items) / 2))


# --- one point --------------------------------------------------------------------------------------


def _seed(seed: int, variant: Variant, n_users: int, domain_size: int) -> int:
    """The run's seed: a function of the setting only, so a point shared by two experiments is one run."""
    key = (VARIANTS.index(variant) if variant in VARIANTS else 99, int(round(10 * (variant.c or 0))), n_users,
           domain_size.bit_length())
    return int(np.random.SeedSequence(seed, spawn_key=key).generate_state(1, dtype=np.uint32)[0])


def domain_sample(seed: int, domain_size: int, items: int) -> np.ndarray:
    """``items`` distinct items uniform over [B], sorted; one sample per (seed, B)."""
    rng = np.random.default_rng(np.random.SeedSequence(seed, spawn_key=(1000, domain_size.bit_length())))
    return np.sort(rng.choice(domain_size, size=items, replace=False))


def skip_reason(variant: Variant, n_users: int, domain_size: int) -> str | None:
    """Why a setting is not run (module docstring), or None."""
    if variant.protocol in LOCAL and domain_size > LOCAL_DOMAIN_MAX:
        return f"not run: local baselines only up to B = 2^{LOCAL_DOMAIN_MAX.bit_length() - 1}"
    if variant.protocol == "olh" and n_users * domain_size > OLH_WORK_MAX:
        return f"not run: OLH only where n B <= 2^{OLH_WORK_MAX.bit_length() - 1} (its analyzer's work)"
    return None


class Runner:
    """Runs settings (variant, n, B) once each and keeps their rows (settings recur across experiments)."""

    def __init__(self, words, grid: Grid, seed: int) -> None:
        self.words, self.grid, self.seed = words, grid, seed
        self.rows: dict[tuple, dict[str, Any]] = {}
        self._codes: dict[tuple[int, int], tuple[Any, np.ndarray]] = {}
        self._samples: dict[int, np.ndarray] = {}

    def codes(self, n_users: int, domain_size: int):
        key = (n_users, domain_size)
        if key not in self._codes:
            from ..simulate.frequency import item_encoder

            encoder = item_encoder(domain_size, None, self.seed)
            self._codes = {k: v for k, v in self._codes.items() if k[0] == n_users}  # keep memory small
            self._codes[key] = (encoder, encoder.encode(self.words.slice(0, n_users)))
        return self._codes[key]

    def sample(self, domain_size: int) -> np.ndarray:
        if domain_size not in self._samples:
            self._samples[domain_size] = domain_sample(self.seed, domain_size, self.grid.sample_items)
        return self._samples[domain_size]

    def __call__(self, variant: Variant, n_users: int, domain_size: int) -> dict[str, Any]:
        key = (variant.protocol, variant.c, n_users, domain_size)
        if key not in self.rows:
            self.rows[key] = self.measure(variant, n_users, domain_size)
        return self.rows[key]

    def measure(self, variant: Variant, n_users: int, domain_size: int) -> dict[str, Any]:
        from ..protocols import registry
        from ..simulate.frequency import estimate_frequencies
        from ..simulate.runner import MESSAGES_MAX  # the simulator refuses more messages than this (no shortcut)

        entry = registry.get(variant.protocol)
        delta = 0.0 if entry.pure else DELTA
        row: dict[str, Any] = {"label": variant.label, "protocol": variant.protocol, "c": variant.c,
                               "n_users": n_users, "domain_size": domain_size, "epsilon": EPSILON, "delta": delta}
        reason = skip_reason(variant, n_users, domain_size)
        if reason:
            return {**row, "status": "not run", "note": reason}
        start = time.perf_counter()
        candidates = None
        try:
            parameters = registry.calibrate(variant.protocol, epsilon=EPSILON, delta=delta, n_users=n_users,
                                            domain_size=domain_size, calibration=entry.calibrations[0],
                                            **variant.options)
            if variant.protocol == "fe0" and parameters.messages_per_user > FE0_MESSAGES_MAX:
                return {**row, "status": "not run", "mu": parameters.mu, "rho": parameters.rho,
                        "messages_expected": parameters.messages_per_user,
                        "note": f"not run: FE0 only while 1 + mu B / n <= {FE0_MESSAGES_MAX} messages a user "
                                f"(here {parameters.messages_per_user:.4g})"}
            total = n_users * parameters.messages_per_user
            if variant.protocol == "oue" and OUE_TOTAL_MAX < total <= MESSAGES_MAX:
                return {**row, "status": "not run", "messages_expected": parameters.messages_per_user,
                        "note": f"not run: OUE only while its n (1/2 + (B - 1) / (e^eps + 1)) messages are at most "
                                f"2^{OUE_TOTAL_MAX.bit_length() - 1} (here {total:.3g}; the simulator refuses above "
                                f"2^{MESSAGES_MAX.bit_length() - 1})"}
            if variant.protocol == "fe1" and parameters.modulus / parameters.bins > self.grid.sample_items:
                candidates = self.sample(domain_size)
            encoder, codes = self.codes(n_users, domain_size)
            report, _ = estimate_frequencies(variant.protocol, codes, encoder, epsilon=EPSILON, delta=delta,
                                             calibration=entry.calibrations[0], options=variant.options,
                                             candidate_codes=candidates, full_domain=candidates is None,
                                             mode="fast", seed=_seed(self.seed, variant, n_users, domain_size))
        except ParameterError as err:
            return {**row, "status": "refused", "note": str(err), "seconds": time.perf_counter() - start}
        seconds = time.perf_counter() - start
        e, expected = report.error, report.expected_error
        row.update(status="run", note="", bins=getattr(parameters, "bins", None),
                   modulus=getattr(parameters, "modulus", None), mu=getattr(parameters, "mu", None),
                   rho=getattr(parameters, "rho", None), gamma=getattr(parameters, "gamma", None),
                   messages_expected=float(parameters.messages_per_user),
                   messages_per_user=float(report.messages.per_user), bits_per_message=report.bits_per_message,
                   bits_per_user=float(report.messages.per_user) * report.bits_per_message,
                   error_over="domain" if candidates is None else f"sample of {candidates.size}", items=e.items,
                   error_p50=e.p50, error_p90=e.p90, error_p99=e.p99, error_max=e.max_abs, error_mean=e.mean_abs,
                   theory_sd=expected.standard_error if expected else None,
                   max_error_bound=expected.max_error_bound if expected else None, seconds=seconds)
        if variant.protocol in ("fe0", "fe1"):
            p = float(getattr(parameters, "collision_probability", 0.0))
            sigma = gaussian_sd(n_users, p, parameters.mu)
            row.update(collision_probability=p, pred_p50=Z50 * sigma, pred_p90=Z90 * sigma, pred_p99=Z99 * sigma,
                       pred_max=max_median(sigma, e.items), p50_gap=e.p50 - Z50 * sigma,
                       p50_allowance=ALLOWANCE_SE * quantile_se(sigma, Z50, 0.5, e.items) + 1 / (1 - p))
        return row


# --- experiments --------------------------------------------------------------------------------------


def experiment_points(grid: Grid) -> list[tuple[str, str, Any, Variant, int, int]]:
    """(experiment, varied, value, variant, n, B) of every row, in the order they run."""
    points = []
    for c in grid.c_values:
        points.append(("c", "c", c, fe1(c), grid.c_users, grid.c_domain))
    for variant in VARIANTS:
        if variant.protocol != "fe1":  # the others at the same (n, B), for reference
            points.append(("c", "c", None, variant, grid.c_users, grid.c_domain))
    for domain in grid.n_domains:
        for n in grid.n_values:
            for variant in VARIANTS:
                points.append(("n", "n_users", n, variant, n, domain))
    for domain in grid.b_domains:
        for variant in VARIANTS:
            points.append(("B", "domain_size", domain, variant, grid.b_users, domain))
    return points


STAGES = {"c": "fe1 vs c", "n": "error vs n", "B": "error vs B"}


def point_rows(grid: Grid, words, seed: int, progress: Progress | None) -> list[dict[str, Any]]:
    runner = Runner(words, grid, seed)
    points = experiment_points(grid)
    totals = {e: sum(p[0] == e for p in points) for e in STAGES}
    rows = []
    for experiment, varied, value, variant, n, domain in points:
        rows.append({"experiment": experiment, "varied": varied, "value": value, **runner(variant, n, domain)})
        if progress:
            progress(STAGES[experiment], 1, totals[experiment])
    return rows


def sdpfe_rows(rows: Sequence[dict[str, Any]], grid: Grid) -> list[dict[str, Any]]:
    """Ours beside SDPFE's shipped table and the Gaussian prediction, at c = 1 and c = 3 of the c experiment
    (SDPFE's point on the full grid; the quick grid's point otherwise, said in ``note``)."""
    out = []
    at_sdpfe = (grid.c_users, grid.c_domain) == (SDPFE_POINT["n"], SDPFE_POINT["B"])
    for c, theirs in SDPFE.items():
        mine = next((r for r in rows if r["experiment"] == "c" and r["value"] == c and r["status"] == "run"), None)
        if mine is None:
            continue
        note = mine["error_over"] + ("" if at_sdpfe else f"; n = {grid.c_users}, B = {grid.c_domain} (not SDPFE's)")
        gaussian = {"error_p50": mine["pred_p50"], "error_p90": mine["pred_p90"], "error_p99": mine["pred_p99"],
                    "error_max": max_median(mine["pred_p50"] / Z50, grid.c_domain)}
        # SDPFE's messages and bytes per user are expected values, 1 + rho and (1 + rho) bits / 8
        ours = {"bins": mine["bins"], "collision_probability": mine["collision_probability"],
                "mu": mine["mu"], "messages_per_user": mine["messages_expected"],
                "messages_realised": mine["messages_per_user"],
                "bytes_per_user": mine["messages_expected"] * mine["bits_per_message"] / 8,
                "error_p50": mine["error_p50"],
                "error_p90": mine["error_p90"], "error_p99": mine["error_p99"], "error_max": mine["error_max"]}
        for quantity, value in ours.items():
            sdpfe = SDPFE_POINT["mu"] if quantity == "mu" else theirs.get(quantity)
            row_note = note if quantity.startswith("error") else ""
            if quantity == "error_max" and mine["error_over"] != "domain":
                row_note += "; ours is the max over the sample, not over [B]"
            out.append({"c": c, "quantity": quantity, "ours": value, "sdpfe": sdpfe, "gaussian": gaussian.get(quantity),
                        "ours_over_sdpfe": value / sdpfe if sdpfe else None, "note": row_note})
    return out


def slope(x: Sequence[float], y: Sequence[float]) -> float | None:
    """Least-squares slope of log y on log x (None below 2 points)."""
    if len(x) < 2:
        return None
    return float(np.polyfit(np.log(np.asarray(x, dtype=float)), np.log(np.asarray(y, dtype=float)), 1)[0])


def fit_rows(rows: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    out = []
    groups: dict[tuple, list[dict[str, Any]]] = {}
    for r in rows:
        if r["experiment"] in ("n", "B") and r["status"] == "run":
            fixed = f"B = 2^{r['domain_size'].bit_length() - 1}" if r["experiment"] == "n" else f"n = {r['n_users']}"
            groups.setdefault((r["experiment"], r["label"], fixed), []).append(r)
    for (experiment, label, fixed), mine in groups.items():
        mine = sorted(mine, key=lambda r: r["value"])
        xs = [r["value"] for r in mine]
        out.append({"experiment": experiment, "label": label, "fixed": fixed, "points": len(mine),
                    "x_range": f"{min(xs):g}-{max(xs):g}",
                    **{f"slope_{q}": slope(xs, [max(r[f"error_{q}"], 1e-9) for r in mine])
                       for q in ("p50", "p90", "p99")},
                    "slope_messages": slope(xs, [r["messages_per_user"] for r in mine])})
    return out


# --- plots -------------------------------------------------------------------------------------------


COLORS = {"fe1 (c=1)": "C0", "fe1 (c=3)": "C9", "fe0": "C2", "blanket-hist": "C3", "grr": "C5", "olh": "C1",
          "hadamard": "C4", "oue": "C6", "laplace": "k"}


def _pow2(value, _=None) -> str:
    return f"2^{int(round(math.log2(value)))}" if value > 0 else ""


def _thousands(value, _=None) -> str:
    return f"{value / 1000:g}k"


def _band(ax, points: Sequence[dict[str, Any]], x_of, color: str, label: str, marker: str = "o",
          shift: float = 1.0) -> None:
    """p90 as a line with markers; p50 and p99 as the ends of a vertical bar. ``shift`` multiplies x (a log axis:
    a small sideways offset per protocol, so that the bars of one point do not hide each other)."""
    x = [x_of(r) * shift for r in points]
    p50, p90, p99 = ([max(r[f"error_{q}"], 1e-3) for r in points] for q in ("p50", "p90", "p99"))
    ax.plot(x, p90, marker + "-", color=color, ms=4, lw=1.3, label=label)
    ax.vlines(x, p50, p99, color=color, lw=2.5, alpha=0.35)
    ax.plot(x, p50, "_", color=color, ms=7)
    ax.plot(x, p99, "_", color=color, ms=7)


def plot_c(path: Path, rows: Sequence[dict[str, Any]], grid: Grid) -> None:
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    from matplotlib.ticker import FuncFormatter

    plain = FuncFormatter(lambda value, _: f"{value:g}")
    fig = Figure(figsize=(12, 6.5))
    FigureCanvasAgg(fig)
    left, right = fig.subplots(1, 2, width_ratios=(1.6, 1))
    fig.subplots_adjust(left=0.07, right=0.98, bottom=0.09, top=0.72, wspace=0.18)
    mine = sorted((r for r in rows if r["experiment"] == "c" and r["value"] is not None and r["status"] == "run"),
                  key=lambda r: r["value"])
    x = [r["value"] for r in mine]
    _band(left, mine, lambda r: r["value"], "C0", "FE1 measured: p90 (bar: p50 to p99)")
    for q, style in (("p50", ":"), ("p90", "--"), ("p99", "-.")):
        left.plot(x, [r[f"pred_{q}"] for r in mine], style, color="C0", lw=1, alpha=0.8,
                  label=f"Gaussian prediction, {q}")
    at_sdpfe = (grid.c_users, grid.c_domain) == (SDPFE_POINT["n"], SDPFE_POINT["B"])
    if at_sdpfe:
        for q, marker in (("p50", "v"), ("p90", "*"), ("p99", "^")):
            left.plot(list(SDPFE), [SDPFE[c][f"error_{q}"] for c in SDPFE], marker, color="C3", ms=10 if q == "p90"
                      else 7, mfc="none", mew=1.5, label=f"SDPFE shipped table (AOL), {q}")
        right.plot(list(SDPFE), [SDPFE[c]["messages_per_user"] for c in SDPFE], "*", color="C3", ms=11, mfc="none",
                   mew=1.5, label="SDPFE shipped table (AOL)")
    for r in rows:
        if r["experiment"] == "c" and r["value"] is None and r["status"] == "run":
            color = COLORS.get(r["label"], "0.5")
            left.axhline(max(r["error_p90"], 1e-3), color=color, lw=1, ls=(0, (5, 3)),
                         label=f"{r['label']}: p90 ({r['messages_per_user']:.3g} msg/user)")
    right.plot(x, [r["messages_per_user"] for r in mine], "o-", color="C0", ms=4, label="FE1 measured (realised)")
    right.plot(x, [r["messages_expected"] for r in mine], "--", color="C0", lw=1, label="1 + rho (expected)")
    right.axhline(1, color="0.5", lw=0.8)
    for ax in (left, right):
        ax.set_xlabel("c  (hash range b = floor(n / ln^c n))")
        ax.set_yscale("log")
        ax.grid(True, which="both", lw=0.3, alpha=0.5)
        ax.set_xticks(x)
        ax.xaxis.set_major_formatter(plain)
        ax.yaxis.set_major_formatter(plain)
    left.set_ylabel("|estimate - count| over the domain")
    right.set_ylabel("messages per user")
    found: dict[str, Any] = {}
    for ax in (left, right):
        for h, lab in zip(*ax.get_legend_handles_labels()):
            found.setdefault(lab, h)
    fig.legend(list(found.values()), list(found), loc="upper center", bbox_to_anchor=(0.5, 0.935), ncol=3,
               fontsize=8, frameon=False)
    fig.suptitle(f"FE1 against c: n = {grid.c_users:,}, B = {_pow2(grid.c_domain)}, eps = {EPSILON:g}, "
                 f"delta = {DELTA:g}; bundled English words (not AOL); one seeded run a point", fontsize=11)
    fig.savefig(path, dpi=100)


def plot_sweep(path: Path, rows: Sequence[dict[str, Any]], experiment: str, panels: Sequence[tuple[str, Any]],
               x_label: str, title: str) -> None:
    """One column per fixed value (n experiment: each B; B experiment: one); error on top, messages below."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    from matplotlib.ticker import FuncFormatter

    plain = FuncFormatter(lambda value, _: f"{value:g}")
    x_format = FuncFormatter(_thousands if experiment == "n" else _pow2)
    width = 6.5 * len(panels) + 1.5
    fig = Figure(figsize=(width, 8.5))
    FigureCanvasAgg(fig)
    axes = fig.subplots(2, len(panels), sharex="col", sharey="row", height_ratios=(2, 1), squeeze=False)
    fig.subplots_adjust(left=1.0 / width, right=0.98, bottom=0.07, top=0.84, wspace=0.15, hspace=0.06)
    found: dict[str, Any] = {}
    for col, (caption, keep) in enumerate(panels):
        top, bottom = axes[0][col], axes[1][col]
        mine = [r for r in rows if r["experiment"] == experiment and keep(r)]
        values = sorted({r["value"] for r in mine})
        spread = math.log(max(values[-1], 2 * values[0]) / values[0])  # the x axis' extent (log)
        for i, variant in enumerate(VARIANTS):
            points = sorted((r for r in mine if r["label"] == variant.label and r["status"] == "run"),
                            key=lambda r: r["value"])
            if not points:
                continue
            color = COLORS[variant.label]
            shift = math.exp(spread * 0.006 * (i - (len(VARIANTS) - 1) / 2))  # the bars of one x side by side
            _band(top, points, lambda r: r["value"], color, variant.label, shift=shift)
            bottom.plot([r["value"] for r in points], [r["messages_per_user"] for r in points], "o-", color=color,
                        ms=4, lw=1.3, label=variant.label)
        top.set_title(caption, fontsize=10)
        top.set_yscale("log")
        bottom.set_yscale("log")
        top.set_xscale("log")
        bottom.set_xlabel(x_label)
        for ax in (top, bottom):
            ax.grid(True, which="major", lw=0.3, alpha=0.5)
            ax.set_xticks(values)
            ax.minorticks_off()
            ax.xaxis.set_major_formatter(x_format)
            ax.yaxis.set_major_formatter(plain)
        for h, lab in zip(*top.get_legend_handles_labels()):
            found.setdefault(lab, h)
    axes[0][0].set_ylabel("|estimate - count|: p90 (bar: p50 to p99)")
    axes[1][0].set_ylabel("messages per user (realised)")
    fig.legend(list(found.values()), list(found), loc="upper center", bbox_to_anchor=(0.5, 0.955),
               ncol=min(len(found), 5), fontsize=8, frameon=False)
    fig.suptitle(title, fontsize=11)
    fig.savefig(path, dpi=100)


# --- entry point ---------------------------------------------------------------------------------------


def run(out: Path, quick: bool = False, seed: int = 0, progress: Progress | None = None) -> dict[str, Any]:
    """Run the experiments (module docstring) and write their CSV tables and PNG plots into ``out``.

    ``quick``: a small grid (a few seconds) instead of the full one. ``seed``: the words' draw
    (datasets.DEFAULT_SEED + seed), the item hash key, the domain samples and every run's seed derive from it
    (seeded simulations, not private runs). ``progress(stage, advance, total)``: as privagg.simulate's, one
    stage per experiment (``fe1 vs c``, ``error vs n``, ``error vs B``). Returns a summary.
    """
    from ..datasets import DEFAULT_SEED, english_words

    start = time.perf_counter()
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    grid = QUICK if quick else FULL
    words = english_words(grid.users_max, VOCABULARY, DEFAULT_SEED + seed)

    rows = point_rows(grid, words, seed, progress)
    comparison = sdpfe_rows(rows, grid)
    fits = fit_rows(rows)
    write_csv(out / "points.csv", rows, POINT_COLUMNS)
    write_csv(out / "sdpfe.csv", comparison, SDPFE_COLUMNS)
    write_csv(out / "fits.csv", fits, FIT_COLUMNS)
    plot_c(out / "error_vs_c.png", rows, grid)
    plot_sweep(out / "error_vs_n.png", rows, "n",
               [(f"B = {_pow2(d)}", lambda r, d=d: r["domain_size"] == d) for d in grid.n_domains], "users n",
               f"Error and messages against n (eps = {EPSILON:g}, delta = {DELTA:g}; pure protocols delta = 0)")
    plot_sweep(out / "error_vs_B.png", rows, "B", [(f"n = {grid.b_users:,}", lambda r: True)], "domain size B",
               f"Error and messages against B (eps = {EPSILON:g}, delta = {DELTA:g}; pure protocols delta = 0)")

    fe1_rows = [r for r in rows if r["experiment"] == "c" and r["value"] is not None and r["status"] == "run"]
    balls = [r for r in rows if r["status"] == "run" and r["protocol"] in ("fe0", "fe1")]
    return {
        "grid": "quick" if quick else "full",
        "c_point": f"n = {grid.c_users}, B = 2^{grid.c_domain.bit_length() - 1}",
        "fe1_messages_by_c": {f"{r['value']:g}": round(r["messages_per_user"], 4) for r in fe1_rows},
        "fe1_p50_p90_p99_by_c": {f"{r['value']:g}": [round(r[f"error_{q}"], 2) for q in ("p50", "p90", "p99")]
                                 for r in fe1_rows},
        "largest_p50_gap_over_allowance": round(max(abs(r["p50_gap"]) / r["p50_allowance"] for r in balls), 3)
        if balls else None,
        "not_run": sum(r["status"] == "not run" for r in rows),
        "refused": sum(r["status"] == "refused" for r in rows),
        "slopes_p90": {f"{f['experiment']}:{f['label']}@{f['fixed']}": None if f["slope_p90"] is None else
                       round(f["slope_p90"], 2) for f in fits},
        "files": sorted(FILES),
        "seconds": round(time.perf_counter() - start, 1),
    }
