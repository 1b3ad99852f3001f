"""One simulator for every protocol: users' values through the parties of the protocol's topology.

The runner knows topologies, not protocols: it reads the protocol's
registry entry for its roles and plays every party in-process, as the VDAF
reference's ``run_vdaf`` does. Each role draws from its own stream,
spawned by role name (:func:`privagg.core.randomness.streams`).

``faithful``
    The real role code: the clients' randomizers (in batches of about
    MESSAGES_PER_BATCH messages), the shuffler's uniform permutation
    (shuffle topology), then the analyzer's ``agg_update`` and
    ``finalize``. The permutation is left out where no one sees the order
    it makes: the messages are not kept, and the analyzer declares
    (``order_free``) that its aggregate is a function of the multiset of
    messages (sums and counts), so the release is the same bits either way
    and the shuffler's stream is its own (it shifts no other role's draws);
    the transcript still shows the shuffler passing every message on; in the central topology the users' values go to the
    curator, which adds the noise. A multi-round protocol (the entry's
    ``rounds``, a :class:`~privagg.protocols.roles.MultiRound`) runs its
    deployed parties round by round (:mod:`privagg.simulate.rounds`), users
    dropping out where ``dropouts`` says.
``fast``
    The entry's distributional shortcut (``fast``), e.g. the total dummy
    count drawn in one step and no shuffle, since the analyzer's counts do
    not depend on message order; a multi-round protocol's release, exact
    over its survivors, is drawn from its law (the survivors' sampled or
    noised counts). Tests check that both paths give the same
    distribution of estimates. Protocols without a shortcut run faithfully
    (and the run's ``mode`` says ``faithful``).

Every run records a transcript -- what each kind of party sent and
received -- and the seconds each role took.

Memory: a faithful run holds its population of messages once, row-major in
the layout's compact dtypes (12 bytes a message for FE1 at B = 2^24): the
clients write into one preallocated buffer, the shuffler permutes its rows
in place, and the analyzer folds it a slice at a time.
:func:`simulation_bytes` estimates the peak, so that a run which cannot fit
is refused before its input is read.
"""

from __future__ import annotations

import math
import time
from collections import deque
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..core.messages import SLICE_ROWS, MessageBatch, shuffle
from ..core.randomness import RNGLike, describe, is_secure, streams
from ..errors import ParameterError, check_callable, checked_arguments, kind_of
from ..privacy.description import PrivacyDescription
from ..protocols.kinds import Family, Topology
from ..protocols.parameters import check_parameters
from ..protocols.registry import get
from ..protocols.results import FrequencyTable
from ..protocols.roles import RoundFailed
from .progress import Progress
from .rounds import check_dropouts, check_faithful, run_rounds, survivors

MODES = ("faithful", "fast")
MESSAGES_PER_BATCH = 1 << 18  # about this many messages per batch of clients: bounds the clients' scratch
MARGIN_SD = 8  # the clients' message buffer holds the expected total plus this many standard deviations
MESSAGES_MAX = 2**27  # expected messages n (1 + rho) one simulated run may hold in memory
# expected messages the fast path may draw and count (a slice at a time, so memory is not the limit, time is):
# about 35 s at the 3 10^7 a second measured for fe0's (1.46 10^9 messages at n = 10^5, B = 2^24: 51 s, silent;
# at B = 2^28 it ran past a minute)
FAST_MESSAGES_MAX = 2**30
WORKERS = 2  # threads computing clients' messages where their draws come apart (_run_drawn_clients)
ROLES = {Topology.SHUFFLE: ("clients", "shuffler"), Topology.LOCAL: ("clients",), Topology.CENTRAL: ("curator",),
         Topology.SECRET_SHARING: ("users", "server", "identities"),
         Topology.TWO_SERVERS: ("users", "server", "identities")}


@dataclass
class SimulationRun:
    """What one simulated run produced, what each party sent and received, and what it cost."""

    result: Any
    mode: str
    randomness: str
    privacy: PrivacyDescription  # the parameters' guarantee, marked not private for seeded or fast runs
    transcript: dict[str, dict[str, int]]
    seconds: dict[str, float] = field(default_factory=dict)
    messages: MessageBatch | None = None  # what the analyzer received, when asked to keep it

    @property
    def _aggregator(self) -> dict[str, int]:
        """The transcript of the party that aggregates: analyzer, curator, server (DPDS) or S2 (TSS)."""
        return next(self.transcript[k] for k in ("analyzer", "curator", "server", "s2") if k in self.transcript)

    @property
    def messages_total(self) -> int:
        """What the party that aggregates (analyzer or curator) received."""
        return self._aggregator["received"]

    @property
    def malformed(self) -> int:
        return self._aggregator["malformed"]

    @property
    def messages_per_user(self) -> float:
        return self.messages_total / self.result.parameters.n_users


def run_mode(parameters, mode: str) -> str:
    """The mode a run of ``parameters`` really takes: ``mode``, or faithful where the protocol has no shortcut."""
    if mode not in MODES:
        raise ParameterError("mode", f"one of {', '.join(MODES)}", mode)
    return mode if get(parameters.protocol).fast is not None else "faithful"


def check_size(parameters, mode: str, given: dict[str, Any] | None = None) -> None:
    """Refuse a faithful run whose n (1 + rho) messages exceed MESSAGES_MAX, naming the option to change
    (one the user gave, ``given``, where one sets the noise)."""
    mode = run_mode(parameters, mode)
    entry = get(parameters.protocol)
    if entry.family is Family.SAMPLING_SHARING:  # a multi-round run is costed by its rounds (check_faithful, when
        return  # simulate knows the users it runs: a weighted estimate's groups), not its messages
    expected = expected_messages(parameters)
    if mode == "faithful" and expected > MESSAGES_MAX:
        field, remedy = shrink_hint(parameters, mode, given or {})
        raise ParameterError(field, f"set so that a faithful simulation's n x messages per user = {expected:.3g} "
                             f"messages stay below 2^{MESSAGES_MAX.bit_length() - 1}: {remedy}",
                             option_value(parameters, field, given or {}))
    if mode == "fast" and expected > FAST_MESSAGES_MAX:
        field, remedy = shrink_hint(parameters, mode, given or {})
        raise ParameterError(field, f"set so that the fast path's n x messages per user = {expected:.3g} messages "
                             f"stay below 2^{FAST_MESSAGES_MAX.bit_length() - 1} (more than half a minute): {remedy}",
                             option_value(parameters, field, given or {}))


def expected_messages(parameters) -> float:
    """The messages a run makes: real values and noise, whoever adds the noise (not the sharing protocols)."""
    entry = get(parameters.protocol)
    return parameters.n_users * (1 + parameters.rho if entry.trusted_curator else parameters.messages_per_user)


# A faithful simulation's seconds per message, clients to analyzer (sparse-vector at n = 3 over 2^20 coordinates:
# 9.2e7 messages, nearly all dummies, in 72 s on 2 cores at load average 4 to 8)
MESSAGE_SECONDS = 8e-7
# The fast path's: it draws the dummies' total in one step but still makes and counts every dummy (n = 3, on 2
# cores at load average 2.5: fe0 over 2^20 items 8e7 messages in 2.0 s, sparse-vector 8e7 in 0.8 s, fe1's hashed
# dummies 5e6 in 0.76 s, 1.5e-7 each; fe0 over 2^20 took 5.7 s at load average 5)
FAST_MESSAGE_SECONDS = 1e-7


def check_cost(parameters, mode: str, given: dict[str, Any] | None = None) -> None:
    """Refuse, before any message is made, a run whose messages would take longer than a run of its n users may by
    default (:func:`privagg.protocols.registry.run_budget`): dummies that grow with the domain, not the users
    (FE0's mu B, sparse-vector's mu (B k + 1)), make a handful of users' run as long as 10^5 users', on the fast
    path too, which makes every dummy. The error names what shrinks them (:func:`shrink_hint`: a smaller domain,
    or --mode fast for a faithful run)."""
    from ..protocols.registry import run_budget

    mode = run_mode(parameters, mode)
    if get(parameters.protocol).family is Family.SAMPLING_SHARING:  # the fast path draws the sums, the faithful
        return  # one is held to its budget by check_faithful
    expected = expected_messages(parameters)
    seconds = expected * (MESSAGE_SECONDS if mode == "faithful" else FAST_MESSAGE_SECONDS)
    if seconds <= run_budget(parameters.n_users):
        return
    field, remedy = shrink_hint(parameters, mode, given or {})
    raise ParameterError(field, f"set so that a {mode} simulation of {parameters.n_users:,} users takes about a "
                         f"second, or 10 ms a user: {parameters.protocol} would send {expected:.3g} messages "
                         f"({parameters.messages_per_user:.3g} a user, about {seconds:.2g} s), dummies whose number "
                         f"grows with the domain, not the users: {remedy}",
                         option_value(parameters, field, given or {}))


def option_value(parameters, field: str, given: dict[str, Any]) -> Any:
    """The value of option ``field``: as given, else as the parameters hold it (--domain: the noise bins)."""
    value = given.get(field)
    if value is not None:
        return value
    if field == "input":
        return f"{parameters.n_users} users"
    return getattr(parameters, field) if hasattr(parameters, field) else getattr(parameters, "noise_bins", None)


def shrink_hint(parameters, mode: str, given: dict[str, Any]) -> tuple[str, str]:
    """(the option to change, what to do) to make a run of ``parameters`` smaller, naming an option the user
    gave (``given``) where one sets the noise."""
    if get(parameters.protocol).multi_round:  # the rounds are what takes time and room
        return "mode", "use --mode fast (a simulation shortcut that draws the release, exact over the survivors, " \
                       "from its law)"
    if not parameters.noise_options:  # no noise option to change: fewer users (or a smaller domain) make it smaller
        return "input", (f"fewer users per run (this protocol sends {parameters.messages_per_user:.3g} messages a "
                         "user, and has no shortcut)")
    field = next((o for o in parameters.noise_options if given.get(o) is not None),  # given on the command line
                 next(o for o in parameters.noise_options if getattr(parameters, o, o) is not None))  # else set
    remedy = (f"{parameters.noise_options[field]} --{field}, so that fewer dummies spread over fewer bins "
              f"(rho = mu bins / n = {parameters.rho:.3g} now)")
    if mode == "faithful" and run_mode(parameters, "fast") == "fast":
        remedy += ", or use --mode fast (a simulation shortcut that keeps no messages)"
    return field, remedy


@checked_arguments
def simulate(parameters, codes: np.ndarray, mode: str = "faithful", rng: RNGLike = None, queries=None,
             keep_messages: bool = False, progress: Progress | None = None,
             check_population: bool = True, dropouts: dict[str, Any] | None = None) -> SimulationRun:
    """Run ``codes`` (one item code per user) through the protocol of ``parameters``.

    ``queries``: the items the analyzer estimates (default: the whole
    domain). ``rng``: an int seed makes a reproducible simulation, which the
    run's ``privacy`` marks as not private (so does the fast path); ``None``
    uses the secure generator for every party, as a deployment would.
    ``keep_messages`` keeps what the analyzer received (for writing them).
    ``check_population=False`` skips the protocol's data condition: for the
    auditors only, which run the neighbours of accepted datasets.
    ``dropouts`` (multi-round protocols): round name -> the users who vanish
    before sending it; the release is then over the survivors, its guarantee
    recomputed for them (the fast path takes dropouts up to the round the
    release is over).
    """
    check_parameters(parameters)
    check_callable("progress", progress, "a function (stage, done, total) or None")
    mode = run_mode(parameters, mode)  # no shortcut: the run is the faithful one, and says so
    entry = get(parameters.protocol)
    if dropouts is not None and not isinstance(dropouts, Mapping):
        raise ParameterError("dropouts", "a mapping from round names to the users who drop out before them, or None",
                             kind_of(dropouts))
    if dropouts and not entry.multi_round:
        raise ParameterError("dropouts", "left out for a one-round protocol (its users send once)", sorted(dropouts))
    dropouts = check_dropouts(entry.rounds, parameters, dropouts, mode) if entry.multi_round else {}
    check_size(parameters, mode)  # before the codes are checked: a run too large is refused without reading them
    if entry.multi_round and mode == "faithful":  # its deployed parties' work grows as n^2
        check_faithful(entry.rounds, parameters)
    codes = parameters.check_codes(codes)
    if len(codes) != parameters.n_users:
        raise ParameterError("codes", f"one item per user ({parameters.n_users} users)", f"{len(codes)} items")
    if check_population:
        parameters.check_population(codes)
    rngs = streams(rng, ROLES[entry.topology])
    seconds: dict[str, float] = {}
    start = time.perf_counter()
    kept, privacy = None, None  # a release over survivors states its own guarantee (recomputed for them)
    if entry.trusted_curator:
        curator = entry.analyzer(parameters, queries, rng=rngs["curator"])
        sent = MessageBatch({"value": codes})  # in the clear, to the trusted curator
        result = curator.finalize(curator.agg_update(curator.agg_init(), sent))
        transcript = {"clients": {"sent": codes.size}, "curator": {"received": codes.size, "malformed": 0}}
        seconds["curator"] = time.perf_counter() - start
        if hasattr(curator, "elements_sent"):  # DPCS*: the counts leave the server as n shares of N elements
            transcript["curator"]["sent"] = curator.elements_sent
    elif entry.multi_round:
        protocol = entry.rounds
        aggregator = protocol.parties[-1]
        if mode == "fast":  # the release is exact over the survivors: their sampled or noised counts, drawn
            kept_users = survivors(protocol, parameters, dropouts)
            released = protocol.survivors_parameters(parameters, kept_users.size)
            server = entry.analyzer(released, queries)
            agg = entry.fast(released, codes[kept_users], rngs["users"], server)
            seconds["release"] = time.perf_counter() - start
            result, transcript = server.finalize(agg), {aggregator: {"parties": 1}}
            if kept_users.size < parameters.n_users:  # as the release over them states it
                privacy = protocol.survivors_privacy(parameters, kept_users.size, "users kept to the release",
                                                     "the fast path draws the survivors' sums directly")
        else:
            try:
                run = run_rounds(protocol, parameters, codes, rngs, dropouts, progress=progress)
            except RoundFailed as err:
                raise ParameterError("dropouts", "dropouts the task survives (every round needs its minimum of "
                                     "answers)", str(err)) from None
            seconds["rounds"] = time.perf_counter() - start
            result, transcript, privacy = _queried(run.release.table, queries), run.transcript, run.release.privacy
            kept = run.release.rows if keep_messages else None
        transcript.setdefault(aggregator, {"parties": 1}).update(received=result.messages + result.malformed,
                                                                malformed=result.malformed)
    else:
        analyzer = entry.analyzer(parameters, queries)
        if mode == "fast":
            agg = entry.fast(parameters, codes, rngs["clients"], analyzer)
            seconds["randomize"] = time.perf_counter() - start
            sent = agg.messages + agg.malformed
        else:
            messages = _run_clients(entry.client(parameters), parameters, codes, rngs["clients"], progress)
            sent = len(messages)
            seconds["randomize"] = time.perf_counter() - start
            if entry.topology is Topology.SHUFFLE and (keep_messages or not getattr(analyzer, "order_free", False)):
                start = time.perf_counter()
                shuffle(messages, rngs["shuffler"])  # in place: the population is held once
                seconds["shuffle"] = time.perf_counter() - start
            start = time.perf_counter()
            agg = _run_analyzer(analyzer, messages, progress)
            seconds["analyze"] = time.perf_counter() - start
            kept = messages if keep_messages else None
            del messages  # unless kept, the population is freed before finalize needs its own memory
        start = time.perf_counter()
        result = analyzer.finalize(agg)
        seconds["finalize"] = time.perf_counter() - start
        transcript = {"clients": {"sent": sent},
                      "analyzer": {"received": agg.messages + agg.malformed, "malformed": agg.malformed}}
        if entry.topology is Topology.SHUFFLE and mode == "faithful":
            transcript["shuffler"] = {"received": sent, "sent": sent}
    randomness = describe(rng)
    # each reason the run is not private (a fast seeded run has two); a release over survivors states theirs
    privacy, reasons = privacy or result.parameters.privacy, []
    if mode == "fast":
        randomness = f"simulation shortcuts, not for real users; {randomness}"
        reasons.append("fast path: the rounds are skipped and the survivors' sums drawn directly, a simulation "
                       "shortcut" if entry.multi_round else "fast path: the total noise is drawn with a "
                       "floating-point binomial sampler, a simulation shortcut")
    if not (rng is None or (isinstance(rng, np.random.Generator) and is_secure(rng))):
        reasons.append("seeded simulation: whoever knows the seed can regenerate the noise and recover the true "
                       "counts")
    if reasons:
        privacy = privacy.as_simulation(randomness, "; and ".join(reasons))
    return SimulationRun(result, mode, randomness, privacy, transcript, seconds, kept)


def _queried(table: FrequencyTable, queries) -> FrequencyTable:
    """A release's table (of every item, or of the items it could complete) over the items ``queries`` asks for."""
    if queries is None:
        return table
    picked = np.unique(table.parameters.check_codes(queries))
    if table.items is not None:
        picked = picked[np.isin(picked, table.items)]
    return FrequencyTable(table.parameters, table.estimate(picked), picked, table.messages, table.malformed)


def _run_analyzer(analyzer, messages: MessageBatch, progress: Progress | None):
    """One aggregate over all messages; with ``progress``, folded in ten parts (the same result: counts add).

    ``agg_update`` itself works a slice at a time, so that its scratch memory stays bounded either way.
    """
    agg = analyzer.agg_init()
    for part in messages.slices(max(1, len(messages) if progress is None else -(-len(messages) // 10))):
        agg = analyzer.agg_update(agg, part)
        if progress:
            progress("analyze", len(part), len(messages))
    return agg


def _capacity(parameters) -> int:
    """Messages the clients' buffer is allocated for: the expected n (1 + rho) plus MARGIN_SD standard deviations.

    Drawing every user's dummy coins first would give the exact total, but
    the coins belong to the client role (drawn inside ``randomize``, as on a
    device); sizing from their law keeps the role unchanged. By Bernstein's
    inequality the total exceeds the margin with probability below 1e-13
    once its sd is 100 or more (5 x 10^7 users at rho = 0.3: sd 3,200); when
    it does, :func:`_run_clients` grows the buffer.
    """
    return math.ceil(parameters.n_users * parameters.messages_per_user + MARGIN_SD * parameters.messages_sd)


def _run_clients(client, parameters, codes: np.ndarray, rng: np.random.Generator,
                 progress: Progress | None) -> MessageBatch:
    """Every client's messages, batch after batch, written into one row-major buffer of the layout's dtypes.

    The buffer is allocated once (:func:`_capacity`) and each batch is copied
    into it as it comes, so the population is never held twice (as a list
    of batches and their concatenation). Batches hold about
    MESSAGES_PER_BATCH messages, whatever rho, which bounds their scratch.
    A client that draws apart from its arithmetic (``draw`` and ``write``)
    runs in :func:`_run_drawn_clients`.
    """
    if hasattr(client, "draw"):
        return _run_drawn_clients(client, parameters, codes, rng, progress)
    layout = client.layout
    # the population passed check_codes: a client that can skip checking it again does
    randomize = getattr(client, "randomize_checked", client.randomize)
    records = np.empty(_capacity(parameters), dtype=layout.record_dtype)
    users = max(1, int(MESSAGES_PER_BATCH // parameters.messages_per_user))
    filled = 0
    for lo in range(0, len(codes), users):  # one row a user (an item code, a vector, an (index, weight) pair)
        chunk = codes[lo:lo + users]
        batch = randomize(chunk, rng)
        end = filled + len(batch)
        if end > records.size:  # past the margin (rare): grown in place, the rows written are kept
            records.resize(max(end, records.size + records.size // 16))
        for name in layout.names:
            records[name][filled:end] = batch[name]
        filled = end
        if progress:
            progress("randomize", len(chunk), len(codes))
    return MessageBatch.from_records(records[:filled])


def _run_drawn_clients(client, parameters, codes: np.ndarray, rng: np.random.Generator,
                       progress: Progress | None) -> MessageBatch:
    """:func:`_run_clients` for a client of a fixed number of messages a user whose draws do not depend on its
    users' values (blanket-vector's): this thread draws each batch's randomness in the stream's order
    (``client.draw``) while WORKERS threads compute the messages of the batches drawn before it
    (``client.write``, numpy's arithmetic, which releases the GIL), each into its own rows of the buffer. The
    same messages as one thread's, on every core; at most WORKERS + 1 batches' draws held at a time."""
    per = round(parameters.messages_per_user)
    records = np.empty(len(codes) * per, dtype=client.layout.record_dtype)
    users = max(1, MESSAGES_PER_BATCH // per)
    with ThreadPoolExecutor(WORKERS) as pool:
        pending: deque = deque()
        for lo in range(0, len(codes), users):
            hi = min(lo + users, len(codes))
            pending.append((hi - lo, pool.submit(client.write, codes[lo:hi], client.draw(hi - lo, rng),
                                                 records[lo * per:hi * per])))
            while pending and (len(pending) > WORKERS or hi == len(codes)):
                done, written = pending.popleft()
                written.result()
                if progress:
                    progress("randomize", done, len(codes))
    return MessageBatch.from_records(records)


def simulation_bytes(parameters, mode: str = "faithful", full_domain: bool = True) -> int:
    """About the peak memory a simulation of ``parameters`` takes besides the users' codes, in bytes.

    For refusing, before any input is read, a run that cannot fit.
    ``full_domain``: whether the analyzer estimates all of [B] (``simulate``'s
    default, ``queries=None``); candidates' counts are small and left out.

    * Faithful runs of clients hold the message buffer (:func:`_capacity` rows
      of the layout's record dtype; the shuffle is in place and adds
      nothing), plus the larger of a client batch's scratch and the
      analyzer's working memory (its ``working_bytes``: the aggregate, one
      slice's scratch, a kernel's counters); a client whose draws come apart
      (:func:`_run_drawn_clients`) has WORKERS + 1 batches' scratch at once.
    * The fast path keeps no messages: one slice drawn at a time, then
      counted. The central curator gets the codes themselves.

    A batch's scratch, per message: each column drawn as int64, one more
    int64 temporary, and the cast into the record dtype (44 bytes for FE1's
    messages, where 40 were measured; 20 for FE0's, measured 9 to 11).
    """
    mode = run_mode(parameters, mode)
    entry = get(parameters.protocol)
    working = entry.analyzer.working_bytes(parameters, full_domain)
    if entry.trusted_curator:
        return working
    if entry.multi_round:  # every message of a run held at once; the fast path: the codes' counts
        n, N = parameters.n_users, parameters.domain_size
        return (entry.rounds.faithful_bytes(parameters) if mode == "faithful" else 16 * N + 9 * n) + working
    messages, row = _capacity(parameters), parameters.layout.record_dtype.itemsize
    drawn = 8 * (len(parameters.layout.columns) + 1) + row
    if mode == "fast":
        rows = min(SLICE_ROWS, messages)
        return max(drawn * rows, working + row * rows)
    in_flight = WORKERS + 1 if hasattr(entry.client, "draw") else 1  # batches drawn at once (_run_drawn_clients)
    return messages * row + max(drawn * min(MESSAGES_PER_BATCH, messages) * in_flight, working)
