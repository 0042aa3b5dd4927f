"""Run folders: checkpoints that are never half-written, runs that lose nothing.

A checkpoint folder is complete or absent (its manifest lists every file with its SHA-256, and it
is renamed into place last); saving follows no link and writes into no existing file; a damaged
checkpoint is refused naming the file. A run stopped by SIGINT or SIGTERM saves and exits with
one line saying how to resume; one killed (SIGKILL) mid-checkpoint resumes from the checkpoint
before. Either way the resumed run logs the same curve, bit for bit, as a run left alone. A
finished run says so on ``--resume`` unless ``--frames`` extends it; logs never repeat a row.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from test_pipelines import _curve, _run

from torchrl_ext.examples import _run_folder

ROOT = Path(__file__).resolve().parents[2]


def _state(value: float) -> dict:
    return {"counters": {"frames": int(value)}, "weights": torch.full((3,), value)}


def _loaded(out: Path) -> float:
    return float(_run_folder.load_checkpoint(_run_folder.find_checkpoint(out))["weights"][0])


def _write_replay(path: Path) -> None:
    (path / "storage").mkdir(parents=True)
    (path / "storage" / "data.memmap").write_bytes(b"\x01" * 64)


class Interrupted(Exception):
    """Stands for a process that died between two writes of a save."""


def _interrupt_after(writes: int, monkeypatch) -> None:
    """Makes the next save stop after its first ``writes`` writes."""
    steps = _run_folder._save_steps

    def interrupted(out, parts):
        for done, name in enumerate(steps(out, parts), start=1):
            yield name
            if done == writes:
                raise Interrupted(name)

    monkeypatch.setattr(_run_folder, "_save_steps", interrupted)


#: The writes of a save with a replay folder: state, replay, manifest, rename, old one removed.
WRITES = 5


class TestSave:
    """A save is one unit: interrupted between any two writes, the run folder holds the old
    checkpoint or the new one, whole; links and hard links are never written through."""

    @pytest.mark.parametrize("writes", range(WRITES))
    def test_interrupted_save_leaves_old_or_new(self, tmp_path, monkeypatch, writes):
        _run_folder.save_checkpoint(tmp_path, _state(1.0), replay=_write_replay)
        _interrupt_after(writes + 1, monkeypatch)
        with pytest.raises(Interrupted):
            _run_folder.save_checkpoint(tmp_path, _state(2.0), replay=_write_replay)
        monkeypatch.undo()
        # the new checkpoint is in place once it is renamed (the 4th write), not before
        assert _loaded(tmp_path) == (2.0 if writes + 1 >= 4 else 1.0)
        _run_folder.save_checkpoint(tmp_path, _state(3.0), replay=_write_replay)
        assert _loaded(tmp_path) == 3.0
        assert [p.name for p in tmp_path.iterdir()] == [
            _run_folder.latest_checkpoint(tmp_path).name
        ]

    def test_links_are_not_followed(self, tmp_path):
        victim = tmp_path / "victim"
        victim.mkdir()
        (victim / "file").write_text("keep")
        run = tmp_path / "run"
        run.mkdir()
        (run / "checkpoint.tmp").symlink_to(victim / "file")
        (run / "checkpoint-000001").symlink_to(victim)
        (run / ".checkpoint-stale").symlink_to(victim)
        _run_folder.save_checkpoint(run, _state(1.0))
        _run_folder.save_checkpoint(run, _state(2.0))
        assert (victim / "file").read_text() == "keep" and _loaded(run) == 2.0

    def test_hard_links_are_not_written_into(self, tmp_path):
        victim = tmp_path / "victim"
        victim.write_text("keep")
        _run_folder.save_checkpoint(tmp_path / "run", _state(1.0))
        state = _run_folder.find_checkpoint(tmp_path / "run") / "state.pt"
        state.unlink()
        os.link(victim, state)
        _run_folder.save_checkpoint(tmp_path / "run", _state(2.0))
        assert victim.read_text() == "keep" and _loaded(tmp_path / "run") == 2.0


class TestLoad:
    """A checkpoint that differs from its manifest is refused with the file's name."""

    @pytest.fixture
    def folder(self, tmp_path):
        _run_folder.save_checkpoint(tmp_path, _state(1.0), replay=_write_replay)
        return _run_folder.find_checkpoint(tmp_path)

    def test_flipped_byte(self, folder):
        path = folder / "replay" / "storage" / "data.memmap"
        path.write_bytes(b"\x01" * 63 + b"\x02")
        with pytest.raises(ValueError, match=f"{path} is missing or damaged"):
            _run_folder.load_checkpoint(folder)

    def test_missing_file(self, folder):
        (folder / "state.pt").unlink()
        with pytest.raises(ValueError, match=f"{folder / 'state.pt'} is missing"):
            _run_folder.load_checkpoint(folder)

    def test_extra_file(self, folder):
        (folder / "replay" / "extra.pkl").write_bytes(b"x")
        with pytest.raises(ValueError, match=r"extra\.pkl is not part of the checkpoint"):
            _run_folder.load_checkpoint(folder)

    def test_damaged_manifest(self, folder):
        (folder / "manifest.json").write_text("{")
        with pytest.raises(ValueError, match=r"manifest\.json is missing or damaged"):
            _run_folder.load_checkpoint(folder)

    def test_link_instead_of_a_file(self, folder, tmp_path):
        state = folder / "state.pt"
        copy = tmp_path / "copy.pt"
        copy.write_bytes(state.read_bytes())
        state.unlink()
        state.symlink_to(copy)
        with pytest.raises(ValueError, match=f"{state} is missing or damaged"):
            _run_folder.load_checkpoint(folder)


#: Runs ``python -m torchrl_ext.examples ARGS`` and sends itself ``SIGNAL`` once the run has
#: logged step ``STEP`` (WHEN=batch) or while it writes its ``STEP``-th checkpoint, between
#: state.pt and the manifest (WHEN=save).
DRIVER = """
import os, sys
from torchrl_ext.examples import __main__ as entry, _run_folder
signum, step, when = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
log_row, save_steps, saves = _run_folder.log_row, _run_folder._save_steps, []

def log_then_signal(logger, row, at):
    log_row(logger, row, at)
    if at == step:
        os.kill(os.getpid(), signum)

def signal_mid_save(out, parts):
    saves.append(out)
    for name in save_steps(out, parts):
        if name == "state.pt" and len(saves) == step:
            os.kill(os.getpid(), signum)
        yield name

if when == "batch":
    _run_folder.log_row = log_then_signal
else:
    _run_folder._save_steps = signal_mid_save
entry.main(sys.argv[4:])
"""

QUICK = ("ppo", "--quick", "--no-progress", "--save-every", "1024")


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """The quick ppo run left alone."""
    out = tmp_path_factory.mktemp("reference")
    _run(*QUICK, "--out", str(out))
    return out / "seed0"


class TestStopAndResume:
    """Stopped by a signal at a batch or in the middle of a checkpoint, a run resumes to the same
    curve, bit for bit. SIGINT and SIGTERM save first and say how to resume; SIGKILL leaves the
    checkpoint before it whole."""

    @pytest.mark.parametrize(
        "signum, step, when, saved",
        [
            (signal.SIGINT, 512, "batch", 512),  # not a checkpoint step: saved on the signal
            (signal.SIGTERM, 1024, "batch", 1024),
            (signal.SIGINT, 1, "save", 1024),  # the save finishes, then the run stops
            (signal.SIGKILL, 2, "save", 1024),  # dies in the 2nd save (1536): the 1st is whole
        ],
    )
    def test_signal(self, reference, tmp_path, signum, step, when, saved):
        env = dict(os.environ, PYTHONPATH=str(ROOT))
        done = subprocess.run(
            [
                sys.executable,
                "-c",
                DRIVER,
                str(int(signum)),
                str(step),
                when,
                *QUICK,
                "--out",
                str(tmp_path),
            ],
            capture_output=True,
            text=True,
            env=env,
            timeout=300,
            check=False,
        )
        run = tmp_path / "seed0"
        if signum == signal.SIGKILL:
            assert done.returncode == -signal.SIGKILL
        else:
            assert done.returncode == 128 + signum, done.stderr
            assert done.stderr.splitlines()[-1] == (
                f"ppo: stopped by {signum.name} at {saved:,} frames; checkpoint saved; resume "
                f"with: python -m torchrl_ext.examples ppo --resume {run}"
            )
        state = _run_folder.load_checkpoint(_run_folder.find_checkpoint(run))
        assert state["counters"]["frames"] == saved
        _run("ppo", "--resume", str(run))
        assert _curve(run) == _curve(reference)


class TestFinishedRun:
    """``--resume`` of a finished run says so and logs nothing; with a larger ``--frames`` it
    continues; no log ever holds two rows of the same step."""

    def test_resume_finished_then_extend(self, reference, tmp_path, capsys):
        run = tmp_path / "seed0"
        shutil.copytree(reference, run)
        before = _run_folder.read_scalars(run)
        assert _run("ppo", "--resume", str(run)) == []
        assert "is finished (1,536 frames); pass --frames N" in capsys.readouterr().out
        assert _run_folder.read_scalars(run) == before
        (result,) = _run("ppo", "--resume", str(run), "--frames", "2048")
        scalars = _run_folder.read_scalars(run)
        assert result.frames == 2048
        assert [s for s, _ in scalars["mean_return"]] == [512, 1024, 1536, 2048]
        assert [s for s, _ in scalars["final_eval"]] == [1536, 2048]
        for name, rows in scalars.items():
            steps = [s for s, _ in rows]
            assert len(steps) == len(set(steps)), name

    def test_fewer_frames_than_done(self, reference, tmp_path):
        with pytest.raises(SystemExit, match="has 1,536 frames already"):
            _run("ppo", "--resume", str(reference), "--frames", "1024")


class TestNewRun:
    """A new run into a folder that holds one is refused unless ``--overwrite``; its config is
    written to ``config.json`` at the start."""

    def test_rerun_is_refused(self, reference, capsys):
        with pytest.raises(SystemExit) as exit_info:
            _run("ppo", "--quick", "--out", str(reference.parent))
        assert exit_info.value.code == 2
        err = capsys.readouterr().err.strip().splitlines()[-1]
        assert f"{reference} holds a run already; continue it with --resume" in err

    def test_overwrite(self, reference, tmp_path):
        out = tmp_path / "out"
        _run("ppo", "--quick", "--out", str(out), "--frames", "512")
        _run("ppo", "--quick", "--out", str(out), "--overwrite")
        assert _curve(out / "seed0") == _curve(reference)
        assert _run_folder.read_config(out / "seed0")["frames"] == 1536

    def test_folder_without_a_run_is_not_replaced(self, tmp_path, capsys):
        (tmp_path / "seed0").mkdir()
        (tmp_path / "seed0" / "notes.txt").write_text("mine")
        with pytest.raises(SystemExit):
            _run("ppo", "--quick", "--out", str(tmp_path), "--overwrite")
        assert "is not empty and holds no run" in capsys.readouterr().err
        assert (tmp_path / "seed0" / "notes.txt").read_text() == "mine"
