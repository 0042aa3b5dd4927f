"""``examples/runs.py``: the command line, run folders, checkpoints, signals and resume.

A checkpoint folder is complete or absent (its manifest lists every file with its SHA-256 and it
is renamed into place last); a damaged checkpoint is refused naming the file. A run folder that
is or holds a link is refused, so nothing is written, trimmed or deleted through a link planted
in it; one process at a time works in a folder. A run stopped by SIGINT or SIGTERM saves and
exits with one line saying how to resume; one killed (SIGKILL) resumes from the checkpoint
before. Either way the resumed run logs the same curve, bit for bit, as a run left alone.
"""

from __future__ import annotations

import ast
import dataclasses
import fcntl
import importlib.metadata
import json
import os
import platform
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Literal

import malicious_files
import pipelines
import pytest
import runs
import torch

EXAMPLES = Path(runs.__file__).parent
#: The pipeline files: one self-contained file each (the rest are tools over them).
PIPELINES = sorted(
    p.stem
    for p in EXAMPLES.glob("*.py")
    if p.stem not in ("runs", "cartpole_results", "popgym_results", "animate")
)


@dataclasses.dataclass
class Args:
    """A small ``Args`` for parser tests."""

    seed: int = 0
    """the seed"""
    lr: float = 1e-3
    """learning
    rate"""
    kind: Literal["a", "b"] = "a"
    """which kind"""
    scale: tuple[float, float] = (1.0, 2.0)
    """two factors"""
    flag: bool = False
    """a switch"""
    frames: int = 8
    """frames"""

    def __post_init__(self):
        runs.check_fields(self, counts=["frames"], positive=["lr"])


class TestCommandLine:
    """Each ``Args`` field is an option documented by the string under it; a value the
    ``Args`` refuses is one line and exit 2 before anything is written."""

    def test_field_docs_are_the_strings_under_the_fields(self):
        docs = runs.field_docs(Args)
        assert docs["lr"] == "learning rate" and docs["scale"] == "two factors"

    def test_options_follow_the_types(self, tmp_path):
        argv = ["--lr", "0.5", "--kind", "b", "--scale", "3", "4", "--flag", "--out", str(tmp_path)]
        ((args, run),) = runs.parse(Args, argv)
        assert args == Args(lr=0.5, kind="b", scale=(3.0, 4.0), flag=True)
        assert run.out == tmp_path / "seed0" and not run.resume

    def test_seeds_make_one_run_each(self, tmp_path):
        parsed = runs.parse(Args, ["--seeds", "3", "1", "--out", str(tmp_path)])
        assert [(a.seed, r.out.name) for a, r in parsed] == [(3, "seed3"), (1, "seed1")]

    def test_quick_applies_its_changes_first(self, tmp_path):
        ((args, _),) = runs.parse(
            Args, ["--quick", "--frames", "9"], quick={"frames": 2, "lr": 2.0}
        )
        assert (args.frames, args.lr) == (9, 2.0)

    @pytest.mark.parametrize(
        ("argv", "match"),
        [
            (["--lr", "0"], "lr must be a finite number > 0, got lr=0.0"),
            (["--lr", "nan"], "lr must be a finite number > 0"),
            (["--frames", "0"], "frames must be an integer >= 1"),
            (["--kind", "c"], "invalid choice"),
            (["--seeds", "1", "1"], "--seeds must be distinct"),
            (["--seeds", "-1"], "--seeds must be distinct integers in [0, 2**31)"),
            (["--seeds", str(2**64 - 1)], "--seeds"),
            (["--save-every", "-1"], "--save-every must be >= 0"),
            (["--device", "cuda:7" if not torch.cuda.is_available() else "nope"], "--device"),
            (["--resume", "nowhere"], "--resume nowhere: no checkpoint in nowhere"),
        ],
    )
    def test_refusals_are_one_line(self, tmp_path, capsys, argv, match):
        with pytest.raises(SystemExit) as stop:
            out = [] if "--resume" in argv else ["--out", str(tmp_path / "out")]
            runs.parse(Args, [*argv, *out])
        assert stop.value.code == 2
        err = capsys.readouterr().err
        assert match in err and len(err.strip().splitlines()) == 1, err
        assert not (tmp_path / "out").exists()

    def test_unsupported_field_type_is_named(self):
        @dataclasses.dataclass
        class Bad:
            seed: int = 0
            table: dict = dataclasses.field(default_factory=dict)

        with pytest.raises(TypeError, match="table"):
            runs.make_parser(Bad, "")


def _state(value: float, frames: int = 1) -> dict:
    return {"counters": {"frames": frames}, "weights": torch.full((3,), value)}


def _loaded(out: Path) -> float:
    return float(runs.load_checkpoint(runs.find_checkpoint(out))["weights"][0])


def _write_replay(path: Path) -> None:
    (path / "storage").mkdir(parents=True)
    (path / "storage" / "data.memmap").write_bytes(b"\x01" * 64)


class Died(Exception):
    """Stands for a process killed between two writes of a save."""


class TestCheckpoints:
    """A save is one unit: stopped at any write, the run folder holds the old checkpoint or the
    new one, whole; loading checks every file against the manifest and reads plain data."""

    @pytest.mark.parametrize(
        ("target", "new"),
        [
            ("torch.save", False),
            ("replay", False),
            ("json.dump", False),
            ("os.rename", False),
            ("shutil.rmtree", True),  # after the rename: the new one is in place
        ],
    )
    def test_stopped_save_leaves_old_or_new(self, tmp_path, monkeypatch, target, new):
        runs.save_checkpoint(tmp_path, _state(1.0), replay=_write_replay)

        def die(*args, **kwargs):
            raise Died(target)

        writer = _write_replay
        if target == "replay":
            writer = die
        else:
            module, name = target.split(".")
            monkeypatch.setattr(getattr(runs, module), name, die)
        with pytest.raises(Died):
            runs.save_checkpoint(tmp_path, _state(2.0), replay=writer)
        monkeypatch.undo()
        assert _loaded(tmp_path) == (2.0 if new else 1.0)
        runs.save_checkpoint(tmp_path, _state(3.0), replay=_write_replay)
        assert _loaded(tmp_path) == 3.0
        assert [p.name for p in tmp_path.iterdir()] == [runs.latest_checkpoint(tmp_path).name]

    @pytest.mark.parametrize(
        ("damage", "named"),
        [
            ("flip", "state.pt is missing or damaged"),
            ("missing", "state.pt is missing or damaged"),
            ("extra", "extra.bin is not part of the checkpoint"),
            ("link", "state.pt is missing or damaged"),
            ("manifest", "manifest.json is missing or damaged"),
        ],
    )
    def test_damage_is_refused_naming_the_file(self, tmp_path, damage, named):
        folder = runs.save_checkpoint(tmp_path, _state(1.0))
        state = folder / runs.STATE
        if damage == "flip":
            data = bytearray(state.read_bytes())
            data[-1] ^= 1
            state.write_bytes(bytes(data))
        elif damage == "missing":
            state.unlink()
        elif damage == "extra":
            (folder / "extra.bin").write_bytes(b"0")
        elif damage == "link":
            shutil.move(state, tmp_path / "elsewhere.pt")
            state.symlink_to(tmp_path / "elsewhere.pt")
        else:
            (folder / runs.MANIFEST).write_text("{")
        with pytest.raises(ValueError, match=named):
            runs.load_checkpoint(runs.find_checkpoint(tmp_path))

    def test_crafted_pickle_is_refused_before_it_runs(self, tmp_path, marker):
        folder = runs.save_checkpoint(tmp_path, _state(1.0))
        malicious_files.torch_file(folder / runs.STATE, marker)
        manifest = json.loads((folder / runs.MANIFEST).read_text())
        manifest["files"][runs.STATE] = runs._sha256(folder / runs.STATE)
        (folder / runs.MANIFEST).write_text(json.dumps(manifest))
        with pytest.raises(ValueError, match=malicious_files.REFUSED):
            runs.load_checkpoint(folder)


class TestRunFolders:
    """A new run into a folder that holds one is refused unless ``--overwrite``; links,
    checkpoint folders and folders another process holds are refused."""

    def _new(self, out: Path, overwrite: bool = False) -> runs.Run:
        run = runs.Run(out, "pipeline", overwrite=overwrite)
        with runs.folder_lock(out):
            runs.start_run(run, Args())
        return run

    def test_rerun_is_refused_and_overwrite_replaces(self, tmp_path):
        out = tmp_path / "seed0"
        self._new(out)
        (out / "scalars").mkdir()
        (out / "scalars" / "old.csv").write_text("1,2\n")
        with pytest.raises(ValueError, match="holds a run already; continue it with --resume"):
            runs.check_new_run(out, overwrite=False)
        self._new(out, overwrite=True)
        assert sorted(p.name for p in out.iterdir()) == [runs.LOCK, runs.CONFIG]
        saved = runs.read_config(out)
        assert saved["pipeline"] == "pipeline" and Args(**saved["config"]).lr == Args().lr

    def test_folder_without_a_run_is_not_replaced(self, tmp_path):
        (tmp_path / "notes.txt").write_text("mine")
        with pytest.raises(ValueError, match="not empty and holds no run"):
            runs.check_new_run(tmp_path, overwrite=True)

    @pytest.mark.parametrize("where", ["folder", "scalars", "curve", "checkpoint"])
    def test_links_are_refused(self, tmp_path, where):
        outside = tmp_path / "outside"
        outside.mkdir()
        (outside / "precious.csv").write_text("keep")
        out = tmp_path / "run"
        if where == "folder":
            out.symlink_to(outside)
        else:
            self._new(out)
            name = {"scalars": "scalars", "curve": "learning_curve.png"}.get(where)
            if where == "checkpoint":
                folder = runs.save_checkpoint(out, _state(1.0))
                name = f"{folder.name}/state.pt"
            link = out / name
            if link.exists():
                link.unlink()
            link.symlink_to(outside if where == "scalars" else outside / "precious.csv")
        for check in (lambda: runs.check_new_run(out, True), lambda: runs.check_folder(out)):
            with pytest.raises(ValueError, match="symbolic link"):
                check()
        assert (outside / "precious.csv").read_text() == "keep"

    def test_resume_through_a_planted_link_is_refused(self, tmp_path, capsys):
        out = tmp_path / "run"
        self._new(out)
        runs.save_checkpoint(out, {**_state(1.0), "config": dataclasses.asdict(Args())})
        (out / "scalars").symlink_to(tmp_path)
        with pytest.raises(SystemExit):
            runs.parse(Args, ["--resume", str(out)])
        assert "symbolic link" in capsys.readouterr().err

    def test_out_inside_a_checkpoint_is_refused(self, tmp_path):
        folder = runs.save_checkpoint(tmp_path, _state(1.0))
        with pytest.raises(ValueError, match="inside checkpoint folder"):
            runs.check_new_run(folder / "seed0", overwrite=False)

    def test_second_process_is_refused(self, tmp_path):
        out = tmp_path / "seed0"
        out.mkdir()
        fd = os.open(out / runs.LOCK, os.O_RDWR | os.O_CREAT)
        fcntl.flock(fd, fcntl.LOCK_EX)  # as another process training there would hold it
        try:
            with pytest.raises(runs.RunFolderBusy, match="in use by another run"):
                with runs.folder_lock(out):
                    pass
        finally:
            os.close(fd)
        with runs.folder_lock(out):  # free again
            pass


class TestResumeArguments:
    """``--resume DIR`` continues the saved run with its own config; anything that would
    change it, or a checkpoint that no run could have written, is refused in one line."""

    @pytest.fixture
    def saved(self, tmp_path):
        out = tmp_path / "seed0"
        run = runs.Run(out, "test_runs", code=runs.code_state(Path(__file__)))
        with runs.folder_lock(out):
            runs.start_run(run, Args())
        state = {"config": dataclasses.asdict(Args()), "counters": {"frames": 8, "finished": True}}
        runs.save_checkpoint(out, state)
        return out

    @pytest.mark.parametrize(
        ("argv", "match"),
        [
            (["--seeds", "3"], "--seeds: a resumed run keeps its own"),
            (["--out", "x"], "--out: a resumed run keeps its own"),
            (["--overwrite"], "--overwrite: a resumed run continues its folder"),
            (["--lr", "0.1"], "--lr: a resumed run keeps its config"),
            ([], "the run is finished; pass --frames N > 8"),
            (["--frames", "4"], "--frames 4: "),
        ],
    )
    def test_refused(self, saved, capsys, argv, match):
        with pytest.raises(SystemExit) as stop:
            runs.parse(Args, ["--resume", str(saved), *argv])
        assert stop.value.code == 2
        err = capsys.readouterr().err
        assert match in err and len(err.strip().splitlines()) == 1, err

    def test_more_frames_continue_and_are_written(self, saved):
        ((args, run),) = runs.parse(Args, ["--resume", str(saved), "--frames", "16"])
        assert args.frames == 16 and run.resume and run.out == saved and run.start_frames == 8
        assert runs.read_config(saved)["config"]["frames"] == 8  # parsing writes nothing
        with runs.folder_lock(saved):
            runs.continue_run(run, args)
        written = runs.read_config(saved)
        assert written["config"]["frames"] == 16
        assert written["resumes"] == [{"frames": 8, "code": runs.code_state(Path(__file__))}]
        assert written["code"] == runs.code_state(Path(__file__))  # the start's record is kept

    def test_resume_on_other_code_says_so(self, saved, capsys):
        ((args, run),) = runs.parse(Args, ["--resume", str(saved), "--frames", "16"])
        with runs.folder_lock(saved):
            runs.continue_run(run, args)  # the same code: nothing said
        assert capsys.readouterr().err == ""
        code = run.code
        run.code = {**code, "packages": {**code["packages"], "torch": "9.9"}}
        with runs.folder_lock(saved):
            runs.continue_run(run, args)
        err = capsys.readouterr().err
        assert f"torch {code['packages']['torch']} -> 9.9" in err and len(err.splitlines()) == 1
        assert [r["code"] for r in runs.read_config(saved)["resumes"]] == [code, run.code]

    @pytest.mark.parametrize("frames", [-1, 2.5, None])
    def test_impossible_frame_counter_is_refused(self, saved, capsys, frames):
        state = {"config": dataclasses.asdict(Args()), "counters": {"frames": frames}}
        runs.save_checkpoint(saved, state)
        with pytest.raises(SystemExit):
            runs.parse(Args, ["--resume", str(saved), "--frames", "16"])
        assert "frame counter" in capsys.readouterr().err

    def test_another_pipelines_run_is_refused(self, saved, capsys):
        runs.write_json(saved / runs.CONFIG, {"pipeline": "other", "config": {}})
        with pytest.raises(SystemExit):
            runs.parse(Args, ["--resume", str(saved), "--frames", "16"])
        assert "a other run, not test_runs" in capsys.readouterr().err


class TestCodeRecord:
    """``config.json`` records the versions a run ran with and its pipeline's git commit,
    edits included, so a figure can be traced to its code."""

    @pytest.fixture
    def repo(self, tmp_path, monkeypatch):
        if shutil.which("git") is None:
            pytest.skip("needs git to make a repository")
        monkeypatch.setenv("GIT_CEILING_DIRECTORIES", str(tmp_path))
        for name, value in (("NAME", "t"), ("EMAIL", "t@example.com")):
            monkeypatch.setenv(f"GIT_AUTHOR_{name}", value)
            monkeypatch.setenv(f"GIT_COMMITTER_{name}", value)
        repo = tmp_path / "repo"
        (repo / "sub").mkdir(parents=True)
        (repo / "sub" / "pipe.py").write_text("x = 1\n")
        git = ["git", "-C", str(repo)]
        subprocess.run([*git, "init", "-q"], check=True)
        subprocess.run([*git, "add", "sub/pipe.py"], check=True)
        subprocess.run([*git, "commit", "-q", "-m", "one"], check=True)
        head = subprocess.run([*git, "rev-parse", "HEAD"], capture_output=True, text=True)
        return repo, head.stdout.strip()

    def test_versions_are_the_installed_ones(self):
        code = runs.code_state(None)
        assert code["python"] == platform.python_version() and code["git"] is None
        assert code["packages"]["torch"] == importlib.metadata.version("torch")
        assert code["packages"]["torchrl_ext"] == importlib.metadata.version("torchrl_ext")
        assert set(code["packages"]) == set(runs.PACKAGES)

    def test_commit_and_edits(self, repo):
        repo, head = repo
        source = repo / "sub" / "pipe.py"
        assert runs.code_state(source)["git"] == {"commit": head, "edited": [], "diff_sha256": None}
        source.write_text("x = 2\n")
        first = runs.code_state(source)["git"]
        assert first["commit"] == head and first["edited"] == ["sub/pipe.py"]
        source.write_text("x = 3\n")
        second = runs.code_state(source)["git"]
        assert second["edited"] == first["edited"] and second["diff_sha256"] != first["diff_sha256"]
        assert runs.code_changes(
            {**runs.code_state(None), "git": first}, runs.code_state(source)
        ) == ["edited files differ"]

    def test_no_work_tree_or_no_git_records_none(self, repo, monkeypatch):
        repo, _ = repo
        outside = repo.parent / "loose.py"
        outside.write_text("")
        assert runs.code_state(outside)["git"] is None
        monkeypatch.setenv("PATH", "")
        assert runs.code_state(repo / "sub" / "pipe.py")["git"] is None

    def test_new_run_writes_it(self, repo, tmp_path):
        repo, head = repo
        out = tmp_path / "seed0"
        with runs.folder_lock(out):
            code = runs.code_state(repo / "sub" / "pipe.py")
            runs.start_run(runs.Run(out, "pipeline", code=code), Args())
        assert runs.read_config(out)["code"]["git"]["commit"] == head

    def test_a_command_s_runs_record_the_code_at_its_start(self, tmp_path):
        parsed = runs.parse(Args, ["--seeds", "0", "1", "--out", str(tmp_path)])
        (_, first), (_, second) = parsed
        assert first.code is second.code  # taken once, before any run starts
        assert first.code == runs.code_state(Path(__file__))

    def test_summary_counts_each_code(self, tmp_path):
        git = {"commit": "0123456789", "edited": ["a.py"], "diff_sha256": "abcdef0123"}
        code = {"python": "3.11.7", "packages": {"torch": "2.14.1"}, "git": git}
        resumed = {"resumes": [{"frames": 8, "code": code}]}
        configs = {
            "a": {"config": {}, "code": code},
            "b": {"config": {}, "code": code, **resumed},
            "c": {"config": {}},
            "d": {"config": {}, "code": {**code, "git": None}, **resumed},
        }
        for name, config in configs.items():
            (tmp_path / name).mkdir()
            runs.write_json(tmp_path / name / runs.CONFIG, config)
        assert runs.code_summary(tmp_path / name for name in configs) == (
            "Code, from each run's config.json: commit 0123456 with edits (diff abcdef01), torch "
            "2.14.1 (2 runs); code not recorded (1 run); outside git, torch 2.14.1, resumed on "
            "other code (1 run)."
        )

    def test_changes(self):
        code = {"python": "3.11.7", "packages": {"torch": "2.14.1", "torchrl": "0.14.1"},
                "git": {"commit": "a", "edited": [], "diff_sha256": None}}  # fmt: skip
        assert runs.code_changes(code, code) == []
        assert runs.code_changes(None, code) == []  # a run from before code was recorded
        other = {**code, "python": "3.12.1", "packages": {"torch": "2.15.0", "torchrl": "0.14.1"},
                 "git": {"commit": "b", "edited": [], "diff_sha256": None}}  # fmt: skip
        assert runs.code_changes(code, other) == [
            "Python 3.11.7 -> 3.12.1", "torch 2.14.1 -> 2.15.0", "commit a -> b"
        ]  # fmt: skip
        assert runs.code_changes(code, {**code, "git": None}) == ["commit a -> None"]


#: Runs ppo_cartpole.py and sends it ``signum`` once its checkpoint of ``after`` frames exists.
DRIVER = """
import pathlib, signal, subprocess, sys, time
signum, after, out, *argv = sys.argv[1:]
proc = subprocess.Popen([sys.executable, "ppo_cartpole.py", *argv, "--out", out])
folder = pathlib.Path(out) / "seed0"
while not any(
    (p / "state.pt").exists() and p.name == f"checkpoint-{int(after) // 512:06d}"
    for p in folder.glob("checkpoint-*")
) and proc.poll() is None:
    time.sleep(0.01)
proc.send_signal(int(signum))
print(proc.wait())
"""
ARGV = ["--frames", "4096", "--save-every", "512", "--no-progress", "--eval-episodes", "2"]


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """The run the signal tests stop, left alone."""
    out = tmp_path_factory.mktemp("reference")
    pipelines.run("ppo_cartpole", *ARGV, "--out", str(out))
    return out / "seed0"


class TestStopAndResume:
    """Stopped by a signal, a run saves after its batch, prints how to resume and exits with
    128 + the signal; killed outright, it resumes from its last checkpoint. Resumed, it logs
    the curve of a run left alone, bit for bit."""

    @pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM, signal.SIGKILL])
    def test_signal(self, reference, tmp_path, signum):
        done = subprocess.run(
            [sys.executable, "-c", DRIVER, str(int(signum)), "1024", str(tmp_path), *ARGV],
            capture_output=True,
            text=True,
            cwd=EXAMPLES,
            timeout=300,
            check=False,
        )
        run = tmp_path / "seed0"
        saved = runs.load_checkpoint(runs.find_checkpoint(run))["counters"]["frames"]
        returncode = int(done.stdout.split()[-1])
        if signum == signal.SIGKILL:
            assert returncode == -signal.SIGKILL
        else:
            assert returncode == 128 + signum, done.stderr
            assert done.stderr.splitlines()[-1] == (
                f"ppo_cartpole: stopped by {signum.name} at {saved:,} frames; checkpoint saved; "
                f"resume with: python ppo_cartpole.py --resume {run}"
            )
        assert 1024 <= saved < 4096
        pipelines.run("ppo_cartpole", "--resume", str(run))
        assert pipelines.scalars(run) == pipelines.scalars(reference)


class TestHelpers:
    def test_return_window_continues_from_counters(self):
        counters = {}
        first = runs.ReturnWindow(3, target=2.0, counters=counters)
        first.update([1.0, 2.0], frames=10, seconds=1.0)
        again = runs.ReturnWindow(3, target=2.0, counters=json.loads(json.dumps(counters)))
        assert again.update([3.0, 4.0], frames=20, seconds=2.0) == 3.0
        assert again.hit == (20, 2.0)

    def test_window_not_full_never_hits(self):
        window = runs.ReturnWindow(3, target=0.0, counters={})
        window.update([5.0, 5.0], frames=1, seconds=1.0)
        assert window.hit is None

    def test_summary_line(self):
        result = runs.Result(
            "p", "lstm seed 2", Path("x"), 10, 1.25, [(10, 3.0)], 4.0, 2.0, (10, 1.0)
        )
        assert str(result) == (
            "p lstm seed 2: mean return reached 2 after 10 frames (1.0 s); best mean return 3; "
            "final evaluation 4; 10 frames in 1.2 s; run folder: x"
        )

    def test_summary_line_never_shows_a_missed_target_as_the_best(self):
        curve = [(10, 0.5), (20, 0.9999991655349731)]
        result = runs.Result("p", "lstm seed 0", Path("x"), 20, 1.0, curve, 1.0, 1.0, None)
        assert "never reached 1; best mean return 0.999999; final evaluation 1;" in str(result)
        reached = dataclasses.replace(result, hit=(20, 1.0), curve=[(20, 1.0)])
        assert "reached 1 after 20 frames (1.0 s); best mean return 1;" in str(reached)


def _imports(path: Path) -> set[str]:
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module)
    return found


class TestOneFilePerPipeline:
    """A pipeline file imports only the library, stock packages and ``runs``: copied with
    ``runs.py`` into an empty folder, it runs."""

    @pytest.mark.parametrize("name", PIPELINES)
    def test_imports_no_other_example(self, name):
        imports = _imports(EXAMPLES / f"{name}.py")
        siblings = {p.stem for p in EXAMPLES.glob("*.py")} - {"runs"}
        assert not imports & siblings, imports & siblings
        assert not any(m.startswith("torchrl_ext.examples") for m in imports)

    def test_pipelines_are_there(self):
        assert "ppo_cartpole" in PIPELINES

    @pytest.mark.parametrize("name", PIPELINES)
    def test_copied_file_answers_help(self, tmp_path, name):
        shutil.copy(EXAMPLES / f"{name}.py", tmp_path)
        shutil.copy(EXAMPLES / "runs.py", tmp_path)
        done = subprocess.run(
            [sys.executable, f"{name}.py", "--help"],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
        assert done.returncode == 0, done.stderr
        assert "--resume DIR" in done.stdout

    def test_copied_demo_runs(self, tmp_path):
        for name in ("ppo_cartpole.py", "runs.py"):
            shutil.copy(EXAMPLES / name, tmp_path)
        start = time.perf_counter()
        done = subprocess.run(
            [sys.executable, "ppo_cartpole.py", "--quick", "--no-progress"],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=600,
            check=False,
        )
        assert done.returncode == 0, done.stderr
        # stdout holds the summary line alone: torchrl's log lines go to stderr
        assert done.stdout.startswith("ppo_cartpole lstm seed 0: "), done.stdout
        assert len(done.stdout.splitlines()) == 1, done.stdout
        assert "\x1b[" not in done.stderr, "no colour codes in a redirected log"
        assert (tmp_path / "runs" / "quick" / "ppo_cartpole" / "seed0" / "config.json").is_file()
        assert time.perf_counter() - start < 600


class TestCraftedCheckpoints:
    """A checkpoint whose manifest was rewritten to match a crafted ``state.pt`` is still read
    as data only: ``--resume`` and ``load_policy`` refuse it before any of its code runs."""

    @pytest.fixture
    def crafted(self, tmp_path, marker):
        pipelines.run("ppo_cartpole", "--quick", "--out", str(tmp_path))
        folder = runs.find_checkpoint(tmp_path / "seed0")
        malicious_files.torch_file(folder / runs.STATE, marker)
        manifest = json.loads((folder / runs.MANIFEST).read_text())
        manifest["files"][runs.STATE] = runs._sha256(folder / runs.STATE)
        (folder / runs.MANIFEST).write_text(json.dumps(manifest))
        return tmp_path / "seed0"

    def test_resume_refuses_it(self, crafted, capsys):
        with pytest.raises(SystemExit) as stop:
            pipelines.run("ppo_cartpole", "--resume", str(crafted), "--frames", "4096")
        assert stop.value.code == 2
        assert malicious_files.REFUSED in capsys.readouterr().err

    def test_load_policy_refuses_it(self, crafted):
        with pytest.raises(ValueError, match=malicious_files.REFUSED):
            runs.load_policy(crafted)

    def test_config_naming_no_pipeline_is_refused(self, crafted):
        runs.write_json(crafted / runs.CONFIG, {"pipeline": "../os", "config": {}})
        with pytest.raises(ValueError, match="names no pipeline"):
            runs.load_policy(crafted)


class TestSetup:
    """A run's first compile of the library's kernels says so on one line; later runs are quiet."""

    def _setup(self):
        threads = torch.get_num_threads()
        try:
            runs.setup()
        finally:
            torch.set_num_threads(threads)

    def test_first_compile_says_so(self, capsys, monkeypatch):
        monkeypatch.setattr(runs, "_compiled_kernels_cached", lambda: False)
        self._setup()
        captured = capsys.readouterr()
        assert captured.err == (
            "compiling torchrl_ext's kernels: first run only, about half a minute\n"
        )
        assert captured.out == ""

    def test_cached_kernels_say_nothing(self, capsys, monkeypatch):
        monkeypatch.setattr(runs, "_compiled_kernels_cached", lambda: True)
        self._setup()
        assert capsys.readouterr().err == ""

    def test_numba_cache_dir_counts(self, tmp_path, monkeypatch):
        import torchrl_ext

        monkeypatch.setenv("NUMBA_CACHE_DIR", str(tmp_path))
        monkeypatch.setattr(torchrl_ext, "__file__", str(tmp_path / "pkg" / "__init__.py"))
        assert not runs._compiled_kernels_cached()
        (tmp_path / "sub").mkdir()
        (tmp_path / "sub" / "kernels.f-1.py311.nbi").write_bytes(b"")
        assert runs._compiled_kernels_cached()
