"""Counts the package modules that one public call passes through.

A *stop* is a call into a ``torchrl_ext`` module from code outside that module (another module
of the package, or the caller): one ``RecurrentGAE.forward`` that enters ``recurrent_gae``, calls
into a helper module and comes back has two stops in two modules. A concept cut into several
modules shows as many stops per module; one that a call visits once per module shows one.

Run it from the repository root: ``python scripts/call_stops.py`` prints, for each traced call,
its stops and the modules they are in (``--verbose``: the stops in order).
"""

from __future__ import annotations

import argparse
import sys
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import torch
from tensordict import TensorDict

import torchrl_ext

PACKAGE = Path(torchrl_ext.__file__).parent


def _module(filename: str) -> str | None:
    path = Path(filename)
    if PACKAGE not in path.parents:
        return None
    return ".".join(path.relative_to(PACKAGE.parent).with_suffix("").parts)


def trace(call: Callable[[], object]) -> list[str]:
    """Runs ``call`` and returns the package module of each stop, in order."""
    stops: list[str] = []

    def profile(frame, event, arg):
        if event != "call":
            return
        module = _module(frame.f_code.co_filename)
        if module is None:
            return
        caller = frame.f_back
        while caller is not None and caller.f_code.co_filename.startswith("<"):
            caller = caller.f_back  # code made at run time (a dataclass's __init__) is no stop
        if caller is None or _module(caller.f_code.co_filename) != module:
            stops.append(module)

    sys.setprofile(profile)
    try:
        call()
    finally:
        sys.setprofile(None)
    return stops


def gae_forward() -> Callable[[], object]:
    """One ``RecurrentGAE.forward`` over a ``[4, 16]`` batch with a critic LSTM, warmed up."""
    from torchrl_ext.modules import LSTMModule
    from torchrl_ext.objectives import RecurrentGAE

    torch.manual_seed(0)
    lstm = LSTMModule(input_size=3, hidden_size=8, in_key="observation", out_key="embed")
    head = torch.nn.Linear(8, 1)
    from tensordict.nn import TensorDictModule, TensorDictSequential

    critic = TensorDictSequential(
        lstm, TensorDictModule(head, in_keys=["embed"], out_keys=["state_value"])
    )
    gae = RecurrentGAE(gamma=0.99, lmbda=0.95, value_network=critic)
    n, t = 4, 16
    done = torch.zeros(n, t, 1, dtype=torch.bool)
    done[:, 7] = True
    is_init = torch.zeros(n, t, 1, dtype=torch.bool)
    is_init[:, 0] = True
    is_init[:, 8] = True
    batch = TensorDict(
        {
            "observation": torch.randn(n, t, 3),
            "is_init": is_init,
            "next": {
                "observation": torch.randn(n, t, 3),
                "reward": torch.randn(n, t, 1),
                "done": done,
                "terminated": done.clone(),
                "truncated": torch.zeros_like(done),
                "is_init": torch.zeros_like(done),
            },
        },
        batch_size=[n, t],
    )
    gae(batch.clone())  # warm-up: first calls compile or cache
    return lambda: gae(batch.clone())


def sequence_expand() -> Callable[[], object]:
    """One ``Sequence.expand`` of 8 anchors over a 256-record storage, warmed up."""
    from torchrl.data import LazyTensorStorage, TensorDictReplayBuffer

    from torchrl_ext import Sequence

    n = 256
    done = torch.zeros(n, 1, dtype=torch.bool)
    done[::37] = True
    data = TensorDict(
        {"observation": torch.arange(n, dtype=torch.float32)[:, None], "next": {"done": done}},
        batch_size=[n],
    )
    unit = Sequence(burn_in=4, length=8, bootstrap=1)
    buffer = TensorDictReplayBuffer(storage=LazyTensorStorage(n), sample_unit=unit)
    buffer.extend(data)
    anchors = torch.arange(10, 90, 10)
    unit.expand(anchors, {}, buffer.storage)  # warm-up
    return lambda: unit.expand(anchors, {}, buffer.storage)


CALLS = {"RecurrentGAE.forward": gae_forward, "Sequence.expand": sequence_expand}


def main() -> None:
    """Traces each call of :data:`CALLS` and prints its stops per module."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--verbose", action="store_true", help="print the stops in order")
    args = parser.parse_args()
    for name, make in CALLS.items():
        stops = trace(make())
        per_module = Counter(stops)
        print(f"{name}: {len(stops)} stops in {len(per_module)} modules")
        for module, count in per_module.most_common():
            print(f"  {count:3d}  {module}")
        if args.verbose:
            print("  order: " + " > ".join(s.removeprefix("torchrl_ext.") for s in stops))


if __name__ == "__main__":
    main()
