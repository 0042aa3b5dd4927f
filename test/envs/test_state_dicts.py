"""Saved env state (``torchrl_ext.envs._base.state_dicts``): what ``load_state_dict`` accepts.

Contract: a loaded state is refused with a ``ValueError`` naming the entry and the bad value,
before anything is written, unless every value is one a run of the env reaches: floats finite,
counters and indices within their ranges, epochs and counters that cannot overflow. Every env's
own ``state_dict()`` loads back into a fresh env of the same configuration, also through a
``TransformedEnv`` and a TorchRL collector.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import torch
from bad_arguments import assert_state_unchanged
from torchrl.collectors import Collector
from torchrl.envs import Compose, StepCounter, TransformedEnv

from torchrl_ext.envs import CartPoleEnv, CourseEnv, PendulumEnv, SignallingEnv, popgym
from torchrl_ext.envs.transforms import BaseEnvState

INT32_MAX = 2**31 - 1
INT64_MAX = 2**63 - 1

# every env of the package, small, with a time limit where the env takes one
ENVS = {
    "cartpole": lambda **kw: CartPoleEnv(3, seed=1, max_steps=7, **kw),
    "pendulum": lambda **kw: PendulumEnv(3, seed=1, max_steps=7, **kw),
    "course_track": lambda **kw: CourseEnv(3, seed=1, max_steps=7, num_points=32, **kw),
    "course_gates": lambda **kw: CourseEnv(3, seed=1, max_steps=7, mode="gates", **kw),
    "signalling": lambda **kw: SignallingEnv(3, seed=1, **kw),
    **{
        name: (lambda cls: lambda **kw: cls(3, seed=1, **kw))(getattr(popgym, name))
        for name in popgym.__all__
        if name.endswith("Env")  # the port classes
    },
}


def _used(name: str):
    """The env ``name`` after a few random steps (its state is not the initial one)."""
    env = ENVS[name]()
    env.rollout(5, break_when_any_done=False)
    return env


def _with(state: dict, key: str, index: tuple, value) -> dict:
    """``state`` with one element of ``state[key]`` replaced by ``value``."""
    entry = state[key].clone()
    entry[index] = value
    return {**state, key: entry}


def _refused(env, state: dict, match: str) -> None:
    before = env.state_dict()
    with pytest.raises(ValueError, match=match):
        env.load_state_dict(state)
    assert_state_unchanged(before, env)


class TestLoadedValues:
    """Every float entry must be finite; the base's counters lie where no step overflows."""

    def test_an_entry_viewing_the_envs_own_outputs_loads_its_value_from_before_the_call(self):
        env = CartPoleEnv(2, seed=0)
        env.rollout(3)
        saved = env.state_dict()
        live = env._state_tensors()
        state = dict(saved)
        state["next.observation"] = saved["next.observation"] + 0.01  # written first
        state["root.observation"] = live["next.observation"]  # a live view, read after
        expected = live["next.observation"].clone()
        env.load_state_dict(state)
        assert torch.equal(env.state_dict()["root.observation"], expected)
        assert torch.equal(env.state_dict()["next.observation"], state["next.observation"])

    @pytest.mark.parametrize("name", sorted(ENVS))
    @pytest.mark.parametrize("bad", [float("nan"), float("inf"), -float("inf")])
    def test_non_finite_floats_are_refused(self, name, bad):
        env = _used(name)
        good = env.state_dict()
        floats = [k for k, v in good.items() if v.is_floating_point() and v.numel()]
        assert floats, "every env saves float outputs"
        for key in floats:
            index = (good[key].dim() and good[key].shape[0] - 1,) + (0,) * (good[key].dim() - 1)
            _refused(env, _with(good, key, index[: good[key].dim()], bad), rf"\['{key}'\].*{bad}")

    @pytest.mark.parametrize("name", sorted(ENVS))
    def test_counters_that_would_overflow_are_refused(self, name):
        env = _used(name)
        good = env.state_dict()
        _refused(env, _with(good, "steps", (1,), INT32_MAX), rf"\['steps'\] holds {INT32_MAX}")
        _refused(env, _with(good, "episode", (0,), INT32_MAX), rf"\['episode'\] holds {INT32_MAX}")

    def test_steps_past_the_limit_are_refused_and_the_next_step_truncates(self):
        env = CartPoleEnv(2, seed=3, max_steps=200)
        root = env.reset()
        good = env.state_dict()
        _refused(env, _with(good, "steps", (0,), 201), r"\['steps'\] holds 201")
        env.load_state_dict(_with(good, "steps", (0,), 200))  # a rollout ends there
        td = env.rand_step(root)
        assert td["next", "truncated"].view(-1).tolist() == [True, False]

    @pytest.mark.parametrize("steps", [3, 4])
    def test_signalling_steps_past_the_answer_are_refused(self, steps):
        env = SignallingEnv(2, seed=0, delay=2)  # episodes of 4 steps: answer at step 3
        root = env.reset()
        good = env.state_dict()
        _refused(env, _with(good, "steps", (1,), 5), r"\['steps'\] holds 5")
        env.load_state_dict(_with(good, "steps", (1,), steps))  # 4: where a rollout ends
        td = env.rand_step(root)
        assert td["next", "terminated"].view(-1).tolist() == [False, True]

    @pytest.mark.parametrize(
        "make",
        [
            lambda: CartPoleEnv(3, seed=1, max_steps=5),
            lambda: SignallingEnv(3, seed=1, delay=1),
            lambda: popgym.RepeatPreviousEnv(3, seed=1),
            lambda: CourseEnv(3, seed=1, max_steps=5, num_points=32),
        ],
        ids=["cartpole", "signalling", "repeat_previous", "course"],
    )
    def test_plain_steps_past_the_limit_save_a_state_that_loads(self, make):
        env = make()
        root = env.reset()
        torch.manual_seed(0)
        for _ in range(3 * env._last_step() + 2):  # TorchRL's plain step: no reset
            root = env.rand_action(root)
            env.step(root.clone())
        saved = env.state_dict()
        assert int(saved["steps"].max()) == env._last_step()  # the counter stops there
        fresh = make()
        fresh.load_state_dict(saved)
        for _ in range(2):
            root = env.rand_action(root)
            a, b = env.step(root.clone()), fresh.step(root.clone())
            assert (a["next"] == b["next"]).all()

    def test_signalling_declared_ranges(self):
        env = SignallingEnv(2, seed=0, vocab=5)
        good = env.state_dict()
        _refused(env, _with(good, "target", (0,), 5), r"\['target'\] holds 5")
        _refused(env, _with(good, "token", (1,), -2), r"\['token'\] holds -2")


class TestCourseValues:
    """The course env's counters, epochs and course parameters."""

    @pytest.mark.parametrize("mode", ["track", "gates"])
    def test_checkpoint_counter_that_would_index_outside_is_refused(self, mode):
        env = CourseEnv(3, seed=1, max_steps=5, mode=mode)
        good = env.state_dict()
        _refused(env, _with(good, "counts", (1, 0), INT32_MAX), f"holds {INT32_MAX}")

    def test_epoch_at_the_int64_limit_is_refused(self):
        env = CourseEnv(3, seed=1, max_steps=5)
        good = env.state_dict()
        match = rf"\['course.epoch'\] holds {INT64_MAX}"
        _refused(env, _with(good, "course.epoch", (2,), INT64_MAX), match)
        env.load_state_dict(_with(good, "course.epoch", (2,), INT64_MAX - 1))
        env.regenerate(torch.tensor([0, 0, 1], dtype=torch.int32))
        assert env.generator.views["epoch"].tolist() == [0, 0, INT64_MAX]

    def test_epochs_past_the_int64_limit_are_refused_by_generate(self):
        env = CourseEnv(2, seed=1)
        with pytest.raises(ValueError, match="epochs"):
            env.generator.generate(0, INT64_MAX)

    @pytest.mark.parametrize("key", ["course.harmonics", "course.param_harmonics"])
    @pytest.mark.parametrize("value", [0, 9, INT32_MAX])
    def test_harmonics_out_of_range_are_refused(self, key, value):
        env = CourseEnv(2, seed=1)
        _refused(env, _with(env.state_dict(), key, (0,), value), rf"\['{key}'\] holds {value}")

    @pytest.mark.parametrize("key", ["course.param_scale", "course.width", "course.valid"])
    def test_course_values_out_of_range_are_refused(self, key):
        env = CourseEnv(2, seed=1)
        _refused(env, _with(env.state_dict(), key, (0,), -1), rf"\['{key}'\] holds -1")

    @pytest.mark.parametrize("key", ["pose", "course.centerline", "course.param_scale"])
    def test_floats_whose_squares_overflow_are_refused(self, key):
        env = CourseEnv(2, seed=1)
        index = (1,) + (0,) * (env.state_dict()[key].dim() - 1)
        _refused(env, _with(env.state_dict(), key, index, 1e30), rf"\['{key}'\] holds 1.0*\d*e\+30")


_FUZZ = """
import sys
import torch
import warp as wp
wp.config.log_level = wp.LOG_WARNING
sys.path.insert(0, {test_dir!r})
from test_state_dicts import ENVS

gen = torch.Generator().manual_seed(0)


def near(value, low, high):
    # an int at or next to a boundary of [low, high]
    pick = [low, low + 1, high - 1, high, value][int(torch.randint(0, 5, (), generator=gen))]
    return max(low, min(high, pick))


def bounds(env, key, value):
    # the widest int range the checks could accept for state entry ``key``
    if value.dtype == torch.int64:
        return -(2**63), 2**63 - 1
    if value.dtype == torch.uint8:
        return 0, 255
    return -(2**31), 2**31 - 1


def probe(env, good):
    # each int entry pushed to a boundary the checks accept; floats scaled up to 1e30
    state = {{}}
    for key, value in good.items():
        value = value.clone()
        if value.dtype == torch.bool:
            value = torch.randint(0, 2, value.shape, generator=gen).bool()
        elif value.is_floating_point():
            value = value * 10.0 ** int(torch.randint(0, 31, (), generator=gen))
        elif value.numel():
            low, high = bounds(env, key, value)
            flat = value.view(-1)
            i = int(torch.randint(0, flat.numel(), (), generator=gen))
            flat[i] = near(int(flat[i]), low, high)
        state[key] = value
    return state


def accepted_probe(env, good, tries=40):
    # a probe the checks accept, found by shrinking a refused one entry by entry
    for _ in range(tries):
        state = probe(env, good)
        for key in state:
            try:
                env.load_state_dict(state)
                return state
            except ValueError as err:
                bad = next(k for k in state if repr(k) in str(err))
                state[bad] = good[bad]
    return None


loaded = {{}}
for name in sorted(ENVS):
    env = ENVS[name]()
    env.rollout(4, break_when_any_done=False)
    good = env.state_dict()
    for trial in range(12):
        if accepted_probe(env, good) is None:
            continue
        loaded[name] = loaded.get(name, 0) + 1
        root = env.reset(env.reset().select().set("_reset", torch.rand(3, 1, generator=gen) < 0.3))
        for _ in range(6):
            td, root = env.step_and_maybe_reset(env.rand_action(root))
            for key, out in td["next"].items(True, True):
                if out.is_floating_point():
                    assert bool(out.isfinite().all()), (name, key)
        env.load_state_dict(good)
print(len(loaded), min(loaded.values()))
"""


def test_states_that_pass_the_checks_step_safely():
    """Random states at and next to the accepted boundaries, loaded into every env and stepped,
    never crash the process and give finite outputs. A child process, so that a crash fails the
    test instead of killing pytest."""
    test_dir = os.path.dirname(__file__)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    done = subprocess.run(
        [sys.executable, "-c", _FUZZ.format(test_dir=test_dir)],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    kinds, fewest = map(int, done.stdout.split()[-2:])
    assert kinds == len(ENVS) and fewest >= 6, done.stdout


class TestInputsAreTheEnvs:
    """``CourseEnv.inputs`` is a read-only mapping of the live tensors."""

    def test_entries_cannot_be_replaced_or_removed(self):
        env = CourseEnv(3, seed=0, mode="gates")
        live = env.inputs["regen_mask"]
        with pytest.raises(TypeError, match="regen_mask"):
            env.inputs["regen_mask"] = torch.ones(3, dtype=torch.int32)
        with pytest.raises(TypeError, match="reset_mask"):
            del env.inputs["reset_mask"]
        assert env.inputs["regen_mask"] is live
        env.load_state_dict(env.state_dict())

    def test_writes_into_the_live_tensors_drive_the_step(self):
        env = CourseEnv(3, seed=0, max_steps=50)
        root = env.reset()
        env.inputs["regen_mask"][1] = 1
        env.inputs["reset_mask"].copy_(torch.tensor([0, 0, 1], dtype=torch.int32))
        td, _ = env.step_and_maybe_reset(env.rand_action(root))
        assert td["next", "truncated"].view(-1).tolist() == [False, True, True]
        assert env.generation.tolist() == [0, 1, 0]

    @pytest.mark.parametrize("name", sorted(ENVS))
    def test_own_state_dict_loads_into_a_fresh_env(self, name):
        env = _used(name)
        saved = env.state_dict()
        fresh = ENVS[name]()
        fresh.load_state_dict(saved)
        assert_state_unchanged(saved, fresh)


def _steps(env, root, n: int, seed: int):
    """``n`` fused steps of random actions (drawn after seeding torch): "next" outputs, root."""
    torch.manual_seed(seed)
    out = []
    for _ in range(n):
        td, root = env.step_and_maybe_reset(env.rand_action(root))
        out.append(td["next"].clone())
    return out, root


def _collect(collector, batches: int) -> list:
    out = []
    for i, data in enumerate(collector):
        out.append(data.clone())
        if i + 1 == batches:
            break
    return out


class TestWrappedEnvs:
    """``BaseEnvState`` puts the base env's state into a ``TransformedEnv``'s checkpoint."""

    def test_plain_transformed_env_state_is_empty(self):
        # what TorchRL does without BaseEnvState: the reason the transform exists
        assert len(TransformedEnv(CartPoleEnv(2, seed=0), StepCounter()).state_dict()) == 0

    @pytest.mark.parametrize("name", ["cartpole", "course_gates", "signalling"])
    def test_transformed_env_state_restores_the_env_bitwise(self, name):
        env = TransformedEnv(ENVS[name](), Compose(StepCounter(), BaseEnvState()))
        _, root = _steps(env, env.reset(), 4, seed=1)
        saved, saved_env = env.state_dict(), env.base_env.state_dict()
        assert {f"transforms.1.base_env.{k}" for k in saved_env} <= saved.keys()
        expected, _ = _steps(env, root.clone(), 6, seed=0)
        other = TransformedEnv(ENVS[name](), Compose(StepCounter(), BaseEnvState()))
        other.load_state_dict(saved)
        assert_state_unchanged(saved_env, other.base_env)
        got, _ = _steps(other, root.clone(), 6, seed=0)
        for a, b in zip(expected, got, strict=True):
            assert (a == b).all()

    def test_bad_state_through_the_transform_is_refused(self):
        env = TransformedEnv(CartPoleEnv(2, seed=0), BaseEnvState())
        good = env.state_dict()
        key = "base_env.steps"
        assert key in good
        with pytest.raises(ValueError, match="steps"):
            env.load_state_dict(_with(good, key, (0,), INT32_MAX))
        with pytest.raises(ValueError, match=r"no 'base_env\.' entries"):
            env.load_state_dict({})

    def test_collector_checkpoint_restores_the_env_bitwise(self):
        def make():
            env = TransformedEnv(CartPoleEnv(3, seed=5, max_steps=6), BaseEnvState())
            return Collector(env, None, frames_per_batch=12, total_frames=-1)

        first = make()
        _collect(first, 2)
        saved = first.state_dict()
        restored = first.env.base_env.state_dict()
        torch.manual_seed(1)
        expected = _collect(first, 3)
        second = make()
        _collect(second, 1)  # a different state, overwritten by the load
        second.load_state_dict(saved, strict=False)  # strict: a policy state too
        assert_state_unchanged(restored, second.env.base_env)
        torch.manual_seed(1)
        got = _collect(second, 3)
        # the collector's carried root observation is its own, not the env's: compare the steps
        for a, b in zip(expected, got, strict=True):
            assert (a["next"] == b["next"]).all()
        first.shutdown()
        second.shutdown()
