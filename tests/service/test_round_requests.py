"""What one user's request costs the round driver (service/rounds.py), whatever n: it reads neither the task's lists
nor the signed roster (O(n) bytes: 1 MB at n = 10^4), and its inbox reads the rows relayed to the user by index, not
the round's n k relayed rows (issue 47: both made the sharing server O(n^2) over a round)."""

import sqlite3

import pytest
import sqlalchemy as sa
from fastapi.testclient import TestClient

from privagg.protocols import sampling_calibration as sc
from privagg.service.sharing.client import SharingClient
from privagg.service.sharing.server import SharingService, create_app
from privagg.service.storage import connect
from service_deployment import organised, route_sdk_to

DOMAIN = 2
ROUNDS = ("advertise", "check", "masked_sum", "consistency", "reveal")


@pytest.fixture(params=["sqlite", "postgresql"])
def dpds(request, tmp_path, monkeypatch):
    """The sharing server in process over SQLite or PostgreSQL, its users' SDKs routed to it; and the database's URL."""
    db = f"sqlite:///{tmp_path}/sharing.db" if request.param == "sqlite" else \
        request.getfixturevalue("postgres_databases")()
    service = SharingService(connect(db, "sharing", create=True))
    http = TestClient(create_app(service, tick=None))
    route_sdk_to(http, monkeypatch)
    yield service, http, db
    http.close()
    service.engine.dispose()


def _statements(engine, seen: list) -> None:
    @sa.event.listens_for(engine, "before_cursor_execute")
    def record(conn, cursor, statement, parameters, context, executemany):
        seen.append((statement.replace('"', ""), parameters))


def _run(dpds, n: int, degree: int | None) -> tuple[list, str]:
    """Every user through a DPDS task of n users (on a neighbour graph of ``degree``; None: complete), his requests'
    statements recorded; the released task's id."""
    service, _, _ = dpds
    p = sc.calibrate_dpds(1.0, 0.05, n, DOMAIN, min_count_fraction=0.3, degree=degree)
    task = service.create_task(p, 60.0, n)
    users = organised(service, task, SharingClient, "http://sharing", n)[0]
    seen: list = []
    _statements(service.engine, seen)
    for name in ROUNDS:
        for user in users:
            user.send(name, int(user.user % DOMAIN) if name == "advertise" else None)
    assert service.state(task.task_id)["state"] == "released"
    return seen, task.task_id


@pytest.mark.parametrize("n, degree", [(6, None), (16, None), (16, 4)])
def test_requests_read_the_tasks_lists_and_roster_once_a_round_not_once_a_request(dpds, n, degree):
    """The published lists and the signed roster are read once per round (the state kept per round), not by every
    request: before, each request read the task's whole row three to four times (over 300 reads at n = 16)."""
    seen, _ = _run(dpds, n, degree)
    heavy = [s for s, _ in seen if s.startswith("SELECT") and ("sharing_tasks.published" in s or
                                                                "sharing_tasks.signed_roster," in s)]
    assert len(heavy) <= 2 * len(ROUNDS) + 4, len(heavy)  # each round's state, its close, the release, the roster


@pytest.mark.parametrize("n, degree", [(16, 4)])
def test_a_running_tasks_row_and_a_users_secret_are_read_once_not_by_every_request(dpds, n, degree):
    """While a round runs, the process keeps the task's status and each user's secret as committed (the round
    driver's ``_now``, the roster's ``authenticated``): the row is read again after each change of round, the
    secret once a user, not by each of the 2 n requests of a round (before: four reads of the row by an answer,
    three by an inbox, and one of the secret by each)."""
    seen, _ = _run(dpds, n, degree)
    status = [s for s, _ in seen if s.startswith("SELECT sharing_tasks.status")]
    secrets_ = [s for s, _ in seen if s.startswith("SELECT sharing_roster.secret_hash")]
    assert len(status) <= 8 * len(ROUNDS), len(status)  # after each change of round: until a store keeps it
    assert len(secrets_) <= n, len(secrets_)
    if dpds[2].startswith("sqlite"):  # no transaction that reads nothing (an inbox with no stored rows to carry)
        empty = [seen[i + 1][0] for i, (s, _) in enumerate(seen[:-1]) if s == "BEGIN" and seen[i + 1][0].startswith(
            "BEGIN")]
        assert not empty, len(empty)


@pytest.mark.parametrize("n, degree", [(16, 4)])
def test_an_inbox_reads_the_rows_relayed_to_its_user_by_index(dpds, n, degree):
    """On SQLite, every statement that reads relayed rows searches them by recipient or sender (an index, the
    primary key), never the round's relayed rows whole (SQLite searched the primary key by task and round for each
    inbox: n k rows, 48 ms an inbox at n = 2,000)."""
    service, _, url = dpds
    if not url.startswith("sqlite"):
        pytest.skip("the query plans are SQLite's")
    seen, _ = _run(dpds, n, degree)
    with sqlite3.connect(url.removeprefix("sqlite:///")) as raw:
        relayed = [(s, p) for s, p in seen if s.startswith("SELECT") and "FROM relayed_messages" in s]
        assert relayed
        for statement, parameters in relayed:
            plan = [row[3] for row in raw.execute("EXPLAIN QUERY PLAN " + statement, parameters)]
            searches = [line for line in plan if "relayed_messages" in line]
            assert searches and all(line.startswith("SEARCH") and ("recipient=" in line or "sender=" in line)
                                    for line in searches), (statement, plan)


def test_an_enrollment_does_not_count_the_roster(dpds):
    """A user's index at enrollment is read from the roster's primary key (its largest + 1), not by counting the
    task's enrolled rows: the count made enrolling n users O(n^2) (57.6 s at n = 10^4 against 6.8 s at 2,000)."""
    service, _, _ = dpds
    n = 6
    p = sc.calibrate_dpds(1.0, 0.05, n, DOMAIN, min_count_fraction=0.3)
    task = service.create_task(p, 60.0, n)
    seen: list = []
    _statements(service.engine, seen)
    users = organised(service, task, SharingClient, "http://sharing", n)[0]
    assert sorted(u.user for u in users) == list(range(n))
    counted = [s for s, _ in seen if "count(" in s.lower() and "from roster" in s.lower()]
    assert counted == []


def test_a_finished_task_leaves_nothing_kept_in_the_server(dpds):
    """The state and coordinator kept per task for its rounds (O(n) each) are let go once the task is released, and
    asking its state again keeps none: a server holding many finished tasks does not grow with them."""
    service, _, _ = dpds
    _, task_id = _run(dpds, 6, None)
    service.state(task_id)
    assert task_id not in service._rounds and task_id not in service._coordinators
