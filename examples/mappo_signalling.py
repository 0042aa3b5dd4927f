"""Recurrent multi-agent PPO on the signalling game, one actor and one critic per agent group.

    python examples/mappo_signalling.py [--seeds 0 1 2] [--listener lstm|mlp] [--frames N] [--quick]

A speaker sees a target, says a token; the listener hears it once and must name the target
``delay`` steps later, so it must remember the token. The pipeline, top to bottom:

1. ``SignallingEnv`` (``V = 8`` targets, answer due ``delay = 2`` steps after the token) in
   TorchRL's multi-agent layout: a ``"speaker"`` and a ``"listener"`` group, each with its own
   observation, action and reward, and a done shared at the root. ``InitTracker`` adds the shared
   ``is_init``; the LSTMs' state primers add each group's recurrent states under that group.
2. Per group, an actor (``LSTMModule``, a small head, a categorical over ``V``) and a critic (its
   own ``LSTMModule`` and value head), each reading only its group's observation. With
   ``--listener mlp`` the listener is feed-forward: it cannot remember the token and stays at
   chance (``1 / V``).
3. TorchRL's ``Collector`` gathers ``[num_envs, steps]`` batches holding both groups, with every
   LSTM's state stored at each step.
4. One ``RecurrentGAE`` per group, keys set to that group's reward, value, advantage and value
   target and to the shared ``done``/``terminated``: each replays its group's critic over whole
   rows from the stored states and cuts traces at the shared episode ends.
5. ``EnvMajorMinibatches`` hands out whole env rows (both groups at once), and one
   ``ClipPPOLoss`` per group, keys set per group, takes the gradient steps on the sum of the two.

The curve is the success rate (the listener's mean return: 1 for a right answer) over the last
``success_window`` episodes; the final evaluation runs the actors' modes on fresh episodes.
Learning rate, clip range and entropy bonus stay constant.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Literal

import runs
import torch
from tensordict.nn import TensorDictModule, TensorDictSequential
from torch import nn
from torchrl.collectors import Collector
from torchrl.envs import Compose, InitTracker, TransformedEnv
from torchrl.envs.utils import ExplorationType, set_exploration_type
from torchrl.modules import ProbabilisticActor, set_recurrent_mode
from torchrl.objectives import ClipPPOLoss

from torchrl_ext.data.minibatches import EnvMajorMinibatches
from torchrl_ext.envs import SignallingEnv
from torchrl_ext.modules import LSTMModule
from torchrl_ext.objectives import RecurrentGAE


@dataclasses.dataclass
class Args:
    """The run's arguments: each field is an option (``--envs-per-minibatch 8``)."""

    seed: int = 0
    """seed of the envs, the network initialization and the minibatch order"""
    listener: Literal["lstm", "mlp"] = "lstm"
    """the listener's actor and critic: recurrent (lstm) or feed-forward (mlp, at chance)"""
    frames: int = 1_000_000
    """frames to collect"""
    num_envs: int = 64
    """parallel envs"""
    steps: int = 16
    """steps per env per batch (the row length)"""
    vocab: int = 8
    """V: targets and tokens"""
    delay: int = 2
    """steps between the token and the answer"""
    hidden: int = 64
    """LSTM hidden size (or first MLP layer width), and the heads' hidden width"""
    lr: float = 3e-3
    """Adam learning rate (constant)"""
    gamma: float = 0.99
    """discount"""
    lmbda: float = 0.95
    """GAE lambda"""
    epochs: int = 4
    """passes over each batch"""
    envs_per_minibatch: int = 16
    """env rows per minibatch"""
    clip: float = 0.2
    """PPO clip range (constant)"""
    entropy_coeff: float = 0.05
    """entropy bonus weight"""
    critic_coeff: float = 1.0
    """value-loss weight"""
    max_grad_norm: float = 1.0
    """gradient-norm clip, per agent group"""
    target_success: float = 0.95
    """success rate that counts as solved"""
    success_window: int = 1024
    """completed episodes the success rate is measured over"""
    eval_episodes: int = 1024
    """episodes of the final deterministic evaluation"""

    def __post_init__(self) -> None:
        counts = ["frames", "num_envs", "steps", "hidden", "epochs", "envs_per_minibatch"]
        counts += ["success_window", "eval_episodes"]
        runs.check_fields(
            self,
            counts=counts,
            positive=["lr", "clip", "max_grad_norm"],
            non_negative=["entropy_coeff", "critic_coeff"],
            fractions=["gamma", "lmbda", "target_success"],
        )
        if self.listener not in ("lstm", "mlp"):
            raise ValueError(f"listener must be 'lstm' or 'mlp', got listener={self.listener!r}.")
        for name, low in (("vocab", 2), ("delay", 0)):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= 2**20:
                raise ValueError(
                    f"{name} must be an integer in [{low}, 2**20], got {name}={value!r}."
                )
        if self.frames < self.num_envs * self.steps:
            raise ValueError(
                f"frames must be at least one batch (num_envs * steps = "
                f"{self.num_envs * self.steps}), got frames={self.frames}."
            )
        if self.envs_per_minibatch > self.num_envs:
            raise ValueError(
                f"envs_per_minibatch must be <= num_envs = {self.num_envs}, got "
                f"envs_per_minibatch={self.envs_per_minibatch}."
            )


#: What ``--quick`` changes: three batches of 16 envs x 8 steps, fewer epochs and evaluations.
QUICK = dict(
    frames=3 * 16 * 8, num_envs=16, steps=8, epochs=2, envs_per_minibatch=8, eval_episodes=64
)

GROUPS = ("speaker", "listener")


# ---------------------------------------------------------------------------- env and agents
def state_keys(group: str, role: str) -> tuple[tuple[str, str], tuple[str, str]]:
    """The keys of one LSTM's ``(h, c)`` states, inside its group."""
    return (group, f"rs_{role}_h"), (group, f"rs_{role}_c")


def make_trunk(args: Args, group: str, role: str, obs_dim: int, memory: str) -> TensorDictModule:
    """An ``LSTMModule`` (or a ReLU layer) reading the group's observation into its embedding."""
    obs, out = (group, "observation"), (group, f"{role}_embed")
    if memory == "lstm":
        h, c = state_keys(group, role)
        return LSTMModule(
            input_size=obs_dim,
            hidden_size=args.hidden,
            in_keys=[obs, h, c],
            out_keys=[out, ("next", *h), ("next", *c)],
        )
    net = nn.Sequential(nn.Linear(obs_dim, args.hidden), nn.ReLU())
    return TensorDictModule(net, in_keys=[obs], out_keys=[out])


def make_head(args: Args, group: str, role: str, out_features: int, out_key: str):
    """A tanh hidden layer on the group's ``role`` embedding, then a linear output."""
    net = nn.Sequential(
        nn.Linear(args.hidden, args.hidden), nn.Tanh(), nn.Linear(args.hidden, out_features)
    )
    return TensorDictModule(net, in_keys=[(group, f"{role}_embed")], out_keys=[(group, out_key)])


@dataclasses.dataclass
class Agent:
    """One group's actor and critic, and their trunks (whose states the env must carry)."""

    actor: ProbabilisticActor
    critic: TensorDictSequential

    @property
    def trunks(self) -> list:
        """The actor's and the critic's first modules."""
        return [self.actor.module[0][0], self.critic[0]]


def make_agent(args: Args, group: str, obs_dim: int, memory: str) -> Agent:
    """The group's actor (categorical over ``V``) and critic, each with its own trunk."""
    actor = ProbabilisticActor(
        TensorDictSequential(
            make_trunk(args, group, "actor", obs_dim, memory),
            make_head(args, group, "actor", args.vocab, "logits"),
        ),
        in_keys={"logits": (group, "logits")},
        out_keys=[(group, "action")],
        distribution_class=torch.distributions.Categorical,
        return_log_prob=True,
        log_prob_key=(group, "action_log_prob"),
    )
    critic = TensorDictSequential(
        make_trunk(args, group, "critic", obs_dim, memory),
        make_head(args, group, "critic", 1, "state_value"),
    )
    return Agent(actor, critic)


def make_agents(args: Args, device) -> dict[str, Agent]:
    """Both groups' agents on ``device``; the speaker always remembers, the listener per args."""
    dims = {"speaker": args.vocab, "listener": args.vocab + 1}
    memory = {"speaker": "lstm", "listener": args.listener}
    agents = {g: make_agent(args, g, dims[g], memory[g]) for g in GROUPS}
    for agent in agents.values():
        agent.actor.to(device)
        agent.critic.to(device)
    return agents


def collection_policy(agents: dict[str, Agent]) -> TensorDictSequential:
    """Both actors, plus the critics' LSTMs so their states are stored for RecurrentGAE."""
    modules = [agents[g].actor for g in GROUPS]
    modules += [a.critic[0] for a in agents.values() if isinstance(a.critic[0], LSTMModule)]
    return TensorDictSequential(*modules)


def acting_policy(agents: dict[str, Agent]) -> TensorDictSequential:
    """Both actors: reads both groups' observations (and LSTM states), writes both actions."""
    return TensorDictSequential(*(agents[g].actor for g in GROUPS))


def make_env(args: Args, num_envs: int, seed: int, agents: dict[str, Agent], device):
    """The game with ``is_init`` and every LSTM's state primer (states kept in their groups)."""
    base = SignallingEnv(num_envs, device, seed, vocab=args.vocab, delay=args.delay)
    primers = [
        trunk.make_tensordict_primer()
        for agent in agents.values()
        for trunk in agent.trunks
        if isinstance(trunk, LSTMModule)
    ]
    return TransformedEnv(base, Compose(InitTracker(), *primers).to(device))


# ---------------------------------------------------------------------------- learning
def group_keys(group: str) -> dict[str, str | tuple[str, str]]:
    """``set_keys`` arguments of one group: its own reward and value keys, the shared flags."""
    return {
        "reward": (group, "reward"),
        "value": (group, "state_value"),
        "advantage": (group, "advantage"),
        "value_target": (group, "value_target"),
        "done": "done",
        "terminated": "terminated",
    }


def make_gae(args: Args, group: str, agent: Agent) -> RecurrentGAE:
    """The group's RecurrentGAE: its own reward and value keys, the shared done."""
    stored = isinstance(agent.critic[0], LSTMModule)
    gae = RecurrentGAE(
        args.gamma,
        args.lmbda,
        value_network=agent.critic,
        initial_state="stored" if stored else "zeros",
    )
    return gae.set_keys(**group_keys(group))


def make_loss(args: Args, group: str, agent: Agent) -> ClipPPOLoss:
    """The group's ClipPPOLoss, reading that group's action, log-prob and advantage.

    ``functional=False``: PPO has no target networks, and TorchRL's functional default swaps the
    parameters in and out around every call, for the same numbers.
    """
    loss = ClipPPOLoss(
        agent.actor,
        agent.critic,
        clip_epsilon=args.clip,
        entropy_bonus=True,
        entropy_coeff=args.entropy_coeff,
        critic_coeff=args.critic_coeff,
        loss_critic_type="l2",
        normalize_advantage=True,
        functional=False,
    )
    keys = group_keys(group)
    loss.set_keys(action=(group, "action"), sample_log_prob=(group, "action_log_prob"), **keys)
    return loss


def make_losses(args: Args, agents: dict[str, Agent]) -> nn.ModuleDict:
    """Both groups' losses; the checkpoint saves the networks through this ``ModuleDict``."""
    return nn.ModuleDict({g: make_loss(args, g, agents[g]) for g in GROUPS})


def make_optimizer(args: Args, agents: dict[str, Agent]) -> torch.optim.Optimizer:
    """Adam with one parameter group per agent group, so each group's gradient is clipped alone.

    ``foreach=True`` gives the per-parameter loop's numbers on the CPU, in less time.
    """
    groups = [
        {"params": [*agents[g].actor.parameters(), *agents[g].critic.parameters()]} for g in GROUPS
    ]
    return torch.optim.Adam(groups, lr=args.lr, foreach=True)


def loss_inputs(batch, losses):
    """The entries the losses read: cutting minibatches from these costs less, same numbers."""
    selected = []
    for loss in losses.values():
        keys = loss.tensor_keys
        selected += [*loss.actor_network.in_keys, *loss.critic_network.in_keys]
        selected += [keys.action, keys.sample_log_prob, keys.advantage, keys.value_target]
    return batch.select(*selected)


def update(args: Args, batch, losses, optim, generator) -> dict[str, float]:
    """PPO epochs over env-major minibatches; one gradient step on the sum of the group losses.

    Returns the last minibatch's losses and each group's ``first_max_ratio``, the largest
    probability ratio on the first minibatch before any step: 1 when the actor, replaying each
    row from its stored state, reproduces the collection-time log-probabilities.
    """
    stats: dict[str, float] = {}
    minibatches = EnvMajorMinibatches(
        loss_inputs(batch, losses), args.envs_per_minibatch, epochs=args.epochs, generator=generator
    )
    for minibatch in minibatches:
        total = 0.0
        for group, loss in losses.items():
            with set_recurrent_mode(True):
                out = loss(minibatch)
            stats.setdefault(f"{group}_first_max_ratio", float(out["max_ratio"]))
            total = total + out["loss_objective"] + out["loss_critic"] + out["loss_entropy"]
            stats.update(
                {f"{group}_{k}": float(v.detach()) for k, v in out.items() if k.startswith("loss_")}
            )
        optim.zero_grad(set_to_none=True)
        total.backward()
        for param_group in optim.param_groups:
            torch.nn.utils.clip_grad_norm_(param_group["params"], args.max_grad_norm)
        optim.step()
    return stats


def successes(batch) -> torch.Tensor:
    """1.0 / 0.0 per episode that ended in ``batch``: whether the listener named the target.

    Examples:
        >>> from tensordict import TensorDict
        >>> done = torch.tensor([[False, True], [False, True]]).unsqueeze(-1)
        >>> reward = torch.tensor([[0.0, 1.0], [0.0, 0.0]]).unsqueeze(-1)
        >>> batch = TensorDict({"next": {"done": done, "listener": {"reward": reward}}}, [2, 2])
        >>> successes(batch).tolist()
        [1.0, 0.0]
    """
    done = batch["next", "done"].squeeze(-1)
    return batch["next", "listener", "reward"].squeeze(-1)[done]


def evaluate(args: Args, agents: dict[str, Agent], device) -> float:
    """Success rate of the actors' modes on ``eval_episodes`` fresh episodes (one per env)."""
    env = make_env(args, args.eval_episodes, args.seed + 1_000_003, agents, device)
    with torch.no_grad(), set_exploration_type(ExplorationType.DETERMINISTIC):
        data = env.rollout(args.delay + 2, acting_policy(agents), break_when_any_done=False)
    env.close()
    return float(successes(data).mean())


def check_batch(args: Args, batch, first: bool) -> None:
    """Asserts the layout and masks the per-group update relies on (``--quick``)."""
    n, t = args.num_envs, args.steps
    assert batch.batch_size == (n, t), batch.batch_size
    is_init = batch["is_init"].squeeze(-1)
    assert torch.equal(is_init[:, 1:], batch["next", "done"].squeeze(-1)[:, :-1]), "is_init"
    assert not first or bool(is_init[:, 0].all()), "every env starts an episode"
    for group, size in (("speaker", args.vocab), ("listener", args.vocab + 1)):
        assert batch[group, "observation"].shape == (n, t, size), group
        for key in ("advantage", "value_target", "state_value"):
            value = batch[group, key]
            assert value.shape == (n, t, 1), (group, key, value.shape)
            assert bool(torch.isfinite(value).all()), (group, key)
        for key in batch[group].keys():
            if key.startswith("rs_"):
                state = batch[group, key]
                assert state.shape == (n, t, 1, args.hidden), (group, key, state.shape)
                assert bool((state[is_init] == 0).all()), f"{group}.{key} must be zero at is_init"


def check_stats(stats: dict[str, float]) -> None:
    """Asserts finite losses and that each group's actor replays its stored states (``--quick``)."""
    assert all(math.isfinite(v) for v in stats.values()), stats
    for group in GROUPS:
        assert abs(stats[f"{group}_first_max_ratio"] - 1.0) < 1e-3, "stored states must replay"


# ---------------------------------------------------------------------------- training
def train(args: Args, run: runs.Run) -> runs.Result:
    """Trains both groups' agents in one run, then evaluates and logs it (RNG seeded by caller)."""
    device = torch.device(run.device)
    watch = runs.Stopwatch()
    agents = make_agents(args, device)
    env = make_env(args, args.num_envs, args.seed, agents, device)
    gaes = {g: make_gae(args, g, agents[g]) for g in GROUPS}
    losses = make_losses(args, agents)
    optim = make_optimizer(args, agents)
    collector = Collector(
        env,
        collection_policy(agents),
        frames_per_batch=args.num_envs * args.steps,
        total_frames=-1,
        device=device,
    )
    generator = torch.Generator().manual_seed(args.seed)  # the minibatch order
    recorder = runs.Recorder(run, args, curve=[])
    if run.resume:
        runs.load_training_state(recorder.state, losses, optim, env, collector)
        generator.set_state(recorder.state["generator"])
    window = runs.ReturnWindow(args.success_window, args.target_success, recorder.counters)
    curve = recorder.counters["curve"]

    def state() -> dict:
        return {
            **runs.training_state(losses, optim, env, collector),
            "generator": generator.get_state(),
        }

    batches = iter(collector)
    while recorder.frames < args.frames:
        with watch("collect"):
            batch = next(batches)
        with watch("gae"):
            for gae in gaes.values():
                gae(batch)
        if run.quick:
            check_batch(args, batch, first=recorder.frames == 0)
        frames = recorder.frames + batch.numel()
        with watch("update"):
            stats = update(args, batch, losses, optim, generator)
        if run.quick:
            check_stats(stats)
        rate = window.update(successes(batch).tolist(), frames, recorder.elapsed)
        curve.append((frames, rate))
        row = {"success": rate, "episodes_in_window": len(recorder.counters["recent"]), **stats}
        recorder.log(frames, row, state)
    result = recorder.finish(
        state,
        curve,
        final_eval=evaluate(args, agents, device),
        title=f"MAPPO on the signalling game: success rate ({args.listener} listener)",
        label=f"{args.listener} (chance {1 / args.vocab:.3f})",
        target=args.target_success,
        hit=window.hit,
        timings=watch,
    )
    collector.shutdown()
    return result


def load_policy(args: Args, state: dict, device) -> TensorDictSequential:
    """Both actors of a checkpoint: read each group's observation (and LSTM states), act."""
    agents = make_agents(args, device)
    make_losses(args, agents).load_state_dict(state["loss"])
    return acting_policy(agents)


def acting_env(args: Args, num_envs: int, seed: int, device) -> TransformedEnv:
    """An env the loaded policy acts in: ``is_init`` and every LSTM's state primer."""
    return make_env(args, num_envs, seed, make_agents(args, device), device)


if __name__ == "__main__":
    runs.main(Args, train, quick=QUICK)
