"""Every zoo model, compiled by rtd, against onnxruntime on fresh random inputs.

Inputs are drawn from a new seed each run (printed in every failure; set RTD_ZOO_SEED to
replay one). Each model is compiled once and run at every entry of its `dims`, so models
exported with symbolic axes are checked at several batch sizes / sequence lengths. The
reference is onnxruntime with graph optimizations off: the literal graph (its fused quantized
kernels use different arithmetic, see compare.py); dynamically quantized models are checked
against it a quantization at a time (compare.py's dynamic_quantization_split). Models marked
`slow` (BERT-base, ResNet-50) take most of the file's time; deselect them with `-m "not slow"`.
"""
import os

import numpy as np
import pytest

from rtd.errors import Code, RtdError
from rtd.kernels import compile_model

from .compare import (FLOAT_TOLERANCE, dynamic_quantization_split, mismatches, quantization_mismatches,
                      reference_session, run_reference)
from .models import ZOO


def _seed() -> int:
    return int(os.environ.get("RTD_ZOO_SEED") or np.random.SeedSequence().entropy)


def _params():
    return [pytest.param(name, marks=_marks(model), id=name) for name, model in ZOO.items()]


def _marks(model) -> list:
    if model.huge and not os.environ.get("RTD_ZOO_HUGE"):
        return [pytest.mark.skip(reason=f"{model.name} takes ~15 min to build: RTD_ZOO_HUGE=1 runs it "
                                        f"(bench/executor.py --models {model.name} times it against onnxruntime)")]
    return [pytest.mark.slow] if model.big or model.huge else []


@pytest.fixture(scope="module")
def compiled():
    """One compile per model for the whole module; a refusal is kept and re-raised per test."""
    cache = {}

    def get(name):
        if name not in cache:
            try:
                cache[name] = compile_model(ZOO[name].path())
            except RtdError as e:
                cache[name] = e
        if isinstance(cache[name], RtdError):
            raise cache[name]
        return cache[name]

    yield get
    cache.clear()


@pytest.mark.parametrize("name", _params())
def test_matches_onnxruntime(name, compiled):
    zoo = ZOO[name]
    check = _stepwise(zoo, compiled(name)) if zoo.stepwise else _whole(zoo, compiled(name))
    seed = _seed()
    rng = np.random.default_rng(seed)
    for dims in zoo.dims + zoo.dims[:1]:  # back to the first size: a cached plan must serve new inputs
        problems = check(zoo.feeds(rng, dims))
        assert not problems, f"{name} at {dims} (RTD_ZOO_SEED={seed}): " + "; ".join(problems)


def _whole(zoo, model):
    """feeds -> problems: the outputs against onnxruntime's literal graph, within the model's tolerance."""
    reference = reference_session(zoo.path(), threads=2, optimized=False)
    return lambda feeds: mismatches(model.run(feeds), run_reference(reference, feeds), zoo.tolerance)


def _stepwise(zoo, model):
    """feeds -> problems, a quantization at a time (compare.py's dynamic_quantization_split). The tapped model
    must give the served one's outputs bit for bit, so what is checked is what is served."""
    tapped_model, cut_model, steps = dynamic_quantization_split(zoo.path())
    tapped, reference = compile_model(tapped_model), reference_session(cut_model, threads=2, optimized=False)

    def check(feeds):
        served, got = model.run(feeds), tapped.run(feeds)
        quantized = {name: got[name] for _, *outputs in steps for name in outputs}
        want = run_reference(reference, dict(feeds, **quantized))
        return ([f"tapped, {p}" for p in mismatches(served, {name: got[name] for name in served}, 0.0)]
                + [f"quantized, {p}" for p in quantization_mismatches(got, steps)]
                + [f"fed rtd's quantized tensors, {p}" for p in mismatches(served, want, FLOAT_TOLERANCE)])
    return check


@pytest.mark.parametrize("name", _params())
def test_signature_matches_onnxruntime(name, compiled):
    """Names, dtypes and (symbolic) shapes of the inputs, names, dtypes and ranks of the outputs.

    Output dims are compared by rank only: exporters declare output dims loosely (generated
    names, sometimes wrong), and an executor that infers better ones is not wrong.
    """
    model = compiled(name)
    reference = reference_session(ZOO[name].path(), threads=1, optimized=False)
    for ours, theirs in ((model.inputs, reference.get_inputs()), (model.outputs, reference.get_outputs())):
        assert [s.name for s in ours] == [t.name for t in theirs]
        for spec, arg in zip(ours, theirs):
            assert spec.dtype == np.dtype(_ORT_TYPES[arg.type]), f"{spec.name}: {spec.dtype} vs {arg.type}"
            assert len(spec.shape) == len(arg.shape), f"{spec.name}: {spec.shape} vs {arg.shape}"
    for spec, arg in zip(model.inputs, reference.get_inputs()):
        # ORT reports an unnamed dynamic dim as None and a named one by its name, as TensorSpec does
        assert tuple(spec.shape) == tuple(arg.shape), f"{spec.name}: {spec.shape} vs {arg.shape}"


def test_symbolic_model_refuses_wrong_rank():
    """A symbolic dim accepts any size, but not a missing axis: E_INPUT_INVALID, expected vs got."""
    model = compile_model(ZOO["mlp"].path())
    with pytest.raises(RtdError) as e:
        model.run({"x": np.zeros((1024,), np.float32)})
    assert e.value.code is Code.E_INPUT_INVALID


_ORT_TYPES = {"tensor(float)": np.float32, "tensor(int64)": np.int64, "tensor(int32)": np.int32,
              "tensor(uint8)": np.uint8, "tensor(int8)": np.int8, "tensor(bool)": np.bool_}


@pytest.mark.parametrize("name", [p for p in _params() if not ZOO[p.values[0]].big])
def test_weights_as_read_only_views_give_the_same_outputs(name, compiled):
    """The worker serves initializers as read-only views of the sealed model memfd
    (`weights_from_views`): every zoo model gives bit-identical outputs that way, run twice, so no
    kernel or lowering pass writes into a weight or depends on owning it."""
    from rtd.kernels.ir import weights_from_views
    from rtd.kernels.ops import supported
    from rtd.loader import onnx_guard
    data = bytearray(open(ZOO[name].path(), "rb").read())
    views = {}
    proto = onnx_guard.check_model(data, allowed_ops=set(supported()), views=views)
    viewed = compile_model(proto, weights=weights_from_views(proto, views))
    feeds = ZOO[name].feeds(np.random.default_rng(_seed()), ZOO[name].dims[0])
    want = compiled(name).run(feeds)
    for _ in range(2):
        got = viewed.run(feeds)
        assert all(np.array_equal(np.asarray(got[k]), np.asarray(want[k]), equal_nan=True) for k in want), name
