"""Procedural closed courses, one per env, regenerated under a mask in Warp kernels.

A :class:`CourseGenerator` owns, on its Warp device, one closed course per env: a centerline of
fixed size, its arc-length table, a track width, checkpoints along the arc length and a gate (a bar
across the centerline between two posts) at each checkpoint. A course is a pure
function of the env's effective seed (:func:`~torchrl_ext.envs.course.effective_seed` of its
``(seed, epoch)``) and of the parameters it was built with; an env-owning class (``CourseEnv``)
calls :meth:`CourseGenerator.regenerate` with its stable mask, inside its step graph if it captures
one. This module owns the generator's arrays, their construction and their regeneration; the
checks of its arguments live in ``_checks``, its geometry queries on the gates in ``_queries``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

import numpy as np
import torch
import warp as wp

from torchrl_ext._checks import check_bool, check_choice, check_int
from torchrl_ext.envs._kernels.common import make_struct
from torchrl_ext.envs.course import _checks, _queries
from torchrl_ext.envs.course._kernels import generator as K
from torchrl_ext.envs.course._kernels.courses import Courses, Params
from torchrl_ext.envs.course._kernels.draws import NUM_DRAWS
from torchrl_ext.envs.course._kernels.validity import MIN_CHECKPOINTS
from torchrl_ext.envs.course.config import CourseParams, _or_default

__all__ = ["CourseGenerator"]

MODES = ("track", "gates")
"""What a course is made of: a track of ``width`` or a sequence of gates of ``gate_width``."""

MIN_POINTS = 16
"""Fewest centerline points accepted: two per period of the highest harmonic."""


EpochChange = Literal["keep", "advance", "restart"]
"""What a rebuild does to a masked env's epoch first: keep it, add 1, or restart it at 0."""

_EPOCH_CHANGES = {"keep": K.EPOCH_KEEP, "advance": K.EPOCH_ADVANCE, "restart": K.EPOCH_RESTART}

_PARAM_NAMES = tuple(Params.vars)
_STATE_ARRAYS = ("seed", "epoch", "generation", "valid", "defects")
_GEOMETRY = ("centerline", "arc_length", "checkpoints", "checkpoint_count")
_COURSE_ARRAYS = (*_GEOMETRY, *_PARAM_NAMES, "coefficients", "posts")
_PARAM_ARRAYS = tuple(f"param_{name}" for name in _PARAM_NAMES)


class CourseGenerator:
    """One procedural closed course per env, rebuilt for masked envs by Warp kernels.

    Every array lives on ``device`` with a fixed shape, so :meth:`regenerate` can be recorded into a
    graph (:meth:`capture_regenerate`, or inside an env's own ``wp.ScopedCapture``). Per env:

    - state: ``seed`` (int64), ``epoch`` (int64), ``generation`` (int64, the epoch the current
      course was built with), ``valid`` (int32, 1 if usable), ``defects`` (int32,
      :class:`CourseDefect` bits);
    - course: ``centerline`` ``[N, P]`` vec2f (counter-clockwise, closed: point ``P-1`` joins point
      0), ``arc_length`` ``[N, P+1]`` (``arc_length[:, P]`` is the lap length), ``checkpoints``
      ``[N, M]`` vec2f (checkpoint ``j`` at arc length ``j * checkpoint_spacing``; in gates mode
      at ``j * lap / checkpoint_count``, evenly spaced; unused slots 0),
      ``checkpoint_count``, and the parameters it was built with: ``scale``, ``roughness``,
      ``harmonics``, ``width``, ``checkpoint_spacing``, ``gate_width``, plus its random draws
      ``coefficients`` and its gates' ``posts`` ``[N, M, 2]`` vec2f (gate ``j`` is a bar of
      length ``gate_width`` across the centerline at checkpoint ``j``, perpendicular to it;
      ``posts[:, j, 0]`` is its left end, ``posts[:, j, 1]`` its right end, unused slots 0);
    - next-course parameters ``param_<name>`` for each :class:`CourseParams` field, written with
      :meth:`set_params` (or into :attr:`views`) and read only when an env's course is rebuilt.

    ``arrays`` bundles the state and course arrays in the one struct that kernels take.

    Args:
        num_envs (int): number of envs (courses).
        seed (int or torch.Tensor, optional): an int64 ``seed`` gives env ``i`` the seed
            ``seed + i`` (wrapping around int64); an int64 tensor of shape ``[num_envs]`` gives
            each env its seed. Defaults to 0.
        params (CourseParams, optional): parameters of every env's first course. Defaults to
            ``CourseParams()``.
        num_points (int, optional): centerline points per course, at least 16. Defaults to 64.
        max_checkpoints (int, optional): checkpoint (and gate) slots per course, at least 2.
            Defaults to 32.
        device (str, optional): Warp device. Defaults to ``"cpu"``.
        mode (str, optional): ``"track"`` (a track of ``width`` around the centerline) or
            ``"gates"`` (a sequence of gates along it). The mode decides what makes a course
            invalid: a turn tighter than the track (track) or two gate bars crossing (gates).
            Defaults to ``"track"``.

    Raises:
        TypeError: for a size, seed, params or mode of the wrong type, naming it.
        ValueError: for a bad size, seed or mode, naming it.
        RuntimeError: when constructed while a graph capture is active on ``device``.

    Examples:
        >>> from torchrl_ext.envs.course import CourseGenerator
        >>> gen = CourseGenerator(4, seed=3)
        >>> views = gen.views
        >>> print(tuple(views["centerline"].shape), tuple(views["checkpoints"].shape))
        (4, 64, 2) (4, 32, 2)
        >>> import torch
        >>> mask = torch.tensor([0, 1, 0, 0], dtype=torch.int32)
        >>> gen.regenerate(mask)
        >>> print(views["generation"].tolist(), bool(views["valid"].all()))
        [0, 1, 0, 0] True
    """

    def __init__(
        self,
        num_envs: int,
        *,
        seed: int | torch.Tensor = 0,
        params: CourseParams | None = None,
        num_points: int = 64,
        max_checkpoints: int = 32,
        device: str = "cpu",
        mode: Literal["track", "gates"] = "track",
    ) -> None:
        self.device = wp.get_device(device)
        self._torch_device = torch.device(wp.device_to_torch(self.device))
        self.num_envs = check_int("num_envs", num_envs, 1)
        self.num_points = check_int("num_points", num_points, MIN_POINTS)
        self.max_checkpoints = check_int("max_checkpoints", max_checkpoints, MIN_CHECKPOINTS)
        self.mode = check_choice("mode", mode, MODES)
        if self.device.is_capturing:
            raise RuntimeError(
                f"CourseGenerator cannot be constructed while a graph capture is active on "
                f"device={str(self.device)!r}: it allocates and launches. Build it outside the "
                "capture, then record regenerate() inside it."
            )
        params = _or_default("params", params, CourseParams)
        self._allocate(_checks.seed_column(seed, self.num_envs), params)
        self.views = {name: wp.to_torch(getattr(self, name)) for name in self.array_names()}
        self.regenerate(advance=False)

    def _allocate(self, seeds: np.ndarray, params: CourseParams) -> None:
        n, p, m, dev = self.num_envs, self.num_points, self.max_checkpoints, self.device
        self.seed = wp.array(seeds, dtype=wp.int64, device=dev)
        for name in ("epoch", "generation"):
            setattr(self, name, wp.zeros(n, dtype=wp.int64, device=dev))
        for name in ("valid", "defects", "checkpoint_count"):
            setattr(self, name, wp.zeros(n, dtype=wp.int32, device=dev))
        for name, field in Params.vars.items():
            dtype = field.type.dtype  # int32 or float32, as the CourseParams field's type
            setattr(self, name, wp.zeros(n, dtype=dtype, device=dev))
            setattr(self, f"param_{name}", wp.full(n, getattr(params, name), dtype, device=dev))
        self.centerline = wp.zeros((n, p), dtype=wp.vec2f, device=dev)
        self.arc_length = wp.zeros((n, p + 1), dtype=wp.float32, device=dev)
        self.checkpoints = wp.zeros((n, m), dtype=wp.vec2f, device=dev)
        self.posts = wp.zeros((n, m, 2), dtype=wp.vec2f, device=dev)
        self.coefficients = wp.zeros((n, NUM_DRAWS), dtype=wp.float32, device=dev)
        self._all_envs = wp.ones(n, dtype=wp.int32, device=dev)
        self._any = wp.zeros(1, dtype=wp.int32, device=dev)
        self._next_params = self._param_struct("param_")
        names = [name for name in _STATE_ARRAYS + _COURSE_ARRAYS if name not in _PARAM_NAMES]
        arrays = {name: getattr(self, name) for name in names}
        self.arrays = make_struct(Courses, params=self._param_struct(""), **arrays)

    def _param_struct(self, prefix: str) -> Params:
        arrays = {name: getattr(self, prefix + name) for name in _PARAM_NAMES}
        return make_struct(Params, **arrays)

    @staticmethod
    def array_names() -> tuple[str, ...]:
        """Names of the per-env Warp arrays (attributes and keys of :attr:`views`).

        Returns:
            State names, then course names, then next-course parameter names.

        Examples:
            >>> from torchrl_ext.envs.course import CourseGenerator
            >>> names = CourseGenerator.array_names()
            >>> print("centerline" in names, "param_width" in names, len(names))
            True True 23
        """
        return _STATE_ARRAYS + _COURSE_ARRAYS + _PARAM_ARRAYS

    def course(self, env: int) -> dict[str, torch.Tensor]:
        """A copy of env ``env``'s course and state (every array but the next-course parameters).

        Args:
            env (int): env index.

        Returns:
            Name to cloned tensor (on the generator's device).

        Examples:
            >>> from torchrl_ext.envs.course import CourseGenerator
            >>> course = CourseGenerator(2, seed=5).course(1)
            >>> print(tuple(course["centerline"].shape), int(course["seed"]))
            (64, 2) 6
        """
        if isinstance(env, bool) or not isinstance(env, int) or not 0 <= env < self.num_envs:
            raise ValueError(f"env must be an int in [0, {self.num_envs}), got env={env!r}.")
        names = _STATE_ARRAYS + _COURSE_ARRAYS
        return {name: self.views[name][env].clone() for name in names}

    def set_params(
        self, env_ids: torch.Tensor | Sequence[int] | None = None, **values: float | torch.Tensor
    ) -> None:
        """Write next-course parameters; they take effect when those envs are regenerated.

        Every argument is checked before anything is written: a call that raises leaves every
        array as it was.

        Args:
            env_ids (torch.Tensor or sequence of int, optional): distinct envs to write, each in
                ``[0, num_envs)``. Defaults to all.
            **values: :class:`CourseParams` field names to a scalar or a 1-d tensor with one
                value per selected env.

        Raises:
            TypeError: for an unknown parameter name, a value that is not a number or tensor,
                non-integer ``harmonics`` or non-integer ``env_ids``.
            ValueError: for an out-of-range value or env id, repeated env ids, or a tensor whose
                shape is not one value per selected env, naming it.

        Examples:
            >>> from torchrl_ext.envs.course import CourseGenerator
            >>> gen = CourseGenerator(3, seed=0)
            >>> gen.set_params([2], width=3.0)
            >>> print(gen.views["param_width"].tolist(), gen.views["width"].tolist())
            [2.0, 2.0, 3.0] [2.0, 2.0, 2.0]
        """
        index = _checks.env_index(env_ids, self.num_envs)
        count = self.num_envs if index is None else int(index.numel())
        columns = {
            name: _checks.param_column(name, value, count, self.views)
            for name, value in values.items()
        }
        # every argument is checked above: from here on nothing raises, so a call is all-or-nothing
        rows = slice(None) if index is None else index
        for name, column in columns.items():
            self.views[f"param_{name}"][rows] = column

    def check_mask(self, mask: wp.array | torch.Tensor) -> wp.array:
        """Validate a regeneration mask and return it as a Warp array sharing its memory.

        Args:
            mask (wp.array or torch.Tensor): contiguous int32 ``[num_envs]`` on the generator's
                device.

        Returns:
            The mask as a ``wp.array`` (the same memory: later writes to ``mask`` are seen).

        Raises:
            TypeError: if ``mask`` is not a Warp array or tensor, or not int32.
            ValueError: for a wrong shape, device or layout.

        Examples:
            >>> import torch
            >>> from torchrl_ext.envs.course import CourseGenerator
            >>> gen = CourseGenerator(2)
            >>> print(gen.check_mask(torch.zeros(2, dtype=torch.int32)).shape)
            (2,)
        """
        return _checks.check_mask(mask, self.num_envs, self.device, self._torch_device)

    def regenerate(
        self,
        mask: wp.array | torch.Tensor | None = None,
        advance: bool = True,
        *,
        skip_empty: bool = True,
    ) -> None:
        """Rebuild the masked envs' courses; every other env keeps every array bitwise.

        Masked envs advance their epoch (if ``advance``), copy their next-course parameters in,
        and get the course of ``(seed, epoch)``; ``generation`` becomes ``epoch``. ``mask`` is read,
        never cleared: whoever owns it writes every entry before each call or replay. Everything
        runs in kernels, so the call can be recorded inside ``wp.ScopedCapture`` and replayed with
        a mask rewritten in place.

        With ``skip_empty``, the mask is first reduced to an any-flag and the rebuild runs under
        ``wp.capture_if``: on the CPU (eager: one host read; captured: a conditional op) and,
        while capturing on CUDA with conditional graph nodes, an all-zero mask skips the rebuild.
        Elsewhere the rebuild is launched unconditionally and its kernel returns early for
        unmasked envs. On CUDA the kernels run on Warp's current stream of the device: order
        torch writes to the mask or the views with it (e.g. run torch on
        ``wp.stream_to_torch(wp.get_stream(device))``).

        Args:
            mask (wp.array or torch.Tensor, optional): int32 ``[num_envs]`` on the generator's
                device; nonzero entries are rebuilt. Defaults to every env.
            advance (bool, optional): advance the masked envs' epoch first; ``False`` rebuilds the
                current ``(seed, epoch)``, e.g. after writing new seeds. Defaults to True.
            skip_empty (bool, optional): skip the rebuild for an all-zero mask where the device
                allows it. Defaults to True.

        Raises:
            TypeError: for a bad mask type or dtype, or a non-bool ``advance``.
            ValueError: for a bad mask shape, device or layout.

        Examples:
            >>> from torchrl_ext.envs.course import CourseGenerator
            >>> gen = CourseGenerator(3, seed=1)
            >>> before = gen.views["centerline"].clone()
            >>> import torch
            >>> gen.regenerate(torch.tensor([1, 0, 1], dtype=torch.int32))
            >>> same = (gen.views["centerline"] == before).flatten(1).all(1)
            >>> print(same.tolist(), gen.views["epoch"].tolist())
            [False, True, False] [1, 0, 1]
        """
        epoch = "advance" if check_bool("advance", advance) else "keep"
        if mask is None:
            self._rebuild(self._all_envs, epoch)
            return
        self._regenerate(self.check_mask(mask), epoch, skip_empty)

    def _regenerate(self, mask: wp.array, epoch: EpochChange, skip_empty: bool) -> None:
        """:meth:`regenerate` with a mask already checked by :meth:`check_mask`."""
        if not (skip_empty and self._can_skip()):
            self._rebuild(mask, epoch)
            return
        wp.launch(K.clear_flag, dim=1, inputs=[self._any], device=self.device)
        wp.launch(K.any_masked, dim=self.num_envs, inputs=[mask, self._any], device=self.device)
        wp.capture_if(self._any, on_true=self._rebuild, mask=mask, epoch=epoch)

    def _can_skip(self) -> bool:
        if self.device.is_cpu:
            return True
        return self.device.is_capturing and wp.is_conditional_graph_supported()

    def _rebuild(self, mask: wp.array, epoch: EpochChange) -> None:
        """Rebuild the masked envs' courses after keeping, advancing or restarting their epoch."""
        change, gates = _EPOCH_CHANGES[epoch], int(self.mode == "gates")
        inputs = [mask, change, self._next_params, self.arrays, self.max_checkpoints, gates]
        wp.launch(K.rebuild, dim=self.num_envs, inputs=inputs, device=self.device)

    def reset_epoch(self, mask: wp.array | torch.Tensor | None = None) -> None:
        """Set the masked envs' epoch to 0 and rebuild their first course (of their seed).

        Args:
            mask (wp.array or torch.Tensor, optional): as in :meth:`regenerate`. Defaults to
                every env.

        Raises:
            TypeError: for a mask that is not a Warp array or tensor, or not int32.
            ValueError: for a mask of the wrong shape, device or layout.

        Examples:
            >>> from torchrl_ext.envs.course import CourseGenerator
            >>> gen = CourseGenerator(2, seed=4)
            >>> gen.regenerate()
            >>> print(gen.views["epoch"].tolist())
            [1, 1]
            >>> gen.reset_epoch()
            >>> first = CourseGenerator(2, seed=4).views["centerline"]
            >>> print(gen.views["epoch"].tolist(), gen.views["centerline"].equal(first))
            [0, 0] True
        """
        mask = self._all_envs if mask is None else self.check_mask(mask)
        self._rebuild(mask, "restart")

    def generate(self, seeds: int | torch.Tensor, epochs: int | torch.Tensor = 0) -> None:
        """Give every env a new seed and epoch and build the course of that ``(seed, epoch)``.

        Everything is checked before anything is written.

        Args:
            seeds (int or torch.Tensor): as the constructor's ``seed``: an int gives env ``i`` the
                seed ``seeds + i`` (wrapping around int64), an int64 ``[num_envs]`` tensor one
                seed per env.
            epochs (int or torch.Tensor, optional): every env's epoch (an int), or an integer
                ``[num_envs]`` tensor; all >= 0. Defaults to 0.

        Raises:
            TypeError: for a seed or epoch of the wrong type, naming it.
            ValueError: for a wrong shape or a negative epoch, naming it.

        Examples:
            >>> from torchrl_ext.envs.course import CourseGenerator
            >>> gen = CourseGenerator(2, seed=0)
            >>> import torch
            >>> gen.generate(seeds=torch.tensor([7, 7]), epochs=torch.tensor([0, 3]))
            >>> print(gen.views["seed"].tolist(), gen.views["generation"].tolist())
            [7, 7] [0, 3]
            >>> other = CourseGenerator(1, seed=7)
            >>> print(torch.equal(gen.views["centerline"][0], other.views["centerline"][0]))
            True
        """
        seed_column = torch.from_numpy(_checks.seed_column(seeds, self.num_envs))
        epoch_column = _checks.epoch_column(epochs, self.num_envs)
        self.views["seed"].copy_(seed_column)
        self.views["epoch"].copy_(epoch_column)
        self._rebuild(self._all_envs, "keep")

    def frame(self, positions: torch.Tensor) -> torch.Tensor:
        """Locate one point per env on its gates' centerline (the polyline through the gates).

        Args:
            positions (torch.Tensor): float32 ``[num_envs, 2]`` on the generator's device.

        Returns:
            float32 ``[num_envs, 2]``: the progress (arc length along the closed polyline through
            the gate centers, from gate 0, of the point nearest to the position) and the signed
            lateral offset (distance from that point, positive on the left of the direction of
            travel, the inside of the course).

        Raises:
            TypeError: for positions that are not a float32 tensor.
            ValueError: for positions of the wrong shape or device, or not finite.

        Examples:
            >>> from torchrl_ext.envs.course import CourseGenerator, CourseParams
            >>> gen = CourseGenerator(1, params=CourseParams(roughness=0.0), mode="gates")
            >>> start = gen.views["checkpoints"][:, 0]
            >>> print(gen.frame(start).abs().max().item() < 1e-5)
            True
        """
        return _queries.frame(
            self.arrays, positions, self.num_envs, self.device, self._torch_device
        )

    def hit_posts(self, positions: torch.Tensor, collision: float) -> torch.Tensor:
        """Per env, whether a point touches a post: a disc of radius ``collision`` around it.

        Args:
            positions (torch.Tensor): float32 ``[num_envs, 2]`` on the generator's device.
            collision (float): post radius, finite and > 0.

        Returns:
            int32 ``[num_envs]``: 1 where the point is closer than ``collision`` to a post of
            the env's gates, else 0.

        Raises:
            TypeError: for positions that are not a float32 tensor, or a non-number collision.
            ValueError: for positions of the wrong shape or device or not finite, or a bad
                collision radius.

        Examples:
            >>> from torchrl_ext.envs.course import CourseGenerator
            >>> gen = CourseGenerator(2, mode="gates")
            >>> left_post = gen.views["posts"][:, 1, 0].clone()
            >>> print(gen.hit_posts(left_post, collision=0.1).tolist())
            [1, 1]
        """
        return _queries.hit_posts(
            self.arrays, positions, collision, self.num_envs, self.device, self._torch_device
        )

    def capture_regenerate(
        self,
        mask: wp.array | torch.Tensor | None = None,
        advance: bool = True,
        *,
        skip_empty: bool = True,
    ) -> wp.Graph:
        """Record :meth:`regenerate` into a graph; replay it with ``wp.capture_launch(graph)``.

        The graph reads ``mask`` at replay time: rewrite it in place between replays and keep it
        alive as long as the graph.

        Args:
            mask (wp.array or torch.Tensor, optional): as in :meth:`regenerate`. Defaults to every
                env.
            advance (bool, optional): as in :meth:`regenerate`. Defaults to True.
            skip_empty (bool, optional): as in :meth:`regenerate`. Defaults to True.

        Returns:
            The recorded ``wp.Graph`` (nothing runs while recording).

        Examples:
            >>> import torch
            >>> import warp as wp
            >>> from torchrl_ext.envs.course import CourseGenerator
            >>> gen = CourseGenerator(3, seed=1)
            >>> mask = torch.zeros(3, dtype=torch.int32)
            >>> graph = gen.capture_regenerate(mask)
            >>> mask[2] = 1
            >>> wp.capture_launch(graph)
            >>> print(gen.views["generation"].tolist())
            [0, 0, 1]
        """
        if mask is not None:
            mask = self.check_mask(mask)
        check_bool("advance", advance)
        with wp.ScopedCapture(device=self.device) as capture:
            self.regenerate(mask, advance, skip_empty=skip_empty)
        return capture.graph
