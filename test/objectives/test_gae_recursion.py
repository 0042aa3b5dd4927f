"""The GAE step (``torchrl_ext.objectives._gae`` and ``_kernels.gae_recursion``).

Contract: :func:`gae_reference` (plain torch) equals the float64 textbook loop; the numba CPU
kernel and the Warp kernel equal :func:`gae_reference` to the bit (same arithmetic, same
order) on every layout, and report any NaN or infinite input; the workspace never hands out
memory a tensor still uses.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from test_recurrent_gae import make_rollout, reference_gae

from torchrl_ext.objectives import RecurrentGAE
from torchrl_ext.objectives._gae import derive_is_init, gae_reference
from torchrl_ext.objectives._kernels import gae_recursion as kernels


def gae_inputs(n, t, k=1, dtype=torch.float32, seed=0):
    """``(reward, value, next_value, terminated, done)``, ``[N, T, K]``."""
    gen = torch.Generator().manual_seed(seed)
    floats = [torch.randn(n, t, k, generator=gen).to(dtype) for _ in range(3)]
    terminated = torch.rand(n, t, k, generator=gen) < 0.1
    done = terminated | (torch.rand(n, t, k, generator=gen) < 0.1)
    return [*floats, terminated, done]


def run(kernel, inputs, gamma=0.97, lmbda=0.9):
    advantage, value_target = torch.empty_like(inputs[0]), torch.empty_like(inputs[0])
    nonfinite = kernel(inputs, gamma, lmbda, advantage, value_target)
    return advantage, value_target, nonfinite


KERNELS = {"numba": kernels.gae_cpu, "warp": kernels.gae_warp}
SIZES = [(1, 1, 1), (3, 1, 1), (5, 7, 1), (13, 37, 1), (17, 256, 1), (9, 600, 1), (5, 9, 3)]


class TestReference:
    @pytest.mark.parametrize(("n", "t"), [(1, 1), (4, 9), (7, 40)])
    def test_equals_float64_loop(self, n, t):
        inputs = gae_inputs(n, t, dtype=torch.float64, seed=t)
        adv, target = gae_reference(*inputs, 0.97, 0.9)
        expected_adv, expected_target = reference_gae(
            *(x[..., 0].numpy() for x in inputs), 0.97, 0.9
        )
        np.testing.assert_allclose(adv[..., 0], expected_adv, atol=1e-12)
        np.testing.assert_allclose(target[..., 0], expected_target, atol=1e-12)


class TestKernels:
    @pytest.mark.parametrize("kernel", list(KERNELS))
    @pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
    @pytest.mark.parametrize(("n", "t", "k"), SIZES)
    def test_bitwise_equal_to_reference(self, kernel, dtype, n, t, k):
        inputs = gae_inputs(n, t, k, dtype, seed=n * 1000 + t)
        adv, target, nonfinite = run(KERNELS[kernel], inputs)
        expected_adv, expected_target = gae_reference(*inputs, 0.97, 0.9)
        assert torch.equal(adv, expected_adv) and torch.equal(target, expected_target)
        assert not nonfinite

    @pytest.mark.parametrize("stream_bytes", [0, 1 << 62])
    @pytest.mark.parametrize(("n", "t", "k"), [(13, 37, 1), (5, 9, 3)])
    def test_streaming_and_plain_stores_write_the_same(self, monkeypatch, stream_bytes, n, t, k):
        monkeypatch.setattr(kernels, "STREAM_BYTES", stream_bytes)
        inputs = gae_inputs(n, t, k, seed=n + t)
        adv, target, _ = run(kernels.gae_cpu, inputs)
        expected_adv, expected_target = gae_reference(*inputs, 0.97, 0.9)
        assert torch.equal(adv, expected_adv) and torch.equal(target, expected_target)

    @pytest.mark.parametrize("kernel", list(KERNELS))
    def test_strided_and_broadcast_views(self, kernel):
        """Time-major storage and flags broadcast over channels, without copies."""
        inputs = gae_inputs(6, 11, 2, seed=1)
        time_major = [x.transpose(0, 1).contiguous().transpose(0, 1) for x in inputs[:3]]
        flags = [x[..., :1].expand(6, 11, 2) for x in inputs[3:]]
        adv, target, _ = run(KERNELS[kernel], [*time_major, *flags])
        expected_adv, expected_target = gae_reference(*time_major, *flags, 0.97, 0.9)
        assert torch.equal(adv, expected_adv) and torch.equal(target, expected_target)

    @pytest.mark.parametrize("kernel", list(KERNELS))
    @pytest.mark.parametrize("row", [0, kernels.LANES - 1, kernels.LANES + 4])
    @pytest.mark.parametrize("bad", [float("nan"), float("inf"), -float("inf")])
    @pytest.mark.parametrize("which", [0, 1, 2])
    def test_reports_nonfinite(self, kernel, row, bad, which):
        """In any input and row (the last one in a partial block), also where a terminated
        step masks the next value and a done step cuts the trace before it."""
        inputs = gae_inputs(kernels.LANES + 5, 300, seed=row)
        assert not run(KERNELS[kernel], inputs)[2]
        inputs[3][row, 150] = True
        inputs[4][row, 150] = True
        inputs[which][row, 150, 0] = bad
        assert run(KERNELS[kernel], inputs)[2]


class TestDeriveIsInit:
    @pytest.mark.parametrize("contiguous", [True, False])
    def test_done_shifted_with_first_column(self, contiguous):
        done = torch.rand(5, 7, generator=torch.Generator().manual_seed(0)) < 0.3
        first = torch.tensor([True, False, True, False, False])
        rows = done if contiguous else done.T.contiguous().T
        out = torch.ones(5, 7, dtype=torch.bool)
        for is_init in (derive_is_init(rows, first), derive_is_init(rows, first, out)):
            expected = torch.empty(5, 7, dtype=torch.bool)
            for n in range(5):
                expected[n, 0] = first[n]
                for t in range(1, 7):
                    expected[n, t] = done[n, t - 1]
            assert torch.equal(is_init, expected)


class TestWorkspace:
    """RecurrentGAE's outputs come from its workspace, never overwritten while held."""

    def test_outputs_of_a_held_rollout_are_not_overwritten(self):
        gae = RecurrentGAE(gamma=0.9, lmbda=0.9)
        first = gae(make_rollout(n=6, t=10, seed=1))
        kept = first["advantage"].clone()
        gae(make_rollout(n=6, t=10, seed=2))
        assert torch.equal(first["advantage"], kept)


def _named(td):
    td.refine_names("env", "time")
    return td


LAYOUTS = {
    "time_dim_given": (lambda td: td, {"time_dim": 1}),
    "time_major": (lambda td: td.transpose(0, 1).contiguous(), {"time_dim": 0}),
    "extra_batch_dim": (lambda td: td.unsqueeze(0), {}),
    "named_dims": (_named, {}),
    "non_contiguous": (
        lambda td: td.apply(lambda x: x.transpose(0, 1).contiguous().transpose(0, 1)),
        {},
    ),
}


class TestLayoutsAgree:
    """Every layout of the same rollout gets the same bits and the same carry."""

    @pytest.mark.parametrize("layout", list(LAYOUTS))
    @pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
    def test_two_consecutive_calls(self, layout, dtype):
        change, kwargs = LAYOUTS[layout]
        plain, other = RecurrentGAE(gamma=0.97, lmbda=0.9), RecurrentGAE(gamma=0.97, lmbda=0.9)
        for seed in (1, 2):
            td = make_rollout(n=5, t=11, seed=seed, dtype=dtype)
            a = plain(td.clone())
            b = other(change(td.clone()), **kwargs)
            for key in ("advantage", "value_target", "is_init"):
                assert torch.equal(change(a.clone())[key], b[key]), key
            assert torch.equal(plain._carry, other._carry)
