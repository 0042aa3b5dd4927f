"""``KEY=VALUE`` hyperparameter overrides from the command line, typed by a config dataclass.

Every field of a pipeline's ``Config`` can be set on the command line, as ``lr=3e-4`` or
``obs_scale=2,20``: the text is converted to the field's annotated type (``int``, ``float``,
``bool`` as ``true``/``false``, a tuple as comma-separated values, ``None`` as ``none`` where
the field allows it; strings and literals as they are), and the config's own checks then judge
the value.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from typing import Any

__all__ = ["parse_overrides"]

_BOOLS = {"true": True, "1": True, "yes": True, "false": False, "0": False, "no": False}


def _convert(hint: Any, text: str, key: str) -> Any:
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):
        if type(None) in args and text.lower() == "none":
            return None
        (hint,) = [a for a in args if a is not type(None)]
        return _convert(hint, text, key)
    if hint is bool:
        if text.lower() not in _BOOLS:
            raise ValueError(f"{key}={text}: expected true or false.")
        return _BOOLS[text.lower()]
    if origin is tuple:
        parts = text.split(",")
        if len(parts) != len(args):
            raise ValueError(f"{key}={text}: expected {len(args)} comma-separated values.")
        return tuple(_convert(a, p, key) for a, p in zip(args, parts, strict=True))
    if hint in (int, float):
        try:
            return hint(text)
        except ValueError:
            raise ValueError(f"{key}={text}: expected {hint.__name__}.") from None
    return text


def parse_overrides(config: Any, pairs: list[str]) -> dict[str, Any]:
    """The ``KEY=VALUE`` ``pairs`` as ``{field: value}`` of the dataclass ``config``.

    Args:
        config (type): the config dataclass (or a :func:`functools.partial` of it).
        pairs (list of str): ``KEY=VALUE`` texts.

    Raises:
        ValueError: for a text without ``=``, an unknown field (the message lists the fields)
            or a value that is not of the field's type.

    Examples:
        >>> @dataclasses.dataclass
        ... class Config:
        ...     lr: float = 1e-3
        ...     epochs: int = 4
        ...     scale: tuple[float, float] = (1.0, 1.0)
        ...     policy: str = "lstm"
        >>> parse_overrides(Config, ["lr=3e-4", "scale=2,20", "policy=mlp"])
        {'lr': 0.0003, 'scale': (2.0, 20.0), 'policy': 'mlp'}
        >>> parse_overrides(Config, ["epoch=2"])
        Traceback (most recent call last):
        ...
        ValueError: epoch=2: no such hyperparameter; they are: epochs, lr, policy, scale.
    """
    config = getattr(config, "func", config)
    hints = typing.get_type_hints(config)
    fields = sorted(f.name for f in dataclasses.fields(config) if f.init)
    values = {}
    for pair in pairs:
        key, equals, text = pair.partition("=")
        if not equals:
            raise ValueError(f"{pair}: expected KEY=VALUE.")
        if key not in fields:
            raise ValueError(f"{pair}: no such hyperparameter; they are: {', '.join(fields)}.")
        values[key] = _convert(hints[key], text, key)
    return values
