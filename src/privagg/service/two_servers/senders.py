"""What S2 checks of S1's hand-over before it opens anything: that each sealed message in it is its sender's, under
the organisation's key in S2's own task (:func:`check_senders`; docs/privacy.md, "Dishonest parties")."""

from __future__ import annotations

from ...core import identity
from ...errors import ParameterError
from ...protocols.two_server_messages import RECOVERY, SHARES, SUMS
from ...protocols.two_server_second import Handover
from ..round_tasks import SecondTask, SignedRoster, check_task, message_context
from ..rounds import protocol_of


def check_senders(task: SecondTask, handover: Handover) -> None:
    """That each sealed message S1 hands over is its sender's, under the organisation's key in S2's own task (S1
    does not control it; docs/privacy.md, "Dishonest parties"): S1's task as the organisation signed it, naming
    S2's task (which binds S1's task id to S2's); its roster as the organisation signed it, for that task; and each
    helper's sum and each reporter's recovery signed by its sender's identity key in the roster, as he posted it
    to S1 (:func:`~privagg.service.round_tasks.message_context`: S1's task, the round, the sender, to the server);
    each user of R2 his round-2 post's (he shared: R2 sets the guarantee). A ParameterError names the field otherwise:
    S1 swapped a sealed message (anyone can seal to S2) or counted in R2 a user who did not share.

    The task fails (:meth:`SecondService.receive`) rather than the helper treated as dropped: the recovery round is
    closed by the hand-over, so his items could not be recovered, and a hand-over S1 forged proves S1 dishonest, so
    nothing else in it is to be relied on either."""
    first_id, roster = signed_context(task, handover.task, handover.roster, "handover")
    protocol = protocol_of(task.parameters)
    if set(handover.unopened_sums) != set(handover.unopened):
        raise ParameterError("handover.unopened_sums", "the sealed sum of each helper the hand-over names unopened, "
                             "as he sent it (S2 opens it again before naming him)",
                             sorted(set(handover.unopened_sums) ^ set(handover.unopened))[:8])
    for kind, field, name, sealed in ((SUMS, "sums", "sums", handover.sums),
                                      (SUMS, "unopened_sums", "sums", handover.unopened_sums),
                                      (RECOVERY, "recoveries", "recover", handover.recoveries)):
        for sender, blob in sorted(sealed.items()):
            key = roster.users.get(sender, (b"",))[0]
            identity.check(key, handover.signatures.get((kind, sender), b""),
                           message_context(first_id, protocol.number(name), sender, None), blob,
                           f"handover.{field}[{sender}].signature", f"user {sender}'s identity key in the signed "
                           "roster (of this sealed message as he posted it to S1)")
    for reporter in handover.survivors:  # R2, which the release's guarantee is computed over: each did share
        identity.check(roster.users.get(reporter, (b"",))[0], handover.signatures.get((SHARES, reporter), b""),
                       message_context(first_id, protocol.number("share"), reporter, None), b"",
                       f"handover.shared[{reporter}].signature", f"user {reporter}'s identity key in the signed roster "
                       "(of his round-2 post to S1: an S1 that counts in R2 a user who did not share would overstate "
                       "the release's guarantee)")


def signed_context(task: SecondTask, signed_task, roster, field: str) -> tuple[str, SignedRoster]:
    """(S1's task id, its roster) from S1's task and roster as the organisation signed them (``signed_task``:
    {"task", "signature"}), checked under the organisation's key in S2's own task and naming S2's task; else a
    ParameterError naming the field."""
    if task.organisation_key is None:
        raise ParameterError("organisation_key", "the organisation's public key in S2's task (to check S1's "
                             "signatures; a task of an older release has none)", None)
    signed = signed_task if isinstance(signed_task, dict) else {}
    document = signed.get("task")
    first_id = document.get("task_id") if isinstance(document, dict) else None
    check_task(document, signed.get("signature"), task.organisation_key, str(first_id))
    if document.get("second_task_id") != task.task_id:
        raise ParameterError(f"{field}.task.second_task_id", f"S2's task, {task.task_id}",
                             str(document.get("second_task_id"))[:40])
    return first_id, SignedRoster.from_dict(roster, first_id).verify(task.organisation_key)


def check_sums_signed(task: SecondTask, signed_task, roster, sums: dict[int, bytes], signatures: dict) -> None:
    """That each helper's sealed sum S1 shows S2 as round 3 closes is his, as he posted it to S1 (his signature
    under the organisation's roster, as :func:`check_senders` checks it at the hand-over): S2 counts which items
    have a sum before it opens any (``SecondServer.backed``), and anyone can seal a sum to S2. A ParameterError
    names the field otherwise."""
    first_id, checked = signed_context(task, signed_task, roster, "sums")
    number = protocol_of(task.parameters).number("sums")
    for helper, blob in sorted(sums.items()):
        identity.check(checked.users.get(helper, (b"",))[0], signatures.get(helper, b""),
                       message_context(first_id, number, helper, None), blob, f"sums.signatures[{helper}]",
                       f"user {helper}'s identity key in the signed roster (of his sum as he posted it to S1)")
