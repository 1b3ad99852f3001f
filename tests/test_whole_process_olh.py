"""Issue 48's OLH row as a whole process: what `privagg estimate olh` on a text file of integers no longer loads
(Arrow, for a file of one integer a line) gives what it gave.

tests/data/olh_whole_process.json records, from the code before those changes (0792430), the JSON report (less its
timings and the input's path) and the lines printed to a pipe of `privagg estimate olh` over 60,000 users at
d = 1,024 (FE1's counting by key, the benchmark's path), from a text file of one integer a line. Regenerate with
``python tests/test_whole_process_olh.py`` only for a change meant to move a seeded result, and say why.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

DATA = Path(__file__).resolve().parent / "data" / "olh_whole_process.json"
USERS = 60_000  # above the users whose messages OLH counts by key at d = 1,024 (hashing.by_key_cheaper)


def olh_run(folder: Path) -> dict:
    """The report (less timings and input) and the printed lines (the input's path as INPUT) of the pinned run."""
    from privagg.cli import app

    rng = np.random.default_rng(48)
    items = folder / "items.txt"
    items.write_text("".join(f"{x}\n" for x in np.minimum(rng.zipf(1.1, USERS) - 1, 1023).tolist()))
    output = folder / "report.json"
    result = CliRunner().invoke(app, ["estimate", "olh", "--input", str(items), "--epsilon", "1", "--domain", "1024",
                                      "--seed", "1", "--output", str(output)])
    assert result.exit_code == 0, result.output
    report = json.loads(output.read_text())
    del report["simulation"]["seconds"], report["input"]
    return {"report": report, "printed": result.stdout.replace(str(items), "INPUT")}


def test_olh_report_and_table_as_before(tmp_path):
    assert olh_run(tmp_path) == json.loads(DATA.read_text())


def arrow_codes(path: Path, item_type: str = "auto") -> list[int]:
    """The codes Arrow's reader gives (io.items.encode_blocks over io.blocks._blocks), as before the numpy reader."""
    from privagg.io import InputFormat
    from privagg.io.blocks import _blocks
    from privagg.io.items import encode_blocks
    from privagg.simulate.frequency import item_encoder

    fmt = InputFormat(item_type=item_type)
    blocks = _blocks(path, "text", fmt, "input")
    return encode_blocks(blocks, item_encoder(2**62), fmt, "input", path, bound=lambda: path.stat().st_size).codes.tolist()


@pytest.mark.parametrize("chunk", [7, 64, 1 << 24])
def test_plain_text_integers_as_arrow_reads_them(tmp_path, monkeypatch, chunk):
    """Files of 1 to 18 digits a line (leading zeros, the last break there or not), read in chunks that cut lines
    anywhere: the same codes as Arrow's reader."""
    from privagg.io import InputFormat, items, read_codes
    from privagg.simulate.frequency import item_encoder

    monkeypatch.setattr(items, "PLAIN_TEXT_CHUNK", chunk)
    rng = np.random.default_rng(chunk)
    path = tmp_path / "items.txt"
    for trial in range(40):
        digits = rng.integers(1, 19, rng.integers(1, 60))
        text = "".join(f"{int(rng.integers(0, 10**d)):0{d}d}\n" if rng.random() < 0.2 else f"{rng.integers(0, 10**d)}\n"
                       for d in digits.tolist())
        path.write_text(text[:-1] if trial % 2 else text)
        expected = arrow_codes(path)
        assert items._plain_text_integers(path).tolist() == expected
        for item_type in ("auto", "int"):
            assert read_codes(path, item_encoder(2**62), InputFormat(item_type=item_type)).codes.tolist() == expected


@pytest.mark.parametrize("text", [b"1\n\n2\n", b"1\r\n2\r\n", b"+1\n2\n", b"-1\n", b"\xef\xbb\xbf1\n2\n", b"1 \n2\n",
                                  b"\n1\n", b"1" * 19 + b"\n", b"1\n2\x00\n", b"", b"1e3\n", b"\xd9\xa3\n"])
def test_any_other_text_file_is_left_to_arrow(tmp_path, text):
    """Anything but whole lines of ASCII digits (a blank line, CR LF, a sign, a byte-order mark, a space, 19 digits,
    a NUL, an exponent, another script's digit, an empty file) is not read by numpy: Arrow's reader reads it, its
    values or its error as before."""
    from privagg.errors import ParameterError
    from privagg.io import InputFormat, items, read_codes
    from privagg.simulate.frequency import item_encoder

    path = tmp_path / "items.txt"
    path.write_bytes(text)
    assert items._plain_text_integers(path) is None
    try:
        expected = arrow_codes(path)
    except ParameterError as err:
        with pytest.raises(ParameterError) as caught:
            read_codes(path, item_encoder(2**62), InputFormat())
        assert str(caught.value) == str(err)
    else:
        assert read_codes(path, item_encoder(2**62), InputFormat()).codes.tolist() == expected


def test_a_value_outside_the_domain_names_its_line(tmp_path):
    from privagg.errors import ParameterError
    from privagg.io import InputFormat, read_codes
    from privagg.simulate.frequency import item_encoder

    path = tmp_path / "items.txt"
    path.write_text("1\n2\n5000\n3\n9999\n")
    with pytest.raises(ParameterError, match=f"got 5000 on line 3 of {path}$"):
        read_codes(path, item_encoder(1024), InputFormat())


def test_estimate_on_integers_loads_no_arrow(tmp_path):
    """The whole command, in its own process: a text file of integers needs no Arrow."""
    items = tmp_path / "items.txt"
    items.write_text("".join(f"{x % 50}\n" for x in range(3000)))
    code = ("import sys; from privagg.cli import main; sys.argv = ['privagg', 'estimate', 'olh', '--input', "
            f"{str(items)!r}, '--epsilon', '1', '--domain', '64', '--seed', '1']\n"
            "try:\n    main()\nexcept SystemExit as e:\n    assert not e.code, e.code\n"
            "print(sorted(m for m in sys.modules if m.split('.')[0] == 'pyarrow'))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.splitlines()[-1] == "[]", done.stdout + done.stderr


def test_a_table_shows_markup_and_emoji_codes_as_text(capsys):
    """An item (or title) holding rich's markup or an emoji code is printed as it is: "[/]" raised rich's
    MarkupError (a traceback for a user's data) and ":smile:" became an emoji."""
    from privagg.cli import output

    output._table("items [b]x[/b]", [("rank", "right"), ("item", "left")], [["1", "[/]"], ["2", ":smile: [red]"]])
    out = capsys.readouterr().out
    assert "items [b]x[/b]" in out and "[/]" in out and ":smile: [red]" in out, out


if __name__ == "__main__":
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        DATA.write_text(json.dumps(olh_run(Path(tmp)), indent=1, sort_keys=True, ensure_ascii=False) + "\n")
    print(f"wrote {DATA}", file=sys.stderr)
