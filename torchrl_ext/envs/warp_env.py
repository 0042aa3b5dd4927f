"""WarpEnv: the TorchRL contract for batched simulations whose state lives in Warp arrays.

An env is its specs, its per-env state and three Warp functions; the base generates the kernels
around them and owns everything that is not physics: the done flags and time limit, the reset
mask, per-env seeding, the fused auto-reset, graph capture and the ``[N, T]`` rollout.

The class reads in the order an author meets it: the constructor, the authoring contract (what a
subclass writes), then TorchRL's ``EnvBase`` face (``_step``, ``_reset``, the fused
``_step_and_maybe_reset``, ``rollout``, ``rand_action``, ``to``, ``_set_seed``), then saving.
Each step method is a few lines that hand the mechanics to collaborators in
:mod:`torchrl_ext.envs._base`, each owning its state: the buffers and the fresh outputs made of
them (``layout.Layout``), the kernels generated from the functions (``generated``, ``kernels``),
launching and graphs (``launcher.Launcher``), action loading (``actions``), the fused step's next
root (``fused``), the rollout's outputs (``rollout``) and saved state (``state_dicts``).
"""

from __future__ import annotations

import collections
from collections.abc import Mapping
from typing import Any, ClassVar

import torch
import warp as wp
from tensordict import TensorDictBase
from torchrl.envs import EnvBase

from torchrl_ext._checks import check_bool, check_int, check_optional_int
from torchrl_ext._compat import (
    env_reset_check_done,
    env_step_and_maybe_reset,
    has_post_step_hooks,
    new_tensordict_unchecked,
    set_unchecked,
)
from torchrl_ext.envs._base import actions, fused, generated, state_dicts
from torchrl_ext.envs._base.arguments import check_device, check_float_dtype, check_seed
from torchrl_ext.envs._base.generated import (
    GeneratedPhysics,
    WarpFunctions,
    declared_arrays,
    state_view,
)
from torchrl_ext.envs._base.launcher import Launch, Launcher
from torchrl_ext.envs._base.layout import Layout, done_groups, done_spec
from torchrl_ext.envs._base.rollout import rollout_outputs, rollout_td
from torchrl_ext.envs._kernels.common import (
    gaussian_pair,
    stream_key,
    uniform64,
    uniform_int,
    uniform_range,
)

# Warp helpers for an env's functions: draws from the random stream of a key the functions get
# (and, for hand-written kernels, the key of an episode's stream).
__all__ = [
    "WarpEnv",
    "WarpFunctions",
    "gaussian_pair",
    "state_view",
    "stream_key",
    "uniform64",
    "uniform_int",
    "uniform_range",
]

_NO_LIMIT = 2**31 - 1


class WarpEnv(EnvBase):
    """Base class of batched TorchRL envs simulated by Warp kernels, with fused masked auto-reset.

    **Writing an env.** A subclass declares

    * its specs, in :meth:`_make_specs`: ``observation_spec``, ``action_spec`` and
      ``reward_spec`` (shapes start with ``num_envs``). Nested keys lay out agent groups as
      TorchRL's multi-agent envs do; every action entry is loaded, every reward entry written;
    * its per-env state, in :meth:`_state_arrays`: ``name -> dtype`` or ``(dtype, shape)``
      (``float`` stands for the env's float dtype); the base allocates ``[num_envs, *shape]``
      arrays, saves and restores them, and pickles them;
    * its constants, in :meth:`_constants` (floats in the env's dtype, ints), passed by value;
    * three ``wp.func`` functions, ``functions = WarpFunctions(start, advance, observe)``, each
      about one env ``i``. They receive the state, the constants, and Warp structs of per-env
      arrays whose fields are named after the keys (nested keys joined with ``_``; a trailing
      singleton dim dropped), and a ``key`` naming a random stream of their own:

      - ``start(state, params, i, key)``: begin an episode of env ``i``; ``key`` is the stream
        of ``(seed, i, episode)``;
      - ``advance(state, params, actions, i, step, key) -> (reward, terminated)``: one step of
        env ``i`` under ``actions.<leaf>[i]``; ``step`` counts its episode's steps so far and
        ``key`` is the stream of ``(seed, i, episode, step)``. The reward is written into every
        reward entry, or, for an env with ``rewards_per_entry``, it is a vector
        (``wp.vec2(...)`` for two entries) with entry ``k`` for reward entry ``k``;
      - ``observe(state, params, obs, i, step, key)``: write ``obs.<key>[i, ...]``, the
        observation after ``step`` steps; ``key`` is that observation's own stream, so
        observing a state twice gives the same noise.

      An env numbers its draws from a key itself: :func:`uniform64`, :func:`uniform_range`,
      :func:`uniform_int`, :func:`gaussian_pair` (Box-Muller) give the ``draw``-th value of a
      stream. The float draws are ``float64``: convert one with the array's own type,
      ``s.x.dtype(...)``, which holds at both float dtypes. No key belongs in the state.

    The base generates the reset and ``T``-step kernels around them
    (:mod:`torchrl_ext.envs._base.kernels`): step counting and truncation, the three flags, the
    fused auto-reset, the rollout, seeding and masked reset. An env that needs a hand-written
    kernel instead implements :meth:`_allocate_state`, :meth:`_reset_launches` and
    :meth:`_step_launches` (one step on the step buffers of :attr:`buffers`). Mistakes in the
    functions (a misspelled field, a wrong argument count, an ``advance`` that does not return
    ``(reward, terminated)``) are refused at construction, naming the function and the field
    (:mod:`torchrl_ext.envs._base.authoring`).

    **What every env gets**: ``done``/``terminated``/``truncated`` at the root and a time limit
    (``max_steps``, gymnasium's ``TimeLimit`` semantics); masked ``reset(td)`` with a
    ``"_reset"`` entry; per-env seeding from ``(seed, env, episode)``; the fused auto-reset of
    :meth:`step_and_maybe_reset` (fresh outputs, ``("next", obs)`` the true final observation);
    graph capture (``capture=True``); the one-kernel policy-free :meth:`rollout`; and
    :meth:`state_dict` / :meth:`load_state_dict`, ``pickle`` and ``copy.deepcopy`` of the whole
    simulation state, after which the env continues bitwise.

    Args:
        num_envs (int): number of simulated envs (the batch size).
        device (torch.device or str, optional): where state and outputs live. Defaults to ``"cpu"``.
        seed (int, optional): 64-bit seed, in ``[0, 2**64)``. Defaults to ``None`` (drawn from
            torch's global generator, which is read but never seeded).

    Keyword Args:
        max_steps (int, optional): the most steps an episode runs: the step that reaches it is
            truncated (gymnasium's ``TimeLimit``). An env whose own rules end every episode
            within some number of steps passes that number, and reports such an end as
            terminated only (:attr:`truncates_terminal_steps`). ``None``: no bound. Defaults to
            ``None``.
        dtype (torch.dtype, optional): float dtype of state, observations and rewards
            (``torch.float32`` or ``torch.float64``). Defaults to ``torch.float32``.
        capture (bool, optional): replay recorded Warp graphs instead of launching kernels one by
            one. Defaults to ``False``.

    Examples:
        >>> from typing import Any
        >>> import torch
        >>> import warp as wp
        >>> from torchrl.data import Bounded, Composite, Unbounded
        >>> from torchrl_ext.envs.warp_env import WarpEnv, WarpFunctions, uniform_range
        >>> @wp.func
        ... def start(s: Any, p: Any, i: int, key: wp.uint32):
        ...     s.x[i] = s.x.dtype(uniform_range(key, 0, wp.float64(-1.0), wp.float64(1.0)))
        >>> @wp.func
        ... def advance(s: Any, p: Any, a: Any, i: int, step: int, key: wp.uint32):
        ...     s.x[i] = s.x[i] + p.dt * a.action[i]
        ...     return -s.x[i] * s.x[i], wp.abs(s.x[i]) > 2.0
        >>> @wp.func
        ... def observe(s: Any, p: Any, o: Any, i: int, step: int, key: wp.uint32):
        ...     o.observation[i] = s.x[i]
        >>> class Drift(WarpEnv):
        ...     functions = WarpFunctions(start, advance, observe)
        ...     def _make_specs(self):
        ...         n = self.num_envs
        ...         obs = Unbounded((n, 1), dtype=self.dtype)  # float entries in the env's dtype
        ...         self.observation_spec = Composite(observation=obs, shape=(n,))
        ...         self.action_spec = Bounded(-1.0, 1.0, shape=(n, 1), dtype=self.dtype)
        ...         self.reward_spec = Unbounded((n, 1), dtype=self.dtype)
        ...     def _state_arrays(self):
        ...         return {"x": float}
        ...     def _constants(self):
        ...         return {"dt": 0.5}
        >>> env = Drift(4, seed=0, max_steps=8)
        >>> data = env.rollout(20, break_when_any_done=False)
        >>> data["next", "observation"].shape, bool(data["next", "done"].any())
        (torch.Size([4, 20, 1]), True)
    """

    #: The Warp functions of the env (``None``: the env gives hand-written kernels).
    functions: ClassVar[WarpFunctions | None] = None
    #: Whether a step that terminates at the time limit is truncated too: gymnasium's
    #: ``TimeLimit`` does so; envs that count their own horizon (POPGym's) report it as
    #: terminated only.
    truncates_terminal_steps: ClassVar[bool] = True
    #: Whether ``advance`` returns one reward per reward entry, a Warp vector of ``L`` values in
    #: the order of the reward spec's leaves (``reward_keys``), instead of one reward for all.
    rewards_per_entry: ClassVar[bool] = False

    def __init__(
        self,
        num_envs: int,
        device: torch.device | str = "cpu",
        seed: int | None = None,
        *,
        max_steps: int | None = None,
        dtype: torch.dtype = torch.float32,
        capture: bool = False,
    ) -> None:
        num_envs = check_int("num_envs", num_envs, minimum=1)
        device = check_device(device)
        dtype = check_float_dtype(dtype)
        capture = check_bool("capture", capture)
        limit = check_optional_int("max_steps", max_steps, minimum=1, maximum=_NO_LIMIT)
        seed = check_seed(seed)
        wp.init()
        if wp.device_from_torch(device).is_capturing:
            raise RuntimeError(
                f"{type(self).__name__} was constructed while a Warp graph capture is active on "
                f"{device}; build the env outside the capture (it allocates and loads kernels)."
            )
        super().__init__(device=device, batch_size=torch.Size([num_envs]))
        self.num_envs = num_envs
        self.max_steps = max_steps
        self._limit = _NO_LIMIT if limit is None else limit
        self._dtype = dtype
        self._sync_free = device.type == "cuda"
        self._action_faults = torch.zeros((), dtype=torch.bool, device=device)
        self._make_specs()
        groups = self._done_groups()
        self.full_done_spec = done_spec(num_envs, device, groups)
        self._layout = Layout(
            self.observation_spec,
            self.full_action_spec,
            self.full_reward_spec,
            groups,
            device,
        )
        self._physics = self._generated_physics()
        self._launcher = Launcher(device, num_envs, self._recipes, capture)
        if self._physics is None:
            known = set(self.__dict__)
            self._allocate_state()
            self._allocated = sorted(set(self.__dict__) - known)  # allocated again by a copy
        self._set_seed(seed)

    # ------------------------------------------------------------------ authoring contract
    def _make_specs(self) -> None:
        """Set ``observation_spec``, ``action_spec`` and ``reward_spec`` (shapes start with N)."""
        raise NotImplementedError(f"{type(self).__name__} must implement _make_specs().")

    def _state_arrays(self) -> dict[str, Any]:
        """The per-env state: ``name -> dtype``, ``(dtype, shape)`` or ``(dtype, shape, range)``.

        ``float``: the env dtype; ``range``: ``(low, high)`` (included), checked on loading.
        """
        return {}

    def _last_step(self) -> int:
        """The most steps an episode counts: ``max_steps``, or the counters' bound.

        The kernels stop counting there (:mod:`~torchrl_ext.envs._base.kernels`) and loading
        accepts up to it, so that every state a run makes loads back.
        """
        return min(self._limit, state_dicts.LAST_COUNT)

    def _constants(self) -> dict[str, float | int | bool]:
        """Named constants the Warp functions read from ``params`` (floats in the env dtype)."""
        return {}

    def _check_state_values(self, state: dict[str, torch.Tensor]) -> None:
        """Raise ``ValueError`` for values no run of this env reaches (e.g. an index out of range).

        ``state`` has the keys, dtypes and shapes of :meth:`state_dict`. The base checks its
        counters, the seed, finite floats and the ranges of :meth:`_state_arrays`; envs extend
        this for more (a permutation), so that no loaded state makes a kernel read out of bounds.
        """
        state_dicts.check_base_values(state, self._last_step())
        state_dicts.check_ranges(state, generated.declared_ranges(self._state_arrays()))

    def _allocate_state(self) -> None:
        """Hand-written kernels only: allocate the state (Warp arrays on :attr:`warp_device`).

        A copy (pickle, deepcopy) calls it again and loads :meth:`state_dict`, so
        :meth:`_state_tensors` must hold everything that determines future steps.
        """
        raise NotImplementedError(
            f"{type(self).__name__} must set functions, or implement "
            "_allocate_state(), _reset_launches() and _step_launches()."
        )

    def _reset_launches(self) -> list[Launch]:
        """Kernels resetting the envs with a nonzero ``buffers["mask"]`` entry.

        They must leave unmasked envs' state untouched and write every env's current observation
        into ``buffers["root"][key]``. Generated envs get this from their functions.
        """
        return self._physics.reset_recipes()

    def _step_launches(self, autoreset: bool) -> list[Launch]:
        """Kernels of one step; with ``autoreset`` they also reset done envs and write root obs.

        Hand-written kernels read the action from ``buffers["action"]``, write
        ``buffers["next"][key]``, ``buffers["reward"]`` and the three flags, count steps against
        ``max_steps`` (``2**31 - 1`` standing for none) and begin the done envs' next episode on
        ``buffers["episodes"]``.
        Generated envs get this, and the ``T``-step rollout, from their functions.
        """
        return self._physics.step_recipes(autoreset)

    def _random_actions(self, steps: int) -> dict[Any, torch.Tensor]:
        """``[N, T, ...]`` random actions per action entry, for the policy-free :meth:`rollout`.

        The base draws ``spec.rand((T,))`` from torch's global generator (``MultiCategorical``
        entries in one uniform draw: TorchRL's draws each column apart) and returns its
        env-major view; an env may override it to draw the same distribution faster.
        """
        return {
            key: actions.draw_steps(self.full_action_spec[key], steps).movedim(0, 1)
            for key in self._layout.action_keys
        }

    def _present(self, outputs: TensorDictBase) -> TensorDictBase:
        """The env's fresh outputs as its specs present them (here: as the kernels wrote them).

        Every output goes through it once: a step's, a reset's, the fused step's ``"next"`` and
        next root, the policy-free rollout's. An env whose public specs differ from what its
        kernels write (one-hot observations over category indices) converts here, in place or
        into a new TensorDict; :meth:`_kernel_actions` is its inverse for actions.
        """
        return outputs

    def _kernel_actions(self, tensordict: TensorDictBase) -> TensorDictBase:
        """The step's actions as the kernels read them (here: as given).

        Runs before the actions are checked and loaded; an env that presents its actions in
        another layout (one-hot) returns their kernel layout, refusing malformed ones first.
        """
        return tensordict

    def _repr_options(self) -> dict[str, Any]:
        """The env's own constructor choices :func:`repr` shows after the device (none here).

        An env sized by an option (a difficulty, a mode) returns it here, ``name -> value``.
        """
        return {}

    # ------------------------------------------------------------------ public helpers
    @property
    def dtype(self) -> torch.dtype:
        """Float dtype of state, observations and rewards."""
        return self._dtype

    @property
    def warp_device(self) -> wp.context.Device:
        """The Warp device the kernels run on."""
        return self._launcher.wp_device

    @property
    def capture(self) -> bool:
        """Whether steps and resets replay recorded Warp graphs."""
        return self._launcher.capture

    @property
    def buffers(self) -> dict[str, Any]:
        """Warp views of the env-owned buffers hand-written kernels read and write.

        Keys: ``"actions"`` and ``"rewards"`` (by entry key; ``"action"`` and ``"reward"`` when
        there is one), ``"mask"`` (int32 reset mask), ``"seed"`` (two uint32 words), ``"steps"``
        and ``"episode"`` (int32 counters), ``"episodes"`` (the last three as one Warp struct),
        ``"done"``, ``"terminated"``, ``"truncated"`` (``[N]``) and ``"flags"`` (the three as one
        Warp struct of ``[N, 1]`` views), and ``"next"``/``"root"``: dicts of observation
        buffers.
        """
        return self._layout.views

    @property
    def seed(self) -> int:
        """The current 64-bit seed."""
        return self._seed

    @property
    def sync_free(self) -> bool:
        """Whether the step path reads nothing back from the device (default: True on CUDA).

        A host read waits for every queued kernel and cannot be recorded in a CUDA graph. When
        ``True``, :meth:`step`, :meth:`step_and_maybe_reset` and :meth:`rollout` keep every flag
        on the device: action values are checked on the device (a bad action sets
        :attr:`action_fault`; :meth:`check_actions` raises), the auto-reset merge decides on the
        device, and a course regeneration outside a graph runs unconditionally (its kernels
        return early for unmasked envs). Outputs are bitwise the same either way. Set it to
        ``True`` on the CPU to run the CUDA step path there.
        """
        return self._sync_free

    @sync_free.setter
    def sync_free(self, value: bool) -> None:
        self._sync_free = check_bool("sync_free", value)

    @property
    def action_fault(self) -> torch.Tensor:
        """0-dim bool on the env's device: an action the env cannot step was loaded (live view).

        Set by steps with :attr:`sync_free` on, cleared by :meth:`check_actions`.
        """
        return self._action_faults

    def check_actions(self) -> None:
        """Raise ``ValueError`` if a step since the last call loaded an action it cannot step.

        With :attr:`sync_free` on, steps check action values on the device only; this reads the
        result back (one host synchronisation, at a time you choose) and clears it.

        Raises:
            ValueError: if :attr:`action_fault` is set (it is cleared first).

        Examples:
            >>> import torch
            >>> from torchrl_ext.envs import PendulumEnv
            >>> env = PendulumEnv(2, seed=0)
            >>> env.sync_free = True  # the CUDA step path: no host read in the step
            >>> td = env.reset()
            >>> td["action"] = torch.full((2, 1), float("nan"))
            >>> _ = env.step(td)
            >>> try:
            ...     env.check_actions()
            ... except ValueError as err:
            ...     print("check_actions" in str(err))
            True
        """
        if not bool(self._action_faults):
            return
        self._action_faults.zero_()
        raise ValueError(
            f"an action loaded by a step since the last check_actions() held values "
            f"{type(self).__name__} cannot step (see its action spec, e.g. NaN); the envs that "
            "got it may hold invalid state: reset them."
        )

    def __repr__(self) -> str:
        """The class, ``num_envs``, device, the env's own options, ``max_steps`` and the seed.

        Examples:
            >>> from torchrl_ext.envs import CartPoleEnv
            >>> CartPoleEnv(4, seed=0, max_steps=200)
            CartPoleEnv(num_envs=4, device=cpu, max_steps=200, seed=0)
        """
        fields = [f"num_envs={self.num_envs}", f"device={self.device}"]
        fields += [f"{name}={value!r}" for name, value in self._repr_options().items()]
        fields += [f"max_steps={self.max_steps!r}", f"seed={self._seed}"]
        return f"{type(self).__name__}({', '.join(fields)})"

    # ------------------------------------------------------------------ TorchRL's EnvBase face
    def _step(self, tensordict: TensorDictBase) -> TensorDictBase:
        """One step of every env: load the actions, launch the step, hand out fresh outputs."""
        self._load_actions(tensordict)
        self._launcher.run("step")
        return self._present(self._layout.next_td())

    def _reset(self, tensordict: TensorDictBase | None = None, **kwargs: Any) -> TensorDictBase:
        """Reset the envs of the ``"_reset"`` entry (every env without one); fresh root outputs."""
        mask = None if tensordict is None else tensordict.get("_reset", None)
        self._layout.load_reset_mask(mask)
        self._launcher.run("reset")
        return self._present(self._layout.root_td())

    def _reset_check_done(self, tensordict: Any, tensordict_reset: Any) -> None:
        """TorchRL's check that no env is done after its reset; skipped with :attr:`sync_free`.

        :meth:`_reset` returns fresh all-False done flags by construction.
        """
        if not self._sync_free:
            env_reset_check_done(self, tensordict, tensordict_reset)

    def _step_and_maybe_reset(
        self, tensordict: TensorDictBase
    ) -> tuple[TensorDictBase, TensorDictBase]:
        """Step every env and reset the done ones in one fused launch.

        Returns the input with its ``"next"`` entry (true final observations) and the next root
        (reset observations where done, done flags all False), as TorchRL's generic
        step-then-``maybe_reset`` would, without its per-step ``where`` merge.
        """
        if not fused.takes_fast_path(self, tensordict):
            actions.check_movable(tensordict, self._layout.action_keys, self.device)
            return env_step_and_maybe_reset(self, tensordict)
        self._load_actions(tensordict)
        self._launcher.run("step_autoreset")
        set_unchecked(tensordict, "next", self._present(self._layout.next_td()))
        root = fused.next_root(self, tensordict, self._layout, self._sync_free)
        return tensordict, self._present(root)

    def rollout(
        self,
        max_steps: int,
        policy: Any = None,
        callback: Any = None,
        *,
        auto_reset: bool = True,
        break_when_any_done: bool | None = None,
        break_when_all_done: bool | None = None,
        tensordict: TensorDictBase | None = None,
        **kwargs: Any,
    ) -> TensorDictBase:
        """Roll out ``max_steps`` steps, as TorchRL's :meth:`~torchrl.envs.EnvBase.rollout`.

        With no policy, ``break_when_any_done=False`` and ``auto_reset=True`` (and no callback,
        ``actions`` or ``out``), the random actions of all steps are drawn up front from torch's
        global generator, and one kernel writes the ``[num_envs, max_steps]`` result into fresh
        tensors; the env auto-resets in between and is left un-reset after the last step, as in
        TorchRL. Every other case (and every env with hand-written kernels) runs TorchRL's loop
        over this env's fused :meth:`step_and_maybe_reset`.

        Args:
            max_steps (int): number of steps.
            policy (callable, optional): TorchRL policy. Defaults to ``None`` (random actions).
            callback (callable, optional): TorchRL rollout callback. Defaults to ``None``.
            auto_reset (bool, optional): reset before rolling out. Defaults to ``True``.
            break_when_any_done (bool, optional): as in TorchRL. Defaults to ``None`` (True).
            break_when_all_done (bool, optional): as in TorchRL. Defaults to ``None``.
            tensordict (TensorDictBase, optional): input of the first reset. Defaults to ``None``.
            **kwargs: other TorchRL rollout options (they disable the fast path).

        Returns:
            A ``[num_envs, max_steps]`` TensorDict whose last dim is named ``"time"``.

        Raises:
            TypeError: if ``max_steps`` is not an int.
            ValueError: if ``max_steps < 1``; both before anything is reset or stepped.
        """
        max_steps = check_int("max_steps", max_steps, minimum=1)
        fast = (
            policy is None
            and callback is None
            and auto_reset
            and break_when_any_done is False
            and not break_when_all_done
            and set(kwargs) <= {"return_contiguous", "trust_policy", "auto_cast_to_device"}
            and not has_post_step_hooks(self)
            and self._physics is not None
        )
        if not fast:
            return super().rollout(
                max_steps,
                policy,
                callback,
                auto_reset=auto_reset,
                break_when_any_done=break_when_any_done,
                break_when_all_done=break_when_all_done,
                tensordict=tensordict,
                **kwargs,
            )
        self.reset(tensordict)
        random_actions = self._random_actions(max_steps)
        out, root_flags = rollout_outputs(self._layout, max_steps)
        self._launch_now([self._physics.rollout_recipe(random_actions, out)])
        return self._present(rollout_td(self._layout, random_actions, out, root_flags))

    def rand_action(self, tensordict: TensorDictBase | None = None) -> TensorDictBase:
        """Write a random action, drawn from the action spec, into ``tensordict``.

        The same draw as :meth:`~torchrl.envs.EnvBase.rand_action` (from torch's global
        generator); with one action entry it is set directly instead of through a TensorDict of
        the full action spec (what a ``Collector`` calls for its ``init_random_frames``).

        Args:
            tensordict (TensorDictBase, optional): where the action is written. Defaults to
                ``None`` (a new TensorDict holding only the action).

        Returns:
            ``tensordict`` (or the new TensorDict) with a fresh random action.
        """
        one_leaf = len(self._layout.action_keys) == 1
        if not one_leaf or (tensordict is not None and tensordict.batch_size != self.batch_size):
            return super().rand_action(tensordict)
        if tensordict is None:
            tensordict = new_tensordict_unchecked({}, self.batch_size, self.device)
        key = self._layout.action_keys[0]
        set_unchecked(
            tensordict, key, actions.draw(self.full_action_spec[key], self._sync_free, self.device)
        )
        return tensordict

    def to(self, device: torch.device | str) -> WarpEnv:
        """Return ``self`` for the env's own device; Warp state cannot move, so others raise.

        Args:
            device (torch.device or str): target device.

        Returns:
            This env, when ``device`` is the device it was built on.

        Raises:
            ValueError: for any other device (build a new env there instead).
        """
        target = torch.device(device)
        if target.type == "cuda" and target.index is None and torch.cuda.is_available():
            target = torch.device("cuda", torch.cuda.current_device())
        if target == self.device:
            return self
        raise ValueError(
            f"{type(self).__name__} keeps its Warp state on {self.device} and cannot move; got "
            f"device={str(target)!r}. Build a new env with device={str(target)!r} instead."
        )

    def _set_seed(self, seed: int | None) -> None:
        """Store ``seed`` (drawn from torch's generator if ``None``) and restart episode counts."""
        seed = check_seed(seed)
        if seed is None:
            seed = int(torch.randint(0, 2**62, (), dtype=torch.int64).item())
        self._layout.set_seed_words([seed & 0xFFFFFFFF, seed >> 32])
        if self.device.type == "cuda":
            wp.synchronize_device(self.warp_device)
        self._layout.episode.zero_()
        self._seed = seed

    def _load_actions(self, tensordict: TensorDictBase) -> None:
        """Check every action entry of ``tensordict``, then copy them into the action buffers.

        The check is derived from the action spec (:func:`~.actions.out_of_spec`: a categorical
        value outside its range, a NaN float) and runs where the action is: on the host, which
        raises, or with :attr:`sync_free` on the device, into :attr:`action_fault`; then a
        categorical action is clamped into its range, so that the env's functions never see an
        index outside the spec (only the faulted envs' episodes are affected).
        """
        tensordict = self._kernel_actions(tensordict)
        lay = self._layout
        actions.load_actions(
            tensordict,
            lay.actions,
            lay.action_specs,
            self.device,
            self._sync_free,
            self._action_faults,
        )

    # ------------------------------------------------------------------ saving and restoring
    def _state_tensors(self) -> dict[str, torch.Tensor]:
        """Live torch views of every array that determines future steps, by state key.

        The base's (:func:`~torchrl_ext.envs._base.state_dicts.base_state`), then the declared state
        arrays. An env with hand-written kernels adds its own state to this dict.
        """
        state = state_dicts.base_state(self._layout)
        if self._physics is not None:
            state.update(self._physics.arrays)
        return state

    def _saved_state(self) -> dict[str, torch.Tensor]:
        words = [self._seed & 0xFFFFFFFF, self._seed >> 32]
        state = {"seed": torch.tensor(words, dtype=torch.int64, device=self.device)}
        state.update(self._state_tensors())
        return state

    def state_dict(
        self,
        *args: Any,
        destination: dict | None = None,
        prefix: str = "",
        keep_vars: bool = False,
    ) -> dict[str, torch.Tensor]:
        """The full simulation state, as fresh torch tensors (copies, never live views).

        It holds everything that determines future steps: the declared state, the per-env
        step and episode counters, the seed (``"seed"``: its two 32-bit words, low first, as
        int64), the done flags and last outputs. An env of the same class built with the same
        constructor arguments that loads it with :meth:`load_state_dict` continues bitwise
        identically. It replaces :meth:`torch.nn.Module.state_dict`, with the same signature.

        Args:
            *args: ignored, as :meth:`torch.nn.Module.state_dict` does with positional arguments.
            destination (dict, optional): where entries are added. Defaults to a new dict.
            prefix (str, optional): prepended to every key. Defaults to ``""``.
            keep_vars (bool, optional): unused (nothing here is a parameter). Defaults to False.

        Returns:
            ``destination`` (or a new ordered dict) of state key to tensor.

        Examples:
            >>> import pickle
            >>> import torch
            >>> from torchrl_ext.envs import CartPoleEnv
            >>> actions = torch.randint(0, 2, (40, 4), generator=torch.Generator().manual_seed(0))
            >>> def run(env, root):
            ...     for action in actions:  # 40 steps: several auto-resets at max_steps=10
            ...         root["action"] = action
            ...         td, root = env.step_and_maybe_reset(root)
            ...     return td["next", "observation"]
            >>> env = CartPoleEnv(4, seed=0, max_steps=10)
            >>> root = env.reset()
            >>> saved, copied = env.state_dict(), pickle.loads(pickle.dumps(env))
            >>> end = run(env, root.clone())
            >>> fresh = CartPoleEnv(4, seed=0, max_steps=10)
            >>> fresh.load_state_dict(saved)
            >>> [bool((run(e, root.clone()) == end).all()) for e in (fresh, copied)]
            [True, True]
        """
        out = collections.OrderedDict() if destination is None else destination
        for name, tensor in self._saved_state().items():
            out[prefix + name] = tensor.clone()
        return out

    def load_state_dict(
        self, state_dict: Mapping[str, Any], strict: bool = True, assign: bool = False
    ) -> None:
        """Restore a state saved by :meth:`state_dict`; the env then continues bitwise as the saver.

        Everything is checked before anything is written, so a refused state leaves the env as
        it was: the keys must be exactly those of :meth:`state_dict`, every value a tensor of
        the saved dtype and shape, and every value one the env can reach. An empty mapping
        restores nothing: it is what a TorchRL collector's ``state_dict()`` holds for its env.

        Args:
            state_dict (Mapping[str, torch.Tensor]): a state from :meth:`state_dict` of an env of
                the same class built with the same arguments (the seed may differ).
            strict (bool, optional): must be True for a non-empty state. Defaults to True.
            assign (bool, optional): must be False for a non-empty state. Defaults to False.

        Raises:
            TypeError: if ``state_dict`` is not a mapping, a value is not a tensor or has the
                wrong dtype.
            ValueError: for missing or unexpected keys, a wrong shape, an out-of-range value, or
                ``strict=False`` / ``assign=True``.
        """
        reference = self._saved_state()
        state = state_dicts.checked_state(
            type(self).__name__, state_dict, strict, assign, reference, self.num_envs, self.device
        )
        if state is None:
            return
        self._check_state_values(state)
        for name, tensor in self._state_tensors().items():
            tensor.copy_(state[name])
        words = [int(w) for w in state["seed"].tolist()]
        with self._on_torch_stream():  # ordered after the launches already queued there
            self._layout.set_seed_words(words)
        self._seed = words[0] | (words[1] << 32)
        if self.device.type == "cuda":
            wp.synchronize_device(self.warp_device)

    def __getstate__(self) -> dict:
        """Pickle (and deepcopy) the env's attributes and its state; Warp views are rebuilt on load.

        An env with hand-written kernels is copied without the attributes its
        :meth:`_allocate_state` set: the copy calls it again and loads :meth:`state_dict`.
        """
        state = self.__dict__.copy()
        state["_launcher"] = self._launcher.capture  # recorded launches are rebuilt on load
        if self._physics is None:
            for name in self._allocated:
                del state[name]
            state["_copied_state_dict"] = self.state_dict()
        return state

    def __setstate__(self, state: dict) -> None:
        saved_state = state.pop("_copied_state_dict", None)
        self.__dict__.update(state)
        self._launcher = Launcher(self.device, self.num_envs, self._recipes, state["_launcher"])
        if saved_state is not None:
            self._allocate_state()
            self.load_state_dict(saved_state)

    # ------------------------------------------------------------------ allocation and launching
    def _done_groups(self) -> list[str]:
        """The groups whose done entries :meth:`_make_specs` declared (none if it set none)."""
        if "full_done_spec" not in self.output_spec.keys():
            return []
        return done_groups(self.full_done_spec)

    def _generated_physics(self) -> GeneratedPhysics | None:
        functions = type(self).functions
        if functions is None:
            return None
        if not isinstance(functions, WarpFunctions):
            raise TypeError(
                f"{type(self).__name__}.functions must be WarpFunctions(start, advance, observe), "
                f"got {type(functions).__name__}."
            )
        arrays = declared_arrays(type(self).__name__, self._state_arrays(), self._dtype)
        env_type, dtype, truncates = type(self), self._dtype, type(self).truncates_terminal_steps
        constants, limit = self._constants(), self._limit
        return GeneratedPhysics(
            env_type, self._layout, arrays, constants, dtype, limit, truncates, self._last_step()
        )

    @property
    def _arrays(self) -> dict[str, torch.Tensor]:
        """The live declared state arrays, by name."""
        return self._physics.arrays

    def _recipes(self, mode: str) -> list[Launch]:
        if mode == "reset":
            return self._reset_launches()
        return self._step_launches(autoreset=mode == "step_autoreset")

    def _forget_launches(self) -> None:
        """Drop recorded launches and graphs; call after replacing an array a recipe names."""
        self._launcher.forget()

    def _on_torch_stream(self) -> Any:
        return self._launcher.on_torch_stream()

    def _launch_now(self, recipes: list[Launch]) -> None:
        self._launcher.launch_now(recipes)
