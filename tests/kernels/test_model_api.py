"""The compile_model contract: refusals with codes, input checks, plans per signature, threads,
memory planning and the profiler's Chrome trace."""
import json
import threading

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

from rtd.errors import Code, RtdError
from rtd.kernels import backend_cupy, compile_model
from rtd.kernels.ir import _packed_floats, tensor_value

from kernel_graphs import const, model, node


def mlp(hidden=16):
    rng = np.random.default_rng(0)
    nodes = [node("MatMul", ["x", "w1"], ["h"]), node("Add", ["h", "b1"], ["hb"]), node("Relu", ["hb"], ["a"]),
             node("MatMul", ["a", "w2"], ["o"]), node("Add", ["o", "b2"], ["ob"]), node("Sigmoid", ["ob"], ["s"]),
             node("Mul", ["s", "ob"], ["y"])]
    inits = [const("w1", rng.standard_normal((8, hidden)).astype(np.float32)), const("b1", rng.standard_normal(hidden).astype(np.float32)),
             const("w2", rng.standard_normal((hidden, 4)).astype(np.float32)), const("b2", rng.standard_normal(4).astype(np.float32))]
    return model(nodes, [("x", ["batch", 8])], [("y", ["batch", 4])], inits)


def refusal(fn) -> RtdError:
    with pytest.raises(RtdError) as info:
        fn()
    return info.value


def test_bad_bytes_refuse_with_parse_error():
    assert refusal(lambda: compile_model(b"\x08\x07not-onnx\xff\xff")).code is Code.E_ONNX_PARSE


def test_unsupported_op_refuses_at_compile_naming_op_and_opset():
    m = model([node("NoSuchOp", ["x"], ["y"])], [("x", [2])], [("y", None)])
    err = refusal(lambda: compile_model(m.SerializeToString()))
    assert err.code is Code.E_OP_UNSUPPORTED and "NoSuchOp" in err.detail and "17" in err.detail
    unknown_domain = model([helper.make_node("Relu", ["x"], ["y"], domain="com.example")], [("x", [2])], [("y", None)])
    assert refusal(lambda: compile_model(unknown_domain)).code is Code.E_OP_UNSUPPORTED


def test_unknown_attribute_refuses_at_compile():
    m = model([node("Relu", ["x"], ["y"], alpha=1.0)], [("x", [2])], [("y", None)])
    assert refusal(lambda: compile_model(m)).code is Code.E_OP_UNSUPPORTED


def test_dangling_name_is_a_malformed_model():
    m = model([node("Relu", ["nowhere"], ["y"])], [("x", [2])], [("y", None)])
    assert refusal(lambda: compile_model(m)).code is Code.E_MODEL_INVALID


def test_wrong_inputs_are_refused_with_expected_and_got():
    m = compile_model(mlp().SerializeToString())
    x = np.ones((2, 8), np.float32)
    cases = [({"wrong": x}, "expected inputs"), ({"x": x.astype(np.float64)}, "expected dtype float32, got float64"),
             ({"x": np.ones((2, 7), np.float32)}, "expected shape"), ({"x": np.ones(8, np.float32)}, "expected shape"),
             ({"x": x, "extra": x}, "expected inputs"), ({"x": [[1.0] * 8]}, "expected an ndarray")]
    for _ in range(2):   # before any plan, then with one for x's signature (its feeds pass the checks faster)
        for feeds, words in cases:
            err = refusal(lambda feeds=feeds: m.run(feeds))
            assert err.code is Code.E_INPUT_INVALID and words in err.detail, err
        assert m.run({"x": x})["y"].shape == (2, 4)  # a refusal changed nothing


def test_symbolic_dims_must_agree_across_inputs():
    nodes = [node("Add", ["a", "b"], ["c"])]
    m = compile_model(model(nodes, [("a", ["n", 3]), ("b", ["n", 3])], [("c", None)]))
    err = refusal(lambda: m.run({"a": np.ones((2, 3), np.float32), "b": np.ones((4, 3), np.float32)}))
    assert err.code is Code.E_INPUT_INVALID and "'n'" in err.detail


def test_specs_report_names_dtypes_and_symbolic_shapes():
    m = compile_model(mlp())
    assert [(s.name, s.dtype, s.shape) for s in m.inputs] == [("x", np.dtype(np.float32), ("batch", 8))]
    assert [(s.name, s.shape) for s in m.outputs] == [("y", ("batch", 4))]


def test_cuda_refuses_cleanly_without_cupy_or_gpu():
    reason = backend_cupy.unavailable_reason()
    if reason is None:
        pytest.skip("a GPU and CuPy are present: the refusal path does not apply")
    err = refusal(lambda: compile_model(mlp(), device="cuda"))
    assert err.code is Code.E_OP_UNSUPPORTED and err.detail.startswith("device cuda unavailable")
    assert refusal(lambda: compile_model(mlp(), device="tpu")).code is Code.E_OP_UNSUPPORTED


def test_one_plan_per_shape_signature_and_each_matches_the_interpreter():
    fast, ref = compile_model(mlp()), compile_model(mlp(), optimize=False)
    rng = np.random.default_rng(1)
    for batch in (1, 3, 1, 7, 3):
        x = rng.standard_normal((batch, 8)).astype(np.float32)
        np.testing.assert_allclose(fast.run({"x": x})["y"], ref.run({"x": x})["y"], rtol=1e-5, atol=1e-6)
    assert len(fast._plans) == 3


def test_memory_plan_reuses_buffers_and_outputs_are_not_arena_views():
    nodes, prev = [], "x"
    for i in range(8):  # a stack of elementwise stages, each read by the next only
        nodes += [node("Mul", [prev, "k"], [f"m{i}"]), node("MatMul", [f"m{i}", "w"], [f"p{i}"]), node("Add", [f"p{i}", "b"], [f"a{i}"])]
        prev = f"a{i}"
    inits = [const("k", np.float32(0.5)), const("w", np.eye(16, dtype=np.float32)), const("b", np.ones(16, np.float32))]
    m = compile_model(model(nodes, [("x", [32, 16])], [(prev, None)], inits))
    x = np.ones((32, 16), np.float32)
    stats = m.plan_stats({"x": x})
    assert stats["planned_buffers"] >= 8 and stats["peak_bytes"] * 3 <= stats["naive_bytes"], stats
    first = m.run({"x": x})[prev]
    second = m.run({"x": 2 * x})[prev]
    assert not np.shares_memory(first, second)
    np.testing.assert_allclose(first, compile_model(model(nodes, [("x", [32, 16])], [(prev, None)], inits), optimize=False).run({"x": x})[prev])


def test_concurrent_runs_from_many_threads_give_each_caller_its_answer():
    fast, ref = compile_model(mlp(hidden=64)), compile_model(mlp(hidden=64), optimize=False)
    rng = np.random.default_rng(2)
    inputs = [rng.standard_normal((1 + i % 3, 8)).astype(np.float32) for i in range(24)]
    expected = [ref.run({"x": x})["y"] for x in inputs]
    failures = []

    def worker(offset):
        for k in range(40):
            i = (offset + k) % len(inputs)
            got = fast.run({"x": inputs[i]})["y"]
            if not np.allclose(got, expected[i], rtol=1e-5, atol=1e-6):
                failures.append(i)

    threads = [threading.Thread(target=worker, args=(t,)) for t in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not failures


def test_profiler_times_every_step_and_writes_a_chrome_trace(tmp_path):
    m = compile_model(mlp())
    x = np.ones((2, 8), np.float32)
    m.run({"x": x})  # traced first run (not profiled: it is the interpreter)
    m.run({"x": x}, profile=True)
    m.run({"x": x}, profile=True)
    summary = m.profile_summary()
    assert summary["MatMulBias"]["calls"] == 4 and all(v["total_us"] >= 0 for v in summary.values())
    path = tmp_path / "trace.json"
    m.write_trace(path)
    events = json.loads(path.read_text())["traceEvents"]
    ops = [e for e in events if e["cat"] == "op"]
    assert len(ops) == 2 * m.plan_stats({"x": x})["timed_steps"]   # a native program's nodes each timed
    assert all(e["ph"] == "X" and e["dur"] >= 0 and "ts" in e and "pid" in e and "tid" in e for e in events)


def test_sequence_inputs_run_through_the_interpreter():
    seq_in = helper.make_tensor_sequence_value_info("s", TensorProto.FLOAT, None)
    m = model([node("SequenceLength", ["s"], ["n"])], [seq_in], [helper.make_tensor_value_info("n", TensorProto.INT64, [])])
    out = compile_model(m).run({"s": [np.ones(2, np.float32), np.ones(3, np.float32)]})
    assert int(out["n"]) == 2


def test_inputs_the_graph_cannot_take_are_refused_not_crashed():
    """Both inputs declare symbolic dims with different names, but Add needs them to broadcast."""
    m = compile_model(model([node("Add", ["a", "b"], ["c"])], [("a", ["n"]), ("b", ["m"])], [("c", None)]))
    err = refusal(lambda: m.run({"a": np.ones(3, np.float32), "b": np.ones(4, np.float32)}))
    assert err.code is Code.E_INPUT_INVALID and "cannot run on these inputs" in err.detail
    assert m.run({"a": np.ones(3, np.float32), "b": np.ones(3, np.float32)})["c"].tolist() == [2, 2, 2]


def test_arena_limit_refuses_shapes_whose_plan_is_too_big_and_keeps_serving_small_ones():
    m = compile_model(mlp(hidden=256), arena_limit=64 * 1024)
    assert m.run({"x": np.ones((4, 8), np.float32)})["y"].shape == (4, 4)  # 4 KiB of buffers
    err = refusal(lambda: m.run({"x": np.ones((512, 8), np.float32)}))  # 512 KiB of buffers
    assert err.code is Code.E_RESOURCE_EXHAUSTED and "arena" in err.detail
    assert m.run({"x": np.ones((4, 8), np.float32)})["y"].shape == (4, 4)


def test_external_tensor_data_is_refused_without_touching_the_filesystem(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "weights.bin").write_bytes(np.ones(4, np.float32).tobytes())  # would load if followed
    m = model([node("Add", ["x", "w"], ["y"])], [("x", [4])], [("y", None)], [const("w", np.zeros(4, np.float32))])
    w = m.graph.initializer[0]
    w.ClearField("raw_data")
    w.data_location = TensorProto.EXTERNAL
    w.external_data.add(key="location", value="weights.bin")
    assert refusal(lambda: compile_model(m.SerializeToString())).code is Code.E_ONNX_EXTERNAL_DATA
    bad = model([node("Add", ["x", "w"], ["y"])], [("x", [4])], [("y", None)], [const("w", np.zeros(4, np.float32))])
    bad.graph.initializer[0].raw_data = b"\x00" * 3  # 3 bytes for 4 floats
    assert refusal(lambda: compile_model(bad.SerializeToString())).code is Code.E_ONNX_INVALID


def test_a_model_file_gives_the_same_answers_as_its_bytes_its_weights_each_read_into_a_read_only_array(tmp_path):
    m = mlp()
    m.graph.node.extend([node("Cast", ["half"], ["half_f"], to=TensorProto.FLOAT), node("Add", ["y", "half_f"], ["z"])])
    half = helper.make_tensor("half", TensorProto.BFLOAT16, [4], np.array([0x3f80, 0x4000, 0x4060, 0xbf80], np.uint16).tobytes(), raw=True)
    m.graph.initializer.append(half)   # a type NumPy cannot view: its bytes go back into the proto
    m.graph.output[0].name = "z"
    path = tmp_path / "m.onnx"
    path.write_bytes(m.SerializeToString())
    x = np.random.default_rng(1).standard_normal((3, 8)).astype(np.float32)
    from_file, from_bytes = compile_model(str(path)), compile_model(m.SerializeToString())
    np.testing.assert_array_equal(from_file.run({"x": x})["z"], from_bytes.run({"x": x})["z"])
    want = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    np.testing.assert_allclose(from_file.run({"x": x})["z"], want, rtol=1e-5, atol=1e-6)
    read = {name: value for name, value in from_file.graph.constants.items() if value.size == 16}   # b1
    assert read and all(not value.flags.writeable for value in read.values())
    m.graph.initializer[0].dims[:] = [8, 17]   # 8 x 16 floats stored, 8 x 17 declared
    path.write_bytes(m.SerializeToString())
    assert refusal(lambda: compile_model(str(path))).code is Code.E_ONNX_INVALID
    path.write_bytes(b"")
    assert refusal(lambda: compile_model(str(path))).code is Code.E_ONNX_PARSE

def test_gemm_steps_sharing_a_weight_share_its_transposed_copy():
    """An unrolled recurrence: eight Gemm steps (transB) multiply by the same two weights. The lowering
    transposes each weight once for all of them (it made one copy per step: a CRNN compiled to 4× its
    size), which is then packed once (kernels/lower/packing.py), and the steps still compute what onnxruntime does."""
    rng = np.random.default_rng(5)
    nodes, h = [], "x"
    for step in range(8):
        weight, bias = ("w", "b") if step % 2 == 0 else ("r", "c")
        nodes.append(node("Gemm", [h, weight, bias], [f"g{step}"], transB=1))
        nodes.append(node("Tanh", [f"g{step}"], [f"h{step}"]))
        h = f"h{step}"
    inits = [const(name, (rng.standard_normal(shape) * 0.2).astype(np.float32))
             for name, shape in (("w", (32, 32)), ("b", (32,)), ("r", (32, 32)), ("c", (32,)))]
    onnx_model = model(nodes, [("x", ["batch", 32])], [(h, ["batch", 32])], inits)
    compiled = compile_model(onnx_model.SerializeToString())
    copies = [name for name in compiled.graph.constants if "__transposed" in name]
    assert sorted(copies) == ["r__transposed__panels", "w__transposed__panels"]
    assert sum(node.inputs[1:2] == ["w__transposed__panels"] for node in compiled.graph.nodes) == 4
    x = rng.standard_normal((3, 32)).astype(np.float32)
    want = ort.InferenceSession(onnx_model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    np.testing.assert_allclose(compiled.run({"x": x})[h], want, rtol=1e-5, atol=1e-6)


def test_nodes_out_of_dataflow_order_run_as_onnxruntime_sorts_them_and_a_cycle_is_refused():
    """ONNX asks for nodes in topological order; onnxruntime sorts those that are not (an exporter
    of a shipped g2p model wrote a Relu before its producer), and so does rtd. A cycle stays refused."""
    rng = np.random.default_rng(2)
    nodes = [node("Relu", ["f"], ["y"]), node("Add", ["e", "x"], ["f"]), node("Mul", ["x", "w"], ["e"])]
    onnx_model = model(nodes, [("x", ["batch", 4])], [("y", ["batch", 4])], [const("w", rng.standard_normal(4).astype(np.float32))])
    x = rng.standard_normal((3, 4)).astype(np.float32)
    want = ort.InferenceSession(onnx_model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    np.testing.assert_array_equal(compile_model(onnx_model.SerializeToString()).run({"x": x})["y"], want)
    cycle = model([node("Add", ["x", "b"], ["a"]), node("Relu", ["a"], ["b"]), node("Neg", ["a"], ["y"])],
                  [("x", [4])], [("y", [4])])
    error = refusal(lambda: compile_model(cycle.SerializeToString()))
    assert error.code is Code.E_MODEL_INVALID and "cycle" in error.detail


def test_fixed_width_numpy_strings_are_taken_as_string_tensors():
    """A package that feeds np.array(["a", "b"]) (dtype <U1), which onnxruntime takes, is served the same."""
    graph = helper.make_graph([node("StringConcat", ["x", "x"], ["y"])], "g",
                              [helper.make_tensor_value_info("x", TensorProto.STRING, [2])],
                              [helper.make_tensor_value_info("y", TensorProto.STRING, [2])])
    data = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 20)]).SerializeToString()
    assert compile_model(data).run({"x": np.array(["a", "bc"])})["y"].tolist() == ["aa", "bcbc"]


def test_a_constant_stored_as_float_data_is_read_from_its_packed_encoding_with_numpys_values():
    values = np.random.default_rng(2).standard_normal((4, 8)).astype(np.float32)
    values[0, :3] = [np.nan, -0.0, np.inf]
    tensor = helper.make_tensor("k", TensorProto.FLOAT, [4, 8], values.reshape(-1).tolist())   # float_data, not raw
    assert not tensor.HasField("raw_data")
    read = _packed_floats(tensor)
    assert read is not None and read.tobytes() == values.tobytes()   # the packed path taken, bit for bit
    np.testing.assert_array_equal(tensor_value(tensor), values)
    m = model([node("Constant", [], ["k"], value=tensor), node("Add", ["x", "k"], ["y"])], [("x", [4, 8])], [("y", None)], [])
    np.testing.assert_array_equal(compile_model(m).run({"x": np.zeros((4, 8), np.float32)})["y"], values)
    tensor.dims[:] = [4, 9]   # 32 values for 36 elements
    assert refusal(lambda: tensor_value(tensor)).code is Code.E_ONNX_INVALID
