"""Trusted model packages: format, signing, verification, safe intake and ONNX guards.

Supervisor side (never parses a graph):
    trust = TrustStore(tenant_dir); rollback = RollbackStore(path)
    with verify_package(source, trust=trust, tenant=t, rollback=rollback, expected_name=n) as pkg:
        ...hand pkg.model.fd / pkg.siblings to the worker...; rollback.record(t, pkg.name, pkg.counter)
Worker side (inside its sandbox): onnx_guard.check_model(bytes, allowed_ops=..., external=...).
Producers: pack.package_files / pack.write_package / pack.sign_version_dir, keys.write_keypair.
The package layout is described in layout.py, the signed metadata in metadata.py, the signature
envelope in signing.py, and the order of checks in package.py.
"""
import importlib

# The names below are imported on first use (PEP 562): `rtctl keygen` needs rtd.loader.keys
# alone and must not pay for protobuf and the whole verifier at start.
_EXPORTS = {"IntakeLimits": "layout", "VerifiedFile": "package", "VerifiedPackage": "package", "verify_package": "package",
            "RollbackStore": "trust", "TrustStore": "trust"}
__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    if name not in _EXPORTS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{_EXPORTS[name]}"), name)
