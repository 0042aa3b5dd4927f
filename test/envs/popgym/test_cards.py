"""POPGym card-memory ports (RepeatFirst, RepeatPrevious, Autoencode, CountRecall) against POPGym.

Parity: ours and POPGym's env, given the same deck orders and actions, agree on every
observation, reward and flag, episode ends included. Statistics: the in-kernel shuffle is
uniform. Exact cases: tiny hand-written decks. Contract: specs, graph replay, the rollout fast
path, saving, and refusal of bad arguments, states and actions.
"""

from __future__ import annotations

import pickle

import numpy as np
import popgym.envs as pg
import pytest
import torch
from popgym_helpers import DIFFICULTIES, FixedShuffle, assert_bad_state_refused
from scipy import stats
from tensordict import TensorDict
from torchrl.envs.utils import check_env_specs

from torchrl_ext.envs.popgym.cards import (
    AutoencodeEnv,
    CountRecallEnv,
    RepeatFirstEnv,
    RepeatPreviousEnv,
)

ENVS = (RepeatFirstEnv, RepeatPreviousEnv, AutoencodeEnv, CountRecallEnv)
POPGYM = {
    RepeatFirstEnv: (pg.RepeatFirstEasy, pg.RepeatFirstMedium, pg.RepeatFirstHard),
    RepeatPreviousEnv: (pg.RepeatPreviousEasy, pg.RepeatPreviousMedium, pg.RepeatPreviousHard),
    AutoencodeEnv: (pg.AutoencodeEasy, pg.AutoencodeMedium, pg.AutoencodeHard),
    CountRecallEnv: (pg.CountRecallEasy, pg.CountRecallMedium, pg.CountRecallHard),
}
VALUE_OF = {  # CountRecall's card value per difficulty: colour, suit, rank
    "easy": lambda c: c % 2,
    "medium": lambda c: c % 4,
    "hard": lambda c: (c // 4) % 13,
}


def _popgym_reset(env, perms):
    """Reset a POPGym env whose shuffles write ``perms`` (CountRecall: value, then query)."""
    env.np_random = FixedShuffle(env.np_random, perms)
    obs, _ = env.reset()
    return obs


def _inject(env, b, perms, difficulty):
    """Give env ``b`` of ours the reset state of the decks ``perms`` (the others are untouched)."""
    state = env.state_dict()
    state["deck"][b] = torch.as_tensor(perms[0], dtype=torch.int32)
    state["dealt"][b] = 1
    if isinstance(env, AutoencodeEnv):
        state["recited"][b] = 0
    if isinstance(env, CountRecallEnv):
        state["query_deck"][b] = torch.as_tensor(perms[1], dtype=torch.int32)
        state["counts"][b] = 0
        state["counts"][b, VALUE_OF[difficulty](int(perms[0][-1]))] = 1
    env.load_state_dict(state)


def _popgym_action(popgym_env, n_actions, rng):
    """A random action; for CountRecall half of them are the right count."""
    if isinstance(popgym_env, pg.CountRecall) and rng.random() < 0.5:
        return int(popgym_env.counts[popgym_env.query])
    return int(rng.integers(n_actions))


def _run_parity(cls, difficulty, dtype, batch, steps, seed):
    """Lock-step ours and POPGym's envs under shared decks and actions; returns episode ends."""
    rng = np.random.default_rng(seed)
    theirs = [POPGYM[cls][DIFFICULTIES.index(difficulty)]() for _ in range(batch)]
    ours = cls(batch, seed=seed, difficulty=difficulty, dtype=dtype)
    n_decks = 2 if cls is CountRecallEnv else 1
    n, n_actions = ours.num_cards, ours.action_spec.space.n
    tol = 0.0 if dtype == torch.float64 else 1e-6

    def new_episode(b):
        perms = [rng.permutation(n) for _ in range(n_decks)]
        obs = _popgym_reset(theirs[b], perms)
        _inject(ours, b, perms, difficulty)
        return obs

    ours.reset()
    for b, env in enumerate(theirs):
        env.reset(seed=seed + b)
        new_episode(b)
    ends = 0
    for _ in range(steps):
        actions = [_popgym_action(env, n_actions, rng) for env in theirs]
        td = TensorDict({"action": torch.tensor(actions)}, batch_size=[batch])
        nxt = ours.step(td)["next"]
        for b, env in enumerate(theirs):
            obs, reward, terminated, truncated, _ = env.step(actions[b])
            assert nxt["observation"][b].tolist() == np.asarray(obs).tolist()
            assert abs(float(nxt["reward"][b, 0]) - reward) <= tol
            assert bool(nxt["terminated"][b]) == terminated
            assert bool(nxt["truncated"][b]) == truncated
            assert bool(nxt["done"][b]) == (terminated or truncated)
        done = nxt["done"].reshape(-1)
        if done.any():
            ours.reset(TensorDict({"_reset": done.clone()}, batch_size=[batch]))
            for b in done.nonzero().flatten().tolist():
                new_episode(b)
                ends += 1
    return ends


class TestPopgymParity:
    """Same decks and actions: ours equals POPGym 1.0.7 step for step, episode ends included."""

    @pytest.mark.parametrize("difficulty", DIFFICULTIES)
    @pytest.mark.parametrize("cls", ENVS, ids=lambda c: c.__name__)
    def test_float64_exact(self, cls, difficulty):
        length = cls(1, seed=0, difficulty=difficulty).max_steps
        steps = max(1000, 2 * length + 10)
        ends = _run_parity(cls, difficulty, torch.float64, 2, steps, seed=7)
        assert ends >= 4

    @pytest.mark.parametrize("cls", ENVS, ids=lambda c: c.__name__)
    def test_float32_close(self, cls):
        assert _run_parity(cls, "easy", torch.float32, 3, 300, seed=11) >= 3


class TestShuffle:
    """The in-kernel Fisher-Yates shuffle deals uniformly random decks."""

    def test_first_card_uniform(self):
        env = RepeatFirstEnv(512, seed=1)
        firsts = []
        for _ in range(8):
            env.reset()
            firsts.append(env.deck[:, -1].long())
        counts = torch.bincount(torch.cat(firsts), minlength=52).numpy()
        assert stats.chisquare(counts).pvalue > 0.01

    def test_position_of_each_card_uniform(self):
        env = RepeatFirstEnv(2048, seed=2)
        env.reset()
        deck = env.deck.long()
        assert sorted(deck[0].tolist()) == list(range(52))
        for card in (0, 17, 51):
            position = (deck == card).long().argmax(-1)
            counts = torch.bincount(position, minlength=52).numpy()
            assert stats.chisquare(counts).pvalue > 0.01

    def test_query_deck_independent_of_value_deck(self):
        env = CountRecallEnv(4096, seed=3, difficulty="medium")
        env.reset()
        value, query = env.deck[:, -1].long() % 4, env.query_deck[:, -1].long() % 4
        table = torch.bincount(value * 4 + query, minlength=16).reshape(4, 4).numpy()
        assert stats.chi2_contingency(table).pvalue > 0.01

    def test_envs_seeds_and_episodes_differ(self):
        a, b = RepeatFirstEnv(8, seed=0), RepeatFirstEnv(8, seed=1)
        a.reset()
        b.reset()
        first = a.deck.clone()
        assert len({tuple(row) for row in first.tolist()}) == 8
        assert not torch.equal(first, b.deck)
        a.reset()
        assert not torch.equal(first, a.deck)
        again = RepeatFirstEnv(8, seed=0)
        again.reset()
        assert torch.equal(first, again.deck)


def _set_deck(env, deck, **extra):
    """Reset ``env`` (one env) and load the reset state of ``deck``."""
    env.reset()
    state = env.state_dict()
    state["deck"][0] = torch.as_tensor(deck, dtype=torch.int32)
    state["dealt"][0] = 1
    for name, value in extra.items():
        state[name][0] = torch.as_tensor(value, dtype=state[name].dtype)
    env.load_state_dict(state)


def _play(env, actions):
    """Step with ``actions``; returns observations, rewards (in units of the scale) and done."""
    out = []
    for action in actions:
        td = env.step(TensorDict({"action": torch.tensor([action])}, batch_size=[1]))["next"]
        out.append(
            (
                td["observation"][0].reshape(-1).tolist(),
                float(td["reward"][0, 0]),
                bool(td["done"][0]),
            )
        )
    return out


class TestHandComputed:
    """A deck whose last cards are written out; the expected outputs are worked by hand."""

    # Dealt from the end: card ids 4, 9, 14, 3, 0 (suits 0, 1, 2, 3, 0) come first.
    TAIL = [0, 3, 14, 9, 4]

    def _deck(self, n):
        head = [c for c in range(n) if c not in self.TAIL]
        return head + self.TAIL

    def test_reset_observes_first_card(self):
        env = CountRecallEnv(6, seed=4, difficulty="hard")
        root = env.reset()
        assert root["observation"].tolist() == [
            [(v // 4) % 13, (q // 4) % 13]
            for v, q in zip(env.deck[:, -1].tolist(), env.query_deck[:, -1].tolist(), strict=True)
        ]
        assert env.dealt.tolist() == [1] * 6
        repeat = RepeatFirstEnv(6, seed=4)
        assert torch.equal(repeat.reset()["observation"], repeat.deck[:, -1].long() % 4)

    def test_repeat_first(self):
        env = RepeatFirstEnv(1, seed=0, dtype=torch.float64)
        _set_deck(env, self._deck(52))
        s = 1 / 51
        # the first card (id 4) is a suit-0 card: action 0 pays, the others cost
        assert _play(env, [0, 1, 0, 3]) == [
            ([1], s, False),
            ([2], -s, False),
            ([3], s, False),
            ([0], -s, False),
        ]

    def test_repeat_first_terminates_after_n_minus_one(self):
        env = RepeatFirstEnv(1, seed=0, dtype=torch.float64)
        _set_deck(env, self._deck(52))
        done = [d for _, _, d in _play(env, [0] * 51)]
        assert done == [False] * 50 + [True]

    def test_repeat_previous(self):
        env = RepeatPreviousEnv(1, seed=0, dtype=torch.float64)  # k = 4
        _set_deck(env, self._deck(52))
        s = 1 / 48
        # shown suits 0 | 1 2 3 0 ...; steps 1-3 pay 0, steps 4, 5, 6 target suits 0, 1, 2
        out = _play(env, [3, 3, 3, 0, 1, 3])
        assert [r for _, r, _ in out] == [0.0, 0.0, 0.0, s, s, -s]
        assert [o for o, _, _ in out[:4]] == [[1], [2], [3], [0]]

    def test_autoencode(self):
        env = AutoencodeEnv(1, seed=0, dtype=torch.float64)
        n = 52
        _set_deck(env, self._deck(n), recited=0)
        s = 1 / n
        watch = _play(env, [1] * (n - 1))
        assert [o for o, _, _ in watch[:4]] == [[1, 1], [1, 2], [1, 3], [1, 0]]
        assert all(r == 0.0 and not d for _, r, d in watch)
        last = self._deck(n)[0]
        assert watch[-1][0] == [0, last % 4]  # the last card is shown in play mode
        # recite backwards: deck[0], deck[1], ...; then the tail 0 3 14 9 4 (suits 0 3 2 1 0)
        recite = [c % 4 for c in self._deck(n)]
        recite[1] = (recite[1] + 1) % 4  # one wrong answer
        out = _play(env, recite)
        assert [r for _, r, _ in out] == [s, -s] + [s] * (n - 2)
        assert all(o == [0, 0] for o, _, _ in out)
        assert [d for _, _, d in out] == [False] * (n - 1) + [True]

    def test_count_recall(self):
        env = CountRecallEnv(1, seed=0, dtype=torch.float64)  # colours
        n = 52
        deck = self._deck(n)  # value colours dealt: 0 1 0 1 0
        query = list(range(n))  # query colours dealt: 1 0 1 0 ...
        counts = [1, 0]
        _set_deck(env, deck, query_deck=query, counts=counts)
        s = 1 / 51
        # targets: #value colour 1 (query 1) among {0} = 0; then #colour 0 among {0,1} = 1; ...
        out = _play(env, [0, 1, 5, 2])
        assert [o for o, _, _ in out] == [[1, 0], [0, 1], [1, 0], [0, 1]]
        assert [r for _, r, _ in out] == [s, s, -s, s]
        assert env.counts.tolist() == [[3, 2]]


class TestContract:
    """TorchRL contract: specs, graph replay, the rollout fast path, saving, refusals."""

    @pytest.mark.parametrize("difficulty", DIFFICULTIES)
    @pytest.mark.parametrize("cls", ENVS, ids=lambda c: c.__name__)
    def test_specs(self, cls, difficulty):
        env = cls(3, seed=0, difficulty=difficulty)
        check_env_specs(env)
        assert env.max_steps == env.num_cards * (2 if cls.__name__ == "AutoencodeEnv" else 1) - 1

    @pytest.mark.parametrize("cls", ENVS, ids=lambda c: c.__name__)
    def test_capture_equals_eager(self, cls):
        outs = []
        for capture in (False, True):
            env = cls(4, seed=5, capture=capture)
            torch.manual_seed(0)
            td = env.rollout(120, break_when_any_done=False)
            torch.manual_seed(0)
            root = env.reset()
            for _ in range(60):
                td_step, root = env.step_and_maybe_reset(env.rand_action(root))
            outs.append((td, td_step))
        (eager, eager_step), (graph, graph_step) = outs
        assert (eager == graph).all()
        assert (eager_step == graph_step).all()

    @pytest.mark.parametrize("cls", ENVS, ids=lambda c: c.__name__)
    def test_rollout_fast_path(self, cls):
        env = cls(5, seed=6)
        td = env.rollout(env.max_steps + 3, break_when_any_done=False)
        assert td.batch_size == (5, env.max_steps + 3)
        done = td["next", "done"][..., 0]
        assert done[:, env.max_steps - 1].all()
        assert done.sum() == 5

    @pytest.mark.parametrize("cls", ENVS, ids=lambda c: c.__name__)
    def test_state_dict_round_trip(self, cls):
        env = cls(3, seed=8)
        root = env.reset()
        gen = torch.Generator().manual_seed(0)
        n_actions = env.action_spec.space.n
        actions = torch.randint(0, n_actions, (130, 3), generator=gen)

        def run(e, r):
            outs = []
            for a in actions:
                r["action"] = a
                td, r = e.step_and_maybe_reset(r)
                outs.append(td["next"].clone())
            return torch.stack(outs)

        for _ in range(20):
            root["action"] = actions[0]
            _, root = env.step_and_maybe_reset(root)
        state, copied = env.state_dict(), pickle.loads(pickle.dumps(env))
        end = run(env, root.clone())
        fresh = cls(3, seed=99)
        fresh.load_state_dict(state)
        assert (run(fresh, root.clone()) == end).all()
        assert (run(copied, root.clone()) == end).all()

    @pytest.mark.parametrize("cls", ENVS, ids=lambda c: c.__name__)
    def test_bad_arguments(self, cls):
        with pytest.raises(ValueError, match="difficulty"):
            cls(2, difficulty="extreme")
        with pytest.raises(TypeError, match="difficulty"):
            cls(2, difficulty=3)
        with pytest.raises(ValueError, match="num_envs"):
            cls(0)
        with pytest.raises(ValueError, match="dtype"):
            cls(2, dtype=torch.float16)

    @pytest.mark.parametrize("cls", ENVS, ids=lambda c: c.__name__)
    def test_bad_state_refused_unchanged(self, cls):
        env = cls(2, seed=0)
        env.reset()
        bad_values = {"deck": env.num_cards, "dealt": env.num_cards + 1}
        if cls is AutoencodeEnv:
            bad_values["recited"] = -1
        if cls is CountRecallEnv:
            bad_values["query_deck"] = -1
            bad_values["counts"] = env.max_count + 1

        def corrupt(name, value):
            return name, lambda state: state[name].view(-1).__setitem__(1, value)

        assert_bad_state_refused(env, [corrupt(*item) for item in bad_values.items()])

    @pytest.mark.parametrize("cls", ENVS, ids=lambda c: c.__name__)
    def test_bad_action_refused(self, cls):
        env = cls(2, seed=0)
        root = env.reset()
        n_actions = env.action_spec.space.n
        for bad in (n_actions, -1):
            root["action"] = torch.tensor([0, bad])
            with pytest.raises(ValueError, match="action"):
                env.step(root)
        assert env.dealt.tolist() == [1, 1]


def _mid_episode(cls, steps: int = 10, **kwargs):
    """``cls`` (2 envs) after a reset and ``steps`` random steps: both envs mid-episode."""
    env = cls(2, seed=0, **kwargs)
    root = env.reset()
    for _ in range(steps):
        env.step(env.rand_action(root))
    return env


def _edit(name, index, value=None, *, like=None):
    """A corruption writing ``value`` (or the element at ``like``) at ``state[name][index]``."""

    def corrupt(state):
        state[name][index] = state[name][like] if like is not None else value

    return corrupt


class TestLoadedStateInvariants:
    """``load_state_dict`` refuses a state from a real run with one entry edited to break an
    invariant every run keeps, naming the entry, and leaves the env unchanged."""

    @pytest.mark.parametrize("cls", ENVS, ids=lambda c: c.__name__)
    def test_a_deck_repeating_a_card_is_refused(self, cls):
        env = _mid_episode(cls)
        decks = ["deck", "query_deck"] if cls is CountRecallEnv else ["deck"]
        edits = [(rf"'{d}'\].*permutation", _edit(d, (1, 0), like=(1, 1))) for d in decks]
        assert_bad_state_refused(env, edits)

    @pytest.mark.parametrize("cls", ENVS, ids=lambda c: c.__name__)
    def test_dealt_disagreeing_with_the_steps_is_refused(self, cls):
        env = _mid_episode(cls)
        assert env.dealt.tolist() == [11, 11]
        edits = [(r"'dealt'\].*min\(steps \+ 1", _edit("dealt", 0, d)) for d in (10, 12)]
        assert_bad_state_refused(env, edits)

    @pytest.mark.parametrize("cls", ENVS, ids=lambda c: c.__name__)
    def test_steps_past_the_episode_length_are_refused(self, cls):
        env = _mid_episode(cls)
        length = env.max_steps
        edit = (rf"'steps'\].*at most {length} steps", _edit("steps", 0, length + 1))
        assert_bad_state_refused(env, [edit])

    def test_recited_during_the_watch_phase_is_refused(self):
        env = _mid_episode(AutoencodeEnv)
        assert_bad_state_refused(env, [(r"'recited'\].*steps - 51", _edit("recited", 1, 1))])

    @pytest.mark.parametrize("difficulty", DIFFICULTIES)
    def test_counts_disagreeing_with_the_cards_dealt_are_refused(self, difficulty):
        env = _mid_episode(CountRecallEnv, difficulty=difficulty)
        counts = env.counts[0]
        give, take = int(counts.argmax()), int(counts.argmin())

        def move_one(state):  # the total still counts the cards dealt
            state["counts"][0, give] -= 1
            state["counts"][0, take] += 1

        assert_bad_state_refused(env, [(r"'counts'\].*cards of value v", move_one)])
