"""One door upstream: private TorchRL, TensorDict and torch names appear only in ``_compat``.

The package's sources are read statically. A private name (``_x``, not a dunder) is foreign
when it is used as an attribute (``obj._x``, or ``getattr(obj, "_x")`` and its kin) and the
package itself defines no such name (as a function, class or attribute it assigns): then it can
only belong to an object of another package. Attributes of a name imported from torch, torchrl
or tensordict (``torch._VF``, ``EnvBase._step_mdp``) are foreign even where the package defines
the same name, and so are imports of private modules or names of those packages. Foreign private
names of the standard library are listed in ``STDLIB_PRIVATE`` with their reason; everything
else must go through :mod:`torchrl_ext._compat`.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import torchrl_ext
from torchrl_ext import _compat

ROOT = Path(torchrl_ext.__file__).parent
COMPAT = ROOT / "_compat.py"
UPSTREAM = ("torch", "torchrl", "tensordict")

#: Private names of the standard library the package may use, each with why it is not upstream's.
STDLIB_PRIVATE = {
    "_replace": "namedtuple's documented API (underscored so as not to clash with fields)",
    "_SubParsersAction": "argparse's type of add_subparsers(), needed to subclass it",
    "_get_help_string": "argparse.HelpFormatter's override point for help text",
}

#: Builtins that read or write an attribute named by their second argument.
ATTRIBUTE_BUILTINS = ("getattr", "hasattr", "setattr", "delattr")


def _named_attribute(call: ast.Call) -> tuple[ast.expr, str] | None:
    """``(object, name)`` of ``getattr(obj, "_x")`` and its kin, or ``obj.__dict__.get("_x")``."""
    func = call.func
    if isinstance(func, ast.Name) and func.id in ATTRIBUTE_BUILTINS and len(call.args) > 1:
        obj, name = call.args[0], call.args[1]
    elif (
        isinstance(func, ast.Attribute)
        and func.attr == "get"
        and isinstance(func.value, ast.Attribute)
        and func.value.attr == "__dict__"
        and call.args
    ):
        obj, name = func.value.value, call.args[0]
    else:
        return None
    if isinstance(name, ast.Constant) and isinstance(name.value, str) and _is_private(name.value):
        return obj, name.value
    return None


def _is_private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__") and name != "_"


def _package_sources() -> dict[Path, ast.Module]:
    return {path: ast.parse(path.read_text()) for path in sorted(ROOT.rglob("*.py"))}


def own_names(trees: list[ast.Module]) -> set[str]:
    """Private names the package defines: functions, classes, names and attributes it assigns."""
    names = set()
    for tree in trees:
        for node in ast.walk(tree):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                names.add(node.name)
            elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
                names.add(node.attr)
            elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
                names.add(node.id)  # module and class attributes
            elif (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Name)
                and node.func.id == "setattr"
                and len(node.args) > 1
                and isinstance(node.args[1], ast.Constant)
            ):
                names.add(node.args[1].value)
    return {name for name in names if isinstance(name, str) and _is_private(name)}


def _upstream_bindings(tree: ast.Module) -> set[str]:
    """Local names bound by importing from torch, torchrl or tensordict."""
    bound = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] in UPSTREAM:
                    bound.add(alias.asname or alias.name.split(".")[0])
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            if node.module.split(".")[0] in UPSTREAM:
                bound.update(alias.asname or alias.name for alias in node.names)
    return bound


def _private_imports(tree: ast.Module) -> list[str]:
    """Imports of a private module or name of torch, torchrl or tensordict."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            modules = [alias.name for alias in node.names]
            names: list[str] = []
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            modules = [node.module]
            names = [alias.name for alias in node.names]
        else:
            continue
        for module in modules:
            parts = module.split(".")
            if parts[0] in UPSTREAM and (
                any(_is_private(part) for part in parts) or any(_is_private(n) for n in names)
            ):
                found.append(f"line {node.lineno}: {ast.unparse(node)}")
    return found


def _attribute_uses(tree: ast.Module) -> list[tuple[int, ast.expr, str]]:
    """``(line, object, name)`` of every private attribute read or written by name."""
    uses = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and _is_private(node.attr):
            uses.append((node.lineno, node.value, node.attr))
        elif isinstance(node, ast.Call) and (named := _named_attribute(node)):
            uses.append((node.lineno, *named))
    return uses


def foreign_uses(tree: ast.Module, own: set[str]) -> list[str]:
    """Private upstream names ``tree`` uses, as ``"line N: expression"`` strings."""
    bound = _upstream_bindings(tree)
    found = _private_imports(tree)
    for line, obj, name in _attribute_uses(tree):
        on_upstream = isinstance(obj, ast.Name) and obj.id in bound
        if name in STDLIB_PRIVATE and not on_upstream:
            continue
        if on_upstream or name not in own:
            found.append(f"line {line}: {ast.unparse(obj)}.{name}")
    return found


def _check(source: str, own: set[str] = frozenset()) -> list[str]:
    return foreign_uses(ast.parse(source), set(own))


SOURCES = _package_sources()
OWN = own_names([tree for path, tree in SOURCES.items() if path != COMPAT])


@pytest.mark.parametrize(
    "path",
    sorted(path for path in SOURCES if path != COMPAT),
    ids=lambda p: str(p.relative_to(ROOT)),
)
def test_private_upstream_names_only_through_compat(path):
    found = foreign_uses(SOURCES[path], OWN)
    assert not found, (
        f"{path.relative_to(ROOT)} uses private upstream names {found}: add a named accessor "
        "to torchrl_ext/_compat.py (why it is needed, what public API would replace it)"
    )


class TestCheck:
    """The check finds each way of reaching a private upstream name, and passes our own names."""

    @pytest.mark.parametrize(
        "source",
        [
            "storage._storage",
            "self._rng",
            "x = getattr(writer, '_cursor', None)",
            "hasattr(buffer, '_rb')",
            "env.__dict__.get('_torchrl_native_autoreset', False)",
            "import torch\ntorch._VF.lstm",
            "from torchrl.envs import EnvBase\nEnvBase._step_mdp(env)",
            "from tensordict import TensorDict\nTensorDict._own(x)",
            "from torchrl.envs.utils import _update_during_reset",
            "from torchrl.envs.utils._private import x",
            "import torch._dynamo",
        ],
    )
    def test_finds_a_private_upstream_name(self, source):
        assert _check(source, own={"_own"})

    @pytest.mark.parametrize(
        "source",
        [
            "self._own = 1\nself._own",
            "other._own",
            "getattr(self, '_own', None)",
            "self.__dict__.get('_own')",
            "import torch\ntorch.nn.LSTM",
            "from torchrl_ext._checks import check_int",
            "packed._replace(data=None)",
            "import argparse\nargparse._SubParsersAction",
            "self.__dict__",
        ],
    )
    def test_passes_our_own_and_public_names(self, source):
        assert not _check(source, own={"_own"})

    def test_own_names_are_what_the_package_defines(self):
        tree = ast.parse(
            "class _A:\n"
            "    _c = 0\n"
            "    def _m(self):\n"
            "        self._x = 1\n"
            "        setattr(self, '_y', 2)\n"
            "        return other._z\n"
        )
        assert own_names([tree]) == {"_A", "_c", "_m", "_x", "_y"}


def test_every_accessor_says_why_and_what_would_replace_it():
    for name in _compat.__all__:
        doc = getattr(_compat, name).__doc__ or ""
        assert "Why:" in doc and "Public replacement:" in doc, name
