"""Graph partitioning across devices, decided on the graph (no GPU here): which nodes a GPU plan
runs on the host (the ops the GPU backend lacks: here ai.onnx.ml's Scaler and Normalizer,
which compute on the host), what crosses and how many bytes, with control flow kept whole;
and the rewritten graph, run as a plan on NumPy with the host's identity copies, answers
exactly what the CPU plan answers. Each graph is lowered and traced as CompiledModel does
for a GPU plan (lower_signature), then cut (kernels/partition.py)."""
import numpy as np
import pytest
from onnx import TensorProto, helper

from rtd.kernels import compile_model
from rtd.kernels.lower import lower_signature
from rtd.kernels.partition import DEVICE, HOST, TRANSFER_DOMAIN, HostTransfers, apply, host_only, partition
from rtd.kernels.plan import Plan

from kernel_graphs import const, node

F = TensorProto.FLOAT
ML = "ai.onnx.ml"


def ml_model(nodes, inputs, outputs, initializers=()):
    """A float model importing ai.onnx.ml beside ai.onnx (subgraph nodes included)."""
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info(n, F, s) for n, s in inputs],
                              [helper.make_tensor_value_info(n, F, None) for n in outputs], list(initializers))
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid(ML, 3)])
    m.ir_version = 8
    return m


def scaler(x, y):
    return node("Scaler", [x], [y], domain=ML, offset=[0.5], scale=[2.0])


def cut(m, feeds):
    """The lowered graph of this signature, its shapes, what is static, and its partition."""
    compiled = compile_model(m, disable_passes=("pack_weights",))   # as on a GPU: the device multiplies by the arrays
    compiled.run(feeds)
    env = compiled.runner.trace(dict(zip(compiled.runner.input_names, feeds.values())))
    graph, shapes, static = lower_signature(compiled.graph, dict(env.maps[0], **feeds), compiled.disable)
    return compiled, graph, shapes, static, partition(graph, shapes)


def placed(graph, part) -> dict:
    """op type (and output name) -> where it runs."""
    return {f"{n.op_type}:{n.outputs[0]}": part.device_of(i) for i, n in enumerate(graph.nodes)}


def crossings(part) -> set:
    return {(c.name, c.nbytes, c.to) for c in part.crossings}


def run_rewritten(compiled, graph, shapes, static, part, feeds) -> dict:
    rewritten, shapes, where = apply(graph, part, shapes)
    plan = Plan(rewritten, shapes, static, np, where, HostTransfers())
    return dict(zip(graph.outputs, plan.run(list(feeds.values())))), rewritten, where


def conv_then_host_tail():
    rng = np.random.default_rng(0)
    return ml_model([node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]), node("Relu", ["c"], ["r"]),
                     node("GlobalAveragePool", ["r"], ["g"]), node("Flatten", ["g"], ["f"]), scaler("f", "y")],
                    [("x", [1, 3, 32, 32])], ["y"], [const("w", rng.standard_normal((16, 3, 3, 3)).astype(np.float32))])


def test_only_the_host_tail_runs_on_the_host_and_the_small_tensor_crosses():
    feeds = {"x": np.random.default_rng(1).standard_normal((1, 3, 32, 32)).astype(np.float32)}
    compiled, graph, shapes, static, part = cut(conv_then_host_tail(), feeds)
    where = placed(graph, part)
    assert where["Scaler:y"] == HOST and [w for k, w in where.items() if k != "Scaler:y" and not k.startswith("Flatten")] == \
        [DEVICE] * (len(where) - 2)
    # the input goes up once (12 KiB); 16 floats come back, never the 64 KiB of convolution output
    assert crossings(part) in ({("x", 12288, DEVICE), ("g", 64, HOST)}, {("x", 12288, DEVICE), ("f", 64, HOST)})
    got, rewritten, _ = run_rewritten(compiled, graph, shapes, static, part, feeds)
    np.testing.assert_array_equal(got["y"], compiled.run(feeds)["y"])
    assert [n.op_type for n in rewritten.nodes if n.domain == TRANSFER_DOMAIN] == ["CopyToDevice", "CopyToHost", "AwaitHost"]


def test_the_cut_crosses_before_an_expansion_not_after_it():
    """Scaler on the host, then a Tile that makes its 256 bytes 64 KiB for a MatMul: the Tile runs
    on the device, so 256 bytes go up, not 64 KiB."""
    rng = np.random.default_rng(2)
    m = ml_model([scaler("x", "s"), node("Tile", ["s", "reps"], ["t"]), node("MatMul", ["t", "w"], ["mm"]), node("Relu", ["mm"], ["y"])],
                 [("x", [1, 64])], ["y"], [const("reps", np.array([256, 1], np.int64)), const("w", rng.standard_normal((64, 64)).astype(np.float32))])
    feeds = {"x": rng.standard_normal((1, 64)).astype(np.float32)}
    compiled, graph, shapes, static, part = cut(m, feeds)
    assert {k: v for k, v in placed(graph, part).items() if v == HOST} == {"Scaler:s": HOST}
    assert crossings(part) == {("s", 256, DEVICE), ("y", 65536, HOST)}   # the output comes home either way
    got, _, _ = run_rewritten(compiled, graph, shapes, static, part, feeds)
    np.testing.assert_array_equal(got["y"], compiled.run(feeds)["y"])


def test_a_cheap_op_between_two_host_ops_stays_on_the_host_and_one_copy_serves_every_consumer():
    rng = np.random.default_rng(3)
    w = rng.standard_normal((64, 64)).astype(np.float32)
    m = ml_model([node("MatMul", ["x", "w"], ["a"]), scaler("a", "s"), node("Abs", ["s"], ["r"]),
                  node("Normalizer", ["r"], ["n"], domain=ML, norm="L2"),
                  node("MatMul", ["n", "w"], ["u"]), node("MatMul", ["n", "w2"], ["v"]), node("Add", ["u", "v"], ["y"])],
                 [("x", [4, 64])], ["y"], [const("w", w), const("w2", w * 0.5)])
    feeds = {"x": rng.standard_normal((4, 64)).astype(np.float32)}
    compiled, graph, shapes, static, part = cut(m, feeds)
    where = placed(graph, part)
    assert where["Abs:r"] == HOST   # on the device it would cost two copies of 1 KiB, on the host 1 KiB of work
    assert sum(1 for c in part.crossings if c.name == "n") == 1 and ("n", 1024, DEVICE) in crossings(part)
    got, rewritten, _ = run_rewritten(compiled, graph, shapes, static, part, feeds)
    np.testing.assert_allclose(got["y"], compiled.run(feeds)["y"], rtol=1e-6)
    assert sum(1 for n in rewritten.nodes if n.op_type == "CopyToDevice" and n.inputs == ["n"]) == 1


def if_model(host_branch: bool):
    branch = helper.make_graph([scaler("x", "b") if host_branch else node("Neg", ["x"], ["b"])], "then", [],
                               [helper.make_tensor_value_info("b", F, None)])
    other = helper.make_graph([node("Abs", ["x"], ["o"])], "else", [], [helper.make_tensor_value_info("o", F, None)])
    return ml_model([node("ReduceSum", ["x"], ["total"], keepdims=0), node("Greater", ["total", "zero"], ["c"]),
                     node("If", ["c"], ["z"], then_branch=branch, else_branch=other), node("Relu", ["z"], ["y"])],
                    [("x", [8, 8])], ["y"], [const("zero", np.array(0.0, np.float32))])


@pytest.mark.parametrize("host_branch", [True, False], ids=["host_op_in_a_branch", "device_branches"])
def test_control_flow_is_kept_whole_on_the_side_its_body_needs(host_branch):
    feeds = {"x": np.abs(np.random.default_rng(4).standard_normal((8, 8))).astype(np.float32)}
    compiled, graph, shapes, static, part = cut(if_model(host_branch), feeds)
    (index, if_node), = [(i, n) for i, n in enumerate(graph.nodes) if n.op_type == "If"]
    assert host_only(if_node, graph.opsets) is host_branch
    assert part.device_of(index) == (HOST if host_branch else DEVICE)
    if host_branch:   # x is read inside the branch: the host's copy of it is what the body sees
        got, rewritten, where = run_rewritten(compiled, graph, shapes, static, part, feeds)
        np.testing.assert_array_equal(got["y"], compiled.run(feeds)["y"])
        (rewritten_if,) = [n for n in rewritten.nodes if n.op_type == "If"]
        assert "x" in rewritten_if.implicit   # x arrives on the host: the branch reads it there, uncopied
    else:
        assert part.host == frozenset() and part.crossings == ()


def test_a_graph_the_gpu_backend_runs_whole_is_not_cut():
    rng = np.random.default_rng(5)
    m = ml_model([node("MatMul", ["x", "w"], ["a"]), node("Relu", ["a"], ["y"])], [("x", [2, 8])], ["y"],
                 [const("w", rng.standard_normal((8, 8)).astype(np.float32))])
    compiled, graph, shapes, static, part = cut(m, {"x": np.ones((2, 8), np.float32)})
    assert part.host == frozenset() and part.crossings == () and part.bytes_crossing == 0
    rewritten, _, where = apply(graph, part, shapes)
    assert rewritten is graph and where == [DEVICE] * len(graph.nodes)


def test_the_host_copy_of_a_constant_serves_the_host_nodes():
    """A constant read on both sides: the device keeps its own, the host node reads name@cpu."""
    m = ml_model([node("Add", ["x", "k"], ["a"]), scaler("a", "s"), node("Mul", ["s", "k"], ["h"]),
                  node("Normalizer", ["h"], ["y"], domain=ML, norm="MAX")],
                 [("x", [2, 4])], ["y"], [const("k", np.arange(4, dtype=np.float32))])
    feeds = {"x": np.ones((2, 4), np.float32)}
    compiled, graph, shapes, static, part = cut(m, feeds)
    got, rewritten, where = run_rewritten(compiled, graph, shapes, static, part, feeds)
    np.testing.assert_array_equal(got["y"], compiled.run(feeds)["y"])
    host_reads = {n for node_, w in zip(rewritten.nodes, where) if w == HOST for n in node_.inputs if n in rewritten.constants}
    assert all(name.endswith("@cpu") for name in host_reads)
