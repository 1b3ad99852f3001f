"""One dishonest user of DPDS or DPDG for ``privagg demo-service dpds|dpdg --dishonest KIND`` (issue 46), so that a
newcomer sees the protocol detect a deviation live; the service tests' dishonest parties
(tests/service/dishonest_dpds.py) import these rather than keep copies. Each is the honest SDK client (or role)
with one deviation; what the protocol does about it: docs/deviations-dpds46.md.

* ``junk-backups`` (:class:`JunkBackupsClient`): random bytes of the right size as each sealed backup, signed by
  him. No recipient can open one: they complain in round 2, he is excluded (a dropout) and the release is exact
  over the others.
* ``wrong-share`` (:class:`WrongRevealer`): in round 5 every share he reveals moved by one. Each fails its dealer's
  commitment: discarded, he is blamed, the release is exact.
"""

from __future__ import annotations

import secrets

from ...core import shamir
from ...protocols import sharing_parties
from ...protocols.roles import Outbox
from ...protocols.sharing_parties import REVEAL, SERVER, Revealed, SharingUser
from ..round_demo import Deviation
from .client import SharingClient


class JunkBackupsClient(SharingClient):
    """A device that posts random bytes as each sealed backup (the sizes the server checks, his signatures)."""

    def _seal(self, message: bytes, public_key: bytes, info: bytes) -> bytes:
        return secrets.token_bytes(len(super()._seal(message, public_key, info)))


class WrongRevealer(SharingUser):
    """Round 5 with every revealed share moved by one (well-formed, signed by him)."""

    def reveal(self, *args, **kwargs) -> Outbox:
        p = self.parameters
        honest = sharing_parties.decode(p, super().reveal(*args, **kwargs).message, (REVEAL,), self.index,
                                        SERVER).payload
        return Outbox(sharing_parties.encode(p, REVEAL, self.index, SERVER, Revealed(
            honest.owners, honest.secrets, (honest.shares + 1) % shamir.PRIME)), {})


def client_of(role: type) -> type:
    """A sharing SDK client whose role is ``role`` (a dishonest user's device)."""

    class Client(SharingClient):
        def make_role(self, user: int):
            return role(self.task.parameters, user, self.task.min_survivors, identity=self.identity)

    Client.__name__ = f"{role.__name__}Client"
    return Client


KINDS = {
    "junk-backups": Deviation(JunkBackupsClient, "posts random bytes as each sealed backup",
                              "no recipient can open one: they complain in round 2, he is excluded (a dropout), the "
                              "release is exact over the others"),
    "wrong-share": Deviation(client_of(WrongRevealer), "reveals every share moved by one in round 5",
                             "each fails its dealer's commitment: discarded, he is blamed, the release is exact")}
"""Each ``--dishonest`` kind of dpds and dpdg."""
