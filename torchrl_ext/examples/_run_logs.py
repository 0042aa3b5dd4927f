"""A run's logs: the logger that writes into its run folder, and its CSV logs read back.

:func:`make_logger` picks a :mod:`torchrl.record.loggers` logger, :func:`log_row` logs a row
of scalars; :func:`read_scalars`, :func:`csv_rows` and :func:`trim_csv_logs` read, count and
cut the CSV logs (``<run folder>/scalars/<name>.csv``) for checkpoints and resumed runs.
"""

from __future__ import annotations

import csv
import os
import tempfile
from pathlib import Path
from typing import Any, Literal

LoggerKind = Literal["csv", "tensorboard", "wandb"]


def make_logger(kind: LoggerKind, out: Path, resume: bool = False) -> Any:
    """A :mod:`torchrl.record.loggers` logger writing into the run folder ``out``.

    The CSV logger writes ``out/scalars/<name>.csv`` (``step,value`` lines) and ``out/videos/``.
    TensorBoard writes its event files into ``out``; wandb logs offline into ``out`` unless
    ``WANDB_MODE`` says otherwise.

    Examples:
        >>> import tempfile
        >>> from pathlib import Path
        >>> with tempfile.TemporaryDirectory() as tmp:
        ...     logger = make_logger("csv", Path(tmp) / "seed0")
        ...     logger.log_scalar("mean_return", 9.5, step=64)
        ...     read_scalars(Path(tmp) / "seed0")
        {'mean_return': [(64, 9.5)]}
    """
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


def log_row(logger: Any, row: dict[str, float], step: int) -> None:
    """Logs every entry of ``row`` as a scalar at ``step`` (frames)."""
    for name, value in row.items():
        logger.log_scalar(name, float(value), step=step)


def read_scalars(out: Path) -> dict[str, list[tuple[int, float]]]:
    """A CSV-logged run's scalars: ``{name: [(step, value), ...]}`` in logging order."""
    scalars = {}
    for path in sorted((Path(out) / "scalars").glob("*.csv")):
        with path.open() as f:
            scalars[path.stem] = [(int(s), float(v)) for s, v in csv.reader(f)]
    return scalars


def csv_rows(out: Path) -> dict[str, int]:
    """Rows in each CSV log of ``out``: what a checkpoint records of the log."""
    rows = {}
    for path in sorted((Path(out) / "scalars").glob("*.csv")):
        with path.open() as f:
            rows[path.stem] = sum(1 for _ in f)
    return rows


def trim_csv_logs(out: Path, rows: dict[str, int]) -> None:
    """Keeps the first ``rows[name]`` rows of each CSV log (none of a log not in ``rows``).

    An interrupted run may have logged rows after its last checkpoint; the resumed run logs
    them again, so they go. Each log is rewritten through a new file and a rename.
    """
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
