"""Trusted model packages: format, signing, verification, safe intake and ONNX guards."""
