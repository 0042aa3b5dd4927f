"""The shared ``Config`` fields: their checks, defaults given as class keywords, config_of."""

from __future__ import annotations

import dataclasses
import functools
from argparse import Namespace

import pytest

from torchrl_ext.examples import _config

#: A PPO config with every field the base leaves to the pipeline set.
_Config = functools.partial(
    _config.PPOConfig,
    frames=256,
    num_envs=4,
    steps=8,
    lr=1e-3,
    gamma=0.99,
    max_grad_norm=0.5,
    eval_episodes=2,
    epochs=2,
    lmbda=0.95,
)


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
            _config.TrainConfig(num_envs=1, steps=1, lr=1.0, gamma=1.0, max_grad_norm=1.0,
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
        assert _config.config_of(args, _Config, overrides, seed=1) == expected


@dataclasses.dataclass(kw_only=True)
class _Pipeline(_config.PPOConfig, frames=512, num_envs=4, steps=8, lr=1e-3, gamma=0.9):
    max_grad_norm: float = 1.0
    eval_episodes: int = 2
    epochs: int = 3
    lmbda: float = 0.9
    extra: int = 7


class TestClassKeywordDefaults:
    """Class keywords give inherited fields a pipeline's defaults, in the base's field order,
    still checked and still settable; a keyword that names no inherited field, or a field the
    class declares itself, is refused when the class is created."""

    def test_defaults_and_order(self):
        cfg = _Pipeline()
        assert (cfg.frames, cfg.num_envs, cfg.lr, cfg.gamma, cfg.clip) == (512, 4, 1e-3, 0.9, 0.2)
        names = [f.name for f in dataclasses.fields(cfg)]
        assert names[: len(dataclasses.fields(_config.PPOConfig))] == [
            f.name for f in dataclasses.fields(_config.PPOConfig)
        ]
        assert names[-1] == "extra"
        assert _Pipeline(lr=0.5).lr == 0.5
        with pytest.raises(ValueError, match=r"gamma=2\.0"):
            _Pipeline(gamma=2.0)

    def test_base_keeps_its_own(self):
        assert _config.PPOConfig.__dataclass_fields__["frames"].default is dataclasses.MISSING

    @pytest.mark.parametrize("keyword", ["nope", "extra"])
    def test_unknown_or_redeclared_keyword(self, keyword):
        with pytest.raises(TypeError, match=f"class keyword {keyword}="):

            @dataclasses.dataclass(kw_only=True)
            class Bad(_Pipeline, **{keyword: 1}):
                extra: int = 8


class TestPipelineConfigs:
    """The pipelines' own fields are checked too, so the command line refuses them at once."""

    @pytest.mark.parametrize(
        "field, value, error",
        [("burn_in", -1, ValueError), ("length", 0, ValueError), ("n_step", 1.5, TypeError),
         ("batch_size", 0, ValueError), ("capacity", 10, ValueError), ("alpha", -0.1, ValueError),
         ("beta", float("nan"), ValueError), ("eta", 1.5, ValueError), ("eps_end", 2.0, ValueError),
         ("eps_lanes", -0.5, ValueError), ("lr_decay_start", 1.5, ValueError),
         ("lr_end", -1e-4, ValueError), ("target_period", 0, ValueError),
         ("value_rescaling", 1, TypeError), ("warmup_frames", 0, ValueError)],
    )  # fmt: skip
    def test_r2d2(self, field, value, error):
        from torchrl_ext.examples._configs import R2D2CartPoleConfig

        with pytest.raises(error, match=f"{field}={value!r}"):
            R2D2CartPoleConfig(**{field: value})

    @pytest.mark.parametrize(
        "field, value, error",
        [("vocab", 1, ValueError), ("delay", -1, ValueError), ("listener", "gru", ValueError),
         ("success_window", 0, ValueError), ("target_success", 1.5, ValueError),
         ("envs_per_minibatch", 0, ValueError)],
    )  # fmt: skip
    def test_signalling(self, field, value, error):
        from torchrl_ext.examples._configs import MAPPOSignallingConfig

        with pytest.raises(error, match=f"{field}={value!r}"):
            MAPPOSignallingConfig(**{field: value})

    def test_defaults_pass(self):
        from torchrl_ext.examples._configs import MAPPOSignallingConfig, R2D2CartPoleConfig

        assert R2D2CartPoleConfig().window == 28 and MAPPOSignallingConfig().vocab == 8
