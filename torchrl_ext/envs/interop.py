"""Record Warp env steps inside ``torch.cuda.graph``: one CUDA graph for the policy and the env.

A :class:`~torchrl_ext.envs.WarpEnv` launches its kernels on torch's current stream. Inside
``with torch.cuda.graph(g):`` that stream is capturing, so the kernels would land in ``g`` too,
but Warp does not know about torch's capture: Warp's own graph capture (``capture=True``) would
try to start a second capture, and a conditional node (``wp.capture_if``) would read its flag on
the host. :func:`registered` tells Warp that torch's capture is active (Warp's external capture,
``wp.capture_begin(external=True)``), makes torch's capture stream Warp's current stream, and
makes every env on that device launch its kernels directly into torch's graph:

.. code-block:: python

    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        with registered(conditional=True) as registration:
            step_td, root = env.step_and_maybe_reset(root)
    retain(g, env, registration)
    g.replay()  # the same step, with the inputs' and outputs' memory of the capture

The env's step path reads nothing back to the host on CUDA (see
:attr:`~torchrl_ext.envs.WarpEnv.sync_free`), so it can be recorded. With ``conditional=True``
the masked course regeneration of :class:`~torchrl_ext.envs.CourseEnv` is recorded as a CUDA
conditional node that skips the rebuild on the device when no env is masked (CUDA driver and
toolkit 12.4+); with ``conditional=False`` the rebuild kernels always run and return early for
unmasked envs.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Literal

import torch
import warp as wp

from torchrl_ext._checks import check_bool, check_choice

__all__ = ["CAPTURE_MODES", "Registration", "active", "registered", "retain"]

#: torch's ``capture_error_mode`` values, in the order of ``cudaStreamCaptureMode``.
CAPTURE_MODES = ("global", "thread_local", "relaxed")

_WARP_MODES = {
    "global": wp.CaptureMode.GLOBAL,
    "thread_local": wp.CaptureMode.THREAD_LOCAL,
    "relaxed": wp.CaptureMode.RELAXED,
}

_state = threading.local()  # the registrations entered in this thread, innermost last
_retained: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


@dataclass(frozen=True)
class Registration:
    """What :func:`registered` set up: Warp's view of torch's capture.

    Args:
        device (warp.context.Device): the CUDA device being captured.
        stream (warp.Stream): torch's capture stream, as a Warp stream.
        conditional (bool): whether masked regenerations record as conditional nodes.
        capture_mode (str): the ``capture_error_mode`` torch's capture was started with.
    """

    device: Any
    stream: Any
    conditional: bool
    capture_mode: str


def active(device: Any) -> Registration | None:
    """The innermost registration of this thread on ``device`` (a Warp device), or ``None``.

    Args:
        device (warp.context.Device): the device an env runs on.

    Returns:
        The :class:`Registration` entered for ``device``, or ``None`` outside :func:`registered`.

    Examples:
        >>> import warp as wp
        >>> from torchrl_ext.envs.interop import active
        >>> active(wp.get_device("cpu")) is None
        True
    """
    for registration in reversed(getattr(_state, "stack", ())):
        if registration.device == device:
            return registration
    return None


def _capturing_stream() -> torch.cuda.Stream:
    """The current torch CUDA stream, which must be capturing; otherwise a ``RuntimeError``."""
    how = (
        "enter registered() inside `with torch.cuda.graph(g):`, on the device of the env whose "
        "steps you record"
    )
    if not torch.cuda.is_available():
        raise RuntimeError(
            f"registered() needs a torch CUDA graph capture, and CUDA is absent; {how}."
        )
    if not torch.cuda.is_current_stream_capturing():
        raise RuntimeError(f"registered() was entered outside a torch CUDA graph capture; {how}.")
    return torch.cuda.current_stream()


@contextmanager
def registered(
    conditional: bool = False,
    capture_mode: Literal["global", "thread_local", "relaxed"] = "global",
) -> Iterator[Registration]:
    """Make Warp envs record their kernels into the ``torch.cuda.graph`` being captured.

    Enter it inside ``with torch.cuda.graph(g, capture_error_mode=...):``. Until it exits, Warp
    knows that torch's stream is capturing (an external capture), uses that stream for every
    launch on its device, and every :class:`~torchrl_ext.envs.WarpEnv` on that device launches
    its kernels one by one into ``g`` instead of replaying its own Warp graph. Keep the envs
    alive as long as ``g``: see :func:`retain`.

    Args:
        conditional (bool, optional): record the masked course regeneration as a conditional
            node that skips the rebuild when the mask is all zero (needs CUDA driver and toolkit
            12.4+). Defaults to ``False`` (the rebuild kernels always run and return early for
            unmasked envs).
        capture_mode (str, optional): the ``capture_error_mode`` the torch capture was started
            with: ``"global"`` (torch's default), ``"thread_local"`` or ``"relaxed"``.
            Defaults to ``"global"``.

    Yields:
        The :class:`Registration` (pass it to :func:`retain` with the env).

    Raises:
        TypeError: for a non-bool ``conditional`` or a non-str ``capture_mode``.
        ValueError: for a ``capture_mode`` outside :data:`CAPTURE_MODES`.
        RuntimeError: when entered outside a torch CUDA graph capture, or with
            ``conditional=True`` where CUDA conditional graph nodes are not supported.

    Examples:
        >>> from torchrl_ext.envs.interop import registered
        >>> try:  # outside `with torch.cuda.graph(g):` it refuses to start
        ...     with registered():
        ...         pass
        ... except RuntimeError as err:
        ...     print("torch.cuda.graph" in str(err))
        True
    """
    conditional = check_bool("conditional", conditional)
    capture_mode = check_choice("capture_mode", capture_mode, CAPTURE_MODES)
    torch_stream = _capturing_stream()
    if conditional and not wp.is_conditional_graph_supported():
        raise RuntimeError(
            "registered(conditional=True) needs CUDA conditional graph nodes (CUDA driver and "
            "toolkit 12.4+), which this Warp build or driver lacks; use conditional=False."
        )
    stream = wp.stream_from_torch(torch_stream)
    wp.capture_begin(stream=stream, external=True, capture_mode=_WARP_MODES[capture_mode])
    registration = Registration(stream.device, stream, conditional, capture_mode)
    stack = _state.__dict__.setdefault("stack", [])
    stack.append(registration)
    try:
        with wp.ScopedStream(stream):
            yield registration
    finally:
        stack.remove(registration)
        wp.capture_end(stream=stream)  # an external capture: torch's capture goes on


def retain(graph: torch.cuda.CUDAGraph, *objects: Any) -> None:
    """Keep ``objects`` (the env, the registration, ...) alive as long as ``graph``.

    A recorded graph reads and writes the env's Warp arrays by address: if the env were freed
    while the graph lives, a replay would touch freed memory. The references are dropped when
    ``graph`` is garbage-collected.

    Args:
        graph (torch.cuda.CUDAGraph): the graph the env's steps were recorded into.
        *objects: what the graph uses (at least one).

    Raises:
        TypeError: if ``graph`` is not a ``torch.cuda.CUDAGraph``.
        ValueError: if no object is given.

    Examples:
        >>> from torchrl_ext.envs.interop import retain
        >>> try:
        ...     retain(object(), "env")
        ... except TypeError as err:
        ...     print("CUDAGraph" in str(err))
        True
    """
    if not isinstance(graph, torch.cuda.CUDAGraph):
        raise TypeError(
            f"graph must be a torch.cuda.CUDAGraph, got graph of type {type(graph).__name__}."
        )
    if not objects:
        raise ValueError("retain() needs the objects to keep alive, e.g. retain(g, env).")
    _retained.setdefault(graph, []).extend(objects)
