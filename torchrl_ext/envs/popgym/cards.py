"""POPGym's card-memory tasks on Warp: RepeatFirst, RepeatPrevious, Autoencode and CountRecall.

Each env deals from shuffled decks of ``52 * num_decks`` cards, as POPGym 1.0.7 does, with the
same observations, actions, rewards and episode lengths; given the same deck order and actions
an env steps exactly as its POPGym counterpart. The presets of ``difficulty`` are POPGym's
``Easy``, ``Medium`` and ``Hard`` classes. The deck order and the number of cards dealt are
state arrays (:meth:`~torchrl_ext.envs.WarpEnv.state_dict` saves them; a loaded state may set
them), and a new episode's decks are shuffled from that episode's random stream.

:meth:`~torchrl_ext.envs.WarpEnv.load_state_dict` refuses a state no run reaches: card ids lie
in ``[0, N)``, ``dealt`` in ``[0, N]`` and ``steps`` in ``[0, max_steps]`` (stepping a
finished episode on without a reset counts no further); once an episode has begun (the
``episode`` counter is positive), each deck is a permutation of the card ids and ``dealt`` is
``min(steps + 1, N)`` (the reset deals one card, each step one more). An env that has begun no
episode since it was built or seeded holds what steps without a reset left, and only its ranges
are checked. Each env names what else it checks.
"""

from __future__ import annotations

from typing import Any, ClassVar

import torch

from torchrl_ext.envs._base.state_dicts import require
from torchrl_ext.envs.popgym._kernels import cards as _k
from torchrl_ext.envs.popgym._port import PopGymEnv, require_range, require_shuffled
from torchrl_ext.envs.warp_env import WarpFunctions, state_view

__all__ = ["AutoencodeEnv", "CountRecallEnv", "RepeatFirstEnv", "RepeatPreviousEnv"]

CARDS_PER_DECK = 52
SUITS = 4


class _CardEnv(PopGymEnv):
    """A POPGym card task: one shuffled deck per env, dealt from the end of its row.

    Subclasses set :attr:`num_decks` in :meth:`_configure` and may change their observation
    (``_observation``), action count (``_num_actions``) and reward scale (``_scale``). Every
    episode ends when the deck does, after ``max_steps`` steps: terminated, never truncated.
    """

    num_decks: int
    truncates_terminal_steps = False

    def _configure(self, preset: Any) -> int:
        self.num_decks = preset
        return self.num_cards - 1

    @property
    def num_cards(self) -> int:
        """Cards in a deck: ``52 * num_decks``."""
        return CARDS_PER_DECK * self.num_decks

    deck = state_view(
        "deck", "The ``[num_envs, num_cards]`` int32 shuffled decks; cards are dealt from the end."
    )
    dealt = state_view("dealt", "The ``[num_envs]`` int32 number of cards dealt so far.")

    def _observation(self) -> Any:
        """The ``"observation"`` spec."""
        return self._discrete(SUITS)

    def _num_actions(self) -> int:
        return SUITS

    def _scale(self) -> float:
        """The magnitude of a scored step's reward: ``1 / (num_cards - 1)`` unless overridden."""
        return 1.0 / (self.num_cards - 1)

    def _make_specs(self) -> None:
        self._set_specs(self._observation(), self._discrete(self._num_actions()))

    def _state_arrays(self) -> dict[str, Any]:
        return {"deck": (torch.int32, (self.num_cards,)), "dealt": torch.int32}

    def _constants(self) -> dict[str, float | int]:
        return {"scale": self._scale()}

    def _check_state_values(self, state: dict[str, torch.Tensor]) -> None:
        """Ranges, then what a begun episode keeps: its decks and the cards dealt by its steps.

        Card ids lie in ``[0, num_cards)`` and counters in ``[0, num_cards]``. Once an episode
        has begun, each deck is a permutation of the card ids and ``dealt`` is
        ``min(steps + 1, num_cards)``.
        """
        super()._check_state_values(state)
        n = self.num_cards
        decks = [name for name in self._state_arrays() if name.endswith("deck")]
        for name in self._state_arrays():
            if name in decks:
                require_range(name, state[name], 0, n, "card ids")
            elif name != "counts":
                require_range(name, state[name], 0, n, "counters", closed=True)
        begun = state["episode"] > 0
        for name in decks:
            require_shuffled(name, state[name], begun)
        dealt = state["dealt"]
        expected = (state["steps"].long() + 1).clamp(max=n)
        why = f"once an episode has begun, dealt is min(steps + 1, {n})"
        require("dealt", dealt, (dealt == expected) | ~begun, why)


class RepeatFirstEnv(_CardEnv):
    """POPGym's RepeatFirst: repeat the suit of the first card, on every step.

    Each step shows the suit of a newly dealt card (``Categorical(4)``; the reset shows the first
    card's). The action (a suit) pays ``+1 / (N - 1)`` if it is the first card's suit, else
    ``-1 / (N - 1)`` (``N = 52 * num_decks`` cards), so returns lie in ``[-1, 1]``. The episode
    terminates after ``N - 1`` steps; it is never truncated.

    Presets (POPGym's ``RepeatFirstEasy``/``Medium``/``Hard``): 1, 8 or 16 decks.

    Args: as :class:`~torchrl_ext.envs.popgym._port.PopGymEnv`.

    Examples:
        >>> from torchrl.envs.utils import check_env_specs
        >>> from torchrl_ext.envs.popgym.cards import RepeatFirstEnv
        >>> env = RepeatFirstEnv(4, seed=0)
        >>> check_env_specs(env)
        >>> data = env.rollout(60, break_when_any_done=False)
        >>> data["next", "observation"].shape, int(data["next", "done"].sum())
        (torch.Size([4, 60]), 4)
    """

    functions = WarpFunctions(_k.repeat_start, _k.repeat_first_advance, _k.suit_observe)
    presets: ClassVar = {"easy": 1, "medium": 8, "hard": 16}


class RepeatPreviousEnv(_CardEnv):
    """POPGym's RepeatPrevious: repeat the suit shown ``k`` observations ago.

    Each step shows the suit of a newly dealt card (``Categorical(4)``; the reset shows the first
    card's). From the ``k``-th step on, the action (a suit) pays ``+1 / (N - k)`` if it is the
    suit shown ``k`` observations earlier (the reset's counts as observation 0), else
    ``-1 / (N - k)``; earlier steps pay 0. The episode terminates after ``N - 1`` steps
    (``N = 52 * num_decks``); it is never truncated.

    Presets (POPGym's ``RepeatPreviousEasy``/``Medium``/``Hard``): 1, 2 or 3 decks with ``k`` =
    4, 32 or 64.

    Args: as :class:`~torchrl_ext.envs.popgym._port.PopGymEnv`.

    Examples:
        >>> from torchrl.envs.utils import check_env_specs
        >>> from torchrl_ext.envs.popgym.cards import RepeatPreviousEnv
        >>> env = RepeatPreviousEnv(4, seed=0, difficulty="medium")
        >>> check_env_specs(env)
        >>> env.k, env.max_steps
        (32, 103)
        >>> data = env.rollout(40, break_when_any_done=False)
        >>> data["next", "observation"].shape, bool((data["next", "reward"][:, :31] == 0).all())
        (torch.Size([4, 40]), True)
    """

    functions = WarpFunctions(_k.repeat_start, _k.repeat_previous_advance, _k.suit_observe)
    presets: ClassVar = {"easy": (1, 4), "medium": (2, 32), "hard": (3, 64)}

    def _configure(self, preset: Any) -> int:
        self.num_decks, self.k = preset
        return self.num_cards - 1

    def _scale(self) -> float:
        return 1.0 / (self.num_cards - self.k)

    def _constants(self) -> dict[str, float | int]:
        return {**super()._constants(), "k": self.k}


class AutoencodeEnv(_CardEnv):
    """POPGym's Autoencode: watch a whole deck, then recite its suits in reverse order.

    The observation is ``(mode, suit)`` (``MultiCategorical([2, 4])``; mode 1 is *watch*, 0 is
    *play*). While watching, each step deals and shows a card, ``(1, suit)``, ignores the action
    and pays 0; the step showing the last card shows ``(0, suit)``. Then each play step shows
    ``(0, 0)`` and pays ``+1 / N`` if the action is the suit of the next card to recite (last
    shown first), else ``-1 / N``. The episode terminates on reciting the first card, after
    ``2N - 1`` steps (``N = 52 * num_decks``); it is never truncated. :attr:`recited` counts the
    cards recited; in a loaded state it must be ``steps - (N - 1)`` clipped to ``[0, N]``.

    Presets (POPGym's ``AutoencodeEasy``/``Medium``/``Hard``): 1, 2 or 3 decks.

    Args: as :class:`~torchrl_ext.envs.popgym._port.PopGymEnv`.

    Examples:
        >>> from torchrl.envs.utils import check_env_specs
        >>> from torchrl_ext.envs.popgym.cards import AutoencodeEnv
        >>> env = AutoencodeEnv(4, seed=0)
        >>> check_env_specs(env)
        >>> data = env.rollout(103, break_when_any_done=False)
        >>> obs, done = data["next", "observation"], data["next", "done"]
        >>> obs.shape, int(obs[0, :, 0].sum()), bool(done[:, -1].all())
        (torch.Size([4, 103, 2]), 50, True)
    """

    functions = WarpFunctions(_k.autoencode_start, _k.autoencode_advance, _k.autoencode_observe)
    presets: ClassVar = {"easy": 1, "medium": 2, "hard": 3}

    recited = state_view("recited", "The ``[num_envs]`` int32 number of cards recited so far.")

    def _configure(self, preset: Any) -> int:
        return 2 * super()._configure(preset) + 1  # N cards shown, then N recited

    def _observation(self) -> Any:
        return self._multi([2, SUITS])

    def _scale(self) -> float:
        return 1.0 / self.num_cards

    def _state_arrays(self) -> dict[str, Any]:
        return {**super()._state_arrays(), "recited": torch.int32}

    def _check_state_values(self, state: dict[str, torch.Tensor]) -> None:
        """Also: once an episode has begun, ``recited`` counts its steps past the watch phase."""
        super()._check_state_values(state)
        n, recited = self.num_cards, state["recited"]
        expected = (state["steps"].long() - (n - 1)).clamp(0, n)
        why = f"once an episode has begun, recited is steps - {n - 1}, clipped to [0, {n}]"
        require("recited", recited, (recited == expected) | (state["episode"] == 0), why)


class CountRecallEnv(_CardEnv):
    """POPGym's CountRecall: say how many dealt cards had the value of the last query card.

    Each step deals one card from each of two decks and shows ``(value, query)``, their colours,
    suits or ranks (``MultiCategorical([D, D])``, ``D`` = 2, 4 or 13). The action, in
    ``[0, N / D]``, pays ``+1 / (N - 1)`` if it equals the number of value cards dealt so far
    (before this step's deal) whose value is the previous observation's query, else
    ``-1 / (N - 1)``. The episode terminates when the decks run out, after ``N - 1`` steps
    (``N = 52 * num_decks``); it is never truncated. :attr:`deck` is the value deck,
    :attr:`query_deck` the query deck and :attr:`counts` the running count of each value; in a
    loaded state it must count the values of the cards dealt from :attr:`deck`.

    Presets (POPGym's ``CountRecallEasy``/``Medium``/``Hard``): 1 deck of colours, 2 decks of
    suits or 4 decks of ranks.

    Args: as :class:`~torchrl_ext.envs.popgym._port.PopGymEnv`.

    Examples:
        >>> from torchrl.envs.utils import check_env_specs
        >>> from torchrl_ext.envs.popgym.cards import CountRecallEnv
        >>> env = CountRecallEnv(4, seed=0, difficulty="hard")
        >>> check_env_specs(env)
        >>> env.action_spec.space.n, env.observation_spec["observation"].nvec.tolist()[0]
        (17, [13, 13])
        >>> root = env.reset()
        >>> env.counts.sum(-1).tolist()
        [1, 1, 1, 1]
        >>> env.rollout(10, break_when_any_done=False)["next", "observation"].shape
        torch.Size([4, 10, 2])
    """

    functions = WarpFunctions(
        _k.count_recall_start, _k.count_recall_advance, _k.count_recall_observe
    )
    presets: ClassVar = {
        "easy": (1, _k.COLOURS, 2),
        "medium": (2, _k.SUITS, 4),
        "hard": (4, _k.RANKS, 13),
    }

    def _configure(self, preset: Any) -> int:
        self.num_decks, self._kind, self.num_values = preset
        return self.num_cards - 1

    query_deck = state_view("query_deck", "The ``[num_envs, num_cards]`` int32 query decks.")
    counts = state_view("counts", "The ``[num_envs, D]`` int32 count of each value dealt.")

    @property
    def max_count(self) -> int:
        """The most cards of one value in a deck: ``num_cards / D``."""
        return self.num_cards // self.num_values

    def _observation(self) -> Any:
        return self._multi([self.num_values, self.num_values])

    def _num_actions(self) -> int:
        return self.max_count + 1

    def _state_arrays(self) -> dict[str, Any]:
        return {
            **super()._state_arrays(),
            "query_deck": (torch.int32, (self.num_cards,)),
            "counts": (torch.int32, (self.num_values,)),
        }

    def _constants(self) -> dict[str, float | int]:
        return {**super()._constants(), "kind": self._kind}

    def _value(self, cards: torch.Tensor) -> torch.Tensor:
        """The value of each card that this env counts: its colour, suit or rank."""
        if self._kind == _k.COLOURS:
            return cards % 2
        if self._kind == _k.SUITS:
            return cards % SUITS
        return (cards // SUITS) % 13

    def _check_state_values(self, state: dict[str, torch.Tensor]) -> None:
        """Also: ``counts`` is the histogram of the values of the cards dealt from ``deck``."""
        super()._check_state_values(state)
        deck, dealt, counts = state["deck"].long(), state["dealt"].long(), state["counts"]
        n = self.num_cards
        is_dealt = torch.arange(n, device=deck.device) >= (n - dealt).unsqueeze(-1)
        seen = torch.zeros(counts.shape, dtype=torch.long, device=deck.device)
        seen.scatter_add_(1, self._value(deck), is_dealt.long())
        why = "counts[v] is the number of cards of value v among the last dealt cards of deck"
        require("counts", counts, counts == seen, why)
