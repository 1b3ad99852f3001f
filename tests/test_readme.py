"""The README's Python example and command lines run as written."""

import re
import shlex
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

README = (Path(__file__).resolve().parent.parent / "README.md").read_text()


def blocks(language: str) -> list[str]:
    """The README's fenced blocks of ``language`` ("" for plain ones), each fence paired with its own closing."""
    return [body for lang, body in re.findall(r"^```(\w*)\n(.*?)^```$", README, flags=re.S | re.M) if lang == language]


def run_commands(commands: str, folder: Path) -> None:
    """Each README command line (continuations joined, comments dropped), run in ``folder``: all must succeed."""
    for line in commands.replace("\\\n", " ").splitlines():
        args = shlex.split(line.split("#")[0])
        assert args[0] == "privagg"
        result = subprocess.run([sys.executable, "-m", "privagg", *args[1:]], cwd=folder, capture_output=True,
                                text=True)
        assert result.returncode == 0, (line, result.stderr)


def test_python_example_runs_and_names_the_top_items(capsys):
    (example,) = blocks("python")
    exec(compile(example, "README.md", "exec"), {})
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("apple: ") and lines[1].startswith("pear: ")
    apple = float(lines[0].split()[1])
    assert abs(apple - 50_000) < 2_000  # 0.5 n, within a few hundred of the noise's and sampling's sd
    assert lines[2].startswith("privacy: (1, 1e-10)-DP, shuffle model")


@pytest.mark.slow  # starts a Dask cluster
def test_command_lines_run_as_written(tmp_path):
    (commands,) = [b for b in blocks("") if b.startswith("privagg protocols")]
    rng = np.random.default_rng(0)
    apps = rng.choice(["maps", "mail", "chat", "news"], size=20_000, p=[0.4, 0.3, 0.2, 0.1])
    (tmp_path / "items.csv").write_text("user,app\n" + "".join(f"{i},{a}\n" for i, a in enumerate(apps)))
    (tmp_path / "names.txt").write_text("maps\nmail\nchat\nnews\ngames\n")
    run_commands(commands, tmp_path)
    assert (tmp_path / "report.json").exists() and (tmp_path / "msgs" / "params.json").exists()


@pytest.mark.slow  # faithful sharing among 2,000 users, and the quick reproduction
def test_sampling_command_lines_run_as_written(tmp_path):
    (commands,) = [b for b in blocks("") if b.startswith("privagg estimate dpds")]
    rng = np.random.default_rng(0)
    answers = ["yes", "no", "maybe", "later"]
    rows = rng.choice(answers, size=1_000, p=[0.35, 0.3, 0.2, 0.15])
    eps = rng.choice([0.5, 2.0], size=rows.size)
    (tmp_path / "survey.csv").write_text("answer,eps\n" + "".join(f"{a},{e}\n" for a, e in zip(rows, eps)))
    (tmp_path / "answers.txt").write_text("\n".join(answers) + "\n")
    run_commands(commands, tmp_path)
    assert (tmp_path / "results" / "variance_vs_n.png").exists()


@pytest.mark.slow  # the quick reproduction, a dozen simulations
def test_vector_command_lines_run_as_written(tmp_path):
    (commands,) = [b for b in blocks("") if b.startswith("privagg estimate blanket-vector")]
    rng = np.random.default_rng(0)
    vectors = rng.random((5_000, 6)) * 1.02  # a few values above 1: --clip clips them
    (tmp_path / "vectors.csv").write_text("a,b,c,d,e,f\n" + "".join(",".join(f"{v:.4f}" for v in row) + "\n"
                                                                  for row in vectors))
    heavy = [7, 2**33 + 5, 2**40 - 1]
    index = np.where(rng.random(20_000) < 0.5, rng.choice(heavy, 20_000), rng.integers(0, 2**40, 20_000))
    (tmp_path / "pairs.csv").write_text("coordinate,weight\n" + "".join(f"{i},{w:.4f}\n" for i, w in
                                                                          zip(index, rng.random(20_000))))
    (tmp_path / "coordinates.txt").write_text("".join(f"{c}\n" for c in heavy))
    run_commands(commands, tmp_path)
    assert (tmp_path / "vmsgs" / "params.json").exists()
    assert (tmp_path / "vector-results" / "mse_vs_t.png").exists()


@pytest.mark.slow  # 5 protocols x 4 epsilons x 3 trials over 100,000 users
def test_compare_command_line_runs_as_written(tmp_path):
    (commands,) = [b for b in blocks("") if b.startswith("privagg compare")]
    run_commands(commands, tmp_path)
    assert (tmp_path / "compare" / "error_vs_epsilon.png").exists()
