"""What the sandbox tests share: starting the echo worker, reading a worker's frames, a
process's /proc status, stopping a worker cleanly, putting a process in a cgroup, and a fake
GPU driver (device nodes, libraries, headers, version) for GPU workers on a host without one."""
import os
import socket
import tempfile

from rtd import wire
from rtd.sandbox import gpu


def received(sock):
    """The head of the worker's next frame (None at EOF); one frame in flight at a time."""
    try:
        return wire.Reader(sock).recv().head
    except EOFError:
        return None


def start_echo(zygote, identity, policy=None, args=()):
    """A confined rtd.sandbox.echo worker that has said hello: (handle, our socket)."""
    ours, theirs = socket.socketpair()
    handle = zygote.spawn("rtd.sandbox.echo:serve", policy=policy, identity=identity, sock=theirs, args=args)
    theirs.close()
    assert received(ours) == {"hello": list(args)}
    return handle, ours


def stop(handle, sock):
    sock.close()
    assert handle.wait(10).code == 0


def join(cgroup, pid: int):
    """Move `pid` into the WorkerCgroup's leaf in every hierarchy, as a helper joins it."""
    for path in cgroup.procs_files:
        with open(path, "w") as f:
            f.write(str(pid))


def proc_status(pid):
    with open(f"/proc/{pid}/status") as f:
        return {k: v.strip() for k, v in (line.split(":", 1) for line in f)}


def fake_gpu_driver(init: str, version: str) -> gpu.Driver:
    """/var/tmp/rtd-gpu-*/ (not /tmp: a worker's new root mounts a tmpfs over /tmp): dev/ with
    nvidiactl, nvidia0, nvidia1, nvidia-uvm, nvidia-uvm-tools and nvidia-modeset as real character
    devices, lib/ with a libcuda and a libnvidia-ml, each a versioned file and its soname link, two
    header directories: cupy/include (with cupy/complex.cuh) and cuda-13.0/include (cuda_fp16.h),
    the latter granted through the link cuda -> cuda-13.0 as a toolkit's often is, every header
    writable by anyone (only the filter and the read-only bind refuse), secret.h beside them (not
    granted), and the driver's `version` file. The caller removes the directory above dev_root."""
    top = tempfile.mkdtemp(prefix="rtd-gpu-", dir="/var/tmp")
    os.chmod(top, 0o755)   # a user-namespace worker binds from here as the tenant's uid
    dev, lib = os.path.join(top, "dev"), os.path.join(top, "lib")
    os.mkdir(dev, 0o755)
    os.mkdir(lib, 0o755)
    uvm = gpu.uvm_major() or 237   # no driver here: any free major stands for nvidia-uvm
    for name, major, minor in (("nvidiactl", 195, 255), ("nvidia0", 195, 0), ("nvidia1", 195, 1),
                               ("nvidia-modeset", 195, 254), ("nvidia-uvm", uvm, 0), ("nvidia-uvm-tools", uvm, 1)):
        os.mknod(os.path.join(dev, name), 0o600 | 0o020000, os.makedev(major, minor))
        os.chmod(os.path.join(dev, name), 0o666)   # as the driver makes them (mknod's mode goes through the umask)
    for stem in ("libcuda.so", "libnvidia-ml.so"):
        with open(os.path.join(lib, stem + ".999.1"), "wb") as f:
            f.write(b"\x7fELF" + bytes(8188))
        os.chmod(os.path.join(lib, stem + ".999.1"), 0o666)   # writable by anyone: only the read-only bind refuses
        os.symlink(stem + ".999.1", os.path.join(lib, stem + ".1"))
    for header in ("cupy/include/cupy/complex.cuh", "cuda-13.0/include/cuda_fp16.h", "secret.h"):
        os.makedirs(os.path.dirname(os.path.join(top, header)), 0o755, exist_ok=True)
        with open(os.path.join(top, header), "w") as f:
            f.write(f"// {header}\n")
        os.chmod(os.path.join(top, header), 0o666)
    os.symlink("cuda-13.0", os.path.join(top, "cuda"))
    includes = (os.path.join(top, "cupy/include"), os.path.join(top, "cuda/include"))
    with open(os.path.join(top, "version"), "w") as f:
        f.write(version + "\n")
    return gpu.Driver(dev_root=dev, lib_dirs=(lib,), init=init, include_dirs=includes, version_file=os.path.join(top, "version"))
