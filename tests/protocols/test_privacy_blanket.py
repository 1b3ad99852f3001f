"""The blanket histogram R^PH (shuffle vector paper, Algorithm 1): the paper's gamma against its formulas, the
tight gamma against the accountant, the randomizer's law, bad input. Unbiasedness, variance, merging and the
exact audit come from the registry's contract tests and audit grid."""

import math

import numpy as np
import pytest

from privagg.errors import ParameterError
from privagg.privacy import blanket
from privagg.protocols import privacy_blanket as pb
from privagg.protocols import registry


@pytest.mark.parametrize("eps,n,B", [(0.5, 100_000, 10), (0.9, 50_000, 2), (1.0, 100_000, 10), (3.0, 20_000, 5)])
def test_paper_gamma_is_the_reference_closed_form(eps, n, B):
    """Reference §3.1 with t = 1, d = 1 and k = B values, n - 1 as the authors' code uses it."""
    delta = 1e-6
    if eps < 1:
        expected = max(14 * B * math.log(2 / delta) / ((n - 1) * eps**2), 27 * B / ((n - 1) * eps))
    else:
        expected = max(80 * B * math.log(2 / delta) / ((n - 1) * eps**2), 36 * B / (11 * (n - 1) * eps))
    assert blanket.paper_gamma(eps, delta, n, B) == pytest.approx(expected, rel=1e-12)
    params = registry.calibrate("blanket-hist", epsilon=eps, delta=delta, n_users=n, domain_size=B,
                                calibration="paper")
    assert params.gamma == pytest.approx(expected, rel=1e-12)
    assert bool(params.privacy.caveats) == (eps >= 1)


@pytest.mark.parametrize("n,B", [(10_000, 2), (100_000, 10), (50_000, 100)])
def test_tight_gamma_is_the_least_the_accountant_certifies(n, B):
    params = registry.calibrate("blanket-hist", epsilon=1.0, delta=1e-6, n_users=n, domain_size=B)
    g = params.gamma
    assert blanket.delta_at(1.0, g, n, B) <= 1e-6 < blanket.delta_at(1.0, g * (1 - 1e-6), n, B)
    assert params.delta_at(1.0) <= 1e-6 and params.delta_at(0.5) > params.delta_at(1.0)
    assert blanket.local_epsilon(g, B) == pytest.approx(math.log(1 + B * (1 - g) / g))


def test_the_randomizer_replaces_a_gamma_share_by_uniform_values():
    """Each report is the value with probability 1 - gamma + gamma / B and each other value with gamma / B:
    counts within 4 sd of n times those."""
    params = registry.calibrate("blanket-hist", epsilon=0.5, delta=1e-6, n_users=200_000, domain_size=4)
    messages = pb.BlanketClient(params).randomize(np.zeros(200_000, dtype=np.int64), rng=3)
    counts = np.bincount(messages["value"], minlength=4)
    law = pb.message_law(params, 0)
    probabilities = np.array([law[tuple(int(j == v) for j in range(4))] for v in range(4)])
    assert probabilities.sum() == pytest.approx(1.0)
    assert probabilities[0] == pytest.approx(1 - params.gamma + params.gamma / 4)
    sd = np.sqrt(200_000 * probabilities * (1 - probabilities))
    assert np.all(np.abs(counts - 200_000 * probabilities) <= 4 * sd)


def test_dishonest_users_are_not_counted_as_blanket():
    full = registry.calibrate("blanket-hist", epsilon=1.0, delta=1e-6, n_users=10_000, domain_size=10)
    some = registry.calibrate("blanket-hist", epsilon=1.0, delta=1e-6, n_users=10_000, domain_size=10,
                              honest_fraction=0.8)
    assert some.gamma > full.gamma and some.delta_at(1.0) <= 1e-6


@pytest.mark.parametrize("change,field", [
    (dict(calibration="paper", epsilon=6.0), "epsilon"),  # the closed forms stop at 6
    (dict(calibration="paper", n_users=1000), "users"),  # gamma would exceed 1
    (dict(calibration="magic"), "calibration"),
])
def test_bad_input_names_the_field(change, field):
    args = {**dict(epsilon=1.0, delta=1e-6, n_users=10_000, domain_size=10), **change}
    with pytest.raises(ParameterError) as err:
        registry.calibrate("blanket-hist", **args)
    assert err.value.field == field, err.value
    with pytest.raises(ParameterError) as err:
        registry.load_parameters({**registry.calibrate("blanket-hist", epsilon=1.0, delta=1e-6, n_users=10_000,
                                                       domain_size=10).to_dict(), "gamma": 0.0})
    assert err.value.field == "gamma"
