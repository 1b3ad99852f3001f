"""S2 of a TSS or TSS' task, sans I/O (:mod:`privagg.protocols.two_server_parties` has the users and S1; the
rounds and their derivation: docs/privacy.md, "Dropouts in TSS"; what S2 checks against a lying S1 or helper:
docs/privacy.md, "Dishonest parties"): the election it attests before any reporter shares, the helpers' sums it says do
not open when round 3 closes (their helpers are then recovered as dropped), S1's hand-over it checks, and the
release of the items' counts.
"""

from __future__ import annotations

import base64
import binascii
import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from ..core.messages import MessageBatch
from ..errors import ParameterError
from .results import FrequencyTable
from .sharing_parties import survivors_parameters, survivors_privacy as sharing_survivors_privacy
from .tss_parameters import TSSParameters
from .two_server_election import Election, attest, check_election
from .two_server_messages import RECOVERY, SHARES, SUMS, VERSION, check_min_survivors, decode


# --- S1 to S2 ----------------------------------------------------------------------------------------------


def asked_of(plan: Mapping[int, tuple]) -> dict[int, dict[int, list[int]]]:
    """reporter -> {item: the dropped helpers he is asked about}, given item -> (its dropped helpers, its R2
    reporters asked): S1's requests in round 4 and the pairs S2 opens each recovery with, one computation."""
    out: dict[int, dict[int, list[int]]] = {}
    for j, (dropped, reporters) in sorted(plan.items()):
        for reporter in reporters:
            out.setdefault(reporter, {})[j] = list(dropped)
    return out


@dataclass(frozen=True)
class Handover:
    """What S1 hands S2 once its rounds are done: the users (n enrolled, R1, R2), the election (each item's m_j
    and helpers) and each item's number of R2 reporters, the recovery of items with dropped helpers (item -> (the
    dropped helpers, the R2 reporters asked)), the messages sealed to S2: each helper's sums, each asked reporter's
    recovery, and the helpers whose sums S2 said do not open (``unopened``: treated as dropped, their sums left
    out). What lets S2 check that each sealed message is its sender's, and that each user of R2 did share (a
    service's, empty in a simulation): each one's signature by its sender as S1 stored it (``signatures``: (SUMS or
    RECOVERY, sender) -> signature; (SHARES, reporter) -> his signature of his round-2 post, which S1 keeps for each
    user of R2), S1's task as the organisation signed it (``task``: {"task", "signature"}) and its signed roster
    (``roster``)."""

    enrolled: int
    senders: tuple[int, ...]
    survivors: tuple[int, ...]
    counts: tuple[int, ...]
    helpers: tuple[tuple[int, ...], ...]
    reporters: tuple[int, ...]
    recovery: dict[int, tuple[tuple[int, ...], tuple[int, ...]]]
    sums: dict[int, bytes]
    recoveries: dict[int, bytes]
    unopened: tuple[int, ...] = ()
    signatures: dict[tuple[int, int], bytes] = dataclasses.field(default_factory=dict)
    unopened_sums: dict[int, bytes] = dataclasses.field(default_factory=dict)  # as their helpers sent them
    task: dict | None = None
    roster: dict | None = None

    @property
    def election(self) -> Election:
        return Election(self.senders, self.counts, self.helpers)

    def asked(self) -> dict[int, dict[int, list[int]]]:
        """What the recovery plan asks each reporter (:func:`asked_of`): what his recovery's seal binds, S2 opening
        it with these only."""
        return asked_of(self.recovery)

    def to_dict(self) -> dict:
        def b64(raw: bytes | None) -> str | None:
            return None if raw is None else base64.b64encode(raw).decode()

        return {"version": VERSION, "enrolled": self.enrolled, "senders": list(self.senders),
                "survivors": list(self.survivors), "counts": list(self.counts),
                "helpers": [list(h) for h in self.helpers], "reporters": list(self.reporters),
                "unopened": list(self.unopened),
                "recovery": [{"item": j, "dropped": list(d), "reporters": list(r)}
                             for j, (d, r) in sorted(self.recovery.items())],
                "sums": [{"helper": h, "sealed": b64(v), "signature": b64(self.signatures.get((SUMS, h)))}
                         for h, v in sorted(self.sums.items())],
                "recoveries": [{"reporter": i, "sealed": b64(v), "signature": b64(self.signatures.get((RECOVERY, i)))}
                               for i, v in sorted(self.recoveries.items())],
                "shared": [{"reporter": i, "signature": b64(self.signatures[SHARES, i])} for i in self.survivors
                           if (SHARES, i) in self.signatures],
                "unopened_sums": [{"helper": h, "sealed": b64(v), "signature": b64(self.signatures.get((SUMS, h)))}
                                  for h, v in sorted(self.unopened_sums.items())],
                "task": self.task, "roster": self.roster}

    @classmethod
    def from_dict(cls, data) -> "Handover":
        """A hand-over as S2 reads it: every field's type checked (a ParameterError names it); what the fields
        must say of each other is :meth:`SecondServer.check`'s."""

        def ints(value, field: str) -> tuple[int, ...]:
            if not isinstance(value, list) or not all(type(v) is int and v >= 0 for v in value):
                raise ParameterError(f"handover.{field}", "a list of integers >= 0", type(value).__name__)
            return tuple(value)

        def entries(value, field: str, keys: tuple[str, ...]) -> list[dict]:
            if not isinstance(value, list) or not all(isinstance(e, dict) and set(e) == set(keys) for e in value):
                raise ParameterError(f"handover.{field}", f"a list of {{{', '.join(keys)}}}", type(value).__name__)
            return value

        def sealed(value, field: str) -> bytes:
            try:
                return base64.b64decode(value, validate=True)
            except (binascii.Error, ValueError, TypeError):
                raise ParameterError(f"handover.{field}", "base64", type(value).__name__) from None

        fields = {"version", "enrolled", "senders", "survivors", "counts", "helpers", "reporters", "recovery", "sums",
                  "recoveries", "unopened", "task", "roster"}  # and "shared", "unopened_sums": not an older release's
        if not isinstance(data, dict) or set(data) - {"shared", "unopened_sums"} != fields or \
                data["version"] != VERSION:
            raise ParameterError("handover", f"a JSON object of the fields {sorted(fields)} (version {VERSION})",
                                 sorted(data) if isinstance(data, dict) else type(data).__name__)
        if type(data["enrolled"]) is not int:
            raise ParameterError("handover.enrolled", "an integer", data["enrolled"])
        if not isinstance(data["helpers"], list):
            raise ParameterError("handover.helpers", "a list of lists of users", type(data["helpers"]).__name__)
        for field in ("task", "roster"):
            if data[field] is not None and not isinstance(data[field], dict):
                raise ParameterError(f"handover.{field}", "a JSON object or null", type(data[field]).__name__)
        recovery, sums, recoveries, unopened_sums, signatures = {}, {}, {}, {}, {}
        for e in entries(data["recovery"], "recovery", ("item", "dropped", "reporters")):
            (item,) = ints([e["item"]], "recovery.item")
            if item in recovery:
                raise ParameterError("handover.recovery.item", "each item once", item)
            recovery[item] = (ints(e["dropped"], "recovery.dropped"), ints(e["reporters"], "recovery.reporters"))
        for field, key, out, kind in (("sums", "helper", sums, SUMS), ("recoveries", "reporter", recoveries, RECOVERY),
                                      ("unopened_sums", "helper", unopened_sums, SUMS)):
            for e in entries(data.get(field, []), field, (key, "sealed", "signature")):
                (user,) = ints([e[key]], f"{field}.{key}")
                if user in out:
                    raise ParameterError(f"handover.{field}.{key}", "each user once", user)
                out[user] = sealed(e["sealed"], f"{field}.sealed")
                if e["signature"] is not None:
                    signatures[kind, user] = sealed(e["signature"], f"{field}.signature")
        for e in entries(data.get("shared", []), "shared", ("reporter", "signature")):
            (user,) = ints([e["reporter"]], "shared.reporter")
            if (SHARES, user) in signatures:
                raise ParameterError("handover.shared.reporter", "each user once", user)
            signatures[SHARES, user] = sealed(e["signature"], "shared.signature")
        return cls(data["enrolled"], ints(data["senders"], "senders"), ints(data["survivors"], "survivors"),
                   ints(data["counts"], "counts"), tuple(ints(h, "helpers") for h in data["helpers"]),
                   ints(data["reporters"], "reporters"), recovery, sums, recoveries, ints(data["unopened"], "unopened"),
                   signatures, unopened_sums, data["task"], data["roster"])


# --- S2 ----------------------------------------------------------------------------------------------------


# What a TSS release trusts of each kind of party, as data (the release's ``trust``; derivations and the deviations
# behind each clause: docs/privacy.md, "Dishonest parties")
TRUST = {
    "S1": "privacy: learns the report sets (uniform stage: nothing of the data; adaptive: ln(gamma)-LDP) and relays "
          "sealed shares it cannot open; its election is attested by S2 before anyone shares (H_j: max(m_j, phi + 1) "
          "distinct users of R1, the m_j adding up to |R1| alpha N), but it chooses which users of R1 help and the m_j "
          "it reports. integrity: the helpers' sums and recovered shares it hands S2 are checked, each its sender's "
          "signature under the organisation's roster (a hand-over with one S1 swapped fails the task); the shares it "
          "relays are signed by their reporters and checked by the helpers, so it cannot inject one in a reporter's "
          "name; it may drop users and lose items, and is trusted not to choose the dropouts by the report sets; "
          "a reporter it counts for S2 but keeps from a "
          "helper is caught: each helper is shown R2 and refuses lists outside it or of fewer than "
          "m_j - (|R1| - |R2|) of an item's reporters, his seal binds R2 and his numbers of reporters, and S2 opens "
          "no sum before the R2 and |R_j| S1 names add up to |R2| alpha N, and holds the hand-over to them; every "
          "party refuses an election with an m_j below the floor m_min (uniform stage); a recovery it "
          "asked about other helpers than it hands over does not open for S2 (its seal binds them); must not "
          "collude with S2",
    "S2": "privacy: learns each item's count tau_j over R2 and m_j, never a reporter's share but those it recovers "
          "for a dropped helper (uniform; it opens a recovery only for the helpers its hand-over's plan asks "
          "about); it opens no sum before the R2 and |R_j| S1 names add up and every item with R2 reporters has a "
          "sum signed by one of its helpers, so a sum it opens counts every R2 reporter of its item, unless S1 "
          "chooses R2 by the report sets or uses the slack of D users out of R2 (dropped, or left out by S1) to "
          "short an item's lists (an item's count over as few as m_j - D reporters it chose: not detected before S2 "
          "opens them; docs/privacy.md, 'A helper's lists'): S1 is trusted not to; attests one election a task, "
          "only one that keeps the "
          "rules; must not collude with S1. "
          "integrity: trusted (it computes the release)",
    "helpers": "privacy: up to phi colluding users (with S1 or not) learn nothing of an entry (each item has at "
               "least phi + 1 helpers, one of them outside the coalition). integrity: trusted (a helper's sum is not "
               "verifiable without input proofs: a count outside [0, |R_j|] is refused, a wrong sum inside it is "
               "not detected); a sum S2 cannot open is treated as his dropout and his items recovered",
    "reporters": "integrity: trusted (an entry is not verifiable without input proofs: a reporter may share 1 for "
                 "an item he does not hold, caught only when the count leaves [0, |R_j|])",
}


def servers_notes(released: TSSParameters, removed: int) -> list[str]:
    """What a TSS release over ``released``'s users (the task's less the ``removed`` not in R2) assumes of its two
    servers: that they do not collude, and that S1 does not see it (at its delta against S1)."""
    p = released
    return ["S1 and S2 run as separate services with their own databases and keys, and must not collude: S1 knows "
            "every report set and relays every sealed share, S2 holds the key that opens the sums; together they could "
            "open what they relay",
            f"S1 must not see this release: knowing every report set, it would hold it at delta "
            f"{p.delta_against_first(p.epsilon):.3g} at eps = {p.epsilon:g} (the counts sampled at rate p among the "
            f"holders who put their item in their set, the {removed} users not in R2 counted as its choice among them; "
            "docs/privacy.md, 'The release and S1')"]


def survivors_privacy(task: TSSParameters, survivors: int, who: str, detail: str, notes=(), seed_digest: str = ""):
    """The guarantee of a TSS release over ``survivors`` of ``task``'s users (the round protocol's, a fast
    simulation's): the sharing family's (:func:`~privagg.protocols.sharing_parties.survivors_privacy`) with
    :func:`servers_notes`."""
    released = survivors_parameters(task, survivors)
    return sharing_survivors_privacy(task, survivors, who, detail,
                                     (*servers_notes(released, task.n_users - survivors), *notes), seed_digest)


@dataclass(frozen=True)
class TSSRelease:
    """What S2 releases: the estimates of the items it could complete (and their counts), over the |R2| users who
    took part; who took part; the items completed by recovery; the items lost, with why; the helpers whose sums
    did not open (recovered as dropped); the parameters with the guarantee recomputed for the participants; what
    it trusts of each party (:data:`TRUST`)."""

    table: FrequencyTable
    counts: np.ndarray  # tau_j, the field sums reconstructed, of the table's items
    enrolled: int  # n
    senders: int  # |R1|
    survivors: int  # |R2|
    recovered: tuple[int, ...]
    lost: dict[int, str]
    parameters: TSSParameters
    rows: MessageBatch  # what the counts add up: (item, helper sum or recovered share) rows of the released items
    unopened: tuple[int, ...] = ()  # helpers whose sums S2 could not open (blamed, recovered as dropped)
    trust: dict = dataclasses.field(default_factory=lambda: dict(TRUST))
    task: TSSParameters | None = None  # the task's parameters (default ``parameters``: nobody dropped out)

    @property
    def privacy(self):
        """The guarantee of this release (:func:`survivors_privacy`: the recomputed parameters' delta at the
        calibrated epsilon, what the two servers must not do), with who took part and what it completed."""
        notes = []
        if self.recovered:
            shown = ", ".join(map(str, self.recovered[:8])) + (", ..." if len(self.recovered) > 8 else "")
            notes.append(f"items [{shown}] ({len(self.recovered)} in all) were completed by recovery: S2 holds their "
                         "reporters' shares to the helpers that sent no sum, which are uniform while one helper's sum "
                         "hides the rest (docs/privacy.md, 'Dropouts in TSS')")
        if self.lost:
            notes.append(f"items {sorted(self.lost)[:8]} are not released: {self.lost[min(self.lost)]}")
        notes.append("integrity: each helper's sum and each reporter's entry is trusted (not verifiable without input "
                     "proofs; a count outside [0, |R_j|] is refused); the release's trust says what it trusts of "
                     "each party")
        return survivors_privacy(self.task or self.parameters, self.survivors, "users whose shares reached S1 (R2)",
                                 f"{self.senders} sent report sets", notes)


class SecondServer:
    """S2 of a TSS task: attests S1's election, says which helpers' sums do not open, checks what S1 hands over
    and releases the items' counts. It opens only what is sealed to it: helper sums and recovered shares.
    ``identity``: its Ed25519 private key for the task (to attest; a release needs none)."""

    def __init__(self, parameters: TSSParameters, min_survivors: int, identity: bytes | None = None) -> None:
        self.min_survivors = check_min_survivors(parameters, min_survivors)
        self.parameters, self.field, self.identity = parameters, parameters.field, identity

    def attest(self, election: Election) -> tuple[bytes, bytes]:
        """(its signature of ``election``, its public identity key) if the election keeps the rules
        (:func:`~privagg.protocols.two_server_election.check_election`), else a ParameterError naming the field."""
        from ..core.identity import public_key

        if self.identity is None:
            raise ParameterError("identity", "S2's identity key for the task (to attest an election)", None)
        return attest(self.parameters, election, self.min_survivors, self.identity), public_key(self.identity)

    def counted(self, election: Election, survivors, reporters, field: str = "handover") -> None:
        """R2 (``survivors``) and each item's number of R2 reporters (``reporters``: |R_j|) as S1 names them, held
        to the rules S2 checks before it opens any sum (as round 3 closes, the sums sealed binding them) and in the
        hand-over: R2 distinct users of R1, at least the task's minimum; |R_j| between m_j - (|R1| - |R2|) and
        min(|R2|, m_j), adding up to |R2| alpha N (each reporter reports alpha N items). A ParameterError names the
        field."""
        p, senders = self.parameters, set(election.senders)
        r2 = set(survivors)
        if len(r2) != len(survivors) or not r2 <= senders:
            raise ParameterError(f"{field}.survivors", "distinct round-1 senders", list(survivors)[:8])
        if len(r2) < self.min_survivors:
            raise ParameterError(f"{field}.survivors", f"at least {self.min_survivors} (the task's minimum)", len(r2))
        if len(reporters) != p.domain_size:
            raise ParameterError(f"{field}.reporters", f"one number of reporters for each of the N = {p.domain_size} "
                                 "items", len(reporters))
        absent = len(senders) - len(r2)
        for j, count in enumerate(election.counts):
            if not count - absent <= reporters[j] <= min(len(r2), count):
                raise ParameterError(f"{field}.reporters[{j}]", f"at most |R2| = {len(r2)} and m_j = {count}, at "
                                     f"least m_j - (|R1| - |R2|) = {count - absent} (R2's reporters of the item are "
                                     "R1's less those who missed round 2)", reporters[j])
        if sum(reporters) != len(r2) * p.report_size:
            raise ParameterError(f"{field}.reporters", f"|R2| alpha N = {len(r2) * p.report_size} in all (each "
                                 "reporter reports alpha N items)", sum(reporters))

    @staticmethod
    def backed(election: Election, posted, reporters) -> None:
        """Before S2 opens any sum as round 3 closes: every item with R2 reporters has a helper among those who
        ``posted`` a sum (signed by him, in a service). Else a ParameterError naming the item: S1 may have named an
        |R_j| above the item's true count, unbacked by any sum, as ballast for another item's short lists (a third
        review's attack: docs/privacy.md, "A helper's lists"); an honest run where all of an item's helpers left in
        round 3 fails too, as S2 cannot tell the two apart."""
        posted = set(posted)
        for j, helpers in enumerate(election.helpers):
            if reporters[j] and not posted & set(helpers):
                raise ParameterError(f"sums.items[{j}]", f"a sum from one of its helpers ({len(helpers)} of them; "
                                     f"|R_j| = {reporters[j]} named): S2 opens none while an item's |R_j| has no "
                                     "sum behind it", "none")

    def unopened(self, election: Election, sums: Mapping[int, bytes | None], survivors, reporters,
                 every: bool = True) -> list[int]:
        """When round 3 closes, given R2 and the |R_j| S1 names (:meth:`counted`'s rules, and :meth:`backed` when
        ``sums`` are every sum posted: a ParameterError otherwise): the helpers whose sum (its plaintext; None: it
        did not open) is not a sums message from him of exactly the items he serves. S1 treats them as dropped, so
        their items are recovered: S2 holds no sum of theirs, and learns of one only that it does not open (an HPKE
        ciphertext's validity)."""
        self.counted(election, survivors, reporters, "sums")
        if every:
            self.backed(election, sums, reporters)
        served = election.by_helper
        bad = []
        for helper, raw in sorted(sums.items()):
            try:
                if raw is None or helper not in served:
                    raise ParameterError("sums", "a sum that opens, from a helper", helper)
                decode(self.parameters, raw, SUMS, helper, items=served[helper])
            except ParameterError:
                bad.append(helper)
        return bad

    def check(self, handover: Handover) -> None:
        """The hand-over's fields said of each other: n enrolled; R2 within R1 within the roster, at least the
        task's minimum; N items, each with helpers from R1 (at least phi + 1 for TSS'); R2 reporters per item
        adding up to |R2| alpha N; recovery only of items with R2 reporters, of some but not all of their helpers,
        none of whom sent a sum, asked of exactly that many R2 reporters; sums only from helpers, recoveries
        only from asked reporters. A ParameterError names the field."""
        p, h = self.parameters, handover
        n, N = p.n_users, p.domain_size
        if h.enrolled != n:
            raise ParameterError("handover.enrolled", f"n = {n}", h.enrolled)
        senders, survivors = set(h.senders), set(h.survivors)
        if len(senders) != len(h.senders) or max(h.senders, default=0) >= n:
            raise ParameterError("handover.senders", f"distinct users in [0, {n})", list(h.senders)[:8])
        check_election(p, h.election, self.min_survivors, "handover")
        self.counted(h.election, h.survivors, h.reporters)
        helping = {u for helpers in h.helpers for u in helpers}
        if not set(h.sums) <= helping:
            raise ParameterError("handover.sums", "sums from elected helpers only", sorted(set(h.sums) - helping)[:8])
        if not set(h.unopened) <= helping or set(h.unopened) & set(h.sums) or len(set(h.unopened)) != len(h.unopened):
            raise ParameterError("handover.unopened", "distinct elected helpers whose sums the hand-over leaves out",
                                 list(h.unopened)[:8])
        asked = set()
        for j, (dropped, reporters) in h.recovery.items():
            if not j < N or not h.reporters[j]:
                raise ParameterError("handover.recovery.item", "an item with R2 reporters", j)
            helpers = set(h.helpers[j])
            if not dropped or not set(dropped) < helpers or len(set(dropped)) != len(dropped):
                raise ParameterError(f"handover.recovery[{j}].dropped", "some but not all of the item's helpers "
                                     "(shares to all of them would be a reporter's entry)", list(dropped)[:8])
            if set(dropped) & set(h.sums):
                raise ParameterError(f"handover.recovery[{j}].dropped", "helpers that sent no sum (S2 refuses to "
                                     "learn shares to a helper whose sum it holds)", sorted(set(dropped) & set(h.sums)))
            if len(set(reporters)) != h.reporters[j] or len(reporters) != h.reporters[j] or \
                    not set(reporters) <= survivors:
                raise ParameterError(f"handover.recovery[{j}].reporters", f"the item's {h.reporters[j]} R2 reporters",
                                     list(reporters)[:8])
            asked |= set(reporters)
        if not set(h.recoveries) <= asked:
            raise ParameterError("handover.recoveries", "recoveries from asked reporters only",
                                 sorted(set(h.recoveries) - asked)[:8])

    def release(self, handover: Handover, sums: Mapping[int, bytes] | None = None,
                recoveries: Mapping[int, bytes] | None = None, unopened: int = 0) -> TSSRelease:
        """Each item's count over R2: its helpers' sums, plus its R2 reporters' shares to the helpers that sent
        none (``sums`` and ``recoveries``: the plaintexts of the hand-over's sealed messages that opened, by
        default the hand-over's own, as a simulation moves them unsealed; ``unopened`` counts those that did not).
        An item with R2 reporters that misses a helper's sum not recovered, or an asked reporter's recovery, is
        lost; the others are released. Refused when every item is lost."""
        p, h, field = self.parameters, handover, self.field
        sums = h.sums if sums is None else sums
        recoveries = h.recoveries if recoveries is None else recoveries
        self.check(h)
        served = h.election.by_helper
        good_sums, summed, malformed = {}, {}, unopened
        for helper, raw in sums.items():
            try:
                message = decode(p, raw, SUMS, helper, items=served[helper])
            except ParameterError:
                malformed += 1
                continue
            good_sums[helper] = dict(zip(served[helper], message.values))
            summed[helper] = dict(zip(served[helper], message.counts.tolist()))
        wanted: dict[int, list[tuple[int, int]]] = {}
        for j, (dropped, reporters) in sorted(h.recovery.items()):
            for i in reporters:
                wanted.setdefault(i, []).extend((j, d) for d in dropped)
        good_recoveries: dict[int, dict[tuple[int, int], np.uint64]] = {}
        for reporter, raw in recoveries.items():
            pairs = sorted(wanted[reporter])
            try:
                message = decode(p, raw, RECOVERY, reporter, items=[j for j, _ in pairs], helpers=[d for _, d in pairs])
            except ParameterError:
                malformed += 1
                continue
            good_recoveries[reporter] = dict(zip(pairs, message.values))
        counts, released, recovered, lost = np.zeros(p.domain_size, dtype=np.uint64), [], [], {}
        rows: list[tuple[int, int]] = []  # what the released items' counts add up: (item, sum or recovered share)
        for j, helpers in enumerate(h.helpers):
            total, missing = np.uint64(0), [d for d in helpers if d not in good_sums]
            added = [(j, int(good_sums[helper][j])) for helper in helpers if helper in good_sums]
            for _, value in added:
                total = field.add(total, np.uint64(value))
            disagree = sorted(helper for helper in helpers if helper in summed and summed[helper][j] != h.reporters[j])
            if disagree:
                lost[j] = (f"helpers {disagree[:5]} summed the shares of other than its {h.reporters[j]} R2 reporters "
                           "S1 counts: S1 listed other reporters to them (or they lie), and S2 cannot tell which")
                continue
            if missing and h.reporters[j]:
                dropped, reporters = h.recovery.get(j, ((), ()))
                if len(missing) == len(helpers):
                    lost[j] = ("every helper of the item sent no sum (recovering them would reveal each reporter's "
                               "entry)")
                    continue
                if set(missing) != set(dropped):
                    lost[j] = (f"helpers {sorted(set(missing) - set(dropped))[:5]} sent no usable sum and were not "
                               "recovered")
                    continue
                absent = [i for i in reporters if i not in good_recoveries]
                if absent:
                    lost[j] = (f"{len(absent)} of its {len(reporters)} reporters sent no usable recovery (e.g. user "
                               f"{absent[0]}; or S1 asked him about other helpers than it handed over, whose recovery "
                               "S2 cannot open): a reporter's entry cannot be taken out of the other helpers' sums")
                    continue
                for i in reporters:
                    for d in dropped:
                        total = field.add(total, good_recoveries[i][(j, d)])
                        added.append((j, int(good_recoveries[i][(j, d)])))
            if int(total) > h.reporters[j]:  # tau_j counts 0/1 entries of the item's R2 reporters
                lost[j] = (f"its count is outside [0, {h.reporters[j]}] (its R2 reporters): a helper's sum, a "
                           "recovered share or a reporter's shares are wrong, and S2 cannot tell whose")
                continue
            if missing and h.reporters[j]:
                recovered.append(j)
            counts[j] = total
            released.append(j)
            rows += added
        chosen = np.array(released, dtype=np.int64)
        if not chosen.size:
            raise ParameterError("items", "at least one item whose count could be completed", f"all {len(lost)} "
                                 f"lost, e.g. item {min(lost)}: {lost[min(lost)]}")
        recomputed = survivors_parameters(p, len(h.survivors))
        whole = chosen.size == p.domain_size
        table = FrequencyTable(recomputed, recomputed.estimate(counts[chosen]), None if whole else chosen,
                               messages=sum(len(s) for s in good_sums.values()) +
                               sum(len(r) for r in good_recoveries.values()), malformed=malformed)
        folded = np.array(rows, dtype=np.int64).reshape(-1, 2)
        return TSSRelease(table, counts[chosen], h.enrolled, len(h.senders), len(h.survivors), tuple(recovered),
                          lost, recomputed, recomputed.layout.batch({"item": folded[:, 0], "share": folded[:, 1]}),
                          h.unopened, task=p)


