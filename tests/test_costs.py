"""Every command whose cost grows with its arguments refuses an impossible size at once: exit status 2, one
line naming the option to change, within seconds of this process's CPU (its wall time measured the other engineers'
load on a shared machine as well: 26 s for a 20 s bound at load 24)."""

from __future__ import annotations

import subprocess
import time

import pytest

from in_process import privagg  # in this process: a second of start-up and imports less a case

SECONDS = 20


def refused(*args: str) -> str:
    """Run ``privagg args`` and check the refusal; its message."""
    start = time.process_time()
    done = privagg(*args)
    elapsed = time.process_time() - start
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


def test_the_closed_form_names_the_users_it_needs_not_an_infinite_epsilon():
    """A reviewer's finding: at n below 16 ln(2/delta) it said "at most ln(n / (16 ln(2/delta))) = -inf"."""
    assert refused("account", "shuffle", "--local-epsilon", "1", "--users", "10", "--delta", "0.01", "--method",
                   "closed-form") == ("error: users must be more than 16 ln(2/delta) = 84.77 for the closed form (use "
                                      "--method fmt), got 10")


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
    from privagg.protocols.registry import ANALYZER_CHECKS_MAX, choose_full_domain
    from privagg.protocols.registry import analyzer_checks

    assert analyzer_checks("olh", 10**5, 2**24) == 10**5 * 2**24 and analyzer_checks("fe1", 10**5, 2**24) == 0
    assert choose_full_domain(2**24, None, candidates_given=True, checks=ANALYZER_CHECKS_MAX + 1) is False
    assert choose_full_domain(2**24, None, candidates_given=True, checks=ANALYZER_CHECKS_MAX) is True
    with pytest.raises(ParameterError, match="give --candidates"):
        choose_full_domain(2**24, None, candidates_given=False, checks=ANALYZER_CHECKS_MAX + 1)


def works(*args: str) -> subprocess.CompletedProcess:
    """Run ``privagg args`` at a feasible size: it finishes (exit 0) within the same bound."""
    start = time.process_time()
    done = privagg(*args)
    assert done.returncode == 0, (done.returncode, done.stdout[-2000:], done.stderr[-2000:])
    assert time.process_time() - start < SECONDS
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


@pytest.mark.parametrize("protocol, args", [("fe1", ("--delta", "1e-9")), ("grr", ()), ("laplace", ()),
                                            ("blanket-hist", ("--delta", "1e-9")), ("olh", ())])
def test_a_full_domain_of_2_to_the_28_is_refused_before_any_work(protocol, args):
    """fe1 failed allocating 2 GiB (2 threads' int32 counters); grr, laplace, blanket-hist worked 4-44 s first."""
    message = refused("estimate", protocol, "--full-domain", "--domain", str(2**28), "--epsilon", "1", "--seed", "1",
                      *args)
    assert message.startswith("error: domain must be") and "--candidates" in message, message


def test_the_full_domain_budget_names_the_largest_domain_and_passes_the_defaults():
    from privagg.errors import ParameterError
    from privagg.protocols.registry import calibrate
    from privagg.simulate.frequency import FULL_DOMAIN_BYTES_MAX, check_full_domain, full_domain_bytes

    for name, extra in [("fe1", {"delta": 1e-9}), ("laplace", {}), ("grr", {}), ("fe0", {"delta": 1e-9})]:
        small = calibrate(name, epsilon=1, n_users=10**5, domain_size=2**24, **extra)
        assert full_domain_bytes(small, "fast") <= FULL_DOMAIN_BYTES_MAX  # the default full domain fits
        check_full_domain(small, "fast")
        huge = calibrate(name, epsilon=1, n_users=10**5, domain_size=2**28, **extra)
        with pytest.raises(ParameterError, match="at most about .* to estimate the whole domain"):
            check_full_domain(huge, "fast")


def test_fe0s_fast_path_refuses_billions_of_dummies():
    """fe0 --mode fast at B = 2^28 draws 2.3 10^10 dummies: it ran past a minute (51 s, silent, at 2^24)."""
    message = refused("estimate", "fe0", "--mode", "fast", "--full-domain", "--domain", str(2**28), "--epsilon", "1",
                      "--delta", "1e-9", "--seed", "1")
    assert message.startswith("error: domain must be set so that the fast path's"), message


def test_top_is_capped_at_the_items_estimated():
    import numpy as np

    from privagg.simulate.frequency import estimate_frequencies, item_encoder

    codes = np.random.default_rng(1).integers(0, 50, 1000)
    report, _ = estimate_frequencies("grr", codes, item_encoder(64, seed=1), epsilon=1, delta=0, seed=1,
                                     top=10**9, full_domain=True)
    assert len(report.estimates) == 64
    report, _ = estimate_frequencies("grr", codes, item_encoder(64, seed=1), epsilon=1, delta=0, seed=1,
                                     top=10**9, full_domain=False, candidate_codes=np.array([1, 2, 3]))
    assert len(report.estimates) == 3


def test_write_messages_caps_the_partitions_it_writes(tmp_path):
    """100,000 Parquet files took about 90 s, silent: a run writes at most PARTITIONS_MAX, with a warning."""
    from privagg.engine import PARTITIONS_MAX, capped_partitions_warning, partition_count

    assert partition_count(100_000, 10**6) == PARTITIONS_MAX and partition_count(100_000, 50) == 50
    assert "the most one run writes" in capped_partitions_warning(100_000, 10**6)
    assert "the number of messages" in capped_partitions_warning(100_000, 50)
    items = tmp_path / "items.txt"
    items.write_text("".join(f"{i % 100}\n" for i in range(300)))  # a message a user: 300 files
    works("estimate", "grr", "--input", str(items), "--domain", "128", "--epsilon", "1", "--seed", "1",
           "--write-messages", str(tmp_path / "m"), "--partitions", "100000")
    assert len(list((tmp_path / "m").glob("part-*.parquet"))) == 300


@pytest.mark.parametrize("phi", ["1e-6", "0.001"])
def test_fe_hh_refuses_a_phi_whose_walk_cannot_finish(phi):
    """phi = 1e-6 asked 15.3 GiB after 46 s; 0.001 ran past 150 s. The message names a phi that fits."""
    message = refused("estimate", "fe-hh", "--epsilon", "1", "--delta", "1e-9", "--seed", "1", "--phi", phi)
    assert message.startswith("error: phi must be larger (--phi ") and "--max-length" in message, message


def test_fe_hh_walk_bound_passes_the_phis_that_run():
    from privagg.protocols.heavy_hitters import calibrate_fe_hh
    from privagg.simulate.heavy_hitters import check_walk

    check_walk(calibrate_fe_hh(1, 1e-9, 10**6, None, 0.01, 24, "hockey_stick"))  # 16 s on the bundled words
    check_walk(calibrate_fe_hh(1, 1e-9, 10**6, None, 0.01, 64, "hockey_stick"))  # 35 s


def test_sparse_vector_discovery_names_its_own_option():
    message = refused("estimate", "sparse-vector-hashed", "--discover-phi", "1e-7", "--epsilon", "1", "--delta",
                      "1e-8")
    assert message.startswith("error: discover-phi must be larger (--discover-phi "), message


def test_blanket_vector_with_a_huge_composed_local_epsilon_runs():
    """64 coordinates of 65,536 levels: eps0 past 709 overflowed e^eps0 (an OverflowError); FMT's bound is then
    the trivial 1, and the calibration goes on."""
    from privagg.privacy.shuffle import fmt_delta, variation_ratio_delta

    assert fmt_delta(1.0, 2400.0, 1000) == 1.0 and variation_ratio_delta(1.0, 2400.0, 1000) == 1.0
    assert fmt_delta(3.0, 2.0, 1000) == 0.0
    works("calibrate", "blanket-vector", "--levels", "65536", "--coordinates-per-user", "64", "--epsilon", "1",
          "--delta", "1e-8", "--users", "1797", "--dimension", "64")


def test_blanket_hist_refusal_names_the_user_count():
    message = refused("calibrate", "blanket-hist", "--users", str(10**15), "--epsilon", "0.01", "--delta", "1e-8",
                      "--domain", "10")
    assert message.startswith("error: users must be") and message.endswith(f"got {10**15}"), message


@pytest.mark.parametrize("args", [("--local-epsilon", "1000"), ("--local-epsilon", "1e-300", "--delta", "1e-300"),
                                  ("--local-epsilon", "1000", "--values", "2"),
                                  ("--local-epsilon", "25", "--values", "2"),
                                  ("--local-epsilon", "1000", "--values", "3")])
def test_account_shuffle_at_extreme_local_epsilons_answers(args):
    """Each crashed: e^eps0 overflowed, e^eps0 - 1 was 0, a bisection's ends had one sign."""
    given = dict(zip(args[::2], args[1::2]))
    works("account", "shuffle", "--users", "100000", *args, *(() if "--delta" in given else ("--delta", "1e-6")))


def test_account_shuffle_blanket_refuses_an_underflowing_blanket():
    message = refused("account", "shuffle", "--users", "100000", "--local-epsilon", "1000", "--values", "2",
                      "--delta", "1e-6", "--method", "blanket")
    assert message.startswith("error: local-epsilon must be at most 700 for --method blanket"), message


def test_analyze_refuses_olh_over_a_full_domain_it_cannot_check(tmp_path):
    """OLH's analyzer checks every report at every item: 20,000 reports over 2^24 items are 3.4 10^11 checks."""
    items, candidates = tmp_path / "items.txt", tmp_path / "candidates.txt"
    items.write_text("".join(f"{i % 1000}\n" for i in range(20000)))
    candidates.write_text("".join(f"{i}\n" for i in range(1000)))  # public: not the input (refused as candidates)
    folder = tmp_path / "m"
    works("estimate", "olh", "--input", str(items), "--domain", str(2**24), "--epsilon", "1", "--seed", "1",
          "--candidates", str(candidates), "--no-full-domain", "--write-messages", str(folder))
    message = refused("analyze", "olh", "--params", str(folder / "params.json"), "--messages", str(folder),
                      "--full-domain")
    assert message.startswith("error: full-domain must be left out for olh") and "--candidates" in message, message
    works("analyze", "olh", "--params", str(folder / "params.json"), "--messages", str(folder), "--candidates",
          str(candidates))


def test_compare_refuses_hours_of_full_domain_runs():
    """fe1 and olh over 2^24 items, 1,000 trials each: 2,000 runs of seconds each (hours)."""
    message = refused("compare", "--protocols", "fe1,olh", "--epsilon", "1", "--delta", "1e-8", "--domain",
                      str(2**24), "--trials", "1000")
    assert message.startswith("error: trials must be at most 64 here"), message
    refused("compare", "--protocols", "fe1,olh", "--epsilon", "1", "--delta", "1e-8", "--trials", str(10**6))
    works("compare", "--protocols", "fe1,olh", "--epsilon", "1", "--delta", "1e-8", "--domain", str(2**40),
          "--trials", "1000")  # every run refused at once (no candidates past 2^24): rows saying so


def test_fe_hh_refuses_a_walk_that_noise_alone_makes_long(tmp_path):
    """100,000 users of an event log, 3 items each, phi 0.0075, 8-byte strings: fe-hh over the 300,000 reports at
    phi / 3 lets about 1,494 noise prefixes through its first level, which fill the 1,600 followed at every level
    (9.2e11 sure steps, under WALK_STEPS_MAX): about 6 minutes at WALK_STEP_SECONDS on 2 cores, above
    WALK_SECONDS_MAX. Refused before the walk, in the users' phi, naming the ways out and the time. (At phi 0.01,
    this test's example until the walk's pace was measured again, 0.8 ns a step and not 2.1: 4.75e11 sure steps,
    about 190 s, which now runs.)"""
    from privagg.errors import ParameterError
    from privagg.protocols.heavy_hitters import calibrate_fe_hh
    from privagg.simulate.heavy_hitters import WALK_SECONDS_MAX, check_walk, walk_seconds, walk_steps
    from privagg.simulate.users import plan

    parameters = plan("fe-hh", epsilon=1, delta=1e-8, n_users=100_000, max_items=3, phi=0.0075,
                      max_length=8).parameters
    assert walk_seconds(walk_steps(parameters, noise_only=True)) > WALK_SECONDS_MAX
    with pytest.raises(ParameterError) as refusal:
        check_walk(parameters, 3)
    assert refusal.value.got == 0.0075 and "--phi 0.0092 fits" in refusal.value.accepted
    fits = plan("fe-hh", epsilon=1, delta=1e-8, n_users=100_000, max_items=3, phi=0.0092, max_length=8).parameters
    check_walk(fits, 3)  # the phi it names
    check_walk(plan("fe-hh", epsilon=1, delta=1e-8, n_users=100_000, max_items=3, phi=0.01, max_length=8).parameters,
               3)  # the former example
    # the noise's steps are the bound's share that no data avoids: none on the bundled words at phi 0.01
    words = calibrate_fe_hh(1, 1e-9, 10**6, None, 0.01, 64, "hockey_stick")
    assert walk_steps(words, noise_only=True) < 1e-6 * walk_steps(words)
    log = tmp_path / "events.csv"
    log.write_text("device,app\n" + "".join(f"{i // 3},app{i * 7919 % 1000}\n" for i in range(300_000)))
    message = refused("estimate", "fe-hh", "--input", str(log), "--user-column", "device", "--column", "app",
                      "--max-items", "3", "--phi", "0.0075", "--max-length", "8", "--epsilon", "1", "--delta", "1e-8",
                      "--seed", "1")
    assert message.startswith("error: phi must be larger (--phi 0.0092 fits), or a shorter --max-length (7 levels "
                              "now), or a smaller --max-items (3 now): the analyzer's walk over 300,000 reports' "
                              "(3 a user) messages would take about "), message
    assert "noise prefixes alone (about 1494 at the first level) fill the 1600 followed" in message, message
