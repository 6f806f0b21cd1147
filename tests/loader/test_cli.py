"""rtctl keygen / pack / sign / verify as an operator runs them (real subprocesses)."""
import json
import os
import stat
import subprocess
import sys

import pytest

RTCTL = [sys.executable, "-m", "rtd.cli.rtctl"]


def rtctl(*args, cwd):
    return subprocess.run([*RTCTL, *args], cwd=cwd, capture_output=True, text=True, timeout=120)


@pytest.fixture(scope="module")
def keys_dir(tmp_path_factory):
    home = tmp_path_factory.mktemp("operator")
    assert rtctl("keygen", "--out", "keys", cwd=home).returncode == 0
    return home / "keys"


@pytest.fixture
def workdir(tmp_path, model_bytes, keys_dir):
    (tmp_path / "model.onnx").write_bytes(model_bytes)
    os.symlink(keys_dir, tmp_path / "keys")
    return tmp_path


def test_keygen_writes_private_0600_and_pub_pem(workdir):
    names = sorted(os.listdir(workdir / "keys"))   # (one keygen per module: RSA-3072 takes seconds)
    assert names == ["signing.pem", "signing.pub.pem"]
    assert stat.S_IMODE(os.stat(workdir / "keys" / "signing.pem").st_mode) == 0o600


@pytest.mark.parametrize("out", ["pkg", "pkg.tar", "pkg.tar.gz"])
def test_pack_then_verify(workdir, out):
    done = rtctl("pack", "model.onnx", "--name", "adder", "--version", "1.2.3", "--key", "keys/signing.pem",
                 "--out", out, "--counter", "4", "--expires", "2099-01-01T00:00:00Z", cwd=workdir)
    assert done.returncode == 0, done.stderr
    done = rtctl("verify", out, "--pubkey", "keys/signing.pub.pem", "--json", cwd=workdir)
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert (report["ok"], report["name"], report["version"], report["counter"]) == (True, "adder", "1.2.3", 4)


def test_verify_refusal_prints_code_and_reason(workdir):
    assert rtctl("pack", "model.onnx", "--name", "adder", "--version", "1.0.0", "--key", "keys/signing.pem",
                 "--out", "pkg", cwd=workdir).returncode == 0
    with open(workdir / "pkg" / "1" / "model.onnx", "ab") as f:
        f.write(b"\0")
    done = rtctl("verify", "pkg", "--pubkey", "keys/signing.pub.pem", cwd=workdir)
    assert done.returncode != 0
    assert done.stderr.startswith("E_DIGEST_MISMATCH: ")
    assert len(done.stderr.strip().splitlines()) == 1


def test_verify_with_another_key_is_untrusted(workdir):
    assert rtctl("keygen", "--out", "other", cwd=workdir).returncode == 0
    assert rtctl("pack", "model.onnx", "--name", "adder", "--version", "1.0.0", "--key", "keys/signing.pem",
                 "--out", "pkg.tar", cwd=workdir).returncode == 0
    done = rtctl("verify", "pkg.tar", "--pubkey", "other/signing.pub.pem", cwd=workdir)
    assert done.returncode != 0 and done.stderr.startswith("E_KEY_UNTRUSTED: ")


def test_sign_in_place_then_verify_and_sha256sum(workdir, model_bytes):
    version_dir = workdir / "repo" / "adder" / "2"
    version_dir.mkdir(parents=True)
    (version_dir / "model.onnx").write_bytes(model_bytes)
    done = rtctl("sign", "repo/adder/2", "--key", "keys/signing.pem", cwd=workdir)
    assert done.returncode == 0, done.stderr
    assert subprocess.run(["sha256sum", "-c", "checksum.sha256"], cwd=version_dir).returncode == 0
    done = rtctl("verify", "repo/adder", "--pubkey", "keys/signing.pub.pem", "--name", "adder", cwd=workdir)
    assert done.returncode == 0, done.stderr


def test_pack_refuses_to_overwrite_and_to_pack_non_onnx(workdir):
    (workdir / "pkg").mkdir()
    done = rtctl("pack", "model.onnx", "--name", "adder", "--version", "1.0.0", "--key", "keys/signing.pem",
                 "--out", "pkg", cwd=workdir)
    assert done.returncode != 0 and done.stderr.startswith("E_REQUEST_INVALID: ")
    (workdir / "notes.onnx").write_text("not a model")
    done = rtctl("pack", "notes.onnx", "--name", "adder", "--version", "1.0.0", "--key", "keys/signing.pem",
                 "--out", "pkg2", cwd=workdir)
    assert done.returncode != 0 and done.stderr.startswith("E_ONNX_PARSE: ")
    assert not (workdir / "pkg2").exists()
