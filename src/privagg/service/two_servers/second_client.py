"""S2 as S1 asks it while closing rounds 1 and 3 (:class:`SecondClient`), over S2's routes."""

from __future__ import annotations

import base64
import json

from ...core import identity
from ...protocols.roles import RoundFailed
from ...protocols.two_server_election import CONTEXT
from ...protocols.two_server_parties import Election
from ..round_tasks import TSSTask
from ..web import Refused


class SecondAway(Exception):
    """S2 did not answer S1's question: the round stays open and closes at a later tick."""


class SecondClient:
    """S2 as S1's coordinator asks it while closing a round (:class:`FirstServer`'s ``second``), over S2's routes
    (``ask``: :func:`ask_second`): its attestation of the election (checked here against S2's identity key in the
    task, which the reporters check it against), and which helpers' sums do not open. S2's refusal (S1's election
    breaking S2's rules), or an answer that is not one (not JSON, a signature that does not verify, helpers that
    sent no sum), fails the task (:class:`RoundFailed`): the round would never close otherwise; no answer raises
    :class:`SecondAway`."""

    def __init__(self, ask, url: str, task: TSSTask, token: str, signed=None) -> None:
        self.ask, self.url, self.task, self.token, self.signed = ask, url, task, token, signed

    def _ask(self, route: str, document: dict) -> dict:
        try:
            return self.ask(self.url, self.task.second_task_id, route, self.token, json.dumps(document).encode())
        except Refused as err:
            raise RoundFailed(f"S2 refused the {route} ({err.reason}): {err.detail}; nothing was released") from None
        except (json.JSONDecodeError, UnicodeDecodeError):  # S2 answered, but not in JSON: asking again is no use
            raise RoundFailed(f"S2's answer on the {route} is not JSON; nothing was released") from None
        except Exception as err:
            raise SecondAway(f"{type(err).__name__}: {str(err)[:200]}") from None

    def attest(self, election: Election) -> tuple[bytes, bytes]:
        answer = self._ask("election", {"election": election.to_dict()})
        try:
            signature = base64.b64decode(answer["signature"], validate=True)
        except (KeyError, TypeError, ValueError):
            signature = b""
        key = self.task.second_identity_key
        if not identity.verify(key, signature, CONTEXT, election.document(self.task.parameters)):
            raise RoundFailed("S2's attestation of the election does not verify under S2's identity key in the task "
                              "(a task of an older release has none); nothing was released")
        return signature, key

    def unopened(self, election: Election, sums: dict[int, bytes], survivors, reporters) -> list[int]:
        signatures, signed_task, roster = self.signed()
        answer = self._ask("sums", {"election": election.to_dict(), "survivors": list(survivors),
                                    "reporters": list(reporters), "task": signed_task, "roster": roster, "sums": [
            {"helper": h, "sealed": base64.b64encode(v).decode()} for h, v in sorted(sums.items())], "signatures": [
            {"helper": h, "signature": base64.b64encode(signatures.get(h, b"")).decode()} for h in sorted(sums)]})
        unopened = answer.get("unopened") if isinstance(answer, dict) else None
        if not isinstance(unopened, list) or not all(type(h) is int and h in sums for h in unopened):
            raise RoundFailed("S2's answer on the helpers' sums is not a list of helpers who sent one")
        return unopened
