"""The embedded default on loopback TCP, as a new user meets it: `rtd serve` says the ports it
serves gRPC and REST on, unmodified tritonclient (HTTP and gRPC) reach them with a host:port,
every call but health needs the dev token, `--no-tcp` serves Unix sockets only, a taken default
port falls back to a free one it names, and a config refuses loopback TCP beside a tenant that
takes calls without a token."""
import os
import re
import socket
import subprocess
import time
import urllib.error
import urllib.request

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from rtd.cli.package import package_files
from rtd.daemon import config
from rtd.loader import keys, pack
from tests.daemon.conftest import NEEDS_ROOT, RTD, free_port, mlp


def serve(state, *flags) -> tuple[subprocess.Popen, str]:
    log = f"{state}.log"
    proc = subprocess.Popen([RTD, "serve", "--state-dir", str(state), *flags], stdout=subprocess.DEVNULL, stderr=open(log, "wb"))
    deadline = time.monotonic() + 60
    while "serving on" not in open(log).read():
        assert proc.poll() is None and time.monotonic() < deadline, open(log).read()
        time.sleep(0.1)
    return proc, open(log).read()


def test_tritonclient_reaches_the_embedded_default_on_the_ports_it_names_and_only_with_a_token(tmp_path):
    if os.geteuid() != 0:
        pytest.skip(NEEDS_ROOT)
    grpc_port, http_port = free_port(), free_port()
    proc, said = serve(tmp_path / "state", "--grpc-port", str(grpc_port), "--http-port", str(http_port))
    try:
        assert f"127.0.0.1:{grpc_port} (gRPC, loopback, token required)" in said, said
        assert f"127.0.0.1:{http_port} (REST, loopback, token required)" in said, said
        token = (tmp_path / "state" / "dev.token").read_text().strip()
        key = keys.load_private(str(tmp_path / "state" / "dev-keys" / "signing.pem"))
        pack.write_package(pack.package_files(mlp(4), name="mlp", version="1.0.0", private_key=key), str(tmp_path / "mlp.tar"), "mlp")
        x = np.ones((2, 4), np.float32)
        for client, url in ((httpclient, f"127.0.0.1:{http_port}"), (grpcclient, f"localhost:{grpc_port}")):
            headers = {"authorization": f"Bearer {token}"}
            c = client.InferenceServerClient(url)
            assert c.is_server_ready()   # health needs no token, as Triton's
            c.load_model("mlp", files=package_files(str(tmp_path / "mlp.tar")), headers=headers)
            given = client.InferInput("X", [2, 4], "FP32")
            given.set_data_from_numpy(x)
            assert c.infer("mlp", [given], headers=headers).as_numpy("Y").shape == (2, 3)
            for refused in ({}, {"authorization": "Bearer not-the-token"}):
                with pytest.raises(InferenceServerException, match="E_UNAUTHENTICATED"):
                    c.infer("mlp", [given], headers=refused)
        with pytest.raises(urllib.error.HTTPError) as e:
            urllib.request.urlopen(f"http://127.0.0.1:{http_port}/v2/models/mlp", timeout=10)
        assert e.value.code == 401
    finally:
        proc.terminate()
        assert proc.wait(30) == 0


def test_no_tcp_serves_unix_sockets_only(tmp_path):
    if os.geteuid() != 0:
        pytest.skip(NEEDS_ROOT)
    proc, said = serve(tmp_path / "state", "--no-tcp")
    try:
        line = said[said.index("serving on"):].splitlines()[0]
        assert "127.0.0.1" not in line and "rtd.sock" in line, line
    finally:
        proc.terminate()
        assert proc.wait(30) == 0


def test_a_taken_default_port_falls_back_to_a_free_one_and_says_which(tmp_path, capsys):
    held = socket.socket()
    try:
        held.bind(("127.0.0.1", config.HTTP_PORT))
        held.listen()
    except OSError:
        pass   # taken already, by whatever holds it: the same case
    try:
        c = config.embedded_default(str(tmp_path / "state"), grpc_port=free_port())
    finally:
        held.close()
    said = capsys.readouterr().err
    assert c.loopback_rest_tcp != config.HTTP_PORT
    assert re.search(rf"127\.0\.0\.1:{config.HTTP_PORT} is taken: REST on 127\.0\.0\.1:{c.loopback_rest_tcp} instead "
                     r"\(--http-port chooses one\)", said), said


def test_loopback_tcp_beside_an_anonymous_tenant_is_refused(tmp_path):
    text = ('state_dir = "s"\n[listen]\nloopback_rest_tcp = 8000\n'
            '[[tenant]]\nid = "open"\ntrusted_keys = "t"\nunsafe_anonymous = true\n')
    with pytest.raises(config.ConfigError, match="loopback TCP is open to every local user"):
        config.parse(text, base=str(tmp_path))
