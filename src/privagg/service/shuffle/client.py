"""The client SDK: what runs on a user's device (numpy, randomgen and ``cryptography`` only).

Here rather than at ``privagg.client``, which is the registry's ``client(parameters)`` function.

    from privagg.service.shuffle.client import Client, submit
    client = Client.fetch(analyzer_url, task_id)   # the analyzer's task; parameters checked, never recalibrated
    report = client.report(value, token)           # randomized with secure randomness, sealed per message
                                                   # (Client.fetch(..., budget=LocalBudget(path, eps, delta)): a task
                                                   # the device's own budget cannot pay for is refused first)
    submit(collector_url, report)                   # retried safely until the collector acknowledges

The device never recalibrates: it loads the task's frozen parameters (their fields and noise floor
checked; ``verify=True`` also checks what the noise buys, which loads scipy). Its value is randomized
locally by the protocol's client randomizer with the ChaCha20 generator keyed from the OS, every message
is sealed separately to the analyzer (:mod:`privagg.service.tasks`), and the report carries a random
report id (the collector's de-duplication key, so a retried submission is counted once) and the
client's one-use token. Submission uses only the standard library's HTTP client.
"""

from __future__ import annotations

import base64
import json
import secrets
import time
import urllib.error
import urllib.request
from dataclasses import dataclass

import numpy as np

from ...core.randomness import secure_rng
from ..calls import RETRY_STATUSES, SubmitError
from ..device_budget import LocalBudget, charge_device
from ..tasks import REPORT_ID_BYTES, Task, seal_messages

@dataclass(frozen=True)
class Report:
    """One user's submission to the collector."""

    task_id: str
    report_id: str  # 32 hex characters, random
    token: str  # the one-use token the collector issued for this task
    key_id: int  # the analyzer key the messages are sealed to
    ciphertexts: tuple[bytes, ...]  # one sealed message each
    discovery: tuple[bytes, ...] | None = None  # a staged task's: the first stage's messages, sealed to its key

    def to_dict(self) -> dict:
        """The JSON body the collector takes."""
        out = {"report_id": self.report_id, "token": self.token, "key_id": self.key_id,
               "ciphertexts": [base64.b64encode(c).decode() for c in self.ciphertexts]}
        if self.discovery is not None:
            out["discovery"] = [base64.b64encode(c).decode() for c in self.discovery]
        return out


class Client:
    """A device's side of one task. ``budget``: the device's own privacy budget
    (:class:`~privagg.service.device_budget.LocalBudget`), charged the task's claimed guarantee once, before its first
    report is randomized (a task it cannot pay for: :class:`~privagg.service.device_budget.DeviceBudgetExceeded`)."""

    def __init__(self, task: Task, budget: LocalBudget | None = None) -> None:
        from ...protocols.registry import client as make_client

        self.task, self.budget = task, budget
        self.randomizer = make_client(task.parameters)
        self.discovery = None if task.discovery is None else Client(task.discovery)  # a staged task's first stage
        self._items = None  # the item encoder, once a string item comes

    @classmethod
    def from_json(cls, text: str | bytes, verify: bool = False, budget: LocalBudget | None = None) -> "Client":
        return cls(Task.from_json(text, verify), budget)

    @classmethod
    def fetch(cls, url: str, task_id: str, timeout: float = 30.0, budget: LocalBudget | None = None) -> "Client":
        """The client of the task served at ``url``: the analyzer's, over TLS, so that the key the messages
        are sealed to is the analyzer's. (The collector serves the task too, but a collector that lied about
        the key could open what it shuffles: take it from the collector only where the collector is trusted
        with the plaintexts, as in a test, or check it against a copy shipped with the app.)"""
        try:
            with urllib.request.urlopen(f"{url.rstrip('/')}/tasks/{task_id}", timeout=timeout) as answer:
                text = answer.read()
        except urllib.error.HTTPError as err:  # an unknown task (404), or a service in trouble
            raise SubmitError(err.code, f"the task could not be fetched: {err.read().decode(errors='replace')}") \
                from None
        except (urllib.error.URLError, OSError) as err:
            raise SubmitError(None, f"the task could not be fetched from {url} ({err})") from None
        return cls.from_json(text, budget=budget)

    def report(self, value, token: str) -> Report:
        """The sealed messages of one user holding ``value`` (an item code, a vector, a (coordinate, weight)
        pair: what the protocol's randomizer takes for one user; a string item of a frequency task is hashed
        into the domain with the parameters' public ``item_key``), with a fresh report id.

        A staged task's report (``Task.discovery``) also carries the first stage's messages: the device's (x, w)
        rounded to its cell with coins of its own (x with probability w, else the dummy cell B), then fe-hh's
        messages of that cell; the second stage rounds again with fresh coins, as the simulation's stages do."""
        if isinstance(value, str) and getattr(self.task.parameters, "max_length", None) is None:
            value = int(self._encoder().encode([value])[0])
        charge_device(self.budget, self.task)
        rng = secure_rng()
        messages = self.randomizer.randomize([value], rng)
        stage = None
        if self.discovery is not None:
            p = self.task.parameters
            cell = int(p.cells(p.check_codes(np.asarray([value], dtype=np.float64)), rng)[0])
            stage = tuple(seal_messages(self.discovery.task, self.discovery.randomizer.randomize([cell], rng)))
        return Report(self.task.task_id, secrets.token_hex(REPORT_ID_BYTES), token, self.task.key_id,
                      tuple(seal_messages(self.task, messages)), stage)


    def _encoder(self):
        """The task's item encoder (its public item_key), made once."""
        if self._items is None:
            from ...core.encoding import ItemEncoder

            self._items = ItemEncoder.for_parameters(self.task.parameters, "text")
        return self._items


def submit(collector_url: str, report: Report, attempts: int = 8, backoff: float = 0.25,
           timeout: float = 30.0) -> str:
    """Send ``report`` to the collector until it is acknowledged; returns its status ("stored", or "already
    stored" when an earlier attempt had landed).

    Safe to retry: every attempt carries the same report id and token, and the collector stores a report
    once. Connection failures and busy answers are retried with exponential backoff; a refusal (4xx)
    raises :class:`SubmitError` at once.
    """
    body = json.dumps(report.to_dict()).encode()
    url = f"{collector_url.rstrip('/')}/tasks/{report.task_id}/reports"
    detail = "not attempted"
    for attempt in range(attempts):
        if attempt:
            time.sleep(backoff * 2 ** (attempt - 1))
        request = urllib.request.Request(url, body, {"content-type": "application/json"})
        try:
            with urllib.request.urlopen(request, timeout=timeout) as answer:
                return json.loads(answer.read())["status"]
        except urllib.error.HTTPError as err:
            detail = err.read().decode(errors="replace")
            if err.code not in RETRY_STATUSES:
                raise SubmitError(err.code, detail) from None
        except (urllib.error.URLError, OSError) as err:
            detail = str(err)
    raise SubmitError(None, f"no acknowledgement after {attempts} attempts ({detail})")
