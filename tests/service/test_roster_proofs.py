"""The roster a device downloads on a neighbour graph (issue 47): the organisation signs the Merkle root of the n
entries (RFC 9162; core/merkle.py) with the task, n and the graph seed, and a device fetches only the entries of the
users the server names to him (his neighbours, senders, signers), each with its inclusion proof: O(k log n) bytes.

As an adversary would: a server that swaps a neighbour's key in the entry it serves, replays that user's entry of
another task, gives a proof for another index, truncates or extends a proof, leaves the entry out, serves it twice,
serves another task's head, or leaves the neighbour out of the keys it names: each device refuses, naming the field,
before he seals anything (nothing reaches the server from him). And as a newcomer would: the honest run releases
exactly, every device holding only his graph's entries."""

import dataclasses
import math

import pytest
from fastapi.testclient import TestClient

from privagg.core import identity
from privagg.errors import ParameterError
from privagg.protocols.sharing_parties import task_graph
from privagg.service import round_wire
from privagg.service.round_tasks import RosterHead, SignedRoster
from privagg.service.sharing.client import SharingClient
from privagg.service.sharing.server import SharingService, create_app
from privagg.service.storage import connect
from service_deployment import organised, route_sdk_to
from privagg.protocols.sharing_server import ROUNDS
from service.test_sharing_dishonest import released_over
from service.test_sharing_service import DOMAIN, Clock, dpdg

N, DEGREE = 12, 4
VICTIM = 5  # the user whose entry the dishonest servers bend


class Bending(SharingService):
    """Serves VICTIM's roster entry bent as ``lie`` says (``other``: a task of the same server whose roster it
    replays from); the inboxes as the honest server, but ``lie="inbox"`` leaves VICTIM out of the keys it names."""

    lie: str = ""
    other: str = ""

    def roster_entries(self, task_id, users):
        out = super().roster_entries(task_id, users)
        entries, signed = out["entries"], self.signed_roster(task_id)
        if self.lie == "head":
            return {**super().roster_entries(self.other, users), "entries": entries}
        for i, e in enumerate(entries):
            if e["user"] != VICTIM:
                continue
            if self.lie == "swap":
                e["public_key"] = bytes(32)
            elif self.lie == "replay":  # his entry, proven, in the other task's roster
                entries[i] = super().roster_entries(self.other, str(VICTIM))["entries"][0]
            elif self.lie == "index":  # another user's entry with its own proof, named as VICTIM's
                twin = signed.entries([VICTIM + 1])["entries"][0]
                entries[i] = {**twin, "user": VICTIM}
            elif self.lie == "truncate":
                e["proof"] = e["proof"][:-1]
            elif self.lie == "extend":
                e["proof"] = e["proof"] + [e["proof"][0]]
            elif self.lie == "omit":
                del entries[i]
            elif self.lie == "twice":
                entries.append(dict(e))
            break
        return out

    def inbox(self, task_id, body):
        out = super().inbox(task_id, body)
        if self.lie == "inbox":
            out["public_keys"] = [e for e in out.get("public_keys", []) if e["user"] != VICTIM]
        return out


@pytest.fixture
def bending(tmp_path, monkeypatch):
    service = Bending(connect(f"sqlite:///{tmp_path}/sharing.db", "sharing"), clock=Clock())
    http = TestClient(create_app(service, tick=None))
    route_sdk_to(http, monkeypatch)
    yield service
    http.close()
    service.engine.dispose()


def parameters():
    return dataclasses.replace(dpdg(N), degree=DEGREE, graph_dropouts=0.0)


def test_an_honest_run_fetches_only_the_graphs_entries_and_releases_exactly(bending):
    service, p = bending, parameters()
    clock = service.clock
    task = service.create_task(p, 60.0, 8)
    users = organised(service, task, SharingClient, "http://sharing", N)[0]
    for number, round_ in enumerate(ROUNDS, 1):
        for u in users:
            u.send(round_.name, u.user % DOMAIN if round_.value else None)
        if service.state(task.task_id)["round"] == number:  # not closed early: at its deadline
            clock.now += 61
            service.advance(task.task_id)
    released_over(p, service.result(task.task_id), users, range(N))
    graph, size = task_graph(p, users[0].roster().graph_seed), N
    head_bytes = len(round_wire.encode({"roster": users[0].roster().head.document, "signature": bytes(64)}))
    for u in users:
        proven = u.roster()
        held = set(proven.users) | proven.absent
        # his own entry, his neighbours' (backups, keys) and the signers' within 2k places on the cycle (round 5)
        assert held <= {u.user, *graph.near(u.user, 2 * graph.half)} and held >= {u.user, *graph.neighbours(u.user)}
        assert len(held) < N
        # each entry: index, two keys, ceil(log2 n) hashes; a head with each request (his own, then one a round)
        entry = 2 + 32 + 32 + math.ceil(math.log2(size)) * (32 + 2) + 40
        assert u.roster_received <= 6 * head_bytes + len(held) * entry


@pytest.mark.parametrize("lie, field", [
    ("swap", rf"roster.entries\[{VICTIM}\].proof must be an inclusion proof"),
    ("replay", rf"roster.entries\[{VICTIM}\].proof must be an inclusion proof"),
    ("index", rf"roster.entries\[{VICTIM}\].proof must be an inclusion proof"),
    ("truncate", rf"roster.entries\[{VICTIM}\].proof must be an inclusion proof"),
    ("extend", rf"roster.entries\[{VICTIM}\].proof must be an inclusion proof"),
    ("omit", rf"roster.entries must be an entry for each user asked for, got none for users \[{VICTIM}\]"),
    ("twice", rf"roster.entries\[{VICTIM}\] must be one entry for each user asked for, each once, got an entry twice"),
    ("head", "roster.task_id must be the task's"),
    ("inbox", "public_keys must be a key for each recipient his role sends to"),
])
def test_a_bent_roster_entry_is_refused_before_anything_is_sealed(bending, lie, field):
    service, p = bending, parameters()
    if lie in ("replay", "head"):  # another task of the server's, whose roster it replays from
        other = service.create_task(p, 60.0, 8)
        organised(service, other, SharingClient, "http://sharing", N)
        service.other = other.task_id
    task = service.create_task(p, 60.0, 8)
    users = organised(service, task, SharingClient, "http://sharing", N)[0]
    service.lie = lie
    graph = task_graph(p, service.signed_roster(task.task_id).graph_seed)
    device = users[graph.neighbours(VICTIM)[0]]
    before = device.sent
    with pytest.raises(ParameterError, match=field):
        device.send("advertise", 1)
    assert device.sealed_sent == 0 and device.sent - before < 100  # his inbox request only: nothing posted
    assert service.state(task.task_id)["state"] == "round1"
    if lie != "head":  # the others, who need no entry of VICTIM's, go on
        far = next(u for u in users if u.user not in (VICTIM, *graph.neighbours(VICTIM)))
        assert far.send("advertise", 1)


def test_the_head_proves_entries_and_refuses_bent_ones():
    """:meth:`RosterHead.proven` alone: a left-out user's entry proves he has no keys (the server cannot hide an
    enrolled one, nor show keys for one left out); an entry not asked for is refused."""
    organisation, task_id = identity.generate(), "ab" * 16
    users = {i: (identity.public_key(identity.generate()), bytes([i]) * 32) for i in range(7) if i != 3}
    unsigned = SignedRoster(task_id, users, b"", bytes(32), 7)
    signed = dataclasses.replace(unsigned, signature=identity.sign(organisation, SignedRoster.context(task_id),
                                                                   unsigned.document))
    served = signed.entries([2, 3])
    head = RosterHead.parse(served["roster"], served["signature"], task_id).verify(identity.public_key(organisation))
    assert head.proven(served["entries"], {2, 3}) == {2: users[2], 3: None}
    shown = signed.entries([3])["entries"][0]
    with pytest.raises(ParameterError, match=r"roster.entries\[3\].proof"):  # keys for the left-out user
        head.proven([{**shown, "identity_key": users[2][0], "public_key": users[2][1]}], {3})
    hidden = signed.entries([2])["entries"][0]
    with pytest.raises(ParameterError, match=r"roster.entries\[2\].proof"):  # an enrolled user shown as left out
        head.proven([{"user": 2, "proof": hidden["proof"]}], {2})
    with pytest.raises(ParameterError, match=r"roster.entries\[2\] must be one entry for each user asked for"):
        head.proven(served["entries"], {3})
    with pytest.raises(ParameterError, match=r"roster.entries\[2\].public_key"):
        head.proven([{**hidden, "public_key": b"x"}], {2})


def test_the_entries_route_refuses_a_bad_list_of_users(tmp_path, monkeypatch):
    """``GET /tasks/{id}/roster/entries?users=...`` as a device that sends junk: 409 before the roster is signed,
    then 400 ``malformed`` for anything but distinct roster indices in [0, n) (Python's int() would read "1_0",
    " 3" and "+2"), and the entries asked for, each once, otherwise."""
    service = SharingService(connect(f"sqlite:///{tmp_path}/sharing.db", "sharing"), clock=Clock())
    with TestClient(create_app(service, tick=None)) as http:
        route_sdk_to(http, monkeypatch)
        task = service.create_task(parameters(), 60.0, 8)
        url = f"/tasks/{task.task_id}/roster/entries"
        assert http.get(url, params={"users": "0"}).status_code == 409
        organised(service, task, SharingClient, "http://sharing", N)
        for bad in ("", "1,1", "1,01", str(N), "-1", "1_0", " 3", "+2", "a", "1,,2", "²", ",".join(["1"] * 10 * N)):
            answer = http.get(url, params={"users": bad})
            assert answer.status_code == 400 and answer.json()["error"] == "malformed", bad
        data = round_wire.decode(http.get(url, params={"users": f"{N - 1},0"}).content, "entries")
        assert [e["user"] for e in data["entries"]] == [N - 1, 0]
    service.engine.dispose()


@pytest.mark.parametrize("size", [N - 1, N + 1])
def test_a_signed_head_of_another_n_than_the_tasks_is_refused(bending, size):
    """A head the organisation signed over N - 1 or N + 1 entries, the task's n being N (review47): on main a device
    took either (the proofs check under the head's own size), so that on N - 1 user N - 1 was silently left out of
    every backup (no proof can show his entry) and on N + 1 the roster held an index no task has; now refused,
    naming ``roster.size``, before he seals anything."""
    service, p = bending, parameters()
    task = service.create_task(p, 60.0, 8)
    users, organisation, _ = organised(service, task, SharingClient, "http://sharing", N)
    honest = service.signed_roster(task.task_id)
    other = SignedRoster(task.task_id, {i: k for i, k in honest.users.items() if i < size}, b"", honest.graph_seed,
                         size)
    service._rosters[task.task_id] = dataclasses.replace(other, signature=identity.sign(
        organisation.private_key, SignedRoster.context(task.task_id), other.document))
    device = users[0]
    with pytest.raises(ParameterError, match=rf"roster.size must be the task's n = {N} .*, got {size}"):
        device.send("advertise", 1)
    assert device.sealed_sent == 0


@pytest.mark.parametrize("bent", ["twice", "extra"])
def test_the_organisation_signs_n_entries_whatever_the_servers_rows(bending, monkeypatch, bent):
    """The organisation reads the enrollments from the server's database: rows naming one index twice (another
    index then missing, whom on main it signed as left out without naming him among those left out) or an index
    past n (on main it signed a roster of n + 1 entries) are refused, naming ``roster``, before it signs anything
    for a server that would publish whatever it is given."""
    service, p = bending, parameters()
    task = service.create_task(p, 60.0, 8)
    users, organisation, tokens = organised(service, task, SharingClient, "http://sharing", N, enroll=False)
    for user, token in zip(users, tokens):
        user.enroll(token)
    rows = service.enrollments(task.task_id)
    bent_rows = rows[:-1] + [rows[0]] if bent == "twice" else rows + [{**rows[0], "user": N}]
    monkeypatch.setattr(service, "enrollments", lambda task_id, complete=True: bent_rows)
    published = []  # a dishonest server's publish: it takes any roster (the honest one refuses a short one itself)
    monkeypatch.setattr(service, "publish_roster", lambda task_id, signed: published.append(signed))
    for without_unenrolled in (False, True):  # leaving out who did not enroll leaves no room for these either
        with pytest.raises(ParameterError, match=rf"roster must be the enrollments of users 0..{N - 1}, each once"):
            organisation.sign_roster(service, task.task_id, tokens, without_unenrolled)
    assert published == []


def test_the_entries_route_refuses_an_index_of_thousands_of_digits(tmp_path, monkeypatch):
    """An index of more than 4,300 digits (a request line of 64 KiB holds one) within the route's 8 bytes a user: 400
    ``malformed``, not the 500 that Python's int() raised past its 4,300 digits (review47: a roster of n >= 538
    let one through); the longest index that can name a user still works."""
    service = SharingService(connect(f"sqlite:///{tmp_path}/sharing.db", "sharing"), clock=Clock())
    task = service.create_task(parameters(), 60.0, 8)
    n = 1000  # a roster whose 8 n bytes admit a 4,301-digit index
    monkeypatch.setattr(service, "signed_roster", lambda task_id: SignedRoster(task_id, {}, b"", bytes(32), n))
    with TestClient(create_app(service, tick=None), raise_server_exceptions=False) as http:
        url = f"/tasks/{task.task_id}/roster/entries"
        for bad in ("0" * 4301, "1" * 4301, "0," + "9" * 5000):
            answer = http.get(url, params={"users": bad})
            assert answer.status_code == 400 and answer.json()["error"] == "malformed", (answer.status_code, bad[:9])
        data = round_wire.decode(http.get(url, params={"users": f"{n - 1},0"}).content, "entries")
        assert [e["user"] for e in data["entries"]] == [n - 1, 0]
    service.engine.dispose()


def test_a_device_asks_for_many_entries_in_requests_the_server_takes(bending, monkeypatch):
    """More users than ENTRIES_PER_REQUEST (a TSS reporter names alpha n helpers) are asked for over several
    requests, each request line under the server's limit, every entry proven under the one head."""
    from privagg.service import round_client

    service, p = bending, parameters()
    task = service.create_task(p, 60.0, 8)
    user = organised(service, task, SharingClient, "http://sharing", N)[0][0]
    monkeypatch.setattr(round_client, "ENTRIES_PER_REQUEST", 5)
    asked, fetch = [], user._entries
    monkeypatch.setattr(user, "_entries", lambda users: asked.append(users) or fetch(users))
    proven = user.prove(range(N))
    assert set(proven.users) | proven.absent == set(range(N))
    others = [u for u in range(N) if u != user.user]  # his own entry first, then the others five at a time
    assert asked == [[user.user]] + [others[i:i + 5] for i in range(0, N - 1, 5)]
