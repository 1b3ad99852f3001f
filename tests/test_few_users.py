"""A handful of users (issue 44): every protocol's ``privagg estimate`` over 1, 2, 3 and 5 users ends at once with a
release or a one-line refusal naming an option given, and a release whose standard error exceeds n says, in its
warnings and in the printed table's title, that its estimates carry no information at this size.

``printf 'a\\nb\\na\\n' | privagg estimate fe1 --input -`` took 17 s (fe1's analysis of all 2^24 items walks 3.6e9
hash preimages whatever n): the default full domain is now refused when it would take far longer than the users
warrant (registry.choose_full_domain), naming the domain that fits, --candidates and --full-domain. Times are not
asserted (benchmarks/extreme_calibrations.py times the calibrations; these runs take 0.1 to 1 s in-process); an
alarm stops a hang.
"""

from __future__ import annotations

import json
import re

import numpy as np
import pytest
from typer.testing import CliRunner

from privagg.cli import app
from privagg.errors import ParameterError
from privagg.protocols.registry import IMPLEMENTED, get
from test_extreme_calibrations import HANG_SECONDS, Hang, hang_detector

SAMPLING = {"dpcs": [], "dpcs-star": [], "dpds": [], "tss": ["--report-fraction", "0.5"],
            "tss-collusion": ["--report-fraction", "0.5", "--colluders", "1"]}


def arguments(protocol: str, n: int, folder) -> list[str]:
    """estimate PROTOCOL over n users: words for the hashed protocols (the default domain, 2^24), integers over
    --domain 1000 where a domain is required, vectors or pairs for the vector sums, two public categories for the
    sampling family."""
    entry = get(protocol)
    privacy = ["--epsilon", "1"] + ([] if entry.pure else ["--delta", "1e-9"])
    words = folder / f"words{n}.txt"
    words.write_text("".join("ab"[i % 2] + "\n" for i in range(n)))
    if protocol in ("sparse-vector", "sparse-vector-hashed"):
        pairs = folder / f"pairs{n}.csv"
        pairs.write_text("".join(f"{i % 3},0.5\n" for i in range(n)))
        return [*privacy, "--input", str(pairs), "--no-header", "--dimension", "1000"]
    if protocol == "blanket-vector":
        vectors = folder / f"vectors{n}.csv"
        vectors.write_text("0.1,0.5,0.9\n" * n)
        return [*privacy, "--input", str(vectors), "--no-header"]
    if protocol in SAMPLING or protocol == "dpdg":
        (folder / "categories.txt").write_text("a\nb\n")
        beta = [] if protocol == "dpdg" else ["--min-count-fraction", "0.3"]
        return [*privacy, "--input", str(words), "--candidates", str(folder / "categories.txt"), *beta,
                *SAMPLING.get(protocol, [])]
    if protocol == "fe-hh":
        return [*privacy, "--input", str(words), "--phi", "0.3"]
    if entry.small_domain:
        integers = folder / f"ints{n}.txt"
        integers.write_text("".join(f"{i % 2}\n" for i in range(n)))
        return [*privacy, "--input", str(integers), "--domain", "1000"]
    return [*privacy, "--input", str(words)]


def options(protocol: str) -> set[str]:
    """The options of ``privagg estimate PROTOCOL``, as typed (without the dashes)."""
    import typer

    command = typer.main.get_command(app).commands["estimate"].commands[protocol]
    return {name[2:] for param in command.params for name in param.opts if name.startswith("--")}


@pytest.mark.parametrize("n", [1, 2, 3, 5])
@pytest.mark.parametrize("protocol", IMPLEMENTED)
def test_a_handful_of_users_gets_an_answer_or_a_refusal(protocol, n, tmp_path):
    args = ["estimate", protocol, *arguments(protocol, n, tmp_path), "--output", str(tmp_path / "report.json")]
    with hang_detector(HANG_SECONDS):
        result = CliRunner().invoke(app, args)
    assert not isinstance(result.exception, Hang), f"{' '.join(args)}: hangs"
    assert result.exception is None or isinstance(result.exception, SystemExit), (args, result.exception)
    assert result.exit_code in (0, 2), (args, result.output)
    if result.exit_code == 2:
        error = [line for line in result.output.splitlines() if line.startswith("error: ")]
        assert len(error) == 1, result.output
        named = re.match(r"error: ([a-z-]+) (?:must|is required)", error[0])
        assert named and named.group(1) in options(protocol) | {"input", "users"}, error[0]  # users: the input's n
        return
    report = json.loads((tmp_path / "report.json").read_text())
    uninformative = report["expected_error"]["standard_error"] > n
    assert any("carry no information at this size" in w for w in report["warnings"]) == uninformative
    title = next(line for line in result.output.splitlines() if line.startswith(f"{protocol}: "))
    assert ("NO INFORMATION at this size" in title) == uninformative, title


def test_the_issues_three_users_are_refused_before_any_message(monkeypatch):
    """fe1 over 3 words and the default domain: refused from the calibrated parameters, naming the domain that
    runs in about a second, --candidates and --full-domain, and saying the estimates would carry no information
    anyway (it ran 17 s, and printed noise maxima near 110 as the top items)."""
    from privagg.simulate import frequency
    from privagg.simulate.frequency import estimate_frequencies, item_encoder

    monkeypatch.setattr(frequency, "simulate", lambda *a, **k: pytest.fail("simulated"))
    with pytest.raises(ParameterError) as refused:
        estimate_frequencies("fe1", np.array([1, 2, 1]), item_encoder(2**24, seed=1), epsilon=1.0, delta=1e-9)
    message = str(refused.value)
    assert refused.value.field == "domain" and "--candidates" in message and "--full-domain" in message
    assert "carry no information" in message
    largest = int(re.search(r"at most about ([\d,]+)", message).group(1).replace(",", ""))
    assert 2**17 < largest < 2**21  # 0.5 to 1 s of preimages at these 432 messages


def test_more_users_or_an_explicit_choice_keep_the_whole_domain():
    """The budget grows with the users (10 ms each: 2,000 users may take 20 s) and an explicit --full-domain, or
    --candidates, always decides; a small domain is cheap at any n."""
    from privagg.protocols.registry import choose_full_domain, run_budget

    assert run_budget(3) == 1.0 and run_budget(2000) == pytest.approx(20.0)
    assert choose_full_domain(2**24, None, False, seconds=11.0, n_users=2000)
    assert choose_full_domain(2**24, True, False, seconds=25.0, n_users=3)
    assert not choose_full_domain(2**24, None, True, seconds=25.0, n_users=3)  # the candidates instead
    assert choose_full_domain(2**10, None, False, seconds=0.01, n_users=3)
    with pytest.raises(ParameterError, match="domain must be at most about"):
        choose_full_domain(2**24, None, False, seconds=25.0, n_users=3, protocol="fe1")


def test_dummies_that_grow_with_the_domain_are_refused_for_a_handful_of_users(tmp_path):
    """fe0 sends mu B dummies whatever n: over 10^5 items 8.7e6 messages (7 s) for 3 users, refused before any
    message, naming --domain and --mode fast (sparse-vector over 2^20 coordinates ran 72 s); 3,000 users may take
    that long (10 ms a user), and the fast path draws the dummies in one step."""
    from privagg.protocols.registry import calibrate
    from privagg.simulate.runner import check_cost

    (tmp_path / "ints.txt").write_text("0\n1\n0\n")
    args = ["estimate", "fe0", "--input", str(tmp_path / "ints.txt"), "--domain", "100000", "--epsilon", "1",
            "--delta", "1e-9"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 2 and "error: domain must be set so that a faithful simulation of 3 users" in \
        result.output and "--mode fast" in result.output, result.output
    assert CliRunner().invoke(app, [*args, "--mode", "fast", "--seed", "1"]).exit_code == 0
    check_cost(calibrate("fe0", epsilon=1, delta=1e-9, n_users=3000, domain_size=100_000), "faithful")


def test_the_fast_path_of_a_handful_of_users_is_refused_at_once_too(tmp_path):
    """--mode fast, which the refusals above suggest, draws the dummies' total in one step but still makes and
    counts every dummy: fe0 over 2^20 items (9e7 messages) took 5.7 s for 3 users, and fe1 over its default 2^24
    items over 30 s (its 431 messages' preimages, dummies' included, while the cost counted 3 real messages'). Both
    are refused before any message, naming what to change; with candidates the fast fe1 run is a release."""
    from privagg.protocols.registry import calibrate
    from privagg.simulate.frequency import full_domain_preimages

    (tmp_path / "ints.txt").write_text("0\n1\n0\n")
    (tmp_path / "words.txt").write_text("a\nb\na\n")
    (tmp_path / "names.txt").write_text("a\nb\n")
    fe0 = ["estimate", "fe0", "--input", str(tmp_path / "ints.txt"), "--domain", str(2**20), "--epsilon", "1",
           "--delta", "1e-9", "--mode", "fast"]
    fe1 = ["estimate", "fe1", "--input", str(tmp_path / "words.txt"), "--epsilon", "1", "--delta", "1e-9", "--mode",
           "fast"]
    with hang_detector(HANG_SECONDS):
        result = CliRunner().invoke(app, fe0)
        assert result.exit_code == 2 and "error: domain must be set so that a fast simulation of 3 users" in \
            result.output and "--mode fast" not in result.output, result.output
        result = CliRunner().invoke(app, fe1)
        assert result.exit_code == 2 and result.output.startswith("error: domain must be at most about"), \
            result.output
        result = CliRunner().invoke(app, [*fe1, "--candidates", str(tmp_path / "names.txt")])
        assert result.exit_code == 0, result.output
    params = calibrate("fe1", epsilon=1, delta=1e-9, n_users=3, domain_size=2**24)
    messages = int(np.ceil(3 * params.messages_per_user))
    assert messages > 100 and full_domain_preimages(params) == messages * -(-params.hash.modulus // params.hash.bins)


def test_a_vector_report_of_more_coordinates_than_the_users_warrant_is_refused(tmp_path):
    """A vector sum's report lists every coordinate it estimated, each an object of the report and its JSON (about
    5e-5 s apiece): sparse-vector-hashed over 2^19 coordinates took 28 s for 3 users though its cells' preimages
    take under a second, blanket-vector over 2^15 columns as long for its report. Refused before any message,
    naming --candidates, --discover-phi and the dimension that fits (or the columns and more users); the run budget
    grows with the users, and 2^12 coordinates fit 3 users."""
    (tmp_path / "pairs.csv").write_text("5,0.5\n7,0.2\n5,1\n")
    np.save(tmp_path / "wide.npy", np.random.default_rng(1).random((3, 2**15)))
    np.save(tmp_path / "narrow.npy", np.random.default_rng(1).random((3, 2**12)))
    hashed = ["estimate", "sparse-vector-hashed", "--input", str(tmp_path / "pairs.csv"), "--no-header", "--epsilon",
              "1", "--delta", "1e-9"]
    dense = ["estimate", "blanket-vector", "--epsilon", "1", "--delta", "1e-6", "--input"]
    with hang_detector(HANG_SECONDS):
        result = CliRunner().invoke(app, [*hashed, "--dimension", str(2**19)])
        assert result.exit_code == 2 and result.output.startswith("error: candidates must be given") and \
            "--discover-phi" in result.output and "524,288 coordinates" in result.output, result.output
        result = CliRunner().invoke(app, [*dense, str(tmp_path / "wide.npy")])
        assert result.exit_code == 2 and result.output.startswith("error: dimension must be at most about"), \
            result.output
        assert CliRunner().invoke(app, [*dense, str(tmp_path / "narrow.npy")]).exit_code == 0
    from privagg.protocols.registry import calibrate
    from privagg.simulate.frequency import check_coordinates

    check_coordinates(calibrate("blanket-vector", epsilon=1, delta=1e-6, n_users=3000, domain_size=2**15))


def test_analyze_holds_a_handful_of_users_messages_to_the_same_budget(tmp_path):
    """privagg analyze of 3 users' written messages: fe1's default whole domain of 2^24 items walked 3.6e9
    preimages (past 30 s), and sparse-vector-hashed's every coordinate as long, as estimate did before it held them
    to the run budget. Refused at once, naming --candidates and --full-domain (which runs it anyway); with the
    candidates the analysis is a release."""
    (tmp_path / "words.txt").write_text("a\nb\na\n")
    (tmp_path / "names.txt").write_text("a\nb\n")
    (tmp_path / "pairs.csv").write_text("5,0.5\n7,0.2\n5,1\n")
    (tmp_path / "coordinates.txt").write_text("5\n7\n")
    written = {"fe1": ["--input", str(tmp_path / "words.txt"), "--candidates", str(tmp_path / "names.txt")],
               "sparse-vector-hashed": ["--input", str(tmp_path / "pairs.csv"), "--no-header", "--dimension",
                                        str(2**18), "--candidates", str(tmp_path / "coordinates.txt")]}
    for protocol, args in written.items():
        folder = tmp_path / protocol
        result = CliRunner().invoke(app, ["estimate", protocol, *args, "--epsilon", "1", "--delta", "1e-9",
                                          "--write-messages", str(folder)])
        assert result.exit_code == 0, result.output
        analyze = ["analyze", protocol, "--params", str(folder / "params.json"), "--messages", str(folder)]
        with hang_detector(HANG_SECONDS):
            result = CliRunner().invoke(app, analyze)
        assert result.exit_code == 2 and "candidates" in result.output, result.output
        assert protocol != "fe1" or "--full-domain to run it anyway" in result.output
        result = CliRunner().invoke(app, [*analyze, "--candidates", args[args.index("--candidates") + 1]])
        assert result.exit_code == 0, result.output


def test_every_coordinate_of_a_large_dimension_is_refused_for_a_handful_of_users(tmp_path):
    """sparse-vector-hashed walks every cell's preimages to estimate every coordinate: 47 s for 3 users over 2^20
    coordinates. Refused from the parameters, naming --candidates, --discover-phi and the dimension that fits."""
    (tmp_path / "pairs.csv").write_text("5,0.5\n7,0.2\n5,1\n")
    (tmp_path / "candidates.txt").write_text("5\n7\n")
    args = ["estimate", "sparse-vector-hashed", "--input", str(tmp_path / "pairs.csv"), "--no-header", "--dimension",
            str(2**20), "--epsilon", "1", "--delta", "1e-9"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 2 and result.output.startswith("error: candidates must be given"), result.output
    assert "--discover-phi" in result.output and "--dimension of at most about" in result.output
    result = CliRunner().invoke(app, [*args, "--candidates", str(tmp_path / "candidates.txt")])
    assert result.exit_code == 0 and "NO INFORMATION at this size" in result.output, result.output
