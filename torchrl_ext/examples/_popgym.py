"""What the POPGym pipelines (PPO and R2D2) share: the env, its specs and how networks read it.

* :func:`make_base_env`, :func:`task_specs`: the port of :mod:`torchrl_ext.envs.popgym` a run
  trains on, and its observation and action specs.
* :class:`ObservationEncoder`: discrete observations one-hot, continuous ones as they are;
  :func:`input_module`: the networks' first module, the encoded observation and (with
  ``previous_action``) the previous action that :func:`make_transforms` adds.
* :func:`set_forget_bias`: the LSTMs' forget-gate bias at initialization.
"""

from __future__ import annotations

import importlib
from typing import Any

import torch
from tensordict.nn import TensorDictModule
from torch import nn
from torchrl.data import Categorical, MultiCategorical, TensorSpec
from torchrl.envs import InitTracker, RewardSum, Transform

from torchrl_ext.envs.transforms import PreviousAction


def env_class(name: str) -> type:
    """The port of POPGym's env ``name`` (``"RepeatPrevious"`` -> ``RepeatPreviousEnv``)."""
    return getattr(importlib.import_module("torchrl_ext.envs.popgym"), f"{name}Env")


def task_specs(cfg: Any) -> tuple[TensorSpec, TensorSpec]:
    """The observation and action specs of one env of the task (built on the CPU)."""
    env = env_class(cfg.env)(1, "cpu", 0, difficulty=cfg.difficulty)
    specs = env.observation_spec["observation"], env.action_spec
    env.close()
    return specs


class ObservationEncoder(nn.Module):
    """Turns an observation into float features: discrete components one-hot, floats as they are.

    Args:
        spec (TensorSpec): the observation's spec for one env: ``Categorical`` (one value),
            ``MultiCategorical`` (one value per component) or a float spec.

    Examples:
        >>> from torchrl.data import MultiCategorical
        >>> encoder = ObservationEncoder(MultiCategorical([2, 3]))
        >>> encoder.features
        5
        >>> encoder(torch.tensor([[1, 2], [0, 0]]))
        tensor([[0., 1., 0., 0., 1.],
                [1., 0., 1., 0., 0.]])
    """

    def __init__(self, spec: TensorSpec) -> None:
        super().__init__()
        # MultiCategorical subclasses Categorical: test it first
        self.categorical = False
        if isinstance(spec, MultiCategorical):
            sizes = [int(n) for n in spec.nvec.reshape(-1, spec.nvec.shape[-1])[0]]
        elif isinstance(spec, Categorical):
            sizes, self.categorical = [spec.n], True
        else:
            sizes = []
        self.one_hot = bool(sizes)
        width = spec.shape[-1] if spec.shape else 1
        self.features = sum(sizes) if sizes else width
        offsets = torch.tensor([0, *sizes[:-1]], dtype=torch.long).cumsum(0)
        self.register_buffer("offsets", offsets, persistent=False)

    def forward(self, observation: torch.Tensor) -> torch.Tensor:
        """Features of shape ``[*batch, features]``."""
        if not self.one_hot:
            return observation.to(torch.get_default_dtype())
        index = observation.long()
        if self.categorical:
            index = index.unsqueeze(-1)
        out = torch.zeros(*index.shape[:-1], self.features, device=index.device)
        return out.scatter_(-1, index + self.offsets, 1.0)


def set_forget_bias(lstm: nn.LSTM, bias: float) -> None:
    """Sets the forget gates' bias of every layer of ``lstm`` to ``bias``.

    PyTorch's gate order is input, forget, cell, output; the bias is held in ``bias_ih`` and
    ``bias_hh`` is zeroed.

    Examples:
        >>> lstm = nn.LSTM(3, 2)
        >>> set_forget_bias(lstm, 1.5)
        >>> lstm.bias_ih_l0[2:4].tolist(), lstm.bias_hh_l0[2:4].tolist()
        ([1.5, 1.5], [0.0, 0.0])
    """
    h = lstm.hidden_size
    with torch.no_grad():
        for layer in range(lstm.num_layers):
            getattr(lstm, f"bias_ih_l{layer}")[h : 2 * h].fill_(bias)
            getattr(lstm, f"bias_hh_l{layer}")[h : 2 * h].zero_()


def make_base_env(cfg: Any, num_envs: int, seed: int, device: torch.device | str) -> Any:
    """``num_envs`` envs of the port of ``cfg.env`` at ``cfg.difficulty``."""
    return env_class(cfg.env)(num_envs, device, seed, difficulty=cfg.difficulty)


def make_transforms(cfg: Any) -> list[Transform]:
    """``is_init``, the episode returns and, with ``cfg.previous_action``, the last action."""
    transforms = [InitTracker(), RewardSum()]
    if cfg.previous_action:
        transforms.append(PreviousAction())
    return transforms


def action_features(action: TensorSpec) -> int:
    """Width of :class:`~torchrl_ext.envs.transforms.PreviousAction`'s encoding of ``action``.

    Examples:
        >>> from torchrl.data import Bounded
        >>> action_features(MultiCategorical([8, 8])), action_features(Bounded(-2.0, 2.0, (1,)))
        (16, 1)
    """
    if isinstance(action, MultiCategorical):
        return int(action.nvec.reshape(-1, action.nvec.shape[-1])[0].sum())
    if isinstance(action, Categorical):
        return action.n
    return action.shape[-1]


class AgentInputs(nn.Module):
    """The encoded observation, then the previous action's features (when there are any).

    Args:
        observation (TensorSpec): the observation's spec (see :class:`ObservationEncoder`).
        previous (int, optional): width of the previous action's features; 0 for none.
            Defaults to 0.

    Examples:
        >>> inputs = AgentInputs(Categorical(4), previous=2)
        >>> inputs.features
        6
        >>> inputs(torch.tensor([3]), torch.tensor([[0.0, 1.0]]))
        tensor([[0., 0., 0., 1., 0., 1.]])
    """

    def __init__(self, observation: TensorSpec, previous: int = 0) -> None:
        super().__init__()
        self.encoder = ObservationEncoder(observation)
        self.previous = previous
        self.features = self.encoder.features + previous

    def forward(
        self, observation: torch.Tensor, prev_action: torch.Tensor | None = None
    ) -> torch.Tensor:
        """Features of shape ``[*batch, features]``."""
        features = self.encoder(observation)
        if self.previous:
            features = torch.cat([features, prev_action.to(features.dtype)], -1)
        return features


def input_module(cfg: Any, out_key: str = "features") -> tuple[TensorDictModule, int]:
    """The networks' first module (observation and previous action to ``out_key``), its width."""
    observation, action = task_specs(cfg)
    previous = action_features(action) if cfg.previous_action else 0
    inputs = AgentInputs(observation, previous)
    in_keys = ["observation", "prev_action"] if previous else ["observation"]
    return TensorDictModule(inputs, in_keys=in_keys, out_keys=[out_key]), inputs.features
