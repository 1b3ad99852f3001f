"""The guarantees: ``privagg calibrate PROTOCOL`` (frozen parameters, cost and expected error) and ``privagg
audit PROTOCOL`` (the claimed guarantee against the exact or sampled output laws), one command per implemented
protocol generated from its registry entry; ``privagg account shuffle`` (amplification by shuffling)."""

from __future__ import annotations

import time
from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING, Any, Optional

import typer

from ..errors import ParameterError
from ..protocols.kinds import ResultKind, Topology
from .options import (ProtocolCommands, _choice, _command, _hash_key_option, _hashes_items, _param,
                      _protocol_parameters, _verbose_option)
from .output import (EXIT_VIOLATION, _check_output, _clean_errors, _console, _emit, _progress, _say, _say_privacy,
                     _summary_value)

if TYPE_CHECKING:
    from ..protocols.registry import ProtocolEntry


calibrate_app = ProtocolCommands(lambda entry: _register_calibrate(entry),
                                 help="Frozen parameters, cost and expected error of a protocol.")


def _calibrate(entry: ProtocolEntry, *, users: int, domain: int, epsilon: float, delta: float,
               calibration: Enum, verbose: bool, as_json: bool, output: Optional[Path], hash_key: Optional[str] = None,
               max_items: int = 1, colluding: Optional[float] = None, dropouts: Optional[float] = None,
               failure: Optional[float] = None, **options: Any) -> None:
    import secrets

    from ..core.encoding import KEY_BYTES, check_item_key
    from ..errors import check_integer
    from ..privacy.description import privacy_warnings
    from ..protocols.balls_into_bins import N_USERS_MAX
    from ..protocols.registry import calibrate
    from ..reports import CalibrationReport, privacy_profile, report_document, report_parameters

    with _clean_errors():
        _check_output(output)
        check_integer("users", users, 2, N_USERS_MAX)  # named as typed (the library's keyword is n_users)
        graph = (colluding, dropouts, failure) != (None, None, None)
        if graph:
            from ..protocols.sharing_graph import DEFAULT_FAILURE, check_options

            check_options(colluding, dropouts, DEFAULT_FAILURE if failure is None else failure)
        if graph and colluding is not None and options.get("honest_fraction") is None:
            options["honest_fraction"] = 1 - colluding  # the colluders are the users the accountant does not count on
        if graph and dropouts is not None and options.get("graph_dropouts", 0) is None and \
                options.get("degree") is not None:
            options["graph_dropouts"] = dropouts  # a --degree's threshold plans for the dropouts the graph is chosen for
        key = (secrets.token_hex(KEY_BYTES) if hash_key is None else check_item_key(hash_key)) if _hashes_items(
            entry) else None
        planned = None
        if max_items != 1:  # L items a user: the run over n L reports at the per-report budget (privagg.plan)
            from ..privacy.events import Composed
            from ..simulate.users import plan, user_level

            try:
                planned = plan(entry.name, epsilon=epsilon, delta=delta, n_users=users, max_items=max_items,
                               domain_size=domain, calibration=calibration.value, item_key=key, **options)
            except ParameterError as err:
                from .estimate import CLI_FIELDS

                if err.field not in ("max_items", "max_length", "domain_size"):
                    raise
                raise ParameterError(CLI_FIELDS[err.field], err.accepted, err.got) from None
            params = planned.parameters
            privacy = params.privacy.with_event(Composed(
                params.privacy.event, max_items, planned.epsilon, planned.delta, planned.method, planned.detail,
                user_level(max_items)))
            profile = []  # of one report's noise: the user's guarantee composes
        else:
            try:
                params = calibrate(entry.name, epsilon=epsilon, delta=delta, n_users=users, domain_size=domain,
                                   calibration=calibration.value, item_key=key, **options)
            except ParameterError as err:  # an honest fraction --colluding set, named as typed
                if colluding is None or err.field not in ("honest-fraction", "honest_fraction") or \
                        options["honest_fraction"] != 1 - colluding:
                    raise
                raise ParameterError("colluding", f"such that the honest fraction 1 - colluding is {err.accepted}",
                                     colluding) from None
            privacy, profile = params.privacy, privacy_profile(params)
        expected, costs = params.expected_error(), params.costs()
        if planned is not None:  # the parameters are each report's; a user sends up to max_items reports
            expected["messages_per_user"] *= max_items
            costs["user"] = {k: v * max_items for k, v in costs["user"].items()}
        neighbours = _neighbour_graph(params, colluding, dropouts, failure) if graph else None
    report = CalibrationReport(protocol=entry.name, parameters=report_parameters(params), privacy=privacy,
                               privacy_profile=profile, **expected, costs=costs, theory=params.theory(),
                               warnings=privacy_warnings(epsilon, delta, users) + params.warnings() +
                               _after_dropouts(entry, params, dropouts), neighbour_graph=neighbours)


    def human() -> None:
        from rich.table import Table

        table = Table(title=entry.title if planned is None else f"{entry.title}: each of the {planned.reports} "
                      f"reports' parameters (at most {max_items} a user); the costs per user are his reports'",
                      show_header=False)
        for name, value in {**report.parameters, **expected, **report.theory}.items():
            table.add_row(name, _summary_value(value, digits=6))
        for party, counts in report.costs.items():
            table.add_row(f"cost per {party}", ", ".join(f"{k} {v:.6g}" for k, v in counts.items()))
        _console().print(table)
        if planned is not None:
            _say(f"at most {max_items} items a user, {users} users: {planned.reports} reports; expected stderr "
                 f"{planned.stderr:.4g} at {planned.stderr_at}; each report ({planned.per_report_epsilon:.4g}, "
                 f"{planned.per_report_delta:.3g})-DP, each user ({planned.epsilon:.4g}, {planned.delta:.3g})-DP "
                 f"by {planned.method}")
        _say_privacy(privacy, profile, verbose)
        if neighbours is not None:
            _say_graph(neighbours)
            if params.degree != neighbours.graph.degree:
                on = "the complete graph" if params.degree is None else f"a graph of degree {params.degree}"
                _say(f"- the parameters above are calibrated on {on} (--degree); for this graph's: --degree "
                     f"{neighbours.graph.degree}")

    _emit(report_document(report), as_json, output, human)


def _after_dropouts(entry, params, dropouts: float | None) -> list[str]:
    """The delta a release over the survivors of the dropouts --dropouts plans for holds, where it is not the target:
    the calibrated one is of all n users (a reviewer's finding: 1e-6 printed where 100 dropouts leave 7.3e-6)."""
    if not dropouts or not any(option.name == "degree" for option in entry.options):  # users who share among users
        return []
    from ..privacy.neighbour_graph import dropouts_of
    from ..service.round_tasks import release_delta

    planned = dropouts_of(params.n_users, dropouts)
    held = release_delta(params, params.n_users - planned) if planned else params.delta
    if held <= params.delta * (1 + 1e-9):
        return []
    return [f"with the {planned} users --dropouts plans for gone, a release over the {params.n_users - planned} "
            f"survivors holds delta {held:.3g} at eps = {params.epsilon:g}, not {params.delta:g} (recomputed for them: "
            "fewer users to hide among); calibrate a smaller --delta for the target to hold after them"]


def _neighbour_graph(params: Any, colluding: Optional[float], dropouts: Optional[float], failure: Optional[float]):
    """The least degree of a neighbour graph and the complete graph, with their terms and costs (docs/privacy.md,
    "Neighbour graphs")."""
    from ..protocols import sharing_graph
    from ..reports import GraphChoice, NeighbourGraphReport

    target = sharing_graph.DEFAULT_FAILURE if failure is None else failure
    chosen, complete = sharing_graph.choose(params, colluding, dropouts, target)

    def choice(found) -> GraphChoice:
        terms = found.to_dict()
        return GraphChoice(**{name: terms[name] for name in ("degree", "threshold", "complete", "collusion", "liveness",
                                                             "disconnection", "equivocation", "cut", "failure")},
                           costs=sharing_graph.costs(params, found.degree))

    n = params.n_users
    return NeighbourGraphReport(colluding=chosen.colluding, colluding_fraction=chosen.colluding / n,
                                dropouts=chosen.dropouts, dropout_fraction=0.0 if dropouts is None else dropouts,
                                failure_target=target, assumptions=sharing_graph.assumptions(chosen, target),
                                graph=choice(chosen), complete_graph=choice(complete))


def _say_graph(report) -> None:
    from rich.table import Table

    graph, complete = report.graph, report.complete_graph
    table = Table(title=f"Neighbour graph: {report.colluding} colluding, {report.dropouts} dropping out, failure "
                        f"<= {report.failure_target:.3g}")
    for column in ("", "graph", "complete graph (today)"):
        table.add_column(column)
    rows = [("degree k", "degree", "d"), ("threshold t_k", "threshold", "d"),
            ("(a) collusion", "collusion", ".3g"), ("(b) liveness", "liveness", ".3g"),
            ("(c) disconnection", "disconnection", ".3g"), ("(d) equivocation", "equivocation", ".3g"),
            ("(e) a cut the server chooses", "cut", ".3g"),
            ("failure (sum)", "failure", ".3g")]
    for label, name, spec in rows:
        table.add_row(label, format(getattr(graph, name), spec), format(getattr(complete, name), spec))
    for party in ("user", "server"):
        for name in graph.costs[party]:
            table.add_row(f"{party} {name.replace('_', ' ')}", f"{graph.costs[party][name]:,}",
                          f"{complete.costs[party][name]:,}")
    _console().print(table)
    for line in report.assumptions:
        _say(f"- {line}")


def _graph_options() -> list:
    """DPDS's and DPDG's neighbour graph (docs/privacy.md, "Neighbour graphs"): given any, the report adds it."""
    return [
        _param("colluding", Optional[float], typer.Option(
            None, "--colluding", help="Fraction in [0, 1) of the users who may collude with the server (default "
                                      "1 - --honest-fraction; sets it when that is not given): adds the least degree "
                                      "of a neighbour graph and its failure terms, against the complete graph.")),
        _param("dropouts", Optional[float], typer.Option(
            None, "--dropouts", help="Fraction in [0, 1) of the users who may drop out (default 0), for the "
                                     "neighbour graph.")),
        _param("failure", Optional[float], typer.Option(
            None, "--failure", help="Probability in [1e-250, 1) that the neighbour graph fails privacy or "
                                    "completeness (default 2^-40).")),
    ]


def _register_calibrate(entry: ProtocolEntry) -> None:
    params = [
        _param("users", int, typer.Option(..., "--users", help="Number of users n >= 2.")),
        _param("domain", int, typer.Option(..., "--dimension", help="Dimension d of the users' vectors.")
               if entry.result is ResultKind.VECTOR_SUM else typer.Option(..., "--domain", help="Domain size B >= 2."))
        if entry.result is not ResultKind.HEAVY_HITTER_LIST else
        _param("domain", Optional[int], typer.Option(None, "--domain", help="Integer items in [0, B), B up to 2^64 "
                                                                            "(strings: --max-length instead).")),
        *_protocol_parameters(entry),
        *([_param("max_items", int, typer.Option(
            1, "--max-items", help="L items a user (estimate --user-column --max-items L): the run over n L reports, "
                                   "at the per-report budget that keeps each user at --epsilon, --delta; prints the "
                                   "expected error an item and both guarantees."))]
          if entry.result in (ResultKind.FREQUENCY_TABLE, ResultKind.HEAVY_HITTER_LIST) else []),
        *(_graph_options() if entry.topology is Topology.SECRET_SHARING else []),  # DPDS, DPDG (metadata only)
        *_hash_key_option(entry, "The public item-hash key (hex) to record in the parameters (default: a random "
                                 "one)."),
        _verbose_option(),
        _param("as_json", bool, typer.Option(False, "--json", help="Print the report as JSON.")),
        _param("output", Optional[Path], typer.Option(
            None, "--output", help="Write the JSON report (loadable as parameters: analyze --params) to FILE.")),
    ]
    calibrate_app.command(entry.name, help=f"{entry.title}: frozen parameters, cost, expected error.")(
        _command(lambda **kw: _calibrate(entry, **kw), params, entry.title))


audit_app = ProtocolCommands(lambda entry: _register_audit(entry),
                             help="Check a protocol's claimed guarantee against its exact or sampled output laws.")


AuditMethod = _choice("AuditMethod", ("exact", "statistical"))


def _audit(entry: ProtocolEntry, *, users: int, domain: int, epsilon: float, delta: float, calibration: Enum,
           noise_scale: float, dropouts: int, method: Enum, runs: int, seed: int, as_json: bool,
           output: Optional[Path], progress: Optional[bool] = None, **options: Any) -> None:
    from ..audit import exact_audit, statistical_audit
    from ..protocols.registry import calibrate
    from ..reports import report_document

    with _clean_errors():
        _check_output(output)
        params = calibrate(entry.name, epsilon=epsilon, delta=delta, n_users=users, domain_size=domain,
                           calibration=calibration.value, **options)
        if method.value == "exact":
            with _progress(progress) as advance:
                report = exact_audit(params, noise_scale, dropouts, progress=advance)
        elif dropouts:
            raise ParameterError("dropouts", "0 with --method statistical", dropouts)
        else:
            with _progress(progress) as advance:
                report = statistical_audit(params, runs=runs, noise_scale=noise_scale, seed=seed, progress=advance)

    def human() -> None:
        r = report
        _say(f"{r.protocol}, {r.calibration} calibration, noise x{r.noise_scale:g}: {r.method} audit"
             + (f" over {r.pairs} neighbouring pairs" if r.pairs else f", {r.runs} runs per dataset, "
                f"{r.confidence:.0%} confidence"))
        _say(f"claimed: ({r.claimed.epsilon:g}, {r.claimed.delta:g})-DP")
        eps = "no finite epsilon" if r.true_epsilon is None else f"{r.true_epsilon:.4g}"
        if r.method == "exact":
            _say(f"true: delta at epsilon {r.claimed.epsilon:g} = {r.true_delta:.4g}; epsilon at delta "
                 f"{r.claimed.delta:g} = {eps}" + ("" if r.slack is None else f" (slack {r.slack:.4g})"))
        else:
            _say(f"lower bound on the true epsilon: {eps}")
        for note in r.notes:
            _say(f"  {note}")
        _say("verdict: " + ("holds" if r.holds else "VIOLATED: the mechanism does not meet its claimed guarantee"))

    _emit(report_document(report), as_json, output, human)
    if not report.holds:
        raise typer.Exit(EXIT_VIOLATION)  # a violated guarantee fails a script, as a failed test would


def _register_audit(entry: ProtocolEntry) -> None:
    params = [
        _param("users", int, typer.Option(..., "--users", help="Number of users n (tiny for --method exact).")),
        _param("domain", int, typer.Option(..., "--dimension", help="Dimension d (tiny for --method exact).")
               if entry.result is ResultKind.VECTOR_SUM else
               typer.Option(..., "--domain", help="Domain size B (tiny for --method exact).")),
        *_protocol_parameters(entry),
        _param("noise_scale", float, typer.Option(1.0, "--noise-scale", help="Multiply the calibrated noise by F "
                                                                             "(below 1: watch the auditor catch it).")),
        _param("dropouts", int, typer.Option(0, "--dropouts", help="Users who send nothing (drop out, or collude "
                                                                    "and are subtracted); exact method.")),
        _param("method", AuditMethod, typer.Option("exact", "--method", help="exact (enumerates the output laws: "
                                                                            "tiny n and B) or statistical.")),
        _param("runs", int, typer.Option(4000, "--runs", help="Runs per dataset (statistical).")),
        _param("seed", int, typer.Option(0, "--seed", help="Seed of the statistical auditor's runs.")),
        _param("as_json", bool, typer.Option(False, "--json", help="Print the report as JSON.")),
        _param("output", Optional[Path], typer.Option(None, "--output", help="Write the JSON report to FILE.")),
        _param("progress", Optional[bool], typer.Option(
            None, "--progress/--no-progress", help="Progress on stderr: bars on a terminal, else plain lines "
                                                   "(default: on a terminal only).")),
    ]
    audit_app.command(entry.name, help=f"{entry.title}: audit the claimed (epsilon, delta); exit status 1 when "
                                       "it does not hold.")(
        _command(lambda **kw: _audit(entry, **kw), params, entry.title))


account_app = typer.Typer(no_args_is_help=True, rich_markup_mode=None,
                          help="Privacy accountants: the guarantee a mechanism's parts add up to.")


AccountMethod = _choice("AccountMethod", ("best", "fmt", "wang", "blanket", "closed-form"))


@account_app.command("shuffle")
def account_shuffle(
    local_epsilon: float = typer.Option(..., "--local-epsilon", help="eps0 of each user's local randomizer."),
    users: int = typer.Option(..., "--users", help="Number of users n (one report each)."),
    delta: float = typer.Option(..., "--delta", help="delta in (0, 1)."),
    method: AccountMethod = typer.Option("best", "--method", help="best (default: the least of every proven "  # type: ignore
                                         "numerical bound that applies), fmt (Feldman-McMillan-Talwar), wang "
                                         "(variation-ratio reduction), blanket (k-ary randomized response, "
                                         "--values: the blanket accountant) or closed-form (FMT's)."),
    values: Optional[int] = typer.Option(None, "--values", help="k: the randomizer is k-ary randomized response "
                                         "(sets --total-variation, allows the blanket accountant; k = 2 also "
                                         "reports the exact eps of shuffled binary randomized response)."),
    total_variation: Optional[float] = typer.Option(None, "--total-variation", help="beta of the randomizer, where "
                                                    "known (wang; k-ary RR: give --values instead)."),
    as_json: bool = typer.Option(False, "--json", help="Print the report as JSON."),
    output: Optional[Path] = typer.Option(None, "--output", help="Write the JSON report to FILE."),
) -> None:
    """(eps, delta) of n eps0-LDP reports after a uniform shuffle (amplification by shuffling)."""
    from ..privacy import shuffle
    from ..reports import AccountReport, report_document

    with _clean_errors():
        _check_output(output)
        start = time.perf_counter()
        epsilons = shuffle.shuffle_epsilons(local_epsilon, users, delta, method.value, total_variation, values)
        by = min(epsilons, key=epsilons.get)
        seconds = time.perf_counter() - start
        try:
            closed = shuffle.shuffle_epsilon(local_epsilon, users, delta, "closed-form")
        except ParameterError:  # outside the closed form's condition
            closed = None
        exact, exact_note = None, None
        if values == 2:
            searched = 2 * shuffle.BINARY_SPLITS
            try:
                exact = shuffle.binary_randomized_response_epsilon(local_epsilon, users, delta)
                exact_note = ("every dataset" if users - 1 < searched else f"the {searched} datasets whose other "
                              "users hold the fewest or the most ones, where the worst lies on every instance "
                              "searched in full")
            except ParameterError as err:  # too large to compute: the bounds stand, and the report says why
                exact_note = f"not computed: {err}"
        if values is not None:
            total_variation = shuffle.randomized_response_total_variation(local_epsilon, values)
    report = AccountReport("shuffle", local_epsilon, users, delta, method.value, epsilons[by], by, epsilons,
                           list(shuffle.ASSUMPTIONS), shuffle.REFERENCE, total_variation, values, closed, exact,
                           exact_note, seconds)

    def human() -> None:
        randomizer = f"{values}-ary randomized response" if values else "local randomizer"
        _say(f"{users} shuffled reports of an eps0 = {local_epsilon:g} {randomizer} are ({epsilons[by]:.4g}, "
             f"{delta:g})-DP ({by}, {seconds:.2f} s)")
        if len(epsilons) > 1:
            _say("  by method: " + ", ".join(f"{name} {value:.4g}" for name, value in epsilons.items()))
        if closed is not None and method.value != "closed-form":
            _say(f"  the closed form gives eps = {closed:.4g}")
        if method.value == "best" and values and values > 2 and "blanket" not in epsilons:
            _say("  the blanket accountant is not run at this size (each blanket size would cost more binomial tails "
                 "than its budget); FMT's and Wang et al.'s bounds stand")
        if exact is not None:
            gap = f"the bound is {epsilons[by] / exact - 1:.1%} above it" if exact > 0 else "the bound is above 0"
            _say(f"  exact eps of shuffled binary randomized response: {exact:.4g} (over {exact_note}); {gap}")
        elif exact_note is not None:
            _say(f"  exact eps of shuffled binary randomized response {exact_note}")
        _say("  assumes: " + "; ".join(shuffle.ASSUMPTIONS))

    _emit(report_document(report), as_json, output, human)
