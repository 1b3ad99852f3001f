"""Part 12 of ``make bench``: DPDS's parties as services on loopback (the sharing server and real SDK users).

n users (2,000 by default, ``PRIVAGG_BENCH_SHARING_USERS`` sets it) holding one of the N = 20 most common
English words run the three rounds of ``protocols/sharing_parties.py`` through ``privagg serve sharing`` on
SQLite: enrollment, round 1 (n - 1 shares each, sealed with HPKE to their recipients, relayed), round 2
(masked sums), round 3 (unmasks). Measured: each round's wall time, the sealed share bytes through the relay
against the formula, the users' HTTP bytes. Then the same with 10% of the users vanishing after round 1, and
the server killed with SIGKILL (and restarted) once the users' round-1 messages are in and again once their
round-2 messages are: the release must equal the survivors' sum exactly (every user's shares summed in the
field, from his secret), nothing lost.

Client users, the server and its database share the machine's two cores.
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from benchfmt import Report, note  # noqa: E402

CATEGORIES, EPSILON, DELTA = 20, 1.0, 1e-6


def _run(folder: Path, users: int, drop_fraction: float, kill: bool) -> dict:
    from privagg.demos import sharing_demo_data
    from privagg.protocols.registry import calibrate
    from privagg.protocols.sharing_parties import survivors_parameters
    from privagg.service.sharing_demo import (SharingDeployment, dropout_plan, expected_sealed_bytes,
                                              min_survivors_for, run_rounds)

    codes, _, beta = sharing_demo_data(users, CATEGORIES)
    parameters = calibrate("dpds", epsilon=EPSILON, delta=DELTA, n_users=users, domain_size=CATEGORIES,
                           min_count_fraction=beta)
    plan = dropout_plan(users, drop_fraction, (2,), seed=7)
    kills: list[float] = []
    with SharingDeployment(f"sqlite:///{folder / 'sharing.db'}", folder / "sharing.log") as dep:
        service = dep.service()
        task = service.create_task(parameters, 3600.0, min_survivors_for(users, drop_fraction))
        tokens = service.issue_tokens(task.task_id, users)
        service.engine.dispose()

        def restart(_round: int) -> None:
            if kill and _round in (1, 2):
                start = time.perf_counter()
                dep.kill()
                dep.start()
                kills.append(time.perf_counter() - start)

        run = run_rounds(dep.url, task.task_id, codes, tokens, plan, lambda text: note(text), restart)
        report = run["clients"][0]._call("result")
    survivors = [c for c in run["clients"] if c.user in run["survivors"]]
    field, total = parameters.field, np.zeros(CATEGORIES, dtype=np.uint64)
    for client in survivors:
        total = field.add(total, field.sum(client.role.sent_shares(range(users)), axis=0))
    expected = survivors_parameters(parameters, len(survivors)).estimate(total)
    released = np.array([e["estimate"] for e in sorted(report["estimates"], key=lambda e: e["item"])])
    return {"seconds": run["seconds"], "bytes": run["user_bytes"],
            "formula": expected_sealed_bytes(task, run["index"], plan), "survivors": len(survivors),
            "exact": bool(np.array_equal(released, expected)), "kills": kills, "delta": report["privacy"]["delta"]}


def sharing_service(report: Report) -> None:
    users = int(os.environ.get("PRIVAGG_BENCH_SHARING_USERS", "2000"))
    report.add(f"## 12. DPDS through the sharing server: n = {users:,} SDK users, N = {CATEGORIES} (loopback, "
               "SQLite)", "")
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for label, drop, kill in (("no dropouts", 0.0, False),
                                  ("10% vanish after round 1; kill -9 of the server in rounds 1 and 2", 0.1, True)):
            note(f"dpds through the sharing server, {users:,} users: {label}")
            folder = Path(tmp) / label.split()[0]
            folder.mkdir()
            r = _run(folder, users, drop, kill)
            s, b = r["seconds"], r["bytes"]
            rows.append([label, f"{r['survivors']:,}", *(f"{s[k]:.1f}" for k in ("enroll", "round1", "round2",
                                                                                  "round3")),
                         f"{b['sealed_sent']:,} / {r['formula']:,}",
                         f"{b['http_sent'] / 1e6:,.1f} / {b['http_received'] / 1e6:,.1f}",
                         "yes" if r["exact"] else "**NO**",
                         ", ".join(f"{k:.1f} s" for k in r["kills"]) or "-"])
    report.table(["run", "survivors", "enroll s", "round 1 s", "round 2 s", "round 3 s",
                  "sealed share bytes: sent / formula", "users' HTTP MB sent / received",
                  "release = survivors' sum exactly", "server restarts"], rows)
    report.add("Round 1 is n (n - 1) HPKE seals (X25519, one per share) on the users' side and their storage; round "
               "2 as many opens. The formula counts each share's message (17-byte header, N elements of ceil(log2 "
               "p / 8) bytes) plus HPKE's 32-byte encapsulated key and 16-byte tag.", "")
