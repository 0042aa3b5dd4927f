"""``examples/cartpole_results.py``, the main demo: it trains each policy's seeds through
``ppo_cartpole.py``'s command line and writes one table row per run, the code the runs ran,
and the curves."""

from __future__ import annotations

import cartpole_results
import runs
import torch


def test_quick_table(tmp_path):
    threads = torch.get_num_threads()
    argv = ["--quick", "--seeds", "0", "1", "--mlp-seeds", "0", "--out", str(tmp_path)]
    try:
        text = cartpole_results.main([*argv, "--no-progress"])
    finally:
        torch.set_num_threads(threads)
    folders = [tmp_path / "lstm" / "seed0", tmp_path / "lstm" / "seed1", tmp_path / "mlp" / "seed0"]
    rows = [line for line in text.splitlines() if line.startswith(("| lstm |", "| mlp |"))]
    assert [row.split(" | ")[:2] for row in rows] == [
        ["| lstm", "0"],
        ["| lstm", "1"],
        ["| mlp", "0"],
    ]
    assert runs.code_summary(folders) in text.splitlines()
    assert (tmp_path / "results.md").read_text() == text
    assert "lstm, median of 2 seeds" in text and "mlp, 1 seed" in text
