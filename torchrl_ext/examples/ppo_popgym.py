"""Recurrent PPO on POPGym's memory tasks, the Warp ports of :mod:`torchrl_ext.envs.popgym`.

Run it with ``python -m torchrl_ext.examples popgym --env RepeatPrevious --difficulty easy
[--seeds 0 1 2] [--frames N] [KEY=VALUE ...]``.

The training loop is the one of :mod:`~torchrl_ext.examples.ppo_cartpole` (separate actor and
critic LSTMs, :class:`~torchrl_ext.objectives.RecurrentGAE` over whole rows, env-major
minibatches, TorchRL's ``ClipPPOLoss``); this module supplies what differs per task:

* the env: a POPGym port with ``StepCounter``, ``InitTracker``, ``RewardSum``,
  :class:`~torchrl_ext.envs.transforms.PreviousAction` (the previous step's action, which the
  networks read with the observation, as POPGym's baselines do) and the LSTMs' primers;
* the networks' inputs: POPGym observations are discrete (a card, a board of cell states)
  or continuous; discrete components are one-hot encoded inside the networks
  (:class:`~torchrl_ext.examples._popgym.ObservationEncoder`), continuous ones pass through;
* the action distribution, from the action spec: a categorical, independent categoricals over
  the components of a multi-discrete action (a board's row and column), or a tanh-squashed
  normal for a bounded continuous action.

POPGym scales its rewards so that the best return of an episode is 1 and the worst about -1.
The logged ``best_mean_return`` (the highest mean return over the last ``return_window`` = 100
completed episodes) is the paper's MMER, the maximum mean episodic reward, which RLlib reports
over its default 100-episode window.
"""

from __future__ import annotations

import argparse
from typing import Any

import torch
from tensordict.nn import NormalParamExtractor, TensorDictModule, TensorDictSequential
from torchrl.data import Bounded, Categorical, MultiCategorical, TensorSpec
from torchrl.envs import Compose, StepCounter, TransformedEnv
from torchrl.modules import ProbabilisticActor, TanhNormal

from torchrl_ext.examples import _common, _popgym, _popgym_configs, ppo_cartpole
from torchrl_ext.examples._popgym_paper import reference
from torchrl_ext.examples.ppo_cartpole import ACTOR_STATE, CRITIC_STATE, Result, Task
from torchrl_ext.modules import LSTMModule

# The run's config (each env's), its defaults and its --quick overrides live in the torch-free
# _popgym_configs, so that the command line builds the config, and refuses a bad one, before
# importing this module.
Config, RepeatFirstConfig = _popgym_configs.PPOPopGymConfig, _popgym_configs.RepeatFirstConfig
MultiarmedBanditConfig = _popgym_configs.MultiarmedBanditConfig
CONFIGS, config_class = _popgym_configs.CONFIGS, _popgym_configs.config_class
SIZE, LEARNING = _popgym_configs.PPO_POPGYM_SIZE, _popgym_configs.PPO_POPGYM_LEARNING
QUICK = _popgym_configs.PPO_POPGYM_QUICK


# ---------------------------------------------------------------------------- env
def make_env(
    cfg: Config, num_envs: int, seed: int, primers: list[Any], device: torch.device
) -> TransformedEnv:
    """The port with episode tracking, the returns' sum and the LSTMs' state primers."""
    base = _popgym.make_base_env(cfg, num_envs, seed, device)
    transforms = [StepCounter(), *_popgym.make_transforms(cfg)]
    if cfg.reward_scale != 1.0:
        from torchrl.envs import RewardScaling

        transforms.append(RewardScaling(loc=0.0, scale=cfg.reward_scale))
    transforms += [m.make_tensordict_primer() for m in primers if isinstance(m, LSTMModule)]
    return TransformedEnv(base, Compose(*transforms).to(device))


# ---------------------------------------------------------------------------- model
class IndependentCategorical(torch.distributions.Independent):
    """Independent categoricals, one per component of a multi-discrete action.

    Args:
        logits (torch.Tensor): ``[*batch, components * n]`` logits, ``n`` per component.
        components (int): the action's components (all of ``n`` choices).

    Examples:
        >>> dist = IndependentCategorical(torch.zeros(3, 2 * 4), components=2)
        >>> dist.sample().shape, dist.log_prob(torch.zeros(3, 2, dtype=torch.long))
        (torch.Size([3, 2]), tensor([-2.7726, -2.7726, -2.7726]))
        >>> dist.mode.shape
        torch.Size([3, 2])
    """

    def __init__(self, logits: torch.Tensor, components: int) -> None:
        logits = logits.unflatten(-1, (components, -1))
        super().__init__(torch.distributions.Categorical(logits=logits), 1)

    @property
    def mode(self) -> torch.Tensor:
        """Each component's most likely choice."""
        return self.base_dist.mode

    @property
    def deterministic_sample(self) -> torch.Tensor:
        """The mode (what TorchRL's deterministic exploration takes)."""
        return self.mode


def policy_head(cfg: Config, action: TensorSpec) -> tuple[int, dict[str, Any]]:
    """Outputs of the actor's head and ``ProbabilisticActor``'s keywords for ``action``."""
    if isinstance(action, Categorical) and not isinstance(action, MultiCategorical):
        dist = {"in_keys": ["logits"], "distribution_class": torch.distributions.Categorical}
        return action.n, dist
    if isinstance(action, MultiCategorical):
        nvec = action.nvec.reshape(-1, action.nvec.shape[-1])[0]
        components, n = len(nvec), int(nvec[0])
        dist = {
            "in_keys": ["logits"],
            "distribution_class": IndependentCategorical,
            "distribution_kwargs": {"components": components},
        }
        return components * n, dist
    if isinstance(action, Bounded):
        low, high = action.space.low.reshape(-1)[:1], action.space.high.reshape(-1)[:1]
        dist = {
            "in_keys": ["loc", "scale"],
            "distribution_class": TanhNormal,
            "distribution_kwargs": {"low": low, "high": high},
        }
        return 2 * action.shape[-1], dist
    raise TypeError(f"no policy head for an action spec of type {type(action).__name__}.")


def make_agent(cfg: Config) -> tuple[ProbabilisticActor, TensorDictSequential]:
    """Actor and critic, each an encoder, its own memory and a head."""
    outputs, dist = policy_head(cfg, _popgym.task_specs(cfg)[1])

    def trunk(role: str, state: tuple[str, str]) -> list[Any]:
        encode, features = _popgym.input_module(cfg)
        memory = ppo_cartpole.make_memory(cfg, features, f"{role}_embed", state, in_key="features")
        if isinstance(memory, LSTMModule):
            _popgym.set_forget_bias(memory.lstm, cfg.forget_bias)
        return [encode, memory]

    head = ppo_cartpole.make_head(cfg, outputs, "actor_embed", "logits")
    if dist["in_keys"] == ["loc", "scale"]:
        split = TensorDictModule(
            NormalParamExtractor(), in_keys=["logits"], out_keys=["loc", "scale"]
        )
        head = TensorDictSequential(head, split)
    actor = ProbabilisticActor(
        TensorDictSequential(*trunk("actor", ACTOR_STATE), head), return_log_prob=True, **dist
    )
    critic_head = ppo_cartpole.make_head(cfg, 1, "critic_embed", "state_value")
    critic = TensorDictSequential(*trunk("critic", CRITIC_STATE), critic_head)
    return actor, critic


def memories(actor: ProbabilisticActor, critic: TensorDictSequential) -> list[Any]:
    """The LSTMs of actor and critic, whose primers the env needs."""
    return [m for net in (actor, critic) for m in net.modules() if isinstance(m, LSTMModule)]


def task(cfg: Config) -> Task:
    """The POPGym task of ``cfg`` for :func:`~torchrl_ext.examples.ppo_cartpole.train`."""
    title = f"PPO on POPGym {cfg.env} ({cfg.difficulty})"
    return Task(make_env, make_agent, title, memories)


# ---------------------------------------------------------------------------- command line
def train(cfg: Config, run: Any, *, quick: bool = False) -> Result:
    """Trains, evaluates and logs one run (see :func:`ppo_cartpole.train`)."""
    return ppo_cartpole.train(cfg, run, quick=quick, task=task(cfg))


def summary(result: Result) -> str:
    """The run's MMER against the paper's, its evaluation and where the time went."""
    cfg = result.config
    paper = reference(cfg.env, cfg.difficulty)
    against = "" if paper is None else f" (paper: {paper:.3f})"
    times = ", ".join(f"{name} {sec:.1f} s" for name, sec in result.timings.items())
    return (
        f"popgym {cfg.env} {cfg.difficulty} seed {cfg.seed}: MMER {result.best_return:.3f}"
        f"{against}; deterministic evaluation {result.final_eval:.3f} over "
        f"{cfg.eval_episodes} episodes; {result.frames:,} frames in {result.seconds:.1f} s "
        f"({times}); log: {result.out}"
    )


def main(args: argparse.Namespace) -> list[Result]:
    """Runs ``python -m torchrl_ext.examples popgym`` (see ``--help``)."""
    fields = {"env": args.env, "difficulty": args.difficulty}
    config = config_class(args.env)
    return _common.train_seeds(args, args.pipeline, train, summary, config, QUICK, **fields)
