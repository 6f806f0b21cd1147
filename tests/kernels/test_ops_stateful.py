"""CausalConvWithState and LinearAttention beyond the backend cases: a long sequence fed in
chunks through the carried state equals the whole sequence at once; the convolution against
onnxruntime's depthwise Conv; refusals by code."""
import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

from rtd.errors import Code, RtdError
from rtd.kernels import compile_model

from kernel_graphs import typed_model

F = TensorProto.FLOAT
RNG = np.random.default_rng(9)


def one_node(node, inputs, outputs, opset=27) -> bytes:
    return typed_model([node], inputs, outputs, opset=opset, ir_version=13)


@pytest.mark.parametrize("activation", ["none", "silu"])
def test_causal_conv_in_chunks_equals_one_pass_and_onnxruntime_conv(activation):
    b, c, length, k = 2, 48, 300, 4
    x = RNG.standard_normal((b, c, length)).astype(np.float32)
    w = RNG.standard_normal((c, 1, k)).astype(np.float32)
    bias = RNG.standard_normal(c).astype(np.float32)
    model = compile_model(one_node(helper.make_node("CausalConvWithState", ["x", "w", "bias", "past"], ["y", "present"],
                                                    activation=activation), [("x", F), ("w", F), ("bias", F), ("past", F)],
                                   [("y", F), ("present", F)]))
    whole = model.run({"x": x, "w": w, "bias": bias, "past": np.zeros((b, c, k - 1), np.float32)})
    state, pieces = np.zeros((b, c, k - 1), np.float32), []
    for start, stop in [(0, 1), (1, 3), (3, 120), (120, 121), (121, 300)]:
        step = model.run({"x": x[:, :, start:stop], "w": w, "bias": bias, "past": state})
        pieces.append(step["y"])
        state = step["present"]
    np.testing.assert_allclose(np.concatenate(pieces, axis=2), whole["y"], rtol=1e-6, atol=1e-6)
    np.testing.assert_array_equal(state, x[:, :, -(k - 1):])
    conv = helper.make_node("Conv", ["x", "w", "bias"], ["y"], group=c, pads=[k - 1, 0])
    (want,) = ort.InferenceSession(one_node(conv, [("x", F), ("w", F), ("bias", F)], [("y", F)], opset=17),
                                   providers=["CPUExecutionProvider"]).run(None, {"x": x, "w": w, "bias": bias})
    if activation == "silu":
        want = want / (1 + np.exp(-want))
    np.testing.assert_allclose(whole["y"], want, rtol=1e-5, atol=1e-5)


def linear_attention_by_the_definition(q, k, v, s, decay, beta, hq, hkv, rule):
    """The spec's recurrence, one batch row, head and token at a time."""
    b, t, _ = q.shape
    dk, dv = q.shape[-1] // hq, v.shape[-1] // hkv
    out = np.zeros((b, t, hq, dv))
    s = s.astype(np.float64).copy()
    for n in range(b):
        for h in range(hkv):
            for i in range(t):
                kk, vv = k[n, i, h * dk:(h + 1) * dk], v[n, i, h * dv:(h + 1) * dv]
                if rule in ("gated", "gated_delta"):
                    g = decay[n, i, h * dk:(h + 1) * dk] if decay.shape[-1] == hkv * dk else decay[n, i, h]
                    s[n, h] *= np.exp(g)[..., None] if np.ndim(g) else np.exp(g)
                if rule in ("delta", "gated_delta"):
                    vv = beta[n, i, h if beta.shape[-1] == hkv else 0] * (vv - s[n, h].T @ kk)
                s[n, h] += np.outer(kk, vv)
                for g_ in range(hq // hkv):
                    head = h * (hq // hkv) + g_
                    out[n, i, head] = (q[n, i, head * dk:(head + 1) * dk] @ s[n, h]) / np.sqrt(dk)
    return out.reshape(b, t, hq * dv), s


@pytest.mark.parametrize("rule,per_key_decay", [("linear", False), ("gated", True), ("delta", False), ("gated_delta", False),
                                                ("gated_delta", True)])
def test_linear_attention_prefill_then_decode_matches_the_definition(rule, per_key_decay):
    b, t, hq, hkv, dk, dv = 2, 12, 6, 2, 8, 5
    q = RNG.standard_normal((b, t, hq * dk)).astype(np.float32)
    k = RNG.standard_normal((b, t, hkv * dk)).astype(np.float32)
    k /= np.linalg.norm(k.reshape(b, t, hkv, dk), axis=-1).repeat(dk, axis=-1).reshape(k.shape)
    v = RNG.standard_normal((b, t, hkv * dv)).astype(np.float32)
    decay = -RNG.uniform(0.01, 0.5, (b, t, hkv * dk if per_key_decay else hkv)).astype(np.float32)
    beta = RNG.uniform(0.1, 0.9, (b, t, hkv)).astype(np.float32)
    gated, delta = rule in ("gated", "gated_delta"), rule in ("delta", "gated_delta")
    names = ["q", "k", "v", "past", "decay" if gated else "", "beta" if delta else ""]
    node = helper.make_node("LinearAttention", names, ["y", "present"], q_num_heads=hq, kv_num_heads=hkv, update_rule=rule)
    inputs = [(n, F) for n in names if n]
    model = compile_model(one_node(node, inputs, [("y", F), ("present", F)]))
    past = RNG.standard_normal((b, hkv, dk, dv)).astype(np.float32) * 0.1
    feeds = {"q": q, "k": k, "v": v, "past": past} | ({"decay": decay} if gated else {}) | ({"beta": beta} if delta else {})
    whole = model.run(feeds)
    want_y, want_s = linear_attention_by_the_definition(q, k, v, past, decay, beta, hq, hkv, rule)
    np.testing.assert_allclose(whole["y"], want_y, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(whole["present"], want_s, rtol=1e-4, atol=1e-4)
    state = past   # the same tokens one decode step at a time
    for i in range(t):
        step = model.run({name: value[:, i:i + 1] if name != "past" else state for name, value in feeds.items()})
        np.testing.assert_allclose(step["y"][:, 0], whole["y"][:, i], rtol=1e-4, atol=1e-4)
        state = step["present"]


def test_linear_attention_refusals():
    node = helper.make_node("LinearAttention", ["q", "k", "v"], ["y"], q_num_heads=2, kv_num_heads=1, update_rule="gated")
    model = one_node(node, [("q", F), ("k", F), ("v", F)], [("y", F)])
    x = np.zeros((1, 2, 8), np.float32)
    with pytest.raises(RtdError) as e:   # gated without its decay
        compile_model(model).run({"q": x, "k": x[..., :4], "v": x})
    assert e.value.code is Code.E_MODEL_INVALID
    node = helper.make_node("LinearAttention", ["q", "k", "v"], ["y"], q_num_heads=3, kv_num_heads=2, update_rule="linear")
    with pytest.raises(RtdError) as e:
        compile_model(one_node(node, [("q", F), ("k", F), ("v", F)], [("y", F)]))
    assert e.value.code is Code.E_MODEL_INVALID


def test_flex_attention_with_a_causal_score_mod_and_gqa_matches_numpy():
    """score_mod reads a mask from the enclosing graph; prob_mod halves the probabilities."""
    b, hq, hkv, length, e = 2, 8, 2, 17, 16
    q = RNG.standard_normal((b, hq, length, e)).astype(np.float32)
    k = RNG.standard_normal((b, hkv, length, e)).astype(np.float32)
    v = RNG.standard_normal((b, hkv, length, 24)).astype(np.float32)
    mask = np.tril(np.ones((length, length), bool))
    tensor = helper.make_tensor_value_info
    score_mod = helper.make_graph([helper.make_node("Where", ["mask", "s", "neg"], ["out"])], "score_mod",
                                  [tensor("s", F, None)], [tensor("out", F, None)],
                                  [helper.make_tensor("neg", F, [], [-np.inf])])
    prob_mod = helper.make_graph([helper.make_node("Mul", ["p", "half"], ["out"])], "prob_mod", [tensor("p", F, None)],
                                 [tensor("out", F, None)], [helper.make_tensor("half", F, [], [0.5])])
    node = helper.make_node("FlexAttention", ["q", "k", "v"], ["y"], domain="ai.onnx.preview", score_mod=score_mod,
                            prob_mod=prob_mod, scale=0.2)
    graph = helper.make_graph([node], "g", [tensor(n, F, None) for n in "qkv"] + [tensor("mask", TensorProto.BOOL, None)],
                              [tensor("y", F, None)])
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 26), helper.make_opsetid("ai.onnx.preview", 1)])
    m.ir_version = 13
    (y,) = compile_model(m.SerializeToString()).run({"q": q, "k": k, "v": v, "mask": mask}).values()
    kk, vv = np.repeat(k, hq // hkv, axis=1), np.repeat(v, hq // hkv, axis=1)
    scores = np.where(mask, q.astype(np.float64) @ kk.swapaxes(-1, -2) * 0.2, -np.inf)
    probs = np.exp(scores - scores.max(-1, keepdims=True))
    probs /= probs.sum(-1, keepdims=True)
    np.testing.assert_allclose(y, 0.5 * probs @ vv, rtol=1e-5, atol=1e-5)
