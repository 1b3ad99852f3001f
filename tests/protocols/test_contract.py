"""The contract every implemented protocol keeps, generated from the registry.

A protocol joins these tests by its :data:`privagg.protocols.registry.ENTRIES`
entry alone: the entry's ``topology``, ``client``, ``analyzer``, ``fast``
and ``calibrations`` decide which checks apply, and its ``example`` the
instance (its users, domain and options; the users' items Zipf-like, or,
for a categorical protocol, every category held by n / 2N users, which the
sampling family's guarantee needs), at epsilon 1 and delta 1e-6 (0 for a
pure protocol); a calibration that needs more users than the example's gets
the fewest multiple of them it accepts. Every entry's example instance keeps
the parameters contract (:class:`privagg.protocols.parameters.Parameters`).
Seeds are fixed; statistical checks use 4-sigma tolerances.
"""

import json
import math
import pickle

import numpy as np
import pytest
from scipy import stats

from privagg.core.messages import SLICE_ROWS, MessageBatch, shuffle
from privagg.errors import ParameterError
from privagg.privacy.description import Model
from privagg.protocols import registry, roles
from privagg.protocols.kinds import Family, ResultKind, Topology
from privagg.protocols.parameters import Parameters
from privagg.protocols.results import FrequencyTable
from privagg.simulate import simulate

EPS, DELTA = 1.0, 1e-6
K = 4.0
# frequency protocols; vector sums have their own tests (tests/protocols/test_privacy_blanket.py)
PROTOCOLS = tuple(p for p in registry.IMPLEMENTED if registry.REGISTRY[p].result is ResultKind.FREQUENCY_TABLE)
WITH_FAST = [p for p in PROTOCOLS if registry.REGISTRY[p].fast is not None]
WITH_CLIENT = [p for p in PROTOCOLS if registry.REGISTRY[p].client is not None]


def zipf_population(domain, n_users, seed=0):
    """Zipf-like: item 0 most frequent, the last item held by nobody."""
    rng = np.random.default_rng(seed)
    return np.minimum(rng.zipf(1.5, size=n_users) - 1, domain - 2)


def categorical_population(domain, n_users, seed=0):
    """Every category held by at least n / (2 N) users (the sampling guarantee's condition), the rest Zipf-like."""
    floor = n_users // (2 * domain)
    rng = np.random.default_rng(seed)
    rest = np.minimum(rng.zipf(1.5, size=n_users - floor * domain) - 1, domain - 1)
    return rng.permutation(np.concatenate([np.repeat(np.arange(domain), floor), rest]))


# a multi-round protocol's faithful runs (its deployed parties, every pair of users agreeing a key: the cost grows as
# n^2) are of this many users, its example's domain and options
FAITHFUL_USERS = 80


def n_of(name):
    return registry.get(name).example["n_users"]


def domain_of(name):
    return registry.get(name).example["domain_size"]


def options_of(name):
    """The options of the entry's example (those its calibration needs, as the sampling family's beta)."""
    entry = registry.get(name)
    return {k: v for k, v in entry.example.items() if k in {o.name for o in entry.options}}


def queries_of(name):
    """Some items: the first three, one in the middle, the last (held by nobody in the Zipf population)."""
    domain = domain_of(name)
    return [0, 1, 2, domain // 2, domain - 1]


def delta_of(name):
    """The delta claimed: DELTA, or 0 for a pure eps-DP protocol (which takes no delta)."""
    return 0.0 if registry.get(name).pure else DELTA


def users_of(name, calibration=None):
    """The example's users, or the fewest of 2, 4, ..., 64 times them that ``calibration`` accepts (the sampling
    family's closed form needs more holders a category to meet delta)."""
    for scale in (1, 2, 4, 8, 16, 32, 64):
        try:
            registry.calibrate(name, epsilon=EPS, delta=delta_of(name), n_users=scale * n_of(name),
                               domain_size=domain_of(name), calibration=calibration, **options_of(name))
            return scale * n_of(name)
        except ParameterError:
            continue
    raise AssertionError(f"{name}'s {calibration} calibration refuses up to 64 times its example's users")


def params_of(name, calibration=None, n_users=None):
    """The entry's example instance (or ``n_users``); calibrations that need more users get them."""
    n_users = n_users or users_of(name, calibration)
    return registry.calibrate(name, epsilon=EPS, delta=delta_of(name), n_users=n_users, domain_size=domain_of(name),
                              calibration=calibration, **options_of(name))


def population(name, seed=0, n_users=None):
    make = categorical_population if registry.get(name).categorical else zipf_population
    return make(domain_of(name), n_users or n_of(name), seed)


def faithful_instance(name, fraction=1):
    """(parameters, codes) a faithful run of ``name`` takes in a test: the entry's example, or for a multi-round
    protocol the same over :data:`FAITHFUL_USERS` (times ``fraction``)."""
    n_users = int(FAITHFUL_USERS * fraction) if registry.get(name).multi_round else None
    return params_of(name, n_users=n_users), population(name, n_users=n_users)


def analyzer_of(params, queries=None, seed=11):
    """The protocol's analyzer; a central curator gets a fixed seed so that its noise is reproducible."""
    entry = registry.get(params.protocol)
    options = {"rng": seed} if entry.trusted_curator else {}
    return registry.analyzer(params, queries, **options)


_FAITHFUL_RUNS: dict = {}


def faithful_run(name, seed=1):
    """A faithful run of ``name``'s faithful instance (:func:`faithful_instance`) with its messages kept: one per
    protocol and seed in a worker, which the tests of a multi-round protocol's messages share (a run takes seconds)."""
    if (name, seed) not in _FAITHFUL_RUNS:
        _FAITHFUL_RUNS[name, seed] = simulate(*faithful_instance(name), rng=seed, keep_messages=True)
    return _FAITHFUL_RUNS[name, seed]


def messages_of(params, codes, seed=1):
    """What the analyzer receives: shuffled client messages, what the server of a multi-round protocol folds (the
    survivors' masked sums, the helpers' sums) as (item, share) rows, or (central) the values in the clear. A
    multi-round protocol's rows come from its faithful instance (:func:`faithful_instance`), whose field is no
    larger: they fit the layout of ``params``."""
    entry = registry.get(params.protocol)
    if entry.multi_round:
        return faithful_run(params.protocol, seed).messages
    if entry.client is None:
        return MessageBatch({"value": np.asarray(codes, dtype=np.int64)})
    batch = registry.client(params).randomize(codes, rng=seed)
    return shuffle(batch, rng=seed + 1) if entry.topology is Topology.SHUFFLE else batch


def totals(agg):
    """The aggregate's array: counts (balls into bins, a curator's records), or field sums (secret sharing)."""
    return agg.sums if hasattr(agg, "sums") else agg.counts


def same_aggregate(a, b):
    return np.array_equal(totals(a), totals(b)) and (a.messages, a.malformed) == (b.messages, b.malformed)


def fold(analyzer, *batches):
    agg = analyzer.agg_init()
    for batch in batches:
        agg = analyzer.agg_update(agg, batch)
    return agg


# --- the registry entry itself ------------------------------------------------------------------------


@pytest.mark.parametrize("name", PROTOCOLS)
def test_entry_is_complete_and_consistent(name):
    entry = registry.get(name)
    params = params_of(name)
    assert entry.implemented and entry.name == params.protocol == name
    assert entry.analyzer is not None and entry.calibrate is not None and entry.parameters is type(params)
    assert params.calibration == entry.calibrations[0]
    assert (entry.client is None) == (entry.topology not in (Topology.SHUFFLE, Topology.LOCAL))
    assert (entry.client is None) == (entry.trusted_curator or entry.multi_round)
    assert params.model == entry.topology
    analyzer = analyzer_of(params)
    assert isinstance(analyzer, roles.Analyzer) and analyzer.layout == params.layout
    if entry.trusted_curator:
        assert isinstance(analyzer, roles.Curator)
        with pytest.raises(ParameterError) as err:
            registry.client(params)
        assert err.value.field == "protocol"
    elif entry.client is not None:
        client = registry.client(params)
        assert isinstance(client, roles.Client) and client.layout == params.layout
        assert not isinstance(analyzer, roles.Curator)  # no noise of its own: it has no rng


MULTI_ROUND = [p for p in PROTOCOLS if registry.REGISTRY[p].multi_round]


@pytest.mark.parametrize("name", MULTI_ROUND)
def test_multi_round_parties_keep_the_round_contract(name):
    """A multi-round entry declares its rounds and a role per party kind (protocols/roles.py): the users' role
    answers each round with its method of the round's name and keeps an encodable state (``to_bytes``,
    ``from_bytes``); the coordinator is a Coordinator, the second server (if any) releases what it hands over;
    every message the parties exchange reads as a kind of the versioned encodings (the transcript counts them by
    kind). A faithful run through the simulator's harness, a user vanishing at each round up to the one the
    release is over, releases over the survivors with the guarantee recomputed for them."""
    from privagg.simulate.rounds import run_rounds

    entry = registry.get(name)
    protocol, (params, codes) = entry.rounds, faithful_instance(name)
    assert entry.topology in (Topology.SECRET_SHARING, Topology.TWO_SERVERS) and entry.client is None
    least = protocol.least_survivors(params)
    assert isinstance(protocol.user(params, 0, least, rng=1), roles.RoundUser)
    assert isinstance(protocol.coordinator(params, least, rng=2), roles.Coordinator)
    assert all(callable(getattr(protocol.user, r.name)) for r in protocol.rounds)
    last = protocol.number(protocol.release_round)
    dropouts = {r.name: [k] for k, r in enumerate(protocol.rounds[:last])}
    rngs = {"users": np.random.default_rng(3), "server": np.random.default_rng(4),
            "identities": np.random.default_rng(5)}
    run = run_rounds(protocol, params, codes, rngs, dropouts)
    assert run.release.parameters == protocol.survivors_parameters(params, params.n_users - last)
    assert run.release.table.parameters.n_users == params.n_users - last
    for user in run.users:
        raw = user.state.to_bytes()
        assert type(user.state).from_bytes(raw).to_bytes() == raw
    user_sent = {k for k in run.transcript["user"] if k.startswith("sent ")}
    assert run.transcript["user"]["messages_sent"] > 0 and len(user_sent) >= len(protocol.rounds) - 1


@pytest.mark.parametrize("name", registry.IMPLEMENTED)
def test_the_example_keeps_the_parameters_contract(name):
    """Every entry (vector sums and heavy hitters too) has an example instance, calibrated under each of its
    calibrations but the closed form, whose parameters are what the outer layers count on (Parameters)."""
    entry = registry.get(name)
    assert {"epsilon", "n_users", "domain_size"} <= set(entry.example) and ("delta" in entry.example) != entry.pure
    for calibration in (c for c in entry.calibrations if c != "closed_form"):
        params = registry.calibrate(name, calibration=calibration, **entry.example)
        assert isinstance(params, Parameters) and type(params) is entry.parameters
        assert (params.protocol, params.model, params.calibration) == (name, entry.topology, calibration)
        assert (params.epsilon, params.n_users) == (entry.example["epsilon"], entry.example["n_users"])
        assert params.delta == entry.example.get("delta", 0.0) and params.delta_at(params.epsilon) <= params.delta
        assert registry.load_parameters(json.dumps(params.to_dict())) == params
        assert params.privacy.model == entry.topology and params.bits_per_message == params.layout.bits_per_message
        assert params.messages_per_user > 0 and set(params.expected_error()) >= {"standard_error", "standard_error_at",
                                                                                 "max_error_bound"}
    assert not isinstance(entry.example, Parameters) and not isinstance(None, Parameters)


def test_planned_protocols_are_not_served():
    planned = [e.name for e in registry.ENTRIES if not e.implemented]
    assert not set(planned) & set(PROTOCOLS)
    for name in planned + ["nonsense"]:
        with pytest.raises(ParameterError) as err:
            registry.get(name)
        assert err.value.field == "protocol"


# --- parameters ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", PROTOCOLS)
def test_parameters_round_trip_through_json_exactly(name):
    entry = registry.get(name)
    for calibration in entry.calibrations:
        params = params_of(name, calibration)
        text = json.dumps(params.to_dict())
        data = json.loads(text)
        assert data == params.to_dict()
        for source in (data, text, text.encode()):
            back = registry.load_parameters(source)
            assert back == params and type(back) is type(params) and back.to_dict() == params.to_dict()
        assert entry.parameters.from_dict(data) == params
        # with the derived quantities a report carries, as long as they agree with the fields
        assert registry.load_parameters({**data, **params.derived()}) == params
        assert registry.load_parameters({"protocol": name, "parameters": data}) == params


@pytest.mark.parametrize("name", PROTOCOLS)
def test_loading_refuses_bad_parameters(name):
    data = params_of(name).to_dict()
    key = "mu" if "mu" in data else "epsilon"
    for bad, field in (({**data, "protocol": "fe9"}, "parameters.protocol"), ([1, 2], "parameters.protocol"),
                       ("{oops", "parameters"), ({**data, key: "1"}, f"parameters.{key}"),
                       ({**data, "surprise": 1}, "parameters")):
        with pytest.raises(ParameterError) as err:
            registry.load_parameters(bad if isinstance(bad, str) else json.dumps(bad))
        assert err.value.field == field, (bad, err.value)
    # a claim the noise does not buy (half the epsilon): refused, naming the parameters or the field that falls short
    with pytest.raises(ParameterError) as err:
        registry.load_parameters(json.dumps({**data, "epsilon": data["epsilon"] / 2}))
    assert err.value.field == "parameters" or err.value.field.removeprefix("parameters.") in data, err.value
    missing = {k: v for k, v in data.items() if k != key}
    with pytest.raises(ParameterError, match="parameters must be"):
        registry.load_parameters(missing)


@pytest.mark.parametrize("name", PROTOCOLS)
def test_parameters_are_frozen_and_hashable(name):
    params = params_of(name)
    with pytest.raises(AttributeError):
        params.epsilon = 0.0
    assert hash(params) == hash(registry.load_parameters(params.to_dict()))


@pytest.mark.parametrize("name", PROTOCOLS)
def test_roles_and_aggregates_survive_pickling(name):
    params = params_of(name)
    assert pickle.loads(pickle.dumps(params)) == params
    codes = population(name)
    entry = registry.get(name)
    if entry.client is not None:
        client = pickle.loads(pickle.dumps(registry.client(params)))
        a, b = client.randomize(codes, rng=3), registry.client(params).randomize(codes, rng=3)
        assert a.columns.keys() == b.columns.keys() and all(np.array_equal(a[k], b[k]) for k in a.columns)
    messages = messages_of(params, codes)
    for queries in (None, queries_of(name)):
        analyzer = analyzer_of(params, queries)
        shipped = pickle.loads(pickle.dumps(analyzer))
        agg = fold(analyzer, messages)
        assert same_aggregate(fold(shipped, messages), agg)
        back = pickle.loads(pickle.dumps(agg))
        assert same_aggregate(back, agg)
        table = analyzer.finalize(back)
        assert np.array_equal(table.estimates, analyzer.finalize(agg).estimates)
        assert np.array_equal(pickle.loads(pickle.dumps(table)).estimates, table.estimates)


# --- aggregation --------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", PROTOCOLS)
@pytest.mark.parametrize("some", [False, True])
def test_merge_of_shards_is_one_update_over_all_messages(name, some):
    params = params_of(name)
    messages = messages_of(params, population(name))
    analyzer = analyzer_of(params, queries_of(name) if some else None)
    bad = corrupt(params.layout, messages.take(slice(0, 50)))
    cuts = [0, 1, 1, len(messages) // 3, len(messages) // 2, len(messages)]  # uneven, with an empty shard
    shards = [messages.take(slice(lo, hi)) for lo, hi in zip(cuts[:-1], cuts[1:])] + [bad]
    whole = fold(analyzer, MessageBatch.concatenate(shards))
    parts = [fold(analyzer, shard) for shard in shards]
    merged = analyzer.merge(parts)
    assert same_aggregate(merged, whole)
    assert merged.messages == len(messages) + 50 - merged.malformed and merged.malformed > 0
    assert same_aggregate(analyzer.merge([analyzer.merge(parts[:3]), analyzer.merge(parts[3:])]), whole)
    assert same_aggregate(fold(analyzer, *shards), whole)  # folding batch after batch, too
    assert same_aggregate(analyzer.merge([]), analyzer.agg_init())
    assert np.array_equal(analyzer.finalize(merged).estimates, analyzer.finalize(whole).estimates)
    assert all(totals(p) is not totals(merged) for p in parts)


@pytest.mark.parametrize("name", PROTOCOLS)
def test_estimates_cover_the_queries(name):
    params, domain = params_of(name), domain_of(name)
    messages = messages_of(params, population(name))
    full = analyzer_of(params)
    table = full.finalize(fold(full, messages))
    assert isinstance(table, FrequencyTable) and table.full_domain and table.estimates.shape == (domain,)
    assert table.parameters == params and table.messages == len(messages) and table.malformed == 0
    queries = [domain - 1, 3, 0, 3]
    some = analyzer_of(params, queries)
    some_table = some.finalize(fold(some, messages))
    assert some_table.items.tolist() == [0, 3, domain - 1]
    if not registry.get(name).trusted_curator:  # the curator's noise differs between the two tables
        assert np.array_equal(some_table.estimate([0, domain - 1]), table.estimate([0, domain - 1]))
    codes, estimates = table.top_k(3)
    assert estimates.tolist() == sorted(table.estimates, reverse=True)[:3]


@pytest.mark.parametrize("name", PROTOCOLS)
@pytest.mark.parametrize("epsilon", [EPS, 30.0])
def test_no_reported_standard_error_reads_certain(name, epsilon):
    """Issue 44: a result's standard error (``reported_standard_error``, what tables and reports print) is never
    below the estimator's sd at the estimate, nor below half its sd at a count one user away, which the release
    cannot tell from it: the sampling family's sd at a count of 0 is 0 (0.0 ± 0.0 for a category nobody sampled),
    and at eps = 30 the local baselines' nears 0 at g = 0 or n while it is about 1 a user away."""
    try:
        params = registry.calibrate(name, epsilon=epsilon, delta=delta_of(name), n_users=n_of(name),
                                    domain_size=domain_of(name), **options_of(name))
    except ParameterError as err:
        pytest.skip(f"no calibration at eps {epsilon}: {err}")
    n = params.n_users
    grid = np.array([-5.0, 0.0, 1.0, 2.0, n / 2, n - 1.0, n, n + 5.0])
    reported = np.asarray(params.reported_standard_error(grid), dtype=np.float64)
    sd = lambda counts: np.asarray(params.standard_error(np.clip(counts, 0, n)), dtype=np.float64)  # noqa: E731
    assert np.all(reported >= sd(grid) * (1 - 1e-12))
    assert np.all(reported >= 0.5 * np.maximum(sd(grid - 1), sd(grid + 1)))


@pytest.mark.parametrize("name", PROTOCOLS)
@pytest.mark.parametrize("n_users", [4, 30, 300, 3000])
def test_no_reported_stderr_exceeds_the_stated_worst(name, n_users):
    """``expected_error``'s standard_error, printed as an item's stderr "at most" (at its worst count), bounds the
    stderr reported at any estimate in [-n, 2n]: a reviewer's dpds at n = 4 (N = 3) reported 2,000 under an "at
    most" of 1,414 (its sd clipped at n, the figure at n - (N - 1) m); GRR, OUE, OLH and blanket-hist stated theirs
    at a count of 0, where their variance grows with the count (docs/derivations.md, "Reported standard errors")."""
    domain, options = domain_of(name), options_of(name)
    if registry.get(name).categorical and n_users < 300:  # the reviewer's shape: N = 3, beta = 1/4 (TSS: alpha 2/3)
        shape = {"min_count_fraction": 0.25, "report_fraction": 2 / 3}
        domain, options = 3, {k: shape.get(k, v) for k, v in options.items()}
    try:
        params = registry.calibrate(name, epsilon=EPS, delta=delta_of(name), n_users=n_users, domain_size=domain,
                                    **options)
    except ParameterError as err:
        pytest.skip(f"no calibration at n = {n_users}: {err}")
    reported = np.asarray(params.reported_standard_error(np.linspace(-n_users, 2 * n_users, 301)), dtype=np.float64)
    assert reported.max() <= params.expected_error()["standard_error"] * (1 + 1e-12)


# --- messages -----------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", PROTOCOLS)
def test_messages_per_user_match_the_theory(name):
    params, codes = faithful_instance(name)
    n = params.n_users
    # a multi-round protocol's: the faithful run the other tests of its messages take
    run = faithful_run(name) if registry.get(name).multi_round else simulate(params, codes, rng=4)
    if registry.get(name).trusted_curator:
        assert params.messages_per_user == 1 and run.messages_total == n
        return
    if registry.get(name).multi_round:  # one row per category and helper: n alpha N in all, plus TSS' top-ups
        assert abs(run.messages_per_user - params.messages_per_user) <= 0.02 * params.messages_per_user
        assert run.messages_per_user == params.messages_per_user or params.protocol == "tss-collusion"
        return
    if registry.get(name).family is not Family.LOCAL_BASELINES:  # OUE: 1/2 + (B - 1) q set bits, not 1 + rho
        assert params.messages_per_user == 1 + params.rho
    assert abs(run.messages_per_user - params.messages_per_user) <= K * params.messages_sd / n
    assert run.transcript["analyzer"]["received"] == run.transcript["clients"]["sent"]


@pytest.mark.parametrize("name", PROTOCOLS)
def test_bits_per_message_is_the_layout_sum(name):
    params = params_of(name)
    columns = params.layout.columns
    assert params.bits_per_message == params.layout.bits_per_message == sum(
        max(1, (c.high - c.low - 1).bit_length()) for c in columns)  # ceil(log2(number of values))
    assert len({c.name for c in columns}) == len(columns) and all(c.low < c.high for c in columns)
    # what the roles send fits the layout
    clean, dropped = params.layout.validate(messages_of(params, population(name)))
    assert dropped == 0 and set(clean.columns) == set(params.layout.names)


def corrupt(layout, batch):
    """``batch`` (>= 8 rows) with rows 0-5 malformed: above and below range, a fraction, NaN, infinities."""
    columns = {name: np.asarray(col, dtype=np.float64).copy() for name, col in batch.columns.items()}
    first = layout.columns[0]
    last = layout.columns[-1]
    columns[first.name][0] = first.high
    columns[last.name][1] = last.low - 1
    columns[first.name][2] = first.low + 0.5
    columns[last.name][3] = np.nan
    columns[first.name][4] = np.inf
    columns[last.name][5] = -np.inf
    return MessageBatch(columns)


@pytest.mark.parametrize("name", PROTOCOLS)
@pytest.mark.parametrize("some", [False, True])
def test_malformed_messages_are_dropped_and_counted(name, some):
    params = params_of(name)
    layout = params.layout
    messages = messages_of(params, population(name)).take(slice(0, 400))
    analyzer = analyzer_of(params, [0, 1, domain_of(name) - 1] if some else None)
    good = messages.take(slice(6, None))
    expected = fold(analyzer, good)
    agg = fold(analyzer, corrupt(layout, messages))  # floats, six rows bad
    assert agg.malformed == 6 and agg.messages == 394 and np.array_equal(totals(agg), totals(expected))
    for columns in (
        {n if n != layout.names[-1] else "renamed": c for n, c in messages.columns.items()},  # a column missing
        {n: c.astype(str) for n, c in messages.columns.items()},  # not numbers
        {n: c.astype(object) for n, c in messages.columns.items()},
        {n: np.ones(len(messages), dtype=bool) for n in messages.columns},
    ):
        agg = fold(analyzer, MessageBatch(columns))
        assert (agg.messages, agg.malformed) == (0, 400) and not totals(agg).any()
    extra = fold(analyzer, MessageBatch({**messages.columns, "extra": np.zeros(400)}))
    assert same_aggregate(extra, fold(analyzer, messages))  # unknown columns are ignored
    assert same_aggregate(fold(analyzer, layout.empty(), MessageBatch({})), analyzer.agg_init())
    table = analyzer.finalize(fold(analyzer, corrupt(layout, messages), good))
    assert table.malformed == 6 and table.messages == 394 * 2


@pytest.mark.parametrize("name", WITH_CLIENT)
def test_clients_send_the_layouts_compact_dtypes(name):
    params = params_of(name)
    batch = registry.client(params).randomize(population(name), rng=2)
    assert {k: batch[k].dtype for k in batch.columns} == {c.name: c.dtype for c in params.layout.columns}
    assert all(c.dtype.itemsize < 8 for c in params.layout.columns)  # smaller than int64 at this size


@pytest.mark.parametrize("name", PROTOCOLS)
@pytest.mark.parametrize("some", [False, True])
def test_an_update_over_many_slices_is_one_pass_in_bounded_memory(name, some):
    """A batch of five analyzer slices (a simulated population is one batch) folds to the merge of its parts'
    aggregates, and the update's scratch follows a slice: no int64 copy of a whole column, and no more than
    the analyzer's own ``working_bytes`` (what a simulation budgets for it)."""
    import tracemalloc

    params = params_of(name, n_users=SLICE_ROWS)
    queries = [0, 1, domain_of(name) - 1] if some else None
    # the small instance's messages fit the large one's layout (the sharing family's n^2 N shares would not fit)
    compact = params.layout.batch(messages_of(params_of(name), population(name)).columns)
    rows = 5 * SLICE_ROWS
    big = MessageBatch({k: np.resize(col, rows) for k, col in compact.columns.items()})
    analyzer = analyzer_of(params, queries)
    fold(analyzer, big.take(slice(0, 100)))  # kernels loaded before measuring
    tracemalloc.start()
    try:
        whole = fold(analyzer, big)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 8 * rows and peak <= 1.25 * type(analyzer).working_bytes(params, queries is None), peak
    cuts = [0, 1000, SLICE_ROWS + 7, 3 * SLICE_ROWS, rows]
    parts = [fold(analyzer, big.take(slice(lo, hi))) for lo, hi in zip(cuts[:-1], cuts[1:])]
    assert same_aggregate(analyzer.merge(parts), whole) and whole.messages == rows and whole.malformed == 0


# --- privacy ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", PROTOCOLS)
def test_privacy_description(name):
    entry = registry.get(name)
    for calibration in entry.calibrations:
        params = params_of(name, calibration)
        privacy = params.privacy
        assert privacy.model in Model.__args__ and privacy.model == entry.topology
        assert "replace-one" in privacy.neighbouring
        assert privacy.private is True and privacy.not_private_reason is None
        assert (privacy.epsilon, privacy.delta) == (EPS, delta_of(name)) and privacy.method == calibration
        assert isinstance(privacy.method_detail, str) and privacy.method_detail and privacy.reference
        assert privacy.event.type == "mechanism" and privacy.event.method == calibration
        assert privacy.parameters.get("mu") == getattr(params, "mu", None)
        assert params.n_users in (privacy.parameters.get("n_users"), privacy.parameters.get("honest_users"))
        # a trusted party, or none: the users and servers only follow the protocol
        assert bool(privacy.trusted) == (entry.topology in (Topology.CENTRAL, Topology.SHUFFLE))
        assert privacy.honest_fraction == 1
        text = privacy.render()
        assert f"(1, {delta_of(name):g})-DP" in text and "NOT PRIVATE" not in text
        assert json.loads(json.dumps(privacy.to_dict(), default=list))["model"] == entry.topology


@pytest.mark.parametrize("name", PROTOCOLS)
def test_noise_buys_the_promised_delta(name):
    # delta_at is the hockey-stick bound (balls into bins), which the tail criterion (numeric) also bounds from above;
    # the closed forms are checked where their own conditions hold
    for calibration in registry.get(name).calibrations:
        if calibration == "closed_form" and registry.get(name).family is not Family.SAMPLING_SHARING:
            continue
        for n_users in (users_of(name, calibration), 5 * users_of(name, calibration)):
            params = params_of(name, calibration, n_users)
            assert params.delta_at(params.epsilon) <= params.delta
            assert params.delta_at(params.epsilon / 2) > params.delta_at(params.epsilon)


BAD_CALIBRATIONS = [
    (dict(epsilon=0), "epsilon"), (dict(epsilon=-1.0), "epsilon"), (dict(epsilon=float("nan")), "epsilon"),
    (dict(epsilon=float("inf")), "epsilon"), (dict(delta=0.0), "delta"), (dict(delta=1.0), "delta"),
    (dict(delta=1.5), "delta"), (dict(delta=float("nan")), "delta"), (dict(n_users=1), "n_users"),
    (dict(n_users=0), "n_users"), (dict(n_users=2.5), "n_users"), (dict(n_users=True), "n_users"),
    (dict(domain_size=1), "domain"), (dict(domain_size=0), "domain"), (dict(domain_size=10.5), "domain"),
    (dict(calibration="magic"), "calibration"), (dict(unknown_option=1), "unknown_option"),
]


@pytest.mark.parametrize("name", PROTOCOLS)
@pytest.mark.parametrize("change,field", BAD_CALIBRATIONS)
def test_bad_calibration_input_names_the_field(name, change, field):
    if registry.get(name).pure and change.get("delta") == 0.0:
        pytest.skip("delta = 0 is the claim of a pure eps-DP protocol")
    args = {**dict(epsilon=EPS, delta=delta_of(name), n_users=n_of(name), domain_size=domain_of(name)),
            **options_of(name), **change}
    with pytest.raises(ParameterError) as err:
        registry.calibrate(name, **args)
    assert err.value.field == field
    assert str(err.value).startswith(f"{field} must be ")


@pytest.mark.parametrize("name", PROTOCOLS)
def test_domain_above_the_entrys_maximum_is_refused(name):
    entry = registry.get(name)
    with pytest.raises(ParameterError) as err:
        registry.calibrate(name, epsilon=EPS, delta=delta_of(name), n_users=n_of(name),
                           domain_size=entry.parameters.domain_max + 1, **options_of(name))
    assert err.value.field == "domain"


# --- statistics (slow) --------------------------------------------------------------------------------

RUNS = 200


def estimate_draws(params, codes, items, mode, seed, totals=False):
    """RUNS x len(items) estimates (and the runs' message totals) of seeded simulations."""
    runs = [simulate(params, codes, mode, rng=s, queries=items) for s in np.random.SeedSequence(seed).spawn(RUNS)]
    draws = np.array([r.result.estimate(items) for r in runs])
    return (draws, np.array([r.messages_total for r in runs])) if totals else draws


@pytest.mark.slow
@pytest.mark.parametrize("name", PROTOCOLS)
def test_estimates_are_unbiased_with_the_theoretical_variance(name):
    params, domain = params_of(name), domain_of(name)
    codes = population(name)
    items = np.array([0, 1, domain // 2, domain - 1])
    truth = np.bincount(codes, minlength=domain)[items]
    assert truth[0] > n_of(name) / 5
    mode = "fast" if registry.get(name).fast is not None else "faithful"
    draws = estimate_draws(params, codes, items, mode, seed=31)
    sd = params.standard_error(truth)
    mean, var = draws.mean(axis=0), draws.var(axis=0, ddof=1)
    assert np.all(np.abs(mean - truth) <= K * sd / math.sqrt(RUNS)), (mean, truth, sd)
    assert np.all(np.abs(var / sd**2 - 1) <= K * math.sqrt(2 / (RUNS - 1))), var / sd**2


@pytest.mark.slow
@pytest.mark.parametrize("name", WITH_FAST)
def test_faithful_and_fast_paths_agree_in_distribution(name):
    params, codes = faithful_instance(name, fraction=0.5)  # 200 faithful runs of a multi-round protocol: n = 40
    items = np.array([0, 2, domain_of(name) - 1])
    faithful, faithful_totals = estimate_draws(params, codes, items, "faithful", seed=41, totals=True)
    fast, fast_totals = estimate_draws(params, codes, items, "fast", seed=42, totals=True)
    for j in range(items.size):
        assert stats.ks_2samp(faithful[:, j], fast[:, j]).pvalue > 1e-3
    assert stats.ks_2samp(faithful_totals, fast_totals).pvalue > 1e-3


@pytest.mark.parametrize("protocol, kw", [("fe1", dict(delta=1e-9)), ("olh", dict(delta=None))])
@pytest.mark.parametrize("domain", [2**28 + 1, 2**40, 2**49])
def test_a_whole_domain_analyzer_past_the_cli_limit_is_refused_at_construction(protocol, kw, domain):
    """privagg.analyzer(fe1 at B = 2^49) without queries was accepted, and agg_init asked for 4 PiB: refused at
    construction past the CLI's --full-domain limit (protocols.registry.FULL_DOMAIN_MAX), naming queries."""
    import privagg
    from privagg.protocols.registry import FULL_DOMAIN_MAX

    params = privagg.calibrate(protocol, epsilon=1.0, n_users=1000, domain_size=domain, **kw)
    with pytest.raises(ParameterError) as err:
        privagg.analyzer(params)
    assert err.value.field == "queries" and f"2^{FULL_DOMAIN_MAX.bit_length() - 1}" in str(err.value)
    assert privagg.analyzer(params, queries=[1, 5]).finalize(privagg.analyzer(params, queries=[1, 5]).agg_init()
                                                             ).estimates.size == 2


def test_a_whole_domain_analyzer_at_the_limit_is_built():
    import privagg
    from privagg.protocols.registry import FULL_DOMAIN_MAX

    privagg.analyzer(privagg.calibrate("fe0", epsilon=1.0, delta=1e-6, n_users=1000, domain_size=2**20))
    params = privagg.calibrate("fe1", epsilon=1.0, delta=1e-6, n_users=1000, domain_size=FULL_DOMAIN_MAX)
    assert type(privagg.analyzer(params)).__name__ == "FE1Analyzer"
