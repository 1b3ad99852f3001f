"""sparse-vector-hashed through the services over a huge dimension: public candidate coordinates, and the paper's
two stages as one task (``--discover-phi``: fe-hh over the B + 1 cells discovers the coordinates, FE1 estimates
them), each exact against its analyzer over the plaintext messages, and the abuse a staged task adds."""

import base64
import json

import numpy as np
import pytest

from privagg.core.messages import MessageBatch
from privagg.errors import ParameterError
from privagg.protocols.registry import analyzer as make_analyzer, calibrate
from privagg.service.shuffle.client import Client, Report
from privagg.service.tasks import Task
from service_deployment import deploy, users

DIMENSION = 2**30
HEAVY = (12_345, 2**29 + 7)  # held by about 40% and 30% of the users, weights in [0.5, 1]: sums well above phi n


def _pairs(n: int, dimension: int, rng) -> list[np.ndarray]:
    heavy = [h % dimension for h in HEAVY]
    coordinates = rng.choice([*heavy, *rng.integers(dimension, size=50)], p=[0.4, 0.3] + [0.3 / 50] * 50, size=n)
    return [np.array([c, w]) for c, w in zip(coordinates, rng.uniform(0.5, 1, size=n))]


def _released(d) -> None:
    """Release until every batch is acknowledged: the task's own batch waits (503) for its first stage's."""
    for _ in range(3):
        d.collector.release_batches()
    with d.collector.engine.connect() as c:
        from privagg.service.storage import batches

        assert all(row.acknowledged for row in c.execute(batches.select()))


@pytest.mark.parametrize("n, dimension", [(1_000, 2**12), pytest.param(2_000, DIMENSION, marks=pytest.mark.slow)])
def test_a_staged_task_discovers_its_coordinates_then_estimates_them_exactly(databases, n, dimension):
    """One task, two stages: the result estimates exactly the coordinates fe-hh discovered over the first stage's
    plaintext messages, exactly as FE1's analyzer over the second stage's, and states both stages' guarantee."""
    params = calibrate("sparse-vector-hashed", epsilon=2.0, delta=1e-6, n_users=n, domain_size=dimension)
    d = deploy(databases, params, discover_phi=0.1)
    stage = d.task.discovery
    assert stage.parameters.protocol == "fe-hh" and stage.parameters.domain_size == dimension + 1
    assert Task.from_json(d.A.get(f"/tasks/{d.task.task_id}").text).discovery == stage
    first: list = []
    reports, sent = users(d, _pairs(n, dimension, np.random.default_rng(3)), np.random.default_rng(4), first)
    d.store(reports)
    _released(d)

    hh = make_analyzer(stage.parameters)
    found = hh.finalize(hh.agg_update(hh.agg_init(), MessageBatch.concatenate(first)))
    coordinates = sorted(int(i) for i in found.items if i < dimension)
    assert set(coordinates) & {h % dimension for h in HEAVY}
    fe1 = make_analyzer(params, np.array(coordinates))
    direct = fe1.finalize(fe1.agg_update(fe1.agg_init(), MessageBatch.concatenate(sent)))
    result = d.result()
    assert {e["item"]: e["estimate"] for e in result["estimates"]} == dict(zip(coordinates, direct.total.tolist()))
    assert result["discovery"]["coordinates"] == len(coordinates) and result["discovery"]["phi"] == 0.1
    assert result["discovery"]["survivors"] == list(found.survivors)
    assert result["discovery"]["messages"]["total"] == len(MessageBatch.concatenate(first))
    assert (result["privacy"]["epsilon"], result["privacy"]["delta"]) == (4.0, 2e-6)  # basic composition
    event = result["privacy"]["event"]  # one composed event: the discovery, then the estimation
    assert event["type"] == "sequential" and [s["name"] for s in event["stages"]] == ["discovery", "estimation"]
    assert event["stages"][0]["event"]["epsilon"] == 2.0 and result["privacy"]["mechanism"].startswith("discovery: ")
    both = len(MessageBatch.concatenate(first)) + len(MessageBatch.concatenate(sent))
    assert result["messages"]["total"] == both  # both stages' messages, as a simulated staged run counts them
    assert result["privacy_profile"][1]["delta"] <= 2e-6
    assert result["collection"]["reports"] == n
    stage_analyzer, calls = d.analyzer.load(stage.task_id).analyzer, []
    finalize = stage_analyzer.finalize
    stage_analyzer.finalize = lambda aggregate: calls.append(1) or finalize(aggregate)
    again = d.result()  # the first stage's one batch is final: its list is not decoded again for each request
    assert calls == [] and (again["estimates"], again["discovery"]) == (result["estimates"], result["discovery"])
    del stage_analyzer.finalize
    stage_result = d.A.get(f"/tasks/{stage.task_id}/result").json()  # the first stage's own release: the list
    assert [h["item"] for h in stage_result["heavy_hitters"]] == [int(i) for i in found.items[np.argsort(
        -found.estimates, kind="stable")]]
    answer = d.A.post(f"/tasks/{d.task.task_id}/candidates", json={"candidates": [5]})
    assert answer.status_code == 400 and "a staged task estimates" in answer.json()["detail"]
    for e in (d.analyzer.engine, d.collector.engine):
        e.dispose()


def test_a_staged_task_that_discovers_nothing_says_so(tmp_path):
    """No coordinate reaches phi n: the task's batch is acknowledged without being opened, and its result is a 409
    naming the first stage (whose own result is the empty list), not estimates of nothing."""
    params = calibrate("sparse-vector-hashed", epsilon=2.0, delta=1e-6, n_users=500, domain_size=2**12)
    d = deploy({role: f"sqlite:///{tmp_path}/{role}.db" for role in ("collector", "analyzer")}, params,
               discover_phi=0.5)
    rng = np.random.default_rng(5)
    reports, _ = users(d, [np.array([rng.integers(2**12), 1.0]) for _ in range(500)], rng, [])
    d.store(reports)
    _released(d)
    answer = d.A.get(f"/tasks/{d.task.task_id}/result")
    assert answer.status_code == 409 and answer.json()["error"] == "nothing_discovered", answer.text
    assert d.task.discovery.task_id in answer.json()["detail"]
    assert d.A.get(f"/tasks/{d.task.discovery.task_id}/result").json()["heavy_hitters"] == []
    page = d.A.get(f"/console/tasks/{d.task.task_id}")
    assert page.status_code == 200 and "found no coordinate whose sum reaches phi n" in page.text
    (row,) = d.analyzer.overview(d.task.task_id)  # the list says so too (it said "released")
    assert row["state"] == "released: nothing to estimate (its first stage discovered nothing)"
    opened = d.analyzer.registry.get_sample_value("privagg_messages_opened_total")
    assert opened == sum(len(r.discovery) for r in reports)  # the first stage's only
    for e in (d.analyzer.engine, d.collector.engine):
        e.dispose()


@pytest.fixture
def staged(tmp_path):
    params = calibrate("sparse-vector-hashed", epsilon=2.0, delta=1e-6, n_users=100, domain_size=2**12)
    d = deploy({role: f"sqlite:///{tmp_path}/{role}.db" for role in ("collector", "analyzer")}, params,
               discover_phi=0.2)
    yield d
    for e in (d.analyzer.engine, d.collector.engine):
        e.dispose()


def test_a_staged_report_is_checked_stage_by_stage(staged):
    """The first stage's messages travel in the report's ``discovery`` field under the same token: missing, the
    wrong size, too many, one repeated, or given to a task without a first stage, each a 4xx with nothing stored;
    the first stage's task takes no report of its own."""
    d = staged
    (report,), _ = users(d, [np.array([7, 0.5])], np.random.default_rng(1), [])
    body = report.to_dict()
    sealed = body["discovery"][0]
    cases = {"missing": ({k: v for k, v in body.items() if k != "discovery"}, 400, "discovery must be a list"),
             "short": ({**body, "discovery": [sealed[:-8]]}, 400, "discovery[0] must be base64 of"),
             "too many": ({**body, "discovery": [sealed] * 1000}, 400, "discovery must be a list of at most"),
             "repeated": ({**body, "discovery": [sealed, sealed]}, 409, "share an HPKE encapsulated key")}
    for name, (case, status, detail) in cases.items():
        answer = d.C.post(f"/tasks/{d.task.task_id}/reports", json=case)
        assert answer.status_code == status and detail in answer.json()["detail"], (name, answer.text)
    assert d.stored() == 0
    direct = Report(d.task.discovery.task_id, report.report_id, report.token, d.task.discovery.key_id,
                    report.discovery)
    assert d.post(direct).status_code == 403  # the token is the task's, not its first stage's
    assert d.post(report).status_code == 201 and d.stored() == 2  # one report: a row for each stage
    (other,), _ = users(d, [np.array([8, 0.5])], np.random.default_rng(2), [])
    replay = {**other.to_dict(), "discovery": body["discovery"]}  # another token, the first one's stage messages
    answer = d.C.post(f"/tasks/{d.task.task_id}/reports", json=replay)
    assert answer.status_code == 409 and answer.json()["error"] == "replayed_message" and d.stored() == 2


def test_a_report_with_a_first_stage_is_refused_by_a_task_without_one(tmp_path):
    params = calibrate("sparse-vector-hashed", epsilon=2.0, delta=1e-6, n_users=100, domain_size=64)
    d = deploy({role: f"sqlite:///{tmp_path}/{role}.db" for role in ("collector", "analyzer")}, params)
    (report,), _ = users(d, [np.array([7, 0.5])], np.random.default_rng(1))
    body = {**report.to_dict(), "discovery": [base64.b64encode(report.ciphertexts[0]).decode()]}
    answer = d.C.post(f"/tasks/{d.task.task_id}/reports", json=body)
    assert answer.status_code == 400 and "discovery must be left out" in answer.json()["detail"] and d.stored() == 0
    for e in (d.analyzer.engine, d.collector.engine):
        e.dispose()


def test_closing_a_staged_task_closes_its_first_stage(staged):
    d = staged
    reports, _ = users(d, [np.array([7, 0.5])] * 100, np.random.default_rng(3), [])
    d.store(reports)
    d.collector.close(d.task.task_id)
    assert d.collector.counts(d.task.discovery.task_id)["closed"]
    _released(d)
    assert [d.analyzer.overview(t)[0]["reports"] for t in (d.task.task_id, d.task.discovery.task_id)] == [100, 100]


def test_a_staged_task_is_made_only_as_the_papers_two_stages(tmp_path):
    """--discover-phi: sparse-vector-hashed only, without candidates, every user honest; a task whose first stage
    does not match it (another domain, another protocol) does not load."""
    from privagg.service import storage
    from privagg.service.shuffle.analyzer import AnalyzerService
    from privagg.service.keys import KeyEncryptionKey

    service = AnalyzerService(storage.connect(f"sqlite:///{tmp_path}/a.db", "analyzer"), kek=KeyEncryptionKey.generate())
    svh = calibrate("sparse-vector-hashed", epsilon=1.0, delta=1e-6, n_users=100, domain_size=2**12)
    cases = [(calibrate("fe1", epsilon=1.0, delta=1e-6, n_users=100, domain_size=2**12), {}, "discover-phi"),
             (svh, {"candidates": [1]}, "discover-phi"),
             (calibrate("sparse-vector-hashed", epsilon=1.0, delta=1e-6, n_users=100, domain_size=2**12,
                        honest_fraction=0.9), {}, "honest-fraction"),
             (svh, {"discover_phi": 1.5}, "discover-phi")]
    for params, extra, field in cases:
        with pytest.raises(ParameterError) as err:
            service.create_task(params, **{"discover_phi": 0.1, **extra})
        assert err.value.field == field, err.value
    task = service.create_task(svh, discover_phi=0.1).to_dict()
    other = service.create_task(calibrate("fe-hh", epsilon=1.0, delta=1e-6, n_users=100, domain_size=2**11,
                                          phi=0.1)).to_dict()
    larger = service.create_task(calibrate("sparse-vector-hashed", epsilon=1.0, delta=1e-6, n_users=200,
                                           domain_size=2**12), discover_phi=0.1).to_dict()
    for change, field in (({"discovery": other}, "discovery.domain_size"),
                          ({"discovery": larger["discovery"]}, "discovery.n_users"),
                          ({"discovery": {**task, "discovery": None}}, "discovery.protocol")):
        with pytest.raises(ParameterError) as err:
            Task.from_dict({**task, **change})
        assert err.value.field == field
    service.engine.dispose()


def test_a_huge_dimension_task_answers_its_candidate_coordinates(databases):
    """sparse-vector-hashed over 2^30 coordinates with public candidates, given at creation and added after the
    batch: exactly FE1's analyzer over the plaintext messages with those coordinates."""
    n = 600
    params = calibrate("sparse-vector-hashed", epsilon=2.0, delta=1e-6, n_users=n, domain_size=DIMENSION)
    with pytest.raises(ParameterError, match="candidates"):
        deploy(databases, params, candidates=[DIMENSION])
    d = deploy(databases, params, candidates=[HEAVY[0]])
    reports, sent = users(d, _pairs(n, DIMENSION, np.random.default_rng(6)), np.random.default_rng(7))
    d.store(reports)
    _released(d)
    for added in ([], [HEAVY[1], 5]):
        if added:
            assert d.A.post(f"/tasks/{d.task.task_id}/candidates", json={"candidates": added}).json() == {
                "candidates": 3}
        codes = np.array(sorted([HEAVY[0], *added]))
        fe1 = make_analyzer(params, codes)
        direct = fe1.finalize(fe1.agg_update(fe1.agg_init(), MessageBatch.concatenate(sent)))
        got = {e["item"]: e["estimate"] for e in d.result()["estimates"]}
        assert got == dict(zip(codes.tolist(), direct.total.tolist()))
    for bad in (["7"], [7.0], [True]):
        answer = d.A.post(f"/tasks/{d.task.task_id}/candidates", json={"candidates": bad})
        assert answer.status_code == 400 and "integer coordinates" in answer.json()["detail"], answer.text
    for e in (d.analyzer.engine, d.collector.engine):
        e.dispose()


def test_the_sdk_sends_both_stages_in_one_report(staged):
    """Client.report: the first stage's messages sealed to the stage's key (they open there, as fe-hh messages of a
    cell), the second's to the task's, one report id and token."""
    from privagg.service.tasks import open_messages

    d = staged
    key = {}
    for task_id in (d.task.task_id, d.task.discovery.task_id):
        key[task_id] = d.analyzer.load(task_id).private_key
    report = Client.from_json(json.dumps(d.task.to_dict())).report([7, 1.0], "t")
    first = open_messages(d.task.discovery, key[d.task.discovery.task_id], report.discovery)
    assert first.unopened == 0 and len(first.messages) >= 1
    assert open_messages(d.task, key[d.task.discovery.task_id], report.ciphertexts).unopened == len(report.ciphertexts)
    assert open_messages(d.task, key[d.task.task_id], report.ciphertexts).unopened == 0


def test_task_create_discover_phi_prints_both_stages(tmp_path, monkeypatch):
    """The command line: one task made with its first stage, the composed guarantee said; refused, in one line, for
    another protocol."""
    from typer.testing import CliRunner

    from privagg.cli import app
    from privagg.service.keys import KeyEncryptionKey

    monkeypatch.setenv("PRIVAGG_KEK", KeyEncryptionKey.generate().export())
    db = f"sqlite:///{tmp_path}/a.db"
    for protocol, options in (("sparse-vector-hashed", {}), ("fe1", {})):
        params = calibrate(protocol, epsilon=0.5, delta=1e-7, n_users=10_000, domain_size=2**40, **options)
        (tmp_path / f"{protocol}.json").write_text(json.dumps(params.to_dict()))
    out = CliRunner().invoke(app, ["task", "create", "--params", str(tmp_path / "sparse-vector-hashed.json"), "--db", db,
                                   "--discover-phi", "0.01", "--json"])
    assert out.exit_code == 0, out.output
    task = Task.from_json(out.stdout.splitlines()[-1])
    assert task.discovery.parameters.phi == 0.01 and task.discovery.parameters.domain_size == 2**40 + 1
    out = CliRunner().invoke(app, ["task", "create", "--params", str(tmp_path / "sparse-vector-hashed.json"), "--db", db,
                                   "--discover-phi", "0.01"])
    assert out.exit_code == 0 and "its first stage: task" in out.output and "eps 1, delta 2e-07" in out.output
    out = CliRunner().invoke(app, ["task", "create", "--params", str(tmp_path / "fe1.json"), "--db", db,
                                   "--discover-phi", "0.01"])
    assert out.exit_code == 2 and out.output.startswith("error: discover-phi must be given for a sparse-vector-hashed"
                                                        " task"), out.output
