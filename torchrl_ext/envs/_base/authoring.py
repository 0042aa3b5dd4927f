"""Checks of an env's authoring contract, run before Warp compiles anything of it.

An env's three Warp functions (see :class:`~torchrl_ext.envs.WarpEnv`) reach the kernels only
through generated code, so Warp reports a mistake in them, if at all, as an error in that code.
These checks read the functions' Python source instead and name the author's function and field:

* each function takes the arguments its role passes (``start``: 4, ``advance`` and
  ``observe``: 6), and an argument annotated with a type has the type the kernels pass
  (``i`` and ``step``: ``int``, ``key``: ``wp.uint32``);
* every field read from the state, constants, actions or observations exists
  (``s.<field>``, ``p.<field>``, ``a.<field>``, ``o.<field>`` where ``s``, ``p``, ``a``,
  ``o`` are the function's own argument names);
* ``advance`` returns two values, ``(reward, terminated)``, and for an env with
  ``rewards_per_entry`` a literal reward vector (``wp.vec2(...)``) has one value per reward entry;
* constants are representable (ints in int32) and struct fields are unique: two keys that
  join to one field name (``("a", "b_c")`` and ``("a_b", "c")``) are refused.

A Warp error that the source checks cannot foresee (a type mismatch, a misspelling inside a
helper function) surfaces when the env compiles its kernels at construction
(:func:`compile_error`), naming the env's functions.
"""

from __future__ import annotations

import ast
import inspect
import re
import textwrap
from collections.abc import Iterable, Mapping
from typing import Any

import warp as wp

_INT32 = (-(2**31), 2**31 - 1)

#: The arguments the generated kernels pass to each function, and which ones are structs.
SIGNATURES = {
    "start": ("state", "params", "i", "key"),
    "advance": ("state", "params", "actions", "i", "step", "key"),
    "observe": ("state", "params", "obs", "i", "step", "key"),
}
#: The types of the scalar arguments, as the kernels pass them.
_SCALARS = {"i": (int, "int"), "step": (int, "int"), "key": (wp.uint32, "wp.uint32")}
#: How those types may be spelled in a string annotation (``from __future__ import annotations``).
_SPELLINGS = {int: {"int", "wp.int32", "warp.int32", "int32"},
              wp.uint32: {"wp.uint32", "warp.uint32", "uint32"}}  # fmt: skip
_STRUCTS = {"state": "state field", "params": "constant", "actions": "action entry",
            "obs": "observation entry"}  # fmt: skip


def check_constants(env_name: str, constants: Mapping[str, Any]) -> None:
    """Every constant is a float, bool, or an int that int32 holds (the kernels' int type).

    Raises:
        TypeError: for a value of another type.
        ValueError: for an int outside int32, which Warp would wrap silently.
    """
    for name, value in constants.items():
        if not isinstance(value, bool | int | float):
            raise TypeError(
                f"{env_name}._constants() gives {name!r} of type {type(value).__name__}; "
                "a constant must be a float, int or bool."
            )
        if isinstance(value, int) and not _INT32[0] <= value <= _INT32[1]:
            raise ValueError(
                f"{env_name}._constants() gives {name}={value}, outside int32 "
                f"[{_INT32[0]}, {_INT32[1]}], the int type of the kernels; pass it as a float "
                "or split it."
            )


def check_fields(env_name: str, role: str, keys: Iterable[Any], field: Any) -> None:
    """Raise ``ValueError`` if two keys of ``role`` become one struct field under ``field``."""
    seen: dict[str, Any] = {}
    for key in keys:
        name = field(key)
        if name in seen:
            raise ValueError(
                f"{env_name}'s {role} keys {seen[name]!r} and {key!r} both become the Warp "
                f"field {name!r} (nested keys are joined with '_'); rename one of them."
            )
        seen[name] = key


def _python_function(function: Any) -> Any:
    """The Python function a ``wp.func`` wraps (the function itself if it is plain)."""
    return getattr(function, "func", function)


def _syntax_tree(function: Any) -> ast.FunctionDef | None:
    """The parsed ``def`` of ``function``, or ``None`` when its source is not available."""
    try:
        source = textwrap.dedent(inspect.getsource(_python_function(function)))
    except (OSError, TypeError):
        return None
    tree = ast.parse(source)
    return next((n for n in tree.body if isinstance(n, ast.FunctionDef)), None)


def _check_arguments(env_name: str, role: str, function: Any) -> list[str]:
    """The argument names of ``function``; ``TypeError`` unless they fit its role.

    The count must be the role's; an annotated scalar argument must have the type the kernels
    pass (an ``advance(s, p, a, i, t, step)`` written for positions that now hold
    ``step, key`` is refused here, not miscompiled).
    """
    expected = SIGNATURES[role]
    parameters = inspect.signature(_python_function(function)).parameters
    params = list(parameters)
    if len(params) != len(expected):
        raise TypeError(
            f"{env_name}'s {role} function {_label(function)} takes {len(params)} arguments "
            f"({', '.join(params)}); {role} must take {len(expected)}: "
            f"({', '.join(expected)})."
        )
    for position, (param, meaning) in enumerate(zip(parameters.values(), expected, strict=True)):
        kind, spelled = _SCALARS.get(meaning, (None, ""))
        annotation = param.annotation
        if kind is None or annotation is inspect.Parameter.empty or annotation is kind:
            continue
        if kind is int and annotation is wp.int32:
            continue
        if isinstance(annotation, str) and annotation.replace(" ", "") in _SPELLINGS[kind]:
            continue
        raise TypeError(
            f"{env_name}'s {role} function {_label(function)} annotates its argument "
            f"{position + 1} ({param.name}) as {getattr(annotation, '__name__', annotation)}; "
            f"that argument is {meaning}: {spelled}. {role} takes ({', '.join(expected)})."
        )
    return params


def _label(function: Any) -> str:
    return f"{_python_function(function).__name__!r}"


def _check_accesses(
    env_name: str,
    role: str,
    function: Any,
    tree: ast.FunctionDef,
    params: list[str],
    names: Mapping[str, set[str]],
) -> None:
    """``ValueError`` for ``<struct argument>.<field>`` naming a field the struct lacks."""
    structs = {params[k]: which for k, which in enumerate(SIGNATURES[role]) if which in _STRUCTS}
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)):
            continue
        which = structs.get(node.value.id)
        if which is None or node.attr in names[which]:
            continue
        known = ", ".join(sorted(names[which])) or "none"
        raise ValueError(
            f"{env_name}'s {role} function {_label(function)} reads "
            f"{node.value.id}.{node.attr} (line {node.lineno} of its def), but the "
            f"{_STRUCTS[which]} {node.attr!r} does not exist; known: {known}."
        )


#: The generated functions a Warp error may point at (see :mod:`.kernels`).
_GENERATED = frozenset({"reset", "steps", "copy_observation"})

_VECTOR = re.compile(r"vec(\d+)[a-z]?$")


def _vector_length(node: ast.expr) -> int | None:
    """The length of a literal ``wp.vecN(...)``/``wp.vecNf(...)`` call, else ``None``."""
    if not isinstance(node, ast.Call):
        return None
    func = node.func
    name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
    match = _VECTOR.match(name)
    return int(match.group(1)) if match else None


def _check_returns(
    env_name: str, function: Any, tree: ast.FunctionDef, rewards: int, per_entry: bool
) -> None:
    """``TypeError`` unless every ``return`` of ``advance`` can give ``(reward, terminated)``."""
    label = _label(function)
    returns = [n for n in ast.walk(tree) if isinstance(n, ast.Return) and _owner(tree, n) is tree]
    if not returns:
        raise TypeError(
            f"{env_name}'s advance function {label} returns nothing; it must return "
            "(reward, terminated)."
        )
    for node in returns:
        value = node.value
        if isinstance(value, ast.Tuple):
            if len(value.elts) != 2:
                raise TypeError(
                    f"{env_name}'s advance function {label} returns {len(value.elts)} values "
                    f"(line {node.lineno} of its def); it must return (reward, terminated)."
                )
            length = _vector_length(value.elts[0])
            if per_entry and length is not None and length != rewards:
                raise ValueError(
                    f"{env_name}'s advance function {label} returns a reward vector of {length} "
                    f"values (line {node.lineno} of its def) for {rewards} reward entries; "
                    f"rewards_per_entry needs one value per entry."
                )
        elif value is None or not isinstance(value, ast.Call | ast.Name):
            raise TypeError(
                f"{env_name}'s advance function {label} returns one value (line "
                f"{node.lineno} of its def); it must return (reward, terminated)."
            )


def _owner(tree: ast.FunctionDef, target: ast.AST) -> ast.AST:
    """The innermost function definition in ``tree`` that contains ``target``."""
    owner: ast.AST = tree
    for node in ast.walk(tree):
        if node is not tree and isinstance(node, ast.FunctionDef | ast.Lambda):
            if any(child is target for child in ast.walk(node)):
                owner = node
    return owner


def check_functions(
    env_name: str,
    functions: Any,
    names: Mapping[str, set[str]],
    rewards: int,
    per_entry: bool,
) -> None:
    """Check the three functions' arguments, field reads and ``advance``'s returns.

    Args:
        env_name (str): the env's class name, for messages.
        functions (WarpFunctions): ``start``, ``advance``, ``observe``.
        names (Mapping[str, set[str]]): the field names of ``"state"``, ``"params"``,
            ``"actions"`` and ``"obs"``.
        rewards (int): the number of reward entries.
        per_entry (bool): whether ``advance`` returns one reward per entry.

    Raises:
        TypeError: for a wrong argument count or an ``advance`` that does not return two values.
        ValueError: for a field that does not exist, or a reward vector of the wrong length.
    """
    for role, function in zip(SIGNATURES, functions, strict=True):
        params = _check_arguments(env_name, role, function)
        tree = _syntax_tree(function)
        if tree is None:
            continue
        _check_accesses(env_name, role, function, tree, params, names)
        if role == "advance":
            _check_returns(env_name, function, tree, rewards, per_entry)


def compile_error(env_name: str, functions: Any, error: Exception) -> TypeError:
    """The error to raise when Warp refuses to compile an env's kernels: it names the functions.

    Warp reports a mistake in an author's function either at that function (its message names
    it) or where the generated kernel uses what it returned (then it is ``advance``'s
    return types, the only values the kernel takes from the author).
    """
    message = str(error).strip()
    advance = _python_function(functions[1]).__name__
    found = re.search(r'Error while parsing function "(\w+)"', message)
    blamed = found.group(1) if found else None
    where = (
        f"its function {blamed!r} (or a helper it calls)"
        if blamed is not None and blamed not in _GENERATED
        else f"the values its advance function {advance!r} returns (a float reward, or a "
        "reward vector with rewards_per_entry, and a bool terminated)"
    )
    return TypeError(
        f"{env_name}'s Warp functions do not compile: check {where}. Warp says: {message}"
    )
