"""Recurrent PPO on POPGym side by side: our demo against sb3-contrib on POPGym's own env.

Usage::

    python benchmarks/popgym_side_by_side.py [--seeds 0 1 2] [--frames 262144]
        [--env RepeatPrevious] [--difficulty easy] [--memory lstm]
        [--pipelines ours ours-ffm sb3] [--no-floor] [--quick] [--table PATH]

Each run is a fresh subprocess with one torch thread; runs are interleaved over seeds (ours seed
0, ours-ffm seed 0, sb3 seed 0, ours seed 1, ...), so load on a shared machine falls on all of
them alike; one untimed quick run of each of our pipelines first compiles and caches the numba
and Warp kernels, so that no timed run pays for that. The pipelines:

* ``ours``: ``python examples/ppo_popgym.py`` as it is, through its public ``train``, seeded and
  in a fresh run folder (in a temporary directory) as ``runs.main`` calls it, with the demo's
  ``Args`` and the memory ``--memory`` (default ``lstm``): the Warp port of the env
  (``torchrl_ext.envs.popgym``), 64 envs x 64 steps a batch.
* ``ours-ffm``: the same with ``memory="ffm"`` (Fast and Forgetful Memory).
* ``sb3``: :mod:`_ppo_baselines.sb3_popgym`, sb3-contrib's ``RecurrentPPO`` on POPGym's own
  gymnasium env (``popgym.envs.RepeatPreviousEasy`` in POPGym's ``PreviousAction`` and
  ``Flatten`` wrappers, sb3's ``Monitor``, 64 copies in a ``DummyVecEnv``); skipped with a
  message when sb3-contrib or popgym is missing.

Matched between ``ours`` and ``sb3``: the task and difficulty, 64 envs x 64 steps a batch, the
frames, 4 epochs, minibatches of 1,024 frames (ours: 16 whole env rows of 64 steps; sb3:
``batch_size=1024``, cut from the flattened env-major batch at a random offset and split into
padded per-episode sequences), Adam (eps 1e-5) with lr 5e-4 and clip 0.2 linear to 0, gamma
0.99, lambda 0.95, value-loss weight 0.5, no entropy bonus, advantages standardized per
minibatch, separate LSTMs of 64 for actor and critic, heads of one ReLU layer of 64, PyTorch's
default initialization, the network's inputs (the observed suit and the previous action, both
one-hot). Not matched: the env's code (ours: the Warp port, all envs stepped in one call; sb3:
POPGym's Python class, one env at a time) and its random numbers, so the same seed deals other
cards; at an episode's first step ours feeds an all-zero previous action and POPGym's wrapper
the one-hot of action 0; sb3 clips the gradient norm of all parameters together at 0.5 (ours
clips actor and critic each); sb3 replays each minibatch's sequences from their stored states
by episode, ours whole rows.

Measured: frames/s, over the training wall time from the first batch (set-up, imports and the
final evaluation excluded), read after each batch's update in both; MMER, the max over the
batches of the mean return of the last 100 completed episodes (the demo's ``best_mean_return``,
POPGym's MMER), computed for sb3 from its ``Monitor`` returns by the demo's own
``runs.ReturnWindow`` and ``runs.best_mean`` (the window counts from the first batch, before it
holds 100 episodes, in both). Where the time goes, per frame: ours' ``collect``, ``gae`` and
``update`` sections (its ``runs.Stopwatch``); sb3's ``collect (with GAE)`` and ``update``.

The raw network floor: after each seed's runs, a fresh process times the networks of pipeline
``ours`` (LSTM or GRU) in plain torch (:mod:`_ppo_baselines.network_floor`: one step per env
at collection, the critic over the batch for GAE, the epochs' forward and backward passes over
minibatches), per frame; the report gives its median over seeds and ours' total time per frame
over it, the factor a training loop spends above its networks' own cost.
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
from pathlib import Path

import _examples_path  # noqa: F401  (puts examples/ on sys.path)
from ppo_side_by_side import breakdown_rows, source_state, spread, train_demo

HERE = Path(__file__).resolve().parent
PIPELINES = ("ours", "ours-ffm", "sb3")
#: The worker that times the raw network floor of pipeline ``ours``.
FLOOR = "floor"
#: The memories whose networks have a plain-torch floor (PyTorch's fused LSTM and GRU).
FLOOR_MEMORIES = ("lstm", "gru")
#: The frames of a run unless ``--frames`` or ``--quick`` says otherwise (64 batches).
FRAMES = 262_144
RESULT_PREFIX = "RESULT "


# ---------------------------------------------------------------------------- worker side
def demo_args(options: argparse.Namespace, seed: int, memory: str):
    """The demo's ``Args`` for one run: ``--quick``'s settings, ``--frames``, env and memory."""
    import ppo_popgym

    values = dict(ppo_popgym.QUICK) if options.quick else {"frames": FRAMES}
    if options.frames is not None:
        values["frames"] = options.frames
    return ppo_popgym.Args(
        **values, seed=seed, env=options.env, difficulty=options.difficulty, memory=memory
    )


def baseline_args(args):
    """The demo's settings as :class:`_ppo_baselines.sb3_popgym.Args`.

    Raises:
        ValueError: for a demo setting sb3's model does not implement.
    """
    from _ppo_baselines.sb3_popgym import Args

    unsupported = {
        "memory": args.memory != "lstm", "shared_memory": args.shared_memory,
        "input_layer": args.input_layer != 0, "head_layers": args.head_layers != 1,
        "previous_action": not args.previous_action, "entropy_coeff": args.entropy_coeff != 0,
        "reward_scale": args.reward_scale != 1.0, "steps": args.steps == 0,
    }  # fmt: skip
    if any(unsupported.values()):
        names = ", ".join(name for name, bad in unsupported.items() if bad)
        raise ValueError(f"the sb3 baseline does not implement the demo's {names}: {args}")
    return Args(
        seed=args.seed, env=args.env, difficulty=args.difficulty, total_frames=args.frames,
        num_envs=args.num_envs, num_steps=args.steps, learning_rate=args.lr, gamma=args.gamma,
        gae_lambda=args.lmbda, update_epochs=args.epochs,
        envs_per_minibatch=args.envs_per_minibatch, clip_coef=args.clip,
        vf_coef=args.critic_coeff, max_grad_norm=args.max_grad_norm, hidden=args.hidden,
        head=args.head,
    )  # fmt: skip


def run_ours(args) -> dict:
    """Trains the demo through its public ``train``, as ``runs.main`` runs it; returns its row.

    The run folder lives in a temporary directory, removed on return; the demo's section times
    (its ``runs.Stopwatch``) are kept as ``train`` measured them.
    """
    import ppo_popgym

    with contextlib.ExitStack() as stack:
        result, sections = train_demo(ppo_popgym, args, stack)
    return {"frames": result.frames, "seconds": result.seconds, "mmer": result.best,
            "final_mean_return": result.curve[-1][1], "timings": sections}  # fmt: skip


def run_sb3(args) -> dict:
    """Trains sb3's RecurrentPPO with the demo's settings; judges it by the demo's window."""
    import runs
    from _ppo_baselines import sb3_popgym

    run = sb3_popgym.train(baseline_args(args))
    window = runs.ReturnWindow(args.return_window, args.target, counters={})
    curve = [(f, window.update(returns, f, seconds)) for f, seconds, returns in run.history]
    frames, seconds, _ = run.history[-1]
    return {"frames": frames, "seconds": seconds, "mmer": runs.best_mean(curve),
            "final_mean_return": window.mean, "timings": run.timings}  # fmt: skip


def pipeline_memory(name: str, memory: str) -> str:
    """The memory a pipeline trains: ``--memory`` for ``ours``, FFM for ``ours-ffm``."""
    return {"ours": memory, "ours-ffm": "ffm", "sb3": "lstm"}[name]


def worker(name: str, options: argparse.Namespace) -> None:
    """One run in this process; prints its result as one JSON line."""
    import logging

    import torch

    torch.set_num_threads(1)
    logging.getLogger("torchrl").setLevel(logging.WARNING)
    memory = pipeline_memory("ours" if name == FLOOR else name, options.memory)
    args = demo_args(options, options.seeds[0], memory)
    if name == FLOOR:
        from _ppo_baselines.network_floor import floor

        result = {"timings": floor(args)}
    else:
        result = run_sb3(args) if name == "sb3" else run_ours(args)
    result.update(pipeline=name, seed=args.seed, memory=memory)
    print(RESULT_PREFIX + json.dumps(result), flush=True)


# ---------------------------------------------------------------------------- driver side
def spawn(name: str, seed: int, options: argparse.Namespace) -> dict:
    """Runs one (pipeline, seed) in a fresh interpreter; returns its result."""
    cmd = [sys.executable, str(Path(__file__).resolve()), "--worker", name, "--seeds", str(seed)]
    cmd += ["--env", options.env, "--difficulty", options.difficulty, "--memory", options.memory]
    cmd += ["--quick"] * options.quick
    cmd += ["--frames", str(options.frames)] if options.frames is not None else []
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": os.pathsep.join(
        p for p in (str(HERE), os.environ.get("PYTHONPATH")) if p)}  # fmt: skip
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, check=False)
    lines = [line for line in proc.stdout.splitlines() if line.startswith(RESULT_PREFIX)]
    if proc.returncode != 0 or not lines:
        raise RuntimeError(
            f"{name} seed {seed} failed (exit {proc.returncode}):\n{proc.stderr[-4000:]}"
        )
    return json.loads(lines[-1][len(RESULT_PREFIX) :])


def warm_up(options: argparse.Namespace, pipelines: list[str]) -> None:
    """One untimed quick run of each of our pipelines, so that no timed run compiles kernels.

    The env's Warp kernels and the memories' numba kernels are compiled on first use and cached
    on disk; without this, the first timed run of a fresh checkout pays that.
    """
    quick = argparse.Namespace(**{**vars(options), "quick": True, "frames": None})
    for name in pipelines:
        if name != "sb3":
            spawn(name, options.seeds[0], quick)


def available(pipelines: list[str]) -> list[str]:
    """The requested pipelines that can run here; says why sb3 is left out if it is."""
    missing = [m for m in ("sb3_contrib", "popgym") if importlib.util.find_spec(m) is None]
    if "sb3" in pipelines and missing:
        print(f"{' and '.join(missing)} not installed: skipping RecurrentPPO on POPGym "
              '(install them with `pip install -e ".[test]" -c constraints.txt`).')  # fmt: skip
        return [p for p in pipelines if p != "sb3"]
    return pipelines


def run_row(r: dict) -> str:
    """One run's row: frames/s, MMER, the last window's mean, frames and seconds."""
    return (
        f"| {r['pipeline']} | {r['memory']} | {r['seed']} | {r['frames'] / r['seconds']:.0f} | "
        f"{r['mmer']:.3f} | {r['final_mean_return']:.3f} | {r['frames']} | "
        f"{r['seconds']:.1f} |"
    )


def summary_rows(results: list[dict], pipelines: list[str]) -> list[str]:
    """Per pipeline: frames/s and its ratio to sb3's (medians), MMER, median [min–max]."""
    fps = {
        name: [r["frames"] / r["seconds"] for r in results if r["pipeline"] == name]
        for name in pipelines
    }
    sb3 = statistics.median(fps["sb3"]) if fps.get("sb3") else None
    rows = []
    for name in pipelines:
        runs = [r for r in results if r["pipeline"] == name]
        ratio = "—" if sb3 is None else f"{statistics.median(fps[name]) / sb3:.2f}"
        rows.append(
            f"| {name} | {runs[0]['memory']} | {len(runs)} | {spread(fps[name], '.0f')} | "
            f"{ratio} | {spread([r['mmer'] for r in runs], '.3f')} |"
        )
    return rows


def report(
    results: list[dict], pipelines: list[str], options: argparse.Namespace, command: str,
    load: tuple[float, float], source: str,
) -> str:  # fmt: skip
    """The printed page: summary, time per frame by section, every run."""
    frames = results[0]["frames"]
    lines = [
        f"# Recurrent PPO on POPGym {options.env} ({options.difficulty}) side by side: our demo "
        "against sb3-contrib RecurrentPPO on POPGym's own env",
        "",
        f"Command: `{command}` ({platform.machine()}, {os.cpu_count()} cores, one torch thread, "
        "each run a fresh process, pipelines interleaved over seeds; load average "
        f"{load[0]:.1f} at the start, {load[1]:.1f} at the end; {source} at the start).",
        f"{frames:,} frames a run. frames/s: over the training wall time from the first batch "
        "(set-up and the final evaluation excluded). MMER: the max over batches of the mean "
        "return of the last 100 completed episodes (returns scaled by POPGym: 1 is the best). "
        "vs sb3: median frames/s over sb3's median frames/s.",
        "",
        "| pipeline | memory | runs | frames/s | frames/s vs sb3 | MMER |",
        "|---|---|---|---|---|---|",
        *summary_rows(results, pipelines),
        "",
        "Medians [min–max] over seeds.",
        "",
        "Microseconds per frame (median over seeds), whole run and by section:",
        "",
        "| pipeline | total | sections |",
        "|---|---|---|",
        *breakdown_rows(results, pipelines),
        "",
        "Runs:",
        "",
        "| pipeline | memory | seed | frames/s | MMER | final mean return | frames | seconds |",
        "|---|---|---|---|---|---|---|---|",
        *(run_row(r) for r in results),
        "",
    ]
    return "\n".join(lines)


def floor_section(results: list[dict], floors: list[dict]) -> str:
    """The raw network floor of pipeline ``ours`` and each pipeline's time over it.

    A pipeline's factor over the floor is also the most any loop that runs the same networks
    could train faster than it: sb3's is the ceiling of a speed-up over sb3. Empty without a
    floor.
    """
    if not floors:
        return ""
    sections = floors[0]["timings"]
    median = {s: statistics.median(f["timings"][s] for f in floors) for s in sections}
    total = sum(median.values())
    cells = "; ".join(f"{section} {value:.1f}" for section, value in median.items())
    over = []
    for pipeline in dict.fromkeys(r["pipeline"] for r in results):
        per_frame = statistics.median(
            1e6 * r["seconds"] / r["frames"] for r in results if r["pipeline"] == pipeline
        )
        over.append(f"| {pipeline} over the floor | {per_frame / total:.2f} | |")
    return "\n".join([
        "",
        f"Raw network floor of `ours` (memory {floors[0]['memory']}; "
        "`benchmarks/_ppo_baselines/network_floor.py`): the same networks' passes in plain "
        "torch, microseconds per frame, median over seeds, each timed in a fresh process after "
        "the seed's runs: one step of actor and critic per env at collection, the critic over "
        "the batch's rows for GAE, and the epochs' forward + backward passes of both networks "
        "over minibatches. A pipeline's time per frame over the floor is also the most that a "
        "loop running these networks could speed it up.",
        "",
        "| | total | sections |",
        "|---|---|---|",
        f"| floor | {total:.1f} | {cells} |",
        *over,
        "",
    ])  # fmt: skip


def parse(argv: list[str] | None) -> argparse.Namespace:
    """The command line's options (``--worker`` runs one pipeline in this process)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--frames", type=int, default=None,
                        help=f"frames per run (default: {FRAMES:,})")  # fmt: skip
    parser.add_argument("--env", default="RepeatPrevious", help="POPGym's name of the env")
    parser.add_argument("--difficulty", default="easy", choices=("easy", "medium", "hard"))
    parser.add_argument("--memory", default="lstm", choices=("lstm", "gru", "ffm", "none"),
                        help="the memory of pipeline ours (ours-ffm: always ffm)")  # fmt: skip
    parser.add_argument("--pipelines", nargs="+", choices=PIPELINES, default=list(PIPELINES))
    parser.add_argument("--quick", action="store_true",
                        help="the demo's --quick settings (3 small batches)")  # fmt: skip
    parser.add_argument("--table", type=Path, default=None, help="also write the report here")
    parser.add_argument("--floor", action=argparse.BooleanOptionalAction, default=True,
                        help="also time the raw network floor of pipeline ours, per seed "
                        "(--memory lstm or gru)")  # fmt: skip
    parser.add_argument("--worker", choices=(*PIPELINES, FLOOR), help=argparse.SUPPRESS)
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> str:
    """Runs every (seed, pipeline), interleaved; prints each run's row, then the report."""
    options = parse(argv)
    if options.worker:
        worker(options.worker, options)
        return ""
    pipelines = available(options.pipelines)
    if not options.quick:
        warm_up(options, pipelines)
    results, floors, load_start, source = [], [], os.getloadavg()[0], source_state()
    timed_floor = options.floor and "ours" in pipelines and options.memory in FLOOR_MEMORIES
    for seed in options.seeds:
        for name in pipelines:
            results.append(spawn(name, seed, options))
            print(run_row(results[-1]), flush=True)
        if timed_floor:
            floors.append(spawn(FLOOR, seed, options))
    command = "python benchmarks/popgym_side_by_side.py " + " ".join(argv or sys.argv[1:])
    load = (load_start, os.getloadavg()[0])
    text = report(results, pipelines, options, command.strip(), load, source)
    text += floor_section(results, floors)
    print(text)
    if options.table:
        options.table.parent.mkdir(parents=True, exist_ok=True)
        options.table.write_text(text)
    return text


if __name__ == "__main__":
    main()
