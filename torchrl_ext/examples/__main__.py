"""``python -m torchrl_ext.examples {ppo,r2d2,course,results,animate,signalling} [options]``.

Only the chosen pipeline is imported, so ``--help`` answers at once. ``--quick`` without a
subcommand runs every pipeline's quick check (a few batches with shape, mask and finiteness
assertions).
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

PROG = "python -m torchrl_ext.examples"

#: subcommand: (module, one-line description, default --frames, default --seeds)
PIPELINES = {
    "ppo": (
        "ppo_cartpole",
        "recurrent PPO (separate actor and critic LSTMs) on CartPole without velocities",
        61_440,
        [0],
    ),
    "r2d2": (
        "r2d2_cartpole",
        "R2D2 (LSTM Q-network, sequence replay, R2D2Loss) on CartPole without velocities",
        400_000,
        [0],
    ),
    "course": (
        "ppo_course",
        "feed-forward PPO driving procedurally generated courses (CourseEnv)",
        491_520,
        [0],
    ),
    "results": (
        "results",
        "the main demo: recurrent PPO on 3 seeds and a feed-forward baseline, results table",
        61_440,
        [0, 1, 2],
    ),
}


def _count(minimum: int) -> Callable[[str], int]:
    """An argparse type: an int of at least ``minimum``."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"must be at least {minimum}, got {value}")
        return value

    parse.__name__ = "int"  # argparse names the type in its messages
    return parse


def _pair(text: str) -> str:
    """An argparse type: a ``KEY=VALUE`` hyperparameter override."""
    if "=" not in text or text.startswith("="):
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got {text!r}")
    return text


class _Formatter(argparse.ArgumentDefaultsHelpFormatter, argparse.RawDescriptionHelpFormatter):
    """Shows defaults (unless the help states its own) and keeps the description's lines."""

    def _get_help_string(self, action: argparse.Action) -> str:
        if "(default:" in (action.help or ""):
            return action.help
        return super()._get_help_string(action)


def _add_common(parser: argparse.ArgumentParser, name: str) -> None:
    _, _, frames, seeds = PIPELINES[name]
    parser.add_argument(
        "--seeds",
        type=_count(0),
        nargs="+",
        default=seeds,
        metavar="N",
        help="seeds to train, one after the other (one run folder each)",
    )
    parser.add_argument(
        "--frames",
        type=_count(1),
        default=None,
        metavar="N",
        help=f"frames to collect per seed (default: {frames:,}; --quick: a few batches); with "
        "--resume, a larger budget continues a finished run",
    )
    parser.add_argument(
        "--device", default="cpu", help="torch device of envs, networks and losses (cpu, cuda)"
    )
    parser.add_argument(
        "--out",
        type=Path,
        default=None,
        help=f"output folder (default: runs/{name}; --quick: runs/quick/{name})",
    )
    parser.add_argument(
        "--logger",
        choices=["csv", "tensorboard", "wandb"],
        default="csv",
        help="torchrl.record.loggers backend the scalars go to",
    )
    parser.add_argument(
        "--save-every",
        type=_count(0),
        default=0,
        metavar="FRAMES",
        help="frames between checkpoints (0: only at the end of the run, or when stopped by "
        "Ctrl-C or SIGTERM)",
    )
    parser.add_argument(
        "--resume",
        type=Path,
        default=None,
        metavar="DIR",
        help="continue the run saved in DIR (a seed's folder, e.g. runs/ppo/seed0)",
    )
    parser.add_argument(
        "--overwrite",
        action="store_true",
        help="replace a run already in a run folder (without it, a new run into a folder "
        "that holds one is refused; --quick without --out always replaces its own)",
    )
    parser.add_argument(
        "--quick",
        action="store_true",
        help="a few batches with shape, mask and finiteness checks",
    )
    parser.add_argument(
        "overrides",
        nargs="*",
        type=_pair,
        metavar="KEY=VALUE",
        help="hyperparameters: any field of the pipeline's Config, e.g. lr=3e-4 num_envs=32 "
        "obs_scale=2,20 (an unknown key lists them); written to <run>/config.json",
    )
    parser.add_argument(
        "--progress",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="show a progress bar",
    )


def make_parser() -> argparse.ArgumentParser:
    """The command line: one subcommand per pipeline, each with the same run options."""
    parser = argparse.ArgumentParser(prog=PROG, description=__doc__.splitlines()[0],
                                     formatter_class=_Formatter)  # fmt: skip
    parser.add_argument(
        "--quick",
        action="store_true",
        dest="quick_all",
        help="without a subcommand: run every pipeline's --quick check",
    )
    sub = parser.add_subparsers(
        dest="command", metavar="{ppo,r2d2,course,results,animate,signalling}"
    )
    for name, (_, description, _, _) in PIPELINES.items():
        p = sub.add_parser(name, help=description, description=description,
                           formatter_class=_Formatter)  # fmt: skip
        _add_common(p, name)
        if name == "ppo":
            p.add_argument("--policy", choices=["lstm", "mlp"], default="lstm",
                           help="recurrent or feed-forward actor and critic")  # fmt: skip
        if name == "r2d2":
            _add_distributed(p)
        if name == "results":
            p.add_argument("--mlp-seeds", type=int, nargs="*", default=[0], metavar="N",
                           help="seeds of the feed-forward baseline")  # fmt: skip
            p.add_argument("--table", type=Path, default=None, metavar="PATH",
                           help="markdown table file (default: <out>/results.md)")  # fmt: skip
    _add_animate(sub)
    _add_signalling(sub)
    return parser


#: ``r2d2`` options of the Ape-X layout on Ray (``r2d2_distributed``).
DISTRIBUTED_OPTIONS = {
    "--distributed": {
        "action": "store_true",
        "help": "Ape-X layout on Ray: actor workers, a replay service, this process learns "
        "(output: runs/r2d2_distributed)",
    },
    "--workers": {
        "type": int, "default": None, "metavar": "N",
        "help": "with --distributed: Ray actor workers, one CPU each (default: 2, or 1 on a "
        "single CPU)",
    },
    "--address": {
        "default": None, "metavar": "ADDR",
        "help": "with --distributed: join this Ray cluster (HOST:PORT, ray://HOST:PORT or "
        "auto) instead of starting a local Ray (default: local)",
    },
}  # fmt: skip


def _add_distributed(p: argparse.ArgumentParser) -> None:
    for flag, options in DISTRIBUTED_OPTIONS.items():
        p.add_argument(flag, **options)


SIGNALLING = "recurrent multi-agent PPO on the speaker-listener game (SignallingEnv)"


def _add_signalling(sub: argparse._SubParsersAction) -> None:
    # its options live in its module, parsed there (so --help here imports nothing)
    sub.add_parser("signalling", help=SIGNALLING, add_help=False)


def _run_signalling(rest: list[str]) -> object:
    module = importlib.import_module("torchrl_ext.examples.mappo_signalling")
    parser = argparse.ArgumentParser(prog=f"{PROG} signalling", description=SIGNALLING,
                                     formatter_class=_Formatter)  # fmt: skip
    return module.run(module.build_parser(parser).parse_args(rest))


def _add_animate(sub: argparse._SubParsersAction) -> None:
    description = "animated GIF of the agent saved in a ppo or course run folder"
    p = sub.add_parser("animate", help=description, description=description,
                       formatter_class=_Formatter)  # fmt: skip
    p.add_argument("run", type=Path, help="run folder with a checkpoint, e.g. runs/ppo/seed0")
    p.add_argument("--gif", type=Path, default=None, help="output file (default: RUN/agent.gif)")
    p.add_argument("--frames", type=int, default=64, help="pictures in the animation")
    p.add_argument("--stride", type=int, default=4, help="env steps between pictures")
    p.add_argument("--size", type=int, default=160, help="picture height and width in pixels")
    p.add_argument("--fps", type=int, default=20, help="pictures per second of the GIF")
    p.add_argument("--device", default="cpu", help="torch device of the env and the policy")


def run(name: str, argv: list[str]) -> object:
    """Parses ``argv`` for the subcommand ``name`` and runs its pipeline."""
    return main([name, *argv])


#: The pipelines ``--quick`` runs: label, subcommand, extra options.
QUICK_RUNS = (
    ("ppo", "ppo", []),
    ("r2d2", "r2d2", []),
    ("r2d2 --distributed", "r2d2", ["--distributed"]),
    ("course", "course", []),
)


def run_quick() -> dict[str, float]:
    """Runs every training pipeline's ``--quick`` mode; returns seconds per pipeline.

    ``r2d2 --distributed`` is left out, with a line saying so, when Ray is not installed.
    """
    seconds = {}
    for label, name, options in QUICK_RUNS:
        if options == ["--distributed"] and importlib.util.find_spec("ray") is None:
            print(f"=== {label} --quick: skipped, needs ray (pip install 'torchrl_ext[ray]')")
            continue
        print(f"=== {label} --quick", flush=True)
        start = time.perf_counter()
        run(name, [*options, "--quick", "--no-progress"])
        seconds[label] = time.perf_counter() - start
    for name, value in seconds.items():
        print(f"quick run ok: {name} ({value:.1f} s)")
    return seconds


def main(argv: list[str] | None = None) -> object:
    """Dispatches to the chosen pipeline (see ``--help``)."""
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:1] == ["signalling"]:
        return _run_signalling(argv[1:])
    parser = make_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        if args.quick_all:
            return run_quick()
        parser.print_help()
        raise SystemExit(2)
    if args.quick_all and args.command != "animate":
        args.quick = True  # `--quick ppo` means `ppo --quick`
    name = "animate" if args.command == "animate" else PIPELINES[args.command][0]
    if args.command == "r2d2":
        given = [f"--{k} {v}" for k, v in (("workers", args.workers), ("address", args.address))
                 if v is not None]  # fmt: skip
        if given and not args.distributed:
            parser.error(f"r2d2: {', '.join(given)} needs --distributed")
        if args.distributed:
            name = "r2d2_distributed"
    _check_run_args(parser, args)
    module = importlib.import_module(f"torchrl_ext.examples.{name}")
    try:
        return module.main(args)
    except KeyboardInterrupt:  # a second Ctrl-C, or one outside a training loop
        print(f"{args.command}: interrupted", file=sys.stderr)
        raise SystemExit(130) from None
    except _run_folder().RunInterrupted as stop:
        print(
            f"{args.command}: stopped by {stop}; checkpoint saved; resume with: {PROG} "
            f"{args.command} --resume {stop.out}",
            file=sys.stderr,
        )
        raise SystemExit(128 + stop.signum) from None


#: The package extra that installs what each optional module needs.
EXTRAS = {"tensorboard": "tensorboard", "wandb": "wandb", "ray": "ray", "PIL": "examples"}


def _needs(parser: argparse.ArgumentParser, what: str, module: str) -> None:
    """Stops with one line if ``module`` is not installed, naming the extra to install."""
    if importlib.util.find_spec(module) is None:
        parser.error(f"{what} needs {module}: pip install 'torchrl_ext[{EXTRAS[module]}]'")


def _run_folder() -> Any:
    """:mod:`torchrl_ext.examples._run_folder` (imported on use: it is light, torch-free)."""
    return importlib.import_module("torchrl_ext.examples._run_folder")


def _check_run_args(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """Checks what can be checked before a pipeline is imported; one line and exit 2 if not."""
    if args.command == "animate":
        _needs(parser, "animate", "PIL")
        return
    if args.logger in ("tensorboard", "wandb"):
        _needs(parser, f"--logger {args.logger}", args.logger)
    if getattr(args, "distributed", False):
        _needs(parser, "--distributed", "ray")
    folders = _run_folder()
    if args.resume is not None:
        if args.overrides:
            parser.error(
                f"{args.overrides[0]}: a resumed run keeps its config (--frames extends it)"
            )
        if args.overwrite:
            parser.error("--overwrite: a resumed run continues its folder; drop one of the two")
        if folders.latest_checkpoint(args.resume) is None:
            parser.error(
                f"--resume {args.resume}: no checkpoint there; pass a run folder "
                "that holds one (e.g. runs/ppo/seed0)"
            )
        return
    if args.command == "results":
        return  # its folders are checked as each of its runs starts
    pipeline = "r2d2_distributed" if getattr(args, "distributed", False) else args.command
    if args.command == "ppo" and args.policy == "mlp":
        pipeline = "ppo_mlp"
    for _, run in folders.runs_of(args, pipeline):
        try:
            folders.check_new_run(run.out, run.overwrite)
        except ValueError as error:
            parser.error(str(error))


if __name__ == "__main__":
    main()
