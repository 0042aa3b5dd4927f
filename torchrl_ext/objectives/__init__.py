"""Advantage estimation for recurrent policies."""

from torchrl_ext.objectives.recurrent_gae import RecurrentGAE, RecurrentGAETransform

__all__ = ["RecurrentGAE", "RecurrentGAETransform"]
