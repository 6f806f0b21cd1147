"""A load request read where it lies, in its spool file: the gRPC walk (rtd/load_request.py via
serving/uploads.py) and the REST lexer the confined upload decoder runs (daemon/worker/upload.py).
The files found seal to exactly the bytes protobuf or json+base64 would have decoded, malformed
requests are E_REQUEST_INVALID, and reading a big request allocates a bounded amount of memory
whatever its size (tracemalloc's peak, not a clock). Against a real `rtd serve`, a REST upload
bigger than a control call is decoded by a confined process of the tenant's."""
import base64
import json
import os
import random
import subprocess
import tracemalloc

import numpy as np
import pytest

from rtd.daemon.serving.uploads import SMALL_BODY, DecodedFile, Upload, from_grpc
from tests.daemon.conftest import mlp
from rtd.errors import Code, RtdError
from rtd.proto import grpc_service_pb2 as pb

CAPS = {"max_files": 64, "max_file_bytes": 1 << 40, "max_total_bytes": 1 << 40}


def read_grpc_load(spool):
    return from_grpc(spool)


def read_rest_load(spool):
    """The lexer the decoder runs, in this process (from_rest reads a body up to SMALL_BODY in place)."""
    from rtd.daemon.worker.upload import read_load_request
    upload = Upload(spool)
    files, upload.config = read_load_request(upload.fd, upload.size, CAPS)
    for f in files:
        upload.add(f.path, DecodedFile(f.fd, f.size))
    return upload


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


def rest_load(d, name: str, body: bytes, tmp_path) -> tuple[int, bytes]:
    path = tmp_path / "body.json"
    path.write_bytes(body)
    done = subprocess.run(["curl", "-sS", "-o", "-", "-w", "\n%{http_code}", "--unix-socket", os.path.join(d.state, "rtd-rest.sock"),
                           "-H", f"Authorization: Bearer {d.tokens['acme']}", "--data-binary", f"@{path}",
                           f"http://rtd/v2/repository/models/{name}/load"], capture_output=True, timeout=120)
    body, _, status = done.stdout.rpartition(b"\n")
    return int(status), body


def test_a_rest_upload_is_decoded_by_a_confined_process_of_the_tenant(fresh_daemon, tmp_path):
    d = fresh_daemon()
    files = d.package("acme", mlp(1, inner=8192), "wide")
    body = rest_body(files)
    assert len(body) > SMALL_BODY
    status, answer = rest_load(d, "wide", body, tmp_path)
    assert status == 200, answer
    assert d.client("acme").infer("wide", {"X": np.ones((1, 4), np.float32)})["Y"].shape == (1, 8192)
    assert "event=upload_decoded tenant=acme files=4" in d.read_log() and "confined=True" in d.read_log()
    bad = body[:-200] + b'!' * 100 + body[-100:]                       # not base64, past what root reads in place
    status, answer = rest_load(d, "wide", bad, tmp_path)
    assert status == 400 and json.loads(answer)["error"].startswith("E_REQUEST_INVALID"), answer


def test_a_decoder_past_the_tenants_memory_is_killed_and_only_that_upload_fails(fresh_daemon, tmp_path):
    d = fresh_daemon(memory_bytes=64 << 20, limits={"max_message_bytes": 256 << 20})
    d.client("beta").load("b", d.package("beta", mlp(2), "b"))
    files = d.package("acme", mlp(1), "big")
    files["1/padding.bin"] = os.urandom(120 << 20)    # decoded into memfds charged to acme's cgroup: past 64 MiB
    status, answer = rest_load(d, "big", rest_body(files), tmp_path)
    assert status in (500, 503) and "E_SANDBOX_KILLED" in json.loads(answer)["error"], answer
    assert "memory" in json.loads(answer)["error"]
    assert d.client("beta").infer("b", {"X": np.ones((1, 4), np.float32)})["Y"].shape == (1, 3)
    d.client("acme").load("small", d.package("acme", mlp(3), "small"))   # acme's next load is fine
