"""rtd/onnx_weights.py: a model's bytes with its main graph's raw weights left out parse to the same model
less those weights, whose offsets find their bytes; and the guard built on it."""
import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from rtd import onnx_weights
from rtd.errors import Code, RtdError
from rtd.loader.onnx_guard import check_model


def _tensor(array, name):
    tensor = numpy_helper.from_array(array, name)
    assert tensor.HasField("raw_data")
    return tensor


def _model():
    """Named initializers, one without a name, two sharing a name, an If branch with its own initializer
    and a Constant node: only the first kind is left out."""
    rng = np.random.default_rng(0)
    branch = helper.make_graph([helper.make_node("Add", ["x", "k"], ["t"])], "then", [],
                               [helper.make_tensor_value_info("t", TensorProto.FLOAT, [3])],
                               [_tensor(rng.standard_normal(3).astype(np.float32), "k")])
    other = helper.make_graph([helper.make_node("Neg", ["x"], ["e"])], "else", [],
                              [helper.make_tensor_value_info("e", TensorProto.FLOAT, [3])])
    nodes = [helper.make_node("Constant", [], ["c"], value=_tensor(np.arange(3, dtype=np.float32), "c")),
             helper.make_node("If", ["cond"], ["y"], then_branch=branch, else_branch=other)]
    unnamed = _tensor(np.ones(4, np.int64), "")
    initializers = [_tensor(rng.standard_normal((5, 7)).astype(np.float32), "W"), _tensor(np.arange(6, dtype=np.int32), "b"),
                    unnamed, _tensor(np.ones(2, np.float32), "twice"), _tensor(np.zeros(2, np.float32), "twice")]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3]),
                                           helper.make_tensor_value_info("cond", TensorProto.BOOL, [])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [3])], initializers)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_the_named_main_graph_weights_are_left_out_and_found_by_their_offsets():
    model = _model()
    data = model.SerializeToString()
    skeleton, spans = onnx_weights.stripped(data)
    assert set(spans) == {"W", "b"}
    for tensor in model.graph.initializer:
        if tensor.name in spans:
            offset, length = spans[tensor.name]
            assert data[offset:offset + length] == tensor.raw_data
            tensor.ClearField("raw_data")
    parsed = onnx.ModelProto.FromString(bytes(skeleton))
    assert parsed == model   # everything else as it was: the unnamed, the shared name, the branch and the Constant
    assert len(skeleton) < len(data) - 5 * 7 * 4


def test_a_graph_field_given_twice_merges_as_the_parser_merges_it():
    model, extra = _model(), onnx.ModelProto()
    extra.graph.initializer.append(_tensor(np.full(3, 7, np.float32), "late"))
    extra.graph.initializer.append(_tensor(np.full(2, 9, np.float32), "W"))   # W again, in the second field
    extra.graph.initializer.append(helper.make_tensor("b", TensorProto.INT32, [1], [5]))   # b again, typed: no raw_data
    data = model.SerializeToString() + extra.SerializeToString()
    skeleton, spans = onnx_weights.stripped(data)
    assert set(spans) == {"late"}   # W and b, named in both fields, keep their bytes (b's second has none: typed)
    offset, length = spans["late"]
    assert data[offset:offset + length] == extra.graph.initializer[0].raw_data
    merged = onnx.ModelProto.FromString(data)
    parsed = onnx.ModelProto.FromString(bytes(skeleton))
    assert [t.name for t in parsed.graph.initializer] == [t.name for t in merged.graph.initializer]
    assert [t.HasField("raw_data") for t in parsed.graph.initializer if t.name == "W"] == [True, True]
    assert [t.HasField("raw_data") for t in parsed.graph.initializer if t.name in ("b", "late")] == [True, False, False]


def test_where_the_rest_outweighs_the_weights_the_bytes_are_parsed_as_they_are(monkeypatch):
    monkeypatch.setattr(onnx_weights, "COPY_WORTH_BYTES", 0)
    data = _model().SerializeToString()   # its graph's other bytes outweigh W and b
    assert onnx_weights.stripped(data) == (data, {})


def test_malformed_wire_data_is_a_parse_error():
    data = _model().SerializeToString()
    with pytest.raises(RtdError) as e:
        onnx_weights.stripped(data[:-3])
    assert e.value.code is Code.E_ONNX_PARSE


def test_the_guard_checks_a_left_out_weights_length_against_its_dims():
    model = _model()
    model.graph.initializer[0].dims[:] = [5, 8]   # 160 bytes by its dims, 140 in the file
    with pytest.raises(RtdError) as e:
        check_model(model.SerializeToString(), views={})
    assert e.value.code is Code.E_ONNX_INVALID and "raw_data is 140 bytes, dims x size is 160" in e.value.detail
