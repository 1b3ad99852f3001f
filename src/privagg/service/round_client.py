"""The SDK of a user of a multi-round protocol run by the round driver (:mod:`privagg.service.rounds`): his rounds
against the server (numpy, randomgen, ``cryptography``; stdlib HTTP). DPDS and DPDG:

    from privagg.service.sharing.client import SharingClient
    user = SharingClient.fetch(server_url, task_id)   # the task's frozen parameters, never recalibrated
    user.enroll(token)                                 # his own X25519 key pair; his index in the roster
    user.send("advertise", value)                      # round 1, once the roster is full
    user.send("masked_sum")                            # round 2, once round 1 closed
    user.send("reveal")                                # round 3, once round 2 closed

The protocol is the role its registry entry declares (:class:`privagg.protocols.sharing_parties.SharingUser`),
with secure randomness; this module only fetches each round's inbox, seals, opens and sends. Each relayed
message (a backup) is sealed with HPKE to its recipient's public key from the roster, with the round's relay,
the task, sender and recipient bound as HPKE's info, so the server relays what it cannot read. A request the
server did not answer is sent again (the same bytes); "already sent" then means the first arrived.
"""

from __future__ import annotations

import base64
import json
import time
import urllib.error
import urllib.request

from ..protocols.registry import get
from ..protocols.roles import decode_inbox, messages_in
from .calls import RETRY_STATUSES, SubmitError
from .device_budget import charge_device
from .round_tasks import KEM, relay_info
from .tasks import _private_key, _public_key, _suite

class RosterClient:
    """What a user's device does in any multi-round task (DPDS, DPDG; TSS against S1): his own X25519 key pair, his
    enrollment in the roster, authenticated calls, seals and opens. ``sent`` and ``received`` count the bytes of
    his request and answer bodies, ``sealed_sent`` those of the sealed messages among them (before base64), and
    ``traffic`` the protocol's plaintext messages: (direction, kind) to [messages, entries].
    A subclass names its task type (``task_type``), how to read a message's kind and entries (``entries``) and
    builds the protocol's role for his index (``make_role``)."""

    task_type: type

    def __init__(self, url: str, task, timeout: float = 60.0, attempts: int = 5) -> None:
        from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey

        self.url, self.task, self.timeout, self.attempts = url.rstrip("/"), task, timeout, attempts
        key = X25519PrivateKey.generate()
        self.private_key, self.public_key = key.private_bytes_raw(), key.public_key().public_bytes_raw()
        self.user: int | None = None
        self.secret: str | None = None
        self.role = None
        self.sent = self.received = self.sealed_sent = 0
        self.traffic: dict[tuple[str, str], list[int]] = {}

    @classmethod
    def fetch(cls, url: str, task_id: str, **options):
        """The client of the task served at ``url`` (its parameters checked, never recalibrated)."""
        data = _request(f"{url.rstrip('/')}/tasks/{task_id}", None, options.get("timeout", 60.0), 5)
        return cls(url, cls.task_type.from_dict(json.loads(data)["task"]), **options)

    def make_role(self, user: int):
        raise NotImplementedError

    def _call(self, route: str, body: dict | None = None, ok_conflicts: tuple[str, ...] = ()) -> dict:
        raw = None if body is None else json.dumps(body).encode()
        self.sent += len(raw or b"")
        answer = _request(f"{self.url}/tasks/{self.task.task_id}/{route}", raw, self.timeout, self.attempts,
                          ok_conflicts)
        self.received += len(answer)
        return json.loads(answer)

    def state(self) -> str:
        """The task's state at the server."""
        return json.loads(_request(f"{self.url}/tasks/{self.task.task_id}", None, self.timeout, self.attempts))["state"]

    budget = None  # the device's LocalBudget (service/device_budget.py), charged the task's guarantee before enrolling

    def enroll(self, token: str) -> int:
        charge_device(self.budget, self.task)
        answer = self._call("enroll", {"token": token, "public_key": base64.b64encode(self.public_key).decode()})
        self.user, self.secret = answer["user"], answer["secret"]
        self.role = self.make_role(self.user)
        return self.user

    def _auth(self) -> dict:
        if self.role is None:
            raise RuntimeError("enroll first")
        return {"user": self.user, "secret": self.secret}

    def count(self, direction: str, kind: str, entries: int) -> None:
        """One message of ``kind`` with ``entries`` entries sent or received (``direction``)."""
        tally = self.traffic.setdefault((direction, kind), [0, 0])
        tally[0] += 1
        tally[1] += entries

    def _plain(self, message: bytes) -> bytes:
        """A message he sends unsealed, counted."""
        self.count("sent", *self.entries(message))
        return message

    def _seal(self, message: bytes, public_key: bytes, info: bytes) -> bytes:
        sealed = _suite(KEM).encrypt(self._plain(message), _public_key(KEM, public_key), info=info)
        self.sealed_sent += len(sealed)
        return sealed

    def _open(self, sealed_b64: str, info: bytes) -> bytes:
        message = _suite(KEM).decrypt(base64.b64decode(sealed_b64), _private_key(KEM, self.private_key), info=info)
        self.count("received", *self.entries(message))
        return message


class RoundClient(RosterClient):
    """A user's device in a task the round driver runs (:class:`RosterClient`): each round answered by his role's
    method of the round (its registry entry's ``rounds``) over the inbox the server gives him."""

    @property
    def protocol(self):
        return get(self.task.parameters.protocol).rounds

    def entries(self, raw: bytes) -> tuple[str, int]:
        return self.protocol.entries(raw)

    def make_role(self, user: int):
        return self.protocol.user(self.task.parameters, user, self.task.min_survivors)

    def send(self, name: str, value: int | None = None) -> bool:
        """Round ``name`` (``value``: his value, in the round that takes it): its inbox fetched, the messages
        relayed to him opened, his role's answer sealed where it goes and posted (True); False if the round does
        not ask him (TSS's helpers' and recovery rounds ask some users) or is not open (not yet, or closed without
        him: a round closes as soon as the last user it asks has answered)."""
        protocol = self.protocol
        round_, number = protocol.round(name), protocol.number(name)
        answer = self._call("inbox", {**self._auth(), "round": number}, ("not_expected", "round_closed"))
        if not answer:  # 409 not_expected or round_closed: nothing for him to send
            return False
        fields = decode_inbox(answer["inbox"])
        for raw in messages_in(fields):
            self.count("received", *self.entries(raw))
        if round_.delivers:
            relay = next(r for r in protocol.rounds if r.relay == round_.delivers)
            fields[round_.delivers] = {e["sender"]: self._open(e["sealed"], relay_info(
                relay, self.task.task_id, e["sender"], self.user)) for e in answer[round_.delivers]}
        if round_.value:
            fields["value"] = value
        out = getattr(self.role, name)(**fields)
        body = self._auth()
        if round_.to_server and round_.seal:  # to a party the server relays to (TSS's S2), which it cannot read
            body["message"] = base64.b64encode(self._seal(out.message, *self.task.sealed_to(round_, self.user))).decode()
        elif round_.to_server:
            body["message"] = base64.b64encode(self._plain(out.message)).decode()
        if round_.relay:
            keys = {k["user"]: base64.b64decode(k["public_key"]) for k in answer["public_keys"]}
            body[round_.relay] = [{"recipient": k, "sealed": base64.b64encode(self._seal(message, keys[k], relay_info(
                round_, self.task.task_id, self.user, k))).decode()} for k, message in out.relayed.items()]
        self._call(f"round{number}", body, ("already_sent",))
        return True


def _request(url: str, body: bytes | None, timeout: float, attempts: int, ok_conflicts: tuple[str, ...] = ()) -> bytes:
    """The answer's body; retried on no answer or a busy server, SubmitError on a refusal (a 409 whose reason is in
    ``ok_conflicts`` is an answer: a retry of a request that arrived)."""
    headers = {} if body is None else {"content-type": "application/json"}
    for attempt in range(attempts):
        request = urllib.request.Request(url, data=body, headers=headers, method="GET" if body is None else "POST")
        try:
            with urllib.request.urlopen(request, timeout=timeout) as answer:
                return answer.read()
        except urllib.error.HTTPError as err:
            detail = err.read()
            try:
                reason = json.loads(detail).get("error")
            except ValueError:
                reason = None
            if err.code == 409 and reason in ok_conflicts:
                return b"{}"
            if err.code not in RETRY_STATUSES or attempt == attempts - 1:
                raise SubmitError(err.code, detail.decode(errors="replace")[:300]) from None
        except (urllib.error.URLError, OSError) as err:
            if attempt == attempts - 1:
                raise SubmitError(None, str(err)) from None
        time.sleep(min(2.0, 0.1 * 2**attempt))
    raise AssertionError("unreachable")
