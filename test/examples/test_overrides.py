"""``KEY=VALUE`` overrides: typed by the config's annotations, then judged by its checks."""

from __future__ import annotations

from argparse import Namespace

import pytest

from torchrl_ext.examples import _config
from torchrl_ext.examples._overrides import parse_overrides
from torchrl_ext.examples.ppo_cartpole import Config
from torchrl_ext.examples.r2d2_cartpole import Config as R2D2Config


class TestParseOverrides:
    """Each field's text becomes its annotated type; unknown keys and bad texts are refused
    naming them."""

    def test_types(self):
        values = parse_overrides(Config, ["lr=3e-4", "epochs=3", "obs_scale=1,10", "policy=mlp"])
        assert values == {"lr": 3e-4, "epochs": 3, "obs_scale": (1.0, 10.0), "policy": "mlp"}
        assert parse_overrides(R2D2Config, ["value_rescaling=false"]) == {"value_rescaling": False}

    @pytest.mark.parametrize(
        "pair, message",
        [
            ("lr", "expected KEY=VALUE"),
            ("epoch=3", "no such hyperparameter; they are: clip,"),
            ("epochs=3.5", "expected int"),
            ("obs_scale=1", "expected 2 comma-separated values"),
            ("value_rescaling=maybe", "expected true or false"),
        ],
    )
    def test_refused(self, pair, message):
        config = R2D2Config if pair.startswith("value") else Config
        with pytest.raises(ValueError, match=message):
            parse_overrides(config, [pair])

    def test_every_field_is_settable(self):
        """Each field set from its own default's text gives the default config back."""
        default = Config()
        texts = []
        for name, value in vars(default).items():
            text = ",".join(map(str, value)) if isinstance(value, tuple) else str(value)
            texts.append(f"{name}={text}")
        assert Config(**parse_overrides(Config, texts)) == default

    def test_config_of_applies_them_after_quick(self):
        args = Namespace(quick=True, frames=None, overrides=["num_envs=4", "epochs=1"])
        cfg = _config.config_of(args, Config, {"epochs": 2}, seed=0)
        assert (cfg.num_envs, cfg.epochs, cfg.frames) == (4, 1, 3 * 4 * cfg.steps)
