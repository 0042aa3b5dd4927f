"""Recurrent modules for training: TorchRL's, running whole rows cut at ``is_init``.

:class:`LSTMModule` and :class:`GRUModule` are TorchRL's; :class:`FFMModule` is a scan memory
with the same face.
"""

from torchrl_ext.modules.ffm import FFMModule
from torchrl_ext.modules.recurrent import GRUModule, LSTMModule

__all__ = ["FFMModule", "GRUModule", "LSTMModule"]
