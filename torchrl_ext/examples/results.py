"""The main demo's results: recurrent PPO on several seeds and a feed-forward baseline.

Run it with ``python -m torchrl_ext.examples results [--seeds 0 1 2] [--mlp-seeds 0]
[--out DIR] [--table PATH]`` (what ``bash scripts/demo.sh`` runs). It trains the LSTM pipeline
of :mod:`~torchrl_ext.examples.ppo_cartpole` once per seed and the feed-forward one
(``--policy mlp``) once per ``--mlp-seeds`` entry, each in its own run folder under ``DIR``
(``runs/results`` by default), then writes the markdown table (frames and seconds to a mean
return of 475, final deterministic evaluation, per seed) to ``--table`` (default
``DIR/results.md``) and all curves to ``DIR/learning_curves.png``.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import platform
import statistics
from pathlib import Path

import torch

from torchrl_ext.examples import _common, _run_folder
from torchrl_ext.examples.ppo_cartpole import Result, config_of, train


def _fmt(value: float | None, spec: str) -> str:
    return "not reached" if value is None else format(value, spec)


def result_rows(results: list[Result]) -> list[str]:
    """Markdown rows, one per run.

    Examples:
        >>> from pathlib import Path
        >>> from torchrl_ext.examples.ppo_cartpole import Config
        >>> curve = [(1024, 20.0), (2048, 480.0)]
        >>> r = Result(Config(), 2048, 2.0, 500.0, 61440, 40.0, Path("runs"), {}, curve)
        >>> result_rows([r])[0]
        '| lstm | 0 | 2048 | 2.0 | 500.0 | 480.0 | 61440 | 40.0 |'
    """
    return [
        f"| {r.config.policy} | {r.config.seed} | {_fmt(r.frames_to_target, 'd')} | "
        f"{_fmt(r.seconds_to_target, '.1f')} | {r.final_eval:.1f} | {r.best_return:.1f} | "
        f"{r.frames} | {r.seconds:.1f} |"
        for r in results
    ]


def median_line(results: list[Result]) -> str:
    """Median frames and seconds to the target over runs (unreached runs count as infinite).

    Examples:
        >>> from pathlib import Path
        >>> from torchrl_ext.examples.ppo_cartpole import Config
        >>> runs = [
        ...     Result(Config(seed=s), f, t, 500.0, 80000, 40.0, Path("."), {}, [(512, 60.0)])
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
    """The results page: settings, table, medians and the plot."""
    cfg = lstm[0].config
    lines = [
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
        *result_rows(lstm + mlp),
        "",
        f"- {median_line(lstm)}",
    ]
    if mlp:
        lines.append(f"- {median_line(mlp)}")
    lines += ["", f"![Learning curves]({plot})", ""]
    return "\n".join(lines)


def run_all(args: argparse.Namespace, out: Path) -> tuple[list[Result], list[Result], Path]:
    """Trains every run; returns ``(lstm_results, mlp_results, plot_path)``."""
    lstm, mlp = [], []
    for policy, seeds, results in (("lstm", args.seeds, lstm), ("mlp", args.mlp_seeds, mlp)):
        for seed in seeds:
            run = _run_folder.run_options(args, out / f"{policy}_seed{seed}")
            cfg = config_of(args, seed, policy)
            _run_folder.start_run(run, dataclasses.asdict(cfg))
            result = train(cfg, run, quick=args.quick)
            print(result_rows([result])[0], flush=True)
            results.append(result)
    curves = {f"{r.config.policy} seed {r.config.seed}": r.curve for r in lstm + mlp}
    title = "PPO on CartPole without velocities"
    plot = _common.plot_curves(out / "learning_curves.png", curves, lstm[0].config.target, title)
    return lstm, mlp, plot


def main(args: argparse.Namespace) -> str:
    """Runs ``python -m torchrl_ext.examples results`` (see ``--help``); returns the table."""
    if args.resume is not None:
        raise SystemExit("results: --resume continues one run; use `ppo --resume DIR` for it.")
    _common.setup()
    out = args.out or Path("runs") / ("quick" if args.quick else "") / "results"
    table = args.table or out / "results.md"
    lstm, mlp, plot = run_all(args, out)
    shown = {k: v for k, v in vars(args).items() if k in ("seeds", "mlp_seeds", "frames")}
    command = "python -m torchrl_ext.examples results " + " ".join(
        f"--{k.replace('_', '-')} {' '.join(map(str, v)) if isinstance(v, list) else v}"
        for k, v in shown.items()
        if v is not None
    )
    # the table links the plot relative to where the table is written (docs pages render it)
    text = markdown(lstm, mlp, Path(os.path.relpath(plot, table.parent)), command)
    table.parent.mkdir(parents=True, exist_ok=True)
    table.write_text(text)
    print(text)
    print(f"table: {table}\nplot: {plot}")
    return text
