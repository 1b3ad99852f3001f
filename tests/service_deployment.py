"""The collector and the analyzer in one process (FastAPI's TestClient), for the service tests.

The collector's batches go to the analyzer through its HTTP routes, as in deployment, but the tests decide when
batches are released (``collector.release_batches()``); reports are built with seeded randomness so a test
knows every message its users sent.
"""

import json
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass, field

import sqlalchemy as sa
from fastapi.testclient import TestClient

from privagg.service import storage
from privagg.service.shuffle.analyzer import AnalyzerService, create_app as analyzer_app
from privagg.service.shuffle.client import Client, Report
from privagg.service.shuffle.collector import Collector, create_app as collector_app
from privagg.service.keys import KeyEncryptionKey
from privagg.service.tasks import Task, seal_messages

COLLECTOR_TOKEN = "the collector's secret"
AUTH = {"authorization": f"Bearer {COLLECTOR_TOKEN}", "content-type": "application/vnd.apache.arrow.stream"}


@dataclass
class Deployment:
    analyzer: AnalyzerService  # its private keys sealed under analyzer.kek
    collector: Collector
    A: TestClient
    C: TestClient
    task: Task
    delivered: list = field(default_factory=list)  # the blobs the collector sent
    lose_acks: int = 0  # deliver the next ones, then fail as if the acknowledgement was lost

    def post(self, report: Report, body: dict | None = None):
        return self.C.post(f"/tasks/{report.task_id}/reports", json=report.to_dict() if body is None else body)

    def store(self, reports: list[Report]) -> None:
        """Hand reports to the collector as its route does, without the HTTP round trip (tests of what follows),
        all in flight at once as concurrent clients would be: its group commit stores them many to a transaction."""
        c = self.collector
        outcomes = [c.store(c.check(c.task(r.task_id), json.dumps(r.to_dict()).encode())) for r in reports]
        assert [outcome.result() for outcome in outcomes] == ["stored"] * len(reports)

    def stored(self) -> int:
        with self.collector.engine.connect() as c:
            return c.execute(sa.select(sa.func.count()).select_from(storage.reports)).scalar_one()

    def refused(self, reason: str) -> float:
        return self.collector.registry.get_sample_value("privagg_reports_refused_total", {"reason": reason}) or 0.0

    def result(self) -> dict:
        answer = self.A.get(f"/tasks/{self.task.task_id}/result", params={"top": 100})
        assert answer.status_code == 200, answer.text
        return answer.json()


def deploy(databases, parameters, min_batch_size=None, kem="x25519", candidates=None, partition_root=None,
           budgets=(2 << 30, 2 << 30), discover_phi=None) -> Deployment:
    """``partition_root``: the directory both share for batches that go as partitions; ``budgets``: the
    collector's and the analyzer's memory budgets; ``discover_phi``: a staged sparse-vector-hashed task."""
    engines, kek = {}, KeyEncryptionKey.generate()
    for role, url in databases.items():
        engines[role] = storage.connect(url, role, kek=kek if role == "analyzer" else None)
    analyzer = AnalyzerService(engines["analyzer"], kek=kek, partition_root=partition_root, memory_budget=budgets[1])
    task = analyzer.create_task(parameters, min_batch_size, kem=kem, candidates=candidates, discover_phi=discover_phi)
    A = TestClient(analyzer_app(analyzer, collector_token=COLLECTOR_TOKEN), client=("127.0.0.1", 50000))
    holder: dict = {}

    def fetch(task_id):
        answer = A.get(f"/tasks/{task_id}")
        return None if answer.status_code == 404 else answer.text

    def forward(task_id, batch_id, blob):
        holder["d"].delivered.append(blob)
        A.post(f"/tasks/{task_id}/batches/{batch_id}", content=blob, headers=AUTH).raise_for_status()
        if holder["d"].lose_acks:
            holder["d"].lose_acks -= 1
            raise ConnectionError("the acknowledgement was lost")

    def forward_partitioned(task_id, batch_id):
        A.post(f"/tasks/{task_id}/batches/{batch_id}/partitioned", headers=AUTH).raise_for_status()

    collector = Collector(engines["collector"], fetch, forward, quiet=0.0, forward_partitioned=forward_partitioned,
                          partition_root=partition_root, memory_budget=budgets[0])
    d = Deployment(analyzer, collector, A, TestClient(collector_app(collector, batch_interval=None)), task)
    holder["d"] = d
    return d


def users(d: Deployment, values, rng, stages: list | None = None) -> tuple[list[Report], list]:
    """Reports of users holding ``values`` with seeded randomness (so the test knows their messages); a staged
    task's first-stage messages, drawn as ``Client.report`` draws them, are appended to ``stages``."""
    client = Client(d.task)
    tokens = d.collector.issue_tokens(d.task.task_id, len(values))
    reports, batches = [], []
    for value, token in zip(values, tokens):
        messages = client.randomizer.randomize([value], rng)
        batches.append(messages)
        stage = None
        if client.discovery is not None:
            p = d.task.parameters
            first = client.discovery.randomizer.randomize([int(p.cells(p.check_codes([value]), rng)[0])], rng)
            stages.append(first)
            stage = tuple(seal_messages(d.task.discovery, first))
        reports.append(Report(d.task.task_id, f"{rng.integers(2**63):016x}{rng.integers(2**63):016x}", token,
                              d.task.key_id, tuple(seal_messages(d.task, messages)), stage))
    return reports, batches


def database_at(url: str, role: str, revision: str):
    """An engine over a new ``role`` database at schema ``revision`` (an older release's), not upgraded further."""
    from alembic import command

    from privagg.service.schema_versions import alembic_config

    engine = storage._engine(url, role, 5.0, None)
    config = alembic_config(role)
    with engine.begin() as connection:
        config.attributes["connection"] = connection
        command.upgrade(config, revision)
    return engine


@contextmanager
def served(app):
    """``app`` served by uvicorn on a free loopback port in a thread of this process; yields its URL."""
    import uvicorn

    from privagg.service.local import free_port

    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=free_port(), log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    while not server.started:
        time.sleep(0.02)
    try:
        yield f"http://127.0.0.1:{server.config.port}"
    finally:
        server.should_exit = True
        thread.join(10)


def self_signed(folder):
    """A certificate for 127.0.0.1 and its key (PEM files): the test's own CA."""
    import datetime
    import ipaddress

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")])
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
            .serial_number(x509.random_serial_number()).not_valid_before(now)
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), False)
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), True)
            .sign(key, hashes.SHA256()))
    cert_path, key_path = folder / "cert.pem", folder / "key.pem"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))
    return cert_path, key_path


def route_sdk_to(http: TestClient, monkeypatch) -> None:
    """The round SDK's requests (privagg.service.round_client) sent to ``http``, a TestClient of a server in
    process: a 409 whose error the caller accepts (``ok_conflicts``) reads as an empty answer, as over HTTP."""
    from privagg.service import round_client
    from privagg.service.calls import SubmitError

    def request(url, body, _timeout, _attempts, ok_conflicts=(), media_type="application/json"):
        path = url.split("://", 1)[1].split("/", 1)[1]
        answer = http.get(f"/{path}") if body is None else http.post(
            f"/{path}", content=body, headers={"content-type": media_type})
        if answer.status_code >= 400:
            if answer.status_code == 409 and answer.json().get("error") in ok_conflicts:
                return None
            raise SubmitError(answer.status_code, answer.text)
        return answer.content

    monkeypatch.setattr(round_client, "_request", request)


def organised(driver, task, client_type, url: str, users: int, organisation=None, enroll: bool = True,
              **options) -> tuple[list, object, list[str]]:
    """The organisation's steps around a multi-round ``task`` of ``driver`` (the sharing server, S1) in process, as
    ``privagg task create --organisation-key``, ``tokens issue`` and ``roster sign`` do: the task signed, ``users``
    tokens issued, one ``client_type`` per user fetched from ``url`` (pinning the organisation's key), enrolled
    and the roster signed (``enroll=False``: neither). The clients, the organisation, the tokens."""
    from privagg.service.organisation import Organisation

    organisation = organisation or Organisation.generate()
    organisation.sign_task(driver, task)
    tokens = driver.issue_tokens(task.task_id, users)
    clients = [client_type.fetch(url, task.task_id, organisation_key=organisation.public_key, **options)
               for _ in range(users)]
    if enroll:
        for client, token in zip(clients, tokens):
            client.enroll(token)
        organisation.sign_roster(driver, task.task_id, tokens)
    return clients, organisation, tokens


def signed(client, number: int, body: dict, relay: str | None = None) -> dict:
    """``body``, a hand-made round-``number`` answer of ``client``'s user, with his signatures as his SDK makes
    them: of its ``message`` (none: empty) and of each sealed message of its ``relay`` list (with what the round
    binds, from the message)."""
    import base64

    protocol = client.protocol
    binds = protocol.rounds[number - 1].binds

    def sign(recipient, message: str) -> str:
        bound = b"" if recipient is None or not binds else protocol.bound(
            client.task.parameters, client.roster().graph_seed, client.user, recipient,
            base64.b64decode(body.get("message", "")))
        return base64.b64encode(client._sign(number, recipient, base64.b64decode(message) + bound)).decode()

    out = {"user": client.user, "secret": client.secret, **body, "signature": sign(None, body.get("message", ""))}
    if relay is not None and isinstance(body.get(relay), list):
        out[relay] = [{**e, "signature": sign(e["recipient"], e["sealed"])}
                      if isinstance(e, dict) and "signature" not in e else e for e in body[relay]]
    return out


def enrollment(task_id: str, token: str, public_key: bytes, identity_key: bytes | None = None,
               binding: bytes | None = None) -> dict:
    """A hand-made enrollment body as the SDK makes it: the token's authentication half, the keys (a fresh identity
    key by default) and their binding under the token's binding half (``binding``: another, forged)."""
    import base64

    from privagg.core import identity

    identity_key = identity.public_key(identity.generate()) if identity_key is None else identity_key
    authentication, half = identity.token_halves(token)
    binding = identity.binding(half, task_id, identity_key, public_key) if binding is None else binding
    return {"token": authentication, **{k: base64.b64encode(v).decode() for k, v in (
        ("public_key", public_key), ("identity_key", identity_key), ("binding", binding))}}


def in_process(second) -> dict:
    """S1's ways to S2 (``send`` the hand-over, ``ask`` while closing a round) as calls of S2's service."""
    routes = {"election": second.attest, "sums": second.open_sums}
    return {"send": lambda _url, task_id, token, body: second.receive(task_id, f"Bearer {token}", body),
            "ask": lambda _url, task_id, route, token, body: routes[route](task_id, f"Bearer {token}", body)}


def count(service, table, task_id: str) -> int:
    """The rows of ``table`` (one of the service's tables with a task_id column) stored for ``task_id``."""
    with service.engine.connect() as c:
        return c.execute(sa.select(sa.func.count()).select_from(table).where(table.c.task_id == task_id)).scalar()
