"""FFM over whole ``[R, T]`` rows: one autograd Function working chunk position by position.

:class:`~torchrl_ext.modules.FFMModule`'s recurrent mode. The trace recurrence runs in the
chunked layout of :mod:`torchrl_ext.modules._chunked_scan`, and the dense layers around it run
on the same tiles (one chunk position ``j`` of every chunk of every row, ``R * N`` steps), right
after the trace of that tile is complete: the input projection while the traces are built, the
read-out (mixing layer, layer norm, output gate) while the carried values are added. The
backward pass walks the tiles back the same way, the trace gradient running through the reverse
recurrence. Each full-size intermediate is then written once and read back from cache, instead
of going through memory between a dozen separate operations and their autograd buffers, which
on the CPU cost more than the mixing layer's products themselves (the training pass is timed by
``benchmarks/scan_memory_report.py``).

On the CPU, the outputs and every intermediate (traces, tiles, their gradients) come from the
module's :class:`~torchrl_ext._workspace.Workspace`, and the tile operations write into them
(``out=``): a pass then pays no page fault for the first write to fresh memory, which costs
more than the arithmetic of an elementwise operation on machines where faults are slow.

What the forward pass keeps for the backward one: the chunked input, the traces, the
normalised read-out and its inverse standard deviations; the input and output projections are
recomputed from the input (a few columns per step).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import torch
from torch.autograd.function import once_differentiable

from torchrl_ext._workspace import Workspace
from torchrl_ext.modules._chunked_scan import (
    ChunkLayout,
    carry_into_chunks,
    decay_powers,
    reach,
)
from torchrl_ext.modules._products import weight_grad

__all__ = ["ffm_rows"]

Groups = list[tuple[torch.Tensor, torch.Tensor, torch.Tensor]]


@dataclass
class RowPlan:
    """What a call knows of its rows besides the tensors: layout, links, starts and ends.

    Attributes:
        layout (ChunkLayout): the chunked layout of the rows.
        links (torch.Tensor): ``[C, R, N]``, 0 where the trace restarts (and on padding).
        starts (list): per chunk position, the ``(r, n, k)`` of the segment starts there.
        start_index (tuple): the ``(j, r, n)`` of every segment start.
        ends (list): per chunk position, the ``(r, n, k)`` of the segment ends there.
        end_index (tuple): the ``(j, r, n)`` of every segment end.
        eps (float): the layer norm's epsilon.
        space (Workspace or None): where CPU outputs and intermediates come from (``None``:
            allocated).
    """

    layout: ChunkLayout
    links: torch.Tensor
    starts: Groups
    start_index: tuple[torch.Tensor, ...]
    ends: Groups
    end_index: tuple[torch.Tensor, ...]
    eps: float
    space: Workspace | None

    def empty(
        self, shape: tuple[int, ...], like: torch.Tensor, dtype: torch.dtype | None = None
    ) -> torch.Tensor:
        """An uninitialized intermediate on ``like``'s device (of ``dtype``, else ``like``'s)."""
        dtype = like.dtype if dtype is None else dtype
        if self.space is not None and like.device.type == "cpu":
            return self.space.empty(shape, dtype)
        return like.new_empty(shape, dtype=dtype)

    def backward_links(self) -> torch.Tensor:
        """``[C, R, N]``: the link from each step's successor into it (0 at the rows' ends)."""
        links = self.links
        into = torch.zeros_like(links)
        into[:-1] = links[1:]
        into[-1, :, :-1] = links[0, :, 1:]
        return into


class Weights(NamedTuple):
    """The pre-layer's rows regrouped: the trace's input and input gate, then the output's.

    The pre-layer's rows are ``[u | skip | input gate | output gate]``, as in the reference.
    """

    w_in: torch.Tensor
    b_in: torch.Tensor
    w_out: torch.Tensor
    b_out: torch.Tensor
    w_mix: torch.Tensor
    b_mix: torch.Tensor

    @classmethod
    def regroup(cls, w_pre, b_pre, w_mix, b_mix, memory_size: int) -> Weights:
        """The weights of the pre-layer ``(w_pre, b_pre)`` and the mixing layer, regrouped."""
        sizes = [memory_size, w_mix.shape[0]] * 2
        w_u, w_skip, w_ig, w_og = w_pre.split(sizes)
        b_u, b_skip, b_ig, b_og = b_pre.split(sizes)
        return cls(
            torch.cat([w_u, w_ig]),
            torch.cat([b_u, b_ig]),
            torch.cat([w_skip, w_og]),
            torch.cat([b_skip, b_og]),
            w_mix,
            b_mix,
        )

    def pre_layer(self, grads: Weights) -> tuple[torch.Tensor, torch.Tensor]:
        """The pre-layer's ``(weight, bias)`` gradient from gradients regrouped as ``self``."""
        m, h = self.w_in.shape[0] // 2, self.w_out.shape[0] // 2
        pieces = [
            torch.cat([g_in[:m], g_out[:h], g_in[m:], g_out[h:]])
            for g_in, g_out in ((grads.w_in, grads.w_out), (grads.b_in, grads.b_out))
        ]
        return pieces[0], pieces[1]


class _FFMRows(torch.autograd.Function):
    """``(output [R, T, H], end traces [K, m, c, 2])`` of FFM over whole rows."""

    @staticmethod
    def forward(ctx, x, init, gamma, w_pre, b_pre, w_mix, b_mix, plan: RowPlan):
        weights = Weights.regroup(w_pre, b_pre, w_mix, b_mix, gamma.shape[0])
        layout = plan.layout
        chunked = (layout.length, layout.n_rows, layout.count, x.shape[-1])
        xs = layout.to_chunks(x, plan.empty(chunked, x))
        trace = _local_traces(xs, init, gamma, weights, plan)
        y, normed, rstd = _read_out(trace, xs, gamma, weights, plan)
        ctx.save_for_backward(xs, init, gamma, w_pre, b_pre, w_mix, b_mix, trace, normed, rstd)
        ctx.plan = plan
        return y[:, : plan.layout.n_steps], torch.view_as_real(trace[plan.end_index])

    @staticmethod
    @once_differentiable
    def backward(ctx, grad_y, grad_ends):
        xs, init, gamma, w_pre, b_pre, w_mix, b_mix, trace, normed, rstd = ctx.saved_tensors
        plan, needs_x = ctx.plan, ctx.needs_input_grad[0]
        weights = Weights.regroup(w_pre, b_pre, w_mix, b_mix, gamma.shape[0])
        grads = Weights(*(torch.zeros_like(w) for w in weights))
        grad_xs = plan.empty(xs.shape, xs).zero_() if needs_x else None
        grad_trace = _read_out_backward(
            grad_y, grad_ends, xs, (trace, normed, rstd), gamma, weights, grads, grad_xs, plan
        )
        grad_gamma = _traces_backward(grad_trace, trace, xs, gamma, weights, grads, grad_xs, plan)
        grad_init = None
        if init is not None:
            at_starts = grad_trace[plan.start_index]
            grad_init = at_starts * gamma.conj()
            grad_gamma += (at_starts * init.conj()).sum(0)
        grad_x = plan.layout.from_chunks(grad_xs) if needs_x else None
        grad_w_pre, grad_b_pre = weights.pre_layer(grads)
        return grad_x, grad_init, grad_gamma, grad_w_pre, grad_b_pre, grads.w_mix, grads.b_mix, None


def ffm_rows(
    x: torch.Tensor,
    stored: torch.Tensor | None,
    starts: torch.Tensor,
    gamma: torch.Tensor,
    pre: torch.nn.Linear,
    mix: torch.nn.Linear,
    eps: float,
    space: Workspace | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """FFM over whole rows, the trace restarting from the stored state at each segment start.

    Args:
        x (torch.Tensor): ``[R, T, I]`` inputs (``R * T > 0``).
        stored (torch.Tensor or None): ``[R, T, m, c, 2]`` stored traces (real, imaginary),
            read at the segment starts; ``None`` for zeros.
        starts (torch.Tensor): bool ``[R, T]``, set where a segment starts (``t = 0`` too).
        gamma (torch.Tensor): ``[m, c]`` complex decay.
        pre (torch.nn.Linear): the pre-layer, rows ``[u | skip | input gate | output gate]``.
        mix (torch.nn.Linear): the read-out of the flattened ``(real, imaginary)`` trace.
        eps (float): the layer norm's epsilon.
        space (Workspace, optional): where the CPU outputs and intermediates come from; ``None``
            allocates them afresh.

    Returns:
        ``(output [R, T, H], next traces [R, T, m, c, 2])``: the traces after each segment's
        last step, zeros elsewhere.
    """
    n_rows, n_steps = starts.shape
    layout = ChunkLayout(n_rows, n_steps)
    ends = torch.ones_like(starts)
    ends[:, :-1] = starts[:, 1:]
    start_pairs, end_pairs = starts.nonzero(as_tuple=True), ends.nonzero(as_tuple=True)
    plan = RowPlan(
        layout,
        layout.links(starts, x.dtype),
        layout.by_position(*start_pairs),
        layout.positions(*start_pairs),
        layout.by_position(*end_pairs),
        layout.positions(*end_pairs),
        eps,
        space,
    )
    init = None if stored is None else torch.view_as_complex(stored[start_pairs].contiguous())
    y, end_traces = _FFMRows.apply(x, init, gamma, pre.weight, pre.bias, mix.weight, mix.bias, plan)
    next_traces = plan.empty((n_rows, n_steps, *end_traces.shape[1:]), x).zero_()
    return y, next_traces.index_put_(end_pairs, end_traces)


# -- forward ---------------------------------------------------------------------------------


def _input_gate(x: torch.Tensor, weights: Weights, out: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """``(u, sigmoid(input gate))``, each ``[n, m]``, of ``n`` steps ``x``, in ``out``."""
    u, gate = torch.addmm(weights.b_in, x, weights.w_in.t(), out=out).chunk(2, -1)
    return u, gate.sigmoid_()


def _output_gate(x: torch.Tensor, weights: Weights, out: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """``(skip, sigmoid(output gate))``, each ``[n, H]``, of ``n`` steps ``x``, in ``out``."""
    skip, gate = torch.addmm(weights.b_out, x, weights.w_out.t(), out=out).chunk(2, -1)
    return skip, gate.sigmoid_()


def _inject(tile: torch.Tensor, values: torch.Tensor, group) -> None:
    """Adds ``values[k]`` at the ``(r, n)`` of a :meth:`ChunkLayout.by_position` group."""
    rows, chunks, k = group
    if k.numel():
        tile.index_put_((rows, chunks), values[k], accumulate=True)


def _restart(tile: torch.Tensor, values: torch.Tensor | None, group) -> None:
    """Sets the ``(r, n)`` of a group to ``values[k]`` (zeros for ``None``): a restart."""
    rows, chunks, k = group
    if k.numel():
        tile[rows, chunks] = 0 if values is None else values[k]


def _local_traces(xs, init, gamma, weights: Weights, plan: RowPlan) -> torch.Tensor:
    """``[C, R, N, m, c]``: each chunk's traces from a zero entry value.

    At a segment start the trace is its input plus ``gamma`` times the stored state.
    """
    length, n_rows, count, n_in = xs.shape
    trace = plan.empty((*xs.shape[:3], *gamma.shape), xs, gamma.dtype)
    tile = plan.empty((n_rows * count, weights.w_in.shape[0]), xs)
    restarted = None if init is None else gamma * init
    for j in range(length):
        u, gate = _input_gate(xs[j].view(-1, n_in), weights, tile)
        u = u.mul_(gate).view(n_rows, count, -1, 1)
        if j == 0:
            trace[j].zero_()
        else:
            torch.mul(trace[j - 1], gamma, out=trace[j])
        _restart(trace[j], restarted, plan.starts[j])
        torch.view_as_real(trace[j])[..., 0].add_(u)
    return trace


def _layer_norm(z: torch.Tensor, eps: float, out: torch.Tensor, rstd: torch.Tensor) -> None:
    """Writes ``z`` normalised over its last dimension into ``out`` and ``1 / std`` into ``rstd``.

    ``z`` is overwritten.
    """
    z.sub_(z.mean(-1, keepdim=True))
    variance = torch.linalg.vecdot(z, z).unsqueeze_(-1).div_(z.shape[-1])
    torch.rsqrt(variance.add_(eps), out=rstd)
    torch.mul(z, rstd, out=out)


def _read_out(trace, xs, gamma, weights: Weights, plan: RowPlan):
    """Adds the carried values to the traces and reads every tile out, as soon as it is done.

    Returns ``(output [R, N * C, H], normalised read-out [C, R * N, H], 1 / std
    [C, R * N, 1])``.
    """
    layout = plan.layout
    length, n_rows, count, n_in = xs.shape
    n_out = weights.w_mix.shape[0]
    reached = reach(plan.links.view(length, n_rows, count, 1, 1), reverse=False)
    powers = decay_powers(gamma, length, reverse=False)
    carried = carry_into_chunks(trace, reached, powers, reverse=False)
    y = plan.empty((n_rows, layout.padded_steps, n_out), xs)
    normed = plan.empty((length, n_rows * count, n_out), xs)
    rstd = plan.empty((length, n_rows * count, 1), xs)
    flat = torch.view_as_real(trace).view(length, n_rows * count, -1)
    decayed, z, gates = _tiles(plan, carried, (n_rows * count, n_out), (n_rows * count, 2 * n_out))
    for j in range(length):
        trace[j].addcmul_(torch.mul(carried, reached[j], out=decayed), powers[j])
        torch.addmm(weights.b_mix, flat[j], weights.w_mix.t(), out=z)
        x = xs[j].view(-1, n_in)
        _layer_norm(z, plan.eps, normed[j], rstd[j])
        skip, gate = _output_gate(x, weights, gates)
        out = layout.step_view(y, j)
        torch.lerp(skip.view_as(out), normed[j].view_as(out), gate.view_as(out), out=out)
    return y, normed, rstd


def _tiles(plan: RowPlan, like: torch.Tensor, *shapes) -> list[torch.Tensor]:
    """One intermediate shaped like ``like``, then one per shape (of ``like``'s real dtype)."""
    real = like.real if like.is_complex() else like
    return [plan.empty(like.shape, like), *(plan.empty(shape, real) for shape in shapes)]


# -- backward --------------------------------------------------------------------------------


def _output_backward(grad, x, normed, rstd, weights: Weights, tiles):
    """``(grad of the mixing layer's output, of the skip, of the output gate)`` of one tile.

    ``tiles`` are ``([n, 2 H], [3, n, H])`` intermediates, where the gradients are written;
    ``grad`` is overwritten.
    """
    gates, work = tiles
    skip, gate = _output_gate(x, weights, gates)
    grad_normed = torch.mul(grad, gate, out=work[0])
    grad_skip = torch.sub(grad, grad_normed, out=work[1])
    grad_gate = torch.sub(normed, skip, out=work[2]).mul_(
        torch.addcmul(grad_normed, grad_normed, gate, value=-1, out=grad)
    )
    mean = grad_normed.mean(-1, keepdim=True)
    along = torch.linalg.vecdot(grad_normed, normed).unsqueeze_(-1).div_(grad.shape[-1])
    grad_z = grad_normed.sub_(mean).addcmul_(normed, along, value=-1).mul_(rstd)
    return grad_z, grad_skip, grad_gate


def _read_out_backward(
    grad_y, grad_ends, xs, saved, gamma, weights: Weights, grads: Weights, grad_xs, plan
) -> torch.Tensor:
    """``[C, R, N, m, c]``: the trace gradients from the outputs, run back within the chunks.

    Accumulates the read-out's and output projection's weight gradients (and ``grad_xs``).
    """
    trace, normed, rstd = saved
    layout = plan.layout
    length, n_rows, count, n_in = xs.shape
    n_out = weights.w_mix.shape[0]
    pad = layout.padded_steps - layout.n_steps
    if pad:
        grad_y = torch.cat([grad_y, grad_y.new_zeros(n_rows, pad, n_out)], 1)
    grad_y = grad_y.reshape(n_rows, layout.padded_steps, n_out)
    ends = torch.view_as_complex(grad_ends.contiguous())
    grad_trace = plan.empty(trace.shape, trace)
    flat = torch.view_as_real(trace).view(length, n_rows * count, -1)
    grad_flat = torch.view_as_real(grad_trace).view(length, n_rows * count, -1)
    grad = plan.empty((n_rows, count, n_out), xs)
    n = n_rows * count
    work = (plan.empty((n, 2 * n_out), xs), plan.empty((3, n, n_out), xs))
    for j in reversed(range(length)):
        x = xs[j].view(-1, n_in)
        grad.copy_(layout.step_view(grad_y, j))
        grad_z, *grad_out = _output_backward(
            grad.view(-1, n_out), x, normed[j], rstd[j], weights, work
        )
        grads.w_mix.addmm_(grad_z.t(), flat[j])
        grads.b_mix.add_(grad_z.sum(0))
        torch.mm(grad_z, weights.w_mix, out=grad_flat[j])
        _projection_backward(grad_out, x, weights.w_out, grads.w_out, grads.b_out, grad_xs, j)
        _inject(grad_trace[j], ends, plan.ends[j])
        if j < length - 1:
            _link_back(grad_trace, gamma.conj(), plan.starts[j + 1], j)
    return grad_trace


def _link_back(grad_trace: torch.Tensor, coef: torch.Tensor, restarts, j: int) -> None:
    """Adds ``coef * grad_trace[j + 1]`` into ``grad_trace[j]``, except where a segment starts.

    ``restarts`` is the group of segment starts at ``j + 1``, where nothing flows back.
    """
    grad_trace[j].addcmul_(grad_trace[j + 1], coef)
    rows, chunks, k = restarts
    if k.numel():
        undo = grad_trace[j + 1][rows, chunks] * coef
        grad_trace[j].index_put_((rows, chunks), undo.neg_(), accumulate=True)


def _projection_backward(grad_halves, x, weight, grad_weight, grad_bias, grad_xs, j) -> None:
    """Accumulates the gradients of a regrouped projection from its two halves' gradients."""
    size = grad_halves[0].shape[-1]
    for half, grad in enumerate(grad_halves):
        rows = slice(half * size, (half + 1) * size)
        grad_weight[rows].add_(weight_grad(grad, x))
        grad_bias[rows].add_(grad.sum(0))
        if grad_xs is not None:
            grad_xs[j].view_as(x).addmm_(grad, weight[rows])


def _input_backward(grad_u, x, weights: Weights, grads: Weights, grad_xs, j, tiles) -> None:
    """Accumulates the input projection's gradients from the trace inputs' ``grad_u``.

    ``tiles`` are ``([n, 2 m], [2, n, m])`` intermediates.
    """
    gates, work = tiles
    u, gate = _input_gate(x, weights, gates)
    grad_u_pre = torch.mul(grad_u, gate, out=work[0])
    grad_gate = torch.addcmul(grad_u_pre, grad_u_pre, gate, value=-1, out=work[1]).mul_(u)
    _projection_backward(
        (grad_u_pre, grad_gate), x, weights.w_in, grads.w_in, grads.b_in, grad_xs, j
    )


def _decay_grad(grad_trace, trace, links, j: int, out: torch.Tensor) -> torch.Tensor:
    """``[m, c]``: the sum of ``grad h_t * conj(h_{t-1})`` over the linked steps at ``j``.

    ``out`` is a ``[R, N, m, c]`` intermediate for the products.
    """
    if j > 0:
        product, kept = torch.mul(grad_trace[j], trace[j - 1].conj(), out=out), links[j]
    else:  # the link into a chunk's first step comes from the previous chunk's last one
        product, kept = grad_trace[0, :, 1:] * trace[-1, :, :-1].conj(), links[0, :, 1:]
    shape = trace.shape[-2:]
    parts = torch.view_as_real(product).reshape(kept.numel(), 2 * shape.numel())
    return torch.view_as_complex((kept.reshape(-1) @ parts).view(*shape, 2))


def _traces_backward(
    grad_trace, trace, xs, gamma, weights: Weights, grads: Weights, grad_xs, plan
) -> torch.Tensor:
    """Completes ``grad_trace`` across chunks and runs it into the input projection.

    Returns the gradient of ``gamma`` from the trace steps (the stored states' part is added
    by the caller).
    """
    length, n_rows, count, n_in = xs.shape
    into = plan.backward_links().view(length, n_rows, count, 1, 1)
    reached = reach(into, reverse=True)
    powers = decay_powers(gamma.conj(), length, reverse=True)
    carried = carry_into_chunks(grad_trace, reached, powers, reverse=True)
    grad_gamma = torch.zeros_like(gamma)
    n, m = n_rows * count, gamma.shape[0]
    decayed, grad_u, gates, work = _tiles(plan, carried, (n, m), (n, 2 * m), (2, n, m))
    product = plan.empty(carried.shape, carried)
    for j in range(length):
        grad_trace[j].addcmul_(torch.mul(carried, reached[j], out=decayed), powers[j])
        torch.sum(torch.view_as_real(grad_trace[j])[..., 0], -1, out=grad_u.view(n_rows, count, m))
        _input_backward(grad_u, xs[j].view(-1, n_in), weights, grads, grad_xs, j, (gates, work))
        grad_gamma += _decay_grad(grad_trace, trace, plan.links, j, product)
    return grad_gamma
