"""A shuffle task closed early through the services (collector and analyzer, in one process), on SQLite and on
PostgreSQL: calibrated for n = 40 users with honest fraction 1/2 and a minimum batch of 20, closed once m = 20 or
30 reported. The analyzer debiases with the m reports it counted, whose noise is all its batch holds
(docs/derivations.md, "An early close").

Before the fix it debiased with n: the issue's fe1 task (20 users, each holding item 1) released item 1 at -39.5
± 11.9 and the items nobody holds at -55, private, with no caveat, and messages per user divided by 40.
"""

import dataclasses
import math

import numpy as np
import pytest

from privagg.core.messages import MessageBatch
from privagg.protocols.registry import analyzer as make_analyzer, calibrate
from service_deployment import deploy, users

N, LEAST = 40, 20  # the users a task is calibrated for, and its minimum batch: ceil(G n) at G = 1/2
HELD = {"fe1": np.array([0.4, 0.3, 0.2, 0.1] + [0] * 12), "blanket-hist": np.array([0.5, 0.3, 0.2, 0])}
EPSILON = {"fe1": 2.0, "blanket-hist": 1.0}  # fe1: 11 dummies a user (31 at epsilon 1, for 40 users)
CLOSES = {"fe1": 20, "blanket-hist": 40}  # tasks closed early, at m = 20 and 30 in turn (fe1's cost 3 times more)
K_SIGMA = 4.5


def parameters(protocol: str):
    return calibrate(protocol, epsilon=EPSILON[protocol], delta=1e-6, n_users=N, domain_size=HELD[protocol].size,
                     honest_fraction=0.5)


def close_early(d, parameters, m: int, seed: int):
    """A new task of ``parameters`` on deployment ``d``: m users report, the task is closed and its batch released;
    (the users' values, the messages they sent, the analyzer's result)."""
    task = d.analyzer.create_task(parameters, min_batch_size=LEAST)
    one = dataclasses.replace(d, task=task)
    rng = np.random.default_rng(seed)
    held = HELD[parameters.protocol]
    values = rng.choice(held.size, size=m, p=held)
    reports, sent = users(one, values, rng)
    one.store(reports)
    assert d.collector.release_batches() == 0  # m < n: the task waits for more, until it is closed
    d.collector.close(task.task_id)
    assert d.collector.release_batches() == 1
    return values, MessageBatch.concatenate(sent), one.result()


def test_an_early_close_is_debiased_with_the_reports_counted(databases):
    """The release is the analyzer's own finalize of the messages sent, told the m reports counted; its errors,
    messages per user and expected error are m users'; its guarantee says what it counts on among them."""
    params = parameters("fe1")
    d = deploy(databases, params, min_batch_size=LEAST)
    m = 20
    values, sent, result = close_early(d, params, m, seed=0)
    analyzer = make_analyzer(params)
    direct = analyzer.finalize(analyzer.agg_update(analyzer.agg_init(), sent), reporters=m)
    released = {e["item"]: (e["estimate"], e["stderr"]) for e in result["estimates"]}
    assert released == {i: (float(direct.estimates[i]), float(direct.standard_error([i])[0]))
                        for i in range(params.domain_size)}
    assert result["messages"] == {"total": len(sent), "per_user": len(sent) / m, "malformed": 0}
    assert result["collection"]["reports"] == m and result["n_users"] == N
    assert result["expected_error"]["standard_error"] == float(params.standard_error(0, reporters=m))
    privacy = result["privacy"]
    assert privacy["private"] is True and not privacy["caveats"] and not result["warnings"]
    assert f"{m} of the {N} users reported" in privacy["assumptions"][-1]
    for e in (d.analyzer.engine, d.collector.engine):
        e.dispose()


@pytest.mark.parametrize("protocol", ["fe1", "blanket-hist"])
def test_early_closes_release_unbiased_estimates(databases, protocol):
    """Over R tasks closed at m = 20 and 30 of n = 40, each item's z-score (released estimate - its count among the
    m) / (its exact sd for m users) has mean 0 within K_SIGMA / sqrt(R) and variance 1 within K_SIGMA
    sqrt(2 / (R - 1)). Debiased with n instead (the same seeds), the mean z-scores were -3.2 to -4.2 (fe1, tolerance
    1.0) and -1.0 to -1.4 (blanket-hist, tolerance 0.71)."""
    params = parameters(protocol)
    d = deploy(databases, params, min_batch_size=LEAST)
    z, closes = [], CLOSES[protocol]
    for k in range(closes):
        m = (20, 30)[k % 2]
        values, sent, result = close_early(d, params, m, seed=k)
        assert result["messages"]["per_user"] == len(sent) / m
        released = {e["item"]: e["estimate"] for e in result["estimates"]}
        estimate = np.array([released[i] for i in range(params.domain_size)])
        truth = np.bincount(values, minlength=params.domain_size)
        z.append((estimate - truth) / params.standard_error(truth, reporters=m))
    z = np.array(z)
    assert np.all(np.abs(z.mean(axis=0)) <= K_SIGMA / math.sqrt(closes)), z.mean(axis=0)
    assert np.all(np.abs(z.var(axis=0, ddof=1) - 1) <= K_SIGMA * math.sqrt(2 / (closes - 1))), z.var(axis=0, ddof=1)
    for e in (d.analyzer.engine, d.collector.engine):
        e.dispose()
