import dataclasses
import math

import numpy as np
import pytest
from scipy import signal, stats

from privagg.errors import ParameterError
from privagg.privacy.balls_into_bins import (
    METHOD_DETAIL, METHODS, calibrate, closed_form_noise, delta_at, divergence_floor, hockey_stick_divergence,
    hockey_stick_noise, numeric_noise, privacy_loss_tail, satisfies_closed_form)
from privagg.privacy.description import REPLACE_ONE, Mechanism, PrivacyDescription


def test_known_values():
    # Reference §2.1: n = 1e5, eps = 1, delta = 1e-10 gives mu = 97.96 (authors' iid-binomial model,
    # bisection to 0.1); privagg's bound under the true dummy law needs 98.01. Closed form: 759.0.
    assert numeric_noise(1.0, 1e-10, 100_000, 8685) == pytest.approx(97.96, abs=0.1)
    assert closed_form_noise(1.0, 1e-10) == pytest.approx(759.0, abs=0.05)
    # The VS run: n = 9,854,640, eps = 0.5, delta = 0.5 n^-2, b = 2359 gives 504.8.
    n = 9_854_640
    assert numeric_noise(0.5, 0.5 / n**2, n, 2359) == pytest.approx(504.8, abs=0.1)


def scipy_binomial_sum(trials, probs):
    """The same windowed law of Bin(trials[0], probs[0]) + Bin(trials[1], probs[1]) from scipy.stats."""
    from privagg.privacy import balls_into_bins as bib

    start, pmf, outside = 0, np.ones(1), 0.0
    for t, p in zip(trials, probs):
        mean, sd = t * p, math.sqrt(t * p * (1 - p))
        lo = max(0, math.floor(mean - bib._WINDOW_SD * sd - bib._WINDOW_PAD))
        hi = min(t, math.ceil(mean + bib._WINDOW_SD * sd + bib._WINDOW_PAD))
        pmf = np.convolve(pmf, stats.binom.pmf(np.arange(lo, hi + 1), t, p))
        start += lo
        outside += float(stats.binom.cdf(lo - 1, t, p) + stats.binom.sf(hi, t, p))
    return start, pmf, outside


@pytest.mark.parametrize("trials,probs", [((10**6, 10**6), (1 / 64, 0.3 / 64)), ((0, 1000), (0.5, 0.01)),
                                          ((50, 50), (0.5, 0.0)), ((20_000, 2_000), (0.5, 1.0)),
                                          ((10**8, 10**8), (1e-5, 3e-6)), ((30, 7), (0.2, 0.9))])
def test_the_windowed_laws_are_scipys(trials, probs):
    """The calibrations' binomial sums (privagg.privacy.shuffle's pmf and tails, not scipy.stats, which is slow
    to import) against scipy.stats, point masses (no trials, p = 0, p = 1 as FE0 at B = 2 has) included."""
    from privagg.privacy.balls_into_bins import _binomial_sum

    laws = [_binomial_sum(trials, probs), scipy_binomial_sum(trials, probs)]
    low, high = min(law[0] for law in laws), max(law[0] + law[1].size for law in laws)
    on_support = []  # each pmf over the same values (a window may hold zeros the other leaves out)
    for start, pmf, _ in laws:
        whole = np.zeros(high - low)
        whole[start - low:start - low + pmf.size] = pmf
        on_support.append(whole)
    assert np.allclose(*on_support, rtol=1e-10, atol=1e-300)  # scipy's pmf is the less exact: 6e-14 off the
    # rational value of Bin(20000, 1/2) at 9297, shuffle.binomial_pmf 8e-15
    assert laws[0][2] == pytest.approx(laws[1][2], abs=1e-300)  # the mass outside the windows


def bivariate_multinomial(trials, p, top):
    """Joint pmf of (X1, X2) ~ Multinomial(trials; p, p) on [0, top]^2."""
    x = np.arange(top + 1)
    x2_pmf = stats.binom.pmf(x, trials, p)
    remaining = np.maximum(trials - x[None, :], 0)  # X1 given X2 = x2: Bin(trials - x2, p / (1 - p))
    return x2_pmf[None, :] * stats.binom.pmf(x[:, None], remaining, p / (1 - p))


def exact_tail(mu, n, bins, eps):
    """Pr[X1 + 1 >= e^eps X2] under the exact joint law of the dummies (small n only)."""
    rho = mu * bins / n
    whole, frac = math.floor(rho), rho - math.floor(rho)
    top = n * (whole + 1)
    joint = signal.fftconvolve(bivariate_multinomial(n * whole, 1 / bins, top),
                               bivariate_multinomial(n, frac / bins, top))[:top + 1, :top + 1]
    x1, x2 = np.meshgrid(np.arange(top + 1), np.arange(top + 1), indexing="ij")
    return float(joint[x1 + 1 >= math.exp(eps) * x2].sum())


@pytest.mark.parametrize("mu,n,bins,eps", [(3.0, 40, 10, 1.0), (6.0, 30, 4, 0.5), (4.0, 60, 30, 2.0),
                                           (10.0, 25, 5, 1.0)])
def test_tail_bounds_the_exact_joint_tail(mu, n, bins, eps):
    # exact_tail is accurate to ~1e-15 (FFT); the bound must not fall below it.
    assert privacy_loss_tail(mu, n, bins, eps) >= exact_tail(mu, n, bins, eps) - 1e-12


def add_ball(counts, j):
    """The bin counts ``counts`` with one more ball in bin j."""
    return counts[:j] + (counts[j] + 1,) + counts[j + 1:]


def noise_histograms(n, bins, rho):
    """Exact law of the dummies' bin counts: each of n users throws floor(rho) balls and one more
    with probability frac, each uniform over the bins. {counts tuple: probability}."""
    whole, frac = math.floor(rho), rho - math.floor(rho)
    law = {(0,) * bins: 1.0}
    for ball_prob in [1.0] * (n * whole) + [frac] * n:
        new = {}
        for counts, p in law.items():
            new[counts] = new.get(counts, 0.0) + p * (1 - ball_prob)
            for j in range(bins):
                c = add_ball(counts, j)
                new[c] = new.get(c, 0.0) + p * ball_prob / bins
        law = new
    return law


def exact_delta(n, bins, rho, eps):
    """sup over outputs: sum_c (P[c | real ball in bin 0] - e^eps P[c | real ball in bin 1])_+ for M^BIB, s = 1."""
    law = noise_histograms(n, bins, rho)
    on_0 = {add_ball(c, 0): p for c, p in law.items()}
    on_1 = {add_ball(c, 1): p for c, p in law.items()}
    return sum(max(0.0, p - math.exp(eps) * on_1.get(c, 0.0)) for c, p in on_0.items())


@pytest.mark.parametrize("n,bins,rho,eps", [(4, 3, 0.5, 0.5), (4, 3, 1.5, 1.0), (6, 4, 0.8, 1.0), (3, 5, 2.4, 0.3)])
def test_hockey_stick_bounds_the_exact_delta_of_the_whole_output(n, bins, rho, eps):
    """Against every output of a tiny M^BIB (FE0 with B = bins), enumerated exactly."""
    mu = n * rho / bins
    exact = exact_delta(n, bins, rho, eps)
    assert hockey_stick_divergence(mu, n, bins, eps) >= exact - 1e-12
    assert privacy_loss_tail(mu, n, bins, eps) >= hockey_stick_divergence(mu, n, bins, eps) - 1e-12


def test_hockey_stick_needs_less_noise():
    # docs/derivations.md: about 82.13 under Poisson noise, against 98.0 for the tail criterion.
    mu = hockey_stick_noise(1.0, 1e-10, 100_000, 8685)
    assert mu == pytest.approx(82.13, abs=0.1)
    assert hockey_stick_divergence(mu, 100_000, 8685, 1.0) <= 1e-10 < hockey_stick_divergence(mu - 0.01, 100_000,
                                                                                               8685, 1.0)
    assert mu < numeric_noise(1.0, 1e-10, 100_000, 8685)


def test_numeric_noise_is_the_smallest_that_works():
    for eps, delta, n, bins in [(1.0, 1e-10, 100_000, 8685), (0.5, 1e-6, 5_000, 40), (2.0, 1e-8, 10**7, 2**20),
                                (8.0, 1e-10, 10**5, 100)]:
        mu = numeric_noise(eps, delta, n, bins)
        assert privacy_loss_tail(mu, n, bins, eps) <= delta
        assert privacy_loss_tail(mu - 0.01, n, bins, eps) > delta
        assert mu >= math.log(1 / delta) * 0.99  # Pr[X2 = 0] ~ e^-mu must be at most delta
        if eps <= 1:
            assert mu < closed_form_noise(eps, delta)


def test_an_integer_law_puts_at_least_one_over_root_1_plus_12_var_on_some_value():
    """The anti-concentration step of divergence_floor (docs/derivations.md, "A closed-form floor under the
    bounds"): max_k Pr[X = k] >= 1 / sqrt(1 + 12 Var X) for every integer law; equality for uniform laws."""
    rng = np.random.default_rng(5)
    laws = [np.ones(m) / m for m in (1, 2, 7, 100)] + [rng.dirichlet(np.full(size, a)) for size in (2, 5, 40, 300)
                                                        for a in (0.05, 1.0, 50.0) for _ in range(20)]
    laws += [stats.binom.pmf(np.arange(0, 61), 60, 0.3), np.convolve(*[stats.binom.pmf(np.arange(31), 30, 0.1)] * 2)]
    for pmf in laws:
        k = np.arange(pmf.size)
        variance = float(pmf @ k**2 - (pmf @ k) ** 2)
        assert pmf.max() >= 1 / math.sqrt(1 + 12 * variance) * (1 - 1e-12)


@pytest.mark.parametrize("overlap", [0.0, 0.3])
def test_the_closed_form_floor_lies_under_both_bounds(overlap):
    """divergence_floor never exceeds the hockey-stick bound (nor, so, the tail), across small and large noise,
    tiny and large epsilon, few and many bins: the searches may skip the bounds where it exceeds delta."""
    closest = 0.0
    for n in (3, 30, 1000, 10**5):
        for bins in (2, 3, 7, 100, 10**4):
            theta = overlap / bins
            for eps in (1e-9, 1e-3, 0.01, 0.1, 1.0, 3.0):
                for mu in (0.1, 1.0, 5.0, 30.0, 200.0, 3000.0):
                    floor = divergence_floor(mu, n, bins, eps, theta)
                    bound = hockey_stick_divergence(mu, n, bins, eps, theta)
                    assert floor <= bound * (1 + 1e-12)
                    closest = max(closest, floor / bound if bound else 0.0)
    assert closest > 0.99  # and it is tight somewhere (small noise: Pr[X2 = 0])


@pytest.mark.parametrize("search", [numeric_noise, hockey_stick_noise])
@pytest.mark.parametrize("eps,delta,bins", [(1e-9, 1e-9, 144), (1e-300, 1e-9, 2), (1e-3, 1e-9, 100),
                                            (1e-7, 1e-6, 10**6)])
def test_a_refusal_the_floor_decides_computes_no_pmf(monkeypatch, search, eps, delta, bins):
    """epsilon 1e-9 or 1e-300 (and 1e-3 over 100 bins, below the dominating law's bias) needs more than 1e9 noisy
    balls a bin: refused from the closed-form floor, without the windowed laws (which took 7 to 15 s each at
    mu ~ 1e9, issue 44)."""
    from privagg.privacy import balls_into_bins as bib

    def no_laws(mu, *args):
        raise AssertionError(f"the windowed laws were computed at mu = {mu:.3g}")

    monkeypatch.setattr(bib, "_noise_laws", no_laws)
    with pytest.raises(ParameterError, match="epsilon must be large enough"):
        search(eps, delta, 1000, bins)


@pytest.mark.parametrize("eps, delta, n, bins, overlap", [
    (1.0, 1e-10, 100_000, 8685, 1.15e-4), (0.5, 1e-6, 5_000, 40, 0.0), (8.0, 1e-10, 10**5, 100, 0.01),
    pytest.param(0.05, 1e-8, 10**6, 2**10, 0.0, marks=pytest.mark.slow),  # 14 s of the test's 15 (the others 1 s)
])
def test_the_floor_leaves_the_calibrations_as_they_were(eps, delta, n, bins, overlap):
    """The floor only skips points where the bound fails: the searches return what they returned without it."""
    from privagg.privacy import balls_into_bins as bib

    for search, bound in ((numeric_noise, privacy_loss_tail), (hockey_stick_noise, hockey_stick_divergence)):
        unguarded = bib.bisect(lambda mu: bound(mu, n, bins, eps, overlap) <= delta, 0.0,
                               *_unguarded_bracket(bound, eps, delta, n, bins, overlap))[1]
        assert search(eps, delta, n, bins, overlap) == unguarded


def _unguarded_bracket(bound, eps, delta, n, bins, overlap):
    """(hi, steps) as the search found them before the floor: doubling from ln(1/delta) on the bound alone."""
    hi = -math.log(delta)
    while bound(hi, n, bins, eps, overlap) > delta:
        hi *= 2
    return hi, max(0, math.ceil(math.log2(hi / 1e-3)))


def test_closed_form_condition():
    bound = closed_form_noise(1.0, 1e-6)
    assert satisfies_closed_form(bound * 10 * 1.000001, 1, 10, 1.0, 1e-6)
    assert not satisfies_closed_form(bound * 10 * 0.99, 1, 10, 1.0, 1e-6)


def test_calibrate_returns_the_noise_level_of_its_method():
    args = (1.0, 1e-10, 100_000, 8685)
    assert calibrate(*args) == numeric_noise(*args)
    assert calibrate(*args, "hockey_stick") == hockey_stick_noise(*args)
    assert calibrate(*args, "closed_form") == closed_form_noise(1.0, 1e-10)
    assert calibrate(*args, "numeric", overlap=0.01) == numeric_noise(*args, overlap=0.01)
    assert calibrate(*args, "hockey_stick", overlap=0.01) == hockey_stick_noise(*args, overlap=0.01)
    assert calibrate(*args, "closed_form", overlap=0.01) == closed_form_noise(1.0, 1e-10)  # ignores the overlap
    assert set(METHOD_DETAIL) == set(METHODS)


def test_delta_at_is_the_hockey_stick_bound_for_every_calibration():
    for method in METHODS:
        mu = calibrate(1.0, 1e-10, 100_000, 8685, method)
        assert delta_at(1.0, mu, 100_000, 8685) == hockey_stick_divergence(mu, 100_000, 8685, 1.0)
        assert delta_at(1.0, mu, 100_000, 8685) <= 1e-10
        assert delta_at(0.5, mu, 100_000, 8685) >= delta_at(1.0, mu, 100_000, 8685) >= delta_at(2.0, mu, 100_000, 8685)
    with pytest.raises(ParameterError, match="epsilon must be"):
        delta_at(0, 50.0, 100, 10)


@pytest.mark.parametrize("bound", [privacy_loss_tail, hockey_stick_divergence])
@pytest.mark.parametrize("mu,n,bins,theta", [(30.0, 10_000, 587, 0.0015), (5.0, 60, 7, 1 / 3),
                                             (80.0, 10**5, 65, 0.0154)])
def test_overlap_bound_is_the_disjoint_bound_of_the_private_parts(bound, mu, n, bins, theta):
    """With overlap theta the bound is (1 - theta) times the disjoint bound for special sets of mass
    (1 - theta)/bins under the same dummies per user: bins' = bins/(1 - theta), mu' = mu (1 - theta)."""
    eps = 1.0
    got = bound(mu, n, bins, eps, theta)
    assert got == pytest.approx((1 - theta) * bound(mu * (1 - theta), n, bins / (1 - theta), eps), rel=1e-9, abs=1e-300)
    assert bound(mu, n, bins, eps, 0.0) == bound(mu, n, bins, eps)


def test_overlap_calibration_meets_its_bound():
    for method, bound in (("numeric", privacy_loss_tail), ("hockey_stick", hockey_stick_divergence)):
        mu = calibrate(1.0, 1e-8, 10_000, 65, method, overlap=0.0154)
        assert bound(mu, 10_000, 65, 1.0, 0.0154) <= 1e-8 < bound(mu - 0.01, 10_000, 65, 1.0, 0.0154)
    with pytest.raises(ParameterError, match=r"overlap must be in \[0, 1\)"):
        calibrate(1.0, 1e-8, 10_000, 65, overlap=1.0)
    with pytest.raises(ParameterError, match="overlap must be"):
        calibrate(1.0, 1e-8, 10_000, 65, overlap=-0.1)


def description(**changes):
    fields = dict(mechanism="M", parameters={"mu": 1.0}, epsilon=1.0, delta=1e-6, model="shuffle",
                  neighbouring=REPLACE_ONE, trusted=("shuffler",), honest_fraction=1.0, assumptions=("a",),
                  method="numeric", method_detail="d", reference="r")
    return PrivacyDescription.of(Mechanism(**{**fields, **changes}))


def test_privacy_description_is_validated_frozen_data():
    d = description()
    assert d.private and d.not_private_reason is None and "secure" in d.randomness
    assert d.to_dict()["model"] == "shuffle" and d.to_dict()["trusted"] == ("shuffler",)
    with pytest.raises(dataclasses.FrozenInstanceError):
        d.private = False
    for bad in (dict(model="trusted"), dict(method=""), dict(honest_fraction=0.0), dict(honest_fraction=1.5)):
        with pytest.raises(ValueError):
            description(**bad)


def test_simulations_say_they_are_not_private():
    d = description()
    sim = d.as_simulation("seeded simulation (PCG64, seed 1)", "seeded simulation: the seed regenerates the noise")
    assert not sim.private and sim.randomness.startswith("seeded") and "seed regenerates" in sim.not_private_reason
    assert d.private  # the original is untouched
    text = sim.render()
    assert text.splitlines()[0].startswith("NOT PRIVATE: seeded simulation")
    assert "(1, 1e-06)-DP, shuffle model" in text and "replace-one" in text
    assert "NOT PRIVATE" not in d.render()
    assert "caveat: c1" in description(caveats=("c1",)).render()


@pytest.mark.parametrize("kwargs,match", [
    (dict(epsilon=0, delta=1e-6, n_users=100, bins=10), "epsilon must be a finite number > 0"),
    (dict(epsilon=-1, delta=1e-6, n_users=100, bins=10), "epsilon must be a finite number > 0"),
    (dict(epsilon=float("nan"), delta=1e-6, n_users=100, bins=10), "epsilon must be a finite number > 0"),
    (dict(epsilon=float("inf"), delta=1e-6, n_users=100, bins=10), "epsilon must be a number of magnitude at most"),
    (dict(epsilon=1, delta=0, n_users=100, bins=10), r"delta must be in \(0, 1\)"),
    (dict(epsilon=1, delta=1, n_users=100, bins=10), r"delta must be in \(0, 1\)"),
    (dict(epsilon=1, delta=1e-6, n_users=1, bins=10), "n_users must be an integer >= 2"),
    (dict(epsilon=1, delta=1e-6, n_users=100, bins=1), "bins must be an integer >= 2"),
    (dict(epsilon=1, delta=1e-6, n_users=100, bins=10, method="magic"), "calibration must be one of"),
    # The closed form is not private for large eps (Pr[X2 = 0] > delta): refused.
    (dict(epsilon=6, delta=1e-10, n_users=10**5, bins=10, method="closed_form"), r"epsilon must be in \(0, 1\]"),
])
def test_bad_parameters(kwargs, match):
    with pytest.raises(ParameterError, match=match):
        calibrate(**kwargs)


@pytest.mark.parametrize("trials,probs", [((30, 7), (0.2, 0.9)), ((50, 50), (0.5, 0.0)), ((40, 60), (0.25, 0.125))])
def test_the_windowed_laws_are_the_exact_rational_laws(trials, probs):
    """Against the exact law (rational arithmetic, the float probabilities taken exactly): relative 1e-13, where
    scipy.stats is the one off by 1e-11 above."""
    from fractions import Fraction

    from privagg.privacy.balls_into_bins import _binomial_sum

    exact = [Fraction(1)]
    for t, p in zip(trials, probs):
        q = Fraction(p)
        law = [math.comb(t, c) * q**c * (1 - q) ** (t - c) for c in range(t + 1)]
        exact = [sum(exact[i] * law[j - i] for i in range(len(exact)) if 0 <= j - i < len(law))
                 for j in range(len(exact) + len(law) - 1)]
    start, pmf, outside = _binomial_sum(trials, probs)
    mine = np.zeros(len(exact))
    mine[start:start + pmf.size] = pmf
    assert np.allclose(mine, [float(v) for v in exact], rtol=1e-13, atol=1e-300) and outside < 1e-300
