"""The step inputs of a CourseEnv as a read-only mapping of its live tensors."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any, NoReturn

import torch


class StepInputs(Mapping):
    """A read-only mapping of the env's live input tensors: write into them, never replace them.

    The step reads the env's own tensors (a recorded graph reads their memory), and
    ``state_dict()`` saves them; an entry that could be replaced or removed would be ignored by
    the step and make the saved state unloadable.

    Args:
        tensors (Mapping[str, torch.Tensor]): the env's input tensors, by name.
        env_name (str): the env's class name, for error messages.
    """

    def __init__(self, tensors: Mapping[str, torch.Tensor], env_name: str) -> None:
        self._tensors = dict(tensors)
        self._env_name = env_name

    def __getitem__(self, key: str) -> torch.Tensor:
        return self._tensors[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._tensors)

    def __len__(self) -> int:
        return len(self._tensors)

    def __setitem__(self, key: Any, value: Any) -> NoReturn:
        raise TypeError(
            f"{self._env_name}.inputs[{key!r}] cannot be replaced: the step reads the env's own "
            f"tensor; write into it in place, e.g. inputs[{key!r}][:] = ... or .copy_(...)."
        )

    def __delitem__(self, key: Any) -> NoReturn:
        raise TypeError(
            f"{self._env_name}.inputs[{key!r}] cannot be removed: every step reads it; zero it "
            f"in place instead, inputs[{key!r}].zero_()."
        )

    def __repr__(self) -> str:
        return f"StepInputs({self._tensors!r})"
