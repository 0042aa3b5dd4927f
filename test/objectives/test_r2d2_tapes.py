"""Tests for R2D2Loss on tapes (``sample_unit="tape"``): whole episodes laid end to end.

An exact hand-computed tape (a Q-table network); an independent float64 oracle that replays
each episode of a real Tape sample on its own (found by the sample's ``"sequence_id"``, which
the loss does not read), builds its n-step double-Q targets with the bootstrap at the
episode's end from its own next observation, and averages per episode; and the refusals.
"""

from __future__ import annotations

import pytest
import torch
from tensordict import TensorDict
from test_r2d2_loss import (
    ONLINE,
    TARGET,
    double_parts,
    ffm_episodes,
    ffm_network,
    h,
    h_inv,
    lstm_network,
    random_episodes,
    replay_row,
    replay_row_ffm,
    table_loss,
)
from torchrl.data import LazyTensorStorage, TensorDictPrioritizedReplayBuffer

from torchrl_ext.data import Tape
from torchrl_ext.modules import LSTMModule as WholeRowLSTMModule
from torchrl_ext.objectives import R2D2Loss

pytestmark = pytest.mark.filterwarnings("ignore:No target network updater:UserWarning")


def tape_buffer(data, length=24, rows=4, seed=0, alpha=0.7) -> TensorDictPrioritizedReplayBuffer:
    rb = TensorDictPrioritizedReplayBuffer(
        alpha=alpha,
        beta=0.5,
        storage=LazyTensorStorage(data.shape[0]),
        sample_unit=Tape(length, rows=rows, priority_reduction="mixture"),
        batch_size=2 * rows * length // 8,
        priority_key="td_error",
        generator=torch.Generator().manual_seed(seed),
    )
    rb.extend(data)
    gen = torch.Generator().manual_seed(seed + 100)
    rb.update_priority(torch.arange(data.shape[0]), torch.rand(data.shape[0], generator=gen) + 0.1)
    return rb


# ---------------------------------------------------------------- the oracle
def tape_oracle(online, target, sample, n_step, gamma, replay, rescale=True):
    """R2D2's tape loss and |TD| per record, one episode and one record at a time, float64.

    Each episode (a run of one ``sequence_id``) is replayed alone from the stored state at its
    first record; its targets sum rewards inside the episode only and bootstrap from the
    value of the last summed record's own next observation. The loss is the mean over
    episodes of the episode's weight times its mean squared TD error.
    """
    td_error = torch.zeros(sample.shape, dtype=torch.float64)
    per_episode = []
    for b in range(sample.shape[0]):
        ids = sample["sequence_id"][b]
        for episode in ids[ids >= 0].unique().tolist():
            cols = (ids == episode).nonzero().squeeze(-1)
            rec = sample[b, cols]
            q, q_next = replay(online, rec, 0, True)
            with torch.no_grad():
                _, target_next = replay(target, rec, 0, True)
            done = rec["next", "done"].squeeze(-1)
            terminated = rec["next", "terminated"].squeeze(-1)
            reward = rec["next", "reward"].squeeze(-1).double()
            squares = []
            for t in range(len(cols)):
                total, discount, last = 0.0, 1.0, t
                for j in range(t, min(t + n_step, len(cols))):
                    total += discount * float(reward[j])
                    discount *= gamma
                    last = j
                    if done[j]:
                        break
                boot = 0.0
                if not terminated[last]:
                    value = float(target_next[last][int(q_next[last].argmax())])
                    boot = discount * (h_inv(value) if rescale else value)
                y = h(total + boot) if rescale else total + boot
                td = y - q[t][int(rec["action"][t])]
                td_error[b, cols[t]] = abs(float(td.detach()))
                squares.append(td**2)
            weight = float(rec["priority_weight"][0])
            per_episode.append(weight * torch.stack(squares).mean())
    return 0.5 * torch.stack(per_episode).mean(), td_error


def lstm(seed):
    return lstm_network(seed), random_episodes, replay_row


def whole_row_lstm(seed, monkeypatch):
    import test_r2d2_loss

    monkeypatch.setattr(test_r2d2_loss, "LSTMModule", WholeRowLSTMModule)
    return lstm_network(seed), random_episodes, replay_row


def ffm(seed):
    return ffm_network(seed), ffm_episodes, replay_row_ffm


def setup(memory, seed, monkeypatch):
    """``(online net and parts, target net and parts, episodes, oracle replay)``."""
    if memory == "whole_row_lstm":
        make = lambda s: whole_row_lstm(s, monkeypatch)  # noqa: E731
    else:
        make = {"lstm": lstm, "ffm": ffm}[memory]
    (net, parts), data, replay = make(seed)
    (target_net, target_parts), _, _ = make(seed + 1000)
    return net, parts, target_net, target_parts, data, replay


# ---------------------------------------------------------------- tests
def hand_tape() -> TensorDict:
    """One tape of 5 records: episode A (records 0-1, truncated at 1, whose next observation
    is id 4, not record 2's), episode B (records 2-3, terminated at 3) and a masked tail."""
    flags = torch.zeros(1, 5, 1, dtype=torch.bool)
    done, terminated = flags.clone(), flags.clone()
    done[0, [1, 3, 4]] = True
    terminated[0, [3, 4]] = True
    return TensorDict(
        {
            "observation": torch.tensor([[0.0, 1.0, 2.0, 3.0, 3.0]]).unsqueeze(-1),
            "action": torch.tensor([[0, 1, 0, 1, 1]]),
            "is_init": torch.tensor([[True, False, True, False, True]]),
            "validity_mask": torch.tensor([[True, True, True, True, False]]),
            "next": {
                "observation": torch.tensor([[1.0, 4.0, 3.0, 0.0, 0.0]]).unsqueeze(-1),
                "reward": torch.tensor([[1.0, 2.0, 3.0, 4.0, 4.0]]).unsqueeze(-1),
                "done": done,
                "terminated": terminated,
            },
        },
        [1, 5],
    )


def tape_table_loss(**kwargs):
    return table_loss(ONLINE, TARGET, burn_in=0, sample_unit="tape", **kwargs)


class TestR2D2LossTapeHandComputed:
    """A tape's targets worked out by hand (gamma = 0.5, n_step = 2, no rescaling).

    Record 0: 1 + 0.5 * 2 + 0.25 * Qt(4)[argmax Qo(4) = 1] = 27 (the sum stops at episode A's
    end and bootstraps from record 1's own next observation); record 1: 2 + 0.5 * 100 = 52;
    record 2: 3 + 0.5 * 4 = 5 and record 3: 4 (terminated); the tail: 0. The taken actions'
    online values are 0, so |TD| = target.
    """

    def test_targets_and_loss(self):
        loss = tape_table_loss(n_step=2, gamma=0.5)
        sample = hand_tape()
        out = loss(sample)
        assert sample["td_error"].tolist() == [[27.0, 52.0, 5.0, 4.0, 0.0]]
        expected = 0.5 * ((27.0**2 + 52.0**2) / 2 + (5.0**2 + 4.0**2) / 2) / 2
        assert out["loss"].item() == pytest.approx(expected)

    def test_sum_stops_at_an_episode_end_without_done(self):
        """Episode A still running where the tape moves on (no done): record 1 bootstraps
        from its own next observation instead of summing episode B's reward."""
        sample = hand_tape()
        sample["next", "done"][0, 1] = False
        tape_table_loss(n_step=2, gamma=0.5)(sample)
        assert sample["td_error"].tolist() == [[27.0, 52.0, 5.0, 4.0, 0.0]]

    def test_one_tape_without_rows(self):
        loss = tape_table_loss(n_step=2, gamma=0.5)
        sample = hand_tape()[0]
        loss(sample)
        assert sample["td_error"].tolist() == [27.0, 52.0, 5.0, 4.0, 0.0]

    def test_episode_weights(self):
        loss = tape_table_loss(n_step=2, gamma=0.5)
        sample = hand_tape()
        sample["priority_weight"] = torch.tensor([[0.5, 0.5, 2.0, 2.0, 2.0]])
        out = loss(sample)
        expected = 0.5 * (0.5 * (27.0**2 + 52.0**2) / 2 + 2.0 * (5.0**2 + 4.0**2) / 2) / 2
        assert out["loss"].item() == pytest.approx(expected)


class TestR2D2LossTapeOracle:
    """Loss, |TD| per record and gradients equal a float64 oracle that replays each episode
    of a real Tape sample alone (several episodes per tape, truncated and terminated ends,
    the newest episode still running, masked tails), for LSTM, whole-row LSTM and FFM memories."""

    @pytest.mark.parametrize("memory", ["lstm", "whole_row_lstm", "ffm"])
    @pytest.mark.parametrize("seed", [0, 1])
    def test_matches_oracle(self, memory, seed, monkeypatch):
        n_step, gamma = 3, 0.9
        net, online, target_net, target, episodes, replay = setup(memory, seed, monkeypatch)
        data = episodes(seed)
        sample = tape_buffer(data, seed=seed).sample()
        assert bool((~sample["validity_mask"]).any())  # a masked tail
        assert bool((sample["is_init"] & sample["validity_mask"])[:, 1:].any())  # 2+ episodes
        truncated = sample["next", "done"] & ~sample["next", "terminated"]
        assert bool((truncated.squeeze(-1) & sample["validity_mask"]).any())
        loss = R2D2Loss(net, n_step=n_step, gamma=gamma, sample_unit="tape")
        loss.target_value_network_params.data.update_(TensorDict.from_module(target_net).data)
        out = loss(sample)
        out["loss"].backward()
        ref_online = double_parts(online)
        ref_loss, ref_td = tape_oracle(
            ref_online, double_parts(target), sample, n_step, gamma, replay
        )
        ref_loss.backward()
        assert out["loss"].item() == pytest.approx(ref_loss.item(), rel=1e-4, abs=1e-6)
        torch.testing.assert_close(sample["td_error"].double(), ref_td, rtol=1e-4, atol=1e-5)
        for ours, ref in zip(online, ref_online, strict=True):
            for p, q in zip(ours.parameters(), ref.parameters(), strict=True):
                torch.testing.assert_close(p.grad.double(), q.grad, rtol=1e-3, atol=1e-5)

    def test_still_running_episode_bootstraps(self, monkeypatch):
        """The newest episode, not done, bootstraps from its last record's next observation."""
        net, online, target_net, target, _, replay = setup("lstm", 0, monkeypatch)
        data = random_episodes(0, size=60)
        assert not bool(data["next", "done"][-1])
        rb = tape_buffer(data, length=40, rows=2, seed=0)
        newest = torch.tensor([59, 0, 20, 30, 40, 50, 10])
        index, info = rb._sample_unit.expand(newest, {}, rb.storage)
        sample = rb.storage[index]
        sample.update(info)
        sample["priority_weight"] = torch.ones(sample.shape)
        loss = R2D2Loss(net, n_step=3, gamma=0.9, sample_unit="tape")
        loss.target_value_network_params.data.update_(TensorDict.from_module(target_net).data)
        out = loss(sample)
        ref_loss, ref_td = tape_oracle(
            double_parts(online), double_parts(target), sample, 3, 0.9, replay
        )
        assert out["loss"].item() == pytest.approx(ref_loss.item(), rel=1e-4, abs=1e-6)
        torch.testing.assert_close(sample["td_error"].double(), ref_td, rtol=1e-4, atol=1e-5)

    @pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
    @pytest.mark.parametrize("memory", ["lstm", "ffm"])
    def test_cuda_matches_cpu(self, memory, monkeypatch):
        net, _, _, _, episodes, _ = setup(memory, 2, monkeypatch)
        sample = tape_buffer(episodes(2), seed=2).sample()
        loss = R2D2Loss(net, n_step=3, gamma=0.9, sample_unit="tape")
        cpu = sample.clone()
        expected = loss(cpu)["loss"].detach()
        gpu = sample.to("cuda")
        out = loss.to("cuda")(gpu)
        torch.testing.assert_close(out["loss"].detach().cpu(), expected, rtol=1e-4, atol=1e-5)
        torch.testing.assert_close(gpu["td_error"].cpu(), cpu["td_error"], rtol=1e-4, atol=1e-5)

    def test_priorities_per_episode(self):
        """The |TD| the loss writes feeds Tape's per-episode priority update."""
        rb = tape_buffer(random_episodes(2), seed=2)
        sample = rb.sample()
        R2D2Loss(lstm_network(2)[0], n_step=3, gamma=0.9, sample_unit="tape")(sample)
        assert bool((sample["td_error"][~sample["validity_mask"]] == 0).all())
        rb._sample_unit.update_priority(rb, sample)


class TestR2D2LossTapeValidation:
    """Tape settings and samples that the loss cannot use are refused, saying how to fix them."""

    def test_settings(self):
        net = lstm_network(0)[0]
        with pytest.raises(ValueError, match="sample_unit"):
            R2D2Loss(net, n_step=2, sample_unit="tapes")
        with pytest.raises(ValueError, match="burn_in=2"):
            R2D2Loss(net, burn_in=2, n_step=2, sample_unit="tape")

    def test_sequence_loss_names_the_tape_mode(self):
        with pytest.raises(ValueError, match="sample_unit='tape'"):
            table_loss(ONLINE, TARGET, burn_in=0)(hand_tape())

    def test_window_sample_refused(self):
        sample = hand_tape()
        sample["learning_mask"] = sample["validity_mask"]
        with pytest.raises(ValueError, match="sample_unit='sequence'"):
            tape_table_loss()(sample)
        assert "td_error" not in sample.keys()

    def test_done_must_end_the_episode(self):
        sample = hand_tape()
        sample["next", "done"][0, 0] = True
        with pytest.raises(ValueError, match="record 0 of tape 0 is done"):
            tape_table_loss()(sample)
        assert "td_error" not in sample.keys()

    def test_weight_varies_inside_an_episode(self):
        sample = hand_tape()
        sample["priority_weight"] = torch.tensor([[0.5, 1.0, 2.0, 2.0, 2.0]])
        with pytest.raises(ValueError, match="one importance weight per episode"):
            tape_table_loss()(sample)
        assert "td_error" not in sample.keys()

    def test_not_rows(self):
        with pytest.raises(ValueError, match=r"\[R, L\]"):
            tape_table_loss()(hand_tape().unsqueeze(0))
