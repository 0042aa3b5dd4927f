import copy
import functools
import pickle
import subprocess
import sys

import pytest
import torch
import warp as wp
from bad_arguments import DTYPES, assert_state_unchanged, bad_ints, not_tensors, tensors
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from scipy import stats
from tensordict import TensorDict
from tensordict.nn import TensorDictModule, TensorDictSequential
from torchrl.collectors import Collector
from torchrl.data import Bounded, Categorical, Composite, Unbounded
from torchrl.envs import (
    Compose,
    EnvBase,
    InitTracker,
    RewardSum,
    StepCounter,
    TransformedEnv,
)
from torchrl.envs.utils import check_env_specs
from torchrl.modules import LSTMModule

from torchrl_ext.envs import CartPoleEnv, CourseEnv, CourseGenerator, PendulumEnv, WarpEnv, warp_env
from torchrl_ext.envs._base import fused
from torchrl_ext.envs._kernels.common import (
    begin_episode,
    count_step,
    make_struct,
    pack_params,
    param_structs,
)
from torchrl_ext.envs.popgym import (
    BattleshipEnv,
    ConcentrationEnv,
    MineSweeperEnv,
    RepeatPreviousEnv,
)
from torchrl_ext.envs.warp_env import stream_key, uniform_range

N = 12


@wp.kernel
def _countdown_reset(
    left: wp.array(dtype=wp.int32),
    mask: wp.array(dtype=wp.int32),
    seed: wp.array(dtype=wp.uint32),
    steps: wp.array(dtype=wp.int32),
    episode: wp.array(dtype=wp.int32),
    obs: wp.array(dtype=float),
    valid: wp.array(dtype=wp.bool),
):
    i = wp.tid()
    if mask[i] != 0:
        key = stream_key(seed, i, begin_episode(steps, episode, i))
        left[i] = 1 + wp.int32(uniform_range(key, 0, wp.float64(0.0), wp.float64(6.0)))
    obs[i] = float(left[i])
    valid[i] = left[i] % 2 == 0


@wp.kernel
def _countdown_step(
    left: wp.array(dtype=wp.int32),
    action: wp.array(dtype=float),
    seed: wp.array(dtype=wp.uint32),
    steps: wp.array(dtype=wp.int32),
    episode: wp.array(dtype=wp.int32),
    max_steps: int,
    autoreset: int,
    obs_next: wp.array(dtype=float),
    valid_next: wp.array(dtype=wp.bool),
    obs_root: wp.array(dtype=float),
    valid_root: wp.array(dtype=wp.bool),
    reward: wp.array(dtype=float),
    terminated: wp.array(dtype=wp.bool),
    truncated: wp.array(dtype=wp.bool),
    done: wp.array(dtype=wp.bool),
):
    i = wp.tid()
    n = left[i] - 1
    term = n <= 0
    trunc = count_step(steps, i, max_steps)
    obs_next[i] = float(n)
    valid_next[i] = n % 2 == 0
    reward[i] = action[i]
    terminated[i] = term
    truncated[i] = trunc
    done[i] = term or trunc
    if autoreset != 0:
        if term or trunc:
            key = stream_key(seed, i, begin_episode(steps, episode, i))
            n = 1 + wp.int32(uniform_range(key, 0, wp.float64(0.0), wp.float64(6.0)))
        obs_root[i] = float(n)
        valid_root[i] = n % 2 == 0
    left[i] = n


class _CountdownEnv(WarpEnv):
    """Counts down from a random start; two observation keys (one bool), no rollout kernel."""

    def _make_specs(self):
        n = self.num_envs
        self.observation_spec = Composite(
            observation=Unbounded((n, 1)),
            valid=Categorical(2, shape=(n, 1), dtype=torch.bool),
            shape=(n,),
        )
        self.action_spec = Bounded(0.0, 1.0, shape=(n, 1))
        self.reward_spec = Unbounded((n, 1))

    def _allocate_state(self):
        self.left = wp.zeros(self.num_envs, dtype=wp.int32)

    def _state_tensors(self):
        return {**super()._state_tensors(), "left": wp.to_torch(self.left)}

    def _counters(self):
        b = self.buffers
        return [b["seed"], b["steps"], b["episode"]]

    def _reset_launches(self):
        b = self.buffers
        root = [b["root"]["observation"], b["root"]["valid"]]
        return [(_countdown_reset, [self.left, b["mask"], *self._counters(), *root])]

    def _step_launches(self, autoreset):
        b = self.buffers
        nxt = [b["next"]["observation"], b["next"]["valid"]]
        root = [b["root"]["observation"], b["root"]["valid"]]
        flags = [b["reward"], b["terminated"], b["truncated"], b["done"]]
        head = [self.left, b["action"], *self._counters(), self._limit, int(autoreset)]
        return [(_countdown_step, head + nxt + root + flags)]


def _countdown_run(env, root, actions):
    outs = []
    for action in actions:
        root["action"] = action
        td, root = env.step_and_maybe_reset(root)
        outs.append(td.clone())
    return torch.stack(outs)


@pytest.mark.parametrize("capture", [False, True])
def test_hand_written_env_copies_allocate_again_and_continue_bitwise(capture):
    """A copy allocates its own Warp arrays and loads the state: no per-env pickling code."""
    env = _CountdownEnv(4, seed=0, max_steps=5, capture=capture)
    env.sync_free = True
    actions = torch.rand(30, 4, 1, generator=torch.Generator().manual_seed(1))
    root = env.reset()
    _countdown_run(env, root, actions[:7])  # mid-episode, several ends behind
    root = env.reset(TensorDict({"_reset": torch.tensor([[True], [False], [False], [True]])}, [4]))
    copies = [pickle.loads(pickle.dumps(env)), copy.deepcopy(env)]
    expected = _countdown_run(env, root.clone(), actions[7:])
    for other in copies:
        assert other.left.ptr != env.left.ptr  # its own arrays, not the original's
        assert (other.sync_free, other.capture) == (True, capture)
        assert (_countdown_run(other, root.clone(), actions[7:]) == expected).all()


class _StockCountdownEnv(_CountdownEnv):
    _step_and_maybe_reset = EnvBase._step_and_maybe_reset


class _StockCartPole(CartPoleEnv):
    """Same kernels, TorchRL's generic step-then-maybe_reset and rollout (the oracle path)."""

    _step_and_maybe_reset = EnvBase._step_and_maybe_reset
    rollout = EnvBase.rollout


class _StockPendulum(PendulumEnv):
    _step_and_maybe_reset = EnvBase._step_and_maybe_reset
    rollout = EnvBase.rollout


def _assert_td_equal(a, b):
    keys_a = set(a.keys(True, True))
    assert keys_a == set(b.keys(True, True))
    for key in keys_a:
        assert torch.equal(a.get(key), b.get(key)), key


def _snapshot(env):
    lay = env._layout
    return [env.state.clone(), lay.steps.clone(), lay.episode.clone()]


def _random_actions(env, steps, seed):
    gen = torch.Generator().manual_seed(seed)
    if isinstance(env, CartPoleEnv):
        return [torch.randint(0, 2, (env.num_envs,), generator=gen) for _ in range(steps)]
    return [
        (torch.rand(env.num_envs, 1, generator=gen) * 4 - 2).to(env.dtype) for _ in range(steps)
    ]


def _drive(env, actions):
    root = env.reset()
    out = []
    for a in actions:
        root["action"] = a.to(env.device).clone()  # no action tensor shared between two envs
        td, root = env.step_and_maybe_reset(root)
        out.append((td, root))
    return out


class TestWarpEnv:
    """The TorchRL contract of the WarpEnv base, exercised through CartPoleEnv and PendulumEnv.

    Specs pass ``check_env_specs``; masked resets touch exactly the masked envs (all-False is a
    no-op, bad masks raise before any launch); the fused auto-reset and the ``[N, T]`` rollout fast
    path equal TorchRL's generic path bit for bit; ``is_init`` marks every episode start under
    rollouts and Collector, with transforms and an LSTM policy; seeds are 64-bit, per-env and
    reproducible; captured graphs replay bitwise equal to eager launches; outputs never alias.
    """

    @pytest.mark.parametrize(
        "make",
        [
            lambda d: CartPoleEnv(4, d, seed=0),
            lambda d: CartPoleEnv(4, d, seed=0, observe_velocity=False, dtype=torch.float64),
            lambda d: CartPoleEnv(4, d, seed=0, capture=True),
            lambda d: PendulumEnv(4, d, seed=0),
            lambda d: PendulumEnv(4, d, seed=0, dtype=torch.float64, capture=True),
        ],
    )
    def test_check_env_specs(self, make, device):
        env = make(device)
        check_env_specs(env)
        check_env_specs(TransformedEnv(env, Compose(InitTracker(), StepCounter(), RewardSum())))

    def test_a_minimal_subclass_with_a_bool_output_and_no_rollout_kernel(self):
        check_env_specs(_CountdownEnv(N, seed=29))
        env = _CountdownEnv(N, seed=30, max_steps=4)
        stock = _StockCountdownEnv(N, seed=30, max_steps=4)
        actions = [torch.rand(N, 1, generator=torch.Generator().manual_seed(t)) for t in range(30)]
        for (a, ra), (b, rb) in zip(_drive(env, actions), _drive(stock, actions), strict=True):
            _assert_td_equal(a, b)
            _assert_td_equal(ra, rb)
            assert torch.equal(a["next", "valid"], a["next", "observation"].remainder(2).eq(0))
            assert torch.equal(ra["valid"], ra["observation"].remainder(2).eq(0))
            assert bool((ra["observation"] >= 1).all())
        data = env.rollout(20, break_when_any_done=False)
        assert data.shape == (N, 20) and data["next", "valid"].dtype == torch.bool
        assert bool(data["next", "done"].any())

    def test_to_its_own_device_only(self):
        env = CartPoleEnv(2, seed=0)
        assert env.to("cpu") is env
        with pytest.raises(ValueError, match="device='meta'"):
            env.to("meta")

    @pytest.mark.parametrize("name", ["cpu:0", torch.device("cpu", 0)])
    def test_an_indexed_cpu_device_is_the_cpu(self, name):
        env = CartPoleEnv(2, seed=0, device=name)
        assert env.device == torch.device("cpu") and env.to("cpu") is env
        td = env.rand_step(env.reset())
        assert td["next", "observation"].device == torch.device("cpu")

    def test_construction_inside_a_capture_is_refused(self):
        with wp.ScopedCapture(device="cpu"):
            with pytest.raises(RuntimeError, match="outside the capture"):
                CartPoleEnv(2, seed=0)

    def test_base_without_hooks_says_what_is_missing(self):
        with pytest.raises(NotImplementedError, match="_make_specs"):
            WarpEnv(2)

    @settings(max_examples=30, deadline=None)
    @given(
        mask=st.lists(st.booleans(), min_size=N, max_size=N),
        warmup=st.integers(0, 30),
        pendulum=st.booleans(),
    )
    def test_masked_reset_touches_exactly_the_masked_envs(self, mask, warmup, pendulum):
        env = PendulumEnv(N, seed=1) if pendulum else CartPoleEnv(N, seed=1, max_steps=None)
        for td_, _ in _drive(env, _random_actions(env, warmup, seed=warmup)):
            assert td_ is not None
        state, steps, episode = _snapshot(env)
        m = torch.tensor(mask)
        out = env.reset(TensorDict({"_reset": m.view(N, 1)}, [N]))
        new_state, new_steps, new_episode = _snapshot(env)
        keep = ~m
        assert torch.equal(new_state[keep], state[keep])
        assert torch.equal(new_steps[keep], steps[keep])
        assert torch.equal(new_episode[keep], episode[keep])
        assert torch.equal(new_episode[m], episode[m] + 1)
        assert bool((new_steps[m] == 0).all())
        assert bool((new_state[m] != state[m]).any(dim=-1).all())
        assert not bool(out["done"].any())
        # a fresh env whose episode counters match draws the same reset states
        twin = PendulumEnv(N, seed=1) if pendulum else CartPoleEnv(N, seed=1, max_steps=None)
        twin._layout.episode.copy_(episode)
        twin.reset()
        assert torch.equal(twin.state[m], new_state[m])

    @pytest.mark.parametrize("env_cls", [CartPoleEnv, PendulumEnv])
    def test_all_false_mask_is_an_exact_no_op(self, env_cls, device):
        env = env_cls(N, device, seed=2)
        _drive(env, _random_actions(env, 9, seed=0))
        before = _snapshot(env)
        mask = torch.zeros(N, 1, dtype=torch.bool, device=device)
        env.reset(TensorDict({"_reset": mask}, [N], device=device))
        for a, b in zip(before, _snapshot(env), strict=True):
            assert torch.equal(a, b)

    @pytest.mark.parametrize(
        ("mask", "err", "match"),
        [
            (torch.ones(N, 2, dtype=torch.bool), ValueError, r"_reset.shape=\(12, 2\)"),
            (torch.ones(N, 1, dtype=torch.int64), TypeError, r"_reset.dtype=torch.int64"),
            (torch.ones(N, 1, dtype=torch.bool, device="meta"), ValueError, "_reset.device=meta"),
        ],
    )
    def test_bad_masks_rejected_before_any_launch(self, mask, err, match):
        env = CartPoleEnv(N, seed=0)
        _drive(env, _random_actions(env, 5, seed=1))
        before = _snapshot(env)
        with pytest.raises(err, match=match):
            env.reset(TensorDict({"_reset": mask}, [N]))
        for a, b in zip(before, _snapshot(env), strict=True):
            assert torch.equal(a, b)

    @pytest.mark.parametrize(
        ("fast_cls", "stock_cls"), [(CartPoleEnv, _StockCartPole), (PendulumEnv, _StockPendulum)]
    )
    def test_fused_auto_reset_equals_torchrl_generic_path(self, fast_cls, stock_cls, device):
        kwargs = {"max_steps": 15}
        fast, stock = fast_cls(N, device, seed=3, **kwargs), stock_cls(N, device, seed=3, **kwargs)
        actions = _random_actions(fast, 60, seed=4)
        dones = 0
        for (a, ra), (b, rb) in zip(_drive(fast, actions), _drive(stock, actions), strict=True):
            _assert_td_equal(a, b)
            _assert_td_equal(ra, rb)
            dones += int(a["next", "done"].sum())
        assert dones > N

    @pytest.mark.parametrize("named", [False, True])
    def test_carried_root_entries_are_zeroed_for_reset_envs_as_torchrl_does(self, named):
        # flat and nested carried entries; plain inputs build the root directly, named ones go
        # through _step_mdp: both as TorchRL, and the input's entries are never modified
        fast, stock = (
            CartPoleEnv(N, seed=31, max_steps=None),
            _StockCartPole(N, seed=31, max_steps=None),
        )
        rf, rs = fast.reset(), stock.reset()
        partial = 0
        for t, a in enumerate(_random_actions(fast, 80, seed=32)):
            memory = torch.arange(N * 3, dtype=torch.float32).view(N, 3) + t + 1
            for r in (rf, rs):
                r["action"], r["memory"] = a.clone(), memory.clone()
                r["policy", "deep", "count"] = torch.full((N,), t + 1)
                if named:
                    r.refine_names("env")
            before = rf.clone()
            tf, rf = fast.step_and_maybe_reset(rf)
            ts, rs = stock.step_and_maybe_reset(rs)
            _assert_td_equal(tf, ts)
            _assert_td_equal(rf, rs)
            _assert_td_equal(tf.exclude("next"), before)
            done = tf["next", "done"][:, 0]
            if 0 < int(done.sum()) < N:
                partial += 1
                assert bool((rf["memory"][done] == 0).all())
                assert torch.equal(rf["memory"][~done], memory[~done])
                assert bool((rf["policy", "deep", "count"][done] == 0).all())
                assert bool((rf["policy", "deep", "count"][~done] == t + 1).all())
        assert partial > 5

    def test_device_less_input_takes_the_fused_path_and_equals_torchrl(self):
        # a device-less input whose leaves are all on the env's device takes the fused path
        fast, stock = CartPoleEnv(N, seed=33, max_steps=6), _StockCartPole(N, seed=33, max_steps=6)
        rf, rs = fast.reset(), stock.reset()
        for t, a in enumerate(_random_actions(fast, 30, seed=34)):
            for r in (rf, rs):
                r["action"] = a.clone()
                r["collector", "traj_ids"] = torch.arange(N) + t
                r.clear_device_()
            tf, rf_next = fast.step_and_maybe_reset(rf)
            ts, rs = stock.step_and_maybe_reset(rs)
            assert tf is rf  # written in place: no .to(device) copy of the input
            _assert_td_equal(tf, ts)
            _assert_td_equal(rf_next, rs)
            rf = rf_next

    def test_device_less_input_with_a_leaf_elsewhere_falls_back(self):
        env = CartPoleEnv(N, seed=35)
        root = env.reset()
        root["action"] = torch.ones(N, dtype=torch.int64)
        root.clear_device_()
        root["elsewhere"] = torch.zeros(N, device="meta")
        assert not fused.takes_fast_path(env, root)
        assert fused.takes_fast_path(env, root.exclude("elsewhere"))

    @pytest.mark.parametrize("env_cls", [CartPoleEnv, PendulumEnv])
    def test_rand_action_is_torchrl_draw_set_in_place(self, env_cls):
        env = env_cls(N, seed=36)
        root = env.reset()
        ref = root.clone()
        torch.manual_seed(37)
        out = env.rand_action(root)
        torch.manual_seed(37)
        EnvBase.rand_action(env, ref)
        assert out is root
        _assert_td_equal(root, ref)
        assert env.action_spec.is_in(env.rand_action()["action"])

    def test_collector_random_frames_use_the_env_rand_action(self):
        torch.manual_seed(38)  # rand_action draws from the global generator (restored after)
        env = CartPoleEnv(64, seed=38)
        collector = Collector(
            env, None, frames_per_batch=64 * 50, total_frames=64 * 50, init_random_frames=64 * 50
        )
        data = next(iter(collector))
        collector.shutdown()
        counts = torch.bincount(data["action"].flatten(), minlength=2).numpy()
        assert counts.sum() == 64 * 50
        assert stats.chisquare(counts).pvalue > 0.01

    def test_final_observation_is_true_and_root_is_the_reset_state(self):
        env = CartPoleEnv(64, seed=5, max_steps=None)
        finals = 0
        for td, root in _drive(env, _random_actions(env, 80, seed=5)):
            done = td["next", "done"][:, 0]
            nxt = td["next", "observation"]
            assert not bool(torch.isnan(nxt).any())
            fell = (nxt[:, 0].abs() > 2.4) | (nxt[:, 2].abs() > 12 * 2 * torch.pi / 360)
            assert torch.equal(fell, done)
            assert bool((root["observation"][done].abs() < 0.05).all())
            assert torch.equal(root["observation"][~done], nxt[~done])
            finals += int(done.sum())
        assert finals > 64

    @pytest.mark.parametrize(
        ("fast_cls", "stock_cls"), [(CartPoleEnv, _StockCartPole), (PendulumEnv, _StockPendulum)]
    )
    def test_rollout_fast_path_equals_generic_rollout(self, fast_cls, stock_cls, device):
        fast, stock = (
            fast_cls(N, device, seed=6, max_steps=20),
            stock_cls(N, device, seed=6, max_steps=20),
        )
        data = fast.rollout(70, break_when_any_done=False)
        assert data.names[-1] == "time"
        ref = stock.rollout(70, actions=list(data["action"].unbind(1)), break_when_any_done=False)
        _assert_td_equal(data, ref)
        assert torch.equal(fast.state, stock.state)
        assert int(data["next", "done"].sum()) >= N * 3

    @pytest.mark.parametrize("steps", [1, 2])
    @pytest.mark.parametrize(
        ("fast_cls", "stock_cls"), [(CartPoleEnv, _StockCartPole), (PendulumEnv, _StockPendulum)]
    )
    def test_shortest_rollouts_equal_generic_rollout(self, fast_cls, stock_cls, steps):
        """T = 1 and 2: the one-kernel path's first and last slots, done on the first step."""
        fast, stock = fast_cls(N, seed=8, max_steps=1), stock_cls(N, seed=8, max_steps=1)
        data = fast.rollout(steps, break_when_any_done=False)
        ref = stock.rollout(
            steps, actions=list(data["action"].unbind(1)), break_when_any_done=False
        )
        _assert_td_equal(data, ref)
        assert torch.equal(fast.state, stock.state)
        assert bool(data["next", "truncated"].all())

    @pytest.mark.parametrize("fast_cls", [CartPoleEnv, PendulumEnv])
    def test_rollout_with_policy_uses_fused_steps(self, fast_cls):
        env = fast_cls(N, seed=7, max_steps=10)
        stock = (_StockCartPole if fast_cls is CartPoleEnv else _StockPendulum)(
            N, seed=7, max_steps=10
        )
        actions = _random_actions(env, 25, seed=8)
        it = iter(actions)

        def policy(td):
            return td.set("action", next(it))

        data = env.rollout(25, policy, break_when_any_done=False)
        ref = stock.rollout(25, actions=actions, break_when_any_done=False)
        _assert_td_equal(data, ref)

    @settings(max_examples=15, deadline=None)
    @given(max_steps=st.integers(1, 25), seed=st.integers(0, 2**64 - 1), steps=st.integers(2, 60))
    def test_auto_reset_invariants_over_random_limits_and_seeds(self, max_steps, seed, steps):
        env = TransformedEnv(CartPoleEnv(N, seed=seed, max_steps=max_steps), InitTracker())
        data = env.rollout(steps, break_when_any_done=False)
        is_init, done = data["is_init"][..., 0], data["next", "done"][..., 0]
        trunc = data["next", "truncated"][..., 0]
        obs, nxt = data["observation"], data["next", "observation"]
        assert bool(is_init[:, 0].all())
        assert torch.equal(is_init[:, 1:], done[:, :-1])
        cont = ~done[:, :-1]
        assert torch.equal(obs[:, 1:][cont], nxt[:, :-1][cont])
        assert bool((obs[is_init].abs() < 0.05).all())
        # episode length = steps since the last is_init, inclusive; truncation exactly at the limit
        length = torch.zeros(N, dtype=torch.long)
        for t in range(steps):
            length = torch.where(is_init[:, t], 1, length + 1)
            assert torch.equal(trunc[:, t], length == max_steps)

    def test_is_init_marks_every_episode_start_in_rollout(self):
        env = TransformedEnv(CartPoleEnv(N, seed=8, max_steps=12), InitTracker())
        data = env.rollout(80, break_when_any_done=False)
        is_init = data["is_init"][..., 0]
        done = data["next", "done"][..., 0]
        assert bool(is_init[:, 0].all())
        assert torch.equal(is_init[:, 1:], done[:, :-1])
        assert bool(data["next", "truncated"].any()) and bool(data["next", "terminated"].any())

    @pytest.mark.parametrize("wrapped", [False, True])
    def test_collector_auto_reset_and_is_init(self, wrapped):
        base = CartPoleEnv(N, seed=9, max_steps=16)
        env = TransformedEnv(base, InitTracker()) if wrapped else base
        collector = Collector(env, None, frames_per_batch=N * 40, total_frames=N * 80)
        batches = list(collector)
        collector.shutdown()
        data = torch.cat(batches, dim=1)
        done = data["next", "done"][..., 0]
        obs, nxt = data["observation"], data["next", "observation"]
        assert data.shape == (N, 80)
        cont = ~done[:, :-1]
        assert torch.equal(obs[:, 1:][cont], nxt[:, :-1][cont])
        assert bool((obs[:, 1:][done[:, :-1]].abs() < 0.05).all())
        if wrapped:
            is_init = data["is_init"][..., 0]
            assert bool(is_init[:, 0].all())
            assert torch.equal(is_init[:, 1:], done[:, :-1])

    def test_transforms_and_lstm_policy_in_collector(self):
        torch.manual_seed(0)
        lstm = LSTMModule(input_size=2, hidden_size=8, in_key="observation", out_key="features")
        head = TensorDictModule(torch.nn.Linear(8, 2), in_keys=["features"], out_keys=["logits"])
        pick = TensorDictModule(lambda x: x.argmax(-1), in_keys=["logits"], out_keys=["action"])
        policy = TensorDictSequential(lstm, head, pick)
        env = TransformedEnv(
            CartPoleEnv(N, seed=10, observe_velocity=False, max_steps=25),
            Compose(InitTracker(), StepCounter(), RewardSum(), lstm.make_tensordict_primer()),
        )
        check_env_specs(env)
        collector = Collector(env, policy, frames_per_batch=N * 60, total_frames=N * 60)
        data = next(iter(collector))
        collector.shutdown()
        is_init = data["is_init"][..., 0]
        done = data["next", "done"][..., 0]
        assert bool(done.any())
        assert torch.equal(is_init[:, 1:], done[:, :-1])
        h, h_next = data["recurrent_state_h"], data["next", "recurrent_state_h"]
        assert bool((h[is_init] == 0).all())
        assert bool((h[~is_init] != 0).any(dim=-1).all())
        cont = ~is_init[:, 1:]
        assert torch.equal(h[:, 1:][cont], h_next[:, :-1][cont])
        steps = data["step_count"][..., 0]
        assert bool((steps[is_init] == 0).all())
        assert torch.equal(steps[:, 1:][cont], steps[:, :-1][cont] + 1)
        ep_reward = data["next", "episode_reward"][..., 0]
        assert torch.equal(ep_reward, data["next", "step_count"][..., 0].to(ep_reward.dtype))

    def test_same_seed_same_trajectories_and_set_seed_replays(self):
        a, b = CartPoleEnv(N, seed=2**40 + 3), CartPoleEnv(N, seed=2**40 + 3)
        ra = a.rollout(60, break_when_any_done=False)
        rb = b.rollout(60, actions=list(ra["action"].unbind(1)), break_when_any_done=False)
        _assert_td_equal(ra, rb)
        assert a.set_seed(2**40 + 3) != 2**40 + 3
        again = a.rollout(60, actions=list(ra["action"].unbind(1)), break_when_any_done=False)
        _assert_td_equal(ra, again)

    def test_large_seeds_do_not_alias(self):
        low = CartPoleEnv(N, seed=1).reset()["observation"]
        high = CartPoleEnv(N, seed=2**32 + 1).reset()["observation"]
        top = CartPoleEnv(N, seed=2**64 - 1).reset()["observation"]
        assert bool((low != high).any(dim=-1).all())
        assert bool((low != top).any(dim=-1).all())

    def test_streams_are_uncorrelated_across_envs_episodes_and_seeds(self):
        env = CartPoleEnv(2048, seed=21)
        first = env.reset()["observation"].double()
        second = env.reset()["observation"].double()
        other_seed = CartPoleEnv(2048, seed=22).reset()["observation"].double()
        pairs = [
            (first[:-1, 0], first[1:, 0]),  # neighbouring envs
            (first[:, 0], second[:, 0]),  # consecutive episodes of one env
            (first[:, 0], other_seed[:, 0]),  # neighbouring seeds
        ]
        for a, b in pairs:
            assert stats.pearsonr(a.numpy(), b.numpy()).pvalue > 0.01
        counts = torch.histc(torch.cat([first, second]).flatten(), bins=16, min=-0.05, max=0.05)
        assert stats.chisquare(counts.numpy()).pvalue > 0.01

    @pytest.mark.parametrize("env_cls", [CartPoleEnv, PendulumEnv])
    @pytest.mark.parametrize(
        ("max_steps", "err", "match"),
        [
            (0, ValueError, "max_steps must be >= 1, got max_steps=0"),
            (-3, ValueError, "max_steps must be >= 1, got max_steps=-3"),
            (2.0, TypeError, "max_steps must be an int, got max_steps=2.0"),
            (None, TypeError, "max_steps must be an int"),
            (True, TypeError, "max_steps must be an int"),
        ],
    )
    @pytest.mark.parametrize("fast", [False, True])
    def test_rollout_refuses_bad_max_steps_before_any_reset(
        self, env_cls, max_steps, err, match, fast
    ):
        env = env_cls(4, seed=3)
        env.rollout(3, break_when_any_done=False)
        before = _snapshot(env)
        with pytest.raises(err, match=match):
            env.rollout(max_steps, break_when_any_done=False if fast else None)
        for old, new in zip(before, _snapshot(env), strict=True):
            assert torch.equal(old, new)

    def test_rollout_that_stops_early_uses_torchrl_loop(self):
        env = CartPoleEnv(N, seed=23, max_steps=None)
        data = env.rollout(500)
        done = data["next", "done"][..., 0]
        assert bool(done[:, -1].any())
        assert not bool(done[:, :-1].any())

    def test_streams_depend_only_on_seed_and_env_index(self):
        small, big = CartPoleEnv(4, seed=77), CartPoleEnv(16, seed=77)
        assert torch.equal(small.reset()["observation"], big.reset()["observation"][:4])
        states = [small.reset()["observation"] for _ in range(3)]
        assert not torch.equal(states[0], states[1])
        other = CartPoleEnv(4, seed=78).reset()["observation"]
        assert bool((other != states[0]).any(dim=-1).all())

    @pytest.mark.parametrize("env_cls", [CartPoleEnv, PendulumEnv])
    def test_captured_graph_replays_bitwise_equal_to_eager(self, env_cls, device):
        eager = env_cls(N, device, seed=11, max_steps=9)
        graph = env_cls(N, device, seed=11, max_steps=9, capture=True)
        actions = _random_actions(eager, 40, seed=12)
        for (a, ra), (b, rb) in zip(_drive(eager, actions), _drive(graph, actions), strict=True):
            _assert_td_equal(a, b)
            _assert_td_equal(ra, rb)
        assert set(graph._launcher.graphs) == {"reset", "step_autoreset"}
        mask = torch.arange(N, device=device).remainder(3).eq(0).view(N, 1)
        for env in (eager, graph):
            env.reset(TensorDict({"_reset": mask}, [N], device=device))
            env.step(env.reset().set("action", actions[0].to(device)))
        assert torch.equal(eager.state, graph.state)

    def test_forgotten_launches_are_recorded_again_on_the_new_arrays(self):
        env = CartPoleEnv(N, seed=24, capture=True)
        twin = CartPoleEnv(N, seed=24)
        actions = _random_actions(env, 6, seed=25)
        _drive(env, actions[:3])
        fresh = env.state.clone()
        env._physics.arrays["state"] = fresh
        env._physics.bind()
        env._forget_launches()
        assert env._launcher.graphs == {} and env._launcher.commands == {}
        env.set_seed(24)  # restart the episode counts so both envs draw the same episodes
        runs = _drive(env, actions), _drive(twin, actions)
        for (a, ra), (b, rb) in zip(*runs, strict=True):
            _assert_td_equal(a, b)
            _assert_td_equal(ra, rb)
        assert torch.equal(fresh, twin.state)

    def test_scoped_capture_of_the_fused_step_by_hand(self):
        env = CartPoleEnv(N, seed=13, max_steps=6)
        twin = CartPoleEnv(N, seed=13, max_steps=6)
        root, root_twin = env.reset(), twin.reset()
        cmds = env._launcher.commands_of("step_autoreset")
        with wp.ScopedCapture(device="cpu") as cap:
            for cmd in cmds:
                cmd.launch()
        for a in _random_actions(env, 20, seed=14):
            env._layout.actions["action"].copy_(a)
            wp.capture_launch(cap.graph)
            root_twin["action"] = a
            td, root_twin = twin.step_and_maybe_reset(root_twin)
            assert torch.equal(env._layout.next["observation"], td["next", "observation"])
            assert torch.equal(env._layout.root["observation"], root_twin["observation"])
        assert torch.equal(env.state, twin.state)
        assert root is not None

    def test_outputs_never_alias_later_steps(self):
        env = CartPoleEnv(N, seed=15, max_steps=4)
        runs = _drive(env, _random_actions(env, 12, seed=16))
        frozen = [(td.clone(), root.clone()) for td, root in runs]
        _drive(env, _random_actions(env, 12, seed=17))
        for (td, root), (ftd, froot) in zip(runs, frozen, strict=True):
            _assert_td_equal(td, ftd)
            _assert_td_equal(root, froot)
        buffers = {t.data_ptr() for t in env._layout.next.values()} | {
            t.data_ptr() for t in env._layout.root.values()
        }
        td, root = runs[-1]
        assert td["next", "observation"].data_ptr() not in buffers
        assert root["observation"].data_ptr() not in buffers
        assert td["next", "observation"].data_ptr() != root["observation"].data_ptr()


# ----------------------------------------------------------------------------- saving and restoring
SAVE_CASES = [
    (CartPoleEnv, {"num_envs": 6, "seed": 11, "max_steps": 9}),
    (CartPoleEnv, {"num_envs": 6, "seed": 12, "max_steps": 9, "capture": True}),
    (CartPoleEnv, {"num_envs": 5, "seed": 13, "observe_velocity": False, "dtype": torch.float64}),
    (PendulumEnv, {"num_envs": 5, "seed": 2**63 + 5, "max_steps": 7}),
    (PendulumEnv, {"num_envs": 5, "seed": 3, "max_steps": 7, "capture": True}),
    (CourseEnv, {"num_envs": 4, "seed": 7, "max_steps": 6, "num_points": 32}),
    (CourseEnv, {"num_envs": 4, "seed": 8, "max_steps": 6, "crash": "regenerate", "capture": True}),
]
SAVE_IDS = [f"{cls.__name__}-{i}" for i, (cls, _) in enumerate(SAVE_CASES)]


def _bitwise_equal(a: torch.Tensor, b: torch.Tensor) -> bool:
    if a.dtype != b.dtype or a.shape != b.shape:
        return False
    return torch.equal(a.reshape(-1).view(torch.uint8), b.reshape(-1).view(torch.uint8))


def _assert_states_equal(a: dict, b: dict) -> None:
    assert a.keys() == b.keys()
    for key in a:
        assert _bitwise_equal(a[key], b[key]), key


def _assert_td_bitwise(a, b) -> None:
    keys = set(a.keys(True, True))
    assert keys == set(b.keys(True, True))
    for key in keys:
        assert _bitwise_equal(a.get(key), b.get(key)), key


def _actions(env, steps: int, seed: int) -> list[torch.Tensor]:
    """Seeded actions of the env's spec; CourseEnv's favour throttle so that cars move."""
    gen = torch.Generator().manual_seed(seed)
    shape = env.action_spec.shape
    if isinstance(env, CartPoleEnv):
        return [torch.randint(0, 2, shape, generator=gen) for _ in range(steps)]
    if isinstance(env, PendulumEnv):
        return [(torch.rand(shape, generator=gen) * 4 - 2).to(env.dtype) for _ in range(steps)]
    return [torch.rand(shape, generator=gen) * 2 - 0.5 for _ in range(steps)]


def _continue(env, root, actions) -> list:
    """Fused steps from the carried ``root``; every output (input with "next", next root)."""
    out = []
    root = root.clone()
    for a in actions:
        root["action"] = a.to(env.device)
        td, root = env.step_and_maybe_reset(root)
        out.append((td, root))
    return out


class TestStateDict:
    """state_dict / load_state_dict / pickle / deepcopy of the three envs.

    Contract: ``state_dict()`` is a dict of fresh tensors (never views) holding everything that
    determines future steps; loading it into a fresh env built with the same arguments (or into
    the same env, or one built with another seed) makes it continue bitwise identically to the
    uninterrupted env, auto-resets and course regenerations included, eager and captured;
    ``pickle`` and ``copy.deepcopy`` go through the same state; a bad state raises before
    anything changes.
    """

    @pytest.mark.parametrize(("cls", "kwargs"), SAVE_CASES, ids=SAVE_IDS)
    def test_restored_env_continues_bitwise(self, cls, kwargs, device):
        kwargs = {**kwargs, "device": device}
        env = cls(**kwargs)
        root = env.reset()
        first, rest = _actions(env, 10, 0), _actions(env, 24, 1)
        _, root = _continue(env, root, first)[-1]
        saved, saved_root = env.state_dict(), root.clone()
        pickled = pickle.dumps(env)
        copied = copy.deepcopy(env)
        expected = _continue(env, saved_root, rest)
        done = torch.stack([td["next", "done"] for td, _ in expected])
        assert bool(done.any()), "the continuation must cross auto-resets"
        if cls is CourseEnv:
            assert not torch.equal(env.generation, saved["course.generation"]), "no regeneration"
        other_seed = {**kwargs, "seed": 99}
        restored = [cls(**kwargs), cls(**other_seed), env, pickle.loads(pickled), copied]
        for i, target in enumerate(restored):
            if i < 3:
                target.load_state_dict(saved)
            _assert_states_equal(target.state_dict(), saved)
            assert target.seed == env.seed if i else True
            got = _continue(target, saved_root, rest)
            for (td_a, root_a), (td_b, root_b) in zip(expected, got, strict=True):
                _assert_td_bitwise(td_a, td_b)
                _assert_td_bitwise(root_a, root_b)

    @pytest.mark.parametrize("cls", [CartPoleEnv, PendulumEnv])
    def test_restored_env_rollout_fast_path_is_bitwise(self, cls):
        env = cls(4, seed=5, max_steps=6)
        env.rollout(9, break_when_any_done=False)
        saved = env.state_dict()
        torch.manual_seed(0)
        expected = env.rollout(13, break_when_any_done=False)
        fresh = cls(4, seed=6, max_steps=6)
        fresh.load_state_dict(saved)
        torch.manual_seed(0)
        _assert_td_bitwise(expected, fresh.rollout(13, break_when_any_done=False))

    @pytest.mark.parametrize(("cls", "kwargs"), SAVE_CASES[::3], ids=SAVE_IDS[::3])
    def test_state_dict_is_a_copy_with_every_array(self, cls, kwargs):
        env = cls(**kwargs)
        env.reset()
        state = env.state_dict()
        assert isinstance(state, dict) and all(isinstance(v, torch.Tensor) for v in state.values())
        assert {"seed", "steps", "episode", "done", "root.observation"} <= state.keys()
        if cls is CourseEnv:
            names = {f"course.{n}" for n in CourseGenerator.array_names()}
            assert names | {"pose", "track", "counts"} <= state.keys()
        else:
            assert "state" in state
        for value in state.values():
            value.zero_() if value.dtype != torch.bool else value.fill_(True)
        assert not all(
            _bitwise_equal(a, b)
            for a, b in zip(state.values(), env.state_dict().values(), strict=True)
        )
        prefixed = env.state_dict(prefix="env.")
        assert all(k.startswith("env.") for k in prefixed)

    @pytest.mark.parametrize(("cls", "kwargs"), SAVE_CASES, ids=SAVE_IDS)
    def test_copies_keep_settings_set_after_construction(self, cls, kwargs):
        env = cls(**kwargs)
        env.sync_free = True
        if cls is CourseEnv:  # a curriculum's next-course parameters and the step inputs
            env.generator.set_params([1], width=2.5)
            env.inputs["reset_mask"][2] = 1
        for other in (pickle.loads(pickle.dumps(env)), copy.deepcopy(env)):
            assert other.sync_free and other.capture == env.capture
            _assert_states_equal(other.state_dict(), env.state_dict())
            if cls is CourseEnv:
                assert other.generator.views["param_width"][1] == 2.5
                assert other.inputs["reset_mask"].tolist() == [0, 0, 1, 0]
                assert other.inputs["reset_mask"].data_ptr() != env.inputs["reset_mask"].data_ptr()

    def test_pickle_keeps_the_drawn_seed_and_never_draws(self):
        env = CartPoleEnv(3)  # seed drawn from torch's generator
        rng = torch.get_rng_state()
        clone = pickle.loads(pickle.dumps(env))
        assert torch.equal(rng, torch.get_rng_state())
        assert clone.seed == env.seed and clone.observe_velocity == env.observe_velocity

    @pytest.mark.parametrize(("cls", "kwargs"), SAVE_CASES[::3], ids=SAVE_IDS[::3])
    def test_bad_states_raise_before_anything_changes(self, cls, kwargs):
        env = cls(**kwargs)
        env.rollout(3, break_when_any_done=False) if cls is not CourseEnv else env.reset()
        good = env.state_dict()
        small = cls(**{**kwargs, "num_envs": kwargs["num_envs"] - 1}).state_dict()
        steps = good["steps"].clone()
        steps[0] = -1
        cases = [
            ([1, 2], TypeError, "state_dict must be a mapping"),
            (
                {k: v for k, v in good.items() if k != "episode"},
                ValueError,
                r"missing=\['episode'\]",
            ),
            ({**good, "extra": torch.zeros(1)}, ValueError, r"unexpected=\['extra'\]"),
            (
                {**good, "steps": good["steps"].tolist()},
                TypeError,
                r"state_dict\['steps'\] must be",
            ),
            ({**good, "steps": good["steps"].long()}, TypeError, "must have dtype torch.int32"),
            ({**good, "seed": good["seed"][:1]}, ValueError, r"must have shape \(2,\)"),
            ({**good, "steps": good["steps"].to("meta")}, ValueError, "meta tensor"),
            (small, ValueError, f"num_envs={kwargs['num_envs'] - 1}"),
            ({**good, "steps": steps}, ValueError, r"state_dict\['steps'\] holds -1"),
            ({**good, "seed": torch.tensor([2**32, 0])}, ValueError, "seed words"),
        ]
        for state, err, match in cases:
            with pytest.raises(err, match=match):
                env.load_state_dict(state)
            _assert_states_equal(env.state_dict(), good)
        with pytest.raises(ValueError, match="strict must be True"):
            env.load_state_dict(good, strict=False)
        with pytest.raises(TypeError, match="assign must be a bool"):
            env.load_state_dict(good, assign=None)

    def test_collector_checkpoints_still_load(self):
        # TorchRL collectors save an empty "env_state_dict" for a plain env and load it back
        env = CartPoleEnv(2, seed=1)
        collector = Collector(env, None, frames_per_batch=4, total_frames=8)
        next(iter(collector))
        before = env.state_dict()
        collector.load_state_dict(collector.state_dict(), strict=False)  # no policy state
        collector.shutdown()
        _assert_states_equal(before, env.state_dict())

    def test_course_counters_that_index_arrays_are_checked(self):
        env = CourseEnv(3, seed=1, max_steps=5)
        good = env.state_dict()
        for column, value, match in [(3, 64, "segment"), (3, -1, "segment"), (0, -5, "passed")]:
            counts = good["counts"].clone()
            counts[1, column] = value
            with pytest.raises(ValueError, match=match):
                env.load_state_dict({**good, "counts": counts})
        count = good["course.checkpoint_count"].clone()
        count[0] = 33
        with pytest.raises(ValueError, match="checkpoint_count"):
            env.load_state_dict({**good, "course.checkpoint_count": count})
        _assert_states_equal(env.state_dict(), good)


# ----------------------------------------------------------------------------- fuzzing bad input
FUZZ = settings(max_examples=40, deadline=None)
FUZZ_N = 3


@functools.cache
def _fuzz_env(name: str) -> WarpEnv:
    """One env per class, shared by the fuzz examples (each checks its state is unchanged)."""
    cls = {"cartpole": CartPoleEnv, "pendulum": PendulumEnv, "course": CourseEnv}[name]
    env = cls(FUZZ_N, seed=4, max_steps=5)
    env.rollout(7, break_when_any_done=False)
    return env


def _action_is_bad(env: WarpEnv, action) -> bool:
    spec = env.action_spec
    if not isinstance(action, torch.Tensor) or action.shape != spec.shape:
        return True
    if action.dtype != spec.dtype:
        return True
    if isinstance(env, CartPoleEnv):
        return bool(((action != 0) & (action != 1)).any())
    return bool(action.isnan().any())


FUZZ_ENVS = ["cartpole", "pendulum", "course"]


class TestBadArgumentsFuzz:
    """Random bad arguments to every public entry point raise TypeError or ValueError and leave
    the env's ``state_dict()`` bitwise unchanged (so nothing ran before the check)."""

    @pytest.mark.parametrize("name", FUZZ_ENVS)
    @FUZZ
    @given(data=st.data())
    def test_step_with_bad_actions(self, name, data):
        env = _fuzz_env(name)
        action = data.draw(st.one_of(tensors(leading=FUZZ_N), st.text(max_size=2)))
        assume(_action_is_bad(env, action))
        before = env.state_dict()
        for call in (env.step, env.step_and_maybe_reset):
            td = TensorDict({"action": action}, batch_size=[FUZZ_N])
            with pytest.raises((TypeError, ValueError)):
                call(td)
            assert_state_unchanged(before, env)

    @pytest.mark.parametrize("name", FUZZ_ENVS)
    @FUZZ
    @given(mask=tensors(leading=FUZZ_N))
    def test_reset_with_bad_masks(self, name, mask):
        assume(mask.dtype != torch.bool or mask.shape not in ((FUZZ_N,), (FUZZ_N, 1)))
        env = _fuzz_env(name)
        before = env.state_dict()
        with pytest.raises((TypeError, ValueError)):
            env.reset(TensorDict({"_reset": mask}, batch_size=[FUZZ_N]))
        assert_state_unchanged(before, env)

    @FUZZ
    @given(
        mask=st.one_of(tensors(), not_tensors()), method=st.sampled_from(["regenerate", "respawn"])
    )
    def test_course_masks(self, mask, method):
        assume(mask is not None)
        assume(
            not (
                isinstance(mask, torch.Tensor)
                and mask.dtype == torch.int32
                and mask.shape == (FUZZ_N,)
            )
        )
        env = _fuzz_env("course")
        before = env.state_dict()
        with pytest.raises((TypeError, ValueError)):
            getattr(env, method)(mask)
        assert_state_unchanged(before, env)

    @pytest.mark.parametrize("name", FUZZ_ENVS)
    @FUZZ
    @given(max_steps=bad_ints(1), fast=st.booleans())
    def test_rollout_with_bad_max_steps(self, name, max_steps, fast):
        env = _fuzz_env(name)
        before = env.state_dict()
        with pytest.raises((TypeError, ValueError)):
            env.rollout(max_steps, break_when_any_done=False if fast else None)
        assert_state_unchanged(before, env)

    @pytest.mark.parametrize("name", FUZZ_ENVS)
    @FUZZ
    @given(data=st.data())
    def test_load_state_dict_with_corrupted_states(self, name, data):
        env = _fuzz_env(name)
        before = env.state_dict()
        state = dict(before)
        key = data.draw(st.sampled_from(sorted(state)))
        kind = data.draw(st.sampled_from(["drop", "add", "dtype", "shape", "junk", "value"]))
        if kind == "drop":
            del state[key]
        elif kind == "add":
            state[data.draw(st.text(max_size=4).filter(lambda k: k not in state))] = state[key]
        elif kind == "dtype":
            dtype = data.draw(st.sampled_from([d for d in DTYPES if d != state[key].dtype]))
            state[key] = state[key].to(dtype)
        elif kind == "shape":
            shape = data.draw(st.lists(st.integers(0, 5), max_size=3))
            assume(tuple(shape) != tuple(state[key].shape))
            state[key] = torch.zeros(shape, dtype=state[key].dtype)
        elif kind == "junk":
            state[key] = data.draw(not_tensors())
        else:
            key = data.draw(st.sampled_from(["steps", "episode", "seed"]))
            state[key] = state[key].clone()
            state[key][data.draw(st.integers(0, state[key].shape[0] - 1))] = data.draw(
                st.integers(-(2**31), -1) | st.integers(2**32, 2**40)
                if key == "seed"
                else st.integers(-(2**31), -1)
            )
        with pytest.raises((TypeError, ValueError)):
            env.load_state_dict(state)
        assert_state_unchanged(before, env)


class TestFace:
    """What an author reads in ``WarpEnv`` itself: the step path, ``repr`` and the public names.

    ``WarpEnv`` subclasses TorchRL's ``EnvBase`` directly and defines every ``EnvBase`` method of
    the step path in its own class body; ``repr`` names the class, ``num_envs``, the device, the
    env's own options (a difficulty, a mode), ``max_steps`` and the seed; ``warp_env`` exports
    the authoring names only, the hand-written-kernel bookkeeping staying private.
    """

    def test_step_path_is_defined_in_warp_env_itself(self):
        assert WarpEnv.__bases__ == (EnvBase,)
        for name in (
            "_step",
            "_reset",
            "_step_and_maybe_reset",
            "_reset_check_done",
            "rollout",
            "rand_action",
            "to",
            "_set_seed",
        ):
            assert name in vars(WarpEnv), name

    @pytest.mark.parametrize(
        ("make", "expected"),
        [
            (
                lambda d: CartPoleEnv(4, d, seed=0, max_steps=200),
                "CartPoleEnv(num_envs=4, device={d}, max_steps=200, seed=0)",
            ),
            (
                lambda d: PendulumEnv(2, d, seed=2**64 - 1, max_steps=None),
                f"PendulumEnv(num_envs=2, device={{d}}, max_steps=None, seed={2**64 - 1})",
            ),
            (
                lambda d: CourseEnv(2, d, seed=3, mode="gates", max_steps=50),
                "CourseEnv(num_envs=2, device={d}, mode='gates', max_steps=50, seed=3)",
            ),
            (
                lambda d: RepeatPreviousEnv(4, d, seed=0),
                "RepeatPreviousEnv(num_envs=4, device={d}, difficulty='easy', max_steps=51, "
                "seed=0)",
            ),
            (
                lambda d: MineSweeperEnv(3, d, seed=5, difficulty="hard"),
                "MineSweeperEnv(num_envs=3, device={d}, difficulty='hard', max_steps=54, seed=5)",
            ),
        ],
    )
    def test_repr_names_class_size_device_options_horizon_and_seed(self, make, expected, device):
        env = make(device)
        assert repr(env) == expected.format(d=env.device)

    def test_repr_shows_the_drawn_seed_and_a_new_one(self):
        env = CartPoleEnv(2, seed=None)
        assert repr(env).endswith(f"seed={env.seed})")
        env.set_seed(7)
        assert repr(env).endswith("seed=7)")

    def test_hand_written_kernel_helpers_are_not_exported(self):
        assert sorted(warp_env.__all__) == [
            "WarpEnv",
            "WarpFunctions",
            "gaussian_pair",
            "state_view",
            "stream_key",
            "uniform64",
            "uniform_int",
            "uniform_range",
        ]
        for name in ("Episodes", "Flags", "count_step", "pack_params", "param_structs"):
            assert not hasattr(warp_env, name), name


@wp.struct
class _Mixed:
    count: int
    scale: wp.float32
    values: wp.array(dtype=wp.int32)


_Outer = param_structs("Outer", ("a",), __name__)[wp.float64]


@wp.struct
class _Nested:
    inner: _Outer
    flag: wp.bool


class TestMakeStruct:
    """``make_struct`` sets every field of a ``@wp.struct`` by name, and only those fields."""

    def test_every_field_is_set_exactly(self):
        values = wp.array([3, 1, 4], dtype=wp.int32, device="cpu")
        mixed = make_struct(_Mixed, values=values, scale=0.25, count=7)
        assert type(mixed) is not _Mixed and mixed._cls is _Mixed
        assert (mixed.count, mixed.scale) == (7, 0.25)
        assert mixed.values is values
        assert mixed.values.numpy().tolist() == [3, 1, 4]

    def test_a_struct_field_takes_a_struct_instance(self):
        inner = make_struct(_Outer, a=0.1)
        outer = make_struct(_Nested, inner=inner, flag=True)
        assert (outer.inner.a, outer.flag) == (0.1, True)  # the exact double

    def test_unknown_field_name_raises_naming_it(self):
        with pytest.raises(ValueError, match=r"unexpected=\['speed'\]") as info:
            make_struct(_Outer, a=1.0, speed=2.0)
        assert "Outer" in str(info.value) and "missing=[]" in str(info.value)

    def test_missing_field_raises_naming_it(self):
        with pytest.raises(ValueError, match=r"missing=\['values'\], unexpected=\[\]"):
            make_struct(_Mixed, count=1, scale=1.0)


class TestNamedParams:
    """Constants reach kernels as ``@wp.struct`` fields filled by name, never by list position."""

    def test_pack_params_fills_each_field_by_name(self):
        structs = param_structs("Pair", ("first", "second"), __name__)
        packed = pack_params(structs, {"second": 0.1, "first": 2.5}, torch.float64)
        assert (packed.first, packed.second) == (2.5, 0.1)  # exact doubles
        single = pack_params(structs, {"second": 0.1, "first": 2.5}, torch.float32)
        assert single._cls is structs[wp.float32]
        assert all(var.type is wp.float32 for var in structs[wp.float32].vars.values())

    @pytest.mark.parametrize(
        ("values", "match"),
        [({"first": 1.0}, r"missing=\['second'\]"), ({"first": 1, "second": 2, "x": 3}, "'x'")],
    )
    def test_pack_params_refuses_missing_or_unexpected_names(self, values, match):
        structs = param_structs("Pair", ("first", "second"), __name__)
        with pytest.raises(ValueError, match=match):
            pack_params(structs, values, torch.float32)

    def test_every_env_constant_is_a_struct_field(self):
        from torchrl_ext.envs._kernels import cartpole as cartpole_kernels
        from torchrl_ext.envs._kernels import pendulum as pendulum_kernels

        for env, make in (
            (CartPoleEnv(2, seed=0), cartpole_kernels.params),
            (PendulumEnv(2, seed=0, dtype=torch.float64), pendulum_kernels.params),
        ):
            fields = env._physics.params._cls.vars
            assert set(make()) <= set(fields)
            scalar = wp.float64 if env.dtype == torch.float64 else wp.float32
            assert all(fields[name].type is scalar for name in make())

    def test_cartpole_constants_match_gymnasium_by_name(self):
        env = CartPoleEnv(2, seed=0, dtype=torch.float64)
        p = env._physics.params
        assert (p.gravity, p.masspole, p.total_mass, p.length) == (9.8, 0.1, 1.1, 0.5)
        assert (p.polemass_length, p.force_mag, p.tau, p.x_limit) == (0.05, 10.0, 0.02, 2.4)


_GRID_ENVS = {
    "battleship": BattleshipEnv,
    "minesweeper": MineSweeperEnv,
    "concentration": ConcentrationEnv,
}

# Steps env 1 of a sync-free grid env with action values ``BAD`` and the other envs as a copy
# stepped with a valid action; prints whether every other env's state stayed bitwise the same.
_FAR_ACTIONS_SCRIPT = """
import copy, sys, torch
from torchrl_ext.envs import popgym
env = getattr(popgym, sys.argv[1])(4, seed=0)
env.sync_free = True
root = env.reset()
root = env.rand_action(root)
ref = copy.deepcopy(env)
bad = root.clone()
bad["action"][1] = int(sys.argv[2])
for _ in range(3):
    env.step(bad.clone())
    ref.step(root.clone())
a, b = env.state_dict(), ref.state_dict()
others = [0, 2, 3]
same = all(torch.equal(a[k][others], b[k][others]) for k in a if a[k].dim() and a[k].shape[0] == 4)
print("faulted", bool(env.action_fault), "others_unchanged", same)
"""


class TestSyncFreeFaults:
    """A faulted env's advance never leaves its own arrays.

    Under ``sync_free`` an out-of-range categorical action only sets :attr:`action_fault`; the
    base clamps it into the spec before the env's functions read it, so every other env steps
    bitwise as it would have, far values included, and ``check_actions`` still raises.
    """

    @staticmethod
    def _pair(cls):
        env = cls(4, seed=0)
        env.sync_free = True
        root = env.rand_action(env.reset())
        return env, copy.deepcopy(env), root

    @pytest.mark.parametrize("name", sorted(_GRID_ENVS))
    @pytest.mark.parametrize("value", [-1, -7, 64, 1000])
    def test_other_envs_are_bitwise_unchanged(self, name, value):
        env, ref, root = self._pair(_GRID_ENVS[name])
        bad = root.clone()
        bad["action"][1] = value
        for _ in range(3):
            env.step(bad.clone())
            ref.step(root.clone())
        a, b = env.state_dict(), ref.state_dict()
        for key, tensor in a.items():
            if tensor.dim() and tensor.shape[0] == 4:
                assert torch.equal(tensor[[0, 2, 3]], b[key][[0, 2, 3]]), key
        with pytest.raises(ValueError, match="check_actions"):
            env.check_actions()

    def test_in_range_actions_load_unchanged(self):
        env, ref, root = self._pair(MineSweeperEnv)
        ref.sync_free = False
        for _ in range(4):
            root = env.rand_action(root)
            td, ref_td = env.step(root.clone()), ref.step(root.clone())
            assert (td["next"] == ref_td["next"]).all()
        env.check_actions()  # nothing faulted

    @pytest.mark.parametrize("name", ["BattleshipEnv", "MineSweeperEnv", "ConcentrationEnv"])
    @pytest.mark.parametrize("value", [-(2**24), 2**20])  # far outside, not wrapping in int32
    def test_far_values_neither_crash_nor_reach_others(self, name, value):
        done = subprocess.run(
            [sys.executable, "-c", _FAR_ACTIONS_SCRIPT, name, str(value)],
            capture_output=True,
            text=True,
            timeout=600,
        )
        assert done.returncode == 0, done.stderr[-2000:]
        assert "faulted True others_unchanged True" in done.stdout
