"""Multi-agent PPO example: the --quick run, per-group GAE against a plain loop, the CLI."""

from __future__ import annotations

import argparse
import csv
import math

import pytest
import torch
from torchrl.collectors import Collector

from torchrl_ext.examples import _config
from torchrl_ext.examples import mappo_signalling as mappo


@pytest.fixture(scope="module")
def quick_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("mappo")
    threads = torch.get_num_threads()
    try:
        results = mappo.main(["--quick", "--seeds", "3", "--out", str(out)])
    finally:
        torch.set_num_threads(threads)
    return results, out


def _gae_loop(reward, value, next_value, terminated, done, gamma, lmbda):
    """Plain GAE over one row per env, float64: delta with terminated, trace cut at done."""
    n, t = reward.shape
    advantage = torch.zeros(n, t, dtype=torch.float64)
    for i in range(n):
        running = 0.0
        for s in reversed(range(t)):
            boot = 0.0 if terminated[i, s] else float(next_value[i, s])
            delta = float(reward[i, s]) + gamma * boot - float(value[i, s])
            running = delta + gamma * lmbda * (0.0 if done[i, s] else running)
            advantage[i, s] = running
    return advantage


class TestQuickRun:
    """--quick trains 3 small batches with layout/mask/replay checks and writes a CSV per run."""

    def test_runs_and_counts_frames(self, quick_run):
        (result,), _ = quick_run
        cfg = result.config
        assert cfg.seed == 3 and cfg.listener == "lstm"
        assert result.frames == _config.QUICK_BATCHES * cfg.frames_per_batch == 3 * 16 * 8
        assert [c[0] for c in result.curve] == [cfg.frames_per_batch * k for k in (1, 2, 3)]
        assert 0.0 <= result.final_success <= 1.0

    def test_writes_csv_with_both_groups(self, quick_run):
        _, out = quick_run
        with (out / "lstm_seed3.csv").open() as f:
            rows = list(csv.DictReader(f))
        assert len(rows) == 3
        for group in mappo.GROUPS:
            assert all(math.isfinite(float(r[f"{group}_loss_objective"])) for r in rows)
            assert float(rows[0][f"{group}_first_max_ratio"]) == pytest.approx(1.0, abs=1e-3)

    def test_summary_names_listener_and_chance(self, quick_run):
        (result,), _ = quick_run
        line = mappo.summary(result)
        assert line.startswith("listener=lstm seed=3:") and "chance 0.125" in line

    def test_feed_forward_listener_quick_run(self):
        threads = torch.get_num_threads()
        try:
            (result,) = mappo.main(["--quick", "--listener", "mlp"])
        finally:
            torch.set_num_threads(threads)
        assert result.config.listener == "mlp"
        assert result.frames == 3 * result.config.frames_per_batch
        agents = mappo.make_agents(result.config)
        assert not any(k[1].startswith("rs_") for k in agents["listener"].actor.in_keys)


class TestPerGroupGAE:
    """RecurrentGAE set per group reads that group's reward and value and the shared done.

    Reference: a plain float64 loop over the values the critic produced, per group.
    """

    def test_matches_plain_loop_per_group(self):
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(0)
            cfg = mappo.Config(num_envs=4, steps=10, hidden=8, delay=1)
            agents = mappo.make_agents(cfg)
            env = mappo.make_env(cfg, cfg.num_envs, 0, agents)
            collector = Collector(
                env, mappo.collection_policy(agents), frames_per_batch=40, total_frames=40
            )
            batch = next(iter(collector))
            collector.shutdown()
        done = batch["next", "done"][..., 0]
        terminated = batch["next", "terminated"][..., 0]
        assert bool(done.any()) and not bool(done.all())
        for group in mappo.GROUPS:
            mappo.make_gae(cfg, group, agents[group])(batch)
            expected = _gae_loop(
                batch["next", group, "reward"][..., 0],
                batch[group, "state_value"][..., 0],
                batch["next", group, "state_value"][..., 0],
                terminated,
                done,
                cfg.gamma,
                cfg.lmbda,
            )
            got = batch[group, "advantage"][..., 0].double()
            torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5)
            target = batch[group, "value_target"][..., 0].double()
            value = batch[group, "state_value"][..., 0].double()
            torch.testing.assert_close(target, expected + value, rtol=1e-5, atol=1e-5)
        speaker, listener = (batch[g, "advantage"] for g in mappo.GROUPS)
        assert not torch.equal(speaker, listener)  # each group's own critic


class TestCommandLine:
    """The parser can be mounted on a subcommand; bad options exit with argparse's error."""

    def test_parser_mounts_on_a_given_parser(self):
        sub = argparse.ArgumentParser(prog="torchrl_ext signalling")
        parser = mappo.build_parser(sub)
        assert parser is sub
        args = parser.parse_args(["--seeds", "1", "2", "--listener", "mlp", "--frames", "512"])
        assert (args.seeds, args.listener, args.frames, args.quick) == ([1, 2], "mlp", 512, False)

    def test_bad_listener_exits(self):
        with pytest.raises(SystemExit):
            mappo.build_parser().parse_args(["--listener", "gru"])
