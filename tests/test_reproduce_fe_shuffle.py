"""privagg reproduce fe-shuffle on its quick grid: the files it writes, and properties of what they hold."""

import math

import pytest
from reproduction import png_size, quick_run, read

from privagg.reproduce import fe_shuffle as fe

pytestmark = pytest.mark.slow  # about 5-6 s: the quick grid's runs and three figures

K_SIGMA = 4  # standard errors of an empirical quantile allowed (chosen before the first run, never widened)
SEED = 0


@pytest.fixture(scope="module")
def written(tmp_path_factory):
    return quick_run(fe, tmp_path_factory.mktemp("fe_shuffle"), seed=SEED)



def ran(out):
    return [r for r in read(out / "points.csv")[1] if r["status"] == "run"]


def test_files_summary_and_progress(written):
    out, summary, calls = written
    assert set(fe.FILES) <= {p.name for p in out.iterdir()}
    assert set(summary["files"]) == set(fe.FILES)
    assert summary["grid"] == "quick"
    assert {c[0] for c in calls} == set(fe.STAGES.values())
    for stage in fe.STAGES.values():  # increments that add up to the stage's total
        steps = [c for c in calls if c[0] == stage]
        assert sum(c[1] for c in steps) == steps[0][2]
    assert list(summary["fe1_messages_by_c"]) == [f"{c:g}" for c in fe.QUICK.c_values]


def test_pngs_are_images(written):
    out = written[0]
    for name in fe.PLOTS:
        width, height = png_size(out / name)
        assert width > 600 and height > 400


def test_csv_columns_and_rows(written):
    out = written[0]
    for name, columns in (("points.csv", fe.POINT_COLUMNS), ("sdpfe.csv", fe.SDPFE_COLUMNS),
                          ("fits.csv", fe.FIT_COLUMNS)):
        header, rows = read(out / name)
        assert tuple(header) == columns, name
        assert rows, name
    rows = read(out / "points.csv")[1]
    assert len(rows) == len(fe.experiment_points(fe.QUICK))
    assert {r["experiment"] for r in rows} == {"c", "n", "B"}
    for r in rows:
        assert r["status"] in ("run", "not run", "refused"), r
        if r["status"] == "run":
            assert r["note"] == "" and float(r["messages_per_user"]) >= 1
            assert 0 <= float(r["error_p50"]) <= float(r["error_p90"]) <= float(r["error_p99"]) <= float(r["error_max"])
            assert float(r["delta"]) == (0.0 if r["protocol"] in ("laplace", *fe.LOCAL) else fe.DELTA)
        else:
            assert r["note"] and r["error_p50"] == "", r


def test_settings_not_run_follow_the_stated_caps(written):
    """Local baselines stop above 2^16; FE0 above FE0_MESSAGES_MAX messages a user; OUE is refused by the
    simulator (its messages do not fit) or skipped by the time cap; every other setting of the grid runs."""
    rows = read(written[0] / "points.csv")[1]
    for r in rows:
        n, B = int(r["n_users"]), int(r["domain_size"])
        if r["protocol"] in fe.LOCAL and B > fe.LOCAL_DOMAIN_MAX:
            assert r["status"] == "not run" and "2^16" in r["note"]
        elif r["protocol"] == "fe0" and r["status"] != "run":
            assert r["status"] == "not run" and float(r["messages_expected"]) > fe.FE0_MESSAGES_MAX
        elif r["protocol"] == "oue" and r["status"] != "run":
            assert r["status"] == "refused" or "OUE only" in r["note"], r
        elif r["protocol"] == "olh" and r["status"] != "run":
            assert n * B > fe.OLH_WORK_MAX
        else:
            assert r["status"] == "run", r
    assert any(r["protocol"] == "fe0" and r["status"] == "not run" for r in rows)
    assert any(r["protocol"] in fe.LOCAL and r["status"] == "not run" for r in rows)


def collision_probability(q, b):
    return (q // b) * ((q % b) + q - b) / (q * (q - 1))


def test_fe1_parameters_and_messages(written):
    """b = floor(n / ln^c n), q the next prime, p_col from the paper's formula; realised messages per user within
    5 sd of 1 + rho (the total is n + n floor(rho) + Bin(n, frac)); fewer messages as c rises."""
    rows = [r for r in ran(written[0]) if r["protocol"] == "fe1"]
    assert rows
    for r in rows:
        n, c, q, b = int(r["n_users"]), float(r["c"]), int(r["modulus"]), int(r["bins"])
        assert b == math.floor(n / math.log(n) ** c)
        assert q >= max(b, int(r["domain_size"]))
        assert float(r["collision_probability"]) == pytest.approx(collision_probability(q, b), rel=1e-5)
        rho = float(r["rho"])
        assert rho == pytest.approx(float(r["mu"]) * b / n, rel=1e-5)
        frac = rho - math.floor(rho)
        sd = math.sqrt(n * frac * (1 - frac)) / n
        assert abs(float(r["messages_per_user"]) - (1 + rho)) <= 5 * sd + 1e-5
    by_c = sorted((r for r in rows if r["experiment"] == "c"), key=lambda r: float(r["value"]))
    assert [float(r["value"]) for r in by_c] == list(fe.QUICK.c_values)
    messages = [float(r["messages_per_user"]) for r in by_c]
    assert all(a > b for a, b in zip(messages, messages[1:])), messages
    assert messages[-1] < 1.2  # c = 3: almost a single message
    errors = [float(r["error_p90"]) for r in by_c]
    assert errors[-1] > 2 * errors[0]  # ... for several times the error


def gaussian_quantile_allowance(sigma, z, level, items, step):
    density = 2 * math.exp(-z * z / 2) / math.sqrt(2 * math.pi) / sigma
    return K_SIGMA * math.sqrt(level * (1 - level) / items) / density + step


@pytest.mark.parametrize("quantile,z,level", [("p50", 0.6744897501960817, 0.5), ("p90", 1.6448536269514722, 0.9)])
def test_balls_into_bins_error_matches_gaussian_prediction(written, quantile, z, level):
    """FE0 and FE1: an empty item's estimate (count - n p_col - mu) / (1 - p_col) has sd
    sigma = sqrt(n p_col (1 - p_col) + mu) / (1 - p_col), and |error| is close to |N(0, sigma)| (the count is
    a sum of many rare binomials; the odd skew cancels in |error|). The measured quantile over the row's items
    lies within K_SIGMA standard errors of an empirical quantile of that many items, plus one step of the
    estimates' lattice (counts are integers: an empirical quantile sits on a value |k - m| / (1 - p_col))."""
    rows = [r for r in ran(written[0]) if r["protocol"] in ("fe0", "fe1")]
    assert len(rows) >= 10
    assert any(r["error_over"].startswith("sample") for r in rows)  # both ways of measuring are exercised
    assert any(r["error_over"] == "domain" for r in rows)
    for r in rows:
        n, p, mu = int(r["n_users"]), float(r["collision_probability"] or 0), float(r["mu"])
        sigma = math.sqrt(n * p * (1 - p) + mu) / (1 - p)
        assert float(r[f"pred_{quantile}"]) == pytest.approx(z * sigma, rel=1e-5)
        allowance = gaussian_quantile_allowance(sigma, z, level, int(r["items"]), 1 / (1 - p))
        gap = float(r[f"error_{quantile}"]) - z * sigma
        assert abs(gap) <= allowance, (r["experiment"], r["label"], r["n_users"], r["domain_size"], gap, allowance)
        if quantile == "p50":
            assert float(r["p50_allowance"]) == pytest.approx(allowance, rel=1e-5)


def test_central_laplace_below_every_shuffle_protocol(written):
    """At every (n, B), the trusted curator's Laplace error is below FE0's and FE1's at each reported percentile,
    and below the blanket histogram's at p99 and at the max. Below p99 the blanket can dip under it where it
    degenerates: at B = 2^18, n = 20,000, most ids get no message and are all estimated at the one constant
    -gamma n / (B (1 - gamma)) (2.98 here, so p50 = p90 = 2.98 against Laplace's 5)."""
    rows = ran(written[0])
    laplace = {(r["n_users"], r["domain_size"]): r for r in rows if r["protocol"] == "laplace"}
    shuffle = [r for r in rows if r["protocol"] in fe.SHUFFLE]
    assert shuffle
    for r in shuffle:
        floor = laplace[r["n_users"], r["domain_size"]]
        for q in ("p50", "p90", "p99", "max"):
            below = float(floor[f"error_{q}"]) < float(r[f"error_{q}"])
            if r["protocol"] == "blanket-hist" and q in ("p50", "p90") and not below:
                assert r["error_p50"] == r["error_p90"], (r["label"], q)  # the empty ids' constant
            else:
                assert below, (r["label"], q)


def test_sdpfe_table_beside_ours(written):
    """sdpfe.csv holds SDPFE's shipped numbers exactly and ours beside them, for c = 1 and c = 3."""
    rows = read(written[0] / "sdpfe.csv")[1]
    assert {r["c"] for r in rows} == {"1", "3"}
    for r in rows:
        if r["quantity"] in fe.SDPFE[int(r["c"])]:
            assert float(r["sdpfe"]) == pytest.approx(fe.SDPFE[int(r["c"])][r["quantity"]], rel=1e-6)
        if r["quantity"].startswith("error"):
            assert "not SDPFE's" in r["note"]  # the quick grid is not SDPFE's point, and says so
