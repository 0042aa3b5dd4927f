"""CartPoleEnv: gymnasium's ``CartPole-v1`` as a batched Warp env, optionally partially observed."""

from __future__ import annotations

import torch
from torchrl.data import Categorical, Composite, Unbounded

from torchrl_ext._checks import check_bool
from torchrl_ext.envs._base import actions
from torchrl_ext.envs._kernels import cartpole as _k
from torchrl_ext.envs.warp_env import WarpEnv, WarpFunctions, state_view

__all__ = ["CartPoleEnv"]


class CartPoleEnv(WarpEnv):
    """Batched cart-pole with gymnasium ``CartPole-v1`` dynamics, simulated in Warp kernels.

    Each env balances a pole on a cart by pushing left (action 0) or right (action 1) with a
    force of 10 N. The reward is 1 every step; an episode terminates when the pole leans more than
    12 degrees or the cart leaves ``[-2.4, 2.4]``, and is truncated (``truncated`` True,
    ``terminated`` unchanged) after ``max_steps`` steps. New episodes start from a state uniform in
    ``[-0.05, 0.05)^4`` drawn from the env's ``(seed, env, episode)`` stream.

    With ``dtype=torch.float64`` the simulation performs gymnasium's float64 operations in the
    same order, so observations equal gymnasium's states bit for bit given the same state and
    actions. With ``observe_velocity=False`` the observation is ``(x, theta)`` only: the standard
    partially observable variant, which needs memory. :attr:`state` is ``(x, x_dot, theta,
    theta_dot)`` per env.

    Args:
        num_envs (int): number of envs.
        device (torch.device or str, optional): device of state and outputs. Defaults to ``"cpu"``.
        seed (int, optional): 64-bit seed. Defaults to ``None`` (drawn from torch's generator).

    Keyword Args:
        observe_velocity (bool, optional): include ``x_dot`` and ``theta_dot`` in the observation.
            Defaults to ``True``.
        max_steps (int, optional): time limit; ``None`` disables it. Defaults to ``500``.
        dtype (torch.dtype, optional): ``torch.float32`` or ``torch.float64``. Defaults to
            ``torch.float32``.
        capture (bool, optional): replay recorded Warp graphs. Defaults to ``False``.

    Examples:
        >>> from torchrl.envs.utils import check_env_specs
        >>> from torchrl_ext.envs import CartPoleEnv
        >>> env = CartPoleEnv(8, seed=1, observe_velocity=False)
        >>> check_env_specs(env)
        >>> data = env.rollout(100, break_when_any_done=False)
        >>> data.shape, data["observation"].shape
        (torch.Size([8, 100]), torch.Size([8, 100, 2]))
        >>> bool(data["next", "done"].any()), bool(data["next", "truncated"].any())
        (True, False)
    """

    functions = WarpFunctions(_k.start, _k.advance, _k.observe)

    def __init__(
        self,
        num_envs: int,
        device: torch.device | str = "cpu",
        seed: int | None = None,
        *,
        observe_velocity: bool = True,
        max_steps: int | None = 500,
        dtype: torch.dtype = torch.float32,
        capture: bool = False,
    ) -> None:
        self.observe_velocity = check_bool("observe_velocity", observe_velocity)
        super().__init__(num_envs, device, seed, max_steps=max_steps, dtype=dtype, capture=capture)

    def _make_specs(self) -> None:
        n, dev = self.num_envs, self.device
        obs_dim = 4 if self.observe_velocity else 2
        self.observation_spec = Composite(
            observation=Unbounded(shape=(n, obs_dim), dtype=self.dtype, device=dev),
            shape=(n,),
            device=dev,
        )
        self.action_spec = Categorical(2, shape=(n,), dtype=torch.int64, device=dev)
        self.reward_spec = Unbounded(shape=(n, 1), dtype=self.dtype, device=dev)

    def _state_arrays(self) -> dict:
        return {"state": (float, (4,))}

    def _constants(self) -> dict[str, float | int]:
        return {**_k.params(), "observe_velocity": int(self.observe_velocity)}

    state = state_view("state", "The ``[num_envs, 4]`` state ``(x, x_dot, theta, theta_dot)``.")

    def _random_actions(self, steps: int) -> dict:
        """``[N, T]`` uniform actions in ``{0, 1}``, eight per random byte."""
        return {"action": actions.coin_flips(self.num_envs, steps, self.device)}
