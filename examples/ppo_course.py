"""Feed-forward PPO that learns to drive procedurally generated courses (CourseEnv).

    python examples/ppo_course.py [--seeds 0 1 2] [--frames N] [--device cuda] [--quick]

Every episode that starts right after a course regeneration drives a course nobody has seen
before; the learning curve is the mean return of the last ``return_window`` such episodes. The
pipeline, top to bottom:

1. ``CourseEnv`` with its default auto-reset: a finished lap, the step limit or an unusable course
   end the episode with a **new course**, a crash respawns the car on the same one. Wrapped in a
   ``TransformedEnv`` with ``InitTracker``, ``StepCounter`` and a fixed ``ObservationNorm``
   (range readings and speed over their maxima, checkpoint distance over the checkpoint spacing).
2. An MLP actor (a Gaussian over ``(steer, throttle)`` with a learned, state-independent scale;
   the env clips samples to ``[-1, 1]``) and an MLP critic.
3. TorchRL's ``Collector`` gathers ``[num_envs, steps]`` batches; ``RecurrentGAE`` with the
   feed-forward critic writes ``advantage`` and ``value_target`` (bootstrapping through
   step-limit truncations).
4. ``EpisodeTracker`` follows each env across batches and records every completed episode: its
   return, checkpoints passed, whether it finished the lap, its length, whether its course was
   fresh.
5. TorchRL's ``ClipPPOLoss`` on shuffled flat minibatches; learning rate and clip range decay
   linearly to zero, each network's gradient is clipped on its own.

Before and after training the policy's mode drives one episode on each of ``eval_episodes``
courses of a seed no training env starts on (logged as ``initial_eval_*`` and ``eval_*``).
"""

from __future__ import annotations

import dataclasses
import math
from collections import deque

import runs
import torch
from tensordict import TensorDictBase
from tensordict.nn import TensorDictModule
from torch import nn
from torchrl.collectors import Collector
from torchrl.envs import Compose, InitTracker, ObservationNorm, StepCounter, TransformedEnv
from torchrl.envs.utils import ExplorationType, set_exploration_type
from torchrl.modules import IndependentNormal, ProbabilisticActor
from torchrl.objectives import ClipPPOLoss

from torchrl_ext.envs import CarConfig, CourseEnv, CourseParams
from torchrl_ext.objectives import RecurrentGAE


@dataclasses.dataclass
class Args:
    """The run's arguments: each field is an option (``--minibatch-size 512``)."""

    seed: int = 0
    """seed of the envs (env i starts on course seed + i), the networks and the minibatch order"""
    frames: int = 491_520
    """frames to collect; learning rate and clip range decay to zero over them"""
    num_envs: int = 64
    """parallel envs"""
    steps: int = 64
    """steps per env per batch"""
    hidden: int = 64
    """width of the two tanh hidden layers of actor and critic"""
    lr: float = 1e-3
    """initial Adam learning rate"""
    gamma: float = 0.99
    """discount"""
    lmbda: float = 0.95
    """GAE lambda"""
    epochs: int = 4
    """passes over each batch"""
    minibatch_size: int = 1024
    """transitions per minibatch (a batch's remainder that fills no minibatch is skipped)"""
    clip: float = 0.2
    """initial PPO clip range"""
    entropy_coeff: float = 0.0
    """entropy bonus weight"""
    critic_coeff: float = 0.5
    """value-loss weight"""
    max_grad_norm: float = 0.5
    """gradient-norm clip, per network"""
    init_scale: float = 0.6
    """initial standard deviation of the action distribution"""
    max_steps: int = 300
    """step limit of an episode (a truncation, then a new course)"""
    return_window: int = 100
    """completed fresh-course episodes averaged into the learning curve"""
    eval_episodes: int = 64
    """unseen courses of the deterministic evaluations, one episode each"""

    def __post_init__(self) -> None:
        counts = ["frames", "num_envs", "steps", "hidden", "epochs", "minibatch_size"]
        counts += ["max_steps", "return_window", "eval_episodes"]
        runs.check_fields(
            self,
            counts=counts,
            positive=["lr", "clip", "max_grad_norm", "init_scale"],
            non_negative=["entropy_coeff", "critic_coeff"],
            fractions=["gamma", "lmbda"],
        )
        if self.frames < self.num_envs * self.steps:
            raise ValueError(
                f"frames must be at least one batch (num_envs * steps = "
                f"{self.num_envs * self.steps}), got frames={self.frames}."
            )

    @property
    def eval_seed(self) -> int:
        """Course seed of the first evaluation env: ``2**40 + seed * eval_episodes``.

        Eval env ``i`` starts on course seed ``eval_seed + i``: courses no training env starts
        on, disjoint between runs of different seeds.
        """
        return EVAL_SEED + self.seed * self.eval_episodes


#: What ``--quick`` changes: three batches of 16 envs x 32 steps, short episodes, fewer epochs.
QUICK = dict(
    frames=3 * 16 * 32,
    num_envs=16,
    steps=32,
    epochs=2,
    minibatch_size=256,
    eval_episodes=4,
    max_steps=100,
)

#: Course seeds from here on are the evaluations' (see ``Args.eval_seed``).
EVAL_SEED = 1 << 40
#: CourseEnv's range readings; the observation is these, speed, heading error, checkpoint distance.
NUM_RAYS = 5
#: What the curve and the evaluations average over episodes.
METRICS = ("return", "checkpoints", "finished", "length")


# ---------------------------------------------------------------------------- env and agent
def make_env(args: Args, num_envs: int, seed: int, device="cpu") -> TransformedEnv:
    """CourseEnv (default auto-reset) with ``is_init``, step counts and a fixed scaling."""
    base = CourseEnv(
        num_envs, seed=seed, num_rays=NUM_RAYS, max_steps=args.max_steps, device=device
    )
    transforms = Compose(
        InitTracker(),
        StepCounter(),
        ObservationNorm(
            loc=torch.zeros(NUM_RAYS + 3),
            scale=observation_scale(base.car, CourseParams()),
            in_keys=["observation"],
        ),
    )
    return TransformedEnv(base, transforms.to(device))


def observation_scale(car: CarConfig, params: CourseParams) -> torch.Tensor:
    """Factors that bring the observation to order 1.

    Range readings and speed over their maxima, the checkpoint distance over the checkpoint
    spacing; the heading error (radians) is kept.
    """
    rays = [1.0 / car.max_range] * NUM_RAYS
    return torch.tensor([*rays, 1.0 / car.max_speed, 1.0, 1.0 / params.checkpoint_spacing])


def mlp(in_features: int, out_features: int, hidden: int) -> nn.Sequential:
    """Two tanh hidden layers of width ``hidden``, then a linear output."""
    return nn.Sequential(
        nn.Linear(in_features, hidden),
        nn.Tanh(),
        nn.Linear(hidden, hidden),
        nn.Tanh(),
        nn.Linear(hidden, out_features),
    )


class GaussianHead(nn.Module):
    """An MLP mean (last layer scaled by 0.01) and a learned, state-independent log std."""

    def __init__(self, obs_dim: int, act_dim: int, hidden: int, init_scale: float) -> None:
        super().__init__()
        self.mean = mlp(obs_dim, act_dim, hidden)
        self.log_std = nn.Parameter(torch.full((act_dim,), math.log(init_scale)))
        with torch.no_grad():
            self.mean[-1].weight.mul_(0.01)
            self.mean[-1].bias.zero_()

    def forward(self, observation: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Returns ``(loc, scale)`` of the action distribution."""
        loc = self.mean(observation)
        return loc, self.log_std.exp().expand_as(loc)


def make_agent(args: Args) -> tuple[ProbabilisticActor, TensorDictModule]:
    """Gaussian MLP actor over ``(steer, throttle)`` and MLP critic."""
    obs_dim = NUM_RAYS + 3
    head = GaussianHead(obs_dim, 2, args.hidden, args.init_scale)
    actor = ProbabilisticActor(
        TensorDictModule(head, in_keys=["observation"], out_keys=["loc", "scale"]),
        in_keys=["loc", "scale"],
        distribution_class=IndependentNormal,
        return_log_prob=True,
    )
    critic = TensorDictModule(
        mlp(obs_dim, 1, args.hidden), in_keys=["observation"], out_keys=["state_value"]
    )
    return actor, critic


# ---------------------------------------------------------------------------- learning
def make_loss(args: Args, actor, critic) -> ClipPPOLoss:
    """ClipPPOLoss with RecurrentGAE (feed-forward critic) as its value estimator.

    ``functional=False``: PPO has no target networks, and TorchRL's functional default swaps the
    parameters in and out around every call, for the same numbers.
    """
    loss = ClipPPOLoss(
        actor,
        critic,
        clip_epsilon=args.clip,
        entropy_bonus=args.entropy_coeff > 0,
        entropy_coeff=args.entropy_coeff if args.entropy_coeff > 0 else None,
        critic_coeff=args.critic_coeff,
        loss_critic_type="l2",
        normalize_advantage=True,
        functional=False,
    )
    loss.make_value_estimator(RecurrentGAE(args.gamma, args.lmbda, value_network=critic))
    return loss


def make_optimizer(args: Args, loss: ClipPPOLoss) -> torch.optim.Optimizer:
    """Adam with one parameter group per network, so each network's gradient is clipped alone.

    ``foreach=True`` gives the per-parameter loop's numbers on the CPU, in less time.
    """
    groups = [
        {"params": list(loss.actor_network.parameters())},
        {"params": list(loss.critic_network.parameters())},
    ]
    return torch.optim.Adam(groups, lr=args.lr, eps=1e-5, foreach=True)


def anneal(args: Args, loss: ClipPPOLoss, optim, frames: int) -> float:
    """Sets learning rate and clip range on their linear schedules; returns the fraction left."""
    left = max(0.0, 1.0 - frames / args.frames)
    for group in optim.param_groups:
        group["lr"] = args.lr * left
    loss.clip_epsilon.fill_(args.clip * left)
    return left


def loss_inputs(batch: TensorDictBase, loss: ClipPPOLoss) -> TensorDictBase:
    """The entries the loss reads: cutting minibatches from these costs less, same numbers."""
    keys = loss.tensor_keys
    selected = [*loss.actor_network.in_keys, *loss.critic_network.in_keys]
    selected += [keys.action, keys.sample_log_prob, keys.advantage, keys.value_target]
    return batch.select(*selected)


def update(args: Args, batch, loss: ClipPPOLoss, optim, generator) -> dict[str, float]:
    """PPO epochs over shuffled flat minibatches; returns the last minibatch's losses."""
    flat = loss_inputs(batch, loss).reshape(-1)
    size = min(args.minibatch_size, flat.numel())
    for _ in range(args.epochs):
        order = torch.randperm(flat.numel(), generator=generator)
        for start in range(0, flat.numel() - size + 1, size):
            out = loss(flat[order[start : start + size]])
            total = out["loss_objective"] + out["loss_critic"]
            if "loss_entropy" in out.keys():
                total = total + out["loss_entropy"]
            optim.zero_grad(set_to_none=True)
            total.backward()
            for group in optim.param_groups:
                torch.nn.utils.clip_grad_norm_(group["params"], args.max_grad_norm)
            optim.step()
    return {k: float(v.detach().mean()) for k, v in out.items() if k.startswith("loss_")}


# ---------------------------------------------------------------------------- measuring
class EpisodeTracker:
    """Follows every env across batches and records each completed episode.

    An episode is on a *fresh* course when it started right after a regeneration (or at the
    first reset): CourseEnv regenerates after a finished lap, a truncation or an invalid course,
    and respawns on the same course after a crash (``out_of_bounds`` alone). Episodes that ended
    on an invalid course (``valid`` False) are not recorded. Its state is :meth:`state_dict`.

    Args:
        num_envs (int): rows of each batch.
        laps (int, optional): laps that finish an episode (the env's ``laps``). Defaults to 1.
    """

    KEYS = ("reward", "done", "truncated", "out_of_bounds", "checkpoints_passed", "laps", "valid")

    def __init__(self, num_envs: int, laps: int = 1) -> None:
        self.num_envs, self.laps = num_envs, laps
        self.returns = torch.zeros(num_envs, dtype=torch.float64)
        self.checkpoints = torch.zeros(num_envs, dtype=torch.float64)
        self.lengths = torch.zeros(num_envs, dtype=torch.float64)
        self.fresh = torch.ones(num_envs, dtype=torch.bool)

    def update(self, batch: TensorDictBase) -> list[dict]:
        """Accumulates a ``[num_envs, T]`` batch; returns the episodes that ended in it.

        Each episode is a dict: ``return``, ``checkpoints``, ``finished`` (1.0 if the lap was
        completed), ``length`` (steps), ``fresh`` and ``env`` (the row), in time order.
        """
        if batch.batch_size[0] != self.num_envs:
            raise ValueError(
                f"batch must have num_envs={self.num_envs} rows, got batch_size={batch.batch_size}."
            )
        nxt = {k: batch["next", k].squeeze(-1) for k in self.KEYS}
        episodes = []
        for t in range(batch.batch_size[1]):
            episodes += self._step({k: v[:, t] for k, v in nxt.items()})
        return episodes

    def _step(self, step: dict[str, torch.Tensor]) -> list[dict]:
        """One step of every env: accumulates, and closes the episodes that ended."""
        self.returns += step["reward"].double()
        self.checkpoints += step["checkpoints_passed"].double()
        self.lengths += 1.0
        done, finished = step["done"], step["laps"] >= self.laps
        episodes = [
            {
                "return": float(self.returns[i]),
                "checkpoints": float(self.checkpoints[i]),
                "finished": float(finished[i]),
                "length": float(self.lengths[i]),
                "fresh": bool(self.fresh[i]),
                "env": i,
            }
            for i in done.nonzero().flatten().tolist()
            if bool(step["valid"][i])
        ]
        crash_only = step["out_of_bounds"] & ~step["truncated"] & ~finished & step["valid"]
        self.fresh = torch.where(done, ~crash_only, self.fresh)
        for total in (self.returns, self.checkpoints, self.lengths):
            total[done] = 0.0
        return episodes

    def state_dict(self) -> dict[str, torch.Tensor]:
        """The running sums and fresh flags, to save in a checkpoint."""
        names = ("returns", "checkpoints", "lengths", "fresh")
        return {name: getattr(self, name).clone() for name in names}

    def load_state_dict(self, state: dict[str, torch.Tensor]) -> None:
        """Continues from what :meth:`state_dict` returned."""
        for name, value in state.items():
            setattr(self, name, value.clone())


def window_means(episodes) -> dict[str, float]:
    """Means of ``return``, ``checkpoints``, ``finished``, ``length`` over episodes (NaN if none).

    Examples:
        >>> window_means([{"return": 1.0, "checkpoints": 2.0, "finished": 0.0, "length": 9.0},
        ...               {"return": 3.0, "checkpoints": 4.0, "finished": 1.0, "length": 5.0}])
        {'return': 2.0, 'checkpoints': 3.0, 'finished': 0.5, 'length': 7.0}
    """
    if not episodes:
        return dict.fromkeys(METRICS, math.nan)
    return {m: sum(e[m] for e in episodes) / len(episodes) for m in METRICS}


def evaluate(args: Args, actor, device="cpu") -> dict[str, float]:
    """The mode of the policy drives one episode on each of ``eval_episodes`` unseen courses.

    Eval env ``i`` starts on course seed ``args.eval_seed + i``; the envs run until each has
    ended its first episode on a valid course (an env whose course is unusable moves on to its
    next course). Returns the :func:`window_means` of those episodes.
    """
    n = args.eval_episodes
    env = make_env(args, n, args.eval_seed, device)
    tracker = EpisodeTracker(n)
    results: dict[int, dict] = {}
    td = env.reset()
    with torch.no_grad(), set_exploration_type(ExplorationType.DETERMINISTIC):
        while len(results) < n:
            td, next_root = env.step_and_maybe_reset(actor(td))
            for episode in tracker.update(td.unsqueeze(-1).cpu()):
                results.setdefault(episode["env"], episode)
            td = next_root
    env.close()
    return window_means(list(results.values()))


def check_batch(args: Args, batch, first: bool) -> None:
    """Asserts the shapes and masks the update relies on (``--quick``).

    Observations finite everywhere and exactly zero wherever the course is invalid (CourseEnv's
    ``valid`` gating), rewards zero there, ``is_init`` at the episode starts, GAE finite.
    """
    n, t = args.num_envs, args.steps
    assert batch.batch_size == (n, t), batch.batch_size
    assert batch["action"].shape == (n, t, 2), batch["action"].shape
    for key in ("advantage", "value_target", "state_value", ("next", "reward")):
        assert batch[key].shape == (n, t, 1), (key, batch[key].shape)
        assert bool(torch.isfinite(batch[key]).all()), key
    for prefix in ((), ("next",)):
        obs = batch[(*prefix, "observation")]
        assert bool(torch.isfinite(obs).all()), "no NaN observation may reach the policy"
        invalid = ~batch[(*prefix, "valid")].squeeze(-1)
        assert bool((obs[invalid] == 0).all()), "invalid courses must observe zeros"
    assert bool((batch["next", "reward"][~batch["next", "valid"]] == 0).all()), "invalid: reward 0"
    is_init = batch["is_init"].squeeze(-1)
    assert torch.equal(is_init, batch["step_count"].squeeze(-1) == 0), "is_init: episode starts"
    assert torch.equal(is_init[:, 1:], batch["next", "done"].squeeze(-1)[:, :-1])
    assert not first or bool(is_init[:, 0].all()), "every env starts an episode"


def log_evaluation(recorder: runs.Recorder, prefix: str, means: dict[str, float]) -> None:
    """Logs an evaluation's means as ``<prefix>_return`` ... at the recorder's frame count."""
    for name, value in means.items():
        recorder.logger.log_scalar(f"{prefix}_{name}", value, step=recorder.frames)


# ---------------------------------------------------------------------------- training
def train(args: Args, run: runs.Run) -> runs.Result:
    """Trains, evaluates and logs one run (torch's global generator seeded by the caller)."""
    device = torch.device(run.device)
    watch = runs.Stopwatch()
    env = make_env(args, args.num_envs, args.seed, device)
    actor, critic = make_agent(args)
    actor, critic = actor.to(device), critic.to(device)
    loss = make_loss(args, actor, critic)
    optim = make_optimizer(args, loss)
    initial = None if run.resume else evaluate(args, actor, device)
    collector = Collector(
        env, actor, frames_per_batch=args.num_envs * args.steps, total_frames=-1, device=device
    )
    tracker = EpisodeTracker(args.num_envs)
    generator = torch.Generator().manual_seed(args.seed)  # the minibatch order
    recorder = runs.Recorder(run, args, curve=[], laps=[], recent=[], fresh_episodes=0)
    if run.resume:
        runs.load_training_state(recorder.state, loss, optim, env, collector)
        generator.set_state(recorder.state["generator"])
        tracker.load_state_dict(recorder.state["tracker"])
    else:
        log_evaluation(recorder, "initial_eval", initial)
    counters = recorder.counters
    recent = deque(counters["recent"], maxlen=args.return_window)

    def state() -> dict:
        return {
            **runs.training_state(loss, optim, env, collector),
            "generator": generator.get_state(),
            "tracker": tracker.state_dict(),
        }

    batches = iter(collector)
    while recorder.frames < args.frames:
        with watch("collect"):
            batch = next(batches)
        with watch("gae"):
            loss.value_estimator(batch)
        if run.quick:
            check_batch(args, batch, first=recorder.frames == 0)
        fresh = [e for e in tracker.update(batch.cpu()) if e["fresh"]]
        recent.extend(fresh)
        counters["recent"] = list(recent)
        counters["fresh_episodes"] += len(fresh)
        left = anneal(args, loss, optim, recorder.frames)
        frames = recorder.frames + batch.numel()
        with watch("update"):
            losses = update(args, batch, loss, optim, generator)
        if run.quick:
            assert all(math.isfinite(v) for v in losses.values()), losses
        means = window_means(recent)
        counters["curve"].append((frames, means["return"]))
        counters["laps"].append((frames, 100 * means["finished"]))
        row = {f"mean_{k}": v for k, v in means.items()}
        row.update(episodes_in_window=len(recent), fresh_episodes=counters["fresh_episodes"])
        row.update(lr=args.lr * left, clip=args.clip * left, **losses)
        recorder.log(frames, row, state)
    evaluation = evaluate(args, actor, device)
    log_evaluation(recorder, "eval", evaluation)
    title = f"PPO on CourseEnv: last {args.return_window} episodes on fresh courses"
    result = recorder.finish(
        state, counters["curve"], final_eval=evaluation["return"], title=title, timings=watch
    )
    collector.shutdown()
    laps = {f"seed {args.seed}": counters["laps"]}
    runs.plot_curves(run.out / "laps_finished.png", laps, None, title, "laps finished (%)")
    return result


def load_policy(args: Args, state: dict, device) -> ProbabilisticActor:
    """The actor of a checkpoint: reads ``observation``, writes ``action``."""
    actor, critic = make_agent(args)
    loss = make_loss(args, actor.to(device), critic.to(device))
    loss.load_state_dict(state["loss"])
    return actor


def acting_env(args: Args, num_envs: int, seed: int, device) -> TransformedEnv:
    """An env the loaded policy acts in: the training env's transforms (course seed ``seed``)."""
    return make_env(args, num_envs, seed, device)


if __name__ == "__main__":
    runs.main(Args, train, quick=QUICK)
