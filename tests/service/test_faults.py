"""Both services as real processes under kill -9 and under load, on SQLite and on PostgreSQL (slow).

Exactly-once: every report the collector acknowledged (2xx) is counted once in the analyzer's result, and
no refused one is, whatever was killed when (tests/service_runs.py runs the scenarios).
"""

import resource

import pytest

from service_deployment import self_signed
from service_runs import kill_run, load_run

pytestmark = pytest.mark.slow


def test_kill_9_of_either_party_loses_and_repeats_no_report(databases, tmp_path):
    # 5,000 clients: the kills still land while they send (make bench part 10 runs 20,000)
    run = kill_run(databases, tmp_path / "logs", clients=5_000, seed=11)
    assert [k["killed"] for k in run["kills"]] == ["collector", "analyzer", "collector"]
    assert run["kills"][0]["reports_waiting"] < 5_000  # the first kill came while clients were sending
    assert run["failed"] == 0 and run["acknowledged"] == 5_000  # every client got through, retrying
    assert run["refused"] == 100  # 50 forged tokens, 50 reused report ids
    assert run["counted_reports"] == run["acknowledged"]
    assert run["counted_messages"] == run["acknowledged_messages"] and run["dropped"] == 0
    assert run["final"]["reports_waiting"] == 0 and run["final"]["reports_released"] == 5_000


def test_ten_thousand_concurrent_clients(databases, tmp_path):
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard < 12_000:
        pytest.skip(f"10,000 connections need more open files than this machine allows (hard limit {hard})")
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))  # the services started below inherit it
    try:
        run = load_run(databases, tmp_path / "logs", clients=10_000, concurrency=10_000)
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    assert run["failed"] == 0 and run["refused"] == 0 and run["acknowledged"] == 10_000
    assert run["counted_reports"] == 10_000 and run["counted_messages"] == run["acknowledged_messages"]


def test_demo_service_runs_the_bundled_words_through_both_services(tmp_path):
    import json
    import subprocess
    import sys

    out = subprocess.run([sys.executable, "-m", "privagg", "demo-service", "--users", "3000", "--vocabulary", "50",
                          "--workdir", str(tmp_path), "--json"], capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr
    run = json.loads(out.stdout)
    service, simulation = run["service"], run["simulation"]
    assert service["privacy"]["private"] is True and simulation["privacy"]["private"] is False
    assert run["private"] is False and service["private"] is True  # the document holds the seeded simulation
    assert service["collection"] == {"reports": 3000, "batches": 1, "unopened": 0, "malformed": 0, "duplicates": 0}
    assert run["load"]["acknowledged"] == 3000 and run["load"]["failed"] == 0
    assert len(service["estimates"]) == len(simulation["estimates"]) == 50
    # (whether they agree is statistical and the service's randomness is not seeded: the deterministic check
    # is test_service.py's, which finds the service's aggregate equal to the plaintext messages' exactly)


def test_both_services_over_tls(tmp_path, monkeypatch):
    import subprocess
    import sys

    from privagg.protocols.registry import calibrate
    from privagg.service.shuffle.client import Client, submit
    from privagg.service.local import free_port, wait_ready
    from privagg.service.shuffle.deployment import LocalDeployment

    cert, key = self_signed(tmp_path)
    monkeypatch.setenv("SSL_CERT_FILE", str(cert))  # the SDK checks the services' certificate against it
    dep = LocalDeployment({role: f"sqlite:///{tmp_path}/{role}.db" for role in ("analyzer", "collector")}, tmp_path)
    task = dep.create_task(calibrate("grr", epsilon=1.0, n_users=10, domain_size=4), min_batch_size=1)
    (token,) = dep.issue_tokens(task.task_id, 1)
    ports = {"analyzer": free_port(), "collector": free_port()}
    tls = ["--tls-cert", str(cert), "--tls-key", str(key)]
    processes = []
    try:
        for role, extra in (("analyzer", []), ("collector", ["--analyzer", f"https://127.0.0.1:{ports['analyzer']}",
                                                             "--analyzer-ca", str(cert), "--batch-interval", "0.2"])):
            processes.append(subprocess.Popen([sys.executable, "-m", "privagg", "serve", role, "--db", dep.dbs[role],
                                               "--port", str(ports[role]), *tls, *extra], env=dep.env,
                                              stderr=open(tmp_path / f"{role}.log", "wb")))
            wait_ready(f"https://127.0.0.1:{ports[role]}")
        collector = f"https://127.0.0.1:{ports['collector']}"
        analyzer = f"https://127.0.0.1:{ports['analyzer']}"
        assert submit(collector, Client.fetch(analyzer, task.task_id).report(2, token)) == "stored"
        dep.ports = ports
        dep.url = lambda role: f"https://127.0.0.1:{ports[role]}"
        dep.wait_released(task.task_id, seconds=30)
        assert dep.result(task.task_id)["collection"]["reports"] == 1
    finally:
        for process in reversed(processes):  # SIGTERM: a graceful shutdown (uvicorn then re-raises the signal)
            process.terminate()
            assert process.wait(timeout=30) == -15
    for role in ("collector", "analyzer"):
        assert f'"event": "{role} stopped"' in (tmp_path / f"{role}.log").read_text()


def test_the_analyzer_opens_batches_on_a_dask_cluster(tmp_path):
    """open_analyzer(dask_scheduler=...) opens a batch on the cluster's workers: the same aggregate as one process."""
    import numpy as np
    import sqlalchemy as sa
    from dask.distributed import LocalCluster

    from privagg.protocols.registry import calibrate, client as make_client
    from privagg.service.shuffle.analyzer import AnalyzerService, open_analyzer
    from privagg.service.shuffle.analyzer_batches import SERIAL_BELOW
    from privagg.service.shuffle.collector import batch_stream
    from privagg.service.keys import KeyEncryptionKey
    from privagg.service.storage import aggregates, analyzer_tasks, connect
    from privagg.service.tasks import seal_messages

    params = calibrate("fe1", epsilon=1.0, delta=1e-6, n_users=2_000, domain_size=100)
    kek = KeyEncryptionKey.generate()
    local = AnalyzerService(connect(f"sqlite:///{tmp_path}/local.db", "analyzer"), kek=kek)
    task = local.create_task(params)
    batch = make_client(params).randomize(np.arange(2_000) % 100, np.random.default_rng(3))
    assert len(batch) > SERIAL_BELOW  # so the cluster does open it
    sealed = np.frombuffer(b"".join(seal_messages(task, batch)), dtype=np.uint8).reshape(len(batch), -1)
    blob = batch_stream(task.task_id, "ab" * 16, 2_000, sealed)
    connect(f"sqlite:///{tmp_path}/dask.db", "analyzer").dispose()  # its database first: a service makes none
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None) as cluster:
        remote = open_analyzer(f"sqlite:///{tmp_path}/dask.db", dask_scheduler=cluster.scheduler_address, kek=kek)
        with local.engine.connect() as source, remote.engine.begin() as c:  # the same task and key
            for table in (analyzer_tasks, aggregates):
                c.execute(table.insert(), [dict(r._mapping) for r in source.execute(sa.select(table))])
        assert remote.apply_batch(task.task_id, "ab" * 16, blob) == "applied"
        remote.executor.close()
    local.apply_batch(task.task_id, "ab" * 16, blob)
    assert remote.result(task.task_id)["estimates"] == local.result(task.task_id)["estimates"]
    assert remote.result(task.task_id)["collection"]["reports"] == 2_000


def test_the_service_commands_end_to_end(tmp_path):
    """calibrate -> task create -> db upgrade --create (the collector's) -> serve (both) -> tokens issue (the task
    fetched from the analyzer) -> submit -> loadgen -> result -> task close, as docs/deployment.md types them."""
    import json
    import subprocess
    import sys

    from privagg.service.shuffle.deployment import LocalDeployment

    def privagg(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "privagg", *args], capture_output=True, text=True, timeout=300,
                              cwd=tmp_path)

    dbs = {role: f"sqlite:///{tmp_path}/{role}.db" for role in ("analyzer", "collector")}
    (tmp_path / "params.json").write_text(privagg("calibrate", "grr", "--epsilon", "1", "--users", "40",
                                                  "--domain", "4", "--json").stdout)
    made = privagg("task", "create", "--params", "params.json", "--db", dbs["analyzer"], "--min-batch-size", "10")
    assert made.returncode == 0, made.stderr
    task = made.stdout.split()[-1]
    assert privagg("db", "upgrade", "--create", "--role", "collector", "--db", dbs["collector"]).returncode == 0
    (tmp_path / "values.csv").write_text("value\n" + "".join(f"{i % 4}\n" for i in range(39)))
    with LocalDeployment(dbs, tmp_path / "logs") as dep:
        assert privagg("tokens", "issue", "--task", task, "--count", "40", "--db", dbs["collector"], "--analyzer",
                       dep.url("analyzer"), "--output", "tokens.txt").returncode == 0
        tokens = (tmp_path / "tokens.txt").read_text().split()
        assert len(set(tokens)) == 40 and (tmp_path / "tokens.txt").stat().st_mode & 0o077 == 0
        (tmp_path / "rest.txt").write_text("\n".join(tokens[1:]) + "\n")
        collector = dep.url("collector")
        sent = privagg("submit", "--collector", collector, "--task", task, "--token", tokens[0], "--value", "2",
                       "--analyzer", dep.url("analyzer"))
        assert sent.returncode == 0 and "report stored" in sent.stdout and "warning" not in sent.stderr
        again = privagg("submit", "--collector", collector, "--task", task, "--token", tokens[0], "--value", "3")
        assert again.returncode == 2 and "token_used" in again.stderr and "came through the collector" in again.stderr
        load = privagg("loadgen", "--collector", collector, "--task", task, "--input", "values.csv", "--tokens",
                       "rest.txt", "--concurrency", "8", "--json")
        assert load.returncode == 0, load.stderr
        assert json.loads(load.stdout)["acknowledged"] == 39
        dep.wait_released(task, seconds=60)
        result = privagg("result", "--analyzer", dep.url("analyzer"), "--task", task, "--json")
        assert privagg("task", "close", "--task", task, "--db", dbs["collector"]).returncode == 0
        assert dep.status(task)["closed"] is True
    report = json.loads(result.stdout)
    assert report["collection"]["reports"] == 40 and report["messages"]["total"] == 40
    gone = privagg("submit", "--collector", collector, "--task", task, "--token", tokens[1], "--value", "1")
    assert gone.returncode == 2 and "the task could not be fetched" in gone.stderr  # one line, no traceback
    assert report["privacy"]["private"] is True and report["protocol"] == "grr"
