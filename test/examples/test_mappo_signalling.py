"""``examples/mappo_signalling.py``: its quick run, bitwise resume, the policy it saves, the
per-group GAE against a plain loop and the update against TorchRL's defaults."""

from __future__ import annotations

import math

import mappo_signalling as mappo
import pipelines
import pytest
import runs
import torch
from torchrl.collectors import Collector
from torchrl.envs.utils import ExplorationType, set_exploration_type
from torchrl.objectives import ClipPPOLoss

#: Frames between checkpoints of the quick run (one batch).
EVERY = 128


@pytest.fixture(scope="module")
def quick_run(tmp_path_factory):
    """``--quick --seeds 3`` left alone, checkpointing every batch: its result and folder."""
    out = tmp_path_factory.mktemp("signalling")
    argv = ["--quick", "--seeds", "3", "--out", str(out), "--save-every", str(EVERY)]
    (result,) = pipelines.run("mappo_signalling", *argv)
    return result, out / "seed3"


def _collected(args: mappo.Args) -> tuple[dict, object]:
    """Agents seeded with 0 and one batch of ``args``' size collected with them."""
    torch.manual_seed(0)
    agents = mappo.make_agents(args, "cpu")
    env = mappo.make_env(args, args.num_envs, 0, agents, "cpu")
    frames = args.num_envs * args.steps
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
    """``--quick`` trains 3 small batches with layout, mask and replay checks, logs both groups'
    losses, draws the learning curve and prints the summary line with the chance level."""

    def test_runs_and_counts_frames(self, quick_run):
        result, out = quick_run
        assert result.out == out and result.frames == mappo.QUICK["frames"] == 3 * 16 * 8
        assert [c[0] for c in result.curve] == [128, 256, 384]
        assert 0.0 <= result.final_eval <= 1.0
        assert runs.read_config(out)["config"]["listener"] == "lstm"

    def test_logs_both_groups_and_a_curve(self, quick_run):
        result, out = quick_run
        scalars = runs.read_scalars(out)
        assert [s for s, _ in scalars["success"]] == [128, 256, 384]
        assert scalars["final_eval"] == [(384, result.final_eval)]
        for group in mappo.GROUPS:
            assert all(math.isfinite(v) for _, v in scalars[f"{group}_loss_objective"])
            assert scalars[f"{group}_first_max_ratio"][0][1] == pytest.approx(1.0, abs=1e-3)
        assert (out / "learning_curve.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"

    def test_summary_names_listener_and_chance(self, quick_run):
        result, out = quick_run
        line = str(result)
        assert line.startswith("mappo_signalling lstm (chance 0.125) seed 3: mean return never")
        assert line.endswith(f"run folder: {out}")

    def test_finished_run_is_not_resumed(self, quick_run, capsys):
        _, out = quick_run
        before = runs.read_scalars(out)
        with pytest.raises(SystemExit) as stop:
            pipelines.run("mappo_signalling", "--resume", str(out))
        assert stop.value.code == 2
        assert "the run is finished; pass --frames N > 384" in capsys.readouterr().err
        assert runs.read_scalars(out) == before

    def test_feed_forward_listener(self, tmp_path):
        argv = ["--quick", "--listener", "mlp", "--out", str(tmp_path)]
        (result,) = pipelines.run("mappo_signalling", *argv)
        assert result.frames == mappo.QUICK["frames"]
        assert str(result).startswith("mappo_signalling mlp (chance 0.125) seed 0: ")
        agents = mappo.make_agents(mappo.Args(listener="mlp"), "cpu")
        assert not any(k[1].startswith("rs_") for k in agents["listener"].actor.in_keys)
        assert any(k[1].startswith("rs_") for k in agents["speaker"].actor.in_keys)


def test_resumes_bitwise(tmp_path, monkeypatch):
    pipelines.assert_resumes_bitwise(tmp_path, monkeypatch, "mappo_signalling", EVERY, 2 * EVERY)


def test_loaded_policy_acts_as_trained(quick_run):
    """The loaded actors, in the env ``acting_env`` makes, repeat the final evaluation."""
    result, out = quick_run
    policy, args, module = runs.load_policy(out)
    assert module is mappo and args.listener == "lstm"
    env = mappo.acting_env(args, args.eval_episodes, args.seed + 1_000_003, "cpu")
    with torch.no_grad(), set_exploration_type(ExplorationType.DETERMINISTIC):
        rollout = env.rollout(args.delay + 2, policy, break_when_any_done=False)
    for group in mappo.GROUPS:
        assert rollout[group, "action"].shape == (args.eval_episodes, args.delay + 2)
    assert float(mappo.successes(rollout).mean()) == result.final_eval


def test_help_lists_the_listener_option(capsys):
    with pytest.raises(SystemExit) as stop:
        pipelines.run("mappo_signalling", "--help")
    assert stop.value.code == 0
    assert "--listener {lstm,mlp}" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("argv", "match"),
    [
        (["--lr", "0"], "lr must be a finite number > 0"),
        (["--lmbda", "2"], "lmbda must be a finite number in [0, 1]"),
        (["--gamma", "nan"], "gamma must be a finite number in"),
        (["--target-success", "1.5"], "target_success"),
        (["--success-window", "0"], "success_window must be an integer >= 1"),
        (["--entropy-coeff", "-1"], "entropy_coeff must be a finite number >= 0"),
        (["--vocab", "1"], "vocab must be an integer in [2, 2**20]"),
        (["--delay", "-1"], "delay must be an integer in [0, 2**20]"),
        (["--envs-per-minibatch", "128"], "envs_per_minibatch must be <= num_envs"),
        (["--frames", "10"], "frames must be at least one batch"),
        (["--listener", "gru"], "invalid choice"),
    ],
)
def test_refuses_bad_arguments_in_one_line(tmp_path, capsys, argv, match):
    pipelines.assert_refused("mappo_signalling", argv, match, tmp_path, capsys)


@pytest.mark.parametrize(
    ("field", "value"),
    [("vocab", 1), ("delay", -1), ("vocab", True), ("listener", "gru"), ("success_window", 0)]
    + [("target_success", 1.5), ("envs_per_minibatch", 0), ("max_grad_norm", math.inf)],
)
def test_args_refuse_bad_values_by_name(field, value):
    with pytest.raises(ValueError, match=f"{field}={value!r}"):
        mappo.Args(**{field: value})


class TestPerGroupGAE:
    """RecurrentGAE set per group reads that group's reward and value and the shared done.

    Reference: a plain float64 loop over the values the critic produced, per group.
    """

    def test_matches_plain_loop_per_group(self):
        args = mappo.Args(num_envs=4, steps=10, hidden=8, delay=1, envs_per_minibatch=4)
        with torch.random.fork_rng(devices=[]):
            agents, batch = _collected(args)
        done = batch["next", "done"][..., 0]
        terminated = batch["next", "terminated"][..., 0]
        assert bool(done.any()) and not bool(done.all())
        for group in mappo.GROUPS:
            mappo.make_gae(args, group, agents[group])(batch)
            expected = _gae_loop(
                batch["next", group, "reward"][..., 0],
                batch[group, "state_value"][..., 0],
                batch["next", group, "state_value"][..., 0],
                terminated,
                done,
                args.gamma,
                args.lmbda,
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
        args = mappo.Args(num_envs=4, steps=8, hidden=8, delay=1, epochs=2, envs_per_minibatch=2)
        with torch.random.fork_rng(devices=[]):
            agents, batch = _collected(args)
            losses = mappo.make_losses(args, agents)
            optim = mappo.make_optimizer(args, agents)
            if defaults:
                losses = {g: _default_loss(args, g, agents[g]) for g in mappo.GROUPS}
                groups = [
                    {
                        "params": [
                            *losses[g].actor_network_params.values(True, True),
                            *losses[g].critic_network_params.values(True, True),
                        ]
                    }
                    for g in mappo.GROUPS
                ]
                optim = torch.optim.Adam(groups, lr=args.lr)
                monkeypatch.setattr(mappo, "loss_inputs", lambda batch, losses: batch)
            for g in mappo.GROUPS:
                mappo.make_gae(args, g, agents[g])(batch)
            stats = mappo.update(args, batch, losses, optim, torch.Generator().manual_seed(1))
            monkeypatch.undo()
        params = [p.detach().clone() for g in mappo.GROUPS for p in agents[g].actor.parameters()]
        return params, stats

    def test_equals_torchrl_defaults_on_whole_batch_bitwise(self, monkeypatch):
        ours, our_stats = self._trained(False, monkeypatch)
        reference, reference_stats = self._trained(True, monkeypatch)
        assert our_stats == reference_stats
        assert all(torch.equal(a, b) for a, b in zip(ours, reference, strict=True))
        args = mappo.Args()
        agents = mappo.make_agents(args, "cpu")
        assert not any(loss.functional for loss in mappo.make_losses(args, agents).values())


def _default_loss(args: mappo.Args, group: str, agent: mappo.Agent) -> ClipPPOLoss:
    """The group's ClipPPOLoss with TorchRL's defaults (functional, entropy bonus on)."""
    loss = ClipPPOLoss(
        agent.actor,
        agent.critic,
        clip_epsilon=args.clip,
        entropy_coeff=args.entropy_coeff,
        critic_coeff=args.critic_coeff,
        loss_critic_type="l2",
        normalize_advantage=True,
    )
    keys = mappo.group_keys(group)
    loss.set_keys(action=(group, "action"), sample_log_prob=(group, "action_log_prob"), **keys)
    return loss
