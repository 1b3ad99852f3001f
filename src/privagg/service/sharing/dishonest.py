"""One dishonest user of DPDS or DPDG for ``privagg demo-service dpds|dpdg --dishonest KIND`` (issue 46), so that a
newcomer sees the protocol detect a deviation live; the service tests' dishonest parties
(tests/service/dishonest_dpds.py) import these rather than keep copies. Each is the honest SDK client (or role)
with one deviation; what the protocol does about it: docs/privacy.md, "Dishonest parties".

* ``junk-backups`` (:class:`JunkBackupsClient`): random bytes of the right size as each sealed backup, signed by
  him. No recipient can open one: they complain in round 2, he is excluded (a dropout) and the release is exact
  over the others.
* ``wrong-share`` (:class:`WrongRevealer`): in round 5 every share he reveals moved by one. Each fails its dealer's
  commitment: discarded, he is blamed, the release is exact.
* ``inconsistent-shares`` (:class:`InconsistentDealer`): in round 1 every holder's shares moved by one, committed to
  as dealt: every holder's check passes, but any t of them rebuild no secret he announced (whoever drops out). Proven
  at the reveal round's close, he is excluded in round 6 (the survivors' pair seeds with him remove his terms), and
  the release is exact over the others, naming him.
"""

from __future__ import annotations

import secrets

import numpy as np

from ...core import shamir
from ...protocols.roles import Outbox
from ...protocols.sharing_messages import (BACKUP, COMMITMENTS, LIMBS, REVEAL, SERVER, Revealed, dealt_commitments,
                                           decode, encode)
from ...protocols.sharing_parties import SharingUser
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
        honest = decode(p, super().reveal(*args, **kwargs).message, (REVEAL,), self.index, SERVER).payload
        return Outbox(encode(p, REVEAL, self.index, SERVER, Revealed(
            honest.owners, honest.secrets, (honest.shares + 1) % shamir.PRIME)), {})


class InconsistentDealer(SharingUser):
    """Round 1 with the shares of ``victims`` (holders; None: every holder, so that the proof does not hang on one
    holder's staying, as it did in the demo with dropouts) moved by one, both secrets', committed to as dealt: every
    holder's check passes, and t shares that include a victim's rebuild no secret he announced (his mask seed's if he
    survives, his pair key's if he drops out after round 2)."""

    victims: tuple[int, ...] | None = None

    def advertise(self, value: int) -> Outbox:
        out = super().advertise(value)
        p, n = self.parameters, self.parameters.n_users
        victims = self.victims if self.victims is not None else tuple(out.relayed)
        shares = np.zeros((n, 2, LIMBS), dtype=np.int64)
        shares[self.index] = self.state.backup
        relayed = {}
        for k, raw in out.relayed.items():
            shares[k] = decode(p, raw, (BACKUP,), self.index, k).payload
            if k in victims:  # the second limb: X25519's clamping ignores some bits of the first (and the last)
                shares[k, :, 1] = (shares[k, :, 1] + 1) % shamir.PRIME
            relayed[k] = encode(p, BACKUP, self.index, k, shares[k])
        return Outbox(encode(p, COMMITMENTS, self.index, SERVER, dealt_commitments(self.index, shares)), relayed)


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
                             "each fails its dealer's commitment: discarded, he is blamed, the release is exact"),
    "inconsistent-shares": Deviation(client_of(InconsistentDealer), "deals every holder shares moved by one in "
                                     "round 1, committed to as dealt (each holder's check passes)",
                                     "proven inconsistent at the reveal round (t shares matching his commitments "
                                     "rebuild no secret he announced): excluded in round 6, where the survivors reveal "
                                     "their pair seeds with him; the release is exact over the others, naming him")}
"""Each ``--dishonest`` kind of dpds and dpdg."""
