"""Tapes as :class:`~torchrl_ext.objectives.R2D2Loss`'s input: whole episodes end to end.

A :class:`~torchrl_ext.data.Tape` sample lays whole episodes end to end into ``[R, L]`` rows,
``is_init`` at every episode start, ``validity_mask`` False on a masked tail, no
``learning_mask`` and no burn-in. Every valid record learns. An *episode end* is a valid
record followed by an episode start, by an invalid record or by the row's end: the n-step
sums stop there, and the value of its next observation comes from one extra step-mode pass of
the network over the episode ends, each from the state the recurrent pass reports after it
(its ``("next", state)`` outputs, set at the last step of every segment), as
:class:`~torchrl_ext.objectives._value_pass.WholeRows` does for GAE.

This module reads and checks a tape (:func:`read_tape`, :func:`check_tape_values`), runs the
network over it (:func:`tape_q`) and reduces the squared TD errors per episode
(:func:`episode_loss`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import torch
from tensordict import TensorDict, TensorDictBase
from tensordict.nn import TensorDictModuleBase
from tensordict.utils import NestedKey
from torchrl.modules import set_recurrent_mode

from torchrl_ext.objectives._r2d2_sample import (
    Window,
    action_checks,
    check_keys,
    next_key,
    per_record,
    read_action,
    read_weights,
    refuse_at,
    reward_check,
)


@dataclasses.dataclass
class TapeEpisodes:
    """Where the episodes of a ``[R, L]`` tape lie.

    Attributes:
        ends (torch.Tensor): bool ``[R, L]``, the last valid record of each episode.
        size (torch.Tensor): int64 ``[R, L]``, the number of valid records of each record's
            episode (0 on invalid records).
        count (torch.Tensor): 0-d int64, the number of episodes.
    """

    ends: torch.Tensor
    size: torch.Tensor
    count: torch.Tensor


def read_tape(tensordict: TensorDictBase, keys: Any, in_keys: list[NestedKey]) -> Window:
    """Reads a ``[R, L]`` tape's per-record inputs; its learning records are its valid ones.

    Args:
        tensordict (TensorDictBase): the ``[R, L]`` tape.
        keys (dataclass): the loss's configured keys (``R2D2Loss.tensor_keys``).
        in_keys (list of NestedKey): every key the loss reads (``R2D2Loss.in_keys``).

    Raises:
        TypeError: if ``tensordict`` is not a TensorDict, or a reward, action or importance
            weight is not a real number.
        ValueError: if the sample is not ``[R, L]``, holds a ``learning_mask`` (a
            :class:`~torchrl_ext.data.Sequence` window), lacks a key, or an entry has the
            wrong shape (a flag, the wrong dtype).
    """
    if not isinstance(tensordict, TensorDictBase):
        raise TypeError(f"tensordict must be a TensorDict sample, got {type(tensordict).__name__}.")
    if tensordict.ndim != 2:
        raise ValueError(
            "tensordict must be a [R, L] tape sample (Tape(length, rows=R), or a [L] tape "
            f"from Tape(length)), got batch shape {tuple(tensordict.shape)}."
        )
    if keys.learning_mask in tensordict.keys(True, True):
        raise ValueError(
            f"the sample holds {keys.learning_mask!r}, so it is a Sequence window, not a "
            "Tape: build R2D2Loss with sample_unit='sequence' and the unit's burn_in."
        )
    check_keys(tensordict, in_keys)
    valid = per_record(tensordict, keys.validity_mask)
    return Window(
        action=read_action(tensordict, keys),
        reward=per_record(tensordict, next_key(keys.reward), float_ok=True),
        done=per_record(tensordict, next_key(keys.done)),
        terminated=per_record(tensordict, next_key(keys.terminated)),
        is_init=per_record(tensordict, keys.is_init),
        valid=valid,
        learning=valid,
        weight=read_weights(tensordict, keys),
    )


def tape_episodes(tape: Window) -> TapeEpisodes:
    """The episode ends and sizes of a tape (an episode starts at column 0 and at ``is_init``)."""
    valid, is_init = tape.valid, tape.is_init.clone()
    is_init[:, 0] = True
    following = torch.ones_like(valid)
    following[:, :-1] = is_init[:, 1:] | ~valid[:, 1:]
    ends = valid & following
    rows, length = valid.shape
    offset = torch.arange(rows, device=valid.device).unsqueeze(1) * length
    episode = (is_init.long().cumsum(1) - 1 + offset).flatten()
    sizes = torch.zeros(rows * length, dtype=torch.long, device=valid.device)
    sizes.scatter_add_(0, episode, valid.flatten().long())
    size = torch.where(valid, sizes[episode].view(rows, length), 0)
    return TapeEpisodes(ends=ends, size=size, count=(sizes > 0).sum())


def check_tape_values(tape: Window, episodes: TapeEpisodes, num_actions: int, keys: Any) -> None:
    """Refuses tapes that would corrupt the loss, reading one flag per check at once.

    Args:
        tape (Window): the tape's per-record inputs.
        episodes (TapeEpisodes): where its episodes lie.
        num_actions (int): the number of action values the network gives.
        keys (dataclass): the loss's configured keys.

    Raises:
        ValueError: if a done record does not end its episode (no ``is_init`` after it), a
            reward of a valid record or an importance weight is not finite (or a weight is
            negative, or differs within an episode), or an action is not a whole number in
            ``[0, A)`` (or not one-hot).
    """
    checks = [
        _done_check(tape, episodes),
        reward_check(tape, 0, keys),
        *_episode_weight_checks(tape, keys),
        *action_checks(tape.action, num_actions, keys),
    ]
    checks = [check for check in checks if check is not None]
    failed = torch.stack([bad for bad, _ in checks]).tolist()
    for (_, refuse), bad in zip(checks, failed, strict=True):
        if bad:
            refuse()


def _done_check(tape: Window, episodes: TapeEpisodes) -> tuple:
    """A valid ``done`` record must end its episode: the next record starts one (or is invalid)."""
    bad = tape.done & tape.valid & ~episodes.ends

    def refuse():
        row, col = (int(i) for i in bad.nonzero()[0])
        raise ValueError(
            f"record {col} of tape {row} is done but the next record does not start an "
            "episode (is_init False): a tape must start a new episode after every done "
            "record, as Tape lays them out."
        )

    return bad.any(), refuse


def _episode_weight_checks(tape: Window, keys: Any) -> list:
    """Importance weights: finite, ``>= 0``, the same over each episode's records."""
    weight = tape.weight
    if weight is None:
        return []
    key = keys.priority_weight
    bad = ~(torch.isfinite(weight) & (weight >= 0))
    checks = [(bad.any(), lambda: refuse_at(key, weight, bad, 0, "be finite and >= 0"))]
    if weight.shape[1] > 1:
        inside = tape.valid[:, 1:] & tape.valid[:, :-1] & ~tape.is_init[:, 1:]
        varies = inside & (weight[:, 1:] != weight[:, :-1])

        def not_one_per_episode():
            raise ValueError(
                f"{key!r} must hold one importance weight per episode of a tape (as Tape "
                "carries each draw's weight to its episode's records); it varies inside one."
            )

        checks.append((varies.any(), not_one_per_episode))
    return checks


def tape_q(
    network: TensorDictModuleBase,
    tensordict: TensorDictBase,
    ends: torch.Tensor,
    state_keys: tuple,
    observation_keys: list[NestedKey],
    network_in_keys: list[NestedKey],
    action_value_key: NestedKey,
    check_q: Callable[[torch.Tensor | None, int, int], torch.Tensor],
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(Q, Q at the next observation)``, both ``[R, L, A]``, of the network over a tape.

    The network runs in recurrent mode over the rows (resetting at ``is_init``, from the
    stored state there), then in step mode over the episode ends' next observations, each from
    the state after its record. The next-observation values are detached.

    Args:
        network (TensorDictModuleBase): the Q-network, with the parameters to use.
        tensordict (TensorDictBase): the ``[R, L]`` tape.
        ends (torch.Tensor): bool ``[R, L]``, the episode ends.
        state_keys (tuple): ``(state key, ("next", state) key)`` of every memory.
        observation_keys (list of NestedKey): the network's inputs other than states and flags.
        network_in_keys (list of NestedKey): every input of the network.
        action_value_key (NestedKey): where the network writes its Q-values.
        check_q (callable): ``check_q(q, R, L)`` raises unless ``q`` (``None`` when the network
            wrote none) is ``[R, L, A]``, and returns it.
    """
    with set_recurrent_mode(True):
        rows = network(tensordict.select(*network_in_keys))
    q = check_q(rows.get(action_value_key, None), *tensordict.shape)
    next_q = torch.cat([q.detach()[:, 1:], q.detach()[:, -1:]], 1)
    if not bool(ends.any()):
        return q, next_q
    boot = TensorDict(
        {key: tensordict.get(next_key(key))[ends] for key in observation_keys},
        [int(ends.sum())],
        device=q.device,
    )
    for state, after in state_keys:
        boot.set(state, rows.get(after)[ends])
    if "is_init" in network_in_keys:
        boot.set("is_init", torch.zeros(boot.shape[0], 1, dtype=torch.bool, device=q.device))
    with set_recurrent_mode(False), torch.no_grad():
        boot_q = network(boot).get(action_value_key)
    next_q[ends] = boot_q.to(next_q.dtype)
    return q, next_q


def episode_loss(td: torch.Tensor, tape: Window, episodes: TapeEpisodes) -> torch.Tensor:
    """``0.5 * mean over episodes of (weight * mean of TD**2 over the episode's records)``.

    Args:
        td (torch.Tensor): ``[R, L]`` TD errors, zero on invalid records.
        tape (Window): the tape's per-record inputs (its importance weights, if any).
        episodes (TapeEpisodes): where its episodes lie.
    """
    per_record = td.pow(2) / episodes.size.clamp(min=1)
    if tape.weight is not None:
        per_record = per_record * tape.weight.to(per_record.dtype)
    return 0.5 * per_record.sum() / episodes.count.clamp(min=1)
