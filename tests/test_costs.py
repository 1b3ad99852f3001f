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
