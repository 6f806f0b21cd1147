"""A model whose weights live in onnx external data: `rtctl pack` signs the data file beside
the model, the daemon hands it to the worker as a sealed memfd, and the worker's guard lets
the model's tensors name it (and nothing else): served like onnxruntime serves the model from
its directory. A data file missing from the package, outside it, or altered is refused at
load, and nothing stays loaded."""
import os
import subprocess
import sys

import numpy as np
import onnx
import onnxruntime
import pytest
from onnx import TensorProto, helper, numpy_helper

from rtd.errors import Code, RtdError
from rtd.loader import pack

RTCTL = os.path.join(os.path.dirname(sys.executable), "rtctl")


def external_model(directory, location: str = "weights.bin") -> str:
    """Y = Relu(X·W + b) with W (64×256) and b kept in one external data file; the model's path."""
    rng = np.random.default_rng(7)
    w = numpy_helper.from_array(rng.standard_normal((64, 256)).astype(np.float32), "W")
    b = numpy_helper.from_array(rng.standard_normal(256).astype(np.float32), "b")
    graph = helper.make_graph([helper.make_node("MatMul", ["X", "W"], ["h"]), helper.make_node("Add", ["h", "b"], ["s"]),
                               helper.make_node("Relu", ["s"], ["Y"])], "external",
                              [helper.make_tensor_value_info("X", TensorProto.FLOAT, ["n", 64])],
                              [helper.make_tensor_value_info("Y", TensorProto.FLOAT, ["n", 256])], [w, b])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    path = os.path.join(directory, "model.onnx")
    onnx.save_model(model, path, save_as_external_data=True, all_tensors_to_one_file=True, location=location,
                    size_threshold=0)
    return path


def test_rtctl_pack_signs_the_external_data_and_the_daemon_serves_it(daemon, tmp_path):
    path = external_model(tmp_path)
    model_bytes = open(path, "rb").read()
    assert len(model_bytes) < 1024 and os.path.getsize(tmp_path / "weights.bin") == (64 * 256 + 256) * 4
    assert subprocess.run([RTCTL, "keygen", "--out", "keys"], cwd=tmp_path, capture_output=True).returncode == 0
    done = subprocess.run([RTCTL, "pack", "model.onnx", "--name", "ext", "--version", "1.0.0", "--key", "keys/signing.pem",
                           "--out", "ext.tar"], cwd=tmp_path, capture_output=True, text=True)
    assert done.returncode == 0 and "external data weights.bin" in done.stdout, done.stderr

    files = pack.package_files(model_bytes, name="ext", version="1.0.0", private_key=daemon.keys["acme"],
                               siblings=pack.external_files(model_bytes, str(tmp_path)))
    assert "1/weights.bin" in files and "weights.bin" in files["1/checksum.sha256"].decode()
    client = daemon.client("acme")
    client.load("ext", files)
    x = np.random.default_rng(3).standard_normal((5, 64)).astype(np.float32)
    want = onnxruntime.InferenceSession(path, providers=["CPUExecutionProvider"]).run(None, {"X": x})[0]
    np.testing.assert_allclose(client.infer("ext", {"X": x})["Y"], want, rtol=1e-5, atol=1e-5)
    client.unload("ext")


def test_a_data_file_missing_outside_or_altered_is_refused_at_load(daemon, tmp_path):
    client = daemon.client("acme")
    model_bytes = open(external_model(tmp_path), "rb").read()
    signed = dict(siblings=pack.external_files(model_bytes, str(tmp_path)))
    cases = {   # what is wrong -> (package files, the code the load answers)
        "no data file in the package": (pack.package_files(model_bytes, name="bad", version="1.0.0",
                                                           private_key=daemon.keys["acme"]), Code.E_ONNX_EXTERNAL_DATA),
        "data file altered after signing": ({**pack.package_files(model_bytes, name="bad", version="1.0.0",
                                                                  private_key=daemon.keys["acme"], **signed),
                                              "1/weights.bin": b"\0" * ((64 * 256 + 256) * 4)}, Code.E_DIGEST_MISMATCH),
        "data file too short for its tensors": (pack.package_files(model_bytes, name="bad", version="1.0.0",
                                                                   private_key=daemon.keys["acme"],
                                                                   siblings={"weights.bin": b"\0" * 64}),
                                                Code.E_ONNX_EXTERNAL_DATA),
    }
    for what, (files, code) in cases.items():
        with pytest.raises(RtdError) as e:
            client.load("bad", files)
        assert e.value.code == code, (what, e.value)
        assert "bad" not in [m.name for m in client.index()], what
    escaping = onnx.load(external_model(tmp_path), load_external_data=False)   # onnx itself will not write "../"
    for tensor in escaping.graph.initializer:
        for entry in tensor.external_data:
            if entry.key == "location":
                entry.value = "../weights.bin"
    with pytest.raises(RtdError) as e:
        pack.external_files(escaping.SerializeToString(), str(tmp_path))
    assert e.value.code == Code.E_PATH_UNSAFE
    files = pack.package_files(escaping.SerializeToString(), name="bad", version="1.0.0", private_key=daemon.keys["acme"],
                               **signed)
    with pytest.raises(RtdError) as e:     # the guard in the worker refuses it too, whatever the packer did
        client.load("bad", files)
    assert e.value.code == Code.E_ONNX_EXTERNAL_DATA and "bad" not in [m.name for m in client.index()]
