"""Package intake: loader.verify_package (read_package underneath) over hostile sources —
mutations of a real signed package as an upload mapping, a directory, a .tar or a .tar.gz;
random mappings; tar archives built member by member (names with '..', absolute, empty,
non-ASCII; links, devices, FIFOs, contiguous and directory members; duplicates; PAX headers
that rename or resize; sizes patched past the archive's end); directories holding links,
FIFOs and nested directories; and the signed documents alone (manifest, metadata.json,
signature envelope).

Property: RtdError with an E_ code, or a VerifiedPackage whose files are exactly the signed
package's; no memfd or other fd left open, nothing written beside the source, the rollback
store unchanged.
"""
import asyncio
import atexit
import bz2
import dataclasses
import datetime
import functools
import gzip
import io
import lzma
import os
import shutil
import tarfile
import tempfile

import pytest
from hypothesis import strategies as st
from onnx import TensorProto, helper

from rtd.daemon.config import Config, TenantConfig
from rtd.daemon.serving.supervisor import Supervisor
from rtd.daemon.serving.tenancy import Tenancy
from rtd.sandbox import load_policy
from rtd.errors import Code
from rtd.loader import RollbackStore, TrustStore, boundedjson, keys, manifest, metadata, pack, signing, verify_package

from .harness import assert_no_fd_leak, assert_refusal, assert_refused, edit_bytes, note, open_fds, run


@dataclasses.dataclass
class Setup:
    root: str
    key: object
    trust: TrustStore
    rollback: RollbackStore
    signed: dict


@functools.cache
def setup() -> Setup:
    """One key, trust store, rollback store and signed package for the whole process."""
    root = tempfile.mkdtemp(prefix="rtd-fuzz-intake-")
    atexit.register(shutil.rmtree, root, True)
    key = keys.generate()
    trust_dir = os.path.join(root, "trust")
    os.mkdir(trust_dir)
    with open(os.path.join(trust_dir, keys.PUBLIC_NAME), "wb") as f:
        f.write(keys.public_pem(key.public_key()))
    rollback = RollbackStore(os.path.join(root, "rollback.json"))
    rollback.record("acme", "other", 3, "0" * 64)   # the store exists: it must not change
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])
    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g", [x], [y])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()
    signed = pack.package_files(model, name="demo", version="1.0.0", private_key=key, counter=2,
                                config_bytes=b'name: "demo"\nmax_batch_size: 4\n')
    return Setup(root, key, TrustStore(trust_dir), rollback, signed)


# -- sources ----------------------------------------------------------------------------------------
COMPONENTS = ["demo", "1", "2", "02", "config.pbtxt", "model.onnx", "metadata.json", "checksum.sha256",
              "checksum.sha256.sig", "extra.bin", "..", ".", "", "a b", "é", "x" * 129, "-", ".hidden"]
components = st.one_of(st.sampled_from(COMPONENTS), st.text(max_size=5))
rel_paths = st.one_of(st.sampled_from(["2/model.onnx", "2/metadata.json", "2/checksum.sha256", "2/checksum.sha256.sig",
                                       "config.pbtxt", "2/extra.bin", "1/model.onnx", "3/x", "2/../2/model.onnx",
                                       "/2/model.onnx", "2//model.onnx", "2/model.onnx/", "2/sub/x", "model.onnx"]),
                      st.lists(components, min_size=1, max_size=3).map("/".join))


@st.composite
def changed_bytes(draw, data: bytes) -> bytes:
    how = draw(st.sampled_from(["flip", "cut", "insert", "replace", "same"]))
    if how == "replace":
        return draw(st.binary(max_size=64))
    data = bytearray(data)
    edit_bytes(draw, data, how)
    return bytes(data)


@st.composite
def mutated_files(draw) -> dict:
    """The signed package with up to three edits (none at all now and then)."""
    files = dict(setup().signed)
    for _ in range(draw(st.integers(0, 3))):
        how = draw(st.sampled_from(["bytes", "bytes", "drop", "add", "rename", "copy"]))
        path = draw(st.sampled_from(sorted(files))) if files else None
        if how == "bytes" and path:
            files[path] = draw(changed_bytes(files[path]))
        elif how == "drop" and path:
            del files[path]
        elif how == "add":
            files[draw(rel_paths)] = draw(st.binary(max_size=32))
        elif how == "rename" and path:
            files[draw(rel_paths)] = files.pop(path)
        elif how == "copy" and path:
            files[draw(rel_paths)] = files[path]
    return files


@st.composite
def mappings(draw):
    files = draw(mutated_files()) if draw(st.integers(0, 3)) else draw(st.dictionaries(rel_paths, st.binary(max_size=32), max_size=6))
    odd = draw(st.sampled_from([None, None, None, "str value", "bytes key", "int key", "none value"]))
    if odd == "str value" and files:
        files[sorted(files)[0]] = "text"
    elif odd == "bytes key":
        files[draw(rel_paths).encode("utf-8", "surrogatepass")] = b"x"
    elif odd == "int key":
        files[7] = b"x"
    elif odd == "none value" and files:
        files[sorted(files)[-1]] = None
    return ("mapping", files)


MEMBER_TYPES = [tarfile.REGTYPE] * 6 + [tarfile.DIRTYPE, tarfile.SYMTYPE, tarfile.LNKTYPE, tarfile.CHRTYPE,
                                        tarfile.BLKTYPE, tarfile.FIFOTYPE, tarfile.CONTTYPE, b"S", b"Z"]
PAX_KEYS = ["path", "linkpath", "size", "uid", "mtime", "GNU.sparse.size", "GNU.sparse.map", "hdrcharset", "comment"]


@st.composite
def members(draw) -> list:
    """(TarInfo, data) pairs: the signed files under a top directory, edited, or random ones."""
    top = draw(st.sampled_from(["demo/", "demo/", "", "other/", "./demo/", "/demo/"]))
    out = []
    if draw(st.integers(0, 3)):
        for path, data in sorted(draw(mutated_files()).items()):
            out.append((tarfile.TarInfo(top + str(path)), data))
        if draw(st.booleans()):
            out.insert(0, (_typed(top.rstrip("/") or "demo", tarfile.DIRTYPE), None))
    for _ in range(draw(st.integers(0 if out else 1, 3))):
        info = _typed(draw(st.one_of(rel_paths.map(lambda p: top + p), rel_paths)), draw(st.sampled_from(MEMBER_TYPES)))
        info.linkname = draw(st.sampled_from(["demo/2/model.onnx", "/etc/passwd", "../x", ""]))
        if draw(st.integers(0, 3)) == 0:
            info.pax_headers = draw(st.dictionaries(st.sampled_from(PAX_KEYS), st.one_of(
                st.sampled_from(["demo/2/model.onnx", "../../x", "99999999999", "-1", "0", "1e3"]), st.text(max_size=6)), max_size=2))
        out.insert(draw(st.integers(0, len(out))), (info, draw(st.binary(max_size=32)) if info.isreg() else None))
    if out and draw(st.integers(0, 5)) == 0:
        out.append(out[draw(st.integers(0, len(out) - 1))])   # a duplicate
    return out


def _typed(name: str, kind) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type = kind
    return info


def tar_bytes(entries: list, fmt) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=fmt) as tar:
        for info, data in entries:
            info.size = len(data) if data is not None else 0
            tar.addfile(info, io.BytesIO(data) if data is not None else None)
    return buffer.getvalue()


def patch_size(data: bytearray, offset: int, size: int) -> None:
    """Set the size field of the ustar header at `offset` (checksum recomputed)."""
    data[offset + 124: offset + 136] = b"%011o\0" % size if size < 8**11 else b"\x80" + size.to_bytes(11, "big")
    data[offset + 148: offset + 156] = b" " * 8
    data[offset + 148: offset + 156] = b"%06o\0 " % sum(data[offset: offset + 512])


@st.composite
def archives(draw):
    fmt = draw(st.sampled_from([tarfile.PAX_FORMAT, tarfile.GNU_FORMAT, tarfile.USTAR_FORMAT]))
    try:
        data = bytearray(tar_bytes(draw(members()), fmt))
    except (ValueError, UnicodeError, tarfile.TarError):   # tarfile itself refused to write it
        data = bytearray(draw(st.binary(max_size=1024)))
    if len(data) >= 512 and draw(st.integers(0, 4)) == 0:
        patch_size(data, 512 * draw(st.integers(0, len(data) // 512 - 1)), draw(st.sampled_from([1 << 20, 1 << 33, 8**11, 2**62])))
    if draw(st.integers(0, 4)) == 0:
        data = bytearray(draw(changed_bytes(bytes(data))))
    packing = draw(st.sampled_from(["tar", "tar", "gz", "gz", "bz2", "xz"]))
    data = {"tar": bytes, "gz": gzip.compress, "bz2": bz2.compress, "xz": lzma.compress}[packing](bytes(data))
    if packing != "tar" and draw(st.integers(0, 4)) == 0:
        data = draw(changed_bytes(data))
    return ("archive", data, draw(st.sampled_from([".tar", ".tar.gz", ".tgz"])))


@st.composite
def directories(draw):
    """A package written as a directory, with links, FIFOs, stray directories and odd names."""
    files = draw(mutated_files())
    extras = draw(st.lists(st.tuples(rel_paths, st.sampled_from(["symlink", "hardlink", "fifo", "dir", "file"])), max_size=2))
    return ("directory", files, extras, draw(st.sampled_from(["model dir", "model dir", "version dir"])))


def _write_directory(where: str, files: dict, extras: list) -> str:
    model_dir = os.path.join(where, "demo")
    os.mkdir(model_dir)
    for path, data in list(files.items()) + [(p, b"x") for p, k in extras if k == "file"]:
        target = os.path.normpath(os.path.join(model_dir, str(path).lstrip("/")))
        if not target.startswith(model_dir + os.sep) or not isinstance(data, bytes):
            continue
        try:
            os.makedirs(os.path.dirname(target), exist_ok=True)
            with open(target, "wb") as f:
                f.write(data)
        except (OSError, ValueError):   # a name the file system refuses (NUL, too long, a file in the way)
            pass
    for path, kind in extras:
        target = os.path.normpath(os.path.join(model_dir, path.lstrip("/")))
        if not target.startswith(model_dir + os.sep) or "\0" in target or os.path.lexists(target):
            continue
        try:
            os.makedirs(os.path.dirname(target), exist_ok=True)
            if kind == "symlink":
                os.symlink(os.path.join(model_dir, "2", "model.onnx"), target)
            elif kind == "hardlink":
                os.link(os.path.join(model_dir, "2", "model.onnx"), target)
            elif kind == "fifo":
                os.mkfifo(target)
            elif kind == "dir":
                os.mkdir(target)
        except (OSError, ValueError):
            pass
    return model_dir


def _tree(root: str) -> dict:
    out = {}
    for directory, dirs, names in os.walk(root):
        for name in dirs + names:
            st_ = os.lstat(os.path.join(directory, name))
            out[os.path.join(directory, name)] = (st_.st_mode, st_.st_size, st_.st_mtime_ns)
    return out


def check_source(case) -> None:
    s = setup()
    work = tempfile.mkdtemp(dir=s.root)
    try:
        if case[0] == "mapping":
            source = case[1]
        elif case[0] == "archive":
            source = os.path.join(work, "pkg" + case[2])
            with open(source, "wb") as f:
                f.write(case[1])
        else:
            source = _write_directory(work, case[1], case[2])
            if case[3] == "version dir":
                source = os.path.join(source, "2")
        before, tree, marks = open_fds(), _tree(s.root), open(s.rollback.path, "rb").read()
        try:
            pkg = verify_package(source, trust=s.trust, tenant="acme", rollback=s.rollback)
        except Exception as e:   # the property is about what may escape
            assert_refusal(e)
            note(e.code.name)
        else:
            with pkg:
                got = {path: f.bytes() for path, f in pkg.files.items()}
            assert got == s.signed, f"accepted a package that is not the signed one: {sorted(got)}"
            note("verified")
        del source
        assert_no_fd_leak(before)
        assert _tree(s.root) == tree, "intake changed files beside the source"
        assert open(s.rollback.path, "rb").read() == marks
    finally:
        shutil.rmtree(work)


def test_upload_mappings():
    run(mappings(), check_source, default=150)


def test_tar_archives():
    run(archives(), check_source, default=150)


def test_directories():
    run(directories(), check_source, default=80)


# -- the signed documents alone -------------------------------------------------------------------
def _documents():
    signed = setup().signed
    return {"manifest": (manifest.parse, signed["2/checksum.sha256"]),
            "metadata": (metadata.parse, signed["2/metadata.json"]),
            "envelope": (signing.read_envelope, signed["2/checksum.sha256.sig"])}


def _json(data: bytes) -> dict:
    return boundedjson.loads(data, code=Code.E_INTERNAL, max_bytes=1 << 20, max_depth=8, what="")


@st.composite
def document_inputs(draw):
    which = draw(st.sampled_from(["manifest", "metadata", "envelope"]))
    original = _documents()[which][1]
    if which != "manifest" and draw(st.integers(0, 2)) == 0:   # the JSON, one value replaced
        obj = _json(original)
        key = draw(st.sampled_from(sorted(obj) + ["extra"]))
        obj[key] = draw(st.one_of(
            st.none(), st.booleans(), st.integers(), st.floats(allow_nan=False, allow_infinity=False), st.text(max_size=12),
            st.sampled_from(["1.0.0", "01.0.0", "1.0.0-rc.1+b", "1" * 5000 + ".0.0", "2024-02-30T00:00:00Z", "9999-12-31T23:59:59Z"]),
            st.lists(st.dictionaries(st.sampled_from(["name", "dtype", "shape"]), st.one_of(st.text(max_size=4), st.lists(st.integers())),
                                     max_size=3), max_size=2)))
        return which, boundedjson.dumps(obj) if draw(st.booleans()) else repr(obj).encode()
    return which, draw(changed_bytes(original))


def check_document(case) -> None:
    which, data = case
    parse, _ = _documents()[which]
    try:
        parse(data)
        note(f"{which} parsed")
    except Exception as e:
        assert_refusal(e)


def test_signed_documents():
    run(document_inputs(), check_document, default=300)


# -- regressions: bugs the fuzzer found ------------------------------------------------------------
def _with_value(path: str, key: str, value) -> dict:
    """The signed package's files with one value of the JSON document at `path` replaced (not signed again)."""
    signed = setup().signed
    obj = _json(signed[path])
    obj[key] = value
    return {**signed, path: boundedjson.dumps(obj)}


def _assert_tar_refused(what: str, data: bytes, code: Code) -> None:
    """verify_package refuses a .tar file holding `data` with `code`, and leaves no fd open."""
    s = setup()
    work = tempfile.mkdtemp(dir=s.root)
    try:
        path = os.path.join(work, "pkg.tar")
        with open(path, "wb") as f:
            f.write(data)
        before = open_fds()
        assert_refused(what, lambda: verify_package(path, trust=s.trust, tenant="acme", rollback=None), code)
        assert_no_fd_leak(before)
    finally:
        shutil.rmtree(work)


def test_a_signed_version_with_a_huge_number_is_e_metadata_invalid():
    """Was: loader/metadata.py `semver_key` accepted any number of digits, then int() refused
    more than 4300 with ValueError: a tenant's signed "version": "1"*5000 + ".0.0" (or
    "min_rtd_version") made verify_package raise ValueError, not E_METADATA_INVALID."""
    s = setup()
    files = pack.sign_files(_with_value("2/metadata.json", "version", "1" * 5000 + ".0.0"), s.key)
    assert_refused("a version of 5000 digits", lambda: verify_package(
        files, trust=s.trust, tenant="acme", rollback=None, now=datetime.datetime.now(datetime.timezone.utc)), Code.E_METADATA_INVALID)


def test_a_non_ascii_signature_in_the_envelope_is_e_sig_invalid():
    """Was: loader/signing.py `read_envelope` caught only binascii.Error from b64decode, which
    raises a plain ValueError for a non-ASCII string: any upload with "signature": "\u0080"
    made verify_package raise ValueError (read before any key is tried), not E_SIG_INVALID."""
    files = _with_value("2/checksum.sha256.sig", "signature", "\u0080")
    assert_refused("a non-ASCII signature", lambda: verify_package(files, trust=setup().trust, tenant="acme", rollback=None),
                   Code.E_SIG_INVALID)


def test_a_truncated_gzip_header_is_e_archive_invalid():
    """Was: loader/archive.py `read_archive` did not map the TypeError that tarfile's gzip
    header parser raises (ord(b"")) for a .tar of the 3 bytes 1f 8b 08: it escaped
    verify_package instead of E_ARCHIVE_INVALID."""
    _assert_tar_refused("a 3-byte archive", b"\x1f\x8b\x08", Code.E_ARCHIVE_INVALID)


def test_a_refused_upload_returns_its_package_budget():
    """Was: daemon/supervisor.py `_load` gave the upload's package_bytes charge back only on
    RtdError from verify_package: any other exception (the non-ASCII envelope above) kept it
    for good, until the tenant's loads were refused E_BUDGET_EXCEEDED."""
    s = setup()
    state = tempfile.mkdtemp(dir=s.root)
    tenant = TenantConfig(id="acme", token_sha256=(), trusted_keys=s.trust.directory, uid=60000, gid=60000)
    supervisor = Supervisor(Config(state_dir=state, unix_socket=os.path.join(state, "rtd.sock"), tenants=(tenant,)), zygote=None)
    supervisor.tenancies = {"acme": Tenancy(tenant, supervisor.config.limits, load_policy(None), supervisor.events,
                                            supervisor.metrics, spawn=None)}   # what start() does, without arming spares
    files = _with_value("2/checksum.sha256.sig", "signature", "\u0080")

    async def upload():
        try:
            await supervisor.load(tenant, "demo", files)
        except Exception:
            pass

    try:
        asyncio.run(upload())
        held = supervisor.ledger.usage("acme")["package_bytes"]["used"], supervisor.ledger.usage()["package_bytes"]["used"]
    finally:
        shutil.rmtree(state)
    assert held == (0, 0), f"a refused upload still holds {held[0]} bytes of the tenant's package budget"


# -- open: bugs the fuzzer found that are not fixed yet (each fails until it is) ---------------------
@pytest.mark.parametrize("fmt", [tarfile.PAX_FORMAT, tarfile.GNU_FORMAT], ids=["pax-header", "gnu-long-name"])
def test_bug_tar_header_claiming_2_62_bytes_escapes_as_memory_error(fmt):
    """Open (test_tar_archives, FUZZ_EXAMPLES=3000): tarfile reads a PAX ('x') or GNU long-name
    ('L') header's data in one fileobj.read(size) (tarfile.py `_proc_pax` / `_proc_gnulong`).
    In a plain .tar (mode "r:") a size field of 2^62 (base-256) raises MemoryError, which
    loader/archive.py `read_archive` (tarfile.open at line 102, or the member loop) does not map
    to E_ARCHIVE_INVALID: it escapes verify_package (INTERNAL through the front). 2^40 is enough
    on a 23 GiB host; 2^33 is refused, after an 8 GiB allocation. Compressed archives are refused."""
    name = "demo/2/" + "m" * 120 + ".onnx" if fmt == tarfile.GNU_FORMAT else "demo/2/model.onnx"
    info = tarfile.TarInfo(name)
    info.pax_headers = {"comment": "x"} if fmt == tarfile.PAX_FORMAT else {}
    data = bytearray(tar_bytes([(tarfile.TarInfo("demo/2/x"), b"abc"), (info, b"")], fmt))
    patch_size(data, 1024, 2**62)   # the second member's extended header (after 512 + 512 bytes)
    assert data[1024 + 156:1024 + 157] == (b"x" if fmt == tarfile.PAX_FORMAT else b"L")
    _assert_tar_refused("a tar header claiming 2^62 bytes", bytes(data), Code.E_ARCHIVE_INVALID)
