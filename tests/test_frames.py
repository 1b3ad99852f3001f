"""privagg.estimate over DataFrames and Parquet (issue 49, item 2): the same report as the file path, the file
readers' errors naming the argument, the reports as pandas and Polars frames, and their plots."""

from __future__ import annotations

import sys

import matplotlib

matplotlib.use("Agg")  # before pyplot: the tests draw off screen

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import privagg
from privagg import ParameterError
from privagg.io import InputFormat, read_codes, read_items, read_vectors_counted
from privagg.simulate.frequency import estimate_frequencies, estimate_vector_sum, item_encoder
from privagg.simulate.heavy_hitters import estimate_heavy_hitters

APPS = ["mail", "maps", "chat", "news", "game"]
RUN = dict(epsilon=1, delta=1e-8, seed=3)
# the apps counted alone: by default FE1 also counts every item of the 2^24 the text is hashed into (seconds a run;
# the apps' counts the same), a default the file readers' test keeps in its slow case
APPS_ONLY = dict(candidates=APPS, full_domain=False)


@pytest.fixture(scope="module")
def events() -> pd.DataFrame:
    rng = np.random.default_rng(7)
    n = 6000
    return pd.DataFrame({"app": rng.choice(APPS, n, p=[0.4, 0.25, 0.2, 0.1, 0.05]),
                         "code": rng.integers(0, 50, n), "x": rng.random(n), "y": rng.random(n)})


def polars():
    return pytest.importorskip("polars")  # the frames extra (in test's all) installs it: this skips only without it


def _frames(events: pd.DataFrame, tmp_path, columns: list[str]) -> dict[str, object]:
    """The same columns as a pandas frame, a Polars DataFrame and LazyFrame, a Parquet file and a dataset folder."""
    pl = polars()
    tmp_path.mkdir(exist_ok=True)
    path = tmp_path / "events.parquet"
    pq.write_table(pa.Table.from_pandas(events[columns], preserve_index=False), path, row_group_size=1000)
    folder = tmp_path / "events"
    folder.mkdir()
    half = len(events) // 2
    for i, part in enumerate((events[columns][:half], events[columns][half:])):
        pq.write_table(pa.Table.from_pandas(part, preserve_index=False), folder / f"part-{i}.parquet")
    return {"pandas": events, "polars": pl.from_pandas(events), "lazy": pl.from_pandas(events).lazy(),
            "parquet": path, "dataset": folder}


def _rows(report):
    return [(e.item, e.estimate, e.stderr, getattr(e, "true_count", None)) for e in report.estimates]


@pytest.mark.parametrize("column, options", [("app", APPS_ONLY), ("code", dict(domain_size=50)),
                                             pytest.param("app", dict(candidates=APPS), marks=pytest.mark.slow)])
def test_frames_and_parquet_give_the_file_readers_report(events, tmp_path, column, options):
    """Every kind of input gives the report ``privagg estimate`` gives over the same column of a file: the same
    codes, so the same seeded run, bit for bit."""
    path = tmp_path / "items.csv"
    events[[column]].to_csv(path, index=False)
    encoder = item_encoder(options.get("domain_size", 2**24), None, RUN["seed"])
    codes = read_codes(path, encoder, InputFormat(column=column)).codes
    candidates = encoder.encode(APPS, public=True) if "candidates" in options else None
    expected, _ = estimate_frequencies("fe1", codes, encoder, candidate_codes=candidates,
                                       full_domain=options.get("full_domain"), **RUN)
    for name, data in _frames(events, tmp_path, [column]).items():
        report = privagg.estimate(data, "fe1", item=column, **RUN, **options)
        assert type(report).__name__ == "EstimateReport", name
        assert report.n_users == len(events)
        assert _rows(report) == _rows(expected), name
        assert not report.privacy.private and "seeded simulation" in report.privacy.not_private_reason


def test_heavy_hitters_and_vectors_from_frames(events, tmp_path):
    values, _ = read_items(_csv(events, tmp_path, ["app"]), InputFormat(column="app"))
    expected, _ = estimate_heavy_hitters(values, phi=0.15, max_length=8, **RUN)
    for name, data in _frames(events, tmp_path, ["app"]).items():
        report = privagg.estimate(data, "fe-hh", item="app", phi=0.15, max_length=8, **RUN)
        assert [(h.item, h.estimate) for h in report.heavy_hitters] == \
            [(h.item, h.estimate) for h in expected.heavy_hitters], name
    assert {"mail", "maps", "chat"} <= {h.item for h in expected.heavy_hitters}
    vectors, _ = read_vectors_counted(_csv(events, tmp_path, ["x", "y"]), InputFormat())
    expected, _ = estimate_vector_sum("blanket-vector", vectors, **RUN)
    for name, data in _frames(events, tmp_path / "vectors", ["x", "y"]).items():
        columns = None if name == "parquet" else ["x", "y"]  # a file's every column is a coordinate, as --input's
        report = privagg.estimate(data, "blanket-vector", columns=columns, **RUN)
        assert [(e.item, e.estimate) for e in report.estimates] == \
            [(e.item, e.estimate) for e in expected.estimates], name


def _csv(events, tmp_path, columns):
    path = tmp_path / f"{'-'.join(columns)}.csv"
    events[columns].to_csv(path, index=False)
    return path


def test_an_unseeded_run_is_private_and_unbiased(events):
    """Secure randomness by default, as the command line: a private report, with no true counts in it; the
    estimates within 5.5 standard errors of the truth. The run cannot be seeded (that is what it tests), so the
    tolerance is set by the chance of a false alarm: 2 x 5 items x (1 - Phi(5.5)) = 2e-7 a run. At 4 standard
    errors (3e-4 a run) a fresh clone's CI failed it once at z = 4.5; 1,000 z-scores of 200 such runs had mean
    0.003, sd 0.99 and largest |z| 3.77: unbiased, the stderr right."""
    report = privagg.estimate(events, "fe1", item="app", epsilon=1, delta=1e-8, **APPS_ONLY)
    assert report.privacy.private and report.privacy.not_private_reason is None
    assert "secure" in report.simulation.randomness
    truth = events["app"].value_counts()
    for e in report.estimates:
        assert e.true_count is None
        assert abs(e.estimate - truth[e.item]) < 5.5 * e.stderr, (e, truth[e.item])


@pytest.mark.parametrize("frame, field, message", [
    (pd.DataFrame({"app": ["mail", 3, "chat", 2.5]}), "item", "column 'app' of a pandas DataFrame mixes 'float', "
                                                              "'int', 'str'"),
    (pd.DataFrame({"app": ["mail", None, "chat"]}), "item", "nothing on row 2 of column 'app' of a pandas DataFrame"),
    (pd.DataFrame({"app": [1.0, np.nan, 3.0]}), "item", "nothing on row 2 of column 'app'"),
    (pd.DataFrame({"app": [0.5, 1.5, 2.0]}), "item", "values of type double in column 'app'"),
    (pd.DataFrame({"app": pd.Series([], dtype=object)}), "item", "0 in column 'app' of a pandas DataFrame"),
    (pd.DataFrame({"other": ["mail", "chat"]}), "item", "must be a column of a pandas DataFrame: one of 'other'"),
    (pd.DataFrame({"app": [1, 2, 70]}), "item", "integers in [0, 50)"),
    ({"app": [1, 2]}, "data", "got dict"),
])
def test_bad_columns_are_named(frame, field, message):
    with pytest.raises(ParameterError) as err:
        privagg.estimate(frame, "fe1", item="app", domain_size=50, **RUN)
    assert err.value.field == field and message in str(err.value), str(err.value)


def test_bad_polars_columns_are_named():
    pl = polars()
    with pytest.raises(ParameterError, match=r"item must be .* nothing on row 2 of column 'app' of a Polars Data"):
        privagg.estimate(pl.DataFrame({"app": [1.0, float("nan"), 2.0]}), "fe1", item="app", domain_size=50, **RUN)
    with pytest.raises(ParameterError, match="item must be a column of a Polars LazyFrame: one of 'a'"):
        privagg.estimate(pl.LazyFrame({"a": [1, 2]}), "fe1", item="app", domain_size=50, **RUN)


def test_wrong_arguments_for_the_protocol(events, tmp_path):
    for kwargs, field in [(dict(item=None), "item"), (dict(item="app", columns=["x"]), "columns")]:
        with pytest.raises(ParameterError) as err:
            privagg.estimate(events, "fe1", **kwargs, **RUN)
        assert err.value.field == field
    with pytest.raises(ParameterError, match="item must be left out for blanket-vector"):
        privagg.estimate(events, "blanket-vector", item="x", **RUN)
    with pytest.raises(ParameterError, match="columns must be numbers in every column"):
        privagg.estimate(events, "blanket-vector", columns=["x", "app"], **RUN)
    with pytest.raises(ParameterError, match="domain_size is required for grr"):
        privagg.estimate(events, "grr", item="app", **RUN)
    with pytest.raises(ParameterError, match=r"data must be .*\(a folder of Parquet files\), got .* \(no file in it\)"):
        privagg.estimate(tmp_path, "fe1", item="app", **RUN)  # an empty folder


def test_missing_drop_says_the_report_is_not_private():
    frame = pd.DataFrame({"app": [1.0, np.nan, 3.0] * 20})
    report = privagg.estimate(frame, "fe1", item="app", domain_size=50, missing="drop", epsilon=1, delta=1e-8)
    assert report.n_users == 40 and not report.privacy.private
    assert "users left out" in report.privacy.not_private_reason
    assert report.warnings[0].startswith("20 users with a missing value were left out")


def test_reports_as_pandas_and_polars(events):
    pl = polars()
    report = privagg.estimate(events, "fe1", item="app", **APPS_ONLY, **RUN)
    frame = report.to_pandas()
    assert frame.index.name == "item" and list(frame.columns) == ["estimate", "stderr", "true_count"]
    assert frame.loc[report.estimates[0].item, "estimate"] == report.estimates[0].estimate
    table = report.to_polars()
    assert table.columns == ["item", "estimate", "stderr", "true_count"]
    assert table["item"].to_list() == [e.item for e in report.estimates]
    assert table["stderr"].to_list() == [e.stderr for e in report.estimates]
    released = privagg.estimate(events, "fe1", item="app", **APPS_ONLY, epsilon=1, delta=1e-8)
    assert list(released.to_pandas().columns) == ["estimate", "stderr"]  # nothing from the data in a release
    assert isinstance(released.to_polars(), pl.DataFrame)


def test_results_to_polars():
    pl = polars()
    params = privagg.calibrate("blanket-vector", epsilon=1, delta=1e-6, n_users=1000, domain_size=3)
    total = privagg.VectorSum(params, np.array([1.0, 2.0, 3.0]), np.array([0.1, 0.2, 0.3]))
    table = total.to_polars(labels=["age", "height", "weight"])
    assert isinstance(table, pl.DataFrame) and table.columns == ["coordinate", "estimate", "stderr"]
    assert table.rows() == [("age", 1.0, 0.1), ("height", 2.0, 0.2), ("weight", 3.0, 0.3)]


@pytest.mark.parametrize("module, says", [
    ("pandas", "to_pandas() needs pandas, which the light install leaves out: pip install pandas (or pip install "
               "'privagg[pandas]'"),
    ("polars", "to_polars() needs Polars, which the light install leaves out: pip install polars (or pip install "
               "'privagg[frames]'")])
def test_a_frame_without_its_library_says_how_to_get_it(module, says, monkeypatch):
    """The light install has neither pandas nor Polars: each method's error names the command that installs it."""
    params = privagg.calibrate("blanket-vector", epsilon=1, delta=1e-6, n_users=1000, domain_size=3)
    total = privagg.VectorSum(params, np.array([1.0, 2.0, 3.0]), np.array([0.1, 0.2, 0.3]))
    monkeypatch.setitem(sys.modules, module, None)  # import refused, as where it is not installed
    with pytest.raises(ImportError) as refused:
        getattr(total, f"to_{module}")()
    assert str(refused.value).startswith(says) and str(refused.value).endswith("to_dict() gives the same table "
                                                                                "without it")


@pytest.mark.parametrize("protocol, kwargs, listed", [
    ("fe1", dict(item="app", **APPS_ONLY), "estimates"),
    ("fe-hh", dict(item="app", phi=0.15, max_length=8), "heavy_hitters"),
    ("blanket-vector", dict(columns=["x", "y"]), "estimates"),
])
def test_plot_draws_the_estimates_with_95_percent_error_bars(events, protocol, kwargs, listed):
    report = privagg.estimate(events, protocol, **kwargs, **RUN)
    rows = getattr(report, listed)
    ax = report.plot()
    from matplotlib.container import BarContainer

    (bars,) = [c for c in ax.containers if isinstance(c, BarContainer)]
    assert [b.get_height() for b in bars.patches] == pytest.approx([r.estimate for r in rows])
    (segments,) = [c.get_segments() for c in bars.errorbar.lines[2]]
    assert [s[1][1] - s[0][1] for s in segments] == pytest.approx([2 * 1.96 * r.stderr for r in rows])
    assert [s[0][1] + s[1][1] for s in segments] == pytest.approx([2 * r.estimate for r in rows])
    assert "NOT PRIVATE (seeded simulation" in ax.get_title()
    assert [t.get_text() for t in ax.get_xticklabels()] == [str(getattr(r, "name", None) or r.item) for r in rows]
    import matplotlib.pyplot as plt

    plt.close(ax.figure)
    released = privagg.estimate(events, protocol, **kwargs, epsilon=1, delta=1e-8)
    ax = released.plot(plt.figure().add_subplot())
    assert ax.get_title().splitlines()[1].startswith("privacy: (1, 1e-08)-DP")
    plt.close(ax.figure)


def _event_log(seed: int = 5, n: int = 4000):
    """An event log: n users with 1 to 30 rows each (heavy-tailed), mostly their favourite app."""
    rng = np.random.default_rng(seed)
    rows = np.minimum(rng.zipf(1.6, n), 30)
    users = np.repeat(np.arange(n), rows)
    favourite = rng.integers(0, len(APPS), n)
    other = rng.integers(0, len(APPS), users.size)
    items = np.where(rng.random(users.size) < 0.7, favourite[users], other)
    return pd.DataFrame({"device": (users * 7919) % 100_003, "app": np.array(APPS)[items]})


def test_bounding_picks_distinct_items_uniformly():
    """A user whose rows are a ten times, b and c once holds each with probability 1/3 (distinct items, not rows),
    and with L = 2 each pair of them with probability 1/3: over 30,000 such users each count is Binomial(30000,
    1/3), within 4 sd (82). Users come out in the order of their keys, each with his own items."""
    from privagg.io.users import RECORD, bound_codes

    n = 30_000
    records = np.empty(12 * n, dtype=RECORD)
    records["user"] = np.repeat(np.arange(n, dtype=np.uint64) * np.uint64(0x9E3779B97F4A7C15), 12)
    records["code"] = np.tile(np.array([0] * 10 + [1, 2]), n)
    sd = np.sqrt(n * (1 / 3) * (2 / 3))
    chosen, truncated, lost = bound_codes(records, 1, -1, 11)
    assert chosen.shape == (n, 1) and truncated == n and lost == 0
    assert np.all(np.abs(np.bincount(chosen.ravel(), minlength=3) - n / 3) < 4 * sd), np.bincount(chosen.ravel())
    pairs, _, _ = bound_codes(records, 2, -1, 11)
    missing = 3 - pairs.sum(axis=1)  # the item a pair leaves out
    assert np.all(np.abs(np.bincount(missing, minlength=3) - n / 3) < 4 * sd), np.bincount(missing)
    padded, truncated, _ = bound_codes(records, 4, 99, 11)
    assert truncated == 0 and (padded[:, 3] == 99).all() and (np.sort(padded[:, :3], axis=1) == [0, 1, 2]).all()
    few = np.array([(4, 6), (4, 6), (9, 2), (1, -1)], dtype=RECORD)
    assert bound_codes(few, 1, -1, 0)[0].tolist() == [[6], [2]] and bound_codes(few, 1, -1, 0)[2] == 1


def test_user_bounding_estimates_the_bounded_data():
    """user=: n is the distinct users, the estimates unbiased for the counts among the bounded items (each within
    4 stderr of the true count the evaluation shows), the neighbouring relation user-level."""
    from privagg.simulate.users import user_level

    USER_ROWS = user_level(1)
    log = _event_log()
    report = privagg.estimate(log, "fe1", item="app", user="device", **APPS_ONLY, **RUN)
    assert report.n_users == log["device"].nunique() < len(log)
    assert report.privacy.neighbouring == USER_ROWS and "all of one user's rows" in report.privacy.neighbouring
    assert sum(e.true_count for e in report.estimates) == report.n_users
    for e in report.estimates:
        assert abs(e.estimate - e.true_count) < 4 * e.stderr, e
    again = privagg.estimate(log, "fe1", item="app", user="device", **APPS_ONLY, **RUN)
    assert _rows(again) == _rows(report)  # the seed fixes the bounding too
    released = privagg.estimate(log, "fe1", item="app", user="device", **APPS_ONLY, epsilon=1, delta=1e-8)
    assert released.privacy.private and released.privacy.neighbouring == USER_ROWS
    hh = privagg.estimate(log, "fe-hh", item="app", user="device", phi=0.15, max_length=8, **RUN)
    assert hh.n_users == report.n_users and hh.privacy.neighbouring == USER_ROWS


def test_user_bounding_refuses_what_it_cannot_state():
    log = _event_log(n=300)
    cases = [
        (dict(max_items=2, max_rows=2), "max_rows", "left out for fe1"),
        (dict(max_items=0), "max_items", "got 0"),
        (dict(user="nope"), "user", "must be a column of a pandas DataFrame"),
    ]
    for kwargs, field, message in cases:
        with pytest.raises(ParameterError) as err:
            privagg.estimate(log, "fe1", item="app", **{"user": "device", **kwargs}, candidates=APPS, **RUN)
        assert err.value.field == field and message in str(err.value), str(err.value)
    with pytest.raises(ParameterError, match="user must be a user on every row, got nothing on row 2 of column"):
        privagg.estimate(pd.DataFrame({"device": ["a", None, "b"], "app": ["mail"] * 3}), "fe1", item="app",
                         user="device", candidates=APPS, **RUN)
    with pytest.raises(ParameterError, match="max_items must be 1 for blanket-vector"):
        privagg.estimate(pd.DataFrame({"device": [1, 2], "x": [0.1, 0.2]}), "blanket-vector", columns=["x"],
                         user="device", max_items=2, **RUN)


def test_user_bounding_with_missing_items_dropped():
    """missing="drop" leaves out rows: a user with an item left keeps n and the guarantee (the relation covers
    all of his rows); a user with none would be left out, making n a count of the data: refused, naming user."""
    frame = pd.DataFrame({"device": [1, 1, 2, 2, 3] * 20 + [9], "app": ["mail", None, "maps", "chat", "news"] * 20
                          + ["mail"]})
    report = privagg.estimate(frame, "fe1", item="app", user="device", missing="drop", candidates=APPS, epsilon=1,
                              delta=1e-8)
    assert report.n_users == 4 and report.privacy.private and not any("left out" in w for w in report.warnings)
    frame.loc[len(frame)] = [10, None]
    with pytest.raises(ParameterError, match="user must be users with an item .* got 1 users with no item"):
        privagg.estimate(frame, "fe1", item="app", user="device", missing="drop", candidates=APPS, **RUN)


def test_arguments_the_protocol_does_not_read_are_refused(events):
    for protocol, kwargs in [("fe1", dict(item="app", phi=0.1)), ("fe1", dict(item="app", max_items=2)),
                             ("fe-hh", dict(item="app", hash_key="00")),
                             ("blanket-vector", dict(columns=["x"], full_domain=True))]:
        (name,) = set(kwargs) - {"item", "columns"}
        with pytest.raises(ParameterError) as err:
            privagg.estimate(events, protocol, **kwargs, **RUN)
        assert err.value.field == name and f"left out for {protocol}" in str(err.value)


def _bad_frames():
    """(name, pandas frame or None, Polars frame maker, arguments, field, message): issue 49's bad input."""
    import polars as pl

    mixed = pd.DataFrame({"u": [1, 2, 3], "app": ["a", 2, "c"]})
    return [
        ("mixed items", mixed, lambda: pl.DataFrame({"u": [1, 2, 3], "app": pl.Series(["a", 2, "c"], dtype=pl.Object)}),
         dict(user="u"), "item", "one kind of value throughout the column"),
        ("mixed items, one row a user", mixed,
         lambda: pl.DataFrame({"app": pl.Series(["a", 2, "c"], dtype=pl.Object)}), {}, "item", "one kind of value"),
        ("mixed users", pd.DataFrame({"u": [1, "x", 3], "app": ["a", "b", "c"]}),
         lambda: pl.DataFrame({"u": pl.Series([1, "x", 3], dtype=pl.Object), "app": ["a", "b", "c"]}),
         dict(user="u"), "user", "column 'u' of a"),
        ("nested items", None, lambda: pl.DataFrame({"app": [[1], [2], [3]]}), {}, "item",
         "got values of type large_list<item: int64> in column 'app'"),
        ("empty user column", pd.DataFrame({"u": pd.Series([], dtype="int64"), "app": pd.Series([], dtype=object)}),
         None, dict(user="u"), "user", "at least 2 users with a value, got 0 in column 'u' of a"),
        ("a row without a user", pd.DataFrame({"u": [1.0, None, 3.0], "app": ["a", "b", "c"]}), None, dict(user="u"),
         "user", "a user on every row, got nothing on row 2 of column 'u' of a"),
        ("a user with no item left", pd.DataFrame({"u": [1, 1, 2, 3], "app": ["a", "b", None, "c"]}), None,
         dict(user="u", missing="drop"), "user", "got 1 users with no item"),
        ("max_items 0", pd.DataFrame({"u": [1, 2, 3], "app": ["a", "b", "c"]}), None, dict(user="u", max_items=0),
         "max_items", "an integer >= 1, got 0"),
    ]


@pytest.mark.parametrize("protocol, options", [("fe1", dict(candidates=["a", "b", "c"])),
                                               ("fe-hh", dict(phi=0.2, max_length=4))])
@pytest.mark.parametrize("case", [c[0] for c in _bad_frames()])
def test_bad_input_is_named_on_pandas_and_polars(case, protocol, options):
    """Issue 49's bad input, each a ParameterError naming the field, on a pandas and on a Polars frame, for the
    frequency and the heavy-hitter path: mixed item types (in Polars an Object column: its values reached Arrow
    as pointers, fe-hh then failed with ArrowInvalid), mixed user ids (a traceback on Polars), nested items (fe-hh:
    ArrowNotImplementedError), an empty user column (was named item), a row without a user (named the item
    column), a user left without an item by missing="drop", max_items=0."""
    import polars as pl

    _, frame, polars_frame, kwargs, field, message = next(c for c in _bad_frames() if c[0] == case)
    frames = [f for f in (frame, polars_frame() if polars_frame else pl.from_pandas(frame)) if f is not None]
    for f in frames:
        with pytest.raises(ParameterError) as err:
            privagg.estimate(f, protocol, item="app", **kwargs, **options, epsilon=1, delta=1e-8, seed=1)
        assert err.value.field == field and message in str(err.value), str(err.value)


def test_vectors_by_user_name_the_user_column():
    """A vector table's row without a user names the user column (it named the vector columns)."""
    frame = pd.DataFrame({"u": [1.0, None, 3.0], "x": [0.1, 0.2, 0.3]})
    with pytest.raises(ParameterError, match="user must be a user on every row, got nothing on row 2 of column 'u'"):
        privagg.estimate(frame, "blanket-vector", columns=["x"], user="u", epsilon=1, delta=1e-8, seed=1)


def test_nested_values_in_a_parquet_file_are_named(tmp_path):
    """fe-hh over a Parquet file whose item column holds lists: "integers or strings" (it said the file was not
    a readable Parquet file: the cast to text failed), as the frequency path says."""
    path = tmp_path / "nested.parquet"
    pq.write_table(pa.table({"app": [[1], [2], [3]] * 30}), path)
    for protocol, options in [("fe1", {}), ("fe-hh", dict(phi=0.2, max_length=4))]:
        with pytest.raises(ParameterError, match="data must be integers or strings, got values of type list"):
            privagg.estimate(path, protocol, item="app", epsilon=1, delta=1e-8, seed=1, **options)


def test_vector_protocols_take_their_options_and_refuse_unknown_ones():
    """A reviewer's run: any protocol option (levels, coordinates_per_user, honest_fraction) given to
    privagg.estimate for a vector protocol was a TypeError from deep inside; an unknown one too."""
    frame = pd.DataFrame(np.full((2000, 2), 0.5), columns=["a", "b"])
    run = dict(columns=["a", "b"], epsilon=1.0, delta=1e-3, seed=1)
    report = privagg.estimate(frame, "blanket-vector", levels=3, honest_fraction=0.9, **run)
    assert report.parameters["levels"] == 3 and report.parameters["honest_fraction"] == 0.9
    with pytest.raises(ParameterError):
        privagg.estimate(frame, "blanket-vector", bogus=1, **run)


@pytest.mark.parametrize("given", [dict(honest_fraction=0.5), dict(top=1), dict(candidates=["zz"]),
                                   dict(mode="fast"), dict(foo=1)])
def test_fe_hh_refuses_what_its_run_does_not_read(given):
    """A reviewer's run: fe-hh took honest_fraction=0.5 (a privacy assumption), top, candidates, mode and foo, and
    ran without them, stating G = 1."""
    frame = pd.DataFrame({"w": ["ab", "cd"] * 50})
    name = next(iter(given))
    with pytest.raises(ParameterError, match=rf"^{name} must be left out for fe-hh"):
        privagg.estimate(frame, "fe-hh", item="w", epsilon=1.0, delta=1e-6, phi=0.2, max_length=2, **given)


def test_a_pure_protocol_takes_no_delta():
    """A reviewer's run: laplace (grr, oue, olh, hadamard) in privagg.estimate needed delta=0 where calibrate and
    plan take it left out."""
    frame = pd.DataFrame({"app": ["mail", "maps"] * 100})
    for protocol, more in (("laplace", {}), ("grr", dict(domain_size=8))):
        report = privagg.estimate(frame, protocol, item="app", epsilon=1.0, candidates=["mail", "maps"], seed=1, **more)
        assert report.privacy.delta == 0
