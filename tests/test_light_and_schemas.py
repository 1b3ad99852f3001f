"""The light client path and the published report schemas."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from privagg.reports import REPORT_TYPES, json_schema

ROOT = Path(__file__).resolve().parent.parent
HEAVY = ("scipy", "numba", "pyarrow", "rich", "typer", "dask", "pydantic", "wordfreq")

CLIENT_PATH = """
import sys, privagg
after_import = sorted(m for m in {heavy} if m in sys.modules)
params = privagg.load_parameters(dict(protocol="fe1", epsilon=1.0, delta=1e-10, n_users=100000,
    domain_size=16777216, calibration="numeric", mu=98.01797242329297, rho=8.512860904962995, bins=8685,
    modulus=16777259, c=1.0), verify=False)
messages = privagg.client(params).randomize([42, 7])
assert len(messages) >= 2
print(after_import, sorted(m for m in {heavy} if m in sys.modules))
"""


def test_import_and_client_path_load_no_heavy_module():
    out = subprocess.run([sys.executable, "-c", CLIENT_PATH.format(heavy=HEAVY)], capture_output=True, text=True,
                         check=True).stdout
    assert out.strip() == "[] []"


def test_reading_npy_files_loads_no_arrow(tmp_path):
    """Arrow reads tables and text; a .npy of vectors, of item codes or of raw items is read without it (its import
    is a tenth of a second)."""
    import numpy as np

    np.save(tmp_path / "v.npy", np.zeros((3, 2), dtype=np.float32))
    np.save(tmp_path / "i.npy", np.array([5, 1, 5]))
    code = ("import sys; from privagg.io import read_codes, read_items, read_vectors; "
            "from privagg.core.encoding import ItemEncoder; "
            f"v = read_vectors({str(tmp_path / 'v.npy')!r}); c = read_codes({str(tmp_path / 'i.npy')!r}, "
            f"ItemEncoder(10, b'k')).codes; i, _ = read_items({str(tmp_path / 'i.npy')!r}); "
            "print(v.shape, v.dtype, c.tolist(), i.tolist(), 'pyarrow' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "(3, 2) float32 [5, 1, 5] [5, 1, 5] False"


@pytest.mark.parametrize("command", sorted(REPORT_TYPES))
def test_published_schemas_are_generated_from_the_types(command):
    published = json.loads((ROOT / "docs" / "schemas" / f"{command}.json").read_text())
    assert published == json_schema(REPORT_TYPES[command]), f"regenerate: privagg schema {command}"
