import pickle

import pytest
import torch
from scipy import stats
from signalling_reference import Game, target_of
from torchrl.collectors import Collector
from torchrl.envs import EnvBase, InitTracker, TransformedEnv
from torchrl.envs.utils import check_env_specs

from torchrl_ext.envs import SignallingEnv


class _StockSignalling(SignallingEnv):
    """The same kernels behind TorchRL's generic step / partial-reset merge (the oracle path)."""

    _step_and_maybe_reset = EnvBase._step_and_maybe_reset


def _actions(root, speaker, listener):
    root["speaker", "action"] = torch.as_tensor(speaker, dtype=torch.int64)
    root["listener", "action"] = torch.as_tensor(listener, dtype=torch.int64)
    return root


def _random_play(env, steps, generator):
    """Fused steps with random actions; yields (actions, step td, next root)."""
    root = env.reset()
    n = env.num_envs
    for _ in range(steps):
        speaker = torch.randint(0, env.vocab, (n,), generator=generator)
        listener = torch.randint(0, env.vocab, (n,), generator=generator)
        td, root = env.step_and_maybe_reset(_actions(root, speaker, listener))
        yield speaker, listener, td, root


def _one_hot(index, size):
    return torch.nn.functional.one_hot(torch.as_tensor(index).long(), size).float()


class TestSignallingEnv:
    """SignallingEnv is the speaker-listener game in TorchRL's multi-agent layout.

    Exact cases: the speaker sees one_hot(target) on step 0 only; the listener sees the token only
    on step 1 and its answer flag only on step delay + 1; the answer step pays 1 for the target,
    else 0, and ends the episode. Reference: a Python game with its own hash agrees step by step,
    auto-resets included. Statistics: targets are uniform over V. State: state_dict restores
    bitwise; graph replay equals eager launches bitwise. Bad arguments raise naming the argument.
    """

    def test_layout_and_specs(self):
        for rewards in ("shared", "per_agent"):
            env = SignallingEnv(5, seed=0, vocab=6, delay=1, rewards=rewards)
            check_env_specs(env)
            assert set(env.action_keys) == {("speaker", "action"), ("listener", "action")}
            assert env.done_keys == ["done", "terminated", "truncated"]
            expected = (
                {"reward"}
                if rewards == "shared"
                else {
                    ("speaker", "reward"),
                    ("listener", "reward"),
                }
            )
            assert set(env.reward_keys) == expected
            root = env.reset()
            assert root["speaker", "observation"].shape == (5, 6)
            assert root["listener", "observation"].shape == (5, 7)

    def test_speaker_observes_target_listener_blank_at_start(self):
        env = SignallingEnv(6, seed=3, vocab=4, delay=2)
        root = env.reset()
        assert torch.equal(root["speaker", "observation"], _one_hot(env.target.long(), 4))
        assert not root["listener", "observation"].any()

    def test_token_shown_only_on_step_one_flag_on_answer_step(self):
        env = SignallingEnv(2, seed=0, vocab=5, delay=3)
        root = env.reset()
        assert torch.equal(root["speaker", "observation"], _one_hot(env.target, 5))
        seen = []
        for step in range(env.max_steps):
            td, root = env.step_and_maybe_reset(_actions(root, [2, 4], [0, 0]))
            seen.append(td["next", "listener", "observation"])
            # the speaker's later actions are ignored: the token stays the first one
            assert env.token.tolist() == ([2, 4] if step < env.max_steps - 1 else [-1, -1])
            # the speaker saw the target at step 0 only
            assert not td["next", "speaker", "observation"].any()
        token_part = [obs[:, :5] for obs in seen]
        assert torch.equal(token_part[0], _one_hot(torch.tensor([2, 4]), 5))
        assert all(not part.any() for part in token_part[1:])
        flags = [obs[:, 5].tolist() for obs in seen]
        assert flags == [[0.0, 0.0], [0.0, 0.0], [0.0, 0.0], [1.0, 1.0], [0.0, 0.0]]

    def test_delay_zero_shows_token_and_flag_together(self):
        env = SignallingEnv(1, seed=0, vocab=3, delay=0)
        td = env.step(_actions(env.reset(), [1], [0]))
        assert td["next", "listener", "observation"].tolist() == [[0.0, 1.0, 0.0, 1.0]]

    @pytest.mark.parametrize("rewards", ["shared", "per_agent"])
    def test_reward_right_and_wrong_answers(self, rewards):
        env = SignallingEnv(4, seed=5, vocab=3, delay=1, rewards=rewards)
        root = env.reset()
        target = env.target.long()
        answer = torch.where(torch.arange(4) % 2 == 0, target, (target + 1) % 3)
        rewards_seen, dones = [], []
        for _ in range(env.max_steps):
            td, root = env.step_and_maybe_reset(_actions(root, target, answer))
            keys = (
                [("next", "reward")]
                if rewards == "shared"
                else [("next", g, "reward") for g in ("speaker", "listener")]
            )
            values = [td[key] for key in keys]
            assert all(torch.equal(v, values[0]) for v in values)
            rewards_seen.append(values[0].flatten().tolist())
            dones.append(td["next", "done"].flatten().tolist())
        assert rewards_seen == [[0.0] * 4, [0.0] * 4, [1.0, 0.0, 1.0, 0.0]]
        assert dones == [[False] * 4, [False] * 4, [True] * 4]
        assert not td["next", "truncated"].any()
        assert torch.equal(td["next", "terminated"], td["next", "done"])

    def test_done_every_episode_length_steps(self):
        env = SignallingEnv(3, seed=1, vocab=4, delay=2)
        done = torch.stack(
            [
                td["next", "done"]
                for *_, td, _ in _random_play(env, 20, torch.Generator().manual_seed(0))
            ],
            1,
        )[..., 0]
        expected = torch.arange(20) % env.max_steps == env.max_steps - 1
        assert torch.equal(done, expected.expand(3, 20))

    @pytest.mark.parametrize(("vocab", "delay", "seed"), [(2, 0, 0), (5, 1, 2**33 + 7), (8, 3, 9)])
    def test_matches_python_reference(self, vocab, delay, seed):
        n, steps = 6, 40
        env = SignallingEnv(n, seed=seed, vocab=vocab, delay=delay, rewards="shared")
        games = [Game(seed, i, vocab, delay) for i in range(n)]
        for game in games:
            game.begin()
        gen = torch.Generator().manual_seed(seed % 1000)
        for speaker, listener, td, root in _random_play(env, steps, gen):
            for i, game in enumerate(games):
                out = game.play(int(speaker[i]), int(listener[i]))
                assert td["next", "speaker", "observation"][i].tolist() == out["speaker"]
                assert td["next", "listener", "observation"][i].tolist() == out["listener"]
                assert td["next", "reward"][i].item() == out["reward"]
                assert bool(td["next", "done"][i]) == out["done"]
                if out["done"]:
                    game.begin()
                speaker_obs, listener_obs = game.observe()
                assert root["speaker", "observation"][i].tolist() == speaker_obs
                assert root["listener", "observation"][i].tolist() == listener_obs
                assert int(env.target[i]) == game.target

    def test_masked_reset_draws_fresh_targets_only_where_masked(self):
        env = SignallingEnv(6, seed=4, vocab=1000, delay=1)
        env.reset()
        before, episode = env.target.clone(), env.buffers["episode"].numpy().copy()
        mask = torch.tensor([True, False, True, False, False, True])
        root = env.reset(env.reset().set("_reset", mask))
        changed = torch.tensor(
            [target_of(4, i, int(episode[i]) + 1, 1000) for i in range(6)], dtype=torch.int32
        )
        # the first reset() above already began episode 1 everywhere; the masked one episode 2
        assert torch.equal(env.target[~mask], target_of_all(4, 6, 1, 1000)[~mask])
        assert torch.equal(env.target[mask], changed[mask])
        assert torch.equal(root["speaker", "observation"], _one_hot(env.target.long(), 1000))
        assert not torch.equal(before, env.target)

    @pytest.mark.parametrize("seed", [0, 1, 2])
    def test_targets_uniform_chi_square(self, seed):
        vocab, n, episodes = 8, 64, 100
        env = SignallingEnv(n, seed=seed, vocab=vocab, delay=0)
        targets = [env.target.clone() for _ in [env.reset()]]
        for *_, td, _ in _random_play(env, 2 * episodes, torch.Generator().manual_seed(seed)):
            if bool(td["next", "done"].all()):
                targets.append(env.target.clone())
        counts = torch.bincount(torch.cat(targets).long(), minlength=vocab).numpy()
        assert counts.sum() == n * (episodes + 1)
        assert stats.chisquare(counts).pvalue > 0.01

    def test_same_seed_same_targets_other_seed_other_targets(self):
        runs = []
        for seed in (7, 7, 2**32 + 7):
            env = SignallingEnv(32, seed=seed, vocab=50)
            env.reset()
            runs.append(env.target.clone())
        assert torch.equal(runs[0], runs[1])
        assert not torch.equal(runs[0], runs[2])

    def test_state_dict_round_trip_bitwise(self):
        def run(env, root, steps=13):
            outs = []
            for speaker, listener in actions[:steps]:
                td, root = env.step_and_maybe_reset(_actions(root.clone(), speaker, listener))
                outs.append(td["next"].clone())
            return torch.stack(outs, 1)

        gen = torch.Generator().manual_seed(0)
        actions = [(torch.randint(0, 4, (5,), generator=gen),) * 2 for _ in range(13)]
        env = SignallingEnv(5, seed=11, vocab=4, delay=2)
        root = env.reset()
        for speaker, listener in actions[:6]:
            _, root = env.step_and_maybe_reset(_actions(root, speaker, listener))
        saved, copied = env.state_dict(), pickle.loads(pickle.dumps(env))
        assert set(saved) >= {"target", "token", "steps", "episode", "seed"}
        end = run(env, root)
        fresh = SignallingEnv(5, seed=0, vocab=4, delay=2)
        fresh.load_state_dict(saved)
        for other in (fresh, copied):
            assert (run(other, root) == end).all()

    def test_state_dict_refuses_unreachable_target(self):
        env = SignallingEnv(3, seed=0, vocab=4)
        env.reset()
        state = env.state_dict()
        state["target"][1] = 4
        before = env.state_dict()
        with pytest.raises(ValueError, match="target"):
            env.load_state_dict(state)
        state = env.state_dict()
        state["token"][0] = -2
        with pytest.raises(ValueError, match="token"):
            env.load_state_dict(state)
        after = env.state_dict()
        assert all(torch.equal(before[k], after[k]) for k in before)

    def test_graph_replay_equals_eager_bitwise(self):
        runs = []
        for capture in (False, True):
            env = SignallingEnv(7, seed=3, vocab=5, delay=1, capture=capture)
            plays = _random_play(env, 25, torch.Generator().manual_seed(1))
            runs.append([(td["next"], root) for *_, td, root in plays])
        for (eager_next, eager_root), (graph_next, graph_root) in zip(*runs, strict=True):
            assert (eager_next == graph_next).all()
            assert (
                eager_root.exclude("listener", "speaker")
                == graph_root.exclude("listener", "speaker")
            ).all()
            for group in ("speaker", "listener"):
                assert torch.equal(
                    eager_root[group, "observation"], graph_root[group, "observation"]
                )

    def test_plain_step_and_torchrl_rollout(self):
        env = TransformedEnv(SignallingEnv(4, seed=0, vocab=3, delay=1), InitTracker())
        data = env.rollout(9, break_when_any_done=False)
        assert data.shape == (4, 9)
        done = data["next", "done"][..., 0]
        assert torch.equal(data["is_init"][:, 1:, 0], done[:, :-1])
        assert torch.equal(done, (torch.arange(9) % 3 == 2).expand(4, 9))

    @pytest.mark.parametrize("rewards", ["shared", "per_agent"])
    def test_rollout_fast_path_equals_generic_steps(self, rewards):
        """The one-kernel rollout equals TorchRL's generic step-then-reset on the same actions."""
        fast = SignallingEnv(6, seed=3, vocab=4, delay=1, rewards=rewards)
        stock = _StockSignalling(6, seed=3, vocab=4, delay=1, rewards=rewards)
        data = fast.rollout(20, break_when_any_done=False)
        assert data.names[-1] == "time"
        root = stock.reset()
        for t in range(20):
            for group in ("speaker", "listener"):
                root[group, "action"] = data[group, "action"][:, t]
            step, root = stock.step_and_maybe_reset(root)
            now = data[:, t]
            for key in step.keys(True, True):
                assert torch.equal(now.get(key), step.get(key)), (t, key)
        assert torch.equal(fast.target, stock.target)
        assert torch.equal(fast.token, stock.token)
        assert int(data["next", "done"].sum()) == 6 * 6

    def test_collector_batches_groups(self):
        env = SignallingEnv(4, seed=0, vocab=3, delay=1)
        collector = Collector(env, None, frames_per_batch=24, total_frames=24)
        batch = next(iter(collector))
        collector.shutdown()
        assert batch.shape == (4, 6)
        assert batch["next", "listener", "reward"].shape == (4, 6, 1)
        assert batch["speaker", "observation"].shape == (4, 6, 3)

    @pytest.mark.parametrize(
        ("kwargs", "error", "match"),
        [
            ({"vocab": 1}, ValueError, "vocab"),
            ({"vocab": 2.0}, TypeError, "vocab"),
            ({"delay": -1}, ValueError, "delay"),
            ({"delay": True}, TypeError, "delay"),
            ({"rewards": "team"}, ValueError, "rewards"),
            ({"rewards": 1}, TypeError, "rewards"),
        ],
    )
    def test_bad_constructor_arguments(self, kwargs, error, match):
        with pytest.raises(error, match=match):
            SignallingEnv(2, seed=0, **kwargs)

    def test_missing_group_action_raises(self):
        env = SignallingEnv(2, seed=0, vocab=3)
        root = env.reset()
        root["speaker", "action"] = torch.zeros(2, dtype=torch.int64)
        with pytest.raises(TypeError, match=r"listener\.action must be a torch\.Tensor"):
            env.step_and_maybe_reset(root)

    @pytest.mark.parametrize(
        ("group", "value", "error", "match"),
        [
            ("speaker", torch.tensor([0, 3]), ValueError, r"speaker\.action entries"),
            ("listener", torch.tensor([-1, 0]), ValueError, r"listener\.action entries"),
            ("listener", torch.tensor([0.0, 1.0]), TypeError, r"listener\.action must have dtype"),
            (
                "speaker",
                torch.zeros(2, 1, dtype=torch.int64),
                ValueError,
                r"speaker\.action must have shape",
            ),
        ],
    )
    def test_bad_actions_raise_before_stepping(self, group, value, error, match):
        env = SignallingEnv(2, seed=0, vocab=3)
        root = _actions(env.reset(), [0, 0], [0, 0])
        before = env.state_dict()
        td = root.clone().set((group, "action"), value)
        for call in (env.step, env.step_and_maybe_reset):
            with pytest.raises(error, match=match):
                call(td)
        after = env.state_dict()
        assert all(torch.equal(before[k], after[k]) for k in before)


def target_of_all(seed, n, episode, vocab):
    return torch.tensor([target_of(seed, i, episode, vocab) for i in range(n)], dtype=torch.int32)
