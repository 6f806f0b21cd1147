"""The compiled element-wise chain interpreter (kernels/native/chain.c): random chains of the
interpreter's ops (the transcendental ones through the activations' shared code) over full-size,
scalar and broadcast inputs (a broadcast axis between two spanned ones included) equal the same chain
run link by link through rtd's own op kernels (NaN and infinities included), chains it has no loop for
are left to NumPy, and the C checks the program and lengths itself."""
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rtd.kernels import native
from rtd.kernels.fused import ElementwiseChain
from rtd.kernels.ir import Node
from rtd.kernels.native.chain import OPCODES, Program

pytestmark = pytest.mark.skipif(native.compiled is None, reason="rtd was installed without its compiled kernels")

UNARY = ["Relu", "LeakyRelu", "HardSigmoid", "HardSwish", "Neg", "Abs", "Sigmoid", "Tanh", "Exp", "Erf", "Gelu", "Sqrt"]
BINARY = ["Add", "Sub", "Mul", "Div", "Max", "Min"]
OUT_SHAPE = (2, 3, 20, 21)   # past chain.MIN_ELEMENTS, where the compiled path takes over
BROADCASTS = [OUT_SHAPE, (), (1,), (3, 1, 1), (1, 3, 1, 1), (21,), (20, 21), (2, 3, 1, 1), (3, 20, 1),
              (3, 20, 21), (3, 1, 21), (2, 1, 20, 21), (2, 1, 20, 1), (2, 3, 1, 21)]   # the last four: two planes


@st.composite
def chains(draw):
    """(links, input shapes): link 0 reads inputs; later links read the previous result and inputs."""
    shapes = [OUT_SHAPE]
    links = []
    for position in range(draw(st.integers(2, 6))):
        op = draw(st.sampled_from(UNARY + BINARY + ["Clip"]))
        attrs = {}
        if op == "LeakyRelu":
            attrs["alpha"] = draw(st.sampled_from([0.01, 0.3, 2.0]))
        if op == "HardSigmoid":
            attrs = {"alpha": draw(st.sampled_from([0.2, 1 / 6])), "beta": 0.5}
        if op == "Gelu":
            attrs = {"approximate": draw(st.sampled_from(["none", "tanh"]))}
        first = 0 if position == 0 else -1
        if op in UNARY:
            spec = [first]
        else:
            others = []
            for _ in range(2 if op == "Clip" else 1):
                if op == "Clip" and draw(st.booleans()):
                    others.append(None)   # an absent limit
                    continue
                shapes.append(draw(st.sampled_from(BROADCASTS[1:3] if op == "Clip" else BROADCASTS)))
                others.append(len(shapes) - 1)
            spec = [first] + others
            if op != "Clip" and draw(st.booleans()):
                spec = spec[::-1]   # the previous result as the second operand
        links.append((Node(op, "", [], [], attrs), spec))
    return links, shapes


@settings(max_examples=300, deadline=None)
@given(chains(), st.integers(0, 2**31 - 1), st.booleans())
def test_compiled_chain_equals_the_numpy_links(chain, seed, special_values):
    links, shapes = chain
    rng = np.random.default_rng(seed)
    inputs = [rng.standard_normal(s).astype(np.float32) * 4 for s in shapes]
    if special_values:
        inputs[0].reshape(-1)[:5] = [np.nan, np.inf, -np.inf, 0.0, -0.0]
    kernel = ElementwiseChain({"links": links, "shape": OUT_SHAPE, "dtype": np.dtype(np.float32)}, np,
                              lambda node: _make(node))
    assert kernel.compiled is not None
    got = kernel.run(*inputs, np.empty(OUT_SHAPE, np.float32), np.empty(OUT_SHAPE, np.float32))[0]
    kernel.compiled = None   # the same kernel, link by link through the NumPy ops
    want = kernel.run(*inputs, np.empty(OUT_SHAPE, np.float32), np.empty(OUT_SHAPE, np.float32))[0]
    np.testing.assert_array_equal(got, want)   # bit for bit: a traced run uses the NumPy links


def _make(node):
    from rtd.kernels.graph import make_kernel
    return make_kernel(node, {"": 21}, np)


def test_chains_without_a_compiled_loop_are_left_to_numpy():
    log = [(Node("Log", "", [], [], {}), [0]), (Node("Mul", "", [], [], {}), [0, -1])]
    assert Program.build(log, 1, np.float32) is None              # no loop for Log
    relu_add = [(Node("Add", "", [], [], {}), [0, 1]), (Node("Relu", "", [], [], {}), [-1])]
    assert Program.build(relu_add, 2, np.float64) is None         # float32 only
    assert Program.build(relu_add, 2, np.float32) is not None
    program = Program.build(relu_add, 2, np.float32)
    out = np.empty((64, 48), np.float32)
    assert program([np.ones((64, 48), np.float32), np.ones(48, np.float32)], out) is out
    assert program([np.ones((64, 48), np.float32), np.ones((64, 1, 48), np.float32)], out) is None   # not a broadcast of out
    cube = np.empty((8, 6, 8, 10, 3), np.float32)   # three spanned blocks apart: more levels than chain.h's two
    assert program([np.ones((8, 1, 8, 1, 3), np.float32), np.ones((1, 6, 1, 10, 1), np.float32)], cube) is None
    assert program([np.ones((64, 48), np.float64), np.ones(48, np.float32)], out) is None
    wide = np.ones((64, 96), np.float32)
    assert program([wide[:, ::2], np.ones(48, np.float32)], out) is None   # a strided full-size operand
    small = np.empty((4, 6), np.float32)   # under MIN_ELEMENTS NumPy's few calls cost less than the wrapper
    assert program([np.ones((4, 6), np.float32), np.ones(6, np.float32)], small) is None
    assert set(OPCODES) == set(UNARY + BINARY + ["Clip"])


def test_the_c_boundary_checks_the_program_and_lengths():
    ffi, lib = native.compiled.ffi, native.compiled.lib
    x, out = np.ones(8, np.float32), np.empty(8, np.float32)

    def call(links, layout=(8, 1, 1, 1), params=(0.0, 0.0)):
        return lib.rtd_chain_f32([ffi.from_buffer("float[]", x)], list(layout), 1,
                                 ffi.from_buffer("int32_t[]", np.array(links, np.int32)),
                                 ffi.from_buffer("float[]", np.array(params, np.float32)), len(params) // 2,
                                 ffi.from_buffer("float[]", out, require_writable=True), out.size)
    assert call([7, 0, -2, -2]) == 0                  # Relu of input 0
    assert call([7, -1, -2, -2]) != 0                 # the first link reads a previous result
    assert call([7, 1, -2, -2]) != 0                  # an input that does not exist
    assert call([99, 0, -2, -2]) != 0                 # an unknown opcode
    assert call([7, 0, -2, -2], layout=(9, 1, 1, 1)) != 0    # an input longer than the output
    assert call([7, 0, -2, -2], layout=(2, 1, 2, 4)) == 0    # two planes of two
    assert call([7, 0, -2, -2], layout=(4, 1, 3, 4)) != 0    # planes past the output's length
    assert call([7, 0, -2, -2], layout=(2, 1, 2**62, 1)) != 0   # len * planes would overflow
    assert call([7, 0, -2, -2], layout=(2, 0, 1, 1)) != 0    # no inner
    assert call([7, 0, -2, -2], layout=(2, 1, 2, 0)) != 0    # no stride


def test_threads_share_the_blocks_and_change_no_bit(native_threads):
    links = [(Node("Add", "", [], [], {}), [0, 1]), (Node("Clip", "", [], [], {}), [-1, 2, 3]),
             (Node("Mul", "", [], [], {}), [0, -1]), (Node("Div", "", [], [], {}), [-1, 4])]
    program = Program.build(links, 5, np.float32)
    rng = np.random.default_rng(8)
    x = rng.standard_normal((4, 64, 40, 40), dtype=np.float32) * 4   # 409600 elements: worth two threads
    inputs = [x, np.float32([3]), np.float32(0), np.float32(6), rng.standard_normal((64, 1, 1), dtype=np.float32)]
    results = {}
    for threads in (1, 2):
        native_threads(threads)
        results[threads] = program(inputs, np.empty_like(x)).copy()
    np.testing.assert_array_equal(results[1], results[2])
    np.testing.assert_array_equal(results[1], x * np.clip(x + 3, 0, 6) / inputs[4])


@pytest.mark.parametrize("shapes", [[(1, 96, 1, 512), (1, 1, 96, 512)], [(7, 1, 5, 6, 1), (1, 4, 5, 6, 3)],
                                    [(6, 1, 700), (1, 5, 1)], [(6, 1, 700), (6, 5, 700)]])
def test_an_inner_broadcast_runs_compiled_and_equals_numpy_broadcasting(shapes):
    """An additive attention's Add + Tanh (tashkeel's (1, 96, 1, 512) + (1, 1, 96, 512)) and inputs whose
    broadcast axes sit between spanned ones: the compiled call is taken and gives NumPy's broadcasting."""
    links = [(Node("Add", "", [], [], {}), [0, 1]), (Node("Tanh", "", [], [], {}), [-1])]
    program = Program.build(links, 2, np.float32)
    rng = np.random.default_rng(3)
    a, b = (rng.standard_normal(s, dtype=np.float32) * 3 for s in shapes)
    out = np.empty(np.broadcast_shapes(a.shape, b.shape), np.float32)
    assert program([a, b], out) is out
    want = native.activation.activation(native.activation.TANH, np.add(a, b))   # the Tanh op's own kernel
    np.testing.assert_array_equal(out, want)
