"""PendulumEnv: gymnasium's ``Pendulum-v1`` (continuous torque) as a batched Warp env."""

from __future__ import annotations

import torch
from torchrl.data import Bounded, Composite, Unbounded

from torchrl_ext.envs._kernels import pendulum as _k
from torchrl_ext.envs.warp_env import WarpEnv, WarpFunctions, state_view

__all__ = ["PendulumEnv"]


class PendulumEnv(WarpEnv):
    """Batched inverted pendulum with gymnasium ``Pendulum-v1`` dynamics, simulated in Warp kernels.

    The action is a torque in ``[-2, 2]``; values outside are clipped (as gymnasium does), NaN
    raises ``ValueError``. The observation is ``(cos theta, sin theta, theta_dot)``, the reward is
    ``-(theta^2 + 0.1 theta_dot^2 + 0.001 u^2)`` for the pre-step state with ``theta`` wrapped to
    ``[-pi, pi)``. Episodes never terminate; they are truncated after ``max_steps`` steps. New
    episodes start with ``theta`` uniform in ``[-pi, pi)`` and ``theta_dot`` in ``[-1, 1)``, drawn
    from the env's ``(seed, env, episode)`` stream. :attr:`state` is ``(theta, theta_dot)`` per env.

    Args:
        num_envs (int): number of envs.
        device (torch.device or str, optional): device of state and outputs. Defaults to ``"cpu"``.
        seed (int, optional): 64-bit seed. Defaults to ``None`` (drawn from torch's generator).

    Keyword Args:
        max_steps (int, optional): time limit; ``None`` disables it. Defaults to ``200``.
        dtype (torch.dtype, optional): ``torch.float32`` or ``torch.float64``. Defaults to
            ``torch.float32``.
        capture (bool, optional): replay recorded Warp graphs. Defaults to ``False``.

    Examples:
        >>> from torchrl_ext.envs import PendulumEnv
        >>> env = PendulumEnv(3, seed=0, max_steps=5)
        >>> data = env.rollout(12, break_when_any_done=False)
        >>> data["next", "observation"].shape
        torch.Size([3, 12, 3])
        >>> data["next", "truncated"][0, :, 0].tolist()[:6]
        [False, False, False, False, True, False]
        >>> bool((data["next", "reward"] <= 0).all())
        True
    """

    functions = WarpFunctions(_k.start, _k.advance, _k.observe)

    def __init__(
        self,
        num_envs: int,
        device: torch.device | str = "cpu",
        seed: int | None = None,
        *,
        max_steps: int | None = 200,
        dtype: torch.dtype = torch.float32,
        capture: bool = False,
    ) -> None:
        super().__init__(num_envs, device, seed, max_steps=max_steps, dtype=dtype, capture=capture)

    def _make_specs(self) -> None:
        n, dev = self.num_envs, self.device
        self.observation_spec = Composite(
            observation=Unbounded(shape=(n, 3), dtype=self.dtype, device=dev),
            shape=(n,),
            device=dev,
        )
        self.action_spec = Bounded(
            -_k.MAX_TORQUE, _k.MAX_TORQUE, shape=(n, 1), dtype=self.dtype, device=dev
        )
        self.reward_spec = Unbounded(shape=(n, 1), dtype=self.dtype, device=dev)

    def _state_arrays(self) -> dict:
        return {"state": (float, (2,))}

    def _constants(self) -> dict[str, float]:
        return _k.params()

    state = state_view("state", "The ``[num_envs, 2]`` state ``(theta, theta_dot)``.")
