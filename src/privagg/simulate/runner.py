"""One simulator for every protocol: users' values through the parties of the protocol's topology.

The runner knows topologies, not protocols: it reads the protocol's
registry entry for its roles and plays every party in-process, as the VDAF
reference's ``run_vdaf`` does. Each role draws from its own stream,
spawned by role name (:func:`privagg.core.randomness.streams`).

``faithful``
    The real role code: the clients' randomizers (in batches of users),
    the shuffler's uniform permutation (shuffle topology), then the
    analyzer's ``agg_update`` and ``finalize``; in the central topology the
    users' values go to the curator, which adds the noise.
``fast``
    The entry's distributional shortcut (``fast``), e.g. the total dummy
    count drawn in one step and no shuffle, since the analyzer's counts do
    not depend on message order. Tests check that both paths give the same
    distribution of estimates. Protocols without a shortcut run faithfully
    (and the run's ``mode`` says ``faithful``).

Every run records a transcript -- what each kind of party sent and
received -- and the seconds each role took.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..core.messages import MessageBatch, shuffle
from ..core.randomness import RNGLike, describe, is_secure, streams
from ..errors import ParameterError
from ..privacy.description import PrivacyDescription
from ..protocols.registry import get

MODES = ("faithful", "fast")
USERS_PER_BATCH = 1 << 20
MESSAGES_MAX = 2**27  # expected messages n (1 + rho) one simulated run may hold in memory
ROLES = {"shuffle": ("clients", "shuffler"), "local": ("clients",), "central": ("curator",)}

# progress(stage, advance, total): called as work on ``stage`` advances.
Progress = Callable[[str, int, int], None]


@dataclass
class SimulationRun:
    """What one simulated run produced, what each party sent and received, and what it cost."""

    result: Any
    mode: str
    randomness: str
    privacy: PrivacyDescription  # the parameters' guarantee, marked not private for seeded or fast runs
    transcript: dict[str, dict[str, int]]
    seconds: dict[str, float] = field(default_factory=dict)
    messages: MessageBatch | None = None  # what the analyzer received, when asked to keep it

    @property
    def _aggregator(self) -> dict[str, int]:
        return self.transcript.get("analyzer") or self.transcript["curator"]

    @property
    def messages_total(self) -> int:
        """What the party that aggregates (analyzer or curator) received."""
        return self._aggregator["received"]

    @property
    def malformed(self) -> int:
        return self._aggregator["malformed"]

    @property
    def messages_per_user(self) -> float:
        return self.messages_total / self.result.parameters.n_users


def _check_size(parameters) -> None:
    expected = parameters.n_users * (1 + parameters.rho)  # real values and noise, whoever adds the noise
    if expected > MESSAGES_MAX:
        raise ParameterError(
            parameters.noise_parameter, f"small enough that a simulation's n (1 + rho) values stay below 2^27 "
            f"(here {expected:.3g}, rho = {parameters.rho:.4g}; raise --c or lower --bins to shrink rho on large "
            "domains)", parameters.noise_bins)


def simulate(parameters, codes: np.ndarray, mode: str = "faithful", rng: RNGLike = None, queries=None,
             keep_messages: bool = False, progress: Progress | None = None) -> SimulationRun:
    """Run ``codes`` (one item code per user) through the protocol of ``parameters``.

    ``queries``: the items the analyzer estimates (default: the whole
    domain). ``rng``: an int seed makes a reproducible simulation, which the
    run's ``privacy`` marks as not private (so does the fast path); ``None``
    uses the secure generator for every party, as a deployment would.
    ``keep_messages`` keeps what the analyzer received (for writing them).
    """
    if mode not in MODES:
        raise ParameterError("mode", f"one of {', '.join(MODES)}", mode)
    entry = get(parameters.protocol)
    if entry.fast is None:
        mode = "faithful"  # no shortcut: the run is the faithful one, and says so
    codes = parameters.check_codes(np.asarray(codes))
    if codes.size != parameters.n_users:
        raise ParameterError("codes", f"one item per user ({parameters.n_users} users)", f"{codes.size} items")
    _check_size(parameters)
    rngs = streams(rng, ROLES[entry.topology])
    seconds: dict[str, float] = {}
    start = time.perf_counter()
    kept = None
    if entry.topology == "central":
        curator = entry.analyzer(parameters, queries, rng=rngs["curator"])
        sent = MessageBatch({"value": codes})  # in the clear, to the trusted curator
        result = curator.finalize(curator.agg_update(curator.agg_init(), sent))
        transcript = {"clients": {"sent": codes.size}, "curator": {"received": codes.size, "malformed": 0}}
        seconds["curator"] = time.perf_counter() - start
    else:
        analyzer = entry.analyzer(parameters, queries)
        if mode == "fast":
            agg = entry.fast(parameters, codes, rngs["clients"], analyzer)
            seconds["randomize"] = time.perf_counter() - start
            sent = agg.messages + agg.malformed
        else:
            messages, sent = _run_clients(entry.client(parameters), codes, rngs["clients"], progress)
            seconds["randomize"] = time.perf_counter() - start
            if entry.topology == "shuffle":
                start = time.perf_counter()
                messages = shuffle(messages, rngs["shuffler"])
                seconds["shuffle"] = time.perf_counter() - start
            start = time.perf_counter()
            agg = _run_analyzer(analyzer, messages, progress)
            seconds["analyze"] = time.perf_counter() - start
            kept = messages if keep_messages else None
        start = time.perf_counter()
        result = analyzer.finalize(agg)
        seconds["finalize"] = time.perf_counter() - start
        transcript = {"clients": {"sent": sent},
                      "analyzer": {"received": agg.messages + agg.malformed, "malformed": agg.malformed}}
        if entry.topology == "shuffle" and mode == "faithful":
            transcript["shuffler"] = {"received": sent, "sent": sent}
    randomness = describe(rng)
    privacy = parameters.privacy
    if mode == "fast":
        randomness = f"fast path (simulation shortcuts, not for real users); {randomness}"
        privacy = privacy.as_simulation(randomness, "fast path: the total noise is drawn with a floating-point "
                                        "binomial sampler, a simulation shortcut")
    elif not (rng is None or (isinstance(rng, np.random.Generator) and is_secure(rng))):
        privacy = privacy.as_simulation(randomness, "seeded simulation: whoever knows the seed can regenerate the "
                                        "noise and recover the true counts")
    return SimulationRun(result, mode, randomness, privacy, transcript, seconds, kept)


def _run_analyzer(analyzer, messages: MessageBatch, progress: Progress | None):
    """One aggregate over all messages; with ``progress``, folded in ten slices (the same result, by merging)."""
    agg = analyzer.agg_init()
    step = max(1, len(messages) if progress is None else -(-len(messages) // 10))
    for lo in range(0, len(messages), step):
        part = messages.take(slice(lo, lo + step))
        agg = analyzer.agg_update(agg, part)
        if progress:
            progress("analyze", len(part), len(messages))
    return agg


def _run_clients(client, codes: np.ndarray, rng: np.random.Generator,
                 progress: Progress | None) -> tuple[MessageBatch, int]:
    batches = []
    for lo in range(0, codes.size, USERS_PER_BATCH):
        chunk = codes[lo:lo + USERS_PER_BATCH]
        batches.append(client.randomize(chunk, rng))
        if progress:
            progress("randomize", chunk.size, codes.size)
    messages = MessageBatch.concatenate(batches)
    return messages, len(messages)
