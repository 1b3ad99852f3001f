"""``privagg demo-service PROTOCOL``: the services started on localhost, the bundled words sent through them as
real SDK clients, the private result printed beside the simulation's."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

import typer

from ..errors import ParameterError, check_integer
from . import options
from .output import _clean_errors, _console, _label, _say, _say_release_privacy
from .tasks import task_service


def demo_kind(entry) -> str:
    """What demo-service runs for ``entry`` (a registry entry with ``demo``): the rounds of a multi-round protocol,
    a heavy-hitter discovery, or a frequency table's top words, through the services."""
    from ..protocols.kinds import ResultKind

    return ("rounds" if entry.multi_round else "heavy hitters" if entry.result is ResultKind.HEAVY_HITTER_LIST
            else "frequencies")


DEMO_OPTIONS = {"--vocabulary": ("frequencies",), "--concurrency": ("frequencies", "heavy hitters"),
                "--top": ("frequencies",), "--drop-fraction": ("rounds",),
                "--round-seconds": ("rounds",), "--dishonest": ("rounds",),
                "--degree": ("rounds",)}  # the kinds of demo each option applies to (--degree: dpds and dpdg's)


def _interrupted(_signum, _frame) -> None:
    """SIGTERM as Ctrl-C: the demo's context managers stop the services it started (SIGTERM's default action would
    end the demo at once, its child processes left running). While one interrupt unwinds the demo (its services
    stopping), another (the operator's second SIGTERM, or a delivery again by :func:`_lost_interrupt` of one that
    was not lost) is ignored: it would break that clean-up."""
    import sys

    if isinstance(sys.exc_info()[1], KeyboardInterrupt):
        return
    raise KeyboardInterrupt


def _lost_interrupt(unraisable) -> None:
    """``sys.unraisablehook`` while a demo runs. A KeyboardInterrupt raised where Python cannot raise it (the signal
    arrived in a weakref callback at garbage collection: SQLAlchemy's) is printed and dropped, and the demo went on
    to exit 0 with its services stopped only at its end; SIGTERM is delivered again from a thread a moment later
    (once this hook and the collection have returned: an interrupt raised in the hook itself is dropped for good),
    so that it lands in the demo's own code, or, landing in another callback, comes here again. Anything else is the
    default hook's."""
    import signal
    import sys
    import threading

    if issubclass(unraisable.exc_type, KeyboardInterrupt):
        # a real signal to the main thread, which wakes it from a blocking call as the first did
        later = threading.Timer(0.05, signal.pthread_kill, args=(threading.main_thread().ident, signal.SIGTERM))
        later.daemon = True
        later.start()
        return
    sys.__unraisablehook__(unraisable)


def demo_service(protocol: options.DemoProtocol = typer.Argument("fe1", help="fe1: the shuffle model's collector and "  # type: ignore[valid-type]
                                                         "analyzer; fe-hh: the same, discovering the heavy words "
                                                         "with no list; dpds or dpdg: the sharing server and its users; "
                                                         "tss or tss-collusion: S1, S2 and their users."),
                 users: Optional[int] = typer.Option(None, "--users", help="Users drawn from the bundled English "
                                                     "words (default 20,000 for fe1 and fe-hh, 300 for the others; "
                                                     "dpds and tss take at least 90, dpdg 20)."),
                 vocabulary: Optional[int] = typer.Option(None, "--vocabulary", help="fe1 only: the most common "
                                                          "words, the domain (default 1,000; fe-hh takes the words "
                                                          "of up to 4 letters, the others the 10 most common)."),
                 epsilon: float = typer.Option(1.0, "--epsilon", help="Privacy parameter epsilon."),
                 delta: float = typer.Option(1e-6, "--delta", help="Privacy parameter delta."),
                 concurrency: Optional[int] = typer.Option(None, "--concurrency", help="fe1 and fe-hh only: reports "
                                                           "in flight at once (default 500)."),
                 drop_fraction: Optional[float] = typer.Option(None, "--drop-fraction", help="dpds, dpdg, tss and "
                                                               "tss-collusion only: the share of users who vanish "
                                                               "(default 0; floor(fraction n) users drawn at "
                                                               "random), spread over rounds 1-5 for dpds and "
                                                               "dpdg (1-3 with --dishonest inconsistent-shares: "
                                                               "a survivor silent in round 6 would refuse the "
                                                               "release), rounds 1-2 for tss and tss-collusion."),
                 round_seconds: Optional[float] = typer.Option(None, "--round-seconds", help="dpds, dpdg, tss and "
                                                               "tss-collusion only: each round's deadline from its "
                                                               "start (default 3600: the demo closes each round as "
                                                               "soon as its users have answered; the deadline only "
                                                               "bounds a stall)."),
                 workdir: Path = typer.Option(Path("privagg-demo-service"), "--workdir",
                                              help="Folder for the services' databases and logs: a new or empty "
                                                   "one, or one an earlier demo made (it replaces its databases "
                                                   "there)."),
                 top: Optional[int] = typer.Option(None, "--top", help="fe1 only: how many top words to show "
                                                   "(default 10; fe-hh shows every heavy word found, the others "
                                                   "every category)."),
                 dishonest: Optional[str] = typer.Option(None, "--dishonest", help="dpds, dpdg, tss and "
                                                         "tss-collusion only: one user deviates, to see what the "
                                                         "protocol detects: junk-backups, wrong-share or "
                                                         "inconsistent-shares (dpds, dpdg), misrouted-sum or "
                                                         "wrong-sum (tss, tss-collusion)."),
                 degree: Optional[str] = typer.Option(None, "--degree", help="dpds and dpdg only: the neighbour "
                                                      "graph each user masks with and backs his keys up among: auto "
                                                      "(default: the complete graph up to 1,000 users, beyond it the "
                                                      "least degree whose failure bound meets 2^-40 with the drop "
                                                      "fraction), complete, or an even number of neighbours."),
                 as_json: bool = typer.Option(False, "--json", help="Print the JSON of both reports and the "
                                                                    "comparison.")) -> None:
    """Start the services on localhost, send the bundled words through them as real SDK clients, show the private
    result beside the simulation's. An option that does not apply to the protocol is refused, not ignored.
    SIGTERM (or Ctrl-C) stops the services it started before it exits (status 130)."""
    import signal
    import sys

    from ..protocols.registry import get, listed, names

    given = {"--vocabulary": vocabulary, "--concurrency": concurrency, "--top": top, "--drop-fraction": drop_fraction,
             "--round-seconds": round_seconds, "--dishonest": dishonest, "--degree": degree}
    kind = demo_kind(get(protocol.value))
    with _clean_errors():
        for name, value in given.items():
            if value is not None and kind not in DEMO_OPTIONS[name]:
                applies = listed(names(lambda e: e.demo and demo_kind(e) in DEMO_OPTIONS[name]), "and")
                raise ParameterError(name, f"given only for {applies} (it does nothing for {protocol.value})", value)
        concurrency = check_integer("concurrency", 500 if concurrency is None else concurrency, 1, 100_000)
    signal.signal(signal.SIGTERM, _interrupted)  # the services stop with the demo, as on Ctrl-C
    sys.unraisablehook = _lost_interrupt
    if kind == "heavy hitters":
        _demo_heavy_hitters(protocol.value, 20_000 if users is None else users, epsilon, delta, concurrency, workdir, as_json)
        return
    if kind == "rounds":
        _demo_sharing(protocol.value, 300 if users is None else users, drop_fraction or 0.0, epsilon, delta,
                      3600.0 if round_seconds is None else round_seconds, workdir, as_json, dishonest, degree)
        return
    users = 20_000 if users is None else users
    from ..demos import run_demo
    from ..reports import document_privacy, json_document

    with _clean_errors():
        users = check_integer("users", users, 1_000, 1_000_000)
        vocabulary = check_integer("vocabulary", 1_000 if vocabulary is None else vocabulary, 2, 20_000)
        top = check_integer("top", 10 if top is None else top, 1, vocabulary)
        out = run_demo(workdir, users, vocabulary, epsilon, delta, concurrency,
                       progress=(lambda _text: None) if as_json else _say, protocol=protocol.value)
    if as_json:
        print(json.dumps(json_document({k: out[k] for k in ("service", "simulation", "load", "comparison")},
                                       from_data=True)))  # the seeded simulation evaluated, the comparison
        return
    from rich.table import Table

    sim = {e["item"]: e for e in out["simulation"]["estimates"]}
    service_privacy = document_privacy(out["service"])
    label = _label(service_privacy, out["service"])
    table = Table(title=f"{protocol.value} over {users} users: the services' result ({label}) beside "
                        "the simulation")
    for column in ("word", "true count", "service ± stderr", "simulation ± stderr"):
        table.add_column(column, justify="right")
    for e in out["service"]["estimates"][:top]:
        s = sim[e["item"]]
        table.add_row(out["words"][e["item"]], str(out["truth"][e["item"]]), f"{e['estimate']:.1f} ± {e['stderr']:.1f}",
                      f"{s['estimate']:.1f} ± {s['stderr']:.1f}")
    _console().print(table)
    c, load, cmp = out["service"]["collection"], out["load"], out["comparison"]
    _say_release_privacy(service_privacy, out["service"], "service ", f"; {service_privacy.randomness}; honest "
                         f"fraction {service_privacy.honest_fraction:g}")
    _say(f"simulation privacy: private: {str(out['simulation']['privacy']['private']).lower()} (seeded)")
    _say(f"collection: {c['reports']} reports in {c['batches']} batch(es), {out['service']['messages']['total']} "
         f"messages, {c['unopened'] + c['malformed']} dropped; load: {load['acknowledged']} acknowledged at "
         f"{load['reports_per_second']:.0f} reports/s, latency p50 {load['latency_ms']['p50']:.0f} ms, p99 "
         f"{load['latency_ms']['p99']:.0f} ms")
    verdict = "matches" if cmp["matches"] else "DOES NOT match"
    _say(f"service vs simulation over all {cmp['items']} words: RMS of the standardized differences "
         f"{cmp['rms_standardized_difference']:.2f} (1 expected; {cmp['rms_range'][0]:.2f} to "
         f"{cmp['rms_range'][1]:.2f} at the {cmp['false_alarm']:.1%} level), largest "
         f"{cmp['max_standardized_difference']:.2f} (about {cmp['expected_max']:.1f} expected, at most "
         f"{cmp['max_bound']:.2f}): the service {verdict} the simulation within its standard errors")


def _demo_heavy_hitters(protocol: str, users: int, epsilon: float, delta: float, concurrency: int, workdir: Path,
                        as_json: bool) -> None:
    """demo-service of a heavy-hitter protocol (privagg.demos.run_heavy_hitter_demo), printed."""
    from ..demos import run_heavy_hitter_demo
    from ..reports import document_privacy, json_document

    with _clean_errors():
        users = check_integer("users", users, 5_000, 1_000_000)
        out = run_heavy_hitter_demo(workdir, users, epsilon=epsilon, delta=delta, concurrency=concurrency,
                                    protocol=protocol,
                                    progress=(lambda _text: None) if as_json else _say)
    if as_json:
        print(json.dumps(json_document(out, from_data=True)))  # the true counts, recall and precision
        return
    from rich.table import Table

    report, comparison = out["service"], out["comparison"]
    simulated = {h["item"] for h in out["simulation"]["heavy_hitters"]}
    table = Table(title=f"{protocol} over {report['n_users']:,} users: the heavy words the services discovered (no "
                        f"list), threshold phi n = {comparison['threshold']:,.0f}")
    for column in ("word", "service ± stderr", "true count", "found by the simulation"):
        table.add_column(column, justify="right")
    for h in report["heavy_hitters"]:
        table.add_row(str(h["item"]), f"{h['estimate']:,.0f} ± {h['stderr']:,.0f}", str(out["truth"].get(h["item"], 0)),
                      "yes" if h["item"] in simulated else "no")
    _console().print(table)
    missed = sorted(w for w, c in out["truth"].items() if c >= comparison["threshold"] and
                    w not in {h["item"] for h in report["heavy_hitters"]})
    for who in ("service", "simulation"):
        e = comparison[who]
        _say(f"{who}: recall {e['recall']:.2f} of the {e['heavy_items']} words held by at least phi n users, precision "
             f"{e['precision']:.2f} of the {e['reported']} reported" + (f" (missed: {', '.join(missed)})"
                                                                          if who == "service" and missed else ""))
    _say_release_privacy(document_privacy(report), report, "service ", "; the simulation beside it is seeded (not "
                         "private)")


def _demo_sharing(protocol: str, users: int, drop_fraction: float, epsilon: float, delta: float,
                  round_seconds: float, workdir: Path, as_json: bool, dishonest: str | None,
                  degree: str | None = None) -> None:
    """demo-service of a multi-round protocol (privagg.demos.run_sharing_demo), printed: after the release, what it
    detected (and with ``--dishonest``, who deviated and how)."""
    from ..demos import run_sharing_demo
    from ..protocols.registry import get
    from ..reports import document_privacy, json_document

    from ..protocols.roles import RoundFailed
    from ..service.calls import SubmitError
    from ..service.round_demo import DevicesLost
    from ..service.round_tasks import check_round_deadline

    with _clean_errors():
        check_round_deadline(round_seconds)
        try:
            summary = run_sharing_demo(workdir, protocol, users, drop_fraction, epsilon, delta, round_seconds,
                                       progress=(lambda _text: None) if as_json else _say, dishonest=dishonest,
                                       degree=degree)
        except (RoundFailed, DevicesLost) as err:
            _say(f"error: {err}", stderr=True)
            raise typer.Exit(1) from None
        except SubmitError as err:  # a server stopped or refused (the demo's own servers: their logs say why)
            _say(f"error: a request to the demo's service failed ({err}); the services' logs are in "
                 f"{workdir / 'logs'}", stderr=True)
            raise typer.Exit(1) from None
    report, rows = summary["service"], summary["estimates"]
    if as_json:
        print(json.dumps(json_document(summary, from_data=True)))  # the truth and z-scores beside the release
        return
    from rich.table import Table

    d, privacy = report["dropouts"], document_privacy(report)
    server = "S2's" if task_service(get(protocol)) == "two-servers" else "the sharing server's"
    table = Table(title=f"{protocol} over {d['survivors']} of {summary['users']} users: {server} release "
                        f"({_label(privacy, report)}) beside the simulation")
    for column in ("word", "true count", "service ± stderr", "z", "simulation ± stderr", "z"):
        table.add_column(column, justify="right")
    for r in rows:
        table.add_row(r["word"], str(r["truth"]), f"{r['service']:.1f} ± {r['service_stderr']:.1f}",
                      _shown_z(r["service_z"]), f"{r['simulation']:.1f} ± {r['simulation_stderr']:.1f}",
                      _shown_z(r["simulation_z"]))
    _console().print(table)
    _say(f"users: {d['enrolled']} enrolled, {d['round1_senders']} took part in round 1, {d['survivors']} in the "
         f"release (the task's minimum {d['min_survivors']})")
    _say_release_privacy(privacy, report, "service ", f"; recomputed for the {d['survivors']} survivors; simulation: "
                         "not private (seeded)")
    lie = summary["dishonest"]
    if lie is not None:
        words = {r["item"]: r["word"] for r in rows}
        item = "" if lie["item"] is None else f" (item {lie['item']}, {words.get(lie['item'], 'not released')})"
        _say(f"dishonest: user {lie['user']} ({lie['kind']}) {lie['did']}{item}; expected: {lie['outcome']}")
    _say("detected: " + _detected(summary["detected"]))
    if lie is not None and lie["kind"] == "wrong-sum":
        _say(f"not detectable, trusted: helpers: {report['trust']['helpers']}")
    z = [r["service_z"] for r in rows if r["service_z"] is not None]
    if summary["data_condition_broken"]:
        _say("warning: the survivors' data breaks the condition the guarantee assumes (a demo can see it; no party "
             f"of a deployment can): {summary['data_condition_broken']}", stderr=True)
    for caveat in privacy.caveats:
        if "weakened" in caveat:
            _say("warning: " + caveat[caveat.index("the dropouts weakened"):], stderr=True)
    if summary["z_rms"] is not None:
        _say(f"z-scores against the truth (each over its standard deviation at the true count): RMS "
             f"{summary['z_rms']:.2f} over {len(z)} categories (1 expected)")
    _say("rounds: " + ", ".join(f"{k} {v:.1f} s" for k, v in summary["round_seconds"].items()))
    b = summary["bytes"]
    formula = "" if b.get("sealed_expected") is None else (
        f", the formula {b['sealed_expected']:,} ("
        f"{'equal' if b['sealed_sent'] == b['sealed_expected'] else 'DIFFERENT'})")
    _say(f"bytes: the users sealed {b['sealed_sent']:,} bytes for the relay{formula}; HTTP bodies (binary inboxes and "
         f"answers, JSON elsewhere) {b['http_sent']:,} sent, {b['http_received']:,} received")
    parties = Table(title="messages per party (entries: field elements; items in report sets and helper lists; a key "
                          "counts one, a backup one per secret, a revealed share one), measured / expected, beside "
                          "Table I")
    for column in ("party", "parties", "sent", "received", "Table I"):
        parties.add_column(column, justify="left" if column in ("party", "Table I") else "right")
    for row in summary["parties"]:
        parties.add_row(row["party"], str(row["parties"]), _entries(row["sent"], row["expected_sent"]),
                        _entries(row["received"], row["expected_received"]), row["table_i"])
    _console().print(parties)


def _detected(detected: dict) -> str:
    """The release's blame data (privagg.demos.DETECTED) in a line; "none" on an honest run."""
    said = {"complaints": lambda v: f"{len(v)} complaints naming users {sorted({a for c in v for a in c[1:]})}",
            "excluded": lambda v: f"excluded dealers {v}",
            "blamed": lambda v: "blamed revealers " + ", ".join(f"{b[0]} ({len(b) - 1} shares discarded)" for b in v),
            "inconsistent": lambda v: f"dealers proven inconsistent {v}, excluded in round 6 (the survivors' pair "
                                      "seeds with them removed their terms)",
            "unopened_sums": lambda v: f"helpers whose sums did not open {v}",
            "recovered_items": lambda v: f"items recovered in round 4 {v}",
            "lost_items": lambda v: "items refused " + ", ".join(f"{e['item']} ({e['reason']})" for e in v)}
    return "; ".join(said[k](v) for k, v in detected.items() if v) or "none"


def _entries(measured: dict, expected: dict) -> str:
    """Each kind's entries per party, measured / expected."""
    return "\n".join(f"{kind}: {measured.get(kind, 0):,.1f} / {expected[kind]:,.1f}" if kind in expected else
                     f"{kind}: {measured.get(kind, 0):,.1f}" for kind in sorted({*measured, *expected})) or "-"


def _shown_z(z: float | None) -> str:
    return "-" if z is None else f"{z:+.2f}"
