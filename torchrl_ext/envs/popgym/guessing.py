"""POPGym's card-guessing games on Warp: :class:`HigherLowerEnv` and :class:`ConcentrationEnv`.

Each env shuffles its deck once per episode from the counter-based stream of
``(seed, env, episode)``; its deck and board are declared state, so :meth:`state_dict` exposes
them and :meth:`load_state_dict` can set them to any state a run reaches: card ids lie in
``[0, N)``, HigherLower's ``steps`` in ``[0, N - 1]`` (stepping a finished episode on without a
reset counts no further) and, once an episode has begun (the ``episode`` counter is positive),
the deck is a permutation of them. An env that has begun no episode since it was built or
seeded holds what steps without a reset left, and only its ranges are checked.
"""

from __future__ import annotations

import math
from typing import Any, ClassVar

import torch

from torchrl_ext.envs._base.state_dicts import require
from torchrl_ext.envs.popgym._kernels import guessing as _k
from torchrl_ext.envs.popgym._port import (
    PopGymEnv,
    require_envs,
    require_in,
    require_range,
    require_shuffled,
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
    truncates_terminal_steps = False  # the deck runs out: terminated, not truncated

    def _configure(self, preset: Any) -> int:
        self.num_decks = preset
        return self.num_cards - 1

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
        """Card ids in ``[0, N)``; once an episode has begun, the deck is a permutation of them."""
        super()._check_state_values(state)
        require_range("deck", state["deck"], 0, self.num_cards, "card ids")
        require_shuffled("deck", state["deck"], state["episode"] > 0)


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

    A loaded state of a begun episode is one its flips reach: matched cards (:attr:`face_up`)
    pair up by value, at most one pair per two steps; :attr:`board` shows the value of matched
    and last-flipped cards and ``facedown`` elsewhere; the last pair's first flip is ``-1`` at
    step 0 only; a pair in play (:attr:`in_play`) is the last step's first flip, of a face-down
    card, and is ``-1`` after a first flip only if that flip was of a matched card; a second
    flip ends the pair; and a matched first card of the last pair was matched with the second.

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
        return math.ceil(2 * n - (n / (2 * n - 1)))

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
            "fail": -1.0 / self.max_steps,
            "zero": 0.0,
            "facedown": self.facedown,
            "by_rank": int(self.match == "ranks"),
        }

    deck = state_view("deck", "The ``[num_envs, N]`` int32 card at each position.")
    face_up = state_view("face_up", "The ``[num_envs, N]`` int32 matched positions (1).")
    in_play = state_view("in_play", "The ``[num_envs]`` int32 first flip of the pair, or -1.")
    board = state_view("board", "The ``[num_envs, N]`` uint8 value each position shows.")

    def _values(self, cards: torch.Tensor) -> torch.Tensor:
        """The value matched of each card: its rank or its colour."""
        return (cards // 4) % _RANKS if self.match == "ranks" else cards % _COLOURS

    def _check_state_values(self, state: dict[str, torch.Tensor]) -> None:
        """Ranges, then what a begun episode keeps: its deck, board, matched pairs and flips."""
        super()._check_state_values(state)
        n, deck, face_up, board = self.num_cards, state["deck"], state["face_up"], state["board"]
        require_range("deck", deck, 0, n, "card ids")
        require_in("face_up", face_up, (0, 1))
        for name in ("in_play", "shown_first", "shown_second"):
            require_range(name, state[name], -1, n, "positions")
        require_range("board", board, 0, self.facedown, "shown values", closed=True)
        begun = state["episode"] > 0
        require_shuffled("deck", deck, begun)
        value = self._values(deck.long())
        self._check_pairs(state, value, begun)
        self._check_board(state, value, begun)

    def _check_board(
        self, state: dict[str, torch.Tensor], value: torch.Tensor, begun: torch.Tensor
    ) -> None:
        """Positions show their card's value iff matched or flipped in the last pair."""
        board = state["board"]
        at = torch.arange(self.num_cards, device=board.device)
        first, second = (state[k].long().unsqueeze(-1) for k in ("shown_first", "shown_second"))
        shown = (state["face_up"] != 0) | (at == first) | (at == second)
        expected = torch.where(shown, value, self.facedown).to(board.dtype)
        ok = (board == expected) | ~begun.unsqueeze(-1)
        require("board", board, ok, "positions show their card iff turned up")

    def _check_pairs(
        self, state: dict[str, torch.Tensor], value: torch.Tensor, begun: torch.Tensor
    ) -> None:
        """Matched cards pair up by value, one pair per two steps; the flips follow the rules."""
        up, steps = state["face_up"].long(), state["steps"]
        per_value = torch.zeros(up.shape[0], self.facedown, dtype=up.dtype, device=up.device)
        per_value.scatter_add_(1, value, up)
        paired = (per_value % 2 == 0).all(dim=-1) & (up.sum(dim=-1) <= steps)
        why = "matched cards pair up by value, and matching a pair takes two steps"
        require_envs("face_up", paired | ~begun, why)
        play, first, second = (state[k].long() for k in ("in_play", "shown_first", "shown_second"))

        def at(rows: torch.Tensor, position: torch.Tensor) -> torch.Tensor:
            return rows.gather(1, position.clamp(min=0).unsqueeze(-1)).squeeze(-1)

        lone = (first >= 0) & (second < 0) & (play < 0)  # a first flip that left no pair
        matched = (second >= 0) & (at(up, first) == 1)
        equal = at(value, first) == at(value, second)
        rules = (
            ("shown_first", (first >= 0) == (steps > 0), "it is -1 at step 0 only"),
            (
                "in_play",
                (play < 0) | ((first == play) & (second < 0) & (at(up, play) == 0)),
                "a pair in play is the last step's flip of a face-down card",
            ),
            (
                "shown_second",
                (second < 0) | ((first >= 0) & (play < 0)),
                "a second flip follows a first one and ends the pair",
            ),
            (
                "in_play",
                ~lone | (at(up, first) == 1),
                "it is -1 after a first flip only if that flip was of a matched card",
            ),
            (
                "face_up",
                ~matched | ((second != first) & (at(up, second) == 1) & equal),
                "a face-up first card of the last pair was matched with its second card",
            ),
        )
        for name, ok, why in rules:
            require(name, state[name], ok | ~begun, why)
