"""What the course pipeline measures and draws: episodes on fresh courses and their means.

:class:`EpisodeTracker` follows every env across batches and records each completed episode,
:func:`window_means` averages a window of them, :func:`plot_curves` draws the runs' curves.
"""

from __future__ import annotations

from collections import deque
from pathlib import Path

import torch
from tensordict import TensorDictBase

from torchrl_ext._checks import check_int
from torchrl_ext.examples import _common


# ---------------------------------------------------------------------------- episodes
class EpisodeTracker:
    """Follows every env across batches and records each completed episode.

    An episode is on a *fresh* course when it started right after a regeneration (or at the
    first reset): CourseEnv regenerates after a finished lap, a truncation or an invalid course,
    and respawns on the same course after a crash (``out_of_bounds`` without either). Episodes
    that ended on an invalid course (``valid`` False) are not recorded.

    Args:
        num_envs (int): number of envs (rows of each batch).
        laps (int, optional): laps that finish an episode (the env's ``laps``). Defaults to 1.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> def flags(*rows):
        ...     return torch.tensor(rows).unsqueeze(-1)
        >>> nxt = {
        ...     "reward": flags([1.0, -1.0, 2.0], [0.5, 0.5, 0.5]),
        ...     "done": flags([False, True, False], [False, False, True]),
        ...     "truncated": flags([False, False, False], [False, False, True]),
        ...     "out_of_bounds": flags([False, True, False], [False, False, False]),
        ...     "checkpoints_passed": flags([1, 0, 2], [0, 0, 0]),
        ...     "laps": flags([0, 0, 0], [0, 0, 0]),
        ...     "valid": flags([True, True, True], [True, True, True]),
        ... }
        >>> tracker = EpisodeTracker(2)
        >>> [(e["return"], e["length"], e["fresh"]) for e in tracker.update(
        ...     TensorDict({"next": nxt}, [2, 3]))]
        [(0.0, 2.0, True), (1.5, 3.0, True)]
        >>> tracker.fresh.tolist()  # env 0 crashed (respawn), env 1 was truncated (new course)
        [False, True]
    """

    def __init__(self, num_envs: int, laps: int = 1) -> None:
        self.num_envs = check_int("num_envs", num_envs, minimum=1)
        self.laps = check_int("laps", laps, minimum=1)
        self.returns = torch.zeros(num_envs, dtype=torch.float64)
        self.checkpoints = torch.zeros(num_envs, dtype=torch.float64)
        self.lengths = torch.zeros(num_envs, dtype=torch.float64)
        self.fresh = torch.ones(num_envs, dtype=torch.bool)

    def update(self, batch: TensorDictBase) -> list[dict[str, float]]:
        """Accumulates a ``[num_envs, T]`` batch; returns the episodes that ended in it.

        Args:
            batch (TensorDictBase): a collected batch with the CourseEnv step results under
                ``"next"``.

        Returns:
            One dict per completed episode on a valid course, in time order: ``return``,
            ``checkpoints``, ``finished`` (1.0 if the lap was completed), ``length`` (steps),
            ``fresh`` and ``env`` (the row).
        """
        if batch.batch_size[0] != self.num_envs:
            raise ValueError(
                f"batch must have num_envs={self.num_envs} rows, got batch_size={batch.batch_size}."
            )
        nxt = {k: batch["next", k].squeeze(-1) for k in _TRACKED_KEYS}
        episodes = []
        for t in range(batch.batch_size[1]):
            episodes += self._step({k: v[:, t] for k, v in nxt.items()})
        return episodes

    def _step(self, step: dict[str, torch.Tensor]) -> list[dict[str, float]]:
        self.returns += step["reward"].double()
        self.checkpoints += step["checkpoints_passed"].double()
        self.lengths += 1.0
        done = step["done"]
        finished = step["laps"] >= self.laps
        episodes = [
            {
                "return": float(self.returns[i]),
                "checkpoints": float(self.checkpoints[i]),
                "finished": float(finished[i]),
                "length": float(self.lengths[i]),
                "fresh": bool(self.fresh[i]),
                "env": i,
            }
            for i in done.nonzero().flatten().tolist()
            if bool(step["valid"][i])
        ]
        crash_only = step["out_of_bounds"] & ~step["truncated"] & ~finished & step["valid"]
        self.fresh = torch.where(done, ~crash_only, self.fresh)
        self.returns[done] = 0.0
        self.checkpoints[done] = 0.0
        self.lengths[done] = 0.0
        return episodes


_TRACKED_KEYS = (
    "reward",
    "done",
    "truncated",
    "out_of_bounds",
    "checkpoints_passed",
    "laps",
    "valid",
)
_METRICS = ("return", "checkpoints", "finished", "length")


def window_means(episodes: deque[dict[str, float]] | list[dict[str, float]]) -> dict[str, float]:
    """Means of ``return``, ``checkpoints``, ``finished``, ``length`` over episodes (NaN if none).

    Examples:
        >>> window_means([{"return": 1.0, "checkpoints": 2.0, "finished": 0.0, "length": 9.0},
        ...               {"return": 3.0, "checkpoints": 4.0, "finished": 1.0, "length": 5.0}])
        {'return': 2.0, 'checkpoints': 3.0, 'finished': 0.5, 'length': 7.0}
    """
    if not episodes:
        return dict.fromkeys(_METRICS, float("nan"))
    return {m: sum(e[m] for e in episodes) / len(episodes) for m in _METRICS}


# ---------------------------------------------------------------------------- logging
def plot_curves(path: Path, curves: dict[str, list[dict[str, float]]], title: str) -> Path | None:
    """Draws fresh-course mean return and lap-finish rate against frames, one line per label.

    Args:
        path (Path): the PNG to write.
        curves (dict): label to a run's ``Result.curve``.
        title (str): figure title.

    Returns:
        ``path``, or ``None`` if matplotlib is not installed.
    """
    plt = _common.pyplot()
    if plt is None:
        return None
    fig, (left, right) = plt.subplots(1, 2, figsize=(8, 3.2))
    for label, curve in curves.items():
        frames = [row["frames"] for row in curve]
        left.plot(frames, [row["return"] for row in curve], label=label)
        right.plot(frames, [100 * row["finished"] for row in curve], label=label)
    left.set_ylabel("mean return per episode")
    right.set_ylabel("laps finished (%)")
    for ax in (left, right):
        ax.set_xlabel("frames")
        ax.grid(alpha=0.3)
    left.legend(loc="lower right", fontsize=8)
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=72)
    plt.close(fig)
    return path
