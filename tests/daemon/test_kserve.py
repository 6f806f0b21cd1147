"""rtd as a KServe serving runtime (deploy/): the manifests are valid for the kserve SDK's
models (every key known, required fields present), the pod's config and container arguments
are accepted by rtd, and rtd started with that config answers KServe's own v2 gRPC client
over the pod's plaintext port without a token, loading the signed model it finds in the
storage initializer's directory. No cluster or container runtime is here: the image build
and a real InferenceService are not exercised."""
import json
import os
import re
import subprocess
import sys
import textwrap
import tomllib

import numpy as np
import onnxruntime
import pytest
import yaml

from rtd.daemon import config as configuration
from rtd.daemon import main as rtd_main
from rtd.daemon.serving.tenants import Tenants
from rtd.errors import Code, RtdError
from rtd.loader import keys, pack
from tests.daemon.conftest import NEEDS_ROOT, RTD, free_port, mlp

DEPLOY = os.path.join(os.path.dirname(__file__), "..", "..", "deploy")
ROOT = os.path.join(DEPLOY, "..")


def manifest(name: str) -> dict:
    with open(os.path.join(DEPLOY, "kserve", name)) as f:
        return yaml.safe_load(f)


def validated(*paths: str) -> subprocess.CompletedProcess:
    """tests/daemon/kserve_manifests.py in its own process (kserve's protobufs collide with tritonclient's)."""
    return subprocess.run([sys.executable, "-m", "tests.daemon.kserve_manifests", *paths], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)


def test_serving_runtime_and_inference_service_are_valid_kserve_objects():
    result = validated()
    assert result.returncode == 0, result.stderr
    found = json.loads(result.stdout)
    runtime, container, service = found["runtime"], found["container"], found["service"]
    assert (runtime["kind"], runtime["api_version"]) == ("ClusterServingRuntime", "serving.kserve.io/v1alpha1")
    assert container["name"] == "kserve-container"   # the name KServe merges the predictor into
    assert service["runtime"] == runtime["name"] and service["format"] in runtime["formats"]
    assert service["protocol"] in runtime["protocols"]
    # the capabilities the pod adds are exactly rtd.service's bounding set
    unit = open(os.path.join(ROOT, "systemd", "rtd.service")).read()
    bounding = re.search(r"^CapabilityBoundingSet=(.*)$", unit, re.M).group(1).split()
    assert sorted("CAP_" + c for c in container["capabilities"]) == sorted(bounding)
    assert set(container["probe_ports"]) == {9000} and set(container["ports"]) == {9000, 8080}


def test_a_misspelt_or_incomplete_manifest_is_refused(tmp_path):
    """The validation can fail: a typo deep in the pod spec, an unknown top-level key, a
    container without its required name."""
    for change in (lambda m: m["spec"]["containers"][0]["securityContext"].update(capabilites={}),
                   lambda m: m["spec"].update(supportedModelFormat=[]),
                   lambda m: m["spec"]["containers"][0].pop("name")):
        runtime = manifest("servingruntime.yaml")
        change(runtime)
        path = tmp_path / "runtime.yaml"
        path.write_text(yaml.safe_dump(runtime))
        result = validated(str(path), os.path.join(DEPLOY, "kserve", "inferenceservice.yaml"))
        assert result.returncode == 1 and result.stderr, result.stdout


def test_the_pods_config_and_arguments_are_accepted_by_rtd():
    runtime = manifest("servingruntime.yaml")["spec"]["containers"][0]
    with pytest.raises(SystemExit) as e:    # the arguments parse (--help after them stops before serving)
        rtd_main.main([*runtime["args"], "--help"])
    assert e.value.code == 0
    with open(os.path.join(DEPLOY, "kserve", "rtd.toml")) as f:
        pod = configuration.parse(f.read(), base="/etc/rtd")
    port = runtime["ports"][0]["containerPort"]
    assert pod.unsafe_plaintext_tcp.endswith(f":{port}")
    (tenant,) = pod.tenants
    assert tenant.unsafe_anonymous and tenant.model_repository == "/mnt/models" and tenant.load_at_start == ("*",)
    mounts = {m["mountPath"] for m in runtime["volumeMounts"]}
    assert {pod.state_dir, tenant.trusted_keys} <= mounts


KSERVE_CLIENTS = textwrap.dedent("""
    import asyncio, sys
    import numpy as np
    from kserve import InferenceGRPCClient, InferenceRESTClient, InferInput, InferRequest, RESTConfig

    def request(x, binary):
        given = InferInput("X", list(x.shape), "FP32")
        given.set_data_from_numpy(x, binary_data=binary)
        return InferRequest(model_name="mlp", infer_inputs=[given])

    async def main(grpc_url, rest_url, x_path):
        x = np.load(x_path)
        answers = []
        async with InferenceGRPCClient(grpc_url, retries=0) as client:
            assert await client.is_server_live() and await client.is_server_ready()
            assert await client.is_model_ready("mlp")
            answers.append((await client.infer(request(x, True))).outputs[0].as_numpy())
        client = InferenceRESTClient(RESTConfig(protocol="v2", timeout=60))
        assert await client.is_server_live(rest_url) and await client.is_server_ready(rest_url)
        assert await client.is_model_ready(rest_url, "mlp")
        for binary in (False, True):     # JSON tensors, then the binary tensor extension
            answers.append((await client.infer(rest_url, request(x, binary), model_name="mlp")).outputs[0].as_numpy())
        await client.close()
        np.save(sys.stdout.buffer, np.stack(answers))
    asyncio.run(main(*sys.argv[1:]))
""")


def test_kserve_grpc_and_rest_clients_against_rtd_configured_as_in_the_pod(tmp_path):
    if os.geteuid() != 0:
        pytest.skip(NEEDS_ROOT)
    state, trust, repo = tmp_path / "state", tmp_path / "trust", tmp_path / "models"
    private, public = keys.write_keypair(str(tmp_path / "keys"))
    os.makedirs(trust)
    os.link(public, trust / os.path.basename(public))
    model = mlp(7)
    for path, data in pack.package_files(model, name="mlp", version="1.0.1", counter=1,
                                         private_key=keys.load_private(private)).items():
        target = repo / "mlp" / path       # what the storage initializer leaves in /mnt/models
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)
    port, rest_port = free_port(), free_port()
    text = open(os.path.join(DEPLOY, "kserve", "rtd.toml")).read()
    for pod_path, here in (("/var/lib/rtd", state), ("/etc/rtd/trust", trust), ("/mnt/models", repo)):
        text = text.replace(f'"{pod_path}', f'"{here}')
    text = text.replace('"0.0.0.0:9000"', f'"127.0.0.1:{port}"').replace('"0.0.0.0:8080"', f'"127.0.0.1:{rest_port}"')
    assert tomllib.loads(text)["tenant"][0]["model_repository"] == str(repo)
    (tmp_path / "kserve.toml").write_text(text)
    log = tmp_path / "rtd.log"
    proc = subprocess.Popen([RTD, "serve", "--config", str(tmp_path / "kserve.toml")], stdout=subprocess.DEVNULL,
                            stderr=open(log, "wb"))
    try:
        for _ in range(600):
            assert proc.poll() is None, log.read_text()
            if "serving on" in log.read_text():
                break
            subprocess.run(["sleep", "0.1"])
        x = np.random.default_rng(3).standard_normal((2, 4)).astype(np.float32)
        np.save(tmp_path / "x.npy", x)
        # kserve's client in its own process: its protobuf package collides with tritonclient's
        result = subprocess.run([sys.executable, "-c", KSERVE_CLIENTS, f"127.0.0.1:{port}", f"http://127.0.0.1:{rest_port}",
                                 str(tmp_path / "x.npy")], capture_output=True, timeout=120)
        assert result.returncode == 0, result.stderr.decode()[-3000:] + log.read_text()
        with open(tmp_path / "y.npy", "wb") as f:
            f.write(result.stdout)
        want = onnxruntime.InferenceSession(model, providers=["CPUExecutionProvider"]).run(None, {"X": x})[0]
        answers = np.load(tmp_path / "y.npy")
        assert answers.shape == (3, *want.shape)     # gRPC, REST JSON, REST binary
        for got in answers:
            np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
        assert "plaintext: unsafe unless a mesh" in log.read_text()
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def test_an_anonymous_tenant_takes_only_calls_without_a_token():
    pod = configuration.parse(open(os.path.join(DEPLOY, "kserve", "rtd.toml")).read(), base="/etc/rtd")
    tenants = Tenants(pod)
    assert tenants.authenticate([]).id == "kserve"
    with pytest.raises(RtdError) as e:     # a wrong token is still refused, not taken as anonymous
        tenants.authenticate([("authorization", "Bearer wrong")])
    assert e.value.code == Code.E_UNAUTHENTICATED
    with pytest.raises(RtdError):          # operator views still need the admin token
        tenants.authenticate_admin([])
    two = open(os.path.join(DEPLOY, "kserve", "rtd.toml")).read() + '\n[[tenant]]\nid = "b"\ntrusted_keys = "t"\nunsafe_anonymous = true\n'
    with pytest.raises(configuration.ConfigError, match="at most one tenant"):
        configuration.parse(two, base="/etc/rtd")
