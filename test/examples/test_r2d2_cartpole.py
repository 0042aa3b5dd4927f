"""Tests of the R2D2-style example: n-step targets, the recurrent unroll, the quick run."""

from __future__ import annotations

import math

import pytest
import torch
from tensordict import TensorDict

from torchrl_ext.examples import r2d2_cartpole as r2d2
from torchrl_ext.examples.r2d2_cartpole import RecurrentQNet, n_step_targets


def slow_n_step_targets(reward, terminated, done, valid, next_value, gamma, n_step):
    """The obvious loop: sum rewards until n records, a done, an invalid record or the end."""
    batch, size = reward.shape
    out = torch.zeros(batch, size, dtype=torch.float64)
    for b in range(batch):
        for t in range(size):
            if not valid[b, t]:
                continue
            total, last = 0.0, t
            for k in range(n_step):
                j = t + k
                if j >= size or not valid[b, j]:
                    break
                total += gamma**k * float(reward[b, j])
                last = j
                if done[b, j]:
                    break
            if not terminated[b, last]:
                total += gamma ** (last - t + 1) * float(next_value[b, last])
            out[b, t] = total
    return out


def _flags(rows):
    return torch.tensor(rows, dtype=torch.bool)


class TestNStepTargets:
    """``n_step_targets`` equals the slow loop: bootstrap on truncation and at invalid records
    or the window's end, never after a termination."""

    def test_terminated_does_not_bootstrap(self):
        reward = torch.tensor([[1.0, 2.0, 3.0]])
        term = _flags([[False, True, False]])
        valid = torch.ones(1, 3, dtype=torch.bool)
        value = torch.tensor([[10.0, 20.0, 30.0]])
        out = n_step_targets(reward, term, term, valid, value, 0.5, 3)
        # t=0: 1 + 0.5*2 (terminated at 1); t=1: 2; t=2: 3 + 0.5*30 (window end)
        assert out.tolist() == [[2.0, 2.0, 18.0]]

    def test_truncated_bootstraps_from_its_next_value(self):
        reward = torch.tensor([[1.0, 2.0, 3.0]])
        term = _flags([[False, False, False]])
        done = _flags([[False, True, False]])
        valid = _flags([[True, True, False]])
        value = torch.tensor([[10.0, 20.0, 30.0]])
        out = n_step_targets(reward, term, done, valid, value, 0.5, 3)
        # t=0: 1 + 0.5*2 + 0.25*20 (truncated at 1, its next value); t=2 invalid -> 0
        assert out.tolist() == [[7.0, 12.0, 0.0]]

    def test_invalid_padding_ends_the_sum(self):
        reward = torch.tensor([[1.0, 1.0, 5.0, 5.0]])
        no = _flags([[False] * 4])
        valid = _flags([[True, True, False, False]])
        value = torch.tensor([[2.0, 4.0, 100.0, 100.0]])
        out = n_step_targets(reward, no, no, valid, value, 1.0, 3)
        assert out.tolist() == [[6.0, 5.0, 0.0, 0.0]]

    def test_one_step_is_td0(self):
        gen = torch.Generator().manual_seed(0)
        reward, value = torch.rand(3, 5, generator=gen), torch.rand(3, 5, generator=gen)
        term = torch.rand(3, 5, generator=gen) < 0.3
        valid = torch.ones(3, 5, dtype=torch.bool)
        out = n_step_targets(reward, term, term, valid, value, 0.9, 1)
        torch.testing.assert_close(out, reward + 0.9 * value * ~term)

    @pytest.mark.parametrize("n_step", [1, 2, 3, 5, 12])
    @pytest.mark.parametrize("seed", range(4))
    def test_matches_slow_loop(self, n_step, seed):
        gen = torch.Generator().manual_seed(seed)
        batch, size = 6, 9
        reward = torch.randn(batch, size, generator=gen)
        value = torch.randn(batch, size, generator=gen)
        terminated = torch.rand(batch, size, generator=gen) < 0.15
        truncated = torch.rand(batch, size, generator=gen) < 0.15
        done = terminated | truncated
        # pad-style validity: an invalid prefix and suffix, plus a few random holes
        valid = torch.rand(batch, size, generator=gen) > 0.15
        valid[0, :3] = False
        valid[1, 6:] = False
        expected = slow_n_step_targets(reward, terminated, done, valid, value, 0.97, n_step)
        out = n_step_targets(reward, terminated, done, valid, value, 0.97, n_step)
        torch.testing.assert_close(out.double(), expected, rtol=1e-5, atol=1e-5)

    def test_rejects_bad_n_step(self):
        x = torch.zeros(1, 2)
        flags = torch.zeros(1, 2, dtype=torch.bool)
        with pytest.raises(ValueError, match="n_step=0"):
            n_step_targets(x, flags, flags, ~flags, x, 0.9, 0)


def _actor_replay(net, obs, resets, state):
    """Steps the actor record by record, zeroing the state where ``resets`` is set.

    Returns the Q-values and the state each record started from (what the actor stores).
    """
    qs, inputs = [], []
    for t in range(obs.shape[1]):
        if t > 0:
            keep = (~resets[:, t]).float().unsqueeze(-1)
            state = (state[0] * keep, state[1] * keep)
        inputs.append(state)
        q, state = net.step(obs[:, t], state)
        qs.append(q)
    return torch.stack(qs, 1), inputs


class TestRecurrentQNet:
    """The learner's packed burn-in and window unroll reproduce the actor's record-by-record
    stepping, from stored states and across the resets a pad window carries."""

    @pytest.fixture
    def net(self):
        with torch.random.fork_rng():
            torch.manual_seed(0)
            return RecurrentQNet(2, 2, 8)

    def test_burn_in_matches_stepping(self, net):
        gen = torch.Generator().manual_seed(1)
        obs = torch.randn(5, 7, 2, generator=gen)
        is_init = torch.zeros(5, 7, dtype=torch.bool)
        is_init[:, 0] = True
        is_init[1, 2] = True
        is_init[2, 6] = True
        is_init[3, 1] = is_init[3, 4] = True
        state = (torch.randn(5, 8, generator=gen), torch.randn(5, 8, generator=gen))
        with torch.no_grad():
            got = net.burn_in(obs[:, :6], is_init[:, :6], state)
            _, inputs = _actor_replay(net, obs, is_init, state)
        before_reset = (~is_init[:, 6]).float().unsqueeze(-1)
        torch.testing.assert_close(got[0] * before_reset, inputs[6][0])
        torch.testing.assert_close(got[1] * before_reset, inputs[6][1])

    def test_window_q_matches_stepping(self, net):
        """Three rows of one actor trajectory each, sampled as pad windows: full, burn-in
        clamped before an episode start (at record 2), and padded after an episode end
        (record 4); the padded row's first invalid column values record 4's next observation."""
        burn_in, size = 3, 7
        gen = torch.Generator().manual_seed(2)
        obs = torch.randn(3, size + 1, 2, generator=gen)  # obs[:, t + 1] follows record t
        episode_start = torch.zeros(3, size + 1, dtype=torch.bool)
        episode_start[1, 2] = True
        stored = (torch.randn(3, 8, generator=gen), torch.randn(3, 8, generator=gen))
        with torch.no_grad():
            q_all, inputs = _actor_replay(net, obs, episode_start, stored)
        # what Sequence(pad) returns: clamped record numbers and validity
        records = torch.arange(size).repeat(3, 1)
        records[1, :2] = 2
        records[2, 5:] = 4
        valid = records == torch.arange(size)
        is_init = torch.zeros(3, size, dtype=torch.bool)
        is_init[:, 0] = is_init[1, 2] = True
        done = torch.zeros(3, size, dtype=torch.bool)
        done[2, 4:] = True
        rows = torch.arange(3).unsqueeze(1)
        h = torch.stack([s[0] for s in inputs[:size]], 1)
        c = torch.stack([s[1] for s in inputs[:size]], 1)
        sample = TensorDict(
            {
                "observation": obs[rows, records],
                ("next", "observation"): obs[rows, records + 1],
                "is_init": is_init,
                "validity_mask": valid,
                ("next", "done"): done,
                "recurrent_state_h": h[rows, records],
                "recurrent_state_c": c[rows, records],
            },
            [3, size],
        )
        with torch.no_grad():
            got = net.window_q(sample, burn_in)
        assert got.shape == (3, size - burn_in + 1, 2)
        # rows 0 and 1 continue the trajectory; the extra column is record 6's next observation
        torch.testing.assert_close(got[:2], q_all[:2, burn_in:])
        # row 2: records 3 and 4, then record 4's next observation (obs[:, 5])
        torch.testing.assert_close(got[2, :3], q_all[2, burn_in : burn_in + 3])

    def _window(self, net, burn_in, valid, done):
        batch, size = valid.shape
        gen = torch.Generator().manual_seed(3)
        obs = torch.randn(batch, size + 1, 2, generator=gen)
        is_init = torch.zeros(batch, size, dtype=torch.bool)
        is_init[:, 0] = True
        zeros = torch.zeros(batch, size, 8)
        sample = TensorDict(
            {
                "observation": obs[:, :size],
                ("next", "observation"): obs[:, 1:],
                "is_init": is_init,
                "validity_mask": valid,
                ("next", "done"): done,
                "recurrent_state_h": zeros,
                "recurrent_state_c": zeros.clone(),
            },
            [batch, size],
        )
        return sample, obs, is_init, None

    def test_obs_scale_divides_inputs(self, net):
        scaled = RecurrentQNet(2, 2, 8, obs_scale=(2.0, 0.5))
        scaled.load_state_dict(net.state_dict() | {"obs_scale": scaled.obs_scale})
        obs = torch.tensor([[1.0, 0.25]])
        torch.testing.assert_close(scaled.embed(obs), net.embed(torch.tensor([[0.5, 0.5]])))
        with pytest.raises(ValueError, match="obs_scale"):
            RecurrentQNet(2, 2, 8, obs_scale=(1.0, 0.0))

    def test_window_q_rejects_crossing_windows(self, net):
        valid = torch.ones(2, 5, dtype=torch.bool)
        sample, *_ = self._window(net, 1, valid, torch.zeros(2, 5, dtype=torch.bool))
        sample["is_init"][0, 3] = True
        with pytest.raises(ValueError, match="burn_in=1"):
            net.window_q(sample, 1)


class TestQuickRun:
    """``--quick`` trains a few iterations end to end and passes its own shape/mask checks."""

    def test_quick_main(self, tmp_path):
        result = r2d2.main(["--quick", "--seed", "3", "--out", str(tmp_path), "--no-progress"])
        assert math.isfinite(result.last_loss)
        assert (tmp_path / "r2d2_cartpole_seed3.csv").read_text().startswith("frames,")
        assert (tmp_path / "r2d2_cartpole_seed3.png").stat().st_size > 0
        assert result.frames >= r2d2.quick_config(3).max_frames
        table = r2d2.summarize(tmp_path)
        assert table.splitlines()[2].startswith("| 3 | ")
        assert (tmp_path / "r2d2_cartpole_seeds.png").stat().st_size > 0

    def test_summarize_needs_results(self, tmp_path):
        with pytest.raises(FileNotFoundError, match="train first"):
            r2d2.summarize(tmp_path)

    def test_check_quick_catches_bad_samples(self):
        cfg = r2d2.quick_config(0)
        result = r2d2.train(cfg, progress=False)
        result.last_sample["learning_mask"][0, cfg.burn_in] = False
        with pytest.raises(AssertionError, match="learning_mask"):
            r2d2.check_quick(result, cfg)

    def test_config_validates(self):
        with pytest.raises(ValueError, match="n_step=0"):
            r2d2.R2D2Config(n_step=0)
        with pytest.raises(ValueError, match="gamma"):
            r2d2.R2D2Config(gamma=1.5)


class TestEpsilons:
    """Exploration decays linearly from ``eps_start`` and never drops below the lane ladder."""

    def test_start_and_end(self):
        cfg = r2d2.R2D2Config(num_envs=4, eps_frames=100, eps_end=0.0, eps_lanes=0.5)
        assert r2d2.epsilons(cfg, 0).tolist() == [1.0] * 4
        late = r2d2.epsilons(cfg, 1000)
        torch.testing.assert_close(late, torch.tensor([0.5, 0.5 ** (5 / 3), 0.5 ** (7 / 3), 0.125]))
        assert (late[:-1] > late[1:]).all()

    def test_halfway(self):
        cfg = r2d2.R2D2Config(num_envs=2, eps_frames=100, eps_end=0.0, eps_lanes=0.1)
        assert r2d2.epsilons(cfg, 50).tolist() == [0.5, 0.5]
