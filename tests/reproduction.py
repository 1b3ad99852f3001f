"""What the reproduce tests share: one quick run per module, and reading the CSV and PNG files it writes."""

import csv
import struct

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def quick_run(module, out, seed=0):
    """(out, summary, progress calls) of ``module.run`` on its quick grid."""
    calls = []
    summary = module.run(out, quick=True, seed=seed, progress=lambda *a: calls.append(a))
    return out, summary, calls


def read(path):
    """(header, rows as dicts) of a CSV file."""
    with open(path, newline="") as f:
        rows = list(csv.reader(f))
    return rows[0], [dict(zip(rows[0], r)) for r in rows[1:]]


def png_size(path):
    """(width, height) of a PNG file, after checking that it is one (signature, IHDR, over 10 kB)."""
    data = path.read_bytes()
    assert len(data) > 10_000 and data[:8] == PNG_SIGNATURE
    assert data[12:16] == b"IHDR"
    return struct.unpack(">II", data[16:24])
