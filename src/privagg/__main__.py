"""``python -m privagg``: the command line."""

from .cli import main

try:
    main()
finally:
    # CPython 3.11 and 3.12: a KeyboardInterrupt that ends a string exec or eval (a dataclass or namedtuple being
    # made when demo-service's SIGTERM arrived) sets a flag that makes ``python -m`` kill itself by SIGINT at exit
    # (status -2, no message) even after the interrupt was handled and the exit status chosen; a string exec that
    # completes clears it. (The ``privagg`` script is a file, which that check skips.)
    exec("")
