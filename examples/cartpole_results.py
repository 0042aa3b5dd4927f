"""The main demo's results: recurrent PPO on CartPole without velocities, seeds and a baseline.

    python examples/cartpole_results.py [--seeds 0 1 2] [--mlp-seeds 0] [--frames N] [--quick]

Trains ``ppo_cartpole.py`` with LSTMs once per ``--seeds`` entry and its feed-forward baseline
(``--policy mlp``) once per ``--mlp-seeds`` entry, in run folders under ``DIR/lstm`` and
``DIR/mlp`` (``--out DIR``, ``runs/cartpole_results`` by default), then writes the markdown
table (frames and seconds to a mean return of 475, final deterministic evaluation, per seed) to
``--table`` (``DIR/results.md`` by default) and every curve to ``DIR/learning_curves.png``.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
from pathlib import Path

import ppo_cartpole
import runs
import torch


def make_parser() -> argparse.ArgumentParser:
    """The command line: seeds of both policies, the budget and where the results go."""
    parser = runs.Parser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--seeds",
        type=int,
        nargs="+",
        default=[0, 1, 2],
        metavar="N",
        help="seeds of the LSTM agent (default: 0 1 2)",
    )
    parser.add_argument(
        "--mlp-seeds",
        type=int,
        nargs="*",
        default=[0],
        metavar="N",
        help="seeds of the feed-forward baseline (default: 0)",
    )
    parser.add_argument(
        "--frames",
        type=int,
        default=None,
        metavar="N",
        help="frames per run (default: ppo_cartpole's, 61,440)",
    )
    parser.add_argument(
        "--out",
        type=Path,
        default=None,
        metavar="DIR",
        help="output folder (default: runs/cartpole_results, runs/quick/cartpole_results)",
    )
    parser.add_argument(
        "--table",
        type=Path,
        default=None,
        metavar="PATH",
        help="markdown table file (default: DIR/results.md)",
    )
    parser.add_argument("--overwrite", action="store_true", help="replace the runs already in DIR")
    parser.add_argument("--quick", action="store_true", help="a few checked batches per run")
    parser.add_argument(
        "--progress",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="show a progress bar",
    )
    return parser


def command_lines(args: argparse.Namespace, out: Path) -> dict[str, list[str]]:
    """``ppo_cartpole``'s command line for each policy's runs."""
    lines = {}
    for policy, seeds in (("lstm", args.seeds), ("mlp", args.mlp_seeds)):
        if seeds:
            argv = ["--policy", policy, "--seeds", *map(str, seeds), "--out", str(out / policy)]
            argv += ["--frames", str(args.frames)] if args.frames is not None else []
            argv += ["--quick"] * args.quick + ["--overwrite"] * args.overwrite
            lines[policy] = argv + ([] if args.progress else ["--no-progress"])
    return lines


def train_all(args: argparse.Namespace, out: Path) -> dict[str, list[runs.Result]]:
    """Trains every run through ``ppo_cartpole``'s command line; results per policy.

    Every run's arguments and folder are checked before the first one trains.
    """
    lines = command_lines(args, out)
    for argv in lines.values():
        runs.parse(ppo_cartpole.Args, argv, ppo_cartpole.QUICK)
    pipeline = (ppo_cartpole.Args, ppo_cartpole.train)
    return {p: runs.main(*pipeline, argv=a, quick=ppo_cartpole.QUICK) for p, a in lines.items()}


def _cell(value: float | None, spec: str) -> str:
    return "not reached" if value is None else format(value, spec)


def table_row(policy: str, result: runs.Result) -> str:
    """One markdown row: policy, seed, frames and seconds to the target, evaluation, totals."""
    seed = result.name.rsplit(" ", 1)[-1]
    frames, seconds = result.hit or (None, None)
    return (
        f"| {policy} | {seed} | {_cell(frames, 'd')} | {_cell(seconds, '.1f')} | "
        f"{result.final_eval:.1f} | {result.best:.1f} | {result.frames} | {result.seconds:.1f} |"
    )


def median_line(policy: str, results: list[runs.Result]) -> str:
    """Median frames and seconds to the target over seeds (a run that never reached it: inf).

    Examples:
        >>> from pathlib import Path
        >>> def result(seed, hit):
        ...     return runs.Result("ppo_cartpole", f"lstm seed {seed}", Path("."), 80000, 40.0,
        ...                        [(512, 60.0)], 500.0, 475.0, hit)
        >>> median_line("lstm", [result(0, (30000, 20.0)), result(1, None), result(2, (20000, 9.0))])
        'lstm, median of 3 seeds: 30000 frames and 20.0 s to the target; lowest final eval 500.0; highest mean return 60.0'
    """  # noqa: E501
    inf = float("inf")
    frames = statistics.median([r.hit[0] if r.hit else inf for r in results])
    seconds = statistics.median([r.hit[1] if r.hit else inf for r in results])
    reached = "target not reached"
    if frames != inf and seconds != inf:
        reached = f"{frames:.0f} frames and {seconds:.1f} s to the target"
    seeds = "1 seed" if len(results) == 1 else f"median of {len(results)} seeds"
    return (
        f"{policy}, {seeds}: {reached}; lowest final eval "
        f"{min(r.final_eval for r in results):.1f}; highest mean return "
        f"{max(r.best for r in results):.1f}"
    )


def markdown(results: dict[str, list[runs.Result]], plot: Path, command: str) -> str:
    """The results page: how it was run, the table, the medians and the plot."""
    a = ppo_cartpole.Args()
    lines = [
        "# Recurrent PPO on CartPole without velocities",
        "",
        f"Command: `{command}` ({platform.processor() or platform.machine()}, "
        f"{torch.get_num_threads()} torch thread). Target: mean return of the last "
        f"{a.return_window} completed episodes >= {a.target:g}; seconds are training wall time "
        "(collection, GAE, updates) from the first batch, excluding imports and setup. Final "
        f"evaluation: mean return of {a.eval_episodes} fresh episodes with the policy's mode.",
        "",
        runs.code_summary(r.out for rs in results.values() for r in rs),
        "",
        f"Settings: {a.num_envs} envs x {a.steps} steps per batch, {a.epochs} epochs, "
        f"{a.envs_per_minibatch} env rows per minibatch, LSTM {a.hidden} (separate for actor "
        f"and critic) with heads of {a.head}, lr {a.lr:g} and clip {a.clip:g} linear to 0 over "
        f"the run, gamma {a.gamma:g}, lambda {a.lmbda:g}.",
        "",
        "| policy | seed | frames to target | seconds to target | final eval | best mean return "
        "| frames | seconds |",
        "|---|---|---|---|---|---|---|---|",
        *(table_row(policy, r) for policy, rs in results.items() for r in rs),
        "",
        *(f"- {median_line(policy, rs)}" for policy, rs in results.items()),
        "",
        f"![Learning curves]({plot})",
        "",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> str:
    """Trains the runs, writes the table and the curves; returns the table."""
    args = make_parser().parse_args(argv)
    out = args.out or Path("runs") / ("quick" if args.quick else "") / "cartpole_results"
    table = args.table or out / "results.md"
    results = train_all(args, out)
    curves = {f"{p} {r.name}": r.curve for p, rs in results.items() for r in rs}
    target = ppo_cartpole.Args().target
    title = "PPO on CartPole without velocities"
    plot = runs.plot_curves(out / "learning_curves.png", curves, target, title)
    given = argv if argv is not None else sys.argv[1:]
    command = "python examples/cartpole_results.py " + " ".join(given)
    # the table links the plot relative to where it is written (docs pages render it)
    link = Path(os.path.relpath(plot, table.parent)) if plot else Path("learning_curves.png")
    text = markdown(results, link, command.strip())
    table.parent.mkdir(parents=True, exist_ok=True)
    table.write_text(text)
    print(text)
    print(f"table: {table}\nplot: {plot}")
    return text


if __name__ == "__main__":
    main()
