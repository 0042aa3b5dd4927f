"""``examples/r2d2_distributed.py``: the Ape-X layout of R2D2 on a local Ray with 2 CPUs.

A ``--quick`` run collects with two Ray workers, learns from the replay service with checked
samples, logs every component's rate and leaves a checkpoint (networks plus the service's
``rb.dumps``) that ``--resume`` continues from. Arguments are refused in one line before Ray does
any work, and so are crafted checkpoints and replay folders. The pieces the learner reads the
actors with (exploration ladder, returns since the last read, rates) are checked against
hand-computed values. Every call to a Ray actor is bounded by ``TIMEOUT``.
"""

from __future__ import annotations

import hashlib
import json
import math
import shutil
from pathlib import Path

import pipelines
import pytest
import runs
import torch
from malicious_files import REFUSED, pickle_file, torch_file
from tensordict import TensorDict
from torchrl.data import LazyTensorStorage

ray = pytest.importorskip("ray", reason="needs ray (pip install ray)")

import r2d2_distributed as dist  # noqa: E402

RATES = ("worker0_frames_per_s", "worker1_frames_per_s", "inserts_per_s", "samples_per_s",
         "updates_per_s")  # fmt: skip


def seal(folder: Path) -> Path:
    """Lists every file of a checkpoint folder in its manifest, as a save would."""
    files = sorted(p for p in folder.rglob("*") if p.is_file() and p.name != runs.MANIFEST)
    digests = {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
               for p in files}  # fmt: skip
    (folder / runs.MANIFEST).write_text(json.dumps({"files": digests}))
    return folder


@pytest.fixture(scope="module")
def local_ray():
    """A local Ray with 2 CPUs for the module; the pipeline uses it as it is."""
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield ray
    ray.shutdown()


@pytest.fixture(scope="module")
def quick(local_ray, tmp_path_factory):
    """One ``--quick`` run with a checkpoint on the way."""
    out = tmp_path_factory.mktemp("quick")
    (result,) = pipelines.run("r2d2_distributed", "--quick", "--out", str(out))
    return out / "seed0", result


@pytest.fixture
def no_ray(monkeypatch):
    """Fails a test if the pipeline starts Ray or checks its CPUs."""

    def fail(*args):
        raise AssertionError("Ray was used before the arguments were checked")

    monkeypatch.setattr(dist, "start_ray", fail)
    monkeypatch.setattr(dist, "check_cpus", fail)


class TestQuick:
    """``--quick``: checked updates, per-component rates in the log, a checkpoint and replay."""

    def test_runs_checked_updates(self, quick):
        out, result = quick
        assert result.out == out and result.frames >= dist.QUICK["frames"]
        assert str(result).startswith("r2d2_distributed seed 0: mean return never reached 400")
        logged = runs.read_scalars(out)
        assert logged["updates"][-1][1] >= dist.QUICK_UPDATES
        losses = [v for _, v in logged["loss"] if not math.isnan(v)]
        assert losses and all(math.isfinite(v) for v in losses)
        assert 1.0 <= result.final_eval <= 500.0
        assert (out / "learning_curve.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"

    def test_logs_every_rate(self, quick):
        scalars = runs.read_scalars(quick[0])
        for name in RATES:
            assert name in scalars, name
            assert all(v >= 0 for _, v in scalars[name]), name
        for name in ("worker0_frames_per_s", "inserts_per_s", "updates_per_s"):
            assert max(v for _, v in scalars[name]) > 0, name
        updates, samples = dict(scalars["updates_per_s"]), dict(scalars["samples_per_s"])
        batch = dist.QUICK["batch_size"]
        assert all(math.isclose(samples[s], batch * updates[s]) for s in updates)

    def test_checkpoint_and_replay(self, quick):
        out, result = quick
        folder = runs.find_checkpoint(out)
        state = runs.load_checkpoint(folder)
        assert state["counters"]["frames"] == result.frames and state["counters"]["finished"]
        assert state["counters"]["updates"] == runs.read_scalars(out)["updates"][-1][1]
        assert state["config"]["workers"] == 2
        assert (folder / "replay").is_dir() and any((folder / "replay").iterdir())

    def test_loaded_policy_acts(self, quick):
        policy, args, module = runs.load_policy(quick[0])
        assert module is dist and not policy.training
        rollout = dist.acting_env(args, 2, 7, "cpu").rollout(5, policy)
        assert rollout["action"].shape[:2] == (2, 5)


class TestResume:
    """``--resume DIR`` reloads the learner, its counters and the replay, and goes on; what it
    prints carries no colour codes when it does not go to a terminal."""

    def test_resume_continues(self, quick, tmp_path, capfd):
        run = tmp_path / "seed0"
        shutil.copytree(quick[0], run)
        saved = runs.load_checkpoint(runs.find_checkpoint(run))["counters"]
        frames = saved["frames"] + 1024
        (resumed,) = pipelines.run(
            "r2d2_distributed", "--resume", str(run), "--frames", str(frames)
        )
        assert resumed.frames >= frames
        assert runs.read_config(run)["config"]["frames"] == frames
        updates = runs.read_scalars(run)["updates"]
        assert [s for s, _ in updates] == sorted(s for s, _ in updates)
        assert updates[-1][1] > saved["updates"]  # the learner went on from its count
        printed = capfd.readouterr()
        assert "r2d2_distributed seed 0: " in printed.out
        assert "\x1b[" not in printed.out + printed.err

    def test_more_workers_than_cpus(self, local_ray, tmp_path):
        with pytest.raises(SystemExit, match="--workers 3: the Ray cluster has 2 CPUs"):
            pipelines.run("r2d2_distributed", "--quick", "--workers", "3", "--out", str(tmp_path))


class TestRefusals:
    """Bad arguments, crafted checkpoints and crafted replay folders: refused before Ray."""

    @pytest.mark.parametrize(
        ("argv", "match"),
        [
            (["--workers", "0"], "workers must be an integer >= 1, got workers=0"),
            (["--address", "10.0.0.1"], "address must be 'auto', HOST:PORT"),
            (["--address", "host:99999"], "got address='host:99999'"),
            (["--weight-period", "0"], "weight_period"),
            (["--stats-period", "0"], "stats_period must be a finite number > 0"),
            (["--frames-per-update", "0"], "frames_per_update"),
            (["--capacity", "10"], "capacity must hold at least one window"),
        ],
    )
    def test_bad_arguments_in_one_line(self, no_ray, tmp_path, capsys, argv, match):
        with pytest.raises(SystemExit) as stop:
            pipelines.run("r2d2_distributed", "--quick", *argv, "--out", str(tmp_path))
        assert stop.value.code == 2
        err = capsys.readouterr().err
        assert match in err and len(err.strip().splitlines()) == 1, err
        assert not any(tmp_path.iterdir())

    @pytest.mark.parametrize(
        "text", ["auto", "10.0.0.1:6379", "ray://head.cluster:10001", "localhost:1", ""]
    )
    def test_address_accepted(self, text):
        assert dist.Args(address=text).address == text

    @pytest.mark.parametrize(
        "text", ["10.0.0.1", ":6379", "head:", "head:port", "head:0", "ray://head"]
    )
    def test_address_refused(self, text):
        with pytest.raises(ValueError, match="address must be"):
            dist.Args(address=text)

    def test_crafted_checkpoint(self, no_ray, quick, tmp_path, marker, capsys):
        run = tmp_path / "seed0"
        shutil.copytree(quick[0], run)
        seal(torch_file(runs.find_checkpoint(run) / runs.STATE, marker).parent)
        with pytest.raises(SystemExit) as stop:
            pipelines.run("r2d2_distributed", "--resume", str(run), "--frames", "8192")
        assert stop.value.code == 2 and REFUSED in capsys.readouterr().err

    def test_crafted_replay_file(self, no_ray, quick, tmp_path, marker):
        run = tmp_path / "seed0"
        shutil.copytree(quick[0], run)
        crafted = pickle_file(runs.find_checkpoint(run) / "replay" / "prefetch.pkl", marker)
        seal(crafted.parents[1])
        with pytest.raises(ValueError, match=f"{crafted}.*{REFUSED}"):
            pipelines.run("r2d2_distributed", "--resume", str(run), "--frames", "8192")


def _service():
    from torchrl_ext.distributed import PackedSampleReplayBuffer

    return PackedSampleReplayBuffer(storage=LazyTensorStorage(16), batch_size=4)


class TestServiceLoads:
    """The replay service checks the folder where it reads it: ``PackedSampleReplayBuffer.loads``
    runs in the service's process (on another node, the learner's check cannot reach it)."""

    def test_round_trip(self, tmp_path):
        rb = _service()
        rb.extend(TensorDict({"obs": torch.arange(6.0)}, [6]))
        rb.dumps(tmp_path / "replay")
        restored = _service()
        restored.loads(tmp_path / "replay")
        assert restored[:]["obs"].tolist() == rb[:]["obs"].tolist()

    def test_crafted_prefetch_file_is_refused(self, tmp_path, marker):
        rb = _service()
        rb.extend(TensorDict({"obs": torch.arange(6.0)}, [6]))
        rb.dumps(tmp_path / "replay")
        crafted = pickle_file(tmp_path / "replay" / "prefetch.pkl", marker)
        restored = _service()
        with pytest.raises(ValueError, match=f"{crafted}.*{REFUSED}"):
            restored.loads(tmp_path / "replay")
        assert len(restored) == 0


class TestExplorationLadder:
    """Worker ``i`` holds lanes ``i * n`` to ``(i + 1) * n - 1`` of one ladder over all envs."""

    def test_hand_computed(self):
        args = dist.Args(workers=2, num_envs=2, eps_end=0.0, eps_lanes=0.1)
        eps = dist.worker_epsilons(args, frames=10**9).double()
        # 0.1 ** (1 + 2 j / 3) for j = 0..3
        expected = torch.tensor([[0.1, 0.1 ** (5 / 3)], [0.1 ** (7 / 3), 0.001]])
        torch.testing.assert_close(eps, expected.double(), rtol=1e-6, atol=0)

    def test_is_one_ladder_over_all_envs(self):
        args = dist.Args(workers=3, num_envs=4)
        for frames in (0, 30_000, 10**6):
            got = dist.worker_epsilons(args, frames).flatten()
            torch.testing.assert_close(got, dist.epsilons(args, 12, frames))

    def test_decays_from_one(self):
        args = dist.Args(workers=2, num_envs=3)
        assert bool((dist.worker_epsilons(args, frames=0) == 1).all())
        late = dist.worker_epsilons(args, frames=args.eps_frames)
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
    twice; they feed the run's return window."""

    def test_merges_new_episodes_only(self):
        start = _snapshot(3, (0, []), (0, []))
        first = _snapshot(3, (2, [10.0, 20.0]), (0, []))
        second = _snapshot(3, (5, [30.0, 40.0, 50.0]), (1, [7.0]))  # all new ones still kept
        assert first.returns_since(start) == [10.0, 20.0]
        assert second.returns_since(first) == [30.0, 40.0, 50.0, 7.0]
        assert second.returns_since(second) == []
        window = runs.ReturnWindow(4, target=31.0, counters={})
        assert window.update(first.returns_since(start), frames=64, seconds=1.0) == 15.0
        assert window.hit is None  # not full
        assert window.update(second.returns_since(first), frames=128, seconds=2.0) == 31.75
        assert window.counters["recent"] == [30.0, 40.0, 50.0, 7.0] and window.hit == (128, 2.0)

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

    def test_pacing(self):
        args = dist.Args(warmup_frames=100, batch_size=1)
        full, empty = dist.Snapshot([], 10**6, 0.0), dist.Snapshot([], 0, 0.0)
        assert [dist.may_update(args, 100 + 64 * k, 2, full) for k in (0, 1, 2)] == [
            False, False, True,
        ]  # fmt: skip
        assert not dist.may_update(args, 99, 0, full) and not dist.may_update(args, 10**6, 0, empty)
