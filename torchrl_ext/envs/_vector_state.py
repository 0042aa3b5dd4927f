"""VectorStateEnv: a WarpEnv whose state is one ``[N, D]`` float array, stepped by one kernel."""

from __future__ import annotations

import torch
import warp as wp

from torchrl_ext.envs._kernels.vector_state import VectorKernels
from torchrl_ext.envs.warp_env import Launch, WarpEnv, _live_view, pack_params


class VectorStateEnv(WarpEnv):
    """Base of the envs whose state is an ``[N, D]`` array and whose step is one kernel.

    A subclass sets :attr:`kernels` (from ``_kernels.vector_state.make_kernels``), returns its
    named constants from :meth:`_param_values` and picks among its observations with
    :meth:`_obs_mode`.
    """

    kernels: VectorKernels
    _saved_arrays = ("state",)

    def _param_values(self) -> dict[str, float]:
        raise NotImplementedError

    def _obs_mode(self) -> int:
        """The ``obs_mode`` the env's ``observe`` function reads (0 by default)."""
        return 0

    def _allocate_state(self) -> None:
        shape = (self.num_envs, self.kernels.size)
        self._state = torch.zeros(shape, dtype=self.dtype, device=self.device)
        self._wp_state = wp.from_torch(self._state)
        self._wp_params = pack_params(self.kernels.params, self._param_values(), self.dtype)
        # fixed by the constructor's arguments: every launch recipe reads these attributes
        self._observe_mode = self._obs_mode()
        self._wp_episodes = self.buffers["episodes"]

    state = _live_view("_state", "The ``[num_envs, D]`` physical state (columns: see the class).")

    def _inputs(self, first: wp.array) -> list:
        return [self._wp_state, first, self._wp_params, self._wp_episodes]

    def _reset_launches(self) -> list[Launch]:
        inputs = [*self._inputs(self._wp["mask"]), self._observe_mode]
        return [(self.kernels.reset, [*inputs, self._slots["root"]["observation"]])]

    def _steps_launches(
        self, actions: wp.array, out: dict, reset_last: bool, root_from: int
    ) -> list[Launch]:
        limits = [self._limit, int(reset_last), root_from, self._observe_mode]
        observations = [out["root"]["observation"], out["next"]["observation"]]
        inputs = [*self._inputs(actions), *limits, *observations, out["reward"], out["flags"]]
        return [(self.kernels.steps, inputs)]
