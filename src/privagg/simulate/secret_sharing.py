"""The runners of the secret-sharing topologies: every party of DPDS / DPDG (``secret_sharing``) and of TSS / TSS'
(``two_servers``) played in-process, with what each kind of party sent, received and computed.

``secret_sharing`` (DPDS, DPDG; Algorithm 2)
    Users make their vectors (:meth:`SharingUsers.contributions`) and share
    them among all n users, a block of senders at a time: each block's
    shares (n x block x N) are added into the n partial sums at once and
    dropped, so memory is O(n N) (the partial sums plus one block), never
    n x n x N. Blocks are shared out between two threads (numpy's bounded
    integer sampler releases the GIL), each with its own generator spawned
    from the users' stream. Each user forwards his partial sum to the
    server, which reconstructs.
``two_servers`` (TSS, TSS'; Algorithm 3)
    Users draw their coin and report set; S1 counts m_j and elects helpers;
    item by item, the reporters' entries are shared among the item's
    helpers (m_j x m'_j shares), the helpers sum and forward to S2.

Counts in the transcript are of the arrays the parties really made and
exchanged (field elements, uniform samples, field additions), per kind of
party, summed over the parties of that kind (``parties`` says how many).
Faithful runs draw every share; the fast path
(:func:`privagg.protocols.sampling_sharing.fast_aggregate`) skips the sharing, which reconstructs exactly, and
draws what the server would reconstruct.
"""

from __future__ import annotations

import math
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from ..core.messages import MessageBatch
from ..core.randomness import streams
from ..core.sharing import SEED_BYTES
from ..errors import ParameterError
from ..protocols.sampling_sharing import (REPORT_KEYS_ELEMENTS, DPDGParameters, ElectionServer, SharingUsers,
                                          TSSParameters, TSSUsers)
from .progress import Progress

SHARES_MAX = 2**33  # share elements one faithful run may draw (about a minute and a half at 10^8 per second)
EXPANSIONS_MAX = 2**20  # seeds one faithful run may expand (about 2 minutes at ~100 us a ChaCha20 expansion)
BLOCK_ELEMENTS = 1 << 22  # share elements per block of senders: bounds the sharing's scratch (32 MiB in uint64)
THREADS = 2


def share_elements(parameters) -> float:
    """The uniform share elements a faithful run draws: n (n - 1) N (DPDS, DPDG); about sum_j m_j (m'_j - 1)
    with m_j ~ alpha n (TSS)."""
    n, N = parameters.n_users, parameters.domain_size
    if isinstance(parameters, TSSParameters):
        return parameters.expected_shares - n * parameters.report_size
    return float(n) * (n - 1) * N


def check_faithful(parameters) -> None:
    if parameters.share_encoding == "seeds" and parameters.n_users * (parameters.n_users - 1) > EXPANSIONS_MAX:
        raise ParameterError("mode", f"fast for this size with --share-encoding seeds: a faithful run expands "
                             f"n (n - 1) = {parameters.n_users * (parameters.n_users - 1):.3g} seeds, above "
                             f"2^{EXPANSIONS_MAX.bit_length() - 1} (or send elements)", "faithful")
    work = share_elements(parameters)
    if work > SHARES_MAX:
        raise ParameterError("mode", f"fast for this size: a faithful run draws about {work:.3g} share elements, "
                             f"above 2^{SHARES_MAX.bit_length() - 1} (--mode fast skips the sharing, which "
                             "reconstructs exactly)", "faithful")


def sharing_bytes(parameters, mode: str) -> int:
    """About the peak memory of a run besides the users' codes: the partial sums (n x N in uint64), the blocks
    in flight, the server's rows (faithful DPDS, DPDG); the report sets and one item's shares (TSS)."""
    n, N = parameters.n_users, parameters.domain_size
    if mode == "fast":
        return 16 * N + 9 * n
    if isinstance(parameters, TSSParameters):  # report sets, their sort, one chunk of keys, one item's shares
        size = parameters.report_size
        shares = 8 * math.ceil(parameters.expected_shares / N)
        return 24 * n * size + 16 * REPORT_KEYS_ELEMENTS + THREADS * 2 * shares + 24 * int(parameters.expected_helpers)
    return 8 * n * N * 3 + THREADS * 2 * 8 * BLOCK_ELEMENTS


def _senders_per_block(n_users: int, domain_size: int) -> int:
    return max(1, BLOCK_ELEMENTS // (n_users * domain_size))


def run_secret_sharing(parameters, codes: np.ndarray, rng: np.random.Generator,
                       progress: Progress | None = None) -> tuple[MessageBatch, dict[str, dict[str, int]]]:
    """DPDS / DPDG through the users: (what the server receives, the users' transcript). The harness moves each
    block of senders' shares to their recipients (:meth:`SharingUsers.receive`) and their sums to the server."""
    users, field = SharingUsers(parameters), parameters.field
    n, N = parameters.n_users, parameters.domain_size
    block = _senders_per_block(n, N)
    starts = list(range(0, n, block))
    generators = list(streams(rng, [f"sharing-{i}" for i in range(THREADS)]).values())

    element = -(-math.ceil(math.log2(parameters.modulus)) // 8)  # bytes of one field element on the wire

    def wire_bytes(sender: int) -> int:
        """What ``sender`` sends the other users: n - 1 shares of N elements, or seeds and the correction
        share (kept by the last user, who sends only seeds)."""
        if parameters.share_encoding == "elements":
            return (n - 1) * N * element
        return (n - 1) * SEED_BYTES if sender == n - 1 else (n - 2) * SEED_BYTES + N * element

    def work(part: int) -> tuple[np.ndarray, dict[str, int]]:
        received, gen = np.zeros((n, N), dtype=np.uint64), generators[part]
        counts = dict.fromkeys(("sent", "kept", "uniform_samples", "bytes_sent"), 0)
        for lo in starts[part::THREADS]:
            shares = users.share(users.contributions(codes[lo:lo + block], gen), gen)  # (n, senders, N)
            received = users.receive(received, shares)
            senders = shares.shape[1]
            counts["kept"] += senders * N  # each sender's own row
            counts["sent"] += shares.size - senders * N
            counts["uniform_samples"] += shares[:-1].size  # the correction row is computed, not drawn
            counts["bytes_sent"] += sum(wire_bytes(i) for i in range(lo, lo + senders))
            if progress:
                progress("share", senders, n)
        return received, counts

    with ThreadPoolExecutor(THREADS) as pool:
        done = list(pool.map(work, range(THREADS)))
    received = field.sum(np.stack([r for r, _ in done]), axis=0)
    user = {key: sum(c[key] for _, c in done) for key in done[0][1]}
    rows = users.forward(received)
    user["sent"] += len(rows)  # each user's partial sum to the server
    user["bytes_sent"] += len(rows) * element
    own = ({"noise_samples": n * N} if isinstance(parameters, DPDGParameters) else {"bernoulli_samples": n})
    # additions: each sender's correction share sums his n - 1 uniform shares; each recipient sums n shares
    return rows, {"user": {"parties": n, "received": user["sent"] - len(rows), **user,
                           "field_additions": user["uniform_samples"] + n * (n - 1) * N, **own}}


def run_two_servers(parameters: TSSParameters, codes: np.ndarray, rngs: dict[str, np.random.Generator],
                    progress: Progress | None = None) -> tuple[MessageBatch, dict[str, dict[str, int]]]:
    """TSS / TSS' through the users, S1 and the helpers: (what S2 receives, their transcript).

    Items are shared out between two threads, each with its own generator from the users' stream.
    """
    n, N = parameters.n_users, parameters.domain_size
    users = TSSUsers(parameters)
    coins, reports = users.first_stage(codes, rngs["users"])
    counts, helpers = ElectionServer(parameters).elect(reports, rngs["s1"])
    # reporters of item j: users whose set holds j; their entry is the coin if they hold j
    order = np.argsort(reports.ravel(), kind="stable")
    reporters = np.split(order // reports.shape[1], np.cumsum(counts)[:-1])
    generators = list(streams(rngs["users"], [f"sharing-{i}" for i in range(THREADS)]).values())

    def work(part: int) -> tuple[list[np.ndarray], list[np.ndarray]]:
        items, sums = [], []
        for j in range(part, N, THREADS):
            holders, size = reporters[j], helpers[j].size
            if size:  # (helpers, reporters) shares; each helper sums his row and forwards it to S2
                entries = users.entries(coins, codes, holders, j)
                sums.append(users.helper_sums(users.share_entries(entries, size, generators[part])))
            items.append(np.full(size, j))
            if progress:
                progress("share", 1, N)
        return items, sums

    with ThreadPoolExecutor(THREADS) as pool:
        done = list(pool.map(work, range(THREADS)))
    rows = parameters.layout.batch({"item": np.concatenate([a for items, _ in done for a in items]),
                                    "share": np.concatenate([a for _, sums in done for a in sums] or
                                                            [np.empty(0, dtype=np.uint64)])})
    sizes = np.array([h.size for h in helpers])
    elements, helper_rows = int(counts @ sizes), int(sizes.sum())
    uniform = elements - int(counts[sizes > 0].sum())  # m_j (m'_j - 1): the correction share is computed
    additions = uniform + elements - int(sizes[counts > 0].sum())  # corrections, and each helper's sum of m_j
    return rows, {
        "user": {"parties": n, "indices_to_s1": int(reports.size), "sent": elements, "received": elements,
                 "to_s2": helper_rows, "uniform_samples": uniform, "field_additions": additions,
                 # the coin, and under the adaptive stage the coin for the own item's inclusion
                 "bernoulli_samples": n * (2 if parameters.second_stage == "adaptive" else 1)},
        "s1": {"parties": 1, "received": int(reports.size), "published": helper_rows, "samples": helper_rows}}
