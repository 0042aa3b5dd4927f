"""Smoke test and contract of the collection benchmark (``collection_report.py``).

The contract: the two policy variants collect the same data, bit for bit (the step path of
``torchrl_ext.modules.LSTMModule`` is TorchRL's), so their timings compare like for like.
"""

from __future__ import annotations

import collection_report
import torch


def test_both_modules_collect_the_same_batches():
    batches = []
    for variant in ("torchrl_ext LSTMModule", "torchrl LSTMModule"):
        torch.manual_seed(0)
        collector = collection_report.make_collector(variant, num_envs=4)
        it = iter(collector)
        batches.append([next(it) for _ in range(2)])
        collector.shutdown()
    for ours, theirs in zip(*batches, strict=True):
        assert set(ours.keys(True, True)) == set(theirs.keys(True, True))
        for key in ours.keys(True, True):
            assert torch.equal(ours[key], theirs[key]), key


def test_quick_table():
    text = collection_report.main(
        ["--envs", "4", "--batches", "1", "--reps", "2", "--processes", "1"]
    )
    rows = [line for line in text.splitlines() if line.startswith("| 4 |")]
    assert len(rows) == 3, text
    assert rows[0].endswith("| — |") and not rows[1].endswith("| — |"), text
