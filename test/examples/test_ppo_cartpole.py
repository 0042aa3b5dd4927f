"""Recurrent PPO example: the --quick run end to end, and its small helpers."""

from __future__ import annotations

import csv
import math

import pytest
import torch
from tensordict import TensorDict

from torchrl_ext.examples import ppo_cartpole as ppo


@pytest.fixture(scope="module")
def quick_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("ppo")
    threads = torch.get_num_threads()
    try:
        result = ppo.main(["--quick", "--seed", "3", "--out", str(out), "--no-progress"])
    finally:
        torch.set_num_threads(threads)
    return result, out


class TestQuickRun:
    """--quick trains 3 batches with shape/mask/finiteness checks and writes its log and plot."""

    def test_runs_and_counts_frames(self, quick_run):
        result, _ = quick_run
        cfg = result.config
        assert result.frames == ppo.QUICK_BATCHES * cfg.frames_per_batch == 3 * 16 * 32
        assert len(result.curve) == 3
        assert [c[0] for c in result.curve] == [cfg.frames_per_batch * k for k in (1, 2, 3)]

    def test_evaluation_is_a_cartpole_return(self, quick_run):
        result, _ = quick_run
        assert 1.0 <= result.final_eval <= 500.0

    def test_timings_cover_every_section(self, quick_run):
        result, _ = quick_run
        assert set(result.timings) == {"collect", "policy", "gae", "update"}
        assert result.timings["policy"] < result.timings["collect"]
        assert result.env_steps_per_s > 0 and result.raw_env_steps_per_s > 0
        assert "env steps/s" in ppo.time_report(result)

    def test_writes_csv_and_png(self, quick_run):
        result, out = quick_run
        assert result.csv_path == out / "progress.csv"
        with result.csv_path.open() as f:
            rows = list(csv.DictReader(f))
        assert len(rows) == 3
        assert all(math.isfinite(float(r["loss_objective"])) for r in rows)
        assert float(rows[0]["lr"]) == ppo.Config().lr
        assert result.plot_path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"

    def test_leaves_global_rng_alone(self):
        before = torch.get_rng_state()
        cfg = ppo.Config(frames=256, epochs=1, eval_episodes=2, num_envs=8, steps=32)
        ppo.train(cfg, None, progress=False)
        assert torch.equal(torch.get_rng_state(), before)

    def test_same_seed_same_curve(self):
        cfg = ppo.Config(frames=512, epochs=1, eval_episodes=2, policy="mlp", seed=5)
        a = ppo.train(cfg, None, progress=False)
        b = ppo.train(cfg, None, progress=False)
        assert [c[2] for c in a.curve] == [c[2] for c in b.curve]
        assert a.final_eval == b.final_eval


class TestConfig:
    """Bad hyperparameters are rejected, naming the argument."""

    @pytest.mark.parametrize(
        ("kwargs", "match"),
        [
            ({"policy": "gru"}, "policy"),
            ({"num_envs": 0}, "num_envs"),
            ({"steps": 1.5}, "steps"),
            ({"frames": 10}, "frames"),
        ],
    )
    def test_rejects(self, kwargs, match):
        with pytest.raises(ValueError, match=match):
            ppo.Config(**kwargs)


def flags(rows):
    return torch.tensor(rows, dtype=torch.bool).unsqueeze(-1)


class TestHelpers:
    """Episode returns, annealing and the batch checks of --quick."""

    def test_completed_returns(self):
        batch = TensorDict(
            {
                "next": {
                    "done": flags([[True, False, True], [False, False, False]]),
                    "episode_reward": torch.tensor([[3.0, 1.0, 2.0], [1.0, 2.0, 3.0]]).unsqueeze(
                        -1
                    ),
                }
            },
            [2, 3],
        )
        assert ppo.completed_returns(batch).tolist() == [3.0, 2.0]

    def test_anneal_is_linear_to_zero(self):
        cfg = ppo.Config(frames=1000, num_envs=2, steps=4, lr=0.5, clip=0.2)
        loss = torch.nn.Module()
        loss.register_buffer("clip_epsilon", torch.tensor(0.2))
        optim = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=0.5)
        assert ppo.anneal(cfg, loss, optim, 250) == 0.75
        assert optim.param_groups[0]["lr"] == pytest.approx(0.375)
        assert float(loss.clip_epsilon) == pytest.approx(0.15)
        assert ppo.anneal(cfg, loss, optim, 2000) == 0.0

    def test_stopwatch_accumulates(self):
        watch = ppo.Stopwatch()
        for _ in range(2):
            with watch("a"):
                pass
        assert list(watch.totals) == ["a"] and watch.totals["a"] >= 0


def batch_for_checks(cfg, first=True):
    n, t = cfg.num_envs, cfg.steps
    done = torch.zeros(n, t, dtype=torch.bool)
    done[0, 1] = True
    is_init = torch.zeros(n, t, dtype=torch.bool)
    is_init[:, 0] = first
    is_init[0, 2] = True
    step_count = torch.zeros(n, t, dtype=torch.int64)
    for i in range(n):
        count = 0
        for j in range(t):
            count = 0 if is_init[i, j] else count + 1
            step_count[i, j] = count
    td = TensorDict(
        {
            "is_init": is_init.unsqueeze(-1),
            "step_count": step_count.unsqueeze(-1),
            "next": {"done": done.unsqueeze(-1)},
            **{k: torch.zeros(n, t, 1) for k in ("advantage", "value_target", "state_value")},
        },
        [n, t],
    )
    return td


class TestCheckBatch:
    """check_batch accepts a consistent batch and catches each broken invariant."""

    cfg = ppo.Config(num_envs=3, steps=4, frames=12, policy="mlp")

    def test_accepts_consistent_batch(self):
        ppo.check_batch(self.cfg, batch_for_checks(self.cfg), first=True)

    def test_catches_is_init_not_following_done(self):
        td = batch_for_checks(self.cfg)
        td["next", "done"][1, 2] = True
        with pytest.raises(AssertionError, match="one step later"):
            ppo.check_batch(self.cfg, td, first=True)

    def test_catches_is_init_off_episode_start(self):
        td = batch_for_checks(self.cfg)
        td["step_count"][2, 3] = 0
        with pytest.raises(AssertionError, match="episode starts"):
            ppo.check_batch(self.cfg, td, first=True)

    def test_catches_bad_advantage_shape(self):
        td = batch_for_checks(self.cfg)
        td["advantage"] = torch.zeros(3, 4, 2)
        with pytest.raises(AssertionError, match="advantage"):
            ppo.check_batch(self.cfg, td, first=True)

    def test_catches_nan_advantage(self):
        td = batch_for_checks(self.cfg)
        td["advantage"][0, 0] = float("nan")
        with pytest.raises(AssertionError, match="advantage"):
            ppo.check_batch(self.cfg, td, first=True)


class TestResultsScript:
    """The results script trains every run and writes the table and the curves."""

    def test_writes_table_and_plot(self, tmp_path):
        from torchrl_ext.examples import ppo_cartpole_results as results

        threads = torch.get_num_threads()
        argv = ["--seeds", "1", "--mlp-seeds", "1", "--frames", "512", "--out", str(tmp_path)]
        argv += ["--table", str(tmp_path / "t.md"), "--image", str(tmp_path / "c.png")]
        try:
            text = results.main(argv)
        finally:
            torch.set_num_threads(threads)
        assert (tmp_path / "t.md").read_text() == text
        rows = [line for line in text.splitlines() if line.startswith(("| lstm", "| mlp"))]
        assert len(rows) == 4  # results and timings, one row per run each
        assert "| lstm | 1 | not reached | not reached |" in rows[0]
        assert (tmp_path / "c.png").read_bytes()[:4] == b"\x89PNG"
        assert (tmp_path / "lstm_seed1" / "progress.csv").exists()
