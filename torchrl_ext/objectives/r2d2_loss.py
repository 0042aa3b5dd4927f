"""R2D2's loss for recurrent Q-networks on ``[B, T]`` window samples, or on tapes.

:class:`R2D2Loss` is a TorchRL :class:`~torchrl.objectives.LossModule` for the windows a
:class:`torchrl_ext.data.Sequence` unit samples with ``layout="batch_time"``: ``burn_in`` records
that rebuild the recurrent state, ``length`` learning records that carry the loss, and
``n_step - 1`` bootstrap records that feed the targets (Kapturowski et al., 2019, "Recurrent
Experience Replay in Distributed Reinforcement Learning").

What one call computes, for the online network (trained) and the target network (its delayed
copy, kept by the loss like :class:`~torchrl.objectives.DQNLoss` keeps it):

1. Both networks run in recurrent mode from the stored recurrent state of the window's first
   record over the burn-in records, without gradient, then continue from the burned-in state
   over the learning and bootstrap records (where a new episode starts exactly after burn-in,
   the stored state of that record applies instead). A last extra step reads the ``("next",
   observation)`` of the window's last record, and invalid (padded) records after the valid run
   read the next observation of the record before them, so that the value of every valid
   record's next observation is available.
2. The n-step double-Q target of a record ``t`` sums ``gamma**k * reward[t + k]`` over at most
   ``n_step`` records, stopping after the first ``done`` record, at an invalid record or at the
   window's end, and adds ``gamma**m * h^-1(Q_target(s', argmax_a Q_online(s', a)))`` at the
   next observation ``s'`` of the last summed record, unless that record *terminated* (a
   *truncated* record bootstraps from its own next observation). With value rescaling (on by
   default) the target is ``h(sum + gamma**m * h^-1(Q))`` with
   ``h(x) = sign(x) * (sqrt(|x| + 1) - 1) + eps * x``.
3. The loss is ``0.5 * TD**2`` averaged over each window's records in ``learning_mask &
   validity_mask``, weighted by the window's importance weight (``"priority_weight"``, when the
   sample has it) and averaged over windows. ``|TD|`` per record, ``[B, T]`` and zero outside that
   mask, is written into the sample under ``"td_error"``.

In a TorchRL training loop::

    unit = Sequence(length, burn_in=burn_in, bootstrap=n_step - 1, layout="batch_time",
                    priority_reduction="mixture", priority_learning_only=True)
    rb = TensorDictPrioritizedReplayBuffer(alpha=0.9, beta=0.6, storage=..., sample_unit=unit,
                                           priority_key="td_error", batch_size=B)
    loss_fn = R2D2Loss(q_net, burn_in=burn_in, n_step=n_step, gamma=0.997)
    updater = SoftUpdate(loss_fn, eps=0.99)  # or HardUpdate(loss_fn, ...)
    sample = rb.sample()
    loss_fn(sample)["loss"].backward(); optim.step(); optim.zero_grad(); updater.step()
    unit.update_priority(rb, sample)  # one priority per anchor, R2D2's eta mixture

Tapes (``sample_unit="tape"``): the loss also reads the ``[R, L]`` (or ``[L]``) samples of a
:class:`torchrl_ext.data.Tape`, whole episodes laid end to end with ``is_init`` at each start
and a masked tail (``validity_mask`` False), without ``learning_mask`` or burn-in. Every valid
record is a learning record. The networks run in recurrent mode over each tape from the stored
states, resetting at every ``is_init``; the n-step sums stop at each episode's end (its last
valid record), whose next observation is valued by one extra step-mode pass of the network from
the state after that record (the ``("next", state)`` its memories write). The loss is ``0.5 *
TD**2`` averaged over each episode's valid records, weighted by the episode's importance
weight (``"priority_weight"``, the same on all of its records) and averaged over the episodes,
so an episode counts as a window does; ``|TD|`` per valid record goes to ``"td_error"`` for
``Tape.update_priority``. The mode is chosen at construction rather than guessed from the
absence of ``learning_mask``, so that a window sample missing its mask is refused instead of
being read as a tape::

    unit = Tape(length, rows=R, priority_reduction="mixture")
    loss_fn = R2D2Loss(q_net, n_step=n_step, gamma=0.997, sample_unit="tape")

The value network is any TensorDict module that reads observations (and the recurrent states
and ``"is_init"`` its memories read) and writes ``"action_value"`` ``[..., A]``; a
``QValueActor`` around it works too. A memory is a torchrl ``LSTMModule``/``GRUModule`` or any
module with TorchRL's recurrent face (``make_tensordict_primer`` and ``recurrent_mode``, as
:class:`~torchrl_ext.modules.FFMModule`), whose states are the keys of its primer. The
samples must hold the recurrent states the actor stored with each record, and ``("next",
key)`` for each observation key the network reads. A sample is read and checked in
``_r2d2_sample`` (a tape in ``_r2d2_tapes``) before anything runs.
"""

from __future__ import annotations

import dataclasses
from typing import ClassVar, Literal

import torch
from tensordict import TensorDict, TensorDictBase, TensorDictParams
from tensordict.nn import TensorDictModuleBase
from tensordict.utils import NestedKey, unravel_key
from torchrl.modules import GRUModule, LSTMModule
from torchrl.objectives import LossModule

from torchrl_ext._checks import check_bool, check_choice, check_float, check_int
from torchrl_ext.objectives._r2d2_sample import Window, check_values, read_window
from torchrl_ext.objectives._r2d2_sample import next_key as _next
from torchrl_ext.objectives._r2d2_tapes import (
    check_tape_values,
    episode_loss,
    read_tape,
    tape_episodes,
    tape_q,
)
from torchrl_ext.objectives._value_pass import is_memory

__all__ = ["R2D2Loss", "inverse_value_rescale", "value_rescale"]

_NETWORK_IS_INIT = "is_init"


def value_rescale(x: torch.Tensor, eps: float = 1e-3) -> torch.Tensor:
    """R2D2's value rescaling ``h(x) = sign(x) * (sqrt(|x| + 1) - 1) + eps * x``.

    ``sqrt(|x| + 1) - 1`` is computed as ``|x| / (sqrt(|x| + 1) + 1)``, which keeps full
    precision near 0.

    Args:
        x (torch.Tensor): values.
        eps (float, optional): the linear term's weight. Defaults to 1e-3.

    Examples:
        >>> import torch
        >>> value_rescale(torch.tensor([-3.0, 0.0, 3.0]), eps=0.0).tolist()
        [-1.0, 0.0, 1.0]
    """
    magnitude = x.abs()
    return torch.sign(x) * magnitude / ((magnitude + 1).sqrt() + 1) + eps * x


def inverse_value_rescale(y: torch.Tensor, eps: float = 1e-3) -> torch.Tensor:
    """The exact inverse of :func:`value_rescale` for ``eps > 0``.

    With ``u = sqrt(|x| + 1) - 1``, ``|y| = u + eps * (u**2 + 2 * u)`` is a quadratic in ``u``;
    its root is taken in the form without cancellation and ``|x| = u * (u + 2)``.

    Args:
        y (torch.Tensor): rescaled values.
        eps (float, optional): the linear term's weight, ``> 0``. Defaults to 1e-3.

    Examples:
        >>> import torch
        >>> x = torch.tensor([-100.0, -0.5, 0.0, 2.0, 1e4], dtype=torch.float64)
        >>> torch.allclose(inverse_value_rescale(value_rescale(x)), x)
        True
    """
    magnitude = y.abs()
    b = 1 + 2 * eps
    u = 2 * magnitude / (b + (b * b + 4 * eps * magnitude).sqrt())
    return torch.sign(y) * u * (u + 2)


class R2D2Loss(LossModule):
    """R2D2's n-step double-Q loss with burn-in and value rescaling on ``[B, T]`` windows.

    Reads samples of ``Sequence(length, burn_in=burn_in, bootstrap=n_step - 1,
    layout="batch_time")`` (episode boundaries ``"pad"`` or ``"stop"``: the learning and
    bootstrap records of a window must stay in one episode), or with ``sample_unit="tape"``
    those of ``Tape(length, rows=R)``. See the module docstring for what
    is computed. The target network's parameters are ``target_value_network_params``; update
    them with torchrl's ``SoftUpdate`` or ``HardUpdate``, as with ``DQNLoss``.

    Keys (``set_keys``): ``action_value`` (network output, ``"action_value"``), ``action``
    (``"action"``, an index or one-hot), ``reward``/``done``/``terminated`` (read under
    ``"next"``), ``priority`` (written, ``"td_error"``), ``is_init``, ``validity_mask``,
    ``learning_mask``, ``priority_weight`` (optional importance weights, one per window).
    ``learning_mask`` is not read with ``sample_unit="tape"``. Recurrent-state keys are those
    of the network's memories: ``LSTMModule``/``GRUModule`` submodules (TorchRL's, or
    :mod:`torchrl_ext.modules`', which run the burn-in and the unroll as whole rows) and any
    module with ``make_tensordict_primer`` and ``recurrent_mode`` (the keys of its primer, such
    as :class:`~torchrl_ext.modules.FFMModule`'s ``"recurrent_state_ffm"``).

    Args:
        value_network (TensorDictModuleBase): the Q-network; writes ``action_value``.
        burn_in (int, optional): burn-in records per window, ``>= 0``; the sample unit's
            ``burn_in`` (0 with ``sample_unit="tape"``). Defaults to 0.
        n_step (int): return horizon, ``>= 1``; a ``Sequence`` unit needs ``bootstrap >=
            n_step - 1`` (a tape's sums stop at each episode's end).
        gamma (float, optional): discount in ``(0, 1]``. Defaults to 0.997 (R2D2).
        value_rescaling (bool, optional): apply ``h`` and ``h^-1`` to targets. Defaults to
            ``True``.
        rescale_eps (float, optional): ``eps`` of ``h``, ``> 0``. Defaults to 1e-3.
        sample_unit (str, optional): the samples read: ``"sequence"``, ``[B, T]`` windows of
            a :class:`~torchrl_ext.data.Sequence` unit, or ``"tape"``, the ``[R, L]`` or
            ``[L]`` tapes of a :class:`~torchrl_ext.data.Tape` unit (see the module
            docstring). Defaults to ``"sequence"``.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from tensordict.nn import TensorDictModule, TensorDictSequential
        >>> from torchrl.objectives import SoftUpdate
        >>> from torchrl_ext.modules import LSTMModule
        >>> from torchrl_ext.objectives import R2D2Loss
        >>> _ = torch.manual_seed(0)
        >>> net = TensorDictSequential(
        ...     LSTMModule(3, 8, in_keys=["observation", "h", "c"],
        ...                out_keys=["out", ("next", "h"), ("next", "c")]),
        ...     TensorDictModule(torch.nn.Linear(8, 2), ["out"], ["action_value"]),
        ... )
        >>> loss_fn = R2D2Loss(net, burn_in=2, n_step=2, gamma=0.9)
        >>> updater = SoftUpdate(loss_fn, eps=0.99)
        >>> B, T = 4, 2 + 3 + 1
        >>> flags = torch.zeros(B, T, 1, dtype=torch.bool)
        >>> is_init = flags.squeeze(-1).clone()
        >>> is_init[:, 0] = True
        >>> sample = TensorDict({
        ...     "observation": torch.randn(B, T, 3), "h": torch.zeros(B, T, 1, 8),
        ...     "c": torch.zeros(B, T, 1, 8), "is_init": is_init,
        ...     "action": torch.randint(2, (B, T)),
        ...     "validity_mask": torch.ones(B, T, dtype=torch.bool),
        ...     "learning_mask": torch.tensor([False, False, True, True, True, False]).expand(B, T),
        ...     "next": {"observation": torch.randn(B, T, 3), "reward": torch.ones(B, T, 1),
        ...              "done": flags, "terminated": flags},
        ... }, [B, T])
        >>> out = loss_fn(sample)
        >>> out["loss"].shape, sample["td_error"].shape
        (torch.Size([]), torch.Size([4, 6]))
        >>> bool((sample["td_error"][:, :2] == 0).all()), bool(out["loss"] > 0)
        (True, True)
        >>> tape_loss = R2D2Loss(net, n_step=2, gamma=0.9, sample_unit="tape")
        >>> tape = sample.exclude("learning_mask")  # two episodes in each row, then a tail
        >>> tape["is_init"][:, 3] = tape["is_init"][:, 5] = True
        >>> tape["validity_mask"][:, 5] = False
        >>> tape_loss(tape)["loss"].shape, bool((tape["td_error"][:, 5] == 0).all())
        (torch.Size([]), True)
    """

    @dataclasses.dataclass
    class _AcceptedKeys:
        """Configurable tensordict keys (reward, done and terminated are read under "next").

        Attributes:
            action_value (NestedKey): the network's Q-values ``[..., A]``.
            action (NestedKey): the action taken, an index or one-hot.
            reward (NestedKey): the reward, under ``"next"``.
            done (NestedKey): the episode ended, under ``"next"``.
            terminated (NestedKey): the episode ended in a terminal state, under ``"next"``.
            priority (NestedKey): where ``|TD|`` per record is written.
            is_init (NestedKey): the window's reset flags (the unit's ``is_init_key``).
            validity_mask (NestedKey): valid records.
            learning_mask (NestedKey): learning records (not read from tapes).
            priority_weight (NestedKey): importance weights, optional.
        """

        action_value: NestedKey = "action_value"
        action: NestedKey = "action"
        reward: NestedKey = "reward"
        done: NestedKey = "done"
        terminated: NestedKey = "terminated"
        priority: NestedKey = "td_error"
        is_init: NestedKey = "is_init"
        validity_mask: NestedKey = "validity_mask"
        learning_mask: NestedKey = "learning_mask"
        priority_weight: NestedKey = "priority_weight"

    tensor_keys: _AcceptedKeys
    default_keys = _AcceptedKeys
    default_value_estimator = None
    out_keys: ClassVar[list[str]] = ["loss"]

    value_network: TensorDictModuleBase
    value_network_params: TensorDictParams
    target_value_network_params: TensorDictParams

    def __init__(
        self,
        value_network: TensorDictModuleBase,
        *,
        burn_in: int = 0,
        n_step: int,
        gamma: float = 0.997,
        value_rescaling: bool = True,
        rescale_eps: float = 1e-3,
        sample_unit: Literal["sequence", "tape"] = "sequence",
    ) -> None:
        if not isinstance(value_network, TensorDictModuleBase):
            raise TypeError(
                "value_network must be a TensorDict module (e.g. TensorDictSequential or "
                f"QValueActor) writing 'action_value', got value_network of type "
                f"{type(value_network).__name__}."
            )
        burn_in = check_int("burn_in", burn_in, minimum=0)
        n_step = check_int("n_step", n_step, minimum=1)
        gamma = check_float("gamma", gamma, 0.0, 1.0, open_minimum=True)
        value_rescaling = check_bool("value_rescaling", value_rescaling)
        rescale_eps = check_float("rescale_eps", rescale_eps, 0.0, open_minimum=True)
        sample_unit = check_choice("sample_unit", sample_unit, ("sequence", "tape"))
        if sample_unit == "tape" and burn_in:
            raise ValueError(
                f"sample_unit='tape' has no burn-in (a tape holds whole episodes), got "
                f"burn_in={burn_in}. Pass burn_in=0 or leave it out."
            )
        super().__init__()
        self.sample_unit = sample_unit
        self.burn_in = burn_in
        self.n_step = n_step
        self.gamma = gamma
        self.value_rescaling = value_rescaling
        self.rescale_eps = rescale_eps
        self._state_keys = _recurrent_state_keys(value_network)
        self._network_in_keys = [unravel_key(k) for k in value_network.in_keys]
        self.convert_to_functional(value_network, "value_network", create_target_params=True)

    # -- keys ----------------------------------------------------------------------------------

    @property
    def observation_keys(self) -> list[NestedKey]:
        """The network inputs other than recurrent states and reset flags."""
        skip = {k for k, _ in self._state_keys} | {_NETWORK_IS_INIT, self.tensor_keys.is_init}
        return [k for k in self._network_in_keys if k not in skip]

    @property
    def in_keys(self) -> list[NestedKey]:
        """Every key a call reads (``priority_weight`` is read when present)."""
        keys = self.tensor_keys
        read = [
            *self._network_in_keys,
            *[_next(k) for k in self.observation_keys],
            keys.action,
            _next(keys.reward),
            _next(keys.done),
            _next(keys.terminated),
            keys.is_init,
            keys.validity_mask,
        ]
        if self.sample_unit == "sequence":
            read.append(keys.learning_mask)
        return list(dict.fromkeys(unravel_key(k) for k in read))

    def _forward_value_estimator_keys(self, **kwargs) -> None:
        """No value estimator to forward keys to: the loss builds its targets itself."""

    def make_value_estimator(self, value_type=None, **hyperparams):
        """Not supported: the n-step double-Q targets are part of the loss."""
        raise NotImplementedError(
            "R2D2Loss builds its n-step double-Q targets itself; set n_step, gamma and "
            "value_rescaling in its constructor instead of a value estimator."
        )

    # -- forward -------------------------------------------------------------------------------

    def forward(self, tensordict: TensorDictBase) -> TensorDict:
        """Computes the loss on a ``[B, T]`` window sample (or a tape) and writes ``|TD|`` into it.

        Args:
            tensordict (TensorDictBase): a ``[B, T]`` sample, or with ``sample_unit="tape"`` a
                ``[R, L]`` or ``[L]`` tape (see the class docstring).

        Returns:
            TensorDict: ``{"loss": scalar}``.

        Raises:
            TypeError: if ``tensordict`` is not a TensorDict.
            TypeError: if a reward, action or importance weight is not a real number.
            ValueError: if the sample is not ``[B, T]``, does not match ``burn_in`` or
                ``n_step``, lacks a key, its learning and bootstrap records cross an episode
                start, a reward the targets sum or an importance weight is not finite (or a
                weight is negative, or not one per window), or an action is not a whole
                number in ``[0, A)`` (or not one-hot). With ``sample_unit="tape"``: if the
                sample holds a ``learning_mask``, a done record does not end its episode, or
                an importance weight varies inside an episode. Nothing is written then.
        """
        if self.sample_unit == "tape":
            return self._forward_tape(tensordict)
        if isinstance(tensordict, TensorDictBase) and not _has(
            tensordict, self.tensor_keys.learning_mask
        ):
            raise ValueError(
                f"the sample has no {self.tensor_keys.learning_mask!r} entry, which R2D2Loss "
                "reads from Sequence windows. A Tape sample has none: build the loss with "
                "sample_unit='tape'; else rename the key with set_keys(learning_mask=...)."
            )
        window = read_window(tensordict, self.burn_in, self.tensor_keys, self.in_keys)
        online_q = self._window_q(tensordict, window, self.value_network_params)
        check_values(window, online_q.shape[-1], self.burn_in, self.n_step, self.tensor_keys)
        rest = slice(self.burn_in, None)
        with torch.no_grad():
            target_q = self._window_q(tensordict, window, self.target_value_network_params)
            targets = self._targets(
                window.reward[:, rest],
                window.terminated[:, rest],
                window.done[:, rest],
                window.valid[:, rest],
                online_q[:, 1:].detach(),
                target_q[:, 1:],
            )
        taken = _taken(online_q[:, :-1], window.action[:, rest])
        mask = window.learning[:, rest] & window.valid[:, rest]
        td = torch.where(mask, targets - taken, 0.0)
        per_window = td.pow(2).sum(1) / mask.sum(1).clamp(min=1)
        if window.weight is not None:
            per_window = per_window * window.weight[:, 0].to(per_window.dtype)
        loss = 0.5 * per_window.mean()
        td_error = torch.zeros(tensordict.shape, dtype=td.dtype, device=td.device)
        td_error[:, rest] = td.detach().abs()
        tensordict.set(self.tensor_keys.priority, td_error)
        return TensorDict({"loss": loss})

    def _forward_tape(self, tensordict: TensorDictBase) -> TensorDict:
        """The loss on a ``[R, L]`` (or ``[L]``) tape: every valid record learns."""
        rows = tensordict.unsqueeze(0) if _is_single_tape(tensordict) else tensordict
        tape = read_tape(rows, self.tensor_keys, self.in_keys)
        episodes = tape_episodes(tape)
        network = (self._state_keys, self.observation_keys, self._network_in_keys)
        network = (*network, self.tensor_keys.action_value, self._check_q)
        with self.value_network_params.to_module(self.value_network):
            online_q, online_next = tape_q(self.value_network, rows, episodes.ends, *network)
        check_tape_values(tape, episodes, online_q.shape[-1], self.tensor_keys)
        with torch.no_grad(), self.target_value_network_params.to_module(self.value_network):
            _, target_next = tape_q(self.value_network, rows, episodes.ends, *network)
            targets = self._targets(
                tape.reward,
                tape.terminated,
                tape.done | episodes.ends,
                tape.valid,
                online_next,
                target_next,
            )
        td = torch.where(tape.valid, targets - _taken(online_q, tape.action), 0.0)
        loss = episode_loss(td, tape, episodes)
        tensordict.set(self.tensor_keys.priority, td.detach().abs().reshape(tensordict.shape))
        return TensorDict({"loss": loss})

    def _targets(
        self,
        reward: torch.Tensor,
        terminated: torch.Tensor,
        stop: torch.Tensor,
        valid: torch.Tensor,
        online_next: torch.Tensor,
        target_next: torch.Tensor,
    ) -> torch.Tensor:
        """Rescaled n-step double-Q targets ``[B, L]`` of ``L`` records.

        ``online_next`` and ``target_next`` (``[B, L, A]``) value each record's next
        observation; the sums stop after a ``stop`` record (done, or an episode's end).
        """
        greedy = online_next.argmax(-1, keepdim=True)
        next_value = target_next.gather(-1, greedy).squeeze(-1)
        if self.value_rescaling:
            next_value = inverse_value_rescale(next_value, self.rescale_eps)
        returns = _n_step_returns(
            reward.to(next_value.dtype),
            terminated,
            stop,
            valid,
            next_value,
            self.gamma,
            self.n_step,
        )
        if self.value_rescaling:
            returns = value_rescale(returns, self.rescale_eps)
        return returns

    # -- the network over a window -------------------------------------------------------------

    def _window_q(
        self, tensordict: TensorDictBase, window: Window, params: TensorDictParams
    ) -> torch.Tensor:
        """Q-values ``[B, T - burn_in + 1, A]`` after burn-in, with the network under ``params``.

        Column ``j`` holds the Q-values of record ``burn_in + j``; column ``j + 1`` values the
        next observation of record ``burn_in + j`` when that record is the last valid one.
        """
        burn_in = self.burn_in
        inputs = tensordict.select(*self._network_in_keys, *map(_next, self.observation_keys))
        with params.to_module(self.value_network):
            rest = inputs[:, burn_in:]
            if burn_in:
                with torch.no_grad():
                    burned = self.value_network(inputs[:, :burn_in].exclude("next"))
                rest = self._continue_from(rest, burned, window.is_init[:, burn_in])
            steps = self.value_network(self._with_next_step(rest, window.valid[:, burn_in:]))
        q = steps.get(self.tensor_keys.action_value, None)
        return self._check_q(q, tensordict.shape[0], tensordict.shape[1] - burn_in + 1)

    def _check_q(self, q: torch.Tensor | None, batch: int, steps: int) -> torch.Tensor:
        """Raises unless the network wrote Q-values ``[batch, steps, A]``; returns them."""
        if q is None or q.ndim != 3 or tuple(q.shape[:2]) != (batch, steps):
            raise ValueError(
                f"value_network must write {self.tensor_keys.action_value!r} shaped "
                f"[B, T, num_actions] = [{batch}, {steps}, A], got "
                f"{None if q is None else tuple(q.shape)}. Set the key with "
                "set_keys(action_value=...)."
            )
        return q

    def _continue_from(
        self, rest: TensorDictBase, burned: TensorDictBase, starts: torch.Tensor
    ) -> TensorDictBase:
        """``rest`` starting from the burned-in state (the stored one where ``starts``).

        ``starts`` flags windows where a new episode begins right after burn-in.
        """
        rest = rest.clone(False)
        for state_key, next_key in self._state_keys:
            stored = rest.get(state_key)
            final = burned.get(next_key)[:, -1]
            keep = starts.reshape(-1, *([1] * (final.ndim - 1)))
            first = torch.where(keep, stored[:, 0], final)
            rest.set(state_key, torch.cat([first.unsqueeze(1), stored[:, 1:]], 1))
        return rest

    def _with_next_step(self, rest: TensorDictBase, valid: torch.Tensor) -> TensorDictBase:
        """Network inputs ``[B, L + 1]`` that reach every valid record's next observation.

        Invalid records after the valid run read the next observation of the record before
        them, and one extra step reads the last record's.
        """
        steps = torch.cat([rest.exclude("next"), rest[:, -1:].exclude("next")], 1)
        if _NETWORK_IS_INIT in steps.keys():
            # no valid record after the first starts an episode (checked), so a flag there sits
            # on padding, which must carry on from the last valid record's state
            flags = steps.get(_NETWORK_IS_INIT)
            steps.set(
                _NETWORK_IS_INIT, torch.cat([flags[:, :1], torch.zeros_like(flags[:, 1:])], 1)
            )
        for key in self.observation_keys:
            obs, nxt = rest.get(key), rest.get(_next(key))
            follow = torch.cat([obs[:, :1], nxt[:, :-1]], 1)
            keep = valid.reshape(*valid.shape, *([1] * (obs.ndim - 2)))
            steps.set(key, torch.cat([torch.where(keep, obs, follow), nxt[:, -1:]], 1))
        return steps


def _n_step_returns(
    reward: torch.Tensor,
    terminated: torch.Tensor,
    done: torch.Tensor,
    valid: torch.Tensor,
    next_value: torch.Tensor,
    gamma: float,
    n_step: int,
) -> torch.Tensor:
    """N-step returns ``[B, L]`` bootstrapped from the values of next observations.

    Record ``t`` sums ``gamma**k * reward[t + k]`` over ``k < n_step`` while the records are
    valid and inside the window, stopping after the first ``done`` one, then adds
    ``gamma**m * next_value[last]`` (``m`` summed records) unless ``last`` terminated. Invalid
    records get 0.
    """
    size = reward.shape[1]
    total = torch.zeros_like(reward)
    bootstrap = torch.zeros_like(reward)
    discount = torch.ones_like(reward)
    running = valid.clone()
    for k in range(min(n_step, size)):
        take = running & _shift(valid, k, False)
        total = total + torch.where(take, discount * _shift(reward, k, 0.0), 0.0)
        discount = discount * gamma
        alive = ~_shift(terminated, k, False)
        value = torch.where(alive, discount * _shift(next_value, k, 0.0), 0.0)
        bootstrap = torch.where(take, value, bootstrap)
        running = take & ~_shift(done, k, False)
    return torch.where(valid, total + bootstrap, 0.0)


def _has(tensordict: TensorDictBase, key: NestedKey) -> bool:
    """Whether ``tensordict`` holds the entry ``key``."""
    return unravel_key(key) in tensordict.keys(True, True)


def _is_single_tape(tensordict: TensorDictBase) -> bool:
    """Whether ``tensordict`` is one ``[L]`` tape (``Tape(length)`` without ``rows``)."""
    return isinstance(tensordict, TensorDictBase) and tensordict.ndim == 1


def _shift(x: torch.Tensor, k: int, fill: float | bool) -> torch.Tensor:
    """``x[:, t + k]`` at column ``t``, ``fill`` past the end."""
    if k == 0:
        return x
    pad = torch.full((x.shape[0], k), fill, dtype=x.dtype, device=x.device)
    return torch.cat([x[:, k:], pad], 1)


def _taken(q: torch.Tensor, action: torch.Tensor) -> torch.Tensor:
    """Q-values ``[B, L]`` of the actions taken (an index ``[B, L(, 1)]`` or one-hot)."""
    if action.ndim == q.ndim and action.shape[-1] == q.shape[-1] and q.shape[-1] > 1:
        return (q * action.to(q.dtype)).sum(-1)
    return q.gather(-1, action.reshape(*q.shape[:2], 1).long()).squeeze(-1)


def _recurrent_state_keys(network: TensorDictModuleBase) -> tuple[tuple[NestedKey, ...], ...]:
    """``(stored state key, ("next", state) key)`` of every memory in ``network``.

    A memory is a torchrl ``LSTMModule``/``GRUModule`` (its state in-keys and out-keys) or any
    module with TorchRL's recurrent face, ``make_tensordict_primer`` and ``recurrent_mode``
    (such as :class:`~torchrl_ext.modules.FFMModule`): the keys its primer adds, whose next
    value it writes under ``("next", key)``.
    """
    pairs = []
    for module in network.modules():
        if isinstance(module, (LSTMModule, GRUModule)):
            states = [unravel_key(k) for k in module.in_keys[1:] if k != _NETWORK_IS_INIT]
            outputs = [unravel_key(k) for k in module.out_keys[1:]]
            pairs.extend(zip(states, outputs, strict=True))
        elif is_memory(module):
            primers = module.make_tensordict_primer().primers
            pairs.extend((unravel_key(k), _next(k)) for k in primers.keys(True, True))
    return tuple(dict.fromkeys(pairs))
