"""The paths issue 48 made faster give the same results for the same seed as before.

tests/data/speed_pinned.json records, from the code before issue 48's changes, the whole JSON report of three
commands as a user runs them -- FE1 over the full domain from a text file (a domain of several counting tiles, whose
narrow counters wrap), OLH from a text file, blanket-vector from a float32 .npy -- less the timings and the input's
path: estimates, stderrs, true counts, errors over the domain, gamma and the other parameters, the privacy
guarantee and profile; and blanket-vector over more users than one client batch holds, through each of the
randomizer's ways of choosing coordinates (t = 1, t^2 <= d, t^2 > d, t = d). Beside them, the SHA-256 of FE1's full-domain counts (every item of [B], which the report
summarises) from :meth:`UniversalHash.count_all` on seeded messages, at shapes that take each of its paths. The
test reruns each and compares exactly. Regenerate with ``python tests/test_speed_pinned.py`` only for a change
meant to move a seeded result, and say why in the commit.
"""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

DATA = Path(__file__).resolve().parent / "data" / "speed_pinned.json"

# (modulus q, bins b, domain B, messages): several 2^16-item tiles with uint8 counters that wrap, a domain that
# ends inside a tile, uint16 counters, one tile with the table of inverses; then domains of several L2-sized tiles
# (2^20 counters), one ending well below q inside a tile, and walks of one or two preimages (b near q, b above q / 2)
COUNT_CASES = ((524309, 374, 2**19, 24_000), (524309, 374, 300_001, 24_000), (131101, 2, 2**17, 800),
               (5003, 50, 5000, 10_000), (4194319, 1000, 2**22, 6000), (3000017, 3001, 2_500_001, 8000),
               (1048583, 1048578, 2**20, 30_000), (1048583, 700_000, 2**20, 30_000))


def inputs(folder: Path) -> dict[str, list[str]]:
    """The commands' arguments (input files written into ``folder``)."""
    rng = np.random.default_rng(48)
    items = folder / "fe1.txt"
    items.write_text("".join(f"{x}\n" for x in np.minimum(rng.zipf(1.3, 3000) - 1, 2**19 - 1).tolist()))
    small = folder / "olh.txt"
    small.write_text("".join(f"{x}\n" for x in np.minimum(rng.zipf(1.3, 5000) - 1, 63).tolist()))
    vectors = folder / "vectors.npy"
    np.save(vectors, rng.random((3000, 5), dtype=np.float32) ** 2)
    batched = folder / "batched.npy"  # 300,000 users: two client batches or more (simulate.runner.MESSAGES_PER_BATCH)
    np.save(batched, rng.random((300_000, 6), dtype=np.float32))
    return {
        **{f"blanket-vector-t{t}": ["estimate", "blanket-vector", "--input", str(batched), "--epsilon", "1", "--delta",
                                    "1e-9", "--coordinates-per-user", str(t), "--seed", "5"] for t in (1, 2, 3, 6)},
        "fe1": ["estimate", "fe1", "--input", str(items), "--epsilon", "1", "--delta", "1e-6", "--domain",
                str(2**19), "--c", "1", "--full-domain", "--top", "20", "--seed", "3"],
        "olh": ["estimate", "olh", "--input", str(small), "--epsilon", "1", "--domain", "64", "--top", "64",
                "--seed", "3"],
        "blanket-vector": ["estimate", "blanket-vector", "--input", str(vectors), "--epsilon", "1", "--delta", "1e-9",
                           "--levels", "3", "--seed", "3"],
    }


def report(args: list[str], output: Path) -> dict:
    """The command's JSON report, less what changes from run to run (its timings) or with the folder (the input)."""
    from privagg.cli import app

    result = CliRunner().invoke(app, [*args, "--json", "--output", str(output)])
    assert result.exit_code == 0, result.output
    out = json.loads(output.read_text())
    del out["simulation"]["seconds"], out["input"]
    return out


def count_digest(q: int, b: int, domain: int, messages: int) -> str:
    from privagg.core.hashing import UniversalHash

    rng = np.random.default_rng(q + domain)
    h = UniversalHash(q, b)
    u, v = h.sample_keys(messages, rng)
    w = rng.integers(0, b, messages)
    w[: messages // 4] = h.evaluate(u[: messages // 4], v[: messages // 4], np.zeros(messages // 4, np.int64))  # x=0
    return hashlib.sha256(h.count_all(u, v, w, domain).astype("<i8").tobytes()).hexdigest()


# calibrations at the sizes of issue 48's benchmark rows (docs/benchmarks.md): what the inputs above are too small
# to reach (blanket-vector's accountant over blanket sizes of hundreds, FE1's noise laws at B = 2^24)
CALIBRATIONS = {"blanket-vector": dict(epsilon=1.0, delta=1e-9, n_users=5_000_000, domain_size=20, levels=3),
                "fe1": dict(epsilon=1.0, delta=1e-10, n_users=100_000, domain_size=2**24, c=1.0)}


def calibrated() -> dict:
    """Each of CALIBRATIONS' parameters, every field (gamma, mu, ...) to the bit (JSON keeps a float's repr)."""
    import dataclasses

    from privagg.protocols import registry

    return {name: dataclasses.asdict(registry.calibrate(name, **kw)) for name, kw in CALIBRATIONS.items()}


def record(folder: Path) -> dict:
    return {"reports": {name: report(args, folder / f"{name}.json") for name, args in inputs(folder).items()},
            "counts": {",".join(map(str, case)): count_digest(*case) for case in COUNT_CASES},
            "calibrations": calibrated()}


@pytest.fixture(scope="module")
def now(tmp_path_factory):
    return record(tmp_path_factory.mktemp("pinned"))


@pytest.mark.parametrize("name", ["fe1", "olh", "blanket-vector", *(f"blanket-vector-t{t}" for t in (1, 2, 3, 6))])
def test_reports_as_before(now, name):
    assert now["reports"][name] == json.loads(DATA.read_text())["reports"][name]


def test_full_domain_counts_as_before(now):
    assert now["counts"] == json.loads(DATA.read_text())["counts"]


def test_calibrations_at_the_benchmarks_sizes_as_before():
    assert calibrated() == json.loads(DATA.read_text())["calibrations"]


if __name__ == "__main__":
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        DATA.write_text(json.dumps(record(Path(tmp)), indent=1, sort_keys=True) + "\n")
    print(f"wrote {DATA}", file=sys.stderr)
