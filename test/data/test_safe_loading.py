"""Saved files are read as data, never as code.

Each loader is handed a crafted file (see ``malicious_files``) that would create a marker file
if anything in it ran: the loader refuses it with a ValueError naming the file, and the marker
never appears. The files the package writes itself load back unchanged.
"""

from __future__ import annotations

import os
import pickle
from collections import OrderedDict

import pytest
import torch
from malicious_files import REFUSED, pickle_file, torch_file
from tensordict import TensorDict
from torchrl.data import LazyTensorStorage, TensorDictPrioritizedReplayBuffer

from torchrl_ext.data import load_replay
from torchrl_ext.data.safe_loading import check_replay_folder, load_plain


class TestLoadPlain:
    """``torch.load(weights_only=True)``: tensors and plain data load; a file naming any other
    object is refused with a ValueError naming it, before any of it runs."""

    def test_round_trip(self, tmp_path):
        state = OrderedDict(
            chunks=[torch.arange(3)], shape=(4, 2), ran_out=False, seed=None, lr=1e-3,
            name="run", nested={"rng": torch.get_rng_state(), "hit": (64, 1.5)},
        )  # fmt: skip
        torch.save(state, tmp_path / "state.pt")
        loaded = load_plain(tmp_path / "state.pt")
        assert type(loaded) is OrderedDict and list(loaded) == list(state)
        assert torch.equal(loaded["chunks"][0], state["chunks"][0])
        assert torch.equal(loaded["nested"]["rng"], state["nested"]["rng"])
        assert loaded["shape"] == (4, 2) and loaded["nested"]["hit"] == (64, 1.5)
        assert (loaded["ran_out"], loaded["seed"], loaded["lr"], loaded["name"]) == (
            False, None, 1e-3, "run",
        )  # fmt: skip

    def test_code_is_refused(self, tmp_path, marker):
        path = torch_file(tmp_path / "state.pt", marker)
        with pytest.raises(ValueError, match=f"{path}.*{REFUSED}"):
            load_plain(path)

    def test_objects_of_unregistered_classes_are_refused(self, tmp_path):
        torch.save({"carrier": Carrier(torch.zeros(2))}, tmp_path / "carrier.pt")
        with pytest.raises(ValueError, match=REFUSED):
            load_plain(tmp_path / "carrier.pt")

    def test_what_torch_allows_loads(self, tmp_path):
        """Classes registered with ``torch.serialization.add_safe_globals`` load; a TensorDict
        is one with tensordict's nightlies, and is refused with tensordict 0.14.3."""
        torch.save({"carrier": Carrier(torch.ones(2))}, tmp_path / "carrier.pt")
        with torch.serialization.safe_globals([Carrier]):
            got = load_plain(tmp_path / "carrier.pt")
        assert isinstance(got["carrier"], Carrier) and got["carrier"].x.tolist() == [1.0, 1.0]


class Carrier:
    """An object of a class that no library registers as safe to load."""

    def __init__(self, x: torch.Tensor) -> None:
        self.x = x

    def test_not_a_torch_file(self, tmp_path):
        (tmp_path / "noise.pt").write_bytes(b"not a checkpoint")
        with pytest.raises(ValueError, match=r"noise\.pt is not a file torch\.save wrote"):
            load_plain(tmp_path / "noise.pt")


def _buffer() -> TensorDictPrioritizedReplayBuffer:
    return TensorDictPrioritizedReplayBuffer(
        alpha=0.6, beta=0.4, storage=LazyTensorStorage(16), batch_size=4,
        generator=torch.Generator().manual_seed(0),
    )  # fmt: skip


@pytest.fixture
def saved(tmp_path):
    """A prioritized buffer's ``dumps`` folder, and the buffer."""
    rb = _buffer()
    rb.extend(TensorDict({"obs": torch.arange(10.0), "td_error": torch.rand(10)}, [10]))
    rb.update_tensordict_priority(rb.sample())
    rb.dumps(tmp_path / "replay")
    return tmp_path / "replay", rb


#: Where a crafted file goes in a replay folder, and how it is written. ``prefetch.pkl`` is
#: what TorchRL's ``ReplayBuffer.loads`` unpickles; ``other.pickle`` what TensorDict unpickles
#: in a memory-mapped folder; ``transform.t`` and a sampler's file go through ``torch.load``;
#: any other file is refused unless it holds data only.
CRAFTED = [
    ("prefetch.pkl", pickle_file),
    ("storage/other.pickle", pickle_file),
    ("rng_state/other.pickle", pickle_file),
    ("transform.t", torch_file),
    ("sampler/sampler.pt", torch_file),
    ("writer/anything", pickle_file),
]


class TestLoadReplay:
    """``buffer.loads(path)`` once every file of the folder is shown to be data: JSON, raw
    tensor bytes, or a pickle / torch file that names no Python object. A crafted file is
    refused, naming it, before the buffer changes."""

    def test_round_trip(self, saved):
        path, rb = saved
        restored = _buffer()
        load_replay(restored, path)
        assert len(restored) == len(rb) == 10
        assert torch.equal(restored[:]["obs"], rb[:]["obs"])
        got, expected = restored.sample(), rb.sample()  # same generator state, same priorities
        assert set(got.keys()) == set(expected.keys())
        assert all(torch.equal(got[k], expected[k]) for k in expected.keys())

    @pytest.mark.parametrize("where, write", CRAFTED)
    def test_crafted_file_is_refused(self, saved, marker, where, write):
        path, _ = saved
        crafted = write(path / where, marker)
        restored = _buffer()
        with pytest.raises(ValueError, match=f"{crafted}.*{REFUSED}"):
            load_replay(restored, path)
        assert len(restored) == 0

    def test_folder_behind_a_link_is_checked(self, saved, tmp_path, marker):
        path, _ = saved
        elsewhere = tmp_path / "elsewhere"
        pickle_file(elsewhere / "prefetch.pkl", marker)
        os.symlink(elsewhere, path / "linked")
        with pytest.raises(ValueError, match=f"linked/prefetch.pkl.*{REFUSED}"):
            load_replay(_buffer(), path)

    def test_prefetch_of_plain_data_passes(self, saved):
        path, _ = saved
        (path / "prefetch.pkl").write_bytes(pickle.dumps({"version": 1, "queue": ()}))
        assert check_replay_folder(path) == path

    def test_not_a_folder(self, tmp_path):
        with pytest.raises(ValueError, match=r"path must be the folder.*not a folder"):
            load_replay(_buffer(), tmp_path / "missing")

    def test_torchrl_loads_alone_runs_the_prefetch_file(self, saved, tmp_path):
        """Why load_replay exists: TorchRL's ``loads`` unpickles ``prefetch.pkl`` as it is.

        If this starts failing, TorchRL reads that file safely and the check could go.
        """
        path, _ = saved
        marker = tmp_path / "torchrl_marker"
        pickle_file(path / "prefetch.pkl", marker)
        with pytest.raises(Exception):  # noqa: B017 - the payload is no prefetch state
            _buffer().loads(path)
        assert marker.exists()
