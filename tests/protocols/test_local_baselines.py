"""The local baselines (GRR, OUE, OLH, Hadamard response): delta(eps) against the exact report laws, the
randomizers' exact coins that keep pure eps-LDP to the last bit, the Walsh-Hadamard decoding, no delta on the command line.
Unbiasedness, variance, merging, memory and the exact audit come from the contract tests and the audit grid."""

import hashlib
import itertools
import json
import math
from fractions import Fraction

import numpy as np
import pytest
from typer.testing import CliRunner

from privagg.audit import _encode, hockey_stick
from privagg.cli import app
from privagg.errors import ParameterError
from privagg.protocols import local_baselines as lb
from privagg.protocols import registry
from privagg.protocols.kinds import Family

LOCAL = tuple(registry.names(lambda e: e.family is Family.LOCAL_BASELINES))


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


def exp_below(eps: float) -> Fraction:
    """sum_{k <= 80} eps^k / k! in exact rationals: below e^eps (written here, not taken from privagg)."""
    x, term, total = Fraction(eps), Fraction(1), Fraction(0)
    for k in range(1, 81):
        total += term
        term = term * x / k
    return total


def largest_ratio(params, nudge: int = 0) -> Fraction:
    """The largest ratio P_x(report) / P_x'(report) over two items, from the coins' exact probabilities (with
    ``nudge``, from coins one 2^-53 step less private than the client's)."""
    one = 2**53
    if params.protocol == "oue":  # the two differing bits: (1 - q) / q at (1, 0); every other outcome <= 1
        q = Fraction(params.flip_numerator - nudge, one)
        return (1 - q) / q
    values = {"grr": params.domain_size, "olh": getattr(params, "bins", 2), "hadamard": 2}[params.protocol]
    keep = Fraction(params.keep_numerator + nudge, one)  # given OLH's hash, Hadamard's column: RR over `values`
    return keep / ((1 - keep) / (values - 1))


EXP_UPPER_SLACK = Fraction(1, 10**30)  # sum_{k > 80} 10^k / k! < 1e-30 relative: e^eps <= exp_below (1 + slack)


@pytest.mark.parametrize("name", LOCAL)
def test_pure_ldp_is_exactly_pure_over_the_grid(name):
    """Over eps = 0.1, 0.2, ..., 10 and B in {2, 3, 10, 100}, the largest likelihood ratio of the coins the
    client draws never exceeds e^eps (checked against a rational lower bound of e^eps), and it is within a
    53-bit coin of it, so the rounding costs no accuracy (before exact coins, 629 of these 1,600 points
    had ln(ratio) above eps, by up to 3.5e-12); and the coins are the least private that are: one step of 2^-53
    more would exceed e^eps."""
    for step in range(1, 101):
        eps = step / 10
        low = exp_below(eps)
        for domain in (2, 3, 10, 100):
            params = registry.calibrate(name, epsilon=eps, n_users=100, domain_size=domain)
            ratio = largest_ratio(params)
            assert ratio <= low, (eps, domain)
            assert largest_ratio(params, nudge=1) > low * (1 + EXP_UPPER_SLACK), (eps, domain)


@pytest.mark.parametrize("name", LOCAL)
def test_the_client_draws_exactly_the_audited_coins(name):
    """The client's report, rebuilt by hand from the same seed: its coins are 53-bit integers below the
    parameters' numerators, the numbers the exact check above is about."""
    params = registry.calibrate(name, epsilon=1.3, n_users=1000, domain_size=5)
    codes = np.arange(1000) % 5
    messages = registry.client(params).randomize(codes, rng=7)
    rng = np.random.default_rng(7)
    if name == "grr":
        kept = rng.integers(0, 2**53, size=1000, dtype=np.int64) < params.keep_numerator
        expected = codes.copy()
        other = rng.integers(0, 4, size=int((~kept).sum()))
        expected[~kept] = other + (other >= codes[~kept])
        np.testing.assert_array_equal(messages["value"], expected)
    elif name == "oue":
        own = codes[rng.integers(0, 2**53, size=1000, dtype=np.int64) < 2**52]
        user, slot = np.divmod(np.flatnonzero(rng.integers(0, 2**53, size=4000, dtype=np.int64)
                                              < params.flip_numerator), 4)
        np.testing.assert_array_equal(messages["value"], np.concatenate([own, slot + (slot >= codes[user])]))
    elif name == "olh":
        u, v = params.hash.sample_keys(1000, rng)
        hashed = params.hash.evaluate(u, v, codes)
        kept = rng.integers(0, 2**53, size=1000, dtype=np.int64) < params.keep_numerator
        other = rng.integers(0, params.bins - 1, size=int((~kept).sum()))
        hashed[~kept] = other + (other >= hashed[~kept])
        np.testing.assert_array_equal(messages["w"], hashed)
    else:
        j = rng.integers(0, params.columns, size=1000)
        flip = ~(rng.integers(0, 2**53, size=1000, dtype=np.int64) < params.keep_numerator)
        np.testing.assert_array_equal(messages["sign"], lb.hadamard_sign(codes, j) ^ flip)


@pytest.mark.parametrize("name,options,expected", [
    ("grr", {}, "30c9c734495fd058384eef745e90602b"), ("olh", {}, "15f69bc4807b8873ad7227bdb0683eec"),
    ("olh", {"bins": 3}, "fd093752ee6b222af7679def3c2d6f03")])
def test_grr_and_olh_send_the_same_messages_for_the_same_seed(name, options, expected):
    """GRR's and OLH's randomized response is one implementation (local_baselines._response_draws, then _respond),
    OLH's drawn apart from its arithmetic: the messages of a seed are those the two copies it replaced sent (their
    SHA-256, recorded before; regenerate only for a change of draws that is meant, and say why)."""
    params = registry.calibrate(name, epsilon=1.3, n_users=3000, domain_size=40, **options)
    messages = registry.client(params).randomize(np.arange(3000) % 40, rng=11)
    digest = hashlib.sha256()
    for field in params.layout.names:
        digest.update(field.encode())
        digest.update(np.ascontiguousarray(messages[field], dtype=np.int64).tobytes())
    assert digest.hexdigest()[:32] == expected


def test_olh_clients_on_threads_send_what_one_client_sends(monkeypatch):
    """The simulator draws OLH's clients batch after batch on one thread and writes their messages on WORKERS
    others (OLHClient.draw, then write): the messages randomize makes from the same stream, batch after batch."""
    from privagg.simulate import runner

    params = registry.calibrate("olh", epsilon=1.0, n_users=5000, domain_size=64)
    client, codes = lb.OLHClient(params), np.random.default_rng(2).integers(0, 64, 5000)
    rng = np.random.default_rng(8)
    one = [client.randomize(codes[lo:lo + 1200], rng) for lo in range(0, 5000, 1200)]
    written = []
    write = lb.OLHClient.write
    monkeypatch.setattr(lb.OLHClient, "write", lambda self, *a: written.append(len(a[0])) or write(self, *a))
    monkeypatch.setattr(runner, "MESSAGES_PER_BATCH", 1200)
    for workers in (1, 2):
        monkeypatch.setattr(runner, "WORKERS", workers)
        written.clear()
        threaded = runner._run_clients(client, params, codes, np.random.default_rng(8), None)
        assert sorted(written) == [200, 1200, 1200, 1200, 1200]
        for name in "uvw":
            np.testing.assert_array_equal(threaded[name], np.concatenate([b[name] for b in one]))


def test_a_claim_below_the_randomizers_epsilon_is_refused_to_the_last_bit():
    params = registry.calibrate("grr", epsilon=1.0, n_users=10, domain_size=3)
    data = {**params.to_dict(), "local_epsilon": math.nextafter(1.0, 2.0)}
    with pytest.raises(ParameterError, match="local_epsilon"):
        registry.load_parameters(data)


def test_walsh_hadamard_is_the_sylvester_matrix():
    K = 16
    H = np.array([[(-1) ** int(lb.hadamard_sign(np.array([x]), np.array([j]))[0]) for j in range(K)]
                  for x in range(K)])
    assert np.array_equal(H @ H.T, K * np.eye(K))
    v = np.random.default_rng(0).integers(-5, 6, size=K)
    assert np.array_equal(lb.walsh_hadamard(v), H @ v)
    for nonzero in ([], [3], [0, 15], [1, 2, 9]):  # fewer than log2(K) / 2 nonzero: summed column by column
        sparse = np.zeros(K, dtype=np.int64)
        sparse[nonzero] = [7, -2, 5][:len(nonzero)]
        assert np.array_equal(lb.walsh_hadamard(sparse), H @ sparse)


def test_a_few_users_reports_are_transformed_column_by_column(monkeypatch):
    """At n = 3 the signed sums have at most 3 nonzero columns of 2^25: their columns are summed (one pass each),
    not the 25 butterfly passes over the whole vector (2.5 s of a 3.5 s run)."""
    values = np.zeros(2**20, dtype=np.int64)
    values[[5, 77, 2**19 + 3]] = [1, -1, 2]
    passes = []
    count = np.bitwise_count
    monkeypatch.setattr(np, "bitwise_count", lambda a: passes.append(a.size) or count(a))
    out = lb.walsh_hadamard(values)
    assert passes == [values.size] * 3
    rows = np.arange(1000)
    expected = sum(v * (-1.0) ** np.array([bin(r & j).count("1") for r in rows]) for j, v in ((5, 1), (77, -1),
                                                                                           (2**19 + 3, 2)))
    assert np.array_equal(out[:1000], expected)


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


@pytest.mark.parametrize("epsilon", [33.97, 40.0, 100.0, 1000.0, 1e300])
def test_olh_default_bins_past_the_field_names_epsilon(epsilon):
    """g = round(e^eps) + 1 passed 2^49 (a --bins error the user never gave), a ValueError at 100 and an
    OverflowError at 1000: now the largest epsilon, and --bins, are named."""
    with pytest.raises(ParameterError) as err:
        lb.calibrate_olh(epsilon, None, 1000, 100)
    assert err.value.field == "epsilon" and "at most about 33.9 for olh" in str(err.value) and "--bins" in str(err.value)
    assert lb.calibrate_olh(epsilon, None, 1000, 100, bins=64).bins == 64


@pytest.mark.parametrize("protocol, domain, epsilon", [("grr", 2**24, 1e-9), ("grr", 100, 1e-300), ("oue", 100, 1e-300),
                                                       ("hadamard", 100, 1e-300), ("olh", 100, 1e-300)])
def test_too_small_epsilon_names_epsilon_not_local_epsilon(protocol, domain, epsilon):
    with pytest.raises(ParameterError) as err:
        registry.calibrate(protocol, epsilon=epsilon, n_users=1000, domain_size=domain)
    assert err.value.field == "epsilon" and "local_epsilon" not in str(err.value)


@pytest.mark.parametrize("name", ["grr", "oue", "olh", "hadamard"])
def test_no_reported_standard_error_says_certain_while_one_report_away_it_is_not(name):
    """At a large epsilon q nears 0: OUE's and OLH's sd at g = 0 nears 0 while a holder's report still counts with
    probability 1/2 (sd 1 at g = 1), and Hadamard's does at g = n. A result reports the larger sd one report (1 / (p -
    q)) from the estimate (docs/derivations.md, "Reported standard errors"); at the estimates 0 and n it read 6e-5."""
    p = registry.calibrate(name, epsilon=30.0, n_users=10_000, domain_size=10)
    reported = p.reported_standard_error(np.array([0.0, 10_000.0]))
    one_away = p.standard_error(np.array([1.0, 9_999.0]))
    assert np.all(reported >= one_away - 1e-12)
    assert (reported > 0.5).any() or name == "grr"  # GRR at eps 30: every report is its user's item
    moderate = registry.calibrate(name, epsilon=1.0, n_users=10_000, domain_size=10)
    estimates = np.array([0.0, 50.0, 5000.0])
    assert moderate.reported_standard_error(estimates) == pytest.approx(moderate.standard_error(estimates), rel=0.01)

