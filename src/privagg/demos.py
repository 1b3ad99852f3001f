"""``privagg demo-service``: the bundled words through both services, beside the simulation of the same run.

The services' leg (:func:`privagg.service.demo.run_services`): an analyzer and a collector on loopback ports,
an FE1 task, one SDK client over HTTP per user. The private result is then compared item by item with
``privagg estimate fe1`` on the same data: both estimate the same true counts without bias, so their difference
over an item has standard deviation sqrt(se_service^2 + se_simulation^2), and over the whole domain these
standardized differences should have a root mean square near 1.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from .core.encoding import ItemEncoder
from .datasets import english_vocabulary, english_words
from .protocols.registry import calibrate
from .reports import to_json_dict
from .service.demo import run_services
from .simulate.frequency import estimate_frequencies


def run_demo(workdir: Path, users: int = 20_000, vocabulary: int = 1_000, epsilon: float = 1.0,
             delta: float = 1e-6, concurrency: int = 500, progress=print) -> dict:
    """Run the demo; returns the service's report, the simulation's, the load figures and the comparison."""
    words = english_vocabulary(vocabulary).to_pylist()
    rank = {w: i for i, w in enumerate(words)}
    codes = np.array([rank[w] for w in english_words(users, vocabulary).to_pylist()], dtype=np.int64)
    parameters = calibrate("fe1", epsilon=epsilon, delta=delta, n_users=users, domain_size=vocabulary)
    service, load = run_services(workdir, parameters, codes, concurrency, top=vocabulary, progress=progress)
    simulation, _run = estimate_frequencies("fe1", codes, ItemEncoder(vocabulary, kind="integer"), epsilon=epsilon,
                                            delta=delta, top=vocabulary, full_domain=True, seed=0)
    simulation = to_json_dict(simulation)
    truth = np.bincount(codes, minlength=vocabulary)
    by_item = {e["item"]: e for e in simulation["estimates"]}
    z = np.array([(e["estimate"] - by_item[e["item"]]["estimate"]) / math.hypot(e["stderr"],
                                                                                by_item[e["item"]]["stderr"])
                  for e in service["estimates"]])
    rms, worst = float(np.sqrt(np.mean(z ** 2))), float(np.abs(z).max())
    expected_worst = math.sqrt(2 * math.log(vocabulary))  # about the largest of B standard normal draws
    return {
        "words": words, "truth": truth.tolist(), "service": service, "simulation": simulation, "load": load,
        "comparison": {"items": vocabulary, "rms_standardized_difference": rms, "max_standardized_difference": worst,
                       "expected_max": expected_worst,
                       "matches": bool(0.8 <= rms <= 1.2 and worst <= expected_worst + 2)},
    }
