"""PPO course driving example: the --quick run end to end, and its helpers."""

from __future__ import annotations

import csv
import math

import pytest
import torch
from tensordict import TensorDict

from torchrl_ext.examples import ppo_course as ppo


@pytest.fixture(scope="module")
def quick_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("ppo_course")
    threads = torch.get_num_threads()
    try:
        (result,) = ppo.main(["--quick", "--seed", "3", "--out", str(out), "--no-progress"])
    finally:
        torch.set_num_threads(threads)
    return result, out


class TestQuickRun:
    """--quick trains 3 small batches with shape/mask/finiteness checks and writes log and plot."""

    def test_counts_frames_and_batches(self, quick_run):
        result, _ = quick_run
        cfg = result.config
        assert cfg.frames_per_batch == 16 * 32
        assert result.frames == ppo.QUICK_BATCHES * cfg.frames_per_batch
        assert [row["frames"] for row in result.curve] == [512, 1024, 1536]

    @pytest.mark.parametrize("which", ["evaluation", "initial_evaluation"])
    def test_evaluation_is_in_range(self, quick_run, which):
        result, _ = quick_run
        ev = getattr(result, which)
        assert 0.0 <= ev["finished"] <= 1.0
        assert ev["checkpoints"] >= 0.0
        assert 1.0 <= ev["length"] <= result.config.max_steps
        assert math.isfinite(ev["return"])

    def test_writes_csv_and_png(self, quick_run):
        result, out = quick_run
        assert result.csv_path == out / "progress.csv"
        with result.csv_path.open() as f:
            rows = list(csv.DictReader(f))
        assert len(rows) == 3
        assert all(math.isfinite(float(r["loss_objective"])) for r in rows)
        assert float(rows[0]["lr"]) == ppo.Config().lr
        assert result.plot_path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        assert "first window" in ppo.summary(result)
        assert set(result.timings) == {"collect", "gae", "update"}
        assert "env steps/s" in ppo.summary(result)

    def test_leaves_global_rng_alone(self):
        before = torch.get_rng_state()
        cfg = ppo.Config(frames=256, num_envs=8, steps=32, epochs=1, eval_episodes=2, max_steps=50)
        ppo.train(cfg, None, progress=False)
        assert torch.equal(torch.get_rng_state(), before)


@pytest.fixture(scope="module")
def batch():
    cfg = ppo.Config(frames=256, num_envs=8, steps=32, epochs=1, eval_episodes=2)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        env = ppo.make_env(cfg, cfg.num_envs, 0)
        actor, critic = ppo.make_agent(cfg, env.observation_spec["observation"].shape[-1])
        loss = ppo.make_loss(cfg, actor, critic)
        with torch.no_grad():
            batch = env.rollout(cfg.steps, actor, break_when_any_done=False)
            loss.value_estimator(batch)
    return cfg, batch


def test_several_seeds_write_one_folder_each(tmp_path):
    threads = torch.get_num_threads()
    try:
        argv = ["--quick", "--seed", "1", "2", "--frames", "512", "--out", str(tmp_path)]
        results = ppo.main([*argv, "--no-progress"])
    finally:
        torch.set_num_threads(threads)
    assert [r.config.seed for r in results] == [1, 2]
    assert [r.csv_path for r in results] == [
        tmp_path / "seed1" / "progress.csv",
        tmp_path / "seed2" / "progress.csv",
    ]
    assert (tmp_path / "learning_curve.png").read_bytes()[:4] == b"\x89PNG"
    assert results[0].evaluation != results[1].evaluation or results[0].curve != results[1].curve


class TestCheckBatch:
    """check_batch rejects NaN observations and non-zero observations of invalid courses."""

    def test_accepts_a_collected_batch(self, batch):
        cfg, data = batch
        ppo.check_batch(cfg, data, first=True)

    def test_rejects_nan_observation(self, batch):
        cfg, data = batch
        data = data.clone()
        data["next", "observation"][0, 3, 1] = float("nan")
        with pytest.raises(AssertionError, match="NaN"):
            ppo.check_batch(cfg, data, first=True)

    def test_rejects_observation_of_invalid_course(self, batch):
        cfg, data = batch
        data = data.clone()
        data["valid"][2, 5] = False
        with pytest.raises(AssertionError, match="invalid"):
            ppo.check_batch(cfg, data, first=True)


def _batch(rewards, done, truncated, out, passed, laps, valid):
    def col(rows, dtype):
        return torch.tensor(rows, dtype=dtype).unsqueeze(-1)

    nxt = {
        "reward": col(rewards, torch.float32),
        "done": col(done, torch.bool),
        "truncated": col(truncated, torch.bool),
        "out_of_bounds": col(out, torch.bool),
        "checkpoints_passed": col(passed, torch.int32),
        "laps": col(laps, torch.int32),
        "valid": col(valid, torch.bool),
    }
    return TensorDict({"next": nxt}, [len(rewards), len(rewards[0])])


class TestEpisodeTracker:
    """Episodes are summed across batches; only episodes after a regeneration are fresh."""

    def test_sums_across_batches(self):
        tracker = ppo.EpisodeTracker(1)
        f, t = False, True
        first = _batch([[1.0, 2.0]], [[f, f]], [[f, f]], [[f, f]], [[1, 0]], [[0, 0]], [[t, t]])
        assert tracker.update(first) == []
        second = _batch([[0.5, 3.0]], [[f, t]], [[f, f]], [[f, f]], [[0, 2]], [[0, 1]], [[t, t]])
        (episode,) = tracker.update(second)
        expected = {"return": 6.5, "checkpoints": 3.0, "finished": 1.0, "length": 4.0}
        assert episode == {**expected, "fresh": True, "env": 0}
        assert tracker.returns.tolist() == [0.0] and tracker.checkpoints.tolist() == [0.0]
        assert tracker.lengths.tolist() == [0.0]

    @pytest.mark.parametrize(
        "truncated, out, laps, valid, fresh_next",
        [
            (False, True, 0, True, False),  # crash: respawn on the same course
            (True, True, 0, True, True),  # crash at the step limit: new course
            (False, True, 1, True, True),  # lap finished as it left the track: new course
            (True, False, 0, True, True),  # step limit: new course
            (False, False, 1, True, True),  # lap finished: new course
            (False, False, 0, False, True),  # invalid course: new course
        ],
    )
    def test_freshness_follows_the_auto_reset_policy(self, truncated, out, laps, valid, fresh_next):
        tracker = ppo.EpisodeTracker(1)
        batch = _batch([[1.0]], [[True]], [[truncated]], [[out]], [[0]], [[laps]], [[valid]])
        episodes = tracker.update(batch)
        assert len(episodes) == int(valid)
        assert tracker.fresh.tolist() == [fresh_next]
        f = False
        again = _batch([[2.0]], [[True]], [[f]], [[f]], [[0]], [[1]], [[True]])
        (episode,) = tracker.update(again)
        assert episode["fresh"] is fresh_next
        assert episode["return"] == 2.0

    def test_finished_needs_all_laps(self):
        tracker = ppo.EpisodeTracker(1, laps=2)
        one_lap = _batch([[1.0]], [[True]], [[False]], [[True]], [[0]], [[1]], [[True]])
        (episode,) = tracker.update(one_lap)
        assert episode["finished"] == 0.0
        assert tracker.fresh.tolist() == [False]  # a crash after one of two laps: respawn

    def test_rejects_wrong_batch(self):
        tracker = ppo.EpisodeTracker(2)
        batch = _batch([[1.0]], [[True]], [[False]], [[False]], [[0]], [[0]], [[True]])
        with pytest.raises(ValueError, match="num_envs=2"):
            tracker.update(batch)

    def test_rejects_bad_sizes(self):
        with pytest.raises(ValueError, match="num_envs"):
            ppo.EpisodeTracker(0)
        with pytest.raises(ValueError, match="laps=0"):
            ppo.EpisodeTracker(2, laps=0)


class TestConfig:
    """Config validates its sizes eagerly."""

    @pytest.mark.parametrize("name", ["num_envs", "steps", "epochs", "minibatch_size", "max_steps"])
    def test_rejects_non_positive(self, name):
        with pytest.raises(ValueError, match=name):
            ppo.Config(**{name: 0})

    def test_rejects_budget_below_one_batch(self):
        with pytest.raises(ValueError, match="frames"):
            ppo.Config(frames=10)

    def test_rejects_non_positive_scale(self):
        with pytest.raises(ValueError, match="init_scale"):
            ppo.Config(init_scale=0.0)


def test_window_means_empty_is_nan():
    means = ppo.window_means([])
    assert set(means) == {"return", "checkpoints", "finished", "length"}
    assert all(math.isnan(v) for v in means.values())


def test_observation_scale_matches_observation_layout():
    env = ppo.make_env(ppo.Config(), 2, 0)
    scale = ppo.observation_scale(env.base_env.num_rays, env.base_env.car, ppo.CourseParams())
    assert scale.shape == env.observation_spec["observation"].shape[-1:]


def test_evaluate_runs_one_episode_per_course():
    # an untrained actor's mean action is ~0: no throttle, so every car stands until the limit
    cfg = ppo.Config(eval_episodes=4, max_steps=20)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        actor, _ = ppo.make_agent(cfg, obs_dim=8)
    ev = ppo.evaluate(cfg, actor)
    assert ev["length"] == 20.0
    assert ev["finished"] == 0.0 and ev["checkpoints"] == 0.0


def test_first_and_last_skip_batches_without_episodes():
    nan = ppo.window_means([])
    rows = [{"frames": 1, **nan}, {"frames": 2, "return": 1.0}, {"frames": 3, "return": 5.0}]
    result = ppo.Result(ppo.Config(), 3, 1.0, rows, 2, {}, {}, {})
    first, last = ppo.first_and_last(result)
    assert (first["frames"], last["frames"]) == (2, 3)
    empty = ppo.Result(ppo.Config(), 1, 1.0, rows[:1], 0, {}, {}, {})
    assert all(math.isnan(v) for v in ppo.first_and_last(empty)[0].values())
