"""A TensorDict packed into one flat byte array and rebuilt: exact for every entry.

``pack_tensordict`` lays the tensors out one after another on 8-byte boundaries;
``unpack_tensordict`` rebuilds a TensorDict equal to the packed one in keys, dtypes, shapes,
values, batch size and device. Checked by hand on a small layout, against the original for
random layouts (every dtype, nested keys, non-contiguous views, empty tensors), and through
``PackedSampleReplayBuffer.sample_packed`` against ``sample`` under the same generator.
"""

from __future__ import annotations

import hashlib

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from tensordict import NonTensorData, TensorDict
from torchrl.data import LazyTensorStorage

from torchrl_ext import Sequence
from torchrl_ext.distributed import (
    PackedSampleReplayBuffer,
    PackedTensorDict,
    pack_tensordict,
    unpack_tensordict,
)

DTYPES = [torch.bool, torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64]
DTYPES += [torch.float16, torch.bfloat16, torch.float32, torch.float64, torch.complex64]


def assert_identical(got: TensorDict, expected: TensorDict) -> None:
    """Same keys, dtypes, shapes, values (bit for bit), batch size and device."""
    keys = set(expected.keys(True, True))
    assert set(got.keys(True, True)) == keys
    assert got.batch_size == expected.batch_size
    assert got.device == expected.device
    for key in keys:
        g, e = got.get(key), expected.get(key)
        if not isinstance(e, torch.Tensor):
            assert g == e, key
            continue
        assert g.dtype == e.dtype and g.shape == e.shape, key
        assert torch.equal(g.contiguous().view(-1).view(torch.uint8), _bytes(e)), key


def _bytes(t: torch.Tensor) -> torch.Tensor:
    return t.contiguous().view(-1).view(torch.uint8)


class TestPackTensorDict:
    """One byte array and a schema; unpacking rebuilds the TensorDict bit for bit."""

    def test_layout_by_hand(self):
        td = TensorDict(
            {
                "a": torch.tensor([1, 2, 3], dtype=torch.int8),
                ("n", "b"): torch.tensor([[0.5], [2.0], [-1.0]]),
            },
            [3],
        )
        packed = pack_tensordict(td)
        # a 16-byte schema digest; int8 x3 = 3 bytes, padded to 8; float32 x3 = 12, padded to 16
        assert packed.data.dtype == np.uint8 and packed.data.shape == (40,)
        assert [(k, off) for k, _, _, off in packed.schema] == [("a", 16), (("n", "b"), 24)]
        schema = "[('a', 'torch.int8', (3,), 16), (('n', 'b'), 'torch.float32', (3, 1), 24)]"
        digest = hashlib.blake2b(schema.encode(), digest_size=16).digest()
        assert packed.data[:16].tobytes() == digest
        assert packed.data[16:19].tolist() == [1, 2, 3] and packed.data[19:24].tolist() == [0] * 5
        floats = np.frombuffer(packed.data[24:36].tobytes(), dtype=np.float32)
        assert floats.tolist() == [0.5, 2.0, -1.0]
        assert packed.batch_size == torch.Size([3]) and packed.device is None
        assert packed.rest is None

    @settings(max_examples=40, deadline=None)
    @given(
        layout=st.lists(
            st.tuples(st.sampled_from(DTYPES), st.lists(st.integers(0, 3), max_size=2)),
            min_size=1,
            max_size=6,
        ),
        batch=st.lists(st.integers(0, 4), max_size=2),
        seed=st.integers(0, 2**16),
    )
    def test_round_trip_random_layouts(self, layout, batch, seed):
        gen = torch.Generator().manual_seed(seed)
        entries = {}
        for i, (dtype, extra) in enumerate(layout):
            shape = (*batch, *extra)
            raw = torch.randint(0, 256, (*shape, dtype.itemsize), dtype=torch.uint8, generator=gen)
            value = raw.view(dtype).reshape(shape) if dtype != torch.bool else raw[..., 0] > 127
            key = ("nested", f"e{i}") if i % 2 else f"e{i}"
            entries[key] = value
        td = TensorDict(entries, batch)
        assert_identical(unpack_tensordict(pack_tensordict(td)), td)

    def test_views_devices_and_non_tensors(self):
        base = torch.arange(24.0).view(4, 6)
        td = TensorDict(
            {"t": base.t()[:, ::2], "s": torch.arange(6)[::2].expand(6, 3)},
            [6],
            device="cpu",
        )
        td["label"] = NonTensorData("run-1", batch_size=[6])
        got = unpack_tensordict(pack_tensordict(td))
        assert_identical(got.exclude("label"), td.exclude("label"))
        assert got["label"] == "run-1" and got.device == torch.device("cpu")

    def test_result_owns_writable_memory(self):
        """One storage per entry: sending one entry back sends its bytes only."""
        td = TensorDict({"x": torch.zeros(4), "y": torch.ones(4, 250, dtype=torch.int64)}, [4])
        got = unpack_tensordict(pack_tensordict(td))
        assert got["x"].untyped_storage().nbytes() == 16
        assert got["y"].untyped_storage().nbytes() == 8000
        td = TensorDict({"x": torch.zeros(4)}, [4])
        packed = pack_tensordict(td)
        read_only = packed.data.copy()
        read_only.flags.writeable = False  # what ray.get hands back from the object store
        got = unpack_tensordict(packed._replace(data=read_only))
        got["x"] += 1
        assert got["x"].tolist() == [1.0] * 4 and read_only[16:].tolist() == [0] * 16

    def test_wrong_types(self):
        with pytest.raises(TypeError, match="td"):
            pack_tensordict({"x": torch.zeros(2)})
        with pytest.raises(TypeError, match="packed"):
            unpack_tensordict((np.zeros(8, np.uint8), (), torch.Size([]), None, None))
        assert isinstance(pack_tensordict(TensorDict({}, [])), PackedTensorDict)


class TestPackedSchemaMatchesBytes:
    """A schema altered after packing (dtypes, shapes, offsets, keys) is refused on unpack."""

    @staticmethod
    def packed():
        td = TensorDict(
            {"a": torch.arange(4, dtype=torch.int32), "b": torch.ones(4, dtype=torch.float32)},
            [4],
        )
        return pack_tensordict(td)

    def altered(self, change):
        packed = self.packed()
        schema = [list(entry) for entry in packed.schema]
        change(schema)
        return packed._replace(schema=tuple(tuple(entry) for entry in schema))

    @pytest.mark.parametrize(
        "change",
        [
            lambda s: (s[0].__setitem__(1, s[1][1]), s[1].__setitem__(1, torch.int32)),
            lambda s: s[0].__setitem__(1, torch.uint8),
            lambda s: s[1].__setitem__(2, torch.Size([2, 2])),
            lambda s: s[1].__setitem__(3, s[1][3] - 8),
            lambda s: s.reverse(),
            lambda s: s[0].__setitem__(0, "c"),
        ],
        ids=["swapped dtypes", "dtype", "shape", "offset", "order", "key"],
    )
    def test_altered_schema_is_refused(self, change):
        with pytest.raises(ValueError, match="schema"):
            unpack_tensordict(self.altered(change))

    def test_other_bytes_are_refused(self):
        packed = self.packed()
        other = pack_tensordict(TensorDict({"x": torch.zeros(8, dtype=torch.int64)}, [8]))
        with pytest.raises(ValueError, match="schema"):
            unpack_tensordict(packed._replace(data=other.data))


class TestPackedSampleReplayBuffer:
    """``sample_packed`` is ``sample`` packed: the same draw under the same generator."""

    def test_sequence_sample_identical_to_sample(self):
        unit = Sequence(length=5, burn_in=3, bootstrap=1, layout="batch_time")
        rb = PackedSampleReplayBuffer(
            storage=LazyTensorStorage(200), sample_unit=unit, batch_size=8
        )
        gen = torch.Generator().manual_seed(1)
        done = torch.rand(200, 1, generator=gen) < 0.1
        rb.extend(
            TensorDict(
                {
                    "observation": torch.randn(200, 3, generator=gen),
                    "recurrent_state_h": torch.randn(200, 1, 4, generator=gen),
                    ("next", "done"): done,
                },
                [200],
            )
        )
        for seed in range(3):
            rb.set_rng(torch.Generator().manual_seed(seed))
            expected = rb.sample()
            rb.set_rng(torch.Generator().manual_seed(seed))
            assert_identical(unpack_tensordict(rb.sample_packed()), expected)
        assert {"validity_mask", "learning_mask", "is_init", "anchor_index"} <= set(expected.keys())

    def test_batch_size_checked(self):
        rb = PackedSampleReplayBuffer(storage=LazyTensorStorage(4), batch_size=2)
        with pytest.raises(ValueError, match="batch_size"):
            rb.sample_packed(0)
