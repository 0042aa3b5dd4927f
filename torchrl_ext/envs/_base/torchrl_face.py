"""The TorchRL face of a WarpEnv: ``EnvBase``'s step, reset, fused step and rollout.

:class:`TorchRLShim` implements TorchRL's ``EnvBase`` protocol over the parts a
:class:`~torchrl_ext.envs.WarpEnv` owns: its buffers (``self._layout``), its launcher
(``self._launcher``) and, for envs written as Warp functions, its generated physics
(``self._physics``). It decides nothing about physics; it loads actions, launches, and hands
out fresh TensorDicts exactly as TorchRL's generic paths would.
"""

from __future__ import annotations

from typing import Any

import torch
from tensordict import TensorDictBase
from torchrl.envs import EnvBase

from torchrl_ext._checks import check_bool, check_int, check_tensor
from torchrl_ext._compat import (
    env_reset_check_done,
    env_step_and_maybe_reset,
    has_post_step_hooks,
    new_tensordict_unchecked,
    set_unchecked,
)
from torchrl_ext.envs._base import actions, fused
from torchrl_ext.envs._base.rollout import rollout_outputs, rollout_td


class TorchRLShim(EnvBase):
    """``EnvBase``'s step path over a WarpEnv's layout, launcher and physics.

    Subclasses set ``_layout``, ``_launcher``, ``_physics``, ``_sync_free`` and
    ``_action_faults`` in their constructor, and implement ``_check_action_values`` and
    ``_action_fault`` (see :class:`~torchrl_ext.envs.WarpEnv`).
    """

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

    def to(self, device: torch.device | str) -> TorchRLShim:
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

    def _load_actions(self, tensordict: TensorDictBase) -> None:
        """Check every action entry of ``tensordict``, then copy them into the action buffers."""
        sync_free = self._sync_free
        actions.load_actions(
            tensordict,
            self._layout.actions,
            self.device,
            None if sync_free else self._check_action_values,
            self._action_fault if sync_free else None,
            self._action_faults,
        )

    def _read_reset_mask(self, tensordict: TensorDictBase | None) -> torch.Tensor | None:
        """The ``"_reset"`` entry as a ``[N]`` bool tensor, validated, or ``None`` (reset all)."""
        mask = None if tensordict is None else tensordict.get("_reset", None)
        if mask is None:
            return None
        n = self.num_envs
        check_tensor("_reset", mask, torch.bool, [(n, 1), (n,)], self.device)
        return mask.reshape(n)

    def _step(self, tensordict: TensorDictBase) -> TensorDictBase:
        self._load_actions(tensordict)
        self._launcher.run("step")
        return self._layout.next_td()

    def _reset(self, tensordict: TensorDictBase | None = None, **kwargs: Any) -> TensorDictBase:
        mask = self._read_reset_mask(tensordict)
        if mask is None:
            self._layout.mask.fill_(1)
        else:
            self._layout.mask.copy_(mask)
        self._launcher.run("reset")
        return self._layout.root_td()

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
        lay = self._layout
        self._load_actions(tensordict)
        self._launcher.run("step_autoreset")
        set_unchecked(tensordict, "next", lay.next_td())
        keep = fused.keep_mask(lay.flag_buffer[0], self._sync_free)
        root = fused.next_root(self, tensordict, keep, lay.produced_keys)
        for key, val in lay.fresh_obs("root").items():
            set_unchecked(root, key, val)
        for key, val in lay.fresh_flags(False).items():
            set_unchecked(root, key, val)
        return tensordict, root

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
        actions = self._random_actions(max_steps)
        out, root_flags = rollout_outputs(self._layout, max_steps)
        self._launch_now([self._physics.rollout_recipe(actions, out)])
        return rollout_td(self._layout, actions, out, root_flags)

    def _random_actions(self, steps: int) -> dict[Any, torch.Tensor]:
        """``[N, T, ...]`` random actions per action entry (torch's global generator).

        The base draws ``spec.rand((T,))`` (``MultiCategorical`` entries in one uniform draw:
        TorchRL's draws each column apart) and returns its env-major view; subclasses may draw
        the same distribution faster.
        """
        return {
            key: actions.draw_steps(self.full_action_spec[key], steps).movedim(0, 1)
            for key in self._layout.action_keys
        }
