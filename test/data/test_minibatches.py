"""Tests for torchrl_ext.data.minibatches (env-major minibatches of whole rows)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats
from tensordict import TensorDict
from torchrl.data import LazyTensorStorage, ReplayBuffer

from torchrl_ext.data.minibatches import EnvMajorMinibatches, EnvMajorSampler


@pytest.fixture(autouse=True)
def _restore_rng():
    state = torch.random.get_rng_state()
    yield
    torch.random.set_rng_state(state)


def make_batch(n_envs, steps):
    env = torch.arange(n_envs).view(-1, 1).expand(n_envs, steps)
    time = torch.arange(steps).view(1, -1).expand(n_envs, steps)
    return TensorDict({"env": env.clone(), "time": time.clone()}, batch_size=[n_envs, steps])


def check_whole_rows(batch, steps):
    assert batch.batch_size[1] == steps
    assert torch.equal(batch["time"], torch.arange(steps).expand_as(batch["time"]))
    assert (batch["env"] == batch["env"][:, :1]).all()


class TestEnvMajorMinibatches:
    """Each epoch is a permutation of env indices cut into chunks of whole, ordered rows.

    Every env exactly once per epoch; last chunk shorter when not divisible; the same
    generator seed gives the same order; first positions are uniform over envs.
    """

    @settings(max_examples=40, deadline=None)
    @given(
        n_envs=st.integers(1, 17),
        steps=st.integers(1, 6),
        per=st.integers(1, 20),
        epochs=st.integers(1, 3),
        seed=st.integers(0, 2**16),
    )
    def test_every_env_once_per_epoch(self, n_envs, steps, per, epochs, seed):
        mb = EnvMajorMinibatches(
            make_batch(n_envs, steps),
            per,
            epochs=epochs,
            generator=torch.Generator().manual_seed(seed),
        )
        batches = list(mb)
        per_epoch = -(-n_envs // per)
        assert len(batches) == len(mb) == epochs * per_epoch
        for e in range(epochs):
            epoch = batches[e * per_epoch : (e + 1) * per_epoch]
            sizes = [b.batch_size[0] for b in epoch]
            assert sizes[:-1] == [per] * (per_epoch - 1)
            assert sizes[-1] == n_envs - per * (per_epoch - 1)
            envs = torch.cat([b["env"][:, 0] for b in epoch])
            assert sorted(envs.tolist()) == list(range(n_envs))
            for b in epoch:
                check_whole_rows(b, steps)

    def test_seeded(self):
        data = make_batch(12, 3)

        def order(seed):
            mb = EnvMajorMinibatches(
                data, 5, epochs=2, generator=torch.Generator().manual_seed(seed)
            )
            return [b["env"][:, 0].tolist() for b in mb]

        assert order(1) == order(1)
        assert order(1) != order(2)
        first, second = order(1)[:3], order(1)[3:]
        assert first != second, "each epoch draws a new permutation"

    def test_does_not_touch_global_rng(self):
        before = torch.random.get_rng_state()
        list(EnvMajorMinibatches(make_batch(8, 2), 3, generator=torch.Generator().manual_seed(0)))
        assert torch.equal(before, torch.random.get_rng_state())

    def test_first_position_is_uniform(self):
        """Chi-square over 4000 epochs: the env in the first slot is uniform (p > 0.01)."""
        n_envs = 8
        mb = EnvMajorMinibatches(
            make_batch(n_envs, 1), 3, epochs=4000, generator=torch.Generator().manual_seed(7)
        )
        firsts = [b["env"][0, 0].item() for i, b in enumerate(mb) if i % 3 == 0]
        counts = np.bincount(firsts, minlength=n_envs)
        assert stats.chisquare(counts).pvalue > 0.01

    @pytest.mark.parametrize(
        ("kwargs", "error", "match"),
        [
            ({"envs_per_minibatch": 0}, ValueError, "envs_per_minibatch=0"),
            ({"envs_per_minibatch": 2, "epochs": 0}, ValueError, "epochs=0"),
            ({"envs_per_minibatch": 2, "generator": 3}, TypeError, "generator"),
        ],
    )
    def test_bad_arguments(self, kwargs, error, match):
        with pytest.raises(error, match=match):
            EnvMajorMinibatches(make_batch(4, 2), **kwargs)

    def test_needs_env_and_time_dims(self):
        with pytest.raises(ValueError, match="batch_size=\\(4,\\)"):
            EnvMajorMinibatches(TensorDict({}, batch_size=[4]), 2)
        with pytest.raises(TypeError, match="TensorDict"):
            EnvMajorMinibatches(torch.zeros(4, 2), 2)


def make_buffer(n_envs, steps, seed=0):
    rb = ReplayBuffer(
        storage=LazyTensorStorage(n_envs * steps, ndim=2),
        sampler=EnvMajorSampler(generator=torch.Generator().manual_seed(seed)),
        batch_size=3 * steps,
    )
    rb.extend(make_batch(n_envs, steps))
    return rb


class TestEnvMajorSampler:
    """Through a torchrl ReplayBuffer: [E, T] whole rows, each env once per epoch."""

    @pytest.mark.parametrize(("n_envs", "steps"), [(7, 4), (9, 1), (2, 5)])
    def test_one_epoch_per_iteration(self, n_envs, steps):
        rb = make_buffer(n_envs, steps)
        for _ in range(2):
            batches = list(rb)
            sizes = [b.batch_size[0] for b in batches]
            assert sum(sizes) == n_envs and all(s == 3 for s in sizes[:-1])
            envs = torch.cat([b["env"][:, 0] for b in batches])
            assert sorted(envs.tolist()) == list(range(n_envs))
            for b in batches:
                check_whole_rows(b, steps)

    def test_sample_calls_roll_over_epochs(self):
        rb = make_buffer(7, 2, seed=3)
        seen = [rb.sample()["env"][:, 0] for _ in range(6)]
        assert sorted(torch.cat(seen[:3]).tolist()) == list(range(7))
        assert sorted(torch.cat(seen[3:]).tolist()) == list(range(7))

    def test_seeded(self):
        def order(seed):
            return [b["env"][:, 0].tolist() for b in make_buffer(10, 3, seed)]

        assert order(4) == order(4) and order(4) != order(5)

    @pytest.mark.filterwarnings("ignore:Got conflicting batch_sizes")
    def test_batch_size_must_be_whole_rows(self):
        rb = make_buffer(6, 4)
        with pytest.raises(ValueError, match="batch_size=6"):
            rb.sample(6)

    def test_needs_two_dim_storage(self):
        rb = ReplayBuffer(storage=LazyTensorStorage(10), sampler=EnvMajorSampler(), batch_size=2)
        rb.extend(TensorDict({"x": torch.zeros(10)}, batch_size=[10]))
        with pytest.raises(ValueError, match="ndim=2"):
            rb.sample()

    def test_state_dict_round_trip(self, tmp_path):
        rb = make_buffer(8, 2, seed=6)
        rb.sample()
        sampler = rb._sampler
        sampler.dumps(tmp_path / "s")
        rest = [rb.sample()["env"][:, 0].tolist() for _ in range(2)]
        restored = EnvMajorSampler()
        restored.loads(tmp_path / "s")
        rb._sampler = restored
        assert [rb.sample()["env"][:, 0].tolist() for _ in range(2)] == rest
