"""rtd as a KServe serving runtime (deploy/): the manifests are valid for the kserve SDK's
models (every key known, required fields present), the pod's config and container arguments
are accepted by rtd, and rtd started with that config answers KServe's own v2 gRPC client
over the pod's plaintext port without a token, loading the signed model it finds in the
storage initializer's directory. No cluster or container runtime is here: the image build
and a real InferenceService are not exercised."""
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
from rtd.daemon import rtd_main
from rtd.daemon.tenants import Tenants
from rtd.errors import Code, RtdError
from rtd.loader import keys, pack
from tests.daemon.conftest import NEEDS_ROOT, RTD, free_port, mlp

kserve_models = pytest.importorskip("kserve.models", reason="the kserve SDK is a test dependency (pyproject [test])")
k8s_models = pytest.importorskip("kubernetes.client.models")

DEPLOY = os.path.join(os.path.dirname(__file__), "..", "..", "deploy")


def _snake(key: str) -> str:
    return re.sub(r"(?<=[a-z0-9])([A-Z])", r"_\1", key).lower()


def _check_known_keys(given, parsed: dict, where: str) -> None:
    """Every key of the manifest survives a round trip through the Kubernetes model (no typo
    silently dropped)."""
    if isinstance(given, dict):
        for key, value in given.items():
            assert _snake(key) in parsed and parsed[_snake(key)] is not None, f"{where}.{key} is not a field"
            _check_known_keys(value, parsed[_snake(key)], f"{where}.{key}")
    elif isinstance(given, list):
        for i, (g, p) in enumerate(zip(given, parsed)):
            _check_known_keys(g, p, f"{where}[{i}]")


def validate(data, kind: str, where: str = ""):
    """Build kserve model `kind` from manifest data: kserve's own models check their fields,
    the Kubernetes ones (V1Container, ...) are validated by their pydantic models."""
    where = where or kind
    if kind.startswith("list["):
        assert isinstance(data, list), where
        return [validate(d, kind[5:-1], f"{where}[{i}]") for i, d in enumerate(data)]
    if kind.startswith("dict("):
        assert isinstance(data, dict), where
        inner = kind[kind.index(",") + 1:-1].strip()
        return {k: validate(v, inner, f"{where}.{k}") for k, v in data.items()}
    primitives = {"str": str, "int": int, "bool": bool, "float": (int, float), "object": object}
    if kind in primitives:
        assert isinstance(data, primitives[kind]), f"{where}: expected {kind}"
        return data
    if hasattr(kserve_models, kind):
        model = getattr(kserve_models, kind)
        by_key = {json_key: attr for attr, json_key in model.attribute_map.items()}
        assert isinstance(data, dict), where
        unknown = set(data) - set(by_key)
        assert not unknown, f"{where}: unknown keys {sorted(unknown)}"
        return model(**{by_key[k]: validate(v, model.openapi_types[by_key[k]], f"{where}.{k}") for k, v in data.items()})
    model = getattr(k8s_models, kind)
    parsed = model.from_dict(data)
    _check_known_keys(data, parsed.to_dict(), where)
    return parsed


def manifest(name: str) -> dict:
    with open(os.path.join(DEPLOY, "kserve", name)) as f:
        return yaml.safe_load(f)


def test_serving_runtime_and_inference_service_are_valid_kserve_objects():
    runtime = validate(manifest("servingruntime.yaml"), "V1alpha1ClusterServingRuntime")
    assert runtime.kind == "ClusterServingRuntime" and runtime.api_version == "serving.kserve.io/v1alpha1"
    container = runtime.spec.containers[0]
    assert container.name == "kserve-container"   # the name KServe merges the predictor into
    service = validate(manifest("inferenceservice.yaml"), "V1beta1InferenceService")
    model = service.spec.predictor.model
    assert model.runtime == runtime.metadata.name
    assert model.model_format.name in [f.name for f in runtime.spec.supported_model_formats]
    assert model.protocol_version in runtime.spec.protocol_versions
    # the capabilities the pod adds are exactly rtd.service's bounding set
    unit = open(os.path.join(DEPLOY, "..", "systemd", "rtd.service")).read()
    bounding = re.search(r"^CapabilityBoundingSet=(.*)$", unit, re.M).group(1).split()
    assert sorted("CAP_" + c for c in container.security_context.capabilities.add) == sorted(bounding)
    port = container.ports[0].container_port
    assert {p.grpc.port for p in (container.readiness_probe, container.liveness_probe, container.startup_probe)} == {port}


def test_the_pods_config_and_arguments_are_accepted_by_rtd():
    runtime = manifest("servingruntime.yaml")["spec"]["containers"][0]
    with pytest.raises(SystemExit) as e:    # the arguments parse (--help after them stops before serving)
        rtd_main.main([*runtime["args"], "--help"])
    assert e.value.code == 0
    with open(os.path.join(DEPLOY, "kserve", "rtd.toml")) as f:
        pod = configuration.parse(f.read(), base="/etc/rtd")
    port = runtime["ports"][0]["containerPort"]
    assert pod.unsafe_plaintext_tcp.endswith(f":{port}") and pod.metrics_port == 8002
    (tenant,) = pod.tenants
    assert tenant.unsafe_anonymous and tenant.model_repository == "/mnt/models" and tenant.load_at_start == ("*",)
    mounts = {m["mountPath"] for m in runtime["volumeMounts"]}
    assert {pod.state_dir, tenant.trusted_keys} <= mounts


KSERVE_CLIENT = textwrap.dedent("""
    import asyncio, sys
    import numpy as np
    from kserve import InferenceGRPCClient, InferInput, InferRequest

    async def main(url, x_path):
        x = np.load(x_path)
        async with InferenceGRPCClient(url, retries=0) as client:
            assert await client.is_server_live() and await client.is_server_ready()
            assert await client.is_model_ready("mlp")
            given = InferInput("X", list(x.shape), "FP32")
            given.set_data_from_numpy(x)
            response = await client.infer(InferRequest(model_name="mlp", infer_inputs=[given]))
            np.save(sys.stdout.buffer, response.outputs[0].as_numpy())
    asyncio.run(main(sys.argv[1], sys.argv[2]))
""")


def test_kserve_grpc_client_against_rtd_configured_as_in_the_pod(tmp_path):
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
    port = free_port()
    text = open(os.path.join(DEPLOY, "kserve", "rtd.toml")).read()
    for pod_path, here in (("/var/lib/rtd", state), ("/etc/rtd/trust", trust), ("/mnt/models", repo)):
        text = text.replace(f'"{pod_path}', f'"{here}')
    text = text.replace('"0.0.0.0:9000"', f'"127.0.0.1:{port}"').replace("port = 8002", f"port = {free_port()}")
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
        result = subprocess.run([sys.executable, "-c", KSERVE_CLIENT, f"127.0.0.1:{port}", str(tmp_path / "x.npy")],
                                capture_output=True, timeout=120)
        assert result.returncode == 0, result.stderr.decode()[-3000:] + log.read_text()
        with open(tmp_path / "y.npy", "wb") as f:
            f.write(result.stdout)
        want = onnxruntime.InferenceSession(model, providers=["CPUExecutionProvider"]).run(None, {"X": x})[0]
        np.testing.assert_allclose(np.load(tmp_path / "y.npy"), want, rtol=1e-5, atol=1e-6)
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
