"""State at rest (storage.py): file modes, start-up errors, secure delete and scrubbing, read transactions, timeouts.

Checked: a new SQLite database and its -wal and -shm files are 0600 whatever the umask; an analyzer database
open to group or others is refused, a collector database readable by others is a warning and one writable
by others a refusal; a missing folder, a read-only file or folder and an unreachable PostgreSQL server are
each one ParameterError; after a batch is released and scrubbed (or the collector restarts after a crash
in between) no byte of a released ciphertext is left in collector.db, -wal or -shm; the WAL is cut back
after checkpoints; a read transaction never waits for SQLite's write lock; on PostgreSQL, a write behind a
locked table fails after lock_timeout, reads are READ ONLY, and the vacuum runs. Tests run as root, so
permissions are checked by their mode bits.
"""

import base64
import json
import logging
import os
import shutil
import stat
import time
from pathlib import Path

import numpy as np
import pytest
import sqlalchemy as sa

import privagg.service.shuffle.collector as collector_module
import privagg.service.two_servers.servers  # noqa: F401  (defines the s1 and s2 tables)
from privagg.errors import ParameterError
from privagg.protocols.registry import calibrate
from privagg.service import storage
from privagg.service.shuffle.client import Client
from privagg.service.shuffle.collector import Collector
from privagg.service.local import free_port
from privagg.service.tasks import create_task, seal_messages

USERS = 100


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def files(db: Path) -> list[Path]:
    """The database file and those of its -wal and -shm files that exist."""
    return [p for p in (db, Path(f"{db}-wal"), Path(f"{db}-shm")) if p.exists()]


def found(fragments: set[bytes], paths: list[Path]) -> set[bytes]:
    """The fragments present anywhere in the raw bytes of ``paths``."""
    contents = [p.read_bytes() for p in paths]
    return {f for f in fragments if any(f in data for data in contents)}


def fragments_of(sealed: list[bytes]) -> set[bytes]:
    """16-byte pieces of each sealed message (its encapsulated key's two halves, and its tag): a remnant of any
    message shows."""
    return {piece for m in sealed for piece in (m[:16], m[16:32], m[-16:])}


def collector_with_reports(url: str, rng: np.random.Generator) -> tuple[Collector, list[bytes], list]:
    """A collector (the analyzer's part is only the task's JSON and a delivery that records) holding USERS
    reports of a local task whose minimum is USERS; the sealed messages it stored."""
    task, _key = create_task(calibrate("grr", epsilon=1.0, n_users=USERS, domain_size=5))
    delivered: list = []
    collector = Collector(storage.connect(url, "collector"), lambda _id: task.to_json(),
                          lambda *batch: delivered.append(batch), quiet=0.0)
    client, sealed = Client(task), []
    for token in collector.issue_tokens(task.task_id, USERS):
        messages = seal_messages(task, client.randomizer.randomize([int(rng.integers(5))], rng))
        sealed += messages
        body = {"report_id": f"{rng.integers(2**63):016x}{rng.integers(2**63):016x}", "token": token,
                "key_id": task.key_id, "ciphertexts": [base64.b64encode(m).decode() for m in messages]}
        assert collector.accept(task.task_id, json.dumps(body).encode()) == "stored"
    return collector, sealed, delivered


# ---- file modes -----------------------------------------------------------------------------------------
@pytest.mark.parametrize("umask", [0o022, 0o000])
@pytest.mark.parametrize("role", storage.ROLES)
def test_a_new_sqlite_database_and_its_wal_and_shm_are_owner_only(tmp_path, role, umask):
    before = os.umask(umask)
    try:
        engine = storage.connect(f"sqlite:///{tmp_path}/{role}.db", role)
        table = storage.metadata[role].tables[f"{role}_tasks"]
        required = {c.name: {"task_id": "0" * 32, "task": "{}"}.get(c.name, b"k" if isinstance(
            c.type, sa.LargeBinary) else 1 if isinstance(c.type, (sa.Integer, sa.Float)) else "x")
            for c in table.columns if not c.nullable and c.server_default is None}
        with engine.begin() as c:  # a write: the WAL and its index exist and hold frames
            c.execute(sa.insert(table).values(**required))
        made = files(tmp_path / f"{role}.db")
        assert len(made) == 3 and {p.name: mode(p) for p in made} == {p.name: 0o600 for p in made}
        engine.dispose()
    finally:
        os.umask(before)


def test_sqlite_gives_its_rollback_journal_the_database_files_mode(tmp_path):
    """The -journal (rollback mode, not WAL: a journal_mode switch) is created with the database's mode too."""
    import sqlite3

    before = os.umask(0o022)
    try:
        os.close(os.open(tmp_path / "x.db", os.O_CREAT | os.O_WRONLY, 0o600))
        plain = sqlite3.connect(tmp_path / "x.db", isolation_level=None)
        plain.execute("PRAGMA journal_mode=DELETE")
        plain.execute("CREATE TABLE t (x)")
        plain.execute("BEGIN IMMEDIATE")
        plain.execute("INSERT INTO t VALUES (1)")
        assert mode(tmp_path / "x.db-journal") == 0o600
        plain.execute("COMMIT")
        plain.close()
    finally:
        os.umask(before)


def test_an_analyzer_database_open_to_others_is_refused(tmp_path):
    db = tmp_path / "analyzer.db"
    storage.connect(f"sqlite:///{db}", "analyzer").dispose()
    for opened in (0o640, 0o604, 0o620):
        db.chmod(opened)
        with pytest.raises(ParameterError) as err:
            storage.connect(f"sqlite:///{db}", "analyzer")
        assert f"{db} is mode {opened:04o}" in str(err.value) and f"chmod 600 {db})" in str(err.value)
        assert err.value.field == "db"
    db.chmod(0o600)
    wal = Path(f"{db}-wal")  # left by an earlier run (a crash) with an open mode: the key store's too
    wal.touch()
    wal.chmod(0o644)
    with pytest.raises(ParameterError, match=f"{wal} is mode 0644; fix with chmod 600 {wal}"):
        storage.connect(f"sqlite:///{db}", "analyzer")
    wal.chmod(0o600)
    storage.connect(f"sqlite:///{db}", "analyzer").dispose()  # the fix as told


def test_a_collector_database_readable_by_others_is_a_warning_and_writable_a_refusal(tmp_path, caplog):
    db = tmp_path / "collector.db"
    storage.connect(f"sqlite:///{db}", "collector").dispose()
    db.chmod(0o644)  # what collectors made before this check (umask 022): they keep running, warned
    with caplog.at_level(logging.WARNING, logger="privagg.storage"):
        storage.connect(f"sqlite:///{db}", "collector").dispose()
    warned = [r for r in caplog.records if r.getMessage() == "database readable by group or others"]
    assert len(warned) == 1 and warned[0].fields == {"files": f"{db} is mode 0644", "fix": f"chmod 600 {db}"}
    db.chmod(0o664)
    with pytest.raises(ParameterError, match=f"only its owner can write .*{db} is mode 0664; fix with chmod 600"):
        storage.connect(f"sqlite:///{db}", "collector")


# ---- one clear error at start -------------------------------------------------------------------------
def refused(url: str) -> str:
    """connect()'s error, checked to be one ParameterError with no driver exception chained to it."""
    with pytest.raises(ParameterError) as err:
        storage.connect(url, "collector")
    assert err.value.field == "db" and err.value.__cause__ is None
    assert err.value.__context__ is None or err.value.__suppress_context__  # no SQLAlchemy traceback shown
    return str(err.value)


def test_a_missing_folder_is_one_error(tmp_path):
    message = refused(f"sqlite:///{tmp_path}/absent/collector.db")
    assert message == (f"db must be a SQLite file in an existing folder: {tmp_path}/absent does not exist, got "
                       f"sqlite:///{tmp_path}/absent/collector.db")
    assert not (tmp_path / "absent").exists()


def test_a_read_only_file_or_folder_is_one_error(tmp_path):
    db = tmp_path / "collector.db"
    storage.connect(f"sqlite:///{db}", "collector").dispose()
    db.chmod(0o400)
    assert f"{db} is not writable (mode 0400" in refused(f"sqlite:///{db}")
    db.chmod(0o600)
    tmp_path.chmod(0o500)  # SQLite could not create the -wal and -shm files beside it
    try:
        assert f"{tmp_path} is not writable (mode 0500" in refused(f"sqlite:///{db}")
    finally:
        tmp_path.chmod(0o700)
    (tmp_path / "folder.db").mkdir()
    assert f"{tmp_path}/folder.db is not a regular file" in refused(f"sqlite:///{tmp_path}/folder.db")
    (tmp_path / "garbage.db").write_bytes(b"not a database, " * 100)
    (tmp_path / "garbage.db").chmod(0o600)
    assert "a SQLite database the service can open and write (" in refused(f"sqlite:///{tmp_path}/garbage.db")


def test_an_unreachable_postgresql_server_is_one_error():
    port = free_port()  # nothing listens there
    started = time.monotonic()
    message = refused(f"postgresql+psycopg://privagg:secret-password@127.0.0.1:{port}/privagg")
    assert time.monotonic() - started < 5
    assert f"a PostgreSQL server that accepts the connection (127.0.0.1:{port}: Connection refused)" in message
    assert "secret-password" not in message and "***" in message


# ---- released ciphertexts leave no trace (SQLite) ---------------------------------------------------------
def test_released_ciphertexts_are_not_left_in_the_database_files(tmp_path):
    db = tmp_path / "collector.db"
    collector, sealed, delivered = collector_with_reports(f"sqlite:///{db}", np.random.default_rng(1))
    pieces = fragments_of(sealed)
    assert found(pieces, files(db)) == pieces  # while held they are in the files (the WAL): the test can see them
    assert collector.release_batches() == 1 and len(delivered) == 1
    storage.scrub(collector.engine)
    assert len(files(db)) == 3 and Path(f"{db}-wal").stat().st_size == 0  # the collector still runs
    assert found(pieces, files(db)) == set()
    with collector.engine.connect() as c:
        assert c.execute(sa.select(sa.func.count()).select_from(storage.reports)).scalar_one() == 0
    collector.engine.dispose()
    assert found(pieces, files(db)) == set()


def test_a_crash_between_release_and_scrub_leaves_nothing_once_restarted(tmp_path, monkeypatch):
    db, crashed = tmp_path / "collector.db", tmp_path / "crashed"
    collector, sealed, _ = collector_with_reports(f"sqlite:///{db}", np.random.default_rng(2))
    pieces = fragments_of(sealed)

    def crash(_engine):  # the files as a kill -9 right after the release transaction leaves them
        if not crashed.exists():
            crashed.mkdir()
            for p in files(db):
                shutil.copy2(p, crashed / p.name)

    monkeypatch.setattr(storage, "scrub", crash)  # wherever the collector calls it from
    if hasattr(collector_module, "scrub"):
        monkeypatch.setattr(collector_module, "scrub", crash)
    assert collector.release_batches() == 1
    crash(collector.engine)
    collector.engine.dispose()
    monkeypatch.undo()
    copy = crashed / db.name
    assert len(files(copy)) == 3 and found(pieces, files(copy))  # the WAL still held released ciphertexts
    engine = storage.connect(f"sqlite:///{copy}", "collector")  # the restart: recovery, then a scrub
    assert Path(f"{copy}-wal").stat().st_size == 0 and found(pieces, files(copy)) == set()
    with engine.connect() as c:
        assert c.execute(sa.select(sa.func.count()).select_from(storage.reports)).scalar_one() == 0
    engine.dispose()


def test_secure_delete_overwrites_deleted_rows_in_the_database_file(tmp_path):
    """Rows already checkpointed into the database file (inline and on overflow pages), then deleted: with
    secure_delete (connect) none is left after a scrub; a plain SQLite connection (secure_delete off) keeps them."""
    rng = np.random.default_rng(3)
    blobs = [rng.bytes(200) for _ in range(50)] + [rng.bytes(6000) for _ in range(10)]
    pieces = {b[i:i + 16] for b in blobs for i in (0, len(b) // 2, len(b) - 16)}
    url = f"sqlite:///{tmp_path}/collector.db"
    engine = storage.connect(url, "collector")
    rows = [{"task_id": "0" * 32, "report_id": f"{i:032x}", "ciphertexts": b} for i, b in enumerate(blobs)]
    with engine.begin() as c:
        c.execute(sa.insert(storage.reports), rows)
    storage.scrub(engine)  # now in collector.db itself
    assert found(pieces, [tmp_path / "collector.db"]) == pieces
    with engine.begin() as c:
        c.execute(sa.delete(storage.reports))
    storage.scrub(engine)
    assert found(pieces, files(tmp_path / "collector.db")) == set()
    engine.dispose()

    import sqlite3  # the same without secure_delete: the deleted rows' bytes stay in the free space
    plain = sqlite3.connect(tmp_path / "plain.db", isolation_level=None)
    plain.execute("PRAGMA journal_mode=WAL")
    plain.execute("PRAGMA secure_delete=OFF")
    plain.execute("CREATE TABLE reports (report_id TEXT PRIMARY KEY, ciphertexts BLOB)")
    plain.executemany("INSERT INTO reports VALUES (?, ?)", [(r["report_id"], r["ciphertexts"]) for r in rows])
    plain.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    plain.execute("DELETE FROM reports")
    plain.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    assert found(pieces, [tmp_path / "plain.db"])
    plain.close()


def test_the_wal_is_cut_back_after_a_checkpoint(tmp_path):
    engine = storage.connect(f"sqlite:///{tmp_path}/collector.db", "collector")
    wal = tmp_path / "collector.db-wal"
    with engine.begin() as c:  # one large transaction: the WAL grows past the limit
        c.execute(sa.insert(storage.reports), [{"task_id": "0" * 32, "report_id": f"{i:032x}",
                                                "ciphertexts": os.urandom(3000)} for i in range(3000)])
    assert wal.stat().st_size > 2 * storage.WAL_SIZE_LIMIT
    for i in range(2):  # the automatic checkpoint ran at that commit; the next commits restart the WAL
        with engine.begin() as c:
            c.execute(sa.insert(storage.batches).values(batch_id=f"{i:032x}", task_id="0" * 32, reports=0,
                                                        messages=0, acknowledged=False))
    assert wal.stat().st_size <= storage.WAL_SIZE_LIMIT
    engine.dispose()


def test_a_scrub_that_a_reader_blocks_is_a_warning(tmp_path, caplog):
    engine = storage.connect(f"sqlite:///{tmp_path}/collector.db", "collector", lock_timeout=0.2)
    with engine.begin() as c:
        c.execute(sa.insert(storage.batches).values(batch_id="0" * 32, task_id="0" * 32, reports=0, messages=0,
                                                    acknowledged=False))
    with storage.reading(engine) as reader, caplog.at_level(logging.WARNING, logger="privagg.storage"):
        reader.execute(sa.select(storage.batches)).all()  # holds its snapshot: the WAL cannot be reset
        storage.scrub(engine)
    assert [r.fields for r in caplog.records if r.getMessage() == "scrub incomplete"] == [{"error": "busy"}]
    storage.scrub(engine)
    assert (tmp_path / "collector.db-wal").stat().st_size == 0
    engine.dispose()


# ---- reads and the write lock (SQLite) ----------------------------------------------------------------------
def test_a_read_does_not_wait_for_the_sqlite_write_lock(tmp_path):
    url = f"sqlite:///{tmp_path}/collector.db"
    engine = storage.connect(url, "collector")  # busy_timeout 20 s: a read that waited would show
    impatient = storage.connect(url, "collector", lock_timeout=0.3)
    with engine.connect() as writer:
        writer.begin()  # BEGIN IMMEDIATE: the write lock, held
        writer.execute(sa.insert(storage.batches).values(batch_id="0" * 32, task_id="0" * 32, reports=0,
                                                         messages=0, acknowledged=False))
        started = time.monotonic()
        with storage.reading(engine) as c:
            assert c.execute(sa.select(sa.func.count()).select_from(storage.batches)).scalar_one() == 0  # committed
        assert time.monotonic() - started < 0.5
        started = time.monotonic()
        with pytest.raises(sa.exc.OperationalError, match="database is locked"), impatient.begin():
            pass  # a write transaction waits for the lock: busy_timeout = lock_timeout, then fails
        assert 0.25 < time.monotonic() - started < 3
        writer.commit()
    with storage.reading(impatient) as c:
        assert c.execute(sa.select(sa.func.count()).select_from(storage.batches)).scalar_one() == 1
    engine.dispose()
    impatient.dispose()


# ---- PostgreSQL -----------------------------------------------------------------------------------------------
def test_postgresql_writes_fail_after_lock_timeout_and_statements_after_statement_timeout(postgres_databases,
                                                                                         caplog):
    import psycopg

    url = postgres_databases()
    engine = storage.connect(url, "collector", lock_timeout=0.5, statement_timeout=1.0)
    with storage.reading(engine) as c:
        assert c.exec_driver_sql("SHOW lock_timeout").scalar() == "500ms"
        assert c.exec_driver_sql("SHOW statement_timeout").scalar() == "1s"
    parsed = sa.engine.make_url(url)
    with psycopg.connect(host=parsed.host, port=parsed.port, user=parsed.username, dbname=parsed.database) as holder:
        holder.execute("LOCK TABLE reports IN ACCESS EXCLUSIVE MODE")  # held until the block's end
        started = time.monotonic()
        with pytest.raises(sa.exc.OperationalError, match="lock timeout"), engine.begin() as c:
            c.execute(sa.insert(storage.reports).values(task_id="0" * 32, report_id="0" * 32, ciphertexts=b"x"))
        assert time.monotonic() - started < 3
        with caplog.at_level(logging.WARNING, logger="privagg.storage"):
            storage.scrub(engine)  # the vacuum waits for the same lock: a warning, not an error
        assert [r.fields for r in caplog.records if r.getMessage() == "scrub incomplete"] == [
            {"error": "LockNotAvailable"}]
    started = time.monotonic()
    with pytest.raises(sa.exc.OperationalError, match="statement timeout"), engine.connect() as c:
        c.exec_driver_sql("SELECT pg_sleep(10)")
    assert time.monotonic() - started < 5
    engine.dispose()


def test_postgresql_reads_are_read_only_and_writes_are_not(postgres_databases):
    engine = storage.connect(postgres_databases(), "collector")
    with storage.reading(engine) as c:
        assert c.exec_driver_sql("SHOW transaction_read_only").scalar() == "on"
        with pytest.raises(sa.exc.InternalError, match="read-only transaction"):
            c.execute(sa.insert(storage.batches).values(batch_id="0" * 32, task_id="0" * 32, reports=0, messages=0,
                                                        acknowledged=False))
    with engine.begin() as c:  # the pooled connection is not left read-only
        assert c.exec_driver_sql("SHOW transaction_read_only").scalar() == "off"
    engine.dispose()


def _count_batches(c) -> int:
    return c.execute(sa.select(sa.func.count()).select_from(storage.batches)).scalar_one()


@pytest.mark.parametrize("backend", ["sqlite", "postgresql"])
def test_a_read_sees_one_snapshot_whatever_commits_meanwhile(backend, tmp_path, request):
    """The collector's status counts reports waiting and batches formed in one read; were each query its own
    snapshot (PostgreSQL's READ COMMITTED), a batch formed between them was counted in neither, and a
    deployment waiting for its release read the result before it existed (409 not_released)."""
    url = f"sqlite:///{tmp_path}/collector.db" if backend == "sqlite" else request.getfixturevalue(
        "postgres_databases")()
    engine = storage.connect(url, "collector")
    with storage.reading(engine) as c:
        assert _count_batches(c) == 0
        with engine.begin() as writer:  # another transaction commits while the read is open
            writer.execute(sa.insert(storage.batches).values(batch_id="0" * 32, task_id="0" * 32, reports=0,
                                                             messages=0, acknowledged=False))
        assert _count_batches(c) == 0
    with storage.reading(engine) as c:
        assert _count_batches(c) == 1
    engine.dispose()


def test_postgresql_scrub_vacuums_the_released_reports(postgres_databases):
    collector, _, delivered = collector_with_reports(postgres_databases(), np.random.default_rng(4))
    assert collector.release_batches() == 1 and len(delivered) == 1
    storage.scrub(collector.engine)  # VACUUM on an autocommit connection: no error
    deadline = time.monotonic() + 5
    while True:  # the vacuum is counted in the statistics
        with collector.engine.connect() as c:
            if c.exec_driver_sql("SELECT vacuum_count FROM pg_stat_user_tables WHERE relname = 'reports'").scalar():
                break
        assert time.monotonic() < deadline, "VACUUM of reports not seen in pg_stat_user_tables"
        time.sleep(0.1)
    collector.engine.dispose()
