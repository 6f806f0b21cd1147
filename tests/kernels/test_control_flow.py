"""If, Loop, Scan, SequenceMap and model-local functions, checked against onnx.reference."""
import numpy as np
import onnx
from onnx import TensorProto, helper
from onnx.reference import ReferenceEvaluator

from rtd.kernels import compile_model

from kernel_graphs import const, model, node

F, I64, B = TensorProto.FLOAT, TensorProto.INT64, TensorProto.BOOL


def vi(name, elem=F, shape=None):
    return helper.make_tensor_value_info(name, elem, shape)


def agree(m, feeds):
    want = ReferenceEvaluator(m).run(None, feeds)
    for optimize in (False, True):
        got = compile_model(m, optimize=optimize).run(feeds)
        for spec, value in zip(m.graph.output, want):
            np.testing.assert_allclose(got[spec.name], value, rtol=1e-6, atol=1e-6)


def test_if_branches_read_outer_scope():
    then = helper.make_graph([node("Add", ["x", "y"], ["t"])], "then", [], [vi("t")])
    other = helper.make_graph([node("Sub", ["x", "y"], ["e"])], "else", [], [vi("e")])
    nodes = [node("ReduceSum", ["x"], ["s"], keepdims=0), node("Greater", ["s", "zero"], ["c"]),
             node("If", ["c"], ["out"], then_branch=then, else_branch=other)]
    m = model(nodes, [("x", [3]), ("y", [3])], [("out", None)], [const("zero", np.float32(0))], opset=13)
    agree(m, {"x": np.array([1, 2, 3], np.float32), "y": np.ones(3, np.float32)})
    agree(m, {"x": -np.array([1, 2, 3], np.float32), "y": np.ones(3, np.float32)})


def test_loop_carries_state_stacks_scan_outputs_and_reads_outer_scope():
    body = helper.make_graph(
        [node("Add", ["acc", "step"], ["acc_out"]), node("Identity", ["cond"], ["cond_out"]), node("Mul", ["acc_out", "two"], ["scan"])],
        "body", [vi("i", I64, []), vi("cond", B, []), vi("acc", F, [2])], [vi("cond_out", B, []), vi("acc_out", F, [2]), vi("scan", F, [2])])
    nodes = [node("Loop", ["n", "go", "init"], ["final", "stacked"], body=body)]
    m = model(nodes, [vi("n", I64, []), vi("go", B, []), ("init", [2]), ("step", [2])], [("final", None), ("stacked", None)],
              [const("two", np.float32(2))], opset=13)
    agree(m, {"n": np.array(4, np.int64), "go": np.array(True), "init": np.zeros(2, np.float32), "step": np.array([1, -1], np.float32)})


def test_loop_stops_on_condition():
    body = helper.make_graph(
        [node("Add", ["acc", "one"], ["acc_out"]), node("Less", ["acc_out", "limit"], ["cond_out"])],
        "body", [vi("i", I64, []), vi("cond", B, []), vi("acc", F, [])], [vi("cond_out", B, []), vi("acc_out", F, [])])
    nodes = [node("Loop", ["", "go", "start"], ["final"], body=body)]
    m = model(nodes, [vi("go", B, []), ("start", [])], [("final", None)],
              [const("one", np.float32(1)), const("limit", np.float32(5))], opset=13)
    agree(m, {"go": np.array(True), "start": np.array(0.5, np.float32)})


def test_scan_reverse_direction_and_axis():
    body = helper.make_graph([node("Add", ["s", "x"], ["s_out"]), node("Identity", ["s_out"], ["y"])],
                             "body", [vi("s", F, [2]), vi("x", F, [2])], [vi("s_out", F, [2]), vi("y", F, [2])])
    nodes = [node("Scan", ["init", "xs"], ["final", "ys"], body=body, num_scan_inputs=1,
                  scan_input_axes=[1], scan_input_directions=[1], scan_output_axes=[1])]
    m = model(nodes, [("init", [2]), ("xs", [2, 5])], [("final", None), ("ys", None)], opset=16)
    xs = np.arange(10, dtype=np.float32).reshape(2, 5)
    running = np.cumsum(xs[:, ::-1], axis=1)  # onnx.reference has no reverse Scan: the sums by hand
    for optimize in (False, True):
        got = compile_model(m, optimize=optimize).run({"init": np.zeros(2, np.float32), "xs": xs})
        np.testing.assert_allclose(got["final"], xs.sum(axis=1))
        np.testing.assert_allclose(got["ys"], running)


def test_sequence_map_over_a_sequence_and_a_tensor():
    body = helper.make_graph([node("Add", ["a", "b"], ["c"])], "body", [vi("a"), vi("b")], [vi("c")])
    nodes = [node("SplitToSequence", ["x"], ["sq"], axis=0), node("SequenceMap", ["sq", "y"], ["out"], body=body),
             node("ConcatFromSequence", ["out"], ["z"], axis=0)]
    m = model(nodes, [("x", [3, 2]), ("y", [2])], [("z", None)], opset=17)
    agree(m, {"x": np.arange(6, dtype=np.float32).reshape(3, 2), "y": np.ones(2, np.float32)})


def test_model_local_function_is_inlined_with_attribute_references():
    fn = helper.make_function(
        "custom", "ScaledRelu", ["x"], ["y"],
        [node("Relu", ["x"], ["r"]), helper.make_node("Constant", [], ["k"], value_float=0.0),
         node("Mul", ["r", "k2"], ["y"])],
        [helper.make_opsetid("", 17)], attributes=[])
    fn.node[1].ClearField("attribute")
    fn.node[1].attribute.append(helper.make_attribute_ref("value_float", onnx.AttributeProto.FLOAT))
    fn.attribute_proto.append(helper.make_attribute("value_float", 1.0))
    fn.node[2].input[1] = "k"
    nodes = [helper.make_node("ScaledRelu", ["x"], ["y"], domain="custom", value_float=3.0),
             helper.make_node("ScaledRelu", ["y"], ["z"], domain="custom")]
    m = model(nodes, [("x", [4])], [("z", None)], functions=[fn])
    x = np.array([-1, 0, 2, 5], np.float32)
    for optimize in (False, True):
        np.testing.assert_allclose(compile_model(m, optimize=optimize).run({"x": x})["z"], np.maximum(x, 0) * 3.0)


def test_loop_with_zero_iterations_returns_initial_state_and_typed_empty_scans():
    body = helper.make_graph(
        [node("Identity", ["cond"], ["cond_out"]), node("Add", ["acc", "acc"], ["acc_out"]), node("Cast", ["acc_out"], ["scan"], to=I64)],
        "body", [vi("i", I64, []), vi("cond", B, []), vi("acc", F, [2])], [vi("cond_out", B, []), vi("acc_out", F, [2]), vi("scan", I64, [2])])
    m = model([node("Loop", ["n", "", "init"], ["final", "stacked"], body=body)], [vi("n", I64, []), ("init", [2])],
              [("final", None), vi("stacked", I64, None)], opset=13)
    for optimize in (False, True):
        out = compile_model(m, optimize=optimize).run({"n": np.array(0, np.int64), "init": np.ones(2, np.float32)})
        np.testing.assert_array_equal(out["final"], np.ones(2, np.float32))
        assert out["stacked"].shape[0] == 0 and out["stacked"].dtype == np.int64


def _plan_ops(compiled, feeds) -> dict:
    return compiled.plan_stats(feeds)["ops"]


def test_if_on_a_shape_is_inlined_per_signature_and_takes_the_right_branch():
    # exporters' rank checks: If(Equal(Gather(Shape(x), 0), 1)) then Squeeze else Identity; the signature fixes it
    then = helper.make_graph([node("Squeeze", ["x", "axis0"], ["t"])], "then", [], [vi("t")])
    other = helper.make_graph([node("Identity", ["x"], ["e"])], "else", [], [vi("e")])
    nodes = [node("Shape", ["x"], ["shape"]), node("Gather", ["shape", "zero"], ["first"]),
             node("Equal", ["first", "one"], ["c"]), node("If", ["c"], ["picked"], then_branch=then, else_branch=other),
             node("Relu", ["picked"], ["out"])]
    m = model(nodes, [("x", ["n", 3])], [("out", None)],
              [const("zero", np.int64(0)), const("one", np.int64(1)), const("axis0", np.array([0], np.int64))], opset=13)
    for rows in (1, 2):
        feeds = {"x": np.arange(-3, 3 * rows - 3, dtype=np.float32).reshape(rows, 3)}
        agree(m, feeds)
        assert "If" not in _plan_ops(compile_model(m), feeds)


def test_outer_constants_become_the_branch_constants_and_fold_there():
    # a branch slicing an outer weight on every call (a recurrent layer's gates inside silero's If): folded once
    then = helper.make_graph([node("Slice", ["w", "starts", "ends"], ["half"]), node("MatMul", ["x", "half"], ["t"])],
                             "then", [], [vi("t")])
    other = helper.make_graph([node("MatMul", ["x", "w"], ["e0"]), node("Slice", ["e0", "zero1", "two1", "one1"], ["e"])],
                              "else", [], [vi("e")])
    nodes = [node("ReduceSum", ["x"], ["s"], keepdims=0), node("Greater", ["s", "zero"], ["c"]),
             node("If", ["c"], ["out"], then_branch=then, else_branch=other)]
    w = np.arange(12, dtype=np.float32).reshape(3, 4) / 10
    m = model(nodes, [("x", [2, 3])], [("out", None)],
              [const("zero", np.float32(0)), const("w", w), const("starts", np.array([0, 0], np.int64)),
               const("ends", np.array([3, 2], np.int64)), const("zero1", np.array([0], np.int64)),
               const("two1", np.array([2], np.int64)), const("one1", np.array([1], np.int64))], opset=13)
    positive = {"x": np.ones((2, 3), np.float32)}
    agree(m, positive)
    agree(m, {"x": -np.ones((2, 3), np.float32)})
    compiled = compile_model(m)
    if_node = next(n for n in compiled.graph.nodes if n.op_type == "If")
    assert "w" in if_node.attrs["then_branch"].constants and "w" not in if_node.implicit
    body = compiled.runner.nodes[-1][1].then_branch
    assert [n.op_type for n in body._lowered_graph().nodes] == ["MatMul"]   # the Slice of the weight folded


def _transposing_loop(perm, shape):
    """Loop(n){h = Transpose(h, perm) * 2} then Relu: the carried value keeps its shape where perm is the identity."""
    body = helper.make_graph([node("Transpose", ["h"], ["t"], perm=perm), node("Mul", ["t", "two"], ["h_out"]),
                              node("Identity", ["cond"], ["cond_out"])],
                             "body", [vi("i", I64, []), vi("cond", B, []), vi("h", F, None)], [vi("cond_out", B, []), vi("h_out", F, None)])
    nodes = [node("Loop", ["n", "", "x"], ["final"], body=body), node("Relu", ["final"], ["out"])]
    return model(nodes, [vi("n", I64, []), ("x", shape)], [("out", None)], [const("two", np.float32(2))], opset=13)


def test_what_follows_a_loop_whose_carried_values_keep_their_shapes_plans_natively():
    m = _transposing_loop([0, 1], [3, 3])
    compiled = compile_model(m)
    x = np.arange(-4, 5, dtype=np.float32).reshape(3, 3)
    for n in (0, 3, 1):   # one plan for every trip count: the signature holds no values
        feeds = {"n": np.array(n, np.int64), "x": x}
        compiled.run(feeds)
        np.testing.assert_array_equal(compiled.run(feeds)["out"], np.maximum(x * 2.0 ** n, 0))
    (plan,) = compiled._plans.values()
    assert plan.stats()["native_nodes"] == 1   # the Relu after the Loop


def test_a_loop_whose_carried_value_changes_shape_each_iteration_is_not_taken_as_steady():
    # [2, 3] -> [3, 2] -> [2, 3]: after 2 iterations the shape is back, after 1 or 3 it is not
    body_model = _transposing_loop([1, 0], [2, 3])
    compiled = compile_model(body_model)
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    for n in (2, 1, 3, 0):
        feeds = {"n": np.array(n, np.int64), "x": x}
        want = np.maximum(x.T if n % 2 else x, 0) * 2.0 ** n
        for _ in range(2):   # the traced run, then the plan's
            np.testing.assert_array_equal(compiled.run(feeds)["out"], want)


def _body_plans(compiled) -> list:
    """The plans the compiled model's Loop bodies made."""
    return [plan for _, kernel in compiled.runner.nodes if hasattr(kernel, "body") for plan in kernel.body._plans.values()]


def test_a_loop_body_of_one_compiled_program_runs_its_iterations_as_a_cycle():
    # three carried values: one computed from itself and the iteration number, one passed through, one computed
    # without reading itself; the caller's arrays must come back unwritten whatever the trip count
    body = helper.make_graph(
        [node("Cast", ["i"], ["i_f"], to=F), node("Mul", ["h", "half"], ["scaled"]), node("Add", ["scaled", "i_f"], ["h_out"]),
         node("Tanh", ["k"], ["t"]), node("Add", ["t", "z"], ["z_ignored"]), node("Mul", ["k", "two"], ["last_out"]),
         node("Identity", ["cond"], ["cond_out"])],
        "body", [vi("i", I64, []), vi("cond", B, []), vi("h", F, [3]), vi("k", F, [3]), vi("last", F, [3])],
        [vi("cond_out", B, []), vi("h_out", F, [3]), vi("k", F, [3]), vi("last_out", F, [3])])
    nodes = [node("Loop", ["n", "", "h0", "k0", "l0"], ["h", "k", "last"], body=body), node("Add", ["h", "last"], ["out"])]
    m = model(nodes, [vi("n", I64, []), ("h0", [3]), ("k0", [3]), ("l0", [3]), ("z", [3])],
              [("out", None), ("k", None)], [const("half", np.float32(0.5)), const("two", np.float32(2))], opset=13)
    compiled = compile_model(m)
    rng = np.random.default_rng(3)
    feeds = {name: rng.standard_normal(3).astype(np.float32) for name in ("h0", "k0", "l0", "z")}
    kept = {name: value.copy() for name, value in feeds.items()}
    for n in (3, 0, 1, 2, 5, 3):
        feeds["n"] = np.array(n, np.int64)
        h, last = feeds["h0"], feeds["l0"]   # onnx.reference returns the zero-trip result for every n here
        for i in range(n):
            h, last = h * np.float32(0.5) + np.float32(i), feeds["k0"] * np.float32(2)
        for _ in range(2):   # the first run of a signature traces; later ones run the plans
            got = compiled.run(feeds)
            np.testing.assert_allclose(got["out"], h + last, rtol=1e-6, atol=1e-6)
            np.testing.assert_array_equal(got["k"], feeds["k0"])
        for name, value in kept.items():
            np.testing.assert_array_equal(feeds[name], value)
    (body_plan,) = _body_plans(compiled)
    cycle = body_plan.cycle(3)
    assert cycle is not None and [kind for kind, _ in cycle.outputs] == ["export", "export", "input", "export"]
    assert cycle.counter is not None and len(cycle.feedback) == 1   # h reads itself; last does not


def test_a_loop_body_with_scan_outputs_or_python_steps_makes_no_cycle():
    body = helper.make_graph(
        [node("Add", ["acc", "step"], ["acc_out"]), node("Identity", ["cond"], ["cond_out"]), node("Mul", ["acc_out", "two"], ["scan"])],
        "body", [vi("i", I64, []), vi("cond", B, []), vi("acc", F, [2])], [vi("cond_out", B, []), vi("acc_out", F, [2]), vi("scan", F, [2])])
    m = model([node("Loop", ["n", "", "init"], ["final", "stacked"], body=body)], [vi("n", I64, []), ("init", [2])],
              [("final", None), ("stacked", None)], [const("step", np.ones(2, np.float32)), const("two", np.float32(2))], opset=13)
    compiled = compile_model(m)
    feeds = {"n": np.array(4, np.int64), "init": np.zeros(2, np.float32)}
    for _ in range(2):
        got = compiled.run(feeds)
    np.testing.assert_array_equal(got["stacked"], 2 * np.arange(1, 5, dtype=np.float32)[:, None].repeat(2, 1))
    (body_plan,) = _body_plans(compiled)
    assert body_plan.steps and body_plan.cycle(1) is None   # two outputs past the carried one: a scan
