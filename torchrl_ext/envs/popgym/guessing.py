"""POPGym's card-guessing games on Warp: :class:`HigherLowerEnv` and :class:`ConcentrationEnv`.

Each env shuffles its deck once per episode from the counter-based stream of
``(seed, env, episode)``; its deck and board are declared state, so :meth:`state_dict` exposes
them and :meth:`load_state_dict` can set them.
"""

from __future__ import annotations

import math
from typing import Any, ClassVar

import torch

from torchrl_ext.envs._base.state_dicts import require
from torchrl_ext.envs.popgym._kernels import guessing as _k
from torchrl_ext.envs.popgym._port import (
    PopGymEnv,
    require_in,
    require_permutations,
    require_range,
)
from torchrl_ext.envs.warp_env import WarpFunctions, state_view

__all__ = ["ConcentrationEnv", "HigherLowerEnv"]

_CARDS_PER_DECK = 52
_RANKS = 13
_COLOURS = 2


class HigherLowerEnv(PopGymEnv):
    """POPGym's HigherLower: guess whether the next card of a shuffled deck ranks higher.

    Each episode shuffles ``num_decks`` standard decks (``N = 52 * num_decks`` cards) and deals
    one card face up. The observation is the rank of the card on the table (``0`` is the ace,
    ``12`` the king). The action guesses the next card: ``0`` higher, ``1`` lower. A step deals
    the next card: a right guess earns ``1/N``, a wrong one ``-1/N``, a tie ``0``. The episode
    terminates after ``N - 1`` steps, when one card is left; it is never truncated.

    Presets (POPGym's ``HigherLowerEasy``/``Medium``/``Hard``): ``num_decks`` 1, 2, 3.

    Args: as :class:`~torchrl_ext.envs.popgym._port.PopGymEnv`.

    Examples:
        >>> import torch
        >>> from torchrl_ext.envs.popgym.guessing import HigherLowerEnv
        >>> env = HigherLowerEnv(4, seed=0)
        >>> root = env.reset()
        >>> root["observation"].shape, root["observation"].dtype
        (torch.Size([4]), torch.int64)
        >>> data = env.rollout(60, break_when_any_done=False)
        >>> bool(data["next", "terminated"][:, 50].all()), bool(data["next", "done"][:, :50].any())
        (True, False)
    """

    functions = WarpFunctions(
        _k.higher_lower_start, _k.higher_lower_advance, _k.higher_lower_observe
    )
    presets: ClassVar = {"easy": 1, "medium": 2, "hard": 3}

    def _configure(self, preset: Any) -> None:
        self.num_decks = preset

    @property
    def num_cards(self) -> int:
        """``N``, the cards in play: ``52 * num_decks``."""
        return _CARDS_PER_DECK * self.num_decks

    def _make_specs(self) -> None:
        self._set_specs(self._discrete(_RANKS), self._discrete(2))

    def _state_arrays(self) -> dict:
        return {"deck": (torch.int32, (self.num_cards,))}

    def _constants(self) -> dict[str, float]:
        n = self.num_cards
        return {"right": 1.0 / n, "wrong": -1.0 / n, "zero": 0.0}

    deck = state_view(
        "deck",
        "The ``[num_envs, N]`` int32 shuffled decks; the card after ``k`` steps is "
        "``deck[:, N - 1 - k]``.",
    )

    def _check_state_values(self, state: dict[str, torch.Tensor]) -> None:
        super()._check_state_values(state)
        require_permutations("deck", state["deck"])


class ConcentrationEnv(PopGymEnv):
    """POPGym's Concentration: find the pairs of a shuffled deck laid face down, two at a time.

    Each episode lays ``N = 52 * num_decks`` shuffled cards face down; two cards match if they
    have the same colour (``"colors"``) or rank (``"ranks"``). The action flips the card at a
    position. The observation (uint8) shows, per position, the value of matched cards and of the
    cards flipped in the current pair, and ``facedown`` (2 for colours, 13 for ranks) elsewhere. The
    second flip of a pair scores ``1 / (N // 2)`` for a match (both cards stay face up) and
    ``-2 / L`` otherwise; flipping a matched card costs ``-1 / L`` per card in play and ends the
    pair; a valid first flip scores 0. ``L = ceil(2N - N / (2N - 1))``. The episode terminates
    when every card is matched and is truncated after ``L`` steps.

    Presets (POPGym's ``ConcentrationEasy``/``Medium``/``Hard``): ``(num_decks, match)``
    ``(1, "colors")``, ``(2, "colors")``, ``(1, "ranks")``.

    Args: as :class:`~torchrl_ext.envs.popgym._port.PopGymEnv`.

    Examples:
        >>> import torch
        >>> from torchrl_ext.envs.popgym.guessing import ConcentrationEnv
        >>> env = ConcentrationEnv(2, seed=0, difficulty="hard")
        >>> root = env.reset()
        >>> root["observation"].shape, bool((root["observation"] == 13).all())
        (torch.Size([2, 52]), True)
        >>> root["action"] = torch.tensor([0, 5])
        >>> td = env.step(root)
        >>> int((td["next", "observation"] != 13).sum(-1)[0]), float(td["next", "reward"][0])
        (1, 0.0)
    """

    functions = WarpFunctions(
        _k.concentration_start, _k.concentration_advance, _k.concentration_observe
    )
    presets: ClassVar = {"easy": (1, "colors"), "medium": (2, "colors"), "hard": (1, "ranks")}

    def _configure(self, preset: Any) -> int:
        self.num_decks, self.match = preset
        n = self.num_cards
        self.episode_length = math.ceil(2 * n - (n / (2 * n - 1)))
        return self.episode_length

    @property
    def num_cards(self) -> int:
        """``N``, the cards on the table: ``52 * num_decks``."""
        return _CARDS_PER_DECK * self.num_decks

    @property
    def facedown(self) -> int:
        """The observation of a face-down card: the number of card values."""
        return _RANKS if self.match == "ranks" else _COLOURS

    def _make_specs(self) -> None:
        cards = self.num_cards
        # uint8: a board of up to 104 cards, each < 15, in an eighth of int64's bytes
        board = self._multi([self.facedown + 1] * cards, torch.uint8)
        self._set_specs(board, self._discrete(cards))

    def _state_arrays(self) -> dict:
        cards = (self.num_cards,)
        return {
            "deck": (torch.int32, cards),
            "face_up": (torch.int32, cards),
            "in_play": torch.int32,
            "shown_first": torch.int32,
            "shown_second": torch.int32,
            "board": (torch.uint8, cards),
        }

    def _constants(self) -> dict[str, float | int]:
        return {
            "success": 1.0 / (self.num_cards // 2),
            "fail": -1.0 / self.episode_length,
            "zero": 0.0,
            "facedown": self.facedown,
            "by_rank": int(self.match == "ranks"),
        }

    deck = state_view("deck", "The ``[num_envs, N]`` int32 card at each position.")
    face_up = state_view("face_up", "The ``[num_envs, N]`` int32 matched positions (1).")
    in_play = state_view("in_play", "The ``[num_envs]`` int32 first flip of the pair, or -1.")
    board = state_view("board", "The ``[num_envs, N]`` uint8 value each position shows.")

    def _check_state_values(self, state: dict[str, torch.Tensor]) -> None:
        super()._check_state_values(state)
        require_permutations("deck", state["deck"])
        require_in("face_up", state["face_up"], (0, 1))
        for name in ("in_play", "shown_first", "shown_second"):
            require_range(name, state[name], -1, self.num_cards, "positions")
        deck, board = state["deck"].long(), state["board"]
        value = (deck // 4) % _RANKS if self.match == "ranks" else deck % _COLOURS
        at = torch.arange(self.num_cards, device=deck.device)
        first, second = (state[k].long().unsqueeze(-1) for k in ("shown_first", "shown_second"))
        shown = (state["face_up"] != 0) | (at == first) | (at == second)
        expected = torch.where(shown, value, self.facedown).to(board.dtype)
        require("board", board, board == expected, "positions show their card iff turned up")
