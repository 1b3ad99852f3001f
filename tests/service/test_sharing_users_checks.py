"""What a DPDS or DPDG device checks in each round through the sharing server (issue 47's users near the floor): each
signature once. Round 5's round-4 messages are each a signature of the lists, which his role checks under the
signer's roster key; their transport signatures are not checked again (docs/privacy.md, "What the signatures rest
on"), while every other round's relayed and earlier messages still are."""

import pytest

from privagg.core import identity
from privagg.errors import ParameterError
from privagg.protocols.sharing_server import ROUNDS
from privagg.service.round_client import ProvenRoster, RosterClient
from privagg.service.round_tasks import SharingTask
from privagg.service.sharing.client import SharingClient
from service.test_sharing_dishonest import CODES, released_over, with_liar
from service.test_sharing_service import N, db, dpdg, server  # noqa: F401 (fixtures)


def test_each_transport_signature_a_device_is_shown_is_checked_once_and_round_5s_by_the_role(server, monkeypatch):
    service, _, clock = server
    p = dpdg()
    task, users = with_liar(service, p)
    checked = []  # (the round answered, the round of the message whose transport signature the device checked)
    check = RosterClient._check_signed

    def counting(self, sender, signature, message, number, recipient, field):
        checked.append((answering, number))
        return check(self, sender, signature, message, number, recipient, field)

    monkeypatch.setattr(RosterClient, "_check_signed", counting)
    inboxes, call = [], RosterClient._call

    def recording(self, route, *args, **kwargs):
        answer = call(self, route, *args, **kwargs)
        if route == "inbox" and answer:
            inboxes.append((answering, "signatures" in answer))
        return answer

    monkeypatch.setattr(RosterClient, "_call", recording)
    for number, round_ in enumerate(ROUNDS[:5], 1):
        answering = round_.name
        for user in users:
            assert user.send(round_.name, int(CODES[user.user]) if round_.value else None)
        if service.state(task.task_id)["round"] == number:  # not closed early: at its deadline
            clock.now += 61
            service.advance(task.task_id)
    released_over(p, service.result(task.task_id), users, range(N))
    by_round = {r.name: [n for a, n in checked if a == r.name] for r in ROUNDS[:5]}
    assert by_round["check"] == [1] * N * (N - 1)  # each relayed backup's, once
    assert by_round["masked_sum"] == [2] * N * N  # each pair key's (his own among them), once
    assert by_round["reveal"] == []  # the round-4 signatures of the lists: his role's to check, under the roster's keys
    assert by_round["advertise"] == by_round["consistency"] == []
    # and the server sends none it would not have checked: round 5's inboxes carry no transport signatures
    assert {shipped for a, shipped in inboxes if a == "reveal"} == {False}
    assert {shipped for a, shipped in inboxes if a == "masked_sum"} == {True}


MALFORMED = {  # a dishonest or broken server's inbox answers, each of a wrong shape in one field
    "signatures": ("masked_sum", {"inbox": {"keys": {1: "x"}}, "signatures": []}),
    "inbox.keys": ("masked_sum", {"inbox": {"keys": [1, 2]}, "signatures": {"keys": []}}),
    "signatures.keys[]": ("masked_sum", {"inbox": {"keys": {1: "x"}}, "signatures": {"keys": [7]}}),
    "inbox.identities": ("reveal", {"inbox": {"senders": [0], "survivors": [0], "signatures": {}, "identities": 5}}),
    "inbox": ("masked_sum", {"inbox": [1]}),
}


@pytest.mark.parametrize("field", MALFORMED)
def test_an_inbox_of_the_wrong_shape_is_refused_naming_its_field(field, monkeypatch):
    """A reviewer's finding: a list where the SDK reads an object (or an int for a list) was an AttributeError or a
    TypeError deep in ``send``; it is a ParameterError naming the field, before anything is opened or sent."""
    p = dpdg()
    task = SharingTask("0" * 32, p, 60.0, N)
    client = SharingClient("http://127.0.0.1:9", task, organisation_key=bytes(32))
    client.user, client.secret = 0, "x"
    client.role = client.make_role(0)
    roster = ProvenRoster(None, {i: (identity.public_key(identity.generate()), bytes(32)) for i in range(N)}, set())
    monkeypatch.setattr(client, "roster", lambda: roster)
    monkeypatch.setattr(client, "prove", lambda users: roster)
    name, answer = MALFORMED[field]
    monkeypatch.setattr(client, "_call", lambda route, *args, **kwargs: answer)
    with pytest.raises(ParameterError) as refused:
        client.send(name)
    assert refused.value.field == field
