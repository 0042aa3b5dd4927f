"""``examples/ppo_course.py``: its quick run, bitwise resume, the policy it saves, its episodes."""

from __future__ import annotations

import hashlib
import json
import math

import pipelines
import ppo_course
import pytest
import runs
import torch
from malicious_files import REFUSED, torch_file
from tensordict import TensorDict
from torchrl.envs.utils import ExplorationType, set_exploration_type

PNG = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="module")
def quick(tmp_path_factory):
    """A ``--quick`` run's result and folder, and whether it left torch's generator alone."""
    out = tmp_path_factory.mktemp("ppo_course")
    before = torch.get_rng_state()
    (result,) = pipelines.run("ppo_course", "--quick", "--out", str(out))
    return result, out / "seed0", torch.equal(torch.get_rng_state(), before)


def test_quick_run_checks_every_batch(quick):
    result, folder, rng_left_alone = quick
    assert rng_left_alone
    assert result.frames == ppo_course.QUICK["frames"] and result.out == folder
    logged = runs.read_scalars(folder)
    assert [step for step, _ in logged["mean_return"]] == [512, 1024, 1536]
    assert logged["seconds"][-1][0] == result.frames
    losses = [v for name, rows in logged.items() if name.startswith("loss_") for _, v in rows]
    assert losses and all(math.isfinite(v) for v in losses)
    assert logged["final_eval"] == logged["eval_return"] == [(1536, result.final_eval)]
    for metric in ppo_course.METRICS:
        assert [step for step, _ in logged[f"initial_eval_{metric}"]] == [0]
    for plot in ("learning_curve.png", "laps_finished.png"):
        assert (folder / plot).read_bytes()[:8] == PNG
    assert runs.latest_checkpoint(folder) is not None
    assert str(result).startswith("ppo_course seed 0: ")


def as_text(scalars: dict) -> dict:
    """Scalars with their values as text, so that a NaN equals a NaN."""
    return {name: [(step, repr(v)) for step, v in rows] for name, rows in scalars.items()}


def test_resumes_bitwise(tmp_path, monkeypatch):
    """``pipelines.assert_resumes_bitwise``, comparing NaN (no fresh episode yet) as equal."""
    whole = tmp_path / "whole"
    pipelines.run("ppo_course", "--quick", "--out", str(whole), "--save-every", "512")
    folder = pipelines.interrupted(monkeypatch, "ppo_course", tmp_path / "cut", 512, 1024)
    pipelines.run("ppo_course", "--resume", str(folder))
    expected = as_text(pipelines.scalars(whole / "seed0"))
    assert "nan" in expected["mean_return"][0][1], "the first batch ends no fresh episode"
    assert as_text(pipelines.scalars(folder)) == expected


def test_loaded_policy_is_the_trained_one_and_acts(quick):
    _, folder, _ = quick
    policy, args, module = runs.load_policy(folder)
    assert module is ppo_course and not policy.training
    saved = runs.load_checkpoint(runs.find_checkpoint(folder))["loss"]
    for param in policy.parameters():
        assert any(p.shape == param.shape and torch.equal(p, param) for p in saved.values())
    env = ppo_course.acting_env(args, 2, 7, "cpu")
    with torch.no_grad(), set_exploration_type(ExplorationType.DETERMINISTIC):
        rollout = env.rollout(5, policy)
    assert rollout["action"].shape == (2, 5, 2)


@pytest.mark.parametrize(
    ("argv", "match"),
    [
        (["--lr", "0"], "lr must be a finite number > 0"),
        (["--gamma", "nan"], "gamma must be a finite number in"),
        (["--init-scale", "0"], "init_scale must be a finite number > 0"),
        (["--entropy-coeff", "-1"], "entropy_coeff must be a finite number >= 0"),
        (["--minibatch-size", "0"], "minibatch_size must be an integer >= 1"),
        (["--max-steps", "0"], "max_steps must be an integer >= 1"),
        (["--return-window", "0"], "return_window"),
        (["--frames", "10"], "frames must be at least one batch"),
        (["--seeds", "-1"], "--seeds must be distinct integers"),
    ],
)
def test_refuses_bad_arguments_in_one_line(tmp_path, capsys, argv, match):
    pipelines.assert_refused("ppo_course", argv, match, tmp_path, capsys)


def test_resume_refuses_a_crafted_checkpoint(tmp_path, capsys, marker):
    """A checkpoint whose state.pt would run code is refused in one line, read as data only."""
    crafted = torch_file(tmp_path / "checkpoint-000001" / "state.pt", marker)
    digest = hashlib.sha256(crafted.read_bytes()).hexdigest()
    (crafted.parent / "manifest.json").write_text(json.dumps({"files": {"state.pt": digest}}))
    with pytest.raises(SystemExit) as stop:
        pipelines.run("ppo_course", "--resume", str(tmp_path))
    err = capsys.readouterr().err
    assert stop.value.code == 2 and REFUSED in err and len(err.strip().splitlines()) == 1, err


class TestEpisodeTracker:
    """Records each completed episode on a valid course; the next one is fresh unless the
    episode ended in a crash alone (a respawn on the same course)."""

    @staticmethod
    def batch(**rows):
        defaults = dict(truncated=[False] * 3, out_of_bounds=[False] * 3, laps=[0] * 3)
        defaults.update(valid=[True] * 3, checkpoints_passed=[0] * 3)
        columns = {**defaults, **rows}
        return TensorDict(
            {"next": {k: torch.tensor([v]).unsqueeze(-1) for k, v in columns.items()}}, [1, 3]
        )

    def test_episodes_and_fresh_courses(self):
        tracker = ppo_course.EpisodeTracker(1)
        crash = self.batch(
            reward=[1.0, -1.0, 2.0],
            done=[False, True, False],
            out_of_bounds=[False, True, False],
            checkpoints_passed=[1, 0, 2],
        )
        (episode,) = tracker.update(crash)
        expected = {"return": 0.0, "checkpoints": 1.0, "finished": 0.0, "length": 2.0}
        assert episode == {**expected, "fresh": True, "env": 0}
        assert tracker.fresh.tolist() == [False]  # a crash respawns on the same course
        lap = self.batch(reward=[0.5] * 3, done=[False, False, True], laps=[0, 0, 1])
        (episode,) = tracker.update(lap)
        assert (episode["return"], episode["length"]) == (3.5, 4.0)
        assert episode["finished"] == 1.0 and not episode["fresh"]
        assert tracker.fresh.tolist() == [True]  # a finished lap regenerates the course

    def test_invalid_course_is_not_recorded(self):
        tracker = ppo_course.EpisodeTracker(1)
        invalid = self.batch(reward=[0.0] * 3, done=[True] * 3, valid=[True, False, True])
        assert [e["length"] for e in tracker.update(invalid)] == [1.0, 1.0]
        assert tracker.fresh.tolist() == [True]

    def test_state_dict_continues(self):
        steps = self.batch(reward=[1.0, 2.0, 3.0], done=[False] * 3)
        tracker = ppo_course.EpisodeTracker(1)
        tracker.update(steps)
        copy = ppo_course.EpisodeTracker(1)
        copy.load_state_dict(tracker.state_dict())
        end = self.batch(reward=[1.0] * 3, done=[False, True, False])
        assert copy.update(end) == tracker.update(end)

    def test_refuses_a_batch_of_other_envs(self):
        with pytest.raises(ValueError, match="num_envs=2"):
            ppo_course.EpisodeTracker(2).update(self.batch(reward=[0.0] * 3, done=[False] * 3))
