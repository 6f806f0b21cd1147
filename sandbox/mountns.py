"""The worker's filesystem: private propagation, a fresh read-only tmpfs root reached by
pivot_root, host directories bound read-only/nosuid/nodev/noexec, a size-capped tmpfs
at /scratch owned by the tenant, and a fresh /proc of the worker's own pid namespace.
A worker granted GPUs also gets a read-only tmpfs /dev holding exactly its grant's device
nodes (bound, nosuid/noexec: device nodes are the point) and the driver's libraries bound
read-only/nosuid/nodev at their host paths but NOT noexec: they are code, mapped by the
CUDA initialisation before seccomp (see gpu for what and why), and the header directories
NVRTC reads when CuPy compiles a kernel, bound read-only/nosuid/nodev/noexec at their host
paths (a path reached through a symlink gets the link too)."""
import os

from rtd.sandbox import syscalls as sc

NEW_ROOT = "/tmp"   # any existing directory: the tmpfs is mounted over it in the private namespace
HARDEN = sc.MS_NOSUID | sc.MS_NODEV | sc.MS_NOEXEC


def _remount_ro(path: str):
    # Keep the flags the kernel locked on the source mount (atime etc.): a user
    # namespace may add restrictions to a bind mount but never drop them.
    kept = os.statvfs(path).f_flag & (1024 | 2048 | 4096 | HARDEN)
    sc.mount(None, path, None, sc.MS_REMOUNT | sc.MS_BIND | sc.MS_RDONLY | HARDEN | kept)


def _bind_file(src: str, target: str, flags: int):
    """Bind the file `src` at `target` in the new root, remounted read-only with `flags`; the
    mount point is made in a tmpfs of the new root unless a directory bound earlier holds it."""
    target = NEW_ROOT + target
    if not os.path.lexists(target):
        os.makedirs(os.path.dirname(target), exist_ok=True)
        os.close(os.open(target, os.O_CREAT | os.O_WRONLY | os.O_CLOEXEC, 0o444))
    sc.mount(src, target, None, sc.MS_BIND)
    kept = os.statvfs(target).f_flag & (1024 | 2048 | 4096 | sc.MS_NODEV)   # locked flags, as in _remount_ro
    sc.mount(None, target, None, sc.MS_REMOUNT | sc.MS_BIND | sc.MS_RDONLY | flags | kept)


def _bind_dir(src: str):
    """Bind the host directory `src` at the same path in the new root, read-only and hardened."""
    target = NEW_ROOT + src
    os.makedirs(target, exist_ok=True)
    sc.mount(src, target, None, sc.MS_BIND | sc.MS_REC)
    _remount_ro(target)


def _link(path: str, real: str):
    """A symlink at `path` in the new root to `real` (bound there), unless `path` is there already."""
    if real != path and not os.path.lexists(NEW_ROOT + path):
        os.makedirs(os.path.dirname(NEW_ROOT + path), exist_ok=True)
        os.symlink(real, NEW_ROOT + path)


def _bind_gpu(grant):
    """/dev with the grant's device nodes only; the driver's libraries and the header
    directories at their host paths."""
    sc.mount("rtd-dev", NEW_ROOT + "/dev", "tmpfs", HARDEN, "size=64k,mode=0755")
    for node in grant.nodes:
        _bind_file(node, "/dev/" + os.path.basename(node), sc.MS_NOSUID | sc.MS_NOEXEC)
    _remount_ro(NEW_ROOT + "/dev")
    for path in grant.libraries:
        real = os.path.realpath(path)
        _link(path, real)   # a soname link outside the bound directories
        _bind_file(real, real, sc.MS_NOSUID | sc.MS_NODEV)
    for path in grant.headers:
        real = os.path.realpath(path)
        _bind_dir(real)
        _link(path, real)


def build_root(ro_binds: tuple[str, ...], scratch_bytes: int, uid: int, gid: int, gpu=None):
    """`gpu`: the worker's gpu.Grant, or None for a worker without a GPU (no /dev at all)."""
    sc.mount(None, "/", None, sc.MS_REC | sc.MS_PRIVATE)
    sc.mount("rtd-root", NEW_ROOT, "tmpfs", HARDEN, "size=1m,mode=0755")
    for src in ro_binds:
        if not os.path.isdir(src):
            raise OSError(2, f"ro_binds source {src} is not a directory")
        _bind_dir(src)
    for name in ("proc", "scratch", "oldroot") + (("dev",) if gpu else ()):
        os.mkdir(os.path.join(NEW_ROOT, name))
    if gpu:
        _bind_gpu(gpu)
    sc.mount("rtd-scratch", NEW_ROOT + "/scratch", "tmpfs", HARDEN,
             f"size={scratch_bytes},mode=0700,uid={uid},gid={gid}")
    sc.mount("proc", NEW_ROOT + "/proc", "proc", HARDEN)
    os.chdir(NEW_ROOT)
    sc.pivot_root(".", "oldroot")
    os.chdir("/")
    sc.umount2("/oldroot", sc.MNT_DETACH)
    os.rmdir("/oldroot")
    _remount_ro("/")
