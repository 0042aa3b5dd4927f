"""SignallingEnv: a two-agent referential game on Warp, in TorchRL's multi-agent layout.

TorchRL lays out a multi-agent env as *agent groups*: each group is a nested TensorDict (here
``"speaker"`` and ``"listener"``) holding that group's observation, action and, per agent,
reward; entries shared by every agent (here the done flags) stay at the root. Each group has its
own specs, so groups may observe vectors of different sizes.
"""

from __future__ import annotations

from typing import Any, Literal

import torch
import warp as wp
from tensordict import TensorDict, TensorDictBase
from torchrl.data import Bounded, Categorical, Composite, Unbounded
from torchrl.envs import EnvBase

from torchrl_ext._checks import check_choice, check_int, check_tensor
from torchrl_ext.envs._kernels import signalling as _k
from torchrl_ext.envs._kernels.common import make_struct
from torchrl_ext.envs.warp_env import Launch, WarpEnv, _live_view, _require

__all__ = ["SignallingEnv"]

RewardMode = Literal["shared", "per_agent"]
GROUPS = ("speaker", "listener")


def _nested(source: dict) -> dict:
    """``{("g", "k"): v, "k": v}`` -> ``{"g": {"k": v}, "k": v}`` (one level of nesting)."""
    out: dict[str, Any] = {}
    for key, val in source.items():
        if isinstance(key, tuple):
            out.setdefault(key[0], {})[key[1]] = val
        else:
            out[key] = val
    return out


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

    _saved_arrays = ("target", "token")

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
        # set while step_and_maybe_reset holds both groups' actions checked in the joint buffer
        self._actions_loaded = False
        super().__init__(num_envs, device, seed, max_steps=None, dtype=dtype, capture=capture)
        self._set_group_specs()
        self._action_leaf_key = ("listener", "action")  # what the base fetches; see _load_action

    @property
    def episode_length(self) -> int:
        """Steps per episode: ``delay + 2``."""
        return self.delay + 2

    # ------------------------------------------------------------------ specs
    def _make_specs(self) -> None:
        """Group observation specs, and the base's one-leaf action and reward buffers.

        The base allocates one action buffer and one reward buffer from single-leaf specs: the
        joint action ``[N, 2]`` (speaker token, listener answer) and the team reward ``[N, 1]``
        the kernels use. :meth:`_set_group_specs` then replaces them with the per-group specs
        TorchRL sees.
        """
        n, dev, v = self.num_envs, self.device, self.vocab
        obs = {
            "speaker": Bounded(0.0, 1.0, shape=(n, v), dtype=self.dtype, device=dev),
            "listener": Bounded(0.0, 1.0, shape=(n, v + 1), dtype=self.dtype, device=dev),
        }
        self.observation_spec = Composite(
            {g: Composite(observation=spec, shape=(n,), device=dev) for g, spec in obs.items()},
            shape=(n,),
            device=dev,
        )
        self.action_spec = Categorical(v, shape=(n, 2), dtype=torch.int64, device=dev)
        self.reward_spec = Unbounded(shape=(n, 1), dtype=self.dtype, device=dev)

    def _set_group_specs(self) -> None:
        n, dev = self.num_envs, self.device
        action = Categorical(self.vocab, shape=(n,), dtype=torch.int64, device=dev)
        self.full_action_spec = Composite(
            {g: Composite(action=action.clone(), shape=(n,), device=dev) for g in GROUPS},
            shape=(n,),
            device=dev,
        )
        reward = Unbounded(shape=(n, 1), dtype=self.dtype, device=dev)
        if self.rewards == "shared":
            rewards = Composite(reward=reward, shape=(n,), device=dev)
        else:
            rewards = Composite(
                {g: Composite(reward=reward.clone(), shape=(n,), device=dev) for g in GROUPS},
                shape=(n,),
                device=dev,
            )
        self.full_reward_spec = rewards

    # ------------------------------------------------------------------ state
    def _allocate_state(self) -> None:
        n, dev = self.num_envs, self.device
        self._target = torch.zeros(n, dtype=torch.int32, device=dev)
        self._token = torch.full((n,), -1, dtype=torch.int32, device=dev)
        self._game = make_struct(
            _k.Game,
            target=wp.from_torch(self._target),
            token=wp.from_torch(self._token),
            episodes=self.buffers["episodes"],
            delay=self.delay,
        )

    target = _live_view("_target", "The ``[num_envs]`` int32 targets of the current episodes.")
    token = _live_view("_token", "The ``[num_envs]`` int32 tokens sent, ``-1`` before step 0.")

    def _check_state_values(self, state: dict[str, torch.Tensor]) -> None:
        super()._check_state_values(state)
        v = self.vocab
        target, token = state["target"], state["token"]
        ok = (target >= 0) & (target < v)
        _require("target", target, ok, f"targets lie in [0, {v})")
        ok = (token >= -1) & (token < v)
        _require("token", token, ok, f"tokens lie in [-1, {v})")

    # ------------------------------------------------------------------ kernels
    def _observations(self, which: str) -> list[wp.array]:
        obs = self.buffers[which]
        return [obs[("speaker", "observation")], obs[("listener", "observation")]]

    def _reset_launches(self) -> list[Launch]:
        inputs = [self._game, self.buffers["mask"], *self._observations("root")]
        return [(_k.signalling_reset, inputs)]

    def _step_launches(self, autoreset: bool) -> list[Launch]:
        slots = self._slots
        inputs = [self._game, self.buffers["action"], int(autoreset)]
        observations = [*self._observations("next"), *self._observations("root")]
        return [(_k.signalling_step, [*inputs, *observations, slots["reward"], slots["flags"]])]

    # ------------------------------------------------------------------ group actions and rewards
    # WarpEnv reads one action leaf into one buffer and hands out one reward: the methods below
    # load both groups' actions into the joint buffer before the base steps, and place the team
    # reward where the reward specs say.
    def _load_group_actions(self, tensordict: TensorDictBase) -> None:
        """Check both groups' actions, then copy them into the joint action buffer."""
        actions = []
        for group in GROUPS:
            key = (group, "action")
            action = tensordict.get(key, None)
            if action is None:
                raise ValueError(
                    f"the input tensordict has no {'.'.join(key)} entry; set both groups' actions."
                )
            actions.append(self._checked_action(key, action))
        joint = self._t["action"]
        for column, action in enumerate(actions):
            joint[:, column].copy_(action)

    def _checked_action(self, key: tuple, action: Any) -> torch.Tensor:
        name = ".".join(key)
        check_tensor(name, action, torch.int64, [(self.num_envs,)], self.device)
        low, high = (int(x) for x in torch.aminmax(action))
        if low < 0 or high >= self.vocab:
            bad = low if low < 0 else high
            raise ValueError(f"{name} entries must lie in [0, {self.vocab}), got an entry {bad}.")
        return action

    def _load_action(self, action: Any) -> None:
        """Accept the step: the base hands one leaf; both groups' actions are already loaded."""
        if not self._actions_loaded:
            raise RuntimeError("SignallingEnv steps only through step() or step_and_maybe_reset().")
        self._actions_loaded = False

    def _step(self, tensordict: TensorDictBase) -> TensorDictBase:
        if self._actions_loaded:  # step_and_maybe_reset loaded them, then fell back to TorchRL's
            self._actions_loaded = False
        else:
            self._load_group_actions(tensordict)
        return self._step_loaded()

    def _step_and_maybe_reset(
        self, tensordict: TensorDictBase
    ) -> tuple[TensorDictBase, TensorDictBase]:
        """Load both groups' actions once, for the base's fused step or TorchRL's step it runs."""
        self._load_group_actions(tensordict)
        self._actions_loaded = True
        try:
            return super()._step_and_maybe_reset(tensordict)
        finally:
            self._actions_loaded = False

    def rand_action(self, tensordict: TensorDictBase | None = None) -> TensorDictBase:
        """Write uniform random actions of both groups into ``tensordict`` (or a new one).

        Args:
            tensordict (TensorDictBase, optional): where the actions are written. Defaults to
                ``None`` (a new TensorDict holding only the actions).

        Returns:
            ``tensordict`` (or the new TensorDict) with fresh random actions.
        """
        return EnvBase.rand_action(self, tensordict)

    def _make_td(self, source: dict) -> TensorDict:
        """A TensorDict of the env's fresh outputs; the team reward placed per :attr:`rewards`."""
        reward = source.pop("reward", None)
        if reward is not None and self.rewards == "per_agent":
            source[("speaker", "reward")] = reward
            source[("listener", "reward")] = reward.clone()
        elif reward is not None:
            source["reward"] = reward
        n = self.batch_size
        nested = {
            key: TensorDict._new_unsafe(val, batch_size=n, device=self.device)
            if isinstance(val, dict)
            else val
            for key, val in _nested(source).items()
        }
        return TensorDict._new_unsafe(nested, batch_size=n, device=self.device)
