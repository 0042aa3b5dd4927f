"""The buffers of a WarpEnv, laid out from its specs: torch tensors and their Warp views.

:class:`Layout` owns every buffer the base reads and writes around the kernels: one action
buffer per action entry, the ``next`` and ``root`` observation buffers, one reward row per
reward entry, the three done flags, the reset mask and the per-env step and episode counters.
It hands out fresh TensorDicts of them, with nested keys placed in nested TensorDicts, as
TorchRL's multi-agent layout groups them.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
import warp as wp
from tensordict import TensorDict
from torchrl.data import Categorical, Composite

from torchrl_ext._checks import check_tensor
from torchrl_ext._compat import new_tensordict_unchecked
from torchrl_ext.envs._kernels.common import Episodes, Flags, make_struct

DONE_KEYS = ("done", "terminated", "truncated")


def to_warp(tensor: torch.Tensor, batch_dims: int = 1) -> wp.array:
    """Zero-copy Warp view of ``tensor``; a trailing singleton dim after the batch dims dropped."""
    if tensor.dim() > batch_dims and tensor.shape[-1] == 1:
        tensor = tensor.view(tensor.shape[:-1])
    return wp.from_torch(tensor)


def env_time(tensor: torch.Tensor) -> wp.array:
    """Warp view of an env-major ``[N, T, ...]`` tensor (a trailing singleton dim dropped)."""
    return to_warp(tensor, batch_dims=2)


def step_view(tensor: torch.Tensor) -> wp.array:
    """Warp view of a ``[N, ...]`` step buffer as one step of time, ``[N, 1, ...]``."""
    return env_time(tensor.unsqueeze(1))


def nested(source: dict) -> dict:
    """``{("g", "k"): v, "k": v}`` as ``{"g": {"k": v}, "k": v}``, at any depth."""
    out: dict[str, Any] = {}
    for key, val in source.items():
        if isinstance(key, str):
            out[key] = val
            continue
        node = out
        for part in key[:-1]:
            node = node.setdefault(part, {})
        node[key[-1]] = val
    return out


def make_td(source: dict, batch_size: torch.Size, device: torch.device) -> TensorDict:
    """A TensorDict of fresh tensors shaped by the env, keys nested as they are spelled.

    Nothing is validated: every entry is a tensor (or TensorDict) the env made, of
    ``batch_size`` and on ``device``.
    """

    def build(tree: dict) -> TensorDict:
        items = {k: build(v) if isinstance(v, dict) else v for k, v in tree.items()}
        return new_tensordict_unchecked(items, batch_size, device)

    return build(nested(source))


def _check_rewards(keys: list, specs: list, num_envs: int) -> None:
    """Every reward entry is ``[num_envs, 1]`` of one float dtype: the rows of one buffer."""
    if not specs:
        raise ValueError("reward_spec must hold at least one entry, got an empty reward spec.")
    for key, spec in zip(keys, specs, strict=True):
        if tuple(spec.shape) != (num_envs, 1):
            raise ValueError(
                f"reward entry {key!r} must have shape ({num_envs}, 1), "
                f"got shape={tuple(spec.shape)}."
            )
        if spec.dtype != specs[0].dtype or not spec.dtype.is_floating_point:
            raise TypeError(
                f"reward entries must share one float dtype; {key!r} has dtype={spec.dtype}, "
                f"{keys[0]!r} has dtype={specs[0].dtype}."
            )


def done_groups(done_spec: Composite) -> list[str]:
    """The groups a done spec names flags in: ``("g", "done")`` and the like, one level deep.

    Raises:
        ValueError: for a nested done entry that is not ``(group, flag)`` with a flag of
            ``done``, ``terminated`` or ``truncated``.
    """
    groups: list[str] = []
    for key in done_spec.keys(True, True):
        if isinstance(key, str):
            continue
        if len(key) != 2 or key[1] not in DONE_KEYS:
            raise ValueError(
                f"done entries must be ('<group>', flag) with flag in {list(DONE_KEYS)}, "
                f"got {key!r}."
            )
        if key[0] not in groups:
            groups.append(key[0])
    return groups


def done_spec(num_envs: int, device: torch.device, groups: list[str]) -> Composite:
    """The three flags at the root, and under every group of ``groups``.

    Every env's episode ends for all its groups at once: a group's flags are the env's.
    """
    flag = Categorical(2, shape=(num_envs, 1), dtype=torch.bool, device=device)

    def flags() -> Composite:
        return Composite({key: flag.clone() for key in DONE_KEYS}, shape=(num_envs,), device=device)

    spec = flags()
    for group in groups:
        spec[group] = flags()
    return spec


class Layout:
    """Every buffer of an env of ``num_envs`` envs, allocated from its specs.

    Args:
        observation_spec (Composite): the env's observation specs (leaves ``[N, ...]``).
        action_spec (Composite): the env's full action spec.
        reward_spec (Composite): the env's full reward spec: every leaf ``[N, 1]``, one dtype.
        groups (list of str): the groups that carry a copy of the done flags.
        device (torch.device): where the buffers live.
    """

    def __init__(
        self,
        observation_spec: Composite,
        action_spec: Composite,
        reward_spec: Composite,
        groups: list[str],
        device: torch.device,
    ) -> None:
        self.num_envs = n = observation_spec.shape[0]
        self.batch_size = torch.Size([n])
        self.device = device
        self.obs_keys = list(observation_spec.keys(True, True))
        self.action_keys = list(action_spec.keys(True, True))
        self.reward_keys = list(reward_spec.keys(True, True))
        self.done_groups = groups
        keys = [*self.obs_keys, *self.reward_keys]
        self.flat = not groups and all(isinstance(key, str) for key in keys)
        group_flags = [(g, key) for g in groups for key in DONE_KEYS]
        self.produced_keys = (
            frozenset(self.obs_keys) | frozenset(DONE_KEYS) | frozenset(group_flags)
        )
        self.next = {k: observation_spec[k].zero() for k in self.obs_keys}
        self.root = {k: observation_spec[k].zero() for k in self.obs_keys}
        self.actions = {k: action_spec[k].zero() for k in self.action_keys}
        #: The specs the action buffers follow (what the kernels read), by key.
        self.action_specs = {k: action_spec[k].clone() for k in self.action_keys}
        rewards = [reward_spec[k] for k in self.reward_keys]
        _check_rewards(self.reward_keys, rewards, n)
        self.reward_rows = torch.zeros(len(rewards), n, 1, dtype=rewards[0].dtype, device=device)
        self.mask = torch.zeros(n, dtype=torch.int32, device=device)
        self.steps = torch.zeros(n, dtype=torch.int32, device=device)
        self.episode = torch.zeros(n, dtype=torch.int32, device=device)
        # the three flags share one [3, N, 1] buffer: one clone per step hands out all of them
        self.flag_buffer = torch.zeros(len(DONE_KEYS), n, 1, dtype=torch.bool, device=device)
        self.seed_words = np.zeros(2, dtype=np.uint32)
        self.bind()

    @property
    def flags(self) -> dict[str, torch.Tensor]:
        """The live ``[N, 1]`` done flags, by key."""
        return dict(zip(DONE_KEYS, self.flag_buffer.unbind(0), strict=True))

    def bind(self) -> None:
        """Build the Warp views of the torch buffers (again after unpickling)."""
        self.seed = wp.array(
            self.seed_words, dtype=wp.uint32, device=wp.device_from_torch(self.device)
        )
        torch_buffers = {
            "next": self.next,
            "root": self.root,
            "mask": self.mask,
            "steps": self.steps,
            "episode": self.episode,
            **self.flags,
        }
        views = {
            key: {k: to_warp(v) for k, v in val.items()} if isinstance(val, dict) else to_warp(val)
            for key, val in torch_buffers.items()
        }
        views["actions"] = {k: to_warp(v) for k, v in self.actions.items()}
        views["rewards"] = {
            k: to_warp(row) for k, row in zip(self.reward_keys, self.reward_rows, strict=True)
        }
        if len(self.action_keys) == 1:
            views["action"] = views["actions"][self.action_keys[0]]
        if len(self.reward_keys) == 1:
            views["reward"] = views["rewards"][self.reward_keys[0]]
        views["seed"] = self.seed
        views["episodes"] = make_struct(
            Episodes, seed=self.seed, steps=views["steps"], episode=views["episode"]
        )
        self.step_flags = self.flags_struct({k: step_view(v) for k, v in self.flags.items()})
        views["flags"] = self.step_flags
        self.views = views

    def __getstate__(self) -> dict:
        self.seed_words = self.seed.numpy().copy()
        return {k: v for k, v in self.__dict__.items() if k not in ("views", "seed", "step_flags")}

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        self.bind()

    @staticmethod
    def flags_struct(flags: dict[str, wp.array]) -> Any:
        """The ``[N, T]`` Warp views of the three flags as one :class:`Flags` struct."""
        return make_struct(Flags, **flags)

    def set_seed_words(self, words: list[int]) -> None:
        self.seed.assign(np.array(words, dtype=np.uint32))

    def load_reset_mask(self, mask: torch.Tensor | None) -> None:
        """Write TorchRL's ``"_reset"`` entry into the reset mask; ``None`` sets every env.

        Raises:
            TypeError: if ``mask`` is not a bool tensor.
            ValueError: if it is not ``[N, 1]`` or ``[N]``, or lies on another device.
        """
        if mask is None:
            self.mask.fill_(1)
            return
        n = self.num_envs
        check_tensor("_reset", mask, torch.bool, [(n, 1), (n,)], self.device)
        self.mask.copy_(mask.reshape(n))

    # ------------------------------------------------------------------ outputs
    def fresh_flags(self, copy: bool) -> dict[Any, torch.Tensor]:
        """Fresh done/terminated/truncated: copies of the step's flags, or all False.

        The root's, then every done group's (``(group, flag)`` keys), each its own tensor.
        """
        flags = self.flag_buffer.clone() if copy else torch.zeros_like(self.flag_buffer)
        out: dict[Any, torch.Tensor] = dict(zip(DONE_KEYS, flags.unbind(0), strict=True))
        for group in self.done_groups:
            out.update(zip(((group, k) for k in DONE_KEYS), flags.clone().unbind(0), strict=True))
        return out

    def fresh_obs(self, which: str) -> dict[str, torch.Tensor]:
        """Copies of the ``"next"`` or ``"root"`` observation buffers."""
        return {key: val.clone() for key, val in getattr(self, which).items()}

    def fresh_rewards(self) -> dict[Any, torch.Tensor]:
        """Copies of the reward rows, by reward key."""
        if len(self.reward_keys) == 1:
            return {self.reward_keys[0]: self.reward_rows[0].clone()}
        rows = self.reward_rows.clone()
        return dict(zip(self.reward_keys, rows.unbind(0), strict=True))

    def td(self, source: dict) -> TensorDict:
        """A TensorDict of fresh outputs (keys may be nested)."""
        if self.flat:
            return new_tensordict_unchecked(source, self.batch_size, self.device)
        return make_td(source, self.batch_size, self.device)

    def root_td(self) -> TensorDict:
        """Every env's current (root) observation, done flags all False, as fresh tensors."""
        source = self.fresh_obs("root")
        source.update(self.fresh_flags(False))
        return self.td(source)

    def next_td(self) -> TensorDict:
        """The step's ``"next"`` outputs: observations, rewards and flags, as fresh tensors."""
        source = self.fresh_obs("next")
        source.update(self.fresh_rewards())
        source.update(self.fresh_flags(True))
        return self.td(source)
