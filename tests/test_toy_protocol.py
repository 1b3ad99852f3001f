"""A new one-round protocol is one module and one registry entry (issue 45, item 3).

A toy protocol, written to a temporary module outside privagg with one :class:`ProtocolEntry` registered when it is
imported, is picked up, with no other file changed, by the command line (its commands, their --help, ``privagg
protocols``, analyze's choices), the JSON schemas (its name, its parameters, its calibrations), the contract tests
(run over it) and the analyzer service (a task created, its aggregate stored). Each runs in a fresh interpreter, so
the toy never enters this one's registry.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

# k-ary randomized response under another name: its own parameters, calibration, client and analyzer classes
TOY = '''
"""A toy protocol outside privagg: GRR's randomizer under its own name, in one module and one registry entry."""
import dataclasses
from dataclasses import dataclass
from typing import ClassVar

from privagg.protocols import local_baselines as lb
from privagg.protocols.kinds import Family, Topology
from privagg.protocols.registry import ProtocolEntry, register


@dataclass(frozen=True)
class ToyParameters(lb.GRRParameters):
    protocol: ClassVar[str] = "toy-rr"
    mechanism: ClassVar[str] = "toy randomized response: the item, or another uniformly"


def calibrate_toy(epsilon, delta, n_users, domain_size, calibration="exact"):
    grr = lb.calibrate_grr(epsilon, delta, n_users, domain_size, calibration)
    return ToyParameters(**{f.name: getattr(grr, f.name) for f in dataclasses.fields(grr)})


class ToyClient(lb.GRRClient):
    pass


class ToyAnalyzer(lb.GRRAnalyzer):
    pass


register(ProtocolEntry(
    name="toy-rr", title="Toy randomized response (a test's module)", family=Family.LOCAL_BASELINES,
    topology=Topology.LOCAL, trust="local (no trusted party)", messages_per_user="1", reference="a test",
    example=dict(epsilon=1.0, n_users=10_000, domain_size=100), calibrate=calibrate_toy, parameters=ToyParameters,
    client=ToyClient, analyzer=ToyAnalyzer, calibrations=("exact",), pure=True, small_domain=True))
'''

# what the toy must reach, run after the module registered it (the CLI and the schemas are generated at import)
SURFACES = '''
import json, sys
from pathlib import Path

import toy_rr  # noqa: F401  (registers "toy-rr")
from typer.testing import CliRunner

from privagg.cli import app
from privagg.reports import REPORT_TYPES, json_schema

work, out = Path(sys.argv[1]), {}
runner = CliRunner()


def run(*args):
    result = runner.invoke(app, [str(a) for a in args])
    return result.exit_code, result.stdout


out["protocols"] = run("protocols")
out["protocols_json"] = run("protocols", "--json")
out["calibrate_help"] = run("calibrate", "toy-rr", "--help")
out["estimate_help"] = run("estimate", "toy-rr", "--help")
out["analyze_help"] = run("analyze", "--help")
out["calibrate"] = run("calibrate", "toy-rr", "--epsilon", 1, "--users", 1000, "--domain", 8, "--json", "--output",
                       work / "params.json")
(work / "items.txt").write_text("\\n".join(str(i % 8) for i in range(1000)) + "\\n")
out["estimate"] = run("estimate", "toy-rr", "--epsilon", 1, "--domain", 8, "--input", work / "items.txt", "--seed",
                      1, "--json", "--write-messages", work / "msgs")
out["analyze"] = run("analyze", "toy-rr", "--params", work / "msgs" / "params.json", "--messages", work / "msgs",
                     "--json")
out["schemas"] = {name: json_schema(REPORT_TYPES[name]) for name in ("calibrate", "estimate", "analyze")}

from privagg.protocols.registry import load_parameters
from privagg.service import storage
from privagg.service.shuffle.aggregate_codec import decode_aggregate, encode_aggregate
from privagg.service.shuffle.analyzer import AnalyzerService
from privagg.service.keys import KeyEncryptionKey
from privagg.service.tasks import Task

parameters = load_parameters((work / "params.json").read_text())
service = AnalyzerService(storage.connect(f"sqlite:///{work}/analyzer.db", "analyzer"),
                          kek=KeyEncryptionKey.generate())
task = service.create_task(parameters)
loaded = service.load(task.task_id)
aggregate = loaded.analyzer.agg_init()
out["task"] = {"protocol": Task.from_json(task.to_json()).parameters.protocol,
               "aggregate": type(decode_aggregate(encode_aggregate(aggregate))).__name__}
print(json.dumps(out))
'''


def _environment(folder: Path) -> dict:
    return {**os.environ, "PYTHONPATH": os.pathsep.join([str(folder), str(ROOT / "src")])}


def test_the_cli_schemas_and_service_pick_up_a_protocol_of_one_module(tmp_path):
    (tmp_path / "toy_rr.py").write_text(TOY)
    (tmp_path / "surfaces.py").write_text(SURFACES)
    proc = subprocess.run([sys.executable, str(tmp_path / "surfaces.py"), str(tmp_path)], capture_output=True,
                          text=True, env=_environment(tmp_path), cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout.splitlines()[-1])
    code, text = out["protocols"]
    assert code == 0 and "toy-rr" in text and "Toy randomized response" in text
    code, text = out["protocols_json"]
    assert code == 0 and "toy-rr" in {row["protocol"] for row in json.loads(text)}
    for command in ("calibrate_help", "estimate_help"):
        code, text = out[command]
        assert code == 0 and "Toy randomized response" in text, (command, text)
    assert "toy-rr" in out["analyze_help"][1]
    code, text = out["calibrate"]
    report = json.loads(text)
    assert code == 0 and report["protocol"] == "toy-rr" and report["privacy"]["model"] == "local"
    assert (tmp_path / "params.json").exists()
    code, text = out["estimate"]
    report = json.loads(text)
    assert code == 0 and report["protocol"] == "toy-rr" and len(report["estimates"]) == 8
    assert report["privacy"]["event"]["mechanism"].startswith("toy randomized response")
    code, text = out["analyze"]
    assert code == 0 and json.loads(text)["protocol"] == "toy-rr"
    for name, schema in out["schemas"].items():
        assert "toy-rr" in schema["properties"]["protocol"]["enum"], name
        assert "ToyParameters" in schema["$defs"], name
        assert "exact" in schema["$defs"]["PrivacyDescription"]["properties"]["method"]["enum"], name
    assert out["task"] == {"protocol": "toy-rr", "aggregate": "CountAggregate"}


def test_the_contract_tests_run_over_a_protocol_of_one_module(tmp_path):
    """The contract tests, parametrised over the registry, collect and pass the toy (its module a pytest plugin, so
    that it registers before they are collected)."""
    (tmp_path / "toy_rr.py").write_text(TOY)
    proc = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-p", "toy_rr", "-q",
                           "-m", "not slow", "-k", "toy-rr", str(ROOT / "tests" / "protocols" / "test_contract.py")],
                          capture_output=True, text=True, env=_environment(tmp_path), cwd=ROOT)
    assert proc.returncode == 0, proc.stdout[-3000:]
    passed = int(proc.stdout.strip().splitlines()[-1].split(" passed")[0].split()[-1])
    assert passed >= 20, proc.stdout[-500:]
