"""Dishonest servers of the multi-round protocols (issue 46), for the attack tests through the real services: each
is the honest service (the round driver of the sharing server or of TSS's S1) with one deviation, a subclass that
lies where a server can lie: in what it serves (the task, the roster, an inbox) or what it takes at enrollment.
What they may not do is what they cannot: sign as the organisation or as a user. Other engineers' dishonest
parties (users, helpers, S2) live in their own modules, tests/service/dishonest_<name>.py.

* :class:`KeySwapping`: the issue's "S1 reads every entry": every user's X25519 key replaced by the server's own
  (it holds the private half), in the roster it serves and in every inbox (``where``: both, or only the inbox);
  :meth:`KeySwapping.opened` counts the relayed messages it can open.
* :class:`PairKeySubstituting`: DPDS's "substituting keys": the server's own pair key shown in round 2 in
  place of one user's, with that user's signature kept.
* :class:`RelayForging`: a relayed message replaced by the server's own, sealed to its recipient (signed by
  nobody: ``signature="keep"`` keeps the sender's signature of the real one, ``"other"`` takes one of the sender's
  signatures of another task).
* :class:`RosterForging`: the roster it serves (whole, and the entries' head) signed by a key of its own, not the
  organisation's.
* :class:`S2KeySwapping`: TSS's task served with S2's key replaced by S1's own.
* :class:`EnrollmentSwapping`: an enrollment's X25519 and identity keys replaced by the server's own on their way
  to the roster (their binding kept: it cannot make another without the token's binding half).
"""

from __future__ import annotations

import base64
import dataclasses
import json

from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey

from privagg.core import identity
from privagg.service.round_tasks import KEM, SignedRoster
from privagg.service.tasks import _private_key, _suite
from privagg.service.sharing.server import SharingService
from privagg.service.two_servers.servers import FirstService


def _b64(raw: bytes) -> str:
    return base64.b64encode(raw).decode()


class _OwnKey:
    """A dishonest server's own X25519 key pair."""

    def _own_key(self) -> bytes:
        if not hasattr(self, "_own"):
            key = X25519PrivateKey.generate()
            self._own = key.private_bytes_raw(), key.public_key().public_bytes_raw()
        return self._own[1]


def key_swapping(base: type) -> type:
    """``base`` (a round driver) that swaps every user's X25519 key for its own: in the signed roster it serves
    (the organisation's signature kept) and the inboxes' ``public_keys`` (``where="roster"``), or only in the
    inboxes (``where="inbox"``)."""

    class KeySwapping(_OwnKey, base):
        where = "roster"

        def signed_roster(self, task_id):
            signed = super().signed_roster(task_id)
            if signed is None or self.where != "roster":
                return signed
            return dataclasses.replace(signed, users={i: (key, self._own_key()) for i, (key, _) in signed.users.items()})

        def inbox(self, task_id, body):
            out = super().inbox(task_id, body)
            for entry in out.get("public_keys", []):
                entry["public_key"] = self._own_key()
            return out

        def opened(self, task_id: str) -> int:
            """The relayed messages of the task it opens with its key (and the HPKE info it knows)."""
            import sqlalchemy as sa

            from privagg.service.round_tasks import relay_info
            from privagg.service.rounds import protocol_of

            rounds, r = protocol_of(self.task(task_id).parameters).rounds, self.relayed
            with self.engine.connect() as c:
                rows = c.execute(sa.select(r.c.round, r.c.sender, r.c.recipient, r.c.sealed).where(
                    r.c.task_id == task_id)).all()
            count = 0
            for number, sender, recipient, sealed in rows:
                try:
                    _suite(KEM).decrypt(sealed, _private_key(KEM, self._own[0]), info=relay_info(
                        rounds[number - 1], task_id, sender, recipient))
                except Exception:  # InvalidTag: sealed to its recipient's key
                    continue
                count += 1
            return count

    return KeySwapping


KeySwappingFirst = key_swapping(FirstService)
KeySwappingSharing = key_swapping(SharingService)


class PairKeySubstituting(_OwnKey, SharingService):
    """Shows every user of round 2 its own pair key in place of ``victim``'s (the victim's signature kept)."""

    victim = 1

    def inbox(self, task_id, body):
        from privagg.protocols.sharing_messages import ADVERTISE, SERVER, encode

        out = super().inbox(task_id, body)
        if out["name"] == "masked_sum":  # a copy of the coordinator's fields, with one key swapped
            p = self.task(task_id).parameters
            out["inbox"] = {**out["inbox"], "keys": {**out["inbox"]["keys"], self.victim: encode(
                p, ADVERTISE, self.victim, SERVER, self._own_key() + bytes(32))}}
        return out


class RelayForging(SharingService):
    """Relays, in place of ``victim``'s backup to each recipient, one of its own sealed to the recipient's key: with
    the victim's signature of the real backup (``signature="keep"``), or with a signature the victim made in another
    task (``replayed``: the sealed bytes and the signature he sent there, relayed as is)."""

    victim = 1
    replayed: dict | None = None  # recipient -> (sealed, signature) from another task

    def inbox(self, task_id, body):
        from privagg.service.tasks import _public_key

        out = super().inbox(task_id, body)
        if out["name"] == "check":  # the round that delivers the backups
            user = body["user"]
            for entry in out["backups"]:
                if entry["sender"] != self.victim:
                    continue
                if self.replayed is not None:
                    sealed, signature = self.replayed[user]
                    entry["sealed"], entry["signature"] = sealed, signature
                else:
                    size = len(entry["sealed"]) - 48
                    entry["sealed"] = _suite(KEM).encrypt(bytes(size), _public_key(
                        KEM, self.signed_roster(task_id).users[user][1]), info=b"")
        return out


class RosterForging(SharingService):
    """Serves the roster signed by a key of its own (the users' keys unchanged)."""

    forger = identity.generate()

    def roster(self, task_id):
        signed = self.signed_roster(task_id)
        forged = dataclasses.replace(signed, signature=identity.sign(self.forger, SignedRoster.context(task_id),
                                                                     signed.document))
        return forged.to_dict()

    def roster_entries(self, task_id, users):
        out = super().roster_entries(task_id, users)
        out["signature"] = identity.sign(self.forger, SignedRoster.context(task_id), out["roster"])
        return out


class S2KeySwapping(_OwnKey, FirstService):
    """Serves its task with S2's public key replaced by its own (the organisation's signature of the real one
    kept): the users would seal their helper sums to S1."""

    def state(self, task_id):
        out = super().state(task_id)
        out["task"] = {**out["task"], "second_public_key": _b64(self._own_key())}
        return out


class EnrollmentSwapping(_OwnKey, SharingService):
    """Puts its own X25519 and identity keys in place of ``victim_token``'s enrollment (the user's binding kept,
    which the server cannot remake without the token's binding half); ``swapped`` records which did."""

    own_identity = identity.generate()

    def enroll(self, task_id, body):
        data = json.loads(body)
        if data["token"] in getattr(self, "victims", ()):
            data["public_key"] = _b64(self._own_key())
            data["identity_key"] = _b64(identity.public_key(self.own_identity))
        return super().enroll(task_id, json.dumps(data).encode())


class GarbageRelaying(SharingService):
    """Relays, in round 3, what is no relayed message: ``garbage`` in place of the list of backups, or of its
    entries, and no keys in round 1's ``public_keys``."""

    garbage = ("junk", [0], [{"sender": 1, "sealed": "!!!", "signature": 7}], [{}])
    case = 0

    def inbox(self, task_id, body):
        out = super().inbox(task_id, body)
        if out["name"] == "check":  # the round that delivers the backups
            out["backups"] = self.garbage[self.case]
        if out["name"] == "advertise" and self.case == len(self.garbage):
            out["public_keys"] = "junk"
        return out
