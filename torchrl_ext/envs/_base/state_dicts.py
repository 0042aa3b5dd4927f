"""Saving and restoring an env's state: what :meth:`WarpEnv.state_dict` holds and how it loads.

The state is a flat mapping of names to tensors: the seed's two words, the per-env counters,
the done flags and last outputs, and every state array the env declared. Loading checks every
key, dtype, shape and value before anything is written, so a refused state leaves the env as it
was; values are copied into the live arrays, so recorded launches and graphs stay valid.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch

from torchrl_ext._checks import check_bool
from torchrl_ext.envs._base.actions import key_name
from torchrl_ext.envs._base.layout import Layout


def require(name: str, values: torch.Tensor, ok: torch.Tensor, why: str) -> None:
    """Raise ``ValueError`` naming ``state_dict[name]`` unless ``ok`` (``values``' test) holds."""
    if not bool(ok.all()):
        bad = values[~ok][0].item()
        raise ValueError(
            f"state_dict[{name!r}] holds {bad!r}, which no run of this env reaches ({why}); "
            "load a state saved by state_dict()."
        )


#: The largest counter value from which one more count cannot overflow int32.
LAST_COUNT = 2**31 - 2


def check_base_values(state: Mapping[str, torch.Tensor], horizon: int) -> None:
    """The base's value checks: counters, seed words and finite floats.

    Counters are never negative; an episode counts at most ``horizon`` steps (the time limit,
    or fewer by the env's own rules: the kernels stop counting there, also when a finished
    episode is stepped on without a reset), and both can count once more without overflowing
    int32. The seed words are uint32; every float entry is finite (no step makes
    NaN or infinity from finite state).
    """
    last = min(horizon, LAST_COUNT)
    steps, episode = state["steps"], state["episode"]
    for name in ("steps", "episode"):
        require(name, state[name], state[name] >= 0, "counters are never negative")
    require("steps", steps, steps <= last, f"an episode lasts at most {last} steps")
    require("episode", episode, episode <= LAST_COUNT, f"episodes counted are at most {LAST_COUNT}")
    words = state["seed"]
    require("seed", words, (words >= 0) & (words < 2**32), "seed words are uint32")
    for name, values in state.items():
        if values.is_floating_point():
            require(name, values, values.isfinite(), "state and outputs are finite")


def check_ranges(
    state: Mapping[str, torch.Tensor], ranges: Mapping[str, tuple[float, float]]
) -> None:
    """Every entry named in ``ranges`` lies in its ``(low, high)``, both ends included."""
    for name, (low, high) in ranges.items():
        values = state[name]
        require(name, values, (values >= low) & (values <= high), f"values lie in [{low}, {high}]")


def _check_keys(given: set, expected: set) -> None:
    missing, extra = sorted(expected - given), sorted(given - expected, key=repr)
    if missing or extra:
        raise ValueError(
            f"state_dict must have exactly the keys of state_dict(); missing={missing}, "
            f"unexpected={extra}. Load a state saved by an env built with the same arguments."
        )


def _check_entry(name: str, value: Any, ref: torch.Tensor, num_envs: int) -> None:
    if not isinstance(value, torch.Tensor):
        raise TypeError(f"state_dict[{name!r}] must be a torch.Tensor, got {type(value).__name__}.")
    if value.dtype != ref.dtype:
        raise TypeError(
            f"state_dict[{name!r}] must have dtype {ref.dtype}, got dtype={value.dtype}."
        )
    if value.is_meta:
        raise ValueError(
            f"state_dict[{name!r}] is a meta tensor, which holds no values; pass the tensors "
            "state_dict() returned."
        )
    if value.shape == ref.shape:
        return
    if value.dim() == ref.dim() and ref.dim() > 0 and ref.shape[0] == num_envs:
        raise ValueError(
            f"state_dict[{name!r}] has shape {tuple(value.shape)}: it comes from an env with "
            f"num_envs={value.shape[0]} (or another configuration), this env has "
            f"num_envs={num_envs} and needs shape {tuple(ref.shape)}; load it into an "
            "env built with the same arguments."
        )
    raise ValueError(
        f"state_dict[{name!r}] must have shape {tuple(ref.shape)}, got shape={tuple(value.shape)}."
    )


def checked_state(
    env_name: str,
    state_dict: Any,
    strict: Any,
    assign: Any,
    reference: Mapping[str, torch.Tensor],
    num_envs: int,
    device: torch.device,
) -> dict[str, torch.Tensor] | None:
    """``state_dict`` with every key, dtype and shape checked against ``reference``.

    Returns ``None`` for an empty mapping (what a TorchRL collector saves for its env). Values
    are checked by the caller, on the returned tensors (moved to ``device``).
    """
    strict, assign = check_bool("strict", strict), check_bool("assign", assign)
    if not isinstance(state_dict, Mapping):
        raise TypeError(
            f"state_dict must be a mapping from {env_name}.state_dict(), got "
            f"state_dict of type {type(state_dict).__name__}."
        )
    if not state_dict:
        return None
    if not strict:
        raise ValueError(
            "strict must be True: a WarpEnv restores its whole state, got strict=False."
        )
    if assign:
        raise ValueError(
            "assign must be False: a WarpEnv copies values into its own arrays, got assign=True."
        )
    _check_keys(set(state_dict), set(reference))
    state = {}
    for name, ref in reference.items():
        value = state_dict[name]
        _check_entry(name, value, ref, num_envs)
        state[name] = value.detach().to(device, copy=True)  # never a view of a live array
    return state


def base_state(layout: Layout) -> dict[str, torch.Tensor]:
    """Live views of the base's state: counters, flags, last rewards and observations.

    Not the actions and reset mask (rewritten before every launch that reads them), nor the
    seed (saved as its two words by the env). One reward entry is saved as ``"reward"``,
    several as ``"reward.<key>"``; observations as ``"next.<key>"`` and ``"root.<key>"``.
    """
    state = {"steps": layout.steps, "episode": layout.episode, **layout.flags}
    rows = dict(zip(layout.reward_keys, layout.reward_rows, strict=True))
    if len(rows) == 1:
        state["reward"] = next(iter(rows.values()))
    else:
        state.update((f"reward.{key_name(k)}", row) for k, row in rows.items())
    for which in ("next", "root"):
        for key, val in getattr(layout, which).items():
            state[f"{which}.{key_name(key)}"] = val
    return state
