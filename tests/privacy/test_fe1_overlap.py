"""FE1's overlapping special sets: the overlap-aware bounds against the exact delta(eps) of tiny instances.

The mechanism. FE1's message space is M = {1..q-1} x [q] x [b]. A user with
item x sends one real message uniform on its special set
S_x = {(u, v, h_{u,v}(x))} (a uniform key (u, v) is a bijection onto S_x),
plus floor(rho) dummies and one more with probability f = rho - floor(rho),
each uniform on M. The analyzer sees the multiset c of all messages.

Two oracles, both exact (no domination, no windows):

1. :func:`brute_force_delta` enumerates the law of the whole multiset c
   (every user's real message and every dummy) for all datasets of n = 2
   users over [B] with B = q, and takes sup over neighbouring pairs
   D = (x, z), D' = (y, z), x != y, of sum_c (P_D(c) - e^eps P_D'(c))_+.
   With ``others=False`` it leaves the unchanged user's real message out
   (the reduced mechanism below; used for q = 5, where the whole output
   is too slow to enumerate in pure Python).

2. :func:`sufficient_statistic_delta` -- the derivation. Drop the other
   users' real messages: they do not depend on the changed user's item, so
   adding them is post-processing and can only lower the divergence (oracle
   1 checks this too). What remains is one real ball uniform on S_x plus the
   dummies. For a multiset c of N + 1 messages,

       P_x(c) = Pr[N dummies] * N! / prod_i c_i! * |M|^-N * c(S_x) / |S_x|

   (the real ball is any one of the c(S_x) messages of c lying in S_x), and
   |S_x| = |S_y|, so P_x(c) / P_y(c) = c(S_y) / c(S_x): the divergence is
   delta = E_{c ~ P_x}[(1 - e^eps c(S_y)/c(S_x))_+]. Split M into
   A = S_x \\ S_y, A' = S_y \\ S_x, I = S_x n S_y and the rest; they have
   masses a = (1 - theta)/b, a, t = theta/b and 1 - 2a - t, where theta =
   |I| / |S_x| is the hash family's collision probability p_col (the same
   for every x != y). Let U, V, Z be the dummies in A, A', I: each dummy
   falls independently in one of the four parts, so (U, V, Z) is the sum of
   a multinomial over the n floor(rho) whole dummies and one over the n
   coins (each present with probability f) -- computed below by adding
   balls one at a time. The real ball lies in A with probability 1 - theta
   (then c(S_x) = 1 + U + Z, c(S_y) = V + Z) and in I with probability
   theta (then c(S_x) = 1 + U + Z, c(S_y) = 1 + V + Z):

       delta = (1 - theta) E[(1 - e^eps (V + Z)/(1 + U + Z))_+]
               + theta E[(1 - e^eps (1 + V + Z)/(1 + U + Z))_+].

   Oracle 1 checks this identity exactly on the tiny instances; oracle 2
   then reaches n in the tens, where the bounds' binomial windows matter.

privagg's bound (:func:`hockey_stick_divergence` with ``overlap=theta``)
is joint convexity: P_x = theta Q + (1 - theta) P'_x and P_y = theta Q +
(1 - theta) P'_y, where Q (the real ball uniform on I) is the same under x
and y and P'_x, P'_y put it uniformly on A, A'. Since theta (Q - e^eps Q)
<= 0, delta <= (1 - theta) H_{e^eps}(P'_x || P'_y), an M^BIB with disjoint
special sets A, A' of mass (1 - theta)/b, which the dominated-binomial
bound covers. Every pair x != y is a worst case alike (theta is the same),
and oracle 1 takes the sup over all of them anyway.
"""

import itertools
import math

import numpy as np
import pytest

from privagg.core.hashing import UniversalHash
from privagg.privacy.balls_into_bins import hockey_stick_divergence, privacy_loss_tail


def message_space(q, b):
    return [(u, v, w) for u in range(1, q) for v in range(q) for w in range(b)]


def special_set(q, b, x):
    return {(u, v, ((u * x + v) % q) % b) for u in range(1, q) for v in range(q)}


def add_ball(law, where, ball_prob=1.0):
    """The law of count vectors after one more ball, present w.p. ``ball_prob``, uniform on ``where``."""
    new = {}
    for counts, p in law.items():
        if ball_prob < 1:
            new[counts] = new.get(counts, 0.0) + p * (1 - ball_prob)
        for j in where:
            c = counts[:j] + (counts[j] + 1,) + counts[j + 1:]
            new[c] = new.get(c, 0.0) + p * ball_prob / len(where)
    return new


def dummy_law(size, n, rho):
    whole, frac = math.floor(rho), rho - math.floor(rho)
    law = {(0,) * size: 1.0}
    everywhere = range(size)
    for _ in range(n * whole):
        law = add_ball(law, everywhere)
    for _ in range(n):
        law = add_ball(law, everywhere, frac)
    return law


def divergence(p, q, eps):
    return sum(max(0.0, pc - math.exp(eps) * q.get(c, 0.0)) for c, pc in p.items())


def brute_force_delta(q, b, rho, eps, others=True):
    """Oracle 1: sup over neighbouring datasets of two users over [q] of the exact divergence.

    ``others=False`` leaves the unchanged user's real message out (the reduced mechanism)."""
    space = message_space(q, b)
    index = {m: i for i, m in enumerate(space)}
    sets = [[index[m] for m in special_set(q, b, x)] for x in range(q)]
    noise = dummy_law(len(space), 2, rho)
    worst = 0.0
    for z in range(q) if others else [None]:
        base = noise if z is None else add_ball(noise, sets[z])
        laws = [add_ball(base, sets[x]) for x in range(q)]
        for x, y in itertools.permutations(range(q), 2):
            worst = max(worst, divergence(laws[x], laws[y], eps))
    return worst


def part_law(n, rho, masses):
    """Exact law of the dummies' counts (U, V, Z) in parts of the given masses: array [u, v, z]."""
    whole, frac = math.floor(rho), rho - math.floor(rho)
    top = n * (whole + (frac > 0))
    law = np.zeros((top + 1,) * 3)
    law[0, 0, 0] = 1.0
    a_u, a_v, a_z = masses
    for ball_prob in [1.0] * (n * whole) + [frac] * n:
        moved = np.zeros_like(law)
        moved[1:, :, :] += a_u * law[:-1, :, :]
        moved[:, 1:, :] += a_v * law[:, :-1, :]
        moved[:, :, 1:] += a_z * law[:, :, :-1]
        law = (1 - ball_prob * (a_u + a_v + a_z)) * law + ball_prob * moved
    return law


def sufficient_statistic_delta(n, b, theta, rho, eps):
    """Oracle 2: the divergence of one real ball + n users' dummies, by (U, V, Z) (module docstring)."""
    a = (1 - theta) / b
    law = part_law(n, rho, (a, a, theta / b))
    u, v, z = np.meshgrid(*(np.arange(law.shape[0]),) * 3, indexing="ij")
    outside = np.clip(1 - math.exp(eps) * (v + z) / (1 + u + z), 0, None)
    inside = np.clip(1 - math.exp(eps) * (1 + v + z) / (1 + u + z), 0, None)
    return float((law * ((1 - theta) * outside + theta * inside)).sum())


# (q, b, rho, eps, others): q = 3 with the other user's real message (the whole output of a 2-user FE1);
# q = 5 (40 to 80 messages, slow in pure Python) with the changed user's real message and the dummies only.
TINY = [(3, 2, 1.5, 0.5, True), (3, 2, 0.7, 1.0, True), pytest.param(3, 2, 2.3, 0.3, True, marks=pytest.mark.slow),
        (5, 2, 0.4, 1.0, False), (5, 3, 0.3, 0.5, False), (5, 4, 0.6, 1.0, False)]


@pytest.mark.parametrize("q,b,rho,eps,others", TINY)
def test_overlap_bounds_hold_on_the_whole_output_of_a_tiny_fe1(q, b, rho, eps, others):
    """Oracle 2 equals oracle 1 on the reduced mechanism (the identity of the module docstring); the
    other user's real message only lowers delta (post-processing); privagg's bounds lie above both."""
    theta = UniversalHash(q, b).collision_probability
    assert theta >= 0.1  # a large overlap
    reduced = brute_force_delta(q, b, rho, eps, others=False)
    assert reduced == pytest.approx(sufficient_statistic_delta(2, b, theta, rho, eps), rel=1e-9, abs=1e-15)
    exact = brute_force_delta(q, b, rho, eps) if others else reduced
    assert exact <= reduced + 1e-12
    assert 1e-3 < exact < 1  # a real test: delta is far from 0 and from 1
    mu = 2 * rho / b
    bound = hockey_stick_divergence(mu, 2, b, eps, theta)
    assert bound >= exact - 1e-12
    assert privacy_loss_tail(mu, 2, b, eps, theta) >= bound - 1e-12


@pytest.mark.parametrize("n,q,b,rho,eps", [
    (20, 7, 3, 1.4, 1.0), (30, 11, 4, 2.3, 0.5), (40, 5, 2, 0.8, 2.0), (25, 13, 12, 2.6, 1.0), (60, 3, 2, 0.45, 0.7),
])
def test_overlap_bounds_hold_for_more_users(n, q, b, rho, eps):
    theta = UniversalHash(q, b).collision_probability
    mu = n * rho / b
    exact = sufficient_statistic_delta(n, b, theta, rho, eps)
    bound = hockey_stick_divergence(mu, n, b, eps, theta)
    assert exact > 1e-8 and bound >= exact - 1e-12
    assert privacy_loss_tail(mu, n, b, eps, theta) >= bound - 1e-12
