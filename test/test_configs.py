"""Tests of torchrl_ext.configs: Hydra configs mirror the constructors and instantiate them."""

from __future__ import annotations

import inspect

import pytest

hydra = pytest.importorskip("hydra", reason="needs hydra-core (the 'hydra' extra)")

from hydra.core.config_store import ConfigStore  # noqa: E402
from hydra.utils import instantiate  # noqa: E402
from omegaconf import OmegaConf  # noqa: E402

from torchrl_ext import Sequence, Transition  # noqa: E402
from torchrl_ext.configs import SequenceConfig, TransitionConfig, register_configs  # noqa: E402


class TestConfigs:
    """Every constructor argument has a config field with the same default."""

    @pytest.mark.parametrize(
        "cls, config", [(Sequence, SequenceConfig), (Transition, TransitionConfig)]
    )
    def test_every_argument_has_a_field(self, cls, config):
        fields = set(config.__dataclass_fields__) - {"_target_"}
        params = {
            name: p
            for name, p in inspect.signature(cls.__init__).parameters.items()
            if name != "self" and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)
        }
        assert set(params) == fields
        for name, param in params.items():
            default = config.__dataclass_fields__[name].default
            if param.default is inspect.Parameter.empty:
                assert default == "???"
            else:
                assert default == param.default, name

    def test_registered_in_torchrl_group(self):
        register_configs()
        repo = ConfigStore.instance().repo["sample_unit"]
        assert "torchrl_ext_sequence.yaml" in repo and "torchrl_ext_transition.yaml" in repo

    def test_instantiate_from_structured_config(self):
        cfg = OmegaConf.structured(SequenceConfig(length=5, burn_in=2, episode_boundary="stop"))
        unit = instantiate(cfg)
        assert isinstance(unit, Sequence)
        assert (unit.length, unit.burn_in, unit.episode_boundary) == (5, 2, "stop")
        assert unit.done_key == ("next", "done")
        assert isinstance(instantiate(OmegaConf.structured(TransitionConfig())), Transition)

    def test_missing_length_is_reported(self):
        with pytest.raises(Exception, match="length"):
            instantiate(OmegaConf.structured(SequenceConfig()))
