"""Replays and forged batches, on SQLite and PostgreSQL: what a holder of one device token, or of the collector
token, could do before, and is refused now.

A device's token lets an attacker send one report; before, he could fill it with a captured report's
ciphertexts under a new report id, and the analyzer counted the victim's messages twice (his privacy loss
doubled). The collector's token let anyone who held it send the analyzer batches that broke the task's rules.
Now no two accepted messages of a task share an HPKE encapsulated key (the collector refuses the report,
atomically, across restarts and processes), and the analyzer enforces the batch rules itself and drops and
counts repeated encapsulations within and across batches.
"""

import hashlib
import hmac
import json
import struct
import threading

import numpy as np
import pytest
import sqlalchemy as sa
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey, X25519PublicKey
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from privagg.errors import ParameterError
from privagg.protocols.registry import calibrate
from privagg.service import storage
from privagg.service.shuffle.client import Report
from privagg.service.shuffle.collector import Collector, batch_stream
from privagg.service.tasks import create_task, seal_messages
from privagg.service.web import Refused
from service_deployment import AUTH, deploy, users

N = 200


@pytest.fixture
def shuffle(databases):
    """A blanket-hist task (shuffle model, one batch of all N reports, or of >= ceil(G N) = 100 once closed)."""
    d = deploy(databases, calibrate("blanket-hist", epsilon=1.0, delta=1e-5, n_users=N, domain_size=5,
                                    honest_fraction=0.5), min_batch_size=N // 2)
    yield d
    for e in (d.analyzer.engine, d.collector.engine):
        e.dispose()


@pytest.fixture
def local(databases):
    """A grr task (local model: batches of at least 50 reports, any number of them)."""
    d = deploy(databases, calibrate("grr", epsilon=1.0, n_users=N, domain_size=5), min_batch_size=50)
    yield d
    for e in (d.analyzer.engine, d.collector.engine):
        e.dispose()


def _rfc9180_open(private_key: bytes, public_key: bytes, info: bytes, sealed: bytes) -> bytes:
    """RFC 9180's base-mode Open for DHKEM(X25519, HKDF-SHA256), HKDF-SHA256, AES-128-GCM, written from the RFC
    (sections 4, 5.1, 7.1) with the sealed message split as enc (its first 32 bytes) || ct."""
    def extract(salt, ikm):
        return hmac.new(salt or bytes(32), ikm, hashlib.sha256).digest()

    def expand(prk, info, length):
        out, block, i = b"", b"", 1
        while len(out) < length:
            block = hmac.new(prk, block + info + bytes([i]), hashlib.sha256).digest()
            out, i = out + block, i + 1
        return out[:length]

    kem, suite = b"KEM" + struct.pack(">H", 0x20), b"HPKE" + struct.pack(">HHH", 0x20, 1, 1)
    enc, ct = sealed[:32], sealed[32:]
    dh = X25519PrivateKey.from_private_bytes(private_key).exchange(X25519PublicKey.from_public_bytes(enc))
    shared = expand(extract(b"", b"HPKE-v1" + kem + b"eae_prk" + dh),
                    struct.pack(">H", 32) + b"HPKE-v1" + kem + b"shared_secret" + enc + public_key, 32)
    context = (b"\x00" + extract(b"", b"HPKE-v1" + suite + b"psk_id_hash")
               + extract(b"", b"HPKE-v1" + suite + b"info_hash" + info))
    secret = extract(shared, b"HPKE-v1" + suite + b"secret")
    key = expand(secret, struct.pack(">H", 16) + b"HPKE-v1" + suite + b"key" + context, 16)
    nonce = expand(secret, struct.pack(">H", 12) + b"HPKE-v1" + suite + b"base_nonce" + context, 12)
    return AESGCM(key).decrypt(nonce, ct, b"")


def test_the_encapsulated_key_is_the_first_bytes_of_a_seal():
    """The replay check keys on a seal's first 32 bytes: an independent RFC 9180 opener that takes them as the
    encapsulated key opens the message, and two seals of one message share no byte of it by chance."""
    params = calibrate("grr", epsilon=1.0, n_users=10, domain_size=5)
    task, private_key = create_task(params)
    layout = params.layout
    batch = layout.batch({name: [1, 1] for name in layout.names})
    first, second = seal_messages(task, batch)
    record = np.empty(1, dtype=layout.record_dtype.newbyteorder("<"))
    for name in layout.names:
        record[name] = 1
    assert _rfc9180_open(private_key, task.public_key, task.info, first) == record.tobytes()
    assert first[:32] != second[:32]


def test_a_captured_report_resent_under_a_new_report_id_is_refused(local):
    d = local
    (victim, attacker, honest), _ = users(d, [1, 2, 3], np.random.default_rng(1))
    assert d.post(victim).status_code == 201
    for name, ciphertexts in (("the whole report", victim.ciphertexts),
                              ("one message among fresh ones", victim.ciphertexts[:1] + attacker.ciphertexts)):
        forged = Report(d.task.task_id, "ab" * 16, attacker.token, d.task.key_id, tuple(ciphertexts))
        answer = d.post(forged)
        assert (answer.status_code, answer.json()["error"]) == (409, "replayed_message"), name
    twice = Report(d.task.task_id, "cd" * 16, attacker.token, d.task.key_id, attacker.ciphertexts * 2)
    assert d.post(twice).json()["error"] == "replayed_message"  # one message twice in one report
    assert d.stored() == 1 and d.refused("replayed_message") == 3
    assert d.post(attacker).status_code == 201 and d.post(honest).status_code == 201  # the token was not spent
    assert d.post(victim).json() == {"status": "already stored"}  # the victim's own retry is still a retry


def test_a_replay_is_refused_after_a_restart_and_after_release(local):
    d = local
    reports, _ = users(d, np.arange(60) % 5, np.random.default_rng(2))
    d.store(reports[:59])
    restarted = Collector(d.collector.engine, d.collector.fetch_task, d.collector.forward, quiet=0.0)  # a restart
    spare = d.collector.issue_tokens(d.task.task_id, 2)
    replay = Report(d.task.task_id, "ef" * 16, spare[0], d.task.key_id, reports[0].ciphertexts)
    with pytest.raises(Refused, match="encapsulated key"):
        restarted.accept(d.task.task_id, json.dumps(replay.to_dict()).encode())
    restarted.accept(d.task.task_id, json.dumps(reports[59].to_dict()).encode())
    assert restarted.release_batches() == 1 and d.stored() == 0
    late = Report(d.task.task_id, "fe" * 16, spare[1], d.task.key_id, reports[1].ciphertexts)
    with pytest.raises(Refused, match="encapsulated key"):  # its batch is out: the replay would count twice
        restarted.accept(d.task.task_id, json.dumps(late.to_dict()).encode())


def test_one_writer_group_stores_new_reports_by_its_writes_and_judges_the_others_one_by_one(local):
    """The writer's group of new reports is stored by its writes alone (the token's update and the primary keys
    are the checks: no token, report id or encapsulation is looked up); one that holds a retry, a forged or
    spent token, a used report id or a replay, in the database or earlier in the group, is judged report by
    report, the new ones stored (collector.py, Collector._store_group)."""
    d, c = local, local.collector
    (*first, a, e, f, g), _ = users(d, np.arange(14) % 5, np.random.default_rng(4))
    spare = c.issue_tokens(d.task.task_id, 3)
    statements: list[str] = []
    sa.event.listen(c.engine, "before_cursor_execute", lambda *args: statements.append(args[2]))

    def group(reports: list[Report]) -> list:
        with c.engine.begin() as connection:
            outcomes = c._store_group(connection, [c.check(d.task, json.dumps(r.to_dict()).encode())
                                                   for r in reports])
        return [o if isinstance(o, str) else o.reason for o in outcomes]

    assert group(first) == ["stored"] * 10
    assert [s for s in statements if s.lstrip().upper().startswith("SELECT") and
            any(table in s for table in ("tokens", "encapsulations", "reports"))] == []
    assert d.stored() == 10
    forged = Report(d.task.task_id, "ab" * 16, "not-issued", d.task.key_id, a.ciphertexts)
    spent = Report(d.task.task_id, "cd" * 16, first[1].token, d.task.key_id, e.ciphertexts)
    reused_id = Report(d.task.task_id, first[2].report_id, spare[0], d.task.key_id, f.ciphertexts)
    replay = Report(d.task.task_id, "ef" * 16, spare[1], d.task.key_id, first[3].ciphertexts)
    e_again = Report(d.task.task_id, "01" * 16, e.token, d.task.key_id, g.ciphertexts)
    replay_here = Report(d.task.task_id, "23" * 16, spare[2], d.task.key_id, a.ciphertexts)
    assert group([a, first[0], forged, spent, reused_id, replay, e, e_again, replay_here, f]) == [
        "stored", "already stored", "bad_token", "token_used", "duplicate_report_id", "replayed_message", "stored",
        "token_used", "replayed_message", "stored"]
    assert d.stored() == 13 and c.counts(d.task.task_id)["reports_waiting"] == 13


def test_concurrent_replays_through_two_collector_processes_store_one(local, databases):
    """Two collectors over one database (as two processes would be), 16 reports sharing one captured message
    sent at once: exactly one is stored; the others are refused, at once or when sent again."""
    d = local
    (victim,), _ = users(d, [0], np.random.default_rng(3))
    second = Collector(storage.connect(databases["collector"], "collector"), d.collector.fetch_task, None)
    collectors = [d.collector, second]
    tokens = d.collector.issue_tokens(d.task.task_id, 16)
    bodies = [json.dumps(Report(d.task.task_id, f"{i:032x}", token, d.task.key_id, victim.ciphertexts).to_dict())
              .encode() for i, token in enumerate(tokens)]
    outcomes: list = [None] * 16
    start = threading.Barrier(16)

    def send(i: int) -> None:
        start.wait()
        for _attempt in range(20):  # a 503 (the group lost a race with the other process) is sent again
            try:
                outcomes[i] = collectors[i % 2].accept(d.task.task_id, bodies[i])
                return
            except Refused as refusal:
                outcomes[i] = refusal.reason
                if refusal.status != 503:
                    return

    threads = [threading.Thread(target=send, args=(i,)) for i in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(outcomes) == ["replayed_message"] * 15 + ["stored"] and d.stored() == 1
    second.engine.dispose()


def test_a_new_task_is_fetched_once_by_fifty_first_requests(databases):
    """The first use of a task on a fresh collector: 50 requests at once make one fetch from the analyzer and no
    error; a second collector over the same database meeting it at the same moment stores it once."""
    task, _ = create_task(calibrate("grr", epsilon=1.0, n_users=N, domain_size=5))
    fetches = []
    gate = threading.Event()

    def fetch(task_id):
        fetches.append(task_id)
        gate.wait(2)
        return task.to_json()

    engines = [storage.connect(databases["collector"], "collector") for _ in range(2)]
    collectors = [Collector(e, fetch, None) for e in engines]
    errors = []

    def first(i: int) -> None:
        try:
            assert collectors[i % 2].task(task.task_id).task_id == task.task_id
        except Exception as err:  # noqa: BLE001 - any failure is the test's finding
            errors.append(repr(err))

    threads = [threading.Thread(target=first, args=(i,)) for i in range(50)]
    for t in threads:
        t.start()
    gate.set()
    for t in threads:
        t.join()
    assert errors == [] and len(fetches) == 2  # one per collector process, not one per request
    with engines[0].connect() as c:
        assert c.execute(sa.select(sa.func.count()).select_from(storage.collector_tasks)).scalar_one() == 1
    for e in engines:
        e.dispose()


def _forge(d, reports: int, rows, batch_id: str = "aa" * 16):
    """POST a batch the attacker built, with the collector's token."""
    blob = batch_stream(d.task.task_id, batch_id, reports, np.array([list(r) for r in rows], dtype=np.uint8))
    return d.A.post(f"/tasks/{d.task.task_id}/batches/{batch_id}", content=blob, headers=AUTH)


def test_the_analyzer_refuses_batches_that_break_the_tasks_rules(shuffle):
    """With the collector's token: a 10-report batch for a task whose minimum is 100, a report count above the
    task's n users, a second batch for a shuffle task; each 409, counted, nothing applied."""
    d = shuffle
    reports, _ = users(d, np.arange(N) % 5, np.random.default_rng(4))
    sealed = [c for r in reports for c in r.ciphertexts]
    for count, rows, reason in ((10, sealed[:10], "batch_too_small"), (N + 1, sealed, "report_count")):
        answer = _forge(d, count, rows)
        assert (answer.status_code, answer.json()["error"]) == (409, reason), answer.text
    assert d.A.get(f"/tasks/{d.task.task_id}/result").json()["error"] == "not_released"
    assert _forge(d, N, sealed).status_code == 200
    second = _forge(d, N, sealed, batch_id="bb" * 16)
    assert (second.status_code, second.json()["error"]) == (409, "second_batch")
    assert d.result()["collection"]["batches"] == 1
    for reason in ("batch_too_small", "report_count", "second_batch"):
        assert d.analyzer.registry.get_sample_value("privagg_requests_refused_total", {"reason": reason}) == 1


def test_a_report_count_that_does_not_fit_is_refused_without_a_500(local):
    """The red team's 999999999999 set the count to 10^12 on SQLite and gave a 500 on PostgreSQL."""
    d = local
    reports, _ = users(d, np.arange(60) % 5, np.random.default_rng(5))
    sealed = [c for r in reports for c in r.ciphertexts]
    for count in (999_999_999_999, 2**31):
        answer = _forge(d, count, sealed)
        assert (answer.status_code, answer.json()["error"]) == (409, "report_count"), answer.text
    cap = d.task.message_cap  # 17 for grr: one message, and the cap's slack of 16
    answer = _forge(d, 50, sealed + sealed[:1] * (50 * cap - 59))  # one message more than 50 reports may carry
    assert (answer.status_code, answer.json()["error"]) == (409, "report_count")
    answer = _forge(d, 50, sealed)  # 60 messages from 50 reports of grr's one message each: within the cap
    assert answer.status_code == 200 and d.result()["collection"]["reports"] == 50


def test_repeated_ciphertexts_are_dropped_and_counted_within_and_across_batches(local):
    d = local
    reports, _ = users(d, np.arange(100) % 5, np.random.default_rng(6))
    sealed = [c for r in reports for c in r.ciphertexts]
    assert _forge(d, 50, sealed[:50] + [sealed[0]] * 49).status_code == 200  # one ciphertext 50 times
    result = d.result()
    assert result["collection"]["duplicates"] == 49 and result["messages"]["total"] == 50
    assert any("49 messages repeated" in w for w in result["warnings"])
    # the same ciphertexts under a new batch id: all dropped, and no report counted for them
    assert _forge(d, 50, sealed[:50], batch_id="cc" * 16).status_code == 200
    result = d.result()
    assert result["collection"] == {"reports": 50, "batches": 2, "unopened": 0, "malformed": 0, "duplicates": 99}
    assert result["messages"]["total"] == 50
    # a batch mixing new messages with old ones: the old dropped, the new counted
    assert _forge(d, 50, sealed[25:100], batch_id="dd" * 16).status_code == 200
    result = d.result()
    assert result["collection"]["duplicates"] == 124 and result["messages"]["total"] == 100
    assert d.analyzer.registry.get_sample_value("privagg_messages_dropped_total", {"reason": "duplicate"}) == 124


def test_no_result_before_a_release(shuffle):
    d = shuffle
    answer = d.A.get(f"/tasks/{d.task.task_id}/result")
    assert answer.status_code == 409 and answer.json()["error"] == "not_released"
    assert f"once n = {N} reports came, or at privagg task close once at least {N // 2} did" in answer.json()["detail"]


def test_an_early_closed_task_is_judged_by_the_users_who_reported(shuffle):
    """Closed at ceil(G n) = 100 of 200 reports: the calibration covers exactly that case, so the result carries
    no caveat; the expected message count follows the 100 who reported."""
    d = shuffle
    reports, _ = users(d, np.arange(N // 2) % 5, np.random.default_rng(7))
    d.store(reports)
    d.collector.close(d.task.task_id)
    assert d.collector.release_batches() == 1
    result = d.result()
    assert result["collection"]["reports"] == N // 2 and result["privacy"]["caveats"] == []
    with d.collector.engine.connect() as c:  # released and closed: the replay record is no longer needed
        assert c.execute(sa.select(sa.func.count()).select_from(storage.encapsulations)).scalar_one() == 0


def test_closing_a_task_short_of_its_minimum_names_the_shortfall(shuffle):
    d = shuffle
    reports, _ = users(d, np.arange(90) % 5, np.random.default_rng(8))
    d.store(reports)
    with pytest.raises(ParameterError, match=rf"got {d.task.task_id}, with 90 reports waiting of the 100 needed "
                                             r"\(10 short\): wait for 10 more reports.*honest fraction") as refused:
        d.collector.close(d.task.task_id)
    assert "--min-batch-size" not in str(refused.value)  # it is ceil(G n) already (a reviewer's finding)
    status = d.collector.counts(d.task.task_id)
    assert status["closed"] is False and status["reports_needed"] == 10 and status["min_batch_size"] == 100


def test_privagg_result_says_the_result_is_not_released_yet(shuffle, monkeypatch):
    import httpx
    from typer.testing import CliRunner

    from privagg.cli import app

    d = shuffle
    monkeypatch.setattr(httpx, "get", lambda url, params, timeout, headers: d.A.get(
        url.removeprefix("http://analyzer"), params=params, headers=headers))
    out = CliRunner().invoke(app, ["result", "--analyzer", "http://analyzer", "--task", d.task.task_id])
    assert out.exit_code == 2 and "a task whose result was released" in out.output
    assert "no batch was applied" in out.output and "Traceback" not in out.output


def test_a_batch_counting_more_reports_than_its_messages_carry_is_said_to_bias_the_estimates(local):
    """A reviewer's forged batch (the collector's token): one message counted as 5,000 reports gave grr an estimate
    of -2866 with no word. The analyzer takes a batch's count on trust (it cannot see reports), but the release now
    says its messages fall short of what that many reports send, and that the estimates may be biased; the
    duplicates' warning no longer says the reports were counted once."""
    d = local
    reports, _ = users(d, np.arange(101) % 5, np.random.default_rng(9))
    sealed = [c for r in reports for c in r.ciphertexts]
    assert _forge(d, 100, sealed[:100]).status_code == 200
    assert _forge(d, 5000, sealed[100:] + [sealed[0]] * 99, batch_id="ee" * 16).status_code == 200  # 1 new
    result = d.result()
    assert result["collection"]["reports"] == 5100 and result["messages"]["total"] == 101
    assert any(c.startswith("the analyzer received 101 messages where the guarantee counts on 5100 from 5100 users")
               and c.endswith("the estimates may be biased") for c in result["privacy"]["caveats"])
    assert any("but the 5100 reports are the batches' own counts" in w for w in result["warnings"])
