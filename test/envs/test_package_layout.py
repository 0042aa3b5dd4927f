"""The package stays readable: no import cycle.

Modules are split by concept, not by length, so no line count is enforced here.

Imports are read statically: ``from a.b import c`` is an edge to ``a.b.c`` when that is a module
of the package, else to ``a.b``; importing a submodule is not an edge to its package.
"""

import ast
from pathlib import Path

import torchrl_ext

ROOT = Path(torchrl_ext.__file__).parent
ENVS = ROOT / "envs"


def _module_name(path: Path) -> str:
    parts = path.relative_to(ROOT.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _modules() -> dict[str, Path]:
    return {_module_name(p): p for p in ROOT.rglob("*.py")}


def _edges(path: Path, modules: dict[str, Path]) -> set[str]:
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names if a.name in modules)
        elif isinstance(node, ast.ImportFrom) and node.module in modules:
            for alias in node.names:
                sub = f"{node.module}.{alias.name}"
                out.add(sub if sub in modules else node.module)
    return out


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle of ``graph`` (a list of modules), or ``None``."""
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return stack[stack.index(nxt) :] + [nxt]
            if nxt not in state and (found := visit(nxt)):
                return found
        stack.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state and (found := visit(node)):
            return found
    return None


def test_cycle_finder_finds_a_cycle():
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": set()}) is None


def test_no_import_cycle_in_the_envs():
    modules = _modules()
    graph = {
        name: _edges(path, modules)
        for name, path in modules.items()
        if name.startswith("torchrl_ext.envs")
    }
    assert _cycle(graph) is None


def test_no_import_cycle_in_the_package():
    modules = _modules()
    graph = {name: _edges(path, modules) for name, path in modules.items()}
    assert _cycle(graph) is None
