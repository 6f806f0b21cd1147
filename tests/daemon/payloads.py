"""Payload-sized requests a hostile tenant sends to its own models, to make the shared supervisor
do work in proportion to them (issue 17's table), run from a process of its own by the tests
(tests/daemon/test_payload_attacks.py) and the benchmark (bench/attacks.py):

    python -m tests.daemon.payloads KIND GRPC_SOCKET REST_SOCKET TOKEN SECONDS THREADS

sends KIND for SECONDS from THREADS threads and prints one JSON line: how many calls ended how.
The models it aims at are acme's `strings` (BYTES [N] → its Shape) and `mlp` (FP32 [N, 4]).
"""
import collections
import http.client
import json
import socket
import sys
import threading
import time

import grpc
import numpy as np
from onnx import TensorProto, helper

from rtd.proto import SERVICE
from rtd.proto import grpc_service_pb2 as pb

STRINGS = 3_200_000       # one-byte BYTES elements: ~16 MB in Triton's binary form
FLOATS = 4_000_000        # typed FP32 values: [1M, 4]
JSON_ROWS = 250_000       # REST JSON: 1M values, ~5-9 MB of text
MAX_MESSAGE = 1 << 30


def strings_model() -> bytes:
    """X BYTES [N] → Y INT64 [1], its shape: a request's whole size is decoding, not output."""
    graph = helper.make_graph([helper.make_node("Shape", ["X"], ["Y"])], "strings",
                              [helper.make_tensor_value_info("X", TensorProto.STRING, ["N"])],
                              [helper.make_tensor_value_info("Y", TensorProto.INT64, [1])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model.SerializeToString()


def _grpc_body(kind: str) -> bytes:
    """The serialized ModelInferRequest of a gRPC kind."""
    request = pb.ModelInferRequest(model_name="strings" if kind == "bytes_16m" else "mlp")
    if kind == "bytes_16m":
        request.inputs.add(name="X", datatype="BYTES", shape=[STRINGS])
        request.raw_input_contents.append(b"\x01\x00\x00\x00a" * STRINGS)   # Triton's binary form of b"a"
    elif kind == "typed_fp32":
        t = request.inputs.add(name="X", datatype="FP32", shape=[FLOATS // 4, 4])
        t.contents.fp32_contents.extend(np.ones(FLOATS, np.float32))
    elif kind == "bytes_to_fp32":   # BYTES contents for an FP32 model
        t = request.inputs.add(name="X", datatype="FP32", shape=[STRINGS // 4, 4])
        t.contents.bytes_contents.extend([b"a"] * STRINGS)
    else:
        request.inputs.add(name="X", datatype="FP32", shape=[1, 4])
        request.raw_input_contents.append(np.ones((1, 4), np.float32).tobytes())
    return request.SerializeToString()


def _rest_body(kind: str) -> tuple[str, bytes]:
    """(model, body) of a REST kind."""
    if kind == "rest_json":
        rows = np.ones((JSON_ROWS, 4), np.float32).round(3).tolist()
        return "mlp", json.dumps({"inputs": [{"name": "X", "datatype": "FP32", "shape": [JSON_ROWS, 4], "data": rows}]}).encode()
    return "strings", json.dumps({"inputs": [{"name": "X", "datatype": "BYTES", "shape": [STRINGS], "data": ["a"] * STRINGS}]}).encode()


GRPC_KINDS = ("bytes_16m", "typed_fp32", "bytes_to_fp32", "flood")
REST_KINDS = ("rest_json", "rest_bytes")
KINDS = GRPC_KINDS + REST_KINDS


class _UnixHTTP(http.client.HTTPConnection):
    def __init__(self, path: str):
        super().__init__("rtd", timeout=120)
        self.path = path

    def connect(self):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(120)
        self.sock.connect(self.path)


def hammer(kind: str, grpc_socket: str, rest_socket: str, token: str, seconds: float, threads: int) -> dict:
    """Send `kind` until `seconds` pass; {outcome: count} (outcome: "ok", a gRPC status, an HTTP status)."""
    outcomes, lock = collections.Counter(), threading.Lock()

    def grpc_loop(body: bytes) -> None:
        channel = grpc.insecure_channel(f"unix:{grpc_socket}", [("grpc.max_send_message_length", MAX_MESSAGE),
                                                                ("grpc.max_receive_message_length", MAX_MESSAGE)])
        call = channel.unary_unary(f"/{SERVICE}/ModelInfer")   # bytes in, bytes out: no serializer
        while time.monotonic() < until:
            try:
                call(body, metadata=(("authorization", f"Bearer {token}"),), timeout=60)
                outcome = "ok"
            except grpc.RpcError as e:
                outcome = f"{e.code().name}:{(e.details() or '').split(':')[0]}"
            with lock:
                outcomes[outcome] += 1
        channel.close()

    def rest_loop(model: str, body: bytes) -> None:
        while time.monotonic() < until:
            conn = _UnixHTTP(rest_socket)
            try:
                conn.request("POST", f"/v2/models/{model}/infer", body,
                             {"Authorization": f"Bearer {token}", "Content-Type": "application/json"})
                response = conn.getresponse()
                answer = response.read()
                outcome = "ok" if response.status == 200 else f"{response.status}:{answer[:40].decode(errors='replace')}"
            except OSError as e:
                outcome = f"socket:{type(e).__name__}"
            finally:
                conn.close()
            with lock:
                outcomes[outcome] += 1

    if kind in GRPC_KINDS:
        workers = [threading.Thread(target=grpc_loop, args=(_grpc_body(kind),)) for _ in range(threads)]
    else:
        workers = [threading.Thread(target=rest_loop, args=_rest_body(kind)) for _ in range(threads)]
    until = time.monotonic() + seconds   # from when the bodies are built
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    return dict(outcomes)


if __name__ == "__main__":
    kind, grpc_path, rest_path, token, seconds, threads = sys.argv[1:7]
    print(json.dumps(hammer(kind, grpc_path, rest_path, token, float(seconds), int(threads))), flush=True)
