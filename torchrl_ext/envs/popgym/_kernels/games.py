"""Warp functions of POPGym's board and bandit games: MultiarmedBandit, MineSweeper, Battleship.

The hidden state is drawn from the episode's stream (``start``'s ``key``, a hash of
``(seed, env, episode)``); the bandit's payouts from the step's stream (``advance``'s ``key``).

**MultiarmedBandit.** ``probs[k]`` is arm ``k``'s payout probability, drawn at the start of an
episode as a float32 uniform on the 2**-24 grid of ``[0, 1)`` (draws ``0 .. K-1``). A step pays
out iff the first draw of its stream (``advance``'s ``key``) is below the chosen arm's
probability, so every step draws fresh; ``payout`` is the last observation.

**MineSweeper.** ``grid[r, c]`` is 0 (clear), 1 (mine) or 2 (viewed). The mines form a uniformly
random subset of the cells (Floyd's sampling, one draw per mine). The observation ``last`` is
the number of mines in the 3x3 block around (and including) the last cell clicked.

**Battleship.** ``board`` marks ship cells, ``guesses`` the cells shot at, ``hits`` the ship
cells hit. Ships of sizes 2, 3, 3, 4 are placed in turn as POPGym places them: a random start
cell, axis and direction (one draw of the ``4 B**2`` combinations per try), retried until the
ship lies on the board without touching the box of an earlier ship's cells. ``last`` is the
last observation (1: a hit).
"""

from __future__ import annotations

from typing import Any

import warp as wp

from torchrl_ext.envs._kernels.common import uniform64, uniform_int

_GRID24 = wp.constant(wp.float64(16777216.0))
MINE = wp.constant(1)
VIEWED = wp.constant(2)
SHIPS = wp.constant(4)


# Loops over cells are ``while`` loops: Warp's CPU code for ``range()`` with a bound known only at
# run time is several times slower, and some of these run every step.
@wp.func
def fill_box(grid: wp.array3d(dtype=wp.int32), i: int, r0: int, c0: int, r1: int, c1: int, v: int):
    """Set the cells ``[r0, r1) x [c0, c1)`` of env ``i``'s grid to ``v``."""
    r = int(r0)
    while r < r1:
        c = int(c0)
        while c < c1:
            grid[i, r, c] = wp.int32(v)
            c += 1
        r += 1


@wp.func
def count_in_box(
    grid: wp.array3d(dtype=wp.int32), i: int, r0: int, c0: int, r1: int, c1: int, v: int
) -> int:
    """How many cells of ``[r0, r1) x [c0, c1)`` in env ``i``'s grid equal ``v``."""
    count = wp.int32(0)
    r = int(r0)
    while r < r1:
        c = int(c0)
        while c < c1:
            if grid[i, r, c] == wp.int32(v):
                count += 1
            c += 1
        r += 1
    return count


# ----------------------------------------------------------------------------- MultiarmedBandit
@wp.func
def bandit_start(s: Any, p: Any, i: int, key: wp.uint32):
    """A new episode: draw every arm's payout probability."""
    k = wp.int32(0)
    while k < s.probs.shape[1]:
        grid = wp.floor(uniform64(key, k) * _GRID24)
        s.probs[i, k] = wp.float32(grid / _GRID24)
        k += 1
    s.payout[i] = wp.int32(0)


@wp.func
def bandit_advance(s: Any, p: Any, a: Any, i: int, step: int, key: wp.uint32):
    """Pull arm ``a.action[i]``: pays ``1/L`` with its probability, else costs ``1/L``."""
    paid = uniform64(key, 0) < wp.float64(s.probs[i, int(a.action[i])])
    s.payout[i] = wp.where(paid, wp.int32(1), wp.int32(0))
    return wp.where(paid, p.win, p.loss), False


@wp.func
def bandit_observe(s: Any, p: Any, o: Any, i: int, step: int, key: wp.uint32):
    """Whether the last pull paid out (0 at the start)."""
    o.observation[i] = o.observation.dtype(s.payout[i])


# ---------------------------------------------------------------------------------- MineSweeper
@wp.func
def mines_start(s: Any, p: Any, i: int, key: wp.uint32):
    """A new episode: clear the grid and lay ``p.mines`` mines on distinct random cells."""
    height, width = s.grid.shape[1], s.grid.shape[2]
    cells = height * width
    fill_box(s.grid, i, 0, 0, height, width, 0)
    for j in range(cells - p.mines, cells):
        pick = uniform_int(key, j - (cells - p.mines), j + 1)
        if s.grid[i, pick // width, pick % width] == wp.int32(MINE):
            pick = j
        s.grid[i, pick // width, pick % width] = wp.int32(MINE)
    s.last[i] = wp.int32(0)


@wp.func
def mines_around(s: Any, i: int, row: int, col: int) -> int:
    """Mines in the 3x3 block centred on ``(row, col)``, the cell itself included."""
    height, width = s.grid.shape[1], s.grid.shape[2]
    r0, c0 = wp.max(row - 1, 0), wp.max(col - 1, 0)
    return count_in_box(s.grid, i, r0, c0, wp.min(row + 2, height), wp.min(col + 2, width), MINE)


@wp.func
def all_clear_viewed(s: Any, i: int) -> bool:
    """Whether no clear cell is left unviewed."""
    return count_in_box(s.grid, i, 0, 0, s.grid.shape[1], s.grid.shape[2], 0) == 0


@wp.func
def mines_advance(s: Any, p: Any, a: Any, i: int, step: int, key: wp.uint32):
    """Click cell ``a.action[i]`` = (row, col): a mine ends the episode, a viewed cell costs."""
    row, col = int(a.action[i, 0]), int(a.action[i, 1])
    cell = s.grid[i, row, col]
    reward = p.success
    terminated = False
    if cell == wp.int32(MINE):
        reward = p.fail
        terminated = True
    elif cell == wp.int32(VIEWED):
        reward = p.bad
    else:
        s.grid[i, row, col] = wp.int32(VIEWED)
    s.last[i] = wp.int32(mines_around(s, i, row, col))
    return reward, terminated or all_clear_viewed(s, i)


@wp.func
def last_observe(s: Any, p: Any, o: Any, i: int, step: int, key: wp.uint32):
    """The last observation kept in ``last``."""
    o.observation[i] = o.observation.dtype(s.last[i])


# ----------------------------------------------------------------------------------- Battleship
@wp.func
def place_ship(s: Any, i: int, key: wp.uint32, size: int, first_draw: int) -> int:
    """Place one ship of ``size`` cells by rejection, from draw ``first_draw``; return the next."""
    b = s.board.shape[1]
    draw = int(first_draw)
    placed = wp.int32(0)
    while placed == 0:
        pick = uniform_int(key, draw, 4 * b * b)  # one draw: start cell, axis and direction
        draw += 1
        r0, c0 = (pick // 4) // b, (pick // 4) % b
        axis, sign = (pick // 2) % 2, pick % 2
        delta = (size - 1) * (1 - 2 * sign)
        r1 = r0 + wp.where(axis == 0, delta, 0)
        c1 = c0 + wp.where(axis == 1, delta, 0)
        if r1 >= 0 and r1 < b and c1 >= 0 and c1 < b:
            lo_r, hi_r = wp.min(r0, r1), wp.max(r0, r1)
            lo_c, hi_c = wp.min(c0, c1), wp.max(c0, c1)
            if count_in_box(s.board, i, lo_r, lo_c, hi_r + 1, hi_c + 1, 1) == 0:
                fill_box(s.board, i, lo_r, lo_c, hi_r + 1, hi_c + 1, 1)
                placed = 1
    return draw


@wp.func
def battleship_start(s: Any, p: Any, i: int, key: wp.uint32):
    """A new episode: an empty sea, then ships of sizes 2, 3, 3 and 4 placed in that order."""
    b = s.board.shape[1]
    fill_box(s.board, i, 0, 0, b, b, 0)
    fill_box(s.guesses, i, 0, 0, b, b, 0)
    draw = wp.int32(0)
    for k in range(SHIPS):
        draw = place_ship(s, i, key, 2 + (k + 1) // 2, draw)
    s.hits[i] = wp.int32(0)
    s.last[i] = wp.int32(0)


@wp.func
def battleship_advance(s: Any, p: Any, a: Any, i: int, step: int, key: wp.uint32):
    """Shoot at ``a.action[i]`` = (row, col); a hit is a ship cell not shot at before."""
    row, col = int(a.action[i, 0]), int(a.action[i, 1])
    hit = s.board[i, row, col] != wp.int32(0) and s.guesses[i, row, col] == wp.int32(0)
    s.guesses[i, row, col] = wp.int32(1)
    s.hits[i] = s.hits[i] + wp.where(hit, wp.int32(1), wp.int32(0))
    s.last[i] = wp.where(hit, wp.int32(1), wp.int32(0))
    return wp.where(hit, p.hit, p.miss), s.hits[i] == wp.int32(p.needed_hits)
