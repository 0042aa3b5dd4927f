"""The main-job entry point: ``python -m torchrl_ext.examples --quick`` runs all three pipelines."""

from __future__ import annotations

import pytest

from torchrl_ext.examples import __main__ as entry


def test_quick_runs_every_pipeline(capsys):
    seconds = entry.run_quick()
    assert set(seconds) == set(entry.QUICK_PIPELINES)
    assert all(value > 0 for value in seconds.values())
    out = capsys.readouterr().out
    assert out.count("quick run ok:") == len(entry.QUICK_PIPELINES)


def test_quick_takes_no_other_arguments():
    with pytest.raises(SystemExit, match="--seeds"):
        entry.main(["--quick", "--seeds", "0"])
