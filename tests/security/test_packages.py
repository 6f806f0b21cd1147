"""Malicious and broken packages, each refused with its exact code and leaving nothing behind.

Every package here is built by the test itself (real keys, real files, real tar streams,
real ONNX protobufs). A case returns the package source; the test loads it the way the daemon
does (verify_package, then the worker's ONNX guards over the verified bytes) and asserts the
refusal code, then that no memfd or fd leaked, no file appeared or changed under the test's
directory and the rollback store is byte-for-byte unchanged.
"""
import base64
import dataclasses
import datetime
import gc
import hashlib
import io
import json
import os
import tarfile
import threading
import zipfile
import zlib

import numpy as np
import pytest
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec, padding, rsa
from hypothesis import HealthCheck, given, settings, strategies as st
from onnx import TensorProto, helper, numpy_helper

from rtd.errors import Code, RtdError
from rtd.kernels.ops.base import supported
from rtd.loader import RollbackStore, TrustStore, boundedjson, keys, manifest, onnx_guard, pack, signing, verify_package


@pytest.fixture(scope="session")
def signer():
    return keys.generate()


@pytest.fixture(scope="session")
def other_signer():
    return keys.generate()


def relu_model(extra_nodes=(), initializers=(), opset=17, **graph_kw) -> bytes:
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])
    nodes = [helper.make_node("Relu", ["x"], ["y"]), *extra_nodes]
    graph = helper.make_graph(nodes, "g", [x], [y], list(initializers), **graph_kw)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)]).SerializeToString()


def weights_model() -> tuple[bytes, np.ndarray]:
    """y = x + w with w as an initializer (the model the external-data cases rewrite)."""
    w = np.arange(4, dtype=np.float32).reshape(1, 4)
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])
    graph = helper.make_graph([helper.make_node("Add", ["x", "w"], ["y"])], "g", [x], [y],
                              [numpy_helper.from_array(w, "w")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString(), w


def _snapshot(root: str, rollback_path: str) -> dict:
    gc.collect()   # views dropped by earlier tests must not close their mappings mid-comparison
    fds = {}
    for fd in os.listdir("/proc/self/fd"):
        try:
            fds[fd] = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            pass
    tree = {}
    for directory, dirs, files in os.walk(root):
        for name in dirs + files:
            st = os.lstat(os.path.join(directory, name))
            tree[os.path.join(directory, name)] = (st.st_mode, st.st_size, st.st_mtime_ns)
    rollback = open(rollback_path, "rb").read() if os.path.exists(rollback_path) else None
    return {"memfds": sorted(v for v in fds.values() if v.startswith("/memfd:rtd:")),
            "fd_count": len(fds), "tree": tree, "rollback": rollback}


@dataclasses.dataclass
class Kit:
    root: str
    signer: object
    other_signer: object
    trust_dir: str
    rollback_path: str
    options: dict = dataclasses.field(default_factory=dict)

    @property
    def trust(self) -> TrustStore:
        return TrustStore(self.trust_dir)

    @property
    def rollback(self) -> RollbackStore:
        return RollbackStore(self.rollback_path)

    def files(self, model: bytes | None = None, *, key=None, parse_model=True, **kw) -> dict[str, bytes]:
        kw.setdefault("name", "demo")
        kw.setdefault("version", "1.0.0")
        if not parse_model:
            kw["signature"] = ([], [], {})
        return pack.package_files(model if model is not None else relu_model(), private_key=key or self.signer, **kw)

    def resign(self, files: dict, key=None) -> dict:
        return pack.sign_files(files, key or self.signer)

    def directory(self, files: dict, name: str = "demo") -> str:
        path = os.path.join(self.root, "pkgs", name)
        pack.write_directory(files, path)
        return path

    def tar(self, members: list[tuple[tarfile.TarInfo, bytes | None]], name: str = "pkg.tar", mode="w") -> str:
        path = os.path.join(self.root, name)
        with tarfile.open(path, mode, format=tarfile.PAX_FORMAT) as tar:
            for info, data in members:
                if data is not None:
                    info.size = len(data)
                tar.addfile(info, io.BytesIO(data) if data is not None else None)
        return path

    def verify(self, source, **kw):
        options = {"trust": self.trust, "tenant": "tenant-a", "rollback": self.rollback, **self.options, **kw}
        return verify_package(source, **options)

    def load(self, source, allowed_ops=None, limits=onnx_guard.GuardLimits()):
        """What the daemon and its worker do: verify, then run the guards on the verified bytes."""
        with self.verify(source) as pkg:
            external = {name: f.data for name, f in pkg.siblings.items()}
            onnx_guard.check_model(pkg.model.data, allowed_ops=allowed_ops, external=external or None,
                                   limits=limits)

    def snapshot(self) -> dict:
        return _snapshot(self.root, self.rollback_path)


@pytest.fixture
def kit(tmp_path, signer, other_signer) -> Kit:
    trust_dir = tmp_path / "trust" / "tenant-a"
    trust_dir.mkdir(parents=True)
    (tmp_path / "state").mkdir()
    (trust_dir / "signing.pub.pem").write_bytes(keys.public_pem(signer.public_key()))
    return Kit(str(tmp_path), signer, other_signer, str(trust_dir), str(tmp_path / "state" / "rollback.json"))


def utc(*args) -> datetime.datetime:
    return datetime.datetime(*args, tzinfo=datetime.timezone.utc)

CASES = []


def case(code: Code):
    def register(build):
        CASES.append(pytest.param(build, code, id=build.__name__))
        return build
    return register


def _envelope(manifest_bytes: bytes, key_fp: str, raw: bytes, **overrides) -> bytes:
    env = {"format": signing.FORMAT, "alg": signing.ALGORITHM, "key": key_fp,
           "manifest_sha256": hashlib.sha256(manifest_bytes).hexdigest(),
           "signature": base64.b64encode(raw).decode(), **overrides}
    return boundedjson.dumps(env)


def _with_manifest(kit, names_and_data: list[tuple[bytes, bytes]]) -> dict:
    """An upload whose manifest lists raw names (possibly hostile), signed by the trusted key."""
    files = kit.files()
    lines = b"".join(hashlib.sha256(d).hexdigest().encode() + b"  " + n + b"\n" for n, d in names_and_data)
    files["1/checksum.sha256"] = lines
    files["1/checksum.sha256.sig"] = signing.sign(kit.signer, lines)
    return files


# 1-3: integrity of the signed content -------------------------------------------------------

@case(Code.E_DIGEST_MISMATCH)
def byte_flipped_in_model(kit):
    files = kit.files()
    model = bytearray(files["1/model.onnx"])
    model[len(model) // 2] ^= 0x01
    files["1/model.onnx"] = bytes(model)
    return kit.directory(files)


@case(Code.E_DIGEST_MISMATCH)
def model_swapped_manifest_recomputed_not_resigned(kit):
    files = kit.files()
    files["1/model.onnx"] = relu_model(opset=18)
    digests = manifest.parse(files["1/checksum.sha256"])
    digests["model.onnx"] = hashlib.sha256(files["1/model.onnx"]).hexdigest()
    files["1/checksum.sha256"] = manifest.render(digests)
    return kit.directory(files)


@case(Code.E_DIGEST_MISMATCH)
def metadata_edited_after_signing(kit):
    files = kit.files()
    files["1/metadata.json"] = files["1/metadata.json"].replace(b'"1.0.0"', b'"1.0.1"')
    return files


@case(Code.E_DIGEST_MISMATCH)
def config_edited_after_signing(kit):
    files = kit.files(config_bytes=b'name: "demo"\nmax_batch_size: 1\n')
    files["config.pbtxt"] = b'name: "demo"\nmax_batch_size: 64\n'
    return kit.directory(files)


@case(Code.E_FILE_UNLISTED)
def config_added_but_not_bound(kit):
    files = kit.files()
    files["config.pbtxt"] = b'name: "demo"\n'
    return kit.directory(files)


# signatures and keys -----------------------------------------------------------------------

@case(Code.E_SIG_MISSING)
def signature_missing(kit):
    files = kit.files()
    del files["1/checksum.sha256.sig"]
    return kit.directory(files)


@case(Code.E_SIG_MISSING)
def signature_empty(kit):
    files = kit.files()
    files["1/checksum.sha256.sig"] = b""
    return files


@case(Code.E_SIG_INVALID)
def signature_oversized(kit):
    files = kit.files()
    files["1/checksum.sha256.sig"] = b"{" + b" " * (64 << 10) + b"}"
    return kit.directory(files)


@case(Code.E_SIG_INVALID)
def signature_bytes_forged(kit):
    files = kit.files()
    m = files["1/checksum.sha256"]
    files["1/checksum.sha256.sig"] = _envelope(m, keys.fingerprint(kit.signer.public_key()), os.urandom(384))
    return files


@case(Code.E_SIG_INVALID)
def signature_envelope_legacy_format(kit):
    files = kit.files()
    m = files["1/checksum.sha256"]
    raw = kit.signer.sign(m, signing.PSS, hashes.SHA256())
    files["1/checksum.sha256.sig"] = _envelope(m, keys.fingerprint(kit.signer.public_key()), raw,
                                               format="https://model_signing/Digests/v0.1")
    return files


@case(Code.E_SIG_INVALID)
def signature_envelope_reencoded(kit):
    files = kit.files()
    env = json.loads(files["1/checksum.sha256.sig"])
    files["1/checksum.sha256.sig"] = json.dumps(env).encode()   # same content, other encoding
    return files


@case(Code.E_KEY_UNTRUSTED)
def signed_by_another_tenants_key(kit):
    other = kit.root + "/trust/tenant-b"
    os.makedirs(other)
    with open(other + "/signing.pub.pem", "wb") as f:
        f.write(keys.public_pem(kit.other_signer.public_key()))
    return kit.directory(kit.files(key=kit.other_signer))


@case(Code.E_KEY_REVOKED)
def revoked_key(kit):
    with open(kit.trust_dir + "/revoked.txt", "w") as f:
        f.write(f"# rotated out\n{keys.fingerprint(kit.signer.public_key())}\n")
    return kit.directory(kit.files())


def _trust(kit, public_key) -> None:
    with open(kit.trust_dir + "/odd.pub.pem", "wb") as f:
        f.write(keys.public_pem(public_key))


@case(Code.E_ALG_UNSUPPORTED)
def pkcs1v15_signature(kit):
    files = kit.files()
    m = files["1/checksum.sha256"]
    raw = kit.signer.sign(m, padding.PKCS1v15(), hashes.SHA256())
    files["1/checksum.sha256.sig"] = _envelope(m, keys.fingerprint(kit.signer.public_key()), raw)
    return files


@case(Code.E_ALG_UNSUPPORTED)
def pss_salt_length_64(kit):
    files = kit.files()
    m = files["1/checksum.sha256"]
    raw = kit.signer.sign(m, padding.PSS(mgf=padding.MGF1(hashes.SHA256()), salt_length=64), hashes.SHA256())
    files["1/checksum.sha256.sig"] = _envelope(m, keys.fingerprint(kit.signer.public_key()), raw)
    return files


@case(Code.E_ALG_UNSUPPORTED)
def rsa_1024_key(kit):
    short = rsa.generate_private_key(public_exponent=65537, key_size=1024)
    _trust(kit, short.public_key())
    files = kit.files()
    m = files["1/checksum.sha256"]
    raw = short.sign(m, signing.PSS, hashes.SHA256())
    files["1/checksum.sha256.sig"] = _envelope(m, keys.fingerprint(short.public_key()), raw)
    return files


@case(Code.E_ALG_UNSUPPORTED)
def ecdsa_key(kit):
    ec_key = ec.generate_private_key(ec.SECP256R1())
    _trust(kit, ec_key.public_key())
    files = kit.files()
    m = files["1/checksum.sha256"]
    raw = ec_key.sign(m, ec.ECDSA(hashes.SHA256()))
    files["1/checksum.sha256.sig"] = _envelope(m, keys.fingerprint(ec_key.public_key()), raw)
    return files


@case(Code.E_ALG_UNSUPPORTED)
def envelope_names_pkcs1(kit):
    files = kit.files()
    m = files["1/checksum.sha256"]
    raw = kit.signer.sign(m, padding.PKCS1v15(), hashes.SHA256())
    files["1/checksum.sha256.sig"] = _envelope(m, keys.fingerprint(kit.signer.public_key()), raw,
                                               alg="rsa-pkcs1v15-sha256")
    return files


# file set, binding, freshness -----------------------------------------------------------------

@case(Code.E_FILE_UNLISTED)
def extra_unlisted_python_file(kit):
    files = kit.files()
    files["1/evil.py"] = b"import os; os.system('id')\n"
    return kit.directory(files)


@case(Code.E_FILE_UNLISTED)
def extra_unlisted_external_data(kit):
    files = kit.files()
    files["1/model.onnx.data"] = b"\0" * 64
    return files


@case(Code.E_FILE_UNLISTED)
def second_version_directory(kit):
    files = kit.files()
    files.update({"2/" + p.split("/", 1)[1]: d for p, d in kit.files(counter=2).items() if "/" in p})
    return kit.directory(files)


@case(Code.E_FILE_MISSING)
def listed_file_absent(kit):
    files = kit.files(siblings={"weights.bin": b"\1" * 16})
    del files["1/weights.bin"]
    return kit.directory(files)


@case(Code.E_BINDING_MISMATCH)
def package_for_a_requested_as_b(kit):
    kit.options["expected_name"] = "other"
    return kit.directory(kit.files(), name="other")


@case(Code.E_BINDING_MISMATCH)
def archive_top_directory_renamed(kit):
    files = kit.files()
    members = [(tarfile.TarInfo("other/" + p), d) for p, d in sorted(files.items())]
    return kit.tar(members)


@case(Code.E_BINDING_MISMATCH)
def signed_v2_in_directory_3(kit):
    files = kit.files(counter=2)
    return {("3/" + p.split("/", 1)[1] if "/" in p else p): d for p, d in files.items()}


@case(Code.E_BINDING_MISMATCH)
def config_names_another_model(kit):
    return kit.files(config_bytes=b'name: "other"\n')


@case(Code.E_ROLLBACK)
def older_counter_replayed(kit):
    kit.rollback.record("tenant-a", "demo", 2)
    return kit.directory(kit.files(counter=1))


@case(Code.E_ROLLBACK)
def same_counter_replayed(kit):
    kit.rollback.record("tenant-a", "demo", 1)
    return kit.files(counter=1)


@case(Code.E_EXPIRED)
def expired(kit):
    kit.options["now"] = utc(2030, 1, 1)
    return kit.files(expires="2029-12-31T23:59:59Z")


@case(Code.E_VERSION_UNSUPPORTED)
def needs_newer_rtd(kit):
    return kit.files(min_rtd_version="99.0.0")


# paths, links, special files ------------------------------------------------------------------

@case(Code.E_PATH_UNSAFE)
def manifest_name_dotdot(kit):
    return _with_manifest(kit, [(b"../x", b"x")])


@case(Code.E_PATH_UNSAFE)
def manifest_name_absolute(kit):
    return _with_manifest(kit, [(b"/etc/passwd", b"x")])


@case(Code.E_PATH_UNSAFE)
def manifest_name_double_slash(kit):
    return _with_manifest(kit, [(b"a//b", b"x")])


@case(Code.E_PATH_UNSAFE)
def manifest_name_nul(kit):
    return _with_manifest(kit, [(b"model.onnx\0.txt", b"x")])


@case(Code.E_PATH_UNSAFE)
def manifest_name_not_utf8(kit):
    return _with_manifest(kit, [(b"mod\xffel.onnx", b"x")])


@case(Code.E_PATH_UNSAFE)
def upload_path_traversal(kit):
    files = kit.files()
    files["1/../../etc/cron.d/x"] = b"* * * * * root id\n"
    return files


@case(Code.E_LINK_FORBIDDEN)
def model_is_symlink(kit):
    path = kit.directory(kit.files())
    real = os.path.join(kit.root, "real.onnx")
    os.rename(os.path.join(path, "1", "model.onnx"), real)
    os.symlink(real, os.path.join(path, "1", "model.onnx"))
    return path


@case(Code.E_LINK_FORBIDDEN)
def version_dir_is_symlink(kit):
    path = kit.directory(kit.files())
    os.rename(os.path.join(path, "1"), os.path.join(kit.root, "elsewhere"))
    os.symlink(os.path.join(kit.root, "elsewhere"), os.path.join(path, "1"))
    return path


@case(Code.E_LINK_FORBIDDEN)
def source_version_dir_is_symlink(kit):
    path = kit.directory(kit.files())
    os.symlink(os.path.join(path, "1"), os.path.join(kit.root, "2"))
    return os.path.join(kit.root, "2")


@case(Code.E_LINK_FORBIDDEN)
def model_is_hardlinked(kit):
    path = kit.directory(kit.files())
    os.link(os.path.join(path, "1", "model.onnx"), os.path.join(kit.root, "alias.onnx"))
    return path


@case(Code.E_SPECIAL_FILE)
def model_is_fifo(kit):
    path = kit.directory(kit.files())
    os.unlink(os.path.join(path, "1", "model.onnx"))
    os.mkfifo(os.path.join(path, "1", "model.onnx"))
    return path


# archives ---------------------------------------------------------------------------------------

def _members(kit, files=None, top="demo"):
    return [(tarfile.TarInfo(f"{top}/{p}"), d) for p, d in sorted((files or kit.files()).items())]


def _link(name, target, kind=tarfile.SYMTYPE):
    info = tarfile.TarInfo(name)
    info.type, info.linkname = kind, target
    return info, None


@case(Code.E_PATH_UNSAFE)
def tar_member_traversal(kit):
    return kit.tar(_members(kit) + [(tarfile.TarInfo("demo/../../evil"), b"x")])


@case(Code.E_PATH_UNSAFE)
def tar_member_absolute(kit):
    return kit.tar([(tarfile.TarInfo("/etc/evil"), b"x")] + _members(kit))


@case(Code.E_LINK_FORBIDDEN)
def tar_symlink_member(kit):
    return kit.tar([_link("demo/1/model.onnx", "/etc/passwd")])


@case(Code.E_LINK_FORBIDDEN)
def tar_hardlink_member(kit):
    return kit.tar(_members(kit) + [_link("demo/1/extra.onnx", "demo/1/model.onnx", tarfile.LNKTYPE)])


@case(Code.E_LINK_FORBIDDEN)
def tar_link_then_write_chain(kit):
    return kit.tar([_link("demo/1", "/tmp"), (tarfile.TarInfo("demo/1/model.onnx"), b"x")])


@case(Code.E_LINK_FORBIDDEN)
def tar_empty_name_symlink_chain(kit):
    return kit.tar([_link("demo/", "."), _link("demo/a", ""), _link("demo/a/b", "../..")])


@case(Code.E_SPECIAL_FILE)
def tar_device_member(kit):
    info = tarfile.TarInfo("demo/1/model.onnx")
    info.type, info.devmajor, info.devminor = tarfile.CHRTYPE, 1, 3
    return kit.tar([(info, None)])


@case(Code.E_SPECIAL_FILE)
def tar_fifo_member(kit):
    info = tarfile.TarInfo("demo/1/model.onnx")
    info.type = tarfile.FIFOTYPE
    return kit.tar([(info, None)])


@case(Code.E_ARCHIVE_INVALID)
def tar_duplicate_member(kit):
    members = _members(kit)
    return kit.tar(members + [m for m in members if m[0].name.endswith("model.onnx")], name="dup.tar")


@case(Code.E_ARCHIVE_LIMIT)
def gzip_bomb(kit):
    """A member declared 1 GiB whose first 128 MiB of zeros compress to about 128 KB; intake
    must refuse on the ratio long before the stream (cut short here) would end."""
    path = os.path.join(kit.root, "bomb.tar.gz")
    header = tarfile.TarInfo("demo/1/model.onnx")
    header.size = 1 << 30
    compressor = zlib.compressobj(9, zlib.DEFLATED, 31)
    zeros = bytes(8 << 20)
    with open(path, "wb") as f:
        f.write(compressor.compress(header.tobuf(tarfile.PAX_FORMAT)))
        for _ in range(16):
            f.write(compressor.compress(zeros))
        f.write(compressor.flush())
    return path


@case(Code.E_ARCHIVE_LIMIT)
def tar_too_many_members(kit):
    top = tarfile.TarInfo("demo")
    top.type = tarfile.DIRTYPE
    return kit.tar([(top, None)] * 300)


@case(Code.E_ARCHIVE_INVALID)
def tar_truncated(kit):
    path = kit.tar(_members(kit))
    with open(path, "r+b") as f:
        f.truncate(700)
    return path


@case(Code.E_ARCHIVE_INVALID)
def gzip_corrupt_extra_field(kit):
    """A gzip header whose FEXTRA length runs into bad deflate data (found by the fuzzer):
    Python 3.11.2's tarfile raised AttributeError from its own header reader."""
    path = os.path.join(kit.root, "extra.tar.gz")
    with open(path, "wb") as f:
        f.write(b"\x1f\x8b\x08\x04\xb4\xac\x14k\x02\xff\x03\x00\x00\x00\x00\x00\x00\x00\x00\x00")
    return path


# formats and parsing ----------------------------------------------------------------------------

@case(Code.E_FORMAT_FORBIDDEN)
def pickle_named_model_onnx(kit):
    # protocol 4: PROTO 4, FRAME, GLOBAL 'os system', ... (never unpickled; written by hand)
    payload = b"\x80\x04\x95\x1f\x00\x00\x00\x00\x00\x00\x00\x8c\x02os\x8c\x06system\x93\x8c\x02id\x85R."
    return kit.files(payload, parse_model=False)


@case(Code.E_FORMAT_FORBIDDEN)
def pickle_protocol0_named_model_onnx(kit):
    return kit.files(b"cos\nsystem\n(S'id'\ntR.", parse_model=False)


@case(Code.E_FORMAT_FORBIDDEN)
def torch_zip_named_model_onnx(kit):
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as z:
        z.writestr("archive/data.pkl", b"\x80\x02}q\x00.")
        z.writestr("archive/version", b"3\n")
    return kit.files(buffer.getvalue(), parse_model=False)


@case(Code.E_ONNX_PARSE)
def truncated_protobuf(kit):
    model = relu_model()
    return kit.files(model[: len(model) - 9], parse_model=False)


@case(Code.E_ONNX_PARSE)
def json_saved_as_onnx(kit):
    return kit.files(b'{"irVersion": "8", "graph": {"node": []}}\n', parse_model=False)


# metadata and config ------------------------------------------------------------------------------

def _metadata(kit, data: bytes) -> dict:
    files = kit.files()
    files["1/metadata.json"] = data
    return kit.resign(files)


@case(Code.E_METADATA_INVALID)
def metadata_10mb(kit):
    return kit.directory(_metadata(kit, b'{"pad": "' + b"a" * (10 << 20) + b'"}'))


@case(Code.E_METADATA_INVALID)
def metadata_duplicate_keys(kit):
    return _metadata(kit, kit.files()["1/metadata.json"].replace(b"{", b'{"name": "other",', 1))


@case(Code.E_METADATA_INVALID)
def metadata_deeply_nested(kit):
    return _metadata(kit, b'{"a": ' + b"[" * 5000 + b"]" * 5000 + b"}")


@case(Code.E_METADATA_INVALID)
def metadata_nan(kit):
    return _metadata(kit, kit.files()["1/metadata.json"].replace(b'"counter": 1', b'"counter": NaN'))


@case(Code.E_METADATA_INVALID)
def metadata_not_utf8(kit):
    return _metadata(kit, kit.files()["1/metadata.json"].replace(b'"demo"', b'"d\xe9mo"'))


@case(Code.E_METADATA_INVALID)
def metadata_unknown_key(kit):
    return _metadata(kit, kit.files()["1/metadata.json"].replace(b"{", b'{"run_on_load": "id",', 1))


@case(Code.E_CONFIG_INVALID)
def config_unknown_field(kit):
    return kit.files(config_bytes=b'name: "demo"\nbackend_command: "sh -c id"\n')


# ONNX guards (run on the verified bytes, as the worker does) --------------------------------------

def _external(location="weights.bin", **entries):
    """The weights model with `w` moved to external data described by `entries`."""
    model_bytes, w = weights_model()
    model = onnx_model(model_bytes)
    tensor = model.graph.initializer[0]
    tensor.ClearField("raw_data")
    tensor.data_location = TensorProto.EXTERNAL
    for key, value in [("location", location), *entries.items()]:
        entry = tensor.external_data.add()
        entry.key, entry.value = key, value
    return model, w


def onnx_model(data: bytes):
    import onnx
    return onnx.load_from_string(data)


def _external_case(kit, model, siblings=None):
    return kit.files(model.SerializeToString(), siblings=siblings or {"weights.bin": bytes(16)})


@case(Code.E_ONNX_EXTERNAL_DATA)
def external_data_dotdot(kit):
    return _external_case(kit, _external("../weights.bin")[0])


@case(Code.E_ONNX_EXTERNAL_DATA)
def external_data_absolute(kit):
    return _external_case(kit, _external("/etc/passwd")[0])


@case(Code.E_ONNX_EXTERNAL_DATA)
def external_data_sub_dotdot(kit):
    return _external_case(kit, _external("s/../../weights.bin")[0])


@case(Code.E_ONNX_EXTERNAL_DATA)
def external_data_ort_mem_addr(kit):
    return _external_case(kit, _external("*/_ORT_MEM_ADDR_/*")[0])


@case(Code.E_ONNX_EXTERNAL_DATA)
def external_data_duplicate_location(kit):
    model, _ = _external("weights.bin")
    entry = model.graph.initializer[0].external_data.add()
    entry.key, entry.value = "location", "other.bin"
    return _external_case(kit, model)


@case(Code.E_ONNX_EXTERNAL_DATA)
def external_data_class_key(kit):
    return _external_case(kit, _external(__class__="os")[0])


@case(Code.E_ONNX_EXTERNAL_DATA)
def external_data_negative_offset(kit):
    return _external_case(kit, _external(offset="-4", length="16")[0])


@case(Code.E_ONNX_EXTERNAL_DATA)
def external_data_huge_length(kit):
    return _external_case(kit, _external(length=str(2 ** 62))[0])


@case(Code.E_ONNX_EXTERNAL_DATA)
def external_data_not_a_signed_sibling(kit):
    return _external_case(kit, _external("other.bin")[0])


@case(Code.E_ONNX_EXTERNAL_DATA)
def sparse_initializer_external(kit):
    values = numpy_helper.from_array(np.ones(2, np.float32), "sv")
    values.ClearField("raw_data")
    values.data_location = TensorProto.EXTERNAL
    entry = values.external_data.add()
    entry.key, entry.value = "location", "weights.bin"
    indices = numpy_helper.from_array(np.array([0, 3], np.int64), "si")
    sparse = helper.make_sparse_tensor(values, indices, [4])
    model = onnx_model(relu_model(sparse_initializer=[sparse]))
    return _external_case(kit, model)


@case(Code.E_ONNX_EXTERNAL_DATA)
def constant_sparse_value_external(kit):
    values = numpy_helper.from_array(np.ones(2, np.float32), "cv")
    values.ClearField("raw_data")
    values.data_location = TensorProto.EXTERNAL
    entry = values.external_data.add()
    entry.key, entry.value = "location", "weights.bin"
    sparse = helper.make_sparse_tensor(values, numpy_helper.from_array(np.array([0, 1], np.int64), "ci"), [4])
    constant = helper.make_node("Constant", [], ["c"], sparse_value=sparse)
    return _external_case(kit, onnx_model(relu_model([constant])))


def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        out.append((n & 0x7F) | (0x80 if n > 0x7F else 0))
        n >>= 7
        if not n:
            return bytes(out)


def _field(number: int, payload: bytes) -> bytes:
    return _varint(number << 3 | 2) + _varint(len(payload)) + payload


def _nested_if(depth: int) -> bytes:
    """If nodes nested `depth` deep, written as raw protobuf from the inside out (onnx's Python
    API cannot even build it: protobuf's own nesting limit is 100 messages)."""
    out = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])
    body = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "leaf", [], [out]).SerializeToString()
    leaf = body
    for level in range(depth):
        def branch(name, graph):
            return _field(5, _field(1, name) + _varint(20 << 3) + _varint(5) + _field(6, graph))
        node = (_field(1, b"c") + _field(2, b"y") + _field(3, b"if%d" % level) + _field(4, b"If")
                + branch(b"then_branch", body) + branch(b"else_branch", leaf))
        body = _field(1, node) + _field(2, b"g%d" % level)
    header = helper.make_model(helper.make_graph([], "top", [], []), opset_imports=[helper.make_opsetid("", 17)])
    header.ClearField("graph")
    return header.SerializeToString() + _field(7, body)


@case(Code.E_ONNX_LIMIT)
def if_nested_200_deep(kit):
    return kit.files(_nested_if(200), parse_model=False)


def _functions_model(count: int, recursive: bool) -> bytes:
    functions = []
    for i in range(count):
        callee = f"f{(i + 1) % count}" if recursive else "Relu"
        domain = "local" if recursive else ""
        functions.append(helper.make_function("local", f"f{i}", ["a"], ["b"],
                                              [helper.make_node(callee, ["a"], ["b"], domain=domain)],
                                              [helper.make_opsetid("", 17)]))
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])
    graph = helper.make_graph([helper.make_node("f0", ["x"], ["y"], domain="local")], "g", [x], [y])
    return helper.make_model(graph, functions=functions, opset_imports=[
        helper.make_opsetid("", 17), helper.make_opsetid("local", 1)]).SerializeToString()


@case(Code.E_ONNX_LIMIT)
def more_than_1000_functions(kit):
    return kit.files(_functions_model(1001, recursive=False), parse_model=False)


@case(Code.E_ONNX_LIMIT)
def recursive_functions(kit):
    return kit.files(_functions_model(3, recursive=True), parse_model=False)


@case(Code.E_ONNX_INVALID)
def initializer_bytes_differ_from_dims(kit):
    w = numpy_helper.from_array(np.zeros((1, 4), np.float32), "w")
    w.raw_data = bytes(12)
    return kit.files(relu_model(initializers=[w]), parse_model=False)


@case(Code.E_ONNX_INVALID)
def dims_product_overflows(kit):
    w = TensorProto(name="w", data_type=TensorProto.FLOAT, dims=[2 ** 62, 2 ** 62, 4], raw_data=b"")
    return kit.files(relu_model(initializers=[w]), parse_model=False)


@case(Code.E_ONNX_LIMIT)
def constant_of_shape_2_pow_40(kit):
    shape = numpy_helper.from_array(np.array([2 ** 40], np.int64), "shape")
    node = helper.make_node("ConstantOfShape", ["shape"], ["big"])
    return kit.files(relu_model([node], initializers=[shape]), parse_model=False)


@case(Code.E_ONNX_OP_FORBIDDEN)
def custom_domain_op(kit):
    node = helper.make_node("Exec", ["x"], ["z"], domain="com.evil")
    model = onnx_model(relu_model([node]))
    model.opset_import.add(domain="com.evil", version=1)
    return kit.files(model.SerializeToString(), parse_model=False)


@case(Code.E_ONNX_LIMIT)
def model_over_size_cap(kit):
    kit.guard_limits = onnx_guard.GuardLimits(max_model_bytes=1 << 16)
    w = numpy_helper.from_array(np.zeros(1 << 15, np.float32), "w")
    return kit.files(relu_model(initializers=[w]), parse_model=False)


@pytest.mark.timeout(120)
@pytest.mark.parametrize("build, code", CASES)
def test_refused_and_nothing_left_behind(kit, build, code):
    kit.guard_limits = onnx_guard.GuardLimits()
    source = build(kit)
    before = kit.snapshot()
    with pytest.raises(RtdError) as refusal:
        kit.load(source, limits=kit.guard_limits)
    assert refusal.value.code is code, str(refusal.value)
    assert kit.snapshot() == before


def test_suite_covers_at_least_36_packages():
    assert len(CASES) >= 36


def test_op_outside_the_executors_allow_list(kit):
    """The worker passes rtd.kernels' claimed ops; an op the executor lacks is refused up front."""
    node = helper.make_node("ImageDecoder", ["s"], ["t"])
    source = kit.files(relu_model([node]), parse_model=False)
    with pytest.raises(RtdError) as refusal:
        kit.load(source, allowed_ops=set(supported()))
    assert refusal.value.code is Code.E_ONNX_OP_FORBIDDEN


def test_fifo_does_not_block(kit):
    """The FIFO case above must be refused without a writer ever appearing."""
    source = model_is_fifo(kit)
    result = []
    thread = threading.Thread(target=lambda: result.append(_code_of(kit, source)), daemon=True)
    thread.start()
    thread.join(10)
    assert result == [Code.E_SPECIAL_FILE]


def _code_of(kit, source):
    try:
        kit.load(source)
    except RtdError as e:
        return e.code


@pytest.fixture(scope="module")
def signed_upload(signer):
    return pack.package_files(relu_model(), name="demo", version="1.0.0", private_key=signer,
                              config_bytes=b'name: "demo"\n')


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_any_single_byte_change_is_refused(kit, signed_upload, data):
    kit.load(signed_upload)   # the untouched package loads
    path = data.draw(st.sampled_from(sorted(signed_upload)))
    original = signed_upload[path]
    index = data.draw(st.integers(0, len(original) - 1))
    byte = data.draw(st.integers(0, 255).filter(lambda b: b != original[index]))
    changed = dict(signed_upload)
    changed[path] = original[:index] + bytes([byte]) + original[index + 1:]
    with pytest.raises(RtdError):
        kit.load(changed)
