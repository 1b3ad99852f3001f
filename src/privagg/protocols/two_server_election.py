"""TSS's election as S2 checks and attests it, and as a reporter checks S2's attestation (issue 46; derivation and
the deviations it stops: docs/privacy.md, "Dishonest parties").

S1 elects each item's helpers among R1 (:meth:`~privagg.protocols.two_server_parties.FirstServer.elect`) and, before
any reporter shares, hands S2 the election: R1, m_j per item (what the paper's S2 learns) and H_j per item. S2
checks the rules any honest election keeps (:func:`check_election`: H_j is max(m_j, phi + 1) distinct users of R1
(m_j for TSS), the m_j add up to |R1| alpha N, R1 at least the task's minimum) and signs the election's canonical
document with its Ed25519 identity key for the task (:func:`attest`; its public key is in the task document the
users hold). A reporter shares only along an election S2 attested (:func:`check_attested`), in which he is in R1
and each of his items has at least max(1, phi + 1) helpers; S2 checks the hand-over's election by the same rules.
S1 alone can therefore no longer name one helper for every item (the m_j would not add up, or H_j would not match
them); it still chooses WHICH users of R1 help, which the guarantee against phi colluding users allows.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

from ..core import identity
from ..errors import ParameterError
from .roles import parameters_fingerprint

CONTEXT = b"privagg tss election"  # what S2's signature is for; the task is bound by S2's per-task key
ELECTION_FAILURE = 1e-9  # the chance that an honest uniform-stage election breaks the floor on the m_j (refused)


@dataclass(frozen=True)
class Election:
    """S1's election: R1 (ascending), m_j over R1, and H_j (ascending roster indices) for every item."""

    senders: tuple[int, ...]
    counts: tuple[int, ...]
    helpers: tuple[tuple[int, ...], ...]

    @functools.cached_property
    def by_helper(self) -> dict[int, list[int]]:
        """helper -> the items he serves, ascending."""
        out: dict[int, list[int]] = {}
        for j, helpers in enumerate(self.helpers):
            for h in helpers:
                out.setdefault(h, []).append(j)
        return out

    def to_dict(self) -> dict:
        return {"senders": list(self.senders), "counts": list(self.counts), "helpers": [list(h) for h in self.helpers]}

    @classmethod
    def from_dict(cls, data, field: str = "election") -> "Election":
        """An election from :meth:`to_dict`'s JSON, every field's type checked (a ParameterError names it)."""

        def ints(value, name: str) -> tuple[int, ...]:
            if not isinstance(value, list) or not all(type(v) is int and v >= 0 for v in value):
                raise ParameterError(f"{field}.{name}", "a list of integers >= 0", type(value).__name__)
            return tuple(value)

        if not isinstance(data, dict) or set(data) != {"senders", "counts", "helpers"} or not isinstance(
                data["helpers"], list):
            raise ParameterError(field, "a JSON object of senders, counts and helpers (lists)",
                                 sorted(data) if isinstance(data, dict) else type(data).__name__)
        return cls(ints(data["senders"], "senders"), ints(data["counts"], "counts"),
                   tuple(ints(h, f"helpers[{j}]") for j, h in enumerate(data["helpers"])))

    def document(self, parameters) -> bytes:
        """The bytes S2 signs: the election and the task's parameters (their fingerprint), canonical JSON."""
        return identity.canonical({"parameters": parameters_fingerprint(parameters), **self.to_dict()})


def least_reporters(parameters, senders: int) -> int:
    """The floor on every m_j of an election over |R1| = ``senders`` users (docs/privacy.md, "A helper's lists"). In
    the uniform stage each user's set holds each item with probability alpha, and users draw their sets apart, so
    m_j ~ Bin(|R1|, alpha): the floor is the largest g with N Pr[Bin(|R1|, alpha) < g] <= ELECTION_FAILURE (a union
    bound over the N items), so that an honest election breaks it with probability at most that. Its lower tail in
    log space, term by term (no scipy: a reporter checks it too). The adaptive stage's m_j move with the data: no
    floor (0). The m_j are S1's word; the floor bounds how few reporters it can claim."""
    p, n = parameters, senders
    if p.second_stage != "uniform":
        return 0
    if p.report_fraction >= 1:  # every user reports every item
        return n
    target = math.log(ELECTION_FAILURE / p.domain_size)
    log_q, log_r, top = math.log(p.report_fraction), math.log1p(-p.report_fraction), math.lgamma(n + 1)
    tail = -math.inf  # log Pr[Bin(n, alpha) <= k]
    for k in range(n + 1):
        term = top - math.lgamma(k + 1) - math.lgamma(n - k + 1) + k * log_q + (n - k) * log_r
        tail = max(tail, term) + math.log1p(math.exp(-abs(tail - term))) if tail > -math.inf else term
        if tail > target:
            return k
    return n


def check_election(parameters, election: Election, min_survivors: int, field: str = "election") -> None:
    """The rules every honest election keeps, as S2 checks them before attesting and at the hand-over: R1 distinct
    users of the n, at least ``min_survivors``; one m_j per item, each at most |R1| and at least
    :func:`least_reporters`, adding up to |R1| alpha N (each sender reported alpha N items); H_j max(m_j, phi + 1)
    distinct users of R1 (m_j for TSS, phi = 0). A ParameterError names the field."""
    p, e = parameters, election
    n, N, phi = p.n_users, p.domain_size, p.colluders
    senders = set(e.senders)
    if len(senders) != len(e.senders) or max(e.senders, default=0) >= n:
        raise ParameterError(f"{field}.senders", f"distinct users in [0, {n})", list(e.senders)[:8])
    if len(senders) < min_survivors:
        raise ParameterError(f"{field}.senders", f"at least {min_survivors} (the task's minimum)", len(senders))
    if len(e.counts) != N or len(e.helpers) != N:
        raise ParameterError(f"{field}.helpers", f"one count m_j and one list of helpers for each of the N = {N} items",
                             f"{len(e.counts)} and {len(e.helpers)}")
    if max(e.counts) > len(senders) or sum(e.counts) != len(senders) * p.report_size:
        raise ParameterError(f"{field}.counts", f"m_j of at most |R1| = {len(senders)} each, |R1| alpha N = "
                             f"{len(senders) * p.report_size} in all (each sender reported alpha N items)",
                             f"{max(e.counts)} at most, {sum(e.counts)} in all")
    least = least_reporters(p, len(senders))
    if min(e.counts) < least:
        raise ParameterError(f"{field}.counts", f"m_j of at least {least} each (m_j ~ Bin(|R1| = {len(senders)}, "
                             f"alpha = {p.report_fraction:g}) in the uniform stage: below it with probability at most "
                             f"{ELECTION_FAILURE:g} an election; S1 claiming fewer could have helpers sum fewer "
                             "reporters)", min(e.counts))
    for j, (count, helpers) in enumerate(zip(e.counts, e.helpers)):
        size = max(count, phi + 1) if phi else count
        if len(helpers) != size or len(set(helpers)) != size or not set(helpers) <= senders:
            raise ParameterError(f"{field}.helpers[{j}]", f"max(m_j, phi + 1) = {size} distinct users of R1 (m_j = "
                                 f"{count}, phi = {phi})", list(helpers)[:8])


def attest(parameters, election: Election, min_survivors: int, key: bytes) -> bytes:
    """S2's attestation of ``election`` (:func:`check_election` first; a ParameterError if it breaks a rule): its
    Ed25519 signature, with its identity key ``key`` for the task, of :meth:`Election.document`."""
    check_election(parameters, election, min_survivors)
    return identity.sign(key, CONTEXT, election.document(parameters))


def raw_bytes(value, field: str, size: int) -> bytes:
    """``value``, bytes as an inbox carries them (a list of ``size`` integers in [0, 256)), as bytes; else a
    ParameterError naming ``field``."""
    if isinstance(value, (bytes, bytearray)):
        value = list(value)
    if not isinstance(value, list) or len(value) != size or not all(type(b) is int and 0 <= b < 256 for b in value):
        raise ParameterError(field, f"{size} bytes (a list of integers in [0, 256))", type(value).__name__)
    return bytes(value)


def as_inbox(election: Election, signature: bytes, key: bytes) -> dict:
    """What a reporter's round-2 inbox carries: the election as lists (R1, the m_j, the H_j), S2's signature and S2's
    identity key as lists of byte values (an inbox's bytes are protocol messages)."""
    return {"election": [list(election.senders), list(election.counts), [list(h) for h in election.helpers]],
            "attestation": list(signature), "second": list(key)}


def check_attested(parameters, election, signature, second, min_survivors: int) -> Election:
    """The election of a round-2 inbox (:func:`as_inbox`'s lists) if ``signature`` is S2's (public identity key
    ``second``) over its document for these parameters, and it keeps :func:`check_election`'s rules; else a
    ParameterError naming ``election``, ``attestation`` or ``second``."""
    if not isinstance(election, list) or len(election) != 3:
        raise ParameterError("election", "R1, the counts m_j and the helpers H_j (three lists)",
                             type(election).__name__)
    elected = Election.from_dict(dict(zip(("senders", "counts", "helpers"), election)))
    identity.check(raw_bytes(second, "second", identity.KEY_BYTES), raw_bytes(
        signature, "attestation", identity.SIGNATURE_BYTES), CONTEXT, elected.document(parameters), "attestation",
        "S2 (its identity key in the task) over this election")
    check_election(parameters, elected, min_survivors)
    return elected
