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
from torchrl_ext.data._kernels import gather as rows_kernel

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
    real = storages_module._read
    monkeypatch.setattr(
        storages_module, "_read", lambda *args: calls.append(args[0]) or real(*args)
    )
    storage = FastLazyTensorStorage(10)
    storage.set(torch.arange(4), records(4))
    storage.get(torch.tensor([1, 2]))
    assert calls and calls[0].contents is storage._storage  # read through the contents' plan
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
    real = storages_module._read
    monkeypatch.setattr(storages_module, "_read", lambda *args: calls.append(1) or real(*args))
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


# --- the prefetching row kernel (torchrl_ext.data._kernels.gather) ----------------------------


@pytest.fixture
def kernel_always(monkeypatch):
    """Every flat CPU index, however short, goes through the kernel."""
    monkeypatch.setattr(rows_kernel, "MIN_ROWS", 1)


def varied_records(n: int, start: int = 0) -> TensorDict:
    """Leaves of many dtypes and trailing shapes, rows from 1 to 96 bytes."""
    steps = torch.arange(start, start + n)
    base = steps.view(n, 1) * 7 + torch.arange(6)
    return TensorDict(
        {
            "f32": base.float().view(n, 2, 3),
            "f16": base.half(),
            "bf16": base[:, :1].bfloat16(),
            "c64": torch.complex(base.float(), -base.float()),
            "u8": (base % 256).to(torch.uint8)[:, 0],
            "i16": base.short()[:, :5],
            "i32": base.int().view(n, 3, 2),
            "flag": (steps % 3 == 0).view(n, 1),
            "nan": torch.where(steps % 2 == 0, float("nan"), -0.0).view(n, 1),
            ("deep", "er", "f64"): base.double()[:, :4],
        },
        [n],
    )


def windows(draw, rows: int) -> list[int]:
    """Run-structured entries: windows of consecutive rows, clamped (repeats), wrapped."""
    out = []
    for _ in range(draw(st.integers(1, 6))):
        start, length = draw(st.integers(0, rows - 1)), draw(st.integers(1, 12))
        pad_before, pad_after = draw(st.integers(0, 4)), draw(st.integers(0, 4))
        run = [start] * pad_before + [(start + k) % rows for k in range(length)]
        out += run + [run[-1]] * pad_after
    return out


@st.composite
def kernel_indices(draw, rows: int) -> list[int]:
    """Windows, random rows, or both."""
    random_rows = draw(st.lists(st.integers(0, rows - 1), max_size=20))
    kind = draw(st.sampled_from(["windows", "random", "both"]))
    if kind == "random":
        return random_rows or [0]
    runs = windows(draw, rows)
    return runs + random_rows if kind == "both" else runs


def varied_pair(capacity: int, writes: list[int]) -> tuple:
    """The same writes of ``varied_records`` into a fast and a stock tensor storage."""
    made = []
    for cls in (FastLazyTensorStorage, LazyTensorStorage):
        storage, cursor, start = cls(capacity), 0, 0
        for n in writes:
            storage.set(torch.arange(cursor, cursor + n) % capacity, varied_records(n, start))
            cursor, start = (cursor + n) % capacity, start + n
        made.append(storage)
    return made


def assert_bitwise_same(ours: TensorDict, theirs: TensorDict) -> None:
    """Same keys, batch sizes, dtypes, shapes and bytes (NaN payloads and -0.0 included)."""
    assert ours.batch_size == theirs.batch_size
    assert set(ours.keys(True, True)) == set(theirs.keys(True, True))
    for key in theirs.keys(True, True):
        a, b = ours[key], theirs[key]
        assert type(a) is type(b) and a.dtype == b.dtype and a.shape == b.shape, key
        assert a.is_contiguous(), key
        assert torch.equal(a.view(torch.uint8), b.contiguous().view(torch.uint8)), key


@pytest.mark.usefixtures("kernel_always")
@settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(
    capacity=st.integers(1, 40),
    writes=st.lists(st.integers(1, 30), min_size=1, max_size=4),
    data=st.data(),
    int32=st.booleans(),
)
def test_kernel_matches_stock_read(capacity, writes, data, int32):
    """Windows (with repeats, wrapping), random rows, on partial and wrapped rings, read as
    torchrl reads them, bit for bit, for every dtype and trailing shape."""
    writes = [min(n, capacity) for n in writes]
    fast, stock = varied_pair(capacity, writes)
    index = torch.tensor(data.draw(kernel_indices(len(stock))))
    if int32:
        index = index.int()
    assert_bitwise_same(fast.get(index), stock.get(index))


@pytest.mark.parametrize("int32", [False, True])
def test_kernel_reads_a_long_sequence_index_without_patching(int32):
    """At the default ``MIN_ROWS`` a batch of 64 windows of 120 takes the kernel."""
    capacity = 3000
    fast, stock = varied_pair(capacity, [2500, 1500])  # wrapped: the seam at row 1000
    generator = torch.Generator().manual_seed(0)
    starts = torch.randint(-40, capacity, (64, 1), generator=generator)
    index = (starts + torch.arange(120)).clamp(0, capacity - 1).view(-1)  # clamped: repeats
    assert index.numel() >= rows_kernel.MIN_ROWS
    if int32:
        index = index.int()
    calls = []
    real = rows_kernel.copy_rows
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(rows_kernel, "copy_rows", lambda *args: calls.append(1) or real(*args))
        ours = fast.get(index)
    assert calls == [1]
    assert_bitwise_same(ours, stock.get(index))


@pytest.mark.usefixtures("kernel_always")
@pytest.mark.parametrize(("fast_cls", "stock_cls"), PAIRS)
def test_kernel_on_records_and_memmaps(fast_cls, stock_cls, tmp_path):
    fast, stock = pair(fast_cls, stock_cls, 12, [9, 7], tmp_path)
    index = torch.tensor([3, 4, 5, 5, 5, 11, 0, 1, 7, 7])
    assert_same(fast.get(index), stock.get(index))


@pytest.mark.usefixtures("kernel_always")
@pytest.mark.parametrize(
    "index",
    [[0, 8], [-1, 2], [2, -3, 4], [9, 9, 10]],
    ids=["past-written", "negative", "negative-inside", "past-written-run"],
)
def test_kernel_leaves_other_indices_to_the_stock_read(index):
    """Negative or unwritten rows: torchrl's semantics (negatives wrap) and its errors."""
    fast, stock = varied_pair(16, [8])
    index = torch.tensor(index)
    try:
        expected = stock.get(index)
    except IndexError:
        with pytest.raises(IndexError):
            fast.get(index)
        return
    assert_bitwise_same(fast.get(index), expected)


@pytest.mark.usefixtures("kernel_always")
def test_kernel_sample_does_not_alias_the_storage():
    storage = FastLazyTensorStorage(8)
    storage.set(torch.arange(8), varied_records(8))
    index = torch.tensor([1, 2, 2])
    sample = storage.get(index)
    for key in sample.keys(True, True):
        sample[key].zero_()
    assert_bitwise_same(storage.get(index), LazyTensorStorage.get(storage, index))


@pytest.mark.usefixtures("kernel_always")
def test_kernel_follows_replaced_and_added_leaves():
    """The read plan is remade when the contents change: a replaced leaf, a new key."""
    storage = FastLazyTensorStorage(6)
    storage.set(torch.arange(6), TensorDict({"obs": torch.arange(6.0)}, [6]))
    index = torch.tensor([4, 5, 5])
    assert storage.get(index)["obs"].tolist() == [4.0, 5.0, 5.0]
    storage._storage.set("obs", torch.arange(6.0) * 10, inplace=False)
    assert storage.get(index)["obs"].tolist() == [40.0, 50.0, 50.0]
    storage._storage.set("extra", torch.arange(6) + 100)
    assert storage.get(index)["extra"].tolist() == [104, 105, 105]


@pytest.mark.usefixtures("kernel_always")
def test_kernel_mixes_with_index_select_leaves():
    """Leaves the kernel does not take (wide rows, non-contiguous) are read by index_select."""
    data = TensorDict({"wide": torch.arange(6 * 300.0).view(6, 300), "obs": torch.arange(6.0)}, [6])
    fast, stock = FastLazyTensorStorage(6), LazyTensorStorage(6)
    for storage in (fast, stock):
        storage.set(torch.arange(6), data)
    fast._storage.set("t", torch.arange(12).view(2, 6).t(), inplace=False)  # not contiguous
    stock._storage.set("t", torch.arange(12).view(2, 6).t(), inplace=False)
    index = torch.tensor([5, 0, 0, 1])
    assert_bitwise_same(fast.get(index), stock.get(index))


class TestSupports:
    """Contiguous CPU leaves with rows of 1 to MAX_ROW_BYTES bytes go through the kernel."""

    @pytest.mark.parametrize(
        "tensor",
        [torch.zeros(4), torch.zeros(4, 3, dtype=torch.bool), torch.zeros(4, 128, 2)],
        ids=["1-d", "bool", "1024-bytes"],
    )
    def test_taken(self, tensor):
        assert rows_kernel.supports(tensor)

    @pytest.mark.parametrize(
        "tensor",
        [
            torch.zeros(4, 257),
            torch.zeros(4, 0),
            torch.zeros(3, 4).t(),
            torch.zeros(4, 2, dtype=torch.complex64).conj(),
            torch.zeros(4, 2, requires_grad=True),
        ],
        ids=["wide", "empty-rows", "transposed", "conj-view", "requires-grad"],
    )
    def test_left_to_index_select(self, tensor):
        assert not rows_kernel.supports(tensor)


@settings(max_examples=60, deadline=None)
@given(
    row_bytes=st.integers(1, 96),
    rows=st.integers(1, 50),
    data=st.data(),
)
def test_copy_rows_matches_index_select_oracle(row_bytes, rows, data):
    """Raw byte rows of any width: the kernel against ``index_select`` (the oracle)."""
    generator = torch.Generator().manual_seed(rows * 97 + row_bytes)
    source = torch.randint(0, 256, (rows, row_bytes), dtype=torch.uint8, generator=generator)
    index = torch.tensor(data.draw(kernel_indices(rows)))
    out = torch.empty(index.numel(), row_bytes, dtype=torch.uint8)
    assert rows_kernel.copy_rows(index, rows, [(source, out, row_bytes)])
    assert torch.equal(out, source.index_select(0, index))


def test_copy_rows_refuses_out_of_range_rows():
    source, out = torch.arange(6.0), torch.zeros(3)
    for bad in ([0, 1, 6], [-1, 0, 1], [4, 5, 6]):
        assert not rows_kernel.copy_rows(torch.tensor(bad), 6, [(source, out, 4)])
    assert not rows_kernel.copy_rows(torch.tensor([0, 1, 2]), 2, [(source, out, 4)])
