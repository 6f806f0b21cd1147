"""NegativeLogLikelihoodLoss and SoftmaxCrossEntropyLoss beyond the backend cases: segmentation-
sized inputs with class weights and an ignored label against onnxruntime; refusals by code."""
import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

from rtd.errors import Code, RtdError
from rtd.kernels import compile_model

from kernel_graphs import typed_model

F, I64 = TensorProto.FLOAT, TensorProto.INT64
RNG = np.random.default_rng(3)


def loss_model(op, reduction, ignore_index, weighted, log_prob=False) -> bytes:
    attrs = {"reduction": reduction} | ({} if ignore_index is None else {"ignore_index": ignore_index})
    outputs = ["loss", "log_prob"] if log_prob else ["loss"]
    node = helper.make_node(op, ["x", "t", "w"] if weighted else ["x", "t"], outputs, **attrs)
    inputs = [("x", F), ("t", I64)] + ([("w", F)] if weighted else [])
    return typed_model([node], inputs, [(n, F) for n in outputs], opset=13, ir_version=8)


@pytest.mark.parametrize("op", ["NegativeLogLikelihoodLoss", "SoftmaxCrossEntropyLoss"])
@pytest.mark.parametrize("reduction", ["none", "sum", "mean"])
@pytest.mark.parametrize("ignore_index,weighted", [(None, False), (255, True), (-1, False), (2, True)])
def test_losses_match_onnxruntime(op, reduction, ignore_index, weighted):
    x = RNG.standard_normal((4, 21, 32, 24)).astype(np.float32)
    t = RNG.integers(0, 21, (4, 32, 24)).astype(np.int64)
    if ignore_index is not None:
        t[RNG.random(t.shape) < 0.2] = ignore_index
    feeds = {"x": x, "t": t} | ({"w": RNG.uniform(0.1, 2, 21).astype(np.float32)} if weighted else {})
    data = loss_model(op, reduction, ignore_index, weighted, log_prob=op == "SoftmaxCrossEntropyLoss")
    ours = list(compile_model(data).run(feeds).values())
    theirs = ort.InferenceSession(data, providers=["CPUExecutionProvider"]).run(None, feeds)
    for a, b in zip(ours, theirs):
        assert a.shape == b.shape and a.dtype == b.dtype
        np.testing.assert_allclose(a, b, rtol=2e-5, atol=1e-5)


def test_a_target_outside_the_classes_is_refused():
    data = loss_model("NegativeLogLikelihoodLoss", "mean", -100, False)
    with pytest.raises(RtdError) as e:
        compile_model(data).run({"x": np.zeros((2, 3), np.float32), "t": np.array([1, 3], np.int64)})
    assert e.value.code is Code.E_INPUT_INVALID
    (loss,) = compile_model(data).run({"x": np.zeros((2, 3), np.float32), "t": np.array([-100, 2], np.int64)}).values()
    assert loss == 0
