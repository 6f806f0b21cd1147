"""The lowering passes on real exports: every small zoo model's optimised plan computes what the
unoptimised interpreter computes, at each of its shape signatures, and the expected fusions fire.
(Agreement with onnxruntime is tests/zoo's job; this isolates the passes.)
"""
import numpy as np
import pytest

from rtd.kernels import compile_model
from tests.zoo.models import ZOO

EXPECTED = {  # fused kernels each model's plan must contain
    "mlp": {"MatMulBias"},
    "small_cnn": {"ConvActivation", "MatMulBias"},
    "minilm": {"LayerNorm", "Attention", "MatMulBias"},
    "minilm_dynamo": {"LayerNorm", "Attention", "MatMulBias"},
    "detector": {"ConvActivation"},   # its SiLU chains go into the convolutions (lower/chains.fuse_conv_chains)
    "control_flow": set(),
    "lstm_tagger": set(),
    "cnn_qdq": {"QLinearConv", "QLinearGlobalAveragePool"},   # QDQ pairs fused as onnxruntime fuses them
    "cnn_qop": set(),
    "minilm_qdyn": {"LayerNorm", "Attention", "Gelu"},
}
SMALL_DIMS = {"minilm": {"batch": 2, "seq": 24}, "minilm_dynamo": {"batch": 2, "seq": 24}, "minilm_qdyn": {"batch": 1, "seq": 16}}


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_optimised_plan_matches_the_interpreter_on_a_real_export(name):
    zoo = ZOO[name]
    path = zoo.path()
    fast, plain = compile_model(path), compile_model(path, optimize=False)
    rng = np.random.default_rng(7)
    dims_list = [SMALL_DIMS[name]] if name in SMALL_DIMS else list(zoo.dims[:2])
    for dims in dims_list:
        feeds = zoo.feeds(rng, dims)
        want = plain.run(feeds)
        for _ in range(2):  # the traced run, then the cached plan
            got = fast.run(feeds)
            for key, value in want.items():
                np.testing.assert_allclose(got[key], value, rtol=1e-4, atol=1e-4 * max(1.0, float(np.abs(value).max())))
        ops = set(fast.plan_stats(feeds)["ops"])
        assert EXPECTED[name] <= ops, ops
