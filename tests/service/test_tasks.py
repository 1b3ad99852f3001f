"""Tasks and HPKE-sealed reports: round trips, what does not open, what a task refuses, and a light SDK."""

import json
import subprocess
import sys

import numpy as np
import pytest

from privagg.service.shuffle.client import Client
from privagg.errors import ParameterError
from privagg.protocols import registry
from privagg.service.tasks import Task, create_task, encapsulation_digests, open_messages, seal_messages

N = 10_000


@pytest.fixture(scope="module")
def fe1_task():
    params = registry.calibrate("fe1", epsilon=1.0, delta=1e-8, n_users=N, domain_size=2**20, bins=200)
    return create_task(params)


def test_task_round_trips_through_json(fe1_task):
    task, _ = fe1_task
    again = Task.from_json(task.to_json())
    assert again == task and again.min_batch_size == N and len(bytes.fromhex(task.task_id)) == 16


def test_a_report_opens_to_the_users_messages(fe1_task):
    task, private = fe1_task
    report = Client.from_json(task.to_json()).report(123_456, token="t0")
    params = task.parameters
    assert report.task_id == task.task_id and len(bytes.fromhex(report.report_id)) == 16
    assert all(len(c) == params.layout.record_dtype.itemsize + 32 + 16 for c in report.ciphertexts)  # enc, tag
    opened = open_messages(task, private, list(report.ciphertexts))
    assert opened.unopened == 0 and len(opened.messages) == len(report.ciphertexts) >= 1
    clean, dropped = params.layout.validate(opened.messages)
    assert dropped == 0
    m = opened.messages  # the real message is the one whose hash of the value matches
    assert (params.hash.evaluate(m["u"], m["v"], np.full(len(m), 123_456)) == m["w"]).any()
    assert Client(task).report(123_456, "t1").report_id != report.report_id  # fresh ids


def test_what_does_not_open_is_counted(fe1_task):
    task, private = fe1_task
    messages = registry.client(task.parameters).randomize([1, 2, 3], 0)
    sealed = seal_messages(task, messages)
    other_task, other_key = create_task(task.parameters)
    foreign = seal_messages(other_task, messages)[:2]  # another task's key and info
    tampered = bytearray(sealed[0])
    tampered[-1] ^= 1
    bad = [bytes(tampered), sealed[1][:-3], b"", b"\x00" * 80, *foreign]
    opened = open_messages(task, private, sealed + bad)
    assert opened.unopened == len(bad) and len(opened.messages) == len(sealed)
    for name in task.parameters.layout.names:
        assert np.array_equal(np.sort(opened.messages[name]), np.sort(np.asarray(messages[name])))
    # a message sealed for one task does not open under another task id, even with the right key
    same_key_other_id = Task("ab" * 16, task.parameters, task.public_key, 0, N)
    assert open_messages(same_key_other_id, private, sealed).unopened == len(sealed)
    assert open_messages(other_task, other_key, sealed).unopened == len(sealed)


@pytest.mark.parametrize("change,field", [
    (dict(task_id="xyz"), "task_id"), (dict(public_key="00" * 31), "public_key"), (dict(key_id=256), "key_id"),
    (dict(min_batch_size=N - 1), "min_batch_size"), (dict(suite="RSA"), "task.suite"), (dict(kem="rsa"), "task.kem"),
    (dict(kem="mlkem768-x25519", suite="MLKEM768-X25519, HKDF-SHA256, AES-128-GCM"), "public_key")])  # too short
def test_a_task_refuses_bad_fields(fe1_task, change, field):
    data = {**fe1_task[0].to_dict(), **change}
    with pytest.raises(ParameterError) as err:
        Task.from_dict(data)
    assert err.value.field == field


def test_the_hybrid_kem_seals_and_opens(fe1_task):
    classic, _ = fe1_task
    task, private = create_task(classic.parameters, kem="mlkem768-x25519")
    assert Task.from_json(task.to_json()) == task and len(private) == 64 + 32
    messages = registry.client(task.parameters).randomize([1, 2, 3], 0)
    sealed = seal_messages(task, messages)
    assert {len(c) for c in sealed} == {task.parameters.layout.record_dtype.itemsize + 1120 + 16}
    opened = open_messages(task, private, sealed)
    assert opened.unopened == 0 and len(opened.messages) == len(messages)
    # the hybrid key's X25519 half alone does not open it
    assert open_messages(task, private[:64] + create_task(task.parameters)[1], sealed).unopened == len(sealed)


@pytest.mark.parametrize("kem, size", [("x25519", 32), ("mlkem768-x25519", 1120)])
def test_an_encapsulations_digest_is_the_sha256_of_its_first_bytes_for_rows_or_an_array(fe1_task, kem, size):
    import hashlib

    task, _ = create_task(fe1_task[0].parameters, kem=kem)
    sealed = seal_messages(task, registry.client(task.parameters).randomize([1, 2, 3, 4], 0))
    expected = [hashlib.sha256(c[:size]).digest() for c in sealed]
    rows = np.frombuffer(b"".join(sealed), dtype=np.uint8).reshape(len(sealed), -1)
    assert encapsulation_digests(task, sealed) == expected == encapsulation_digests(task, rows)
    assert encapsulation_digests(task, rows[::2]) == expected[::2]  # a strided view: the same digests
    assert encapsulation_digests(task, rows[:0]) == []


def test_only_one_round_protocols_make_tasks():
    params = registry.calibrate("laplace", epsilon=1.0, n_users=100, domain_size=10)
    task, _ = create_task(registry.calibrate("grr", epsilon=1.0, n_users=100, domain_size=10), min_batch_size=1)
    data = {**task.to_dict(), "parameters": params.to_dict()}
    with pytest.raises(ParameterError) as err:
        Task.from_dict(data)
    assert err.value.field == "parameters.protocol"


def test_the_sdk_loads_no_heavy_module(fe1_task):
    task, _ = fe1_task
    code = (f"import sys; from privagg.service.shuffle.client import Client; c = Client.from_json({task.to_json()!r}); "
            "r = c.report(5, 't'); print(sorted(m for m in ('scipy', 'numba', 'pyarrow', 'dask', 'typer') "
            "if m in sys.modules), len(r.ciphertexts) > 0)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[] True"
    assert json.loads(json.dumps(Client(task).report(5, "t").to_dict()))["token"] == "t"
