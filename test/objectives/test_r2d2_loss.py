"""Tests for torchrl_ext.objectives.R2D2Loss.

Three kinds: exact hand-computed windows (a Q-table network whose values we choose); an
independent float64 oracle that steps an ``nn.LSTM`` one record at a time and builds R2D2's
double-Q n-step targets from the paper's equations, on random windows drawn from a real buffer;
and the path to the sampler's sum tree plus ``h(h^-1(x)) == x`` over a wide range.
"""

from __future__ import annotations

import copy
import math
import re
import sys

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from tensordict import TensorDict
from tensordict.nn import TensorDictModule, TensorDictSequential
from torch import nn
from torchrl.data import Categorical, LazyTensorStorage, TensorDictPrioritizedReplayBuffer
from torchrl.modules import GRUModule, LSTMModule, QValueActor
from torchrl.objectives import SoftUpdate

from torchrl_ext.data import Sequence
from torchrl_ext.modules import FFMModule
from torchrl_ext.modules import LSTMModule as WholeRowLSTMModule
from torchrl_ext.objectives import R2D2Loss
from torchrl_ext.objectives.r2d2_loss import inverse_value_rescale, value_rescale

pytestmark = pytest.mark.filterwarnings("ignore:No target network updater:UserWarning")

OBS, HIDDEN, ACTIONS = 4, 8, 2
EPS = 1e-3


# ---------------------------------------------------------------- networks and data
def lstm_network(seed: int) -> tuple[TensorDictSequential, tuple[nn.Module, nn.LSTM, nn.Module]]:
    """A TorchRL recurrent Q-network and its raw parts (embedding, nn.LSTM, head)."""
    gen = torch.Generator().manual_seed(seed)
    with torch.random.fork_rng():
        torch.manual_seed(int(torch.randint(2**31, (1,), generator=gen)))
        embed = nn.Sequential(nn.Linear(OBS, HIDDEN), nn.Tanh())
        lstm = LSTMModule(
            HIDDEN,
            HIDDEN,
            in_keys=["embed", "rs_h", "rs_c"],
            out_keys=["features", ("next", "rs_h"), ("next", "rs_c")],
        )
        head = nn.Linear(HIDDEN, ACTIONS)
    net = TensorDictSequential(
        TensorDictModule(embed, ["observation"], ["embed"]),
        lstm,
        TensorDictModule(head, ["features"], ["action_value"]),
    )
    return net, (embed, lstm.lstm, head)


def random_episodes(seed: int, size: int = 240) -> TensorDict:
    """CartPole-like records: episodes of 3..20 steps, random rewards, terminated or truncated
    ends, ``next_obs[t] == obs[t + 1]`` inside an episode, random stored LSTM states."""
    gen = torch.Generator().manual_seed(seed)
    obs = torch.empty(size, OBS)
    next_obs = torch.empty(size, OBS)
    done = torch.zeros(size, 1, dtype=torch.bool)
    terminated = torch.zeros(size, 1, dtype=torch.bool)
    current = torch.randn(OBS, generator=gen)
    left = int(torch.randint(3, 21, (1,), generator=gen))
    for t in range(size):
        obs[t] = current
        current = current + 0.3 * torch.randn(OBS, generator=gen)
        next_obs[t] = current
        left -= 1
        if left == 0 and t < size - 1:
            done[t] = True
            terminated[t] = bool(torch.rand(1, generator=gen) < 0.5)
            current = torch.randn(OBS, generator=gen)
            left = int(torch.randint(3, 21, (1,), generator=gen))
    return TensorDict(
        {
            "observation": obs,
            "action": torch.randint(ACTIONS, (size,), generator=gen),
            "rs_h": 0.5 * torch.randn(size, 1, HIDDEN, generator=gen),
            "rs_c": 0.5 * torch.randn(size, 1, HIDDEN, generator=gen),
            "next": {
                "observation": next_obs,
                "reward": torch.randn(size, 1, generator=gen),
                "done": done,
                "terminated": terminated,
                "truncated": done & ~terminated,
            },
        },
        [size],
    )


def window_buffer(
    data, boundary="pad", burn_in=3, length=4, n_step=3, batch=16, seed=0, alpha=0.7
) -> TensorDictPrioritizedReplayBuffer:
    unit = Sequence(
        length,
        episode_boundary=boundary,
        burn_in=burn_in,
        bootstrap=n_step - 1,
        layout="batch_time",
        priority_reduction="mixture",
        priority_eta=0.9,
        priority_learning_only=True,
    )
    rb = TensorDictPrioritizedReplayBuffer(
        alpha=alpha,
        beta=0.5,
        storage=LazyTensorStorage(data.shape[0]),
        sample_unit=unit,
        batch_size=batch,
        priority_key="td_error",
        generator=torch.Generator().manual_seed(seed),
    )
    rb.extend(data)
    # uneven priorities, so that the importance weights differ between windows
    gen = torch.Generator().manual_seed(seed + 100)
    rb.update_priority(torch.arange(data.shape[0]), torch.rand(data.shape[0], generator=gen) + 0.1)
    return rb


# ---------------------------------------------------------------- the oracle
def h(x: float) -> float:
    return math.copysign(math.sqrt(abs(x) + 1) - 1, x) + EPS * x


def h_inv(x: float) -> float:
    """The paper's closed form."""
    root = (math.sqrt(1 + 4 * EPS * (abs(x) + 1 + EPS)) - 1) / (2 * EPS)
    return math.copysign(root**2 - 1, x)


def replay_row(parts, row, burn_in, detach_burn_in):
    """Steps the network record by record: Q(obs_t) and Q(next_obs_t) given the history."""
    embed, lstm, head = parts

    def step(obs, state):
        out, state = lstm(embed(obs).view(1, 1, -1), state)
        return head(out[0, 0]), state

    def stored(t):
        return tuple(row[k][t].view(1, 1, -1).double() for k in ("rs_h", "rs_c"))

    q, q_next = [], []
    state = stored(0)
    for t in range(row.shape[0]):
        if t > 0 and row["is_init"][t]:
            state = stored(t)  # a new segment starts from its stored state
        if t == burn_in and detach_burn_in:
            state = tuple(s.detach() for s in state)
        q_t, after = step(row["observation"][t].double(), state)
        q.append(q_t)
        q_next.append(step(row["next", "observation"][t].double(), after)[0])
        state = after
    return q, q_next


def ffm_step(ffm, x, trace):
    """One FFM step from the equations of its docstring (not its code), complex trace."""
    m, c, hidden = ffm.memory_size, ffm.context_size, ffm.hidden_size
    u, skip, in_gate, out_gate = ffm.pre(x).split([m, hidden, m, hidden], -1)
    decay = torch.exp(-ffm.alpha.abs())[:, None] * torch.exp(1j * ffm.omega.reshape(1, c))
    trace = decay * trace + (u * torch.sigmoid(in_gate))[:, None]
    z = ffm.mix(torch.stack([trace.real, trace.imag], -1).reshape(-1))
    normed = (z - z.mean()) / torch.sqrt(z.var(unbiased=False) + 1e-5)
    gate = torch.sigmoid(out_gate)
    return normed * gate + skip * (1 - gate), trace


def replay_row_ffm(parts, row, burn_in, detach_burn_in):
    """``replay_row`` for an FFM memory stepped by :func:`ffm_step` (stored state
    ``recurrent_state_ffm``, real and imaginary parts last)."""
    embed, ffm, head = parts

    def stored(t):
        s = row["recurrent_state_ffm"][t].double()
        return torch.complex(s[..., 0], s[..., 1])

    q, q_next = [], []
    state = stored(0)
    for t in range(row.shape[0]):
        if t > 0 and row["is_init"][t]:
            state = stored(t)
        if t == burn_in and detach_burn_in:
            state = state.detach()
        out, after = ffm_step(ffm, embed(row["observation"][t].double()), state)
        q.append(head(out))
        q_next.append(head(ffm_step(ffm, embed(row["next", "observation"][t].double()), after)[0]))
        state = after
    return q, q_next


def oracle(
    online,
    target,
    sample,
    burn_in,
    n_step,
    gamma,
    rescale=True,
    detach_burn_in=True,
    replay=replay_row,
):
    """R2D2's loss and |TD| per record, one window and one record at a time, in float64."""
    batch, size = sample.shape
    td_error = torch.zeros(batch, size, dtype=torch.float64)
    per_window = []
    for b in range(batch):
        row = sample[b]
        q, q_next = replay(online, row, burn_in, detach_burn_in)
        with torch.no_grad():
            _, target_next = replay(target, row, burn_in, True)
        valid, done = row["validity_mask"], row["next", "done"].squeeze(-1)
        terminated = row["next", "terminated"].squeeze(-1)
        reward = row["next", "reward"].squeeze(-1).double()
        squares = []
        for t in range(burn_in, size):
            if not (row["learning_mask"][t] and valid[t]):
                continue
            total, discount, last = 0.0, 1.0, None
            for k in range(n_step):
                j = t + k
                if j >= size or not valid[j]:
                    break
                total += discount * float(reward[j])
                discount *= gamma
                last = j
                if done[j]:
                    break
            boot = 0.0
            if not terminated[last]:
                greedy = int(q_next[last].argmax())
                value = float(target_next[last][greedy])
                boot = discount * (h_inv(value) if rescale else value)
            y = h(total + boot) if rescale else total + boot
            td = y - q[t][int(row["action"][t])]
            td_error[b, t] = abs(float(td.detach()))
            squares.append(td**2)
        weight = float(row["priority_weight"][0]) if "priority_weight" in row.keys() else 1.0
        per_window.append(weight * torch.stack(squares).mean())
    return 0.5 * torch.stack(per_window).mean(), td_error


def double_parts(parts):
    return tuple(copy.deepcopy(p).double() for p in parts)


def make_loss(seed, burn_in, n_step, gamma, rescale=True):
    """A loss whose target network differs from its online network."""
    net, online_parts = lstm_network(seed)
    target_net, target_parts = lstm_network(seed + 1000)
    loss = R2D2Loss(net, burn_in=burn_in, n_step=n_step, gamma=gamma, value_rescaling=rescale)
    loss.target_value_network_params.data.update_(TensorDict.from_module(target_net).data)
    return loss, online_parts, target_parts


# ---------------------------------------------------------------- tests
class TestValueRescale:
    """h and its inverse: exact inverses of each other, continuous at 0, R2D2's eps."""

    @settings(max_examples=300, deadline=None)
    @given(st.floats(-1e7, 1e7, allow_nan=False))
    def test_round_trip(self, x):
        t = torch.tensor([x], dtype=torch.float64)
        assert torch.allclose(value_rescale(inverse_value_rescale(t)), t, rtol=1e-12, atol=1e-12)
        assert torch.allclose(inverse_value_rescale(value_rescale(t)), t, rtol=1e-9, atol=1e-12)

    def test_float32_wide_range(self):
        x = torch.cat([-torch.logspace(-6, 6, 200), torch.zeros(1), torch.logspace(-6, 6, 200)])
        assert torch.allclose(value_rescale(inverse_value_rescale(x)), x, rtol=1e-5, atol=1e-7)

    def test_matches_paper_formulas(self):
        xs = [-1234.5, -1.0, -1e-4, 0.0, 3e-3, 2.0, 987.0]
        t = torch.tensor(xs, dtype=torch.float64)
        assert value_rescale(t).tolist() == pytest.approx([h(x) for x in xs], rel=1e-12)
        assert inverse_value_rescale(t).tolist() == pytest.approx([h_inv(x) for x in xs], 1e-9)


def table_loss(online, target, burn_in=1, n_step=2, gamma=0.5, rescale=False, **kwargs):
    """A loss over a Q-table network: Q(obs) = table[obs id], no recurrent state."""

    class Table(nn.Module):
        def __init__(self, table):
            super().__init__()
            self.table = nn.Parameter(torch.tensor(table))

        def forward(self, obs):
            return self.table[obs.long().squeeze(-1)]

    net = TensorDictModule(Table(online), ["observation"], ["action_value"])
    loss = R2D2Loss(
        net, burn_in=burn_in, n_step=n_step, gamma=gamma, value_rescaling=rescale, **kwargs
    )
    (param,) = loss.target_value_network_params.values(True, True)
    param.data.copy_(torch.tensor(target))
    return loss


ONLINE = [[0.0, 1.0], [2.0, 0.0], [0.0, 3.0], [4.0, 0.0], [0.0, 5.0]]  # argmax 1, 0, 1, 0, 1
TARGET = [[10.0, 20.0], [30.0, 40.0], [50.0, 60.0], [70.0, 80.0], [90.0, 100.0]]


def hand_window(end: str | None = None, at: int = 2) -> TensorDict:
    """One window: burn-in 1, learning 2, bootstrap 1; obs ids 0..3, next obs ids 1..4.

    ``end`` ("terminated" or "truncated") ends the episode at record ``at``; later records are
    padding that repeats record ``at``, as ``Sequence(episode_boundary="pad")`` lays it out.
    """
    obs = torch.arange(4.0)
    reward = torch.tensor([1.0, 2.0, 3.0, 4.0])
    action = torch.tensor([0, 1, 0, 1])
    done = torch.zeros(4, dtype=torch.bool)
    terminated = torch.zeros(4, dtype=torch.bool)
    valid = torch.ones(4, dtype=torch.bool)
    if end is not None:
        done[at] = True
        terminated[at] = end == "terminated"
        pad = torch.arange(4) > at
        valid[pad] = False
        src = torch.where(pad, at, torch.arange(4))
        obs, reward, action = obs[src], reward[src], action[src]
        done, terminated = done[src], terminated[src]
    is_init = torch.tensor([True, False, False, False])
    return TensorDict(
        {
            "observation": obs.view(1, 4, 1),
            "action": action.view(1, 4),
            "is_init": is_init.view(1, 4),
            "validity_mask": valid.view(1, 4),
            "learning_mask": torch.tensor([[False, True, True, False]]),
            "next": {
                "observation": (obs + 1).view(1, 4, 1),
                "reward": reward.view(1, 4, 1),
                "done": done.view(1, 4, 1),
                "terminated": terminated.view(1, 4, 1),
            },
        },
        [1, 4],
    )


class TestR2D2LossHandComputed:
    """Targets of a 4-record window worked out by hand (gamma = 0.5, n_step = 2).

    Online argmax per obs id: 1, 0, 1, 0, 1; the target table values that action (double Q).
    Taken actions' online values are 0 on the learning records 1 and 2, so |TD| = target.
    """

    def test_no_episode_end(self):
        sample = hand_window()
        out = table_loss(ONLINE, TARGET)(sample)
        # record 1: 2 + 0.5 * 3 + 0.25 * Qt(3)[0] = 21; record 2: 3 + 0.5 * 4 + 0.25 * Qt(4)[1]
        assert sample["td_error"].tolist() == [[0.0, 21.0, 30.0, 0.0]]
        assert out["loss"].item() == pytest.approx(0.5 * (21.0**2 + 30.0**2) / 2)

    def test_terminated_does_not_bootstrap(self):
        sample = hand_window("terminated")
        table_loss(ONLINE, TARGET)(sample)
        assert sample["td_error"].tolist() == [[0.0, 3.5, 3.0, 0.0]]

    def test_truncated_bootstraps_from_its_next_observation(self):
        sample = hand_window("truncated")
        table_loss(ONLINE, TARGET)(sample)
        # record 2: 3 + 0.5 * Qt(next obs 3)[argmax Qo(3) = 0] = 38 (the padded record's own
        # obs id 2 would give 3 + 0.5 * 60)
        assert sample["td_error"].tolist() == [[0.0, 21.0, 38.0, 0.0]]

    def test_padding_in_learning_region(self):
        sample = hand_window("truncated", at=1)
        out = table_loss(ONLINE, TARGET)(sample)
        # record 1: 2 + 0.5 * Qt(2)[1] = 32; record 2 is padding: no loss, no priority
        assert sample["td_error"].tolist() == [[0.0, 32.0, 0.0, 0.0]]
        assert out["loss"].item() == pytest.approx(0.5 * 32.0**2)

    def test_rescaled_targets(self):
        sample = hand_window("truncated")
        table_loss(ONLINE, TARGET, rescale=True)(sample)
        expected = [h(2 + 0.5 * 3 + 0.25 * h_inv(70.0)), h(3 + 0.5 * h_inv(70.0))]
        assert sample["td_error"][0, 1:3].tolist() == pytest.approx(expected, rel=1e-6)

    def test_importance_weight_and_one_hot_actions(self):
        sample = hand_window()
        sample["priority_weight"] = torch.full((1, 4), 0.25)
        sample["action"] = nn.functional.one_hot(sample["action"], 2).bool()
        out = table_loss(ONLINE, TARGET)(sample)
        assert sample["td_error"].tolist() == [[0.0, 21.0, 30.0, 0.0]]
        assert out["loss"].item() == pytest.approx(0.25 * 0.5 * (21.0**2 + 30.0**2) / 2)

    def test_set_keys(self):
        sample = hand_window()
        sample.rename_key_(("next", "reward"), ("next", "rew"))
        loss = table_loss(ONLINE, TARGET)
        loss.set_keys(reward="rew", priority="prio")
        loss(sample)
        assert "td_error" not in sample.keys()
        assert sample["prio"].tolist() == [[0.0, 21.0, 30.0, 0.0]]


class TestR2D2LossOracle:
    """Loss, |TD| per record and gradients equal a float64 record-by-record oracle on random
    windows from a real buffer; no gradient reaches the burn-in records."""

    @pytest.mark.parametrize("boundary", ["pad", "stop"])
    @pytest.mark.parametrize("seed", [0, 1, 2])
    def test_matches_oracle(self, boundary, seed):
        burn_in, n_step, gamma = 3, 3, 0.9
        rb = window_buffer(random_episodes(seed), boundary, burn_in=burn_in, n_step=n_step)
        sample = rb.sample()
        assert bool(sample["priority_weight"].std() > 0)
        loss, online, target = make_loss(seed, burn_in, n_step, gamma)
        out = loss(sample)
        out["loss"].backward()
        ref_online = double_parts(online)
        ref_loss, ref_td = oracle(ref_online, double_parts(target), sample, burn_in, n_step, gamma)
        ref_loss.backward()
        assert out["loss"].item() == pytest.approx(ref_loss.item(), rel=1e-4, abs=1e-6)
        torch.testing.assert_close(sample["td_error"].double(), ref_td, rtol=1e-4, atol=1e-5)
        for ours, ref in zip(online, ref_online, strict=True):
            for p, q in zip(ours.parameters(), ref.parameters(), strict=True):
                torch.testing.assert_close(p.grad.double(), q.grad, rtol=1e-3, atol=1e-5)

    @pytest.mark.parametrize("boundary", ["pad", "stop"])
    def test_whole_row_module_matches_oracle(self, boundary, monkeypatch):
        """The same oracle holds with torchrl_ext's whole-row LSTMModule as the memory."""
        monkeypatch.setattr(sys.modules[__name__], "LSTMModule", WholeRowLSTMModule)
        assert isinstance(make_loss(0, 3, 3, 0.9)[0].value_network[1], WholeRowLSTMModule)
        self.test_matches_oracle(boundary, seed=1)

    @pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
    def test_cuda_matches_cpu(self):
        sample = window_buffer(random_episodes(2), seed=2).sample()
        loss, _, _ = make_loss(2, 3, 3, 0.9)
        cpu = sample.clone()
        expected = loss(cpu)["loss"].detach()
        gpu = sample.to("cuda")
        out = loss.to("cuda")(gpu)
        torch.testing.assert_close(out["loss"].detach().cpu(), expected, rtol=1e-4, atol=1e-5)
        torch.testing.assert_close(gpu["td_error"].cpu(), cpu["td_error"], rtol=1e-4, atol=1e-5)

    def test_without_rescaling(self):
        burn_in, n_step, gamma = 2, 2, 0.8
        rb = window_buffer(random_episodes(5), burn_in=burn_in, n_step=n_step, seed=5)
        sample = rb.sample()
        loss, online, target = make_loss(5, burn_in, n_step, gamma, rescale=False)
        out = loss(sample)
        ref_loss, ref_td = oracle(
            double_parts(online), double_parts(target), sample, burn_in, n_step, gamma, False
        )
        assert out["loss"].item() == pytest.approx(ref_loss.item(), rel=1e-4, abs=1e-6)
        torch.testing.assert_close(sample["td_error"].double(), ref_td, rtol=1e-4, atol=1e-5)

    def test_no_gradient_into_burn_in(self):
        """The gradients are those of the oracle with the state detached after burn-in, and
        differ from those of an oracle that backpropagates into burn-in."""
        burn_in, n_step, gamma = 4, 2, 0.9
        rb = window_buffer(random_episodes(7), burn_in=burn_in, n_step=n_step, seed=7)
        sample = rb.sample()
        loss, online, target = make_loss(7, burn_in, n_step, gamma)
        loss(sample)["loss"].backward()
        ours = online[1].weight_hh_l0.grad.double()
        grads = {}
        for detach in (True, False):
            parts, target_parts = double_parts(online), double_parts(target)
            ref, _ = oracle(parts, target_parts, sample, burn_in, n_step, gamma, True, detach)
            ref.backward()
            grads[detach] = parts[1].weight_hh_l0.grad
        torch.testing.assert_close(ours, grads[True], rtol=1e-3, atol=1e-5)
        assert not torch.allclose(ours, grads[False], rtol=1e-3, atol=1e-5)


def ffm_network(seed: int):
    """A Q-network whose memory is an FFMModule, and its raw parts (embedding, FFM, head)."""
    gen = torch.Generator().manual_seed(seed)
    with torch.random.fork_rng():
        torch.manual_seed(int(torch.randint(2**31, (1,), generator=gen)))
        embed = nn.Sequential(nn.Linear(OBS, HIDDEN), nn.Tanh())
        ffm = FFMModule(HIDDEN, HIDDEN, memory_size=4, context_size=2, in_key="embed", out_key="f")
        head = nn.Linear(HIDDEN, ACTIONS)
    net = TensorDictSequential(
        TensorDictModule(embed, ["observation"], ["embed"]),
        ffm,
        TensorDictModule(head, ["f"], ["action_value"]),
    )
    return net, (embed, ffm, head)


def ffm_episodes(seed: int) -> TensorDict:
    """:func:`random_episodes` with stored FFM traces instead of LSTM states."""
    data = random_episodes(seed).exclude("rs_h", "rs_c")
    gen = torch.Generator().manual_seed(seed + 7)
    data["recurrent_state_ffm"] = 0.5 * torch.randn(data.shape[0], 4, 2, 2, generator=gen)
    return data


class TestR2D2LossFFM:
    """A Q-network with a scan memory (FFMModule, found by its primer and recurrent mode):
    its state is read, burned in and carried as an LSTM's, matching a record-by-record oracle
    of the FFM equations on windows from a real buffer."""

    @pytest.mark.parametrize("boundary", ["pad", "stop"])
    def test_matches_oracle(self, boundary):
        burn_in, n_step, gamma = 3, 3, 0.9
        sample = window_buffer(ffm_episodes(3), boundary, burn_in, n_step=n_step, seed=3).sample()
        net, online = ffm_network(3)
        target_net, target = ffm_network(1003)
        loss = R2D2Loss(net, burn_in=burn_in, n_step=n_step, gamma=gamma)
        loss.target_value_network_params.data.update_(TensorDict.from_module(target_net).data)
        assert "recurrent_state_ffm" not in loss.observation_keys
        out = loss(sample)
        out["loss"].backward()
        ref_online = double_parts(online)
        ref_loss, ref_td = oracle(
            ref_online, double_parts(target), sample, burn_in, n_step, gamma,
            replay=replay_row_ffm,
        )  # fmt: skip
        ref_loss.backward()
        assert out["loss"].item() == pytest.approx(ref_loss.item(), rel=1e-4, abs=1e-6)
        torch.testing.assert_close(sample["td_error"].double(), ref_td, rtol=1e-4, atol=1e-5)
        for ours, ref in zip(online, ref_online, strict=True):
            for p, q in zip(ours.parameters(), ref.parameters(), strict=True):
                torch.testing.assert_close(p.grad.double(), q.grad, rtol=1e-3, atol=1e-5)

    def test_burned_in_state_is_carried(self):
        """A burn-in record's input moves the loss (the FFM trace crosses burn-in)."""
        sample = window_buffer(ffm_episodes(4), burn_in=3, n_step=3, seed=4).sample()
        sample["is_init"][:, 1:4] = False  # no reset inside or right after burn-in
        loss = R2D2Loss(ffm_network(4)[0], burn_in=3, n_step=3, gamma=0.9)
        first = loss(sample.clone())["loss"]
        moved = sample.clone()
        moved["observation"][:, 0] += 1.0
        assert not torch.allclose(first, loss(moved)["loss"])


class TestR2D2LossNetworks:
    """What a TorchRL DQN user passes works: a QValueActor around the network, a GRUModule;
    the loss reads the sample and writes only its priority key."""

    def test_sample_untouched_but_priority(self):
        sample = window_buffer(random_episodes(4), seed=4).sample()
        before = sample.clone()
        loss, _, _ = make_loss(4, 3, 3, 0.9)
        loss(sample)
        assert set(sample.keys(True, True)) == set(before.keys(True, True)) | {"td_error"}
        assert (sample.exclude("td_error") == before).all()

    def test_reset_flags_on_padding_are_ignored(self):
        """Padding after the valid run carries on from the last valid record's state, so
        that the first padded step values its next observation, whatever its is_init."""
        sample = window_buffer(random_episodes(1), seed=1).sample()
        loss, _, _ = make_loss(1, 3, 3, 0.9)
        loss(sample)
        flagged = sample.clone()
        late = torch.arange(sample.shape[1]) > 3
        flagged["is_init"] = flagged["is_init"] | (~flagged["validity_mask"] & late)
        assert bool((flagged["is_init"] != sample["is_init"]).any())
        loss(flagged)
        torch.testing.assert_close(flagged["td_error"], sample["td_error"])

    def test_qvalue_actor(self):
        sample = window_buffer(random_episodes(4), seed=4).sample()
        net = lstm_network(4)[0]
        plain = R2D2Loss(net, burn_in=3, n_step=3, gamma=0.9)(sample.clone())["loss"]
        actor = QValueActor(copy.deepcopy(net), spec=Categorical(ACTIONS))
        wrapped = R2D2Loss(actor, burn_in=3, n_step=3, gamma=0.9)(sample)["loss"]
        torch.testing.assert_close(wrapped, plain)

    def test_gru_network_burns_in(self):
        """GRU states are found too: a burn-in record's input moves the loss."""
        gru = GRUModule(
            OBS, HIDDEN, in_keys=["observation", "rs_h"], out_keys=["f", ("next", "rs_h")]
        )
        net = TensorDictSequential(
            gru, TensorDictModule(nn.Linear(HIDDEN, 2), ["f"], ["action_value"])
        )
        data = random_episodes(6).exclude("rs_c")
        sample = window_buffer(data, seed=6).sample()
        loss = R2D2Loss(net, burn_in=3, n_step=3, gamma=0.9)
        first = loss(sample.clone())["loss"]
        moved = sample.clone()
        moved["observation"][:, 0] += 1.0  # a burn-in record's input
        second = loss(moved)["loss"]
        assert torch.isfinite(first) and not torch.allclose(first, second)


class TestR2D2LossPriorities:
    """``rb.update_tensordict_priority(sample)`` after the loss writes each anchor's R2D2
    mixture of its learning records' |TD| into the sum tree; target updaters plug in."""

    def test_sum_tree_per_anchor(self):
        burn_in, n_step, alpha = 3, 3, 0.7
        rb = window_buffer(random_episodes(3), burn_in=burn_in, n_step=n_step, seed=3, alpha=alpha)
        sample = rb.sample()
        loss, _, _ = make_loss(3, burn_in, n_step, 0.9)
        loss(sample)
        rb._sample_unit.update_priority(rb, sample)
        sampler = rb.sampler
        mask = sample["learning_mask"] & sample["validity_mask"]
        for row in range(sample.shape[0]):
            td = sample["td_error"][row][mask[row]].double()
            assert bool((sample["td_error"][row][~mask[row]] == 0).all())
            priority = 0.9 * td.max() + 0.1 * td.mean()
            anchor = int(sample["anchor_index"][row, 0])
            expected = (priority + sampler._eps) ** alpha
            assert sampler._sum_tree[anchor] == pytest.approx(float(expected), rel=1e-5)

    def test_soft_update_moves_target(self):
        loss, _, _ = make_loss(0, 1, 1, 0.9)
        updater = SoftUpdate(loss, eps=0.5)
        online = loss.value_network_params.flatten_keys()
        target = loss.target_value_network_params.flatten_keys()
        key = next(iter(online.keys()))
        expected = 0.5 * (online[key].detach() + target[key])
        updater.step()
        torch.testing.assert_close(loss.target_value_network_params.flatten_keys()[key], expected)


class TestR2D2LossValidation:
    """Bad settings and samples raise errors naming the argument or key, before any write."""

    def lstm_loss(self, **kwargs):
        settings = {"burn_in": 3, "n_step": 3, "gamma": 0.9, **kwargs}
        return R2D2Loss(lstm_network(0)[0], **settings)

    @pytest.mark.parametrize(
        "kwargs, error, match",
        [
            ({"n_step": 0}, ValueError, "n_step"),
            ({"n_step": 1.5}, TypeError, "n_step"),
            ({"gamma": 0.0}, ValueError, "gamma"),
            ({"gamma": 1.5}, ValueError, "gamma"),
            ({"burn_in": -1}, ValueError, "burn_in"),
            ({"value_rescaling": 1}, TypeError, "value_rescaling"),
            ({"rescale_eps": 0.0}, ValueError, "rescale_eps"),
        ],
    )
    def test_settings(self, kwargs, error, match):
        with pytest.raises(error, match=match):
            self.lstm_loss(**kwargs)

    def test_value_network_type(self):
        with pytest.raises(TypeError, match="value_network"):
            R2D2Loss(nn.Linear(2, 2), burn_in=0, n_step=1)

    def sample(self):
        return window_buffer(random_episodes(0), burn_in=3, n_step=3).sample()

    def check_refused(self, loss, sample, match):
        with pytest.raises(ValueError, match=match):
            loss(sample)
        assert "td_error" not in sample.keys()

    def test_not_a_tensordict(self):
        with pytest.raises(TypeError, match="tensordict"):
            self.lstm_loss()({"observation": torch.zeros(2, 9)})

    def test_not_batch_time(self):
        sample = self.sample()
        self.check_refused(self.lstm_loss(), sample.reshape(-1), r"\[B, T\]")

    def test_burn_in_too_long(self):
        self.check_refused(self.lstm_loss(burn_in=9), self.sample(), "burn_in=9")

    def test_burn_in_mismatch(self):
        self.check_refused(self.lstm_loss(burn_in=2), self.sample(), "burn_in=2")

    def test_too_few_bootstrap_records(self):
        self.check_refused(self.lstm_loss(n_step=4), self.sample(), "n_step=4")

    @pytest.mark.parametrize(
        "key", [("next", "terminated"), ("next", "observation"), "rs_c", "learning_mask"]
    )
    def test_missing_key(self, key):
        sample = self.sample().exclude(key)
        self.check_refused(self.lstm_loss(), sample, re.escape(repr(key)))

    def test_episode_start_after_burn_in(self):
        rb = window_buffer(random_episodes(0), "include_reset", burn_in=3, n_step=3, batch=64)
        self.check_refused(self.lstm_loss(), rb.sample(), "one episode")


class TestR2D2LossCorruptValues:
    """Values that would corrupt the loss are refused, naming the key and the value.

    Rewards of the records a target sums (valid, after burn-in) and importance weights must be
    finite (weights also ``>= 0`` and one per window); index actions whole numbers in
    ``[0, A)``, one-hot actions one-hot. Nothing is written when a sample is refused; values
    the loss never reads (burn-in rewards) are accepted.
    """

    def check_refused(self, sample, error, match):
        loss = table_loss(ONLINE, TARGET)
        with pytest.raises(error, match=match):
            loss(sample)
        assert "td_error" not in sample.keys()

    @pytest.mark.parametrize("value", [math.nan, math.inf, -math.inf])
    @pytest.mark.parametrize("record", [1, 3])  # a learning record, the bootstrap record
    def test_non_finite_reward(self, value, record):
        sample = hand_window()
        sample["next", "reward"][0, record] = value
        self.check_refused(sample, ValueError, r"\('next', 'reward'\).*(nan|inf)")

    def test_burn_in_reward_is_not_read(self):
        sample = hand_window()
        sample["next", "reward"][0, 0] = math.nan
        table_loss(ONLINE, TARGET)(sample)
        assert sample["td_error"].tolist() == [[0.0, 21.0, 30.0, 0.0]]

    @pytest.mark.parametrize("value", [math.nan, math.inf, -0.5])
    def test_bad_importance_weight(self, value):
        sample = hand_window()
        sample["priority_weight"] = torch.full((1, 4, 1), value)
        self.check_refused(sample, ValueError, r"'priority_weight'.*(nan|inf|-0\.5)")

    @pytest.mark.parametrize("shape", [(1, 4, 2), (1, 4, 1, 1)])
    def test_undocumented_weight_shape(self, shape):
        sample = hand_window()
        sample["priority_weight"] = torch.ones(shape)
        self.check_refused(sample, ValueError, re.escape(str(shape)))

    def test_weights_must_be_one_per_window(self):
        sample = hand_window()
        sample["priority_weight"] = torch.tensor([[1.0, 1.0, 0.5, 1.0]])
        self.check_refused(sample, ValueError, "one importance weight per window")

    def test_weight_dtype(self):
        sample = hand_window()
        sample["priority_weight"] = torch.ones(1, 4, dtype=torch.bool)
        self.check_refused(sample, TypeError, "priority_weight")

    @pytest.mark.parametrize("value", [0.5, math.nan, 2.0, -1.0])
    def test_bad_index_action(self, value):
        sample = hand_window()
        sample["action"] = sample["action"].float()
        sample["action"][0, 2] = value
        self.check_refused(sample, ValueError, r"'action'.*(0\.5|nan|2\.0|-1\.0)")

    def test_integral_float_actions_are_indices(self):
        sample = hand_window()
        sample["action"] = sample["action"].float()
        table_loss(ONLINE, TARGET)(sample)
        assert sample["td_error"].tolist() == [[0.0, 21.0, 30.0, 0.0]]

    def test_out_of_range_integer_action(self):
        sample = hand_window()
        sample["action"][0, 1] = 2
        self.check_refused(sample, ValueError, r"'action'.*2")

    @pytest.mark.parametrize("row", [[0.5, 0.5], [1.0, 1.0], [0.0, 0.0]])
    def test_not_one_hot(self, row):
        sample = hand_window()
        one_hot = nn.functional.one_hot(sample["action"], 2).float()
        one_hot[0, 2] = torch.tensor(row)
        sample["action"] = one_hot
        self.check_refused(sample, ValueError, "one-hot")

    def test_complex_reward(self):
        sample = hand_window()
        sample["next", "reward"] = sample["next", "reward"].to(torch.complex64)
        self.check_refused(sample, TypeError, "reward")
