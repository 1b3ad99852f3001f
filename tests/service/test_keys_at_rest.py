"""State kept for years: the analyzer's private keys sealed under a key-encryption key, aggregates stored without
pickle, key ids rotated per task, the migration that moves an older database, and the result's bearer token."""

import io
import os
import pickle
import subprocess
import sys

import numpy as np
import pytest
import sqlalchemy as sa
from fastapi.testclient import TestClient

from privagg.errors import ParameterError
from privagg.protocols.registry import analyzer as make_analyzer, calibrate, client as make_client
from privagg.service import storage
from privagg.service.shuffle.aggregate_codec import decode_aggregate, encode_aggregate
from privagg.service.shuffle.analyzer import AnalyzerService, create_app
from privagg.service.keys import KeyEncryptionKey
from privagg.service.tasks import create_task
from service_deployment import database_at

GRR = calibrate("grr", epsilon=1.0, n_users=50, domain_size=4)


def test_keys_are_sealed_and_only_their_own_kek_on_their_own_row_opens_them(databases):
    kek = KeyEncryptionKey.generate()
    engine = storage.connect(databases["analyzer"], "analyzer", kek=kek)
    service = AnalyzerService(engine, kek=kek)
    first, second = service.create_task(GRR), service.create_task(GRR)
    key = service.load(first.task_id).private_key
    with engine.connect() as c:
        rows = {r.task_id: r for r in c.execute(sa.select(storage.analyzer_tasks))}
    assert "private_key" not in rows[first.task_id]._mapping
    assert key not in rows[first.task_id].sealed_key and rows[first.task_id].kek_id == kek.kek_id

    with pytest.raises(ParameterError, match=f"sealed with \\(KEK id {kek.kek_id}\\)"):
        AnalyzerService(engine, kek=KeyEncryptionKey.generate())  # refused before any key is opened

    with engine.begin() as c:  # a sealed key copied onto another task's row
        c.execute(sa.update(storage.analyzer_tasks).where(storage.analyzer_tasks.c.task_id == second.task_id)
                  .values(sealed_key=rows[first.task_id].sealed_key))
    with pytest.raises(ParameterError, match="altered or moved from another task's row"):
        AnalyzerService(engine, kek=kek).load(second.task_id)
    tampered = bytearray(rows[first.task_id].sealed_key)
    tampered[-1] ^= 1
    with pytest.raises(ParameterError, match="altered"):
        kek.open(bytes(tampered), first.task_id)
    engine.dispose()


def test_key_ids_rotate_per_task(tmp_path):
    engine = storage.connect(f"sqlite:///{tmp_path}/analyzer.db", "analyzer")
    service = AnalyzerService(engine, kek=KeyEncryptionKey.generate())
    tasks = [service.create_task(GRR) for _ in range(3)]
    assert [t.key_id for t in tasks] == [0, 1, 2] and len({t.public_key for t in tasks}) == 3
    assert service.create_task(GRR, key_id=255).key_id == 255
    assert service.create_task(GRR).key_id == 0  # after 255, 0
    with pytest.raises(ParameterError, match="key_id"):
        service.create_task(GRR, key_id=256)


def test_the_analyzer_refuses_to_start_without_its_kek_or_with_another(tmp_path):
    db, kek = f"sqlite:///{tmp_path}/analyzer.db", KeyEncryptionKey.generate()
    AnalyzerService(storage.connect(db, "analyzer", kek=kek), kek=kek).create_task(GRR)
    env = {k: v for k, v in os.environ.items() if k != "PRIVAGG_KEK"}

    def serve(*args: str, **extra: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "privagg", "serve", "analyzer", "--db", db, "--port", "0", *args],
                              capture_output=True, text=True, timeout=120, env={**env, **extra})

    missing = serve()
    assert missing.returncode == 2 and "key-encryption key must be one given: PRIVAGG_KEK" in missing.stderr
    wrong = serve(PRIVAGG_KEK=KeyEncryptionKey.generate().export())
    assert wrong.returncode == 2 and f"sealed with (KEK id {kek.kek_id})" in wrong.stderr
    (tmp_path / "open.key").write_text(kek.export())
    os.chmod(tmp_path / "open.key", 0o644)
    loose = serve("--kek-file", str(tmp_path / "open.key"))
    assert loose.returncode == 2 and "kek_file must be a file only its owner may read" in loose.stderr
    garbage = serve(PRIVAGG_KEK="not base64!")
    assert garbage.returncode == 2 and "PRIVAGG_KEK must be a key-encryption key: 32 bytes in base64" in garbage.stderr
    made = subprocess.run([sys.executable, "-m", "privagg", "task", "create", "--params", "/dev/null", "--db", db],
                          capture_output=True, text=True, timeout=120, env=env)
    assert made.returncode == 2 and "Traceback" not in made.stderr


@pytest.mark.parametrize("protocol, keywords", [("fe1", dict(domain_size=50, delta=1e-6)),
                                                ("blanket-vector", dict(domain_size=3, delta=1e-6)),
                                                ("fe-hh", dict(domain_size=2**10, delta=1e-6, phi=0.2))])
def test_aggregates_are_stored_without_pickle_and_read_back_exactly(protocol, keywords):
    params = calibrate(protocol, epsilon=1.0, n_users=300, **keywords)
    analyzer, rng = make_analyzer(params), np.random.default_rng(4)
    values = rng.random((300, 3)) if protocol == "blanket-vector" else rng.integers(0, 50, 300)
    agg = analyzer.agg_update(analyzer.agg_init(), make_client(params).randomize(values, rng))
    raw = encode_aggregate(agg)
    assert b"pickle" not in raw and raw[:2] == b"PK"  # a zip of .npy arrays
    back = decode_aggregate(raw)
    assert type(back) is type(agg) and encode_aggregate(back) == raw
    assert pickle.dumps(analyzer.finalize(agg)) == pickle.dumps(analyzer.finalize(back))  # the same release

    with pytest.raises(ParameterError, match="no pickles"):
        decode_aggregate(pickle.dumps(agg))
    stored = dict(np.load(io.BytesIO(raw)))
    for change, message in (({"type": np.array("os.system")}, "a type among"), ({"version": np.array(2)}, "version 1"),
                            ({"messages:int": None}, "with its field messages")):
        edited = {k: v for k, v in {**stored, **change}.items() if v is not None}
        out = io.BytesIO()
        np.savez(out, **edited)
        with pytest.raises(ParameterError, match=message):
            decode_aggregate(out.getvalue())


def test_migration_a0003_seals_older_keys_and_rewrites_pickled_aggregates(tmp_path):
    """A database written before keys were sealed (schema a0002: raw keys, pickled aggregates) is refused
    without a KEK, unchanged, and moved with one: the same key opens, the same aggregate is read back."""
    url = f"sqlite:///{tmp_path}/old.db"
    engine = database_at(url, "analyzer", "a0002")
    task, private_key = create_task(GRR)
    analyzer = make_analyzer(GRR)
    agg = analyzer.agg_update(analyzer.agg_init(), make_client(GRR).randomize(np.arange(50) % 4,
                                                                                np.random.default_rng(1)))
    with engine.begin() as c:
        c.exec_driver_sql("INSERT INTO analyzer_tasks (task_id, task, private_key) VALUES (?, ?, ?)",
                          (task.task_id, task.to_json(), private_key))
        c.exec_driver_sql("INSERT INTO aggregates (task_id, aggregate, batches, reports, unopened) VALUES "
                          "(?, ?, 1, 50, 0)", (task.task_id, pickle.dumps(agg)))
    engine.dispose()

    with pytest.raises(ParameterError, match="run `privagg db upgrade --role analyzer --db URL` once"):
        storage.connect(url, "analyzer")  # a service never upgrades on its own
    with pytest.raises(ParameterError, match="one given to seal the 1 private keys this database kept raw"):
        storage.connect(url, "analyzer", upgrade=True)
    engine = storage._engine(url, "analyzer", 5.0, None)
    with engine.connect() as c:
        assert c.exec_driver_sql("SELECT private_key FROM analyzer_tasks").scalar_one() == private_key
        assert c.exec_driver_sql("SELECT version_num FROM alembic_version_analyzer").scalar_one() == "a0002"
    engine.dispose()

    kek = KeyEncryptionKey.generate()
    (tmp_path / "a.kek").write_text(kek.export())
    os.chmod(tmp_path / "a.kek", 0o600)
    upgraded = subprocess.run([sys.executable, "-m", "privagg", "db", "upgrade", "--role", "analyzer", "--db", url,
                               "--kek-file", str(tmp_path / "a.kek")], capture_output=True, text=True, timeout=120)
    assert upgraded.returncode == 0, upgraded.stderr
    service = AnalyzerService(storage.connect(url, "analyzer"), kek=kek)
    assert service.load(task.task_id).private_key == private_key
    with service.engine.connect() as c:
        moved = decode_aggregate(c.execute(sa.select(storage.aggregates.c.aggregate)).scalar_one())
    assert np.array_equal(moved.counts, agg.counts) and moved.messages == agg.messages
    assert service.result(task.task_id)["messages"]["total"] == 50
    service.engine.dispose()


def test_the_result_asks_for_its_token_when_one_is_set(tmp_path):
    kek = KeyEncryptionKey.generate()
    service = AnalyzerService(storage.connect(f"sqlite:///{tmp_path}/analyzer.db", "analyzer"), kek=kek)
    task = service.create_task(GRR)
    app = TestClient(create_app(service, result_token="r" * 32))
    path = f"/tasks/{task.task_id}/result"
    for headers in ({}, {"authorization": "Bearer " + "x" * 32}, {"authorization": "r" * 32}):
        answer = app.get(path, headers=headers)
        assert answer.status_code == 401 and answer.json()["error"] == "unauthenticated"
    answer = app.get(path, headers={"authorization": "Bearer " + "r" * 32})
    assert answer.status_code == 409 and answer.json()["error"] == "not_released"  # past the token: no batch yet
    assert app.get(f"/tasks/{task.task_id}").status_code == 200  # the public task stays public
    assert service.refused.labels("unauthenticated")._value.get() == 3


def test_s2_seals_its_keys_too(tmp_path):
    """TSS's S2 holds a private key per task: sealed alike, and another KEK is refused before it opens one."""
    from privagg.protocols.sampling_calibration import calibrate_tss
    from privagg.service.two_servers.servers import SecondService, s2_tasks

    kek, url = KeyEncryptionKey.generate(), f"sqlite:///{tmp_path}/s2.db"
    second = SecondService(storage.connect(url, "s2", kek=kek), kek=kek)
    second.create_task(calibrate_tss(1.0, 1e-3, 40, 4, min_count_fraction=0.1, report_fraction=0.5),
                       organisation_key=bytes(32))
    with second.engine.connect() as c:
        row = c.execute(sa.select(s2_tasks)).one()
    assert "private_key" not in row._mapping and row.kek_id == kek.kek_id
    with pytest.raises(ParameterError, match=f"sealed with \\(KEK id {kek.kek_id}\\)"):
        SecondService(second.engine, kek=KeyEncryptionKey.generate())
    second.engine.dispose()
