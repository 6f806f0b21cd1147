"""Trusted model packages: format, signing, verification, safe intake and ONNX guards.

The supervisor calls `verify_package`; the worker calls `onnx_guard.check_model` inside its
sandbox. Producers use `pack.package_files` / `pack.sign_version_dir` and `keys`.
"""
from rtd.loader.layout import IntakeLimits
from rtd.loader.package import VerifiedFile, VerifiedPackage, verify_package
from rtd.loader.trust import RollbackStore, TrustStore

__all__ = ["IntakeLimits", "RollbackStore", "TrustStore", "VerifiedFile", "VerifiedPackage", "verify_package"]
