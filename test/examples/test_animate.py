"""``examples/animate.py``: a GIF of the agent of any run folder whose env can be drawn.

It loads the run with ``runs.load_policy``, so it works for every pipeline whose env
``render_frame`` draws (CartPole, courses); a run of any other env, a folder that holds no run,
a damaged or crafted checkpoint and a missing Pillow are each one line and exit 2.
"""

from __future__ import annotations

import dataclasses
import hashlib
import importlib.util
import json
import shutil
import sys
import types

import animate
import pipelines
import pytest
import runs
import torch
from malicious_files import REFUSED, torch_file
from PIL import Image

from torchrl_ext.envs import SignallingEnv
from torchrl_ext.envs.popgym import PositionOnlyCartPoleEnv


def animate_main(*argv: str):
    """``python examples/animate.py ARGV`` in this process (torch's thread count restored)."""
    threads = torch.get_num_threads()
    try:
        return animate.main([str(a) for a in argv])
    finally:
        torch.set_num_threads(threads)


def refusal(capsys, *argv: str) -> str:
    """The one line ``animate ARGV`` stops with (exit 2)."""
    with pytest.raises(SystemExit) as stop:
        animate_main(*argv)
    err = capsys.readouterr().err
    assert stop.value.code == 2 and len(err.strip().splitlines()) == 1, err
    return err


@pytest.fixture(scope="module")
def run_folders(tmp_path_factory):
    """A ``--quick`` run folder of each pipeline whose env can be drawn."""
    folders = {}
    for name in ("ppo_cartpole", "ppo_course"):
        out = tmp_path_factory.mktemp(name)
        pipelines.run(name, "--quick", "--out", str(out))
        folders[name] = out / "seed0"
    return folders


@pytest.mark.parametrize("name", ["ppo_cartpole", "ppo_course"])
def test_writes_a_gif_of_the_agent(run_folders, tmp_path, capsys, name):
    gif = tmp_path / "agent.gif"
    argv = ["--frames", "2", "--stride", "1", "--size", "32", "--gif", gif]
    assert animate_main(run_folders[name], *argv) == gif
    assert f"animation: {gif} (2 frames, " in capsys.readouterr().out
    with Image.open(gif) as image:  # Pillow merges identical pictures into one GIF frame
        assert image.format == "GIF" and image.size == (32, 32)


@pytest.mark.parametrize("name", ["ppo_cartpole", "ppo_course"])
def test_records_the_loaded_policy_acting(run_folders, name):
    policy, args, module = runs.load_policy(run_folders[name])
    env = module.acting_env(args, 1, animate.ANIMATION_SEED, "cpu")
    pictures = animate.record(policy, env, frames=2, stride=3, size=32)
    assert [(p.shape, p.dtype) for p in pictures] == [((32, 32, 3), torch.uint8)] * 2


def test_default_gif_goes_into_the_run_folder(run_folders, tmp_path):
    folder = tmp_path / "run"
    shutil.copytree(run_folders["ppo_course"], folder)
    assert animate_main(folder, "--frames", "1", "--size", "16") == folder / "agent.gif"
    assert (folder / "agent.gif").is_file()


def test_gif_replaces_a_link_instead_of_writing_through_it(run_folders, tmp_path):
    target = tmp_path / "elsewhere.txt"
    target.write_text("kept")
    link = tmp_path / "agent.gif"
    link.symlink_to(target)
    animate_main(run_folders["ppo_cartpole"], "--frames", "1", "--size", "16", "--gif", link)
    assert not link.is_symlink() and target.read_text() == "kept"


def fake_pipeline(monkeypatch, name: str, make_env) -> types.ModuleType:
    """A pipeline module named ``name`` whose acting env is ``make_env(num_envs, seed)``."""

    @dataclasses.dataclass
    class Args:
        seed: int = 0

    module = types.ModuleType(name)
    module.Args = Args
    module.load_policy = lambda args, state, device: torch.nn.Identity()
    module.acting_env = lambda args, num_envs, seed, device: make_env(num_envs, seed)
    monkeypatch.setitem(sys.modules, name, module)
    return module


def saved_run(folder, pipeline: str) -> None:
    """A run folder of ``pipeline`` with a verified checkpoint."""
    folder.mkdir(parents=True, exist_ok=True)
    runs.write_json(folder / runs.CONFIG, {"pipeline": pipeline, "config": {"seed": 0}})
    runs.save_checkpoint(folder, {"config": {"seed": 0}})


@pytest.mark.parametrize(
    ("name", "make_env", "env_name"),
    [
        ("fake_popgym", lambda n, seed: PositionOnlyCartPoleEnv(n, seed=seed), "PositionOnly"),
        ("fake_signalling", lambda n, seed: SignallingEnv(n, seed=seed), "SignallingEnv"),
    ],
)
def test_refuses_a_run_whose_env_cannot_be_drawn(
    monkeypatch, tmp_path, capsys, name, make_env, env_name
):
    fake_pipeline(monkeypatch, name, make_env)
    saved_run(tmp_path, name)
    err = refusal(capsys, tmp_path, "--frames", "1")
    assert f"a {name} run" in err and env_name in err and "cannot be drawn" in err
    assert not (tmp_path / "agent.gif").exists()


def test_refuses_a_folder_without_a_run(tmp_path, capsys):
    assert "holds no run" in refusal(capsys, tmp_path)


def test_refuses_a_damaged_checkpoint(run_folders, tmp_path, capsys):
    folder = tmp_path / "run"
    shutil.copytree(run_folders["ppo_course"], folder)
    with (runs.latest_checkpoint(folder) / runs.STATE).open("ab") as f:
        f.write(b"\0")
    assert "missing or damaged" in refusal(capsys, folder)


def test_refuses_a_crafted_checkpoint(tmp_path, capsys, marker):
    """A checkpoint whose state.pt would run code is read as data only, and refused."""
    runs.write_json(tmp_path / runs.CONFIG, {"pipeline": "ppo_course", "config": {}})
    crafted = torch_file(tmp_path / "checkpoint-000001" / "state.pt", marker)
    digest = hashlib.sha256(crafted.read_bytes()).hexdigest()
    (crafted.parent / "manifest.json").write_text(json.dumps({"files": {"state.pt": digest}}))
    assert REFUSED in refusal(capsys, tmp_path)


def test_refuses_a_checkpoint_of_another_pipeline(run_folders, tmp_path, capsys):
    folder = tmp_path / "run"
    shutil.copytree(run_folders["ppo_cartpole"], folder)
    runs.write_json(folder / runs.CONFIG, {"pipeline": "ppo_course", "config": {}})
    assert "its checkpoint does not fit its pipeline" in refusal(capsys, folder)


def test_missing_pillow_names_the_package(run_folders, monkeypatch, capsys):
    find_spec = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "PIL" else find_spec(name, *a)
    )
    assert "pip install pillow" in refusal(capsys, run_folders["ppo_cartpole"])


@pytest.mark.parametrize(
    ("argv", "match"),
    [
        (["--frames", "0"], "--frames must be >= 1"),
        (["--stride", "0"], "--stride must be >= 1"),
        (["--size", "8"], "--size must be >= 16"),
        (["--fps", "0"], "--fps must be >= 1"),
        (["--device", "nowhere"], "not a torch device"),
    ],
)
def test_refuses_bad_options(tmp_path, capsys, argv, match):
    assert match in refusal(capsys, tmp_path, *argv)
