"""pack -> verify round trips through every source form, checked by outside tools too:
`sha256sum -c` on the manifest, `openssl pkeyutl` on the raw RSA-PSS signature."""
import base64
import io
import json
import os
import subprocess
import tarfile

import pytest

from rtd.errors import Code, RtdError
from rtd.loader import RollbackStore, keys, pack, verify_package
from rtd.proto.model_config_pb2 import ModelConfig

CONFIG = b'name: "adder"\nmax_batch_size: 8\ninput [ { name: "x" data_type: TYPE_FP32 dims: [ 4 ] } ]\n'


@pytest.fixture
def files(signer, model_bytes):
    return pack.package_files(model_bytes, name="adder", version="2.1.0", private_key=signer, counter=7,
                              config_bytes=CONFIG, training_fingerprint="run-42")


def _sources(tmp_path, files):
    pack.write_package(files, str(tmp_path / "adder"), "adder")
    pack.write_package(files, str(tmp_path / "adder.tar"), "adder")
    pack.write_package(files, str(tmp_path / "adder.tar.gz"), "adder")
    return {"model dir": str(tmp_path / "adder"), "version dir": str(tmp_path / "adder" / "7"),
            "tar": str(tmp_path / "adder.tar"), "tar.gz": str(tmp_path / "adder.tar.gz"), "upload": files}


def test_every_source_form_verifies_to_the_same_package(tmp_path, files, trust, model_bytes):
    for form, source in _sources(tmp_path, files).items():
        with verify_package(source, trust=trust, tenant="t", rollback=RollbackStore(str(tmp_path / "rb.json")),
                            expected_name="adder") as pkg:
            assert (pkg.name, pkg.version, pkg.version_dir, pkg.counter) == ("adder", "2.1.0", "7", 7), form
            assert pkg.model.bytes() == model_bytes, form
            assert pkg.config_text == CONFIG.decode() and isinstance(pkg.config, ModelConfig), form
            assert pkg.config.max_batch_size == 8
            assert pkg.metadata["training_fingerprint"] == "run-42"
            assert pkg.metadata["inputs"] == [{"name": "x", "dtype": "FLOAT", "shape": [1, 4]}]
            assert sorted(pkg.files) == ["7/checksum.sha256", "7/checksum.sha256.sig", "7/metadata.json",
                                         "7/model.onnx", "config.pbtxt"], form
    assert not os.path.exists(tmp_path / "rb.json"), "verification never writes the rollback store"


def test_manifest_checks_with_plain_sha256sum(tmp_path, files):
    pack.write_directory(files, str(tmp_path / "adder"))
    done = subprocess.run(["sha256sum", "--strict", "-c", "checksum.sha256"], cwd=tmp_path / "adder" / "7",
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout == "metadata.json: OK\nmodel.onnx: OK\n"


def test_signature_verifies_with_openssl(tmp_path, files, signer):
    (tmp_path / "manifest").write_bytes(files["7/checksum.sha256"])
    envelope = json.loads(files["7/checksum.sha256.sig"])
    (tmp_path / "sig").write_bytes(base64.b64decode(envelope["signature"]))
    (tmp_path / "pub.pem").write_bytes(keys.public_pem(signer.public_key()))
    done = subprocess.run(["openssl", "dgst", "-sha256", "-sigopt", "rsa_padding_mode:pss", "-sigopt",
                           "rsa_pss_saltlen:32", "-sigopt", "rsa_mgf1_md:sha256", "-verify", "pub.pem",
                           "-signature", "sig", "manifest"], cwd=tmp_path, capture_output=True, text=True)
    assert done.returncode == 0 and "Verified OK" in done.stdout, done.stdout + done.stderr
    assert envelope["key"] == keys.fingerprint(signer.public_key())


def test_archive_without_top_directory(tmp_path, files, trust):
    path = tmp_path / "flat.tar"
    with tarfile.open(path, "w") as tar:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    with verify_package(str(path), trust=trust, tenant="t", rollback=None) as pkg:
        assert pkg.counter == 7


def test_sign_version_dir_in_place(tmp_path, signer, trust, model_bytes):
    version_dir = tmp_path / "repo" / "resnet" / "3"
    version_dir.mkdir(parents=True)
    (version_dir / "model.onnx").write_bytes(model_bytes)
    (version_dir.parent / "config.pbtxt").write_text('name: "resnet"\n')
    meta = pack.sign_version_dir(str(version_dir), signer)
    assert (meta["name"], meta["version"], meta["counter"]) == ("resnet", "3.0.0", 3)
    assert subprocess.run(["sha256sum", "-c", "checksum.sha256"], cwd=version_dir, capture_output=True).returncode == 0
    for source in (version_dir.parent, version_dir):
        with verify_package(str(source), trust=trust, tenant="t", rollback=None, expected_name="resnet") as pkg:
            assert pkg.config.name == "resnet" and pkg.counter == 3
    pack.sign_version_dir(str(version_dir), signer)   # re-signing keeps the existing metadata
    with verify_package(str(version_dir.parent), trust=trust, tenant="t", rollback=None) as pkg:
        assert pkg.metadata == meta


def test_sign_refuses_metadata_that_would_not_verify(tmp_path, signer, model_bytes):
    version_dir = tmp_path / "resnet" / "3"
    version_dir.mkdir(parents=True)
    (version_dir / "model.onnx").write_bytes(model_bytes)
    pack.sign_version_dir(str(version_dir), signer)
    (version_dir.parent / "config.pbtxt").write_text('name: "resnet"\n')   # config added after metadata
    with pytest.raises(RtdError) as e:
        pack.sign_version_dir(str(version_dir), signer)
    assert e.value.code is Code.E_DIGEST_MISMATCH
