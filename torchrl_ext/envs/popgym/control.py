"""POPGym's control tasks: cart-poles and pendulums that need memory, as batched Warp envs.

Each env is gymnasium's physics (shared with :class:`~torchrl_ext.envs.CartPoleEnv` and
:class:`~torchrl_ext.envs.PendulumEnv`) behind POPGym's observation, reward and episode length:

* the cart-poles show only positions ``(x, theta)``, only velocities ``(x_dot, theta_dot)``, or
  noisy positions; the reward is ``1 / L`` on every step, so a full episode returns 1;
* the pendulums show only ``(cos theta, sin theta)``, plain or noisy; the reward maps gymnasium's
  cost ``c`` in ``[0, 16.27]`` to ``(1 - c / 8.1368022) / L``, in ``[-1 / L, 1 / L]``.

Episodes are truncated after ``L`` steps (POPGym's ``max_episode_length``); cart-poles also
terminate when the pole falls or the cart leaves the track, pendulums never terminate. The
difficulty picks ``L`` and the noise's standard deviation as POPGym's ``Easy``, ``Medium`` and
``Hard`` classes do. With ``dtype=torch.float64`` the state follows gymnasium's float64 arithmetic.

:meth:`~torchrl_ext.envs.WarpEnv.load_state_dict` refuses a state no run reaches: a cart-pole
outside ``|x| <= 2.4``, ``|theta| <= 12`` degrees unless the last step terminated (the state's
``"terminated"`` entry), a pendulum's ``theta_dot`` outside ``[-8, 8]`` (every step clips it).
Any other finite state loads, so an episode may start anywhere. The noise is drawn from each
observation's own random stream, so the state holds none of it.
"""

from __future__ import annotations

import math
from typing import Any, ClassVar

import numpy as np
import torch
from torchrl.data import Bounded, Unbounded

from torchrl_ext.envs._base.actions import coin_flips
from torchrl_ext.envs._base.state_dicts import require
from torchrl_ext.envs._kernels import cartpole as _cartpole
from torchrl_ext.envs._kernels import pendulum as _pendulum
from torchrl_ext.envs.popgym._kernels import control as _k
from torchrl_ext.envs.popgym._port import PopGymEnv, require_range
from torchrl_ext.envs.warp_env import WarpFunctions, state_view

__all__ = [
    "NoisyPositionOnlyCartPoleEnv",
    "NoisyPositionOnlyPendulumEnv",
    "PositionOnlyCartPoleEnv",
    "PositionOnlyPendulumEnv",
    "VelocityOnlyCartPoleEnv",
]

#: POPGym's cart-pole observation bounds (twice the termination limits), rounded to float32.
_X_BOUND = float(np.float32(2 * 2.4))
_THETA_BOUND = float(np.float32(2 * (12 * 2 * math.pi / 360)))
#: Half the range of gymnasium's pendulum reward ``[-16.2736044, 0]``, as POPGym computes it.
_HALF_COST_RANGE = (0 - -16.2736044) / 2


class _ControlTask(PopGymEnv):
    """What the five tasks share: the presets' form, the 2-d observation, the reward spec.

    A subclass sets :attr:`presets` (difficulty to ``(episode length, noise sigma or None)``)
    and :attr:`functions`, and implements :meth:`_action` and :meth:`_physics_constants`.
    """

    #: Components of the physics state.
    _state_size: ClassVar[int]

    def _configure(self, preset: tuple[int, float | None]) -> int:
        max_steps, self.noise_sigma = preset
        return max_steps

    def _make_specs(self) -> None:
        n, dev = self.num_envs, self.device
        self._set_specs(Unbounded(shape=(n, 2), dtype=self.dtype, device=dev), self._action())

    def _action(self) -> Any:
        """The action spec."""
        raise NotImplementedError

    def _physics_constants(self) -> dict[str, float | int]:
        """Constants of the physics and the reward."""
        raise NotImplementedError

    def _noise_constants(self) -> dict[str, float | int]:
        """Constants of the observation noise (the bounds come from the subclass)."""
        return {"noise_sigma": float(self.noise_sigma)}

    def _constants(self) -> dict[str, float | int]:
        noise = {} if self.noise_sigma is None else self._noise_constants()
        return {**self._physics_constants(), **noise}

    def _state_arrays(self) -> dict:
        return {"state": (float, (self._state_size,))}


class _CartPoleTask(_ControlTask):
    """A POPGym cart-pole: gymnasium's ``CartPole-v1`` physics, reward ``1 / L`` per step."""

    _state_size = 4
    observation_high: ClassVar = (_X_BOUND, _THETA_BOUND)

    def _action(self) -> Any:
        return self._discrete(2)

    def _physics_constants(self) -> dict[str, float | int]:
        return {**_cartpole.params(), "reward_scale": 1.0 / self.max_steps}

    def _noise_constants(self) -> dict[str, float | int]:
        return {**super()._noise_constants(), "x_bound": _X_BOUND, "theta_bound": _THETA_BOUND}

    def _random_actions(self, steps: int) -> dict:
        """``[N, T]`` uniform actions in ``{0, 1}``, eight per random byte."""
        return {"action": coin_flips(self.num_envs, steps, self.device)}

    def _check_state_values(self, state: dict[str, torch.Tensor]) -> None:
        """Also: a cart-pole the last step did not terminate is within the termination limits."""
        super()._check_state_values(state)
        params, positions = _cartpole.params(), state["state"][:, [0, 2]]
        limits = positions.new_tensor([params["x_limit"], params["theta_limit"]])
        upright = (positions.abs() <= limits) | state["terminated"]
        why = "unless the last step terminated, |x| <= 2.4 and |theta| <= 12 degrees"
        require("state", positions, upright, why)

    state = state_view("state", "The ``[num_envs, 4]`` state ``(x, x_dot, theta, theta_dot)``.")


class _PendulumTask(_ControlTask):
    """A POPGym pendulum: gymnasium's ``Pendulum-v1`` physics, reward in ``[-1/L, 1/L]``."""

    _state_size = 2
    observation_high: ClassVar = (1.0, 1.0)

    def _action(self) -> Any:
        n, dev = self.num_envs, self.device
        return Bounded(
            -_pendulum.MAX_TORQUE, _pendulum.MAX_TORQUE, shape=(n, 1), dtype=self.dtype, device=dev
        )

    def _physics_constants(self) -> dict[str, float | int]:
        return {
            **_pendulum.params(),
            "half_cost_range": _HALF_COST_RANGE,
            "max_steps": float(self.max_steps),
        }

    def _noise_constants(self) -> dict[str, float | int]:
        return {**super()._noise_constants(), "obs_bound": 1.0}

    def _check_state_values(self, state: dict[str, torch.Tensor]) -> None:
        """Also: the angular velocity lies in ``[-8, 8]`` (every step clips it there)."""
        super()._check_state_values(state)
        speed = state["state"][:, 1]
        bound = float(speed.new_tensor(_pendulum.params()["max_speed"]))
        require_range("state", speed, -bound, bound, "angular velocities", closed=True)

    state = state_view("state", "The ``[num_envs, 2]`` state ``(theta, theta_dot)``.")


class PositionOnlyCartPoleEnv(_CartPoleTask):
    """POPGym's ``PositionOnlyCartPole``: a cart-pole observed through ``(x, theta)`` only.

    Push the cart left (action 0) or right (action 1) to keep the pole up; the velocities must be
    inferred from successive positions. The reward is ``1 / L`` on every step; an episode
    terminates when the pole leans past 12 degrees or the cart leaves ``[-2.4, 2.4]``, and is
    truncated after ``L`` = 200 / 400 / 600 steps (easy / medium / hard). New episodes start
    uniform in ``[-0.05, 0.05)^4``. :attr:`state` is ``(x, x_dot, theta, theta_dot)`` per env.

    Args: as :class:`~torchrl_ext.envs.popgym._port.PopGymEnv`.

    Examples:
        >>> from torchrl_ext.envs.popgym.control import PositionOnlyCartPoleEnv
        >>> env = PositionOnlyCartPoleEnv(4, seed=0, difficulty="medium")
        >>> data = env.rollout(50, break_when_any_done=False)
        >>> data["next", "observation"].shape, env.max_steps
        (torch.Size([4, 50, 2]), 400)
        >>> bool((data["next", "reward"] == 1 / 400).all()), bool(data["next", "done"].any())
        (True, True)
    """

    functions = WarpFunctions(_cartpole.start, _k.cartpole_advance, _k.observe_positions)
    presets: ClassVar = {"easy": (200, None), "medium": (400, None), "hard": (600, None)}


class VelocityOnlyCartPoleEnv(_CartPoleTask):
    """POPGym's ``VelocityOnlyCartpole``: a cart-pole observed through ``(x_dot, theta_dot)`` only.

    As :class:`PositionOnlyCartPoleEnv`, but every step shows the velocities, and the positions
    must be integrated from them. As in POPGym, the observation right after a reset is the
    start's positions ``(x, theta)``, not its velocities.

    Args: as :class:`~torchrl_ext.envs.popgym._port.PopGymEnv`.

    Examples:
        >>> import torch
        >>> from torchrl_ext.envs.popgym.control import VelocityOnlyCartPoleEnv
        >>> env = VelocityOnlyCartPoleEnv(3, seed=0)
        >>> root = env.reset()
        >>> bool((root["observation"] == env.state[:, [0, 2]]).all())
        True
        >>> root["action"] = torch.ones(3, dtype=torch.int64)
        >>> out = env.step(root)
        >>> bool((out["next", "observation"] == env.state[:, [1, 3]]).all())
        True
    """

    functions = WarpFunctions(_cartpole.start, _k.cartpole_advance, _k.observe_velocities)
    observation_high: ClassVar = None  # POPGym's Box spans float32's range
    presets: ClassVar = {"easy": (200, None), "medium": (400, None), "hard": (600, None)}


class NoisyPositionOnlyCartPoleEnv(_CartPoleTask):
    """POPGym's ``NoisyPositionOnlyCartPole``: ``(x, theta)`` seen through Gaussian noise.

    As :class:`PositionOnlyCartPoleEnv` with ``L = 200`` at every difficulty, but each
    observation (the reset one included) adds independent ``N(0, sigma^2)`` noise to ``x`` and to
    ``theta``, ``sigma`` = 0.1 / 0.2 / 0.3 (easy / medium / hard), and clips the result to
    ``[-4.8, 4.8] x [-0.419, 0.419]``. The noise touches the observation only, never the state;
    it is drawn from the episode's random stream, so a seeded env repeats it.

    Args: as :class:`~torchrl_ext.envs.popgym._port.PopGymEnv`.

    Examples:
        >>> from torchrl_ext.envs.popgym.control import NoisyPositionOnlyCartPoleEnv
        >>> env = NoisyPositionOnlyCartPoleEnv(256, seed=0, difficulty="hard")
        >>> root = env.reset()
        >>> noise = root["observation"][:, 0] - env.state[:, 0]
        >>> env.noise_sigma, 0.25 < float(noise.std()) < 0.35
        (0.3, True)
    """

    functions = WarpFunctions(_cartpole.start, _k.cartpole_advance, _k.observe_noisy_positions)
    presets: ClassVar = {"easy": (200, 0.1), "medium": (200, 0.2), "hard": (200, 0.3)}


class PositionOnlyPendulumEnv(_PendulumTask):
    """POPGym's ``PositionOnlyPendulum``: a pendulum observed through ``(cos theta, sin theta)``.

    Swing the pendulum up with a torque in ``[-2, 2]`` (clipped; NaN raises ``ValueError``); the
    angular velocity is not observed. The reward is ``(1 - c / 8.1368022) / L`` for gymnasium's
    cost ``c`` of the pre-step state; episodes never terminate and are truncated after ``L`` =
    200 / 150 / 100 steps (easy / medium / hard). New episodes start with ``theta`` uniform in
    ``[-pi, pi)`` and ``theta_dot`` in ``[-1, 1)``. :attr:`state` is ``(theta, theta_dot)``.

    Args: as :class:`~torchrl_ext.envs.popgym._port.PopGymEnv`.

    Examples:
        >>> from torchrl_ext.envs.popgym.control import PositionOnlyPendulumEnv
        >>> env = PositionOnlyPendulumEnv(4, seed=0, difficulty="hard")
        >>> data = env.rollout(100, break_when_any_done=False)
        >>> data["next", "observation"].shape
        torch.Size([4, 100, 2])
        >>> data["next", "truncated"][:, -1, 0].tolist(), bool(data["next", "terminated"].any())
        ([True, True, True, True], False)
        >>> bool((data["next", "reward"].abs() <= 1 / 100).all())
        True
    """

    functions = WarpFunctions(_pendulum.start, _k.pendulum_advance, _k.observe_angle)
    presets: ClassVar = {"easy": (200, None), "medium": (150, None), "hard": (100, None)}


class NoisyPositionOnlyPendulumEnv(_PendulumTask):
    """POPGym's ``NoisyPositionOnlyPendulum``: ``(cos theta, sin theta)`` seen through noise.

    As :class:`PositionOnlyPendulumEnv` with ``L = 200`` at every difficulty, but each
    observation (the reset one included) adds independent ``N(0, sigma^2)`` noise to both
    components, ``sigma`` = 0.1 / 0.2 / 0.3 (easy / medium / hard), and clips them to
    ``[-1, 1]``. The noise touches the observation only; a seeded env repeats it.

    Args: as :class:`~torchrl_ext.envs.popgym._port.PopGymEnv`.

    Examples:
        >>> from torchrl_ext.envs.popgym.control import NoisyPositionOnlyPendulumEnv
        >>> env = NoisyPositionOnlyPendulumEnv(8, seed=0, difficulty="medium")
        >>> data = env.rollout(200, break_when_any_done=False)
        >>> env.noise_sigma, bool(data["next", "observation"].abs().max() <= 1)
        (0.2, True)
        >>> bool(data["next", "truncated"][:, -1].all())
        True
    """

    functions = WarpFunctions(_pendulum.start, _k.pendulum_advance, _k.observe_noisy_angle)
    presets: ClassVar = {"easy": (200, 0.1), "medium": (200, 0.2), "hard": (200, 0.3)}
