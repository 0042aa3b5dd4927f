"""Tests of torchrl_ext.data.Tape: whole episodes laid end to end into fixed-length tapes."""

from __future__ import annotations

import pickle
import random

import pytest
import tape_reference as reference
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from scipy import stats
from tensordict import TensorDict
from torchrl.data import (
    LazyMemmapStorage,
    LazyTensorStorage,
    PrioritizedReplayBuffer,
    ReplayBuffer,
    TensorDictPrioritizedReplayBuffer,
    TensorDictReplayBuffer,
)
from torchrl.data.replay_buffers import SampleUnit as TorchRLSampleUnit
from torchrl.data.replay_buffers.samplers import (
    PrioritizedSampler,
    RandomSampler,
    SamplerWithoutReplacement,
)
from torchrl.modules import LSTMModule as TorchRLLSTMModule
from torchrl.modules import set_recurrent_mode

import torchrl_ext
from torchrl_ext import SampleUnit, Sequence, Tape
from torchrl_ext.data import _tapes
from torchrl_ext.modules import LSTMModule

SETTINGS = settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)

# -- helpers --------------------------------------------------------------------------------------


def done_of(lengths: list[int], unfinished: bool = False) -> list[bool]:
    """Done flags of episodes of ``lengths`` written one after the other.

    ``unfinished``: the last episode is still being written (its last flag is not set).
    """
    done = []
    for size in lengths:
        done += [False] * (size - 1) + [True]
    if unfinished:
        done[-1] = False
    return done


def records(done: list[bool], start: int = 0) -> TensorDict:
    """Records ``start ..`` with their done flags; ``"step"`` is each record's write number."""
    n = len(done)
    return TensorDict(
        {
            "obs": torch.arange(start, start + n, dtype=torch.float32).unsqueeze(-1),
            "step": torch.arange(start, start + n),
            ("next", "done"): torch.tensor(done, dtype=torch.bool).view(n, 1),
        },
        [n],
    )


def fill(capacity: int, done: list[bool], chunk: int | None = None, **kwargs):
    """A TensorDict buffer holding ``done`` written in chunks (wrapping when longer)."""
    storage = kwargs.pop("storage", None) or LazyTensorStorage(capacity)
    rb = TensorDictReplayBuffer(storage=storage, **kwargs)
    chunk = chunk or max(len(done), 1)
    for start in range(0, len(done), chunk):
        rb.extend(records(done[start : start + chunk], start))
    return rb


def ring_of(done: list[bool], capacity: int) -> reference.Ring:
    """The ring as written: slot ``i % capacity`` holds the last record written there."""
    written = min(len(done), capacity)
    slots = [False] * written
    for i, flag in enumerate(done):
        slots[i % capacity] = flag
    return reference.Ring(slots, len(done) >= capacity, (len(done) - 1) % capacity)


def as_records(index, info, shape) -> list[list[reference.Record]]:
    """The unit's output as reference records, one list per tape."""
    tapes = 1 if len(shape) == 1 else shape[0]
    if isinstance(index, tuple):
        coords = [c.reshape(tapes, -1).tolist() for c in index]
        slots = [list(zip(*(c[r] for c in coords), strict=True)) for r in range(tapes)]
        anchor = info["anchor_index"].reshape(tapes, -1, len(index)).tolist()
        anchors = [[tuple(a) for a in row] for row in anchor]
    else:
        slots = index.reshape(tapes, -1).tolist()
        anchors = info["anchor_index"].reshape(tapes, -1).tolist()
    columns = [
        info[key].reshape(tapes, -1).tolist()
        for key in ("validity_mask", "is_init", "sequence_id", "step_in_sequence")
    ]
    return [
        [
            reference.Record(slots[r][k], *(c[r][k] for c in columns), anchors[r][k])
            for k in range(len(slots[r]))
        ]
        for r in range(tapes)
    ]


def expand(unit: Tape, rb, anchors):
    return unit.expand(torch.as_tensor(anchors), {}, rb.storage)


# -- construction ---------------------------------------------------------------------------------


class TestTapeArguments:
    """Bad arguments are refused at construction, naming the argument and the value."""

    @pytest.mark.parametrize(
        "kwargs, error, match",
        [
            ({"length": 0}, ValueError, "length=0"),
            ({"length": -3}, ValueError, "length=-3"),
            ({"length": 4.0}, TypeError, "length=4.0"),
            ({"length": True}, TypeError, "length"),
            ({"length": 2**31}, ValueError, "length"),
            ({"length": 4, "rows": 0}, ValueError, "rows=0"),
            ({"length": 4, "rows": 1.5}, TypeError, "rows=1.5"),
            ({"length": 4, "rows": True}, TypeError, "rows"),
            ({"length": 4, "done_key": 3}, TypeError, "done_key=3"),
            ({"length": 4, "done_key": ()}, ValueError, "done_key"),
            ({"length": 4, "traj_key": ["a", ""]}, ValueError, "traj_key"),
            ({"length": 4, "priority_reduction": "sum"}, ValueError, "priority_reduction='sum'"),
            ({"length": 4, "priority_eta": 1.5}, ValueError, "priority_eta=1.5"),
            ({"length": 4, "priority_eta": "x"}, TypeError, "priority_eta"),
            ({"length": 4, "is_init_key": ""}, ValueError, "is_init_key"),
        ],
    )
    def test_rejects(self, kwargs, error, match):
        with pytest.raises(error, match=match):
            Tape(**kwargs)

    def test_settings_after_length_are_keywords(self):
        with pytest.raises(TypeError):
            Tape(4, 2)

    @pytest.mark.parametrize(
        "name, value", [("length", 3), ("rows", 2), ("done_key", "d"), ("priority_eta", 0.5)]
    )
    def test_settings_are_fixed_after_construction(self, name, value):
        unit = Tape(4)
        with pytest.raises(AttributeError, match=f"Tape.{name} is fixed"):
            setattr(unit, name, value)

    def test_settings_read_back_normalised(self):
        unit = Tape(6, rows=2, done_key=["next", "done"], priority_reduction="mixture")
        assert unit.length == 6 and unit.rows == 2 and unit.done_key == ("next", "done")
        assert unit.traj_key is None and unit.is_init_key == "is_init"
        assert unit.shape == (2, 6) and Tape(6).shape == (6,)

    def test_is_a_torchrl_sample_unit_but_not_a_window(self):
        unit = Tape(4)
        assert isinstance(unit, SampleUnit) and isinstance(unit, TorchRLSampleUnit)
        assert not isinstance(unit, Sequence)

    def test_exported_like_sequence(self):
        assert torchrl_ext.Tape is Tape is torchrl_ext.data.Tape
        assert "Tape" in torchrl_ext.__all__ and "Tape" in torchrl_ext.data.__all__

    def test_repr(self):
        assert repr(Tape(8, rows=2)) == (
            "Tape(length=8, rows=2, done_key=('next', 'done'), priority_reduction='max')"
        )
        assert repr(Tape(8, traj_key="traj", priority_reduction="mean")) == (
            "Tape(length=8, rows=None, traj_key='traj', priority_reduction='mean')"
        )

    @pytest.mark.parametrize("traj_key", [None, "traj"])
    def test_pickle_round_trip(self, traj_key):
        unit = Tape(6, rows=2, traj_key=traj_key)
        rb = TensorDictReplayBuffer(storage=LazyTensorStorage(10), sample_unit=unit)
        data = records(done_of([3, 5, 2]))
        data["traj"] = torch.tensor([0, 0, 0, 1, 1, 1, 1, 1, 2, 2])
        rb.extend(data)
        before = expand(unit, rb, [4, 0, 9, 6])
        clone = pickle.loads(pickle.dumps(unit))
        assert repr(clone) == repr(unit)
        after = expand(clone, rb, [4, 0, 9, 6])
        assert torch.equal(before[0], after[0])
        assert torch.equal(before[1]["is_init"], after[1]["is_init"])


# -- exact cases ----------------------------------------------------------------------------------


class TestTapeExact:
    """Hand-computed tapes over episodes 0-2, 3-7 and 8-9 (lengths 3, 5, 2)."""

    @staticmethod
    def buffer(**kwargs):
        return fill(10, done_of([3, 5, 2]), **kwargs)

    def test_first_fit_with_a_skip_and_tails(self):
        # 4 -> 3..7 starts tape 0 (room 1 left); 0 -> 0..2 fits only tape 1; 9 -> 8..9 follows
        # it (room 1 left); 6 -> 3..7 fits nowhere: skipped
        index, info = expand(Tape(6, rows=2), self.buffer(), [4, 0, 9, 6])
        assert index.tolist() == [[3, 4, 5, 6, 7, 7], [0, 1, 2, 8, 9, 9]]
        assert info["validity_mask"].tolist() == [[True] * 5 + [False]] * 2
        assert info["is_init"].tolist() == [
            [True, False, False, False, False, True],
            [True, False, False, True, False, True],
        ]
        assert info["sequence_id"].tolist() == [[0, 0, 0, 0, 0, -1], [1, 1, 1, 2, 2, -1]]
        assert info["step_in_sequence"].tolist() == [[0, 1, 2, 3, 4, -1], [0, 1, 2, 0, 1, -1]]
        assert info["anchor_index"].tolist() == [[4, 4, 4, 4, 4, 4], [0, 0, 0, 9, 9, 9]]
        assert "learning_mask" not in info

    def test_one_tape_exactly_full(self):
        index, info = expand(Tape(10), self.buffer(), [1, 5, 8, 2])
        assert index.tolist() == list(range(10))  # the fourth draw finds no room
        assert info["validity_mask"].all()
        assert info["is_init"].nonzero().view(-1).tolist() == [0, 3, 8]
        assert info["sequence_id"].tolist() == [0] * 3 + [1] * 5 + [2] * 2

    def test_an_episode_drawn_twice_is_laid_out_twice(self):
        index, info = expand(Tape(7), self.buffer(), [8, 9, 2])
        assert index.tolist() == [8, 9, 8, 9, 0, 1, 2]
        assert info["is_init"].tolist() == [True, False, True, False, True, False, False]
        assert info["anchor_index"].tolist() == [8, 8, 9, 9, 2, 2, 2]

    def test_tapes_no_draw_reached_are_all_tail(self):
        index, info = expand(Tape(6, rows=3), self.buffer(), [4])
        assert index.tolist() == [[3, 4, 5, 6, 7, 7], [3] * 6, [3] * 6]
        assert info["validity_mask"].tolist() == [[True] * 5 + [False], [False] * 6, [False] * 6]
        assert info["is_init"].tolist() == [
            [True, False, False, False, False, True],
            [True] + [False] * 5,
            [True] + [False] * 5,
        ]
        assert (info["sequence_id"][1:] == -1).all() and (info["anchor_index"] == 4).all()

    def test_rows_one_keeps_the_row_dim(self):
        index, info = expand(Tape(5, rows=1), self.buffer(), [0])
        assert index.shape == (1, 5) and info["is_init"].shape == (1, 5)
        assert index.tolist() == [[0, 1, 2, 2, 2]]
        assert info["is_init"].tolist() == [[True, False, False, True, False]]

    def test_episode_longer_than_the_tape_is_refused(self):
        unit = Tape(4)
        with pytest.raises(ValueError, match=r"anchor 6 .* longer than length=4 \(at least 5"):
            expand(unit, self.buffer(), [0, 6])
        # any drawn anchor is checked, even one the tape would have skipped
        with pytest.raises(ValueError, match="length=4"):
            expand(Tape(4), self.buffer(), [0, 9, 5])

    def test_long_episode_elsewhere_in_storage_does_not_matter(self):
        index, _ = expand(Tape(4), self.buffer(), [0, 9])
        assert index.tolist() == [0, 1, 2, 2]  # 8..9 does not fit after 0..2: skipped

    def test_unfinished_newest_episode_ends_at_the_newest_record(self):
        rb = fill(10, done_of([3, 4], unfinished=True))  # 3..6 still being written
        index, info = expand(Tape(6), rb, [5])
        assert index.tolist() == [3, 4, 5, 6, 6, 6]
        assert info["validity_mask"].tolist() == [True] * 4 + [False] * 2
        rb.extend(records([False, True], 7))  # the episode goes on, then ends at 8
        index, _ = expand(Tape(6), rb, [5])
        assert index.tolist() == [3, 4, 5, 6, 7, 8]

    def test_partly_overwritten_oldest_episode_starts_at_the_oldest_record(self):
        # 12 records in 8 slots: slots hold records 4..11; episodes 0-4, 5-8, 9-11 written,
        # so the oldest stored episode is records 4 (slot 4) only, and 9-11 sit in slots 1-3
        rb = fill(8, done_of([5, 4, 3]), chunk=5)
        index, info = expand(Tape(4), rb, [4, 2])
        assert index.tolist() == [4, 1, 2, 3]
        assert info["is_init"].tolist() == [True, True, False, False]

    def test_episode_across_the_storage_end(self):
        rb = fill(8, done_of([6, 5]), chunk=4)  # records 3..10 stored; episode 6-10 wraps
        index, info = expand(Tape(7), rb, [0])
        assert index.tolist() == [6, 7, 0, 1, 2, 2, 2]
        assert info["step_in_sequence"].tolist() == [0, 1, 2, 3, 4, -1, -1]

    def test_done_key_none_is_one_trajectory(self):
        rb = fill(10, done_of([3, 5, 2]))
        with pytest.raises(ValueError, match="at least 11"):
            expand(Tape(10, done_key=None), fill(20, [False] * 11), [0])
        index, info = expand(Tape(10, done_key=None), rb, [7])
        assert index.tolist() == list(range(10)) and info["is_init"].sum() == 1

    def test_per_anchor_info_follows_its_episode(self):
        sampled = {"priority_weight": torch.tensor([0.5, 2.0, 4.0]), "scalar": 3}
        _, info = Tape(6, rows=2).expand(torch.tensor([4, 0, 9]), sampled, self.buffer().storage)
        assert info["priority_weight"].tolist() == [[0.5] * 6, [2.0] * 3 + [4.0] * 3]
        assert info["scalar"] == 3

    def test_misaligned_info_is_refused(self):
        with pytest.raises(ValueError, match="'priority_weight' has 2 rows"):
            Tape(6).expand(
                torch.tensor([0, 1, 2]), {"priority_weight": torch.ones(2)}, self.buffer().storage
            )

    def test_no_anchor_is_refused(self):
        with pytest.raises(ValueError, match="batch_size >= 1"):
            expand(Tape(6), self.buffer(), torch.zeros(0, dtype=torch.long))

    @pytest.mark.parametrize("anchor", [-1, 10])
    def test_out_of_range_anchor(self, anchor):
        rb = fill(20, done_of([3, 5, 2]))
        with pytest.raises(IndexError, match=f"coordinate {anchor} is out of range"):
            expand(Tape(6), rb, [0, anchor])

    def test_float_anchors_are_refused(self):
        with pytest.raises(TypeError, match="integer"):
            expand(Tape(6), self.buffer(), torch.tensor([1.0]))

    def test_missing_done_key_is_named(self):
        with pytest.raises(ValueError, match="'terminal'"):
            expand(Tape(6, done_key="terminal"), self.buffer(), [0])

    def test_stored_key_colliding_with_info_is_refused(self):
        data = records(done_of([3, 5, 2]))
        data["sequence_id"] = torch.zeros(10)
        rb = TensorDictReplayBuffer(storage=LazyTensorStorage(10))
        rb.extend(data)
        with pytest.raises(ValueError, match="'sequence_id'"):
            expand(Tape(6), rb, [0])

    def test_stored_learning_mask_and_is_init_flags_are_fine(self):
        data = records(done_of([3, 5, 2]))
        data["learning_mask"] = torch.ones(10, dtype=torch.bool)  # not an entry Tape writes
        data["is_init"] = torch.zeros(10, 1, dtype=torch.bool)  # superseded by the tape's
        rb = TensorDictReplayBuffer(
            storage=LazyTensorStorage(10), sample_unit=Tape(5), batch_size=2
        )
        rb.extend(data)
        sample = rb.sample()
        assert sample["is_init"].shape == (5,) and bool(sample["is_init"][0])


# -- the slow reference ---------------------------------------------------------------------------


def random_layout(rng: random.Random) -> tuple[int, list[bool], int]:
    """A random ring: capacity, done flags as written, chunk size."""
    capacity = rng.randint(3, 40)
    longest = rng.randint(1, 12)
    lengths = [rng.randint(1, longest) for _ in range(rng.randint(1, 3 * capacity))]
    done = done_of(lengths, unfinished=rng.random() < 0.5)
    return capacity, done, rng.randint(1, 9)


class TestTapeReference:
    """Tapes equal the plain-loop reference on random rings (wrap, unfinished episodes).

    Done flags are read a few steps around each draw first, then further where an episode goes
    on: every test runs with a first read of 1 step (many re-reads) and of the default.
    """

    @pytest.fixture(autouse=True, params=[1, _tapes.FIRST_REACH])
    def first_reach(self, request, monkeypatch):
        monkeypatch.setattr(_tapes, "FIRST_REACH", request.param)
        return request.param

    @pytest.mark.parametrize("seed", range(40))
    def test_matches_reference_loop(self, seed):
        rng = random.Random(seed)
        capacity, done, chunk = random_layout(rng)
        rb = fill(capacity, done, chunk)
        ring = ring_of(done, capacity)
        for _ in range(4):
            rows = rng.choice([None, 1, 2, 4])
            length = rng.randint(1, 16)
            anchors = [rng.randrange(ring.written) for _ in range(rng.randint(1, 12))]
            episodes = [reference.episode_in_ring(ring, a) for a in anchors]
            self._compare(Tape(length, rows=rows), rb, anchors, episodes, length, rows)

    @staticmethod
    def _compare(unit, rb, anchors, episodes, length, rows, coords=None):
        try:
            expected = reference.build(episodes, anchors, length, rows or 1)
        except reference.TooLong as err:
            with pytest.raises(ValueError, match=f"longer than length={length}"):
                unit.expand(coords or torch.tensor(anchors), {}, rb.storage)
            assert err.args[0] > length
            return
        index, info = unit.expand(coords or torch.tensor(anchors), {}, rb.storage)
        assert tuple(info["is_init"].shape) == ((length,) if rows is None else (rows, length))
        assert as_records(index, info, info["is_init"].shape) == expected

    @pytest.mark.parametrize("seed", range(15))
    def test_interleaved_trajectory_ids(self, seed):
        """Episodes as runs of one id in write order, interleaved in storage."""
        rng = random.Random(seed)
        capacity = rng.randint(4, 30)
        ids, next_id, live = [], 0, []
        for _ in range(rng.randint(1, 3 * capacity)):
            if not live or (len(live) < 3 and rng.random() < 0.3):
                live.append([next_id, rng.randint(1, 8)])
                next_id += 1
            trajectory = rng.choice(live)
            ids.append(trajectory[0])
            trajectory[1] -= 1
            if trajectory[1] == 0:
                live.remove(trajectory)
        unit = Tape(12, rows=2, traj_key="traj")
        rb = TensorDictReplayBuffer(storage=LazyTensorStorage(capacity), sample_unit=unit)
        chunk = rng.randint(1, 7)
        for start in range(0, len(ids), chunk):
            part = ids[start : start + chunk]
            rb.extend(TensorDict({"traj": torch.tensor(part)}, [len(part)]))
            if start == 0:  # the first expansion builds the index; later writes update it
                unit.expand(torch.tensor([0]), {}, rb.storage)
        serial = {i % capacity: i for i in range(len(ids))}  # slot -> write number
        slot_ids = {slot: ids[i] for slot, i in serial.items()}
        anchors = [rng.randrange(len(rb)) for _ in range(rng.randint(1, 8))]
        episodes = [reference.episode_by_id(slot_ids, serial, a) for a in anchors]
        self._compare(unit, rb, anchors, episodes, 12, 2)

    @pytest.mark.parametrize("seed", range(6))
    def test_time_by_lane_storage_equals_each_lane_alone(self, seed):
        rng = random.Random(seed)
        gen = torch.Generator().manual_seed(seed)
        steps, lanes, capacity = rng.randint(5, 40), 3, 16
        steps += steps % 5 == 1  # torchrl's extend cannot tell a [lanes, 1] chunk's dims apart
        done = torch.rand(steps, lanes, generator=gen) < 0.2
        rb = TensorDictReplayBuffer(storage=LazyTensorStorage(capacity * lanes, ndim=2))
        for t0 in range(0, steps, 5):
            part = done[t0 : t0 + 5].T  # the collector layout: [lanes, time]
            rb.extend(TensorDict({("next", "done"): part.unsqueeze(-1)}, part.shape))
        written = min(steps, capacity)
        time = [rng.randrange(written) for _ in range(8)]
        lane = [rng.randrange(lanes) for _ in range(8)]
        episodes = []
        for t, j in zip(time, lane, strict=True):
            ring = ring_of(done[:, j].tolist(), capacity)
            episodes.append([(s, j) for s in reference.episode_in_ring(ring, t)])
        anchors = list(zip(time, lane, strict=True))
        coords = (torch.tensor(time), torch.tensor(lane))
        self._compare(Tape(40, rows=2), rb, anchors, episodes, 40, 2, coords)

    @pytest.mark.parametrize("seed", range(3))
    def test_long_episodes(self, seed):
        """Episodes of hundreds of records, read in several growing steps."""
        rng = random.Random(seed)
        done = done_of([rng.randint(1, 400) for _ in range(12)], unfinished=True)
        capacity = rng.randint(600, 2000)
        rb = fill(capacity, done, 97)
        ring = ring_of(done, capacity)
        for length, rows in ((400, 2), (rng.randint(150, 399), None)):
            anchors = [rng.randrange(ring.written) for _ in range(6)]
            episodes = [reference.episode_in_ring(ring, a) for a in anchors]
            self._compare(Tape(length, rows=rows), rb, anchors, episodes, length, rows)

    def test_memmap_storage_equals_tensor_storage(self, tmp_path):
        rng = random.Random(3)
        capacity, done, chunk = 30, done_of([rng.randint(1, 9) for _ in range(20)]), 7
        a = fill(capacity, done, chunk)
        b = fill(capacity, done, chunk, storage=LazyMemmapStorage(capacity, scratch_dir=tmp_path))
        anchors = torch.tensor([rng.randrange(capacity) for _ in range(10)])
        unit = Tape(12, rows=3)
        ia, fa = unit.expand(anchors, {}, a.storage)
        ib, fb = unit.expand(anchors, {}, b.storage)
        assert torch.equal(ia, ib) and torch.equal(fa["is_init"], fb["is_init"])


# -- invariants over random layouts ---------------------------------------------------------------


class TestTapeInvariants:
    """Read from the stored records alone: episodes whole, is_init exactly at their starts,
    tails only at the end of a tape, repeating its last record."""

    @SETTINGS
    @given(
        lengths=st.lists(st.integers(1, 9), min_size=1, max_size=40),
        unfinished=st.booleans(),
        capacity=st.integers(4, 60),
        chunk=st.integers(1, 11),
        rows=st.sampled_from([None, 1, 3]),
        length=st.integers(9, 20),
        draws=st.integers(1, 12),
        seed=st.integers(0, 2**16),
    )
    def test_invariants(self, lengths, unfinished, capacity, chunk, rows, length, draws, seed):
        done = done_of(lengths, unfinished)
        rb = fill(
            capacity,
            done,
            chunk,
            sample_unit=Tape(length, rows=rows),
            batch_size=draws,
            generator=torch.Generator().manual_seed(seed),
        )
        sample = rb.sample().reshape(-1, length)
        oldest = max(0, len(done) - capacity)  # write number of the oldest stored record
        for tape in sample.unbind(0):
            self._check_tape(tape, done, oldest)

    @staticmethod
    def _check_tape(tape, done, oldest):
        step = tape["step"].tolist()
        valid = tape["validity_mask"].tolist()
        is_init = tape["is_init"].tolist()
        sequence_id = tape["sequence_id"].tolist()
        filled = sum(valid)
        assert valid == [True] * filled + [False] * (len(valid) - filled)  # tail at the end
        assert is_init[0]
        for k in range(len(step)):
            if k >= filled:  # the tail repeats the last record; is_init only where it starts
                assert filled == 0 or step[k] == step[filled - 1]
                assert is_init[k] == (k == filled)
                assert sequence_id[k] == -1
                continue
            starts = k == 0 or sequence_id[k] != sequence_id[k - 1]
            assert is_init[k] == starts
            if starts:  # an episode's first record: after a done flag, or the oldest stored
                assert step[k] == oldest or done[step[k] - 1]
            else:  # consecutive records of one episode
                assert step[k] == step[k - 1] + 1 and not done[step[k - 1]]
            ends = k == filled - 1 or sequence_id[k + 1] != sequence_id[k]
            if ends:  # an episode's last record: done, or the newest record
                assert done[step[k]] or step[k] == len(done) - 1


# -- sampling distributions -----------------------------------------------------------------------


class TestTapeStatistics:
    """Each draw selects the episode holding its anchor: the first episode of every sample
    (never skipped) is distributed as the sampler's mass over episodes (chi-square, fixed
    seeds)."""

    LENGTHS = [3, 5, 2, 7, 4, 1, 6]

    @classmethod
    def _episode_of_slot(cls) -> list[int]:
        return [e for e, size in enumerate(cls.LENGTHS) for _ in range(size)]

    @classmethod
    def _first_episodes(cls, rb, samples: int) -> torch.Tensor:
        episode_of = torch.tensor(cls._episode_of_slot())
        counts = torch.zeros(len(cls.LENGTHS))
        for _ in range(samples):
            first = rb.sample()["index"][0]
            counts[episode_of[first]] += 1
        return counts

    @classmethod
    def _buffer(cls, unit: Tape, prioritized: bool = False):
        kwargs = {
            "storage": LazyTensorStorage(sum(cls.LENGTHS)),
            "sample_unit": unit,
            "batch_size": 3,
            "generator": torch.Generator().manual_seed(0),
        }
        if prioritized:
            rb = TensorDictPrioritizedReplayBuffer(alpha=1.0, beta=1.0, **kwargs)
        else:
            rb = TensorDictReplayBuffer(**kwargs)
        rb.extend(records(done_of(cls.LENGTHS)))
        return rb

    def test_uniform_anchors_draw_episodes_by_length(self):
        counts = self._first_episodes(self._buffer(Tape(8)), 2000)
        expected = torch.tensor(self.LENGTHS, dtype=torch.float) / sum(self.LENGTHS) * 2000
        assert stats.chisquare(counts.numpy(), expected.numpy()).pvalue > 0.01

    def test_prioritized_anchors_draw_episodes_by_their_mass(self):
        rb = self._buffer(Tape(8), prioritized=True)
        total = sum(self.LENGTHS)
        priority = torch.rand(total, generator=torch.Generator().manual_seed(1)) * 4 + 0.1
        rb.update_priority(torch.arange(total), priority)
        mass = torch.zeros(len(self.LENGTHS)).index_add_(
            0, torch.tensor(self._episode_of_slot()), priority
        )
        counts = self._first_episodes(rb, 2000)
        expected = mass / mass.sum() * 2000
        assert stats.chisquare(counts.numpy(), expected.numpy()).pvalue > 0.01

    def test_episode_priorities_written_by_the_unit_weight_episodes(self):
        """After ``update_priority``, an episode weighs ``length * priority`` (alpha 1)."""
        unit = Tape(8)
        rb = self._buffer(unit, prioritized=True)
        total = sum(self.LENGTHS)
        episode_of = torch.tensor(self._episode_of_slot())
        per_episode = torch.tensor([4.0, 0.5, 3.0, 1.0, 2.0, 6.0, 0.25])
        sample = {  # every stored record once, as one batch of episodes
            "index": torch.arange(total),
            "sequence_id": episode_of,
            "validity_mask": torch.ones(total, dtype=torch.bool),
        }
        unit.update_priority(rb, sample, per_episode[episode_of])
        counts = self._first_episodes(rb, 2000)
        mass = per_episode * torch.tensor(self.LENGTHS, dtype=torch.float)
        assert stats.chisquare(counts.numpy(), (mass / mass.sum() * 2000).numpy()).pvalue > 0.01


# -- priorities -----------------------------------------------------------------------------------


def prioritized_tapes(unit: Tape, lengths=(3, 5, 2, 4, 6), batch_size: int = 6):
    """A prioritized TensorDict buffer (alpha 1) sampling tapes through ``unit``."""
    total = sum(lengths)
    rb = TensorDictPrioritizedReplayBuffer(
        alpha=1.0,
        beta=1.0,
        storage=LazyTensorStorage(total),
        sample_unit=unit,
        batch_size=batch_size,
        generator=torch.Generator().manual_seed(0),
    )
    rb.extend(records(done_of(list(lengths))))
    return rb


def tree(rb) -> list[float]:
    return [rb.sampler._sum_tree[i] for i in range(len(rb))]


class TestTapePriorities:
    """Priorities per episode, written to every record of the episode; routed stock calls."""

    @staticmethod
    def _info():
        rb = fill(10, done_of([3, 5, 2]))
        unit = Tape(6, rows=2)
        index, info = expand(unit, rb, [4, 0, 9, 6])
        return unit, {**info, "index": index}

    def test_reductions_by_hand(self):
        priority = torch.tensor(
            [[1.0, 2.0, 9.0, 0.0, 3.0, 100.0],  # episode 3..7, then the tail (ignored)
             [4.0, 1.0, 1.0, 2.0, 6.0, float("nan")]]  # episodes 0..2 and 8..9, tail
        )  # fmt: skip
        unit, info = self._info()
        records, value = unit.reduce_priority(info, priority)
        assert records.tolist() == list(range(10))
        assert value.tolist() == [4.0] * 3 + [9.0] * 5 + [6.0] * 2
        for reduction, expected in (
            ("mean", [2.0] * 3 + [3.0] * 5 + [4.0] * 2),
            ("mixture", [0.5 * 4 + 1.0] * 3 + [0.5 * 9 + 1.5] * 5 + [0.5 * 6 + 2.0] * 2),
        ):
            unit = Tape(6, rows=2, priority_reduction=reduction, priority_eta=0.5)
            assert torch.allclose(unit.reduce_priority(info, priority)[1], torch.tensor(expected))

    def test_an_episode_laid_out_twice_keeps_the_larger(self):
        rb = fill(10, done_of([3, 5, 2]))
        unit = Tape(7, priority_reduction="mean")
        index, info = expand(unit, rb, [8, 9, 2])
        priority = torch.tensor([1.0, 1.0, 5.0, 3.0, 2.0, 2.0, 2.0])
        records, value = unit.reduce_priority({**info, "index": index}, priority)
        assert records.tolist() == [0, 1, 2, 8, 9]
        assert value.tolist() == [2.0, 2.0, 2.0, 4.0, 4.0]

    @pytest.mark.parametrize("rows", [None, 3])
    @pytest.mark.parametrize("reduction", ["max", "mean", "mixture"])
    def test_update_priority_round_trip(self, rows, reduction):
        unit = Tape(8, rows=rows, priority_reduction=reduction)
        rb = prioritized_tapes(unit)
        sample = rb.sample()
        sample["td_error"] = torch.rand(sample.shape, generator=torch.Generator().manual_seed(1))
        records, expected = unit.reduce_priority(sample, sample["td_error"])
        before = tree(rb)
        unit.update_priority(rb, sample)
        after = tree(rb)
        valid = sample["index"][sample["validity_mask"]]
        assert sorted(records.tolist()) == sorted(set(valid.tolist()))
        for record, value in zip(records.tolist(), expected.tolist(), strict=True):
            assert after[record] == pytest.approx(value + rb.sampler._eps, abs=1e-6)
        # every record of a sampled episode got its episode's value
        for k in sample["sequence_id"].unique().tolist():
            if k >= 0:
                members = sample["index"][sample["sequence_id"] == k].tolist()
                assert len({after[m] for m in members}) == 1
        assert all(after[i] == before[i] for i in range(len(rb)) if i not in set(valid.tolist()))

    def test_stock_call_is_routed_through_the_unit(self):
        unit = Tape(8, rows=2, priority_reduction="mean")
        ours, theirs = prioritized_tapes(unit), prioritized_tapes(unit)
        sample = ours.sample()
        assert torch.equal(theirs.sample()["index"], sample["index"])  # same generator seed
        sample["td_error"] = torch.rand(sample.shape, generator=torch.Generator().manual_seed(4))
        unit.update_priority(ours, sample)
        theirs.update_tensordict_priority(sample)  # TorchRL's call, routed at the first sample
        assert tree(ours) == tree(theirs)

    def test_restored_stock_call_writes_records_unreduced(self):
        """Why the unit routes the stock call: TorchRL writes each record's own priority."""
        unit = Tape(8, priority_reduction="mean")
        rb = prioritized_tapes(unit)
        sample = rb.sample()
        unit.restore_priority_calls(rb)
        assert "update_tensordict_priority" not in vars(rb)
        sample["td_error"] = torch.arange(8.0) + 1
        rb.update_tensordict_priority(sample)
        index = sample["index"].tolist()
        once = [k for k in range(8) if index.count(index[k]) == 1]
        assert once
        for k in once:  # each record's own value, not its episode's mean
            assert tree(rb)[index[k]] == pytest.approx(k + 1.0, abs=1e-6)

    def test_bad_priorities_never_reach_the_tree(self):
        unit = Tape(8, rows=2)
        rb = prioritized_tapes(unit)
        sample = rb.sample()
        before = tree(rb)
        td_error = torch.ones(sample.shape)
        td_error[0, 1] = float("nan")
        sample["td_error"] = td_error
        with pytest.raises(ValueError, match="got nan for record 1 of the sample"):
            rb.update_tensordict_priority(sample)
        with pytest.raises(ValueError, match="finite and >= 0"):
            unit.update_priority(rb, sample, -td_error.nan_to_num(1.0))
        assert tree(rb) == before

    def test_bad_priority_on_the_tail_is_ignored(self):
        unit, info = self._info()
        priority = torch.ones(2, 6)
        priority[:, -1] = float("nan")
        assert unit.reduce_priority(info, priority)[1].isfinite().all()

    def test_wrong_priority_size_and_missing_entries(self):
        unit, info = self._info()
        with pytest.raises(ValueError, match="one value per record"):
            unit.reduce_priority(info, torch.ones(11))
        with pytest.raises(ValueError, match="'index'"):
            unit.reduce_priority({k: v for k, v in info.items() if k != "index"}, torch.ones(12))
        tape = Tape(8)
        rb = prioritized_tapes(tape)
        with pytest.raises(ValueError, match="'td_error'"):
            tape.update_priority(rb, rb.sample())
        with pytest.raises(TypeError, match="buffer=dict"):
            unit.update_priority({}, info, torch.ones(12))

    def test_plain_prioritized_buffer_with_info(self):
        unit = Tape(8, rows=2)
        rb = PrioritizedReplayBuffer(
            alpha=1.0, beta=1.0, storage=LazyTensorStorage(20), sample_unit=unit, batch_size=6
        )
        rb.extend(records(done_of([3, 5, 2, 4, 6])))
        sample, info = rb.sample(return_info=True)
        assert sample.shape == (2, 8) and info["index"].shape == (2, 8)
        rb.update_priority(*unit.reduce_priority(info, torch.full((2, 8), 5.0)))
        written = set(info["index"][info["validity_mask"]].tolist())
        assert all(abs(tree(rb)[i] - 5.0) < 1e-4 for i in written)

    def test_prioritized_update_steers_sampling(self):
        unit = Tape(8, priority_reduction="mean")
        rb = prioritized_tapes(unit, batch_size=4)
        rb.update_priority(torch.arange(20), torch.full((20,), 1e-4))
        sample = rb.sample()
        episode = sample["sequence_id"] == 0
        unit.update_priority(rb, sample, torch.where(episode, 100.0, 1e-4))
        favoured = set(sample["index"][episode].tolist())
        hits = sum(int(rb.sample()["index"][0]) in favoured for _ in range(50))
        assert hits > 45


# -- stock buffers and samplers -------------------------------------------------------------------


class TestTapeBuffers:
    """Stock TorchRL buffers and samplers, reproducible under a seeded generator."""

    @staticmethod
    def _buffer(sampler, buffer_cls=TensorDictReplayBuffer, seed=0, rows=3):
        rb = buffer_cls(
            storage=LazyTensorStorage(50),
            sampler=sampler(),
            sample_unit=Tape(10, rows=rows),
            batch_size=8,
            generator=torch.Generator().manual_seed(seed),
        )
        rng = random.Random(5)
        rb.extend(records(done_of([rng.randint(1, 10) for _ in range(12)])))
        return rb

    SAMPLERS = {
        "random": RandomSampler,
        "without_replacement": SamplerWithoutReplacement,
        "prioritized": lambda: PrioritizedSampler(50, alpha=0.7, beta=0.5),
    }

    @pytest.mark.parametrize("sampler", list(SAMPLERS))
    def test_seeded_generators_give_the_same_tapes(self, sampler):
        a, b = self._buffer(self.SAMPLERS[sampler]), self._buffer(self.SAMPLERS[sampler])
        for _ in range(4):
            x, y = a.sample(), b.sample()
            assert x.shape == (3, 10)
            for key in ("index", "is_init", "validity_mask", "step"):
                assert torch.equal(x[key], y[key])
        if sampler == "prioritized":
            assert x["priority_weight"].shape == (3, 10)
        c = self._buffer(self.SAMPLERS[sampler], seed=1)
        assert any(not torch.equal(c.sample()["index"], a.sample()["index"]) for _ in range(4))

    def test_plain_replay_buffer_returns_info(self):
        rb = self._buffer(RandomSampler, buffer_cls=ReplayBuffer, rows=None)
        data, info = rb.sample(return_info=True)
        assert data.shape == (10,) and info["is_init"].shape == (10,)
        assert info["index"].shape == (10,) and "is_init" not in data.keys()

    def test_dumps_loads_round_trip(self, tmp_path):
        def make():
            return TensorDictReplayBuffer(
                storage=LazyTensorStorage(30),
                sample_unit=Tape(9, rows=2),
                batch_size=6,
                generator=torch.Generator().manual_seed(0),
            )

        rb = make()
        rb.extend(records(done_of([random.Random(2).randint(1, 9) for _ in range(12)])))
        rb.dumps(tmp_path)
        restored = make()
        restored.loads(tmp_path)
        a, b = rb.sample(), restored.sample()
        for key in ("index", "is_init", "validity_mask", "step"):
            assert torch.equal(a[key], b[key])

    @pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
    def test_cuda_storage_matches_cpu(self):
        rng = random.Random(7)
        done = done_of([rng.randint(1, 9) for _ in range(40)], unfinished=True)
        cpu = fill(100, done, 13)
        cuda = fill(100, done, 13, storage=LazyTensorStorage(100, device="cuda"))
        anchors = torch.tensor([rng.randrange(100) for _ in range(16)])
        unit = Tape(12, rows=4)
        a_index, a_info = unit.expand(anchors, {}, cpu.storage)
        b_index, b_info = unit.expand(anchors.cuda(), {}, cuda.storage)
        assert b_index.is_cuda and torch.equal(a_index, b_index.cpu())
        for key in ("validity_mask", "is_init", "sequence_id", "anchor_index"):
            assert torch.equal(a_info[key], b_info[key].cpu())


# -- a recurrent module over tapes ----------------------------------------------------------------


class TestTapeRecurrent:
    """A recurrent module over a tape gives, per episode, its outputs on the episode alone."""

    @pytest.mark.parametrize("module", [LSTMModule, TorchRLLSTMModule])
    @pytest.mark.parametrize("rows", [None, 3])
    def test_lstm_per_episode_equals_each_episode_alone(self, module, rows):
        torch.manual_seed(0)
        lstm = module(input_size=1, hidden_size=8, in_key="obs", out_key="features")
        rng = random.Random(1)
        rb = fill(
            80,
            done_of([rng.randint(1, 12) for _ in range(15)], unfinished=True),
            sample_unit=Tape(16, rows=rows),
            batch_size=12,
            generator=torch.Generator().manual_seed(0),
        )
        tape = rb.sample()
        tape["obs"] = torch.randn(tape["obs"].shape)  # any input: the reset is what counts
        with set_recurrent_mode(True):
            out = lstm(tape.clone())["features"].reshape(-1, 8)
        flat = tape.reshape(-1)
        episodes = [k for k in flat["sequence_id"].unique().tolist() if k >= 0]
        assert len(episodes) > (3 if rows else 1)
        for k in episodes:
            mine = flat["sequence_id"] == k
            alone = flat[mine].unsqueeze(0).clone()  # [1, episode length], from zero state
            with set_recurrent_mode(True):
                expected = lstm(alone)["features"][0]
            torch.testing.assert_close(out[mine], expected, atol=1e-6, rtol=1e-5)
