"""Puts the repository's ``examples/`` folder on ``sys.path``: ``import runs, ppo_cartpole``.

The example pipelines are files outside the package; benchmarks import them as a user running
them would (as ``test/examples/conftest.py`` does). Import this module before them.
"""

from __future__ import annotations

import sys
from pathlib import Path

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
if str(EXAMPLES) not in sys.path:
    sys.path.insert(0, str(EXAMPLES))
