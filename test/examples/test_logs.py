"""The examples' logs: torchrl's log lines carry no ANSI colour codes when written to a file."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

SCRIPT = """
import sys
from torchrl import torchrl_logger
if sys.argv[1] == "plain":
    from torchrl_ext.examples._common import plain_torchrl_logs
    plain_torchrl_logs()
torchrl_logger.info("a line from torchrl")
"""


def _log_to_file(tmp_path: Path, mode: str) -> str:
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("RL_LOGGING_LEVEL", "TORCHRL_CONSOLE_STREAM")
    }
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    log = tmp_path / f"{mode}.log"
    with log.open("w") as f:
        subprocess.run(
            [sys.executable, "-c", SCRIPT, mode],
            stdout=f,
            stderr=subprocess.STDOUT,
            cwd=tmp_path,
            env=env,
            check=True,
            timeout=120,
        )
    return log.read_text()


class TestPlainTorchrlLogs:
    """``plain_torchrl_logs`` (called by every example's setup) drops torchrl's colour codes on a
    non-terminal stream and keeps the line; torchrl alone writes them (the control).
    """

    @pytest.mark.parametrize("mode, coloured", [("plain", False), ("torchrl", True)])
    def test_log_file(self, tmp_path, mode, coloured):
        text = _log_to_file(tmp_path, mode)
        assert "[torchrl][INFO]" in text and "a line from torchrl" in text
        assert ("\x1b[" in text) is coloured
