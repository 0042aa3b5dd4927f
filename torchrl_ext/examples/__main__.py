"""``python -m torchrl_ext.examples {ppo,r2d2,course,results,popgym,popgym-results,...} [options]``.

Only the chosen pipeline is imported, so ``--help`` answers at once; it is imported once every
new run's config is made (``_command_configs``), so a hyperparameter or ``--frames`` that the
pipeline would refuse is one argparse line (exit 2) at once too. ``--quick`` without a
subcommand runs every pipeline's quick check (a few batches with shape, mask and finiteness
assertions).
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib
import importlib.util
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

PROG = "python -m torchrl_ext.examples"


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


def _add_run_options(parser: argparse.ArgumentParser, name: str, command: Command) -> None:
    """The options every training subcommand shares, with ``command``'s defaults."""
    runs = command.runs or name
    parser.add_argument(
        "--seeds",
        type=_count(0),
        nargs="+",
        default=list(command.seeds),
        metavar="N",
        help="seeds to train, one after the other (one run folder each)",
    )
    parser.add_argument(
        "--frames",
        type=_count(1),
        default=None,
        metavar="N",
        help=f"frames to collect per seed (default: {command.frames:,}{command.frames_note}; "
        "--quick: a few batches); with --resume, a larger budget continues a finished run",
    )
    parser.add_argument(
        "--device", default="cpu", help="torch device of envs, networks and losses (cpu, cuda)"
    )
    parser.add_argument(
        "--out",
        type=Path,
        default=None,
        help=f"output folder (default: runs/{runs}; --quick: runs/quick/{runs})",
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
        help=f"continue the run saved in DIR (a seed's folder, e.g. runs/{runs}/seed0)",
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
        "(an unknown key lists them); written to <run>/config.json",
    )
    parser.add_argument(
        "--progress",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="show a progress bar",
    )


# ---------------------------------------------------------------------------- each command's own
def _memory_choice(flag: str, what: str) -> Callable[[argparse.ArgumentParser], None]:
    """Adds ``flag``: whether ``what`` is recurrent (``lstm``) or feed-forward (``mlp``)."""

    def add(parser: argparse.ArgumentParser) -> None:
        help = f"recurrent or feed-forward {what}"
        parser.add_argument(flag, choices=["lstm", "mlp"], default="lstm", help=help)

    return add


def _r2d2_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--distributed",
        action="store_true",
        help="Ape-X layout on Ray: actor workers, a replay service, this process learns "
        "(output: runs/r2d2_distributed)",
    )
    parser.add_argument(
        "--workers",
        type=int,
        default=None,
        metavar="N",
        help="with --distributed: Ray actor workers, one CPU each (default: 2, or 1 on a "
        "single CPU)",
    )
    parser.add_argument(
        "--address",
        default=None,
        metavar="ADDR",
        help="with --distributed: join this Ray cluster (HOST:PORT, ray://HOST:PORT or "
        "auto) instead of starting a local Ray (default: local)",
    )


def _results_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--mlp-seeds",
        type=int,
        nargs="*",
        default=[0],
        metavar="N",
        help="seeds of the feed-forward baseline",
    )
    parser.add_argument(
        "--table",
        type=Path,
        default=None,
        metavar="PATH",
        help="markdown table file (default: <out>/results.md)",
    )


def _popgym_options(parser: argparse.ArgumentParser) -> None:
    from torchrl_ext.examples._popgym_paper import DIFFICULTIES, ENVS

    parser.add_argument(
        "--env", choices=ENVS, default="RepeatPrevious", metavar="NAME", help=", ".join(ENVS)
    )
    parser.add_argument("--difficulty", choices=DIFFICULTIES, default="easy")
    parser.add_argument(
        "--algo",
        choices=["ppo", "r2d2"],
        default="ppo",
        help="the learner: recurrent PPO (separate actor and critic LSTMs), or R2D2 (an LSTM "
        "Q-network; envs with a single discrete action)",
    )


def _popgym_results_options(parser: argparse.ArgumentParser) -> None:
    from torchrl_ext.examples._popgym_paper import ENVS

    parser.add_argument(
        "--envs",
        nargs="+",
        choices=ENVS,
        default=list(ENVS),
        metavar="NAME",
        help="the table's rows to train or read (default: all 8)",
    )


def _animate_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("run", type=Path, help="run folder with a checkpoint, e.g. runs/ppo/seed0")
    parser.add_argument("--gif", type=Path, help="output file (default: RUN/agent.gif)")
    parser.add_argument("--frames", type=int, default=64, help="pictures in the animation")
    parser.add_argument("--stride", type=int, default=4, help="env steps between pictures")
    parser.add_argument("--size", type=int, default=160, help="picture height and width in pixels")
    parser.add_argument("--fps", type=int, default=20, help="pictures per second of the GIF")
    parser.add_argument("--device", default="cpu", help="torch device of the env and the policy")


def _no_options(parser: argparse.ArgumentParser) -> None:
    pass


@dataclasses.dataclass(frozen=True)
class Command:
    """A subcommand: the module that runs it, what it does, its own options, its run defaults.

    Args:
        module (str): the module of :mod:`torchrl_ext.examples` whose ``main(args)`` runs it.
        description (str): one line for ``--help``.
        options (callable, optional): adds the command's own options to its parser. Defaults to
            none.
        frames (int or None, optional): default ``--frames`` of a training command (which takes
            the shared run options), ``None`` for one that does not train. Defaults to ``None``.
        seeds (tuple of int, optional): default ``--seeds``. Defaults to ``(0,)``.
        needs (tuple of str, optional): optional modules the command cannot run without (each
            named in :data:`EXTRAS`). Defaults to none.
        runs (str, optional): the folder under ``runs/`` that ``--help`` names for its runs.
            Defaults to the command's name.
        frames_note (str, optional): ``--help``'s words on a config's own ``--frames``.
            Defaults to none.
    """

    module: str
    description: str
    options: Callable[[argparse.ArgumentParser], None] = _no_options
    frames: int | None = None
    seeds: tuple[int, ...] = (0,)
    needs: tuple[str, ...] = ()
    runs: str | None = None
    frames_note: str = ""


POPGYM_FRAMES_NOTE = ", 14,680,064 for MultiarmedBandit's PPO"  # _popgym_configs.PAPER_BUDGET

#: Every subcommand, in the order ``--help`` lists them.
COMMANDS = {
    "ppo": Command(
        "ppo_cartpole",
        "recurrent PPO (separate actor and critic LSTMs) on CartPole without velocities",
        _memory_choice("--policy", "actor and critic"),
        frames=61_440,
    ),
    "r2d2": Command(
        "r2d2_cartpole",
        "R2D2 (LSTM Q-network, sequence replay, R2D2Loss) on CartPole without velocities",
        _r2d2_options,
        frames=400_000,
    ),
    "course": Command(
        "ppo_course",
        "feed-forward PPO driving procedurally generated courses (CourseEnv)",
        frames=491_520,
    ),
    "results": Command(
        "results",
        "the main demo: recurrent PPO on 3 seeds and a feed-forward baseline, results table",
        _results_options,
        frames=61_440,
        seeds=(0, 1, 2),
    ),
    "popgym": Command(
        "ppo_popgym",
        "recurrent PPO or R2D2 on a POPGym memory task (the Warp ports of torchrl_ext.envs.popgym)",
        _popgym_options,
        frames=2_097_152,
        frames_note=POPGYM_FRAMES_NOTE,
        runs="popgym/<ENV>-<DIFFICULTY>[-r2d2]",
    ),
    "popgym-results": Command(
        "popgym_results",
        "the POPGym table: recurrent PPO on 8 Easy memory tasks over seeds, beside the "
        "paper's figures (trains what its folder lacks)",
        _popgym_results_options,
        frames=2_097_152,
        frames_note=POPGYM_FRAMES_NOTE,
        seeds=(0, 1, 2),
        runs="popgym_results",
    ),
    "animate": Command(
        "animate",
        "animated GIF of the agent saved in a ppo or course run folder",
        _animate_options,
        needs=("PIL",),
    ),
    "signalling": Command(
        "mappo_signalling",
        "recurrent multi-agent PPO on the speaker-listener game (SignallingEnv)",
        _memory_choice("--listener", "listener (a feed-forward one stays at chance)"),
        frames=1_000_000,
    ),
}


def make_parser() -> argparse.ArgumentParser:
    """The command line: one subcommand per entry of :data:`COMMANDS`."""
    parser = argparse.ArgumentParser(
        prog=PROG, description=__doc__.splitlines()[0], formatter_class=_Formatter
    )
    parser.add_argument(
        "--quick",
        action="store_true",
        dest="quick_all",
        help="without a subcommand: run every pipeline's --quick check",
    )
    sub = parser.add_subparsers(dest="command", metavar="{" + ",".join(COMMANDS) + "}")
    for name, command in COMMANDS.items():
        p = sub.add_parser(
            name,
            help=command.description,
            description=command.description,
            formatter_class=_Formatter,
        )
        if command.frames is not None:
            _add_run_options(p, name, command)
        command.options(p)
    return parser


def pipeline(args: argparse.Namespace) -> str:
    """The name of the parsed command's runs under ``runs/`` (a variant has its own)."""
    if getattr(args, "distributed", False):
        return "r2d2_distributed"
    if args.command == "popgym":
        algo = "" if args.algo == "ppo" else f"-{args.algo}"
        return f"popgym/{args.env}-{args.difficulty}{algo}"
    if args.command == "popgym-results":
        return "popgym_results"
    if "mlp" in (getattr(args, "policy", None), getattr(args, "listener", None)):
        return f"{args.command}_mlp"
    return args.command


def run(name: str, argv: list[str]) -> object:
    """Parses ``argv`` for the subcommand ``name`` and runs its pipeline."""
    return main([name, *argv])


#: The pipelines ``--quick`` runs: label, subcommand, extra options.
QUICK_RUNS = (
    ("ppo", "ppo", []),
    ("r2d2", "r2d2", []),
    ("r2d2 --distributed", "r2d2", ["--distributed"]),
    ("course", "course", []),
    ("signalling", "signalling", []),
    ("popgym", "popgym", []),
    ("popgym --algo r2d2", "popgym", ["--algo", "r2d2"]),
    ("popgym-results", "popgym-results", []),
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
    parser = make_parser()
    args = parser.parse_args(sys.argv[1:] if argv is None else list(argv))
    if args.command is None:
        if args.quick_all:
            return run_quick()
        parser.print_help()
        raise SystemExit(2)
    command = COMMANDS[args.command]
    if args.quick_all and command.frames is not None:
        args.quick = True  # `--quick ppo` means `ppo --quick`
    module = command.module
    if args.command == "r2d2":
        options = {"--workers": args.workers, "--address": args.address}
        given = [f"{k} {v}" for k, v in options.items() if v is not None]
        if given and not args.distributed:
            parser.error(f"r2d2: {', '.join(given)} needs --distributed")
        if args.distributed:
            module = "r2d2_distributed"
    if args.command == "popgym" and args.algo == "r2d2":
        module = "r2d2_popgym"
    if command.frames is not None:
        args.pipeline = pipeline(args)
    _check_run_args(parser, args)
    pipeline_module = importlib.import_module(f"torchrl_ext.examples.{module}")
    try:
        return pipeline_module.main(args)
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
    command = COMMANDS[args.command]
    for module in command.needs:
        _needs(parser, args.command, module)
    if command.frames is None:
        return
    if args.command == "popgym" and args.algo == "r2d2":
        from torchrl_ext.examples._popgym_paper import SINGLE_DISCRETE

        if args.env not in SINGLE_DISCRETE:
            parser.error(
                f"--env {args.env}: its action is not a single discrete choice, which R2D2's "
                "Q-network scores; use --algo ppo"
            )
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
    if args.command not in ("results", "popgym-results"):  # their folders: as each run starts
        for _, run in folders.runs_of(args, args.pipeline):
            try:
                folders.check_new_run(run.out, run.overwrite)
            except ValueError as error:
                parser.error(str(error))
    from torchrl_ext.examples._command_configs import new_runs

    for runs in new_runs(args):  # each new run's config, made as the pipeline will make it
        try:
            runs.configs(args)
        except (TypeError, ValueError) as error:  # a hyperparameter the config refuses
            parser.error(f"{runs.pipeline}: {error}")


if __name__ == "__main__":
    main()
