"""Env tests: device parametrization (the RNG restore fixture lives in test/conftest.py)."""

import pytest
import torch
import warp as wp

wp.config.log_level = wp.LOG_WARNING


def _cuda_ready() -> bool:
    if not torch.cuda.is_available():
        return False
    wp.init()
    return wp.is_cuda_available()


DEVICES = [
    "cpu",
    pytest.param("cuda", marks=pytest.mark.skipif(not _cuda_ready(), reason="needs CUDA")),
]


@pytest.fixture(params=DEVICES)
def device(request):
    return request.param
