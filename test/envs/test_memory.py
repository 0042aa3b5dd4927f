import torch

from torchrl_ext.envs import _memory
from torchrl_ext.envs._memory import empty_output


class TestEmptyOutput:
    """``empty_output`` is ``torch.empty``: fresh, contiguous, writable memory of the asked shape,
    dtype and device, whether or not the huge-page advice is available or accepted."""

    def test_large_and_small_buffers(self, device):
        for shape in [(3, 5), (2048, 1024, 2)]:
            out = empty_output(shape, torch.float32, device)
            assert out.shape == shape and out.dtype == torch.float32
            assert out.device.type == torch.device(device).type and out.is_contiguous()
            out.fill_(2.0)
            assert float(out.sum()) == 2.0 * out.numel()

    def test_two_calls_never_share_memory(self):
        a = empty_output((1 << 21,), torch.int64, "cpu")
        b = empty_output((1 << 21,), torch.int64, "cpu")
        assert a.data_ptr() != b.data_ptr()

    def test_without_madvise_it_is_plain_empty(self, monkeypatch):
        monkeypatch.setattr(_memory, "_madvise", lambda: None)
        out = empty_output((1 << 21,), torch.bool, "cpu").zero_()
        assert not bool(out.any())
