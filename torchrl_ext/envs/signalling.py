"""SignallingEnv: a two-agent referential game on Warp, in TorchRL's multi-agent layout.

TorchRL lays out a multi-agent env as *agent groups*: each group is a nested TensorDict (here
``"speaker"`` and ``"listener"``) holding that group's observation, action and, per agent,
reward; entries shared by every agent (here the done flags) stay at the root. Each group has its
own specs, so groups may observe vectors of different sizes.
"""

from __future__ import annotations

from typing import Literal

import torch
from torchrl.data import Bounded, Categorical, Composite, Unbounded

from torchrl_ext._checks import check_choice, check_int
from torchrl_ext.envs._kernels import signalling as _k
from torchrl_ext.envs.warp_env import WarpEnv, WarpFunctions, state_view

__all__ = ["SignallingEnv"]

RewardMode = Literal["shared", "per_agent"]
GROUPS = ("speaker", "listener")


class SignallingEnv(WarpEnv):
    """Batched speaker-listener signalling game with a delayed answer, simulated in Warp kernels.

    Each episode draws a target in ``{0, ..., V-1}``. Each agent sees its input on its turn only.
    The speaker observes ``V`` entries, ``one_hot(target)`` on step 0 (zeros afterwards), and its
    action at step 0 is a token in ``{0, ..., V-1}``. The listener observes ``V + 1`` entries:
    ``one_hot(token)`` on step 1 only (zeros on every other step) and a last entry that is 1 on
    its answer step, ``delay + 1``. Its action on that step,
    one of ``V``, is its answer; the episode then terminates, so an episode has ``delay + 2``
    steps. With ``delay >= 1`` the token is gone when the answer is due: only a listener with
    memory can beat chance (``1 / V``).

    The reward is 1 on the answer step if the answer equals the target, else 0. With
    ``rewards="shared"`` it is one team reward at the root (``("next", "reward")``); with
    ``rewards="per_agent"`` each group gets its own entry (``("next", "speaker", "reward")`` and
    ``("next", "listener", "reward")``, equal values: the game is fully cooperative). ``done``
    and ``terminated`` are shared, at the root; ``truncated`` is always False.

    Actions are read from ``("speaker", "action")`` and ``("listener", "action")`` (int64,
    ``[num_envs]``); the speaker's action is ignored after step 0 and the listener's before its
    answer step. Each group holds one agent, so group entries have the env's batch shape. Targets
    come from the counter-based stream of ``(seed, env, episode)``; :attr:`target` and
    :attr:`token` are the state (saved by :meth:`state_dict`).

    Args:
        num_envs (int): number of envs.
        device (torch.device or str, optional): device of state and outputs. Defaults to ``"cpu"``.
        seed (int, optional): 64-bit seed. Defaults to ``None`` (drawn from torch's generator).

    Keyword Args:
        vocab (int, optional): ``V``, the number of targets and of tokens (``>= 2``). Defaults
            to ``8``.
        delay (int, optional): steps between the one showing of the token and the answer
            (``>= 0``; 0 answers while the token is visible). Defaults to ``2``.
        rewards (str, optional): ``"shared"`` or ``"per_agent"``. Defaults to ``"per_agent"``.
        dtype (torch.dtype, optional): dtype of observations and rewards. Defaults to
            ``torch.float32``.
        capture (bool, optional): replay recorded Warp graphs. Defaults to ``False``.

    Examples:
        >>> import torch
        >>> from torchrl.envs.utils import check_env_specs
        >>> from torchrl_ext.envs import SignallingEnv
        >>> env = SignallingEnv(4, seed=0, vocab=3, delay=1)
        >>> check_env_specs(env)
        >>> root = env.reset()
        >>> root["speaker", "observation"].shape, root["listener", "observation"].shape
        (torch.Size([4, 3]), torch.Size([4, 4]))
        >>> target = env.target.long()
        >>> root["speaker", "action"] = target  # the token names the target
        >>> root["listener", "action"] = torch.zeros(4, dtype=torch.int64)
        >>> td, root = env.step_and_maybe_reset(root)
        >>> bool((td["next", "listener", "observation"][:, :3].argmax(-1) == target).all())
        True
        >>> td, root = env.step_and_maybe_reset(root)  # the token is gone
        >>> float(td["next", "listener", "observation"][:, :3].sum())
        0.0
        >>> root["listener", "action"] = target  # the answer step
        >>> td, root = env.step_and_maybe_reset(root)
        >>> td["next", "listener", "reward"].flatten().tolist(), bool(td["next", "done"].all())
        ([1.0, 1.0, 1.0, 1.0], True)
    """

    functions = WarpFunctions(_k.start, _k.advance, _k.observe)
    truncates_terminal_steps = False

    def __init__(
        self,
        num_envs: int,
        device: torch.device | str = "cpu",
        seed: int | None = None,
        *,
        vocab: int = 8,
        delay: int = 2,
        rewards: RewardMode = "per_agent",
        dtype: torch.dtype = torch.float32,
        capture: bool = False,
    ) -> None:
        self.vocab = check_int("vocab", vocab, minimum=2, maximum=2**20)
        self.delay = check_int("delay", delay, minimum=0, maximum=2**20)
        self.rewards = check_choice("rewards", rewards, ("shared", "per_agent"))
        # Every episode ends at its answer step, the (delay + 2)-th: terminated, not truncated.
        max_steps = self.delay + 2
        super().__init__(num_envs, device, seed, max_steps=max_steps, dtype=dtype, capture=capture)

    def _make_specs(self) -> None:
        """Per-group observations and actions; a team reward at the root or one per group."""
        n, dev, v = self.num_envs, self.device, self.vocab

        def groups(leaf: str, specs: dict) -> Composite:
            entries = {
                g: Composite({leaf: spec}, shape=(n,), device=dev) for g, spec in specs.items()
            }
            return Composite(entries, shape=(n,), device=dev)

        self.observation_spec = groups(
            "observation",
            {
                "speaker": Bounded(0.0, 1.0, shape=(n, v), dtype=self.dtype, device=dev),
                "listener": Bounded(0.0, 1.0, shape=(n, v + 1), dtype=self.dtype, device=dev),
            },
        )
        action = Categorical(v, shape=(n,), dtype=torch.int64, device=dev)
        self.full_action_spec = groups("action", {g: action.clone() for g in GROUPS})
        reward = Unbounded(shape=(n, 1), dtype=self.dtype, device=dev)
        if self.rewards == "shared":
            self.full_reward_spec = Composite(reward=reward, shape=(n,), device=dev)
        else:
            self.full_reward_spec = groups("reward", {g: reward.clone() for g in GROUPS})

    def _state_arrays(self) -> dict:
        v = self.vocab
        return {"target": (torch.int32, (), (0, v - 1)), "token": (torch.int32, (), (-1, v - 1))}

    def _constants(self) -> dict[str, int]:
        return {"vocab": self.vocab, "delay": self.delay}

    target = state_view("target", "The ``[num_envs]`` int32 targets of the current episodes.")
    token = state_view("token", "The ``[num_envs]`` int32 tokens sent, ``-1`` before step 0.")
