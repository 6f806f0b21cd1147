"""The reference a quantized model is judged against: onnxruntime, with its int8 weights given as
uint8 wherever its uint8 × int8 product could saturate on this host.

onnxruntime's x86 u8s8 GEMM without VNNI (AVX2, AVX-512BW) multiplies with vpmaddubsw, which adds
each pair of adjacent u8·s8 products into an int16, saturating: MatMulInteger of eight 255s by
eight 127s gives 4 · 32767 = 131068 instead of 259080 (onnxruntime's quantization guide warns of
it and suggests reduce_range). With VNNI (vpdpbusd), or on ARM, the sums are exact. Recomputing
every failing case of tests/kernels with NumPy's int64 sums, and with those sums' adjacent pairs
clipped to int16, gave onnxruntime's outputs bit for bit in the clipped form and rtd's in the exact one.

Where this host saturates and a product's int8 weights reach past ±PAIR_SAFE_WEIGHT, the session
gets the same model with those weights as uint8 (w + 128, and their zero point + 128): the same
integers w − zero point, so the same scales, rounding and QDQ fusions, through onnxruntime's u8u8
path, which widens both operands to int16 before it multiplies (2 · 255 · 255 fits an int32).
Elsewhere the model runs as written, so onnxruntime's own u8s8 kernels stay the anchor on hosts
that compute them exactly, and for weights within ±PAIR_SAFE_WEIGHT on every host. The bound takes
the activation as any uint8 (it may be computed inside the graph) and holds for any pairing of
the products, so it does not depend on how onnxruntime packs K.
"""
import functools
from dataclasses import dataclass

import numpy as np
import onnx
import onnxruntime as ort
from onnx import helper, numpy_helper

# The largest |w| for which two u8·s8 products cannot leave int16: 2 · 255 · 64 = 32640 ≤ 32767
# (and −32640 ≥ −32768), while 2 · 255 · 65 = 33150 does.
PAIR_SAFE_WEIGHT = 64

# (domain, op) -> (activation input and its zero-point input, both None where the op quantizes its
#                  float input to uint8 itself; weight input and its zero-point input)
INTEGER_PRODUCTS = {
    ("", "QLinearConv"): (0, 2, 3, 5),
    ("", "QLinearMatMul"): (0, 2, 3, 5),
    ("", "MatMulInteger"): (0, 2, 1, 3),
    ("com.microsoft", "MatMulIntegerToFloat"): (0, 4, 1, 5),
    ("com.microsoft", "DynamicQuantizeMatMul"): (None, None, 1, 3),
}
# Float ops onnxruntime's QDQ transformer turns into the integer ones above when their activation
# (input 0) and weight (input 1) each come from a DequantizeLinear (x, scale, zero point).
QDQ_PRODUCTS = {"Conv", "MatMul"}


@dataclass(frozen=True)
class Reference:
    """onnxruntime's session for a model, and the int8 weights it was given as uint8 (none: the model as written)."""
    session: ort.InferenceSession
    reexpressed: tuple[str, ...]

    def run(self, feeds) -> list:
        return self.session.run(None, feeds)

    def __str__(self) -> str:
        if not self.reexpressed:
            return "onnxruntime, the model as written"
        return f"onnxruntime with {', '.join(self.reexpressed)} as uint8 (its u8s8 product saturates on this host)"


def onnxruntime_reference(model: bytes, options: ort.SessionOptions | None = None) -> Reference:
    """The reference session for `model` (serialized), on onnxruntime's CPU provider."""
    reexpressed, data = (), model
    if u8s8_saturates():
        proto = onnx.load_from_string(model)
        reexpressed = tuple(_reexpress_saturating_weights(proto))
        if reexpressed:
            data = proto.SerializeToString()
    return Reference(ort.InferenceSession(data, options, providers=["CPUExecutionProvider"]), reexpressed)


@functools.cache
def u8s8_saturates() -> bool:
    """Whether this host's onnxruntime adds u8·s8 products in int16 pairs with saturation: MatMulInteger
    of eight 255s by eight 127s, which is exact or 4 · 32767; anything else is a failure of its own."""
    a, b = np.full((1, 8), 255, np.uint8), np.full((8, 1), 127, np.int8)
    graph = helper.make_graph([helper.make_node("MatMulInteger", ["a", "b"], ["y"])], "probe",
                              [helper.make_tensor_value_info("a", onnx.TensorProto.UINT8, a.shape)],
                              [helper.make_tensor_value_info("y", onnx.TensorProto.INT32, None)],
                              [numpy_helper.from_array(b, "b")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)
    got = int(ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"a": a})[0][0, 0])
    exact, saturated = 8 * 255 * 127, 4 * 32767
    if got not in (exact, saturated):
        raise AssertionError(f"onnxruntime's u8s8 MatMulInteger gave {got}: neither exact ({exact}) nor int16-pair saturated ({saturated})")
    return got == saturated


def _reexpress_saturating_weights(proto: onnx.ModelProto) -> list[str]:
    """Gives each u8 × s8 product whose int8 weight initializer reaches past ±PAIR_SAFE_WEIGHT that
    weight and its zero point as uint8 (new initializers; the originals stay for other readers).
    Returns the weights' names."""
    initializers = {t.name: t for t in proto.graph.initializer}
    types = _value_types(proto)
    producers = {out: node for node in proto.graph.node for out in node.output}
    done = []
    for node in proto.graph.node:
        for holder, activation, weight, zero_point in _weights_of(node, producers):
            name = holder.input[weight]
            if name not in initializers or initializers[name].data_type != onnx.TensorProto.INT8:
                continue
            known = [types[a] for a in activation if a in types]
            if activation and not known:
                raise LookupError(f"{node.op_type}: cannot tell the type of its activation {activation[-1]!r}")
            if activation and known[0] != np.uint8:
                continue
            w = numpy_helper.to_array(initializers[name])
            if -PAIR_SAFE_WEIGHT <= int(w.min(initial=0)) and int(w.max(initial=0)) <= PAIR_SAFE_WEIGHT:
                continue
            zp_name = holder.input[zero_point] if len(holder.input) > zero_point else ""
            if zp_name and zp_name not in initializers:
                raise LookupError(f"{holder.op_type}: the zero point {zp_name!r} of int8 weight {name!r} is not an initializer")
            zp = numpy_helper.to_array(initializers[zp_name]) if zp_name else np.int8(0)
            holder.input[weight] = _add_uint8(proto, initializers, f"{name}_as_uint8", w)
            while len(holder.input) <= zero_point:
                holder.input.append("")
            holder.input[zero_point] = _add_uint8(proto, initializers, f"{zp_name or name + '_zero_point'}_as_uint8", zp)
            done.append(name)
    return done


def _weights_of(node, producers):
    """(node holding the weight and its zero point, names of the activation's zero point and the activation
    (same type; empty for uint8 made inside the op), weight input, zero-point input) for each integer
    product `node` is or becomes in onnxruntime."""
    key = (node.domain if node.domain != "ai.onnx" else "", node.op_type)
    if key in INTEGER_PRODUCTS:
        activation, activation_zero_point, weight, zero_point = INTEGER_PRODUCTS[key]
        names = [] if activation is None else [node.input[i] for i in (activation_zero_point, activation) if i < len(node.input)]
        yield node, [n for n in names if n], weight, zero_point
    elif key[0] == "" and node.op_type in QDQ_PRODUCTS and len(node.input) > 1:
        x, w = (producers.get(name) for name in node.input[:2])
        if x is not None and w is not None and x.op_type == w.op_type == "DequantizeLinear":
            yield w, [n for n in x.input[2:3] if n] + [x.input[0]], 0, 2


def _value_types(proto: onnx.ModelProto) -> dict:
    """Element types of the main graph's values: inputs, initializers, and what ONNX shape inference
    derives (com.microsoft outputs stay unknown)."""
    inferred = onnx.shape_inference.infer_shapes(proto)
    infos = [*inferred.graph.input, *inferred.graph.value_info, *inferred.graph.output]
    types = {v.name: np.dtype(helper.tensor_dtype_to_np_dtype(v.type.tensor_type.elem_type))
             for v in infos if v.type.tensor_type.elem_type}
    types.update({t.name: np.dtype(helper.tensor_dtype_to_np_dtype(t.data_type)) for t in proto.graph.initializer})
    return types


def _add_uint8(proto, initializers, name, int8_values) -> str:
    """An initializer `name` holding int8_values + 128 as uint8 (made once); returns its name."""
    if name not in initializers:
        shifted = (np.asarray(int8_values).astype(np.int16) + 128).astype(np.uint8)
        initializers[name] = numpy_helper.from_array(shifted, name)
        proto.graph.initializer.append(initializers[name])
    return name
