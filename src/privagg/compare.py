"""``privagg compare``: the protocols side by side on one dataset, the table a privacy engineer chooses from.

Every (protocol, epsilon) runs ``trials`` seeded simulations (:func:`privagg.simulate.frequency.
estimate_frequencies`, each protocol's own default calibration, its fast path where it has one) over the same
codes. A row reports the error of the estimates against the true counts over the whole domain -- p50, p90,
p99 and max of |estimate - count|, each averaged over the trials -- the messages and bits a user sends, the
seconds a run took and the trust model. Pure eps-DP protocols run at delta = 0; the others at ``delta``. A
protocol that refuses a setting (a calibration that cannot meet it, a run too large to simulate) gets a row
saying why instead of numbers. These are seeded simulations: not private runs, and their error uses the
true counts.

matplotlib is imported inside the plotting function (Agg canvas, no pyplot).
"""

from __future__ import annotations

import csv
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from .errors import ParameterError, check_epsilon, check_integer
from .protocols import registry
from .protocols.kinds import ResultKind
from .reports import CompareReport, CompareRow
from .simulate.progress import Progress

# Items estimated over all runs (runs x B: every run estimates the whole domain), at most: about 1 us an item
# measured for FE1's full-domain run at B = 2^24 (15 s, 2 busy cores), 0.15 us for grr's at 2^26 (10 s); 2^31
# keeps the worst comparison near half an hour, with --progress lines (fe1 at B = 2^24 and 1,000 trials would
# take hours).
COMPARE_ITEMS_MAX = 2**31
COLUMNS = ("protocol", "epsilon", "delta", "error_p50", "error_p90", "error_p99", "error_max", "messages_per_user",
           "bits_per_user", "seconds", "trust", "refused", "warnings", "run")
RUN = "seeded simulation, not private: errors use the true counts (not for release)"


def parse_list(text: str, field: str, kind=float) -> list:
    """'a,b,c' as a list (of numbers when ``kind`` is float), at least one item."""
    items = [part.strip() for part in text.split(",") if part.strip()]
    if not items:
        raise ParameterError(field, "a comma-separated list", text)
    if kind is float:
        return [check_epsilon(item, field) for item in items]  # the strict rule: no 1_0, nan or inf
    return items


def compare(codes: np.ndarray, encoder, protocols: Sequence[str], epsilons: Sequence[float], delta: float | None,
            trials: int = 3, seed: int = 0, input_name: str = "", progress: Progress | None = None) -> CompareReport:
    """Run every protocol at every epsilon ``trials`` times over ``codes`` (module docstring)."""
    from .simulate.frequency import estimate_frequencies

    trials = check_integer("trials", trials, 1, 1000)
    entries = []
    for name in protocols:
        entry = registry.get(name)
        if entry.result is not ResultKind.FREQUENCY_TABLE:
            raise ParameterError("protocols", "frequency protocols (vector sums are compared elsewhere)", name)
        required = [o.name for o in entry.options if o.required]
        if required:  # (a reviewer's finding: refused row by row, pointing at options compare does not have)
            raise ParameterError("protocols", f"protocols compare runs with their defaults ({name} needs "
                                 f"{', '.join('--' + r.replace('_', '-') for r in required)}: run privagg estimate "
                                 f"{name} on the same input)", name)
        entries.append(entry)
    impure = [e.name for e in entries if not e.pure]
    if impure and delta is None:
        raise ParameterError("delta", f"given for {', '.join(impure)} (pure eps-DP protocols take none)", None)
    rows = []
    total = len(entries) * len(epsilons) * trials
    from .protocols.registry import FULL_DOMAIN_DEFAULT_MAX

    # past 2^24 every run is refused at once (a full domain must be asked for): a row saying so, no work
    if encoder.domain_size <= FULL_DOMAIN_DEFAULT_MAX and total * encoder.domain_size > COMPARE_ITEMS_MAX:
        most = COMPARE_ITEMS_MAX // (len(entries) * len(epsilons) * encoder.domain_size)
        field, accepted = (("trials", f"at most {most} here, or a smaller --domain, fewer --protocols or --epsilon "
                            "values") if most >= 1 else
                           ("domain", "smaller, or fewer --protocols or --epsilon values"))
        raise ParameterError(field, f"{accepted}: {total:,} runs each estimating all {encoder.domain_size:,} items "
                             f"would make {total * encoder.domain_size:.3g} estimates, above 2^31 (hours)",
                             trials if field == "trials" else encoder.domain_size)
    for entry in entries:
        for epsilon in epsilons:
            row_delta = 0.0 if entry.pure else float(delta)
            errors, per_user, seconds, refused, warnings = [], [], [], None, []
            for trial in range(trials):
                try:
                    report, _ = estimate_frequencies(entry.name, codes, encoder, epsilon=epsilon, delta=row_delta,
                                                     calibration=entry.calibrations[0], mode="fast",
                                                     seed=seed + trial, input_name=input_name)
                except ParameterError as err:
                    refused = str(err)
                    if progress:
                        progress("compare", trials - trial, total)
                    break
                e = report.error
                warnings += [w for w in report.warnings if w not in warnings]
                errors.append((e.p50, e.p90, e.p99, e.max_abs))
                per_user.append(report.messages.per_user)
                bits_per_message = report.bits_per_message
                seconds.append(sum(v for k, v in report.simulation.seconds.items() if k != "report"))
                if progress:
                    progress("compare", 1, total)
            if refused is not None:
                rows.append(CompareRow(entry.name, epsilon, row_delta, trust=entry.trust, refused=refused))
                continue
            p50, p90, p99, largest = (float(v) for v in np.mean(errors, axis=0))
            messages = float(np.mean(per_user))  # the realised messages per user, mean over the trials
            rows.append(CompareRow(entry.name, epsilon, row_delta, p50, p90, p99, largest, messages,
                                   messages * bits_per_message, float(np.median(seconds)), entry.trust,
                                   warnings=warnings))
    return CompareReport(input=input_name, n_users=int(codes.size), domain_size=encoder.domain_size, trials=trials,
                         seed=seed, rows=rows, private=False, note=RUN)


def write_csv(report: CompareReport, path: Path) -> None:
    """The rows, one a line: each with its runs' warnings (joined by " | ") and what it is (``run``: a seeded
    simulation, not private), so that a row copied out of the file still says so."""
    with open(path, "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(COLUMNS)
        for r in report.rows:
            cells = {**{c: getattr(r, c) for c in COLUMNS[:-2]}, "warnings": " | ".join(r.warnings), "run": RUN}
            writer.writerow(["" if cells[c] is None else cells[c] for c in COLUMNS])


def plot(report: CompareReport, out: Path) -> list[Path]:
    """error_vs_epsilon.png (p90 against epsilon, one line a protocol) and error_vs_messages.png (p90 against
    messages per user, one point a setting, labelled with its epsilon)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    done = [r for r in report.rows if r.refused is None]
    paths = []
    for name, x_of, xlabel in (("error_vs_epsilon.png", lambda r: r.epsilon, "epsilon"),
                               ("error_vs_messages.png", lambda r: r.messages_per_user, "messages per user")):
        fig = Figure(figsize=(7.5, 5))
        FigureCanvasAgg(fig)
        ax = fig.add_subplot()
        for protocol in dict.fromkeys(r.protocol for r in done):
            mine = sorted((r for r in done if r.protocol == protocol), key=lambda r: r.epsilon)
            xs, ys = [x_of(r) for r in mine], [max(r.error_p90, 1e-3) for r in mine]
            ax.plot(xs, ys, "o-" if name == "error_vs_epsilon.png" else "o", label=protocol)
            if name == "error_vs_messages.png":
                for r, x, y in zip(mine, xs, ys):
                    ax.annotate(f"{r.epsilon:g}", (x, y), textcoords="offset points", xytext=(4, 3), fontsize=7)
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel(xlabel)
        ax.set_ylabel("p90 of |estimate - count|")
        ax.set_title(f"{report.n_users} users, {report.domain_size} codes, {report.trials} trials a point")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8)
        fig.tight_layout()
        path = out / name
        fig.savefig(path, dpi=110)
        paths.append(path)
    return paths

