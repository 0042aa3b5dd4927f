"""Authoring mistakes are refused at construction, naming the author's function and field.

Each test writes one mistake an env author makes in the three Warp functions, the constants or
the specs, and checks the error type (``TypeError`` for counts and types, ``ValueError`` for
names and values) and that the message names the function and the field, not the generated
kernels. The documented ``start`` pattern runs at both float dtypes.
"""

import doctest
import linecache
from typing import Any

import pytest
import torch
import warp as wp
from torchrl.data import Bounded, Composite, Unbounded

from torchrl_ext.envs.warp_env import WarpEnv, WarpFunctions, uniform_range


# ---------------------------------------------------------------------- the documented env
@wp.func
def drift_start(s: Any, p: Any, i: int, key: wp.uint32):
    s.x[i] = s.x.dtype(uniform_range(key, 0, wp.float64(-1.0), wp.float64(1.0)))


@wp.func
def drift_advance(s: Any, p: Any, a: Any, i: int, step: int, key: wp.uint32):
    s.x[i] = s.x[i] + p.dt * a.action[i]
    return -s.x[i] * s.x[i], wp.abs(s.x[i]) > 2.0


@wp.func
def drift_observe(s: Any, p: Any, o: Any, i: int, step: int, key: wp.uint32):
    o.observation[i] = s.x[i]


class _Drift(WarpEnv):
    """WarpEnv's documented example: one float state, one constant, specs in the env dtype."""

    functions = WarpFunctions(drift_start, drift_advance, drift_observe)
    constants: dict = {"dt": 0.5}
    observation_keys = ("observation",)

    def _make_specs(self):
        n, dt = self.num_envs, self.dtype
        obs = {k: Unbounded((n, 1), dtype=dt) for k in type(self).observation_keys}
        self.observation_spec = Composite(obs, shape=(n,))
        self.action_spec = Bounded(-1.0, 1.0, shape=(n, 1), dtype=dt)
        self.reward_spec = Unbounded((n, 1), dtype=dt)

    def _state_arrays(self):
        return {"x": float}

    def _constants(self):
        return dict(type(self).constants)


def _env_with(name: str, start=drift_start, advance=drift_advance, observe=drift_observe, **attrs):
    """A ``_Drift`` subclass with some functions or class attributes replaced."""
    attrs["functions"] = WarpFunctions(start, advance, observe)
    return type(name, (_Drift,), attrs)


# ---------------------------------------------------------------------- the mistakes
@wp.func
def start_misspells_state(s: Any, p: Any, i: int, key: wp.uint32):
    s.xx[i] = s.x.dtype(uniform_range(key, 0, wp.float64(-1.0), wp.float64(1.0)))


@wp.func
def advance_misspells_constant(s: Any, p: Any, a: Any, i: int, step: int, key: wp.uint32):
    s.x[i] = s.x[i] + p.dtt * a.action[i]
    return -s.x[i] * s.x[i], wp.abs(s.x[i]) > 2.0


@wp.func
def advance_misspells_action(s: Any, p: Any, a: Any, i: int, step: int, key: wp.uint32):
    s.x[i] = s.x[i] + p.dt * a.actions[i]
    return -s.x[i] * s.x[i], wp.abs(s.x[i]) > 2.0


@wp.func
def observe_misspells_entry(s: Any, p: Any, o: Any, i: int, step: int, key: wp.uint32):
    o.obs[i] = s.x[i]


@wp.func
def start_without_key(s: Any, p: Any, i: int):
    s.x[i] = s.x.dtype(0.0)


@wp.func
def observe_without_key(s: Any, p: Any, o: Any, i: int, step: int):
    o.observation[i] = s.x[i]


@wp.func
def advance_with_a_time_slot(s: Any, p: Any, a: Any, i: int, t: int, step: int):
    s.x[i] = s.x[i] + p.dt * a.action[i]
    return -s.x[i] * s.x[i], wp.abs(s.x[i]) > 2.0


@wp.func
def observe_with_a_float_key(s: Any, p: Any, o: Any, i: int, step: int, key: float):
    o.observation[i] = s.x[i]


@wp.func
def advance_returns_one_value(s: Any, p: Any, a: Any, i: int, step: int, key: wp.uint32):
    s.x[i] = s.x[i] + p.dt * a.action[i]
    return -s.x[i] * s.x[i]


@wp.func
def advance_returns_three_values(s: Any, p: Any, a: Any, i: int, step: int, key: wp.uint32):
    s.x[i] = s.x[i] + p.dt * a.action[i]
    return -s.x[i] * s.x[i], wp.abs(s.x[i]) > 2.0, step


@wp.func
def advance_returns_an_int_flag(s: Any, p: Any, a: Any, i: int, step: int, key: wp.uint32):
    s.x[i] = s.x[i] + p.dt * a.action[i]
    return -s.x[i] * s.x[i], 3


@wp.func
def advance_returns_a_long_vector(s: Any, p: Any, a: Any, i: int, step: int, key: wp.uint32):
    s.x[i] = s.x[i] + p.dt * a.action[i]
    r = -s.x[i] * s.x[i]
    return wp.vec3(r, r, r), wp.abs(s.x[i]) > 2.0


class _TwoRewards(_Drift):
    rewards_per_entry = True

    def _make_specs(self):
        super()._make_specs()
        n = self.num_envs
        reward = Unbounded((n, 1), dtype=self.dtype)
        self.full_reward_spec = Composite(a=reward, b=reward.clone(), shape=(n,))


class TestAuthoringMistakes:
    """Each mistake raises at construction; the message names the function and the field."""

    @pytest.mark.parametrize(
        ("functions", "match"),
        [
            ({"start": start_misspells_state}, r"start function 'start_misspells_state'.*s\.xx"),
            (
                {"advance": advance_misspells_constant},
                r"advance function 'advance_misspells_constant'.*p\.dtt.*constant 'dtt'",
            ),
            (
                {"advance": advance_misspells_action},
                r"advance function 'advance_misspells_action'.*a\.actions.*action entry",
            ),
            (
                {"observe": observe_misspells_entry},
                r"observe function 'observe_misspells_entry'.*o\.obs.*observation entry 'obs'",
            ),
        ],
        ids=["state", "constant", "action", "observation"],
    )
    def test_misspelled_field_names_the_function_and_field(self, functions, match):
        env_type = _env_with("Misspelled", **functions)
        with pytest.raises(ValueError, match=match):
            env_type(2, seed=0)

    def test_the_known_fields_are_listed(self):
        env_type = _env_with("Misspelled", start=start_misspells_state)
        with pytest.raises(ValueError, match="known: x"):
            env_type(2, seed=0)

    @pytest.mark.parametrize(
        ("functions", "match"),
        [
            ({"start": start_without_key}, r"start function 'start_without_key' takes 3"),
            ({"observe": observe_without_key}, r"observe function 'observe_without_key' takes 5"),
        ],
        ids=["start", "observe"],
    )
    def test_wrong_argument_count(self, functions, match):
        env_type = _env_with("WrongCount", **functions)
        with pytest.raises(TypeError, match=match):
            env_type(2, seed=0)

    @pytest.mark.parametrize(
        ("functions", "match"),
        [
            (
                {"advance": advance_with_a_time_slot},
                r"advance function 'advance_with_a_time_slot' annotates its argument 6 \(step\) "
                r"as int; that argument is key: wp.uint32",
            ),
            (
                {"observe": observe_with_a_float_key},
                r"observe function 'observe_with_a_float_key' annotates its argument 6 \(key\) "
                r"as float; that argument is key: wp.uint32",
            ),
        ],
        ids=["time-slot", "float-key"],
    )
    def test_argument_of_the_wrong_type(self, functions, match):
        env_type = _env_with("WrongTypes", **functions)
        with pytest.raises(TypeError, match=match):
            env_type(2, seed=0)

    @pytest.mark.parametrize(
        ("advance", "match"),
        [
            (advance_returns_one_value, r"'advance_returns_one_value' returns one value"),
            (advance_returns_three_values, r"'advance_returns_three_values' returns 3 values"),
        ],
        ids=["one", "three"],
    )
    def test_advance_returning_a_wrong_count(self, advance, match):
        env_type = _env_with("WrongReturns", advance=advance)
        with pytest.raises(TypeError, match=match):
            env_type(2, seed=0)

    def test_advance_returning_wrong_types_names_advance(self):
        # its own kernel module: a kernel that fails to compile stays in its module
        env_type = _env_with(
            "WrongTypes", advance=advance_returns_an_int_flag, __module__="authoring_wrong_types"
        )
        with pytest.raises(TypeError, match=r"advance function 'advance_returns_an_int_flag'"):
            env_type(2, seed=0)

    def test_reward_vector_longer_than_the_entries(self):
        env_type = type(
            "LongVector",
            (_TwoRewards,),
            {"functions": WarpFunctions(drift_start, advance_returns_a_long_vector, drift_observe)},
        )
        with pytest.raises(ValueError, match=r"'advance_returns_a_long_vector'.*vector of 3.*2"):
            env_type(2, seed=0)


class TestUnrepresentable:
    """What the generated code cannot hold is refused, naming the constant or the keys."""

    @pytest.mark.parametrize("value", [2**31, -(2**31) - 1, 2**40])
    def test_int_constants_outside_int32(self, value):
        env_type = _env_with("BigConstant", constants={"dt": 0.5, "size": value})
        with pytest.raises(ValueError, match=rf"size={value}.*int32"):
            env_type(2, seed=0)

    def test_int32_bounds_are_accepted_as_given(self):
        env_type = _env_with("EdgeConstant", constants={"dt": 0.5, "lo": -(2**31), "hi": 2**31 - 1})
        env = env_type(2, seed=0)
        params = env._physics.params
        assert (params.lo, params.hi) == (-(2**31), 2**31 - 1)

    def test_constant_of_another_type(self):
        env_type = _env_with("StrConstant", constants={"dt": 0.5, "name": "x"})
        with pytest.raises(TypeError, match="'name' of type str"):
            env_type(2, seed=0)

    def test_observation_keys_that_join_to_one_field(self):
        env_type = _env_with(
            "Colliding", observation_keys=("observation", ("a", "b_c"), ("a_b", "c"))
        )
        with pytest.raises(ValueError, match=r"\('a', 'b_c'\) and \('a_b', 'c'\).*'a_b_c'"):
            env_type(2, seed=0)


class TestDocumentedStart:
    """The documented ``start`` (``s.x.dtype(uniform_range(...))``) runs at both float dtypes."""

    @pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
    def test_drift_rolls_out(self, dtype):
        env = _Drift(4, seed=0, max_steps=8, dtype=dtype)
        data = env.rollout(20, break_when_any_done=False)
        assert data["next", "observation"].dtype == dtype
        x = env.state_dict()["x"]
        assert x.dtype == dtype and bool(x.isfinite().all())
        assert bool(data["next", "done"].any())

    @pytest.mark.parametrize("dtype", ["torch.float32", "torch.float64"])
    def test_the_docstring_example_runs_at_both_dtypes(self, dtype):
        examples = doctest.DocTestParser().get_examples(WarpEnv.__doc__)
        source = "".join(example.source for example in examples)
        built = "Drift(4, seed=0, max_steps=8)"
        assert built in source
        source = source.replace(built, built[:-1] + f", dtype={dtype})")
        filename = f"<WarpEnv docstring, {dtype}>"  # Warp reads a function's source lines
        linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
        namespace = {"__name__": f"warp_env_docstring_{dtype[-2:]}"}
        exec(compile(source, filename, "exec"), namespace)
        assert namespace["data"]["next", "observation"].dtype == getattr(torch, dtype[6:])
