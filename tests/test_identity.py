"""Protocol identity lives in the registry (issue 45, item 3): outside ``protocols/`` and ``reproduce/``, no module
compares anything with a registered protocol's name, keys a table by one, or picks behaviour by a parameters'
``model``; what a layer needs of a protocol it asks of its registry entry (its kinds, its capabilities as flags).
Read from every module's syntax tree, so that a name in a docstring, a help text or a default is not a comparison.
"""

from __future__ import annotations

import ast
from pathlib import Path

from privagg.protocols.registry import ENTRIES

PACKAGE = Path(__file__).resolve().parent.parent / "src" / "privagg"
OWN_IDENTITY = ("protocols", "reproduce")  # the protocols themselves, and the papers' reproductions of them
NAMES = {entry.name for entry in ENTRIES}
PREFIXES = {name[:i] for name in NAMES for i in range(2, len(name) + 1)}  # .startswith("tss"), ("fe"), ...


def _named(node: ast.AST) -> bool:
    """A registered name, or a tuple, list or set holding one."""
    if isinstance(node, ast.Constant):
        return node.value in NAMES
    return isinstance(node, (ast.Tuple, ast.List, ast.Set)) and any(_named(e) for e in node.elts)


def _model(node: ast.AST) -> bool:
    """Some parameters' ``model`` (a privacy description's own, ``self.model``, is the sentence's)."""
    return (isinstance(node, ast.Attribute) and node.attr == "model"
            and not (isinstance(node.value, ast.Name) and node.value.id == "self"))


def identity_uses(source: str) -> list[tuple[int, str]]:
    """(line, what) of each comparison with a registered protocol name (``==``, ``!=``, ``in``; ``startswith`` or
    ``endswith`` a name or a prefix of one), each table keyed by names, and each ``.model`` compared or looked
    up, in ``source``."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Compare):
            operands = [node.left, *node.comparators]
            if any(_named(o) for o in operands):
                found.append((node.lineno, "compared with a protocol's name"))
            if any(_model(o) for o in operands):
                found.append((node.lineno, "a parameters' model compared"))
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            method, args = node.func.attr, node.args
            if method in ("startswith", "endswith") and args and isinstance(args[0], ast.Constant) and (
                    args[0].value in PREFIXES or args[0].value in NAMES):
                found.append((node.lineno, f"{method} a protocol's name"))
            if method == "get" and args and _model(args[0]):
                found.append((node.lineno, "a table looked up by a parameters' model"))
        elif isinstance(node, ast.Dict) and any(k is not None and _named(k) for k in node.keys):
            found.append((node.lineno, "a table keyed by protocol names"))
        elif isinstance(node, ast.Subscript) and _model(node.slice):
            found.append((node.lineno, "a table looked up by a parameters' model"))
    return sorted(found)


def test_no_layer_outside_the_protocols_knows_a_protocol_by_its_name():
    found = [f"{path.relative_to(PACKAGE)}:{line}: {what}" for path in sorted(PACKAGE.rglob("*.py"))
             if path.relative_to(PACKAGE).parts[0] not in OWN_IDENTITY
             for line, what in identity_uses(path.read_text())]
    assert not found, "ask the registry entry instead (its kinds and capabilities):\n" + "\n".join(found)


def test_the_guard_sees_every_kind_of_identity_use():
    source = '''
if protocol == "fe1": pass
if parameters.protocol != "sparse-vector-hashed": pass
if name in ("dpds", "tss"): pass
if protocol.startswith("tss"): pass
if protocol.value.startswith("fe"): pass
options = {"dpds": 1, "dpdg": 2}[protocol]
if parameters.model == "two_servers": pass
kind = {"two_servers": "tss"}.get(parameters.model, "analyzer")
service = SERVICES[parameters.model]
'''
    assert [line for line, _ in identity_uses(source)] == [2, 3, 4, 5, 6, 7, 8, 9, 10]
    innocent = '''
"""fe1 and dpds, as documentation names them."""
def demo(protocol="fe1"): return calibrate("fe-hh", epsilon=1)
if line.startswith("MemAvailable:"): pass
help = "fe1: the shuffle model's collector"
if service == "two-servers": pass
'''
    assert identity_uses(innocent) == []
