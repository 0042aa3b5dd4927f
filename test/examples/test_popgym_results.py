"""``examples/popgym_results.py``: trains what its folder lacks, reads finished runs back,
resumes unfinished ones, and refuses a bad command line in one line before training."""

from __future__ import annotations

import json

import pipelines
import popgym_results
import pytest
import runs
import torch


def _table(*argv: str) -> str:
    """``python examples/popgym_results.py ARGV --no-progress``, in this process; the table."""
    threads = torch.get_num_threads()
    try:
        return popgym_results.main([*argv, "--no-progress"])
    finally:
        torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def table(tmp_path_factory):
    """The quick table of seeds 0 and 1: its folder, command line and text."""
    out = tmp_path_factory.mktemp("table")
    argv = ["--quick", "--seeds", "0", "1", "--out", str(out)]
    return out, argv, _table(*argv)


def test_trains_the_quick_rows_into_the_old_layout(table):
    out, _, text = table
    folders = sorted(p.relative_to(out).as_posix() for p in out.glob("*/seed*"))
    assert folders == [
        "MultiarmedBandit-easy/seed0",
        "MultiarmedBandit-easy/seed1",
        "RepeatPrevious-easy/seed0",
        "RepeatPrevious-easy/seed1",
    ]
    rows = [line for line in text.splitlines() if line.startswith("| RepeatPrevious")]
    assert len(rows) == 1 and "| 1.000 ± 0.000 |" in rows[0]
    assert (out / "popgym_results.md").read_text() == text
    assert runs.code_summary(out.glob("*/seed*")) in text.splitlines()
    assert (out / "popgym_curves.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_reads_a_run_back_as_it_logged_it(table):
    out, _, _ = table
    folder = out / "RepeatPrevious-easy" / "seed1"
    result = popgym_results.read_run(folder)
    logged = runs.read_scalars(folder)
    assert result.frames == 768 and result.name == "RepeatPrevious easy seed 1"
    assert result.best == logged["best_mean_return"][-1][1]
    assert result.final_eval == logged["final_eval"][-1][1]
    config = json.loads((folder / "config.json").read_text())
    assert config["pipeline"] == "ppo_popgym" and config["config"]["seed"] == 1
    _, args, _ = runs.load_policy(folder)
    assert args.env == "RepeatPrevious"


def test_a_second_call_trains_nothing(table):
    out, argv, text = table
    before = {p: p.stat().st_mtime_ns for p in out.rglob("*") if p.is_file() and "seed" in str(p)}
    assert _table(*argv) == text
    after = {p: p.stat().st_mtime_ns for p in out.rglob("*") if p.is_file() and "seed" in str(p)}
    assert after == before


def test_medium_rows_get_their_own_folders_table_and_figures(table, tmp_path):
    """``--difficulty medium`` trains Medium runs beside the Easy ones, into its own table."""
    out = table[0]
    argv = ["--quick", "--seeds", "0", "--envs", "RepeatPrevious", "--difficulty", "medium"]
    text = _table(*argv, "--out", str(out))
    folder = out / "RepeatPrevious-medium" / "seed0"
    assert runs.read_config(folder)["config"]["difficulty"] == "medium"
    assert popgym_results.read_run(folder).name == "RepeatPrevious medium seed 0"
    row = [line for line in text.splitlines() if line.startswith("| RepeatPrevious")]
    assert row[0].startswith("| RepeatPrevious | medium | -0.315 ± 0.017 | – | FFM 64 |"), row
    assert (out / "popgym_results_medium.md").read_text() == text
    assert (out / "popgym_curves_medium.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert (out / "popgym_results.md").read_text() == table[2], "the Easy table is kept"


def test_an_unfinished_run_is_resumed(table, tmp_path, monkeypatch):
    """A run killed after a checkpoint is resumed, to the curve of a run left alone."""
    row = tmp_path / "RepeatPrevious-easy"
    folder = pipelines.interrupted(monkeypatch, "ppo_popgym", row, 256, 512)
    assert not popgym_results.is_finished(folder)
    _table("--quick", "--seeds", "0", "--envs", "RepeatPrevious", "--out", str(tmp_path))
    assert popgym_results.is_finished(folder)
    reference = table[0] / "RepeatPrevious-easy" / "seed0"
    text = {k: [(s, repr(v)) for s, v in rows] for k, rows in pipelines.scalars(folder).items()}
    expected = pipelines.scalars(reference)
    assert text == {k: [(s, repr(v)) for s, v in rows] for k, rows in expected.items()}


def test_a_run_stopped_before_its_first_checkpoint_starts_again(tmp_path):
    _plant_run(tmp_path, "RepeatPrevious")
    folder = tmp_path / "RepeatPrevious-easy" / "seed0"
    _table("--quick", "--seeds", "0", "--envs", "RepeatPrevious", "--out", str(tmp_path))
    assert popgym_results.is_finished(folder)


def _plant_run(tmp_path, env: str) -> None:
    """A run folder of ``env`` where the table's RepeatPrevious seed 0 goes."""
    folder = tmp_path / "RepeatPrevious-easy" / "seed0"
    folder.mkdir(parents=True)
    config = {"env": env, "difficulty": "easy", "seed": 0}
    (folder / "config.json").write_text(json.dumps({"pipeline": "ppo_popgym", "config": config}))


@pytest.mark.parametrize(
    ("argv", "match"),
    [
        (["--seeds", "-1"], "--seeds must be distinct integers >= 0"),
        (["--seeds", "1", "1"], "--seeds must be distinct integers >= 0"),
        (["--envs", "Pong"], "argument --envs: invalid choice: 'Pong'"),
        (["--difficulty", "extreme"], "argument --difficulty: invalid choice: 'extreme'"),
        (["--envs", "Battleship"], "argument --envs: invalid choice: 'Battleship'"),
        (["--quick", "--envs", "RepeatFirst"], "--quick trains RepeatPrevious and Multiarmed"),
        (["--frames", "100"], "frames must be at least one batch"),
        (["--save-every", "-1"], "--save-every must be >= 0"),
        (["--plant", "HigherLower"], "holds a run of ('ppo_popgym', 'HigherLower', 'easy', 0)"),
    ],
)
def test_refuses_bad_arguments_in_one_line(tmp_path, capsys, argv, match):
    if argv[0] == "--plant":
        _plant_run(tmp_path, argv[1])
        argv = ["--quick", "--envs", "RepeatPrevious"]
    before = sorted(tmp_path.rglob("*"))
    with pytest.raises(SystemExit) as stop:
        _table(*argv, "--out", str(tmp_path))
    assert stop.value.code == 2
    err = capsys.readouterr().err
    assert match in err and len(err.strip().splitlines()) == 1, err
    assert sorted(tmp_path.rglob("*")) == before, "nothing is written before the checks"
