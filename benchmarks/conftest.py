"""Benchmarks import their shared set-up modules from this folder."""

import logging
import os
import sys

sys.path.insert(0, os.path.dirname(__file__))
logging.getLogger("torchrl").setLevel(logging.WARNING)
