"""``python -m privagg``: the command line."""

from .cli import main

main()
