"""TSS's dishonest parties for the service tests (issue 46; docs/privacy.md, "Dishonest parties"): each a subclass of the honest
one that lies in one way.

* :class:`OneHelperS1`: S1 names one user the only helper of every item, stating the true m_j (or m_j = 1 for
  every item, ``counts=1``), and asks S2 to attest it.
* :class:`SelfAttestingS1`: the same election, attested by S1 itself (its own key), never shown to S2.
* :class:`WrongSumHelper` (privagg.service.two_servers.dishonest: demo-service's too): a helper's role adding ``extra``
  to his sum of one item (his first).
* :class:`EverySumUnopenedS2`: S2 saying, as round 3 closes, that no helper's sum opens (to be handed shares).
* :class:`IsolatingS1`: S1 keeping every reporter but ``target`` (and their shares) from every helper, counting
  them all in R2 for S2, so that the helpers' sums of each item add up to ``target``'s entry (or, ``without``,
  keeping ``target`` alone from them).
* :class:`SubstitutingS1`: S1 handing S2, for one helper, a sum it sealed to S2 itself (his own plus ``extra`` on his
  first item), with the helper's stored signature of the sum he did send.
"""

from __future__ import annotations

import dataclasses
import json

from privagg.core import identity
from privagg.protocols.two_server_election import CONTEXT, Election
from privagg.protocols.two_server_messages import SECOND, SUMS, decode, encode
from privagg.protocols.two_server_parties import FirstServer
from privagg.service.round_tasks import KEM, second_info
from privagg.service.two_servers.dishonest import WrongSumHelper  # noqa: F401 (demo-service's)
from privagg.service.rounds import RoundDriver
from privagg.service.tasks import _public_key, _suite
from privagg.service.two_servers.servers import FirstService, SecondService


def one_helper(election: Election, helper: int, counts: int | None = None) -> Election:
    """``election`` with ``helper`` the only helper of every item (the m_j kept, or all ``counts``)."""
    return Election(election.senders, election.counts if counts is None else (counts,) * len(election.counts),
                    tuple((helper,) for _ in election.helpers))


class _OneHelperElection(FirstServer):
    helper, counts = 5, None

    def elect(self, sets, rng=None) -> Election:
        return one_helper(super().elect(sets, rng), self.helper, self.counts)


class OneHelperS1(FirstService):
    """S1 electing user ``helper`` the only helper of every item (issue 46), and asking S2 to attest it."""

    def __init__(self, *args, helper: int = 5, counts: int | None = None, **options) -> None:
        super().__init__(*args, **options)
        self.lie = type("Lie", (_OneHelperElection,), {"helper": helper, "counts": counts})

    def _close(self, c, task, protocol, coordinator, *args, **kwargs) -> dict:
        return super()._close(c, task, protocol, self.lie(task.parameters, task.min_survivors), *args, **kwargs)


class _ForgedSecond:
    """What S1 would need S2 for, done by S1 alone: the election signed with S1's own key."""

    def __init__(self, parameters, key: bytes) -> None:
        self.parameters, self.key = parameters, key

    def attest(self, election: Election) -> tuple[bytes, bytes]:
        return identity.sign(self.key, CONTEXT, election.document(self.parameters)), identity.public_key(self.key)

    def unopened(self, election: Election, sums) -> list[int]:
        return []


class SelfAttestingS1(OneHelperS1):
    """:class:`OneHelperS1` that never asks S2: it signs the election with a key of its own and serves that key."""

    key = bytes(range(1, 33))

    def _close(self, c, task, protocol, coordinator, *args, **kwargs) -> dict:
        lying = self.lie(task.parameters, task.min_survivors, second=_ForgedSecond(task.parameters, self.key))
        return RoundDriver._close(self, c, task, protocol, lying, *args, **kwargs)  # S2 is not asked


class EverySumUnopenedS2(SecondService):
    """S2 claiming, as round 3 closes, that no helper's sum opens: S1 should then recover only proper subsets of an
    item's helpers, and here there are none (every helper is named), so no reporter reveals anything."""

    def open_sums(self, task_id: str, authorization: str | None, body: bytes) -> dict:
        honest = super().open_sums(task_id, authorization, body)
        return {**honest, "unopened": sorted(e["helper"] for e in json.loads(body)["sums"])}


class _IsolatingLists(FirstServer):
    target, without = 0, False

    def inbox(self, round_, user, state, messages):
        inbox = super().inbox(round_, user, state, messages)
        if round_.name == "sums":
            inbox["reporters"] = {j: [i for i in r if (i == self.target) != self.without]
                                  for j, r in inbox["reporters"].items()}
        return inbox


class IsolatingS1(FirstService):
    """S1 showing each helper only reporter ``target`` of each item, and relaying him only ``target``'s shares (the
    reviewer's attack on the helpers' sums: docs/privacy.md, "A helper's lists"); ``without=True``: every reporter
    but ``target``, counted in R2 all the same (the second reviewer's: one left out, nobody dropped)."""

    def __init__(self, *args, target: int = 0, without: bool = False, **options) -> None:
        super().__init__(*args, **options)
        self.lists = type("Lists", (_IsolatingLists,), {"target": target, "without": without})
        self.target, self.without = target, without

    def _coordinator(self, task):
        if task.task_id not in self._coordinators:
            self._coordinators[task.task_id] = self.lists(task.parameters, task.min_survivors)
        return super()._coordinator(task)

    def _relayed_to(self, c, task_id, number, user) -> list:
        return [row for row in super()._relayed_to(c, task_id, number, user) if (row[0] == self.target) != self.without]


class SubstitutingS1(FirstService):
    """S1 replacing helper ``helper``'s sealed sum in the hand-over by one it seals to S2's public key itself (anyone
    can): ``plain`` (his sum's plaintext, as S1 would know it from him, or any sum it likes) with ``extra`` added to
    his first item. Nothing changes while ``helper`` is None."""

    helper: int | None = None
    plain: bytes = b""
    extra = 7

    def handover(self, task_id: str):
        honest = super().handover(task_id)
        if self.helper is None:
            return honest
        task, h = self.task(task_id), self.helper
        p = task.parameters
        true = decode(p, self.plain, SUMS, h)
        values = [(int(v) + (self.extra if k == 0 else 0)) % p.modulus for k, v in enumerate(true.values)]
        forged = encode(p, SUMS, h, SECOND, true.items, values, counts=true.counts)
        sealed = _suite(KEM).encrypt(forged, _public_key(KEM, task.second_public_key),
                                     info=second_info(task.second_task_id, SUMS, h))
        return dataclasses.replace(honest, sums={**honest.sums, h: sealed})
