"""Run every CUDA path of torchrl_ext against its CPU result and print a short table.

Usage::

    PYTHONPATH=. python benchmarks/gpu_check.py --device cuda            # a GPU, ~1-2 minutes
    PYTHONPATH=. python benchmarks/gpu_check.py --device cpu --envs 8    # dry run on the CPU

Checks, one table row each (``ok`` is ``yes``, ``NO`` or ``skip``):

* ``env capture``: CartPole and Course steps replayed from the env's own graph
  (``capture=True``) bitwise equal to eager launches on the same device;
* ``env vs cpu``: the device's eager steps against the CPU's (max abs difference: float
  rounding may differ on a GPU, the flags must not);
* ``regen skip``: a recorded course regeneration replayed with an all-zero mask rewrites
  nothing, and says whether the skip is a conditional node on the device;
* ``gae scan``: the Warp GAE scan on the device against the CPU scan (float64 max abs diff);
* ``interop``: a course step recorded inside ``torch.cuda.graph`` (plain and conditional)
  replayed bitwise equal to eager steps (CUDA only); on the CPU, the sync-free step path it
  records against the eager one;
* ``sequence``: Sequence windows sampled from a storage on the device equal the CPU's;
* ``tape``: Tape samples (whole episodes end to end) drawn from a storage on the device equal
  the CPU's;
* ``memory``: LSTMModule, GRUModule and FFMModule in recurrent mode (whole rows with episode
  starts and stored states) on the device against the CPU: outputs, next states and parameter
  gradients (max abs difference; float32 on both);
* ``throughput``: env-steps/s of a policy-free CartPole rollout and of fused Course steps, and
  the milliseconds of one training pass of FFMModule and LSTMModule over ``[64, 1024]`` rows of
  hidden width 256 (the scan memory's speed target: FFM within a quarter of the LSTM's time);
  smaller rows in a CPU dry run.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable

import torch
import warp as wp
from _scan_memory_setup import INPUT, RATE
from _scan_memory_setup import rows as memory_rows
from tensordict import TensorDict
from torchrl.modules import set_recurrent_mode

from torchrl_ext.envs import CartPoleEnv, CourseEnv, CourseGenerator, interop, popgym
from torchrl_ext.modules import FFMModule, GRUModule, LSTMModule
from torchrl_ext.objectives._kernels import gae_recursion

wp.config.log_level = wp.LOG_WARNING


def _steps(env, actions: torch.Tensor) -> list[torch.Tensor]:
    """Fused steps over ``actions`` ``[T, N, ...]``; every step's outputs, flattened, on the CPU."""
    out = []
    root = env.reset()
    for action in actions:
        root["action"] = action.to(env.device)
        td, root = env.step_and_maybe_reset(root)
        nxt = td["next"]
        flags = torch.cat([nxt[k].float() for k in ("done", "terminated", "truncated")], -1)
        obs = nxt["observation"].reshape(env.num_envs, -1).float()
        out.append(torch.cat([obs, nxt["reward"].float(), flags], -1).cpu())
    return out


def _actions(make: Callable, steps: int) -> torch.Tensor:
    env = make("cpu", False)
    gen = torch.Generator().manual_seed(0)
    spec = env.action_spec
    if spec.dtype == torch.int64:
        return torch.randint(0, 2, (steps, *spec.shape), generator=gen)
    return torch.rand((steps, *spec.shape), generator=gen) * 2 - 1


def _makers(envs: int) -> dict[str, Callable]:
    return {
        "cartpole": lambda dev, cap: CartPoleEnv(envs, dev, seed=0, max_steps=20, capture=cap),
        "course": lambda dev, cap: CourseEnv(envs, dev, seed=0, max_steps=20, capture=cap),
        # generated kernels with int, board and noisy float observations
        "popgym repeat-previous": lambda dev, cap: popgym.RepeatPreviousEnv(
            envs, dev, seed=0, capture=cap
        ),
        "popgym concentration": lambda dev, cap: popgym.ConcentrationEnv(
            envs, dev, seed=0, capture=cap
        ),
        "popgym noisy pendulum": lambda dev, cap: popgym.NoisyPositionOnlyPendulumEnv(
            envs, dev, seed=0, capture=cap
        ),
    }


def check_env_capture(device: str, envs: int, steps: int) -> list[tuple]:
    rows = []
    for name, make in _makers(envs).items():
        actions = _actions(make, steps)
        eager = _steps(make(device, False), actions)
        replayed = _steps(make(device, True), actions)
        same = all(torch.equal(a, b) for a, b in zip(eager, replayed, strict=True))
        rows.append((f"env capture {name}", same, f"{steps} fused steps, bitwise"))
        cpu = _steps(make("cpu", False), actions)
        diff = max(float((a - b).abs().max()) for a, b in zip(eager, cpu, strict=True))
        flags_same = all(torch.equal(a[:, -3:], b[:, -3:]) for a, b in zip(eager, cpu, strict=True))
        rows.append((f"env vs cpu {name}", flags_same, f"max |diff| {diff:.2e}, flags equal"))
    return rows


def check_regen_skip(device: str, envs: int) -> list[tuple]:
    gen = CourseGenerator(envs, seed=0, device=device)
    mask = torch.zeros(envs, dtype=torch.int32, device=device)
    gen.regenerate(mask)  # loads the kernels before the capture
    graph = gen.capture_regenerate(mask)
    before = {k: v.clone() for k, v in gen.views.items()}
    wp.capture_launch(graph)
    wp.synchronize_device(gen.device)
    unchanged = all(torch.equal(v, before[k]) for k, v in gen.views.items())
    mask[0] = 1
    wp.capture_launch(graph)
    wp.synchronize_device(gen.device)
    rebuilt = gen.views["generation"].tolist()[:2] == [1, 0]
    how = (
        "conditional node"
        if device == "cpu" or wp.is_conditional_graph_supported()
        else "early return"
    )
    return [("regen skip", unchanged and rebuilt, f"zero mask: nothing written ({how})")]


def check_gae(device: str, envs: int, steps: int) -> list[tuple]:
    gen = torch.Generator().manual_seed(0)
    shape = (envs, steps, 1)
    reward, value, next_value = (
        torch.randn(shape, generator=gen, dtype=torch.float64) for _ in "abc"
    )
    terminated = torch.rand(shape, generator=gen) < 0.05
    done = terminated | (torch.rand(shape, generator=gen) < 0.05)
    inputs = (reward, value, next_value, terminated, done)
    ref = (torch.empty(shape, dtype=torch.float64), torch.empty(shape, dtype=torch.float64))
    gae_recursion.gae_cpu(inputs, 0.99, 0.95, *ref)
    dev_inputs = tuple(x.to(device) for x in inputs)
    out = tuple(torch.empty_like(x, device=device) for x in ref)
    gae_recursion.gae_warp(dev_inputs, 0.99, 0.95, *out)
    diff = max(float((a.cpu() - b).abs().max()) for a, b in zip(out, ref, strict=True))
    return [("gae scan", diff < 1e-9, f"warp on {device} vs cpu, float64 max |diff| {diff:.1e}")]


def _interop_replay(envs: int, steps: int, conditional: bool) -> bool:
    recorded, eager = (CourseEnv(envs, "cuda", seed=0, max_steps=20) for _ in range(2))
    actions = _actions(_makers(envs)["course"], steps).cuda()
    static = recorded.reset()
    static["action"] = actions[0].clone()
    start = recorded.state_dict()
    recorded.step_and_maybe_reset(static.clone())  # loads the kernels
    recorded.load_state_dict(start)
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g, stream=stream):
        with interop.registered(conditional=conditional) as registration:
            td, root = recorded.step_and_maybe_reset(static)
    interop.retain(g, recorded, registration)
    recorded.load_state_dict(start)
    eager_root = eager.reset()
    same = True
    for action in actions:
        static["action"].copy_(action)
        g.replay()
        eager_root["action"] = action
        eager_td, eager_root = eager.step_and_maybe_reset(eager_root)
        torch.cuda.synchronize()
        same &= torch.equal(td["next", "observation"], eager_td["next", "observation"])
        same &= torch.equal(td["next", "done"], eager_td["next", "done"])
        same &= torch.equal(root["observation"], eager_root["observation"])
    return bool(same and torch.equal(recorded.generation, eager.generation))


def check_interop(device: str, envs: int, steps: int) -> list[tuple]:
    if device == "cpu":
        make = _makers(envs)["course"]
        actions = _actions(make, steps)
        free = make("cpu", False)
        free.sync_free = True
        same = all(
            torch.equal(a, b)
            for a, b in zip(_steps(make("cpu", False), actions), _steps(free, actions), strict=True)
        )
        return [("interop", same, "cpu: sync-free step path == eager (torch capture needs CUDA)")]
    rows = [
        ("interop plain", _interop_replay(envs, steps, False), "torch.cuda.graph replay == eager")
    ]
    if wp.is_conditional_graph_supported():
        ok = _interop_replay(envs, steps, True)
        rows.append(("interop conditional", ok, "replay == eager"))
    else:
        rows.append(("interop conditional", None, "no conditional graph nodes here"))
    return rows


def _samples_match(
    device: str, envs: int, make_unit: Callable, batch_size: int, keys: tuple[str, ...]
) -> bool:
    """Whether a sample unit samples the same entries ``keys`` from a storage on ``device`` as on
    the CPU, from the same CartPole rollout and seed (``make_unit()``: a new unit per buffer)."""
    from torchrl.data import LazyTensorStorage, TensorDictReplayBuffer

    data = CartPoleEnv(envs, seed=0, max_steps=10).rollout(32, break_when_any_done=False)
    samples = []
    for dev in ("cpu", device):
        buffer = TensorDictReplayBuffer(
            storage=LazyTensorStorage(envs * 32, ndim=2, device=dev),
            sample_unit=make_unit(),
            batch_size=batch_size,
        )
        buffer.extend(data.to(dev))
        torch.manual_seed(0)
        samples.append(buffer.sample().cpu())
    return all(torch.equal(samples[0][k], samples[1][k]) for k in keys)


def check_sequence(device: str, envs: int) -> list[tuple]:
    from torchrl_ext import Sequence

    keys = ("observation", "is_init", "validity_mask", "learning_mask")
    unit = lambda: Sequence(length=8, burn_in=4, layout="batch_time")  # noqa: E731
    same = _samples_match(device, envs, unit, 4, keys)
    return [("sequence", same, f"windows sampled on {device} == cpu")]


def check_tape(device: str, envs: int) -> list[tuple]:
    from torchrl_ext import Tape

    keys = ("observation", "is_init", "validity_mask", "sequence_id")
    same = _samples_match(device, envs, lambda: Tape(length=24, rows=3), 8, keys)
    return [("tape", same, f"tapes sampled on {device} == cpu")]


def _memories(hidden: int) -> dict[str, torch.nn.Module]:
    torch.manual_seed(0)
    keys = {"in_key": "obs", "out_key": "features"}
    return {
        "lstm": LSTMModule(input_size=INPUT, hidden_size=hidden, **keys),
        "gru": GRUModule(input_size=INPUT, hidden_size=hidden, **keys),
        "ffm": FFMModule(input_size=INPUT, hidden_size=hidden, **keys),
    }


def _training_pass(module: torch.nn.Module, data: TensorDict) -> TensorDict:
    """One forward and backward of ``features.sum()`` in recurrent mode; returns the outputs."""
    module.zero_grad(set_to_none=True)
    with set_recurrent_mode(True):
        out = module(data.copy())
    out["features"].sum().backward()
    return out


def check_memories(device: str) -> list[tuple]:
    data = memory_rows(4, 40, 32, RATE)
    rows = []
    for name, module in _memories(32).items():
        out_cpu = _training_pass(module, data).exclude("obs").detach()
        grads_cpu = [p.grad.clone() for p in module.parameters()]
        out_dev = _training_pass(module.to(device), data.to(device)).exclude("obs").detach().cpu()
        grads_dev = [p.grad.cpu() for p in module.parameters()]
        module.to("cpu")
        floats = [k for k in out_cpu.keys(True, True) if out_cpu[k].is_floating_point()]
        diffs = [(out_cpu[k] - out_dev[k]).abs().max() for k in floats]
        diffs += [(a - b).abs().max() for a, b in zip(grads_cpu, grads_dev, strict=True)]
        worst = float(torch.stack(diffs).max())
        rows.append((f"memory {name} rows", worst < 1e-3, f"max abs diff vs cpu {worst:.1e}"))
    return rows


def _rate(run: Callable[[], int], device: str, reps: int = 3) -> float:
    best = 0.0
    for _ in range(reps):
        if device != "cpu":
            torch.cuda.synchronize()
        start = time.perf_counter()
        frames = run()
        if device != "cpu":
            torch.cuda.synchronize()
        best = max(best, frames / (time.perf_counter() - start))
    return best


def check_throughput(device: str, envs: int, steps: int) -> list[tuple]:
    cart = CartPoleEnv(envs, device, seed=0, max_steps=200)
    course = CourseEnv(envs, device, seed=0, max_steps=200, capture=True)
    root = course.reset()

    def course_steps() -> int:
        nonlocal root
        for _ in range(steps):
            course.rand_action(root)
            _, root = course.step_and_maybe_reset(root)
        return envs * steps

    cart.rollout(steps, break_when_any_done=False)
    course_steps()
    rows = []
    for name, run in (
        ("cartpole rollout", lambda: cart.rollout(steps, break_when_any_done=False).numel()),
        ("course fused steps", course_steps),
    ):
        rows.append((f"throughput {name}", None, f"{_rate(run, device):.3g} env-steps/s"))
    return rows + _scan_memory_speed(device)


def _scan_memory_speed(device: str) -> list[tuple]:
    """Milliseconds of one training pass of FFM and of the LSTM, and their ratio."""
    n_rows, steps, hidden = (64, 1024, 256) if device != "cpu" else (4, 64, 32)
    data = memory_rows(n_rows, steps, hidden, RATE).to(device)
    memories = {k: m.to(device) for k, m in _memories(hidden).items() if k != "gru"}
    ms = {}
    for name, module in memories.items():
        _training_pass(module, data)
        ms[name] = 1e3 / _rate(lambda m=module: (_training_pass(m, data), 1)[1], device)
    note = f"[{n_rows}, {steps}] hidden {hidden}: " + ", ".join(
        f"{name} {value:.1f} ms" for name, value in ms.items()
    )
    return [("throughput ffm / lstm", None, f"{note}; ratio {ms['ffm'] / ms['lstm']:.2f}")]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="cuda", help="cuda (default) or cpu (dry run)")
    parser.add_argument("--envs", type=int, default=4096, help="envs per check")
    parser.add_argument("--steps", type=int, default=50, help="steps per check")
    args = parser.parse_args(argv)
    device = args.device
    if device.startswith("cuda") and not (torch.cuda.is_available() and wp.is_cuda_available()):
        print("CUDA is not visible to torch and warp; run with --device cpu for a dry run.")
        return 2
    torch.set_num_threads(1)
    checks = {
        "env capture": lambda: check_env_capture(device, args.envs, args.steps),
        "regen skip": lambda: check_regen_skip(device, args.envs),
        "gae scan": lambda: check_gae(device, args.envs, args.steps),
        "interop": lambda: check_interop(device, args.envs, args.steps),
        "sequence": lambda: check_sequence(device, min(args.envs, 64)),
        "tape": lambda: check_tape(device, min(args.envs, 64)),
        "memory": lambda: check_memories(device),
        "throughput": lambda: check_throughput(device, args.envs, args.steps),
    }
    rows = []
    for name, check in checks.items():
        try:
            rows.extend(check())
        except Exception as err:  # one failing path must not hide the others' results
            rows.append((name, False, f"{type(err).__name__}: {err}"))
    width = max(len(r[0]) for r in rows)
    print(
        f"torchrl_ext GPU check on {device} (torch {torch.__version__}, warp {wp.config.version})"
    )
    for name, ok, note in rows:
        mark = "skip" if ok is None else ("yes" if ok else "NO")
        print(f"{name:<{width}}  {mark:<4}  {note}")
    return 0 if all(ok is not False for _, ok, _ in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
