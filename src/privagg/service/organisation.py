"""The organisation of a multi-round task (DPDS, DPDG, TSS): the one party its users' devices trust out of band,
by its Ed25519 public key (pinned like a CA's, given with the enrollment tokens). It is no server and its private
key never reaches one: the operator's commands (``privagg organisation keygen``, ``task create --organisation-key``,
``roster sign``) or a demo run it in their own process, against the server's database.

* It signs the task's document (:meth:`Organisation.sign_task`): the parameters and the servers' keys (TSS: S2's),
  so that no server can show users another task or swap S2's key.
* It issues the one-use tokens (the server keeps only the hash of each one's authentication half) and, once
  every user enrolled, checks each enrollment's binding with the token's binding half, which the server never
  saw, and signs the roster of those that check (:meth:`Organisation.sign_roster`): the Merkle root of its n
  entries (index, identity key, X25519 key; or none, for a user left out) with the task, n and the graph seed. A user whose binding does not check (a key the server swapped, a user it enrolled itself with a token's
  authentication half) is named and left out: a dropout of round 1.

Every key a device uses (a recipient's, a sender's, a helper's) is then the signed roster's, and every message it
posts is signed by its identity key, which the server and the recipients check (service/rounds.py,
service/round_client.py; docs/privacy.md, "Dishonest parties").
"""

from __future__ import annotations

import dataclasses
import hmac
import secrets

from ..core import identity
from ..errors import ParameterError
from .round_tasks import GRAPH_SEED_BYTES, SignedRoster, task_context
from .roster import secret_hash


class Organisation:
    """An organisation's key pair (``private_key``: 32 raw bytes; the operator's commands read it from the file
    ``privagg organisation keygen`` wrote) and what it signs."""

    def __init__(self, private_key: bytes) -> None:
        self.private_key = private_key
        self.public_key = identity.public_key(private_key)

    @classmethod
    def generate(cls) -> "Organisation":
        return cls(identity.generate())

    def sign_task(self, driver, task) -> None:
        """Sign ``task``'s document and give the signature to its server (``driver``: a round driver over the
        server's database)."""
        driver.sign_task(task.task_id, self.public_key, identity.sign(
            self.private_key, task_context(task.task_id), identity.canonical(task.to_dict())))

    def sign_roster(self, driver, task_id: str, tokens, without_unenrolled: bool = False
                    ) -> tuple[SignedRoster, dict[int, str]]:
        """Check every enrolled user's binding against the tokens the organisation issued for the task, sign the
        roster of those whose binding checks, with a fresh graph seed (:class:`SignedRoster`; the published one's
        when signing again, so that the same roster again changes nothing), and give it to the server, which
        publishes it and opens the rounds; ``without_unenrolled``: though not all n enrolled, the others left out.
        The signed roster, and each user left out with the reason."""
        halves = {secret_hash(auth): binding for auth, binding in map(identity.token_halves, tokens)}
        users, left_out, enrolled = {}, {}, driver.enrollments(task_id, complete=not without_unenrolled)
        n = driver.task(task_id).parameters.n_users  # as the server holds it (a device checks the
        # signed head's n against the task the organisation signed): the roster is of its n indices, each once
        indices = sorted(row["user"] for row in enrolled)
        if indices != sorted(set(indices) & set(range(n))) or (len(indices) < n and not without_unenrolled):
            raise ParameterError("roster", f"the enrollments of users 0..{n - 1}, each once (the task's n = {n})",
                                 f"{len(enrolled)} rows for {len({row['user'] for row in enrolled})} indices")
        left_out.update(dict.fromkeys(sorted(set(range(n)) - set(indices)), "did not enroll"))
        for row in enrolled:
            half = halves.get(row["token_hash"])
            if half is None:
                left_out[row["user"]] = "enrolled with a token not among the organisation's"
            elif row["identity_key"] is None or not hmac.compare_digest(identity.binding(
                    half, task_id, row["identity_key"], row["public_key"]), row["binding"] or b""):
                left_out[row["user"]] = "his token's binding does not check: keys his device did not enroll"
            else:
                users[row["user"]] = (row["identity_key"], row["public_key"])
        published = driver.signed_roster(task_id)  # signed already (by this organisation: the server checked): its seed
        least = driver.task(task_id).min_survivors
        if published is None and len(users) < least:  # a roster the rounds cannot complete, and that stays signed:
            # refused before anything is stored (a reviewer's finding: an empty one broke every route of the task)
            why = next(iter(left_out.items()), None)
            raise ParameterError("tokens", f"the tokens of at least the task's minimum of {least} users among those "
                                 "who enrolled (this task's tokens file?)", f"{len(users)} users whose enrollment "
                                 f"checks against them, of the {len(indices)} enrolled" + (
                                     f" (user {why[0]}: {why[1]}, and {len(left_out) - 1} more left out)" if why
                                     else ""))
        seed = published.graph_seed if published is not None and published.graph_seed else \
            secrets.token_bytes(GRAPH_SEED_BYTES)
        unsigned = SignedRoster(task_id, users, b"", seed, n)
        signed = dataclasses.replace(unsigned, signature=identity.sign(
            self.private_key, SignedRoster.context(task_id), unsigned.document))
        driver.publish_roster(task_id, signed)
        return signed, left_out
