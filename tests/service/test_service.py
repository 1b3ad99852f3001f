"""The collector and the analyzer in one process (FastAPI's TestClient), on SQLite and on PostgreSQL.

The collector's batches go to the analyzer through its HTTP routes, as in deployment, but the tests decide
when batches are released. Checked: the pipeline (seal, store, shuffle, open, aggregate) leaves the
aggregate exactly as the analyzer would have it from the plaintext messages; every abuse gets its 4xx with
nothing stored and a metric counted; a batch is never released below the minimum and is applied once
however often it is sent; the collector stores no plaintext and no token; the analyzer's batches carry no
report boundaries, identities or arrival order.
"""

import base64
import json
import logging

import numpy as np
import pyarrow as pa
import pytest
import sqlalchemy as sa
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey
from fastapi.testclient import TestClient

from privagg.protocols.kinds import ResultKind
from privagg.protocols.registry import ENTRIES, analyzer as make_analyzer, calibrate
from privagg.service import storage
from privagg.service.shuffle.aggregate_codec import decode_aggregate
from privagg.service.shuffle.analyzer import AnalyzerService
from privagg.service.shuffle.client import Client, Report
from privagg.service.shuffle.collector import Collector, create_app as collector_app
from privagg.service.config import load_config
from privagg.service.keys import KeyEncryptionKey
from privagg.service.tasks import Task, seal_messages
from service_deployment import AUTH, Deployment, deploy, users

N = 300  # users of the task; each test's batches hold this many reports unless it says otherwise


@pytest.fixture
def fe1(databases):
    d = deploy(databases, calibrate("fe1", epsilon=2.0, delta=1e-5, n_users=N, domain_size=20))
    yield d
    for e in (d.analyzer.engine, d.collector.engine):
        e.dispose()


def test_the_service_aggregates_exactly_what_the_clients_sent(fe1):
    d, rng = fe1, np.random.default_rng(1)
    values = rng.integers(0, 20, N)
    reports, sent = users(d, values, rng)
    for r in reports:  # over HTTP, as clients send
        assert d.post(r).status_code == 201
    assert d.collector.release_batches() == 1 and d.stored() == 0  # released, acknowledged, deleted
    result = d.result()
    analyzer = make_analyzer(d.task.parameters)
    direct = analyzer.finalize(analyzer.agg_update(analyzer.agg_init(), type(sent[0]).concatenate(sent)))
    top = {e["item"]: e["estimate"] for e in result["estimates"]}
    assert top == {i: float(direct.estimates[i]) for i in top} and len(top) == 20
    total = sum(len(m) for m in sent)
    assert result["messages"] == {"total": total, "per_user": total / N, "malformed": 0}
    assert result["collection"] == {"reports": N, "batches": 1, "unopened": 0, "malformed": 0, "duplicates": 0}
    privacy = result["privacy"]
    assert privacy["private"] is True and "secure" in privacy["randomness"] and privacy["honest_fraction"] == 1.0


def test_no_batch_below_the_minimum(databases):
    d = deploy(databases, calibrate("grr", epsilon=1.0, n_users=400, domain_size=5), min_batch_size=200)
    reports, _ = users(d, np.zeros(400, dtype=int), np.random.default_rng(2))
    d.store(reports[:199])
    assert d.collector.release_batches() == 0 and not d.delivered and d.stored() == 199
    d.store(reports[199:200])
    assert d.collector.release_batches() == 1 and d.result()["collection"]["reports"] == 200
    assert not d.result()["privacy"]["caveats"]  # 200 messages from the 200 users who reported: as expected
    d.store(reports[200:399])  # the rest wait: 199 can never make a batch of their own
    assert d.collector.release_batches() == 0 and d.stored() == 199


def test_a_cap_never_cuts_a_batch_below_the_minimum(databases):
    d = deploy(databases, calibrate("grr", epsilon=1.0, n_users=400, domain_size=5), min_batch_size=200)
    d.collector.max_batch_reports = 50
    reports, _ = users(d, np.zeros(300, dtype=int), np.random.default_rng(15))
    d.store(reports)
    assert d.collector.release_batches() == 1 and d.result()["collection"]["reports"] == 200 and d.stored() == 100


def test_a_shuffle_task_has_one_batch_of_all_n_or_of_a_closed_task(databases):
    d = deploy(databases, calibrate("blanket-hist", epsilon=1.0, delta=1e-5, n_users=400, domain_size=5,
                                    honest_fraction=0.5), min_batch_size=200)
    reports, _ = users(d, np.zeros(400, dtype=int), np.random.default_rng(16))
    d.store(reports[:300])
    assert d.collector.release_batches() == 0  # 300 of 400: the task is open, more may come
    d.collector.close(d.task.task_id)
    assert d.collector.counts(d.task.task_id)["closed"] is True
    assert d.collector.release_batches() == 1 and d.result()["collection"]["reports"] == 300
    late = d.post(reports[300])
    assert late.status_code == 409 and late.json()["error"] == "task_closed" and d.stored() == 0
    assert d.post(reports[0]).json() == {"status": "already stored"}  # a retry of a counted report


def test_no_report_is_taken_after_a_shuffle_task_released_its_batch(fe1):
    d = fe1
    reports, _ = users(d, np.arange(N + 1) % 20, np.random.default_rng(17))
    d.store(reports[:N])
    assert d.collector.release_batches() == 1
    late = d.post(reports[N])
    assert late.status_code == 409 and late.json()["error"] == "task_closed"
    assert d.result()["collection"]["reports"] == N


def test_a_minimum_below_what_the_privacy_needs_is_refused(databases):
    """A shuffle task's one batch needs at least ceil(G n) reports (n - m absent users count against the honest
    fraction)."""
    from privagg.errors import ParameterError

    engine = storage.connect(databases["analyzer"], "analyzer")
    params = calibrate("blanket-hist", epsilon=1.0, delta=1e-5, n_users=400, domain_size=5, honest_fraction=0.5)
    with pytest.raises(ParameterError, match=r"min_batch_size must be an integer in \[200, 400\]"):
        AnalyzerService(engine, kek=KeyEncryptionKey.generate()).create_task(params, min_batch_size=199)
    engine.dispose()


def test_a_batch_is_applied_once_however_often_it_is_sent(fe1):
    d = fe1
    reports, _ = users(d, np.arange(N) % 20, np.random.default_rng(3))
    d.store(reports)
    d.lose_acks = 2  # delivered twice without the collector hearing back
    assert d.collector.release_batches() == 0 and d.stored() == N
    assert d.collector.release_batches() == 0
    assert d.collector.release_batches() == 1 and d.stored() == 0
    assert len(d.delivered) == 3 and d.result()["collection"]["batches"] == 1
    assert d.analyzer.registry.get_sample_value("privagg_batches_total", {"outcome": "replayed"}) == 2
    assert d.result()["collection"]["reports"] == N
    # and a replay after the reports were deleted is still a no-op
    batch_id = pa.ipc.open_stream(d.delivered[0]).read_all().schema.metadata[b"batch_id"].decode()
    answer = d.A.post(f"/tasks/{d.task.task_id}/batches/{batch_id}", content=d.delivered[0], headers=AUTH)
    assert answer.json() == {"status": "already applied"} and d.result()["collection"]["reports"] == N


def test_batches_carry_no_identity_and_no_arrival_order(fe1):
    d = fe1
    reports, _ = users(d, np.arange(N) % 20, np.random.default_rng(4))
    d.store(reports)
    d.collector.release_batches()
    table = pa.ipc.open_stream(d.delivered[0]).read_all()
    assert table.column_names == ["ciphertext"]
    assert set(table.schema.metadata) == {b"task_id", b"batch_id", b"reports"}
    arrived = [c for r in reports for c in r.ciphertexts]
    forwarded = table.column("ciphertext").to_pylist()
    assert sorted(forwarded) == sorted(arrived)  # every message once, nothing else
    # a uniform permutation of ~1,100 messages: the chance that one in 20 keeps its place by luck is nil
    assert sum(a == f for a, f in zip(arrived, forwarded)) < len(arrived) / 20
    # the order is not the reports' either: messages of one report are not kept together
    position = {c: i for i, c in enumerate(forwarded)}
    gaps = [abs(position[r.ciphertexts[0]] - position[r.ciphertexts[1]]) for r in reports if len(r.ciphertexts) > 1]
    assert np.median(gaps) > 50


def test_the_collector_stores_no_plaintext_and_no_token(databases):
    """FE1 over a 2^40 domain: each plaintext is a 17-byte record (two 64-bit hash values and a bit), long
    enough that finding one in the database by chance is out of the question; none is found, in the rows or
    in the raw SQLite files, and neither is any token."""
    from privagg.service.tasks import create_task

    task, _key = create_task(calibrate("fe1", epsilon=1.0, delta=1e-6, n_users=N, domain_size=2**40))
    engine = storage.connect(databases["collector"], "collector")
    collector = Collector(engine, lambda _task_id: task.to_json(), None)
    C = TestClient(collector_app(collector, batch_interval=None))
    d = Deployment(None, collector, None, C, task)
    rng = np.random.default_rng(5)
    reports, sent = users(d, rng.integers(0, 2**40, N // 3), rng)
    d.store(reports)
    layout = task.parameters.layout
    records = np.empty(sum(len(m) for m in sent), dtype=layout.record_dtype.newbyteorder("<"))
    for name in layout.names:
        records[name] = np.concatenate([m[name] for m in sent])
    plaintexts = {row.tobytes() for row in records}
    assert len(next(iter(plaintexts))) == 17 and len(plaintexts) > 1_000
    with engine.connect() as c:
        dump = b"\x00".join(value if isinstance(value, bytes) else str(value).encode()
                            for table in storage.metadata["collector"].sorted_tables
                            for row in c.execute(sa.select(table)) for value in row)
    places = [dump]
    if databases["collector"].startswith("sqlite"):
        path = databases["collector"].removeprefix("sqlite:///")
        places.append(open(path, "rb").read() + open(path + "-wal", "rb").read())
    for place in places:
        assert not any(p in place for p in plaintexts)
        assert not any(r.token.encode() in place for r in reports)  # only the tokens' hashes are kept
        assert all(c in place for c in reports[0].ciphertexts)  # what is there: the sealed messages
    engine.dispose()


def _body(d: Deployment, report: Report, **change) -> dict:
    return {**report.to_dict(), **change}


@pytest.mark.parametrize("case", ["duplicate_report_id", "token_used", "wrong_task", "foreign_token", "garbage",
                                  "truncated", "oversized", "too_many", "wrong_key_id", "not_json", "missing_field",
                                  "non_ascii_ciphertext", "float_key_id", "surrogate_token", "deep_json"])
def test_abuse_gets_a_clear_4xx_and_nothing_is_stored(fe1, case):
    d = fe1
    reports, _ = users(d, [1, 2, 3], np.random.default_rng(6))
    first, second, third = reports
    assert d.post(first).status_code == 201
    size = len(first.ciphertexts[0])
    other = deploy_other_task_token(d)
    body, path = None, f"/tasks/{d.task.task_id}/reports"
    expected = {"duplicate_report_id": (409, "duplicate_report_id"), "token_used": (409, "token_used"),
                "wrong_task": (404, "unknown_task"), "foreign_token": (403, "bad_token"),
                "garbage": (400, "bad_ciphertext"), "truncated": (400, "bad_ciphertext"),
                "oversized": (413, "oversized"), "too_many": (400, "malformed"), "wrong_key_id": (400, "unknown_key"),
                "not_json": (400, "malformed"), "missing_field": (400, "malformed"),
                "non_ascii_ciphertext": (400, "bad_ciphertext"), "float_key_id": (400, "unknown_key"),
                "surrogate_token": (400, "malformed"), "deep_json": (400, "malformed")}[case]
    if case == "duplicate_report_id":
        body = _body(d, second, report_id=first.report_id)
    elif case == "token_used":
        body = _body(d, second, token=first.token)
    elif case == "wrong_task":
        path = f"/tasks/{'ab' * 16}/reports"
        body = _body(d, second)
    elif case == "foreign_token":
        body = _body(d, second, token=other)
    elif case == "garbage":
        body = _body(d, second, ciphertexts=["not base64 at all!"])
    elif case == "truncated":
        body = _body(d, second, ciphertexts=[base64.b64encode(second.ciphertexts[0][: size - 1]).decode()])
    elif case == "oversized":
        body = _body(d, second, ciphertexts=["A" * (1 << 20)])
    elif case == "too_many":
        body = _body(d, second, ciphertexts=[base64.b64encode(second.ciphertexts[0]).decode()] *
                     (d.task.message_cap + 1))
    elif case == "wrong_key_id":
        body = _body(d, second, key_id=d.task.key_id + 1)
    elif case == "missing_field":
        body = {k: v for k, v in second.to_dict().items() if k != "token"}
    elif case == "non_ascii_ciphertext":
        body = _body(d, second, ciphertexts=["ü" * 60])
    elif case == "float_key_id":
        body = _body(d, second, key_id=float(d.task.key_id))
    raw = {"not_json": b"{not json", "deep_json": b"[" * 200_000,
           "surrogate_token": json.dumps(_body(d, second, token="\ud800abc")).encode()}.get(case)
    if raw is not None:
        answer = d.C.post(path, content=raw, headers={"content-type": "application/json"})
    else:
        answer = d.C.post(path, json=body)
    assert (answer.status_code, answer.json()["error"]) == expected, answer.text
    assert answer.json()["detail"]  # a sentence saying what is accepted
    assert d.stored() == 1 and d.refused(expected[1]) == 1
    assert d.post(third).status_code == 201  # the service goes on


def deploy_other_task_token(d: Deployment) -> str:
    """A token the collector issued for another task of the analyzer."""
    return d.collector.issue_tokens(d.analyzer.create_task(d.task.parameters).task_id, 1)[0]


def test_a_retry_is_acknowledged_and_stored_once(fe1):
    d = fe1
    (report,), _ = users(d, [4], np.random.default_rng(7))
    assert d.post(report).status_code == 201
    again = d.post(report)
    assert again.status_code == 200 and again.json() == {"status": "already stored"} and d.stored() == 1


def test_messages_that_do_not_open_or_break_the_layout_are_dropped_and_counted(fe1):
    d = fe1
    reports, _ = users(d, np.arange(N) % 20, np.random.default_rng(8))
    stranger = Task(d.task.task_id, d.task.parameters, X25519PrivateKey.generate().public_key().public_bytes_raw(),
                    d.task.key_id, d.task.min_batch_size)
    layout = d.task.parameters.layout
    bad = layout.batch({"u": [0], "v": [0], "w": [0]})  # u = 0 is outside [1, 83): sealed well, but malformed
    reports[0] = Report(d.task.task_id, reports[0].report_id, reports[0].token, d.task.key_id,
                        tuple(seal_messages(stranger, layout.batch({"u": [1], "v": [0], "w": [0]}))))
    reports[1] = Report(d.task.task_id, reports[1].report_id, reports[1].token, d.task.key_id,
                        tuple(seal_messages(d.task, bad)))
    d.store(reports)  # the collector cannot tell: it holds no key
    d.collector.release_batches()
    result = d.result()
    assert result["collection"] == {"reports": N, "batches": 1, "unopened": 1, "malformed": 1, "duplicates": 0}
    assert result["messages"]["malformed"] == 1
    assert d.analyzer.registry.get_sample_value("privagg_messages_dropped_total", {"reason": "unopened"}) == 1
    assert d.analyzer.registry.get_sample_value("privagg_messages_dropped_total", {"reason": "malformed"}) == 1


def test_a_batch_is_taken_only_from_the_collector(fe1):
    d = fe1
    reports, _ = users(d, np.arange(N) % 20, np.random.default_rng(13))
    d.store(reports)
    d.collector.release_batches()
    for headers in ({}, {"authorization": "Bearer a guess"}):
        answer = d.A.post(f"/tasks/{d.task.task_id}/batches/{'ef' * 16}", content=d.delivered[0], headers=headers)
        assert answer.status_code == 401 and answer.json()["error"] == "unauthenticated"
    assert d.result()["collection"]["batches"] == 1
    assert d.analyzer.registry.get_sample_value("privagg_requests_refused_total", {"reason": "unauthenticated"}) == 2


def test_a_malformed_batch_is_refused(fe1):
    d = fe1
    answer = d.A.post(f"/tasks/{d.task.task_id}/batches/{'00' * 16}", content=b"not arrow", headers=AUTH)
    assert answer.status_code == 400 and answer.json()["error"] == "malformed_batch"
    table = pa.table({"ciphertext": pa.array([b"x" * 10], pa.binary(10))}).replace_schema_metadata(
        {"task_id": d.task.task_id, "batch_id": "00" * 16, "reports": "1"})
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as w:
        w.write_table(table)
    answer = d.A.post(f"/tasks/{d.task.task_id}/batches/{'00' * 16}", content=sink.getvalue().to_pybytes(),
                      headers=AUTH)
    assert answer.status_code == 400 and "one column 'ciphertext'" in answer.json()["detail"]
    assert d.A.get(f"/tasks/{d.task.task_id}/result").json()["error"] == "not_released"  # nothing was applied


def test_operations_endpoints(fe1):
    d = fe1
    for client in (d.A, d.C):
        assert client.get("/healthz").json()["status"] == "ok"
        assert client.get("/readyz").json() == {"status": "ready"}
        assert client.get("/metrics").status_code == 200
    assert d.C.post(f"/tasks/{d.task.task_id}/reports", json={}).status_code == 400
    assert 'privagg_reports_refused_total{reason="malformed"} 1.0' in d.C.get("/metrics").text
    assert json.loads(d.C.get(f"/tasks/{d.task.task_id}").text)["task_id"] == d.task.task_id


def test_logs_hold_no_token_value_or_ciphertext(fe1, caplog):
    d = fe1
    reports, _ = users(d, np.arange(N) % 20, np.random.default_rng(9))
    with caplog.at_level(logging.INFO, logger="privagg"):
        d.store(reports)
        d.collector.release_batches()
        d.result()
    text = caplog.text + "".join(str(getattr(rec, "fields", "")) for rec in caplog.records)
    assert "batch applied" in text and "batch released" in text
    for r in reports[:20]:
        assert r.token not in text and base64.b64encode(r.ciphertexts[0]).decode()[:24] not in text


def test_the_migrations_build_the_declared_schema(databases):
    for role, url in databases.items():
        engine = storage.connect(url, role)
        with engine.connect() as c:
            context = MigrationContext.configure(c, opts={"include_name": lambda name, kind, _parent: not (
                kind == "table" and name.startswith("alembic_version"))})
            diff = compare_metadata(context, storage.metadata[role])
        assert diff == [], diff
        engine.dispose()


def test_the_aggregate_persists_across_restarts(databases):
    d = deploy(databases, calibrate("fe1", epsilon=2.0, delta=1e-5, n_users=N, domain_size=20))
    reports, _ = users(d, np.arange(N) % 20, np.random.default_rng(10))
    d.store(reports)
    d.collector.release_batches()
    before = d.result()
    engine = storage.connect(databases["analyzer"], "analyzer")
    again = AnalyzerService(engine, kek=d.analyzer.kek).result(d.task.task_id, top=100)  # a new process's view
    assert again["estimates"] == before["estimates"] and again["collection"] == before["collection"]
    with engine.connect() as c:
        agg = decode_aggregate(c.execute(sa.select(storage.aggregates.c.aggregate)).scalar_one())
    assert agg.messages == before["messages"]["total"]


def test_configuration_file_then_environment_then_flags(tmp_path, monkeypatch):
    from privagg.errors import ParameterError

    path = tmp_path / "privagg.toml"
    path.write_text('[collector]\ndb = "sqlite:///file.db"\nport = 9000\nbatch_interval = 5.0\n'
                    'analyzer_url = "http://a:1"\n')
    monkeypatch.setenv("PRIVAGG_COLLECTOR_PORT", "9001")
    cfg = load_config("collector", path, batch_interval=0.5)
    assert (cfg.db, cfg.port, cfg.batch_interval, cfg.analyzer_url) == ("sqlite:///file.db", 9001, 0.5, "http://a:1")
    path.write_text('[collector]\nbogus = 1\n')
    with pytest.raises(ParameterError, match="config must be fields among"):
        load_config("collector", path)
    monkeypatch.setenv("PRIVAGG_COLLECTOR_PORT", "many")
    with pytest.raises(ParameterError, match="PRIVAGG_COLLECTOR_PORT"):
        load_config("collector")
    monkeypatch.delenv("PRIVAGG_COLLECTOR_PORT")
    for table, name in (('port = "8080"', "port"), ("max_batch_reports = 0", "max_batch_reports"),
                         ('log_level = "LOUD"', "log_level"), ('collector_token = ""', "collector_token"),
                         ("max_body_bytes = -1", "max_body_bytes"), ("batch_quiet = 0", "batch_quiet")):
        path.write_text(f"[collector]\n{table}\n")
        with pytest.raises(ParameterError) as err:
            load_config("collector", path)
        assert err.value.field == name


SERVED_DOMAIN_MAX = 64  # the services' run takes each entry's example on a domain this small, or its own


def served_case(protocol):
    """(calibration keywords, one user's value) of a served protocol: its registry entry's example options over at
    most SERVED_DOMAIN_MAX items (coordinates), and a value as its users hold them: an item of the domain, a third
    of users each holding 1 or the last (heavy hitters to find), a vector of [0, 1]^d, or a (coordinate, weight)."""
    from privagg.protocols.registry import get

    entry = get(protocol)
    domain = min(entry.example["domain_size"], SERVED_DOMAIN_MAX)
    options = {o.name: entry.example[o.name] for o in entry.options if o.name in entry.example}
    if entry.result is ResultKind.VECTOR_SUM and getattr(entry.parameters, "one_sparse", False):
        draw = lambda rng: np.array([rng.integers(domain), rng.random()])  # noqa: E731
    elif entry.result is ResultKind.VECTOR_SUM:
        draw = lambda rng: rng.random(domain)  # noqa: E731
    else:
        draw = lambda rng: int(rng.choice([1, domain - 1, int(rng.integers(domain))]))  # noqa: E731
    return dict(domain_size=domain, **options), draw


SERVED = [e.name for e in ENTRIES if e.implemented and e.served]


def test_the_served_protocols_are_every_one_round_protocol():
    assert set(SERVED) == {e.name for e in ENTRIES if e.implemented and e.client is not None}


@pytest.mark.parametrize("protocol, keywords", [("bib", dict(domain_size=8, delta=1e-5)),
                                                ("dpds", dict(domain_size=4, delta=1e-5, min_count_fraction=0.1))])
def test_a_task_is_refused_unless_the_services_run_its_protocol(protocol, keywords, tmp_path):
    """A central curator and the users' sharing rounds are not the analyzer's (the sharing rounds have their own
    servers): the analyzer refuses the task (bib's was created, and could never be loaded), and a client refuses
    a task naming them."""
    from privagg.errors import ParameterError

    params = calibrate(protocol, epsilon=2.0, n_users=500, **keywords)
    service = AnalyzerService(storage.connect(f"sqlite:///{tmp_path}/analyzer.db", "analyzer"),
                              kek=KeyEncryptionKey.generate())
    with pytest.raises(ParameterError, match="one the services run") as err:
        service.create_task(params)
    assert err.value.field == "protocol"
    served = service.create_task(calibrate("grr", epsilon=2.0, n_users=500, domain_size=8)).to_dict()
    with pytest.raises(ParameterError) as err:
        Task.from_dict({**served, "parameters": params.to_dict()})
    assert err.value.field == "parameters.protocol"
    service.engine.dispose()


@pytest.mark.parametrize("protocol", sorted(SERVED))
def test_every_one_round_protocol_runs_through_the_services(protocol, tmp_path):
    """Each protocol's result through the services equals its analyzer's report over the plaintext messages."""
    from privagg.core.messages import MessageBatch
    from privagg.pipelines import Analysis
    from privagg.protocols.registry import get
    from privagg.reports import Engine, to_json_dict

    keywords, draw = served_case(protocol)
    params = calibrate(protocol, epsilon=2.0, n_users=500, **keywords, **({} if get(protocol).pure else
                                                                            {"delta": 1e-5}))
    d = deploy({role: f"sqlite:///{tmp_path}/{role}.db" for role in ("collector", "analyzer")}, params)
    rng = np.random.default_rng(12)
    reports, sent = users(d, [draw(rng) for _ in range(500)], rng)
    d.store(reports)
    assert d.collector.release_batches() == 1
    analyzer = make_analyzer(params)
    direct = analyzer.finalize(analyzer.agg_update(analyzer.agg_init(), MessageBatch.concatenate(sent)))
    expected = to_json_dict(Analysis.of(params).report(direct, params.privacy, Engine("local", 1), top=100))
    result = d.result()
    heavy = get(protocol).result is ResultKind.HEAVY_HITTER_LIST
    released = "heavy_hitters" if heavy else "estimates"  # fe-hh: the items its walk discovered
    assert result[released] == expected[released] and result["messages"] == expected["messages"]
    assert result["collection"] == {"reports": 500, "batches": 1, "unopened": 0, "malformed": 0, "duplicates": 0}
    if heavy:  # 1 and the last item are each held by about a third of the users, above phi n
        assert {1, params.domain_size - 1} <= {h["item"] for h in result["heavy_hitters"]}
    for e in (d.analyzer.engine, d.collector.engine):
        e.dispose()


def test_the_hybrid_post_quantum_kem_end_to_end(databases):
    """A task on ML-KEM-768 + X25519: clients seal to the hybrid key, the analyzer opens, the result is exact."""
    from privagg.core.messages import MessageBatch

    d = deploy(databases, calibrate("fe1", epsilon=2.0, delta=1e-5, n_users=N, domain_size=20), kem="mlkem768-x25519")
    assert d.task.kem == "mlkem768-x25519" and len(d.task.public_key) == 1184 + 32
    assert json.loads(d.C.get(f"/tasks/{d.task.task_id}").text)["suite"].startswith("MLKEM768-X25519")
    reports, sent = users(d, np.arange(N) % 20, np.random.default_rng(14))
    assert len(reports[0].ciphertexts[0]) == d.task.parameters.layout.record_dtype.itemsize + 1120 + 16
    d.store(reports)
    d.collector.release_batches()
    analyzer = make_analyzer(d.task.parameters)
    direct = analyzer.finalize(analyzer.agg_update(analyzer.agg_init(), MessageBatch.concatenate(sent)))
    result = d.result()
    assert {e["item"]: e["estimate"] for e in result["estimates"]} == {i: float(direct.estimates[i]) for i in range(20)}
    assert result["collection"] == {"reports": N, "batches": 1, "unopened": 0, "malformed": 0, "duplicates": 0}
    for e in (d.analyzer.engine, d.collector.engine):
        e.dispose()


def test_fe_hh_discovers_heavy_strings_through_the_services(tmp_path):
    """Strings of at most L bytes, discovered byte by byte with no list: the service names the heavy ones, exactly
    as the analyzer over the plaintext messages does."""
    from privagg.core.messages import MessageBatch

    params = calibrate("fe-hh", epsilon=1.0, delta=1e-6, n_users=2_000, domain_size=256**2, max_length=2, phi=0.1)
    rng = np.random.default_rng(8)
    values = rng.choice(["ok", "hi", "zz", "q", "é"], size=2_000, p=[0.4, 0.3, 0.2, 0.05, 0.05]).tolist()
    d = deploy({role: f"sqlite:///{tmp_path}/{role}.db" for role in ("collector", "analyzer")}, params)
    reports, sent = users(d, values, rng)
    d.store(reports)
    d.collector.release_batches()
    analyzer = make_analyzer(params)
    direct = analyzer.finalize(analyzer.agg_update(analyzer.agg_init(), MessageBatch.concatenate(sent)))
    found = {h["item"]: h["estimate"] for h in d.result()["heavy_hitters"]}
    assert found == dict(zip(direct.items, direct.estimates.tolist()))
    assert set(found) == {"ok", "hi", "zz"}  # held by about 800, 600 and 400 users; phi n = 200; q and é by 100
    for e in (d.analyzer.engine, d.collector.engine):
        e.dispose()


def test_a_handful_of_users_task_over_a_large_domain_is_refused_at_creation(tmp_path):
    """The release of a task is held to a run's budget, as estimate's: fe1 for 3 users over 2^24 items was
    accepted and its release took 38 s (every message's preimages over [B], whatever n). Refused at creation,
    naming the domain that fits and --candidates, not --full-domain (task create has none); with candidates, or
    more users, it is created."""
    from privagg.errors import ParameterError

    service = AnalyzerService(storage.connect(f"sqlite:///{tmp_path}/a.db", "analyzer"), kek=KeyEncryptionKey.generate())
    few = calibrate("fe1", epsilon=1.0, delta=1e-9, n_users=3, domain_size=2**24)
    with pytest.raises(ParameterError, match="domain must be at most about") as refused:
        service.create_task(few)
    assert "--candidates" in refused.value.accepted and "--full-domain" not in refused.value.accepted
    assert "carry no information" in refused.value.accepted
    service.create_task(few, candidates=[1, 2, 3])
    service.create_task(calibrate("fe1", epsilon=1.0, delta=1e-9, n_users=3, domain_size=2**10))
    service.engine.dispose()


def test_a_huge_domain_task_answers_its_public_candidates(tmp_path):
    """fe1 over 2^40 integers and over text (the parameters' item key): the result estimates the candidates given
    at task creation, exactly as the analyzer over the plaintext messages with those queries, strings by name."""
    from privagg.core.encoding import ItemEncoder
    from privagg.core.messages import MessageBatch
    from privagg.errors import ParameterError

    params = calibrate("fe1", epsilon=2.0, delta=1e-6, n_users=600, domain_size=2**40, item_key="ab" * 16)
    service = AnalyzerService(storage.connect(f"sqlite:///{tmp_path}/a.db", "analyzer"), kek=KeyEncryptionKey.generate())
    with pytest.raises(ParameterError, match="candidates must be given for a domain over 2"):
        service.create_task(params)
    with pytest.raises(ParameterError, match="candidates"):
        service.create_task(params, candidates=[2**40])  # outside the domain
    service.engine.dispose()
    words = ["apple", "pear", "plum"]
    for candidates, values in (([7, 2**39 + 1, 123_456_789], [7] * 300 + [2**39 + 1] * 200 + [5] * 100),
                               (words, ["apple"] * 300 + ["pear"] * 200 + ["fig"] * 100)):
        folder = tmp_path / str(type(values[0]).__name__)
        d = deploy({role: f"sqlite:///{folder}-{role}.db" for role in ("collector", "analyzer")}, params,
                   candidates=candidates)
        encoder = ItemEncoder.for_parameters(params, "text") if isinstance(values[0], str) else None
        reports, sent = users(d, values if encoder is None else encoder.encode(values).tolist(),
                              np.random.default_rng(6))  # the codes each SDK hashes a string to (Client.report)
        d.store(reports)
        d.collector.release_batches()
        codes = np.unique(encoder.encode(candidates, public=True)) if encoder else np.unique(candidates)
        analyzer = make_analyzer(params, codes)
        direct = analyzer.finalize(analyzer.agg_update(analyzer.agg_init(), MessageBatch.concatenate(sent)))
        got = {e["item"]: e["estimate"] for e in d.result()["estimates"]}
        named = [encoder.label(int(c)) for c in codes] if encoder else codes.tolist()
        assert got == dict(zip(named, direct.estimates.tolist())) and set(got) == set(candidates)
        assert max(got, key=got.get) == candidates[0]  # held by half the users
        if encoder is not None:  # the SDK hashes a string item itself, to the code the analyzer names "apple"
            client, seen = Client(d.task), []
            randomize = client.randomizer.randomize
            client.randomizer.randomize = lambda values, rng: seen.append(values) or randomize(values, rng)
            assert client.report("apple", "t").ciphertexts and seen == [[int(encoder.encode(["apple"])[0])]]
        for e in (d.analyzer.engine, d.collector.engine):
            e.dispose()


def test_a_candidates_file_too_long_is_refused_as_it_is_read(tmp_path):
    from typer.testing import CliRunner

    from privagg.cli import app
    from privagg.service.shuffle.analyzer import MAX_CANDIDATES

    params = calibrate("fe1", epsilon=1.0, delta=1e-6, n_users=100, domain_size=2**40)
    (tmp_path / "p.json").write_text(json.dumps(params.to_dict()))
    (tmp_path / "c.txt").write_text("7\n" * (MAX_CANDIDATES + 1))
    out = CliRunner().invoke(app, ["task", "create", "--params", str(tmp_path / "p.json"), "--db",
                                   f"sqlite:///{tmp_path}/a.db", "--candidates", str(tmp_path / "c.txt")])
    assert out.exit_code == 2 and f"candidates must be a file of at most {MAX_CANDIDATES:,} items" in out.output


@pytest.mark.parametrize("partitioned", [False, True])
def test_candidates_added_after_the_messages_arrived_are_answered_exactly(databases, tmp_path, partitioned):
    """A task over 2^40 items keeps the messages it opened (sent whole, or as partitions): candidates added over
    HTTP after the batch, and then by another analyzer process on the same database (which the first notices),
    are answered exactly as the analyzer over the plaintext messages with all the candidates as queries."""
    from privagg.core.messages import MessageBatch

    params = calibrate("fe1", epsilon=2.0, delta=1e-6, n_users=600, domain_size=2**40)
    d = deploy(databases, params, candidates=[7, 2**39 + 1], partition_root=tmp_path if partitioned else None,
               budgets=(200_000, 1 << 30))  # several partitions (each opened apart, twice: ~0.1 s of CPU each)
    reports, sent = users(d, [7] * 300 + [2**39 + 1] * 200 + [5] * 100, np.random.default_rng(8))
    d.store(reports)
    assert d.collector.release_batches() == 1 and bool(d.delivered) != partitioned
    with d.analyzer.engine.connect() as c:  # the opened messages it keeps: one row a partition
        parts = c.execute(sa.select(sa.func.count()).select_from(storage.opened_messages)).scalar_one()
    assert (parts > 1) == partitioned, parts
    assert sorted(e["item"] for e in d.result()["estimates"]) == [7, 2**39 + 1]
    path = f"/tasks/{d.task.task_id}/candidates"
    assert d.A.post(path, json={"candidates": [5, 123, 7]}).json() == {"candidates": 4}
    other = AnalyzerService(storage.connect(databases["analyzer"], "analyzer", kek=d.analyzer.kek), kek=d.analyzer.kek)
    assert other.add_candidates(d.task.task_id, [2**40 - 1]) == 5  # another process: the first reloads the task
    other.engine.dispose()
    codes = np.array([5, 7, 123, 2**39 + 1, 2**40 - 1])
    analyzer = make_analyzer(params, codes)
    direct = analyzer.finalize(analyzer.agg_update(analyzer.agg_init(), MessageBatch.concatenate(sent)))
    got = {e["item"]: e["estimate"] for e in d.result()["estimates"]}
    assert got == dict(zip(codes.tolist(), direct.estimates.tolist()))
    for body, detail in (({"candidates": [2**40]}, "candidates"), ({"candidates": []}, "non-empty list"),
                         ({"items": [1]}, "must be {")):
        answer = d.A.post(path, json=body)
        assert answer.status_code == 400 and detail in answer.json()["detail"], answer.text
    whole = d.analyzer.create_task(calibrate("fe1", epsilon=2.0, delta=1e-6, n_users=600, domain_size=20))
    answer = d.A.post(f"/tasks/{whole.task_id}/candidates", json={"candidates": [1]})
    assert answer.status_code == 400 and "created with candidates" in answer.json()["detail"]
    assert d.A.post(f"/tasks/{'0' * 32}/candidates", json={"candidates": [1]}).status_code == 404
    elsewhere = TestClient(d.A.app, client=("203.0.113.9", 50000)).post(path, json={"candidates": [9]})
    assert elsewhere.status_code == 403 and elsewhere.json()["error"] == "no_token_set"  # no result token set
    for e in (d.analyzer.engine, d.collector.engine):
        e.dispose()


def test_task_candidates_names_an_unknown_task_in_one_line(tmp_path, monkeypatch):
    from typer.testing import CliRunner

    from privagg.cli import app

    monkeypatch.setenv("PRIVAGG_KEK", KeyEncryptionKey.generate().export())
    (tmp_path / "c.txt").write_text("5\n")
    storage.connect(f"sqlite:///{tmp_path}/a.db", "analyzer").dispose()
    out = CliRunner().invoke(app, ["task", "candidates", "--task", "ab" * 16, "--candidates", str(tmp_path / "c.txt"),
                                   "--db", f"sqlite:///{tmp_path}/a.db"])
    assert out.exit_code == 2 and out.output.startswith("error: task must be a task of this analyzer"), out.output
