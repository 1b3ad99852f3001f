"""The services' leg of ``privagg demo-service dpds|dpdg`` (:func:`privagg.demos.run_sharing_demo` adds the data
and the simulation beside it), of the sharing server's fault tests and of ``make bench`` part 12.

:class:`SharingDeployment` starts ``privagg serve sharing`` as a child process on a free loopback port over a
SQLite file (or the database URL given), creates tasks and tokens in its database with the organisation's
signatures of the task and the roster (:class:`~privagg.service.organisation.Organisation`, in this process), and
can kill the server with SIGKILL and start it again on the same port and database. :func:`run_sharing_services` enrolls one
:class:`~privagg.service.sharing.client.SharingClient` per user (run by worker processes at large n:
:class:`~privagg.service.round_demo.Devices`), drops a fraction of them out, spread over rounds 1-5
(:func:`~privagg.service.round_demo.dropout_plan`: the demo's own seeded choice, not privacy randomness), runs
the rounds to the release and measures each round's wall time, the bytes the users sent and received, and each
kind of party's messages beside Table I (:func:`party_row`; the servers' rows are the users' messages seen from the
other end).
"""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np

from ...protocols.sharing_parties import task_graph, threshold
from ..calls import SubmitError
from ..local import ServiceProcess, fresh_sqlite
from ..organisation import Organisation
from ..round_demo import Devices, check_drop_fraction, check_not_failed, close_round, dropout_plan, min_survivors_for, party_row, traffic
from ..round_tasks import SharingTask
from ..storage import connect
from .client import SharingClient
from .server import SharingService


class SharingDeployment(ServiceProcess):
    """The sharing server as a child process (:class:`ServiceProcess`)."""

    def __init__(self, db: str, log: Path, env: dict[str, str] | None = None) -> None:
        super().__init__("sharing", db, log, env)

    def service(self) -> SharingService:
        """The server's logic over its database, in this process (task creation, tokens)."""
        return SharingService(connect(self.db, "sharing"))

    def organised(self, organisation: Organisation, parameters, round_seconds: float, min_survivors: int,
                  users: int) -> tuple[SharingTask, list[str], object]:
        """A new task signed by ``organisation``, ``users`` tokens, and the step that signs its roster once they
        enrolled (:meth:`Organisation.sign_roster`: the users it left out)."""
        service = self.service()
        try:
            task = service.create_task(parameters, round_seconds, min_survivors)
            organisation.sign_task(service, task)
            tokens = service.issue_tokens(task.task_id, users)
        finally:
            service.engine.dispose()

        def sign_roster() -> dict[int, str]:
            service = self.service()
            try:
                return organisation.sign_roster(service, task.task_id, tokens)[1]
            finally:
                service.engine.dispose()

        return task, tokens, sign_roster


def run_rounds(url: str, task_id: str, codes: np.ndarray, tokens: list[str], plan: np.ndarray,
               organisation_key: bytes, sign_roster, progress=print, between=None,
               liar: type | None = None, processes: int | None = None) -> dict:
    """Every user through the task at ``url`` (signed by the organisation whose key his device pins,
    ``organisation_key``): enroll, then the roster signed (``sign_roster()``), then each round the protocol
    declares, skipping each user at his planned round of dropping out (``plan``: its number, 0 for none);
    ``between(round)`` runs after each round's messages are sent (the fault tests kill the server there);
    ``liar``: the client class of the first user who stays (``privagg demo-service --dishonest``,
    :mod:`privagg.service.sharing.dishonest`); ``processes``: how many run the users' devices (:class:`Devices`).
    Once the users who will answer a round have, the round is closed early (the operator's route), not at its
    deadline. The rounds' wall times and the users' CPU in each (said in a line as each round closes), each user's
    CPU in his calls, the users' bytes, who survived (sent the round the release is over), the users' clients and
    the liar's."""
    lying = int(np.flatnonzero(plan == 0)[0]) if liar is not None else -1
    observer = SharingClient.fetch(url, task_id, organisation_key=organisation_key)  # the task's state, as it goes
    protocol = observer.protocol
    seconds: dict[str, float] = {}
    cpu: dict[str, float] = {}  # the users' CPU (user and system) in each round, in every process (bench part 16)

    def wait_past(state: str) -> None:
        while observer.state() == state:
            time.sleep(0.05)

    with Devices([liar if i == lying else SharingClient for i in range(len(codes))], url, task_id, organisation_key,
                 processes) as users:
        start = time.perf_counter()
        index = users.call("enroll", ((i, (token,)) for i, token in enumerate(tokens)))
        left_out = sign_roster()
        if left_out:
            progress(f"the organisation left out users {sorted(left_out)} (round-1 dropouts): {left_out}")
        seconds["enroll"] = time.perf_counter() - start
        for number, round_ in enumerate(protocol.rounds, 1):
            if observer.state() != f"round{number}":  # a round that expects nobody is skipped (DPDS's exclusion)
                continue
            start, used = time.perf_counter(), users.cpu()
            active = [i for i in range(len(codes)) if plan[i] == 0 or plan[i] > number]
            progress(f"round {number} ({round_.name}): {len(active)} users")
            try:
                users.call("send", ((i, (round_.name, int(codes[i]) if round_.value else None)) for i in active))
            except SubmitError:  # the server failed the task meanwhile (a round closed short): say why, in one line
                check_not_failed(url, task_id)
                raise
            if between is not None:
                between(number)
            close_round(f"{url}/tasks/{task_id}/close-round/{number}", CLOSE_SECONDS)
            wait_past(f"round{number}")
            seconds[f"round{number}"] = time.perf_counter() - start
            used = cpu[f"round{number}"] = users.cpu() - used
            progress(f"round {number} closed: {seconds[f'round{number}']:.1f} s; the users' CPU ({len(active)} "
                     f"of them) {used:.1f} s, {used / max(len(active), 1) * 1e3:.1f} ms a user")
        clients, user_cpu = users.close()
    last = protocol.number(protocol.release_round)
    survivors = sorted(u.user for u, p in zip(clients, plan) if p == 0 or p > last)  # they sent the release round
    return {"seconds": seconds, "cpu": cpu, "user_cpu": user_cpu, "survivors": survivors, "index": index,
            "liar": clients[lying] if liar else None,
            "user_bytes": {"http_sent": sum(u.sent for u in clients), "http_received": sum(u.received for u in clients),
                           "sealed_sent": sum(u.sealed_sent for u in clients)},
            "state": observer.state(), "clients": clients}


CLOSE_SECONDS = 3600  # the close of the last round releases (outside the lock): at n = 2,000 over a minute


def run_sharing_services(workdir: Path, parameters, codes: np.ndarray, drop_fraction: float = 0.0,
                         round_seconds: float = 300.0, seed: int = 0, rounds: tuple[int, ...] = (1, 2, 3, 4, 5),
                         db: str | None = None, progress=print, liar: type | None = None) -> dict:
    """One user a code of ``codes`` through the sharing server as SDK clients, ``drop_fraction`` of them vanishing
    at one of ``rounds`` (and one who stays running ``liar``'s client, if given): the server's report, the task,
    the survivors' codes (those it excluded left out), the rounds' times, the bytes measured and by the formula,
    and the liar's client."""
    users, drop_fraction = len(codes), check_drop_fraction(drop_fraction)
    db = fresh_sqlite(workdir, "sharing") if db is None else db
    plan = dropout_plan(users, drop_fraction, rounds, seed)
    with SharingDeployment(db, workdir / "logs" / "sharing.log") as dep:
        progress(f"sharing server at {dep.url} (log in {dep.log})")
        organisation = Organisation.generate()
        honest = users - (liar is not None)  # the liar may be excluded: the task goes on without him
        task, tokens, sign_roster = dep.organised(organisation, parameters, round_seconds, max(
            threshold(parameters), min_survivors_for(honest, drop_fraction)), users)
        run = run_rounds(dep.url, task.task_id, codes, tokens, plan, organisation.public_key, sign_roster, progress,
                         liar=liar)
        check_not_failed(dep.url, task.task_id)
        report = run["clients"][0]._call("result")
    by_index = np.empty(users, dtype=np.int64)
    by_index[run["index"]] = codes  # the roster index each user was given, and his code
    left_out = {*report["dropouts"].get("excluded", []), *report["dropouts"].get("inconsistent", [])}
    survivors = [u for u in run["survivors"] if u not in left_out]
    return {"task": task, "report": report, "survivor_codes": by_index[survivors], "liar": run["liar"],
            "seconds": run["seconds"], "bytes": {**run["user_bytes"],
                                                 "sealed_expected": expected_sealed_bytes(task, run["clients"], plan)},
            "parties": sharing_parties_traffic(task, run["clients"], plan)}


def sharing_parties_traffic(task: SharingTask, clients: list[SharingClient], plan: np.ndarray) -> list[dict]:
    """DPDS's or DPDG's parties: the users who stayed to the end and the server, each kind of entry measured beside
    its exact count (:func:`_expected`: from the task's graph and who answered each round), and Table I's DPDS rows
    (DPDG sends the same)."""
    p = task.parameters
    n, N = p.n_users, p.domain_size
    graph = _graph(task, clients, plan)
    answered = np.zeros((6, n), dtype=bool)  # answered[r, u]: user u answered round r (plan: the round he vanishes)
    for client, gone in zip(clients, plan):
        answered[1:, client.user] = (gone == 0) | (gone > np.arange(1, 6))
    stayed = [c for c, r in zip(clients, plan) if r == 0]
    user_sent, user_received, server_received, server_sent = _expected(graph, N, answered, [c.user for c in stayed])
    shares = "n - 1 users" if graph.complete else f"their k = {graph.degree} neighbours"
    user = party_row(
        "user", len(stayed), traffic(stayed, "sent"), traffic(stayed, "received"), user_sent, user_received,
        f"2nN + N = {2 * n * N + N:,} elements sent and received (paper: n shares of N elements each way); here "
        f"the shares are agreed by key, not sent: commitments to their holders' shares, backups of 2 secrets to "
        f"{shares}, a key, N elements, a signature and a revealed share per holder")
    server = party_row(
        "server", 1, traffic(clients, "received"), traffic(clients, "sent"), server_sent, server_received,
        f"none (paper: users share directly; their N each to it: nN = {n * N:,}); here it relays the keys, "
        "commitments, backups and signatures")
    return [user, server]


def _expected(graph, N: int, answered: np.ndarray, stayed: list[int]) -> tuple[dict, dict, dict, dict]:
    """The entries (:func:`~privagg.protocols.sharing_messages.message_entries`) the users in ``stayed`` send and
    receive in all, and the server receives and sends, by kind, when ``answered[r]`` answered round r (U1 round 1,
    U1' round 2, U3 round 4; no one excluded): each user's commitments to his holders' shares, a backup of 2 secrets
    to each neighbour, his key, N elements, his signature and a revealed share per holder in U1'; a commitment pair
    and a backup from each neighbour in U1, the keys of his holders in U1', and the signatures and identity keys of
    U3 within 2 k / 2 places of him (every user's, on the complete graph), and on a graph U1' and U2 as bitmaps in
    rounds 4 and 5 (the complete graph's are lists in the inbox, not messages). On the complete graph these are
    :func:`~privagg.protocols.sharing_messages.expected_traffic`'s counts."""
    kinds = ("commitments", "backup", "pair key", "masked sum", "signature", "revealed shares")
    received_kinds = ("commitment", "backup", "pair key", "signature", "identity key") + (
        () if graph.complete else ("users",))
    totals = {way: dict.fromkeys(kinds if way in ("user sent", "server received") else received_kinds, 0)
              for way in ("user sent", "user received", "server received", "server sent")}
    kept = set(stayed)
    for u in range(graph.n_users):
        holders = np.asarray(graph.holders(u))
        k, near = holders.size - 1, np.asarray(graph.near(u, 2 * graph.half))
        own = {"commitments": k + 1, "backup": 2 * k, "pair key": 1, "masked sum": N, "signature": 1,
               "revealed shares": int(answered[2, holders].sum())}
        theirs = {"commitment": 2 * int(answered[1, holders].sum() - answered[1, u]),
                  "backup": 2 * int(answered[1, holders].sum() - answered[1, u]),
                  "pair key": int(answered[2, holders].sum()), "signature": int(answered[4, near].sum()),
                  "identity key": int(answered[4, near].sum()), "users": 2}  # U1' and U2's bitmaps (a graph's)
        if u in kept:
            for kind in kinds:
                totals["user sent"][kind] += own[kind]
            for kind in received_kinds:
                totals["user received"][kind] += theirs[kind] * (2 if kind == "users" else 1)  # rounds 4 and 5
        for kind, rounds in (("commitments", 1), ("backup", 1), ("pair key", 2), ("masked sum", 3),
                             ("signature", 4), ("revealed shares", 5)):
            totals["server received"][kind] += own[kind] * answered[rounds, u]
        for kind, rounds in (("commitment", 2), ("backup", 2), ("pair key", 3), ("signature", 5),
                             ("identity key", 5)) + ((("users", 4), ("users", 5)) if "users" in received_kinds else ()):
            totals["server sent"][kind] += theirs[kind] * answered[rounds, u]
    return tuple({kind: int(v) for kind, v in totals[way].items()} for way in totals)


def expected_sealed_bytes(task: SharingTask, clients: list[SharingClient], plan: np.ndarray) -> int:
    """What the users who advertised send in sealed backups, by the formula: one to each neighbour (n - 1 on the
    complete graph; :attr:`SharingTask.sealed_size`: the message, HPKE's encapsulation and tag)."""
    graph = _graph(task, clients, plan)
    return sum(len(graph.neighbours(c.user)) for c, gone in zip(clients, plan) if gone != 1) * task.sealed_size


def _graph(task: SharingTask, clients: list[SharingClient], plan: np.ndarray):
    """The task's graph, from the roster a user who stayed to the end fetched (and checked) during the rounds."""
    stayed = next(c for c, gone in zip(clients, plan) if gone == 0)
    return task_graph(task.parameters, stayed.roster().graph_seed)
