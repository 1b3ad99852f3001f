"""The README's Python example and command lines run as written."""

import os
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
    example, _ = blocks("python")
    exec(compile(example, "README.md", "exec"), {})
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("apple: ") and lines[1].startswith("pear: ")
    apple = float(lines[0].split()[1])
    assert abs(apple - 50_000) < 2_000  # 0.5 n, within a few hundred of the noise's and sampling's sd
    assert lines[2].startswith("privacy: (1, 1e-10)-DP, shuffle model")


def test_dataframe_example_prints_the_output_shown(capsys):
    """The DataFrame example runs as written and prints what the README shows: the guarantee line as it is, the
    table's lines with the same items and layout, each estimate within 4 standard errors of the column's count."""
    import matplotlib

    matplotlib.use("Agg")  # the example's plot() draws off screen
    _, example = blocks("python")
    names: dict = {}
    exec(compile(example, "README.md", "exec"), names)
    printed = capsys.readouterr().out.splitlines()
    (shown,) = [b for b in blocks("text") if b.startswith("privacy:")]
    shown = shown.splitlines()
    assert printed[0] == shown[0]
    assert [line.split()[:1] for line in printed[1:]] == [line.split()[:1] for line in shown[1:]]
    counts = names["users"]["app"].value_counts()
    for line in printed[3:]:
        item, estimate, stderr = line.split()
        assert abs(float(estimate) - counts[item]) < 4 * float(stderr) + 0.1, line
    ax = names["ax"]
    assert [t.get_text() for t in ax.get_xticklabels()] == ["mail", "maps", "chat", "news"]
    assert " ".join(ax.get_title().splitlines()[1:]) == shown[0]  # wrapped
    import matplotlib.pyplot as plt

    plt.close(ax.figure)


def command_blocks() -> list[str]:
    """Every plain README block made of privagg command lines (the set-up and shell blocks are not)."""
    return [b for b in blocks("") if all(line.startswith(("privagg", " ")) or not line.strip()
                                         for line in b.splitlines())]


def test_every_command_block_is_run_here():
    firsts = [b.split()[1] + " " + b.split()[2] for b in command_blocks()]
    assert firsts == ["protocols #", "estimate dpds", "estimate blanket-vector", "estimate grr", "compare --protocols",
                      "demo-service #"], firsts  # a new block needs its row in the test below


# what each block writes, beyond its exit statuses
WRITTEN = {0: ("report.json", "msgs/params.json"), 1: ("results/variance_vs_n.png",),
           2: ("vmsgs/params.json", "vector-results/mse_vs_t.png"), 3: (), 4: ("compare/error_vs_epsilon.png",)}


@pytest.mark.slow  # Dask clusters, the quick reproductions, faithful sharing among 2,000 users
@pytest.mark.parametrize("index", range(5))  # demo-service: tests/service/test_faults.py runs it
def test_command_blocks_run_as_written_after_example_data(index, tmp_path):
    run_commands("privagg example-data .", tmp_path)
    run_commands(command_blocks()[index], tmp_path)
    assert all((tmp_path / name).exists() for name in WRITTEN[index]), WRITTEN[index]


def test_the_organisations_block_runs_with_devices_enrolling_where_it_says(tmp_path, monkeypatch):
    """The service section's operator block (a shell block: it keeps the task id in $TASK), run by bash as written,
    with 300 SDK devices pinning the printed key and enrolling where its comment says: the roster is signed."""
    import base64
    import json
    import time

    from fastapi.testclient import TestClient

    from privagg.protocols.registry import calibrate
    from privagg.service.sharing.client import SharingClient
    from privagg.service.sharing.server import SharingService, create_app
    from privagg.service.storage import connect
    from service_deployment import route_sdk_to

    block = next(b for b in blocks("") if b.startswith("privagg organisation keygen"))
    before, after = block.split("# each device")
    params = calibrate("dpds", epsilon=1, delta=1e-6, n_users=300, domain_size=5, min_count_fraction=0.1)
    (tmp_path / "params.json").write_text(json.dumps(params.to_dict()))
    shell = f'privagg() {{ "{sys.executable}" -m privagg "$@"; }}\nset -e\n'

    def bash(script: str, **env: str) -> str:
        done = subprocess.run(["bash", "-c", shell + script], cwd=tmp_path, capture_output=True, text=True,
                              env={**os.environ, **env})
        assert done.returncode == 0, (script, done.stderr)
        return done.stdout

    out = bash(before + 'echo "TASK=$TASK"\n').splitlines()
    pinned, task_id = base64.b64decode(out[0]), out[-1].removeprefix("TASK=")
    service = SharingService(connect(f"sqlite:///{tmp_path}/sharing.db", "sharing"), clock=time.time)
    http = TestClient(create_app(service, tick=None))
    route_sdk_to(http, monkeypatch)
    try:
        for token in (tmp_path / "tokens.txt").read_text().split():
            SharingClient.fetch("http://sharing", task_id, organisation_key=pinned).enroll(token)
        signed = bash(after.split("\n", 1)[1], TASK=task_id)
        assert f"task {task_id}: the roster of 300 users is signed and published; the task is in round1" in signed
        assert service.state(task_id)["state"] == "round1"
    finally:
        http.close()
        service.engine.dispose()
