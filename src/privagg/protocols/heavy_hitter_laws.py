"""fe-hh's exact message law, for the exact auditor on tiny instances (:mod:`privagg.audit`): a user's messages
as a law over histograms of the tagged message types (:mod:`privagg.protocols.heavy_hitters`)."""

from __future__ import annotations

import itertools
import math

import numpy as np

from . import exact_laws
from .heavy_hitters import HeavyHitterParameters


def _thinned(law: dict[tuple[int, ...], float], keep: float) -> dict[tuple[int, ...], float]:
    """The law of a histogram after each of its messages is kept independently with probability ``keep``."""
    out: dict[tuple[int, ...], float] = {}
    for histogram, probability in law.items():
        for kept in itertools.product(*(range(h + 1) for h in histogram)):
            weight = math.prod(math.comb(h, k) * keep**k * (1 - keep) ** (h - k) for h, k in zip(histogram, kept))
            out[kept] = out.get(kept, 0.0) + probability * weight
    return out


def law_size(parameters: HeavyHitterParameters, item=0) -> exact_laws.LawSize:
    """:func:`message_law`'s size before it is built: per level k, its T_k = (q_k - 1) q_k b types, the dummies'
    multisets (C(T_k + r - 1, r), and C(T_k + r, r + 1) when rho is fractional, r = floor(rho)) for each of
    the (q_k - 1) q_k positions of the real message, each histogram then thinned into at most 2^(r + 2) kept
    subsets; every outcome a histogram over all levels' types together."""
    p = parameters
    whole = math.floor(p.rho)
    sizes = [(h.modulus - 1) * h.modulus * p.bins for h in p.hashes]
    states = 0.0
    for h, types in zip(p.hashes, sizes):
        dummies = exact_laws.comb(types + whole - 1, whole) + (exact_laws.comb(types + whole, whole + 1)
                                                               if p.rho > whole else 0.0)
        states += ((h.modulus - 1) * h.modulus + 1) * dummies * 2.0 ** min(whole + 2, 1000)
    return exact_laws.LawSize(p.protocol, states, sum(sizes), 1 + math.ceil(p.rho), "domain", p.domain_size,
                              others="a larger --epsilon, --delta or --phi",
                              detail=f"{p.levels} levels; rho = {p.rho:.3g} dummies a user")


def message_law(parameters: HeavyHitterParameters, item) -> dict[tuple[int, ...], float]:
    """One user's messages as an exact law over histograms of the tagged message types.

    Types are the levels' FE1 types one after the other (level k's ((u - 1) q_k + v) b + w). A uniform
    level; FE1's real message for the item's prefix code there and floor(rho) or ceil(rho) dummies uniform
    over that level's types; then every message kept with probability p_f. Enumerated, so for tiny
    instances only (:mod:`privagg.audit`), its size checked first (:func:`law_size`).
    """
    from .balls_into_bins import _uniform_multisets

    p = parameters
    exact_laws.check_law(law_size(p, item))
    sizes = [(h.modulus - 1) * h.modulus * p.bins for h in p.hashes]
    whole, frac = math.floor(p.rho), p.rho - math.floor(p.rho)
    law: dict[tuple[int, ...], float] = {}
    for k, h in enumerate(p.hashes):
        code = int(p.codes(p.check_values([item]), np.array([k]))[0])
        q = h.modulus
        u, v = np.divmod(np.arange((q - 1) * q), q)
        real = (u * q + v) * p.bins + h.evaluate(u + 1, v, np.full(u.size, code))
        dummies = {hist: prob * (1 - frac) for hist, prob in _uniform_multisets(sizes[k], whole).items()}
        if frac:
            for hist, prob in _uniform_multisets(sizes[k], whole + 1).items():
                dummies[hist] = dummies.get(hist, 0.0) + prob * frac
        level: dict[tuple[int, ...], float] = {}
        for position in real.tolist():
            for hist, prob in dummies.items():
                key = hist[:position] + (hist[position] + 1,) + hist[position + 1:]
                level[key] = level.get(key, 0.0) + prob / u.size
        before, after = (0,) * sum(sizes[:k]), (0,) * sum(sizes[k + 1:])
        for hist, prob in _thinned(level, p.filter_probability).items():
            key = before + hist + after
            law[key] = law.get(key, 0.0) + prob / p.levels
    return law
