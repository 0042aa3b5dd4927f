"""``weight_grad`` against the plain product, in both layouts it chooses between."""

import pytest
import torch

from torchrl_ext.modules._products import weight_grad


@pytest.mark.parametrize("width", [1, 3, 8, 16, 40])
def test_equals_the_plain_product(width):
    gen = torch.Generator().manual_seed(width)
    grad = torch.randn(37, 16, generator=gen, dtype=torch.float64)
    inputs = torch.randn(37, width, generator=gen, dtype=torch.float64)
    out = weight_grad(grad, inputs)
    assert out.shape == (16, width)
    torch.testing.assert_close(out, grad.T @ inputs, rtol=0, atol=1e-12)


def test_hand_computed():
    grad = torch.tensor([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]])
    inputs = torch.tensor([[1.0], [0.0], [2.0]])
    # column 0 of grad . inputs = 1 + 10, column 1 = 2 + 12
    assert weight_grad(grad, inputs).tolist() == [[11.0], [14.0]]
    assert weight_grad(inputs, grad).tolist() == [[11.0, 14.0]]  # the wide-inputs layout
