"""``privagg args`` through its entry point (privagg.cli.main), in the test's own process: what the command does,
prints and exits with, without a new interpreter's start-up and imports (about a second each on the test hosts).

For the checks where the process boundary adds nothing: an error's one line and exit status, what a report says.
The tests of what only a real process shows (standard input from a pipe, a terminal or not, signals, start-up
imports, memory) keep ``subprocess``.
"""

import io
import subprocess
import sys
from contextlib import redirect_stderr, redirect_stdout
from unittest import mock

from privagg.cli import main


def privagg(*args: str) -> subprocess.CompletedProcess:
    """The command's exit status, standard output and standard error (text), as ``subprocess.run`` gives them."""
    out, err = io.StringIO(), io.StringIO()
    with mock.patch.object(sys, "argv", ["privagg", *args]), redirect_stdout(out), redirect_stderr(err):
        try:
            main()
            status = 0
        except SystemExit as exit_:
            status = exit_.code if isinstance(exit_.code, int) else int(exit_.code is not None)
    return subprocess.CompletedProcess(["privagg", *args], status, out.getvalue(), err.getvalue())
