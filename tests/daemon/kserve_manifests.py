"""Validates deploy/kserve's manifests with the kserve SDK's models and prints what the tests
check, as JSON. Run in its own process (`python -m tests.daemon.kserve_manifests`): importing
kserve registers its v2 protobuf package `inference`, which collides with tritonclient's.
A manifest that does not validate exits 1 with the reason on stderr."""
import json
import os
import re
import sys

import kserve.models as kserve_models
import kubernetes.client.models as k8s_models
import yaml

DEPLOY = os.path.join(os.path.dirname(__file__), "..", "..", "deploy", "kserve")


def _snake(key: str) -> str:
    return re.sub(r"(?<=[a-z0-9])([A-Z])", r"_\1", key).lower()


def _check_known_keys(given, parsed, where: str) -> None:
    """Every key of the manifest survives a round trip through the Kubernetes model (no typo
    silently dropped)."""
    if isinstance(given, dict):
        for key, value in given.items():
            if _snake(key) not in parsed or parsed[_snake(key)] is None:
                raise ValueError(f"{where}.{key} is not a field")
            _check_known_keys(value, parsed[_snake(key)], f"{where}.{key}")
    elif isinstance(given, list):
        for i, (g, p) in enumerate(zip(given, parsed)):
            _check_known_keys(g, p, f"{where}[{i}]")


def validate(data, kind: str, where: str = ""):
    """Build kserve model `kind` from manifest data: kserve's own models check their fields,
    the Kubernetes ones (V1Container, ...) are validated by their pydantic models."""
    where = where or kind
    if kind.startswith("list["):
        if not isinstance(data, list):
            raise ValueError(f"{where}: expected a list")
        return [validate(d, kind[5:-1], f"{where}[{i}]") for i, d in enumerate(data)]
    if kind.startswith("dict("):
        if not isinstance(data, dict):
            raise ValueError(f"{where}: expected a mapping")
        inner = kind[kind.index(",") + 1:-1].strip()
        return {k: validate(v, inner, f"{where}.{k}") for k, v in data.items()}
    primitives = {"str": str, "int": int, "bool": bool, "float": (int, float), "object": object}
    if kind in primitives:
        if not isinstance(data, primitives[kind]):
            raise ValueError(f"{where}: expected {kind}")
        return data
    if hasattr(kserve_models, kind):
        model = getattr(kserve_models, kind)
        by_key = {json_key: attr for attr, json_key in model.attribute_map.items()}
        if not isinstance(data, dict) or set(data) - set(by_key):
            raise ValueError(f"{where}: unknown keys {sorted(set(data) - set(by_key))}")
        return model(**{by_key[k]: validate(v, model.openapi_types[by_key[k]], f"{where}.{k}") for k, v in data.items()})
    model = getattr(k8s_models, kind)
    parsed = model.from_dict(data)
    _check_known_keys(data, parsed.to_dict(), where)
    return parsed


def summary(runtime_doc: dict, service_doc: dict) -> dict:
    runtime = validate(runtime_doc, "V1alpha1ClusterServingRuntime")
    service = validate(service_doc, "V1beta1InferenceService")
    container = runtime.spec.containers[0]
    model = service.spec.predictor.model
    return {"runtime": {"kind": runtime.kind, "api_version": runtime.api_version, "name": runtime.metadata.name,
                        "formats": [f.name for f in runtime.spec.supported_model_formats],
                        "protocols": runtime.spec.protocol_versions},
            "container": {"name": container.name, "capabilities": container.security_context.capabilities.add,
                          "ports": [p.container_port for p in container.ports],
                          "probe_ports": [p.grpc.port for p in (container.readiness_probe, container.liveness_probe,
                                                                container.startup_probe)]},
            "service": {"runtime": model.runtime, "format": model.model_format.name, "protocol": model.protocol_version}}


def main(argv) -> int:
    docs = []
    for name in argv or ("servingruntime.yaml", "inferenceservice.yaml"):
        with open(name if os.path.isabs(name) else os.path.join(DEPLOY, name)) as f:
            docs.append(yaml.safe_load(f))
    try:
        print(json.dumps(summary(*docs)))
    except Exception as e:   # any validation failure: the reason, for the test to show
        print(f"{type(e).__name__}: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
