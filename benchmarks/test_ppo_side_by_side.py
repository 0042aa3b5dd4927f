"""Smoke test and contracts of the PPO side-by-side benchmark (``ppo_side_by_side.py``).

The contract: the baselines take the PPO demo's settings unchanged; the hand-written loop
replays each stored row exactly as it acted (probability ratio 1 before any step, the same
values), and its GAE is the hand-computed one for terminated and truncated steps; ``--quick``
runs each baseline in a fresh process and prints its row; sb3-contrib's run is skipped with a
reason when it is not installed.
"""

from __future__ import annotations

import ppo_side_by_side
import pytest
import torch
from _ppo_baselines.cartpole_adapter import BatchedCartPole
from _ppo_baselines.cleanrl_lstm_ppo import Args, Batch, RecurrentNet, Rollout, gae
from tensordict import TensorDict
from torch.distributions import Categorical


def test_baseline_args_are_the_demo_settings():
    args = ppo_side_by_side.demo_args(seed=0, frames=None, quick=False)
    assert ppo_side_by_side.baseline_args(args) == Args()


def test_stored_rows_replay_the_rollout():
    args = Args(num_envs=4, num_steps=64)
    torch.manual_seed(0)
    env = BatchedCartPole(args.num_envs, 0, args.obs_scale, args.reward_scale)
    actor = RecurrentNet(2, args.hidden, args.head, 2)
    critic = RecurrentNet(2, args.hidden, args.head, 1)
    rollout = Rollout(args, env, actor, critic)
    for _ in range(2):  # the second batch starts from carried, non-zero states
        batch = rollout.collect()
    assert bool(batch.is_init.any()), "the rows should hold episode starts"
    with torch.no_grad():
        logits = actor.unroll(batch.obs, batch.actor_state, batch.is_init)
        values = critic.unroll(batch.obs, batch.critic_state, batch.is_init)
    log_probs = Categorical(logits=logits).log_prob(batch.actions)
    torch.testing.assert_close(log_probs, batch.log_probs, rtol=0, atol=1e-5)
    torch.testing.assert_close(values[..., 0], batch.values, rtol=0, atol=1e-5)


def _one_row(terminated: bool, bootstrap: float) -> Batch:
    flag = torch.tensor([[False, True, False]])
    state = (torch.zeros(1, 1), torch.zeros(1, 1))
    return Batch(
        obs=torch.zeros(1, 3, 2), is_init=torch.zeros(1, 3, dtype=torch.bool),
        actions=torch.zeros(1, 3, dtype=torch.int64), log_probs=torch.zeros(1, 3),
        values=torch.tensor([[1.0, 2.0, 3.0]]), rewards=torch.ones(1, 3),
        terminated=flag & terminated, done=flag, bootstrap=torch.tensor([[0.0, bootstrap, 0.0]]),
        next_value=torch.tensor([5.0]), actor_state=state, critic_state=state, ended_returns=[],
    )  # fmt: skip


@pytest.mark.parametrize(
    ("terminated", "bootstrap", "expected"),
    # gamma = lambda = 0.5: delta_2 = 1 + 0.5 * 5 - 3 = 0.5; the step at t = 1 ends the trace
    # and bootstraps from 0 (terminated: delta_1 = -1) or from its last observation's value 4
    # (truncated: delta_1 = 1); delta_0 = 1 + 0.5 * 2 - 1 = 1, A_0 = 1 + 0.25 * A_1.
    [(True, 0.0, [0.75, -1.0, 0.5]), (False, 4.0, [1.25, 1.0, 0.5])],
)
def test_gae_by_hand(terminated, bootstrap, expected):
    advantages, targets = gae(_one_row(terminated, bootstrap), gamma=0.5, lmbda=0.5)
    assert advantages[0].tolist() == expected
    assert targets[0].tolist() == [a + v for a, v in zip(expected, [1.0, 2.0, 3.0], strict=True)]


def _quick(pipeline: str) -> str:
    return ppo_side_by_side.main(["--quick", "--seeds", "0", "--pipelines", pipeline])


def test_quick_cleanrl():
    text = _quick("cleanrl")
    assert "| cleanrl | 0 | —" in text, text  # three batches do not reach the target


def test_quick_sb3():
    pytest.importorskip("sb3_contrib", reason="sb3-contrib not installed (the `test` extra)")
    text = _quick("sb3")
    assert "| sb3 | 0 | —" in text, text


def test_torchrl_runs_the_demo_as_stock_torchrl_builds_it(monkeypatch):
    """The variant swaps the memories' class, the loss's and Adam's settings, nothing else."""
    import ppo_cartpole
    from torchrl import modules as torchrl_modules

    class Built(Exception):
        pass

    patched = ppo_side_by_side.stock_torchrl_names(ppo_cartpole)
    demo_names = {name: getattr(ppo_cartpole, name) for name in patched}

    def train(args, run):
        actor, critic = ppo_cartpole.make_agent(args)
        loss = ppo_cartpole.make_loss(args, actor, critic)
        optim = ppo_cartpole.make_optimizer(args, loss)
        memory = type(ppo_cartpole.memories(actor, critic)[0])
        trained = {id(p) for group in optim.param_groups for p in group["params"]}
        assert trained == {id(p) for p in [*actor.parameters(), *critic.parameters()]}
        batch = TensorDict({"unread": torch.zeros(1)}, [1])
        selects = ppo_cartpole.loss_inputs is demo_names["loss_inputs"]  # (reads the loss's keys)
        whole = not selects and ppo_cartpole.loss_inputs(batch, loss) is batch
        raise Built(memory, loss.functional, optim.defaults["foreach"], whole)

    monkeypatch.setattr(ppo_cartpole, "train", train)
    args = ppo_side_by_side.demo_args(seed=0, frames=None, quick=True)
    with pytest.raises(Built) as built:
        ppo_side_by_side.run_ours(args)
    assert built.value.args[1:] == (False, True, False)
    with pytest.raises(Built) as built:
        ppo_side_by_side.run_ours(args, stock_torchrl=True)
    assert built.value.args == (torchrl_modules.LSTMModule, True, None, True)
    assert {n: getattr(ppo_cartpole, n) for n in demo_names} == demo_names, "names restored"


def test_quick_ours_and_torchrl():
    text = ppo_side_by_side.main(["--quick", "--seeds", "0", "--pipelines", "ours", "torchrl"])
    assert "| ours | 0 | —" in text and "| torchrl | 0 | —" in text, text


@pytest.mark.parametrize(
    ("status", "expected"),
    [
        ("", "torchrl_ext and examples/ at abc1234"),
        (" M examples/ppo_popgym.py\n", "torchrl_ext and examples/ at abc1234 with 1 file edited"),
        (" M a.py\n?? b.py\n", "torchrl_ext and examples/ at abc1234 with 2 files edited"),
    ],
)
def test_source_state_counts_the_edited_files(monkeypatch, status, expected):
    def run(command, **kwargs):
        out = "abc1234\n" if "rev-parse" in command else status
        return ppo_side_by_side.subprocess.CompletedProcess(command, 0, stdout=out)

    monkeypatch.setattr(ppo_side_by_side.subprocess, "run", run)
    assert ppo_side_by_side.source_state() == expected
