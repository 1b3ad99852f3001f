"""Run a population of users end to end through a protocol's roles.

Two paths (DESIGN.md, "Roles are sans-I/O"):

``faithful``
    The real role code: every user's client randomizer (in batches), the
    shuffler's uniform permutation, then the analyzer over the shuffled
    messages. For a central protocol the curator's mechanism runs instead.
``fast``
    The protocol's distributional shortcut (``fast_oracle``): the total
    number of dummies is drawn in one step and the shuffle is skipped, since
    the analyzer's counts do not depend on message order. Tests check that
    both paths give the same distribution of estimates.

Both record messages sent and the time each role took.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from ..core.messages import MessageBatch, shuffle
from ..core.randomness import RNGLike, describe, resolve, spawn
from ..errors import ParameterError
from ..protocols.balls_into_bins import BallsIntoBinsFrequency, FrequencyOracle

MODES = ("faithful", "fast")
USERS_PER_BATCH = 1 << 20
MESSAGES_MAX = 2**27  # expected messages n (1 + rho) one simulated run may hold in memory

# progress(stage, advance, total): called as work on ``stage`` advances.
Progress = Callable[[str, int, int], None]


@dataclass
class SimulationRun:
    """What one simulated run produced and what it cost."""

    protocol: BallsIntoBinsFrequency
    oracle: FrequencyOracle
    mode: str
    messages_total: int
    randomness: str
    seconds: dict[str, float] = field(default_factory=dict)

    @property
    def messages_per_user(self) -> float:
        return self.messages_total / self.protocol.n_users


def simulate(protocol: BallsIntoBinsFrequency, codes: np.ndarray, mode: str = "faithful",
             rng: RNGLike = None, progress: Progress | None = None) -> SimulationRun:
    """Run ``codes`` (one item code per user) through ``protocol``.

    ``rng``: an int seed makes a reproducible simulation; ``None`` uses the
    secure generator, as a deployment would.
    """
    if mode not in MODES:
        raise ParameterError("mode", f"one of {', '.join(MODES)}", mode)
    codes = protocol.check_codes(np.asarray(codes))
    if codes.size != protocol.n_users:
        raise ParameterError("codes", f"one item per user ({protocol.n_users} users)", f"{codes.size} items")
    expected = protocol.n_users * (1 + protocol.rho)
    if expected > MESSAGES_MAX:
        raise ParameterError(
            protocol.noise_parameter, f"small enough that a simulation's n (1 + rho) messages stay below 2^27 "
            f"(here {expected:.3g}, rho = {protocol.rho:.4g}; fe1 keeps rho small on large domains)",
            protocol.bins)
    seconds: dict[str, float] = {}
    start = time.perf_counter()
    if protocol.model == "central":
        oracle = protocol.release(codes, rng)
        total = codes.size
        seconds["curator"] = time.perf_counter() - start
    elif mode == "fast":
        oracle, total = protocol.fast_oracle(codes, resolve(rng))
        seconds["randomize"] = time.perf_counter() - start
    else:
        client_rng, shuffler_rng = spawn(rng, 2)
        batches = []
        for lo in range(0, codes.size, USERS_PER_BATCH):
            chunk = codes[lo:lo + USERS_PER_BATCH]
            batches.append(protocol.randomize(chunk, client_rng))
            if progress:
                progress("randomize", chunk.size, codes.size)
        messages = MessageBatch.concatenate(batches)
        seconds["randomize"] = time.perf_counter() - start
        start = time.perf_counter()
        messages = shuffle(messages, shuffler_rng)
        seconds["shuffle"] = time.perf_counter() - start
        total = len(messages)
        start = time.perf_counter()
        oracle = protocol.analyze(messages)
        seconds["analyze_setup"] = time.perf_counter() - start
    randomness = describe(rng)
    if mode == "fast" and protocol.model != "central":
        randomness = f"fast path (simulation shortcuts, not for real users); {randomness}"
    return SimulationRun(protocol, oracle, mode, total, randomness, seconds)
