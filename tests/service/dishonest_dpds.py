"""Dishonest parties of DPDS and DPDG (issue 46): each the honest party with one deviation, a subclass of it, so that
a test runs the real services (or the simulator's harness) with one party lying and everything else as deployed.

Users (roles, and the SDK clients that run them):

* :class:`JunkBackupsClient` (privagg.service.sharing.dishonest: demo-service's too): the issue's "random backups":
  every sealed backup replaced by random bytes of its size (signed by him, as his SDK signs what it posts): no
  recipient can open one.
* :class:`JunkBackupsUser`: the same in the simulator, which seals nothing: random bytes as each backup.
* :class:`WrongSharesUser`: backups that open but hold wrong Shamir shares (one limb of each recipient's shares
  moved by one), his commitments those of the right shares.
* :class:`InconsistentDealer` (privagg.service.sharing.dishonest: demo-service's too): wrong shares for ``victims``
  committed to as they are: each recipient's share matches its commitment, but together they rebuild no secret he
  committed to (proven at the reveal round's close, excluded in round 6).
* :class:`WrongRevealer` (privagg.service.sharing.dishonest): reveals shares moved by one.

Servers (coordinators, put in the registry's dpds entry by :func:`serving`):

* :class:`Equivocating`: shows the ``minority`` of the survivors another U2 (without ``victim``, as a dropout: his
  pair key asked of them while the others reveal his mask seed), and takes their signatures of it.
* :class:`ForgingSignatures`: equivocates, and shows the minority t signatures of their list under identity keys
  of its own.
* :class:`LyingRecovery`: names ``victim`` a dropout though his masked sum arrived (U2 without him), and releases
  the others.
* :class:`LonelyKeys`: shows ``victim`` his own key alone in round 3, as if he were to mask with nobody.
* :class:`AlteringCommitments`: shows the holder ``victim`` in round 2 another commitment of each dealer of
  ``dealers`` (one bit flipped), which had him complain about honest dealers, or be excluded as a false complainer.
"""

from __future__ import annotations

import dataclasses
import secrets


from privagg.core import shamir
from privagg.errors import ParameterError
from privagg.protocols import registry
from privagg.protocols.roles import Outbox
from privagg.protocols.sharing_messages import BACKUP, MASK_SEED, SERVER, decode, encode
from privagg.protocols.sharing_parties import SharingUser
from privagg.protocols.sharing_server import PROTOCOL, SharingServer
from privagg.service.sharing.dishonest import (InconsistentDealer, JunkBackupsClient, WrongRevealer,  # noqa: F401
                                               client_of)  # (demo-service's)


class JunkBackupsUser(SharingUser):
    """Round 1 with random bytes of each backup's size as the backup (the simulator's junk: it seals nothing)."""

    def advertise(self, value: int) -> Outbox:
        out = super().advertise(value)
        return Outbox(out.message, {k: secrets.token_bytes(len(raw)) for k, raw in out.relayed.items()})


class WrongSharesUser(SharingUser):
    """Round 1 with each backup's first limb of his mask seed's shares moved by one; the commitments honest."""

    def advertise(self, value: int) -> Outbox:
        out = super().advertise(value)
        p, relayed = self.parameters, {}
        for k, raw in out.relayed.items():
            shares = decode(p, raw, (BACKUP,), self.index, k).payload.copy()
            shares[MASK_SEED, 0] = (shares[MASK_SEED, 0] + 1) % shamir.PRIME
            relayed[k] = encode(p, BACKUP, self.index, k, shares)
        return Outbox(out.message, relayed)


class Equivocating(SharingServer):
    """Shows the users of ``minority`` (survivors) U2 without ``victim`` in rounds 4 and 5, the others the true U2, and
    takes the signatures of either list."""

    victim, minority = 0, ()

    def _shown(self, user: int, state: dict) -> dict:
        if user in self.minority and "survivors" in state:
            return {**state, "survivors": [u for u in state["survivors"] if u != self.victim]}
        return state

    def inbox(self, round_, user, state, messages):
        return super().inbox(round_, user, self._shown(user, state), messages)

    def check(self, round_, user, message, state, messages):
        try:
            super().check(round_, user, message, state, messages)
        except ParameterError:
            if round_.name != "consistency":
                raise
            super().check(round_, user, message, self._shown(user, state), messages)

    def finish(self, state, messages):
        return super().finish(state, {**messages, "reveal": {k: m for k, m in messages["reveal"].items()
                                                             if k not in self.minority}})


class LyingRecovery(SharingServer):
    """Publishes U2 without ``victim`` although his masked sum arrived, and releases over the others."""

    victim = 0

    def close(self, round_, answered, state, messages):
        if round_.name == "masked_sum":
            answered = [u for u in answered if u != self.victim]
        return super().close(round_, answered, state, messages)

    def finish(self, state, messages):
        survivors = set(state["survivors"])
        return super().finish(state, {**messages, "masked_sum": {u: m for u, m in messages["masked_sum"].items()
                                                                 if u in survivors}})


class LonelyKeys(SharingServer):
    """Round 3's inbox of ``victim`` with his own key alone (each signed, as the device checks): shown it, he would
    send x + b and the others, shown the true lists, reveal b (a reviewer's attack)."""

    victim = 4

    def inbox(self, round_, user, state, messages):
        inbox = super().inbox(round_, user, state, messages)
        if round_.name == "masked_sum" and user == self.victim:
            inbox["keys"] = {user: inbox["keys"][user]}
        return inbox


class AlteringCommitments(SharingServer):
    """Round 2's inbox of ``victim`` with each commitment of ``dealers`` to his shares one bit off."""

    victim, dealers = 0, (1, 2, 3)

    def inbox(self, round_, user, state, messages):
        inbox = super().inbox(round_, user, state, messages)
        if round_.name == "check" and user == self.victim:
            for u in self.dealers:
                inbox["commitments"][u] = inbox["commitments"][u][:-1] + bytes([inbox["commitments"][u][-1] ^ 1])
        return inbox


def serving(monkeypatch, coordinator: type, **lies) -> type:
    """The registry's dpds and dpdg entries run ``coordinator`` (a subclass of the honest one, its ``lies`` set):
    the sharing service and the simulator then use it."""
    lying = type(coordinator.__name__, (coordinator,), lies)
    for name in ("dpds", "dpdg"):
        monkeypatch.setitem(registry.REGISTRY, name, dataclasses.replace(
            registry.REGISTRY[name], rounds=dataclasses.replace(PROTOCOL, coordinator=lying)))
    return lying


def lying_users(roles: dict[int, type]):
    """A ``MultiRound.user`` factory (the simulator's) whose user ``i`` is ``roles[i]`` (default the honest one)."""

    def user(parameters, index, min_survivors, **options):
        return roles.get(index, SharingUser)(parameters, index, min_survivors, **options)

    return user



class ForgingSignatures(Equivocating):
    """The equivocating server, which also shows the minority t signatures of its list, made with identity keys of
    its own that it names as the signers' (``identities`` in their inbox)."""

    def inbox(self, round_, user, state, messages):
        from privagg.core import identity
        from privagg.protocols.sharing_messages import SIGNATURE
        from privagg.protocols.sharing_parties import SIGNED_LISTS, statement

        inbox = super().inbox(round_, user, state, messages)
        if round_.name == "reveal" and user in self.minority:
            shown = self._shown(user, state)
            lists = statement(shown["checked"], shown["survivors"], bytes.fromhex(shown["keys"]))
            forged = {v: identity.generate() for v in shown["survivors"]}
            inbox["signatures"] = {v: encode(self.parameters, SIGNATURE, v, SERVER, identity.sign(
                key, SIGNED_LISTS, lists)) for v, key in forged.items()}
            inbox["identities"] = {v: identity.public_key(key) for v, key in forged.items()}
        return inbox
