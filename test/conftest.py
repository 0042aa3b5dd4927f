"""Test-wide fixtures: RNG hygiene, quiet torchrl logging, the marker of crafted files."""

from __future__ import annotations

import logging
import random

import numpy as np
import pytest
import torch

logging.getLogger("torchrl").setLevel(logging.WARNING)


@pytest.fixture(autouse=True)
def _restore_rng_state():
    """Every test starts from the same seeded global RNGs and leaves them as it found them.

    Seeding makes a test that draws from a global generator (random actions from a spec,
    ``torch.randn``) give the same result in every run and in any test order.
    """
    torch_state = torch.get_rng_state()
    numpy_state = np.random.get_state()
    python_state = random.getstate()
    torch.manual_seed(0)
    np.random.seed(0)
    random.seed(0)
    yield
    torch.set_rng_state(torch_state)
    np.random.set_state(numpy_state)
    random.setstate(python_state)


@pytest.fixture
def marker(tmp_path):
    """The file a crafted file (``malicious_files``) creates if code from it runs.

    The test fails if it exists afterwards.
    """
    path = tmp_path / "marker"
    yield path
    assert not path.exists(), "code from a crafted file ran"
