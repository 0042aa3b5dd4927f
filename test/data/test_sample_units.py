"""Tests of torchrl_ext.data.sample_units: SampleUnit, Transition, Sequence."""

from __future__ import annotations

import itertools
import threading

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

    @pytest.mark.parametrize("layout", ["flat", "batch_time"])
    @pytest.mark.parametrize("reduction", ["max", "mean", "mixture"])
    def test_update_tensordict_priority_routes_to_anchors(self, layout, reduction):
        unit = Sequence(4, burn_in=2, layout=layout, priority_reduction=reduction)
        rb = TensorDictPrioritizedReplayBuffer(
            alpha=1.0,
            beta=1.0,
            storage=LazyTensorStorage(50),
            sample_unit=unit,
            batch_size=6,
            generator=torch.Generator().manual_seed(0),
        )
        rb.extend(episodes_td([i % 10 == 9 for i in range(50)]))
        sample = rb.sample()
        gen = torch.Generator().manual_seed(1)
        sample.set("td_error", torch.rand(sample.shape, generator=gen) + 0.1)
        anchors, expected = unit.reduce_priority(sample, sample["td_error"])
        tree = rb._sampler._sum_tree
        before = [tree[i] for i in range(50)]
        rb.update_tensordict_priority(sample)
        got = torch.tensor([tree[int(a)] for a in anchors])
        assert torch.allclose(got, expected.float() + rb._sampler._eps, atol=1e-5)
        untouched = [i for i in range(50) if i not in set(anchors.tolist())]
        assert all(tree[i] == before[i] for i in untouched)

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


def test_changing_geometry_after_construction():
    """Attributes changed after construction (as with torchrl's unit) take effect."""
    rb = fill(30, [False] * 30)
    unit = Sequence(3)
    assert unit.expand(torch.tensor([4]), {}, rb.storage)[0].tolist() == [4, 5, 6]
    unit.burn_in, unit.stride = 1, 2
    index, info = unit.expand(torch.tensor([4]), {}, rb.storage)
    assert index.tolist() == [2, 4, 6, 8]
    assert info["learning_mask"].tolist() == [False, True, True, True]


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
