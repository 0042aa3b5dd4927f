"""``examples/r2d2_cartpole.py``: its quick run, bitwise resume, replay folder and saved policy.

A crafted file (``malicious_files``) in a checkpoint's replay folder, or a crafted ``state.pt``,
is refused on ``--resume`` before anything in it runs: the marker never appears.
"""

from __future__ import annotations

import hashlib
import json
import math
import shutil
from pathlib import Path

import pipelines
import pytest
import r2d2_cartpole
import runs
import torch
from malicious_files import REFUSED, pickle_file, torch_file
from tensordict.nn import TensorDictModuleBase


def seal(folder: Path) -> Path:
    """Lists every file of a checkpoint folder in its manifest, as a save would."""
    files = sorted(p for p in folder.rglob("*") if p.is_file() and p.name != runs.MANIFEST)
    digests = {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
               for p in files}  # fmt: skip
    (folder / runs.MANIFEST).write_text(json.dumps({"files": digests}))
    return folder


@pytest.fixture(scope="module")
def quick(tmp_path_factory):
    """One ``--quick`` run (checkpoints every 512 frames), its folder and result."""
    out = tmp_path_factory.mktemp("r2d2")
    before = torch.get_rng_state()
    (result,) = pipelines.run("r2d2_cartpole", "--quick", "--out", str(out), "--save-every", "512")
    assert torch.equal(torch.get_rng_state(), before), "the caller's global RNG is left alone"
    return out / "seed0", result


def test_quick_run_checks_every_update(quick):
    folder, result = quick
    args = r2d2_cartpole.Args(**r2d2_cartpole.QUICK)
    assert result.frames == args.frames == 1024
    assert str(result).startswith("r2d2_cartpole seed 0: mean return never reached 400; ")
    logged = runs.read_scalars(folder)
    assert [step for step, _ in logged["mean_return"]] == list(range(128, 1025, 128))
    after_warmup = (args.frames - args.warmup_frames) // (args.num_envs * args.steps) + 1
    assert dict(logged["updates"])[args.frames] == after_warmup
    losses = [v for step, v in logged["loss"] if step >= args.warmup_frames]
    assert losses and all(math.isfinite(v) for v in losses)
    assert all(math.isnan(v) for step, v in logged["loss"] if step < args.warmup_frames)
    assert logged["final_eval"] == [(1024, result.final_eval)] and 1 <= result.final_eval <= 500
    assert result.best == max(v for _, v in logged["best_mean_return"])
    assert (folder / "learning_curve.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_checkpoint_holds_plain_data_and_the_replay_folder(quick):
    folder, result = quick
    checkpoint = runs.find_checkpoint(folder)
    state = runs.load_checkpoint(checkpoint)
    assert isinstance(state["carrier"], dict) and isinstance(state["config"], dict)
    assert state["counters"]["frames"] == result.frames and state["counters"]["finished"]
    assert (checkpoint / "replay").is_dir() and any((checkpoint / "replay").iterdir())


def test_resumes_bitwise(quick, tmp_path, monkeypatch):
    """Killed after frame 768, before its checkpoint there, and resumed from the one at 512.

    The uninterrupted run saved every 512 frames, this one every 256: saving changes nothing.
    """
    folder = pipelines.interrupted(monkeypatch, "r2d2_cartpole", tmp_path, 256, 768)
    pipelines.run("r2d2_cartpole", "--resume", str(folder))
    assert pipelines.scalars(folder) == pipelines.scalars(quick[0])  # NaN losses as text


def test_loaded_policy_is_the_trained_one(quick):
    folder, _ = quick
    policy, args, module = runs.load_policy(folder)
    assert module is r2d2_cartpole and isinstance(policy, TensorDictModuleBase)
    assert not policy.training
    saved = runs.load_checkpoint(runs.find_checkpoint(folder))["loss"]
    saved = [v for k, v in saved.items() if "target" not in k]
    for param in policy.parameters():
        assert any(p.shape == param.shape and torch.equal(p, param) for p in saved)
    rollout = r2d2_cartpole.acting_env(args, 2, 7, "cpu").rollout(5, policy)
    assert rollout["action"].shape[:2] == (2, 5)


@pytest.mark.parametrize(
    ("where", "write"),
    [("prefetch.pkl", pickle_file), ("storage/other.pickle", pickle_file),
     ("transform.t", torch_file)],
)  # fmt: skip
def test_crafted_replay_file_is_refused(quick, tmp_path, marker, where, write):
    run = tmp_path / "seed0"
    shutil.copytree(quick[0], run)
    crafted = write(runs.find_checkpoint(run) / "replay" / where, marker)
    seal(crafted.parents[len(Path(where).parts)])
    with pytest.raises(ValueError, match=f"{crafted}.*{REFUSED}"):
        pipelines.run("r2d2_cartpole", "--resume", str(run), "--frames", "2048")


def test_crafted_checkpoint_is_refused(quick, tmp_path, marker, capsys):
    run = tmp_path / "seed0"
    shutil.copytree(quick[0], run)
    crafted = torch_file(runs.find_checkpoint(run) / runs.STATE, marker)
    seal(crafted.parent)
    with pytest.raises(SystemExit) as stop:
        pipelines.run("r2d2_cartpole", "--resume", str(run), "--frames", "2048")
    assert stop.value.code == 2 and REFUSED in capsys.readouterr().err


@pytest.mark.parametrize(
    ("argv", "match"),
    [
        (["--burn-in", "-1"], "burn_in must be an integer >= 0, got burn_in=-1"),
        (["--length", "0"], "length must be an integer >= 1"),
        (["--n-step", "1.5"], "argument --n-step: invalid int value"),
        (["--batch-size", "0"], "batch_size"),
        (["--capacity", "10"], "capacity must hold at least one window"),
        (["--alpha", "-0.1"], "alpha must be a finite number >= 0"),
        (["--beta", "nan"], "beta must be a finite number >= 0"),
        (["--eta", "1.5"], "eta must be a finite number in [0, 1]"),
        (["--eps-end", "2"], "eps_end"),
        (["--eps-lanes", "-0.5"], "eps_lanes"),
        (["--lr-decay-start", "1.5"], "lr_decay_start"),
        (["--lr-end=-1e-4"], "lr_end must be a finite number >= 0"),
        (["--lr", "0"], "lr must be a finite number > 0"),
        (["--target-period", "0"], "target_period"),
        (["--warmup-frames", "0"], "warmup_frames"),
        (["--target", "inf"], "target must be a finite number"),
        (["--frames", "8"], "frames must be at least one batch"),
    ],
)
def test_refuses_bad_arguments_in_one_line(tmp_path, capsys, argv, match):
    pipelines.assert_refused("r2d2_cartpole", argv, match, tmp_path, capsys)


def test_schedules():
    args = r2d2_cartpole.Args(num_envs=3, eps_end=0.0, eps_lanes=0.1, frames=1000, lr=1.0)
    assert [round(e, 4) for e in r2d2_cartpole.epsilons(args, 10**9).tolist()] == [0.1, 0.01, 0.001]
    assert bool((r2d2_cartpole.epsilons(args, 0) == 1).all())
    args = r2d2_cartpole.Args(frames=1000, lr=1.0, lr_end=0.0, lr_decay_start=0.5)
    assert [r2d2_cartpole.learning_rate(args, f) for f in (0, 500, 750, 1000)] == [1, 1, 0.5, 0]
