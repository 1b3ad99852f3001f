"""Simulation results stay identical for the same seeds.

tests/data/same_seeds.json records, for every implemented protocol of the registry and both modes where the
protocol has a fast path, a seeded run of its entry's example instance through the pipeline ``privagg estimate`` runs
(:func:`~privagg.simulate.frequency.estimate_frequencies`, :func:`~privagg.simulate.frequency.estimate_vector_sum`
or :func:`~privagg.simulate.heavy_hitters.estimate_heavy_hitters`): the SHA-256 of the result's arrays and a few
of its values. The test reruns each and compares them exactly. A change that moves a seeded result (another
draw order, another sampler) fails here; if it is meant, regenerate the file with
``python tests/test_same_seeds.py`` and say why in the commit.
"""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path

import numpy as np
import pytest

from privagg.protocols import registry

DATA = Path(__file__).resolve().parent / "data" / "same_seeds.json"
SEED = 7

# a multi-round protocol's faithful run plays its deployed parties, every pair of users agreeing a key (the cost grows
# as n^2): its example over this many users takes about a second
MULTI_ROUND_USERS = 100


def instance(name: str) -> dict:
    """calibrate's keyword arguments of ``name``'s run: its registry entry's example (small: the whole file runs in
    seconds), over :data:`MULTI_ROUND_USERS` for a multi-round protocol."""
    entry = registry.get(name)
    return dict(entry.example, **({"n_users": MULTI_ROUND_USERS} if entry.multi_round else {}))


def population(n_users: int, domain: int) -> np.ndarray:
    """Every item held by at least n / (2 B) users (the sampling family's data condition), the rest Zipf-like."""
    rng = np.random.default_rng(SEED)
    floor = n_users // (2 * domain)
    rest = np.minimum(rng.zipf(1.5, size=n_users - floor * domain) - 1, domain - 1)
    return rng.permutation(np.concatenate([np.repeat(np.arange(domain), floor), rest]))


def modes(name: str) -> tuple[str, ...]:
    return ("faithful", "fast") if registry.get(name).fast is not None else ("faithful",)


def arrays(result) -> dict[str, np.ndarray]:
    """The result's numeric arrays, by name (whichever of a frequency table, vector sum or heavy-hitter list)."""
    names = ("items", "estimates", "total", "standard_errors", "coordinates", "standard_error_bounds")
    return {k: np.asarray(getattr(result, k)) for k in names if getattr(result, k, None) is not None}


def digest(values: dict[str, np.ndarray]) -> str:
    h = hashlib.sha256()
    for name, array in values.items():
        h.update(name.encode())
        h.update(np.ascontiguousarray(array, dtype="<f8").tobytes())
    return h.hexdigest()


def run(name: str, mode: str) -> dict:
    """One seeded run of ``name``: its result's digest, message counts and first values. Its input by what the
    protocol estimates: items (a frequency table, heavy hitters), vectors of [0, 1]^d, or (coordinate, weight)
    rows of a 1-sparse vector sum."""
    from privagg.core.encoding import ItemEncoder
    from privagg.protocols.kinds import ResultKind
    from privagg.simulate.frequency import estimate_frequencies, estimate_vector_sum
    from privagg.simulate.heavy_hitters import estimate_heavy_hitters

    entry, kw = registry.get(name), instance(name)
    epsilon, delta, n, domain = kw.pop("epsilon"), kw.pop("delta", 0.0), kw.pop("n_users"), kw.pop("domain_size")
    rng = np.random.default_rng(SEED)
    if entry.result is ResultKind.HEAVY_HITTER_LIST:
        _, result = estimate_heavy_hitters(population(n, domain), epsilon=epsilon, delta=delta, domain_size=domain,
                                           seed=SEED, **kw)
    elif entry.result is ResultKind.VECTOR_SUM:
        sparse = getattr(entry.parameters, "one_sparse", False)
        inputs = np.column_stack([population(n, domain), rng.random(n)]) if sparse else rng.random((n, domain))
        _, run_ = estimate_vector_sum(name, inputs, epsilon=epsilon, delta=delta, options=kw,
                                      dimension=domain if sparse else None, mode=mode, seed=SEED)
        result = run_.result
    else:
        _, run_ = estimate_frequencies(name, population(n, domain), ItemEncoder(domain, kind="integer"),
                                       epsilon=epsilon, delta=delta, options=kw, mode=mode, seed=SEED)
        result = run_.result
    values = arrays(result)
    first = values.get("estimates", values.get("total"))
    return {"sha256": digest(values), "messages": int(result.messages), "malformed": int(result.malformed),
            "first": [float(v) for v in first[:4]]}


CASES = [(name, mode) for name in registry.IMPLEMENTED for mode in modes(name)]


def test_every_protocol_and_mode_is_recorded():
    recorded = json.loads(DATA.read_text())
    assert sorted(recorded) == sorted(f"{name} {mode}" for name, mode in CASES)


@pytest.mark.parametrize("name, mode", CASES)
def test_a_seeded_simulation_gives_the_recorded_result(name, mode):
    assert run(name, mode) == json.loads(DATA.read_text())[f"{name} {mode}"]


if __name__ == "__main__":  # regenerate the record (only for a change meant to move seeded results)
    DATA.parent.mkdir(exist_ok=True)
    DATA.write_text(json.dumps({f"{name} {mode}": run(name, mode) for name, mode in CASES}, indent=1) + "\n")
    sys.exit(0)
