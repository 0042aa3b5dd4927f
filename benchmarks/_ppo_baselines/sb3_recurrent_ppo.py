"""sb3-contrib's ``RecurrentPPO`` with the PPO demo's settings, on a VecEnv of our CartPole.

Needs ``stable-baselines3`` and ``sb3-contrib`` (``pip install -e ".[test]"``); importing this
module without them raises ``ImportError``.

The env is the demo's own :class:`~torchrl_ext.envs.CartPoleEnv` (``observe_velocity=False``),
stepped through :class:`.cartpole_adapter.BatchedCartPole` inside :class:`CartPoleVecEnv`, which
applies the demo's constant observation and reward factors and hands sb3 the final
observation of truncated episodes (sb3 bootstraps from it, as the demo's GAE does).

Settings matched: 16 envs x 32 steps, ``batch_size`` 256 (2 minibatches a batch; sb3 cuts the
flattened env-major batch at a random offset into chunks of 256 steps and splits them into
padded per-episode sequences, close to 8 whole rows), 8 epochs, lr 1.5e-3 and clip 0.2 linear
to 0 (the schedules are shifted by one batch, since sb3 computes its progress after collecting
a batch and the demo before), gamma 0.98, lambda 0.8, value weight 0.5, no entropy bonus,
advantages standardized per minibatch, Adam eps 1e-5, separate LSTMs of 64 for actor and
critic, heads of one ReLU layer of 64, PyTorch's default initialization (``ortho_init=False``).
Not matched: sb3 clips the gradient norm of all parameters together (the demo clips actor and
critic each to 0.5), and its LSTM input goes through sb3's ``FlattenExtractor`` (a no-op here).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import numpy as np
import torch
from gymnasium import spaces
from sb3_contrib import RecurrentPPO
from stable_baselines3.common.callbacks import BaseCallback
from stable_baselines3.common.logger import Logger
from stable_baselines3.common.vec_env.base_vec_env import VecEnv
from torch import nn

from _ppo_baselines.cartpole_adapter import BatchedCartPole
from _ppo_baselines.cleanrl_lstm_ppo import Args, Run


class CartPoleVecEnv(VecEnv):
    """:class:`BatchedCartPole` behind sb3's ``VecEnv`` interface (numpy in and out).

    ``completed`` collects the unscaled returns of the episodes that ended, in order.
    """

    def __init__(
        self, num_envs: int, seed: int, obs_scale: tuple[float, float], reward_scale: float
    ) -> None:
        self.cartpole = BatchedCartPole(num_envs, seed, obs_scale, reward_scale)
        self.render_mode = None  # read by VecEnv.__init__
        observation_space = spaces.Box(-np.inf, np.inf, (BatchedCartPole.obs_dim,), np.float32)
        super().__init__(num_envs, observation_space, spaces.Discrete(2))
        self.completed: list[float] = []
        self._actions: torch.Tensor | None = None

    def reset(self) -> np.ndarray:
        return self.cartpole.reset().numpy()

    def step_async(self, actions: np.ndarray) -> None:
        self._actions = torch.as_tensor(actions, dtype=torch.int64).reshape(self.num_envs)

    def step_wait(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, list[dict]]:
        step = self.cartpole.step(self._actions)
        done = step.done.numpy()
        infos: list[dict[str, Any]] = [{} for _ in range(self.num_envs)]
        ended = np.flatnonzero(done)
        ended_returns, ended_lengths = step.ended_returns.tolist(), step.ended_lengths.tolist()
        for i, ret, length in zip(ended, ended_returns, ended_lengths, strict=True):
            infos[i] = {
                "terminal_observation": step.final_obs[i].numpy(),
                "TimeLimit.truncated": bool(step.truncated[i] and not step.terminated[i]),
                "episode": {"r": ret, "l": length, "t": 0.0},
            }
        self.completed += ended_returns
        return step.obs.numpy(), step.reward.numpy(), done, infos

    def close(self) -> None:
        pass

    def get_attr(self, attr_name: str, indices: Any = None) -> list[Any]:
        return [getattr(self, attr_name)] * self.num_envs

    def set_attr(self, attr_name: str, value: Any, indices: Any = None) -> None:
        setattr(self, attr_name, value)

    def env_method(self, method_name: str, *args: Any, indices: Any = None, **kwargs: Any) -> list:
        raise NotImplementedError(f"CartPoleVecEnv has no per-env method {method_name!r}.")

    def env_is_wrapped(self, wrapper_class: type, indices: Any = None) -> list[bool]:
        return [False] * self.num_envs


class History(BaseCallback):
    """Per batch ``(frames, seconds, returns ended in it)``, read after each update.

    sb3 calls ``on_rollout_start`` after the previous batch's update, so the seconds cover
    collection and update of every batch counted, as the demo's do; the clock starts at
    ``on_training_start`` (after sb3's set-up and first reset).
    """

    def __init__(self, env: CartPoleVecEnv) -> None:
        super().__init__()
        self.env = env
        self.history: list[tuple[int, float, list[float]]] = []
        self.timings = {"collect (with GAE)": 0.0, "update": 0.0}
        self._start = self._mark = 0.0

    def _on_training_start(self) -> None:
        self._start = self._mark = time.perf_counter()

    def _on_rollout_start(self) -> None:
        self._close_batch()

    def _on_rollout_end(self) -> None:
        now = time.perf_counter()
        self.timings["collect (with GAE)"] += now - self._mark
        self._mark = now

    def _on_training_end(self) -> None:
        self._close_batch()

    def _on_step(self) -> bool:
        return True

    def _close_batch(self) -> None:
        if self.num_timesteps == 0:
            return
        now = time.perf_counter()
        self.timings["update"] += now - self._mark
        self._mark = now
        self.history.append((self.num_timesteps, now - self._start, self.env.completed))
        self.env.completed = []


def linear(initial: float, batch_fraction: float) -> Callable[[float], float]:
    """``initial`` times the fraction of frames left before the batch just collected."""
    return lambda progress_remaining: initial * min(1.0, progress_remaining + batch_fraction)


def make_model(args: Args, env: CartPoleVecEnv) -> RecurrentPPO:
    """RecurrentPPO with ``args``' settings, as far as its options go (see the module doc)."""
    batch_fraction = args.batch_frames / args.total_frames
    policy_kwargs = {
        "lstm_hidden_size": args.hidden,
        "n_lstm_layers": 1,
        "shared_lstm": False,
        "enable_critic_lstm": True,
        "net_arch": {"pi": [args.head], "vf": [args.head]},
        "activation_fn": nn.ReLU,
        "ortho_init": False,
        "optimizer_kwargs": {"eps": args.adam_eps},
    }
    model = RecurrentPPO(
        "MlpLstmPolicy", env,
        learning_rate=linear(args.learning_rate, batch_fraction),
        n_steps=args.num_steps,
        batch_size=args.envs_per_minibatch * args.num_steps,
        n_epochs=args.update_epochs,
        gamma=args.gamma, gae_lambda=args.gae_lambda,
        clip_range=linear(args.clip_coef, batch_fraction),
        normalize_advantage=True, ent_coef=0.0, vf_coef=args.vf_coef,
        max_grad_norm=args.max_grad_norm,
        policy_kwargs=policy_kwargs, seed=args.seed, device="cpu", verbose=0,
    )  # fmt: skip
    # a logger that writes nowhere: else each learn() leaves an empty SB3-<time> folder in /tmp
    model.set_logger(Logger(folder=None, output_formats=[]))
    return model


def evaluate(args: Args, model: RecurrentPPO) -> float:
    """Mean return of ``eval_episodes`` fresh episodes (one per env) with the policy's mode."""
    env = CartPoleVecEnv(args.eval_episodes, args.seed + 1_000_003, args.obs_scale, 1.0)
    obs, state = env.reset(), None
    starts = np.ones(args.eval_episodes, dtype=bool)
    returns = np.full(args.eval_episodes, np.nan)
    while np.isnan(returns).any():
        action, state = model.predict(obs, state, episode_start=starts, deterministic=True)
        obs, _, starts, infos = env.step(action)
        for i in np.flatnonzero(starts & np.isnan(returns)):
            returns[i] = infos[i]["episode"]["r"]
    return float(returns.mean())


def train(args: Args) -> Run:
    """Trains one seed with ``RecurrentPPO.learn``; seconds count from the first batch."""
    env = CartPoleVecEnv(args.num_envs, args.seed, args.obs_scale, args.reward_scale)
    model = make_model(args, env)
    history = History(env)
    model.learn(total_timesteps=args.total_frames, callback=history)
    return Run(history.history, history.timings, evaluate(args, model))
