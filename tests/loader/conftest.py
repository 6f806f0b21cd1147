"""Shared fixtures for the loader's unit tests: a real RSA-3072 key, a tenant trust store on disk,
and small ONNX models built with onnx.helper."""
import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from rtd.loader import TrustStore, keys


@pytest.fixture(scope="session")
def signer():
    return keys.generate()


@pytest.fixture
def trust_dir(tmp_path, signer):
    directory = tmp_path / "trust"
    directory.mkdir()
    (directory / "signing.pub.pem").write_bytes(keys.public_pem(signer.public_key()))
    return directory


@pytest.fixture
def trust(trust_dir):
    return TrustStore(str(trust_dir))


def add_model(weights=None) -> bytes:
    """y = x + w (w a 1x4 float initializer): small, and runnable by onnxruntime."""
    w = np.arange(4, dtype=np.float32).reshape(1, 4) if weights is None else weights
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])
    graph = helper.make_graph([helper.make_node("Add", ["x", "w"], ["y"])], "g", [x], [y],
                              [numpy_helper.from_array(w, "w")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()


@pytest.fixture
def model_bytes():
    return add_model()
