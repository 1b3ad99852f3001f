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

from ..protocols.two_server_parties import RECOVERY, SUMS, TSSUser, message_entries
from .sharing_client import RosterClient
from .round_tasks import TSSTask, second_info


class TSSClient(RosterClient):
    """One TSS or TSS' user's device in one task (:class:`RosterClient`, against S1; the rounds of :class:`TSSUser`)."""

    task_type = TSSTask
    entries = staticmethod(message_entries)

    def make_role(self, user: int) -> TSSUser:
        return TSSUser(self.task.parameters, user, self.task.min_survivors)

    def _seal_b64(self, message: bytes, public_key: bytes, info: bytes) -> str:
        return base64.b64encode(self._seal(message, public_key, info)).decode()

    def report(self, value: int) -> None:
        """Round 1: his coin and report set drawn, the set sent to S1."""
        auth = self._auth()
        message = self._plain(self.role.report(value).message)
        self._call("round1", {**auth, "message": base64.b64encode(message).decode()}, ("already_sent",))

    def share(self) -> None:
        """Round 2: his shares, one sealed message for each helper of his items."""
        answer = self._call("election", self._auth())
        keys = {k["user"]: base64.b64decode(k["public_key"]) for k in answer["public_keys"]}
        self.count("received", "helper identities", sum(len(e["helpers"]) for e in answer["helpers"]))
        plain = self.role.share({e["item"]: e["helpers"] for e in answer["helpers"]}).relayed
        shares = [{"recipient": h, "sealed": self._seal_b64(m, keys[h], self.task.share_info(self.user, h))}
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
        opened = {s["sender"]: self._open(s["sealed"], self.task.share_info(s["sender"], self.user))
                  for s in answer["shares"]}
        message = self.role.sums({e["item"]: e["reporters"] for e in answer["items"]}, opened).message
        sealed = self._seal_b64(message, self.task.second_public_key, second_info(self.task.second_task_id, SUMS,
                                                                                  self.user))
        self._call("round3", {**self._auth(), "message": sealed}, ("already_sent",))
        return True

    def recover(self) -> bool:
        """Round 4: if S1 asks, his shares to his items' dropped helpers, sealed to S2 (True; refused by the role
        if the request would reveal his entry); False if not asked."""
        answer = self.inbox()
        if answer["round"] != 4 or not answer["dropped"]:
            return False
        message = self.role.recover({e["item"]: e["helpers"] for e in answer["dropped"]}).message
        sealed = self._seal_b64(message, self.task.second_public_key, second_info(self.task.second_task_id,
                                                                                  RECOVERY, self.user))
        self._call("round4", {**self._auth(), "message": sealed}, ("already_sent",))
        return True
