"""What the demos of the multi-round services share (``privagg demo-service dpds|dpdg|tss|tss-collusion``): the
users' requests in flight, the demo's seeded dropout plan (not privacy randomness) and the task's minimum of
survivors, and the traffic table's rows beside Table I (paper reference §4).
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np

from ..errors import ParameterError

THREADS = 16  # users' requests in flight at once


def close_round(url: str, timeout: float) -> None:
    """POST to a round's close route (``url``), as the demo's operator: an empty body, waiting up to ``timeout``
    seconds (a close that releases inline takes long at large n)."""
    import urllib.request

    with urllib.request.urlopen(urllib.request.Request(url, data=b"", method="POST"), timeout=timeout):
        pass


def check_not_failed(url: str, task_id: str) -> None:
    """Nothing while the round server at ``url`` has not failed the task; else :class:`RoundFailed` with its
    reason (a demo whose task failed says why in one line, as the CLI prints it)."""
    import json
    import urllib.request

    from ..protocols.roles import RoundFailed

    with urllib.request.urlopen(f"{url}/tasks/{task_id}", timeout=60) as answer:
        state = json.loads(answer.read())
    if state.get("state") == "failed":
        raise RoundFailed(f"the task failed, nothing was released: {state.get('failed')}")


def check_drop_fraction(drop_fraction: float) -> float:
    if isinstance(drop_fraction, bool) or not isinstance(drop_fraction, (int, float)) or not 0 <= drop_fraction < 0.5:
        raise ParameterError("drop-fraction", "in [0, 0.5)", drop_fraction)
    return float(drop_fraction)


def dropout_plan(users: int, drop_fraction: float, rounds: tuple[int, ...], seed: int) -> np.ndarray:
    """Each user's round of dropping out (0: none): a ``drop_fraction`` share of users, each at one of ``rounds``."""
    rng = np.random.default_rng(seed)
    plan = np.zeros(users, dtype=np.int64)
    out = rng.random(users) < drop_fraction
    plan[out] = rng.choice(rounds, size=int(out.sum()))
    return plan


def min_survivors_for(users: int, drop_fraction: float) -> int:
    """The task's minimum: the survivors expected, less 4 standard deviations of the dropouts (at least 2)."""
    sd = math.sqrt(users * drop_fraction * (1 - drop_fraction))
    return max(2, math.floor(users * (1 - drop_fraction) - 4 * sd))


def traffic(clients, direction: str, kinds=None) -> dict[str, int]:
    """The entries of each kind of message (of ``kinds``, default all) ``clients`` sent or received
    (``direction``), in all."""
    return _summed(({kind: entries for (way, kind), (_, entries) in client.traffic.items() if way == direction}
                    for client in clients), kinds)


def _summed(counts, kinds=None) -> dict:
    """Per kind (of ``kinds``, default all), the sum of ``counts`` (dicts of kind to entries)."""
    totals: dict = {}
    for count in counts:
        for kind, entries in count.items():
            if kinds is None or kind in kinds:
                totals[kind] = totals.get(kind, 0) + entries
    return totals


def party_row(party: str, parties: int, sent: dict, received: dict, expected_sent: dict, expected_received: dict,
              table_i: str) -> dict:
    """One kind of party in the demo's traffic table: per party, the entries (field elements, items, seeds) of
    each kind of message it sent and received, measured and expected, and Table I's row (paper reference §4)."""
    per = max(parties, 1)
    return {"party": party, "parties": parties, "table_i": table_i,
            **{name: {k: v / per for k, v in sorted(d.items())} for name, d in (
                ("sent", sent), ("received", received), ("expected_sent", expected_sent),
                ("expected_received", expected_received))}}


class Deviation(NamedTuple):
    """One ``privagg demo-service --dishonest`` kind: one user deviating (service/sharing/dishonest.py,
    service/two_servers/dishonest.py)."""

    client: type  # the liar's SDK client
    did: str  # what he does
    outcome: str  # what the protocol does about it (docs/privacy.md, "Dishonest parties")


def deviation(kinds: dict[str, Deviation], protocol: str, kind: str) -> Deviation:
    """``kind`` of ``kinds`` (the protocol's service's), or ParameterError naming the accepted kinds."""
    if kind not in kinds:
        raise ParameterError("dishonest", f"one of {', '.join(kinds)} for {protocol}", kind)
    return kinds[kind]
