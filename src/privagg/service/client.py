"""The client SDK: what runs on a user's device (numpy, randomgen and ``cryptography`` only).

Here rather than at ``privagg.client``, which is the registry's ``client(parameters)`` function.

    from privagg.service.client import Client
    client = Client.from_json(task_json)          # the task the analyzer serves; parameters checked
    report = client.report(value, token)          # randomized with secure randomness, sealed per message

The device never recalibrates: it loads the task's frozen parameters (their fields and noise floor
checked; ``verify=True`` also checks what the noise buys, which loads scipy). Its value is randomized
locally by the protocol's client randomizer with the ChaCha20 generator keyed from the OS, every message
is sealed separately to the analyzer (:mod:`privagg.service.tasks`), and the report carries a random
report id (the collector's de-duplication key, so a retried submission is counted once) and the
client's one-use token.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass

from ..core.randomness import secure_rng
from .tasks import REPORT_ID_BYTES, Task, seal_messages


@dataclass(frozen=True)
class Report:
    """One user's submission to the collector."""

    task_id: str
    report_id: str  # 32 hex characters, random
    token: str  # the one-use token the collector issued for this task
    ciphertexts: tuple[bytes, ...]  # one sealed message each

    def to_dict(self) -> dict:
        return {"task_id": self.task_id, "report_id": self.report_id, "token": self.token,
                "ciphertexts": [c.hex() for c in self.ciphertexts]}


class Client:
    """A device's side of one task."""

    def __init__(self, task: Task) -> None:
        from ..protocols.registry import client as make_client

        self.task = task
        self.randomizer = make_client(task.parameters)

    @classmethod
    def from_json(cls, text: str | bytes, verify: bool = False) -> "Client":
        return cls(Task.from_json(text, verify))

    def report(self, value, token: str) -> Report:
        """The sealed messages of one user holding ``value`` (an item code, a vector, a (coordinate, weight)
        pair: what the protocol's randomizer takes for one user), with a fresh report id."""
        messages = self.randomizer.randomize([value], secure_rng())
        return Report(self.task.task_id, secrets.token_hex(REPORT_ID_BYTES), token,
                      tuple(seal_messages(self.task, messages)))
