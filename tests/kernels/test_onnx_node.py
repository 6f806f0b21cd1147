"""The onnx package's node tests, run against rtd for every op type rtd claims.

A case is selected when every op in its graph (subgraphs included) is claimed by the
registry; a selected case that fails is a failed claim. Unselected cases are skipped by
BackendTest. Cases the upstream runner cannot compare are checked here instead.
"""
import numpy as np
import onnx.backend.test
import pytest
from onnx.backend.test.loader import load_model_tests

from rtd.kernels import backend, compile_model
from rtd.kernels.ops import supported

CLAIMED = set(supported())  # (domain, op): ai.onnx as "", ai.onnx.ml, com.microsoft
# BackendTest.assert_similar_outputs recurses into a sequence's elements as if they were
# output lists and calls len() on a 0-d tensor, so no backend can pass these through it.
RUNNER_CANNOT_COMPARE = {"test_loop16_seq_none"}


def _ops(graph) -> set:
    ops = set()
    for node in graph.node:
        ops.add(("" if node.domain == "ai.onnx" else node.domain, node.op_type))
        for attr in node.attribute:
            for g in [attr.g] if attr.HasField("g") else list(attr.graphs):
                ops |= _ops(g)
    return ops


def _selected(case) -> bool:
    if case.model is None:
        return False
    ops = _ops(case.model.graph)
    return bool(ops) and ops <= CLAIMED


CASES = [c for c in load_model_tests(kind="node") if _selected(c)]
SELECTED = sorted(c.name for c in CASES if c.name not in RUNNER_CANNOT_COMPARE)

_suite = onnx.backend.test.BackendTest(backend, __name__)
_suite.include("^(" + "|".join(SELECTED) + ")_cpu$" if SELECTED else "^$")
globals().update(_suite.test_cases)


def _same(got, want):
    if isinstance(want, list):
        assert isinstance(got, list) and len(got) == len(want)
        for g, w in zip(got, want):
            _same(g, w)
    else:
        np.testing.assert_allclose(got, want, rtol=1e-3, atol=1e-7)
        assert got.dtype == want.dtype


@pytest.mark.parametrize("case", [c for c in CASES if c.name in RUNNER_CANNOT_COMPARE], ids=lambda c: c.name)
def test_case_the_runner_cannot_compare(case):
    model = compile_model(case.model)
    for inputs, outputs in case.data_sets:
        got = model.run({spec.name: value for spec, value in zip(model.inputs, inputs)})
        for spec, want in zip(model.outputs, outputs):
            _same(got[spec.name], want)
