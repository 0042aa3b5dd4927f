"""Generalized advantage estimation that gets recurrent critics and truncation right.

Two masks, never merged (see ``docs/concepts/recurrent_gae.rst``):

* GAE reads ``terminated`` (bootstrap or not) and ``done`` (cut the trace) at the same step:
  ``delta_t = r_t + gamma * (1 - terminated_t) * V(s_{t+1}) - V(s_t)`` and
  ``A_t = delta_t + gamma * lmbda * (1 - done_t) * A_{t+1}``; a truncated step bootstraps from
  the value of its true final observation ``("next", obs)``.
* The recurrent state resets on ``is_init``, which is ``done`` one step later; ``is_init[:, 0]``
  carries over from the previous batch.

A call reads and checks its input as ``[N, T]`` rows, and writes its outputs back, in ``_gae_io``;
a critic runs in ``_value_pass`` and the advantage step in ``_gae``.
"""

from __future__ import annotations

import dataclasses
from contextlib import nullcontext
from typing import Literal

import torch
from tensordict import TensorDictBase
from tensordict.nn import TensorDictModuleBase
from tensordict.utils import NestedKey
from torchrl.envs.transforms import Transform
from torchrl.objectives.value import ValueEstimatorBase

from torchrl_ext._checks import check_choice, check_float, check_key, check_optional_int
from torchrl_ext._workspace import Workspace
from torchrl_ext.objectives._gae import GAEResult, compute_gae
from torchrl_ext.objectives._gae_io import (
    Rollout,
    check_bool_dtype,
    get_entry,
    next_key,
    raise_on_nonfinite,
    read_rollout,
)
from torchrl_ext.objectives._value_pass import ValuePass

InitialState = Literal["zeros", "stored"]


@dataclasses.dataclass
class _AcceptedKeys:
    """Configurable keys. Reward, done and terminated are read under ``"next"``.

    ``sample_log_prob`` and ``steps_to_next_obs`` are accepted (and ignored) so that torchrl
    losses can forward their keys with ``set_keys``.
    """

    advantage: NestedKey = "advantage"
    value_target: NestedKey = "value_target"
    value: NestedKey = "state_value"
    reward: NestedKey = "reward"
    done: NestedKey = "done"
    terminated: NestedKey = "terminated"
    is_init: NestedKey = "is_init"
    sample_log_prob: NestedKey = "sample_log_prob"
    steps_to_next_obs: NestedKey = "steps_to_next_obs"


class RecurrentGAE(ValueEstimatorBase):
    """GAE with distinct bootstrap/trace/reset masks and one-pass recurrent value recompute.

    Reads a rollout shaped ``[N_env, T]`` (time is the last batch dim unless ``time_dim`` says
    otherwise) and writes ``"advantage"``, ``"value_target"`` and, when the input has none,
    ``"is_init"``. Without a ``value_network`` it reads ``"state_value"`` and
    ``("next", "state_value")``; with one it recomputes both (and writes them): a
    feed-forward critic is called once on all observations plus the final observations of
    ``done`` steps and of each row's last step; a critic containing torchrl
    :class:`~torchrl.modules.LSTMModule` or :class:`~torchrl.modules.GRUModule` layers runs
    each layer once over whole rows as a packed sequence, resetting its state where
    ``is_init`` is set, with the bootstrap observations appended after the step they follow; a
    critic with another memory (a scan memory such as :class:`~torchrl_ext.modules.FFMModule`)
    runs once over the rows in its own recurrent mode, then once in step mode over the
    bootstrap observations, from the states it reports after each segment.

    Where ``is_init`` is absent it is derived as ``done`` shifted one step later, and its first
    column is carried over per env between calls (True on the first call and for envs whose
    last step was ``done``). The carry assumes consecutive calls see the same envs in the same
    order; :meth:`reset_carry` forgets it.

    It is a :class:`~torchrl.objectives.value.ValueEstimatorBase` (hence a
    ``TensorDictModuleBase``) and plugs in as a collector ``postproc``, as a torchrl loss's
    value estimator through ``loss.make_value_estimator(gae)`` (plain attribute assignment to
    ``loss.value_estimator`` does not reach torchrl's property for ``nn.Module`` values; the
    loss's ``params`` are applied to the value network, ``target_params`` are ignored) and,
    through :meth:`as_transform`, as a replay-buffer transform. As in torchrl's estimators, the
    value network is not registered as a submodule, so a loss does not count its parameters
    twice.

    Args:
        gamma (float): discount factor in ``[0, 1]`` (a Python or numpy number, or a 0-d
            tensor).
        lmbda (float): GAE trace decay in ``[0, 1]`` (same types as ``gamma``).
        value_network (TensorDictModuleBase, optional): the critic. Defaults to ``None``
            (values are read from the input).
        initial_state (str, optional): the recurrent state each row starts from. ``"zeros"``
            (Strategy A) matches training that starts every minibatch row from a zero state;
            ``"stored"`` (Strategy B) starts from the state stored at rollout time under the
            recurrent layer's input keys (e.g. ``"recurrent_state_h"``), matching training that
            replays stored states. Rows whose first step is ``is_init`` start from zeros in
            both. Defaults to ``"zeros"``.
        chunk_len (int, optional): re-anchor the recurrent state every ``chunk_len`` steps (to
            zeros or to the stored state, as ``initial_state`` says), matching training on
            chunks of that length. Defaults to ``None`` (no re-anchoring).
        time_dim (int, optional): the time dimension of the input's batch dims; an input
            that names a dim ``"time"`` must name this one. Defaults to ``None``: the dim
            named ``"time"`` if any, else the last one.

    Outputs are computed without gradients (under ``torch.no_grad``), as advantages and
    targets are constants for the policy and value losses.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from torchrl_ext.objectives import RecurrentGAE
        >>> g = torch.Generator().manual_seed(0)
        >>> n, t = 3, 5
        >>> done = torch.zeros(n, t, 1, dtype=torch.bool)
        >>> done[0, 2] = True
        >>> rollout = TensorDict(
        ...     {
        ...         "state_value": torch.randn(n, t, 1, generator=g),
        ...         "next": {
        ...             "reward": torch.randn(n, t, 1, generator=g),
        ...             "done": done,
        ...             "terminated": done.clone(),
        ...             "state_value": torch.randn(n, t, 1, generator=g),
        ...         },
        ...     },
        ...     batch_size=[n, t],
        ... )
        >>> gae = RecurrentGAE(gamma=0.99, lmbda=0.95)
        >>> out = gae(rollout)
        >>> out["advantage"].shape, out["value_target"].shape
        (torch.Size([3, 5, 1]), torch.Size([3, 5, 1]))
        >>> out["is_init"][0, :, 0].tolist()
        [True, False, False, True, False]
    """

    _AcceptedKeys = _AcceptedKeys
    default_keys = _AcceptedKeys

    def __init__(
        self,
        gamma: float,
        lmbda: float,
        value_network: TensorDictModuleBase | None = None,
        *,
        initial_state: InitialState = "zeros",
        chunk_len: int | None = None,
        time_dim: int | None = None,
    ):
        gamma = check_float("gamma", gamma, 0.0, 1.0)
        lmbda = check_float("lmbda", lmbda, 0.0, 1.0)
        initial_state = check_choice("initial_state", initial_state, ("zeros", "stored"))
        chunk_len = check_optional_int("chunk_len", chunk_len, minimum=1)
        time_dim = check_optional_int("time_dim", time_dim)
        if value_network is not None and not isinstance(value_network, TensorDictModuleBase):
            raise TypeError(
                "value_network must be a TensorDictModuleBase (e.g. a TensorDictModule or "
                f"TensorDictSequential), got {type(value_network).__name__}."
            )
        value_pass = ValuePass(value_network) if value_network is not None else None
        super().__init__(value_network=value_network)
        self.gamma = gamma
        self.lmbda = lmbda
        self.initial_state = initial_state
        self.chunk_len = chunk_len
        self.time_dim = time_dim
        self._value_pass = value_pass
        self._tensor_keys = _AcceptedKeys()
        self._carry: torch.Tensor | None = None
        self._workspace = Workspace()

    # ------------------------------------------------------------------ keys
    @property
    def tensor_keys(self) -> _AcceptedKeys:
        """The configured keys (see :meth:`set_keys`)."""
        return self._tensor_keys

    def set_keys(self, **kwargs: NestedKey) -> RecurrentGAE:
        """Renames the entries read and written, like torchrl's value estimators.

        Args:
            **kwargs: any of ``advantage``, ``value_target``, ``value``, ``reward``, ``done``,
                ``terminated``, ``is_init`` (``sample_log_prob`` and ``steps_to_next_obs`` are
                accepted and unused). Reward, done and terminated are read under ``"next"``.

        Returns:
            self.

        Raises:
            ValueError: for an unknown name or an empty key; TypeError for a key that is not a
                str or a tuple of str. Nothing is renamed then.
        """
        fields = {f.name for f in dataclasses.fields(_AcceptedKeys)}
        renamed = {}
        for name, key in kwargs.items():
            if name not in fields:
                raise ValueError(
                    f"set_keys got an unknown key name {name!r}; expected one of {sorted(fields)}."
                )
            if key is not None:
                renamed[name] = check_key(name, key)
        for name, key in renamed.items():
            setattr(self._tensor_keys, name, key)
        return self

    @property
    def in_keys(self) -> list[NestedKey]:
        """Entries read: reward, flags, and values or the value network's inputs."""
        keys = self._tensor_keys
        out = [next_key(keys.reward), next_key(keys.done), next_key(keys.terminated)]
        if self._value_pass is None:
            return [*out, keys.value, next_key(keys.value)]
        obs = self._value_pass.obs_keys
        return [*out, *obs, *(next_key(k) for k in obs)]

    @property
    def out_keys(self) -> list[NestedKey]:
        """Entries written (``is_init`` only when derived; values only when recomputed)."""
        keys = self._tensor_keys
        out = [keys.advantage, keys.value_target, keys.is_init]
        if self._value_pass is not None:
            out += [keys.value, next_key(keys.value)]
        return out

    def value_estimate(
        self,
        tensordict: TensorDictBase,
        target_params: TensorDictBase | None = None,
        next_value: torch.Tensor | None = None,
        **kwargs,
    ) -> torch.Tensor:
        """Returns the value target (``advantage + value``), leaving input and carry as they are.

        Args:
            tensordict (TensorDictBase): the rollout.
            target_params (TensorDictBase, optional): unused (kept for torchrl's signature).
            next_value (torch.Tensor, optional): unsupported; pass values in the input.
            **kwargs: ``params`` and ``time_dim``, as for :meth:`forward`.
        """
        if next_value is not None:
            raise ValueError(
                "RecurrentGAE.value_estimate does not take next_value; put it in the input "
                "under ('next', value key) instead."
            )
        carry = self._carry
        out = self.forward(tensordict.apply(lambda x: x), target_params=target_params, **kwargs)
        self._carry = carry
        return out.get(self._tensor_keys.value_target)

    def reset_carry(self) -> None:
        """Forgets the per-env episode-end flags kept between calls."""
        self._carry = None

    def as_transform(self) -> RecurrentGAETransform:
        """Returns a replay-buffer transform computing advantages when data is written."""
        return RecurrentGAETransform(self)

    # ------------------------------------------------------------------ forward
    def forward(
        self,
        tensordict: TensorDictBase,
        *,
        params: TensorDictBase | None = None,
        target_params: TensorDictBase | None = None,
        time_dim: int | None = None,
    ) -> TensorDictBase:
        """Computes advantages and writes them into ``tensordict``.

        Args:
            tensordict (TensorDictBase): the rollout, batch dims ``[..., T]``.
            params (TensorDictBase, optional): parameters to run the value network with (as
                passed by torchrl losses). Defaults to ``None``.
            target_params (TensorDictBase, optional): accepted for torchrl losses; unused.
            time_dim (int, optional): overrides the module's ``time_dim``.

        Returns:
            ``tensordict``, with the outputs written.

        Raises:
            TypeError: for an entry of the wrong dtype (flags must be bool, rewards and values
                floating-point) or a ``time_dim`` that is not an int.
            ValueError: for a missing entry, a shape that does not fit (``is_init`` must be
                ``[*batch]`` or ``[*batch, 1]``; stored recurrent states ``[*batch,
                num_layers, size]`` as the critic's layer has them), NaN or infinite values,
                or a ``time_dim`` out of range. Nothing is written then and the carry is kept.
        """
        del target_params
        keys = self._tensor_keys
        with torch.no_grad():
            rollout = read_rollout(
                tensordict,
                keys,
                time_dim=time_dim,
                default_time_dim=self.time_dim,
                carry=self._carry,
                critic=self._value_pass,
                initial_state=self.initial_state,
            )
            if self._value_pass is None:
                value, next_value = rollout.value, rollout.next_value
            else:
                value, next_value = self._run_critic(rollout, params)
            gae = self._compute_advantage(rollout, value, next_value)
            values = None if self._value_pass is None else (value, next_value)
            rollout.write(tensordict, keys, gae.advantage, gae.value_target, values)
        self._carry = gae.last_done
        return tensordict

    def _run_critic(
        self, rollout: Rollout, params: TensorDictBase | None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        ctx = params.to_module(self.value_network) if params is not None else nullcontext()
        with ctx:
            return self._value_pass.run(
                rollout.critic_inputs,
                rollout.stored_states,
                rollout.is_init,
                rollout.done_rows,
                self._tensor_keys.value,
                self.initial_state,
                self.chunk_len,
            )

    def _compute_advantage(
        self, rollout: Rollout, value: torch.Tensor, next_value: torch.Tensor
    ) -> GAEResult:
        keys = self._tensor_keys
        reward = rollout.reward
        for x, is_next in ((value, False), (next_value, True)):
            if x.shape != reward.shape:
                key = next_key(keys.value) if is_next else keys.value
                raise ValueError(
                    f"{key!r} has shape {tuple(x.shape[2:])} per step but "
                    f"{next_key(keys.reward)!r} has {tuple(reward.shape[2:])}; they must match."
                )
        inputs = (reward, value, next_value, rollout.terminated, rollout.done)
        first_is_init = rollout.first_is_init if rollout.is_init is None else None
        gae = compute_gae(inputs, self.gamma, self.lmbda, first_is_init, self._workspace)
        if gae.nonfinite:
            raise_on_nonfinite(keys, reward, value, next_value)
        if gae.is_init is not None:
            rollout.is_init = gae.is_init
        return gae


def carry_recurrent_state(
    rollout: TensorDictBase,
    state_keys: list[NestedKey],
    *,
    done_key: NestedKey = ("next", "done"),
    is_init_key: NestedKey = "is_init",
    time_dim: int | None = None,
) -> TensorDictBase:
    """Builds the start of the next batch for rollouts collected by hand.

    torchrl's collectors carry recurrent states across batches on their own (with a
    :class:`~torchrl.envs.transforms.TensorDictPrimer` and ``step_mdp``); a hand-written loop
    must do it itself. For each env, the state reached after the last step carries over
    unless that step was ``done``, in which case it restarts from zeros and ``is_init`` is set.

    Args:
        rollout (TensorDictBase): the finished batch, batch dims ``[..., T]``.
        state_keys (list of NestedKey): recurrent-state keys as the policy reads them (e.g.
            ``["recurrent_state_h", "recurrent_state_c"]``); their final values are read under
            ``"next"``.
        done_key (NestedKey, optional): the done flag. Defaults to ``("next", "done")``.
        is_init_key (NestedKey, optional): where to write the reset flag. Defaults to
            ``"is_init"``.
        time_dim (int, optional): the time batch dim. Defaults to the last one.

    Returns:
        A TensorDict with the batch dims of ``rollout`` minus time, holding the carried states
        under ``state_keys`` and ``is_init``.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from torchrl_ext.objectives import carry_recurrent_state
        >>> done = torch.zeros(2, 3, 1, dtype=torch.bool)
        >>> done[1, -1] = True
        >>> rollout = TensorDict(
        ...     {"next": {"done": done, "h": torch.ones(2, 3, 1, 4)}}, batch_size=[2, 3]
        ... )
        >>> start = carry_recurrent_state(rollout, ["h"])
        >>> start["is_init"][:, 0].tolist(), start["h"].sum(dim=(-1, -2)).tolist()
        ([False, True], [4.0, 0.0])
    """
    if rollout.batch_dims < 1:
        raise ValueError("rollout needs a time batch dim, got batch_size=().")
    time_dim = check_optional_int("time_dim", time_dim)
    tdim = (rollout.batch_dims - 1) if time_dim is None else time_dim
    if not -rollout.batch_dims <= tdim < rollout.batch_dims:
        raise ValueError(
            f"time_dim={time_dim} is out of range for batch_size={tuple(rollout.batch_size)}."
        )
    done = get_entry(rollout, done_key, "done flag (done_key)")
    check_bool_dtype(done_key, done)
    last = rollout[(slice(None),) * (tdim % rollout.batch_dims) + (-1,)]
    done_last = done.select(tdim % rollout.batch_dims, -1)
    states = {key: get_entry(last, next_key(key), "recurrent state") for key in state_keys}
    out = last.empty()
    for key, state in states.items():
        reset = done_last.reshape(
            *done_last.shape[: last.batch_dims], *([1] * (state.ndim - last.batch_dims))
        )
        out.set(key, torch.where(reset, torch.zeros_like(state), state))
    out.set(is_init_key, done_last.clone())
    return out


class RecurrentGAETransform(Transform):
    """Replay-buffer transform that runs a :class:`RecurrentGAE` when data is written.

    ``ReplayBuffer.extend`` calls the transform's inverse on the incoming ``[N_env, T]``
    batch, so advantages are computed on whole rows before they are split into samples;
    sampling returns the stored entries unchanged.

    Args:
        gae (RecurrentGAE): the estimator to run.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from torchrl.data import LazyTensorStorage, ReplayBuffer
        >>> from torchrl_ext.objectives import RecurrentGAE
        >>> g = torch.Generator().manual_seed(0)
        >>> flags = torch.zeros(2, 4, 1, dtype=torch.bool)
        >>> batch = TensorDict(
        ...     {
        ...         "state_value": torch.randn(2, 4, 1, generator=g),
        ...         "next": {
        ...             "reward": torch.randn(2, 4, 1, generator=g),
        ...             "done": flags,
        ...             "terminated": flags.clone(),
        ...             "state_value": torch.randn(2, 4, 1, generator=g),
        ...         },
        ...     },
        ...     batch_size=[2, 4],
        ... )
        >>> rb = ReplayBuffer(
        ...     storage=LazyTensorStorage(16, ndim=2),
        ...     transform=RecurrentGAE(gamma=0.9, lmbda=0.9).as_transform(),
        ... )
        >>> _ = rb.extend(batch)
        >>> "advantage" in rb[:].keys(), rb[:]["advantage"].shape
        (True, torch.Size([2, 4, 1]))
    """

    def __init__(self, gae: RecurrentGAE):
        if not isinstance(gae, RecurrentGAE):
            raise TypeError(f"gae must be a RecurrentGAE, got {type(gae).__name__}.")
        super().__init__()
        self.gae = gae

    def _inv_call(self, tensordict: TensorDictBase) -> TensorDictBase:
        return self.gae(tensordict)

    def forward(self, tensordict: TensorDictBase) -> TensorDictBase:
        """Returns sampled data unchanged (advantages were computed on write)."""
        return tensordict
