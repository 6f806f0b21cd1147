"""What real exporters write, end to end (rtctl pack → verify → guard → compile → run): dims of
-1, 0 and none at all, long symbolic names, opset domains declared and never used, and a
contrib op rtd has no kernel for, which is refused at load naming domain, op and opset."""
import json
import subprocess
import sys

import numpy as np
import onnxruntime
import pytest
from onnx import TensorProto, helper

from rtd.errors import Code, RtdError
from rtd.kernels import compile_model
from rtd.kernels.ops import supported
from rtd.loader import TrustStore, keys, metadata, onnx_guard, pack, verify_package

RTCTL = [sys.executable, "-m", "rtd.cli.rtctl"]
NAME_4096 = "h" * metadata.MAX_DIM_NAME
EXPRESSION = " + ".join(f"floor((width_{i} - 1)/2)" for i in range(14))[:330]   # an exporter's output dim


def model(inputs, outputs, nodes, opsets=(("", 17),)) -> bytes:
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info(n, TensorProto.FLOAT, d) for n, d in inputs],
                              [helper.make_tensor_value_info(n, TensorProto.FLOAT, d) for n, d in outputs])
    return helper.make_model(graph, ir_version=8, opset_imports=[helper.make_opsetid(d, v) for d, v in opsets]
                             ).SerializeToString()


def exporter_model() -> bytes:
    """-1 and absent dims, a 4096-character input dim name, a 330-character output expression,
    a real zero-size dim, and two domains declared for nothing."""
    return model([("x", [-1, 3, NAME_4096, None]), ("z", [0, 2])],
                 [("y", [-1, 3, EXPRESSION, None]), ("w", [0, 2])],
                 [helper.make_node("Relu", ["x"], ["y"]), helper.make_node("Neg", ["z"], ["w"])],
                 opsets=(("", 17), ("ai.onnx.ml", 3), ("com.microsoft.nchwc", 1)))


def contrib_model() -> bytes:
    """A com.microsoft op rtd does not claim (onnxruntime's WordConvEmbedding), as exporters declare it."""
    node = helper.make_node("WordConvEmbedding", ["x", "w", "r"], ["y"], domain="com.microsoft")
    return model([("x", [-1, 1, 4]), ("w", [1, 4, 8]), ("r", [1, 2, 8])], [("y", None)], [node],
                 opsets=(("", 12), ("com.microsoft", 1), ("com.microsoft.nchwc", 1)))


@pytest.fixture(scope="module")
def operator(tmp_path_factory):
    """A working directory with a signing key, and the tenant's trust store for it."""
    home = tmp_path_factory.mktemp("operator")
    keys.write_keypair(str(home))
    (home / "trust").mkdir()
    (home / "signing.pub.pem").rename(home / "trust" / "signing.pub.pem")
    return home


def rtctl_pack(home, model_bytes: bytes, out: str):
    (home / f"{out}.onnx").write_bytes(model_bytes)
    return subprocess.run([*RTCTL, "pack", f"{out}.onnx", "--name", out, "--version", "1.0.0",
                           "--key", "signing.pem", "--out", out], cwd=home, capture_output=True, text=True, timeout=120)


def load(home, out: str):
    """What the daemon does with a package: verify it, then (in the worker) guard and compile."""
    with verify_package(str(home / out), trust=TrustStore(str(home / "trust")), tenant="t", rollback=None) as package:
        proto = onnx_guard.check_model(package.model.data, allowed_ops=set(supported()))
        return package.metadata, compile_model(proto)


def test_exporter_dims_pack_load_and_run_like_onnxruntime(operator):
    done = rtctl_pack(operator, exporter_model(), "exporter")
    assert done.returncode == 0, done.stderr
    meta, compiled = load(operator, "exporter")
    assert [(t["name"], t["shape"]) for t in meta["inputs"]] == [("x", [None, 3, NAME_4096, None]), ("z", [0, 2])]
    assert [(t["name"], t["shape"]) for t in meta["outputs"]] == [("y", [None, 3, EXPRESSION, None]), ("w", [0, 2])]
    written = json.loads((operator / "exporter" / "1" / "metadata.json").read_text())
    assert written["inputs"] == meta["inputs"]
    assert [s.shape for s in compiled.inputs] == [(None, 3, NAME_4096, None), (0, 2)]
    session = onnxruntime.InferenceSession(exporter_model(), providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(0)
    for shape in [(1, 3, 48, 192), (2, 3, 5, 7)]:
        feeds = {"x": rng.standard_normal(shape, dtype=np.float32), "z": np.zeros((0, 2), np.float32)}
        got = compiled.run(feeds)
        for name, want in zip(["y", "w"], session.run(["y", "w"], feeds)):
            np.testing.assert_array_equal(got[name], want)


def test_a_zero_dim_stays_exact_and_named_dims_must_agree():
    compiled = compile_model(model([("a", [0, "n"]), ("b", [-1, "n"])], [("c", None)],
                                   [helper.make_node("Add", ["a", "b"], ["c"])]))
    assert compiled.run({"a": np.ones((0, 4), np.float32), "b": np.ones((1, 4), np.float32)})["c"].shape == (0, 4)
    for a, b, words in [((1, 4), (1, 4), "expected shape [0, 'n']"), ((0, 4), (1, 5), "same symbolic dim 'n'")]:
        with pytest.raises(RtdError) as e:
            compiled.run({"a": np.ones(a, np.float32), "b": np.ones(b, np.float32)})
        assert e.value.code is Code.E_INPUT_INVALID and words in e.value.detail


def test_paddle2onnx_question_marks_are_free_dims_not_one_shared_name():
    """paddle2onnx writes "?" for every free dim (PP-OCR's classifier: height and width both "?");
    the crops its package feeds are 48x192, so two "?" dims must not be held equal (onnxruntime
    does not either), while a real shared name still is."""
    compiled = compile_model(model([("x", [1, "?", "?"]), ("y", ["n", "n"])], [("z", None), ("w", None)],
                                   [helper.make_node("Relu", ["x"], ["z"]), helper.make_node("Relu", ["y"], ["w"])]))
    out = compiled.run({"x": np.ones((1, 48, 192), np.float32), "y": np.ones((3, 3), np.float32)})
    assert out["z"].shape == (1, 48, 192)
    with pytest.raises(RtdError) as e:
        compiled.run({"x": np.ones((1, 48, 192), np.float32), "y": np.ones((3, 4), np.float32)})
    assert e.value.code is Code.E_INPUT_INVALID and "same symbolic dim 'n'" in e.value.detail


def test_a_dim_name_over_4096_characters_is_refused_by_pack_and_by_the_guard(operator):
    too_long = model([("x", [NAME_4096 + "h"])], [("y", None)], [helper.make_node("Relu", ["x"], ["y"])])
    done = rtctl_pack(operator, too_long, "too-long")
    assert done.returncode != 0 and done.stderr.startswith("E_METADATA_INVALID: ")
    assert "at most 4096 characters" in done.stderr and len(done.stderr.strip().splitlines()) == 1
    assert not (operator / "too-long").exists()
    with pytest.raises(RtdError) as e:
        onnx_guard.check_model(too_long)
    assert e.value.code is Code.E_ONNX_LIMIT and "4096" in e.value.detail


def test_metadata_json_stays_under_its_cap_as_a_whole():
    wide = [{"name": f"t{i}", "dtype": "FLOAT", "shape": [NAME_4096] * metadata.MAX_DIMS} for i in range(4)]
    meta = pack.build_metadata(b"", name="wide", version="1.0.0", counter=1, signature=(wide, [], {}))
    with pytest.raises(RtdError) as e:
        metadata.render(meta)
    assert e.value.code is Code.E_METADATA_INVALID and f"over the {metadata.MAX_BYTES}-byte cap" in e.value.detail
    assert len(metadata.render({**meta, "inputs": wide[:3]})) <= metadata.MAX_BYTES == 1 << 20


@pytest.mark.parametrize("dims", [[-2], ["x" * 4097], [2 ** 63], [1.5]])
def test_metadata_refuses_what_no_model_states(dims):
    meta = pack.build_metadata(b"", name="m", version="1.0.0", counter=1, signature=([], [], {}))
    with pytest.raises(RtdError) as e:
        metadata.validate({**meta, "inputs": [{"name": "x", "dtype": "FLOAT", "shape": dims}]})
    assert e.value.code is Code.E_METADATA_INVALID and "inputs 'x'" in e.value.detail


def test_an_unclaimed_contrib_op_is_refused_at_load_naming_domain_op_and_opset(operator):
    done = rtctl_pack(operator, contrib_model(), "contrib")   # packing takes any op: the daemon's worker decides
    assert done.returncode == 0, done.stderr
    with pytest.raises(RtdError) as e:
        load(operator, "contrib")
    assert e.value.code is Code.E_ONNX_OP_FORBIDDEN
    assert e.value.detail == "com.microsoft WordConvEmbedding (opset 1)"
    with pytest.raises(RtdError) as e:
        compile_model(contrib_model())
    assert e.value.code is Code.E_OP_UNSUPPORTED and e.value.detail == "com.microsoft WordConvEmbedding (opset 1)"


def test_an_unknown_attribute_is_refused_naming_the_op():
    relu = model([("x", [2])], [("y", None)], [helper.make_node("Relu", ["x"], ["y"], alpha=1.0)])
    with pytest.raises(RtdError) as e:
        compile_model(relu)
    assert e.value.code is Code.E_OP_UNSUPPORTED and e.value.detail.startswith("ai.onnx Relu (opset 17): attribute(s) ['alpha']")
