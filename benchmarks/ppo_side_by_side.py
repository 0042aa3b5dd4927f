"""The same recurrent PPO four ways: our demo, the same demo as stock TorchRL builds it, a
hand-written CleanRL-style loop, sb3-contrib.

Usage::

    python benchmarks/ppo_side_by_side.py [--seeds 0 1 2] [--frames 61440]
        [--pipelines ours torchrl cleanrl sb3] [--quick] [--table PATH]

Each run is a fresh subprocess with one torch thread; runs are interleaved over seeds (ours seed
0, torchrl seed 0, cleanrl seed 0, sb3 seed 0, ours seed 1, ...), so load on a shared
machine falls on all of them alike; one untimed quick run of the demo first compiles and caches
the numba and Warp kernels, so that no timed run pays for that. The pipelines:

* ``ours``: ``python examples/ppo_cartpole.py`` as it is, through its public ``train``, seeded
  and in a fresh run folder as ``runs.main`` calls it (the call
  ``python examples/cartpole_results.py`` makes), with the demo's ``Args``.
* ``torchrl``: the same demo as stock TorchRL builds it: TorchRL's own ``LSTMModule`` in place
  of :class:`torchrl_ext.modules.LSTMModule` (the one-line switch a TorchRL user makes),
  ``ClipPPOLoss`` with its default functional parameters, Adam with its default per-parameter
  loop on the CPU, and minibatches cut from the whole batch. The demo sets ``functional=False``
  and ``foreach=True`` and cuts its minibatches from the entries the loss reads, which compute
  the same numbers bit for bit, faster; so the two rows show what the whole-row module and
  those three settings change end to end.
* ``cleanrl``: :mod:`_ppo_baselines.cleanrl_lstm_ppo`, plain torch, the demo's settings.
* ``sb3``: :mod:`_ppo_baselines.sb3_recurrent_ppo`, sb3-contrib's ``RecurrentPPO`` with the
  demo's settings as far as its options go; skipped with a message when sb3-contrib is missing
  (``pip install -e ".[test]"``).

All of them step the same env (:class:`~torchrl_ext.envs.CartPoleEnv`, ``observe_velocity=False``)
and are judged by the demo's own rule (``runs.ReturnWindow`` in ``examples/runs.py``): the
first batch after which the mean return of the last 20 completed episodes is >= 475. Seconds are
training wall time from the first batch (set-up, imports and the final evaluation excluded),
read after each batch's update in all of them. The learning rate and clip schedules run over
``--frames``, so every run trains the whole budget.

Where the time goes, per frame: ``collect`` (env and policy steps; sb3's includes its GAE),
``gae``, ``loss forward`` (with minibatch slicing), ``backward``, ``optimizer`` (gradient
clipping and Adam). For the demo, ``backward`` and ``optimizer`` are timed by wrapping
``torch.autograd.backward``, ``torch.nn.utils.clip_grad_norm_`` and Adam's step hooks in the
worker process (the demo's code is not touched); ``loss forward`` is the rest of its update.
sb3 gives only ``collect (with GAE)`` and ``update``.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from unittest import mock

import _examples_path  # noqa: F401  (puts examples/ on sys.path)

HERE = Path(__file__).resolve().parent
PIPELINES = ("ours", "torchrl", "cleanrl", "sb3")
SECTIONS = ("collect", "gae", "loss forward", "backward", "optimizer")
RESULT_PREFIX = "RESULT "


# ---------------------------------------------------------------------------- worker side
def demo_args(seed: int, frames: int | None, quick: bool):
    """The demo's ``Args`` for one run, by its command line's rules (``--quick``, ``--frames``)."""
    import ppo_cartpole

    values = dict(ppo_cartpole.QUICK) if quick else {}
    if frames is not None:
        values["frames"] = frames
    return ppo_cartpole.Args(**values, seed=seed)


def baseline_args(args):
    """The demo's hyperparameters as the baselines' :class:`Args`."""
    from _ppo_baselines.cleanrl_lstm_ppo import Args

    if args.entropy_coeff != 0.0 or args.policy != "lstm":
        raise ValueError(f"baselines implement the LSTM demo without entropy bonus, got {args}.")
    return Args(
        seed=args.seed, total_frames=args.frames, num_envs=args.num_envs, num_steps=args.steps,
        learning_rate=args.lr, gamma=args.gamma, gae_lambda=args.lmbda, update_epochs=args.epochs,
        envs_per_minibatch=args.envs_per_minibatch, clip_coef=args.clip,
        vf_coef=args.critic_coeff, max_grad_norm=args.max_grad_norm, hidden=args.hidden,
        head=args.head, obs_scale=tuple(args.obs_scale), reward_scale=args.reward_scale,
        eval_episodes=args.eval_episodes,
    )  # fmt: skip


def stock_torchrl_names(ppo_cartpole) -> dict:
    """The names of ``ppo_cartpole`` to patch so that the demo builds as stock TorchRL does.

    TorchRL's ``LSTMModule`` for the memories (the name the demo builds them from and checks
    them against), ``ClipPPOLoss`` with its default ``functional=True``, the demo's Adam with
    torch's default ``foreach`` (the per-parameter loop on the CPU), and minibatches cut from the
    whole batch.
    """
    from torchrl.modules import LSTMModule

    loss_class, make_optimizer = ppo_cartpole.ClipPPOLoss, ppo_cartpole.make_optimizer

    def functional_loss(*args, **kwargs):
        return loss_class(*args, **{**kwargs, "functional": True})

    def default_adam(args, loss):
        optim = make_optimizer(args, loss)
        groups = [{"params": group["params"]} for group in optim.param_groups]
        return type(optim)(groups, **{**optim.defaults, "foreach": None})

    return {
        "LSTMModule": LSTMModule,
        "ClipPPOLoss": functional_loss,
        "make_optimizer": default_adam,
        "loss_inputs": lambda batch, loss: batch,
    }


class _GradientTimer:
    """While active, times every backward pass and every gradient clip plus Adam step."""

    def __init__(self) -> None:
        self.totals = {"backward": 0.0, "optimizer": 0.0}
        self._step_start = 0.0

    def __enter__(self) -> _GradientTimer:
        import torch
        from torch.optim.optimizer import (
            register_optimizer_step_post_hook,
            register_optimizer_step_pre_hook,
        )

        self._backward, self._clip = torch.autograd.backward, torch.nn.utils.clip_grad_norm_
        torch.autograd.backward = self._timed("backward", self._backward)
        torch.nn.utils.clip_grad_norm_ = self._timed("optimizer", self._clip)
        self._hooks = [
            register_optimizer_step_pre_hook(self._pre_step),
            register_optimizer_step_post_hook(self._post_step),
        ]
        return self

    def __exit__(self, *exc) -> None:
        import torch

        torch.autograd.backward, torch.nn.utils.clip_grad_norm_ = self._backward, self._clip
        for hook in self._hooks:
            hook.remove()

    def _timed(self, name, fn):
        def timed(*args, **kwargs):
            start = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                self.totals[name] += time.perf_counter() - start

        return timed

    def _pre_step(self, *_):
        self._step_start = time.perf_counter()

    def _post_step(self, *_):
        self.totals["optimizer"] += time.perf_counter() - self._step_start


def train_demo(demo, args, stack: contextlib.ExitStack) -> tuple:
    """Trains ``demo`` (a pipeline module) through its public ``train`` inside ``stack``.

    As ``runs.main`` runs it, seeded, in a fresh run folder in a temporary directory that
    ``stack`` removes; patches ``stack`` already holds apply. Returns the run's result and the
    section times its ``runs.Stopwatch`` measured.
    """
    import runs

    watches = []

    class KeptStopwatch(runs.Stopwatch):
        def __init__(self) -> None:
            super().__init__()
            watches.append(self)

    out = Path(stack.enter_context(tempfile.TemporaryDirectory()))
    stack.enter_context(mock.patch.object(runs, "Stopwatch", KeptStopwatch))
    run = runs.Run(out / f"seed{args.seed}", demo.__name__)
    stack.enter_context(runs.folder_lock(run.out))
    runs.start_run(run, args)
    return runs.seeded(args.seed, demo.train, args, run), watches[-1].totals


def run_ours(args, stock_torchrl: bool = False) -> dict:
    """Trains the demo through its public ``train``, as ``runs.main`` runs it; returns its row.

    With ``stock_torchrl``, the demo builds as stock TorchRL does (:func:`stock_torchrl_names`); the
    patched names are restored on return. The demo's own section times (its ``runs.Stopwatch``)
    are kept as ``train`` measured them.
    """
    import ppo_cartpole

    with contextlib.ExitStack() as stack:
        if stock_torchrl:
            names = stock_torchrl_names(ppo_cartpole)
            stack.enter_context(mock.patch.multiple(ppo_cartpole, **names))
        timer = stack.enter_context(_GradientTimer())
        result, sections = train_demo(ppo_cartpole, args, stack)
    timings = {"collect": sections["collect"], "gae": sections["gae"]}
    timings["loss forward"] = sections["update"] - sum(timer.totals.values())
    timings.update(timer.totals)
    frames_to_target, seconds_to_target = result.hit or (None, None)
    mean_return = result.curve[-1][1] if result.curve else float("nan")
    return {"frames_to_target": frames_to_target, "seconds_to_target": seconds_to_target,
            "frames": result.frames, "seconds": result.seconds,
            "final_mean_return": mean_return, "final_eval": result.final_eval,
            "timings": timings}  # fmt: skip


def run_baseline(name: str, args) -> dict:
    """Trains a baseline with the demo's settings; judges it with the demo's return window."""
    import runs

    if name == "cleanrl":
        from _ppo_baselines import cleanrl_lstm_ppo as module
    else:
        from _ppo_baselines import sb3_recurrent_ppo as module
    run = module.train(baseline_args(args))
    window = runs.ReturnWindow(args.return_window, args.target, counters={})
    for frames, seconds, returns in run.history:
        window.update(returns, frames, seconds)
    frames_to_target, seconds_to_target = window.hit or (None, None)
    frames, seconds, _ = run.history[-1]
    return {"frames_to_target": frames_to_target, "seconds_to_target": seconds_to_target,
            "frames": frames, "seconds": seconds, "final_mean_return": window.mean,
            "final_eval": run.final_eval, "timings": run.timings}  # fmt: skip


def worker(name: str, seed: int, frames: int | None, quick: bool) -> None:
    """One run in this process; prints its result as one JSON line."""
    import logging

    import torch

    torch.set_num_threads(1)
    logging.getLogger("torchrl").setLevel(logging.WARNING)
    args = demo_args(seed, frames, quick)
    if name in ("ours", "torchrl"):
        result = run_ours(args, stock_torchrl=name == "torchrl")
    else:
        result = run_baseline(name, args)
    result.update(pipeline=name, seed=seed, target=args.target)
    print(RESULT_PREFIX + json.dumps(result), flush=True)


# ---------------------------------------------------------------------------- driver side
def spawn(name: str, seed: int, args: argparse.Namespace) -> dict:
    """Runs one (pipeline, seed) in a fresh interpreter; returns its result."""
    cmd = [sys.executable, str(Path(__file__).resolve()), "--worker", name, "--seeds", str(seed)]
    cmd += ["--quick"] * args.quick + (["--frames", str(args.frames)] if args.frames else [])
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": os.pathsep.join(
        p for p in (str(HERE), os.environ.get("PYTHONPATH")) if p)}  # fmt: skip
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, check=False)
    lines = [line for line in proc.stdout.splitlines() if line.startswith(RESULT_PREFIX)]
    if proc.returncode != 0 or not lines:
        raise RuntimeError(
            f"{name} seed {seed} failed (exit {proc.returncode}):\n{proc.stderr[-4000:]}"
        )
    return json.loads(lines[-1][len(RESULT_PREFIX) :])


def warm_up(args: argparse.Namespace) -> None:
    """One untimed quick run of the demo, so that no timed run compiles kernels.

    The whole-row module's numba kernels and the env's Warp kernels are compiled on first use
    and cached on disk; without this, the first timed run of a fresh checkout pays that.
    """
    spawn("ours", args.seeds[0], argparse.Namespace(quick=True, frames=None))


def available(pipelines: list[str]) -> list[str]:
    """The requested pipelines that can run here; says why sb3 is left out if it is."""
    if "sb3" in pipelines and importlib.util.find_spec("sb3_contrib") is None:
        print("sb3-contrib is not installed: skipping RecurrentPPO "
              '(install it with `pip install -e ".[test]" -c constraints.txt`).')  # fmt: skip
        return [p for p in pipelines if p != "sb3"]
    return pipelines


def _fmt(value, spec: str) -> str:
    return "—" if value is None else format(value, spec)


def run_row(r: dict) -> str:
    fps = r["frames"] / r["seconds"]
    return (
        f"| {r['pipeline']} | {r['seed']} | {_fmt(r['frames_to_target'], 'd')} | "
        f"{_fmt(r['seconds_to_target'], '.1f')} | {fps:.0f} | {r['final_mean_return']:.1f} | "
        f"{r['final_eval']:.1f} | {r['frames']} | {r['seconds']:.1f} |"
    )


def spread(values: list[float], spec: str) -> str:
    """``median [min–max]``; unreached runs (``None``) count as infinite in the median."""
    reached = [v for v in values if v is not None]
    if not reached:
        return "not reached"
    median = statistics.median([float("inf") if v is None else v for v in values])
    text = "not reached" if median == float("inf") else format(median, spec)
    return f"{text} [{min(reached):{spec}}–{max(reached):{spec}}]"


def summary_rows(results: list[dict], pipelines: list[str]) -> list[str]:
    rows, ours_median = [], None
    for name in pipelines:
        runs = [r for r in results if r["pipeline"] == name]
        seconds = [r["seconds_to_target"] for r in runs]
        median = statistics.median([float("inf") if s is None else s for s in seconds])
        ours_median = median if name == "ours" else ours_median
        ratio = "—" if ours_median in (None, float("inf")) else f"{median / ours_median:.2f}"
        rows.append(
            f"| {name} | {sum(s is not None for s in seconds)}/{len(runs)} | "
            f"{spread([r['frames_to_target'] for r in runs], '.0f')} | "
            f"{spread(seconds, '.1f')} | {ratio} | "
            f"{spread([r['frames'] / r['seconds'] for r in runs], '.0f')} | "
            f"{spread([r['final_mean_return'] for r in runs], '.1f')} | "
            f"{spread([r['final_eval'] for r in runs], '.1f')} |"
        )
    return rows


def breakdown_rows(results: list[dict], pipelines: list[str]) -> list[str]:
    """Median microseconds per frame of each section, per pipeline."""
    rows = []
    for name in pipelines:
        runs = [r for r in results if r["pipeline"] == name]
        per_frame = {}
        for r in runs:
            for section, seconds in r["timings"].items():
                per_frame.setdefault(section, []).append(1e6 * seconds / r["frames"])
        total = statistics.median(1e6 * r["seconds"] / r["frames"] for r in runs)
        cells = [f"{section} {statistics.median(v):.0f}" for section, v in per_frame.items()]
        rows.append(f"| {name} | {total:.0f} | {'; '.join(cells)} |")
    return rows


def source_state() -> str:
    """The commit the runs imported torchrl_ext and the demo from, and whether they had edits."""
    git = ["git", "-C", str(HERE.parent)]
    try:
        commit = subprocess.run([*git, "rev-parse", "--short", "HEAD"], capture_output=True,
                                text=True, check=True).stdout.strip()  # fmt: skip
        edits = subprocess.run([*git, "status", "--porcelain", "torchrl_ext", "examples"],
                               capture_output=True, text=True, check=True).stdout  # fmt: skip
    except (OSError, subprocess.CalledProcessError):
        return "torchrl_ext outside a git checkout"
    changed = len(edits.splitlines())
    files = "1 file" if changed == 1 else f"{changed} files"
    return f"torchrl_ext and examples/ at {commit}" + (f" with {files} edited" if changed else "")


def report(
    results: list[dict], pipelines: list[str], command: str, load: tuple[float, float],
    source: str,
) -> str:  # fmt: skip
    """The printed page: summary, time per frame by section, every run."""
    target = results[0]["target"]
    lines = [
        "# Recurrent PPO side by side: our demo, the same demo on stock TorchRL, a hand-written "
        "loop, sb3-contrib RecurrentPPO",
        "",
        f"Command: `{command}` ({platform.machine()}, {os.cpu_count()} cores, one torch thread, "
        "each run a fresh process, pipelines interleaved over seeds; load average "
        f"{load[0]:.1f} at the start, {load[1]:.1f} at the end; {source} at the start).",
        f"Target: mean return of the last 20 completed episodes >= {target:g}. Seconds: training "
        "wall time from the first batch, read after each batch's update. frames/s: over the "
        "whole run. Final mean return: the last-20 window at the end; final eval: 16 fresh "
        "episodes, greedy actions.",
        "",
        "| pipeline | reached | frames to target | seconds to target | seconds vs ours | "
        "frames/s | final mean return | final eval |",
        "|---|---|---|---|---|---|---|---|",
        *summary_rows(results, pipelines),
        "",
        "Medians [min–max] over seeds (an unreached run counts as infinite in the median).",
        "",
        "Microseconds per frame (median over seeds), whole run and by section:",
        "",
        "| pipeline | total | sections |",
        "|---|---|---|",
        *breakdown_rows(results, pipelines),
        "",
        "Runs:",
        "",
        "| pipeline | seed | frames to target | seconds to target | frames/s | final mean return "
        "| final eval | frames | seconds |",
        "|---|---|---|---|---|---|---|---|---|",
        *(run_row(r) for r in results),
        "",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> str:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--frames", type=int, default=None,
                        help="frames per run (default: the demo's 61,440)")  # fmt: skip
    parser.add_argument("--pipelines", nargs="+", choices=PIPELINES, default=list(PIPELINES))
    parser.add_argument("--quick", action="store_true",
                        help="the demo's --quick settings (3 batches, 2 epochs)")  # fmt: skip
    parser.add_argument("--table", type=Path, default=None, help="also write the report here")
    parser.add_argument("--worker", choices=PIPELINES, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        worker(args.worker, args.seeds[0], args.frames, args.quick)
        return ""
    pipelines = available(args.pipelines)
    if not args.quick:
        warm_up(args)
    results, load_start, source = [], os.getloadavg()[0], source_state()
    for seed in args.seeds:
        for name in pipelines:
            results.append(spawn(name, seed, args))
            print(run_row(results[-1]), flush=True)
    command = "python benchmarks/ppo_side_by_side.py " + " ".join(argv or sys.argv[1:])
    load = (load_start, os.getloadavg()[0])
    text = report(results, pipelines, command.strip(), load, source)
    print(text)
    if args.table:
        args.table.parent.mkdir(parents=True, exist_ok=True)
        args.table.write_text(text)
    return text


if __name__ == "__main__":
    main()
