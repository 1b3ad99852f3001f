"""The accountant's values kept on disk (privagg.privacy.evaluation_cache): a calibration that reads them returns the
same gamma, profile and report to the bit as one that computes them, and imports no scipy; another version of the
code, a file others may write or a corrupt one is not read; ``off`` keeps nothing; a folder that cannot be written
is no error."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys

import numpy as np
import pytest

from privagg.privacy import blanket, evaluation_cache
from privagg.protocols import registry

SIZES = dict(epsilon=1.0, delta=1e-9, n_users=200_000, domain_size=20, levels=3)


@pytest.fixture
def folder(tmp_path, monkeypatch):
    """The cache in a folder of the test's (conftest turns it off for the others), read afresh."""
    monkeypatch.setenv("PRIVAGG_CACHE", str(tmp_path / "cache"))
    evaluation_cache._loaded.clear()
    yield tmp_path / "cache"
    evaluation_cache._loaded.clear()


def calibrated() -> dict:
    params = registry.calibrate("blanket-vector", **SIZES)
    return {**dataclasses.asdict(params), "profile": [params.delta_at(e) for e in (0.5, 1.0, 2.0)]}


def test_kept_values_give_the_same_calibration_to_the_bit(folder, monkeypatch):
    monkeypatch.setenv("PRIVAGG_CACHE", "off")
    computed = calibrated()
    monkeypatch.setenv("PRIVAGG_CACHE", str(folder))
    assert calibrated() == computed  # computed and kept
    (kept,) = folder.iterdir()
    assert kept.stat().st_mode & 0o077 == 0 and blanket.values_kept()
    values = json.loads(kept.read_text())
    assert len(values) > 10 and all(isinstance(float.fromhex(v), float) for v in values.values())
    evaluation_cache._loaded.clear()
    assert calibrated() == computed  # read back from the file


def test_a_calibration_read_from_disk_imports_no_scipy(folder, tmp_path):
    """Two whole processes: the first computes and keeps, the second finds every value (its reports equal)."""
    vectors = tmp_path / "vectors.npy"
    np.save(vectors, np.random.default_rng(3).random((20_000, 4), dtype=np.float32))
    code = ("import sys\nsys.argv = ['privagg', 'estimate', 'blanket-vector', '--input', {input!r}, '--epsilon', '1', "
            "'--delta', '1e-9', '--seed', '2', '--json', '--output', {output!r}]\nfrom privagg.cli import main\n"
            "try:\n    main()\nexcept SystemExit:\n    pass\nsys.stderr.write(repr('scipy' in sys.modules))")
    env = {**os.environ, "PRIVAGG_CACHE": str(folder)}
    loaded, reports = [], []
    for run in range(2):
        output = tmp_path / f"report{run}.json"
        out = subprocess.run([sys.executable, "-c", code.format(input=str(vectors), output=str(output))], env=env,
                             capture_output=True, text=True, check=True)
        loaded.append(out.stderr[-5:].strip())
        report = json.loads(output.read_text())
        del report["simulation"]["seconds"]
        reports.append(report)
    assert loaded == ["True", "False"] and reports[0] == reports[1]


def test_the_vector_sums_count_law_is_kept_and_read_back_to_the_bit(folder, monkeypatch):
    """blanket-vector's E[1/c] (its expected error's, a dot product over the count's window) is kept as the
    calibration's values are: read back, the same float, without computing it again."""
    from privagg.privacy import shuffle
    from privagg.protocols import privacy_blanket as pb

    kept = pb._inverse_count_mean.__wrapped__  # below the process's lru_cache: the disk's layer
    computed = kept.uncached(5_000_000, 1, 20)
    assert kept(5_000_000, 1, 20) == computed  # computed and kept
    evaluation_cache._loaded.clear()
    monkeypatch.setattr(shuffle, "binomial_pmf", lambda *a: pytest.fail("computed again"))
    assert kept(5_000_000, 1, 20) == computed  # read back from the file
    assert any(path.name.startswith("blanket-vector-counts-") for path in folder.iterdir())


def test_another_version_of_the_code_reads_another_file(folder, tmp_path):
    source = tmp_path / "accountant.py"
    source.write_text("x = 1\n")
    before = evaluation_cache.version((str(source),))
    source.write_text("x = 2\n")
    evaluation_cache.version.cache_clear()
    assert evaluation_cache.version((str(source),)) != before


@pytest.mark.skipif(not hasattr(os, "getuid"), reason="no file owners")
def test_a_file_others_may_write_or_a_corrupt_one_is_not_read(folder):
    computed = calibrated()
    (kept,) = folder.iterdir()
    planted = {key: (0.0).hex() for key in json.loads(kept.read_text())}  # delta 0 everywhere: gamma would shrink
    kept.write_text(json.dumps(planted))
    kept.chmod(0o666)
    evaluation_cache._loaded.clear()
    assert calibrated() == computed
    kept.write_text("{not json")
    kept.chmod(0o600)
    evaluation_cache._loaded.clear()
    assert calibrated() == computed
    kept.write_text(json.dumps({key: [1] if i % 2 else "0xnot" for i, key in enumerate(planted)}))  # not floats
    evaluation_cache._loaded.clear()
    assert calibrated() == computed


def test_off_keeps_nothing_and_an_unwritable_folder_is_no_error(tmp_path, monkeypatch):
    monkeypatch.setenv("PRIVAGG_CACHE", "off")
    evaluation_cache._loaded.clear()
    computed = calibrated()
    assert not blanket.values_kept() and not list(tmp_path.iterdir())
    blocked = tmp_path / "file"
    blocked.write_text("")
    monkeypatch.setenv("PRIVAGG_CACHE", str(blocked / "cache"))  # under a file: cannot be made
    assert calibrated() == computed
    evaluation_cache._loaded.clear()
