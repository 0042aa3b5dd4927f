"""Tests of the procedural course generator.

Oracles: a pure-Python SplitMix64 for the seeds and draws, a float64 numpy rebuild of the geometry,
and an O(P^2) segment-intersection test for self-intersection. Bitwise equality is checked with
``torch.equal`` on every per-env array.
"""

from __future__ import annotations

import contextlib
import dataclasses

import numpy as np
import pytest
import torch
import warp as wp
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from scipy import stats

from torchrl_ext.envs.course import CourseDefect, CourseGenerator, CourseParams, effective_seed

wp.config.log_level = wp.LOG_WARNING

DEVICES = ["cpu"] + (["cuda"] if wp.is_cuda_available() else [])
U64 = (1 << 64) - 1
GOLDEN = 0x9E3779B97F4A7C15
COURSE_NAMES = (
    "centerline",
    "arc_length",
    "checkpoints",
    "checkpoint_count",
    "scale",
    "roughness",
    "harmonics",
    "width",
    "checkpoint_spacing",
    "gate_width",
    "coefficients",
    "posts",
    "valid",
    "defects",
)


# ----------------------------------------------------------------------------- oracles
def mix64(z: int) -> int:
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & U64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & U64
    return z ^ (z >> 31)


def reference_effective_seed(seed: int, epoch: int) -> int:
    """Python ints, wrapped to 64 bits, returned as a signed int64."""
    bits = seed & U64
    if epoch > 0:
        bits = mix64(mix64(bits) ^ ((epoch * GOLDEN) & U64))
    return bits - (1 << 64) if bits >= 1 << 63 else bits


def reference_draws(eff_seed: int, count: int = 16) -> np.ndarray:
    key = eff_seed & U64
    return np.array(
        [(mix64((mix64(key) + (j + 1) * GOLDEN) & U64) >> 40) * 2.0**-24 for j in range(count)]
    )


def reference_centerline(draws, scale, roughness, harmonics, num_points) -> np.ndarray:
    theta = np.arange(num_points) * (2 * np.pi / num_points)
    wave = np.zeros(num_points)
    for k in range(1, harmonics + 1):
        amplitude = (2 * draws[2 * k - 2] - 1) / k
        wave += amplitude * np.cos(k * theta + 2 * np.pi * draws[2 * k - 1])
    radius = scale * (1 + roughness * wave)
    return np.stack([radius * np.cos(theta), radius * np.sin(theta)], axis=-1)


def segments_cross(points: np.ndarray) -> bool:
    """Whether two non-adjacent edges of the closed polygon intersect (O(P^2))."""
    a, b = points, np.roll(points, -1, axis=0)
    n = len(points)

    def orient(p, q, r):
        return (q[..., 0] - p[..., 0]) * (r[..., 1] - p[..., 1]) - (q[..., 1] - p[..., 1]) * (
            r[..., 0] - p[..., 0]
        )

    i, j = np.triu_indices(n, k=2)
    keep = ~((i == 0) & (j == n - 1))
    i, j = i[keep], j[keep]
    d1 = orient(a[i], b[i], a[j])
    d2 = orient(a[i], b[i], b[j])
    d3 = orient(a[j], b[j], a[i])
    d4 = orient(a[j], b[j], b[i])
    return bool(np.any((d1 * d2 < 0) & (d3 * d4 < 0)))


def snapshot(gen: CourseGenerator) -> dict[str, torch.Tensor]:
    wp.synchronize_device(gen.device)
    return {name: view.clone() for name, view in gen.views.items()}


@contextlib.contextmanager
def torch_on_warp_stream(device: str):
    """On CUDA, order torch's mask and view writes with Warp's launches: one stream for both."""
    if device == "cpu":
        yield
        return
    with torch.cuda.stream(wp.stream_to_torch(wp.get_stream(device))):
        yield


def bitwise_equal(left: torch.Tensor, right: torch.Tensor) -> bool:
    """Same dtype, shape and bytes (NaN payloads included)."""
    if left.dtype != right.dtype or left.shape != right.shape:
        return False
    return torch.equal(left.reshape(-1).view(torch.uint8), right.reshape(-1).view(torch.uint8))


def assert_rows_equal(left, right, rows, names=None):
    for name in names or left:
        assert torch.equal(left[name][rows], right[name][rows]), name


# ----------------------------------------------------------------------------- effective seed
class TestEffectiveSeed:
    """Epoch 0 is the seed itself; later epochs a 64-bit hash of the pair, with no aliasing."""

    @pytest.mark.parametrize("seed", [0, 1, -1, 2**31, 2**32 + 1, 2**63 - 1, -(2**63)])
    @pytest.mark.parametrize("epoch", [0, 1, 2, 1000, 2**40])
    def test_matches_reference(self, seed, epoch):
        assert effective_seed(seed, epoch) == reference_effective_seed(seed, epoch)

    def test_tensor_broadcast(self):
        seeds = torch.tensor([[3], [2**40]], dtype=torch.int64)
        epochs = torch.tensor([0, 1, 5])
        out = effective_seed(seeds, epochs)
        assert out.shape == (2, 3) and out.dtype == torch.int64
        assert out[1, 2].item() == reference_effective_seed(2**40, 5)
        assert out[0, 0].item() == 3

    def test_large_seeds_do_not_alias(self):
        """Seeds equal modulo 2**32 give different draws and different courses."""
        seeds = torch.tensor([5, 5 + 2**32, 5 - 2**32, 5 + 2**62], dtype=torch.int64)
        gen = CourseGenerator(4, seed=seeds)
        lines = gen.views["centerline"]
        for i in range(1, 4):
            assert not torch.equal(lines[0], lines[i])
        gen.regenerate()
        assert len({tuple(row.tolist()) for row in gen.views["coefficients"]}) == 4

    @pytest.mark.parametrize(
        ("seed", "epoch", "error", "match"),
        [
            (1, -1, ValueError, "epoch must be >= 0, got epoch=-1"),
            (2**63, 0, ValueError, "seed must fit in int64"),
            (1.5, 0, TypeError, "seed must be an int or an integer tensor"),
            (torch.tensor([1.0]), 0, TypeError, "seed must hold integers"),
            (1, torch.tensor([0, -2]), ValueError, "epoch must be >= 0"),
        ],
    )
    def test_bad_input(self, seed, epoch, error, match):
        with pytest.raises(error, match=match):
            effective_seed(seed, epoch)


# ----------------------------------------------------------------------------- generator
class TestCourseGenerator:
    """A course is a function of (seed, epoch) and its parameters only; geometry matches a float64
    oracle; regenerate touches masked envs only."""

    @pytest.mark.parametrize("device", DEVICES)
    def test_draws_and_geometry_match_oracle(self, device):
        with torch_on_warp_stream(device):
            self._draws_and_geometry_match_oracle(device)

    def _draws_and_geometry_match_oracle(self, device):
        params = CourseParams(roughness=0.35, harmonics=6, checkpoint_spacing=4.0)
        seeds = torch.tensor([0, 17, 2**50 + 3, -12345], dtype=torch.int64)
        gen = CourseGenerator(4, seed=seeds, params=params, device=device)
        gen.regenerate(torch.tensor([0, 1, 1, 0], dtype=torch.int32, device=device))
        views = {k: v.cpu() for k, v in snapshot(gen).items()}
        for env in range(4):
            eff = reference_effective_seed(int(seeds[env]), int(views["epoch"][env]))
            draws = reference_draws(eff)
            np.testing.assert_array_equal(views["coefficients"][env].numpy(), draws)
            line = reference_centerline(draws, 10.0, 0.35, 6, gen.num_points)
            np.testing.assert_allclose(views["centerline"][env].numpy(), line, atol=2e-4)
            closed = np.concatenate([line, line[:1]])
            arc = np.concatenate([[0], np.cumsum(np.linalg.norm(np.diff(closed, axis=0), axis=1))])
            np.testing.assert_allclose(views["arc_length"][env].numpy(), arc, rtol=1e-5)
            count = int(np.ceil(arc[-1] / 4.0))
            assert views["checkpoint_count"][env].item() == count
            for j in range(count):
                i = np.searchsorted(arc, 4.0 * j, side="right") - 1
                t = (4.0 * j - arc[i]) / (arc[i + 1] - arc[i])
                point = closed[i] + t * (closed[i + 1] - closed[i])
                np.testing.assert_allclose(views["checkpoints"][env, j].numpy(), point, atol=1e-3)
            assert views["checkpoints"][env, count:].abs().sum() == 0

    @pytest.mark.parametrize("device", DEVICES)
    def test_fresh_generator_rebuilds_from_effective_seed(self, device):
        """Any batch size, any index: seed = effective_seed(seed, epoch) at epoch 0 is bitwise
        the same course."""
        with torch_on_warp_stream(device):
            self._fresh_generator_rebuilds(device)

    def _fresh_generator_rebuilds(self, device):
        params = CourseParams(roughness=0.4, harmonics=3, width=2.5)
        gen = CourseGenerator(
            6,
            seed=torch.tensor([9, 2**33, -7, 0, 4, 123456789012], dtype=torch.int64),
            params=params,
            device=device,
        )
        rng = np.random.default_rng(0)
        for _ in range(5):
            mask = torch.as_tensor(rng.integers(0, 2, 6), dtype=torch.int32, device=device)
            gen.regenerate(mask)
        for env, (size, index) in enumerate([(1, 0), (3, 2), (9, 4), (2, 1), (6, 0), (4, 3)]):
            eff = effective_seed(int(gen.views["seed"][env]), int(gen.views["epoch"][env]))
            seeds = torch.as_tensor(rng.integers(-(2**62), 2**62, size), dtype=torch.int64)
            seeds[index] = eff
            fresh = CourseGenerator(size, seed=seeds, params=params, device=device)
            mine, theirs = gen.course(env), fresh.course(index)
            for name in COURSE_NAMES:
                assert torch.equal(mine[name], theirs[name]), name
            assert int(fresh.views["generation"][index]) == 0

    def test_advance_false_rebuilds_after_new_seed(self):
        gen = CourseGenerator(3, seed=0)
        before = snapshot(gen)
        gen.views["seed"][1] = 42
        gen.regenerate(torch.tensor([0, 1, 0], dtype=torch.int32), advance=False)
        assert gen.views["epoch"].tolist() == [0, 0, 0]
        fresh = CourseGenerator(1, seed=42)
        for name in COURSE_NAMES:
            assert torch.equal(gen.course(1)[name], fresh.course(0)[name]), name
        assert_rows_equal(before, snapshot(gen), [0, 2])

    def test_int_seed_wraps_around_int64(self):
        gen = CourseGenerator(3, seed=2**63 - 2)
        assert gen.views["seed"].tolist() == [2**63 - 2, 2**63 - 1, -(2**63)]

    def test_no_mask_rebuilds_every_env(self):
        gen = CourseGenerator(4, seed=1)
        gen.regenerate()
        gen.regenerate()
        assert gen.views["epoch"].tolist() == [2] * 4
        assert gen.views["generation"].tolist() == [2] * 4

    def test_curriculum_applies_only_on_rebuild(self):
        gen = CourseGenerator(3, seed=0)
        gen.set_params(torch.tensor([2]), width=3.0, scale=12.0)
        gen.set_params(harmonics=2)
        gen.regenerate(torch.tensor([1, 0, 0], dtype=torch.int32))
        assert gen.views["width"].tolist() == [2.0, 2.0, 2.0]
        assert gen.views["harmonics"].tolist() == [2, 5, 5]
        gen.regenerate(torch.tensor([0, 0, 1], dtype=torch.int32))
        assert gen.views["width"].tolist() == [2.0, 2.0, 3.0]
        assert gen.views["scale"].tolist() == [10.0, 10.0, 12.0]
        assert gen.views["harmonics"].tolist() == [2, 5, 2]

    @settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(
        calls=st.lists(
            st.tuples(st.lists(st.booleans(), min_size=6, max_size=6), st.booleans()),
            min_size=1,
            max_size=6,
        ),
        wp_mask=st.booleans(),
    )
    def test_masked_regeneration_invariants(self, calls, wp_mask):
        """Unmasked envs bitwise untouched; epoch and generation advance exactly for masked envs;
        an all-zero mask changes nothing."""
        gen = CourseGenerator(6, seed=11, params=CourseParams(roughness=0.45))
        mask = torch.zeros(6, dtype=torch.int32)
        arg = wp.from_torch(mask) if wp_mask else mask
        for bits, advance in calls:
            before = snapshot(gen)
            mask.copy_(torch.tensor(bits, dtype=torch.int32))
            gen.regenerate(arg, advance=advance)
            after = snapshot(gen)
            masked = torch.tensor(bits)
            assert_rows_equal(before, after, ~masked)
            step = int(advance) * masked.long()
            assert torch.equal(after["epoch"], before["epoch"] + step)
            assert torch.equal(after["generation"][masked], after["epoch"][masked])
            assert torch.equal(after["valid"], (after["defects"] == 0).int())
            if advance:
                assert torch.equal(after["generation"], before["generation"] + step)
            assert torch.equal(mask, torch.tensor(bits, dtype=torch.int32)), "mask was written"

    @pytest.mark.parametrize("skip_empty", [True, False])
    def test_all_zero_mask_is_exact_noop(self, skip_empty):
        gen = CourseGenerator(5, seed=3)
        gen.set_params(width=1.5)
        before = snapshot(gen)
        gen.regenerate(torch.zeros(5, dtype=torch.int32), skip_empty=skip_empty)
        assert_rows_equal(before, snapshot(gen), slice(None))


# ----------------------------------------------------------------------------- validity
class TestValidity:
    """Unusable courses are flagged (valid = 0, defect bits) instead of raising."""

    def test_circle_turn_radius_against_width(self):
        """A circle of radius 10 (roughness 0): valid below width 20, a tight turn above."""
        gen = CourseGenerator(2, params=CourseParams(roughness=0.0))
        gen.set_params(torch.tensor([0]), width=19.9)
        gen.set_params(torch.tensor([1]), width=20.1)
        gen.regenerate(advance=False)
        assert gen.views["valid"].tolist() == [1, 0]
        assert gen.views["defects"][1].item() == CourseDefect.TIGHT_TURN
        np.testing.assert_allclose(gen.views["arc_length"][:, -1].numpy(), 2 * np.pi * 10, 1e-3)

    def test_self_intersection_matches_segment_oracle(self):
        """Rough courses cross themselves; the flag agrees with an O(P^2) oracle."""
        gen = CourseGenerator(200, seed=0, params=CourseParams(roughness=0.9, width=0.01))
        lines = gen.views["centerline"].double().numpy()
        crossed = np.array([segments_cross(line) for line in lines])
        flagged = (gen.views["defects"] & CourseDefect.SELF_INTERSECTING).bool().numpy()
        assert 20 < crossed.sum() < 180
        np.testing.assert_array_equal(flagged, crossed)
        assert torch.equal(gen.views["valid"].bool(), gen.views["defects"] == 0)

    def test_default_courses_do_not_cross(self):
        gen = CourseGenerator(100, seed=5)
        assert not any(segments_cross(line) for line in gen.views["centerline"].double().numpy())

    @pytest.mark.parametrize(
        ("spacing", "defect"),
        [(1000.0, CourseDefect.TOO_FEW_CHECKPOINTS), (0.5, CourseDefect.TOO_MANY_CHECKPOINTS)],
    )
    def test_checkpoint_count_out_of_range(self, spacing, defect):
        gen = CourseGenerator(2, seed=0, params=CourseParams(checkpoint_spacing=spacing))
        assert gen.views["valid"].tolist() == [0, 0]
        assert torch.all(gen.views["defects"] == defect)
        assert torch.all(gen.views["checkpoint_count"] <= gen.max_checkpoints)

    @pytest.mark.parametrize(
        ("name", "value"),
        [
            ("param_width", -1.0),
            ("param_width", float("nan")),
            ("param_checkpoint_spacing", 0.0),
            ("param_scale", float("inf")),
            ("param_harmonics", 0),
            ("param_roughness", -0.1),
        ],
    )
    def test_bad_params_written_directly_are_flagged(self, name, value):
        gen = CourseGenerator(3, seed=0)
        gen.views[name][1] = value
        gen.regenerate()
        assert gen.views["valid"].tolist() == [1, 0, 1]
        assert gen.views["defects"][1].item() & CourseDefect.BAD_PARAMS

    def test_fraction_invalid_at_defaults(self):
        """Measured over 10,000 courses (seeds 0-9,999) at default parameters: 5 invalid at epoch 0
        (0.05%), 3 at epoch 1 (0.03%), 8 at epoch 2 (0.08%)."""
        gen = CourseGenerator(10_000, seed=0)
        measured = []
        for _ in range(3):
            measured.append(1 - gen.views["valid"].double().mean().item())
            gen.regenerate()
        assert max(measured) < 0.01
        assert measured == pytest.approx([0.0005, 0.0003, 0.0008], abs=1e-9)


class TestDraws:
    """The hashed draws are uniform (chi-square over 16 bins x 16 draw indices, p > 0.01) at the
    raw seeds of epoch 0 and the hashed seeds of epoch 1."""

    def test_draws_uniform(self):
        gen = CourseGenerator(10_000, seed=0)
        for _ in range(2):
            draws = gen.views["coefficients"].numpy()
            counts = [np.histogram(draws[:, j], bins=16, range=(0, 1))[0] for j in range(16)]
            assert stats.chisquare(np.concatenate(counts)).pvalue > 0.01
            assert abs(np.corrcoef(draws[:, 0], draws[:, 1])[0, 1]) < 0.05
            gen.regenerate()


# ----------------------------------------------------------------------------- capture
class TestCapture:
    """A recorded regenerate replays bitwise like the eager call, for masks rewritten in place."""

    @pytest.mark.parametrize("device", DEVICES)
    @pytest.mark.parametrize("skip_empty", [True, False])
    @pytest.mark.parametrize("advance", [True, False])
    def test_captured_equals_eager(self, skip_empty, advance, device):
        with torch_on_warp_stream(device):
            self._captured_equals_eager(skip_empty, advance, device)

    def _captured_equals_eager(self, skip_empty, advance, device):
        params = CourseParams(roughness=0.45)
        eager = CourseGenerator(16, seed=2**40, params=params, device=device)
        captured = CourseGenerator(16, seed=2**40, params=params, device=device)
        mask = torch.zeros(16, dtype=torch.int32, device=device)
        graph = captured.capture_regenerate(mask, advance, skip_empty=skip_empty)
        assert_rows_equal(snapshot(eager), snapshot(captured), slice(None))
        rng = np.random.default_rng(1)
        for step in range(40):
            bits = rng.random(16) < rng.choice([0.0, 0.1, 0.5, 1.0])
            mask.copy_(torch.as_tensor(bits, dtype=torch.int32, device=device))
            if step % 7 == 3:
                index = torch.as_tensor(rng.choice(16, 3, replace=False))
                width = float(rng.uniform(0.5, 3.0))
                for gen in (eager, captured):
                    gen.views["seed"][index] = torch.as_tensor([1, 2**60, -5], device=device)
                    gen.set_params(index, width=width)
            eager.regenerate(mask, advance, skip_empty=skip_empty)
            wp.capture_launch(graph)
            assert_rows_equal(snapshot(eager), snapshot(captured), slice(None))

    @pytest.mark.parametrize("device", DEVICES)
    def test_replay_without_mask_rebuilds_all(self, device):
        gen = CourseGenerator(4, seed=0, device=device)
        graph = gen.capture_regenerate()
        assert gen.views["epoch"].tolist() == [0] * 4
        wp.capture_launch(graph)
        wp.capture_launch(graph)
        assert gen.views["generation"].tolist() == [2] * 4


# ----------------------------------------------------------------------------- bad input
@pytest.fixture(scope="module")
def gen():
    return CourseGenerator(4, seed=0)


class TestBadInput:
    """Clear errors naming the argument, raised before anything launches."""

    @pytest.mark.parametrize(
        ("mask", "error", "match"),
        [
            (torch.zeros(3, dtype=torch.int32), ValueError, r"mask must have shape \(4,\)"),
            (torch.zeros(4, 1, dtype=torch.int32), ValueError, "mask must have shape"),
            (torch.tensor(0, dtype=torch.int32), ValueError, r"mask must have shape \(4,\)"),
            (torch.zeros(0, dtype=torch.int32), ValueError, r"mask must have shape \(4,\)"),
            (torch.zeros(4, dtype=torch.int64), TypeError, "mask must have dtype torch.int32"),
            (torch.zeros(4, dtype=torch.bool), TypeError, "mask must have dtype"),
            (torch.zeros(4, dtype=torch.int32, device="meta"), ValueError, "mask must be on"),
            (torch.zeros(8, dtype=torch.int32)[::2], ValueError, "mask must be contiguous"),
            ([0, 1, 0, 0], TypeError, "mask must be a wp.array or a torch.Tensor"),
        ],
    )
    def test_bad_torch_mask(self, gen, mask, error, match):
        before = snapshot(gen)
        with pytest.raises(error, match=match):
            gen.regenerate(mask)
        with pytest.raises(error, match=match):
            gen.capture_regenerate(mask)
        assert_rows_equal(before, snapshot(gen), slice(None))

    def test_bad_warp_mask(self, gen):
        with pytest.raises(TypeError, match="mask must have dtype int32"):
            gen.regenerate(wp.zeros(4, dtype=wp.float32, device="cpu"))
        with pytest.raises(ValueError, match=r"mask must have shape \(4,\)"):
            gen.regenerate(wp.zeros(5, dtype=wp.int32, device="cpu"))

    def test_advance_must_be_bool(self, gen):
        with pytest.raises(TypeError, match="advance"):
            gen.regenerate(advance=1)

    @pytest.mark.parametrize(
        ("kwargs", "error", "match"),
        [
            ({"width": 0.0}, ValueError, "width must be finite and > 0, got width=0.0"),
            ({"width": -2.0}, ValueError, "width"),
            ({"checkpoint_spacing": 0.0}, ValueError, "checkpoint_spacing=0.0"),
            ({"checkpoint_spacing": float("nan")}, ValueError, "checkpoint_spacing"),
            ({"scale": -1.0}, ValueError, "scale"),
            ({"roughness": -0.5}, ValueError, "roughness"),
            ({"harmonics": 9}, ValueError, r"harmonics must be in \[1, 8\]"),
            ({"harmonics": 2.0}, TypeError, "harmonics must be an integer"),
        ],
    )
    def test_bad_params(self, gen, kwargs, error, match):
        with pytest.raises(error, match=match):
            CourseParams(**kwargs)
        with pytest.raises(error, match=match):
            gen.set_params(**kwargs)
        tensors = {k: torch.tensor([v]) for k, v in kwargs.items()}
        with pytest.raises(error, match=match.split("=")[0]):
            gen.set_params(torch.tensor([1]), **tensors)

    def test_unknown_param(self, gen):
        with pytest.raises(TypeError, match="unknown course parameter 'wdth'"):
            gen.set_params(wdth=1.0)

    @pytest.mark.parametrize(
        ("env_ids", "kwargs", "error", "match"),
        [
            # a good width first, then a scale with one value too many for two envs
            (
                torch.tensor([1, 2]),
                {"width": 3.0, "scale": torch.tensor([1.0, 2.0, 3.0])},
                ValueError,
                r"scale must be a scalar or have shape \(2,\)",
            ),
            (None, {"width": 3.0, "roughness": torch.ones(2, 2)}, ValueError, "roughness must"),
            ([0, 4], {"width": 3.0}, ValueError, r"env_ids must be in \[0, 4\)"),
            ([-1], {"width": 3.0}, ValueError, "env_ids must be in"),
            ([1, 1], {"width": 3.0, "scale": torch.tensor([1.0, 2.0])}, ValueError, "distinct"),
            ([1], {"width": 3.0, "harmonics": "2"}, TypeError, "harmonics must be a number"),
            ([1], {"width": 3.0, "scale": True}, TypeError, "scale must be a real number"),
        ],
    )
    def test_set_params_is_all_or_nothing(self, gen, env_ids, kwargs, error, match):
        before = snapshot(gen)
        with pytest.raises(error, match=match):
            gen.set_params(env_ids, **kwargs)
        after = snapshot(gen)
        for name, value in before.items():
            assert bitwise_equal(value, after[name]), name

    @pytest.mark.parametrize(
        "env_ids", [[0.0, 2.0], [1, 2.5], torch.tensor([1.0]), torch.tensor([True, False]), "01"]
    )
    def test_set_params_refuses_non_integer_env_ids(self, gen, env_ids):
        before = snapshot(gen)
        with pytest.raises(TypeError, match="env_ids must"):
            gen.set_params(env_ids, width=3.0)
        assert all(bitwise_equal(v, snapshot(gen)[k]) for k, v in before.items())

    def test_set_params_writes_per_env_columns(self, gen):
        gen.set_params([3, 1], width=torch.tensor([3.0, 4.0]), harmonics=torch.tensor([2, 3]))
        assert gen.views["param_width"].tolist() == [2.0, 4.0, 2.0, 3.0]
        assert gen.views["param_harmonics"].tolist() == [5, 3, 5, 2]

    @pytest.mark.parametrize(
        ("kwargs", "error", "match"),
        [
            ({"num_points": 15}, ValueError, "num_points must be >= 16, got num_points=15"),
            ({"num_points": 3}, ValueError, "num_points"),
            ({"num_envs": 0}, ValueError, "num_envs must be >= 1"),
            ({"num_envs": 2.0}, TypeError, "num_envs must be an int"),
            ({"max_checkpoints": 1}, ValueError, "max_checkpoints"),
            ({"seed": 1.5}, TypeError, "seed must be an int"),
            ({"seed": 2**64}, ValueError, "seed must fit in int64"),
            ({"seed": torch.zeros(3, dtype=torch.int64)}, ValueError, r"seed must have shape"),
            ({"params": {"width": 1.0}}, TypeError, "params must be a CourseParams"),
        ],
    )
    def test_bad_construction(self, kwargs, error, match):
        kwargs = {"num_envs": 4, **kwargs}
        with pytest.raises(error, match=match):
            CourseGenerator(**kwargs)

    def test_course_params_fields_are_the_kernel_struct_fields(self):
        from torchrl_ext.envs.course._kernels import courses as kernels

        names = [f.name for f in dataclasses.fields(CourseParams)]
        assert names == list(kernels.Params.vars)
        dtypes = {name: var.type.dtype for name, var in kernels.Params.vars.items()}
        assert dtypes == {name: wp.int32 if name == "harmonics" else wp.float32 for name in names}
        gen = CourseGenerator(2, params=CourseParams(harmonics=3, width=2.5))
        for name in names:  # the struct the kernels read holds the generator's arrays by name
            assert getattr(gen.arrays.params, name).ptr == getattr(gen, name).ptr
            assert getattr(gen._next_params, name).ptr == getattr(gen, f"param_{name}").ptr
        assert gen.views["param_harmonics"].tolist() == [3, 3]
        assert gen.views["param_width"].tolist() == [2.5, 2.5]

    def test_construction_inside_capture(self, gen):
        with pytest.raises(RuntimeError, match="Build it outside the capture"):
            with wp.ScopedCapture(device="cpu"):
                CourseGenerator(2)

    def test_bad_course_index(self, gen):
        with pytest.raises(ValueError, match="env must be an int in"):
            gen.course(4)
