"""Shared set-up of the CartPole stepping benchmarks: random-policy workloads and anchors.

Every workload steps ``num_envs`` CartPoles for ``steps`` steps with random actions and auto-reset:

* ``ours_rollout``: ``CartPoleEnv.rollout(T, break_when_any_done=False)`` (the ``[N, T]`` kernel);
* ``ours_policy_rollout``: the same with a policy, i.e. T fused ``step_and_maybe_reset`` calls;
* ``ours_collector``: ``torchrl.collectors.Collector`` over ``CartPoleEnv`` (one batch of N*T);
* ``ours_collector_lean``: the same with a one-op random policy and ``track_traj_ids=False``;
* ``ours_collector_tuned``: the same random-policy collection with the options that cut per-step
  work: a captured env (``capture=True``: one graph replay per step), the Collector's ``device``
  (no per-step cast of the carrier), ``track_traj_ids=False`` and every frame an
  ``init_random_frames`` frame (``env.rand_action`` instead of ``RandomPolicy``);
* ``collector_floor``: the ``ours_collector`` Collector over ``NullCartPole`` (CartPole's specs, no
  simulation, the same preallocated outputs every step): what the Collector and its random policy
  cost alone, the ceiling of any env behind them;
* ``ours_graph_step``: T replays of the captured fused step (``capture=True``), no TensorDicts;
* ``stock_rollout``: the same kernels through TorchRL's generic ``step`` + partial ``reset``;
* ``gym_vector``: gymnasium's numpy ``CartPoleVectorEnv``;
* ``gym_sync``: gymnasium's ``SyncVectorEnv`` of ``CartPole-v1`` (few steps: it is slow).

Our workloads and the stock path run once at full size before they are timed (a first rollout
maps its fresh output memory, a first Collector batch builds its buffers).
"""

from __future__ import annotations

import sys
from collections.abc import Callable

import numpy as np
import torch
import warp as wp
from torchrl.envs import EnvBase

from torchrl_ext.envs import CartPoleEnv

wp.config.log_level = wp.LOG_WARNING


class StockCartPole(CartPoleEnv):
    """Our kernels behind TorchRL's generic step / partial-reset merge and rollout loop."""

    _step_and_maybe_reset = EnvBase._step_and_maybe_reset
    rollout = EnvBase.rollout


class NullCartPole(EnvBase):
    """``CartPoleEnv``'s specs at zero simulation cost: every step returns the same outputs.

    Not an env to learn from: the Collector over it measures the Collector's own per-step cost
    (and its random policy's), with no simulation, no copies and no auto-reset behind it.
    """

    def __init__(self, num_envs: int, device: str = "cpu") -> None:
        super().__init__(device=device, batch_size=torch.Size([num_envs]))
        ref = CartPoleEnv(num_envs, device, seed=0)
        self.observation_spec = ref.observation_spec.clone()
        self.action_spec = ref.action_spec.clone()
        self.reward_spec = ref.reward_spec.clone()
        self.full_done_spec = ref.full_done_spec.clone()
        self._root = ref.reset()
        self._next = self._root.copy().set("reward", self.reward_spec.zero())

    def _reset(self, tensordict=None, **kwargs):
        return self._root.copy()

    def _step(self, tensordict):
        return self._next.copy()

    def _set_seed(self, seed):
        return seed

    def _step_and_maybe_reset(self, tensordict):
        tensordict.set("next", self._next.copy())
        return tensordict, self._root.copy()


def _synced(run: Callable[[], object], device: str) -> Callable[[], None]:
    """``run`` followed by a device synchronization (so CUDA timings cover the work)."""

    def timed() -> None:
        run()
        if torch.device(device).type == "cuda":
            torch.cuda.synchronize(device)

    return timed


def _ours_rollout(n: int, steps: int, device: str = "cpu") -> Callable[[], None]:
    env = CartPoleEnv(n, device, seed=0)
    env.rollout(steps, break_when_any_done=False)
    return _synced(lambda: env.rollout(steps, break_when_any_done=False), device)


def _ours_policy_rollout(n: int, steps: int, device: str = "cpu") -> Callable[[], None]:
    env = CartPoleEnv(n, device, seed=0)

    def policy(td):
        return td.set("action", torch.randint(0, 2, (n,), device=device))

    env.rollout(steps, policy, break_when_any_done=False)
    return _synced(lambda: env.rollout(steps, policy, break_when_any_done=False), device)


def _collecting(
    env: EnvBase, steps: int, policy: object = None, **options: object
) -> Callable[[], None]:
    """One batch of ``N * steps`` frames from a warmed-up Collector over ``env`` per call."""
    from torchrl.collectors import Collector

    frames = env.batch_size[0] * steps
    collector = Collector(env, policy, frames_per_batch=frames, total_frames=-1, **options)
    batches = iter(collector)
    next(batches)
    return _synced(lambda: next(batches), str(env.device))


def _ours_collector(n: int, steps: int, device: str = "cpu") -> Callable[[], None]:
    return _collecting(CartPoleEnv(n, device, seed=0), steps)


def _ours_collector_tuned(n: int, steps: int, device: str = "cpu") -> Callable[[], None]:
    frames = n * steps
    return _collecting(
        CartPoleEnv(n, device, seed=0, capture=True),
        steps,
        device=device,
        track_traj_ids=False,
        init_random_frames=frames * (sys.maxsize // frames),  # every frame is a random frame
    )


def _collector_floor(n: int, steps: int, device: str = "cpu") -> Callable[[], None]:
    return _collecting(NullCartPole(n, device), steps)


def _ours_collector_lean(n: int, steps: int, device: str = "cpu") -> Callable[[], None]:
    from tensordict.nn import TensorDictModule

    class _Coin(torch.nn.Module):
        def forward(self, obs: torch.Tensor) -> torch.Tensor:
            return torch.randint(0, 2, obs.shape[:-1])

    policy = TensorDictModule(_Coin(), in_keys=["observation"], out_keys=["action"])
    return _collecting(
        CartPoleEnv(n, device, seed=0),
        steps,
        policy,
        track_traj_ids=False,
        auto_register_policy_transforms=False,
    )


def _ours_graph_step(n: int, steps: int, device: str = "cpu") -> Callable[[], None]:
    env = CartPoleEnv(n, device, seed=0, capture=True)
    env.reset()
    actions = torch.randint(0, 2, (steps, n), device=device)

    def run() -> None:
        for a in actions:
            env._layout.actions["action"].copy_(a)
            env._launcher.run("step_autoreset")

    timed = _synced(run, device)
    timed()
    return timed


def _stock_rollout(n: int, steps: int, device: str = "cpu") -> Callable[[], None]:
    env = StockCartPole(n, device, seed=0)
    env.rollout(steps, break_when_any_done=False)
    return _synced(lambda: env.rollout(steps, break_when_any_done=False), device)


def _gym_vector(n: int, steps: int) -> Callable[[], None]:
    from gymnasium.envs.classic_control.cartpole import CartPoleVectorEnv

    env = CartPoleVectorEnv(num_envs=n)
    env.reset(seed=0)
    actions = np.random.default_rng(0).integers(0, 2, (steps, n))

    def run() -> None:
        for a in actions:
            env.step(a)

    return run


def _gym_sync(n: int, steps: int) -> Callable[[], None]:
    import gymnasium as gym

    env = gym.vector.SyncVectorEnv([lambda: gym.make("CartPole-v1")] * n)
    env.reset(seed=0)
    actions = np.random.default_rng(0).integers(0, 2, (steps, n))

    def run() -> None:
        for a in actions:
            env.step(a)

    return run


#: name -> (factory(num_envs, steps) -> callable running num_envs * steps env-steps, steps scale)
WORKLOADS: dict[str, tuple[Callable[..., Callable[[], None]], float]] = {
    "ours_rollout": (_ours_rollout, 1.0),
    "ours_policy_rollout": (_ours_policy_rollout, 1.0),
    "ours_collector": (_ours_collector, 1.0),
    "ours_collector_lean": (_ours_collector_lean, 1.0),
    "ours_collector_tuned": (_ours_collector_tuned, 1.0),
    "collector_floor": (_collector_floor, 1.0),
    "ours_graph_step": (_ours_graph_step, 1.0),
    "stock_rollout": (_stock_rollout, 1.0),
    "gym_vector": (_gym_vector, 1.0),
    "gym_sync": (_gym_sync, 0.1),
}

#: workloads whose factory takes a ``device`` (ours and the stock path on our kernels)
DEVICE_WORKLOADS = {name for name in WORKLOADS if not name.startswith("gym")}


def workload_steps(name: str, steps: int) -> int:
    """Number of steps a workload runs for a requested ``steps`` (slow anchors run fewer)."""
    return max(1, int(steps * WORKLOADS[name][1]))
