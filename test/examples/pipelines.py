"""Running example pipelines from tests: in process, interrupted, resumed, copied.

:func:`run` calls a pipeline's command line in this process; :func:`assert_resumes_bitwise`
checks that a run killed between two checkpoints and resumed with ``--resume`` logs the same
curve, bit for bit, as the same run left alone.
"""

from __future__ import annotations

import importlib
from pathlib import Path
from types import ModuleType

import pytest
import runs
import torch


def load(name: str) -> ModuleType:
    """The example pipeline ``examples/<name>.py``."""
    return importlib.import_module(name)


def run(pipeline: ModuleType | str, *argv: str) -> list:
    """``python examples/<pipeline>.py ARGV --no-progress``, in this process; its results."""
    module = load(pipeline) if isinstance(pipeline, str) else pipeline
    threads = torch.get_num_threads()
    try:
        return runs.main(
            module.Args, module.train, argv=[*argv, "--no-progress"], quick=module.QUICK
        )
    finally:
        torch.set_num_threads(threads)


def scalars(folder: Path) -> dict[str, list[tuple[int, str]]]:
    """A run's CSV scalars without the wall-clock ones, values as text (so NaN equals NaN)."""
    logged = runs.read_scalars(folder)
    return {k: [(s, repr(v)) for s, v in rows] for k, rows in logged.items() if k != "seconds"}


class Killed(Exception):
    """Stands for a run killed after it logged a step but before its next checkpoint."""


def interrupted(monkeypatch, pipeline: str, out: Path, every: int, stop: int, *argv: str) -> Path:
    """The run folder of a ``--quick`` run killed after it logged frame ``stop``, before saving.

    ``every`` must make a checkpoint due at ``stop`` and at least once before it.
    """
    save = runs.Recorder.save

    def die_at_stop(self, *args, **kwargs):
        if self.frames == stop:
            raise Killed(stop)
        save(self, *args, **kwargs)

    monkeypatch.setattr(runs.Recorder, "save", die_at_stop)
    with pytest.raises(Killed):
        run(pipeline, "--quick", "--out", str(out), "--save-every", str(every), *argv)
    monkeypatch.setattr(runs.Recorder, "save", save)
    folder = out / "seed0"
    saved = runs.load_checkpoint(runs.find_checkpoint(folder))["counters"]["frames"]
    assert saved < stop, "the rows logged after the checkpoint must be logged again"
    return folder


def assert_resumes_bitwise(
    tmp_path: Path, monkeypatch, pipeline: str, every: int, stop: int, *argv: str
) -> None:
    """A ``--quick`` run killed after frame ``stop`` and resumed logs the uninterrupted curve.

    ``every``: frames between checkpoints; one must fall due at ``stop`` and one before it.
    """
    whole = tmp_path / "whole"
    run(pipeline, "--quick", "--out", str(whole), "--save-every", str(every), *argv)
    folder = interrupted(monkeypatch, pipeline, tmp_path / "cut", every, stop, *argv)
    run(pipeline, "--resume", str(folder))
    expected, got = scalars(whole / "seed0"), scalars(folder)
    assert got.keys() == expected.keys()
    for name in expected:
        assert got[name] == expected[name], name


def assert_refused(pipeline: str, argv: list[str], match: str, out: Path, capsys) -> None:
    """``pipeline ARGV --out OUT`` exits 2 with one line holding ``match``; nothing is written."""
    with pytest.raises(SystemExit) as stop:
        run(pipeline, *argv, "--out", str(out))
    assert stop.value.code == 2
    err = capsys.readouterr().err
    assert match in err and len(err.strip().splitlines()) == 1, err
    assert not out.exists() or not any(out.iterdir()), "nothing is written before the checks"
