"""VectorStateEnv: a WarpEnv whose state is one ``[N, D]`` float array, stepped by one kernel."""

from __future__ import annotations

from typing import Any

import torch
import warp as wp

from torchrl_ext.envs.warp_env import Launch, WarpEnv, pack_params


class VectorStateEnv(WarpEnv):
    """Base of the envs whose state is an ``[N, D]`` array and whose step is one kernel.

    A subclass sets :attr:`state_size`, and :attr:`reset_kernel` and :attr:`steps_kernel` from
    ``_kernels.vector_state.make_kernels``, and returns its named constants from
    :meth:`_param_values` for the struct :attr:`param_structs`; :meth:`_obs_mode` picks among
    its observations.
    """

    state_size: int
    param_structs: dict
    reset_kernel: Any
    steps_kernel: Any
    _saved_arrays = ("state",)

    def _param_values(self) -> dict[str, float]:
        raise NotImplementedError

    def _obs_mode(self) -> int:
        """The ``obs_mode`` the env's ``observe`` function reads (0 by default)."""
        return 0

    def _allocate_state(self) -> None:
        shape = (self.num_envs, self.state_size)
        self._state = torch.zeros(shape, dtype=self.dtype, device=self.device)
        self._wp_state = wp.from_torch(self._state)
        self._wp_params = pack_params(self.param_structs, self._param_values(), self.dtype)

    @property
    def state(self) -> torch.Tensor:
        """The ``[num_envs, state_size]`` physical state (columns: see the class), a live view."""
        return self._state

    def _inputs(self, first: wp.array) -> list:
        return [self._wp_state, first, self._wp_params, self.buffers["episodes"]]

    def _reset_launches(self) -> list[Launch]:
        inputs = [*self._inputs(self.buffers["mask"]), self._obs_mode()]
        return [(self.reset_kernel, [*inputs, self._slots["root"]["observation"]])]

    def _steps_launches(
        self, actions: wp.array, out: dict, reset_last: bool, root_from: int
    ) -> list[Launch]:
        limits = [self.step_limit, int(reset_last), root_from, self._obs_mode()]
        observations = [out["root"]["observation"], out["next"]["observation"]]
        inputs = [*self._inputs(actions), *limits, *observations, out["reward"], out["flags"]]
        return [(self.steps_kernel, inputs)]
