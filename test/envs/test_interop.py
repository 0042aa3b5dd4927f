"""torch.cuda.graph interop and the sync-free step path of the Warp envs."""

from __future__ import annotations

import collections
import contextlib
import traceback

import pytest
import torch
import warp as wp
from conftest import _cuda_ready

from torchrl_ext.envs import CartPoleEnv, CourseEnv, PendulumEnv, interop
from torchrl_ext.envs.course import CourseParams

needs_cuda = pytest.mark.skipif(not _cuda_ready(), reason="needs CUDA")

# every way Python code reads a tensor's or a Warp array's values back to the host
_TENSOR_READS = ("item", "__bool__", "__int__", "__float__", "__index__", "tolist", "cpu", "numpy")


@contextlib.contextmanager
def host_reads():
    """Count calls that read device values on the host, by (method, calling line)."""
    calls = collections.Counter()
    saved = {name: getattr(torch.Tensor, name) for name in _TENSOR_READS}
    saved_numpy = wp.array.numpy

    def counted(name, method):
        def wrapper(self, *args, **kwargs):
            calls[(name, traceback.format_stack(limit=2)[0].strip())] += 1
            return method(self, *args, **kwargs)

        return wrapper

    for name, method in saved.items():
        setattr(torch.Tensor, name, counted(name, method))
    wp.array.numpy = counted("wp.array.numpy", saved_numpy)
    try:
        yield calls
    finally:
        for name, method in saved.items():
            setattr(torch.Tensor, name, method)
        wp.array.numpy = saved_numpy


def _envs(device="cpu", **kwargs):
    course = dict(max_steps=4, params=CourseParams())
    return [
        CartPoleEnv(8, device, seed=3, max_steps=4, **kwargs),
        CourseEnv(8, device, seed=3, **course, **kwargs),
        CourseEnv(8, device, seed=3, crash="regenerate", **course, **kwargs),
    ]


def _run_steps(env, steps=10):
    """Fused steps with random actions; returns every step's TensorDict (finals and roots)."""
    out = []
    root = env.reset()
    for _ in range(steps):
        env.rand_action(root)
        td, root = env.step_and_maybe_reset(root)
        out.append((td.clone(), root.clone()))
    return out


class TestHostCounter:
    """The counter sees every kind of host read (so a zero below means none happened)."""

    def test_counts_each_read(self):
        t = torch.ones(3)
        with host_reads() as calls:
            bool(t.any())
            t.sum().item()
            int(t[0])
            t.tolist()
            t.cpu()
            t.numpy()
            wp.zeros(2, device="cpu").numpy()
        assert sum(calls.values()) == 7


class TestSyncFreeStep:
    """With ``sync_free`` the step path reads nothing on the host and outputs are bitwise equal.

    On the CPU the same Python code runs as on CUDA, so counting calls here checks the CUDA path.
    """

    @pytest.mark.parametrize("capture", [False, True])
    def test_no_host_read_in_steps(self, capture):
        for env in _envs(capture=capture):
            env.sync_free = True
            _run_steps(env, 2)  # records launches and graphs first
            root = env.reset()
            with host_reads() as calls:
                for _ in range(9):  # max_steps=4: auto-resets and course regenerations
                    env.rand_action(root)
                    _, root = env.step_and_maybe_reset(root)
                env.step(env.rand_action(root))
            assert not calls, (type(env).__name__, dict(calls))
            if isinstance(env, CourseEnv):
                assert int(env.generation.max()) >= 1  # masked regenerations ran

    def test_no_host_read_in_rollout(self):
        for env in _envs():
            env.sync_free = True
            env.rollout(2, break_when_any_done=False)
            with host_reads() as calls:
                env.rollout(9, break_when_any_done=False)
            assert not calls, (type(env).__name__, dict(calls))

    def test_default_cpu_path_reads(self):
        # the CPU default keeps eager checks: the counter does see the reads it removes
        env = CourseEnv(4, seed=0, max_steps=3)
        assert env.sync_free is False
        root = env.reset()
        with host_reads() as calls:
            for _ in range(4):
                env.rand_action(root)
                _, root = env.step_and_maybe_reset(root)
        assert sum(calls.values()) > 0

    @pytest.mark.parametrize("capture", [False, True])
    def test_outputs_bitwise_equal(self, capture):
        for eager, free in zip(_envs(capture=capture), _envs(capture=capture), strict=True):
            free.sync_free = True
            torch.manual_seed(5)
            a = _run_steps(eager, 12)
            torch.manual_seed(5)
            b = _run_steps(free, 12)
            for (td_a, root_a), (td_b, root_b) in zip(a, b, strict=True):
                assert (td_a == td_b).all() and (root_a == root_b).all()
            for key, val in eager.state_dict().items():
                assert torch.equal(val, free.state_dict()[key]), key

    def test_rollout_bitwise_equal(self):
        for eager, free in zip(_envs(), _envs(), strict=True):
            free.sync_free = True
            torch.manual_seed(1)
            a = eager.rollout(10, break_when_any_done=False)
            torch.manual_seed(1)
            b = free.rollout(10, break_when_any_done=False)
            assert (a == b).all()

    def test_carried_entries_zeroed_like_torchrl(self):
        # a partial reset zeroes the carried entries of the reset envs only, as the eager path
        env = CartPoleEnv(4, seed=0, max_steps=2)
        env.sync_free = True
        root = env.reset()
        root["policy_state"] = torch.ones(4, 3)
        env.rand_action(root)
        _, root = env.step_and_maybe_reset(root)
        assert root["policy_state"].eq(1).all()  # nobody reset: kept
        root["action"] = torch.zeros(4, dtype=torch.int64)
        _, root = env.step_and_maybe_reset(root)  # everybody truncates: kept, as in TorchRL
        assert root["policy_state"].eq(1).all()


class TestDeferredActionChecks:
    """Bad actions raise in the step on the eager path, and in ``check_actions`` when sync-free."""

    @pytest.mark.parametrize(
        ("make", "bad"),
        [
            (lambda: CartPoleEnv(3, seed=0), torch.tensor([0, 2, 1])),
            (lambda: PendulumEnv(3, seed=0), torch.tensor([[0.0], [float("nan")], [1.0]])),
            (lambda: CourseEnv(3, seed=0), torch.tensor([[0.0, 0.0], [0.0, float("nan")]] * 2)[:3]),
        ],
    )
    def test_bad_action(self, make, bad):
        eager, free = make(), make()
        free.sync_free = True
        td = eager.reset()
        td["action"] = bad
        with pytest.raises(ValueError, match="action"):
            eager.step(td)
        free.reset()
        assert not bool(free.action_fault)
        free.step(td)  # no raise: the check stays on the device
        assert bool(free.action_fault)
        with pytest.raises(ValueError, match="check_actions"):
            free.check_actions()
        assert not bool(free.action_fault)  # cleared
        free.check_actions()

    def test_good_actions_leave_no_fault(self):
        env = CourseEnv(4, seed=0)
        env.sync_free = True
        _run_steps(env, 5)
        env.check_actions()
        assert not bool(env.action_fault)

    def test_sync_free_must_be_bool(self):
        env = CartPoleEnv(2, seed=0)
        with pytest.raises(TypeError, match="sync_free"):
            env.sync_free = 1
        assert env.sync_free is False


class TestRegistered:
    """``registered`` refuses to run outside a torch capture and checks its arguments first."""

    def test_outside_capture(self):
        with pytest.raises(RuntimeError, match=r"torch\.cuda\.graph"):
            with interop.registered():
                pass
        assert interop.active(wp.get_device("cpu")) is None

    @pytest.mark.parametrize("mode", interop.CAPTURE_MODES)
    def test_capture_modes_accepted(self, mode):
        # a valid mode passes the argument checks and reaches the capture check
        with pytest.raises(RuntimeError, match="capture"):
            with interop.registered(capture_mode=mode):
                pass

    def test_bad_arguments(self):
        with pytest.raises(ValueError, match="capture_mode"):
            with interop.registered(capture_mode="strict"):
                pass
        with pytest.raises(TypeError, match="capture_mode"):
            with interop.registered(capture_mode=1):
                pass
        with pytest.raises(TypeError, match="conditional"):
            with interop.registered(conditional=1):
                pass

    def test_capture_modes_match_torch_and_warp(self):
        assert interop.CAPTURE_MODES == ("global", "thread_local", "relaxed")
        values = [int(interop._WARP_MODES[m]) for m in interop.CAPTURE_MODES]
        assert values == [0, 1, 2]  # cudaStreamCaptureMode{Global, ThreadLocal, Relaxed}


class TestRetain:
    def test_bad_arguments(self):
        with pytest.raises(TypeError, match="CUDAGraph"):
            interop.retain(object(), CartPoleEnv(2, seed=0))

    @needs_cuda
    def test_env_lives_with_graph(self):
        import gc
        import weakref

        env = CartPoleEnv(2, "cuda", seed=0)
        ref = weakref.ref(env)
        g = torch.cuda.CUDAGraph()
        with pytest.raises(ValueError, match="retain"):
            interop.retain(g)
        interop.retain(g, env)
        del env
        gc.collect()
        assert ref() is not None
        del g
        gc.collect()
        assert ref() is None


def _record(env, root, conditional, mode="global"):
    """Record one fused step of ``env`` into a torch CUDA graph; returns (graph, td, root)."""
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g, stream=stream, capture_error_mode=mode):
        with interop.registered(conditional=conditional, capture_mode=mode) as registration:
            td, next_root = env.step_and_maybe_reset(root)
    interop.retain(g, env, registration)
    return g, td, next_root


@needs_cuda
class TestTorchGraphCUDA:
    """A course step recorded inside torch's capture replays bitwise equal to eager steps."""

    @pytest.mark.parametrize("conditional", [False, True])
    @pytest.mark.parametrize("mode", interop.CAPTURE_MODES)
    def test_replay_equals_eager(self, conditional, mode):
        if conditional and not wp.is_conditional_graph_supported():
            pytest.skip("needs CUDA conditional graph nodes (driver and toolkit 12.4+)")
        recorded, eager = (CourseEnv(64, "cuda", seed=7, max_steps=5) for _ in range(2))
        actions = torch.rand(12, 64, 2, device="cuda", generator=None) * 2 - 1
        static = recorded.reset()
        static["action"] = actions[0].clone()
        # warm up on a side stream (loads kernels), then restore the start state
        start = recorded.state_dict()
        recorded.step_and_maybe_reset(static.clone())
        recorded.load_state_dict(start)
        g, td, root = _record(recorded, static, conditional, mode)
        recorded.load_state_dict(start)  # the capture ran nothing
        eager_root = eager.reset()
        for t in range(12):
            static["action"].copy_(actions[t])
            eager_root["action"] = actions[t]
            g.replay()
            eager_td, eager_root = eager.step_and_maybe_reset(eager_root)
            torch.cuda.synchronize()
            for key in ("observation", "reward", "done", "terminated", "truncated", "valid"):
                assert torch.equal(td["next", key], eager_td["next", key]), (t, key)
            assert torch.equal(root["observation"], eager_root["observation"]), t
        assert torch.equal(recorded.generation, eager.generation)
        assert int(eager.generation.max()) >= 1  # regenerations happened in the replays

    def test_conditional_node_skips_empty_mask(self):
        if not wp.is_conditional_graph_supported():
            pytest.skip("needs CUDA conditional graph nodes (driver and toolkit 12.4+)")
        env = CourseEnv(16, "cuda", seed=0)
        mask = torch.zeros(16, dtype=torch.int32, device="cuda")
        env.regenerate(mask)  # load the kernels
        before = {k: v.clone() for k, v in env.generator.views.items()}
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g, stream=stream):
            with interop.registered(conditional=True) as registration:
                env.generator.regenerate(env.generator.check_mask(mask))
        interop.retain(g, env, registration, mask)
        g.replay()
        torch.cuda.synchronize()
        for key, val in env.generator.views.items():
            assert torch.equal(val, before[key]), key  # skipped: nothing rewritten
        mask[3] = 1
        g.replay()
        torch.cuda.synchronize()
        assert env.generation.tolist() == [0] * 3 + [1] + [0] * 12

    def test_sync_free_default_on_cuda(self):
        assert CartPoleEnv(2, "cuda", seed=0).sync_free is True
