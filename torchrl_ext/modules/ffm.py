"""FFMModule: Fast and Forgetful Memory with the TensorDict face of TorchRL's LSTMModule.

Fast and Forgetful Memory (Morad et al., "Reinforcement Learning with Fast and Forgetful
Memory", NeurIPS 2023) keeps, per feature, a sum of its past inputs that decays and rotates in
the complex plane at learned rates. Its authors, who also wrote POPGym, built it as a drop-in
replacement for a GRU and evaluated it on every POPGym task: with the GRU's hyperparameters
unchanged, it earned more reward than the GRU across the benchmark.

The module takes the keys, primers and modes of :class:`~torchrl_ext.modules.LSTMModule`, so it
sits where an LSTM does in a policy, in the networks of a loss module, or in the critic whose
values :class:`~torchrl_ext.objectives.RecurrentGAE` recomputes. One step at a time (as in a
collector) it is a few plain PyTorch operations. In recurrent mode it runs whole ``[B, T]``
rows with the trace recurrence computed as a chunked scan
(:mod:`torchrl_ext.modules._chunked_scan`): linear work in ``T`` in about ``2 sqrt(T)``
Python-level steps, the dense layers running on the same tiles
(:mod:`torchrl_ext.modules._ffm_rows`). ``benchmarks/scan_memory_report.py`` measures its
training pass against the LSTM's.
"""

from __future__ import annotations

import math
from typing import ClassVar

import torch
import torch.nn.functional as F
from tensordict import TensorDictBase, unravel_key
from tensordict.nn import TensorDictModuleBase, dispatch
from tensordict.utils import NestedKey
from torch import nn
from torchrl.data import Unbounded
from torchrl.envs import TensorDictPrimer
from torchrl.modules import recurrent_mode as torchrl_recurrent_mode

from torchrl_ext._checks import check_bool, check_float_dtype, check_int, check_key
from torchrl_ext._workspace import Workspace
from torchrl_ext.modules._ffm_rows import ffm_rows

__all__ = ["FFMModule"]


class FFMModule(TensorDictModuleBase):
    r"""Fast and Forgetful Memory as a TensorDict module, with the face of ``LSTMModule``.

    Per step, from the input :math:`x_t` (sizes :math:`m` = ``memory_size``, :math:`c` =
    ``context_size``, :math:`H` = ``hidden_size``):

    .. math::

        [u_t, s_t, g_t, o_t] &= W_{pre} x_t + b_{pre}
            \quad (\text{sizes } m, H, m, H) \\
        S_t &= \gamma \odot S_{t-1} + (u_t \odot \sigma(g_t))\, \mathbf{1}_c^\top \in
            \mathbb{C}^{m \times c},
            \quad \gamma_{jk} = e^{-|\alpha_j|} e^{i \omega_k} \\
        z_t &= W_{mix} \operatorname{vec}(\operatorname{Re} S_t, \operatorname{Im} S_t)
            + b_{mix} \\
        y_t &= \operatorname{LN}(z_t) \odot \sigma(o_t) + s_t \odot (1 - \sigma(o_t))

    with ``vec`` flattening ``(m, c, (real, imaginary))`` in that order and a layer norm
    without affine parameters (epsilon ``1e-5``). This is the FFM layer of the reference
    implementation (proroklab/ffm): its input gate, decaying trace, read-out, layer norm,
    output gate and skip, its parameters (``pre`` and ``mix`` hold its ``pre`` and ``mix``
    layers' weights; ``alpha`` is its ``-a`` and ``omega`` its ``b``) and their
    initialisation: decay rates ``|alpha|`` evenly spaced from ``ln 2 - 0.02`` (about half the
    trace kept per step) to ``ln(100) / 1024`` (1% kept after 1024 steps), periods
    ``2 pi / omega`` evenly spaced from 1 to 1024 steps. Where the reference clamps ``a`` into
    ``[-(ln 2 - 0.01), -1e-8]`` (its closed form divides by powers of ``gamma``, which must not
    overflow), the decay here is ``exp(-|alpha|)`` without a clamp: the chunked scan only
    multiplies by powers of ``gamma``. With the defaults and ``hidden_size=256`` the layer is
    the one of the paper's POPGym runs (``m = 32``, ``c = 4``).

    Keys and modes follow :class:`~torchrl.modules.LSTMModule`. The trace is stored as a real
    tensor of shape ``[*batch, m, c, 2]`` (real and imaginary parts) under
    ``"recurrent_state_ffm"``, read from ``in_keys[1]`` and written to ``out_keys[1]``
    (``("next", "recurrent_state_ffm")``), so that it goes through tensordicts, replay
    buffers and checkpoints like any float entry.

    * Step mode (the default, as in a collector): a ``[*batch]`` tensordict is one step per
      element. The trace read from ``in_keys[1]`` (zeros when absent) is reset to zeros where
      ``is_init`` is set; the output and the new trace are written.
    * Recurrent mode (:class:`~torchrl.modules.set_recurrent_mode`, or
      ``default_recurrent_mode=True``): the last batch dimension is time. A segment starts
      at ``t = 0`` and at every later step where ``is_init`` is set, from the stored trace
      of that step (zeros when the tensordict holds none); ``out_keys[1]`` holds the trace
      after each segment's last step and zeros at the other steps, as ``LSTMModule``
      writes its states. On the CPU the module keeps the outputs and intermediates of its
      latest passes (about ``24 m c + 8 H`` bytes per step in float32) and reuses each once
      no tensor holds it, so that a pass does not pay the operating system's first touch of
      fresh pages; copies and pickles of the module start without them.

    A batch without elements gives entries without elements, of the shapes above.

    Args:
        input_size (int): size of the input features.
        hidden_size (int): size of the output features.

    Keyword Args:
        memory_size (int, optional): ``m``, the number of trace channels (decay rates).
            Defaults to ``32``.
        context_size (int, optional): ``c``, the number of frequencies per channel. Defaults
            to ``4``.
        in_key (NestedKey, optional): the input's key; the state key is then
            ``"recurrent_state_ffm"``. Exclusive with ``in_keys``.
        in_keys (list of NestedKey, optional): ``[input, state]`` (and optionally
            ``"is_init"`` last). Exclusive with ``in_key``.
        out_key (NestedKey, optional): the output's key; the next state key is then
            ``("next", "recurrent_state_ffm")``. Exclusive with ``out_keys``.
        out_keys (list of NestedKey, optional): ``[output, next state]``. Exclusive with
            ``out_key``.
        device (torch.device, optional): device of the parameters. Defaults to ``None``
            (PyTorch's default).
        dtype (torch.dtype, optional): ``torch.float32`` or ``torch.float64``. Defaults to
            ``None`` (PyTorch's default).
        default_recurrent_mode (bool, optional): the mode used outside any
            :class:`~torchrl.modules.set_recurrent_mode` context. Defaults to ``None``
            (step mode).

    Raises:
        TypeError: for an argument of the wrong type.
        ValueError: for a size below 1, an unsupported dtype, or keys given both or neither
            ways or of the wrong length.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from torchrl.modules import set_recurrent_mode
        >>> from torchrl_ext.modules import FFMModule
        >>> _ = torch.manual_seed(0)
        >>> ffm = FFMModule(input_size=3, hidden_size=8, in_key="obs", out_key="features")
        >>> is_init = torch.zeros(2, 5, 1, dtype=torch.bool)
        >>> is_init[:, 0] = is_init[0, 3] = True  # row 0 holds two episodes
        >>> data = TensorDict({"obs": torch.randn(2, 5, 3), "is_init": is_init}, [2, 5])
        >>> with set_recurrent_mode(True):
        ...     out = ffm(data)
        >>> out["features"].shape, out["next", "recurrent_state_ffm"].shape
        (torch.Size([2, 5, 8]), torch.Size([2, 5, 32, 4, 2]))
        >>> bool(out["next", "recurrent_state_ffm"][0, 2].any())  # the first episode's end
        True
        >>> step = ffm(data[:, 0].exclude("features", "next"))  # one step, as a collector
        >>> torch.allclose(step["features"], out["features"][:, 0], atol=1e-6)
        True
    """

    DEFAULT_IN_KEYS: ClassVar[list[NestedKey]] = ["recurrent_state_ffm"]
    DEFAULT_OUT_KEYS: ClassVar[list[NestedKey]] = [("next", "recurrent_state_ffm")]

    def __init__(
        self,
        input_size: int,
        hidden_size: int,
        *,
        memory_size: int = 32,
        context_size: int = 4,
        in_key: NestedKey | None = None,
        in_keys: list[NestedKey] | None = None,
        out_key: NestedKey | None = None,
        out_keys: list[NestedKey] | None = None,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
        default_recurrent_mode: bool | None = None,
    ):
        super().__init__()
        self.input_size = check_int("input_size", input_size, minimum=1)
        self.hidden_size = check_int("hidden_size", hidden_size, minimum=1)
        self.memory_size = check_int("memory_size", memory_size, minimum=1)
        self.context_size = check_int("context_size", context_size, minimum=1)
        if default_recurrent_mode is not None:
            default_recurrent_mode = check_bool("default_recurrent_mode", default_recurrent_mode)
        self._recurrent_mode = default_recurrent_mode
        self.in_keys, self.out_keys = _keys(in_key, in_keys, out_key, out_keys)
        if dtype is not None:
            dtype = check_float_dtype("dtype", dtype)
        kwargs = {"device": device, "dtype": dtype}
        m, c, h = self.memory_size, self.context_size, self.hidden_size
        self.pre = nn.Linear(self.input_size, 2 * m + 2 * h, **kwargs)
        self.alpha = nn.Parameter(
            torch.linspace(math.log(2) - 0.02, math.log(100) / 1024, m, **kwargs)
        )
        self.omega = nn.Parameter(2 * math.pi / torch.linspace(1, 1024, c, **kwargs))
        self.mix = nn.Linear(2 * m * c, h, **kwargs)
        self.eps = 1e-5
        # the whole-row pass's CPU outputs and intermediates, kept mapped between passes
        self._workspace = Workspace(limit=24)

    def decay(self) -> torch.Tensor:
        """The complex ``[m, c]`` decay ``gamma = exp(-|alpha|) exp(i omega)`` of the trace."""
        shape = (self.memory_size, self.context_size)
        log_gamma = torch.complex(
            -self.alpha.abs()[:, None].expand(shape), self.omega.expand(shape)
        )
        return log_gamma.exp()

    @property
    def recurrent_mode(self) -> bool:
        """Whether calls run whole rows.

        The mode of the enclosing :class:`~torchrl.modules.set_recurrent_mode` context, else
        ``default_recurrent_mode``.
        """
        mode = torchrl_recurrent_mode()
        return bool(self._recurrent_mode) if mode is None else mode

    @recurrent_mode.setter
    def recurrent_mode(self, value) -> None:
        raise RuntimeError(
            "recurrent_mode cannot be set on the module; use the "
            "torchrl.modules.set_recurrent_mode context manager or the constructor's "
            "default_recurrent_mode."
        )

    def make_tensordict_primer(self) -> TensorDictPrimer:
        """A :class:`~torchrl.envs.TensorDictPrimer` of the stored trace, for the env.

        It adds the ``[m, c, 2]`` state entry (``in_keys[1]``) to the env's specs, zeros at
        every reset, as :meth:`torchrl.modules.LSTMModule.make_tensordict_primer` does for
        the LSTM's states.

        Raises:
            RuntimeError: if ``out_keys[1]`` is not ``("next", *in_keys[1])``.
        """
        state = _as_tuple(self.in_keys[1])
        if _as_tuple(self.out_keys[1]) != ("next", *state):
            raise RuntimeError(
                "make_tensordict_primer needs out_keys[1] to be ('next', in_keys[1]); got "
                f"in_keys={self.in_keys} and out_keys={self.out_keys}."
            )
        spec = Unbounded(shape=self._state_shape(), dtype=self.alpha.dtype)
        return TensorDictPrimer({state: spec}, expand_specs=True)

    @dispatch
    def forward(self, tensordict: TensorDictBase) -> TensorDictBase:
        """Runs one step per element or, in recurrent mode, whole rows."""
        if self.recurrent_mode:
            return self._forward_rows(tensordict)
        return self._forward_step(tensordict)

    def step(self, x: torch.Tensor, trace: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """One step on plain tensors: ``(output [n, H], new trace [n, m, c] complex)``.

        Args:
            x (torch.Tensor): ``[n, input_size]`` inputs.
            trace (torch.Tensor): ``[n, m, c]`` complex traces before the step.
        """
        m, h = self.memory_size, self.hidden_size
        u, skip, in_gate, out_gate = self.pre(x).split([m, h, m, h], -1)
        trace = self.decay() * trace + (u * in_gate.sigmoid()).unsqueeze(-1)
        z = self.mix(torch.view_as_real(trace).flatten(-3))
        normed = F.layer_norm(z, (h,), eps=self.eps)
        return torch.lerp(skip, normed, out_gate.sigmoid()), trace

    def _state_shape(self) -> tuple[int, int, int]:
        return (self.memory_size, self.context_size, 2)

    def _forward_step(self, tensordict: TensorDictBase) -> TensorDictBase:
        shape = tensordict.shape
        n = shape.numel()
        x = self._input(tensordict).reshape(n, self.input_size)
        reset = _is_init(tensordict).reshape(n, 1, 1)
        stored = self._stored(tensordict)
        if stored is None:
            trace = self._zero_trace(n, x)
        else:
            stored = stored.reshape(n, *self._state_shape())
            trace = torch.where(reset, 0, torch.complex(stored[..., 0], stored[..., 1]))
        y, trace = self.step(x, trace)
        tensordict.set(self.out_keys[0], y.reshape(*shape, self.hidden_size))
        state = torch.view_as_real(trace).reshape(*shape, *self._state_shape())
        return tensordict.set(self.out_keys[1], state)

    def _zero_trace(self, n: int, like: torch.Tensor) -> torch.Tensor:
        shape = (n, self.memory_size, self.context_size)
        return torch.zeros(shape, dtype=like.dtype.to_complex(), device=like.device)

    def _forward_rows(self, tensordict: TensorDictBase) -> TensorDictBase:
        shape = tensordict.shape
        if len(shape) == 0:
            raise ValueError(
                "FFMModule in recurrent mode needs a tensordict whose last batch dimension is "
                f"time; got batch_size={tuple(shape)}."
            )
        n_rows, n_steps = shape[:-1].numel(), shape[-1]
        x = self._input(tensordict).reshape(n_rows, n_steps, self.input_size)
        starts = _is_init(tensordict).reshape(n_rows, n_steps).clone()
        starts[:, :1] = True
        stored = self._stored(tensordict)
        if stored is not None:
            stored = stored.reshape(n_rows, n_steps, *self._state_shape())
        if starts.numel() == 0:
            y, next_state = self._empty_rows(x, stored)
        else:
            y, next_state = ffm_rows(
                x, stored, starts, self.decay(), self.pre, self.mix, self.eps, self._workspace
            )
        tensordict.set(self.out_keys[0], y.reshape(*shape, self.hidden_size))
        return tensordict.set(self.out_keys[1], next_state.reshape(*shape, *self._state_shape()))

    def _empty_rows(
        self, x: torch.Tensor, stored: torch.Tensor | None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """The outputs of rows without steps, or of no rows.

        Computed by :meth:`step` on no elements, so that they stay in the graph of the
        parameters, ``x`` and ``stored`` (a loss over them has zero gradients).
        """
        trace = self._zero_trace(0, x)
        if stored is not None:
            stored = stored.reshape(0, *self._state_shape())
            trace = torch.complex(stored[..., 0], stored[..., 1])
        y, trace = self.step(x.reshape(0, self.input_size), trace)
        return y, torch.view_as_real(trace)

    def _input(self, tensordict: TensorDictBase) -> torch.Tensor:
        key = self.in_keys[0]
        x = tensordict.get(key)
        if x.shape != (*tensordict.shape, self.input_size):
            raise ValueError(
                f"FFMModule expects {key!r} of shape [*batch, {self.input_size}] for a "
                f"tensordict of batch_size={tuple(tensordict.shape)}; got "
                f"shape={tuple(x.shape)}."
            )
        if x.dtype != self.alpha.dtype:
            raise TypeError(
                f"FFMModule holds {self.alpha.dtype} parameters and got {key!r} of "
                f"dtype={x.dtype}; convert one to the other."
            )
        return x

    def _stored(self, tensordict: TensorDictBase) -> torch.Tensor | None:
        """The stored trace ``[*batch, m, c, 2]``, ``None`` when the tensordict holds none."""
        key = self.in_keys[1]
        state = tensordict.get(key, None)
        if state is None:
            return None
        expected = (*tensordict.shape, *self._state_shape())
        if state.shape != expected:
            raise ValueError(
                f"FFMModule expects {key!r} of shape {expected} (real and imaginary parts "
                f"last); got shape={tuple(state.shape)}."
            )
        if state.dtype != self.alpha.dtype:
            raise TypeError(
                f"FFMModule holds {self.alpha.dtype} parameters and got {key!r} of "
                f"dtype={state.dtype}; convert one to the other."
            )
        return state


def _is_init(tensordict: TensorDictBase) -> torch.Tensor:
    """The bool ``is_init`` entry, ``[*batch]`` or ``[*batch, 1]`` (as TorchRL takes both)."""
    is_init = tensordict.get("is_init", None)
    if is_init is None:
        raise KeyError(
            "FFMModule resets its trace at 'is_init', and the tensordict has no 'is_init' "
            "entry; add torchrl.envs.InitTracker to the env (or set a bool 'is_init' of shape "
            "[*batch, 1])."
        )
    if is_init.dtype != torch.bool:
        raise TypeError(f"FFMModule needs a bool 'is_init'; got dtype={is_init.dtype}.")
    if is_init.shape not in (tensordict.shape, (*tensordict.shape, 1)):
        raise ValueError(
            f"FFMModule expects 'is_init' of shape {(*tensordict.shape, 1)} (or "
            f"{tuple(tensordict.shape)}); got shape={tuple(is_init.shape)}."
        )
    return is_init


def _as_tuple(key: NestedKey) -> tuple[str, ...]:
    return key if isinstance(key, tuple) else (key,)


def _keys(in_key, in_keys, out_key, out_keys) -> tuple[list, list]:
    """``(in_keys, out_keys)``: ``[input, state, "is_init"]`` and ``[output, next state]``."""
    if (in_key is None) == (in_keys is None):
        raise ValueError(
            "pass exactly one of in_key and in_keys, got "
            f"in_key={in_key!r} and in_keys={in_keys!r}."
        )
    if (out_key is None) == (out_keys is None):
        raise ValueError(
            "pass exactly one of out_key and out_keys, got "
            f"out_key={out_key!r} and out_keys={out_keys!r}."
        )
    if in_key is not None:
        in_keys = [check_key("in_key", in_key), *FFMModule.DEFAULT_IN_KEYS]
    if out_key is not None:
        out_keys = [check_key("out_key", out_key), *FFMModule.DEFAULT_OUT_KEYS]
    in_keys = _key_list("in_keys", in_keys, (2, 3))
    out_keys = _key_list("out_keys", out_keys, (2,))
    if len(in_keys) == 3 and in_keys[2] != "is_init":
        raise ValueError(
            f"in_keys must be [input, state] or [input, state, 'is_init'], got in_keys={in_keys!r}."
        )
    return [*in_keys[:2], "is_init"], out_keys


def _key_list(name: str, keys, lengths: tuple[int, ...]) -> list:
    if not isinstance(keys, (list, tuple)):
        raise TypeError(f"{name} must be a list of keys, got {name}={keys!r}.")
    if len(keys) not in lengths:
        expected = " or ".join(str(n) for n in lengths)
        raise ValueError(f"{name} must hold {expected} keys, got {name}={keys!r}.")
    return [unravel_key(check_key(f"{name}[{i}]", key)) for i, key in enumerate(keys)]
