"""Where the example commands write: under runs/ by default, elsewhere only when told."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from torchrl_ext.examples import ppo_cartpole, ppo_cartpole_results, ppo_course, r2d2_cartpole
from torchrl_ext.examples.ppo_cartpole import Config, Result


@pytest.fixture
def fake_runs(monkeypatch):
    """Replaces training in the results script by two finished runs (the table is what's tested)."""

    def run_all(seeds, mlp_seeds, out, frames):
        curve = [(1024, 1.0, 20.0), (2048, 2.0, 480.0)]
        lstm = [
            Result(Config(seed=s), 2048, 2.0, 500.0, 4096, 4.0, {}, 1.0, 1.0, curve) for s in seeds
        ]
        mlp = [
            Result(Config(seed=s, policy="mlp"), None, None, 9.0, 4096, 2.0, {}, 1.0, 1.0, curve)
            for s in mlp_seeds
        ]
        return lstm, mlp, out / "learning_curves.png"

    monkeypatch.setattr(ppo_cartpole_results, "run_all", run_all)
    threads = torch.get_num_threads()
    yield
    torch.set_num_threads(threads)


class TestOutputLocations:
    """Every command's default output folder lies under ``runs/``; the results table goes next to
    the runs unless ``--table`` names another file, so a default run never rewrites a tracked file.
    """

    def test_results_table_defaults_to_runs(self, tmp_path, monkeypatch, fake_runs):
        monkeypatch.chdir(tmp_path)
        text = ppo_cartpole_results.main(["--seeds", "0"])
        table = tmp_path / "runs" / "ppo_cartpole" / "results.md"
        assert table.read_text() == text
        assert "| lstm | 0 | 2048 |" in text
        assert sorted(p.name for p in tmp_path.iterdir()) == ["runs"]

    def test_results_table_follows_out(self, tmp_path, monkeypatch, fake_runs):
        monkeypatch.chdir(tmp_path)
        ppo_cartpole_results.main(["--seeds", "0", "--out", "elsewhere"])
        assert (tmp_path / "elsewhere" / "results.md").exists()
        assert sorted(p.name for p in tmp_path.iterdir()) == ["elsewhere"]

    def test_explicit_table(self, tmp_path, monkeypatch, fake_runs):
        monkeypatch.chdir(tmp_path)
        ppo_cartpole_results.main(["--seeds", "0", "--table", "page/ppo.md"])
        assert (
            "![Learning curves](../runs/ppo_cartpole/learning_curves.png)"
            in (tmp_path / "page" / "ppo.md").read_text()
        )

    def test_training_commands_default_to_runs(self):
        assert r2d2_cartpole._parse([]).out == Path("runs") / "r2d2_cartpole"
        # None means the command picks a folder under runs/ named after the run
        assert ppo_cartpole.parse_args([]).out is None
        assert ppo_course.parse_args([]).out is None
