"""Element-wise, reduction and softmax kernels beyond the onnx node tests.

Each case builds a one-node ONNX model, runs it through rtd and through onnxruntime on the
same inputs (edge values included: NaN, inf, negative integers, ties), and compares. The
in-place contract of Elementwise (`out=` honoured, `out` may alias an input) is checked
directly on the kernels, and refusals are checked for their stable codes.
"""
import shutil
import subprocess
import types
from concurrent.futures import ThreadPoolExecutor

import ml_dtypes
import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import helper
from scipy import special

from rtd.errors import Code, RtdError
from rtd.kernels import compile_model
from rtd.kernels.ops import Elementwise, _erf, lookup

RNG = np.random.default_rng(7)
F32_EDGES = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, 1e-30, -3.5, 2.5, 88.0, -88.0], np.float32)


def _model(op, inputs, n_out=1, opset=21, **attrs):
    names = [f"in{i}" for i in range(len(inputs))]
    outs = [f"out{i}" for i in range(n_out)]
    node = helper.make_node(op, names, outs, **attrs)
    graph = helper.make_graph(
        [node], op,
        [helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(x.dtype), x.shape)
         for n, x in zip(names, inputs)],
        [helper.make_empty_tensor_value_info(o) for o in outs])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=10)
    return onnx.shape_inference.infer_shapes(model, strict_mode=True)  # fills in the output types


def _against_ort(op, inputs, n_out=1, opset=21, **attrs):
    proto = _model(op, inputs, n_out, opset, **attrs)
    feeds = {f"in{i}": x for i, x in enumerate(inputs)}
    ours = compile_model(proto.SerializeToString()).run(feeds)
    session = ort.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"])
    theirs = session.run(None, feeds)
    for i, expected in enumerate(theirs):
        got = ours[f"out{i}"]
        assert got.dtype == expected.dtype, (op, got.dtype, expected.dtype)
        assert got.shape == expected.shape, (op, got.shape, expected.shape)
        if expected.dtype.kind == "f":
            np.testing.assert_allclose(got, expected, rtol=2e-6, atol=1e-6, equal_nan=True, err_msg=op)
        else:
            np.testing.assert_array_equal(got, expected, err_msg=op)


def _ints(dtype, shape, low=-50, high=50):
    info = np.iinfo(dtype)
    return RNG.integers(max(low, info.min), min(high, info.max), size=shape, endpoint=True).astype(dtype)


UNARY_FLOAT = ["Abs", "Neg", "Ceil", "Floor", "Round", "Sign", "Exp", "Log", "Sqrt", "Reciprocal", "Sin", "Cos",
               "Tan", "Asin", "Acos", "Atan", "Sinh", "Cosh", "Tanh", "Asinh", "Acosh", "Atanh", "Erf", "Sigmoid",
               "Softplus", "Softsign", "Relu", "Elu", "Selu", "Celu", "HardSigmoid", "HardSwish", "Mish",
               "ThresholdedRelu", "IsNaN", "IsInf"]


@pytest.mark.parametrize("op", UNARY_FLOAT)
def test_unary_float_matches_onnxruntime(op):
    x = np.concatenate([RNG.standard_normal(50).astype(np.float32) * 4, F32_EDGES])
    with np.errstate(all="ignore"):
        _against_ort(op, [x.reshape(6, 10)], opset=18)


@pytest.mark.parametrize("approximate", ["none", "tanh"])
def test_gelu_matches_onnxruntime(approximate):
    x = RNG.standard_normal((4, 64)).astype(np.float32) * 3
    _against_ort("Gelu", [x], opset=20, approximate=approximate)


@pytest.mark.parametrize("op,attrs", [("LeakyRelu", {"alpha": 0.1}), ("LeakyRelu", {"alpha": 3.0}),
                                      ("LeakyRelu", {"alpha": -0.5}), ("Shrink", {"lambd": 1.0, "bias": 0.25}),
                                      ("Elu", {"alpha": 0.3}), ("Celu", {"alpha": 2.0})])
def test_activation_attributes_match_onnxruntime(op, attrs):
    _against_ort(op, [RNG.standard_normal((5, 7)).astype(np.float32) * 3], opset=18, **attrs)


@pytest.mark.parametrize("dtype", [np.int32, np.int64, np.int8])
def test_integer_div_truncates_and_mod_follows_sign_rules(dtype):
    a = _ints(dtype, (3, 40))
    b = _ints(dtype, (40,), 1, 9) * np.where(RNG.random(40) < 0.5, -1, 1).astype(dtype)
    _against_ort("Div", [a, b])
    _against_ort("Mod", [a, b], fmod=0)
    _against_ort("Mod", [a, b], fmod=1)


def test_float_mod_and_pow_dtype_rules():
    a = RNG.standard_normal((4, 9)).astype(np.float32) * 10
    b = RNG.standard_normal((9,)).astype(np.float32) * 3 + 0.5
    _against_ort("Mod", [a, b], fmod=1)
    _against_ort("Pow", [np.abs(a), b])
    _against_ort("Pow", [a, np.arange(9, dtype=np.int64) % 4])  # float base, int exponent
    _against_ort("Pow", [_ints(np.int64, (9,), -5, 5), np.arange(9, dtype=np.int64) % 4])
    _against_ort("Pow", [np.array([1, -1, 2, 1, 3], np.int32), np.array([-3, -2, -1, 0, 2], np.int32)])


@pytest.mark.parametrize("dtype", [np.uint8, np.uint16, np.uint32, np.uint64])
@pytest.mark.parametrize("direction", ["LEFT", "RIGHT"])
def test_bit_shift_on_unsigned(dtype, direction):
    x = _ints(dtype, (3, 8), 0, 255)
    y = _ints(dtype, (8,), 0, 7)
    _against_ort("BitShift", [x, y], direction=direction)


@pytest.mark.parametrize("op", ["Max", "Min", "Sum", "Mean"])
def test_variadic_broadcast_and_nan(op):
    a = RNG.standard_normal((2, 1, 5)).astype(np.float32)
    a[0, 0, 1] = np.nan
    b = RNG.standard_normal((3, 1)).astype(np.float32)
    c = RNG.standard_normal((5,)).astype(np.float32)
    _against_ort(op, [a, b, c])
    _against_ort(op, [a])


def test_clip_nan_and_limits():
    x = np.concatenate([RNG.standard_normal(20).astype(np.float32) * 5, F32_EDGES])
    _against_ort("Clip", [x, np.array(-1, np.float32), np.array(2, np.float32)], opset=13)
    _against_ort("Clip", [x], opset=13)
    _against_ort("Clip", [x], opset=6, min=-0.5, max=0.5)
    _against_ort("Clip", [_ints(np.int32, (20,)), np.array(-3, np.int32), np.array(4, np.int32)], opset=13)


def test_where_broadcasts_three_ways():
    cond = RNG.random((3, 1, 4)) < 0.5
    _against_ort("Where", [cond, RNG.standard_normal((2, 1)).astype(np.float32),
                           RNG.standard_normal((4,)).astype(np.float32)])


@pytest.mark.parametrize("op", ["Equal", "Greater", "GreaterOrEqual", "Less", "LessOrEqual"])
def test_comparisons(op):
    a = _ints(np.int32, (4, 6), -2, 2)
    _against_ort(op, [a, _ints(np.int32, (6,), -2, 2)])
    _against_ort(op, [a.astype(np.float32), np.float32(np.nan) * np.ones(6, np.float32)])


REDUCE = ["ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1", "ReduceL2",
          "ReduceSumSquare", "ReduceLogSum", "ReduceLogSumExp"]


@pytest.mark.parametrize("op", REDUCE)
@pytest.mark.parametrize("axes,keepdims", [([1], 1), ([0, -1], 0), ([-1], 1), ([2], 0), (None, 1), (None, 0)])
def test_reductions_with_axes_input_and_attribute(op, axes, keepdims):
    x = np.abs(RNG.standard_normal((3, 4, 5)).astype(np.float32)) + 0.1
    inputs = [x] + ([np.array(axes, np.int64)] if axes is not None else [])
    _against_ort(op, inputs, opset=18, keepdims=keepdims)
    _against_ort(op, [x], opset=11, keepdims=keepdims, **({"axes": axes} if axes is not None else {}))


def test_reduce_log_sum_exp_does_not_overflow():
    x = np.array([[1000.0, 1000.0], [-1000.0, -np.inf]], np.float32)
    _against_ort("ReduceLogSumExp", [x, np.array([1], np.int64)], opset=18)


@pytest.mark.parametrize("op", ["Softmax", "LogSoftmax", "Hardmax"])
@pytest.mark.parametrize("opset,axis", [(11, 1), (11, -1), (13, 1), (13, -1), (13, 0)])
@pytest.mark.parametrize("scale", [3, 30])  # Softmax skips the max shift when exp cannot overflow
def test_softmax_family_axis_rules(op, opset, axis, scale):
    x = RNG.standard_normal((2, 3, 4)).astype(np.float32) * scale
    x[0, 0, :2] = x[0, 0, 2]  # Hardmax ties resolve to the first index
    _against_ort(op, [x], opset=opset, axis=axis)


@pytest.mark.parametrize("op", ["Softmax", "LogSoftmax"])
def test_softmax_with_masked_entries(op):
    x = RNG.standard_normal((2, 4, 6)).astype(np.float32)
    x[:, :, 4:] = -np.inf
    x[0, 0, 0] = 1000.0
    _against_ort(op, [x], opset=13, axis=-1)


@pytest.mark.parametrize("op", ["ArgMax", "ArgMin"])
@pytest.mark.parametrize("last", [0, 1])
def test_arg_extreme_ties(op, last):
    x = _ints(np.int32, (4, 6), -2, 2)
    _against_ort(op, [x], axis=1, keepdims=0, select_last_index=last)


@pytest.mark.parametrize("shape,axis", [((3, 5), 1), ((3, 5), 0), ((4, 300), 0), ((2, 5, 300), -2)])
@pytest.mark.parametrize("exclusive,reverse", [(0, 0), (1, 0), (0, 1), (1, 1)])
def test_cumulative(shape, axis, exclusive, reverse):  # small shapes accumulate, wide ones loop slices
    x = RNG.standard_normal(shape).astype(np.float32)
    _against_ort("CumSum", [x, np.array(axis, np.int64)], exclusive=exclusive, reverse=reverse)
    _against_ort("CumSum", [_ints(np.int32, shape), np.array(axis, np.int32)], exclusive=exclusive, reverse=reverse)


@pytest.mark.parametrize("largest", [0, 1])
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int64, np.int32, np.int8, np.uint8])
@pytest.mark.parametrize("k", [1, 5, 12])
def test_top_k_stable_ties(largest, dtype, k):  # packed int64 codes for <= 32-bit types, argsort else
    x = _ints(np.int64, (3, 12), -3, 3).astype(dtype)
    if dtype == np.uint8:
        x = x + np.uint8(3)
    _against_ort("TopK", [x, np.array([k], np.int64)], n_out=2, axis=1, largest=largest)
    _against_ort("TopK", [x, np.array([min(k, 3)], np.int64)], n_out=2, axis=0, largest=largest)


def test_top_k_float_extremes_and_signed_zero():
    x = np.float32([[0.0, -0.0, 3.0, -np.inf, np.inf, 1e-38, -1e-38, 2.0, -0.0, 0.0]])
    for largest in (0, 1):
        _against_ort("TopK", [x, np.array([7], np.int64)], n_out=2, axis=1, largest=largest)


def _elementwise_kernels():
    """Every claimed unary float Elementwise kernel of this module's ops, at its newest version."""
    for op in UNARY_FLOAT + ["Gelu", "Swish", "LeakyRelu", "Shrink"]:
        cls = lookup("", op, 24)
        if issubclass(cls, Elementwise):
            yield pytest.param(cls, id=op)


@pytest.mark.parametrize("cls", list(_elementwise_kernels()))
def test_elementwise_honours_out_and_aliasing(cls):
    kernel = cls({})
    x = RNG.standard_normal((8, 33)).astype(np.float32) * 3
    with np.errstate(all="ignore"):
        expected = kernel.compute(x.copy())
        out = np.empty_like(expected)
        assert kernel.compute(x.copy(), out=out) is out
        np.testing.assert_array_equal(out, expected)
        if expected.dtype == x.dtype:  # the fuser may hand the input back as the output
            alias = x.copy()
            assert kernel.compute(alias, out=alias) is alias
            np.testing.assert_array_equal(alias, expected)


def test_binary_elementwise_aliasing_either_operand():
    a = _ints(np.int32, (5, 7))
    b = _ints(np.int32, (5, 7), 1, 9)
    for op in ["Div", "Mod", "Pow", "Sub", "PRelu", "Max", "Sum"]:
        kernel = lookup("", op, 21)({})
        expected = kernel.compute(a.copy(), b.copy())
        for side in (0, 1):
            args = [a.copy(), b.copy()]
            assert kernel.compute(*args, out=args[side]) is args[side]
            np.testing.assert_array_equal(args[side], expected, err_msg=f"{op} out=input {side}")


def test_refusals_carry_codes():
    with pytest.raises(RtdError) as e:
        lookup("", "BitShift", 11)({"direction": "UP"})
    assert e.value.code is Code.E_MODEL_INVALID
    with pytest.raises(RtdError) as e:
        lookup("", "Relu", 14)({"alpha": 1.0})
    assert e.value.code is Code.E_OP_UNSUPPORTED
    with pytest.raises(RtdError) as e:
        lookup("", "TopK", 11)({}).run(np.zeros((2, 3), np.float32), np.array([4], np.int64))
    assert e.value.code is Code.E_INPUT_INVALID
    with pytest.raises(RtdError) as e:
        lookup("", "ReduceSum", 13)({}).run(np.zeros((2, 3), np.float32), np.array([2], np.int64))
    assert e.value.code is Code.E_MODEL_INVALID


def test_float32_erf_is_accurate_everywhere():
    x = np.concatenate([np.linspace(-6, 6, 400_001, dtype=np.float32), RNG.standard_normal(100_000).astype(np.float32),
                        np.float32([0, -0.0, 1e-38, 1e-30, -1e-8, 3.95, 4.0, 1e30, -1e30])])
    exact = special.erf(x.astype(np.float64))
    got = lookup("", "Erf", 13)({}).compute(x)
    assert got.dtype == np.float32
    np.testing.assert_allclose(got, exact, rtol=4e-7, atol=2e-7)
    edges = lookup("", "Erf", 13)({}).compute(np.float32([np.inf, -np.inf, np.nan]))
    np.testing.assert_array_equal(edges[:2], [1, -1])
    assert np.isnan(edges[2])


@pytest.mark.parametrize("op,attrs,exact", [
    ("Erf", {}, special.erf),
    ("Gelu", {}, lambda x: 0.5 * x * (1 + special.erf(x / np.sqrt(2)))),
    ("Gelu", {"approximate": "tanh"}, lambda x: 0.5 * x * (1 + np.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x**3)))),
    ("Sigmoid", {}, lambda x: 1 / (1 + np.exp(-x))),
    ("Swish", {"alpha": 1.5}, lambda x: x / (1 + np.exp(-1.5 * x)))])
def test_blocked_kernels_on_large_arrays_in_place(op, attrs, exact):
    kernel = lookup("", op, 24)(attrs)
    x = RNG.standard_normal((3, 50_001)).astype(np.float32) * 4  # several blocks plus a ragged tail
    with np.errstate(over="ignore"):
        want = exact(x.astype(np.float64))
    got = kernel.compute(x)
    # float32 rounding of erf near -1 leaves |x| * 1e-7 in 0.5x(1+erf) for negative x (in any erf)
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=2e-6)
    alias = x.copy()
    assert kernel.compute(alias, out=alias) is alias
    np.testing.assert_array_equal(alias, got)


@pytest.mark.parametrize("op", UNARY_FLOAT + ["Gelu", "Swish", "LeakyRelu", "Shrink", "Div", "Pow", "Mod",
                                               "Softmax", "TopK"])
def test_bfloat16_keeps_its_type(op):  # bfloat16 is dtype kind "V" and promotes with Python floats
    kernel = lookup("", op, 24)({"fmod": 1} if op == "Mod" else {})
    bf16 = ml_dtypes.bfloat16
    x = RNG.standard_normal((4, 8)).astype(bf16)
    y = (np.abs(RNG.standard_normal((4, 8))) + 0.5).astype(bf16)
    args = {"Div": [x, y], "Pow": [y, x], "Mod": [x, y], "TopK": [x, np.array([3], np.int64)]}.get(op, [x])
    with np.errstate(all="ignore"):  # the same bfloat16 values, computed in float32 and rounded
        want = kernel.run(*[a.astype(np.float32) if a.dtype == bf16 else a for a in args])
        got = kernel.run(*args)
    for w, g in zip(want, got):
        assert g.dtype == (bf16 if w.dtype == np.float32 else w.dtype), op
        np.testing.assert_allclose(g.astype(np.float32), w, rtol=2e-2, atol=1e-2, equal_nan=True, err_msg=op)


@pytest.mark.parametrize("op", ["Softmax", "LogSoftmax"])
@pytest.mark.parametrize("scale", [1, 40])  # unshifted and max-shifted exp
@pytest.mark.parametrize("shape,axis", [((3, 300, 128), -1), ((70_000,), 0), ((2, 9000, 3), 1)])
def test_softmax_blocked_rows_match_onnxruntime(op, scale, shape, axis):
    x = RNG.standard_normal(shape).astype(np.float32) * scale
    _against_ort(op, [x], opset=13, axis=axis)


def test_kernels_keep_no_per_call_state_across_threads():
    """One kernel instance serves concurrent runs (model.run is thread-safe): inputs needing and
    not needing Softmax's max shift, run at once, each get their own answer."""
    kernel = lookup("", "Softmax", 13)({})
    inputs = [RNG.standard_normal((64, 512)).astype(np.float32) * (1 if i % 2 else 300) for i in range(16)]
    expected = [kernel.run(x)[0] for x in inputs]
    with ThreadPoolExecutor(4) as pool:
        for _ in range(5):
            for got, want in zip(pool.map(lambda x: kernel.run(x)[0], inputs), expected):
                np.testing.assert_array_equal(got, want)


def _cuda_cases():
    """(label, kernel, input arrays) for every element-wise kernel here that offers a `cuda` form."""
    x = np.concatenate([RNG.standard_normal(40) * 3, [0.0, -0.0, 0.5, -0.5, 2.5, 1.0, -1.0]]).astype(np.float32)
    unit = np.tanh(x).astype(np.float32) * np.float32(0.99)  # inside (-1, 1) for asin/atanh
    positive = (np.abs(x) + 1).astype(np.float32)
    flags = RNG.random((3, x.size)) < 0.5
    ints = _ints(np.int32, (2, x.size), -20, 20)
    inputs = {"Acos": [unit], "Asin": [unit], "Atanh": [unit], "Acosh": [positive], "Log": [positive],
              "Sqrt": [positive], "Reciprocal": [positive], "Div": [x, positive], "Pow": [positive, x],
              "PRelu": [x, unit], "Where": [flags[0], x, positive], "Clip": [x, -unit * 2, positive],
              "And": list(flags[:2]), "Or": list(flags[:2]), "Xor": list(flags[:2]), "Not": [flags[0]],
              "BitwiseAnd": list(ints), "BitwiseOr": list(ints), "BitwiseXor": list(ints), "BitwiseNot": [ints[0]],
              "BitShift": [np.abs(ints[0]).astype(np.uint32), (np.abs(ints[1]) % 8).astype(np.uint32)]}
    binary = {"Add", "Sub", "Mul", "Equal", "Greater", "GreaterOrEqual", "Less", "LessOrEqual", "Mod"}
    attrs = {"Mod": {"fmod": 1}, "BitShift": {"direction": "LEFT"}, "Elu": {"alpha": 0.7}, "Celu": {"alpha": 1.5},
             "LeakyRelu": {"alpha": 0.2}, "Swish": {"alpha": 1.3}, "HardSigmoid": {"alpha": 0.3, "beta": 0.4},
             "ThresholdedRelu": {"alpha": 0.5}, "Shrink": {"lambd": 0.6, "bias": 0.2}, "Gelu": {"approximate": "tanh"},
             "IsInf": {"detect_negative": 0}}
    ops = sorted(set(UNARY_FLOAT) | binary | set(inputs) | set(attrs) | {"Gelu", "Swish", "Mish"})
    for op in ops:
        kernel = lookup("", op, 24)(attrs.get(op, {}))
        if isinstance(kernel, Elementwise) and kernel.cuda:
            yield op, kernel, inputs.get(op, [x, positive] if op in binary else [x])


def _c_literals(a):
    return a.astype(float if a.dtype.kind == "f" else int).tolist()


def test_cuda_expressions_compute_what_the_kernels_compute(tmp_path):
    """Each `cuda` string, compiled as C++ over the same inputs, matches the NumPy kernel: the GPU
    fuser can trust them without a GPU here (CUDA's math functions have the same names)."""
    if shutil.which("g++") is None:
        pytest.skip("g++ not installed: cannot compile the CUDA C expressions on the host")
    ctype = {np.dtype(np.float32): "float", np.dtype(bool): "bool", np.dtype(np.int32): "int",
             np.dtype(np.uint32): "unsigned"}
    cases = list(_cuda_cases())
    body = []
    for k, (_op, kernel, args) in enumerate(cases):
        arrays = "".join(f"static const {ctype[a.dtype]} a{k}_{i}[] = {{{', '.join(map(repr, _c_literals(a)))}}};\n"
                         for i, a in enumerate(args))
        decls = "".join(f"{ctype[a.dtype]} in{i} = a{k}_{i}[j]; " for i, a in enumerate(args))
        body.append(f"{arrays}for (int j = 0; j < {args[0].size}; j++) {{ {decls}"
                    f"printf(\"%.9g\\n\", (double)({kernel.cuda})); }}\n")
    source = tmp_path / "exprs.cpp"
    header = "#include <cmath>\n#include <cstdio>\nusing namespace std;\nint main() {\n"
    source.write_text(header + "".join(body) + "}\n")
    subprocess.run(["g++", "-O0", "-w", "-o", str(tmp_path / "exprs"), str(source)], check=True, timeout=120)
    printed = subprocess.run([str(tmp_path / "exprs")], check=True, capture_output=True, text=True).stdout.split()
    values = np.array([float(v) for v in printed])
    offset = 0
    for op, kernel, args in cases:
        with np.errstate(all="ignore"):
            want = np.asarray(kernel.compute(*args), dtype=np.float64)
        got = values[offset:offset + want.size]
        offset += want.size
        np.testing.assert_allclose(got, want, rtol=2e-6, atol=2e-6, equal_nan=True, err_msg=f"{op}: {kernel.cuda}")
    assert offset == values.size


def test_erf_on_another_array_module_uses_its_own_ufuncs():
    """Arrays of another module (CuPy on a GPU) get the same polynomial through that module's
    ufuncs, never SciPy; here a namespace holding only NumPy's clip/multiply/tanh stands in."""
    xp = types.SimpleNamespace(clip=np.clip, multiply=np.multiply, tanh=np.tanh)
    x = np.linspace(-6, 6, 5001, dtype=np.float32)
    np.testing.assert_array_equal(_erf.erf(xp, x), _erf.erf(np, x))
    np.testing.assert_allclose(_erf.erf(xp, x.astype(np.float64)), special.erf(x.astype(np.float64)), atol=3e-7)


@pytest.mark.parametrize("op, ufunc", [("Add", np.add), ("Sub", np.subtract), ("Mul", np.multiply),
                                       ("Div", np.divide), ("Pow", np.power)])
@pytest.mark.parametrize("axis", [1, -3, None])
def test_opset_6_arithmetic_broadcasts_b_at_axis(op, ufunc, axis):
    """Before opset 7, B is aligned with A from `axis` on, not from the right (onnxruntime has
    no kernels this old): B (3, 4) onto A (2, 3, 4, 5) at axis 1 is B[None, :, :, None]."""
    a = RNG.random((2, 3, 4, 5), dtype=np.float32) + 0.5
    b = RNG.random((3, 4) if axis is not None else (4, 5), dtype=np.float32) + 0.5
    attrs = {"broadcast": 1} if axis is None else {"broadcast": 1, "axis": axis}
    got = compile_model(_model(op, [a, b], opset=6, **attrs).SerializeToString()).run({"in0": a, "in1": b})["out0"]
    want = ufunc(a, b if axis is None else b[None, :, :, None])
    np.testing.assert_allclose(got, want, rtol=1e-6)


def test_opset_6_prelu_takes_one_slope_per_channel():
    x, slope = RNG.standard_normal((2, 3, 4, 5)).astype(np.float32), np.array([0.1, 0.2, 0.3], np.float32)
    got = compile_model(_model("PRelu", [x, slope], opset=6).SerializeToString()).run({"in0": x, "in1": slope})["out0"]
    np.testing.assert_array_equal(got, np.where(x >= 0, x, x * slope[:, None, None]))
