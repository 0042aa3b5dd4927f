"""``examples/r2d2_popgym.py``: its quick run, bitwise resume, Q-network and saved policy."""

from __future__ import annotations

import math
from pathlib import Path

import pipelines
import pytest
import r2d2_popgym
import runs
import torch

from torchrl_ext.data import Tape


@pytest.fixture(scope="module")
def quick(tmp_path_factory):
    """One ``--quick`` run on HigherLower (a categorical observation), its folder and result."""
    out = tmp_path_factory.mktemp("popgym")
    argv = ["--quick", "--env", "HigherLower", "--out", str(out), "--save-every", "512"]
    (result,) = pipelines.run("r2d2_popgym", *argv)
    return out / "seed0", result


def test_quick_run(quick):
    folder, result = quick
    assert result.frames == r2d2_popgym.QUICK["frames"]
    assert str(result).startswith("r2d2_popgym HigherLower easy seed 0: ")
    assert runs.read_config(folder)["config"]["env"] == "HigherLower"
    logged = runs.read_scalars(folder)
    assert [step for step, _ in logged["mean_return"]] == list(range(128, 1025, 128))
    best = [v for _, v in logged["best_mean_return"] if not math.isnan(v)]
    assert math.isfinite(result.best) and result.best == best[-1] and best == sorted(best)
    means = [v for _, v in logged["mean_return"] if not math.isnan(v)]
    assert len(means) == len(best) and all(m <= b for m, b in zip(means, best, strict=True))
    # POPGym scales every task's return into [-1, 1]
    assert all(-1 - 1e-5 <= v <= 1 + 1e-5 for v in [*means, result.final_eval])
    assert (runs.find_checkpoint(folder) / "replay").is_dir()


def test_resumes_bitwise(quick, tmp_path, monkeypatch):
    """Killed after frame 768, before its checkpoint there; resumed from the one at 512."""
    argv = ("--env", "HigherLower")
    folder = pipelines.interrupted(monkeypatch, "r2d2_popgym", tmp_path, 256, 768, *argv)
    pipelines.run("r2d2_popgym", "--resume", str(folder))
    assert pipelines.scalars(folder) == pipelines.scalars(quick[0])  # NaN as text


def test_tape_run_resumes_bitwise(tmp_path, monkeypatch):
    """Tapes and FFM: the replay's episodes and the scan memory's state come back whole."""
    argv = ("--env", "HigherLower", "--replay", "tape", "--memory", "ffm")
    pipelines.assert_resumes_bitwise(tmp_path, monkeypatch, "r2d2_popgym", 256, 768, *argv)


def test_loaded_policy_acts(quick):
    policy, args, module = runs.load_policy(quick[0])
    assert module is r2d2_popgym and args.env == "HigherLower" and not policy.training
    rollout = r2d2_popgym.acting_env(args, 2, 7, "cpu").rollout(5, policy)
    assert rollout["action"].shape[:2] == (2, 5)
    assert rollout["prev_action"].shape == (2, 5, 2)  # HigherLower: higher or lower


@pytest.mark.parametrize(
    "argv", [("--replay", "tape"), ("--memory", "gru"), ("--memory", "ffm", "--replay", "tape")]
)
def test_quick_run_with_memory_and_replay(tmp_path, argv):
    """``--quick`` (which asserts each sample's geometry and masks) with another memory or
    tapes: the run folder records the choice and the policy acts from its saved state."""
    (result,) = pipelines.run(
        "r2d2_popgym", "--quick", "--env", "HigherLower", "--out", str(tmp_path), *argv
    )
    config = runs.read_config(tmp_path / "seed0")["config"]
    assert result.frames == r2d2_popgym.QUICK["frames"] and math.isfinite(result.best)
    assert [config["memory"], config["replay"]] == [
        argv[argv.index(f"--{k}") + 1] if f"--{k}" in argv else d
        for k, d in (("memory", "lstm"), ("replay", "sequence"))
    ]
    policy, args, _ = runs.load_policy(tmp_path / "seed0")
    rollout = r2d2_popgym.acting_env(args, 2, 7, "cpu").rollout(3, policy)
    assert rollout["action"].shape[:2] == (2, 3)


def test_tape_buffer_and_loss():
    args = r2d2_popgym.Args(env="CountRecall", memory="ffm", replay="tape", tape_rows=3)
    unit, rb = r2d2_popgym.make_buffer(args)
    assert rb.batch_size == args.tape_draws
    assert isinstance(unit, Tape) and unit.length == r2d2_popgym.longest_episode(args) == 51
    loss = r2d2_popgym.make_loss(args, r2d2_popgym.make_qnet(args))
    assert loss.sample_unit == "tape" and loss.burn_in == 0
    assert "recurrent_state_ffm" in loss.in_keys and "learning_mask" not in loss.in_keys


def test_q_values_per_action():
    args = r2d2_popgym.Args(env="CountRecall")
    env = r2d2_popgym.make_env(args, 3, 0, "cpu")
    td = r2d2_popgym.make_qnet(args)(env.reset())
    assert td["action_value"].shape == (3, env.action_spec.n) == (3, 27)


@pytest.mark.parametrize(("forget_bias", "previous_action"), [(3.0, True), (0.0, False)])
def test_forget_bias_and_previous_action(forget_bias, previous_action):
    args = r2d2_popgym.Args(forget_bias=forget_bias, previous_action=previous_action)
    qnet = r2d2_popgym.make_qnet(args)
    lstm = qnet[2].lstm
    assert torch.equal(lstm.bias_ih_l0[64:128], torch.full((64,), forget_bias))
    assert torch.equal(lstm.bias_hh_l0[64:128], torch.zeros(64))
    # RepeatPrevious: a 4-suit card one-hot, then the 4 actions' one-hot when fed
    assert qnet[0].module.features == 4 + 4 * previous_action
    env = r2d2_popgym.make_env(args, 2, 0, "cpu")
    assert ("prev_action" in env.observation_spec.keys()) == previous_action


def test_difficulty_reaches_the_env():
    args = r2d2_popgym.Args(env="RepeatFirst", difficulty="medium")
    assert r2d2_popgym.make_env(args, 2, 0, "cpu").base_env.difficulty == "medium"


def test_observation_features_by_hand():
    from torchrl.data import Categorical, Unbounded

    inputs = r2d2_popgym.Inputs(Categorical(3, shape=(2,)), previous=0)
    assert inputs(torch.tensor([2, 0])).tolist() == [[0.0, 0.0, 1.0], [1.0, 0.0, 0.0]]
    floats = r2d2_popgym.Inputs(Unbounded((2, 2)), previous=2)
    obs, prev = torch.randn(2, 2), torch.tensor([[1.0, 0.0], [0.0, 1.0]])
    assert floats.features == 4 and torch.equal(floats(obs, prev), torch.cat([obs, prev], -1))


def test_default_run_folder(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    argv = ["--env", "CountRecall", "--difficulty", "hard", "--seeds", "3"]
    ((args, run),) = runs.parse(r2d2_popgym.Args, argv)
    assert run.out == Path("runs/r2d2_popgym/CountRecall-hard/seed3") and args.env == "CountRecall"


@pytest.mark.parametrize(
    ("argv", "match"),
    [
        (["--env", "Battleship"], "env must have a single discrete action"),
        (["--env", "MineSweeper"], "got env='MineSweeper'"),
        (["--env", "Pong"], "env must be one of RepeatFirst, "),
        (["--difficulty", "extreme"], "argument --difficulty: invalid choice: 'extreme'"),
        (["--forget-bias", "nan"], "forget_bias must be finite"),
        (["--burn-in", "-1"], "burn_in must be an integer >= 0"),
        (["--memory", "transformer"], "argument --memory: invalid choice: 'transformer'"),
        (["--replay", "episodes"], "argument --replay: invalid choice: 'episodes'"),
        (["--capacity", "10"], "capacity must hold at least one window"),
    ],
)
def test_refuses_bad_arguments_in_one_line(tmp_path, capsys, argv, match):
    pipelines.assert_refused("r2d2_popgym", argv, match, tmp_path, capsys)
