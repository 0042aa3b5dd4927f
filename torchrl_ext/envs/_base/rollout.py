"""The outputs of a policy-free rollout: fresh ``[N, T]`` tensors, laid out as the step buffers."""

from __future__ import annotations

from typing import Any

import torch
from tensordict import TensorDict

from torchrl_ext.envs._base.layout import DONE_KEYS, Layout, make_td
from torchrl_ext.envs._memory import empty_outputs


def rollout_outputs(layout: Layout, steps: int) -> tuple[dict, dict]:
    """Fresh ``[N, T]`` outputs of a ``T``-step rollout, allocated in one call.

    Returns the kernel's outputs (``"root"`` and ``"next"`` observation dicts, ``"reward"`` as
    ``[L, N, T]`` rows and the three ``[N, T, 1]`` flags) and the root's flags, all False.
    """
    n = layout.num_envs
    keys = layout.obs_keys
    obs = [getattr(layout, group)[k] for group in ("root", "next") for k in keys]
    flags = [layout.flag_buffer[0]] * (2 * len(DONE_KEYS))
    layouts = [((n, steps, *b.shape[1:]), b.dtype) for b in (*obs, *flags)]
    rows = layout.reward_rows
    layouts.append(((rows.shape[0], n, steps), rows.dtype))
    fresh = iter(empty_outputs(layouts, layout.device))
    out: dict[str, Any] = {
        "root": {k: next(fresh) for k in keys},
        "next": {k: next(fresh) for k in keys},
    }
    out.update((key, next(fresh)) for key in DONE_KEYS)
    root_flags = {key: next(fresh).zero_() for key in DONE_KEYS}
    out["reward"] = next(fresh)
    return out, root_flags


def rollout_td(layout: Layout, actions: dict, out: dict, root_flags: dict) -> TensorDict:
    """The rollout's TensorDict: ``[N, T]``, last dim named ``"time"``, nested keys grouped."""
    steps = out["reward"].shape[-1]
    batch = torch.Size([layout.num_envs, steps])
    nxt = dict(out["next"])
    nxt.update(zip(layout.reward_keys, out["reward"].unsqueeze(-1).unbind(0), strict=True))
    nxt.update((key, out[key]) for key in DONE_KEYS)
    root = dict(out["root"])
    root.update(actions)
    root.update(root_flags)
    for group in layout.done_groups:  # a group's flags are copies of the env's
        nxt.update(((group, key), out[key].clone()) for key in DONE_KEYS)
        root.update(((group, key), root_flags[key].clone()) for key in DONE_KEYS)
    root["next"] = make_td(nxt, batch, layout.device)
    td = make_td(root, batch, layout.device)
    td.refine_names(..., "time")
    return td
