"""The onnx package's node tests, run against rtd for every op type rtd claims.

A case is selected when every op in its graph is claimed by the registry; a selected case
that fails is a failed claim. Unselected cases are skipped by BackendTest.
"""
import onnx.backend.test
from onnx.backend.test.loader import load_model_tests

from rtd.kernels import backend
from rtd.kernels.ops import supported

CLAIMED = {op for (domain, op) in supported() if domain == ""}


def _selected(case) -> bool:
    model = case.model if case.model is not None else None
    if model is None:
        return False
    ops = {n.op_type for n in model.graph.node}
    return bool(ops) and ops <= CLAIMED


SELECTED = sorted(c.name for c in load_model_tests(kind="node") if _selected(c))

_suite = onnx.backend.test.BackendTest(backend, __name__)
_suite.include("^(" + "|".join(SELECTED) + ")_cpu$" if SELECTED else "^$")
globals().update(_suite.test_cases)
