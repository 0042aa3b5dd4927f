"""Tests of torchrl_ext.data.storages: the index_select read against torchrl's stock read."""

from __future__ import annotations

import pickle
import tempfile

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tensordict import NonTensorData, TensorDict
from torchrl.data import (
    LazyMemmapStorage,
    LazyTensorStorage,
    ReplayBuffer,
    TensorDictPrioritizedReplayBuffer,
    TensorDictReplayBuffer,
)
from torchrl.data.replay_buffers import Sequence as TorchRLSequence

from torchrl_ext import Sequence
from torchrl_ext.data import FastLazyMemmapStorage, FastLazyTensorStorage
from torchrl_ext.data import storages as storages_module

PAIRS = [(FastLazyTensorStorage, LazyTensorStorage), (FastLazyMemmapStorage, LazyMemmapStorage)]


def records(n: int, start: int = 0) -> TensorDict:
    """Leaves of several dtypes and trailing shapes, a nested group, a nested extra batch dim."""
    steps = torch.arange(start, start + n)
    return TensorDict(
        {
            "obs": (steps.unsqueeze(-1) * 10 + torch.arange(3)).float(),
            "step": steps,
            ("next", "done"): (steps % 4 == 3).view(n, 1),
            "agents": TensorDict({"reward": steps.view(n, 1, 1).expand(n, 2, 1).double()}, [n, 2]),
        },
        [n],
    )


def pair(fast_cls, stock_cls, capacity: int, writes: list[int], tmp_path) -> tuple:
    """The same writes into a fast and a stock storage of ``capacity``."""
    made = []
    for cls in (fast_cls, stock_cls):
        memmap = "Memmap" in cls.__name__
        kwargs = {"scratch_dir": tempfile.mkdtemp(dir=tmp_path)} if memmap else {}
        storage = cls(capacity, **kwargs)
        cursor, start = 0, 0
        for n in writes:
            index = torch.arange(cursor, cursor + n) % capacity
            storage.set(index, records(n, start))
            cursor, start = (cursor + n) % capacity, start + n
        made.append(storage)
    return made


def assert_same(ours, theirs) -> None:
    """Same keys, values, dtypes, batch sizes (nested too), devices and leaf types."""
    if isinstance(theirs, torch.Tensor):
        assert type(ours) is type(theirs) and ours.dtype == theirs.dtype
        assert torch.equal(ours, theirs)
        return
    assert ours.batch_size == theirs.batch_size and ours.device == theirs.device
    assert set(ours.keys(True, True)) == set(theirs.keys(True, True))
    assert ours["agents"].batch_size == theirs["agents"].batch_size
    for key in theirs.keys(True, True):
        assert type(ours[key]) is type(theirs[key]), key
        assert ours[key].dtype == theirs[key].dtype, key
        assert torch.equal(ours[key], theirs[key]), key


@pytest.mark.parametrize(("fast_cls", "stock_cls"), PAIRS)
def test_hand_case_rows(fast_cls, stock_cls, tmp_path):
    fast, stock = pair(fast_cls, stock_cls, 8, [5], tmp_path)
    out = fast.get(torch.tensor([4, 0, 4]))
    assert out["step"].tolist() == [4, 0, 4]
    assert out["obs"][0].tolist() == [40.0, 41.0, 42.0]
    assert out["next", "done"].view(-1).tolist() == [False, False, False]
    assert out["agents"].batch_size == torch.Size([3, 2])
    assert_same(out, stock.get(torch.tensor([4, 0, 4])))


@pytest.mark.parametrize(("fast_cls", "stock_cls"), PAIRS)
@settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(
    capacity=st.integers(1, 40),
    writes=st.lists(st.integers(1, 30), min_size=1, max_size=4),
    draws=st.lists(st.integers(0, 10_000), max_size=50),
    int32=st.booleans(),
)
def test_matches_stock_read(fast_cls, stock_cls, tmp_path, capacity, writes, draws, int32):
    """Any in-range flat index (partial or wrapped ring, int64 or int32) reads as torchrl does."""
    writes = [min(n, capacity) for n in writes]
    fast, stock = pair(fast_cls, stock_cls, capacity, writes, tmp_path)
    index = torch.tensor(draws, dtype=torch.int64) % len(stock)
    if int32:
        index = index.int()
    assert_same(fast.get(index), stock.get(index))


@pytest.mark.parametrize(("fast_cls", "stock_cls"), PAIRS)
@pytest.mark.parametrize(
    "index",
    [3, -1, slice(1, 4), [0, 2], torch.tensor([-1, -2]), torch.tensor([[0, 1], [2, 3]])],
    ids=["int", "negative-int", "slice", "list", "negative-tensor", "2-d tensor"],
)
def test_other_indices_take_the_stock_read(fast_cls, stock_cls, tmp_path, index):
    fast, stock = pair(fast_cls, stock_cls, 8, [6], tmp_path)
    assert_same(fast.get(index), stock.get(index))


@pytest.mark.parametrize(("fast_cls", "stock_cls"), PAIRS)
def test_out_of_range_raises_like_stock(fast_cls, stock_cls, tmp_path):
    """Slots past the written length are not read, on a partial ring as on the stock storage."""
    fast, stock = pair(fast_cls, stock_cls, 8, [5], tmp_path)
    for storage in (fast, stock):
        with pytest.raises(IndexError):
            storage.get(torch.tensor([0, 5]))


def test_fast_path_is_taken_for_flat_tensor_indices(monkeypatch):
    calls = []
    real = storages_module._gather
    monkeypatch.setattr(
        storages_module, "_gather", lambda *args: calls.append(args[0]) or real(*args)
    )
    storage = FastLazyTensorStorage(10)
    storage.set(torch.arange(4), records(4))
    storage.get(torch.tensor([1, 2]))
    assert calls and calls[0] is storage._storage  # the whole contents, then each entry
    calls.clear()
    storage.get(slice(0, 2))
    assert calls == []


@pytest.mark.parametrize(("fast_cls", "stock_cls"), PAIRS)
def test_plain_tensor_storage(fast_cls, stock_cls, tmp_path):
    reads = []
    for cls in (fast_cls, stock_cls):
        memmap = "Memmap" in cls.__name__
        kwargs = {"scratch_dir": tempfile.mkdtemp(dir=tmp_path)} if memmap else {}
        storage = cls(6, **kwargs)
        storage.set(torch.arange(4), torch.arange(8.0).view(4, 2))
        reads.append(storage.get(torch.tensor([3, 0, 3])))
        with pytest.raises(IndexError):
            storage.get(torch.tensor([4]))
    assert_same(*reads)


def test_non_tensor_leaves_fall_back(monkeypatch):
    data = TensorDict({"obs": torch.arange(4.0)}, [4])
    data["tag"] = NonTensorData("level-1", batch_size=[4])
    fast, stock = FastLazyTensorStorage(4), LazyTensorStorage(4)
    for storage in (fast, stock):
        storage.set(torch.arange(4), data)
    index = torch.tensor([2, 0])
    ours, theirs = fast.get(index), stock.get(index)
    assert torch.equal(ours["obs"], theirs["obs"])
    assert ours["tag"] == theirs["tag"]
    # the unsupported layout is remembered: later reads go straight to the stock read
    calls = []
    real = storages_module._gather
    monkeypatch.setattr(storages_module, "_gather", lambda *args: calls.append(1) or real(*args))
    assert torch.equal(fast.get(index)["obs"], theirs["obs"])
    assert calls == []


def test_two_dimensional_storage_falls_back():
    data = TensorDict({"obs": torch.arange(12.0).view(6, 2)}, [6, 2])
    reads = []
    for cls in (FastLazyTensorStorage, LazyTensorStorage):
        buffer = TensorDictReplayBuffer(storage=cls(12, ndim=2), batch_size=2)
        buffer.extend(data)
        assert buffer.storage.ndim == 2
        reads.append(buffer.storage.get((torch.tensor([1, 0]), torch.tensor([5, 1])))["obs"])
    assert reads[0].shape == torch.Size([2])
    assert torch.equal(reads[0], reads[1])


def test_sample_does_not_alias_the_storage():
    storage = FastLazyTensorStorage(8)
    storage.set(torch.arange(8), records(8))
    sample = storage.get(torch.tensor([1, 2]))
    sample["obs"].zero_()
    assert storage.get(torch.tensor([1]))["obs"].tolist() == [[10.0, 11.0, 12.0]]


def test_uninitialized_read_raises_like_stock():
    for storage in (FastLazyTensorStorage(4), LazyTensorStorage(4)):
        with pytest.raises(RuntimeError, match="non-initialized"):
            storage.get(torch.tensor([0]))


def sequence_buffer(storage, unit, prioritized: bool) -> TensorDictReplayBuffer:
    kwargs = {"storage": storage, "batch_size": 4, "sample_unit": unit}
    if prioritized:
        return TensorDictPrioritizedReplayBuffer(alpha=0.7, beta=0.5, **kwargs)
    return TensorDictReplayBuffer(**kwargs)


UNITS = {"ours": lambda: Sequence(3, burn_in=1), "torchrl": lambda: TorchRLSequence(3, burn_in=1)}


@pytest.mark.parametrize("unit", UNITS.values(), ids=UNITS.keys())
@pytest.mark.parametrize("prioritized", [False, True])
def test_buffer_samples_read_the_stock_records(unit, prioritized):
    """Windows sampled through the fast storage hold what the stock storage has at their index."""
    buffer = sequence_buffer(FastLazyTensorStorage(50), unit(), prioritized)
    buffer.extend(records(70))
    stock = LazyTensorStorage(50)
    stock.set(torch.arange(70) % 50, records(70))
    sample = buffer.sample()
    assert sample.shape == torch.Size([4 * 4])
    expected = stock.get(sample["index"])
    for key in expected.keys(True, True):
        assert torch.equal(sample[key], expected[key]), key


@pytest.mark.parametrize("unit", UNITS.values(), ids=UNITS.keys())
def test_seeded_samples_equal_stock(unit):
    samples = []
    for cls in (FastLazyTensorStorage, LazyTensorStorage):
        buffer = sequence_buffer(cls(50), unit(), prioritized=False)
        buffer.extend(records(70))
        torch.manual_seed(3)
        samples.append(buffer.sample())
    ours, theirs = samples
    assert ours.batch_size == theirs.batch_size
    for key in theirs.keys(True, True):
        assert torch.equal(ours[key], theirs[key]), key


@pytest.mark.parametrize("cls", [FastLazyTensorStorage, FastLazyMemmapStorage])
def test_plain_replay_buffer_and_round_trips(cls, tmp_path):
    def make():
        kwargs = (
            {"scratch_dir": tempfile.mkdtemp(dir=tmp_path)} if cls is FastLazyMemmapStorage else {}
        )
        return ReplayBuffer(storage=cls(10, **kwargs), batch_size=3)

    buffer = make()
    buffer.extend(records(12))
    buffer.dumps(tmp_path / "dump")
    restored = make()
    restored.loads(tmp_path / "dump")
    index = torch.tensor([0, 9, 4])
    assert_same(restored.storage.get(index), buffer.storage.get(index))
    assert buffer.sample().shape == torch.Size([3])
    clone = pickle.loads(pickle.dumps(buffer.storage))
    assert isinstance(clone, cls)
    assert_same(clone.get(index), buffer.storage.get(index))
