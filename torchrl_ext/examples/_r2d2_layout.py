"""Where the distributed R2D2 run's pieces go and how they pace each other.

:class:`Layout` (workers, Ray address, batch sizes, pacing), the ``--address`` check and how long
a call to a Ray actor may take (``TIMEOUT``).
"""

from __future__ import annotations

import argparse
import dataclasses

from torchrl_ext._checks import check_int

#: Seconds any single call to a Ray actor may take before the run stops with an error.
TIMEOUT = 120.0


@dataclasses.dataclass
class Layout:
    """Where the run's pieces go and how they pace each other.

    Args:
        workers (int): Ray actors, each a remote collector with ``Config.num_envs`` envs.
        address (str or None): a Ray cluster to join (``ray start --head`` prints it);
            ``None`` starts a local Ray with one CPU per core.
        steps (int): steps per env in one actor batch (``num_envs * steps`` frames per write
            round trip).
        weight_period (int): learner updates between two weight pushes to the actors.
        frames_per_update (int): collected frames per learner update (the single-process
            example's replay ratio); the side that runs ahead of it waits.
        stats_period (float): seconds between two reads of the actors' counters.

    Examples:
        >>> Layout(workers=2).workers
        2
    """

    workers: int = 1
    address: str | None = None
    steps: int = 16
    weight_period: int = 4
    frames_per_update: int = 64
    stats_period: float = 0.5

    def __post_init__(self) -> None:
        self.workers = check_int("workers", self.workers, minimum=1)
        self.steps = check_int("steps", self.steps, minimum=1)
        self.weight_period = check_int("weight_period", self.weight_period, minimum=1)
        self.frames_per_update = check_int("frames_per_update", self.frames_per_update, 1)
        if self.address is not None and not (isinstance(self.address, str) and self.address):
            raise ValueError(
                f"address must be a Ray address such as 'auto' or '10.0.0.1:6379', "
                f"got address={self.address!r}."
            )


def parse_address(text: str) -> str:
    """Checks a ``--address`` value: ``auto``, ``HOST:PORT`` or ``ray://HOST:PORT``.

    Examples:
        >>> parse_address("10.0.0.1:6379"), parse_address("auto")
        ('10.0.0.1:6379', 'auto')
        >>> parse_address("10.0.0.1")  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        argparse.ArgumentTypeError: --address must be 'auto', HOST:PORT or ray://HOST:PORT ...
    """
    if text == "auto":
        return text
    host, sep, port = text.removeprefix("ray://").rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise argparse.ArgumentTypeError(
            "--address must be 'auto', HOST:PORT or ray://HOST:PORT (the address "
            f"`ray start --head` prints), got {text!r}."
        )
    return text
