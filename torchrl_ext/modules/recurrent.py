"""LSTMModule and GRUModule whose recurrent mode runs whole rows cut at ``is_init``.

TorchRL's modules, in recurrent mode, split every ``[B, T]`` row at its episode starts and pad
the pieces into a batch of ``[segments, T']`` sequences, so their cost grows with the number of
episode starts. These subclasses take the same arguments, keys, primers and checkpoints. Step by
step (as in a collector) they give TorchRL's outputs bit for bit, from one layer call on the flat
batch instead of TorchRL's TensorDict reshapes; in recurrent mode they run each row in one pass
instead, replacing the state by the stored one at every episode start:

* CPU, float32 or float64: numba kernels for the serial part of forward and backward, and one
  matrix product over all steps for everything else (:mod:`torchrl_ext.modules._compiled`);
* any other device or dtype (CUDA: cuDNN): one packed-sequence call over all segments
  (:mod:`torchrl_ext.modules._packed`).

The semantics are TorchRL's recurrent mode, exactly: a segment starts at ``t = 0`` and at every
later step where ``is_init`` is set, from the stored state at that step (``in_keys[1:]``; zeros
when the tensordict holds none); the ``("next", state)`` outputs hold the state after each
segment's last step and zeros at the other steps. A batch without elements (``[0, T]``) gives
entries without elements, of TorchRL's shapes and dtypes, in both modes. Configurations
without a whole-row path here run TorchRL's own recurrent path unchanged: dropout between
layers while training, projections (``proj_size > 0``), bidirectional or python-based layers,
and an explicit ``recurrent_backend`` other than ``"pad"`` or ``"auto"``. The measurements are
on the recurrent-module benchmark page.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from tensordict import TensorDictBase
from tensordict.nn import dispatch
from torch import nn
from torchrl import modules as _torchrl_modules

from torchrl_ext.modules import _compiled
from torchrl_ext.modules._packed import run_packed

__all__ = ["GRUModule", "LSTMModule"]


class LSTMModule(_torchrl_modules.LSTMModule):
    """TorchRL's :class:`~torchrl.modules.LSTMModule`, with whole rows in recurrent mode.

    Same constructor, keys, :meth:`make_tensordict_primer` and ``state_dict`` as TorchRL's
    class, so replacing the import switches a model and keeps its checkpoints. Outside
    recurrent mode (one step at a time, as in a collector) it gives TorchRL's outputs bit for
    bit, with less overhead per call. In recurrent
    mode (:class:`~torchrl.modules.set_recurrent_mode`) it computes what TorchRL's does, with
    gradients, at about the cost of one ``nn.LSTM`` pass over whole rows, however many episodes
    start inside them (see the module docstring for what runs where).

    Args:
        *args: as for :class:`torchrl.modules.LSTMModule`.
        **kwargs: as for :class:`torchrl.modules.LSTMModule`.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from torchrl.modules import set_recurrent_mode
        >>> from torchrl_ext.modules import LSTMModule
        >>> _ = torch.manual_seed(0)
        >>> lstm = LSTMModule(input_size=3, hidden_size=8, in_key="obs", out_key="features")
        >>> is_init = torch.zeros(2, 5, 1, dtype=torch.bool)
        >>> is_init[:, 0] = is_init[0, 3] = True  # row 0 holds two episodes
        >>> data = TensorDict({"obs": torch.randn(2, 5, 3), "is_init": is_init}, [2, 5])
        >>> with set_recurrent_mode(True):
        ...     out = lstm(data)
        >>> out["features"].shape, out["next", "recurrent_state_h"].shape
        (torch.Size([2, 5, 8]), torch.Size([2, 5, 1, 8]))
        >>> bool(out["next", "recurrent_state_c"][0, 2].any())  # the first episode's last step
        True
    """

    @dispatch
    def forward(self, tensordict: TensorDictBase) -> TensorDictBase:
        """Runs one step per row or, in recurrent mode, whole rows."""
        if not self.recurrent_mode:
            out = _forward_step(self, self.lstm, tensordict)
            return super().forward(tensordict) if out is None else out
        if not _runs_whole_rows(self.lstm, self.recurrent_backend):
            return super().forward(tensordict)
        return _forward_rows(self, self.lstm, tensordict, _lstm_layers)


class GRUModule(_torchrl_modules.GRUModule):
    """TorchRL's :class:`~torchrl.modules.GRUModule`, with whole rows in recurrent mode.

    The GRU counterpart of :class:`LSTMModule`: same constructor, keys, primer and
    ``state_dict`` as TorchRL's class, TorchRL's step-by-step outputs bit for bit, and whole
    rows in recurrent mode.

    Args:
        *args: as for :class:`torchrl.modules.GRUModule`.
        **kwargs: as for :class:`torchrl.modules.GRUModule`.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from torchrl.modules import set_recurrent_mode
        >>> from torchrl_ext.modules import GRUModule
        >>> _ = torch.manual_seed(0)
        >>> gru = GRUModule(input_size=3, hidden_size=8, in_key="obs", out_key="features")
        >>> is_init = torch.zeros(2, 5, 1, dtype=torch.bool)
        >>> is_init[:, 0] = is_init[1, 2] = True
        >>> data = TensorDict({"obs": torch.randn(2, 5, 3), "is_init": is_init}, [2, 5])
        >>> with set_recurrent_mode(True):
        ...     out = gru(data)
        >>> out["features"].shape, out["next", "recurrent_state"].shape
        (torch.Size([2, 5, 8]), torch.Size([2, 5, 1, 8]))
    """

    @dispatch
    def forward(self, tensordict: TensorDictBase) -> TensorDictBase:
        """Runs one step per row or, in recurrent mode, whole rows."""
        if not self.recurrent_mode:
            out = _forward_step(self, self.gru, tensordict)
            return super().forward(tensordict) if out is None else out
        if not _runs_whole_rows(self.gru, self.recurrent_backend):
            return super().forward(tensordict)
        return _forward_rows(self, self.gru, tensordict, _gru_layers)


def _runs_whole_rows(layer: nn.Module, backend: str) -> bool:
    """Whether this module's configuration has a whole-row path here (else TorchRL's runs)."""
    return (
        type(layer) in (nn.LSTM, nn.GRU)
        and not layer.bidirectional
        and getattr(layer, "proj_size", 0) == 0
        and not (layer.training and layer.dropout > 0 and layer.num_layers > 1)
        and backend in ("pad", "auto")
    )


def _forward_step(
    module: nn.Module, layer: nn.Module, tensordict: TensorDictBase
) -> TensorDictBase | None:
    """One step per row, as TorchRL's step path computes it, without its tensordict reshapes.

    Returns ``None``, so that TorchRL's path runs (and reports what is wrong), for anything but
    plain tensors of the expected shapes or a layer other than ``nn.LSTM``/``nn.GRU``.
    """
    shape = tensordict.shape
    x = tensordict.get(module.in_keys[0], None)
    is_init = tensordict.get("is_init", None)
    if not (
        type(layer) in (nn.LSTM, nn.GRU)
        and isinstance(x, torch.Tensor)
        and x.shape == (*shape, layer.input_size)
        and isinstance(is_init, torch.Tensor)
        and is_init.dtype == torch.bool
        and is_init.shape in (shape, (*shape, 1))
    ):
        return None
    initial = _step_states(module, layer, tensordict, is_init, x)
    if initial is None:
        return None
    n = is_init.numel()
    y, final = layer(
        x.reshape(n, 1, layer.input_size), tuple(initial) if len(initial) > 1 else initial[0]
    )
    tensordict.set(module.out_keys[0], y.reshape(*shape, y.shape[-1]))
    finals = final if isinstance(final, tuple) else (final,)
    for key, state in zip(module.out_keys[1:], finals, strict=True):
        tensordict.set(key, state.transpose(0, 1).reshape(*shape, *state.shape[::2]))
    return tensordict


def _step_states(
    module: nn.Module,
    layer: nn.Module,
    tensordict: TensorDictBase,
    is_init: torch.Tensor,
    x: torch.Tensor,
) -> list[torch.Tensor] | None:
    """The states a step starts from, ``[layers, n, size]`` each, zero where ``is_init``.

    Zeros when the tensordict holds no state; ``None`` when its states are not all tensors of
    shape ``[*batch, layers, size]``.
    """
    keys = [k for k in module.in_keys[1:] if k != "is_init"]
    depth = layer.num_layers * (2 if layer.bidirectional else 1)
    sizes = [getattr(layer, "proj_size", 0) or layer.hidden_size, layer.hidden_size]
    n = is_init.numel()
    states = [tensordict.get(key, None) for key in keys]
    if all(state is None for state in states):
        return [x.new_zeros(depth, n, size) for size in sizes[: len(keys)]]
    expected = [(*tensordict.shape, depth, size) for size in sizes[: len(keys)]]
    if not all(
        isinstance(s, torch.Tensor) and s.shape == e for s, e in zip(states, expected, strict=True)
    ):
        return None
    reset = is_init.reshape(n, 1, 1)
    return [
        torch.where(reset, 0, s.reshape(n, depth, s.shape[-1])).transpose(0, 1).contiguous()
        for s in states
    ]


Layers = Callable[[nn.Module, torch.Tensor, tuple | None, torch.Tensor], tuple[torch.Tensor, list]]


def _forward_rows(
    module: nn.Module, layer: nn.Module, tensordict: TensorDictBase, run_layers: Layers
) -> TensorDictBase:
    """Recurrent mode over whole rows: reads, checks, runs, writes back into ``tensordict``."""
    name = type(module).__name__
    shape = tensordict.shape
    if len(shape) == 0:
        raise ValueError(
            f"{name} in recurrent mode needs a tensordict whose last batch dimension is time; "
            f"got batch_size={tuple(shape)}."
        )
    n_rows, n_steps = shape[:-1].numel(), shape[-1]
    x = _input(name, module.in_keys[0], tensordict, layer)
    starts = _starts(name, tensordict, n_rows, n_steps)
    states = _stored_states(name, module, layer, tensordict)
    if starts.numel() == 0:
        return _empty_result(module, layer, tensordict, x, states)
    x = x.reshape(n_rows, n_steps, x.shape[-1])
    if x.device.type == "cpu" and x.dtype in _compiled.DTYPES:
        output, next_states = run_layers(layer, x, states, starts)
    else:
        output, next_states = run_packed(layer, x, states, starts)
    tensordict.set(module.out_keys[0], output.reshape(*shape, -1))
    for key, state in zip(module.out_keys[1:], next_states, strict=True):
        tensordict.set(key, state.reshape(*shape, *state.shape[-2:]))
    return tensordict


def _input(name: str, key, tensordict: TensorDictBase, layer: nn.Module) -> torch.Tensor:
    x = tensordict.get(key)
    if x.shape[-1] != layer.input_size or x.dim() != tensordict.batch_dims + 1:
        raise ValueError(
            f"{name} expects {key!r} of shape [*batch, T, {layer.input_size}] for a tensordict of "
            f"batch_size={tuple(tensordict.shape)}; got shape={tuple(x.shape)}."
        )
    if x.dtype != layer.weight_hh_l0.dtype:
        raise TypeError(
            f"{name} holds {layer.weight_hh_l0.dtype} weights and got {key!r} of "
            f"dtype={x.dtype}; convert one to the other."
        )
    return x


def _empty_result(
    module: nn.Module,
    layer: nn.Module,
    tensordict: TensorDictBase,
    x: torch.Tensor,
    states: tuple[torch.Tensor, ...] | None,
) -> TensorDictBase:
    """The outputs of a batch without elements, as TorchRL's recurrent mode gives them.

    Entries of shape ``[*batch, ...]`` holding no values, computed by the layer from no rows, so
    that they stay in the graph of its weights, of ``x`` and of the stored ``states`` (a loss
    over them has zero gradients).
    """
    shape = tensordict.shape
    hx = None
    if states is not None:
        hx = tuple(s.reshape(0, *s.shape[-2:]).transpose(0, 1) for s in states)
        hx = hx if len(hx) > 1 else hx[0]
    y, finals = layer(x.reshape(0, 1, layer.input_size), hx)
    tensordict.set(module.out_keys[0], y.reshape(*shape, y.shape[-1]))
    finals = finals if isinstance(finals, tuple) else (finals,)
    for key, state in zip(module.out_keys[1:], finals, strict=True):
        tensordict.set(key, state.reshape(*shape, *state.shape[::2]))
    return tensordict


def _starts(name: str, tensordict: TensorDictBase, n_rows: int, n_steps: int) -> torch.Tensor:
    """Bool ``[B, T]``: where a segment starts (``is_init``, and every row's first step)."""
    is_init = tensordict.get("is_init", None)
    if is_init is None:
        raise KeyError(
            f"{name} in recurrent mode cuts rows at 'is_init', and the tensordict has no "
            "'is_init' entry; add torchrl.envs.InitTracker to the env (or set a bool "
            "'is_init' of shape [*batch, T, 1])."
        )
    if is_init.dtype != torch.bool:
        raise TypeError(f"{name} needs a bool 'is_init'; got dtype={is_init.dtype}.")
    if is_init.shape not in (tensordict.shape, (*tensordict.shape, 1)):  # TorchRL takes both
        raise ValueError(
            f"{name} expects 'is_init' of shape {(*tensordict.shape, 1)} (or "
            f"{tuple(tensordict.shape)}); got shape={tuple(is_init.shape)}."
        )
    starts = is_init.reshape(n_rows, n_steps).clone()
    starts[:, :1] = True
    return starts


def _stored_states(
    name: str, module: nn.Module, layer: nn.Module, tensordict: TensorDictBase
) -> tuple[torch.Tensor, ...] | None:
    """The stored states (``in_keys[1:]``), each ``[B, T, num_layers, H]``; ``None`` if absent."""
    keys = [k for k in module.in_keys[1:] if k != "is_init"]
    states = [tensordict.get(key, None) for key in keys]
    if all(state is None for state in states):
        return None
    if any(state is None for state in states):
        missing = [key for key, state in zip(keys, states, strict=True) if state is None]
        raise KeyError(
            f"{name} found some of its recurrent states {keys} but not {missing}; "
            "provide all of them (TensorDictPrimer does) or none (zeros)."
        )
    expected = (*tensordict.shape, layer.num_layers, layer.hidden_size)
    for key, state in zip(keys, states, strict=True):
        if state.shape != expected:
            raise ValueError(
                f"{name} expects {key!r} of shape {expected}; got shape={tuple(state.shape)}."
            )
    n_rows = tensordict.shape[:-1].numel()
    return tuple(state.reshape(n_rows, *expected[-3:]) for state in states)


def _layer_weights(layer: nn.Module, index: int) -> tuple[torch.Tensor | None, ...]:
    """``(w_ih, w_hh, b_ih, b_hh)`` of layer ``index`` (biases ``None`` without bias)."""
    names = ("weight_ih", "weight_hh", "bias_ih", "bias_hh")
    return tuple(getattr(layer, f"{n}_l{index}", None) for n in names)


def _by_layer(per_layer: list[torch.Tensor]) -> torch.Tensor:
    """``[B, T, num_layers, H]`` from each layer's ``[B, T, H]``."""
    return per_layer[0].unsqueeze(-2) if len(per_layer) == 1 else torch.stack(per_layer, -2)


def _lstm_layers(layer, x, states, starts):
    """The compiled CPU path of an ``nn.LSTM``: ``(output, [next_h, next_c])``."""
    h_layers, c_layers = [], []
    for index in range(layer.num_layers):
        init_h, init_c = (None, None) if states is None else (s[:, :, index] for s in states)
        weights = _layer_weights(layer, index)
        x, next_h, next_c = _compiled.lstm_layer(x, init_h, init_c, starts, weights)
        h_layers.append(next_h)
        c_layers.append(next_c)
    return x, [_by_layer(h_layers), _by_layer(c_layers)]


def _gru_layers(layer, x, states, starts):
    """The compiled CPU path of an ``nn.GRU``: ``(output, [next_h])``."""
    h_layers = []
    for index in range(layer.num_layers):
        init_h = None if states is None else states[0][:, :, index]
        x, next_h = _compiled.gru_layer(x, init_h, starts, _layer_weights(layer, index))
        h_layers.append(next_h)
    return x, [_by_layer(h_layers)]
