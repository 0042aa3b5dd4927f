"""Launching an env's kernels: recorded commands, Warp graphs, and ordering with torch's stream.

A *recipe* is a kernel and its positional inputs (launched over ``num_envs``), or an object whose
``launch()`` queues only kernels. :class:`Launcher` records each mode's recipes once (``"step"``,
``"step_autoreset"``, ``"reset"``) and replays them, as one Warp graph when the env captures.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import Any, Protocol, TypeAlias, runtime_checkable

import torch
import warp as wp

import torchrl_ext.envs.interop as interop

_NO_CONTEXT = contextlib.nullcontext()  # reusable: entering it does nothing


@runtime_checkable
class Launchable(Protocol):
    """An object that queues its own kernels (a course regeneration, say)."""

    def launch(self) -> None: ...


#: A launch recipe: a Warp kernel and its positional inputs, or an object that launches itself.
Launch: TypeAlias = tuple[wp.Kernel, list[Any]] | Launchable


class Launcher:
    """Records, replays and orders the kernels of one env.

    Args:
        device (torch.device): the env's device.
        num_envs (int): the launch dimension.
        recipes (callable): ``recipes(mode)``, the recipes of a mode, asked once per mode.
        capture (bool): replay each mode as one recorded Warp graph.
    """

    def __init__(
        self,
        device: torch.device,
        num_envs: int,
        recipes: Callable[[str], list[Launch]],
        capture: bool,
    ) -> None:
        self.device = device
        self.num_envs = num_envs
        self.recipes = recipes
        self.capture = capture
        self.on_cuda = device.type == "cuda"
        self.wp_device = wp.device_from_torch(device)
        self.commands: dict[str, list] = {}
        self.graphs: dict[str, Any] = {}

    def forget(self) -> None:
        """Drop recorded commands and graphs: the next launch records them again."""
        self.commands.clear()
        self.graphs.clear()

    def command(self, recipe: Launch) -> Any:
        """A replayable command of ``recipe`` (a launchable object is its own command)."""
        if not isinstance(recipe, tuple):
            return recipe
        kernel, inputs = recipe
        return wp.launch(
            kernel, dim=self.num_envs, inputs=inputs, device=self.wp_device, record_cmd=True
        )

    def commands_of(self, mode: str) -> list:
        cmds = self.commands.get(mode)
        if cmds is None:
            cmds = self.commands[mode] = [self.command(r) for r in self.recipes(mode)]
        return cmds

    def graph(self, mode: str) -> Any:
        graph = self.graphs.get(mode)
        if graph is None:
            cmds = self.commands_of(mode)
            wp.synchronize_device(self.wp_device)
            with wp.ScopedCapture(device=self.wp_device, force_module_load=False) as cap:
                for cmd in cmds:
                    cmd.launch()
            graph = self.graphs[mode] = cap.graph
        return graph

    def run(self, mode: str) -> None:
        """Launch (or replay) the kernels of ``mode`` on torch's current stream.

        Graphs are recorded on Warp's own stream (torch's may be the uncapturable legacy stream)
        and replayed on torch's. Inside :func:`~torchrl_ext.envs.interop.registered` the kernels
        are launched one by one into torch's capture instead.
        """
        recording = interop.active(self.wp_device) is not None
        graph = self.graph(mode) if self.capture and not recording else None
        with self.on_torch_stream():
            if graph is not None:
                wp.capture_launch(graph)
            else:
                for cmd in self.commands_of(mode):
                    cmd.launch()

    def launch_now(self, recipes: list[Launch]) -> None:
        """Launch ``recipes`` once, on torch's current stream."""
        with self.on_torch_stream():
            for recipe in recipes:
                self.command(recipe).launch()

    def on_torch_stream(self) -> Any:
        """Context in which Warp launches are ordered with torch's work on the env's device."""
        if self.on_cuda:
            registration = interop.active(self.wp_device)
            if registration is not None:  # the one Warp stream Warp knows is capturing
                return wp.ScopedStream(registration.stream)
            return wp.ScopedStream(wp.stream_from_torch(torch.cuda.current_stream(self.device)))
        return _NO_CONTEXT
