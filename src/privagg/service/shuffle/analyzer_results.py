"""The analyzer's releases (:class:`~privagg.service.shuffle.analyzer.AnalyzerService`'s half that reads them): the
task list, and a task's result as ``privagg analyze`` prints it, private, with the collection counts and the
messages of the counted reports that did not enter the aggregate (:class:`LostMessages`; docs/deployment.md,
"Messages that do not enter the aggregate").
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np
import sqlalchemy as sa

from .. import storage
from ..storage import aggregates, analyzer_tasks
from ..tasks import Task
from ..web import Refused
from .aggregate_codec import decode_aggregate

SERVICE_RANDOMNESS = ("secure: each client's SDK draws from ChaCha20 keyed from its OS entropy "
                      "(privagg.service.shuffle.client)")


class Release:
    """:class:`~privagg.service.shuffle.analyzer.AnalyzerService`'s releases: it has the engine and the task loading
    (``load``, ``_first_stage``) they use."""

    def _released_first_stage(self, task: Task):
        """A staged task's first stage as its release holds it (pipelines.FirstStage: its result, the guarantee
        of its batch's release and its messages), and its messages lost (:class:`LostMessages`, or None); (None,
        None) for a task of one stage."""
        from ...pipelines import FirstStage, analysis_privacy
        from ...reports import Messages

        if task.discovery is None:
            return None, None
        first, row = self._first_stage(task)
        stage, received = task.discovery.parameters, int(first.messages + first.malformed)
        stage_privacy = analysis_privacy(stage, received + row.unopened, SERVICE_RANDOMNESS, reporters=row.reports)
        lost = lost_messages(self.load(task.discovery.task_id).analyzer, decode_aggregate(row.aggregate), first,
                             row.reports, row.unopened)
        if lost is not None:  # the first stage's messages that did not enter its aggregate: its guarantee, the task's
            stage_privacy = lost.privacy(stage_privacy, stage)
        return FirstStage(stage, first, stage_privacy, Messages(received, received / row.reports,
                                                                int(first.malformed))), lost

    def overview(self, task_id: str | None = None, limit: int = 1_000) -> list[dict]:
        """The newest ``limit`` tasks (or the one named): public parameters and counts, no estimate (the task list
        and the console); once released, whether the release is private, as its result says (:func:`_state`)."""
        query = sa.select(analyzer_tasks.c.task_id, analyzer_tasks.c.task, analyzer_tasks.c.candidates,
                          aggregates.c.batches, aggregates.c.reports, aggregates.c.unopened, aggregates.c.duplicates,
                          aggregates.c.messages, aggregates.c.malformed).join(
            aggregates, aggregates.c.task_id == analyzer_tasks.c.task_id).order_by(
            analyzer_tasks.c.created.desc()).limit(limit)
        if task_id is not None:
            self.load(task_id)  # 404 unless it is one of ours
            query = query.where(analyzer_tasks.c.task_id == task_id)
        with storage.reading(self.engine) as c:
            rows = [(row, Task.from_json(row.task, verify=False)) for row in c.execute(query).all()]
            firsts = [task.discovery.task_id for _, task in rows if task.discovery is not None]
            stages = {stage.task_id: stage for stage in c.execute(sa.select(
                aggregates.c.task_id, aggregates.c.reports, aggregates.c.unopened, aggregates.c.messages,
                aggregates.c.malformed).where(aggregates.c.task_id.in_(firsts)))} if firsts else {}
        out = []
        for row, task in rows:
            out.append({"task_id": row.task_id, "protocol": task.parameters.protocol,
                        "n_users": task.parameters.n_users, "min_batch_size": task.min_batch_size,
                        "key_id": task.key_id, "kem": task.kem, "batches": row.batches, "reports": row.reports,
                        "unopened": row.unopened, "duplicates": row.duplicates, "malformed": row.malformed,
                        "state": _state(task, row, stages),
                        "release_rule": task.release_rule})
        return out

    def result(self, task_id: str, top: int = 10) -> dict:
        """The task's result as ``privagg analyze --json`` prints it, private, with the collection counts;
        409 ``not_released`` until a batch was applied (before, the estimates would be the debiased noise
        floor of no users at all, not a result).

        The estimates are debiased, and their errors and the messages per user computed, with the m users whose
        reports were counted (an early-closed shuffle task's m >= ceil(G n), a local task's any number), whose
        noise is all the release holds; the privacy block states what the guarantee counts on among them, its
        caveat compares the messages received with what they would send, and the warnings name repeated
        encapsulations dropped, and messages lost (:class:`LostMessages`)."""
        from ...pipelines import analysis_privacy
        from ...reports import Collection, Engine, report_document

        loaded = self.load(task_id)
        with storage.reading(self.engine) as c:
            row = c.execute(sa.select(aggregates).where(aggregates.c.task_id == task_id)).one()
        if not row.batches:
            raise Refused(409, "not_released", f"task {task_id} has no result yet: no batch was applied "
                          f"({loaded.task.release_rule})")
        if loaded.analysis is None:  # staged, and its first stage discovered no coordinate
            raise Refused(409, "nothing_discovered", f"task {task_id} has nothing to estimate: its first stage (task "
                          f"{loaded.task.discovery.task_id}, whose result is the empty list) found no coordinate whose "
                          f"sum reaches phi n (phi = {loaded.task.discovery.parameters.phi:g})")
        agg, p = decode_aggregate(row.aggregate), loaded.task.parameters
        start = time.perf_counter()
        result = loaded.analyzer.finalize(agg, reporters=row.reports)
        engine = Engine("local", row.batches, seconds={"finalize": time.perf_counter() - start})
        privacy = analysis_privacy(p, int(agg.messages + agg.malformed) + row.unopened, SERVICE_RANDOMNESS,
                                   reporters=row.reports)  # every message received: the unopened are lost, not missing
        lost = lost_messages(loaded.analyzer, agg, result, row.reports, row.unopened)
        if lost is not None:
            privacy = lost.privacy(privacy, p)
        first, first_lost = self._released_first_stage(loaded.task)
        report = loaded.analysis.report(result, privacy, engine, encoder=loaded.encoder, top=top, collection=Collection(
            row.reports, row.batches, row.unopened, int(agg.malformed), row.duplicates), first=first)
        if lost is not None:
            report.warnings.append(lost.warning())
        if first_lost is not None:
            report.warnings.append(f"the first stage (task {loaded.task.discovery.task_id}): {first_lost.warning()}")
        if row.duplicates:
            report.warnings.append(f"{row.duplicates} messages repeated the HPKE encapsulated key of another and "
                                   "were dropped: whoever delivered the batches replayed messages; each message "
                                   f"was counted once, but the {row.reports} reports are the batches' own counts "
                                   "(a batch's reports are counted unless all its messages were applied before), so "
                                   "the estimates, debiased with them, may be biased")
        return report_document(report)


@dataclass(frozen=True)
class LostMessages:
    """Messages of the counted reports that did not enter the aggregate: ``unopened`` (another key, or altered on
    the way) and ``malformed`` (opened, but broke the protocol's layout), of ``total`` in the applied batches, from
    ``reporters`` reports. Sealed one by one and shuffled, they cannot be traced to reports, so the release counts
    every report and states what that assumes (docs/deployment.md, "Messages that do not enter the aggregate"):
    ``reports_worth`` is their count in reports at the batches' mean messages a report, and ``shift`` the largest
    change of an estimate were that many whole reports left out of the debiasing (None where it cannot be
    computed): how low the estimates may be."""

    unopened: int
    malformed: int
    total: int
    reporters: int
    reports_worth: int
    shift: float | None

    @property
    def lost(self) -> int:
        return self.unopened + self.malformed

    def _what(self) -> str:
        return (f"{self.lost} of the {self.total} messages of the {self.reporters} reports counted did not enter the "
                f"aggregate ({self.unopened} did not open, {self.malformed} opened malformed)")

    def _bias(self) -> str:
        return ("" if self.shift is None else f": each estimate may be low by up to {self.shift:.3g} (were they "
                f"whole reports, about {self.reports_worth}, the noise their users added is subtracted but missing)")

    def warning(self) -> str:
        return (f"{self._what()}; they cannot be traced to reports (each is sealed alone, and shuffled), so every "
                f"report is counted as if all its messages arrived{self._bias()}. A client that does not follow the "
                "protocol, or tampering between the clients and the analyzer, sends such messages: investigate "
                "(privagg_messages_dropped_total by reason)")

    def privacy(self, privacy, parameters):
        """``privacy`` with the caveat of the estimates' bias, and, in the shuffle model, the guarantee counted on the
        reports whose messages all entered: at least m - lost of them (each lost message may be another report's,
        whose user then counts among those the guarantee does not count on; below ceil(G n) it is not founded)."""
        from ...pipelines import with_lost_messages

        caveat = (f"{self._what()}; the estimates assume that those messages' users reported in full (their noise "
                  f"is subtracted, though it is missing from the aggregate){self._bias()}")
        return with_lost_messages(privacy.with_caveat(caveat), parameters, self.lost, self.reporters)


def _state(task: Task, row, stages: dict) -> str:
    """A task's state in the task list, as its result route would answer: waiting for its batch; for a staged task
    whose first stage discovered nothing, nothing to estimate; else released, and if the guarantee of its release (a
    staged task's: both stages') does not hold, "NOT PRIVATE (why)", from the counts stored beside the aggregates
    (the list reads none; a reviewer's finding: it called a release that was not private "released")."""
    if not row.batches:
        return "waiting for its batch"
    if task.discovery is not None and row.candidates == "[]":
        return "released: nothing to estimate (its first stage discovered nothing)"
    why = _not_private(task.parameters, row)
    if why is None and task.discovery is not None:
        why = _not_private(task.discovery.parameters, stages[task.discovery.task_id])
        why = None if why is None else f"first stage: {why}"
    return "released" if why is None else f"released, NOT PRIVATE ({why})"


def _not_private(parameters, row) -> str | None:
    """Why a release of ``row``'s counts is not private (the head of its reason), or None: its guarantee as
    :meth:`Release.result` states it (every message received, counted on the reports whose messages all entered)."""
    from ...pipelines import analysis_privacy, with_lost_messages

    privacy = analysis_privacy(parameters, row.messages + row.malformed + row.unopened, SERVICE_RANDOMNESS,
                               reporters=row.reports)
    if row.unopened + row.malformed:
        privacy = with_lost_messages(privacy, parameters, row.unopened + row.malformed, row.reports)
    return None if privacy.private else privacy.not_private_reason.split(":")[0]


def lost_messages(analyzer, agg, result, reporters: int, unopened: int) -> LostMessages | None:
    """The messages of the ``reporters`` counted reports that did not enter ``agg`` (``unopened`` besides its
    malformed ones), with how low they may leave ``result``'s estimates; None if none was lost."""
    malformed = int(agg.malformed)
    lost, total = unopened + malformed, int(agg.messages) + malformed + unopened
    if not lost:
        return None
    worth = min(lost, reporters - 1, max(1, round(lost * reporters / total)))
    shift = None
    if worth >= 1:  # the estimates debiased as if that many whole reports were left out
        fewer, counted = _estimates(analyzer.finalize(agg, reporters=reporters - worth)), _estimates(result)
        common = counted.keys() & fewer.keys()
        shift = max((abs(fewer[k] - counted[k]) for k in common), default=None)
    return LostMessages(unopened, malformed, total, reporters, worth, shift)


def _estimates(result) -> dict:
    """A result's estimates by item (a frequency table, a heavy-hitter list) or coordinate (a vector sum)."""
    values = result.total if hasattr(result, "total") else result.estimates
    keys = getattr(result, "coordinates", None) if hasattr(result, "total") else getattr(result, "items", None)
    keys = range(len(values)) if keys is None else np.asarray(keys).tolist()
    return dict(zip(keys, np.asarray(values, dtype=np.float64).tolist()))
