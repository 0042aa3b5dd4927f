"""``examples/ppo_cartpole.py``: its quick run, bitwise resume and the policy it saves."""

from __future__ import annotations

import pipelines
import ppo_cartpole
import pytest
import runs
import torch
from torchrl.envs.utils import ExplorationType, set_exploration_type


@pytest.mark.parametrize("policy", ["lstm", "mlp"])
def test_quick_run_checks_every_batch(tmp_path, policy):
    (result,) = pipelines.run("ppo_cartpole", "--quick", "--out", str(tmp_path), "--policy", policy)
    assert result.frames == ppo_cartpole.QUICK["frames"]
    logged = runs.read_scalars(tmp_path / "seed0")
    assert [step for step, _ in logged["mean_return"]] == [512, 1024, 1536]
    assert (tmp_path / "seed0" / "learning_curve.png").is_file()
    assert str(result).startswith(f"ppo_cartpole {policy} seed 0: ")


def test_resumes_bitwise(tmp_path, monkeypatch):
    pipelines.assert_resumes_bitwise(tmp_path, monkeypatch, "ppo_cartpole", 512, 1024)


def test_loaded_policy_acts_as_trained(tmp_path):
    pipelines.run("ppo_cartpole", "--quick", "--out", str(tmp_path))
    policy, args, module = runs.load_policy(tmp_path / "seed0")
    assert module is ppo_cartpole and args.policy == "lstm"
    env = ppo_cartpole.acting_env(args, 2, 7, "cpu")
    with torch.no_grad(), set_exploration_type(ExplorationType.DETERMINISTIC):
        rollout = env.rollout(5, policy)
    assert rollout["action"].shape[:2] == (2, 5)


@pytest.mark.parametrize(
    ("argv", "match"),
    [
        (["--lr", "0"], "lr must be a finite number > 0"),
        (["--gamma", "nan"], "gamma must be a finite number in"),
        (["--head", "0"], "head must be an integer >= 1"),
        (["--return-window", "0"], "return_window"),
        (["--reward-scale", "0"], "reward_scale"),
        (["--obs-scale", "0", "0"], "obs_scale"),
        (["--target", "nan"], "target"),
        (["--envs-per-minibatch", "32"], "envs_per_minibatch must be <= num_envs"),
        (["--frames", "10"], "frames must be at least one batch"),
        (["--policy", "gru"], "invalid choice"),
    ],
)
def test_refuses_bad_arguments_in_one_line(tmp_path, capsys, argv, match):
    with pytest.raises(SystemExit) as stop:
        pipelines.run("ppo_cartpole", *argv, "--out", str(tmp_path))
    assert stop.value.code == 2
    err = capsys.readouterr().err
    assert match in err and len(err.strip().splitlines()) == 1, err
    assert not any(tmp_path.iterdir()), "nothing is written before the arguments are checked"
