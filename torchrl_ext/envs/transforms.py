"""Transforms for TorchRL envs built on our envs.

:class:`BaseEnvState` puts a wrapped env's simulation state into the checkpoint of the
``TransformedEnv`` around it: TorchRL's ``TransformedEnv.state_dict()`` (and so a collector's
``state_dict()``) holds only its transforms' state, never its base env's.
"""

from __future__ import annotations

from typing import Any

from tensordict import TensorDictBase
from torchrl.envs import EnvBase, Transform, TransformedEnv

from torchrl_ext.envs.warp_env import WarpEnv

__all__ = ["BaseEnvState"]

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
