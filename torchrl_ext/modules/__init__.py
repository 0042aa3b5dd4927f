"""Recurrent modules for training: TorchRL's, running whole rows cut at ``is_init``."""

from torchrl_ext.modules.recurrent import GRUModule, LSTMModule

__all__ = ["GRUModule", "LSTMModule"]
