"""The collector writer's own pieces (service/shuffle/collector_writer.py): many rows to a statement, and its kept
connection's SQLite settings."""

import secrets

import pytest
import sqlalchemy as sa

from privagg.service import storage
from privagg.service.shuffle.collector_writer import ROWS_PER_INSERT, insert_rows, writer_connection

TASK = 1  # a task number (storage.task_numbers)


def _digests(engine: sa.Engine) -> list[bytes]:
    with storage.reading(engine) as c:
        return list(c.execute(sa.select(storage.encapsulations.c.digest).where(
            storage.encapsulations.c.task == TASK).order_by(storage.encapsulations.c.digest)).scalars())


def test_rows_go_in_whole_statements_of_each_size_and_a_key_already_present_fails_its_statement(databases):
    """300 rows (256 + 16 + 16 + 12 single rows: every statement size) all stored, each once; a second call whose rows
    hold one key already stored raises IntegrityError, and its transaction keeps nothing of it."""
    engine = storage.connect(databases["collector"], "collector")
    statements: list[str] = []
    sa.event.listen(engine, "before_cursor_execute", lambda *args: statements.append(args[2]) if
                    args[2].startswith("INSERT INTO encapsulations") else None)
    rows = [(TASK, secrets.token_bytes(32)) for _ in range(300)]
    with engine.begin() as c:
        insert_rows(c, storage.encapsulations, ("task", "digest"), rows)
    assert _digests(engine) == sorted(d for _, d in rows)
    assert ROWS_PER_INSERT == (256, 16, 1) and len(statements) == 3  # one executemany a size
    again = [(TASK, secrets.token_bytes(32)) for _ in range(20)] + [rows[7]]
    with pytest.raises(sa.exc.IntegrityError), engine.begin() as c:
        insert_rows(c, storage.encapsulations, ("task", "digest"), again)
    assert _digests(engine) == sorted(d for _, d in rows)
    with engine.begin() as c:  # no rows: no statement
        insert_rows(c, storage.encapsulations, ("task", "digest"), [])
    assert len(statements) == 3 + 2
    engine.dispose()


def test_the_writers_connection_has_its_own_cache_and_memory_temp_store_and_others_keep_sqlites(tmp_path):
    engine = storage.connect(f"sqlite:///{tmp_path}/collector.db", "collector")
    writer = writer_connection(engine)
    with writer.begin():
        assert writer.exec_driver_sql("PRAGMA cache_size").scalar() == -(64 << 10)
        assert writer.exec_driver_sql("PRAGMA temp_store").scalar() == 2  # MEMORY
        assert writer.exec_driver_sql("PRAGMA synchronous").scalar() == 2  # FULL, as every connection: durable commits
    with storage.reading(engine) as other:
        assert other.exec_driver_sql("PRAGMA cache_size").scalar() == -2000
        assert other.exec_driver_sql("PRAGMA temp_store").scalar() == 0
    writer.close()
    engine.dispose()


def test_the_writer_keeps_its_sqlite_connection_and_drops_it_after_a_failed_group_or_a_dispose(tmp_path):
    """The kept connection is reused from group to group; a group that fails (a token another collector spent, a
    full disk) drops it, and so does an engine.dispose(), the next group opening another with the writer's settings
    (a pool's connection would carry neither)."""
    from privagg.service.shuffle.collector_writer import GroupCommit
    from privagg.service.web import Health

    engine = storage.connect(f"sqlite:///{tmp_path}/collector.db", "collector")
    writer = GroupCommit(engine, lambda c, group: [], Health())
    with writer._transaction() as first:
        pass
    with writer._transaction() as again:
        assert again is first and again.exec_driver_sql("PRAGMA cache_size").scalar() == -(64 << 10)
    with pytest.raises(RuntimeError), writer._transaction():
        raise RuntimeError("the group failed")
    with writer._transaction() as after_failure:
        assert after_failure is not first and after_failure.exec_driver_sql("PRAGMA temp_store").scalar() == 2
    engine.dispose()
    with writer._transaction() as after_dispose:
        assert after_dispose is not after_failure and after_failure.closed and first.closed
    engine.dispose()
