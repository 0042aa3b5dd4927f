"""Run folders: where a run writes, its logs, and checkpoints that are never half-written.

A run folder (``runs/ppo/seed0``) holds:

* ``config.json``: the run's hyperparameters, written when it starts (readable, and what
  :func:`~torchrl_ext.examples.load_policy` rebuilds the networks from);
* ``scalars/<name>.csv``: the CSV log, ``step,value`` lines;
* ``checkpoint-<n>/``: the latest checkpoint: ``state.pt`` (networks, optimizer, env, collector,
  generators, counters), the pipeline's own files (R2D2's ``replay/``) and ``manifest.json``,
  the SHA-256 of every other file.

A checkpoint is written into a new temporary folder (``.checkpoint-*``, created by
:func:`tempfile.mkdtemp`, so no file in it existed before and none is a link), its manifest
last, then renamed into place under a number no earlier checkpoint had; only then are the older
ones removed. A process killed at any point leaves the previous checkpoint or the new one
complete, never a mix. :func:`load_checkpoint` checks the manifest first: a listed file that is
missing, changed or a link, or a file the manifest does not list, is refused with a
:class:`ValueError` naming it; ``state.pt`` is then read with ``weights_only=True``.

SIGINT and SIGTERM (:func:`catch_signals`) do not stop a run mid-batch: the run finishes the
batch, saves a checkpoint and raises :class:`RunInterrupted`, which the command line turns into
one line saying how to resume. A second signal stops the process at once; the checkpoint
written before it is complete.

The logs live in ``_run_logs`` (:func:`make_logger`, :func:`log_row`, the CSV logs read back)
and the signals in ``_run_signals``; their names are imported here, so the pipelines reach a
run's whole infrastructure through this module.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import re
import shutil
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from torchrl_ext.examples._run_logs import LoggerKind
from torchrl_ext.examples._run_logs import csv_rows as csv_rows
from torchrl_ext.examples._run_logs import log_row as log_row
from torchrl_ext.examples._run_logs import make_logger as make_logger
from torchrl_ext.examples._run_logs import read_scalars as read_scalars
from torchrl_ext.examples._run_logs import trim_csv_logs as trim_csv_logs
from torchrl_ext.examples._run_signals import RunInterrupted as RunInterrupted
from torchrl_ext.examples._run_signals import catch_signals as catch_signals
from torchrl_ext.examples._run_signals import raise_if_stopped as raise_if_stopped
from torchrl_ext.examples._run_signals import stop_requested

#: The latest checkpoint of a run is the folder ``checkpoint-<n>`` with the largest ``n``.
CHECKPOINT_NAME = re.compile(r"^checkpoint-(\d+)$")
#: The file of a checkpoint folder that lists the others with their SHA-256.
MANIFEST = "manifest.json"
#: The file of a checkpoint folder that holds the tensors and counters.
STATE = "state.pt"
#: The run's hyperparameters, as written when it started.
CONFIG = "config.json"
#: What marks a folder as a run folder (``--overwrite`` replaces nothing else).
RUN_MARKERS = (CONFIG, "scalars", "checkpoint.pt")


@dataclasses.dataclass
class RunOptions:
    """How a run is executed, as opposed to what it learns (the pipeline's ``Config``).

    Args:
        out (Path): the run folder (logs, checkpoints, plots).
        logger (str): ``"csv"``, ``"tensorboard"`` or ``"wandb"``.
        save_every (int): frames between checkpoints (0: only at the end and when stopped).
        device (str): torch device of envs, networks and losses.
        progress (bool): show a progress bar.
        resume (bool): continue from the run folder's latest checkpoint.
        overwrite (bool): a new run replaces a run already in ``out``.

    Examples:
        >>> from pathlib import Path
        >>> RunOptions(Path("runs/ppo/seed0")).config_file
        PosixPath('runs/ppo/seed0/config.json')
    """

    out: Path
    logger: LoggerKind = "csv"
    save_every: int = 0
    device: str = "cpu"
    progress: bool = False
    resume: bool = False
    overwrite: bool = False

    @property
    def config_file(self) -> Path:
        """Where the run's hyperparameters are written when it starts."""
        return Path(self.out) / CONFIG


# ---------------------------------------------------------------------------- run folders
def holds_run(out: Path) -> bool:
    """Whether ``out`` is a folder a run wrote into (a config, a log or a checkpoint)."""
    out = Path(out)
    return out.is_dir() and (
        any((out / name).exists() for name in RUN_MARKERS) or latest_checkpoint(out) is not None
    )


def check_new_run(out: Path, overwrite: bool) -> None:
    """Refuses a new run into a folder that holds one, unless ``overwrite``.

    Raises:
        ValueError: if ``out`` holds a run and ``overwrite`` is false, or ``out`` is a link or
            a non-empty folder that holds no run (``overwrite`` replaces runs only).
    """
    out = Path(out)
    if out.is_symlink():
        raise ValueError(f"run folder {out} is a symbolic link; pass the folder it points to.")
    if holds_run(out):
        if not overwrite:
            raise ValueError(
                f"{out} holds a run already; continue it with --resume {out}, replace it with "
                "--overwrite, or pass another --out."
            )
    elif out.is_dir() and any(out.iterdir()):
        raise ValueError(f"{out} is not empty and holds no run; pass another --out.")


def start_run(run: RunOptions, config: dict[str, Any]) -> None:
    """Prepares the run folder of a new run and writes ``config.json`` into it.

    An earlier run in the folder is removed first when ``run.overwrite`` allows it.
    """
    out = Path(run.out)
    check_new_run(out, run.overwrite)
    if holds_run(out):
        shutil.rmtree(out)
    out.mkdir(parents=True, exist_ok=True)
    write_json(run.config_file, config)


def write_json(path: Path, data: Any) -> None:
    """Writes ``data`` as indented JSON to ``path`` through a new file and a rename.

    A link at ``path`` is replaced, never followed.
    """
    path = Path(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}-", dir=path.parent)
    with os.fdopen(fd, "w") as f:
        json.dump(data, f, indent=2)
        f.write("\n")
    os.replace(tmp, path)


def read_config(out: Path) -> dict[str, Any]:
    """The hyperparameters a run wrote into ``out/config.json``."""
    path = Path(out) / CONFIG
    if not path.is_file() or path.is_symlink():
        raise ValueError(f"{out} holds no run: {path} is missing.")
    try:
        return json.loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError):
        raise ValueError(f"{path} is damaged: it is not JSON.") from None


# ---------------------------------------------------------------------------- progress bar
class _PlainBar:
    """A progress line every tenth of the run, on stderr: the bar without tqdm."""

    def __init__(self, total: int, initial: int) -> None:
        self.total, self.n, self.postfix = total, initial, ""

    def update(self, n: int) -> None:
        before, self.n = self.n, self.n + n
        if before * 10 // self.total != self.n * 10 // self.total:
            print(f"{self.n:,}/{self.total:,} frames {self.postfix}", file=sys.stderr)

    def set_postfix(self, **values: str) -> None:
        self.set_postfix_str(" ".join(f"{k}={v}" for k, v in values.items()))

    def set_postfix_str(self, text: str, refresh: bool = True) -> None:
        self.postfix = text

    def close(self) -> None:
        pass


def progress_bar(total: int, initial: int, run: RunOptions) -> Any:
    """A tqdm bar over frames (hidden unless ``run.progress``); a plain line without tqdm."""
    try:
        from tqdm import tqdm
    except ImportError:
        return _PlainBar(total, initial) if run.progress else _PlainBar(total, total)
    return tqdm(total=total, initial=initial, unit="frames", disable=not run.progress)


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


def _save_steps(out: Path, parts: dict[str, Callable[[Path], None]]) -> Iterator[str]:
    """The writes of one checkpoint, one at a time; yields the name of each after it is done.

    ``parts`` maps a name in the checkpoint folder to what writes it there.
    """
    out.mkdir(parents=True, exist_ok=True)
    for stale in out.glob(".checkpoint-*"):  # left by a process killed while saving
        if stale.is_dir() and not stale.is_symlink():
            shutil.rmtree(stale)
    tmp = Path(tempfile.mkdtemp(prefix=".checkpoint-", dir=out))
    for name, write in parts.items():
        write(tmp / name)
        yield name
    files = _files(tmp)
    for path in files:
        _fsync(tmp / path)
    manifest = {"files": {str(p): _sha256(tmp / p) for p in files}}
    with (tmp / MANIFEST).open("x") as f:
        json.dump(manifest, f, indent=2)
        f.flush()
        os.fsync(f.fileno())
    yield MANIFEST
    older = [p for p in out.iterdir() if CHECKPOINT_NAME.match(p.name)]
    number = 1 + max((int(CHECKPOINT_NAME.match(p.name)[1]) for p in older), default=0)
    os.rename(tmp, out / f"checkpoint-{number:06d}")
    _fsync(out)
    yield "rename"
    for path in older:
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)
        else:
            path.unlink()
    yield "remove older"


def save_checkpoint(out: Path, state: dict[str, Any], **files: Callable[[Path], None]) -> None:
    """Saves ``state`` (tensors and plain data) and ``files`` as the run's new checkpoint.

    Args:
        out (Path): the run folder.
        state (dict): what ``state.pt`` holds.
        **files: a writer per file or folder name, called with the path to write.
    """
    import torch

    def write_state(path: Path) -> None:
        torch.save(state, path)

    for _ in _save_steps(Path(out), {STATE: write_state, **files}):
        pass


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
    """The run folder's latest checkpoint folder, checked against its manifest.

    Raises:
        SystemExit: if the run folder holds no checkpoint.
        ValueError: if the latest checkpoint is damaged (see :func:`verify_checkpoint`).
    """
    folder = latest_checkpoint(out)
    if folder is None:
        raise SystemExit(f"--resume: no checkpoint in {out}; pass a run folder that holds one.")
    return verify_checkpoint(folder)


def load_checkpoint(folder: Path) -> dict[str, Any]:
    """Reads the ``state.pt`` of a checkpoint folder, after :func:`verify_checkpoint`.

    The file is read with ``weights_only=True``: a checkpoint is tensors and plain data, and a
    file that holds anything else is refused with a :class:`ValueError` naming it, before
    anything in it can run.
    """
    from torchrl_ext.data.safe_loading import load_plain

    return load_plain(verify_checkpoint(folder) / STATE)


def due(frames: int, previous: int, every: int) -> bool:
    """Whether a checkpoint is due after going from ``previous`` to ``frames`` frames.

    Examples:
        >>> due(1024, 512, 1000), due(1536, 1024, 1000), due(1536, 1024, 0)
        (True, False, False)
    """
    return every > 0 and frames // every > previous // every


def save_due(frames: int, previous: int, run: RunOptions, total: int) -> bool:
    """Whether to checkpoint after a batch.

    Every ``run.save_every`` frames, at the end of the run, and when a signal asked it to stop.
    """
    return due(frames, previous, run.save_every) or frames >= total or stop_requested()


# ---------------------------------------------------------------------------- command line
def runs_of(args: Any, pipeline: str) -> Iterator[tuple[int | None, RunOptions]]:
    """The runs a command line asks for: one per ``--seeds`` entry, or the ``--resume`` one.

    A seed's run folder is ``<out>/seed<N>``; ``--out`` defaults to ``runs/<pipeline>``
    (``runs/quick/<pipeline>`` with ``--quick``, which a new ``--quick`` run replaces).

    Examples:
        >>> from argparse import Namespace
        >>> args = Namespace(seeds=[0, 1], out=None, quick=False, resume=None, logger="csv",
        ...                  save_every=0, device="cpu", progress=False, overwrite=False)
        >>> [str(run.out) for _, run in runs_of(args, "ppo")]
        ['runs/ppo/seed0', 'runs/ppo/seed1']
    """
    if args.resume is not None:
        yield None, run_options(args, Path(args.resume), resume=True)
        return
    default = Path("runs") / ("quick" if args.quick else "") / pipeline
    out = default if args.out is None else Path(args.out)
    for seed in args.seeds:
        yield seed, run_options(args, out / f"seed{seed}")


def run_options(args: Any, out: Path, resume: bool = False) -> RunOptions:
    """The run options the command line sets (``--logger``, ``--save-every``, ...) for ``out``.

    ``--quick`` without ``--out`` replaces the quick run it wrote before.
    """
    overwrite = getattr(args, "overwrite", False) or (args.quick and args.out is None)
    return RunOptions(
        out,
        logger=args.logger,
        save_every=args.save_every,
        device=args.device,
        progress=args.progress,
        resume=resume,
        overwrite=overwrite,
    )
