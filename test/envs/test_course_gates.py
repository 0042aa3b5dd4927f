"""Gates courses: the generator's gates, their contacts and validity, and CourseEnv's gates mode.

Oracles: a float64 rebuild of the posts from the centerline and a pure-Python segment-intersection
test of the bars (sharing no code with the kernels); hand-built square courses whose gate passes,
post hits and frames are computed by hand; a binomial test of the invalid fraction against the
rate measured on other seeds.
"""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
import torch
import warp as wp
from bad_arguments import assert_state_unchanged
from scipy import stats

from torchrl_ext.envs import CourseEnv
from torchrl_ext.envs.course import CourseDefect, CourseGenerator, CourseParams

wp.config.log_level = wp.LOG_WARNING

HALF = 2.0
SQUARE = [(0.0, 0.0), (10.0, 0.0), (10.0, 10.0), (0.0, 10.0)]
"""Gate centers of a hand-built square course of side 10 (counter-clockwise)."""
SQUARE_POSTS = [
    [(0.0, HALF), (0.0, -HALF)],  # gate 0 faces +x: left is +y
    [(10.0 - HALF, 0.0), (10.0 + HALF, 0.0)],  # gate 1 faces +y: left is -x
    [(10.0, 10.0 - HALF), (10.0, 10.0 + HALF)],  # gate 2 faces -x
    [(HALF, 10.0), (-HALF, 10.0)],  # gate 3 faces -y
]


# ----------------------------------------------------------------------------- oracles
def reference_posts(line: np.ndarray, spacing: float, gate_width: float) -> np.ndarray:
    """Posts of every gate, rebuilt in float64 from the centerline: ``[count, 2, 2]``."""
    edges = np.roll(line, -1, 0) - line
    lengths = np.linalg.norm(edges, axis=1)
    arc = np.concatenate([[0.0], np.cumsum(lengths)])
    count = math.ceil(arc[-1] / spacing)
    posts = []
    for j in range(count):
        s = j * arc[-1] / count
        i = int(np.searchsorted(arc, s, side="right") - 1)
        center = line[i] + (s - arc[i]) / lengths[i] * edges[i]
        tangent = edges[i] / lengths[i]
        normal = np.array([-tangent[1], tangent[0]])
        posts.append([center + gate_width / 2 * normal, center - gate_width / 2 * normal])
    return np.array(posts)


def bars_cross(posts: np.ndarray) -> bool:
    """Two bars cross at a point interior to both: the plain O(G^2) orientation test."""

    def orient(p, q, r):
        return (q[0] - p[0]) * (r[1] - p[1]) - (q[1] - p[1]) * (r[0] - p[0])

    for j in range(len(posts)):
        for k in range(j + 1, len(posts)):
            (a, b), (c, d) = posts[j], posts[k]
            if orient(a, b, c) * orient(a, b, d) < 0 and orient(c, d, a) * orient(c, d, b) < 0:
                return True
    return False


def square_generator(gen: CourseGenerator, env: int = 0) -> None:
    """Overwrite env ``env``'s gates with the hand-built square course (valid)."""
    views = gen.views
    corners = torch.tensor(SQUARE + SQUARE[:1])
    steps = torch.arange(gen.num_points // 4) / (gen.num_points // 4)
    sides = [a + steps[:, None] * (b - a) for a, b in itertools.pairwise(corners)]
    views["centerline"][env] = torch.cat(sides)
    views["checkpoints"][env].zero_()
    views["posts"][env].zero_()
    views["checkpoints"][env, :4] = torch.tensor(SQUARE)
    views["posts"][env, :4] = torch.tensor(SQUARE_POSTS)
    views["checkpoint_count"][env] = 4
    views["valid"][env] = 1
    views["defects"][env] = 0


# ----------------------------------------------------------------------------- generator
class TestGates:
    """Gate ``j`` is a bar of ``gate_width`` across the centerline at checkpoint ``j``, the gates
    evenly spaced along the lap; courses are the same as in track mode."""

    def test_circle_gate_posts_by_hand(self):
        """Roughness 0: a 64-gon of radius 10. Gate 0 sits on point 0 = (10, 0); its bar follows
        the normal of edge 0, which points at angle pi + pi/64."""
        params = CourseParams(roughness=0.0, gate_width=3.0)
        gen = CourseGenerator(1, params=params, mode="gates")
        angle = math.pi + math.pi / 64
        left = (10 + 1.5 * math.cos(angle), 1.5 * math.sin(angle))
        right = (10 - 1.5 * math.cos(angle), -1.5 * math.sin(angle))
        posts = gen.views["posts"][0, 0].double().numpy()
        np.testing.assert_allclose(posts, [left, right], atol=1e-5)
        perimeter = 64 * 2 * 10 * math.sin(math.pi / 64)
        assert gen.views["checkpoint_count"][0].item() == math.ceil(perimeter / 5.0) == 13
        gaps = np.diff(gen.views["checkpoints"][0, :13].double().numpy(), axis=0)
        assert np.ptp(np.linalg.norm(gaps, axis=1)) < 0.05  # evenly spaced, unlike track mode

    def test_courses_are_those_of_track_mode(self):
        track = CourseGenerator(20, seed=3)
        gates = CourseGenerator(20, seed=3, mode="gates")
        for name in ("centerline", "arc_length", "checkpoint_count", "coefficients"):
            assert torch.equal(track.views[name], gates.views[name]), name

    def test_posts_match_float64_reference(self):
        params = CourseParams(gate_width=5.0)
        gen = CourseGenerator(50, seed=11, params=params, mode="gates")
        for env in range(50):
            line = gen.views["centerline"][env].double().numpy()
            expected = reference_posts(line, 5.0, 5.0)
            count = gen.views["checkpoint_count"][env].item()
            assert count == len(expected)
            got = gen.views["posts"][env, :count].double().numpy()
            np.testing.assert_allclose(got, expected, atol=2e-4)
            assert not gen.views["posts"][env, count:].any()

    def test_crossing_matches_pure_python_reference(self):
        """Wide gates on small courses: the defect bit equals the reference test, course by
        course, on bars the reference rebuilt itself."""
        params = CourseParams(scale=5.0, gate_width=6.0)
        gen = CourseGenerator(300, seed=0, params=params, mode="gates")
        lines = gen.views["centerline"].double().numpy()
        expected = np.array([bars_cross(reference_posts(line, 5.0, 6.0)) for line in lines])
        flagged = (gen.views["defects"] & CourseDefect.CROSSING_GATES).bool().numpy()
        assert 10 < expected.sum() < 290
        np.testing.assert_array_equal(flagged, expected)
        assert torch.equal(gen.views["valid"].bool(), gen.views["defects"] == 0)

    @pytest.mark.parametrize(
        ("scale", "gate_width", "rate"),
        [(5.0, 6.0, 0.1150), (10.0, 10.0, 0.4164), (20.0, 16.0, 0.3918)],
    )
    def test_invalid_fraction_against_measured_rate(self, scale, gate_width, rate):
        """2,000 courses of seeds 100,000+ against the rate measured on seeds 0-9,999
        (``benchmarks/gates_invalid_fraction.py``): a binomial test at p > 0.01."""
        params = CourseParams(scale=scale, gate_width=gate_width)
        gen = CourseGenerator(2000, seed=100_000, params=params, mode="gates")
        invalid = int((gen.views["valid"] == 0).sum())
        assert stats.binomtest(invalid, 2000, rate).pvalue > 0.01, invalid

    def test_invalid_fraction_grows_with_gate_width(self):
        gen = CourseGenerator(500, seed=1, mode="gates")
        fractions = []
        for width in (2.0, 6.0, 9.0, 12.0):
            gen.set_params(gate_width=width)
            gen.regenerate(advance=False)
            fractions.append(float((gen.views["valid"] == 0).double().mean()))
        assert fractions[0] == 0.0 and fractions == sorted(fractions) and fractions[-1] > 0.5

    def test_track_mode_ignores_gates_and_gates_mode_ignores_width(self):
        params = CourseParams(roughness=0.0, width=25.0, gate_width=30.0)
        track = CourseGenerator(1, params=params)
        gates = CourseGenerator(1, params=params, mode="gates")
        assert track.views["defects"].item() == CourseDefect.TIGHT_TURN
        assert gates.views["defects"].item() == CourseDefect.CROSSING_GATES

    @pytest.mark.parametrize("value", [0.0, -1.0, float("nan"), float("inf")])
    def test_bad_gate_width_written_directly_is_flagged(self, value):
        gen = CourseGenerator(3, seed=0, mode="gates")
        gen.views["param_gate_width"][1] = value
        gen.regenerate()
        assert gen.views["valid"].tolist() == [1, 0, 1]
        assert gen.views["defects"][1].item() & CourseDefect.BAD_PARAMS

    def test_zero_gate_width_refused(self):
        with pytest.raises(ValueError, match="gate_width"):
            CourseParams(gate_width=0.0)
        gen = CourseGenerator(3, seed=0, mode="gates")
        before = {k: v.clone() for k, v in gen.views.items()}
        with pytest.raises(ValueError, match="gate_width"):
            gen.set_params(gate_width=torch.tensor([1.0, 0.0, 2.0]))
        with pytest.raises(ValueError, match="gate_width"):
            gen.set_params([0, 1], width=3.0, gate_width=torch.tensor([1.0, -2.0]))
        for key, value in gen.views.items():
            assert torch.equal(value, before[key]), key

    def test_bad_mode(self):
        with pytest.raises(ValueError, match="mode"):
            CourseGenerator(2, mode="rings")
        with pytest.raises(TypeError, match="mode"):
            CourseGenerator(2, mode=1)


class TestContacts:
    """``frame`` and ``hit_posts`` on the hand-built square course."""

    @pytest.fixture
    def gen(self):
        gen = CourseGenerator(1, mode="gates")
        square_generator(gen)
        return gen

    @pytest.mark.parametrize(
        ("point", "progress", "lateral"),
        [
            ((5.0, 1.0), 5.0, 1.0),
            ((11.0, 5.0), 15.0, -1.0),
            ((4.0, 10.5), 26.0, -0.5),
            ((-0.5, 3.0), 37.0, -0.5),
        ],
    )
    def test_frame_by_hand(self, gen, point, progress, lateral):
        frame = gen.frame(torch.tensor([point]))
        np.testing.assert_allclose(frame[0].numpy(), [progress, lateral], atol=1e-5)

    @pytest.mark.parametrize(
        ("point", "hit"),
        [((0.0, 2.25), 1), ((0.0, 2.35), 0), ((10.2, 10.0 + 2.1), 1), ((5.0, 5.0), 0)],
    )
    def test_hit_posts_by_hand(self, gen, point, hit):
        assert gen.hit_posts(torch.tensor([point]), collision=0.3).tolist() == [hit]

    @pytest.mark.parametrize(
        ("kwargs", "error", "match"),
        [
            ({"positions": torch.zeros(1, 2, dtype=torch.float64)}, TypeError, "positions"),
            ({"positions": torch.zeros(2, 2)}, ValueError, "positions"),
            ({"positions": [[0.0, 0.0]]}, TypeError, "positions"),
            ({"collision": 0.0}, ValueError, "collision"),
            ({"collision": float("nan")}, ValueError, "collision"),
            ({"collision": "0.3"}, TypeError, "collision"),
        ],
    )
    def test_bad_arguments(self, gen, kwargs, error, match):
        args = {"positions": torch.zeros(1, 2), "collision": 0.3, **kwargs}
        with pytest.raises(error, match=match):
            gen.hit_posts(**args)
        if "collision" not in kwargs:
            with pytest.raises(error, match=match):
                gen.frame(args["positions"])


class TestGeneratorApi:
    """``generate(seeds=...)`` and ``reset_epoch()``."""

    def test_generate_equals_fresh_generators(self):
        gen = CourseGenerator(3, seed=0, mode="gates")
        gen.generate(seeds=torch.tensor([5, 9, 5]), epochs=torch.tensor([0, 0, 2]))
        assert gen.views["generation"].tolist() == [0, 0, 2]
        fresh = CourseGenerator(1, seed=9, mode="gates")
        assert torch.equal(gen.views["posts"][1], fresh.views["posts"][0])
        fresh.generate(seeds=5, epochs=2)
        assert torch.equal(gen.views["centerline"][2], fresh.views["centerline"][0])

    @pytest.mark.parametrize("query", ["frame", "hit_posts"])
    @pytest.mark.parametrize("bad", [math.nan, math.inf])
    def test_non_finite_positions_are_refused(self, query, bad):
        gen = CourseGenerator(2, seed=1, mode="gates")
        positions = gen.views["checkpoints"][:, 0].clone()
        positions[1, 0] = bad
        args = (positions, 0.5) if query == "hit_posts" else (positions,)
        with pytest.raises(ValueError, match=f"positions.*{bad}"):
            getattr(gen, query)(*args)

    def test_reset_epoch_restores_first_courses(self):
        gen = CourseGenerator(4, seed=2, mode="gates")
        first = {k: v.clone() for k, v in gen.views.items()}
        gen.regenerate()
        gen.regenerate(torch.tensor([1, 0, 1, 0], dtype=torch.int32))
        gen.reset_epoch(torch.tensor([0, 0, 1, 1], dtype=torch.int32))
        assert gen.views["epoch"].tolist() == [2, 1, 0, 0]
        assert torch.equal(gen.views["posts"][2:], first["posts"][2:])
        gen.reset_epoch()
        for key, value in gen.views.items():
            assert torch.equal(value, first[key]), key

    @pytest.mark.parametrize(
        ("kwargs", "error", "match"),
        [
            ({"seeds": 1.5}, TypeError, "seed"),
            ({"seeds": torch.zeros(2, dtype=torch.int64)}, ValueError, "seed"),
            ({"seeds": 0, "epochs": -1}, ValueError, "epochs"),
            ({"seeds": 0, "epochs": torch.tensor([0.0, 1.0, 2.0])}, TypeError, "epochs"),
            ({"seeds": 0, "epochs": torch.zeros(2, dtype=torch.int64)}, ValueError, "epochs"),
        ],
    )
    def test_generate_refuses_bad_arguments_before_writing(self, kwargs, error, match):
        gen = CourseGenerator(3, seed=0)
        before = {k: v.clone() for k, v in gen.views.items()}
        with pytest.raises(error, match=match):
            gen.generate(**kwargs)
        for key, value in gen.views.items():
            assert torch.equal(value, before[key]), key


# ----------------------------------------------------------------------------- env
def square_env(**kwargs) -> CourseEnv:
    """A one-env gates CourseEnv on the hand-built square course, car at gate 0, at rest."""
    env = CourseEnv(1, seed=0, mode="gates", max_steps=None, **kwargs)
    square_generator(env.generator)
    env.respawn()
    return env


def place(env: CourseEnv, x: float, y: float, heading: float, speed: float, passed: int) -> None:
    env.pose[0] = torch.tensor([x, y, heading, speed])
    env.counters[0, 0] = passed
    env.progress[0, 0] = env.generator.frame(env.pose[:, :2].contiguous())[0, 0]


def coast(env: CourseEnv):
    """One plain step with no steering and no throttle; returns the ``next`` entries."""
    td = env.observe()
    td["action"] = torch.zeros(1, 2)
    return env.step(td)["next"]


class TestGatesEnv:
    """CourseEnv(mode="gates"): the next gate in order pays 1, a post crashes, a lap regenerates."""

    def test_respawn_at_gate_zero_and_observation(self):
        env = square_env()
        assert env.pose[0].tolist() == [0.0, 0.0, 0.0, 0.0]
        obs = env.observe()["observation"][0]
        # next gate 1: posts (8, 0) and (12, 0) straight ahead, 10 away
        np.testing.assert_allclose(obs.numpy(), [0, 0, 0, 8, 0, 12, 0, 10], atol=1e-6)

    def test_passing_the_next_gate(self):
        env = square_env()
        place(env, 10.0, -0.2, math.pi / 2, 3.0, passed=0)
        out = coast(env)
        y = -0.2 + 0.95 * 3.0 * 0.1  # speed decays by drag * dt before the move
        assert out["checkpoints_passed"].item() == 1 and env.counters[0, 0].item() == 1
        assert out["reward"].item() == pytest.approx(1 + 0.1 * y, abs=1e-5)
        assert not out["done"].item() and not out["out_of_bounds"].item()

    def test_passing_a_gate_out_of_order_counts_nothing(self):
        env = square_env()
        place(env, 10.2, 10.0, math.pi, 3.0, passed=0)  # through gate 2, next is gate 1
        out = coast(env)
        assert out["checkpoints_passed"].item() == 0 and env.counters[0, 0].item() == 0
        assert out["reward"].item() == pytest.approx(0.1 * 0.085, abs=1e-5)

    def test_passing_backwards_counts_nothing(self):
        env = square_env()
        place(env, 10.0, 0.2, -math.pi / 2, 3.0, passed=0)
        assert coast(env)["checkpoints_passed"].item() == 0

    def test_beside_the_bar_counts_nothing(self):
        env = square_env()
        place(env, 13.0, -0.2, math.pi / 2, 3.0, passed=0)
        assert coast(env)["checkpoints_passed"].item() == 0

    def test_gates_in_order_make_a_lap(self):
        env = square_env()
        moves = [(10.0, -0.2, math.pi / 2), (10.2, 10.0, math.pi), (0.0, 10.2, -math.pi / 2)]
        for passed, (x, y, heading) in enumerate(moves):
            place(env, x, y, heading, 3.0, passed=passed)
            out = coast(env)
            assert out["checkpoints_passed"].item() == 1 and not out["done"].item()
        place(env, -0.2, 0.0, 0.0, 3.0, passed=3)
        out = coast(env)
        assert out["checkpoints_passed"].item() == 1 and out["laps"].item() == 1
        assert out["terminated"].item() and env.counters[0, 4].item() == 2  # a new course

    def test_progress_wraps_across_the_start(self):
        """Past gate 0 the arc position falls from near the lap length (40) to near 0; the travel
        grows by that change wrapped by the lap length of the gates' polyline."""
        env = square_env()
        place(env, 0.0, 0.1, -math.pi / 4, 3.0, passed=3)  # arc position 39.9, on side 3
        assert env.progress[0, 0].item() == pytest.approx(39.9, abs=1e-5)
        out = coast(env)
        x = 0.95 * 3.0 * 0.1 * math.cos(math.pi / 4)  # the new point projects on side 0 at x
        assert env.progress[0, 0].item() == pytest.approx(x, abs=1e-5)
        assert env.progress[0, 2].item() == pytest.approx(x + 0.1, abs=1e-5)  # x - 39.9 + 40
        assert out["reward"].item() == pytest.approx(0.1 * (x + 0.1), abs=1e-5)
        assert out["checkpoints_passed"].item() == 0 and not out["done"].item()

    def test_hitting_a_post_crashes(self):
        env = square_env()
        place(env, 7.8, -0.2, math.pi / 2, 3.0, passed=0)  # passes 0.2 from post (8, 0)
        out = coast(env)
        assert out["out_of_bounds"].item() and out["terminated"].item()
        assert out["checkpoints_passed"].item() == 0  # beside the bar
        assert out["reward"].item() == pytest.approx(-1.0, abs=1e-5)
        assert env.counters[0, 4].item() == 1  # a respawn on the same course

    def test_posts_are_discs_of_radius_collision(self):
        env = square_env(collision=0.6)
        place(env, 7.45, -0.2, math.pi / 2, 3.0, passed=0)
        assert coast(env)["out_of_bounds"].item()
        env = square_env(collision=0.5)
        place(env, 7.45, -0.2, math.pi / 2, 3.0, passed=0)
        assert not coast(env)["out_of_bounds"].item()

    def test_invalid_gates_course_is_gated_to_zero(self):
        env = CourseEnv(2, seed=0, mode="gates", params=CourseParams(gate_width=40.0))
        assert env.valid.tolist() == [0, 0]
        td = env.reset()
        td["action"] = torch.ones(2, 2)
        out = env.step(td)["next"]
        assert not out["observation"].any() and not out["reward"].any()
        assert out["terminated"].all() and not out["valid"].any()

    def test_full_throttle_passes_gates_and_regenerates(self):
        env = CourseEnv(16, seed=3, mode="gates", max_steps=30)
        root, passed, done = env.reset(), 0, 0
        for _ in range(40):
            root["action"] = torch.tensor([[0.0, 1.0]]).expand(16, 2).contiguous()
            td, root = env.step_and_maybe_reset(root)
            passed += int(td["next", "checkpoints_passed"].sum())
            done += int(td["next", "done"].sum())
        assert passed > 0 and done > 0 and int(env.generation.sum()) > 0

    def test_captured_equals_eager(self):
        gen = torch.Generator().manual_seed(4)
        actions = torch.rand(40, 8, 2, generator=gen) * 2.4 - 1.2
        kwargs = {"seed": 7, "max_steps": 15, "mode": "gates", "params": CourseParams(scale=5.0)}
        outs = []
        envs = [CourseEnv(8, **kwargs), CourseEnv(8, capture=True, **kwargs)]
        for env in envs:
            root, steps = env.reset(), []
            for t, action in enumerate(actions):
                env.inputs["regen_mask"].copy_((torch.arange(8) == t % 11).int())
                env.inputs["reset_mask"].copy_((torch.arange(8) == t % 7).int())
                root["action"] = action
                td, root = env.step_and_maybe_reset(root)
                steps.append(td["next"].clone())
            outs.append(torch.stack(steps))
        assert envs[1]._launcher.graphs
        for key in outs[0].keys(True, True):
            assert torch.equal(outs[0][key], outs[1][key]), key
        for key, value in envs[0].state_dict().items():
            assert torch.equal(value, envs[1].state_dict()[key]), key
        assert bool(outs[0]["done"].any()) and int(envs[0].generation.sum()) > 0

    def test_state_dict_round_trip(self):
        kwargs = {"seed": 2, "max_steps": 20, "mode": "gates", "collision": 0.4}
        env = CourseEnv(6, **kwargs)
        env.inputs["reset_mask"][4] = 1
        actions = torch.rand(50, 6, 2, generator=torch.Generator().manual_seed(0)) * 2 - 1
        root = env.reset()
        for action in actions[:20]:
            root["action"] = action
            _, root = env.step_and_maybe_reset(root)
        saved, saved_root = env.state_dict(), root.clone()
        assert saved["inputs.reset_mask"].tolist() == [0, 0, 0, 0, 1, 0]
        assert "course.posts" in saved and "course.gate_width" in saved
        copy = CourseEnv(6, **{**kwargs, "seed": 99})
        copy.load_state_dict(saved)
        runs = []
        for which, start in ((env, root), (copy, saved_root)):
            out = []
            for action in actions[20:]:
                start["action"] = action
                td, start = which.step_and_maybe_reset(start)
                out.append(td["next"].clone())
            runs.append(torch.stack(out))
        for key in runs[0].keys(True, True):
            assert torch.equal(runs[0][key], runs[1][key]), key
        for key, value in env.state_dict().items():
            assert torch.equal(value, copy.state_dict()[key]), key


class TestInputs:
    """``inputs["regen_mask"]`` and ``inputs["reset_mask"]``: stable, zeroed, read by each step,
    never cleared; a recorded step graph is driven by writing into them alone."""

    @pytest.mark.parametrize("mode", ["track", "gates"])
    def test_stable_zeroed_and_never_cleared(self, mode):
        env = CourseEnv(4, seed=0, mode=mode)
        pointers = {k: v.data_ptr() for k, v in env.inputs.items()}
        assert all(v.dtype == torch.int32 and v.shape == (4,) for v in env.inputs.values())
        assert not any(v.any() for v in env.inputs.values())
        env.inputs["regen_mask"][2] = 1
        env.inputs["reset_mask"][0] = 5
        env.rollout(3, break_when_any_done=False)
        env.reset()
        assert {k: v.data_ptr() for k, v in env.inputs.items()} == pointers
        assert env.inputs["regen_mask"].tolist() == [0, 0, 1, 0]
        assert env.inputs["reset_mask"].tolist() == [5, 0, 0, 0]

    def test_requests_truncate_and_choose_the_course(self):
        env = CourseEnv(3, seed=0, mode="gates")
        root = env.reset()
        env.inputs["regen_mask"][1] = 1
        env.inputs["reset_mask"][2] = 1
        root["action"] = torch.ones(3, 2)
        td, root = env.step_and_maybe_reset(root)
        assert td["next", "truncated"].flatten().tolist() == [False, True, True]
        assert td["next", "done"].flatten().tolist() == [False, True, True]
        assert env.generation.tolist() == [0, 1, 0]
        assert env.buffers["steps"].numpy().tolist() == [1, 0, 0]

    def test_plain_step_then_reset_follows_the_requests(self):
        env = CourseEnv(3, seed=0)
        td = env.reset()
        env.inputs["regen_mask"][0] = 1
        env.inputs["reset_mask"][1] = 1
        td["action"] = torch.zeros(3, 2)
        nxt = env.step(td)["next"]
        assert nxt["truncated"].flatten().tolist() == [True, True, False]
        assert env.generation.tolist() == [0, 0, 0]  # a plain step resets nothing
        env.reset(nxt.clone().set("_reset", nxt["done"].clone()))
        assert env.generation.tolist() == [1, 0, 0]

    @pytest.mark.parametrize("mode", ["track", "gates"])
    def test_recorded_graph_is_driven_by_the_inputs(self, mode):
        """Capture the fused step in a Warp graph, then only write into the inputs and replay;
        an eager env given the same inputs steps bitwise alike."""
        kwargs = {"seed": 5, "mode": mode, "max_steps": None}
        eager, captured = CourseEnv(6, **kwargs), CourseEnv(6, **kwargs)
        for env in (eager, captured):
            env.reset()
            env.buffers["action"].numpy()[:] = 0.7  # the fused step reads the action buffer
        with wp.ScopedCapture(device="cpu", force_module_load=False) as capture:
            for cmd in captured._launcher.commands_of("step_autoreset"):
                cmd.launch()
        gen = torch.Generator().manual_seed(1)
        for _ in range(12):
            regen = (torch.rand(6, generator=gen) < 0.3).int()
            reset = (torch.rand(6, generator=gen) < 0.3).int()
            for env in (eager, captured):
                env.inputs["regen_mask"].copy_(regen)
                env.inputs["reset_mask"].copy_(reset)
            wp.capture_launch(capture.graph)
            eager._launcher.run("step_autoreset")
            for key, value in eager.state_dict().items():
                assert torch.equal(value, captured.state_dict()[key]), key
        assert int(captured.generation.sum()) > 0

    def test_respawn_without_mask_and_reset_epoch(self):
        env = CourseEnv(3, seed=1, mode="gates")
        first = env.generator.views["posts"].clone()
        env.rollout(5, break_when_any_done=False)
        env.respawn()
        assert env.buffers["steps"].numpy().tolist() == [0, 0, 0]
        assert torch.equal(env.pose[:, :2], env.generator.views["checkpoints"][:, 0])
        env.regenerate()
        env.reset_epoch(torch.tensor([0, 1, 0], dtype=torch.int32))
        assert env.generation.tolist() == [1, 0, 1]
        env.reset_epoch()
        assert env.generation.tolist() == [0, 0, 0]
        assert torch.equal(env.generator.views["posts"], first)


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"mode": "rings"}, ValueError, "mode"),
        ({"mode": None}, TypeError, "mode"),
        ({"mode": "gates", "collision": 0.0}, ValueError, "collision"),
        ({"mode": "gates", "collision": -1.0}, ValueError, "collision"),
        ({"mode": "gates", "collision": float("inf")}, ValueError, "collision"),
        ({"mode": "gates", "collision": "0.3"}, TypeError, "collision"),
    ],
)
def test_bad_env_arguments(kwargs, error, match):
    with pytest.raises(error, match=match):
        CourseEnv(2, seed=0, **kwargs)


def test_env_gate_width_refused_before_any_write():
    env = CourseEnv(3, seed=0, mode="gates")
    before = env.state_dict()
    with pytest.raises(ValueError, match="gate_width"):
        env.generator.set_params(gate_width=torch.tensor([2.0, 0.0, 2.0]))
    assert_state_unchanged(before, env)
    with pytest.raises(ValueError, match="gate_width"):
        CourseEnv(3, seed=0, mode="gates", params=CourseParams(gate_width=0))
