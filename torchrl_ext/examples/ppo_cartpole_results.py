"""Per-seed results of the recurrent PPO example: a markdown table and the learning curves.

Run it with::

    python -m torchrl_ext.examples.ppo_cartpole_results [--seeds 0 1 2] [--mlp-seeds 0]
                                                        [--out DIR] [--table PATH]

It trains the LSTM pipeline once per seed and the feed-forward (``--policy mlp``) pipeline once,
each with 1 torch thread, then writes the table (frames and seconds to a mean return of 475,
final deterministic evaluation, per seed) to ``--table`` (default ``DIR/results.md``) and all
curves to ``DIR/learning_curves.png``. ``DIR`` defaults to ``runs/ppo_cartpole``.
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import statistics
import sys
from pathlib import Path

import torch

from torchrl_ext.examples.ppo_cartpole import Config, Result, plot_curves, quiet_setup, train


def _fmt(value: float | None, spec: str) -> str:
    return "not reached" if value is None else format(value, spec)


def result_rows(results: list[Result]) -> list[str]:
    """Markdown rows, one per run.

    Examples:
        >>> from torchrl_ext.examples.ppo_cartpole import Config, Result
        >>> curve = [(1024, 1.0, 20.0), (2048, 2.0, 480.0)]
        >>> r = Result(Config(), 2048, 2.0, 500.0, 61440, 40.0, {}, 1.0, 1.0, curve)
        >>> result_rows([r])[0]
        '| lstm | 0 | 2048 | 2.0 | 500.0 | 480.0 | 61440 | 40.0 |'
    """
    return [
        f"| {r.config.policy} | {r.config.seed} | {_fmt(r.frames_to_target, 'd')} | "
        f"{_fmt(r.seconds_to_target, '.1f')} | {r.final_eval:.1f} | {r.best_return:.1f} | "
        f"{r.frames} | {r.seconds:.1f} |"
        for r in results
    ]


def timing_rows(results: list[Result]) -> list[str]:
    """Markdown rows of the time breakdown, one per run (seconds, and env steps per second).

    Examples:
        >>> timings = {"collect": 10.0, "policy": 6.0, "gae": 1.0, "update": 20.0}
        >>> r = Result(Config(), None, None, 9.0, 61440, 31.0, timings, 2000.0, 9000.0, [])
        >>> timing_rows([r])[0]
        '| lstm | 0 | 31.0 | 4.0 | 6.0 | 1.0 | 20.0 | 2000 | 9000 |'
    """
    rows = []
    for r in results:
        t = r.timings
        env = t.get("collect", 0.0) - t.get("policy", 0.0)
        rows.append(
            f"| {r.config.policy} | {r.config.seed} | {r.seconds:.1f} | {env:.1f} | "
            f"{t.get('policy', 0.0):.1f} | {t.get('gae', 0.0):.1f} | {t.get('update', 0.0):.1f} "
            f"| {r.env_steps_per_s:.0f} | {r.raw_env_steps_per_s:.0f} |"
        )
    return rows


def median_line(results: list[Result]) -> str:
    """Median frames and seconds to the target over runs (unreached runs count as infinite).

    Examples:
        >>> from torchrl_ext.examples.ppo_cartpole import Config, Result
        >>> runs = [
        ...     Result(Config(seed=s), f, t, 500.0, 80000, 40.0, {}, 1.0, 1.0, [(512, 1.0, 60.0)])
        ...     for s, f, t in [(0, 30000, 20.0), (1, None, None), (2, 20000, 10.0)]
        ... ]
        >>> median_line(runs)
        'lstm, median of 3 seeds: 30000 frames and 20.0 s to the target; lowest final eval 500.0; highest mean return 60.0'
        >>> median_line(runs[1:2])
        'lstm, 1 seed: target not reached; lowest final eval 500.0; highest mean return 60.0'
    """  # noqa: E501
    inf = float("inf")
    frames = statistics.median([r.frames_to_target or inf for r in results])
    seconds = statistics.median([r.seconds_to_target or inf for r in results])
    reached = (
        "target not reached"
        if frames == inf or seconds == inf
        else f"{frames:.0f} frames and {seconds:.1f} s to the target"
    )
    worst = min(r.final_eval for r in results)
    best = max(r.best_return for r in results)
    runs = "1 seed" if len(results) == 1 else f"median of {len(results)} seeds"
    return (
        f"{results[0].config.policy}, {runs}: {reached}; lowest final eval {worst:.1f}; "
        f"highest mean return {best:.1f}"
    )


def markdown(lstm: list[Result], mlp: list[Result], plot: Path, command: str) -> str:
    """The results page: settings, table, medians, timing breakdown and the plot's path."""
    cfg = lstm[0].config
    header = [
        "# Recurrent PPO on CartPole without velocities",
        "",
        f"Command: `{command}` ({platform.processor() or platform.machine()}, "
        f"{torch.get_num_threads()} torch thread). Target: mean return of the last "
        f"{cfg.return_window} completed episodes >= {cfg.target:g}; seconds are training wall "
        "time (collection, GAE, updates) from the first batch, excluding imports and setup. "
        f"Final evaluation: mean return of {cfg.eval_episodes} fresh episodes with the "
        "policy's mode.",
        "",
        f"Settings: {cfg.num_envs} envs x {cfg.steps} steps per batch, {cfg.epochs} epochs, "
        f"{cfg.envs_per_minibatch} env rows per minibatch, LSTM {cfg.hidden} (separate for "
        f"actor and critic) with heads of {cfg.head}, lr {cfg.lr:g} and clip {cfg.clip:g} "
        f"linear to 0 over {cfg.frames} frames, gamma {cfg.gamma:g}, lambda {cfg.lmbda:g}.",
        "",
        "| policy | seed | frames to target | seconds to target | final eval | best mean return "
        "| frames | seconds |",
        "|---|---|---|---|---|---|---|---|",
    ]
    lines = [*header, *result_rows(lstm + mlp), "", f"- {median_line(lstm)}"]
    if mlp:
        lines.append(f"- {median_line(mlp)}")
    lines += [
        "",
        "Where the time goes (seconds over the whole run; env = env stepping and the "
        "collector's bookkeeping, policy = the policy's forward calls during collection, "
        "update = PPO forward/backward/optimizer; env steps/s of collection, policy included, "
        "and of the env alone with random actions):",
        "",
        "| policy | seed | total | env | policy | GAE | update | collection steps/s | "
        "env alone steps/s |",
        "|---|---|---|---|---|---|---|---|---|",
        *timing_rows(lstm + mlp),
        "",
        f"![Learning curves]({plot})",
        "",
    ]
    return "\n".join(lines)


def run_all(seeds: list[int], mlp_seeds: list[int], out: Path, frames: int | None) -> tuple:
    """Trains every run; returns ``(lstm_results, mlp_results, plot_path)``."""
    extra = {} if frames is None else {"frames": frames}
    lstm, mlp = [], []
    for policy, seed_list, results in (("lstm", seeds, lstm), ("mlp", mlp_seeds, mlp)):
        for seed in seed_list:
            cfg = Config(seed=seed, policy=policy, **extra)
            result = train(cfg, out / f"{policy}_seed{seed}")
            print(result_rows([result])[0], flush=True)
            results.append(result)
    curves = {f"{r.config.policy} seed {r.config.seed}": r.curve for r in lstm + mlp}
    plot = plot_curves(out / "learning_curves.png", curves, lstm[0].config.target)
    return lstm, mlp, plot


def main(argv: list[str] | None = None) -> str:
    """Runs the seeds, writes and prints the table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--mlp-seeds", type=int, nargs="*", default=[0])
    parser.add_argument("--frames", type=int, default=None)
    parser.add_argument("--out", type=Path, default=Path("runs") / "ppo_cartpole")
    parser.add_argument("--table", type=Path, default=None, help="default: DIR/results.md")
    parser.add_argument("--image", type=Path, default=None, help="also copy the plot here")
    args = parser.parse_args(argv)
    if args.table is None:
        args.table = args.out / "results.md"
    quiet_setup()
    lstm, mlp, plot = run_all(args.seeds, args.mlp_seeds, args.out, args.frames)
    if args.image is not None:
        args.image.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(plot, args.image)
        plot = args.image
    shown = sys.argv[1:] if argv is None else argv
    command = "python -m torchrl_ext.examples.ppo_cartpole_results " + " ".join(shown)
    # the table links the plot relative to where the table is written (docs pages render it)
    relative = Path(os.path.relpath(plot, args.table.parent))
    text = markdown(lstm, mlp, relative, command.strip())
    args.table.parent.mkdir(parents=True, exist_ok=True)
    args.table.write_text(text)
    print(text)
    print(f"table: {args.table}\nplot: {plot}")
    return text


if __name__ == "__main__":
    main()
