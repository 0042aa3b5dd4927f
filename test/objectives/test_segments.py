"""Segments of rollout rows and their schedule into dense recurrent-layer calls.

Contract (``torchrl_ext.objectives._segments``): a segment starts at ``t = 0``, at ``is_init``,
after ``done`` and every ``chunk_len`` steps; a segment ending on ``done`` or at the end of its
row gets a bootstrap step. Each segment is cut into power-of-two pieces (highest first), one
call per piece length, each lane starting from the pool row its ``sources`` entry names. The
plan is checked by hand on small rows, by running a toy recurrence through it against a plain
per-row loop, and the compiled planner against the torch one, field by field.
"""

from __future__ import annotations

import pytest
import torch

from torchrl_ext.objectives import _segments
from torchrl_ext.objectives._segments import plan_segments, plan_segments_torch

DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])
PLANNERS = {"compiled": plan_segments, "torch": plan_segments_torch}


def flags(n, t, p_done, p_init=0.0, seed=0):
    gen = torch.Generator().manual_seed(seed)
    done = torch.rand(n, t, generator=gen) < p_done
    is_init = torch.rand(n, t, generator=gen) < p_init
    is_init[:, 1:] |= done[:, :-1]
    return is_init, done


def describe(plan):
    """Every field of a plan as plain Python values, to compare two plans exactly."""
    return {
        "boot_idx": plan.boot_idx.tolist(),
        "first": plan.first.tolist(),
        "continues": plan.continues.tolist(),
        "index": plan.index.tolist(),
        "reads": plan.reads.tolist(),
        "calls": [(c.offset, c.lanes, c.length, c.sources.tolist(), c.slot) for c in plan.calls],
    }


def run_toy(plan, x, final, initial, decay=0.5):
    """Runs ``h = decay * h + x`` through the plan's calls and pool, as the value pass does."""
    inputs = torch.cat([x, final])[plan.reads]
    pool = torch.empty(plan.pool_size, dtype=x.dtype)
    pool[: plan.num_segments] = initial
    outputs = []
    for call in plan.calls:
        block = inputs[call.offset : call.offset + call.lanes * call.length]
        h = pool[call.sources]
        for row in block.view(call.length, call.lanes):
            h = decay * h + row
            outputs.append(h)
        pool[call.slot : call.slot + call.lanes] = h
    return torch.cat(outputs)[plan.index]


def loop_toy(is_init, done, x, final, initial, chunk_len, decay=0.5):
    """The same recurrence, one row at a time: row steps, then the bootstrap steps in order."""
    n_rows, steps = done.shape
    out, boots, seg = torch.empty(n_rows * steps, dtype=x.dtype), [], -1
    for n in range(n_rows):
        for t in range(steps):
            i = n * steps + t
            reset = bool(is_init[n, t]) or (t > 0 and bool(done[n, t - 1]))
            if t == 0 or reset or (chunk_len and t % chunk_len == 0):
                seg += 1
                h = initial[seg]
            h = decay * h + x[i]
            out[i] = h
            if bool(done[n, t]) or t == steps - 1:
                boots.append(decay * h + final[i])
    return torch.cat([out, torch.stack(boots)]) if boots else out


class TestPlanByHand:
    """Small rows whose plan is written out in full."""

    @pytest.mark.parametrize("planner", list(PLANNERS))
    def test_two_segments_of_four(self, planner):
        # one row of 6 steps, done at t=2: segments [0, 1, 2, boot] and [3, 4, 5, boot]
        is_init = torch.tensor([[True, False, False, True, False, False]])
        done = torch.tensor([[False, False, True, False, False, False]])
        plan = PLANNERS[planner](is_init, done, None)
        assert describe(plan) == {
            "boot_idx": [2, 5],
            "first": [0, 3],
            "continues": [False, False],
            # one call [4 steps, 2 lanes], time-major: segment 0 in lane 0, segment 1 in lane 1
            "index": [0, 2, 4, 1, 3, 5, 6, 7],
            "reads": [0, 3, 1, 4, 2, 5, 6 + 2, 6 + 5],
            "calls": [(0, 2, 4, [0, 1], 2)],
        }

    @pytest.mark.parametrize("planner", list(PLANNERS))
    def test_five_steps_are_a_piece_of_four_then_one(self, planner):
        is_init = torch.tensor([[False, False, False, False]])  # continues from the last batch
        done = torch.zeros(1, 4, dtype=torch.bool)
        plan = PLANNERS[planner](is_init, done, None)
        assert describe(plan) == {
            "boot_idx": [3],
            "first": [0],
            "continues": [True],
            "index": [0, 1, 2, 3, 4],
            "reads": [0, 1, 2, 3, 4 + 3],
            # the 4-step call starts from the initial state (pool row 0) and leaves its state at
            # pool row 1, where the 1-step call starts
            "calls": [(0, 1, 4, [0], 1), (4, 1, 1, [1], 2)],
        }

    @pytest.mark.parametrize("planner", list(PLANNERS))
    def test_chunk_len_anchors_continue(self, planner):
        is_init = torch.tensor([[True, False, False, False, False]])
        done = torch.zeros(1, 5, dtype=torch.bool)
        plan = PLANNERS[planner](is_init, done, 2)
        assert plan.first.tolist() == [0, 2, 4]
        assert plan.continues.tolist() == [False, True, True]
        assert plan.boot_idx.tolist() == [4]  # only the row's last step bootstraps
        assert sorted(c.length for c in plan.calls) == [2]  # lengths 2, 2, 1 + boot = 2


class TestPlanAgainstLoop:
    """A toy recurrence through the plan equals a per-row loop, for any flags."""

    @pytest.mark.parametrize("planner", list(PLANNERS))
    @pytest.mark.parametrize(
        ("n", "t", "p_done", "p_init", "chunk_len"),
        [
            (3, 1, 0.5, 0.5, None),
            (4, 9, 0.0, 0.0, None),
            (5, 40, 0.1, 0.05, None),
            (6, 130, 0.02, 0.0, None),
            (5, 33, 0.2, 0.1, 4),
            (2, 64, 0.0, 0.0, 7),
            (7, 17, 1.0, 0.0, None),
        ],
    )
    def test_toy_recurrence(self, planner, n, t, p_done, p_init, chunk_len):
        is_init, done = flags(n, t, p_done, p_init, seed=n * t)
        gen = torch.Generator().manual_seed(1)
        x = torch.randn(n * t, generator=gen, dtype=torch.float64)
        final = torch.randn(n * t, generator=gen, dtype=torch.float64)
        plan = PLANNERS[planner](is_init, done, chunk_len)
        initial = torch.randn(plan.num_segments, generator=gen, dtype=torch.float64)
        expected = loop_toy(is_init, done, x, final, initial, chunk_len)
        torch.testing.assert_close(run_toy(plan, x, final, initial), expected)

    @pytest.mark.parametrize("planner", list(PLANNERS))
    def test_index_is_a_permutation_and_reads_invert_it(self, planner):
        is_init, done = flags(8, 50, 0.05, 0.02, seed=3)
        plan = PLANNERS[planner](is_init, done, None)
        n_steps = done.numel()
        assert sorted(plan.index.tolist()) == list(range(plan.size))
        expected = torch.cat([torch.arange(n_steps), n_steps + plan.boot_idx])
        assert torch.equal(plan.reads[plan.index], expected)

    def test_no_padding_and_one_call_per_binary_digit(self):
        is_init, done = flags(16, 128, 0.015, seed=4)
        plan = plan_segments(is_init, done, None)
        assert plan.size == done.numel() + plan.boot_idx.numel()
        assert sum(c.lanes * c.length for c in plan.calls) == plan.size
        assert [c.length for c in plan.calls] == sorted({c.length for c in plan.calls})[::-1]
        assert len(plan.calls) <= (done.shape[1] + 1).bit_length()


class TestPlanners:
    """The compiled planner and the torch planner give the same plan."""

    @pytest.mark.parametrize("seed", range(6))
    @pytest.mark.parametrize("chunk_len", [None, 1, 3, 16])
    def test_same_plan(self, seed, chunk_len):
        gen = torch.Generator().manual_seed(seed)
        n, t = (
            int(torch.randint(1, 12, (1,), generator=gen)),
            int(torch.randint(1, 90, (1,), generator=gen)),
        )
        p_done = float(torch.rand(1, generator=gen)) ** 3
        is_init, done = flags(n, t, p_done, p_done / 3, seed=seed)
        assert describe(plan_segments(is_init, done, chunk_len)) == describe(
            plan_segments_torch(is_init, done, chunk_len)
        )

    @pytest.mark.parametrize("device", DEVICES)
    def test_plan_on_device(self, device):
        is_init, done = flags(4, 30, 0.1, seed=5)
        plan = plan_segments(is_init.to(device), done.to(device), None)
        assert plan.index.device.type == device
        assert describe(plan) == describe(plan_segments_torch(is_init, done, None))

    def test_compiled_is_used_on_cpu(self, monkeypatch):
        calls = []
        original = _segments._plan_cpu
        monkeypatch.setattr(_segments, "_plan_cpu", lambda *a: calls.append(1) or original(*a))
        is_init, done = flags(2, 5, 0.2, seed=6)
        plan_segments(is_init, done, None)
        assert calls == [1]
