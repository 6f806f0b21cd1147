"""The KServe v2 REST front against a real `rtd serve` with two tenants: an unmodified
tritonclient.http (over the mTLS TCP listener) drives a model's life cycle with binary and
JSON tensors and gets what the gRPC front gives; curl speaks it over the Unix socket; tokens,
tenancy, body limits, slow clients and malformed requests are refused with the status of
the one table and a stable code, never a traceback, and nothing stays charged."""
import base64
import json
import os
import socket
import subprocess
import threading
import time

import numpy as np
import pytest
import tritonclient.grpc as tc_grpc
import tritonclient.http as tc_http
from tritonclient.utils import InferenceServerException

from rtd import dtypes
from rtd.daemon.worker.kserve_codec import Caps, decode_rest
from rtd.daemon.transport.rest_h1 import BY_CODE, HTTP_STATUS
from rtd.tensors import json_data, raw_from_json
from rtd.errors import Code, RtdError
from tests.daemon.conftest import free_port, mlp, slow_model
from tests.daemon.test_serving import reference
from tests.daemon.test_tls import _cert

TRANSIENT = ("requests", "request_bytes", "response_bytes", "streams")


def rest_socket(daemon) -> str:
    return os.path.join(daemon.state, "rtd-rest.sock")


def curl(daemon, path: str, *args: str, token: str | None = None) -> tuple[int, bytes]:
    """(HTTP status, body) of one curl over the REST Unix socket."""
    auth = ["-H", f"Authorization: Bearer {token}"] if token else []
    done = subprocess.run(["curl", "-sS", "-o", "-", "-w", "\n%{http_code}", "--unix-socket", rest_socket(daemon),
                           *auth, *args, f"http://rtd{path}"], capture_output=True, timeout=60)
    assert done.returncode == 0, done.stderr
    body, _, status = done.stdout.rpartition(b"\n")
    return int(status), body


def settled(daemon, tenant: str, timeout: float = 10.0) -> dict:
    """The tenant's transient budgets once every connection has let go of them."""
    deadline = time.monotonic() + timeout
    while True:
        usage = daemon.tenant(tenant)["budgets"]
        if all(usage[r]["used"] == 0 for r in TRANSIENT) or time.monotonic() > deadline:
            return {r: usage[r]["used"] for r in TRANSIENT}
        time.sleep(0.05)


def grpc_y(daemon, tenant: str, name: str, x: np.ndarray) -> np.ndarray:
    client = tc_grpc.InferenceServerClient(daemon.url())
    given = tc_grpc.InferInput("X", list(x.shape), "FP32")
    given.set_data_from_numpy(x)
    return client.infer(name, [given], headers={"authorization": f"Bearer {daemon.tokens[tenant]}"}).as_numpy("Y")


@pytest.fixture
def rest_tls(fresh_daemon, tmp_path):
    """A daemon whose REST front also listens on TCP (mTLS), and a tritonclient.http for it."""
    ca_key, ca, ca_pem, _ = _cert("rtd test CA", ca=True)
    _, _, server_pem, server_key = _cert("localhost", ca_key, ca.subject, san="localhost")
    _, _, client_pem, client_key = _cert("tenant client", ca_key, ca.subject)
    for name, data in (("ca.pem", ca_pem), ("server.pem", server_pem), ("server.key", server_key),
                       ("client.pem", client_pem), ("client.key", client_key)):
        (tmp_path / name).write_bytes(data)
    port = free_port()
    d = fresh_daemon(listen=f'[listen]\nrest_tcp = "127.0.0.1:{port}"\ntls_cert = "{tmp_path / "server.pem"}"\n'
                            f'tls_key = "{tmp_path / "server.key"}"\ntls_client_ca = "{tmp_path / "ca.pem"}"\n')
    options = {"ca_certs": str(tmp_path / "ca.pem"), "certfile": str(tmp_path / "client.pem"),
               "keyfile": str(tmp_path / "client.key"), "server_hostname": "localhost"}
    client = tc_http.InferenceServerClient(f"127.0.0.1:{port}", ssl=True, ssl_options=options)
    yield d, client
    client.close()


def test_tritonclient_http_life_cycle_matches_the_grpc_front(rest_tls):
    d, client = rest_tls
    headers = {"Authorization": f"Bearer {d.tokens['acme']}"}
    model = mlp(1)
    assert client.is_server_live() and client.is_server_ready()
    assert client.get_server_metadata()["extensions"] == ["model_repository", "model_configuration", "binary_tensor_data"]
    client.load_model("mlp", headers=headers, files={f"file:{p}": b for p, b in d.package("acme", model, "mlp").items()})
    assert client.is_model_ready("mlp", headers=headers)
    meta = client.get_model_metadata("mlp", headers=headers)
    assert meta["versions"] == ["1"] and meta["inputs"] == [{"name": "X", "datatype": "FP32", "shape": [-1, 4]}]
    assert client.get_model_config("mlp", headers=headers)["input"][0]["name"] == "X"
    assert client.get_model_repository_index(headers=headers) == [{"name": "mlp", "version": "1", "state": "READY",
                                                                   "reason": ""}]
    x = np.random.default_rng(2).standard_normal((5, 4)).astype(np.float32)
    want = grpc_y(d, "acme", "mlp", x)
    np.testing.assert_allclose(want, reference(model, {"X": x})["Y"], rtol=1e-5, atol=1e-6)
    for binary_in, binary_out in ((True, None), (False, False), (True, False), (False, True)):
        given = tc_http.InferInput("X", [5, 4], "FP32")
        given.set_data_from_numpy(x, binary_data=binary_in)
        outputs = None if binary_out is None else [tc_http.InferRequestedOutput("Y", binary_data=binary_out)]
        result = client.infer("mlp", [given], outputs=outputs, headers=dict(headers), request_id="r1")  # it adds to them
        np.testing.assert_allclose(result.as_numpy("Y"), want, rtol=1e-6)   # JSON floats round-trip float32 exactly
        assert result.get_response()["id"] == "r1"
        assert ("data" in result.get_output("Y")) == (binary_out is False)
    stats = client.get_inference_statistics("mlp", headers=headers)["model_stats"]
    grpc_stats = tc_grpc.InferenceServerClient(d.url()).get_inference_statistics(
        "mlp", headers={"authorization": headers["Authorization"]}, as_json=True)["model_stats"]
    assert [(s["name"], s["version"], s["inference_count"]) for s in stats] == [("mlp", "1", 5)]
    assert grpc_stats[0]["inference_count"] == "5" and stats[0]["inference_stats"]["success"]["count"] == 5
    assert client.get_inference_statistics(headers=headers)["model_stats"][0]["name"] == "mlp"
    client.unload_model("mlp", headers=headers)
    assert not client.is_model_ready("mlp", headers=headers)
    with pytest.raises(InferenceServerException) as e:
        client.infer("mlp", [given], headers=headers)
    assert e.value.status() == "404" and "E_MODEL_NOT_FOUND" in e.value.message()
    assert settled(d, "acme") == dict.fromkeys(TRANSIENT, 0)


@pytest.fixture(scope="module")
def served(daemon):
    """The module's daemon with acme's `m` loaded (over REST, with curl)."""
    files = {f"file:{p}": base64.b64encode(b).decode() for p, b in daemon.package("acme", mlp(4), "m").items()}
    status, body = curl(daemon, "/v2/repository/models/m/load", "--data-binary", json.dumps({"parameters": files}),
                        token=daemon.tokens["acme"])
    assert status == 200, body
    return daemon


def test_curl_health_metadata_and_a_json_infer(served):
    assert curl(served, "/v2/health/live") == (200, b'{"live": true}')
    assert curl(served, "/v2/health/ready") == (200, b'{"ready": true}')
    status, body = curl(served, "/v2")
    assert status == 200 and json.loads(body)["name"] == "rtd"
    x = np.arange(8, dtype=np.float32).reshape(2, 4) / 8
    want = grpc_y(served, "acme", "m", x)
    for data in (x.tolist(), x.reshape(-1).tolist()):   # nested or flat, row-major
        request = {"id": "q", "inputs": [{"name": "X", "shape": [2, 4], "datatype": "FP32", "data": data}]}
        status, body = curl(served, "/v2/models/m/infer", "-d", json.dumps(request), token=served.tokens["acme"])
        assert status == 200, body
        answer = json.loads(body)
        assert answer["model_name"] == "m" and answer["id"] == "q"
        (y,) = answer["outputs"]
        assert (y["name"], y["datatype"], y["shape"]) == ("Y", "FP32", [2, 3])
        np.testing.assert_array_equal(np.array(y["data"], np.float32).reshape(2, 3), want)
    assert settled(served, "acme") == dict.fromkeys(TRANSIENT, 0)


def test_tokens_and_tenancy_are_those_of_the_grpc_front(served):
    for token in (None, "not-a-token", served.admin_token):
        status, body = curl(served, "/v2/models/m", token=token)
        assert status == 401 and json.loads(body)["error"].startswith("E_UNAUTHENTICATED:")
    status, body = curl(served, "/v2/models/m", token=served.tokens["beta"])   # acme's model, beta's token
    assert status == 404 and json.loads(body)["error"].startswith("E_MODEL_NOT_FOUND:")
    request = {"inputs": [{"name": "X", "shape": [1, 4], "datatype": "FP32", "data": [0, 0, 0, 0]}]}
    status, body = curl(served, "/v2/models/m/infer", "-d", json.dumps(request), token=served.tokens["beta"])
    assert status == 404
    with pytest.raises(InferenceServerException) as e:
        grpc_y(served, "beta", "m", np.zeros((1, 4), np.float32))
    assert e.value.status() == "StatusCode.NOT_FOUND" and "E_MODEL_NOT_FOUND" in e.value.message()
    assert curl(served, "/v2/models/m/stats", token=served.tokens["beta"])[0] == 404
    assert curl(served, "/v2/systemsharedmemory/status", token=served.tokens["acme"])[0] == 501


def _x(**changes) -> dict:
    tensor = {"name": "X", "shape": [1, 4], "datatype": "FP32", "data": [1, 2, 3, 4], **changes}
    return {"inputs": [{k: v for k, v in tensor.items() if v is not None}]}


@pytest.mark.parametrize("body, code", [
    (b"{not json", "E_REQUEST_INVALID"),
    (b"[1, 2]", "E_REQUEST_INVALID"),
    (b"[" * 100000, "E_REQUEST_INVALID"),
    (json.dumps(_x(shape=[2, 4])), "E_REQUEST_INVALID"),             # 4 values for 8
    (json.dumps(_x(shape=[4])), "E_INPUT_INVALID"),                  # the model wants [N, 4]
    (json.dumps(_x(shape=["1", 4])), "E_REQUEST_INVALID"),
    (json.dumps(_x(shape=[-1, 4])), "E_REQUEST_INVALID"),
    (json.dumps(_x(datatype="FP64")), "E_INPUT_INVALID"),            # the model wants FP32
    (json.dumps(_x(datatype="INT64", data=[1.5, 2, 3, 4])), "E_REQUEST_INVALID"),
    (json.dumps(_x(datatype="UINT8", data=[1, 2, 3, 300])), "E_REQUEST_INVALID"),
    (json.dumps(_x(datatype="FP33")), "E_REQUEST_INVALID"),
    (json.dumps(_x(data=[[1, 2], [3]])), "E_REQUEST_INVALID"),
    (json.dumps(_x(data=["a", "b", "c", "d"])), "E_REQUEST_INVALID"),
    (json.dumps(_x(data=None)), "E_REQUEST_INVALID"),
    (json.dumps(_x(data=None, parameters={"binary_data_size": 16})), "E_REQUEST_INVALID"),   # no binary part
    (json.dumps(_x(parameters={"shared_memory_region": "r"})), "E_REQUEST_INVALID"),
    (json.dumps({**_x(), "outputs": [{"name": "Y", "parameters": {"classification": 2}}]}), "E_REQUEST_INVALID"),
    (json.dumps({**_x(), "parameters": {"binary_data_output": "yes"}}), "E_REQUEST_INVALID"),
])
def test_malformed_requests_are_400_with_a_code_and_leave_nothing_charged(served, body, code):
    status, answer = _post(served, "/v2/models/m/infer", body, served.tokens["acme"])
    assert status == 400, answer
    assert json.loads(answer)["error"].startswith(f"{code}:")
    assert settled(served, "acme") == dict.fromkeys(TRANSIENT, 0)
    assert "Traceback" not in served.read_log()


def _post(daemon, path: str, body, token: str, headers: dict | None = None) -> tuple[int, bytes]:
    with socket.socket(socket.AF_UNIX) as s:
        s.settimeout(30)
        s.connect(rest_socket(daemon))
        body = body.encode() if isinstance(body, str) else body
        head = {"Host": "rtd", "Authorization": f"Bearer {token}", "Content-Length": str(len(body)), **(headers or {})}
        s.sendall(f"POST {path} HTTP/1.1\r\n".encode() + "".join(f"{k}: {v}\r\n" for k, v in head.items()).encode()
                  + b"\r\n" + body)
        return _answer(s)


def _answer(s: socket.socket) -> tuple[int, bytes]:
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = s.recv(65536)
        assert chunk, data
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    length = int(next(line.split(b":")[1] for line in head.split(b"\r\n") if line.lower().startswith(b"content-length")))
    while len(body) < length:
        body += s.recv(65536)
    return int(head.split(b" ")[1]), body


def test_the_binary_extension_over_a_raw_socket(served):
    x = np.arange(4, dtype=np.float32).reshape(1, 4)
    header = json.dumps({"inputs": [{"name": "X", "shape": [1, 4], "datatype": "FP32",
                                     "parameters": {"binary_data_size": 16}}],
                         "outputs": [{"name": "Y", "parameters": {"binary_data": True}}]}).encode()
    status, body = _post(served, "/v2/models/m/infer", header + x.tobytes(), served.tokens["acme"],
                         {"Inference-Header-Content-Length": str(len(header))})
    assert status == 200
    answer, _, raw = body.partition(b"}]}")
    (y,) = json.loads(answer + b"}]}")["outputs"]
    assert y["parameters"] == {"binary_data_size": 12}
    np.testing.assert_array_equal(np.frombuffer(raw, np.float32).reshape(1, 3), grpc_y(served, "acme", "m", x))
    status, body = _post(served, "/v2/models/m/infer", header + x.tobytes() + b"extra", served.tokens["acme"],
                         {"Inference-Header-Content-Length": str(len(header))})
    assert status == 400 and b"no input claims" in body


def test_a_body_over_the_limit_is_refused_from_its_head(served):
    limit = 16 << 20   # conftest's max_message_bytes
    with socket.socket(socket.AF_UNIX) as s:
        s.settimeout(30)
        s.connect(rest_socket(served))
        s.sendall(f"POST /v2/models/m/infer HTTP/1.1\r\nHost: rtd\r\nAuthorization: Bearer {served.tokens['acme']}\r\n"
                  f"Content-Length: {limit + 1}\r\nExpect: 100-continue\r\n\r\n".encode())
        status, body = _answer(s)   # no byte of the body was sent
        assert status == 413 and json.loads(body)["error"].startswith("E_MESSAGE_TOO_LARGE:")
        assert s.recv(1) == b"", "the connection is closed: the body is never read"
    with socket.socket(socket.AF_UNIX) as s:   # unauthenticated calls may send next to nothing
        s.settimeout(30)
        s.connect(rest_socket(served))
        s.sendall(b"GET /v2/health/live HTTP/1.1\r\nHost: rtd\r\nContent-Length: 100000\r\n\r\n")
        assert _answer(s)[0] == 413
    assert settled(served, "acme") == dict.fromkeys(TRANSIENT, 0)


def test_a_slowloris_is_dropped_while_the_other_tenant_is_served(fresh_daemon):
    d = fresh_daemon(limits={"connection_auth_timeout_s": 2.0})
    d.client("beta").load("b", d.package("beta", mlp(5), "b"))
    x = np.ones((1, 4), np.float32)
    request = json.dumps({"inputs": [{"name": "X", "shape": [1, 4], "datatype": "FP32", "data": [1, 1, 1, 1]}]})
    trickle = f"GET /v2/models/b HTTP/1.1\r\nHost: rtd\r\nAuthorization: Bearer {d.tokens['acme']}\r\n".encode()
    slow = []
    for _ in range(8):
        s = socket.socket(socket.AF_UNIX)
        s.connect(rest_socket(d))
        s.settimeout(0.05)
        slow.append(s)
    start, dropped, sent = time.monotonic(), set(), 0
    while len(dropped) < len(slow) and time.monotonic() - start < 8:
        for i, s in enumerate(slow):
            if i in dropped:
                continue
            try:
                s.send(trickle[sent % len(trickle):][:1])
                if s.recv(1) == b"":
                    dropped.add(i)
            except TimeoutError:
                pass
            except OSError:
                dropped.add(i)
        sent += 1
        status, body = curl(d, "/v2/models/b/infer", "-d", request, token=d.tokens["beta"])
        assert status == 200, body
        assert grpc_y(d, "beta", "b", x).shape == (1, 3)
    elapsed = time.monotonic() - start
    for s in slow:
        s.close()
    assert dropped == set(range(len(slow))) and 1.5 < elapsed < 6, (dropped, elapsed)


def test_a_request_sent_before_the_last_ones_answer_ends_the_connection(served):
    with socket.socket(socket.AF_UNIX) as s:
        s.settimeout(30)
        s.connect(rest_socket(served))
        s.sendall(b"GET /v2/health/live HTTP/1.1\r\nHost: rtd\r\n\r\n" * 2)
        assert _answer(s) == (200, b'{"live": true}')
        assert s.recv(1) == b"", "the second request is never answered: the connection closes"
        s.close()
    with socket.socket(socket.AF_UNIX) as s:   # one at a time is kept alive
        s.settimeout(30)
        s.connect(rest_socket(served))
        for _ in range(3):
            s.sendall(b"GET /v2 HTTP/1.1\r\nHost: rtd\r\n\r\n")
            assert _answer(s)[0] == 200


def test_rest_and_grpc_calls_are_charged_to_one_ledger(fresh_daemon):
    d = fresh_daemon(limits={"tenant_streams": 1})
    d.client("acme").load("slow", d.package("acme", slow_model(), "slow"))
    d.client("beta").load("b", d.package("beta", mlp(5), "b"))
    x = np.ones((3000, 384), np.float32)
    slow = threading.Thread(target=lambda: d.client("acme").infer("slow", {"X": x}, timeout=120))
    slow.start()
    deadline = time.monotonic() + 30
    while d.tenant("acme")["budgets"]["streams"]["used"] == 0 and time.monotonic() < deadline:
        time.sleep(0.01)
    request = json.dumps({"inputs": [{"name": "X", "shape": [1, 384], "datatype": "FP32", "data": [0.0] * 384}]})
    status, body = curl(d, "/v2/models/slow/infer", "-d", request, token=d.tokens["acme"])   # the gRPC call holds it
    assert status == 429 and json.loads(body)["error"].startswith("E_BUDGET_EXCEEDED: ") and b"streams" in body
    request = json.dumps({"inputs": [{"name": "X", "shape": [1, 4], "datatype": "FP32", "data": [1, 2, 3, 4]}]})
    assert curl(d, "/v2/models/b/infer", "-d", request, token=d.tokens["beta"])[0] == 200   # beta's budget is its own
    slow.join(120)
    assert settled(d, "acme") == dict.fromkeys(TRANSIENT, 0)


def test_every_code_has_an_http_status():
    assert all(code in BY_CODE or code.status in HTTP_STATUS for code in Code)


def test_a_client_that_half_closes_after_its_request_gets_the_answer(served):
    with socket.socket(socket.AF_UNIX) as s:
        s.settimeout(30)
        s.connect(rest_socket(served))
        s.sendall(f"GET /v2/models/m HTTP/1.1\r\nHost: rtd\r\nAuthorization: Bearer {served.tokens['acme']}\r\n\r\n".encode())
        s.shutdown(socket.SHUT_WR)
        status, body = _answer(s)
        assert status == 200 and json.loads(body)["name"] == "m"
        assert s.recv(1) == b""


@pytest.mark.parametrize("row", dtypes.TABLE, ids=lambda row: row.kserve)
def test_json_data_round_trips_every_datatype(row):
    if row.wire == "bytes":
        a = np.array([["a", "bé"], ["", "z"]], dtype=object)
        want = np.array([[b"a", "bé".encode()], [b"", b"z"]], dtype=object)
    else:
        a = want = (np.arange(4) % 2 == 1 if row.wire == "bool" else np.arange(4) + 1).astype(row.numpy).reshape(2, 2)
    flat = json.loads(json.dumps(json_data(a)))
    body = json.dumps({"inputs": [{"name": "t", "datatype": row.kserve, "shape": [2, 2], "data": flat}]}).encode()
    got = decode_rest(body, None, Caps(1 << 20)).inputs["t"]
    assert got.shape == (2, 2) and got.tolist() == want.tolist()
    with pytest.raises(RtdError):   # a value of another kind
        raw_from_json("t", row.kserve, [1.5, 2, 3, 4] if row.wire != "bytes" and row.numpy.kind != "f" else [[1], 2, 3, {}])
