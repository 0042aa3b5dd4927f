"""An animated GIF of the agent saved in a run folder, for every pipeline whose env can be drawn.

    python examples/animate.py RUN [--gif PATH] [--frames 64] [--stride 4] [--size 160] [--fps 20]

Loads the policy of RUN's latest checkpoint with ``runs.load_policy`` (any pipeline), lets it act
deterministically in one fresh env of its pipeline (``acting_env``) and writes every
``--stride``-th picture of ``torchrl_ext.envs.render_frame`` into a looping GIF (``RUN/agent.gif``
by default). ``render_frame`` draws CartPoleEnv and CourseEnv; a run of any other env (POPGym,
signalling) is refused. Needs Pillow (``pip install pillow``; ``torchrl_ext[examples]`` brings it
with matplotlib). The animations on the results pages are made with::

    python examples/ppo_cartpole.py --seeds 0
    python examples/animate.py runs/ppo_cartpole/seed0 --gif docs/_static/ppo_cartpole.gif
    python examples/ppo_course.py --seeds 0
    python examples/animate.py runs/ppo_course/seed0 --gif docs/_static/ppo_course.gif
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import tempfile
from pathlib import Path
from typing import Any

import runs
import torch
from torchrl.envs.utils import ExplorationType, set_exploration_type

from torchrl_ext.envs import CartPoleEnv, CourseEnv, render_frame

#: Seed of the env the animation is recorded in (not a training seed).
ANIMATION_SEED = 7_000_003
#: The envs ``render_frame`` draws.
DRAWN = (CartPoleEnv, CourseEnv)


def make_parser() -> argparse.ArgumentParser:
    """The command line: the run folder, the GIF and its size."""
    parser = runs.Parser(description=__doc__.split("\n\n")[0])
    parser.add_argument("run", type=Path, help="run folder with a checkpoint, e.g. runs/x/seed0")
    parser.add_argument(
        "--gif", type=Path, default=None, metavar="PATH", help="output (default: RUN/agent.gif)"
    )
    parser.add_argument(
        "--frames", type=int, default=64, metavar="N", help="pictures (default: 64)"
    )
    parser.add_argument(
        "--stride", type=int, default=4, metavar="N", help="env steps between pictures (default: 4)"
    )
    parser.add_argument(
        "--size", type=int, default=160, metavar="PX", help="height and width (default: 160)"
    )
    parser.add_argument(
        "--fps", type=int, default=20, metavar="N", help="pictures per second (default: 20)"
    )
    parser.add_argument("--device", default="cpu", help="torch device of env and policy")
    return parser


def check_options(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """Refuses, in one line, options out of range, a missing CUDA device or a missing Pillow."""
    for name, low in (("frames", 1), ("stride", 1), ("size", 16), ("fps", 1)):
        if getattr(args, name) < low:
            parser.error(f"--{name} must be >= {low}, got {getattr(args, name)}")
    if args.device.split(":")[0] == "cuda" and not torch.cuda.is_available():
        parser.error(f"--device {args.device}: no CUDA device is available; use cpu")
    try:
        torch.device(args.device)
    except RuntimeError:
        parser.error(f"--device {args.device!r}: not a torch device")
    if importlib.util.find_spec("PIL") is None:
        parser.error("writing a GIF needs Pillow: pip install pillow (or 'torchrl_ext[examples]')")


def load_agent(parser: argparse.ArgumentParser, folder: Path, device: str) -> tuple[Any, Any]:
    """The run's policy and one env of its pipeline that can be drawn; one line if not."""
    try:
        policy, args, pipeline = runs.load_policy(folder, device)
    except ImportError as error:
        parser.error(f"{folder}: its pipeline cannot be imported: {error}")
    except ValueError as error:  # no run, a link, a damaged or unsafe checkpoint: named in it
        parser.error(str(error))
    except (KeyError, TypeError, RuntimeError) as error:  # a checkpoint of other networks
        parser.error(f"{folder}: its checkpoint does not fit its pipeline: {one_line(error)}")
    env = pipeline.acting_env(args, 1, ANIMATION_SEED, torch.device(device))
    base = getattr(env, "base_env", env)
    if not isinstance(base, DRAWN):
        parser.error(
            f"{folder}: a {pipeline.__name__} run, whose env ({type(base).__name__}) cannot be "
            "drawn; animate draws CartPoleEnv and CourseEnv runs"
        )
    return policy, env


def one_line(error: Exception, limit: int = 200) -> str:
    """An exception's message on one line, cut to ``limit`` characters."""
    text = " ".join(f"{type(error).__name__}: {error}".split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


@torch.no_grad()
def record(policy: Any, env: Any, frames: int, stride: int, size: int) -> list[torch.Tensor]:
    """``frames`` pictures, one every ``stride`` steps of the deterministic policy."""
    pictures = []
    td = env.reset()
    with set_exploration_type(ExplorationType.DETERMINISTIC):
        for step in range(frames * stride):
            if step % stride == 0:
                pictures.append(render_frame(env, size=size).cpu())
            _, td = env.step_and_maybe_reset(policy(td))
    return pictures


def write_gif(path: Path, pictures: list[torch.Tensor], fps: int) -> Path:
    """Writes the uint8 ``[H, W, 3]`` pictures as a looping GIF, through a new file and a rename."""
    from PIL import Image

    images = [Image.fromarray(p.numpy()).quantize(colors=32) for p in pictures]
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}-", suffix=".gif", dir=path.parent)
    os.close(fd)
    try:
        images[0].save(tmp, save_all=True, append_images=images[1:], duration=1000 // fps, loop=0)
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return path


def main(argv: list[str] | None = None) -> Path:
    """Runs ``python examples/animate.py`` (see ``--help``); returns the GIF's path."""
    parser = make_parser()
    args = parser.parse_args(argv)
    check_options(parser, args)
    runs.setup()
    policy, env = load_agent(parser, args.run, args.device)
    pictures = record(policy, env, args.frames, args.stride, args.size)
    path = write_gif(args.gif or args.run / "agent.gif", pictures, args.fps)
    print(f"animation: {path} ({len(pictures)} frames, {path.stat().st_size / 1024:.0f} KiB)")
    return path


if __name__ == "__main__":
    main()
