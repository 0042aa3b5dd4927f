"""The POPGym ports in TorchRL GymEnv's layout (``make``) against ``GymEnv`` itself.

Specs: for each of popgym's 42 envs and both ``categorical_action_encoding`` settings, ours built
by name (2 envs, CPU) and ``GymEnv("popgym-<name>-v0")`` (unbatched) have equal observation,
action, reward, done and state specs. Equal is ``TensorSpec.__eq__`` of our spec at env 0
(``spec[0]``) and GymEnv's: the same keys, and per leaf the same class, shape, dtype, domain,
device and space (``n``, ``nvec``, ``low``/``high``); the Composites' own device is cleared
(GymEnv's are device-less). Autoencode is the exception: GymEnv makes popgym's ``Tuple``
observation a ``Stacked`` spec it cannot fill, so its components are compared instead.

Pipeline: one ``Collector`` with a random policy runs unchanged on both and yields the same
keys, per-step shapes and dtypes. Exact cases: the one-hot conversion by hand, and an oracle
(``F.one_hot`` of the ports' own outputs under the same seed and actions). Refusals: bad names
and bad one-hot actions. Contract: saving, pickling, graph replay, sync-free checks and the
rollout fast path in GymEnv's layout.
"""

from __future__ import annotations

import pickle
import re

import gymnasium
import popgym  # noqa: F401  (registers the popgym-* ids with gymnasium)
import pytest
import torch
from tensordict import TensorDict
from torch.nn.functional import one_hot
from torchrl.collectors import Collector
from torchrl.envs import GymEnv
from torchrl.envs.utils import check_env_specs

from torchrl_ext.envs.popgym import (
    ENV_NAMES,
    AutoencodeEnv,
    ConcentrationEnv,
    MineSweeperEnv,
    RepeatPreviousEnv,
    make,
)
from torchrl_ext.envs.popgym._gymenv_layout import GymEnvLayout

SPECS = (
    "observation_spec",
    "full_action_spec",
    "full_reward_spec",
    "full_done_spec",
    "full_state_spec",
)
ENCODINGS = (False, True)
TASKS = [name.removesuffix("Easy") for name in ENV_NAMES if name.endswith("Easy")]
CPU = torch.device("cpu")


def _gymenv(name: str, categorical: bool) -> GymEnv:
    return GymEnv(f"popgym-{name}-v0", categorical_action_encoding=categorical)


def _unbatched(spec):
    """``spec`` at env 0, on the CPU, the Composite's own device cleared."""
    return spec[0].cpu().clear_device_()


def _components(spec, one_hot_layout: bool) -> list[tuple[str, int, torch.dtype]]:
    """``(class, n, dtype)`` of each popgym ``Discrete`` component of an unbatched Multi* spec."""
    kind = "OneHot" if one_hot_layout else "Categorical"
    return [(kind, box.n, spec.dtype) for box in spec.space.boxes]


class TestSpecsMatchGymEnv:
    """``make(name, n, categorical_action_encoding=c)`` has GymEnv's specs for every popgym env."""

    @pytest.mark.parametrize("categorical", ENCODINGS)
    @pytest.mark.parametrize("name", ENV_NAMES)
    def test_specs_equal(self, name, categorical):
        ours = make(name, 2, seed=0, categorical_action_encoding=categorical)
        theirs = _gymenv(name, categorical)
        for attr in SPECS:
            mine, gym = _unbatched(getattr(ours, attr)), getattr(theirs, attr).clone()
            gym.clear_device_()
            if attr == "observation_spec" and name.startswith("Autoencode"):
                assert set(mine.keys()) == set(gym.keys()) == {"observation"}
                stacked = gym["observation"]
                expected = [
                    (type(stacked[j]).__name__, stacked[j].space.n, stacked[j].dtype)
                    for j in range(2)
                ]
                assert _components(mine["observation"], not categorical) == expected
                continue
            assert mine == gym, (attr, mine, gym)

    @pytest.mark.parametrize("categorical", ENCODINGS)
    def test_autoencode_is_torchrls_multidiscrete(self, categorical):
        """GymEnv cannot fill its Autoencode observation (torchrl 0.14); ours is TorchRL's
        spec of ``MultiDiscrete([2, 4])``: ``MultiOneHot`` of 6 slots or ``MultiCategorical``."""
        env = make("AutoencodeHard", 2, categorical_action_encoding=categorical)
        obs = env.observation_spec["observation"]
        assert type(obs).__name__ == ("MultiCategorical" if categorical else "MultiOneHot")
        assert tuple(obs.shape) == ((2, 2) if categorical else (2, 6))
        with pytest.raises(NotImplementedError):  # fails when TorchRL fixes it: revisit then
            _gymenv("AutoencodeHard", categorical).reset()

    def test_every_popgym_env_has_a_port(self):
        registered = {k.split("-")[1] for k in gymnasium.registry if k.startswith("popgym-")}
        assert set(ENV_NAMES) == registered
        assert len(ENV_NAMES) == 3 * len(TASKS) == 42

    @pytest.mark.parametrize("categorical", ENCODINGS)
    def test_check_env_specs(self, categorical):
        for name in ("ConcentrationMedium", "AutoencodeEasy", "BattleshipEasy"):
            check_env_specs(make(name, 3, seed=0, categorical_action_encoding=categorical))


def _collect(env) -> TensorDict:
    """One batch of 8 frames from a ``Collector`` with a random policy, as a user would run it."""
    collector = Collector(env, None, frames_per_batch=8, total_frames=8)
    try:
        return next(iter(collector))
    finally:
        collector.shutdown()


def _layout(batch: TensorDict) -> dict:
    """Every entry's per-step shape and dtype (the batch dims dropped)."""
    return {
        key: (tuple(value.shape[batch.batch_dims :]), value.dtype)
        for key, value in batch.items(True, True)
    }


class TestPipeline:
    """A Collector runs unchanged on ours and on GymEnv, with the same keys, shapes, dtypes."""

    @pytest.mark.parametrize("categorical", ENCODINGS)
    @pytest.mark.parametrize("name", ENV_NAMES)
    def test_collector_runs_on_both(self, name, categorical):
        ours = _collect(make(name, 2, seed=0, categorical_action_encoding=categorical))
        assert ours.batch_size == torch.Size([2, 4])
        if name.startswith("Autoencode"):  # GymEnv cannot (see test_autoencode_is_...)
            return
        theirs = _collect(_gymenv(name, categorical))
        assert _layout(ours) == _layout(theirs)
        if not categorical and ours["observation"].dtype == torch.int64:
            for obs in (ours["observation"], theirs["observation"]):
                assert bool(((obs == 0) | (obs == 1)).all()) and bool((obs.sum(-1) == 1).all())


class TestConversion:
    """The one-hot layout is ``index == arange(n)`` of the ports' own outputs, exactly."""

    def test_hand_computed_cases(self):
        discrete = RepeatPreviousEnv(2, difficulty="easy").observation_spec["observation"]
        layout = GymEnvLayout(discrete, discrete, categorical=False)
        td = TensorDict(
            observation=torch.tensor([3, 0]), action=torch.tensor([1, 2]), batch_size=[2]
        )
        layout.present(td)
        assert td["observation"].tolist() == [[0, 0, 0, 1], [1, 0, 0, 0]]
        assert td["action"].tolist() == [[0, 1, 0, 0], [0, 0, 1, 0]]
        assert td["observation"].dtype == torch.int64
        action = torch.tensor([[0, 0, 1, 0], [1, 0, 0, 0]])
        accepted = layout.accept(TensorDict(action=action, batch_size=[2]), CPU)
        assert accepted["action"].tolist() == [2, 0]

    def test_hand_computed_boards_and_pairs(self):
        board = MineSweeperEnv(2).action_spec  # MultiCategorical([4, 4])
        pair = AutoencodeEnv(2).observation_spec["observation"]  # MultiCategorical([2, 4])
        layout = GymEnvLayout(pair, board, categorical=False)
        td = TensorDict(observation=torch.tensor([[1, 3], [0, 0]]), batch_size=[2])
        td["next"] = TensorDict(observation=torch.tensor([[0, 2], [1, 1]]), batch_size=[2])
        layout.present(td)
        assert td["observation"].tolist() == [[0, 1, 0, 0, 0, 1], [1, 0, 1, 0, 0, 0]]
        assert td["next", "observation"].tolist() == [[1, 0, 0, 0, 1, 0], [0, 1, 0, 1, 0, 0]]
        cells = torch.tensor([[[0, 0, 0, 1], [0, 1, 0, 0]], [[1, 0, 0, 0], [0, 0, 0, 1]]])
        assert layout.accept({"action": cells}, CPU)["action"].tolist() == [[3, 1], [0, 3]]

    def test_categorical_layout_casts_concentration_to_int64(self):
        env = make("ConcentrationHard", 2, seed=0, categorical_action_encoding=True)
        native = ConcentrationEnv(2, seed=0, difficulty="hard")
        mine, own = env.reset()["observation"], native.reset()["observation"]
        assert (mine.dtype, own.dtype) == (torch.int64, torch.uint8)
        assert torch.equal(mine, own.long())

    @pytest.mark.parametrize(
        "name",
        [
            "RepeatPreviousMedium",
            "CountRecallHard",
            "BattleshipEasy",
            "ConcentrationMedium",
            "AutoencodeEasy",
        ],
    )
    def test_oracle_same_seed_same_actions(self, name, device):
        """Ours in GymEnv's layout equals ``F.one_hot`` of the port's own outputs, step by step
        (fused steps with auto-reset), under the same seed and the same actions."""
        env = make(name, 3, device, seed=5)
        native = type(env)(3, device, seed=5, difficulty=env.difficulty)
        spec = native.observation_spec["observation"][0]
        sizes = [box.n for box in spec.space.boxes] if hasattr(spec, "nvec") else [spec.space.n]

        def encode(obs):
            if len(set(sizes)) > 1:  # Autoencode: the components side by side
                return torch.cat([one_hot(obs[..., j].long(), n) for j, n in enumerate(sizes)], -1)
            return one_hot(obs.long(), sizes[0])

        root, own_root = env.reset(), native.reset()
        assert torch.equal(root["observation"], encode(own_root["observation"]))
        for _ in range(12):
            own_root = native.rand_action(own_root)
            root["action"] = one_hot(own_root["action"], env.action_spec.shape[-1])
            td, root = env.step_and_maybe_reset(root)
            own_td, own_root = native.step_and_maybe_reset(own_root)
            assert torch.equal(td["next", "observation"], encode(own_td["next", "observation"]))
            assert torch.equal(root["observation"], encode(own_root["observation"]))
            assert torch.equal(td["next", "reward"], own_td["next", "reward"])
            assert torch.equal(td["next", "done"], own_td["next", "done"])


class TestRefusals:
    """Bad names and bad one-hot actions are refused, naming the argument and the value."""

    @pytest.mark.parametrize(
        ("env_name", "hint"),
        [
            ("popgym-RepeatPreviousEasy-v1", "popgym-RepeatPreviousEasy-v0"),
            ("VelocityOnlyCartPoleEasy", "popgym-VelocityOnlyCartpoleEasy-v0"),
            ("RepeatPrevious", "popgym-RepeatPrevious"),
        ],
    )
    def test_bad_names(self, env_name, hint):
        with pytest.raises(ValueError, match=f"env_name={env_name!r}") as info:
            make(env_name, 2)
        assert hint in str(info.value)
        with pytest.raises(ValueError, match="got env_name='Pong'"):
            make("Pong", 2)

    def test_bad_types(self):
        with pytest.raises(TypeError, match="env_name=3"):
            make(3, 2)
        with pytest.raises(TypeError, match="categorical_action_encoding"):
            make("RepeatFirstEasy", 2, categorical_action_encoding="yes")
        with pytest.raises(TypeError, match="categorical_action_encoding"):
            RepeatPreviousEnv(2, categorical_action_encoding=1)

    @pytest.mark.parametrize(
        "row",
        [[0, 0, 0, 0], [1, 1, 0, 0], [2, 0, 0, 0], [-1, 1, 1, 0]],
        ids=["no_one", "two_ones", "a_two", "sums_to_one"],
    )
    def test_bad_one_hot_actions(self, row, device):
        env = make("RepeatFirstEasy", 2, device, seed=0)
        root = env.reset()
        before = env.state_dict()
        root["action"] = torch.tensor([[0, 1, 0, 0], row], device=device)
        message = "action must be one-hot .* got " + re.escape(f"action[1]={row}")
        with pytest.raises(ValueError, match=message):
            env.step(root)
        with pytest.raises(ValueError, match="categorical_action_encoding=True"):
            env.step_and_maybe_reset(root)
        after = env.state_dict()
        assert all(torch.equal(before[k], after[k]) for k in before)  # nothing was loaded

    def test_bad_action_dtype_and_shape(self):
        env = make("MineSweeperEasy", 2, seed=0)
        root = env.reset()
        root["action"] = torch.zeros(2, 2, 4, dtype=torch.float32)
        with pytest.raises(TypeError, match=r"action must have dtype torch\.int64"):
            env.step(root)
        root["action"] = torch.zeros(2, 2, dtype=torch.int64)  # category indices
        with pytest.raises(ValueError, match=r"action must have shape \(2, 2, 4\)"):
            env.step(root)

    def test_categorical_layout_checks_ranges(self):
        env = make("MineSweeperEasy", 2, seed=0, categorical_action_encoding=True)
        root = env.reset()
        root["action"] = torch.tensor([[0, 1], [4, 0]])
        with pytest.raises(ValueError, match=r"action\[1, 0\]=4"):
            env.step(root)

    def test_sync_free_sets_the_fault_flag(self, device):
        env = make("RepeatFirstEasy", 2, device, seed=0)
        env.sync_free = True
        root = env.reset()
        root["action"] = torch.tensor([[0, 1, 0, 0], [1, 1, 0, 0]], device=device)
        env.step_and_maybe_reset(root)  # checked on the device: nothing raised here
        assert bool(env.action_fault)
        with pytest.raises(ValueError, match="check_actions"):
            env.check_actions()


def _actions(env, steps: int, seed: int = 0) -> list[torch.Tensor]:
    """``steps`` one-hot actions of ``env``'s spec, from a seeded generator."""
    gen = torch.Generator().manual_seed(seed)
    n = env.action_spec.shape[-1]
    draws = torch.randint(0, n, (steps, *env.action_spec.shape[:-1]), generator=gen)
    return [one_hot(d, n).to(env.device) for d in draws]


def _run(env, root, actions) -> list[torch.Tensor]:
    out = []
    for action in actions:
        root["action"] = action
        td, root = env.step_and_maybe_reset(root)
        out += [td["next", "observation"], root["observation"], td["next", "reward"]]
    return out


class TestContract:
    """GymEnv's layout keeps saving, pickling, graph replay, sync-free and the fast rollout."""

    def test_state_dict_round_trip_and_pickle(self, device):
        env = make("CountRecallMedium", 3, device, seed=1)
        actions = _actions(env, 40)
        root = env.reset()
        _run(env, root, actions[:20])
        saved, copied, root_copy = env.state_dict(), pickle.loads(pickle.dumps(env)), root.clone()
        expected = _run(env, root, actions[20:])
        fresh = make("CountRecallMedium", 3, device, seed=99)
        fresh.load_state_dict(saved)
        for other in (fresh, copied):
            got = _run(other, root_copy.clone(), actions[20:])
            assert all(torch.equal(a, b) for a, b in zip(expected, got, strict=True))
        assert copied.action_spec == env.action_spec
        own = type(env)(3, device, difficulty="medium").state_dict()  # the port's own layout
        assert {k: v.shape for k, v in saved.items()} == {k: v.shape for k, v in own.items()}

    def test_capture_and_sync_free_equal_eager(self, device):
        envs = [make("BattleshipMedium", 3, device, seed=2, capture=c) for c in (False, True)]
        envs.append(make("BattleshipMedium", 3, device, seed=2))
        envs[-1].sync_free = True
        actions = _actions(envs[0], 30)
        runs = [_run(env, env.reset(), actions) for env in envs]
        for other in runs[1:]:
            assert all(torch.equal(a, b) for a, b in zip(runs[0], other, strict=True))

    def test_torchrls_generic_step_equals_the_fused_step(self):
        """An input holding ``"next"`` takes TorchRL's step-then-reset (our ``_step`` and
        ``_reset``): its outputs are presented once, as the fused step's are."""
        envs = [make("MineSweeperEasy", 3, seed=6) for _ in range(2)]
        actions = _actions(envs[0], 40)  # past the time limit of 14: auto-resets
        fused = _run(envs[0], envs[0].reset(), actions)
        root, generic = envs[1].reset(), []
        for action in actions:
            root["action"] = action
            root["next"] = TensorDict(batch_size=[3])  # not the fused path's input
            td, root = envs[1].step_and_maybe_reset(root)
            generic += [td["next", "observation"], root["observation"], td["next", "reward"]]
        assert all(torch.equal(a, b) for a, b in zip(fused, generic, strict=True))
        assert bool((envs[1].state_dict()["episode"] >= 2).all())  # every env auto-reset

    @pytest.mark.parametrize(
        "name", ["HigherLowerHard", "MineSweeperEasy", "PositionOnlyCartPoleEasy"]
    )
    def test_fast_rollout_equals_stepping(self, name, device):
        """The one-kernel rollout's outputs, actions included, are in GymEnv's layout and equal
        stepping the same actions one by one."""
        env = make(name, 3, device, seed=4)
        data = env.rollout(25, break_when_any_done=False)
        assert data["action"].shape[2:] == env.action_spec.shape[1:]
        replay = make(name, 3, device, seed=4)
        root = replay.reset()
        assert torch.equal(root["observation"], data["observation"][:, 0])
        got = _run(replay, root, list(data["action"].unbind(1)))
        assert torch.equal(torch.stack(got[0::3], 1), data["next", "observation"])
        assert torch.equal(torch.stack(got[2::3], 1), data["next", "reward"])
