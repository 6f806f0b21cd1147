"""The compiled LSTM and GRU recurrences (kernels/native/recurrent.c) against the same ops' NumPy
step loop, over odd sizes, every direction, initial states, biases and GRU's linear_before_reset;
the recurrent product over R packed once against float64; both directions in one call, on one thread
or two with the same bits (DynamicQuantizeLSTM's 8-bit recurrence too); the cases the compiled loop
does not take keep the NumPy loop; the C checks the lengths itself. DynamicQuantizeLSTM's results are
tested against a NumPy statement of the op in test_ops_dynamic_quantize_lstm.py."""
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rtd.kernels import native
from rtd.kernels.graph import make_kernel
from rtd.kernels.ir import Node
from rtd.kernels.native import recurrent
from rtd.kernels.ops._rnn import RecurrentKernel

pytestmark = pytest.mark.skipif(native.compiled is None, reason="rtd was installed without its compiled kernels")


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
    return dict(seq=draw(st.integers(1, 6)), batch=draw(st.integers(1, 7)), hidden=draw(st.integers(1, 19)),
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


def test_the_c_boundary_checks_the_lengths():
    ffi, lib = native.compiled.ffi, native.compiled.lib
    seq, dirs, hidden, batch = 3, 2, 2, 1
    xw = np.ones(seq * dirs * 4 * hidden * batch, np.float32)
    r = np.ones(dirs * lib.rtd_recurrent_packed_len(4 * hidden, hidden), np.float32)
    h, c = np.zeros(dirs * hidden * batch, np.float32), np.zeros(dirs * hidden * batch, np.float32)
    y, gates = np.empty(seq * dirs * hidden * batch, np.float32), np.empty(dirs * 4 * hidden * batch, np.float32)
    buf = lambda a: ffi.from_buffer("float[]", a, require_writable=True)   # noqa: E731

    def call(xw_len=xw.size, r_len=r.size, y_len=y.size, gates_len=gates.size, seq=seq, dirs=dirs):
        return lib.rtd_lstm_f32(buf(xw), xw_len, buf(r), r_len, buf(h), buf(c), h.size, buf(y), y_len,
                                buf(gates), gates_len, seq, dirs, hidden, batch)
    assert call() == 0
    assert call(xw_len=xw.size - 1) != 0
    assert call(y_len=y.size - 1) != 0
    assert call(r_len=r.size - 1) != 0   # R not packed for this hidden size
    assert call(gates_len=gates.size - 1) != 0
    assert call(seq=4) != 0               # one step past the buffers
    assert call(dirs=3) != 0
    packed = np.empty(lib.rtd_recurrent_packed_len(4 * hidden, hidden), np.float32)
    assert lib.rtd_recurrent_pack(buf(r), 4 * hidden * hidden - 1, 4 * hidden, hidden, buf(packed), packed.size) != 0


def test_the_8bit_recurrence_checks_the_lengths():
    ffi, lib = native.compiled.ffi, native.compiled.lib
    seq, dirs, hidden, batch = 3, 2, 4, 2
    g, nb = 4 * hidden, hidden * batch
    xw, r = np.ones(seq * dirs * g * batch, np.float32), np.ones(dirs * lib.rtd_lstm_q8_packed_len(hidden), np.int8)
    scale, h, c = np.ones(dirs * g, np.float32), np.zeros(dirs * nb, np.float32), np.zeros(dirs * nb, np.float32)
    y, gates, q = np.empty(seq * dirs * nb, np.float32), np.empty(dirs * g * batch, np.float32), np.empty(dirs * nb, np.int16)
    buf = lambda a, t="float[]": ffi.from_buffer(t, a, require_writable=True)   # noqa: E731

    def call(xw_len=xw.size, r_len=r.size, scale_len=scale.size, y_len=y.size, gates_len=gates.size, q_len=q.size,
             seq=seq, dirs=dirs, hidden=hidden):
        return lib.rtd_lstm_q8_f32(buf(xw), xw_len, buf(r, "int8_t[]"), r_len, buf(scale), scale_len, buf(h), buf(c), h.size,
                                   buf(y), y_len, buf(gates), gates_len, buf(q, "int16_t[]"), q_len, seq, dirs, hidden, batch)
    assert call() == 0
    for wrong in ({"xw_len": xw.size - 1}, {"r_len": r.size - 1}, {"scale_len": scale.size - 1}, {"y_len": y.size - 1},
                  {"gates_len": gates.size - 1}, {"q_len": q.size - 1}, {"seq": 4}, {"dirs": 3}, {"hidden": 65537}):
        assert call(**wrong) != 0, wrong
    stored = np.ones(dirs * hidden * g, np.int8)   # R as the op stores it, (dirs, H, 4H)
    pack = lambda r_len=stored.size, packed_len=r.size, hidden=hidden: lib.rtd_lstm_q8_pack(   # noqa: E731
        buf(stored, "int8_t[]"), r_len, dirs, hidden, buf(r, "int8_t[]"), packed_len)
    assert pack() == 0
    for wrong in ({"r_len": stored.size - 1}, {"packed_len": r.size - 1}, {"hidden": 65537}):
        assert pack(**wrong) != 0, wrong
    assert lib.rtd_lstm_q8_packed_len(0) == -1


def test_the_8bit_recurrence_gives_the_same_bits_on_one_thread_or_two(monkeypatch):
    rng = np.random.default_rng(5)
    seq, batch, hidden, size = 9, 2, 21, 5
    kernel = make_kernel(Node("DynamicQuantizeLSTM", "com.microsoft", [], ["y", "h", "c"],
                              {"hidden_size": hidden, "direction": "bidirectional"}), {"": 14, "com.microsoft": 1}, np)
    calls = []
    monkeypatch.setattr("rtd.kernels.ops.op_ms_dynamic_quantize_lstm.lstm_q8",
                        lambda *a: calls.append(a[0].shape) or recurrent.lstm_q8(*a))
    inputs = [rng.standard_normal((seq, batch, size), dtype=np.float32),
              rng.integers(-127, 128, (2, size, 4 * hidden)).astype(np.int8),
              rng.integers(-127, 128, (2, hidden, 4 * hidden)).astype(np.int8),
              rng.standard_normal((2, 8 * hidden), dtype=np.float32), None, None, None, None,
              np.full(2, 0.01, np.float32), np.zeros(2, np.int8), np.full(2, 0.002, np.float32), np.zeros(2, np.int8)]
    try:
        native.set_threads(1)
        one = [v.copy() for v in kernel.run(*inputs)]
        native.set_threads(2)
        two = kernel.run(*inputs)
    finally:
        native.set_threads(1)
    assert [s[1] for s in calls] == [2, 2]   # one call each, both directions in it
    for a, b in zip(one, two):
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("batch", [1, 2, 3, 5, 9])
@pytest.mark.parametrize("rows", [4, 16, 40, 64])
def test_the_recurrent_product_over_packed_r(rows, batch):
    """One step from zero cell state with xw 0: c = sigmoid(0) * tanh(R @ h) rows' sums, checked against float64
    through the LSTM's own update (i = f = o = sigmoid(gate)), so every packed panel and column block counts."""
    rng = np.random.default_rng(rows * 10 + batch)
    hidden = rows // 4
    r = rng.standard_normal((1, rows, hidden), dtype=np.float32)
    h0 = rng.standard_normal((1, hidden, batch), dtype=np.float32)
    xw = np.zeros((1, 1, rows, batch), np.float32)
    h, c, yt = h0.copy(), np.zeros_like(h0), np.empty((1, 1, hidden, batch), np.float32)
    assert recurrent.lstm(xw, r, h, c, yt, constant=False)
    gates = r[0].astype(np.float64) @ h0[0].astype(np.float64)
    sig = lambda v: 1 / (1 + np.exp(-v))   # noqa: E731
    i, o, cell = sig(gates[:hidden]), sig(gates[hidden:2 * hidden]), np.tanh(gates[3 * hidden:])
    np.testing.assert_allclose(c[0], i * cell, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(yt[0, 0], o * np.tanh(i * cell), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("op", ["LSTM", "GRU"])
def test_both_directions_in_one_call_give_the_same_bits_on_one_thread_or_two(op, monkeypatch, native_threads):
    case = dict(seq=7, batch=3, hidden=21, size=5, direction="bidirectional", dirs=2, bias=True, initial=True, seed=3)
    x, w, r, bias, states = arrays(case, 4 if op == "LSTM" else 3)
    calls = []
    original = getattr(recurrent, op.lower())
    monkeypatch.setattr(recurrent, op.lower(), lambda *a: calls.append(a[0].shape) or original(*a))
    monkeypatch.setattr(f"rtd.kernels.ops.op_{op.lower()}.{op.lower()}", getattr(recurrent, op.lower()))
    kernel = make_kernel(Node(op, "", [], ["y", "h", "c"][:3 if op == "LSTM" else 2], {"hidden_size": 21, "direction": "bidirectional"}),
                         {"": 14}, np)
    inputs = [x, w, r, bias, None, *states[:2 if op == "LSTM" else 1]]
    native_threads(1)
    one = [v.copy() for v in kernel.run(*inputs)]
    native_threads(2)
    two = kernel.run(*inputs)
    assert [s[1] for s in calls] == [2, 2]   # one call each, both directions in it
    for a, b in zip(one, two):
        np.testing.assert_array_equal(a, b)


def test_a_constant_r_is_packed_once(monkeypatch):
    case = dict(seq=2, batch=1, hidden=3, size=2, direction="forward", dirs=1, bias=False, initial=False, seed=4)
    x, w, r, _, _ = arrays(case, 4)
    r.flags.writeable = False   # as a model's initializers are
    packs = []
    original = recurrent._pack_rows
    monkeypatch.setattr(recurrent, "_pack_rows", lambda *a: packs.append(1) or original(*a))
    kernel = make_kernel(Node("LSTM", "", [], ["y"], {"hidden_size": 3}), {"": 14}, np)
    first = kernel.run(x, w, r)[0].copy()
    np.testing.assert_array_equal(kernel.run(x, w, r)[0], first)
    assert len(packs) == 1


def test_a_constant_w_is_packed_once_and_a_writable_one_every_call(monkeypatch):
    """The input projection's weight (X @ W^T for every step, one GEMM) is packed once where W cannot
    change, kept with W itself (the transposed view is made anew each call), with the bits of the unpacked call."""
    from rtd.kernels.native import gemm
    case = dict(seq=3, batch=2, hidden=4, size=5, direction="bidirectional", dirs=2, bias=False, initial=False, seed=5)
    x, w, r, _, _ = arrays(case, 3)
    packs = []
    original = gemm._pack
    monkeypatch.setattr(gemm, "_pack", lambda *a: packs.append(1) or original(*a))
    kernel = make_kernel(Node("GRU", "", [], ["y"], {"hidden_size": 4, "direction": "bidirectional"}), {"": 14}, np)
    unpacked = kernel.run(x, w, r)[0].copy()
    assert packs == []   # a writable W may change between calls: never kept
    w.flags.writeable = False
    for _ in range(3):
        np.testing.assert_array_equal(kernel.run(x, w, r)[0], unpacked)
    assert len(packs) == 1


def test_the_8bit_projected_inputs_check_the_lengths_and_reverse_in_time():
    ffi, lib = native.compiled.ffi, native.compiled.lib
    seq, batch, dirs, g = 3, 2, 2, 8
    sums = np.arange(dirs * seq * batch * g, dtype=np.int32).reshape(dirs, seq * batch, g)
    w_scale, bias = np.full((dirs, g), 0.5, np.float32), np.ones((dirs, g), np.float32)
    xw = np.empty((seq, dirs, g, batch), np.float32)
    assert recurrent.lstm_q8_inputs(sums, np.float32(2), w_scale, bias, 0b10, xw)
    steps = sums.reshape(dirs, seq, batch, g).astype(np.float32) + 1   # times 2 * 0.5, plus 1
    np.testing.assert_array_equal(xw[:, 0], steps[0].transpose(0, 2, 1))
    np.testing.assert_array_equal(xw[:, 1], steps[1, ::-1].transpose(0, 2, 1))   # bit 1: the second direction reversed

    def call(sums_len=sums.size, w_scale_len=w_scale.size, bias_len=bias.size, xw_len=xw.size, reversed=0, dirs=dirs):
        return lib.rtd_lstm_q8_inputs(ffi.from_buffer("int32_t[]", sums), sums_len, 1.0, ffi.from_buffer("float[]", w_scale),
                                      w_scale_len, ffi.from_buffer("float[]", bias), bias_len, reversed,
                                      ffi.from_buffer("float[]", xw, require_writable=True), xw_len, seq, batch, dirs, g)
    assert call() == 0
    for wrong in ({"sums_len": sums.size - 1}, {"w_scale_len": w_scale.size - 1}, {"bias_len": bias.size - 1},
                  {"xw_len": xw.size - 1}, {"reversed": 4}, {"dirs": 3}):
        assert call(**wrong) != 0, wrong
