"""Faithful (every role, message by message) and fast (shortcut) paths agree in distribution."""

import numpy as np
import pytest
from scipy import stats

from privagg.errors import ParameterError
from privagg.protocols import FE0, FE1, BallsIntoBinsCentral
from privagg.simulate import simulate

N = 10_000
RUNS = 200


def codes_for(domain):
    rng = np.random.default_rng(0)
    return np.minimum(rng.zipf(1.3, size=N) - 1, domain - 1)


@pytest.mark.parametrize("make", [lambda: FE0(1.0, 1e-6, N, 40), lambda: FE1(1.0, 1e-6, N, 3000, bins=150)])
def test_faithful_and_fast_agree_in_distribution(make):
    proto = make()
    codes = codes_for(proto.domain_size)
    items = np.array([0, 1, 5, proto.domain_size - 1])
    draws = {}
    for mode, seed in (("faithful", 10), ("fast", 20)):
        seeds = np.random.SeedSequence(seed).spawn(RUNS)
        runs = [simulate(proto, codes, mode, rng=s) for s in seeds]
        draws[mode] = (np.array([r.oracle.estimate(items) for r in runs]),
                       np.array([r.messages_total for r in runs]))
    # Same distribution: two-sample KS per item and for the message totals, at level 1e-3.
    for j in range(items.size):
        assert stats.ks_2samp(draws["faithful"][0][:, j], draws["fast"][0][:, j]).pvalue > 1e-3
    assert stats.ks_2samp(draws["faithful"][1], draws["fast"][1]).pvalue > 1e-3


def test_faithful_run_reports_roles_and_messages():
    proto = FE1(1.0, 1e-6, N, 3000, bins=150)
    run = simulate(proto, codes_for(3000), "faithful", rng=1)
    assert set(run.seconds) == {"randomize", "shuffle", "analyze_setup"}
    assert run.messages_total > N and run.messages_per_user == run.messages_total / N
    assert "seed" in run.randomness
    assert "secure" in simulate(proto, codes_for(3000), "fast").randomness


def test_central_protocol_runs_the_curator():
    proto = BallsIntoBinsCentral(1.0, 1e-6, N, 40)
    run = simulate(proto, codes_for(40), rng=2)
    assert run.messages_total == N and "curator" in run.seconds


def test_bad_runs():
    proto = FE0(1.0, 1e-6, N, 40)
    with pytest.raises(ParameterError, match="mode must be one of"):
        simulate(proto, codes_for(40), "quick")
    with pytest.raises(ParameterError, match="codes must be one item per user"):
        simulate(proto, codes_for(40)[:10])


@pytest.mark.parametrize("make,field", [(lambda: FE0(1.0, 1e-10, N, 2**24), "domain"),
                                        (lambda: BallsIntoBinsCentral(1.0, 1e-10, N, 2**24), "domain"),
                                        (lambda: FE1(1.0, 1e-10, N, 2**30, bins=2**26), "bins")])
def test_runs_too_large_for_memory_are_refused(make, field):
    proto = make()  # calibrating is fine: the cost is reported
    assert proto.rho > 10_000
    with pytest.raises(ParameterError, match=f"{field} must be small enough that a simulation"):
        simulate(proto, np.zeros(N, dtype=int))
