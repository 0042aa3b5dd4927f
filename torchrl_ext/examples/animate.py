"""Animations of trained agents: ``python -m torchrl_ext.examples animate RUN [--gif PATH]``.

Loads the policy saved in a run folder of ``ppo`` (CartPole, LSTM or MLP) or ``course``, lets it
act deterministically in one fresh env and writes every ``--stride``-th picture of
:func:`torchrl_ext.envs.render_frame` into an animated GIF (default ``RUN/agent.gif``). The
animations on the results pages are made with::

    python -m torchrl_ext.examples ppo --seeds 0
    python -m torchrl_ext.examples animate runs/ppo/seed0 --gif docs/_static/ppo_cartpole.gif
    python -m torchrl_ext.examples course --seeds 0
    python -m torchrl_ext.examples animate runs/course/seed0 --gif docs/_static/ppo_course.gif
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import torch
from torchrl.envs import ExplorationType, set_exploration_type

from torchrl_ext.envs import render_frame
from torchrl_ext.examples import _checkpointing, _common, _run_folder

#: Seed of the env the animation is recorded in (not a training seed).
ANIMATION_SEED = 7_000_003


def load_agent(run: Path, device: torch.device) -> tuple[Any, Any]:
    """The deterministic policy and a one-env env of the pipeline that wrote ``run``."""
    state = _run_folder.load_checkpoint(_run_folder.find_checkpoint(run))
    config = state["config"]
    if "envs_per_minibatch" in config:  # a ppo run
        from torchrl_ext.examples import ppo_cartpole as pipeline

        cfg = pipeline.Config(**config)
        actor, critic = pipeline.make_agent(cfg, obs_dim=2)
        primers = pipeline.memories(actor, critic)
        env = pipeline.make_env(cfg, 1, ANIMATION_SEED, primers, device)
    elif "max_steps" in config:  # a course run
        from torchrl_ext.examples import ppo_course as pipeline

        cfg = pipeline.Config(**config)
        env = pipeline.make_env(cfg, 1, ANIMATION_SEED, device)
        actor, critic = pipeline.make_agent(cfg, env.observation_spec["observation"].shape[-1])
    else:
        raise SystemExit(f"animate: {run} holds no ppo or course run.")
    loss = pipeline.make_loss(cfg, actor.to(device), critic.to(device))
    _checkpointing.load_loss(loss, state["loss"])
    return actor, env


@torch.no_grad()
def record(actor: Any, env: Any, frames: int, stride: int, size: int) -> list[torch.Tensor]:
    """``frames`` pictures, one every ``stride`` steps of the deterministic policy."""
    pictures = []
    td = env.reset()
    with set_exploration_type(ExplorationType.DETERMINISTIC):
        for step in range(frames * stride):
            if step % stride == 0:
                pictures.append(render_frame(env, size=size).cpu())
            _, td = env.step_and_maybe_reset(actor(td))
    return pictures


def write_gif(path: Path, pictures: list[torch.Tensor], fps: int) -> Path:
    """Writes the uint8 ``[H, W, 3]`` pictures as a looping GIF (Pillow)."""
    from PIL import Image

    images = [Image.fromarray(p.numpy()).quantize(colors=32) for p in pictures]
    path.parent.mkdir(parents=True, exist_ok=True)
    images[0].save(path, save_all=True, append_images=images[1:], duration=1000 // fps, loop=0)
    return path


def main(args: argparse.Namespace) -> Path:
    """Runs ``python -m torchrl_ext.examples animate`` (see ``--help``)."""
    _common.setup()
    device = _common.device(args.device)
    actor, env = load_agent(args.run, device)
    pictures = record(actor, env, args.frames, args.stride, args.size)
    path = write_gif(args.gif or Path(args.run) / "agent.gif", pictures, args.fps)
    print(f"animation: {path} ({len(pictures)} frames, {path.stat().st_size / 1024:.0f} KiB)")
    return path
