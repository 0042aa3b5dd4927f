import functools
import math

import numpy as np
import pytest
import torch
import warp as wp
from bad_arguments import (
    assert_state_unchanged,
    bad_ints,
    not_tensors,
    warp_env_arguments,
)
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tensordict import TensorDict
from torchrl.collectors import Collector
from torchrl.envs import InitTracker, TransformedEnv
from torchrl.envs.utils import check_env_specs

from torchrl_ext.envs import CarConfig, CourseEnv, CourseGenerator, CourseParams, effective_seed

N = 8
COURSE_KEYS = ("seed", "epoch", "generation", "valid", "centerline", "checkpoints", "width")


def _env_state(env):
    views = env.generator.views
    state = {f"course/{k}": views[k].cpu().clone() for k in CourseGenerator.array_names()}
    state.update(pose=env.pose.cpu().clone(), progress=env.progress.cpu().clone())
    state.update(counters=env.counters.cpu().clone(), steps=env.buffers["steps"].numpy().copy())
    return state


def _rows_equal(a, b, rows):
    for key in a:
        x, y = torch.as_tensor(a[key])[rows], torch.as_tensor(b[key])[rows]
        assert torch.equal(x.view(torch.uint8), y.view(torch.uint8)), key


def _actions(gen, n, steps):
    return torch.rand(steps, n, 2, generator=gen) * 2.4 - 1.2


def _step_all(env, actions, masks=None):
    """Fused steps; optional user regenerate/respawn masks between steps. Returns outputs."""
    outs = []
    root = env.reset()
    for t, action in enumerate(actions):
        root["action"] = action.to(env.device)
        td, root = env.step_and_maybe_reset(root)
        outs.append(td["next"].clone())
        if masks is not None:
            regen, respawn = masks[t]
            env.regenerate(regen.to(env.device))
            env.respawn(respawn.to(env.device))
            root = env.observe()
    return torch.stack(outs)


# ---------------------------------------------------------------- slow, obvious reference
def _ref_project(line, p):
    """Nearest segment, distance and arc position of p on the closed polyline (float64)."""
    num = len(line)
    best = (math.inf, 0, 0.0)
    for i in range(num):
        a, b = line[i], line[(i + 1) % num]
        ab = b - a
        t = float(np.clip(np.dot(p - a, ab) / np.dot(ab, ab), 0.0, 1.0))
        d = float(np.linalg.norm(p - (a + t * ab)))
        if d < best[0]:
            best = (d, i, t)
    d, i, t = best
    arc = np.concatenate([[0.0], np.cumsum(np.linalg.norm(np.roll(line, -1, 0) - line, axis=1))])
    return i, d, arc[i] + t * (arc[i + 1] - arc[i]), arc[-1]


def _ref_distances(line, points):
    """Distance of each point to the closed polyline, all segments at once (float64)."""
    a, b = line[None], np.roll(line, -1, 0)[None]
    ab, ap = b - a, points[:, None] - a
    t = np.clip((ap * ab).sum(-1) / (ab * ab).sum(-1), 0.0, 1.0)
    return np.linalg.norm(ap - t[..., None] * ab, axis=-1).min(1)


def _ref_ray(line, p, direction, half_width, max_range):
    """Range by marching 1e-3 steps until the point leaves the track (float64)."""
    ts = np.arange(0.0, max_range, 1e-3)
    out = _ref_distances(line, p + ts[:, None] * direction) > half_width
    return ts[out.argmax()] if out.any() else max_range


def _check_rays(obs, line, pose, car):
    """Range readings of one env against a brute-force march from its pose."""
    x, y, h, _ = pose
    for r, angle in enumerate(np.linspace(h - car.ray_spread, h + car.ray_spread, 3)):
        direction = np.array([math.cos(angle), math.sin(angle)])
        expected = _ref_ray(line, np.array([x, y]), direction, 1.0, car.max_range)
        assert abs(obs[r] - expected) < car.max_range / 64 + 3e-3, (r, obs[r], expected)


class TestCourseEnv:
    """CourseEnv: a TorchRL env whose envs drive their own procedural course.

    Contract: ``check_env_specs`` holds, eager and captured; the two masks (``regenerate``,
    ``respawn``) touch exactly the masked envs (others bitwise unchanged, ``generation`` +1 exactly
    for regenerated envs with ``advance``, all-zero masks exact no-ops); invalid courses give
    reward 0 and finite zero observations; captured steps equal eager steps bit for bit; auto-reset
    gives true final observations, ``is_init`` at every episode start, new courses after finishing
    or truncation and a respawn on the same course after a crash; the kinematics and progress agree
    with a slow float64 reference; the same seed gives identical trajectories; bad input raises
    before anything launches.
    """

    @pytest.mark.parametrize("capture", [False, True])
    def test_check_env_specs(self, capture, device):
        check_env_specs(CourseEnv(4, seed=1, capture=capture, device=device))

    def test_reset_observation(self):
        env = CourseEnv(3, seed=2, num_rays=4)
        td = env.reset()
        assert td["observation"].shape == (3, 7)
        assert bool(td["valid"].all()) and not bool(td["out_of_bounds"].any())
        assert torch.equal(td["laps"], torch.zeros(3, 1, dtype=torch.int32))
        start = env.generator.views["centerline"][:, 0]
        assert torch.equal(env.pose[:, :2], start)
        torch.testing.assert_close(td["observation"][:, 5], torch.zeros(3), atol=1e-5, rtol=0)

    # ------------------------------------------------------------ masks
    @settings(
        max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
    )
    @given(
        ops=st.lists(
            st.tuples(
                st.sampled_from(["regenerate", "respawn", "step"]),
                st.lists(st.booleans(), min_size=N, max_size=N),
                st.booleans(),
            ),
            min_size=1,
            max_size=6,
        )
    )
    def test_masks_touch_only_masked_envs(self, mask_env, ops):
        env = mask_env
        gen = torch.Generator().manual_seed(len(ops))
        for op, bits, advance in ops:
            mask = torch.tensor(bits, dtype=torch.int32)
            before = _env_state(env)
            if op == "step":
                root = env.observe()
                action = _actions(gen, N, 1)[0]
                action[:, 1] = action[:, 1].abs()  # throttle: the cars move
                root["action"] = action
                env.step_and_maybe_reset(root)
                continue
            if op == "regenerate":
                env.regenerate(mask, advance=advance)
            else:
                env.respawn(mask)
            after = _env_state(env)
            masked = mask.bool()
            _rows_equal(before, after, ~masked)
            expected = before["course/generation"].clone()
            if op == "regenerate" and advance:
                expected[masked] += 1
            assert torch.equal(after["course/generation"], expected)
            if op == "respawn":
                for key in before:
                    if key.startswith("course/"):
                        assert torch.equal(before[key], after[key]), key
            assert (after["steps"][masked.numpy()] == 0).all()

    def test_all_zero_masks_are_exact_no_ops(self):
        env = CourseEnv(N, seed=3)
        root = env.reset()
        root["action"] = torch.full((N, 2), 0.7)
        env.step_and_maybe_reset(root)
        before = _env_state(env)
        obs_before = env.observe()
        zero = torch.zeros(N, dtype=torch.int32)
        env.regenerate(zero)
        env.respawn(zero)
        _rows_equal(before, _env_state(env), slice(None))
        assert (env.observe() == obs_before).all()

    def test_mask_is_read_not_cleared(self):
        env = CourseEnv(4, seed=0)
        mask = torch.tensor([1, 0, 1, 0], dtype=torch.int32)
        env.regenerate(mask)
        env.regenerate(mask)
        assert mask.tolist() == [1, 0, 1, 0]
        assert env.generation.tolist() == [2, 0, 2, 0]

    @pytest.mark.parametrize(
        ("mask", "error", "match"),
        [
            (torch.zeros(4, dtype=torch.int64), TypeError, "int32"),
            (torch.zeros(5, dtype=torch.int32), ValueError, "shape"),
            (torch.zeros(4, 1, dtype=torch.int32), ValueError, "shape"),
            (torch.zeros(8, dtype=torch.int32)[::2], ValueError, "contiguous"),
            ([1, 0, 1, 0], TypeError, "mask"),
        ],
    )
    @pytest.mark.parametrize("method", ["regenerate", "respawn"])
    def test_bad_masks_raise_before_launch(self, method, mask, error, match):
        env = CourseEnv(4, seed=0)
        env.reset()
        before = _env_state(env)
        with pytest.raises(error, match=match):
            getattr(env, method)(mask)
        _rows_equal(before, _env_state(env), slice(None))

    def test_curriculum_applies_to_regenerated_envs_only(self):
        env = CourseEnv(3, seed=0)
        env.generator.set_params([0, 1], width=3.0)
        env.regenerate(torch.tensor([1, 0, 0], dtype=torch.int32))
        assert env.generator.views["width"].tolist() == [3.0, 2.0, 2.0]
        root = env.observe()
        root["action"] = torch.zeros(3, 2)
        env.step_and_maybe_reset(root)
        assert env.generator.views["width"].tolist() == [3.0, 2.0, 2.0]

    # ------------------------------------------------------------ validity gating
    def test_invalid_course_is_gated_to_zero(self):
        env = CourseEnv(4, seed=0, max_steps=None)
        views = env.generator.views
        views["param_scale"][1] = float("nan")  # a broken course: NaN centerline
        views["param_width"][2] = 30.0  # a tight turn
        env.regenerate(torch.tensor([0, 1, 1, 0], dtype=torch.int32), advance=False)
        assert env.valid.tolist() == [1, 0, 0, 1]
        assert bool(torch.isnan(views["centerline"][1]).all())
        root = env.observe()
        for _ in range(3):
            root["action"] = torch.tensor([[0.0, 1.0]] * 4)
            td, root = env.step_and_maybe_reset(root)
            nxt = td["next"]
            for bad in (1, 2):
                assert nxt["reward"][bad].item() == 0.0
                assert torch.equal(nxt["observation"][bad], torch.zeros(8))
                assert torch.equal(root["observation"][bad], torch.zeros(8))
                assert not nxt["valid"][bad].item() and nxt["terminated"][bad].item()
                assert nxt["checkpoint_distance"][bad].item() == 0.0
            assert bool(nxt["valid"][[0, 3]].all()) and not bool(nxt["done"][[0, 3]].any())
            assert bool(torch.isfinite(nxt["observation"]).all())
        # invalid envs were regenerated each step, from their own (seed, epoch)
        assert env.generation.tolist() == [0, 3, 3, 0]

    # ------------------------------------------------------------ graph capture
    def test_captured_equals_eager_with_random_masks(self, device):
        steps = 40
        gen = torch.Generator().manual_seed(5)
        actions = _actions(gen, N, steps)
        masks = [
            (
                (torch.rand(N, generator=gen) < 0.15).to(torch.int32),
                (torch.rand(N, generator=gen) < 0.15).to(torch.int32),
            )
            for _ in range(steps)
        ]
        params = CourseParams(scale=4.0, width=2.5)
        kwargs = {"seed": 11, "max_steps": 15, "params": params, "device": device}
        eager = CourseEnv(N, **kwargs)
        captured = CourseEnv(N, capture=True, **kwargs)
        a = _step_all(eager, actions, masks)
        b = _step_all(captured, actions, masks)
        assert captured._launcher.graphs, "no graph was recorded"
        for key in a.keys(True, True):
            assert torch.equal(a[key], b[key]), key
        _rows_equal(_env_state(eager), _env_state(captured), slice(None))
        assert bool(a["done"].any()) and int(eager.generation.sum()) > 0

    def test_captured_graph_replays_generic_step_and_reset(self):
        eager = CourseEnv(4, seed=4, max_steps=5)
        captured = CourseEnv(4, seed=4, max_steps=5, capture=True)
        results = []
        for env in (eager, captured):
            td = env.reset()
            for _ in range(7):
                td["action"] = torch.full((4, 2), 0.5)
                td = env.step(td)["next"].clone()
                td["_reset"] = td["done"].clone()
                td = env.reset(td)
            results.append(td)
        assert (results[0] == results[1]).all()

    # ------------------------------------------------------------ auto-reset semantics
    def test_fused_auto_reset_equals_generic_step_then_reset(self, device):
        kwargs = {"seed": 9, "max_steps": 12, "crash": "respawn", "device": device}
        fused, generic = CourseEnv(N, **kwargs), CourseEnv(N, **kwargs)
        actions = _actions(torch.Generator().manual_seed(1), N, 30)
        a = _step_all(fused, actions)
        root = generic.reset()
        outs = []
        for action in actions:
            root["action"] = action.to(device)
            nxt = generic.step(root)["next"].clone()
            outs.append(nxt)
            root = generic.reset(nxt.clone().set("_reset", nxt["done"].clone()))
        b = torch.stack(outs)
        for key in a.keys(True, True):
            assert torch.equal(a[key], b[key]), key
        assert torch.equal(fused.generation, generic.generation)

    def test_rollout_final_observation_and_is_init(self):
        env = TransformedEnv(CourseEnv(N, seed=6, max_steps=6), InitTracker())
        torch.manual_seed(0)
        data = env.rollout(20, break_when_any_done=False)
        done = data["next", "done"][..., 0]
        is_init = data["is_init"][..., 0]
        assert bool(is_init[:, 0].all())
        assert torch.equal(is_init[:, 1:], done[:, :-1])
        # a truncated env starts a new course: its next root differs from its final observation
        final = data["next", "observation"][:, 5]
        restart = data["observation"][:, 6]
        assert bool(done[:, 5].all()) and not torch.equal(final, restart)
        assert torch.isfinite(data["next", "observation"]).all()
        # no crash within 6 steps: every episode end (truncation, or an invalid course: seed 12
        # at epoch 2 is one) gave a new course
        assert torch.equal(env.base_env.generation, done.sum(1))
        assert not bool(data["next", "valid"][6, 12])

    def test_crash_respawns_on_same_course_and_finish_regenerates(self):
        env = CourseEnv(3, seed=0, max_steps=None)
        root = env.reset()
        views = env.generator.views
        lap, count = views["arc_length"][2, -1].item(), int(views["checkpoint_count"][2])
        env.pose[0, :2] = 1.5 * views["centerline"][0, 0]  # outside the start line: a crash
        # env 2: just before the start line with every checkpoint of the lap but the last passed
        p, q = views["centerline"][2, -1], views["centerline"][2, 0]
        env.pose[2, :2] = q + 0.02 * (p - q) / torch.linalg.norm(p - q)
        env.pose[2, 2] = torch.atan2(q[1] - p[1], q[0] - p[0])
        env.pose[2, 3] = 2.0
        env.progress[2, :2] = lap - 0.02
        env.counters[2, 0] = count - 1
        root["action"] = torch.tensor([[0.0, 0.0], [0.0, 0.0], [0.0, 1.0]])
        td, root = env.step_and_maybe_reset(root)
        nxt = td["next"]
        assert nxt["out_of_bounds"][:, 0].tolist() == [True, False, False]
        assert nxt["terminated"][:, 0].tolist() == [True, False, True]
        assert nxt["laps"][2].item() == 1 and nxt["checkpoints_passed"][2].item() == 1
        assert nxt["reward"][0].item() == pytest.approx(-1.0, abs=0.2)
        assert nxt["reward"][2].item() > 1.0
        assert env.generation.tolist() == [0, 0, 1]
        assert torch.equal(env.pose[0, :2], views["centerline"][0, 0])
        assert root["observation"][0, 5].item() == 0.0

    def test_crash_may_regenerate(self):
        env = CourseEnv(2, seed=0, crash="regenerate")
        root = env.reset()
        env.pose[1, :2] = torch.tensor([-50.0, 0.0])
        root["action"] = torch.zeros(2, 2)
        env.step_and_maybe_reset(root)
        assert env.generation.tolist() == [0, 1]

    def test_collector_is_init_follows_done(self):
        env = TransformedEnv(CourseEnv(4, seed=8, max_steps=5), InitTracker())
        collector = Collector(env, None, frames_per_batch=4 * 12, total_frames=4 * 24)
        batches = [b.clone() for b in collector]
        collector.shutdown()
        assert len(batches) == 2
        for batch in batches:
            assert batch.shape == (4, 12)
            done = batch["next", "done"][..., 0]
            assert torch.equal(batch["is_init"][:, 1:, 0], done[:, :-1])
            assert bool(done.any())

    # ------------------------------------------------------------ reference and determinism
    def test_kinematics_and_progress_match_a_slow_reference(self):
        car = CarConfig()
        env = CourseEnv(2, seed=21, num_rays=3, car=car, max_steps=None)
        root = env.reset()
        line = env.generator.views["centerline"].double().numpy()
        arc_len = env.generator.views["arc_length"]
        pose = env.pose.double().numpy().copy()
        travel = np.zeros(2)
        arc = np.zeros(2)
        actions = torch.tensor([[[0.3, 1.0], [-0.4, 0.8]]] * 6 + [[[2.0, -0.2], [-5.0, 1.0]]] * 4)
        for action in actions:
            root["action"] = action
            td, root = env.step_and_maybe_reset(root)
            obs = td["next", "observation"].double().numpy()
            for i in range(2):
                steer = np.clip(action[i, 0].item(), -1, 1) * car.max_steer
                throttle = np.clip(action[i, 1].item(), -1, 1)
                x, y, h, v = pose[i]
                v = np.clip(v + (car.accel * throttle - car.drag * v) * car.dt, 0, car.max_speed)
                h = h + v * math.tan(steer) / car.wheelbase * car.dt
                h = (h + math.pi) % (2 * math.pi) - math.pi
                pose[i] = [x + v * math.cos(h) * car.dt, y + v * math.sin(h) * car.dt, h, v]
                seg, d, s, lap = _ref_project(line[i], pose[i, :2])
                delta = (s - arc[i] + lap / 2) % lap - lap / 2
                travel[i] += delta
                arc[i] = s
                np.testing.assert_allclose(env.pose[i].numpy(), pose[i], rtol=1e-4, atol=1e-4)
                assert abs(env.progress[i, 1].item() - travel[i]) < 1e-3
                assert abs(arc_len[i, -1].item() - lap) < 1e-3
                assert env.counters[i, 3].item() == seg
                assert td["next", "out_of_bounds"][i].item() == (d > 1.0)
                tangent = line[i][(seg + 1) % len(line[i])] - line[i][seg]
                err = (h - math.atan2(tangent[1], tangent[0]) + math.pi) % (2 * math.pi) - math.pi
                assert abs(obs[i, 4] - err) < 1e-4 and abs(obs[i, 3] - v) < 1e-5
                reward = 0.1 * delta - (1.0 if d > 1.0 else 0.0)
                reward += td["next", "checkpoints_passed"][i].item()
                assert abs(td["next", "reward"][i].item() - reward) < 1e-4
                _check_rays(obs[i], line[i], env.pose[i].double().numpy(), car)
            if bool(td["next", "done"].any()):
                break

    def test_same_seed_same_trajectories(self):
        actions = _actions(torch.Generator().manual_seed(2), N, 25)
        a = _step_all(CourseEnv(N, seed=2**40 + 3, max_steps=8), actions)
        env = CourseEnv(N, seed=7, max_steps=8)
        env.set_seed(2**40 + 3)
        b = _step_all(env, actions)
        c = _step_all(CourseEnv(N, seed=3, max_steps=8), actions)
        assert (a == b).all()
        assert not torch.equal(a["observation"], c["observation"])

    def test_course_rebuilds_from_effective_seed(self):
        env = CourseEnv(4, seed=2**63 + 5, max_steps=4)
        _step_all(env, _actions(torch.Generator().manual_seed(0), 4, 9))
        views = env.generator.views
        assert views["seed"][0].item() == -(2**63) + 5
        for i in range(4):
            eff = effective_seed(int(views["seed"][i]), int(views["epoch"][i]))
            fresh = CourseGenerator(1, seed=torch.tensor([eff]))
            for key in ("centerline", "checkpoints", "arc_length"):
                assert torch.equal(fresh.views[key][0], views[key][i]), key

    # ------------------------------------------------------------ bad input
    @pytest.mark.parametrize(
        ("name", "value", "error"),
        [
            ("num_points", 8, ValueError),
            ("num_points", 16.0, TypeError),
            ("num_rays", 0, ValueError),
            ("laps", 0, ValueError),
            ("crash", "explode", ValueError),
            ("params", {"width": 2.0}, TypeError),
            ("car", CarConfig, TypeError),
            ("max_steps", 0, ValueError),
        ],
    )
    def test_bad_arguments(self, name, value, error):
        with pytest.raises(error, match=name):
            CourseEnv(2, seed=0, **{name: value})

    @pytest.mark.parametrize(
        ("field", "value"), [("width", 0.0), ("width", -1.0), ("checkpoint_spacing", 0.0)]
    )
    def test_bad_course_parameters(self, field, value):
        with pytest.raises(ValueError, match=field):
            CourseEnv(2, seed=0, params=CourseParams(**{field: value}))
        env = CourseEnv(2, seed=0)
        with pytest.raises(ValueError, match=field):
            env.generator.set_params(**{field: value})

    @pytest.mark.parametrize(("name", "value"), [("max_speed", 0.0), ("dt", float("nan"))])
    def test_bad_car_config(self, name, value):
        with pytest.raises(ValueError, match=name):
            CarConfig(**{name: value})

    def test_car_config_stores_plain_floats(self):
        config = CarConfig(
            dt=torch.tensor(0.05, dtype=torch.float64), max_speed=np.float32(3), accel=4
        )
        assert [type(getattr(config, n)) for n in ("dt", "max_speed", "accel")] == [float] * 3
        assert config == CarConfig(dt=0.05, max_speed=3.0, accel=4.0)

    def test_actions_clipped_and_nan_rejected(self):
        clipped, twin = CourseEnv(2, seed=0), CourseEnv(2, seed=0)
        outs = []
        for env, action in ((clipped, [[5.0, math.inf], [-9.0, -1.5]]), (twin, [[1, 1], [-1, -1]])):
            root = env.reset()
            root["action"] = torch.tensor(action, dtype=torch.float32)
            outs.append(env.step_and_maybe_reset(root)[0]["next"])
        assert (outs[0] == outs[1]).all()
        before = _env_state(clipped)
        root = clipped.observe()
        root["action"] = torch.tensor([[0.0, float("nan")], [0.0, 0.0]])
        with pytest.raises(ValueError, match="NaN"):
            clipped.step(root)
        _rows_equal(before, _env_state(clipped), slice(None))

    def test_construction_inside_capture_raises(self):
        wp.init()
        with wp.ScopedCapture(device="cpu", force_module_load=False):
            with pytest.raises(RuntimeError, match="outside"):
                CourseEnv(2, seed=0)


@pytest.fixture(scope="module")
def _shared_mask_env():
    return CourseEnv(N, seed=123, max_steps=4, params=CourseParams(scale=4.0))


@pytest.fixture
def mask_env(_shared_mask_env):
    return _shared_mask_env


def test_observe_matches_reset_keys():
    env = CourseEnv(2, seed=0)
    td = env.reset()
    assert isinstance(env.observe(), TensorDict)
    assert set(env.observe().keys()) == set(td.keys())


def test_user_masks_record_into_a_graph():
    eager, captured = CourseEnv(N, seed=5), CourseEnv(N, seed=5)
    regen, respawn = torch.zeros(N, dtype=torch.int32), torch.zeros(N, dtype=torch.int32)
    with wp.ScopedCapture(device="cpu", force_module_load=False) as capture:
        captured.regenerate(regen)
        captured.respawn(respawn)
    _rows_equal(_env_state(eager), _env_state(captured), slice(None))
    gen = torch.Generator().manual_seed(3)
    for _ in range(4):
        regen.copy_((torch.rand(N, generator=gen) < 0.3).to(torch.int32))
        respawn.copy_((torch.rand(N, generator=gen) < 0.3).to(torch.int32))
        wp.capture_launch(capture.graph)
        eager.regenerate(regen)
        eager.respawn(respawn)
        root = eager.observe()
        root["action"] = torch.full((N, 2), 0.9)
        eager.step_and_maybe_reset(root)
        root = captured.observe()
        root["action"] = torch.full((N, 2), 0.9)
        captured.step_and_maybe_reset(root)
    _rows_equal(_env_state(eager), _env_state(captured), slice(None))
    assert int(eager.generation.sum()) > 0


def test_runs_under_torchrl_transforms():
    from torchrl.envs import Compose, RewardSum, StepCounter

    base = CourseEnv(4, seed=13, max_steps=7)
    env = TransformedEnv(base, Compose(StepCounter(), RewardSum(), InitTracker()))
    check_env_specs(env)
    torch.manual_seed(1)
    data = env.rollout(16, break_when_any_done=False)
    done = data["next", "done"][..., 0]
    counts = data["next", "step_count"][..., 0]
    # step counts restart after every episode end and match the env's time limit
    assert bool((counts[done & data["next", "truncated"][..., 0]] == 7).all())
    assert torch.equal(data["is_init"][:, 1:, 0], done[:, :-1])
    episode = data["next", "episode_reward"][..., 0]
    rewards = data["next", "reward"][..., 0]
    assert torch.allclose(episode[:, 0], rewards[:, 0])


@settings(max_examples=40, deadline=None)
@given(data=st.data())
def test_constructor_refuses_random_bad_arguments(data):
    """One random bad argument at a time raises TypeError or ValueError (never anything else)."""
    bad = {
        **warp_env_arguments(),
        "num_points": bad_ints(16),
        "max_checkpoints": bad_ints(2),
        "num_rays": bad_ints(1),
        "laps": bad_ints(1),
        "crash": st.one_of(st.text(max_size=3), not_tensors()),
        "params": not_tensors().filter(lambda v: v is not None),
        "car": not_tensors().filter(lambda v: v is not None),
    }
    del bad["dtype"]  # CourseEnv is float32 only
    name = data.draw(st.sampled_from(sorted(bad)))
    kwargs = {"num_envs": 2, "seed": 0, name: data.draw(bad[name])}
    with pytest.raises((TypeError, ValueError), match=name):
        CourseEnv(**kwargs)


@functools.cache
def _fuzz_env() -> CourseEnv:
    return CourseEnv(3, seed=2, max_steps=5)


@settings(max_examples=40, deadline=None)
@given(data=st.data())
def test_set_params_refuses_random_bad_arguments(data):
    """One bad argument among good ones (in any order) raises and leaves the env unchanged."""
    env = _fuzz_env()
    values = {"scale": 11.0, "roughness": 0.2, "harmonics": 3, "width": 2.5}
    values["checkpoint_spacing"] = torch.tensor([4.0, 5.0, 6.0])
    slot = data.draw(st.sampled_from(["env_ids", "unknown", *values]))
    good_ids = st.sampled_from([None, [0, 2, 1], torch.tensor([1, 0, 2])])
    bad_ids = st.one_of(
        st.lists(st.integers(-3, 6), min_size=3, max_size=3).filter(
            lambda ids: any(not 0 <= i < 3 for i in ids) or len(set(ids)) < 3
        ),
        st.lists(st.floats(), min_size=3, max_size=3),
        st.sampled_from([torch.tensor([0.0, 1.0, 2.0]), torch.tensor([[0, 1, 2]]), "012", 1.0]),
    )
    env_ids = data.draw(bad_ids if slot == "env_ids" else good_ids)
    if slot == "unknown":
        values["wdth"] = 1.0
    elif slot in values:
        values[slot] = data.draw(
            st.sampled_from(
                [-1.0, math.nan, math.inf, True, "1", None, torch.ones(5), torch.tensor([1j])]
            )
        )
    order = data.draw(st.permutations(sorted(values)))
    before = env.state_dict()
    with pytest.raises((TypeError, ValueError)):
        env.generator.set_params(env_ids, **{name: values[name] for name in order})
    assert_state_unchanged(before, env)


class TestCarParams:
    """CarConfig reaches the kernels field by field, by name."""

    def test_car_config_fields_are_the_kernel_struct_fields(self):
        from dataclasses import fields

        from torchrl_ext.envs.course._kernels import car as kernels

        names = [f.name for f in fields(CarConfig)]
        for scalar in (wp.float32, wp.float64):
            struct = kernels.CAR_PARAMS[scalar]
            assert list(struct.vars) == names
            assert all(var.type is scalar for var in struct.vars.values())
        assert kernels.CarParams is kernels.CAR_PARAMS[wp.float32]  # what the kernels take

    def test_each_constant_lands_in_its_own_field(self):
        values = {"dt": 0.25, "accel": 3.0, "max_speed": 7.0, "crash_penalty": 2.0}
        env = CourseEnv(2, seed=0, car=CarConfig(**values))
        assert {name: getattr(env._car_params, name) for name in values} == values
