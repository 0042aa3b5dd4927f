"""The CPU dry run of benchmarks/gpu_check.py, so the GPU check stays runnable."""

import importlib.util
import re
import sys
from pathlib import Path

import pytest

_PATH = Path(__file__).resolve().parents[1] / "benchmarks" / "gpu_check.py"


@pytest.fixture(scope="module")
def gpu_check():
    # as when it runs as a script: its folder on sys.path, for the set-up modules beside it
    sys.path.insert(0, str(_PATH.parent))
    try:
        spec = importlib.util.spec_from_file_location("gpu_check", _PATH)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    finally:
        sys.path.remove(str(_PATH.parent))
    return module


def test_cpu_dry_run(gpu_check, capsys):
    code = gpu_check.main(["--device", "cpu", "--envs", "8", "--steps", "12"])
    table = capsys.readouterr().out
    assert code == 0, table
    rows = [
        line
        for line in table.splitlines()
        if line.startswith(
            ("env", "regen", "gae", "interop", "sequence", "tape", "memory", "throughput")
        )
    ]
    marks = dict(re.split(r"\s{2,}", line)[:2] for line in rows)
    assert len(rows) == 21, table
    assert {"tape", "memory lstm rows", "memory gru rows", "memory ffm rows"} <= marks.keys()
    assert [m for m in marks.values() if m == "NO"] == []
    assert all(m == "yes" for name, m in marks.items() if not name.startswith("throughput")), table


def test_a_failing_check_is_reported(gpu_check, capsys, monkeypatch):
    def broken(*args):
        raise RuntimeError("broken path")

    monkeypatch.setattr(gpu_check, "check_gae", broken)
    code = gpu_check.main(["--device", "cpu", "--envs", "8", "--steps", "4"])
    table = capsys.readouterr().out
    assert code == 1
    assert "gae scan" in table and "NO" in table and "broken path" in table
