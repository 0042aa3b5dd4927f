"""Benchmarks import their set-up modules from this folder and the example pipelines from
``examples/``, and time with one torch thread."""

import logging
import os
import sys

import pytest
import torch

sys.path.insert(0, os.path.dirname(__file__))
import _examples_path  # noqa: F401  (puts examples/ on sys.path)

logging.getLogger("torchrl").setLevel(logging.WARNING)


@pytest.fixture(autouse=True)
def _one_thread():
    """Every benchmark runs with one torch thread, as the reports do."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)
