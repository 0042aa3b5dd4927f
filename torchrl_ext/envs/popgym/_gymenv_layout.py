"""GymEnv's layout of a POPGym port: the specs TorchRL's ``GymEnv`` gives, and the conversions.

TorchRL's ``GymEnv("popgym-...-v0")`` turns popgym's gymnasium spaces into specs by these rules
(torchrl 0.14), for observations and actions alike despite the switch's name:

=========================  ==========================  ==================================
popgym space               default (one-hot)           ``categorical_action_encoding``
=========================  ==========================  ==================================
``Discrete(n)``            ``OneHot(n)``, ``[n]``      ``Categorical(n)``, ``[]``
``MultiDiscrete([n]*k)``   ``OneHot(n)``, ``[k, n]``   ``Categorical(n)``, ``[k]``
``MultiDiscrete(nvec)``    ``MultiOneHot(nvec)``       ``MultiCategorical(nvec)``
``Box(-high, high)``       ``Bounded(-high, high)`` (``Unbounded`` for float32's extremes)
=========================  ==========================  ==================================

Discrete entries are int64. The ports' kernels keep reading and writing category indices: a
:class:`GymEnvLayout` presents the env's outputs in GymEnv's layout and turns actions given in
it back into indices, at the TensorDict boundary. A one-hot entry is ``index == arange(n)``
(one comparison, exact, no host read); a one-hot action is checked to be one-hot before its
``argmax`` is loaded.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from tensordict import TensorDictBase
from torchrl.data import (
    Bounded,
    Categorical,
    MultiCategorical,
    MultiOneHot,
    OneHot,
    TensorSpec,
)

from torchrl_ext._checks import check_tensor
from torchrl_ext._compat import set_unchecked

#: Where a TensorDict the env hands out holds observations and actions.
_OBSERVATION_KEYS = ("observation", ("next", "observation"))
_ACTION_KEY = "action"


def gymenv_spec(
    native: TensorSpec, categorical: bool, high: Sequence[float] | None = None
) -> TensorSpec:
    """GymEnv's spec of an entry whose kernels' spec is ``native`` (shapes start with ``N``).

    Args:
        native (TensorSpec): ``Categorical`` (popgym's ``Discrete``), ``MultiCategorical``
            (``MultiDiscrete``) or a float spec (``Box``).
        categorical (bool): GymEnv's ``categorical_action_encoding``.
        high (sequence of float, optional): the bound of popgym's ``Box(-high, high)``; ``None``
            keeps a float spec as it is (``Unbounded``). Defaults to ``None``.

    Examples:
        >>> from torchrl.data import Categorical
        >>> from torchrl_ext.envs.popgym._gymenv_layout import gymenv_spec
        >>> spec = gymenv_spec(Categorical(4, shape=(2,)), categorical=False)
        >>> type(spec).__name__, tuple(spec.shape), spec.dtype
        ('OneHot', (2, 4), torch.int64)
    """
    device, batch = native.device, tuple(native.shape[:1])
    if isinstance(native, MultiCategorical):
        sizes = [int(n) for n in native.nvec.reshape(-1, native.shape[-1])[0]]
        if len(set(sizes)) == 1:  # GymEnv keeps one box for k equal sizes
            n, shape = sizes[0], (*batch, len(sizes))
            if categorical:
                return Categorical(n, shape=shape, dtype=torch.int64, device=device)
            return OneHot(n, shape=(*shape, n), dtype=torch.int64, device=device)
        if categorical:
            shape = (*batch, len(sizes))
            return MultiCategorical(sizes, shape=shape, dtype=torch.int64, device=device)
        shape = (*batch, sum(sizes))
        return MultiOneHot(sizes, shape=shape, dtype=torch.int64, device=device)
    if isinstance(native, Categorical):
        n = native.space.n
        if categorical:
            return Categorical(n, shape=batch, dtype=torch.int64, device=device)
        return OneHot(n, shape=(*batch, n), dtype=torch.int64, device=device)
    if high is not None:
        bound = torch.tensor(high, dtype=native.dtype, device=device).expand(native.shape)
        return Bounded(-bound, bound, shape=native.shape, dtype=native.dtype, device=device)
    return native.clone()


class GymEnvEntry:
    """One entry: the kernels' spec, GymEnv's spec and the conversions between them.

    Args:
        native (TensorSpec): the spec the kernels read or write (category indices).
        public (TensorSpec): GymEnv's spec of the entry (:func:`gymenv_spec`).
    """

    def __init__(self, native: TensorSpec, public: TensorSpec) -> None:
        self.native = native
        self.public = public
        self.is_one_hot = isinstance(public, OneHot)  # MultiOneHot too
        #: Whether values change on the way out (one-hot, or a cast to int64).
        self.converts = self.is_one_hot or public.dtype != native.dtype
        columns, values = None, None
        if isinstance(public, MultiOneHot):  # slot j shows whether column c[j] holds v[j]
            sizes = [int(n) for n in native.nvec.reshape(-1, native.shape[-1])[0]]
            columns = torch.repeat_interleave(torch.arange(len(sizes)), torch.tensor(sizes))
            values = torch.cat([torch.arange(n) for n in sizes])
        elif self.is_one_hot:
            values = torch.arange(public.space.n)
        self._columns = None if columns is None else columns.to(native.device)
        self._values = None if values is None else values.to(native.device)

    def present(self, value: torch.Tensor, batch_dims: int) -> torch.Tensor:
        """``value`` in GymEnv's layout if it has the kernels' dtype and shape, else itself.

        Outputs that TorchRL's generic paths built from this env's steps are already presented;
        they are returned as they are.
        """
        native = self.native
        if value.dtype != native.dtype or value.shape[batch_dims:] != native.shape[1:]:
            return value
        if not self.is_one_hot:
            return value.to(self.public.dtype)
        picked = value.unsqueeze(-1) if self._columns is None else value[..., self._columns]
        return (picked == self._values).to(self.public.dtype)

    def accept(
        self, name: str, action: Any, device: torch.device, fault: torch.Tensor | None
    ) -> Any:
        """The category indices of ``action`` given in GymEnv's layout.

        A one-hot action must be int64 of the spec's shape with one 1 per row and 0s elsewhere:
        checked on the host (``fault=None``) or, sync-free, or'ed into ``fault`` on the device;
        the indices are its ``argmax``, in range either way.

        Raises:
            TypeError: for a one-hot action that is not an int64 tensor.
            ValueError: for one of another shape or device, or that is not one-hot.
        """
        if not self.is_one_hot:
            return action
        shape = tuple(self.public.shape)
        action = check_tensor(name, action, self.public.dtype, [shape], device)
        bad = ((action != 0) & (action != 1)).any(-1) | (action.sum(-1) != 1)
        if fault is not None:
            fault.logical_or_(bad.any())
        elif bool(bad.any()):
            index = tuple(int(i) for i in bad.nonzero()[0])
            at = ", ".join(str(i) for i in index)
            raise ValueError(
                f"{name} must be one-hot along its last dim (0s and a single 1), got "
                f"{name}[{at}]={action[index].tolist()}. Build the env with "
                "categorical_action_encoding=True to step with category indices instead."
            )
        return action.argmax(-1)


class GymEnvLayout:
    """What a POPGym port presents in GymEnv's layout: its observation and action entries.

    Args:
        observation (TensorSpec): the kernels' ``"observation"`` spec.
        action (TensorSpec): the kernels' ``"action"`` spec.
        categorical (bool): GymEnv's ``categorical_action_encoding``.
        observation_high (sequence of float, optional): the bound of popgym's observation
            ``Box``, if it has finite bounds. Defaults to ``None``.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from torchrl.data import Categorical
        >>> from torchrl_ext.envs.popgym._gymenv_layout import GymEnvLayout
        >>> spec = Categorical(3, shape=(2,), dtype=torch.int64)
        >>> layout = GymEnvLayout(spec, spec, categorical=False)
        >>> td = TensorDict(observation=torch.tensor([2, 0]), batch_size=[2])
        >>> layout.present(td)["observation"].tolist()
        [[0, 0, 1], [1, 0, 0]]
        >>> action = torch.tensor([[0, 1, 0], [0, 0, 1]])
        >>> layout.accept(TensorDict(action=action, batch_size=[2]), torch.device("cpu"))
        {'action': tensor([1, 2])}
    """

    def __init__(
        self,
        observation: TensorSpec,
        action: TensorSpec,
        categorical: bool,
        observation_high: Sequence[float] | None = None,
    ) -> None:
        self.observation = GymEnvEntry(
            observation, gymenv_spec(observation, categorical, observation_high)
        )
        self.action = GymEnvEntry(action, gymenv_spec(action, categorical))

    def present(self, tensordict: TensorDictBase) -> TensorDictBase:
        """Put the observations (root and ``"next"``) and actions of an output in GymEnv's layout.

        In place; entries already in it are left as they are.
        """
        batch_dims = tensordict.batch_dims
        entries = [(key, self.observation) for key in _OBSERVATION_KEYS]
        for key, entry in [*entries, (_ACTION_KEY, self.action)]:
            if not entry.converts:
                continue
            value = tensordict.get(key, None)
            if isinstance(value, torch.Tensor):
                presented = entry.present(value, batch_dims)
                if presented is not value:
                    set_unchecked(tensordict, key, presented)
        return tensordict

    def accept(
        self, tensordict: Any, device: torch.device, fault: torch.Tensor | None = None
    ) -> Any:
        """A step's input with its action as category indices (``{"action": indices}``).

        ``tensordict`` itself when the action needs no conversion (category indices already).
        See :meth:`GymEnvEntry.accept` for the checks and ``fault``.
        """
        if not self.action.is_one_hot:
            return tensordict
        action = tensordict.get(_ACTION_KEY, None)
        return {_ACTION_KEY: self.action.accept(_ACTION_KEY, action, device, fault)}
