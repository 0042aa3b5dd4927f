"""``r2d2 --distributed``: the Ape-X layout of the R2D2 example on a local Ray with 2 CPUs.

A ``--quick`` run through the entry point collects with a Ray worker, learns from the replay
service with checked samples, logs every component's rate, writes no colour codes, and leaves a
checkpoint (networks plus ``rb.dumps``) that ``--resume`` continues from. Arguments are refused
with messages that name them, before Ray does any work. The pieces the learner uses to read the
actors (exploration ladder, returns since the last read, rates) are checked against
hand-computed values.
"""

from __future__ import annotations

import argparse
import math
import shutil

import pytest
import torch

from torchrl_ext.examples import __main__ as entry
from torchrl_ext.examples import _common, _run_folder
from torchrl_ext.examples import r2d2_cartpole as single

ray = pytest.importorskip("ray", reason="needs ray (pip install 'torchrl_ext[ray]')")

from torchrl_ext.examples import r2d2_distributed as dist  # noqa: E402

RATES = ("worker0_frames_per_s", "worker1_frames_per_s", "inserts_per_s", "samples_per_s",
         "updates_per_s")  # fmt: skip


@pytest.fixture(scope="module")
def local_ray():
    """A local Ray with 2 CPUs for the module; the example uses it as it is."""
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield ray
    ray.shutdown()


def _run(*argv: str):
    threads = torch.get_num_threads()
    try:
        return entry.main(["r2d2", "--distributed", *argv, "--no-progress"])
    finally:
        torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def quick(local_ray, tmp_path_factory):
    """One ``--quick`` run with a checkpoint on the way, its output captured."""
    out = tmp_path_factory.mktemp("quick")
    results = _run("--quick", "--out", str(out), "--save-every", "1024")
    return out / "seed0", results


class TestQuick:
    """``--quick`` through the entry point: checked updates, per-component rates in the log."""

    def test_runs_checked_updates(self, quick):
        out, (result,) = quick
        assert result.out == out and result.frames >= result.config.frames
        updates = _run_folder.read_scalars(out)["updates"]
        assert updates[-1][1] >= dist.QUICK_UPDATES
        losses = [v for _, v in _run_folder.read_scalars(out)["loss"] if not math.isnan(v)]
        assert losses and all(math.isfinite(v) for v in losses)
        assert 1.0 <= result.final_eval <= 500.0

    def test_logs_every_rate(self, quick):
        out, _ = quick
        scalars = _run_folder.read_scalars(out)
        for name in RATES:
            assert name in scalars, name
            assert all(v >= 0 for _, v in scalars[name]), name
        assert max(v for _, v in scalars["worker0_frames_per_s"]) > 0
        assert max(v for _, v in scalars["inserts_per_s"]) > 0
        assert max(v for _, v in scalars["updates_per_s"]) > 0
        rates = dict(scalars["updates_per_s"])
        samples = dict(scalars["samples_per_s"])
        batch = dist.QUICK["batch_size"]
        assert all(math.isclose(samples[s], batch * rates[s]) for s in rates)

    def test_checkpoint_and_replay(self, quick):
        out, (result,) = quick
        folder = _run_folder.find_checkpoint(out)  # checked against its manifest
        state = _run_folder.load_checkpoint(folder)
        assert state["counters"]["frames"] == result.frames
        assert state["counters"]["updates"] == _run_folder.read_scalars(out)["updates"][-1][1]
        assert state["layout"]["workers"] == 2  # the default on a Ray with 2 CPUs
        assert (folder / "replay").is_dir() and any((folder / "replay").iterdir())


class TestQuickAggregate:
    """``python -m torchrl_ext.examples --quick`` runs the distributed quick check too."""

    def test_listed(self, monkeypatch):
        calls = []
        monkeypatch.setattr(entry, "run", lambda name, argv: calls.append((name, argv)))
        seconds = entry.run_quick()
        assert ("r2d2", ["--distributed", "--quick", "--no-progress"]) in calls
        assert ("r2d2", ["--quick", "--no-progress"]) in calls
        assert "r2d2 --distributed" in seconds
        assert len(calls) == len(seconds) == len(entry.QUICK_RUNS)


class TestResume:
    """``--resume DIR`` reloads the learner, its counters and the replay, and goes on; what it
    prints carries no colour codes when it does not go to a terminal."""

    def test_resume_continues(self, quick, tmp_path, capfd):
        out, _ = quick
        run = tmp_path / "seed0"
        shutil.copytree(out, run)
        state = _run_folder.load_checkpoint(_run_folder.find_checkpoint(run))
        saved = state["counters"]
        frames = saved["frames"] + 1024  # a longer budget to go on with
        (resumed,) = _run("--resume", str(run), "--frames", str(frames))
        assert resumed.config == single.Config(**{**state["config"], "frames": frames})
        assert resumed.frames >= saved["frames"] + 1024
        updates = _run_folder.read_scalars(run)["updates"]
        assert [s for s, _ in updates] == sorted(s for s, _ in updates)
        assert updates[-1][1] > saved["updates"]  # the learner went on from its count
        printed = capfd.readouterr()
        assert "r2d2 --distributed seed 0" in printed.out
        assert "\x1b[" not in printed.out + printed.err


class TestArguments:
    """Bad arguments stop the run with a message naming them, before Ray does any work."""

    @pytest.mark.parametrize(
        "argv, match",
        [
            (["--workers", "0"], "workers must be >= 1, got workers=0"),
            (["--address", "10.0.0.1"], "--address must be 'auto', HOST:PORT"),
            (["--address", "host:99999"], "--address"),
        ],
    )
    def test_refused(self, argv, match, monkeypatch):
        def start_ray(*args):
            raise AssertionError("Ray started before the arguments were checked")

        monkeypatch.setattr(dist, "start_ray", start_ray)
        with pytest.raises(SystemExit, match=match):
            _run("--quick", *argv)

    def test_more_workers_than_cpus(self, local_ray):
        with pytest.raises(SystemExit, match="--workers 3: the Ray cluster has 2 CPUs"):
            _run("--quick", "--workers", "3")

    @pytest.mark.parametrize("option", [["--workers", "2"], ["--address", "auto"]])
    def test_needs_distributed(self, option, capsys):
        with pytest.raises(SystemExit) as exit_info:
            entry.main(["r2d2", *option])
        assert exit_info.value.code == 2
        assert f"r2d2: {' '.join(option)} needs --distributed" in capsys.readouterr().err

    def test_default_workers(self):
        assert [dist.default_workers(c) for c in (0.0, 1.0, 2.0, 64.0)] == [1, 1, 2, 2]

    def test_parser_defaults(self):
        args = entry.make_parser().parse_args(["r2d2"])
        assert (args.distributed, args.workers, args.address) == (False, None, None)
        args = entry.make_parser().parse_args(
            ["r2d2", "--distributed", "--workers", "2", "--address", "10.0.0.1:6379"]
        )
        assert (args.distributed, args.workers, args.address) == (True, 2, "10.0.0.1:6379")

    @pytest.mark.parametrize(
        "text", ["auto", "10.0.0.1:6379", "ray://head.cluster:10001", "localhost:1"]
    )
    def test_address_accepted(self, text):
        assert dist.parse_address(text) == text

    @pytest.mark.parametrize(
        "text", ["", "10.0.0.1", ":6379", "head:", "head:port", "head:0", "ray://head"]
    )
    def test_address_refused(self, text):
        with pytest.raises(argparse.ArgumentTypeError, match="--address must be"):
            dist.parse_address(text)

    def test_layout_checks(self):
        with pytest.raises(TypeError, match="workers must be an int"):
            dist.Layout(workers=1.5)
        with pytest.raises(ValueError, match="weight_period must be >= 1"):
            dist.Layout(weight_period=0)
        with pytest.raises(ValueError, match="address must be a Ray address"):
            dist.Layout(address="")


class TestExplorationLadder:
    """Worker ``i`` holds lanes ``i * n`` to ``(i + 1) * n - 1`` of the example's ladder."""

    def test_hand_computed(self):
        cfg = single.Config(num_envs=2, eps_end=0.0, eps_lanes=0.1)
        eps = dist.lane_epsilons(cfg, workers=2, frames=10**9).double()
        # 0.1 ** (1 + 2 j / 3) for j = 0..3
        expected = torch.tensor([[0.1, 0.1 ** (5 / 3)], [0.1 ** (7 / 3), 0.001]])
        torch.testing.assert_close(eps, expected.double(), rtol=1e-6, atol=0)

    def test_matches_single_process_over_all_envs(self):
        cfg = single.Config(num_envs=4)
        every = single.Config(num_envs=12)
        for frames in (0, 30_000, 10**6):
            got = dist.lane_epsilons(cfg, workers=3, frames=frames).flatten()
            torch.testing.assert_close(got, single.epsilons(every, frames))

    def test_decays_from_one(self):
        cfg = single.Config(num_envs=3)
        assert bool((dist.lane_epsilons(cfg, 2, frames=0) == 1).all())
        late = dist.lane_epsilons(cfg, 2, frames=cfg.eps_frames)
        assert bool((late[0, :-1] > late[0, 1:]).all()) and bool((late[0] > late[1]).all())


def _snapshot(window, *hooks):
    """A snapshot of workers whose hooks hold ``(count, recent)``, each a fresh object as a read
    from Ray gives."""
    made = []
    for count, recent in hooks:
        hook = dist.EpisodeReturns(window)
        hook.count = count
        hook.recent.extend(recent)
        made.append(hook)
    return dist.Snapshot(made, inserted=0, time=0.0)


class TestReturnsSince:
    """The returns the workers finished between two snapshots, worker by worker, none counted
    twice; they feed the example's return window."""

    def test_merges_new_episodes_only(self):
        start = _snapshot(3, (0, []), (0, []))
        first = _snapshot(3, (2, [10.0, 20.0]), (0, []))
        second = _snapshot(3, (5, [30.0, 40.0, 50.0]), (1, [7.0]))  # all new ones still kept
        assert first.returns_since(start) == [10.0, 20.0]
        assert second.returns_since(first) == [30.0, 40.0, 50.0, 7.0]
        assert second.returns_since(second) == []
        window = _common.ReturnWindow(4, target=31.0)
        assert window.update(first.returns_since(start), frames=64, seconds=1.0) == 15.0
        assert window.hit is None  # not full
        assert window.update(second.returns_since(first), frames=128, seconds=2.0) == 31.75
        assert list(window.recent) == [30.0, 40.0, 50.0, 7.0] and window.hit == (128, 2.0)

    def test_more_new_episodes_than_the_hook_kept(self):
        start, later = _snapshot(2, (0, [])), _snapshot(2, (6, [5.0, 6.0]))
        assert later.returns_since(start) == [5.0, 6.0]


class TestRates:
    """Rates are differences of the counters over the time between two snapshots."""

    def test_two_workers(self):
        a, b = dist.EpisodeReturns(4), dist.EpisodeReturns(4)
        rates = dist.Rates(dist.Snapshot([a, b], inserted=100, time=10.0), updates=5)
        a.frames, b.frames = 400, 200
        got = rates.step(dist.Snapshot([a, b], inserted=700, time=12.0), 25, batch_size=8)
        assert got == {
            "worker0_frames_per_s": 200.0, "worker1_frames_per_s": 100.0,
            "inserts_per_s": 300.0, "samples_per_s": 80.0, "updates_per_s": 10.0,
        }  # fmt: skip
        got = rates.step(dist.Snapshot([a, b], inserted=700, time=13.0), 25, batch_size=8)
        assert set(got.values()) == {0.0}
