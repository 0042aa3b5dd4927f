"""CourseEnv: a kinematic car on procedurally generated closed courses, one course per env.

Each env owns a course from :class:`~torchrl_ext.envs.course.CourseGenerator`. Envs that finish get
a new course (the next ``(seed, epoch)``), envs that crash respawn on the same one, and the whole
RL step, masked regeneration included, is a fixed sequence of kernel launches that
:class:`~torchrl_ext.envs.WarpEnv` can record into one graph.
"""

from __future__ import annotations

import dataclasses
from typing import Literal

import numpy as np
import torch
import warp as wp
from tensordict import TensorDict
from torchrl.data import Bounded, Categorical, Composite, Unbounded

import torchrl_ext.envs.interop as interop
from torchrl_ext._checks import check_choice, check_float, check_int
from torchrl_ext.envs._kernels.common import make_struct, pack_params
from torchrl_ext.envs.course import _state_dicts
from torchrl_ext.envs.course._inputs import StepInputs
from torchrl_ext.envs.course._kernels import car as _car
from torchrl_ext.envs.course._kernels import env as _k
from torchrl_ext.envs.course._kernels.env_gates import GATES_OBSERVATION_SIZE
from torchrl_ext.envs.course.config import CarConfig, CourseParams, _or_default
from torchrl_ext.envs.course.generator import MIN_POINTS, MODES, CourseGenerator
from torchrl_ext.envs.warp_env import Launch, WarpEnv

__all__ = ["CourseEnv"]

_CRASH_MODES = ("respawn", "regenerate")
_OUTPUT_KEYS = tuple(_car.Outputs.vars)
"""The observation keys, as the fields of the kernels' output struct."""
_INPUTS = ("regen_mask", "reset_mask")
_MASKS = ("zero_mask", "all_mask")


def _live_view(attribute: str, doc: str) -> property:
    """A read-only property returning ``self.<attribute>``, a tensor the env updates in place."""
    return property(lambda env: getattr(env, attribute), doc=f"{doc} A live view.")


class _RegenerateCommand:
    """A launchable that regenerates the courses of a stable mask (recordable in a capture)."""

    def __init__(self, env: CourseEnv, mask: wp.array) -> None:
        self.env = env
        self.generator = env.generator
        self.mask = self.generator.check_mask(mask)  # checked once, replayed as it is

    def launch(self) -> None:
        skip = self.env._may_skip_regeneration()
        self.generator._regenerate(self.mask, "advance", skip_empty=skip)


class CourseEnv(WarpEnv):
    """A kinematic car drives procedurally generated closed courses; finished courses regenerate.

    Each env has its own course (:class:`~torchrl_ext.envs.course.CourseGenerator`; env ``i``'s
    course seed is ``seed + i`` wrapped to int64, its first course epoch 0). The car starts at rest
    on checkpoint 0 facing along the course.

    **Actions** ``[num_envs, 2]`` float32: ``(steer, throttle)``. Values outside ``[-1, 1]``
    (infinities included) are clipped, as the spec's bounds say; NaN raises ``ValueError`` before
    anything is stepped. Throttle below 0 brakes; the car never reverses.

    **Observations**: ``"observation"`` ``[num_envs, num_rays + 3]``: ``num_rays`` range readings
    to the track edges (at most ``max_range``), speed, heading error against the course and
    distance to the next checkpoint. Step results, also in the observation spec:
    ``"checkpoints_passed"`` (this step), ``"checkpoint_distance"``, ``"laps"``,
    ``"out_of_bounds"`` and ``"valid"`` (the course is usable). Every value of an env whose course
    is invalid is *selected* to zero (never multiplied), so no NaN of a broken course reaches the
    policy; its reward is 0.

    **Reward**: checkpoints passed this step + ``progress_coef * arc length driven`` (negative
    when driving back) - ``crash_penalty`` on leaving the track.

    **Episode ends** (``terminated``): ``laps`` laps done, out of bounds (a crash), or an invalid
    course; ``truncated`` at ``max_steps``. Auto-reset policy: finished, truncated and invalid
    episodes get a **new course** (masked regeneration, epoch + 1); a crash **respawns** on the
    same course, or regenerates with ``crash="regenerate"``. TorchRL's ``reset(td)`` with a
    ``"_reset"`` mask follows the same policy (an env whose episode has not ended respawns).

    **Gates mode** (``mode="gates"``): the course is a sequence of gates along the centerline
    (a bar of ``params.gate_width`` between two posts, see
    :class:`~torchrl_ext.envs.course.CourseGenerator`). ``"observation"`` is then
    ``[num_envs, 8]``: speed, heading error and signed lateral offset against the gates'
    centerline, the next gate's left and right posts in the car's frame (``x`` ahead, ``y``
    left) and the distance to its center. ``"checkpoints_passed"`` counts the gates passed in
    order (only the next gate counts; gate 0, the start, closes a lap), the reward is gates
    passed + ``progress_coef`` * progress along the gates' centerline - ``crash_penalty`` on a
    post hit (the move passes closer than ``collision`` to a post), ``"out_of_bounds"`` is the
    post hit, a crash. Episode ends and the auto-reset policy are those of track mode.

    **Masks**: :meth:`regenerate` and :meth:`respawn` take stable int32 ``[num_envs]`` masks that
    the env reads and never clears; write every entry before every call or graph replay.

    **Inputs**: :attr:`inputs` holds two stable, zero-initialised int32 ``[num_envs]`` arrays on
    the env's device, read by every step and never cleared: an env whose ``"regen_mask"`` entry
    is nonzero ends its episode at that step with a new course, one whose ``"reset_mask"`` entry
    is nonzero respawns on its course (both truncate the episode, so ``done`` marks the cut).
    Writing into them drives a recorded step graph without any other call.

    Args:
        num_envs (int): number of envs.
        device (torch.device or str, optional): device of state and outputs. Defaults to ``"cpu"``.
        seed (int, optional): 64-bit seed. Defaults to ``None`` (drawn from torch's generator).

    Keyword Args:
        params (CourseParams, optional): every env's course parameters. Defaults to
            ``CourseParams()``.
        num_points (int, optional): centerline points per course, at least 16. Defaults to 64.
        max_checkpoints (int, optional): checkpoint slots per course. Defaults to 32.
        num_rays (int, optional): range readings. Defaults to 5.
        laps (int, optional): laps that finish an episode. Defaults to 1.
        crash (str, optional): ``"respawn"`` or ``"regenerate"`` after leaving the track.
            Defaults to ``"respawn"``.
        car (CarConfig, optional): car and reward constants. Defaults to ``CarConfig()``.
        max_steps (int, optional): time limit; ``None`` disables it. Defaults to 1000.
        capture (bool, optional): replay one recorded Warp graph per step. Defaults to ``False``.
        mode (str, optional): ``"track"`` or ``"gates"``. Defaults to ``"track"``.
        collision (float, optional): post radius in gates mode, > 0. Defaults to 0.3.

    Examples:
        >>> from torchrl_ext.envs import CourseEnv
        >>> env = CourseEnv(4, seed=0, max_steps=20)
        >>> td = env.reset()
        >>> td["observation"].shape, td["valid"].shape
        (torch.Size([4, 8]), torch.Size([4, 1]))
        >>> data = env.rollout(30, break_when_any_done=False)
        >>> data["next", "reward"].shape, bool(data["next", "truncated"].any())
        (torch.Size([4, 30, 1]), True)
        >>> env.generation.tolist()
        [1, 1, 1, 1]
        >>> import torch
        >>> mask = torch.tensor([0, 1, 0, 0], dtype=torch.int32)
        >>> env.regenerate(mask)
        >>> env.generation.tolist()
        [1, 2, 1, 1]
        >>> gates = CourseEnv(2, seed=0, mode="gates")
        >>> gates.reset()["observation"].shape
        torch.Size([2, 8])
        >>> gates.inputs["regen_mask"][1] = 1  # the next step ends env 1's episode, new course
        >>> td = gates.rand_step(gates.reset())
        >>> td["next", "truncated"].flatten().tolist()
        [False, True]
    """

    #: The car's state and the auto-reset masks, saved by :meth:`state_dict` (see there).
    _saved_arrays = ("pose", "track", "counts", "regen_mask", "respawn_mask")

    def __init__(
        self,
        num_envs: int,
        device: torch.device | str = "cpu",
        seed: int | None = None,
        *,
        params: CourseParams | None = None,
        num_points: int = 64,
        max_checkpoints: int = 32,
        num_rays: int = 5,
        laps: int = 1,
        crash: Literal["respawn", "regenerate"] = "respawn",
        car: CarConfig | None = None,
        max_steps: int | None = 1000,
        capture: bool = False,
        mode: Literal["track", "gates"] = "track",
        collision: float = 0.3,
    ) -> None:
        params = _or_default("params", params, CourseParams)
        car = _or_default("car", car, CarConfig)
        self.crash = check_choice("crash", crash, _CRASH_MODES)
        self.num_points = check_int("num_points", num_points, MIN_POINTS)
        self.max_checkpoints = check_int("max_checkpoints", max_checkpoints, 2)
        self.num_rays = check_int("num_rays", num_rays, 1)
        self.laps = check_int("laps", laps, 1)
        self.mode = check_choice("mode", mode, MODES)
        self.collision = check_float("collision", collision, 0.0, open_minimum=True)
        self.car = car
        self._params = params
        super().__init__(
            num_envs, device, seed, max_steps=max_steps, dtype=torch.float32, capture=capture
        )

    # ------------------------------------------------------------------ specs and state
    def _make_specs(self) -> None:
        n, dev = self.num_envs, self.device

        def flag() -> Categorical:
            return Categorical(2, shape=(n, 1), dtype=torch.bool, device=dev)

        def count() -> Unbounded:
            return Unbounded(shape=(n, 1), dtype=torch.int32, device=dev)

        self.observation_spec = Composite(
            observation=Unbounded(shape=(n, self._obs_size()), dtype=torch.float32, device=dev),
            checkpoint_distance=Unbounded(shape=(n, 1), dtype=torch.float32, device=dev),
            checkpoints_passed=count(),
            laps=count(),
            out_of_bounds=flag(),
            valid=flag(),
            shape=(n,),
            device=dev,
        )
        self.action_spec = Bounded(-1.0, 1.0, shape=(n, 2), dtype=torch.float32, device=dev)
        self.reward_spec = Unbounded(shape=(n, 1), dtype=torch.float32, device=dev)

    def _repr_options(self) -> dict[str, str]:
        return {"mode": self.mode}

    def _obs_size(self) -> int:
        return GATES_OBSERVATION_SIZE if self.mode == "gates" else self.num_rays + 3

    def _allocate_state(self) -> None:
        n, dev = self.num_envs, self.device
        self._generator = CourseGenerator(
            n,
            seed=0,
            params=self._params,
            num_points=self.num_points,
            max_checkpoints=self.max_checkpoints,
            device=str(self.warp_device),
            mode=self.mode,
        )
        self._pose = torch.zeros(n, 4, dtype=torch.float32, device=dev)
        self._track = torch.zeros(n, 3, dtype=torch.float32, device=dev)
        self._counts = torch.zeros(n, _car.NUM_COUNTS, dtype=torch.int32, device=dev)
        self._regen_mask = torch.zeros(n, dtype=torch.int32, device=dev)
        self._respawn_mask = torch.zeros(n, dtype=torch.int32, device=dev)
        self._zero_mask = torch.zeros(n, dtype=torch.int32, device=dev)
        self._all_mask = torch.ones(n, dtype=torch.int32, device=dev)
        self._inputs = {name: torch.zeros(n, dtype=torch.int32, device=dev) for name in _INPUTS}
        self._w = {
            name: wp.from_torch(getattr(self, f"_{name}"))
            for name in (*self._saved_arrays, *_MASKS)
        }
        self._w.update({f"inputs.{k}": wp.from_torch(v) for k, v in self._inputs.items()})
        self._car_params = pack_params(_car.CAR_PARAMS, dataclasses.asdict(self.car), torch.float32)
        # load the generator's mask-reduction kernels before any capture records them
        self._generator.regenerate(self._w["zero_mask"])

    def _set_seed(self, seed: int | None) -> None:
        super()._set_seed(seed)
        with self._on_torch_stream():  # env i's course seed: seed + i, wrapped to int64
            self._generator.generate(int(np.array(self.seed, dtype=np.uint64).astype(np.int64)))
        self._respawn_now(self._w["all_mask"])
        self._layout.episode.zero_()

    def _state_tensors(self) -> dict[str, torch.Tensor]:
        """The base's state, the :attr:`inputs` and every course array.

        The :attr:`_saved_arrays` are the car's pose, progress and counters, and the
        regeneration and respawn masks, saved because a step writes them and the auto-reset
        of the same step reads them (they are cheap). The :attr:`inputs` are saved because every
        step reads them and the env never rewrites them.
        """
        state = super()._state_tensors()
        state.update((name, getattr(self, f"_{name}")) for name in self._saved_arrays)
        for name, tensor in self._inputs.items():
            state[f"inputs.{name}"] = tensor
        for name, view in self._generator.views.items():
            state[f"course.{name}"] = view
        return state

    def _check_state_values(self, state: dict[str, torch.Tensor]) -> None:
        """The base's checks, the car's counters, epochs, course parameters, float magnitudes."""
        super()._check_state_values(state)
        segments = self.max_checkpoints if self.mode == "gates" else self.num_points
        _state_dicts.check_car(state["counts"], self.laps, segments, self.max_checkpoints)
        _state_dicts.check_courses(state, self.max_checkpoints)
        _state_dicts.check_magnitudes(state)

    # ------------------------------------------------------------------ public views
    @property
    def inputs(self) -> StepInputs:
        """Stable int32 ``[num_envs]`` step inputs, ``"regen_mask"`` and ``"reset_mask"``.

        Zero-initialised, read by every step, never cleared nor reallocated by the env: write
        into them (in place) to end chosen episodes at the next step, with a new course
        (``"regen_mask"``) or on the same course (``"reset_mask"``); a recorded step graph
        reads what they hold when it is replayed. The mapping is read-only: replacing or
        removing an entry raises ``TypeError``.
        """
        return StepInputs(self._inputs, type(self).__name__)

    @property
    def generator(self) -> CourseGenerator:
        """The env's course generator (a curriculum calls its ``set_params``)."""
        return self._generator

    @property
    def generation(self) -> torch.Tensor:
        """Per-env epoch the current course was built with (int64 ``[num_envs]``, live view)."""
        return self._generator.views["generation"]

    @property
    def valid(self) -> torch.Tensor:
        """Per-env course validity (int32 ``[num_envs]``, 1 if usable; live view)."""
        return self._generator.views["valid"]

    pose = _live_view(
        "_pose", "Per-env car pose ``(x, y, heading, speed)``, float32 ``[num_envs, 4]``."
    )
    progress = _live_view(
        "_track", "Per-env ``(arc position, travel, last change)``, float32 ``[num_envs, 3]``."
    )
    counters = _live_view(
        "_counts",
        "Per-env progress counters, int32 ``[num_envs, 5]``. The columns are checkpoints passed "
        "this episode, passed in the last step, out of bounds, nearest centerline segment, and "
        "how the last episode ended (0 not ended, 1 respawn, 2 regenerate).",
    )

    # ------------------------------------------------------------------ kernel recipes
    def _shared_inputs(self) -> list:
        """The kernels' leading inputs: car constants, rules, car state, courses, episode ends."""
        b, w = self.buffers, self._w
        rules = make_struct(
            _k.Rules,
            laps=self.laps,
            max_steps=self._limit,
            crash_regenerates=int(self.crash == "regenerate"),
            gates=int(self.mode == "gates"),
            collision=self.collision,
        )
        car = make_struct(_car.Car, pose=w["pose"], track=w["track"], counts=w["counts"])
        ends = make_struct(
            _k.Ends,
            request_regenerate=w["inputs.regen_mask"],
            request_respawn=w["inputs.reset_mask"],
            regenerate_mask=w["regen_mask"],
            respawn_mask=w["respawn_mask"],
            steps=b["steps"],
            reward=b["reward"],
            flags=self.buffers["flags"],
        )
        return [self._car_params, rules, car, self._generator.arrays, ends]

    def _outputs(self, which: str) -> _car.Outputs:
        return make_struct(_car.Outputs, **{key: self.buffers[which][key] for key in _OUTPUT_KEYS})

    def _step_launches(self, autoreset: bool) -> list[Launch]:
        inputs = [*self._shared_inputs(), self.buffers["action"], int(autoreset)]
        step = (_k.step, [*inputs, self._outputs("next")])
        return [step, *self._auto_reset_recipes(carry=True)] if autoreset else [step]

    def _reset_launches(self) -> list[Launch]:
        _params, _rules, *inputs = self._shared_inputs()
        plan = (_k.plan_reset, [*inputs, self.buffers["mask"]])
        return [plan, *self._auto_reset_recipes(carry=False)]

    def _auto_reset_recipes(self, carry: bool) -> list[Launch]:
        """Regenerate the envs of the regeneration mask, respawn those of either mask, observe.

        The step and reset kernels write both masks first, so the whole sequence records into
        one graph.
        """
        w = self._w
        regenerate = _RegenerateCommand(self, w["regen_mask"])
        return [regenerate, self._respawn_recipe(w["regen_mask"], w["respawn_mask"], carry)]

    def _respawn_recipe(self, first: wp.array, second: wp.array, carry: bool = False) -> Launch:
        """Respawn the envs set in either mask, then write every env's root observation.

        With ``carry`` (right after a step wrote ``buffers["next"]``), only the respawned envs are
        observed; the others' root observation is a copy of their step observation.
        """
        masks = [first, second, int(carry), self.buffers["episode"]]
        outputs = [self._outputs("next"), self._outputs("root")]
        return (_k.respawn_and_observe, [*self._shared_inputs(), *masks, *outputs])

    def _may_skip_regeneration(self) -> bool:
        """Whether the step's regeneration may skip an all-zero mask (``skip_empty``).

        Skipping outside a graph reads the mask's any-flag on the host; with :attr:`sync_free`
        the rebuild is skipped only by a recorded conditional node (the env's own Warp graph,
        or a torch capture registered with ``conditional=True``), and otherwise runs with its
        kernel returning early for unmasked envs: the same arrays either way.
        """
        if not self.sync_free:
            return True
        registration = interop.active(self.warp_device)
        if registration is not None:
            return registration.conditional
        return self.warp_device.is_capturing

    # ------------------------------------------------------------------ the two masks
    def regenerate(self, mask: torch.Tensor | wp.array | None = None, advance: bool = True) -> None:
        """Give the masked envs a new course and restart their episode on it.

        Masked envs advance their epoch (if ``advance``), get the course of their ``(seed,
        epoch)`` with their next-course parameters, and respawn on it (pose, progress and laps
        reset, step counter zeroed). Every other env keeps its course and state bitwise; an
        all-zero mask is a no-op. The root observation buffers are rewritten; read them with
        :meth:`observe`. Only kernels are launched, so the call can be recorded inside a
        ``wp.ScopedCapture`` and replayed with the mask rewritten in place.

        Args:
            mask (torch.Tensor or wp.array, optional): stable int32 ``[num_envs]`` mask on the
                env's device, read and never cleared. Defaults to every env.
            advance (bool, optional): advance the epoch; ``False`` rebuilds the current
                ``(seed, epoch)``, e.g. after writing ``generator.views["seed"]``. Defaults to True.

        Raises:
            TypeError: for a mask that is not int32, or a non-bool ``advance``.
            ValueError: for a mask of the wrong shape, device or layout.
        """
        mask = self._mask_or_all(mask)
        with self._on_torch_stream():
            self._generator.regenerate(mask, advance)
        self._respawn_now(mask)

    def respawn(self, mask: torch.Tensor | wp.array | None = None) -> None:
        """Respawn the masked envs on the course they have.

        Nothing else changes: courses, generation and unmasked envs stay bitwise. The root
        observation buffers are rewritten; read them with :meth:`observe`.

        Args:
            mask (torch.Tensor or wp.array, optional): stable int32 ``[num_envs]`` mask on the
                env's device, read and never cleared. Defaults to every env.

        Raises:
            TypeError: for a mask that is not int32.
            ValueError: for a mask of the wrong shape, device or layout.
        """
        mask = self._mask_or_all(mask)
        self._respawn_now(mask)

    def reset_epoch(self, mask: torch.Tensor | wp.array | None = None) -> None:
        """Give the masked envs their first course again (epoch 0 of their seed) and respawn.

        Args:
            mask (torch.Tensor or wp.array, optional): as in :meth:`respawn`. Defaults to every
                env.

        Raises:
            TypeError: for a mask that is not int32.
            ValueError: for a mask of the wrong shape, device or layout.
        """
        mask = self._mask_or_all(mask)
        with self._on_torch_stream():
            self._generator.reset_epoch(mask)
        self._respawn_now(mask)

    def observe(self) -> TensorDict:
        """A fresh TensorDict of every env's current (root) observation, done flags False.

        Returns:
            The same keys as :meth:`reset` returns.
        """
        return self._layout.root_td()

    def _mask_or_all(self, mask: torch.Tensor | wp.array | None) -> wp.array:
        return self._w["all_mask"] if mask is None else self._generator.check_mask(mask)

    def _respawn_now(self, mask: wp.array) -> None:
        self._launch_now([self._respawn_recipe(mask, self._w["zero_mask"])])
