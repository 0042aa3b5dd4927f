"""Stopping a run by a signal: SIGINT and SIGTERM ask it to stop after its current batch.

:func:`catch_signals` installs the handlers, :func:`stop_requested` tells whether one fired and
:func:`raise_if_stopped` raises :class:`RunInterrupted` once the run has saved its checkpoint.
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any


class RunInterrupted(Exception):
    """A run stopped by a signal after saving its checkpoint.

    Args:
        signum (int): the signal.
        out (Path): the run folder.
        frames (int): frames of the checkpoint saved.
    """

    def __init__(self, signum: int, out: Path, frames: int) -> None:
        super().__init__(f"{signal.Signals(signum).name} at {frames:,} frames")
        self.signum, self.out, self.frames = signum, Path(out), frames


_stop: dict[str, int | None] = {"signum": None}


def stop_requested() -> bool:
    """Whether SIGINT or SIGTERM arrived while :func:`catch_signals` was active."""
    return _stop["signum"] is not None


def raise_if_stopped(out: Path, frames: int) -> None:
    """Raises :class:`RunInterrupted` if a signal asked the run to stop (after its save)."""
    if _stop["signum"] is not None:
        raise RunInterrupted(_stop["signum"], out, frames)


@contextlib.contextmanager
def catch_signals() -> Iterator[None]:
    """While active, SIGINT and SIGTERM ask the run to stop after its current batch.

    The first signal restores the previous handlers, so a second one acts at once. Outside the
    main thread (where handlers cannot be set) this does nothing.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    names = (signal.SIGINT, signal.SIGTERM)
    previous = {s: signal.getsignal(s) for s in names}

    def ask_to_stop(signum: int, frame: Any) -> None:
        _stop["signum"] = signum
        for s, handler in previous.items():
            signal.signal(s, handler)

    for s in names:
        signal.signal(s, ask_to_stop)
    try:
        yield
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
        _stop["signum"] = None
