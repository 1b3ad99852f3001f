"""Every human-readable printing of a service's release labels its privacy from the release's guarantee: `privagg
result`, demo-service's three printers (fe1, fe-hh, the rounds' protocols) and the console's statement. A release
whose privacy block says private: false, or whose document's own flag is false, reads NOT PRIVATE and why, as
`privagg estimate` prints it; a private one reads private (issue 44's follow-ups)."""

import copy

import numpy as np
import pytest

from privagg import demos
from privagg.protocols.registry import calibrate
from privagg.service.shuffle.console import statement
from privagg.cli.clients import print_result
from privagg.cli.demo import _demo_heavy_hitters, _demo_sharing, demo_service

FE1 = calibrate("fe1", epsilon=1.0, delta=1e-6, n_users=40, domain_size=4, honest_fraction=0.5)
WHY = "too few reports: 15 of the 40 users' reports were counted"


def document(private: bool = True, flag: bool | None = None, **extra) -> dict:
    """A served release's JSON document as the analyzer answers it: its own flag first, its privacy block."""
    privacy = FE1.privacy if private else FE1.privacy.as_unfounded(WHY)
    return {"private": private if flag is None else flag, "protocol": "fe1", "n_users": 40,
            "estimates": [{"item": 1, "estimate": 20.0, "stderr": 5.0}], "privacy": privacy.to_dict(),
            "collection": {"reports": 40, "batches": 1, "unopened": 0, "malformed": 0, "duplicates": 0},
            "messages": {"total": 90}, **extra}


CASES = [(document(), "private"), (document(private=False), WHY), (document(flag=False), "data beside the release")]


def lines(captured) -> list[str]:
    return captured.out.splitlines()


@pytest.mark.parametrize("report,why", CASES)
def test_the_result_command_labels_the_release_from_its_guarantee(report, why, capsys):
    print_result(report, 10)
    out = capsys.readouterr().out
    title = next(line for line in out.splitlines() if "the analyzer's result" in line)
    if why == "private":
        assert "(private)" in title and "NOT PRIVATE" not in out
        assert "privacy: (1, 1e-06)-DP, shuffle model" in out
    else:
        assert "(NOT PRIVATE)" in title and "(private)" not in title
        assert f"NOT PRIVATE ({why.split(':')[0]}); would be (1, 1e-06)-DP" in out and why in out


@pytest.mark.parametrize("report,why", CASES)
def test_the_console_states_a_release_not_private_first(report, why):
    text = statement(report)
    if why == "private":
        assert text.startswith("This result is (1, 1e-06)-differentially private in the shuffle model")
    else:
        assert text.startswith(f"This result is NOT PRIVATE: {why}") and "would it be (1, 1e-06)-differentially" in text


@pytest.mark.parametrize("report,why", CASES)
def test_demo_service_fe1_labels_the_services_release_from_its_guarantee(report, why, monkeypatch, capsys,
                                                                         tmp_path):
    out = {"service": report, "words": ["maps", "mail"], "truth": [0, 21],
           "simulation": {"estimates": [{"item": 1, "estimate": 19.0, "stderr": 5.0}], "privacy": {"private": False}},
           "load": {"acknowledged": 40, "reports_per_second": 400.0, "latency_ms": {"p50": 3.0, "p99": 9.0}},
           "comparison": demos.standardized_comparison(np.array([0.8, -1.2]))}
    monkeypatch.setattr(demos, "run_demo", lambda *args, **kw: out)
    demo_service(demos_protocol("fe1"), 1_000, 2, 1.0, 1e-6, None, None, None, tmp_path / "demo", 1, dishonest=None, degree=None,
                 as_json=False)
    assert_labelled(capsys.readouterr(), "the services' result", why)


@pytest.mark.parametrize("report,why", CASES)
def test_demo_service_fe_hh_labels_the_services_release_from_its_guarantee(report, why, monkeypatch, capsys,
                                                                           tmp_path):
    report = {**{k: v for k, v in report.items() if k != "estimates"},
              "heavy_hitters": [{"item": "maps", "estimate": 20.0, "stderr": 5.0}]}
    score = {"recall": 1.0, "heavy_items": 1, "precision": 1.0, "reported": 1}
    out = {"service": report, "simulation": {"heavy_hitters": [{"item": "maps"}]}, "truth": {"maps": 21},
           "comparison": {"threshold": 4.0, "service": score, "simulation": score}}
    monkeypatch.setattr(demos, "run_heavy_hitter_demo", lambda *args, **kw: out)
    _demo_heavy_hitters("fe-hh", 5_000, 1.0, 1e-6, 10, tmp_path / "demo", False)
    assert_labelled(capsys.readouterr(), None, why)


@pytest.mark.parametrize("report,why", CASES)
def test_demo_service_of_the_rounds_labels_the_release_from_its_guarantee(report, why, monkeypatch, capsys, tmp_path):
    report = {**copy.deepcopy(report), "dropouts": {"enrolled": 40, "round1_senders": 40, "survivors": 38,
                                                    "min_survivors": 30}}
    summary = {"service": report, "users": 40, "data_condition_broken": None, "z_rms": 1.0,
               "estimates": [{"word": "maps", "truth": 21, "service": 20.0, "service_stderr": 5.0, "service_z": -0.2,
                              "simulation": 19.0, "simulation_stderr": 5.0, "simulation_z": -0.4}],
               "round_seconds": {"round1": 1.0}, "bytes": {"sealed_sent": 10, "http_sent": 20, "http_received": 30},
               "parties": [], "dishonest": None, "detected": {}}
    monkeypatch.setattr(demos, "run_sharing_demo", lambda *args, **kw: summary)
    _demo_sharing("dpds", 40, 0.05, 1.0, 1e-6, 60.0, tmp_path / "demo", False, None)
    assert_labelled(capsys.readouterr(), "the sharing server's release", why)


def demos_protocol(name: str):
    from privagg.cli.options import DemoProtocol

    return DemoProtocol(name)


def assert_labelled(captured, title: str | None, why: str) -> None:
    """The table's title (if it has one) says private or NOT PRIVATE as the guarantee does; the privacy line is
    the guarantee's summary, with why it is not private."""
    out = captured.out
    if title is not None:
        (line,) = [line for line in out.splitlines() if title in line]
        assert ("(private)" if why == "private" else "(NOT PRIVATE)") in line, line
    if why == "private":
        assert "service privacy: (1, 1e-06)-DP" in out and "NOT PRIVATE" not in out
    else:
        assert f"service NOT PRIVATE ({why.split(':')[0]}); would be (1, 1e-06)-DP" in out and why in out
        assert "private: true" not in out


def test_the_demo_comparison_calls_an_honest_run_different_at_its_stated_rate():
    """demo-service fe1's verdict on B standardized differences: bounds from chi-square (B degrees of freedom) and
    a family-wise bound on the largest, each at FALSE_ALARM. Over 20,000 honest comparisons of 20 words (standard
    normal z) it says "DOES NOT match" at most 2 x FALSE_ALARM of the time (the union of the two checks; 4 sigma
    of binomial noise allowed); the fixed bounds it replaced (RMS within 0.8-1.2, largest within sqrt(2 ln B) + 2)
    said so about one time in six. A run whose standard errors are understated by half is called different."""
    rng = np.random.default_rng(48)
    runs, items = 20_000, 20
    alarms = sum(not demos.standardized_comparison(z)["matches"] for z in rng.standard_normal((runs, items)))
    rate = 2 * demos.FALSE_ALARM
    assert alarms <= runs * rate + 4 * np.sqrt(runs * rate), alarms
    old = sum(not (0.8 <= np.sqrt(np.mean(z ** 2)) <= 1.2) for z in rng.standard_normal((2_000, items)))
    assert old > 200  # the fixed bounds: about one honest run in six
    assert not demos.standardized_comparison(2.0 * rng.standard_normal(items))["matches"]
