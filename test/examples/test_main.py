"""The entry point ``python -m torchrl_ext.examples``: fast help, shared option names, defaults."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from torchrl_ext.examples import __main__ as entry

ROOT = Path(__file__).resolve().parents[2]
COMMON = ("--seeds", "--frames", "--device", "--out", "--logger", "--save-every", "--resume",
          "--quick")  # fmt: skip


def _cli(*args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    return subprocess.run(
        [sys.executable, "-m", "torchrl_ext.examples", *args],
        capture_output=True, text=True, env=env, timeout=120, check=False,
    )  # fmt: skip


class TestHelp:
    """``--help`` imports no pipeline, torch or torchrl (so it answers at once), names the
    program as users type it, and lists every subcommand and option with its default."""

    def test_top_level_help(self):
        done = _cli("--help")
        assert done.returncode == 0, done.stderr
        assert done.stdout.startswith("usage: python -m torchrl_ext.examples")
        assert "__main__" not in done.stdout
        for name in ("ppo", "r2d2", "course", "results", "signalling", "--quick"):
            assert name in done.stdout

    @pytest.mark.parametrize("name", ["ppo", "r2d2", "course", "results", "signalling"])
    def test_subcommand_help(self, name):
        done = _cli(name, "--help")
        assert done.returncode == 0, done.stderr
        assert done.stdout.startswith(f"usage: python -m torchrl_ext.examples {name}")
        for option in COMMON:
            assert option in done.stdout, option
        assert done.stdout.count("(default:") >= len(COMMON)

    def test_signalling_has_its_own_option(self):
        done = _cli("signalling", "--help")
        assert done.returncode == 0, done.stderr
        assert "--listener {lstm,mlp}" in done.stdout and "KEY=VALUE" in done.stdout

    def test_help_imports_no_pipeline(self):
        code = (
            "import sys\nfrom torchrl_ext.examples import __main__ as m\n"
            "m.make_parser().format_help()\n"
            "print(sorted(k for k in sys.modules if k.split('.')[0] in "
            "('torch', 'torchrl', 'tensordict', 'warp') or 'examples.' in k))"
        )
        env = dict(os.environ, PYTHONPATH=str(ROOT))
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                             env=env, check=True, timeout=60).stdout  # fmt: skip
        # the POPGym env names come from a torch-free module
        expected = ["torchrl_ext.examples.__main__", "torchrl_ext.examples._popgym_paper"]
        assert out.strip() == repr(expected)

    def test_no_subcommand_prints_help_and_fails(self, capsys):
        with pytest.raises(SystemExit) as exit_info:
            entry.main([])
        assert exit_info.value.code == 2
        assert "usage: python -m torchrl_ext.examples" in capsys.readouterr().out


class TestOptions:
    """Every subcommand takes the same run options with the same defaults; outputs default to
    ``runs/<pipeline>/seed<N>``."""

    @pytest.mark.parametrize("name", ["ppo", "r2d2", "course", "results", "signalling"])
    def test_same_defaults(self, name):
        args = entry.make_parser().parse_args([name])
        assert (args.device, args.logger, args.save_every, args.resume, args.quick) == (
            "cpu", "csv", 0, None, False,
        )  # fmt: skip
        assert args.frames is None and args.out is None

    def test_run_folders(self):
        from torchrl_ext.examples import _run_folder

        args = entry.make_parser().parse_args(["r2d2", "--seeds", "0", "2"])
        runs = list(_run_folder.runs_of(args, "r2d2"))
        assert [(s, r.out) for s, r in runs] == [
            (0, Path("runs/r2d2/seed0")), (2, Path("runs/r2d2/seed2")),
        ]  # fmt: skip
        args = entry.make_parser().parse_args(["ppo", "--quick"])
        assert next(_run_folder.runs_of(args, "ppo"))[1].out == Path("runs/quick/ppo/seed0")
        args = entry.make_parser().parse_args(["course", "--resume", "runs/course/seed1"])
        seed, run = next(_run_folder.runs_of(args, "course"))
        assert (seed, run.resume, run.out) == (None, True, Path("runs/course/seed1"))

    def test_frame_defaults_match_the_configs(self):
        from torchrl_ext.examples import (
            mappo_signalling,
            ppo_cartpole,
            ppo_course,
            ppo_popgym,
            r2d2_cartpole,
            r2d2_popgym,
        )

        configs = {"ppo": [ppo_cartpole.Config], "r2d2": [r2d2_cartpole.Config],
                   "course": [ppo_course.Config], "results": [ppo_cartpole.Config],
                   "signalling": [mappo_signalling.Config],
                   "popgym": [ppo_popgym.Config, r2d2_popgym.Config],
                   "popgym-results": [ppo_popgym.Config]}  # fmt: skip
        trains = {n: c for n, c in entry.COMMANDS.items() if c.frames is not None}
        assert set(trains) == set(configs)
        for name, command in trains.items():
            for config in configs[name]:
                assert config().frames == command.frames, name

    def test_missing_cuda_is_a_clear_exit(self):
        from torchrl_ext.examples import _common

        if _common.torch.cuda.is_available():
            pytest.skip("needs a machine without CUDA")
        with pytest.raises(SystemExit, match="--device cuda"):
            _common.device("cuda")


class TestArgumentErrors:
    """A bad argument is one argparse line on stderr (exit 2, no traceback), found before any
    pipeline is imported; a hyperparameter the config refuses is one line naming it."""

    @pytest.mark.parametrize(
        "args, message",
        [
            (
                ["ppo", "--save-every", "-512"],
                "argument --save-every: must be at least 0, got -512",
            ),
            (["r2d2", "--frames", "0"], "argument --frames: must be at least 1, got 0"),
            (["course", "--seeds", "-1"], "argument --seeds: must be at least 0, got -1"),
            (["ppo", "lr"], "argument KEY=VALUE: expected KEY=VALUE, got 'lr'"),
            (["ppo", "--resume", "nowhere"], "--resume nowhere: no checkpoint there"),
            (["ppo", "--resume", "nowhere", "lr=1"], "lr=1: a resumed run keeps its config"),
        ],
    )
    def test_one_line(self, args, message):
        done = _cli(*args)
        assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
        assert message in done.stderr.splitlines()[-1]
        assert done.stdout == ""

    @pytest.mark.parametrize(
        "args, message",
        [
            (["--frames", "100"], "ppo: frames must be at least one batch"),
            (["epoch=2"], "ppo: epoch=2: no such hyperparameter; they are: clip, critic_coeff,"),
            (["epochs=two"], "ppo: epochs=two: expected int."),
            (["gamma=2"], "ppo: gamma must be"),
        ],
    )
    def test_refused_hyperparameter(self, args, message):
        done = _cli("ppo", "--quick", *args)
        assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr
        assert done.stderr.splitlines()[-1].startswith(message)


def test_stdout_holds_only_our_lines(tmp_path):
    """torchrl's log lines and warnings go to stderr; stdout is the run's summary line."""
    done = _cli("r2d2", "--quick", "--no-progress", "--out", str(tmp_path))
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [done.stdout.splitlines()[0]]
    assert done.stdout.startswith("r2d2 seed 0: ")
