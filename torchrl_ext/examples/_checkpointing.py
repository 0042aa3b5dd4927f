"""What a pipeline's checkpoint holds, and how a run saves and restores it.

* :func:`save_run` / :func:`restore_run`: the state every pipeline checkpoints (networks through
  the loss, optimizer, env, collector, torch's generator, logger, the CSV log's length), read
  back as data only (``weights_only=True``); on resume the CSV rows logged after the checkpoint
  are dropped, so a resumed run's log equals an uninterrupted one. :func:`save_log` /
  :func:`restore_log` are the config, counters and logger part of it, for a pipeline that saves
  the rest its own way.
* :class:`Checkpoints`: a run's logger, minibatch generator and checkpoints, restored on resume,
  for the pipelines whose state is exactly that (``ppo``, ``course``, ``signalling``).
* :func:`load_loss`: a checkpoint's networks into a loss, in either parameter layout of
  TorchRL's losses (functional or not).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import torch

from torchrl_ext._compat import collector_carrier
from torchrl_ext.examples import _run_folder
from torchrl_ext.examples._common import ReturnWindow
from torchrl_ext.examples._run_folder import (
    RunOptions,
    csv_rows,
    find_checkpoint,
    load_checkpoint,
    make_logger,
    raise_if_stopped,
    save_checkpoint,
    trim_csv_logs,
)

#: A functional TorchRL loss keeps a network's parameters under ``<name>_params``; one built with
#: ``functional=False`` under the network's own name.
_FUNCTIONAL_NAMES = {
    "actor_network_params": "actor_network",
    "critic_network_params": "critic_network",
}


def load_loss(loss: torch.nn.Module, state: Mapping[str, Any]) -> None:
    """Loads a checkpoint's ``loss`` entry into ``loss``, whichever layout it was saved in.

    The PPO pipelines build :class:`~torchrl.objectives.ClipPPOLoss` with ``functional=False``;
    checkpoints whose keys follow a functional loss's layout (``actor_network_params.*``,
    ``critic_network_params.*``, as earlier releases of the examples saved them) load too. The
    parameters are the same tensors in the same order either way, so the optimizer's state
    loads unchanged. Anything else missing or unexpected raises as ``load_state_dict`` does.

    Examples:
        >>> import torch
        >>> from torchrl.objectives import ClipPPOLoss
        >>> from torchrl.modules import ProbabilisticActor
        >>> from tensordict.nn import TensorDictModule
        >>> _ = torch.manual_seed(0)
        >>> def networks():
        ...     logits = TensorDictModule(torch.nn.Linear(3, 2), ["obs"], ["logits"])
        ...     actor = ProbabilisticActor(
        ...         logits, ["logits"], distribution_class=torch.distributions.Categorical
        ...     )
        ...     return actor, TensorDictModule(torch.nn.Linear(3, 1), ["obs"], ["state_value"])
        >>> saved = ClipPPOLoss(*networks())  # functional, TorchRL's default
        >>> loss = ClipPPOLoss(*networks(), functional=False)
        >>> load_loss(loss, saved.state_dict())
        >>> saved_weight = saved.critic_network_params["module", "weight"]
        >>> bool((loss.critic_network.module.weight == saved_weight).all())
        True
    """
    expected = loss.state_dict().keys()
    loss.load_state_dict({_current_key(key, expected): value for key, value in state.items()})


def _current_key(key: str, expected: Any) -> str:
    """``key`` in ``loss``'s layout: a functional loss's parameter names renamed if needed."""
    if key in expected:
        return key
    renamed = ".".join(_FUNCTIONAL_NAMES.get(part, part) for part in key.split("."))
    return renamed if renamed in expected else key


def save_run(
    run: RunOptions,
    cfg: Any,
    counters: dict[str, Any],
    loss: Any,
    optim: torch.optim.Optimizer,
    env: Any,
    collector: Any,
    logger: Any,
    **parts: Any,
) -> None:
    """Saves everything a bitwise continuation needs as the run's new checkpoint.

    That is what :func:`save_log` saves, the networks (through ``loss``), the optimizer, the
    base env's state, the collector's state and next policy input (as nested dicts of tensors)
    and torch's global generator, plus the pipeline's own ``parts`` (stored under their names).
    Every part is tensors and plain data, so that :func:`load_checkpoint` reads it with
    ``weights_only=True``.
    """
    save_log(
        run,
        cfg,
        counters,
        logger,
        loss=loss.state_dict(),
        optim=optim.state_dict(),
        env=env.base_env.state_dict(),
        collector=collector.state_dict(),
        carrier=collector_carrier(collector).clone().to_dict(),  # the next policy input
        torch_rng=torch.get_rng_state(),
        **parts,
    )


def save_log(
    run: RunOptions,
    cfg: Any,
    counters: dict[str, Any],
    logger: Any,
    files: dict[str, Callable[[Path], None]] | None = None,
    **parts: Any,
) -> None:
    """Saves the config, the run's ``counters``, the logger and ``parts`` as a checkpoint.

    Every pipeline's checkpoint holds these, and the number of rows of each CSV log;
    :func:`restore_log` reads the run's side back. ``files`` maps a name in the checkpoint
    folder to what writes it (R2D2's replay folder). If a signal asked the run to stop, this
    raises :class:`RunInterrupted` once the checkpoint is saved.
    """
    state = {
        "config": dataclasses.asdict(cfg),
        "counters": counters,
        "logger": logger.state_dict(),
        "csv_rows": csv_rows(run.out),
        **parts,
    }
    save_checkpoint(run.out, state, **(files or {}))
    raise_if_stopped(run.out, counters["frames"])


def restore_run(
    run: RunOptions,
    state: dict[str, Any],
    loss: Any,
    optim: torch.optim.Optimizer,
    env: Any,
    collector: Any,
    logger: Any,
) -> dict[str, Any]:
    """Loads what :func:`save_run` saved into the run's objects; returns the run's counters.

    The logger and the CSV log as :func:`restore_log` leaves them; the pipeline restores its own
    parts from ``state``.
    """
    load_loss(loss, state["loss"])
    optim.load_state_dict(state["optim"])
    collector.load_state_dict(state["collector"])
    env.base_env.load_state_dict(state["env"])
    collector_carrier(collector).update(state["carrier"])
    torch.set_rng_state(state["torch_rng"])
    return restore_log(run, state, logger)


def restore_log(run: RunOptions, state: dict[str, Any], logger: Any) -> dict[str, Any]:
    """Loads the logger saved by :func:`save_log`; returns the run's counters.

    The CSV rows logged after the checkpoint are dropped (the resumed run logs them again).
    """
    logger.load_state_dict(state["logger"])
    if run.logger == "csv":
        trim_csv_logs(run.out, state["csv_rows"])
    return state["counters"]


class Checkpoints:
    """A run's logger, minibatch generator and checkpoints.

    Holds the run's objects; :meth:`start` restores them from the latest checkpoint of a resumed
    run, :meth:`save` writes a new one (see :func:`save_run`), the state of :attr:`generator`
    (the minibatch order's, seeded with ``cfg.seed``) included.

    Args:
        run (RunOptions): the run folder and how it runs.
        cfg (dataclass): the run's config.
        loss (nn.Module): the networks, through the loss (or a ``ModuleDict`` of losses).
        optim (torch.optim.Optimizer): the optimizer.
        env (TransformedEnv): the training env.
        collector (Collector): the collector.
    """

    def __init__(
        self,
        run: RunOptions,
        cfg: Any,
        loss: Any,
        optim: torch.optim.Optimizer,
        env: Any,
        collector: Any,
    ) -> None:
        self.run, self.cfg, self.loss, self.optim = run, cfg, loss, optim
        self.env, self.collector = env, collector
        self.generator = torch.Generator().manual_seed(cfg.seed)
        self.logger = make_logger(run.logger, run.out, run.resume)

    def start(self, **counters: Any) -> tuple[dict[str, Any], dict[str, Any]]:
        """The counters to start from and the checkpoint's state (empty for a new run).

        A new run starts from ``counters``; a resumed one restores every object from its
        latest checkpoint and continues from the counters saved there.
        """
        if not self.run.resume:
            return counters, {}
        state = load_checkpoint(find_checkpoint(self.run.out))
        objects = (self.loss, self.optim, self.env, self.collector, self.logger)
        counters = restore_run(self.run, state, *objects)
        self.generator.set_state(state["minibatch_generator"])
        return counters, state

    def start_window(
        self, size: int, target: float, **counters: Any
    ) -> tuple[dict[str, Any], ReturnWindow]:
        """:meth:`start` for a run that follows a :class:`ReturnWindow`; returns it too.

        A new run starts at 0 frames and seconds with an empty window and ``counters``.
        """
        fresh = {"frames": 0, "seconds": 0.0, "hit": None, "recent": [], **counters}
        counters, _ = self.start(**fresh)
        return counters, ReturnWindow.resumed(size, target, counters)

    def end_batch(self, row: dict[str, float], counters: dict[str, Any], previous: int) -> None:
        """Logs ``row`` and the seconds at the batch's frames; saves a checkpoint if one is due.

        ``counters`` are the run's after the batch, ``previous`` its frames before it (see
        :func:`~torchrl_ext.examples._run_folder.save_due`).
        """
        frames = counters["frames"]
        _run_folder.log_row(self.logger, {**row, "seconds": counters["seconds"]}, frames)
        if _run_folder.save_due(frames, previous, self.run, self.cfg.frames):
            self.save(counters)

    def save(self, counters: dict[str, Any], **parts: Any) -> None:
        """Saves the run's objects, ``counters`` and the pipeline's ``parts`` as a checkpoint."""
        objects = (self.loss, self.optim, self.env, self.collector, self.logger)
        generator = self.generator.get_state()
        save_run(self.run, self.cfg, counters, *objects, minibatch_generator=generator, **parts)
