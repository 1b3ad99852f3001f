"""docs/architecture.md's layer rules, read from every import in the package (lazy ones inside functions too).

Each room of the package may import only the rooms below it. An import that breaks a rule is listed in
KNOWN_BREAKS with its reason, to be removed: a new break fails, and so does a listed one that is gone (strike
it off).
"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "src" / "privagg"

# room: the rooms it may import (besides itself); the top (cli, __main__) imports anything
ALLOWED: dict[str, set[str]] = {
    "errors": set(),
    "core": {"errors"},
    "privacy": {"core", "errors"},
    "protocols": {"core", "privacy", "errors"},
    "reports": {"protocols", "privacy", "errors"},  # its types name the registry's protocols and parameters
    "io": {"core", "errors"},
    "datasets": {"errors"},
    "simulate": {"protocols", "privacy", "core", "io", "reports", "pipelines", "errors"},
    "engine": {"protocols", "privacy", "core", "io", "reports", "pipelines", "errors"},
    "audit": {"protocols", "core", "privacy", "reports", "simulate", "errors"},
    "compare": {"protocols", "core", "privacy", "reports", "simulate", "errors"},
    "reproduce": {"protocols", "core", "privacy", "reports", "simulate", "datasets", "errors"},
    # what a release holds: below the runners (simulate, engine, service), whose results it releases
    "pipelines": {"protocols", "core", "privacy", "reports", "io", "errors"},
    "service": {"protocols", "core", "privacy", "reports", "engine", "pipelines", "errors", "io"},
    "demos": {"service", "simulate", "pipelines", "engine", "reports", "io", "datasets", "protocols", "privacy",
              "core", "errors"},
    "__init__": {"core", "protocols", "errors"},
}
TOP = {"cli", "__main__"}

KNOWN_BREAKS: set[tuple[str, str]] = set()


def room(path: Path) -> str:
    parts = path.relative_to(PACKAGE).parts
    return parts[0] if len(parts) > 1 else path.stem


def imported_rooms(path: Path, root: Path = PACKAGE) -> set[str]:
    """The rooms of the package at ``root`` that ``path`` imports, relative (``from ..protocols import x``) or
    absolute (``privagg.x``), at module level or inside a function."""
    package = list(path.relative_to(root).parts[:-1])
    rooms = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.level:
            base = package[:len(package) - (node.level - 1)]
            target = base + (node.module.split(".") if node.module else [])
            rooms.update([target[0]] if target else [alias.name for alias in node.names])
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("privagg."):
            rooms.add(node.module.split(".")[1])
        elif isinstance(node, ast.Import):
            rooms.update(a.name.split(".")[1] for a in node.names if a.name.startswith("privagg."))
    return rooms


def breaks() -> set[tuple[str, str]]:
    found = set()
    for path in sorted(PACKAGE.rglob("*.py")):
        own = room(path)
        if own in TOP:
            continue
        assert own in ALLOWED, f"{path}: a room the layer rules do not place (add it to ALLOWED and the docs)"
        for target in imported_rooms(path) - {own, "__version__"}:
            if target not in ALLOWED[own]:
                found.add((str(path.relative_to(PACKAGE)), target))
    return found


def test_no_import_points_up_but_the_listed_ones():
    found = breaks()
    assert not found - KNOWN_BREAKS, f"new imports against docs/architecture.md's rules: {sorted(found - KNOWN_BREAKS)}"
    assert not KNOWN_BREAKS - found, f"gone, strike them off KNOWN_BREAKS: {sorted(KNOWN_BREAKS - found)}"


def test_the_reader_sees_every_kind_of_import(tmp_path):
    (tmp_path / "core").mkdir()
    module = tmp_path / "core" / "m.py"
    module.write_text("from ..errors import E\nfrom . import sibling\nimport privagg.io\n\n\ndef f():\n"
                      "    from ..protocols.registry import get\n    from privagg.simulate import runner\n")
    assert imported_rooms(module, tmp_path) == {"errors", "core", "io", "protocols", "simulate"}


# The command line's package: the modules its commands share, each importing only those before it, and no
# command's module (whose commands then load only where the command line names them)
CLI = PACKAGE / "cli"
CLI_SHARED = ("output", "options", "inputs")


def cli_modules(path: Path) -> set[str]:
    """The modules of the cli package that ``path`` (one of them) imports: ``from .x import y``, ``from . import x``."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.level == 1:
            found.update([node.module.split(".")[0]] if node.module else [alias.name for alias in node.names])
    return found


def test_the_command_lines_shared_modules_import_no_command():
    for index, name in enumerate(CLI_SHARED):
        imported = cli_modules(CLI / f"{name}.py")
        assert imported <= set(CLI_SHARED[:index]), f"cli/{name}.py imports {sorted(imported)}"
    assert {"output", "options"} <= cli_modules(CLI / "estimate.py")  # the reader sees them


# No module in src/ over this many lines (issue 45, item 5); service/ and protocols/ are being split on other
# branches: they join the rule when those land
LONGEST = 800
NOT_YET = ("service", "protocols")


def test_no_module_is_over_800_lines():
    lengths = {str(path.relative_to(PACKAGE)): len(path.read_text().splitlines()) for path in PACKAGE.rglob("*.py")
               if path.relative_to(PACKAGE).parts[0] not in NOT_YET}
    assert len(lengths) > 50 and lengths["cli/__init__.py"] > 0
    assert not {name: n for name, n in lengths.items() if n > LONGEST}
