"""MultiarmedBandit, MineSweeper and Battleship against POPGym 1.0.7: parity, statistics, API."""

from __future__ import annotations

import numpy as np
import popgym.envs as pg
import popgym_helpers as helpers
import pytest
import torch
from popgym_helpers import DIFFICULTIES
from scipy import stats
from torchrl.envs.utils import check_env_specs

from torchrl_ext.envs.popgym.games import BattleshipEnv, MineSweeperEnv, MultiarmedBanditEnv

CLASSES = (MultiarmedBanditEnv, MineSweeperEnv, BattleshipEnv)
NAMES = {MultiarmedBanditEnv: "MultiarmedBandit", MineSweeperEnv: "MineSweeper"}
NAMES[BattleshipEnv] = "Battleship"
CASES = [(cls, level) for cls in CLASSES for level in DIFFICULTIES]
IDS = [f"{cls.__name__}-{level}" for cls, level in CASES]


def popgym_env(cls, level: str):
    return getattr(pg, NAMES[cls] + level.capitalize())()


# ------------------------------------------------------------------------- lock-step harness
def fresh_bandit(env, genv, rng: np.random.Generator) -> tuple[dict, object]:
    """Arms paying always or never (POPGym's payout draw is then certain); injected into POPGym."""
    probs = (rng.random(genv.num_bandits) < 0.5).astype(np.float32)
    genv.reset(seed=0)
    genv.bandits, genv.info, genv.num_steps = probs, {"bandits": probs.copy()}, 0
    return {"probs": probs}, 0


def fresh_mines(env, genv, rng: np.random.Generator) -> tuple[dict, object]:
    """A board drawn by POPGym itself, injected into ours."""
    obs, _ = genv.reset(seed=int(rng.integers(2**31)))
    return {"grid": genv.hidden_grid.astype(np.int32)}, obs


def fresh_ships(env, genv, rng: np.random.Generator) -> tuple[dict, object]:
    """A board drawn by POPGym itself, injected into ours."""
    obs, _ = genv.reset(seed=int(rng.integers(2**31)))
    return {"board": genv.board.astype(np.int32)}, obs


FRESH = {MultiarmedBanditEnv: fresh_bandit, MineSweeperEnv: fresh_mines}
FRESH[BattleshipEnv] = fresh_ships


def lockstep(env, gyms, act, steps: int, rng: np.random.Generator) -> tuple[int, int]:
    """:func:`popgym_helpers.lockstep` with the fresh hidden state of ``env``'s game."""
    return helpers.lockstep(env, gyms, act, steps, rng, FRESH[type(env)])


def pull(genv, rng: np.random.Generator) -> int:
    return int(rng.integers(genv.num_bandits))


def click(genv, rng: np.random.Generator) -> np.ndarray:
    """Mostly a clear cell (so episodes also end by viewing them all), else any cell."""
    clear = np.argwhere(genv.hidden_grid == 0)
    if len(clear) and rng.random() < 0.95:
        return clear[rng.integers(len(clear))]
    return rng.integers(genv.dims[0], size=2)


def shoot(genv, rng: np.random.Generator) -> np.ndarray:
    """Sometimes a ship cell not shot yet (so some episodes sink every ship), else any cell."""
    ships = np.argwhere((genv.board == 1) & (genv.guesses == 0))
    if len(ships) and rng.random() < genv.skill:
        return ships[0]
    return rng.integers(genv.board_size, size=2)


def test_bandit_matches_popgym():
    for level, steps in zip(DIFFICULTIES, (520, 820, 1210), strict=True):
        env = MultiarmedBanditEnv(2, seed=1, difficulty=level, dtype=torch.float64)
        gyms = [popgym_env(MultiarmedBanditEnv, level) for _ in range(2)]
        terminated, truncated = lockstep(env, gyms, pull, steps, np.random.default_rng(0))
        assert (terminated, truncated) == (0, 4)


@pytest.mark.parametrize("level", DIFFICULTIES)
def test_minesweeper_matches_popgym(level):
    env = MineSweeperEnv(4, seed=1, difficulty=level, dtype=torch.float64)
    gyms = [popgym_env(MineSweeperEnv, level) for _ in range(4)]
    terminated, _ = lockstep(env, gyms, click, 300, np.random.default_rng(1))
    assert terminated >= 8


@pytest.mark.parametrize("level", DIFFICULTIES)
def test_battleship_matches_popgym(level):
    env = BattleshipEnv(3, seed=1, difficulty=level, dtype=torch.float64)
    gyms = [popgym_env(BattleshipEnv, level) for _ in range(3)]
    for genv, skill in zip(gyms, (0.5, 0.2, 0.0), strict=True):
        genv.skill = skill  # some envs sink every ship, some run out of time
    steps = max(3 * env.max_steps, 350)
    terminated, truncated = lockstep(env, gyms, shoot, steps, np.random.default_rng(2))
    assert terminated >= 2 and truncated >= 2


def _one_game(cls, level: str = "easy"):
    """One env of ours and POPGym's, mid-episode on the same board drawn by POPGym."""
    env, genv = cls(1, seed=0, difficulty=level, dtype=torch.float64), popgym_env(cls, level)
    env.reset()
    helpers.begin(
        env, [genv], torch.ones(1, dtype=torch.bool), np.random.default_rng(4), FRESH[cls]
    )
    return env, genv


@pytest.mark.parametrize("level", DIFFICULTIES)
def test_minesweeper_terminal_step_at_the_limit_is_not_truncated(level):
    """As POPGym: a step at the limit is truncated unless it terminates (then terminated only)."""
    assert not MineSweeperEnv.truncates_terminal_steps
    env, genv = _one_game(MineSweeperEnv, level)
    clear = [tuple(cell) for cell in np.argwhere(genv.hidden_grid == 0)]
    assert len(clear) == env.max_steps
    flags = helpers.play_one(env, genv, clear)  # the last clear cell is viewed at the limit
    assert flags == [(False, False)] * (len(clear) - 1) + [(True, False)]
    env, genv = _one_game(MineSweeperEnv, level)
    clear = [tuple(cell) for cell in np.argwhere(genv.hidden_grid == 0)]
    flags = helpers.play_one(env, genv, clear[:-1] + clear[:1])  # a viewed cell at the limit
    assert flags == [(False, False)] * (len(clear) - 1) + [(False, True)]
    env, genv = _one_game(MineSweeperEnv, level)
    mine = [tuple(np.argwhere(genv.hidden_grid == 1)[0])]
    flags = helpers.play_one(env, genv, clear[:-1] + mine)  # a mine at the limit
    assert flags[-1] == (True, False)


def test_battleship_terminal_step_at_the_limit_is_truncated_too():
    """As POPGym: sinking the last ship on the last step reports both flags."""
    assert BattleshipEnv.truncates_terminal_steps
    env, genv = _one_game(BattleshipEnv)
    misses = [tuple(cell) for cell in np.argwhere(genv.board == 0)]
    hits = [tuple(cell) for cell in np.argwhere(genv.board == 1)]
    flags = helpers.play_one(env, genv, misses + hits)
    assert len(flags) == env.max_steps
    assert flags == [(False, False)] * (len(flags) - 1) + [(True, True)]


# ------------------------------------------------------------------------------ statistics
def test_bandit_probabilities_match_popgym():
    env = MultiarmedBanditEnv(400, seed=3, difficulty="hard")
    env.reset()
    ours = env.probs.flatten().numpy()
    genv = pg.MultiarmedBanditHard()
    genv.reset(seed=4)
    theirs = np.concatenate([genv.reset()[1]["bandits"] for _ in range(400)])
    assert stats.ks_2samp(ours, theirs).pvalue > 0.01
    assert stats.kstest(ours, "uniform").pvalue > 0.01
    assert np.all(ours * 2**24 == np.floor(ours * 2**24))  # float32 grid, as numpy's


def test_bandit_payouts_follow_the_probabilities():
    env = MultiarmedBanditEnv(2000, seed=5)
    root = env.reset()
    probs = env.probs.double()
    gen = torch.Generator().manual_seed(0)
    chosen, paid = [], []
    for _ in range(40):
        root["action"] = torch.randint(0, 10, (2000,), generator=gen)
        td, root = env.step_and_maybe_reset(root)
        chosen.append(probs.gather(1, root["action"].unsqueeze(1)).squeeze(1))
        paid.append(td["next", "observation"].double())
    p, x = torch.cat(chosen).numpy(), torch.cat(paid).numpy()
    z = (x.sum() - p.sum()) / np.sqrt((p * (1 - p)).sum())
    assert 2 * stats.norm.sf(abs(z)) > 0.01
    bins = np.minimum((p * 10).astype(int), 9)  # per decile of probability
    observed = np.bincount(bins, weights=x, minlength=10)
    expected = np.bincount(bins, weights=p, minlength=10)
    variance = np.bincount(bins, weights=p * (1 - p), minlength=10)
    assert stats.chi2.sf((((observed - expected) ** 2) / variance).sum(), 10) > 0.01
    steps = [td["next", "reward"]]
    assert torch.equal(steps[0].flatten() > 0, td["next", "observation"].bool())


def _popgym_boards(cls, level: str, attr: str, count: int) -> np.ndarray:
    genv = popgym_env(cls, level)
    genv.reset(seed=11)
    boards = []
    for _ in range(count):
        genv.reset()
        boards.append(getattr(genv, attr).copy())
    return np.stack(boards)


@pytest.mark.parametrize("level", DIFFICULTIES)
def test_mines_are_uniform(level):
    env = MineSweeperEnv(3000, seed=6, difficulty=level)
    env.reset()
    mines = (env.grid == 1).reshape(3000, -1).numpy()
    assert np.all(mines.sum(1) == env.num_mines)
    per_cell = mines.sum(0)
    assert stats.chisquare(per_cell).pvalue > 0.01
    theirs = (_popgym_boards(MineSweeperEnv, level, "hidden_grid", 1500) == 1).reshape(1500, -1)
    assert stats.chi2_contingency(np.stack([per_cell, theirs.sum(0)])).pvalue > 0.01
    if level == "easy":  # every pair of cells equally likely: a uniform 2-subset
        first = mines.argmax(1)
        second = mines.shape[1] - 1 - mines[:, ::-1].argmax(1)
        pairs = np.bincount(first * 16 + second, minlength=256)
        upper = pairs.reshape(16, 16)[np.triu_indices(16, 1)]
        assert stats.chisquare(upper).pvalue > 0.01


@pytest.mark.parametrize("level", DIFFICULTIES)
def test_ship_placements_match_popgym(level):
    env = BattleshipEnv(3000, seed=7, difficulty=level)
    env.reset()
    ours = env.board.reshape(3000, -1).numpy()
    assert np.all(ours.sum(1) == 12)
    theirs = _popgym_boards(BattleshipEnv, level, "board", 1500).reshape(1500, -1)
    assert stats.chi2_contingency(np.stack([ours.sum(0), theirs.sum(0)])).pvalue > 0.01
    # joint occupancy of two opposite corners (correlations between cells)
    corners = [np.bincount(b[:, 0] * 1 + b[:, -1] * 2, minlength=4) for b in (ours, theirs)]
    assert stats.chi2_contingency(np.stack(corners)).pvalue > 0.01


# -------------------------------------------------------------------------------- contract
@pytest.mark.parametrize(("cls", "level"), CASES, ids=IDS)
def test_specs(cls, level):
    check_env_specs(cls(3, seed=0, difficulty=level))


def _random_actions(env, steps: int, seed: int) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    if isinstance(env, MultiarmedBanditEnv):
        return torch.randint(0, env.num_bandits, (steps, env.num_envs), generator=gen)
    rows = env.action_spec.nvec[0, 0].item()
    return torch.randint(0, rows, (steps, env.num_envs, 2), generator=gen)


@pytest.mark.parametrize("cls", CLASSES)
def test_capture_equals_eager(cls, device):
    actions = _random_actions(cls(4, device, seed=2, difficulty="hard"), 150, 0)
    helpers.assert_capture_equals_eager(cls, device, actions)


@pytest.mark.parametrize("cls", CLASSES)
def test_state_dict_round_trip(cls, device):
    helpers.assert_round_trip(cls, device, _random_actions(cls(4, device, seed=3), 250, 1))


@pytest.mark.parametrize(
    ("kwargs", "error", "text"),
    [
        ({"difficulty": "extreme"}, ValueError, "extreme"),
        ({"difficulty": None}, TypeError, "difficulty"),
        ({"dtype": torch.float16}, ValueError, "dtype"),
        ({"capture": "no"}, TypeError, "capture"),
        ({"seed": 2**64}, ValueError, "seed"),
    ],
)
@pytest.mark.parametrize("cls", CLASSES)
def test_bad_arguments(cls, kwargs, error, text):
    with pytest.raises(error, match=text):
        cls(2, **kwargs)
    with pytest.raises(ValueError, match="num_envs"):
        cls(-1)


CORRUPTIONS = {
    MultiarmedBanditEnv: [
        ("probs", lambda s: s["probs"].__setitem__((0, 1), 1.5)),
        ("payout", lambda s: s["payout"].__setitem__(0, 2)),
    ],
    MineSweeperEnv: [
        ("grid", lambda s: s["grid"].__setitem__((0, 1, 1), 3)),
        ("last", lambda s: s["last"].__setitem__(1, 3)),
    ],
    BattleshipEnv: [
        ("board", lambda s: s["board"].__setitem__((0, 1, 1), -1)),
        ("guesses", lambda s: s["guesses"].__setitem__((1, 0, 0), 2)),
        ("hits", lambda s: s["hits"].__setitem__(0, 5)),
    ],
}


@pytest.mark.parametrize("cls", CLASSES)
def test_out_of_range_state_is_refused(cls):
    env = cls(2, seed=0)
    env.reset()
    helpers.assert_bad_state_refused(env, CORRUPTIONS[cls])


@pytest.mark.parametrize("cls", CLASSES)
def test_out_of_range_actions_are_refused(cls):
    env = cls(2, seed=0)
    root = env.reset()
    if cls is MultiarmedBanditEnv:
        bads = [torch.tensor([0, -1]), torch.tensor([env.num_bandits, 0])]
    else:
        side = env.action_spec.nvec[0, 0].item()
        bads = [torch.tensor([[0, 0], [0, -1]]), torch.tensor([[side, 0], [0, 0]])]
    helpers.assert_bad_actions_refused(env, root, bads)


# ------------------------------------------------------------------------------ loaded states
def _after(cls, actions, level="easy"):
    """``cls`` (2 envs) after a reset and the steps ``actions`` (each the same for both envs)."""
    env = cls(2, seed=0, difficulty=level)
    root = env.reset()
    for action in actions:
        root["action"] = torch.tensor([action, action])
        env.step(root)
    return env


def _set(name, index, value):
    return lambda state: state[name].__setitem__(index, value)


def _cell(board, value):
    """The first ``(row, col)`` of env 0's ``board`` holding ``value``."""
    return tuple(int(x) for x in (board[0] == value).nonzero()[0])


class TestLoadedStateInvariants:
    """``load_state_dict`` refuses a state from a real run with one entry edited to break an
    invariant every run keeps, naming the entry, and leaves the env unchanged."""

    def test_a_payout_before_any_pull_is_refused(self):
        env = _after(MultiarmedBanditEnv, [])
        helpers.assert_bad_state_refused(env, [(r"'payout'\].*0 at step 0", _set("payout", 0, 1))])

    @pytest.mark.parametrize("level", DIFFICULTIES)
    def test_a_grid_with_other_than_m_mines_is_refused(self, level):
        env = _after(MineSweeperEnv, [], level)
        mine, clear = _cell(env.grid, 1), _cell(env.grid, 0)
        no_mines = lambda state: state["grid"][0].clamp_(max=0)  # noqa: E731
        bads = [(rf"'grid'\].*holds {env.num_mines} mines", no_mines)]
        bads += [("'grid'.*mines", _set("grid", (0, *clear), 1))]  # an extra mine
        bads += [("'grid'.*mines", _set("grid", (0, *mine), 0))]  # one fewer
        helpers.assert_bad_state_refused(env, bads)

    def test_more_viewed_cells_than_steps_are_refused(self):
        env = _after(MineSweeperEnv, [])
        clear = _cell(env.grid, 0)
        bads = [(r"'grid'\].*views at most one cell", _set("grid", (0, *clear), 2))]
        helpers.assert_bad_state_refused(env, bads)

    def test_a_last_observation_seen_nowhere_is_refused(self):
        env = _after(MineSweeperEnv, [])
        bads = [(r"'last'\].*0 at step 0", _set("last", 0, 1))]
        helpers.assert_bad_state_refused(env, bads)
        env = _after(MineSweeperEnv, [(0, 0)], "hard")
        around = MineSweeperEnv._mines_around(env.grid)[0][env.grid[0] != 0]
        unseen = next(v for v in range(env.num_observations) if v not in around.tolist())
        bads = [(r"'last'\].*around a viewed cell", _set("last", 0, unseen))]
        helpers.assert_bad_state_refused(env, bads)

    def test_a_board_with_other_than_twelve_ship_cells_is_refused(self):
        env = _after(BattleshipEnv, [])
        water = _cell(env.board, 0)
        no_ships = lambda state: state["board"][1].zero_()  # noqa: E731
        bads = [(r"'board'\].*holds 12 ship cells", no_ships)]
        bads += [("'board'.*12 ship cells", _set("board", (0, *water), 1))]
        helpers.assert_bad_state_refused(env, bads)

    def test_more_shots_than_steps_and_hits_shown_but_not_counted_are_refused(self):
        env = _after(BattleshipEnv, [])
        water = _cell(env.board, 0)
        bads = [(r"'guesses'\].*shoots at one cell", _set("guesses", (0, *water), 1))]
        bads += [(r"'last'\].*hit counted", _set("last", 1, 1))]
        helpers.assert_bad_state_refused(env, bads)
