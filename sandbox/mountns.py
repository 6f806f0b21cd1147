"""The worker's filesystem: private propagation, a fresh read-only tmpfs root reached by
pivot_root, host directories bound read-only/nosuid/nodev/noexec, a size-capped tmpfs
at /scratch owned by the tenant, and a fresh /proc of the worker's own pid namespace."""
import os

from rtd.sandbox import syscalls as sc

NEW_ROOT = "/tmp"   # any existing directory: the tmpfs is mounted over it in the private namespace
HARDEN = sc.MS_NOSUID | sc.MS_NODEV | sc.MS_NOEXEC


def _remount_ro(path: str):
    # Keep the flags the kernel locked on the source mount (atime etc.): a user
    # namespace may add restrictions to a bind mount but never drop them.
    kept = os.statvfs(path).f_flag & (1024 | 2048 | 4096 | HARDEN)
    sc.mount(None, path, None, sc.MS_REMOUNT | sc.MS_BIND | sc.MS_RDONLY | HARDEN | kept)


def build_root(ro_binds: tuple[str, ...], scratch_bytes: int, uid: int, gid: int):
    sc.mount(None, "/", None, sc.MS_REC | sc.MS_PRIVATE)
    sc.mount("rtd-root", NEW_ROOT, "tmpfs", HARDEN, "size=1m,mode=0755")
    for src in ro_binds:
        if not os.path.isdir(src):
            raise OSError(2, f"ro_binds source {src} is not a directory")
        target = NEW_ROOT + src
        os.makedirs(target, exist_ok=True)
        sc.mount(src, target, None, sc.MS_BIND | sc.MS_REC)
        _remount_ro(target)
    for name in ("proc", "scratch", "oldroot"):
        os.mkdir(os.path.join(NEW_ROOT, name))
    sc.mount("rtd-scratch", NEW_ROOT + "/scratch", "tmpfs", HARDEN,
             f"size={scratch_bytes},mode=0700,uid={uid},gid={gid}")
    sc.mount("proc", NEW_ROOT + "/proc", "proc", HARDEN)
    os.chdir(NEW_ROOT)
    sc.pivot_root(".", "oldroot")
    os.chdir("/")
    sc.umount2("/oldroot", sc.MNT_DETACH)
    os.rmdir("/oldroot")
    _remount_ro("/")
