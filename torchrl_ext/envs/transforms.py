"""Transforms for TorchRL envs built on our envs.

* :class:`BaseEnvState` puts a wrapped env's simulation state into the checkpoint of the
  ``TransformedEnv`` around it: TorchRL's ``TransformedEnv.state_dict()`` (and so a collector's
  ``state_dict()``) holds only its transforms' state, never its base env's.
* :class:`PreviousAction` adds the previous step's action to the observation, encoded as floats,
  for recurrent agents that must know what they did (any TorchRL env).
"""

from __future__ import annotations

from typing import Any

import torch
from tensordict import TensorDictBase
from tensordict.utils import NestedKey
from torchrl.data import Categorical, MultiCategorical, TensorSpec, Unbounded
from torchrl.envs import EnvBase, Transform, TransformedEnv

from torchrl_ext._checks import check_key
from torchrl_ext.envs.warp_env import WarpEnv

__all__ = ["BaseEnvState", "PreviousAction"]

_KEY = "base_env."


class BaseEnvState(Transform):
    """Saves and restores the base env's state with the transforms' state; changes no data.

    Appended to a ``TransformedEnv`` around a :class:`~torchrl_ext.envs.WarpEnv`, it adds the
    env's :meth:`~torchrl_ext.envs.WarpEnv.state_dict` to the transformed env's
    ``state_dict()`` under ``"<its prefix>base_env."``, and its ``load_state_dict`` restores the
    env, which then continues bitwise. A TorchRL collector of the transformed env saves and
    restores the env with it.

    Raises:
        TypeError: when saving or loading, if the innermost base env is not a ``WarpEnv``.
        ValueError: when loading a state that holds no base env entries, or a bad env state
            (see :meth:`~torchrl_ext.envs.WarpEnv.load_state_dict`).

    Examples:
        >>> from torchrl.envs import Compose, StepCounter, TransformedEnv
        >>> from torchrl_ext.envs import CartPoleEnv
        >>> from torchrl_ext.envs.transforms import BaseEnvState
        >>> env = TransformedEnv(CartPoleEnv(2, seed=0), Compose(StepCounter(), BaseEnvState()))
        >>> _ = env.rollout(3)
        >>> saved = env.state_dict()
        >>> other = TransformedEnv(CartPoleEnv(2, seed=1), Compose(StepCounter(), BaseEnvState()))
        >>> other.load_state_dict(saved)
        >>> bool((other.base_env.state_dict()["state"] == env.base_env.state_dict()["state"]).all())
        True
    """

    def __init__(self) -> None:
        super().__init__(in_keys=[], out_keys=[])

    def _base_env(self) -> WarpEnv:
        env: EnvBase | None = self.container
        while isinstance(env, TransformedEnv):
            env = env.base_env
        if not isinstance(env, WarpEnv):
            raise TypeError(
                f"BaseEnvState saves a WarpEnv's state; the base env is {type(env).__name__}."
            )
        return env

    def _call(self, next_tensordict: TensorDictBase) -> TensorDictBase:
        return next_tensordict

    def _reset(
        self, tensordict: TensorDictBase, tensordict_reset: TensorDictBase
    ) -> TensorDictBase:
        return tensordict_reset

    def _save_to_state_dict(self, destination: dict, prefix: str, keep_vars: bool) -> None:
        super()._save_to_state_dict(destination, prefix, keep_vars)
        self._base_env().state_dict(destination=destination, prefix=prefix + _KEY)

    def _load_from_state_dict(
        self,
        state_dict: dict[str, Any],
        prefix: str,
        local_metadata: dict,
        strict: bool,
        missing_keys: list,
        unexpected_keys: list,
        error_msgs: list,
    ) -> None:
        start = prefix + _KEY
        own = {k[len(start) :]: v for k, v in state_dict.items() if k.startswith(start)}
        if not own:
            raise ValueError(
                f"state_dict holds no {start!r} entries: it was not saved by a transformed env "
                "with BaseEnvState, so it cannot restore the base env."
            )
        rest = {k: v for k, v in state_dict.items() if not k.startswith(start)}
        super()._load_from_state_dict(
            rest, prefix, local_metadata, strict, missing_keys, unexpected_keys, error_msgs
        )
        self._base_env().load_state_dict(own)


class PreviousAction(Transform):
    """Adds the action of the previous step to each observation, as float features.

    A recurrent agent that samples its actions does not know which one it took unless it is
    told: in a bandit the observed reward says how the last pull went, not which arm it was;
    on a board, a hit or a miss says nothing of where the shot went. This transform writes, with
    every observation, the action that led to it: ``Categorical`` actions one-hot encoded,
    ``MultiCategorical`` ones as one one-hot per component (concatenated), any other action
    copied as floats. At an episode's first step, after a full or a partial reset, the entry is
    all zeros.

    Args:
        out_key (NestedKey, optional): the observation entry written; a new key, neither an
            entry of the env it wraps nor one nested inside or above such an entry. Defaults to
            ``"prev_action"``.
        action_key (NestedKey, optional): the action entry read. Defaults to ``"action"``.

    Raises:
        ValueError: when the transform first meets its env (the transformed env's first
            ``observation_spec``, reset or step), if ``out_key`` collides with an entry the env
            already has.

    Examples:
        >>> import torch
        >>> from torchrl.envs import TransformedEnv
        >>> from torchrl_ext.envs import CartPoleEnv
        >>> from torchrl_ext.envs.transforms import PreviousAction
        >>> env = TransformedEnv(CartPoleEnv(2, seed=0), PreviousAction())
        >>> env.observation_spec["prev_action"].shape
        torch.Size([2, 2])
        >>> td = env.reset()
        >>> td["prev_action"]
        tensor([[0., 0.],
                [0., 0.]])
        >>> td["action"] = torch.tensor([1, 0])
        >>> env.step(td)["next", "prev_action"]
        tensor([[0., 1.],
                [1., 0.]])
    """

    def __init__(self, out_key: NestedKey = "prev_action", action_key: NestedKey = "action"):
        out_key, action_key = check_key("out_key", out_key), check_key("action_key", action_key)
        super().__init__(in_keys=[action_key], out_keys=[out_key])
        self.out_key, self.action_key = out_key, action_key
        self._checked_parent_id: int | None = None  # the parent env whose keys were checked

    # ------------------------------------------------------------------ encoding
    def _action_spec(self) -> TensorSpec:
        return self.parent.full_action_spec[self.action_key]

    def _sizes(self) -> list[int] | None:
        """One-hot sizes of the action's components, or ``None`` for a float copy."""
        spec = self._action_spec()
        if isinstance(spec, MultiCategorical):  # a Categorical subclass: test it first
            return [int(n) for n in spec.nvec.reshape(-1, spec.nvec.shape[-1])[0]]
        if isinstance(spec, Categorical):
            return [spec.n]
        return None

    def _features(self) -> int:
        sizes = self._sizes()
        if sizes is not None:
            return sum(sizes)
        shape = self._action_spec().shape[len(self.parent.batch_size) :]
        return int(torch.Size(shape).numel())

    def _encode(self, action: torch.Tensor) -> torch.Tensor:
        sizes, batch = self._sizes(), self.parent.batch_size
        dtype = torch.get_default_dtype()
        if sizes is None:
            return action.reshape(*batch, -1).to(dtype)
        index = action.long().reshape(*batch, len(sizes))
        offsets = torch.tensor([0, *sizes[:-1]], device=action.device).cumsum(0)
        out = torch.zeros(*batch, sum(sizes), dtype=dtype, device=action.device)
        return out.scatter_(-1, index + offsets, 1.0)

    def _check_out_key(self) -> None:
        """Refuse an ``out_key`` the parent env has, once per parent (TorchRL caches it)."""
        parent = self.parent
        if parent is None or self._checked_parent_id == id(parent):
            return
        _check_new_key("out_key", self.out_key, parent)
        # its id, not the env: nn.Module would register an env attribute as a submodule
        self._checked_parent_id = id(parent)

    def _zeros(self, device: torch.device | None) -> torch.Tensor:
        shape = (*self.parent.batch_size, self._features())
        return torch.zeros(shape, dtype=torch.get_default_dtype(), device=device)

    # ------------------------------------------------------------------ TorchRL's protocol
    def _step(self, tensordict: TensorDictBase, next_tensordict: TensorDictBase) -> TensorDictBase:
        self._check_out_key()
        next_tensordict.set(self.out_key, self._encode(tensordict.get(self.action_key)))
        return next_tensordict

    def _reset(
        self, tensordict: TensorDictBase, tensordict_reset: TensorDictBase
    ) -> TensorDictBase:
        self._check_out_key()
        zeros = self._zeros(tensordict_reset.device)
        reset = None if tensordict is None else tensordict.get("_reset", None)
        previous = None if tensordict is None else tensordict.get(self.out_key, None)
        if reset is None or previous is None:
            tensordict_reset.set(self.out_key, zeros)
            return tensordict_reset
        reset = reset.reshape(*self.parent.batch_size, 1)
        tensordict_reset.set(self.out_key, torch.where(reset, zeros, previous))
        return tensordict_reset

    def _call(self, next_tensordict: TensorDictBase) -> TensorDictBase:
        return next_tensordict

    def transform_observation_spec(self, observation_spec: TensorSpec) -> TensorSpec:
        """Adds the float entry ``[*batch, features]`` at ``out_key``, a key the env lacks."""
        self._check_out_key()
        shape = (*self.parent.batch_size, self._features())
        observation_spec[self.out_key] = Unbounded(
            shape, dtype=torch.get_default_dtype(), device=self.parent.device
        )
        return observation_spec


def _as_tuple(key: NestedKey) -> tuple[str, ...]:
    return (key,) if isinstance(key, str) else tuple(key)


def _check_new_key(name: str, key: NestedKey, env: EnvBase) -> None:
    """Raise ``ValueError`` if ``key`` is, holds or lies inside an entry ``env`` already has.

    The entries are those of the env's output (observations, rewards, done flags) and input
    (actions, state), with their nested parents, and ``"next"``, where a step writes its
    results: writing at any of them would replace data.
    """
    new = _as_tuple(key)
    existing_keys = ["next"]
    for spec in (env.output_spec, env.input_spec):
        for group in spec.keys():  # "full_observation_spec", "full_action_spec", ...
            existing_keys.extend(spec[group].keys(include_nested=True))
    for existing in existing_keys:
        old = _as_tuple(existing)
        short = min(len(old), len(new))
        if old[:short] == new[:short]:
            raise ValueError(
                f"{name} must be a new entry, got {name}={key!r}, which collides with the "
                f"env's entry {existing!r}; writing there would replace the env's data. Pass "
                f"another {name}."
            )
