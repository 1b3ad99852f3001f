"""A task stuck by a full disk is visible, on SQLite and PostgreSQL: the collector answers 503 and says it is not
ready, logs the failure once (not once per group of reports: the red team counted 17,038 warnings in 11
minutes), and recovers by itself when space comes back, with every acknowledged report stored once."""

import asyncio
import json
import logging
import secrets
import threading
from concurrent.futures import Future

import numpy as np
import pytest
import sqlalchemy as sa

from privagg.protocols.registry import calibrate
from privagg.service import storage
from privagg.service.web import Refused
from service_deployment import deploy, users


def _fill_the_disk(engine: sa.Engine, task_id: str) -> callable:
    """Make every new report of ``task_id`` fail to store as on a full disk, and return the function that frees
    the space. SQLite: ``max_page_count`` at the pages in use, and filler reports of the task in the room those
    pages have left (until 20 in a row do not fit: a report appends to the table's last leaf, which is then
    full); freeing lifts the cap and deletes the fillers. PostgreSQL: a trigger raising SQLSTATE 53100
    (disk_full) on every insert into ``reports``."""
    if engine.dialect.name == "sqlite":
        with storage.reading(engine) as c:
            limit = [c.exec_driver_sql("PRAGMA page_count").scalar()]
        sa.event.listen(engine, "connect", lambda connection, _record: connection.execute(
            f"PRAGMA max_page_count = {limit[0]}"))
        engine.dispose()  # pooled connections reopen under the cap
        fillers, misses = [], 0
        while misses < 20:
            filler = secrets.token_hex(16)
            try:
                with engine.begin() as c:
                    c.execute(sa.insert(storage.reports).values(task_id=task_id, report_id=filler,
                                                                ciphertexts=secrets.token_bytes(65)))
                fillers.append(filler)
                misses = 0
            except sa.exc.OperationalError as err:
                assert "full" in str(err)
                misses += 1

        def free() -> None:
            limit[0] = 1 << 30
            engine.dispose()
            with engine.begin() as c:
                c.execute(sa.delete(storage.reports).where(storage.reports.c.report_id.in_(fillers)))
        return free
    with engine.begin() as c:
        c.exec_driver_sql("CREATE FUNCTION disk_full() RETURNS trigger AS $$ BEGIN RAISE EXCEPTION 'no space left' "
                          "USING ERRCODE = 'disk_full'; END $$ LANGUAGE plpgsql")
        c.exec_driver_sql("CREATE TRIGGER disk_full BEFORE INSERT ON reports FOR EACH ROW EXECUTE FUNCTION disk_full()")

    def free() -> None:
        with engine.begin() as c:
            c.exec_driver_sql("DROP TRIGGER disk_full ON reports")
    return free


def test_a_full_disk_is_visible_once_and_recovered_from(databases, caplog):
    d = deploy(databases, calibrate("grr", epsilon=1.0, n_users=400, domain_size=5), min_batch_size=100)
    reports, _ = users(d, np.arange(400) % 5, np.random.default_rng(1))
    d.store(reports[:10])
    free = _fill_the_disk(d.collector.engine, d.task.task_id)
    failed = []
    with caplog.at_level(logging.INFO, logger="privagg"):
        for r in reports[10:210]:  # 200 reports, each its own group: every group fails
            with pytest.raises(Refused) as refusal:
                d.collector.accept(r.task_id, json.dumps(r.to_dict()).encode())
            failed.append((refusal.value.status, refusal.value.detail))
        ready = d.C.get("/readyz")
        free()
        assert d.post(reports[10]).status_code == 201  # sent again once there is space: stored
    # a device is told to send again, not which database library failed (the operator's /readyz and log say)
    assert failed == [(503, "the report was not stored (the collector's database is failing); send it again")] * 200
    assert ready.status_code == 503 and "reports cannot be stored" in ready.json()["detail"]
    assert d.C.get("/readyz").status_code == 200
    events = [r.getMessage() for r in caplog.records if r.name == "privagg.collector"]
    assert events.count("reports not stored: writes are failing") == 1 and events.count("reports stored again") == 1
    assert d.stored() == 11


def test_the_writer_outlives_a_report_whose_caller_cancelled_it():
    """A report whose outcome was cancelled before its group committed (its caller gave up on it) must not stop
    the writer thread: the reports after it are still stored and answered."""
    from privagg.service.shuffle.collector_writer import GroupCommit, Pending
    from privagg.service.web import Health

    stored = []

    def store(connection, group):
        stored.extend(p.report_id for p in group)
        return ["stored"] * len(group)

    writer = GroupCommit(sa.create_engine("sqlite://"), store, Health())
    gone = Pending("t", "gone", b"", b"", [], outcome=Future())
    gone.outcome.cancel()
    writer.submit(gone)
    assert writer.submit(Pending("t", "later", b"", b"", [])).result(timeout=10) == "stored"
    assert stored == ["gone", "later"]


def test_the_writer_settles_event_loop_reports_a_group_at_a_time_and_outlives_their_loop():
    """Reports awaited on an event loop are answered there (a cancelled one left alone); a loop that closed
    before its reports' group committed (a server stopping) does not stop the writer either."""
    from privagg.service.shuffle.collector_writer import GroupCommit, Pending
    from privagg.service.web import Health

    hold, stored, counted = threading.Event(), [], []

    def store(connection, group):
        hold.wait(10)
        stored.extend(p.report_id for p in group)
        return [Refused(409, "token_used", "used") if p.report_id == "used" else "stored" for p in group]

    writer = GroupCommit(sa.create_engine("sqlite://"), store, Health(),
                         stored=lambda reports: counted.extend(p.report_id for p in reports))

    async def send(names: list[str], cancelled: str | None = None):
        loop = asyncio.get_running_loop()
        pending = [Pending("t", name, b"", b"", [], outcome=loop.create_future()) for name in names]
        waiting = [asyncio.ensure_future(writer.submit(p)) for p in pending]
        for p, w in zip(pending, waiting):
            if p.report_id == cancelled:
                w.cancel()
        hold.set()
        return await asyncio.gather(*waiting, return_exceptions=True)

    answers = asyncio.run(send(["a", "used", "gone", "b"], cancelled="gone"))
    assert answers[0] == answers[3] == "stored" and isinstance(answers[2], asyncio.CancelledError)
    assert isinstance(answers[1], Refused) and answers[1].reason == "token_used"
    assert counted == ["a", "gone", "b"]  # stored, its caller gone or not: counted once each

    hold.clear()
    orphan = Pending("t", "orphan", b"", b"", [])

    async def leave() -> None:  # the loop closes while its report waits for the writer
        orphan.outcome = asyncio.get_running_loop().create_future()
        writer.submit(orphan)

    asyncio.run(leave())
    hold.set()
    assert writer.submit(Pending("t", "after", b"", b"", [])).result(timeout=10) == "stored"
    assert stored[-2:] == ["orphan", "after"]


def test_stopping_does_not_wait_for_a_batch_round_stuck_on_the_analyzer(monkeypatch):
    """A round of the batch loop that waits on an analyzer which never answers (a partitioned batch's post may
    wait an hour) does not hold the collector's shutdown: stop returns after STOP_WAIT seconds."""
    import threading
    import time

    from privagg.service.shuffle.collector import BatchLoop
    from privagg.service.web import Health

    entered, never = threading.Event(), threading.Event()

    class Stuck:
        health = Health()

        def release_batches(self):
            entered.set()
            never.wait(60)

    monkeypatch.setattr(BatchLoop, "STOP_WAIT", 0.5)
    loop = BatchLoop(Stuck(), 0.01)
    loop.start()
    assert entered.wait(5)
    start = time.perf_counter()
    loop.stop()
    assert time.perf_counter() - start < 2
    never.set()
