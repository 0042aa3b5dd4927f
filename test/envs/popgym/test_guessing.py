"""HigherLower and Concentration against POPGym 1.0.7: lock-step parity, shuffles, contract."""

from __future__ import annotations

import numpy as np
import popgym.envs as pg
import popgym_helpers as helpers
import pytest
import torch
from popgym_helpers import DIFFICULTIES, FixedShuffle
from scipy import stats
from torchrl.envs.utils import check_env_specs

from torchrl_ext.envs.popgym.guessing import ConcentrationEnv, HigherLowerEnv

POPGYM = {
    (HigherLowerEnv, "easy"): pg.HigherLowerEasy,
    (HigherLowerEnv, "medium"): pg.HigherLowerMedium,
    (HigherLowerEnv, "hard"): pg.HigherLowerHard,
    (ConcentrationEnv, "easy"): pg.ConcentrationEasy,
    (ConcentrationEnv, "medium"): pg.ConcentrationMedium,
    (ConcentrationEnv, "hard"): pg.ConcentrationHard,
}
CASES = list(POPGYM)
IDS = [f"{cls.__name__}-{level}" for cls, level in CASES]


# ------------------------------------------------------------------------- lock-step harness
def fresh_deck(env, genv, rng: np.random.Generator) -> tuple[dict, object]:
    """A random deck, given to both: POPGym's reset shuffles into it; returns its observation."""
    deck = rng.permutation(env.num_cards)
    genv.reset(seed=0)
    genv.np_random = FixedShuffle(genv.np_random, [deck.astype(np.int64)])
    obs, _ = genv.reset()
    return {"deck": deck}, obs


def lockstep(env, gyms, act, steps: int, rng: np.random.Generator) -> tuple[int, int]:
    """:func:`popgym_helpers.lockstep` with a fresh random deck per episode."""
    return helpers.lockstep(env, gyms, act, steps, rng, fresh_deck)


def guess(genv, rng: np.random.Generator) -> int:
    return int(rng.integers(2))


def flip(genv, rng: np.random.Generator) -> int:
    """A flip completing a match with probability ``genv.skill``; mostly avoids matched cards."""
    values = genv.deck_idx_type[genv.deck.idx]
    up = set(genv.deck["face_up_idx"])
    if genv.deck["in_play_idx"] and rng.random() < genv.skill:
        first = genv.deck["in_play_idx"][0]
        mates = [j for j in np.flatnonzero(values == values[first]) if j != first and j not in up]
        if mates:
            return int(mates[0])
    if rng.random() < 0.7:
        return int(rng.choice([j for j in range(len(values)) if j not in up]))
    return int(rng.integers(len(values)))


@pytest.mark.parametrize("level", DIFFICULTIES)
def test_higher_lower_matches_popgym(level):
    env = HigherLowerEnv(3, seed=1, difficulty=level, dtype=torch.float64)
    gyms = [POPGYM[HigherLowerEnv, level]() for _ in range(3)]
    steps = {"easy": 340, "medium": 340, "hard": 480}[level]
    terminated, truncated = lockstep(env, gyms, guess, steps, np.random.default_rng(0))
    assert (terminated, truncated) >= (6, 0)


@pytest.mark.parametrize("level", DIFFICULTIES)
def test_concentration_matches_popgym(level):
    env = ConcentrationEnv(3, seed=1, difficulty=level, dtype=torch.float64)
    gyms = [POPGYM[ConcentrationEnv, level]() for _ in range(3)]
    for genv, skill in zip(gyms, (0.9, 0.5, 0.0), strict=True):
        genv.skill = skill  # some envs finish, some run out of time
    steps = {"easy": 400, "medium": 700, "hard": 400}[level]
    terminated, truncated = lockstep(env, gyms, flip, steps, np.random.default_rng(1))
    assert terminated >= 2 and truncated >= 2


def test_concentration_terminal_step_at_the_limit_is_truncated_too():
    """As POPGym: matching the last pair on the last step reports both flags."""
    assert ConcentrationEnv.truncates_terminal_steps
    env, genv = ConcentrationEnv(1, seed=0, dtype=torch.float64), POPGYM[ConcentrationEnv, "easy"]()
    env.reset()
    helpers.begin(
        env, [genv], torch.ones(1, dtype=torch.bool), np.random.default_rng(3), fresh_deck
    )
    values = genv.deck_idx_type[genv.deck.idx]
    pairs = [
        list(np.flatnonzero(values == v).reshape(-1, 2)[j])
        for v in np.unique(values)
        for j in range((values == v).sum() // 2)
    ]
    wasted = env.max_steps - env.num_cards  # flips of a matched card, each ends its pair
    actions = pairs[0] + [pairs[0][0]] * wasted + [a for pair in pairs[1:] for a in pair]
    flags = helpers.play_one(env, genv, [int(a) for a in actions])
    assert len(flags) == env.max_steps
    assert flags == [(False, False)] * (len(flags) - 1) + [(True, True)]


def test_higher_lower_steps_past_the_end_stay_in_bounds():
    env = HigherLowerEnv(2, seed=0)
    root = env.reset()
    root["action"] = torch.zeros(2, dtype=torch.int64)
    for _ in range(60):  # 9 steps past termination, without a reset
        nxt = env.step(root)["next"]
    assert bool(nxt["terminated"].all())
    assert bool((nxt["observation"] == (env.deck[:, 0].long() // 4) % 13).all())
    env.load_state_dict(env.state_dict())
    assert env.state_dict()["steps"].tolist() == [51, 51]  # the counter stops at the episode's end


# ------------------------------------------------------------------------------ statistics
@pytest.mark.parametrize("cls", [HigherLowerEnv, ConcentrationEnv])
def test_shuffles_are_uniform(cls):
    env = cls(4000, seed=7)
    env.reset()
    first = env.deck.clone().long()
    env.reset()
    second = env.deck.clone().long()
    n = env.num_cards
    top = torch.bincount(first[:, -1], minlength=n).numpy()
    assert stats.chisquare(top).pvalue > 0.01
    where_zero = (first == 0).long().argmax(-1)
    assert stats.chisquare(torch.bincount(where_zero, minlength=n).numpy()).pvalue > 0.01
    pair = (first[:, -1] * 4 + first[:, -2] % 4).numpy()  # next card's suit given the top card
    table = np.zeros((n, 4))
    np.add.at(table, (pair // 4, pair % 4), 1)
    assert stats.chi2_contingency(table[table.sum(1) > 0]).pvalue > 0.01
    episodes = np.zeros((13, 13))  # the top cards of consecutive episodes are independent
    np.add.at(episodes, ((first[:, -1] // 4) % 13, (second[:, -1] // 4) % 13), 1)
    assert stats.chi2_contingency(episodes).pvalue > 0.01
    assert bool((first.sort(-1).values == torch.arange(n)).all())


def test_higher_lower_returns_match_popgym_in_distribution():
    env = HigherLowerEnv(500, seed=5, dtype=torch.float64)
    data = env.rollout(51, break_when_any_done=False)
    ours = np.rint(data["next", "reward"].sum(1).flatten().numpy() * 52)
    genv, rng, theirs = pg.HigherLowerEasy(), np.random.default_rng(0), []
    genv.reset(seed=3)
    for _ in range(500):
        total, done = 0.0, False
        while not done:
            _, r, te, tr, _ = genv.step(int(rng.integers(2)))
            total, done = total + r, te or tr
        theirs.append(round(total * 52))
        genv.reset()
    assert stats.ks_2samp(ours, theirs).pvalue > 0.01


# -------------------------------------------------------------------------------- contract
@pytest.mark.parametrize(("cls", "level"), CASES, ids=IDS)
def test_specs(cls, level):
    check_env_specs(cls(3, seed=0, difficulty=level))


def _random_actions(env, steps: int, seed: int) -> torch.Tensor:
    n = env.action_spec.space.n
    return torch.randint(0, n, (steps, env.num_envs), generator=torch.Generator().manual_seed(seed))


@pytest.mark.parametrize("cls", [HigherLowerEnv, ConcentrationEnv])
def test_capture_equals_eager(cls, device):
    actions = _random_actions(cls(4, device, seed=2, difficulty="hard"), 120, 0)
    helpers.assert_capture_equals_eager(cls, device, actions)


@pytest.mark.parametrize("cls", [HigherLowerEnv, ConcentrationEnv])
def test_state_dict_round_trip(cls, device):
    helpers.assert_round_trip(cls, device, _random_actions(cls(4, device, seed=3), 150, 1))


@pytest.mark.parametrize(
    ("kwargs", "error", "text"),
    [
        ({"difficulty": "extreme"}, ValueError, "extreme"),
        ({"difficulty": 2}, TypeError, "difficulty"),
        ({"dtype": torch.int32}, ValueError, "dtype"),
        ({"capture": 1}, TypeError, "capture"),
        ({"seed": -1}, ValueError, "seed"),
    ],
)
@pytest.mark.parametrize("cls", [HigherLowerEnv, ConcentrationEnv])
def test_bad_arguments(cls, kwargs, error, text):
    with pytest.raises(error, match=text):
        cls(2, **kwargs)
    with pytest.raises(ValueError, match="num_envs"):
        cls(0)


def _corrupt(cls):
    def deck(s):
        s["deck"][0, 0] = s["deck"][0, 1]

    cases = [("deck", deck)]
    if cls is HigherLowerEnv:
        cases.append(("deck", lambda s: s["deck"].__setitem__((1, 5), 52)))
    else:
        cases.append(("face_up", lambda s: s["face_up"].__setitem__((0, 3), 2)))
        cases.append(("in_play", lambda s: s["in_play"].__setitem__(1, 52)))
        cases.append(("shown_second", lambda s: s["shown_second"].__setitem__(1, -2)))
        cases.append(("board", lambda s: s["board"].__setitem__((0, 7), 1 - s["board"][0, 7])))
    return cases


@pytest.mark.parametrize("cls", [HigherLowerEnv, ConcentrationEnv])
def test_out_of_range_state_is_refused(cls):
    env = cls(2, seed=0)
    env.reset()
    helpers.assert_bad_state_refused(env, _corrupt(cls))


@pytest.mark.parametrize("cls", [HigherLowerEnv, ConcentrationEnv])
def test_out_of_range_actions_are_refused(cls):
    env = cls(2, seed=0)
    root = env.reset()
    bads = [torch.tensor([0, bad]) for bad in (-1, env.action_spec.space.n)]
    helpers.assert_bad_actions_refused(env, root, bads)


# ------------------------------------------------------------------------------ loaded states
def _concentration(actions):
    """Concentration (1 env, easy) after a reset and the flips ``actions(deck)``."""
    env = ConcentrationEnv(1, seed=0)
    root = env.reset()
    for action in actions(env.deck[0].long() % 2):
        root["action"] = torch.tensor([action])
        env.step(root)
    return env


def _pair(colours, first=0, same=True):
    """``[first, j]``: ``j`` the next position of the same (or another) colour."""
    j = next(j for j in range(first + 1, 52) if (colours[j] == colours[first]) == same)
    return [first, j]


def _set(name, index, value):
    return lambda state: state[name].__setitem__(index, value)


class TestLoadedConcentrationStates:
    """Concentration's ``load_state_dict`` refuses a state from a real run with one entry edited
    to break an invariant of its flips, naming the entry, and leaves the env unchanged."""

    def test_a_pair_in_play_elsewhere_than_the_first_flip_is_refused(self):
        env = _concentration(lambda colours: [0])
        assert env.in_play.tolist() == [0]
        bads = [(r"'in_play'\].*flip of a face-down card", _set("in_play", 0, 5))]
        bads.append((r"'in_play'\].*-1 after a first flip", _set("in_play", 0, -1)))
        helpers.assert_bad_state_refused(env, bads)

    def test_a_second_flip_at_step_zero_is_refused(self):
        env = _concentration(lambda colours: [])
        bads = [(r"'shown_second'\].*follows a first", _set("shown_second", 0, 3))]
        bads.append((r"'shown_first'\].*-1 at step 0 only", _set("shown_first", 0, 3)))
        helpers.assert_bad_state_refused(env, bads)

    def test_matched_cards_that_do_not_pair_up_are_refused(self):
        matched = _concentration(lambda colours: _pair(colours))
        assert matched.face_up.sum().item() == 2
        second = int(matched.state_dict()["shown_second"][0])
        bads = [(r"'face_up'\].*pair up by value", _set("face_up", (0, second), 0))]
        helpers.assert_bad_state_refused(matched, bads)
        missed = _concentration(lambda colours: _pair(colours, same=False))
        assert missed.face_up.sum().item() == 0
        bads = [(r"'face_up'\].*pair up by value", _set("face_up", (0, 0), 1))]
        helpers.assert_bad_state_refused(missed, bads)
