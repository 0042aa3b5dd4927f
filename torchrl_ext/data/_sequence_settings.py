"""The settings of :class:`~torchrl_ext.data.Sequence`: validated together, fixed afterwards.

:func:`check_settings` turns the constructor's arguments into the unit's settings, and
:class:`Setting` reads each one back like an attribute and refuses assignment.
"""

from __future__ import annotations

from typing import Any

from tensordict.utils import NestedKey

from torchrl_ext._checks import check_bool, check_choice, check_float, check_int, check_key

BOUNDARIES = ("pad", "stop", "include_reset")
LAYOUTS = ("flat", "batch_time")
REDUCTIONS = ("max", "mean", "mixture")
_MAX_REACH = 2**31 - 1


class Setting:
    """A setting fixed at construction: read like an attribute, refused on assignment.

    Window geometry, keys and priority settings are validated together in ``__init__`` and
    cached tables depend on them, so a changed setting means a new unit.
    """

    def __init__(self, name: str) -> None:
        self.name = name

    def __get__(self, unit: Any, owner: type | None = None) -> Any:
        if unit is None:
            return self
        return unit._config[self.name]

    def __set__(self, unit: Any, value: Any) -> None:
        self.refuse(unit, self.name, value)

    @staticmethod
    def refuse(unit: Any, name: str, value: Any) -> None:
        """Raises the :class:`AttributeError` of an assignment to the setting ``name``.

        Args:
            unit (Any): the unit assigned to.
            name (str): the setting's name.
            value (Any): the value assigned.
        """
        raise AttributeError(
            f"{type(unit).__name__}.{name} is fixed at construction (it is validated with the "
            f"other settings and cached); build a new unit instead, e.g. "
            f"{type(unit).__name__}(..., {name}={value!r})."
        )


def check_settings(
    length: int,
    episode_boundary: str,
    done_key: NestedKey | None,
    burn_in: int,
    bootstrap: int,
    stride: int | None,
    dilation: int | None,
    traj_key: NestedKey | None,
    layout: str,
    priority_reduction: str,
    priority_eta: float,
    priority_learning_only: bool,
    is_init_key: NestedKey,
) -> dict[str, Any]:
    """Validates the arguments of :class:`~torchrl_ext.data.Sequence` together.

    Args:
        length (int): records in the learning region.
        episode_boundary (str): ``"pad"``, ``"stop"`` or ``"include_reset"``.
        done_key (NestedKey or None): stored flag that ends an episode.
        burn_in (int): records before the anchor.
        bootstrap (int): records after the learning region.
        stride (int or None): storage records between consecutive window records.
        dilation (int or None): torchrl's name for ``stride``.
        traj_key (NestedKey or None): stored trajectory id.
        layout (str): ``"flat"`` or ``"batch_time"``.
        priority_reduction (str): ``"max"``, ``"mean"`` or ``"mixture"``.
        priority_eta (float): weight of the max in ``"mixture"``.
        priority_learning_only (bool): reduce priorities over learning records only.
        is_init_key (NestedKey): where ``layout="batch_time"`` writes its reset flags.

    Returns:
        The settings by name, normalised (``dilation`` given as ``stride``).

    Raises:
        TypeError: for an argument of the wrong type.
        ValueError: for a value out of range, an unknown choice, ``stride`` and ``dilation``
            that disagree, a window that reaches too far, or ``traj_key`` with
            ``episode_boundary="include_reset"``.
    """
    stride = _resolve_stride(stride, dilation)
    length = check_int("length", length, minimum=1)
    burn_in = check_int("burn_in", burn_in, minimum=0)
    bootstrap = check_int("bootstrap", bootstrap, minimum=0)
    _check_reach(burn_in, length, bootstrap, stride)
    done_key = check_key("done_key", done_key, optional=True)
    traj_key = check_key("traj_key", traj_key, optional=True)
    if traj_key is not None and episode_boundary == "include_reset":
        raise ValueError(
            "episode_boundary='include_reset' crosses episodes in storage order, which "
            f"trajectory ids do not define; got traj_key={traj_key!r}. Use done_key= "
            "with include_reset, or 'pad'/'stop' with traj_key."
        )
    return {
        "length": length,
        "episode_boundary": check_choice("episode_boundary", episode_boundary, BOUNDARIES),
        "done_key": done_key,
        "traj_key": traj_key,
        "burn_in": burn_in,
        "bootstrap": bootstrap,
        "stride": stride,
        "layout": check_choice("layout", layout, LAYOUTS),
        "priority_reduction": check_choice("priority_reduction", priority_reduction, REDUCTIONS),
        "priority_eta": check_float("priority_eta", priority_eta, 0.0, 1.0),
        "priority_learning_only": check_bool("priority_learning_only", priority_learning_only),
        "is_init_key": check_key("is_init_key", is_init_key),
    }


def _resolve_stride(stride: Any, dilation: Any) -> int:
    """``stride``, or ``dilation`` (torchrl's name for it) when only that is given.

    Args:
        stride (Any): the ``stride`` argument.
        dilation (Any): the ``dilation`` argument.

    Raises:
        ValueError: if both are given and differ.
    """
    if stride is not None and dilation is not None and stride != dilation:
        raise ValueError(
            f"stride and dilation are two names for one setting; got stride={stride!r} and "
            f"dilation={dilation!r}. Pass only one."
        )
    if stride is None and dilation is not None:
        return check_int("dilation", dilation, minimum=1)
    return check_int("stride", 1 if stride is None else stride, minimum=1)


def _check_reach(burn_in: int, length: int, bootstrap: int, stride: int) -> None:
    """Windows are laid out with 32-bit offsets: their reach must fit in ``2**31 - 1``."""
    reach = (burn_in + length + bootstrap) * stride
    if reach > _MAX_REACH:
        raise ValueError(
            f"a window reaches (burn_in + length + bootstrap) * stride = {reach} records, more "
            f"than {_MAX_REACH}; got burn_in={burn_in}, length={length}, bootstrap={bootstrap}, "
            f"stride={stride}."
        )
