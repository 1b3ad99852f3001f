"""The Python API as a newcomer meets it: dir/help, the results' plain forms, the sampling family's errors."""

import subprocess
import sys

import numpy as np
import pytest

import privagg
from privagg import ParameterError

PUBLIC = {"calibrate", "load_parameters", "client", "analyzer", "shuffle", "MessageBatch", "ItemEncoder",
          "FrequencyTable", "HeavyHitterList", "VectorSum", "ParameterError", "PrivaggWarning", "REGISTRY",
          "__version__", "simulate", "engine", "estimate", "plan"}
HEAVY = ("scipy", "numba", "pyarrow", "rich", "typer", "dask", "pydantic", "wordfreq")


def test_dir_lists_the_public_api_and_not_the_helpers():
    names = set(dir(privagg))
    assert PUBLIC <= names
    assert not {"Any", "annotations", "importlib", "functools", "inspect", "Callable", "errors"} & names
    assert all(name in PUBLIC or (name.startswith("__") and name.endswith("__")) for name in names), names
    for name in PUBLIC - {"__version__"}:
        assert getattr(privagg, name) is not None


def test_dir_and_the_results_import_no_heavy_module():
    code = ("import sys, privagg; dir(privagg); privagg.FrequencyTable; privagg.VectorSum; "
            f"print(sorted(m for m in {HEAVY} if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_help_shows_the_api():
    doc = privagg.__doc__
    for name in ("estimate(", "to_polars", "plot()", "calibrate", "load_parameters", "client(", "analyzer(",
                 "shuffle(", "ItemEncoder", "FrequencyTable",
                 "VectorSum", "to_dict", "to_pandas", "ParameterError", "simulate"):
        assert name in doc, name
    assert privagg.simulate.simulate is not None  # the entry point the docstring names


@pytest.fixture(scope="module")
def table():
    params = privagg.calibrate("grr", epsilon=2, n_users=1000, domain_size=4)
    rng = np.random.default_rng(1)
    messages = privagg.client(params).randomize(rng.integers(0, 4, 1000), rng)
    analyzer = privagg.analyzer(params)
    return analyzer.finalize(analyzer.agg_update(analyzer.agg_init(), privagg.shuffle(messages, rng)))


def test_frequency_table_to_dict(table):
    assert isinstance(table, privagg.FrequencyTable)
    plain = table.to_dict()
    assert list(plain) == [0, 1, 2, 3]
    assert [row["estimate"] for row in plain.values()] == pytest.approx(table.estimates.tolist())
    assert [row["stderr"] for row in plain.values()] == pytest.approx(table.standard_error().tolist())
    assert all(type(v) is float for row in plain.values() for v in row.values())
    assert list(table.to_dict(labels=["w", "x", "y", "z"])) == ["w", "x", "y", "z"]
    assert list(table.to_dict(labels={1: "one"})) == [0, "one", 2, 3]
    candidates = table.restricted_to([1, 3]).to_dict()
    assert list(candidates) == [1, 3] and candidates[3]["estimate"] == pytest.approx(table.estimates[3])
    with pytest.raises(ParameterError, match="labels must be one label per item"):
        table.to_dict(labels=["a", "a", "b", "c"])
    with pytest.raises(ParameterError, match="labels must be an ItemEncoder"):
        table.to_dict(labels="abcd")


def test_frequency_table_labels_text_items_by_the_encoder(table):
    pytest.importorskip("pyarrow")
    encoder = privagg.ItemEncoder(4, key=b"k")
    codes = encoder.encode(["apple", "banana"], public=True)
    plain = table.to_dict(labels=encoder)
    assert "apple" in " ".join(map(str, plain)) and "banana" in " ".join(map(str, plain))
    for code in range(4):
        assert plain[encoder.label(code)]["estimate"] == pytest.approx(table.estimates[code])
    assert len(plain) == 4 and {encoder.label(c) for c in codes} <= set(plain)


def test_vector_sum_to_dict_by_coordinate():
    params = privagg.calibrate("blanket-vector", epsilon=1, delta=1e-6, n_users=1000, domain_size=3)
    total = privagg.VectorSum(params, np.array([1.0, 2.0, 3.0]), np.array([0.1, 0.2, 0.3]))
    assert total.to_dict() == {0: {"estimate": 1.0, "stderr": 0.1}, 1: {"estimate": 2.0, "stderr": 0.2},
                               2: {"estimate": 3.0, "stderr": 0.3}}
    assert list(total.to_dict(labels=["age", "height", "weight"])) == ["age", "height", "weight"]
    sparse = privagg.VectorSum(params, np.array([5.0]), np.array([0.5]), coordinates=np.array([2]),
                               standard_error_bounds=np.array([0.7]))
    assert sparse.to_dict() == {2: {"estimate": 5.0, "stderr": 0.5, "stderr_bound": 0.7}}


def test_to_pandas_names_the_install_when_pandas_is_missing(table, monkeypatch):
    monkeypatch.setitem(sys.modules, "pandas", None)  # import pandas then raises ImportError
    with pytest.raises(ImportError, match=r"pip install pandas"):
        table.to_pandas()
    params = privagg.calibrate("blanket-vector", epsilon=1, delta=1e-6, n_users=1000, domain_size=3)
    with pytest.raises(ImportError, match=r"pip install pandas"):
        privagg.VectorSum(params, np.zeros(3), np.ones(3)).to_pandas()


def test_to_pandas_in_the_environment_make_builds(table):
    """to_pandas() failed in the environment the README builds: pandas is in the extras make demo and make test
    install (pyproject.toml's all), so this runs, never skips."""
    import tomllib
    from pathlib import Path

    extras = tomllib.loads((Path(__file__).parent.parent / "pyproject.toml").read_text())["project"][
        "optional-dependencies"]
    assert "pandas" in extras["all"][0] and "privagg[all]" in extras["test"]
    frame = table.to_pandas(labels=["w", "x", "y", "z"])
    assert list(frame.index) == ["w", "x", "y", "z"] and frame.index.name == "item"
    assert list(frame.columns) == ["estimate", "stderr"]
    assert frame["estimate"].tolist() == pytest.approx(table.estimates.tolist())


def test_the_beta_and_n_given_are_the_ones_reported():
    with pytest.raises(ParameterError) as err:  # ceil(0.24 x 10) = 3 holders x 4 categories = 12 > 10 users
        privagg.calibrate("dpcs", epsilon=1, delta=1e-6, n_users=10, domain_size=4, min_count_fraction=0.24)
    message = str(err.value)
    assert err.value.got == 0.24 and message.endswith("got 0.24"), message
    assert "n = 10 users" in message and "N = 4 categories" in message and "need 12 users" in message
    assert "largest min-count-fraction that fits is 2/10 = 0.2" in message
    with pytest.raises(ParameterError, match="fewer users than categories"):
        privagg.calibrate("dpds", epsilon=1, delta=1e-6, n_users=3, domain_size=4, min_count_fraction=0.25)


@pytest.mark.parametrize("protocol,options,expected", [
    ("dpcs", dict(min_count_fraction=0.5), ["min-count-fraction", "(0, 0.25] with N = 4 categories",
                                            "smallest category's share", "got 0.5"]),
    ("dpcs", dict(min_count_fraction=0.2, sampling_probability=2), ["sampling-probability must be in (0, 1]",
                                                                    "record is counted", "got 2"]),
    ("dpds", dict(min_count_fraction=0.2, honest_fraction=0.5), ["honest-fraction", "beta = 0.2",
                                                                 "n = 1000 users", "all 200 holders", "got 0.5"]),
    ("tss", dict(min_count_fraction=0.2, report_fraction=1.5), ["report-fraction must be in (0, 1]",
                                                                "N = 4 categories", "got 1.5"]),
    ("tss", dict(min_count_fraction=0.2, report_fraction=0.3), ["a multiple of 1/N = 0.25 with N = 4 categories",
                                                                "nearest is 0.25", "got 0.3"]),
])
def test_sampling_errors_name_the_parameter_its_range_and_the_value(protocol, options, expected):
    with pytest.raises(ParameterError) as err:
        privagg.calibrate(protocol, epsilon=1, delta=1e-6, n_users=1000, domain_size=4, **options)
    for part in expected:
        assert part in str(err.value), (part, str(err.value))


def test_the_error_bound_beta_is_not_the_min_count_fraction():
    params = privagg.calibrate("dpds", epsilon=1, delta=1e-6, n_users=1000, domain_size=4, min_count_fraction=0.2)
    with pytest.raises(ParameterError, match=r"beta must be in \(0, 1\): the probability .* \(not the min-count"):
        params.max_error_bound(2)


@pytest.mark.parametrize("name, options", [("fe1", dict(delta=1e-10, domain_size=2**10, c=1)),
                                           ("grr", dict(domain_size=8)),
                                           ("blanket-vector", dict(delta=1e-6, domain_size=4)),
                                           ("laplace", dict(domain_size=8))])
def test_finalize_warns_of_a_batch_given_twice_and_of_a_batch_left_out(name, options):
    """A reviewer's finding: the CLI warns when the messages are far from what the users send, the Python API's
    finalize of a batch applied twice said nothing (estimates doubled). One batch: no warning; twice, or half
    of it: a PrivaggWarning naming the counts, pointing at the caller's line."""
    import warnings

    from privagg import PrivaggWarning

    n = 4000
    p = privagg.calibrate(name, epsilon=1.0, n_users=n, **options)
    rng = np.random.default_rng(5)
    values = rng.random((n, 4)) if name == "blanket-vector" else rng.integers(0, p.domain_size, n)
    analyzer = privagg.analyzer(p)
    if p.model == "central":  # the curator's records, one a user
        batch = privagg.MessageBatch({"value": values})
    else:
        batch = privagg.client(p).randomize(values, rng=6)
    once = analyzer.agg_update(analyzer.agg_init(), batch)
    with warnings.catch_warnings():
        warnings.simplefilter("error", PrivaggWarning)
        analyzer.finalize(once)
        if p.model != "central":  # a curator's noise does not depend on who reported
            analyzer.finalize(once, reporters=n)
    half = batch.take(slice(len(batch) // 2))
    for agg in (analyzer.agg_update(once, batch), analyzer.agg_update(analyzer.agg_init(), half)):
        with pytest.warns(PrivaggWarning, match=f"where the guarantee counts on .* from {n} users") as caught:
            analyzer.finalize(agg)
        assert caught[0].filename == __file__
