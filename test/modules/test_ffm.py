"""FFMModule: Fast and Forgetful Memory with the TensorDict face of LSTMModule."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from tensordict import TensorDict
from tensordict.nn import TensorDictModule, TensorDictSequential
from torch.func import functional_call
from torchrl.data import LazyTensorStorage, ReplayBuffer
from torchrl.envs import Compose, InitTracker, TransformedEnv
from torchrl.modules import ProbabilisticActor, set_recurrent_mode
from torchrl.modules.utils import get_primers_from_module

from torchrl_ext.modules import FFMModule
from torchrl_ext.modules._chunked_scan import ChunkLayout, chunk_length

DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])
SIZES = {"input_size": 4, "hidden_size": 5, "memory_size": 3, "context_size": 2}
STATE = "recurrent_state_ffm"


def make_module(dtype=torch.float64, device="cpu", seed=0, **kwargs):
    torch.manual_seed(seed)
    kwargs = {**SIZES, "in_key": "obs", "out_key": "y", **kwargs}
    return FFMModule(**kwargs, dtype=dtype, device=device)


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


def make_data(module, shape, is_init, stored=True, seed=0):
    gen = torch.Generator().manual_seed(seed)
    dtype = module.alpha.dtype
    fields = {
        "obs": torch.randn(*shape, module.input_size, generator=gen, dtype=dtype),
        "is_init": is_init,
    }
    if stored:
        state = (*shape, module.memory_size, module.context_size, 2)
        fields[STATE] = torch.randn(state, generator=gen, dtype=dtype)
    return TensorDict(fields, list(shape), device=module.alpha.device)


def oracle_rows(module, x, is_init, stored):
    """Outputs and next traces, one row and one step at a time, in real arithmetic.

    ``x`` is ``[B, T, I]``, ``is_init`` bool ``[B, T]``, ``stored`` ``[B, T, m, c, 2]`` or
    ``None``. A row starts from its stored trace at ``t = 0`` and at every ``is_init``; the
    next trace is kept after a segment's last step, zeros elsewhere. Shares no code with the
    module: the complex decay is a rotation by ``omega`` scaled by ``exp(-|alpha|)``.
    """
    m, c, h = module.memory_size, module.context_size, module.hidden_size
    w_pre, b_pre = module.pre.weight, module.pre.bias
    w_mix, b_mix = module.mix.weight, module.mix.bias
    scale = torch.exp(-module.alpha.abs()).unsqueeze(-1)
    cos, sin = torch.cos(module.omega), torch.sin(module.omega)
    n_rows, n_steps = is_init.shape
    outputs, nexts = [], []
    for b in range(n_rows):
        for t in range(n_steps):
            if t == 0 or bool(is_init[b, t]):
                if stored is None:
                    re, im = x.new_zeros(m, c), x.new_zeros(m, c)
                else:
                    re, im = stored[b, t, ..., 0], stored[b, t, ..., 1]
            pre = w_pre @ x[b, t] + b_pre
            u, skip, in_gate, out_gate = pre[:m], pre[m : m + h], pre[m + h : 2 * m + h], pre[-h:]
            value = u / (1 + torch.exp(-in_gate))
            re, im = (
                scale * (cos * re - sin * im) + value.unsqueeze(-1),
                scale * (sin * re + cos * im),
            )
            z = w_mix @ torch.stack([re, im], -1).reshape(-1) + b_mix
            centred = z - z.mean()
            normed = centred / torch.sqrt((centred**2).mean() + 1e-5)
            gate = 1 / (1 + torch.exp(-out_gate))
            outputs.append(normed * gate + skip * (1 - gate))
            ends = t == n_steps - 1 or bool(is_init[b, t + 1])
            trace = torch.stack([re, im], -1)
            nexts.append(trace if ends else trace * 0)
    y = torch.stack(outputs).reshape(n_rows, n_steps, h)
    return y, torch.stack(nexts).reshape(n_rows, n_steps, m, c, 2)


def loss_of(y, next_state):
    weights = torch.arange(1, y.shape[-1] + 1, dtype=y.dtype, device=y.device)
    return (y * weights).pow(2).sum() + (next_state * 1.5).sum()


def run_rows(module, data):
    """Outputs, next traces and the gradients of a loss reading both, in recurrent mode."""
    data = data.clone()
    leaves = [data["obs"].requires_grad_()]
    if STATE in data.keys():
        leaves.append(data[STATE].requires_grad_())
    with set_recurrent_mode(True):
        out = module(data)
    y, next_state = out["y"], out["next", STATE]
    grads = torch.autograd.grad(loss_of(y, next_state), leaves + list(module.parameters()))
    return y, next_state, grads


def run_oracle(module, data):
    data = data.clone()
    shape = data.shape
    n_steps = shape[-1]
    x = data["obs"].requires_grad_()
    leaves = [x]
    stored = None
    if STATE in data.keys():
        stored = data[STATE].requires_grad_()
        leaves.append(stored)
        stored = stored.reshape(-1, n_steps, *stored.shape[-3:])
    is_init = data["is_init"].reshape(-1, n_steps)
    y, next_state = oracle_rows(module, x.reshape(-1, n_steps, x.shape[-1]), is_init, stored)
    y = y.reshape(*shape, -1)
    next_state = next_state.reshape(*shape, *next_state.shape[-3:])
    grads = torch.autograd.grad(loss_of(y, next_state), leaves + list(module.parameters()))
    return y, next_state, grads


def assert_same(got, expected, rtol=1e-10, atol=1e-12):
    (y, next_state, grads), (y_ref, next_ref, grads_ref) = got, expected
    torch.testing.assert_close(y, y_ref, rtol=rtol, atol=atol)
    torch.testing.assert_close(next_state, next_ref, rtol=rtol, atol=atol)
    assert len(grads) == len(grads_ref)
    for g, g_ref in zip(grads, grads_ref, strict=True):
        torch.testing.assert_close(g, g_ref, rtol=rtol, atol=atol)


class TestHandCase:
    """One channel, one frequency, ``gamma = i / 2``, weights set by hand.

    ``u = x``, both gates ``1/2`` and no skip, so the trace takes ``x / 2`` per step:
    ``S_t = (i / 2) S_{t-1} + x_t / 2``. The row ``x = 2, 4, 8, 6`` starts from the stored
    trace ``2`` and again at ``t = 2`` from the stored ``4i``: ``S = 1 + i, 3/2 + i/2 | 2, 3 + i``.
    The read-out is ``(Re S, Im S)``, so the output is half the layer norm of that pair:
    ``(d, -d) / 2 / sqrt(d^2 + 1e-5)`` with ``d = (Re S - Im S) / 2``.
    """

    def test_two_segments(self):
        module = FFMModule(1, 2, memory_size=1, context_size=1, in_key="obs", out_key="y")
        module = module.double()
        with torch.no_grad():
            for p in module.parameters():
                p.zero_()
            module.pre.weight[0, 0] = 1.0  # u = x
            module.alpha.fill_(math.log(2))
            module.omega.fill_(math.pi / 2)
            module.mix.weight.copy_(torch.eye(2))
        stored = torch.zeros(1, 4, 1, 1, 2, dtype=torch.float64)
        stored[0, 0, 0, 0] = torch.tensor([2.0, 0.0])
        stored[0, 2, 0, 0] = torch.tensor([0.0, 4.0])
        stored[0, 1] = stored[0, 3] = 9.0  # not read: no segment starts there
        data = TensorDict(
            {
                "obs": torch.tensor([[[2.0], [4.0], [8.0], [6.0]]], dtype=torch.float64),
                "is_init": torch.tensor([[[True], [False], [True], [False]]]),
                STATE: stored,
            },
            [1, 4],
        )
        with set_recurrent_mode(True):
            out = module(data)
        d = torch.tensor([0.0, 0.5, 1.0, 1.0], dtype=torch.float64)
        half = d / 2 / torch.sqrt(d**2 + 1e-5)
        expected = torch.stack([half, -half], -1)
        torch.testing.assert_close(out["y"][0], expected, rtol=0, atol=1e-15)
        next_state = torch.tensor(
            [[0.0, 0.0], [1.5, 0.5], [0.0, 0.0], [3.0, 1.0]], dtype=torch.float64
        )
        torch.testing.assert_close(out["next", STATE].view(4, 2), next_state, rtol=0, atol=1e-15)


class TestWholeRows:
    """Recurrent mode equals the step-by-step oracle in float64, to ``rtol = 1e-10``.

    Outputs, next traces and the gradients of every parameter, the input and the stored
    traces agree for episode starts anywhere, at every step or nowhere, with and without stored
    traces, for rows whose length crosses chunk boundaries (with and without padding) and for
    batch shapes ``[T]``, ``[B, T]`` and ``[A, B, T]``.
    """

    @pytest.mark.parametrize("device", DEVICES)
    @pytest.mark.parametrize("n_steps", [1, 7, 33, 100])
    @pytest.mark.parametrize("seed", [0, 1])
    def test_matches_oracle(self, device, n_steps, seed):
        module = make_module(device=device, seed=seed)
        shape = (3, n_steps)
        data = make_data(module, shape, pattern("random", shape, seed).to(device), seed=seed)
        assert_same(run_rows(module, data), run_oracle(module, data))

    @pytest.mark.parametrize("layout", ["every", "none", "first"])
    @pytest.mark.parametrize("stored", [True, False])
    def test_reset_layouts(self, layout, stored):
        module = make_module()
        shape = (2, 12)
        data = make_data(module, shape, pattern(layout, shape), stored=stored)
        assert_same(run_rows(module, data), run_oracle(module, data))

    @pytest.mark.parametrize("shape", [(6,), (2, 3, 5), (4, 1)])
    def test_batch_shapes(self, shape):
        module = make_module()
        data = make_data(module, shape, pattern("random", shape, 3))
        got = run_rows(module, data)
        assert got[0].shape == (*shape, 5)
        assert_same(got, run_oracle(module, data))

    def test_is_init_without_trailing_dimension(self):
        module = make_module()
        shape = (3, 9)
        data = make_data(module, shape, pattern("random", shape, 4))
        flat = data.clone().set("is_init", data["is_init"].squeeze(-1))
        assert_same(run_rows(module, flat), run_rows(module, data), rtol=0, atol=0)

    @settings(max_examples=15, deadline=None)
    @given(
        rows=st.integers(1, 3),
        steps=st.integers(1, 40),
        rate=st.floats(0.0, 1.0),
        seed=st.integers(0, 2**16),
    )
    def test_random_layouts(self, rows, steps, rate, seed):
        gen = torch.Generator().manual_seed(seed)
        is_init = (torch.rand(rows, steps, generator=gen) < rate).unsqueeze(-1)
        module = make_module(seed=seed, memory_size=2, context_size=3)
        data = make_data(module, (rows, steps), is_init, seed=seed)
        assert_same(run_rows(module, data), run_oracle(module, data))

    def test_float32_close_to_float64(self):
        module = make_module()
        shape = (4, 64)
        data = make_data(module, shape, pattern("random", shape, 5))
        expected = run_rows(module, data)
        got = run_rows(module.float(), data.float().set("is_init", data["is_init"]))
        pairs = zip(
            [got[0], got[1], *got[2]], [expected[0], expected[1], *expected[2]], strict=True
        )
        for a, b in pairs:
            torch.testing.assert_close(a.double(), b, rtol=1e-4, atol=1e-4)

    def test_expanded_output_gradient(self):
        """A broadcast gradient (``y.sum()``'s) reads as the same values made contiguous."""
        module = make_module()
        data = make_data(module, (2, 16), pattern("random", (2, 16), 7)).clone()
        with set_recurrent_mode(True):
            y = module(data.clone())["y"]
        (got,) = torch.autograd.grad(y.sum(), module.mix.weight, retain_graph=True)
        (expected,) = torch.autograd.grad(y, module.mix.weight, torch.ones_like(y))
        torch.testing.assert_close(got, expected, rtol=0, atol=0)

    def test_passes_in_flight_keep_their_intermediates(self):
        """Two graphs alive at once (the module's workspace holds both sets of intermediates),
        and a third pass between their backward passes, each give their own gradients."""
        module = make_module(hidden_size=8)
        shape = (3, 40)
        batches = [make_data(module, shape, pattern("random", shape, s), seed=s) for s in range(3)]
        expected = [run_rows(module, batch) for batch in batches]
        with set_recurrent_mode(True):
            outs = [module(batch.clone()) for batch in batches[:2]]
        params = list(module.parameters())
        first = torch.autograd.grad(loss_of(outs[0]["y"], outs[0]["next", STATE]), params)
        third = run_rows(module, batches[2])
        second = torch.autograd.grad(loss_of(outs[1]["y"], outs[1]["next", STATE]), params)
        for got, want in (
            (first, expected[0][2][-len(params) :]),
            (second, expected[1][2][-len(params) :]),
        ):
            for g, w in zip(got, want, strict=True):
                torch.testing.assert_close(g, w, rtol=0, atol=0)
        assert_same(third, expected[2], rtol=0, atol=0)

    def test_outputs_are_not_overwritten_by_later_passes(self):
        module = make_module()
        shape = (2, 30)
        first = run_rows(module, make_data(module, shape, pattern("random", shape, 1), seed=1))
        kept = [first[0].clone(), first[1].clone(), *(g.clone() for g in first[2])]
        run_rows(module, make_data(module, shape, pattern("random", shape, 2), seed=2))
        for a, b in zip([first[0], first[1], *first[2]], kept, strict=True):
            assert torch.equal(a, b)

    def test_gradcheck(self):
        """``torch.autograd.gradcheck`` of the whole-row path: input, stored traces, parameters."""
        module = make_module(memory_size=2, context_size=2, hidden_size=3, input_size=2)
        shape = (2, 7)
        data = make_data(module, shape, pattern("random", shape, 6))
        names = [name for name, _ in module.named_parameters()]

        def rows(x, stored, *params):
            td = data.clone().set("obs", x).set(STATE, stored)
            with set_recurrent_mode(True):
                out = functional_call(module, dict(zip(names, params, strict=True)), (td,))
            return out["y"], out["next", STATE]

        inputs = [data["obs"], data[STATE], *module.parameters()]
        inputs = [t.detach().clone().requires_grad_() for t in inputs]
        assert torch.autograd.gradcheck(rows, inputs)


class TestStepMode:
    """Outside recurrent mode each element is one step; over a row it reproduces recurrent mode.

    Stepping along a row with the trace carried, reset to zeros where ``is_init`` is set (as an
    env's primer stores it), gives the outputs recurrent mode computes over the row with those
    stored traces, and the same next traces at the segments' ends.
    """

    @pytest.mark.parametrize("device", DEVICES)
    @pytest.mark.parametrize("first", ["stored", "is_init"])
    def test_steps_equal_rows(self, device, first):
        module = make_module(device=device)
        shape = (3, 20)
        is_init = pattern("random", shape, 7).to(device)
        is_init[:, 0] = first == "is_init"
        data = make_data(module, shape, is_init, seed=1)
        trace = data[STATE][:, 0]
        outputs, traces, nexts = [], [], []
        for t in range(shape[1]):
            trace = torch.where(is_init[:, t, :, None, None], 0.0, trace)
            traces.append(trace)
            out = module(data[:, t].exclude(STATE).set(STATE, trace))
            outputs.append(out["y"])
            trace = out["next", STATE]
            nexts.append(trace)
        data.set(STATE, torch.stack(traces, 1))
        with set_recurrent_mode(True):
            rows = module(data.clone())
        torch.testing.assert_close(torch.stack(outputs, 1), rows["y"], rtol=1e-10, atol=1e-12)
        ends = torch.ones(shape, dtype=torch.bool, device=device)
        ends[:, :-1] = is_init[:, 1:, 0]
        torch.testing.assert_close(
            torch.stack(nexts, 1)[ends], rows["next", STATE][ends], rtol=1e-10, atol=1e-12
        )
        assert not rows["next", STATE][~ends].any()

    @pytest.mark.parametrize("shape", [(), (1,), (4,), (2, 3)])
    def test_one_step_is_oracle(self, shape):
        module = make_module()
        data = make_data(module, shape, pattern("random", shape, 8))
        out = module(data.clone())
        n = max(1, math.prod(shape))
        stored = data[STATE].reshape(n, 1, *data[STATE].shape[-3:])
        stored = torch.where(data["is_init"].reshape(n, 1, 1, 1, 1), 0.0, stored)
        x = data["obs"].reshape(n, 1, -1)
        y, next_state = oracle_rows(module, x, torch.ones(n, 1, dtype=torch.bool), stored)
        torch.testing.assert_close(out["y"], y.reshape(*shape, -1))
        torch.testing.assert_close(out["next", STATE], next_state.reshape(*shape, 3, 2, 2))

    def test_no_stored_trace_is_zeros(self):
        module = make_module()
        data = make_data(module, (4,), pattern("none", (4,)))
        zeros = data.clone().set(STATE, torch.zeros_like(data[STATE]))
        out = module(data.exclude(STATE))
        torch.testing.assert_close(out["y"], module(zeros)["y"], rtol=0, atol=0)


class TestChunkLayout:
    """Chunks of about ``sqrt(T)`` steps, a divisor of ``T`` where one is near, else padded."""

    @pytest.mark.parametrize(
        "n_steps, length", [(1, 1), (2, 1), (7, 3), (33, 3), (100, 10), (1024, 32)]
    )
    def test_lengths(self, n_steps, length):
        assert chunk_length(n_steps) == length

    @given(n_steps=st.integers(1, 5000))
    def test_python_steps_grow_as_sqrt(self, n_steps):
        layout = ChunkLayout(2, n_steps)
        assert 0 <= layout.padded_steps - n_steps < layout.length
        assert layout.length + layout.count <= 3 * math.sqrt(n_steps) + 2

    @pytest.mark.parametrize("n_steps", [1, 7, 12])
    def test_round_trip(self, n_steps):
        layout = ChunkLayout(3, n_steps)
        rows = torch.randn(3, n_steps, 2)
        chunks = layout.to_chunks(rows)
        assert chunks.shape == (layout.length, 3, layout.count, 2)
        assert torch.equal(chunks[1 % layout.length, 0, 0], rows[0, min(1, n_steps - 1)])
        assert torch.equal(layout.from_chunks(chunks), rows)


class TestEmptyBatch:
    """A batch without elements gives entries without elements, connected to the parameters."""

    @pytest.mark.parametrize("shape", [(0, 5), (2, 0), (0,)])
    @pytest.mark.parametrize("stored", [True, False])
    def test_recurrent_mode(self, shape, stored):
        module = make_module()
        data = make_data(module, shape, pattern("none", shape), stored=stored)
        with set_recurrent_mode(True):
            out = module(data)
        assert out["y"].shape == (*shape, 5)
        assert out["next", STATE].shape == (*shape, 3, 2, 2)
        grads = torch.autograd.grad(out["y"].sum(), list(module.parameters()), allow_unused=True)
        assert all(g is None or not g.any() for g in grads)

    @pytest.mark.parametrize("shape", [(0,), (0, 3)])
    def test_step_mode(self, shape):
        module = make_module()
        out = module(make_data(module, shape, pattern("none", shape)))
        assert out["y"].shape == (*shape, 5)
        assert out["next", STATE].shape == (*shape, 3, 2, 2)


class TestArguments:
    """Constructor arguments and inputs are checked; messages name the argument and value."""

    @pytest.mark.parametrize(
        "kwargs, error, match",
        [
            ({"input_size": 0}, ValueError, "input_size=0"),
            ({"hidden_size": "8"}, TypeError, "hidden_size='8'"),
            ({"memory_size": 0}, ValueError, "memory_size=0"),
            ({"context_size": 1.5}, TypeError, "context_size=1.5"),
            ({"in_keys": ["obs", "s"]}, ValueError, "in_key='obs' and in_keys"),
            ({"in_key": None}, ValueError, "in_key=None and in_keys=None"),
            ({"out_key": None, "out_keys": None}, ValueError, "out_key=None"),
            ({"in_key": ""}, ValueError, "in_key=''"),
            ({"out_key": 3}, TypeError, "out_key=3"),
            ({"in_key": None, "in_keys": "obs"}, TypeError, "in_keys='obs'"),
            ({"in_key": None, "in_keys": ["obs"]}, ValueError, "in_keys=\\['obs'\\]"),
            ({"in_key": None, "in_keys": ["obs", "s", "x"]}, ValueError, "'is_init'"),
            ({"out_key": None, "out_keys": ["y", 2]}, TypeError, "out_keys\\[1\\]=2"),
            ({"dtype": torch.float16}, ValueError, "dtype=torch.float16"),
            ({"dtype": "float32"}, TypeError, "dtype='float32'"),
            ({"default_recurrent_mode": "yes"}, TypeError, "default_recurrent_mode='yes'"),
        ],
    )
    def test_constructor(self, kwargs, error, match):
        kwargs = {**SIZES, "in_key": "obs", "out_key": "y", **kwargs}
        with pytest.raises(error, match=match):
            FFMModule(**kwargs)

    def test_keys(self):
        module = FFMModule(3, 8, in_key="obs", out_key="features")
        assert module.in_keys == ["obs", STATE, "is_init"]
        assert module.out_keys == ["features", ("next", STATE)]
        custom = FFMModule(
            3, 8, in_keys=[("a", "obs"), "s", "is_init"], out_keys=["f", ("next", "s")]
        )
        assert custom.in_keys == [("a", "obs"), "s", "is_init"]

    @pytest.mark.parametrize("mode", [False, True])
    @pytest.mark.parametrize(
        "case, error, match",
        [
            ("no_is_init", KeyError, "InitTracker"),
            ("is_init_dtype", TypeError, "bool 'is_init'"),
            ("is_init_shape", ValueError, "'is_init' of shape"),
            ("input_shape", ValueError, "'obs' of shape"),
            ("input_dtype", TypeError, "dtype=torch.float32"),
            ("state_shape", ValueError, f"'{STATE}' of shape"),
            ("state_dtype", TypeError, "dtype=torch.float32"),
        ],
    )
    def test_inputs(self, mode, case, error, match):
        module = make_module()
        shape = (2, 3)
        data = make_data(module, shape, pattern("first", shape))
        if case == "no_is_init":
            data = data.exclude("is_init")
        elif case == "is_init_dtype":
            data["is_init"] = data["is_init"].long()
        elif case == "is_init_shape":
            data.set("is_init", torch.zeros(2, 3, 2, dtype=torch.bool))
        elif case == "input_shape":
            data.set("obs", torch.zeros(2, 3, 5, dtype=torch.float64))
        elif case == "input_dtype":
            data["obs"] = data["obs"].float()
        elif case == "state_shape":
            data.set(STATE, torch.zeros(2, 3, 3, 2, 1, dtype=torch.float64))
        else:
            data[STATE] = data[STATE].float()
        with set_recurrent_mode(mode), pytest.raises(error, match=match):
            module(data)

    def test_no_time_dimension(self):
        module = make_module()
        data = make_data(module, (), pattern("every", ()))
        with set_recurrent_mode(True), pytest.raises(ValueError, match=r"batch_size=\(\)"):
            module(data)

    def test_recurrent_mode_is_read_only(self):
        with pytest.raises(RuntimeError, match="set_recurrent_mode"):
            make_module().recurrent_mode = True


class TestTorchRLFace:
    """Primer, modes, checkpoints, replay buffers and TorchRL's wrappers, as for LSTMModule."""

    def test_parameter_count_is_the_paper_s(self):
        module = FFMModule(128, 256, in_key="obs", out_key="y")
        m, c, h = 32, 4, 256
        expected = (128 + 1) * (2 * m + 2 * h) + m + c + (2 * m * c + 1) * h
        assert sum(p.numel() for p in module.parameters()) == expected
        assert module.alpha.dtype == torch.float32

    def test_modes(self):
        module = make_module()
        assert not module.recurrent_mode
        with set_recurrent_mode(True):
            assert module.recurrent_mode
        assert make_module(default_recurrent_mode=True).recurrent_mode
        with set_recurrent_mode(False):
            assert not make_module(default_recurrent_mode=True).recurrent_mode

    def test_primer_in_env_rollout_and_replay(self):
        from torchrl_ext.envs import CartPoleEnv

        module = FFMModule(4, 8, memory_size=4, context_size=2, in_key="observation", out_key="h")
        head = TensorDictModule(torch.nn.Linear(8, 2), in_keys=["h"], out_keys=["logits"])
        pick = TensorDictModule(lambda x: x.argmax(-1), in_keys=["logits"], out_keys=["action"])
        policy = TensorDictSequential(module, head, pick)
        assert get_primers_from_module(policy).primers == module.make_tensordict_primer().primers
        env = TransformedEnv(
            CartPoleEnv(2, seed=3), Compose(InitTracker(), module.make_tensordict_primer())
        )
        with torch.no_grad():
            data = env.rollout(5, policy, break_when_any_done=False)
        assert data[STATE].shape == (2, 5, 4, 2, 2)
        assert data[STATE].dtype == torch.float32
        assert not data[STATE][:, 0].any()
        assert torch.equal(data[STATE][:, 1:], data["next", STATE][:, :-1])
        with torch.no_grad(), set_recurrent_mode(True):
            replayed = module(data.clone())
        torch.testing.assert_close(replayed["h"], data["h"], rtol=1e-5, atol=1e-6)
        buffer = ReplayBuffer(storage=LazyTensorStorage(10))
        buffer.extend(data.reshape(-1))
        assert buffer.storage[:][STATE].dtype == torch.float32

    def test_primer_needs_matching_keys(self):
        module = FFMModule(3, 4, in_keys=["obs", "s"], out_keys=["y", ("next", "t")])
        with pytest.raises(RuntimeError, match="out_keys"):
            module.make_tensordict_primer()

    def test_state_dict_round_trip(self):
        module = make_module()
        fresh = make_module(seed=1)
        fresh.load_state_dict(module.state_dict())
        names = ["alpha", "omega", "pre.weight", "pre.bias", "mix.weight", "mix.bias"]
        assert list(module.state_dict()) == names
        shape = (2, 6)
        data = make_data(module, shape, pattern("random", shape))
        assert_same(run_rows(fresh, data), run_rows(module, data), rtol=0, atol=0)

    def test_probabilistic_actor(self):
        module = FFMModule(4, 8, in_key="obs", out_key="h")
        head = TensorDictModule(torch.nn.Linear(8, 3), in_keys=["h"], out_keys=["logits"])
        actor = ProbabilisticActor(
            TensorDictSequential(module, head),
            in_keys=["logits"],
            distribution_class=torch.distributions.Categorical,
            return_log_prob=True,
        )
        shape = (3, 6)
        data = TensorDict(
            {"obs": torch.randn(*shape, 4), "is_init": pattern("first", shape)}, shape
        )
        with set_recurrent_mode(True):
            out = actor(data)
        assert out["action"].shape == shape
        out["action_log_prob"].sum().backward()
        assert module.alpha.grad is not None and module.pre.weight.grad.abs().sum() > 0
        assert actor(data[:, 0].exclude("h", "next"))["action"].shape == (3,)
