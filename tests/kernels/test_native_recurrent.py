"""The compiled LSTM and GRU recurrences (kernels/native/recurrent.c) against the same ops' NumPy
step loop, over odd sizes, every direction, initial states, biases and GRU's linear_before_reset;
the cases the compiled loop does not take keep the NumPy loop; the C checks the spans itself."""
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rtd.kernels import native
from rtd.kernels.graph import make_kernel
from rtd.kernels.ir import Node
from rtd.kernels.native import recurrent
from rtd.kernels.ops._rnn import RecurrentKernel

pytestmark = pytest.mark.skipif(native.compiled is None or recurrent.BLAS is None,
                                reason="rtd was installed without its compiled kernels")


def run_both(op, attrs, inputs, monkeypatch):
    """(compiled outputs, NumPy loop outputs, whether the compiled loop ran) for one node."""
    kernel = make_kernel(Node(op, "", [], ["y", "h", "c"][:3 if op == "LSTM" else 2], attrs), {"": 14}, np)
    taken = []
    original = type(kernel).compiled_loop
    monkeypatch.setattr(type(kernel), "compiled_loop", lambda self, *a: taken.append(original(self, *a)) or taken[-1])
    got = [v.copy() for v in kernel.run(*inputs)]
    monkeypatch.setattr(type(kernel), "compiled_loop", RecurrentKernel.compiled_loop)
    want = kernel.run(*inputs)
    return got, want, taken == [True]


@st.composite
def cases(draw):
    direction = draw(st.sampled_from(["forward", "reverse", "bidirectional"]))
    dirs = 2 if direction == "bidirectional" else 1
    return dict(seq=draw(st.integers(1, 6)), batch=draw(st.integers(1, 3)), hidden=draw(st.integers(1, 9)),
                size=draw(st.integers(1, 7)), direction=direction, dirs=dirs, bias=draw(st.booleans()),
                initial=draw(st.booleans()), seed=draw(st.integers(0, 2**31 - 1)))


def arrays(case, gates):
    rng = np.random.default_rng(case["seed"])
    d, h, b = case["dirs"], case["hidden"], case["batch"]
    x = rng.standard_normal((case["seq"], b, case["size"]), dtype=np.float32)
    w = rng.standard_normal((d, gates * h, case["size"]), dtype=np.float32)
    r = rng.standard_normal((d, gates * h, h), dtype=np.float32) * 0.5
    bias = rng.standard_normal((d, 2 * gates * h), dtype=np.float32) if case["bias"] else None
    states = [rng.standard_normal((d, b, h), dtype=np.float32) if case["initial"] else None for _ in range(2)]
    return x, w, r, bias, states


@settings(max_examples=150, deadline=None)
@given(cases())
def test_compiled_lstm_equals_the_numpy_loop(case):
    with pytest.MonkeyPatch.context() as monkeypatch:
        x, w, r, bias, (h0, c0) = arrays(case, 4)
        attrs = {"hidden_size": case["hidden"], "direction": case["direction"]}
        got, want, compiled = run_both("LSTM", attrs, [x, w, r, bias, None, h0, c0], monkeypatch)
    assert compiled
    for g, v in zip(got, want):
        np.testing.assert_allclose(g, v, rtol=1e-5, atol=1e-5)


@settings(max_examples=150, deadline=None)
@given(cases(), st.booleans())
def test_compiled_gru_equals_the_numpy_loop(case, linear_before_reset):
    with pytest.MonkeyPatch.context() as monkeypatch:
        x, w, r, bias, (h0, _) = arrays(case, 3)
        attrs = {"hidden_size": case["hidden"], "direction": case["direction"], "linear_before_reset": int(linear_before_reset)}
        got, want, compiled = run_both("GRU", attrs, [x, w, r, bias, None, h0], monkeypatch)
    assert compiled
    for g, v in zip(got, want):
        np.testing.assert_allclose(g, v, rtol=1e-5, atol=1e-5)


def test_what_the_compiled_loop_does_not_take_runs_the_numpy_loop(monkeypatch):
    case = dict(seq=3, batch=2, hidden=4, size=3, direction="forward", dirs=1, bias=True, initial=False, seed=1)
    x, w, r, bias, _ = arrays(case, 4)
    for attrs in ({"clip": 1.0}, {"input_forget": 1}, {"activations": ["Sigmoid", "Tanh", "Relu"]}):
        _, _, compiled = run_both("LSTM", {"hidden_size": 4, **attrs}, [x, w, r, bias], monkeypatch)
        assert not compiled, attrs
    lengths = np.array([3, 1], np.int32)   # ragged lengths: the NumPy loop masks the finished items
    _, _, compiled = run_both("LSTM", {"hidden_size": 4}, [x, w, r, bias, lengths], monkeypatch)
    assert not compiled


def test_the_c_boundary_checks_the_spans():
    ffi, lib = native.compiled.ffi, native.compiled.lib
    seq, hidden, batch = 3, 2, 1
    xw, r = np.ones(seq * 4 * hidden * batch, np.float32), np.ones(4 * hidden * hidden, np.float32)
    h, c = np.zeros(hidden * batch, np.float32), np.zeros(hidden * batch, np.float32)
    y, gates = np.empty(seq * hidden * batch, np.float32), np.empty(4 * hidden * batch, np.float32)
    buf = lambda a: ffi.from_buffer("float[]", a, require_writable=True)   # noqa: E731

    def call(xw_len=xw.size, xw_step=4 * hidden * batch, y_len=y.size, seq=seq):
        return lib.rtd_lstm_f32(buf(xw), xw_len, 0, xw_step, buf(r), r.size, buf(h), buf(c), h.size,
                                buf(y), y_len, 0, hidden * batch, buf(gates), gates.size, seq, hidden, batch)
    assert call() == 0
    assert call(xw_len=xw.size - 1) != 0
    assert call(y_len=y.size - 1) != 0
    assert call(xw_step=1) != 0           # steps that overlap
    assert call(seq=4) != 0               # one step past the buffers
