"""LSTMModule and GRUModule: TorchRL's modules, running whole rows cut at ``is_init``."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from recurrent_reference import reference_rows
from tensordict import TensorDict
from torchrl import modules as torchrl_modules
from torchrl.modules import set_recurrent_mode

from torchrl_ext import _compat
from torchrl_ext.modules import GRUModule, LSTMModule, _compiled, recurrent

KINDS = {
    "lstm": (LSTMModule, torchrl_modules.LSTMModule, ["recurrent_state_h", "recurrent_state_c"]),
    "gru": (GRUModule, torchrl_modules.GRUModule, ["recurrent_state"]),
}
ATOL = 1e-12


@pytest.fixture(params=sorted(KINDS))
def kind(request):
    return request.param


@pytest.fixture(params=["compiled", "packed"])
def path(request, monkeypatch):
    """Which whole-row path runs: the numba kernels, or the packed call (CUDA's, forced here)."""
    if request.param == "packed":
        monkeypatch.setattr(_compiled, "DTYPES", ())
    return request.param


def make_pair(kind, dtype=torch.float64, **kwargs):
    """Ours and TorchRL's module of ``kind`` with the same weights."""
    ours_cls, theirs_cls, _ = KINDS[kind]
    kwargs = {"input_size": 3, "hidden_size": 5, "in_key": "obs", "out_key": "y", **kwargs}
    ours = ours_cls(**kwargs).to(dtype)
    theirs = theirs_cls(**kwargs).to(dtype)
    theirs.load_state_dict(ours.state_dict())
    return ours, theirs


def layer_of(module):
    return module.lstm if isinstance(module, torchrl_modules.LSTMModule) else module.gru


def make_data(kind, shape, is_init, num_layers=1, stored=True, dtype=torch.float64, seed=0):
    gen = torch.Generator().manual_seed(seed)
    fields = {"obs": torch.randn(*shape, 3, generator=gen, dtype=dtype), "is_init": is_init}
    if stored:
        for key in KINDS[kind][2]:
            fields[key] = torch.randn(*shape, num_layers, 5, generator=gen, dtype=dtype)
    return TensorDict(fields, list(shape))


def run(module, data, kind):
    """Outputs, next states and the gradients of a loss that reads all of them."""
    data = data.clone()
    keys = KINDS[kind][2]
    leaves = [data["obs"].requires_grad_()]
    leaves += [data[k].requires_grad_() for k in keys if k in data.keys()]
    with set_recurrent_mode(True):
        out = module(data)
    nexts = [out["next", k] for k in keys]
    loss = out["y"].pow(2).sum() + sum((n * (i + 1.5)).sum() for i, n in enumerate(nexts))
    grads = torch.autograd.grad(loss, leaves + list(module.parameters()), allow_unused=True)
    return out["y"], nexts, grads


def oracle(module, data, kind):
    """The same quantities from the cell loop of ``recurrent_reference``."""
    data = data.clone()
    keys = KINDS[kind][2]
    shape = data.shape
    n_steps = shape[-1]
    x = data["obs"].requires_grad_()
    stored = [data[k].requires_grad_() for k in keys if k in data.keys()]
    layer = layer_of(module)
    states = [s.reshape(-1, n_steps, *s.shape[-2:]) for s in stored] or None
    is_init = data["is_init"].reshape(-1, n_steps)
    y, nexts = reference_rows(layer, x.reshape(-1, n_steps, 3), states, is_init)
    y = y.reshape(*shape, -1)
    nexts = [n.reshape(*shape, *n.shape[-2:]) for n in nexts]
    loss = y.pow(2).sum() + sum((n * (i + 1.5)).sum() for i, n in enumerate(nexts))
    grads = torch.autograd.grad(loss, [x, *stored, *module.parameters()], allow_unused=True)
    return y, nexts, grads


def assert_same(got, expected, atol=ATOL, rtol=0.0):
    (y, nexts, grads), (y_ref, nexts_ref, grads_ref) = got, expected
    torch.testing.assert_close(y, y_ref, atol=atol, rtol=rtol)
    for n, n_ref in zip(nexts, nexts_ref, strict=True):
        torch.testing.assert_close(n, n_ref, atol=atol, rtol=rtol)
    assert len(grads) == len(grads_ref)
    for g, g_ref in zip(grads, grads_ref, strict=True):
        if g_ref is None:
            assert g is None or not g.any()
        else:
            torch.testing.assert_close(g, g_ref, atol=atol, rtol=rtol)


def pattern(name, shape, seed=0):
    """Bool ``[*shape, 1]`` ``is_init`` layouts."""
    gen = torch.Generator().manual_seed(seed)
    if name == "random":
        flags = torch.rand(shape, generator=gen) < 0.3
    elif name == "every":
        flags = torch.ones(shape, dtype=torch.bool)
    elif name == "none":
        flags = torch.zeros(shape, dtype=torch.bool)
    else:  # "first": only the rows' first steps, as a fresh rollout
        flags = torch.zeros(shape, dtype=torch.bool)
        flags[..., 0] = True
    return flags.unsqueeze(-1)


class TestWholeRows:
    """Recurrent mode equals, in float64 to 1e-12, the cell-loop oracle and TorchRL's module.

    Outputs, the ``("next", state)`` outputs and every gradient (inputs, stored states, weights)
    agree, on both whole-row paths, for episode starts anywhere, at every step, nowhere, rows of
    one step, with and without stored states, one or two layers, with and without bias, and
    batch shapes ``[T]``, ``[B, T]`` and ``[A, B, T]``.
    """

    @pytest.mark.parametrize("layout", ["random", "every", "none", "first"])
    @pytest.mark.parametrize("num_layers", [1, 2])
    def test_matches_oracle_and_torchrl(self, kind, path, layout, num_layers):
        ours, theirs = make_pair(kind, num_layers=num_layers)
        shape = (4, 7)
        data = make_data(kind, shape, pattern(layout, shape), num_layers=num_layers)
        got = run(ours, data, kind)
        assert_same(got, oracle(ours, data, kind))
        assert_same(got, run(theirs, data, kind))

    @pytest.mark.parametrize("shape", [(6,), (3, 5), (2, 3, 4), (4, 1), (1, 1)])
    def test_batch_shapes_and_single_steps(self, kind, path, shape):
        ours, theirs = make_pair(kind)
        data = make_data(kind, shape, pattern("random", shape, seed=1))
        got = run(ours, data, kind)
        assert got[0].shape == (*shape, 5)
        assert_same(got, oracle(ours, data, kind))
        assert_same(got, run(theirs, data, kind))

    @pytest.mark.parametrize("bias", [True, False])
    def test_zero_states_without_stored_ones(self, kind, path, bias):
        ours, theirs = make_pair(kind, bias=bias, num_layers=2)
        shape = (3, 6)
        data = make_data(kind, shape, pattern("random", shape, seed=2), stored=False)
        got = run(ours, data, kind)
        assert_same(got, oracle(ours, data, kind))
        assert_same(got, run(theirs, data, kind))

    @settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(
        rows=st.integers(1, 4),
        steps=st.integers(1, 9),
        starts=st.floats(0.0, 1.0),
        seed=st.integers(0, 2**16),
        is_lstm=st.booleans(),
    )
    def test_random_layouts(self, rows, steps, starts, seed, is_lstm):
        kind = "lstm" if is_lstm else "gru"
        gen = torch.Generator().manual_seed(seed)
        is_init = (torch.rand(rows, steps, generator=gen) < starts).unsqueeze(-1)
        torch.manual_seed(seed)
        ours, _ = make_pair(kind)
        data = make_data(kind, (rows, steps), is_init, seed=seed)
        assert_same(run(ours, data, kind), oracle(ours, data, kind))

    def test_is_init_without_trailing_dimension(self, kind):
        ours, theirs = make_pair(kind)
        shape = (3, 6)
        data = make_data(kind, shape, pattern("random", shape, 4).squeeze(-1))
        assert_same(run(ours, data, kind), run(theirs, data, kind))

    def test_float32_close_to_torchrl(self, kind):
        ours, theirs = make_pair(kind, dtype=torch.float32, hidden_size=5)
        shape = (5, 16)
        data = make_data(kind, shape, pattern("random", shape, 3), dtype=torch.float32)
        # float32: a different order of sums (and vectorized activations) than oneDNN's
        assert_same(run(ours, data, kind), run(theirs, data, kind), atol=2e-5, rtol=1e-5)


class TestHandCase:
    """An LSTM with zero weights: ``i = f = o = 1/2`` and ``g = 0``, so ``c`` halves each step.

    A row of 4 steps with an episode start at ``t = 2`` starts from the stored cell state
    ``c = 1`` at ``t = 0`` and from ``c = 4`` at ``t = 2``: ``c = 1/2, 1/4 | 2, 1`` and
    ``h = tanh(c) / 2``; the next cell state is ``1/4`` at ``t = 1``, ``1`` at ``t = 3``.
    """

    def test_halving_cell(self):
        module = LSTMModule(input_size=1, hidden_size=1, in_key="obs", out_key="y").double()
        for p in module.parameters():
            torch.nn.init.zeros_(p)
        is_init = torch.tensor([[[True], [False], [True], [False]]])
        stored_c = torch.tensor([1.0, 9.0, 4.0, 9.0], dtype=torch.float64).view(1, 4, 1, 1)
        data = TensorDict(
            {
                "obs": torch.zeros(1, 4, 1, dtype=torch.float64),
                "is_init": is_init,
                "recurrent_state_h": torch.zeros(1, 4, 1, 1, dtype=torch.float64),
                "recurrent_state_c": stored_c,
            },
            [1, 4],
        )
        with set_recurrent_mode(True):
            out = module(data)
        c = torch.tensor([0.5, 0.25, 2.0, 1.0], dtype=torch.float64)
        torch.testing.assert_close(out["y"].view(4), torch.tanh(c) / 2, atol=1e-15, rtol=0)
        next_c = torch.tensor([0.0, 0.25, 0.0, 1.0], dtype=torch.float64)
        torch.testing.assert_close(out["next", "recurrent_state_c"].view(4), next_c)


class TestTorchRLFace:
    """The same module as TorchRL's outside recurrent mode: state_dict, primer, one-step path."""

    def test_checkpoints_interchange(self, kind):
        ours, theirs = make_pair(kind, num_layers=2)
        assert list(ours.state_dict()) == list(theirs.state_dict())
        ours_cls = KINDS[kind][0]
        fresh = ours_cls(input_size=3, hidden_size=5, num_layers=2, in_key="obs", out_key="y")
        fresh.load_state_dict(theirs.state_dict())
        theirs.load_state_dict(fresh.state_dict())
        for a, b in zip(fresh.state_dict().values(), theirs.state_dict().values(), strict=True):
            assert torch.equal(a, b.to(a.dtype))

    def test_primer_is_torchrl_s(self, kind):
        ours, theirs = make_pair(kind, num_layers=2)
        assert ours.make_tensordict_primer().primers == theirs.make_tensordict_primer().primers

    def test_step_mode_is_torchrl_s(self, kind):
        ours, theirs = make_pair(kind, num_layers=2)
        data = make_data(kind, (4,), pattern("random", (4,)), num_layers=2)
        out, ref = ours(data.clone()), theirs(data.clone())
        for key in ["y", *(("next", k) for k in KINDS[kind][2])]:
            assert torch.equal(out[key], ref[key])

    @pytest.mark.parametrize(
        "kwargs",
        [
            {"num_layers": 2, "dropout": 0.5},  # training: TorchRL's path (dropout draws)
            {"recurrent_backend": "scan"},
        ],
    )
    def test_other_configurations_run_torchrl_s_path(self, kind, kwargs, monkeypatch):
        ours, _ = make_pair(kind, **kwargs)
        ran = []
        monkeypatch.setattr(recurrent, "_forward_rows", lambda *a: ran.append(a))
        data = make_data(kind, (2, 4), pattern("first", (2, 4)), num_layers=ours_layers(ours))
        with set_recurrent_mode(True):
            out = ours(data)
        assert not ran and out["y"].shape == (2, 4, 5)

    def test_projected_lstm_runs_torchrl_s_path(self):
        ours, theirs = make_pair("lstm", proj_size=2)
        shape = (2, 5)
        data = make_data("lstm", shape, pattern("random", shape), stored=False)
        with set_recurrent_mode(True):
            out, ref = ours(data.clone()), theirs(data.clone())
        assert torch.equal(out["y"], ref["y"])

    def test_dropout_in_eval_runs_whole_rows(self, kind):
        ours, theirs = make_pair(kind, num_layers=2, dropout=0.5)
        ours.eval()
        theirs.eval()
        shape = (3, 6)
        data = make_data(kind, shape, pattern("random", shape), num_layers=2)
        assert_same(run(ours, data, kind), run(theirs, data, kind))


class TestStepMode:
    """Outside recurrent mode (a collector's step), every output and gradient is TorchRL's."""

    def step_outputs(self, module, data, kind):
        data = data.clone()
        leaves = [data["obs"].requires_grad_()]
        leaves += [data[k].requires_grad_() for k in KINDS[kind][2] if k in data.keys()]
        out = module(data)
        keys = ["y", *(("next", k) for k in KINDS[kind][2])]
        loss = sum((out[k] * (i + 1.5)).sum() for i, k in enumerate(keys))
        grads = torch.autograd.grad(loss, leaves + list(module.parameters()))
        return [out[k] for k in keys], grads

    def assert_bitwise(self, got, ref):
        for a, b in zip(got[0] + list(got[1]), ref[0] + list(ref[1]), strict=True):
            assert torch.equal(a, b)

    @pytest.mark.parametrize("shape", [(), (1,), (6,), (2, 3), (2, 2, 2)])
    @pytest.mark.parametrize("flags", ["random", "every", "none"])
    @pytest.mark.parametrize("stored", [True, False])
    def test_equals_torchrl_bitwise(self, kind, shape, flags, stored):
        ours, theirs = make_pair(kind, dtype=torch.float32, num_layers=2)
        data = make_data(kind, shape, pattern(flags, shape), 2, stored, torch.float32)
        got, ref = self.step_outputs(ours, data, kind), self.step_outputs(theirs, data, kind)
        self.assert_bitwise(got, ref)

    @pytest.mark.parametrize("kwargs", [{"bidirectional": True}, {"bias": False}])
    def test_other_layers_equal_torchrl(self, kind, kwargs):
        ours, theirs = make_pair(kind, dtype=torch.float32, **kwargs)
        depth = 2 if kwargs.get("bidirectional") else 1
        data = make_data(kind, (4,), pattern("random", (4,)), depth, True, torch.float32)
        got, ref = self.step_outputs(ours, data, kind), self.step_outputs(theirs, data, kind)
        self.assert_bitwise(got, ref)

    def test_projected_lstm_equals_torchrl_and_the_layer(self):
        """Without stored states, TorchRL's output; with them (where TorchRL's step path fails
        on a projected LSTM), one call of the layer on the states zeroed at ``is_init``."""
        ours, theirs = make_pair("lstm", dtype=torch.float32, proj_size=2)
        data = make_data("lstm", (4,), pattern("random", (4,)), stored=False, dtype=torch.float32)
        got, ref = self.step_outputs(ours, data, "lstm"), self.step_outputs(theirs, data, "lstm")
        self.assert_bitwise(got, ref)
        h, c = torch.randn(4, 1, 2), torch.randn(4, 1, 5)
        out = ours(data.update({"recurrent_state_h": h, "recurrent_state_c": c}))
        keep = ~data["is_init"].reshape(4, 1, 1)
        states = ((h * keep).transpose(0, 1), (c * keep).transpose(0, 1))
        y, (h_next, c_next) = ours.lstm(data["obs"].unsqueeze(1), states)
        assert torch.equal(out["y"], y.squeeze(1))
        assert torch.equal(out["next", "recurrent_state_h"], h_next.transpose(0, 1))
        assert torch.equal(out["next", "recurrent_state_c"], c_next.transpose(0, 1))

    def test_zeroes_the_state_at_is_init(self, kind):
        """Hand case: a row with ``is_init`` set steps from zeros, whatever state it carries."""
        ours, _ = make_pair(kind)
        data = make_data(kind, (2,), torch.tensor([[True], [False]]))
        clean = data.clone()
        for key in KINDS[kind][2]:
            clean[key][0] = 0.0
        assert torch.equal(ours(data.clone())["y"][0], ours(clean)["y"][0])
        assert not torch.equal(
            ours(data.clone())["y"][1], ours(clean.apply(torch.zeros_like))["y"][1]
        )

    @pytest.mark.parametrize(
        "kind, case",
        [(k, c) for k in sorted(KINDS) for c in ["no_is_init", "state_shape", "input_size"]]
        + [("lstm", "one_state")],  # a GRU has one state: without it, it runs from zeros
    )
    def test_unusual_inputs_meet_torchrl_s_path(self, kind, case):
        """What the step path cannot read goes to TorchRL's, which raises its own error."""
        ours, theirs = make_pair(kind)
        data = make_data(kind, (3,), pattern("random", (3,)))
        if case == "no_is_init":
            data = data.exclude("is_init")
        elif case == "state_shape":
            data[KINDS[kind][2][0]] = torch.zeros(3, 2, 5, dtype=torch.float64)
        elif case == "one_state":
            data = data.exclude(KINDS[kind][2][0])
        else:
            data["obs"] = torch.zeros(3, 4, dtype=torch.float64)
        errors = []
        for module in (ours, theirs):
            with pytest.raises(Exception) as info:
                module(data.clone())
            errors.append((type(info.value), str(info.value)))
        assert errors[0] == errors[1]


class TestEmptyBatch:
    """A batch without rows gives TorchRL's empty result: same keys, shapes and dtypes.

    In recurrent mode ``[0, T]`` is compared with TorchRL's module on the same input, gradients
    included (zeros for the weights). Step mode, where TorchRL's module fails on an empty batch,
    gives the entries TorchRL's gives for one row, with the leading dimension 0.
    """

    @staticmethod
    def entries(out, kind):
        keys = ["y", *(("next", k) for k in KINDS[kind][2])]
        return {k: (tuple(out[k].shape), out[k].dtype) for k in keys}, set(out.keys(True, True))

    @pytest.mark.parametrize("stored", [True, False])
    @pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
    def test_recurrent_mode_is_torchrl_s(self, kind, path, stored, dtype):
        ours, theirs = make_pair(kind, dtype=dtype, num_layers=2)
        data = make_data(kind, (0, 4), pattern("first", (0, 4)), 2, stored, dtype)
        with set_recurrent_mode(True):
            out, ref = ours(data.clone()), theirs(data.clone())
        assert self.entries(out, kind) == self.entries(ref, kind)
        assert self.entries(out, kind)[0]["y"] == ((0, 4, 5), dtype)
        assert_same(run(ours, data, kind), run(theirs, data, kind))

    def test_rows_without_steps(self, kind, path):
        """``[2, 0]``, where TorchRL's recurrent mode fails: the same entries, without steps."""
        ours, _ = make_pair(kind, num_layers=2)
        with set_recurrent_mode(True):
            out = ours(make_data(kind, (2, 0), pattern("none", (2, 0)), 2))
        expected = {"y": ((2, 0, 5), torch.float64)}
        expected.update({("next", k): ((2, 0, 2, 5), torch.float64) for k in KINDS[kind][2]})
        assert self.entries(out, kind)[0] == expected

    @pytest.mark.parametrize("shape", [(0,), (0, 4)])
    @pytest.mark.parametrize("stored", [True, False])
    def test_step_mode_is_torchrl_s_for_no_rows(self, kind, shape, stored):
        ours, theirs = make_pair(kind, num_layers=2)
        one = (1, *shape[1:])
        ref = theirs(make_data(kind, one, pattern("random", one), 2, stored))
        out = ours(make_data(kind, shape, pattern("random", shape), 2, stored))
        expected, keys = self.entries(ref, kind)
        assert self.entries(out, kind) == (
            {k: ((0, *s[1:]), d) for k, (s, d) in expected.items()},
            keys,
        )


def ours_layers(module):
    return layer_of(module).num_layers


class TestBadInputs:
    """Recurrent mode refuses inputs it cannot read, naming the entry and the fix."""

    def call(self, module, data):
        with set_recurrent_mode(True):
            return module(data)

    def test_no_is_init(self, kind):
        ours, _ = make_pair(kind)
        data = make_data(kind, (2, 3), pattern("first", (2, 3))).exclude("is_init")
        with pytest.raises(KeyError, match="InitTracker"):
            self.call(ours, data)

    def test_is_init_not_bool(self, kind):
        ours, _ = make_pair(kind)
        data = make_data(kind, (2, 3), pattern("first", (2, 3)).long())
        with pytest.raises(TypeError, match="bool 'is_init'"):
            self.call(ours, data)

    def test_is_init_shape(self, kind):
        ours, _ = make_pair(kind)
        data = make_data(kind, (2, 3), pattern("first", (2, 3)))
        data.set("is_init", torch.zeros(2, 3, 2, dtype=torch.bool))
        with pytest.raises(ValueError, match=r"'is_init' of shape \(2, 3, 1\) \(or \(2, 3\)\)"):
            self.call(ours, data)

    def test_input_size(self, kind):
        ours, _ = make_pair(kind)
        data = make_data(kind, (2, 3), pattern("first", (2, 3)))
        data.set("obs", torch.zeros(2, 3, 4, dtype=torch.float64))
        with pytest.raises(ValueError, match=r"'obs' of shape \[\*batch, T, 3\]"):
            self.call(ours, data)

    def test_input_dtype(self, kind):
        ours, _ = make_pair(kind)
        data = make_data(kind, (2, 3), pattern("first", (2, 3)))
        data.set("obs", torch.zeros(2, 3, 3, dtype=torch.float32))
        with pytest.raises(TypeError, match=r"dtype=torch\.float32"):
            self.call(ours, data)

    def test_state_shape(self, kind):
        ours, _ = make_pair(kind)
        data = make_data(kind, (2, 3), pattern("first", (2, 3)), num_layers=2)
        with pytest.raises(ValueError, match=r"shape \(2, 3, 1, 5\)"):
            self.call(ours, data)

    def test_one_state_missing(self):
        ours, _ = make_pair("lstm")
        data = make_data("lstm", (2, 3), pattern("first", (2, 3))).exclude("recurrent_state_c")
        with pytest.raises(KeyError, match="recurrent_state_c"):
            self.call(ours, data)

    def test_no_time_dimension(self, kind):
        ours, _ = make_pair(kind)
        data = make_data(kind, (2,), pattern("first", (2,)))[0]
        with pytest.raises(ValueError, match=r"batch_size=\(\)"):
            self.call(ours, data)


FALLBACK = """
import torch
from torchrl_ext import _compat
_compat.blas_gemm_addresses = lambda: None
from torchrl_ext.modules import _compiled
from torchrl_ext.modules._kernels import recurrent_cells
assert recurrent_cells.BLAS == "scipy", recurrent_cells.BLAS
torch.manual_seed(0)
layer = torch.nn.LSTM(3, 5, batch_first=True).double()
x = torch.randn(2, 4, 3, dtype=torch.float64)
starts = torch.zeros(2, 4, dtype=torch.bool)
starts[:, 0] = True
weights = tuple(layer.parameters())
out = _compiled.lstm_layer(x, None, None, starts, weights)[0]
print(float((out - layer(x)[0]).abs().max()))
"""


class TestBlas:
    """The kernels' per-step products run in torch's BLAS where it exports one, else scipy's."""

    def test_torch_blas_found_or_none(self):
        addresses = _compat.blas_gemm_addresses()
        assert addresses is None or set(addresses) == {"sgemm_", "dgemm_"}

    def test_scipy_fallback(self):
        proc = subprocess.run(
            [sys.executable, "-c", FALLBACK], capture_output=True, text=True, timeout=600
        )
        assert proc.returncode == 0, proc.stderr
        assert float(proc.stdout.strip().splitlines()[-1]) < 1e-12


BITS = """
import hashlib
import torch
from tensordict import TensorDict
from torchrl.modules import set_recurrent_mode
from torchrl_ext.modules import GRUModule, LSTMModule
torch.manual_seed(0)
digest = hashlib.sha256()
for cls in (LSTMModule, GRUModule):
    for dtype in (torch.float32, torch.float64):
        module = cls(input_size=3, hidden_size=16, in_key="obs", out_key="y").to(dtype)
        data = TensorDict(
            {"obs": torch.randn(4, 9, 3, dtype=dtype), "is_init": torch.rand(4, 9, 1) < 0.3},
            [4, 9],
        )
        with set_recurrent_mode(True):
            y = module(data)["y"]
        grads = torch.autograd.grad(y.pow(2).sum(), list(module.parameters()))
        for t in (y, *grads):
            digest.update(t.detach().numpy().tobytes())
print(digest.hexdigest())
"""


def test_freshly_compiled_and_cached_kernels_give_the_same_bits(tmp_path):
    """A seeded run gives the same bits whether numba compiled the kernels in this process or
    loaded them from its cache (fast-math contraction made the two round differently)."""
    env = {**os.environ, "NUMBA_CACHE_DIR": str(tmp_path)}

    def run():
        proc = subprocess.run(
            [sys.executable, "-c", BITS], capture_output=True, text=True, timeout=600, env=env
        )
        assert proc.returncode == 0, proc.stderr
        return proc.stdout.strip().splitlines()[-1]

    fresh = run()
    assert any(tmp_path.rglob("*.nbi")), "the first process must have written numba's cache"
    assert run() == fresh
