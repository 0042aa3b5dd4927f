"""Smoke test and contracts of the POPGym side-by-side benchmark (``popgym_side_by_side.py``).

The contract: sb3's model takes the POPGym demo's settings unchanged and refuses those it does
not implement; POPGym's env reaches sb3 with the demo's inputs (one-hot suit and previous
action); ``--quick`` runs each pipeline in a fresh process and prints its row with finite
numbers. sb3-contrib's run is skipped with a reason when it or popgym is not installed.
"""

from __future__ import annotations

import dataclasses
import math

import popgym_side_by_side
import pytest
import torch


def _options(*argv: str):
    return popgym_side_by_side.parse(list(argv))


def _rows(text: str, pipeline: str) -> list[list[str]]:
    """The cells of the per-run table's rows of ``pipeline``."""
    runs = text.split("Runs:")[1]
    rows = [line.strip("|").split("|") for line in runs.splitlines() if line.startswith("| ")]
    return [[cell.strip() for cell in row] for row in rows if row[0].strip() == pipeline]


def _check_quick(pipeline: str) -> str:
    text = popgym_side_by_side.main(["--quick", "--seeds", "0", "--pipelines", pipeline])
    (row,) = _rows(text, pipeline)
    fps, mmer, final, frames, seconds = (float(cell) for cell in row[3:])
    assert all(math.isfinite(v) for v in (fps, mmer, final, seconds)), row
    assert fps > 0 and frames == 3 * 8 * 32 and -1.0 <= mmer <= 1.0, row
    return text


def test_baseline_args_are_the_demo_settings():
    pytest.importorskip("sb3_contrib", reason="sb3-contrib not installed (the `test` extra)")
    pytest.importorskip("popgym", reason="popgym not installed (the `test` extra)")
    from _ppo_baselines.sb3_popgym import Args

    args = popgym_side_by_side.demo_args(_options(), seed=0, memory="lstm")
    assert popgym_side_by_side.baseline_args(args) == Args()
    with pytest.raises(ValueError, match="memory, shared_memory"):
        popgym_side_by_side.baseline_args(
            dataclasses.replace(args, memory="gru", shared_memory=True)
        )


def test_popgym_env_gives_the_demo_inputs():
    pytest.importorskip("sb3_contrib", reason="sb3-contrib not installed (the `test` extra)")
    pytest.importorskip("popgym", reason="popgym not installed (the `test` extra)")
    from _ppo_baselines.sb3_popgym import env_maker

    env = env_maker("RepeatPrevious", "easy")()
    obs, _ = env.reset(seed=0)
    assert env.observation_space.shape == (8,) and obs[:4].sum() == 1 and obs[4] == 1
    obs, *_ = env.step(2)
    assert obs[:4].sum() == 1 and obs[4:].tolist() == [0, 0, 1, 0]  # the suit, then action 2


def test_pipeline_memories():
    memory = popgym_side_by_side.pipeline_memory
    assert (memory("ours", "gru"), memory("ours-ffm", "gru"), memory("sb3", "gru")) == (
        "gru",
        "ffm",
        "lstm",
    )


def test_quick_ours():
    text = _check_quick("ours")
    floor = [line for line in text.splitlines() if line.startswith("| floor |")]
    over = [line for line in text.splitlines() if line.startswith("| ours over the floor |")]
    total = float(floor[0].split("|")[2])
    sections = dict(cell.strip().rsplit(" ", 1) for cell in floor[0].split("|")[3].split(";"))
    assert sorted(sections) == ["collect", "gae", "update"], floor
    assert math.isclose(total, sum(float(v) for v in sections.values()), abs_tol=0.2), floor
    assert float(over[0].split("|")[2]) > 0, over


def test_floor_section_gives_each_pipeline_over_the_floor():
    runs = [
        {"pipeline": "ours", "seconds": 2.0, "frames": 20_000},  # 100 us a frame
        {"pipeline": "ours", "seconds": 4.0, "frames": 20_000},  # 200
        {"pipeline": "ours", "seconds": 3.0, "frames": 20_000},  # 150: the median
        {"pipeline": "sb3", "seconds": 10.0, "frames": 20_000},  # 500
    ]
    floors = [
        {"memory": "lstm", "timings": {"collect": 10.0, "gae": 2.0, "update": 38.0}},
        {"memory": "lstm", "timings": {"collect": 20.0, "gae": 2.0, "update": 28.0}},
    ]
    text = popgym_side_by_side.floor_section(runs, floors)
    lines = [line for line in text.splitlines() if line.startswith("| ")]
    assert lines[1:] == [
        "| floor | 50.0 | collect 15.0; gae 2.0; update 33.0 |",
        "| ours over the floor | 3.00 | |",
        "| sb3 over the floor | 10.00 | |",
    ]
    assert popgym_side_by_side.floor_section(runs, []) == ""


def test_plain_layers_are_the_demo_networks():
    import ppo_popgym
    from _ppo_baselines.network_floor import plain_layers, run_layers
    from torch import nn

    args = popgym_side_by_side.demo_args(_options("--quick"), seed=0, memory="lstm")
    actor, _ = ppo_popgym.make_agent(args)
    layers = plain_layers(actor.module[0])
    assert [type(layer) for layer in layers] == [nn.LSTM, nn.Sequential]
    assert run_layers(layers, torch.zeros(2, 3, 8)).shape == (2, 3, 4)  # RepeatPrevious: 4 suits
    ffm = popgym_side_by_side.demo_args(_options("--quick"), seed=0, memory="ffm")
    with pytest.raises(ValueError, match="no plain-torch floor for FFMModule"):
        plain_layers(ppo_popgym.make_agent(ffm)[1])


def test_quick_sb3():
    pytest.importorskip("sb3_contrib", reason="sb3-contrib not installed (the `test` extra)")
    pytest.importorskip("popgym", reason="popgym not installed (the `test` extra)")
    _check_quick("sb3")
