"""The onnx package's backend tests, run against rtd: the node tests and the model-level ones
shipped inside the package (simple, pytorch-converted, pytorch-operator).

A case is selected when every (domain, op) in its graph (subgraphs included) is claimed by
the registry; a selected case that fails is a failed claim. Every other case is skipped with
its reason: the unclaimed ops it uses, no GPU for a `_cuda` twin, or the 'real' models' cost.
Cases the upstream runner cannot compare are checked here instead.
"""
import os
import unittest

import numpy as np
import onnx
import onnx.backend.test
import pytest
from onnx.backend.test.loader import load_model_tests

from rtd.kernels import backend, backend_cupy, compile_model
from rtd.kernels.ops import supported

CLAIMED = set(supported())  # (domain, op): ai.onnx as "", ai.onnx.ml, com.microsoft
MODEL_KINDS = ("simple", "pytorch-converted", "pytorch-operator")
NO_GPU = backend_cupy.unavailable_reason()
# BackendTest.assert_similar_outputs recurses into a sequence's elements as if they were
# output lists and calls len() on a 0-d tensor, so no backend can pass these through it.
RUNNER_CANNOT_COMPARE = {"test_loop16_seq_none"}
# Bernoulli's expected outputs are one draw of NumPy's global generator, not reproducible by any
# backend (onnxruntime excludes them too): each is checked for shape, dtype and 0/1 values instead.
RANDOM_DRAWS = {f"test_bernoulli{kind}{expanded}" for kind in ("", "_double", "_seed") for expanded in ("", "_expanded")}
# 'real' models (ResNet-50, VGG-19, ...) are light_*.onnx whose expected outputs onnx.reference
# computes at test time: minutes each on the NumPy reference, too slow for this suite.
REAL = "'real' model: expected outputs computed by onnx.reference at test time (minutes); not in this suite"


def _ops(graph) -> set:
    ops = set()
    for node in graph.node:
        ops.add(("" if node.domain == "ai.onnx" else node.domain, node.op_type))
        for attr in node.attribute:
            for g in [attr.g] if attr.HasField("g") else list(attr.graphs):
                ops |= _ops(g)
    return ops


def _model(case):
    return case.model if case.model_dir is None else onnx.load(os.path.join(case.model_dir, "model.onnx"))


def _unclaimed(case) -> str | None:
    """Why a case is not run ("" never: a case with nothing unclaimed is selected)."""
    if case.model_dir is None and case.model is None:
        return "no model in the case"
    ops = _ops(_model(case).graph)
    if not ops:
        return "the graph has no ops"
    missing = sorted(f"{domain or 'ai.onnx'} {op}" for domain, op in ops - CLAIMED)
    return f"unclaimed op(s): {', '.join(missing)}" if missing else None


CASES = [c for kind in ("node", *MODEL_KINDS) for c in load_model_tests(kind=kind)]
UNCLAIMED = {c.name: _unclaimed(c) for c in CASES}
SELECTED = sorted(name for name, reason in UNCLAIMED.items()
                  if reason is None and name not in RUNNER_CANNOT_COMPARE and name not in RANDOM_DRAWS)


def _skip_reason(test_name: str) -> str | None:
    name, device = test_name.rsplit("_", 1)
    if name not in UNCLAIMED:
        return REAL
    if name in RUNNER_CANNOT_COMPARE:
        return "checked by test_case_the_runner_cannot_compare"
    if name in RANDOM_DRAWS:
        return "one random draw: checked by test_random_draw_case"
    if UNCLAIMED[name] is not None:
        return UNCLAIMED[name]
    return f"no GPU: {NO_GPU}" if device == "cuda" and NO_GPU else None


def _test_cases() -> dict:
    """BackendTest's TestCase classes, each test not selected skipped with its reason."""
    classes = onnx.backend.test.BackendTest(backend, __name__).test_cases
    for test_case in classes.values():
        for test in [t for t in vars(test_case) if t.startswith("test_")]:
            if (reason := _skip_reason(test)) is not None:
                setattr(test_case, test, unittest.skip(reason)(getattr(test_case, test)))
    return classes


globals().update(_test_cases())


def test_every_shipped_model_case_with_claimed_ops_is_selected():
    """pytorch-converted and pytorch-operator use only claimed ops; simple lacks exactly this one."""
    model_cases = {c.name: UNCLAIMED[c.name] for c in CASES if c.kind in MODEL_KINDS}
    assert len(model_cases) == 140
    assert {reason for reason in model_cases.values() if reason} == {"unclaimed op(s): ai.onnx.preview.training Gradient"}


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


@pytest.mark.parametrize("case", [c for c in CASES if c.name in RANDOM_DRAWS], ids=lambda c: c.name)
def test_random_draw_case(case):
    """The draw's shape and dtype, every value 0 or 1; a seeded node draws the same twice."""
    model = compile_model(_model(case))
    for inputs, outputs in case.data_sets:
        feeds = {spec.name: value for spec, value in zip(model.inputs, inputs)}
        got = model.run(feeds)[model.outputs[0].name]
        assert got.shape == outputs[0].shape and got.dtype == outputs[0].dtype
        assert set(np.unique(got).tolist()) <= {0, 1}
        if "seed" in case.name:
            np.testing.assert_array_equal(compile_model(_model(case)).run(feeds)[model.outputs[0].name], got)
