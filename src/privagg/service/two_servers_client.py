"""The SDK of a TSS or TSS' user: his rounds against S1 (numpy, randomgen, ``cryptography``; stdlib HTTP).

    from privagg.service.two_servers_client import TSSClient
    user = TSSClient.fetch(s1_url, task_id)   # the task's frozen parameters, S2's task id and public key
    user.enroll(token)                         # his own X25519 key pair; his index in the roster
    user.report(value)                         # round 1, once the roster is full: his report set to S1
    user.share()                               # round 2, once round 1 closed: his shares to his items' helpers
    user.helper_sums()                         # round 3: his sums for S2, if elected (False: not a helper)
    user.recover()                             # round 4, if S1 asks: shares to dropped helpers (False: not asked)

Rounds 3 and 4 ask only some users (``user.inbox()`` says whom); once a round's last expected message arrives
it closes, and a user who asks after that is refused (409 ``round_closed``).

The protocol is :class:`privagg.protocols.two_server_parties.TSSUser`'s, with secure randomness; this module
only seals, opens and sends. Shares are sealed with HPKE to their helper's public key (the task and both
users bound as HPKE's info); sums and recovered shares to S2's key for the task (S2's task id, the kind and the
sender bound), so S1 relays what it cannot read. A request S1 did not answer is sent again (the same bytes);
"already sent" then means the first arrived. ``user.role.state.to_bytes()`` is what a device keeps between
rounds.
"""

from __future__ import annotations

import base64
import json

from ..protocols.two_server_parties import RECOVERY, SUMS, TSSUser
from .sharing_client import _request
from .tasks import _private_key, _public_key, _suite
from .two_servers import KEM, TSSTask, second_info


class TSSClient:
    """One user's device in one task; ``sent`` and ``received`` count the bytes of his request and answer bodies,
    ``sealed_sent`` those of the sealed messages among them (before base64)."""

    def __init__(self, url: str, task: TSSTask, timeout: float = 60.0, attempts: int = 5) -> None:
        from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey

        self.url, self.task, self.timeout, self.attempts = url.rstrip("/"), task, timeout, attempts
        key = X25519PrivateKey.generate()
        self.private_key, self.public_key = key.private_bytes_raw(), key.public_key().public_bytes_raw()
        self.user: int | None = None
        self.secret: str | None = None
        self.role: TSSUser | None = None
        self.sent = self.received = self.sealed_sent = 0

    @classmethod
    def fetch(cls, url: str, task_id: str, **options) -> "TSSClient":
        """The client of the task S1 serves at ``url`` (its parameters checked, never recalibrated)."""
        data = _request(f"{url.rstrip('/')}/tasks/{task_id}", None, options.get("timeout", 60.0), 5)
        return cls(url, TSSTask.from_dict(json.loads(data)["task"]), **options)

    def _call(self, route: str, body: dict | None = None, ok_conflicts: tuple[str, ...] = ()) -> dict:
        raw = None if body is None else json.dumps(body).encode()
        self.sent += len(raw or b"")
        answer = _request(f"{self.url}/tasks/{self.task.task_id}/{route}", raw, self.timeout, self.attempts,
                          ok_conflicts)
        self.received += len(answer)
        return json.loads(answer)

    def state(self) -> str:
        """The task's state at S1: enrolling, round1 to round4, handover, delivered or failed."""
        return json.loads(_request(f"{self.url}/tasks/{self.task.task_id}", None, self.timeout, self.attempts))["state"]

    def enroll(self, token: str) -> int:
        answer = self._call("enroll", {"token": token, "public_key": base64.b64encode(self.public_key).decode()})
        self.user, self.secret = answer["user"], answer["secret"]
        self.role = TSSUser(self.task.parameters, self.user, self.task.min_survivors)
        return self.user

    def _auth(self) -> dict:
        if self.role is None:
            raise RuntimeError("enroll first")
        return {"user": self.user, "secret": self.secret}

    def _seal(self, message: bytes, public_key: bytes, info: bytes) -> str:
        sealed = _suite(KEM).encrypt(message, _public_key(KEM, public_key), info=info)
        self.sealed_sent += len(sealed)
        return base64.b64encode(sealed).decode()

    def report(self, value: int) -> None:
        """Round 1: his coin and report set drawn, the set sent to S1."""
        auth = self._auth()
        message = self.role.report(value)
        self._call("round1", {**auth, "message": base64.b64encode(message).decode()}, ("already_sent",))

    def share(self) -> None:
        """Round 2: his shares, one sealed message for each helper of his items."""
        answer = self._call("election", self._auth())
        keys = {k["user"]: base64.b64decode(k["public_key"]) for k in answer["public_keys"]}
        plain = self.role.share({e["item"]: e["helpers"] for e in answer["helpers"]})
        shares = [{"recipient": h, "sealed": self._seal(m, keys[h], self.task.share_info(self.user, h))}
                  for h, m in plain.items()]
        self._call("round2", {**self._auth(), "shares": shares}, ("already_sent",))

    def inbox(self) -> dict:
        """What S1 asks of him in the open round: round 3, the items he helps with (none if he is no helper),
        their R2 reporters and the sealed shares they sent him; round 4, the dropped helpers of his items (none if
        he is not asked). Refused (409) when neither round is open."""
        return self._call("inbox", self._auth())

    def helper_sums(self) -> bool:
        """Round 3: if he is a helper, the sums of the shares his items' R2 reporters sent him, sealed to S2
        (True); False if he helps with no item."""
        answer = self.inbox()
        if answer["round"] != 3 or not answer["items"]:
            return False
        suite, key = _suite(KEM), _private_key(KEM, self.private_key)
        opened = {s["sender"]: suite.decrypt(base64.b64decode(s["sealed"]), key,
                                             info=self.task.share_info(s["sender"], self.user))
                  for s in answer["shares"]}
        message = self.role.sums({e["item"]: e["reporters"] for e in answer["items"]}, opened)
        sealed = self._seal(message, self.task.second_public_key, second_info(self.task.second_task_id, SUMS,
                                                                              self.user))
        self._call("round3", {**self._auth(), "message": sealed}, ("already_sent",))
        return True

    def recover(self) -> bool:
        """Round 4: if S1 asks, his shares to his items' dropped helpers, sealed to S2 (True; refused by the role
        if the request would reveal his entry); False if not asked."""
        answer = self.inbox()
        if answer["round"] != 4 or not answer["dropped"]:
            return False
        message = self.role.recover({e["item"]: e["helpers"] for e in answer["dropped"]})
        sealed = self._seal(message, self.task.second_public_key, second_info(self.task.second_task_id, RECOVERY,
                                                                              self.user))
        self._call("round4", {**self._auth(), "message": sealed}, ("already_sent",))
        return True
