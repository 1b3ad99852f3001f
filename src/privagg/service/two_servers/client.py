"""The SDK of a TSS or TSS' user: his rounds against S1 (numpy, randomgen, ``cryptography``; stdlib HTTP).

    from privagg.service.two_servers.client import TSSClient
    user = TSSClient.fetch(s1_url, task_id, organisation_key=key)  # the organisation-signed task (S2's keys in it)
    user.enroll(token)                         # his own X25519 and identity keys; his index in the roster
    user.send("report", value)                 # round 1, once the roster is full: his report set to S1
    user.send("share")                         # round 2, once round 1 closed: his shares to his items' helpers
    user.send("sums")                          # round 3: his sums for S2, if elected (False: not a helper)
    user.send("recover")                       # round 4, if S1 asks: shares to dropped helpers (False: not asked)

Rounds 3 and 4 ask only some users; once a round's last expected message arrives it closes, and a user who asks
after that is refused (409 ``round_closed``).

The protocol is the role its registry entry declares (:class:`privagg.protocols.two_server_parties.TSSUser`), with
secure randomness, run by :class:`~privagg.service.round_client.RoundClient`: shares are sealed with HPKE to
their helper's public key (the round's relay, the task and both users bound as HPKE's info); sums and recovered
shares to S2's key for the task (S2's task id, the kind and the sender bound, :meth:`TSSTask.sealed_to`), so S1
relays what it cannot read. A request S1 did not answer is sent again (the same bytes); "already sent" then
means the first arrived. ``user.role.state.to_bytes()`` is what a device keeps between rounds.
"""

from __future__ import annotations

from ..round_tasks import TSSTask
from ..round_client import RoundClient


class TSSClient(RoundClient):
    """One TSS or TSS' user's device in one task, against S1 (:class:`RoundClient`)."""

    task_type = TSSTask

    def make_role(self, user: int):  # S2's key from the task checks the election (none: a task that cannot share)
        return self.protocol.user(self.task.parameters, user, self.task.min_survivors, identity=self.identity,
                                  second=self.task.second_identity_key or b"")
