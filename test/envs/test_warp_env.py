import pytest
import torch
import warp as wp
from hypothesis import given, settings
from hypothesis import strategies as st
from tensordict import TensorDict
from tensordict.nn import TensorDictModule, TensorDictSequential
from torchrl.collectors import Collector
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

from torchrl_ext.envs import CartPoleEnv, PendulumEnv, WarpEnv

N = 12


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
    t = env._t
    return [env.state.clone(), t["steps"].clone(), t["episode"].clone()]


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
        root["action"] = a.to(env.device)
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
        twin._t["episode"].copy_(episode)
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
            env._reset(TensorDict({"_reset": mask}, [N]))
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
        assert set(graph._graphs) == {"reset", "step_autoreset"}
        mask = torch.arange(N, device=device).remainder(3).eq(0).view(N, 1)
        for env in (eager, graph):
            env.reset(TensorDict({"_reset": mask}, [N], device=device))
            env.step(env.reset().set("action", actions[0].to(device)))
        assert torch.equal(eager.state, graph.state)

    def test_scoped_capture_of_the_fused_step_by_hand(self):
        env = CartPoleEnv(N, seed=13, max_steps=6)
        twin = CartPoleEnv(N, seed=13, max_steps=6)
        root, root_twin = env.reset(), twin.reset()
        cmds = env._launch_list("step_autoreset")
        with wp.ScopedCapture(device="cpu") as cap:
            for cmd in cmds:
                cmd.launch()
        for a in _random_actions(env, 20, seed=14):
            env._t["action"].copy_(a)
            wp.capture_launch(cap.graph)
            root_twin["action"] = a
            td, root_twin = twin.step_and_maybe_reset(root_twin)
            assert torch.equal(env._t["next"]["observation"], td["next", "observation"])
            assert torch.equal(env._t["root"]["observation"], root_twin["observation"])
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
        buffers = {t.data_ptr() for t in env._t["next"].values()} | {
            t.data_ptr() for t in env._t["root"].values()
        }
        td, root = runs[-1]
        assert td["next", "observation"].data_ptr() not in buffers
        assert root["observation"].data_ptr() not in buffers
        assert td["next", "observation"].data_ptr() != root["observation"].data_ptr()
