"""Shared-memory slots: lent to one request at a time, written by the service, read back exact.

``SlotPool`` (the learner's side) and ``SlotWriter`` (the service's side) are checked in one
process: the bytes a writer puts into a slot are the bytes the pool reads, also after the
writer grew the file; a slot is lent again only after release; retired and closed slots are
deleted and the writer then reports them unreachable; paths outside ``/dev/shm`` are refused.
``PackedSampleReplayBuffer.sample_packed(slot=...)`` is checked against its reply path.
"""

from __future__ import annotations

import gc
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import torch
from tensordict import TensorDict
from test_packing import assert_identical
from torchrl.data import LazyTensorStorage

from torchrl_ext import Sequence
from torchrl_ext.distributed import PackedSampleReplayBuffer, slots, unpack_tensordict
from torchrl_ext.distributed.packing import packed_nbytes
from torchrl_ext.distributed.slots import PREFIX, SHM_DIR, SlotPool, SlotWriter

pytestmark = pytest.mark.skipif(not os.path.isdir(SHM_DIR), reason="needs /dev/shm (Linux)")


@pytest.fixture
def pool():
    pool = SlotPool()
    yield pool
    pool.close()


class TestSlotPool:
    def test_a_slot_is_lent_again_only_after_release(self, pool):
        first, second = pool.acquire(), pool.acquire()
        assert first != second and os.path.exists(first) and os.path.exists(second)
        pool.release(first)
        assert pool.acquire() == first
        assert pool.acquire() not in (first, second)

    def test_reads_what_the_writer_wrote_also_after_growth(self, pool):
        slot, writer = pool.acquire(), SlotWriter()
        small = np.arange(16, dtype=np.uint8)
        writer.map(slot, 16)[:] = small
        assert pool.read(slot, 16).tolist() == small.tolist()
        large = np.random.default_rng(0).integers(0, 256, 1 << 20, dtype=np.uint8)
        writer.map(slot, large.size)[:] = large
        assert os.path.getsize(slot) == large.size
        assert np.array_equal(pool.read(slot, large.size), large)
        assert pool.read(slot, 0).size == 0

    def test_read_of_a_short_slot_fails(self, pool):
        slot = pool.acquire()
        SlotWriter().map(slot, 8)
        with pytest.raises(RuntimeError, match="holds 8 bytes, expected 64"):
            pool.read(slot, 64)

    def test_retired_slot_is_deleted_and_unreachable(self, pool):
        slot, writer = pool.acquire(), SlotWriter()
        writer.map(slot, 8)
        pool.retire(slot)
        assert not os.path.exists(slot)
        assert writer.map(slot, 8) is None
        assert pool.acquire() != slot

    def test_close_and_garbage_collection_delete_the_files(self):
        pool = SlotPool()
        paths = [pool.acquire(), pool.acquire()]
        pool.close()
        assert not any(os.path.exists(p) for p in paths)
        pool = SlotPool()
        path = pool.acquire()
        del pool
        gc.collect()
        assert not os.path.exists(path)

    def test_without_a_usable_directory_lends_nothing(self, tmp_path, monkeypatch):
        monkeypatch.setattr(slots, "SHM_DIR", str(tmp_path / "missing"))
        assert SlotPool().acquire() is None

    def test_only_lent_slots_are_released_read_or_retired(self, pool):
        slot = pool.acquire()
        pool.release(slot)
        for call in (pool.release, pool.retire, lambda p: pool.read(p, 1)):
            with pytest.raises(ValueError, match="got path="):
                call(slot)  # not lent now: a second release would lend it twice
        slot = pool.acquire()
        pool.close()
        with pytest.raises(ValueError, match="lent"):
            pool.release(slot)
        assert pool.acquire() != slot

    def test_read_checks_nbytes(self, pool):
        slot = pool.acquire()
        with pytest.raises(ValueError, match="nbytes"):
            pool.read(slot, -1)


class TestSlotWriter:
    @pytest.mark.parametrize("path", ["/etc/passwd", f"{SHM_DIR}/other", f"{SHM_DIR}/x/{PREFIX}1"])
    def test_refuses_anything_but_a_slot(self, path):
        with pytest.raises(ValueError, match="slot must be a file /dev/shm/torchrl_ext-sample-"):
            SlotWriter().map(path, 8)

    @pytest.mark.parametrize("path", [3, None, b"/dev/shm/torchrl_ext-sample-1"])
    def test_slot_path_must_be_a_str(self, path):
        with pytest.raises(TypeError, match="slot must be a str"):
            SlotWriter().map(path, 8)

    @pytest.mark.parametrize("link", [os.symlink, os.link])
    def test_never_writes_into_a_file_reachable_by_another_name(self, link):
        victim = f"{SHM_DIR}/{PREFIX}victim-{os.getpid()}"
        name = f"{SHM_DIR}/{PREFIX}name-{os.getpid()}"
        with open(victim, "wb") as f:
            f.write(b"keep")
        link(victim, name)
        try:
            assert SlotWriter().map(name, 16) is None  # a symbolic link, or a second hard link
            with open(victim, "rb") as f:
                assert f.read() == b"keep"
        finally:
            os.unlink(name)
            os.unlink(victim)

    def test_checks_max_open_and_nbytes(self, pool):
        with pytest.raises(ValueError, match="max_open"):
            SlotWriter(max_open=0)
        with pytest.raises(ValueError, match="nbytes"):
            SlotWriter().map(pool.acquire(), -1)

    def test_full_shared_memory_is_reported_not_written(self, pool, monkeypatch):
        def full(fd, offset, length):
            raise OSError(28, "No space left on device")

        slot = pool.acquire()
        monkeypatch.setattr(os, "posix_fallocate", full)
        assert SlotWriter().map(slot, 4096) is None
        rb = filled_buffer()
        rb.set_rng(torch.Generator().manual_seed(0))
        expected = rb.sample_packed()
        rb.set_rng(torch.Generator().manual_seed(0))
        assert np.array_equal(rb.sample_packed(slot=slot).data, expected.data)

    def test_keeps_at_most_max_open_maps(self, pool):
        writer = SlotWriter(max_open=2)
        paths = [pool.acquire() for _ in range(3)]
        for i, path in enumerate(paths):
            writer.map(path, 8)[:] = i
        assert len(writer._maps) == 2 and paths[0] not in writer._maps
        writer.map(paths[0], 8)[0] = 9  # reopened on demand
        assert pool.read(paths[0], 8).tolist() == [9] + [0] * 7


def filled_buffer() -> PackedSampleReplayBuffer:
    unit = Sequence(length=4, burn_in=2, layout="batch_time")
    rb = PackedSampleReplayBuffer(storage=LazyTensorStorage(100), sample_unit=unit, batch_size=6)
    gen = torch.Generator().manual_seed(3)
    data = {
        "observation": torch.randn(100, 3, generator=gen),
        "action": torch.randint(2, (100,), generator=gen),
        ("next", "done"): torch.rand(100, 1, generator=gen) < 0.1,
    }
    rb.extend(TensorDict(data, [100]))
    return rb


class TestSamplePackedIntoSlot:
    """The bytes written into a slot rebuild the sample the reply path carries."""

    def test_slot_sample_identical_to_reply_sample(self, pool):
        rb, slot = filled_buffer(), pool.acquire()
        for seed in range(3):
            rb.set_rng(torch.Generator().manual_seed(seed))
            expected = unpack_tensordict(rb.sample_packed())
            SlotWriter().map(slot, 1 << 16)[:] = 0xFF  # stale bytes, padding included
            rb.set_rng(torch.Generator().manual_seed(seed))
            packed = rb.sample_packed(slot=slot)
            assert packed.data is None
            data = pool.read(slot, packed_nbytes(packed))
            assert_identical(unpack_tensordict(packed._replace(data=data)), expected)

    def test_unreachable_slot_sends_the_bytes_in_the_reply(self):
        rb = filled_buffer()
        rb.set_rng(torch.Generator().manual_seed(0))
        expected = rb.sample_packed()
        rb.set_rng(torch.Generator().manual_seed(0))
        got = rb.sample_packed(slot=f"{SHM_DIR}/{PREFIX}not-this-node")
        assert np.array_equal(got.data, expected.data)

    def test_slot_checked_before_sampling(self):
        rb = filled_buffer()
        rb.set_rng(torch.Generator().manual_seed(0))
        expected = rb.sample_packed()
        rb.set_rng(torch.Generator().manual_seed(0))
        with pytest.raises(ValueError, match="got slot='/tmp/x'"):
            rb.sample_packed(slot="/tmp/x")
        with pytest.raises(TypeError, match="got slot=3"):
            rb.sample_packed(slot=3)
        assert np.array_equal(rb.sample_packed().data, expected.data)  # no draw was spent

    def test_unpack_needs_the_bytes(self):
        packed = filled_buffer().sample_packed()
        with pytest.raises(ValueError, match=r"packed\.data is None"):
            unpack_tensordict(packed._replace(data=None))


def run_isolated(code: str) -> subprocess.CompletedProcess:
    """Runs ``code`` in a fresh interpreter, so that a SIGBUS fails the test, not the run."""
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, timeout=120
    )


class TestSlotsSurviveOtherProcesses:
    """A slot file truncated or replaced by another process never kills the learner.

    Reads copy the bytes out through the pool's own descriptor and check that the path still
    names the file the pool made; a short or replaced slot is a ``RuntimeError`` that says so.
    The writer re-checks the file's size before it hands out a view.
    """

    PRELUDE = """
        import os
        import numpy as np
        from torchrl_ext.distributed.slots import SlotPool, SlotWriter
        pool, writer = SlotPool(), SlotWriter()
        slot = pool.acquire()
        writer.map(slot, 1 << 20)[:] = 7
    """

    def test_a_held_read_survives_truncation(self):
        done = run_isolated(
            self.PRELUDE
            + """
        data = pool.read(slot, 1 << 20)
        os.truncate(slot, 0)  # another process of the same user
        assert int(data.sum()) == 7 << 20
        try:
            pool.read(slot, 1 << 20)
        except RuntimeError as err:
            print(err)
        pool.close()
        """
        )
        assert done.returncode == 0, (done.returncode, done.stderr[-2000:])
        assert "holds 0 bytes, expected 1048576" in done.stdout
        assert "truncated" in done.stdout

    def test_the_writer_survives_truncation(self):
        done = run_isolated(
            self.PRELUDE
            + """
        os.truncate(slot, 4096)
        writer.map(slot, 1 << 20)[:] = 9
        assert int(pool.read(slot, 1 << 20).sum()) == 9 << 20
        pool.close()
        """
        )
        assert done.returncode == 0, (done.returncode, done.stderr[-2000:])

    def test_a_replaced_slot_is_refused(self, pool):
        slot = pool.acquire()
        SlotWriter().map(slot, 64)[:] = 1
        os.unlink(slot)
        with open(slot, "wb") as f:
            f.write(bytes(64))
        with pytest.raises(RuntimeError, match="replaced"):
            pool.read(slot, 64)

    def test_a_deleted_slot_is_refused(self, pool):
        slot = pool.acquire()
        SlotWriter().map(slot, 64)
        os.unlink(slot)
        with pytest.raises(RuntimeError, match="deleted"):
            pool.read(slot, 64)
