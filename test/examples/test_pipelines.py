"""Each pipeline's ``--quick`` run through the entry point, and bitwise checkpoint/resume.

A run interrupted after a checkpoint and resumed with ``--resume DIR`` must log the same
learning curve, bit for bit, as the same run left alone: every scalar of the CSV log (except the
wall-clock seconds) at every step, and the final evaluation.
"""

from __future__ import annotations

import math

import pytest
import torch

from torchrl_ext.examples import __main__ as entry
from torchrl_ext.examples import _run_folder

#: subcommand, frames between checkpoints, the logged step the interruption follows.
RESUME_CASES = [
    ("ppo", 512, 1024),
    ("r2d2", 256, 768),
    ("course", 512, 1024),
    ("signalling", 128, 256),
    ("popgym", 256, 512),
]


class Interrupted(Exception):
    """Stands for a run killed after it logged ``step`` but before its next checkpoint."""


def _run(*argv: str):
    threads = torch.get_num_threads()
    try:
        return entry.main([*argv, "--no-progress"])
    finally:
        torch.set_num_threads(threads)


def _interrupted(tmp_path, monkeypatch, name: str, every: int, stop: int):
    """The run folder of a quick run killed after it logged ``stop`` (checkpoints every
    ``every`` frames)."""
    log_row = _run_folder.log_row

    def log_then_die(logger, row, step):
        log_row(logger, row, step)
        if step == stop:
            raise Interrupted(step)

    monkeypatch.setattr(_run_folder, "log_row", log_then_die)
    with pytest.raises(Interrupted):
        _run(name, "--quick", "--out", str(tmp_path), "--save-every", str(every))
    monkeypatch.setattr(_run_folder, "log_row", log_row)
    run = tmp_path / "seed0"
    saved = _run_folder.load_checkpoint(_run_folder.find_checkpoint(run))["counters"]["frames"]
    assert saved < stop  # the rows logged after the checkpoint are logged again
    return run


def _functional_key(key: str) -> str:
    """A loss key as a functional TorchRL loss names it (``actor_network`` -> ``..._params``)."""
    names = {"actor_network": "actor_network_params", "critic_network": "critic_network_params"}
    return ".".join(names.get(part, part) for part in key.split("."))


def _curve(out) -> dict:
    """Every logged scalar but the wall time, as text (so that NaN equals NaN)."""
    scalars = _run_folder.read_scalars(out)
    scalars.pop("seconds")
    return {k: [(step, repr(v)) for step, v in rows] for k, rows in scalars.items()}


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory):
    """Each pipeline's quick run, checkpointing as the resume cases do."""
    runs = {}
    for name, every, _ in RESUME_CASES:
        out = tmp_path_factory.mktemp(name)
        results = _run(name, "--quick", "--out", str(out), "--save-every", str(every))
        runs[name] = (out / "seed0", results)
    return runs


class TestQuick:
    """``--quick`` trains a few batches with the pipeline's shape and mask checks, logs through
    the CSV logger into ``<out>/seed<N>`` and leaves a checkpoint there."""

    @pytest.mark.parametrize("name", ["ppo", "r2d2", "course"])
    def test_outputs(self, uninterrupted, name):
        out, results = uninterrupted[name]
        assert len(results) == 1 and results[0].out == out
        assert _run_folder.latest_checkpoint(out) is not None
        scalars = _run_folder.read_scalars(out)
        frames = results[0].frames
        assert scalars["seconds"][-1][0] == frames
        # r2d2 logs NaN until its first update, after the warm-up frames
        first = results[0].config.warmup_frames if name == "r2d2" else 0
        losses = [v for k, rows in scalars.items() if k.startswith("loss") for s, v in rows
                  if s >= first]  # fmt: skip
        assert losses and all(math.isfinite(v) for v in losses)

    def test_ppo_curve_and_evaluation(self, uninterrupted):
        out, (result,) = uninterrupted["ppo"]
        scalars = _run_folder.read_scalars(out)
        assert [s for s, _ in scalars["mean_return"]] == [512, 1024, 1536]
        assert scalars["final_eval"] == [(1536, result.final_eval)]
        assert 1.0 <= result.final_eval <= 500.0
        assert (out / "learning_curve.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"

    def test_r2d2_updates_after_warmup(self, uninterrupted):
        out, (result,) = uninterrupted["r2d2"]
        updates = dict(_run_folder.read_scalars(out)["updates"])
        cfg = result.config
        after_warmup = (cfg.frames - cfg.warmup_frames) // cfg.frames_per_batch + 1
        assert updates[cfg.frames] == after_warmup
        assert (_run_folder.find_checkpoint(out) / "replay").is_dir()

    def test_leaves_global_rng_alone(self, tmp_path):
        before = torch.get_rng_state()
        _run("r2d2", "--quick", "--out", str(tmp_path))
        assert torch.equal(torch.get_rng_state(), before)


class TestResume:
    """Interrupted after a checkpoint, then resumed: the same curve, bit for bit."""

    @pytest.mark.parametrize("name, every, stop", RESUME_CASES)
    def test_resumed_run_matches(self, uninterrupted, tmp_path, monkeypatch, name, every, stop):
        run = _interrupted(tmp_path, monkeypatch, name, every, stop)
        _run(name, "--resume", str(run))
        reference, _ = uninterrupted[name]
        assert _curve(run) == _curve(reference)

    @pytest.mark.parametrize("name, every, stop", [RESUME_CASES[0], RESUME_CASES[3]])
    def test_resumes_functional_loss_layout(
        self, uninterrupted, tmp_path, monkeypatch, name, every, stop
    ):
        """A checkpoint whose networks are saved as a functional ClipPPOLoss keeps them
        (``actor_network_params.*``) resumes to the same curve."""
        from test_safe_resume import seal  # it imports this module

        run = _interrupted(tmp_path, monkeypatch, name, every, stop)
        folder = _run_folder.find_checkpoint(run)
        state = _run_folder.load_checkpoint(folder)
        renamed = {_functional_key(k): v for k, v in state["loss"].items()}
        parameters = [k for k, v in state["loss"].items() if v.ndim > 0]
        assert parameters and all(_functional_key(k) != k for k in parameters)
        state["loss"] = renamed
        torch.save(state, folder / _run_folder.STATE)
        seal(folder)
        _run(name, "--resume", str(run))
        reference, _ = uninterrupted[name]
        assert _curve(run) == _curve(reference)

    def test_missing_checkpoint(self, tmp_path, capsys):
        with pytest.raises(SystemExit):
            _run("ppo", "--resume", str(tmp_path))
        assert "no checkpoint" in capsys.readouterr().err
