"""Advantage estimation for recurrent policies."""

from torchrl_ext.objectives.recurrent_gae import (
    RecurrentGAE,
    RecurrentGAETransform,
    carry_recurrent_state,
)

__all__ = ["RecurrentGAE", "RecurrentGAETransform", "carry_recurrent_state"]
