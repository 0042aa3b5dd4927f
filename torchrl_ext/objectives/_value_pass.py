"""One value-network pass over whole env rows, resetting recurrent state at episode starts.

The rows are cut into segments, and the segments into dense calls of the ``torch.nn`` layer,
by :mod:`torchrl_ext.objectives._segments`: every step of every segment, plus one bootstrap
step (the true final observation) after each segment that ends on a ``done`` step or at the end
of its row, is computed exactly once, with no padding, in as many calls as binary digits in the
longest segment. Dense calls keep PyTorch's fused CPU kernel (oneDNN), which a
:class:`~torch.nn.utils.rnn.PackedSequence` would lose (measured on the GAE benchmark page,
:doc:`/benchmarks/gae`, "Recurrent recompute").

A critic whose memory is neither an LSTM nor a GRU (a scan memory such as
:class:`~torchrl_ext.modules.FFMModule`) runs instead through its own recurrent mode
(:class:`~torchrl.modules.set_recurrent_mode`) over the ``[N, T]`` rows, which resets at
``is_init`` and starts from the stored states itself; the bootstrap steps then run in step mode
from the states it reports after each segment (``("next", state)``), see :class:`WholeRows`.

For LSTM and GRU critics, the critic runs on all steps at once, in the calls' layout (each
call's block is stored time-major, so its input and output are plain views), and only the values
are gathered back to the rows. The plain leaves after the last recurrent layer (the value head)
run right after each call on its output, while that is still in cache; the layer's outputs are
then never joined or read back from memory.
"""

from __future__ import annotations

import functools
from collections.abc import Callable

import torch
from tensordict import TensorDict, TensorDictBase
from tensordict.nn import TensorDictModule, TensorDictModuleBase, TensorDictSequential
from tensordict.utils import unravel_key
from torch import nn
from torchrl.modules import GRUModule, LSTMModule, set_recurrent_mode

from torchrl_ext._compat import has_kwargs_in_keys, rnn_flat_weights, rnn_op
from torchrl_ext.objectives._segments import Call, Plan, boot_steps, plan_segments

_RECURRENT = (LSTMModule, GRUModule)


def is_memory(module: TensorDictModuleBase) -> bool:
    """Whether ``module`` is a recurrent module with TorchRL's face (a primer, a recurrent mode)."""
    return isinstance(module, _RECURRENT) or (
        hasattr(module, "make_tensordict_primer") and hasattr(module, "recurrent_mode")
    )


def leaf_modules(network: TensorDictModuleBase) -> list[TensorDictModuleBase]:
    """Flattens nested :class:`~tensordict.nn.TensorDictSequential` into its leaf modules."""
    if isinstance(network, TensorDictSequential):
        leaves = []
        for module in network.module:
            leaves.extend(leaf_modules(module))
        return leaves
    return [network]


def check_recurrent_leaf(module: TensorDictModuleBase) -> None:
    """Raises if a recurrent leaf cannot run as a dense, causal ``torch.nn`` layer."""
    layer = _layer(module)
    if type(layer) not in (nn.LSTM, nn.GRU):
        raise TypeError(
            f"value_network contains a {type(module).__name__} built with python_based=True "
            f"(layer {type(layer).__name__}); RecurrentGAE needs the torch.nn layer. "
            "Build it with python_based=False (the default)."
        )
    if layer.bidirectional:
        raise ValueError(
            f"value_network contains a bidirectional {type(module).__name__}; a critic must be "
            "causal, so bidirectional=True is not supported."
        )


class ValuePass:
    """Evaluates a (possibly recurrent) critic over ``[N, T]`` rows plus their bootstrap steps."""

    def __init__(self, network: TensorDictModuleBase):
        self.network = network
        self.leaves = leaf_modules(network)
        memories = [m for m in self.leaves if is_memory(m)]
        if any(not isinstance(m, _RECURRENT) for m in memories):
            self.whole_rows: WholeRows | None = WholeRows(network, memories)
            self.recurrent: list = []
            self.obs_keys = self.whole_rows.obs_keys
            self.input_sizes: dict = {}
            self.state_shapes = self.whole_rows.state_shapes
            return
        self.whole_rows = None
        self.recurrent = [m for m in self.leaves if isinstance(m, _RECURRENT)]
        for module in self.recurrent:
            check_recurrent_leaf(module)
        self.last_recurrent = max(
            (i for i, m in enumerate(self.leaves) if isinstance(m, _RECURRENT)), default=-1
        )
        self.tail = self.leaves[self.last_recurrent + 1 :]
        # the leaves after the last recurrent layer (the value head) can run call by call
        self.direct_tail = bool(self.tail) and all(_plain_leaf(m) for m in self.tail)
        state_keys = {k for m in self.recurrent for k in m.in_keys[1:]}
        self.obs_keys = [k for k in network.in_keys if k not in state_keys and k != "is_init"]

        # what the caller checks before a run: the inputs a recurrent layer reads directly,
        # with its input_size, and the stored states' keys with their per-step shapes
        self.input_sizes = {
            module.in_keys[0]: _layer(module).input_size
            for module in self.recurrent
            if module.in_keys[0] in self.obs_keys
        }
        self.state_shapes = {
            key: shape
            for module in self.recurrent
            for key, shape in zip(_state_keys(module), state_shapes(module), strict=True)
        }

    def run(
        self,
        inputs: dict,
        states: dict,
        is_init: torch.Tensor,
        done: torch.Tensor,
        value_key,
        initial_state: str,
        chunk_len: int | None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Returns ``(value, next_value)``, both ``[N, T, *value_shape]``.

        Args:
            inputs (dict): each key of :attr:`obs_keys` mapped to its ``(root, final)`` rows
                (``[N * T, *feature]``: the observations and the next observations).
            states (dict): in ``"stored"`` mode, each stored state's key mapped to its
                ``[N * T, num_layers, size]`` rows; else empty.
            is_init (torch.Tensor): bool ``[N, T]``.
            done (torch.Tensor): bool ``[N, T]``.
            value_key (NestedKey): where the critic writes its value.
            initial_state (str): ``"zeros"`` or ``"stored"``.
            chunk_len (int, optional): re-anchoring period.
        """
        n_rows, steps = done.shape
        if self.whole_rows is not None:
            return self.whole_rows.run(inputs, states, is_init, done, value_key, initial_state)
        if self.recurrent:
            plan = plan_segments(is_init, done, chunk_len)
            boot_idx = plan.boot_idx
            flat = _critic_inputs(inputs, boot_idx, plan)
            out = self._run_planned(flat, states, plan, initial_state, value_key)
            out = _take(out, plan.index)
        else:
            boot_idx = boot_steps(done)
            out = self.network(_critic_inputs(inputs, boot_idx, None)).get(value_key)
        return as_rows(out[: n_rows * steps], boot_idx, out[n_rows * steps :], done.shape)

    def _run_planned(
        self, flat: TensorDictBase, states: dict, plan: Plan, initial_state: str, value_key
    ) -> torch.Tensor:
        """Runs the critic's leaves over the calls' layout; returns the values there."""
        for i, module in enumerate(self.leaves):
            if not isinstance(module, _RECURRENT):
                flat = module(flat)
                continue
            if i == self.last_recurrent and self.direct_tail:
                tail = functools.partial(self._tail_call, module.out_keys[0], flat, value_key)
                values = self._run_recurrent(module, flat, states, plan, initial_state, tail)
                return torch.cat(values)
            outputs = self._run_recurrent(module, flat, states, plan, initial_state)
            flat.set(module.out_keys[0], torch.cat(outputs))
        return flat.get(value_key)

    def _tail_call(self, key, flat: TensorDictBase, value_key, call: Call, output: torch.Tensor):
        """Runs the plain leaves after the last recurrent layer on one call's output.

        Each leaf's inner module is called on the tensors its keys name, as
        :class:`~tensordict.nn.TensorDictModule` would, without a tensordict per call (whose
        fixed cost is measured on the GAE benchmark page). It runs right after the call, on
        an output still in cache, which is then freed: the outputs are never joined.
        """
        rows = slice(call.offset, call.offset + call.lanes * call.length)
        env = {unravel_key(key): output}
        for module in self.tail:
            _call_plain(module, env, flat, rows)
        return _lookup(env, flat, value_key, rows)

    def _initial_state(
        self,
        key,
        shape: tuple[int, int],
        states: dict,
        plan: Plan,
        initial_state: str,
        like: torch.Tensor,
    ) -> torch.Tensor:
        """The state pool ``[num_layers, pool_size, size]``, each segment's initial state first."""
        layers, size = shape
        pool = like.new_empty((layers, plan.pool_size, size))
        if initial_state == "zeros":
            pool[:, : plan.num_segments] = 0
            return pool
        stored = states[key][plan.first]
        keep = plan.continues.reshape(-1, *([1] * (stored.ndim - 1)))
        stored = torch.where(keep, stored, torch.zeros_like(stored))
        pool[:, : plan.num_segments] = stored.transpose(0, 1)
        return pool

    def _run_recurrent(
        self,
        module: TensorDictModuleBase,
        flat: TensorDictBase,
        states: dict,
        plan: Plan,
        initial_state: str,
        then: Callable[[Call, torch.Tensor], torch.Tensor] | None = None,
    ) -> list[torch.Tensor]:
        """Runs the layer call by call, carrying each segment's state.

        Returns the calls' outputs, or what ``then(call, output)`` makes of each right after
        its call.
        """
        is_lstm = isinstance(module, LSTMModule)
        layer = _layer(module)
        x = flat.get(module.in_keys[0])
        pools = [
            self._initial_state(key, shape, states, plan, initial_state, x)
            for key, shape in zip(_state_keys(module), state_shapes(module), strict=True)
        ]
        if then is None:
            return [_call_layer(layer, x, call, pools, is_lstm) for call in plan.calls]
        return [then(call, _call_layer(layer, x, call, pools, is_lstm)) for call in plan.calls]


class WholeRows:
    """The value pass of a critic with another memory: its own recurrent mode over whole rows.

    The critic runs once over the ``[N, T]`` rows in recurrent mode (each memory resets at
    ``is_init``, from the stored state there or zeros), then once in step mode over the
    bootstrap steps (the final observation after each segment that ends on a ``done`` step or
    at the end of its row), each memory starting from the state it reports after that step
    (its ``("next", state)`` outputs, set at every segment's last step). ``chunk_len`` does not
    apply: nothing is re-anchored.

    Args:
        network (TensorDictModuleBase): the critic.
        memories (list): its recurrent leaves.
    """

    def __init__(self, network: TensorDictModuleBase, memories: list) -> None:
        self.network = network
        self.state_shapes: dict = {}
        for module in memories:
            primers = module.make_tensordict_primer().primers
            for key, spec in primers.items(True, True):
                self.state_shapes[key] = tuple(spec.shape)
        state_keys = set(self.state_shapes)
        self.obs_keys = [k for k in network.in_keys if k not in state_keys and k != "is_init"]

    def run(
        self,
        inputs: dict,
        states: dict,
        is_init: torch.Tensor,
        done: torch.Tensor,
        value_key,
        initial_state: str,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """``(value, next_value)``, both ``[N, T, *value_shape]`` (see :meth:`ValuePass.run`)."""
        n_rows, steps = done.shape
        rows = TensorDict(
            {k: v[0].unflatten(0, (n_rows, steps)) for k, v in inputs.items()},
            [n_rows, steps],
        )
        rows.set("is_init", is_init.unsqueeze(-1))
        if initial_state == "stored":  # a segment that starts an episode starts from zeros
            for key, state in states.items():
                state = state.unflatten(0, (n_rows, steps))
                starts = is_init.reshape(*is_init.shape, *([1] * (state.dim() - 2)))
                rows.set(key, torch.where(starts, torch.zeros_like(state), state))
        with set_recurrent_mode(True):
            out = self.network(rows)
        value = out.get(value_key).flatten(0, 1)
        boot_idx = boot_steps(done)
        boot = TensorDict({k: v[1][boot_idx] for k, v in inputs.items()}, [boot_idx.numel()])
        boot.set("is_init", torch.zeros(boot_idx.numel(), 1, dtype=torch.bool, device=done.device))
        for key in self.state_shapes:
            after = out.get(("next", key) if isinstance(key, str) else ("next", *key))
            boot.set(key, after.flatten(0, 1)[boot_idx])
        with set_recurrent_mode(False):
            final = self.network(boot).get(value_key)
        return as_rows(value, boot_idx, final, done.shape)


def as_rows(
    value: torch.Tensor, boot_idx: torch.Tensor, final: torch.Tensor, rows: torch.Size
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(value, next_value)`` as ``[N, T, ...]``, from flat values and bootstrap values.

    Each step's next value is the next step's value, except at ``boot_idx``, where it is the
    bootstrap value ``final`` computed there.
    """
    next_value = torch.empty_like(value)
    next_value[:-1] = value[1:]
    next_value[boot_idx] = final
    shape = (*rows, *value.shape[1:])
    return value.reshape(shape), next_value.reshape(shape)


def _critic_inputs(inputs: dict, boot_idx: torch.Tensor, plan: Plan | None) -> TensorDictBase:
    """The critic's inputs: rows then bootstrap steps, or where the plan's calls read them."""
    flat = None
    for key, (root, final) in inputs.items():
        if plan is None:
            steps = torch.cat([root, final[boot_idx]])
        else:
            steps = _gather_steps(root, final, plan.reads, plan.index[root.shape[0] :])
        if flat is None:
            flat = TensorDict(batch_size=[steps.shape[0]], device=steps.device)
        flat.set(key, steps)
    return flat


def _gather_steps(
    root: torch.Tensor, final: torch.Tensor, reads: torch.Tensor, boot_positions: torch.Tensor
) -> torch.Tensor:
    """The critic's inputs in the calls' layout: row ``p`` is row ``reads[p]`` of both, stacked.

    ``root`` holds the ``N * T`` row steps' inputs and ``final`` their next observations;
    ``boot_positions`` (the plan's ``index[N * T:]``) are the few positions that read
    ``final``. Gathering from ``root`` and then overwriting those positions copies half the
    rows that joining ``root`` and ``final`` before one gather would.
    """
    n_steps = root.shape[0]
    steps = root.index_select(0, reads.clamp(max=n_steps - 1))
    boot_reads = reads.index_select(0, boot_positions) - n_steps
    return steps.index_copy_(0, boot_positions, final.index_select(0, boot_reads))


def state_shapes(module: TensorDictModuleBase) -> list[tuple[int, int]]:
    """Per-step ``(num_layers, size)`` of a recurrent leaf's states: ``h`` (and ``c``)."""
    layer = _layer(module)
    if isinstance(module, LSTMModule):
        h_size = layer.proj_size if layer.proj_size > 0 else layer.hidden_size
        return [(layer.num_layers, h_size), (layer.num_layers, layer.hidden_size)]
    return [(layer.num_layers, layer.hidden_size)]


def _layer(module: TensorDictModuleBase) -> nn.Module:
    """The ``torch.nn`` layer of an LSTMModule or GRUModule."""
    return module.lstm if isinstance(module, LSTMModule) else module.gru


def _state_keys(module: TensorDictModuleBase) -> list:
    """The keys a recurrent leaf reads its states from (its in-keys after the input)."""
    return [k for k in module.in_keys[1:] if k != "is_init"][: len(state_shapes(module))]


def _call_layer(
    layer: nn.Module, x: torch.Tensor, call: Call, pools: list[torch.Tensor], is_lstm: bool
) -> torch.Tensor:
    """One dense call; appends the reached states to ``pools``; returns ``[steps, out]``.

    It runs the ATen op that ``nn.LSTM``/``nn.GRU.forward`` runs, with the layer's own weights
    and settings, on time-major input, skipping ``forward``'s Python checks (their cost per
    call is on the GAE benchmark page); hooks registered on the layer are not run.
    """
    block = x[call.offset : call.offset + call.lanes * call.length]
    block = block.view(call.length, call.lanes, *x.shape[1:])
    hidden = [pool.index_select(1, call.sources) for pool in pools]
    out, *reached = rnn_op(is_lstm)(
        block,
        tuple(hidden) if is_lstm else hidden[0],
        rnn_flat_weights(layer),
        layer.bias,
        layer.num_layers,
        float(layer.dropout),
        layer.training,
        layer.bidirectional,
        False,  # batch_first
    )
    for pool, state in zip(pools, reached, strict=True):
        pool[:, call.slot : call.slot + call.lanes] = state
    return out.view(call.lanes * call.length, -1)


def _take(x: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    """``x[index]`` along dim 0 (as a 1-D gather when ``x`` has one element per row: faster)."""
    if x[0].numel() == 1:
        return x.reshape(-1).index_select(0, index).view(-1, *x.shape[1:])
    return x.index_select(0, index)


def _plain_leaf(module: TensorDictModuleBase) -> bool:
    """Whether a leaf is a plain TensorDictModule: tensors in by key, tensors out by key."""
    return (
        type(module) is TensorDictModule
        and not has_kwargs_in_keys(module)
        and module.inplace is True
        and list(module.out_keys) == list(module.out_keys_source)
    )


def _call_plain(module: TensorDictModule, env: dict, flat: TensorDictBase, rows: slice) -> None:
    """What a plain :class:`~tensordict.nn.TensorDictModule` does, on tensors in ``env``."""
    tensors = tuple(_lookup(env, flat, key, rows) for key in module.in_keys)
    inner = module.module
    call = inner if module.method is None else getattr(inner, module.method)
    out = call(*tensors, **module.method_kwargs)
    if isinstance(out, (dict, TensorDictBase)):
        out = tuple(out[key] for key in module.out_keys)
    elif not isinstance(out, tuple):
        out = (out,)
    if len(out) != len(module.out_keys):
        raise RuntimeError(
            f"{type(module.module).__name__} returned {len(out)} tensors for "
            f"out_keys={module.out_keys}."
        )
    env.update((k, v) for k, v in zip(module.out_keys, out, strict=True) if k != "_")


def _lookup(env: dict, flat: TensorDictBase, key, rows: slice) -> torch.Tensor:
    """A tensor computed for this call, else the call's rows of a critic input."""
    key = unravel_key(key)
    return env[key] if key in env else flat.get(key)[rows]
