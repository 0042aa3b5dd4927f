"""Tests of torchrl_ext.data._priorities: TorchRL's priority calls on a Sequence's buffer.

The per-anchor reduction is tested through ``Sequence.reduce_priority`` and
``Sequence.update_priority`` in ``test_sample_units.py`` (``TestSequencePriorities``).
"""

from __future__ import annotations

import copy
import pickle

import pytest
import torch
from tensordict import TensorDict
from torchrl.data import (
    LazyTensorStorage,
    TensorDictPrioritizedReplayBuffer,
    TensorDictReplayBuffer,
)
from torchrl.data.replay_buffers import Sequence as TorchRLSequence

from torchrl_ext import Sequence
from torchrl_ext.data._priorities import CheckedPriority, RoutedTensorDictPriority

BAD = [float("nan"), float("inf"), -float("inf"), -1.0]
CAPACITY, LANES, PERIOD = 40, 3, 7


def records(shape: tuple[int, ...]) -> TensorDict:
    """Episodes of ``PERIOD`` steps along the first (time) dim of ``shape``."""
    steps = shape[0]
    done = (torch.arange(steps) % PERIOD == PERIOD - 1).view(steps, *[1] * len(shape))
    done = done.expand(*shape, 1).clone()
    return TensorDict({"obs": torch.zeros(*shape, 2), ("next", "done"): done}, list(shape))


def buffer(unit, lanes: int = 0, **kwargs) -> TensorDictPrioritizedReplayBuffer:
    """A seeded prioritized buffer sampling through ``unit``, full of episodes."""
    ndim = 2 if lanes else 1
    rb = TensorDictPrioritizedReplayBuffer(
        alpha=1.0,
        beta=1.0,
        storage=LazyTensorStorage(CAPACITY * max(lanes, 1), ndim=ndim),
        sample_unit=unit,
        batch_size=8,
        generator=torch.Generator().manual_seed(0),
        **kwargs,
    )
    data = records((CAPACITY, lanes) if lanes else (CAPACITY,))
    rb.extend(data.transpose(0, 1) if lanes else data)  # collectors write [lanes, time]
    return rb


def tree(rb) -> tuple[list[float], list[float], tuple]:
    sampler = rb.sampler
    size = rb.storage.max_size
    return (
        [sampler._sum_tree[i] for i in range(size)],
        [sampler._min_tree[i] for i in range(size)],
        tuple(sampler._max_priority),
    )


def td_errors(sample, seed: int = 1) -> torch.Tensor:
    return torch.rand(sample.shape, generator=torch.Generator().manual_seed(seed)) + 0.01


def reference_priorities(unit, sample, td_error, lanes: int) -> dict[int, float]:
    """Per-anchor priorities as documented, one window and one record at a time.

    Keys are flat sum-tree positions (``time * lanes + lane`` on ``[time, lanes]`` storages).
    """
    window = unit.window
    anchor = sample["anchor_index"].reshape(-1, window, 2 if lanes else 1)
    valid = sample["validity_mask"].reshape(-1, window).tolist()
    learning = sample["learning_mask"].reshape(-1, window).tolist()
    errors = td_error.reshape(-1, window).tolist()
    best: dict[int, float] = {}
    for row in range(len(errors)):
        values = [
            errors[row][k]
            for k in range(window)
            if valid[row][k] and (learning[row][k] or not unit.priority_learning_only)
        ]
        peak, mean = max(values), sum(values) / len(values)
        value = {
            "max": peak,
            "mean": mean,
            "mixture": unit.priority_eta * peak + (1 - unit.priority_eta) * mean,
        }[unit.priority_reduction]
        first = anchor[row, 0].tolist()
        position = first[0] * lanes + first[1] if lanes else first[0]
        best[position] = max(best.get(position, -1.0), value)
    return best


class TestRoutedTensorDictPriority:
    """``rb.update_tensordict_priority(sample)`` on a buffer sampling through our ``Sequence``
    writes exactly what ``unit.update_priority(rb, sample)`` writes, for every layout, storage
    and priority setting, and refuses bad priorities with the buffer untouched."""

    @pytest.mark.parametrize("layout", ["flat", "batch_time"])
    @pytest.mark.parametrize(
        "setting",
        [
            {"priority_reduction": "max"},
            {"priority_reduction": "mean"},
            {"priority_reduction": "mixture", "priority_eta": 0.7},
            {"priority_reduction": "max", "priority_learning_only": True},
            {"priority_reduction": "mean", "priority_learning_only": True},
        ],
    )
    @pytest.mark.parametrize("lanes", [0, LANES])
    def test_stock_call_equals_unit_call_and_reference(self, layout, setting, lanes):
        unit = Sequence(4, burn_in=3, bootstrap=1, layout=layout, **setting)
        stock, ours = buffer(unit, lanes), buffer(unit, lanes)
        sample = stock.sample()
        assert torch.equal(ours.sample()["index"], sample["index"])  # twins
        td_error = td_errors(sample)
        sample.set("td_error", td_error)
        before = tree(stock)
        stock.update_tensordict_priority(sample)
        unit.update_priority(ours, sample)
        assert tree(stock) == tree(ours)
        expected = reference_priorities(unit, sample, td_error, lanes)
        sums = tree(stock)[0]
        for position, value in expected.items():
            assert sums[position] == pytest.approx(value + stock.sampler._eps, rel=1e-6)
        others = set(range(stock.storage.max_size)) - set(expected)
        assert all(sums[i] == before[0][i] for i in others)

    def test_batch_time_window_with_clamped_burn_in_is_written(self):
        """TorchRL keys a [B, window] row by its first record and skips it when that record is
        invalid; routed, the anchor of such a window gets its priority."""
        unit = Sequence(4, burn_in=3, layout="batch_time")
        rb = buffer(unit)
        sample = rb.sample()
        clamped = ~sample["validity_mask"][:, 0]
        assert clamped.any()  # the seed draws a window opening before its episode
        sample.set("td_error", torch.full(sample.shape, 5.0))
        rb.update_tensordict_priority(sample)
        sums = tree(rb)[0]
        for anchor in sample["anchor_index"][clamped, 0].tolist():
            assert sums[anchor] == pytest.approx(5.0 + rb.sampler._eps)

    @pytest.mark.parametrize("bad", BAD)
    @pytest.mark.parametrize("layout", ["flat", "batch_time"])
    def test_bad_priorities_are_refused_with_the_buffer_untouched(self, bad, layout):
        unit = Sequence(4, burn_in=2, layout=layout)
        rb, twin = buffer(unit), buffer(unit)
        sample = rb.sample()
        twin.sample()
        td_error = td_errors(sample)
        td_error.view(-1)[unit.window + 2] = bad  # window 1's first learning record
        sample.set("td_error", td_error)
        before = tree(rb)
        with pytest.raises(ValueError, match=r"finite and >= 0.*record 2 of window 1"):
            rb.update_tensordict_priority(sample)
        with pytest.raises(ValueError, match="finite and >= 0"):
            unit.update_priority(rb, sample)
        assert tree(rb) == before == tree(twin)
        for _ in range(3):  # later draws are those of a buffer that never saw the call
            assert torch.equal(rb.sample()["index"], twin.sample()["index"])

    def test_other_data_takes_torchrl_s_path(self):
        """Data without ``"anchor_index"`` (here: records just written) is TorchRL's to write,
        one priority per stored record."""
        unit = Sequence(3)
        rb, twin = buffer(unit), buffer(unit)
        rb.sample()
        unit.restore_priority_calls(twin)  # TorchRL's own method, for comparison
        data = records((6,))
        index = rb.extend(data)
        assert torch.equal(twin.extend(data.clone()), index)
        data.set("index", index).set("td_error", torch.arange(1.0, 7.0))
        rb.update_tensordict_priority(data)
        twin.update_tensordict_priority(data)
        assert tree(rb) == tree(twin)
        assert tree(rb)[0][index[2].item()] == pytest.approx(3.0 + rb.sampler._eps)

    def test_non_prioritized_buffer_is_left_as_torchrl_leaves_it(self):
        unit = Sequence(3)
        rb = TensorDictReplayBuffer(storage=LazyTensorStorage(20), sample_unit=unit, batch_size=4)
        rb.extend(records((20,)))
        sample = rb.sample()
        sample.set("td_error", torch.full(sample.shape, float("nan")))
        assert rb.update_tensordict_priority(sample) is None  # TorchRL's no-op

    def test_sync_false_buffer_is_routed(self):
        unit = Sequence(3, priority_reduction="mean")
        rb = buffer(unit, sync=False)
        sample = rb.sample()
        sample.set("td_error", torch.full(sample.shape, float("nan")))
        with pytest.raises(ValueError, match="finite"):
            rb.update_tensordict_priority(sample)


class TestCheckedPriority:
    """``rb.update_priority`` of a routed buffer refuses what a sum tree must never hold, also
    for a priority call bound before the buffer's first sample (which keeps TorchRL's
    reduction)."""

    @pytest.mark.parametrize("bad", BAD)
    def test_direct_call_refuses_bad_values(self, bad):
        unit = Sequence(3)
        rb = buffer(unit)
        rb.sample()
        before = tree(rb)
        with pytest.raises(ValueError, match=r"priority\[1\]"):
            rb.update_priority(torch.tensor([4, 5]), torch.tensor([1.0, bad]))
        assert tree(rb) == before
        rb.update_priority(torch.tensor([4, 5]), torch.tensor([1.0, 2.0]))
        assert tree(rb)[0][5] == pytest.approx(2.0 + rb.sampler._eps)

    def test_call_bound_before_the_first_sample(self):
        unit = Sequence(3, burn_in=1)
        rb = buffer(unit)
        bound = rb.update_tensordict_priority  # as TorchRL's ReplayBufferTrainer does
        sample = rb.sample()
        sample.set("td_error", torch.full(sample.shape, float("nan")))
        before = tree(rb)
        with pytest.raises(ValueError, match="finite"):
            bound(sample)
        assert tree(rb) == before

    def test_routing_before_binding(self):
        unit = Sequence(3, burn_in=1, priority_reduction="mean")
        rb, twin = buffer(unit), buffer(unit)
        unit.route_priority_calls(rb)
        bound = rb.update_tensordict_priority
        sample = rb.sample()
        twin.sample()
        sample.set("td_error", td_errors(sample))
        bound(sample)
        unit.update_priority(twin, sample)
        assert tree(rb) == tree(twin)


class TestPriorityCallsLifecycle:
    """Routes are set once, on buffers sampling through the unit only, undone by
    ``restore_priority_calls``, and travel with the buffer when it is copied or pickled."""

    def test_first_sample_sets_exactly_the_two_routes(self):
        unit = Sequence(3)
        rb = buffer(unit)
        before = dict(vars(rb))
        rb.sample()
        added = vars(rb).keys() - before.keys()
        assert added == {"update_tensordict_priority", "update_priority"}
        assert isinstance(rb.update_tensordict_priority, RoutedTensorDictPriority)
        assert isinstance(rb.update_priority, CheckedPriority)
        assert rb.update_priority.unit is unit and rb.update_priority.buffer is rb
        routes = dict(vars(rb))
        rb.sample()
        assert all(vars(rb)[name] is routes[name] for name in added)  # set once

    def test_restore_undoes_the_routes_for_good(self):
        unit = Sequence(3, priority_reduction="mean")
        rb = buffer(unit)
        before = set(vars(rb))
        rb.sample()
        unit.restore_priority_calls(rb)
        assert set(vars(rb)) == before
        assert rb.update_tensordict_priority.__func__ is type(rb).update_tensordict_priority
        rb.sample()
        assert set(vars(rb)) == before
        unit.route_priority_calls(rb)
        assert isinstance(rb.update_priority, CheckedPriority)

    def test_a_method_set_by_the_user_is_left_alone(self):
        unit = Sequence(3)
        rb = buffer(unit)
        mine = rb.update_priority  # a bound method the user pinned on the object
        rb.update_priority = mine
        rb.sample()
        assert rb.update_priority is mine
        assert isinstance(rb.update_tensordict_priority, RoutedTensorDictPriority)

    def test_route_refuses_a_buffer_of_another_unit(self):
        rb = buffer(Sequence(3))
        with pytest.raises(ValueError, match="buffer must sample through this unit"):
            Sequence(3).route_priority_calls(rb)

    def test_other_buffers_on_the_storage_are_not_routed(self):
        unit = Sequence(3)
        rb = buffer(unit)
        other = TensorDictReplayBuffer(storage=rb.storage, batch_size=4)
        rb.sample()
        unit.expand(torch.tensor([1, 2]), {}, other.storage)
        assert "update_priority" not in vars(other)

    @pytest.mark.parametrize("clone", [copy.deepcopy, lambda rb: pickle.loads(pickle.dumps(rb))])
    def test_routes_follow_the_buffer(self, clone):
        unit = Sequence(3, priority_reduction="mean")
        rb = buffer(unit)
        rb.sample()
        copied = clone(rb)
        route = copied.update_tensordict_priority
        assert isinstance(route, RoutedTensorDictPriority) and route.buffer is copied
        assert route.unit is copied.update_priority.unit is not unit
        sample = copied.sample()
        sample.set("td_error", td_errors(sample))
        before = tree(rb)
        copied.update_tensordict_priority(sample)
        assert tree(rb) == before  # the original is not written through the copy
        expected = reference_priorities(route.unit, sample, sample["td_error"], 0)
        sums = tree(copied)[0]
        for position, value in expected.items():
            assert sums[position] == pytest.approx(value + copied.sampler._eps, rel=1e-6)


class TestTorchRLSequenceUnchanged:
    """TorchRL's own ``Sequence`` on a stock buffer keeps TorchRL's behaviour: nothing is set on
    the buffer, and the stock call writes the per-anchor max over valid records."""

    def test_stock_unit_is_not_touched(self):
        unit = TorchRLSequence(4, burn_in=2)
        rb = buffer(unit)
        before = set(vars(rb))
        sample = rb.sample()
        assert set(vars(rb)) == before
        td_error = td_errors(sample)
        sample.set("td_error", td_error)
        rb.update_tensordict_priority(sample)
        window = 6
        valid = sample["validity_mask"].view(-1, window)
        anchors = sample["anchor_index"].view(-1, window)[:, 0].tolist()
        errors = td_error.view(-1, window)
        expected: dict[int, float] = {}
        for row, anchor in enumerate(anchors):
            value = max(errors[row, k].item() for k in range(window) if valid[row, k])
            expected[anchor] = max(expected.get(anchor, -1.0), value)
        sums = tree(rb)[0]
        for anchor, value in expected.items():
            assert sums[anchor] == pytest.approx(value + rb.sampler._eps, rel=1e-6)
