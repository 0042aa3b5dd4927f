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


@pytest.fixture(autouse=True)
def _restore_torch_rng():
    state = torch.random.get_rng_state()
    yield
    torch.random.set_rng_state(state)
