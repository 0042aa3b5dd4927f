"""Tests for torchrl_ext.data.minibatches (env-major minibatches of whole rows)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from malicious_files import REFUSED, torch_file
from scipy import stats
from tensordict import TensorDict
from torchrl.data import LazyTensorStorage, ReplayBuffer

from torchrl_ext.data.minibatches import EnvMajorMinibatches, EnvMajorSampler


def make_batch(n_envs, steps):
    env = torch.arange(n_envs).view(-1, 1).expand(n_envs, steps)
    time = torch.arange(steps).view(1, -1).expand(n_envs, steps)
    return TensorDict({"env": env.clone(), "time": time.clone()}, batch_size=[n_envs, steps])


def rows_of(batch) -> list[int]:
    """The env indices of a minibatch's rows."""
    return batch["env"][:, 0].tolist()


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
            ({"envs_per_minibatch": 2.0}, TypeError, "envs_per_minibatch=2.0"),
            ({"envs_per_minibatch": True}, TypeError, "envs_per_minibatch=True"),
            ({"envs_per_minibatch": 2, "epochs": 1.0}, TypeError, "epochs=1.0"),
            ({"envs_per_minibatch": 2, "shuffle": 1}, TypeError, "shuffle=1"),
        ],
    )
    def test_bad_arguments(self, kwargs, error, match):
        with pytest.raises(error, match=match):
            EnvMajorMinibatches(make_batch(4, 2), **kwargs)

    @pytest.mark.parametrize(("n_envs", "per"), [(5, 2), (6, 3), (4, 9), (1, 1)])
    def test_without_shuffle_envs_come_in_order(self, n_envs, per):
        data = make_batch(n_envs, 3)
        mb = EnvMajorMinibatches(data, per, epochs=2, shuffle=False)
        expected = [list(range(i, min(i + per, n_envs))) for i in range(0, n_envs, per)] * 2
        got = [rows_of(batch) for batch in mb]
        assert got == expected and len(mb) == len(expected)
        assert all((b == data[e]).all() for b, e in zip(mb, expected, strict=True))

    def test_without_shuffle_no_generator_is_drawn(self):
        gen = torch.Generator().manual_seed(3)
        state = gen.get_state()
        list(EnvMajorMinibatches(make_batch(7, 2), 3, shuffle=False, generator=gen))
        assert torch.equal(gen.get_state(), state)

    def test_numpy_ints_are_accepted(self):
        mb = EnvMajorMinibatches(make_batch(5, 2), np.int64(2), epochs=np.int32(1))
        assert (mb.envs_per_minibatch, mb.epochs, len(mb)) == (2, 1, 3)

    def test_zero_envs_is_refused(self):
        """A batch of 0 envs would make epochs of one empty minibatch: refused up front."""
        with pytest.raises(ValueError, match=r"env dim \(dim 0\) has size 0.*\(0, 3\)"):
            EnvMajorMinibatches(make_batch(0, 3), 2)

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

    def test_batch_size_changed_within_an_epoch(self):
        """A new batch size applies at once; the epoch still takes each env exactly once."""
        rb = make_buffer(7, 2, seed=3)
        first = rb.sample(2 * 2)["env"][:, 0]
        second = rb.sample(4 * 2)["env"][:, 0]
        third = rb.sample(4 * 2)["env"][:, 0]
        assert (len(first), len(second), len(third)) == (2, 4, 1)
        assert sorted(torch.cat([first, second, third]).tolist()) == list(range(7))
        assert rb.sampler.ran_out

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

    def test_buffer_round_trip(self, tmp_path):
        rb = make_buffer(8, 2, seed=6)
        rb.sample()
        rb.dumps(tmp_path / "rb")
        rest = [rb.sample()["env"][:, 0].tolist() for _ in range(2)]
        restored = make_buffer(8, 2, seed=7)
        restored.loads(tmp_path / "rb")
        assert [restored.sample()["env"][:, 0].tolist() for _ in range(2)] == rest

    @pytest.mark.parametrize("through", ["sampler", "buffer"])
    def test_crafted_sampler_file_is_refused(self, tmp_path, marker, through):
        """``sampler.pt`` is read with weights_only=True: code in it never runs, the file is
        named, the sampler keeps its state. ``ReplayBuffer.loads`` reaches it the same way."""
        rb = make_buffer(8, 2, seed=6)
        rb.sample()
        rb.dumps(tmp_path / "rb")
        crafted = torch_file(tmp_path / "rb" / "sampler" / "sampler.pt", marker)
        sampler = EnvMajorSampler()
        target = ReplayBuffer(storage=LazyTensorStorage(16, ndim=2), sampler=sampler)
        load = sampler.loads if through == "sampler" else target.loads
        with pytest.raises(ValueError, match=f"{crafted} {REFUSED}"):
            load(crafted.parent if through == "sampler" else tmp_path / "rb")
        assert sampler.state_dict() == EnvMajorSampler().state_dict()

    @pytest.mark.parametrize("batch_size", [0, -4])
    def test_non_positive_batch_size_is_refused(self, batch_size):
        rb = make_buffer(6, 4)
        sampler = rb._sampler
        with pytest.raises(ValueError, match=f"positive multiple.*batch_size={batch_size}"):
            sampler.sample(rb._storage, batch_size)
        assert sampler.state_dict()["chunks"] == [] and not sampler.ran_out

    def test_float_batch_size_is_a_type_error(self):
        rb = make_buffer(6, 4)
        with pytest.raises(TypeError, match=r"batch_size=8\.0"):
            rb._sampler.sample(rb._storage, 8.0)

    @pytest.mark.parametrize(
        ("change", "error", "match"),
        [
            ({"chunks": [torch.tensor([0, 99])]}, ValueError, r"env ids \[99\] outside \[0, 8\)"),
            ({"chunks": [torch.tensor([-1])]}, ValueError, r"env ids \[-1\] outside"),
            ({"chunks": [torch.tensor([1, 2]), torch.tensor([2])]}, ValueError, "repeats"),
            ({"chunks": [torch.tensor([1.0, 2.0])]}, TypeError, "dtype=torch.float32"),
            ({"chunks": [torch.tensor([True])]}, TypeError, "dtype=torch.bool"),
            ({"chunks": [torch.zeros(2, 2, dtype=torch.long)]}, ValueError, r"shape \(2, 2\)"),
            ({"chunks": [torch.tensor([], dtype=torch.long)]}, ValueError, "non-empty"),
            ({"chunks": 3}, TypeError, "chunks=3"),
            ({"chunks": [["a"]]}, TypeError, r"chunks'\]\[0\]"),
            ({"shape": None}, ValueError, "shape=None"),
            ({"shape": (2,)}, ValueError, r"shape=\(2,\)"),
            ({"shape": (2, 0)}, ValueError, r"shape'\]\[1\] must be >= 1"),
            ({"shape": (2.0, 8)}, TypeError, r"shape'\]\[0\]=2.0"),
            ({"ran_out": 1}, TypeError, "ran_out"),
        ],
    )
    def test_load_state_dict_refuses_bad_state(self, change, error, match):
        rb = make_buffer(8, 2, seed=6)
        sampler = rb._sampler
        sampler.sample(rb._storage, 2 * 2)
        before = sampler.state_dict()
        with pytest.raises(error, match=match):
            sampler.load_state_dict({**before, **change})
        assert_same_state(sampler.state_dict(), before)

    def test_load_state_dict_needs_a_full_mapping(self):
        sampler = EnvMajorSampler()
        with pytest.raises(TypeError, match="mapping"):
            sampler.load_state_dict([1, 2])
        with pytest.raises(ValueError, match=r"lacks the entries \['shape'\]"):
            sampler.load_state_dict({"chunks": [], "ran_out": False})

    def test_load_state_dict_accepts_lists_and_numpy_ints(self):
        sampler = EnvMajorSampler()
        sampler.load_state_dict(
            {"chunks": [[3, 1], np.array([0])], "shape": (np.int64(2), 4), "ran_out": False}
        )
        state = sampler.state_dict()
        assert [c.tolist() for c in state["chunks"]] == [[3, 1], [0]]
        assert state["shape"] == (2, 4) and state["ran_out"] is False


def assert_same_state(state, before):
    assert state.keys() == before.keys()
    assert len(state["chunks"]) == len(before["chunks"])
    for chunk, old in zip(state["chunks"], before["chunks"], strict=True):
        assert torch.equal(chunk, old)
    assert state["shape"] == before["shape"] and state["ran_out"] == before["ran_out"]


# Random arguments that are all wrong: of a wrong type, or of the right type and a wrong value.
_not_ints = st.one_of(
    st.floats(allow_nan=True),
    st.text(max_size=3),
    st.booleans(),
    st.none(),
    st.lists(st.integers(), max_size=2),
    st.just(torch.tensor([1, 2])),
)
_bad_counts = st.one_of(_not_ints, st.integers(max_value=0))


class TestFuzzBadArguments:
    """Random bad arguments raise TypeError or ValueError and change nothing (hypothesis)."""

    @settings(max_examples=40, deadline=None)
    @given(
        n_envs=st.integers(0, 5),
        batch_dims=st.integers(0, 3),
        per=st.one_of(_bad_counts, st.integers(1, 4)),
        epochs=st.one_of(_bad_counts, st.integers(1, 3)),
        generator=st.one_of(st.none(), st.integers(), st.text(max_size=2)),
    )
    def test_minibatches_constructor(self, n_envs, batch_dims, per, epochs, generator):
        data = TensorDict({"x": torch.arange(n_envs * 6.0).view(n_envs, 2, 3)}, [n_envs, 2, 3])
        data.batch_size = data.batch_size[:batch_dims]
        snapshot = data.clone()
        good = (
            n_envs > 0
            and batch_dims >= 2
            and isinstance(per, int)
            and not isinstance(per, bool)
            and per >= 1
            and isinstance(epochs, int)
            and not isinstance(epochs, bool)
            and epochs >= 1
            and generator is None
        )
        if good:
            EnvMajorMinibatches(data, per, epochs=epochs, generator=generator)
        else:
            with pytest.raises((TypeError, ValueError)):
                EnvMajorMinibatches(data, per, epochs=epochs, generator=generator)
        assert (data == snapshot).all()

    @settings(max_examples=40, deadline=None)
    @given(batch_size=st.one_of(_not_ints, st.integers(-10, 0), st.integers(1, 3)))
    def test_sampler_sample(self, batch_size):
        """Row length is 4, so 1-3 steps (not whole rows) are bad too."""
        rb = make_buffer(5, 4)
        sampler = rb._sampler
        sampler.sample(rb._storage, 4)
        before = sampler.state_dict()
        with pytest.raises((TypeError, ValueError)):
            sampler.sample(rb._storage, batch_size)
        assert_same_state(sampler.state_dict(), before)

    @settings(max_examples=50, deadline=None)
    @given(
        data=st.data(),
        entry=st.sampled_from(["chunks", "shape", "ran_out", "missing", "not_a_dict"]),
    )
    def test_sampler_load_state_dict(self, data, entry):
        rb = make_buffer(5, 4, seed=1)
        sampler = rb._sampler
        sampler.sample(rb._storage, 4)
        before = sampler.state_dict()
        state = dict(before)
        if entry == "chunks":
            state["chunks"] = data.draw(_bad_chunks(n_envs=5))
        elif entry == "shape":
            state["shape"] = data.draw(
                st.one_of(
                    st.tuples(st.integers(max_value=0), st.integers(1, 5)),
                    st.tuples(st.integers(1, 5), st.integers(max_value=0)),
                    st.tuples(st.floats(), st.integers(1, 5)),
                    st.lists(st.integers(1, 5), min_size=0, max_size=4).filter(
                        lambda s: len(s) != 2
                    ),
                    st.text(max_size=2),
                    st.floats(),
                )
            )
        elif entry == "ran_out":
            state["ran_out"] = data.draw(st.one_of(st.integers(), st.none(), st.text(max_size=2)))
        elif entry == "missing":
            del state[data.draw(st.sampled_from(sorted(state)))]
        else:
            state = data.draw(st.one_of(st.none(), st.integers(), st.lists(st.integers())))
        with pytest.raises((TypeError, ValueError)):
            sampler.load_state_dict(state)
        assert_same_state(sampler.state_dict(), before)


def _bad_chunks(n_envs):
    """Chunk lists over ``n_envs`` envs that break one rule each."""
    ids = st.integers(0, n_envs - 1)
    out_of_range = st.one_of(st.integers(-(2**40), -1), st.integers(n_envs, 2**40))
    return st.one_of(
        st.lists(ids, min_size=0, max_size=3).flatmap(
            lambda good: st.lists(out_of_range, min_size=1, max_size=2).map(
                lambda bad: [torch.tensor(good + bad)]
            )
        ),
        ids.map(lambda i: [torch.tensor([i]), torch.tensor([i])]),
        st.lists(st.floats(), min_size=1, max_size=3).map(lambda x: [torch.tensor(x)]),
        st.just([torch.zeros(0, dtype=torch.long)]),
        st.just([torch.zeros(2, 1, dtype=torch.long)]),
        st.just([torch.tensor(True)]),
        st.one_of(st.integers(), st.text(max_size=2), st.none()),
        st.just([["x"]]),
    )
