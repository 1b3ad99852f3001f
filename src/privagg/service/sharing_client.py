"""The SDK of a DPDS or DPDG user: his rounds against the sharing server (numpy, randomgen, ``cryptography``;
stdlib HTTP).

    from privagg.service.sharing_client import SharingClient
    user = SharingClient.fetch(server_url, task_id)   # the task's frozen parameters, never recalibrated
    user.enroll(token)                                 # his own X25519 key pair; his index in the roster
    user.advertise(value)                              # round 1, once the roster is full
    user.masked_sum()                                  # round 2, once round 1 closed
    user.reveal()                                      # round 3, once round 2 closed

The protocol is :class:`privagg.protocols.sharing_parties.SharingUser`'s, with secure randomness; this module
only seals, opens and sends. Each backup is sealed with HPKE to its recipient's public key from the roster,
with the task, sender and recipient bound as HPKE's info, so the server relays what it cannot read. A request
the server did not answer is sent again (the same bytes); "already sent" then means the first arrived.
"""

from __future__ import annotations

import base64
import json
import time
import urllib.error
import urllib.request

from ..protocols.sharing_parties import SharingUser, message_entries
from .client import RETRY_STATUSES, SubmitError
from .round_tasks import KEM, SharingTask
from .tasks import _private_key, _public_key, _suite

class RosterClient:
    """What a user's device does in any multi-round task (DPDS, DPDG; TSS against S1): his own X25519 key pair, his
    enrollment in the roster, authenticated calls, seals and opens. ``sent`` and ``received`` count the bytes of
    his request and answer bodies, ``sealed_sent`` those of the sealed messages among them (before base64), and
    ``traffic`` the protocol's plaintext messages: (direction, kind) to [messages, entries].
    A subclass names its task type (``task_type``), how to read a message's kind and entries (``entries``) and
    builds the protocol's role for his index (``make_role``)."""

    task_type: type
    entries: staticmethod

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

    def enroll(self, token: str) -> int:
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


class SharingClient(RosterClient):
    """One DPDS or DPDG user's device in one task (:class:`RosterClient`; the rounds of :class:`SharingUser`)."""

    task_type = SharingTask
    entries = staticmethod(message_entries)

    def make_role(self, user: int) -> SharingUser:
        return SharingUser(self.task.parameters, user, self.task.min_survivors)

    def advertise(self, value: int) -> None:
        """Round 1: his pair key, and his backups, each sealed to its recipient."""
        keys = [base64.b64decode(k) for k in self._call("roster")["public_keys"]]
        key, backups = self.role.advertise(value)
        sealed = [{"recipient": k, "sealed": base64.b64encode(self._seal(message, keys[k], self.task.info(
            self.user, k))).decode()} for k, message in backups.items()]
        self._call("round1", {**self._auth(), "key": base64.b64encode(self._plain(key)).decode(), "backups": sealed},
                   ("already_sent",))

    def masked_sum(self) -> None:
        """Round 2: his vector plus the shares agreed with U1, masked."""
        keys = {k["user"]: base64.b64decode(k["key"]) for k in self._call("inbox", self._auth())["keys"]}
        for user, key in keys.items():
            if user != self.user:
                self.count("received", *self.entries(key))
        message = self._plain(self.role.masked_sum(keys))
        self._call("round2", {**self._auth(), "message": base64.b64encode(message).decode()}, ("already_sent",))

    def reveal(self) -> None:
        """Round 3: his shares of U2's mask seeds and of round 2's dropouts' pair keys (refused by the role if he is
        not among U2)."""
        answer = self._call("inbox", self._auth())
        opened = {b["sender"]: self._open(b["sealed"], self.task.info(b["sender"], self.user))
                  for b in answer["backups"]}
        message = self._plain(self.role.reveal(answer["senders"], answer["survivors"], opened))
        self._call("round3", {**self._auth(), "message": base64.b64encode(message).decode()}, ("already_sent",))


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
