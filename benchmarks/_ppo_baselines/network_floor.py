"""The raw network floor of the POPGym PPO demo: its networks' own passes, in plain torch.

What a training loop at the demo's settings cannot go below on one CPU thread, per frame of a
batch: one step of the actor's and the critic's networks at collection (``num_envs`` rows, no
gradient), the critic's pass over the batch's rows for GAE (no gradient), and ``epochs``
forward + backward passes of both networks over minibatches of ``envs_per_minibatch`` rows.

The networks are the demo's, as ``ppo_popgym.make_agent`` builds them, called on plain tensors:
their ``nn.LSTM`` or ``nn.GRU`` (PyTorch's fused kernel over whole rows, with no episode start
inside them) and the ``nn.Module`` of each other layer (input layer, heads). The inputs are
random features of the width the demo's ``AgentInputs`` gives. Everything else a training loop
does (TorchRL and TensorDict, the env, the resets, the arithmetic of GAE and of the loss, the
optimizer) is what it spends above this floor.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable

import torch
from tensordict.nn import TensorDictModule, TensorDictSequential
from torch import nn

from torchrl_ext.modules import GRUModule, LSTMModule


def plain_layers(network: nn.Module) -> list[nn.Module]:
    """The layers of a demo network after its inputs module, as plain ``nn.Module`` objects.

    Raises:
        ValueError: for a memory without a fused PyTorch layer (FFM, none).
    """
    if isinstance(network, TensorDictSequential):
        return [layer for module in network.module for layer in plain_layers(module)]
    if isinstance(network, LSTMModule):
        return [network.lstm]
    if isinstance(network, GRUModule):
        return [network.gru]
    if isinstance(network, TensorDictModule):
        inner = network.module
        return [] if type(inner).__name__ == "AgentInputs" else [inner]
    raise ValueError(f"no plain-torch floor for {type(network).__name__} in the demo's networks")


def run_layers(layers: list[nn.Module], x: torch.Tensor) -> torch.Tensor:
    """``x`` (``[rows, steps, features]``) through ``layers``; recurrent layers from zeros."""
    for layer in layers:
        x = layer(x)[0] if isinstance(layer, nn.LSTM | nn.GRU) else layer(x)
    return x


def median_seconds(fn: Callable[[], object], repeats: int) -> float:
    """Median wall-clock seconds of ``fn`` over ``repeats`` calls, after two untimed ones."""
    fn()
    fn()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def floor(args, repeats: int = 20) -> dict[str, float]:
    """Microseconds per frame of the floor's sections, ``collect``, ``gae`` and ``update``.

    Args:
        args: the demo's ``ppo_popgym.Args`` (its networks, batch and minibatch sizes, epochs).
        repeats (int): timed calls per section.
    """
    import ppo_popgym

    actor, critic = ppo_popgym.make_agent(args)
    nets = [plain_layers(actor.module[0]), plain_layers(critic)]
    width = actor.module[0].module[0].module.features
    steps = args.row_steps
    step_input = torch.randn(args.num_envs, 1, width)
    rows = torch.randn(args.num_envs, steps, width)
    minibatch = torch.randn(args.envs_per_minibatch, steps, width)

    def collect() -> None:
        with torch.no_grad():
            for layers in nets:
                run_layers(layers, step_input)

    def gae() -> None:
        with torch.no_grad():
            run_layers(nets[1], rows)

    def update() -> None:
        loss = sum(run_layers(layers, minibatch).sum() for layers in nets)
        loss.backward()

    per_frame = {
        "collect": median_seconds(collect, repeats) / args.num_envs,
        "gae": median_seconds(gae, repeats) / rows.shape[:2].numel(),
        "update": args.epochs * median_seconds(update, repeats) / minibatch.shape[:2].numel(),
    }
    return {section: 1e6 * seconds for section, seconds in per_frame.items()}
