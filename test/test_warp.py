"""torchrl_ext._warp: using the library prints nothing unless TORCHRL_EXT_VERBOSE asks for it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import warp as wp

from torchrl_ext import _warp

ROOT = Path(__file__).resolve().parents[1]

# Imports the package, steps a CartPoleEnv (Warp kernels of the envs) and runs a two-channel
# RecurrentGAE (the Warp GAE kernel of the objectives), then records what it saw in a JSON file, so
# that nothing it checks needs printing.
USE_THE_LIBRARY = textwrap.dedent(
    """
    import json, sys
    import torch
    from tensordict import TensorDict
    import torchrl_ext
    from torchrl_ext import Sequence
    from torchrl_ext.envs import CartPoleEnv
    from torchrl_ext.objectives import RecurrentGAE
    from torchrl_ext.objectives._kernels import gae_recursion

    env = CartPoleEnv(num_envs=4, seed=0)
    td = env.rand_step(env.reset())
    rollout = env.rollout(8, break_when_any_done=False)
    n, t, k = 3, 6, 2
    g = torch.Generator().manual_seed(0)
    done = torch.zeros(n, t, 1, dtype=torch.bool)
    data = TensorDict(
        {
            "state_value": torch.randn(n, t, k, generator=g),
            "next": {
                "reward": torch.randn(n, t, k, generator=g),
                "done": done,
                "terminated": done.clone(),
                "state_value": torch.randn(n, t, k, generator=g),
            },
        },
        [n, t],
    )
    out = RecurrentGAE(gamma=0.9, lmbda=0.9)(data)
    # RecurrentGAE runs the GAE Warp kernel on CUDA; here it is launched on the CPU directly
    x = data["state_value"]
    inputs = [x, x, x, done.expand(n, t, k), done.expand(n, t, k)]
    gae_recursion.gae_warp(inputs, 0.9, 0.9, torch.empty_like(x), torch.empty_like(x))
    import warp as wp
    with open(sys.argv[1], "w") as f:
        json.dump(
            {
                "rollout": list(rollout.shape),
                "advantage": list(out["advantage"].shape),
                "gae_warp_devices": sorted(gae_recursion._LOADED_DEVICES),
                "log_level": wp.config.log_level,
                "version": wp.config.version,
            },
            f,
        )
    """
)


def _run_library(tmp_path: Path, **env_overrides: str) -> tuple[subprocess.CompletedProcess, dict]:
    env = dict(os.environ)
    for name in ("TORCHRL_EXT_VERBOSE", "PYTHONWARNINGS"):
        env.pop(name, None)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    env.update(env_overrides)
    script = tmp_path / "use_the_library.py"
    script.write_text(USE_THE_LIBRARY)
    report = tmp_path / "report.json"
    proc = subprocess.run(
        [sys.executable, str(script), str(report)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert proc.returncode == 0, proc.stderr
    return proc, json.loads(report.read_text())


class TestWarpOutput:
    """Importing and using torchrl_ext prints nothing; ``TORCHRL_EXT_VERBOSE=1`` restores Warp's
    banner and module-load lines (which Warp 1.19 prints on kernel-cache hits too).
    """

    def test_silent_by_default(self, tmp_path):
        proc, report = _run_library(tmp_path)
        # the script did use both Warp sites: env kernels and the GAE Warp kernel
        assert report["rollout"] == [4, 8]
        assert report["advantage"] == [3, 6, 2]
        assert report["gae_warp_devices"] == ["cpu"]
        assert report["log_level"] == wp.LOG_WARNING
        assert proc.stdout == ""
        assert proc.stderr == ""

    def test_verbose_restores_warp_output(self, tmp_path):
        proc, report = _run_library(tmp_path, TORCHRL_EXT_VERBOSE="1")
        assert report["log_level"] == wp.LOG_INFO
        assert f"Warp {report['version']} initialized" in proc.stdout
        assert "Module torchrl_ext.envs.cartpole" in proc.stdout
        assert "Module torchrl_ext.objectives._kernels.gae_recursion" in proc.stdout
        assert "load on device 'cpu'" in proc.stdout


class TestConfigure:
    """``configure`` lowers only Warp's default level, and not when verbose."""

    def test_default_level_becomes_warning(self, monkeypatch):
        monkeypatch.delenv(_warp.VERBOSE_ENV, raising=False)
        monkeypatch.setattr(wp.config, "log_level", wp.LOG_INFO)
        _warp.configure()
        assert wp.config.log_level == wp.LOG_WARNING

    @pytest.mark.parametrize("level", [wp.LOG_DEBUG, wp.LOG_ERROR])
    def test_users_own_level_is_kept(self, monkeypatch, level):
        monkeypatch.delenv(_warp.VERBOSE_ENV, raising=False)
        monkeypatch.setattr(wp.config, "log_level", level)
        _warp.configure()
        assert wp.config.log_level == level

    @pytest.mark.parametrize("value", ["1", "true", "yes"])
    def test_verbose_leaves_warp_alone(self, monkeypatch, value):
        monkeypatch.setenv(_warp.VERBOSE_ENV, value)
        monkeypatch.setattr(wp.config, "log_level", wp.LOG_INFO)
        _warp.configure()
        assert wp.config.log_level == wp.LOG_INFO

    @pytest.mark.parametrize("value", ["", "0", "false", "no", "off"])
    def test_verbose_off_values(self, monkeypatch, value):
        monkeypatch.setenv(_warp.VERBOSE_ENV, value)
        assert not _warp.verbose()


class TestStderrFilter:
    """The native-output filter drops the lines it names and passes every other line on."""

    def test_drops_only_the_named_lines(self, capfd):
        with _warp._stderr_filtered("no driver here"):
            os.write(2, b"Warp CUDA warning: no driver here. GPU execution off.\n")
            os.write(2, b"something else the user should see\n")
        captured = capfd.readouterr()
        assert "no driver here" not in captured.err
        assert "something else the user should see" in captured.err
