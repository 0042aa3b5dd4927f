"""Tests of torchrl_ext.configs: Hydra configs mirror the constructors and instantiate them."""

from __future__ import annotations

import inspect
import subprocess
import sys

import pytest

hydra = pytest.importorskip("hydra", reason="needs hydra-core (the 'hydra' extra)")

import torch  # noqa: E402
from hydra.core.config_store import ConfigStore  # noqa: E402
from hydra.utils import instantiate  # noqa: E402
from omegaconf import OmegaConf  # noqa: E402
from tensordict import TensorDict  # noqa: E402
from torchrl.trainers.algorithms.configs.modules import (  # noqa: E402
    MLPConfig,
    TensorDictModuleConfig,
    TensorDictSequentialConfig,
)

from torchrl_ext import (  # noqa: E402
    Sequence,
    Tape,
    Transition,
    configs,
)
from torchrl_ext.configs import (  # noqa: E402
    SequenceConfig,
    TapeConfig,
    TransitionConfig,
    register_configs,
)
from torchrl_ext.envs import (  # noqa: E402
    CarConfig,
    CartPoleEnv,
    CourseEnv,
    CourseParams,
    PendulumEnv,
    SignallingEnv,
    popgym,
)
from torchrl_ext.modules import GRUModule, LSTMModule  # noqa: E402
from torchrl_ext.objectives import R2D2Loss, RecurrentGAE  # noqa: E402


class TestConfigs:
    """The sample units' configs register in TorchRL's group and instantiate the units."""

    def test_registered_in_torchrl_group(self):
        register_configs()
        repo = ConfigStore.instance().repo["sample_unit"]
        assert "torchrl_ext_sequence.yaml" in repo and "torchrl_ext_transition.yaml" in repo
        assert "torchrl_ext_tape.yaml" in repo

    def test_instantiate_from_structured_config(self):
        cfg = OmegaConf.structured(SequenceConfig(length=5, burn_in=2, episode_boundary="stop"))
        unit = instantiate(cfg)
        assert isinstance(unit, Sequence)
        assert (unit.length, unit.burn_in, unit.episode_boundary) == (5, 2, "stop")
        assert unit.done_key == ("next", "done")
        assert isinstance(instantiate(OmegaConf.structured(TransitionConfig())), Transition)

    def test_instantiate_tape_from_structured_config(self):
        cfg = OmegaConf.structured(TapeConfig(length=6, rows=2, priority_reduction="mean"))
        unit = instantiate(cfg)
        assert isinstance(unit, Tape)
        assert (unit.length, unit.rows, unit.priority_reduction) == (6, 2, "mean")
        assert unit.shape == torch.Size([2, 6])
        assert unit.done_key == ("next", "done") and unit.traj_key is None

    def test_tape_overrides_from_yaml(self):
        cfg = OmegaConf.merge(
            OmegaConf.structured(TapeConfig), OmegaConf.create("length: 8\ntraj_key: [traj, id]")
        )
        unit = instantiate(cfg)
        assert unit.shape == torch.Size([8]) and unit.traj_key == ("traj", "id")

    @pytest.mark.parametrize("config", [SequenceConfig, TapeConfig])
    def test_missing_length_is_reported(self, config):
        with pytest.raises(Exception, match="length"):
            instantiate(OmegaConf.structured(config()))


#: (constructed class, its config, config fields that are no constructor argument)
CONFIGURED = [
    (Sequence, SequenceConfig, set()),
    (Tape, TapeConfig, set()),
    (Transition, TransitionConfig, set()),
    (CartPoleEnv, configs.CartPoleEnvConfig, {"env_name"}),
    (PendulumEnv, configs.PendulumEnvConfig, {"env_name"}),
    (CourseEnv, configs.CourseEnvConfig, {"env_name"}),
    (SignallingEnv, configs.SignallingEnvConfig, {"env_name"}),
    (popgym.RepeatPreviousEnv, configs.PopGymEnvConfig, {"env_name"}),
    (RecurrentGAE, configs.RecurrentGAEConfig, set()),
    (R2D2Loss, configs.R2D2LossConfig, set()),
    (LSTMModule, configs.LSTMModuleConfig, {"shared"}),
    (GRUModule, configs.GRUModuleConfig, {"shared"}),
]


def as_constructed(value):
    """A config default as the constructor receives it (dtypes are written by name)."""
    if isinstance(value, str) and value.startswith("float"):
        return getattr(torch, value)
    return value


class TestTypedConfigs:
    """Every config has one field per constructor argument with the same default; the env,
    objective and module configs register in TorchRL's groups and Hydra's ``instantiate``
    builds the object."""

    @pytest.mark.parametrize("cls, config, extra", CONFIGURED)
    def test_every_argument_has_a_field_with_its_default(self, cls, config, extra):
        fields = config.__dataclass_fields__
        names = set(fields) - {"_target_", "_partial_"} - extra
        params = {
            name: p
            for name, p in inspect.signature(cls.__init__).parameters.items()
            if name != "self" and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)
        }
        assert set(params) == names
        for name, param in params.items():
            default = as_constructed(fields[name].default)
            if param.default is inspect.Parameter.empty:
                assert default == "???", name
            else:
                assert default == param.default, name

    def test_registered_in_torchrl_groups(self):
        register_configs()
        repo = ConfigStore.instance().repo
        for group, name, node in configs.REGISTERED:
            assert f"{name}.yaml" in repo[group], (group, name)
            assert repo[group][f"{name}.yaml"].node._metadata.object_type is node

    @pytest.mark.parametrize(
        "config, cls",
        [
            (configs.CartPoleEnvConfig(num_envs=3, seed=1, dtype="float64"), CartPoleEnv),
            (configs.PendulumEnvConfig(num_envs=3, max_steps=50), PendulumEnv),
            (configs.SignallingEnvConfig(num_envs=3, vocab=4, delay=1), SignallingEnv),
        ],
    )
    def test_envs(self, config, cls):
        env = instantiate(OmegaConf.structured(config))
        assert type(env) is cls
        assert env.batch_size == torch.Size([3])
        td = env.reset()
        assert td.batch_size == torch.Size([3])
        if getattr(config, "dtype", "float32") == "float64":
            assert env.observation_spec["observation"].dtype is torch.float64

    def test_course_env_takes_nested_mappings(self):
        cfg = OmegaConf.structured(
            configs.CourseEnvConfig(num_envs=2, seed=0, num_rays=3, mode="gates")
        )
        cfg.params = {"roughness": 0.5}
        cfg.car = {"max_speed": 4.0}
        env = instantiate(cfg)
        assert type(env) is CourseEnv and env.batch_size == torch.Size([2])
        assert env.observation_spec["observation"].shape[-1] > 0
        assert configs.make_env("CourseEnv", 2, params=CourseParams(), car=CarConfig()) is not None

    @pytest.mark.parametrize("env_name", [n for n in popgym.__all__ if n.endswith("Env")])
    def test_popgym_ports(self, env_name):
        cfg = configs.PopGymEnvConfig(env_name=env_name, num_envs=2, difficulty="medium")
        env = instantiate(OmegaConf.structured(cfg))
        assert type(env) is getattr(popgym, env_name)
        assert env.batch_size == torch.Size([2])

    def test_unknown_env_and_dtype_are_refused(self):
        with pytest.raises(ValueError, match="env_name='Nope'"):
            configs.make_env("Nope", 2)
        with pytest.raises(ValueError, match="dtype='int32'"):
            configs.make_env("CartPoleEnv", 2, dtype="int32")
        with pytest.raises(Exception, match="num_envs"):
            instantiate(OmegaConf.structured(configs.CartPoleEnvConfig()))

    def test_recurrent_gae(self):
        cfg = configs.RecurrentGAEConfig(gamma=0.9, lmbda=0.8, chunk_len=4)
        gae = instantiate(OmegaConf.structured(cfg))
        assert type(gae) is RecurrentGAE
        assert float(gae.gamma) == pytest.approx(0.9) and float(gae.lmbda) == pytest.approx(0.8)
        done = torch.tensor([False, True, False]).view(1, 3, 1)
        rollout = TensorDict(
            {
                "state_value": torch.ones(1, 3, 1),
                "next": {
                    "reward": torch.ones(1, 3, 1),
                    "done": done,
                    "terminated": done.clone(),
                    "state_value": torch.ones(1, 3, 1),
                },
            },
            [1, 3],
        )
        out = gae(rollout)
        # by hand: step 1 ends its episode (delta = 1 - 1 = 0), step 2 is cut by the rollout
        # end (delta = 1 + 0.9 - 1 = 0.9); step 0: delta 0.9 + 0.9 * 0.8 * 0 = 0.9
        assert torch.allclose(out["advantage"].view(-1), torch.tensor([0.9, 0.0, 0.9]))

    @pytest.mark.parametrize(
        "cfg_class, cls",
        [(configs.LSTMModuleConfig, LSTMModule), (configs.GRUModuleConfig, GRUModule)],
    )
    def test_recurrent_modules(self, cfg_class, cls):
        cfg = OmegaConf.structured(
            cfg_class(input_size=3, hidden_size=5, num_layers=2, recurrent_compute_dtype="float64")
        )
        cfg.in_keys = ["obs", "h"] + (["c"] if cls is LSTMModule else [])
        cfg.out_keys = ["feat", ["next", "h"]] + ([["next", "c"]] if cls is LSTMModule else [])
        module = instantiate(cfg)
        assert type(module) is cls
        rnn = module.lstm if cls is LSTMModule else module.gru
        assert (rnn.input_size, rnn.hidden_size, rnn.num_layers) == (3, 5, 2)
        assert module.in_keys[0] == "obs" and ("next", "h") in module.out_keys
        assert module.recurrent_compute_dtype is torch.float64
        out = module(
            TensorDict(
                {"obs": torch.randn(4, 3), "is_init": torch.ones(4, 1, dtype=torch.bool)}, [4]
            )
        )
        assert out["feat"].shape == (4, 5)

    def test_shared_module_is_in_shared_memory(self):
        cfg = configs.LSTMModuleConfig(
            input_size=2, hidden_size=3, in_key="x", out_key="y", shared=True
        )
        module = instantiate(OmegaConf.structured(cfg))
        assert all(p.is_shared() for p in module.parameters())

    def test_r2d2_loss_from_configs_alone(self):
        hidden = 8
        network = TensorDictSequentialConfig(
            modules=[
                TensorDictModuleConfig(
                    module=MLPConfig(in_features=4, out_features=hidden, depth=1, num_cells=8),
                    in_keys=["observation"],
                    out_keys=["embed"],
                ),
                configs.LSTMModuleConfig(
                    input_size=hidden,
                    hidden_size=hidden,
                    in_keys=["embed", "rs_h", "rs_c"],
                    out_keys=["features", ["next", "rs_h"], ["next", "rs_c"]],
                ),
                TensorDictModuleConfig(
                    module=MLPConfig(in_features=hidden, out_features=2, depth=1, num_cells=8),
                    in_keys=["features"],
                    out_keys=["action_value"],
                ),
            ]
        )
        cfg = configs.R2D2LossConfig(value_network=network, burn_in=2, n_step=3, gamma=0.9)
        loss = instantiate(OmegaConf.structured(cfg))
        assert type(loss) is R2D2Loss
        assert (loss.burn_in, loss.n_step, loss.gamma) == (2, 3, 0.9)
        assert any(isinstance(m, LSTMModule) for m in loss.value_network.modules())


def test_importable_without_hydra():
    """Without hydra-core the configs are plain dataclasses and registering says what to
    install."""
    code = (
        "import sys; sys.modules['hydra'] = None\n"
        "from torchrl_ext import configs\n"
        "assert configs.CartPoleEnvConfig(num_envs=2).env_name == 'CartPoleEnv'\n"
        "assert configs.LSTMModuleConfig(hidden_size=3).shared is False\n"
        "try:\n"
        "    configs.register_configs()\n"
        "except ImportError as err:\n"
        "    print(err)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120
    )
    assert "pip install 'torchrl_ext[hydra]'" in out.stdout
