"""Every lowering pass, checked as a property: the optimised plan computes the same function as
the unoptimised interpreter (`optimize=False`) on random shapes and values, and the pass fired.
"""
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from onnx import TensorProto, helper

from rtd.kernels import compile_model

from kernel_graphs import F, const, model, node

SETTINGS = settings(max_examples=12, deadline=None)
dim = st.integers(1, 6)


def check(m, feeds, rtol=1e-5, atol=1e-5) -> dict:
    """Run optimised and unoptimised; return the optimised plan's op counts."""
    want = compile_model(m, optimize=False).run(feeds)
    fast = compile_model(m)
    for _ in range(2):  # the traced first run and the cached plan's run
        got = fast.run(feeds)
        for name, value in want.items():
            np.testing.assert_allclose(got[name], value, rtol=rtol, atol=atol)
            assert got[name].dtype == value.dtype and got[name].shape == value.shape
    return fast.plan_stats(feeds)["ops"]


def rand(seed, *shape):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


@SETTINGS
@given(b=dim, s=dim, h=st.integers(2, 9), seed=st.integers(0, 2**16), affine=st.booleans())
def test_layernorm_pattern(b, s, h, seed, affine):
    nodes = [node("ReduceMean", ["x"], ["m"], axes=[-1]), node("Sub", ["x", "m"], ["d"]),
             node("Pow", ["d", "two"], ["p"]), node("ReduceMean", ["p"], ["v"], axes=[-1]),
             node("Add", ["v", "eps"], ["ve"]), node("Sqrt", ["ve"], ["sd"]), node("Div", ["d", "sd"], ["n"])]
    inits = [const("two", np.float32(2)), const("eps", np.float32(1e-5))]
    out = "n"
    if affine:
        nodes += [node("Mul", ["n", "g"], ["ng"]), node("Add", ["ng", "beta"], ["y"])]
        inits += [const("g", rand(seed + 1, h)), const("beta", rand(seed + 2, h))]
        out = "y"
    ops = check(model(nodes, [("x", [b, s, h])], [(out, None)], inits), {"x": rand(seed, b, s, h)}, rtol=1e-4, atol=1e-4)
    assert ops == {"LayerNorm": 1}


@SETTINGS
@given(b=dim, n=st.integers(1, 12), seed=st.integers(0, 2**16), shifted=st.booleans())
def test_softmax_pattern(b, n, seed, shifted):
    nodes = [node("ReduceMax", ["x", "axes"], ["mx"]), node("Sub", ["x", "mx"], ["z"])] if shifted else []
    nodes += [node("Exp", ["z" if shifted else "x"], ["e"]), node("ReduceSum", ["e", "axes"], ["t"]), node("Div", ["e", "t"], ["y"])]
    m = model(nodes, [("x", [b, n])], [("y", None)], [const("axes", np.array([-1], np.int64))], opset=18)
    assert check(m, {"x": rand(seed, b, n) * 4}) == {"Softmax": 1}


@SETTINGS
@given(shape=st.lists(dim, min_size=1, max_size=3), seed=st.integers(0, 2**16), half_first=st.booleans(), mul_form=st.booleans())
def test_gelu_erf_pattern(shape, seed, half_first, mul_form):
    scale = [node("Mul", ["x", "rs2"], ["xs"])] if mul_form else [node("Div", ["x", "s2"], ["xs"])]
    nodes = scale + [node("Erf", ["xs"], ["e"]), node("Add", ["e", "one"], ["e1"])]
    if half_first:
        nodes += [node("Mul", ["x", "half"], ["xh"]), node("Mul", ["xh", "e1"], ["y"])]
    else:
        nodes += [node("Mul", ["x", "e1"], ["xe"]), node("Mul", ["xe", "half"], ["y"])]
    inits = [const("s2", np.float32(math.sqrt(2))), const("rs2", np.float32(1 / math.sqrt(2))),
             const("one", np.float32(1)), const("half", np.float32(0.5))]
    # bit-equal, not merely close: a requantizing consumer must see the interpreter's values (test_gelu_before_dynamic_quantize_...)
    assert check(model(nodes, [("x", shape)], [("y", None)], inits), {"x": rand(seed, *shape) * 3}, rtol=0, atol=0) == {"Gelu": 1}


@pytest.mark.parametrize("op, factor", [("Div", math.sqrt(2)), ("Mul", 1 / math.sqrt(2)), ("Div", 1.4142), ("Mul", 0.7071)])
def test_fused_gelu_scales_erf_argument_as_its_graph_does(op, factor):
    """The graph's own step and constant (a rounded one too: the pass accepts 1.4142), over a dense grid."""
    nodes = [node(op, ["x", "k"], ["xs"]), node("Erf", ["xs"], ["e"]), node("Add", ["e", "one"], ["e1"]),
             node("Mul", ["x", "e1"], ["xe"]), node("Mul", ["xe", "half"], ["y"])]
    inits = [const("k", np.float32(factor)), const("one", np.float32(1)), const("half", np.float32(0.5))]
    feeds = {"x": np.linspace(-8, 8, 20001, dtype=np.float32)}
    assert check(model(nodes, [("x", [20001])], [("y", None)], inits), feeds, rtol=0, atol=0) == {"Gelu": 1}


def test_gelu_before_dynamic_quantize_requantizes_as_the_interpreter():
    """minilm_qdyn's FFN: Div(x, √2)/Erf/Add/Mul/Mul, then DynamicQuantizeLinear. The fused GELU
    once computed x·(1/√2) for the graph's x/√2, one bit off for 1.298813: 1.17282283 against
    the graph's 1.17282295, which over the scale 14.588772/255 is 20.5 against 20.500002, so the quantized
    value was 20 against the interpreter's 21 (and the MiniLM's outputs moved by 5e-2)."""
    nodes = [node("Div", ["x", "s2"], ["xs"]), node("Erf", ["xs"], ["e"]), node("Add", ["e", "one"], ["e1"]),
             node("Mul", ["x", "e1"], ["xe"]), node("Mul", ["xe", "half"], ["g"]), node("DynamicQuantizeLinear", ["g"], ["q", "s", "z"])]
    inits = [const("s2", np.float32(math.sqrt(2))), const("one", np.float32(1)), const("half", np.float32(0.5))]
    outputs = [helper.make_tensor_value_info(name, t, None) for name, t in (("q", TensorProto.UINT8), ("s", F), ("z", TensorProto.UINT8))]
    feeds = {"x": np.array([1.298813, 14.588772], np.float32)}  # gelu(14.588772) is itself: the range's top
    assert check(model(nodes, [("x", [2])], outputs, inits), feeds, rtol=0, atol=0) == {"Gelu": 1, "DynamicQuantizeLinear": 1}


@SETTINGS
@given(shape=st.lists(dim, min_size=1, max_size=3), seed=st.integers(0, 2**16))
def test_gelu_tanh_pattern(shape, seed):
    nodes = [node("Pow", ["x", "three"], ["x3"]), node("Mul", ["x3", "c"], ["x3c"]), node("Add", ["x", "x3c"], ["inner"]),
             node("Mul", ["inner", "k"], ["ik"]), node("Tanh", ["ik"], ["t"]), node("Add", ["t", "one"], ["t1"]),
             node("Mul", ["x", "t1"], ["xt"]), node("Mul", ["xt", "half"], ["y"])]
    inits = [const("three", np.float32(3)), const("c", np.float32(0.044715)), const("k", np.float32(math.sqrt(2 / math.pi))),
             const("one", np.float32(1)), const("half", np.float32(0.5))]
    assert check(model(nodes, [("x", shape)], [("y", None)], inits), {"x": rand(seed, *shape) * 3}) == {"Gelu": 1}


def attention_model(b, h, s, d, masked, div):
    scale = node("Div", ["qk", "scale"], ["sc"]) if div else node("Mul", ["qk", "scale"], ["sc"])
    nodes = [node("Transpose", ["k"], ["kt"], perm=[0, 1, 3, 2]), node("MatMul", ["q", "kt"], ["qk"]), scale]
    nodes += [node("Add", ["sc", "mask"], ["sm"]), node("Softmax", ["sm"], ["p"], axis=-1)] if masked else [node("Softmax", ["sc"], ["p"], axis=-1)]
    nodes += [node("MatMul", ["p", "v"], ["y"])]
    inputs = [("q", [b, h, s, d]), ("k", [b, h, s, d]), ("v", [b, h, s, d])] + ([("mask", [b, 1, 1, s])] if masked else [])
    factor = math.sqrt(d) if div else 1 / math.sqrt(d)
    return model(nodes, inputs, [("y", None)], [const("scale", np.float32(factor))]), inputs


@SETTINGS
@given(b=dim, h=st.integers(1, 3), s=dim, d=st.integers(1, 8), seed=st.integers(0, 2**16), masked=st.booleans(), div=st.booleans())
def test_attention_pattern(b, h, s, d, seed, masked, div):
    m, inputs = attention_model(b, h, s, d, masked, div)
    feeds = {name: rand(seed + i, *shape) for i, (name, shape) in enumerate(inputs)}
    if masked:
        feeds["mask"] = np.where(feeds["mask"] > 0.5, -1e4, 0).astype(np.float32)
    ops = check(m, feeds)
    assert ops.get("Attention") == 1 and "Softmax" not in ops


def test_attention_with_a_fully_masked_row_matches_the_interpreter():
    """The fused Attention normalizes its scores in place, trying exp without the row-max shift
    first: rows whose every score is masked to float32's minimum (every term underflows) must
    still come out uniform, as the unfused Softmax makes them."""
    m, inputs = attention_model(2, 2, 5, 4, masked=True, div=True)
    feeds = {name: rand(i, *shape) for i, (name, shape) in enumerate(inputs)}
    feeds["mask"] = np.zeros((2, 1, 1, 5), np.float32)
    feeds["mask"][0] = np.finfo(np.float32).min
    assert check(m, feeds).get("Attention") == 1


@SETTINGS
@given(b=dim, s=dim, k=st.integers(1, 16), n=st.integers(1, 16), seed=st.integers(0, 2**16),
       act=st.sampled_from([None, "Relu", "Gelu"]))
def test_matmul_bias_activation(b, s, k, n, seed, act):
    nodes = [node("MatMul", ["x", "w"], ["mm"]), node("Add", ["mm", "bias"], ["y" if act is None else "a"])]
    inits = [const("w", rand(seed + 1, k, n)), const("bias", rand(seed + 2, n))]
    if act == "Relu":
        nodes.append(node("Relu", ["a"], ["y"]))
    elif act == "Gelu":  # the Erf form, fused to Gelu first, then into the MatMulBias
        nodes += [node("Div", ["a", "s2"], ["as"]), node("Erf", ["as"], ["e"]), node("Add", ["e", "one"], ["e1"]),
                  node("Mul", ["a", "e1"], ["ae"]), node("Mul", ["ae", "half"], ["y"])]
        inits += [const("s2", np.float32(math.sqrt(2))), const("one", np.float32(1)), const("half", np.float32(0.5))]
    ops = check(model(nodes, [("x", [b, s, k])], [("y", None)], inits), {"x": rand(seed, b, s, k)}, rtol=1e-4, atol=1e-4)
    assert ops == {"MatMulBias": 1}


@SETTINGS
@given(n=st.integers(1, 2), c=st.integers(1, 4), m=st.integers(1, 5), hw=st.integers(3, 7), seed=st.integers(0, 2**16),
       bias=st.booleans())
def test_conv_batchnorm_folding(n, c, m, hw, seed, bias):
    conv_in = ["x", "w", "cb"] if bias else ["x", "w"]
    nodes = [node("Conv", conv_in, ["cv"], pads=[1, 1, 1, 1]), node("BatchNormalization", ["cv", "s", "b", "mu", "var"], ["y"], epsilon=1e-3)]
    rng = np.random.default_rng(seed)
    inits = [const("w", rand(seed + 1, m, c, 3, 3)), const("cb", rand(seed + 2, m)), const("s", rand(seed + 3, m)),
             const("b", rand(seed + 4, m)), const("mu", rand(seed + 5, m)), const("var", rng.uniform(0.5, 2, m).astype(np.float32))]
    ops = check(model(nodes, [("x", [n, c, hw, hw])], [("y", None)], inits), {"x": rand(seed, n, c, hw, hw)}, rtol=1e-4, atol=1e-4)
    assert ops == {"Conv": 1}


@SETTINGS
@given(n=st.integers(1, 2), c=st.integers(1, 4), m=st.integers(1, 5), hw=st.integers(3, 7), seed=st.integers(0, 2**16),
       pooled=st.booleans())
def test_batchnorm_after_an_activation_runs_as_a_per_channel_affine(n, c, m, hw, seed, pooled):
    """Conv, Relu, BatchNormalization (a Keras net's order: no fold into the weights): the normalization becomes
    a Mul and an Add per channel, run in the convolution's epilogue; after a MaxPool, an element-wise chain."""
    nodes = [node("Conv", ["x", "w"], ["cv"], pads=[1, 1, 1, 1]), node("Relu", ["cv"], ["r"])]
    if pooled:
        nodes.append(node("MaxPool", ["r"], ["p"], kernel_shape=[2, 2], strides=[1, 1]))
    nodes.append(node("BatchNormalization", ["p" if pooled else "r", "s", "b", "mu", "var"], ["y"], epsilon=1e-3))
    rng = np.random.default_rng(seed)
    inits = [const("w", rand(seed + 1, m, c, 3, 3)), const("s", rand(seed + 3, m)), const("b", rand(seed + 4, m)),
             const("mu", rand(seed + 5, m)), const("var", rng.uniform(0.5, 2, m).astype(np.float32))]
    ops = check(model(nodes, [("x", [n, c, hw, hw])], [("y", None)], inits), {"x": rand(seed, n, c, hw, hw)}, rtol=1e-4, atol=1e-4)
    assert ops == ({"ConvActivation": 1, "MaxPool": 1, "ElementwiseChain": 1} if pooled else {"ConvActivation": 1})


OPS = {"Add": 2, "Mul": 2, "Sub": 2, "Max": 2, "Relu": 1, "Sigmoid": 1, "Tanh": 1, "Neg": 1, "Abs": 1}


@SETTINGS
@given(a=dim, b=dim, chain=st.lists(st.sampled_from(sorted(OPS)), min_size=1, max_size=6), seed=st.integers(0, 2**16),
       bshape=st.sampled_from(["full", "row", "col", "scalar"]))
def test_elementwise_chains(a, b, chain, seed, bshape):
    other_shape = {"full": [a, b], "row": [1, b], "col": [a, 1], "scalar": []}[bshape]
    nodes, prev = [], "x"
    for i, op in enumerate(chain):
        args = [prev, "y"] if OPS[op] == 2 else [prev]
        nodes.append(node(op, args, [f"t{i}"]))
        prev = f"t{i}"
    m = model(nodes, [("x", [a, b]), ("y", other_shape)], [(prev, None)])
    ops = check(m, {"x": rand(seed, a, b), "y": rand(seed + 1, *other_shape)})
    assert ops == {"ElementwiseChain": 1}


@SETTINGS
@given(b=dim, s=dim, h=st.integers(1, 8), seed=st.integers(0, 2**16))
def test_shape_chain_folding(b, s, h, seed):
    """Shape → Gather → Unsqueeze → Concat → Reshape, as exporters emit it, folds per signature."""
    nodes = [node("Shape", ["x"], ["sh"]), node("Gather", ["sh", "zero"], ["b0"], axis=0), node("Unsqueeze", ["b0", "ax"], ["b1"]),
             node("Concat", ["b1", "rest"], ["target"], axis=0), node("Reshape", ["x", "target"], ["r"]),
             node("Identity", ["r"], ["ri"]), node("Dropout", ["ri"], ["rd"]), node("Relu", ["rd"], ["y"]),
             node("Neg", ["x"], ["unused"])]
    inits = [const("zero", np.array(0, np.int64)), const("ax", np.array([0], np.int64)), const("rest", np.array([-1], np.int64))]
    ops = check(model(nodes, [("x", ["B", "S", h])], [("y", None)], inits, opset=13), {"x": rand(seed, b, s, h)})
    assert set(ops) == {"Reshape", "ElementwiseChain"}


@SETTINGS
@given(m=st.integers(1, 9), k=st.integers(1, 12), n=st.integers(1, 12), seed=st.integers(0, 2**16), trans_b=st.booleans(),
       bias=st.sampled_from(["none", "vector", "row"]), relu=st.booleans())
def test_gemm_becomes_matmul_bias(m, k, n, seed, trans_b, bias, relu):
    inputs = ["x", "w"] + ([] if bias == "none" else ["c"])
    nodes = [node("Gemm", inputs, ["g"], transB=int(trans_b))] + ([node("Relu", ["g"], ["y"])] if relu else [])
    inits = [const("w", rand(seed + 1, *((n, k) if trans_b else (k, n))))]
    if bias != "none":
        inits.append(const("c", rand(seed + 2, *((n,) if bias == "vector" else (1, n)))))
    ops = check(model(nodes, [("x", [m, k])], [("y" if relu else "g", None)], inits), {"x": rand(seed, m, k)}, rtol=1e-4, atol=1e-4)
    assert ops == {"MatMulBias": 1}


@SETTINGS
@given(b=dim, s=dim, h=st.integers(2, 9), seed=st.integers(0, 2**16), with_bias=st.booleans())
def test_layernormalization_op_becomes_layernorm(b, s, h, seed, with_bias):
    inputs = ["x", "g", "beta"] if with_bias else ["x", "g"]
    nodes = [node("LayerNormalization", inputs, ["y"], axis=-1, epsilon=1e-5)]
    inits = [const("g", rand(seed + 1, h)), const("beta", rand(seed + 2, h))]
    ops = check(model(nodes, [("x", [b, s, h])], [("y", None)], inits), {"x": rand(seed, b, s, h)}, rtol=1e-4, atol=1e-4)
    assert ops == {"LayerNorm": 1}


@SETTINGS
@given(k=st.integers(1, 8), n=st.integers(1, 8), m=st.integers(1, 5), seed=st.integers(0, 2**16))
def test_constant_subgraphs_fold_at_compile(k, n, m, seed):
    """Weights stored transposed and scaled (Transpose, Mul of constants) fold into one constant (then the product's
    panels: a MatMul by a constant weight runs as a MatMulBias without a bias)."""
    nodes = [node("Transpose", ["wt"], ["w"], perm=[1, 0]), node("Mul", ["w", "s"], ["ws"]), node("MatMul", ["x", "ws"], ["y"])]
    inits = [const("wt", rand(seed + 1, n, k)), const("s", np.float32(0.5))]
    m_ = model(nodes, [("x", [m, k])], [("y", None)], inits)
    ops = check(m_, {"x": rand(seed, m, k)}, rtol=1e-5, atol=1e-5)
    assert ops == {"MatMulBias": 1}
    assert compile_model(m_).plan_stats({"x": rand(seed, m, k)})["nodes_in_model"] == 1


@settings(max_examples=6, deadline=None)
@given(sizes=st.lists(st.tuples(dim, st.integers(1, 3)), min_size=2, max_size=5), seed=st.integers(0, 2**16))
def test_one_model_many_signatures_each_planned_on_its_own(sizes, seed):
    """Relu(x[a,1]) + y[1,b] then Sigmoid: a chain when b == 1, broken by broadcasting otherwise."""
    nodes = [node("Relu", ["x"], ["r"]), node("Add", ["r", "y"], ["s"]), node("Sigmoid", ["s"], ["z"])]
    m = model(nodes, [("x", ["a", 1]), ("y", [1, "b"])], [("z", None)])
    fast, plain = compile_model(m), compile_model(m, optimize=False)
    for i, (a, b) in enumerate(sizes * 2):  # every signature twice: traced, then cached
        feeds = {"x": rand(seed + i, a, 1), "y": rand(seed + i + 1, 1, b)}
        np.testing.assert_allclose(fast.run(feeds)["z"], plain.run(feeds)["z"], rtol=1e-6)
        nodes_planned = sum(fast.plan_stats(feeds)["ops"].values())   # "steps" counts a native program as one
        assert nodes_planned == (1 if b == 1 else 2)
    assert len(fast._plans) == len(set(sizes))


@SETTINGS
@given(c=st.integers(1, 4), m=st.integers(1, 4), hw=st.integers(3, 7), seed=st.integers(0, 2**16),
       add=st.sampled_from(["none", "same", "left", "broadcast"]), relu=st.booleans())
def test_conv_activation_pattern(c, m, hw, seed, add, relu):
    """Conv then Add and/or Relu runs in place on the Conv's output; an addend that widens the
    result (batch 2 against the Conv's 1) cannot be added in place and must still be right."""
    relu = relu or add == "none"
    nodes, last, inputs = [node("Conv", ["x", "w", "b"], ["y"], pads=[1, 1, 1, 1])], "y", [("x", [1, c, hw, hw])]
    if add != "none":
        inputs.append(("o", [2 if add == "broadcast" else 1, m, hw, hw]))
        nodes.append(node("Add", ["o", "y"] if add == "left" else ["y", "o"], ["s"]))
        last = "s"
    if relu:
        nodes.append(node("Relu", [last], ["r"]))
        last = "r"
    inits = [const("w", rand(seed, m, c, 3, 3)), const("b", rand(seed + 1, m))]
    feeds = {name: rand(seed + 2 + i, *shape) for i, (name, shape) in enumerate(inputs)}
    assert check(model(nodes, inputs, [(last, None)], inits), feeds, rtol=1e-4, atol=1e-4) == {"ConvActivation": 1}


def test_a_shortcut_add_fed_by_two_convs_fuses_once():
    """ResNet's downsampling block: Add(conv_a, conv_b) → Relu. One Conv takes the Add and the
    Relu; the other stays a plain Conv feeding it."""
    nodes = [node("Conv", ["x", "wa"], ["a"], pads=[1, 1, 1, 1]), node("Conv", ["x", "wb"], ["b"]),
             node("Add", ["a", "b"], ["s"]), node("Relu", ["s"], ["r"])]
    inits = [const("wa", rand(1, 3, 2, 3, 3)), const("wb", rand(2, 3, 2, 1, 1))]
    ops = check(model(nodes, [("x", [1, 2, 5, 5])], [("r", None)], inits), {"x": rand(3, 1, 2, 5, 5)}, rtol=1e-4, atol=1e-4)
    assert ops == {"ConvActivation": 1, "Conv": 1}
