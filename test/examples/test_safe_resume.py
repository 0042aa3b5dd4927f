"""Every file the examples load is read as data, never as code.

A crafted ``checkpoint.pt`` (or replay file) would create a marker file if anything in it ran
(see ``malicious_files``). Through the entry points a user calls (``--resume`` of every
training subcommand, ``animate``, the Ray replay service's ``loads``) it is refused with a
ValueError naming the file, and the marker never appears. The files the examples write load
back (the bitwise resume itself is checked in ``test_pipelines.py``).
"""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import pytest
import torch
from malicious_files import REFUSED, pickle_file, torch_file
from tensordict import TensorDict
from test_pipelines import _run
from torchrl.data import LazyTensorStorage

from torchrl_ext.distributed import PackedSampleReplayBuffer
from torchrl_ext.examples import __main__ as entry
from torchrl_ext.examples import _run_folder, animate
from torchrl_ext.examples import r2d2_distributed as dist


def seal(folder: Path) -> Path:
    """Lists every file of a checkpoint folder in its manifest, as a save would."""
    files = sorted(p for p in folder.rglob("*") if p.is_file() and p.name != "manifest.json")
    digests = {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
               for p in files}  # fmt: skip
    (folder / "manifest.json").write_text(json.dumps({"files": digests}))
    return folder


def crafted_checkpoint(run: Path, marker: Path) -> Path:
    """A checkpoint folder in ``run`` whose manifest is right and whose state.pt runs code."""
    crafted = torch_file(run / "checkpoint-000001" / "state.pt", marker)
    seal(crafted.parent)
    return crafted


@pytest.fixture(scope="module")
def r2d2_run(tmp_path_factory):
    """A quick r2d2 run folder: its checkpoint and its replay folder."""
    out = tmp_path_factory.mktemp("r2d2")
    _run("r2d2", "--quick", "--out", str(out), "--save-every", "512")
    return out / "seed0"


class TestLoadCheckpoint:
    """``load_checkpoint`` reads what ``save_checkpoint`` wrote, with ``weights_only=True``."""

    def test_round_trip(self, tmp_path):
        state = {
            "config": {"seed": 0, "lr": 1e-3},
            "counters": {"hit": (64, 1.5), "recent": []},
            "torch_rng": torch.get_rng_state(),
            "carrier": {"next": {"x": torch.ones(2)}},
        }
        _run_folder.save_checkpoint(tmp_path, state)
        loaded = _run_folder.load_checkpoint(_run_folder.find_checkpoint(tmp_path))
        assert loaded["config"] == state["config"] and loaded["counters"] == state["counters"]
        assert torch.equal(loaded["torch_rng"], state["torch_rng"])
        assert torch.equal(loaded["carrier"]["next"]["x"], torch.ones(2))

    def test_crafted_checkpoint_is_refused(self, tmp_path, marker):
        crafted = crafted_checkpoint(tmp_path, marker)
        with pytest.raises(ValueError, match=f"{crafted}.*{REFUSED}"):
            _run_folder.load_checkpoint(crafted.parent)

    def test_every_pipeline_writes_plain_data(self, r2d2_run):
        """The parts a checkpoint holds (the collector's carrier as dicts) load as data."""
        state = _run_folder.load_checkpoint(_run_folder.find_checkpoint(r2d2_run))
        assert isinstance(state["carrier"], dict) and isinstance(state["config"], dict)


class TestEntryPoints:
    """A crafted checkpoint given to a subcommand is refused before anything runs."""

    @pytest.mark.parametrize("name", ["ppo", "r2d2", "course"])
    def test_resume(self, tmp_path, marker, name):
        crafted = crafted_checkpoint(tmp_path / "seed0", marker)
        with pytest.raises(ValueError, match=f"{crafted}.*{REFUSED}"):
            _run(name, "--resume", str(tmp_path / "seed0"))

    def test_resume_distributed(self, tmp_path, marker):
        """``r2d2 --distributed --resume`` reads the checkpoint's layout first (before Ray)."""
        crafted = crafted_checkpoint(tmp_path, marker)
        run = _run_folder.RunOptions(tmp_path, resume=True)
        with pytest.raises(ValueError, match=f"{crafted}.*{REFUSED}"):
            dist.train_run(dist.Layout(), None, run)

    def test_animate(self, tmp_path, marker):
        crafted = crafted_checkpoint(tmp_path, marker)
        with pytest.raises(ValueError, match=f"{crafted}.*{REFUSED}"):
            entry.main(["animate", str(tmp_path)])

    def test_animate_loads_a_saved_agent(self, tmp_path):
        _run("ppo", "--quick", "--out", str(tmp_path))
        actor, env = animate.load_agent(tmp_path / "seed0", torch.device("cpu"))
        assert len(animate.record(actor, env, frames=2, stride=1, size=32)) == 2


class TestReplayFolder:
    """``r2d2 --resume`` reads the replay folder only once every file in it is data."""

    @pytest.mark.parametrize(
        "where, write",
        [("prefetch.pkl", pickle_file), ("storage/other.pickle", pickle_file),
         ("transform.t", torch_file)],
    )  # fmt: skip
    def test_crafted_replay_file_is_refused(self, r2d2_run, tmp_path, marker, where, write):
        run = tmp_path / "seed0"
        shutil.copytree(r2d2_run, run)
        crafted = write(_run_folder.find_checkpoint(run) / "replay" / where, marker)
        seal(crafted.parents[len(Path(where).parts)])
        with pytest.raises(ValueError, match=f"{crafted}.*{REFUSED}"):
            _run("r2d2", "--resume", str(run), "--frames", "2048")  # continues: reads the replay


def _service() -> PackedSampleReplayBuffer:
    return PackedSampleReplayBuffer(storage=LazyTensorStorage(16), batch_size=4)


class TestServiceLoads:
    """The Ray replay service (``r2d2 --distributed``) checks the folder where it reads it:
    ``PackedSampleReplayBuffer.loads`` runs in the service's process."""

    def test_round_trip(self, tmp_path):
        rb = _service()
        rb.extend(TensorDict({"obs": torch.arange(6.0)}, [6]))
        rb.dumps(tmp_path / "replay")
        restored = _service()
        restored.loads(tmp_path / "replay")
        assert restored[:]["obs"].tolist() == rb[:]["obs"].tolist()

    def test_crafted_prefetch_file_is_refused(self, tmp_path, marker):
        rb = _service()
        rb.extend(TensorDict({"obs": torch.arange(6.0)}, [6]))
        rb.dumps(tmp_path / "replay")
        crafted = pickle_file(tmp_path / "replay" / "prefetch.pkl", marker)
        restored = _service()
        with pytest.raises(ValueError, match=f"{crafted}.*{REFUSED}"):
            restored.loads(tmp_path / "replay")
        assert len(restored) == 0
