"""Smoke run of ``read_probe.py`` on tiny buffers, so that the probe keeps working.

Its figures are not checked (the probe is for reading them); the run checks that every capacity,
part and variant gets a median and that the summary names what each compiled path saves.
"""

from __future__ import annotations

import contextlib
import io

from read_probe import PARTS, measure, summary

from torchrl_ext import Sequence
from torchrl_ext.data._kernels import gather


def test_probe_runs_and_restores_the_switches():
    min_rows = gather.MIN_ROWS
    medians = measure([1000, 2000], rounds=2)
    assert set(medians) == {
        f"{c}/{part}/{name}"
        for c in (1000, 2000)
        for part, names in PARTS.items()
        for name in names
    }
    assert all(ms > 0 for ms in medians.values())
    assert Sequence.use_compiled and gather.MIN_ROWS == min_rows
    text = io.StringIO()
    with contextlib.redirect_stdout(text):
        summary([medians, medians], [1000, 2000])
    assert "read: compiled" in text.getvalue() and "saves" in text.getvalue()
