"""The services' leg of ``privagg demo-service tss|tss-collusion`` (:func:`privagg.demos.run_tss_demo` adds the data
and the simulation beside it): S2 and S1 as child processes on loopback (``privagg serve s2``, ``privagg serve
s1``, each over its own SQLite file), a task on both signed by the organisation (in this process, as its roster
once the users enrolled: :class:`~privagg.service.organisation.Organisation`), one :class:`~privagg.service.two_servers.client.TSSClient`
per user through the rounds TSS declares, a fraction of the users vanishing at round 1 or 2 (the demo's seeded
choice).
"""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from pathlib import Path

import numpy as np

from ..keys import KeyEncryptionKey
from ..local import ServiceProcess, fresh_sqlite
from ..organisation import Organisation
from ..round_demo import Devices, check_drop_fraction, check_not_failed, close_round, dropout_plan, min_survivors_for, party_row, traffic
from ..storage import connect
from .servers import FirstService, SecondService, create_tasks
from .client import TSSClient


def run_tss_services(workdir: Path, parameters, codes: np.ndarray, drop_fraction: float = 0.0,
                     round_seconds: float = 300.0, seed: int = 0, rounds: tuple[int, ...] = (1, 2), between=None,
                     progress=print, liar: type | None = None, processes: int | None = None) -> dict:
    """S2's release, the survivors' codes (R2), each round's wall time and the users' CPU in it (in every process
    that runs them: :class:`~privagg.service.round_demo.Devices`), each user's CPU in his calls, the users' bytes and
    their clients.
    ``rounds``: when the dropouts vanish; ``between(round, s1)``: runs once a round's messages are sent (the
    benchmark kills S1 there); ``liar``: the client class of the first user who stays (``privagg demo-service
    --dishonest``, :mod:`privagg.service.two_servers.dishonest`), his client returned as ``liar``; ``processes``: how
    many run the users' devices (:class:`~privagg.service.round_demo.Devices`)."""
    users, drop_fraction = len(codes), check_drop_fraction(drop_fraction)
    plan = dropout_plan(users, drop_fraction, rounds, seed)
    dbs = {role: fresh_sqlite(workdir, role) for role in ("s1", "s2")}
    kek = KeyEncryptionKey.local()  # S2's private keys are sealed under it in its database
    with ServiceProcess("s2", dbs["s2"], workdir / "logs" / "s2.log", {"PRIVAGG_KEK": kek.export()}) as s2, \
            ServiceProcess("s1", dbs["s1"], workdir / "logs" / "s1.log") as s1:
        progress(f"S1 at {s1.url}, S2 at {s2.url} (logs in {workdir / 'logs'})")
        first = FirstService(connect(dbs["s1"], "s1"))
        second = SecondService(connect(dbs["s2"], "s2", kek=kek), kek=kek)
        organisation = Organisation.generate()
        try:
            task = create_tasks(first, second, parameters, s2.url, round_seconds,
                                min_survivors_for(users, drop_fraction), organisation_key=organisation.public_key)
            organisation.sign_task(first, task)
            tokens = first.issue_tokens(task.task_id, users)
        finally:
            second.engine.dispose()
        lying = int(np.flatnonzero(plan == 0)[0]) if liar is not None else -1
        observer = TSSClient.fetch(s1.url, task.task_id, organisation_key=organisation.public_key)
        seconds: dict[str, float] = {}
        cpu: dict[str, float] = {}  # the users' CPU (user and system) in each round, in every process
        with Devices([liar if i == lying else TSSClient for i in range(users)], s1.url, task.task_id,
                     organisation.public_key, processes) as devices:
            start = time.perf_counter()
            index = devices.call("enroll", ((i, (token,)) for i, token in enumerate(tokens)))
            try:
                left_out = organisation.sign_roster(first, task.task_id, tokens)[1]
            finally:
                first.engine.dispose()
            if left_out:
                progress(f"the organisation left out users {sorted(left_out)} (round-1 dropouts): {left_out}")
            seconds["enroll"] = time.perf_counter() - start
            for number, round_ in enumerate(observer.protocol.rounds, 1):
                start, used = time.perf_counter(), devices.cpu()
                if observer.state() == f"round{number}":  # a round that expects nobody is skipped
                    active = [i for i in range(users) if plan[i] == 0 or plan[i] > number]
                    progress(f"round {number} ({round_.name}): up to {len(active)} users")
                    # every user still there asks; those the round does not ask (not a helper) send nothing
                    devices.call("send", ((i, (round_.name, int(codes[i]) if round_.value else None))
                                          for i in active))
                    if between is not None:
                        between(number, s1)
                    if observer.state() == f"round{number}":
                        close_round(f"{s1.url}/tasks/{task.task_id}/close-round/{number}", 60)
                seconds[f"round{number}"] = time.perf_counter() - start
                cpu[f"round{number}"] = devices.cpu() - used
            clients, user_cpu = devices.close()
        start = time.perf_counter()
        while observer.state() not in ("delivered", "failed"):
            time.sleep(0.05)
        check_not_failed(s1.url, task.task_id)
        report = _result(f"{s2.url}/tasks/{task.second_task_id}/result")
        seconds["handover"] = time.perf_counter() - start
    by_index = np.empty(users, dtype=np.int64)
    by_index[index] = codes
    survivors = sorted(c.user for c, p in zip(clients, plan) if p == 0)
    return {"task": task, "report": report, "survivor_codes": by_index[survivors], "seconds": seconds, "cpu": cpu,
            "user_cpu": user_cpu,
            "bytes": {"http_sent": sum(c.sent for c in clients), "http_received": sum(c.received for c in clients),
                      "sealed_sent": sum(c.sealed_sent for c in clients)}, "clients": clients, "survivors": survivors,
            "liar": clients[lying] if liar is not None else None,
            "parties": tss_parties_traffic(parameters, clients, plan)}


def tss_parties_traffic(parameters, clients: list[TSSClient], plan: np.ndarray) -> list[dict]:
    """TSS's parties beside Table I's derived rows: the users who took part to the end as reporters and as helpers
    (per user), S1 and S2. Expected: E[sum_j m_j m'_j] shares and E[sum_j m'_j] helper sums
    (:class:`~privagg.protocols.tss_parameters.TSSParameters`), no dropouts; a reporter keeps his own share where
    he helps (a fraction 1/n of them). The helpers S1 names are its published election (the inbox), not a
    message, and are not counted."""
    n, N, a = parameters.n_users, parameters.domain_size, parameters.report_fraction
    survivors = [c for c, r in zip(clients, plan) if r == 0]
    shares, helpers = parameters.expected_shares, parameters.expected_helpers
    wire, share = shares * (1 - 1 / n), len(survivors) / n  # the survivors' share of the n users' traffic
    sent, received = traffic(clients, "sent"), traffic(clients, "received")
    to_s2 = ("helper sums", "recovery")
    relayed = traffic(clients, "sent", to_s2)
    cost = f"alpha^2 nN = {a * a * n * N:,.0f}"
    return [
        party_row("user as reporter", len(survivors), traffic(survivors, "sent", ("report set", "shares")), {},
                  {"report set": len(survivors) * parameters.report_size, "shares": wire * share}, {},
                  f"alpha N = {parameters.report_size} indices to S1; sum_(j in A_i) m_j ~ {cost} elements (derived); "
                  "his items' helpers come in round 2's inbox"),
        party_row("user as helper", len(survivors), traffic(survivors, "sent", to_s2),
                  traffic(survivors, "received", ("shares",)),
                  {"helper sums": helpers * share}, {"shares": wire * share},
                  f"receives ~ {cost} field elements; sends ~ alpha N = {a * N:,.0f} to S2 (derived)"),
        party_row("S1", 1, {"shares": received.get("shares", 0), **relayed}, sent,
                  {"shares": wire, "helper sums": helpers},
                  {"report set": n * parameters.report_size, "shares": wire, "helper sums": helpers},
                  f"receives n alpha N = {n * parameters.report_size:,} indices; publishes ~ alpha nN = "
                  f"{a * n * N:,.0f} helpers (derived); here each reporter's inbox names his items' helpers, and S1 "
                  "relays"),
        party_row("S2", 1, {}, relayed, {}, {"helper sums": helpers},
                  f"receives ~ alpha nN = {a * n * N:,.0f} elements (derived)"),
    ]


def _result(url: str) -> dict:
    """S2's release at ``url``, once released (it is asked again while S2 answers 409 not_released, for 60 s); a
    task S2 failed is :class:`RoundFailed` with its reason, at once."""
    from ...protocols.roles import RoundFailed

    deadline = time.monotonic() + 60
    while True:
        try:
            with urllib.request.urlopen(url, timeout=60) as answer:
                return json.loads(answer.read())
        except urllib.error.HTTPError as err:
            if err.code != 409 or time.monotonic() > deadline:
                raise
            try:
                refusal = json.loads(err.read())
            except ValueError:
                refusal = {}
            if isinstance(refusal, dict) and refusal.get("error") == "failed":
                raise RoundFailed(f"the task failed at S2, nothing was released: {refusal.get('detail')}") from None
        time.sleep(0.1)
