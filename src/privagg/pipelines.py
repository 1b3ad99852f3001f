"""What a release holds, and with what guarantee: the one pipeline of ``privagg estimate``, ``privagg analyze`` and
the services.

A simulation (:mod:`privagg.simulate`), an analysis of written messages (:mod:`privagg.engine`) and a service
(:mod:`privagg.service`) each produce a protocol's result; what is released from it, with what guarantee, is
decided here, for every caller:

* :class:`Analysis`: what the analyzer estimates (a frequency protocol's whole domain, or the public candidates:
  the whole domain unless candidates are given, and with both the top among the candidates; a vector sum's
  every coordinate, or the candidate coordinates), and the release of its result (:meth:`Analysis.release`: a
  frequency table's top items, named where public; every coordinate a vector sum estimated; every heavy hitter
  discovered; with the parameters, the guarantee, the cost and the theory every report holds), which the
  reports of ``estimate`` (with the simulation) and ``analyze`` and the services (:meth:`Analysis.report`: with
  the engine and what was collected) are made of.
* :func:`analysis_privacy`: the guarantee the release states: the parameters', how the clients drew their
  randomness (or why the release is not private), what it counts on when fewer than n users reported (an
  :class:`~privagg.privacy.events.EarlyClose`; not private below the honest users it needs), and a caveat when
  the messages received lie far from what the guarantee counts on.
* :func:`staged_privacy`: a discovery and the estimate of what it found, one
  :class:`~privagg.privacy.events.Sequential` event (:class:`FirstStage`, passed to :meth:`Analysis.release`,
  brings the first stage's result into a release: the composed guarantee, its profile, both stages' messages
  and the discovery block).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from .core.encoding import ItemEncoder
from .errors import LARGEST
from .privacy.description import PrivacyDescription, privacy_warnings
from .privacy.events import EarlyClose, Incomplete, Sequential, Stage
from .protocols.kinds import ResultKind
from .protocols.parameters import Parameters, received_bounds, received_mismatch
from .protocols.registry import analyzer, choose_full_domain, get
from .reports import (AnalysisReport, Collection, Discovery, Engine, HeavyHitterAnalysisReport, Messages,
                      ProfilePoint, VectorAnalysisReport, capped_warnings, coordinate_estimates, expected_error,
                      heavy_hitters, privacy_profile, report_parameters,
                      reported_estimates, shared_code_warnings)


@dataclass(frozen=True)
class FirstStage:
    """What the first stage of a staged release released (registry.DiscoveryStage): its parameters, its result,
    its release's guarantee (:func:`analysis_privacy`, or a simulation's) and the messages it took."""

    parameters: Parameters
    result: Any
    privacy: PrivacyDescription
    messages: Messages


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
        protocols): estimate every item of [B] anyway, up to :data:`~privagg.protocols.registry.FULL_DOMAIN_MAX`
        (``estimate``, which chooses against a run's budget too, builds its Analysis with its choice)."""
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

    def release(self, result, privacy: PrivacyDescription, *, encoder: ItemEncoder | None = None, top: int = 10,
                truth=None, names=None, warnings=(), first: FirstStage | None = None) -> dict[str, Any]:
        """The fields every report of the analyzer's finalized ``result`` holds, stating ``privacy``: the
        protocol, its parameters and guarantee (``privacy_profile``: delta at other epsilons for its noise), the
        messages, the theory of its error and its warnings (``warnings`` first); and what it releases: a
        frequency table's ``top`` items, named by ``encoder`` (default: items are their integer codes), every
        coordinate of a vector sum (``names``: the coordinates' public names), or every heavy hitter discovered.

        ``truth`` (an evaluation's, from the raw data): a frequency table's true counts (a function of sorted
        codes), a vector sum's true sums (an array beside its coordinates), the heavy hitters' (a dict).
        ``first``: the discovery stage of a staged release, whose guarantee composes with ``privacy``
        (:func:`staged_privacy`) and whose messages count."""
        p = self.parameters
        kind = get(p.protocol).result
        if first is not None:
            privacy = staged_privacy(first.privacy, privacy)
        received, reporters = result.messages + result.malformed, getattr(result, "reporters", None)
        users = p.n_users if reporters is None else reporters
        fields: dict[str, Any] = dict(
            protocol=p.protocol, parameters=report_parameters(p), privacy=privacy, n_users=p.n_users,
            messages=Messages(received, received / users, result.malformed), bits_per_message=p.bits_per_message,
            expected_error=expected_error(p, reporters), privacy_profile=privacy_profile(p),
            warnings=[*warnings, *privacy_warnings(privacy.epsilon, privacy.delta, p.n_users), *p.warnings()])
        if kind is ResultKind.VECTOR_SUM:
            coordinates = range(len(result.total)) if result.coordinates is None else result.coordinates.tolist()
            fields.update(estimates=coordinate_estimates(result, coordinates, truth, names),
                          mean=result.mean().tolist(), discovery=None)
        elif kind is ResultKind.HEAVY_HITTER_LIST:
            fields.update(threshold=result.threshold, heavy_hitters=heavy_hitters(result, truth),
                          survivors=list(result.survivors), theory=p.theory(),
                          reliable=p.reliable())
            fields["warnings"] += capped_warnings(p, result)
        else:
            if self.full_domain and self.candidates is not None:  # the top among the public candidates
                result = result.restricted_to(self.candidates)
            encoder = ItemEncoder(p.domain_size, kind="integer") if encoder is None else encoder
            fields.update(estimates=reported_estimates(result, encoder, top, truth=truth))
            fields["warnings"] += shared_code_warnings(fields["estimates"], encoder, p.n_users)
        if first is not None:
            total = fields["messages"].total + first.messages.total
            fields.update(
                privacy_profile=_staged_profile((first.parameters, p), privacy.epsilon),
                messages=Messages(total, total / users, fields["messages"].malformed + first.messages.malformed),
                discovery=Discovery(phi=first.parameters.phi, coordinates=len(fields["estimates"]),
                                    messages=first.messages, parameters=report_parameters(first.parameters),
                                    privacy=first.privacy.summary(), survivors=list(first.result.survivors)))
        return fields

    def report(self, result, privacy: PrivacyDescription, engine: Engine, *, encoder: ItemEncoder | None = None,
               top: int = 10, collection: Collection | None = None, first: FirstStage | None = None) \
            -> AnalysisReport | VectorAnalysisReport | HeavyHitterAnalysisReport:
        """The report of ``privagg analyze`` and of the services: :meth:`release`, with how the ``engine`` ran and
        what a service's ``collection`` received."""
        fields = self.release(result, privacy, encoder=encoder, top=top, first=first)
        kind = get(self.parameters.protocol).result
        if kind is ResultKind.VECTOR_SUM:
            return VectorAnalysisReport(**fields, engine=engine, collection=collection)
        if kind is ResultKind.HEAVY_HITTER_LIST:
            return HeavyHitterAnalysisReport(**fields, engine=engine, collection=collection)
        return AnalysisReport(**fields, full_domain=self.full_domain, engine=engine, collection=collection)


def analysis_privacy(parameters: Parameters, received: int, randomness: str, *, not_private: str | None = None,
                     reporters: int | None = None) -> PrivacyDescription:
    """The guarantee an analysis of ``received`` messages from ``reporters`` users (default: the calibrated n)
    states: the parameters', the clients' ``randomness`` (``not_private``: why the messages are not a private
    run's, e.g. a seeded simulation's), what it counts on when fewer than n users reported
    (:func:`over_reporters`), and a caveat when ``received`` lies far from what the ``reporters`` would send
    (:func:`with_received_caveat`)."""
    privacy = parameters.privacy
    privacy = (replace(privacy, randomness=randomness) if not_private is None else
               privacy.as_simulation(randomness, not_private))
    return with_received_caveat(over_reporters(privacy, parameters, reporters), parameters, received, reporters)


def over_reporters(privacy: PrivacyDescription, parameters: Parameters, reporters: int | None) -> PrivacyDescription:
    """A one-batch (shuffle) protocol's guarantee when m = ``reporters`` < n users reported (a task closed early):
    an :class:`~privagg.privacy.events.EarlyClose` of its event, which counts on ceil(G n) honest users among the
    m (docs/privacy.md, "An early close"); below, the release is not private. A local report stands alone, and a
    curator adds its own noise: their guarantee does not depend on who reported."""
    n = parameters.n_users
    if reporters is None or not get(parameters.protocol).single_batch or reporters >= n:
        return privacy
    return _counting_on(privacy, EarlyClose(privacy.event, reporters, n, parameters.honest_users,
                                            parameters.honest_fraction))


def with_lost_messages(privacy: PrivacyDescription, parameters: Parameters, lost: int,
                       reporters: int) -> PrivacyDescription:
    """A one-batch (shuffle) protocol's guarantee when ``lost`` messages of the ``reporters`` counted reports did
    not enter the aggregate: an :class:`~privagg.privacy.events.Incomplete` of its event, which counts on ceil(G n)
    honest users among the reports whose messages all entered (not private below). A local report stands alone."""
    if not get(parameters.protocol).single_batch:
        return privacy
    event, missing = privacy.event, 0
    if isinstance(event, Incomplete):  # messages missing (with_received_caveat): one count of the whole reports
        event, missing = event.event, event.missing
    return _counting_on(privacy, Incomplete(event, lost, reporters, parameters.honest_users,
                                            parameters.honest_fraction, missing))


def _counting_on(privacy: PrivacyDescription, event: EarlyClose | Incomplete) -> PrivacyDescription:
    """``privacy`` stating ``event``, not private where what the event counts on does not hold."""
    privacy = privacy.with_event(event)
    return privacy if event.unfounded is None else privacy.as_unfounded(event.unfounded)


def with_received_caveat(privacy: PrivacyDescription, parameters, received: int,
                         reporters: int | None = None) -> PrivacyDescription:
    """``privacy`` with a caveat when the analyzer received far fewer or more messages than the ``reporters``
    users who reported would send (more than 5 sd from their mean,
    :func:`privagg.protocols.parameters.received_mismatch`).
    Where ``reporters`` is not known (the calibrated n by default), users may have dropped out: the guarantee does
    not hold as stated. Where it is (the reports counted), more messages lessen no one's noise (the estimates may
    be biased); fewer, in a shuffle task, are messages never sent, each perhaps another report's: the guarantee
    counts on the reports whose messages all came, at least m - missing (an
    :class:`~privagg.privacy.events.Incomplete`; not private below ceil(G n), as for messages lost: a reviewer's
    run of G = 1 with 3 empty reports was stated private, while one junk message made a release not private)."""
    mismatch = received_mismatch(parameters, received, reporters)
    if mismatch is None:
        return privacy
    if reporters is None:
        return privacy.with_caveat(f"the analyzer received {mismatch}: users may have dropped out or sent extra "
                                   "messages, and the guarantee does not hold as stated")
    users, expected, sd = received_bounds(parameters, reporters)
    if received > expected:
        return privacy.with_caveat(f"the analyzer received {mismatch}: some of the {users} reports carried more "
                                   "messages than their users' randomizers draw (each within what a report may "
                                   "carry); no user's noise is lessened, but the estimates may be biased")
    if not get(parameters.protocol).single_batch:
        return privacy.with_caveat(f"the analyzer received {mismatch}: some of the {users} reports carried fewer "
                                   "messages than their users' randomizers draw; each report's guarantee stands "
                                   "alone, but the estimates may be biased")
    missing = math.ceil(expected - (5 * sd + 1) - received)
    return _counting_on(privacy.with_caveat(
        f"the analyzer received {mismatch}: the {users} reports counted carried at least {missing} messages fewer "
        "than their users' randomizers draw (beyond 5 sd), each perhaps another report's; the guarantee counts on "
        "the reports whose messages all came"), Incomplete(privacy.event, 0, users, parameters.honest_users,
                                                            parameters.honest_fraction, missing))


def with_left_out(report, dropped: int):
    """``report`` over the users who had a value, ``dropped`` others left out by --missing drop: n is then a count
    of the data, which the report carries un-noised, so it is not private and says how many were left out
    (docs/privacy.md, "Missing values")."""
    if dropped:
        report.warnings.insert(0, f"{dropped} users with a missing value were left out (--missing drop): n is a "
                                  "count of the data, and the report is not private")
        report.privacy = report.privacy.as_left_out(dropped)
    return report


STAGES = ("discovery", "estimation")


def staged_privacy(discovery: PrivacyDescription, estimation: PrivacyDescription) -> PrivacyDescription:
    """The guarantee of a discovery stage and the estimate of what it found, over the same users: one
    :class:`~privagg.privacy.events.Sequential` event of the two releases' events (basic composition), private
    only where both releases are (each one's reason named by its stage), with either release's caveats."""
    reasons = [f"{head} ({name}):{rest}" for name, p in zip(STAGES, (discovery, estimation))  # "seeded ... (discovery)"
               for head, _, rest in (part.partition(":") for part in (p.not_private_reason or "").split("; and "))
               if p.not_private_reason is not None]
    return PrivacyDescription.of(
        Sequential((Stage(STAGES[0], discovery.event), Stage(STAGES[1], estimation.event))),
        private=discovery.private and estimation.private, not_private_reason="; and ".join(reasons) or None,
        randomness=estimation.randomness, release_caveats=discovery.release_caveats + estimation.release_caveats)


def _staged_profile(stages: tuple[Parameters, ...], total: float) -> list[ProfilePoint]:
    """delta at total/2, total and 2 total epsilon of stages composed (basic composition): at each, every stage
    at its share of epsilon (as calibrated, in proportion to its own), the deltas added."""
    return [ProfilePoint(e, sum(p.delta_at(e * p.epsilon / total) for p in stages))
            for e in (total / 2, total, 2 * total) if e <= LARGEST]
