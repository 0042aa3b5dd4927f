"""Tests of torchrl_ext.data.sample_units: SampleUnit, Transition, Sequence."""

from __future__ import annotations

import itertools
import math
import threading

import numpy as np
import pytest
import sequence_reference as reference
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from scipy import stats
from tensordict import TensorDict
from torchrl.data import (
    LazyMemmapStorage,
    LazyTensorStorage,
    ListStorage,
    PrioritizedReplayBuffer,
    ReplayBuffer,
    TensorDictPrioritizedReplayBuffer,
    TensorDictReplayBuffer,
)
from torchrl.data.replay_buffers import SampleUnit as TorchRLSampleUnit
from torchrl.data.replay_buffers import Sequence as TorchRLSequence
from torchrl.modules import LSTMModule

from torchrl_ext import SampleUnit, Sequence, Transition

SETTINGS = settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[
        HealthCheck.too_slow,
        HealthCheck.data_too_large,
        HealthCheck.function_scoped_fixture,
    ],
)


@pytest.fixture(autouse=True, params=["compiled", "vectorized"])
def backend(request, monkeypatch):
    """Every test runs on both window builders: the compiled loop and batched tensor ops."""
    monkeypatch.setattr(Sequence, "use_compiled", request.param == "compiled")
    return request.param


def episodes_td(done: list[bool], start: int = 0) -> TensorDict:
    n = len(done)
    return TensorDict(
        {
            "obs": torch.arange(start, start + n, dtype=torch.float32).unsqueeze(-1),
            "step": torch.arange(start, start + n),
            ("next", "done"): torch.tensor(done, dtype=torch.bool).view(n, 1),
        },
        [n],
    )


def fill(capacity: int, done: list[bool], chunks: list[int] | None = None, storage=None):
    """A TensorDict buffer holding ``done`` written in order (wrapping when longer)."""
    rb = TensorDictReplayBuffer(storage=storage or LazyTensorStorage(capacity))
    chunks = chunks or [len(done)]
    start = 0
    for size in chunks:
        if start >= len(done):
            break
        part = done[start : start + size]
        rb.extend(episodes_td(part, start))
        start += len(part)
    if start < len(done):
        rb.extend(episodes_td(done[start:], start))
    return rb


def prioritized(unit: Sequence, records: int = 50, period: int = 10):
    """A prioritized TensorDict buffer sampling through ``unit``, episodes of ``period``."""
    rb = TensorDictPrioritizedReplayBuffer(
        alpha=1.0,
        beta=1.0,
        storage=LazyTensorStorage(records),
        sample_unit=unit,
        batch_size=6,
        generator=torch.Generator().manual_seed(0),
    )
    rb.extend(episodes_td([i % period == period - 1 for i in range(records)]))
    return rb


def ring_of(rb, total: int) -> reference.Ring:
    storage = rb.storage
    written = len(storage)
    flags = storage._storage.get(("next", "done"))[:written].view(-1).tolist()
    return reference.Ring(
        done=flags, full=written == storage.max_size, newest=(total - 1) % written
    )


def windows(unit, rb, anchors):
    index, info = unit.expand(torch.as_tensor(anchors), {}, rb.storage)
    window = unit.window
    return index.view(-1, window), info


class TestSampleUnit:
    """SampleUnit is torchrl's abstract base: stock buffers accept any subclass of ours."""

    def test_is_a_torchrl_sample_unit(self):
        assert issubclass(SampleUnit, TorchRLSampleUnit)
        with pytest.raises(TypeError):
            SampleUnit()

    def test_custom_subclass_in_stock_buffer(self):
        class Doubled(SampleUnit):
            def expand(self, index, info, storage):
                return torch.cat([index, index]), info

        rb = ReplayBuffer(storage=LazyTensorStorage(10), batch_size=3, sample_unit=Doubled())
        rb.extend(torch.arange(10))
        sample = rb.sample()
        assert sample.shape == (6,)
        assert torch.equal(sample[:3], sample[3:])


class TestTransition:
    """Transition is the identity: same batches as sample_unit=None under one generator."""

    @pytest.mark.parametrize("prioritized", [False, True])
    def test_identical_to_no_unit(self, prioritized):
        samples = []
        for unit in (None, Transition()):
            kwargs = {
                "storage": LazyTensorStorage(50),
                "batch_size": 7,
                "sample_unit": unit,
                "generator": torch.Generator().manual_seed(3),
            }
            if prioritized:
                rb = TensorDictPrioritizedReplayBuffer(alpha=0.7, beta=0.5, **kwargs)
            else:
                rb = TensorDictReplayBuffer(**kwargs)
            rb.extend(episodes_td([False] * 50))
            samples.append([rb.sample() for _ in range(5)])
        for a, b in zip(*samples, strict=True):
            assert torch.equal(a["step"], b["step"])
            assert torch.equal(a["index"], b["index"])
            if prioritized:
                assert torch.equal(a["priority_weight"], b["priority_weight"])

    def test_expand_returns_inputs(self):
        index, info = torch.tensor([1, 2]), {"w": torch.ones(2)}
        out_index, out_info = Transition().expand(index, info, LazyTensorStorage(3))
        assert out_index is index and out_info is info


class TestSequenceArguments:
    """Bad arguments are rejected at construction with the argument and value named."""

    @pytest.mark.parametrize(
        "kwargs, error, match",
        [
            ({"length": 0}, ValueError, "length"),
            ({"length": -2}, ValueError, "length=-2"),
            ({"length": 2.0}, TypeError, "length"),
            ({"length": True}, TypeError, "length"),
            ({"length": 2, "episode_boundary": "wrap"}, ValueError, "episode_boundary='wrap'"),
            ({"length": 2, "burn_in": -1}, ValueError, "burn_in=-1"),
            ({"length": 2, "bootstrap": -3}, ValueError, "bootstrap=-3"),
            ({"length": 2, "stride": 0}, ValueError, "stride=0"),
            ({"length": 2, "dilation": 0}, ValueError, "dilation=0"),
            ({"length": 2, "stride": 2, "dilation": 3}, ValueError, "dilation=3"),
            ({"length": 2, "layout": "time_batch"}, ValueError, "layout"),
            ({"length": 2, "priority_reduction": "sum"}, ValueError, "priority_reduction"),
            ({"length": 2, "priority_eta": 1.5}, ValueError, "priority_eta=1.5"),
            ({"length": 2, "priority_eta": "x"}, TypeError, "priority_eta"),
            ({"length": 2, "priority_learning_only": 1}, TypeError, "priority_learning_only"),
            ({"length": 2, "done_key": 3}, TypeError, "done_key=3"),
            ({"length": 2, "done_key": ()}, ValueError, "done_key"),
            (
                {"length": 2, "traj_key": "traj", "episode_boundary": "include_reset"},
                ValueError,
                "include_reset",
            ),
        ],
    )
    def test_rejects(self, kwargs, error, match):
        with pytest.raises(error, match=match):
            Sequence(**kwargs)

    def test_dilation_is_an_alias_of_stride(self):
        assert Sequence(3, dilation=2).stride == 2
        assert Sequence(3, stride=2).dilation == 2
        assert Sequence(3, stride=2, dilation=2).stride == 2

    def test_is_a_torchrl_sequence(self):
        unit = Sequence(4, burn_in=1)
        assert isinstance(unit, TorchRLSequence) and isinstance(unit, SampleUnit)
        assert unit.window == 5

    def test_list_keys_become_tuples(self):
        assert Sequence(2, done_key=["next", "done"]).done_key == ("next", "done")


class TestSequenceExact:
    """Hand-computed windows for every boundary policy, burn-in/bootstrap/stride and seam."""

    # slots 0..9, episodes [0..3] [4..9]; 9 is also the newest record (not full)
    DONE = [False, False, False, True, False, False, False, False, False, True]

    def test_pad_keeps_anchor_and_clamps_past_the_end(self):
        rb = fill(10, self.DONE)
        index, info = windows(Sequence(3), rb, [2, 8])
        assert index.tolist() == [[2, 3, 3], [8, 9, 9]]
        assert info["validity_mask"].view(2, 3).tolist() == [[True, True, False]] * 2

    def test_stop_shifts_back_to_the_episode_end(self):
        rb = fill(10, self.DONE)
        index, info = windows(Sequence(3, "stop"), rb, [2, 8, 4])
        assert index.tolist() == [[1, 2, 3], [7, 8, 9], [4, 5, 6]]
        assert info["validity_mask"].all()
        assert info["anchor_index"].view(3, 3)[:, 0].tolist() == [2, 8, 4]

    def test_stop_falls_back_to_pad_for_short_episodes(self):
        rb = fill(10, self.DONE)
        index, info = windows(Sequence(6, "stop"), rb, [1])
        assert index.tolist() == [[0, 1, 2, 3, 3, 3]]
        assert info["validity_mask"].tolist() == [True] * 4 + [False] * 2

    def test_include_reset_crosses_episode_ends(self):
        rb = fill(10, self.DONE)
        index, info = windows(Sequence(4, "include_reset"), rb, [2, 8])
        assert index.tolist() == [[2, 3, 4, 5], [8, 9, 9, 9]]
        assert info["validity_mask"].view(2, 4).tolist() == [
            [True] * 4,
            [True, True, False, False],
        ]

    def test_burn_in_clamps_at_the_episode_start(self):
        rb = fill(10, self.DONE)
        index, info = windows(Sequence(2, burn_in=3), rb, [5, 1])
        assert index.tolist() == [[4, 4, 4, 5, 6], [0, 0, 0, 1, 2]]
        assert info["validity_mask"].view(2, 5).tolist() == [
            [False, False, True, True, True],
            [False, False, True, True, True],
        ]
        assert info["learning_mask"].view(2, 5)[0].tolist() == [False] * 3 + [True] * 2

    def test_burn_in_does_not_shift_under_stop(self):
        rb = fill(10, self.DONE)
        index, _ = windows(Sequence(2, "stop", burn_in=2), rb, [9])
        # the anchor is shifted by the stop policy (9 -> 8); burn-in then reads 6, 7
        assert index.tolist() == [[6, 7, 8, 9]]

    def test_bootstrap_obeys_the_boundary(self):
        rb = fill(10, self.DONE)
        index, info = windows(Sequence(2, bootstrap=2), rb, [1])
        assert index.tolist() == [[1, 2, 3, 3]]
        assert info["validity_mask"].tolist() == [True, True, True, False]
        assert info["learning_mask"].tolist() == [True, True, False, False]
        index, _ = windows(Sequence(2, "stop", bootstrap=2), rb, [1])
        assert index.tolist() == [[0, 1, 2, 3]]

    def test_stride(self):
        rb = fill(10, self.DONE)
        index, info = windows(Sequence(3, stride=2, burn_in=1), rb, [6, 4])
        assert index.tolist() == [[4, 6, 8, 9], [4, 4, 6, 8]]
        assert info["validity_mask"].view(2, 4).tolist() == [
            [True, True, True, False],
            [False, True, True, True],
        ]

    def test_wrapped_ring_never_crosses_the_seam(self):
        # capacity 6, 9 records written: slots hold records [6, 7, 8, 3, 4, 5]; newest slot 2
        rb = fill(6, [False] * 9)
        index, info = windows(Sequence(3, "include_reset", burn_in=2), rb, [1, 3])
        assert index.tolist() == [[5, 0, 1, 2, 2], [3, 3, 3, 4, 5]]
        assert info["validity_mask"].view(2, 5).tolist() == [
            [True, True, True, True, False],
            [False, False, True, True, True],
        ]

    def test_wrapped_ring_windows_run_across_the_storage_end(self):
        rb = fill(6, [False] * 9)
        index, info = windows(Sequence(4, "pad"), rb, [4])
        assert index.tolist() == [[4, 5, 0, 1]]
        assert info["validity_mask"].all()

    def test_unwritten_slots_are_never_read(self):
        rb = fill(10, [False] * 4)
        index, info = windows(Sequence(4, "include_reset", burn_in=1), rb, [2])
        assert index.tolist() == [[1, 2, 3, 3, 3]]
        assert info["validity_mask"].tolist() == [True, True, True, False, False]

    def test_done_key_none_is_one_trajectory(self):
        rb = fill(10, self.DONE)
        index, info = windows(Sequence(4, done_key=None), rb, [2])
        assert index.tolist() == [[2, 3, 4, 5]]
        assert info["validity_mask"].all()

    def test_per_record_info(self):
        rb = fill(10, self.DONE)
        _, info = windows(Sequence(2, burn_in=1, bootstrap=1), rb, [5, 6])
        assert info["sequence_id"].tolist() == [0] * 4 + [1] * 4
        assert info["step_in_sequence"].tolist() == [0, 1, 2, 3] * 2
        assert info["learning_mask"].tolist() == [False, True, True, False] * 2
        assert info["anchor_index"].tolist() == [5] * 4 + [6] * 4


class TestSequenceReference:
    """Our expansion equals the plain-loop reference and torchrl's own unit on random layouts."""

    @staticmethod
    def layout(data):
        capacity = data.draw(st.integers(4, 48), label="capacity")
        total = data.draw(st.integers(1, 3 * capacity), label="total")
        done = data.draw(st.lists(st.booleans(), min_size=total, max_size=total), label="done")
        chunks = data.draw(st.lists(st.integers(1, 9), min_size=1, max_size=40), label="chunks")
        return capacity, done, chunks

    @staticmethod
    def params(data):
        return {
            "length": data.draw(st.integers(1, 6), label="length"),
            "episode_boundary": data.draw(st.sampled_from(["pad", "stop", "include_reset"])),
            "burn_in": data.draw(st.integers(0, 4), label="burn_in"),
            "bootstrap": data.draw(st.integers(0, 3), label="bootstrap"),
            "stride": data.draw(st.integers(1, 3), label="stride"),
        }

    @SETTINGS
    @given(data=st.data())
    def test_matches_reference_loop(self, data):
        capacity, done, chunks = self.layout(data)
        params = self.params(data)
        rb = fill(capacity, done, chunks)
        ring = ring_of(rb, len(done))
        anchors = data.draw(st.lists(st.integers(0, ring.written - 1), min_size=1, max_size=6))
        unit = Sequence(**params, layout="batch_time")
        index, info = unit.expand(torch.tensor(anchors), {}, rb.storage)
        for row, anchor in enumerate(anchors):
            slots, valid, is_init = reference.expand(ring, anchor, **params)
            assert index[row].tolist() == slots
            assert info["validity_mask"][row].tolist() == valid
            assert info["is_init"][row].tolist() == is_init

    @SETTINGS
    @given(data=st.data())
    def test_matches_torchrl_sequence(self, data):
        capacity, done, chunks = self.layout(data)
        params = self.params(data)
        rb = fill(capacity, done, chunks)
        anchors = torch.tensor(
            data.draw(st.lists(st.integers(0, len(rb) - 1), min_size=1, max_size=6))
        )
        ours = Sequence(**params).expand(anchors, {}, rb.storage)
        stride = params.pop("stride")
        theirs = TorchRLSequence(**params, dilation=stride).expand(anchors, {}, rb.storage)
        assert torch.equal(ours[0], theirs[0])
        for key in ("validity_mask", "learning_mask", "anchor_index", "step_in_sequence"):
            assert torch.equal(ours[1][key], theirs[1][key]), key

    @pytest.mark.parametrize("boundary", ["pad", "stop", "include_reset"])
    def test_large_buffer_fast_path(self, boundary):
        """Anchors far from the storage ends take the sliding-window read; compare both reads."""
        gen = torch.Generator().manual_seed(0)
        done = (torch.rand(3000, generator=gen) < 0.03).tolist()
        rb = fill(2000, done)
        ring = ring_of(rb, len(done))
        anchors = torch.randint(0, 2000, (64,), generator=gen)
        unit = Sequence(7, boundary, burn_in=5, bootstrap=2, stride=2, layout="batch_time")
        index, info = unit.expand(anchors, {}, rb.storage)
        for row, anchor in enumerate(anchors.tolist()):
            slots, valid, is_init = reference.expand(
                ring, anchor, 7, boundary, burn_in=5, bootstrap=2, stride=2
            )
            assert index[row].tolist() == slots
            assert info["validity_mask"][row].tolist() == valid
            assert info["is_init"][row].tolist() == is_init


class TestSequenceStorages:
    """Memmap, multi-dimensional and trajectory-id storages give the same windows."""

    def test_memmap_equals_tensor_storage(self, tmp_path):
        gen = torch.Generator().manual_seed(1)
        done = (torch.rand(150, generator=gen) < 0.1).tolist()
        a = fill(100, done, [17] * 10)
        b = fill(100, done, [17] * 10, storage=LazyMemmapStorage(100, scratch_dir=tmp_path))
        anchors = torch.randint(0, 100, (32,), generator=gen)
        for boundary in ("pad", "stop", "include_reset"):
            unit = Sequence(5, boundary, burn_in=3, bootstrap=1)
            ia, fa = unit.expand(anchors, {}, a.storage)
            ib, fb = unit.expand(anchors, {}, b.storage)
            assert torch.equal(ia, ib)
            assert torch.equal(fa["validity_mask"], fb["validity_mask"])

    @pytest.mark.parametrize("boundary", ["pad", "stop", "include_reset"])
    @pytest.mark.parametrize("layout", ["flat", "batch_time"])
    def test_time_by_lane_storage_equals_each_lane_alone(self, boundary, layout):
        gen = torch.Generator().manual_seed(2)
        steps, lanes, capacity = 37, 3, 16
        done = torch.rand(steps, lanes, generator=gen) < 0.15
        rb2 = TensorDictReplayBuffer(storage=LazyTensorStorage(capacity * lanes, ndim=2))
        for t0 in range(0, steps, 5):
            part = done[t0 : t0 + 5].T  # collector layout: [lanes, time]
            rb2.extend(
                TensorDict(
                    {"step": torch.arange(t0, t0 + part.shape[1]).expand(lanes, -1)}
                    | {("next", "done"): part.unsqueeze(-1)},
                    [lanes, part.shape[1]],
                )
            )
        unit = Sequence(4, boundary, burn_in=2, bootstrap=1, layout=layout)
        time = torch.randint(0, capacity, (12,), generator=gen)
        lane = torch.randint(0, lanes, (12,), generator=gen)
        (t_idx, l_idx), info = unit.expand((time, lane), {}, rb2.storage)
        t_idx, l_idx = t_idx.reshape(12, -1), l_idx.reshape(12, -1)
        valid = info["validity_mask"].reshape(12, -1)
        for j in range(lanes):
            rb1 = fill(capacity, done[:, j].tolist(), [5] * 8)
            mine = lane == j
            i1, f1 = unit.expand(time[mine], {}, rb1.storage)
            assert torch.equal(t_idx[mine].reshape(-1), i1.reshape(-1))
            assert (l_idx[mine] == j).all()
            assert torch.equal(valid[mine].reshape(-1), f1["validity_mask"].reshape(-1))
        assert info["anchor_index"].shape[-1] == 2

    def test_time_by_lane_buffer_sample(self):
        rb = TensorDictReplayBuffer(
            storage=LazyTensorStorage(40, ndim=2),
            sample_unit=Sequence(3, burn_in=1, layout="batch_time"),
            batch_size=5,
        )
        done = torch.zeros(4, 10, 1, dtype=torch.bool)  # [lanes, time], as collectors give
        done[:, 4] = True
        rb.extend(TensorDict({"x": torch.randn(4, 10), ("next", "done"): done}, [4, 10]))
        sample = rb.sample()
        assert sample.shape == (5, 4)
        assert sample["index"].shape == (5, 4, 2)
        assert (sample["index"][..., 1] == sample["index"][:, :1, 1]).all()

    @SETTINGS
    @given(data=st.data())
    def test_interleaved_trajectories(self, data):
        """Trajectory ids interleaved in storage: windows follow each trajectory in write order."""
        capacity = data.draw(st.integers(6, 40), label="capacity")
        ids = data.draw(st.lists(st.integers(0, 3), min_size=1, max_size=3 * capacity))
        chunks = data.draw(st.lists(st.integers(1, 7), min_size=1, max_size=30))
        params = TestSequenceReference.params(data)
        if params["episode_boundary"] == "include_reset":
            params["episode_boundary"] = "pad"
        unit = Sequence(**params, traj_key="traj")
        rb = TensorDictReplayBuffer(storage=LazyTensorStorage(capacity), sample_unit=unit)
        serial = {}
        start = 0
        first = True
        for size in chunks + [len(ids)]:
            part = ids[start : start + size]
            if not part:
                break
            rb.extend(
                TensorDict(
                    {"traj": torch.tensor(part), "serial": torch.arange(start, start + len(part))},
                    [len(part)],
                )
            )
            for offset in range(len(part)):
                serial[(start + offset) % capacity] = start + offset
            start += len(part)
            if first:  # the first expansion builds the index; later writes update it
                unit.expand(torch.tensor([0]), {}, rb.storage)
                first = False
        anchors = data.draw(st.lists(st.integers(0, len(rb) - 1), min_size=1, max_size=5))
        index, info = unit.expand(torch.tensor(anchors), {}, rb.storage)
        index = index.view(len(anchors), -1)
        valid = info["validity_mask"].view(len(anchors), -1)
        for row, anchor in enumerate(anchors):
            tid = ids[serial[anchor]]
            # live records of one id, in write order (a ring overwrites oldest first)
            chain = sorted((s for s in serial if ids[serial[s]] == tid), key=serial.get)
            slots, ok = reference.expand_chain(chain, chain.index(anchor), **params)
            assert index[row].tolist() == slots
            assert valid[row].tolist() == ok

    def test_traj_key_needs_one_dimensional_storage(self):
        rb = TensorDictReplayBuffer(storage=LazyTensorStorage(8, ndim=2))
        rb.extend(TensorDict({"traj": torch.zeros(4, 2, dtype=torch.long)}, [4, 2]))
        with pytest.raises(ValueError, match="ndim=2"):
            Sequence(2, traj_key="traj").expand(
                (torch.tensor([0]), torch.tensor([0])), {}, rb.storage
            )

    def test_traj_index_rebuilds_after_direct_writes(self):
        unit = Sequence(3, traj_key="traj")
        rb = TensorDictReplayBuffer(storage=LazyTensorStorage(6), sample_unit=unit)
        rb.extend(TensorDict({"traj": torch.tensor([0, 0, 0, 1, 1, 1])}, [6]))
        index, _ = unit.expand(torch.tensor([0]), {}, rb.storage)
        assert index.tolist() == [0, 1, 2]
        rb.storage.set(torch.tensor([1]), TensorDict({"traj": torch.tensor([1])}, [1]))
        index, info = unit.expand(torch.tensor([0]), {}, rb.storage)
        assert index.tolist() == [0, 0, 0]
        assert info["validity_mask"].tolist() == [True, False, False]


class TestSequenceInfoAndErrors:
    """Per-anchor info expands block-constant; bad storages and keys get clear errors."""

    def test_weights_expand_block_constant(self):
        rb = fill(20, [False] * 20)
        weights = torch.tensor([0.5, 2.0])
        _, info = Sequence(3).expand(torch.tensor([1, 7]), {"w": weights, "s": 1.0}, rb.storage)
        assert info["w"].tolist() == [0.5] * 3 + [2.0] * 3
        assert info["s"] == 1.0
        _, info = Sequence(3, layout="batch_time").expand(
            torch.tensor([1, 7]), {"w": weights}, rb.storage
        )
        assert info["w"].tolist() == [[0.5] * 3, [2.0] * 3]

    def test_misaligned_info_is_rejected(self):
        rb = fill(20, [False] * 20)
        with pytest.raises(ValueError, match="'w' has 3 rows"):
            Sequence(3).expand(torch.tensor([1, 7]), {"w": torch.ones(3)}, rb.storage)

    def test_storage_must_be_tensordict_backed(self):
        rb = ReplayBuffer(storage=ListStorage(10))
        rb.extend([1, 2, 3])
        with pytest.raises(TypeError, match="ListStorage"):
            Sequence(2).expand(torch.tensor([0]), {}, rb.storage)
        rb = ReplayBuffer(storage=LazyTensorStorage(10))
        rb.extend(torch.arange(5))
        with pytest.raises(TypeError, match="TensorDict"):
            Sequence(2).expand(torch.tensor([0]), {}, rb.storage)

    def test_missing_done_key_lists_stored_keys(self):
        rb = TensorDictReplayBuffer(storage=LazyTensorStorage(10))
        rb.extend(
            TensorDict(
                {
                    "obs": torch.zeros(4),
                    ("next", "terminated"): torch.zeros(4, 1, dtype=torch.bool),
                },
                [4],
            )
        )
        with pytest.raises(ValueError, match=r"\('next', 'done'\).*'obs'"):
            Sequence(2).expand(torch.tensor([0]), {}, rb.storage)

    def test_failed_sample_leaves_buffer_usable(self):
        rb = TensorDictReplayBuffer(
            storage=LazyTensorStorage(10), sample_unit=Sequence(2, done_key="missing"), batch_size=2
        )
        rb.extend(episodes_td([False] * 10))
        with pytest.raises(ValueError, match="missing"):
            rb.sample()
        assert len(rb) == 10
        rb._sample_unit = Sequence(2)
        assert rb.sample().shape == (4,)


class TestSequenceBatchTime:
    """layout='batch_time' returns [B, T] samples that an LSTMModule consumes directly."""

    def test_shape_and_is_init(self):
        done = [False] * 5 + [True] + [False] * 14
        unit = Sequence(4, "include_reset", burn_in=2, layout="batch_time")
        rb = TensorDictReplayBuffer(storage=LazyTensorStorage(20), sample_unit=unit, batch_size=3)
        rb.extend(episodes_td(done))
        index, info = unit.expand(torch.tensor([4, 10]), {}, rb.storage)
        assert index.tolist() == [[2, 3, 4, 5, 6, 7], [8, 9, 10, 11, 12, 13]]
        assert info["is_init"].tolist() == [
            [True, False, False, False, True, False],
            [True, False, False, False, False, False],
        ]
        sample = rb.sample()
        assert sample.shape == (3, 6)
        assert sample["is_init"].dtype == torch.bool and sample["is_init"][:, 0].all()

    def test_is_init_where_the_valid_part_starts(self):
        rb = fill(10, [False, False, True] + [False] * 7)
        unit = Sequence(2, burn_in=3, layout="batch_time")
        _, info = unit.expand(torch.tensor([4]), {}, rb.storage)
        assert info["validity_mask"].tolist() == [[False, False, True, True, True]]
        assert info["is_init"].tolist() == [[True, False, True, False, False]]

    def test_lstm_consumes_the_batch(self):
        torch.manual_seed(0)
        lstm = LSTMModule(
            input_size=1,
            hidden_size=8,
            in_key="obs",
            out_key="features",
            default_recurrent_mode=True,
        )
        unit = Sequence(5, "include_reset", burn_in=3, layout="batch_time")
        rb = TensorDictReplayBuffer(
            storage=LazyTensorStorage(100),
            sample_unit=unit,
            batch_size=4,
            generator=torch.Generator().manual_seed(0),
        )
        done = [(i % 7) == 6 for i in range(100)]
        rb.extend(episodes_td(done))
        batch = rb.sample()
        out = lstm(batch)
        assert out["features"].shape == (4, 8, 8)
        # a reset inside the window makes the output equal a fresh run from that record
        row, col = next((r, c) for r in range(4) for c in range(1, 8) if batch["is_init"][r, c])
        fresh = batch[row : row + 1, col:].clone()
        fresh["is_init"][:, 0] = True
        expected = lstm(fresh)["features"]
        assert torch.allclose(out["features"][row, col:], expected[0], atol=1e-6)


class TestSequencePriorities:
    """Priorities live per anchor: reductions, routing through stock buffers, steering."""

    def _sample(self, **kwargs):
        rb = fill(20, [False] * 9 + [True] + [False] * 10)
        unit = Sequence(3, burn_in=1, bootstrap=1, **kwargs)
        _, info = unit.expand(torch.tensor([7, 2, 7]), {}, rb.storage)
        return unit, info

    def test_reductions_by_hand(self):
        priority = torch.tensor(
            [9.0, 1.0, 2.0, 3.0, 5.0]  # anchor 7: burn-in 6, learn 7 8 9, bootstrap padded
            + [4.0, 1.0, 1.0, 4.0, 0.0]  # anchor 2
            + [0.0, 2.0, 2.0, 2.0, 7.0]  # anchor 7 again
        )
        unit, info = self._sample()
        anchors, value = unit.reduce_priority(info, priority)
        assert anchors.tolist() == [2, 7]
        # window max over valid records (anchor 7's last record is padded, 5.0 ignored)
        assert value.tolist() == [4.0, 9.0]
        unit, _ = self._sample(priority_reduction="mean")
        assert torch.allclose(unit.reduce_priority(info, priority)[1], torch.tensor([2.0, 3.75]))
        unit, _ = self._sample(priority_reduction="mixture", priority_eta=0.5)
        expected = torch.tensor(
            [0.5 * 4 + 0.5 * 2.0, max(0.5 * 9 + 0.5 * 3.75, 0.5 * 2 + 0.5 * 1.5)]
        )
        assert torch.allclose(unit.reduce_priority(info, priority)[1], expected)
        unit, _ = self._sample(priority_learning_only=True)
        assert unit.reduce_priority(info, priority)[1].tolist() == [4.0, 3.0]

    def test_wrong_priority_size(self):
        unit, info = self._sample()
        with pytest.raises(ValueError, match="one value per record"):
            unit.reduce_priority(info, torch.ones(4))

    @staticmethod
    def _tree(rb, size: int = 50) -> list[float]:
        return [rb.sampler._sum_tree[i] for i in range(size)]

    @pytest.mark.parametrize("layout", ["flat", "batch_time"])
    @pytest.mark.parametrize("reduction", ["max", "mean", "mixture"])
    def test_update_priority_routes_to_anchors(self, layout, reduction):
        unit = Sequence(4, burn_in=2, layout=layout, priority_reduction=reduction)
        rb = prioritized(unit)
        sample = rb.sample()
        gen = torch.Generator().manual_seed(1)
        sample.set("td_error", torch.rand(sample.shape, generator=gen) + 0.1)
        anchors, expected = unit.reduce_priority(sample, sample["td_error"])
        before = self._tree(rb)
        unit.update_priority(rb, sample)
        after = self._tree(rb)
        got = torch.tensor([after[int(a)] for a in anchors])
        assert torch.allclose(got, expected.float() + rb.sampler._eps, atol=1e-5)
        untouched = [i for i in range(50) if i not in set(anchors.tolist())]
        assert all(after[i] == before[i] for i in untouched)

    def test_update_priority_takes_an_explicit_priority(self):
        unit = Sequence(4, burn_in=2, priority_reduction="mean")
        rb, twin = prioritized(unit), prioritized(unit)
        sample = rb.sample()
        td_error = torch.rand(sample.shape, generator=torch.Generator().manual_seed(3))
        unit.update_priority(rb, sample, td_error)
        unit.update_priority(twin, sample.set("td_error", td_error))
        assert self._tree(rb) == self._tree(twin)

    def test_update_priority_needs_a_priority(self):
        unit = Sequence(4, burn_in=2)
        rb = prioritized(unit)
        with pytest.raises(ValueError, match="'td_error'"):
            unit.update_priority(rb, rb.sample())
        with pytest.raises(TypeError, match="buffer=dict"):
            unit.update_priority({}, rb.sample(), torch.ones(36))

    def test_update_tensordict_priority_equals_ours_on_flat_max(self):
        """torchrl's own anchor reduction: max over valid records, per anchor (flat layout)."""
        unit = Sequence(4, burn_in=2, bootstrap=1)
        ours, theirs = prioritized(unit, period=7), prioritized(unit, period=7)
        sample = ours.sample()
        assert torch.equal(theirs.sample()["index"], sample["index"])  # same generator seed
        sample.set("td_error", torch.rand(sample.shape, generator=torch.Generator().manual_seed(4)))
        unit.update_priority(ours, sample)
        theirs.update_tensordict_priority(sample)
        assert self._tree(ours) == self._tree(theirs)

    def test_torchrl_s_own_call_on_batch_time_differs(self):
        """Why the unit routes the stock call: torchrl's own method, on batch_time samples,
        takes the max over all records and skips anchors whose first record is invalid; the
        unit's update reduces over valid records and keeps them all."""
        unit = Sequence(4, burn_in=2, layout="batch_time")
        rb = prioritized(unit)
        sample = rb.sample()
        unit.restore_priority_calls(rb)  # torchrl's own update_tensordict_priority
        first_invalid = ~sample["validity_mask"][:, 0]
        assert first_invalid.any()  # the seed draws a window whose burn-in is clamped
        td_error = torch.rand(sample.shape, generator=torch.Generator().manual_seed(1)) + 0.1
        sample.set("td_error", td_error)
        before = self._tree(rb)
        rb.update_tensordict_priority(sample)
        after = self._tree(rb)
        anchors = sample["anchor_index"][:, 0]
        eps = rb.sampler._eps
        for row, anchor in enumerate(anchors.tolist()):
            if first_invalid[row]:
                assert after[anchor] == before[anchor]
            else:
                assert after[anchor] == pytest.approx(td_error[row].max().item() + eps)
        unit.update_priority(rb, sample)
        skipped = anchors[first_invalid].tolist()
        assert all(self._tree(rb)[a] != before[a] for a in skipped)

    def test_update_priority_on_plain_prioritized_buffer(self):
        unit = Sequence(3)
        rb = PrioritizedReplayBuffer(
            alpha=1.0, beta=1.0, storage=LazyTensorStorage(30), sample_unit=unit, batch_size=4
        )
        rb.extend(episodes_td([False] * 30))
        _, info = rb.sample(return_info=True)
        rb.update_priority(*unit.reduce_priority(info, torch.full((12,), 5.0)))
        anchors = set(info["anchor_index"].tolist())
        tree = rb._sampler._sum_tree
        assert all(abs(tree[a] - 5.0) < 1e-4 for a in anchors)


class TestSequenceStatistics:
    """Expansion never changes which anchors are drawn (chi-square, fixed seeds)."""

    def test_uniform_anchor_distribution(self):
        rb = TensorDictReplayBuffer(
            storage=LazyTensorStorage(20),
            sample_unit=Sequence(4, "stop", burn_in=2),
            batch_size=50,
            generator=torch.Generator().manual_seed(0),
        )
        rb.extend(episodes_td([i % 6 == 5 for i in range(20)]))
        counts = torch.zeros(20)
        for _ in range(200):
            info = rb.sample(return_info=True)[1]
            anchors = info["anchor_index"].view(50, -1)[:, 0]
            counts += torch.bincount(anchors, minlength=20)
        assert stats.chisquare(counts.numpy()).pvalue > 0.01

    def test_prioritized_anchor_distribution_and_steering(self):
        unit = Sequence(3, burn_in=1)
        rb = TensorDictPrioritizedReplayBuffer(
            alpha=1.0,
            beta=1.0,
            storage=LazyTensorStorage(10),
            sample_unit=unit,
            batch_size=40,
            generator=torch.Generator().manual_seed(0),
        )
        rb.extend(episodes_td([False] * 10))
        priorities = torch.arange(1.0, 11.0)
        rb.update_priority(torch.arange(10), priorities)
        counts = self._anchor_counts(rb, 250)
        expected = priorities / priorities.sum() * counts.sum()
        assert stats.chisquare(counts.numpy(), expected.numpy()).pvalue > 0.01
        # a window-level update through anchor_index now makes anchor 0 dominate
        sample = rb.sample()
        sample.set("td_error", torch.where(sample["anchor_index"] == 0, 1000.0, 1e-3))
        rb.update_tensordict_priority(sample)
        counts = self._anchor_counts(rb, 50)
        if 0 in sample["anchor_index"].tolist():
            assert counts[0] > 0.9 * counts.sum()

    @staticmethod
    def _anchor_counts(rb, draws):
        counts = torch.zeros(10)
        for _ in range(draws):
            anchors = rb.sample()["anchor_index"].view(40, -1)[:, 0]
            counts += torch.bincount(anchors, minlength=10)
        return counts


class TestSequenceBuffers:
    """Thread safety and checkpointing with stock buffers."""

    def test_concurrent_extend_and_sample(self):
        rb = TensorDictReplayBuffer(
            storage=LazyTensorStorage(500),
            sample_unit=Sequence(8, burn_in=4, layout="batch_time"),
            batch_size=16,
        )
        rb.extend(episodes_td([i % 37 == 36 for i in range(200)]))
        errors = []

        def writer():
            for i in range(60):
                rb.extend(episodes_td([j % 37 == 36 for j in range(20)], 200 + 20 * i))

        def reader():
            try:
                for _ in range(60):
                    batch = rb.sample()
                    steps = batch["step"]
                    valid = batch["validity_mask"]
                    # valid records of a window are consecutive steps of one trajectory
                    diffs = steps[:, 1:] - steps[:, :-1]
                    both = valid[:, 1:] & valid[:, :-1]
                    assert (diffs[both] == 1).all()
            except Exception as err:  # surfaced below
                errors.append(err)

        threads = [threading.Thread(target=writer), threading.Thread(target=reader)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert not errors, errors

    def test_dumps_loads_round_trip(self, tmp_path):
        def make():
            return TensorDictReplayBuffer(
                storage=LazyTensorStorage(40),
                sample_unit=Sequence(5, "stop", burn_in=2),
                batch_size=8,
                generator=torch.Generator().manual_seed(0),
            )

        rb = make()
        rb.extend(episodes_td([i % 9 == 8 for i in range(55)]))
        rb.dumps(tmp_path)
        restored = make()
        restored.loads(tmp_path)
        a, b = rb.sample(), restored.sample()
        assert torch.equal(a["index"], b["index"])
        assert torch.equal(a["validity_mask"], b["validity_mask"])
        assert torch.equal(a["step"], b["step"])


class TestSequenceRestore:
    """A restored buffer gives the windows of the buffer it was saved from, whatever it held.

    ``loads`` and ``load_state_dict`` restore the storage and the writer's cursor but not the
    storage's own record of its last write; windows must follow the restored write seam (the
    plain-loop reference) into a fresh buffer, a used one, a wrapped one and with ``traj_key``.
    """

    CAPACITY = 40
    SAVED = [57, 25]  # a wrapped ring (seam inside the storage) and a partly filled one
    TARGETS = {"fresh": 0, "used": 13, "wrapped": 83}

    @staticmethod
    def buffer(unit, capacity=CAPACITY):
        return TensorDictReplayBuffer(storage=LazyTensorStorage(capacity), sample_unit=unit)

    @staticmethod
    def restore(source, target, method, path):
        if method == "loads":
            source.dumps(path)
            target.loads(path)
        else:
            target.load_state_dict(source.state_dict())

    @pytest.mark.parametrize("saved", SAVED)
    @pytest.mark.parametrize("target", list(TARGETS))
    @pytest.mark.parametrize("method", ["loads", "load_state_dict"])
    @pytest.mark.parametrize("boundary", ["pad", "stop", "include_reset"])
    def test_done_flags_match_reference(self, saved, target, method, boundary, tmp_path):
        params = {"length": 4, "episode_boundary": boundary, "burn_in": 2, "bootstrap": 1}
        done = [i % 9 == 8 for i in range(saved)]
        source = self.buffer(Sequence(**params))
        source.extend(episodes_td(done))
        unit = Sequence(**params, layout="batch_time")
        restored = self.buffer(unit)
        used = self.TARGETS[target]
        if used:
            restored.extend(episodes_td([i % 5 == 4 for i in range(used)], 1000))
            unit.expand(torch.tensor([0]), {}, restored.storage)
        self.restore(source, restored, method, tmp_path)
        ring = ring_of(source, saved)
        anchors = torch.arange(ring.written)
        index, info = unit.expand(anchors, {}, restored.storage)
        for anchor in anchors.tolist():
            slots, valid, is_init = reference.expand(ring, anchor, **params)
            assert index[anchor].tolist() == slots, anchor
            assert info["validity_mask"][anchor].tolist() == valid, anchor
            assert info["is_init"][anchor].tolist() == is_init, anchor

    @pytest.mark.parametrize("target", list(TARGETS))
    @pytest.mark.parametrize("method", ["loads", "load_state_dict"])
    def test_trajectory_ids_follow_the_restored_write_order(self, target, method, tmp_path):
        ids = [(i // 3) % 4 for i in range(57)]  # runs of 3 records, 4 ids in turn
        params = {"length": 3, "episode_boundary": "pad", "burn_in": 2}

        def records(values, start):
            n = len(values)
            data = {"traj": torch.tensor(values), "step": torch.arange(start, start + n)}
            return TensorDict(data, [n])

        source = self.buffer(Sequence(**params, traj_key="traj"))
        source.extend(records(ids, 0))
        unit = Sequence(**params, traj_key="traj")
        restored = self.buffer(unit)
        used = self.TARGETS[target]
        if used:
            restored.extend(records([i % 4 for i in range(used)], 1000))
            unit.expand(torch.tensor([0]), {}, restored.storage)
        self.restore(source, restored, method, tmp_path)
        serial = {i % self.CAPACITY: i for i in range(len(ids))}  # slot -> write number
        anchors = list(range(self.CAPACITY))
        index, info = unit.expand(torch.tensor(anchors), {}, restored.storage)
        index, valid = index.view(len(anchors), -1), info["validity_mask"].view(len(anchors), -1)
        for anchor in anchors:
            tid = ids[serial[anchor]]
            chain = sorted((s for s in serial if ids[serial[s]] == tid), key=serial.get)
            slots, ok = reference.expand_chain(chain, chain.index(anchor), **params)
            assert index[anchor].tolist() == slots, anchor
            assert valid[anchor].tolist() == ok, anchor


class TestSequenceDevicesAndTypes:
    """CUDA storages take the batched-tensor path; flags of any dtype; units pickle."""

    @pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
    @pytest.mark.parametrize("boundary", ["pad", "stop", "include_reset"])
    def test_cuda_storage_matches_cpu(self, boundary):
        gen = torch.Generator().manual_seed(5)
        done = (torch.rand(300, generator=gen) < 0.05).tolist()
        cpu = fill(200, done, [33] * 10)
        cuda = fill(200, done, [33] * 10, storage=LazyTensorStorage(200, device="cuda"))
        unit = Sequence(6, boundary, burn_in=3, bootstrap=2, stride=2, layout="batch_time")
        anchors = torch.randint(0, 200, (32,), generator=gen)
        a_index, a_info = unit.expand(anchors, {}, cpu.storage)
        b_index, b_info = unit.expand(anchors.cuda(), {}, cuda.storage)
        assert torch.equal(a_index, b_index.cpu())
        for key in ("validity_mask", "is_init", "learning_mask"):
            assert torch.equal(a_info[key], b_info[key].cpu())

    @pytest.mark.parametrize("dtype", [torch.uint8, torch.int64, torch.float32])
    def test_non_bool_done_flags(self, dtype):
        done = [i % 5 == 4 for i in range(30)]
        reference_rb = fill(30, done)
        rb = TensorDictReplayBuffer(storage=LazyTensorStorage(30))
        rb.extend(
            TensorDict(
                {("next", "done"): torch.tensor(done, dtype=dtype).view(30, 1)},
                [30],
            )
        )
        unit = Sequence(4, "stop", burn_in=2)
        anchors = torch.arange(30)
        assert torch.equal(
            unit.expand(anchors, {}, rb.storage)[0],
            unit.expand(anchors, {}, reference_rb.storage)[0],
        )

    def test_pickle_round_trip(self):
        import pickle

        unit = Sequence(3, "stop", burn_in=1, traj_key="traj", layout="batch_time")
        rb = TensorDictReplayBuffer(storage=LazyTensorStorage(8), sample_unit=unit)
        rb.extend(TensorDict({"traj": torch.tensor([0, 1, 0, 1, 0, 1, 0, 1])}, [8]))
        before = unit.expand(torch.tensor([0, 3]), {}, rb.storage)[0]
        clone = pickle.loads(pickle.dumps(unit))
        assert repr(clone) == repr(unit)
        assert torch.equal(clone.expand(torch.tensor([0, 3]), {}, rb.storage)[0], before)


class TestSequenceBuilders:
    """The compiled loop and the batched tensor ops return the same batch, in fresh memory."""

    @staticmethod
    def _buffer(ndim: int) -> TensorDictReplayBuffer:
        gen = torch.Generator().manual_seed(5)
        if ndim == 1:
            return fill(40, (torch.rand(57, generator=gen) < 0.1).tolist(), [9] * 7)
        rb = TensorDictReplayBuffer(storage=LazyTensorStorage(16 * 3, ndim=2))
        done = torch.rand(3, 23, 1, generator=gen) < 0.15
        for t0 in range(0, 23, 5):
            part = done[:, t0 : t0 + 5]
            rb.extend(TensorDict({("next", "done"): part}, part.shape[:2]))
        return rb

    @staticmethod
    def _anchors(rb, ndim: int):
        gen = torch.Generator().manual_seed(6)
        time = torch.randint(0, 16, (9,), generator=gen)
        return time if ndim == 1 else (time, torch.randint(0, 3, (9,), generator=gen))

    @staticmethod
    def _tensors(index, info) -> list[torch.Tensor]:
        index = index if isinstance(index, tuple) else (index,)
        return [*index, *(v for v in info.values() if isinstance(v, torch.Tensor))]

    @pytest.mark.parametrize("boundary", ["pad", "stop", "include_reset"])
    @pytest.mark.parametrize("layout", ["flat", "batch_time"])
    @pytest.mark.parametrize("ndim", [1, 2])
    def test_identical_batches(self, boundary, layout, ndim):
        rb = self._buffer(ndim)
        anchors = self._anchors(rb, ndim)
        info = {"_weight": torch.arange(9.0), "scalar": 3}
        batches = []
        for compiled in (True, False):
            unit = Sequence(4, boundary, burn_in=2, bootstrap=1, stride=2, layout=layout)
            unit.use_compiled = compiled
            batches.append(unit.expand(anchors, dict(info), rb.storage))
        (index_a, info_a), (index_b, info_b) = batches
        assert list(info_a) == list(info_b)
        for a, b in zip(
            self._tensors(index_a, info_a), self._tensors(index_b, info_b), strict=True
        ):
            assert a.dtype == b.dtype and a.shape == b.shape and torch.equal(a, b)
        assert info_a["scalar"] == 3

    @pytest.mark.parametrize("layout", ["flat", "batch_time"])
    @pytest.mark.parametrize("ndim", [1, 2])
    def test_returned_tensors_never_share_memory(self, layout, ndim):
        rb = self._buffer(ndim)
        anchors = self._anchors(rb, ndim)
        unit = Sequence(4, burn_in=2, bootstrap=1, layout=layout)
        first = self._tensors(*unit.expand(anchors, {"_weight": torch.arange(9.0)}, rb.storage))
        before = [t.clone() for t in first]
        second = self._tensors(*unit.expand(anchors, {}, rb.storage))
        spans = sorted(
            (t.data_ptr(), t.data_ptr() + t.numel() * t.element_size()) for t in first + second
        )
        assert all(end <= start for (_, end), (start, _) in itertools.pairwise(spans))
        for tensor in second:
            tensor.zero_()
        assert all(torch.equal(a, b) for a, b in zip(first, before, strict=True))


SETTINGS_OF_SEQUENCE = {
    "length": 5,
    "burn_in": 1,
    "bootstrap": 1,
    "stride": 2,
    "dilation": 2,
    "episode_boundary": "stop",
    "layout": "batch_time",
    "done_key": "done",
    "traj_key": "traj",
    "priority_reduction": "mean",
    "priority_eta": 0.5,
    "priority_learning_only": True,
    "is_init_key": "reset",
}


def two_dim_buffer(steps: int = 6, lanes: int = 3) -> TensorDictReplayBuffer:
    """A ``[time, lane]`` storage, extended in the collector layout ``[lanes, time]``."""
    rb = TensorDictReplayBuffer(storage=LazyTensorStorage(steps * lanes, ndim=2))
    done = torch.zeros(lanes, steps, 1, dtype=torch.bool)
    done[:, 2] = True
    rb.extend(
        TensorDict({"obs": torch.zeros(lanes, steps), ("next", "done"): done}, [lanes, steps])
    )
    return rb


def storage_snapshot(rb) -> TensorDict:
    """A copy of the written records (unwritten slots hold whatever memory they got)."""
    return rb.storage._storage[: len(rb.storage)].clone()


class TestSequenceHardening:
    """Bad input is refused before it reaches compiled code, the storage or the sum tree."""

    @pytest.mark.parametrize("anchor", [10**12, 30, 31, -1, -(10**12)])
    def test_out_of_range_anchors_raise_index_error(self, anchor):
        rb = fill(40, [i % 7 == 6 for i in range(30)])  # 30 of 40 slots written
        with pytest.raises(IndexError, match=f"coordinate {anchor} is out of range"):
            Sequence(4, burn_in=2).expand(torch.tensor([3, anchor]), {}, rb.storage)

    def test_last_written_anchor_is_accepted(self):
        rb = fill(40, [False] * 30)
        index, info = Sequence(2).expand(torch.tensor([29]), {}, rb.storage)
        assert index.tolist() == [29, 29] and info["validity_mask"].tolist() == [True, False]

    @pytest.mark.parametrize("lane", [3, 10**11, -1])
    def test_out_of_range_lanes_raise_index_error(self, lane):
        rb = two_dim_buffer()
        anchors = (torch.tensor([1, 2]), torch.tensor([0, lane]))
        with pytest.raises(IndexError, match="lane 0 coordinate"):
            Sequence(2, burn_in=1).expand(anchors, {}, rb.storage)

    def test_out_of_range_anchor_with_traj_key(self):
        rb = TensorDictReplayBuffer(storage=LazyTensorStorage(16))
        rb.extend(TensorDict({"traj": torch.tensor([0, 1] * 4)}, [8]))
        with pytest.raises(IndexError, match="coordinate 8"):
            Sequence(2, traj_key="traj").expand(torch.tensor([8]), {}, rb.storage)

    @pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bool])
    def test_non_integer_anchors_raise_type_error(self, dtype):
        rb = fill(20, [False] * 20)
        with pytest.raises(TypeError, match="integer storage indices"):
            Sequence(2).expand(torch.tensor([1, 3]).to(dtype), {}, rb.storage)

    def test_huge_anchor_exits_cleanly_in_a_fresh_process(self):
        """The compiled loop once read far out of bounds here; the process must survive."""
        import subprocess
        import sys

        code = (
            "import torch\n"
            "from tensordict import TensorDict\n"
            "from torchrl.data import LazyTensorStorage, TensorDictReplayBuffer\n"
            "from torchrl_ext import Sequence\n"
            "rb = TensorDictReplayBuffer(storage=LazyTensorStorage(8))\n"
            "rb.extend(TensorDict({('next', 'done'): torch.zeros(8, 1, dtype=torch.bool)}, [8]))\n"
            "try:\n"
            "    Sequence(3, burn_in=2).expand(torch.tensor([10**12]), {}, rb.storage)\n"
            "except IndexError:\n"
            "    print('refused')\n"
        )
        result = subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, timeout=120
        )
        assert result.returncode == 0, result.stderr
        assert result.stdout.strip().endswith("refused")

    @pytest.mark.parametrize("name, value", SETTINGS_OF_SEQUENCE.items())
    def test_settings_are_fixed_after_construction(self, name, value):
        rb = fill(30, [False] * 30)
        unit = Sequence(3)
        before = unit.expand(torch.tensor([4]), {}, rb.storage)[0]
        with pytest.raises(AttributeError, match=f"Sequence.{name} is fixed.*build a new unit"):
            setattr(unit, name, value)
        assert torch.equal(unit.expand(torch.tensor([4]), {}, rb.storage)[0], before)
        assert unit.length == 3 and unit.stride == 1

    def test_numpy_integers_are_accepted(self):
        unit = Sequence(np.int64(4), burn_in=np.int32(2), stride=np.int16(3))
        assert (unit.length, unit.burn_in, unit.stride) == (4, 2, 3)
        assert type(unit.length) is int

    @pytest.mark.parametrize("stride", [2**62, 2**31])
    def test_reach_past_32_bits_is_refused(self, stride):
        with pytest.raises(ValueError, match="stride="):
            Sequence(4, stride=stride)

    @pytest.mark.parametrize("bad", [0.5, float("nan"), float("inf")])
    def test_non_integral_trajectory_ids_are_refused(self, bad):
        rb = TensorDictReplayBuffer(storage=LazyTensorStorage(16))
        ids = torch.tensor([0.0, 1.0, 0.0, bad, 0.0, 1.0])
        rb.extend(TensorDict({"traj": ids}, [6]))
        with pytest.raises(ValueError, match="whole numbers"):
            Sequence(2, traj_key="traj").expand(torch.tensor([0]), {}, rb.storage)

    def test_bad_ids_written_after_first_sample_are_refused_at_extend(self):
        unit = Sequence(2, traj_key="traj")
        rb = TensorDictReplayBuffer(storage=LazyTensorStorage(16), sample_unit=unit)
        rb.extend(TensorDict({"traj": torch.tensor([0.0, 1.0, 0.0, 1.0])}, [4]))
        good = unit.expand(torch.tensor([0]), {}, rb.storage)[0]
        with pytest.raises(ValueError, match=r"got 2\.5"):
            rb.extend(TensorDict({"traj": torch.tensor([2.5, 1.0])}, [2]))
        with pytest.raises(ValueError, match="whole numbers"):  # and never sampled silently
            unit.expand(torch.tensor([0]), {}, rb.storage)
        assert good.tolist() == [0, 2]

    def test_whole_float_ids_equal_integer_ids(self):
        ids = [0, 1, 0, 1, 1, 0, 2, 2]
        out = []
        for dtype in (torch.int64, torch.float32):
            rb = TensorDictReplayBuffer(storage=LazyTensorStorage(8))
            rb.extend(TensorDict({"traj": torch.tensor(ids, dtype=dtype)}, [8]))
            out.append(Sequence(3, traj_key="traj").expand(torch.arange(8), {}, rb.storage))
        assert torch.equal(out[0][0], out[1][0])
        assert torch.equal(out[0][1]["validity_mask"], out[1][1]["validity_mask"])

    @pytest.mark.parametrize("bad", [float("nan"), float("inf")])
    def test_non_finite_done_flags_are_refused(self, bad):
        done = torch.zeros(20, 1)
        done[5] = bad
        rb = TensorDictReplayBuffer(storage=LazyTensorStorage(20))
        rb.extend(TensorDict({("next", "done"): done}, [20]))
        with pytest.raises(ValueError, match="done flags must be finite"):
            Sequence(3, burn_in=2).expand(torch.tensor([4]), {}, rb.storage)

    def _prioritized(self, **kwargs):
        unit = Sequence(4, burn_in=2, **kwargs)
        return unit, prioritized(unit)

    @pytest.mark.parametrize("layout", ["flat", "batch_time"])
    def test_priority_update_without_learning_mask(self, layout):
        """A sample without learning_mask, as torchrl's own unit's users may pass it."""
        unit, rb = self._prioritized(layout=layout)
        sample = rb.sample()
        sample.set("td_error", torch.rand(sample.shape, generator=torch.Generator().manual_seed(2)))
        expected = unit.reduce_priority(sample, sample["td_error"])
        sample = sample.exclude("learning_mask")
        if layout == "flat":  # torchrl's own reduction agrees there
            rb.update_tensordict_priority(sample)
            self._check_tree(rb, *expected)
        unit.update_priority(rb, sample)
        self._check_tree(rb, *expected)

    @staticmethod
    def _check_tree(rb, anchors, reduced):
        got = torch.tensor([rb.sampler._sum_tree[int(a)] for a in anchors])
        assert torch.allclose(got, reduced.float() + rb.sampler._eps, atol=1e-6)

    def test_priority_update_without_any_mask_reduces_all_records(self):
        unit, rb = self._prioritized()
        sample = rb.sample().exclude("learning_mask", "validity_mask")
        td_error = torch.arange(sample.numel(), dtype=torch.float32)
        anchors, reduced = unit.reduce_priority(sample, td_error)
        per_window = td_error.view(-1, unit.window).amax(1)  # every record counts
        first = sample["anchor_index"].view(-1, unit.window)[:, 0]
        for anchor, value in zip(anchors.tolist(), reduced.tolist(), strict=True):
            assert value == per_window[first == anchor].max().item()

    @pytest.mark.parametrize("bad", [float("nan"), -1.0, float("inf"), -float("inf")])
    def test_bad_priorities_never_reach_the_tree(self, bad):
        unit, rb = self._prioritized()
        sample = rb.sample()
        td_error = torch.ones(sample.shape)
        td_error[3] = bad  # record 3 of window 0: a valid learning record
        sample.set("td_error", td_error)
        tree = rb._sampler._sum_tree
        before = [tree[i] for i in range(50)]
        with pytest.raises(ValueError, match=r"record 3 of window 0"):
            unit.update_priority(rb, sample)
        with pytest.raises(ValueError, match="finite and >= 0"):
            unit.reduce_priority(sample, td_error)
        assert [tree[i] for i in range(50)] == before
        assert rb.sample().shape == sample.shape  # the buffer still samples

    def test_bad_priority_on_an_invalid_record_is_ignored(self):
        """Records the reduction never reads (padding) cannot reach the tree."""
        rb = fill(20, [False] * 9 + [True] + [False] * 10)
        unit = Sequence(3, burn_in=1)
        _, info = unit.expand(torch.tensor([9]), {}, rb.storage)  # records 10, 11 are padding
        priority = torch.tensor([1.0, 2.0, float("nan"), float("nan")])
        assert unit.reduce_priority(info, priority)[1].tolist() == [2.0]

    @pytest.mark.parametrize("stored", ["validity_mask", "sequence_id", "anchor_index"])
    def test_stored_key_colliding_with_info_is_refused(self, stored):
        rb = TensorDictReplayBuffer(storage=LazyTensorStorage(10), sample_unit=Sequence(2))
        rb.extend(TensorDict({stored: torch.ones(10), ("next", "done"): torch.zeros(10, 1)}, [10]))
        with pytest.raises(ValueError, match=f"entry '{stored}'"):
            rb.sample(4)

    def test_is_init_key_naming_stored_data_is_refused(self):
        unit = Sequence(2, layout="batch_time", is_init_key="obs")
        rb = fill(10, [False] * 10)
        with pytest.raises(ValueError, match="is_init_key"):
            unit.expand(torch.tensor([1]), {}, rb.storage)

    def test_stored_reset_flags_are_superseded_by_the_window_flags(self):
        """Collectors store is_init; a batch_time window must still open with a reset."""
        data = episodes_td([False] * 10)
        data["is_init"] = torch.zeros(10, 1, dtype=torch.bool)
        rb = TensorDictReplayBuffer(
            storage=LazyTensorStorage(10),
            sample_unit=Sequence(3, layout="batch_time"),
            batch_size=2,
        )
        rb.extend(data)
        assert rb.sample()["is_init"][:, 0].all()


class TestSequenceFuzz:
    """Random bad calls raise a clear error and leave buffers and sum trees untouched."""

    bad_values = st.one_of(
        st.integers(-(2**70), 2**70),
        st.floats(allow_nan=True, allow_infinity=True),
        st.booleans(),
        st.text(max_size=3),
        st.none(),
        st.lists(st.integers(), max_size=2),
    )

    @SETTINGS
    @given(
        kwargs=st.dictionaries(
            st.sampled_from(list(SETTINGS_OF_SEQUENCE)), bad_values, min_size=1, max_size=3
        )
    )
    def test_constructor(self, kwargs):
        kwargs.setdefault("length", 3)
        try:
            unit = Sequence(**kwargs)
        except (TypeError, ValueError):
            return
        assert unit.window >= 1

    @SETTINGS
    @given(
        anchors=st.lists(st.integers(-(2**63), 2**63 - 1), min_size=1, max_size=6),
        as_float=st.booleans(),
    )
    def test_expand(self, anchors, as_float):
        rb = fill(24, [i % 5 == 4 for i in range(20)])
        before = storage_snapshot(rb)
        index = torch.tensor(anchors, dtype=torch.float64 if as_float else torch.int64)
        try:
            out, _ = Sequence(3, burn_in=2, bootstrap=1).expand(index, {}, rb.storage)
        except (IndexError, TypeError):
            pass
        else:
            assert not as_float and all(0 <= a < 20 for a in anchors)
            assert ((out >= 0) & (out < 20)).all()
        assert (storage_snapshot(rb) == before).all()

    @SETTINGS
    @given(
        values=st.lists(
            st.floats(allow_nan=True, allow_infinity=True, width=32), min_size=24, max_size=24
        )
    )
    def test_update_priority(self, values):
        unit = Sequence(2, burn_in=1, bootstrap=1)
        rb = prioritized(unit, records=30, period=6)
        sample = rb.sample()
        sample.set("td_error", torch.tensor(values))
        tree = rb._sampler._sum_tree
        before = [tree[i] for i in range(30)]
        try:
            unit.update_priority(rb, sample)
        except ValueError:
            assert [tree[i] for i in range(30)] == before
        else:
            assert all(math.isfinite(tree[i]) for i in range(30))
        rb.sample()  # whatever happened, sampling still works


class TestSequencePublicAPI:
    """The key sampling paths through torchrl's public buffer API only: constructors,
    ``extend``, ``sample(return_info=True)``, ``update_priority``. The oracle is the reference
    loop over the data as written (no storage internals are read)."""

    CAPACITY, WRITTEN = 40, 57  # a wrapped ring: the write seam sits inside the storage

    @classmethod
    def _data(cls):
        gen = torch.Generator().manual_seed(11)
        done = (torch.rand(cls.WRITTEN, generator=gen) < 0.12).tolist()
        return done, episodes_td(done)

    @classmethod
    def _ring(cls, done) -> reference.Ring:
        """The ring as written: slot ``i % capacity`` holds the last record written there."""
        slots = [False] * cls.CAPACITY
        for i, flag in enumerate(done):
            slots[i % cls.CAPACITY] = flag
        return reference.Ring(done=slots, full=True, newest=(cls.WRITTEN - 1) % cls.CAPACITY)

    @pytest.mark.parametrize("storage", [LazyTensorStorage, LazyMemmapStorage, "fast"])
    @pytest.mark.parametrize("boundary", ["pad", "stop", "include_reset"])
    @pytest.mark.parametrize("layout", ["flat", "batch_time"])
    def test_sample_matches_reference(self, storage, boundary, layout):
        from torchrl_ext.data import FastLazyTensorStorage

        storage = FastLazyTensorStorage if storage == "fast" else storage
        params = {"length": 3, "episode_boundary": boundary, "burn_in": 2, "bootstrap": 1}
        unit = Sequence(**params, layout=layout)
        rb = TensorDictReplayBuffer(
            storage=storage(self.CAPACITY),
            sample_unit=unit,
            batch_size=8,
            generator=torch.Generator().manual_seed(2),
        )
        done, data = self._data()
        for start in range(0, self.WRITTEN, 9):
            rb.extend(data[start : start + 9])
        ring = self._ring(done)
        for _ in range(5):
            sample, info = rb.sample(return_info=True)
            steps = sample["step"].reshape(-1, unit.window)
            valid = sample["validity_mask"].reshape(-1, unit.window)
            anchors = sample["anchor_index"].reshape(-1, unit.window)[:, 0]
            for row, anchor in enumerate(anchors.tolist()):
                slots, ok, is_init = reference.expand(ring, anchor, **params)
                written = [self._step_at(slot) for slot in slots]
                assert steps[row].tolist() == written
                assert valid[row].tolist() == ok
                if layout == "batch_time":
                    assert sample["is_init"][row].tolist() == is_init
            assert torch.equal(info["index"].reshape(-1), sample["index"].reshape(-1))

    @classmethod
    def _step_at(cls, slot: int) -> int:
        """The step of the record slot ``slot`` holds after all writes."""
        wraps = (cls.WRITTEN - 1 - slot) // cls.CAPACITY
        return slot + wraps * cls.CAPACITY

    def test_prioritized_update_steers_sampling(self):
        unit = Sequence(3, burn_in=1, layout="batch_time", priority_reduction="mean")
        rb = prioritized(unit, records=20, period=10)  # public constructor and extend
        rb.update_priority(torch.arange(20), torch.full((20,), 1e-4))
        sample = rb.sample()
        favoured = int(sample["anchor_index"][0, 0])
        td_error = torch.where(sample["anchor_index"] == favoured, 100.0, 1e-4)
        unit.update_priority(rb, sample.set("td_error", td_error))
        counts = torch.zeros(20)
        for _ in range(40):
            counts += torch.bincount(rb.sample()["anchor_index"][:, 0], minlength=20)
        assert counts[favoured] > 0.95 * counts.sum()
