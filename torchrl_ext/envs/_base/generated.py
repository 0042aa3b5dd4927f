"""The generated side of an env: its declared state arrays, constants and kernel recipes.

An env that declares ``start``, ``advance`` and ``observe`` (see
:class:`~torchrl_ext.envs.WarpEnv`) hands them to :class:`GeneratedPhysics`, which allocates the
state arrays it declared, packs its constants into a struct passed by value, and builds the
launch recipes of the reset, the step, the fused step and the ``T``-step rollout from the two
kernels of :func:`~torchrl_ext.envs._base.kernels.make_kernels`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, NamedTuple

import torch
import warp as wp

from torchrl_ext.envs._base import authoring
from torchrl_ext.envs._base.kernels import field_name, make_copy, make_kernels, struct_type
from torchrl_ext.envs._base.launcher import Launch
from torchrl_ext.envs._base.layout import DONE_KEYS, Layout, env_time, step_view, to_warp
from torchrl_ext.envs._kernels.common import make_struct

#: The value of a declared constant: a float (stored in the env's float dtype), int or bool.
Constant = float | int | bool


class WarpFunctions(NamedTuple):
    """The three ``wp.func`` functions of an env (see :class:`~torchrl_ext.envs.WarpEnv`).

    Args:
        start: ``start(state, params, i, key)`` begins an episode of env ``i``.
        advance: ``advance(state, params, actions, i, t, step) -> (reward, terminated)``.
        observe: ``observe(state, params, obs, i, t, step)`` writes env ``i``'s observation.

    Examples:
        >>> from torchrl_ext.envs import CartPoleEnv
        >>> from torchrl_ext.envs.warp_env import WarpFunctions
        >>> functions = CartPoleEnv.functions  # a subclass sets its own three
        >>> isinstance(functions, WarpFunctions), functions.advance.key
        (True, 'advance')
    """

    start: Any
    advance: Any
    observe: Any


def _struct_of(module: str, stem: str, views: Mapping[Any, wp.array]) -> Any:
    """An instance of a struct type with one array field per view, named by :func:`field_name`."""
    fields = tuple((field_name(k), v.dtype, v.ndim) for k, v in views.items())
    values = dict(zip((name for name, _, _ in fields), views.values(), strict=True))
    return make_struct(struct_type(module, stem, fields), **values)


def _constant_type(value: Any, dtype: torch.dtype) -> Any:
    """The Warp type of a checked constant (:func:`~.authoring.check_constants`)."""
    if isinstance(value, bool | int):
        return wp.int32
    return wp.float64 if dtype == torch.float64 else wp.float32


#: State names the base saves itself; declared state arrays may not take them.
_RESERVED = frozenset({"seed", "steps", "episode", "done", "terminated", "truncated", "reward"})


def _parts(kind: Any) -> tuple[Any, tuple[int, ...], tuple[float, float] | None]:
    """A declaration as ``(dtype, per-env shape, range or None)``."""
    if not isinstance(kind, tuple):
        return kind, (), None
    if len(kind) == 3:
        return kind[0], tuple(kind[1]), tuple(kind[2])
    return kind[0], tuple(kind[1]), None


def declared_arrays(
    env_name: str, declared: Mapping[str, Any], dtype: torch.dtype
) -> dict[str, tuple[torch.dtype, tuple[int, ...]]]:
    """An env's ``_state_arrays()`` as ``name -> (torch dtype, per-env shape)``.

    ``float`` stands for the env's float ``dtype``; a bare dtype is a scalar per env. A
    declaration may end with a range, ``(dtype, shape, (low, high))`` (see
    :func:`declared_ranges`).

    Raises:
        ValueError: for a name the base saves itself.
    """
    arrays = {}
    for name, kind in declared.items():
        if name in _RESERVED:
            raise ValueError(
                f"{env_name}._state_arrays() declares {name!r}, a name the base saves itself "
                f"({', '.join(sorted(_RESERVED))}); rename it."
            )
        kind_dtype, shape, _ = _parts(kind)
        arrays[name] = (dtype if kind_dtype is float else kind_dtype, shape)
    return arrays


def declared_ranges(declared: Mapping[str, Any]) -> dict[str, tuple[float, float]]:
    """The ranges of an env's ``_state_arrays()``: ``name -> (low, high)``, both included.

    A loaded state whose values leave a declared range is refused; envs whose functions index
    arrays with a state value declare its range so that no loaded state reads out of bounds.
    """
    ranges = {}
    for name, kind in declared.items():
        bounds = _parts(kind)[2]
        if bounds is not None:
            ranges[name] = bounds
    return ranges


def state_view(name: str, doc: str) -> property:
    """A read-only property: the live tensor of the declared state array ``name``.

    Args:
        name (str): a name from the env's :meth:`~torchrl_ext.envs.WarpEnv._state_arrays`.
        doc (str): the property's docstring.

    Returns:
        A property returning the ``[num_envs, ...]`` tensor the kernels update in place.
    """
    return property(lambda env: env._arrays[name], doc=f"{doc} A live view.")


class GeneratedPhysics:
    """State arrays, constants and recipes of an env written as three Warp functions.

    Args:
        env_type (type): the env class; its ``start``, ``advance`` and ``observe`` are used and
            its module holds the generated kernels.
        layout (Layout): the env's buffers.
        arrays (Mapping[str, tuple]): declared state, ``name -> (torch dtype, per-env shape)``.
        constants (Mapping[str, float | int | bool]): the values the functions read from
            ``params``.
        dtype (torch.dtype): the env's float dtype (of float constants).
        limit (int): the time limit (``2**31 - 1``: none).
        truncates_terminal (bool): whether a step that terminates at the limit is truncated too.
        last_step (int): the most steps an episode counts (the time limit, or fewer by the
            env's rules); stepping a finished episode on without a reset keeps it there, so that
            every state a run makes loads back.

    Raises:
        TypeError: for a function with a wrong argument count, an ``advance`` that does not
            return ``(reward, terminated)``, a constant of another type, or functions Warp
            cannot compile (the message names the function).
        ValueError: for a field the functions read that does not exist, an int constant outside
            int32, two keys that become one struct field, or a reward vector of the wrong length.
    """

    def __init__(
        self,
        env_type: type,
        layout: Layout,
        arrays: Mapping[str, tuple[torch.dtype, tuple[int, ...]]],
        constants: Mapping[str, Constant],
        dtype: torch.dtype,
        limit: int,
        truncates_terminal: bool,
        last_step: int,
    ) -> None:
        n, dev = layout.num_envs, layout.device
        self._check_contract(env_type, layout, arrays, constants)
        self.limits = [limit, int(truncates_terminal), last_step]
        self.env_type = env_type
        self.module = env_type.__module__
        self.stem = env_type.__name__
        self.layout = layout
        self.arrays = {
            name: torch.zeros((n, *shape), dtype=kind, device=dev)
            for name, (kind, shape) in arrays.items()
        }
        self.constants = dict(constants) or {"unused": 0}  # a Warp struct needs a field
        self.dtype = dtype
        self.kernels = self._kernels()
        self.bind()
        self._compile()

    @staticmethod
    def _check_contract(
        env_type: type, layout: Layout, arrays: Mapping[str, Any], constants: Mapping[str, Any]
    ) -> None:
        """The authoring checks of :mod:`~torchrl_ext.envs._base.authoring`, before any compile."""
        name = env_type.__name__
        authoring.check_constants(name, constants)
        authoring.check_fields(name, "action", layout.actions, field_name)
        authoring.check_fields(name, "observation", layout.next, field_name)
        names = {
            "state": set(arrays),
            "params": set(constants),
            "actions": {field_name(k) for k in layout.actions},
            "obs": {field_name(k) for k in layout.next},
        }
        rewards, per_entry = layout.reward_rows.shape[0], env_type.rewards_per_entry
        authoring.check_functions(name, env_type.functions, names, rewards, per_entry)

    def _compile(self) -> None:
        """Compile the kernels now, so that a mistake Warp finds is raised at construction.

        The compiled module is what the first launch would load; recording a launch loads it
        without running anything.
        """
        device = wp.device_from_torch(self.layout.device)
        try:
            for kernel, inputs in [*self.reset_recipes(), *self.step_recipes(True)]:
                wp.launch(kernel, dim=1, inputs=inputs, device=device, record_cmd=True)
        except Exception as err:
            if "Error while parsing function" not in str(err):
                raise
            raise authoring.compile_error(self.stem, self.env_type.functions, err) from None

    def bind(self) -> None:
        """Build the structs of Warp views the kernels take (again after unpickling)."""
        kinds = tuple(
            (name, _constant_type(value, self.dtype), 0) for name, value in self.constants.items()
        )
        params = struct_type(self.module, f"{self.stem}Params", kinds)
        self.params = make_struct(params, **self.constants)
        self.state = _struct_of(
            self.module, f"{self.stem}State", {k: wp.from_torch(v) for k, v in self.arrays.items()}
        )
        lay = self.layout
        self.step_views = {
            "actions": self.struct("Actions", {k: step_view(v) for k, v in lay.actions.items()}),
            "next": self.struct("Obs", {k: step_view(v) for k, v in lay.next.items()}),
            "root": self.struct("Obs", {k: step_view(v) for k, v in lay.root.items()}),
            "reward": wp.from_torch(lay.reward_rows),  # [L, N, 1]: one step
        }
        # What the functions see: one step of every env, [N, ...]; the kernels copy it from
        # and into the time slots of the buffers. Scratch only: it holds nothing between calls.
        self.now = {
            "actions": self.struct("ActionsNow", _per_env(lay.actions)),
            "obs": self.struct("ObsNow", _per_env(lay.next)),
        }

    def __getstate__(self) -> dict:
        drop = ("params", "state", "step_views", "now", "kernels")
        return {k: v for k, v in self.__dict__.items() if k not in drop}

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        self.kernels = self._kernels()
        self.bind()

    def _kernels(self) -> Any:
        """The kernels around the env's functions, for its observation and reward layout."""
        lay = self.layout
        take = make_copy(self.module, _fields(lay.actions), into=False)
        place = make_copy(self.module, _fields(lay.next), into=True)
        rewards = lay.reward_rows.shape[0]
        per_entry = self.env_type.rewards_per_entry
        functions = self.env_type.functions
        return make_kernels(*functions, take, place, self.module, self.stem, rewards, per_entry)

    def struct(self, role: str, views: Mapping[Any, wp.array]) -> Any:
        return _struct_of(self.module, f"{self.stem}{role}", views)

    # ------------------------------------------------------------------ recipes
    def reset_recipes(self) -> list[Launch]:
        lay = self.layout
        inputs = [self.state, self.params, lay.views["episodes"], lay.views["mask"]]
        return [(self.kernels.reset, [*inputs, self.now["obs"], self.step_views["root"]])]

    def step_recipes(self, autoreset: bool) -> list[Launch]:
        """One step on ``[N, 1]`` views of the step buffers; the fused step with ``autoreset``.

        The fused step observes the state after its step (the next episode's first where one
        ended) into the root buffers; the plain step writes no root.
        """
        s, lay = self.step_views, self.layout
        return [
            self._steps(
                s["actions"],
                autoreset,
                int(autoreset),
                s["root"],
                s["next"],
                s["reward"],
                lay.step_flags,
            )
        ]

    def rollout_recipe(self, actions: dict, out: dict) -> Launch:
        """``T`` steps from the current state into fresh env-major ``[N, T]`` outputs.

        ``out`` holds ``"root"`` and ``"next"`` observation dicts, ``"reward"`` (``[L, N, T]``)
        and the three flags (``[N, T]`` each); root slot ``t`` is the state before step ``t``.
        """
        steps = out["reward"].shape[-1]
        return self._steps(
            self.struct("Actions", {k: env_time(v) for k, v in actions.items()}),
            False,
            steps,
            self.struct("Obs", {k: env_time(v) for k, v in out["root"].items()}),
            self.struct("Obs", {k: env_time(v) for k, v in out["next"].items()}),
            wp.from_torch(out["reward"]),
            self.layout.flags_struct({k: env_time(out[k]) for k in DONE_KEYS}),
        )

    def _steps(
        self,
        actions: Any,
        reset_last: bool,
        root_slots: int,
        root: Any,
        nxt: Any,
        reward: wp.array,
        flags: Any,
    ) -> Launch:
        head = [self.state, self.params, actions, self.layout.views["episodes"], *self.limits]
        now = [self.now["actions"], self.now["obs"]]
        tail = [root, nxt, reward, flags]
        return (self.kernels.steps, [*head, int(reset_last), root_slots, *now, *tail])


def _per_env(buffers: Mapping[Any, torch.Tensor]) -> dict[Any, wp.array]:
    """Scratch Warp arrays shaped as one step of ``buffers`` (``[N, ...]``, singleton dropped)."""
    return {k: to_warp(torch.zeros_like(v)) for k, v in buffers.items()}


def _fields(buffers: Mapping[Any, torch.Tensor]) -> tuple[tuple[str, tuple[int, ...]], ...]:
    """``(field name, trailing sizes)`` of step buffers, as the kernels index them."""
    return tuple((field_name(k), tuple(to_warp(v).shape[1:])) for k, v in buffers.items())
