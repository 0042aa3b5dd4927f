"""Recurrent multi-agent PPO on the signalling game, one actor and one critic per agent group.

Run it with ``python -m torchrl_ext.examples signalling [--seeds 0 1 2] [--listener lstm|mlp]
[--frames N] [--device cpu] [--save-every N] [--resume DIR] [KEY=VALUE ...]``.

The pipeline, top to bottom:

1. :class:`~torchrl_ext.envs.SignallingEnv` (``V = 8`` targets, the token shown once, the answer
   due ``delay = 2`` steps later) in TorchRL's multi-agent layout: a ``"speaker"`` and a
   ``"listener"`` group, each with its own observation, action and reward, and a done shared at
   the root. ``InitTracker`` adds the shared ``is_init``; the LSTMs' state primers add each
   group's recurrent states under that group.
2. Per group, an actor (``LSTMModule``, a small head, a categorical over ``V``) and a critic
   (its own ``LSTMModule`` and value head), each reading only its group's observation. With
   ``--listener mlp`` the listener's actor and critic are feed-forward: it cannot remember the
   token, and stays at chance (``1 / V``).
3. :class:`~torchrl.collectors.Collector` gathers ``[num_envs, steps]`` batches holding both
   groups, with every LSTM's state stored at each step.
4. One :class:`~torchrl_ext.objectives.RecurrentGAE` per group, keys set to that group's
   reward, value, advantage and value target and to the shared ``done``/``terminated``: each
   recomputes its group's critic over whole rows from the stored states and cuts traces at the
   shared episode ends.
5. :class:`~torchrl_ext.data.minibatches.EnvMajorMinibatches` hands out whole env rows (both
   groups at once), and one :class:`~torchrl.objectives.ClipPPOLoss` per group, keys set per
   group, takes the gradient steps on the sum of the two losses.

A run reports the success rate (answers equal to the target) over the last
``success_window`` episodes, the frames and seconds at which it first reaches
``target_success``, and a final evaluation of the policies' modes on fresh episodes. It logs
through a :mod:`torchrl.record.loggers` logger (``<run folder>/scalars/*.csv`` by default), draws
``learning_curve.png`` and, every ``--save-every`` frames, saves the networks, the optimizer,
the env and collector state, the random generators and its counters; ``--resume DIR`` continues
bitwise.
Randomness: the envs take the seed; network initialisation and the collector's action draws use
torch's global generator, seeded inside :func:`torch.random.fork_rng` (the caller's RNG state is
left as it was); minibatch order comes from its own :class:`torch.Generator`.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import time
from typing import Any

import torch
from tensordict import TensorDictBase
from tensordict.nn import TensorDictModule, TensorDictSequential
from torch import nn
from torchrl.envs import Compose, ExplorationType, InitTracker, TransformedEnv, set_exploration_type
from torchrl.modules import ProbabilisticActor, set_recurrent_mode
from torchrl.objectives import ClipPPOLoss

from torchrl_ext.data.minibatches import EnvMajorMinibatches
from torchrl_ext.envs import SignallingEnv
from torchrl_ext.examples import _checkpointing, _common, _configs, _ppo, _run_folder
from torchrl_ext.modules import LSTMModule
from torchrl_ext.objectives import RecurrentGAE

GROUPS = ("speaker", "listener")

# The run's config, its defaults and its --quick overrides live in the torch-free _configs, so
# that the command line builds the config, and refuses a bad one, before importing this module.
Config = _configs.MAPPOSignallingConfig
SIZE, LEARNING = _configs.MAPPO_SIGNALLING_SIZE, _configs.MAPPO_SIGNALLING_LEARNING
WEIGHTS, QUICK = _configs.MAPPO_SIGNALLING_WEIGHTS, _configs.MAPPO_SIGNALLING_QUICK
Memory = _configs.PolicyKind


@dataclasses.dataclass
class Result(_common.TargetResult):
    """Outcome of one run.

    The fields of :class:`~torchrl_ext.examples._common.TargetResult` (``config`` to ``out``;
    the target is ``target_success``, ``final_eval`` the success rate of the actors' modes on
    ``eval_episodes`` fresh episodes), then:

    Args:
        timings (dict): seconds spent per section of this process (collection, GAE, updates).
        curve (list): ``(frames, success_rate)`` after each batch.
    """

    timings: dict[str, float]
    curve: list[tuple[int, float]]


# ---------------------------------------------------------------------------- model
def state_keys(group: str, role: str) -> tuple[tuple[str, str], tuple[str, str]]:
    """The keys of one LSTM's ``(h, c)`` states, inside its group."""
    return (group, f"rs_{role}_h"), (group, f"rs_{role}_c")


def make_trunk(cfg: Config, group: str, role: str, obs_dim: int, memory: Memory) -> Any:
    """An ``LSTMModule`` (or a ReLU layer) reading the group's observation into its embedding."""
    obs, out = (group, "observation"), (group, f"{role}_embed")
    if memory == "lstm":
        h, c = state_keys(group, role)
        return LSTMModule(
            input_size=obs_dim,
            hidden_size=cfg.hidden,
            in_keys=[obs, h, c],
            out_keys=[out, ("next", *h), ("next", *c)],
        )
    return TensorDictModule(
        nn.Sequential(nn.Linear(obs_dim, cfg.hidden), nn.ReLU()), in_keys=[obs], out_keys=[out]
    )


def make_head(cfg: Config, group: str, role: str, out_features: int, out_key: str) -> Any:
    """A tanh hidden layer on the group's ``role`` embedding, then a linear output."""
    net = nn.Sequential(
        nn.Linear(cfg.hidden, cfg.hidden), nn.Tanh(), nn.Linear(cfg.hidden, out_features)
    )
    return TensorDictModule(net, in_keys=[(group, f"{role}_embed")], out_keys=[(group, out_key)])


@dataclasses.dataclass
class Agent:
    """One group's actor and critic, and their trunks (whose states the env must carry)."""

    actor: ProbabilisticActor
    critic: TensorDictSequential

    @property
    def trunks(self) -> list[Any]:
        """The actor's and the critic's first modules."""
        return [self.actor.module[0][0], self.critic[0]]

    def to(self, device: torch.device | str) -> Agent:
        """Moves actor and critic to ``device``; returns ``self``."""
        self.actor.to(device)
        self.critic.to(device)
        return self


def make_agent(cfg: Config, group: str, obs_dim: int, memory: Memory) -> Agent:
    """The group's actor (categorical over ``V``) and critic, each with its own trunk."""
    actor = ProbabilisticActor(
        TensorDictSequential(
            make_trunk(cfg, group, "actor", obs_dim, memory),
            make_head(cfg, group, "actor", cfg.vocab, "logits"),
        ),
        in_keys={"logits": (group, "logits")},
        out_keys=[(group, "action")],
        distribution_class=torch.distributions.Categorical,
        return_log_prob=True,
        log_prob_key=(group, "action_log_prob"),
    )
    critic = TensorDictSequential(
        make_trunk(cfg, group, "critic", obs_dim, memory),
        make_head(cfg, group, "critic", 1, "state_value"),
    )
    return Agent(actor, critic)


def make_agents(cfg: Config) -> dict[str, Agent]:
    """Both groups' agents; the speaker always remembers, the listener per ``cfg.listener``."""
    dims = {"speaker": cfg.vocab, "listener": cfg.vocab + 1}
    memory = {"speaker": "lstm", "listener": cfg.listener}
    return {g: make_agent(cfg, g, dims[g], memory[g]) for g in GROUPS}


def collection_policy(agents: dict[str, Agent]) -> TensorDictSequential:
    """Both actors, plus the critics' LSTMs so their states are stored for RecurrentGAE."""
    modules = [agents[g].actor for g in GROUPS]
    modules += [a.critic[0] for a in agents.values() if isinstance(a.critic[0], LSTMModule)]
    return TensorDictSequential(*modules)


def make_env(
    cfg: Config,
    num_envs: int,
    seed: int,
    agents: dict[str, Agent],
    device: torch.device | str = "cpu",
) -> TransformedEnv:
    """The game with ``is_init`` and every LSTM's state primer (states kept in their groups)."""
    base = SignallingEnv(num_envs, device, seed, vocab=cfg.vocab, delay=cfg.delay)
    primers = [
        trunk.make_tensordict_primer()
        for agent in agents.values()
        for trunk in agent.trunks
        if isinstance(trunk, LSTMModule)
    ]
    return TransformedEnv(base, Compose(InitTracker(), *primers).to(device))


# ---------------------------------------------------------------------------- learning
def make_gae(cfg: Config, group: str, agent: Agent) -> RecurrentGAE:
    """The group's RecurrentGAE: its own reward and value keys, the shared done."""
    stored = isinstance(agent.critic[0], LSTMModule)
    gae = RecurrentGAE(
        cfg.gamma,
        cfg.lmbda,
        value_network=agent.critic,
        initial_state="stored" if stored else "zeros",
    )
    return gae.set_keys(**group_keys(group))


def group_keys(group: str) -> dict[str, Any]:
    """``set_keys`` arguments of one group: its own reward and value keys, the shared flags."""
    return {
        "reward": (group, "reward"),
        "value": (group, "state_value"),
        "advantage": (group, "advantage"),
        "value_target": (group, "value_target"),
        "done": "done",
        "terminated": "terminated",
    }


def make_loss(cfg: Config, group: str, agent: Agent) -> ClipPPOLoss:
    """The group's ClipPPOLoss, reading that group's action, log-prob and advantage."""
    loss = ClipPPOLoss(
        agent.actor,
        agent.critic,
        clip_epsilon=cfg.clip,
        entropy_bonus=True,
        entropy_coeff=cfg.entropy_coeff,
        critic_coeff=cfg.critic_coeff,
        loss_critic_type="l2",
        normalize_advantage=True,
        functional=False,  # no target networks: call the networks as they are
    )
    loss.set_keys(
        action=(group, "action"), sample_log_prob=(group, "action_log_prob"), **group_keys(group)
    )
    return loss


def make_optimizer(cfg: Config, agents: dict[str, Agent]) -> torch.optim.Optimizer:
    """Adam with one parameter group per agent group, so each group's gradient is clipped alone."""
    groups = [
        {"params": [*agents[g].actor.parameters(), *agents[g].critic.parameters()]} for g in GROUPS
    ]
    return torch.optim.Adam(groups, lr=cfg.lr, foreach=True)  # the loop's numbers, faster


def update(
    cfg: Config,
    batch: TensorDictBase,
    losses: dict[str, ClipPPOLoss],
    optim: torch.optim.Optimizer,
    generator: torch.Generator,
) -> dict[str, float]:
    """PPO epochs over env-major minibatches; one gradient step on the sum of the group losses.

    Returns the last minibatch's losses and each group's ``first_max_ratio`` (the largest
    probability ratio before any step: 1 when the actors replay the stored states exactly).
    """
    stats: dict[str, float] = {}
    inputs = _ppo.loss_inputs(batch, *losses.values())
    for minibatch in EnvMajorMinibatches(
        inputs, cfg.envs_per_minibatch, epochs=cfg.epochs, generator=generator
    ):
        total = 0.0
        for group, loss in losses.items():
            with set_recurrent_mode(True):
                out = loss(minibatch)
            stats.setdefault(f"{group}_first_max_ratio", float(out["max_ratio"]))
            total = total + _ppo.ppo_total(out)
            stats.update(
                {f"{group}_{k}": float(v.detach()) for k, v in out.items() if k.startswith("loss_")}
            )
        _common.gradient_step(total, optim, cfg.max_grad_norm)
    return stats


def successes(batch: TensorDictBase) -> torch.Tensor:
    """1.0 / 0.0 per episode that ended in ``batch``: whether the listener named the target.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> done = torch.tensor([[False, True], [False, True]]).unsqueeze(-1)
        >>> reward = torch.tensor([[0.0, 1.0], [0.0, 0.0]]).unsqueeze(-1)
        >>> batch = TensorDict({"next": {"done": done, "listener": {"reward": reward}}}, [2, 2])
        >>> successes(batch).tolist()
        [1.0, 0.0]
    """
    return _common.completed_returns(batch, ("next", "listener", "reward"))


def evaluate(cfg: Config, agents: dict[str, Agent], device: torch.device | str = "cpu") -> float:
    """Success rate of the actors' modes on ``cfg.eval_episodes`` fresh episodes (one per env)."""
    env = make_env(cfg, cfg.eval_episodes, cfg.eval_seed, agents, device)
    policy = TensorDictSequential(*(agents[g].actor for g in GROUPS))
    with torch.no_grad(), set_exploration_type(ExplorationType.DETERMINISTIC):
        data = env.rollout(cfg.delay + 2, policy, break_when_any_done=False)
    env.close()
    return float(successes(data).mean())


def check_batch(cfg: Config, batch: TensorDictBase, first: bool) -> None:
    """Asserts the layout and masks the per-group update relies on (used by ``--quick``)."""
    n, t = cfg.num_envs, cfg.steps
    assert batch.batch_size == (n, t), batch.batch_size
    is_init = _common.check_is_init(batch, first)
    for group, size in (("speaker", cfg.vocab), ("listener", cfg.vocab + 1)):
        assert batch[group, "observation"].shape == (n, t, size), group
        for key in ("advantage", "value_target", "state_value"):
            value = batch[group, key]
            assert value.shape == (n, t, 1), (group, key, value.shape)
            assert bool(torch.isfinite(value).all()), (group, key)
        for key in batch[group].keys():
            if key.startswith("rs_"):
                state = batch[group, key]
                assert state.shape == (n, t, 1, cfg.hidden), (group, key, state.shape)
                assert bool((state[is_init] == 0).all()), f"{group}.{key} must be zero at is_init"


# ---------------------------------------------------------------------------- training
def train(cfg: Config, run: _run_folder.RunOptions, *, quick: bool = False) -> Result:
    """Trains both groups' agents in one run, then evaluates them and logs the outcome.

    The caller's global RNG state is left as it was.

    Args:
        cfg (Config): hyperparameters, the listener's memory among them.
        run (RunOptions): where and how the run goes: folder, logger, checkpoints, device and
            whether it resumes.
        quick (bool, optional): check each batch's layout and masks, every group's stored-state
            replay and finite losses (meant for a few batches). Defaults to ``False``.
    """
    return _common.seeded(cfg.seed, _train, cfg, run, quick)


def _train(cfg: Config, run: _run_folder.RunOptions, quick: bool) -> Result:
    device = _common.device(run.device)
    watch = _common.Stopwatch()
    agents = make_agents(cfg)
    for agent in agents.values():
        agent.to(device)
    env = make_env(cfg, cfg.num_envs, cfg.seed, agents, device)
    gaes = {g: make_gae(cfg, g, agents[g]) for g in GROUPS}
    losses = nn.ModuleDict({g: make_loss(cfg, g, agents[g]) for g in GROUPS})
    optim = make_optimizer(cfg, agents)
    collector = _common.collector(env, collection_policy(agents), cfg, device)
    checkpoints = _checkpointing.Checkpoints(run, cfg, losses, optim, env, collector)
    logger, generator = checkpoints.logger, checkpoints.generator
    window_size, target = cfg.success_window, cfg.target_success
    counters, window = checkpoints.start_window(window_size, target, curve=[])
    frames, curve, seconds = counters["frames"], counters["curve"], counters["seconds"]
    bar = _run_folder.progress_bar(cfg.frames, frames, run)
    start = time.perf_counter() - seconds

    batches = iter(collector)
    while frames < cfg.frames:
        with watch("collect"):
            batch = next(batches)
        with watch("gae"):
            for gae in gaes.values():
                gae(batch)
        if quick:
            check_batch(cfg, batch, first=frames == 0)
        previous, frames = frames, frames + batch.numel()
        with watch("update"):
            stats = update(cfg, batch, losses, optim, generator)
        if quick:
            check_stats(stats)
        seconds = time.perf_counter() - start
        rate = window.update(successes(batch).tolist(), frames, seconds)
        curve.append((frames, rate))
        row = {"success": rate, "episodes_in_window": len(window.recent), **stats}
        bar.update(batch.numel())
        bar.set_postfix(success=f"{rate:.3f}")
        counters = _common.window_counters(frames, seconds, window, curve=curve)
        checkpoints.end_batch(row, counters, previous)
    bar.close()
    final_eval = evaluate(cfg, agents, device)
    logger.log_scalar("final_eval", final_eval, step=frames)
    checkpoints.save({**counters, "evaluated": True})
    collector.shutdown()
    title = f"MAPPO on the signalling game ({cfg.listener} listener)"
    curves = {f"seed {cfg.seed}": curve}
    path = run.out / "learning_curve.png"
    _common.plot_curves(path, curves, cfg.target_success, title, ylabel="success rate")
    return Result.of(
        cfg, window, final_eval, frames, seconds, run.out, timings=dict(watch.totals), curve=curve
    )


def check_stats(stats: dict[str, float]) -> None:
    """Asserts finite losses and that each group's actor replays its stored states."""
    assert all(math.isfinite(v) for v in stats.values()), stats
    for group in GROUPS:
        assert abs(stats[f"{group}_first_max_ratio"] - 1.0) < 1e-3, "stored states must replay"


# ---------------------------------------------------------------------------- command line


def summary(result: Result) -> str:
    """What a run reached, its final evaluation against chance, and where the time went."""
    cfg = result.config
    if result.frames_to_target is None:
        reached = f"success never reached {cfg.target_success:g}"
    else:
        reached = (
            f"success reached {cfg.target_success:g} after {result.frames_to_target:,} frames "
            f"({result.seconds_to_target:.1f} s)"
        )
    times = ", ".join(f"{name} {sec:.1f} s" for name, sec in result.timings.items())
    return (
        f"signalling {cfg.listener} seed {cfg.seed}: {reached}; deterministic evaluation "
        f"{result.final_eval:.3f} (chance {1 / cfg.vocab:.3f}) over {cfg.eval_episodes} "
        f"episodes; {result.frames:,} frames in {result.seconds:.1f} s ({times}); log: "
        f"{result.out}"
    )


def main(args: argparse.Namespace) -> list[Result]:
    """Runs ``python -m torchrl_ext.examples signalling`` (see ``--help``)."""
    return _common.train_seeds(
        args, args.pipeline, train, summary, Config, QUICK, listener=args.listener
    )
