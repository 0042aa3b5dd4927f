"""The POPGym results table: recurrent PPO on 8 Easy memory tasks, beside the paper's figures.

Run it with ``python -m torchrl_ext.examples popgym-results [--seeds 0 1 2] [--out DIR]
[--envs NAME ...] [--frames N]`` (``--quick``: a few batches of two envs, what the tests run).

For each env of :data:`ROWS` and each seed it trains
:mod:`~torchrl_ext.examples.ppo_popgym` with the env's config
(:func:`~torchrl_ext.examples.ppo_popgym.config_class`) into ``DIR/<env>-<difficulty>/seed<N>``,
unless that folder already holds a finished run: then the run is read back from its logs, so
the table can be regenerated, or completed after an interruption (an unfinished run is
resumed), without training again. It writes the markdown table to ``DIR/popgym_results.md``
and every run's learning curve to ``DIR/popgym_curves.png``.

The table gives, per env: the paper's PPO-GRU and PPO-LSTM MMER (see
:data:`~torchrl_ext.examples._popgym_paper.SOURCE`), ours as the median and range over seeds,
the frames each used, and our wall time per run.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import platform
import statistics
from pathlib import Path

from torchrl_ext.examples import _common, _run_folder
from torchrl_ext.examples._popgym_configs import QUICK_ROWS as QUICK_ROWS
from torchrl_ext.examples._popgym_configs import ROWS as ROWS
from torchrl_ext.examples._popgym_configs import seed_folder, table_folder, table_rows
from torchrl_ext.examples._popgym_paper import (
    PAPER_FRAMES,
    PAPER_PPO_GRU,
    PAPER_PPO_LSTM,
    SOURCE,
    reference,
)


@dataclasses.dataclass
class Run:
    """One finished run as its folder records it.

    Args:
        seed (int): the run's seed.
        mmer (float): the highest mean return over the 100-episode window (NaN if none).
        final_eval (float): mean return of the final deterministic evaluation.
        frames (int): frames collected.
        seconds (float): training wall time.
        curve (list): ``(frames, mean_return)`` rows of its log.
    """

    seed: int
    mmer: float
    final_eval: float
    frames: int
    seconds: float
    curve: list[tuple[int, float]]

    @classmethod
    def read(cls, folder: Path) -> Run:
        """The run logged in ``folder`` (its ``config.json`` and CSV scalars)."""
        config = json.loads((folder / "config.json").read_text())
        scalars = _run_folder.read_scalars(folder)
        curve = scalars["mean_return"]
        means = [v for _, v in curve if not math.isnan(v)]
        return cls(
            seed=config["seed"],
            mmer=max(means) if means else math.nan,
            final_eval=scalars["final_eval"][-1][1],
            frames=scalars["seconds"][-1][0],
            seconds=scalars["seconds"][-1][1],
            curve=curve,
        )


def is_finished(folder: Path) -> bool:
    """Whether ``folder`` holds a run that trained its whole budget and was evaluated."""
    checkpoint = _run_folder.latest_checkpoint(folder)
    if checkpoint is None:
        return False
    return bool(_run_folder.load_checkpoint(checkpoint)["counters"].get("evaluated", False))


def train_row(args: argparse.Namespace, env: str, difficulty: str, out: Path) -> list[Run]:
    """Every seed of one row: trained, resumed or read back; see the module docstring."""
    from torchrl_ext.examples import ppo_popgym

    runs = []
    for seed in args.seeds:
        folder = seed_folder(out, env, difficulty, seed)
        if not is_finished(folder):
            row_args = argparse.Namespace(**vars(args))
            row_args.env, row_args.difficulty, row_args.seeds = env, difficulty, [seed]
            row_args.out = folder.parent
            started = _run_folder.latest_checkpoint(folder) is not None
            row_args.resume = folder if started else None
            row_args.overrides = [] if started else args.overrides
            row_args.overwrite = not started
            row_args.pipeline = f"popgym/{env}-{difficulty}"
            ppo_popgym.main(row_args)
        runs.append(Run.read(folder))
    return runs


def _fmt(value: float | None, spec: str = ".3f") -> str:
    return "–" if value is None or math.isnan(value) else format(value, spec)


def meets(env: str, difficulty: str, runs: list[Run]) -> bool | None:
    """Whether our median MMER, to the paper's 3 decimals, is at least the paper's figure.

    The figure is :func:`~torchrl_ext.examples._popgym_paper.reference` (PPO-LSTM where
    given, else PPO-GRU); ``None`` where there is none.

    Examples:
        >>> runs = [Run(s, m, 1.0, 1, 1.0, []) for s, m in [(0, 0.99996), (1, 1.0), (2, 0.5)]]
        >>> meets("RepeatFirst", "easy", runs), meets("Battleship", "easy", runs)
        (True, None)
    """
    paper = reference(env, difficulty)
    if paper is None:
        return None
    return round(statistics.median(r.mmer for r in runs), 3) >= paper


def table_row(env: str, difficulty: str, runs: list[Run]) -> str:
    """One markdown row: the paper's figures, then ours over the seeds.

    Examples:
        >>> seeds = [(0, 0.91, 300.0), (1, 0.97, 280.0), (2, 0.95, 320.0)]
        >>> runs = [Run(seed, mmer, 1.0, 2_000_000, seconds, []) for seed, mmer, seconds in seeds]
        >>> table_row("RepeatFirst", "easy", runs)
        '| RepeatFirst | easy | 1.000 ± 0.000 | – | 0.950 (0.910–0.970) | no | 15M | 2.0M | 300 |'
    """
    gru = PAPER_PPO_GRU.get((env, difficulty))
    paper_gru = "–" if gru is None else f"{gru[0]:.3f} ± {gru[1]:.3f}"
    lstm = _fmt(PAPER_PPO_LSTM.get((env, difficulty)))
    mmers = [r.mmer for r in runs]
    ours = f"{statistics.median(mmers):.3f} ({min(mmers):.3f}–{max(mmers):.3f})"
    frames = statistics.median(r.frames for r in runs) / 1e6
    seconds = statistics.median(r.seconds for r in runs)
    verdict = {True: "yes", False: "no", None: "–"}[meets(env, difficulty, runs)]
    return (
        f"| {env} | {difficulty} | {paper_gru} | {lstm} | {ours} | {verdict} "
        f"| {PAPER_FRAMES / 1e6:.0f}M | {frames:.1f}M | {seconds:.0f} |"
    )


def markdown(rows: dict[tuple[str, str], list[Run]], plot: Path | None, command: str) -> str:
    """The results page: how it was made, the table, and the curves."""
    seeds = sorted({r.seed for runs in rows.values() for r in runs})
    lines = [
        "# Recurrent PPO on POPGym",
        "",
        f"Command: `{command}` ({platform.machine()} CPU, 1 torch thread per run). MMER: the "
        "highest mean return of the last 100 completed episodes over a run. Ours: median "
        f"(range) over seeds {', '.join(map(str, seeds))}. Paper: {SOURCE}.",
        "",
        "| env | difficulty | paper PPO-GRU | paper PPO-LSTM | ours (PPO-LSTM) | ours >= paper "
        "| paper frames | our frames | our seconds per run |",
        "|---|---|---|---|---|---|---|---|---|",
        *(table_row(env, difficulty, runs) for (env, difficulty), runs in rows.items()),
        "",
    ]
    verdicts = [meets(env, d, runs) for (env, d), runs in rows.items()]
    compared = [v for v in verdicts if v is not None]
    if compared:
        lines += [
            f"Ours (median over seeds) is at or above the paper's figure (PPO-LSTM where given, "
            f"else PPO-GRU) on {sum(compared)} of {len(compared)} envs.",
            "",
        ]
    if plot is not None:
        lines += [f"![Learning curves]({plot})", ""]
    return "\n".join(lines)


def plot_rows(path: Path, rows: dict[tuple[str, str], list[Run]]) -> Path | None:
    """Every run's mean-return curve, one panel per row, the paper's figure dashed.

    The figure is the one the table compares with (:func:`meets`). Returns ``path``, or ``None``
    without matplotlib.
    """
    plt = _common.pyplot()
    if plt is None:
        return None
    cols = min(4, len(rows))
    lines = math.ceil(len(rows) / cols)
    size = (max(3.2 * cols, 4.8), max(2.6 * lines, 3.2))  # one panel keeps room for the labels
    fig, axes = plt.subplots(lines, cols, figsize=size, squeeze=False)
    for ax, ((env, difficulty), runs) in zip(axes.flat, rows.items(), strict=False):
        for run in runs:
            millions = [c[0] / 1e6 for c in run.curve]
            ax.plot(millions, [c[1] for c in run.curve], label=f"seed {run.seed}")
        paper = reference(env, difficulty)
        if paper is not None:
            ax.axhline(paper, color="gray", linestyle="--", linewidth=1, label="paper")
        ax.set_title(f"{env} ({difficulty})", fontsize=9)
        ax.tick_params(labelsize=7)
    for ax in list(axes.flat)[len(rows) :]:
        ax.set_visible(False)
    axes.flat[0].legend(fontsize=6)
    fig.supxlabel("frames (millions)", fontsize=8)
    fig.supylabel("mean return (last 100 episodes)", fontsize=8)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def main(args: argparse.Namespace) -> str:
    """Runs ``python -m torchrl_ext.examples popgym-results`` (see ``--help``)."""
    if args.resume is not None:
        raise SystemExit(
            "popgym-results: --resume continues one run; rerun the table command instead: it "
            "resumes unfinished runs and reads finished ones."
        )
    _common.setup()
    out = table_folder(args)
    rows = {(env, d): train_row(args, env, d, out) for env, d in table_rows(args)}
    table = out / "popgym_results.md"
    plot = plot_rows(out / "popgym_curves.png", rows)
    command = "python -m torchrl_ext.examples popgym-results --seeds " + " ".join(
        map(str, args.seeds)
    )
    relative = None if plot is None else Path(os.path.relpath(plot, table.parent))
    text = markdown(rows, relative, command)
    table.write_text(text)
    print(text)
    print(f"table: {table}")
    return text
