"""The landing page's quickstart runs as written and prints what it promises."""

from __future__ import annotations

import pathlib
import runpy

QUICKSTART = pathlib.Path(__file__).parent.parent / "docs" / "quickstart.py"


def test_quickstart_runs(capsys):
    namespace = runpy.run_path(str(QUICKSTART), run_name="__main__")
    assert tuple(namespace["batch"].shape) == (4, 24)
    assert namespace["batch"]["is_init"][:, 0].all()
    assert tuple(namespace["rollout"]["advantage"].shape) == (16, 64, 1)
    assert "torch.Size([4, 24])" in capsys.readouterr().out
