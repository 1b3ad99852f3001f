"""Every command whose cost grows with its arguments refuses an impossible size at once: exit status 2, one
line naming the option to change, within seconds (the bound is generous: the machine may be shared)."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest

SECONDS = 20


def refused(*args: str) -> str:
    """Run ``privagg args`` and check the refusal; its message."""
    start = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "privagg", *args], capture_output=True, text=True, timeout=120)
    elapsed = time.monotonic() - start
    assert done.returncode == 2, (done.returncode, done.stdout[-2000:], done.stderr[-2000:])
    assert elapsed < SECONDS, elapsed
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    return lines[0]


@pytest.mark.parametrize("method", ["best", "fmt", "wang"])
def test_account_shuffle_refuses_a_trillion_users(method):
    message = refused("account", "shuffle", "--users", str(10**12), "--local-epsilon", "1", "--delta", "1e-6",
                      "--method", method)
    assert message.startswith("error: users must be at most about")
    assert "--method closed-form" in message


def test_exact_audit_refuses_a_billion_users():
    message = refused("audit", "fe1", "--users", str(10**9), "--domain", "3", "--bins", "2", "--epsilon", "2",
                      "--delta", "0.1")
    assert message.startswith("error: method must be statistical")


def test_exact_audit_refuses_a_million_items_at_a_billion_users():  # the pair count is not written out in full
    message = refused("audit", "fe1", "--users", str(10**9), "--domain", str(10**6), "--bins", "2", "--epsilon",
                      "2", "--delta", "0.1")
    assert message.startswith("error: method must be statistical")


def test_statistical_audit_refuses_a_hundred_million_runs():
    message = refused("audit", "fe1", "--users", "1000", "--domain", "3", "--bins", "2", "--epsilon", "2",
                      "--delta", "0.1", "--method", "statistical", "--runs", str(10**8))
    assert message.startswith("error: runs must be at most")


def test_statistical_audit_refuses_a_trillion_users():
    message = refused("audit", "grr", "--users", str(10**12), "--domain", "3", "--epsilon", "2", "--method",
                      "statistical")
    assert message.startswith("error: users must be at most")


def test_an_olh_estimate_over_a_huge_full_domain_is_refused_at_once():
    """OLH's analyzer checks each user's own hash at each item: the bundled 100,000 users over the default
    domain 2^24 would be 1.7 10^12 checks (minutes); asked for the full domain, the estimate refuses at once."""
    message = refused("estimate", "olh", "--epsilon", "1", "--seed", "1", "--full-domain")
    assert message.startswith("error: domain must be small enough for the analyzer to check") and "--candidates" in message


def test_the_full_domain_is_the_default_only_where_its_checks_fit():
    from privagg.errors import ParameterError
    from privagg.simulate.frequency import ANALYZER_CHECKS_MAX, analyzer_checks, choose_full_domain

    assert analyzer_checks("olh", 10**5, 2**24) == 10**5 * 2**24 and analyzer_checks("fe1", 10**5, 2**24) == 0
    assert choose_full_domain(2**24, None, candidates_given=True, checks=ANALYZER_CHECKS_MAX + 1) is False
    assert choose_full_domain(2**24, None, candidates_given=True, checks=ANALYZER_CHECKS_MAX) is True
    with pytest.raises(ParameterError, match="give --candidates"):
        choose_full_domain(2**24, None, candidates_given=False, checks=ANALYZER_CHECKS_MAX + 1)


def works(*args: str) -> subprocess.CompletedProcess:
    """Run ``privagg args`` at a feasible size: it finishes (exit 0) within the same bound."""
    start = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "privagg", *args], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, (done.returncode, done.stdout[-2000:], done.stderr[-2000:])
    assert time.monotonic() - start < SECONDS
    return done


def test_exact_audit_refuses_oue_laws_of_a_billion_outcomes_before_building_them():
    """OUE's law enumerates every bit vector: 2^30 outcomes at B = 30 (it ran past a minute and 1.4 GB)."""
    message = refused("audit", "oue", "--users", "2", "--domain", "30", "--epsilon", "1")
    assert message.startswith("error: domain must be at most 15 for oue's exact audit"), message
    works("audit", "oue", "--users", "2", "--domain", "4", "--epsilon", "1")


@pytest.mark.parametrize("protocol, args", [("laplace", ("--epsilon", "0.01")),
                                            ("gaussian", ("--epsilon", "0.05", "--delta", "1e-9"))])
def test_exact_audit_refuses_a_central_noise_law_too_wide_to_enumerate(protocol, args):
    """The curator's noise over B counts is (2W + 1)^B outcomes, W growing as eps shrinks (4.4e12 at eps = 0.01:
    it ran past a minute, growing past a gigabyte)."""
    message = refused("audit", protocol, "--users", "2", "--domain", "3", *args)
    assert message.startswith("error: epsilon must be larger") and f"{protocol}'s exact audit" in message, message


def test_exact_audit_of_a_central_baseline_names_the_largest_domain_that_fits():
    message = refused("audit", "laplace", "--users", "2", "--domain", "3", "--epsilon", "1")
    assert message.startswith("error: domain must be at most 2, or a larger --epsilon"), message
    works("audit", "laplace", "--users", "2", "--domain", "2", "--epsilon", "1")


@pytest.mark.parametrize("args", [("grr", "--domain", str(2**28), "--epsilon", "1"),
                                  ("blanket-vector", "--dimension", "20", "--levels", "2", "--epsilon", "1",
                                   "--delta", "0.2")])
def test_exact_audit_pairs_over_a_huge_domain_are_not_built_at_once(args):
    """The neighbouring pairs come lazily: 3^20 grid vectors (a MemoryError before), or 2^28 items."""
    message = refused("audit", args[0], "--users", "2", *args[1:])
    assert message.startswith("error: method must be statistical"), message


@pytest.mark.parametrize("protocol, args", [
    ("fe1", ("--domain", "3", "--bins", "40", "--epsilon", "1", "--delta", "0.1")),  # an OverflowError before
    ("hadamard", ("--domain", "400", "--epsilon", "1")),  # 25 s and 3.4 GB before the 64-bit keys refused it
    ("dpdg", ("--domain", "2", "--epsilon", "1", "--delta", "0.05", "--fractional-bits", "8"))])
def test_exact_audit_refuses_other_laws_before_building_them(protocol, args):
    message = refused("audit", protocol, "--users", "2", *args)
    assert (f"for {protocol}'s exact audit" in message and "--method statistical" in message
            or message.startswith("error: method must be statistical")), message


def test_every_message_law_has_a_size_beside_it():
    from privagg.protocols.registry import ENTRIES

    laws = [e for e in ENTRIES if e.message_law is not None]
    assert laws and all(e.law_size is not None and e.law_size.__module__ == e.message_law.__module__ for e in laws)


@pytest.mark.parametrize("protocol, extra", [("dpcs", ()), ("dpds", ()),
                                             ("tss", ("--report-fraction", "0.5", "--second-stage", "adaptive"))])
def test_sampling_calibration_refuses_a_quadrillion_users(protocol, extra):
    """The exact sampling accountant's window grows as sqrt(beta n): at n = 10^15 it failed allocating 2.1 GiB."""
    message = refused("calibrate", protocol, "--users", str(10**15), "--domain", "10", "--epsilon", "1", "--delta",
                      "1e-9", "--min-count-fraction", "0.05", *extra)
    assert message.startswith("error: users must be fewer, or a smaller --min-count-fraction"), message
    works("calibrate", protocol, "--users", str(10**5), "--domain", "10", "--epsilon", "1", "--delta", "1e-9",
          "--min-count-fraction", "0.05", *extra)
