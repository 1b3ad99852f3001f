"""DPDS and DPDG on a neighbour graph (issue 47): the degree k and threshold t_k a task would need for (n, the
colluding fraction, the dropout fraction, a failure probability), from :mod:`privagg.privacy.neighbour_graph`'s
bounds (docs/privacy.md, "Neighbour graphs"), and what each user and the server would send and store, from the
messages' sizes (:func:`privagg.protocols.sharing_messages.message_bytes`), against the complete graph the
protocol runs today (k = n - 1: :func:`privagg.protocols.sharing_messages.expected_traffic`'s entries)."""

from __future__ import annotations

from functools import lru_cache

from ..core.identity import KEY_BYTES as IDENTITY_BYTES
from ..errors import ParameterError
from ..privacy import neighbour_graph
from .parameters import honest_users
from .sampling_sharing import SharingParameters
from .sharing_messages import (ADVERTISE, BACKUP, COMMITMENT, COMPLAINTS, HEADER, MASKED_SUM, REVEAL, SIGNATURE,
                               USERS, message_bytes)

DEFAULT_FAILURE = 2.0 ** -40


def task_degree(parameters: SharingParameters) -> int:
    """The task's degree k: ``parameters.degree``, or n - 1 for the complete graph (degree None)."""
    return parameters.n_users - 1 if parameters.degree is None else parameters.degree


def planned_counts(parameters: SharingParameters) -> tuple[int, int]:
    """(C, D) the task's graph is planned for: the users who may not follow the protocol, n - ceil(G n), and the
    honest dropouts, floor(graph_dropouts n) (:func:`counted`)."""
    return counted(parameters, None, parameters.graph_dropouts)


def planned(parameters: SharingParameters) -> neighbour_graph.GraphGuarantee | None:
    """The guarantee of the task's neighbour graph at its C and D (:func:`planned_counts`): its threshold t_k and
    failure terms; None on the complete graph of degree None (today's protocol, its threshold
    :func:`privagg.protocols.sharing_parties.threshold`'s own rule). A ParameterError naming ``degree`` when no
    threshold makes the graph both private and live with probability above 0 (n <= 3 C + 2 D on the complete
    graph; a degree far too small)."""
    degree = getattr(parameters, "degree", None)  # parameters made before graphs (tests' namespaces) have none
    if degree is None:
        return None
    return _planned(parameters.n_users, *planned_counts(parameters), degree)


@lru_cache(maxsize=64)
def _planned(n_users: int, colluding: int, dropouts: int, degree: int) -> neighbour_graph.GraphGuarantee:
    found = neighbour_graph.guarantee(n_users, colluding, dropouts, degree)
    if found.failure >= 1:
        raise ParameterError("degree", f"a degree whose threshold keeps the release private and complete with some "
                             f"probability at n = {n_users}, C = {colluding} colluding, D = {dropouts} dropping out "
                             "(privagg calibrate dpds chooses one)", degree)
    return found


def traffic(parameters: SharingParameters, degree: int) -> dict[str, dict[str, dict[str, int]]]:
    """Per user, by kind, the entries (as :func:`expected_traffic` counts them), messages and bytes he sends and
    receives with k neighbours, every user surviving, as the parties send them (:mod:`privagg.protocols.
    sharing_parties`): his commitments to his k + 1 holders' shares (his neighbours and himself), a backup to each
    neighbour, his key (no complaints), masked sum, signature and a revealed share per holder-owner (his neighbours
    and himself); the graph's seed (round 1, a neighbour graph's), a commitment pair and a backup from each
    neighbour, the k + 1 keys of his neighbourhood, U1' and U2 as bitmaps of n bits in rounds 4 and 5 (n / 2 bytes
    in all), and the signatures and identity keys of the users within k places of him on the cycle (2 k + 1 of them:
    the holders of his neighbours' secrets). The messages as the wire
    has them (headers counted; the transport's signature on each and HTTP's framing not)."""
    n, k, holders, N = parameters.n_users, degree, degree + 1, parameters.domain_size
    signers = min(n, 2 * k + 1)
    seed = 0 if k == n - 1 else 1

    def size(kind: int, entries: int = 0) -> int:
        return message_bytes(parameters, kind, entries)

    commitments = HEADER.size + holders * (size(COMMITMENT) - HEADER.size)  # k + 1 pairs; n pairs when complete
    sent = {"commitments": (holders, 1, commitments), "backup": (2 * k, k, k * size(BACKUP)),
            "pair key": (1, 1, size(ADVERTISE) + size(COMPLAINTS)), "masked sum": (N, 1, size(MASKED_SUM)),
            "signature": (1, 1, size(SIGNATURE)), "revealed shares": (holders, 1, size(REVEAL, holders))}
    received = {"commitment": (2 * k, k, k * size(COMMITMENT)), "backup": (2 * k, k, k * size(BACKUP)),
                "pair key": (holders, holders, holders * (size(ADVERTISE) + size(COMPLAINTS))),  # as sent
                "signature": (signers, signers, signers * size(SIGNATURE)),
                "identity key": (signers, 0, signers * IDENTITY_BYTES)}
    if seed:  # and U1' and U2 in rounds 4 and 5 as bitmaps of n bits
        received["graph seed"] = (1, 0, neighbour_graph.SEED_BYTES)
        received["users"] = (4, 4, 4 * size(USERS))
    return {way: {kind: dict(zip(("entries", "messages", "bytes"), counts)) for kind, counts in table.items()}
            for way, table in (("sent", sent), ("received", received))}


def costs(parameters: SharingParameters, degree: int) -> dict[str, dict[str, int]]:
    """:func:`traffic`'s totals per user, and at the server: a row per message stored (each user's sent), the
    bytes it receives and relays (n times a user's sent and received)."""
    n, flows = parameters.n_users, traffic(parameters, degree)
    user = {f"{what}_{way}": sum(kind[what] for kind in flows[way].values())
            for way in ("sent", "received") for what in ("messages", "bytes")}
    return {"user": user, "server": {"rows": n * user["messages_sent"], "bytes_received": n * user["bytes_sent"],
                                     "bytes_relayed": n * user["bytes_received"]}}


def check_options(colluding: float | None, dropouts: float | None, failure: float) -> None:
    """The fractions in [0, 1), the failure probability in (0, 1)."""
    for field, value in (("colluding", colluding), ("dropouts", dropouts)):
        if value is not None and not 0 <= value < 1:
            raise ParameterError(field, "a fraction of the users in [0, 1)", value)
    neighbour_graph.check_failure(failure)


def counted(parameters: SharingParameters, colluding: float | None, dropouts: float | None) -> tuple[int, int]:
    """(C, D): the users who may collude with the server, n - ceil((1 - colluding) n), the count the task's honest
    fraction G = 1 - colluding gives the accountant (default: the task's own, n - ceil(G n)), refused when the
    two disagree; the dropouts, floor(dropouts n)."""
    n = parameters.n_users
    dishonest = n - parameters.honest_users
    if colluding is not None and n - honest_users(n, 1 - colluding) != dishonest:
        raise ParameterError("colluding", f"the task's 1 - honest fraction ({dishonest} of {n} users; give one of "
                             "--colluding and --honest-fraction, or both counting the same users)", colluding)
    return dishonest, neighbour_graph.dropouts_of(n, dropouts or 0.0)


def choose(parameters: SharingParameters, colluding: float | None = None, dropouts: float | None = None,
           failure: float = DEFAULT_FAILURE) -> tuple[neighbour_graph.GraphGuarantee, neighbour_graph.GraphGuarantee]:
    """The least degree meeting ``failure`` (:func:`privagg.privacy.neighbour_graph.least_degree`) and the complete
    graph, for the task's n and its colluding users (:func:`counted`)."""
    check_options(colluding, dropouts, failure)
    colluders, dropped = counted(parameters, colluding, dropouts)
    n = parameters.n_users
    if 3 * colluders + 2 * dropped >= n:  # (n + C) / 2 < t <= n - C - D needs n > 3 C + 2 D
        field = "dropouts" if dropped else "colluding" if colluding is not None else "honest-fraction"
        raise ParameterError(field,
                             f"fewer users colluding or dropping out: C colluding and D dropping out of n leave no "
                             f"threshold t with (n + C) / 2 < t <= n - C - D, even on the complete graph, unless "
                             f"n > 3 C + 2 D (here n = {n}, C = {colluders}, D = {dropped})",
                             {"dropouts": dropouts, "colluding": colluding,
                              "honest-fraction": parameters.honest_users / n}[field])
    return (neighbour_graph.least_degree(parameters.n_users, colluders, dropped, failure),
            neighbour_graph.complete_graph(parameters.n_users, colluders, dropped))


def assumptions(chosen: neighbour_graph.GraphGuarantee, failure: float) -> list[str]:
    """The guarantee's assumptions and what it promises, in words (docs/privacy.md, "Neighbour graphs")."""
    n, k, t = chosen.n_users, chosen.degree, chosen.threshold
    return [
        (f"the graph: complete (no sparser graph meets the target at n = {n}); " if chosen.complete else
         f"the graph: a Harary graph H({k}, {n}) (each user adjacent to the {k // 2} before and after him on a "
         "cycle) with the users in a uniformly random order drawn after every key is committed (from the seed the "
         "organisation draws when it signs the roster, after every user enrolled: not the server's; Bell et al. CCS "
         "2020, §3); ") +
        f"a user's secrets are shared among his {k} neighbours and himself, any {t} of them rebuild one",
        f"at most {chosen.colluding} users collude with the server, chosen before the order is drawn; at most "
        f"{chosen.dropouts} honest users drop out, independently of the order, for the release to be complete",
        f"with probability at least 1 - {failure:.3g} (a union bound of the terms; {chosen.failure:.3g} "
        f"computed): no honest user has {_most_colluding(chosen)} or more colluding neighbours"
        f"{'' if chosen.complete else ' on either side of him'} (so neither {t} "
        "colluding holders nor a server showing two survivor lists rebuilds both his secrets"
        + ("" if chosen.complete else f", and a server that declares any users dropped after seeing the graph "
           "cannot rebuild the mask seeds of a part of the honest survivors it cut off: the part's last member "
           f"before the cut has at most {k // 2 + 1} holders but his colluding neighbours (he and the {k // 2} on "
           f"the other side), and with them fewer than t_k = {t}") +
        f"), every user whose secret the release needs keeps {t} honest surviving holders, and the honest "
        "survivors' graph is connected",
        "a failure of the liveness term loses the release (nothing is released), never privacy; a failure of the "
        "others reveals a user's vector (collusion, equivocation) or the sum of each connected part of the honest "
        "survivors (a cut, connectivity)",
    ]


def _most_colluding(chosen: neighbour_graph.GraphGuarantee) -> int:
    """The fewest colluding neighbours of an honest user at which the guarantee fails: 2 t - k - 1 on the complete
    graph (equivocation, (d)), t - k / 2 - 1 on one side of him on a Harary graph (a cut, (e), which contains (d))."""
    t, k = chosen.threshold, chosen.degree
    return 2 * t - k - 1 if chosen.complete else t - k // 2 - 1


def stated(parameters, seed_digest: str = "") -> list[str]:
    """What a release or an audit of ``parameters`` states about its graph: nothing on the complete graph (degree
    None, or parameters of another family), else the graph's degree, threshold and seed's digest and
    :func:`assumptions` at the failure bound computed (docs/privacy.md, "Neighbour graphs")."""
    found = planned(parameters) if getattr(parameters, "degree", None) is not None else None  # any protocol's
    if found is None:
        return []
    seed = f", its order from the roster's seed (BLAKE2b digest {seed_digest})" if seed_digest else ""
    return [f"a neighbour graph of degree k = {found.degree}, threshold t_k = {found.threshold}{seed}; delta "
            f"includes its failure terms: a cut (e) {found.cut:.3g} (it contains equivocation (d) and collusion (a)) "
            "and disconnection (c) at the users removed"] + assumptions(found, found.failure)


def graph_delta(parameters, removed: int) -> float:
    """What a neighbour graph adds to a release's delta: (e) at the task's C (which contains (d) and (a)) and (c) at the
    ``removed`` users (C and the observed dropouts, disjoint in the worst case); 0 on the complete graph. Liveness
    (b) is no privacy term: the release happens or not."""
    found = planned(parameters) if getattr(parameters, "degree", None) is not None else None
    if found is None:
        return 0.0
    n = parameters.n_users
    return float(found.private + neighbour_graph.disconnection_bound(n, min(n, removed), found.degree))
