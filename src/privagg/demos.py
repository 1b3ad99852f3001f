"""``privagg demo-service``: the bundled words through both services, beside the simulation of the same run.

(fe1 below; :func:`run_heavy_hitter_demo` does fe-hh's discovery, :func:`run_sharing_demo` the multi-round
protocols.)

The services' leg (:func:`privagg.service.shuffle.demo.run_services`): an analyzer and a collector on loopback ports,
an FE1 task, one SDK client over HTTP per user. The private result is then compared item by item with
``privagg estimate fe1`` on the same data: both estimate the same true counts without bias, so their difference
over an item has standard deviation sqrt(se_service^2 + se_simulation^2), and over the whole domain these
standardized differences should have a root mean square near 1.
"""

from __future__ import annotations

import functools
import math
from pathlib import Path

import numpy as np

from .core.encoding import ItemEncoder
from .datasets import english_vocabulary, english_words
from .protocols.kinds import Topology
from .protocols.registry import calibrate, get
from .reports import to_json_dict
from .service.shuffle.demo import run_services
from .simulate.frequency import estimate_frequencies


def run_demo(workdir: Path, users: int = 20_000, vocabulary: int = 1_000, epsilon: float = 1.0,
             delta: float = 1e-6, concurrency: int = 500, progress=print, protocol: str = "fe1") -> dict:
    """Run the demo of ``protocol`` (a served frequency protocol); returns the service's report, the simulation's,
    the load figures and the comparison."""
    words = english_vocabulary(vocabulary).to_pylist()
    rank = {w: i for i, w in enumerate(words)}
    codes = np.array([rank[w] for w in english_words(users, vocabulary).to_pylist()], dtype=np.int64)
    parameters = calibrate(protocol, epsilon=epsilon, delta=delta, n_users=users, domain_size=vocabulary)
    service, load = run_services(workdir, parameters, codes, concurrency, top=vocabulary, progress=progress)
    simulation, _run = estimate_frequencies(protocol, codes, ItemEncoder(vocabulary, kind="integer"),
                                            epsilon=epsilon, delta=delta, top=vocabulary, full_domain=True, seed=0)
    simulation = to_json_dict(simulation)
    truth = np.bincount(codes, minlength=vocabulary)
    by_item = {e["item"]: e for e in simulation["estimates"]}
    z = np.array([(e["estimate"] - by_item[e["item"]]["estimate"]) / math.hypot(e["stderr"],
                                                                                by_item[e["item"]]["stderr"])
                  for e in service["estimates"]])
    return {"words": words, "truth": truth.tolist(), "service": service, "simulation": simulation, "load": load,
            "comparison": standardized_comparison(z)}


FALSE_ALARM = 1e-3  # the chance that two runs of the same protocol are called different (each of the two checks)


@functools.lru_cache
def comparison_bounds(items: int) -> tuple[float, float, float]:
    """(lowest RMS, highest RMS, largest |z|) of ``items`` standard normal draws, each at :data:`FALSE_ALARM`."""
    from scipy.stats import chi2, norm

    low, high = (math.sqrt(chi2.ppf(q, items) / items) for q in (FALSE_ALARM / 2, 1 - FALSE_ALARM / 2))
    return low, high, float(norm.isf(FALSE_ALARM / (2 * items)))


def standardized_comparison(z: np.ndarray) -> dict:
    """Whether B standardized differences ``z`` look standard normal, as they do when both runs estimate the same
    counts with the standard errors they state: their sum of squares within the two-sided :data:`FALSE_ALARM`
    quantiles of chi-square with B degrees of freedom (an RMS range), and the largest |z| under the family-wise
    bound Phi^-1(1 - FALSE_ALARM / (2B)). Fixed bounds (RMS within 0.8-1.2) called an honest run different about
    one time in six over 20 words: the RMS of 20 draws moves by about 0.16."""
    items = len(z)
    rms, worst = float(np.sqrt(np.mean(z ** 2))), float(np.abs(z).max())
    low, high, max_bound = comparison_bounds(items)
    return {"items": items, "rms_standardized_difference": rms, "rms_range": [low, high],
            "max_standardized_difference": worst, "expected_max": math.sqrt(2 * math.log(items)),
            "max_bound": max_bound, "false_alarm": FALSE_ALARM,
            "matches": bool(low <= rms <= high and worst <= max_bound)}


def run_heavy_hitter_demo(workdir: Path, users: int = 20_000, max_length: int = 4, phi: float = 0.03,
                          epsilon: float = 1.0, delta: float = 1e-6, concurrency: int = 500, progress=print,
                          protocol: str = "fe-hh") -> dict:
    """demo-service fe-hh: the bundled English words of at most ``max_length`` bytes, one per user, through both
    services as SDK clients; the analyzer's tree walk discovers the heavy words with no list (byte by byte). Beside
    it, the simulation of the same words (seeded, not private) and both lists scored against the truth (the demo
    knows it; no party of a deployment does): recall over the words held by at least phi n users, precision."""
    from collections import Counter

    from .simulate.heavy_hitters import estimate_heavy_hitters, score

    pool = [w for w in english_words(3 * users, 1_000).to_pylist() if len(w.encode()) <= max_length][:users]
    parameters = calibrate(protocol, epsilon=epsilon, delta=delta, n_users=len(pool), domain_size=256**max_length,
                           max_length=max_length, phi=phi)
    service, load = run_services(workdir, parameters, np.array(pool, dtype=object), concurrency, progress=progress)
    simulation, _ = estimate_heavy_hitters(pool, epsilon=epsilon, delta=delta, phi=phi, max_length=max_length, seed=0,
                                           evaluate=False)
    truth = dict(Counter(pool))
    found = [h["item"] for h in service["heavy_hitters"]]
    simulated = [h.item for h in simulation.heavy_hitters]
    return {"service": service, "simulation": to_json_dict(simulation), "load": load,
            "truth": {w: c for w, c in truth.items() if c >= parameters.threshold / 2},
            "comparison": {"threshold": parameters.threshold,
                           "service": to_json_dict(score(found, truth, parameters.threshold)),
                           "simulation": to_json_dict(score(simulated, truth, parameters.threshold))}}


def sharing_demo_data(users: int, categories: int = 10) -> tuple[np.ndarray, list[str], float]:
    """(item codes, the categories, the min-count fraction): the bundled categorical words (the ``categories``
    most common) for ``users`` users, with beta set below the smallest category's share (from the data: a demo;
    a deployment states beta); 0 when some category has too few holders for DPDS."""
    from .datasets import english_categories

    items, names = english_categories(users, categories)
    rank = {w: i for i, w in enumerate(names)}
    codes = np.array([rank[w] for w in items.to_pylist()], dtype=np.int64)
    return codes, names, math.floor(0.6 * np.bincount(codes, minlength=len(names)).min() / users * 1000) / 1000


def with_graph(parameters, degree: str | None, drop_fraction: float):
    """DPDS or DPDG's ``parameters`` on the neighbour graph a sharing demo asks for (``--degree``; docs/privacy.md,
    "Neighbour graphs"): ``complete``, the complete graph (the paper's n-of-n sharing); an even k; ``auto`` (None:
    the default), the complete graph up to :data:`COMPLETE_USERS_MAX` users and beyond, the least degree whose
    failure bound meets 2^-40 with the drop fraction planned for (:func:`privagg.protocols.sharing_graph.choose`;
    the complete graph if no sparser one does). Any other protocol: refused unless left out."""
    import dataclasses

    from .errors import ParameterError, parse_number
    from .protocols.sharing_graph import choose

    has_graph = _has_graph(parameters.protocol)
    if not has_graph or degree == "complete" or (degree in (None, "auto") and parameters.n_users <= COMPLETE_USERS_MAX):
        if degree is not None and not has_graph:
            raise ParameterError("degree", "given only for dpds and dpdg (whose users share among users)", degree)
        return parameters
    if degree in (None, "auto"):
        chosen = choose(parameters, dropouts=drop_fraction)[0]
        if chosen.complete:
            return parameters
        k = chosen.degree
    else:
        try:
            k = parse_number("degree", degree, integer=True)
        except ParameterError:
            raise ParameterError("degree", "auto, complete or an even number of neighbours", degree) from None
    return dataclasses.replace(parameters, degree=k, graph_dropouts=drop_fraction)


def _has_graph(protocol: str) -> bool:
    """Whether ``protocol``'s users may share on a neighbour graph (its registry entry takes ``degree``)."""
    return any(o.name == "degree" for o in get(protocol).options)


COMPLETE_USERS_MAX = 1_000  # a sharing demo's default graph: complete up to here (about ten minutes on loopback)


def run_sharing_demo(workdir: Path, protocol: str = "dpds", users: int = 300, drop_fraction: float = 0.0,
                     epsilon: float = 1.0, delta: float = 1e-6, round_seconds: float = 3600.0,
                     progress=print, dishonest: str | None = None, degree: str | None = None) -> dict:
    """demo-service dpds|dpdg|tss|tss-collusion: the release of the sharing server (DPDS, DPDG) or of S2 (TSS,
    TSS') beside the simulation over the same survivors (same parameters, recomputed for them), each estimate's
    z-score against the truth (over its standard deviation at the true count), the rounds' times and the bytes;
    what the release detected (its blame data, :data:`DETECTED`), and with ``dishonest`` (a kind of
    ``KINDS`` in privagg.service.sharing.dishonest or two_servers.dishonest) the one user who deviated so.
    ``degree``: DPDS and DPDG's neighbour graph (:func:`with_graph`)."""
    from .errors import ParameterError, check_integer
    from .service.round_demo import check_drop_fraction, deviation
    from .service.sharing import dishonest as sharing_kinds
    from .service.sharing.demo import run_sharing_services
    from .service.two_servers import dishonest as tss_kinds
    from .service.two_servers.demo import run_tss_services
    from .simulate.rounds import FAITHFUL_SECONDS_MAX
    from .simulate.runner import simulate

    # n (n - 1) sealed backups and key agreements (DPDS) grow as n^2: 300 users take about 50 s here (bench part 12);
    # TSS's round 2 seals alpha^2 N n^2 shares (past its most, refused below with the count at the n asked)
    entry = get(protocol)
    two_servers = entry.topology is Topology.TWO_SERVERS
    most = (TSS_USERS_MAX if dishonest is None else COMPLETE_USERS_MAX) if two_servers else DEMO_USERS_MAX
    # past TSS's most but within the demos' bound, refused below with the share count at the n asked; beyond, at once
    # (before its data and calibration: 10^8 users took 15 s to refuse)
    fewest = DEMO_USERS_MIN if any(o.name == "min_count_fraction" for o in entry.options) else 20  # DPDG: no condition
    if not (two_servers and type(users) is int and most < users <= DEMO_USERS_MAX):
        users = check_integer("users", users, fewest, most)
    drop_fraction = check_drop_fraction(drop_fraction)
    codes, categories, beta = sharing_demo_data(users)
    lie = None if dishonest is None else deviation((tss_kinds if two_servers else sharing_kinds).KINDS,
                                                       protocol, dishonest)
    # the entry's example options (TSS' phi = 2), beta from the data; TSS's alpha the paper's experiments' (0.1), but
    # 1/2 for a dishonest helper: at 0.1 about a third of the users help no item (0.9^N), and the liar may be one
    options = {o.name: entry.example[o.name] for o in entry.options if o.name in entry.example}
    if "report_fraction" in options and dishonest is None:
        options["report_fraction"] = TSS_REPORT_FRACTION
    if "min_count_fraction" in options:
        if beta <= 0:
            raise ParameterError("users", f"large enough that every one of the {len(categories)} categories is held "
                                 f"by a few users ({protocol}'s data condition)", users)
        options["min_count_fraction"] = beta
    parameters = with_graph(calibrate(protocol, epsilon=epsilon, delta=delta, n_users=users,
                                      domain_size=len(categories), **options), degree, drop_fraction)
    if two_servers and users > most:  # round 2's alpha^2 N n^2 shares: about 15 minutes at the most
        raise ParameterError("users", f"in [{fewest}, {most:,}] for {protocol}" + ("" if dishonest is None else
                             " --dishonest") + ": its round 2 seals, relays and opens one share per reporter and "
                             "helper of an item (the paper's helper sets, m_j of them for m_j reporters), about "
                             f"alpha^2 N n^2 = {parameters.expected_shares:,.0f} at alpha = "
                             f"{parameters.report_fraction:g}, N = {parameters.domain_size} and n = {users:,}, about "
                             "0.7 ms of CPU each on the users' and S1's side (docs/benchmarks.md part 16)", users)
    if parameters.n_users > COMPLETE_USERS_MAX and parameters.degree is None and not two_servers:  # n^2 work
        raise ParameterError("users", f"at most {COMPLETE_USERS_MAX:,} for {protocol} on the complete graph (more on "
                             "a neighbour graph: --degree auto or an even k)", users)
    run = run_tss_services if two_servers else run_sharing_services
    # a survivor who leaves at round 4 or 5 is silent in round 6, where an inconsistent dealer's exclusion needs every
    # survivor's pair seeds with him: a second fault, which refuses the release (docs/privacy.md, "Dishonest parties")
    rounds = {"rounds": (1, 2, 3)} if dishonest == "inconsistent-shares" else {}
    out = run(workdir, parameters, codes, drop_fraction, round_seconds, progress=progress,
              liar=None if lie is None else lie.client, **rounds)
    report, survivors = out["report"], out["survivor_codes"]
    truth = np.bincount(survivors, minlength=len(categories))
    recomputed = entry.rounds.survivors_parameters(parameters, len(survivors))
    try:  # the condition the release's guarantee assumes of the survivors' data (no party can check it)
        recomputed.check_population(survivors)
        condition = None
    except ParameterError as err:
        condition = str(err)
    # the simulation runs the same parties (faithful) where its measured cost allows, else draws the same law (fast)
    mode = "faithful" if entry.rounds.faithful_seconds(recomputed) <= FAITHFUL_SECONDS_MAX else "fast"
    sim = simulate(recomputed, survivors, mode, rng=0, check_population=False).result
    sim_se = recomputed.reported_standard_error(sim.estimates)
    true_se = recomputed.standard_error(truth)
    service = {e["item"]: e for e in report["estimates"]}

    def z(estimate: float, j: int) -> float | None:
        return None if true_se[j] <= 0 else float((estimate - truth[j]) / true_se[j])

    rows = [{"item": j, "word": word, "truth": int(truth[j]), "service": service[j]["estimate"],
             "service_stderr": service[j]["stderr"], "service_z": z(service[j]["estimate"], j),
             "simulation": float(sim.estimates[j]), "simulation_stderr": float(sim_se[j]),
             "simulation_z": z(float(sim.estimates[j]), j)} for j, word in enumerate(categories) if j in service]
    zs = np.array([r["service_z"] for r in rows if r["service_z"] is not None])
    return {"protocol": protocol, "users": users, "drop_fraction": drop_fraction, "estimates": rows,
            "service": report, "simulation": {"private": False, "seed": 0, "mode": mode,
                                              "parameters": recomputed.to_dict()},
            "z_rms": float(np.sqrt(np.mean(zs**2))) if zs.size else None, "round_seconds": out["seconds"],
            "bytes": out["bytes"], "parties": out["parties"], "data_condition_broken": condition,
            "detected": {k: report["dropouts"][k] for k in DETECTED if k in report["dropouts"]},
            "dishonest": None if lie is None else {
                "kind": dishonest, "user": out["liar"].user, "did": lie.did, "outcome": lie.outcome,
                "item": getattr(out["liar"].role, "moved", None)}}


DETECTED = ("complaints", "excluded", "blamed", "inconsistent", "unopened_sums", "recovered_items", "lost_items")
"""The release's blame data (its ``dropouts``): DPDS and DPDG's complaints ([complainer, the dealers he named...]),
excluded dealers, blamed revealers ([revealer, the owners of his discarded shares...]) and the dealers proven
inconsistent (excluded in round 6); TSS's helpers whose sums did not open, the items recovered for them, and the items
refused by the range and count checks."""


# DPDS and TSS demos: the fewest users whose bundled words hold each of the 10 categories often enough for their data
# condition (sharing_demo_data's beta > 0: at every n from here to DEMO_USERS_MAX, tested; not at 89); DPDG's, 20
DEMO_USERS_MIN = 90
DEMO_USERS_MAX = 10_000  # sharing demos: DPDS and DPDG on a neighbour graph beyond COMPLETE_USERS_MAX
TSS_REPORT_FRACTION = 0.1  # the TSS demos' alpha: the paper's experiments' (each user reports alpha N = 1 of 10)
TSS_USERS_MAX = 4_000  # TSS demos: round 2's 0.1 n^2 shares, 1.6 M at 4,000 users: 8 to 15 minutes (bench part 16)
