"""One dishonest user of TSS or TSS' for ``privagg demo-service tss|tss-collusion --dishonest KIND`` (issue 46), so
that a newcomer sees what the protocol detects live; the service tests' dishonest parties
(tests/service/dishonest_tss.py) import these rather than keep copies. Each is the honest SDK client (or role)
with one deviation; what the protocol does about it: docs/privacy.md, "Dishonest parties".

* ``misrouted-sum`` (:class:`MisroutedSumClient`): his helper sums sealed as another helper's (HPKE's info names
  that helper), as a sum replayed from another helper would be. S2 cannot open it as his: S1 treats him as a helper
  who sent no sum, his items are recovered in round 4 and the release is exact (``dropouts.unopened_sums``).
* ``wrong-sum`` (:class:`WrongSumHelper`): ``extra`` added to his sum of his first item. Inside [0, |R_j|] no party
  can detect it without input proofs; the release's ``trust`` block says it trusts the helpers' integrity.
"""

from __future__ import annotations

from ...protocols.roles import Outbox
from ...protocols.two_server_messages import SECOND, SUMS, decode, encode
from ...protocols.two_server_parties import TSSUser
from ..round_demo import Deviation
from ..round_tasks import second_info
from .client import TSSClient


class WrongSumHelper(TSSUser):
    """A helper adding ``extra`` to his sum of his first item (``moved``, once he sent it): undetectable without
    input proofs while the count stays in [0, |R_j|]."""

    extra = 7
    moved: int | None = None

    def sums(self, reporters, shares, survivors, election=None, attestation=None, second=None) -> Outbox:
        honest = decode(self.parameters, super().sums(reporters, shares, survivors, election, attestation, second)
                        .message, SUMS, self.index)
        values = [(int(v) + (self.extra if k == 0 else 0)) % self.parameters.modulus
                  for k, v in enumerate(honest.values)]
        self.moved = int(honest.items[0]) if len(honest.items) else None
        return Outbox(encode(self.parameters, SUMS, self.index, SECOND, honest.items, values, counts=honest.counts),
                      {})


class WrongSumClient(TSSClient):
    """A TSS device whose role is :class:`WrongSumHelper` adding 1 (the least move, the likeliest to stay in
    range)."""

    def make_role(self, user: int):
        role = WrongSumHelper(self.task.parameters, user, self.task.min_survivors, identity=self.identity,
                              second=self.task.second_identity_key or b"")
        role.extra = 1
        return role


class MisroutedSumClient(TSSClient):
    """A TSS device that seals his helper sums as the next user's (what a sum replayed from another helper is), and,
    having posted no sum of his own, answers round 4 as a helper who sent none (as the test's thief does)."""

    def _seal(self, message: bytes, public_key: bytes, info: bytes) -> bytes:
        own, other = (second_info(self.task.second_task_id, SUMS, u) for u in (
            self.user, (self.user + 1) % self.task.parameters.n_users))
        if info.startswith(own):  # (what follows binds R2 and his numbers of reporters)
            info = other + info[len(own):]
        return super()._seal(message, public_key, info)

    def send(self, name: str, value: int | None = None) -> bool:
        sent = super().send(name, value)
        if name == "sums":
            self.role.state.summed = []
        return sent


KINDS = {
    "misrouted-sum": Deviation(MisroutedSumClient, "seals his helper sums as another helper's",
                               "S2 cannot open them as his: his items are recovered in round 4, the release is exact "
                               "and names him"),
    "wrong-sum": Deviation(WrongSumClient, "adds 1 to his helper sum of his first item",
                           "not detectable without input proofs while the count stays in [0, |R_j|] (out of it, the "
                           "item is refused): the release's trust block says it trusts the helpers' integrity")}
"""Each ``--dishonest`` kind of tss and tss-collusion."""
