"""SwiGLU, TensorScatter and BitCast beyond the backend cases: SwiGLU inside a fused chain and in
half precision, TensorScatter against the spec's own loop in both modes on other axes, BitCast
across every width including the sub-byte types; refusals by their codes."""
import itertools

import ml_dtypes
import numpy as np
import pytest
from onnx import TensorProto, helper

from rtd.errors import Code, RtdError
from rtd.kernels import compile_model

from kernel_graphs import typed_model

RNG = np.random.default_rng(5)


def graph_model(nodes, inputs, outputs, opset, initializers=()) -> bytes:
    return typed_model(nodes, inputs, outputs, initializers, opset=opset, ir_version=13)


def swiglu(a, b, alpha):
    a64 = a.astype(np.float64)
    return a64 / (1 + np.exp(-alpha * a64)) * b.astype(np.float64)


@pytest.mark.parametrize("dtype,elem,tol", [(np.float32, TensorProto.FLOAT, 1e-6), (np.float16, TensorProto.FLOAT16, 2e-3),
                                            (ml_dtypes.bfloat16, TensorProto.BFLOAT16, 2e-2)])
def test_swiglu_of_a_packed_projection_in_a_chain(dtype, elem, tol):
    """Split of a fused gate/up projection -> SwiGLU -> Mul: the element-wise chain the fuser builds."""
    nodes = [helper.make_node("Split", ["h", "halves"], ["gate", "up"], axis=-1),
             helper.make_node("SwiGLU", ["gate", "up"], ["act"], alpha=1.702),
             helper.make_node("Mul", ["act", "scale"], ["y"])]
    h = RNG.standard_normal((3, 17, 2 * 96)).astype(dtype)
    scale = np.array(0.5, dtype)
    data = graph_model(nodes, [("h", elem)], [("y", elem)], 28, [("halves", np.array([96, 96], np.int64)), ("scale", scale)])
    (y,) = compile_model(data).run({"h": h}).values()
    assert y.dtype == np.dtype(dtype) and y.shape == (3, 17, 96)
    np.testing.assert_allclose(y.astype(np.float64), swiglu(h[..., :96], h[..., 96:], 1.702) * 0.5, rtol=tol, atol=tol)


def test_swiglu_refuses_broadcasting():
    data = graph_model([helper.make_node("SwiGLU", ["a", "b"], ["y"])], [("a", TensorProto.FLOAT), ("b", TensorProto.FLOAT)],
                       [("y", TensorProto.FLOAT)], 28)
    with pytest.raises(RtdError) as e:
        compile_model(data).run({"a": np.ones((2, 3), np.float32), "b": np.ones((1, 3), np.float32)})
    assert e.value.code is Code.E_INPUT_INVALID


def scatter_by_the_spec(past, update, write_indices, axis, mode):
    present = past.copy()
    for prefix in np.ndindex(past.shape[:axis]):
        for s in range(update.shape[axis]):
            at = write_indices[prefix[0]] + s
            at = at % past.shape[axis] if mode == "circular" else at
            present[prefix + (at,)] = update[prefix + (s,)]
    return present


@pytest.mark.parametrize("mode,axis,shape,length", [("linear", -2, (3, 4, 16, 8), 5), ("circular", -2, (3, 4, 16, 8), 7),
                                                    ("circular", 1, (2, 6, 3), 6), ("linear", -1, (2, 2, 3, 10), 1)])
def test_tensor_scatter_matches_the_spec_loop(mode, axis, shape, length):
    past = RNG.standard_normal(shape).astype(np.float32)
    update_shape = list(shape)
    update_shape[axis] = length
    update = RNG.standard_normal(update_shape).astype(np.float32)
    high = shape[axis] - length + 1 if mode == "linear" else 3 * shape[axis]
    write = RNG.integers(0, high, shape[0]).astype(np.int64)
    data = graph_model([helper.make_node("TensorScatter", ["past", "update", "write"], ["present"], mode=mode, axis=axis)],
                       [("past", TensorProto.FLOAT), ("update", TensorProto.FLOAT), ("write", TensorProto.INT64)],
                       [("present", TensorProto.FLOAT)], 24)
    (present,) = compile_model(data).run({"past": past, "update": update, "write": write}).values()
    np.testing.assert_array_equal(present, scatter_by_the_spec(past, update, write, axis % len(shape), mode))


@pytest.mark.parametrize("attrs,write,update_len,code", [
    ({"mode": "linear"}, [14, 0], 3, Code.E_INPUT_INVALID),      # past the end
    ({"mode": "circular"}, [-1, 0], 3, Code.E_INPUT_INVALID),
    ({"mode": "circular"}, [0, 0], 17, Code.E_INPUT_INVALID),    # longer than the cache
    ({"mode": "ring"}, [0, 0], 1, Code.E_MODEL_INVALID),
    ({"axis": 0}, [0, 0], 1, Code.E_MODEL_INVALID)])
def test_tensor_scatter_refusals(attrs, write, update_len, code):
    data = graph_model([helper.make_node("TensorScatter", ["past", "update", "write"], ["present"], **attrs)],
                       [("past", TensorProto.FLOAT), ("update", TensorProto.FLOAT), ("write", TensorProto.INT64)],
                       [("present", TensorProto.FLOAT)], 24)
    shape = (2, 16, 4) if attrs.get("axis") != 0 else (2, 16, 4)
    with pytest.raises(RtdError) as e:
        compile_model(data).run({"past": np.zeros(shape, np.float32), "update": np.ones((2, update_len, 4), np.float32),
                                 "write": np.array(write, np.int64)})
    assert e.value.code is code


WIDTHS = {8: [TensorProto.UINT8, TensorProto.INT8, TensorProto.FLOAT8E4M3FN, TensorProto.FLOAT8E5M2, TensorProto.BOOL],
          16: [TensorProto.UINT16, TensorProto.INT16, TensorProto.FLOAT16, TensorProto.BFLOAT16],
          32: [TensorProto.UINT32, TensorProto.INT32, TensorProto.FLOAT],
          64: [TensorProto.UINT64, TensorProto.INT64, TensorProto.DOUBLE, TensorProto.COMPLEX64],
          4: [TensorProto.UINT4, TensorProto.INT4, TensorProto.FLOAT4E2M1]}


def bitcast_model(src, dst) -> bytes:
    return graph_model([helper.make_node("BitCast", ["x"], ["y"], to=dst)], [("x", src)], [("y", dst)], 26)


@pytest.mark.parametrize("src,dst", [pair for group in WIDTHS.values() for pair in itertools.permutations(group, 2)])
def test_bitcast_keeps_every_bit(src, dst):
    src_dtype, dst_dtype = (np.dtype(helper.tensor_dtype_to_np_dtype(t)) for t in (src, dst))
    if TensorProto.BOOL in (src, dst):
        raw = RNG.integers(0, 2, 64).astype(np.uint8)
    elif src in WIDTHS[4]:
        raw = RNG.integers(0, 16, 64).astype(np.uint8)
    else:
        raw = RNG.integers(0, 256, 64 * src_dtype.itemsize).astype(np.uint8)
    x = raw.view(src_dtype).reshape(8, -1)[:, ::2]   # strided: a view must not need contiguity
    (y,) = compile_model(bitcast_model(src, dst)).run({"x": x}).values()
    assert y.dtype == dst_dtype and y.shape == x.shape
    np.testing.assert_array_equal(np.ascontiguousarray(y).view(np.uint8), np.ascontiguousarray(x).view(np.uint8))


def test_bitcast_refuses_other_widths():
    with pytest.raises(RtdError) as e:
        compile_model(bitcast_model(TensorProto.FLOAT, TensorProto.INT64)).run({"x": np.ones(3, np.float32)})
    assert e.value.code is Code.E_MODEL_INVALID
