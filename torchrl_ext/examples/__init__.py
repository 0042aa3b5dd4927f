"""End-to-end pipelines behind the README's main command.

* :mod:`torchrl_ext.examples.ppo_cartpole`: recurrent PPO on partially observable CartPole
  (``python -m torchrl_ext.examples.ppo_cartpole``).
* :mod:`torchrl_ext.examples.ppo_cartpole_results`: the per-seed results table and curves
  (``python -m torchrl_ext.examples.ppo_cartpole_results``).
* :mod:`torchrl_ext.examples.r2d2_cartpole`: R2D2-style recurrent Q-learning on sequence
  windows (``python -m torchrl_ext.examples.r2d2_cartpole``).
* :mod:`torchrl_ext.examples.ppo_course`: feed-forward PPO driving procedurally generated
  courses (``python -m torchrl_ext.examples.ppo_course``).

Every command writes under ``runs/`` unless told otherwise (``--out``; the results table also
takes ``--table``).
"""

from __future__ import annotations

import logging

#: torchrl's line layout without its colour codes.
PLAIN_TORCHRL_FORMAT = "%(asctime)s [%(name)s][%(levelname)s] %(message)s"


def plain_torchrl_logs() -> None:
    """Writes torchrl's log lines without ANSI colour codes unless they go to a terminal.

    torchrl colours every line of its ``"torchrl"`` logger; redirected to a file (``> run.log``)
    the colour codes would end up in the file as raw escape sequences.

    Examples:
        >>> import io, logging
        >>> from torchrl_ext.examples import plain_torchrl_logs
        >>> handler = logging.StreamHandler(io.StringIO())
        >>> logging.getLogger("torchrl").addHandler(handler)
        >>> plain_torchrl_logs()
        >>> handler.formatter._fmt
        '%(asctime)s [%(name)s][%(levelname)s] %(message)s'
        >>> logging.getLogger("torchrl").removeHandler(handler)
    """
    for handler in logging.getLogger("torchrl").handlers:
        isatty = getattr(getattr(handler, "stream", None), "isatty", None)
        if callable(isatty) and isatty():
            continue
        handler.setFormatter(logging.Formatter(PLAIN_TORCHRL_FORMAT))
