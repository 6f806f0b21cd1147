"""Intake caps and layout rules, each refused with its code before any digest is trusted."""
import io
import os
import tarfile
import zipfile

import pytest

from rtd.errors import Code, RtdError
from rtd.loader import IntakeLimits, pack
from rtd.loader.intake import read_package


@pytest.fixture
def files(signer, model_bytes):
    return pack.package_files(model_bytes, name="adder", version="1.0.0", private_key=signer)


def _refused(code, source, limits=IntakeLimits()):
    with pytest.raises(RtdError) as e:
        read_package(source, limits).close()
    assert e.value.code is code, str(e.value)


def test_every_form_reads_the_same_files(tmp_path, files):
    pack.write_package(files, str(tmp_path / "adder"), "adder")
    pack.write_package(files, str(tmp_path / "adder.tar.gz"), "adder")
    for source in (files, str(tmp_path / "adder"), str(tmp_path / "adder.tar.gz")):
        fileset = read_package(source)
        try:
            assert {p: f.bytes() for p, f in fileset.files.items()} == files
        finally:
            fileset.close()


def test_total_and_per_file_caps(tmp_path, files, model_bytes):
    pack.write_package(files, str(tmp_path / "adder"), "adder")
    pack.write_package(files, str(tmp_path / "adder.tar"), "adder")
    _refused(Code.E_ONNX_LIMIT, str(tmp_path / "adder"), IntakeLimits(max_file_bytes=len(model_bytes) - 1))
    _refused(Code.E_ARCHIVE_LIMIT, str(tmp_path / "adder.tar"), IntakeLimits(max_total_bytes=len(model_bytes)))
    _refused(Code.E_ONNX_LIMIT, files, IntakeLimits(max_files=2))


def test_small_documents_have_their_own_caps(files):
    _refused(Code.E_METADATA_INVALID, {**files, "1/metadata.json": b" " * (1 << 20 | 1)})
    _refused(Code.E_CONFIG_INVALID, {**files, "config.pbtxt": b"#" * (1 << 20 | 1)})


def test_layout_is_an_allow_list(tmp_path, files):
    _refused(Code.E_FILE_UNLISTED, {**files, "README.md": b"hi"})
    _refused(Code.E_FILE_UNLISTED, {**files, "1/sub/x.bin": b"x"})
    _refused(Code.E_FILE_UNLISTED, {**files, "v1/model.onnx": b"x"})
    _refused(Code.E_PATH_UNSAFE, {**files, "1/.hidden": b"x"})
    _refused(Code.E_PATH_UNSAFE, {**files, "file:1/model.onnx": b"x"})
    path = str(tmp_path / "adder")
    pack.write_package(files, path, "adder")
    os.mkdir(os.path.join(path, "1", "sub"))
    _refused(Code.E_FILE_UNLISTED, path)


def test_not_a_tar(tmp_path, files):
    zip_path = tmp_path / "pkg.tar"
    with zipfile.ZipFile(zip_path, "w") as z:
        z.writestr("adder/1/model.onnx", files["1/model.onnx"])
    _refused(Code.E_ARCHIVE_INVALID, str(zip_path))
    empty = tmp_path / "empty.tar"
    tarfile.open(empty, "w").close()
    _refused(Code.E_ARCHIVE_INVALID, str(empty))


def test_member_longer_than_the_archive(tmp_path, files):
    path = tmp_path / "short.tar"
    info = tarfile.TarInfo("adder/1/model.onnx")
    info.size = 1 << 20
    with open(path, "wb") as f:
        f.write(info.tobuf(tarfile.PAX_FORMAT) + b"\0" * 1024)
    _refused(Code.E_ARCHIVE_INVALID, str(path))


def test_tar_members_outside_the_top_directory(tmp_path, files):
    path = tmp_path / "two.tar"
    with tarfile.open(path, "w") as tar:
        for name, top in (("1/model.onnx", "adder"), ("1/metadata.json", "other")):
            info = tarfile.TarInfo(f"{top}/{name}")
            info.size = len(files[name])
            tar.addfile(info, io.BytesIO(files[name]))
    _refused(Code.E_ARCHIVE_INVALID, str(path))
