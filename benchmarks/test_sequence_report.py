"""Smoke run of ``sequence_report.py`` on tiny buffers, so that the report script keeps working.

Its figures are not checked (that is what the report is for); the run checks that every
capacity, storage and path gets a row, in both timings.
"""

from __future__ import annotations

import contextlib
import io

import pytest
import torch
from _sequence_setup import CHUNK, PATHS, episodes
from sequence_report import Timing, measure_all, print_table


@pytest.mark.parametrize("timing", ["interleaved", "warm"])
def test_report_runs(timing):
    chunk = episodes(CHUNK, torch.Generator().manual_seed(1))
    rows = measure_all([1000, 2000], ["stock", "fast"], chunk, rounds=2, timing=Timing(timing))
    assert [(row[0], row[1]) for row in rows] == [
        (1000, "stock"),
        (1000, "fast"),
        (2000, "stock"),
        (2000, "fast"),
    ]
    for _, _, static, online, units in rows:
        assert set(static) == set(online) == set(PATHS)
        assert set(units["read"]) == {"stock", "fast"}
    text = io.StringIO()
    with contextlib.redirect_stdout(text):
        print_table(rows, timing)
    assert "ours online at 2000 / at 1000, fast storage" in text.getvalue()
