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
from rtd.loader.layout import IntakeLimits
from rtd.loader.package import VerifiedFile, VerifiedPackage, verify_package
from rtd.loader.trust import RollbackStore, TrustStore

__all__ = ["IntakeLimits", "RollbackStore", "TrustStore", "VerifiedFile", "VerifiedPackage", "verify_package"]
