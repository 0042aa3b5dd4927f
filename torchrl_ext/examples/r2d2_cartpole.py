"""R2D2-style recurrent Q-learning on partially observable CartPole.

The pipeline: ``CartPoleEnv(num_envs, observe_velocity=False)`` steps many envs at once; an
epsilon-greedy LSTM Q-network acts in all of them and its recurrent state *before* each record is
stored with the record; ``[N_env, T]`` chunks go into a ``TensorDictPrioritizedReplayBuffer`` over
a time x lane ``LazyTensorStorage(ndim=2)``; :class:`torchrl_ext.Sequence` expands each sampled
anchor into a ``[B, burn_in + length + bootstrap]`` window (``layout="batch_time"``). The learner
starts each window from the stored state of its first record, burns in without gradient, and
regresses the learning region onto n-step double-Q targets built from the bootstrap records.
Per-record TD errors go back as one priority per anchor (R2D2's ``eta`` mixture).

Run ``python -m torchrl_ext.examples.r2d2_cartpole --seed 0 --minutes 5`` (outputs go to
``runs/r2d2_cartpole`` unless ``--out`` says otherwise); ``--quick`` runs a few iterations and
checks shapes, masks and a finite loss.
"""

from __future__ import annotations

import argparse
import csv
import dataclasses
import json
import math
import time
from collections import deque
from pathlib import Path

import torch
from tensordict import TensorDict, TensorDictBase
from torch import nn
from torch.nn.utils.rnn import pack_padded_sequence
from torchrl.data import LazyTensorStorage, TensorDictPrioritizedReplayBuffer

from torchrl_ext.data import Sequence
from torchrl_ext.examples import plain_torchrl_logs

__all__ = [
    "R2D2Config",
    "RecurrentQNet",
    "epsilons",
    "n_step_targets",
    "r2d2_loss",
    "train",
]

STATE_KEYS = ("recurrent_state_h", "recurrent_state_c")
#: Termination bounds of the partially observed CartPole, ``(x, theta)``: the input scale.
CARTPOLE_SCALE = (2.4, 12 * 2 * math.pi / 360)


@dataclasses.dataclass
class R2D2Config:
    """Hyperparameters of :func:`train`.

    Args:
        seed (int): seed of the env, the network initialization and every generator.
        minutes (float): wall-clock budget of the training loop.
        max_frames (int): frame budget of the training loop (whichever comes first).
        num_envs (int): envs stepped together by the actor.
        chunk (int): env steps per collection; each collection writes ``[num_envs, chunk]``.
        updates_per_chunk (int): learner updates after each collection.
        warmup_frames (int): frames collected before the first update.
        capacity (int): replay capacity in records (time x lanes).
        burn_in (int): burn-in records per window.
        length (int): learning records per window.
        n_step (int): return horizon; windows carry ``n_step - 1`` bootstrap records.
        batch_size (int): windows per update.
        hidden (int): LSTM and head width.
        gamma (float): discount.
        lr (float): Adam learning rate.
        target_period (int): updates between target-network copies.
        alpha (float): priority exponent.
        beta (float): importance-sampling exponent.
        eta (float): weight of the max in the per-anchor priority mixture.
        eps_start (float): exploration rate at the start.
        eps_end (float): exploration rate after ``eps_frames`` frames.
        eps_frames (int): frames of linear exploration decay.
        eps_lanes (float): Ape-X-style floor per env lane: lane ``i`` of ``N`` never explores
            less than ``eps_lanes ** (1 + 2 * i / (N - 1))``, so a few lanes keep exploring.
        eval_envs (int): episodes of the final deterministic evaluation.
        log_every (int): collections between log rows.
        return_window (int): completed episodes averaged into the reported mean return.
        target_return (float): the mean return whose first crossing is reported.

    Examples:
        >>> from torchrl_ext.examples.r2d2_cartpole import R2D2Config
        >>> cfg = R2D2Config(seed=3, burn_in=4, length=8)
        >>> cfg.seed, cfg.burn_in + cfg.length
        (3, 12)
    """

    seed: int = 0
    minutes: float = 5.0
    max_frames: int = 2_000_000
    num_envs: int = 16
    chunk: int = 4
    updates_per_chunk: int = 1
    warmup_frames: int = 2_000
    capacity: int = 100_000
    burn_in: int = 8
    length: int = 16
    n_step: int = 5
    batch_size: int = 32
    hidden: int = 64
    gamma: float = 0.98
    lr: float = 5e-4
    target_period: int = 100
    alpha: float = 0.9
    beta: float = 0.6
    eta: float = 0.9
    eps_start: float = 1.0
    eps_end: float = 0.01
    eps_frames: int = 40_000
    eps_lanes: float = 0.1
    eval_envs: int = 16
    log_every: int = 20
    return_window: int = 32
    target_return: float = 400.0

    def __post_init__(self) -> None:
        for name in ("num_envs", "chunk", "length", "n_step", "batch_size", "hidden"):
            value = getattr(self, name)
            if not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be a positive int, got {name}={value!r}.")
        if not 0.0 < self.gamma <= 1.0:
            raise ValueError(f"gamma must lie in (0, 1], got gamma={self.gamma!r}.")
        if self.burn_in < 0:
            raise ValueError(f"burn_in must be >= 0, got burn_in={self.burn_in!r}.")

    @property
    def window(self) -> int:
        """Records per sampled window: burn-in, learning region and bootstrap."""
        return self.burn_in + self.length + self.n_step - 1


class RecurrentQNet(nn.Module):
    """An LSTM Q-network: scaled input, linear embedding, one-layer ``nn.LSTM``, two-layer head.

    The same LSTM serves the actor (:meth:`step`, one record at a time) and the learner
    (:meth:`window_q`, a ``[B, T]`` window from a stored initial state), so the stored states are
    exactly what the learner computes with the actor's weights.

    Args:
        obs_dim (int): observation size.
        num_actions (int): number of discrete actions.
        hidden (int): embedding, LSTM and head width.
        obs_scale (sequence of float, optional): typical magnitude of each observation entry;
            inputs are divided by it. Defaults to ``None`` (no scaling).

    Examples:
        >>> import torch
        >>> net = RecurrentQNet(2, 2, 8)
        >>> state = net.initial_state(3)
        >>> q, state = net.step(torch.zeros(3, 2), state)
        >>> q.shape, state[0].shape
        (torch.Size([3, 2]), torch.Size([3, 8]))
    """

    def __init__(
        self,
        obs_dim: int,
        num_actions: int,
        hidden: int,
        obs_scale: tuple[float, ...] | None = None,
    ) -> None:
        super().__init__()
        self.hidden = hidden
        scale = torch.ones(obs_dim) if obs_scale is None else torch.tensor(obs_scale)
        if scale.shape != (obs_dim,) or not bool((scale > 0).all()):
            raise ValueError(
                f"obs_scale must hold {obs_dim} positive numbers, got obs_scale={obs_scale!r}."
            )
        self.register_buffer("obs_scale", scale)
        self.linear = nn.Linear(obs_dim, hidden)
        self.lstm = nn.LSTM(hidden, hidden, batch_first=True)
        self.head = nn.Sequential(
            nn.Linear(hidden, hidden), nn.ReLU(), nn.Linear(hidden, num_actions)
        )

    def embed(self, obs: torch.Tensor) -> torch.Tensor:
        """Scaled observations through the linear embedding and a ReLU."""
        return torch.relu(self.linear(obs / self.obs_scale))

    def initial_state(self, batch: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Zero ``(h, c)`` states ``[batch, hidden]``."""
        zeros = torch.zeros(batch, self.hidden)
        return zeros, zeros.clone()

    def step(
        self, obs: torch.Tensor, state: tuple[torch.Tensor, torch.Tensor]
    ) -> tuple[torch.Tensor, tuple[torch.Tensor, torch.Tensor]]:
        """One record per sequence: returns Q-values ``[B, A]`` and the next ``(h, c)``."""
        out, (h, c) = self.lstm(self.embed(obs).unsqueeze(1), (state[0][None], state[1][None]))
        return self.head(out[:, 0]), (h[0], c[0])

    def _run(
        self, x: torch.Tensor, state: tuple[torch.Tensor, torch.Tensor]
    ) -> tuple[torch.Tensor, tuple[torch.Tensor, torch.Tensor]]:
        out, (h, c) = self.lstm(x, (state[0][None].contiguous(), state[1][None].contiguous()))
        return out, (h[0], c[0])

    def burn_in(
        self,
        obs: torch.Tensor,
        is_init: torch.Tensor,
        state: tuple[torch.Tensor, torch.Tensor],
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """The state after records ``0 .. T-1`` of ``obs`` ``[B, T, D]``, started from ``state``.

        The state is zeroed before every record ``t > 0`` that ``is_init`` flags (a new episode,
        or where the window's valid part begins); record 0 starts from ``state``. Only the
        records from each row's last reset on matter, so each row is shifted to start there and
        all rows run in one packed LSTM call.
        """
        size = obs.shape[1]
        columns = torch.arange(size, device=obs.device)
        flagged = is_init.clone()
        flagged[:, 0] = True
        start = torch.where(flagged, columns, 0).amax(1)
        state = _reset(state, start > 0)
        gather = (columns + start.unsqueeze(1)).clamp(max=size - 1)
        x = self.embed(obs.gather(1, gather.unsqueeze(-1).expand(-1, -1, obs.shape[-1])))
        packed = pack_padded_sequence(x, (size - start).cpu(), True, enforce_sorted=False)
        _, state = self._run(packed, state)
        return state

    def window_q(self, sample: TensorDictBase, burn_in: int) -> torch.Tensor:
        """Q-values ``[B, T - burn_in + 1, A]`` of a ``[B, T]`` pad/stop window after burn-in.

        The window starts from the stored state of its first record and burns in without
        gradient. Column ``j`` holds the Q-values of record ``burn_in + j``; the extra last column
        (and, after the window's last valid record, the first invalid column) holds those of the
        last valid record's *next* observation, so ``out[:, j + 1]`` values what follows record
        ``burn_in + j``: its successor within the episode, or the observation it ended on.
        The learning and bootstrap region must not cross an episode start (``"pad"`` and
        ``"stop"`` windows never do).

        Raises:
            ValueError: if ``is_init`` flags a record after column ``burn_in``.
        """
        is_init, valid = sample["is_init"], sample["validity_mask"]
        if bool(is_init[:, burn_in + 1 :].any()):
            raise ValueError(
                "window_q needs windows whose learning and bootstrap records stay in one "
                "episode (episode_boundary='pad' or 'stop'); is_init is set after column "
                f"burn_in={burn_in}."
            )
        obs, next_obs = sample["observation"], sample["next", "observation"]
        state = tuple(sample[key][:, 0] for key in STATE_KEYS)
        if burn_in:
            with torch.no_grad():
                state = self.burn_in(obs[:, :burn_in], is_init[:, :burn_in], state)
            state = _reset(state, is_init[:, burn_in])
        # invalid records after the valid run see the last valid record's next observation
        follow = torch.cat([obs[:, :1], next_obs[:, :-1]], 1)
        inputs = torch.where(valid.unsqueeze(-1), obs, follow)
        inputs = torch.cat([inputs[:, burn_in:], next_obs[:, -1:]], 1)
        out, _ = self._run(self.embed(inputs), state)
        return self.head(out)


def _reset(
    state: tuple[torch.Tensor, torch.Tensor], mask: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """Zeroes the ``(h, c)`` rows where ``mask`` is True."""
    keep = (~mask.reshape(-1, 1)).to(state[0].dtype)
    return state[0] * keep, state[1] * keep


def n_step_targets(
    reward: torch.Tensor,
    terminated: torch.Tensor,
    done: torch.Tensor,
    valid: torch.Tensor,
    next_value: torch.Tensor,
    gamma: float,
    n_step: int,
) -> torch.Tensor:
    """N-step returns of every record of ``[B, T]`` windows, bootstrapped from next values.

    The return of record ``t`` sums ``gamma**k * reward[t + k]`` over the records ``t + k``
    (``k < n_step``) that are valid and inside the window, stopping after the first record whose
    ``done`` is set; it then adds ``gamma**m * next_value[last]``, where ``last`` is the last
    summed record and ``m`` the number of summed records, unless ``last`` *terminated*. A
    truncated record is bootstrapped from its own next observation's value; an invalid (padded
    or unwritten) record ends the sum like the window's end does, bootstrapped from the last
    valid record. Records that are invalid themselves get 0.

    Args:
        reward (torch.Tensor): ``[B, T]`` rewards (``("next", "reward")``).
        terminated (torch.Tensor): ``[B, T]`` bool, the episode ended in a terminal state.
        done (torch.Tensor): ``[B, T]`` bool, the episode ended (terminated or truncated).
        valid (torch.Tensor): ``[B, T]`` bool ``validity_mask``.
        next_value (torch.Tensor): ``[B, T]`` value of each record's next observation.
        gamma (float): discount.
        n_step (int): horizon, ``>= 1``.

    Returns:
        torch.Tensor: ``[B, T]`` targets.

    Examples:
        >>> import torch
        >>> reward = torch.ones(1, 4)
        >>> flags = torch.tensor([[False, True, False, False]])
        >>> valid = torch.ones(1, 4, dtype=torch.bool)
        >>> value = torch.full((1, 4), 10.0)
        >>> n_step_targets(reward, flags, flags, valid, value, 0.5, 2).tolist()
        [[1.5, 1.0, 4.0, 6.0]]
    """
    if not isinstance(n_step, int) or n_step < 1:
        raise ValueError(f"n_step must be a positive int, got n_step={n_step!r}.")
    size = reward.shape[1]
    total = torch.zeros_like(reward)
    bootstrap = torch.zeros_like(reward)
    discount = torch.ones_like(reward)
    running = valid.clone()
    for k in range(n_step):
        if k >= size:
            break
        take = running & _shift(valid, k, False)
        total = total + torch.where(take, discount * _shift(reward, k, 0.0), 0.0)
        discount = discount * gamma
        ends_alive = ~_shift(terminated, k, False)
        value = torch.where(ends_alive, discount * _shift(next_value, k, 0.0), 0.0)
        bootstrap = torch.where(take, value, bootstrap)
        running = take & ~_shift(done, k, False)
    return torch.where(valid, total + bootstrap, 0.0)


def _shift(x: torch.Tensor, k: int, fill: float | bool) -> torch.Tensor:
    """``x[:, t + k]`` at column ``t``, ``fill`` past the end."""
    if k == 0:
        return x
    pad = torch.full((x.shape[0], k), fill, dtype=x.dtype, device=x.device)
    return torch.cat([x[:, k:], pad], 1)


def r2d2_loss(
    online: RecurrentQNet,
    target: RecurrentQNet,
    sample: TensorDictBase,
    gamma: float,
    n_step: int,
    burn_in: int,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Importance-weighted n-step double-Q loss on a ``[B, T]`` window sample.

    Both networks start from the stored states and burn in; the online network picks the
    bootstrap action, the target network values it. The loss covers
    ``learning_mask & validity_mask``.

    Args:
        online (RecurrentQNet): the network being trained.
        target (RecurrentQNet): the periodically copied network that values bootstraps.
        sample (TensorDict): a ``[B, T]`` window sample of a ``Sequence(layout="batch_time")``
            with ``n_step - 1`` bootstrap records and ``"priority_weight"``.
        gamma (float): discount.
        n_step (int): return horizon.
        burn_in (int): the unit's burn-in.

    Returns:
        ``(loss, td_error)``: the scalar loss and ``|TD error|`` per record ``[B, T]`` (0 outside
        the loss mask), ready to be written as priorities.
    """
    q = online.window_q(sample, burn_in)
    region = sample[:, burn_in:]
    valid = region["validity_mask"]
    with torch.no_grad():
        target_q = target.window_q(sample, burn_in)
        greedy = q[:, 1:].detach().argmax(-1, keepdim=True)
        next_value = target_q[:, 1:].gather(-1, greedy).squeeze(-1)
        returns = n_step_targets(
            region["next", "reward"].squeeze(-1),
            region["next", "terminated"].squeeze(-1),
            region["next", "done"].squeeze(-1),
            valid,
            next_value,
            gamma,
            n_step,
        )
    mask = region["learning_mask"] & valid
    taken = q[:, :-1].gather(-1, region["action"].unsqueeze(-1)).squeeze(-1)
    td = torch.where(mask, returns - taken, 0.0)
    weight = sample["priority_weight"][:, :1]
    per_window = td.pow(2).sum(1, keepdim=True) / mask.sum(1, keepdim=True).clamp(min=1)
    loss = 0.5 * (weight * per_window).mean()
    td_error = torch.zeros(sample.shape, dtype=td.dtype)
    td_error[:, burn_in:] = td.detach().abs()
    return loss, td_error


# -- acting -------------------------------------------------------------------------------------


class _Actor:
    """Epsilon-greedy acting in all envs; records ``[num_envs, chunk]`` with stored states."""

    def __init__(self, env, net: RecurrentQNet, generator: torch.Generator) -> None:
        self.env = env
        self.net = net
        self.generator = generator
        self.td = env.reset()
        self.state = net.initial_state(env.num_envs)
        self.episode_return = torch.zeros(env.num_envs)
        self.finished: list[float] = []

    def act(self, obs: torch.Tensor, epsilon: torch.Tensor) -> tuple[torch.Tensor, tuple]:
        q, state = self.net.step(obs, self.state)
        n = obs.shape[0]
        explore = torch.rand(n, generator=self.generator) < epsilon
        random = torch.randint(0, q.shape[-1], (n,), generator=self.generator)
        return torch.where(explore, random, q.argmax(-1)), state

    @torch.no_grad()
    def collect(self, steps: int, epsilon: torch.Tensor) -> TensorDict:
        """Steps every env ``steps`` times (``epsilon`` per env); returns ``[num_envs, steps]``."""
        rows = []
        for _ in range(steps):
            obs = self.td["observation"]
            action, state = self.act(obs, epsilon)
            row = {"observation": obs, "action": action}
            row.update(zip(STATE_KEYS, self.state, strict=True))
            self.td["action"] = action
            out, self.td = self.env.step_and_maybe_reset(self.td)
            nxt = out["next"]
            row.update({("next", k): nxt[k] for k in _NEXT_KEYS})
            rows.append(row)
            self._track(nxt["reward"].squeeze(-1), nxt["done"].squeeze(-1), state)
        keys = rows[0].keys()
        data = {k: torch.stack([r[k] for r in rows], 1) for k in keys}
        return TensorDict(data, [self.env.num_envs, steps])

    def _track(self, reward: torch.Tensor, done: torch.Tensor, state: tuple) -> None:
        self.episode_return += reward
        if done.any():
            self.finished.extend(self.episode_return[done].tolist())
            self.episode_return[done] = 0.0
        keep = (~done).unsqueeze(-1).float()
        self.state = (state[0] * keep, state[1] * keep)


_NEXT_KEYS = ("observation", "reward", "done", "terminated", "truncated")


@torch.no_grad()
def evaluate(net: RecurrentQNet, episodes: int, seed: int) -> float:
    """Mean return of ``episodes`` greedy episodes (one per env, up to 500 steps each).

    Args:
        net (RecurrentQNet): the policy's Q-network.
        episodes (int): episodes, run side by side.
        seed (int): the evaluation env's seed.
    """
    env = _make_env(episodes, seed)
    td = env.reset()
    state = net.initial_state(episodes)
    total = torch.zeros(episodes)
    alive = torch.ones(episodes, dtype=torch.bool)
    while alive.any():
        q, state = net.step(td["observation"], state)
        td["action"] = q.argmax(-1)
        td = env.step(td)["next"]
        total += td["reward"].squeeze(-1) * alive
        alive &= ~td["done"].squeeze(-1)
    return float(total.mean())


def _make_env(num_envs: int, seed: int):
    from torchrl_ext.envs import CartPoleEnv

    return CartPoleEnv(num_envs, seed=seed, observe_velocity=False)


# -- training -----------------------------------------------------------------------------------


@dataclasses.dataclass
class TrainResult:
    """What :func:`train` reports.

    Args:
        log (list of dict): one row per log step (the CSV rows).
        frames_to_target (int or None): frames when the mean return first reached the target.
        seconds_to_target (float or None): wall-clock seconds at that point.
        final_eval (float): mean return of the final greedy evaluation.
        frames (int): frames collected.
        seconds (float): wall-clock seconds of the training loop.
        last_sample (TensorDict): the last sampled window batch (for checks).
        last_loss (float): the last loss.
    """

    log: list[dict]
    frames_to_target: int | None
    seconds_to_target: float | None
    final_eval: float
    frames: int
    seconds: float
    last_sample: TensorDictBase | None
    last_loss: float


def window_unit(cfg: R2D2Config) -> Sequence:
    """The window sample unit: geometry, and R2D2's priority mixture over learning records.

    Args:
        cfg (R2D2Config): window geometry and the mixture's ``eta``.
    """
    return Sequence(
        cfg.length,
        burn_in=cfg.burn_in,
        bootstrap=cfg.n_step - 1,
        layout="batch_time",
        priority_reduction="mixture",
        priority_eta=cfg.eta,
        priority_learning_only=True,
    )


def make_buffer(cfg: R2D2Config) -> TensorDictPrioritizedReplayBuffer:
    """The prioritized window buffer over a time x lane storage (lanes set by the first write).

    Args:
        cfg (R2D2Config): window geometry, capacity, batch size and priority exponents.
    """
    return TensorDictPrioritizedReplayBuffer(
        alpha=cfg.alpha,
        beta=cfg.beta,
        storage=LazyTensorStorage(cfg.capacity, ndim=2),
        sample_unit=window_unit(cfg),
        batch_size=cfg.batch_size,
        priority_key="td_error",
        generator=torch.Generator().manual_seed(cfg.seed + 1),
    )


def epsilons(cfg: R2D2Config, frames: int) -> torch.Tensor:
    """Per-lane exploration rates: a linear decay, floored by a per-lane ladder.

    Examples:
        >>> cfg = R2D2Config(num_envs=3, eps_end=0.0, eps_lanes=0.1)
        >>> eps = epsilons(cfg, frames=10**9)
        >>> [round(e, 4) for e in eps.tolist()]
        [0.1, 0.01, 0.001]
    """
    fraction = min(1.0, frames / max(1, cfg.eps_frames))
    decayed = cfg.eps_start + fraction * (cfg.eps_end - cfg.eps_start)
    lanes = torch.arange(cfg.num_envs, dtype=torch.float64) / max(1, cfg.num_envs - 1)
    floor = cfg.eps_lanes ** (1 + 2 * lanes)
    return floor.clamp(min=decayed).float()


def _make_nets(cfg: R2D2Config) -> tuple[RecurrentQNet, RecurrentQNet]:
    with torch.random.fork_rng():
        torch.manual_seed(cfg.seed)
        online = RecurrentQNet(2, 2, cfg.hidden, CARTPOLE_SCALE)
    target = RecurrentQNet(2, 2, cfg.hidden, CARTPOLE_SCALE)
    target.load_state_dict(online.state_dict())
    target.requires_grad_(False)
    return online, target


class _Learner:
    """Online and target networks, optimizer and the update that writes priorities back."""

    def __init__(self, cfg: R2D2Config) -> None:
        self.cfg = cfg
        self.unit = window_unit(cfg)  # reduces window priorities as the buffer's unit
        self.online, self.target = _make_nets(cfg)
        self.optim = torch.optim.Adam(self.online.parameters(), lr=cfg.lr, fused=True)
        self.updates = 0
        self.loss = math.nan

    def update(self, rb: TensorDictPrioritizedReplayBuffer) -> TensorDictBase:
        """Samples windows, takes one gradient step, updates their anchors' priorities."""
        cfg = self.cfg
        sample = rb.sample()
        loss, td_error = r2d2_loss(
            self.online, self.target, sample, cfg.gamma, cfg.n_step, cfg.burn_in
        )
        self.optim.zero_grad()
        loss.backward()
        nn.utils.clip_grad_norm_(self.online.parameters(), 10.0)
        self.optim.step()
        sample.set("td_error", td_error)
        self.unit.update_priority(rb, sample)
        self.updates += 1
        self.loss = float(loss.detach())
        if self.updates % cfg.target_period == 0:
            self.target.load_state_dict(self.online.state_dict())
        return sample


class _Tracker:
    """Mean return of recent episodes, first crossing of the target, log rows, progress bar."""

    def __init__(self, cfg: R2D2Config, progress: bool) -> None:
        from tqdm import tqdm

        self.cfg = cfg
        self.recent: deque[float] = deque(maxlen=cfg.return_window)
        self.rows: list[dict] = []
        self.hit: tuple[int, float] | None = None
        self.bar = tqdm(total=cfg.max_frames, unit="frames", disable=not progress)
        self.start = time.perf_counter()
        self.iteration = 0

    @property
    def seconds(self) -> float:
        return time.perf_counter() - self.start

    def mean_return(self) -> float:
        return sum(self.recent) / len(self.recent) if self.recent else math.nan

    def record(
        self, frames: int, finished: list[float], learner: _Learner, eps: torch.Tensor
    ) -> None:
        self.recent.extend(finished)
        self.iteration += 1
        mean = self.mean_return()
        if self.hit is None and mean >= self.cfg.target_return:
            self.hit = (frames, self.seconds)
        if self.iteration % self.cfg.log_every:
            return
        seconds = self.seconds
        self.rows.append(
            {
                "frames": frames,
                "seconds": round(seconds, 2),
                "updates": learner.updates,
                "epsilon": round(float(eps.mean()), 4),
                "mean_return": mean,
                "loss": learner.loss,
            }
        )
        self.bar.update(frames - self.bar.n)
        fps = int(frames / seconds)
        self.bar.set_postfix(ret=f"{mean:.0f}", loss=f"{learner.loss:.3f}", fps=fps)


def train(cfg: R2D2Config, progress: bool = True) -> TrainResult:
    """Trains R2D2-style on partially observable CartPole; see the module docstring.

    Collects ``[num_envs, chunk]`` records, writes them, and (after ``warmup_frames``) takes
    ``updates_per_chunk`` learner steps, until ``max_frames`` frames or ``minutes`` of wall
    time; then evaluates the greedy policy. Seconds count from the start of collection.

    Args:
        cfg (R2D2Config): hyperparameters and budgets.
        progress (bool, optional): show a tqdm bar. Defaults to ``True``.

    Returns:
        TrainResult: log rows, first crossing of the target return, final evaluation.
    """
    learner = _Learner(cfg)
    env = _make_env(cfg.num_envs, cfg.seed)
    actor = _Actor(env, learner.online, torch.Generator().manual_seed(cfg.seed + 2))
    rb = make_buffer(cfg)
    tracker = _Tracker(cfg, progress)
    frames, sample = 0, None
    while frames < cfg.max_frames and tracker.seconds < cfg.minutes * 60:
        epsilon = epsilons(cfg, frames)
        rb.extend(actor.collect(cfg.chunk, epsilon))
        frames += cfg.num_envs * cfg.chunk
        if frames >= cfg.warmup_frames:
            for _ in range(cfg.updates_per_chunk):
                sample = learner.update(rb)
        tracker.record(frames, actor.finished, learner, epsilon)
        actor.finished.clear()
    seconds = tracker.seconds
    tracker.bar.close()
    final = evaluate(learner.online, cfg.eval_envs, cfg.seed + 10_000)
    hit_frames, hit_seconds = tracker.hit if tracker.hit else (None, None)
    return TrainResult(
        tracker.rows, hit_frames, hit_seconds, final, frames, seconds, sample, learner.loss
    )


# -- outputs and command line -------------------------------------------------------------------


def write_csv(rows: list[dict], path: Path) -> None:
    """Writes the log rows to ``path``."""
    if not rows:
        return
    with path.open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)


def plot_curve(rows: list[dict], target: float, path: Path) -> None:
    """Saves mean return against frames (and seconds on the top axis) as a PNG."""
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    ax.plot([r["frames"] for r in rows], [r["mean_return"] for r in rows], label="mean return")
    ax.axhline(target, color="gray", linestyle="--", label=f"target {target:g}")
    ax.set_xlabel("frames")
    ax.set_ylabel("mean episode return")
    ax.set_title("R2D2-style LSTM Q-learning, CartPole without velocities")
    ax.legend(loc="lower right")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def check_quick(result: TrainResult, cfg: R2D2Config) -> None:
    """Asserts a finite loss and the window sample's shapes and masks.

    Raises:
        AssertionError: naming the check that failed.
    """
    sample = result.last_sample
    assert sample is not None, "no update ran; raise --minutes or lower warmup_frames"
    assert math.isfinite(result.last_loss), f"loss is not finite: {result.last_loss}"
    expected = (cfg.batch_size, cfg.window)
    assert tuple(sample.shape) == expected, f"sample shape {tuple(sample.shape)} != {expected}"
    learning = sample["learning_mask"]
    assert (learning.sum(1) == cfg.length).all(), "learning_mask must cover `length` records"
    assert learning[:, cfg.burn_in : cfg.burn_in + cfg.length].all(), "learning region misplaced"
    valid = sample["validity_mask"]
    assert valid[:, cfg.burn_in].all(), "every anchor record must be valid"
    assert sample["is_init"][:, 0].all(), "is_init must open every window"
    assert sample["recurrent_state_h"].shape == (*expected, cfg.hidden), "stored state shape"
    lanes = sample["index"][..., 1]
    assert (lanes == lanes[:, :1]).all(), "a window must stay in one env lane"


def _parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--minutes", type=float, default=5.0)
    parser.add_argument("--quick", action="store_true", help="a few iterations plus checks")
    parser.add_argument("--out", type=Path, default=Path("runs") / "r2d2_cartpole")
    parser.add_argument("--no-progress", action="store_true")
    parser.add_argument(
        "--summarize",
        action="store_true",
        help="train nothing: tabulate and plot the seeds already in --out",
    )
    return parser.parse_args(argv)


def quick_config(seed: int) -> R2D2Config:
    """A configuration that runs a few collections and updates in seconds."""
    return R2D2Config(
        seed=seed,
        max_frames=2_048,
        num_envs=8,
        warmup_frames=512,
        capacity=4_096,
        batch_size=8,
        hidden=16,
        eval_envs=4,
        log_every=4,
    )


def summarize(out: Path, marks: tuple[float, ...] = (60, 120, 180, 240, 300)) -> str:
    """Tabulates the per-seed results in ``out`` (Markdown) and plots their curves together.

    Args:
        out (Path): the ``--out`` folder of the training runs.
        marks (tuple of float, optional): wall-clock seconds at which the curve table reads the
            mean return. Defaults to every minute of a 5-minute run.

    Returns:
        str: a results table and a curve table (Markdown); the plot goes to
        ``out / "r2d2_cartpole_seeds.png"``.
    """
    paths = sorted(out.glob("r2d2_cartpole_seed*.json"))
    if not paths:
        raise FileNotFoundError(f"no r2d2_cartpole_seed*.json in out={str(out)!r}; train first.")
    runs = []
    for path in paths:
        with path.with_suffix(".csv").open() as handle:
            rows = [{k: float(v) for k, v in row.items()} for row in csv.DictReader(handle)]
        runs.append((json.loads(path.read_text()), rows))
    _plot_seeds(runs, out / "r2d2_cartpole_seeds.png")
    return _results_table(runs) + "\n\n" + _curve_table(runs, marks)


def _results_table(runs: list[tuple[dict, list[dict]]]) -> str:
    lines = [
        "| seed | frames to 400 | seconds to 400 | final greedy eval | frames | seconds |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for r, _ in runs:
        hit = r["frames_to_target"] is not None
        seconds = f"{r['seconds_to_target']:.0f}" if hit else "-"
        lines.append(
            f"| {r['seed']} | {r['frames_to_target'] if hit else 'not reached'} | {seconds} | "
            f"{r['final_eval']:.1f} | {r['frames']} | {r['seconds']:.0f} |"
        )
    return "\n".join(lines)


def _curve_table(runs: list[tuple[dict, list[dict]]], marks: tuple[float, ...]) -> str:
    """Mean return (last 32 episodes) at the last log row before each mark, per seed."""
    lines = [
        "| seed | " + " | ".join(f"{m:g} s" for m in marks) + " |",
        "| --- |" + " --- |" * len(marks),
    ]
    for r, rows in runs:
        cells = []
        for mark in marks:
            before = [row for row in rows if row["seconds"] <= mark]
            cells.append(f"{before[-1]['mean_return']:.0f}" if before else "-")
        lines.append(f"| {r['seed']} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _plot_seeds(runs: list[tuple[dict, list[dict]]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    for r, rows in runs:
        x = [row["seconds"] for row in rows]
        ax.plot(x, [row["mean_return"] for row in rows], label=f"seed {r['seed']}")
    ax.axhline(400, color="gray", linestyle="--", label="400")
    ax.set_xlabel("wall-clock seconds (1 torch thread)")
    ax.set_ylabel("mean return, last 32 episodes")
    ax.set_title("R2D2-style LSTM Q-learning, CartPole without velocities")
    ax.legend(loc="lower right")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def _save(result: TrainResult, cfg: R2D2Config, out: Path) -> Path:
    """Writes the CSV log, the curve PNG and the summary JSON; returns their common stem."""
    out.mkdir(parents=True, exist_ok=True)
    stem = out / f"r2d2_cartpole_seed{cfg.seed}"
    write_csv(result.log, stem.with_suffix(".csv"))
    plot_curve(result.log, cfg.target_return, stem.with_suffix(".png"))
    summary = {
        "seed": cfg.seed,
        "frames_to_target": result.frames_to_target,
        "seconds_to_target": result.seconds_to_target,
        "final_eval": result.final_eval,
        "frames": result.frames,
        "seconds": result.seconds,
        "config": dataclasses.asdict(cfg),
    }
    stem.with_suffix(".json").write_text(json.dumps(summary, indent=1))
    return stem


def main(argv: list[str] | None = None) -> TrainResult | None:
    """Command-line entry point; returns the training result (``None`` with ``--summarize``)."""
    args = _parse(argv)
    if args.summarize:
        print(summarize(args.out))
        print(f"curves: {args.out / 'r2d2_cartpole_seeds.png'}")
        return None
    torch.set_num_threads(1)
    plain_torchrl_logs()
    cfg = (
        quick_config(args.seed) if args.quick else R2D2Config(seed=args.seed, minutes=args.minutes)
    )
    result = train(cfg, progress=not args.no_progress)
    if args.quick:
        check_quick(result, cfg)
        print(f"quick checks passed: finite loss {result.last_loss:.4f}, windows, masks, states")
    stem = _save(result, cfg, args.out)
    hit = (
        f"{result.frames_to_target} frames, {result.seconds_to_target:.1f} s"
        if result.frames_to_target is not None
        else "not reached"
    )
    print(
        f"seed {cfg.seed}: mean return {cfg.target_return:g} {hit}; "
        f"final greedy eval {result.final_eval:.1f} over {cfg.eval_envs} episodes; "
        f"{result.frames} frames in {result.seconds:.1f} s; outputs {stem}.csv/.png/.json"
    )
    return result


if __name__ == "__main__":
    main()
