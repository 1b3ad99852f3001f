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


# No module in src/ over this many lines (issue 45, item 5)
LONGEST = 800


def test_no_module_is_over_800_lines():
    lengths = {str(path.relative_to(PACKAGE)): len(path.read_text().splitlines()) for path in PACKAGE.rglob("*.py")}
    assert len(lengths) > 50 and lengths["cli/__init__.py"] > 0 and "service/shuffle/analyzer.py" in lengths
    assert not {name: n for name, n in lengths.items() if n > LONGEST}


# The services by topology over a common core (docs/architecture.md): each topology's subpackage imports the core
# (service/'s own modules) and none of the others; the core imports no topology. A party's migrations are its
# topology's (the analyzer's may read its aggregate codec).
SERVICE = PACKAGE / "service"
TOPOLOGIES = ("shuffle", "sharing", "two_servers")
MIGRATIONS = {"analyzer": "shuffle", "collector": "shuffle", "sharing": "sharing", "s1": "two_servers",
              "s2": "two_servers"}


def service_part(path: Path) -> str:
    """``path``'s topology (a subpackage of service/), or "core"."""
    parts = path.relative_to(SERVICE).parts
    if parts[0] == "migrations" and len(parts) > 2:
        return MIGRATIONS[parts[2]]
    return parts[0] if parts[0] in TOPOLOGIES else "core"


def imported_modules(path: Path, root: Path = PACKAGE, runtime: bool = False) -> set[str]:
    """The modules of the package at ``root`` that ``path`` imports, dotted from ``root`` (``service.shuffle.client``;
    ``from . import x`` names ``x`` within its package); ``runtime``: leaving out ``if TYPE_CHECKING:`` blocks."""
    package = list(path.relative_to(root).parts[:-1])
    tree = ast.parse(path.read_text())
    if runtime:
        for node in ast.walk(tree):
            if isinstance(node, ast.If) and isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING":
                node.body = []
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.level:
            base = package[:len(package) - (node.level - 1)] + (node.module.split(".") if node.module else [])
            found.add(".".join(base))
            found.update(".".join(base + [alias.name]) for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("privagg."):
            base = node.module.split(".")[1:]
            found.add(".".join(base))
            found.update(".".join(base + [alias.name]) for alias in node.names)
        elif isinstance(node, ast.Import):
            found.update(".".join(a.name.split(".")[1:]) for a in node.names if a.name.startswith("privagg."))
    return found


def test_the_service_topologies_import_the_core_and_not_each_other():
    found = set()
    for path in sorted(SERVICE.rglob("*.py")):
        own = service_part(path)
        for module in imported_modules(path):
            parts = module.split(".")
            if parts[0] == "service" and len(parts) > 1 and parts[1] in TOPOLOGIES and parts[1] != own:
                found.add((str(path.relative_to(PACKAGE)), module))
    assert not found, f"a topology or the core imports another topology: {sorted(found)}"
    assert {service_part(SERVICE / t / "__init__.py") for t in TOPOLOGIES} == set(TOPOLOGIES)


def test_the_service_reader_sees_a_topology_reaching_into_another(tmp_path):
    (tmp_path / "service" / "sharing").mkdir(parents=True)
    module = tmp_path / "service" / "sharing" / "m.py"
    module.write_text("from ..shuffle.client import Client\nfrom .. import storage\n\n\ndef f():\n"
                      "    from privagg.service.two_servers import servers\n")
    assert {"service.shuffle.client", "service.storage", "service.two_servers.servers"} <= imported_modules(
        module, tmp_path)


# Nothing outside protocols/ imports a protocol module's private name (``from ..protocols.x import _y``): what the
# outer layers need of a family is public, or reached through the registry
def private_imports(path: Path) -> set[str]:
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module:
            dotted = node.module.split(".")
            inside = dotted[0] == "protocols" and node.level >= 1 or dotted[:2] == ["privagg", "protocols"]
            if inside and len(dotted) > (1 if node.level else 2):
                found.update(f"{node.module}.{a.name}" for a in node.names if a.name.startswith("_"))
    return found


def test_no_outer_layer_imports_a_private_name_of_a_protocol_module():
    found = {str(path.relative_to(PACKAGE)): sorted(private_imports(path)) for path in PACKAGE.rglob("*.py")
             if room(path) != "protocols" and private_imports(path)}
    assert not found


def test_the_private_name_reader_sees_one(tmp_path):
    (tmp_path / "simulate").mkdir()
    module = tmp_path / "simulate" / "m.py"
    module.write_text("from ..protocols.heavy_hitters import CODE_PRIME, _walk\n\n\ndef f():\n"
                      "    from privagg.protocols.roles import _own\n    from ..protocols import _nothing\n")
    assert private_imports(module) == {"protocols.heavy_hitters._walk", "privagg.protocols.roles._own"}


# The simulator imports no family module: it reaches the protocols through the registry's entries and the
# family-neutral modules. A family module is one the registry names lazily (its _Module(...) calls), or one of
# protocols/ that imports a family module at run time.
PROTOCOLS = PACKAGE / "protocols"


def family_modules() -> set[str]:
    registry = ast.parse((PROTOCOLS / "registry.py").read_text())
    family = {f"protocols.{node.value}" for call in ast.walk(registry) if isinstance(call, ast.GeneratorExp)
              and isinstance(call.elt, ast.Call) and getattr(call.elt.func, "id", "") == "_Module"
              for node in ast.walk(call.generators[0].iter)
              if isinstance(node, ast.Constant) and isinstance(node.value, str)}
    assert {"protocols.balls_into_bins", "protocols.sampling_sharing", "protocols.two_server_parties"} <= family
    imports = {f"protocols.{path.stem}": imported_modules(path, runtime=True) for path in PROTOCOLS.glob("*.py")}
    while True:
        more = {name for name, modules in imports.items() if name != "protocols.registry" and modules & family}
        if more <= family:
            return family
        family |= more


def test_the_simulator_imports_no_family_module():
    family = family_modules()
    assert {"protocols.two_server_messages", "protocols.tss_parameters"} <= family  # named, or importing one
    found = {str(path.relative_to(PACKAGE)): sorted(imported_modules(path, runtime=True) & family)
             for path in (PACKAGE / "simulate").rglob("*.py")}
    assert not {name: modules for name, modules in found.items() if modules}
