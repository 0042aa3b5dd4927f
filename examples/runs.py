"""What every example pipeline shares: its command line, run folder, checkpoints, logs and curves.

A pipeline file (``ppo_cartpole.py``, ...) defines its ``Args`` dataclass and a
``train(args, run)`` function, and ends with ``runs.main(Args, train, quick=QUICK)``. This module
turns that into a command line and runs it:

* **The command line.** Every ``Args`` field is an option (``lr`` is ``--lr``, ``obs_scale`` is
  ``--obs-scale 2 20``), documented by the string under the field. The options every pipeline
  has: ``--seeds`` (one run per seed), ``--out``, ``--resume DIR``, ``--overwrite``, ``--quick``,
  ``--device``, ``--logger``, ``--save-every`` and ``--progress``. A value the ``Args`` refuses
  (its ``__post_init__`` raises) is one line and exit 2, before any run starts.
* **The run folder** (``runs/<pipeline>/seed<N>``) holds ``config.json`` (the pipeline, its
  arguments and the code it ran: Python's and the packages' versions and the git commit of the
  pipeline's folder with the files edited since, at the start and at each resume),
  ``scalars/<name>.csv`` (the CSV log), ``learning_curve.png`` and the
  latest ``checkpoint-<n>/``. A new run into a folder that holds one is refused unless
  ``--overwrite``; one process at a time works in a folder (a lock file); a folder or any entry
  of it that is a symbolic link is refused, so a run never writes or deletes through a link
  planted in a folder someone passed around.
* **Checkpoints** are written into a fresh temporary folder, with a manifest of every file's
  SHA-256 written last, then renamed into place; a process killed at any point leaves the old
  checkpoint or the new one, complete. Loading checks the manifest and reads tensors and plain
  data only (``weights_only=True``).
* **Resume.** ``--resume DIR`` continues the run saved in ``DIR`` with its own config (``--frames``
  may extend it); the CSV rows logged after the checkpoint are dropped, so the resumed run's
  curve equals an uninterrupted one's, bit for bit, when it runs the same code (a resume with
  other versions or another commit says so).
* **Ctrl-C and SIGTERM** let the run finish its batch, save a checkpoint and stop with the resume
  command printed; a second one stops at once (the last checkpoint is complete).

Copy a pipeline file and this one into a folder, install ``torchrl_ext``, and the pipeline runs.
"""

from __future__ import annotations

import argparse
import ast
import contextlib
import csv
import dataclasses
import fcntl
import hashlib
import importlib
import importlib.metadata
import importlib.util
import inspect
import json
import logging
import math
import os
import platform
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
import typing
import warnings
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

import torch

#: The latest checkpoint of a run is the folder ``checkpoint-<n>`` with the largest ``n``.
CHECKPOINT_NAME = re.compile(r"^checkpoint-(\d+)$")
MANIFEST, STATE, CONFIG, LOCK = "manifest.json", "state.pt", "config.json", ".lock"
#: The distributions whose versions ``config.json`` records.
PACKAGES = ("torch", "torchrl", "tensordict", "warp-lang", "torchrl_ext")
#: Batches a ``--quick`` run collects unless its pipeline says otherwise.
QUICK_BATCHES = 3


# ---------------------------------------------------------------------------- command line
def field_docs(cls: type) -> dict[str, str]:
    """The string written under each field of the dataclass ``cls`` (its one-line help)."""
    docs: dict[str, str] = {}
    for klass in reversed(cls.__mro__):
        try:
            source = textwrap.dedent(inspect.getsource(klass))
        except (OSError, TypeError):
            continue
        body = ast.parse(source).body[0]
        if not isinstance(body, ast.ClassDef):
            continue
        for node, after in zip(body.body, body.body[1:], strict=False):
            if (
                isinstance(node, ast.AnnAssign)
                and isinstance(node.target, ast.Name)
                and isinstance(after, ast.Expr)
                and isinstance(after.value, ast.Constant)
                and isinstance(after.value.value, str)
            ):
                docs[node.target.id] = " ".join(after.value.value.split())
    return docs


def _option(parser: argparse.ArgumentParser, field: dataclasses.Field, hint: Any, doc: str) -> None:
    """Adds ``--<field>`` for one ``Args`` field, typed after its annotation."""
    name = "--" + field.name.replace("_", "-")
    default = field.default
    shown = f"{doc} (default: {default!r})" if doc else f"default: {default!r}"
    kwargs: dict[str, Any] = {"dest": field.name, "default": argparse.SUPPRESS, "help": shown}
    origin, params = typing.get_origin(hint), typing.get_args(hint)
    if hint is bool:
        kwargs["action"] = argparse.BooleanOptionalAction
    elif origin is typing.Literal:
        kwargs["choices"] = list(params)
    elif origin is tuple:
        nargs = "+" if params[-1] is Ellipsis else len(params)
        kwargs.update(type=params[0], nargs=nargs, metavar=params[0].__name__.upper())
    elif hint in (int, float, str):
        kwargs.update(type=hint, metavar=hint.__name__.upper())
    else:
        raise TypeError(f"Args field {field.name!r}: no command-line form for {hint!r}.")
    parser.add_argument(name, **kwargs)


class Parser(argparse.ArgumentParser):
    """An argument parser whose errors are one line (``--help`` lists the options)."""

    def error(self, message: str) -> typing.NoReturn:
        """Exits with status 2 and ``message`` on one line."""
        self.exit(2, f"{self.prog}: error: {message}\n")


def make_parser(args_class: type, description: str) -> argparse.ArgumentParser:
    """The command line of a pipeline: its ``Args`` fields and the run options."""
    parser = Parser(description=description, formatter_class=argparse.RawDescriptionHelpFormatter)
    hints = typing.get_type_hints(args_class)
    docs = field_docs(args_class)
    group = parser.add_argument_group("arguments (written to config.json)")
    for field in dataclasses.fields(args_class):
        if field.name != "seed":
            _option(group, field, hints[field.name], docs.get(field.name, ""))
    runs = parser.add_argument_group("run options")
    runs.add_argument(
        "--seeds",
        type=int,
        nargs="+",
        default=None,
        metavar="N",
        help="seeds to train, one after the other, one run folder each (default: 0)",
    )
    runs.add_argument(
        "--out",
        type=Path,
        default=None,
        metavar="DIR",
        help="output folder (default: runs/<pipeline>[/<run name>], under runs/quick with "
        "--quick); a seed's run goes to DIR/seed<N>",
    )
    runs.add_argument(
        "--resume",
        type=Path,
        default=None,
        metavar="DIR",
        help="continue the run saved in DIR (a seed's folder, e.g. "
        "runs/ppo_cartpole/seed0); --frames extends it",
    )
    runs.add_argument(
        "--overwrite", action="store_true", help="replace a run already in the run folder"
    )
    runs.add_argument(
        "--quick", action="store_true", help="a few batches with shape, mask and finiteness checks"
    )
    runs.add_argument("--device", default="cpu", help="torch device (cpu, cuda)")
    runs.add_argument(
        "--logger",
        choices=["csv", "tensorboard", "wandb"],
        default="csv",
        help="torchrl.record.loggers backend of the scalars",
    )
    runs.add_argument(
        "--save-every",
        type=int,
        default=0,
        metavar="FRAMES",
        help="frames between checkpoints (0: at the end, and when stopped)",
    )
    runs.add_argument(
        "--progress",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="show a progress bar",
    )
    return parser


@dataclasses.dataclass
class Run:
    """How one run is executed, as opposed to what it learns (its ``Args``).

    Args:
        out (Path): the run folder.
        pipeline (str): the pipeline's module name, written to ``config.json``.
        logger (str): ``"csv"``, ``"tensorboard"`` or ``"wandb"``.
        save_every (int): frames between checkpoints (0: only at the end and when stopped).
        device (str): torch device.
        progress (bool): show a progress bar.
        quick (bool): check shapes and masks on every batch (a few batches).
        resume (bool): continue from the run folder's latest checkpoint.
        overwrite (bool): a new run replaces a run already in ``out``.
        code (dict | None): the code the command runs (:func:`code_state`), taken once when it
            starts, so each of its runs records the code it imported even if the files change
            meanwhile; ``None`` takes the versions alone when the run starts.
        start_frames (int): the frames the run had when this process took it up (0 if new).
    """

    out: Path
    pipeline: str
    logger: str = "csv"
    save_every: int = 0
    device: str = "cpu"
    progress: bool = False
    quick: bool = False
    resume: bool = False
    overwrite: bool = False
    code: dict[str, Any] | None = None
    start_frames: int = 0


def _as_fields(args_class: type, values: dict[str, Any]) -> dict[str, Any]:
    """``values`` with lists (argparse's, JSON's) made tuples where the field is a tuple."""
    hints = typing.get_type_hints(args_class)
    return {
        k: tuple(v) if typing.get_origin(hints.get(k)) is tuple and isinstance(v, list) else v
        for k, v in values.items()
    }


def _pipeline_file(args_class: type) -> Path | None:
    module = sys.modules[args_class.__module__]
    return Path(module.__file__) if getattr(module, "__file__", None) else None


def _pipeline_name(args_class: type) -> str:
    source = _pipeline_file(args_class)
    return source.stem if source is not None else "pipeline"


def parse(
    args_class: type, argv: list[str] | None = None, quick: dict[str, Any] | None = None
) -> list[tuple[Any, Run]]:
    """Each run the command line asks for, with its ``Args``: one per seed, or the resumed one.

    Every check that can be made before training is made here (one line, exit 2): values the
    ``Args`` refuse, run options, run folders (see :func:`check_new_run`), ``--resume``'s
    checkpoint (verified against its manifest) and its config.
    """
    module = sys.modules[args_class.__module__]
    pipeline = _pipeline_name(args_class)
    parser = make_parser(args_class, "\n\n".join((module.__doc__ or "").split("\n\n")[:2]))
    ns = vars(parser.parse_args(argv))
    given = {f.name: ns.pop(f.name) for f in dataclasses.fields(args_class) if f.name in ns}
    given = _as_fields(args_class, given)
    options = {k: ns[k] for k in ("logger", "save_every", "device", "progress", "quick")}
    logger = options["logger"]
    if logger != "csv" and importlib.util.find_spec(logger) is None:
        parser.error(f"--logger {logger} needs {logger}: pip install {logger}")
    if options["save_every"] < 0:
        parser.error(f"--save-every must be >= 0, got {options['save_every']}")
    if options["device"].split(":")[0] == "cuda" and not torch.cuda.is_available():
        parser.error(f"--device {options['device']}: no CUDA device is available; use cpu")
    try:
        torch.device(options["device"])
    except RuntimeError:
        parser.error(f"--device {options['device']!r}: not a torch device")
    options["code"] = code_state(_pipeline_file(args_class))  # once, for every run below
    if ns["resume"] is not None:
        return [_resumed(parser, args_class, ns, given, pipeline, options)]
    seeds = ns["seeds"] if ns["seeds"] is not None else [0]
    if len(set(seeds)) != len(seeds) or min(seeds) < 0 or max(seeds) >= 2**31:
        parser.error(f"--seeds must be distinct integers in [0, 2**31), got {seeds}")
    values = {**(quick or {}), **given} if options["quick"] else given
    default = Path("runs") / ("quick" if options["quick"] else "") / pipeline
    overwrite = ns["overwrite"] or (options["quick"] and ns["out"] is None)
    runs = []
    for seed in seeds:
        try:
            args = args_class(**{**values, "seed": seed})
        except (TypeError, ValueError) as error:
            parser.error(str(error))
        # an Args with a ``run_name`` (POPGym's "<env>-<difficulty>") gets a folder of its own
        out = ns["out"] or default / getattr(args, "run_name", "")
        run = Run(out / f"seed{seed}", pipeline, overwrite=overwrite, **options)
        try:
            check_new_run(run.out, run.overwrite)
        except ValueError as error:
            parser.error(str(error))
        runs.append((args, run))
    return runs


def _resumed(
    parser: argparse.ArgumentParser,
    args_class: type,
    ns: dict[str, Any],
    given: dict[str, Any],
    pipeline: str,
    options: dict[str, Any],
) -> tuple[Any, Run]:
    """The resumed run of ``--resume DIR``: its saved config, ``--frames`` extending it."""
    folder = Path(ns["resume"])
    for flag, value in (("--seeds", ns["seeds"]), ("--out", ns["out"])):
        if value is not None:
            parser.error(f"{flag}: a resumed run keeps its own; drop it or --resume")
    if ns["overwrite"]:
        parser.error("--overwrite: a resumed run continues its folder; drop one of the two")
    if set(given) - {"frames"}:
        parser.error(f"--{sorted(set(given) - {'frames'})[0]}: a resumed run keeps its config")
    try:
        check_folder(folder)
        state = load_checkpoint(find_checkpoint(folder))
        saved = read_config(folder)
    except ValueError as error:
        parser.error(f"--resume {folder}: {error}")
    if saved["pipeline"] != pipeline:
        parser.error(f"--resume {folder}: a {saved['pipeline']} run, not {pipeline}")
    try:
        args = args_class(**_as_fields(args_class, {**state["config"], **given}))
    except (TypeError, ValueError) as error:
        parser.error(f"--resume {folder}: {error}")
    frames = state["counters"].get("frames")
    if not isinstance(frames, int) or not 0 <= frames:
        parser.error(f"--resume {folder}: its checkpoint's frame counter is {frames!r}")
    if args.frames < frames:
        parser.error(f"--frames {args.frames}: {folder} has {frames:,} frames already")
    if state["counters"].get("finished") and args.frames == frames:
        parser.error(f"--resume {folder}: the run is finished; pass --frames N > {frames:,}")
    run = Run(folder, pipeline, resume=True, start_frames=frames, **{**options, "quick": False})
    return args, run


def check_fields(
    args: Any,
    counts: Iterable[str] = (),
    positive: Iterable[str] = (),
    non_negative: Iterable[str] = (),
    fractions: Iterable[str] = (),
) -> None:
    """Refuses ``Args`` values out of range, naming the field (for ``__post_init__``).

    ``counts`` must be ints >= 1; ``positive``, ``non_negative`` and ``fractions`` finite
    numbers > 0, >= 0 and in [0, 1].

    Examples:
        >>> from types import SimpleNamespace
        >>> check_fields(SimpleNamespace(epochs=0), counts=["epochs"])
        Traceback (most recent call last):
        ...
        ValueError: epochs must be an integer >= 1, got epochs=0.
    """
    for name in counts:
        value = getattr(args, name)
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{name} must be an integer >= 1, got {name}={value!r}.")
    rules = [(positive, "> 0", 0.0, math.inf), (non_negative, ">= 0", 0.0, math.inf)]
    for names, words, low, high in [*rules, (fractions, "in [0, 1]", 0.0, 1.0)]:
        for name in names:
            value = getattr(args, name)
            number = isinstance(value, (int, float)) and not isinstance(value, bool)
            if (
                not number
                or not (low <= value <= high and math.isfinite(value))
                or (words == "> 0" and value == 0)
            ):
                raise ValueError(f"{name} must be a finite number {words}, got {name}={value!r}.")


# ---------------------------------------------------------------------------- run folders
def check_folder(folder: Path) -> None:
    """Refuses a run folder that is, or holds, a symbolic link anywhere inside it."""
    folder = Path(folder)
    if folder.is_symlink():
        raise ValueError(f"run folder {folder} is a symbolic link; pass the folder it points to.")
    for root, dirs, names in os.walk(folder):
        for name in [*dirs, *names]:
            if Path(root, name).is_symlink():
                raise ValueError(f"{Path(root, name)} is a symbolic link; refusing the folder.")


def holds_run(out: Path) -> bool:
    """Whether ``out`` is a folder a run wrote into (a config, a log or a checkpoint)."""
    out = Path(out)
    markers = (CONFIG, "scalars")
    return out.is_dir() and (
        any((out / m).exists() for m in markers) or latest_checkpoint(out) is not None
    )


def check_new_run(out: Path, overwrite: bool) -> None:
    """Refuses a new run into a folder that holds one (unless ``overwrite``) or that cannot be one.

    Raises:
        ValueError: ``out`` holds a run and ``overwrite`` is false; ``out`` is a link, holds
            one, or is a non-empty folder that holds no run; ``out`` lies inside a checkpoint.
    """
    out = Path(out)
    for parent in [out, *out.parents]:
        if CHECKPOINT_NAME.match(parent.name) or parent.name.startswith(".checkpoint-"):
            raise ValueError(f"--out {out} lies inside checkpoint folder {parent}; pass another.")
    if out.exists():
        check_folder(out)
    if holds_run(out):
        if not overwrite:
            raise ValueError(
                f"{out} holds a run already; continue it with --resume {out}, replace it with "
                "--overwrite, or pass another --out."
            )
    elif out.is_dir() and any(entry.name != LOCK for entry in out.iterdir()):
        raise ValueError(f"{out} is not empty and holds no run; pass another --out.")


@contextlib.contextmanager
def folder_lock(out: Path) -> Iterator[None]:
    """Holds ``out``'s lock file while the body runs; refuses a folder another process holds."""
    out.mkdir(parents=True, exist_ok=True)
    fd = os.open(out / LOCK, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise RunFolderBusy(f"{out} is in use by another run; wait for it to end.") from None
        yield
    finally:
        os.close(fd)


class RunFolderBusy(RuntimeError):
    """Another process holds the run folder."""


def start_run(run: Run, args: Any) -> None:
    """Empties the run folder of a run ``--overwrite`` replaces, and writes ``config.json``.

    Called with the folder's lock held, so no other process is writing into it.
    """
    check_new_run(run.out, run.overwrite)
    for entry in run.out.iterdir():
        if entry.name == LOCK:
            continue
        if entry.is_dir() and not entry.is_symlink():
            shutil.rmtree(entry)
        else:
            entry.unlink()
    config = {"pipeline": run.pipeline, "config": dataclasses.asdict(args)}
    write_json(run.out / CONFIG, {**config, "code": _run_code(run)})


def continue_run(run: Run, args: Any) -> None:
    """Writes a resumed run's ``config.json``, adding the code that continues it.

    The arguments are written again (``--frames`` may have grown), and ``"resumes"`` gains the
    frames the run had and its :func:`code_state`. Says so on stderr when that code differs from
    the code the run last ran. Called with the folder's lock held.
    """
    saved = read_config(run.out)
    code = _run_code(run)
    resumes = saved.get("resumes") if isinstance(saved.get("resumes"), list) else []
    before = resumes[-1].get("code") if resumes and isinstance(resumes[-1], dict) else None
    changes = code_changes(before if before is not None else saved.get("code"), code)
    if changes:
        print(
            f"{run.pipeline}: {run.out} continues on other code than it last ran "
            f"({'; '.join(changes)}); its curve may differ from an uninterrupted run's",
            file=sys.stderr,
        )
    resumes = [*resumes, {"frames": run.start_frames, "code": code}]
    config = {**saved, "config": dataclasses.asdict(args), "resumes": resumes}
    write_json(run.out / CONFIG, config)


def _run_code(run: Run) -> dict[str, Any]:
    return run.code if run.code is not None else code_state(None)


def code_state(source: Path | None) -> dict[str, Any]:
    """The code a run runs: Python's and :data:`PACKAGES`' versions, and the pipeline's commit.

    ``"git"`` holds the commit of the git work tree that holds ``source`` (the pipeline file), the
    tracked files edited since (paths from the work tree's top) and the SHA-256 of their diff
    (``None`` with no edits); it is ``None`` outside a work tree, without git, or without a
    ``source``. A package that is not installed has ``None``.
    """
    packages = {}
    for name in PACKAGES:
        try:
            packages[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            packages[name] = None
    return {"python": platform.python_version(), "packages": packages, "git": _git_state(source)}


def _git_state(source: Path | None) -> dict[str, Any] | None:
    if source is None:
        return None
    folder = str(Path(source).resolve().parent)
    # Optional locks off: two runs starting at once must not race for the index's lock.
    env = {**os.environ, "GIT_OPTIONAL_LOCKS": "0"}

    def git(*command: str) -> str:
        return subprocess.run(
            ["git", "-C", folder, *command], capture_output=True, text=True, check=True,
            timeout=60, env=env,
        ).stdout  # fmt: skip

    try:
        commit = git("rev-parse", "HEAD").strip()
        edited = sorted(line[3:] for line in git("status", "--porcelain", "-uno").splitlines())
        diff = git("diff", "HEAD", "--no-ext-diff", "--no-textconv") if edited else ""
    except (OSError, subprocess.SubprocessError):
        return None
    digest = hashlib.sha256(diff.encode()).hexdigest() if edited else None
    return {"commit": commit, "edited": edited, "diff_sha256": digest}


def code_changes(before: Any, after: dict[str, Any]) -> list[str]:
    """How the code ``after`` differs from ``before`` (both :func:`code_state`), one item each.

    ``before`` from a ``config.json`` written before code was recorded (``None``, or not a dict)
    gives no changes: nothing is known to differ.
    """
    if not isinstance(before, dict):
        return []
    changes = []
    if before.get("python") != after["python"]:
        changes.append(f"Python {before.get('python')} -> {after['python']}")
    old = before.get("packages") if isinstance(before.get("packages"), dict) else {}
    for name, version in after["packages"].items():
        if old.get(name) != version:
            changes.append(f"{name} {old.get(name)} -> {version}")
    old_git, git = before.get("git"), after["git"]
    if old_git != git:
        commits = [g.get("commit") if isinstance(g, dict) else None for g in (old_git, git)]
        if commits[0] != commits[1]:
            changes.append(f"commit {commits[0]} -> {commits[1]}")
        else:
            changes.append("edited files differ")
    return changes


def code_label(saved: dict[str, Any]) -> str:
    """The code a run ran, as :func:`read_config` gives its ``config.json``, in a few words.

    Examples:
        >>> code = {"python": "3.11.7", "packages": {"torch": "2.14.1"},
        ...         "git": {"commit": "0123456789ab", "edited": [], "diff_sha256": None}}
        >>> code_label({"config": {}, "code": code})
        'commit 0123456, torch 2.14.1'
        >>> code_label({"config": {}})
        'code not recorded'
    """  # fmt: skip
    code = saved.get("code")
    if not isinstance(code, dict):
        return "code not recorded"
    git = code.get("git")
    if isinstance(git, dict):
        where = f"commit {str(git.get('commit'))[:7]}"
        if git.get("edited"):
            where += f" with edits (diff {str(git.get('diff_sha256'))[:8]})"
    else:
        where = "outside git"
    packages = code.get("packages") if isinstance(code.get("packages"), dict) else {}
    label = ", ".join([where, *(f"{name} {version}" for name, version in packages.items())])
    resumes = saved.get("resumes") if isinstance(saved.get("resumes"), list) else []
    if any(not isinstance(r, dict) or r.get("code") != code for r in resumes):
        label += ", resumed on other code"
    return label


def code_summary(folders: Iterable[Path]) -> str:
    """Which code the runs in ``folders`` ran, from their ``config.json``: each label, its count.

    For results pages: a table whose runs ran different code says so.
    """
    counts: dict[str, int] = {}
    for folder in folders:
        label = code_label(read_config(folder))
        counts[label] = counts.get(label, 0) + 1
    ordered = sorted(counts.items(), key=lambda item: -item[1])
    parts = [f"{label} ({n} run{'s' if n > 1 else ''})" for label, n in ordered]
    return "Code, from each run's config.json: " + "; ".join(parts) + "."


def write_json(path: Path, data: Any) -> None:
    """Writes ``data`` as indented JSON through a new file and a rename (a link is replaced)."""
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}-", dir=path.parent)
    os.fchmod(fd, 0o644)
    with os.fdopen(fd, "w") as f:
        json.dump(data, f, indent=2)
        f.write("\n")
    os.replace(tmp, path)


def read_config(out: Path) -> dict[str, Any]:
    """``config.json`` of a run folder: ``{"pipeline": name, "config": {field: value}}``."""
    path = Path(out) / CONFIG
    if not path.is_file() or path.is_symlink():
        raise ValueError(f"{out} holds no run: {path} is missing.")
    try:
        saved = json.loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError):
        raise ValueError(f"{path} is damaged: it is not JSON.") from None
    if not isinstance(saved, dict) or not isinstance(saved.get("config"), dict):
        raise ValueError(f"{path} is damaged: it holds no pipeline and config.")
    return saved


# ---------------------------------------------------------------------------- checkpoints
def latest_checkpoint(out: Path) -> Path | None:
    """The run folder's checkpoint folder with the largest number (``None`` if it has none)."""
    out = Path(out)
    if not out.is_dir():
        return None
    numbered = [(int(m[1]), p) for p in out.iterdir() if (m := CHECKPOINT_NAME.match(p.name))]
    return max(numbered)[1] if numbered else None


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _files(folder: Path) -> list[Path]:
    """Every entry under ``folder`` that is not a folder, links included, relative to it."""
    found = []
    for root, dirs, names in os.walk(folder):
        found += [Path(root, name) for name in names]
        found += [Path(root, name) for name in dirs if Path(root, name).is_symlink()]
    return sorted(p.relative_to(folder) for p in found)


def _fsync(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def save_checkpoint(out: Path, state: dict[str, Any], **files: Callable[[Path], None]) -> Path:
    """Saves ``state`` as ``state.pt`` and each of ``files`` (a writer per name) as a checkpoint.

    Written into a fresh temporary folder, fsynced, its manifest last, renamed into place under
    a number no earlier checkpoint had; only then are the older checkpoints removed.
    """
    out = Path(out)
    for stale in out.glob(".checkpoint-*"):  # left by a process killed while saving
        if stale.is_dir() and not stale.is_symlink():
            shutil.rmtree(stale)
    tmp = Path(tempfile.mkdtemp(prefix=".checkpoint-", dir=out))
    torch.save(state, tmp / STATE)
    for name, write in files.items():
        write(tmp / name)
    listed = _files(tmp)
    for path in listed:
        _fsync(tmp / path)
    with (tmp / MANIFEST).open("x") as f:
        json.dump({"files": {str(p): _sha256(tmp / p) for p in listed}}, f, indent=2)
        f.flush()
        os.fsync(f.fileno())
    older = [p for p in out.iterdir() if CHECKPOINT_NAME.match(p.name)]
    number = 1 + max((int(CHECKPOINT_NAME.match(p.name)[1]) for p in older), default=0)
    folder = out / f"checkpoint-{number:06d}"
    os.rename(tmp, folder)
    _fsync(out)
    for path in older:
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)
        else:
            path.unlink()
    return folder


def verify_checkpoint(folder: Path) -> Path:
    """Checks a checkpoint folder against its manifest; returns it.

    Raises:
        ValueError: naming the first file that is missing, changed, a link, or not listed.
    """
    folder = Path(folder)
    if folder.is_symlink() or not folder.is_dir():
        raise ValueError(f"checkpoint {folder} is a link or not a folder; refusing to load it.")
    try:
        listed = json.loads((folder / MANIFEST).read_text())["files"]
    except (OSError, ValueError, KeyError, TypeError):
        raise ValueError(f"{folder / MANIFEST} is missing or damaged.") from None
    for name, digest in listed.items():
        path = folder / name
        if path.is_symlink() or not path.is_file() or _sha256(path) != digest:
            raise ValueError(f"{path} is missing or damaged (not what the manifest lists).")
    extra = sorted(set(map(str, _files(folder))) - set(listed) - {MANIFEST})
    if extra:
        raise ValueError(f"{folder / extra[0]} is not part of the checkpoint; refusing it.")
    return folder


def find_checkpoint(out: Path) -> Path:
    """The run folder's latest checkpoint, checked against its manifest."""
    folder = latest_checkpoint(out)
    if folder is None:
        raise ValueError(f"no checkpoint in {out}; pass a run folder that holds one.")
    return verify_checkpoint(folder)


def load_checkpoint(folder: Path) -> dict[str, Any]:
    """``state.pt`` of a verified checkpoint folder, read as tensors and plain data only."""
    from torchrl_ext.data.safe_loading import load_plain

    return load_plain(verify_checkpoint(folder) / STATE)


def due(frames: int, previous: int, every: int) -> bool:
    """Whether a checkpoint falls due going from ``previous`` to ``frames`` frames.

    Examples:
        >>> due(1024, 512, 1000), due(1536, 1024, 1000), due(1536, 1024, 0)
        (True, False, False)
    """
    return every > 0 and frames // every > previous // every


def training_state(loss: Any, optim: Any, env: Any, collector: Any) -> dict[str, Any]:
    """What a collector-driven run saves to continue bitwise, as tensors and plain data.

    The networks (through ``loss``), the optimizer, the base env's state, the collector's state
    and the policy input it will step from next, and torch's global generator.
    """
    from torchrl_ext._compat import collector_carrier

    return {
        "loss": loss.state_dict(),
        "optim": optim.state_dict(),
        "env": env.base_env.state_dict(),
        "collector": collector.state_dict(),
        "carrier": collector_carrier(collector).clone().to_dict(),
        "torch_rng": torch.get_rng_state(),
    }


def load_training_state(state: dict[str, Any], loss: Any, optim: Any, env: Any, collector: Any):
    """Loads what :func:`training_state` saved into the run's objects."""
    from torchrl_ext._compat import collector_carrier

    loss.load_state_dict(state["loss"])
    optim.load_state_dict(state["optim"])
    collector.load_state_dict(state["collector"])
    env.base_env.load_state_dict(state["env"])
    collector_carrier(collector).update(state["carrier"])
    torch.set_rng_state(state["torch_rng"])


# ---------------------------------------------------------------------------- signals
class RunInterrupted(Exception):
    """A run stopped by SIGINT or SIGTERM after saving its checkpoint."""

    def __init__(self, signum: int, out: Path, frames: int) -> None:
        super().__init__(f"{signal.Signals(signum).name} at {frames:,} frames")
        self.signum, self.out, self.frames = signum, Path(out), frames


_stop: dict[str, int | None] = {"signum": None}


@contextlib.contextmanager
def catch_signals() -> Iterator[None]:
    """While active, SIGINT and SIGTERM ask the run to stop after its batch; a second one acts."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}

    def ask_to_stop(signum: int, frame: Any) -> None:
        _stop["signum"] = signum
        for s, handler in previous.items():
            signal.signal(s, handler)

    for s in previous:
        signal.signal(s, ask_to_stop)
    try:
        yield
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
        _stop["signum"] = None


# ---------------------------------------------------------------------------- logs
def make_logger(kind: str, out: Path) -> Any:
    """A :mod:`torchrl.record.loggers` logger writing into the run folder ``out``."""
    out = Path(out)
    if kind == "csv":
        from torchrl.record.loggers import CSVLogger

        return CSVLogger(exp_name=out.name, log_dir=str(out.parent), video_format="pt")
    if kind == "tensorboard":
        from torchrl.record.loggers import TensorboardLogger

        return TensorboardLogger(exp_name=out.name, log_dir=str(out.parent))
    if kind == "wandb":
        from torchrl.record.loggers import WandbLogger

        os.environ.setdefault("WANDB_MODE", "offline")
        return WandbLogger(exp_name=out.name, save_dir=str(out), project="torchrl_ext")
    raise ValueError(f"logger must be 'csv', 'tensorboard' or 'wandb', got logger={kind!r}.")


def read_scalars(out: Path) -> dict[str, list[tuple[int, float]]]:
    """A CSV-logged run's scalars: ``{name: [(step, value), ...]}`` in logging order."""
    scalars = {}
    for path in sorted((Path(out) / "scalars").glob("*.csv")):
        with path.open() as f:
            scalars[path.stem] = [(int(s), float(v)) for s, v in csv.reader(f)]
    return scalars


def _csv_rows(out: Path) -> dict[str, int]:
    rows = {}
    for path in sorted((Path(out) / "scalars").glob("*.csv")):
        with path.open() as f:
            rows[path.stem] = sum(1 for _ in f)
    return rows


def _trim_csv_logs(out: Path, rows: dict[str, int]) -> None:
    """Keeps the first ``rows[name]`` rows of each CSV log; a log not in ``rows`` goes."""
    for path in (Path(out) / "scalars").glob("*.csv"):
        with path.open() as f:
            kept = [line for _, line in zip(range(rows.get(path.stem, 0)), f, strict=False)]
        if kept:
            fd, tmp = tempfile.mkstemp(prefix=f".{path.name}-", dir=path.parent)
            with os.fdopen(fd, "w") as f:
                f.writelines(kept)
            os.replace(tmp, path)
        else:
            path.unlink()


class _PlainBar:
    """A progress line every tenth of the run on stderr: the bar without tqdm."""

    def __init__(self, total: int, initial: int, shown: bool) -> None:
        self.total, self.n, self.shown, self.postfix = total, initial, shown, ""

    def update(self, n: int) -> None:
        before, self.n = self.n, self.n + n
        if self.shown and before * 10 // self.total != self.n * 10 // self.total:
            print(f"{self.n:,}/{self.total:,} frames {self.postfix}", file=sys.stderr)

    def set_postfix_str(self, text: str) -> None:
        self.postfix = text

    def close(self) -> None:
        pass


# ---------------------------------------------------------------------------- one run
class Recorder:
    """A run's logger, progress bar, counters and checkpoints, restored on resume.

    A pipeline's ``train`` makes one, reads :attr:`counters` (``frames``, ``seconds`` and the
    entries it passed; a resumed run's as saved), :attr:`state` (the checkpoint's other
    entries, empty for a new run) and :attr:`checkpoint` (the resumed checkpoint's folder, where
    its own files are), calls :meth:`log` after each batch and :meth:`finish` at the
    end. :meth:`log` saves a checkpoint every ``--save-every`` frames, at the end of the budget
    and when a signal asked the run to stop (then it raises :class:`RunInterrupted`).

    Args:
        run (Run): the run folder and options.
        args (dataclass): the run's arguments (``frames`` is the budget).
        **counters: a new run's counters besides ``frames`` and ``seconds``.
    """

    def __init__(self, run: Run, args: Any, **counters: Any) -> None:
        self.run, self.args = run, args
        self.logger = make_logger(run.logger, run.out)
        self.counters: dict[str, Any] = {"frames": 0, "seconds": 0.0, **counters}
        self.state: dict[str, Any] = {}
        self.checkpoint: Path | None = None
        if run.resume:
            self.checkpoint = find_checkpoint(run.out)
            self.state = load_checkpoint(self.checkpoint)
            self.counters = self.state.pop("counters")
            self.logger.load_state_dict(self.state.pop("logger"))
            if run.logger == "csv":
                _trim_csv_logs(run.out, self.state.pop("csv_rows"))
        self._start = time.perf_counter() - self.counters["seconds"]
        self.bar = _progress_bar(args.frames, self.counters["frames"], run.progress)

    @property
    def frames(self) -> int:
        """Frames collected so far (up to the last batch logged)."""
        return self.counters["frames"]

    @property
    def elapsed(self) -> float:
        """Seconds of training so far, a resumed run's earlier part included."""
        return time.perf_counter() - self._start

    def log(self, frames: int, row: dict[str, float], save: Callable[[], Any]) -> None:
        """Logs ``row`` at ``frames``; if a checkpoint is due, saves what ``save()`` returns.

        ``save()`` returns the state to save (a dict of tensors and plain data), or a
        ``(state, files)`` pair whose ``files`` map names in the checkpoint folder to writers
        (a replay buffer's folder); see :meth:`save`.
        """
        previous = self.counters["frames"]
        self.counters["frames"] = frames
        self.counters["seconds"] = self.elapsed
        row = {**row, "seconds": self.counters["seconds"]}
        for name, value in row.items():
            self.logger.log_scalar(name, float(value), step=frames)
        self.bar.update(frames - previous)
        self.bar.set_postfix_str(" ".join(f"{k}={v:.3g}" for k, v in list(row.items())[:2]))
        stop = _stop["signum"]
        if due(frames, previous, self.run.save_every) or frames >= self.args.frames or stop:
            self._save(save())
            if stop is not None:
                raise RunInterrupted(stop, self.run.out, frames)

    def _save(self, saved: Any) -> None:
        state, files = saved if isinstance(saved, tuple) else (saved, {})
        self.save(state, **files)

    def save(self, state: dict[str, Any], **files: Callable[[Path], None]) -> None:
        """Saves ``state``, the counters, the logger and the CSV log's length as a checkpoint."""
        full = {
            **state,
            "config": dataclasses.asdict(self.args),
            "counters": self.counters,
            "logger": self.logger.state_dict(),
            "csv_rows": _csv_rows(self.run.out),
        }
        save_checkpoint(self.run.out, full, **files)

    def finish(
        self,
        save: Callable[[], Any],
        curve: list[tuple[int, float]],
        *,
        final_eval: float,
        title: str,
        label: str = "",
        target: float | None = None,
        hit: tuple[int, float] | None = None,
        timings: Stopwatch | None = None,
        ylabel: str = "",
    ) -> Result:
        """Ends the run: logs ``final_eval``, saves a finished checkpoint, draws the curve.

        ``curve`` is ``(frames, mean return)`` after each batch; the returned :class:`Result`
        prints the summary line every pipeline prints.
        """
        self.bar.close()
        self.logger.log_scalar("final_eval", float(final_eval), step=self.frames)
        self.counters["finished"] = True
        self._save(save())
        name = f"{label} seed {self.args.seed}".strip()
        plot_curves(self.run.out / "learning_curve.png", {name: curve}, target, title, ylabel)
        return Result(
            self.run.pipeline,
            name,
            self.run.out,
            self.frames,
            self.counters["seconds"],
            curve,
            final_eval,
            target,
            hit,
            str(timings or ""),
        )


@dataclasses.dataclass
class Result:
    """What one run reached; ``str(result)`` is its summary line.

    Args:
        pipeline (str): the pipeline's name.
        name (str): the run's label and seed (``"lstm seed 0"``).
        out (Path): the run folder.
        frames (int): frames collected.
        seconds (float): training wall time (a resumed run counts its earlier part).
        curve (list): ``(frames, mean return)`` after each batch.
        final_eval (float): mean return of the final deterministic evaluation.
        target (float or None): the mean return that counts as solved.
        hit (tuple or None): ``(frames, seconds)`` when the mean first reached ``target``.
        timings (str): seconds per section of the training loop.
    """

    pipeline: str
    name: str
    out: Path
    frames: int
    seconds: float
    curve: list[tuple[int, float]]
    final_eval: float
    target: float | None = None
    hit: tuple[int, float] | None = None
    timings: str = ""

    @property
    def best(self) -> float:
        """The highest mean return after any batch (NaN before any episode ended)."""
        return best_mean(self.curve)

    def __str__(self) -> str:
        reach = "" if self.target is None else f"{reached(self.target, self.hit)}; "
        missed = self.target if self.target is not None and self.hit is None else None
        times = f" ({self.timings})" if self.timings else ""
        return (
            f"{self.pipeline} {self.name}: {reach}best mean return "
            f"{short(self.best, below=missed)}; final "
            f"evaluation {self.final_eval:.4g}; {self.frames:,} frames in {self.seconds:.1f} s"
            f"{times}; run folder: {self.out}"
        )


def short(value: float, below: float | None = None) -> str:
    """``value`` to 4 significant digits, or more where fewer would round it up to ``below``.

    A summary that says a run never reached its target should not show a best of the target.

    Examples:
        >>> short(0.123456), short(0.9999992, below=1.0), short(0.5, below=1.0)
        ('0.1235', '0.999999', '0.5')
    """
    digits = 4  # 17 significant digits give any float back exactly: the loop ends there
    while below is not None and value < below and float(f"{value:.{digits}g}") >= below:
        digits += 1
    return f"{value:.{digits}g}"


def best_mean(curve: list[tuple[int, float]]) -> float:
    """The highest mean return of a ``(frames, mean_return)`` curve (NaN if none is a number).

    Examples:
        >>> best_mean([(64, float("nan")), (128, 0.25), (192, 0.5), (256, 0.375)])
        0.5
    """
    returns = [value for _, value in curve if not math.isnan(value)]
    return max(returns) if returns else math.nan


def _progress_bar(total: int, initial: int, shown: bool) -> Any:
    try:
        from tqdm import tqdm
    except ImportError:
        return _PlainBar(total, initial, shown)
    return tqdm(total=total, initial=initial, unit="frames", disable=not shown)


# ---------------------------------------------------------------------------- training helpers
def seeded(seed: int, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """``fn(*args, **kwargs)`` with torch's global generator seeded, the caller's left as it was.

    Examples:
        >>> before = torch.get_rng_state()
        >>> a, b = seeded(3, torch.rand, 2), seeded(3, torch.rand, 2)
        >>> torch.equal(a, b), torch.equal(torch.get_rng_state(), before)
        (True, True)
    """
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return fn(*args, **kwargs)


class ReturnWindow:
    """The mean of the last ``size`` episode returns, and when it first reached ``target``.

    The target counts only once the window is full. Its state (``recent``, ``hit``) lives in a
    run's counters, so that a resumed run continues it.

    Examples:
        >>> counters = {}
        >>> window = ReturnWindow(2, target=5.0, counters=counters)
        >>> window.update([6.0], frames=10, seconds=1.0), window.hit
        (6.0, None)
        >>> window.update([4.0, 7.0], frames=20, seconds=2.0), counters["hit"]
        (5.5, (20, 2.0))
    """

    def __init__(self, size: int, target: float, counters: dict[str, Any]) -> None:
        counters.setdefault("recent", [])
        counters.setdefault("hit", None)
        self.counters, self.size, self.target = counters, size, target

    @property
    def hit(self) -> tuple[int, float] | None:
        """``(frames, seconds)`` when the mean first reached the target, or ``None``."""
        hit = self.counters["hit"]
        return None if hit is None else tuple(hit)

    @property
    def mean(self) -> float:
        """Mean of the window (NaN while empty)."""
        recent = self.counters["recent"]
        return sum(recent) / len(recent) if recent else math.nan

    def update(self, values: Iterable[float], frames: int, seconds: float) -> float:
        """Adds the returns of the episodes that ended; returns the new mean."""
        recent = deque(self.counters["recent"], maxlen=self.size)
        recent.extend(values)
        self.counters["recent"] = list(recent)
        mean = self.mean
        if self.hit is None and len(recent) == self.size and mean >= self.target:
            self.counters["hit"] = (frames, seconds)
        return mean


def reached(target: float, hit: tuple[int, float] | None) -> str:
    """Says when the mean return first reached ``target``.

    Examples:
        >>> reached(475.0, (34816, 12.34))
        'mean return reached 475 after 34,816 frames (12.3 s)'
        >>> reached(400.0, None)
        'mean return never reached 400'
    """
    if hit is None:
        return f"mean return never reached {target:g}"
    return f"mean return reached {target:g} after {hit[0]:,} frames ({hit[1]:.1f} s)"


class Stopwatch:
    """Accumulates wall time per named section: ``with watch("update"): ...``."""

    def __init__(self) -> None:
        self.totals: dict[str, float] = {}

    @contextlib.contextmanager
    def __call__(self, name: str) -> Iterator[None]:
        """Times the body of a ``with`` block under ``name``."""
        start = time.perf_counter()
        try:
            yield
        finally:
            self.totals[name] = self.totals.get(name, 0.0) + time.perf_counter() - start

    def __str__(self) -> str:
        return ", ".join(f"{name} {sec:.1f} s" for name, sec in self.totals.items())


def plot_curves(
    path: Path, curves: dict[str, list], target: float | None, title: str, ylabel: str = ""
) -> Path | None:
    """Draws each labelled ``(frames, value)`` curve into the PNG ``path``, ``target`` dashed.

    Returns ``path``, or ``None`` (and a line on stderr) when matplotlib is not installed.
    """
    try:
        import matplotlib
    except ImportError:
        print("no plot: it needs matplotlib (pip install matplotlib)", file=sys.stderr)
        return None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 3.6))
    for label, curve in curves.items():
        ax.plot([c[0] / 1e6 for c in curve], [c[1] for c in curve], label=label)
    if target is not None:
        ax.axhline(target, color="gray", linestyle="--", linewidth=1, label=f"target {target:g}")
    ax.set_xlabel("frames (millions)")
    ax.set_ylabel(ylabel or "mean episode return")
    ax.set_title(title)
    ax.legend(loc="lower right", fontsize=8)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def _compiled_kernels_cached() -> bool:
    """Whether numba has cached torchrl_ext's compiled kernels (beside them, or in its cache dir).

    They are compiled on first use and cached on disk for every later process and pipeline.
    """
    import torchrl_ext

    roots = [Path(torchrl_ext.__file__).parent]
    if os.environ.get("NUMBA_CACHE_DIR"):
        roots.append(Path(os.environ["NUMBA_CACHE_DIR"]))
    return any(next(root.rglob("*.nbi"), None) for root in roots)


def setup() -> None:
    """One torch thread (the measured setting); torchrl's warnings to stderr, without colours.

    TorchRL's INFO lines (storage shapes, Ray actors) are left out: the progress bar and the
    summary line say what a run does.
    """
    torch.set_num_threads(1)
    logging.getLogger("torchrl").setLevel(logging.WARNING)
    # numpy 2's notes on TorchRL's own calls (its prioritized sampler): not the user's to act on
    warnings.filterwarnings("ignore", category=DeprecationWarning, module=r"torchrl\.")
    if not _compiled_kernels_cached():
        print(
            "compiling torchrl_ext's kernels: first run only, about half a minute",
            file=sys.stderr,
            flush=True,
        )
    for handler in logging.getLogger("torchrl").handlers:
        stream = getattr(handler, "stream", None)
        if stream in (sys.stdout, sys.__stdout__):
            handler.setStream(sys.stderr)
        if not (hasattr(stream, "isatty") and stream.isatty()):
            handler.setFormatter(logging.Formatter("%(asctime)s [%(name)s] %(message)s"))


# ---------------------------------------------------------------------------- entry points
def main(
    args_class: type,
    train: Callable[[Any, Run], Any],
    argv: list[str] | None = None,
    quick: dict[str, Any] | None = None,
) -> list[Any]:
    """Runs a pipeline from the command line: every run it asks for, one after the other.

    ``train(args, run)`` trains one run and returns its summary line's object (printed with
    ``str``). Ctrl-C or SIGTERM stops after a checkpoint, printing how to resume (exit 130 or
    143); another process holding a run folder stops the command (exit 1).
    """
    runs = parse(args_class, argv, quick)
    setup()
    results = []
    with catch_signals():
        for args, run in runs:
            try:
                with folder_lock(run.out):
                    if run.resume:
                        continue_run(run, args)
                    else:
                        start_run(run, args)
                    results.append(seeded(args.seed, train, args, run))
            except RunFolderBusy as error:
                raise SystemExit(f"{run.pipeline}: {error}") from None
            except RunInterrupted as stop:
                script = sys.argv[0] if argv is None else f"{run.pipeline}.py"
                print(
                    f"{run.pipeline}: stopped by {stop}; checkpoint saved; resume with: "
                    f"python {script} --resume {stop.out}",
                    file=sys.stderr,
                )
                raise SystemExit(128 + stop.signum) from None
            print(results[-1], flush=True)
    return results


def load_policy(folder: str | Path, device: str = "cpu") -> Any:
    """The policy trained in a run folder of any pipeline, in eval mode, with its args and module.

    Reads which pipeline wrote the folder from ``config.json``, imports that pipeline's file
    (beside this one) and calls its ``load_policy(args, state, device)`` on the latest verified
    checkpoint.
    """
    folder = Path(folder)
    check_folder(folder)
    saved = read_config(folder)
    name = saved["pipeline"]
    if not re.fullmatch(r"[a-z_0-9]+", str(name)):
        raise ValueError(f"{folder / CONFIG} names no pipeline: {name!r}.")
    sys.path.insert(0, str(Path(__file__).parent))
    try:
        pipeline = importlib.import_module(name)
    finally:
        sys.path.pop(0)
    state = load_checkpoint(find_checkpoint(folder))
    args = pipeline.Args(**state["config"])
    return pipeline.load_policy(args, state, torch.device(device)).eval(), args, pipeline
