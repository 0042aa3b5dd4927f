"""Warp functions of POPGym's tasks, one module per family."""
