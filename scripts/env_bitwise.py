r"""Bitwise regression check for the Warp envs: record every output once, compare after a refactor.

The script runs a fixed set of scenarios on every env (``CartPoleEnv``, ``PendulumEnv``,
``CourseEnv``, ``SignallingEnv``) in several configurations, each eager and with
``capture=True``, each with ``sync_free`` off and on. A scenario drives the env through its
public API only (reset, partial reset, step, step_and_maybe_reset, rollout, TorchRL transforms
and Collector, state_dict / load_state_dict, pickle, deepcopy, set_seed, CourseEnv's masks, bad
inputs) and records every tensor it hands out, the env's state_dict, and the message of every
error, as named entries (``<config>/capture=<0|1>/sync_free=<0|1>/<scenario>/<what>``).
Torch's global RNG is seeded at the start of every scenario, so the random actions are the same
on every run.

``record`` saves the entries with ``torch.save``; ``compare`` runs the scenarios again and
compares them with the saved ones bit for bit (same dtype, same shape, same bytes, so NaN
payloads count), prints every difference and a final ``"N recorded, M differ"`` line, and exits
with status 1 if anything differs. The ``torchrl_ext`` imported is whichever is first on the
path, so the baseline is recorded from a frozen checkout::

    cd /tmp && PYTHONPATH=/work/baseline python /work/main/scripts/env_bitwise.py \
        record /work/bitwise/baseline.pt
    cd /work/main && .venv/bin/python scripts/env_bitwise.py compare /work/bitwise/baseline.pt

Two things change from run to run and are normalised: memory addresses (``0x...``) in error
messages become ``0x?``, and the key order of the outputs of a reset with a ``"_reset"`` mask
(TorchRL merges them through a set) is recorded sorted.
"""

from __future__ import annotations

import argparse
import copy
import functools
import pickle
import re
import sys
import time
import traceback
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
from tensordict import TensorDict, TensorDictBase
from torchrl.collectors import Collector
from torchrl.envs import Compose, InitTracker, RewardSum, StepCounter, TransformedEnv
from torchrl.envs.utils import step_mdp

import torchrl_ext
from torchrl_ext.envs import (
    CarConfig,
    CartPoleEnv,
    CourseEnv,
    CourseParams,
    PendulumEnv,
    SignallingEnv,
)

SEED = 20240611
STEPS = 24  # step() and step_and_maybe_reset() loops
ROLLOUT = 40  # rollout length
POLICY_ROLLOUT = 60  # with the policy: long enough for CourseEnv laps
ADDRESS = re.compile(r"0x[0-9a-fA-F]+")
PUBLIC_TENSORS = (
    "state",
    "target",
    "token",
    "valid",
    "generation",
    "pose",
    "progress",
    "counters",
    "action_fault",
)
PUBLIC_VALUES = ("seed", "num_envs", "max_steps", "step_limit", "dtype", "capture", "sync_free")


# ---------------------------------------------------------------------------- recording
class Recorder:
    """Named entries (tensors and strings) written into one shared dict, under a name prefix."""

    def __init__(self, entries: dict[str, Any], prefix: str = "") -> None:
        self.entries = entries
        self.prefix = prefix

    def sub(self, name: str) -> Recorder:
        """A recorder writing into the same entries, under ``<prefix>/<name>``."""
        return Recorder(self.entries, f"{self.prefix}/{name}" if self.prefix else name)

    def _put(self, name: str, value: Any) -> None:
        key = f"{self.prefix}/{name}"
        if key in self.entries:
            raise KeyError(f"entry {key!r} recorded twice")
        self.entries[key] = value

    def tensor(self, name: str, value: torch.Tensor) -> None:
        """A copy: live views would change after recording, views of rollouts save their base."""
        self._put(name, value.detach().clone())

    def text(self, name: str, value: Any) -> None:
        """``str(value)``, memory addresses replaced by ``0x?`` (they change from run to run)."""
        self._put(name, ADDRESS.sub("0x?", str(value)))

    def td(self, name: str, td: TensorDictBase, sort_keys: bool = False) -> None:
        """Every leaf of ``td`` (nested keys joined with dots) and its layout."""
        self.tds(name, [td], sort_keys)

    def tds(self, name: str, tds: list[TensorDictBase], sort_keys: bool = False) -> None:
        """Snapshots of successive steps: per leaf, one entry stacking every step's value.

        A single TensorDict is recorded as it is (no leading step dim).
        The callers pass clones: the env writes into the TensorDicts it is given. One text entry
        holds every step's layout (key order, batch size, dim names, device). A leaf missing
        from some steps, or changing shape or dtype, is recorded step by step. ``sort_keys``
        records the keys sorted, for outputs whose key order changes from run to run (TorchRL's
        partial-reset merge, ``TensorDict.where(..., pad=0)``, orders keys through a set).
        """
        leaves: dict[str, list] = {}
        layouts = []
        for step, td in enumerate(tds):
            keys = []
            for key, val in td.items(include_nested=True, leaves_only=True):
                flat = key if isinstance(key, str) else ".".join(key)
                keys.append(flat)
                leaves.setdefault(flat, []).append((step, val))
            batch, names = list(td.batch_size), td.names
            keys = sorted(keys) if sort_keys else keys
            layouts.append(f"keys={keys} batch={batch} names={names} device={td.device}")
        for flat, values in leaves.items():
            if all(isinstance(v, torch.Tensor) for _, v in values) and len(values) == len(tds):
                if len(values) == 1:
                    self.tensor(f"{name}.{flat}", values[0][1])
                    continue
                if len({(v.shape, v.dtype) for _, v in values}) == 1:
                    self.tensor(f"{name}.{flat}", torch.stack([v for _, v in values]))
                    continue
            for step, val in values:
                if isinstance(val, torch.Tensor):
                    self.tensor(f"{name}.{flat}[{step}]", val)
                else:
                    self.text(f"{name}.{flat}[{step}]", repr(val))
        self.text(f"{name}:layout", "\n".join(runs_of(layouts)))

    def state(self, name: str, env: Any) -> None:
        """``env.state_dict()`` packed into one byte tensor, and its layout.

        :func:`describe_difference` names the state key of the first byte that differs.
        """
        state = env.state_dict()
        chunks = [val.detach().reshape(-1).view(torch.uint8) for val in state.values()]
        layout = [
            f"{key} {val.dtype} {tuple(val.shape)} {chunk.numel()}"
            for (key, val), chunk in zip(state.items(), chunks, strict=True)
        ]
        self.tensor(f"{name}.state", torch.cat(chunks))
        self.text(f"{name}.state:layout", "\n".join(layout))

    def state_dict(self, name: str, state: dict) -> None:
        """Every tensor of a state dict, one entry each, and its key order."""
        for key, val in state.items():
            self.tensor(f"{name}.sd.{key}", val)
        self.text(f"{name}.sd:keys", list(state))

    def properties(self, name: str, env: Any) -> None:
        """The env's public state properties (the ones it has) and its public settings."""
        for attr in PUBLIC_TENSORS:
            if hasattr(env, attr):
                self.tensor(f"{name}:prop.{attr}", getattr(env, attr))
        self.text(f"{name}:values", {attr: getattr(env, attr) for attr in PUBLIC_VALUES})

    def attempt(self, name: str, call: Callable[[], Any]) -> Any:
        """Run ``call``; record its error as ``"Type: message"`` (or ``"no error"``)."""
        try:
            result = call()
        except Exception as err:  # every refusal is recorded, whatever its type
            self.text(name, f"{type(err).__name__}: {err}")
            return None
        self.text(name, "no error")
        return result


def runs_of(lines: list[str]) -> list[str]:
    """``lines`` with runs of equal lines written once, as ``"steps i-j: line"``."""
    out, start = [], 0
    for i in range(1, len(lines) + 1):
        if i == len(lines) or lines[i] != lines[start]:
            out.append(f"steps {start}-{i - 1}: {lines[start]}")
            start = i
    return out


# ---------------------------------------------------------------------------- configurations
@dataclass(frozen=True)
class EnvConfig:
    """One env configuration: class, constructor keywords, number of envs."""

    name: str
    cls: type
    num_envs: int
    kwargs: dict = field(default_factory=dict)

    def build(self, capture: bool, sync_free: bool, seed: int | None = SEED, **over: Any) -> Any:
        """A new env of this configuration; ``over`` overrides constructor keywords."""
        kwargs = {**self.kwargs, **over}
        env = self.cls(self.num_envs, seed=seed, capture=capture, **kwargs)
        env.sync_free = sync_free
        return env


SMALL_COURSE = {"num_points": 16, "max_checkpoints": 16, "num_rays": 3}
CONFIGS = (
    EnvConfig("cartpole_f32", CartPoleEnv, 8),
    EnvConfig(
        "cartpole_f64_novel",
        CartPoleEnv,
        8,
        {"dtype": torch.float64, "observe_velocity": False},
    ),
    EnvConfig("cartpole_trunc", CartPoleEnv, 8, {"max_steps": 7}),
    EnvConfig("pendulum", PendulumEnv, 6, {"max_steps": 9}),
    EnvConfig("pendulum_f64", PendulumEnv, 5, {"max_steps": 11, "dtype": torch.float64}),
    EnvConfig("course_default", CourseEnv, 6, {"max_steps": 25}),
    EnvConfig(
        "course_regenerate",
        CourseEnv,
        6,
        {
            **SMALL_COURSE,
            "crash": "regenerate",
            "max_steps": 50,
            "params": CourseParams(scale=2.5, roughness=0.2, width=2.5, checkpoint_spacing=2.0),
            "car": CarConfig(max_speed=6.0, crash_penalty=0.5),
        },
    ),
    EnvConfig(
        "course_gates",
        CourseEnv,
        6,
        {
            **SMALL_COURSE,
            "mode": "gates",
            "max_steps": 55,
            "collision": 0.4,
            "params": CourseParams(
                scale=3.0, roughness=0.2, gate_width=3.0, checkpoint_spacing=2.0
            ),
        },
    ),
    EnvConfig("signalling_shared", SignallingEnv, 8, {"rewards": "shared", "vocab": 4, "delay": 1}),
    EnvConfig(
        "signalling_per_agent",
        SignallingEnv,
        8,
        {"rewards": "per_agent", "vocab": 3, "delay": 2, "dtype": torch.float64},
    ),
)

Make = Callable[..., Any]


# ---------------------------------------------------------------------------- actions and policies
def with_actions(env: Any, td: TensorDictBase) -> TensorDictBase:
    """Write random actions of every action leaf into ``td`` (torch's global RNG).

    Float actions are drawn over one and a half times the spec's range, so that clipping runs.
    """
    actions = env.full_action_spec.rand()
    for key, val in actions.items(include_nested=True, leaves_only=True):
        td.set(key, val * 1.5 if val.is_floating_point() else val)
    return td


def policy_for(env: Any) -> Callable[[TensorDictBase], TensorDictBase]:
    """A deterministic policy reading the observation (SignallingEnv: the public target)."""
    if isinstance(env, SignallingEnv):
        wrong = torch.arange(env.num_envs) % 3 == 0

        def policy(td: TensorDictBase) -> TensorDictBase:
            target = env.target.long()
            td["speaker", "action"] = target
            td["listener", "action"] = torch.where(wrong, (target + 1) % env.vocab, target)
            return td

        return policy
    if isinstance(env, CourseEnv):
        gates, heading = env.mode == "gates", 1 if env.mode == "gates" else env.num_rays + 1

        def policy(td: TensorDictBase) -> TensorDictBase:  # steer to the course and its middle
            obs = td["observation"]
            centre = -obs[:, 2] if gates else obs[:, env.num_rays - 1] - obs[:, 0]
            steer = torch.tanh(centre - 3.0 * obs[:, heading])
            td["action"] = torch.stack([steer, torch.full_like(steer, 0.8)], -1)
            return td

        return policy
    if isinstance(env, PendulumEnv):

        def policy(td: TensorDictBase) -> TensorDictBase:
            obs = td["observation"]
            td["action"] = -3.0 * obs[:, 1:2] - 0.5 * obs[:, 2:3]
            return td

        return policy

    def policy(td: TensorDictBase) -> TensorDictBase:  # CartPole: push towards the lean
        td["action"] = (td["observation"].sum(-1) > 0).long()
        return td

    return policy


def advance(env: Any, root: TensorDictBase, steps: int) -> TensorDictBase:
    """``steps`` fused steps on random actions; the last root."""
    for _ in range(steps):
        _, root = env.step_and_maybe_reset(with_actions(env, root))
    return root


def reset_mask(env: Any, shape: tuple) -> TensorDict:
    """A TensorDict holding a random bool ``"_reset"`` mask (torch's global RNG)."""
    return TensorDict({"_reset": torch.rand(shape) < 0.5}, batch_size=env.batch_size)


def int_mask(env: Any) -> torch.Tensor:
    """A random int32 ``[num_envs]`` mask for CourseEnv's regenerate/respawn/reset_epoch."""
    return (torch.rand(env.num_envs) < 0.5).to(torch.int32)


# ---------------------------------------------------------------------------- scenarios
def sc_reset(rec: Recorder, make: Make) -> None:
    """Full reset, then partial resets with [N, 1], [N] and all-False masks."""
    env = make()
    rec.td("full", env.reset())
    rec.properties("full", env)
    n = env.num_envs
    for name, shape in (("partial_n1", (n, 1)), ("partial_n", (n,))):
        advance(env, env.reset(), 5)
        rec.td(name, env.reset(reset_mask(env, shape)), sort_keys=True)
        rec.state(name, env)
    advance(env, env.reset(), 3)
    none = TensorDict({"_reset": torch.zeros(n, 1, dtype=torch.bool)}, batch_size=[n])
    rec.td("none_masked", env.reset(none), sort_keys=True)
    rec.state("none_masked", env)


def sc_step(rec: Recorder, make: Make) -> None:
    """step() on random actions (no auto-reset), then rand_action and rand_step."""
    env = make()
    root = env.reset()
    steps, is_input = [], []
    for _ in range(STEPS // 2):
        inp = with_actions(env, root)
        td = env.step(inp)
        is_input.append(td is inp)
        steps.append(td.clone())
        root = step_mdp(td)
    rec.tds("steps", steps)
    rec.text("steps:is_input", is_input)
    rec.properties("after_steps", env)
    rec.td("rand_action", env.rand_action(root.clone()))
    rec.td("rand_action_new", env.rand_action())
    rec.td("rand_step", env.rand_step(root))
    rec.state("end", env)


def carried_root(env: Any) -> TensorDictBase:
    """A reset root carrying extra policy entries (zeroed by a partial auto-reset)."""
    root = env.reset()
    n = env.num_envs
    root["memory"] = torch.randn(n, 3, dtype=torch.float64)
    root["extra"] = TensorDict({"h": torch.randn(n, 2), "k": torch.arange(n)}, batch_size=[n])
    return root


def sc_step_and_maybe_reset(rec: Recorder, make: Make) -> None:
    """Fused step + auto-reset over several episode ends, with a few input variants.

    Every 8th step passes a device-less input; every 8th (offset 5) one still holding the last
    step's ``"next"`` (TorchRL's generic step-then-reset path).
    """
    env = make()
    root = carried_root(env)
    tds, roots, is_input = [], [], []
    for i in range(STEPS + 12):
        inp = with_actions(env, root)
        if i % 8 == 2:
            inp = inp.clone().clear_device_()
        elif i % 8 == 5 and tds:
            inp.set("next", tds[-1]["next"].clone())
        td, root = env.step_and_maybe_reset(inp)
        is_input.append(td is inp)
        tds.append(td.clone())
        roots.append(root.clone())
    rec.tds("tds", tds)
    rec.tds("roots", roots)
    rec.text("tds:is_input", is_input)
    rec.properties("end", env)
    rec.state("end", env)


def sc_rollout_fast(rec: Recorder, make: Make) -> None:
    """rollout(T, break_when_any_done=False) without a policy (the kernel fast path if any)."""
    env = make()
    rec.td("rollout", env.rollout(ROLLOUT, break_when_any_done=False))
    rec.state("after_rollout", env)
    rec.td("again", env.rollout(ROLLOUT // 2 + 1, break_when_any_done=False))
    rec.td(
        "contiguous",
        env.rollout(7, break_when_any_done=False, return_contiguous=True),
    )
    masked = reset_mask(env, (env.num_envs, 1))
    masked_start = env.rollout(9, break_when_any_done=False, tensordict=masked)
    rec.td("masked_start", masked_start, sort_keys=True)
    rec.state("end", env)


def sc_rollout_policy(rec: Recorder, make: Make) -> None:
    """TorchRL's rollout loop: with a policy, breaking or not, without auto-reset, all-done."""
    env = make()
    policy = policy_for(env)
    rec.td("policy", env.rollout(POLICY_ROLLOUT, policy, break_when_any_done=False))
    rec.td("policy_break_any", env.rollout(ROLLOUT, policy))
    rec.td("random_break_any", env.rollout(ROLLOUT))
    root = advance(env, env.reset(), 3)
    rec.td(
        "no_auto_reset",
        env.rollout(
            ROLLOUT // 2, policy, auto_reset=False, tensordict=root, break_when_any_done=False
        ),
    )
    rec.td(
        "break_all_done",
        env.rollout(ROLLOUT, policy, break_when_any_done=False, break_when_all_done=True),
    )
    rec.state("end", env)


def sc_torchrl_stack(rec: Recorder, make: Make) -> None:
    """Under TorchRL transforms (InitTracker, StepCounter, RewardSum) and in a Collector."""
    env = make()
    stack = Compose(InitTracker(), StepCounter(), RewardSum(in_keys=env.reward_keys))
    tenv = TransformedEnv(env, stack)
    rec.td("rollout", tenv.rollout(ROLLOUT, break_when_any_done=False))
    rec.td("rollout_policy", tenv.rollout(ROLLOUT, policy_for(env), break_when_any_done=False))
    for name, policy in (("collector_random", None), ("collector_policy", policy_for(env))):
        frames = env.num_envs * 10
        collector = Collector(tenv, policy, frames_per_batch=frames, total_frames=3 * frames)
        rec.tds(name, [batch.clone() for batch in collector])
        collector.shutdown()
    rec.state("end", env)


def run_side_by_side(rec: Recorder, envs: dict[str, Any], root: TensorDictBase) -> None:
    """Step every env on the same random actions (drawn once per step); record each one.

    Torch's global RNG is reseeded first: every call draws the same actions.
    """
    torch.manual_seed(1)
    roots = {name: root.clone() for name in envs}
    tds: dict[str, list] = {name: [] for name in envs}
    outs: dict[str, list] = {name: [] for name in envs}
    for _ in range(STEPS // 2):
        actions = with_actions(next(iter(envs.values())), TensorDict(batch_size=root.batch_size))
        for name, env in envs.items():
            td, roots[name] = env.step_and_maybe_reset(roots[name].update(actions.clone()))
            tds[name].append(td.clone())
            outs[name].append(roots[name].clone())
    for name, env in envs.items():
        rec.tds(f"{name}.tds", tds[name])
        rec.tds(f"{name}.roots", outs[name])
        rec.state(f"{name}.end", env)


def sc_state_dict(rec: Recorder, make: Make) -> None:
    """state_dict after some steps, loaded into a fresh env (other seed) and back into itself."""
    env = make()
    root = advance(env, carried_root(env), 11)
    saved = env.state_dict()
    rec.state_dict("saved", saved)
    fresh = make(seed=SEED + 99)
    fresh.load_state_dict(saved)
    rec.state("fresh_loaded", fresh)
    rec.properties("fresh_loaded", fresh)
    run_side_by_side(rec.sub("continue"), {"orig": env, "fresh": fresh}, root)
    env.load_state_dict(saved)  # back to the saved point: the same continuation again
    rec.state("reloaded", env)
    run_side_by_side(rec.sub("continue_reloaded"), {"orig": env}, root)
    env.load_state_dict({})  # what a collector saves for its env: restores nothing
    rec.state("empty_loaded", env)


def sc_copies(rec: Recorder, make: Make) -> None:
    """Pickle and deepcopy after some steps; the copies continue as the original."""
    env = make()
    root = advance(env, carried_root(env), 9)
    pickled = pickle.loads(pickle.dumps(env))
    deep = copy.deepcopy(env)
    for name, other in (("pickled", pickled), ("deepcopy", deep)):
        rec.state(name, other)
        rec.properties(name, other)
    run_side_by_side(rec.sub("continue"), {"orig": env, "pickled": pickled, "deep": deep}, root)
    for other in (pickled, deep):  # pickle rebuilds from the constructor: sync_free is not kept
        other.sync_free = env.sync_free
    rec.td("pickled_reset", pickled.reset())
    root = deep.reset()
    rec.td("deep_reset", root)
    run_side_by_side(rec.sub("continue_sync_free"), {"pickled": pickled, "deep": deep}, root)


def sc_seed(rec: Recorder, make: Make) -> None:
    """set_seed (several seeds) then reset and steps; a seed drawn from torch's RNG."""
    env = make()
    advance(env, env.reset(), 4)
    for seed in (7, 1, 2**32 + 1, 2**64 - 1, SEED):
        rec.text(f"set_seed_{seed}:return", repr(env.set_seed(seed)))
        rec.td(f"seed_{seed}.reset", env.reset())
        rec.state(f"seed_{seed}.after_reset", env)
        root = advance(env, env.reset(), 6)
        rec.td(f"seed_{seed}.root", root)
    rec.text("static:return", repr(env.set_seed(3, static_seed=True)))
    rec.td("static.reset", env.reset())
    drawn = make(seed=None)
    rec.text("drawn_seed", drawn.seed)
    rec.td("drawn.reset", drawn.reset())


def sc_course_masks(rec: Recorder, make: Make) -> None:
    """CourseEnv's regenerate, respawn, reset_epoch, observe and step inputs."""
    env = make()
    root = advance(env, env.reset(), 6)
    calls = (
        ("regenerate", lambda: env.regenerate(int_mask(env))),
        ("regenerate_same", lambda: env.regenerate(int_mask(env), advance=False)),
        ("respawn", lambda: env.respawn(int_mask(env))),
        ("regenerate_all", env.regenerate),
        ("reset_epoch", lambda: env.reset_epoch(int_mask(env))),
        ("respawn_all", env.respawn),
        ("regenerate_again", lambda: env.regenerate(int_mask(env))),
        ("reset_epoch_all", env.reset_epoch),
    )
    for name, call in calls:
        call()
        rec.td(f"{name}.observe", env.observe())
        rec.properties(name, env)
        root = advance(env, root, 2)
        rec.td(f"{name}.root", root)
    n = env.num_envs
    env.inputs["regen_mask"].copy_(torch.arange(n) % 3 == 1)
    env.inputs["reset_mask"].copy_(torch.arange(n) % 3 == 2)
    tds, roots = [], []
    for i in range(4):
        td, root = env.step_and_maybe_reset(with_actions(env, root))
        tds.append(td.clone())
        roots.append(root.clone())
        rec.properties(f"inputs{i}", env)
    rec.tds("inputs.tds", tds)
    rec.tds("inputs.roots", roots)
    env.inputs["regen_mask"].zero_()
    env.inputs["reset_mask"].zero_()
    rec.td("inputs_cleared", env.step(with_actions(env, root)))
    rec.state("end", env)


# ---------------------------------------------------------------------------- bad inputs
def bad_actions(env: Any) -> list[tuple[str, dict[Any, Any]]]:
    """(name, {action key: bad action}) pairs: wrong dtype, shape, device, values."""
    out = []
    for key, spec in env.full_action_spec.items(include_nested=True, leaves_only=True):
        good = spec.rand()
        label = key if isinstance(key, str) else ".".join(key)
        other = torch.float32 if good.dtype != torch.float32 else torch.int64
        if good.dtype == torch.float64:
            other = torch.float32
        out.append((f"{label}.dtype", {key: good.to(other)}))
        out.append((f"{label}.shape", {key: good.unsqueeze(-1)}))
        wider = torch.stack([good, good], -1) if good.dim() == 1 else good[:, :1].repeat(1, 3)
        out.append((f"{label}.trailing", {key: wider}))
        out.append((f"{label}.meta", {key: good.to("meta")}))
        if good.is_floating_point():
            nan = good.clone()
            nan[1] = float("nan")
            inf = good.clone()
            inf[0], inf[-1] = float("inf"), -float("inf")
            out += [(f"{label}.nan", {key: nan}), (f"{label}.inf", {key: inf})]
        else:
            high, low = good.clone(), good.clone()
            high[2] = int(spec.space.n)
            low[0] = -1
            out += [(f"{label}.high", {key: high}), (f"{label}.low", {key: low})]
    return out


def bad_input(env: Any, root: TensorDictBase, bad: dict) -> TensorDictBase:
    """A copy of ``root`` with random actions, then the ``bad`` ones.

    A meta-device action goes into a device-less copy (a TensorDict on the CPU would refuse it).
    """
    inp = with_actions(env, root.clone())
    if any(val.is_meta for val in bad.values()):
        inp.clear_device_()
    for key, val in bad.items():
        inp.set(key, val)
    return inp


def sc_bad_actions(rec: Recorder, make: Make) -> None:
    """Bad actions through step and step_and_maybe_reset; check_actions after each (sync_free)."""
    env = make()
    root = advance(env, env.reset(), 3)
    for name, bad in bad_actions(env):
        for method in ("step", "step_and_maybe_reset"):
            step = getattr(env, method)
            result = rec.attempt(
                f"{name}.{method}", lambda s=step, b=bad, r=root: s(bad_input(env, r, b))
            )
            if isinstance(result, tuple):
                rec.td(f"{name}.{method}.td", result[0])
                rec.td(f"{name}.{method}.root", result[1])
            elif result is not None:
                rec.td(f"{name}.{method}.td", result)
            rec.tensor(f"{name}.{method}.action_fault", env.action_fault)
            rec.attempt(f"{name}.{method}.check_actions", env.check_actions)
            rec.state(f"{name}.{method}.after", env)
            root = env.reset()
    missing = env.reset()
    rec.attempt("missing_action", lambda: env.step(missing))
    rec.state("missing_action", env)


def bad_states(env: Any) -> list[tuple[str, Any]]:
    """(name, state) pairs that load_state_dict must refuse."""
    good = env.state_dict()
    first = next(iter(good))

    def edited(key: str, value: Any) -> dict:
        return {**good, key: value}

    out = [
        ("missing_key", {k: v for k, v in good.items() if k != first}),
        ("extra_key", {**good, "bogus": torch.zeros(1)}),
        ("wrong_shape", edited("steps", torch.zeros(env.num_envs + 1, dtype=torch.int32))),
        ("wrong_dtype", edited("steps", good["steps"].float())),
        ("negative_steps", edited("steps", torch.full_like(good["steps"], -1))),
        ("seed_word", edited("seed", torch.tensor([2**32, 0]))),
        ("not_tensor", edited("episode", good["episode"].tolist())),
        ("meta_tensor", edited("episode", good["episode"].to("meta"))),
        ("not_mapping", list(good.values())),
    ]
    if "target" in good:
        out.append(("target_range", edited("target", torch.full_like(good["target"], env.vocab))))
        out.append(("token_range", edited("token", torch.full_like(good["token"], -2))))
    if "counts" in good:
        counts = good["counts"].clone()
        counts[:, -2] = -1  # a segment index (see CourseEnv.counters)
        out.append(("counts_range", edited("counts", counts)))
    return out


def sc_bad_resets(rec: Recorder, make: Make) -> None:
    """Bad "_reset" masks, state dicts, load options, rollout lengths and settings."""
    env = make()
    advance(env, env.reset(), 4)
    n = env.num_envs
    masks = {
        "mask_int": torch.ones(n, 1, dtype=torch.int32),
        "mask_float": torch.ones(n),
        "mask_shape": torch.ones(n, 2, dtype=torch.bool),
        "mask_meta": torch.ones(n, 1, dtype=torch.bool, device="meta"),
    }
    for name, mask in masks.items():
        td = TensorDict({"_reset": mask}, batch_size=[n])
        rec.attempt(name, lambda t=td: env.reset(t))
        rec.state(name, env)
    for name, state in bad_states(env):
        rec.attempt(f"state.{name}", lambda s=state: env.load_state_dict(s))
        rec.state(f"state.{name}", env)
    good = env.state_dict()
    rec.attempt("state.strict_false", lambda: env.load_state_dict(good, strict=False))
    rec.attempt("state.assign_true", lambda: env.load_state_dict(good, assign=True))
    rec.attempt("rollout_zero", lambda: env.rollout(0, break_when_any_done=False))
    rec.attempt("rollout_float", lambda: env.rollout(2.5))
    rec.attempt("sync_free_int", lambda: setattr(env, "sync_free", 1))
    rec.attempt("set_seed_negative", lambda: env.set_seed(-1))
    rec.state("end", env)


def sc_bad_course_masks(rec: Recorder, make: Make) -> None:
    """CourseEnv's mask methods refusing bad masks."""
    env = make()
    advance(env, env.reset(), 3)
    n = env.num_envs
    masks = {
        "float": torch.ones(n),
        "shape": torch.ones(n + 1, dtype=torch.int32),
        "strided": torch.ones(2 * n, dtype=torch.int32)[::2],
        "list": [1] * n,
    }
    for method in ("regenerate", "respawn", "reset_epoch"):
        for name, mask in masks.items():
            call = functools.partial(getattr(env, method), mask)
            rec.attempt(f"{method}.{name}", call)
            rec.state(f"{method}.{name}", env)
    rec.attempt("advance_int", lambda: env.regenerate(None, advance=1))
    rec.state("end", env)


CONSTRUCTOR_ARGS = {
    "num_envs_0": {"num_envs": 0},
    "num_envs_float": {"num_envs": 2.0},
    "dtype_int": {"dtype": torch.int32},
    "dtype_str": {"dtype": "float32"},
    "dtype_python_int": {"dtype": int},
    "seed_negative": {"seed": -1},
    "seed_too_big": {"seed": 2**64},
    "max_steps_0": {"max_steps": 0},
    "capture_int": {"capture": 1},
    "device_tpu": {"device": "tpu"},
}
CLASS_ARGS = {
    CartPoleEnv: {"observe_velocity_int": {"observe_velocity": 1}},
    PendulumEnv: {},
    CourseEnv: {
        "crash": {"crash": "explode"},
        "mode": {"mode": "maze"},
        "num_points": {"num_points": 4},
        "collision": {"collision": 0.0},
        "params": {"params": {"scale": 1.0}},
    },
    SignallingEnv: {
        "vocab": {"vocab": 1},
        "rewards": {"rewards": "team"},
        "delay": {"delay": -1},
    },
}


def sc_bad_constructor(rec: Recorder, cfg: EnvConfig) -> None:
    """Constructor arguments each env must refuse."""
    for name, args in {**CONSTRUCTOR_ARGS, **CLASS_ARGS[cfg.cls]}.items():
        kwargs = {"seed": SEED, **cfg.kwargs, **args}
        num_envs = kwargs.pop("num_envs", cfg.num_envs)
        rec.attempt(name, lambda n=num_envs, k=kwargs: cfg.cls(n, **k))


def sc_specs(rec: Recorder, make: Make) -> None:
    """The env's specs as text."""
    env = make()
    for name in ("full_observation_spec", "full_action_spec", "full_reward_spec"):
        rec.text(name, getattr(env, name))
    rec.text("full_done_spec", env.full_done_spec)
    rec.text("batch_size", env.batch_size)


# ---------------------------------------------------------------------------- running
SCENARIOS = (
    sc_reset,
    sc_step,
    sc_step_and_maybe_reset,
    sc_rollout_fast,
    sc_rollout_policy,
    sc_torchrl_stack,
    sc_state_dict,
    sc_copies,
    sc_seed,
    sc_bad_actions,
    sc_bad_resets,
)
COURSE_SCENARIOS = (sc_course_masks, sc_bad_course_masks)


def run_scenario(rec: Recorder, scenario: Callable[..., None], *args: Any) -> None:
    """Seed torch's global RNG, run ``scenario``; an unexpected error becomes a CRASH entry."""
    torch.manual_seed(0)
    try:
        scenario(rec, *args)
    except Exception as err:
        rec.text("CRASH", "".join(traceback.format_exception_only(err)).strip())
        print(f"{rec.prefix}: scenario crashed: {type(err).__name__}: {err}", file=sys.stderr)


def run_all() -> dict[str, Any]:
    """Every scenario of every configuration and variant; the entries by name."""
    entries: dict[str, Any] = {}
    root = Recorder(entries)
    for cfg in CONFIGS:
        run_scenario(root.sub(f"{cfg.name}/constructor"), sc_bad_constructor, cfg)
        run_scenario(
            root.sub(f"{cfg.name}/specs"), sc_specs, functools.partial(cfg.build, False, False)
        )
        scenarios = SCENARIOS + (COURSE_SCENARIOS if cfg.cls is CourseEnv else ())
        for capture in (False, True):
            for sync_free in (False, True):
                variant = root.sub(f"{cfg.name}/capture={int(capture)}/sync_free={int(sync_free)}")
                make = functools.partial(cfg.build, capture, sync_free)
                for scenario in scenarios:
                    run_scenario(variant.sub(scenario.__name__[3:]), scenario, make)
    return entries


# ---------------------------------------------------------------------------- comparing
def same_bits(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Whether two tensors of one dtype and shape hold the same bytes (NaN payloads included)."""
    return torch.equal(a.reshape(-1).view(torch.uint8), b.reshape(-1).view(torch.uint8))


def describe_difference(old: Any, new: Any) -> str | None:
    """What differs between a recorded entry and a new one; ``None`` if they are the same."""
    if isinstance(old, str) or isinstance(new, str):
        if old == new:
            return None
        return f"recorded {old!r}, got {new!r}"
    if old.dtype != new.dtype:
        return f"dtype: recorded {old.dtype}, got {new.dtype}"
    if old.shape != new.shape:
        return f"shape: recorded {tuple(old.shape)}, got {tuple(new.shape)}"
    if same_bits(old, new):
        return None
    size = old.element_size()
    words_old = old.reshape(-1).view(torch.uint8).view(-1, size)
    words_new = new.reshape(-1).view(torch.uint8).view(-1, size)
    wrong = (words_old != words_new).any(-1).nonzero().flatten()
    first = int(wrong[0])
    return (
        f"values: {wrong.numel()} of {old.numel()} elements differ; first at flat index {first}: "
        f"recorded {old.reshape(-1)[first].item()!r}, got {new.reshape(-1)[first].item()!r}"
    )


def state_keys_at(layout: str, old: torch.Tensor, new: torch.Tensor) -> str:
    """The state keys whose bytes differ in a packed state (see :meth:`Recorder.state`)."""
    keys, offset = [], 0
    for line in layout.splitlines():
        key, nbytes = line.split(" ")[0], int(line.rsplit(" ", 1)[1])
        if not torch.equal(old[offset : offset + nbytes], new[offset : offset + nbytes]):
            keys.append(key)
        offset += nbytes
    return f"; state keys that differ: {keys}"


def compare(recorded: dict[str, Any], current: dict[str, Any]) -> int:
    """Print every difference and the summary line; the number of entries that differ."""
    differ = 0
    for name, old in recorded.items():
        new = current.get(name)
        message = "missing in this run" if new is None else describe_difference(old, new)
        if message is None:
            continue
        layout = recorded.get(f"{name}:layout")
        if name.endswith(".state") and layout and layout == current.get(f"{name}:layout"):
            message += state_keys_at(layout, old, new)
        differ += 1
        print(f"DIFF {name}: {message}")
    for name in current:
        if name not in recorded:
            differ += 1
            print(f"DIFF {name}: new in this run (not recorded)")
    print(f"{len(recorded)} recorded, {differ} differ")
    return differ


def main() -> int:
    """Run the scenarios; record them, or compare them with a recording."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("mode", choices=("record", "compare"))
    parser.add_argument("path", help="the .pt file written by record and read by compare")
    args = parser.parse_args()
    warnings.simplefilter("ignore")
    print(f"torchrl_ext imported from {torchrl_ext.__file__}")
    start = time.perf_counter()
    entries = run_all()
    seconds = time.perf_counter() - start
    if args.mode == "record":
        torch.save(entries, args.path)
        crashes = [name for name in entries if name.endswith("/CRASH")]
        print(f"{len(entries)} entries recorded in {seconds:.1f} s to {args.path}")
        print(f"{len(crashes)} scenarios crashed" if crashes else "no scenario crashed")
        return 0
    recorded = torch.load(args.path, weights_only=True)
    print(f"scenarios ran in {seconds:.1f} s")
    return 1 if compare(recorded, entries) else 0


if __name__ == "__main__":
    sys.exit(main())
