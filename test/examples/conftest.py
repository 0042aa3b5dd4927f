"""The example pipelines live in ``examples/`` at the repository root, outside the package.

Their folder goes on ``sys.path`` so that tests import them as a user running them would:
``import runs``, ``import ppo_cartpole``.
"""

from __future__ import annotations

import sys
from pathlib import Path

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
if str(EXAMPLES) not in sys.path:
    sys.path.insert(0, str(EXAMPLES))
