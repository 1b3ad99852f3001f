"""1-sparse vector sums (shuffle FE paper §5): unbiasedness and variance per coordinate against the exact
formulas of docs/derivations.md ("1-sparse vector sums"), the rounding's law, the hashed variant on
candidates, message counts and bad input. The exact audit comes from the registry's audit grid."""

import math

import numpy as np
import pytest

from privagg.errors import ParameterError
from privagg.protocols import registry
from privagg.protocols import sparse_vector as sv
from privagg.simulate.runner import simulate

RUNS = 400
K_SIGMA = 4.5  # per coordinate, a handful of coordinates per test: a false alarm below 1e-4 over the suite


def population(n: int, dimension: int, seed: int = 0) -> np.ndarray:
    """Coordinates skewed towards 0 (one coordinate held by nobody), weights spread over [0, 1] with some at
    the ends (whose rounding is exact)."""
    rng = np.random.default_rng(seed)
    index = np.minimum(rng.geometric(0.4, size=n) - 1, dimension - 2)
    weight = rng.random(n)
    weight[: n // 10] = 1.0
    weight[n // 10: n // 5] = 0.0
    return np.column_stack([index, weight])


def rounding_variance(pairs: np.ndarray, dimension: int, levels: int) -> np.ndarray:
    """sum over a coordinate's holders of f (1 - f) / k^2, f the fractional part of w k."""
    scaled = pairs[:, 1] * levels
    frac = scaled - np.floor(scaled)
    return np.bincount(pairs[:, 0].astype(int), weights=frac * (1 - frac) / levels**2, minlength=dimension)


def repeated(params, pairs: np.ndarray, queries=None, mode: str = "faithful") -> np.ndarray:
    seeds = np.random.SeedSequence(7).spawn(RUNS)
    return np.array([simulate(params, pairs, mode=mode, rng=np.random.default_rng(s), queries=queries).result.total
                     for s in seeds])


def check_mean_and_variance(estimates: np.ndarray, truth: np.ndarray, variance: np.ndarray) -> None:
    """Mean within K_SIGMA standard errors of the truth; sample variance within K_SIGMA sd of its own law
    (sd of a sample variance ~ variance sqrt(2 / (R - 1)) near normality)."""
    mean, sample_var = estimates.mean(axis=0), estimates.var(axis=0, ddof=1)
    assert np.all(np.abs(mean - truth) <= K_SIGMA * np.sqrt(variance / RUNS)), (mean, truth)
    assert np.all(np.abs(sample_var / variance - 1) <= K_SIGMA * math.sqrt(2 / (RUNS - 1))), sample_var / variance


@pytest.mark.parametrize("levels", [1, 3])
def test_low_dimension_is_unbiased_with_the_exact_variance(levels):
    n, B = 2000, 6
    pairs = population(n, B)
    params = registry.calibrate("sparse-vector", epsilon=1.0, delta=1e-6, n_users=n, domain_size=B, levels=levels)
    estimates = repeated(params, pairs)
    exact = params.variance(rounding_variance(pairs, B, levels))
    check_mean_and_variance(estimates, params.true_total(pairs), exact)
    # the reported standard error bounds the exact sd at the true weight sums
    assert np.all(params.coordinate_variance(params.true_total(pairs)) >= exact * (1 - 1e-12))


def test_the_fast_path_has_the_same_law():
    n, B = 2000, 6
    pairs = population(n, B, seed=1)
    params = registry.calibrate("sparse-vector", epsilon=1.0, delta=1e-6, n_users=n, domain_size=B, levels=2)
    check_mean_and_variance(repeated(params, pairs, mode="fast"), params.true_total(pairs),
                            params.variance(rounding_variance(pairs, B, 2)))


def test_hashed_estimates_candidates_with_fe1_variance():
    """k = 1: v_x is FE1's estimate of cell x, whose variance given the rounding is se(G)^2 at the G users who
    report x, linear in G: E = se(S)^2, plus Var(G) = sum w (1 - w)."""
    n, B = 3000, 2**40
    small = population(n, 6, seed=2)
    pairs = np.column_stack([small[:, 0] * 1_000_003 + 17, small[:, 1]])  # spread over a huge domain
    candidates = np.array([17, 1_000_020, 5_000_032, 2**39])  # the last is held by nobody
    params = registry.calibrate("sparse-vector-hashed", epsilon=1.0, delta=1e-6, n_users=n, domain_size=B)
    estimates = repeated(params, pairs, queries=candidates)
    truth = params.true_total(pairs, candidates)
    rounding = np.array([np.sum(w * (1 - w)) for w in (pairs[pairs[:, 0] == c, 1] for c in candidates)])
    exact = rounding + np.asarray(params.standard_error(truth)) ** 2
    check_mean_and_variance(estimates, truth, exact)
    assert np.all(params.coordinate_variance(truth) >= exact)


def test_rounding_is_unbiased_and_lands_in_the_right_cells():
    params = registry.calibrate("sparse-vector", epsilon=1.0, delta=1e-6, n_users=1000, domain_size=4, levels=3)
    pairs = np.array([[2, 0.5], [3, 1.0], [0, 0.0], [1, 0.2]])
    rng = np.random.default_rng(0)
    cells = np.array([params.cells(pairs, rng) for _ in range(20_000)])
    assert set(np.unique(cells[:, 0])) == {2 * 3 + 0, 2 * 3 + 1}  # 1.5 levels: level 1 or 2 of coordinate 2
    assert np.all(cells[:, 1] == 3 * 3 + 2) and np.all(cells[:, 2] == 4 * 3)  # exact levels; 0 is the dummy cell
    levels = np.where(cells == 4 * 3, 0, cells % 3 + 1)
    mean, sd = levels.mean(axis=0) / 3, levels.std(axis=0) / 3 / math.sqrt(len(levels))
    assert np.all(np.abs(mean - pairs[:, 1]) <= K_SIGMA * np.maximum(sd, 1e-12))


def test_messages_per_user_are_one_plus_rho():
    n, B = 5000, 20
    params = registry.calibrate("sparse-vector", epsilon=1.0, delta=1e-6, n_users=n, domain_size=B, levels=2)
    assert params.domain_size == B * 2 + 1 and params.rho == pytest.approx(params.mu * (2 * B + 1) / n)
    run = simulate(params, population(n, B), rng=3)
    sd = params.messages_sd
    assert abs(run.messages_total - n * (1 + params.rho)) <= K_SIGMA * sd
    assert run.transcript["analyzer"]["received"] == run.messages_total


def test_suggested_levels_minimises_the_bound():
    few = registry.calibrate("sparse-vector", epsilon=1.0, delta=1e-6, n_users=10**6, domain_size=10, levels=1)
    many = registry.calibrate("sparse-vector", epsilon=1.0, delta=1e-6, n_users=10**4, domain_size=1000, levels=1)
    assert few.suggested_levels() > 1 and many.suggested_levels() == 1  # rounding error dominates only with n >> B
    k = few.suggested_levels()
    better = registry.calibrate("sparse-vector", epsilon=1.0, delta=1e-6, n_users=10**6, domain_size=10, levels=k)
    assert better.mse_bound() < few.mse_bound()
    default = registry.calibrate("sparse-vector", epsilon=1.0, delta=1e-6, n_users=10**6, domain_size=10)
    assert default.levels == k  # the default k is the suggested one


@pytest.mark.parametrize("pairs,field,fragment", [
    ([[0, 0.5], [5, 0.2]], "coordinate", "5.0 on row 1"),
    ([[0, 0.5], [1.5, 0.2]], "coordinate", "1.5 on row 1"),
    ([[0, 0.5], [-1, 0.2]], "coordinate", "-1.0 on row 1"),
    ([[0, 0.5], [1, float("nan")]], "weight", "nan on row 1"),
    ([[0, 1.5], [1, 0.2]], "weight", "1.5 on row 0"),
    ([[0, 0.5, 1.0], [1, 0.2, 1.0]], "input", "shape (2, 3)"),
    ([[0, 0.5], [1]], "input", "ragged"),
])
def test_bad_input_names_the_row(pairs, field, fragment):
    params = registry.calibrate("sparse-vector", epsilon=1.0, delta=1e-6, n_users=2, domain_size=5)
    with pytest.raises(ParameterError) as err:
        sv.SparseVectorClient(params).randomize(pairs, rng=0)
    assert err.value.field == field and fragment in str(err.value)
    assert err.value.row is None or f"on row {err.value.row} (counted from 0)" in str(err.value)


def test_bad_parameters_and_candidates():
    with pytest.raises(ParameterError, match="levels"):
        registry.calibrate("sparse-vector", epsilon=1.0, delta=1e-6, n_users=100, domain_size=5, levels=0)
    with pytest.raises(ParameterError, match="dimension"):
        registry.calibrate("sparse-vector", epsilon=1.0, delta=1e-6, n_users=100, domain_size=2**27, levels=4)
    params = registry.calibrate("sparse-vector-hashed", epsilon=1.0, delta=1e-6, n_users=100, domain_size=2**30)
    for bad in ([], [2**30], [1.5], None):  # None: no candidates, and 2^30 coordinates are too many to count
        with pytest.raises(ParameterError, match="candidates"):
            registry.analyzer(params, bad)
    fields = params.to_dict()
    with pytest.raises(ParameterError, match="domain_size"):
        registry.load_parameters({**fields, "dimension": 2**29})


def test_every_report_says_its_stderr_is_a_bound():
    """A reviewer's finding: over seeded runs the errors came out at 0.76-0.87 of the stated stderr (the rounding's
    variance taken at its largest), where a frequency protocol's come out near 1: the reports say it is a bound."""
    from privagg.protocols.registry import calibrate

    for protocol, domain in (("sparse-vector", 64), ("sparse-vector-hashed", 2**40)):
        p = calibrate(protocol, epsilon=1.0, delta=1e-8, n_users=5000, domain_size=domain)
        assert any(w.startswith("stderr is an upper bound on each coordinate's standard deviation")
                   for w in p.warnings()), protocol
