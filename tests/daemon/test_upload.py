"""daemon/fronts/upload.py: a load request read in place from its spool file. The files it
finds seal to exactly the bytes protobuf (gRPC) or json+base64 (REST) would have decoded,
malformed requests are E_REQUEST_INVALID, and reading a big request allocates a bounded
amount of memory whatever its size (tracemalloc's peak, not a clock)."""
import base64
import json
import os
import random
import tracemalloc

import pytest

from rtd.daemon.fronts.upload import read_grpc_load, read_rest_load
from rtd.errors import Code, RtdError
from rtd.proto import grpc_service_pb2 as pb


class Spool:
    """What the transport hands a load handler: an unlinked file holding the body."""

    def __init__(self, body: bytes, tmp_path):
        self.fd = os.open(tmp_path, os.O_TMPFILE | os.O_RDWR)
        for start in range(0, len(body), 1 << 24):
            os.pwrite(self.fd, body[start:start + (1 << 24)], start)
        self.size, self.charge = len(body), None

    def __len__(self) -> int:
        return self.size


def sealed(upload) -> dict:
    out = {}
    for path, extent in upload.items():
        f = extent.seal(path, 1 << 40, Code.E_ONNX_LIMIT)
        out[path] = f.bytes()
        f.close()
    upload.close()
    return out


def package(seed: int) -> dict:
    rng = random.Random(seed)
    return {f"1/{name}": rng.randbytes(rng.randrange(0, 300000)) for name in ("model.onnx", "metadata.json", "weights.bin")}


def grpc_body(name: str, files: dict, config: str | None = None) -> bytes:
    params = {f"file:{p}": pb.ModelRepositoryParameter(bytes_param=b) for p, b in files.items()}
    if config is not None:
        params["config"] = pb.ModelRepositoryParameter(string_param=config)
    return pb.RepositoryModelLoadRequest(repository_name="r", model_name=name, parameters=params).SerializeToString()


def rest_body(files: dict, config: str | None = None, escape_slashes: bool = False) -> bytes:
    params = {f"file:{p}": base64.b64encode(b).decode() for p, b in files.items()}
    if config is not None:
        params["config"] = config
    text = json.dumps({"parameters": params}, indent=1)
    return (text.replace("/", "\\/") if escape_slashes else text).encode()


@pytest.mark.parametrize("seed", range(4))
def test_grpc_files_seal_to_what_protobuf_decodes(tmp_path, seed):
    files = package(seed)
    name, upload = read_grpc_load(Spool(grpc_body("mlp", files, '{"max_batch_size": 4}'), tmp_path))
    assert name == "mlp" and upload.config == '{"max_batch_size": 4}'
    assert sealed(upload) == files


@pytest.mark.parametrize("seed", range(4))
def test_rest_files_seal_to_what_json_and_base64_decode(tmp_path, seed):
    files = package(seed)
    upload = read_rest_load(Spool(rest_body(files, 'ünïcode "config"', escape_slashes=seed % 2 == 1), tmp_path))
    assert upload.config == 'ünïcode "config"'
    assert sealed(upload) == files


def test_an_empty_request_names_no_files(tmp_path):
    for body in (b"", b"  \n", b"{}", b'{"parameters": {}}'):
        upload = read_rest_load(Spool(body, tmp_path))
        assert not upload and upload.config is None
        upload.close()
    name, upload = read_grpc_load(Spool(pb.RepositoryModelLoadRequest(model_name="m").SerializeToString(), tmp_path))
    assert name == "m" and not upload


@pytest.mark.parametrize("body", [
    b'{"parameters": {"file:1/model.onnx": "not base64!"}}',
    b'{"parameters": {"file:1/model.onnx": "QUJD\\nRA=="}}',
    b'{"parameters": {"file:1/model.onnx": "QUJDRA="}}',
    b'{"parameters": {"file:1/model.onnx": 5}}',
    b'{"parameters": {"file:1/model.onnx": "QUJD"',
    b'{"parameters": {"other": "x"}}',
    b'{"parameters": {"config": {"nested": 1}}}',
    b'{"something_else": {}}',
    b'{"parameters": {}} {}',
    b'[1, 2]',
    b'{"parameters": {"file:1/model.onnx": "QUJD" "QUJD"}}',
], ids=["alphabet", "escape", "length", "number", "truncated", "unknown-key", "nested", "top-key", "two-values",
        "array", "no-comma"])
def test_malformed_rest_requests_are_refused(tmp_path, body):
    with pytest.raises(RtdError) as e:
        sealed(read_rest_load(Spool(body, tmp_path)))
    assert e.value.code is Code.E_REQUEST_INVALID


def test_malformed_grpc_requests_are_refused(tmp_path):
    good = grpc_body("m", {"1/model.onnx": b"x" * 100})
    cases = {
        "truncated": good[:-10],
        "string file": pb.RepositoryModelLoadRequest(model_name="m", parameters={
            "file:1/model.onnx": pb.ModelRepositoryParameter(string_param="x")}).SerializeToString(),
        "unknown parameter": pb.RepositoryModelLoadRequest(model_name="m", parameters={
            "other": pb.ModelRepositoryParameter(bool_param=True)}).SerializeToString(),
        "group wire type": b"\x13",
        "varint too long": b"\x10" + b"\xff" * 11,
    }
    for what, body in cases.items():
        with pytest.raises(RtdError) as e:
            read_grpc_load(Spool(body, tmp_path))
        assert e.value.code is Code.E_REQUEST_INVALID, what


@pytest.mark.parametrize("protocol", ["grpc", "rest"])
def test_reading_a_big_request_allocates_a_bounded_amount(tmp_path, protocol):
    big = {"1/weights.bin": os.urandom(48 << 20), "1/model.onnx": b"m" * 1000}
    body = grpc_body("m", big) if protocol == "grpc" else rest_body(big)
    spool = Spool(body, tmp_path)
    del body
    tracemalloc.start()
    try:
        if protocol == "grpc":
            _, upload = read_grpc_load(spool)
        else:
            upload = read_rest_load(spool)
        f = upload["1/weights.bin"].seal("w", 1 << 40, Code.E_ONNX_LIMIT)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert f.size == 48 << 20 and peak < 8 << 20, f"{peak} bytes allocated reading a {48 << 20}-byte file"
    f.close()
    upload.close()
