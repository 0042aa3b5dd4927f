"""Pictures of the envs: exact pixels on hand-built states, and torchrl's VideoRecorder."""

from __future__ import annotations

import pytest
import torch
from torchrl.envs import Compose, TransformedEnv
from torchrl.record import VideoRecorder
from torchrl.record.loggers import CSVLogger

from torchrl_ext.envs import CartPoleEnv, CourseEnv, PendulumEnv
from torchrl_ext.envs import render as r
from torchrl_ext.envs.render import RenderPixels, render_frame, render_frames


def _pixels(frame: torch.Tensor, colour: tuple[int, int, int]) -> set[tuple[int, int]]:
    """``(row, column)`` of every pixel of ``colour``."""
    mask = (frame == torch.tensor(colour, dtype=torch.uint8)).all(-1)
    return {tuple(p) for p in mask.nonzero().tolist()}


def _cartpole_at(x: float, theta: float) -> CartPoleEnv:
    env = CartPoleEnv(2, seed=0)
    env.reset()
    state = env.state_dict()
    state["state"][0] = torch.tensor([x, 0.0, theta, 0.0])
    env.load_state_dict(state)
    return env


class TestCartPoleFrame:
    """A 160-pixel view spans 6 m (26.67 px/m): the cart (0.5 x 0.3 m) is centred on its position
    on the rail at row 120, the pole (1 m, 0.08 m wide) rises from the cart's top at its angle.
    Expected pixels are worked out by hand from the pixel centres ``(j + 0.5, i + 0.5)``."""

    def test_cart_at_zero_is_centred(self):
        frame = render_frame(_cartpole_at(0.0, 0.0), size=160)
        assert frame.shape == (160, 160, 3) and frame.dtype == torch.uint8
        # |j + 0.5 - 80| < 6.67 -> columns 73..86; |i + 0.5 - 120| < 4 -> rows 116..123
        cart = {(i, j) for i in range(116, 124) for j in range(73, 87)}
        # the pole's round foot covers the cart's top row at columns 79 and 80
        pole = {(i, j) for i in range(88, 117) for j in (79, 80)}
        assert _pixels(frame, r.POLE) == pole
        assert _pixels(frame, r.CART) == cart - pole
        assert _pixels(frame, r.RAIL) == {(i, j) for i in (119, 120) for j in range(160)} - cart

    def test_cart_follows_its_position(self):
        frame = render_frame(_cartpole_at(1.2, 0.0), size=160)  # 1.2 m = 32 px to the right
        columns = {j for _, j in _pixels(frame, r.CART)}
        assert columns == set(range(105, 119))

    def test_pole_leans_with_its_angle(self):
        frame = render_frame(_cartpole_at(0.0, 0.3), size=160)
        top = min(_pixels(frame, r.POLE))
        # the tip lies at (80 + 26.67 sin 0.3, 116 - 26.67 cos 0.3) = (87.88, 90.52); on row 89
        # the nearest pixel centre (87.5, 89.5) is 1.09 px from it, beyond the half width 1.07
        assert top == (90, 87)

    def test_every_env_and_index(self):
        env = _cartpole_at(0.0, 0.0)
        frames = render_frames(env, size=32)
        assert frames.shape == (2, 32, 32, 3)
        assert torch.equal(frames[1], render_frame(env, index=1, size=32))
        assert torch.equal(render_frame(TransformedEnv(env), size=32), frames[0])


class TestCourseFrame:
    """The view fits the course; the track is drawn around the centerline, checkpoints on it,
    and the car at its pose."""

    def test_car_track_checkpoints(self):
        env = CourseEnv(1, seed=0)
        env.reset()
        state = env.state_dict()
        size = 96
        frame = render_frame(env, size=size)
        centreline = state["course.centerline"][0]
        width = float(state["course.width"][0])
        lo, hi = centreline.amin(0) - width, centreline.amax(0) + width
        span, centre = float((hi - lo).max()), (lo + hi) / 2

        def pixel(point: torch.Tensor) -> tuple[int, int]:
            col = size / 2 + float(point[0] - centre[0]) * size / span
            row = size / 2 - float(point[1] - centre[1]) * size / span
            return int(row), int(col)

        assert tuple(frame[0, 0].tolist()) == r.GRASS  # corners lie outside the track
        car = _pixels(frame, r.CAR)
        assert pixel(state["pose"][0, :2]) in car
        rows, cols = zip(*car, strict=True)
        assert max(rows) - min(rows) <= r.CAR_PIXELS[0] and max(cols) - min(cols) <= 9
        count = int(state["course.checkpoint_count"][0])
        points = state["course.checkpoints"][0, :count]
        shown = [pixel(p) for p in points if pixel(p) not in car]
        assert all(tuple(frame[p].tolist()) == r.CHECKPOINT for p in shown)
        track = _pixels(frame, r.TRACK)
        assert len(track) > size  # a ring of track, not a few pixels
        assert len(_pixels(frame, r.CHECKPOINT)) >= len(shown)

    def test_moving_the_car_moves_only_the_car(self):
        env = CourseEnv(1, seed=0)
        env.reset()
        before = render_frame(env, size=64)
        state = env.state_dict()
        state["pose"][0, 2] += 3.14159  # turned round
        env.load_state_dict(state)
        after = render_frame(env, size=64)
        changed = {tuple(p) for p in (before != after).any(-1).nonzero().tolist()}
        assert changed and changed <= _pixels(before, r.CAR) | _pixels(after, r.CAR)


class TestArguments:
    def test_unknown_env(self):
        with pytest.raises(TypeError, match="CartPoleEnv or a CourseEnv"):
            render_frames(PendulumEnv(1, seed=0))

    def test_bad_index_and_size(self):
        env = _cartpole_at(0.0, 0.0)
        with pytest.raises(ValueError, match="index"):
            render_frame(env, index=2)
        with pytest.raises(ValueError, match="size"):
            render_frame(env, size=8)
        with pytest.raises(ValueError, match="size"):
            RenderPixels(size=4)


class TestRenderPixels:
    """``RenderPixels`` writes the pictures of the state each step led to under ``"pixels"``;
    a ``VideoRecorder`` after it records them through a torchrl logger."""

    def test_pixels_match_render_frame(self):
        env = TransformedEnv(CartPoleEnv(2, seed=0), RenderPixels(size=24))
        assert env.observation_spec["pixels"].shape == (2, 24, 24, 3)
        td = env.reset()
        assert torch.equal(td["pixels"], render_frames(env, size=24))
        td["action"] = torch.tensor([0, 1])
        td = env.step(td)
        assert torch.equal(td["next", "pixels"], render_frames(env, size=24))

    @pytest.mark.parametrize("env_class", [CartPoleEnv, CourseEnv])
    def test_video_recorder(self, tmp_path, env_class):
        logger = CSVLogger(exp_name="video", log_dir=str(tmp_path), video_format="pt")
        recorder = VideoRecorder(logger, tag="agent", in_keys=["pixels"])
        env = TransformedEnv(env_class(1, seed=0), Compose(RenderPixels(size=32), recorder))
        td = env.rollout(5)
        recorder.dump()
        (video_file,) = (tmp_path / "video" / "videos").glob("agent_*.pt")
        video = torch.load(video_file)
        frames = td["next", "pixels"][0].permute(0, 3, 1, 2)  # [T, 3, H, W]
        assert video.dtype == torch.uint8
        assert torch.equal(video.reshape(-1, 3, 32, 32)[-5:], frames)
