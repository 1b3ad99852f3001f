"""Collector replicas: several collector processes serve one task behind one PostgreSQL database, agreeing through
the database (row locks, the stored last arrival); SQLite stays one process and says so; a database of an older
schema is refused, naming the command that upgrades it."""

import subprocess
import sys
import time
from unittest import mock

import numpy as np
import sqlalchemy as sa

from privagg.protocols.registry import calibrate
from privagg.service import storage
from privagg.service.shuffle.collector import Collector
from privagg.service.local import ServiceProcess
from service_deployment import database_at, deploy, users
from service_runs import replica_run


def test_the_quiet_period_is_the_databases_not_one_processs(databases):
    """Collector B never stored a report of the task, yet it waits out the quiet period of A's last one."""
    params = calibrate("grr", epsilon=1.0, n_users=50, domain_size=4)  # a local task: batches after a quiet period
    d = deploy(databases, params, min_batch_size=10)
    b = Collector(storage.connect(databases["collector"], "collector"), d.collector.fetch_task, d.collector.forward,
                  quiet=1.5)
    reports, _ = users(d, np.arange(20) % 4, np.random.default_rng(1))
    d.store(reports)
    assert b.form_batches() == 0  # A's reports arrived just now
    time.sleep(1.6)
    assert b.form_batches() == 1 and d.collector.form_batches() == 0  # formed once, by B
    b.engine.dispose()


def waiting(d) -> tuple[int, int]:
    """The task's count of waiting reports as kept, and as counted from its reports."""
    with d.collector.engine.connect() as c:
        kept = c.execute(sa.select(storage.collector_tasks.c.waiting).where(
            storage.collector_tasks.c.task_id == d.task.task_id)).scalar_one()
        counted = c.execute(sa.select(sa.func.count()).select_from(storage.reports).where(
            storage.reports.c.task_id == d.task.task_id, storage.reports.c.batch_id.is_(None))).scalar_one()
    return kept, counted


def test_the_waiting_count_the_batch_loop_reads_is_the_reports_in_no_batch(databases):
    """Kept by the writer and by batch formation in their own transactions: refused reports, retries and a
    failed group add nothing, a batch takes its reports off, and a second collector process reads the same."""
    d = deploy(databases, calibrate("grr", epsilon=1.0, n_users=400, domain_size=5), min_batch_size=200)
    d.collector.max_batch_reports = 250
    reports, _ = users(d, np.zeros(320, dtype=int), np.random.default_rng(3))
    d.store(reports[:150])
    assert waiting(d) == (150, 150)
    assert d.post(reports[0]).json() == {"status": "already stored"}  # a retry
    forged = d.post(reports[150], {**reports[150].to_dict(), "token": "not-issued"})
    assert forged.status_code == 403 and waiting(d) == (150, 150)
    with mock.patch.object(storage, "execute_driver", side_effect=sa.exc.OperationalError("x", {}, Exception())):
        assert d.post(reports[150]).status_code == 503  # the group's transaction failed: nothing of it kept
    assert waiting(d) == (150, 150)
    d.store(reports[150:320])
    assert waiting(d) == (320, 320)
    assert d.collector.release_batches() == 1 and waiting(d) == (70, 70)  # the cap's 250 taken
    other = Collector(storage.connect(databases["collector"], "collector"), d.collector.fetch_task,
                      d.collector.forward)
    assert other.counts(d.task.task_id)["reports_waiting"] == 70
    other.engine.dispose()


def test_an_older_collector_database_gets_its_waiting_counts_when_upgraded(tmp_path):
    """Migration c0005 counts each task's waiting reports once, for the batch loop to keep from then on."""
    url = f"sqlite:///{tmp_path}/collector.db"
    engine = database_at(url, "collector", "c0004")
    with engine.begin() as c:
        for task, count, batched in (("a" * 32, 3, 2), ("b" * 32, 0, 1), ("c" * 32, 5, 0)):
            c.exec_driver_sql("INSERT INTO collector_tasks (task_id, task) VALUES (?, '{}')", (task,))
            for i in range(count + batched):
                c.exec_driver_sql("INSERT INTO reports (task_id, report_id, ciphertexts, batch_id) VALUES "
                                  "(?, ?, x'00', ?)", (task, f"{i:032x}", "f" * 32 if i >= count else None))
    engine.dispose()
    engine = storage.connect(url, "collector", upgrade=True)  # upgraded to this release's schema
    with engine.connect() as c:
        kept = dict(c.execute(sa.select(storage.collector_tasks.c.task_id, storage.collector_tasks.c.waiting)).all())
    assert kept == {"a" * 32: 3, "b" * 32: 0, "c" * 32: 5}
    engine.dispose()


def test_a_database_of_an_older_schema_is_refused_naming_the_upgrade(tmp_path):
    url = f"sqlite:///{tmp_path}/collector.db"
    database_at(url, "collector", "c0003").dispose()
    out = subprocess.run([sys.executable, "-m", "privagg", "serve", "collector", "--db", url, "--analyzer",
                          "http://127.0.0.1:9", "--port", "0"], capture_output=True, text=True, timeout=120)
    assert out.returncode == 2 and "version c0003" in out.stderr
    assert "run `privagg db upgrade --role collector --db URL` once" in out.stderr
    upgraded = subprocess.run([sys.executable, "-m", "privagg", "db", "upgrade", "--role", "collector", "--db", url],
                              capture_output=True, text=True, timeout=120)
    assert upgraded.returncode == 0, upgraded.stderr
    storage.connect(url, "collector").dispose()  # now at this release's schema


def test_a_second_collector_process_on_one_sqlite_file_is_refused(tmp_path):
    db = f"sqlite:///{tmp_path}/collector.db"
    with ServiceProcess("collector", db, tmp_path / "first.log", None, ("--analyzer", "http://127.0.0.1:9")):
        out = subprocess.run([sys.executable, "-m", "privagg", "serve", "collector", "--db", db, "--analyzer",
                              "http://127.0.0.1:9", "--port", "0"], capture_output=True, text=True, timeout=120)
    assert out.returncode == 2 and "no other collector process serves (SQLite is for one process" in out.stderr


def test_three_replicas_on_postgresql_lose_nothing_when_one_is_killed(postgres_databases, tmp_path):
    """Clients spread over three collector processes; one is killed with SIGKILL mid-collection and its clients
    send the same reports to another; a surviving replica releases the one batch of the shuffle task, holding
    every user's report once (make bench part 10 runs the same with 10,000 clients)."""
    run = replica_run({"analyzer": f"sqlite:///{tmp_path}/analyzer.db", "collector": postgres_databases()},
                      tmp_path / "logs", clients=600, concurrency=24)
    assert run["killed_after"] == 200 and run["failovers"] > 0 and run["batches"] == 1
    assert run["acknowledged"] == run["counted_reports"] == 600 and run["refused"] == run["failed"] == 0
    assert run["counted_messages"] == run["acknowledged_messages"] and run["dropped"] == 0
