"""Advantage estimation and losses for recurrent agents."""

from torchrl_ext.objectives.r2d2_loss import R2D2Loss
from torchrl_ext.objectives.recurrent_gae import (
    RecurrentGAE,
    RecurrentGAETransform,
    carry_recurrent_state,
)

__all__ = ["R2D2Loss", "RecurrentGAE", "RecurrentGAETransform", "carry_recurrent_state"]
