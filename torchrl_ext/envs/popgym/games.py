"""POPGym's bandit and board games on Warp: MultiarmedBandit, MineSweeper and Battleship.

Each env draws its hidden state (arm probabilities, mines, ships) from the counter-based stream
of ``(seed, env, episode)``; the hidden state is declared state, so :meth:`state_dict` exposes it
and :meth:`load_state_dict` can set it to any state a run reaches (each env names what it checks).
An env that has begun no episode since it was built or seeded (``episode`` 0) may hold no mines
or ships.
"""

from __future__ import annotations

from typing import Any, ClassVar

import torch

from torchrl_ext.envs._base.state_dicts import require
from torchrl_ext.envs.popgym._kernels import games as _k
from torchrl_ext.envs.popgym._port import (
    PopGymEnv,
    require_envs,
    require_in,
    require_range,
)
from torchrl_ext.envs.warp_env import WarpFunctions, state_view

__all__ = ["BattleshipEnv", "MineSweeperEnv", "MultiarmedBanditEnv"]

_SHIP_SIZES = (2, 3, 3, 4)


class _GridEnv(PopGymEnv):
    """An env whose action is a ``(row, col)`` cell: a ``MultiCategorical``, checked per column."""

    def _grid_specs(self, rows: int, cols: int, observations: int) -> None:
        self._set_specs(self._discrete(observations), self._multi([rows, cols]))


class MultiarmedBanditEnv(PopGymEnv):
    """POPGym's MultiarmedBandit: find the best of ``K`` arms with hidden payout probabilities.

    Each episode draws every arm's payout probability uniformly in ``[0, 1)`` (float32). The
    action pulls an arm; the observation is 1 if it paid out, else 0 (0 at the start). A payout
    earns ``1/L``, a miss costs ``1/L``. The episode is truncated after ``L`` steps and never
    terminates. A step's payout is drawn from that step's own random stream, so the state holds
    no random key. A loaded state has probabilities in ``[0, 1]`` and a ``payout`` of 0 or 1, 0
    at step 0.

    Presets (POPGym's ``MultiarmedBanditEasy``/``Medium``/``Hard``): ``(K, L)`` ``(10, 200)``,
    ``(20, 400)``, ``(30, 600)``.

    Args: as :class:`~torchrl_ext.envs.popgym._port.PopGymEnv`.

    Examples:
        >>> import torch
        >>> from torchrl_ext.envs.popgym.games import MultiarmedBanditEnv
        >>> env = MultiarmedBanditEnv(4, seed=0)
        >>> root = env.reset()
        >>> env.probs.shape, bool(((env.probs >= 0) & (env.probs < 1)).all())
        (torch.Size([4, 10]), True)
        >>> data = env.rollout(200, break_when_any_done=False)
        >>> bool(data["next", "truncated"][:, -1].all()), bool(data["next", "done"][:, :-1].any())
        (True, False)
    """

    functions = WarpFunctions(_k.bandit_start, _k.bandit_advance, _k.bandit_observe)
    presets: ClassVar = {"easy": (10, 200), "medium": (20, 400), "hard": (30, 600)}

    def _configure(self, preset: Any) -> int:
        self.num_bandits, max_steps = preset
        return max_steps

    def _make_specs(self) -> None:
        self._set_specs(self._discrete(2), self._discrete(self.num_bandits))

    def _state_arrays(self) -> dict:
        return {
            "probs": (torch.float32, (self.num_bandits,)),
            "payout": torch.int32,
        }

    def _constants(self) -> dict[str, float]:
        return {"win": 1.0 / self.max_steps, "loss": -1.0 / self.max_steps}

    probs = state_view("probs", "The ``[num_envs, K]`` float32 payout probability of each arm.")

    def _check_state_values(self, state: dict[str, torch.Tensor]) -> None:
        """Probabilities in ``[0, 1]``, a 0/1 payout that is 0 before any pull."""
        super()._check_state_values(state)
        require_range("probs", state["probs"], 0, 1, "probabilities", closed=True)
        payout = state["payout"]
        require_in("payout", payout, (0, 1))
        require("payout", payout, (payout == 0) | (state["steps"] > 0), "it is 0 at step 0")


class MineSweeperEnv(_GridEnv):
    """POPGym's MineSweeper: view every clear cell of a grid without clicking a mine.

    Each episode lays ``M`` mines on distinct uniformly random cells of an ``H x W`` grid. The
    action clicks a cell ``(row, col)``; the observation is the number of mines in the 3x3 block
    around it, the cell itself included (0 at the start). With ``L = H * W - M``, viewing a new
    clear cell earns ``1/L``, clicking a viewed one costs ``0.5 / (L - 2)`` and clicking a mine
    costs ``0.5 + 1/L`` and terminates; viewing the last clear cell terminates too. The episode
    is truncated after ``L`` steps unless it terminates on that step: as POPGym, a step that
    terminates at the limit is reported as terminated only (``truncates_terminal_steps`` is
    ``False``). A loaded state has cells 0, 1 or 2 with exactly ``M`` mines, at most ``steps``
    viewed cells, and a last observation that is 0 at step 0, then the mine count around a
    viewed cell or a mine.

    Presets (POPGym's ``MineSweeperEasy``/``Medium``/``Hard``): ``(H, W, M)`` ``(4, 4, 2)``,
    ``(6, 6, 6)``, ``(8, 8, 10)``.

    Args: as :class:`~torchrl_ext.envs.popgym._port.PopGymEnv`.

    Examples:
        >>> import torch
        >>> from torchrl_ext.envs.popgym.games import MineSweeperEnv
        >>> env = MineSweeperEnv(4, seed=0)
        >>> root = env.reset()
        >>> env.grid.shape, (env.grid == 1).sum(dim=(1, 2)).tolist()
        (torch.Size([4, 4, 4]), [2, 2, 2, 2])
        >>> data = env.rollout(30, break_when_any_done=False)
        >>> data["next", "observation"].shape, bool(data["next", "done"].any())
        (torch.Size([4, 30]), True)
    """

    functions = WarpFunctions(_k.mines_start, _k.mines_advance, _k.last_observe)
    presets: ClassVar = {"easy": (4, 4, 2), "medium": (6, 6, 6), "hard": (8, 8, 10)}
    truncates_terminal_steps = False

    def _configure(self, preset: Any) -> int:
        self.height, self.width, self.num_mines = preset
        return self.height * self.width - self.num_mines

    @property
    def num_observations(self) -> int:
        """Size of the observation space: ``min(M + 1, 10)``."""
        return min(self.num_mines + 1, 10)

    def _make_specs(self) -> None:
        self._grid_specs(self.height, self.width, self.num_observations)

    def _state_arrays(self) -> dict:
        return {"grid": (torch.int32, (self.height, self.width)), "last": torch.int32}

    def _constants(self) -> dict[str, float | int]:
        steps = self.max_steps
        return {
            "success": 1.0 / steps,
            "fail": -0.5 - 1.0 / steps,
            "bad": -0.5 / (steps - 2),
            "mines": self.num_mines,
        }

    grid = state_view("grid", "The ``[num_envs, H, W]`` int32 cells: 0 clear, 1 mine, 2 viewed.")

    def _check_state_values(self, state: dict[str, torch.Tensor]) -> None:
        """Cells 0, 1 or 2; ``M`` mines; no more viewed cells than steps; ``last`` seen somewhere.

        An env that has begun no episode (``episode`` 0) may have no mines; ``last`` is 0 at
        step 0 and after that the mine count around a viewed cell or a mine.
        """
        super()._check_state_values(state)
        grid, last, steps = state["grid"], state["last"], state["steps"]
        require_in("grid", grid, (0, 1, 2))
        require_range("last", last, 0, self.num_observations, "observations")
        mines, m = (grid == _k.MINE).sum(dim=(1, 2)), self.num_mines
        ok = (mines == m) | ((mines == 0) & (state["episode"] == 0))
        require_envs("grid", ok, f"a grid holds {m} mines, or none before the first episode")
        viewed = (grid == _k.VIEWED).sum(dim=(1, 2))
        require_envs("grid", viewed <= steps, "each step views at most one cell")
        around = self._mines_around(grid)
        clicked = (grid != 0) & (around == last.view(-1, 1, 1))
        ok = torch.where(steps > 0, clicked.flatten(1).any(dim=1), last == 0)
        why = "it is 0 at step 0, then the mine count around a viewed cell or a mine"
        require("last", last, ok, why)

    @staticmethod
    def _mines_around(grid: torch.Tensor) -> torch.Tensor:
        """``[N, H, W]`` mines in the 3x3 block around each cell, the cell itself included."""
        mines = (grid == _k.MINE).to(torch.float32).unsqueeze(1)
        box = torch.ones(1, 1, 3, 3, dtype=mines.dtype, device=mines.device)
        return torch.nn.functional.conv2d(mines, box, padding=1).squeeze(1).round().to(grid.dtype)


class BattleshipEnv(_GridEnv):
    """POPGym's Battleship: sink four hidden ships by shooting at the cells of a square board.

    Each episode places ships of sizes 2, 3, 3 and 4 on a ``B x B`` board as POPGym does (random
    start, axis and direction, retried until the ship fits and touches no earlier ship). The
    action shoots at a cell ``(row, col)``; the observation is 1 for a hit (a ship cell not shot
    before), else 0 (0 at the start). With ``L = B * B``, a hit earns ``1/12``, a miss costs
    ``1 / (L - 12)``. The episode terminates when all 12 ship cells are hit and is truncated
    after ``L`` steps, also when it terminates on that step (POPGym reports both flags then).
    A loaded state has 0/1 cells with exactly 12 ship cells, at most ``steps`` cells shot at,
    ``hits`` counting the ship cells shot at, and a last observation of 1 only after a hit.

    Presets (POPGym's ``BattleshipEasy``/``Medium``/``Hard``): ``B`` 8, 10, 12.

    Args: as :class:`~torchrl_ext.envs.popgym._port.PopGymEnv`.

    Examples:
        >>> import torch
        >>> from torchrl_ext.envs.popgym.games import BattleshipEnv
        >>> env = BattleshipEnv(4, seed=0)
        >>> root = env.reset()
        >>> env.board.shape, env.board.sum(dim=(1, 2)).tolist()
        (torch.Size([4, 8, 8]), [12, 12, 12, 12])
        >>> _ = torch.manual_seed(0)  # the random actions rollout draws
        >>> data = env.rollout(64, break_when_any_done=False)
        >>> bool(data["next", "done"][:, -1].all())
        True
    """

    functions = WarpFunctions(_k.battleship_start, _k.battleship_advance, _k.last_observe)
    presets: ClassVar = {"easy": 8, "medium": 10, "hard": 12}

    def _configure(self, preset: Any) -> int:
        self.board_size = preset
        return self.board_size**2

    @property
    def needed_hits(self) -> int:
        """Ship cells to hit: 12."""
        return sum(_SHIP_SIZES)

    def _make_specs(self) -> None:
        self._grid_specs(self.board_size, self.board_size, 2)

    def _state_arrays(self) -> dict:
        cells = (self.board_size, self.board_size)
        return {
            "board": (torch.int32, cells),
            "guesses": (torch.int32, cells),
            "hits": torch.int32,
            "last": torch.int32,
        }

    def _constants(self) -> dict[str, float | int]:
        need = self.needed_hits
        return {"hit": 1.0 / need, "miss": -1.0 / (self.max_steps - need), "needed_hits": need}

    def _random_actions(self, steps: int) -> dict:
        """``[N, T, 2]`` uniform cells, every row and column in one int draw (torch's generator)."""
        shape = (self.num_envs, steps, 2)
        return {"action": torch.randint(0, self.board_size, shape, device=self.device)}

    board = state_view("board", "The ``[num_envs, B, B]`` int32 ship cells (1).")
    guesses = state_view("guesses", "The ``[num_envs, B, B]`` int32 cells shot at (1).")

    def _check_state_values(self, state: dict[str, torch.Tensor]) -> None:
        """0/1 cells; 12 ship cells; no more shots than steps; hits and ``last`` agree with them.

        An env that has begun no episode (``episode`` 0) may have no ships.
        """
        super()._check_state_values(state)
        board, guesses, hits, last = state["board"], state["guesses"], state["hits"], state["last"]
        require_in("board", board, (0, 1))
        require_in("guesses", guesses, (0, 1))
        require_in("last", last, (0, 1))
        ships, need = board.sum(dim=(1, 2)), self.needed_hits
        ok = (ships == need) | ((ships == 0) & (state["episode"] == 0))
        why = f"a board holds {need} ship cells, or none before the first episode"
        require_envs("board", ok, why)
        shots = guesses.sum(dim=(1, 2))
        require_envs("guesses", shots <= state["steps"], "each step shoots at one cell")
        counted = (board * guesses).sum(dim=(1, 2)).to(hits.dtype)
        require("hits", hits, hits == counted, "hits count the ship cells shot at")
        require("last", last, last <= hits, "a hit shown is a hit counted")
