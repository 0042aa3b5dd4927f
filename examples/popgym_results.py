"""The POPGym table: recurrent PPO on 8 memory tasks over seeds, beside the paper's figures.

    python examples/popgym_results.py [--seeds 0 1 2] [--envs NAME ...] [--difficulty easy]
        [--frames N] [--out DIR] [--quick]

For each env of ``ROWS`` and each seed it trains ``ppo_popgym.py`` at ``--difficulty`` (with
the env's tuned settings, ``ppo_popgym.TUNED``) into ``DIR/<env>-<difficulty>/seed<N>``, unless
that folder holds a
finished run: then the run is read back from its checkpoint and log, so the table can be written
again, or completed after an interruption (an unfinished run is resumed with its own config),
without training again. ``DIR`` is ``runs/popgym_results`` (``runs/quick/popgym_results`` with
``--quick``, which trains a few batches of two envs). It writes the markdown table to
``DIR/popgym_results.md`` and every run's learning curve to ``DIR/popgym_curves.png`` (at
Medium and Hard: ``popgym_results_medium.md``, ``popgym_curves_medium.png``, ...), so the tables
of all difficulties share one folder.

The table gives, per env: the paper's PPO-GRU and PPO-LSTM MMER (``ppo_popgym.PAPER_SOURCE``),
the memory our runs trained (the env's choice in ``ppo_popgym.TUNED``), ours as the median and
range over seeds, the frames each used and our wall time per run.
"""

from __future__ import annotations

import argparse
import math
import os
import platform
import statistics
import sys
from pathlib import Path

import ppo_popgym
import runs

#: The table's envs: those with a published figure at every difficulty.
ROWS = (
    "RepeatFirst",
    "RepeatPrevious",
    "Autoencode",
    "CountRecall",
    "HigherLower",
    "MultiarmedBandit",
    "PositionOnlyCartPole",
    "NoisyPositionOnlyCartPole",
)
#: The envs a ``--quick`` table trains.
QUICK_ROWS = ("RepeatPrevious", "MultiarmedBandit")


def make_parser() -> argparse.ArgumentParser:
    """The command line: seeds, envs, the budget of new runs and where the table goes."""
    parser = runs.Parser(
        description="\n\n".join(__doc__.split("\n\n")[:2]),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--seeds",
        type=int,
        nargs="+",
        default=[0, 1, 2],
        metavar="N",
        help="seeds of every env (default: 0 1 2)",
    )
    parser.add_argument(
        "--envs",
        nargs="+",
        choices=ROWS,
        default=list(ROWS),
        metavar="NAME",
        help=f"the rows to train or read back (default: all 8: {', '.join(ROWS)})",
    )
    parser.add_argument(
        "--difficulty",
        choices=ppo_popgym.DIFFICULTIES,
        default="easy",
        help="POPGym's difficulty preset of every row (default: easy)",
    )
    parser.add_argument(
        "--frames",
        type=int,
        default=None,
        metavar="N",
        help="frames of each new run (default: the env's budget, ppo_popgym's)",
    )
    parser.add_argument(
        "--out",
        type=Path,
        default=None,
        metavar="DIR",
        help="output folder (default: runs/popgym_results, runs/quick/popgym_results)",
    )
    parser.add_argument("--quick", action="store_true", help="a few checked batches of 2 envs")
    parser.add_argument("--device", default="cpu", help="torch device (cpu, cuda)")
    parser.add_argument(
        "--save-every",
        type=int,
        default=0,
        metavar="FRAMES",
        help="frames between checkpoints (0: at the end, and when stopped)",
    )
    parser.add_argument(
        "--progress",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="show a progress bar",
    )
    return parser


# ---------------------------------------------------------------------------- the runs
def seed_folder(out: Path, env: str, difficulty: str, seed: int) -> Path:
    """The run folder of ``env``'s ``seed`` at ``difficulty`` in the table's folder ``out``.

    Examples:
        >>> seed_folder(Path("runs"), "RepeatFirst", "easy", 2).as_posix()
        'runs/RepeatFirst-easy/seed2'
    """
    return out / f"{env}-{difficulty}" / f"seed{seed}"


def output_names(difficulty: str) -> tuple[str, str]:
    """The file names of the table and of the curves at ``difficulty``.

    Examples:
        >>> output_names("easy")
        ('popgym_results.md', 'popgym_curves.png')
        >>> output_names("medium")
        ('popgym_results_medium.md', 'popgym_curves_medium.png')
    """
    suffix = "" if difficulty == "easy" else f"_{difficulty}"
    return f"popgym_results{suffix}.md", f"popgym_curves{suffix}.png"


def is_finished(folder: Path) -> bool:
    """Whether ``folder`` holds a run that trained its whole budget and was evaluated."""
    if runs.latest_checkpoint(folder) is None:
        return False
    return bool(runs.load_checkpoint(runs.find_checkpoint(folder))["counters"].get("finished"))


def run_argv(args: argparse.Namespace, env: str, seed: int, folder: Path) -> list[str] | None:
    """``ppo_popgym.py``'s command line for one run of the table; None for a finished run.

    A run with a checkpoint is resumed; a run without one (stopped before its first
    checkpoint) is started again.
    """
    if is_finished(folder):
        return None
    options = ["--device", args.device, "--save-every", str(args.save_every)]
    options += [] if args.progress else ["--no-progress"]
    if runs.latest_checkpoint(folder) is not None:
        return ["--resume", str(folder), *options]
    argv = ["--env", env, "--difficulty", args.difficulty, "--seeds", str(seed)]
    argv += ["--out", str(folder.parent), *options]
    argv += ["--quick"] * args.quick + ["--overwrite"] * runs.holds_run(folder)
    return argv + ([] if args.frames is None else ["--frames", str(args.frames)])


def check_row_folder(
    parser: argparse.ArgumentParser, folder: Path, env: str, difficulty: str, seed: int
) -> None:
    """Refuses, in one line, a run folder holding a run that is not this row's seed."""
    if not runs.holds_run(folder):
        return
    try:
        runs.check_folder(folder)
        saved = runs.read_config(folder)
    except ValueError as error:
        parser.error(str(error))
    config = saved["config"]
    found = (saved.get("pipeline"), config.get("env"), config.get("difficulty"), config.get("seed"))
    if found != ("ppo_popgym", env, difficulty, seed):
        parser.error(f"{folder} holds a run of {found}, not ppo_popgym {env} {difficulty} {seed}")


def plan(parser: argparse.ArgumentParser, args: argparse.Namespace, out: Path) -> dict:
    """Every row's seeds, each with its folder and command line (None: finished), checked.

    Every command line goes through ``runs.parse`` before the first run trains, so a bad value
    is one line and exit 2 with nothing trained.
    """
    if len(set(args.seeds)) != len(args.seeds) or min(args.seeds) < 0:
        parser.error(f"--seeds must be distinct integers >= 0, got {args.seeds}")
    envs = [env for env in (QUICK_ROWS if args.quick else ROWS) if env in args.envs]
    if not envs:
        parser.error(f"--envs: --quick trains {' and '.join(QUICK_ROWS)}; pass one of them")
    rows = {}
    for env in envs:
        rows[env] = {}
        for seed in args.seeds:
            folder = seed_folder(out, env, args.difficulty, seed)
            check_row_folder(parser, folder, env, args.difficulty, seed)
            try:
                argv = run_argv(args, env, seed, folder)
            except ValueError as error:  # a damaged checkpoint
                parser.error(str(error))
            if argv is not None:
                runs.parse(ppo_popgym.Args, argv, ppo_popgym.QUICK)
            rows[env][seed] = (folder, argv)
    return rows


def read_run(folder: Path) -> runs.Result:
    """The finished run in ``folder``, from its checkpoint's counters and its CSV log."""
    state = runs.load_checkpoint(runs.find_checkpoint(folder))
    args, counters = ppo_popgym.Args(**state["config"]), state["counters"]
    hit = counters.get("hit")
    return runs.Result(
        "ppo_popgym",
        f"{args.env} {args.difficulty} seed {args.seed}",
        folder,
        counters["frames"],
        counters["seconds"],
        [tuple(point) for point in counters["curve"]],
        runs.read_scalars(folder)["final_eval"][-1][1],
        args.target,
        None if hit is None else tuple(hit),
    )


def train_rows(rows: dict) -> dict[str, dict[int, runs.Result]]:
    """Trains or resumes what each row lacks, then reads every run back from its folder."""
    pipeline = (ppo_popgym.Args, ppo_popgym.train)
    for seeds in rows.values():
        for _, argv in seeds.values():
            if argv is not None:
                runs.main(*pipeline, argv=argv, quick=ppo_popgym.QUICK)
    return {env: {s: read_run(f) for s, (f, _) in seeds.items()} for env, seeds in rows.items()}


# ---------------------------------------------------------------------------- the table
def _fmt(value: float | None) -> str:
    """``value`` to 3 decimals, or a dash for none."""
    return "–" if value is None or math.isnan(value) else f"{value:.3f}"


def meets(env: str, difficulty: str, results: dict[int, runs.Result]) -> bool | None:
    """Whether our median MMER, to the paper's 3 decimals, is at least the paper's figure.

    The figure is ``ppo_popgym.paper_figure`` (PPO-LSTM where given, else PPO-GRU); None where
    there is none.
    """
    paper = ppo_popgym.paper_figure(env, difficulty)
    if paper is None:
        return None
    return round(statistics.median(r.best for r in results.values()), 3) >= paper


def memory_label(results: dict[int, runs.Result]) -> str:
    """The memory and size (its outputs) that the runs of a row trained, as in their configs.

    The env's choice in ``ppo_popgym.TUNED``, unless the runs named their own.

    Examples:
        >>> memory_label({})
        '–'
    """
    names = {"lstm": "LSTM", "gru": "GRU", "ffm": "FFM", "none": "none"}
    configs = [runs.read_config(r.out)["config"] for r in results.values()]
    found = sorted({(c["memory"], c["hidden"]) for c in configs})
    return ", ".join(f"{names.get(memory, memory)} {hidden}" for memory, hidden in found) or "–"


def table_row(env: str, difficulty: str, results: dict[int, runs.Result]) -> str:
    """One markdown row: the paper's figures, then our memory and ours over the seeds."""
    gru = ppo_popgym.PAPER_PPO_GRU.get((env, difficulty))
    paper_gru = "–" if gru is None else f"{gru[0]:.3f} ± {gru[1]:.3f}"
    lstm = _fmt(ppo_popgym.PAPER_PPO_LSTM.get((env, difficulty)))
    mmers = [r.best for r in results.values()]
    ours = f"{statistics.median(mmers):.3f} ({min(mmers):.3f}–{max(mmers):.3f})"
    frames = statistics.median(r.frames for r in results.values()) / 1e6
    seconds = statistics.median(r.seconds for r in results.values())
    verdict = {True: "yes", False: "no", None: "–"}[meets(env, difficulty, results)]
    return (
        f"| {env} | {difficulty} | {paper_gru} | {lstm} | {memory_label(results)} | {ours} "
        f"| {verdict} "
        f"| {ppo_popgym.PAPER_FRAMES / 1e6:.0f}M | {frames:.1f}M | {seconds:.0f} |"
    )


def markdown(
    rows: dict[str, dict[int, runs.Result]], difficulty: str, plot: Path | None, command: str
) -> str:
    """The results page: how it was made, the table, and the curves."""
    seeds = sorted({seed for results in rows.values() for seed in results})
    lines = [
        "# Recurrent PPO on POPGym",
        "",
        f"Command: `{command}` ({platform.machine()} CPU, 1 torch thread per run). MMER: the "
        "highest mean return of the last 100 completed episodes over a run. Ours: median "
        f"(range) over seeds {', '.join(map(str, seeds))}. Paper: {ppo_popgym.PAPER_SOURCE}.",
        "",
        runs.code_summary(r.out for results in rows.values() for r in results.values()),
        "",
        "| env | difficulty | paper PPO-GRU | paper PPO-LSTM | our memory | ours | ours >= paper "
        "| paper frames | our frames | our seconds per run |",
        "|---|---|---|---|---|---|---|---|---|---|",
        *(table_row(env, difficulty, results) for env, results in rows.items()),
        "",
    ]
    compared = [v for v in (meets(env, difficulty, r) for env, r in rows.items()) if v is not None]
    if compared:
        lines += [
            f"Ours (median over seeds) is at or above the paper's figure (PPO-LSTM where given, "
            f"else PPO-GRU) on {sum(compared)} of {len(compared)} envs.",
            "",
        ]
    if plot is not None:
        lines += [f"![Learning curves]({plot})", ""]
    return "\n".join(lines)


def plot_rows(path: Path, rows: dict[str, dict[int, runs.Result]], difficulty: str) -> Path | None:
    """Every run's mean-return curve, one panel per env, the paper's figure dashed.

    Returns ``path``, or None (and a line on stderr) without matplotlib.
    """
    try:
        import matplotlib
    except ImportError:
        print("no plot: it needs matplotlib (pip install matplotlib)", file=sys.stderr)
        return None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    cols = min(4, len(rows))
    lines = math.ceil(len(rows) / cols)
    size = (max(3.2 * cols, 4.8), max(2.6 * lines, 3.2))  # one panel keeps room for the labels
    fig, axes = plt.subplots(lines, cols, figsize=size, squeeze=False)
    for ax, (env, results) in zip(axes.flat, rows.items(), strict=False):
        for seed, result in results.items():
            millions = [frames / 1e6 for frames, _ in result.curve]
            ax.plot(millions, [value for _, value in result.curve], label=f"seed {seed}")
        paper = ppo_popgym.paper_figure(env, difficulty)
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


def main(argv: list[str] | None = None) -> str:
    """Trains what the table's folder lacks, writes the table and the curves; returns the table."""
    parser = make_parser()
    args = parser.parse_args(argv)
    out = args.out or Path("runs") / ("quick" if args.quick else "") / "popgym_results"
    rows = train_rows(plan(parser, args, out))
    table_name, plot_name = output_names(args.difficulty)
    table = out / table_name
    plot = plot_rows(out / plot_name, rows, args.difficulty)
    given = argv if argv is not None else sys.argv[1:]
    command = " ".join(["python examples/popgym_results.py", *given])
    link = None if plot is None else Path(os.path.relpath(plot, table.parent))
    text = markdown(rows, args.difficulty, link, command)
    table.write_text(text)
    print(text)
    print(f"table: {table}")
    return text


if __name__ == "__main__":
    main()
