"""The collector's migrations c0007 (its replay records, the encapsulations' digests, kept under a number for each task,
``storage.task_numbers``, instead of its 32-character id) and c0008 (the tokens' unique report ids a partial index of
spent tokens): an older database's rows are carried over, and still refuse replays and reused report ids."""

import sqlalchemy as sa
from fastapi.testclient import TestClient

from privagg.protocols.registry import calibrate
from privagg.service import storage
from privagg.service.shuffle.client import Client, Report
from privagg.service.shuffle.collector import Collector, create_app, token_hash
from privagg.service.tasks import create_task, encapsulation_digests
from service_deployment import database_at

OLDER = "c0006"  # the last revision before both


def _insert(c: sa.Connection, table: str, rows: list[dict]) -> None:
    columns = list(rows[0])
    c.execute(sa.text(f"INSERT INTO {table} ({', '.join(columns)}) VALUES ({', '.join(f':{k}' for k in columns)})"),
              rows)


def test_an_older_databases_replay_records_are_kept_under_task_numbers_when_upgraded(databases):
    """Every (task, digest) of an older database read back, under a number of its own for each task: tasks with
    records, one with none yet, and records of a task with no row (kept too); a digest is found under its own task's
    number only."""
    url = databases["collector"]
    kept = {"a" * 32: [bytes([i]) * 32 for i in range(5)], "b" * 32: [bytes([9]) * 32, bytes([0]) * 32],
            "c" * 32: [bytes([7]) * 32]}  # b shares a digest with a (another task's message: not a replay)
    engine = database_at(url, "collector", OLDER)
    with engine.begin() as c:
        _insert(c, "collector_tasks", [{"task_id": t, "task": "{}"} for t in ("a" * 32, "b" * 32, "d" * 32)])
        _insert(c, "encapsulations", [{"task_id": t, "digest": d} for t, digests in kept.items() for d in digests])
    engine.dispose()
    engine = storage.connect(url, "collector", upgrade=True)
    numbers, encapsulations = storage.task_numbers, storage.encapsulations
    with engine.connect() as c:
        number = dict(c.execute(sa.select(numbers.c.task_id, numbers.c.number)).all())
        back = c.execute(sa.select(numbers.c.task_id, encapsulations.c.digest).join(
            encapsulations, encapsulations.c.task == numbers.c.number)).all()
        asked = {(number["a" * 32], bytes([3]) * 32), (number["a" * 32], bytes([9]) * 32),
                 (number["c" * 32], bytes([7]) * 32), (number["d" * 32], bytes([7]) * 32)}
        found = storage.existing_digests(c, encapsulations, asked)
    assert sorted(number) == ["a" * 32, "b" * 32, "c" * 32, "d" * 32] and len(set(number.values())) == 4
    assert sorted(back) == sorted((t, d) for t, digests in kept.items() for d in digests)
    assert found == {(number["a" * 32], bytes([3]) * 32), (number["c" * 32], bytes([7]) * 32)}
    engine.dispose()


def test_a_message_accepted_before_the_upgrade_is_refused_as_a_replay_after_it(tmp_path):
    """A report stored by the older release (its token spent, its messages' digests recorded by task id): after the
    upgrade its messages resent under another token are a replay, its report id under another token a reused id,
    its own retry a retry, and a fresh report of the task is stored, the waiting count going on from the older one."""
    url = f"sqlite:///{tmp_path}/collector.db"
    task, _key = create_task(calibrate("grr", epsilon=1.0, n_users=1000, domain_size=4), min_batch_size=1)
    client = Client(task)
    victim, attacker = client.report(1, "the victim's token"), client.report(2, "the attacker's token")
    again = client.report(3, "another token")
    engine = database_at(url, "collector", OLDER)
    with engine.begin() as c:  # what the older release stored for the victim's report
        _insert(c, "collector_tasks", [{"task_id": task.task_id, "task": task.to_json(), "waiting": 1}])
        _insert(c, "tokens", [{"token_hash": token_hash(r.token), "task_id": task.task_id, "report_id": spent}
                              for r, spent in ((victim, victim.report_id), (attacker, None), (again, None))])
        _insert(c, "reports", [{"task_id": task.task_id, "report_id": victim.report_id,
                                "ciphertexts": b"".join(victim.ciphertexts)}])
        _insert(c, "encapsulations", [{"task_id": task.task_id, "digest": d}
                                      for d in encapsulation_digests(task, list(victim.ciphertexts))])
    engine.dispose()
    collector = Collector(storage.connect(url, "collector", upgrade=True), None, None)
    service = TestClient(create_app(collector, batch_interval=None))

    def post(report: Report):
        return service.post(f"/tasks/{task.task_id}/reports", json=report.to_dict())

    replayed = post(Report(task.task_id, "ab" * 16, attacker.token, task.key_id, victim.ciphertexts))
    assert (replayed.status_code, replayed.json()["error"]) == (409, "replayed_message")
    reused = post(Report(task.task_id, victim.report_id, again.token, task.key_id, again.ciphertexts))
    assert (reused.status_code, reused.json()["error"]) == (409, "duplicate_report_id")
    assert post(victim).json() == {"status": "already stored"}
    assert post(attacker).status_code == 201
    assert collector.counts(task.task_id)["reports_waiting"] == 2
    collector.engine.dispose()
