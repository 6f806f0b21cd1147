"""loader/onnx_io.py reads what onnx itself reads: the signature `rtctl pack` writes into
metadata.json and the external data files it packs are those the onnx package finds in the
same bytes, for the sklearn zoo and for hand-made graphs with every kind of dim, ZipMap labels
of both kinds (packed and not) and external data inside subgraphs; only the one difference
served_shapes.py states (an ai.onnx.ml row op's output gets its input's rows)."""
import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from rtd import dtypes
from rtd.errors import Code, RtdError
from rtd.loader import onnx_io, pack
from tests.zoo.sklearn_models import SKLEARN_ZOO


def onnx_reading(model: bytes) -> tuple:
    """What pack wrote before it read the bytes itself: onnx's parse of the same fields."""
    graph = onnx.load_from_string(model).graph
    names = {v: k for k, v in TensorProto.DataType.items()}
    outputs, labels = {v.name for v in graph.output}, {}
    for node in graph.node:
        if (node.op_type, node.domain) == ("ZipMap", "ai.onnx.ml") and node.output[0] in outputs:
            for attr in node.attribute:
                if attr.name == "classlabels_strings":
                    labels[node.output[0]] = [s.decode() for s in attr.strings]
                elif attr.name == "classlabels_int64s":
                    labels[node.output[0]] = list(attr.ints)

    def described(values):
        return [{"name": v.name, "dtype": "FLOAT", "shape": [None, len(labels[v.name])]} if v.name in labels else
                {"name": v.name, "dtype": names.get(v.type.tensor_type.elem_type, "UNDEFINED"),
                 "shape": dtypes.declared_dims(v.type.tensor_type.shape)} for v in values]
    initializers = {t.name for t in graph.initializer}
    return described([v for v in graph.input if v.name not in initializers]), described(graph.output), labels


def test_the_data_type_names_are_onnxs():
    assert {i: name for i, name in enumerate(onnx_io.DATA_TYPES)} == \
        {v: k for k, v in TensorProto.DataType.items() if v < len(onnx_io.DATA_TYPES)}


@pytest.mark.parametrize("name", sorted(SKLEARN_ZOO))
def test_the_sklearn_zoo_reads_as_onnx_reads_it(name):
    with open(SKLEARN_ZOO[name].path(), "rb") as f:
        model = f.read()
    inputs, outputs, labels = pack.graph_signature(model)
    want_inputs, want_outputs, want_labels = onnx_reading(model)
    assert (inputs, labels) == (want_inputs, want_labels)
    if name == "lightgbm_classifier":   # declared [1]: served with the input's rows
        assert want_outputs[0]["shape"] == [1] and outputs[0]["shape"] == [None]
        want_outputs[0]["shape"] = [None]
    assert outputs == want_outputs


def handmade() -> tuple[bytes, bytes]:
    """Every kind of dim (value, name, -1, none, no shape at all), a sequence output, int labels
    packed and string labels not, and external data in an If branch's Constant."""
    weights = numpy_helper.from_array(np.ones((4, 3), np.float32), "W")
    onnx.external_data_helper.set_external_data(weights, "weights.bin")
    weights.ClearField("raw_data")
    branch = helper.make_graph([helper.make_node("Constant", [], ["c"], value=_external("consts.bin"))], "b", [],
                               [helper.make_tensor_value_info("c", TensorProto.FLOAT, [2])])
    nodes = [helper.make_node("MatMul", ["X", "W"], ["H"]),
             helper.make_node("If", ["flag"], ["k"], then_branch=branch, else_branch=branch),
             helper.make_node("ZipMap", ["H"], ["by_int"], domain="ai.onnx.ml", classlabels_int64s=[3, -1, 7]),
             helper.make_node("ZipMap", ["H"], ["by_name"], domain="ai.onnx.ml", classlabels_strings=["a", "b", "c"])]
    x = helper.make_tensor_value_info("X", TensorProto.FLOAT, ["batch", 4])
    x.type.tensor_type.shape.dim.add().dim_value = -1
    x.type.tensor_type.shape.dim.add()
    inputs = [x, helper.make_tensor_value_info("flag", TensorProto.BOOL, None),
              helper.make_tensor_value_info("W", TensorProto.FLOAT, [4, 3])]
    outputs = [helper.make_tensor_value_info("H", TensorProto.DOUBLE, [None, 3]), helper.make_tensor_value_info("k", TensorProto.FLOAT, [2]),
               helper.make_value_info("by_int", helper.make_sequence_type_proto(helper.make_map_type_proto(
                   TensorProto.INT64, helper.make_tensor_type_proto(TensorProto.FLOAT, [])))),
               helper.make_value_info("by_name", helper.make_sequence_type_proto(helper.make_map_type_proto(
                   TensorProto.STRING, helper.make_tensor_type_proto(TensorProto.FLOAT, []))))]
    model = helper.make_model(helper.make_graph(nodes, "hand", inputs, outputs, [weights]))
    return model.SerializeToString(), _pack_ints(model)   # onnx writes repeated ints unpacked; a packed run reads alike


def _external(location: str):
    tensor = numpy_helper.from_array(np.zeros(2, np.float32), "c")
    onnx.external_data_helper.set_external_data(tensor, location)
    tensor.ClearField("raw_data")
    return tensor


def _pack_ints(model) -> bytes:
    """The same model with the int labels as one packed field (proto3-style), as other writers
    do: the ZipMap node rebuilt by hand with that field and put back last in the graph."""
    proto = onnx.ModelProto()
    proto.CopyFrom(model)
    node = proto.graph.node[2]
    attr = node.attribute[0]
    run = b"".join(_varint(v & (1 << 64) - 1) for v in attr.ints)
    del attr.ints[:]
    packed_attr = attr.SerializeToString() + _field(8, run)   # AttributeProto.ints = 8
    del node.attribute[:]
    node_bytes = node.SerializeToString() + _field(5, packed_attr)   # NodeProto.attribute = 5
    del proto.graph.node[2]
    graph_bytes = proto.graph.SerializeToString() + _field(1, node_bytes)   # GraphProto.node = 1
    proto.ClearField("graph")
    return proto.SerializeToString() + _field(7, graph_bytes)   # ModelProto.graph = 7


def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        out.append(n & 0x7F | (0x80 if n > 0x7F else 0))
        n >>= 7
        if not n:
            return bytes(out)


def _field(number: int, body: bytes) -> bytes:
    return _varint(number << 3 | 2) + _varint(len(body)) + body


def test_handmade_graphs_read_as_onnx_reads_them():
    plain, packed = handmade()
    for data in (plain, packed):
        assert pack.graph_signature(data) == onnx_reading(data)
    assert onnx_reading(packed)[2]["by_int"] == [3, -1, 7]
    assert onnx_io.external_locations(memoryview(plain)) == {"weights.bin", "consts.bin"}


def test_bytes_that_are_no_model_are_refused_as_onnx_parse():
    for data in (b"not a model", b"\x3a\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff"):
        with pytest.raises(RtdError) as e:
            pack.graph_signature(data)
        assert e.value.code is Code.E_ONNX_PARSE
