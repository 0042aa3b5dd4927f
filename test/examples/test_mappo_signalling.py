"""Multi-agent PPO example: the quick run through the entry point, a finished run resumed,
per-group GAE against a plain loop."""

from __future__ import annotations

import math

import pytest
import torch
from test_pipelines import _run
from torchrl.collectors import Collector
from torchrl.objectives import ClipPPOLoss

from torchrl_ext.examples import _config, _run_folder
from torchrl_ext.examples import mappo_signalling as mappo

#: Frames between checkpoints.
EVERY = 128


@pytest.fixture(scope="module")
def quick_run(tmp_path_factory):
    """``signalling --quick`` (seed 3) left alone, checkpointing every batch."""
    out = tmp_path_factory.mktemp("signalling")
    results = _run("signalling", "--quick", "--seeds", "3", "--out", str(out), "--save-every",
                   str(EVERY))  # fmt: skip
    return results, out / "seed3"


def _collected(cfg) -> tuple[dict, object]:
    """Agents seeded with 0 and one batch of ``cfg``'s size collected with them."""
    torch.manual_seed(0)
    agents = mappo.make_agents(cfg)
    env = mappo.make_env(cfg, cfg.num_envs, 0, agents)
    frames = cfg.num_envs * cfg.steps
    policy = mappo.collection_policy(agents)
    collector = Collector(env, policy, frames_per_batch=frames, total_frames=frames)
    batch = next(iter(collector))
    collector.shutdown()
    return agents, batch


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
    """``signalling --quick`` trains 3 small batches with layout, mask and replay checks, logs
    both groups' losses through the CSV logger, draws the learning curve, leaves a checkpoint and
    prints the summary line the other pipelines print."""

    def test_runs_and_counts_frames(self, quick_run):
        (result,), out = quick_run
        cfg = result.config
        assert cfg.seed == 3 and cfg.listener == "lstm" and result.out == out
        assert result.frames == _config.QUICK_BATCHES * cfg.frames_per_batch == 3 * 16 * 8
        assert [c[0] for c in result.curve] == [cfg.frames_per_batch * k for k in (1, 2, 3)]
        assert 0.0 <= result.final_eval <= 1.0

    def test_logs_both_groups_and_a_curve(self, quick_run):
        (result,), out = quick_run
        scalars = _run_folder.read_scalars(out)
        assert [s for s, _ in scalars["success"]] == [128, 256, 384]
        assert scalars["final_eval"] == [(384, result.final_eval)]
        for group in mappo.GROUPS:
            assert all(math.isfinite(v) for _, v in scalars[f"{group}_loss_objective"])
            assert scalars[f"{group}_first_max_ratio"][0][1] == pytest.approx(1.0, abs=1e-3)
        assert (out / "learning_curve.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        assert _run_folder.read_config(out)["listener"] == "lstm"

    def test_summary_names_listener_and_chance(self, quick_run):
        (result,), _ = quick_run
        line = mappo.summary(result)
        assert line.startswith("signalling lstm seed 3: success never reached 0.95")
        assert "(chance 0.125)" in line and line.endswith(f"log: {result.out}")

    def test_feed_forward_listener_quick_run(self, tmp_path):
        (result,) = _run("signalling", "--quick", "--listener", "mlp", "--out", str(tmp_path))
        assert result.config.listener == "mlp"
        assert result.frames == 3 * result.config.frames_per_batch
        agents = mappo.make_agents(result.config)
        assert not any(k[1].startswith("rs_") for k in agents["listener"].actor.in_keys)

    def test_default_folder_names_the_listener(self):
        from torchrl_ext.examples import __main__ as entry

        args = entry.make_parser().parse_args(["signalling", "--listener", "mlp"])
        assert entry.pipeline(args) == "signalling_mlp"


class TestFinishedRun:
    """``--resume`` of a finished run says it is finished and logs nothing (a killed run resumes
    bitwise: ``test_pipelines.TestResume``)."""

    def test_says_finished(self, quick_run, capsys):
        _, out = quick_run
        before = _run_folder.read_scalars(out)
        assert _run("signalling", "--resume", str(out)) == []
        assert f"{out} is finished (384 frames); pass --frames N" in capsys.readouterr().out
        assert _run_folder.read_scalars(out) == before


class TestPerGroupGAE:
    """RecurrentGAE set per group reads that group's reward and value and the shared done.

    Reference: a plain float64 loop over the values the critic produced, per group.
    """

    def test_matches_plain_loop_per_group(self):
        cfg = mappo.Config(num_envs=4, steps=10, hidden=8, delay=1)
        with torch.random.fork_rng(devices=[]):
            agents, batch = _collected(cfg)
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


class TestUpdate:
    """The update (``functional=False`` losses, ``foreach`` Adam, minibatches cut from the
    entries the losses read) computes what TorchRL's and torch's defaults compute on minibatches
    of the whole batch, bit for bit."""

    @staticmethod
    def _trained(defaults: bool, monkeypatch) -> tuple[list[torch.Tensor], dict[str, float]]:
        cfg = mappo.Config(num_envs=4, steps=8, hidden=8, delay=1, epochs=2, envs_per_minibatch=2)
        with torch.random.fork_rng(devices=[]):
            agents, batch = _collected(cfg)
            losses = {g: mappo.make_loss(cfg, g, agents[g]) for g in mappo.GROUPS}
            optim = mappo.make_optimizer(cfg, agents)
            if defaults:
                losses = {
                    g: ClipPPOLoss(agents[g].actor, agents[g].critic, clip_epsilon=cfg.clip,
                                   entropy_coeff=cfg.entropy_coeff, critic_coeff=cfg.critic_coeff,
                                   loss_critic_type="l2", normalize_advantage=True)
                    for g in mappo.GROUPS
                }  # fmt: skip
                for g, loss in losses.items():
                    loss.set_keys(action=(g, "action"), sample_log_prob=(g, "action_log_prob"),
                                  **mappo.group_keys(g))  # fmt: skip
                groups = [{"params": [*losses[g].actor_network_params.values(True, True),
                                      *losses[g].critic_network_params.values(True, True)]}
                          for g in mappo.GROUPS]  # fmt: skip
                optim = torch.optim.Adam(groups, lr=cfg.lr)
                monkeypatch.setattr(mappo._ppo, "loss_inputs", lambda batch, *_: batch)
            for g in mappo.GROUPS:
                mappo.make_gae(cfg, g, agents[g])(batch)
            stats = mappo.update(cfg, batch, losses, optim, torch.Generator().manual_seed(1))
            monkeypatch.undo()
        params = [p.detach().clone() for g in mappo.GROUPS for p in agents[g].actor.parameters()]
        return params, stats

    def test_equals_torchrl_defaults_on_whole_batch_bitwise(self, monkeypatch):
        ours, our_stats = self._trained(False, monkeypatch)
        reference, reference_stats = self._trained(True, monkeypatch)
        assert our_stats == reference_stats
        assert all(torch.equal(a, b) for a, b in zip(ours, reference, strict=True))
        cfg = mappo.Config()
        agents = mappo.make_agents(cfg)
        assert not any(mappo.make_loss(cfg, g, agents[g]).functional for g in mappo.GROUPS)
