"""R2D2 on a POPGym memory task: a recurrent Q-network learning from sequence replay.

    python examples/r2d2_popgym.py [--env RepeatPrevious] [--difficulty easy|medium|hard]
        [--memory lstm|gru|ffm] [--replay sequence|tape] [--seeds 0 1 2] [--frames N] [--quick]

POPGym's tasks (Morad et al., ICLR 2023) as torchrl_ext's Warp ports, those whose action is one
discrete choice (a Q-network scores each action; MineSweeper, Battleship and the pendulums are
for PPO). The pipeline, top to bottom:

1. The port of ``--env`` at ``--difficulty`` in a ``TransformedEnv`` with ``InitTracker``
   (``is_init``), ``RewardSum`` (episode returns), ``PreviousAction`` (the last action, one-hot:
   POPGym's baselines feed it, and a bandit player needs it to know which arm paid) and the
   memory's state primer.
2. The Q-network: the observation (discrete components one-hot) and the previous action, a
   linear embedding, a memory (``--memory``: an ``LSTMModule``, forget-gate bias
   ``--forget-bias``; a ``GRUModule``; or an :class:`~torchrl_ext.modules.FFMModule`) and a
   two-layer head writing one ``action_value`` per action; ``QValueModule`` picks the greedy
   action and ``EGreedyModule`` explores, with one exploration rate per env (a linear decay
   floored by an Ape-X-style ladder).
3. TorchRL's ``Collector`` gathers ``[num_envs, steps]`` batches; each record carries the
   memory's state the actor had before it.
4. The batches go into a prioritized ``TensorDictReplayBuffer`` over a time x env
   ``LazyTensorStorage``. With ``--replay sequence`` its ``Sequence`` sample unit expands every
   sampled anchor into a burn-in, learning and bootstrap window of its env; with ``--replay
   tape`` its ``Tape`` unit lays the episodes of the sampled anchors whole, end to end, into
   ``tape_rows`` tapes as long as the env's longest episode.
5. After the warm-up, one update per batch: ``R2D2Loss`` regresses the learning records onto
   n-step double-Q targets with value rescaling, burning in windows from the stored state
   without gradient (tapes need no burn-in: every episode starts from its reset); the records'
   ``td_error`` goes back as one priority per anchor, or per episode on tapes (R2D2's mixture
   of max and mean), and ``HardUpdate`` copies the online network into the target.

The logged ``best_mean_return`` over a 100-episode window is POPGym's MMER (its score); every
task's best return is 1. The learning rate stays constant for the first half of the frames,
then decays linearly to a tenth. A checkpoint holds the replay buffer as a folder
(``rb.dumps``), read back only once every file in it is data.
"""

from __future__ import annotations

import dataclasses
import importlib
import math
from typing import Literal

import runs
import torch
from tensordict.nn import TensorDictModule, TensorDictSequential
from torch import nn
from torchrl.collectors import Collector
from torchrl.data import (
    Categorical,
    LazyTensorStorage,
    MultiCategorical,
    TensorDictPrioritizedReplayBuffer,
    TensorSpec,
)
from torchrl.envs import Compose, InitTracker, RewardSum, TransformedEnv
from torchrl.envs.utils import ExplorationType, set_exploration_type
from torchrl.modules import EGreedyModule, QValueModule
from torchrl.objectives import HardUpdate

from torchrl_ext.data import Sequence, Tape, load_replay
from torchrl_ext.envs.transforms import PreviousAction
from torchrl_ext.modules import FFMModule, GRUModule, LSTMModule
from torchrl_ext.objectives import R2D2Loss

#: POPGym's tasks whose action is one discrete choice, by POPGym's name (the port is
#: ``torchrl_ext.envs.popgym.<name>Env``).
ENVS = (
    "RepeatFirst",
    "RepeatPrevious",
    "Autoencode",
    "CountRecall",
    "HigherLower",
    "Concentration",
    "MultiarmedBandit",
    "PositionOnlyCartPole",
    "VelocityOnlyCartPole",
    "NoisyPositionOnlyCartPole",
)
#: POPGym's tasks whose action is a board cell or a torque: no Q-network scores it.
NOT_SINGLE_DISCRETE = (
    "MineSweeper",
    "Battleship",
    "PositionOnlyPendulum",
    "NoisyPositionOnlyPendulum",
)


@dataclasses.dataclass
class Args:
    """The run's arguments: each field is an option (``--warmup-frames 4096``)."""

    seed: int = 0
    """seed of the envs, the network initialization and the replay sampling"""
    env: str = "RepeatPrevious"
    """POPGym task with one discrete action: RepeatFirst, RepeatPrevious, Autoencode,
    CountRecall, HigherLower, Concentration, MultiarmedBandit, PositionOnlyCartPole,
    VelocityOnlyCartPole or NoisyPositionOnlyCartPole"""
    difficulty: Literal["easy", "medium", "hard"] = "easy"
    """POPGym's difficulty preset"""
    memory: Literal["lstm", "gru", "ffm"] = "lstm"
    """the Q-network's memory: an LSTM, a GRU or Fast and Forgetful Memory"""
    replay: Literal["sequence", "tape"] = "sequence"
    """samples: burn-in windows (Sequence) or whole episodes end to end (Tape)"""
    forget_bias: float = 0.0
    """initial bias of the LSTM's forget gates"""
    previous_action: bool = True
    """feed the previous action to the Q-network"""
    frames: int = 2_097_152
    """frames to collect; the exploration and learning-rate schedules run over them"""
    num_envs: int = 16
    """parallel envs"""
    steps: int = 4
    """steps per env per batch; one update follows each batch after the warm-up"""
    hidden: int = 64
    """width of the embedding, the LSTM and the head"""
    lr: float = 5e-4
    """Adam learning rate (constant for the first lr_decay_start of the frames)"""
    lr_end: float = 5e-5
    """learning rate at the end of the frames"""
    lr_decay_start: float = 0.5
    """fraction of the frames after which the learning rate decays linearly to lr_end"""
    gamma: float = 0.99
    """discount"""
    max_grad_norm: float = 10.0
    """gradient-norm clip"""
    warmup_frames: int = 2_048
    """frames collected before the first update"""
    capacity: int = 100_000
    """replay capacity in records (time x envs)"""
    burn_in: int = 8
    """burn-in records per window (no gradient; they rebuild the LSTM state)"""
    length: int = 16
    """learning records per window"""
    n_step: int = 5
    """return horizon; a window carries n_step - 1 bootstrap records"""
    batch_size: int = 32
    """windows per update (--replay sequence)"""
    tape_rows: int = 4
    """tapes per update, each as long as the env's longest episode (--replay tape)"""
    tape_draws: int = 64
    """episodes drawn per update to fill the tapes; those that no longer fit are skipped"""
    value_rescaling: bool = True
    """R2D2's h(x) on the targets"""
    target_period: int = 100
    """updates between two copies of the online network into the target"""
    alpha: float = 0.9
    """priority exponent"""
    beta: float = 0.6
    """importance-sampling exponent"""
    eta: float = 0.9
    """weight of the max in the per-anchor priority (max and mean of the learning records)"""
    eps_frames: int = 200_000
    """frames of linear exploration decay from 1 to eps_end"""
    eps_end: float = 0.01
    """exploration rate after the decay"""
    eps_lanes: float = 0.1
    """per-env floor: env i of N explores at least eps_lanes ** (1 + 2 i / (N - 1))"""
    target: float = 1.0
    """mean return that counts as solved (1 is every task's best)"""
    return_window: int = 100
    """completed episodes averaged into the mean return"""
    log_every: int = 16
    """batches between two log rows"""
    eval_episodes: int = 64
    """episodes of the final greedy evaluation"""

    @property
    def run_name(self) -> str:
        """The runs' folder under ``runs/<pipeline>``: one per env and difficulty."""
        return f"{self.env}-{self.difficulty}"

    def __post_init__(self) -> None:
        if self.env in NOT_SINGLE_DISCRETE:
            raise ValueError(
                "env must have a single discrete action, which R2D2's Q-network scores (train "
                f"it with ppo_popgym.py), got env={self.env!r}."
            )
        if self.env not in ENVS:
            raise ValueError(f"env must be one of {', '.join(ENVS)}, got env={self.env!r}.")
        if self.difficulty not in ("easy", "medium", "hard"):
            raise ValueError(
                f"difficulty must be easy, medium or hard, got difficulty={self.difficulty!r}."
            )
        if self.memory not in ("lstm", "gru", "ffm"):
            raise ValueError(f"memory must be lstm, gru or ffm, got memory={self.memory!r}.")
        if self.replay not in ("sequence", "tape"):
            raise ValueError(f"replay must be sequence or tape, got replay={self.replay!r}.")
        if not math.isfinite(self.forget_bias):
            raise ValueError(f"forget_bias must be finite, got forget_bias={self.forget_bias!r}.")
        counts = ["frames", "num_envs", "steps", "hidden", "warmup_frames", "capacity"]
        counts += ["length", "n_step", "batch_size", "target_period", "eps_frames"]
        counts += ["tape_rows", "tape_draws"]
        counts += ["return_window", "log_every", "eval_episodes"]
        runs.check_fields(
            self,
            counts=counts,
            positive=["lr", "max_grad_norm"],
            non_negative=["lr_end", "alpha", "beta"],
            fractions=["lr_decay_start", "gamma", "eta", "eps_end", "eps_lanes"],
        )
        if isinstance(self.burn_in, bool) or not isinstance(self.burn_in, int) or self.burn_in < 0:
            raise ValueError(f"burn_in must be an integer >= 0, got burn_in={self.burn_in!r}.")
        if not math.isfinite(self.target):
            raise ValueError(f"target must be a finite number, got target={self.target!r}.")
        if self.frames < self.num_envs * self.steps:
            raise ValueError(
                f"frames must be at least one batch (num_envs * steps = "
                f"{self.num_envs * self.steps}), got frames={self.frames}."
            )
        if self.replay == "sequence" and self.capacity < self.window:
            raise ValueError(
                f"capacity must hold at least one window (burn_in + length + n_step - 1 = "
                f"{self.window} records), got capacity={self.capacity}."
            )

    @property
    def window(self) -> int:
        """Records per sampled window: burn-in, learning records and bootstrap."""
        return self.burn_in + self.length + self.n_step - 1


#: What ``--quick`` changes: 16 batches (8 updates after a 512-frame warm-up), a row every 2.
QUICK = dict(
    frames=1024, warmup_frames=512, capacity=2048, batch_size=8, eval_episodes=4, log_every=2
)

#: The state keys of each memory.
STATES = {
    "lstm": ("recurrent_state_h", "recurrent_state_c"),
    "gru": ("recurrent_state_h",),
    "ffm": ("recurrent_state_ffm",),
}
#: What the replay buffer stores of each collected record, besides the memory's state.
STORED = (
    "observation",
    "action",
    "is_init",
    ("next", "observation"),
    ("next", "reward"),
    ("next", "done"),
    ("next", "terminated"),
    ("next", "truncated"),
)
#: What the replay buffer stores besides, with ``previous_action``.
PREVIOUS = ("prev_action", ("next", "prev_action"))


# ---------------------------------------------------------------------------- env and agent
def env_class(args: Args) -> type:
    """The Warp port of POPGym's ``args.env`` (``"RepeatPrevious"``: ``RepeatPreviousEnv``)."""
    return getattr(importlib.import_module("torchrl_ext.envs.popgym"), f"{args.env}Env")


def task_specs(args: Args) -> tuple[TensorSpec, Categorical]:
    """The observation and action specs of one env of the task."""
    env = env_class(args)(1, "cpu", 0, difficulty=args.difficulty)
    specs = env.observation_spec["observation"], env.action_spec
    env.close()
    return specs


def longest_episode(args: Args) -> int:
    """The most steps an episode of the task runs: the length of a tape."""
    env = env_class(args)(1, "cpu", 0, difficulty=args.difficulty)
    steps = env.max_steps
    env.close()
    return steps


def make_env(args: Args, num_envs: int, seed: int, device) -> TransformedEnv:
    """The task with reset flags, episode returns, the previous action and the memory's primer."""
    base = env_class(args)(num_envs, device, seed, difficulty=args.difficulty)
    primer = make_memory(args).make_tensordict_primer()
    transforms = [InitTracker(), RewardSum(), *([PreviousAction()] if args.previous_action else [])]
    return TransformedEnv(base, Compose(*transforms, primer).to(device))


def make_memory(args: Args) -> LSTMModule | GRUModule | FFMModule:
    """The Q-network's memory; it reads and writes its state under ``STATES[args.memory]``."""
    if args.memory == "ffm":
        return FFMModule(args.hidden, args.hidden, in_key="embed", out_key="memory")
    state = STATES[args.memory]
    keys = dict(in_keys=["embed", *state], out_keys=["memory", *(("next", k) for k in state)])
    if args.memory == "gru":
        return GRUModule(input_size=args.hidden, hidden_size=args.hidden, **keys)
    lstm = LSTMModule(input_size=args.hidden, hidden_size=args.hidden, **keys)
    set_forget_bias(lstm.lstm, args.forget_bias)
    return lstm


class Inputs(nn.Module):
    """The Q-network's input features: the observation, then the previous action (if fed).

    Discrete observations are one-hot encoded (one block per component of a
    ``MultiCategorical``), float ones pass as they are.

    Args:
        observation (TensorSpec): the observation's spec.
        previous (int): width of the previous action's one-hot encoding; 0 for none.

    Examples:
        >>> inputs = Inputs(MultiCategorical([2, 3]), previous=2)
        >>> inputs.features
        7
        >>> inputs(torch.tensor([[1, 2]]), torch.tensor([[0.0, 1.0]]))
        tensor([[0., 1., 0., 0., 1., 0., 1.]])
    """

    def __init__(self, observation: TensorSpec, previous: int) -> None:
        super().__init__()
        self.categorical = False  # MultiCategorical subclasses Categorical: test it first
        if isinstance(observation, MultiCategorical):
            nvec = observation.nvec
            sizes = [int(n) for n in nvec.reshape(-1, nvec.shape[-1])[0]]
        elif isinstance(observation, Categorical):
            sizes, self.categorical = [observation.n], True
        else:
            sizes = []
        self.one_hot, self.previous = bool(sizes), previous
        width = observation.shape[-1] if observation.shape else 1
        self.features = (sum(sizes) if sizes else width) + previous
        offsets = torch.tensor([0, *sizes[:-1]], dtype=torch.long).cumsum(0)
        self.register_buffer("offsets", offsets, persistent=False)

    def forward(self, observation: torch.Tensor, prev_action=None) -> torch.Tensor:
        """Features of shape ``[*batch, features]``."""
        if self.one_hot:
            index = observation.long().unsqueeze(-1) if self.categorical else observation.long()
            features = torch.zeros(
                *index.shape[:-1], self.features - self.previous, device=index.device
            )
            features = features.scatter_(-1, index + self.offsets, 1.0)
        else:
            features = observation.to(torch.get_default_dtype())
        if self.previous:
            features = torch.cat([features, prev_action.to(features.dtype)], -1)
        return features


def make_qnet(args: Args) -> TensorDictSequential:
    """Input features, embedding, memory and head: one ``action_value`` per action."""
    observation, action = task_specs(args)
    inputs = Inputs(observation, action.n if args.previous_action else 0)
    in_keys = ["observation", "prev_action"] if args.previous_action else ["observation"]
    embed = nn.Sequential(nn.Linear(inputs.features, args.hidden), nn.ReLU())
    memory = make_memory(args)
    head = nn.Sequential(
        nn.Linear(args.hidden, args.hidden), nn.ReLU(), nn.Linear(args.hidden, action.n)
    )
    return TensorDictSequential(
        TensorDictModule(inputs, in_keys=in_keys, out_keys=["features"]),
        TensorDictModule(embed, in_keys=["features"], out_keys=["embed"]),
        memory,
        TensorDictModule(head, in_keys=["memory"], out_keys=["action_value"]),
    )


def set_forget_bias(lstm: nn.LSTM, bias: float) -> None:
    """Sets the forget gates' bias of every layer of ``lstm`` (PyTorch's gates: i, f, g, o).

    The bias is held in ``bias_ih``; ``bias_hh``'s forget part is zeroed.

    Examples:
        >>> lstm = nn.LSTM(3, 2)
        >>> set_forget_bias(lstm, 1.5)
        >>> lstm.bias_ih_l0[2:4].tolist(), lstm.bias_hh_l0[2:4].tolist()
        ([1.5, 1.5], [0.0, 0.0])
    """
    h = lstm.hidden_size
    with torch.no_grad():
        for layer in range(lstm.num_layers):
            getattr(lstm, f"bias_ih_l{layer}")[h : 2 * h].fill_(bias)
            getattr(lstm, f"bias_hh_l{layer}")[h : 2 * h].zero_()


def epsilons(args: Args, frames: int) -> torch.Tensor:
    """Per-env exploration rates: a linear decay from 1, floored by a per-env ladder.

    Examples:
        >>> args = Args(num_envs=3, eps_end=0.0, eps_lanes=0.1)
        >>> [round(e, 4) for e in epsilons(args, frames=10**9).tolist()]
        [0.1, 0.01, 0.001]
    """
    decayed = 1.0 + min(1.0, frames / args.eps_frames) * (args.eps_end - 1.0)
    lanes = torch.arange(args.num_envs, dtype=torch.float64) / max(1, args.num_envs - 1)
    return (args.eps_lanes ** (1 + 2 * lanes)).clamp(min=decayed).float()


# ---------------------------------------------------------------------------- learning
def make_loss(args: Args, qnet: TensorDictSequential) -> R2D2Loss:
    """R2D2's loss over ``qnet``: burn-in (windows), n-step double-Q targets, value rescaling."""
    return R2D2Loss(
        qnet,
        burn_in=args.burn_in if args.replay == "sequence" else 0,
        n_step=args.n_step,
        gamma=args.gamma,
        value_rescaling=args.value_rescaling,
        sample_unit=args.replay,
    )


def make_buffer(args: Args) -> tuple[Sequence | Tape, TensorDictPrioritizedReplayBuffer]:
    """Prioritized windows or tapes over a time x env storage, and their sample unit.

    The unit writes the priorities back (``unit.update_priority(rb, sample)``) with R2D2's
    mixture over the learning records of each window, or the records of each episode.
    """
    if args.replay == "tape":
        unit = Tape(
            longest_episode(args),
            rows=args.tape_rows,
            priority_reduction="mixture",
            priority_eta=args.eta,
        )
        draws = args.tape_draws
    else:
        unit = Sequence(
            args.length,
            burn_in=args.burn_in,
            bootstrap=args.n_step - 1,
            layout="batch_time",
            priority_reduction="mixture",
            priority_eta=args.eta,
            priority_learning_only=True,
        )
        draws = args.batch_size
    return unit, TensorDictPrioritizedReplayBuffer(
        alpha=args.alpha,
        beta=args.beta,
        storage=LazyTensorStorage(args.capacity, ndim=2),
        sample_unit=unit,
        batch_size=draws,
        priority_key="td_error",
        generator=torch.Generator().manual_seed(args.seed + 1),
    )


def learning_rate(args: Args, frames: int) -> float:
    """Constant, then a linear decay to ``lr_end`` over the last part of the frames.

    Examples:
        >>> args = Args(frames=1000, lr=1.0, lr_end=0.0, lr_decay_start=0.5)
        >>> [learning_rate(args, f) for f in (0, 500, 750, 1000)]
        [1.0, 1.0, 0.5, 0.0]
    """
    start = args.lr_decay_start * args.frames
    fraction = min(1.0, max(0.0, (frames - start) / max(1.0, args.frames - start)))
    return args.lr + fraction * (args.lr_end - args.lr)


def update(args: Args, rb, unit, loss: R2D2Loss, target_updater, optim, frames, device):
    """One gradient step on sampled windows or tapes, the target's update, the priorities back.

    Returns the sample (with its ``td_error``) and the loss's output.
    """
    for group in optim.param_groups:
        group["lr"] = learning_rate(args, frames)
    sample = rb.sample().to(device)
    out = loss(sample)
    optim.zero_grad(set_to_none=True)
    out["loss"].backward()
    for group in optim.param_groups:
        torch.nn.utils.clip_grad_norm_(group["params"], args.max_grad_norm)
    optim.step()
    target_updater.step()
    unit.update_priority(rb, sample)
    return sample, out


def evaluate(args: Args, policy, device) -> float:
    """Mean return of fresh episodes (one per env, ``eval_episodes`` envs), greedy actions."""
    env = make_env(args, args.eval_episodes, args.seed + 1_000_003, device)
    returns = torch.full((args.eval_episodes,), math.nan, device=device)
    td = env.reset()
    with torch.no_grad(), set_exploration_type(ExplorationType.DETERMINISTIC):
        while bool(returns.isnan().any()):
            td, next_root = env.step_and_maybe_reset(policy(td))
            ended = td["next", "done"].squeeze(-1) & returns.isnan()
            returns[ended] = td["next", "episode_reward"].squeeze(-1)[ended]
            td = next_root
    env.close()
    return float(returns.mean())


def check_batch(args: Args, batch, first: bool) -> None:
    """Asserts the batch shape and the reset flags the replay windows rely on (``--quick``)."""
    assert batch.batch_size == (args.num_envs, args.steps), batch.batch_size
    is_init, done = batch["is_init"].squeeze(-1), batch["next", "done"].squeeze(-1)
    assert torch.equal(is_init[:, 1:], done[:, :-1]), "is_init must follow a done"
    assert not first or bool(is_init[:, 0].all()), "every env starts an episode"
    state = batch[STATES[args.memory][0]]
    assert bool((state[is_init] == 0).all()), "the memory's state is zero at is_init"


def check_sample(args: Args, sample, out) -> None:
    """Asserts the sample's geometry, masks and stored states the loss relies on (``--quick``)."""
    if args.replay == "tape":
        b, t = args.tape_rows, longest_episode(args)
        learning = sample["validity_mask"]
        assert "learning_mask" not in sample.keys() and bool(sample["is_init"][:, 0].all())
    else:
        b, t = args.batch_size, args.window
        learning = sample["learning_mask"]
        assert not bool(learning[:, : args.burn_in].any()), "burn-in records never learn"
    assert sample.batch_size == (b, t), sample.batch_size
    assert sample[STATES[args.memory][0]].shape[:2] == (b, t)
    assert sample["td_error"].shape == (b, t) and bool((sample["td_error"][~learning] == 0).all())
    assert math.isfinite(float(out["loss"].detach())), out


# ---------------------------------------------------------------------------- training
def train(args: Args, run: runs.Run) -> runs.Result:
    """Trains, evaluates and logs one run (torch's global generator seeded by the caller)."""
    device = torch.device(run.device)
    watch = runs.Stopwatch()
    qnet = make_qnet(args).to(device)
    policy = TensorDictSequential(qnet, QValueModule(action_space="categorical"))
    env = make_env(args, args.num_envs, args.seed, device)
    egreedy = EGreedyModule(env.action_spec, eps_init=1.0, eps_end=args.eps_end).to(device)
    egreedy.eps = epsilons(args, 0).to(device)  # one rate per env, set after every batch
    loss = make_loss(args, qnet)
    target_updater = HardUpdate(loss, value_network_update_interval=args.target_period)
    optim = torch.optim.Adam(loss.value_network_params.values(True, True), lr=args.lr, foreach=True)
    unit, rb = make_buffer(args)
    collector = Collector(
        env,
        TensorDictSequential(policy, egreedy),
        frames_per_batch=args.num_envs * args.steps,
        total_frames=-1,
        device=device,
    )
    recorder = runs.Recorder(run, args, updates=0, curve=[])
    if run.resume:
        runs.load_training_state(recorder.state, loss, optim, env, collector)
        load_replay(rb, recorder.checkpoint / "replay")
        target_updater.counter = recorder.state["target_updater"]
    window = runs.ReturnWindow(args.return_window, args.target, recorder.counters)
    counters, curve = recorder.counters, recorder.counters["curve"]

    def state() -> tuple[dict, dict]:
        saved = runs.training_state(loss, optim, env, collector)
        return {**saved, "target_updater": target_updater.counter}, {"replay": rb.dumps}

    frames, last_loss, batches = recorder.frames, math.nan, iter(collector)
    while frames < args.frames:
        with watch("collect"):
            batch = next(batches)
        if run.quick:
            check_batch(args, batch, first=frames == 0)
        frames += batch.numel()
        stored = (*STORED, *STATES[args.memory], *(PREVIOUS if args.previous_action else ()))
        rb.extend(batch.select(*stored))
        egreedy.eps.copy_(epsilons(args, frames))
        if frames >= args.warmup_frames:
            with watch("update"):
                sample, out = update(args, rb, unit, loss, target_updater, optim, frames, device)
            counters["updates"] += 1
            last_loss = float(out["loss"].detach())
            if run.quick:
                check_sample(args, sample, out)
        done = batch["next", "done"].squeeze(-1)
        returns = batch["next", "episode_reward"].squeeze(-1)[done].tolist()
        curve.append((frames, window.update(returns, frames, recorder.elapsed)))
        if (frames // batch.numel()) % args.log_every == 0 or frames >= args.frames:
            row = {"mean_return": curve[-1][1], "best_mean_return": runs.best_mean(curve)}
            row.update(loss=last_loss, updates=counters["updates"])
            row.update(lr=optim.param_groups[0]["lr"], epsilon=float(egreedy.eps.mean()))
            recorder.log(frames, row, state)
    result = recorder.finish(
        state,
        curve,
        final_eval=evaluate(args, policy, device),
        title=f"R2D2 on POPGym {args.env} ({args.difficulty})",
        label=f"{args.env} {args.difficulty}",
        target=args.target,
        hit=window.hit,
        timings=watch,
    )
    collector.shutdown()
    return result


def load_policy(args: Args, state: dict, device) -> TensorDictSequential:
    """The greedy policy of a checkpoint: ``observation`` and the memory's state to ``action``."""
    qnet = make_qnet(args).to(device)
    make_loss(args, qnet).load_state_dict(state["loss"])
    return TensorDictSequential(qnet, QValueModule(action_space="categorical"))


def acting_env(args: Args, num_envs: int, seed: int, device) -> TransformedEnv:
    """An env the loaded policy acts in: the training env's transforms and the memory's primer."""
    return make_env(args, num_envs, seed, device)


if __name__ == "__main__":
    runs.main(Args, train, quick=QUICK)
