"""scikit-learn models end to end through a real `rtd serve`, driven by an unmodified
tritonclient: a scaler + one-hot pipeline with a string (BYTES) input and string labels, and
a random forest. ZipMap outputs arrive as the FP32 [N, classes] probability tensor."""
import json

import numpy as np
import onnx
import onnxruntime
import pytest
import tritonclient.grpc as tc

from tests.daemon.test_serving import triton
from tests.zoo.sklearn_models import SKLEARN_ZOO, zipmap_as_tensor, zipmap_labels


def _load(daemon, name: str) -> tuple[bytes, tc.InferenceServerClient, dict]:
    with open(SKLEARN_ZOO[name].path(), "rb") as f:
        model = f.read()
    client, headers = triton(daemon, "acme")
    files = {f"file:{path}": data for path, data in daemon.package("acme", model, name).items()}
    client.load_model(name, headers=headers, files=files)
    return model, client, headers


def _expected(model: bytes, feeds: dict) -> dict:
    session = onnxruntime.InferenceSession(model, providers=["CPUExecutionProvider"])
    proto = onnx.load_from_string(model)
    out = {}
    for spec, value in zip(session.get_outputs(), session.run(None, feeds)):
        labels = zipmap_labels(proto, spec.name)
        out[spec.name] = value if labels is None else zipmap_as_tensor(value, labels)
    return out


def _input(name: str, value: np.ndarray) -> tc.InferInput:
    given = tc.InferInput(name, list(value.shape), "BYTES" if value.dtype == object else "FP32")
    given.set_data_from_numpy(value)
    return given


@pytest.mark.parametrize("name", ["pipeline", "forest_classifier"])
def test_sklearn_model_served_through_tritonclient(daemon, name):
    model, client, headers = _load(daemon, name)
    meta = client.get_model_metadata(name, headers=headers)
    outputs = {t.name: (t.datatype, list(t.shape)) for t in meta.outputs}
    classes = len(zipmap_labels(onnx.load_from_string(model), "output_probability"))
    assert outputs["output_probability"] == ("FP32", [-1, classes])
    if name == "pipeline":
        assert ("color", "BYTES") in [(t.name, t.datatype) for t in meta.inputs]
        assert outputs["output_label"][0] == "BYTES"
    feeds = SKLEARN_ZOO[name].feeds(np.random.default_rng(7), 9)
    result = client.infer(name, [_input(k, v) for k, v in feeds.items()], headers=headers)
    want = _expected(model, feeds)
    np.testing.assert_allclose(result.as_numpy("output_probability"), want["output_probability"], rtol=1e-4, atol=1e-5)
    labels = result.as_numpy("output_label")
    if labels.dtype == object:
        labels = np.array([v.decode() for v in labels], dtype=object)
    assert labels.tolist() == want["output_label"].tolist()
    client.unload_model(name, headers=headers)


def test_metadata_states_what_is_served_for_a_label_output_declared_one_row(daemon):
    """onnxmltools declares the LightGBM classifier's label output [1]; a batch of 8 answers 8
    labels, and metadata (and the package's metadata.json) say -1 rows, as served."""
    model, client, headers = _load(daemon, "lightgbm_classifier")
    assert [d.dim_value for d in onnx.load_from_string(model).graph.output[0].type.tensor_type.shape.dim] == [1]
    meta = {t.name: list(t.shape) for t in client.get_model_metadata("lightgbm_classifier", headers=headers).outputs}
    feeds = SKLEARN_ZOO["lightgbm_classifier"].feeds(np.random.default_rng(3), 8)
    result = client.infer("lightgbm_classifier", [_input(k, v) for k, v in feeds.items()], headers=headers)
    assert meta == {"label": [-1], "probabilities": [-1, 3]}, meta
    assert list(result.as_numpy("label").shape) == [8] and list(result.as_numpy("probabilities").shape) == [8, 3]
    assert result.as_numpy("label").tolist() == _expected(model, feeds)["label"].tolist()
    signed = json.loads(daemon.package("acme", model, "lightgbm_classifier")["1/metadata.json"])
    assert {o["name"]: o["shape"] for o in signed["outputs"]} == {"label": [None], "probabilities": [None, 3]}
    client.unload_model("lightgbm_classifier", headers=headers)
