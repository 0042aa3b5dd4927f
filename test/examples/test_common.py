"""The examples' shared bookkeeping: the return window and its target, config checks, seeding."""

from __future__ import annotations

import functools
import math
from argparse import Namespace

import pytest
import torch

from torchrl_ext.examples import _common


def _first_hit(values_per_batch, size, target):
    """Plain reference: the mean of the last ``size`` values after each batch, first crossing."""
    seen, means, hit = [], [], None
    for batch, values in enumerate(values_per_batch, start=1):
        seen += values
        last = seen[-size:]
        mean = sum(last) / len(last) if last else math.nan
        means.append(mean)
        if hit is None and len(last) == size and mean >= target:
            hit = batch
    return means, hit


class TestReturnWindow:
    """The mean of the last ``size`` values; the target counts once the window is full; a window
    rebuilt from saved values and hit continues as the uninterrupted one."""

    def test_not_full_never_hits(self):
        window = _common.ReturnWindow(3, target=1.0)
        assert window.update([5.0, 5.0], frames=8, seconds=0.5) == 5.0
        assert window.hit is None and window.reached()["frames_to_target"] is None

    def test_empty_mean_is_nan(self):
        assert math.isnan(_common.ReturnWindow(2, target=0.0).update([], 4, 0.1))

    def test_matches_plain_loop(self):
        gen = torch.Generator().manual_seed(0)
        batches = [
            torch.rand(int(torch.randint(0, 4, (1,), generator=gen)), generator=gen).tolist()
            for _ in range(60)
        ]
        means, hit = _first_hit(batches, size=5, target=0.6)
        assert hit is not None  # the case exercises a crossing
        window = _common.ReturnWindow(5, target=0.6)
        got = [window.update(v, frames=64 * i, seconds=float(i)) for i, v in enumerate(batches, 1)]
        assert [repr(m) for m in got] == [repr(m) for m in means]
        assert window.hit == (64 * hit, float(hit))

    def test_resumed_window_continues(self):
        full = _common.ReturnWindow(2, target=3.0)
        for i, values in enumerate([[1.0], [4.0], [2.0], [5.0]], 1):
            full.update(values, i, float(i))
        first = _common.ReturnWindow(2, target=3.0)
        for i, values in enumerate([[1.0], [4.0]], 1):
            first.update(values, i, float(i))
        resumed = _common.ReturnWindow(2, 3.0, list(first.recent), first.hit)
        for i, values in enumerate([[2.0], [5.0]], 3):
            resumed.update(values, i, float(i))
        assert (
            (list(resumed.recent), resumed.hit)
            == (list(full.recent), full.hit)
            == ([2.0, 5.0], (3, 3.0))
        )


#: A PPO config with every field the base leaves to the pipeline set.
_Config = functools.partial(
    _common.PPOConfig, frames=256, num_envs=4, steps=8, lr=1e-3, gamma=0.99, max_grad_norm=0.5,
    eval_episodes=2, epochs=2, lmbda=0.95,
)  # fmt: skip


class TestConfigs:
    """Config checks name the field and its value (TypeError for a wrong type, ValueError for a
    wrong value); the fields the pipeline leaves alone keep the base's defaults; ``--quick``
    collects a few batches unless it sets the frames; ``--frames`` wins."""

    @pytest.mark.parametrize(
        "field, value, error",
        [("num_envs", 0, ValueError), ("steps", True, TypeError), ("frames", 2.0, TypeError),
         ("frames", 16, ValueError), ("hidden", -1, ValueError), ("eval_episodes", 0, ValueError),
         ("epochs", 0, ValueError), ("seed", -5, ValueError), ("seed", "a", TypeError),
         ("lr", "fast", TypeError), ("lr", 0.0, ValueError), ("gamma", 1.5, ValueError),
         ("max_grad_norm", float("inf"), ValueError), ("clip", 0.0, ValueError),
         ("lmbda", -0.1, ValueError), ("entropy_coeff", -1.0, ValueError),
         ("critic_coeff", float("nan"), ValueError)],
    )  # fmt: skip
    def test_bad_field(self, field, value, error):
        with pytest.raises(error, match=f"{field}={value!r}"):
            _Config(**{field: value})

    def test_defaults(self):
        cfg = _Config()
        assert (cfg.seed, cfg.frames, cfg.hidden, cfg.clip, cfg.epochs) == (0, 256, 64, 0.2, 2)
        assert cfg.frames_per_batch == 32

    def test_fields_without_a_base_default_are_required(self):
        with pytest.raises(TypeError, match="frames"):
            _common.TrainConfig(num_envs=1, steps=1, lr=1.0, gamma=1.0, max_grad_norm=1.0,
                                eval_episodes=1)  # fmt: skip

    @pytest.mark.parametrize(
        "quick, frames, overrides, expected",
        [
            (False, None, {"steps": 2}, _Config(seed=1)),
            (True, None, {"steps": 2}, _Config(seed=1, steps=2, frames=3 * 4 * 2)),
            (True, 64, {"steps": 2}, _Config(seed=1, steps=2, frames=64)),
            (True, None, {"frames": 96}, _Config(seed=1, frames=96)),
        ],
    )
    def test_config_of(self, quick, frames, overrides, expected):
        args = Namespace(quick=quick, frames=frames)
        assert _common.config_of(args, _Config, overrides, seed=1) == expected

    def test_seeded_leaves_the_global_generator(self):
        before = torch.get_rng_state()
        draws = [_common.seeded(5, torch.randint, 0, 1000, (4,)) for _ in range(2)]
        assert torch.equal(draws[0], draws[1])
        assert torch.equal(torch.get_rng_state(), before)
