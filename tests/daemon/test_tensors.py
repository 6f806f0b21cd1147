"""KServe tensor decoding in the worker (kserve_codec) from the serialized request, and the
client's encoding: every malformed input is INVALID_ARGUMENT before allocation."""
import numpy as np
import pytest

from rtd.daemon.worker.kserve_codec import Caps, decode_grpc
from rtd.tensors import decode_response, encode_inputs, response_parts
from rtd.dtypes import encode_bytes
from rtd.errors import Code, RtdError
from rtd.proto import grpc_service_pb2 as pb

Input = pb.ModelInferRequest.InferInputTensor
LIMIT = 1 << 20


def _request(inputs, raw=()):
    return pb.ModelInferRequest(model_name="m", inputs=inputs, raw_input_contents=list(raw))


def decode_request(request: pb.ModelInferRequest, limit: int) -> dict:
    """The inputs as the worker decodes them from the serialized request."""
    return decode_grpc(request.SerializeToString(), Caps(limit)).inputs


def test_raw_round_trip_all_numeric_types():
    arrays = {f"x{i}": np.arange(6).astype(t).reshape(2, 3) for i, t in
              enumerate(["bool", "uint8", "uint16", "uint32", "uint64", "int8", "int16", "int32", "int64",
                         "float16", "float32", "float64"])}
    tensors, raw = encode_inputs(arrays)
    got = decode_request(_request(tensors, raw), LIMIT)
    for name, a in arrays.items():
        np.testing.assert_array_equal(got[name], a)
        assert got[name].dtype == a.dtype


def test_typed_contents_and_bytes():
    req = _request([Input(name="a", datatype="FP32", shape=[2], contents=pb.InferTensorContents(fp32_contents=[1, 2])),
                    Input(name="s", datatype="BYTES", shape=[2], contents=pb.InferTensorContents(bytes_contents=[b"x", b"yz"]))])
    got = decode_request(req, LIMIT)
    np.testing.assert_array_equal(got["a"], np.array([1, 2], np.float32))
    assert list(got["s"]) == [b"x", b"yz"]
    raw = decode_request(_request([Input(name="s", datatype="BYTES", shape=[2])], [encode_bytes(np.array([b"x", b"yz"], object))]), LIMIT)
    assert list(raw["s"]) == [b"x", b"yz"]


@pytest.mark.parametrize("inputs, raw, message", [
    ([Input(name="a", datatype="FP32", shape=[4])], [b"\0" * 12], "needs 16"),
    ([Input(name="a", datatype="FP33", shape=[1])], [b"\0" * 4], "unknown datatype"),
    ([Input(name="a", datatype="FP32", shape=[-1])], [b""], "negative or overlarge dim"),
    ([Input(name="a", datatype="FP32", shape=[1 << 20, 1 << 10])], [b""], "exceeds the"),
    ([Input(name="a", datatype="FP32", shape=[0, 1 << 30, 1 << 30])], [b""], "overlarge"),
    ([Input(name="a", datatype="FP32", shape=[1])], [], "elements"),
    ([Input(name="a", datatype="FP32", shape=[1]), Input(name="a", datatype="FP32", shape=[1])], [b"\0" * 4] * 2, "twice"),
    ([Input(name="a", datatype="FP32", shape=[1])], [b"\0" * 4, b"\0" * 4], "raw_input_contents for 1"),
    ([Input(name="a", datatype="FP32", shape=[1], contents=pb.InferTensorContents(fp32_contents=[1]))], [b"\0" * 4], "mixed"),
    ([Input(name="a", datatype="FP16", shape=[1], contents=pb.InferTensorContents(fp32_contents=[1]))], [], "only as raw"),
    ([Input(name="a", datatype="INT8", shape=[1], contents=pb.InferTensorContents(fp32_contents=[1]))], [], "given for"),
    ([Input(name="a", datatype="BYTES", shape=[1])], [b"\x09\0\0\0ab"], "longer than the data"),
    ([Input(name="a", datatype="BYTES", shape=[1])], [b"\x01\0\0\0abc"], "after the last"),
    ([Input(name="a", datatype="FP32", shape=[1], parameters={"shared_memory_region": pb.InferParameter(string_param="r")})],
     [b"\0" * 4], "not offered"),
    ([Input(name="a", datatype="FP32", shape=[1], parameters={"binary_data_size": pb.InferParameter(int64_param=8)})],
     [b"\0" * 4], "length of its raw contents"),
    ([Input(name="a", datatype="FP32", shape=[1], parameters={"binary_data_size": pb.InferParameter(string_param="4")})],
     [b"\0" * 4], "length of its raw contents"),
    ([Input(name="a", datatype="FP32", shape=[1], contents=pb.InferTensorContents(fp32_contents=[1]),
            parameters={"binary_data_size": pb.InferParameter(int64_param=4)})], [], "length of its raw contents"),
])
def test_malformed_inputs_refused(inputs, raw, message):
    with pytest.raises(RtdError) as e:
        decode_request(_request(inputs, raw), LIMIT)
    assert e.value.code == Code.E_REQUEST_INVALID and message in e.value.detail


def test_binary_data_size_that_says_the_raw_length_is_accepted():
    """KServe's own gRPC client sends it with every raw input."""
    x = np.arange(3, dtype=np.float32)
    tensor = Input(name="a", datatype="FP32", shape=[3], parameters={"binary_data_size": pb.InferParameter(int64_param=12)})
    np.testing.assert_array_equal(decode_request(_request([tensor], [x.tobytes()]), LIMIT)["a"], x)


def test_response_parts_are_one_message():
    big = np.arange(1 << 16, dtype=np.float32).reshape(256, 256)[:, ::2]   # not contiguous: one copy made
    results = {"y": np.arange(4, dtype=np.int64), "s": np.array([b"ab", b""], dtype=object),
               "z": np.float64(1.5), "e": np.zeros((0, 3), np.int8), "big": big, "flag": np.array([True, False])}
    parts = response_parts("m", "7", "r1", results)
    response = pb.ModelInferResponse.FromString(b"".join(bytes(memoryview(p)) for p in parts))
    assert (response.model_name, response.model_version, response.id) == ("m", "7", "r1")
    assert [o.datatype for o in response.outputs] == ["INT64", "BYTES", "FP64", "INT8", "FP32", "BOOL"]
    assert [list(o.shape) for o in response.outputs] == [[4], [2], [], [0, 3], [256, 128], [2]]
    got = decode_response(response)
    for name, want in results.items():
        np.testing.assert_array_equal(got[name], want)
    assert got["z"].shape == ()


def test_a_contiguous_output_is_sent_from_its_own_memory():
    y = np.arange(1 << 16, dtype=np.float32)
    parts = response_parts("m", "1", "", {"y": y})
    assert np.shares_memory(np.asarray(parts[-1]), y)   # no copy before the transport's frames
