"""What the example pipelines share in training: checkpointed state, seeding, bookkeeping.

Each pipeline (:mod:`~torchrl_ext.examples.ppo_cartpole`,
:mod:`~torchrl_ext.examples.r2d2_cartpole`, :mod:`~torchrl_ext.examples.ppo_course`,
:mod:`~torchrl_ext.examples.mappo_signalling`) reads top to bottom on its own: its env, networks,
loss and training loop. Run folders and checkpoint folders live in
:mod:`~torchrl_ext.examples._run_folder`, loggers in :mod:`~torchrl_ext.examples._run_logs`,
the signal handling in :mod:`~torchrl_ext.examples._run_signals`, what a checkpoint holds in
:mod:`~torchrl_ext.examples._checkpointing`, the shared ``Config`` fields in
:mod:`~torchrl_ext.examples._config` and the PPO pieces in :mod:`~torchrl_ext.examples._ppo`.
These pieces are common to the training loops:

* :class:`ReturnWindow`, :class:`TargetResult`, :func:`seeded`: the running mean return and its
  first crossing of the target, what a run reached, training under a seeded global generator.
* :func:`train_seeds`: from the command line to one result per seed.
* :func:`gradient_step`, :func:`mean_first_return`, :func:`completed_returns`,
  :func:`check_is_init`: a clipped step, the final evaluation, episode returns, the mask check.
* :class:`Stopwatch`, :func:`plot_curves` and :func:`setup` (one torch thread, torchrl's log
  lines without colours).
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import math
import sys
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import torch
from tensordict import TensorDictBase
from torchrl.envs.utils import ExplorationType, set_exploration_type

from torchrl_ext.examples._config import config_of, resumed_config
from torchrl_ext.examples._run_folder import (
    catch_signals,
    check_new_run,
    runs_of,
    start_run,
)

#: torchrl's line layout without its colour codes.
PLAIN_TORCHRL_FORMAT = "%(asctime)s [%(name)s][%(levelname)s] %(message)s"

T = TypeVar("T")


def setup() -> None:
    """Script-wide settings: one torch thread (the measured setting), plain torchrl log lines.

    torchrl's log lines go to stderr, so that stdout holds only the example's own lines.
    """
    torch.set_num_threads(1)
    plain_torchrl_logs()
    for handler in logging.getLogger("torchrl").handlers:
        if getattr(handler, "stream", None) in (sys.stdout, sys.__stdout__):
            handler.setStream(sys.stderr)


def plain_torchrl_logs() -> None:
    """Writes torchrl's log lines without ANSI colour codes unless they go to a terminal.

    torchrl colours every line of its ``"torchrl"`` logger; redirected to a file (``> run.log``)
    the colour codes would end up in the file as raw escape sequences.

    Examples:
        >>> import io, logging
        >>> handler = logging.StreamHandler(io.StringIO())
        >>> logging.getLogger("torchrl").addHandler(handler)
        >>> plain_torchrl_logs()
        >>> handler.formatter._fmt
        '%(asctime)s [%(name)s][%(levelname)s] %(message)s'
        >>> logging.getLogger("torchrl").removeHandler(handler)
    """
    for handler in logging.getLogger("torchrl").handlers:
        isatty = getattr(getattr(handler, "stream", None), "isatty", None)
        if callable(isatty) and isatty():
            continue
        handler.setFormatter(logging.Formatter(PLAIN_TORCHRL_FORMAT))


def device(name: str) -> torch.device:
    """The torch device named on the command line; ``cuda`` must exist.

    Examples:
        >>> device("cpu")
        device(type='cpu')
    """
    dev = torch.device(name)
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise SystemExit(f"--device {name}: no CUDA device is available; use --device cpu.")
    return dev


def seeded(seed: int, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """``fn(*args, **kwargs)`` with torch's global generator seeded with ``seed``.

    The network initialization and the actions the collector draws use that generator; the
    caller's generator state is left as it was (:func:`torch.random.fork_rng`).

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
    """The mean of the last ``size`` episode values, and when it first reached ``target``.

    The target counts only once the window is full.

    Args:
        size (int): episodes averaged.
        target (float): the mean whose first crossing is recorded in :attr:`hit`.
        values (iterable, optional): the window's values so far (a resumed run's). Defaults to
            none.
        hit (tuple, optional): ``(frames, seconds)`` of an earlier crossing. Defaults to ``None``.

    Examples:
        >>> window = ReturnWindow(2, target=5.0)
        >>> window.update([6.0], frames=10, seconds=1.0), window.hit
        (6.0, None)
        >>> window.update([4.0, 7.0], frames=20, seconds=2.0), window.hit
        (5.5, (20, 2.0))
        >>> window.reached()
        {'frames_to_target': 20, 'seconds_to_target': 2.0}
    """

    def __init__(
        self, size: int, target: float, values: Iterable[float] = (), hit: tuple | None = None
    ) -> None:
        self.recent = deque(values, maxlen=size)
        self.target = target
        self.hit = hit

    @classmethod
    def resumed(cls, size: int, target: float, counters: dict[str, Any]) -> ReturnWindow:
        """The window saved in a run's ``counters`` (see :func:`window_counters`)."""
        return cls(size, target, counters["recent"], counters["hit"])

    @property
    def mean(self) -> float:
        """Mean of the window (NaN while empty)."""
        return sum(self.recent) / len(self.recent) if self.recent else math.nan

    def update(self, values: Iterable[float], frames: int, seconds: float) -> float:
        """Adds the values of the episodes that ended; returns the new mean."""
        self.recent.extend(values)
        mean = self.mean
        if self.hit is None and len(self.recent) == self.recent.maxlen and mean >= self.target:
            self.hit = (frames, seconds)
        return mean

    def reached(self) -> dict[str, Any]:
        """``frames_to_target`` and ``seconds_to_target`` (``None`` while not reached)."""
        frames, seconds = self.hit or (None, None)
        return {"frames_to_target": frames, "seconds_to_target": seconds}


def collector(env: Any, policy: Any, cfg: Any, device: torch.device) -> Any:
    """TorchRL's :class:`~torchrl.collectors.Collector` of ``[num_envs, steps]`` batches, endless.

    The training loop counts the frames and stops the collector itself.
    """
    from torchrl.collectors import Collector

    batch = cfg.frames_per_batch
    return Collector(env, policy, frames_per_batch=batch, total_frames=-1, device=device)


def window_counters(
    frames: int, seconds: float, window: ReturnWindow, **more: Any
) -> dict[str, Any]:
    """A run's counters as its checkpoint stores them: frames, seconds, the window, ``more``.

    Examples:
        >>> window = ReturnWindow(2, target=1.0, values=[0.5])
        >>> window_counters(64, 1.5, window, curve=[(64, 0.5)])
        {'frames': 64, 'seconds': 1.5, 'hit': None, 'recent': [0.5], 'curve': [(64, 0.5)]}
    """
    recent = list(window.recent)
    return {"frames": frames, "seconds": seconds, "hit": window.hit, "recent": recent, **more}


def reached(target: float, frames: int | None, seconds: float | None, spec: str = ".1f") -> str:
    """Says when the mean return reached ``target``.

    Examples:
        >>> reached(475.0, 34816, 12.34)
        'mean return reached 475 after 34,816 frames (12.3 s)'
        >>> reached(400.0, None, None)
        'mean return never reached 400'
    """
    if frames is None:
        return f"mean return never reached {target:g}"
    return f"mean return reached {target:g} after {frames:,} frames ({seconds:{spec}} s)"


def train_seeds(
    args: Any,
    pipeline: str,
    train: Callable[..., T],
    summary: Callable[[T], str],
    config: Callable[..., Any],
    quick: dict[str, Any],
    **fields: Any,
) -> list[T]:
    """Trains each run the command line asks for (see :func:`runs_of`) and prints its summary.

    ``pipeline`` names the runs' folder under ``runs/`` (``runs/<pipeline>/seed<N>``).

    A new run takes its config from :func:`~torchrl_ext.examples._config.config_of` and writes
    it to ``config.json``; a resumed one takes it from its checkpoint (see
    :func:`~torchrl_ext.examples._config.resumed_config`). Every run's config and folder are
    checked before the first one starts. SIGINT and SIGTERM stop a run after a
    checkpoint (:class:`RunInterrupted`).
    """
    setup()
    runs = list(runs_of(args, pipeline))
    configs = []
    for seed, run in runs:
        if run.resume:
            configs.append(resumed_config(args, run, config))
        else:
            check_new_run(run.out, run.overwrite)
            try:
                configs.append(config_of(args, config, quick, seed=seed, **fields))
            except (TypeError, ValueError) as error:  # a hyperparameter the config refuses
                raise SystemExit(f"{pipeline}: {error}") from None
    results = []
    with catch_signals():
        for (_, run), cfg in zip(runs, configs, strict=True):
            if cfg is None:
                continue
            if not run.resume:
                start_run(run, dataclasses.asdict(cfg))
            results.append(train(cfg, run, quick=args.quick))
            print(summary(results[-1]), flush=True)
    return results


@dataclasses.dataclass
class TargetResult:
    """What a run aiming at a mean return reached; a pipeline's ``Result`` adds its own fields.

    Args:
        config (Config): the run's hyperparameters.
        frames_to_target (int or None): frames collected when the mean return first reached
            ``config.target`` (``None`` if it never did).
        seconds_to_target (float or None): training wall time at that point.
        final_eval (float): mean return of the deterministic (greedy) evaluation.
        frames (int): frames collected in total.
        seconds (float): training wall time (a resumed run counts its earlier part).
        out (Path): the run folder.
    """

    config: Any
    frames_to_target: int | None
    seconds_to_target: float | None
    final_eval: float
    frames: int
    seconds: float
    out: Path

    @classmethod
    def of(
        cls,
        cfg: Any,
        window: ReturnWindow,
        final_eval: float,
        frames: int,
        seconds: float,
        out: Path,
        **more: Any,
    ) -> Any:
        """The result of a run whose target crossing ``window`` recorded, with ``more`` fields."""
        run = {"final_eval": final_eval, "frames": frames, "seconds": seconds, "out": out}
        return cls(cfg, **window.reached(), **run, **more)


# ---------------------------------------------------------------------------- timing
class Stopwatch:
    """Accumulates wall time per named section.

    Examples:
        >>> watch = Stopwatch()
        >>> with watch("update"):
        ...     pass
        >>> list(watch.totals), watch.totals["update"] >= 0.0
        (['update'], True)
    """

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


def pyplot() -> Any:
    """Pyplot of matplotlib (Agg backend), or ``None`` and a line on stderr if not installed."""
    try:
        import matplotlib
    except ImportError:
        print("no plot: it needs matplotlib (pip install 'torchrl_ext[examples]')", file=sys.stderr)
        return None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def plot_curves(
    path: Path,
    curves: dict[str, list[tuple[float, float]]],
    target: float,
    title: str,
    ylabel: str = "mean episode return",
) -> Path | None:
    """Draws each labelled ``(frames, value)`` curve into the PNG ``path``, ``target`` dashed.

    Returns ``path``, or ``None`` if matplotlib is not installed.
    """
    plt = pyplot()
    if plt is None:
        return None
    fig, ax = plt.subplots(figsize=(6, 3.6))
    for label, curve in curves.items():
        ax.plot([c[0] for c in curve], [c[1] for c in curve], label=label)
    ax.axhline(target, color="gray", linestyle="--", linewidth=1, label=f"target {target:g}")
    ax.set_xlabel("frames")
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.legend(loc="lower right", fontsize=8)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def gradient_step(total: torch.Tensor, optim: torch.optim.Optimizer, max_grad_norm: float) -> None:
    """One optimizer step on ``total``, each parameter group's gradient clipped on its own."""
    optim.zero_grad(set_to_none=True)
    total.backward()
    for group in optim.param_groups:
        torch.nn.utils.clip_grad_norm_(group["params"], max_grad_norm)
    optim.step()


def mean_first_return(env: Any, policy: Any, episodes: int, device: torch.device | str) -> float:
    """Mean return of each of ``env``'s ``episodes`` envs' first episode, deterministic actions.

    Steps until every env has finished one episode, then closes ``env``.
    """
    returns = torch.full((episodes,), float("nan"), device=device)
    td = env.reset()
    with torch.no_grad(), set_exploration_type(ExplorationType.DETERMINISTIC):
        while bool(returns.isnan().any()):
            td, next_root = env.step_and_maybe_reset(policy(td))
            ended = td["next", "done"].squeeze(-1) & returns.isnan()
            returns[ended] = td["next", "episode_reward"].squeeze(-1)[ended]
            td = next_root
    env.close()
    return float(returns.mean())


def completed_returns(
    batch: TensorDictBase, key: tuple[str, ...] = ("next", "episode_reward")
) -> torch.Tensor:
    """Returns of the episodes that ended inside ``batch`` (1-D, in time order per env).

    ``key`` names what is read at each episode's last step; by default the return that
    ``RewardSum`` accumulates.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> done = torch.tensor([[False, True, False], [False, False, True]]).unsqueeze(-1)
        >>> ret = torch.arange(6.0).view(2, 3, 1)
        >>> batch = TensorDict({"next": {"done": done, "episode_reward": ret}}, [2, 3])
        >>> completed_returns(batch).tolist()
        [1.0, 5.0]
    """
    done = batch["next", "done"].squeeze(-1)
    return batch[key].squeeze(-1)[done]


def check_is_init(batch: Any, first: bool) -> torch.Tensor:
    """Asserts ``is_init`` marks exactly the episode starts of a ``[N, T]`` batch; returns it.

    The starts are the steps after a ``done`` (and, with a ``StepCounter``, those at step 0).
    """
    is_init = batch["is_init"].squeeze(-1)
    done = batch["next", "done"].squeeze(-1)
    if "step_count" in batch.keys():
        starts = batch["step_count"].squeeze(-1) == 0
        assert torch.equal(is_init, starts), "is_init must mark exactly the episode starts"
    assert torch.equal(is_init[:, 1:], done[:, :-1]), "is_init must be done one step later"
    if first:
        assert bool(is_init[:, 0].all()), "every env starts an episode in the first batch"
    return is_init
