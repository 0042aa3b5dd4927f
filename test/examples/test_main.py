"""The entry point ``python -m torchrl_ext.examples``: fast help, shared option names, defaults."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

import pytest

from torchrl_ext.examples import __main__ as entry
from torchrl_ext.examples import _command_configs

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


def _python(code: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    """``python -c code`` with this checkout importable; fails the test if it fails."""
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env=env, cwd=cwd, check=True, timeout=60)  # fmt: skip


#: The libraries the command line does not load before it dispatches (nor ``_checks`` at all).
HEAVY = ("torch", "torchrl", "tensordict", "warp", "numpy")


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
        out = _python(code).stdout
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
        assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
        assert done.stderr.splitlines()[-1].startswith(f"{entry.PROG}: error: {message}")
        assert done.stdout == ""


class TestConfigErrors:
    """Every new run's config is made before the pipeline is imported, as the pipeline makes it:
    one it would refuse is one argparse line naming the runs (exit 2), with no module of torch,
    TorchRL, TensorDict, Warp or numpy loaded, nor any pipeline."""

    #: What the command line may import before it dispatches: torch-free modules only.
    LIGHT = {
        "torchrl_ext", "torchrl_ext._checks", "torchrl_ext.examples",
        *(f"torchrl_ext.examples.{name}" for name in (
            "__main__", "_command_configs", "_config", "_configs", "_overrides",
            "_popgym_configs", "_popgym_paper", "_run_folder", "_run_logs", "_run_signals",
        )),
    }  # fmt: skip

    @pytest.mark.parametrize(
        "args, message",
        [
            (
                ["ppo", "--frames", "100"],
                "ppo: frames must be at least one batch (num_envs * steps = 512), got frames=100.",
            ),
            (
                ["popgym", "--env", "HigherLower", "num_envs=0"],
                "popgym/HigherLower-easy: num_envs must be >= 1, got num_envs=0.",
            ),
        ],
    )
    def test_refused_before_any_pipeline_is_imported(self, tmp_path, args, message):
        code = (
            "import sys\nfrom torchrl_ext.examples import __main__ as m\n"
            f"try:\n    m.main({[*args, '--out', str(tmp_path)]!r})\n"
            "except SystemExit as stop:\n    print(stop.code)\n"
            "print(sorted(k for k in sys.modules if k.startswith('torchrl_ext') or "
            f"k.split('.')[0] in {HEAVY!r}))"
        )
        done = _python(code, cwd=tmp_path)
        code_line, modules_line = done.stdout.splitlines()
        assert code_line == "2"
        assert done.stderr.splitlines()[-1] == f"{entry.PROG}: error: {message}"
        assert "Traceback" not in done.stderr
        modules = set(ast.literal_eval(modules_line))
        assert not {m for m in modules if m.split(".")[0] in HEAVY}, modules
        assert modules <= self.LIGHT, modules - self.LIGHT
        assert not any(tmp_path.iterdir())  # no run folder was made

    @pytest.mark.parametrize(
        "args, message",
        [
            (["ppo", "lr=-1"], "ppo: lr must be > 0.0, got lr=-1.0."),
            (["ppo", "--policy", "mlp", "hidden=0"], "ppo_mlp: hidden must be >= 1"),
            (["popgym", "--env", "RepeatFirst", "num_envs=0"], "popgym/RepeatFirst-easy: num_envs"),
            (["popgym", "--algo", "r2d2", "--env", "HigherLower", "eta=x"],
             "popgym/HigherLower-easy-r2d2: eta=x: expected float."),
            (["results", "gamma=2", "--mlp-seeds", "0"], "results: gamma must be <= 1.0"),
            (["popgym-results", "--quick", "num_envs=0"], "popgym/RepeatPrevious-easy: num_envs"),
            (["course", "init_scale=0"], "course: init_scale must be > 0"),
            (["signalling", "lmbda=2"], "signalling: lmbda must be <= 1.0"),
            (["r2d2", "frames=8"], "r2d2: frames must be at least one batch"),
        ],
    )  # fmt: skip
    def test_one_line_per_command(self, tmp_path, args, message):
        done = _cli(*args, "--out", str(tmp_path))
        assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
        assert done.stderr.splitlines()[-1].startswith(f"{entry.PROG}: error: {message}")

    @pytest.mark.parametrize(
        "argv",
        [
            ["ppo", "--policy", "mlp", "--seeds", "0", "3"],
            ["r2d2", "--quick"],
            ["course"],
            ["signalling", "--listener", "mlp"],
            ["popgym", "--env", "RepeatFirst", "--quick"],
            ["popgym", "--algo", "r2d2", "--env", "HigherLower"],
        ],
    )
    def test_made_as_the_pipeline_makes_them(self, argv, tmp_path, monkeypatch):
        from torchrl_ext.examples import _common

        calls = []

        def train_seeds(args, pipeline, train, summary, config, quick, **fields):
            calls.append((args, pipeline, config, quick, fields))
            return []

        monkeypatch.setattr(_common, "train_seeds", train_seeds)
        entry.main([*argv, "--out", str(tmp_path)])
        ((args, pipeline, config, quick, fields),) = calls
        (runs,) = _command_configs.new_runs(args)
        assert (runs.pipeline, runs.fields, runs.seeds) == (pipeline, fields, args.seeds)
        assert runs.config is config and runs.quick is quick

    def test_popgym_results_makes_the_runs_it_will_start(self, tmp_path):
        (tmp_path / "RepeatPrevious-easy" / "seed0" / "checkpoint-1").mkdir(parents=True)
        argv = ["popgym-results", "--quick", "--seeds", "0", "1", "--out", str(tmp_path)]
        args = entry.make_parser().parse_args(argv)
        runs = _command_configs.new_runs(args)
        assert [(r.pipeline, r.seeds, r.fields["env"]) for r in runs] == [
            ("popgym/RepeatPrevious-easy", [1], "RepeatPrevious"),
            ("popgym/MultiarmedBandit-easy", [0, 1], "MultiarmedBandit"),
        ]  # fmt: skip

    def test_resumed_runs_keep_their_config(self):
        args = entry.make_parser().parse_args(["ppo", "--resume", "runs/ppo/seed0"])
        assert _command_configs.new_runs(args) == []


def test_checks_import_without_torch():
    """``_checks`` loads no torch, numpy or TensorDict, and judges plain values without them."""
    code = (
        "import sys\nfrom torchrl_ext import _checks\n"
        "print(_checks.check_int('n', 3, minimum=1), _checks.check_float('x', 2))\n"
        "try:\n    _checks.check_int('n', True)\nexcept TypeError as e:\n    print(e)\n"
        f"print(sorted(k for k in sys.modules if k.split('.')[0] in {HEAVY!r}))"
    )
    out = _python(code).stdout
    assert out.splitlines() == ["3 2.0", "n must be an int, got n=True.", "[]"]


def test_pipelines_name_the_torch_free_configs():
    """Each pipeline's ``Config`` and ``QUICK`` are the objects of the torch-free modules that
    the command line checks configs with (tests, load_policy and checkpoints use the former)."""
    from torchrl_ext.examples import (
        _configs,
        _popgym_configs,
        mappo_signalling,
        popgym_results,
        ppo_cartpole,
        ppo_course,
        ppo_popgym,
        r2d2_cartpole,
        r2d2_distributed,
        r2d2_popgym,
    )

    same = [
        (ppo_cartpole.Config, _configs.PPOCartPoleConfig),
        (ppo_cartpole.QUICK, _configs.PPO_CARTPOLE_QUICK),
        (r2d2_cartpole.Config, _configs.R2D2CartPoleConfig),
        (r2d2_cartpole.QUICK, _configs.R2D2_CARTPOLE_QUICK),
        (r2d2_distributed.QUICK, _configs.R2D2_DISTRIBUTED_QUICK),
        (ppo_course.Config, _configs.PPOCourseConfig),
        (ppo_course.QUICK, _configs.PPO_COURSE_QUICK),
        (mappo_signalling.Config, _configs.MAPPOSignallingConfig),
        (mappo_signalling.QUICK, _configs.MAPPO_SIGNALLING_QUICK),
        (ppo_popgym.Config, _popgym_configs.PPOPopGymConfig),
        (ppo_popgym.RepeatFirstConfig, _popgym_configs.RepeatFirstConfig),
        (ppo_popgym.MultiarmedBanditConfig, _popgym_configs.MultiarmedBanditConfig),
        (ppo_popgym.config_class, _popgym_configs.config_class),
        (ppo_popgym.QUICK, _popgym_configs.PPO_POPGYM_QUICK),
        (r2d2_popgym.Config, _popgym_configs.R2D2PopGymConfig),
        (r2d2_popgym.QUICK, _popgym_configs.R2D2_POPGYM_QUICK),
        (popgym_results.ROWS, _popgym_configs.ROWS),
        (popgym_results.QUICK_ROWS, _popgym_configs.QUICK_ROWS),
    ]
    for pipeline_name, light_name in same:
        assert pipeline_name is light_name


def test_stdout_holds_only_our_lines(tmp_path):
    """torchrl's log lines and warnings go to stderr; stdout is the run's summary line."""
    done = _cli("r2d2", "--quick", "--no-progress", "--out", str(tmp_path))
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [done.stdout.splitlines()[0]]
    assert done.stdout.startswith("r2d2 seed 0: ")
