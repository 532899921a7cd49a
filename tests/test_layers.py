"""The package's import graph: layers in a fixed order, nothing imports upward, no cycles.

Every import counts, at the top of a file or inside a function (a lazy import is still a
dependency). Layers, bottom to top: core, export, measure, mini, real, spade, workbench, commands;
`rvqspec/__init__.py` and `rvqspec/cli.py` sit above them all.
"""
from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "rvqspec"
LAYERS = ("core", "export", "measure", "mini", "real", "spade", "workbench", "commands")
TOP = len(LAYERS)


def modules(root: Path = PACKAGE) -> dict[str, Path]:
    out = {}
    for p in sorted(root.rglob("*.py")):
        parts = list(p.relative_to(root.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = p
    return out


def layer(module: str) -> int:
    parts = module.split(".")
    if len(parts) >= 2 and parts[1] in LAYERS:
        return LAYERS.index(parts[1])
    return TOP


def imports(mods: dict[str, Path]) -> dict[str, set[str]]:
    """module -> the rvqspec modules it imports (resolved to the longest existing module name)."""
    edges: dict[str, set[str]] = defaultdict(set)
    for name, path in mods.items():
        pkg = name if path.name == "__init__.py" else name.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.ImportFrom):
                if node.level:
                    base = pkg.split(".")[: len(pkg.split(".")) - node.level + 1]
                    target = ".".join(base + ([node.module] if node.module else []))
                else:
                    target = node.module or ""
                cands = [f"{target}.{a.name}" for a in node.names] + [target]
            elif isinstance(node, ast.Import):
                cands = [a.name for a in node.names]
            else:
                continue
            for c in cands:
                while c and c not in mods:
                    c = c.rpartition(".")[0]
                if c and c != name and c.startswith("rvqspec"):
                    edges[name].add(c)
    return edges


def upward(mods, edges) -> list[str]:
    bad = []
    for src, dsts in edges.items():
        for dst in dsts:
            if dst == "rvqspec" or dst.endswith(".__init__"):
                continue
            if layer(dst) > layer(src):
                bad.append(f"{src} ({LAYERS[layer(src)] if layer(src) < TOP else 'top'}) imports {dst}")
    return sorted(bad)


def cycles(edges) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index, low, stack, on, out, counter = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in edges.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in list(edges):
        if v not in index:
            visit(v)
    return out


def test_every_module_sits_in_a_layer():
    stray = [m for m in modules() if layer(m) == TOP and m not in ("rvqspec", "rvqspec.cli")]
    assert stray == [], f"modules outside the layer folders: {stray}"


def test_nothing_imports_upward():
    mods = modules()
    assert upward(mods, imports(mods)) == []


def test_no_import_cycle():
    mods = modules()
    edges = imports(mods)
    # package __init__ files re-export their own modules; a module importing its package's
    # __init__ is not a cycle of the architecture.
    edges = {s: {d for d in ds if not s.startswith(d + ".")} for s, ds in edges.items()}
    assert cycles(edges) == []


def test_the_checks_can_fail(tmp_path):
    """Negative control: a core module that imports the workbench, and a two-module cycle."""
    root = tmp_path / "rvqspec"
    for sub in ("core", "workbench"):
        (root / sub).mkdir(parents=True)
        (root / sub / "__init__.py").write_text("")
    (root / "__init__.py").write_text("")
    (root / "core" / "a.py").write_text("def f():\n    from rvqspec.workbench.b import g\n")
    (root / "workbench" / "b.py").write_text("from rvqspec.core import a\n")
    mods = modules(root)
    edges = imports(mods)
    assert upward(mods, edges) == ["rvqspec.core.a (core) imports rvqspec.workbench.b"]
    assert cycles(edges) == [["rvqspec.core.a", "rvqspec.workbench.b"]]


@pytest.mark.parametrize("name,expected", [("rvqspec.core.tree", 0), ("rvqspec.commands.spec", 7),
                                           ("rvqspec.cli", TOP)])
def test_layer_of(name, expected):
    assert layer(name) == expected
