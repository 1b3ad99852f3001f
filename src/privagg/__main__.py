"""``python -m privagg``: the command line."""

from .cli import app

app(prog_name="privagg")
