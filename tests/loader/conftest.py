"""Shared fixtures for the loader's unit tests: a real RSA-3072 key, a tenant trust store on disk,
and small ONNX models built with onnx.helper."""
import pytest

from rtd.loader import TrustStore, keys

from loader_models import add_model


@pytest.fixture(scope="session")
def signer():
    return keys.generate()


@pytest.fixture
def trust_dir(tmp_path, signer):
    directory = tmp_path / "trust"
    directory.mkdir()
    (directory / "signing.pub.pem").write_bytes(keys.public_pem(signer.public_key()))
    return directory


@pytest.fixture
def trust(trust_dir):
    return TrustStore(str(trust_dir))


@pytest.fixture
def model_bytes():
    return add_model()
