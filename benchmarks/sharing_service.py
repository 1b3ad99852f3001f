"""Part 12 of ``make bench``: DPDS's and TSS's parties as services on loopback (servers and real SDK users).

n users (2,000 by default, ``PRIVAGG_BENCH_SHARING_USERS`` sets it) holding one of the N = 20 most common
English words run the rounds of ``protocols/sharing_parties.py`` through ``privagg serve sharing``, and those
of ``protocols/two_server_parties.py`` through ``privagg serve s1`` and ``s2`` (alpha = 0.25), on SQLite.
DPDS: enrollment, round 1 (a pair key, and n - 1 backups each, sealed with HPKE to their recipients, relayed),
round 2 (masked sums over key-agreed shares), round 3 (revealed Shamir shares); TSS: report sets, shares to
the elected helpers, helper sums sealed to S2, the hand-over. Measured: each round's wall time, the sealed
bytes (DPDS: against the formula), the users' HTTP bytes. Then the same with 10% of the users vanishing
(DPDS: at round 2 or 3; TSS: at round 2), and the server (DPDS's, TSS's S1) killed with SIGKILL and restarted
once the users' round-1 messages are in and again once their round-2 messages are: the release must equal the
survivors' sum exactly (DPDS: the vectors of the users whose masked sums arrived, in the field; TSS: R2's
sampled entries), nothing lost.

Client users, the server and its database share the machine's two cores.

Run alone, ``python benchmarks/sharing_service.py --users 1000 2000 [--degree auto] [--kill-rounds 1 2 3 4 5]``
runs DPDS on the complete graph (or the graph ``--degree`` names) at each n (N = 20, 10% of the users vanishing at
one of rounds 1-5, the server killed with SIGKILL after the messages of each round of ``--kill-rounds``, 2 by
default) and prints each round's wall time and the server's CPU, each user's CPU and HTTP bytes (mean and
max), the server's peak RSS and the load (:func:`killed_runs`). ``python benchmarks/sharing_service.py --demo
--users 1000 2000 4000 --degree 60`` runs ``privagg demo-service dpds --users N --drop-fraction 0.1`` (``--degree``:
its graph; default the demo's) at each n and prints the server process's CPU seconds by round, the wall, the load
and the fitted growth of the server's CPU in n (:func:`served_demo`). ``python benchmarks/sharing_service.py --tss
--users 1000 3000`` runs TSS through S1 and S2 as ``privagg demo-service tss --drop-fraction 0.1`` does (N = 10, alpha
= 0.1) and prints each round's wall and the CPU of the users, S1 and S2, the shares relayed, the bytes and the
release's exactness (:func:`served_tss`).
"""

from __future__ import annotations

import os
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from benchfmt import Report, note  # noqa: E402

CATEGORIES, EPSILON, DELTA = 20, 1.0, 1e-6
TSS_REPORT_FRACTION = 0.25
# each round's deadline: the harness closes a round as soon as its users are done, so the deadline only bounds a
# stall; an hour was too short for DPDS's round 1 at n = 2,000 on a loaded machine (its last users were refused)
ROUND_SECONDS = 6 * 3600.0


def _peak_rss(pid: int) -> int:
    """The process's peak resident set (VmHWM, bytes; Linux)."""
    line = next(x for x in Path(f"/proc/{pid}/status").read_text().splitlines() if x.startswith("VmHWM:"))
    return int(line.split()[1]) * 1024


def _run(folder: Path, users: int, drop_fraction: float, kill: bool, drop_rounds: tuple[int, ...] = (2, 3),
         kill_rounds: tuple[int, ...] = (1, 2), degree: str = "complete") -> dict:
    """DPDS through its server at ``users`` on the graph ``degree`` names (``privagg.demos.with_graph``: complete,
    auto or an even k): ``drop_fraction`` of them vanishing at one of ``drop_rounds``, the
    server killed with SIGKILL and restarted after the messages of each of ``kill_rounds`` (with ``kill``). Besides
    the rounds' wall times and bytes: the server's CPU seconds up to each round's last message (``between``: so
    round k's figure holds round k - 1's close and round k's requests; ``release``: the last close and the
    release), its peak RSS (of every process it ran as), and each user's CPU seconds (his thread's time in his SDK's
    calls: enroll and sends) and HTTP bytes sent and received."""
    from privagg.demos import sharing_demo_data, with_graph
    from privagg.protocols.registry import calibrate
    from privagg.protocols.sharing_graph import task_degree
    from privagg.protocols.sharing_parties import survivors_parameters, threshold
    from privagg.service.round_demo import dropout_plan, min_survivors_for
    from privagg.service.organisation import Organisation
    from privagg.service.sharing.demo import SharingDeployment, expected_sealed_bytes, run_rounds

    codes, _, beta = sharing_demo_data(users, CATEGORIES)
    parameters = with_graph(calibrate("dpds", epsilon=EPSILON, delta=DELTA, n_users=users, domain_size=CATEGORIES,
                                      min_count_fraction=beta), degree, drop_fraction)
    plan = dropout_plan(users, drop_fraction, drop_rounds, seed=7)
    kills: list[float] = []
    cpu = {"before": 0.0}  # the server's CPU seconds at each round's last message, over its restarts
    rss: list[int] = []
    with SharingDeployment(f"sqlite:///{folder / 'sharing.db'}", folder / "sharing.log") as dep:
        organisation = Organisation.generate()
        task, tokens, sign_roster = dep.organised(organisation, parameters, ROUND_SECONDS, max(
            threshold(parameters), min_survivors_for(users, drop_fraction)), users)

        def between(round_: int) -> None:
            cpu[f"round{round_}"] = cpu["before"] + dep.cpu_seconds()
            if kill and round_ in kill_rounds:
                start = time.perf_counter()
                rss.append(_peak_rss(dep.process.pid))
                cpu["before"] += dep.cpu_seconds()
                dep.kill()
                dep.start()
                kills.append(time.perf_counter() - start)

        run = run_rounds(dep.url, task.task_id, codes, tokens, plan, organisation.public_key, sign_roster,
                         lambda text: note(text), between)
        report = run["clients"][0].result()
        cpu["release"] = cpu["before"] + dep.cpu_seconds()
        rss.append(_peak_rss(dep.process.pid))
        # what each device downloads of the signed roster (counted apart from his HTTP bytes): on a neighbour graph
        # the entries the server named to him with their inclusion proofs (his SDK's roster_received); on the
        # complete graph the whole list, which the SDK keeps one copy of a process (so it is fetched once here)
        whole_roster = task_degree(parameters) == users - 1
        if whole_roster:
            with urllib.request.urlopen(f"{dep.url}/tasks/{task.task_id}/roster") as answer:
                whole = len(answer.read())
    if whole_roster:
        roster_bytes, roster_entries = [whole] * users, [users] * users
    else:
        roster_bytes = [c.roster_received for c in run["clients"] if c.signed_roster is not None]
        roster_entries = [len(c.signed_roster.users) + len(c.signed_roster.absent) for c in run["clients"]
                          if c.signed_roster is not None]
    survivors = [c for c in run["clients"] if c.user in run["survivors"]]
    field, total = parameters.field, np.zeros(CATEGORIES, dtype=np.uint64)
    for client in survivors:
        total = field.add(total, client.role.state.vector)
    expected = survivors_parameters(parameters, len(survivors)).estimate(total)
    released = np.array([e["estimate"] for e in sorted(report["estimates"], key=lambda e: e["item"])])
    marks = [k for k in cpu if k != "before"]
    server_cpu = {k: cpu[k] - (cpu[marks[i - 1]] if i else 0.0) for i, k in enumerate(marks)}
    per_user = [(cpu, c.sent + c.received) for cpu, c in zip(run["user_cpu"], run["clients"])]
    return {"seconds": run["seconds"], "bytes": run["user_bytes"],
            "formula": expected_sealed_bytes(task, run["clients"], plan), "survivors": len(survivors),
            "exact": bool(np.array_equal(released, expected)), "kills": kills, "degree": parameters.degree,
            "roster_bytes": roster_bytes, "roster_entries": roster_entries,
            "release": report["engine"]["seconds"]["release"], "server_cpu": server_cpu, "server_rss": max(rss),
            "user_cpu": [c for c, _ in per_user], "user_bytes": [b for _, b in per_user]}


def _run_tss(folder: Path, users: int, drop_fraction: float, kill: bool) -> dict:
    from privagg.demos import sharing_demo_data
    from privagg.protocols.registry import calibrate
    from privagg.protocols.sharing_parties import survivors_parameters
    from privagg.service.two_servers.demo import run_tss_services

    codes, _, beta = sharing_demo_data(users, CATEGORIES)
    parameters = calibrate("tss", epsilon=EPSILON, delta=DELTA, n_users=users, domain_size=CATEGORIES,
                           min_count_fraction=beta, report_fraction=TSS_REPORT_FRACTION)
    kills: list[float] = []

    def restart(round_: int, s1) -> None:
        if kill and round_ in (1, 2):
            start = time.perf_counter()
            s1.kill()
            s1.start()
            kills.append(time.perf_counter() - start)

    run = run_tss_services(folder, parameters, codes, drop_fraction, ROUND_SECONDS, seed=7, rounds=(2,), between=restart,
                           progress=lambda text: note(text))
    counts = np.zeros(CATEGORIES, dtype=np.int64)
    for client in run["clients"]:
        if client.user in run["survivors"]:
            for j, entry in zip(client.role.state.items, client.role.state.entries):
                counts[j] += entry
    expected = survivors_parameters(parameters, len(run["survivors"])).estimate(counts)
    released = np.array([e["estimate"] for e in sorted(run["report"]["estimates"], key=lambda e: e["item"])])
    return {"seconds": run["seconds"], "bytes": run["bytes"], "formula": None, "survivors": len(run["survivors"]),
            "exact": bool(np.array_equal(released, expected)), "kills": kills,
            "release": run["report"]["engine"]["seconds"].get("release")}


def sharing_service(report: Report) -> None:
    users = int(os.environ.get("PRIVAGG_BENCH_SHARING_USERS", "2000"))
    report.add(f"## 12. DPDS and TSS through their servers: n = {users:,} SDK users, N = {CATEGORIES} (loopback, "
               "SQLite)", "")
    rows = []
    runs = (("no dropouts", 0.0, False),
            ("10% vanish (DPDS: at round 2 or 3; TSS: 2); kill -9 of the server in rounds 1 and 2", 0.1, True))
    with tempfile.TemporaryDirectory() as tmp:
        for protocol, run in (("dpds", _run), ("tss", _run_tss)):
            for label, drop, kill in runs:
                note(f"{protocol} through its servers, {users:,} users: {label}")
                folder = Path(tmp) / f"{protocol}-{drop}"
                folder.mkdir()
                r = run(folder, users, drop, kill)
                s, b = r["seconds"], r["bytes"]
                rows.append([protocol, label, f"{r['survivors']:,}",
                             " / ".join(f"{s[k]:.1f}" for k in s)
                             + ("" if r["release"] is None else f" (release {r['release']:.1f})"),
                             f"{b['sealed_sent']:,}" + ("" if r["formula"] is None else f" / {r['formula']:,}"),
                             f"{b['http_sent'] / 1e6:,.1f} / {b['http_received'] / 1e6:,.1f}",
                             "yes" if r["exact"] else "**NO**", ", ".join(f"{k:.1f} s" for k in r["kills"]) or "-"])
    report.table(["protocol", "run", "survivors", "seconds: enroll / round 1 / 2 / 3 (TSS: / 4 / hand-over); "
                  "the release's own, inside the last",
                  "sealed bytes sent (DPDS: / formula)", "users' HTTP MB sent / received",
                  "release = survivors' sum exactly", "server restarts"], rows)
    report.add("DPDS's round 1 is n (n - 1) HPKE seals (X25519, one per backup) on the users' side and their "
               "storage; round 2 n (n - 1) key agreements, round 3 as many opens. Its formula counts each backup's "
               "message (17-byte header, 2 x 16 Shamir shares of 3 bytes) plus HPKE's 32-byte encapsulated key and "
               "16-byte tag: no share is sent, whatever N. TSS's users send about alpha^2 n N field elements each "
               "(Table I's derived row); each is one share sealed alone, so HPKE's 48 bytes a seal, not the "
               "elements, set TSS's bytes on the wire.", "")


def killed_runs(report: Report, sizes: tuple[int, ...], drop_fraction: float = 0.1, kill_rounds: tuple[int, ...] = (2,),
                degree: str = "complete") -> None:
    """DPDS on the graph ``degree`` names (``complete``: every user backs up with the n - 1 others) at each of
    ``sizes``, N = 20, ``drop_fraction`` of the users vanishing at one of rounds 1-5, the server killed with SIGKILL
    and restarted after the messages of each of ``kill_rounds``: per round its wall time and the server's CPU, per user his CPU and HTTP bytes (mean and max),
    the server's peak RSS, and the load."""
    from privagg import __file__ as source

    rows, growth = [], {"the server's CPU": [], "a user's CPU (mean)": [], "a user's HTTP bytes (mean)": [],
                        "the roster each device downloads (mean)": []}
    with tempfile.TemporaryDirectory() as tmp:
        for users in sizes:
            note(f"dpds, graph {degree}, {users:,} users, {drop_fraction:.0%} vanish, kill -9 in rounds {kill_rounds}")
            folder = Path(tmp) / f"dpds-{users}"
            folder.mkdir()
            start, load = time.perf_counter(), os.getloadavg()
            r = _run(folder, users, drop_fraction, True, (1, 2, 3, 4, 5), kill_rounds, degree)
            wall, load = time.perf_counter() - start, (load, os.getloadavg())
            s, c = r["seconds"], r["server_cpu"]
            rounds = [k for k in s if k.startswith("round")]
            ucpu, ubytes = np.array(r["user_cpu"]), np.array(r["user_bytes"])
            rbytes, rentries = np.array(r["roster_bytes"]), np.array(r["roster_entries"])
            for name, value in zip(growth, (sum(c.values()), ucpu.mean(), ubytes.mean(), rbytes.mean())):
                growth[name].append(value)
            rows.append([f"{users:,}", "complete" if r["degree"] is None else str(r["degree"]), f"{r['survivors']:,}",
                         f"{wall:,.0f}",
                         " / ".join(f"{s[k]:.1f}" for k in ["enroll", *rounds]),
                         " / ".join(f"{c.get(k, 0.0):.1f}" for k in rounds) + f" / {c['release']:.1f}",
                         f"{ucpu.mean():.2f} / {ucpu.max():.2f}", f"{ubytes.mean() / 1e6:.2f} / {ubytes.max() / 1e6:.2f}",
                         f"{rbytes.mean() / 1e3:,.1f} / {rbytes.max() / 1e3:,.1f}",
                         f"{rentries.mean():,.1f} / {rentries.max():,}", f"{r['server_rss'] / 2**20:,.0f}",
                         "yes" if r["exact"] else "**NO**",
                         " / ".join(f"{x:.1f}" for x in r["kills"]),
                         " / ".join(f"{x:.1f}" for x in load[0]) + " -> " + " / ".join(f"{x:.1f}" for x in load[1])])
    report.add(f"DPDS, graph {degree}, N = {CATEGORIES}, {drop_fraction:.0%} of users vanishing at one of rounds 1-5, "
               f"kill -9 of the server after the messages of rounds {', '.join(map(str, kill_rounds))} (sources: "
               f"{Path(source).parent})", "")
    report.table(["n", "k", "survivors", "wall s", "seconds: enroll / round 1 / ... (each round's wall)",
                  "server CPU s by round (to each round's last message) / the last close and release",
                  "user CPU s mean / max", "user HTTP MB mean / max (the roster left out)",
                  "roster kB a device mean / max (entries and proofs; complete graph: the whole list)",
                  "roster entries a device holds mean / max", "server peak RSS MiB",
                  "release = survivors' sum exactly", "restarts s", "load 1 / 5 / 15 min, before -> after"], rows)
    if len(sizes) > 1:  # least squares of log figure on log n
        report.add("Growth in n over " + f"{sizes[0]:,}..{sizes[-1]:,}: " + "; ".join(
            f"{name} as n^{np.polyfit(np.log(sizes), np.log(values), 1)[0]:.2f}" for name, values in growth.items())
            + ".", "")


def _demo_run(users: int, drop_fraction: float, degree: str | None, folder: Path) -> dict:
    """``privagg demo-service dpds --users N --drop-fraction F [--degree K]`` as a child process: the sharing server's
    CPU seconds (its process's user + system time, read from /proc as the demo prints each round's start: round k's
    figure runs from its start to round k + 1's, its close included; the last holds the release), and the wall."""
    import re
    import subprocess

    def cpu(pid: int) -> float | None:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            return None
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    out = folder / "demo.out"
    command = [sys.executable, "-m", "privagg", "demo-service", "dpds", "--users", str(users), "--drop-fraction",
               str(drop_fraction), "--workdir", str(folder / "demo")] + ([] if degree is None else ["--degree", degree])
    start, server, marks, seen, mark, now = time.perf_counter(), None, {}, 0, "enroll", 0.0
    with out.open("w") as log:
        demo = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT)
        while demo.poll() is None:
            if server is None:  # the server starts before any round (the demo's first line names it)
                try:
                    server = next((int(child) for child in Path(f"/proc/{demo.pid}/task/{demo.pid}/children")
                                   .read_text().split() if b"serve" in Path(f"/proc/{child}/cmdline").read_bytes()),
                                  None)
                except OSError:  # the demo or its child ended meanwhile: the loop's poll says which
                    pass
            now = (cpu(server) if server is not None else None) or now
            found = re.findall(r"^round (\d) \(", out.read_text(), re.M)
            for number in found[seen:]:
                marks[mark], mark = now - sum(marks.values()), f"round{number}"
            seen = len(found)
            time.sleep(0.2)
    marks[mark] = now - sum(marks.values())
    if demo.returncode:
        raise RuntimeError(f"{' '.join(command)} failed: {out.read_text()[-2000:]}")
    if server is None:
        raise RuntimeError(f"{' '.join(command)}: its server process was never found, so no CPU was read")
    return {"wall": time.perf_counter() - start, "server_cpu": marks}


def served_demo(report: Report, sizes: tuple[int, ...], drop_fraction: float = 0.1, degree: str | None = None) -> None:
    """The sharing demo through its services at each of ``sizes`` (:func:`_demo_run`): the server's CPU by round, in
    all, the wall and the load; and the server CPU's growth in n, the least-squares slope of log CPU on log n."""
    from privagg import __file__ as source

    rows, totals = [], []
    with tempfile.TemporaryDirectory() as tmp:
        for users in sizes:
            note(f"privagg demo-service dpds --users {users} --drop-fraction {drop_fraction} --degree {degree}")
            folder = Path(tmp) / f"demo-{users}"
            folder.mkdir()
            load = os.getloadavg()
            r = _demo_run(users, drop_fraction, degree, folder)
            c = r["server_cpu"]
            totals.append(sum(c.values()))
            loads = " -> ".join(" / ".join(f"{x:.1f}" for x in at) for at in (load, os.getloadavg()))
            rows.append([f"{users:,}", " / ".join(f"{c[k]:.1f}" for k in c), f"{totals[-1]:.1f}", f"{r['wall']:,.0f}",
                         loads])
    report.add(f"`privagg demo-service dpds --drop-fraction {drop_fraction}" + (f" --degree {degree}" if degree else "")
               + f"` (sources: {Path(source).parent})", "")
    report.table(["n", "server CPU s: enroll / round 1 / ... / round 5 with the release", "server CPU s", "wall s",
                  "load 1 / 5 / 15 min, before -> after"], rows)
    if len(sizes) > 1:
        slope = np.polyfit(np.log(sizes), np.log(totals), 1)[0]
        report.add(f"The server's CPU grows as n^{slope:.2f} over n = {sizes[0]:,}..{sizes[-1]:,}.", "")


def _tss_run(users: int, drop_fraction: float, folder: Path) -> dict:
    """TSS through S1 and S2 as ``privagg demo-service tss --users N --drop-fraction F`` runs it (the bundled words,
    N = 10, alpha = the demo's, the users vanishing at round 1 or 2), in this process: each round's wall, the users'
    CPU (all their SDKs', in every process that runs them, as the demo counts it), S1's and S2's by round (their
    processes' user + system time, read from /proc as each round starts: a round's figure runs to the next round's
    start, its close included; the last one's to S2's release, the hand-over included), the bytes, the shares relayed, and whether S2's release is R2's sampled counts exactly."""
    from privagg.demos import TSS_REPORT_FRACTION, sharing_demo_data
    from privagg.protocols.registry import calibrate
    from privagg.protocols.sharing_parties import survivors_parameters
    from privagg.service.two_servers.demo import run_tss_services

    codes, categories, beta = sharing_demo_data(users)
    parameters = calibrate("tss", epsilon=EPSILON, delta=DELTA, n_users=users, domain_size=len(categories),
                           min_count_fraction=beta, report_fraction=TSS_REPORT_FRACTION)

    def cpu(pid: int) -> float:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    seen: dict[str, float] = {}  # each server's CPU as last read: the last round's figure outlives its process

    def servers() -> dict[str, float]:
        for task in Path(f"/proc/{os.getpid()}/task").iterdir():
            try:
                for child in (task / "children").read_text().split():
                    command = Path(f"/proc/{child}/cmdline").read_bytes().split(b"\0")
                    if b"serve" in command:
                        seen[command[command.index(b"serve") + 1].decode()] = cpu(int(child))
            except OSError:  # a thread or a server gone meanwhile
                pass
        return dict(seen)

    marks: list[tuple[str, dict]] = []
    done = threading.Event()

    def watch() -> None:
        while not done.wait(0.2):
            servers()

    def progress(text: str) -> None:
        note(text)
        if text.startswith("round "):
            marks.append((text.split(" (")[0], servers()))

    start, load = time.perf_counter(), os.getloadavg()
    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    try:
        run = run_tss_services(folder, parameters, codes, drop_fraction, ROUND_SECONDS, seed=0, rounds=(1, 2),
                               progress=progress)
    finally:
        done.set()
        watcher.join()
    marks.append(("released", servers()))  # the hand-over and S2's release: in the last round's figure, to 0.2 s
    wall, load = time.perf_counter() - start, (load, os.getloadavg())
    by_round = {label: {"users": run["cpu"].get(label.replace(" ", ""), 0.0),
                        **{k: after.get(k, v) - v for k, v in at.items()}}
                for (label, at), (_, after) in zip(marks, marks[1:])}
    survivors = run["survivors"]
    counts = np.zeros(len(categories), dtype=np.int64)
    for client in run["clients"]:
        if client.user in survivors:
            for j, entry in zip(client.role.state.items, client.role.state.entries):
                counts[j] += entry
    recomputed = survivors_parameters(parameters, len(survivors))
    released = np.array([e["estimate"] for e in sorted(run["report"]["estimates"], key=lambda e: e["item"])])
    truth = np.bincount(run["survivor_codes"], minlength=len(categories))
    z = (released - truth) / recomputed.standard_error(truth)
    shares = sum(r["received"].get("shares", 0) for r in run["parties"] if r["party"] == "S1")
    return {"parameters": parameters, "seconds": run["seconds"], "cpu": by_round, "wall": wall, "load": load,
            "bytes": run["bytes"], "shares": shares, "survivors": len(survivors),
            "exact": bool(np.array_equal(released, recomputed.estimate(counts))), "z_rms": float(np.sqrt(np.mean(z**2)))}


def served_tss(report: Report, sizes: tuple[int, ...], drop_fraction: float = 0.1) -> None:
    """TSS through its two servers at each of ``sizes`` (:func:`_tss_run`): per round its wall and the CPU of the users,
    S1 and S2; the shares relayed against alpha^2 N n^2, the bytes, the release's exactness and z-scores, the load."""
    from privagg import __file__ as source

    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for users in sizes:
            note(f"tss through S1 and S2, {users:,} users, {drop_fraction:.0%} vanish at round 1 or 2")
            folder = Path(tmp) / f"tss-{users}"
            folder.mkdir()
            r = _tss_run(users, drop_fraction, folder)
            s, c, b, p = r["seconds"], r["cpu"], r["bytes"], r["parameters"]
            rounds = [k for k in s if k.startswith("round")]
            cpu = {who: [c.get(f"round {k[5:]}", {}).get(who, 0.0) for k in rounds] for who in ("users", "s1", "s2")}
            rows.append([f"{users:,}", f"{r['survivors']:,}", " / ".join(f"{s[k]:.1f}" for k in ["enroll", *rounds,
                                                                                              "handover"]),
                         f"{r['wall']:,.0f}", *(" / ".join(f"{x:.1f}" for x in cpu[who]) + f" ({sum(cpu[who]):.1f})"
                                               for who in ("users", "s1", "s2")),
                         f"{r['shares']:,.0f} / {p.expected_shares:,.0f}",
                         f"{b['sealed_sent'] / 1e6:,.1f} / {b['http_sent'] / 1e6:,.1f} / {b['http_received'] / 1e6:,.1f}",
                         "yes" if r["exact"] else "**NO**", f"{r['z_rms']:.2f}",
                         " -> ".join(" / ".join(f"{x:.1f}" for x in at) for at in r["load"])])
    report.add(f"TSS through S1 and S2, N = 10, alpha = the demo's, {drop_fraction:.0%} of the users vanishing at round "
               f"1 or 2 (sources: {Path(source).parent})", "")
    report.table(["n", "R2", "wall s: enroll / round 1 / 2 / 3 / 4 / hand-over", "wall s", "users' CPU s by round (all)",
                  "S1's CPU s by round (all)", "S2's CPU s by round (all)", "shares relayed / E at n (no dropouts)",
                  "MB sealed / HTTP sent / received", "release = R2's sampled counts exactly", "z RMS",
                  "load 1 / 5 / 15 min, before -> after"], rows)


if __name__ == "__main__":
    import argparse

    parser = argparse.ArgumentParser(description="DPDS through its server: the complete graph (part 12's rows), or "
                                     "the demo's server CPU by round (--demo)")
    parser.add_argument("--users", type=int, nargs="+", default=[1000, 2000])
    parser.add_argument("--drop-fraction", type=float, default=0.1)
    parser.add_argument("--kill-rounds", type=int, nargs="+", default=[2], help="rounds after whose messages the "
                        "server is killed with SIGKILL and restarted (not with --demo or --tss)")
    kind = parser.add_mutually_exclusive_group()
    kind.add_argument("--demo", action="store_true", help="privagg demo-service dpds at each n: the server's CPU")
    kind.add_argument("--tss", action="store_true", help="TSS through S1 and S2 at each n, as its demo runs it")
    parser.add_argument("--degree", help="the graph: complete, auto or an even k (default: complete; with --demo, "
                        "the demo's own default; not with --tss)")
    args = parser.parse_args()
    if args.tss and args.degree is not None or (args.tss or args.demo) and args.kill_rounds != [2]:
        parser.error("--degree is not taken with --tss, nor --kill-rounds with --demo or --tss")
    if args.tss:
        served_tss(Report(), tuple(args.users), args.drop_fraction)
    elif args.demo:
        served_demo(Report(), tuple(args.users), args.drop_fraction, args.degree)
    else:
        killed_runs(Report(), tuple(args.users), args.drop_fraction, tuple(args.kill_rounds), args.degree or "complete")
