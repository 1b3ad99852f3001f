"""What an analysis releases, and with what guarantee: the one pipeline of ``privagg analyze`` and the analyzer
service.

An analysis runs a protocol's analyzer over the messages it received. What it releases is decided here, for
every caller:

* :class:`Analysis`: what the analyzer estimates (a frequency protocol's whole domain, or the public candidates:
  the whole domain unless candidates are given, and with both the top among the candidates; a vector sum's
  every coordinate, or the candidate coordinates), and the report of its result (a frequency table's top items,
  named where public; every coordinate a vector sum estimated).
* :func:`analysis_privacy`: the guarantee the release states: the parameters', how the clients drew their
  randomness (or why the release is not private), what it counts on when fewer than n users reported (not
  private below the honest users it needs), and a caveat when the messages received lie far from what the
  guarantee counts on; :func:`folder_privacy` takes them from a message folder's items.json, and
  :func:`folder_reporters` the users whose reports the analyzer debiases with.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from .core.encoding import ItemEncoder
from .engine import ITEMS_FILE
from .privacy.description import PrivacyDescription
from .protocols.kinds import ResultKind
from .protocols.parameters import Parameters
from .protocols.registry import analyzer, choose_full_domain, get
from .reports import (AnalysisReport, Collection, Engine, HeavyHitterAnalysisReport, VectorAnalysisReport,
                      analysis_report, heavy_hitter_analysis_report, vector_analysis_report, with_received_caveat)


@dataclass(frozen=True)
class Analysis:
    """What an analysis of ``parameters`` estimates: the whole domain (``full_domain``), or the public
    ``candidates`` only; a whole-domain frequency analysis with candidates releases the top among them."""

    parameters: Parameters
    full_domain: bool = True
    candidates: np.ndarray | None = None  # public items (coordinates of a vector sum), sorted codes

    @classmethod
    def of(cls, parameters: Parameters, candidates: np.ndarray | None = None,
           full_domain: bool | None = None) -> "Analysis":
        """The analysis of ``candidates`` (default: none, the whole domain); ``full_domain`` (frequency
        protocols): estimate every item of [B] anyway, up to :data:`~privagg.protocols.registry.FULL_DOMAIN_MAX`."""
        if get(parameters.protocol).result is ResultKind.VECTOR_SUM:
            return cls(parameters, candidates is None, candidates)
        if get(parameters.protocol).result is ResultKind.HEAVY_HITTER_LIST:  # discovered: no list, no whole domain
            return cls(parameters, False, None)
        full_domain = choose_full_domain(parameters.domain_size, candidates is None if full_domain is None
                                         else full_domain, candidates is not None)
        return cls(parameters, full_domain, candidates)

    def analyzer(self):
        """The protocol's analyzer (or curator), over the candidates or the whole domain."""
        return analyzer(self.parameters, None if self.full_domain else self.candidates)

    def report(self, result, privacy: PrivacyDescription, engine: Engine, *, encoder: ItemEncoder | None = None,
               top: int = 10, collection: Collection | None = None) \
            -> AnalysisReport | VectorAnalysisReport | HeavyHitterAnalysisReport:
        """The report of the analyzer's finalized ``result``, stating ``privacy`` (:func:`analysis_privacy`): a
        frequency table's ``top`` items, named by ``encoder`` (default: items are their integer codes), every
        coordinate of a vector sum, or every heavy hitter fe-hh discovered (strings by name). ``collection``: what a
        service received."""
        p = self.parameters
        if get(p.protocol).result is ResultKind.VECTOR_SUM:
            return vector_analysis_report(p, result, privacy, engine, collection=collection)
        if get(p.protocol).result is ResultKind.HEAVY_HITTER_LIST:
            return heavy_hitter_analysis_report(p, result, privacy, engine, collection=collection)
        if self.full_domain and self.candidates is not None:  # the top among the public candidates
            result = result.restricted_to(self.candidates)
        encoder = ItemEncoder(p.domain_size, kind="integer") if encoder is None else encoder
        return analysis_report(p, result, privacy, engine, encoder=encoder, top=top, full_domain=self.full_domain,
                               collection=collection)


def analysis_privacy(parameters: Parameters, received: int, randomness: str, *, not_private: str | None = None,
                     reporters: int | None = None) -> PrivacyDescription:
    """The guarantee an analysis of ``received`` messages from ``reporters`` users (default: the calibrated n)
    states: the parameters', the clients' ``randomness`` (``not_private``: why the messages are not a private
    run's, e.g. a seeded simulation's), what it counts on when fewer than n users reported
    (:func:`_over_reporters`), and a caveat when ``received`` lies far from what the ``reporters`` would send
    (:func:`privagg.reports.with_received_caveat`)."""
    privacy = parameters.privacy
    privacy = (replace(privacy, randomness=randomness) if not_private is None else
               privacy.as_simulation(randomness, not_private))
    return with_received_caveat(_over_reporters(privacy, parameters, reporters), parameters, received, reporters)


def _over_reporters(privacy: PrivacyDescription, parameters: Parameters, reporters: int | None) -> PrivacyDescription:
    """A shuffle protocol's guarantee when m = ``reporters`` < n users reported (a task closed early): the noise
    in the release is the m users' own, and the guarantee counts on ceil(G n) honest users among them, the n - m
    absent counting among the (1 - G) n it does not count on (docs/privacy.md, "An early close"). Stated as an
    assumption for m >= ceil(G n); below, the release is not private. A local report stands alone, and a
    curator adds its own noise: their guarantee does not depend on who reported."""
    n, honest = parameters.n_users, parameters.honest_users
    if reporters is None or parameters.model != "shuffle" or reporters >= n:
        return privacy
    if reporters < honest:
        return privacy.as_unfounded(f"too few reports: {reporters} of the {n} users' reports were counted, fewer "
                                    f"than the {honest} honest users whose noise the guarantee counts on (ceil(G n), "
                                    f"G = {parameters.honest_fraction:g})")
    return replace(privacy, assumptions=privacy.assumptions + (
        f"{reporters} of the {n} users reported: the guarantee counts on {honest} of them following the protocol, "
        f"the {n - reporters} absent among the {n - honest} it does not count on; the estimates are of the "
        f"{reporters} users' data",))


def folder_privacy(parameters: Parameters, items: dict[str, Any], received: int) -> PrivacyDescription:
    """The guarantee of an analysis of a message folder, as far as the analyzer can know it.

    The analyzer cannot see how the clients drew their randomness, nor how many users' messages the folder
    holds: it takes items.json's record of both (:func:`privagg.engine.read_items_info`; ``users``, where
    recorded, and why a run was not private), and without a record of the randomness says the run is not known
    to be private.
    """
    reporters = items.get("users")
    if items.get("private") is True:
        return analysis_privacy(parameters, received, f"as recorded in {ITEMS_FILE}: {items.get('randomness')}",
                                reporters=reporters)
    if items.get("private") is False and items.get("not_private") is not None:  # the run recorded why
        privacy = replace(parameters.privacy, randomness=str(items.get("randomness", "unknown")))
        privacy = _over_reporters(privacy.as_unfounded(str(items["not_private"])), parameters, reporters)
        return with_received_caveat(privacy, parameters, received, reporters)
    why = ("the messages came from a simulation with reproducible randomness" if items.get("private") is False
           else f"no {ITEMS_FILE} records how the messages were made, so the analyzer cannot tell whether the "
                "clients used secure randomness")
    return analysis_privacy(parameters, received, items.get("randomness", "unknown"), not_private=why,
                            reporters=reporters)


def folder_reporters(parameters: Parameters, items: dict[str, Any]) -> tuple[int | None, list[str]]:
    """(the users whose messages a folder holds, as its items.json records them; the warnings of the report). A
    protocol whose users make the noise is debiased with them; where the folder does not say (a folder written
    before the record, or by hand), the calibrated n is used and the report says so: the estimates are biased if
    fewer users' messages are in it. A curator's noise does not depend on them (None, no warning)."""
    if not get(parameters.protocol).served:
        return None, []
    if items.get("users") is not None:
        return items["users"], []
    return None, [f"{ITEMS_FILE} does not record how many users' messages the folder holds (\"users\"): the "
                  f"estimates are debiased for the calibrated n = {parameters.n_users}, and are biased if the "
                  "messages are fewer users' (a collection closed early)"]
