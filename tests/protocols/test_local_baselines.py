"""The local baselines (GRR, OUE, OLH, Hadamard response): delta(eps) against the exact report laws, the
randomizers' rounding that keeps pure eps-LDP, the Walsh-Hadamard decoding, no delta on the command line.
Unbiasedness, variance, merging, memory and the exact audit come from the contract tests and the audit grid."""

import itertools
import json
import math

import numpy as np
import pytest
from typer.testing import CliRunner

from privagg.audit import _encode, hockey_stick
from privagg.cli import app
from privagg.errors import ParameterError
from privagg.protocols import local_baselines as lb
from privagg.protocols import registry

LOCAL = ("grr", "oue", "olh", "hadamard")


def laws(params):
    """Each item's report law, as (keys, probabilities) sorted alike (the auditor's encoding)."""
    raw = {x: lb.message_law(params, x) for x in range(params.domain_size)}
    return {x: _encode(law, 2) for x, law in raw.items()}


@pytest.mark.parametrize("name,options", [("grr", {}), ("oue", {}), ("olh", {"bins": 2}), ("olh", {"bins": 3}),
                                          ("hadamard", {})])
@pytest.mark.parametrize("eps", [0.5, 1.0, 2.0])
def test_delta_at_is_the_exact_divergence_of_one_report(name, options, eps):
    params = registry.calibrate(name, epsilon=eps, n_users=100, domain_size=3, **options)
    by_item = laws(params)
    for e in (eps / 4, eps / 2, eps, 2 * eps):
        exact = max(hockey_stick(by_item[x], by_item[y], e) for x, y in itertools.permutations(range(3), 2))
        assert params.delta_at(e) == pytest.approx(exact, abs=1e-12)
    assert params.delta_at(eps) == 0.0


@pytest.mark.parametrize("name", LOCAL)
def test_reports_are_never_more_than_e_eps_likelier_under_the_rounding(name):
    """The clients' coins round the replacement (or flip) probability up: the kept value is at most p likely,
    so the largest ratio of any report's probability under two items stays at most e^eps (measured on 400,000
    reports of two items, 4-sigma tolerance on each frequency)."""
    params = registry.calibrate(name, epsilon=1.0, n_users=400_000, domain_size=4)
    client = registry.client(params)
    counts = {}
    for item in (0, 1):
        messages = client.randomize(np.full(params.n_users, item), rng=item)
        columns = [messages[c.name].astype(np.int64) for c in params.layout.columns]
        key = columns[0]
        for column, c in zip(columns[1:], params.layout.columns[1:]):
            key = key * (c.high - c.low) + column - c.low
        counts[item] = np.bincount(key, minlength=int(key.max()) + 2)
    size = max(len(c) for c in counts.values())
    a, b = (np.pad(counts[i], (0, size - len(counts[i]))) / params.n_users for i in (0, 1))
    seen = (a > 0) & (b > 0)
    sd = np.sqrt(np.maximum(a, b) / params.n_users)
    assert np.all(a[seen] - 4 * sd[seen] <= math.e * b[seen] + 1e-12)


def test_walsh_hadamard_is_the_sylvester_matrix():
    K = 16
    H = np.array([[(-1) ** int(lb.hadamard_sign(np.array([x]), np.array([j]))[0]) for j in range(K)]
                  for x in range(K)])
    assert np.array_equal(H @ H.T, K * np.eye(K))
    v = np.random.default_rng(0).integers(-5, 6, size=K)
    assert np.array_equal(lb.walsh_hadamard(v), H @ v)


def test_olh_debiases_with_the_familys_collision_probability():
    params = registry.calibrate("olh", epsilon=1.0, n_users=1000, domain_size=1000)
    g, p, col = params.bins, params.keep, params.hash.collision_probability
    assert g == round(math.e) + 1 and p == pytest.approx(math.e / (math.e + g - 1))
    assert params.other == pytest.approx(p * col + (1 - p) * (1 - col) / (g - 1))
    assert col < 1 / g and params.derived()["collision_probability"] == col


def test_pure_protocols_take_no_delta():
    with pytest.raises(ParameterError) as err:
        registry.calibrate("grr", epsilon=1.0, delta=1e-6, n_users=100, domain_size=4)
    assert err.value.field == "delta" and "pure" in str(err.value)
    runner = CliRunner()
    result = runner.invoke(app, ["calibrate", "oue", "--users", "1000", "--domain", "8", "--epsilon", "1",
                                 "--delta", "1e-6"])
    assert result.exit_code == 2 and "delta must be left out for oue (pure eps-DP" in result.stderr, result.stderr
    result = runner.invoke(app, ["calibrate", "hadamard", "--users", "1000", "--domain", "8", "--epsilon", "1",
                                 "--json"])
    assert result.exit_code == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["parameters"]["delta"] == 0 and report["privacy"]["model"] == "local"
    assert [p["delta"] for p in report["privacy_profile"]][1:] == [0.0, 0.0]  # at eps and 2 eps
    result = runner.invoke(app, ["audit", "grr", "--users", "2", "--domain", "3", "--epsilon", "1"])
    assert result.exit_code == 0 and "verdict: holds" in result.stdout
    result = runner.invoke(app, ["audit", "grr", "--users", "2", "--domain", "3", "--epsilon", "1",
                                 "--noise-scale", "0.5"])
    assert result.exit_code == 1 and "VIOLATED" in result.stdout
    result = runner.invoke(app, ["audit", "grr", "--users", "200", "--domain", "3", "--epsilon", "1", "--method",
                                 "statistical", "--runs", "200"])  # all n users, not the exact audit's one
    assert result.exit_code == 0 and "lower bound on the true epsilon" in result.stdout, result.stdout


def test_estimates_on_the_bundled_words():
    result = CliRunner().invoke(app, ["estimate", "olh", "--epsilon", "2", "--domain", "4096", "--seed", "1",
                                      "--top", "3", "--json"])
    assert result.exit_code == 0, result.stderr
    report = json.loads(result.stdout)
    top = report["estimates"][0]
    assert "the" in top["item"].split("|") and abs(top["estimate"] - top["true_count"]) <= 4.5 * top["stderr"]
