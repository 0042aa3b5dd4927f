"""WarpEnv: the TorchRL contract for batched simulations whose state lives in Warp arrays.

The base class owns everything that is not physics: the done/terminated/truncated flags, the
``"_reset"`` mask, per-env step and episode counters, seeding, the fused step with auto-reset,
graph capture and the ``[N, T]`` rollout fast path. A concrete env supplies its specs, allocates its
state and says which module-level Warp kernels to launch on which buffers (see
:class:`~torchrl_ext.envs.CartPoleEnv` for a complete example and ``tutorials/warp_env.py`` for a
walk-through).

The TorchRL and tensordict internals it relies on, and why, are listed in
``docs/concepts/envs.rst`` ("TorchRL internals"); ``test/envs/test_torchrl_contract.py`` checks
the key paths against TorchRL's public API.
"""

from __future__ import annotations

import collections
import contextlib
import functools
import inspect
import operator
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
import torch
import warp as wp
from tensordict import TensorDict, TensorDictBase, is_tensor_collection
from torchrl.data import Bounded, Categorical, Composite
from torchrl.envs import EnvBase

from torchrl_ext._checks import check_bool, check_int, check_optional_int, check_tensor
from torchrl_ext.envs import interop
from torchrl_ext.envs._kernels.common import (
    Episodes,
    Flags,
    begin_episode,
    count_step,
    make_struct,
    next_episode_key,
    param_structs,
    set_flags,
    stream_key,
    uniform_range,
)
from torchrl_ext.envs._memory import empty_outputs

# Helpers re-exported for writing new envs' kernels: per-env counter-based random streams
# (``stream_key``, ``uniform_range``), episode bookkeeping (``Episodes``, ``begin_episode``,
# ``next_episode_key``, ``count_step``), the done flags as one argument (``Flags``,
# ``set_flags``) and named constants passed by value (``param_structs``, ``pack_params``).
__all__ = [
    "Episodes",
    "Flags",
    "WarpEnv",
    "begin_episode",
    "count_step",
    "next_episode_key",
    "pack_params",
    "param_structs",
    "set_flags",
    "stream_key",
    "uniform_range",
]

_DONE_KEYS = ("done", "terminated", "truncated")
_MAX_SEED = 2**64
_NO_LIMIT = 2**31 - 1
_FLOAT_DTYPES = (torch.float32, torch.float64)
_NO_CONTEXT = contextlib.nullcontext()  # reusable: entering it does nothing

#: A launch recipe: a kernel and its positional inputs (launched over ``num_envs``), or an object
#: whose ``launch()`` queues only kernels (it is recorded as it is).
Launch = Any


def _to_warp(tensor: torch.Tensor, batch_dims: int = 1) -> wp.array:
    """Zero-copy Warp view of ``tensor``; a trailing singleton dim after the batch dims dropped."""
    if tensor.dim() > batch_dims and tensor.shape[-1] == 1:
        tensor = tensor.view(tensor.shape[:-1])
    return wp.from_torch(tensor)


def pack_params(
    structs: Mapping[Any, type], values: Mapping[str, float], dtype: torch.dtype
) -> Any:
    """Fill the struct of ``dtype`` from :func:`param_structs` with ``values``, field by name.

    Each Python float is rounded once to ``dtype``, so float64 constants are exactly the doubles
    a NumPy reference computes with.

    Args:
        structs (Mapping): the ``{wp.float32: ..., wp.float64: ...}`` structs of
            :func:`param_structs`.
        values (Mapping[str, float]): a value for every field, by field name.
        dtype (torch.dtype): ``torch.float32`` or ``torch.float64``.

    Returns:
        A struct instance, passed to kernels by value.

    Raises:
        ValueError: unless ``values`` names exactly the struct's fields.

    Examples:
        >>> import torch
        >>> from torchrl_ext.envs.warp_env import pack_params, param_structs
        >>> structs = param_structs("Demo", ("mass", "dt"), __name__)
        >>> p = pack_params(structs, {"dt": 0.1, "mass": 2.0}, torch.float64)
        >>> p.mass, p.dt
        (2.0, 0.1)
    """
    struct = structs[wp.float64 if dtype == torch.float64 else wp.float32]
    return make_struct(struct, **{name: float(value) for name, value in values.items()})


def _put(tensordict: TensorDictBase, key: Any, value: Any) -> None:
    """Set an entry the env built itself (right batch size and device) without re-validating it."""
    if isinstance(tensordict, TensorDict) and isinstance(key, str):
        # the fast setter TorchRL's own EnvBase.any_done uses for values it made
        tensordict._set_str(key, value, validated=True, inplace=False, non_blocking=False)
    else:
        tensordict.set(key, value)


@functools.cache
def _zero_scalar(dtype: torch.dtype) -> torch.Tensor:
    """A 0-dim CPU zero of ``dtype``: the fill ``torch.where`` takes on any device."""
    return torch.zeros((), dtype=dtype)


def _kept(value: torch.Tensor, keep: torch.Tensor) -> torch.Tensor:
    """A fresh copy of ``value`` (leading dim N) with the rows where ``keep`` is False zeroed."""
    mask = keep.view(keep.shape[0], *([1] * (value.dim() - 1)))
    return torch.where(mask, value, _zero_scalar(value.dtype))


def _check_seed(seed: Any) -> int | None:
    """``seed`` as an int in ``[0, 2**64)``, or ``None`` (draw one)."""
    return check_optional_int("seed", seed, minimum=0, maximum=_MAX_SEED - 1)


def _check_device(device: Any) -> torch.device:
    try:
        device = torch.device(device)
    except (RuntimeError, TypeError) as err:
        raise ValueError(f"device must name a torch device, got device={device!r}.") from err
    if device.type == "cuda":
        wp.init()
        if not torch.cuda.is_available() or not wp.is_cuda_available():
            raise ValueError(f"device={str(device)!r} needs CUDA, which torch or warp cannot see.")
        if device.index is None:
            device = torch.device("cuda", torch.cuda.current_device())
    elif device.type != "cpu":
        raise ValueError(f"device must be 'cpu' or 'cuda[:i]', got device={str(device)!r}.")
    return device


def _env_time(tensor: torch.Tensor) -> wp.array:
    """Warp view of an env-major ``[N, T, ...]`` tensor (a trailing singleton dim dropped)."""
    return _to_warp(tensor, batch_dims=2)


def _time_slot(tensor: torch.Tensor) -> wp.array:
    """Warp view of a ``[N, ...]`` step buffer as one time slot, ``[N, 1, ...]``."""
    return _env_time(tensor.unsqueeze(1))


def _warp_views(tensors: dict, view: Callable[[torch.Tensor], wp.array] = _to_warp) -> dict:
    """Warp ``view`` of every tensor of a dict (one level of nested dicts)."""
    return {
        key: {k: view(v) for k, v in val.items()} if isinstance(val, dict) else view(val)
        for key, val in tensors.items()
    }


def _with_flags(views: dict) -> dict:
    """``views`` plus ``"flags"``: its ``[N, T]`` done flags as one :class:`Flags` struct."""
    views["flags"] = make_struct(Flags, **{key: views[key] for key in _DONE_KEYS})
    return views


def _key_name(key: Any) -> str:
    """A TensorDict key as one str: nested keys joined with dots."""
    return key if isinstance(key, str) else ".".join(key)


def _require(name: str, values: torch.Tensor, ok: torch.Tensor, why: str) -> None:
    """Raise ``ValueError`` naming ``state_dict[name]`` unless ``ok`` (``values``' test) holds."""
    if not bool(ok.all()):
        bad = values[~ok][0].item()
        raise ValueError(
            f"state_dict[{name!r}] holds {bad!r}, which no run of this env reaches ({why}); "
            "load a state saved by state_dict()."
        )


def _check_state_keys(given: set, expected: set) -> None:
    missing, extra = sorted(expected - given), sorted(given - expected, key=repr)
    if missing or extra:
        raise ValueError(
            f"state_dict must have exactly the keys of state_dict(); missing={missing}, "
            f"unexpected={extra}. Load a state saved by an env built with the same arguments."
        )


def _live_view(attribute: str, doc: str) -> property:
    """A read-only property returning ``self.<attribute>``, a tensor the env updates in place."""
    return property(operator.attrgetter(attribute), doc=f"{doc} A live view.")


def _rebuild(cls: type, args: tuple, kwargs: dict, state: dict) -> WarpEnv:
    """Unpickle a WarpEnv: build it again, then load its saved state."""
    env = cls(*args, **kwargs)
    env.load_state_dict(state)
    return env


class WarpEnv(EnvBase):
    """Base class of batched TorchRL envs simulated by Warp kernels, with fused masked auto-reset.

    The env has ``batch_size=[num_envs]``. Its state lives in Warp arrays owned by the env; every
    step, reset and observation is computed by module-level Warp kernels. The base class owns:

    * **specs** for ``done``/``terminated``/``truncated`` (``[num_envs, 1]`` bool) and a time limit
      (``max_steps``): reaching it sets ``truncated``; ``terminated`` comes from the dynamics only
      (gymnasium's ``TimeLimit`` semantics: both are True if the last allowed step also fails);
    * **masked reset**: ``reset(td)`` with a ``"_reset"`` entry (bool, ``[num_envs, 1]`` or
      ``[num_envs]``, on the env's device) resets exactly the masked envs; the others keep their
      state bit for bit, and an all-False mask changes nothing. A bad mask raises before any
      kernel runs;
    * **seeding**: env ``i``'s ``k``-th episode starts from a counter-based hash of
      ``(seed, i, k)``. The seed is a full 64-bit integer (``2**32 + 1`` and ``1`` are different);
      :meth:`set_seed` restarts every env's episode count, so the same seed gives bitwise
      identical trajectories;
    * **fused auto-reset**: :meth:`step_and_maybe_reset` steps, and resets the envs that are done,
      in one kernel launch; ``("next", obs)`` is the true final observation and the returned root
      holds the reset observation. Outputs are fresh tensors: nothing handed to TorchRL aliases a
      buffer a later step overwrites;
    * **graph capture**: with ``capture=True`` each kernel sequence (step, fused step, reset) is
      recorded once with :class:`warp.ScopedCapture` and replayed afterwards;
    * **rollout fast path**: ``rollout(T, break_when_any_done=False)`` without a policy draws the
      T random actions up front and runs one kernel that writes ``[num_envs, T]`` outputs.
    * **saving**: :meth:`state_dict` copies the whole simulation state into torch tensors and
      :meth:`load_state_dict` restores it, after checking it, into an env built with the same
      arguments, which then continues bitwise identically; ``pickle`` and ``copy.deepcopy``
      rebuild the env from its constructor arguments and load its state.

    A subclass implements :meth:`_make_specs` (observation, action and reward specs),
    :meth:`_allocate_state`, :meth:`_reset_launches`, either :meth:`_steps_launches` (one kernel
    for step, fused step and rollout) or :meth:`_step_launches`, names its state arrays in
    ``_saved_arrays`` (or extends :meth:`_state_tensors`: what :meth:`state_dict` saves) and
    optionally implements
    :meth:`_check_action_values` and :meth:`_check_state_values`.
    The Warp views of the buffers the kernels read and write are in :attr:`buffers` (see
    :meth:`_allocate_buffers`).

    Args:
        num_envs (int): number of simulated envs (the batch size).
        device (torch.device or str, optional): where state and outputs live. Defaults to ``"cpu"``.
        seed (int, optional): 64-bit seed, in ``[0, 2**64)``. Defaults to ``None`` (drawn from
            torch's global generator, which is read but never seeded).

    Keyword Args:
        max_steps (int, optional): time limit in steps; ``None`` disables it. Defaults to ``None``.
        dtype (torch.dtype, optional): float dtype of state, observations and rewards
            (``torch.float32`` or ``torch.float64``). Defaults to ``torch.float32``.
        capture (bool, optional): replay recorded Warp graphs instead of launching kernels one by
            one. Defaults to ``False``.

    Examples:
        >>> import torch
        >>> from torchrl_ext.envs import CartPoleEnv
        >>> env = CartPoleEnv(4, seed=0)
        >>> td = env.reset()
        >>> td["observation"].shape
        torch.Size([4, 4])
        >>> td["action"] = torch.ones(4, dtype=torch.int64)
        >>> td, root = env.step_and_maybe_reset(td)
        >>> td["next", "done"].shape, bool(root["done"].any())
        (torch.Size([4, 1]), False)
    """

    #: Names of the subclass's state tensors ``self._<name>``, saved by :meth:`state_dict`.
    _saved_arrays: tuple[str, ...] = ()

    def __new__(cls, *args: Any, **kwargs: Any) -> WarpEnv:
        """Create the env, remembering the constructor call (pickle and deepcopy repeat it)."""
        env = super().__new__(cls, *args, **kwargs)
        env.__dict__["_init_call"] = (args, kwargs)  # set before nn.Module.__init__ runs
        return env

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
        device = _check_device(device)
        if not isinstance(dtype, torch.dtype):
            raise TypeError(f"dtype must be a torch.dtype, got dtype={dtype!r}.")
        if dtype not in _FLOAT_DTYPES:
            raise ValueError(f"dtype must be torch.float32 or torch.float64, got dtype={dtype!r}.")
        capture = check_bool("capture", capture)
        limit = check_optional_int("max_steps", max_steps, minimum=1, maximum=_NO_LIMIT)
        seed = _check_seed(seed)
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
        self._capture = capture
        self._wp_device = wp.device_from_torch(device)
        self._commands: dict[str, list] = {}
        self._graphs: dict[str, Any] = {}
        self._make_specs()
        self.full_done_spec = self._done_spec()
        # specs are fixed from here on (the buffers are allocated from them): read them once
        self._action_leaf_key = self.action_key
        self._action_leaf_spec = self.action_spec
        self._on_cuda = device.type == "cuda"
        self._sync_free = self._on_cuda
        self._action_faults = torch.zeros((), dtype=torch.bool, device=device)
        self._allocate_buffers()
        self._allocate_state()
        self._set_seed(seed)

    # ------------------------------------------------------------------ subclass hooks
    def _make_specs(self) -> None:
        """Set ``observation_spec``, ``action_spec`` and ``reward_spec`` (shapes start with N)."""
        raise NotImplementedError(f"{type(self).__name__} must implement _make_specs().")

    def _allocate_state(self) -> None:
        """Allocate the simulation state (Warp arrays on :attr:`warp_device`)."""
        raise NotImplementedError(f"{type(self).__name__} must implement _allocate_state().")

    def _step_launches(self, autoreset: bool) -> list[Launch]:
        """Kernels of one step; with ``autoreset`` they also reset done envs and write root obs.

        They read the action from ``buffers["action"]``, write ``buffers["next"][key]`` for every
        observation key, ``buffers["reward"]`` and the three done flags; with ``autoreset`` they
        reset the envs that are done (``begin_episode``, then a start state drawn from
        ``stream_key``) and write every env's current observation into ``buffers["root"][key]``.

        The base runs :meth:`_steps_launches` for one step on ``[N, 1]`` views of these buffers;
        a subclass implements either method.
        """
        slots = self._slots
        root_from = 1 if autoreset else 2  # state 1 is the post-step one; 2 does not exist
        recipes = self._steps_launches(slots["action"], slots, autoreset, root_from)
        if recipes is None:
            raise NotImplementedError(
                f"{type(self).__name__} must implement _steps_launches() or _step_launches()."
            )
        return recipes

    def _reset_launches(self) -> list[Launch]:
        """Kernels resetting the envs with a nonzero ``buffers["mask"]`` entry.

        They must leave unmasked envs' state untouched and write every env's current observation
        into ``buffers["root"][key]``.
        """
        raise NotImplementedError(f"{type(self).__name__} must implement _reset_launches().")

    def _steps_launches(
        self, actions: wp.array, out: dict, reset_last: bool, root_from: int
    ) -> list[Launch] | None:
        """Kernels running ``T = actions.shape[1]`` steps into ``[N, T]`` outputs, or ``None``.

        The one stepping path of an env that has it: a step is ``T = 1`` on ``[N, 1]`` views of
        the step buffers, the fused step adds ``reset_last``, a policy-free :meth:`rollout` runs
        ``T`` steps into fresh outputs. ``actions`` is env-major ``[N, T, *action_shape]``
        (possibly strided: index it ``[i, t]``); ``out`` holds Warp views of the ``"root"`` and
        ``"next"`` observation dicts, ``"reward"`` and the three done flags, env-major
        ``[N, S, ...]`` (a trailing singleton dim dropped), and the flags as one ``Flags`` struct,
        ``"flags"``. Done envs start a new episode before
        the next step, and after the last one only with ``reset_last``. State ``t`` (the one
        step ``t`` starts from, ``0 <= t <= T``) is observed into ``out["root"]`` slot
        ``t - root_from`` when that slot exists. Subclasses without such a kernel return ``None``
        and implement :meth:`_step_launches`; :meth:`rollout` then runs TorchRL's loop over
        fused steps.
        """
        return None

    def _check_action_values(self, action: torch.Tensor) -> None:
        """Raise ``ValueError`` if ``action`` holds values the env cannot step (e.g. NaN)."""
        return None

    def _action_fault(self, action: torch.Tensor) -> torch.Tensor | None:
        """A 0-dim bool on the env's device: True if :meth:`_check_action_values` would raise.

        The device-side form of the same check, computed without reading anything back to the
        host (see :attr:`sync_free`); ``None`` for an env without value checks.
        """
        return None

    # ------------------------------------------------------------------ public helpers
    @property
    def dtype(self) -> torch.dtype:
        """Float dtype of state, observations and rewards."""
        return self._dtype

    @property
    def warp_device(self) -> wp.context.Device:
        """The Warp device the kernels run on."""
        return self._wp_device

    @property
    def step_limit(self) -> int:
        """The time limit as the int kernels compare step counts with (``2**31 - 1``: none)."""
        return self._limit

    @property
    def capture(self) -> bool:
        """Whether steps and resets replay recorded Warp graphs."""
        return self._capture

    @property
    def sync_free(self) -> bool:
        """Whether the step path reads nothing back from the device (default: True on CUDA).

        A host read (``.item()``, ``bool(tensor)``, a copy to the CPU) waits for every queued
        kernel and cannot be recorded in a CUDA graph. When ``True``, :meth:`step`,
        :meth:`step_and_maybe_reset` and :meth:`rollout` keep every flag on the device:

        * action values are checked on the device: a bad action (e.g. NaN) raises no error in
          the step but sets :attr:`action_fault`; :meth:`check_actions` reads it and raises;
        * the auto-reset merge computes which envs reset on the device;
        * a course regeneration outside a graph launches its kernels unconditionally (they
          return early for unmasked envs) instead of reading the mask's any-flag on the host.

        Outputs are bitwise the same either way. It defaults to ``False`` on the CPU, where a
        host read costs no synchronisation and a bad action raises at once; set it to ``True``
        there to run the CUDA step path on the CPU.
        """
        return self._sync_free

    @sync_free.setter
    def sync_free(self, value: bool) -> None:
        self._sync_free = check_bool("sync_free", value)

    @property
    def action_fault(self) -> torch.Tensor:
        """0-dim bool on the env's device: an action the env cannot step was loaded (live view).

        Set by steps with :attr:`sync_free` on, cleared by :meth:`check_actions`; reading its value
        on the host synchronises with the device.
        """
        return self._action_faults

    def check_actions(self) -> None:
        """Raise ``ValueError`` if a step since the last call loaded an action it cannot step.

        With :attr:`sync_free` on, steps check action values on the device only; this reads the
        result back (one host synchronisation, at a time you choose, e.g. once per collected
        batch) and clears it. With it off, a bad action raises in the step itself and this never
        raises.

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

    @property
    def buffers(self) -> dict[str, Any]:
        """Warp views of the env-owned buffers the kernels read and write.

        Keys: ``"action"``, ``"mask"`` (int32 reset mask), ``"seed"`` (two uint32 words),
        ``"steps"`` and ``"episode"`` (int32 counters), ``"episodes"`` (the last three as one
        ``Episodes`` struct, see :func:`next_episode_key`), ``"reward"``, ``"done"``,
        ``"terminated"``, ``"truncated"``, and ``"next"``/``"root"``: dicts of observation buffers.
        """
        return self._wp

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

    # ------------------------------------------------------------------ allocation
    def _done_spec(self) -> Composite:
        flag = Categorical(2, shape=(self.num_envs, 1), dtype=torch.bool, device=self.device)
        return Composite(
            {key: flag.clone() for key in _DONE_KEYS}, shape=(self.num_envs,), device=self.device
        )

    def _allocate_buffers(self) -> None:
        """Allocate the output, action, mask, counter and seed buffers (torch + Warp views)."""
        n, dev = self.num_envs, self.device
        obs_keys = list(self.observation_spec.keys(True, True))
        self._obs_keys = obs_keys
        self._produced_keys = frozenset(obs_keys) | frozenset(_DONE_KEYS)
        self._t = {
            "next": {k: self.observation_spec[k].zero() for k in obs_keys},
            "root": {k: self.observation_spec[k].zero() for k in obs_keys},
            "reward": self.reward_spec.zero(),
            "action": self.action_spec.zero(),
            "mask": torch.zeros(n, dtype=torch.int32, device=dev),
            "steps": torch.zeros(n, dtype=torch.int32, device=dev),
            "episode": torch.zeros(n, dtype=torch.int32, device=dev),
        }
        # the three flags share one [3, N, 1] buffer: one clone per step hands out all of them
        self._flag_buffer = torch.zeros(len(_DONE_KEYS), n, 1, dtype=torch.bool, device=dev)
        for key, flag in zip(_DONE_KEYS, self._flag_buffer.unbind(0), strict=True):
            self._t[key] = flag
        self._wp = _warp_views(self._t)
        self._wp["seed"] = wp.zeros(2, dtype=wp.uint32, device=self._wp_device)
        self._wp["episodes"] = make_struct(
            Episodes, **{name: self._wp[name] for name in ("seed", "steps", "episode")}
        )
        # the step buffers as one time slot, [N, 1, ...]: the layout of _steps_launches
        self._slots = _with_flags(_warp_views(self._t, _time_slot))

    # ------------------------------------------------------------------ seeding
    def _set_seed(self, seed: int | None) -> None:
        seed = _check_seed(seed)
        if seed is None:
            seed = int(torch.randint(0, 2**62, (), dtype=torch.int64).item())
        words = np.array([seed & 0xFFFFFFFF, seed >> 32], dtype=np.uint32)
        self._wp["seed"].assign(words)
        if self.device.type == "cuda":
            wp.synchronize_device(self._wp_device)
        self._t["episode"].zero_()
        self._seed = seed

    @property
    def seed(self) -> int:
        """The current 64-bit seed."""
        return self._seed

    # ------------------------------------------------------------------ saving and restoring
    def _state_tensors(self) -> dict[str, torch.Tensor]:
        """Live torch views of every array that determines future steps, by state key.

        The base's: step and episode counters, the done flags, the last reward and the ``next``
        and ``root`` observations (what :meth:`buffers` hands out). Not the action and reset mask,
        rewritten before every launch that reads them, nor the seed (see :meth:`state_dict`).
        Then the subclass's arrays named in :attr:`_saved_arrays` (``self._<name>`` under
        ``<name>``); a subclass with other state adds it to this dict and returns it.
        """
        t = self._t
        state = {name: t[name] for name in ("steps", "episode", *_DONE_KEYS, "reward")}
        for which in ("next", "root"):
            for key, val in t[which].items():
                state[f"{which}.{_key_name(key)}"] = val
        state.update((name, getattr(self, f"_{name}")) for name in self._saved_arrays)
        return state

    def _check_state_values(self, state: dict[str, torch.Tensor]) -> None:
        """Raise ``ValueError`` for values no run of this env reaches (e.g. an index out of range).

        ``state`` has the keys, dtypes and shapes of :meth:`state_dict` (already checked); the
        base checks the counters and the seed words. Subclasses whose kernels index arrays with
        state values extend this, so that a loaded state never makes a kernel read out of bounds.
        """
        for name in ("steps", "episode"):
            _require(name, state[name], state[name] >= 0, "counters are never negative")
        words = state["seed"]
        _require("seed", words, (words >= 0) & (words < 2**32), "seed words are uint32")

    def state_dict(
        self,
        *args: Any,
        destination: dict | None = None,
        prefix: str = "",
        keep_vars: bool = False,
    ) -> dict[str, torch.Tensor]:
        """The full simulation state, as fresh torch tensors (copies, never live views).

        It holds everything that determines future steps: the physical state, the per-env step
        and episode counters, the seed (``"seed"``: its two 32-bit words, low first, as int64),
        the done flags and last outputs, and a subclass's own state (for
        :class:`~torchrl_ext.envs.CourseEnv`: car, progress and every course array). An env of
        the same class built with the same constructor arguments that loads it with
        :meth:`load_state_dict` continues bitwise identically. It replaces
        :meth:`torch.nn.Module.state_dict` (a WarpEnv has no parameters or buffers), with the
        same signature.

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
            >>> same = [bool((run(e, root.clone()) == end).all()) for e in (fresh, copied)]
            >>> same
            [True, True]
        """
        out = collections.OrderedDict() if destination is None else destination
        for name, tensor in self._saved_state().items():
            out[prefix + name] = tensor.clone()
        return out

    def _saved_state(self) -> dict[str, torch.Tensor]:
        words = [self._seed & 0xFFFFFFFF, self._seed >> 32]
        state = {"seed": torch.tensor(words, dtype=torch.int64, device=self.device)}
        state.update(self._state_tensors())
        return state

    def load_state_dict(
        self, state_dict: Mapping[str, Any], strict: bool = True, assign: bool = False
    ) -> None:
        """Restore a state saved by :meth:`state_dict`; the env then continues bitwise as the saver.

        Everything is checked before anything is written, so a refused state leaves the env as
        it was: the keys must be exactly those of :meth:`state_dict`, every value a tensor of the
        saved dtype and shape (a state from an env with another ``num_envs`` is refused), and
        every value one the env can reach (e.g. counters ``>= 0``). Tensors may be on any device;
        they are copied into the env's arrays in place, so recorded launches and graphs stay
        valid.

        An empty mapping restores nothing: it is what a TorchRL collector's ``state_dict()``
        holds for its env (``"env_state_dict"``), so ``collector.load_state_dict`` works; save
        ``env.state_dict()`` next to it to restore the simulation too.

        Args:
            state_dict (Mapping[str, torch.Tensor]): a state from :meth:`state_dict` of an env of
                the same class built with the same arguments (the seed may differ).
            strict (bool, optional): must be True for a non-empty state: a partial state cannot
                be restored. Defaults to True.
            assign (bool, optional): must be False for a non-empty state: the env's arrays are
                kept, values are copied in. Defaults to False.

        Raises:
            TypeError: if ``state_dict`` is not a mapping, a value is not a tensor or has the
                wrong dtype.
            ValueError: for missing or unexpected keys, a wrong shape, an out-of-range value, or
                ``strict=False`` / ``assign=True``.
        """
        state = self._checked_state(state_dict, strict, assign)
        if state is None:
            return
        live = self._state_tensors()
        for name, tensor in live.items():
            tensor.copy_(state[name])
        words = [int(w) for w in state["seed"].tolist()]
        with self._on_torch_stream():  # ordered after the launches already queued there
            self._wp["seed"].assign(np.array(words, dtype=np.uint32))
        self._seed = words[0] | (words[1] << 32)
        if self._on_cuda:
            wp.synchronize_device(self._wp_device)

    def _checked_state(
        self, state_dict: Any, strict: Any, assign: Any
    ) -> dict[str, torch.Tensor] | None:
        """``state_dict`` with every key, dtype, shape and value checked (nothing written).

        ``None`` for an empty mapping.
        """
        strict, assign = check_bool("strict", strict), check_bool("assign", assign)
        if not isinstance(state_dict, Mapping):
            raise TypeError(
                f"state_dict must be a mapping from {type(self).__name__}.state_dict(), got "
                f"state_dict of type {type(state_dict).__name__}."
            )
        if not state_dict:
            return None  # what TorchRL collectors save for an env: nothing to restore
        if not strict:
            raise ValueError(
                "strict must be True: a WarpEnv restores its whole state, got strict=False."
            )
        if assign:
            raise ValueError(
                "assign must be False: a WarpEnv copies values into its own arrays, got "
                "assign=True."
            )
        reference = self._saved_state()
        _check_state_keys(set(state_dict), set(reference))
        state = {}
        for name, ref in reference.items():
            value = state_dict[name]
            self._check_state_entry(name, value, ref)
            state[name] = value.detach().to(self.device)
        self._check_state_values(state)
        return state

    def _check_state_entry(self, name: str, value: Any, ref: torch.Tensor) -> None:
        if not isinstance(value, torch.Tensor):
            raise TypeError(
                f"state_dict[{name!r}] must be a torch.Tensor, got {type(value).__name__}."
            )
        if value.dtype != ref.dtype:
            raise TypeError(
                f"state_dict[{name!r}] must have dtype {ref.dtype}, got dtype={value.dtype}."
            )
        if value.is_meta:
            raise ValueError(
                f"state_dict[{name!r}] is a meta tensor, which holds no values; pass the tensors "
                "state_dict() returned."
            )
        if value.shape == ref.shape:
            return
        if value.dim() == ref.dim() and ref.dim() > 0 and ref.shape[0] == self.num_envs:
            raise ValueError(
                f"state_dict[{name!r}] has shape {tuple(value.shape)}: it comes from an env with "
                f"num_envs={value.shape[0]} (or another configuration), this env has "
                f"num_envs={self.num_envs} and needs shape {tuple(ref.shape)}; load it into an "
                "env built with the same arguments."
            )
        raise ValueError(
            f"state_dict[{name!r}] must have shape {tuple(ref.shape)}, "
            f"got shape={tuple(value.shape)}."
        )

    def _constructor_call(self) -> tuple[tuple, dict]:
        """The constructor's arguments, with the seed this env drew if it was given none."""
        args, kwargs = self.__dict__["_init_call"]
        bound = inspect.signature(type(self).__init__).bind(None, *args, **kwargs)
        if "seed" in inspect.signature(type(self).__init__).parameters:
            bound.arguments["seed"] = self._seed  # a rebuild never draws from torch's generator
        return bound.args[1:], bound.kwargs

    def __reduce__(self) -> tuple:
        """Pickle (and deepcopy) as the constructor call plus :meth:`state_dict`."""
        args, kwargs = self._constructor_call()
        return (_rebuild, (type(self), args, kwargs, self.state_dict()))

    # ------------------------------------------------------------------ launching
    def _launch_list(self, mode: str) -> list:
        """The recorded commands of ``mode`` ("step", "step_autoreset" or "reset")."""
        cmds = self._commands.get(mode)
        if cmds is None:
            if mode == "reset":
                recipes = self._reset_launches()
            else:
                recipes = self._step_launches(autoreset=mode == "step_autoreset")
            cmds = self._commands[mode] = [self._record(recipe) for recipe in recipes]
        return cmds

    def _record(self, recipe: Launch) -> Any:
        """A replayable command of ``recipe`` (a launchable object is its own command)."""
        if not isinstance(recipe, tuple):
            return recipe
        kernel, inputs = recipe
        return wp.launch(
            kernel, dim=self.num_envs, inputs=inputs, device=self._wp_device, record_cmd=True
        )

    def _launch_now(self, recipes: list[Launch]) -> None:
        """Launch ``recipes`` once, on torch's current stream."""
        with self._on_torch_stream():
            for recipe in recipes:
                self._record(recipe).launch()

    def _forget_launches(self) -> None:
        """Drop recorded launches and graphs; call after replacing an array a recipe names.

        Recipes are recorded on first use and replayed with the arrays they named then, so a
        subclass that reallocates state (or any buffer) must call this before the next step.
        """
        self._commands.clear()
        self._graphs.clear()

    def _graph(self, mode: str) -> Any:
        graph = self._graphs.get(mode)
        if graph is None:
            cmds = self._launch_list(mode)
            wp.synchronize_device(self._wp_device)
            with wp.ScopedCapture(device=self._wp_device, force_module_load=False) as cap:
                for cmd in cmds:
                    cmd.launch()
            graph = self._graphs[mode] = cap.graph
        return graph

    def _run(self, mode: str) -> None:
        """Launch (or replay) the kernels of ``mode``: "step", "step_autoreset" or "reset".

        Work is queued on torch's current stream of the env's device, so it is ordered with the
        torch copies around it. Graphs are recorded on Warp's own stream (outside the torch stream,
        which may be the uncapturable legacy stream) and replayed on torch's. Inside
        :func:`~torchrl_ext.envs.interop.registered` the kernels are launched one by one into
        torch's capture instead.
        """
        recording = interop.active(self._wp_device) is not None
        graph = self._graph(mode) if self._capture and not recording else None
        with self._on_torch_stream():
            if graph is not None:
                wp.capture_launch(graph)
            else:
                for cmd in self._launch_list(mode):
                    cmd.launch()

    def _on_torch_stream(self) -> Any:
        """Context in which Warp launches are ordered with torch's work on the env's device."""
        if self._on_cuda:
            registration = interop.active(self._wp_device)
            if registration is not None:  # the one Warp stream Warp knows is capturing
                return wp.ScopedStream(registration.stream)
            return wp.ScopedStream(wp.stream_from_torch(torch.cuda.current_stream(self.device)))
        return _NO_CONTEXT

    # ------------------------------------------------------------------ validation
    def _load_action(self, action: Any) -> None:
        """Validate ``action`` against the action spec, then copy it into the action buffer."""
        buffer = self._t["action"]  # allocated from the action spec
        check_tensor("action", action, buffer.dtype, [buffer.shape], self.device)
        if self._sync_free:
            fault = self._action_fault(action)
            if fault is not None:
                self._action_faults.logical_or_(fault)
        else:
            self._check_action_values(action)
        self._t["action"].copy_(action)

    def _read_reset_mask(self, tensordict: TensorDictBase | None) -> torch.Tensor | None:
        """The ``"_reset"`` entry as a ``[N]`` bool tensor, validated, or ``None`` (reset all)."""
        if tensordict is None:
            return None
        mask = tensordict.get("_reset", None)
        if mask is None:
            return None
        n = self.num_envs
        check_tensor("_reset", mask, torch.bool, [(n, 1), (n,)], self.device)
        return mask.reshape(n)

    # ------------------------------------------------------------------ outputs
    def _flags(self, source: str | None) -> dict[str, torch.Tensor]:
        """Fresh done/terminated/truncated: all False (``None``) or copies of the step's flags."""
        if source is None:
            flags = torch.zeros_like(self._flag_buffer)
        else:
            flags = self._flag_buffer.clone()
        return dict(zip(_DONE_KEYS, flags.unbind(0), strict=True))

    def _obs(self, which: str) -> dict[str, torch.Tensor]:
        return {key: val.clone() for key, val in self._t[which].items()}

    def _make_td(self, source: dict) -> TensorDict:
        # every entry is a fresh tensor on self.device with leading dim num_envs: skip validation
        return TensorDict._new_unsafe(source, batch_size=self.batch_size, device=self.device)

    def _root_td(self) -> TensorDict:
        """Every env's current (root) observation, done flags all False, as fresh tensors."""
        source = self._obs("root")
        source.update(self._flags(None))
        return self._make_td(source)

    def _next_td(self) -> TensorDict:
        source = self._obs("next")
        source["reward"] = self._t["reward"].clone()
        source.update(self._flags("step"))
        return self._make_td(source)

    # ------------------------------------------------------------------ TorchRL API
    def _step(self, tensordict: TensorDictBase) -> TensorDictBase:
        self._load_action(tensordict.get(self._action_leaf_key))
        return self._step_loaded()

    def _step_loaded(self) -> TensorDictBase:
        """Step every env on the action buffer as it is; the fresh ``"next"`` outputs."""
        self._run("step")
        return self._next_td()

    def _reset(self, tensordict: TensorDictBase | None = None, **kwargs: Any) -> TensorDictBase:
        mask = self._read_reset_mask(tensordict)
        if mask is None:
            self._t["mask"].fill_(1)
        else:
            self._t["mask"].copy_(mask)
        self._run("reset")
        return self._root_td()

    def rand_action(self, tensordict: TensorDictBase | None = None) -> TensorDictBase:
        """Write a random action, drawn from the action spec, into ``tensordict``.

        The same draw as :meth:`~torchrl.envs.EnvBase.rand_action` (``action_spec.rand()``, from
        torch's global generator), set directly instead of through a TensorDict of the full
        action spec: this is what a ``Collector`` calls for its ``init_random_frames``.

        Args:
            tensordict (TensorDictBase, optional): where the action is written. Defaults to
                ``None`` (a new TensorDict holding only the action).

        Returns:
            ``tensordict`` (or the new TensorDict) with a fresh random action.
        """
        if tensordict is not None and tensordict.batch_size != self.batch_size:
            return super().rand_action(tensordict)
        if tensordict is None:
            tensordict = self._make_td({})
        _put(tensordict, self._action_leaf_key, self._draw_action())
        return tensordict

    def _draw_action(self) -> torch.Tensor:
        """``action_spec.rand()``, clamped on the device with :attr:`sync_free`.

        TorchRL's bounded float draw checks ``(out > high).any()`` before clamping (a host read);
        the sync-free draw clamps with ``where``, bitwise the same values from the same RNG.
        """
        spec = self._action_leaf_spec
        if not (self._sync_free and isinstance(spec, Bounded) and spec.dtype in _FLOAT_DTYPES):
            return spec.rand()
        low, high = spec.space.low, spec.space.high
        out = torch.zeros(spec.shape, dtype=spec.dtype, device=self.device).uniform_()
        out = out * (high - low) + low
        out = torch.where(out > high, high.expand_as(out), out)
        return torch.where(out < low, low.expand_as(out), out)

    def _reset_check_done(self, tensordict: Any, tensordict_reset: Any) -> None:
        """TorchRL's check that no env is done after its reset; skipped with :attr:`sync_free`.

        The check reads the done flags on the host. :meth:`_reset` returns fresh all-False done
        flags by construction, so there is nothing for it to find.
        """
        if not self._sync_free:
            super()._reset_check_done(tensordict, tensordict_reset)

    def _fast_path_ok(self, tensordict: TensorDictBase) -> bool:
        keys = tensordict.keys()
        return (
            self._post_step_mdp_hooks is None
            and not self.__dict__.get("_torchrl_native_autoreset", False)
            and "_step" not in keys
            and "next" not in keys
            and self._on_env_device(tensordict)
        )

    def _on_env_device(self, tensordict: TensorDictBase) -> bool:
        """Whether ``tensordict`` is on the env's device, or device-less with every leaf there.

        TorchRL's generic path moves a device-less input with ``.to(device)``, which changes
        nothing when every leaf is already on the env's device: such inputs (e.g. a carrier on
        which ``clear_device_()`` was called) take the fused path too.
        """
        if tensordict.device is not None:
            return tensordict.device == self.device
        device = self.device
        return all(
            not isinstance(val, torch.Tensor) or val.device == device
            for _, val in tensordict.items(True, True)  # items(): cheaper than values() here
        )

    def _step_and_maybe_reset(
        self, tensordict: TensorDictBase
    ) -> tuple[TensorDictBase, TensorDictBase]:
        """Step every env and reset the done ones in one fused launch.

        Returns the input with its ``"next"`` entry (true final observations) and the next root
        (reset observations where done, done flags all False), as TorchRL's generic
        step-then-``maybe_reset`` would, without its per-step ``where`` merge.
        """
        if not self._fast_path_ok(tensordict):
            return super()._step_and_maybe_reset(tensordict)
        self._load_action(tensordict.get(self._action_leaf_key))
        self._run("step_autoreset")
        _put(tensordict, "next", self._next_td())
        keep = self._keep_mask()
        if self._plain_step_mdp(tensordict):
            root = self._carried_root(tensordict, keep)
        else:
            root = self._step_mdp(tensordict)
            if keep is not None:
                self._zero_carried(root, keep, self._produced_keys)
        for key, val in self._obs("root").items():
            _put(root, key, val)
        for key, val in self._flags(None).items():
            _put(root, key, val)
        return tensordict, root

    def _keep_mask(self) -> torch.Tensor | None:
        """``[N]`` bool, True for the envs that did not reset; ``None`` if none or all did.

        With :attr:`sync_free` it is never ``None``: it is all True when no env or every env
        reset, decided on the device, which zeroes the same entries.

        TorchRL's partial reset merges with ``where(~_reset, old, reset_data, pad=0)``: entries
        the env's reset does not write (the previous action, policy outputs carried in the root)
        become zero for the reset envs, and stay as they are when every env resets at once. The
        fused path does the same, on fresh tensors.
        """
        done = self._flag_buffer[0].view(self.num_envs)
        if self._sync_free:  # the same rule, decided on the device: all True unless some reset
            return ~done | done.all()
        if int(done.count_nonzero()) in (0, self.num_envs):
            return None
        return ~done

    @staticmethod
    def _zero_carried(tree: TensorDictBase, keep: torch.Tensor, skip: frozenset) -> None:
        """Replace every tensor leaf of ``tree`` not in ``skip`` by a copy zeroed where not kept."""
        for key, val in list(tree.items(True, True)):
            if key not in skip and isinstance(val, torch.Tensor):
                _put(tree, key, _kept(val, keep))

    def _plain_step_mdp(self, tensordict: TensorDictBase) -> bool:
        """Whether :meth:`_carried_root` builds exactly what ``_step_mdp`` would.

        True for a plain, unnamed ``TensorDict`` when TorchRL's step-MDP excludes top-level keys
        only and takes from ``"next"`` exactly the keys this env produces (observations and done
        flags, all top-level): the root is then the input's other entries plus those keys.
        Building it directly is faster (docs/benchmarks/envs.rst); the result equals TorchRL's
        public ``step_mdp`` (``test/envs/test_torchrl_contract.py``).
        """
        mdp = self._step_mdp
        return (
            type(tensordict) is TensorDict
            and all(sub is None for sub in mdp.exclude_from_root.values())
            and all(sub is None for sub in mdp.keys_from_next.values())
            and mdp.keys_from_next.keys() == self._produced_keys
            and all(name is None for name in tensordict.names)
        )

    def _carried_root(self, tensordict: TensorDict, keep: torch.Tensor | None) -> TensorDict:
        """The next root's carried entries, as ``_step_mdp`` copies them, zeroed where reset.

        Nested tensordicts are shallow copies (as ``_step_mdp`` makes them), so replacing their
        leaves never touches the input's.
        """
        excluded = self._step_mdp.exclude_from_root
        source = {}
        for key, val in tensordict.items():
            if key in excluded:
                continue
            if is_tensor_collection(val):
                val = val.copy()
                if keep is not None and isinstance(val, TensorDictBase):
                    self._zero_carried(val, keep, frozenset())
            elif keep is not None and key not in self._produced_keys:
                val = _kept(val, keep)
            source[key] = val
        return TensorDict._new_unsafe(
            source, batch_size=tensordict.batch_size, device=tensordict.device
        )

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
        ``actions`` or ``out``), the random actions of all steps are drawn up front, uniformly
        over the action spec from torch's global generator (as TorchRL's random policy does),
        and one kernel writes the ``[num_envs, max_steps]`` result into fresh tensors; the env
        auto-resets in between and is left un-reset after the last step, as in TorchRL. Every
        other case runs TorchRL's loop over this env's fused :meth:`step_and_maybe_reset`.

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
            and self._post_step_mdp_hooks is None
            and type(self)._steps_launches is not WarpEnv._steps_launches
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
        return self._fast_rollout(max_steps, tensordict)

    def _random_actions(self, steps: int) -> torch.Tensor:
        """``[N, T, ...]`` random actions from the action spec (torch's global generator).

        The base draws ``action_spec.rand((T,))`` and returns its env-major view; subclasses may
        draw the same distribution faster.
        """
        return self.action_spec.rand((steps,)).movedim(0, 1)

    def _rollout_outputs(self, steps: int) -> tuple[dict, dict]:
        """Fresh ``[N, T]`` outputs, shaped as the step buffers, allocated in one call.

        Returns the kernel's outputs (``"root"`` and ``"next"`` observation dicts, ``"reward"``
        and the three done flags) and the root's done flags, all False.
        """
        t = self._t
        flags = [t[key] for key in _DONE_KEYS]
        obs = [t[group][k] for group in ("root", "next") for k in self._obs_keys]
        buffers = [*obs, t["reward"], *flags, *flags]
        layouts = [((self.num_envs, steps, *b.shape[1:]), b.dtype) for b in buffers]
        fresh = iter(empty_outputs(layouts, self.device))
        out = {
            "root": {k: next(fresh) for k in self._obs_keys},
            "next": {k: next(fresh) for k in self._obs_keys},
            "reward": next(fresh),
        }
        out.update((key, next(fresh)) for key in _DONE_KEYS)
        root_flags = {key: next(fresh).zero_() for key in _DONE_KEYS}
        return out, root_flags

    def _fast_rollout(self, steps: int, tensordict: TensorDictBase | None) -> TensorDictBase:
        self.reset(tensordict)
        actions = self._random_actions(steps)
        out, root_flags = self._rollout_outputs(steps)
        views = _with_flags(_warp_views(out, _env_time))
        self._launch_now(self._steps_launches(_env_time(actions), views, False, 0))
        return self._rollout_td(actions, out, root_flags, steps)

    def _rollout_td(
        self, actions: torch.Tensor, out: dict, root_flags: dict, steps: int
    ) -> TensorDictBase:
        batch = torch.Size([self.num_envs, steps])
        nxt = dict(out["next"])
        nxt["reward"] = out["reward"]
        for key in _DONE_KEYS:
            nxt[key] = out[key]
        root = dict(out["root"])
        root[self.action_key] = actions
        root.update(root_flags)
        root["next"] = TensorDict(nxt, batch_size=batch, device=self.device)
        td = TensorDict(root, batch_size=batch, device=self.device)
        td.refine_names(..., "time")
        return td


class NanActionChecks:
    """Action value checks of a float-action env: NaN raises ``ValueError``, all else steps."""

    def _check_action_values(self, action: torch.Tensor) -> None:
        nan = torch.isnan(action)
        if bool(nan.any()):
            index = tuple(int(i) for i in nan.nonzero()[0])
            raise ValueError(f"action must not contain NaN, got action[{index}]=nan.")

    def _action_fault(self, action: torch.Tensor) -> torch.Tensor:
        return torch.isnan(action).any()
