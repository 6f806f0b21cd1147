"""rtd.beneath, the one way the supervisor opens what a tenant or a config names, against real
files of every kind: links, FIFOs, sockets, device nodes, hard links, mount points, a sparse
file far over its cap. Each case runs through openat2 and through the component-by-component
walk kept for kernels without it."""
import os
import socket
import stat
import subprocess
import threading

import pytest

from rtd import beneath
from rtd.beneath import Dir
from rtd.errors import Code, RtdError

SECRET = "TopSecretToken_4f1c9a"


@pytest.fixture(params=["openat2", "components"])
def mode(request):
    if request.param == "openat2" and not beneath.HAS_OPENAT2:
        pytest.skip("this kernel has no openat2 (5.6+): only the component walk is used here")
    return request.param == "openat2"


@pytest.fixture
def tree(tmp_path):
    """root/ (the tenant's) with a model directory, and outside it a root-only secret."""
    root = tmp_path / "root"
    (root / "m" / "1").mkdir(parents=True)
    (root / "m" / "config.pbtxt").write_text('name: "m"\n')
    (root / "m" / "1" / "model.onnx").write_bytes(b"onnx")
    secret_dir = tmp_path / "private"
    secret_dir.mkdir(mode=0o700)
    (secret_dir / "token").write_text(SECRET)
    os.chmod(secret_dir / "token", 0o600)
    return root, secret_dir / "token"


def refused(code: Code, fn, *args, **kwargs) -> RtdError:
    with pytest.raises(RtdError) as e:
        fn(*args, **kwargs)
    assert e.value.code is code, e.value
    assert SECRET not in str(e.value)
    return e.value


def test_files_and_directories_beneath_the_root_are_read(tree, mode):
    root, _ = tree
    with Dir.open(str(root), "repository", use_openat2=mode) as d:
        assert d.read("m/config.pbtxt", 1 << 20) == b'name: "m"\n'
        assert d.entries("m") == [("1", "a directory"), ("config.pbtxt", "a regular file")]
        with d.subdir("m") as m:
            assert m.read("1/model.onnx", 10) == b"onnx" and m.label == "repository/m"


def test_a_symlink_anywhere_is_refused_and_never_followed(tree, mode):
    root, secret = tree
    os.symlink(secret, root / "m" / "link.pbtxt")
    os.symlink(secret.parent, root / "m" / "linkdir")
    os.symlink(root / "m", root / "alias")
    with Dir.open(str(root), "repository", use_openat2=mode) as d:
        refused(Code.E_LINK_FORBIDDEN, d.read, "m/link.pbtxt", 1 << 20)
        refused(Code.E_LINK_FORBIDDEN, d.read, "m/linkdir/token", 1 << 20)
        refused(Code.E_LINK_FORBIDDEN, d.subdir, "alias")
        refused(Code.E_LINK_FORBIDDEN, d.read, "alias/config.pbtxt", 1 << 20)
        assert ("link.pbtxt", "a symlink") in d.entries("m")


def test_dot_dot_and_absolute_paths_are_refused(tree, mode):
    root, secret = tree
    with Dir.open(str(root), use_openat2=mode) as d:
        for path in ("../private/token", "m/../../private/token", str(secret), "m//config.pbtxt", "./m/config.pbtxt"):
            refused(Code.E_PATH_UNSAFE, d.read, path, 1 << 20)


def test_a_fifo_socket_or_device_is_refused_without_being_opened(tree, mode):
    root, _ = tree
    os.mkfifo(root / "m" / "fifo")
    listener = socket.socket(socket.AF_UNIX)
    listener.bind(str(root / "m" / "sock"))
    os.mknod(root / "m" / "dev", stat.S_IFCHR | 0o600, os.makedev(1, 3))   # /dev/null's numbers
    outcome = {}

    def read_all():   # a plain open() of the FIFO would block here for good
        with Dir.open(str(root), use_openat2=mode) as d:
            for name in ("fifo", "sock", "dev"):
                with pytest.raises(RtdError) as e:
                    d.read(f"m/{name}", 1 << 20)
                outcome[name] = e.value
    reader = threading.Thread(target=read_all, daemon=True)
    reader.start()
    reader.join(30)
    listener.close()
    assert not reader.is_alive(), "reading a FIFO blocked"
    assert {n: (e.code, e.detail.rsplit(" is ", 1)[1]) for n, e in outcome.items()} == {
        "fifo": (Code.E_SPECIAL_FILE, "a FIFO, not a regular file"),
        "sock": (Code.E_SPECIAL_FILE, "a socket, not a regular file"),
        "dev": (Code.E_SPECIAL_FILE, "a device node, not a regular file")}


def test_a_directory_where_a_file_is_expected_is_refused(tree, mode):
    root, _ = tree
    with Dir.open(str(root), use_openat2=mode) as d:
        refused(Code.E_SPECIAL_FILE, d.read, "m/1", 1 << 20)


def test_a_hard_link_is_refused_unless_the_caller_allows_it(tree, mode):
    root, _ = tree
    os.link(root / "m" / "1" / "model.onnx", root / "m" / "twin.onnx")
    with Dir.open(str(root), use_openat2=mode) as d:
        assert "2 hard links" in refused(Code.E_LINK_FORBIDDEN, d.read, "m/twin.onnx", 10).detail
        assert d.read("m/twin.onnx", 10, allow_links=True) == b"onnx"


def test_a_sparse_file_over_its_cap_is_refused_before_a_byte_is_read(tree, mode):
    root, _ = tree
    with open(root / "m" / "huge", "wb") as f:
        f.truncate(10 << 30)                      # 10 GiB, no block allocated
    with Dir.open(str(root), use_openat2=mode) as d:
        e = refused(Code.E_CONFIG_INVALID, d.read, "m/huge", 1 << 20, Code.E_CONFIG_INVALID)
    assert e.detail.endswith(f"is {10 << 30} bytes, over the 1048576-byte cap")


def test_another_mount_beneath_the_root_is_not_entered(tree, mode):
    root, _ = tree
    inner = root / "m" / "mnt"
    inner.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "tmpfs", str(inner)], capture_output=True, text=True)
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.strip()}")
    try:
        (inner / "f").write_text("x")
        with Dir.open(str(root), use_openat2=mode) as d:
            refused(Code.E_PATH_UNSAFE, d.read, "m/mnt/f", 10)
    finally:
        subprocess.run(["umount", "-l", str(inner)], check=False)


def test_a_listing_past_its_limit_is_refused(tree, mode):
    root, _ = tree
    for i in range(5):
        (root / f"e{i}").write_text("")
    with Dir.open(str(root), use_openat2=mode) as d:
        refused(Code.E_FILE_UNLISTED, d.entries, "", 3)
        assert len(d.entries()) == 6
