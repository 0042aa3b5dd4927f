"""The critic's pass over the calls' layout (``torchrl_ext.objectives._value_pass``).

Contract: the leaves after the last recurrent layer run call by call when they are plain
``TensorDictModule``s (reading the layer's output and any critic input), and on the joined
outputs otherwise; both give the values of a step-by-step loop.
"""

from __future__ import annotations

import pytest
import torch
from tensordict import TensorDict
from tensordict.nn import TensorDictModule, TensorDictModuleBase, TensorDictSequential
from torch import nn
from torchrl.modules import LSTMModule

from torchrl_ext.modules import FFMModule
from torchrl_ext.objectives import RecurrentGAE
from torchrl_ext.objectives._segments import plan_segments
from torchrl_ext.objectives._value_pass import ValuePass, WholeRows, _gather_steps

OBS, HIDDEN = 3, 6


class _Halve(TensorDictModuleBase):
    """Not a plain TensorDictModule: the tail must then run on the joined outputs."""

    in_keys = ["state_value"]
    out_keys = ["state_value"]

    def forward(self, td):
        return td.set("state_value", td["state_value"] / 2)


def critic(tail: str, seed: int = 0):
    torch.manual_seed(seed)  # test-only; the autouse fixture restores the global RNG
    lstm = LSTMModule(
        input_size=OBS,
        hidden_size=HIDDEN,
        in_keys=["observation", "rs_h", "rs_c"],
        out_keys=["embed", ("next", "rs_h"), ("next", "rs_c")],
    )
    mix = TensorDictModule(
        lambda embed, obs: torch.cat([embed, obs], -1), ["embed", "observation"], ["mixed"]
    )
    head = TensorDictModule(nn.Linear(HIDDEN + OBS, 1), ["mixed"], ["state_value"])
    leaves = [lstm, mix, head] + ([_Halve()] if tail == "custom" else [])
    return TensorDictSequential(*leaves), lstm, leaves[1:]


def rollout(n=3, t=40, seed=1):
    gen = torch.Generator().manual_seed(seed)
    done = torch.rand(n, t, 1, generator=gen) < 0.08
    is_init = torch.zeros_like(done)
    is_init[:, 0] = True
    is_init[:, 1:] = done[:, :-1]
    return TensorDict(
        {
            "observation": torch.randn(n, t, OBS, generator=gen),
            "is_init": is_init,
            "next": {
                "observation": torch.randn(n, t, OBS, generator=gen),
                "reward": torch.randn(n, t, 1, generator=gen),
                "terminated": done,
                "truncated": torch.zeros_like(done),
                "done": done,
            },
        },
        batch_size=[n, t],
    )


def loop_values(lstm, tail, td):
    """One env and one step at a time, resetting the state after every done step."""
    n, t = td.batch_size
    value, next_value = torch.zeros(n, t, 1), torch.zeros(n, t, 1)

    def step(obs, state):
        out, state = lstm.lstm(obs.view(1, 1, -1), state)
        small = TensorDict({"embed": out.view(1, -1), "observation": obs.view(1, -1)}, [1])
        for module in tail:
            small = module(small)
        return small["state_value"].view(1), state

    for row in range(n):
        state = None
        for s in range(t):
            if td["is_init"][row, s]:
                state = None
            value[row, s], state = step(td["observation"][row, s], state)
            next_value[row, s], _ = step(td["next", "observation"][row, s], state)
        keep = ~td["next", "done"][row, :-1]
        next_value[row, :-1] = torch.where(keep, value[row, 1:], next_value[row, :-1])
    return value, next_value


class TestTail:
    @pytest.mark.parametrize(("tail", "direct"), [("plain", True), ("custom", False)])
    def test_values_match_step_loop(self, tail, direct):
        network, lstm, leaves = critic(tail)
        assert ValuePass(network).direct_tail is direct
        td = rollout()
        with torch.no_grad():
            value, next_value = loop_values(lstm, leaves, td)
        RecurrentGAE(gamma=0.9, lmbda=0.9, value_network=network)(td)
        torch.testing.assert_close(td["state_value"], value, atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(td["next", "state_value"], next_value, atol=1e-5, rtol=1e-5)

    def test_per_call_equals_joined(self):
        network, _, _ = critic("plain")
        per_call = RecurrentGAE(gamma=0.9, lmbda=0.9, value_network=network)
        joined = RecurrentGAE(gamma=0.9, lmbda=0.9, value_network=network)
        joined._value_pass.direct_tail = False
        a, b = per_call(rollout()), joined(rollout())
        for key in ("state_value", ("next", "state_value"), "advantage"):
            torch.testing.assert_close(a[key], b[key], atol=1e-6, rtol=1e-6)


class TestGatherSteps:
    """Rows of the row steps and of their next observations, placed where the calls read them."""

    @pytest.mark.parametrize(
        ("dtype", "features"),
        [(torch.float32, (8,)), (torch.float64, ()), (torch.uint8, (3, 4, 5)), (torch.bool, (2,))],
    )
    def test_equals_join_and_select(self, dtype, features):
        """Checked against a row-by-row loop."""
        gen = torch.Generator().manual_seed(7)
        done = torch.rand(5, 23, generator=gen) < 0.1
        is_init = torch.zeros_like(done)
        is_init[:, 1:] = done[:, :-1]
        plan = plan_segments(is_init, done, None)
        gen = torch.Generator().manual_seed(8)
        root, final = (
            (torch.rand(5 * 23, *features, generator=gen) * 100).to(dtype) for _ in range(2)
        )
        rows = [*root, *final]
        expected = torch.stack([rows[int(r)] for r in plan.reads])
        out = _gather_steps(root, final, plan.reads, plan.index[5 * 23 :])
        assert out.dtype == dtype and torch.equal(out, expected)


def ffm_critic(seed: int = 0):
    torch.manual_seed(seed)  # test-only; the autouse fixture restores the global RNG
    ffm = FFMModule(input_size=OBS, hidden_size=HIDDEN, in_key="observation", out_key="embed")
    head = TensorDictModule(nn.Linear(HIDDEN, 1), ["embed"], ["state_value"])
    return TensorDictSequential(ffm, head), ffm, head


def ffm_loop_values(ffm, head, td, stored=None):
    """One env and one step at a time with ``FFMModule.step``: zeros (or the stored trace at a
    row start that is no episode start) after every episode start."""
    n, t = td.batch_size
    value, next_value = torch.zeros(n, t, 1), torch.zeros(n, t, 1)

    def step(obs, trace):
        out, trace = ffm.step(obs.view(1, -1), trace)
        return head.module(out).view(1), trace

    zero = torch.zeros(1, ffm.memory_size, ffm.context_size, dtype=torch.complex64)
    for row in range(n):
        trace = zero
        if stored is not None and not td["is_init"][row, 0]:
            trace = torch.view_as_complex(stored[row, 0].contiguous()).unsqueeze(0)
        for s in range(t):
            if td["is_init"][row, s]:
                trace = zero
            value[row, s], trace = step(td["observation"][row, s], trace)
            next_value[row, s], _ = step(td["next", "observation"][row, s], trace)
        keep = ~td["next", "done"][row, :-1]
        next_value[row, :-1] = torch.where(keep, value[row, 1:], next_value[row, :-1])
    return value, next_value


class TestWholeRows:
    """A critic with another memory runs through its own recurrent mode (``WholeRows``)."""

    def test_ffm_critic_matches_step_loop(self):
        network, ffm, head = ffm_critic()
        assert ValuePass(network).whole_rows is not None
        td = rollout()
        with torch.no_grad():
            value, next_value = ffm_loop_values(ffm, head, td)
        RecurrentGAE(gamma=0.9, lmbda=0.9, value_network=network)(td)
        torch.testing.assert_close(td["state_value"], value, atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(td["next", "state_value"], next_value, atol=1e-5, rtol=1e-5)

    def test_ffm_critic_from_stored_states(self):
        network, ffm, head = ffm_critic()
        td = rollout()
        td["is_init"][1, 0] = False  # row 1 continues an episode from its stored trace
        gen = torch.Generator().manual_seed(4)
        stored = torch.randn(*td.batch_size, ffm.memory_size, ffm.context_size, 2, generator=gen)
        td["recurrent_state_ffm"] = stored
        with torch.no_grad():
            value, next_value = ffm_loop_values(ffm, head, td, stored)
        gae = RecurrentGAE(gamma=0.9, lmbda=0.9, value_network=network, initial_state="stored")
        gae(td)
        torch.testing.assert_close(td["state_value"], value, atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(td["next", "state_value"], next_value, atol=1e-5, rtol=1e-5)

    @pytest.mark.parametrize("initial_state", ["zeros", "stored"])
    def test_lstm_through_whole_rows_equals_the_segment_pass(self, initial_state):
        network, lstm, _ = critic("plain")
        td = rollout()
        td["is_init"][2, 0] = False
        gen = torch.Generator().manual_seed(5)
        td["rs_h"] = torch.randn(*td.batch_size, 1, HIDDEN, generator=gen)
        td["rs_c"] = torch.randn(*td.batch_size, 1, HIDDEN, generator=gen)
        segments = ValuePass(network)
        rows = WholeRows(network, [lstm])
        gae = RecurrentGAE(gamma=0.9, lmbda=0.9, value_network=network, initial_state=initial_state)
        a = gae(td.clone())
        gae._value_pass.whole_rows, gae._value_pass.obs_keys = rows, rows.obs_keys
        b = gae(td.clone())
        assert segments.whole_rows is None
        for key in ("state_value", ("next", "state_value"), "advantage"):
            torch.testing.assert_close(a[key], b[key], atol=1e-5, rtol=1e-5)
